"""The decision of a sync (`gitsync.agent.decide.decide`), table-driven: plain values in, a `Decision` out."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from gitsync.agent.decide import decide
from gitsync.agent.decision import GatewayView, Holding, Probe, RemoteView, holding
from gitsync.agent.outcomes import Stage, SyncResult
from gitsync.agent.state import GatewayState

GOOD, NEW, BAD = "a" * 40, "b" * 40, "c" * 40
A, B = "http://a:9180", "http://b:9180"


def given(commit: str = GOOD, digest: str = "d-good", unmanaged: tuple[str, ...] = ()) -> GatewayState:
    return GatewayState(commit, digest, {"routes_conf_version": 3}, sorted(unmanaged))


def answered(url: str, pushed: GatewayState | None, digest: str | None, **kw: bool) -> GatewayView:
    return GatewayView(url, pushed, Probe.ANSWERED, digest, **kw)


HOLDS_GOOD = answered(A, given(), "d-good")


@dataclass
class Case:
    name: str
    remote: RemoteView
    views: list[GatewayView]
    target: str | None
    push: tuple[str, ...] = ()
    result: SyncResult | None = None
    new: bool = False
    drifted: tuple[str, ...] = ()
    stage: Stage | None = None
    report_drift: bool = False
    unmanaged: tuple[str, ...] = ()
    last_good: str | None = GOOD
    bad: dict[str, str] = field(default_factory=lambda: {BAD: "render: a.yaml:1:1: bad"})


CASES = [
    Case("nothing new, every gateway holds the last good commit", RemoteView(GOOD), [HOLDS_GOOD,
         answered(B, given(), "d-good")], GOOD, result=SyncResult.NOOP),
    Case("a new commit goes to every gateway", RemoteView(NEW),
         [HOLDS_GOOD, answered(B, given(), "d-good")], NEW, push=(A, B), new=True),
    Case("a restarted gateway (HEAD without digest) is healed", RemoteView(GOOD),
         [HOLDS_GOOD, answered(B, given(), None)], GOOD, push=(B,), drifted=(B,)),
    Case("an out-of-band write (another digest) is healed", RemoteView(GOOD),
         [answered(A, given(), "someone-else")], GOOD, push=(A,), drifted=(A,)),
    Case("drift = report leaves a drifted gateway alone", RemoteView(GOOD),
         [answered(A, given(), None)], GOOD, result=SyncResult.DRIFT_REPORTED, drifted=(A,),
         stage=Stage.DRIFT, report_drift=True),
    Case("drift = report still brings a gateway that is behind", RemoteView(NEW),
         [answered(A, given(), None)], NEW, push=(A,), new=True, report_drift=True),
    Case("a 3.13 gateway (no HEAD) is pushed: the push compares the content", RemoteView(GOOD),
         [GatewayView(A, given(), Probe.NO_HEAD)], GOOD, push=(A,)),
    Case("a gateway that did not answer the HEAD is pushed (the push retries or fails)", RemoteView(GOOD),
         [GatewayView(A, given(), Probe.UNREACHABLE)], GOOD, push=(A,)),
    Case("a gateway never pushed is behind", RemoteView(GOOD), [GatewayView(A)], GOOD, push=(A,)),
    Case("another unmanaged policy is a reason to push the same commit", RemoteView(GOOD),
         [answered(A, given(unmanaged=("secrets",)), "d-good")], GOOD, push=(A,)),
    Case("the same unmanaged policy: nothing to do", RemoteView(GOOD),
         [answered(A, given(unmanaged=("secrets",)), "d-good")], GOOD, result=SyncResult.NOOP,
         unmanaged=("secrets",)),
    Case("a refused tip is skipped while every gateway holds the last good commit", RemoteView(BAD),
         [HOLDS_GOOD], BAD, result=SyncResult.SKIPPED, stage=Stage.KNOWN_BAD),
    Case("a refused tip: a restarted gateway still gets the last good commit", RemoteView(BAD),
         [answered(A, given(), None)], GOOD, push=(A,), drifted=(A,)),
    Case("the remote is down: gateways holding the last good commit are fine", RemoteView(error="down"),
         [HOLDS_GOOD], GOOD, result=SyncResult.FETCH_FAILED, stage=Stage.FETCH),
    Case("the remote is down: a restarted gateway is healed from the mirror", RemoteView(error="down"),
         [answered(A, given(), None)], GOOD, push=(A,), drifted=(A,)),
    Case("the remote is down and nothing was ever applied", RemoteView(error="down"), [GatewayView(A)], None,
         result=SyncResult.FETCH_FAILED, stage=Stage.FETCH, last_good=None),
    Case("a busy gateway is left to its running push", RemoteView(NEW),
         [answered(A, given(), "d-good", busy=True), answered(B, given(), "d-good")], NEW, push=(B,),
         new=True),
    Case("a gateway backing off is left alone", RemoteView(NEW),
         [answered(A, given(), "d-good", backing_off=True), answered(B, given(), "d-good")], NEW, push=(B,),
         new=True),
    Case("every gateway that needs the commit is busy: deferred, not a no-op", RemoteView(NEW),
         [answered(A, given(), "d-good", busy=True)], NEW, result=SyncResult.DEFERRED, new=True,
         stage=Stage.PUSH),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_decide(case: Case) -> None:
    decision = decide(case.remote, case.last_good, case.bad, case.views, unmanaged=case.unmanaged,
                      report_drift=case.report_drift)
    got = (decision.target, decision.push, decision.result, decision.new, decision.drifted, decision.stage)
    assert got == (case.target, case.push, case.result, case.new, case.drifted, case.stage)
    if case.result is None:
        assert decision.push, "a decision to act always names the gateways"


def test_nothing_applied_yet_and_a_first_commit() -> None:
    decision = decide(RemoteView(NEW), None, {}, [GatewayView(A), GatewayView(B)])
    assert (decision.target, decision.new, decision.push) == (NEW, True, (A, B))


def test_a_fetch_error_is_carried_into_a_heal() -> None:
    decision = decide(RemoteView(error="git remote: down"), GOOD, {}, [answered(A, given(), None)])
    assert decision.problems == ("git remote: down",) and decision.push == (A,)


@pytest.mark.parametrize(("view", "expected"), [
    (answered(A, given(), "d-good"), Holding.HOLDS),
    (answered(A, given(), "other"), Holding.DRIFTED),
    (answered(A, given(), None), Holding.DRIFTED),
    (answered(A, given(digest=""), None), Holding.UNKNOWN),  # nothing recorded to compare with
    (GatewayView(A, given(), Probe.NO_HEAD), Holding.UNKNOWN),
    (GatewayView(A, given(), Probe.NOT_ASKED), Holding.UNKNOWN),
    (answered(A, given(commit=NEW), "d-good"), Holding.BEHIND),
    (GatewayView(A), Holding.BEHIND),
])
def test_holding(view: GatewayView, expected: Holding) -> None:
    assert holding(view, GOOD, ()) is expected


def test_a_commit_the_group_gate_holds_keeps_the_last_good_live() -> None:
    from datetime import UTC, datetime, timedelta

    from gitsync.agent.gate import GateVerdict

    later = datetime.now(UTC) + timedelta(seconds=30)
    held = GateVerdict(False, "waiting: 1 of 2 needed live agent(s) of canary have run it", later)
    decision = decide(RemoteView(NEW), GOOD, {}, [HOLDS_GOOD], gate=held)
    assert (decision.target, decision.result, decision.push) == (NEW, SyncResult.WAITING, ())
    assert decision.wake_at == later.timestamp() and decision.problems == (held.why,)
    # A gateway that lost the last good commit meanwhile still gets it back.
    healing = decide(RemoteView(NEW), GOOD, {}, [answered(A, given(), None)], gate=held)
    assert (healing.target, healing.push, healing.new) == (GOOD, (A,), False)
    assert decide(RemoteView(NEW), GOOD, {}, [HOLDS_GOOD], gate=GateVerdict(True, "2 of 2")).push == (A,)
