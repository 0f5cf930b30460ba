"""Webhook replays (gitsync.daemon.deliveries): what is remembered, for how long, and what a body's own
time says; the listener's use of it over real sockets is in test_listener.py."""

from __future__ import annotations

import json

import pytest

from gitsync.daemon.deliveries import CLOCK_SKEW, WINDOW, Deliveries, sent_at

NOW = 1_800_000_000.0


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> float:
        return self.now


def test_a_forges_delivery_is_accepted_once_by_its_id_and_by_its_body():
    clock = Clock()
    seen = Deliveries(clock=clock)
    body = b'{"after": "1a2b", "repository": {"pushed_at": %d}}' % int(NOW)
    assert seen.replayed("github", {"x-github-delivery": "d-1"}, body) is None
    again = seen.replayed("github", {"x-github-delivery": "d-1"}, body)
    assert again is not None and again.startswith("delivery 'd-1' was accepted 0s ago: a replay")
    # a new id on the same signed body: the body gives it away
    assert "this body was accepted" in seen.replayed("github", {"x-github-delivery": "d-2"}, body)
    # gitea: the same rules; gitlab (a token, the body unsigned): by its id alone
    assert seen.replayed("gitea", {"x-gitea-delivery": "g-1"}, b"{}") is None
    assert seen.replayed("gitea", {"x-gitea-delivery": "g-2"}, b"{}") is not None
    assert seen.replayed("gitlab", {"x-gitlab-event-uuid": "l-1"}, b"{}") is None
    assert seen.replayed("gitlab", {"x-gitlab-event-uuid": "l-2"}, b"{}") is None
    assert seen.replayed("gitlab", {"x-gitlab-event-uuid": "l-1"}, b"{}") is not None


def test_a_generic_delivery_without_an_id_is_never_a_replay():
    """A CI job's curl with a fixed body: nothing tells one call from the next."""
    seen = Deliveries(clock=Clock())
    for _ in range(3):
        assert seen.replayed("generic", {}, b'{"ref": "refs/heads/main"}') is None


def test_gitsyncs_own_notifications_are_dated_and_too_old_or_too_new_ones_are_refused():
    clock = Clock()
    seen = Deliveries(clock=clock)

    def notification(at: float, ident: str) -> bytes:
        return json.dumps({"event": "applied", "id": ident, "time": _iso(at)}).encode()

    headers = {"x-gitsync-delivery": "n-1"}
    assert seen.replayed("generic", headers, notification(NOW - 60, "n-1")) is None
    old = seen.replayed("generic", {"x-gitsync-delivery": "n-2"}, notification(NOW - WINDOW - 1, "n-2"))
    assert old is not None and "more than 3600s: a replay" in old
    ahead = seen.replayed("generic", {"x-gitsync-delivery": "n-3"},
                          notification(NOW + CLOCK_SKEW + 5, "n-3"))
    assert ahead is not None and "ahead of this agent's clock" in ahead


def test_what_is_remembered_is_forgotten_after_the_window_and_past_the_limit():
    clock = Clock()
    seen = Deliveries(clock=clock, limit=3)
    body = b'{"after": "x"}'  # no date in it: a replay after the window is let through (one sync more)
    assert seen.replayed("github", {"x-github-delivery": "a"}, body) is None
    clock.now += WINDOW + 1
    assert seen.replayed("github", {"x-github-delivery": "a"}, body) is None
    for n in range(3):
        assert seen.replayed("github", {"x-github-delivery": f"b{n}"}, b"{%d}" % n) is None
    assert seen.replayed("github", {"x-github-delivery": "a"}, body) is None  # pushed out by the limit


@pytest.mark.parametrize(("provider", "body", "expected"), [
    ("github", b'{"repository": {"pushed_at": 1700000000}}', 1700000000.0),
    ("github", b'{"repository": {"pushed_at": "2024-01-01T00:00:00Z"}}', None),  # not a push: no date
    ("github", b'{"repository": {"pushed_at": true}}', None),
    ("generic", b'{"time": "2026-01-01T00:00:00Z"}', 1767225600.0),
    ("generic", b'{"time": "2026-01-01T00:00:00"}', None),  # no zone: not a date to judge by
    ("generic", b'[1, 2]', None),
    ("gitlab", b'{"time": "2026-01-01T00:00:00Z"}', None),
    ("generic", b"not json", None),
])
def test_when_a_body_says_it_was_sent(provider, body, expected):
    assert sent_at(provider, body) == expected


def _iso(at: float) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(at, UTC).isoformat().replace("+00:00", "Z")


# ---------------------------------------------------------------------------------------------------------
# Each bound alone, exactly at it and one past


def dated(at: float) -> bytes:
    return b'{"after": "1a2b", "repository": {"pushed_at": %d}}' % int(at)


def test_the_defaults_are_an_hour_five_minutes_and_10000_deliveries():
    assert (WINDOW, CLOCK_SKEW) == (3600.0, 300.0)
    seen = Deliveries()
    assert (seen.window, seen.limit) == (3600.0, 10_000)


@pytest.mark.parametrize(("age", "refused"), [(3600, False), (3601, True), (0, False)])
def test_a_dated_delivery_is_accepted_up_to_an_hour_old(age, refused):
    seen = Deliveries(clock=Clock())
    why = seen.replayed("github", {"x-github-delivery": "d"}, dated(NOW - age))
    assert (why is not None) is refused
    if refused:
        assert why == "sent 3601s ago, more than 3600s: a replay; ignored"


@pytest.mark.parametrize(("ahead", "refused"), [(300, False), (301, True)])
def test_a_dated_delivery_is_accepted_up_to_five_minutes_ahead(ahead, refused):
    seen = Deliveries(clock=Clock())
    why = seen.replayed("github", {}, dated(NOW + ahead))
    assert (why is not None) is refused
    if refused:
        assert why == "dated 301s ahead of this agent's clock; ignored"


def test_a_refused_delivery_is_not_remembered():
    seen = Deliveries(clock=Clock())
    assert seen.replayed("github", {"x-github-delivery": "d"}, dated(NOW - 4000)) is not None
    assert seen._seen == {}
    assert seen.replayed("github", {"x-github-delivery": "d"}, dated(NOW)) is None


@pytest.mark.parametrize(("later", "replay"), [(3600, True), (3601, False)])
def test_a_delivery_is_remembered_for_an_hour_exactly(later, replay):
    clock = Clock()
    seen = Deliveries(clock=clock)
    assert seen.replayed("gitlab", {"x-gitlab-event-uuid": "l-1"}, b"{}") is None
    clock.now += later
    assert (seen.replayed("gitlab", {"x-gitlab-event-uuid": "l-1"}, b"{}") is not None) is replay


@pytest.mark.parametrize(("limit", "replay"), [(3, True), (2, False)])
def test_the_oldest_delivery_is_forgotten_past_the_limit_not_at_it(limit, replay):
    clock = Clock()
    seen = Deliveries(clock=clock, limit=limit)
    for name in ("a", "b", "c"):
        assert seen.replayed("gitlab", {"x-gitlab-event-uuid": name}, b"{}") is None
        clock.now += 1
    assert len(seen._seen) == limit
    assert (seen.replayed("gitlab", {"x-gitlab-event-uuid": "a"}, b"{}") is not None) is replay


def test_forgetting_stops_at_the_first_delivery_still_in_the_window():
    clock = Clock()
    seen = Deliveries(clock=clock)
    seen.replayed("gitlab", {"x-gitlab-event-uuid": "old"}, b"{}")
    clock.now += 1000
    seen.replayed("gitlab", {"x-gitlab-event-uuid": "new"}, b"{}")
    clock.now += WINDOW - 500  # "old" is 3,100 + 1,000 s old, "new" 3,100 s
    assert seen.replayed("gitlab", {"x-gitlab-event-uuid": "x"}, b"{}") is None
    assert [key for _, key in seen._seen] == ["new", "x"]


def test_a_replay_says_how_long_ago_it_was_accepted_and_by_what():
    clock = Clock()
    seen = Deliveries(clock=clock)
    assert seen.replayed("gitea", {"x-gitea-delivery": "g"}, b"{}") is None
    clock.now += 42
    assert seen.replayed("gitea", {"x-gitea-delivery": "g"}, b"{}") == \
        "delivery 'g' was accepted 42s ago: a replay; ignored"
    assert seen.replayed("gitea", {}, b"{}") == "this body was accepted 42s ago: a replay; ignored"


def test_a_body_is_the_same_delivery_only_for_the_same_sender():
    seen = Deliveries(clock=Clock())
    assert seen.replayed("github", {}, b"{}") is None
    assert seen.replayed("gitea", {}, b"{}") is None  # the same bytes from another forge
    assert seen.replayed("gitea", {}, b"{} ") is None
    assert seen.replayed("github", {}, b"{}") is not None


def test_a_delivery_id_is_read_from_its_senders_header_and_cut_at_200_characters():
    seen = Deliveries(clock=Clock())
    assert seen.replayed("gitlab", {"x-gitlab-event-uuid": "a" * 200 + "b"}, b"{}") is None
    assert seen.replayed("gitlab", {"x-gitlab-event-uuid": "a" * 200 + "c"}, b"{}") is not None
    assert seen.replayed("gitlab", {"x-github-delivery": "z"}, b"{}") is None  # another forge's header
    assert seen.replayed("gitlab", {"x-github-delivery": "z"}, b"{}") is None


def test_only_github_and_deliveries_with_an_id_are_judged_by_their_date():
    seen = Deliveries(clock=Clock())
    old = json.dumps({"time": _iso(NOW - 4000)}).encode()
    assert seen.replayed("generic", {}, old) is None  # a generic delivery without an id: not judged
    assert seen.replayed("generic", {"x-gitsync-delivery": "n"}, old) is not None
    assert seen.replayed("gitea", {"x-gitea-delivery": "g"}, dated(NOW - 4000)) is None  # gitea: undated
    assert seen.replayed("github", {}, dated(NOW - 4000)) is not None  # github: dated, id or not


@pytest.mark.parametrize(("body", "expected"), [
    (b'  {"time": "2026-01-01T00:00:00+01:00"}', 1767222000.0),
    (b'{"time": 1767225600}', None),
    (b'{"time": "yesterday"}', None),
    (b'"2026-01-01T00:00:00Z"', None),
    (b'{"time": "2026-01-01T00:00:00.5Z"}', 1767225600.5),
])
def test_a_generic_bodys_time_is_iso_8601_with_a_zone(body, expected):
    assert sent_at("generic", body) == expected


@pytest.mark.parametrize(("length", "read"), [(64, True), (65, False)])
def test_a_time_is_read_up_to_64_characters(length, read):
    text = "2026-01-01T00:00:00" + "." + "0" * (length - 26) + "+00:00"
    assert len(text) == length
    assert (sent_at("generic", json.dumps({"time": text}).encode()) is not None) is read


@pytest.mark.parametrize(("body", "expected"), [
    (b'{"repository": {"pushed_at": 0}}', 0.0),
    (b'{"repository": {"pushed_at": -5}}', -5.0),
    (b'{"repository": {"pushed_at": 1.5}}', None),
    (b'{"repository": [1]}', None),
    (b'{"repository": {}}', None),
    (b'{}', None),
])
def test_a_github_bodys_date_is_its_pushs_whole_seconds(body, expected):
    assert sent_at("github", body) == expected


def test_gitsyncs_own_notification_is_known_by_its_body_whatever_id_a_replay_gives_it():
    seen = Deliveries(clock=Clock())
    body = json.dumps({"event": "applied", "id": "n-1", "time": _iso(NOW)}).encode()
    assert seen.replayed("generic", {"x-gitsync-delivery": "n-1"}, body) is None
    assert seen.replayed("generic", {"x-gitsync-delivery": "n-2"}, body) == \
        "this body was accepted 0s ago: a replay; ignored"
