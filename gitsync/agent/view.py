"""What the agent shows of itself to readers on other threads (the web view): one frozen `AgentView`,
made by the sync worker after each sync and never changed after, so a reader needs no lock.

Plain data only: the agent's own bookkeeping (`gitsync.agent.memory`) stays behind it.
"""

from __future__ import annotations

import dataclasses
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from gitsync.agent.outcomes import SyncOutcome
from gitsync.log import redact
from gitsync.push.plan import Desired
from gitsync.push.results import GatewayResult
from gitsync.render.compose import PartFacts
from gitsync.render.result import Rendered

HISTORY = 50  # syncs the agent remembers for the web view
PROBLEMS_KEPT = 20  # problems a sync record keeps (its count says how many there were)


@dataclass(frozen=True)
class GatewayPush:
    """A gateway's last push, as the web view shows it."""

    time: float
    duration: float
    status: str
    counts: Mapping[str, int]
    error: str | None = None
    checks: Mapping[str, Any] | None = None  # {passed: N, failed: [...]} when the repo declares checks
    rolled_back: bool = False
    two_step: bool = False

    @classmethod
    def of(cls, result: GatewayResult, now: float) -> GatewayPush:
        return cls(now, result.duration, str(result.status), dict(result.counts),
                   redact(result.error) if result.error else None,
                   result.checks.to_dict() if result.checks is not None else None,
                   result.rollback is not None and result.rollback.ok, result.two_step)


@dataclass(frozen=True)
class GatewayRow:
    """One gateway: what this agent last gave it, and its last push since the agent started."""

    url: str
    commit: str | None = None
    digest: str | None = None
    versions: Mapping[str, int | float] = dataclasses.field(default_factory=dict)
    since: float | None = None
    unmanaged: tuple[str, ...] = ()
    last_sync: GatewayPush | None = None


@dataclass(frozen=True)
class GatewayOutcome:
    """What one sync did to one gateway, in a `SyncRecord`."""

    url: str
    status: str
    error: str | None = None


@dataclass(frozen=True)
class SyncRecord:
    """One sync as the web view lists it (problems redacted, at most `PROBLEMS_KEPT` of them); `count`
    syncs that ended alike in a row, from `first_time` to `time`."""

    time: float
    result: str
    reason: str = ""
    commit: str | None = None
    subject: str = ""
    stage: str | None = None
    problems: tuple[str, ...] = ()
    problem_count: int = 0
    duration: float = 0.0
    drifted: tuple[str, ...] = ()
    gateways: tuple[GatewayOutcome, ...] = ()
    first_time: float | None = None
    count: int = 1

    @classmethod
    def of(cls, outcome: SyncOutcome, now: float) -> SyncRecord:
        return cls(now, str(outcome.result), outcome.reason, outcome.commit, outcome.subject,
                   str(outcome.stage) if outcome.stage else None,
                   tuple(redact(p) for p in outcome.problems[:PROBLEMS_KEPT]), len(outcome.problems),
                   outcome.duration, tuple(outcome.drifted),
                   tuple(GatewayOutcome(r.url, str(r.status), redact(r.error) if r.error else None)
                         for r in outcome.gateways), now)

    def same_as(self, other: SyncRecord) -> bool:
        """Two syncs that pushed nothing and ended alike (a no-op poll, the same refused tip again)."""
        return not self.gateways and not other.gateways and \
            (self.result, self.commit, self.stage, self.problems) == \
            (other.result, other.commit, other.stage, other.problems)


def remember(history: deque[SyncRecord], record: SyncRecord) -> None:
    """Append `record`; a sync like the one before (`SyncRecord.same_as`) is counted on that one
    instead, so polls do not push out what happened."""
    last = history[-1] if history else None
    if last is not None and last.same_as(record):
        history[-1] = dataclasses.replace(last, count=last.count + 1, time=record.time,
                                          duration=record.duration)
        return
    history.append(record)


class RenderedCommit(NamedTuple):
    """A commit as the agent keeps it in memory: its payload, subject, what its author allows, and its
    files (the web view shows an item as written; the source map holds the same bytes)."""

    rendered: Rendered
    subject: str
    allowed_delete: frozenset[str]  # kinds named by Gitsync-Allow-Delete trailers
    files: Mapping[str, bytes]
    desired: Desired  # the payload prepared for plans, shared by every gateway's push


class SourceCommit(NamedTuple):
    """One commit of one source of a ``[[sources]]`` agent, rendered alone (`gitsync.render.compose`):
    its render, subject, the kinds its author allows deleting, its files, and what composing needs."""

    rendered: Rendered
    subject: str
    allowed_delete: frozenset[str]
    files: Mapping[str, bytes]
    facts: PartFacts


@dataclass(frozen=True)
class AgentView:
    """What the agent knows, for the web view. `live_commit`: the last good commit as rendered, when
    the agent holds it in memory (None after a restart until a sync needs it)."""

    agent: str = ""
    repo: str = ""
    ref: str = ""
    paths: tuple[str, ...] = ()
    tip: str | None = None
    tip_refused: str | None = None  # why the tip was refused, when it was
    last_good: str | None = None
    last_good_subject: str = ""
    unmanaged: tuple[str, ...] = ()
    gateways: tuple[GatewayRow, ...] = ()
    history: tuple[SyncRecord, ...] = ()  # newest first
    time: float = dataclasses.field(default_factory=time.time)
    live_commit: RenderedCommit | None = dataclasses.field(default=None, repr=False, compare=False)
    #: With ``[[sources]]``: each source's commit in the last good composition (its items' commit).
    sources: Mapping[str, str] = dataclasses.field(default_factory=dict)


class AgentReader(Protocol):
    """What a reader on another thread (the web view) may ask of a running agent: the snapshot it
    publishes after each sync, and a commit of its (the last good one) rendered again apart from it,
    with a speed layer of its own and nothing of the agent's changed. `render_apart` raises as a render
    does (`gitsync.problems.ProblemsError`, `gitsync.source.transport.SourceError`)."""

    def view(self) -> AgentView: ...

    def render_apart(self, sha: str) -> tuple[Rendered, Mapping[str, bytes]]: ...


__all__ = ["HISTORY", "AgentReader", "AgentView", "GatewayOutcome", "GatewayPush", "GatewayRow",
           "RenderedCommit", "SourceCommit", "SyncRecord", "remember"]
