"""An artifact source as the agent's repo (gitsync.agent.artifact_repo), through ``gitsync sync --once`` as
a real process: the artifact's commit goes live with the host's own secret in, a secret the host lacks
refuses the commit at its file:line (as the git path does), and the small setup (a git repo, no
registry) never imports the artifact code at all."""

from __future__ import annotations

import subprocess
import sys

import pytest

from gitsync.testing.apisix import ApisixDouble
from testkit.agents import ADMIN_KEY, repo_url
from testkit.artifacts import HOST_SECRET, Publisher, agent_flags, host_secrets, registry_env, routes
from testkit.processes import gitsync_env, run_gitsync
from testkit.registry import Registry

pytestmark = pytest.mark.slow


@pytest.fixture
def gateway():
    with ApisixDouble(ADMIN_KEY) as double:
        yield double


def once(tmp_path, gateway: ApisixDouble, *flags: str, env: dict[str, str] | None = None):
    tmp_path.mkdir(parents=True, exist_ok=True)
    key = tmp_path / "admin-key"
    key.write_text(ADMIN_KEY)
    return run_gitsync("sync", "--once", *flags, "--gateway", gateway.url, "--admin-key-file", str(key),
                       "--state-dir", str(tmp_path / "agent"), env=env)


def test_an_artifact_goes_live_with_the_hosts_secret_or_is_refused_at_its_place_without_it(
        tmp_path, git_daemon, remote_repo, gateway):
    url = repo_url(git_daemon, remote_repo)
    sha = remote_repo.commit(routes(), "v1")
    publisher = Publisher.make(tmp_path / "keys", f"main@{url}")
    with Registry(tmp_path / "registry") as registry:
        env = registry_env(tmp_path)
        published = run_gitsync("publish", "--repo", url, "--to", registry.url("config"), "--key",
                                str(publisher.key), "--state-dir", str(tmp_path / "ci"), env=env)
        assert published.returncode == 0, published.stderr

        lacking = once(tmp_path / "lacking", gateway,
                       *agent_flags(registry, "config", publisher, url, tmp_path / "no-secrets"), env=env)
        assert lacking.returncode == 1
        assert "conf/routes.yaml:13:5: consumers[jack]" in lacking.stderr
        assert "undefined secret secrets.JACK_KEY" in lacking.stderr
        assert gateway.config().get("consumers") in (None, [])

        done = once(tmp_path / "good", gateway,
                    *agent_flags(registry, "config", publisher, url, host_secrets(tmp_path / "s")), env=env)
        assert done.returncode == 0, done.stderr
        assert f"applied: {sha[:7]} v1" in done.stdout
        assert gateway.config()["consumers"][0]["plugins"]["key-auth"]["key"] == HOST_SECRET
        assert HOST_SECRET not in done.stdout + done.stderr


def test_the_small_setup_never_imports_the_artifact_code(tmp_path, git_daemon, remote_repo, gateway):
    remote_repo.commit(routes(), "v1")
    key = tmp_path / "admin-key"
    key.write_text(ADMIN_KEY)
    run = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "gitsync", "sync", "--once", "--repo",
         repo_url(git_daemon, remote_repo), "--gateway", gateway.url, "--admin-key-file", str(key),
         "--state-dir", str(tmp_path / "agent"), "--secrets-dir", str(host_secrets(tmp_path / "s"))],
        env=gitsync_env(), capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    imported = [line.rsplit("|", 1)[-1].strip() for line in run.stderr.splitlines()
                if line.startswith("import time:")]
    assert "gitsync.agent.sync" in imported  # the listing is the whole run's
    assert not [name for name in imported if name.startswith("gitsync.artifact") or "artifact_repo" in name]
