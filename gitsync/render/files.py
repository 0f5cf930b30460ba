"""Which files a render reads: config files under the configured paths, each in one layer."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

CONFIG_SUFFIXES = (".yaml", ".yml", ".json")


def is_config_file(path: str) -> bool:
    """A ``*.yaml|*.yml|*.json`` file with no dot-file or dot-directory in its path."""
    return path.endswith(CONFIG_SUFFIXES) and not any(part.startswith(".") for part in path.split("/"))


def normalize_path(path: str) -> str:
    """``./envs/prod/`` → ``envs/prod``; the repo root is ``""``."""
    parts = [p for p in path.replace("\\", "/").split("/") if p not in ("", ".")]
    return "/".join(parts)


def read_directory(root: Path) -> dict[str, bytes]:
    """The config files of a plain directory, by repo-relative posix path.

    Skips ``.git``, dot-files and dot-directories, non-config files and symlinks (a
    git tree never follows a symlink either, so both sources see the same files).
    """
    root = Path(root)
    if not root.is_dir():
        raise NotADirectoryError(f"{root}: not a directory")
    files: dict[str, bytes] = {}
    for directory, subdirs, names in os.walk(root):
        subdirs[:] = sorted(d for d in subdirs if not d.startswith("."))
        base = Path(directory)
        for name in sorted(names):
            full = base / name
            relative = full.relative_to(root).as_posix()
            if not is_config_file(relative) or full.is_symlink():
                continue
            files[relative] = full.read_bytes()
    return files


def layers(files: Iterable[str], paths: Iterable[str]) -> tuple[list[list[str]], list[str]]:
    """Split the config files into one sorted list per configured path (a directory or one file).

    A file under several configured paths belongs to the most specific (longest) one,
    so ``paths = [".", "envs/prod"]`` reads ``envs/prod`` once, as the overlay.
    Returns the layers and the configured paths that hold no config file at all.
    """
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



