"""Record real replies of Slurm 24.11 and HTCondor 23.9 from the testbed's Debian 13 part, for
tests/test_recorded_trixie.py (which runs without any daemon).

Run it (as root, with the testbed up) from the repository: ``.venv/bin/python
tests/data/trixie/record.py``. It puts each scheduler in a known state first, so the recordings
hold something to read:

* tbc (Slurm 24.11, 4 CPUs): job A (4 CPUs, 2-minute limit) running, job B (2 CPUs, 1 minute)
  pending behind it; ``sinfo``/``squeue``/``scontrol`` replies over SSH and slurmrestd's
  ``/ping``, ``/partitions``, ``/nodes``, ``/jobs`` in each API version it serves, one reply to a
  wrong token and the 404 text of an API version it does not serve;
* the pool (HTCondor 23.9.6, one partitionable slot of 4 CPUs): job 1 running in a dynamic slot
  of 1 CPU, job 2 idle for ever (its requirements match no slot), job 3 removed; the CLI's
  ``-json`` replies, ``condor_version``, ``condor_submit -terse`` and ``condor_rm``.

Everything it submits is cancelled at the end. Outputs go to ``slurm-24.11/`` and
``htcondor-23.9/`` next to this file, with ``STATE.json`` saying which job ids played which part.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import requests

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))        # tests/, for testbed.py
import testbed  # noqa: E402


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


def record_slurm(tb, dest: Path) -> dict:
    dest.mkdir(parents=True, exist_ok=True)
    a = out(tb, "cd ~/resel-work && sbatch --parsable -J rec-a -n 1 -c 4 -t 2 -o /dev/null --wrap 'sleep 120'").strip()
    wait(lambda: out(tb, f"squeue -h -j {a} -o %T").strip() == "RUNNING", "job A to run")
    b = out(tb, "cd ~/resel-work && sbatch --parsable -J rec-b -n 1 -c 2 -t 1 -o /dev/null --wrap 'sleep 5'").strip()
    wait(lambda: out(tb, f"squeue -h -j {b} -o %r").strip() in ("Resources", "Priority"), "job B to wait")
    try:
        (dest / "sinfo.json").write_text(out(tb, "sinfo --json"))
        (dest / "squeue.json").write_text(out(tb, "squeue --json"))
        (dest / "scontrol_show_partition.txt").write_text(out(tb, "scontrol -o show partition"))
        (dest / "sinfo_version.txt").write_text(out(tb, "sinfo --version"))
        token = Path(tb.rest_token_file_c).read_text().strip()
        head = {"X-SLURM-USER-NAME": tb.rest_user_c, "X-SLURM-USER-TOKEN": token}
        for version in ("v0.0.40", "v0.0.41", "v0.0.42"):
            for path in ("ping", "partitions", "nodes", "jobs"):
                r = requests.get(f"{tb.rest_url_c}/slurm/{version}/{path}", headers=head, timeout=10)
                r.raise_for_status()
                (dest / f"rest_{version}_{path}.json").write_text(r.text)
        r = requests.get(f"{tb.rest_url_c}/slurm/v0.0.42/partitions", timeout=10,
                         headers={**head, "X-SLURM-USER-TOKEN": "not-a-token"})
        (dest / "rest_v0.0.42_partitions_wrong_token.json").write_text(r.text)
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
queue 1
"""


def record_htcondor(tb, dest: Path) -> dict:
    dest.mkdir(parents=True, exist_ok=True)
    subs = {}
    for name, seconds, extra in (("rec-running", 120, ""), ("rec-idle", 5, "requirements = TARGET.Cpus > 100"),
                                 ("rec-removed", 120, "")):
        done = ap(tb, "condor_submit -terse", input=SUB.format(seconds=seconds, name=name, extra=extra))
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
    tb = testbed.load()
    if tb is None or not tb.has_trixie:
        raise SystemExit("no testbed with its Debian 13 part: run scripts/testbed.sh up first")
    state = {"recorded": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
             "slurm": tb.slurm_version_c, "htcondor": tb.condor_version, "node": tb.host}
    state.update(record_slurm(tb, HERE / "slurm-24.11"))
    state.update(record_htcondor(tb, HERE / "htcondor-23.9"))
    (HERE / "STATE.json").write_text(json.dumps(state, indent=2) + "\n")
    print(json.dumps(state, indent=2))


if __name__ == "__main__":
    main()
