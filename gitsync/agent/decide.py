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

from gitsync.agent.gate import GateVerdict
from gitsync.agent.outcomes import Stage, SyncResult
from gitsync.agent.state import GatewayState


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
class Canary:
    """rollout = "canary": `url` takes a new commit first; the others `soak` seconds after it did."""

    url: str
    soak: float
    now: float  # time.time() of this decision


@dataclass(frozen=True)
class Decision:
    """What to do this sync; `result` set means there is nothing to do, and this is the outcome."""

    target: str | None
    new: bool = False  # the target was never applied: fetch, verify and render it from scratch
    push: tuple[str, ...] = ()  # gateways to give the target
    drifted: tuple[str, ...] = ()
    result: SyncResult | None = None
    stage: Stage | None = None
    problems: tuple[str, ...] = ()
    why: str = ""
    keep: tuple[str, ...] = ()  # gateways to give the last good commit back while the canary soaks
    canary: str | None = None  # set while a new commit runs on the canary alone
    wake_at: float | None = None  # time.time() at which the canary's soak ends

    @property
    def advance(self) -> bool:
        """Whether a gateway that takes the target makes it the last good commit (not on a canary alone)."""
        return self.canary is None


def holding(view: GatewayView, target: str, unmanaged: Iterable[str]) -> Holding:
    pushed = view.pushed
    if pushed is None or pushed.commit != target or pushed.unmanaged != sorted(unmanaged):
        return Holding.BEHIND
    if view.probe is Probe.ANSWERED and pushed.digest:
        return Holding.HOLDS if view.digest == pushed.digest else Holding.DRIFTED
    return Holding.UNKNOWN


def decide(remote: RemoteView, last_good: str | None, bad: Mapping[str, str], views: Iterable[GatewayView], *,
           unmanaged: Iterable[str] = (), report_drift: bool = False,
           canary: Canary | None = None, gate: GateVerdict | None = None) -> Decision:
    """The decision of one sync from what was observed (see the module's docstring).

    `gate`: for an agent whose group follows another, whether the fleet lets the remote's new
    commit through yet (`gitsync.agent.gate.group_gate`); until it does, the gateways keep (or get back)
    the last good commit."""
    unmanaged = sorted(unmanaged)
    if remote.error is not None:
        target, new = last_good, False
        idle = Decision(last_good, result=SyncResult.FETCH_FAILED, stage=Stage.FETCH,
                        problems=(remote.error,), why=f"git remote: {remote.error}")
    elif remote.sha in bad:
        target, new = last_good, False
        idle = Decision(remote.sha, result=SyncResult.SKIPPED, stage=Stage.KNOWN_BAD,
                        problems=(bad[remote.sha],), why=f"the tip {remote.sha[:7]} was refused")
    elif gate is not None and not gate.allowed and remote.sha != last_good:
        target, new = last_good, False
        wake = gate.earliest.timestamp() if gate.earliest is not None else None
        idle = Decision(remote.sha, result=SyncResult.WAITING, problems=(gate.why,), wake_at=wake,
                        why=f"{remote.sha[:7]} waits for the group that goes first: {gate.why}")
    else:
        target, new = remote.sha, remote.sha != last_good
        idle = Decision(target, result=SyncResult.NOOP, why="every gateway holds the target")
    if target is None:
        return idle
    views = list(views)
    if canary is not None and new and len(views) > 1:
        first = _canary_phase(target, last_good, views, unmanaged, canary)
        if first is not None:
            return first
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
    return Decision(target, new, tuple(push), tuple(drifted), problems=carried, why=why, wake_at=idle.wake_at)


def _canary_phase(target: str, last_good: str | None, views: list[GatewayView], unmanaged: list[str],
                  canary: Canary) -> Decision | None:
    """While a new commit has not run on the canary for `soak` seconds: the canary gets it, the others
    keep (or get back) the last good commit. None once the soak is over."""
    view = next((v for v in views if v.url == canary.url), None)
    if view is None:
        return None
    took = view.pushed is not None and view.pushed.commit == target
    since = view.pushed.since if took and view.pushed is not None else None
    if since is not None and canary.now - since >= canary.soak:
        return None
    ready = [v for v in views if not v.busy and not v.backing_off]
    push = tuple(v.url for v in ready
                 if v.url == canary.url and holding(v, target, unmanaged) is not Holding.HOLDS)
    keep = tuple(v.url for v in ready if v.url != canary.url and last_good is not None
                 and holding(v, last_good, unmanaged) is not Holding.HOLDS)
    wake_at = since + canary.soak if since is not None else None
    why = f"canary {canary.url} runs {target[:7]} first"
    if push or keep:
        return Decision(target, True, push, keep=keep, canary=canary.url, wake_at=wake_at, why=why)
    if took:
        return Decision(target, True, canary=canary.url, wake_at=wake_at, result=SyncResult.SOAKING,
                        why=why + f"; the others follow after {canary.soak:g}s")
    return Decision(target, True, canary=canary.url, result=SyncResult.DEFERRED, stage=Stage.PUSH,
                    problems=(f"{canary.url}: the canary is busy or backing off",), why=why)


__all__ = ["Canary", "Decision", "GatewayView", "Holding", "Probe", "RemoteView", "decide", "holding"]
