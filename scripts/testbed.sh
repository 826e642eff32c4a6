#!/usr/bin/env bash
# The live testbed for resel's backend tests, on this one machine (run as root):
#
#   scripts/testbed.sh up                 start everything (idempotent), then write testbed.env
#   scripts/testbed.sh down               stop everything this script started (idempotent)
#   scripts/testbed.sh restart-ctld A|B   restart one cluster's slurmctld, keeping its state
#   scripts/testbed.sh status             show what is running
#
# What `up` builds (everything lives under $RESEL_TB, default /tmp/resel-testbed):
#
#   munged            the system's, if one already answers; otherwise started here as `munge`
#   cluster "tba"     slurmctld 6917 + slurmd 6918, node `hostname -s` with 8 CPUs, partitions
#                     debug (default) and short (10 min); JWT enabled for slurmrestd; root's site
#   cluster "tbb"     slurmctld 6927 + slurmd 6928, the same node with 4 CPUs, partition debug;
#                     reached as user reseltb over SSH; with accounting (tba has none):
#   accounting        MariaDB (127.0.0.1:6930 and its own socket, data in $RESEL_TB/accounting,
#                     --no-defaults) and slurmdbd 6929 for tbb: associations,limits,qos enforced,
#                     account "resel" for root and reseltb, QOS "normal" (default, unlimited) and
#                     "resel-limit" (MaxSubmitJobsPerUser=2, MaxJobsPerUser=1: the limits tests')
#   slurmrestd        http://127.0.0.1:6820 for tba (as reseltb, rest_auth/jwt) + a token file
#   sshd              127.0.0.1:2222, own host key and config, key login for reseltb, aliases
#                     tb-ssh, tb-jump and tb-via-jump (ProxyJump) in $RESEL_TB/ssh/config
#   Debian 13 part    scripts/testbed-trixie.sh (its own header says more): Slurm 24.11 cluster
#                     "tbc", its slurmrestd, and a personal HTCondor pool behind an access point's
#                     sshd, in a Debian 13 root cached in $RESEL_TB_CACHE; RESEL_TB_TRIXIE=0 leaves
#                     it out of `up`
#   Debian sid part   scripts/testbed-sid.sh (the same script for Debian sid): Slurm 26.05 cluster
#                     "tbd" (slurmctld 7027 + slurmd 7028), its slurmrestd on 127.0.0.1:6822, an
#                     HTCondor 25 pool (collector 127.0.0.1:9619) behind an access point's sshd on
#                     127.0.0.1:2224; RESEL_TB_SID=0 leaves it out of `up`
#   testbed.env       KEY=VALUE lines, written last and only when all of the above works
#
# Why it is built this way:
#   * Real daemons, not fakes: the backends are tested against the Slurm that CI installs from
#     Debian (22.05). Both clusters share the one node name; they stay independent through
#     different ports, state/spool dirs and pid files, and commands choose one with SLURM_CONF.
#   * `SlurmdParameters=config_overrides` lets a 2-core VM pretend to have 8 (tba) and 4 (tbb)
#     CPUs, so tests can fill a cluster and watch jobs queue.
#   * Scheduler settings make tests fast: a job submitted to free cores starts within ~1 s,
#     the backfill scheduler runs every second (so `squeue --start` and `sbatch --test-only`
#     give estimates), and finished jobs stay visible to squeue for MinJobAge=60 s.
#   * Every process this script starts carries RESEL_TB_OWNER=$RESEL_TB in its environment (and
#     its config path on its command line); `down` and the stale-process cleanup only ever
#     touch processes with that mark, never anything else on the machine.
#   * $RESEL_TB is a fixed, predictable path, by default in /tmp where every user may create
#     names, and root daemons obey what is written there (slurm.conf, sshd_config, keys). So
#     every command first checks the whole path (safe_tb_dir): each component a real directory
#     (no symlink), owned by root, writable by nobody else (a sticky one such as /tmp itself
#     excepted, above $RESEL_TB); missing components are created root 0755, one at a time. A
#     folder someone else made or planted is refused before anything is written or started.
#     Inside it, files are written through a random temporary name and renamed into place
#     (put), so a symlink in their place is replaced, never followed; what is written in the
#     home of reseltb is written as reseltb.
#   * slurmdbd.conf holds the database password (random per testbed, made on the first `up`):
#     0600 and owned by slurm, as slurmdbd demands; the password goes to MariaDB on stdin only.
#   * `up` takes a lock so two test sessions cannot build the testbed at the same time; every
#     daemon is started with the lock's descriptor closed (9>&-), or it would hold the lock for
#     its whole life.
#
# Things learnt the hard way (Debian 12, Slurm 22.05.8):
#   * useradd leaves the account locked ("!"); with `UsePAM no` sshd then refuses even key
#     logins. The password field is set to "*" (no password, not locked).
#   * slurmrestd refuses root, needs SLURM_JWT=daemon for per-request JWTs, and only the
#     openapi/v0.0.38 plugin (the dbv0.0.38 one wants slurmdbd).
#   * `sinfo -N -n NODE` prints one line per partition (two on tba): take the first.
#   * slurmd 22.05 loads a cgroup plugin whatever ProctrackType and TaskPlugin say, and has no
#     CgroupPlugin=disabled (24.11 has: scripts/testbed-trixie.sh). This machine's kind, which
#     CI runs on, mounts cgroups hybrid (the v1 controllers, cgroup2 in /sys/fs/cgroup/unified):
#     slurmd picks cgroup/v1 and starts. A pure cgroup v2 host is untested: it cannot be made
#     here — with cgroup2 mounted on /sys/fs/cgroup in a mount namespace, slurmd 22.05 exits
#     "fatal: Hybrid mode is not supported" (the kernel's v1 hierarchies still show in
#     /proc/self/cgroup). Tasks are tracked by proctrack/linuxproc, which loses orphans: the
#     agent's guard kills its attempts itself when it dies (docs/agent.md).
#   * After a slurmctld restart the node shows "unk" for ~4 s until slurmd re-registers;
#     restart-ctld waits for that, so the cluster is usable when it returns.
#   * A Slurm client that finds the controller's port closed backs off for seconds: wait for
#     the port to listen before the first ping.
#   * In containers PID 1 may reap zombies only every few seconds; `kill -0` succeeds on a
#     zombie, so "alive" also checks the process state.
#   * sshd rewrites its process title over its environment: it is recognised as ours by its
#     command line (which names our sshd_config) instead of the environment mark.
#   * The testbed is shared by concurrent test sessions: test jobs of `up` may find the
#     clusters full (accepted after 30 s, see check_job); `down` drains partitions before
#     cancelling so that no coordinator submits in between; restart-ctld refuses to run on a
#     testbed that is down (it would resurrect a controller without the rest).
set -Eeuo pipefail
trap 'echo "testbed.sh: failed at line $LINENO: $BASH_COMMAND" >&2' ERR

TB=${RESEL_TB:-/tmp/resel-testbed}
# The env file has no quoting (so Python can split lines on '='): refuse paths needing it.
if [[ ! $TB =~ ^/[A-Za-z0-9._/+-]+$ ]]; then
    echo "testbed.sh: RESEL_TB must be an absolute path of [A-Za-z0-9._/+-] (got '$TB')" >&2
    exit 2
fi
TB=${TB%/}
OWNER_MARK="RESEL_TB_OWNER=$TB"
# Our processes live in our PID namespace. A testbed in a container or in scripts/fresh-check.sh's
# namespaces uses the same folder names (and so the same mark) inside its own root; its processes
# are visible from here but never ours to stop.
PIDNS=$(readlink /proc/$$/ns/pid)
same_pidns() { [ "$(readlink "/proc/$1/ns/pid" 2>/dev/null)" = "$PIDNS" ]; }

NODE=$(hostname -s)
TB_USER=reseltb
TB_HOME=/home/$TB_USER
SSH_PORT=2222
REST_PORT=6820
# slurm-wlm-jwt-plugin: auth/jwt for slurmrestd. It arrives only as a recommendation of other
# packages, which --no-install-recommends skips, so it is named here (a fresh machine without it:
# slurmctld dies with "Couldn't find the specified plugin name for auth/jwt").
# mariadb-server + slurmdbd: accounting for tbb (sacct, sacctmgr, association and QOS limits).
PACKAGES=(slurm-wlm slurm-wlm-jwt-plugin slurmrestd munge slurm-wlm-torque openssh-server iproute2
    mariadb-server slurmdbd)
# debootstrap builds the Debian parts' roots: installed here, before those parts start side by side
# (each would otherwise run apt-get on the host at the same moment as the other)
[ "${RESEL_TB_TRIXIE:-1}" = 0 ] && [ "${RESEL_TB_SID:-1}" = 0 ] || PACKAGES+=(debootstrap)

RUN=$TB/run
LOG=$TB/log
SSHD_DIR=$TB/ssh
ENV_FILE=$TB/testbed.env
WORK_A=$TB/work-a
WORK_B=$TB_HOME/resel-work
TOKEN_FILE=$TB/rest/token
SSH_CONFIG=$SSHD_DIR/config
SSH_KEY=$SSHD_DIR/id_ed25519_$TB_USER
KNOWN_HOSTS=$SSHD_DIR/known_hosts

# Accounting (tbb only): MariaDB on 127.0.0.1:$DB_PORT and its own socket, slurmdbd on $DBD_PORT.
DB_PORT=6930
DBD_PORT=6929
ACCT=$TB/accounting            # root 0755
DB_DATA=$ACCT/mariadb          # mysql 0700: the database files
DB_RUN=$ACCT/mariadb-run       # mysql 0755: socket and pid file
DB_SOCK=$DB_RUN/mariadb.sock
DBD_DIR=$ACCT/slurmdbd         # slurm 0700: slurmdbd's pid file and log
DB_NAME=slurm_acct_db
DB_USER=slurm
TB_ACCOUNT=resel               # the account root and reseltb submit under on tbb
LIMIT_QOS=resel-limit          # only tests/test_limits_live.py submits with it
LIMIT_MAX_SUBMIT=2                 # MaxSubmitJobsPerUser of $LIMIT_QOS
LIMIT_MAX_JOBS=1                   # MaxJobsPerUser of $LIMIT_QOS

# Per-cluster settings, indexed by the letter the CLI takes (A or B).
declare -A CLUSTER=([A]=tba [B]=tbb)
declare -A CTLD_PORT=([A]=6917 [B]=6927)
declare -A SLURMD_PORT=([A]=6918 [B]=6928)
declare -A CPUS=([A]=8 [B]=4)
declare -A MEM=([A]=4000 [B]=2000)
declare -A FIRST_JOB=([A]=1000 [B]=500000)   # different ranges: job ids never collide

cdir() { echo "$TB/${CLUSTER[$1]}"; }
conf() { echo "$(cdir "$1")/slurm.conf"; }
ctld_pid() { echo "$RUN/slurmctld-${CLUSTER[$1]}.pid"; }
slurmd_pid() { echo "$RUN/slurmd-${CLUSTER[$1]}.pid"; }
# slurmdbd reads slurmdbd.conf from the folder of $SLURM_CONF: tbb's.
dbd_conf() { echo "$(cdir B)/slurmdbd.conf"; }

T_START=$(date +%s%N)
say() { printf 'testbed: [%5.1fs] %s\n' "$((($(date +%s%N) - T_START) / 1000000))e-3" "$*"; }
die() { echo "testbed.sh: $*" >&2; exit 1; }

# Last lines of the given logs, for error messages.
log_tail() {
    local f
    for f in "$@"; do
        [ -f "$f" ] || continue
        echo "---- last lines of $f ----" >&2
        tail -n 25 "$f" >&2 || true
    done
}

# wait_until SECONDS DESCRIPTION COMMAND...: poll COMMAND every 0.2 s, fail after SECONDS.
wait_until() {
    local limit=$1 what=$2 end
    shift 2
    end=$(($(date +%s%N) + limit * 1000000000))
    until "$@" >/dev/null 2>&1; do
        if (($(date +%s%N) > end)); then
            echo "testbed.sh: timed out after ${limit}s waiting for $what" >&2
            return 1
        fi
        sleep 0.2
    done
}

# ---------------------------------------------------------------- processes we own

# Alive and not a zombie: a daemon that has exited stays a zombie until PID 1 reaps it, which
# in some containers happens only every few seconds.
alive() {
    local st
    [ -n "${1:-}" ] && kill -0 "$1" 2>/dev/null || return 1
    st=$(cat "/proc/$1/stat" 2>/dev/null || true)
    st=${st##*) }
    [ -n "$st" ] && [ "${st%% *}" != Z ]
}

# A process is ours when it carries our environment mark, or (for daemons such as sshd that
# rewrite their process title over the environment) its command line names a path in $TB.
is_ours() {
    local pid=$1 envs cmd
    alive "$pid" && same_pidns "$pid" || return 1
    envs=$(tr '\0' '\n' 2>/dev/null <"/proc/$pid/environ" || true)
    grep -qxF "$OWNER_MARK" <<<"$envs" && return 0
    cmd=$(tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline" || true)
    [[ $cmd == *"$TB/"* ]]
}

pid_from() { [ -f "$1" ] && tr -dc '0-9' <"$1" || true; }

# The pid in a pid file, if that process is alive and ours; else remove the stale file.
running_pid() {
    local pid
    pid=$(pid_from "$1")
    if [ -n "$pid" ] && is_ours "$pid"; then
        echo "$pid"
    else
        rm -f "$1"
    fi
}

# TERM, wait up to 10 s, then KILL.
kill_pid() {
    local pid=$1 i
    alive "$pid" || return 0
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 50; i++)); do
        alive "$pid" || return 0
        sleep 0.2
    done
    kill -KILL "$pid" 2>/dev/null || true
    sleep 0.2
}

# A leftover process and everything below it (a slurmstepd's job processes do not carry our
# mark, but are ours all the same): TERM all, 2 s grace, KILL what is left.
kill_tree() {
    local pids=($1) i=0 p c
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

stop_pidfile() {  # stop_pidfile NAME PIDFILE
    local pid
    pid=$(running_pid "$2")
    if [ -n "$pid" ]; then
        say "stopping $1 (pid $pid)"
        kill_pid "$pid"
    fi
    rm -f "$2"
}

# Make sure nothing listens on a TCP port we need: our own leftovers (from a crashed run whose
# pid files are gone) are stopped; anyone else's process is an error, never killed.
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

# Every live process carrying our mark (e.g. slurmstepd of jobs whose slurmd is gone).
marked_pids() {
    local p pid
    for p in /proc/[0-9]*; do
        pid=${p#/proc/}
        [ "$pid" = $$ ] && continue
        [ "$pid" = "$BASHPID" ] && continue
        same_pidns "$pid" || continue
        if grep -qxF "$OWNER_MARK" < <(tr '\0' '\n' 2>/dev/null <"$p/environ" || true); then
            echo "$pid"
        fi
    done
}

# Start a daemon: our mark in its environment, its own session, no terminal or pipe of ours
# (a caller capturing our output, e.g. pytest's subprocess.run, would otherwise wait for it
# forever), and the lock descriptor closed.
spawn() {
    local logf=$1
    shift
    env "$OWNER_MARK" setsid "$@" </dev/null >>"$logf" 2>&1 9>&-
}

# The same for a daemon that does not fork into the background itself: the subshell execs
# it at once, so no shell of ours stays behind holding our output pipe or the lock.
spawn_bg() {
    local logf=$1
    shift
    (exec env "$OWNER_MARK" setsid "$@") </dev/null >>"$logf" 2>&1 9>&- &
}

lock() {
    safe_tb_dir create
    exec 9>"$TB/.lock"
    flock -w 600 9 || die "another testbed.sh holds $TB/.lock"
}

# ---------------------------------------------------------------- the testbed's own folder

# Why PATH cannot hold the testbed (nothing printed when it can). FINAL=1: PATH is $TB itself,
# which nobody else may write even with the sticky bit.
dir_problem() {
    local path=$1 final=$2 uid= mode= type=
    IFS=: read -r uid mode type < <(stat -c '%u:%a:%F' -- "$path" 2>/dev/null) || true
    if [ -z "$type" ]; then
        echo "cannot be examined"
    elif [ "$type" = "symbolic link" ]; then
        echo "is a symbolic link (to $(readlink -- "$path"))"
    elif [ "$type" != directory ]; then
        echo "is a $type, not a directory"
    elif [ "$uid" != 0 ]; then
        echo "is owned by $(id -nu "$uid" 2>/dev/null || echo "uid $uid"), not root"
    elif ((8#$mode & 8#022)) && { ((final)) || ! ((8#$mode & 8#1000)); }; then
        echo "is writable by group or others (mode $mode)"
    fi
}

# Make sure every component of $TB is a real directory owned by root and writable by nobody
# else (a sticky world-writable parent such as /tmp excepted), creating the missing ones
# (`safe_tb_dir create`) root 0755 one at a time: a plain mkdir fails when someone else made the
# name in between, and the check then finds out whose it is. Without `create` a missing
# component just means there is no testbed (returns 1).
safe_tb_dir() {
    local create=${1:-} p= comp why
    local -a comps
    IFS=/ read -ra comps <<<"${TB#/}"
    for comp in "${comps[@]}"; do
        [ -n "$comp" ] || continue
        p=$p/$comp
        if [ ! -e "$p" ] && [ ! -L "$p" ]; then
            [ "$create" = create ] || return 1
            mkdir -m 755 -- "$p" 2>/dev/null || true
        fi
        why=$(dir_problem "$p" "$([ "$p" = "$TB" ] && echo 1 || echo 0)")
        [ -z "$why" ] || die "refusing the testbed folder $TB: $p $why; another user may have" \
            "made or planted it: remove it (as root) or choose another RESEL_TB"
    done
}

# put FILE MODE <CONTENT: write FILE whole, never through a symlink. The content goes to a new
# file with a random name (mktemp opens it O_EXCL: nothing planted is ever opened), which is
# then renamed over FILE (rename replaces a symlink standing there instead of following it).
put() {
    local f=$1 mode=$2 tmp
    tmp=$(mktemp "$(dirname -- "$f")/.$(basename -- "$f").XXXXXX")
    if ! { cat >"$tmp" && chmod "$mode" "$tmp" && mv -fT -- "$tmp" "$f"; }; then
        rm -f -- "$tmp"
        die "cannot write $f"
    fi
}

# Files the daemons open themselves (logs, pid files, state, keys): none of the testbed's own
# folders may hold a symlink. Only root can make one there, but a daemon would follow it.
no_symlinks() {
    local links
    links=$(find "$TB" -maxdepth 1 -type l
        find "$RUN" "$LOG" "$SSHD_DIR" "$TB/rest" "$(cdir A)" "$(cdir B)" "$ACCT" -type l 2>/dev/null)
    [ -z "$links" ] || die "refusing the testbed folder $TB: symbolic links where only its own" \
        "files belong: $(tr '\n' ' ' <<<"$links")"
}

# A command run as the testbed user, for files in its home: root writing there would follow
# whatever symlink the user left in place, with root's rights.
as_tb_user() {
    setpriv --reuid="$TB_USER" --regid="$TB_USER" --init-groups \
        env HOME="$TB_HOME" USER="$TB_USER" "$@"
}

# ---------------------------------------------------------------- packages, user, dirs

ensure_packages() {
    local missing=() p
    for p in "${PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
    done
    ((${#missing[@]} == 0)) && return 0
    say "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" 9>&-
}

ensure_user() {
    if ! id "$TB_USER" >/dev/null 2>&1; then
        say "creating user $TB_USER"
        useradd --create-home --home-dir "$TB_HOME" --shell /bin/bash "$TB_USER"
    fi
    # useradd leaves the password field as "!" (locked). With `UsePAM no`, sshd refuses a
    # locked account even for key logins; "*" means "no password" without locking it.
    if [ "$(getent shadow "$TB_USER" | cut -d: -f2)" != "*" ]; then
        usermod -p '*' "$TB_USER"
    fi
    # sshd's StrictModes wants a home that nobody else can write.
    as_tb_user chmod go-w "$TB_HOME"
}

ensure_dirs() {
    local x d
    umask 022
    # $TB is safe (lock), so only root can have made anything in it; a symlink in place of one
    # of our folders is refused all the same, before mkdir/chmod would follow it.
    for d in "$RUN" "$LOG" "$SSHD_DIR" "$TB/rest" "$WORK_A" "$(cdir A)" "$(cdir B)" \
        "$(cdir A)/state" "$(cdir A)/spool" "$(cdir B)/state" "$(cdir B)/spool"; do
        [ -L "$d" ] && die "refusing the testbed folder $TB: $d is a symbolic link"
        mkdir -p "$d"
    done
    # reseltb (slurmrestd, jobs on tbb) must read the slurm.conf files: the tree is 755.
    chmod 755 "$TB" "$RUN" "$LOG" "$SSHD_DIR" "$TB/rest" "$WORK_A"
    for x in A B; do
        chmod 755 "$(cdir $x)" "$(cdir $x)/spool"
        chmod 700 "$(cdir $x)/state"
    done
    # Accounting: the daemons' own folders belong to the users they run as (mariadbd as mysql,
    # slurmdbd as slurm), private where they hold data or the database password.
    [ -L "$ACCT" ] && die "refusing the testbed folder $TB: $ACCT is a symbolic link"
    mkdir -p "$ACCT"
    chmod 755 "$ACCT"
    for d in "$DB_DATA" "$DB_RUN" "$DBD_DIR"; do
        [ -L "$d" ] && die "refusing the testbed folder $TB: $d is a symbolic link"
    done
    install -d -o mysql -g mysql -m 700 "$DB_DATA"
    install -d -o mysql -g mysql -m 755 "$DB_RUN"
    install -d -o slurm -g slurm -m 700 "$DBD_DIR"
    no_symlinks
    as_tb_user mkdir -p "$WORK_B"
    as_tb_user chmod 755 "$WORK_B"
}

# ---------------------------------------------------------------- munge

munge_works() { munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1; }

ensure_munge() {
    if munge_works; then
        return 0   # the system's munged (or ours from an earlier `up`): use it as it is
    fi
    # A munged of ours that stopped answering: replace it.
    stop_pidfile munged "$RUN/munged.pid"
    if [ ! -s /etc/munge/munge.key ]; then
        say "creating /etc/munge/munge.key"
        mkdir -p /etc/munge
        mungekey --create --keyfile=/etc/munge/munge.key
    fi
    # munged refuses to start unless its key and directories belong to munge and are private.
    install -d -o munge -g munge -m 700 /etc/munge /var/log/munge
    install -d -o munge -g munge -m 711 /var/lib/munge
    install -d -o munge -g munge -m 755 /run/munge
    chown munge:munge /etc/munge/munge.key
    chmod 400 /etc/munge/munge.key
    say "starting munged"
    spawn "$LOG/munged.out" runuser -u munge -- /usr/sbin/munged --pid-file=/run/munge/munged.pid
    wait_until 10 "munged" munge_works || { log_tail /var/log/munge/munged.log "$LOG/munged.out"; die "munged did not start"; }
    # Remember that munged is ours, so `down` stops it (and only then).
    cp /run/munge/munged.pid "$RUN/munged.pid"
}

# ---------------------------------------------------------------- slurm

write_slurm_conf() {  # write_slurm_conf A|B; prints "changed" when the file changed
    local x=$1 d f tmp
    d=$(cdir "$x")
    f=$(conf "$x")
    tmp=$(mktemp "$d/.slurm.conf.XXXXXX")
    {
        cat <<EOF
# Generated by scripts/testbed.sh: cluster ${CLUSTER[$x]} of resel's test bed. Do not edit.
ClusterName=${CLUSTER[$x]}
SlurmctldHost=$NODE(127.0.0.1)
SlurmctldPort=${CTLD_PORT[$x]}
SlurmdPort=${SLURMD_PORT[$x]}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=$d/state
SlurmdSpoolDir=$d/spool
SlurmctldPidFile=$(ctld_pid "$x")
SlurmdPidFile=$(slurmd_pid "$x")
SlurmctldLogFile=$LOG/slurmctld-${CLUSTER[$x]}.log
SlurmdLogFile=$LOG/slurmd-${CLUSTER[$x]}.log
SlurmctldDebug=info
SlurmdDebug=info
# The node may declare more CPUs than the machine has.
SlurmdParameters=config_overrides
ReturnToService=2
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SwitchType=switch/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
# Fast tests: event-driven scheduling unthrottled beyond 0.1 s, the main loop every 2 s,
# backfill every second with 5 s resolution (for squeue --start / sbatch --test-only).
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=1,bf_resolution=5,sched_interval=2,sched_min_interval=100000
EOF
        if [ "$x" = B ]; then
            cat <<EOF
# Accounting through slurmdbd on 127.0.0.1:$DBD_PORT (sacct, sacctmgr); jobs need an association,
# and association and QOS limits are enforced (QOS $LIMIT_QOS for the limits tests).
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=$DBD_PORT
AccountingStorageEnforce=associations,limits,qos
EOF
        else
            echo "AccountingStorageType=accounting_storage/none"
        fi
        cat <<EOF
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
FirstJobId=${FIRST_JOB[$x]}
KillWait=2
# Finished jobs stay visible to squeue / scontrol for a minute.
MinJobAge=60
InactiveLimit=0
WaitTime=0
OverTimeLimit=0
CompleteWait=0
MessageTimeout=10
SlurmctldTimeout=30
SlurmdTimeout=60
EOF
        if [ "$x" = A ]; then
            cat <<EOF
# JWT as the alternative authentication, for slurmrestd on 127.0.0.1:$REST_PORT.
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key=$d/jwt.key
EOF
        fi
        echo "NodeName=$NODE NodeAddr=127.0.0.1 NodeHostname=$NODE CPUs=${CPUS[$x]} RealMemory=${MEM[$x]} State=UNKNOWN"
        echo "PartitionName=debug Nodes=$NODE Default=YES MaxTime=04:00:00 DefaultTime=01:00:00 State=UP"
        if [ "$x" = A ]; then
            echo "PartitionName=short Nodes=$NODE MaxTime=00:10:00 DefaultTime=00:05:00 State=UP"
        fi
    } >"$tmp"
    chmod 644 "$tmp"
    if [ -f "$f" ] && cmp -s "$tmp" "$f"; then
        rm -f "$tmp"
    else
        mv -fT "$tmp" "$f"
        echo changed
    fi
}

ensure_jwt_key() {
    local k
    k=$(cdir A)/jwt.key
    if [ -L "$k" ] || [ ! -s "$k" ]; then
        head -c 32 /dev/urandom | put "$k" 600
    fi
    chown -h root:root "$k"
    chmod 600 "$k"
}

# Slurm client command against one cluster.
sl() {  # sl A|B COMMAND ARGS...
    local x=$1
    shift
    SLURM_CONF=$(conf "$x") timeout 15 "$@"
}

# The controller answers and the node is usable (idle, or busy with jobs; not down/unknown).
cluster_ready() {
    local st
    st=$(sl "$1" sinfo -h -N -n "$NODE" -o %t 2>/dev/null | head -n 1) || return 1
    [[ $st =~ ^(idle|mix|mixed|alloc|allocated|comp|completing)$ ]]
}

listening() { [ -n "$(ss -ltnH "sport = :$1" 2>/dev/null)" ]; }

ctld_answers() { sl "$1" scontrol ping 2>/dev/null | grep -q 'is UP'; }

start_ctld() {  # start_ctld A|B [clean]
    local x=$1 mode=${2:-} args=()
    free_port "${CTLD_PORT[$x]}"
    # `up` starts a controller clean (-c: no jobs left over from a crashed run); a restart
    # (`restart-ctld`) keeps the saved state, as a site's controller restart does.
    [ "$mode" = clean ] && args+=(-c)
    say "starting slurmctld for ${CLUSTER[$x]}${args:+ (clean state)}"
    SLURM_CONF=$(conf "$x") spawn "$LOG/slurmctld-${CLUSTER[$x]}.out" \
        /usr/sbin/slurmctld -f "$(conf "$x")" "${args[@]}"
    # Ping only once the port listens: a client that finds it closed backs off for seconds.
    wait_until 20 "slurmctld ${CLUSTER[$x]} to answer" \
        eval 'listening "${CTLD_PORT[$x]}" && ctld_answers "$x"' || {
        log_tail "$LOG/slurmctld-${CLUSTER[$x]}.log" "$LOG/slurmctld-${CLUSTER[$x]}.out"
        die "slurmctld for cluster ${CLUSTER[$x]} did not come up"
    }
}

start_slurmd() {
    local x=$1 pid
    free_port "${SLURMD_PORT[$x]}"
    # Job steps of a previous slurmd of ours (crashed run) would confuse the new one.
    for pid in $(marked_pids); do
        if [[ $(tr '\0' '\n' 2>/dev/null <"/proc/$pid/environ" || true) == *"SLURM_CONF=$(conf "$x")"* ]] &&
            [[ $(cat "/proc/$pid/comm" 2>/dev/null) == slurmstepd ]]; then
            kill_tree "$pid"
        fi
    done
    rm -rf "$(cdir "$x")/spool"
    install -d -m 755 "$(cdir "$x")/spool"
    say "starting slurmd for ${CLUSTER[$x]}"
    SLURM_CONF=$(conf "$x") spawn "$LOG/slurmd-${CLUSTER[$x]}.out" \
        /usr/sbin/slurmd -f "$(conf "$x")"
}

stop_cluster() {
    stop_pidfile "slurmd ${CLUSTER[$1]}" "$(slurmd_pid "$1")"
    stop_pidfile "slurmctld ${CLUSTER[$1]}" "$(ctld_pid "$1")"
}

ensure_cluster() {  # ensure_cluster A|B CHANGED; sets STARTED_A/B=1 when it started anything
    local x=$1 changed=$2
    if [ -n "$changed" ]; then
        say "slurm.conf of ${CLUSTER[$x]} changed: restarting its daemons"
        stop_cluster "$x"
    fi
    if [ -z "$(running_pid "$(ctld_pid "$x")")" ]; then
        start_ctld "$x" clean
        printf -v "STARTED_$x" 1
    fi
    if [ -z "$(running_pid "$(slurmd_pid "$x")")" ]; then
        start_slurmd "$x"
        printf -v "STARTED_$x" 1
    fi
}

wait_cluster() {
    local x=$1
    wait_until 45 "the node of cluster ${CLUSTER[$x]} to be usable" cluster_ready "$x" || {
        sl "$x" sinfo -N -l >&2 || true
        log_tail "$LOG/slurmctld-${CLUSTER[$x]}.log" "$LOG/slurmd-${CLUSTER[$x]}.log" "$LOG/slurmd-${CLUSTER[$x]}.out"
        die "cluster ${CLUSTER[$x]} is not usable"
    }
}

job_state() { sl "$1" scontrol show job -o "$2" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2; }

job_done() { [[ $(job_state "$1" "$2") =~ ^(COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY|BOOT_FAIL|DEADLINE|PREEMPTED)$ ]]; }

# Wait for job $2 on cluster $1 to finish; it must have COMPLETED and written the hostname
# into $3. The testbed is shared: when other sessions' jobs hold every core, the test job just
# waits in the queue; after 30 s that is accepted (their running jobs show that the cluster
# runs jobs) and the test job is cancelled. Anything else (a failed job, a node down) is not.
check_job() {
    local x=$1 id=$2 out=$3 st reason
    if ! wait_until 30 "test job $id on ${CLUSTER[$x]}" job_done "$x" "$id" 2>/dev/null; then
        st=$(job_state "$x" "$id")
        reason=$(sl "$x" scontrol show job -o "$id" 2>/dev/null | grep -o 'Reason=[A-Za-z_]*' | cut -d= -f2)
        if [ "$st" = PENDING ] && [[ $reason =~ ^(Priority|Resources)$ ]] &&
            [[ $(sl "$x" sinfo -h -N -n "$NODE" -o %t | head -n 1) =~ ^(alloc|mix)$ ]]; then
            say "cluster ${CLUSTER[$x]} is busy with other jobs: test job $id cancelled unrun"
            sl "$x" scancel "$id" || true
            return 0
        fi
        wait_until 30 "test job $id on ${CLUSTER[$x]}" job_done "$x" "$id" || {
            sl "$x" scontrol show job "$id" >&2 || true
            log_tail "$LOG/slurmctld-${CLUSTER[$x]}.log" "$LOG/slurmd-${CLUSTER[$x]}.log"
            sl "$x" scancel "$id" || true
            die "test job on cluster ${CLUSTER[$x]} did not finish"
        }
    fi
    st=$(job_state "$x" "$id")
    wait_until 5 "output of test job $id" test -s "$out" || true
    if [ "$st" != COMPLETED ] || [ "$(cat "$out" 2>/dev/null)" != "$(hostname)" ]; then
        sl "$x" scontrol show job "$id" >&2 || true
        echo "output ($out): $(cat "$out" 2>&1)" >&2
        log_tail "$LOG/slurmd-${CLUSTER[$x]}.log"
        die "test job $id on cluster ${CLUSTER[$x]} ended $st"
    fi
    rm -f "$out"
}

no_active_jobs() { [ -z "$(sl "$1" squeue -h -t PD,R,CG,S,CF -o %i 2>/dev/null)" ]; }

# Cancel every job on both clusters and give them a few seconds to end (KillWait=2), so their
# job steps finish cleanly before slurmd goes away. The partitions are drained first: a
# coordinator still running somewhere would otherwise submit new jobs in between.
cancel_all_jobs() {
    local x ids p
    for x in A B; do
        ctld_answers "$x" || continue
        for p in $(sl "$x" sinfo -h -o %R 2>/dev/null); do
            sl "$x" scontrol update PartitionName="$p" State=DRAIN || true
        done
        ids=$(sl "$x" squeue -h -t PD,R,CG,S,CF -o %i 2>/dev/null || true)
        if [ -n "$ids" ]; then
            say "cancelling $(wc -w <<<"$ids") job(s) on ${CLUSTER[$x]}"
            # shellcheck disable=SC2086
            sl "$x" scancel $ids || true
        fi
    done
    for x in A B; do
        ctld_answers "$x" || continue
        wait_until 8 "the jobs of ${CLUSTER[$x]} to end" no_active_jobs "$x" || true
    done
}

# ---------------------------------------------------------------- accounting (tbb)

# mariadb as the database's root, over our own socket (unix_socket authentication: OS root).
db_sql() { timeout 30 mariadb --no-defaults --protocol=socket --socket="$DB_SOCK" -u root "$@"; }
db_works() { [ -S "$DB_SOCK" ] && db_sql -e 'SELECT 1' </dev/null >/dev/null; }   # a check: its answer is not for the terminal

# MariaDB of our own: its data in $DB_DATA, its socket in $DB_RUN, TCP on 127.0.0.1:$DB_PORT only
# (slurmdbd connects by host and port). --no-defaults: no /etc/mysql setting applies, and the
# system's server (if any) on its default socket and port 3306 is never touched.
ensure_mariadb() {
    local pid
    pid=$(running_pid "$DB_RUN/mariadb.pid")
    if [ -n "$pid" ] && db_works; then
        return 0
    fi
    [ -n "$pid" ] && kill_pid "$pid"
    free_port "$DB_PORT"
    if [ ! -d "$DB_DATA/mysql" ]; then
        say "creating the accounting database files in $DB_DATA"
        # --no-defaults must come first; root may log in only as OS root over the socket
        mariadb-install-db --no-defaults --user=mysql --datadir="$DB_DATA" \
            --auth-root-authentication-method=socket --skip-test-db >"$LOG/mariadb-install.log" 2>&1 9>&- || {
            log_tail "$LOG/mariadb-install.log"
            die "mariadb-install-db failed"
        }
    fi
    rm -f "$DB_SOCK"
    say "starting mariadbd on 127.0.0.1:$DB_PORT"
    # Slurm's advice for slurmdbd (innodb_lock_wait_timeout=900); a small buffer pool, no DNS.
    spawn_bg "$LOG/mariadb.log" /usr/sbin/mariadbd --no-defaults --user=mysql --datadir="$DB_DATA" \
        --socket="$DB_SOCK" --pid-file="$DB_RUN/mariadb.pid" --port="$DB_PORT" --bind-address=127.0.0.1 \
        --skip-name-resolve --innodb-buffer-pool-size=64M --innodb-lock-wait-timeout=900
    wait_until 30 "mariadbd to answer" db_works || {
        log_tail "$LOG/mariadb.log"
        die "mariadbd did not come up"
    }
}

# The database password, random per testbed: kept only in slurmdbd.conf (0600, slurm's), made
# when there is none. It is a secret (docs/security.md): never on a command line.
db_password() {
    local f pw=
    f=$(dbd_conf)
    [ -f "$f" ] && [ ! -L "$f" ] && pw=$(sed -n 's/^StoragePass=\([A-Za-z0-9]*\)$/\1/p' "$f")
    [ -n "$pw" ] || pw=$(head -c 32 /dev/urandom | base64 | tr -dc 'A-Za-z0-9' | head -c 32)
    echo "$pw"
}

# The database and slurmdbd's user (SQL on stdin, so the password never shows in ps).
ensure_db_user() {
    db_sql <<EOF || die "cannot create the database $DB_NAME and its user"
CREATE DATABASE IF NOT EXISTS $DB_NAME;
CREATE USER IF NOT EXISTS '$DB_USER'@'127.0.0.1' IDENTIFIED BY '$1';
ALTER USER '$DB_USER'@'127.0.0.1' IDENTIFIED BY '$1';
GRANT ALL ON $DB_NAME.* TO '$DB_USER'@'127.0.0.1';
EOF
}

write_dbd_conf() {  # write_dbd_conf PASSWORD; prints "changed" when the file changed
    local f tmp
    f=$(dbd_conf)
    tmp=$(mktemp "$(cdir B)/.slurmdbd.conf.XXXXXX")   # 0600 from mktemp, before anything is written
    cat >"$tmp" <<EOF
# Generated by scripts/testbed.sh: slurmdbd of resel's test bed (accounting for tbb). Do not edit.
# It holds the database password: 0600, owned by SlurmUser, as slurmdbd demands.
AuthType=auth/munge
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=$DBD_PORT
SlurmUser=slurm
PidFile=$DBD_DIR/slurmdbd.pid
LogFile=$DBD_DIR/slurmdbd.log
DebugLevel=info
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=$DB_USER
StoragePass=$1
StorageLoc=$DB_NAME
EOF
    chown slurm:slurm "$tmp"
    chmod 600 "$tmp"
    if [ -f "$f" ] && [ ! -L "$f" ] && cmp -s "$tmp" "$f"; then
        rm -f "$tmp"
    else
        mv -fT "$tmp" "$f"
        echo changed
    fi
}

dbd_works() { listening "$DBD_PORT" && sl B sacctmgr -n -P show cluster format=cluster </dev/null >/dev/null; }

ensure_slurmdbd() {
    local pw changed pid
    ensure_mariadb
    pw=$(db_password)
    ensure_db_user "$pw"
    changed=$(write_dbd_conf "$pw")
    pid=$(running_pid "$DBD_DIR/slurmdbd.pid")
    if [ -n "$pid" ] && [ -z "$changed" ] && dbd_works; then
        return 0
    fi
    [ -n "$pid" ] && kill_pid "$pid"
    free_port "$DBD_PORT"
    say "starting slurmdbd on port $DBD_PORT"
    SLURM_CONF=$(conf B) spawn "$LOG/slurmdbd.out" /usr/sbin/slurmdbd
    wait_until 30 "slurmdbd to answer" dbd_works || {
        log_tail "$DBD_DIR/slurmdbd.log" "$LOG/slurmdbd.out"
        die "slurmdbd did not come up"
    }
}

# The associations tbb's jobs need (AccountingStorageEnforce=associations): cluster tbb, account
# resel with QOS normal (unlimited, the default) and $LIMIT_QOS, users root and reseltb in it.
# Only what is missing is added; the QOS's limits are set again each time (a test may not change
# them for good).
ensure_associations() {
    local have want
    sa() { sl B sacctmgr -i "$@" </dev/null >/dev/null; }
    # Fast path (one query): everything already as wanted, as on every `up` after the first.
    want=$(printf '%s\n' "$TB_ACCOUNT||normal,$LIMIT_QOS|normal" "$TB_ACCOUNT|root|normal,$LIMIT_QOS|normal" \
        "$TB_ACCOUNT|$TB_USER|normal,$LIMIT_QOS|normal" "$LIMIT_QOS|$LIMIT_MAX_SUBMIT|$LIMIT_MAX_JOBS")
    have=$({ sl B sacctmgr -n -P show assoc where cluster="${CLUSTER[B]}" account="$TB_ACCOUNT" format=account,user,qos,defaultqos
        sl B sacctmgr -n -P show qos where name="$LIMIT_QOS" format=name,maxsubmitjobsperuser,maxjobsperuser; } </dev/null 2>/dev/null | sort)
    [ "$have" = "$(sort <<<"$want")" ] && return 0
    have=$(sl B sacctmgr -n -P show cluster format=cluster </dev/null)
    grep -qxF "${CLUSTER[B]}" <<<"$have" || { say "sacctmgr: adding cluster ${CLUSTER[B]}"; sa add cluster "${CLUSTER[B]}"; }
    have=$(sl B sacctmgr -n -P show qos format=name </dev/null)
    grep -qxF "$LIMIT_QOS" <<<"$have" || sa add qos "$LIMIT_QOS"
    sa modify qos where name="$LIMIT_QOS" set MaxSubmitJobsPerUser="$LIMIT_MAX_SUBMIT" MaxJobsPerUser="$LIMIT_MAX_JOBS" || true   # "nothing modified" exits 1
    have=$(sl B sacctmgr -n -P show account where name="$TB_ACCOUNT" format=account </dev/null)
    [ -n "$have" ] || sa add account "$TB_ACCOUNT" cluster="${CLUSTER[B]}" Description=resel-testbed Organization=resel
    have=$(sl B sacctmgr -n -P show assoc where cluster="${CLUSTER[B]}" account="$TB_ACCOUNT" format=user </dev/null)
    for u in root "$TB_USER"; do
        grep -qxF "$u" <<<"$have" || sa add user "$u" account="$TB_ACCOUNT" cluster="${CLUSTER[B]}"
    done
    sa modify account where name="$TB_ACCOUNT" cluster="${CLUSTER[B]}" set qos=normal,"$LIMIT_QOS" defaultqos=normal || true
    sa modify user where name="$TB_USER" cluster="${CLUSTER[B]}" set defaultaccount="$TB_ACCOUNT" || true
}

stop_accounting() {
    stop_pidfile slurmdbd "$DBD_DIR/slurmdbd.pid"
    stop_pidfile mariadbd "$DB_RUN/mariadb.pid"
}

# ---------------------------------------------------------------- slurmrestd

rest_works() {  # GET /slurm/v0.0.38/ping with the token; 200 and JSON expected
    python3 - "$REST_PORT" "$TB_USER" "$TOKEN_FILE" <<'EOF'
import json, sys, urllib.request
port, user, token_file = sys.argv[1:]
req = urllib.request.Request(f"http://127.0.0.1:{port}/slurm/v0.0.38/ping", headers={
    "X-SLURM-USER-NAME": user, "X-SLURM-USER-TOKEN": open(token_file).read().strip()})
with urllib.request.urlopen(req, timeout=5) as r:
    body = json.load(r)
sys.exit(0 if not body.get("errors") else 1)
EOF
}

ensure_rest() {
    local pid tok
    # A fresh token each `up` (older ones stay valid until they expire).
    tok=$(sl A scontrol token username="$TB_USER" lifespan=86400) || die "scontrol token failed: $tok"
    tok=${tok#SLURM_JWT=}
    printf '%s\n' "$tok" | put "$TOKEN_FILE" 600     # private: whoever reads it acts as $TB_USER on tba
    pid=$(running_pid "$RUN/slurmrestd.pid")
    if [ -n "$pid" ] && rest_works; then
        return 0
    fi
    [ -n "$pid" ] && kill_pid "$pid"
    free_port "$REST_PORT"
    say "starting slurmrestd on 127.0.0.1:$REST_PORT"
    # slurmrestd refuses to run as root; SLURM_JWT=daemon makes it accept per-request tokens
    # (without it every request is refused with "Rejecting thread config token"); only the
    # openapi/v0.0.38 plugin is loaded, the dbv0.0.38 one would need slurmdbd. It has no
    # daemon mode, so it runs in the background and we take its pid from its listening socket.
    spawn_bg "$LOG/slurmrestd.log" setpriv --reuid="$TB_USER" --regid="$TB_USER" --init-groups \
        env HOME="$TB_HOME" USER="$TB_USER" SLURM_JWT=daemon SLURM_CONF="$(conf A)" \
        /usr/sbin/slurmrestd -f "$(conf A)" -s openapi/v0.0.38 -a rest_auth/jwt "127.0.0.1:$REST_PORT"
    wait_until 20 "slurmrestd to answer" rest_works || {
        log_tail "$LOG/slurmrestd.log"
        die "slurmrestd did not come up"
    }
    pid=$(ss -ltnpH "sport = :$REST_PORT" | grep -o 'pid=[0-9]*' | head -n 1 | cut -d= -f2)
    echo "$pid" | put "$RUN/slurmrestd.pid" 644
}

# ---------------------------------------------------------------- sshd

ssh_works() { ssh -F "$SSH_CONFIG" "$1" true </dev/null 9>&-; }

write_ssh_files() {
    local hostkey=$SSHD_DIR/ssh_host_ed25519_key line h
    [ -s "$hostkey" ] || ssh-keygen -q -t ed25519 -N '' -C "resel-testbed-host" -f "$hostkey"
    chmod 600 "$hostkey"
    [ -s "$SSH_KEY" ] || ssh-keygen -q -t ed25519 -N '' -C "$TB_USER@resel-testbed" -f "$SSH_KEY"
    chmod 600 "$SSH_KEY"

    put "$SSHD_DIR/sshd_config" 644 <<EOF
# Generated by scripts/testbed.sh: resel's test bed sshd (the system sshd is not touched).
Port $SSH_PORT
ListenAddress 127.0.0.1
HostKey $hostkey
PidFile $RUN/sshd.pid
# Without PAM, nothing to set up for sessions; key logins only.
UsePAM no
PermitRootLogin prohibit-password
PubkeyAuthentication yes
AuthorizedKeysFile .ssh/authorized_keys
PasswordAuthentication no
KbdInteractiveAuthentication no
# ProxyJump (ssh -W) through this server.
AllowTcpForwarding yes
X11Forwarding no
PrintMotd no
PrintLastLog no
UseDNS no
# Tests open many connections and channels at once.
MaxStartups 100:30:200
MaxSessions 100
LoginGraceTime 30
Subsystem sftp internal-sftp
EOF

    # reseltb's authorized_keys, written as reseltb (its home is its own to arrange).
    line=$(cat "$SSH_KEY.pub")
    # shellcheck disable=SC2016  # expanded by the inner shell
    as_tb_user sh -c 'umask 077 && mkdir -p "$HOME/.ssh" && chmod 700 "$HOME/.ssh" &&
        f=$HOME/.ssh/authorized_keys && touch "$f" && chmod 600 "$f" &&
        { grep -qxF "$1" "$f" || printf "%s\n" "$1" >>"$f"; }' sh "$line"

    # known_hosts: the address and every alias, so both OpenSSH (which looks up HostName)
    # and clients that look up the alias (e.g. paramiko) find the key.
    line=$(cut -d' ' -f1,2 "$hostkey.pub")
    for h in 127.0.0.1 localhost "$NODE" tb-ssh tb-jump tb-via-jump; do
        echo "[$h]:$SSH_PORT $line"
    done | put "$KNOWN_HOSTS" 644

    put "$SSH_CONFIG" 644 <<EOF
# Generated by scripts/testbed.sh: use with ssh -F $SSH_CONFIG HOST.
Host tb-ssh tb-jump
    HostName 127.0.0.1
    Port $SSH_PORT
    User $TB_USER

Host tb-via-jump
    HostName 127.0.0.1
    Port $SSH_PORT
    User $TB_USER
    ProxyJump tb-jump

Host tb-ssh tb-jump tb-via-jump
    IdentityFile $SSH_KEY
    IdentitiesOnly yes
    UserKnownHostsFile $KNOWN_HOSTS
    GlobalKnownHostsFile /dev/null
    StrictHostKeyChecking yes
    BatchMode yes
    ConnectTimeout 10
    LogLevel ERROR
EOF
}

ensure_sshd() {
    local pid
    write_ssh_files
    # Privilege separation needs /run/sshd (normally made by the system's unit); even `sshd -t`
    # refuses to check a config without it ("Missing privilege separation directory").
    install -d -m 755 /run/sshd
    /usr/sbin/sshd -t -f "$SSHD_DIR/sshd_config" || die "sshd rejects $SSHD_DIR/sshd_config"
    pid=$(running_pid "$RUN/sshd.pid")
    if [ -z "$pid" ] || ! ssh_works tb-ssh; then
        [ -n "$pid" ] && kill_pid "$pid"
        free_port "$SSH_PORT"
        say "starting sshd on 127.0.0.1:$SSH_PORT"
        # sshd re-executes itself, so it must be started by absolute path.
        spawn "$LOG/sshd.out" /usr/sbin/sshd -f "$SSHD_DIR/sshd_config" -E "$LOG/sshd.log"
        wait_until 15 "sshd to accept reseltb's key" ssh_works tb-ssh || {
            ssh -F "$SSH_CONFIG" -v tb-ssh true </dev/null 9>&- || true
            log_tail "$LOG/sshd.log" "$LOG/sshd.out"
            die "cannot log in with ssh -F $SSH_CONFIG tb-ssh"
        }
        STARTED_SSH=1
    fi
    ssh_works tb-via-jump || {
        ssh -F "$SSH_CONFIG" -v tb-via-jump true </dev/null 9>&- || true
        log_tail "$LOG/sshd.log"
        die "cannot log in with ssh -F $SSH_CONFIG tb-via-jump (ProxyJump)"
    }
}

# ---------------------------------------------------------------- the Debian parts

# scripts/testbed-trixie.sh keeps its state in $TB/trixie and marks its processes
# RESEL_TB_OWNER=$TB/trixie, so neither script ever stops the other's. Its `up` fails with one
# clear line where the root cannot be built (no debootstrap, no mirror); RESEL_TB_TRIXIE=0 skips
# it then. Its `down` always runs: it stops only what it started, and nothing when nothing runs.
#
# The Debian sid part (Slurm 26.05, HTCondor 25) is the same script run for another suite
# (scripts/testbed-sid.sh): state in $TB/sid, mark RESEL_TB_OWNER=$TB/sid, its own ports;
# RESEL_TB_SID=0 skips it.
debian_part() {  # debian_part SUITE up|down|status
    local suite=$1 skip what
    case $suite in
        trixie) skip=RESEL_TB_TRIXIE what="Debian 13 part (Slurm 24.11, HTCondor 23)" ;;
        sid) skip=RESEL_TB_SID what="Debian sid part (Slurm 26.05, HTCondor 25)" ;;
    esac
    if [ "$2" = up ] && [ "${!skip:-1}" = 0 ]; then
        say "$skip=0: the $what is left out"
        return 0
    fi
    RESEL_TB=$TB RESEL_TB_SUITE=$suite bash "$(dirname "${BASH_SOURCE[0]}")/testbed-trixie.sh" "$2" 9>&- && return 0
    [ "$2" = up ] && die "the $what failed (above); $skip=0 brings up the rest without it"
    echo "testbed.sh: testbed-$suite.sh $2 failed (above); going on" >&2
}

# The Debian parts come up beside the rest of `up`, each in the background: their roots, ports,
# users and locks are their own, and on a fresh machine each spends a minute or more in
# debootstrap and apt inside its root while this part installs and starts Slurm on the host
# (one after the other, the three took 254 s on a fresh machine here). The only host-wide step
# they share, installing debootstrap, is done before they start (DEBIAN_PARTS_PACKAGES).
# Their lines keep their own prefixes (testbed-trixie:, testbed-sid:); a part that fails ends
# `up` with its message once this part is done, as when they ran one after the other.
declare -A PART_PID=()
debian_parts_start() {
    local suite
    for suite in trixie sid; do
        ( debian_part "$suite" up ) &
        PART_PID[$suite]=$!
    done
}
debian_parts_wait() {
    local suite failed=""
    for suite in trixie sid; do
        wait "${PART_PID[$suite]}" || failed+=" $suite"
    done
    [ -z "$failed" ] || die "the Debian part(s)${failed} failed (their lines above say why)"
}

# ---------------------------------------------------------------- env file

write_env() {
    {
        cat <<EOF
RESEL_TB=$TB
TB_SLURM_CONF_A=$(conf A)
TB_SLURM_CONF_B=$(conf B)
TB_CLUSTER_A=${CLUSTER[A]}
TB_CLUSTER_B=${CLUSTER[B]}
TB_HOST=$NODE
TB_USER=$TB_USER
TB_SSH_HOST=127.0.0.1
TB_SSH_PORT=$SSH_PORT
TB_SSH_KEY=$SSH_KEY
TB_KNOWN_HOSTS=$KNOWN_HOSTS
TB_SSH_CONFIG=$SSH_CONFIG
TB_REST_URL=http://127.0.0.1:$REST_PORT
TB_REST_USER=$TB_USER
TB_REST_TOKEN_FILE=$TOKEN_FILE
TB_WORK_A=$WORK_A
TB_WORK_B=$WORK_B
TB_ACCOUNTING_B=1
TB_ACCOUNTING_DB_PORT=$DB_PORT
TB_ACCOUNT_B=$TB_ACCOUNT
TB_LIMIT_QOS=$LIMIT_QOS
TB_LIMIT_QOS_MAX_SUBMIT=$LIMIT_MAX_SUBMIT
TB_LIMIT_QOS_MAX_JOBS=$LIMIT_MAX_JOBS
EOF
        # the Debian parts' keys (scripts/testbed-trixie.sh, testbed-sid.sh), those that are up
        if [ "${RESEL_TB_TRIXIE:-1}" != 0 ]; then cat "$TB/trixie/testbed.env"; fi
        if [ "${RESEL_TB_SID:-1}" != 0 ]; then cat "$TB/sid/testbed.env"; fi
    } | put "$ENV_FILE" 644
}

# ---------------------------------------------------------------- commands

need_root() { [ "$(id -u)" = 0 ] || die "must run as root (it installs packages and starts daemons)"; }

cmd_up() {
    local t0 chg_a chg_b id_a id_b x
    need_root
    t0=$(date +%s%N)
    safe_tb_dir create   # before anything is installed, written or started
    ensure_packages
    debian_parts_start
    lock
    # If anything below fails, no env file may claim the testbed is up (and the Debian parts,
    # still coming up, are waited for: `down` right after must find them whole).
    trap 'rc=$?; [ $rc = 0 ] || { rm -f "$ENV_FILE"; wait; }' EXIT
    STARTED_A=0 STARTED_B=0 STARTED_SSH=0
    ensure_user
    ensure_dirs
    ensure_munge
    ensure_jwt_key
    chg_a=$(write_slurm_conf A)
    chg_b=$(write_slurm_conf B)
    ensure_slurmdbd
    ensure_associations
    ensure_cluster A "$chg_a"
    ensure_cluster B "$chg_b"
    wait_cluster A
    wait_cluster B
    ensure_rest
    ensure_sshd

    # One real job per cluster: root's on tba in TB_WORK_A, and reseltb's on tbb submitted over
    # SSH into TB_WORK_B, the way the SSH site does it. Only for what this run (re)started, or
    # when there was no env file: an `up` on a running testbed whose clusters may be full of
    # some test's jobs must not wait behind them.
    [ -f "$ENV_FILE" ] || STARTED_A=1 STARTED_B=1
    [ "$STARTED_SSH" = 1 ] && STARTED_B=1
    if [ "$STARTED_A" = 1 ]; then
        say "running a test job on ${CLUSTER[A]}"
        id_a=$(sl A sbatch --parsable -J tb-check -D "$WORK_A" -o "$WORK_A/tb-check-%j.out" -t 1 --wrap hostname)
        id_a=${id_a%%;*}
    fi
    if [ "$STARTED_B" = 1 ]; then
        say "running a test job on ${CLUSTER[B]} as $TB_USER over ssh"
        id_b=$(ssh -F "$SSH_CONFIG" tb-ssh \
            "cd $WORK_B && env SLURM_CONF=$(conf B) sbatch --parsable -J tb-check -o tb-check-%j.out -t 1 --wrap hostname" </dev/null 9>&-)
        id_b=${id_b%%;*}
    fi
    [ "$STARTED_A" = 1 ] && check_job A "$id_a" "$WORK_A/tb-check-$id_a.out"
    [ "$STARTED_B" = 1 ] && check_job B "$id_b" "$WORK_B/tb-check-$id_b.out"
    debian_parts_wait

    write_env
    say "up in $((($(date +%s%N) - t0) / 1000000)) ms; environment in $ENV_FILE"
}

cmd_down() {
    local t0 pid x
    need_root
    t0=$(date +%s%N)
    safe_tb_dir || { say "nothing to stop ($TB does not exist)"; return 0; }
    debian_part sid down
    debian_part trixie down
    lock
    rm -f "$ENV_FILE"
    cancel_all_jobs
    # sshd with its open sessions (a listener's TERM leaves those running).
    pid=$(running_pid "$RUN/sshd.pid")
    if [ -n "$pid" ]; then
        say "stopping sshd (pid $pid) and its sessions"
        kill_tree "$pid"
    fi
    rm -f "$RUN/sshd.pid"
    stop_pidfile slurmrestd "$RUN/slurmrestd.pid"
    for x in A B; do stop_cluster "$x"; done
    stop_accounting
    # Anything else still carrying our mark (job steps, a daemon whose pid file was lost).
    # munged carries it too when we started it, so it is left for the step below.
    local munged_pid
    munged_pid=$(pid_from "$RUN/munged.pid")
    for pid in $(marked_pids); do
        [ "$pid" = "$munged_pid" ] && continue
        say "stopping leftover process $pid ($(cat "/proc/$pid/comm" 2>/dev/null)) and its children"
        kill_tree "$pid"
    done
    stop_pidfile munged "$RUN/munged.pid"
    say "down in $((($(date +%s%N) - t0) / 1000000)) ms"
}

cmd_restart_ctld() {
    local x=${1:-} t0
    need_root
    case $x in
        A | a | tba) x=A ;;
        B | b | tbb) x=B ;;
        *) die "usage: testbed.sh restart-ctld A|B" ;;
    esac
    safe_tb_dir && [ -f "$(conf "$x")" ] || die "no testbed in $TB (run: testbed.sh up)"
    t0=$(date +%s%N)
    lock
    # Under the lock: a `down` that ran while we waited must not be undone by us.
    [ -f "$ENV_FILE" ] || die "the testbed in $TB is not up (no $ENV_FILE)"
    stop_pidfile "slurmctld ${CLUSTER[$x]}" "$(ctld_pid "$x")"
    start_ctld "$x"
    wait_cluster "$x"
    say "slurmctld ${CLUSTER[$x]} restarted in $((($(date +%s%N) - t0) / 1000000)) ms"
}

show() {  # show NAME PIDFILE
    local pid
    pid=$(pid_from "$2")
    if [ -n "$pid" ] && is_ours "$pid"; then
        printf '  %-16s running (pid %s)\n' "$1" "$pid"
    else
        printf '  %-16s stopped\n' "$1"
    fi
}

cmd_status() {
    local x
    safe_tb_dir || { echo "no testbed in $TB"; return 0; }
    echo "testbed in $TB"
    for x in A B; do
        show "slurmctld ${CLUSTER[$x]}" "$(ctld_pid "$x")"
        show "slurmd ${CLUSTER[$x]}" "$(slurmd_pid "$x")"
    done
    show slurmrestd "$RUN/slurmrestd.pid"
    show slurmdbd "$DBD_DIR/slurmdbd.pid"
    show mariadbd "$DB_RUN/mariadb.pid"
    show sshd "$RUN/sshd.pid"
    if [ -n "$(pid_from "$RUN/munged.pid")" ] && is_ours "$(pid_from "$RUN/munged.pid")"; then
        show munged "$RUN/munged.pid"
    elif munge_works; then
        printf '  %-16s running (the system'"'"'s, not ours)\n' munged
    else
        printf '  %-16s stopped\n' munged
    fi
    for x in A B; do
        if [ -f "$(conf "$x")" ] && ctld_answers "$x"; then
            echo "  cluster ${CLUSTER[$x]}: $(sl "$x" sinfo -h -o '%P %a %D %t %C' | tr '\n' ';')" \
                "jobs: $(sl "$x" squeue -h | wc -l)"
        fi
    done
    if [ -f "$ENV_FILE" ]; then echo "  env file: $ENV_FILE"; else echo "  env file: absent (not up)"; fi
    debian_part trixie status
    debian_part sid status
}

case ${1:-} in
    up) cmd_up ;;
    down) cmd_down ;;
    restart-ctld) cmd_restart_ctld "${2:-}" ;;
    status) cmd_status ;;
    *)
        echo "usage: $0 up|down|restart-ctld A|B|status   (testbed root: \$RESEL_TB, default /tmp/resel-testbed)" >&2
        exit 2
        ;;
esac
