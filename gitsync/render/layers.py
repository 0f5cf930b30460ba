"""Layers: which configured path (a directory or one file) each config file belongs to; a later
path overlays an earlier one."""

from __future__ import annotations

import functools
from collections.abc import Iterable

from gitsync.configfiles import is_config_file, normalize_path


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
