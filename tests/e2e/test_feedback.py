"""Feedback with real processes: `gitsync run` against a git daemon and APISIX doubles, posting commit
statuses to the GitHub contract double (every request checked against GitHub's published description)
and signed notifications to real receivers, through a commit that applies, one refused at render, one
rolled back by a health check and one held by the deletion guard; a fleet of five agents in two groups;
and receivers and a forge that are slow or down, which delay no sync."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from gitsync.testing.apisix import ApisixDouble
from testkit.agents import ADMIN_KEY, config, repo_url, upstream, wait_for
from testkit.forges import FORGE_TOKEN, PROJECT, ForgeDouble, Receiver
from testkit.forgeview import commit_page, posted_statuses
from testkit.processes import free_port, run_gitsync

pytestmark = pytest.mark.slow

NOTIFY_SECRET = "notify-secret-0b7e"
ROUTES = "conf/routes.yaml"


def plain(n: int) -> dict[str, str]:
    """A config whose route r1 serves /v<n> (no health checks)."""
    return {ROUTES: f"routes:\n  - id: r1\n    uri: /v{n}\n    upstream_id: u1\n"
                    "upstreams:\n  - id: u1\n    nodes: {\"127.0.0.1:1980\": 1}\n"}


@pytest.fixture
def secrets(tmp_path: Path) -> tuple[Path, Path]:
    token, notify = tmp_path / "forge-token", tmp_path / "notify-secret"
    token.write_text(FORGE_TOKEN)
    notify.write_text(NOTIFY_SECRET)
    return token, notify


@pytest.fixture
def github() -> Iterator[ForgeDouble]:
    with ForgeDouble("github") as double:
        yield double


def forge_flags(github: ForgeDouble, token: Path) -> list[str]:
    """GitHub Enterprise at the double's address: the API at <forge_url>/api/v3."""
    return ["--forge", "github", "--forge-url", github.url, "--forge-allow-http", "--forge-project", PROJECT,
            "--forge-token-file", str(token)]


def final(github: ForgeDouble, sha: str, context: str) -> dict | None:
    status = github.latest(sha).get(context)
    return status if status and status["state"] != "pending" else None


def test_four_outcomes_show_on_the_commit_and_are_notified(spawn, git_daemon, remote_repo, secrets, github,
                                                           tmp_path):
    token, notify = secrets
    with upstream() as node, Receiver(NOTIFY_SECRET) as receiver, \
            ApisixDouble(ADMIN_KEY, forward=True) as gateway:
        applied = remote_repo.commit(config(node), "orders to a live upstream")
        agent = spawn(repo_url(git_daemon, remote_repo), *forge_flags(github, token),
                      "--agent-name", "edge-1", "--proxy-url", gateway.proxy_url,
                      "--notify-url", receiver.url, "--notify-secret-file", str(notify),
                      gateways=[gateway.url])
        wait_for(lambda: final(github, applied, "gitsync"), 20, "the first commit's status")

        broken = remote_repo.commit({ROUTES: config(node)[ROUTES].replace("uri: /orders", "uri: 42")},
                                    "a route whose uri is a number")
        wait_for(lambda: final(github, broken, "gitsync"), 20, "the refused commit's status")
        dead = remote_repo.commit(config(f"127.0.0.1:{free_port()}"), "orders to an upstream that is down")
        wait_for(lambda: final(github, dead, "gitsync"), 20, "the rolled back commit's status")
        emptied = remote_repo.commit({ROUTES: config(node)[ROUTES].split("routes:")[0]}, "drop every route")
        wait_for(lambda: final(github, emptied, "gitsync"), 20, "the guarded commit's status")
        wait_for(lambda: len(receiver.deliveries) >= 4, 10, "four notifications")

        shown = {sha: github.latest(sha)["gitsync"] for sha in (applied, broken, dead, emptied)}
        assert shown[applied]["state"] == "success"
        assert shown[applied]["description"] == "applied to 1 gateway(s), health checks passed"
        assert shown[broken]["state"] == "failure"
        assert re.fullmatch(r"refused at validate: conf/routes\.yaml:\d+:\d+: routes\[orders\]\.uri: .+",
                            shown[broken]["description"])
        assert shown[dead]["state"] == "failure"
        assert shown[dead]["description"].startswith(
            f"rolled back: {gateway.url}: conf/checks.yaml:2:5: check orders-answer failed")
        assert shown[emptied]["state"] == "failure"
        assert shown[emptied]["description"].startswith(f"held by the deletion guard: {gateway.url}: routes:")
        for sha, status in shown.items():
            assert len(status["description"]) <= 140
            # "pending" while the agent works on it, unless the verdict came before pending was sent
            # (a queued status is replaced by a newer one of its commit); never pending after it
            states = [s["state"] for s in github.statuses[sha]]
            assert states[-1] == status["state"] and "pending" not in states[1:], states
            assert status["target_url"] == f"{github.url}/{PROJECT}/tree/gitsync/status/agents"
        assert github.violations == []
        assert all(r.headers["authorization"] == "***" for r in github.requests)

        assert [d.verified for d in receiver.deliveries] == [True] * len(receiver.deliveries)
        assert receiver.events() == ["applied", "refused", "rolled_back", "held_by_guard"]
        assert [d.json["subject"] for d in receiver.deliveries] == [  # every event names its commit's subject
            "orders to a live upstream", "a route whose uri is a number",
            "orders to an upstream that is down", "drop every route"]
        refused = receiver.deliveries[1].json
        assert (refused["commit"], refused["stage"], refused["agent"]) == (broken, "validate", "edge-1")
        assert refused["text"].startswith("❌ gitsync edge-1: refused ")
        assert "conf/routes.yaml" in refused["text"]
        assert agent.metric("gitsync_feedback_sent_total", channel="forge") >= 8
        assert agent.metric("gitsync_feedback_sent_total", channel="notify") == 4
        assert FORGE_TOKEN not in agent.log() and NOTIFY_SECRET not in agent.log()

        commits = [(applied, "orders to a live upstream", "applied"),
                   (broken, "a route whose uri is a number", "refused at render (validation)"),
                   (dead, "orders to an upstream that is down", "rolled back by a health check"),
                   (emptied, "drop every route", "held by the deletion guard")]
        page = commit_page(commits, github.requests)
        (tmp_path / "forge-status.html").write_text(page)
        (tmp_path / "github-requests.json").write_text(json.dumps(
            [vars(r) for r in github.requests], indent=1, ensure_ascii=False))
        assert page.count("Some checks were not successful") == 3
        assert page.count("All checks have passed") == 1


#: How long the slow forge and the slow receiver take to answer each request (seconds).
SLOW = 12.0


def test_a_slow_or_dead_receiver_and_a_slow_forge_delay_no_sync(spawn, git_daemon, remote_repo, secrets,
                                                                  apisix):
    token, notify = secrets
    with ForgeDouble("github", delay=SLOW) as slow_forge, Receiver(NOTIFY_SECRET, delay=SLOW) as slow:
        dead = f"http://127.0.0.1:{free_port()}/hook"
        first = remote_repo.commit(plain(1), "v1")
        agent = spawn(repo_url(git_daemon, remote_repo), *forge_flags(slow_forge, token),
                      "--notify-url", slow.url, "--notify-url", dead, "--notify-secret-file", str(notify),
                      gateways=[apisix.url])
        wait_for(lambda: agent.state().get("last_good") == first, 15, "v1 applied")
        durations, delays = [], []
        for n in range(2, 6):
            sha = remote_repo.commit(plain(n), f"v{n}")
            committed = time.monotonic()
            agent.hook()  # a push webhook: the agent syncs at once
            state = wait_for(lambda sha=sha: agent.state().get("last_good") == sha and agent.state(), 10,
                             f"v{n} applied")
            delays.append(time.monotonic() - committed)
            durations.append(state["last_result"]["duration"])
        # Each delivery takes SLOW seconds (the forge's and the slow receiver's), the dead one is retried:
        # a sync that waited for either would take that long; half of it leaves room for a loaded machine.
        assert max(durations) < SLOW / 2, durations
        assert max(delays) < SLOW / 2, delays
        wait_for(lambda: len(slow.deliveries) >= 2, 6 * SLOW, "the slow receiver's notifications")
        assert all(d.verified for d in slow.deliveries)
        wait_for(lambda: agent.metric("gitsync_feedback_failures_total", channel="notify") >= 2, 30,
                 "the dead receiver's failures counted")
        assert "notification to http://127.0.0.1" in agent.log() and "/hook" not in agent.log()


def shows(github: ForgeDouble, sha: str, expected: dict[str, tuple[str, str]]) -> bool:
    shown = github.latest(sha)
    return {c: (shown[c]["state"], shown[c]["description"]) for c in shown} == expected


def test_a_fleet_of_five_in_two_groups_shows_one_status_per_group(spawn, git_daemon, remote_repo, secrets,
                                                                   github, tmp_path):
    token, _ = secrets
    done = {"gitsync/canary": ("success", "2/2 applied (2 gateway(s))"),
            "gitsync/main": ("success", "3/3 applied (3 gateway(s))")}
    with ExitStack() as stack:
        doubles = [stack.enter_context(ApisixDouble(ADMIN_KEY)) for _ in range(5)]
        first = remote_repo.commit(plain(1), "v1")
        common = [*forge_flags(github, token), "--writeback", "on", "--status-heartbeat", "3s",
                  "--soak", "2s"]
        names = ["canary-1", "canary-2", "main-1", "main-2", "main-3"]
        for name, double in zip(names, doubles, strict=True):
            group = name.split("-")[0]
            follow = ["--after-group", "canary", "--after-count", "2"] if group == "main" else []
            spawn(repo_url(git_daemon, remote_repo), *common, "--group", group, "--agent-name", name, *follow,
                  gateways=[double.url], name=name)
        wait_for(lambda: shows(github, first, done), 40, "both groups' statuses on v1, every agent counted")

        second = remote_repo.commit(plain(2), "v2")
        wait_for(lambda: github.latest(second).get("gitsync/main"), 20, "the main group's first status on v2")
        assert github.latest(second)["gitsync/main"]["state"] == "pending"  # waiting for the canaries' soak
        try:
            wait_for(lambda: shows(github, second, done), 40, "both groups' statuses on v2")
        except AssertionError as exc:
            raise AssertionError(f"{exc}: {github.statuses.get(second)}") from None
        posts = posted_statuses(github.requests)[second]
        for context, size in (("gitsync/canary", 2), ("gitsync/main", 3)):
            mine = [(p["state"], p["description"]) for p in posts if p["context"] == context]
            # One writer per group (its first live agent by name), posting what changed: a handful of
            # statuses, not one per agent.
            assert mine[-1] == done[context] and len(mine) <= size + 2, mine
        assert next(state for context, state, _ in
                    ((p["context"], p["state"], 0) for p in posts) if context == "gitsync/main") == "pending"
        assert github.violations == []
        (tmp_path / "fleet-statuses.json").write_text(json.dumps(posts, indent=1, ensure_ascii=False))
        page = commit_page([(second, "v2", "a fleet of 5 agents in 2 groups")], github.requests)
        (tmp_path / "fleet-status.html").write_text(page)


def test_one_status_per_agent_when_asked_and_a_publish_job_for_the_groups(spawn, git_daemon, remote_repo,
                                                                         secrets, github, tmp_path):
    token, _ = secrets
    url = repo_url(git_daemon, remote_repo)
    with ApisixDouble(ADMIN_KEY) as one, ApisixDouble(ADMIN_KEY) as two:
        sha = remote_repo.commit(plain(1), "v1")
        common = [*forge_flags(github, token), "--writeback", "on"]
        spawn(url, *common, "--forge-status", "agent", "--group", "eu", "--agent-name", "eu-1",
              gateways=[one.url], name="eu-1")
        us = spawn(url, *common, "--forge-status", "off", "--group", "us", "--agent-name", "us-1",
                   gateways=[two.url], name="us-1")
        wait_for(lambda: final(github, sha, "gitsync/eu-1"), 20, "eu-1's own status")
        wait_for(lambda: us.state().get("last_good") == sha, 20, "us-1 applied v1")
        assert set(github.latest(sha)) == {"gitsync/eu-1"}  # us-1 posts none

        def publish():
            return run_gitsync("status", "--fleet", "--publish", "--repo", url, *forge_flags(github, token),
                               "--state-dir", str(tmp_path / "publisher"))

        first = wait_for(lambda: (r := publish()).returncode == 0 and "gitsync/us: success" in r.stdout and r,
                         20, "the publish job")
        assert f"gitsync/eu: success on {sha[:7]}: 1/1 applied (1 gateway(s))" in first.stdout
        assert f"gitsync/us: success on {sha[:7]}: 1/1 applied (1 gateway(s))" in first.stdout
        posted = len(github.statuses[sha])
        assert publish().returncode == 0 and len(github.statuses[sha]) == posted  # nothing posted again
        assert set(github.latest(sha)) == {"gitsync/eu-1", "gitsync/eu", "gitsync/us"}
        assert github.violations == []
