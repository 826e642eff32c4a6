"""docs/engine.md lists every transition of the lifecycle tables (they are the source)."""

from pathlib import Path

from resel.states import PILOT_TRANSITIONS, TASK_TRANSITIONS

DOC = (Path(__file__).resolve().parent.parent / "docs" / "engine.md").read_text(encoding="utf-8")


def _rows(table_header: str) -> dict[str, tuple[list[str], list[str]]]:
    section = DOC.split(table_header, 1)[1].split("\n\n", 1)[0]
    rows = {}
    for line in section.splitlines()[2:]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[1] != "— (final)":
            rows[cells[0]] = ([w.strip() for w in cells[1].split("/")], [w.strip() for w in cells[2].split("/")])
    return rows


def test_every_task_transition_is_documented():
    """Each (state, what) -> next in TASK_TRANSITIONS appears in the task table."""
    rows = _rows("| task state |")
    for state, moves in TASK_TRANSITIONS.items():
        if not moves:
            continue
        whats, nexts = rows[state.value]
        assert dict(zip(whats, nexts)) == {w: n.value for w, n in moves.items()}


def test_every_pilot_transition_is_documented():
    """Each (state, what) -> next in PILOT_TRANSITIONS appears in the pilot table."""
    rows = _rows("| pilot state |")
    for state, moves in PILOT_TRANSITIONS.items():
        if not moves:
            continue
        whats, nexts = rows[state.value]
        assert dict(zip(whats, nexts)) == {w: n.value for w, n in moves.items()}
