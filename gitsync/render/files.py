"""Which files a render reads: config files under the configured paths, each in one layer.

A git tree and a plain directory are read by the same rules, so both sources see the same
files: ``*.yaml``, ``*.yml`` and ``*.json`` in any letter case (``A.YAML`` too), no dot-file or
dot-directory; a regular file only (no symlink is followed, no FIFO or device opened); no file
is loaded before its size is known to be within ``max_file_size``. An entry that looks like
config but is skipped is logged as a warning: its items would be missing from the payload, and
so pruned from the gateways.
"""

from __future__ import annotations

import errno
import functools
import os
import stat
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
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


def read_directory(root: Path, max_file_size: int = DEFAULT_MAX_FILE_SIZE) -> ConfigFiles:
    """The config files of a plain directory, by repo-relative posix path.

    Skips ``.git``, dot-files and dot-directories and non-config files silently; symlinks (to
    files or directories) and config-named files that are not regular files (a FIFO would block
    the read forever) with a warning each. A file over `max_file_size` is not read.
    """
    root = Path(root)
    if not root.is_dir():
        raise NotADirectoryError(f"{root}: not a directory")
    files = ConfigFiles()
    for directory, subdirs, names in os.walk(root):
        base = Path(directory)
        kept = []
        for name in sorted(subdirs):
            if name.startswith("."):
                continue
            if (base / name).is_symlink():
                skipped((base / name).relative_to(root).as_posix(), "a symbolic link to a directory (links "
                        "are not followed)")
                continue
            kept.append(name)
        subdirs[:] = kept
        for name in sorted(names):
            full = base / name
            relative = full.relative_to(root).as_posix()
            if not may_hold_config(relative):
                continue
            info = os.lstat(full)
            if stat.S_ISLNK(info.st_mode):
                skipped(relative, "a symbolic link (links are not followed)")
            elif is_config_file(relative):
                _read_regular(full, relative, max_file_size, files)
    return files


def _read_regular(full: Path, relative: str, max_file_size: int, into: ConfigFiles) -> None:
    """Read one config file into `into` if it is a regular file within the size limit. Opened
    without following a link and without blocking, then checked by its descriptor: a file
    swapped for a FIFO or a link after the directory was listed is still never waited on."""
    try:
        fd = os.open(full, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            skipped(relative, "a symbolic link (links are not followed)")
            return
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            skipped(relative, "not a regular file (a FIFO, socket or device)")
            return
        if info.st_size > max_file_size:
            into.oversized[relative] = info.st_size
            return
        with os.fdopen(os.dup(fd), "rb") as stream:
            data = stream.read(max_file_size + 1)  # it may have grown since fstat
        if len(data) > max_file_size:
            into.oversized[relative] = max(len(data), os.fstat(fd).st_size)
        else:
            into[relative] = data
    finally:
        os.close(fd)


def layers(files: Iterable[str], paths: Iterable[str]) -> tuple[list[list[str]], list[str]]:
    """Split the config files into one sorted list per configured path (a directory or one file).

    A file under several configured paths belongs to the most specific (longest) one,
    so ``paths = [".", "envs/prod"]`` reads ``envs/prod`` once, as the overlay.
    Returns the layers and the configured paths that hold no config file at all (the same lists
    for the same names: a commit that changes files but not their names costs a lookup; read only).
    """
    return _layers(frozenset(files), tuple(paths))


@functools.lru_cache(maxsize=4)
def _layers(files: frozenset[str], paths: tuple[str, ...]) -> tuple[list[list[str]], list[str]]:
    normalized = [normalize_path(p) for p in paths]
    buckets: list[list[str]] = [[] for _ in normalized]
    for file in sorted(f for f in files if is_config_file(f)):
        best = -1
        for i, prefix in enumerate(normalized):
            if (prefix in ("", file) or file.startswith(prefix + "/")) and (
                    best < 0 or len(prefix) >= len(normalized[best])):
                best = i
        if best >= 0:
            buckets[best].append(file)
    empty = [p for p, bucket in zip(paths, buckets, strict=True) if not bucket]
    return buckets, empty



