"""One sync's own values: what a sync finds and starts while it runs, dropped when it ends.

The agent (`gitsync.agent.sync.Agent`) holds its dependencies and, in `gitsync.agent.memory`, what one
sync leaves to the next; a `SyncRun` is everything else: the triggers, where its time goes, the commits
its repos fetched at once (or could not: refused at verify), the gateways' GETs it started before the
render, and the repos whose commits it refused.
"""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field

from gitsync.agent.outcomes import Trigger
from gitsync.push.admin_api import LiveConfig
from gitsync.source.transport import SourceError
from gitsync.timing import Phases


@dataclass
class SyncRun:
    """The values of one sync (see the module); made by `Agent.sync_once` (and `Agent.finish`)."""

    triggers: frozenset[Trigger]
    started: float = 0.0  # the agent's clock's monotonic time when the sync began
    phases: Phases = field(default_factory=Phases)  # also the pushes' that outlive the sync
    fetched: dict[str | None, str] = field(default_factory=dict)  # repo → the tip it fetched at once
    # repo → the tip its fetch at once refused at verify (over the fetch limits, say), and why: the
    # render refuses that commit without fetching it again
    unfetchable: dict[str | None, tuple[str, SourceError]] = field(default_factory=dict)
    lives: dict[str, Future[LiveConfig]] = field(default_factory=dict)  # url → a GET started early
    refused: dict[str | None, str] = field(default_factory=dict)  # repo → its commit refused this sync
    before: dict[str | None, str | None] = field(default_factory=dict)  # repo → its last good at the start

    def take_lives(self) -> dict[str, Future[LiveConfig]]:
        """The GETs started early, once: a GET no push took is stale by the next decision."""
        lives, self.lives = self.lives, {}
        return lives


__all__ = ["SyncRun"]
