"""Limits and pending reasons on the live testbed (issue 18 item 3).

The testbed has no slurmdbd (adding one would disturb everyone's live tests), so association
and QOS limits are tested on real captures (tests/test_limits.py); here:

* a full tbb (another user's job holds its 4 CPUs) keeps resel's pilot pending; the reason
  Slurm gives (Resources or Priority) is what `resel status --json` shows for the site, and what
  `resel plan` reports for the user's pending jobs there;
* `sacctmgr` on a cluster without accounting gives no limits and says why (unknown, not zero);
* the HTCondor access point's per-owner knobs are read over SSH from the real schedd config.
"""

from __future__ import annotations

import json
import time

import pytest
from click.testing import CliRunner

from live_helpers import bag_toml, cancel_leftovers, fill, sites_toml, slurm, start
from trixie_helpers import trixie  # noqa: F401 - the fixture
from resel.backends.connect import open_site
from resel.config import load_sites
from resel.site_limits import read_site


@pytest.fixture(autouse=True)
def _no_pilot_left_behind(testbed, tmp_path):
    yield
    cancel_leftovers(testbed, tmp_path)


def test_pending_reason_in_status_and_plan_on_a_full_cluster(tmp_path, testbed):
    from resel.cli import cli
    filler = fill(testbed, "b", 4, 60)
    try:
        sites = "[[site]]" + sites_toml(testbed).split("[[site]]")[2]        # tbb alone
        coord = start(tmp_path, sites, bag_toml(2, "echo hi"), strategy="model")
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and "pending:p0" not in coord.views["tbb"].notes:
                coord.step(wait=True)
            said = coord.views["tbb"].notes.get("pending:p0")
            assert said is not None, coord.views["tbb"].notes
            reason = said.rsplit("(", 1)[1].rstrip(")")
            assert reason in ("Resources", "Priority"), said
            # resel status, from the store (another process would see the same)
            out = CliRunner().invoke(cli, ["status", str(coord.run_id), "--db", str(tmp_path / "resel.db"), "--json"])
            assert out.exit_code == 0, out.output
            doc = json.loads(out.output)
            tbb = next(s for s in doc["sites"] if s["site"] == "tbb")
            assert any(f"pending ({reason})" in n for n in tbb["notes"]), tbb
            # resel plan's reading of the site: the user's (reseltb's) pending pilot and why it waits
            [site] = load_sites(tmp_path / "sites.toml")
            found = read_site(site, open_site)
            assert found.jobs is not None and found.jobs >= 1
            assert sum(found.pending_reasons.values()) >= 1 and set(found.pending_reasons) <= {"Resources", "Priority"}
            assert any("accounting_storage" in n for n in found.notes) and found.limits.empty
        finally:
            coord.close()
    finally:
        slurm(testbed, "b", "scancel", filler, check=False)


def test_condor_per_owner_limits_read_from_the_access_point(trixie):  # noqa: F811
    from resel.backends.htcondor import HTCondorCLI
    from resel.backends.transport import SSHTransport
    tr = SSHTransport("tb-ap", ssh_config=trixie.trixie_ssh_config)
    try:
        lim, notes = HTCondorCLI(tr).limits()
    finally:
        tr.close()
    assert notes == []
    assert (lim.max_submit, lim.max_running) == (20000, 10000)      # HTCondor 23.9's defaults, as configured


def test_run_sizes_a_pool_within_its_schedd_limits(tmp_path, trixie, capsys):  # noqa: F811
    """What `resel run` does before it starts: the pool's real MAX_JOBS_RUNNING (10000) caps a
    per-task site that asked for 100000 pilots; a Slurm site without accounting is unchanged."""
    from trixie_helpers import pool_site
    from resel.cli_live import _within_limits
    path = tmp_path / "sites.toml"
    path.write_text(pool_site(trixie, pilots=100000) + "\n" + "[[site]]" + sites_toml(trixie).split("[[site]]")[1],
                    encoding="utf-8")
    sites = load_sites(path)
    from resel import cli as c
    from resel.domain import Bag, Profile
    kept = _within_limits(c, Bag("b", "true", 4, 1, Profile(1e9)), sites)
    by = {s.name: s for s in kept}
    assert by["pool"].pilot.max_pilots == 10000 and by["tba"].pilot == sites[1].pilot
    said = capsys.readouterr().err
    assert ("pool: limits: max_pilots 100000 → 20000 (schedd: MAX_JOBS_PER_SUBMISSION = 20000)\n"
            "pool: limits: max_pilots 20000 → 10000 (schedd: MAX_JOBS_RUNNING = MIN({24105, 10000}))") in said
    assert "tba: limits: no association limits" in said
