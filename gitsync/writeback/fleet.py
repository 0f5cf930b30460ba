"""Reading the fleet: every agent's status from the status refs, cheap enough for every poll, each one
checked as the untrusted input it is (`statusfile`) and, with `status_signers`, by its signature
(`trust`)."""

from __future__ import annotations

import contextlib
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from dulwich.objects import Commit, Tree
from dulwich.repo import Repo

from gitsync.backoff import backoff_delay
from gitsync.log import logger
from gitsync.names import agent_slug, decode_slug
from gitsync.source.transport import Remote, SourceError
from gitsync.writeback.remote import RefMoved, RefWire, mirror_fleet, open_work_repo, tidy
from gitsync.writeback.statusfile import FleetEntry, StatusFile, Unreadable, read_status
from gitsync.writeback.trust import StatusSigners
from gitsync.writeback.wire import STATUS_FILE, status_prefix

if TYPE_CHECKING:
    from gitsync.settings import Settings


# ---------------------------------------------------------------------------------------------------------
# Reading the fleet


class FleetReader:
    """Every agent's status from the status refs, cheap enough to read on every poll.

    A read is one connection: the refs under the prefix (``ls-refs``, filtered by the server), then a
    fetch of only the tips this reader does not hold yet (none when no agent wrote since the last
    read), into a local work repo that keeps them for the next negotiation. A status is read, checked
    and its signature verified once per tip (`FleetEntry`).
    """

    def __init__(self, remote: Remote, work_dir: Path, status_refs: str = "refs/gitsync/status",
                 signers: StatusSigners | None = None) -> None:
        self.remote = remote
        self.work_dir = Path(work_dir)
        self.prefix = status_prefix(status_refs)
        self.signers = signers
        self._entries: dict[tuple[bytes, bytes], FleetEntry] = {}  # (ref, tip) → what was read of it

    @classmethod
    def from_settings(cls, settings: Settings) -> FleetReader:
        """The agent's reader: the config repo's remote, its own work repo in the state dir
        (``<state_dir>/fleet``, apart from write-back's: the two run on different threads)."""
        return cls(Remote.from_settings(settings), Path(settings.state_dir) / "fleet", settings.status_refs,
                   signers_from_settings(settings))

    def read(self) -> list[FleetEntry]:
        """Every agent's status, sorted by agent; raises `SourceError` when the remote fails."""
        with open_work_repo(self.work_dir) as repo, contextlib.closing(RefWire(self.remote, repo)) as wire:
            for attempt in range(3):
                try:
                    tips = wire.fetch([self.prefix])
                    break
                except RefMoved:  # a local-path remote mid-push: read again
                    time.sleep(backoff_delay(attempt + 1, base=0.05, cap=0.5))
            else:
                raise SourceError("writeback", f"{self.remote.url}: the status refs kept moving")
            mirror_fleet(repo, self.prefix, tips)
            entries = {(ref, sha): self._entries.get((ref, sha)) or self._entry(repo, ref, sha)
                       for ref, sha in tips.items()}
            if set(entries) - set(self._entries):
                tidy(repo)  # each fetch adds a pack: read every poll, they would pile up
        self._entries = entries
        return sorted(entries.values(), key=lambda e: (e.agent, e.ref))

    def _entry(self, repo: Repo, ref: bytes, sha: bytes) -> FleetEntry:
        """What one status ref says, never raising: whatever its writer pushed, it is an entry."""
        name = ref[len(self.prefix):].decode("utf-8", "replace")
        try:
            agent = decode_slug(name)
        except UnicodeDecodeError:
            agent = name
        if not agent.isprintable():  # shown in logs and tables: the ref's own characters are safe there
            agent = name
        try:
            return self._read_entry(repo, name, agent, sha)
        except Exception as exc:  # an object store that cannot read what was pushed: that agent's problem
            logger.debug("fleet: {}: {}: {}", name, type(exc).__name__, exc)
            return FleetEntry(name, agent, None, f"cannot be read ({type(exc).__name__})", tip=sha.decode())

    def _read_entry(self, repo: Repo, name: str, agent: str, sha: bytes) -> FleetEntry:
        store = repo.object_store
        tip = store[sha]
        if not isinstance(tip, Commit):
            what = tip.type_name.decode()
            return FleetEntry(name, agent, None, f"the ref points to a {what}, not a commit",
                              tip=sha.decode())
        seen = _time(tip)
        status_commit = tip
        if tip.parents:  # a heartbeat: the status commit is its parent, with the same tree
            parent = store[tip.parents[0]] if tip.parents[0] in store else None  # noqa: SIM401 - no .get
            if not isinstance(parent, Commit) or parent.tree != tip.tree:
                return FleetEntry(name, agent, None, "a heartbeat whose parent is not its status",
                                  seen=seen, tip=sha.decode())
            status_commit = parent
        read = _status_file(store, tip)
        if isinstance(read, Unreadable):
            return FleetEntry(name, agent, None, read.reason, written=_time(status_commit), seen=seen,
                              tip=sha.decode())
        if _slug(read.agent) != name:
            return FleetEntry(name, agent, None, f"it speaks for {read.agent!r}, not for its ref's agent",
                              written=_time(status_commit), seen=seen, tip=sha.decode())
        signature = None
        if self.signers is not None:
            signature = self.signers.verify(tip, read.agent, read.group)
            if signature.verified and status_commit is not tip:
                signature = self.signers.verify(status_commit, read.agent, read.group)
        return FleetEntry(name, read.agent, read, None, signature, _time(status_commit), seen, sha.decode())


def _slug(agent: str) -> str | None:
    try:
        return agent_slug(agent)
    except ValueError:
        return None


def _time(commit: Commit) -> datetime | None:
    try:
        return datetime.fromtimestamp(commit.commit_time, UTC)
    except (OverflowError, OSError, ValueError):
        return None


def _status_file(store: object, commit: Commit) -> StatusFile | Unreadable:
    tree = store[commit.tree]  # type: ignore[index]
    if not isinstance(tree, Tree) or STATUS_FILE not in tree:
        return Unreadable(f"no {STATUS_FILE.decode()} in the status commit")
    mode, blob = tree[STATUS_FILE]
    if mode & 0o170000 != 0o100000:
        return Unreadable(f"{STATUS_FILE.decode()} is not a file")
    return read_status(store[blob].data)  # type: ignore[index]


def signers_from_settings(settings: Settings) -> StatusSigners | None:
    """`status_signers`, loaded; a file that cannot be read stops the agent at start (SettingsError)."""
    if settings.status_signers is None:
        return None
    from gitsync.settings import SettingsError

    try:
        signers = StatusSigners(settings.status_signers)
    except SourceError as exc:
        raise SettingsError(f"status_signers: {exc.reason}") from None
    if not len(signers):
        raise SettingsError(f"status_signers: {settings.status_signers} names no usable key")
    return signers


def read_fleet(remote: Remote, status_refs: str, work_dir: Path,
               signers: StatusSigners | None = None) -> list[FleetEntry]:
    """Every agent's status from the status refs, once (see `FleetReader`)."""
    return FleetReader(remote, work_dir, status_refs, signers).read()
