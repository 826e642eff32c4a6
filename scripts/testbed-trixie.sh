#!/usr/bin/env bash
# A Debian root of resel's live testbed (run as root; scripts/testbed.sh calls it): Debian 13
# ("trixie") by default, Debian sid with RESEL_TB_SUITE=sid (what scripts/testbed-sid.sh does).
#
#   scripts/testbed-trixie.sh up       build the root if needed, start everything (idempotent)
#   scripts/testbed-trixie.sh down     stop everything this script started (idempotent)
#   scripts/testbed-trixie.sh status   show what is running
#   scripts/testbed-trixie.sh restart-schedd
#                                      restart the pool's condor_schedd (its queue kept), as an
#                                      access point's administrator would; waits until it answers
#
# What `up` builds, beside the Slurm 22.05 clusters of scripts/testbed.sh (trixie's ports and
# names first, sid's in brackets; each suite's in the table of suites below):
#
#   the root       a Debian tree made once with debootstrap and reused while its recipe (suite
#                  and packages) is unchanged, in $RESEL_TB_CACHE/SUITE (default
#                  /var/cache/resel-testbed/trixie [sid]: outside the checkout, it survives `down`)
#   munged         the root's own, with the root's own key
#   cluster "tbc"  ["tbd"] Slurm 24.11 [26.05]: slurmctld 7017 + slurmd 7018 [7027 + 7028] (node
#                  `hostname -s`, 4 CPUs, partition debug), /etc/slurm/slurm.conf inside the root,
#                  so a login there needs no SLURM_CONF
#   slurmrestd     http://127.0.0.1:6821 [6822] (rest_auth/jwt, API v0.0.40-v0.0.42 [v0.0.42-
#                  v0.0.45]) + a token file
#   HTCondor       a personal pool, HTCondor 23.9 [25]: collector (127.0.0.1:9618 [9619]),
#                  negotiator, schedd, and a startd with one partitionable slot of 4 CPUs
#                  reselap's IDTOKEN in $RESEL_TB/SUITE/condor-tokens, for the htcondor2 bindings
#                  on this machine (as remote clients of the schedd and the collector)
#   sshd           127.0.0.1:2223 [2224] inside the root: the access point. User reselap (exists
#                  only in the root) logs in with a key; alias tb-ap in $RESEL_TB/SUITE/ssh/config
#   the env file   $RESEL_TB/SUITE/testbed.env, KEY=VALUE lines that scripts/testbed.sh copies into
#                  its own testbed.env; written last, only when all of the above works
#
# Why it is built this way:
#   * The newer daemons come from Debian's own packages (Debian 12 has no HTCondor and no Slurm
#     newer than 22.05), so the root is a real Debian 13 or sid and nothing is compiled here.
#   * The two roots are the same recipe for two suites, so they differ only where Debian does:
#     the versions, the HTCondor package's name (htcondor in trixie, condor in sid), and the
#     ports and names in the table of suites; both can run at once, beside the 22.05 clusters.
#   * debootstrap's --include resolver fails on htcondor (the virtual package
#     python3-cffi-backend-api-max): the root is bootstrapped first, then apt-get installs inside it.
#   * Every command inside the root runs in a private mount namespace (unshare) that mounts /proc
#     and binds /dev for it: the mounts disappear with the last process using them, so neither a
#     crash nor `down` can leave a mount behind on the host, and the cache can always be removed.
#   * Jobs run in the access point's execute slots as `nobody` (STARTER_ALLOW_RUNAS_OWNER = False)
#     and reselap's home is private: like an OSG slot, a job cannot read the submitter's files and
#     exchanges them only through HTCondor's file transfer and condor_chirp.
#   * Every process this script starts carries RESEL_TB_OWNER=$RESEL_TB/SUITE in its environment
#     (scripts/testbed.sh's mark is RESEL_TB_OWNER=$RESEL_TB, the other suite's its own: none
#     ever stops another's daemons). Daemons that clear their environment (slurmscriptd, sshd's
#     sessions, a job's processes) are recognised by their root directory instead: only this
#     script, under its lock, ever enters the root, so whatever runs inside it is ours. `down`
#     touches nothing else.
#   * The htcondor2 bindings build a job's ad where they run and insist that its initialdir exists
#     there: HTCondorBindings is meant to run on the access point itself. To let it run on this
#     machine all the same, the root holds a link $RESEL_TB_CACHE/SUITE to its own top, so that
#     the host's path of reselap's work directory ($ROOT$WORK_C, TB_WORK_C_HOST) names the same
#     directory inside the root too, as if the access point's disk were mounted at the same place.
#   * The chroot's users (munge, slurm, condor, reselap) have the root's own uids; on the host
#     they may show under other names. Nothing in the root is shared with the host's users.
#
# Things learnt the hard way (Debian 13: Slurm 24.11.5, HTCondor 23.9.6, OpenSSH 10.0):
#   * slurmd 24.11 refuses to start without a cgroup filesystem unless cgroup.conf (next to
#     slurm.conf) says CgroupPlugin=disabled.
#   * In a chroot condor_starter cannot unshare a mount namespace: jobs go on hold ("errno=22
#     Invalid argument") unless MOUNT_UNDER_SCRATCH is empty and USE_PID_NAMESPACES = false.
#   * condor_reconfig from inside the chroot is refused (method FS): a changed config restarts
#     condor_master instead.
#   * slurmrestd loads every openapi plugin by default, and the slurmdbd one dies without slurmdbd:
#     only openapi/slurmctld is loaded.
set -Eeuo pipefail
trap 'echo "testbed-trixie.sh: failed at line $LINENO: $BASH_COMMAND" >&2' ERR

SAFE_PATH='^/[A-Za-z0-9._/+-]+$'
TB=${RESEL_TB:-/tmp/resel-testbed}
if [[ ! $TB =~ $SAFE_PATH ]]; then
    echo "testbed-trixie.sh: RESEL_TB must be an absolute path of [A-Za-z0-9._/+-] (got '$TB')" >&2
    exit 2
fi
TB=${TB%/}
# Which Debian root: trixie (Debian 13) unless RESEL_TB_SUITE says sid (scripts/testbed-sid.sh).
SUITE=${RESEL_TB_SUITE:-trixie}
case $SUITE in
    trixie)
        DEBIAN="Debian 13"
        SKIP_VAR=RESEL_TB_TRIXIE
        CONDOR_PACKAGE=htcondor
        SLURM_SERIES=24.11
        SSH_PORT=2223
        CTLD_PORT=7017
        SLURMD_PORT=7018
        REST_PORT=6821
        REST_PROBE=v0.0.42   # an API version its slurmrestd serves (v0.0.40-v0.0.42)
        CONDOR_PORT=9618
        CLUSTER=tbc
        FIRST_JOB=900000     # tba's ids start at 1000, tbb's at 500000: ids never collide
        CONDOR_EXTRA=
        ;;
    sid)
        DEBIAN="Debian sid"
        SKIP_VAR=RESEL_TB_SID
        CONDOR_PACKAGE=condor  # sid's name for it (trixie's is htcondor)
        SLURM_SERIES=26.05
        SSH_PORT=2224
        CTLD_PORT=7027
        SLURMD_PORT=7028
        REST_PORT=6822
        REST_PROBE=v0.0.44   # served by 26.05 (v0.0.42-v0.0.45)
        CONDOR_PORT=9619
        CLUSTER=tbd
        FIRST_JOB=2000000    # above tbc's 900000 and everything below
        # Beside the trixie pool on the same machine: its own port for condor_shared_port (the
        # default, 9618, is the trixie pool's).
        CONDOR_EXTRA="SHARED_PORT_PORT = $CONDOR_PORT
"
        ;;
    *)
        echo "testbed-trixie.sh: RESEL_TB_SUITE must be trixie or sid (got '$SUITE')" >&2
        exit 2
        ;;
esac
NAME=testbed-$SUITE        # how this script calls itself in messages (testbed-sid.sh runs it for sid)
TT=$TB/$SUITE                           # host side: keys, ssh config, token, env file, logs
OWNER_MARK="RESEL_TB_OWNER=$TT"
# Ours are in our PID namespace: a testbed in a container or in fresh-check.sh's namespaces has
# the same paths (and mark) inside its own root, and its processes show here too.
PIDNS=$(readlink /proc/$$/ns/pid)
same_pidns() { [ "$(readlink "/proc/$1/ns/pid" 2>/dev/null)" = "$PIDNS" ]; }

CACHE=${RESEL_TB_CACHE:-/var/cache/resel-testbed}
if [[ ! $CACHE =~ $SAFE_PATH ]]; then
    echo "testbed-trixie.sh: RESEL_TB_CACHE must be an absolute path of [A-Za-z0-9._/+-] (got '$CACHE')" >&2
    exit 2
fi
CACHE=${CACHE%/}
REPO=$(cd "$(dirname "$0")/.." && pwd -P)
ROOT=$CACHE/$SUITE
MIRROR=${RESEL_TB_MIRROR:-http://deb.debian.org/debian}
# --no-install-recommends keeps the root small; python3 runs the agent and the chirp wrapper.
PACKAGES=("$CONDOR_PACKAGE" slurmctld slurmd slurm-client slurmrestd slurm-wlm-jwt-plugin munge
    openssh-server python3 procps)
# Written into the root when it is complete: a root built from another recipe is rebuilt.
RECIPE="resel-testbed root v1: $SUITE minbase + ${PACKAGES[*]}"
STAMP=/etc/resel-testbed-root

NODE=$(hostname -s)
AP_USER=reselap
AP_HOME=/home/$AP_USER
CPUS=4

# Paths inside the root (IN) and the same seen from the host (HR).
IN=/var/lib/resel-tb
HR=$ROOT$IN
SLURM_CONF=/etc/slurm/slurm.conf
WORK_C=$AP_HOME/resel-work
SSH_DIR=$TT/ssh
SSH_CONFIG=$SSH_DIR/config
SSH_KEY=$SSH_DIR/id_ed25519_$AP_USER
KNOWN_HOSTS=$SSH_DIR/known_hosts
TOKEN_FILE=$TT/rest/token
CONDOR_TOKENS=$TT/condor-tokens
ENV_FILE=$TT/testbed.env
BUILD_LOG=$TT/build.log

T_START=$(date +%s%N)
say() { printf '%s: [%5.1fs] %s\n' "$NAME" "$((($(date +%s%N) - T_START) / 1000000))e-3" "$*"; }
die() { echo "$NAME.sh: $*" >&2; exit 1; }
ms_since() { echo $((($(date +%s%N) - $1) / 1000000)); }

log_tail() {
    local f
    for f in "$@"; do
        [ -f "$f" ] || continue
        echo "---- last lines of $f ----" >&2
        tail -n 25 "$f" >&2 || true
    done
}

wait_until() {  # wait_until SECONDS DESCRIPTION COMMAND...
    local limit=$1 what=$2 end
    shift 2
    end=$(($(date +%s%N) + limit * 1000000000))
    until "$@" >/dev/null 2>&1; do
        if (($(date +%s%N) > end)); then
            echo "$NAME.sh: timed out after ${limit}s waiting for $what" >&2
            return 1
        fi
        sleep 0.3
    done
}

# ---------------------------------------------------------------- running inside the root

CLEAN_ENV=(env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8
    HOME=/root "$OWNER_MARK")
# A private mount namespace with /proc and /dev for the tree "$0", then chroot into it.
INTO=(unshare --mount --propagation private -- /bin/sh -c
    'mount -t proc proc "$0/proc" && mount --rbind /dev "$0/dev" && exec chroot "$0" "$@"')

# in_dir DIR COMMAND...: COMMAND inside the tree DIR, with a clean environment (the caller's
# SLURM_CONF, say, names a file of the other testbed), /proc and /dev mounted in a private mount
# namespace that ends with the command and everything it leaves running.
in_dir() { "${CLEAN_ENV[@]}" "${INTO[@]}" "$@"; }
in_root() { in_dir "$ROOT" "$@"; }
as_ap() { in_root runuser -u "$AP_USER" -- env HOME="$AP_HOME" USER="$AP_USER" "$@"; }
sl() { in_root timeout 15 "$@"; }

# A daemon in the root: its own session, no terminal or pipe of ours (a caller capturing our
# output would wait for it forever), the locks' descriptors closed.
spawn() {
    local logf=$1
    shift
    setsid "${CLEAN_ENV[@]}" "${INTO[@]}" "$ROOT" "$@" </dev/null >>"$logf" 2>&1 8>&- 9>&-
}

# The same for a daemon that stays in the foreground: the subshell execs it at once, so no
# shell of ours stays behind holding our output or a lock.
spawn_bg() {
    local logf=$1
    shift
    (exec setsid "${CLEAN_ENV[@]}" "${INTO[@]}" "$ROOT" "$@") </dev/null >>"$logf" 2>&1 8>&- 9>&- &
}

# ---------------------------------------------------------------- processes we own

alive() {
    local st
    [ -n "${1:-}" ] && kill -0 "$1" 2>/dev/null || return 1
    st=$(cat "/proc/$1/stat" 2>/dev/null || true)
    st=${st##*) }
    [ -n "$st" ] && [ "${st%% *}" != Z ]
}

in_our_root() { same_pidns "$1" && [ "$(readlink "/proc/$1/root" 2>/dev/null)" = "$ROOT" ]; }

marked() { same_pidns "$1" && tr '\0' '\n' 2>/dev/null <"/proc/$1/environ" | grep -qxF "$OWNER_MARK"; }

is_ours() { alive "$1" && { marked "$1" || in_our_root "$1"; }; }

pid_from() { [ -f "$1" ] && tr -dc '0-9' <"$1" || true; }

running_pid() {  # the pid in a pid file (host path) if that process is alive and ours
    local pid
    pid=$(pid_from "$1")
    if [ -n "$pid" ] && is_ours "$pid"; then echo "$pid"; fi
}

kill_pid() {  # TERM (or $2), wait up to 15 s, then KILL
    local pid=$1 sig=${2:-TERM} i
    alive "$pid" || return 0
    kill "-$sig" "$pid" 2>/dev/null || true
    for ((i = 0; i < 75; i++)); do
        alive "$pid" || return 0
        sleep 0.2
    done
    kill -KILL "$pid" 2>/dev/null || true
    sleep 0.2
}

stop_pidfile() {  # stop_pidfile NAME HOST_PIDFILE [SIGNAL]
    local pid
    pid=$(running_pid "$2")
    if [ -n "$pid" ]; then
        say "stopping $1 (pid $pid)"
        kill_pid "$pid" "${3:-TERM}"
    fi
    rm -f "$2"
}

# Every live process that is ours (marked, or inside the root).
our_pids() {
    local p pid
    for p in /proc/[0-9]*; do
        pid=${p#/proc/}
        [ "$pid" = $$ ] || [ "$pid" = "$BASHPID" ] && continue
        if in_our_root "$pid" || marked "$pid"; then echo "$pid"; fi
    done
}

listening() { [ -n "$(ss -ltnH "sport = :$1" 2>/dev/null)" ]; }

free_port() {
    local port=$1 pids pid
    pids=$(ss -ltnpH "sport = :$port" 2>/dev/null | grep -o 'pid=[0-9]*' | cut -d= -f2 | sort -u || true)
    for pid in $pids; do
        if is_ours "$pid"; then
            say "stopping our leftover process $pid on port $port"
            kill_pid "$pid"
        else
            die "port $port is used by a process this testbed did not start: pid $pid ($(tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline" || true))"
        fi
    done
}

lock() {
    mkdir -p "$CACHE"
    exec 8>"$CACHE/.$SUITE.lock"
    flock -w 900 8 || die "another $NAME.sh holds $CACHE/.$SUITE.lock"
}

# The root serves one testbed at a time: refuse a root another $RESEL_TB is running.
check_owner() {
    local other pid
    other=$(cat "$HR/owner" 2>/dev/null || true)
    [ -z "$other" ] || [ "$other" = "$TT" ] && return 0
    for pid in $(pids_in "$ROOT"); do
        die "$ROOT is in use by the testbed in ${other%/"$SUITE"} (pid $pid); take that one down first"
    done
}

# ---------------------------------------------------------------- the root

root_ok() { [ "$(cat "$ROOT$STAMP" 2>/dev/null)" = "$RECIPE" ]; }

ensure_debootstrap() {
    command -v debootstrap >/dev/null && return 0
    say "installing debootstrap"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >>"$BUILD_LOG" 2>&1 ||
        { apt-get update -qq >>"$BUILD_LOG" 2>&1 &&
            DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >>"$BUILD_LOG" 2>&1; } ||
        { log_tail "$BUILD_LOG"; die "cannot install debootstrap (no package source reachable?); it builds the $DEBIAN root. $SKIP_VAR=0 skips this part of the testbed"; }
}

# Build the root in $ROOT.partial and move it into place only when complete, so an interrupted
# build is never taken for a root.
build_root() {
    local part=$ROOT.partial t0 t1
    case $(realpath -m "$CACHE")/ in
        "$REPO"/*) die "RESEL_TB_CACHE ($CACHE) is inside the checkout $REPO; the root must live outside it" ;;
    esac
    mkdir -p "$CACHE" "$TT"
    : >"$BUILD_LOG"
    ensure_debootstrap
    # An earlier root of another recipe, or a partial build: nothing may still run inside.
    for d in "$ROOT" "$part"; do
        [ -e "$d" ] || continue
        for pid in $(pids_in "$d"); do die "process $pid still runs inside $d; run: RESEL_TB_SUITE=$SUITE testbed-trixie.sh down"; done
        say "removing $d"
        rm -rf --one-file-system "$d"
    done
    t0=$(date +%s%N)
    say "bootstrapping Debian $SUITE into $part from $MIRROR (log: $BUILD_LOG)"
    # In a private mount namespace too: debootstrap mounts /proc and /sys in the target, and a
    # killed debootstrap would otherwise leave them mounted.
    unshare --mount --propagation private -- debootstrap --variant=minbase "$SUITE" "$part" "$MIRROR" \
        >>"$BUILD_LOG" 2>&1 8>&- 9>&- ||
        { log_tail "$BUILD_LOG"; die "debootstrap of Debian $SUITE failed (it needs $MIRROR; RESEL_TB_MIRROR picks another mirror, $SKIP_VAR=0 skips this part)"; }
    t1=$(date +%s%N)
    say "bootstrapped in $(ms_since "$t0") ms; installing ${PACKAGES[*]}"
    # No daemon may start while packages are installed (policy-rc.d "101": action forbidden).
    printf '#!/bin/sh\nexit 101\n' >"$part/usr/sbin/policy-rc.d"
    chmod 755 "$part/usr/sbin/policy-rc.d"
    # sid's Release file is valid for a week only (Valid-Until; trixie's, a stable release, has
    # none): apt refuses a mirror, or a mirror's snapshot, older than that. The signatures are
    # still checked.
    echo 'Acquire::Check-Valid-Until "false";' >"$part/etc/apt/apt.conf.d/99resel-testbed"
    {
        in_dir "$part" apt-get update -q &&
            in_dir "$part" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${PACKAGES[@]}" &&
            in_dir "$part" apt-get clean
    } >>"$BUILD_LOG" 2>&1 8>&- 9>&- || { log_tail "$BUILD_LOG"; die "installing ${PACKAGES[*]} in the Debian $SUITE root failed"; }
    say "installed in $(ms_since "$t1") ms"
    echo "$RECIPE" >"$part$STAMP"
    mv "$part" "$ROOT"
    say "root $ROOT built in $(ms_since "$t0") ms ($(du -sh "$ROOT" | cut -f1))"
}

pids_in() {  # pids of processes whose root is the tree $1
    local p
    for p in /proc/[0-9]*; do
        [ "$(readlink "$p/root" 2>/dev/null)" = "$1" ] && same_pidns "${p#/proc/}" && echo "${p#/proc/}"
    done
    return 0
}

ensure_root() {
    if root_ok; then
        say "reusing the Debian $SUITE root $ROOT"
    else
        build_root
    fi
    ensure_extras
}

# Packages the tests run inside the root's jobs but its daemons do not need: GROMACS (the task
# data campaign runs real `gmx` on tbc and in the pool's slots, tests/test_gromacs_data_live.py).
# Installed into the root when missing, so a root cached before they were asked for is not
# rebuilt. Only the Debian 13 root: the campaign runs on tbc and its pool, not on sid's.
# RESEL_TB_GROMACS=0 leaves them out (the campaign test then fails on tbc and the pool).
EXTRAS=(gromacs)
ensure_extras() {
    [ "${RESEL_TB_GROMACS:-1}" = 0 ] && return 0
    [ "$SUITE" = trixie ] || return 0
    in_root sh -c 'command -v gmx' >/dev/null 2>&1 && return 0
    local t0; t0=$(date +%s%N)
    say "installing ${EXTRAS[*]} in the root (once; RESEL_TB_GROMACS=0 skips it)"
    printf '#!/bin/sh\nexit 101\n' >"$ROOT/usr/sbin/policy-rc.d"
    chmod 755 "$ROOT/usr/sbin/policy-rc.d"
    {
        in_root apt-get update -q &&
            in_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${EXTRAS[@]}" &&
            in_root apt-get clean
    } >>"$BUILD_LOG" 2>&1 8>&- 9>&- || { log_tail "$BUILD_LOG"; die "installing ${EXTRAS[*]} in the Debian $SUITE root failed (RESEL_TB_GROMACS=0 skips it)"; }
    say "installed ${EXTRAS[*]} in $(ms_since "$t0") ms"
}

# ---------------------------------------------------------------- user, dirs, munge

ensure_user() {
    if ! in_root id "$AP_USER" >/dev/null 2>&1; then
        say "creating user $AP_USER in the root"
        in_root useradd --create-home --home-dir "$AP_HOME" --shell /bin/bash "$AP_USER"
    fi
    # "!" (locked) makes sshd refuse even key logins without PAM; "*" means "no password".
    in_root usermod -p '*' "$AP_USER"
    # Private: a job running as nobody in an execute slot cannot read the access point's files.
    chmod 700 "$ROOT$AP_HOME"
    in_root install -d -o "$AP_USER" -g "$AP_USER" -m 700 "$WORK_C"
    # The host's path of the root names the same tree inside it (see the header). A relative link
    # (../../../ for /var/cache/resel-testbed/trixie), so that on the host too it points at the
    # root and never out of it.
    local up
    up=$(dirname "$ROOT" | sed 's|/[^/]*|../|g')
    mkdir -p "$ROOT$(dirname "$ROOT")"
    [ "$(readlink "$ROOT$ROOT" 2>/dev/null)" = "$up" ] || ln -sfn "$up" "$ROOT$ROOT"
}

ensure_dirs() {
    umask 022
    mkdir -p "$TT" "$SSH_DIR" "$TT/rest" "$HR/run" "$HR/log" "$HR/ssh" "$HR/$CLUSTER/state" "$HR/$CLUSTER/spool"
    chmod 755 "$TT" "$SSH_DIR" "$TT/rest" "$HR" "$HR/run" "$HR/log" "$HR/ssh" "$HR/$CLUSTER" "$HR/$CLUSTER/spool"
    chmod 700 "$HR/$CLUSTER/state"
    echo "$TT" >"$HR/owner"
    # The node's name resolves inside the root too (HTCondor looks itself up by it).
    grep -qE "^127\.0\.0\.1[[:space:]].*\b$NODE\b" "$ROOT/etc/hosts" || echo "127.0.0.1 $NODE" >>"$ROOT/etc/hosts"
    # What systemd's tmpfiles would make at boot.
    in_root install -d -o munge -g munge -m 755 /run/munge
    in_root install -d -o condor -g condor -m 755 /run/condor /run/lock/condor
    in_root install -d -m 755 /run/sshd
}

munge_works() { in_root sh -c 'munge -n </dev/null | unmunge' >/dev/null 2>&1; }

ensure_munge() {
    if [ -n "$(running_pid "$HR/run/munged.pid")" ] && munge_works; then return 0; fi
    stop_pidfile munged "$HR/run/munged.pid"
    # The package made a key; a root built by hand may lack it.
    in_root sh -c '[ -s /etc/munge/munge.key ] || mungekey --create --keyfile=/etc/munge/munge.key'
    in_root chown munge:munge /etc/munge/munge.key
    chmod 400 "$ROOT/etc/munge/munge.key"
    rm -f "$ROOT/run/munge/munged.pid"
    say "starting munged"
    spawn "$TT/munged.out" runuser -u munge -- /usr/sbin/munged --pid-file=/run/munge/munged.pid
    wait_until 10 "munged" munge_works || { log_tail "$ROOT/var/log/munge/munged.log" "$TT/munged.out"; die "munged did not start"; }
    cp "$ROOT/run/munge/munged.pid" "$HR/run/munged.pid"
}

# ---------------------------------------------------------------- slurm 24.11

write_if_changed() {  # write_if_changed HOST_PATH MODE < content; prints "changed" when it did
    local f=$1 mode=$2
    cat >"$f.new"
    chmod "$mode" "$f.new"
    if [ -f "$f" ] && cmp -s "$f.new" "$f"; then rm -f "$f.new"; else mv -f "$f.new" "$f" && echo changed; fi
}

write_slurm_conf() {
    local d=$IN/$CLUSTER c1 c2
    c1=$(write_if_changed "$ROOT/etc/slurm/cgroup.conf" 644 <<EOF
# Generated by scripts/testbed-trixie.sh. No cgroup filesystem in the root: slurmd $SLURM_SERIES would
# refuse to start ("No filesystem mounted on /sys/fs/cgroup") without this.
CgroupPlugin=disabled
EOF
    )
    c2=$(write_if_changed "$ROOT$SLURM_CONF" 644 <<EOF
# Generated by scripts/testbed-trixie.sh: cluster $CLUSTER (Slurm $SLURM_SERIES) of resel's test bed.
ClusterName=$CLUSTER
SlurmctldHost=$NODE(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# JWT as the alternative authentication, for slurmrestd on 127.0.0.1:$REST_PORT.
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key=$d/jwt.key
StateSaveLocation=$d/state
SlurmdSpoolDir=$d/spool
SlurmctldPidFile=$IN/run/slurmctld.pid
SlurmdPidFile=$IN/run/slurmd.pid
SlurmctldLogFile=$IN/log/slurmctld.log
SlurmdLogFile=$IN/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
SlurmdParameters=config_overrides
ReturnToService=2
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SwitchType=switch/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=1,bf_resolution=5,sched_interval=2,sched_min_interval=100000
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
FirstJobId=$FIRST_JOB
KillWait=2
MinJobAge=60
InactiveLimit=0
WaitTime=0
OverTimeLimit=0
CompleteWait=0
MessageTimeout=10
SlurmctldTimeout=30
SlurmdTimeout=60
NodeName=$NODE NodeAddr=127.0.0.1 NodeHostname=$NODE CPUs=$CPUS RealMemory=2000 State=UNKNOWN
PartitionName=debug Nodes=$NODE Default=YES MaxTime=04:00:00 DefaultTime=01:00:00 State=UP
EOF
    )
    if [ -n "$c1$c2" ]; then echo changed; fi
}

ensure_jwt_key() {
    local k=$HR/$CLUSTER/jwt.key
    [ -s "$k" ] || (umask 077 && head -c 32 /dev/urandom >"$k")
    chown root:root "$k"
    chmod 600 "$k"
}

ctld_answers() { sl scontrol ping 2>/dev/null | grep -q 'is UP'; }

cluster_ready() {
    local st
    st=$(sl sinfo -h -N -n "$NODE" -o %t 2>/dev/null | head -n 1) || return 1
    [[ $st =~ ^(idle|mix|mixed|alloc|allocated|comp|completing)$ ]]
}

stop_cluster() {
    stop_pidfile "slurmd $CLUSTER" "$HR/run/slurmd.pid"
    stop_pidfile "slurmctld $CLUSTER" "$HR/run/slurmctld.pid"
}

ensure_cluster() {  # ensure_cluster CHANGED
    if [ -n "$1" ]; then
        say "slurm.conf of $CLUSTER changed: restarting its daemons"
        stop_cluster
    fi
    if [ -z "$(running_pid "$HR/run/slurmctld.pid")" ]; then
        free_port "$CTLD_PORT"
        say "starting slurmctld for $CLUSTER (clean state)"
        spawn "$TT/slurmctld.out" /usr/sbin/slurmctld -c
        wait_until 30 "slurmctld $CLUSTER to answer" eval 'listening "$CTLD_PORT" && ctld_answers' || {
            log_tail "$HR/log/slurmctld.log" "$TT/slurmctld.out"
            die "slurmctld for cluster $CLUSTER did not come up"
        }
        STARTED_C=1
    fi
    if [ -z "$(running_pid "$HR/run/slurmd.pid")" ]; then
        free_port "$SLURMD_PORT"
        rm -rf --one-file-system "$HR/$CLUSTER/spool"
        install -d -m 755 "$HR/$CLUSTER/spool"
        say "starting slurmd for $CLUSTER"
        spawn "$TT/slurmd.out" /usr/sbin/slurmd
        STARTED_C=1
    fi
    wait_until 45 "the node of cluster $CLUSTER to be usable" cluster_ready || {
        sl sinfo -N -l >&2 || true
        log_tail "$HR/log/slurmctld.log" "$HR/log/slurmd.log" "$TT/slurmd.out"
        die "cluster $CLUSTER is not usable"
    }
}

job_state() { sl scontrol show job -o "$1" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2; }
job_done() { [[ $(job_state "$1") =~ ^(COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY|BOOT_FAIL|DEADLINE|PREEMPTED)$ ]]; }

# A real job as reselap, submitted over SSH the way the SSH site does it; the cluster may be
# busy with other sessions' jobs (then, after 30 s, its running jobs are proof enough).
check_slurm_job() {
    local id st out
    id=$(ssh -F "$SSH_CONFIG" tb-ap "cd $WORK_C && sbatch --parsable -J tb-check -o tb-check-%j.out -t 1 --wrap hostname" </dev/null 8>&- 9>&-)
    id=${id%%;*}
    out=$ROOT$WORK_C/tb-check-$id.out
    if ! wait_until 30 "test job $id on $CLUSTER" job_done "$id" 2>/dev/null; then
        if [ "$(job_state "$id")" = PENDING ] && [[ $(sl sinfo -h -N -n "$NODE" -o %t | head -n 1) =~ ^(alloc|mix)$ ]]; then
            say "cluster $CLUSTER is busy with other jobs: test job $id cancelled unrun"
            sl scancel "$id" || true
            return 0
        fi
        sl scontrol show job "$id" >&2 || true
        log_tail "$HR/log/slurmctld.log" "$HR/log/slurmd.log"
        die "test job $id on cluster $CLUSTER did not finish"
    fi
    st=$(job_state "$id")
    wait_until 5 "output of test job $id" test -s "$out" || true
    if [ "$st" != COMPLETED ] || [ "$(cat "$out" 2>/dev/null)" != "$(hostname)" ]; then
        sl scontrol show job "$id" >&2 || true
        echo "output ($out): $(cat "$out" 2>&1)" >&2
        log_tail "$HR/log/slurmd.log"
        die "test job $id on cluster $CLUSTER ended $st"
    fi
    rm -f "$out"
}

no_active_jobs() { [ -z "$(sl squeue -h -t PD,R,CG,S,CF -o %i 2>/dev/null)" ]; }

cancel_all_jobs() {
    local ids
    ctld_answers || return 0
    sl scontrol update PartitionName=debug State=DRAIN || true
    ids=$(sl squeue -h -t PD,R,CG,S,CF -o %i 2>/dev/null || true)
    if [ -n "$ids" ]; then
        say "cancelling $(wc -w <<<"$ids") job(s) on $CLUSTER"
        # shellcheck disable=SC2086
        sl scancel $ids || true
        wait_until 8 "the jobs of $CLUSTER to end" no_active_jobs || true
    fi
}

# ---------------------------------------------------------------- slurmrestd

rest_works() {
    python3 - "$REST_PORT" "$AP_USER" "$TOKEN_FILE" "$REST_PROBE" <<'EOF'
import json, sys, urllib.request
port, user, token_file, version = sys.argv[1:]
req = urllib.request.Request(f"http://127.0.0.1:{port}/slurm/{version}/ping", headers={
    "X-SLURM-USER-NAME": user, "X-SLURM-USER-TOKEN": open(token_file).read().strip()})
with urllib.request.urlopen(req, timeout=5) as r:
    body = json.load(r)
sys.exit(0 if not body.get("errors") else 1)
EOF
}

ensure_rest() {
    local pid tok
    tok=$(sl scontrol token username="$AP_USER" lifespan=86400) || die "scontrol token failed: $tok"
    tok=${tok#SLURM_JWT=}
    # Private: whoever reads it acts as reselap on tbc.
    (umask 077 && printf '%s\n' "$tok" >"$TOKEN_FILE.new")
    mv -f "$TOKEN_FILE.new" "$TOKEN_FILE"
    pid=$(running_pid "$HR/run/slurmrestd.pid")
    if [ -n "$pid" ] && rest_works; then return 0; fi
    [ -n "$pid" ] && kill_pid "$pid"
    free_port "$REST_PORT"
    say "starting slurmrestd on 127.0.0.1:$REST_PORT"
    # Not as root (it refuses), SLURM_JWT=daemon for per-request tokens, only the slurmctld
    # plugin (the slurmdbd one needs slurmdbd); it stays in the foreground, so it runs in the
    # background and its pid is taken from its listening socket.
    spawn_bg "$TT/slurmrestd.log" setpriv --reuid="$AP_USER" --regid="$AP_USER" --init-groups \
        env HOME="$AP_HOME" USER="$AP_USER" SLURM_JWT=daemon \
        /usr/sbin/slurmrestd -s openapi/slurmctld -a rest_auth/jwt "127.0.0.1:$REST_PORT"
    wait_until 20 "slurmrestd to answer" rest_works || {
        log_tail "$TT/slurmrestd.log"
        die "slurmrestd did not come up"
    }
    pid=$(ss -ltnpH "sport = :$REST_PORT" | grep -o 'pid=[0-9]*' | head -n 1 | cut -d= -f2)
    echo "$pid" >"$HR/run/slurmrestd.pid"
}

# ---------------------------------------------------------------- HTCondor

write_condor_conf() {
    { cat <<EOF
# Generated by scripts/testbed-trixie.sh: a personal HTCondor pool, the testbed's access point.
CONDOR_HOST = 127.0.0.1
NETWORK_INTERFACE = 127.0.0.1
# IPv4 only: where the machine also has an IPv6 address, the shadow otherwise talks to the
# starter over it and loses the connection at its first chirp request.
ENABLE_IPV6 = false
COLLECTOR_HOST = 127.0.0.1:$CONDOR_PORT
use ROLE : CentralManager
use ROLE : Submit
use ROLE : Execute
use SECURITY : HOST_BASED
use FEATURE : PartitionableSlot
NUM_CPUS = $CPUS
MEMORY = 8192
# Fast tests: ads every 5 s, a negotiation cycle every 2 s (a new job starts within seconds).
UPDATE_INTERVAL = 5
NEGOTIATOR_INTERVAL = 2
NEGOTIATOR_MIN_INTERVAL = 1
# (the cycles are at least NEGOTIATOR_CYCLE_DELAY apart: 20 s by default)
NEGOTIATOR_CYCLE_DELAY = 1
SCHEDD_INTERVAL = 5
# The crash soak kills the schedd every few minutes. The master waits 9 s before restarting a
# daemon that died, doubling each time up to an hour, and resets only after 300 s of uptime:
# by the soak's eighth kill the wait (>= 144 s) outlasted its 120-s patience (seed 4, point 496).
# A testbed restarts at once and always: backoff at most 10 s.
MASTER_BACKOFF_CEILING = 10
# The negotiator sends its ad (the last cycles' ends and periods the twin reads) to the collector
# every 300 s by default: for five minutes after a start the ad names no cycle.
NEGOTIATOR_UPDATE_INTERVAL = 5
STARTER_UPDATE_INTERVAL = 5
SHADOW_QUEUE_UPDATE_INTERVAL = 5
# A chroot: the starter cannot unshare a mount or pid namespace (jobs would go on hold).
MOUNT_UNDER_SCRATCH =
USE_PID_NAMESPACES = false
# Jobs run as nobody, as in an OSG slot that is not the submitter's machine: they see their
# scratch directory, not the access point's home.
STARTER_ALLOW_RUNAS_OWNER = False
EOF
        printf '%s' "$CONDOR_EXTRA"
    } | write_if_changed "$ROOT/etc/condor/config.d/50-resel-testbed" 644
}

condor_works() {
    as_ap timeout 15 condor_status -af Name 2>/dev/null | grep -q "slot1@" &&
        as_ap timeout 15 condor_q -totals >/dev/null 2>&1
}

ensure_condor() {
    local changed=$1 pid
    pid=$(running_pid "$ROOT/run/condor/condor_master.pid")
    if [ -n "$pid" ] && [ -n "$changed" ]; then
        say "the HTCondor configuration changed: restarting condor_master"
        stop_condor
        pid=
    fi
    if [ -n "$pid" ] && condor_works; then return 0; fi
    [ -n "$pid" ] && stop_condor
    free_port "$CONDOR_PORT"
    # A fresh pool: no jobs, claims or logs of an earlier run.
    rm -rf --one-file-system "$ROOT"/var/spool/condor/* "$ROOT"/var/lib/condor/execute/* "$ROOT"/var/log/condor/*
    in_root install -d -o condor -g condor -m 755 /var/spool/condor /var/log/condor
    say "starting condor_master"
    spawn "$TT/condor_master.out" /usr/sbin/condor_master -pidfile /run/condor/condor_master.pid
    wait_until 60 "the HTCondor pool (a slot in condor_status, the schedd answering)" condor_works || {
        log_tail "$ROOT/var/log/condor/MasterLog" "$ROOT/var/log/condor/CollectorLog" \
            "$ROOT/var/log/condor/StartLog" "$ROOT/var/log/condor/SchedLog" "$TT/condor_master.out"
        die "the HTCondor pool did not come up"
    }
    STARTED_CONDOR=1
}

# An IDTOKEN for reselap, signed with the pool's key (made by condor_master at its first start),
# for clients on this machine: the htcondor2 bindings authenticate with it (IDTOKENS).
ensure_condor_token() {
    local tok
    install -d -m 700 "$CONDOR_TOKENS"
    tok=$(in_root condor_token_create -identity "$AP_USER@$NODE" -lifetime 86400) || die "condor_token_create failed: $tok"
    (umask 077 && printf '%s\n' "$tok" >"$CONDOR_TOKENS/$AP_USER.new")
    mv -f "$CONDOR_TOKENS/$AP_USER.new" "$CONDOR_TOKENS/$AP_USER"
}

stop_condor() {
    local pid
    pid=$(running_pid "$ROOT/run/condor/condor_master.pid")
    if [ -n "$pid" ]; then
        # SIGQUIT: a fast shutdown of the master and every daemon and job below it.
        say "stopping condor_master (pid $pid) and its daemons"
        kill_pid "$pid" QUIT
    fi
    rm -f "$ROOT/run/condor/condor_master.pid"
}

check_condor_job() {
    local out id st i
    out=$(ssh -F "$SSH_CONFIG" tb-ap 'mkdir -p ~/resel-work/tb-check && cd ~/resel-work/tb-check && rm -f out && condor_submit -terse' \
        8>&- 9>&- <<'EOF'
executable = /bin/hostname
output = out
error = err
log = log
should_transfer_files = YES
request_cpus = 1
request_memory = 64MB
request_disk = 1MB
queue 1
EOF
    ) || die "condor_submit over ssh failed: $out"
    id=${out%% *}
    for ((i = 0; i < 120; i++)); do
        st=$(as_ap timeout 15 condor_history "$id" -limit 1 -af JobStatus 2>/dev/null || true)
        [ "$st" = 4 ] && break
        st=$(as_ap timeout 15 condor_q "$id" -af JobStatus HoldReason 2>/dev/null || true)
        [[ $st == 5* ]] && die "test job $id went on hold: ${st#5 }"
        sleep 0.5
    done
    [ "$(cat "$ROOT$WORK_C/tb-check/out" 2>/dev/null)" = "$(hostname)" ] || {
        as_ap condor_q -better-analyze "$id" >&2 || true
        log_tail "$ROOT/var/log/condor/SchedLog" "$ROOT/var/log/condor/StartLog" "$ROOT/var/log/condor/StarterLog"
        die "HTCondor test job $id did not complete within 60 s"
    }
    rm -rf --one-file-system "$ROOT$WORK_C/tb-check"
}

# ---------------------------------------------------------------- sshd (the access point)

ssh_works() { ssh -F "$SSH_CONFIG" tb-ap true </dev/null 8>&- 9>&-; }

write_ssh_files() {
    local hostkey=$HR/ssh/ssh_host_ed25519_key line h
    [ -s "$hostkey" ] || ssh-keygen -q -t ed25519 -N '' -C "resel-testbed-ap" -f "$hostkey"
    chmod 600 "$hostkey"
    [ -s "$SSH_KEY" ] || ssh-keygen -q -t ed25519 -N '' -C "$AP_USER@resel-testbed" -f "$SSH_KEY"
    chmod 600 "$SSH_KEY"
    cat >"$HR/ssh/sshd_config" <<EOF
# Generated by scripts/testbed-trixie.sh: the access point's sshd (inside the Debian $SUITE root).
Port $SSH_PORT
ListenAddress 127.0.0.1
HostKey $IN/ssh/ssh_host_ed25519_key
PidFile $IN/run/sshd.pid
UsePAM no
PermitRootLogin no
AllowUsers $AP_USER
PubkeyAuthentication yes
AuthorizedKeysFile .ssh/authorized_keys
PasswordAuthentication no
KbdInteractiveAuthentication no
AllowTcpForwarding yes
X11Forwarding no
PrintMotd no
PrintLastLog no
UseDNS no
MaxStartups 100:30:200
MaxSessions 100
LoginGraceTime 30
Subsystem sftp internal-sftp
EOF
    chmod 644 "$HR/ssh/sshd_config"
    # reselap's authorized_keys holds exactly the testbed's key.
    in_root install -d -o "$AP_USER" -g "$AP_USER" -m 700 "$AP_HOME/.ssh"
    cp "$SSH_KEY.pub" "$ROOT$AP_HOME/.ssh/authorized_keys"
    in_root chown "$AP_USER:$AP_USER" "$AP_HOME/.ssh/authorized_keys"
    chmod 600 "$ROOT$AP_HOME/.ssh/authorized_keys"
    line=$(cut -d' ' -f1,2 "$hostkey.pub")
    : >"$KNOWN_HOSTS.new"
    for h in 127.0.0.1 localhost "$NODE" tb-ap; do echo "[$h]:$SSH_PORT $line" >>"$KNOWN_HOSTS.new"; done
    chmod 644 "$KNOWN_HOSTS.new"
    mv -f "$KNOWN_HOSTS.new" "$KNOWN_HOSTS"
    cat >"$SSH_CONFIG" <<EOF
# Generated by scripts/testbed-trixie.sh: use with ssh -F $SSH_CONFIG tb-ap.
Host tb-ap
    HostName 127.0.0.1
    Port $SSH_PORT
    User $AP_USER
    IdentityFile $SSH_KEY
    IdentitiesOnly yes
    UserKnownHostsFile $KNOWN_HOSTS
    GlobalKnownHostsFile /dev/null
    StrictHostKeyChecking yes
    BatchMode yes
    ConnectTimeout 10
    LogLevel ERROR
EOF
    chmod 644 "$SSH_CONFIG"
}

ensure_sshd() {
    local pid
    write_ssh_files
    in_root /usr/sbin/sshd -t -f "$IN/ssh/sshd_config" || die "sshd rejects $HR/ssh/sshd_config"
    pid=$(running_pid "$HR/run/sshd.pid")
    if [ -n "$pid" ] && ssh_works; then return 0; fi
    [ -n "$pid" ] && kill_tree "$pid"
    free_port "$SSH_PORT"
    say "starting the access point's sshd on 127.0.0.1:$SSH_PORT"
    spawn "$TT/sshd.out" /usr/sbin/sshd -f "$IN/ssh/sshd_config" -E "$IN/log/sshd.log"
    wait_until 15 "sshd to accept $AP_USER's key" ssh_works || {
        ssh -F "$SSH_CONFIG" -v tb-ap true </dev/null 8>&- 9>&- || true
        log_tail "$HR/log/sshd.log" "$TT/sshd.out"
        die "cannot log in with ssh -F $SSH_CONFIG tb-ap"
    }
    STARTED_SSH=1
}

kill_tree() {  # a process and everything below it: TERM all, 2 s grace, KILL what is left
    local pids=("$1") i=0 p c
    while ((i < ${#pids[@]})); do
        for c in $(pgrep -P "${pids[$i]}" 2>/dev/null || true); do pids+=("$c"); done
        i=$((i + 1))
    done
    kill -TERM "${pids[@]}" 2>/dev/null || true
    for ((i = 0; i < 10; i++)); do
        c=0
        for p in "${pids[@]}"; do alive "$p" && c=1; done
        ((c)) || return 0
        sleep 0.2
    done
    kill -KILL "${pids[@]}" 2>/dev/null || true
}

# ---------------------------------------------------------------- env file

versions() {
    SLURM_VERSION=$(sl sinfo --version | awk '{print $2}')
    CONDOR_VERSION=$(in_root condor_version | sed -n 's/^\$CondorVersion: \([0-9.]*\).*/\1/p')
}

# The env file's key for one value of this part: trixie's keys as they have always been
# (TB_TRIXIE_ROOT, TB_CLUSTER_C, TB_CONDOR_VERSION, ...), another suite's TB_<SUITE>_<WHAT>
# (TB_SID_ROOT, TB_SID_CLUSTER, TB_SID_CONDOR_VERSION; tests/testbed.py maps them back).
env_key() {
    if [ "$SUITE" != trixie ]; then
        echo "TB_${SUITE^^}_$1"
        return 0
    fi
    case $1 in
        ROOT | DIR | USER | SSH_PORT | SSH_KEY | KNOWN_HOSTS | SSH_CONFIG) echo "TB_TRIXIE_$1" ;;
        CONDOR_*) echo "TB_$1" ;;
        WORK_HOST) echo TB_WORK_C_HOST ;;
        *) echo "TB_$1_C" ;;
    esac
}

write_env() {
    local what value
    versions
    while read -r what value; do
        echo "$(env_key "$what")=$value"
    done >"$ENV_FILE.new" <<EOF
ROOT $ROOT
DIR $TT
USER $AP_USER
SSH_PORT $SSH_PORT
SSH_KEY $SSH_KEY
KNOWN_HOSTS $KNOWN_HOSTS
SSH_CONFIG $SSH_CONFIG
CLUSTER $CLUSTER
SLURM_CONF $SLURM_CONF
SLURM_VERSION $SLURM_VERSION
REST_URL http://127.0.0.1:$REST_PORT
REST_USER $AP_USER
REST_TOKEN_FILE $TOKEN_FILE
WORK $WORK_C
WORK_HOST $ROOT$WORK_C
CONDOR_COLLECTOR 127.0.0.1:$CONDOR_PORT
CONDOR_VERSION $CONDOR_VERSION
CONDOR_TOKEN_DIR $CONDOR_TOKENS
EOF
    chmod 644 "$ENV_FILE.new"
    mv -f "$ENV_FILE.new" "$ENV_FILE"
}

# ---------------------------------------------------------------- commands

need_root() { [ "$(id -u)" = 0 ] || die "must run as root (it builds a root with debootstrap and starts daemons)"; }

cmd_up() {
    local t0 chg_slurm chg_condor had_env=1
    need_root
    t0=$(date +%s%N)
    mkdir -p "$TT"
    [ -f "$ENV_FILE" ] || had_env=0
    lock
    trap 'rc=$?; [ $rc = 0 ] || rm -f "$ENV_FILE"' EXIT
    check_owner
    ensure_root
    STARTED_C=0 STARTED_SSH=0 STARTED_CONDOR=0
    ensure_user
    ensure_dirs
    ensure_munge
    ensure_jwt_key
    chg_slurm=$(write_slurm_conf)
    ensure_cluster "$chg_slurm"
    ensure_rest
    ensure_sshd
    chg_condor=$(write_condor_conf)
    ensure_condor "$chg_condor"
    ensure_condor_token
    # A real job through each scheduler, submitted over SSH as reselap, for what this run
    # (re)started or when no env file said the testbed was up.
    if [ "$had_env" = 0 ] || [ "$STARTED_C" = 1 ] || [ "$STARTED_SSH" = 1 ]; then
        say "running a test job on $CLUSTER as $AP_USER over ssh"
        check_slurm_job
    fi
    if [ "$had_env" = 0 ] || [ "$STARTED_CONDOR" = 1 ] || [ "$STARTED_SSH" = 1 ]; then
        say "running a test job in the HTCondor pool as $AP_USER over ssh"
        check_condor_job
    fi
    write_env
    say "up in $(ms_since "$t0") ms (Slurm $SLURM_VERSION, HTCondor $CONDOR_VERSION); environment in $ENV_FILE"
}

cmd_down() {
    local t0 pid
    need_root
    t0=$(date +%s%N)
    if [ ! -d "$ROOT" ] && [ ! -d "$TT" ]; then
        say "nothing to stop"
        return 0
    fi
    lock
    rm -f "$ENV_FILE"
    if root_ok && [ "$(cat "$HR/owner" 2>/dev/null)" = "$TT" ]; then
        cancel_all_jobs
        stop_condor
        pid=$(running_pid "$HR/run/sshd.pid")
        if [ -n "$pid" ]; then
            say "stopping sshd (pid $pid) and its sessions"
            kill_tree "$pid"
        fi
        rm -f "$HR/run/sshd.pid"
        stop_pidfile slurmrestd "$HR/run/slurmrestd.pid"
        stop_cluster
        stop_pidfile munged "$HR/run/munged.pid"
        # Whatever is left inside the root (job processes, a daemon whose pid file was lost).
        for pid in $(pids_in "$ROOT"); do
            alive "$pid" || continue
            say "stopping leftover process $pid ($(cat "/proc/$pid/comm" 2>/dev/null)) and its children"
            kill_tree "$pid"
        done
        rm -f "$HR/owner"
    fi
    # Anything else still carrying our mark (e.g. a build interrupted half way).
    for pid in $(our_pids); do
        alive "$pid" || continue
        say "stopping leftover process $pid ($(cat "/proc/$pid/comm" 2>/dev/null)) and its children"
        kill_tree "$pid"
    done
    say "down in $(ms_since "$t0") ms"
}

# The pool's schedd restarted by its own master (condor_restart -daemon schedd, ADMINISTRATOR from
# 127.0.0.1): the schedd shuts down gracefully, keeping its job queue (job_queue.log), and the
# master starts it again after its backoff (about 10 s). The live fault tests use it; nothing
# else in the pool is touched. Refused on a testbed that is down.
cmd_restart_schedd() {
    local t0 before after
    need_root
    t0=$(date +%s%N)
    [ -f "$ENV_FILE" ] || die "the testbed is not up (no $ENV_FILE): nothing to restart"
    [ -n "$(running_pid "$ROOT/run/condor/condor_master.pid")" ] || die "condor_master is not running"
    schedd_pid() {  # the condor_schedd running in our root
        local pid
        for pid in $(pids_in "$ROOT"); do
            [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = condor_schedd ] && { echo "$pid"; return 0; }
        done
        return 0
    }
    before=$(schedd_pid)
    say "restarting the pool's condor_schedd (pid ${before:-unknown})"
    if [ -n "$before" ]; then
        in_root timeout 15 condor_restart -daemon schedd >/dev/null || die "condor_restart -daemon schedd failed"
    else
        # Not running (its master is holding it back after repeated deaths): condor_restart
        # has nothing to restart; condor_on asks the master to start it now.
        in_root timeout 15 condor_on -daemon schedd >/dev/null || die "condor_on -daemon schedd failed"
    fi
    schedd_back() {
        after=$(schedd_pid)
        [ -n "$after" ] && [ "$after" != "$before" ] && as_ap timeout 15 condor_q -totals >/dev/null 2>&1
    }
    wait_until 90 "the restarted condor_schedd answering" schedd_back || {
        log_tail "$ROOT/var/log/condor/MasterLog" "$ROOT/var/log/condor/SchedLog"
        die "condor_schedd did not come back"
    }
    say "condor_schedd restarted (pid $after) in $(ms_since "$t0") ms"
}

show() {  # show NAME HOST_PIDFILE
    local pid
    pid=$(pid_from "$2")
    if [ -n "$pid" ] && is_ours "$pid"; then
        printf '  %-18s running (pid %s)\n' "$1" "$pid"
    else
        printf '  %-18s stopped\n' "$1"
    fi
}

cmd_status() {
    echo "Debian $SUITE part of the testbed in $TB (root $ROOT)"
    if [ "$(id -u)" != 0 ]; then
        echo "  (run as root to see it: its daemons run in a chroot)"
        return 0
    fi
    if ! root_ok; then
        echo "  root: not built (RESEL_TB_SUITE=$SUITE testbed-trixie.sh up builds it)"
        return 0
    fi
    show munged "$HR/run/munged.pid"
    show "slurmctld $CLUSTER" "$HR/run/slurmctld.pid"
    show "slurmd $CLUSTER" "$HR/run/slurmd.pid"
    show "slurmrestd $CLUSTER" "$HR/run/slurmrestd.pid"
    show condor_master "$ROOT/run/condor/condor_master.pid"
    show "sshd (tb-ap)" "$HR/run/sshd.pid"
    if [ -n "$(running_pid "$HR/run/slurmctld.pid")" ] && ctld_answers; then
        echo "  cluster $CLUSTER: $(sl sinfo -h -o '%P %a %D %t %C' | tr '\n' ';') jobs: $(sl squeue -h | wc -l)"
    fi
    if [ -n "$(running_pid "$ROOT/run/condor/condor_master.pid")" ]; then
        echo "  pool: $(as_ap timeout 15 condor_status -af Name Cpus State 2>/dev/null | tr '\n' ';') jobs: $(as_ap timeout 15 condor_q -allusers -af ClusterId 2>/dev/null | wc -l)"
    fi
    if [ -f "$ENV_FILE" ]; then echo "  env file: $ENV_FILE"; else echo "  env file: absent (not up)"; fi
}

case ${1:-} in
    up) cmd_up ;;
    down) cmd_down ;;
    status) cmd_status ;;
    restart-schedd) cmd_restart_schedd ;;
    *)
        echo "usage: $0 up|down|status|restart-schedd   (suite: \$RESEL_TB_SUITE, trixie or sid, default trixie; testbed: \$RESEL_TB, default /tmp/resel-testbed; root cache: \$RESEL_TB_CACHE, default /var/cache/resel-testbed)" >&2
        exit 2
        ;;
esac
