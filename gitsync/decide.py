"""The decision of a sync, as a pure function: which commit, to which gateways, and why.

The agent first observes (the remote's tip, a HEAD of each gateway it pushed before, which gateways
are busy or backing off), then calls `decide`, then acts on the `Decision`. Keeping the decision
apart from the I/O makes every rule here testable with plain values:

- the *target* is the remote's commit when it is new and not known bad; else the last good commit
  (a git remote that is down, or a refused tip, never stops gateways from being healed);
- a gateway is pushed the target unless it provably holds it: a HEAD whose digest is the one
  recorded for our push of that commit, under the same `unmanaged` policy. One that cannot be told
  by HEAD (3.13, no answer) is pushed too: the push reads it and sends nothing when it holds the
  target already;
- a gateway that is busy with an earlier push, or backing off after failures, is left alone now;
- with ``drift = "report"``, a gateway that lost the target is reported, not pushed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum

from gitsync.outcomes import Stage, SyncResult
from gitsync.state import GatewayState


class Probe(StrEnum):
    """What asking a gateway's HEAD gave, this sync."""

    ANSWERED = "answered"  # with the digest it carries (None: an emptied, restarted gateway)
    NO_HEAD = "no head"  # APISIX 3.13: no HEAD, no digest
    UNREACHABLE = "unreachable"  # no answer
    NOT_ASKED = "not asked"  # nothing of ours to compare with, or busy, or backing off


class Holding(StrEnum):
    """Whether a gateway holds the target commit, as far as the observations tell."""

    HOLDS = "holds"
    BEHIND = "behind"  # never given the target, or under another `unmanaged` policy
    DRIFTED = "drifted"  # given it, and its digest says it lost it (a restart, an out-of-band write)
    UNKNOWN = "unknown"  # given it, and no digest to tell: the push compares the content


@dataclass(frozen=True)
class RemoteView:
    """The remote's tip for the ref, or why it is not known this sync."""

    sha: str | None = None
    error: str | None = None


@dataclass(frozen=True)
class GatewayView:
    """One gateway as the agent sees it at decision time."""

    url: str
    pushed: GatewayState | None = None  # what this agent last gave it
    probe: Probe = Probe.NOT_ASKED
    digest: str | None = None  # the digest its HEAD answered with
    busy: bool = False  # an earlier push to it is still running
    backing_off: bool = False  # failed lately: left alone until its backoff ends


@dataclass(frozen=True)
class Decision:
    """What to do this sync; `result` set means there is nothing to do, and this is the outcome."""

    target: str | None
    new: bool = False  # the target was never applied: fetch, verify and render it from scratch
    push: tuple[str, ...] = ()
    drifted: tuple[str, ...] = ()
    result: SyncResult | None = None
    stage: Stage | None = None
    problems: tuple[str, ...] = ()
    why: str = ""


def holding(view: GatewayView, target: str, unmanaged: Iterable[str]) -> Holding:
    pushed = view.pushed
    if pushed is None or pushed.commit != target or pushed.unmanaged != sorted(unmanaged):
        return Holding.BEHIND
    if view.probe is Probe.ANSWERED and pushed.digest:
        return Holding.HOLDS if view.digest == pushed.digest else Holding.DRIFTED
    return Holding.UNKNOWN


def decide(remote: RemoteView, last_good: str | None, bad: Mapping[str, str], views: Iterable[GatewayView], *,
           unmanaged: Iterable[str] = (), report_drift: bool = False) -> Decision:
    """The decision of one sync from what was observed (see the module's docstring)."""
    unmanaged = sorted(unmanaged)
    if remote.error is not None:
        target, new = last_good, False
        idle = Decision(last_good, result=SyncResult.FETCH_FAILED, stage=Stage.FETCH,
                        problems=(remote.error,), why=f"git remote: {remote.error}")
    elif remote.sha in bad:
        target, new = last_good, False
        idle = Decision(remote.sha, result=SyncResult.SKIPPED, stage=Stage.KNOWN_BAD,
                        problems=(bad[remote.sha],), why=f"the tip {remote.sha[:7]} was refused")
    else:
        target, new = remote.sha, remote.sha != last_good
        idle = Decision(target, result=SyncResult.NOOP, why="every gateway holds the target")
    if target is None:
        return idle
    views = list(views)
    states = {v.url: holding(v, target, unmanaged) for v in views if not v.busy and not v.backing_off}
    push = [url for url, state in states.items() if state is not Holding.HOLDS]
    drifted = [url for url, state in states.items() if state is Holding.DRIFTED]
    if report_drift and drifted:
        push = [url for url in push if url not in drifted]
        if not push:
            return Decision(target, drifted=tuple(drifted), result=SyncResult.DRIFT_REPORTED,
                            stage=Stage.DRIFT, why="drift = report",
                            problems=tuple(f"{url}: drifted from {target[:7]}" for url in drifted))
    if not push:
        waiting = [v for v in views if (v.busy or v.backing_off) and holding(v, target, unmanaged)
                   is not Holding.HOLDS]
        if waiting and idle.result is SyncResult.NOOP:
            problems = tuple(f"{v.url}: {'busy with an earlier push' if v.busy else 'backing off'}"
                             for v in waiting)
            return Decision(target, new, result=SyncResult.DEFERRED, stage=Stage.PUSH, problems=problems,
                            why="gateways busy or backing off")
        return idle
    why = "a new commit" if new else "gateways that do not hold the last good commit"
    carried = idle.problems if idle.result is not SyncResult.NOOP else ()
    return Decision(target, new, tuple(push), tuple(drifted), problems=carried, why=why)


__all__ = ["Decision", "GatewayView", "Holding", "Probe", "RemoteView", "decide", "holding"]
