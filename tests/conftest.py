"""Shared fixtures: the log redactor reset, and real git servers on 127.0.0.1 (see gitservers.py)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import testkit.profiles  # noqa: F401 - the Hypothesis profile (dev, or ci from scripts/test)
from gitsync import log as gslog
from gitsync.testing.apisix import ApisixDouble
from testkit.agents import own_daemon, spawn  # noqa: F401 - fixtures for every test module
from testkit.gitservers import BareRepo, GitDaemon, HttpGitServer, SshGitServer
from testkit.vaultserver import VaultServer, start_vault

_repo_names = itertools.count()


@pytest.fixture(autouse=True)
def _clean_redactor() -> Iterator[None]:
    yield
    gslog.forget_secrets()


@pytest.fixture(scope="session")
def vault_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VaultServer]:
    """A real OpenBao dev server on 127.0.0.1 with a KV version 1 engine at ``kv/``."""
    server = start_vault(tmp_path_factory.mktemp("openbao"))
    yield server
    server.stop()


@pytest.fixture
def apisix() -> Iterator[ApisixDouble]:
    """A fresh APISIX 3.18 Admin API double (admin key ``test-admin-key``) with a data plane, on loopback."""
    with ApisixDouble("test-admin-key") as double:
        yield double


@pytest.fixture(scope="module")
def shared_apisix() -> Iterator[ApisixDouble]:
    """One APISIX double for a whole module (property tests: each example sets the state it needs)."""
    with ApisixDouble("test-admin-key") as double:
        yield double


@pytest.fixture(scope="session")
def remotes_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The directory every served repo lives in (one per test, see `remote_repo`)."""
    return tmp_path_factory.mktemp("remotes")


@pytest.fixture
def remote_repo(remotes_root: Path) -> BareRepo:
    """A new, empty bare repo under `remotes_root`, reachable through every server fixture."""
    return BareRepo.create(remotes_root / f"repo{next(_repo_names)}.git")


@pytest.fixture(scope="session")
def git_daemon(remotes_root: Path) -> Iterator[GitDaemon]:
    """``git daemon`` (upload-pack and receive-pack) over `remotes_root`."""
    with GitDaemon(remotes_root, receive_pack=True) as daemon:
        yield daemon


@pytest.fixture(scope="session")
def http_git(remotes_root: Path) -> Iterator[HttpGitServer]:
    """Smart HTTP without auth (``git http-backend``, receive-pack on) over `remotes_root`."""
    with HttpGitServer(remotes_root) as server:
        yield server


@pytest.fixture(scope="session")
def ssh_git(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshGitServer]:
    """sshd on 127.0.0.1 with its own host key; `ssh_git.client_key` may log in."""
    with SshGitServer(tmp_path_factory.mktemp("sshd")) as server:
        yield server


@pytest.fixture
def servers_by_kind(git_daemon: GitDaemon, http_git: HttpGitServer, ssh_git: SshGitServer) -> dict:
    """The session's servers by URL scheme: ``git``, ``http``, ``ssh``."""
    return {"git": git_daemon, "http": http_git, "ssh": ssh_git}


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: `-p no:xdist` runs without it
def pytest_testnodedown(node: Any, error: Any) -> None:
    """pytest-xdist's controller: a worker's golden-fidelity figures, for the run's summary."""
    figures = getattr(node, "workeroutput", {}).get("golden-fidelity")
    if figures:
        from tests.testing.test_golden import fidelity_of

        fidelity_of(node.config).merge(figures)
