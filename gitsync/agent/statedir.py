"""The state directory: what was applied where, written so that a kill at any moment leaves it readable.

Layout::

    <state_dir>/lock         flock'ed by the one agent that owns this directory
    <state_dir>/state.json   last good commit, per-gateway last applied commit and digest, bad commits
    <state_dir>/pushed.json  per gateway and kind, the ids gitsync pushed (written when they change)
    <state_dir>/indexes.json per gateway and kind, the modifiedIndex of each item that is not derived
                             from its content (kept from another writer; usually empty)
    <state_dir>/gate.json    with after_group: the group's members and the failures the gate has seen
                             (owned by gitsync.agent.fleet_gate, written with `atomic_write`)
    <state_dir>/fleet/       the status refs' objects the gate read (owned by gitsync.writeback.fleet)
    <state_dir>/mirror/      the bare git mirror (owned by gitsync.source.mirror)
    <state_dir>/parse-cache/ parsed plain config files by blob SHA (owned by gitsync.render.memo.store)

Every write of the state files goes to a temporary file that is fsync'ed and renamed over the old
one, then the directory is fsync'ed: a reader sees the old state or the new one, never half of either.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gitsync.agent.state import AgentState, StateError
from gitsync.files import atomic_write
from gitsync.log import logger

STATE_FILE = "state.json"
PUSHED_FILE = "pushed.json"  # per gateway and kind, the ids gitsync pushed (no content: no secret)
INDEXES_FILE = "indexes.json"  # per gateway and kind, the ids whose modifiedIndex gitsync did not derive
LOCK_FILE = "lock"


class StateDir:
    """The agent's state directory."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._lock_fd: int | None = None

    @property
    def mirror(self) -> Path:
        return self.path / "mirror"

    @property
    def parse_cache(self) -> Path:
        """Parsed plain config files by blob SHA (`gitsync.render.memo.store`)."""
        return self.path / "parse-cache"

    @property
    def state_file(self) -> Path:
        return self.path / STATE_FILE

    def ensure(self) -> None:
        try:
            self.path.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError as exc:
            raise StateError(f"state directory {self.path}: {exc.strerror or exc}") from None
        if not os.access(self.path, os.W_OK):
            raise StateError(f"state directory {self.path} is not writable")

    def acquire(self) -> None:
        """Take the single-instance lock, or raise `StateError` naming the holder's pid."""
        self.ensure()
        fd = os.open(self.path / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 32).decode(errors="replace").strip() or "another process"
            os.close(fd)
            raise StateError(f"state directory {self.path} is in use by pid {holder}") from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._lock_fd = fd

    def release(self) -> None:
        if self._lock_fd is not None:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = None

    @contextlib.contextmanager
    def locked(self) -> Iterator[StateDir]:
        self.acquire()
        try:
            yield self
        finally:
            self.release()

    def load(self, *, repair: bool = True) -> AgentState:
        """The saved state; a missing file is a fresh start, an unreadable one is logged and (when
        `repair`, as the agent that owns the directory does) set aside as ``state.corrupt``."""
        try:
            raw = self.state_file.read_bytes()
        except FileNotFoundError:
            return AgentState()
        try:
            return AgentState.from_json(json.loads(raw))
        except (ValueError, TypeError, AttributeError) as exc:
            if not repair:
                logger.error("state file {} is unreadable: {}", self.state_file, exc)
                return AgentState()
            aside = self.state_file.with_suffix(".corrupt")
            os.replace(self.state_file, aside)
            logger.error("state file {} is unreadable ({}); kept as {} and starting fresh",
                         self.state_file, exc, aside)
            return AgentState()

    def touch(self) -> None:
        """Mark the state file as current without writing it (its mtime: when the agent last looked)."""
        with contextlib.suppress(OSError):
            os.utime(self.state_file)

    def checked_at(self) -> datetime | None:
        """When the agent last looked (`touch`), from the state file's mtime; None without one."""
        try:
            return datetime.fromtimestamp(self.state_file.stat().st_mtime, UTC)
        except OSError:
            return None

    def load_pushed(self) -> dict[str, dict[str, list[str]]]:
        """Per gateway URL and kind, the ids gitsync last pushed there; {} when unknown or unreadable."""
        data = self._read_json(PUSHED_FILE)
        return {str(url): {str(k): [str(i) for i in ids] for k, ids in kinds.items() if isinstance(ids, list)}
                for url, kinds in data.items() if isinstance(kinds, dict)}

    def save_pushed(self, pushed: dict[str, dict[str, list[str]]]) -> None:
        atomic_write(self.path / PUSHED_FILE, json.dumps(pushed, sort_keys=True).encode() + b"\n")

    def load_indexes(self) -> dict[str, dict[str, dict[str, Any]]]:
        """Per gateway URL and kind, the ``modifiedIndex`` of each item gitsync pushed there with one
        that is not derived from its content (`gitsync.push.plan`); {} when unknown or unreadable."""
        data = self._read_json(INDEXES_FILE)
        return {str(url): {str(k): {str(i): n for i, n in ids.items() if type(n) in (int, float)}
                           for k, ids in kinds.items() if isinstance(ids, dict)}
                for url, kinds in data.items() if isinstance(kinds, dict)}

    def save_indexes(self, indexes: dict[str, dict[str, dict[str, Any]]]) -> None:
        atomic_write(self.path / INDEXES_FILE, json.dumps(indexes, sort_keys=True).encode() + b"\n")

    def _read_json(self, name: str) -> dict[str, Any]:
        try:
            data = json.loads((self.path / name).read_bytes())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def save(self, state: AgentState) -> None:
        atomic_write(self.state_file, json.dumps(state.to_json(), indent=1, sort_keys=True).encode() + b"\n")
