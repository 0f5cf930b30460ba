"""The gate of an agent with `after_group`, at work: it reads the fleet's statuses (I/O), remembers
when it first saw each agent of the group show a commit applied (the soak's start, on this agent's
clock), and asks the pure gate (`gitsync.agent.gate.group_gate`) for the verdict."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from gitsync.agent.gate import GateVerdict, group_gate, judge
from gitsync.log import logger
from gitsync.source.transport import SourceError
from gitsync.writeback.fleet import FleetReader
from gitsync.writeback.statusfile import FleetEntry

if TYPE_CHECKING:
    from gitsync.agent.metrics import Metrics
    from gitsync.settings import Settings


class FleetGate:
    """The gate of an agent with `after_group`: reads the fleet, remembers when it first saw each agent
    of the group show a commit applied (the soak's start, on this agent's clock), and judges. The one
    stateful piece here; the reading is its reader's, the judging `group_gate`'s."""

    def __init__(self, reader: FleetReader, after_group: str, after_count: int, soak: float,
                 heartbeat: float, on_read: Callable[[Sequence[FleetEntry]], None] = lambda _fleet: None,
                 ) -> None:
        self.reader = reader
        self.after_group, self.after_count = after_group, after_count
        self.soak, self.heartbeat = soak, heartbeat
        self.on_read = on_read
        self._since: dict[tuple[str, str], datetime] = {}  # (agent, commit) → first seen (`_first_seen`)

    @classmethod
    def from_settings(cls, settings: Settings, metrics: Metrics | None = None) -> FleetGate:
        """The gate for `settings` (with `after_group`); warns at start when statuses are not signed."""
        assert settings.after_group is not None
        if settings.status_signers is None:
            logger.warning("after_group = {!r} without status_signers: any writer of {} can open (or hold) "
                           "this agent's gate with a status file of its own (docs/security.md)",
                           settings.after_group, settings.status_refs)
        return cls(FleetReader.from_settings(settings), settings.after_group, settings.after_count,
                   settings.soak, own_heartbeat(settings),
                   on_read=metrics.set_fleet if metrics is not None else lambda fleet: None)

    def verdict(self, commit: str, committed: datetime | None, now: datetime) -> GateVerdict:
        """Read the fleet and judge `commit` (its commit time `committed`) at `now`."""
        try:
            fleet = self.reader.read()
        except SourceError as exc:
            return GateVerdict(False, f"cannot read the fleet's status: {exc.reason}")
        self.on_read(fleet)
        counted = judge(fleet, commit, self.after_group, now, self.heartbeat, committed).counted
        since = self._first_seen(counted, commit, now)
        return group_gate(fleet, commit, self.after_group, self.after_count, self.soak, now, self.heartbeat,
                          since, committed)

    def _first_seen(self, counted: Sequence[FleetEntry], commit: str, now: datetime) -> dict[str, datetime]:
        """Per agent counted now, when this agent first saw it count for `commit`; the others are forgotten,
        so an agent that stops showing the commit applied starts its soak again when it shows it anew."""
        kept = {(e.agent, commit): self._since.get((e.agent, commit), now) for e in counted}
        self._since = kept
        return {agent: moment for (agent, _), moment in kept.items()}


def own_heartbeat(settings: Settings) -> float:
    """The heartbeat period this agent expects of others: what it writes its own status at."""
    return max(settings.status_heartbeat, settings.interval + settings.jitter)


__all__ = ["FleetGate", "own_heartbeat"]
