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
