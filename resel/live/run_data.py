"""A live run's task data on the coordinator's side (docs/data.md): each site's
:class:`~resel.live.staging.SiteData`, the inputs its cache received, outputs on their way home
(fetched on the site's file worker, retried while the link is down, recorded once home), and
what the run's own transfers measure — a site's bandwidth, a task's output size — as events
for the engine. What the engine prices before the run is :func:`data_model`."""

from __future__ import annotations

import logging
import os
from typing import Any

from resel.backends.pilotsite import url_inputs_note
from resel.domain import Bag, Site
from resel.errors import ReselError
from resel.events import Event, TaskDelivered, TaskUndelivered, BandwidthMeasured, OutputsMeasured
from resel.live.errors import is_transient, describe
from resel.live.sites import Report
from resel.live.staging import OutputsNotDelivered, ResultsDiskFull, ResultsFolderRefused, SiteData
from resel.states import TaskState
from resel.task_data import Manifest, task_folder


log = logging.getLogger("resel.live")


#: bytes a site must move one way (since its last figure) before the run's own transfers
#: re-price its bandwidth
MEASURE_BYTES = 32e6


class RunData:
    """The run's task data per site, and the deliveries and measurements under way."""

    def __init__(self, coord: Any) -> None:
        #: the :class:`~resel.live.coordinator.Coordinator` that owns it
        self.coord = coord
        #: site -> its task data for this run (:meth:`site_data`)
        self.by_site: dict[str, SiteData] = {}
        #: (task, attempt) -> (pilot, site, outputs) of attempts whose outputs are on their way home
        self.deliveries: dict[tuple[int, int], tuple[int, str, list[dict]]] = {}
        self.fetch_retry: list[tuple[float, int, int]] = []
        #: bytes of each delivered task's outputs (OutputsMeasured)
        self.delivered_bytes: list[int] = []
        #: site -> (MB/s in, MB/s out) the probe measured before the run (task data)
        self.probed: dict[str, tuple[float, float]] = {}
        #: site -> [bytes, seconds] moved each way since the engine last heard the site's figure
        self.moved: dict[tuple[str, str], list[float]] = {}

    def site_data(self, name: str) -> SiteData:
        """The site's task data for this run, its cache as the store knows it. Made on the
        coordinator's thread (it reads the store); the site itself is opened on first use, on
        the site's thread."""
        if name not in self.by_site:
            held = [r["sha256"] for r in self.coord.db.query(
                "select sha256 from site_files where run_id = ? and site = ?", [self.coord.run_id, name])]
            self.by_site[name] = SiteData(lambda: self.coord.site(name), self.coord.run_key, held)
        return self.by_site[name]

    def pilot_inputs(self, site: str) -> tuple:
        """The bag's shared inputs, which a pool's pilot carries (a shared filesystem needs none)."""
        spec = next((s for s in self.coord.sites if s.name == site), None)
        if self.coord.manifest is None or spec is None or spec.kind != "htcondor":
            return ()
        return self.coord.manifest.shared_files

    def pilot_urls(self, site: str) -> tuple[str, ...]:
        """The bag's URL inputs, which a pool's pilot carries for the pool's transfer plugins to
        fetch; elsewhere resel fetches none (the note at the run's start says so)."""
        spec = next((s for s in self.coord.sites if s.name == site), None)
        if self.coord.bag.data is None or spec is None or spec.kind != "htcondor":
            return ()
        return tuple(i.pattern for i in self.coord.bag.data.urls)

    def url_notes(self, t: float) -> None:
        """Say, per site, what becomes of the bag's URL inputs there (resel status shows it)."""
        urls = [i.pattern for i in self.coord.bag.data.urls] if self.coord.bag.data else []
        for spec in self.coord.sites:
            words = url_inputs_note(spec, urls) if spec.access is not None else None
            if words:
                self.coord.health.note(spec.name, "url-inputs", "data", t, words)

    def sent(self, site: str, sent: list) -> None:
        """Record the inputs a site's cache received (each once per site and run)."""
        now = self.coord.now()
        self.coord.db["site_files"].upsert_all(
            [{"run_id": self.coord.run_id, "site": site, "sha256": x.sha256, "size": x.size, "sent": now,
              "seconds": x.seconds} for x in sent], pk=("run_id", "site", "sha256"))

    def fetch(self, task: int, attempt: int) -> None:
        """Bring an attempt's outputs home, on its site's thread — if the engine still wants
        them (a superseded or duplicate attempt's outputs are never fetched)."""
        rec = self.coord.engine.tasks[task] if 0 <= task < len(self.coord.engine.tasks) else None
        entry = self.deliveries.get((task, attempt))
        if rec is None or entry is None or rec.attempt != attempt or rec.state is not TaskState.FETCHING:
            self.deliveries.pop((task, attempt), None)
            return
        pilot, site, outputs = entry
        dest = os.path.join(self.coord.results, task_folder(task, self.coord.bag.count)) if self.coord.results else None
        if dest is None:
            raise ReselError(f"run {self.coord.run_id} has outputs to fetch but no results folder "
                             "(stored before task data?)")
        data = self.site_data(site)
        self.coord.exchange[site].submit("fetch", (task, attempt),
                                         lambda: data.fetch(pilot, task, attempt, outputs, dest))

    def fetched(self, report: Report, t: float) -> list[Event]:
        task, attempt = report.tag
        pilot, site, outputs = self.deliveries.get((task, attempt), (None, report.site, []))
        if report.error is not None:
            exc = report.error
            if isinstance(exc, (ResultsDiskFull, ResultsFolderRefused)):
                raise exc                       # the coordinator stops; nothing is lost (docs/data.md)
            if isinstance(exc, OutputsNotDelivered) or not is_transient(exc):
                self.deliveries.pop((task, attempt), None)
                log.warning("run %s: %s", self.coord.run_id, describe(exc))
                return [TaskUndelivered(time=t, task=task, attempt=attempt, reason=describe(exc))]
            self.coord.health.views[site].error = describe(exc)       # the link dropped: try again next poll
            self.fetch_retry.append((t + self.coord.options.poll, task, attempt))
            return []
        with self.coord.db.atomic():
            self.coord.db["task_outputs"].upsert_all(
                [{"run_id": self.coord.run_id, "task": task, "attempt": attempt, "site": site, "name": f.name,
                  "size": f.size, "sha256": f.sha256, "path": f.path, "fetched": t, "seconds": f.seconds}
                 for f in report.result], pk=("run_id", "task", "name"))
        self.deliveries.pop((task, attempt), None)
        if not self.coord.options.keep_remote and pilot is not None:
            data = self.site_data(site)
            # the site's copy goes only once the turn that records the outputs home has committed
            self.coord.after_commit(lambda: self.coord.exchange[site].submit(
                "clean", (task, attempt), lambda: data.clean(pilot, task, attempt, len(outputs))))
        self.delivered_bytes.append(sum(f.size for f in report.result))
        return ([TaskDelivered(time=t, task=task, attempt=attempt)] + self.outputs_measured(t)
                + self.measured(site, "out", [(f.size, f.seconds) for f in report.result if f.seconds > 0]))

    def outputs_measured(self, t: float) -> list[Event]:
        """The mean size of a task's outputs, from its deliveries: an OutputsMeasured event once
        three tasks are home and whenever the mean drifts by more than a quarter from the
        engine's figure (the bag's ``output_mb`` at first, or nothing)."""
        model = self.coord.engine.data_model
        if model is None or len(self.delivered_bytes) < 3:
            return []
        mean = sum(self.delivered_bytes) / len(self.delivered_bytes)
        if model.out_bytes and abs(mean - model.out_bytes) <= 0.25 * model.out_bytes:
            return []
        if not model.out_bytes and not mean:
            return []
        return [OutputsMeasured(time=t, out_bytes=mean)]

    def measured(self, site: str, way: str, moved: list[tuple[int, float]]) -> list[Event]:
        """The run's own transfers measure a site's bandwidth (docs/data.md): all bytes moved
        one way over all the seconds they took, since the run began (one copy's figure swings
        with the caches; the run's total settles). Once ``MEASURE_BYTES`` more moved since the
        engine last heard of it, a figure that differs from the engine's by more than a quarter
        becomes a BandwidthMeasured event (journaled, so a resumed run prices alike)."""
        if self.coord.engine.data_model is None or not moved:
            return []
        acc = self.moved.setdefault((site, way), [0.0, 0.0, 0.0])   # bytes, seconds, bytes at the last event
        acc[0] += sum(b for b, _ in moved)
        acc[1] += sum(s for _, s in moved)
        if acc[0] - acc[2] < MEASURE_BYTES or acc[1] <= 0:
            return []
        mbps = acc[0] / 1e6 / acc[1]
        bw = self.coord.engine.data_model.bandwidth_of(site)
        now = bw.inbound if way == "in" else bw.outbound
        if abs(mbps - now) <= 0.25 * now:
            return []
        acc[2] = acc[0]
        log.info("run %s: %s moves %.1f MB/s %s (was priced at %.1f)", self.coord.run_id, site, mbps, way, now)
        return [BandwidthMeasured(time=self.coord.now(), site=site,
                                  **({"inbound": mbps} if way == "in" else {"outbound": mbps}))]

    def retry(self, t: float) -> None:
        due = [(task, attempt) for at, task, attempt in self.fetch_retry if at <= t]
        self.fetch_retry = [x for x in self.fetch_retry if x[0] > t]
        for task, attempt in due:
            self.fetch(task, attempt)


def data_model(bag: Bag, sites: list[Site], manifest: Manifest | None) -> dict | None:
    """What the engine prices for a run's task data (docs/engine.md, "Selection sees the data"):
    each task's own input bytes and the shared ones from the manifest, ``output_mb`` until
    outputs are seen, the sites file's bandwidths (the probe adds the missing ones)."""
    from resel.transfer import TransferModel, site_bandwidths
    if bag.data is None or not bag.data.moves_files:
        return None
    own = [sum(f.size for f in files if not manifest.is_shared(f)) for files in manifest.tasks] if manifest else []
    model = TransferModel.measured(sites, own_input_bytes=own, shared_bytes=manifest.shared_bytes if manifest else 0,
                                   output_bytes=(bag.data.output_mb or 0.0) * 1e6)
    if model is None:   # nothing priced yet (outputs of a size still unknown): the deliveries will say
        model = TransferModel(0.0, 0.0, 0.0, bandwidth=site_bandwidths(sites))
    return model.to_json()
