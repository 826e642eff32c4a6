"""An experiment keeps each run's metrics and audit, not the run: memory stays flat in --repeat."""

from __future__ import annotations

import weakref

import resel
from resel.sim.experiment import RunOutcome, run_experiment


def test_runs_are_not_kept_once_handed_to_on_run():
    refs = []
    exp = run_experiment(resel.default_bag(), resel.default_sites(), ["random", "reselect"], [16],
                         repeat=3, on_run=lambda r: refs.append(weakref.ref(r.engine)) or None)
    # freed as the experiment goes, not at the collector's next full pass
    assert len(refs) == 6 and all(ref() is None for ref in refs)
    cell = exp.cell("reselect", 16)
    assert all(type(r) is RunOutcome for r in cell.runs) and len(cell.runs) == 3
    doc = cell.as_dict()
    assert doc["repeat"] == 3 and doc["ttc_wkd"]["mean"] > 0 and doc["reselection"]["decisions"] > 0
