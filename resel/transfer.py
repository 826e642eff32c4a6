"""How long a task's data takes to move: what selection adds to T̂x per site (issue 25 item 5).

A task bound to site x waits for its inputs to reach x before it can start, and is done only
once its outputs are home (docs/data.md). Both trips cost time, and the cost differs per site —
a supercomputer on a fast research network, an OSG slot whose outputs cross a busy submit
host — so the site that runs a task soonest is the one of lowest

    T̂x'(x) = T̂x(x) + D(x),   D(x) = own_in / bw_in(x) + out / bw_out(x)  (+ shared / bw_in(x) while x is cold)

with ``own_in`` a task's own input bytes, ``shared`` the bytes every task shares (sent once per
site and run: a site that holds none of them yet is *cold*), ``out`` a task's output bytes, and
bw_in / bw_out the site's bandwidth to it and from it (decimal MB/s). docs/engine.md ("Selection
sees the data") states where the engine uses it.

Pure: numbers in, seconds out — no clock, no file, no network (the engine and the oracle call
it; the live coordinator builds one from what it measured, :meth:`TransferModel.measured`).

What it simplifies, on purpose:

* **One size per bag.** ``own_in`` is the mean over the bag's tasks (a bag whose tasks read
  files of very different sizes — water boxes of three sizes — is priced at their mean);
  pricing each task by its own bytes, like a per-task T̂x, is another issue's work.
* **Independent transfers.** Each task's files move at the site's full bandwidth whatever else
  is moving (the simulator models them so too, :mod:`resel.sim.simulation`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable, Mapping

from resel.domain import Bandwidth

if TYPE_CHECKING:
    from resel.domain import Bag, Site

#: bytes in a decimal megabyte (sizes in bag files and bandwidths are decimal MB and MB/s)
MB = 1e6
#: MB/s priced (and, simulated, moved) both ways for a site that states no ``bandwidth`` while
#: the bag moves data: a 1 Gbit/s link at 80 % (live, a short probe measures it instead)
DEFAULT_MBPS = 100.0
DEFAULT_BANDWIDTH = Bandwidth(DEFAULT_MBPS, DEFAULT_MBPS)


@dataclass(frozen=True, slots=True)
class DataTimes:
    """One task's data time on one site, in seconds, by part."""

    own_in: float      #: its own inputs to the site
    shared_in: float   #: the inputs every task shares, to a cold site (once per site and run)
    out: float         #: its outputs home

    def seconds(self, cold: bool = True) -> float:
        """D(x): the whole trip, the shared inputs included while the site is ``cold``."""
        return self.own_in + self.out + (self.shared_in if cold else 0.0)


NO_DATA = DataTimes(0.0, 0.0, 0.0)


@dataclass(frozen=True, slots=True)
class TransferModel:
    """A bag's data sizes and each site's bandwidth: D(x) for every site.

    Build it with :meth:`from_bag` (the sizes a bag file states) or :meth:`measured` (the
    sizes a live run found); :meth:`with_bandwidth` gives the model with one site's figure
    changed (a measurement during the run).
    """

    own_in_bytes: float                 #: a task's own inputs (mean over the bag)
    shared_bytes: float                 #: the inputs every task shares, sent once per site and run
    out_bytes: float                    #: a task's outputs
    #: per site name, MB/s to the site and from it; a site missing here moves at ``default``
    bandwidth: Mapping[str, Bandwidth] = field(default_factory=dict)
    default: Bandwidth = DEFAULT_BANDWIDTH

    def __post_init__(self) -> None:
        for name, value in (("own_in_bytes", self.own_in_bytes), ("shared_bytes", self.shared_bytes),
                            ("out_bytes", self.out_bytes)):
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be a finite number of bytes >= 0, got {value!r}")
        for site, bw in [*self.bandwidth.items(), ("default", self.default)]:
            if not all(math.isfinite(v) and v > 0 for v in (bw.inbound, bw.outbound)):
                raise ValueError(f"bandwidth of {site} must be > 0 MB/s both ways, got {bw!r}")

    @property
    def moves(self) -> bool:
        """Whether any byte moves at all (a model that moves none prices every site at 0)."""
        return bool(self.own_in_bytes or self.shared_bytes or self.out_bytes)

    def bandwidth_of(self, site: str) -> Bandwidth:
        return self.bandwidth.get(site) or self.default

    def times(self, site: str) -> DataTimes:
        """The parts of D(site), in seconds."""
        bw = self.bandwidth_of(site)
        return DataTimes(self.own_in_bytes / (bw.inbound * MB), self.shared_bytes / (bw.inbound * MB),
                         self.out_bytes / (bw.outbound * MB))

    def seconds(self, site: str, cold: bool = True) -> float:
        """D(site): a task's whole data time there, the shared inputs included while ``cold``."""
        return self.times(site).seconds(cold)

    def with_bandwidth(self, site: str, inbound: float | None = None, outbound: float | None = None) -> "TransferModel":
        """The same model with ``site``'s MB/s replaced where given (None keeps that way's figure)."""
        old = self.bandwidth_of(site)
        new = Bandwidth(old.inbound if inbound is None else float(inbound),
                        old.outbound if outbound is None else float(outbound))
        return TransferModel(self.own_in_bytes, self.shared_bytes, self.out_bytes,
                             {**self.bandwidth, site: new}, self.default)

    @classmethod
    def from_bag(cls, bag: "Bag", sites: Iterable["Site"], *, truth: bool = False) -> "TransferModel | None":
        """The model a bag file states: ``[bag.data]``'s ``input_mb`` (a task's own inputs),
        ``shared_mb`` and ``output_mb``, and each site's ``bandwidth`` — or, with ``truth``, the
        simulated site's ``truth.bandwidth`` (how fast files really move), else its ``bandwidth``.
        A site that states neither moves at :data:`DEFAULT_BANDWIDTH`.

        None when the bag moves nothing (no ``[bag.data]`` sizes, or all 0): then every D is 0
        and the engine decides exactly as without data. A bag's declared input *files* are not
        read here (that is I/O): the live run measures them, :meth:`measured`.
        """
        data = bag.data
        if data is None:
            return None
        sizes = [(v or 0.0) * MB for v in (data.input_mb, data.shared_mb, data.output_mb)]
        if not any(sizes):
            return None
        return cls(*sizes, bandwidth=site_bandwidths(sites, truth=truth))

    @classmethod
    def measured(cls, sites: Iterable["Site"], *, own_input_bytes: Iterable[float], shared_bytes: float,
                 output_bytes: float, bandwidth: Mapping[str, Bandwidth] | None = None) -> "TransferModel | None":
        """The live coordinator's model, from what it measured before the run started.

        Args:
            sites: the run's sites; each one's ``bandwidth`` from the sites file is the figure
                where ``bandwidth`` gives none (and :data:`DEFAULT_BANDWIDTH` where neither does).
            own_input_bytes: per task, the bytes of its own inputs — the manifest's
                ``task_inputs`` rows of that task summed, shared files (task −1) left out. Their
                mean is priced for every task. An empty iterable counts as 0.
            shared_bytes: the shared files' bytes (the manifest's task −1 rows, summed).
            output_bytes: a task's output bytes: ``[bag.data] output_mb`` × 1e6 until outputs
                are seen (a resumed run may give the mean of the outputs already home).
            bandwidth: per site name, MB/s measured (the probe, earlier transfers of the run);
                these win over the sites file. Later measurements reach the engine as
                :class:`~resel.events.BandwidthMeasured` events (journaled, so a resume replays
                them).

        Returns None when nothing moves (every size 0): the engine then prices no data.
        """
        own = [float(b) for b in own_input_bytes]
        mean = sum(own) / len(own) if own else 0.0
        model = cls(mean, float(shared_bytes), float(output_bytes),
                    bandwidth={**site_bandwidths(sites), **dict(bandwidth or {})})
        return model if model.moves else None


    def to_json(self) -> dict:
        """What a live run stores with its options, so a resumed engine prices alike."""
        return {"own_in_bytes": self.own_in_bytes, "shared_bytes": self.shared_bytes, "out_bytes": self.out_bytes,
                "bandwidth": {s: [bw.inbound, bw.outbound] for s, bw in self.bandwidth.items()},
                "default": [self.default.inbound, self.default.outbound]}

    @classmethod
    def from_json(cls, doc: dict) -> "TransferModel":
        return cls(float(doc["own_in_bytes"]), float(doc["shared_bytes"]), float(doc["out_bytes"]),
                   {s: Bandwidth(float(v[0]), float(v[1])) for s, v in (doc.get("bandwidth") or {}).items()},
                   Bandwidth(*(float(v) for v in doc.get("default") or (DEFAULT_MBPS, DEFAULT_MBPS))))


def site_bandwidths(sites: Iterable["Site"], *, truth: bool = False) -> dict[str, Bandwidth]:
    """Per site name, the ``bandwidth`` its sites-file entry states (with ``truth``: its
    simulated ``truth.bandwidth`` first); sites that state none are left out."""
    out = {}
    for s in sites:
        bw = (s.truth.bandwidth if truth and s.truth is not None else None) or s.bandwidth
        if bw is not None:
            out[s.name] = bw
    return out
