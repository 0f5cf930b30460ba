"""What a sync can end in: the vocabulary shared by the agent, its state, metrics, logs and write-back."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum

from gitsync.display import short
from gitsync.push.results import GatewayResult


class Trigger(StrEnum):
    """What sets a sync off. The daemon coalesces the triggers that arrive during a sync into the next."""

    START = "start"
    POLL = "poll"  # the periodic poll
    WEBHOOK = "webhook"  # a git host said the repo changed
    DRIFT = "drift"  # the drift watch found a gateway that may not hold the last good commit
    RELOAD = "reload"  # SIGHUP: new settings
    SOAK = "soak"  # a canary's soak, or a group's, ends
    GATEWAY_DONE = "gateway-done"  # a push an earlier sync left running ended
    CLI = "cli"  # a command: sync --once, the bench
    STOP = "stop"  # shutdown: what pushes left running made of their commits


def describe(triggers: Iterable[Trigger]) -> str:
    """``poll,webhook``: the triggers of a sync, in their declared order, as logs and records show them."""
    chosen = set(triggers)
    return ",".join(str(t) for t in Trigger if t in chosen) or "cli"


class SyncResult(StrEnum):
    NOOP = "noop"  # every gateway already held the target
    APPLIED = "applied"  # a new commit is live on every gateway that answered
    HEALED = "healed"  # the last good commit was given back to gateways that lost it or were behind
    FAILED = "failed"  # a commit was refused, or a gateway could not be brought to the target
    SKIPPED = "skipped"  # the remote's tip is a commit already refused; the last good one stays live
    FETCH_FAILED = "fetch_failed"  # the git remote could not be asked; the gateways were fine
    DRIFT_REPORTED = "drift_reported"  # drift = "report": a gateway drifted and was left as it is
    DEFERRED = "deferred"  # a target to apply, but every gateway that needs it is busy or backing off
    CANARY = "canary"  # a new commit went to the canary gateway alone (rollout = canary)
    SOAKING = "soaking"  # the canary runs the new commit; the other gateways follow when the soak ends
    WAITING = "waiting"  # after_group: the commit waits for the group that goes first (gitsync.agent.gate)

    @property
    def ok(self) -> bool:
        """Every gateway holds the remote's commit, or is on its way there through a canary (a
        known-bad tip is not ok)."""
        return self in (SyncResult.NOOP, SyncResult.APPLIED, SyncResult.HEALED, SyncResult.CANARY,
                        SyncResult.SOAKING, SyncResult.WAITING)


class Stage(StrEnum):
    """Where a sync stopped, or where a commit was refused."""

    FETCH = "fetch"
    VERIFY = "verify"
    RENDER = "render"
    VALIDATE = "validate"
    OWNERSHIP = "ownership"  # [[sources]]: a source declared an item it does not own
    GUARD = "guard"  # the deletion guard refused the commit
    PUSH = "push"
    HEALTH = "health"  # a health check failed after the push
    PARTIAL = "partial"  # applied without the items partial apply left out (a note lists them)
    DRIFT = "drift"
    KNOWN_BAD = "known bad"

    @property
    def refuses_commit(self) -> bool:
        """A failure at this stage is the commit's own: it is marked bad and not retried."""
        return self in (Stage.VERIFY, Stage.RENDER, Stage.VALIDATE, Stage.OWNERSHIP, Stage.GUARD, Stage.PUSH,
                        Stage.HEALTH)


@dataclass(frozen=True)
class PhaseTimes:
    """Where one sync's time went (`gitsync.timing.Phases` at its end): seconds per phase, and the
    seconds each gateway kept it waiting."""

    seconds: Mapping[str, float] = field(default_factory=dict)  # in the order of `gitsync.timing.PHASES`
    waited: Mapping[str, float] = field(default_factory=dict)  # gateway URL → its wait

    def snapshot(self) -> Mapping[str, float]:
        return self.seconds

    def agent_time(self, wall: float) -> float:
        """The sync's wall time less the longest any gateway kept it waiting (gateways run in parallel)."""
        return max(0.0, wall - max(self.waited.values(), default=0.0))

    def describe(self, wall: float) -> str:
        """``check 2.1 ms, render 40 ms, …; gitsync's own 70 ms of 200 ms``."""
        parts = ", ".join(f"{phase} {seconds * 1000:.1f} ms" for phase, seconds in self.seconds.items())
        return f"{parts}; gitsync's own {self.agent_time(wall) * 1000:.1f} ms of {wall * 1000:.1f} ms"


@dataclass(frozen=True)
class SyncOutcome:
    """What one sync did: the data behind logs, state, metrics, status commits and notes. Built once,
    never changed (a later step makes a new one, `dataclasses.replace`); its sequences are tuples."""

    triggers: frozenset[Trigger]
    result: SyncResult
    commit: str | None = None
    subject: str = ""
    stage: Stage | None = None
    problems: tuple[str, ...] = ()
    gateways: tuple[GatewayResult, ...] = ()
    drifted: tuple[str, ...] = ()  # gateways found to have lost the target
    wake_at: float | None = None  # time.time() at which a sync should run again (the canary's soak)
    duration: float = 0.0
    phases: PhaseTimes = field(default_factory=PhaseTimes, repr=False)  # where the time went
    #: With several repos: each repo's commit this sync refused (``source b 504ae51 at validate``), and
    #: what the gateways hold beside the refusal (``applied composition c6c4a2c: a f708738 subject``, or
    #: ``nothing new went live (the gateways stay on 8372281)``), so that the verdict names both.
    refused_repos: tuple[str, ...] = ()
    went_live: str = ""

    def verdict(self) -> str:
        """The sync's verdict for people: ``failed 2b999e7``; with several repos, what went live and what
        was refused (``applied composition c6c4a2c: a f708738 a: moved; refused: source b 504ae51 at
        validate``)."""
        if not self.refused_repos:
            return f"{self.result} {short(self.commit)}"
        return f"{self.went_live or 'nothing went live'}; refused: {', '.join(self.refused_repos)}"

    def __post_init__(self) -> None:
        for name in ("problems", "gateways", "drifted"):
            value = getattr(self, name)
            if not isinstance(value, tuple):
                object.__setattr__(self, name, tuple(value))

    @property
    def ok(self) -> bool:
        return self.result.ok

    @property
    def reason(self) -> str:
        """The triggers as text (`describe`)."""
        return describe(self.triggers)


def healed_after(refused: SyncOutcome, healed: SyncOutcome) -> SyncOutcome:
    """A refused commit's outcome with what the second decision of the sync (for the last good commit)
    did to the gateways."""
    return replace(refused, gateways=(*refused.gateways, *healed.gateways),
                   drifted=(*refused.drifted, *healed.drifted))


def with_late(outcome: SyncOutcome, late: Iterable[SyncOutcome]) -> SyncOutcome:
    """`outcome` with what pushes left running by earlier syncs did, for those that ended: their
    gateways first, and their result when this sync itself had nothing else to report."""
    for ended in late:
        outcome = replace(outcome, gateways=(*ended.gateways, *outcome.gateways))
        idle = outcome.result in (SyncResult.NOOP, SyncResult.DEFERRED)
        if idle and ended.result is not SyncResult.NOOP:
            outcome = replace(outcome, result=ended.result, commit=ended.commit, stage=ended.stage,
                              subject=ended.subject, problems=ended.problems)
    return outcome


__all__ = ["PhaseTimes", "Stage", "SyncOutcome", "SyncResult", "Trigger", "describe", "healed_after",
           "with_late"]
