"""The gate of an agent with `after_group`, at work: it reads its group's statuses (I/O), remembers
when it first saw each agent of the group show a commit applied (the soak's start, on this agent's
clock), remembers the group's members and the failures it has seen (`GateMemory`, in
``<state_dir>/gate.json``, written atomically as state.json is, so a restart forgets nothing), and asks
the pure gate (`gitsync.agent.gate`) for the verdict."""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gitsync.agent.gate import GateMemory, GateVerdict, group_gate, judge, remember
from gitsync.agent.state import StateError
from gitsync.files import atomic_write
from gitsync.log import logger
from gitsync.source.transport import SourceError
from gitsync.writeback.fleet import FleetReader, FleetSource
from gitsync.writeback.statusfile import FleetEntry

if TYPE_CHECKING:
    from gitsync.agent.metrics import Metrics
    from gitsync.settings import Settings

GATE_FILE = "gate.json"


class FleetGate:
    """The gate of an agent with `after_group`: reads the fleet (its group's agents first, or only them
    when `named` lists them), remembers (`GateMemory`, and when it first saw each agent show a commit
    applied), and judges. The one stateful piece here; the reading is its reader's, the judging
    `group_gate`'s."""

    def __init__(self, reader: FleetSource, after_group: str, after_count: int, soak: float,
                 heartbeat: float, on_read: Callable[[Sequence[FleetEntry]], None] = lambda _fleet: None,
                 memory_file: Path | None = None, named: Collection[str] | None = None) -> None:
        self.reader = reader
        self.after_group, self.after_count = after_group, after_count
        self.soak, self.heartbeat = soak, heartbeat
        self.on_read = on_read
        self.memory_file = memory_file  # None: remembered for the life of this object only
        self.named = frozenset(named) if named is not None else None
        self.memory = load_memory(memory_file, after_group) if memory_file is not None else GateMemory()
        self._since: dict[tuple[str, str], datetime] = {}  # (agent, commit) → first seen (`_first_seen`)

    @classmethod
    def from_settings(cls, settings: Settings, metrics: Metrics | None = None) -> FleetGate:
        """The gate for `settings` (with `after_group`); warns at start when statuses are not signed.
        `StateError` when ``gate.json`` cannot be read."""
        assert settings.after_group is not None
        if settings.status_signers is None:
            logger.warning("after_group = {!r} without status_signers: any writer of {} can open (or hold) "
                           "this agent's gate with a status file of its own (docs/security.md)",
                           settings.after_group, settings.status_refs)
        reader = FleetReader.from_settings(settings, group=settings.after_group)  # O(group): its refs alone
        named = reader.signers.agents_of(settings.after_group) if reader.signers is not None else None
        return cls(reader, settings.after_group, settings.after_count, settings.soak, own_heartbeat(settings),
                   on_read=metrics.set_fleet if metrics is not None else lambda fleet: None,
                   memory_file=Path(settings.state_dir) / GATE_FILE, named=named)

    def verdict(self, commit: str, committed: datetime | None, now: datetime) -> GateVerdict:
        """Read the fleet and judge `commit` (its commit time `committed`) at `now`."""
        try:
            read = self.reader.read(only=self.named, first=self.memory.members)
        except SourceError as exc:
            return GateVerdict(False, f"cannot read the fleet's status: {exc.reason}")
        fleet = read.entries
        self.on_read(fleet)
        self._keep(remember(self.memory, fleet, self.after_group, self.named))
        counted = judge(fleet, commit, self.after_group, now, self.heartbeat, committed).counted
        since = self._first_seen(counted, commit, now)
        return group_gate(fleet, commit, self.after_group, self.after_count, self.soak, now, self.heartbeat,
                          since, committed, self.memory)

    def _keep(self, memory: GateMemory) -> None:
        """The new memory, written before it is used: a verdict never rests on what a crash would lose."""
        if memory == self.memory:
            return
        for agent in sorted(memory.members - self.memory.members):
            logger.info("gate: {} is a member of group {} now", agent, self.after_group)
        for agent in sorted(self.memory.members - memory.members):
            logger.info("gate: {} is no longer a member of group {}", agent, self.after_group)
        for commit, agents in memory.failed.items():
            for agent in sorted(agents - self.memory.failed.get(commit, frozenset())):
                logger.warning("gate: {} of group {} failed {}: held back until a new commit", agent,
                               self.after_group, commit[:7])
        if self.memory_file is not None:
            atomic_write(self.memory_file, memory_json(memory, self.after_group))
        self.memory = memory

    def _first_seen(self, counted: Sequence[FleetEntry], commit: str, now: datetime) -> dict[str, datetime]:
        """Per agent counted now, when this agent first saw it count for `commit`; the others are forgotten,
        so an agent that stops showing the commit applied starts its soak again when it shows it anew."""
        kept = {(e.agent, commit): self._since.get((e.agent, commit), now) for e in counted}
        self._since = kept
        return {agent: moment for (agent, _), moment in kept.items()}


def own_heartbeat(settings: Settings) -> float:
    """The heartbeat period this agent expects of others: what it writes its own status at."""
    return max(settings.status_heartbeat, settings.interval + settings.jitter)


def memory_json(memory: GateMemory, group: str) -> bytes:
    """``gate.json``: the group, its members, and per commit the agents seen fail it (oldest first)."""
    return json.dumps({"group": group, "members": sorted(memory.members),
                       "failed": {commit: sorted(agents) for commit, agents in memory.failed.items()}},
                      indent=1).encode() + b"\n"


def memory_from_json(data: Any, group: str) -> GateMemory:
    """The memory in a loaded ``gate.json``; an empty one when it was another group's. ValueError when it
    is not what `memory_json` writes."""
    if not isinstance(data, dict) or not isinstance(data.get("members"), list) \
            or not isinstance(data.get("failed"), dict):
        raise ValueError("expected an object with members (a list) and failed (an object)")
    if data.get("group") != group:
        return GateMemory()
    members = data["members"]
    failed = data["failed"]
    lists = [members, *failed.values()]
    if not all(isinstance(names, list) and all(isinstance(n, str) for n in names) for names in lists):
        raise ValueError("members and each commit's failures must be lists of agent names")
    return GateMemory(frozenset(members), {str(c): frozenset(agents) for c, agents in failed.items()})


def load_memory(path: Path, group: str) -> GateMemory:
    """What the gate remembered before this start; `StateError` naming the file when it cannot be read
    (starting with nothing remembered would let a failed commit through)."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return GateMemory()
    except OSError as exc:
        raise StateError(f"{path}: cannot read the gate's memory: {exc.strerror or exc}") from None
    try:
        memory = memory_from_json(json.loads(raw), group)
    except ValueError as exc:
        raise StateError(f"{path}: the gate's memory is unreadable ({exc}); fix it, or delete it to start "
                         "the gate with nothing remembered (a commit a canary failed may then go "
                         "through)") from None
    if memory.members or memory.failed:
        logger.info("gate: remembers {} member(s) of group {} and failures of {} commit(s)",
                    len(memory.members), group, len(memory.failed))
    return memory


__all__ = ["GATE_FILE", "FleetGate", "load_memory", "memory_from_json", "memory_json", "own_heartbeat"]
