"""Resuming a live run: its recorded events replayed into a fresh engine (the actions still
undone, the timers, the pilots, the results already read), then what the agents did while no
coordinator watched, read on every site before any decision."""

from __future__ import annotations

import heapq
import json
import logging
from typing import Any

from resel import journal
from resel.backends.pilotsite import task_key
from resel.errors import IllegalTransition
from resel.events import (
    BagDone, Event, SetTimer, SubmitPilot, TaskFailed, TaskFetching, TaskFinished, TaskLost,
    TaskStarted, TimerFired, TaskMeasured, TaskWithdrawn,
)
from resel.live.findings import starts_first
from resel.live.pilot_views import PilotView, stored_view
from resel.states import PilotState, TaskState


log = logging.getLogger("resel.live")


def catch_up(coord: Any) -> None:
    """Resumed: read what every running pilot's agent did while no coordinator watched — on
    every site before any decision — and feed it with every site's starts before any site's
    ends. A task one site's agent took from its inbox meanwhile is then running, not
    waiting, when another site's freed slot asks for work; before, the faster site's first
    read came first and re-selection moved that task, which ran twice. A site that does not
    answer within ``slow_after`` seconds is caught up by its polls."""
    by_site: dict[str, list[PilotView]] = {}
    for v in coord.pilots.values():
        if v.state is PilotState.ACTIVE and v.job_id:
            by_site.setdefault(v.site, []).append(v)
    t = coord.now()
    read = list(coord.polls.read_pilots("catch-up", by_site, coord.options.slow_after, heartbeat=True))
    events: list[Event] = []
    with coord.turn():      # what was read and what it means, in one transaction (no site waited on in it)
        for v, found in read:
            events += coord.findings.site_events(t, ([v], None, {v.pilot: found}))
        coord.feed(starts_first(events))


def replay(coord: Any) -> None:
    for row in coord.db.query("select * from live_pilots where run_id = ?", [coord.run_id]):
        coord.pilots[row["pilot"]] = stored_view(row)
    fired = set()
    for row in journal.rows(coord.db, coord.run_id):
        coord.seq = row["seq"] + 1
        try:
            record = journal.decode(row["kind"], row["time"], row["data"])
        except journal.BadRecord as exc:
            if exc.why == "json":
                log.warning("run %s: event %s (%s) is not readable JSON; skipped", coord.run_id, row["seq"],
                            row["kind"])
            elif exc.why == "fields":   # a record an older resel wrote: see below
                log.warning("run %s: recorded %s %s skipped on replay: %s", coord.run_id, row["kind"], row["data"],
                            exc)
            continue   # "kind": not a record this version knows (as before: not replayed)
        if isinstance(record, Event):
            if isinstance(record, TimerFired):
                fired.add((record.task, record.attempt, record.site or ""))
            try:
                coord.engine.handle(record)   # the actions it returns were recorded with it
            except (IllegalTransition, TypeError) as exc:
                # a record an older resel let through (a result for a task that does not
                # exist): the engine refused it then too, so skipping it changes nothing
                log.warning("run %s: recorded %s %s skipped on replay: %s", coord.run_id, row["kind"], row["data"],
                            exc)
                continue
            if isinstance(record, (TaskStarted, TaskFinished, TaskFailed, TaskLost, TaskFetching, TaskWithdrawn,
                                   TaskMeasured)):
                coord.consumed.add((row["kind"], record.task, record.attempt))
        else:
            action = record
            if isinstance(action, SetTimer):
                heapq.heappush(coord.timers, (action.at, action.task, action.attempt, action.site or ""))
            elif isinstance(action, SubmitPilot) and action.pilot not in coord.pilots:
                coord.pilots[action.pilot] = PilotView(action.pilot, action.site, action.cores, action.walltime)
            elif isinstance(action, BagDone):
                coord.finished = True
            if row["done"] == 0:
                coord.acts.undone.append((row["seq"], action, 0.0))
    # results already read became events; mark their files seen so they are not re-read (the
    # per-key files of an agent of protocol 5 or earlier, listed; a protocol-6 pilot's fresh
    # cursor reads every wave once more, and the consumed set skips what the journal holds)
    for (kind, task, attempt) in coord.consumed:
        sub = "started" if kind == "TaskStarted" else "results"
        for view in coord.pilots.values():
            view.seen.add(f"{sub}/{task_key(task, attempt)}.json")
    coord.timers = [t for t in coord.timers if (t[1], t[2], t[3]) not in fired]
    heapq.heapify(coord.timers)
    # outputs a crash left on their way home: fetched again (what is home and right is kept)
    for task in coord.engine.tasks:
        if task.state is TaskState.FETCHING:
            rows = list(coord.db.query("select pilot, site, outputs from attempts where run_id = ? and task = ? "
                                       "and attempt = ?", [coord.run_id, task.id, task.attempt]))
            if rows and rows[0]["outputs"]:
                coord.task_data.deliveries[(task.id, task.attempt)] = (rows[0]["pilot"], rows[0]["site"],
                                                                       json.loads(rows[0]["outputs"]))
                coord.task_data.fetch_retry.append((0.0, task.id, task.attempt))
