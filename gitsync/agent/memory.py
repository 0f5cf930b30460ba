"""What the agent remembers, apart from what it uses: `AgentMemory` holds every value a sync reads
from an earlier one (the state it saves, the commits it rendered, the pushes still running, each
gateway as our last push left it), so `Agent` itself holds only its dependencies.
"""

from __future__ import annotations

import threading
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from gitsync.agent.choice import SourceTip
from gitsync.agent.outcomes import SyncOutcome
from gitsync.agent.state import AgentState
from gitsync.agent.view import HISTORY, GatewayPush, RenderedCommit, SourceCommit, SyncRecord
from gitsync.push.results import GatewayResult, Known


class RunningPush(NamedTuple):
    """A push an earlier sync left running on its gateway's worker."""

    commit: str
    drifted: bool  # it heals a gateway found drifted
    advance: bool  # it makes its commit the last good one when it is accepted
    future: Future[GatewayResult]


@dataclass
class RepoMemory:
    """What the agent remembers of one of its repos between syncs (its saved part is its
    `gitsync.agent.state.RepoState`): its tip at the last check, the last tip its remote told, and its
    commits as rendered alone."""

    tip: SourceTip
    known_tip: str | None = None  # the tip at the last check that answered
    rendered: dict[str, SourceCommit] = field(default_factory=dict)  # its last good + the latest others

    def keep(self, sha: str, commit: SourceCommit, last_good: str | None) -> None:
        """Remember `commit`, and of the others its last good one and the two most recent."""
        self.rendered.pop(sha, None)
        self.rendered[sha] = commit
        others = [k for k in self.rendered if k != last_good]
        for old in others[:-2]:
            del self.rendered[old]


@dataclass
class AgentMemory:
    """Everything a sync reads from earlier ones. Only the sync worker changes it, but for
    `state.gateways`, which the drift watch and the web view read too (under `lock`)."""

    state: AgentState  # saved in state.json: last good commit, each gateway's commit, bad commits
    #: url → kind → the ids gitsync pushed there (pushed.json), and the modifiedIndex values a plan
    #: cannot derive (indexes.json); `owned_changed`: not saved since they changed.
    owned: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    odd: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    owned_changed: bool = False
    rendered: dict[str, RenderedCommit] = field(default_factory=dict)  # last good + the latest others
    running: dict[str, RunningPush] = field(default_factory=dict)  # url → a push left running
    known: dict[str, Known] = field(default_factory=dict)  # url → the gateway as our last push left it
    digests: dict[str, str | None] = field(default_factory=dict)  # url → its HEAD's digest this sync
    saved: tuple[Any, ...] | None = None  # what the last saved sync ended as (a repeat is not saved)
    tip: str | None = None  # the composition of the repos' tips at the last check that made one
    last_outcome: SyncOutcome | None = None
    history: deque[SyncRecord] = field(default_factory=lambda: deque(maxlen=HISTORY))
    pushes: dict[str, GatewayPush] = field(default_factory=dict)  # url → its last push, for the view
    repos: dict[str | None, RepoMemory] = field(default_factory=dict)  # each repo's (by its name)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)


__all__ = ["AgentMemory", "RenderedCommit", "RepoMemory", "RunningPush"]
