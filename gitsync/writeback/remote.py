"""The write-back's side of the remote: a small local work repo, and reads and compare-and-swap
pushes of single refs through the git transport."""

from __future__ import annotations

import re
import stat
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dulwich.errors import HangupException
from dulwich.file import FileLocked
from dulwich.gc import maybe_auto_gc
from dulwich.protocol import PEELED_TAG_SUFFIX, ZERO_SHA
from dulwich.repo import Repo

from gitsync.log import logger
from gitsync.source.transport import Remote, SourceError
from gitsync.writeback.wire import STATUS_FILE, load_status

if TYPE_CHECKING:
    pass


# The work repo's refs: what it last saw of each remote ref. Under refs/heads/, because a fetch
# offers the local heads as what it has: the server then sends only objects the repo lacks.
LOCAL_FLEET_PREFIX = b"refs/heads/fleet/"  # every agent's status ref
_NON_FAST_FORWARD = re.compile(r"non-fast-forward|not a fast.forward", re.IGNORECASE)
# Words in a refusal that mean "you may not push here", as git daemon, http-backend, ssh and the OS say it.
_DENIED = re.compile(
    r"permission denied|access denied|not permitted|forbidden|unauthori[sz]ed|authentication failed|"
    r"\b40[13]\b|service not enabled|read-only|read only", re.IGNORECASE)




def is_permission_denied(failure: BaseException | str) -> bool:
    """Does this push failure mean "you may not write here" (as opposed to "try again later")?"""
    if isinstance(failure, PermissionError):
        return True
    text = failure if isinstance(failure, str) else f"{type(failure).__name__}: {failure}"
    return bool(_DENIED.search(text))



# ---------------------------------------------------------------------------------------------------------
# Talking to the remote


class WriteBackError(Exception):
    """A write-back could not be completed (the remote refused, kept moving, or is unreachable)."""


class RefMoved(Exception):
    """The remote ref is no longer the tip the new commit was built on."""


def open_work_repo(path: Path) -> Repo:
    """The local bare repo holding fetched status/notes objects; created on first use."""
    if (path / "objects").is_dir():
        return Repo(str(path))
    path.mkdir(parents=True, exist_ok=True)
    return Repo.init_bare(str(path))


def _under(ref: bytes, wanted: Sequence[bytes]) -> bool:
    """`ref` is one of `wanted`: a name ending in ``/`` is a namespace, any other an exact ref."""
    return any(ref.startswith(w) and (w.endswith(b"/") or ref == w) for w in wanted)


def transient(exc: BaseException) -> bool:
    """A failure worth another try soon: no answer, or a connection dropped (a busy server: git daemon
    drops connections beyond --max-connections), as opposed to a refusal or a missing repository."""
    if isinstance(exc, SourceError):
        cause = exc.__context__  # what the transport raised (`Remote.network` words it for people)
        return exc.unreachable or isinstance(cause, HangupException | ConnectionError | TimeoutError)
    return isinstance(exc, ConnectionError | TimeoutError)


class RefWire:
    """The remote seen from the local work repo: read the refs of some names (fetching only the tips
    it lacks), and move one ref by compare-and-swap."""

    def __init__(self, remote: Remote, repo: Repo) -> None:
        self.url = remote.url
        self.remote = remote
        self.client, self.path = remote.client()
        self.repo = repo

    def close(self) -> None:
        self.client.close()

    def _network(self, action: Callable[[], Any]) -> Any:
        return self.remote.network("writeback", action)

    def fetch(self, wanted: Sequence[bytes]) -> dict[bytes, bytes]:
        """The remote's refs among `wanted` (ref → commit), the objects of each tip fetched unless held.

        Protocol v2 filters the advertisement by prefix on the server (``ls-refs``); a read where no
        ref moved asks for no pack at all."""
        store = self.repo.object_store

        def wants(refs: Mapping[bytes, bytes], depth: int | None = None) -> list[bytes]:
            return list(dict.fromkeys(sha for ref, sha in refs.items()
                                      if _under(ref, wanted) and sha != ZERO_SHA and sha not in store))

        result = self._network(lambda: self.client.fetch(self.path, self.repo, determine_wants=wants,
                                                         ref_prefix=list(wanted)))
        tips = {ref: sha for ref, sha in result.refs.items()
                if _under(ref, wanted) and sha and sha != ZERO_SHA and not ref.endswith(PEELED_TAG_SUFFIX)}
        if any(sha not in store for sha in tips.values()):
            # A local-path remote seen mid-push by another writer: the ref moved before its pack showed.
            raise RefMoved("the remote's new tip is not readable yet")
        return tips

    def push(self, ref: bytes, base: bytes | None, new: bytes) -> None:
        """Move the remote `ref` from `base` to `new`, or raise `RefMoved` if it is no longer at `base`."""
        expected = base or ZERO_SHA
        moved = False

        def update_refs(refs: dict[bytes, bytes]) -> dict[bytes, bytes]:
            nonlocal moved
            moved = refs.get(ref, ZERO_SHA) != expected
            return {} if moved else {ref: new}  # nothing at all is sent when the ref moved

        def send() -> Any:
            try:
                return self.client.send_pack(self.path, update_refs,
                                             self.repo.object_store.generate_pack_data)
            except FileLocked:  # a local-path remote: another writer holds the ref's lock right now
                return None

        result = self._network(send)
        if result is None:
            raise RefMoved("locked by another writer")
        if moved:
            raise RefMoved("moved by another writer since it was read")
        failed = {name: why for name, why in (result.ref_status or {}).items() if why}
        if failed:
            why = failed.get(ref) or next(iter(failed.values()))
            if is_permission_denied(why):
                raise WriteBackError(f"{self.url}: push of {ref.decode()} refused: {why}")
            if _NON_FAST_FORWARD.search(why) and base is not None and base not in self.repo[new].parents:
                # a status ref is rewritten by design: a remote that forbids that always will
                raise WriteBackError(f"{self.url}: push of {ref.decode()} refused: {why} (status refs are "
                                     "rewritten on every change and heartbeat: allow non-fast-forward "
                                     "updates of them, e.g. git config receive.denyNonFastForwards false)")
            raise RefMoved(f"remote refused: {why}")  # "failed to lock", "stale info": someone was faster


def set_local_ref(repo: Repo, local_ref: bytes, sha: bytes | None) -> None:
    """Point a local ref at what the remote holds (delete it when the remote has none)."""
    if sha is None:
        if local_ref in repo.refs:
            del repo.refs[local_ref]
    elif local_ref_sha(repo, local_ref) != sha:
        repo.refs[local_ref] = sha


def local_ref_sha(repo: Repo, local_ref: bytes) -> bytes | None:
    try:
        return repo.refs[local_ref]
    except KeyError:
        return None


def status_of(store: Any, commit_sha: bytes) -> tuple[bytes, dict[str, Any] | None] | None:
    """The ``status.yaml`` blob of a status commit and its document (None when unreadable); None when
    the commit holds no such file."""
    tree = store[store[commit_sha].tree]
    if STATUS_FILE not in tree:
        return None
    mode, blob = tree[STATUS_FILE]
    if not stat.S_ISREG(mode):
        return None
    return blob, load_status(store[blob].data)


def mirror_fleet(repo: Repo, prefix: bytes, tips: Mapping[bytes, bytes]) -> None:
    """Keep a local ref per remote status ref (what the next fetch negotiates with), drop the gone ones."""
    local = {LOCAL_FLEET_PREFIX + ref[len(prefix):]: sha for ref, sha in tips.items()}
    held = repo.refs.as_dict(LOCAL_FLEET_PREFIX)
    for name, sha in local.items():
        if held.get(name[len(LOCAL_FLEET_PREFIX):]) != sha:
            repo.refs[name] = sha
    for name in held:
        if LOCAL_FLEET_PREFIX + name not in local:
            del repo.refs[LOCAL_FLEET_PREFIX + name]


def tidy(repo: Repo) -> None:
    """Keep the work repo small: git's auto-gc thresholds (loose objects, pack count), best effort."""
    try:
        maybe_auto_gc(repo)
    except Exception as exc:  # a cache: a failed gc costs disk, never a write-back
        logger.debug("write-back: gc of {} failed: {}", repo.path, exc)
