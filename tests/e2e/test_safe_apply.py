"""Safe apply with real processes: health checks declared in the repo, run on the data plane after a
push, a failing one rolled back; canary rollouts across one agent's gateways.

The gateways are APISIX doubles whose data plane forwards to a real HTTP upstream on 127.0.0.1, so a
route moved to an upstream that does not answer gets nginx's 502, as on APISIX.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest

from gitsync.testing.apisix import ApisixDouble
from testkit.agents import ADMIN_KEY, ROLLBACK_BOUND, config, repo_url, upstream
from testkit.gitservers import git
from testkit.processes import free_port, run_gitsync, wait_for


@pytest.fixture
def forwarding() -> Iterator[ApisixDouble]:
    with ApisixDouble(ADMIN_KEY, forward=True) as double:
        yield double


def served(double: ApisixDouble) -> int:
    answer = httpx.get(double.proxy_url + "/orders", headers={"Host": "api.example.com"}, timeout=10)
    return answer.status_code


def note(repo, sha: str) -> str:
    return git("--git-dir", str(repo.path), "notes", "--ref=gitsync", "show", sha, check=False) or ""


@pytest.mark.slow
def test_a_commit_that_breaks_a_route_is_rolled_back_by_its_check(spawn, git_daemon, remote_repo,
                                                                   forwarding):
    with upstream() as good_node:
        first = remote_repo.commit(config(good_node), "orders to a live upstream")
        agent = spawn(repo_url(git_daemon, remote_repo), "--proxy-url", forwarding.proxy_url,
                      gateways=[forwarding.url])
        wait_for(lambda: agent.state().get("last_good") == first, 10, "the first commit live")
        assert served(forwarding) == 200
        assert agent.metric("gitsync_check_failures_total", check="orders-answer") == 0

        dead = f"127.0.0.1:{free_port()}"  # nothing listens there: the data plane answers 502
        bad = remote_repo.commit(config(dead), "orders to an upstream that does not answer")
        nodes = lambda: forwarding.config()["upstreams"][0]["nodes"]  # noqa: E731
        wait_for(lambda: nodes() == {dead: 1}, 5, "the bad commit pushed")
        pushed = time.monotonic()
        wait_for(lambda: nodes() == {good_node: 1}, ROLLBACK_BOUND + 2, "the rollback")
        assert time.monotonic() - pushed < ROLLBACK_BOUND
        assert served(forwarding) == 200  # the data plane serves the old route again

        state = wait_for(lambda: bad in agent.state().get("bad", {}) and agent.state(), 5,
                         "the commit refused")
        assert state["bad"][bad].startswith("health: ")
        assert state["last_good"] == first and state["gateways"][forwarding.url]["commit"] == first
        text = wait_for(lambda: note(remote_repo, bad), 5, "the note on the refused commit")
        assert "stage: health" in text
        assert "conf/checks.yaml:2:5: check orders-answer failed after 3 attempt(s): status 502" in text
        assert agent.metric("gitsync_check_failures_total", check="orders-answer") == 1
        ready = agent.get("/readyz")
        assert ready.status_code == 200 and f"the tip {bad[:7]} is refused (health:" in ready.json()["reason"]

        syncs = agent.syncs()  # two more polls: the refused commit is not tried again
        wait_for(lambda: agent.syncs() >= syncs + 2, 10, "two more polls")
        assert nodes() == {good_node: 1}
        fixed = remote_repo.commit(config(good_node) | {"conf/extra.yaml": "routes: []\n"}, "a good one")
        wait_for(lambda: agent.state().get("last_good") == fixed, 10, "the next good commit applied")


@pytest.mark.slow
def test_sync_once_rolls_back_and_exits_1(tmp_path, git_daemon, remote_repo, forwarding):
    key = tmp_path / "key"
    key.write_text(ADMIN_KEY)
    args = ["sync", "--once", "--repo", repo_url(git_daemon, remote_repo), "--gateway", forwarding.url,
            "--proxy-url", forwarding.proxy_url, "--admin-key-file", str(key),
            "--state-dir", str(tmp_path / "s")]
    with upstream() as good_node:
        remote_repo.commit(config(good_node), "good")
        assert run_gitsync(*args).returncode == 0
        remote_repo.commit(config(f"127.0.0.1:{free_port()}"), "broken")
        result = run_gitsync(*args)
        assert result.returncode == 1
        assert "failed at health" in result.stderr and "check orders-answer failed" in result.stderr
        assert forwarding.config()["upstreams"][0]["nodes"] == {good_node: 1} and served(forwarding) == 200


@pytest.mark.slow
def test_sync_once_dir_with_a_failed_check_exits_1_as_with_repo(tmp_path, forwarding):
    key = tmp_path / "key"
    key.write_text(ADMIN_KEY)
    conf = tmp_path / "conf"
    args = ["sync", "--once", "--dir", str(conf), "--gateway", forwarding.url, "--proxy-url",
            forwarding.proxy_url, "--admin-key-file", str(key)]

    def write(node: str) -> None:
        for name, text in config(node).items():
            (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / name).write_text(text)

    with upstream() as good_node:
        write(good_node)
        passed = run_gitsync(*args)
        assert passed.returncode == 0, passed.stdout + passed.stderr
        assert "checks: 1 passed" in passed.stdout
    write(f"127.0.0.1:{free_port()}")  # nothing listens there: the data plane answers 502
    failed = run_gitsync(*args)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "checks: 0 passed, 1 failed" in failed.stdout and "check orders-answer failed" in failed.stderr
    write(f"127.0.0.1:{free_port()}")  # checks run after a push that changed something
    reported = run_gitsync(*args, "--on-check-failure", "report")
    assert reported.returncode == 0 and "checks: 0 passed, 1 failed" in reported.stdout


@pytest.mark.slow
def test_on_check_failure_report_keeps_the_commit_and_says_so(tmp_path, git_daemon, remote_repo, forwarding):
    key = tmp_path / "key"
    key.write_text(ADMIN_KEY)
    dead = f"127.0.0.1:{free_port()}"
    remote_repo.commit(config(dead), "broken, reported only")
    result = run_gitsync("sync", "--once", "--repo", repo_url(git_daemon, remote_repo), "--gateway",
                         forwarding.url, "--proxy-url", forwarding.proxy_url, "--admin-key-file", str(key),
                         "--state-dir", str(tmp_path / "s"), "--on-check-failure", "report")
    assert result.returncode == 0, result.stderr
    assert "checks: 0 passed, 1 failed" in result.stdout
    assert forwarding.config()["upstreams"][0]["nodes"] == {dead: 1}


@pytest.mark.slow
def test_a_canary_goes_first_and_the_others_follow_after_the_soak(spawn, git_daemon, remote_repo):
    with upstream() as node, ApisixDouble(ADMIN_KEY, forward=True) as canary, \
            ApisixDouble(ADMIN_KEY, forward=True) as main:
        first = remote_repo.commit(config(node), "v1")
        agent = spawn(repo_url(git_daemon, remote_repo), "--rollout", "canary", "--soak", "2s",
                      "--proxy-url", canary.proxy_url, "--proxy-url", main.proxy_url,
                      gateways=[canary.url, main.url])
        wait_for(lambda: agent.state().get("last_good") == first, 15, "the first commit on both")
        assert served(canary) == served(main) == 200

        more = "routes:\n  - id: more\n    uri: /more\n    upstream_id: orders\n"
        second = remote_repo.commit(config(node) | {"conf/more.yaml": more}, "v2")
        wait_for(lambda: "more" in {r["id"] for r in canary.config()["routes"]}, 5, "v2 on the canary")
        on_canary = time.monotonic()
        assert "more" not in {r["id"] for r in main.config()["routes"]}
        wait_for(lambda: "more" in {r["id"] for r in main.config().get("routes", [])}, 6, "v2 on the others")
        assert time.monotonic() - on_canary >= 2 - 0.2  # not before the soak
        wait_for(lambda: agent.state().get("last_good") == second, 3, "v2 the last good commit")

        broken = remote_repo.commit(config(f"127.0.0.1:{free_port()}"), "v3 breaks orders")
        wait_for(lambda: broken in agent.state().get("bad", {}), 10, "v3 refused on the canary")
        assert served(canary) == 200  # rolled back there
        syncs = agent.syncs()  # a known-bad commit, whatever the soak: a poll after, and v3 went nowhere
        wait_for(lambda: agent.syncs() > syncs, 5, "a poll after the refusal")
        assert main.config()["upstreams"][0]["nodes"] == {node: 1}
        assert [m for m, *_ in main.requests].count("PUT") == 2  # v1 and v2 only
