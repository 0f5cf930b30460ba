"""The words of a sync's decision (plain data): what the agent observed of the remote and of each
gateway, whether a gateway holds a commit, and what to do (`Decision`). Made by `gitsync.agent.decide`."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

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


__all__ = ["Decision", "GatewayView", "Holding", "Probe", "RemoteView", "holding"]
