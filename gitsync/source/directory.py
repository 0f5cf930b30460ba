"""A plain directory as a source (`--dir`: pre-commit hooks, CI): its config files, read by the
same rules as a git tree's (`gitsync.configfiles`)."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from gitsync.configfiles import DEFAULT_MAX_FILE_SIZE, ConfigFiles, is_config_file, may_hold_config, skipped


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
