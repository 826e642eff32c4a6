"""Record real replies of the Slurm and HTCondor of one of the testbed's Debian roots, for
tests/test_recorded_trixie.py (which runs without any daemon): Slurm 24.11 and HTCondor 23.9 of the
Debian 13 root into ``tests/data/trixie``, Slurm 26.05 and HTCondor 25 of the Debian sid root
into ``tests/data/sid``.

Run it (as root, with the testbed up) from the repository: ``.venv/bin/python
tests/data/trixie/record.py [trixie|sid]`` (default trixie). It puts each scheduler in a known
state first, so the recordings hold something to read:

* the cluster (tbc or tbd, 4 CPUs): job A (4 CPUs, 2-minute limit) running, job B (2 CPUs,
  1 minute) pending behind it; ``sinfo``/``squeue``/``scontrol`` replies over SSH (``--json``
  in the CLI's default layout, and for sid also in each older data_parser it has:
  ``sinfo_v0.0.44.json``), and slurmrestd's ``/ping``, ``/partitions``, ``/nodes``, ``/jobs`` in
  each API version it serves, one reply to a wrong token and the 404 text of an API version it
  does not serve;
* the pool (one partitionable slot of 4 CPUs): job 1 running in a dynamic slot of 1 CPU, job 2
  idle for ever (its requirements match no slot), job 3 removed; the CLI's ``-json`` replies,
  ``condor_version``, ``condor_submit -terse`` and ``condor_rm``; for sid also what condor_chirp
  answers inside a job (``condor_chirp.txt``: each command's exit status, stdout and stderr), and
  the three replies of the queue twin's snapshot on a full pool (``snapshot-*``: four jobs of
  90 s running, one idle behind them, one held; trixie's were recorded so by hand).

Everything it submits is cancelled at the end. Outputs go to ``slurm-SERIES/`` and
``htcondor-SERIES/`` in the suite's folder, with ``STATE.json`` saying which job ids played which
part. (The trixie recordings of 2026-11-26 were made before the sid part existed, by this script
as it was then: the same steps, without the older data_parser layouts and condor_chirp.)
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import requests

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))        # tests/, for testbed.py and trixie_helpers.py
import testbed  # noqa: E402
from trixie_helpers import RELEASES  # noqa: E402


def ap(tb, command: str, input: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["ssh", "-F", tb.trixie_ssh_config, "tb-ap", command], input=input,
                          stdin=None if input is not None else subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=60)


def out(tb, command: str) -> str:
    done = ap(tb, command)
    if done.returncode != 0:
        raise SystemExit(f"{command}: {done.stderr}")
    return done.stdout


def wait(check, what: str, timeout: float = 60):
    end = time.time() + timeout
    while time.time() < end:
        if check():
            return
        time.sleep(0.5)
    raise SystemExit(f"timed out waiting for {what}")


def record_slurm(tb, dest: Path, rel) -> dict:
    dest.mkdir(parents=True, exist_ok=True)
    a = out(tb, "cd ~/resel-work && sbatch --parsable -J rec-a -n 1 -c 4 -t 2 -o /dev/null --wrap 'sleep 120'").strip()
    wait(lambda: out(tb, f"squeue -h -j {a} -o %T").strip() == "RUNNING", "job A to run")
    b = out(tb, "cd ~/resel-work && sbatch --parsable -J rec-b -n 1 -c 2 -t 1 -o /dev/null --wrap 'sleep 5'").strip()
    wait(lambda: out(tb, f"squeue -h -j {b} -o %r").strip() in ("Resources", "Priority"), "job B to wait")
    try:
        (dest / "sinfo.json").write_text(out(tb, "sinfo --json"))
        (dest / "squeue.json").write_text(out(tb, "squeue --json"))
        for parser in rel.cli_older:
            (dest / f"sinfo_{parser}.json").write_text(out(tb, f"sinfo --json={parser}"))
            (dest / f"squeue_{parser}.json").write_text(out(tb, f"squeue --json={parser}"))
        (dest / "scontrol_show_partition.txt").write_text(out(tb, "scontrol -o show partition"))
        (dest / "sinfo_version.txt").write_text(out(tb, "sinfo --version"))
        token = Path(tb.rest_token_file_c).read_text().strip()
        head = {"X-SLURM-USER-NAME": tb.rest_user_c, "X-SLURM-USER-TOKEN": token}
        for version in rel.rest:
            for path in ("ping", "partitions", "nodes", "jobs"):
                r = requests.get(f"{tb.rest_url_c}/slurm/{version}/{path}", headers=head, timeout=10)
                r.raise_for_status()
                (dest / f"rest_{version}_{path}.json").write_text(r.text)
        newest = rel.rest[-1]
        r = requests.get(f"{tb.rest_url_c}/slurm/{newest}/partitions", timeout=10,
                         headers={**head, "X-SLURM-USER-TOKEN": "not-a-token"})
        (dest / f"rest_{newest}_partitions_wrong_token.json").write_text(r.text)
        r404 = requests.get(f"{tb.rest_url_c}/slurm/v0.0.38/ping", headers=head, timeout=10)
        (dest / "rest_v0.0.38_ping_404.txt").write_text(r404.text)
        return {"slurm_running": a, "slurm_pending": b, "wrong_token_status": r.status_code,
                "v0.0.38_status": r404.status_code}
    finally:
        ap(tb, f"scancel {a} {b}")


SUB = """executable = /bin/sleep
arguments = {seconds}
initialdir = /home/reselap/resel-work
batch_name = {name}
output = /dev/null
error = /dev/null
should_transfer_files = YES
request_cpus = 1
request_memory = 64MB
request_disk = 1MB
{extra}
queue {count}
"""


#: a job that runs condor_chirp's commands (HTCondor's I/O proxy, +WantIOProxy) and prints each
#: one's exit status, stdout and stderr: what the chirp wrapper (resel/shipped/chirp_sync.py) reads
CHIRP_SCRIPT = r"""#!/bin/sh
C=/usr/libexec/condor/condor_chirp
run() {
    echo "== $*"; "$C" "$@" >o 2>e; echo "status $?"
    echo "-- stdout ($(wc -c <o) bytes)"; cat o; echo "-- stderr"; cat e
}
run getdir .
run getdir inbox
run getdir empty
run getdir nosuchdir
run fetch inbox/a.json x.json
run fetch nosuch.json x2.json
run put x.json y.json
run link y.json z.json
run remove z.json
run remove z.json
"""


def record_chirp(tb, dest: Path) -> None:
    """condor_chirp's answers inside a job, in a folder of their own on the access point."""
    work = "~/resel-work/rec-chirp"
    out(tb, f"rm -rf {work} && mkdir -p {work}/inbox {work}/empty && echo '{{}}' > {work}/inbox/a.json")
    ap(tb, f"cat > {work}/t.sh && chmod 755 {work}/t.sh", input=CHIRP_SCRIPT)
    done = ap(tb, f"cd {work} && condor_submit -terse", input=(
        "executable = t.sh\noutput = out\nerror = err\nlog = log\nshould_transfer_files = YES\n"
        "+WantIOProxy = true\nrequest_cpus = 1\nrequest_memory = 64MB\nrequest_disk = 1MB\nqueue 1\n"))
    if done.returncode != 0:
        raise SystemExit(f"condor_submit: {done.stderr}")
    jid = done.stdout.split()[0]
    try:
        wait(lambda: ap(tb, f"test -s {work}/out && condor_history {jid} -limit 1 -af JobStatus").stdout.strip() == "4",
             "the condor_chirp job to complete", 120)
        (dest / "condor_chirp.txt").write_text(out(tb, f"cat {work}/out"))
    finally:
        ap(tb, f"condor_rm {jid} >/dev/null 2>&1; rm -rf {work}")


def record_snapshot(tb, dest: Path) -> None:
    """The three replies of HTCondorCLI.queue_snapshot, with its own -attributes, on a full pool:
    four jobs of 90 s running (the 4 CPUs), one idle behind them, one submitted held."""
    from resel.backends.htcondor import formats as hf
    from resel.backends.htcondor.client import NEGOTIATOR_ATTRS
    ids = {}
    for name, count, extra in (("rec-snap-running", 4, ""), ("rec-snap-idle", 1, ""), ("rec-snap-held", 1, "hold = true")):
        done = ap(tb, "condor_submit -terse",
                  input=SUB.format(seconds=90, name=name, count=count, extra="+ReselWalltime = 90\n" + extra))
        if done.returncode != 0:
            raise SystemExit(f"condor_submit: {done.stderr}")
        first, _, last = done.stdout.split()
        cluster = first.split(".")[0]
        ids[name] = [f"{cluster}.{n}" for n in range(int(first.split(".")[1]), int(last.split(".")[1]) + 1)]
    try:
        running = ids["rec-snap-running"]
        wait(lambda: out(tb, f"condor_q {running[0].split('.')[0]} -af JobStatus").split() == ["2"] * 4,
             "the four fillers to run", 120)
        time.sleep(6)                          # the slots' claims reach the collector
        taken = time.time()
        jobs = out(tb, f"condor_q -allusers -json -attributes {','.join(hf.JOB_ATTRS)}")
        slots = out(tb, f"condor_status -json -attributes {','.join(hf.SLOT_ATTRS)}")
        negotiators = out(tb, f"condor_status -negotiator -json -attributes {','.join(NEGOTIATOR_ATTRS)}")
        (dest / "snapshot-condor_q_allusers.json").write_text(jobs)
        (dest / "snapshot-condor_status.json").write_text(slots)
        (dest / "snapshot-condor_status_negotiator.json").write_text(negotiators)
        (dest / "snapshot-STATE.json").write_text(json.dumps({
            "taken_at": taken, "running": running, "idle": ids["rec-snap-idle"][0], "held": ids["rec-snap-held"][0],
            "how": "4 x sleep 90 running, 1 idle behind them, 1 submitted with hold = true; all +ReselWalltime; "
                   "recorded by tests/data/trixie/record.py"}, indent=1) + "\n")
    finally:
        ap(tb, "condor_rm " + " ".join(i for group in ids.values() for i in group))


def record_htcondor(tb, dest: Path, more: bool) -> dict:
    dest.mkdir(parents=True, exist_ok=True)
    if more:
        record_chirp(tb, dest)
        record_snapshot(tb, dest)
    subs = {}
    for name, seconds, extra in (("rec-running", 120, ""), ("rec-idle", 5, "requirements = TARGET.Cpus > 100"),
                                 ("rec-removed", 120, "")):
        done = ap(tb, "condor_submit -terse", input=SUB.format(seconds=seconds, name=name, extra=extra, count=1))
        if done.returncode != 0:
            raise SystemExit(f"condor_submit: {done.stderr}")
        subs[name] = done.stdout
    ids = {name: text.split()[0] for name, text in subs.items()}
    (dest / "condor_submit_terse.txt").write_text(subs["rec-running"])
    try:
        rm = ap(tb, f"condor_rm {ids['rec-removed']}")
        (dest / "condor_rm.txt").write_text(rm.stdout)
        wait(lambda: out(tb, f"condor_q {ids['rec-running']} -af JobStatus").strip() == "2", "job 1 to run", 90)
        wait(lambda: "Claimed" in out(tb, "condor_status -af State"), "the dynamic slot in the collector", 30)
        time.sleep(6)                          # the schedd's totals reach the collector
        (dest / "condor_status.json").write_text(out(tb, "condor_status -json"))
        (dest / "condor_status_schedd.json").write_text(out(tb, "condor_status -schedd -json"))
        (dest / "condor_q.json").write_text(out(tb, "condor_q -json"))
        (dest / "condor_history.json").write_text(out(tb, f"condor_history -json {ids['rec-removed']}"))
        (dest / "condor_version.txt").write_text(out(tb, "condor_version"))
        return {"condor_" + k.split("-")[1]: v for k, v in ids.items()}
    finally:
        ap(tb, f"condor_rm {' '.join(ids.values())}")


def main() -> None:
    suite = sys.argv[1] if len(sys.argv) > 1 else "trixie"
    if suite not in RELEASES:
        raise SystemExit(f"usage: record.py [{'|'.join(RELEASES)}]")
    rel = RELEASES[suite]
    tb = testbed.load()
    tb = tb and tb.debian_root(suite)
    if tb is None:
        raise SystemExit(f"no testbed with its {rel.debian} part: run scripts/testbed.sh up first")
    out_dir = HERE.parent / suite
    state = {"recorded": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
             "slurm": tb.slurm_version_c, "htcondor": tb.condor_version, "node": tb.host}
    state.update(record_slurm(tb, out_dir / f"slurm-{rel.slurm}", rel))
    state.update(record_htcondor(tb, out_dir / f"htcondor-{series(tb.condor_version)}", suite != "trixie"))
    (out_dir / "STATE.json").write_text(json.dumps(state, indent=2) + "\n")
    print(json.dumps(state, indent=2))


def series(version: str) -> str:
    """``23.9`` of ``23.9.6``: the recordings' folder names the release series."""
    return ".".join(version.split(".")[:2])


if __name__ == "__main__":
    main()
