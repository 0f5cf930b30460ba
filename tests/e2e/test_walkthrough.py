"""The docs' walk-throughs run as written, from a fresh virtualenv of the built wheel: the README's
quick start and docs/sources.md's "Moving a live gateway to sources". Each shell block is taken from
the docs (`testkit.docs`), its example addresses swapped for the test's own (a git daemon that takes
pushes, the APISIX double with its data plane, a directory standing for /etc/gitsync), and run with
bash, the wheel's `gitsync` first on PATH."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from gitsync.testing.apisix import ApisixDouble
from testkit.agents import ADMIN_KEY
from testkit.docs import commands, sh_blocks, swapped
from testkit.gitservers import BareRepo, GitDaemon
from testkit.processes import free_port, wait_for
from testkit.venvs import build_wheel, offline_pip, venv_seeing_this_environment

CONFIG = {"upstreams/web.yaml": "upstreams:\n  - id: web\n    nodes: {\"127.0.0.1:1980\": 1}\n",
          "routes/api.yaml": "routes:\n  - id: api\n    uri: /api/*\n    upstream_id: web\n"}


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """An environment whose `gitsync` is the wheel's, installed into a fresh virtualenv with no index."""
    wheel = build_wheel(tmp_path_factory.mktemp("index"))
    venv = tmp_path_factory.mktemp("venv")
    venv_seeing_this_environment(venv)
    env = offline_pip(wheel.parent, venv)
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps", str(wheel)],
                   check=True, capture_output=True, env=env, timeout=300)
    return env


def bash(command: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`command` in bash, in `cwd`; the state dir (the commands' default, /var/lib/gitsync) in `cwd`."""
    env = env | {"GITSYNC_STATE_DIR": str(cwd / "state")}
    return subprocess.run(["bash", "-euo", "pipefail", "-c", command], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


def etc(tmp_path: Path, apisix: ApisixDouble, settings: str = "", listen: str = "127.0.0.1:9480") -> Path:
    """The directory standing for /etc/gitsync: the admin key, and the agent's settings."""
    path = tmp_path / "etc"
    path.mkdir()
    (path / "admin_key").write_text(ADMIN_KEY)
    (path / "gitsync.toml").write_text(f'[gateways]\ngateways = ["{apisix.url}"]\n'
                                       f'admin_key_file = "{path / "admin_key"}"\n'
                                       f'[agent]\nstate_dir = "{tmp_path / "state"}"\nlisten = "{listen}"\n'
                                       f'{settings}')
    return path


@pytest.mark.slow
def test_the_readme_quick_start_runs_as_written(installed: dict[str, str], tmp_path: Path, remotes_root: Path,
                                               git_daemon: GitDaemon, apisix: ApisixDouble) -> None:
    repo = BareRepo.create(remotes_root / "apisix-config.git")
    repo.commit(CONFIG, "a route")
    for name, text in CONFIG.items():  # the config in a directory, as validate's line has it
        (tmp_path / "my-config" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "my-config" / name).write_text(text)
    folder = etc(tmp_path, apisix, f'[source]\nrepo = "{git_daemon.url("apisix-config.git")}"\n'
                                   '[writeback]\nagent_name = "edge-1"\n', listen=f"127.0.0.1:{free_port()}")
    places = {"https://git.example/apisix-config.git": git_daemon.url("apisix-config.git"),
              "http://127.0.0.1:9180": apisix.url, "/etc/gitsync/": f"{folder}/"}
    [block] = sh_blocks("README.md", "Quick start against a real gateway")
    lines = commands(swapped(block, places))
    assert [line.split()[1] for line in lines] == ["validate", "diff", "sync", "run", "status"]
    validate, diff, sync, run, status = lines

    assert bash(validate, tmp_path, installed).returncode == 0
    shown = bash(diff, tmp_path, installed)
    assert shown.returncode == 1, shown.stderr  # something to change: the route is not live yet
    assert "routes[api]" in shown.stdout
    synced = bash(sync, tmp_path, installed)
    assert synced.returncode == 0, synced.stderr
    assert wait_for(lambda: apisix.running("routes").get("api"), 10, "the data plane serving the route")
    assert repo.git("for-each-ref", "refs/gitsync/status/").strip() == ""  # a laptop's one-shot: no agent

    daemon = subprocess.Popen(["bash", "-c", f"exec {run}"], cwd=tmp_path, env=installed,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        written = wait_for(lambda: repo.git("for-each-ref", "refs/gitsync/status/edge-1").strip()
                           or daemon.poll() is not None, 60, "the daemon's status ref")
    finally:
        if daemon.poll() is None:
            os.kill(daemon.pid, signal.SIGTERM)
        output, _ = daemon.communicate(timeout=60)
    assert written is not True and daemon.returncode == 0, output
    fleet = bash(status, tmp_path, installed)
    assert fleet.returncode == 0, fleet.stderr
    assert "edge-1" in fleet.stdout and repo.tip()[:7] in fleet.stdout


LIVE = {
    "upstreams": [{"id": "web", "type": "roundrobin", "nodes": {"127.0.0.1:1980": 1}}],
    "global_rules": [{"id": "observability", "plugins": {"prometheus": {}}}],
    "routes": [{"id": f"{team}-{n}", "uri": f"/{team}/{n}", "upstream_id": "web", "labels": {"team": team}}
               for team in ("orders", "payments") for n in range(12)],
}


@pytest.mark.slow
def test_moving_a_live_gateway_to_sources_runs_as_written(installed: dict[str, str], tmp_path: Path,
                                                         remotes_root: Path, git_daemon: GitDaemon,
                                                         apisix: ApisixDouble) -> None:
    for kind, items in LIVE.items():
        apisix.out_of_band(kind, items)
    for name in ("platform", "orders", "payments"):
        BareRepo.create(remotes_root / name / "gateway.git")
    folder = etc(tmp_path, apisix, '[writeback]\nwriteback = "on"\n')
    places = {"https://git.example/": git_daemon.url(""), "http://127.0.0.1:9180": apisix.url,
              "/etc/gitsync/": f"{folder}/"}
    puts_before = [r for r in apisix.requests if r[0] == "PUT"]
    [block, _example_log] = [*sh_blocks("docs/sources.md", "Moving a live gateway to sources"), ""][:2]
    done = bash(swapped(block, places), tmp_path, installed)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no changes" in done.stdout, done.stdout  # diff: the composition is what is live
    assert [r for r in apisix.requests if r[0] == "PUT"] == puts_before  # the first sync sent nothing
    tables = (tmp_path / "gitsync.toml").read_text()
    assert 'name = "orders"' in tables and "<the URL of" not in tables
    for name in ("platform", "orders", "payments"):  # each repo holds its own, refs of no one-shot agent
        repo = BareRepo(remotes_root / name / "gateway.git")
        assert repo.tip() is not None
        assert repo.git("for-each-ref", "refs/gitsync/status/").strip() == ""
    state = (tmp_path / "state" / "state.json").read_text()
    assert '"orders"' in state and '"payments"' in state
