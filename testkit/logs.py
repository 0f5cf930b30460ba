"""The agent's log in memory, for tests that read what it says."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator

from gitsync import log as gslog


@contextlib.contextmanager
def captured(verbose: int = 1) -> Iterator[io.StringIO]:
    """gitsync's log sink set to a string buffer (at `verbose`) for the block; the default sink after."""
    out = io.StringIO()
    gslog.setup(stream=out, verbose=verbose)
    try:
        yield out
    finally:
        gslog.setup()


__all__ = ["captured"]
