"""``gitsync sync --once`` and a git remote that fails for a while: each git contact (the ref check,
the fetch) is tried a bounded number of times with the one backoff's jitter between tries, and the log
says what happened. Real processes, a real git daemon behind a relay that drops chosen connections,
and a server that never answers."""

from __future__ import annotations

import re
import socket
import threading
import time
from collections.abc import Collection
from pathlib import Path

import pytest

from gitsync.backoff import Backoff, retried
from gitsync.cli.commands import ONCE_GIT_ATTEMPTS
from gitsync.testing.apisix import ApisixDouble
from testkit.agents import ADMIN_KEY, sources_toml
from testkit.gitservers import BareRepo, GitGate, HungServer
from testkit.processes import run_gitsync

ROUTE = "upstreams:\n  - id: u\n    nodes: {'127.0.0.1:1980': 1}\nroutes:\n  - id: r1\n    uri: /r1\n" \
        "    upstream_id: u\n"


class DroppingGate(GitGate):
    """A relay to a git daemon that closes the connections it is told to (1 for the first) unanswered."""

    def __init__(self, target_port: int, drop: Collection[int]) -> None:
        super().__init__(target_port)
        self.drop = set(drop)
        self.seen = 0
        self._count = threading.Lock()

    def accepted(self, conn: socket.socket) -> None:
        with self._count:
            self.seen += 1
            number = self.seen
        if number in self.drop:
            conn.close()
            return
        super().accepted(conn)


def sync_once(tmp_path: Path, repo: str, gateway: str, *extra: str):
    key = tmp_path / "key"
    key.write_text(ADMIN_KEY)
    return run_gitsync("sync", "--once", "--repo", repo, "--gateway", gateway, "--admin-key-file", str(key),
                       "--state-dir", str(tmp_path / "state"), "--writeback", "off", *extra)


def attempts_logged(stderr: str) -> list[int]:
    pattern = rf"\(attempt (\d) of {ONCE_GIT_ATTEMPTS}\); retrying in \d+\.\ds"
    return [int(n) for n in re.findall(pattern, stderr)]


@pytest.mark.slow
def test_sync_once_retries_a_remote_that_drops_it_twice_and_succeeds(tmp_path, git_daemon, remote_repo,
                                                                     apisix: ApisixDouble) -> None:
    remote_repo.commit({"conf/routes.yaml": ROUTE}, "one route")
    with DroppingGate(git_daemon.port, drop={1, 2}) as gate:
        result = sync_once(tmp_path, gate.url(remote_repo.path.name), apisix.url)
    assert result.returncode == 0, result.stderr
    assert attempts_logged(result.stderr) == [1, 2]  # two dropped, the third try went through
    assert "gave up" not in result.stderr and "retrying at the first poll" not in result.stderr
    assert [r["id"] for r in apisix.config()["routes"]] == ["r1"]


@pytest.mark.slow
def test_sync_once_retries_a_fetch_the_remote_drops(tmp_path, git_daemon, remote_repo,
                                                    apisix: ApisixDouble) -> None:
    remote_repo.commit({"conf/routes.yaml": ROUTE}, "one route")
    # A command's sync fetches at once (no ref check before it): the first connection is the fetch,
    # and it is the only one a sync that succeeds needs.
    with DroppingGate(git_daemon.port, drop={1}) as gate:
        result = sync_once(tmp_path, gate.url(remote_repo.path.name), apisix.url)
    assert result.returncode == 0, result.stderr
    assert attempts_logged(result.stderr) == [1]
    assert gate.seen == 2
    assert [r["id"] for r in apisix.config()["routes"]] == ["r1"]


@pytest.mark.slow
def test_sync_once_gives_up_on_a_remote_that_never_answers_after_the_bound(tmp_path,
                                                                          apisix: ApisixDouble) -> None:
    with HungServer() as hung:
        started = time.monotonic()
        result = sync_once(tmp_path, f"git://127.0.0.1:{hung.port}/repo.git", apisix.url, "--git-timeout",
                           "0.5s")
        took = time.monotonic() - started
    assert result.returncode == 1, result.stderr
    assert attempts_logged(result.stderr) == [1, 2, 3]
    assert f"no answer within 0.5s; gave up after {ONCE_GIT_ATTEMPTS} attempts" in result.stderr
    assert "retrying at the first poll" not in result.stderr  # --once has no next poll
    # 4 tries of 0.5 s, and waits of at most 1 + 2 + 4 s between them; a process start on top
    assert 2 + 0.5 + 1 + 2 <= took < 2 + 7 + 20


@pytest.mark.slow
def test_a_missing_ref_is_an_answer_and_not_retried(tmp_path, git_daemon, remote_repo,
                                                    apisix: ApisixDouble) -> None:
    remote_repo.commit({"conf/routes.yaml": ROUTE}, "one route")
    result = sync_once(tmp_path, git_daemon.url(remote_repo.path.name), apisix.url, "--ref", "nope")
    assert result.returncode == 1
    assert attempts_logged(result.stderr) == []
    assert "not retried (the remote answered)" in result.stderr


def test_retried_tries_up_to_the_bound_with_the_backoffs_delays() -> None:
    calls, told, slept = [], [], []

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise ConnectionError("dropped")
        return "ok"

    backoff = Backoff(1.0, 60.0)
    result = retried(flaky, 4, backoff, retry_if=lambda exc: isinstance(exc, ConnectionError),
                     on_retry=lambda exc, n, delay: told.append((n, delay)), sleep=slept.append)
    assert result == "ok" and len(calls) == 3 and backoff.failures == 0
    assert [n for n, _ in told] == [1, 2] and [d for _, d in told] == slept
    assert 0.5 <= slept[0] <= 1.0 and 1.0 <= slept[1] <= 2.0  # equal jitter: half fixed, half random

    def down() -> str:
        calls.append(1)
        raise ConnectionError("down")

    def answered() -> str:
        calls.append(1)
        raise ValueError("not found")

    for action, error, tries in ((down, ConnectionError, 4), (answered, ValueError, 1)):
        calls.clear()
        with pytest.raises(error):
            retried(action, 4, Backoff(1.0, 60.0), retry_if=lambda exc: isinstance(exc, ConnectionError),
                    on_retry=lambda *_: None, sleep=lambda _: None)
        assert len(calls) == tries


@pytest.mark.slow
def test_sync_once_with_sources_retries_each_sources_contacts(tmp_path, git_daemon, remotes_root,
                                                              apisix: ApisixDouble) -> None:
    """[[sources]]: a source whose remote drops its fetch twice is retried within the sync as one repo
    is (a command's sync fetches each source at once, as one repo); the other source is asked once."""
    platform, team = (BareRepo.create(remotes_root / f"{tmp_path.name}-{name}.git") for name in ("p", "t"))
    platform.commit({"up.yaml": "upstreams:\n  - id: p-u\n    nodes: {'127.0.0.1:1980': 1}\n"}, "platform")
    team.commit({"routes.yaml": "routes:\n  - id: t-r1\n    uri: /r1\n    upstream_id: p-u\n"}, "team")
    with DroppingGate(git_daemon.port, drop={1, 2}) as gate:  # the team's fetch, and its first retry
        config = tmp_path / "gitsync.toml"
        config.write_text(sources_toml(("team", gate.url(team.path.name), "routes", "t-"),
                                       ("platform", git_daemon.url(platform.path.name), "upstreams", "p-"))
                          + 'shares = [{ kinds = ["upstreams"] }]\n')  # the platform's: its upstreams
        key = tmp_path / "key"
        key.write_text(ADMIN_KEY)
        result = run_gitsync("sync", "--once", "--config", str(config), "--gateway", apisix.url,
                             "--admin-key-file", str(key), "--state-dir", str(tmp_path / "state"),
                             "--writeback", "off")
    assert result.returncode == 0, result.stderr
    assert attempts_logged(result.stderr) == [1, 2], result.stderr  # two dropped, the third went through
    assert gate.seen == 3  # nothing more: the render's commit is the one fetched at once
    assert [r["id"] for r in apisix.config()["routes"]] == ["t-r1"]
