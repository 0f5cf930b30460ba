"""rollout = "canary": a new commit goes to one gateway first, the others after it ran there for the
soak (pure: the phase of one decision, from plain values)."""

from __future__ import annotations

from dataclasses import dataclass

from gitsync.agent.decision import Decision, GatewayView, Holding, holding
from gitsync.agent.outcomes import Stage, SyncResult


@dataclass(frozen=True)
class Canary:
    """rollout = "canary": `url` takes a new commit first; the others `soak` seconds after it did."""

    url: str
    soak: float
    now: float  # time.time() of this decision


def canary_phase(target: str, last_good: str | None, views: list[GatewayView], unmanaged: list[str],
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


__all__ = ["Canary", "canary_phase"]
