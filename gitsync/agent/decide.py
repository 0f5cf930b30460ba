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

from gitsync.agent.canary import Canary, canary_phase
from gitsync.agent.decision import Decision, GatewayView, Holding, Probe, RemoteView, holding
from gitsync.agent.gate import GateVerdict
from gitsync.agent.outcomes import Stage, SyncResult


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
        first = canary_phase(target, last_good, views, unmanaged, canary)
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


__all__ = ["Decision", "GatewayView", "Holding", "Probe", "RemoteView", "decide", "holding"]
