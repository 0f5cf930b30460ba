"""The status channel with real processes: `gitsync sync --once` and `gitsync run` against real git
servers and the APISIX double. A status that cannot be written fails `sync --once` (exit 3) and is
retried by the daemon; heartbeats tell a live agent from a down one; a fleet publishing at one
instant loses nothing (100 agents over git://, 20 over smart HTTP: their pushes held by the server
until all of them wait, then let through together)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from testkit.agents import ADMIN_KEY, config_files, live_uri
from testkit.gitservers import BareRepo, GitDaemon, GitGate, Hold, HttpGitServer, git
from testkit.processes import gitsync_env, run_gitsync, wait_for

#: A reader judges liveness by its own heartbeat (max(status_heartbeat, interval + jitter)), never
#: by what a status file claims: these make it 1 s, as the agents of these tests write.
READER = {"GITSYNC_INTERVAL": "0.5s", "GITSYNC_JITTER": "0s"}

FLEET_TIMEOUT = 900  # 100 Python processes on 2 shared cores


@pytest.fixture
def key_file(tmp_path: Path) -> Path:
    path = tmp_path / "admin-key"
    path.write_text(ADMIN_KEY)
    return path


def sync_args(url: str, gateway: str, key_file: Path, state: Path, agent: str, *extra: str) -> list[str]:
    return ["sync", "--once", "--repo", url, "--gateway", gateway, "--admin-key-file", str(key_file),
            "--state-dir", str(state), "--agent-name", agent, *extra]


def status_refs(repo: BareRepo) -> dict[str, str]:
    """agent → the status.yaml its ref holds."""
    refs = repo.git("for-each-ref", "--format=%(refname)", "refs/gitsync/status/").split()
    return {ref.rsplit("/", 1)[1]: repo.git("show", f"{ref}:status.yaml") for ref in refs}


def view_files(repo: BareRepo) -> list[str]:
    out = git("ls-tree", "--name-only", "gitsync/status:agents", cwd=repo.path, check=False)
    return out.split()


# ---------------------------------------------------------------------------------------------------------
# a status that could not be written


@pytest.mark.slow
def test_sync_once_exits_3_when_its_status_cannot_be_written(remotes_root, remote_repo, apisix, key_file,
                                                             tmp_path):
    commit = remote_repo.commit(config_files(1), "v1")
    with GitDaemon(remotes_root, receive_pack=False) as read_only:  # fetches work, pushes are refused
        url = read_only.url(remote_repo.path.name)
        refused = run_gitsync(*sync_args(url, apisix.url, key_file, tmp_path / "on", "edge-on", "--writeback",
                                         "on"))
        assert refused.returncode == 3, refused.stderr
        assert live_uri(apisix) == "/v1"  # the sync itself was done
        assert f"applied: {commit[:7]} v1" in refused.stdout
        why = f"{url}: service not enabled: /{remote_repo.path.name}"
        last = refused.stderr.splitlines()[-1]
        assert last == f"gitsync sync: write-back failed: 1 status/note(s) not written: {why}"

        # writeback = "auto" is best effort: a remote refusing pushes turns it off, and that is no failure.
        auto = run_gitsync(*sync_args(url, apisix.url, key_file, tmp_path / "auto", "edge-auto"))
        assert auto.returncode == 0, auto.stderr
        assert "write-back turned off" in auto.stderr
    assert status_refs(remote_repo) == {}


@pytest.mark.slow
def test_a_failed_commit_whose_note_cannot_be_written_still_exits_1(remotes_root, remote_repo, apisix,
                                                                    key_file, tmp_path):
    remote_repo.commit(config_files(1, bad=True), "bad")
    with GitDaemon(remotes_root, receive_pack=False) as read_only:
        failed = run_gitsync(*sync_args(read_only.url(remote_repo.path.name), apisix.url, key_file,
                                        tmp_path / "s", "edge-1", "--writeback", "on"))
    assert failed.returncode == 1  # the commit's failure comes first
    assert "write-back failed: 2 status/note(s) not written" in failed.stderr


# ---------------------------------------------------------------------------------------------------------
# the daemon: retries, heartbeats, down


@pytest.mark.slow
def test_the_daemon_retries_an_unwritten_status_on_its_polls_then_heartbeats_until_it_is_down(
        spawn, remotes_root, remote_repo, apisix):
    """Nothing changes after the first sync, so no new publish will come: the retry is the poll's. Then
    the status ref's commit time moves with each heartbeat, and stops when the agent is killed."""
    commit = remote_repo.commit(config_files(1), "v1")
    server = GitDaemon(remotes_root, receive_pack=False).start()  # read-only at first
    try:
        url = server.url(remote_repo.path.name)
        agent = spawn(url, "--interval", "0.5s", "--writeback", "on", "--agent-name", "edge-1",
                      "--status-heartbeat", "1s", "--group", "canary", gateways=[apisix.url])
        try:
            wait_for(lambda: live_uri(apisix) == "/v1", 20, "the commit live")
            wait_for(lambda: "write-back of status" in agent.log(), 20, "a failed write-back in the log")
            assert status_refs(remote_repo) == {}
            server.stop()
            server.receive_pack = True
            server.start()  # the same port, now taking pushes
            text = wait_for(lambda: status_refs(remote_repo).get("edge-1"), 20, "the status, by a poll")
            assert f"commit: {commit}" in text and "group: canary" in text and "heartbeat: 1.0" in text
            assert agent.metric("gitsync_writeback_failures_total") >= 1

            def seen() -> int:
                return int(remote_repo.git("log", "-1", "--format=%ct", "refs/gitsync/status/canary/edge-1"))

            first = seen()
            wait_for(lambda: seen() > first, 10, "a heartbeat")
            chain = remote_repo.git("rev-list", "refs/gitsync/status/canary/edge-1").split()
            assert len(chain) == 2  # the status commit, and one heartbeat on it
            table = run_gitsync("status", "--fleet", "--repo", url, "--status-heartbeat", "1s", env=READER)
            assert table.returncode == 0 and "(down)" not in table.stdout, table.stdout
            row = table.stdout.splitlines()[1].split()
            assert [row[i] for i in (0, 1, 2, 4, 5)] == ["edge-1", commit[:7], "applied", "canary", "-"]
        finally:
            agent.kill()
        last = seen()

        def first_row() -> str:
            table = run_gitsync("status", "--fleet", "--repo", url, "--status-heartbeat", "1s", env=READER)
            return table.stdout.splitlines()[1]

        # down once its status is older than two heartbeat periods of the reader's own settings (READER)
        wait_for(lambda: "(down)" in first_row(), 10, "the killed agent shown down")
        assert seen() == last
    finally:
        server.stop()


# ---------------------------------------------------------------------------------------------------------
# a fleet publishing at one instant


def run_fleet(count: int, url: str, gateway: str, key_file: Path, tmp_path: Path
              ) -> dict[str, tuple[int, str]]:
    """`count` agents' `sync --once --writeback on`, started together; agent → (exit status, stderr)."""
    procs = {}
    for i in range(count):
        agent = f"edge-{i:03d}"
        err = open(tmp_path / f"{agent}.err", "w+")  # noqa: SIM115 - closed below, after the wait
        procs[agent] = (subprocess.Popen(
            [sys.executable, "-m", "gitsync", *sync_args(url, gateway, key_file, tmp_path / agent, agent,
                                                         "--writeback", "on")],
            env=gitsync_env(), stdout=subprocess.DEVNULL, stderr=err), err)
    results = {}
    deadline = time.monotonic() + FLEET_TIMEOUT
    for agent, (proc, err) in procs.items():
        try:
            code = proc.wait(max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
        err.seek(0)
        results[agent] = (code, err.read())
        err.close()
    return results


def check_fleet(results: dict[str, tuple[int, str]], repo: BareRepo, commit: str) -> None:
    codes = Counter(code for code, _ in results.values())
    assert codes == {0: len(results)}, {a: r for a, r in results.items() if r[0]}
    written = status_refs(repo)
    assert sorted(written) == sorted(results)
    for agent, text in written.items():
        assert f"agent: {agent}" in text and f"commit: {commit}" in text and "result: applied" in text


@pytest.mark.slow
@pytest.mark.timeout(FLEET_TIMEOUT + 120)
def test_100_agents_publishing_at_one_instant_over_git_daemon_lose_no_status(
        remotes_root, remote_repo, apisix, key_file, tmp_path):
    commit = remote_repo.commit(config_files(1), "v1")
    hold = Hold("git-receive-pack", 100)
    # One connection per agent at a time, but all 100 at once when the hold lets go: git daemon's default
    # of 32 would kill some of them ("The remote server unexpectedly closed the connection"), which tests
    # the server's limit, not the status channel.
    with GitDaemon(remotes_root, receive_pack=True, max_connections=200) as daemon, \
            GitGate(daemon.port, hold) as gate:
        began = time.monotonic()
        results = run_fleet(100, gate.url(remote_repo.path.name), apisix.url, key_file, tmp_path)
        took = time.monotonic() - began
        gate.settle()
    assert hold.waiting == 100  # each agent's status push was held until all 100 waited
    check_fleet(results, remote_repo, commit)
    pushes, reads = gate.traffic["git-receive-pack"], gate.traffic["git-upload-pack"]
    print(f"100 agents over git daemon: {took:.0f}s; every status written; the view shows "
          f"{len(view_files(remote_repo))}; connections: receive-pack {pushes.requests}, upload-pack "
          f"{reads.requests} (the syncs' own fetches included)")


@pytest.mark.slow
@pytest.mark.timeout(FLEET_TIMEOUT)
def test_agents_publishing_at_one_instant_over_smart_http_lose_no_status(
        remotes_root, remote_repo, apisix, key_file, tmp_path):
    commit = remote_repo.commit(config_files(1), "v1")
    with HttpGitServer(remotes_root) as server:
        hold = server.hold("git-receive-pack", 20)
        results = run_fleet(20, server.url(remote_repo.path.name), apisix.url, key_file, tmp_path)
    assert hold.waiting == 20
    check_fleet(results, remote_repo, commit)
    print(f"20 agents over smart HTTP: the view shows {len(view_files(remote_repo))}; "
          f"receive-pack requests {server.traffic['git-receive-pack'].requests}")

