"""The fleet's status refs and the repo's checks as an attacker writes them, against real processes: a
git daemon, `gitsync run` agents (a canary serving the web view, a follower with `after_group`),
`gitsync status --fleet`, `gitsync validate` and `sync --once`. The attacker has push rights to the
status refs only and uses plain git (hash-object, mktree, commit-tree, update-ref), no signing key.

Every reader runs under an address-space limit of `LIMIT_MB`: none crashes, prints a traceback,
or grows past it; a status that cannot be read is shown as that agent's and counted by no gate.
"""

from __future__ import annotations

import json
import re
import resource
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gitsync.testing.apisix import ApisixDouble
from testkit.agents import ADMIN_KEY, config, forwarding_doubles, memory_limit, repo_url, upstream
from testkit.gitservers import BareRepo
from testkit.processes import free_port, gitsync_env, run_gitsync, wait_for

pytestmark = pytest.mark.slow

LIMIT_MB = 100
SOAK = 2.0
LIMITED_ENV = {"MALLOC_ARENA_MAX": "2"}


def billion_laughs(key: str) -> str:
    """The issue's 534-byte document: nine levels of nine aliases, `key` at the top."""
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"a{i}: &a{i} [{','.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 9)]
    return "\n".join(lines) + f"\n{key}: *a8\n"


def forge(repo: BareRepo, name: str, text: str, when: float | None = None) -> str:
    """What an attacker with push rights to the status refs can do with plain git: a status commit
    of its own on `refs/gitsync/status/<name>`, committed at `when` (now by default)."""
    blob = repo.git("hash-object", "-w", "--stdin", input=text.encode())
    tree = repo.git("mktree", input=f"100644 blob {blob}\tstatus.yaml\n".encode())
    date = f"{int(when if when is not None else time.time())} +0000"
    sha = repo.git("commit-tree", tree, "-m", "gitsync(forged)", env={"GIT_COMMITTER_DATE": date,
                                                                       "GIT_AUTHOR_DATE": date})
    repo.git("update-ref", f"refs/gitsync/status/{name}", sha)
    return sha


def go_ahead(agent: str, commit: str) -> str:
    """The issue's forged go-ahead, with a heartbeat no reader may believe and one it might."""
    return (f"agent: {agent}\ngroup: canary\ncommit: {commit}\nresult: applied\n"
            "applied_at: '2020-01-01T00:00:00Z'\ntime: '2020-01-01T00:00:00Z'\ngateways: []\n")


def limited_gitsync(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gitsync", *args], env=gitsync_env(LIMITED_ENV),
                          capture_output=True, text=True, timeout=120, preexec_fn=memory_limit(LIMIT_MB))


def children_cpu() -> float:
    """CPU seconds of this process's finished children: what a command cost, whatever the machine's load."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def nodes(double: ApisixDouble) -> dict | None:
    upstreams = double.config().get("upstreams") or []
    return upstreams[0]["nodes"] if upstreams else None


@pytest.fixture
def doubles() -> Iterator[list[ApisixDouble]]:
    with forwarding_doubles(2) as started:
        yield started


def test_hostile_status_files_crash_no_reader_and_count_toward_no_gate(spawn, git_daemon, remote_repo,
                                                                       doubles):
    url = repo_url(git_daemon, remote_repo)
    canary_gw, main_gw = doubles
    limited = {"env": LIMITED_ENV, "preexec": memory_limit(LIMIT_MB)}
    common = ["--writeback", "on", "--status-heartbeat", "1s", "--soak", f"{SOAK:g}s"]
    with upstream() as good, upstream(b'{"status": "ok", "v": 1}') as other:
        remote_repo.commit(config(good), "v0")
        canary = spawn(url, *common, "--group", "canary", "--agent-name", "canary-0", "--ui",
                       "--proxy-url", canary_gw.proxy_url, gateways=[canary_gw.url], name="canary", **limited)
        main = spawn(url, *common, "--group", "main", "--after-group", "canary", "--agent-name", "main-0",
                     "--proxy-url", main_gw.proxy_url, gateways=[main_gw.url], name="main", **limited)
        wait_for(lambda: nodes(canary_gw) == {good: 1} and nodes(main_gw) == {good: 1}, 30, "v0 on both")
        assert "any writer of refs/gitsync/status can open (or hold) this agent's gate" in main.log()

        v1 = remote_repo.commit(config(other), "v1")
        # In the canary group's namespace, which the main agent's gate reads:
        # 1. aliases, in the agent and in the result (the headline); 2. wrong types for the tip
        forge(remote_repo, "canary/lol", billion_laughs("agent"))
        forge(remote_repo, "canary/laughs", billion_laughs("result").replace("a8\n", "a8\nagent: laughs\n"))
        forge(remote_repo, "canary/typed", f"agent: typed\ngroup: canary\ncommit: {v1}\nresult: failed\n"
                                    "time: 2026-01-01T00:00:00Z\ngateways: 5\n")
        forge(remote_repo, "canary/checks", f"agent: checks\ngroup: canary\ncommit: {v1}\nresult: failed\n"
                                     "time: 2026-01-01T00:00:00Z\n"
                                     "gateways: [{url: u, status: failed, checks: {failed: 5}}]\n")
        # 3. a forged go-ahead whose heartbeat no reader may believe
        forge(remote_repo, "canary/canary-9", go_ahead("canary-9", v1).replace(
            "gateways: []", "gateways: []\nheartbeat: 1.0e+300"))
        wait_for(lambda: nodes(canary_gw) == {other: 1}, 20, "v1 on the canary")
        seen_on_canary = time.monotonic()
        # The forged failures are unreadable: they do not hold v1 back; the real canary lets it through.
        wait_for(lambda: nodes(main_gw) == {other: 1}, 30, "v1 on the main agent after the soak")
        assert time.monotonic() - seen_on_canary >= SOAK - 0.5
        for agent in (canary, main):
            assert agent.proc is not None and agent.proc.poll() is None
            assert "Traceback" not in agent.log() and "MemoryError" not in agent.log()

        assert main.metric("gitsync_fleet_status", agent="lol", state="unreadable") == 1
        assert main.metric("gitsync_fleet_status", agent="typed", state="unreadable") == 1
        assert main.metric("gitsync_fleet_status", agent="canary-0", state="counted") == 1

        page = canary.get("/fleet")
        assert page.status_code == 200
        assert "unreadable status: line 1: anchors (&amp;a0) are not allowed" in page.text
        assert "unreadable status: gateways: expected a list, got int" in page.text
        assert "unreadable status: heartbeat: beyond ±2^53" in page.text

        table = limited_gitsync("status", "--fleet", "--repo", url)
        assert table.returncode == 0 and "Traceback" not in table.stderr, table.stderr
        rows = {line.split()[0]: line for line in table.stdout.splitlines()[1:]}
        assert set(rows) == {"canary-0", "canary-9", "checks", "laughs", "lol", "main-0", "typed"}
        assert rows["lol"].endswith("unreadable status: line 1: anchors (&a0) are not allowed")
        assert rows["checks"].endswith("gateways[0].checks.failed: expected a list of text")
        assert rows["canary-0"].split()[1:3] == [v1[:7], "applied"]


def test_a_forged_go_ahead_never_opens_a_signed_gate(spawn, git_daemon, remote_repo, doubles, tmp_path):
    """3. With status_signers, a go-ahead with valid fields, refreshed like a heartbeat, is never counted."""
    url = repo_url(git_daemon, remote_repo)
    _, main_gw = doubles
    signers = tmp_path / "status_signers"
    key = tmp_path / "main-0"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    signers.write_text("main-0@main " + (tmp_path / "main-0.pub").read_text())
    with upstream() as good:
        v0 = remote_repo.commit(config(good), "v0")
        main = spawn(url, "--writeback", "on", "--status-heartbeat", "1s", "--soak", "0s", "--group", "main",
                     "--after-group", "canary", "--agent-name", "main-0", "--signing-key-file", str(key),
                     "--status-signers", str(signers), "--proxy-url", main_gw.proxy_url,
                     gateways=[main_gw.url], name="main")
        judged = f"commit {v0[:7]} waits:"
        for _ in range(4):  # kept live, as a heartbeat would, and the gate judges again each time (no soak)
            forge(remote_repo, "canary-0", go_ahead("canary-0", v0))
            before = main.log().count(judged)
            wait_for(lambda n=before: main.log().count(judged) > n, 10, "the gate judging again")
        assert nodes(main_gw) is None  # the first commit waits for a canary that never signed
        # status_signers names no agent of group canary: the gate reads no status ref at all
        assert "waiting for group canary: no agent of it has written a readable status" in main.log()
        assert not any(main.metric("gitsync_fleet_status", agent="canary-0", state=state)
                       for state in ("counted", "unverified", "unreadable"))
        assert "Traceback" not in main.log()


# ---------------------------------------------------------------------------------------------------------
# 4. checks: one that cannot be sent, one that fails to be sent after a push


SLOW_CHECK = config("X")["conf/checks.yaml"].replace("timeout: 500ms", "timeout: 20s").replace(
    "retries: 2", "retries: 0")


def test_an_agent_killed_after_a_push_checks_it_when_it_is_back_and_rolls_back(spawn, git_daemon,
                                                                                remote_repo, doubles):
    url = repo_url(git_daemon, remote_repo)
    gateway = doubles[0]
    with upstream() as good, upstream(delay=60) as hung:
        first = remote_repo.commit(config(good) | {"conf/checks.yaml": SLOW_CHECK}, "v0")
        agent = spawn(url, "--proxy-url", gateway.proxy_url, gateways=[gateway.url], name="a")
        wait_for(lambda: agent.state().get("last_good") == first, 20, "v0 live")
        bad = remote_repo.commit(config(hung) | {"conf/checks.yaml": SLOW_CHECK}, "v1: a check that hangs")
        wait_for(lambda: nodes(gateway) == {hung: 1}, 20, "v1 pushed")
        # its check waits on the hanging upstream: the commit was recorded unchecked before the push
        wait_for(lambda: agent.state().get("unchecked") == {gateway.url: bad}, 5, "v1 recorded unchecked")
        agent.kill()
        assert agent.state()["unchecked"] == {gateway.url: bad}
        assert agent.state()["last_good"] == first

        # Back, with a data plane that cannot be reached: the check fails to be sent, v1 is rolled back.
        agent.args[agent.args.index(gateway.proxy_url)] = f"http://127.0.0.1:{free_port()}"
        agent.start()
        wait_for(lambda: nodes(gateway) == {good: 1}, 20, "the rollback")
        state = wait_for(lambda: bad in agent.state().get("bad", {}) and agent.state(), 10, "v1 refused")
        assert state["bad"][bad].startswith("health: ") and state["last_good"] == first
        # A heal of v0 that followed may be on its way: unchecked until its own checks ran.
        wait_for(lambda: agent.state().get("unchecked") == {}, 20, "nothing left unchecked")
        assert "Traceback" not in agent.log()


def test_a_backtracking_pattern_fails_its_check_in_linear_time(tmp_path, git_daemon, remote_repo, doubles):
    """6. `^(\\w+\\s?)*$` against 30 characters of 'aaa…!' ends at once, and the commit is rolled back."""
    gateway = doubles[0]
    key = tmp_path / "key"
    key.write_text(ADMIN_KEY)
    pattern_check = SLOW_CHECK.replace("timeout: 20s", "timeout: 5s").replace(
        "body: '\"ok\"'", "body: '^(\\w+\\s?)*$'")
    args = ["sync", "--once", "--repo", repo_url(git_daemon, remote_repo), "--gateway", gateway.url,
            "--admin-key-file", str(key), "--state-dir", str(tmp_path / "s"),
            "--proxy-url", gateway.proxy_url]
    with upstream(b"a" * 30 + b"!") as aaa:
        remote_repo.commit(config(aaa) | {"conf/checks.yaml": SLOW_CHECK.replace('"ok"', "a")}, "v0")
        assert run_gitsync(*args).returncode == 0
        extra = "routes:\n  - id: extra\n    uri: /extra\n    upstream_id: orders\n"
        remote_repo.commit(config(aaa) | {"conf/checks.yaml": pattern_check, "conf/extra.yaml": extra}, "v1")
        began = children_cpu()
        done = run_gitsync(*args)
        took = children_cpu() - began
    assert done.returncode == 1 and "body does not match '^(\\\\w+\\\\s?)*$'" in done.stderr, done.stderr
    assert took < 10, took  # a process start, two pushes and one check: not the minutes of a backtracking re


def test_validate_refuses_more_checks_than_allowed(tmp_path):
    (tmp_path / "checks.yaml").write_text("checks:\n" + "".join(f"  - name: c{i}\n" for i in range(3)))
    done = run_gitsync("validate", "--dir", str(tmp_path), "--max-checks", "2")
    assert done.returncode == 1
    assert done.stderr.strip() == "checks.yaml:4:5: checks: 3 checks, more than max_checks (2) allows"


# ---------------------------------------------------------------------------------------------------------
# 5. names


def test_names_that_collided_write_refs_of_their_own(tmp_path, git_daemon, remote_repo, doubles):
    url = repo_url(git_daemon, remote_repo)
    key = tmp_path / "key"
    key.write_text(ADMIN_KEY)
    remote_repo.commit({"conf/a.yaml": "routes: []\n"}, "v0")
    names = ["eu/1", "eu-1", "eu 1", "eu:1", "gw-é", "gw-ü"]
    for i, name in enumerate(names):
        done = run_gitsync("sync", "--once", "--repo", url, "--gateway", doubles[0].url, "--admin-key-file",
                           str(key), "--state-dir", str(tmp_path / f"s{i}"), "--agent-name", name,
                           "--writeback", "on")
        assert done.returncode == 0, done.stderr
    refs = remote_repo.git("for-each-ref", "--format=%(refname:lstrip=3)", "refs/gitsync/status/").split()
    assert sorted(refs) == sorted(["eu%2F1", "eu-1", "eu%201", "eu%3A1", "gw-%C3%A9", "gw-%C3%BC"])
    table = run_gitsync("status", "--fleet", "--repo", url)
    assert sorted(line[:4] for line in table.stdout.splitlines()[1:]) == sorted(n[:4] for n in names)
    assert "unreadable" not in table.stdout

    # The same state dir under a new name: a ref of its own, and no word of another writer.
    remote_repo.commit({"conf/a.yaml": "routes: []\nupstreams: []\n"}, "v1")
    renamed = run_gitsync("sync", "--once", "--repo", url, "--gateway", doubles[0].url, "--admin-key-file",
                          str(key), "--state-dir", str(tmp_path / "s0"), "--agent-name", "eu-renamed",
                          "--writeback", "on", "-v")
    assert renamed.returncode == 0 and "moved by another writer" not in renamed.stderr, renamed.stderr
    assert "eu-renamed" in remote_repo.git("for-each-ref", "refs/gitsync/status/eu-renamed")

    refused = run_gitsync("sync", "--once", "--repo", url, "--gateway", doubles[0].url, "--admin-key-file",
                          str(key), "--state-dir", str(tmp_path / "x"), "--agent-name", "é" * 40)
    assert refused.returncode == 2 and "--agent-name: an agent name must fit a ref name" in refused.stderr
    assert "Traceback" not in refused.stderr


def test_the_issues_readers_stay_under_the_limit_of_a_real_bomb(tmp_path, git_daemon, remote_repo):
    """The reader alone, under the limit: the bomb in the agent name, then in `result`."""
    remote_repo.commit({"conf/a.yaml": "routes: []\n"}, "v0")
    for key in ("agent", "result"):
        forge(remote_repo, f"bomb-{key}", billion_laughs(key))
    began = children_cpu()
    table = limited_gitsync("status", "--fleet", "--repo", repo_url(git_daemon, remote_repo))
    assert table.returncode == 0 and table.stderr == "", table.stderr
    assert children_cpu() - began < 5  # the bomb expanded costs 32 s of CPU: CPU, not wall time, under xdist
    assert table.stdout.count("unreadable status: line 1: anchors (&a0) are not allowed") == 2
    assert Path(tmp_path).exists()


# ---------------------------------------------------------------------------------------------------------
# Round three (issue 42): object bombs and ref floods on the status refs, and a gate that remembers.

BOMB_MB = 300  # a status.yaml of zeros: about 300 KB on the wire
FLOOD = 2000  # status refs to one commit, past max_status_refs (1,000)


def bomb(repo: BareRepo, name: str, blob: str) -> None:
    """A status ref whose status.yaml is `blob`."""
    tree = repo.git("mktree", input=f"100644 blob {blob}\tstatus.yaml\n".encode())
    repo.git("update-ref", f"refs/gitsync/status/{name}", repo.git("commit-tree", tree, "-m", "bomb"))


def flood(repo: BareRepo, count: int, sha: str) -> None:
    repo.git("update-ref", "--stdin", input="".join(
        f"create refs/gitsync/status/f{i:05d} {sha}\n" for i in range(count)).encode())


def signing_keys(tmp_path: Path, *principals: str) -> tuple[dict[str, Path], Path]:
    """An ed25519 key per `<agent>@<group>`, and a status_signers file naming each for its principal."""
    keys, lines = {}, []
    for who in principals:
        agent = who.split("@")[0]
        keys[agent] = tmp_path / f"key-{agent}"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(keys[agent])], check=True)
        lines.append(f"{who} {keys[agent].with_suffix('.pub').read_text().strip()}\n")
    signers = tmp_path / "status_signers"
    signers.write_text("".join(lines))
    return keys, signers


def peak_mb(agent) -> float:
    """The peak resident memory of a running agent (VmHWM), in MB."""
    status = Path(f"/proc/{agent.proc.pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM:"))) / 1024


def test_a_status_bomb_and_a_ref_flood_cost_no_reader_its_memory_and_the_canary_is_still_read(
        spawn, git_daemon, remote_repo, doubles, tmp_path):
    """Before the agents start, an attacker with push rights to the status refs pushes a status whose
    status.yaml is 300 MB of zeros and 2,000 status refs to one commit. Every reader runs under an
    address-space limit of LIMIT_MB: the canary (its status branch, its web view's /fleet), the main
    agent's gate, `gitsync status --fleet`. None crashes or prints a traceback; the bomb is an
    unreadable entry that names the object and the bound, never inflated; the flood past
    max_status_refs is named once and ignored; the gate, whose status_signers names its group's agents,
    reads the real canary and lets v0 through after the soak."""
    url = repo_url(git_daemon, remote_repo)
    canary_gw, main_gw = doubles
    keys, signers = signing_keys(tmp_path, "canary-0@canary", "main-0@main")
    limited = {"env": LIMITED_ENV, "preexec": memory_limit(LIMIT_MB)}
    # Each push lists every ref of the remote (receive-pack has no filter): with the flood a write-back
    # takes seconds on a loaded machine, so the heartbeat is not every second here.
    common = ["--writeback", "on", "--status-heartbeat", "5s", "--soak", f"{SOAK:g}s",
              "--status-signers", str(signers)]
    with upstream() as good:
        v0 = remote_repo.commit(config(good), "v0")
        bomb(remote_repo, "bomb", remote_repo.zeros(BOMB_MB))
        flood(remote_repo, FLOOD, forge(remote_repo, "f-seed", go_ahead("f-seed", v0)))
        canary = spawn(url, *common, "--group", "canary", "--agent-name", "canary-0", "--ui",
                       "--signing-key-file", str(keys["canary-0"]), "--proxy-url", canary_gw.proxy_url,
                       gateways=[canary_gw.url], name="canary", **limited)
        main = spawn(url, *common, "--group", "main", "--after-group", "canary", "--agent-name", "main-0",
                     "--signing-key-file", str(keys["main-0"]), "--proxy-url", main_gw.proxy_url,
                     gateways=[main_gw.url], name="main", **limited)
        wait_for(lambda: nodes(canary_gw) == {good: 1}, 30, "v0 on the canary")
        on_canary = time.monotonic()
        wait_for(lambda: nodes(main_gw) == {good: 1}, 40, "v0 on the main agent: the real canary read")
        assert time.monotonic() - on_canary >= SOAK - 0.5
        assert main.metric("gitsync_fleet_status", agent="canary-0", state="counted") == 1

        page = httpx.get(canary.url("/fleet"), timeout=120)  # the first read of 2,000 refs: seconds
        assert page.status_code == 200
        assert re.search(r"unreadable status: not fetched: object \d of \d in the pack \(a blob\) is 300\.0 "
                         r"MiB \(314,572,800 bytes\), more than the size a status may have", page.text), \
            page.text[:3000]
        table = limited_gitsync("status", "--fleet", "--repo", url, "--status-signers", str(signers))
        assert table.returncode == 0 and "Traceback" not in table.stderr, table.stderr
        rows = {line.split()[0]: line for line in table.stdout.splitlines()[1:]}
        # max_status_refs per group: 1,000 of the refs without a group (the flood's), and canary's and main's
        assert len(rows) == 1002 and "bomb" in rows and rows["canary-0"].split()[1:3] == [v0[:7], "applied"]
        assert "not fetched: object" in rows["bomb"]
        assert re.search(r"fleet: status refs under refs/gitsync/status/ ignored: 1,00\d beyond "
                         r"max_status_refs = 1,000 \(f00", table.stderr), table.stderr
        for agent in (canary, main):
            assert agent.proc is not None and agent.proc.poll() is None
            assert "Traceback" not in agent.log() and "MemoryError" not in agent.log()
            assert peak_mb(agent) < LIMIT_MB


def test_a_gate_holds_a_commit_its_canary_failed_after_that_status_is_gone_and_after_a_restart(
        spawn, git_daemon, remote_repo, tmp_path):
    """Issue 42, attack 3, with real processes: two canaries, after_count = 1, signed statuses. v1 fails
    its health check on canary-1 (rolled back) and passes on canary-2. Then canary-1 is stopped and an
    attacker deletes its status ref: the main agent still holds v1, and after a restart too (its memory
    is in gate.json); it says why. v2, a new commit, goes on once canary-1 is back and shows a verified
    status again."""
    url = repo_url(git_daemon, remote_repo)
    keys, signers = signing_keys(tmp_path, "canary-1@canary", "canary-2@canary", "main-0@main")
    soak = 8.0  # long enough for canary-1's failure to be written before canary-2's success has soaked
    common = ["--writeback", "on", "--status-heartbeat", "1s", "--soak", f"{soak:g}s",
              "--status-signers", str(signers)]
    with forwarding_doubles(3) as (gw1, gw2, gw_main), upstream() as good, \
            upstream(b'{"status": "ok", "v": 2}') as other:

        def start(name: str, gateway: ApisixDouble, *extra: str) -> object:
            group = name.split("-")[0]
            follow = ["--after-group", "canary", "--after-count", "1"] if group == "main" else []
            return spawn(url, *common, "--group", group, *follow, "--agent-name", name, "--signing-key-file",
                         str(keys[name]), *extra, gateways=[gateway.url], name=name)

        v0 = remote_repo.commit(config(good), "v0")
        dead = f"http://127.0.0.1:{free_port()}"  # canary-1's data plane for v1: its checks fail
        canary1 = start("canary-1", gw1, "--proxy-url", gw1.proxy_url)
        start("canary-2", gw2, "--proxy-url", gw2.proxy_url)
        main = start("main-0", gw_main, "--proxy-url", gw_main.proxy_url)
        wait_for(lambda: nodes(gw_main) == {good: 1}, 40, "v0 on the main agent")

        canary1.kill()  # back with a data plane that does not answer: v1's checks fail there
        canary1.args[canary1.args.index(gw1.proxy_url)] = dead
        canary1.start()
        v1 = remote_repo.commit(config(other), "v1")
        wait_for(lambda: v1 in canary1.state().get("bad", {}), 40, "v1 rolled back on canary-1")
        wait_for(lambda: nodes(gw2) == {other: 1}, 40, "v1 on canary-2")
        wait_for(lambda: f"gate: canary-1 of group canary failed {v1[:7]}" in main.log(), 30,
                 "the gate to see canary-1's failure")

        canary1.kill()
        remote_repo.git("update-ref", "-d", "refs/gitsync/status/canary/canary-1")  # the failure, erased
        time.sleep(soak + 2)
        assert nodes(gw_main) == {good: 1}  # still v0: the failure is remembered
        main.kill()
        before = len(main.log())
        main.start()
        wait_for(lambda: f"{v1[:7]} failed on canary agent(s) canary-1: held back until a new commit"
                 in main.log()[before:], 20, "the held commit after a restart")
        assert json.loads((main.state_dir / "gate.json").read_text())["failed"] == {v1: ["canary-1"]}
        time.sleep(soak + 1)
        assert nodes(gw_main) == {good: 1}

        v2 = remote_repo.commit(config(good), "v2: v0's tree again, a new commit")
        wait_for(lambda: nodes(gw2) == {good: 1} and "canary-1 (its status ref is gone)" in main.log(), 40,
                 "v2 on canary-2, held by canary-1's missing status")
        assert main.state().get("last_good") == v0
        canary1.args[canary1.args.index(dead)] = gw1.proxy_url
        canary1.start()
        wait_for(lambda: main.state().get("last_good") == v2, 60, "v2 on the main agent")
        assert "Traceback" not in main.log() and v1 not in (main.state().get("last_good"), None)
