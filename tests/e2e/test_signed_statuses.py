"""Signed statuses end to end, with real processes: two canary agents and three main agents, each
signing with its own key, and `status_signers` naming which key speaks for which agent and group. A
third canary whose key is not in it, and a status forged with no key, never open the main group's
gate; the two allowed canaries do, after the soak. git itself checks the same signatures."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gitsync.testing.apisix import ApisixDouble
from testkit.agents import config, forwarding_doubles, repo_url, upstream
from testkit.gitservers import git
from testkit.processes import wait_for
from tests.e2e.test_fleet_attacks import forge, go_ahead, nodes

SOAK = 2.0

pytestmark = pytest.mark.slow


@pytest.fixture
def doubles() -> Iterator[list[ApisixDouble]]:
    with forwarding_doubles(6) as started:
        yield started


def keygen(path: Path) -> str:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", path.name, "-f", str(path)],
                   check=True)
    return path.with_suffix(".pub").read_text().strip()


def test_only_statuses_signed_by_allowed_keys_open_the_gate(spawn, git_daemon, remote_repo, doubles,
                                                            tmp_path):
    url = repo_url(git_daemon, remote_repo)
    names = ["canary-0", "canary-1", "canary-x", "main-0", "main-1", "main-2"]
    keys = {name: tmp_path / "keys" / name for name in names}
    keys["canary-0"].parent.mkdir()
    public = {name: keygen(path) for name, path in keys.items()}
    signers = tmp_path / "status_signers"
    signers.write_text("".join(f"{name}@{name.split('-')[0]} {public[name]}\n" for name in names
                               if name != "canary-x"))  # canary-x's key speaks for nobody
    common = ["--writeback", "on", "--status-heartbeat", "1s", "--soak", f"{SOAK:g}s",
              "--status-signers", str(signers)]
    gateways = dict(zip(names, doubles, strict=True))

    def start(name: str) -> object:
        group = name.split("-")[0]
        follow = ["--after-group", "canary", "--after-count", "2"] if group == "main" else []
        return spawn(url, *common, "--group", group, *follow, "--agent-name", name, "--signing-key-file",
                     str(keys[name]), "--proxy-url", gateways[name].proxy_url, gateways=[gateways[name].url],
                     name=name)

    with upstream() as good, upstream(b'{"status": "ok", "v": 1}') as other:
        v0 = remote_repo.commit(config(good), "v0")
        agents = {name: start(name) for name in names if name != "canary-1"}
        canaries = [gateways["canary-0"], gateways["canary-x"]]
        wait_for(lambda: all(nodes(d) == {good: 1} for d in canaries), 30, "v0 on canary-0 and canary-x")
        judged, since = f"commit {v0[:7]} waits:", time.monotonic()
        while time.monotonic() - since < SOAK + 2:  # a forged go-ahead, kept live like a heartbeat
            forge(remote_repo, "canary-9", go_ahead("canary-9", v0))
            before = agents["main-0"].log().count(judged)  # judged again by a poll (1 s) since
            wait_for(lambda n=before: agents["main-0"].log().count(judged) > n, 10, "the gate judging again")
        mains = [gateways[f"main-{i}"] for i in range(3)]
        assert all(nodes(d) is None for d in mains)  # one allowed canary is not two
        # status_signers names the canaries one by one: the gate reads their refs alone, never the others
        main = agents["main-0"]
        assert main.metric("gitsync_fleet_status", agent="canary-0", state="counted") == 1  # type: ignore
        for unread in ("canary-9", "canary-x", "main-1"):
            assert not any(main.metric("gitsync_fleet_status", agent=unread, state=state)  # type: ignore
                           for state in ("counted", "unverified", "unreadable")), unread

        # The second allowed canary: after the soak, the main group follows.
        agents["canary-1"] = start("canary-1")
        wait_for(lambda: nodes(gateways["canary-1"]) == {good: 1}, 30, "v0 on canary-1")
        on_both = time.monotonic()
        wait_for(lambda: all(nodes(d) == {good: 1} for d in mains), 30, "v0 on the main group")
        assert time.monotonic() - on_both >= SOAK - 0.5

        # A new commit goes the same way; the unverified never count, for or against.
        v1 = remote_repo.commit(config(other), "v1")
        forge(remote_repo, "canary-9", go_ahead("canary-9", v1).replace("applied", "failed"))
        wait_for(lambda: all(nodes(d) == {other: 1} for d in mains), 40, "v1 on the main group")
        for agent in agents.values():
            assert "Traceback" not in agent.log()  # type: ignore[attr-defined]

    # git checks the same signatures by hand, with the same file.
    allowed = ["-c", f"gpg.ssh.allowedSignersFile={signers}", "-c", "gpg.format=ssh"]
    shown = git(*allowed, "log", "-1", "--show-signature", "refs/gitsync/status/canary/canary-0",
                cwd=remote_repo.path)
    assert 'Good "git" signature for canary-0@canary with ED25519 key' in shown
    rogue = subprocess.run(["git", *allowed, "verify-commit", "refs/gitsync/status/canary/canary-x"],
                           cwd=remote_repo.path, capture_output=True, text=True)
    assert rogue.returncode != 0 and "No principal matched" in rogue.stderr
