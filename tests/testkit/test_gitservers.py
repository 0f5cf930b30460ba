"""The test servers themselves: each takes a push (the write-back helper relies on it)."""

from __future__ import annotations

import shlex

import pytest
from dulwich import porcelain

from testkit.gitservers import BareRepo, HttpAuth, HttpGitServer, git


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["git", "http", "ssh"])
def test_each_server_takes_a_push_from_git_and_dulwich(kind, remote_repo, servers_by_kind, tmp_path):
    server = servers_by_kind[kind]
    first = remote_repo.commit({"a.yaml": "1"})
    url = server.url(remote_repo.path) if kind == "ssh" else server.url(remote_repo.path.name)
    env = {"GIT_SSH_COMMAND": shlex.join(server.ssh_command())} if kind == "ssh" else {}

    work = tmp_path / "work"
    git("clone", "-q", url, str(work), env=env)
    (work / "b.yaml").write_text("2")
    git("add", "b.yaml", cwd=work)
    git("commit", "-q", "-m", "from the cli", cwd=work)
    git("push", "-q", "origin", "HEAD:main", cwd=work, env=env)
    by_cli = git("rev-parse", "HEAD", cwd=work)
    assert remote_repo.tip() == by_cli and by_cli != first

    if kind == "ssh":
        return  # dulwich over ssh is exercised by test_source
    with porcelain.open_repo_closing(str(work)) as repo:
        (work / "c.yaml").write_text("3")
        porcelain.add(repo, [str(work / "c.yaml")])
        by_dulwich = porcelain.commit(repo, message=b"from dulwich", author=b"T <t@example.test>",
                                      committer=b"T <t@example.test>").decode()
        porcelain.push(repo, url, refspecs=[b"HEAD:refs/heads/main"])
    assert remote_repo.tip() == by_dulwich


def test_http_push_with_basic_auth(remote_repo, remotes_root, tmp_path):
    remote_repo.commit({"a.yaml": "1"})
    with HttpGitServer(remotes_root, HttpAuth("writer", "w-pass")) as server:
        url = server.url(remote_repo.path.name).replace("//", "//writer:w-pass@")
        clone = BareRepo(tmp_path / "clone.git")
        git("clone", "-q", "--bare", url, str(clone.path))
        new = clone.commit({"b.yaml": "2"})
        git("push", "-q", url, "main", cwd=clone.path)
        assert remote_repo.tip() == new
        with pytest.raises(RuntimeError, match=r"could not read Username|Authentication failed"):
            git("push", "-q", server.url(remote_repo.path.name), "main", cwd=clone.path)
