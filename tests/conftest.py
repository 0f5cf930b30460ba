"""Shared fixtures."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gitsync import log as gslog


@pytest.fixture(autouse=True)
def _clean_redactor() -> Iterator[None]:
    yield
    gslog.forget_secrets()
