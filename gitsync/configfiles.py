"""The config repo's files: which paths hold config, and the files of one commit as a source gives them.

A git tree and a plain directory are read by the same rules, so both sources see the same
files: ``*.yaml``, ``*.yml`` and ``*.json`` in any letter case (``A.YAML`` too), no dot-file or
dot-directory; a regular file only (no symlink is followed, no FIFO or device opened); no file
is loaded before its size is known to be within ``max_file_size``. An entry that looks like
config but is skipped is logged as a warning: its items would be missing from the payload, and
so pruned from the gateways.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

from gitsync.log import logger
from gitsync.problems import quote_name
from gitsync.settings import SPEC_BY_NAME

CONFIG_SUFFIXES = (".yaml", ".yml", ".json")
DEFAULT_MAX_FILE_SIZE: int = SPEC_BY_NAME["max_file_size"].default


class ConfigFiles(dict[str, bytes]):
    """The config files a source read, by repo-relative path, and those left unread for their size
    (`oversized`: path → bytes), which render reports along with every other problem.

    A git source may leave a file's bytes unread when render's parse cache already holds its blob
    (`blob_ids` names it, `load` reads it should anything still ask): a one-file change reads one
    file's bytes, not all of them."""

    def __init__(self, files: Mapping[str, bytes] | None = None,
                 oversized: Mapping[str, int] | None = None) -> None:
        super().__init__(files or {})
        self.oversized: dict[str, int] = dict(oversized or {})
        self.blob_ids: dict[str, str] = {}  # path → git blob SHA, where known
        self.unread: set[str] = set()  # paths whose bytes are read only if asked for (`load`)
        self.load: Callable[[str], bytes] | None = None  # blob SHA → bytes

    def __missing__(self, name: str) -> bytes:
        if name not in self.unread or self.load is None:
            raise KeyError(name)
        data = self.load(self.blob_ids[name])
        self.unread.discard(name)
        self[name] = data
        return data

    def get(self, name: str, default: Any = None) -> Any:  # type: ignore[override]
        try:
            return self[name]
        except KeyError:
            return default

    def names(self) -> list[str]:
        """Every config file's path, read or not (not the oversized ones)."""
        return [*self.keys(), *sorted(self.unread)]


def _hidden(path: str) -> bool:
    """A dot-file, or anything under a dot-directory (``.git``, ``.github``)."""
    return any(part.startswith(".") for part in path.split("/"))


@functools.lru_cache(maxsize=1 << 16)  # asked of every path of every commit read
def is_config_file(path: str) -> bool:
    """A ``*.yaml|*.yml|*.json`` file (any case) with no dot-file or dot-directory in its path."""
    return path.lower().endswith(CONFIG_SUFFIXES) and not _hidden(path)


def may_hold_config(path: str) -> bool:
    """A link or submodule that could stand for config: a config file's name, or one without an
    extension (a directory, as likely as not)."""
    return is_config_file(path) or ("." not in path.rsplit("/", 1)[-1] and not _hidden(path))


def skipped(path: str, what: str) -> None:
    """Say that an entry under the configured paths was left out, and what that means."""
    logger.warning("skipped {}: {}; nothing in it is applied (its items are pruned from the gateways)",
                   quote_name(path), what)


def normalize_path(path: str) -> str:
    """``./envs/prod/`` → ``envs/prod``; the repo root is ``""``."""
    parts = [p for p in path.replace("\\", "/").split("/") if p not in ("", ".")]
    return "/".join(parts)
