"""Shared fixtures."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gitsync import log as gslog
from gitsync.testing.apisix import ApisixDouble


@pytest.fixture(autouse=True)
def _clean_redactor() -> Iterator[None]:
    yield
    gslog.forget_secrets()


@pytest.fixture
def apisix() -> Iterator[ApisixDouble]:
    """A fresh APISIX 3.18 Admin API double (admin key ``test-admin-key``) with a data plane, on loopback."""
    with ApisixDouble("test-admin-key") as double:
        yield double
