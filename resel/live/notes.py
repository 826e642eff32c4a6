"""What a live coordinator noticed besides engine events, kept in the store (``live_notes``)
so ``resel status`` in another process shows it too: a site not answering and since when, a
pilot in a job state resel does not know, an agent relaunched under the same job, a record
refused by the protocol check, files an agent refused to act on (another user's or a
link: docs/security.md), the reason the scheduler gives for keeping a pilot pending — and the coordinator's lease on the run, which ``resel cancel``
reads to wait until a running coordinator has let go. The same table holds the counts ``resel
status`` shows (kind "summary", site "" as the lease's: :mod:`resel.live.summary`); neither is a
note, so :func:`read` leaves both out.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sqlite_utils import Database

    from resel.store import StoreReader

#: kinds of note, and how ``resel status`` words them
KINDS = ("unreachable", "job-state", "relaunch", "requeue", "bad-record", "rejected", "pending-reason")
LEASE = "coordinator"


def put(db: Database, run_id: int, site: str, key: str, kind: str, at: float, detail: str) -> None:
    """Record (or refresh) one note: ``first`` stays, ``last`` and ``count`` move on."""
    rows = list(db.query("select first, count from live_notes where run_id = ? and site = ? and key = ?",
                         [run_id, site, key]))
    first, count = (rows[0]["first"], (rows[0]["count"] or 0) + 1) if rows else (at, 1)
    db["live_notes"].upsert({"run_id": run_id, "site": site, "key": key, "kind": kind, "first": first,
                             "last": at, "count": count, "detail": detail}, pk=("run_id", "site", "key"))


def drop(db: Database, run_id: int, site: str, key: str) -> None:
    """Forget a note that no longer holds (the site answers again, the state is known again)."""
    db["live_notes"].delete_where("run_id = ? and site = ? and key = ?", [run_id, site, key])


@dataclass
class SiteNotes:
    """One site's notes, as the live table and ``resel status`` show them."""

    not_answering_since: float | None = None
    not_answering: str | None = None
    bad_records: int = 0
    lines: list[str] = field(default_factory=list)


def read(db: Database | StoreReader, run_id: int) -> dict[str, SiteNotes]:
    """Every site's notes of a run (an empty dict for a store without the table)."""
    out: dict[str, SiteNotes] = {}
    if "live_notes" not in db.table_names():
        return out
    for row in db.query("select * from live_notes where run_id = ? and kind not in ('lease', 'summary') "
                        "order by first, key", [run_id]):
        notes = out.setdefault(row["site"], SiteNotes())
        if row["kind"] == "unreachable":
            notes.not_answering_since, notes.not_answering = row["first"], row["detail"]
        elif row["kind"] == "bad-record":
            notes.bad_records += 1
        else:
            notes.lines.append(row["detail"])
    return out


# ---------------------------------------------------------------------- the coordinator's lease
def _host() -> str:
    """This machine's name (socket imported here: ``resel status`` reads notes, holds no lease)."""
    import socket
    return socket.gethostname()


def hold(db: Database, run_id: int, at: float, state: str = "running") -> None:
    """The coordinator says it drives the run (``state`` "running") or has let go ("released")."""
    db["live_notes"].upsert({"run_id": run_id, "site": "", "key": LEASE, "kind": "lease", "first": at,
                             "last": time.time(), "count": 1,
                             "detail": json.dumps({"pid": os.getpid(), "host": _host(), "state": state})},
                            pk=("run_id", "site", "key"))


def lease_stale_after(options: str | None) -> float:
    """Seconds after which a coordinator's lease is taken as dropped (it was killed): a few of
    its polls (the run's stored options), and never under 10 s."""
    try:
        poll = float(json.loads(options or "{}").get("poll", 1.0))
    except (TypeError, ValueError, AttributeError):
        poll = 1.0
    return max(10.0, 3 * poll + 5.0)


def coordinator_of(db: Database | StoreReader, run_id: int) -> dict | None:
    """The `resel run` that drives the run now ({pid, host, age}), or None: none does — what
    ``resel status`` and ``resel runs`` say of a run marked running that nothing carries on."""
    rows = list(db.query("select options from runs where id = ?", [run_id]))
    return holder(db, run_id, lease_stale_after(rows[0]["options"] if rows else None))


def holder(db: Database, run_id: int, stale_after: float) -> dict | None:
    """The coordinator that holds the run now — {pid, host, age} — or None (released, stale,
    or its process is gone from this host)."""
    if "live_notes" not in db.table_names():
        return None
    rows = list(db.query("select last, detail from live_notes where run_id = ? and site = '' and key = ?",
                         [run_id, LEASE]))
    if not rows:
        return None
    try:
        info = json.loads(rows[0]["detail"] or "{}")
    except ValueError:
        return None
    age = time.time() - (rows[0]["last"] or 0.0)
    if info.get("state") != "running" or age > stale_after:
        return None
    if info.get("host") == _host() and isinstance(info.get("pid"), int):
        try:
            os.kill(info["pid"], 0)
        except ProcessLookupError:
            return None            # killed (kill -9) without letting go
        except PermissionError:
            pass
    return {"pid": info.get("pid"), "host": info.get("host"), "age": age}
