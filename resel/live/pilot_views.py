"""What the coordinator knows of each pilot and site besides the engine: a pilot's batch job and
agent (:class:`PilotView`, its state in the engine's :class:`~resel.states.PilotState`) and
how ``live_pilots`` stores it; a site's health for the display (:class:`SiteView`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from resel.backends.waves import WaveCursor
from resel.states import PilotState


@dataclass
class PilotView:
    """The coordinator's view of one pilot: its batch job and its agent. Its state is in the
    engine's vocabulary (:class:`~resel.states.PilotState`), moved on by what the site says
    before the engine is told; the engine keeps its own pilot, the same words."""

    pilot: int
    site: str
    cores: int = 0
    walltime: float = 0.0
    job_id: str | None = None
    state: PilotState = PilotState.PENDING
    missing: int = 0
    seen: set = field(default_factory=set)
    #: where its agents' waves have been read to (agent protocol 6); fresh on resume: every wave
    #: is read again once and what the journal holds is skipped
    cursor: WaveCursor = field(default_factory=WaveCursor)
    job_state: str = ""
    #: the agent now running it (heartbeat.json), and when it started (live_pilots.agent_started)
    incarnation: str | None = None
    agent_started: float | None = None
    #: lost results its current agent wrote (walltime, terminated): PilotEnded or PilotRequeued
    #: settles them, unless that agent turns out to be replaced — then they are TaskLost
    parked: dict = field(default_factory=dict)
    unknown_state: str | None = None
    #: the site refused its submission for good: cancelled for the engine, ``failed`` as stored
    refused: bool = False

    @property
    def stored(self) -> str:
        """Its state as ``live_pilots.state`` holds it (and ``resel status --json`` shows it)."""
        return "failed" if self.refused else STORED_STATES[self.state]


#: the engine's pilot states as ``live_pilots.state`` stores them, in the words the table has
#: always held: an active pilot is ``running`` there, and a cancelled one whose submission the
#: site refused ``failed`` (:attr:`PilotView.refused`)
STORED_STATES = {PilotState.PENDING: "pending", PilotState.ACTIVE: "running", PilotState.ENDED: "ended",
                 PilotState.CANCELLED: "cancelled"}


def stored_view(row: dict) -> PilotView:
    """A pilot's ``live_pilots`` row read back on resume; a state word no resel writes is taken
    as ended (the pilot is not polled again)."""
    word = row["state"] or "pending"
    state = {w: s for s, w in STORED_STATES.items()}.get(word, PilotState.CANCELLED if word == "failed"
                                                          else PilotState.ENDED)
    return PilotView(row["pilot"], row["site"], row["cores"] or 0, row["walltime"] or 0.0, row["job_id"], state,
                     agent_started=row.get("agent_started"), refused=word == "failed")


@dataclass
class SiteView:
    """What the display shows per site besides the engine's counts."""

    error: str | None = None
    failing_since: float | None = None
    #: since when reading the pilots' files fails (a scheduler that answers does not clear it)
    files_failing_since: float | None = None
    last_poll: float = 0.0
    bad_records: int = 0
    notes: dict = field(default_factory=dict)      # key -> words (unknown states, relaunches)
