"""Who hears what the agent does, without the agent knowing who that is.

The agent tells its observer when it starts on a new commit and how each sync ended; what the
observer makes of it (commit statuses on the forge, notifications: `gitsync.feedback`) is its own
business, in a layer above the agent. The calls come from the sync worker and must return at once:
an observer that talks to the network queues the work for a thread of its own.
"""

from __future__ import annotations

from typing import Protocol

from gitsync.agent.outcomes import SyncOutcome
from gitsync.agent.state import AgentState


class SyncObserver(Protocol):
    def started(self, commit: str) -> None:
        """The agent starts on the new commit `commit` (before rendering it)."""

    def ended(self, outcome: SyncOutcome, state: AgentState) -> None:
        """A sync ended in `outcome`; `state` is what the agent remembers after it (the bad commits)."""

    def close(self) -> None:
        """The agent stops: send what is still to be sent, then let go."""


class NoObserver:
    """The observer of an agent nobody listens to."""

    def started(self, commit: str) -> None:
        pass

    def ended(self, outcome: SyncOutcome, state: AgentState) -> None:
        pass

    def close(self) -> None:
        pass


__all__ = ["NoObserver", "SyncObserver"]
