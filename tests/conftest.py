"""Shared fixtures."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gitsync import log as gslog
from gitsync.testing.apisix import ApisixDouble
from tests.vaultserver import VaultServer, start_vault


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
