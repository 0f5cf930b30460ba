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
from testkit.gitservers import BareRepo
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


def test_a_canary_group_with_a_status_repo_of_its_own_still_gates_the_main_group(
        spawn, git_daemon, remote_repo, remotes_root, doubles):
    """`status_remote` with {group}: each group writes its statuses to its own repo (no push of one group
    contends with another's), the main group's gate reads the canary group's repo, and the config repo
    holds no status at all. Beside the canary's ref, 2,000 refs of other groups in the canary's repo are
    never read (the gate lists canary/ alone)."""
    canary, mains = doubles[0], doubles[1:3]
    for group in ("canary", "main"):
        BareRepo.create(remotes_root / f"{remote_repo.path.name}-status-{group}.git")
    template = git_daemon.url(f"{remote_repo.path.name}-status-{{group}}.git")
    canary_repo = BareRepo(remotes_root / f"{remote_repo.path.name}-status-canary.git")
    with upstream() as good, upstream(b'{"status": "ok", "v": 1}') as other:
        remote_repo.commit(config(good), "v0")
        common = ["--writeback", "on", "--soak", f"{SOAK:g}s", "--status-remote", template]
        # the canary's heartbeat every second; the main group counts it live within two of its own
        # periods (2 s): a push to a repo with 2,000 refs more, on a loaded machine, may come late
        agents = {"canary-0": spawn(repo_url(git_daemon, remote_repo), *common, "--status-heartbeat", "1s",
                                    "--group", "canary",
                                    "--agent-name", "canary-0", "--proxy-url", canary.proxy_url,
                                    gateways=[canary.url], name="canary-0")}
        wait_for(lambda: nodes(canary) == {good: 1}, 30, "v0 on the canary")
        seed = wait_for(lambda: canary_repo.git("for-each-ref", "--format=%(objectname)",
                                                "refs/gitsync/status/canary/canary-0"), 20, "its status")
        canary_repo.git("update-ref", "--stdin", input="".join(
            f"create refs/gitsync/status/other-{i % 20}/agent-{i} {seed}\n" for i in range(2000)).encode())
        for i, double in enumerate(mains):
            agents[f"main-{i}"] = spawn(repo_url(git_daemon, remote_repo), *common, "--status-heartbeat",
                                        "2s", "--group", "main", "--after-group", "canary", "--after-count",
                                        "1", "--agent-name", f"main-{i}", "--proxy-url", double.proxy_url,
                                        gateways=[double.url], name=f"main-{i}")
        wait_for(lambda: all(nodes(d) == {good: 1} for d in mains), 30, "v0 on the main group")

        remote_repo.commit(config(other), "v1")
        wait_for(lambda: nodes(canary) == {other: 1}, 20, "v1 on the canary")
        on_canary = time.monotonic()
        assert all(nodes(d) == {good: 1} for d in mains)
        wait_for(lambda: all(nodes(d) == {other: 1} for d in mains), 20, "v1 on the main group")
        assert time.monotonic() - on_canary >= SOAK - 0.5

        broken = remote_repo.commit(config(f"127.0.0.1:{free_port()}"), "v2 breaks orders")
        wait_for(lambda: broken in agents["canary-0"].state().get("bad", {}), 20, "v2 refused on the canary")
        wait_for(lambda: all("failed on canary agent(s)" in agents[f"main-{i}"].log() for i in range(2)), 20,
                 "the main group holding v2 back")
        assert all(nodes(d) == {other: 1} for d in mains)

    main_repo = BareRepo(remotes_root / f"{remote_repo.path.name}-status-main.git")
    assert main_repo.git("for-each-ref", "--format=%(refname)", "refs/gitsync/status/").split() == [
        "refs/gitsync/status/main/main-0", "refs/gitsync/status/main/main-1"]
    assert remote_repo.git("for-each-ref", "refs/gitsync/status/") == ""  # the config repo: none
    for agent in agents.values():
        assert "Traceback" not in agent.log()
        assert "ignored" not in agent.log()  # the 2,000 others were never listed, so never ignored
