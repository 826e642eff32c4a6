#!/usr/bin/env bash
# The README's two commands on a fresh Debian 12, as a new user (and CI) would run them:
#
#   scripts/fresh-check.sh [--rebuild] [--keep] [--verbose] [main] [test] [-- PYTEST_ARGS...]
#   scripts/fresh-check.sh [--keep] --run 'COMMAND'     any command, the same way (to debug)
#
# (as root). `main` runs the main-job command, `test` the test command; both by default, each
# in its own pristine root. Prints what each took and PASS or FAIL (with the log's last lines).
#
# How:
#   1. A minimal Debian 12 root: `debootstrap --variant=minbase --include=python3 bookworm`,
#      i.e. CI's "Debian 12 with Python 3.11" and nothing else (no venv module, no ps, no
#      compiler, no ssh), with Debian's usual sources (bookworm, -updates, -security) and empty
#      package lists, like Debian's container image. It is built once into a tarball in
#      $RESEL_FRESH_CACHE (default /var/cache/resel-fresh, outside any checkout) and rebuilt when
#      that is absent or with --rebuild.
#   2. Every check unpacks a pristine copy, puts a clean clone of this checkout's HEAD in
#      /build/resel and the shared folder (read-only) beside it in /build/shared: CI's layout.
#   3. The root runs in its own mount, PID, UTS, IPC and network namespaces. Its testbed's
#      daemons (sshd 2222, slurmrestd 6820, slurmctld/slurmd 6917-6928) listen on its own
#      loopback and never meet the host's shared testbed; its /tmp/resel-testbed is inside the
#      root; its /proc shows only its own processes, so its `testbed.sh down` cannot touch the
#      host's daemons. slirp4netns (user-space NAT, the host's network settings are not
#      touched) lets it reach Debian's mirror and PyPI.
#      It gets what any machine has and nothing of the project's: a hostname and /etc/hosts,
#      a resolver (slirp4netns's), /proc, /sys, the machine's cgroup mounts read-only (slurmd
#      refuses to start without one), a /dev of its own. On a network that intercepts TLS with
#      a local CA (this machine's /usr/local/share/ca-certificates), the root's pip is given a
#      copy of the machine's CA bundle in /etc/pip.conf, as every machine there needs.
#   4. The commands are read from the README of HEAD (the first two ```sh blocks under
#      "## Two commands") and run exactly as written, as root, in /build/resel, with a clean
#      environment (nothing of the host's: no PIP_FIND_LINKS, no proxies, no venv). The one
#      thing added is PYTEST_ADDOPTS=-rfEs: pytest's summary also lists skipped tests, with why.
#      `main` first does what the README asks of a bare Debian (python3-venv); `test` starts
#      from the bare root, as .ci/run does.
#   5. Teardown however it exits: the root's PID namespace is killed (the kernel then kills every
#      process started in it), its mounts vanish with its mount namespace, slirp4netns is
#      stopped, and the copy is removed (kept with --keep). Logs stay in $CACHE/logs/.
#
# PYTEST_ARGS (after --) are appended to the test command, to iterate on a failure; a run
# with them is not the README's command and says so.
set -Eeuo pipefail

SUITE=bookworm
MIRROR=${RESEL_FRESH_MIRROR:-http://deb.debian.org/debian}
CACHE=${RESEL_FRESH_CACHE:-/var/cache/resel-fresh}
TARBALL=$CACHE/debian12-minbase-python3.tar
HOSTNAME_IN_ROOT=resel-fresh
# What the README asks of a bare Debian before the main-job command.
MAIN_PREREQ='apt-get update -qq && apt-get install -y -qq python3-venv'
SELF=$(readlink -f "$0")
REPO=$(cd "$(dirname "$SELF")/.." && pwd)

T0=$(date +%s)
say() { printf 'fresh-check: %s\n' "$*"; }
die() { printf 'fresh-check: %s\n' "$*" >&2; exit 1; }
secs() { echo $(($(date +%s) - $1)); }
mmss() { printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); }

# ------------------------------------------------------------------ inside the namespaces
#
# `fresh-check.sh __inside ROOT SHARED LOGFILE COMMAND` runs as PID 1 of the new PID namespace,
# in private mount/UTS/IPC/net namespaces, still on the host's filesystem: it mounts what a
# booted machine has, waits for the network, and runs COMMAND chrooted into ROOT.
inside() {
    local r=$1 shared=$2 logf=$3 cmd=$4 d i
    mount --make-rprivate /
    # The root is a mount point of its own, as / is on any booted machine: a chroot into a
    # plain folder makes `unshare --propagation private` (testbed-trixie.sh) fail with EINVAL.
    mount --bind "$r" "$r"
    mount -t proc -o nosuid,nodev,noexec proc "$r/proc"     # this PID namespace's processes only
    mount -t sysfs -o ro,nosuid,nodev,noexec sysfs "$r/sys"
    # The cgroup file systems as this machine has them, read-only, as a container on it sees
    # them (slurmd 22.05 refuses to start without a cgroup mount, whatever its plugins).
    mount --rbind /sys/fs/cgroup "$r/sys/fs/cgroup"
    findmnt -rn -o TARGET -R "$r/sys/fs/cgroup" | while read -r d; do mount -o remount,bind,ro "$d"; done
    # A /dev of its own: the usual nodes, a private devpts, /dev/shm.
    mount -t tmpfs -o mode=755,nosuid tmpfs "$r/dev"
    for d in null zero full random urandom tty; do
        touch "$r/dev/$d"
        mount --bind "/dev/$d" "$r/dev/$d"
    done
    mkdir -m 755 "$r/dev/pts"
    mkdir -m 1777 "$r/dev/shm"
    mount -t devpts -o newinstance,ptmxmode=0666,mode=620,gid=5 devpts "$r/dev/pts"
    mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs "$r/dev/shm"
    ln -s pts/ptmx "$r/dev/ptmx"
    ln -s /proc/self/fd "$r/dev/fd"
    for i in 0 1 2; do ln -s "/proc/self/fd/$i" "$r/dev/$(echo stdin stdout stderr | cut -d' ' -f$((i + 1)))"; done
    mount -t tmpfs -o mode=755,nosuid,nodev tmpfs "$r/run"
    mkdir -m 1777 "$r/run/lock"
    mount --bind "$shared" "$r/build/shared"
    mount -o remount,bind,ro "$r/build/shared"
    hostname "$HOSTNAME_IN_ROOT"
    ip link set lo up
    for ((i = 0; i < 100; i++)); do
        ip route show default | grep -q . && break
        sleep 0.1
    done
    ip route show default | grep -q . || { echo "fresh-check: no network in the namespace" >>"$logf"; exit 97; }
    # The root becomes / of this mount namespace (pivot_root, the host's tree unmounted), not
    # a chroot: paths the kernel shows, such as /proc/PID/root of a process the testbed chroots
    # further, are then what they are on a booted machine (in a chroot they showed the host's
    # full path, and the Debian 13 part did not recognise its own daemons).
    exec 3>>"$logf"
    cd "$r"
    mkdir -p .fresh-oldroot
    pivot_root . .fresh-oldroot
    # A clean environment: what a root login on a fresh machine has, nothing of ours.
    exec /usr/sbin/chroot . /usr/bin/env -i \
        HOME=/root USER=root LOGNAME=root SHELL=/bin/bash TERM=dumb \
        PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        PYTEST_ADDOPTS=-rfEs \
        /bin/bash -c 'umount -l /.fresh-oldroot && rmdir /.fresh-oldroot && cd /build/resel && eval "$1"' \
        fresh-check "$cmd" </dev/null >&3 2>&1
}

if [ "${1:-}" = __inside ]; then
    shift
    inside "$@"
    exit $?
fi

# ------------------------------------------------------------------ on the host
#
# One brace group, which bash reads whole before running it: editing this file while a check
# runs (a long one, from a worktree) cannot derail the check. It ends in `exit`.
{
REBUILD=0 KEEP=0 VERBOSE=0 CHECKS=() EXTRA=() RUN_CMD=
while (($#)); do
    case $1 in
        --rebuild) REBUILD=1 ;;
        --keep) KEEP=1 ;;
        --verbose | -v) VERBOSE=1 ;;
        main | test) CHECKS+=("$1") ;;
        --run) (($# > 1)) || die "--run needs a command"; RUN_CMD=$2; CHECKS+=(run); shift ;;
        --) shift; EXTRA=("$@"); break ;;
        -h | --help) sed -n '2,/^set -E/p' "$SELF" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown argument '$1' (usage: fresh-check.sh [--rebuild] [--keep] [--verbose] [main] [test] [--run CMD] [-- PYTEST_ARGS...])" ;;
    esac
    shift
done
((${#CHECKS[@]})) || CHECKS=(main test)

[ "$(id -u)" = 0 ] || die "must run as root (debootstrap, chroot, namespaces)"
[[ $CACHE == /* ]] || die "RESEL_FRESH_CACHE must be an absolute path (got '$CACHE')"
case "$(readlink -f "$CACHE")/" in
    "$REPO"/*) die "RESEL_FRESH_CACHE must be outside the checkout ($REPO)" ;;
esac

# Host tools: debootstrap and slirp4netns from Debian when missing (the rest is in every Debian).
need=()
command -v debootstrap >/dev/null || need+=(debootstrap)
command -v slirp4netns >/dev/null || need+=(slirp4netns)
if ((${#need[@]})); then
    command -v apt-get >/dev/null || die "install ${need[*]} (not found)"
    say "installing ${need[*]} on this machine"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        -o DPkg::Lock::Timeout=600 "${need[@]}" >/dev/null
fi
for t in unshare chroot git tar ip flock; do command -v "$t" >/dev/null || die "needs $t"; done

HEAD=$(git -C "$REPO" rev-parse HEAD)
[ -z "$(git -C "$REPO" status --porcelain --untracked-files=no)" ] ||
    say "note: the checkout has uncommitted changes; the check runs the committed HEAD ${HEAD:0:10}"
SHARED=${RESEL_FRESH_SHARED:-$REPO/../shared}
[ -d "$SHARED" ] || die "no shared folder beside the checkout ($SHARED); set RESEL_FRESH_SHARED"
SHARED=$(readlink -f "$SHARED")

install -d -m 700 "$CACHE" "$CACHE/runs" "$CACHE/logs"
# Copies left by a fresh-check that was killed outright (its teardown never ran): its
# namespace died with it, so nothing is mounted there any more; --keep copies stay.
for d in "$CACHE"/runs/*/; do
    d=${d%/}
    [ -f "$d/owner.pid" ] && [ ! -e "$d/keep" ] || continue
    kill -0 "$(cat "$d/owner.pid")" 2>/dev/null && continue
    grep -qF " $d/" /proc/self/mountinfo || rm -rf --one-file-system "$d"
done
STAMP=$(date +%Y%m%d-%H%M%S)-${HEAD:0:7}
LOGDIR=$CACHE/logs/$STAMP
install -d -m 700 "$LOGDIR"

# ---- the pristine root

build_root() {
    local b=$CACHE/build.$$ t
    t=$(date +%s)
    rm -rf --one-file-system "$b"
    say "bootstrapping Debian 12 (minbase + python3) from $MIRROR ..."
    if ! debootstrap --variant=minbase --include=python3 "$SUITE" "$b" "$MIRROR" >"$LOGDIR/bootstrap.log" 2>&1; then
        tail -n 20 "$LOGDIR/bootstrap.log" >&2
        rm -rf --one-file-system "$b"
        die "debootstrap failed (log: $LOGDIR/bootstrap.log)"
    fi
    # Debian's usual sources, as its container image and installer write them; no package lists
    # yet (a fresh image has none, so whoever installs must `apt-get update` first).
    rm -f "$b/etc/apt/sources.list"
    cat >"$b/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $MIRROR
Suites: $SUITE $SUITE-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: ${MIRROR%/debian}/debian-security
Suites: $SUITE-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
    chroot "$b" apt-get clean
    rm -rf "$b"/var/lib/apt/lists/* "$b"/var/cache/apt/*.bin
    mkdir -p "$b/var/lib/apt/lists/partial"
    rm -f "$b/etc/hostname" "$b/etc/resolv.conf" "$b/etc/hosts"
    tar --numeric-owner --xattrs --xattrs-include='*' -C "$b" -cf "$TARBALL.new" .
    mv -f "$TARBALL.new" "$TARBALL"
    rm -rf --one-file-system "$b"
    BOOT_SECS=$(secs "$t")
    say "root built in $(mmss "$BOOT_SECS") ($(du -h "$TARBALL" | cut -f1)): $TARBALL"
}

exec 8>"$CACHE/.build.lock"
flock -w 1800 8 || die "another fresh-check holds $CACHE/.build.lock"
BOOT_SECS=
if ((REBUILD)) || [ ! -s "$TARBALL" ]; then
    build_root
else
    say "reusing the root $TARBALL (built $(date -r "$TARBALL" '+%F %T'); --rebuild to make it anew)"
fi
exec 8>&-

# ---- one check in one pristine root

RUNDIR= UNSHARE_PID= SLIRP_PID=

# Kill the namespace (the kernel kills everything in it) and stop slirp4netns.
stop_namespace() {
    local pid1 m
    if [ -n "$UNSHARE_PID" ]; then
        pid1=$(cat "/proc/$UNSHARE_PID/task/$UNSHARE_PID/children" 2>/dev/null || true)
        for m in $pid1; do kill -KILL "$m" 2>/dev/null || true; done
        kill -KILL "$UNSHARE_PID" 2>/dev/null || true
        wait "$UNSHARE_PID" 2>/dev/null || true
        UNSHARE_PID=
    fi
    if [ -n "$SLIRP_PID" ]; then
        kill "$SLIRP_PID" 2>/dev/null || true
        wait "$SLIRP_PID" 2>/dev/null || true
        SLIRP_PID=
    fi
}

# Remove the root's copy (a minute or two for the ~2 GB a test run leaves, on a busy disk).
remove_copy() {
    if [ -n "$RUNDIR" ] && [ -d "$RUNDIR" ]; then
        # The mounts lived in the namespace's private mount table; refuse to delete through one
        # that is somehow visible here.
        if grep -qF " $RUNDIR/" /proc/self/mountinfo; then
            say "mounts under $RUNDIR are still visible; leaving it in place"
        elif ((KEEP)); then
            touch "$RUNDIR/keep"
            say "root kept in $RUNDIR/root"
        else
            rm -rf --one-file-system "$RUNDIR"
        fi
    fi
    RUNDIR=
}

teardown() {
    stop_namespace
    remove_copy
}
trap teardown EXIT
trap 'say "interrupted"; exit 130' INT TERM HUP

# The main-job and test commands: the first two ```sh blocks under "## Two commands".
readme_commands() {
    awk '
        /^## / { sec = ($0 == "## Two commands") }
        sec && /^```sh$/ { inblock = 1; cmd = ""; next }
        sec && inblock && /^```$/ { inblock = 0; print cmd; next }
        sec && inblock { cmd = (cmd == "" ? $0 : cmd "\n" $0) }
    ' "$1"
}

# run_check NAME COMMAND: prints PASS/FAIL with the time; returns non-zero on FAIL.
run_check() {
    local name=$1 cmd=$2 logf r t rc i took tailpid=
    logf=$LOGDIR/$name.log
    RUNDIR=$(mktemp -d "$CACHE/runs/$STAMP-$name.XXXX")
    echo $$ >"$RUNDIR/owner.pid"
    r=$RUNDIR/root
    t=$(date +%s)
    mkdir "$r"
    tar --numeric-owner --xattrs --xattrs-include='*' -C "$r" -xpf "$TARBALL"
    echo "$HOSTNAME_IN_ROOT" >"$r/etc/hostname"
    printf '127.0.0.1\tlocalhost\n127.0.1.1\t%s\n::1\t\tlocalhost ip6-localhost ip6-loopback\n' \
        "$HOSTNAME_IN_ROOT" >"$r/etc/hosts"
    echo "nameserver 10.0.2.3" >"$r/etc/resolv.conf"    # slirp4netns's DNS forwarder
    # A network that intercepts TLS with its own CA (this machine's administrator installed it
    # in /usr/local/share/ca-certificates) needs it on every machine behind it, the fresh root
    # too: its pip gets a copy of this machine's CA bundle. A machine-wide file, like
    # resolv.conf; nothing of the project's.
    if compgen -G '/usr/local/share/ca-certificates/*.crt' >/dev/null && [ -s /etc/ssl/certs/ca-certificates.crt ]; then
        install -d -m 755 "$r/etc/resel-fresh"
        install -m 644 /etc/ssl/certs/ca-certificates.crt "$r/etc/resel-fresh/ca-bundle.pem"
        printf '[global]\ncert = /etc/resel-fresh/ca-bundle.pem\n' >"$r/etc/pip.conf"
    fi
    mkdir -p "$r/build/shared"
    git clone -q --no-hardlinks "$REPO" "$r/build/resel" 2>>"$logf"
    git -C "$r/build/resel" checkout -q --detach "$HEAD"
    say "$name: pristine root and clone of ${HEAD:0:10} ready in $(secs "$t") s; log: $logf"
    {
        echo "# fresh-check $name, commit $HEAD, $(date -Is)"
        [ -f "$r/etc/pip.conf" ] &&
            echo "# the host's CA bundle is given to the root's pip (/etc/pip.conf): this network intercepts TLS"
        echo "# \$ $cmd"
    } >>"$logf"

    t=$(date +%s)
    # If this script is killed outright (no trap runs), unshare gets SIGKILL (pdeathsig), and
    # --kill-child passes it on to the namespace's PID 1: the kernel then kills the rest.
    setpriv --pdeathsig KILL unshare --mount --uts --ipc --net --pid --fork --kill-child -- \
        bash "$SELF" __inside "$r" "$SHARED" "$logf" "$cmd" &
    UNSHARE_PID=$!
    for ((i = 0; i < 100; i++)); do
        [ "$(readlink "/proc/$UNSHARE_PID/ns/net" 2>/dev/null)" != "$(readlink /proc/self/ns/net)" ] && break
        sleep 0.05
    done
    setpriv --pdeathsig TERM slirp4netns --configure --mtu=65520 --disable-host-loopback "$UNSHARE_PID" tap0 \
        >"$LOGDIR/slirp4netns-$name.log" 2>&1 &
    SLIRP_PID=$!
    if ((VERBOSE)); then
        tail -n +1 -f "$logf" --pid="$UNSHARE_PID" &
        tailpid=$!
    fi
    rc=0
    wait "$UNSHARE_PID" || rc=$?
    UNSHARE_PID=
    [ -n "$tailpid" ] && { wait "$tailpid" 2>/dev/null || true; }
    took=$(secs "$t")
    stop_namespace
    RESULTS+=("$(printf '%-5s %s  %8s  %s' "$name" "$( ((rc == 0)) && echo PASS || echo "FAIL (exit $rc)")" "$(mmss "$took")" "$cmd")")
    if ((rc == 0)); then
        say "$name: PASS in $(mmss "$took")"
        grep -E '[0-9]+ (passed|failed)' "$logf" | tail -n 1 | sed 's/^/  pytest: /' || true
    else
        say "$name: FAIL (exit $rc) after $(mmss "$took"); last lines of $logf:"
        tail -n 40 "$logf" | sed 's/^/  | /'
    fi
    t=$(date +%s)
    remove_copy
    ((KEEP)) || say "$name: root's copy removed in $(secs "$t") s"
    return $((rc != 0))
}

# The README of HEAD, not of the working tree.
mapfile -t CMDS < <(git -C "$REPO" show "$HEAD:README.md" | readme_commands /dev/stdin)
((${#CMDS[@]} >= 2)) || die "README.md of $HEAD: expected two \`\`\`sh blocks under '## Two commands'"
MAIN_CMD=${CMDS[0]}
TEST_CMD=${CMDS[1]}
if ((${#EXTRA[@]})); then
    TEST_CMD="$TEST_CMD $(printf '%q ' "${EXTRA[@]}")"
    say "note: test runs with extra pytest arguments: not exactly the README's command"
fi

RESULTS=()
FAILED=0
say "checking ${HEAD:0:10} (${CHECKS[*]}); logs in $LOGDIR"
for c in "${CHECKS[@]}"; do
    case $c in
        main) run_check main "$MAIN_PREREQ && $MAIN_CMD" || FAILED=1 ;;
        test) run_check test "$TEST_CMD" || FAILED=1 ;;
        run) run_check run "$RUN_CMD" || FAILED=1 ;;
    esac
done

echo
say "summary for ${HEAD:0:10} (total $(mmss "$(secs "$T0")")${BOOT_SECS:+, bootstrap $(mmss "$BOOT_SECS")}):"
for line in "${RESULTS[@]}"; do echo "  $line"; done
if ((FAILED)); then
    say "FAIL"
    exit 1
fi
say "PASS"
exit 0
}
