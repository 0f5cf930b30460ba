"""The agent's log in memory, for tests that read what was logged."""

from __future__ import annotations

import io
from collections.abc import Iterator
from contextlib import contextmanager

from gitsync import log as gslog


@contextmanager
def captured_log(verbose: int = 1) -> Iterator[io.StringIO]:
    """The one log sink writing to a string (DEBUG and up with `verbose` 1); the default sink again after."""
    out = io.StringIO()
    gslog.setup(stream=out, verbose=verbose)
    try:
        yield out
    finally:
        gslog.setup()
