"""A site's worker runs the inbox writes queued one behind the other as one batch
(resel.live.sites, resel.live.inbox_writes): in their order, each with its own report, a job
of another kind behind them after them, and a failure only where it happened."""

from __future__ import annotations

import queue
import threading

from resel.live.inbox_writes import InboxWrite
from resel.live.sites import MAX_BATCH, SiteWorker


class Site:
    """Records what was written, batch by batch; refuses the paths it is told to."""

    def __init__(self, refuse: tuple[str, ...] = (), down: bool = False):
        self.batches: list[list[str]] = []
        self.refuse, self.down = refuse, down
        self.order: list[str] = []

    def write(self, files):
        if self.down:
            raise ConnectionError("site unreachable")
        self.batches.append([path for path, _ in files])
        self.order.extend(path for path, _ in files)
        return [PermissionError(13, "refused", path) if path in self.refuse else None for path, _ in files]


def inbox_job(site: Site, name: str, stage_error: Exception | None = None) -> InboxWrite:
    def stage():
        if stage_error is not None:
            raise stage_error
        return [f"sent-{name}"]
    return InboxWrite("s", stage, lambda: (name, name.encode()), site.write)


def run_jobs(jobs: list[tuple[str, object]], hold: bool = True) -> list:
    """Queue ``jobs`` (kind, callable) behind a job that holds the worker until all are queued,
    so they are queued one behind the other; returns the reports in the order they came."""
    reports: queue.Queue = queue.Queue()
    worker = SiteWorker("s", reports, role="files")
    gate = threading.Event()
    worker.submit("gate", "gate", gate.wait)
    for i, (kind, job) in enumerate(jobs):
        worker.submit(kind, i, job)
    gate.set()
    got = [reports.get(timeout=10) for _ in range(len(jobs) + 1)]
    worker.stop()
    assert got[0].tag == "gate"
    assert worker.pending == 0
    return got[1:]


def test_queued_inbox_writes_go_as_one_batch_in_order_each_with_its_report():
    site = Site()
    reports = run_jobs([("act", inbox_job(site, f"t{i}")) for i in range(10)])
    assert site.batches == [[f"t{i}" for i in range(10)]]
    assert [r.tag for r in reports] == list(range(10))
    assert [(r.result, r.error) for r in reports] == [([f"sent-t{i}"], None) for i in range(10)]


def test_a_job_of_another_kind_behind_the_writes_runs_after_them_and_splits_the_batches():
    site = Site()
    seen: list[str] = []

    def other():
        seen.append(f"other after {len(site.order)} writes")
        return "done"
    jobs = [("act", inbox_job(site, "a")), ("act", inbox_job(site, "b")), ("poll", other),
            ("act", inbox_job(site, "c"))]
    reports = run_jobs(jobs)
    assert site.batches == [["a", "b"], ["c"]]
    assert seen == ["other after 2 writes"]
    assert [r.tag for r in reports] == [0, 1, 2, 3]
    assert reports[2].result == "done"


def test_a_refused_file_or_a_failed_staging_fails_only_its_own_action():
    site = Site(refuse=("b",))
    boom = ValueError("no such input")
    reports = run_jobs([("act", inbox_job(site, "a")), ("act", inbox_job(site, "b")),
                        ("act", inbox_job(site, "c", stage_error=boom)), ("act", inbox_job(site, "d"))])
    assert site.batches == [["a", "b", "d"]]         # c's inputs did not go: its file is not written
    assert reports[0].error is None and reports[3].error is None
    assert isinstance(reports[1].error, PermissionError) and reports[1].result is None
    assert reports[2].error is boom


def test_an_unreachable_site_fails_every_action_of_the_batch():
    site = Site(down=True)
    reports = run_jobs([("act", inbox_job(site, n)) for n in "abc"])
    assert [type(r.error) for r in reports] == [ConnectionError] * 3
    assert all(r.result is None for r in reports)


def test_a_batch_holds_at_most_max_batch_jobs():
    site = Site()
    reports = run_jobs([("act", inbox_job(site, f"t{i}")) for i in range(MAX_BATCH + 3)])
    assert [len(b) for b in site.batches] == [MAX_BATCH, 3]
    assert len(reports) == MAX_BATCH + 3 and all(r.error is None for r in reports)


def test_a_write_alone_is_the_same_write():
    """Called alone (no batch) the job stages and writes, raising its own failure."""
    site = Site(refuse=("x",))
    assert inbox_job(site, "a")() == ["sent-a"]
    try:
        inbox_job(site, "x")()
    except PermissionError:
        pass
    else:
        raise AssertionError("a refused write must raise")
    assert site.batches == [["a"], ["x"]]


def test_the_worker_stops_after_a_batch_when_told_to_behind_it():
    reports: queue.Queue = queue.Queue()
    worker = SiteWorker("s", reports, role="files")
    gate = threading.Event()
    worker.submit("gate", "gate", gate.wait)
    site = Site()
    worker.submit("act", 0, inbox_job(site, "a"))
    worker.stop()
    gate.set()
    worker._thread.join(timeout=10)
    assert not worker._thread.is_alive()
    assert site.batches == [["a"]]
