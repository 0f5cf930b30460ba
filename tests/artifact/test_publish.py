"""``gitsync publish`` (gitsync.artifact.publish) as CI runs it, a real process against a real git daemon and
a real registry: a good commit is published under its branch's tag with the digest printed, and no
secret the publishing host holds reaches the registry's disk; a bad commit is refused at its file:line
and nothing is published; ``--to git`` writes the artifact and its signature under
``refs/gitsync/artifacts/<branch>``."""

from __future__ import annotations

import json
import re

import pytest

from gitsync.artifact.document import parse
from gitsync.artifact.signing import ArtifactSigners, statement
from testkit.agents import repo_url
from testkit.artifacts import HOST_SECRET, Publisher, host_secrets, registry_env, routes
from testkit.gitservers import git
from testkit.processes import run_gitsync
from testkit.registry import Registry

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    with Registry(tmp_path_factory.mktemp("registry")) as started:
        yield started


def publish(tmp_path, url: str, target: str, publisher: Publisher, *extra: str):
    env = {**registry_env(tmp_path), "GITSYNC_SECRET_JACK_KEY": HOST_SECRET}
    return run_gitsync("publish", "--repo", url, "--to", target, "--key", str(publisher.key),
                       "--state-dir", str(tmp_path / "state"),
                       "--secrets-dir", str(host_secrets(tmp_path / "s")),
                       *extra, env=env)


def test_a_good_commit_is_published_and_no_host_secret_reaches_the_registry(tmp_path, git_daemon, remote_repo,
                                                                              registry):
    url = repo_url(git_daemon, remote_repo)
    sha = remote_repo.commit(routes(), "v1")
    publisher = Publisher.make(tmp_path / "keys", f"main@{url}")
    done = publish(tmp_path, url, registry.url(remote_repo.path.name.removesuffix(".git")), publisher)
    assert done.returncode == 0, done.stderr
    printed = re.search(r"published (\S+) (sha256:[0-9a-f]{64}) "
                        r"\(artifact (sha256:[0-9a-f]{64}), commit (\w+)\)", done.stdout)
    assert printed is not None, done.stdout
    assert printed.group(1).endswith(":main") and printed.group(4) == sha
    artifact = registry.blob_path(printed.group(3)).read_bytes()
    read = parse(artifact)
    assert read.commit == sha and read.branch == "main" and read.repo == url
    assert read.payload["consumers"][0]["plugins"]["key-auth"]["key"] == "${{ secrets.JACK_KEY }}"
    every_byte = b"".join(p.read_bytes() for p in registry.storage.rglob("*") if p.is_file())
    assert HOST_SECRET.encode() not in every_byte
    assert HOST_SECRET not in done.stdout + done.stderr


def test_a_bad_commit_is_refused_at_its_place_and_nothing_is_published(tmp_path, git_daemon, remote_repo,
                                                                         registry):
    url = repo_url(git_daemon, remote_repo)
    files = routes()
    files["conf/routes.yaml"] = files["conf/routes.yaml"].replace("uri: /orders", "uri: 42")
    remote_repo.commit(files, "broken")
    publisher = Publisher.make(tmp_path / "keys", f"main@{url}")
    name = remote_repo.path.name.removesuffix(".git")
    done = publish(tmp_path, url, registry.url(name), publisher)
    assert done.returncode == 1
    assert re.search(r"conf/routes\.yaml:8:5: routes\[orders\]\.uri", done.stderr), done.stderr
    assert "nothing published" in done.stderr
    assert not (registry.storage / "docker/registry/v2/repositories" / name).exists()


def test_publish_to_git_writes_the_artifact_ref(tmp_path, git_daemon, remote_repo):
    url = repo_url(git_daemon, remote_repo)
    sha = remote_repo.commit(routes(), "v1")
    publisher = Publisher.make(tmp_path / "keys", f"main@{url}")
    done = publish(tmp_path, url, "git", publisher)
    assert done.returncode == 0, done.stderr
    assert "to refs/gitsync/artifacts/main" in done.stdout
    ref = "refs/gitsync/artifacts/main"
    artifact = git("--git-dir", str(remote_repo.path), "show", f"{ref}:artifact.json").encode()
    signature = git("--git-dir", str(remote_repo.path), "show", f"{ref}:artifact.sig").encode()
    read = parse(artifact)
    assert read.commit == sha
    ArtifactSigners(publisher.signers).verify(statement(read.digest, read.repo, read.branch, read.commit),
                                              signature, read.repo, read.branch)


def test_a_target_that_is_no_registry_or_git_is_a_usage_error(tmp_path):
    publisher = Publisher.make(tmp_path / "keys", "*")
    done = publish(tmp_path, "git://127.0.0.1:1/x", "https://registry.example/x", publisher)
    assert done.returncode == 2
    assert "--to" in done.stderr and "oci://host" in done.stderr
    assert json.dumps(HOST_SECRET) not in done.stderr
