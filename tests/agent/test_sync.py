"""The agent in-process: decisions that need no daemon around them (policy changes, drift = report)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from gitsync.agent.outcomes import Trigger
from gitsync.agent.sync import Agent
from gitsync.settings import load
from gitsync.testing import apisix as double
from gitsync.testing.apisix import ApisixDouble
from gitsync.timing import Clock
from testkit.processes import run_gitsync, wait_for

ROUTES = """\
routes:
  - id: r1
    uri: /a
    upstream:
      type: roundrobin
      nodes: {"127.0.0.1:1980": 1}
"""
MANAGER = {"id": "vault/ops", "uri": "http://127.0.0.1:8200", "prefix": "kv", "token": "ops-token-1"}


@pytest.fixture
def agent_for(tmp_path: Path, apisix: ApisixDouble, remote_repo):
    remote_repo.commit({"apisix.yaml": ROUTES}, "routes")
    key = tmp_path / "admin_key"
    key.write_text("test-admin-key")

    made: list[Agent] = []

    def make(**flags: object) -> Agent:
        settings = load({"repo": str(remote_repo.path), "gateways": [apisix.url], "admin_key_file": str(key),
                         "state_dir": str(tmp_path / "state"), "writeback": "off", **flags},
                        config="/dev/null", env={})
        made.append(Agent(settings))
        return made[-1]

    yield make
    for agent in made:  # a test that failed before its own close leaves no threads behind
        agent.close()


def test_a_changed_unmanaged_policy_is_applied_without_a_new_commit(agent_for, apisix: ApisixDouble):
    apisix.out_of_band("secrets", [MANAGER])
    kept = agent_for(unmanaged=["secrets"])
    assert kept.sync_once().result == "applied"
    assert apisix.config()["secrets"] == [MANAGER]
    assert kept.sync_once().result == "noop"
    kept.close()
    # Same commit, same gateway digest, but the operator now wants secrets managed: prune them.
    managing = agent_for()
    outcome = managing.sync_once()
    assert outcome.result == "healed"
    assert outcome.gateways[0].pruned == {"secrets": ("vault/ops",)}
    assert "secrets" not in apisix.config()
    assert managing.sync_once().result == "noop"
    managing.close()


def test_drift_report_only_reports(agent_for, apisix: ApisixDouble):
    agent = agent_for(drift="report")
    assert agent.sync_once().result == "applied"
    puts = len(apisix.put_bodies)
    apisix.restart()  # the gateway comes back empty
    outcome = agent.sync_once({Trigger.DRIFT})
    assert outcome.result == "drift_reported"
    assert list(outcome.problems) == [f"{apisix.url}: drifted from {outcome.commit[:7]}"]
    assert len(apisix.put_bodies) == puts and "routes" not in apisix.config()
    assert agent.metrics.drift_detected.labels(apisix.url)._value.get() == 1
    agent.close()


def test_a_poll_asks_each_gateway_once_and_heals_one_that_lost_the_config(agent_for, apisix: ApisixDouble):
    agent = agent_for()
    assert agent.sync_once().result == "applied"
    before = len(apisix.requests)
    assert agent.sync_once().result == "noop"
    assert [(m, status) for m, _, status in apisix.requests[before:]] == [("HEAD", 200)]  # the probe alone
    apisix.restart()  # the probe's HEAD now carries no digest: the config is gone
    outcome = agent.sync_once()
    assert outcome.result == "healed" and [r["id"] for r in apisix.config()["routes"]] == ["r1"]
    agent.close()


def test_a_poll_trusts_the_drift_watchs_recent_head_and_asks_when_it_is_old(agent_for, apisix: ApisixDouble):
    """The daemon's poll does not repeat the HEAD its drift watch made within `drift_interval` and
    that showed our push; any other sync asks, and so does a poll once that answer is older."""
    agent = agent_for(drift_interval=0.5)
    assert agent.sync_once().result == "applied"  # its read-back's HEAD showed our push
    before = len(apisix.requests)
    assert agent.sync_once({Trigger.POLL}).result == "noop"
    assert apisix.requests[before:] == []  # the git check alone
    assert agent.sync_once({Trigger.WEBHOOK}).result == "noop"
    assert [m for m, _, _ in apisix.requests[before:]] == ["HEAD"]
    wait_for(lambda: agent.gateways.pool.client(apisix.url).recent_head(0.5) is None, 5,
             "the last HEAD older than drift_interval")
    before = len(apisix.requests)
    assert agent.sync_once({Trigger.POLL}).result == "noop"
    assert [m for m, _, _ in apisix.requests[before:]] == ["HEAD"]  # older than drift_interval: asked
    apisix.restart()  # emptied: the drift watch sees it, and the poll that follows asks again
    assert agent.drift_suspects() == [apisix.url]
    outcome = agent.sync_once({Trigger.POLL})
    assert outcome.result == "healed" and [r["id"] for r in apisix.config()["routes"]] == ["r1"]
    agent.close()


def test_a_poll_that_finds_a_new_commit_asks_the_gateway_before_its_push(agent_for, apisix: ApisixDouble,
                                                                         remote_repo):
    """A recent answer is enough to do nothing, not to skip the GET before a push: that needs the
    HEAD of now."""
    agent = agent_for()
    assert agent.sync_once().result == "applied"
    remote_repo.commit({"apisix.yaml": ROUTES.replace("/a", "/b")}, "a new uri")
    before = len(apisix.requests)
    assert agent.sync_once({Trigger.POLL}).result == "applied"
    methods = [m for m, _, _ in apisix.requests[before:]]
    assert methods[:2] == ["HEAD", "PUT"] and "GET" not in methods, methods
    agent.close()


METADATA = """\
plugin_metadata:
  - id: http-logger
    log_format:
      host: "$host"
"""


@pytest.mark.slow
def test_removing_pushed_plugin_metadata_is_reported_as_removed_not_pruned(agent_for, apisix,
                                                                           remote_repo, tmp_path):
    """plugin_metadata carries no modifiedIndex: what gitsync pushed is remembered (pushed.json)."""
    remote_repo.commit({"apisix.yaml": ROUTES, "meta.yaml": METADATA}, "with metadata")
    agent = agent_for()
    assert agent.sync_once().result == "applied"
    agent.close()
    stray = {"id": "syslog", "host": "x"}  # written by someone else
    apisix.out_of_band("plugin_metadata", [*apisix.config()["plugin_metadata"], stray])
    remote_repo.commit({"meta.yaml": None}, "metadata gone")
    # gitsync diff on the agent's host (its state dir) tells them apart the same way.
    diff = run_gitsync("diff", "--repo", str(remote_repo.path), "--gateway", apisix.url, "--admin-key-file",
                       str(tmp_path / "admin_key"), "--state-dir", str(tmp_path / "state"))
    assert diff.returncode == 4, diff.stderr  # the guard would hold it: every plugin_metadata item goes
    assert "    - plugin_metadata[http-logger]\n" in diff.stdout, diff.stdout
    assert "    ! plugin_metadata[syslog]  (written out of band; pruned)" in diff.stdout, diff.stdout
    again = agent_for(allow_delete=["plugin_metadata"])  # a new process: it reads what it pushed from disk
    outcome = again.sync_once()
    (kind,) = [k for k in outcome.gateways[0].plan.kinds if k.key == "plugin_metadata"]
    assert kind.removed == ("http-logger",) and kind.pruned == ("syslog",)
    again.close()


def test_a_sync_changes_no_item_the_render_cache_shares(agent_for, apisix, remote_repo, tmp_path):
    """Render hands out one object per cached document (Document.shared): a stage that changed an
    item in place would corrupt every later render. Everything a sync does runs here, then each
    shared document is compared with a fresh copy of what was parsed."""
    sample = Path(__file__).resolve().parents[2] / "sample-repo" / "base"
    files = {f"base/{p.relative_to(sample)}": p.read_text() for p in sample.rglob("*.yaml")}
    remote_repo.commit(files, "the sample repo", replace=True)
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    (secrets / "VAULT_TOKEN").write_text("s.vault-token-for-tests")
    agent = agent_for(paths=["base"], allow_delete=["all"], secrets_dir=str(secrets))
    apisix.out_of_band("consumers", [{"username": "other", "plugins": {"key-auth": {"key": "k-other"}}}])
    assert agent.sync_once().ok
    apisix.restart()
    assert agent.sync_once().ok  # a heal: plans on a fresh GET
    (repo,) = agent.repos.all
    documents = [doc for parsed, _ in repo.memo._entries.values() for doc in parsed.documents]
    assert documents and all(doc.shared == doc.data for doc in documents)
    agent.close()


@pytest.mark.slow
def test_a_poll_that_changes_nothing_does_not_rewrite_the_state_file(agent_for, apisix, tmp_path):
    """A durable write was most of a no-op poll's own cost: a repeat only moves the file's time, which
    `gitsync status` shows as when the agent last looked."""
    agent = agent_for()
    assert agent.sync_once().result == "applied"
    state = tmp_path / "state" / "state.json"
    assert agent.sync_once().result == "noop"  # the first no-op after a change is saved
    saved, inode = state.read_bytes(), state.stat().st_ino
    os.utime(state, (1_000_000_000, 1_000_000_000))
    assert agent.sync_once().result == "noop"
    assert state.read_bytes() == saved and state.stat().st_ino == inode  # not written again
    assert state.stat().st_mtime > 1_000_000_000  # touched
    apisix.restart()
    assert agent.sync_once().result == "healed"
    assert state.stat().st_ino != inode  # a sync that did something is saved
    agent.close()

    result = run_gitsync("status", "--state-dir", str(tmp_path / "state"))
    assert "result:   healed" in result.stdout
    assert "checked:" not in result.stdout  # the last save is the last look
    os.utime(state, (time.time() + 60, time.time() + 60))
    assert "nothing changed since" in run_gitsync("status", "--state-dir", str(tmp_path / "state")).stdout


def test_a_config_the_gateway_cannot_hold_is_refused_and_the_last_good_one_put_back(
        agent_for, apisix, remote_repo, monkeypatch):
    """APISIX keeps the config in a shared dict (10 MiB): a PUT that does not fit evicts the config it
    held from the Admin API's view and fails, while the workers keep serving it (a small dict here)."""
    agent = agent_for()
    assert agent.sync_once().result == "applied"
    good, held = agent.state.last_good, apisix.running("routes")
    monkeypatch.setattr(double, "SHARED_DICT_BYTES", len(double.cjson_encode(apisix.config())) + 200)
    more = "".join(f"  - id: r{i}\n    uri: /r{i}\n    upstream:\n      type: roundrobin\n"
                   f"      nodes: {{\"127.0.0.1:1980\": 1}}\n" for i in range(2, 12))
    remote_repo.commit({"apisix.yaml": ROUTES + more}, "ten routes more")
    outcome = agent.sync_once("webhook")
    assert outcome.result == "failed" and outcome.commit in agent.state.bad
    assert "the gateway cannot hold this config" in outcome.problems[0]
    assert len([m for m, _, _ in apisix.requests if m == "PUT"]) == 2  # refused once, not retried
    assert agent.state.last_good == good and "X-Digest" not in apisix.config()  # evicted from the dict
    assert apisix.running("routes") == held  # the data plane still serves the last good commit
    assert agent.drift_suspects() == [apisix.url]
    assert agent.sync_once("drift").result == "healed"
    assert [r["id"] for r in apisix.config()["routes"]] == ["r1"] and apisix.running("routes") == held
    agent.close()


def test_a_first_sync_reads_a_new_gateway_while_it_renders(agent_for, apisix: ApisixDouble):
    """A gateway never pushed to needs a GET before its push: it starts before the commit's render
    (which a sync that fetches at once does while the gateways answer), so the two overlap."""
    agent = agent_for()
    events: list[str] = []
    read_live, render = agent.gateways.pool.read_live, agent._render

    def reading(urls):
        urls = list(urls)
        events.extend(f"GET {url}" for url in urls)
        return read_live(urls)

    def rendering(sha: str, *, fetch: bool, run):
        events.append("render")
        return render(sha, fetch=fetch, run=run)

    agent.gateways.pool.read_live, agent._render = reading, rendering
    assert agent.sync_once({Trigger.CLI}).result == "applied"
    assert events[:2] == [f"GET {apisix.url}", "render"], events
    assert events.count(f"GET {apisix.url}") == 1  # the push took that GET: no second one
    assert [m for m, path, _ in apisix.requests if path.startswith("/apisix/admin/configs")].count("GET") == 1


def test_a_gateway_that_cannot_show_its_digest_counts_as_healed_when_it_needed_puts(tmp_path: Path,
                                                                                    remote_repo):
    """APISIX before 3.14 has no HEAD digest, so a lost config is not seen as drift before the push; a
    push of the commit it was given that had to change it is a drift heal all the same."""
    remote_repo.commit({"apisix.yaml": ROUTES}, "routes")
    key = tmp_path / "admin_key"
    key.write_text("test-admin-key")
    with ApisixDouble("test-admin-key", version="3.13.0") as old:
        settings = load({"repo": str(remote_repo.path), "gateways": [old.url], "admin_key_file": str(key),
                         "state_dir": str(tmp_path / "state"), "writeback": "off"},
                        config="/dev/null", env={})
        agent = Agent(settings)
        try:
            heals = agent.metrics.drift_heals.labels(old.url)
            assert agent.sync_once().result == "applied"
            assert agent.sync_once().result == "noop" and heals._value.get() == 0
            old.restart()
            assert agent.sync_once({Trigger.DRIFT}).result == "healed"
            assert heals._value.get() == 1
            assert agent.sync_once().result == "noop" and heals._value.get() == 1
        finally:
            agent.close()


def test_the_agent_reads_the_time_from_the_clock_it_is_given(tmp_path: Path, remote_repo):
    """Every time the agent records or compares comes from its clock: a canary's soak of an hour ends
    when the clock says so, and what the agent records carries the clock's time."""
    remote_repo.commit({"apisix.yaml": ROUTES}, "routes")
    key = tmp_path / "admin_key"
    key.write_text("test-admin-key")
    now = [1_800_000_000.0]
    clock = Clock(wall=lambda: now[0])
    with ApisixDouble("test-admin-key") as canary, ApisixDouble("test-admin-key") as other:
        settings = load({"repo": str(remote_repo.path), "gateways": [canary.url, other.url],
                         "admin_key_file": str(key), "state_dir": str(tmp_path / "state"), "writeback": "off",
                         "rollout": "canary", "soak": "1h"}, config="/dev/null", env={})
        agent = Agent(settings, clock=clock)
        try:
            started = now[0]
            assert agent.sync_once().result == "canary"
            assert agent.state.gateways[canary.url].since == started and not other.config().get("routes")
            now[0] += 3599
            soaking = agent.sync_once()
            assert soaking.result == "soaking" and soaking.wake_at == started + 3600
            now[0] += 1  # the soak is over by the clock, not by waiting an hour
            assert agent.sync_once().result == "applied"
            assert other.config()["routes"][0]["uri"] == "/a"
            assert agent.view().time == now[0] and agent.view().history[0].time == now[0]
            assert agent.state.last_result["time"].startswith("2027-01-15T09:00:00")  # 1,800,003,600 s
        finally:
            agent.close()
