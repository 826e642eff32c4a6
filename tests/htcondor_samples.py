"""HTCondor replies for the tests: the REAL ``condor_status -long`` recording, and samples
CONSTRUCTED from it.

No HTCondor pool can run here (Debian 12 has no HTCondor package). The one real recording is
``shared/data/formats/htcondor/condor_status_long.txt`` (10 slot ads of a campus pool, a capture
that starts at ``Name`` in alphabetical order: no ``Activity``, ``Cpus``, ``Memory``,
``Machine`` nor CPU model). Everything else below is **constructed**, marked so in its name:

* ``constructed_status_json()``: the 10 real ads, serialised by the real ClassAd library
  (``ClassAd.printJson``, i.e. exactly HTCondor's ``-json`` encoding, ``"\\/Expr(…)\\/"``
  included), plus the attributes a full ``condor_status -json`` has and the capture lacks:
  ``Activity`` (Idle/Busy from ``State``), ``Cpus`` (a partitionable slot's free cpus =
  TotalSlotCpus minus its listed dynamic slots), ``Memory``, ``Machine`` and a ``CPUModel`` per
  machine (two Intel models whose names carry a base clock, one AMD model which does not);
* job ads in the shape of ``condor_q -json`` / ``condor_history -json`` (attribute names and
  types from the HTCondor manual's job ClassAd attributes);
* ``condor_version``, ``condor_submit -terse`` and ``condor_rm`` texts in the tools' formats.
"""

from __future__ import annotations

import json
from pathlib import Path

import classad2

# ../shared beside the checkout, wherever the clone is (CI's layout)
REAL_LONG = (Path(__file__).resolve().parents[2] / "shared" / "data" / "formats" / "htcondor"
             / "condor_status_long.txt")

#: constructed CPU models per machine of the real recording
CONSTRUCTED_MODELS = {
    "cpu2": "Intel(R) Xeon(R) CPU E5-2680 v4 @ 2.40GHz",
    "cpu4": "Intel(R) Xeon(R) CPU E5-2680 v4 @ 2.40GHz",
    "cpu11": "AMD EPYC 7742 64-Core Processor",
    "gpu1": "Intel(R) Xeon(R) Silver 4114 CPU @ 2.20GHz",
}


def real_long_text() -> str:
    return REAL_LONG.read_text()


def constructed_status_json() -> str:
    """CONSTRUCTED ``condor_status -json``: the real ads plus the attributes the capture lacks."""
    ads = list(classad2.parseAds(real_long_text(), classad2.ParserType.Old))
    used: dict[str, int] = {}
    for ad in ads:
        if ad["SlotType"] == "Dynamic":
            local, host = ad["Name"].split("@", 1)
            parent = local.split("_", 1)[0] + "@" + host
            used[parent] = used.get(parent, 0) + int(ad["TotalSlotCpus"])
    parts = []
    for ad in ads:
        host = ad["Name"].split("@", 1)[1]
        ad["Machine"] = host
        ad["Activity"] = "Idle" if ad["State"] == "Unclaimed" else "Busy"
        slot_cpus = int(ad["TotalSlotCpus"])
        ad["Cpus"] = slot_cpus - used.get(ad["Name"], 0) if ad["SlotType"] == "Partitionable" else slot_cpus
        ad["Memory"] = int(ad["TotalSlotMemory"])
        ad["CPUModel"] = CONSTRUCTED_MODELS[host.split(".", 1)[0]]
        parts.append(ad.printJson())
    return "[\n" + ",\n".join(parts) + "\n]\n"


# CONSTRUCTED job ads: a running pilot, an idle one, a held one (condor_q -json)
CONSTRUCTED_QUEUE = [
    {"ClusterId": 4242, "ProcId": 0, "JobStatus": 2, "JobBatchName": "resel-r1-abcdef-p0", "Owner": "alice",
     "QDate": 1764100000, "JobCurrentStartDate": 1764100060, "JobStartDate": 1764100060,
     "EnteredCurrentStatus": 1764100060, "RequestCpus": 1, "ReselWalltime": 900, "NumJobStarts": 1,
     "CompletionDate": 0},
    {"ClusterId": 4243, "ProcId": 0, "JobStatus": 1, "JobBatchName": "resel-r1-abcdef-p1", "Owner": "alice",
     "QDate": 1764100010, "EnteredCurrentStatus": 1764100010, "RequestCpus": "\\/Expr(1 * 1)\\/",
     "ReselWalltime": 900, "NumJobStarts": 0, "CompletionDate": 0},
    {"ClusterId": 4244, "ProcId": 0, "JobStatus": 5, "JobBatchName": "resel-r1-abcdef-p2", "Owner": "alice",
     "QDate": 1764100020, "EnteredCurrentStatus": 1764100200, "RequestCpus": 1, "ReselWalltime": 900,
     "HoldReason": "Error from slot1_4@cpu4.htc.inm7.de: Failed to execute '/bin/false'",
     "HoldReasonCode": 6, "NumJobStarts": 0, "CompletionDate": 0},
    {"ClusterId": 5000, "ProcId": 0, "JobStatus": 2, "JobBatchName": "someone-elses-job", "Owner": "bob",
     "QDate": 1764100000, "JobCurrentStartDate": 1764100030, "RequestCpus": 4, "CompletionDate": 0},
]

# CONSTRUCTED finished jobs (condor_history -json): done, failed, removed
CONSTRUCTED_HISTORY = [
    {"ClusterId": 4240, "ProcId": 0, "JobStatus": 4, "JobBatchName": "resel-r1-abcdef-p7", "Owner": "alice",
     "QDate": 1764099000, "JobCurrentStartDate": 1764099050, "CompletionDate": 1764099950, "ExitCode": 0,
     "ExitBySignal": False, "RequestCpus": 1, "ReselWalltime": 900, "EnteredCurrentStatus": 1764099950},
    {"ClusterId": 4241, "ProcId": 0, "JobStatus": 4, "JobBatchName": "resel-r1-abcdef-p8", "Owner": "alice",
     "QDate": 1764099000, "JobCurrentStartDate": 1764099050, "CompletionDate": 1764099100, "ExitCode": 1,
     "ExitBySignal": False, "RequestCpus": 1, "EnteredCurrentStatus": 1764099100},
    {"ClusterId": 4239, "ProcId": 0, "JobStatus": 3, "JobBatchName": "resel-r1-abcdef-p9", "Owner": "alice",
     "QDate": 1764099000, "JobCurrentStartDate": 1764099050, "CompletionDate": 0,
     "EnteredCurrentStatus": 1764099500, "RemoveReason": "via condor_rm (by user alice)", "RequestCpus": 1},
]

CONSTRUCTED_SCHEDDS = [
    {"Name": "ap40.uw.osg-htc.org", "TotalRunningJobs": 9120, "TotalIdleJobs": 15310},
    {"Name": "ap41.uw.osg-htc.org", "TotalRunningJobs": 880, "TotalIdleJobs": 90},
]

CONSTRUCTED_VERSION = ("$CondorVersion: 23.0.3 2024-01-02 BuildID: 702133 PackageID: 23.0.3-1 $\n"
                       "$CondorPlatform: x86_64_AlmaLinux9 $\n")
CONSTRUCTED_TERSE = "4245.0 - 4245.0\n"
CONSTRUCTED_RM_OK = "Job 4242.0 marked for removal\n"
CONSTRUCTED_RM_GONE = "Job 4239.0 not found\n"
CONSTRUCTED_RM_DENIED = ("Job 5000.0 not removed: Permission denied\n"
                         "ERROR: Permission denied: only the owner or a queue superuser may remove job 5000.0\n")


def as_json(ads: list[dict]) -> str:
    """A JSON array as condor_q prints it (``\\/`` stays the JSON escape it is there)."""
    return json.dumps(ads, indent=2).replace("\\\\/", "\\/")
