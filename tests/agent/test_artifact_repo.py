"""An artifact source as the agent's repo (gitsync.agent.artifact_repo), through ``gitsync sync --once`` as
a real process: the artifact's commit goes live with the host's own secret in, a secret the host lacks
refuses the commit at its file:line (as the git path does), a failing health check rolls back and the
deletion guard holds a commit that empties a kind (as on git), and the small setup (a git repo, no
registry) never imports the artifact code at all."""

from __future__ import annotations

import subprocess
import sys

import pytest

from gitsync.testing.apisix import ApisixDouble
from testkit.agents import ADMIN_KEY, CHECKS, config, repo_url, upstream
from testkit.artifacts import HOST_SECRET, Publisher, agent_flags, host_secrets, registry_env, routes
from testkit.processes import free_port, gitsync_env, run_gitsync
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


def test_checks_rollback_and_the_deletion_guard_work_on_an_artifact_as_on_git(tmp_path, git_daemon,
                                                                              remote_repo):
    url = repo_url(git_daemon, remote_repo)
    publisher = Publisher.make(tmp_path / "keys", f"main@{url}")
    env = registry_env(tmp_path)
    with upstream() as good, Registry(tmp_path / "registry") as registry, \
            ApisixDouble(ADMIN_KEY, forward=True) as double:
        flags = [*agent_flags(registry, "config", publisher, url, tmp_path / "none"), "--proxy-url",
                 double.proxy_url]

        def publish_and_sync(files: dict[str, str], message: str, **commit: bool):
            remote_repo.commit(files, message, **commit)
            done = run_gitsync("publish", "--repo", url, "--to", registry.url("config"), "--key",
                               str(publisher.key), "--state-dir", str(tmp_path / "ci"), env=env)
            assert done.returncode == 0, done.stderr
            return once(tmp_path / "agent-dir", double, *flags, env=env)

        v1 = publish_and_sync(config(good), "v1")
        assert v1.returncode == 0, v1.stderr
        assert double.config()["upstreams"][0]["nodes"] == {good: 1}

        dead = f"127.0.0.1:{free_port()}"
        v2 = publish_and_sync(config(dead), "v2 breaks orders")
        assert v2.returncode == 1
        assert "conf/checks.yaml:2:5" in v2.stderr and "rolled back" in v2.stderr + v2.stdout
        assert double.config()["upstreams"][0]["nodes"] == {good: 1}

        v3 = publish_and_sync({"conf/upstreams.yaml": "upstreams: []\n", "conf/checks.yaml": CHECKS},
                              "v3 empties", replace=True)
        assert v3.returncode == 1
        assert "deletion guard" in v3.stderr + v3.stdout
        assert double.config()["upstreams"][0]["nodes"] == {good: 1}
