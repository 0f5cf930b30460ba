"""The input of the one-shot commands (render, validate, diff, sync --once with ``--repo``): one
commit, fetched, verified and read."""

from __future__ import annotations

import os
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from gitsync.log import logger
from gitsync.source.mirror import Source
from gitsync.source.read import CommitFiles

if TYPE_CHECKING:
    from gitsync.settings import Settings

def writable_dir(directory: Path) -> bool:
    """Create `directory` if needed; True when this process can write in it."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError:
        return False
    return os.access(directory, os.W_OK | os.X_OK)


def read_input(settings: Settings) -> CommitFiles:
    """For render/validate/diff/sync --once with ``--repo``: fetch, verify and read one commit.

    The mirror lives in ``state_dir/mirror`` when the state dir is writable (so repeated runs
    fetch only what is new), else in a temp dir dropped afterwards. A mirror kept for another
    remote (the daemon's) is left alone: a one-shot for another repo uses a temp dir too.
    """
    source = Source.from_settings(settings)
    if writable_dir(settings.state_dir) and source.mirror_url() in (None, source.url):
        return _fetch_verify_read(source)
    with tempfile.TemporaryDirectory(prefix="gitsync-") as tmp:
        logger.debug("using a temporary mirror: {} is not writable or mirrors another remote",
                     settings.state_dir)
        return _fetch_verify_read(Source.from_settings(replace(settings, state_dir=Path(tmp))))


def _fetch_verify_read(source: Source) -> CommitFiles:
    sha = source.fetch()
    source.verify(sha)
    return source.read(sha)
