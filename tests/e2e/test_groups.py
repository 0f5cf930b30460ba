"""Canary groups across a fleet of agents, with real processes: two canary agents and three main
agents, one git remote, five gateways (doubles whose data plane forwards to a real upstream).

The main group applies a commit only once both canaries show it applied, checks passed, for the
soak; a commit whose check fails on the canaries is rolled back there and never reaches the main
group; a canary agent that is down does not count.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from gitsync.testing.apisix import ApisixDouble
from testkit.agents import config, forwarding_doubles, repo_url, upstream
from testkit.processes import free_port, wait_for

SOAK = 2.0

pytestmark = pytest.mark.slow


@pytest.fixture
def doubles() -> Iterator[list[ApisixDouble]]:
    with forwarding_doubles(5) as started:
        yield started


def nodes(double: ApisixDouble) -> dict | None:
    upstreams = double.config().get("upstreams") or []
    return upstreams[0]["nodes"] if upstreams else None


def test_a_commit_reaches_the_canaries_first_and_the_main_group_after_the_soak(
        spawn, git_daemon, remote_repo, doubles):
    canaries, mains = doubles[:2], doubles[2:]
    with upstream() as good, upstream(b'{"status": "ok", "v": 1}') as other:
        remote_repo.commit(config(good), "v0")
        common = ["--writeback", "on", "--status-heartbeat", "1s", "--soak", f"{SOAK:g}s"]
        agents = {}
        for i, double in enumerate(canaries):
            agents[f"canary-{i}"] = spawn(repo_url(git_daemon, remote_repo), *common, "--group", "canary",
                                          "--agent-name", f"canary-{i}", "--proxy-url", double.proxy_url,
                                          gateways=[double.url], name=f"canary-{i}")
        for i, double in enumerate(mains):
            agents[f"main-{i}"] = spawn(repo_url(git_daemon, remote_repo), *common, "--group", "main",
                                        "--after-group", "canary", "--after-count", "2",
                                        "--agent-name", f"main-{i}", "--proxy-url", double.proxy_url,
                                        gateways=[double.url], name=f"main-{i}")

        wait_for(lambda: all(nodes(d) == {good: 1} for d in doubles), 30, "v0 everywhere")

        # A good commit: the canaries first, the main group only after both held it for the soak.
        remote_repo.commit(config(other), "v1")
        wait_for(lambda: all(nodes(d) == {other: 1} for d in canaries), 20, "v1 on the canaries")
        on_canaries = time.monotonic()
        assert all(nodes(d) == {good: 1} for d in mains)
        wait_for(lambda: all(nodes(d) == {other: 1} for d in mains), 20, "v1 on the main group")
        assert time.monotonic() - on_canaries >= SOAK - 0.5
        good = other

        # A commit whose check fails: rolled back on the canaries, never on the main group.
        dead = f"127.0.0.1:{free_port()}"
        broken = remote_repo.commit(config(dead), "v2 breaks orders")
        wait_for(lambda: all(broken in a.state().get("bad", {}) for n, a in agents.items()
                             if n.startswith("canary")), 20, "v2 refused on both canaries")
        assert all(nodes(d) == {good: 1} for d in canaries)
        # each main agent has read the canaries' statuses since: v2 failed there, it is held back for good
        wait_for(lambda: all("failed on canary agent(s)" in agents[f"main-{i}"].log() for i in range(3)), 20,
                 "the main group holding v2 back")
        assert all(nodes(d) == {good: 1} for d in mains)
        assert all("waits" in agents[f"main-{i}"].log() for i in range(3))

        # One canary down: it does not count, so two live canaries are not there; the main group waits.
        agents["canary-1"].kill()
        fixed = remote_repo.commit(config(good) | {"conf/extra.yaml": "routes: []\n"}, "v3")
        wait_for(lambda: agents["canary-0"].state().get("last_good") == fixed, 20, "v3 on the live canary")
        # once its status is older than two heartbeats, the main group counts canary-1 down and waits
        wait_for(lambda: "down, not counted: canary-1" in agents["main-0"].log(), 20, "canary-1 counted down")
        assert all(a.state().get("last_good") != fixed for n, a in agents.items() if n.startswith("main"))

        # Back, it takes v3, and after the soak the main group follows.
        agents["canary-1"].start()
        wait_for(lambda: all(a.state().get("last_good") == fixed for n, a in agents.items()
                             if n.startswith("main")), 30, "v3 on the main group")
