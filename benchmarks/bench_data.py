"""Task data over SSH (issue 25): one big file each way and many small ones, resel's SFTP
transport beside OpenSSH's own scp and sftp, on the testbed's sshd.

    scripts/testbed.sh up                            # sshd on 127.0.0.1:2222 for reseltb (root)
    .venv/bin/python benchmarks/bench_data.py        # [--rounds 5] [--mb 200] [--files 1000] [--kb 10]
    .venv/bin/python benchmarks/bench_data.py --before dd0d8fa   # also the transport of that revision
    .venv/bin/python benchmarks/bench_data.py --json
    .venv/bin/python benchmarks/bench_data.py --steps --before dd0d8fa   # what each change bought

Every round moves, in a rotating order so that a busy minute hits all alike:

* one file of ``--mb`` MB (random bytes) up and down: ``scp``, ``sftp -b``, resel's
  ``put_file``/``get_file`` (atomic and hashed: a fresh name, SHA-256 as the bytes go by,
  fsync'ed, renamed); goal: resel ≥ 80 % of scp's throughput;
* ``--files`` files of ``--kb`` KB up and down: ``scp -r``, ``sftp -b`` with ``put -r``/``get -r``,
  resel's ``put_files``/``get_files`` (every file by the same rules); goal ≥ 300 files/s;
* with ``--before REV``, the same through ``backends/transport.py`` as it was at REV (loaded
  from git beside this tree's resel.backends.files: a revision whose transport needs other
  modules than this tree has cannot be measured so), one file after the other for the batches
  when REV has no ``put_files``.

``--steps`` measures instead resel's transport one change at a time (cumulative, each step a
connection of its own, interleaved the same way): the pipelined loop with paramiko's settings
(32 KiB requests, aes128-ctr + hmac-sha2-256, a 2 MiB window, paramiko's SFTP packet reader and
writer, downloads committed one at a time), then the server's 255 KiB requests, AES-GCM, the
packet reader and writer of resel.backends.transport._SFTP, the bigger window, the committer
threads; and, the rest as after, 1 MiB and 16 MiB in flight instead of 4 MiB.

OpenSSH's tools reach the site as resel does: the testbed's ssh config (the ``tb-ssh`` alias:
same host, port, user, key and known_hosts). Targets are removed before each timed transfer
(untimed: `rm -rf` on the site), so that no tool writes over a file another one left. Figures are medians over the
rounds; "CPU" is the client's own (this process's threads for resel, scp/sftp and their ssh
child for OpenSSH), which tells a tool's cost apart from the machine's load. The load average
is printed before and after: the development machine has 2 cores, shared.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.util
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import types
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from testbed import load  # noqa: E402

import paramiko  # noqa: E402

from resel.backends import sftp_pipeline, transport as transport_mod  # noqa: E402
from resel.backends.transport import SSHTransport  # noqa: E402

HOST = "tb-ssh"


def cpu_self() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def cpu_children() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def before_transport(rev: str) -> types.ModuleType:
    """``backends/transport.py`` at ``rev``, as a module of its own."""
    source = subprocess.run(["git", "show", f"{rev}:backends/transport.py"], cwd=HERE.parent,
                            capture_output=True, text=True, check=True).stdout
    spec = importlib.util.spec_from_loader(f"transport_at_{rev}", loader=None)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module          # (its dataclasses look themselves up there)
    exec(compile(source, f"{rev}:backends/transport.py", "exec"), module.__dict__)
    return module


class Bench:
    def __init__(self, tb, args, work: Path):
        self.args, self.work = args, work
        self.config = tb.ssh_config
        self.ssh = SSHTransport(HOST, ssh_config=self.config)
        self.old = None
        if args.before:
            self.old = before_transport(args.before).SSHTransport(HOST, ssh_config=self.config)
        self.remote = f"{self.ssh.home()}/resel-bench-data-{os.getpid()}"
        self.times: dict[tuple[str, str], list[tuple[float, float]]] = {}

    # ---- the data

    def make(self) -> None:
        a = self.args
        self.big = self.work / "big.bin"
        with open(self.big, "wb") as f:
            for _ in range(a.mb):
                f.write(os.urandom(1_000_000))
        self.small = self.work / "small"
        self.small.mkdir()
        for i in range(a.files):
            (self.small / f"f{i:05d}.dat").write_bytes(os.urandom(a.kb * 1000))
        self.names = sorted(os.listdir(self.small))
        self.ssh.makedirs(self.remote)
        self.ssh.put_file(str(self.big), f"{self.remote}/big.bin")   # what every download reads
        self.ssh.makedirs(f"{self.remote}/small")
        bad = [r for r in self.ssh.put_files([(str(self.small / n), f"{self.remote}/small/{n}", None, None)
                                              for n in self.names]) if isinstance(r, Exception)]
        if bad:
            sys.exit(f"could not lay out the small files on the site: {bad[0]}")

    # ---- the tools

    def openssh(self, argv: list[str], stdin: str | None = None) -> None:
        subprocess.run(argv, input=stdin, text=True, check=True, stdout=subprocess.DEVNULL)

    def scp(self, src: str, dst: str, recursive: bool = False) -> None:
        self.openssh(["scp", "-q", *(["-r"] if recursive else []), "-F", self.config, src, dst])

    def sftp(self, commands: str) -> None:
        self.openssh(["sftp", "-q", "-F", self.config, "-b", "-", HOST], stdin=commands)

    def fresh_local(self, name: str) -> Path:
        return self.work / "out" / name

    def fresh_remote(self, name: str) -> str:
        return f"{self.remote}/out/{name}"

    def clean(self) -> None:
        """Before each timed transfer (untimed): no target left by an earlier one, locally or
        on the site; the folders the batches write into exist; nothing waiting to be written."""
        shutil.rmtree(self.work / "out", ignore_errors=True)
        (self.work / "out").mkdir()
        done = self.ssh.run(["rm", "-rf", "--", f"{self.remote}/out"], idempotent=True)
        if done.returncode != 0:
            sys.exit(f"could not clean {self.remote}/out on the site: {done.stderr.strip()}")
        self.ssh.makedirs(f"{self.remote}/out")
        for name in ("small-after", "small-before"):
            self.ssh.makedirs(self.fresh_remote(name))
            (self.work / "out" / name).mkdir()
        for k in range(len(getattr(self, "steps", ()))):
            self.ssh.makedirs(self.fresh_remote(f"small-{k}"))
            (self.work / "out" / f"small-{k}").mkdir()
        # what the last transfer left unwritten (scp and sftp never fsync; the removals) would
        # otherwise be written by the next one's first fsync: ext4 commits it with its journal
        os.sync()

    # ---- one measurement

    def time(self, measure: str, variant: str, run: Callable[[], None], *, child: bool) -> None:
        c0 = cpu_children() if child else cpu_self()
        t0 = time.perf_counter()
        run()
        wall = time.perf_counter() - t0
        cpu = (cpu_children() if child else cpu_self()) - c0
        self.times.setdefault((measure, variant), []).append((wall, cpu))

    def variants(self, measure: str) -> dict[str, tuple[Callable[[], None], bool]]:
        big_r, small_r = f"{self.remote}/big.bin", f"{self.remote}/small"
        to = f"{HOST}:"

        def after_up_big() -> None:
            self.ssh.put_file(str(self.big), self.fresh_remote("up-after.bin"))

        def after_up_small() -> None:
            folder = self.fresh_remote("small-after")
            check(self.ssh.put_files([(str(self.small / n), f"{folder}/{n}", None, None) for n in self.names]))

        def after_down_small() -> None:
            folder = self.fresh_local("small-after")
            check(self.ssh.get_files([(f"{small_r}/{n}", str(folder / n), None, None) for n in self.names]))

        def before_up_small() -> None:
            folder = self.fresh_remote("small-before")
            for n in self.names:
                self.old.put_file(str(self.small / n), f"{folder}/{n}")

        def before_down_small() -> None:
            folder = self.fresh_local("small-before")
            for n in self.names:
                self.old.get_file(f"{small_r}/{n}", str(folder / n))

        table = {
            "big up": {
                "scp": (lambda: self.scp(str(self.big), to + self.fresh_remote("up-scp.bin")), True),
                "sftp": (lambda: self.sftp(f"put {self.big} {self.fresh_remote('up-sftp.bin')}\n"), True),
                "after": (after_up_big, False),
                "before": (lambda: self.old.put_file(str(self.big), self.fresh_remote("up-before.bin")), False),
            },
            "big down": {
                "scp": (lambda: self.scp(to + big_r, str(self.fresh_local("down-scp.bin"))), True),
                "sftp": (lambda: self.sftp(f"get {big_r} {self.fresh_local('down-sftp.bin')}\n"), True),
                "after": (lambda: self.ssh.get_file(big_r, str(self.fresh_local("down-after.bin"))), False),
                "before": (lambda: self.old.get_file(big_r, str(self.fresh_local("down-before.bin"))), False),
            },
            "small up": {
                "scp": (lambda: self.scp(str(self.small), to + self.fresh_remote("small-scp"), True), True),
                "sftp": (lambda: self.sftp(f"put -r {self.small} {self.fresh_remote('small-sftp')}\n"), True),
                "after": (after_up_small, False),
                "before": (before_up_small, False),
            },
            "small down": {
                "scp": (lambda: self.scp(to + small_r, str(self.fresh_local("small-scp")), True), True),
                "sftp": (lambda: self.sftp(f"get -r {small_r} {self.fresh_local('small-sftp')}\n"), True),
                "after": (after_down_small, False),
                "before": (before_down_small, False),
            },
        }[measure]
        if self.old is None:
            table.pop("before")
        return table

    def round(self, k: int) -> None:
        self.time("login", "ssh", lambda: self.openssh(["ssh", "-F", self.config, HOST, "true"]), child=True)
        for measure in ("big up", "big down", "small up", "small down"):
            todo = list(self.variants(measure).items())
            todo = todo[k % len(todo):] + todo[:k % len(todo)]       # each goes first in turn
            for variant, (run, child) in todo:
                self.clean()
                self.time(measure, variant, run, child=child)

    def close(self) -> None:
        self.ssh.remove_tree(self.remote)
        self.ssh.close()
        if self.old is not None:
            self.old.close()


@dataclasses.dataclass(frozen=True)
class Step:
    """One configuration of resel's transport (``--steps``)."""

    name: str
    request: int | None = None      # bytes per READ/WRITE; None: the server's limits
    gcm: bool = True
    reader: bool = True             # _SFTP's own packet reader and writer
    window: int = sftp_pipeline.SFTP_WINDOW
    committers: int = sftp_pipeline.COMMITTERS
    in_flight: int = sftp_pipeline.MAX_BYTES

    @contextlib.contextmanager
    def applied(self):
        sftp_class = transport_mod._SFTP
        saved = (transport_mod._PREFERRED_CIPHERS, sftp_pipeline.SFTP_WINDOW, sftp_pipeline.COMMITTERS,
                 sftp_pipeline.MAX_BYTES, sftp_class.__dict__["_read_packet"], sftp_class.__dict__["_write_all"])
        transport_mod._PREFERRED_CIPHERS = saved[0] if self.gcm else ()
        sftp_pipeline.SFTP_WINDOW, sftp_pipeline.COMMITTERS = self.window, self.committers
        sftp_pipeline.MAX_BYTES = self.in_flight
        if not self.reader:
            sftp_class._read_packet = paramiko.SFTPClient._read_packet
            sftp_class._write_all = paramiko.SFTPClient._write_all
        try:
            yield
        finally:
            (transport_mod._PREFERRED_CIPHERS, sftp_pipeline.SFTP_WINDOW, sftp_pipeline.COMMITTERS,
             sftp_pipeline.MAX_BYTES, sftp_class._read_packet, sftp_class._write_all) = saved

    def connect(self, config: str) -> SSHTransport:
        with self.applied():
            t = SSHTransport(HOST, ssh_config=config)
            t.home()                                     # opens the connection and SFTP session
            if self.request is not None:
                sftp = t._connection().sftp
                sftp.limits = dataclasses.replace(sftp.limits, read=self.request, write=self.request)
        return t


def steps() -> list[Step]:
    mib = 1 << 20
    base = Step("paramiko's settings: 32 KiB requests, aes128-ctr+hmac-sha2-256, 2 MiB window",
                request=32768, gcm=False, reader=False, window=2 * mib, committers=1)
    return [base,
            b := dataclasses.replace(base, name="+ the server's request size (255 KiB)", request=None),
            c := dataclasses.replace(b, name="+ AES-GCM offered first", gcm=True),
            d := dataclasses.replace(c, name="+ resel's SFTP packet reader and writer", reader=True),
            e := dataclasses.replace(d, name=f"+ the SFTP window at {sftp_pipeline.SFTP_WINDOW // mib} MiB",
                                     window=sftp_pipeline.SFTP_WINDOW),
            dataclasses.replace(e, name=f"+ {sftp_pipeline.COMMITTERS} committer threads (= after, "
                                        f"{sftp_pipeline.MAX_BYTES // mib} MiB in flight)",
                                committers=sftp_pipeline.COMMITTERS),
            Step("after, 1 MiB in flight", in_flight=mib),
            Step("after, 16 MiB in flight, a 32 MiB window", in_flight=16 * mib, window=32 * mib)]


class StepBench(Bench):
    """``--steps``: the same transfers through each Step's transport."""

    def __init__(self, tb, args, work: Path):
        super().__init__(tb, args, work)
        self.steps = steps()
        self.links = [step.connect(self.config) for step in self.steps]

    def variants(self, measure: str) -> dict[str, tuple[Callable[[], None], bool]]:
        table = {}
        big_r, small_r = f"{self.remote}/big.bin", f"{self.remote}/small"
        for k, (step, t) in enumerate(zip(self.steps, self.links)):
            def run(step=step, t=t, k=k) -> None:
                with step.applied():
                    if measure == "big up":
                        t.put_file(str(self.big), self.fresh_remote(f"up-{k}.bin"))
                    elif measure == "big down":
                        t.get_file(big_r, str(self.fresh_local(f"down-{k}.bin")))
                    elif measure == "small up":
                        folder = self.fresh_remote(f"small-{k}")
                        check(t.put_files([(str(self.small / n), f"{folder}/{n}", None, None) for n in self.names]))
                    else:
                        folder = self.fresh_local(f"small-{k}")
                        check(t.get_files([(f"{small_r}/{n}", str(folder / n), None, None) for n in self.names]))
            table[step.name] = (run, False)
        if self.old is not None:
            table["before"] = super().variants(measure)["before"]
        return table

    def close(self) -> None:
        for t in self.links:
            t.close()
        super().close()


def report_steps(bench: StepBench, args, loads: tuple) -> dict:
    a = args
    sizes = {"big up": a.mb, "big down": a.mb, "small up": a.files, "small down": a.files}
    names = (["before"] if a.before else []) + [s.name for s in bench.steps]
    print(f"\nresel's transport one change at a time, medians of {a.rounds} rounds, interleaved "
          f"({os.cpu_count()} CPUs, 1-min load average {loads[0]:.1f} before, {loads[1]:.1f} after)")
    print(f"{'configuration':66} {'up MB/s':>8} {'down MB/s':>9} {'up f/s':>7} {'down f/s':>8}"
          f" {'CPU up':>6} {'CPU down':>8}")
    rows = {}
    for name in names:
        rate = {m: sizes[m] / statistics.median(w for w, _ in bench.times[(m, name)]) for m in sizes}
        cpu = {m: statistics.median(c for _, c in bench.times[(m, name)]) for m in sizes}
        rows[name] = {"rate": rate, "cpu": cpu}
        print(f"{name[:66]:66} {rate['big up']:8.1f} {rate['big down']:9.1f} {rate['small up']:7.0f}"
              f" {rate['small down']:8.0f} {cpu['big up']:6.2f} {cpu['big down']:8.2f}")
    print(f"big = 1 file of {a.mb} MB; f/s = files of {a.kb} KB per second ({a.files} a batch); "
          "CPU = this process's seconds for the big file")
    return {"rounds": a.rounds, "load": loads, "steps": rows}


def check(results: list) -> None:
    bad = [r for r in results if isinstance(r, Exception)]
    if bad:
        raise SystemExit(f"{len(bad)} files failed, the first: {bad[0]}")


def cipher(config: str) -> str:
    """What OpenSSH's client negotiates with the site (its -v report)."""
    done = subprocess.run(["ssh", "-v", "-F", config, HOST, "true"], capture_output=True, text=True)
    for line in done.stderr.splitlines():
        if "kex: server->client cipher:" in line:
            return line.split("cipher:", 1)[1].split()[0]
    return "?"


def report(bench: Bench, args, loads: tuple, ciphers: tuple[str, str]) -> dict:
    a = args
    sizes = {"big up": a.mb, "big down": a.mb, "small up": a.files, "small down": a.files}
    unit = {"big": "MB/s", "small": "files/s"}
    variants = ["scp", "sftp", *(["before"] if a.before else []), "after"]
    rows = {}
    for measure in sizes:
        row = {}
        for v in variants:
            runs = bench.times[(measure, v)]
            wall = statistics.median(w for w, _ in runs)
            row[v] = {"rate": sizes[measure] / wall, "seconds": wall,
                      "cpu": statistics.median(c for _, c in runs), "runs": [round(w, 3) for w, _ in runs]}
        rows[measure] = row
    goals = {"big up": ("scp", 0.80), "big down": ("scp", 0.80), "small up": (None, 300), "small down": (None, 300)}
    what = {"big up": f"1 file of {a.mb} MB, up", "big down": f"1 file of {a.mb} MB, down",
            "small up": f"{a.files} files of {a.kb} KB, up", "small down": f"{a.files} files of {a.kb} KB, down"}
    print(f"\ntask data over SSH, medians of {a.rounds} rounds, interleaved (python "
          f"{sys.version.split()[0]}, {os.cpu_count()} CPUs, 1-min load average {loads[0]:.1f} before, "
          f"{loads[1]:.1f} after)")
    print(f"site: the testbed's sshd ({HOST}); resel cipher {ciphers[0]}, OpenSSH's {ciphers[1]}")
    head = f"{'transfer':28} {'unit':>8}" + "".join(f" {v:>8}" for v in variants) + \
        f" {'after/scp':>9} {'after/sftp':>10}" + (f" {'after/before':>12}" if a.before else "")
    login = statistics.median(w for w, _ in bench.times[("login", "ssh")])
    print(head + f" {'after/(scp-login)':>17}")
    for measure, row in rows.items():
        kind = measure.split()[0]
        line = f"{what[measure]:28} {unit[kind]:>8}" + "".join(f" {row[v]['rate']:8.1f}" for v in variants)
        line += f" {row['after']['rate'] / row['scp']['rate']:9.2f} {row['after']['rate'] / row['sftp']['rate']:10.2f}"
        if a.before:
            line += f" {row['after']['rate'] / row['before']['rate']:12.2f}"
        if kind == "big":          # (a batch of small files is mostly what the login is not)
            row["scp_net"] = sizes[measure] / max(row["scp"]["seconds"] - login, 1e-9)
            line += f" {row['after']['rate'] / row['scp_net']:17.2f}"
        print(line)
    print(f"login = `ssh {HOST} true` (OpenSSH's connection, key exchange and authentication, which scp "
          f"and sftp pay on every call and resel once per site): median {login:.3f} s; "
          "scp-login = scp's rate with it taken out")
    print("client CPU s (median)" + " " * 16 + "".join(f" {v:>8}" for v in variants))
    for measure, row in rows.items():
        print(f"{what[measure]:37}" + "".join(f" {row[v]['cpu']:8.2f}" for v in variants))
    verdicts = {}
    for measure, (base, goal) in goals.items():
        rate = rows[measure]["after"]["rate"]
        if base:      # against the stricter yardstick: scp without its login
            ratio = rate / rows[measure]["scp_net"]
            ok = ratio >= goal
            print(f"goal {what[measure]} >= {goal:.0%} of scp (its login taken out): {ratio:.0%} "
                  f"(of scp as run: {rate / rows[measure][base]['rate']:.0%}) -> {'PASS' if ok else 'FAIL'}")
        else:
            ok = rate >= goal
            print(f"goal {what[measure]} >= {goal} files/s: {rate:.0f} files/s -> {'PASS' if ok else 'FAIL'}")
        verdicts[measure] = ok
    return {"rounds": a.rounds, "mb": a.mb, "files": a.files, "kb": a.kb, "load": loads, "login": login,
            "ciphers": {"resel": ciphers[0], "openssh": ciphers[1]}, "rows": rows, "pass": verdicts}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--mb", type=int, default=200, help="the big file's size, MB (10^6 bytes)")
    ap.add_argument("--files", type=int, default=1000, help="how many small files")
    ap.add_argument("--kb", type=int, default=10, help="each small file's size, KB (10^3 bytes)")
    ap.add_argument("--before", metavar="REV", help="also measure backends/transport.py as it was at REV")
    ap.add_argument("--json", action="store_true", help="print the medians as JSON after the table")
    ap.add_argument("--steps", action="store_true", help="resel's transport one change at a time")
    args = ap.parse_args()
    if args.rounds < 1 or args.mb < 1 or args.files < 1 or args.kb < 1:
        sys.exit("--rounds, --mb, --files and --kb must be at least 1")
    tb = load()
    if tb is None:
        sys.exit("the testbed is not up: run `scripts/testbed.sh up` first (as root)")
    for tool in ("scp", "sftp", "ssh"):
        if shutil.which(tool) is None:
            sys.exit(f"OpenSSH's {tool} is not on PATH: it is the yardstick")
    with tempfile.TemporaryDirectory(prefix="resel-bench-data-") as tmp:
        bench = (StepBench if args.steps else Bench)(tb, args, Path(tmp))
        try:
            load_before = os.getloadavg()[0]
            bench.make()
            for k in range(args.rounds):
                bench.round(k)
                print(f"round {k + 1}/{args.rounds} done", file=sys.stderr)
            load_after = os.getloadavg()[0]
            if args.steps:
                out = report_steps(bench, args, (load_before, load_after))
            else:
                link = bench.ssh._connection().transport
                out = report(bench, args, (load_before, load_after), (link.local_cipher, cipher(tb.ssh_config)))
        finally:
            bench.close()
    if args.json:
        print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
