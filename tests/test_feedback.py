"""Feedback's parts: events from outcomes, what a commit's status says (one agent's, one group's),
signed notifications to a real receiver, and the background dispatcher (dedup, rate limit, retry)."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from datetime import UTC, datetime, timedelta

import pytest

from gitsync.agent.metrics import Metrics
from gitsync.agent.outcomes import Stage, SyncOutcome, SyncResult
from gitsync.feedback import statuses
from gitsync.feedback.dispatch import DeliveryError, Dispatcher, Job, RetryableDelivery
from gitsync.feedback.events import EventKind, Reachability, outcome_events
from gitsync.feedback.notify import Notifier
from gitsync.push.apply import GatewayResult, SyncStatus
from gitsync.push.health import CheckResult, ChecksVerdict
from gitsync.settings import Secret
from gitsync.writeback.wire import iso_time
from tests.forges import Receiver

SHA = "9c1185a5c5e9fc54612808977ee8f548b2258d31"
GW1, GW2 = "http://gw1:9180", "http://gw2:9180"
NOTIFY_SECRET = "notify-secret-61c2"


def ok(url: str, **kw: object) -> GatewayResult:
    return GatewayResult(url, SyncStatus.APPLIED, **kw)  # type: ignore[arg-type]


def down(url: str) -> GatewayResult:
    return GatewayResult(url, SyncStatus.FAILED, error="timed out: no complete answer within 10s")


def metric(metrics: Metrics, name: str, channel: str) -> float:
    return metrics.registry.get_sample_value(name, {"channel": channel}) or 0.0


# ---------------------------------------------------------------------------------------------------------
# events


def test_each_outcome_tells_its_event_and_a_failure_not_the_commits_tells_none():
    applied = SyncOutcome("poll", SyncResult.APPLIED, SHA, "add orders", gateways=[ok(GW1), ok(GW2)])
    refused = SyncOutcome("poll", SyncResult.FAILED, SHA, stage=Stage.RENDER,
                          problems=["conf/routes.yaml:3:5: routes[r1].uri: expected a string"])
    rolled = SyncOutcome("poll", SyncResult.FAILED, SHA, stage=Stage.HEALTH,
                         problems=[f"{GW1}: check x failed"])
    guarded = SyncOutcome("poll", SyncResult.FAILED, SHA, stage=Stage.GUARD,
                          problems=[f"{GW1}: routes: 4 of 4"])
    unreachable = SyncOutcome("poll", SyncResult.FAILED, SHA, stage=Stage.PUSH,
                              problems=[f"{GW1}: timed out"], gateways=[down(GW1)])
    healed = SyncOutcome("drift", SyncResult.HEALED, SHA, gateways=[ok(GW2)], drifted=[GW2])
    bad = {SHA: "render: …"}
    kinds = {name: [e.kind for e in outcome_events(o, bad if o is not unreachable else {}, "eu-1", "eu")]
             for name, o in (("applied", applied), ("refused", refused), ("rolled", rolled),
                             ("guarded", guarded), ("unreachable", unreachable), ("healed", healed))}
    assert kinds == {"applied": [EventKind.APPLIED], "refused": [EventKind.REFUSED],
                     "rolled": [EventKind.ROLLED_BACK], "guarded": [EventKind.HELD_BY_GUARD],
                     "unreachable": [], "healed": [EventKind.DRIFT_HEALED]}
    event = outcome_events(refused, bad, "eu-1", "eu")[0]
    assert event.text == ("❌ gitsync eu-1 (eu): refused 9c1185a at render: conf/routes.yaml:3:5: "
                          "routes[r1].uri: expected a string")
    assert event.id == outcome_events(refused, bad, "eu-1", "eu")[0].id  # the same event, the same id
    body = outcome_events(applied, {}, "eu-1")[0].to_json("2030-01-01T00:00:00Z")
    assert body["event"] == "applied" and body["gateways"] == [GW1, GW2] and "“add orders”" in body["text"]


def test_a_gateway_is_told_unreachable_once_past_the_threshold_and_again_when_back():
    reach = Reachability(threshold=60)
    assert reach.observe([down(GW1), ok(GW2)], 0.0, "a") == []
    assert reach.observe([], 59.0, "a") == []  # backing off: no result, still down
    [event] = reach.observe([], 61.0, "a")
    assert event.kind is EventKind.GATEWAY_UNREACHABLE and event.gateways == (GW1,) and event.seconds == 61
    assert reach.observe([down(GW1)], 120.0, "a") == []  # told once
    [back] = reach.observe([ok(GW1)], 130.0, "a")
    assert back.kind is EventKind.GATEWAY_BACK
    assert reach.observe([down(GW1)], 200.0, "a") == []  # a new outage starts its own count


# ---------------------------------------------------------------------------------------------------------
# statuses


def test_one_agents_status_says_what_happened_to_the_commit():
    checks = ChecksVerdict((CheckResult("orders", "conf/checks.yaml:2:5", True, 1),))
    bad = {SHA: "x"}
    cases = [
        (SyncOutcome("p", SyncResult.APPLIED, SHA, gateways=[ok(GW1, checks=checks), ok(GW2)]), {},
         ("success", "applied to 2 gateway(s), health checks passed")),
        (SyncOutcome("p", SyncResult.FAILED, SHA, stage=Stage.RENDER, problems=["c.yaml:1:1: bad"]), bad,
         ("failure", "refused at render: c.yaml:1:1: bad")),
        (SyncOutcome("p", SyncResult.FAILED, SHA, stage=Stage.HEALTH, problems=[f"{GW1}: c failed"]), bad,
         ("failure", f"rolled back: {GW1}: c failed")),
        (SyncOutcome("p", SyncResult.FAILED, SHA, stage=Stage.GUARD, problems=["routes: 4 of 4"]), bad,
         ("failure", "held by the deletion guard: routes: 4 of 4")),
        (SyncOutcome("p", SyncResult.FAILED, SHA, stage=Stage.PUSH, problems=[f"{GW1}: timed out"]), {},
         ("error", f"not applied, retrying: {GW1}: timed out")),
        (SyncOutcome("p", SyncResult.NOOP, SHA), {}, None),
        (SyncOutcome("p", SyncResult.SKIPPED, SHA), bad, None),
    ]
    for outcome, known_bad, verdict in cases:
        assert statuses.outcome_verdict(outcome, known_bad) == verdict, outcome.result


def fleet_doc(agent: str, group: str, commit: str, result: str, gateways: int = 1, seen_ago: float = 1,
              ) -> dict:
    seen = iso_time(datetime.now(UTC) - timedelta(seconds=seen_ago))
    return {"agent": agent, "group": group, "commit": commit, "result": result, "seen": seen,
            "heartbeat": 60, "gateways": [{"url": f"http://{agent}-{i}"} for i in range(gateways)]}


def test_a_group_of_five_agents_in_two_groups_counts_and_one_agent_reports_each():
    now = datetime.now(UTC)
    old = "1" * 40
    fleet = [fleet_doc("canary-1", "canary", SHA, "applied"),
             fleet_doc("canary-2", "canary", SHA, "applied", 2),
             fleet_doc("main-1", "main", SHA, "applied"), fleet_doc("main-2", "main", old, "applied"),
             fleet_doc("main-3", "main", old, "applied"),
             fleet_doc("main-9", "main", SHA, "failed", seen_ago=999)]
    own = fleet_doc("main-2", "main", SHA, "waiting")
    main = statuses.members(fleet, "main", own, now, 60)
    assert [d["agent"] for d in main] == ["main-1", "main-2", "main-3"]  # main-9 left: not counted
    assert statuses.reporter(main, "main-2", now, 60) == "main-1"
    late = [fleet_doc("main-1", "main", SHA, "applied", seen_ago=300), own]  # late: counted, not reporting
    assert [d["agent"] for d in statuses.members(late, "main", own, now, 60)] == ["main-1", "main-2"]
    assert statuses.reporter(statuses.members(late, "main", own, now, 60), "main-2", now, 60) == "main-2"
    assert statuses.group_verdict(main, SHA, ("pending", "waiting for group canary"), "main-2") == \
        ("pending", "1/3 applied, 1 on the way")
    canary = statuses.members(fleet, "canary", fleet[0], now, 60)
    assert statuses.group_verdict(canary, SHA, None, "canary-1") == ("success", "2/2 applied (3 gateway(s))")
    failed = [*main[:2], fleet_doc("main-3", "main", SHA, "failed")]
    assert statuses.group_verdict(failed, SHA, None, "main-1") == ("failure", "1/3 applied; failed on main-3")
    mine = statuses.group_verdict(failed, SHA, ("failure", "refused at render: c.yaml:1:1: bad"), "main-3")
    assert mine == ("failure", "1/3 applied; main-3: refused at render: c.yaml:1:1: bad")
    alone = statuses.members([], None, own | {"group": None}, now, 60)
    assert statuses.group_verdict(alone, SHA, ("success", "applied to 1 gateway(s)"), "main-2", alone=True) \
        == ("success", "applied to 1 gateway(s)")
    # The others down for a while: counted out, not turned into an agent alone.
    assert statuses.group_verdict([own | {"commit": SHA, "result": "applied"}], SHA,
                                  ("success", "applied to 1 gateway(s)"), "main-2") == \
        ("success", "1/1 applied (1 gateway(s))")


def test_hostile_status_documents_neither_crash_nor_count():
    now = datetime.now(UTC)
    seen = iso_time(now)
    fleet = [None, 5, {"agent": ["x"], "group": "main"}, {"agent": "evil", "group": "main", "seen": "soon"},
             {"agent": "bad-types", "group": "main", "commit": SHA, "result": "applied", "seen": seen,
              "gateways": 5},
             {"agent": "odd-checks", "group": "main", "commit": SHA, "result": "applied", "seen": seen,
              "gateways": [{"checks": {"failed": 5}}]}]
    own = fleet_doc("main-1", "main", SHA, "applied")
    group = statuses.members(fleet, "main", own, now, 60)
    assert [d["agent"] for d in group] == ["main-1", "odd-checks"]
    assert statuses.group_verdict(group, SHA, None, "main-1") == \
        ("failure", "1/2 applied; failed on odd-checks")


# ---------------------------------------------------------------------------------------------------------
# notifications and the dispatcher


def test_a_notification_is_signed_as_gitsyncs_webhook_receiver_checks_it():
    with Receiver(NOTIFY_SECRET) as receiver:
        body = json.dumps({"event": "applied", "text": "hello"}).encode()
        Notifier(receiver.url, Secret(NOTIFY_SECRET), 5).send(body, "applied", "id-1")
        [delivery] = receiver.deliveries
        assert delivery.verified and delivery.body == body
        expected = "sha256=" + hmac.new(NOTIFY_SECRET.encode(), body, hashlib.sha256).hexdigest()
        assert delivery.headers["x-gitsync-signature-256"] == expected
        assert delivery.headers["x-gitsync-event"] == "applied"
        assert delivery.headers["x-gitsync-delivery"] == "id-1"
        with pytest.raises(DeliveryError) as refused:  # a wrong key: the receiver answers 401
            Notifier(receiver.url, Secret("another-secret"), 5).send(body, "applied", "id-2")
        assert not refused.value.retry and "/hooks/gitsync" not in str(refused.value)


def test_the_dispatcher_retries_with_backoff_counts_and_gives_up():
    metrics = Metrics()
    dispatcher = Dispatcher(metrics, max_backoff=0.2, max_attempts=3)
    tries: list[float] = []

    def flaky() -> None:
        tries.append(time.monotonic())
        if len(tries) < 2:
            raise RetryableDelivery("receiver down")

    def refused() -> None:
        raise DeliveryError("401 unauthorized")

    def never() -> None:
        raise RetryableDelivery("still down")

    for key, send in (("a", flaky), ("b", refused), ("c", never)):
        dispatcher.submit(Job(key, key, "notify", key, send))
    assert dispatcher.flush(10)
    assert len(tries) == 2 and tries[1] - tries[0] >= 0.1  # the backoff's least delay
    assert metric(metrics, "gitsync_feedback_sent_total", "notify") == 1
    assert metric(metrics, "gitsync_feedback_failures_total", "notify") == 1 + 1 + 3
    assert metric(metrics, "gitsync_feedback_dropped_total", "notify") == 2
    dispatcher.close(1)


def test_submit_never_waits_for_a_slow_destination_and_a_newer_job_replaces_a_queued_one():
    metrics = Metrics()
    dispatcher = Dispatcher(metrics)
    started, release = threading.Event(), threading.Event()
    sent: list[str] = []

    def slow() -> None:
        started.set()
        release.wait(10)

    dispatcher.submit(Job("slow", "forge", "forge", "slow", slow))
    assert started.wait(5)
    began = time.monotonic()
    for i in range(200):
        dispatcher.submit(Job(("status", SHA), "forge", "forge", f"status {i}", lambda i=i: sent.append(i)))
    assert time.monotonic() - began < 0.5
    release.set()
    assert dispatcher.flush(10)
    assert sent == [199]
    dispatcher.close(1)


def test_the_rate_limit_spaces_requests_to_one_destination_not_to_others():
    dispatcher = Dispatcher(Metrics(), rate=20.0, burst=1)
    sent: dict[str, list[float]] = {"a": [], "b": []}
    for i in range(6):
        for channel in ("a", "b"):
            dispatcher.submit(Job((channel, i), channel, "notify", "x",
                                  lambda c=channel: sent[c].append(time.monotonic())))
    assert dispatcher.flush(10)
    for times in sent.values():
        assert len(times) == 6 and times[-1] - times[0] >= 5 / 20 * 0.9
    dispatcher.close(1)
