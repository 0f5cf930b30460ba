"""Feedback's parts: events from outcomes, what a commit's status says (one agent's, one group's),
signed notifications to a real receiver, and the background dispatcher (dedup, rate limit, retry)."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gitsync.agent.metrics import Metrics
from gitsync.agent.outcomes import Stage, SyncOutcome, SyncResult, Trigger
from gitsync.agent.state import AgentState
from gitsync.agent.sync import Agent
from gitsync.feedback import statuses
from gitsync.feedback.dispatch import DeliveryError, Dispatcher, Job, RetryableDelivery
from gitsync.feedback.events import EventKind, Reachability, outcome_events
from gitsync.feedback.notify import Notifier
from gitsync.log import register_secret
from gitsync.push.results import CheckResult, ChecksVerdict, GatewayResult, SyncStatus
from gitsync.settings import Secret, load
from gitsync.writeback.statusfile import (
    FleetEntry,
    GatewayEntry,
    StatusFile,
    Unreadable,
    Verdict,
    read_status,
)
from testkit.forges import Receiver
from testkit.profiles import examples

SHA = "9c1185a5c5e9fc54612808977ee8f548b2258d31"
GW1, GW2 = "http://gw1:9180", "http://gw2:9180"
POLL, DRIFT = frozenset({Trigger.POLL}), frozenset({Trigger.DRIFT})
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
    applied = SyncOutcome(POLL, SyncResult.APPLIED, SHA, "add orders", gateways=[ok(GW1), ok(GW2)])
    refused = SyncOutcome(POLL, SyncResult.FAILED, SHA, stage=Stage.RENDER,
                          problems=["conf/routes.yaml:3:5: routes[r1].uri: expected a string"])
    rolled = SyncOutcome(POLL, SyncResult.FAILED, SHA, stage=Stage.HEALTH,
                         problems=[f"{GW1}: check x failed"])
    guarded = SyncOutcome(POLL, SyncResult.FAILED, SHA, stage=Stage.GUARD,
                          problems=[f"{GW1}: routes: 4 of 4"])
    unreachable = SyncOutcome(POLL, SyncResult.FAILED, SHA, stage=Stage.PUSH,
                              problems=[f"{GW1}: timed out"], gateways=[down(GW1)])
    healed = SyncOutcome(DRIFT, SyncResult.HEALED, SHA, gateways=[ok(GW2)], drifted=[GW2])
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
        (SyncOutcome(POLL, SyncResult.APPLIED, SHA, gateways=[ok(GW1, checks=checks), ok(GW2)]), {},
         ("success", "applied to 2 gateway(s), health checks passed")),
        (SyncOutcome(POLL, SyncResult.FAILED, SHA, stage=Stage.RENDER, problems=["c.yaml:1:1: bad"]), bad,
         ("failure", "refused at render: c.yaml:1:1: bad")),
        (SyncOutcome(POLL, SyncResult.FAILED, SHA, stage=Stage.HEALTH, problems=[f"{GW1}: c failed"]), bad,
         ("failure", f"rolled back: {GW1}: c failed")),
        (SyncOutcome(POLL, SyncResult.FAILED, SHA, stage=Stage.GUARD, problems=["routes: 4 of 4"]), bad,
         ("failure", "held by the deletion guard: routes: 4 of 4")),
        (SyncOutcome(POLL, SyncResult.FAILED, SHA, stage=Stage.PUSH, problems=[f"{GW1}: timed out"]), {},
         ("error", f"not applied, retrying: {GW1}: timed out")),
        (SyncOutcome(POLL, SyncResult.NOOP, SHA), {}, None),
        (SyncOutcome(POLL, SyncResult.SKIPPED, SHA), bad, None),
    ]
    for outcome, known_bad, verdict in cases:
        assert statuses.outcome_verdict(outcome, known_bad) == verdict, outcome.result


HEARTBEAT = 60.0  # this agent's: by it, and never by the period a status claims, others are judged


def entry(agent: str, group: str | None, commit: str, result: str, gateways: int = 1, seen_ago: float = 1,
          *, failed_checks: tuple[str, ...] = (), claimed_heartbeat: float | None = None,
          signature: Verdict | None = None) -> FleetEntry:
    """A status ref as the fleet reader gives it: readable, written `seen_ago` seconds ago."""
    seen = datetime.now(UTC) - timedelta(seconds=seen_ago)
    status = StatusFile(agent=agent, commit=commit, result=result, time=seen, group=group,
                        heartbeat=claimed_heartbeat,
                        gateways=tuple(GatewayEntry(f"http://{agent}-{i}", result, checks_passed=1 if
                                                    failed_checks else None, checks_failed=failed_checks)
                                       for i in range(gateways)))
    return FleetEntry(ref=agent, agent=agent, status=status, signature=signature, written=seen, seen=seen)


def names(entries: list[FleetEntry]) -> list[str]:
    return [e.agent for e in entries]


def test_a_group_of_five_agents_in_two_groups_counts_and_one_agent_reports_each():
    now = datetime.now(UTC)
    old = "1" * 40
    fleet = [entry("canary-1", "canary", SHA, "applied"),
             entry("canary-2", "canary", SHA, "applied", 2),
             entry("main-1", "main", SHA, "applied"), entry("main-2", "main", old, "applied"),
             entry("main-3", "main", old, "applied"),
             entry("main-9", "main", SHA, "failed", seen_ago=999)]
    own = statuses.own_entry("main-2", "main", SHA, "waiting", 1, now)
    main = statuses.members(fleet, "main", own, now, HEARTBEAT)
    assert names(main) == ["main-1", "main-2", "main-3"]  # main-9 left: not counted
    assert statuses.reporter(main, "main-2", now, HEARTBEAT) == "main-1"
    late = [entry("main-1", "main", SHA, "applied", seen_ago=300), own]  # late: counted, not reporting
    assert names(statuses.members(late, "main", own, now, HEARTBEAT)) == ["main-1", "main-2"]
    assert statuses.reporter(statuses.members(late, "main", own, now, HEARTBEAT), "main-2", now,
                             HEARTBEAT) == "main-2"
    assert statuses.group_verdict(main, SHA, ("pending", "waiting for group canary"), "main-2") == \
        ("pending", "1/3 applied, 1 on the way")
    canary = statuses.members(fleet, "canary", fleet[0], now, HEARTBEAT)
    assert statuses.group_verdict(canary, SHA, None, "canary-1") == ("success", "2/2 applied (3 gateway(s))")
    failed = [*main[:2], entry("main-3", "main", SHA, "failed")]
    assert statuses.group_verdict(failed, SHA, None, "main-1") == ("failure", "1/3 applied; failed on main-3")
    mine = statuses.group_verdict(failed, SHA, ("failure", "refused at render: c.yaml:1:1: bad"), "main-3")
    assert mine == ("failure", "1/3 applied; main-3: refused at render: c.yaml:1:1: bad")
    lone = statuses.own_entry("main-2", None, SHA, "waiting", 1, now)
    alone = statuses.members([], None, lone, now, HEARTBEAT)
    assert statuses.group_verdict(alone, SHA, ("success", "applied to 1 gateway(s)"), "main-2", alone=True) \
        == ("success", "applied to 1 gateway(s)")
    # The others down for a while: counted out, not turned into an agent alone.
    assert statuses.group_verdict([statuses.own_entry("main-2", "main", SHA, "applied", 1, now)], SHA,
                                  ("success", "applied to 1 gateway(s)"), "main-2") == \
        ("success", "1/1 applied (1 gateway(s))")
    assert statuses.groups(fleet, now, HEARTBEAT) == ["canary", "main"]


def test_statuses_that_cannot_be_believed_neither_count_nor_hold_back_nor_report():
    """Unreadable, unverified, written in the future, or kept alive by the period it claims: each would
    sort first and speak for the group; none is a member. A readable one whose checks failed is."""
    now = datetime.now(UTC)
    unreadable = read_status(b"agent: [x]\ngroup: main\n")
    assert isinstance(unreadable, Unreadable)
    fleet = [FleetEntry("aaa-unreadable", "aaa-unreadable", None, unreadable.reason, written=now, seen=now),
             entry("aaa-unverified", "main", SHA, "failed",
                   signature=Verdict(False, "signed by a key not allowed for aaa-unverified")),
             entry("aaa-future", "main", SHA, "failed", seen_ago=-3600),
             entry("aaa-claims-a-day", "main", SHA, "failed", seen_ago=3 * 3600, claimed_heartbeat=86400),
             entry("odd-checks", "main", SHA, "applied", failed_checks=("orders-answer",),
                   signature=Verdict(True))]
    own = statuses.own_entry("main-1", "main", SHA, "applied", 1, now)
    group = statuses.members(fleet, "main", own, now, HEARTBEAT)
    assert names(group) == ["main-1", "odd-checks"]
    assert statuses.reporter(group, "main-1", now, HEARTBEAT) == "main-1"
    assert statuses.group_verdict(group, SHA, None, "main-1") == \
        ("failure", "1/2 applied; failed on odd-checks")
    assert statuses.groups(fleet[:4], now, HEARTBEAT) == []


_results = st.sampled_from(["applied", "healed", "failed", "canary", "soaking", "waiting", "drift_reported"])
_groups = st.sampled_from(["main", "canary", None])


@st.composite
def _entries(draw: st.DrawFn, trouble: bool) -> FleetEntry:
    agent = draw(st.text("abcm-", min_size=1, max_size=6))
    made = entry(agent, draw(_groups), draw(st.sampled_from([SHA, "1" * 40])), draw(_results),
                 draw(st.integers(0, 3)), draw(st.floats(-60, 4000)),
                 failed_checks=draw(st.sampled_from([(), ("c",)])),
                 signature=Verdict(False, "unverified") if trouble
                 else draw(st.sampled_from([None, Verdict(True)])))
    if trouble and draw(st.booleans()):
        return replace(made, status=None, signature=None, unreadable="not YAML")
    return made


@examples(1.0)
@given(fleet=st.lists(_entries(False), max_size=6, unique_by=lambda e: e.agent),  # one ref per honest agent
       hostile=st.lists(_entries(True), min_size=1, max_size=4),
       group=_groups, seed=st.randoms())
def test_an_unbelievable_status_never_changes_a_groups_status(fleet, hostile, group, seed):
    """Whatever the unreadable and unverified statuses claim, wherever they sort: the members, who
    reports, and what the forge is told are those of the fleet without them."""
    now = datetime.now(UTC)
    mixed = [*fleet, *hostile]
    seed.shuffle(mixed)
    own = statuses.own_entry("m-own", group, SHA, "applied", 1, now)
    for others in (fleet, mixed):
        assert statuses.groups(others, now, HEARTBEAT) == statuses.groups(fleet, now, HEARTBEAT)
    plain = statuses.members(fleet, group, own, now, HEARTBEAT)
    members = statuses.members(mixed, group, own, now, HEARTBEAT)
    assert members == plain and all(e.trouble is None for e in members)
    assert statuses.reporter(members, "m-own", now, HEARTBEAT) == statuses.reporter(plain, "m-own", now,
                                                                                   HEARTBEAT)
    assert statuses.group_verdict(members, SHA) == statuses.group_verdict(plain, SHA)


# ---------------------------------------------------------------------------------------------------------
# the agent's observer


ROUTE = """\
routes:
  - id: r1
    uri: {uri}
    upstream: {{type: roundrobin, nodes: {{"127.0.0.1:1980": 1}}}}
"""


class Recorder:
    """An observer that writes down what the agent tells it."""

    def __init__(self) -> None:
        self.heard: list[tuple[str, ...]] = []

    def started(self, commit: str) -> None:
        self.heard.append(("started", commit))

    def ended(self, outcome: SyncOutcome, state: AgentState) -> None:
        refused = str(outcome.commit in state.bad)
        self.heard.append(("ended", str(outcome.result), outcome.commit or "", refused))

    def close(self) -> None:
        self.heard.append(("close",))


def test_the_agent_tells_its_observer_each_new_commit_and_each_outcome(tmp_path, apisix, remote_repo):
    good = remote_repo.commit({"apisix.yaml": ROUTE.format(uri="/a")}, "routes")
    (tmp_path / "admin_key").write_text("test-admin-key")
    settings = load({"repo": str(remote_repo.path), "gateways": [apisix.url], "writeback": "off",
                     "admin_key_file": str(tmp_path / "admin_key"), "state_dir": str(tmp_path / "state")},
                    config="/dev/null", env={})
    observer = Recorder()
    agent = Agent(settings, observer=observer)
    agent.sync_once()
    agent.sync_once()  # nothing new: no start, an outcome all the same
    bad = remote_repo.commit({"apisix.yaml": ROUTE.format(uri="42")}, "a uri that is no path")
    agent.sync_once()
    agent.close()
    assert observer.heard == [("started", good), ("ended", "applied", good, "False"),
                              ("ended", "noop", good, "False"),
                              ("started", bad), ("ended", "failed", bad, "True"), ("close",)]


def test_a_refused_commits_event_carries_its_subject_and_every_field_is_redacted(tmp_path, apisix,
                                                                                remote_repo):
    """A commit refused at render: its outcome, so its notification, names its subject; a secret in any
    field of the notification (the subject, an extra) is masked, not only in `text`."""
    secret = "hunter2-secret-token-9f3a"
    register_secret(secret)
    remote_repo.commit({"apisix.yaml": ROUTE.format(uri="/a")}, "routes")
    (tmp_path / "admin_key").write_text("test-admin-key")
    settings = load({"repo": str(remote_repo.path), "gateways": [apisix.url], "writeback": "off",
                     "admin_key_file": str(tmp_path / "admin_key"), "state_dir": str(tmp_path / "state")},
                    config="/dev/null", env={})
    agent = Agent(settings)
    agent.sync_once()
    bad = remote_repo.commit({"apisix.yaml": ROUTE.format(uri="42")}, f"rotate {secret} and break a uri")
    outcome = agent.sync_once()
    agent.close()
    assert outcome.commit == bad and outcome.subject == f"rotate {secret} and break a uri"
    [event] = outcome_events(outcome, {bad: "render"}, "eu-1", "eu")
    event = replace(event, extra={"note": f"token {secret}"})
    body = json.dumps(event.to_json("2030-01-01T00:00:00Z"), ensure_ascii=False)
    assert secret not in body and body.count("***") >= 3
    assert json.loads(body)["subject"] == "rotate *** and break a uri"


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
