"""The write-back's side of the remote: a small local work repo, and reads and compare-and-swap
pushes of single refs through the git transport."""

from __future__ import annotations

import re
import shutil
import stat
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dulwich.errors import HangupException
from dulwich.file import FileLocked
from dulwich.gc import maybe_auto_gc
from dulwich.object_store import ObjectStoreGraphWalker
from dulwich.objects import Commit, Tree
from dulwich.protocol import PEELED_TAG_SUFFIX, ZERO_SHA
from dulwich.repo import Repo

from gitsync.log import logger
from gitsync.source.mirror import DEFAULT_LIMITS
from gitsync.source.packgate import LimitExceeded, ObjectLimits, fetch_bounded
from gitsync.source.sizes import object_size
from gitsync.source.transport import GitAuth, Remote, SourceError
from gitsync.urls import display_url
from gitsync.writeback.statusfile import MAX_STATUS_BYTES
from gitsync.writeback.wire import STATUS_FILE, load_status

if TYPE_CHECKING:
    from gitsync.settings import Settings
    from gitsync.writeback.trust import StatusSigner

# The work repo's refs: what it last saw of each remote ref. Under refs/heads/, because a fetch
# offers the local heads as what it has: the server then sends only objects the repo lacks.
LOCAL_FLEET_PREFIX = b"refs/heads/fleet/"  # every agent's status ref
#: Old tips offered as 'have's in one read of the status refs: those of refs that moved.
MAX_HAVES = 32
#: The limits of a read of status refs, per tip asked for: a status commit, its heartbeat, a tree and
#: the status file, none larger than a status file may be (`MAX_STATUS_BYTES`).
STATUS_LIMIT_NAMES = ("the size a status may have", "the objects a read of the status refs may bring",
                      "the bytes a read of the status refs may bring")
_NON_FAST_FORWARD = re.compile(r"non-fast-forward|not a fast.forward", re.IGNORECASE)
# Words in a refusal that mean "you may not push here", as git daemon, http-backend, ssh and the OS say it.
_DENIED = re.compile(
    r"permission denied|access denied|not permitted|forbidden|unauthori[sz]ed|authentication failed|"
    r"\b40[13]\b|service not enabled|read-only|read only", re.IGNORECASE)




def status_remote_url(template: str, group: str | None) -> str:
    """`status_remote` for `group`: ``{group}`` replaced by the group's name (refused without one: the
    settings make sure an agent that writes or reads there has one)."""
    if "{group}" not in template:
        return template
    if not group:
        raise ValueError(f"status_remote {display_url(template)} holds {{group}}, and no group is given")
    return template.replace("{group}", group)


def status_remote(settings: Settings, group: str | None = None) -> Remote:
    """Where the status refs (and the status branch) of `group` are: `status_remote` (``{group}`` made
    `group`), else the config repo; with the config repo's credentials and deadline either way."""
    if not settings.status_remote:
        return Remote.from_settings(settings)
    return Remote.of(status_remote_url(settings.status_remote, group), GitAuth.from_settings(settings),
                     settings.git_timeout)


def fleet_remotes(settings: Settings) -> tuple[str | None, ...]:
    """The groups whose status remotes a read of the whole fleet reads (`status_remote`): one remote
    (None) unless it holds ``{group}``; then this agent's group and its `after_group` (the groups it
    knows of: another group's repo is read with that group's name in `group`)."""
    if not (settings.status_remote and "{group}" in settings.status_remote):
        return (None,)
    return tuple(dict.fromkeys(g for g in (settings.group, settings.after_group) if g))


def status_limits(tips: int) -> ObjectLimits:
    """What a read of `tips` status refs may bring (see `STATUS_LIMIT_NAMES`)."""
    return ObjectLimits(MAX_STATUS_BYTES, 16 + 8 * tips, (2 + 4 * tips) * MAX_STATUS_BYTES,
                        STATUS_LIMIT_NAMES)


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


@dataclass(frozen=True)
class TipsRead:
    """A read of the refs under one prefix (`RefWire.read_tips`): every ref the remote listed there, the
    ones chosen, and those of the chosen whose objects went over the limits (not fetched): why."""

    listed: dict[bytes, bytes]
    tips: dict[bytes, bytes]
    refused: dict[bytes, str]


class RefWire:
    """The remote seen from the local work repo: read the refs of some names (fetching only the tips
    it lacks), and move one ref by compare-and-swap. Every fetch is bounded by `limits` before an
    object is inflated (`gitsync.source.packgate`)."""

    def __init__(self, remote: Remote, repo: Repo, limits: ObjectLimits = DEFAULT_LIMITS) -> None:
        self.url = remote.url
        self.remote = remote
        self.client, self.path = remote.client()
        self.repo = repo
        self.limits = limits

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

        result = self._network(lambda: fetch_bounded(self.client, self.path, self.repo, wants, self.limits,
                                                     ref_prefix=list(wanted)))
        tips = {ref: sha for ref, sha in result.refs.items()
                if _under(ref, wanted) and sha and sha != ZERO_SHA and not ref.endswith(PEELED_TAG_SUFFIX)}
        if any(sha not in store for sha in tips.values()):
            # A local-path remote seen mid-push by another writer: the ref moved before its pack showed.
            raise RefMoved("the remote's new tip is not readable yet")
        return tips

    def read_tips(self, prefix: bytes | Sequence[bytes],
                  choose: Callable[[Mapping[bytes, bytes]], Mapping[bytes, bytes]],
                  haves: Callable[[Mapping[bytes, bytes]], Sequence[bytes]] = lambda tips: (),
                  limits: Callable[[int], ObjectLimits] = status_limits,
                  skip: Collection[bytes] = ()) -> TipsRead:
        """The refs under `prefix` (a namespace ending in ``/``, an exact ref, or several: each one asked of
        the server with ``ref-prefix``, so that it lists them alone), the ones `choose` keeps, and the
        objects of their tips this repo lacks, fetched in one connection, bounded by `limits` (of the number
        of tips fetched) before anything is inflated. A fetch over the limits is split in halves, each fetched
        again, down to the tips that go over them alone: those are refused (`TipsRead.refused`), the others
        fetched. `haves`: old tips to offer (at most `MAX_HAVES`), so that the server sends only what is new
        under each; `skip`: tips not to fetch (refused before: their entries say so already)."""
        store = self.repo.object_store
        prefixes = [prefix] if isinstance(prefix, bytes) else list(prefix)
        read: dict[str, dict[bytes, bytes]] = {"listed": {}, "tips": {}}
        walker = ObjectStoreGraphWalker([], self.repo.get_parents)

        def wants(refs: Mapping[bytes, bytes], depth: int | None = None) -> list[bytes]:
            listed = {ref: sha for ref, sha in refs.items() if _under(ref, prefixes) and sha
                      and sha != ZERO_SHA and not ref.endswith(PEELED_TAG_SUFFIX)}
            tips = dict(choose(listed))
            read.update(listed=listed, tips=tips)
            walker.heads.update(sha for sha in list(haves(tips))[:MAX_HAVES] if sha in store)
            held = holder(store)
            return list(dict.fromkeys(sha for sha in tips.values() if not held(sha) and sha not in skip))

        asked: list[bytes] = []

        def recorded(refs: Mapping[bytes, bytes], depth: int | None = None) -> list[bytes]:
            asked[:] = wants(refs, depth)
            return asked

        refused: dict[bytes, str] = {}
        try:
            self._network(lambda: fetch_bounded(self.client, self.path, self.repo, recorded, limits,
                                                graph_walker=walker, ref_prefix=prefixes))
        except LimitExceeded:
            half = len(asked) // 2
            for part in (asked[:half], asked[half:]):
                self._isolate(part, limits, refused)
        tips = read["tips"]
        if any(sha not in store and sha not in refused and sha not in skip for sha in tips.values()):
            raise RefMoved("the remote's new tip is not readable yet")  # a local-path remote mid-push
        return TipsRead(read["listed"], tips,
                        {ref: refused[sha] for ref, sha in tips.items() if sha in refused})

    def _isolate(self, shas: Sequence[bytes], limits: Callable[[int], ObjectLimits],
                 refused: dict[bytes, str]) -> None:
        """Fetch `shas` (tips of refs), halving a fetch the limits refuse down to the tips refused alone."""
        if not shas:
            return
        try:
            walker = ObjectStoreGraphWalker([], self.repo.get_parents)
            self._network(lambda: fetch_bounded(self.client, self.path, self.repo,
                                                lambda refs, depth=None: list(shas), limits,
                                                graph_walker=walker))
        except LimitExceeded as exc:
            if len(shas) == 1:
                refused[shas[0]] = exc.reason
                return
            half = len(shas) // 2
            self._isolate(shas[:half], limits, refused)
            self._isolate(shas[half:], limits, refused)

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


def holder(store: Any) -> Callable[[bytes], bool]:
    """Whether `store` holds an object (hex), as ``sha in store`` says, with its packs listed once: for an
    object it lacks, dulwich lists the pack directory again (a first read of 10,000 refs lacks 10,000)."""
    packs = store.packs

    def held(sha: bytes) -> bool:
        return (any(sha in pack for pack in packs) or store.contains_loose(sha)
                or any(sha in alternate for alternate in store.alternates))

    return held


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
    """The ``status.yaml`` blob of a status commit and its document (None when unreadable, larger than
    a status may be by its header among them: never inflated); None when the commit holds no such file."""
    tree = store[store[commit_sha].tree]
    if STATUS_FILE not in tree:
        return None
    mode, blob = tree[STATUS_FILE]
    if not stat.S_ISREG(mode):
        return None
    if object_size(store, blob) > MAX_STATUS_BYTES:
        return blob, None
    return blob, load_status(store[blob].data)


def mirror_fleet(repo: Repo, prefix: bytes, tips: Mapping[bytes, bytes]) -> None:
    """Keep a local ref per remote status ref (what keeps its objects from a gc), drop the gone ones: in
    the packed-refs file, one write when any moved, never a file per agent (a flood of status refs
    once cost a loose ref each). Loose ones an older gitsync left are dropped first."""
    loose = Path(repo.controldir()) / LOCAL_FLEET_PREFIX.decode()
    if loose.is_dir():
        shutil.rmtree(loose, ignore_errors=True)
    held = {name: sha for name, sha in repo.refs.get_packed_refs().items()
            if name.startswith(LOCAL_FLEET_PREFIX)}
    local = {LOCAL_FLEET_PREFIX + ref[len(prefix):]: sha for ref, sha in tips.items()}
    changes: dict[bytes, bytes | None] = {name: sha for name, sha in local.items() if held.get(name) != sha}
    changes |= {name: None for name in held if name not in local}
    if changes:
        repo.refs.add_packed_refs(changes)


def tidy(repo: Repo) -> None:
    """Keep the work repo small: git's auto-gc thresholds (loose objects, pack count), best effort."""
    try:
        maybe_auto_gc(repo)
    except Exception as exc:  # a cache: a failed gc costs disk, never a write-back
        logger.debug("write-back: gc of {} failed: {}", repo.path, exc)


def add_commit(repo: Repo, tree: Tree, parents: Sequence[bytes], message: bytes | str, *, author: str,
               when: int, signer: StatusSigner | None = None) -> bytes:
    """A commit of `tree` written to `repo`'s store (UTC, UTF-8; signed by `signer` when given): its id."""
    commit = Commit()
    commit.tree = tree.id
    commit.parents = list(parents)
    commit.author = commit.committer = author.encode()
    commit.author_time = commit.commit_time = when
    commit.author_timezone = commit.commit_timezone = 0
    commit.encoding = b"UTF-8"
    commit.message = message.encode() if isinstance(message, str) else message
    if signer is not None:
        signer.sign_commit(commit)
    repo.object_store.add_object(commit)
    return commit.id
