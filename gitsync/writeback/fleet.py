"""Reading the fleet: every agent's status from the status refs, cheap enough for every poll."""

from __future__ import annotations

import contextlib
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dulwich.repo import Repo

from gitsync.backoff import backoff_delay
from gitsync.source.transport import Remote, SourceError
from gitsync.writeback.remote import RefMoved, RefWire, mirror_fleet, open_work_repo, status_of, tidy
from gitsync.writeback.wire import iso_time, status_prefix

if TYPE_CHECKING:
    from gitsync.settings import Settings


# ---------------------------------------------------------------------------------------------------------
# Reading the fleet


class FleetReader:
    """Every agent's status from the status refs, cheap enough to read on every poll.

    A read is one connection: the refs under the prefix (``ls-refs``, filtered by the server), then a
    fetch of only the tips this reader does not hold yet (none when no agent wrote since the last
    read), into a local work repo that keeps them for the next negotiation. A document is parsed once
    per tip. Each document returned carries ``seen``: the commit time of the agent's ref (its last
    write: a status or a heartbeat).
    """

    def __init__(self, remote: Remote, work_dir: Path, status_refs: str = "refs/gitsync/status") -> None:
        self.remote = remote
        self.work_dir = Path(work_dir)
        self.prefix = status_prefix(status_refs)
        self._docs: dict[bytes, dict[str, Any]] = {}  # tip commit → its document, with "seen"

    @classmethod
    def from_settings(cls, settings: Settings) -> FleetReader:
        """The agent's reader: the config repo's remote, its own work repo in the state dir
        (``<state_dir>/fleet``, apart from write-back's: the two run on different threads)."""
        return cls(Remote.from_settings(settings), Path(settings.state_dir) / "fleet", settings.status_refs)

    def read(self) -> list[dict[str, Any]]:
        """Every agent's status document, sorted by agent; raises `SourceError` when the remote fails."""
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
            docs = {sha: self._docs.get(sha) or self._document(repo, ref, sha) for ref, sha in tips.items()}
            if set(docs) - set(self._docs):
                tidy(repo)  # each fetch adds a pack: read every poll, they would pile up
        self._docs = docs
        return sorted((dict(d) for d in docs.values()), key=lambda d: str(d.get("agent", "")))

    def _document(self, repo: Repo, ref: bytes, sha: bytes) -> dict[str, Any]:
        store = repo.object_store
        held = status_of(store, sha)
        doc = held[1] if held and held[1] is not None else None
        if doc is None:
            doc = {"agent": ref[len(self.prefix):].decode("utf-8", "replace"), "result": "unreadable"}
        doc["seen"] = iso_time(datetime.fromtimestamp(store[sha].commit_time, UTC))
        return doc


def read_fleet(remote: Remote, status_refs: str, work_dir: Path) -> list[dict[str, Any]]:
    """Every agent's status from the status refs, once (see `FleetReader`)."""
    return FleetReader(remote, work_dir, status_refs).read()
