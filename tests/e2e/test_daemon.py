"""`gitsync run` as a real process, against a real git remote and the APISIX double: the faults a
production week brings. Plus unit tests of `Triggers` and `Backoff`.

Every agent here polls every second (or never, where a test shows another trigger), so each test
waits on deadlines, never on fixed sleeps.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from gitsync.agent.outcomes import Trigger
from gitsync.backoff import Backoff
from gitsync.daemon.service import Daemon, Triggers
from gitsync.settings import load
from gitsync.testing.apisix import ApisixDouble
from testkit.agents import ADMIN_KEY, config_files, live_uri, repo_url
from testkit.gitservers import git
from testkit.processes import wait_for

# ---------------------------------------------------------------------------------------------------------
# polls and webhooks


@pytest.mark.slow
def test_a_pushed_commit_is_live_after_the_next_poll(spawn, git_daemon, remote_repo, apisix):
    first = remote_repo.commit(config_files(1), "v1")
    agent = spawn(repo_url(git_daemon, remote_repo), gateways=[apisix.url])
    wait_for(lambda: live_uri(apisix) == "/v1", 10, "the first commit live")
    wait_for(lambda: agent.state().get("last_good") == first, 2, "state.json naming it")

    second = remote_repo.commit(config_files(2), "v2")
    started = time.monotonic()
    wait_for(lambda: live_uri(apisix) == "/v2", 5, "the second commit live after a poll")
    assert time.monotonic() - started < 1 + 1.5  # one interval, plus the sync itself
    wait_for(lambda: agent.state().get("last_good") == second, 2, "state.json naming the new commit")


@pytest.mark.slow
def test_webhook_applies_at_once_and_is_never_lost_during_a_sync(spawn, git_daemon, remote_repo, apisix):
    remote_repo.commit(config_files(1), "v1")
    agent = spawn(repo_url(git_daemon, remote_repo), "--interval", "1h", "--drift-interval", "1h",
                  gateways=[apisix.url])
    wait_for(lambda: live_uri(apisix) == "/v1", 10, "the first commit live (sync at start)")
    wait_for(lambda: agent.metric("gitsync_syncs_total", result="applied") == 1, 2, "the first sync counted")

    remote_repo.commit(config_files(2), "v2")
    started = time.monotonic()
    assert agent.hook() == 202
    wait_for(lambda: live_uri(apisix) == "/v2", 1, "the webhook's commit live in under a second")
    assert time.monotonic() - started < 1

    # A wrong signature: 401, and no sync at all (counted from when v2's sync is recorded: it ends
    # after its PUT, with the read-back).
    wait_for(lambda: agent.metric("gitsync_syncs_total", result="applied") == 2, 5, "v2's sync recorded")
    syncs = agent.syncs()
    assert agent.hook(secret="not-the-secret") == 401
    assert agent.hook(body=b'{"ref": "x"}' + b" " * 10, secret="") == 401
    assert agent.metric("gitsync_webhook_requests_total", provider="github", result="unauthorized") == 2
    # (that they set off no sync is counted below: the two syncs of v3 and v4 are the only ones)

    # A webhook that arrives while a (slow) sync runs leads to one more sync.
    apisix.set_latency(0.3)
    requests_before = len(apisix.requests)
    remote_repo.commit(config_files(3), "v3")
    assert agent.hook() == 202
    wait_for(lambda: len(apisix.requests) > requests_before, 3, "the sync of v3 talking to the gateway")
    fourth = remote_repo.commit(config_files(4), "v4")
    assert agent.hook() == 202
    wait_for(lambda: agent.state().get("last_good") == fourth, 8, "v4, whose webhook came during a sync")
    assert live_uri(apisix) == "/v4"
    # v3's sync had read the remote before v4 existed: v4 came from the second, re-triggered sync.
    assert agent.metric("gitsync_syncs_total", result="applied") == 4
    assert agent.syncs() == syncs + 2  # and the refused webhooks set off none
    apisix.set_latency(0)


# ---------------------------------------------------------------------------------------------------------
# faults


@pytest.mark.slow
def test_a_restarted_gateway_is_refilled_by_the_drift_watch_with_the_remote_down(
        spawn, own_daemon, remote_repo, apisix):
    first = remote_repo.commit(config_files(1), "v1")
    agent = spawn(repo_url(own_daemon, remote_repo), "--interval", "1h", "--drift-interval", "1s",
                  gateways=[apisix.url])
    wait_for(lambda: live_uri(apisix) == "/v1", 10, "the first commit live")
    own_daemon.stop()

    apisix.restart()  # APISIX restarted: its memory is empty
    assert live_uri(apisix) is None
    started = time.monotonic()
    wait_for(lambda: live_uri(apisix) == "/v1", 2 + 1, "the gateway refilled from the mirror")
    assert time.monotonic() - started < 1 + 1  # drift_interval + 1 s
    assert apisix.running("routes")["r1"]["uri"] == "/v1"  # the data plane serves it again
    wait_for(lambda: agent.metric("gitsync_drift_heals_total", gateway=apisix.url) >= 1, 2, "a heal counted")
    assert agent.state()["last_good"] == first


@pytest.mark.slow
def test_a_gateway_back_after_a_long_outage_is_refilled_without_waiting_out_its_backoff(
        spawn, git_daemon, remote_repo, apisix):
    remote_repo.commit(config_files(1), "v1")
    agent = spawn(repo_url(git_daemon, remote_repo), "--interval", "1h", "--push-attempts", "1",
                  gateways=[apisix.url])
    wait_for(lambda: live_uri(apisix) == "/v1", 10, "the first commit live")
    apisix.stop()  # APISIX down (an upgrade, a crash loop) ...
    # Failures 1-3 wait 0.5-1, 1-2, 2-4 s: after the fourth, the next try is 4-8 s away.
    # (a precondition: up to 7 s of backoff by the clock, more on a loaded machine)
    wait_for(lambda: agent.log().count("next attempt in") >= 4, 30, "four failed pushes")
    apisix.restart()  # ... and back, empty
    started = time.monotonic()
    wait_for(lambda: live_uri(apisix) == "/v1", 3, "the gateway refilled")
    assert time.monotonic() - started < 1 + 1  # drift_interval + 1 s, not the backoff


@pytest.mark.slow
def test_a_gateway_back_during_a_retry_pause_is_refilled_at_once(spawn, git_daemon, remote_repo, apisix):
    """The push loop's pause before its next attempt ends when the gateway answers again."""
    remote_repo.commit(config_files(1), "v1")
    agent = spawn(repo_url(git_daemon, remote_repo), "--interval", "1h", gateways=[apisix.url])
    wait_for(lambda: live_uri(apisix) == "/v1", 10, "the first commit live")
    apisix.stop()
    # Attempts 1-4 have failed; the pause before the fifth is 2-4 s long.
    wait_for(lambda: "(attempt 5/5)" in agent.log(), 15, "the last retry's pause")
    apisix.restart()  # back, and empty
    started = time.monotonic()
    wait_for(lambda: live_uri(apisix) == "/v1", 3, "the gateway refilled")
    assert time.monotonic() - started < 1 + 1  # drift_interval + 1 s, not the rest of the pause
    assert "answers again; retrying now" in agent.log()


@pytest.mark.slow
def test_a_hung_gateway_delays_neither_the_others_nor_a_webhook(spawn, git_daemon, remote_repo, apisix):
    remote_repo.commit(config_files(1), "v1")
    with ApisixDouble(ADMIN_KEY) as hung:
        hung.set_latency(30)  # answers nothing within any deadline
        agent = spawn(repo_url(git_daemon, remote_repo), "--interval", "1h", "--gateway-timeout", "3s",
                      gateways=[hung.url, apisix.url])
        wait_for(lambda: live_uri(apisix) == "/v1", 5, "the first commit live on the healthy gateway")
        remote_repo.commit(config_files(2), "v2")
        started = time.monotonic()
        assert agent.hook() == 202
        wait_for(lambda: live_uri(apisix) == "/v2", 5, "the webhook's commit live on the healthy gateway")
        # Well within one deadline of the hung gateway, whose pushes go on on their own worker.
        assert time.monotonic() - started < 3
        assert "still running; the agent moves on" in agent.log()
        ready = agent.get("/readyz")
        assert ready.status_code == 503 and hung.url in ready.json()["reason"]
        hung.set_latency(0)


@pytest.mark.slow
def test_a_commit_applied_while_one_gateway_is_down_is_the_last_good_one(
        spawn, git_daemon, remote_repo, apisix):
    """Neither a bad commit nor the down gateway's return may take the others back to an older commit."""
    remote_repo.commit(config_files(1), "v1")
    with ApisixDouble(ADMIN_KEY) as other:
        agent = spawn(repo_url(git_daemon, remote_repo), "--push-attempts", "1",
                      gateways=[apisix.url, other.url])
        wait_for(lambda: live_uri(apisix) == live_uri(other) == "/v1", 10, "v1 live on both gateways")
        other.stop()
        second = remote_repo.commit(config_files(2), "v2")
        wait_for(lambda: live_uri(apisix) == "/v2", 5, "v2 live on the gateway that is up")
        wait_for(lambda: agent.state().get("last_good") == second, 3, "v2 recorded as the last good commit")
        bad = remote_repo.commit(config_files(3, bad=True), "bad")
        wait_for(lambda: bad in agent.state().get("bad", {}), 5, "the bad commit refused")
        syncs = agent.syncs()
        wait_for(lambda: agent.syncs() > syncs, 5, "a poll after the refusal")
        assert live_uri(apisix) == "/v2"

        other.restart()  # back, empty, with the remote's tip a bad commit: it gets v2
        wait_for(lambda: live_uri(other) == "/v2", 1 + 1, "the gateway back from its outage refilled")
        assert live_uri(apisix) == "/v2"


@pytest.mark.slow
def test_a_bad_commit_is_refused_recorded_and_noted_and_the_next_good_one_applies(
        spawn, git_daemon, remote_repo, apisix):
    remote_repo.commit(config_files(1), "v1")
    agent = spawn(repo_url(git_daemon, remote_repo), gateways=[apisix.url])
    wait_for(lambda: live_uri(apisix) == "/v1", 10, "the first commit live")
    puts, live = len(apisix.put_bodies), apisix.config()

    bad = remote_repo.commit(config_files(2, bad=True), "a route with a number as uri")
    state = wait_for(lambda: bad in agent.state().get("bad", {}) and agent.state(), 5, "the bad commit")
    assert state["bad"][bad].startswith("validate: conf/apisix.yaml:8:5: routes[r1].uri: invalid config")
    syncs = agent.syncs()
    wait_for(lambda: agent.syncs() > syncs, 5, "one more poll")  # the known-bad tip is not tried again
    assert len(apisix.put_bodies) == puts and apisix.config() == live

    note = wait_for(lambda: git("--git-dir", str(remote_repo.path), "notes", "--ref=gitsync", "show", bad,
                                check=False), 5, "the git note on the bad commit")
    assert "conf/apisix.yaml:" in note and "routes[r1].uri" in note
    status = subprocess.run([sys.executable, "-m", "gitsync", "status", "--state-dir", str(agent.state_dir)],
                            env=agent.env, capture_output=True, text=True, timeout=30)
    assert status.returncode == 0, status.stderr
    assert bad in status.stdout and "routes[r1].uri" in status.stdout, status.stdout
    # Ready: the gateway serves the last good commit; the refused tip is its own condition.
    ready = agent.get("/readyz")
    assert ready.status_code == 200 and f"the tip {bad[:7]} is refused" in ready.json()["reason"]
    assert agent.metric("gitsync_tip_refused") == 1

    good = remote_repo.commit(config_files(3), "v3")
    wait_for(lambda: live_uri(apisix) == "/v3", 5, "the next good commit live")
    wait_for(lambda: agent.state().get("last_good") == good, 2, "state.json naming the good commit")
    wait_for(lambda: agent.metric("gitsync_tip_refused") == 0, 2, "the tip no longer refused")


@pytest.mark.slow
def test_a_git_remote_down_for_a_while_backs_off_and_recovers(spawn, own_daemon, remote_repo, apisix):
    remote_repo.commit(config_files(1), "v1")
    agent = spawn(repo_url(own_daemon, remote_repo), "--max-backoff", "2s", gateways=[apisix.url])
    wait_for(lambda: live_uri(apisix) == "/v1", 10, "the first commit live")

    own_daemon.stop()
    second = remote_repo.commit(config_files(2), "v2")  # pushed while the agent cannot see it
    wait_for(lambda: agent.log().count("retrying at the first poll after") >= 2, 8,
             "two failed polls, logged with their backoff")
    assert agent.metric("gitsync_fetch_failures_total") >= 2
    assert agent.healthy() and live_uri(apisix) == "/v1"
    # Ready: every gateway serves the last good commit; the remote's outage shows in the metrics.
    assert agent.get("/readyz").status_code == 200

    own_daemon.start()
    wait_for(lambda: live_uri(apisix) == "/v2", 2 + 1 + 2, "the commit pushed during the outage live")
    wait_for(lambda: agent.state().get("last_good") == second, 2, "state.json naming it")
    wait_for(lambda: agent.get("/readyz").status_code == 200, 3, "ready again")


@pytest.mark.slow
def test_a_webhook_tries_the_remote_at_once_even_during_a_long_backoff(
        spawn, own_daemon, remote_repo, apisix):
    remote_repo.commit(config_files(1), "v1")
    agent = spawn(repo_url(own_daemon, remote_repo), "--interval", "200ms", "--max-backoff", "1h",
                  gateways=[apisix.url])
    wait_for(lambda: live_uri(apisix) == "/v1", 10, "the first commit live")
    own_daemon.stop()
    # Failures 1-4 wait 0.1-0.2, 0.2-0.4, 0.4-0.8, 0.8-1.6 s: the fifth waits 1.6-3.2 s.
    wait_for(lambda: agent.metric("gitsync_fetch_failures_total") >= 5, 8, "five failed polls")
    own_daemon.start()
    remote_repo.commit(config_files(2), "v2")
    started = time.monotonic()
    assert agent.hook() == 202
    wait_for(lambda: live_uri(apisix) == "/v2", 1, "the webhook's commit live in spite of the backoff")
    assert time.monotonic() - started < 1


@pytest.mark.slow
def test_sigkill_at_random_moments_never_corrupts_state_and_a_restart_converges(
        spawn, git_daemon, remote_repo, apisix):
    kills = 20
    rng = random.Random(int(os.environ.get("GITSYNC_TEST_SEED", time.time())))
    remote_repo.commit(config_files(0), "v0")
    stop = threading.Event()
    counter = [0]

    def keep_committing() -> None:
        while not stop.wait(rng.uniform(0.1, 0.4)):
            counter[0] += 1
            remote_repo.commit(config_files(counter[0]), f"v{counter[0]}")

    committer = threading.Thread(target=keep_committing, daemon=True)
    committer.start()
    apisix.set_latency(0.05)  # a sync takes ~0.25 s: about half of the kills land inside one
    agent = None
    try:
        for _ in range(kills):
            agent = spawn(repo_url(git_daemon, remote_repo), "--interval", "200ms", gateways=[apisix.url],
                          wait=False)
            time.sleep(rng.uniform(0, 1.5))
            agent.signal(signal.SIGKILL)
            agent.wait(10)
            agent.state()  # parses, at every moment
    finally:
        stop.set()
        committer.join()
    apisix.set_latency(0)
    assert agent is not None
    tip = remote_repo.tip()
    agent.start()
    wait_for(lambda: live_uri(apisix) == f"/v{counter[0]}", 10, "the gateway holding the remote's tip")
    wait_for(lambda: agent.state().get("last_good") == tip, 3, "state.json naming the tip")
    assert not list(agent.state_dir.glob("*.corrupt")), "a state file was found unreadable"
    mirror = agent.state_dir / "mirror"
    git("--git-dir", str(mirror), "fsck", "--connectivity-only", "--no-dangling")
    agent.signal(signal.SIGTERM)
    assert agent.wait(15) == 0


@pytest.mark.slow
def test_sigterm_during_a_push_lets_it_finish_and_exits_0(spawn, git_daemon, remote_repo, apisix):
    first = remote_repo.commit(config_files(1), "v1")
    apisix.set_latency(2)
    agent = spawn(repo_url(git_daemon, remote_repo), gateways=[apisix.url])
    # The push has begun once the gateway answered its GET; the PUT is still to come.
    wait_for(lambda: any(m == "GET" for m, _, _ in apisix.requests), 10, "the push reading the live config")
    assert not apisix.put_bodies
    agent.signal(signal.SIGTERM)
    assert agent.wait(30) == 0
    assert len(apisix.put_bodies) == 1 and live_uri(apisix) == "/v1"
    assert agent.state()["last_good"] == first
    assert "finishing the sync in flight" in agent.log()


# ---------------------------------------------------------------------------------------------------------
# health, metrics, systemd, reload


@pytest.mark.slow
def test_health_readiness_and_metrics(spawn, git_daemon, remote_repo, apisix):
    first = remote_repo.commit(config_files(1), "v1")
    apisix.set_latency(0.5)  # a slow first sync: /readyz is seen before it ends
    agent = spawn(repo_url(git_daemon, remote_repo), gateways=[apisix.url])
    assert agent.get("/healthz").json() == {"status": "ok"}
    not_ready = agent.get("/readyz")
    assert not_ready.status_code == 503 and not_ready.json()["ready"] is False
    wait_for(lambda: agent.get("/readyz").status_code == 200, 10, "ready after the first sync")
    apisix.set_latency(0)
    assert first[:7] in agent.get("/readyz").json()["reason"]

    # /readyz turns 200 in the middle of recording the sync: the metrics follow within moments.
    wait_for(lambda: agent.metric("gitsync_gateway_in_sync", gateway=apisix.url) == 1, 2, "metrics recorded")
    assert agent.metric("gitsync_syncs_total", result="applied") == 1
    assert agent.metric("gitsync_applied_commit_info", commit=first) == 1
    assert time.time() - 30 < agent.metric("gitsync_last_success_timestamp_seconds") <= time.time()
    assert agent.metric("gitsync_gateway_conf_version", gateway=apisix.url, kind="routes") == \
        apisix.config()["routes_conf_version"]
    assert agent.metric("gitsync_sync_duration_seconds_count") >= 1

    second = remote_repo.commit(config_files(2), "v2")
    wait_for(lambda: agent.metric("gitsync_applied_commit_info", commit=second) == 1, 5, "the new commit")
    assert agent.metric("gitsync_syncs_total", result="applied") == 2
    assert agent.metric("gitsync_applied_commit_info", commit=first) == 0

    apisix.restart()
    wait_for(lambda: agent.metric("gitsync_drift_heals_total", gateway=apisix.url) == 1, 5, "a drift heal")
    assert live_uri(apisix) == "/v2"
    assert agent.metric("gitsync_syncs_total", result="noop") >= 1


@pytest.mark.slow
def test_sd_notify_ready_status_and_watchdog_arrive(spawn, git_daemon, remote_repo, apisix, tmp_path):
    remote_repo.commit(config_files(1), "v1")
    path = str(tmp_path / "notify.sock")
    messages: list[str] = []
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(path)
        sock.settimeout(0.2)

        def receive_until(done: Callable[[], bool], timeout: float) -> None:
            deadline = time.monotonic() + timeout
            while not done() and time.monotonic() < deadline:
                with contextlib.suppress(TimeoutError):
                    messages.extend(sock.recv(4096).decode().split("\n"))

        agent = spawn(repo_url(git_daemon, remote_repo), gateways=[apisix.url],
                      env={"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "2000000"})
        applied = lambda: any(m.startswith("STATUS=applied") for m in messages)  # noqa: E731
        receive_until(lambda: "WATCHDOG=1" in messages and applied(), 6)
        assert messages[0] == "READY=1"
        assert applied(), messages
        assert "WATCHDOG=1" in messages, messages
        agent.signal(signal.SIGTERM)
        receive_until(lambda: "STOPPING=1" in messages, 5)
        assert "STOPPING=1" in messages
        assert agent.wait(15) == 0


@pytest.mark.slow
def test_sighup_reloads_the_settings_file(spawn, git_daemon, remote_repo, apisix, tmp_path):
    remote_repo.commit(config_files(1), "v1")
    settings = tmp_path / "gitsync.toml"
    key_file = tmp_path / "admin-key"

    def write_settings(gateways: list[str]) -> None:
        settings.write_text(f'[source]\nrepo = "{repo_url(git_daemon, remote_repo)}"\n'
                            f'[gateways]\ngateways = {json.dumps(gateways)}\nadmin_key_file = "{key_file}"\n'
                            '[agent]\ninterval = "1h"\ndrift_interval = "1h"\n')

    with ApisixDouble(ADMIN_KEY) as second:
        write_settings([apisix.url])
        agent = spawn(None, "--config", str(settings), "--interval", "1h", "--drift-interval", "1h")
        wait_for(lambda: live_uri(apisix) == "/v1", 10, "the first gateway synced")
        assert live_uri(second) is None
        write_settings([apisix.url, second.url])
        agent.signal(signal.SIGHUP)
        wait_for(lambda: live_uri(second) == "/v1", 3, "the gateway added by the reload synced")
        assert agent.healthy()


# ---------------------------------------------------------------------------------------------------------
# units: Triggers and Backoff


def test_triggers_are_never_lost_under_concurrency():
    """Whatever the interleaving, each trigger requested is in a take that follows its last request
    (coalesced: fewer syncs than requests)."""
    triggers = Triggers()
    kinds, each = [Trigger.POLL, Trigger.WEBHOOK, Trigger.DRIFT, Trigger.SOAK], 500
    clock, order = itertools.count(), threading.Lock()
    last_request: dict[Trigger, int] = {}
    takes: list[tuple[int, frozenset[Trigger]]] = []

    def worker() -> None:
        while (reasons := triggers.take(timeout=0.05)) is not None:
            if reasons:
                with order:
                    takes.append((next(clock), reasons))
                time.sleep(0.0005)  # a "sync": triggers arrive meanwhile

    def produce(kind: Trigger) -> None:
        for _ in range(each):
            with order:
                last_request[kind] = next(clock)
                triggers.request(kind)

    consumer = threading.Thread(target=worker)
    consumer.start()
    threads = [threading.Thread(target=produce, args=(kind,)) for kind in kinds]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    def all_taken() -> bool:
        with order:
            return all(any(kind in taken and at > last_request[kind] for at, taken in takes)
                       for kind in kinds)

    wait_for(all_taken, 5, "every trigger taken after its last request")
    triggers.stop()
    consumer.join(5)
    assert len(takes) < len(kinds) * each  # coalesced: fewer syncs than triggers


def test_a_trigger_during_a_sync_runs_it_again_and_stop_ends_the_wait():
    triggers = Triggers()
    assert triggers.take(timeout=0.01) == frozenset()
    triggers.request(Trigger.POLL)
    triggers.request(Trigger.WEBHOOK)
    triggers.request(Trigger.POLL)
    assert triggers.take(timeout=0) == {Trigger.POLL, Trigger.WEBHOOK}  # both, in one sync
    triggers.request(Trigger.DRIFT)  # arrives "during" that sync
    assert triggers.take(timeout=0) == {Trigger.DRIFT}
    started = time.monotonic()
    threading.Timer(0.05, triggers.stop).start()
    assert triggers.take(timeout=5) is None
    assert time.monotonic() - started < 1


def test_backoff_bounds_and_reset():
    backoff = Backoff(base=1.0, cap=10.0, rng=random.Random(7))
    assert backoff.ready(now=0)
    for failures in range(1, 12):
        delay = backoff.failed(now=100.0)
        ceiling = min(10.0, 2 ** (failures - 1))
        assert ceiling / 2 <= delay <= ceiling
        assert not backoff.ready(now=100.0 + delay - 0.01) and backoff.ready(now=100.0 + delay)
    backoff.succeeded()
    assert backoff.failures == 0 and backoff.ready(now=0)
    assert backoff.failed(now=0) <= 1.0  # back to the base after a success
    assert Backoff(base=0, cap=0).failed() >= 0.05  # never a busy loop


@pytest.mark.parametrize("jitter", [0.0, 30.0])
def test_a_webhook_syncs_at_once_or_after_a_random_part_of_webhook_jitter(tmp_path, jitter):
    settings = load({"repo": "git://127.0.0.1:9/none.git", "gateways": ["http://127.0.0.1:9"],
                     "state_dir": str(tmp_path / "state"), "writeback": "off", "webhook_jitter": jitter},
                    config="/dev/null", env={})
    daemon = Daemon(settings)
    before = datetime.now(UTC)
    daemon._hooked(Trigger.WEBHOOK)
    daemon._hooked(Trigger.DRIFT)  # not a webhook: never delayed
    jobs = daemon.scheduler.get_jobs()
    if jitter:
        assert daemon.triggers.take(0) == {Trigger.DRIFT} and len(jobs) == 1
        assert before <= jobs[0].trigger.run_date <= datetime.now(UTC) + timedelta(seconds=jitter)
        assert jobs[0].args == (Trigger.WEBHOOK,)
    else:
        assert daemon.triggers.take(0) == {Trigger.WEBHOOK, Trigger.DRIFT} and jobs == []
