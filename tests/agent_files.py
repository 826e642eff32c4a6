"""What the agents wrote in a run's pilot folders, read where they lie (the tests' own disk or the
testbed's): start and result records, per-key files (agent protocol 5 and earlier) and waves
(protocol 6: ``{incarnation}-{n}.json``, a list each) alike, through the agent's own reader."""

from __future__ import annotations

from pathlib import Path

from resel.shipped.agent import folder_records


def records(folder: Path | str) -> list[dict]:
    """Every record of one ``started/`` or ``results/`` folder (another user's files included)."""
    return [rec for _name, rec in folder_records(str(folder), own_only=False) if isinstance(rec, dict)]


def run_records(run_dir: Path | str, sub: str = "results") -> list[dict]:
    """Every record of ``sub`` in every pilot folder ``p*`` of a run's directory."""
    return [rec for pdir in sorted(Path(run_dir).glob("p*")) for rec in records(pdir / sub)]


def keyed(folder: Path | str) -> dict[str, list[dict]]:
    """A folder's records by key ``tN-aM``: one each, unless something wrote a key twice."""
    out: dict[str, list[dict]] = {}
    for rec in records(folder):
        out.setdefault(f"t{rec.get('task')}-a{rec.get('attempt')}", []).append(rec)
    return out
