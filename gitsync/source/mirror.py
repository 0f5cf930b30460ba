"""The git source: a bare mirror in the state dir, kept in step with the remote by dulwich.

No work tree and no git binary: refs are resolved from the remote's advertisement, objects are
fetched into the mirror's object store, and files are read straight from it. Why each rule:

- ``check()`` reads the ref advertisement only, so a poll with nothing new costs one round trip.
- ``fetch()`` holds an flock on the mirror, clears what a killed run left (stale ``*.lock`` files,
  half-written packs), lets dulwich write the pack to a temp file and rename it (an ``.idx``
  appears last, so a pack without one is ignored), and only then moves the ref, atomically.
  Any SIGKILL leaves either the old ref or the new one, never a broken mirror.
- A force-push is followed (logged with old and new SHA) unless ``allow_rewrite`` is false;
  then the ref stays where it was and the fetch fails with the reason.
- The transport (`gitsync.source.transport`) keeps credentials out of the mirror's config, every URL that
  is stored or logged, and every error message, and bounds every network wait by ``timeout``.
- Signature policy: an unsigned, wrongly signed or untrusted commit fails ``verify()``. Trust is
  always explicit (an allowed-signers file, or key ids + keyring): dulwich alone lets unsigned
  commits through when it has no key ids.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import shutil
import stat
import subprocess
import tempfile
import time
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from dulwich.object_store import DiskObjectStore, ObjectStoreGraphWalker, tree_lookup_path
from dulwich.objects import Blob, Commit, Tag, Tree, parse_tree
from dulwich.pack import OFS_DELTA, REF_DELTA, full_unpacked_object
from dulwich.repo import ParentsProvider, Repo

from gitsync.log import logger
from gitsync.render.files import DEFAULT_MAX_FILE_SIZE, ConfigFiles, is_config_file, may_hold_config, skipped
from gitsync.source.compat import remove_pack
from gitsync.source.transport import GitAuth, Remote, SourceError

if TYPE_CHECKING:
    from gitsync.settings import Settings

DEFAULT_STATE_DIR = Path("/var/lib/gitsync")
MIRROR_DIR = "mirror"
LOCK_FILE = "gitsync.lock"
SHA_RE = re.compile(r"^[0-9a-f]{40}$")
FILE_MODES = (0o100644, 0o100755)  # regular files; symlinks and submodules are not config
SUBMODULE_MODE = 0o160000
VERIFY_POLICIES = ("none", "ssh", "gpg")
MAX_HAVES = 32  # commits offered in a fetch negotiation: the tip and its latest ancestors
MIN_GPG_KEY_ID = 16  # hex digits: short (8-digit) key ids collide on purpose-built keys
#: Each incremental fetch leaves a pack of its own and every read looks through all of them:
#: past this many, the small ones are merged (see `_consolidate_packs`).
MAX_PACKS = 8


@dataclass(frozen=True)
class CommitFiles:
    """The config files under the configured paths at one commit (repo-relative paths), with blob
    SHAs so that render can cache parsed files by content."""

    sha: str
    subject: str
    files: ConfigFiles
    blob_ids: dict[str, str]
    message: str = ""  # the whole commit message (trailers such as Gitsync-Allow-Delete)


@dataclass(frozen=True)
class _LastRead:
    """What `Source.read` made of one commit, kept so that the next commit is read by its difference
    from it: the object at each configured path, and each file's outcome (its own copies), under the
    paths and size limit it was read with."""

    paths: tuple[str, ...]
    max_file_size: int
    objects: tuple[tuple[int, bytes], ...]  # per configured path: the mode and object there
    blob_ids: dict[str, str]
    loaded: dict[str, bytes]
    unread: frozenset[str]
    oversized: dict[str, int]


def _tree_entries(store: DiskObjectStore, tree_id: bytes) -> list[tuple[bytes, int, bytes]] | None:
    """(name, mode, SHA) of a tree's own entries, parsed from its raw text (no `Tree` object, no
    entry objects: a thousand-file directory parses in about half a millisecond); None if no tree."""
    type_num, raw = store.get_raw(tree_id)
    if type_num != Tree.type_num:
        return None
    return list(parse_tree(raw, len(tree_id) // 2))


def _changed_files(store: DiskObjectStore, old_id: bytes, new_id: bytes, prefix: str,
                   ) -> list[tuple[str, int, bytes]] | None:
    """(path, mode, SHA) of each entry that is not a tree and whose mode or object differs between
    two versions of a tree (paths under `prefix`, which ends with ``/`` unless empty); None when a
    name was added or removed, or turned from a directory into something else or back: the tree
    must then be read whole. Only the subtrees that differ are opened."""
    old, new = _tree_entries(store, old_id), _tree_entries(store, new_id)
    if old is None or new is None or len(old) != len(new):
        return None
    was = {name: (mode, sha) for name, mode, sha in set(old).difference(new)}
    came = set(new).difference(old)
    if len(was) != len(came):
        return None
    changed: list[tuple[str, int, bytes]] = []
    for name, mode, sha in came:
        if name not in was or stat.S_ISDIR(mode) != stat.S_ISDIR(was[name][0]):
            return None
        path = prefix + name.decode("utf-8", "surrogateescape")
        if not stat.S_ISDIR(mode):
            changed.append((path, mode, sha))
        elif (inner := _changed_files(store, was[name][1], sha, path + "/")) is not None:
            changed += inner
        else:
            return None
    return changed


# ---------------------------------------------------------------------------------------------------------
# The mirror


class _BoundedGraphWalker(ObjectStoreGraphWalker):
    """Offers at most `limit` commits as 'have's. Over protocol v2 on git:// and ssh, dulwich sends
    every have before it reads an ACK, so an unbounded walker sends the whole history each fetch."""

    def __init__(self, *args: Any, limit: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.left = limit

    def next(self) -> Any:
        if self.left <= 0:
            return None
        self.left -= 1
        return super().next()

    __next__ = next


class ParentsMemo:
    """Each commit's parents, as a full (not shallow) mirror gave them, kept for the next fetch.

    A commit never changes, and every fetch's negotiation walks the same latest commits again (the
    tip and its `MAX_HAVES` - 1 ancestors): without the memo each fetch of a daemon unpacked and
    parsed those 32 commits from the packs anew. Bounded: cleared when it holds `LIMIT` commits."""

    LIMIT = 8 * MAX_HAVES

    def __init__(self) -> None:
        self._parents: dict[bytes, list[bytes]] = {}

    def __len__(self) -> int:
        return len(self._parents)

    def provider(self, read: Callable[[bytes], list[bytes]]) -> Callable[[bytes], list[bytes]]:
        """`read` (a commit's parents from the object store), answered from the memo where it can."""
        def get_parents(sha: bytes) -> list[bytes]:
            known = self._parents.get(sha)
            if known is None:
                known = read(sha)
                if len(self._parents) >= self.LIMIT:
                    self._parents.clear()
                self._parents[sha] = known
            return list(known)

        return get_parents


class _Mirror(Repo):
    """The bare mirror. Its 'have's start from the tracked ref's commit (`have_tips`) when it has
    one, else from every ref it holds (dulwich's default offers branches only), and are bounded;
    the commits they walk are read through `parents` (a shallow mirror's are not: its boundary
    moves when it deepens)."""

    have_tips: list[bytes] | None = None
    parents: ParentsMemo | None = None

    def get_graph_walker(self, heads: list | None = None) -> Any:
        if heads is None:
            heads = self.have_tips or [commit.id for sha in self.refs.as_dict(b"refs/").values()
                                       if (commit := _peeled_or_none(self, sha)) is not None]
        shallow = self.get_shallow()
        get_parents = ParentsProvider(self.object_store).get_parents
        if self.parents is not None and not shallow:
            get_parents = self.parents.provider(get_parents)
        return _BoundedGraphWalker(heads, get_parents, shallow=shallow, update_shallow=self.update_shallow,
                                   limit=MAX_HAVES)


def _peel(repo: Repo, sha: bytes, stage: str = "read") -> Commit:
    """The commit `sha` names (through annotated tags); SourceError if it is something else."""
    obj = repo.object_store[sha]
    while isinstance(obj, Tag):
        obj = repo.object_store[obj.object[1]]
    if not isinstance(obj, Commit):
        raise SourceError(stage, f"{sha.decode()} is a {obj.type_name.decode()}, not a commit")
    return obj


def _peeled_or_none(repo: Repo, sha: bytes) -> Commit | None:
    try:
        return _peel(repo, sha)
    except (KeyError, SourceError):
        return None


def _recorded_url(repo: Repo) -> str | None:
    try:
        return repo.get_config().get((b"gitsync",), b"url").decode()
    except KeyError:
        return None


def _ref(repo: Repo, name: bytes) -> bytes | None:
    try:
        return repo.refs[name]
    except KeyError:
        return None


def _packs_to_merge(sizes: Sequence[int]) -> int:
    """How many of the smallest packs (object counts, ascending) to merge so that the packs left,
    with the merged one, at least double in size from each to the next (`git repack --geometric=2`):
    a few merges of small packs, never the whole history at once."""
    split = 0
    for i in range(len(sizes) - 1, 0, -1):
        if sizes[i] < 2 * sizes[i - 1]:
            split = i
            break
    total = sum(sizes[:split])
    while split < len(sizes) and sizes[split] < 2 * total:
        total += sizes[split]
        split += 1
    return split


def _consolidate_packs(store: DiskObjectStore) -> None:
    """Merge the small packs incremental fetches leave behind, once there are more than MAX_PACKS.

    Without it every read walks one more pack per commit ever fetched: at 400 packs reading 1,000
    files took 121 ms instead of 5, and the daemon's memory grew with them. dulwich's own
    `repack()` holds every object of the mirror in memory (718 MB for 10,000 files, 2,000 commits).
    Best effort: the fetch has succeeded whatever happens here.
    """
    packs = sorted(store.packs, key=len)
    if len(packs) <= MAX_PACKS:
        return
    small = packs[:_packs_to_merge([len(pack) for pack in packs])]
    if len(small) < 2:
        return
    try:
        merged = store.add_pack_data(sum(len(pack) for pack in small), (  # streamed, not listed
            full_unpacked_object(obj) for pack in small for obj in pack.iterobjects()))
        for pack in small:
            if merged is None or pack.name() != merged.name():
                remove_pack(store, pack)
    except (OSError, KeyError, ValueError) as exc:
        logger.warning("could not merge {} packs of the mirror: {}", len(small), exc)


def _is_ancestor(repo: Repo, old: bytes, new: bytes) -> bool:
    """Whether `old` is reachable from `new` in the mirror (missing or shallow parents end a path)."""
    shallow = repo.get_shallow()
    seen: set[bytes] = set()
    stack = [new]
    while stack:
        sha = stack.pop()
        if sha == old:
            return True
        if sha in seen or sha in shallow:
            continue
        seen.add(sha)
        try:
            commit = repo.object_store[sha]
        except KeyError:
            continue
        if isinstance(commit, Commit):
            stack.extend(commit.parents)
    return False


# ---------------------------------------------------------------------------------------------------------
# The source


@dataclass(frozen=True)
class SignaturePolicy:
    """Which commits may be applied: any (``none``), or signed by a trusted ssh or OpenPGP key.

    Trust is always explicit (an allowed-signers file, or key ids + keyring): dulwich alone lets
    unsigned commits through when it has no key ids."""

    verify: str = "none"
    allowed_signers_file: Path | None = None
    gpg_key_ids: tuple[str, ...] = ()
    gpg_keyring_file: Path | None = None

    def __post_init__(self) -> None:
        keys = tuple(k.strip().upper().removeprefix("0X") for k in self.gpg_key_ids if k.strip())
        object.__setattr__(self, "gpg_key_ids", keys)
        if self.verify not in VERIFY_POLICIES:
            raise SourceError("config", f"verify must be one of {', '.join(VERIFY_POLICIES)}, "
                                        f"not {self.verify!r}")
        if self.verify == "ssh" and self.allowed_signers_file is None:
            raise SourceError("config", 'verify = "ssh" needs allowed_signers_file')
        if self.verify == "gpg":
            if not keys:
                raise SourceError("config", 'verify = "gpg" needs gpg_key_ids (trusted key fingerprints)')
            short = [k for k in keys if len(k) < MIN_GPG_KEY_ID or not _is_hex(k)]
            if short:
                raise SourceError("config", f"gpg_key_ids must be long key ids or fingerprints "
                                            f"(16+ hex digits): {', '.join(short)}")

    @classmethod
    def from_settings(cls, settings: Settings) -> SignaturePolicy:
        return cls(settings.verify, settings.allowed_signers_file, tuple(settings.gpg_key_ids),
                   settings.gpg_keyring_file)


class Source:
    """One git remote and ref, mirrored under ``state_dir / "mirror"``."""

    def __init__(self, remote: Remote, ref: str = "main", paths: Sequence[str] = (".",), *,
                 state_dir: Path = DEFAULT_STATE_DIR, depth: int = 0, allow_rewrite: bool = True,
                 signatures: SignaturePolicy = SignaturePolicy(),
                 max_file_size: int = DEFAULT_MAX_FILE_SIZE) -> None:
        if depth < 0:
            raise SourceError("config", "depth cannot be negative")
        self.remote = remote
        self.url = remote.url
        self.ref = ref.strip()
        self.paths = tuple(_normalize_path(p) for p in paths) or ("",)
        self.state_dir = Path(state_dir)
        self.mirror_path = self.state_dir / MIRROR_DIR
        self.depth = depth
        self.allow_rewrite = allow_rewrite
        self.signatures = signatures
        self.max_file_size = max_file_size  # a larger config blob is never loaded
        self.parents = ParentsMemo()  # the commits a fetch offers as 'have's, for the next fetch
        self._last_read: _LastRead | None = None  # the last commit read, to read the next by difference

    @classmethod
    def from_settings(cls, settings: Settings) -> Source:
        return cls(Remote.from_settings(settings), settings.ref, settings.paths, state_dir=settings.state_dir,
                   depth=settings.depth, allow_rewrite=settings.allow_rewrite,
                   signatures=SignaturePolicy.from_settings(settings), max_file_size=settings.max_file_size)

    @property
    def timeout(self) -> float:
        return self.remote.timeout

    def __repr__(self) -> str:
        return f"Source({self.url!r}, ref={self.ref!r})"

    # -- configuration --------------------------------------------------------------------------------------

    @property
    def pinned(self) -> str | None:
        """The SHA when the ref is a pinned commit, else None."""
        return self.ref.lower() if SHA_RE.match(self.ref.lower()) else None

    def _candidates(self) -> list[bytes]:
        """Full ref names the configured ref may mean, in order of preference."""
        if self.ref == "HEAD" or self.ref.startswith("refs/"):
            return [self.ref.encode()]
        # A branch wins over a tag of the same name: a new tag must not switch what is deployed.
        return [f"refs/heads/{self.ref}".encode(), f"refs/tags/{self.ref}".encode()]

    def _resolve(self, refs: Mapping[bytes, bytes | None], stage: str) -> tuple[bytes, bytes, bytes | None]:
        """(ref name, advertised SHA, peeled SHA if advertised) of the configured ref."""
        found = [name for name in self._candidates() if refs.get(name)]
        if not found:
            raise SourceError(stage, f"ref {self.ref!r} not found on {self.url}{self._branches_hint()}")
        if len(found) > 1:
            logger.warning("ref {} is both a branch and a tag on {}; following the branch",
                           self.ref, self.url)
        name = found[0]
        raw = refs[name]
        assert raw is not None
        return name, raw, refs.get(name + b"^{}")

    def _branches_hint(self) -> str:
        """`` (branches: a, b)`` from a full listing of the remote, for a ref that was not found."""
        client, path = self.remote.client()
        try:
            refs = client.get_refs(path.encode()).refs
        except Exception:  # only a hint: the error being reported is the missing ref
            return ""
        finally:
            client.close()
        branches = sorted(n.decode()[len("refs/heads/"):] for n in refs if n.startswith(b"refs/heads/"))
        return f" (branches: {', '.join(branches[:10])})" if branches else ""

    # -- check ---------------------------------------------------------------------------------------------

    def check(self) -> str:
        """The remote's commit SHA for the ref, from the ref advertisement only (no pack)."""
        if self.pinned:
            return self.pinned
        _name, raw, peeled = self.remote.network("check", lambda: self._resolve(
            self.remote.ls_refs(self._candidates()), "check"))
        if peeled is None and self.remote.local:
            with Repo(self.url) as remote:
                peeled = _peel(remote, raw).id
        return (peeled or raw).decode()

    # -- the mirror ----------------------------------------------------------------------------------------

    def _ensure_mirror(self) -> None:
        """Create the bare mirror if missing: built in a temp dir and renamed into place."""
        if (self.mirror_path / "objects").is_dir():
            return
        try:
            self.state_dir.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(prefix=".mirror-", dir=self.state_dir))
        except OSError as exc:
            raise SourceError("fetch", f"cannot create the mirror in {self.state_dir}: {exc.strerror}") \
                from None
        try:
            Repo.init_bare(str(tmp)).close()
            os.rename(tmp, self.mirror_path)
        except OSError as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY):  # another process made it first
                raise SourceError("fetch", f"cannot create the mirror {self.mirror_path}: "
                                           f"{exc.strerror}") from None

    @contextlib.contextmanager
    def _locked_mirror(self) -> Iterator[_Mirror]:
        """The mirror, opened under an exclusive flock, with what a killed run left cleared."""
        self._ensure_mirror()
        with open(self.mirror_path / LOCK_FILE, "a") as lock:
            deadline = time.monotonic() + self.timeout
            while True:
                try:
                    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise SourceError("fetch", f"the mirror {self.mirror_path} is busy (another gitsync "
                                                   f"is fetching)") from None
                    time.sleep(0.05)
            self._clear_leftovers()
            with _Mirror(str(self.mirror_path)) as repo:
                yield repo

    def _clear_leftovers(self) -> None:
        """Remove what a killed fetch can leave: lock files and temp packs. Safe: we hold the flock."""
        for lock in [*self.mirror_path.glob("*.lock"), *(self.mirror_path / "refs").rglob("*.lock"),
                     *(self.mirror_path / "objects" / "pack").glob("*.lock")]:
            if lock.name != LOCK_FILE:
                lock.unlink(missing_ok=True)
                logger.info("removed a stale lock left by an interrupted fetch: {}", lock.name)
        for tmp in self.mirror_path.glob("objects/tmp_pack_*"):
            tmp.unlink(missing_ok=True)
        pack_dir = self.mirror_path / "objects" / "pack"
        for pack in pack_dir.glob("*.pack"):
            if not pack.with_suffix(".idx").exists():
                pack.unlink(missing_ok=True)  # renamed in, index never written: incomplete

    def _same_remote(self, repo: Repo) -> bool:
        """Whether the mirror's refs came from this URL. After a change of remote they are not
        compared with (no false 'rewrite'), nor reported by `local_sha`, until the next fetch."""
        return _recorded_url(repo) == self.url

    def mirror_url(self) -> str | None:
        """The remote the mirror was last fetched from (None when there is no mirror yet)."""
        repo = self._open()
        if repo is None:
            return None
        with repo:
            return _recorded_url(repo)

    def _record_remote(self, repo: Repo) -> None:
        config = repo.get_config()
        config.set((b"gitsync",), b"url", self.url.encode())  # credential-free: see _split_credentials
        config.write_to_path()

    # -- fetch ---------------------------------------------------------------------------------------------

    def fetch(self) -> str:
        """Bring the ref's new objects into the mirror and move the mirror's ref; the commit SHA."""
        pinned = self.pinned
        if pinned and self._local_commit(pinned):
            return pinned
        with self._locked_mirror() as repo:
            if pinned:
                return self._fetch_pinned(repo, pinned)
            chosen: dict[str, bytes] = {}
            same_remote = self._same_remote(repo)
            tracked = [sha for name in self._candidates() if (sha := _ref(repo, name)) is not None]
            first = not same_remote or not tracked
            if tracked and (tip := _peeled_or_none(repo, tracked[0])) is not None:
                repo.have_tips = [tip.id]
            repo.parents = self.parents
            deepen = first and self.depth > 0

            def determine_wants(refs: Mapping[bytes, bytes], depth: int | None = None) -> list[bytes]:
                name, raw, _ = self._resolve(refs, "fetch")
                chosen["name"], chosen["raw"] = name, raw
                # A shallow first fetch is always asked for, so the server resends the shallow list
                # that a fetch killed before it was written never recorded.
                return [raw] if deepen or raw not in repo.object_store else []

            client, path = self.remote.client()
            try:
                self.remote.network("fetch", lambda: client.fetch(
                    path.encode(), repo, determine_wants, depth=self.depth if deepen else None,
                    ref_prefix=self._candidates()))
            finally:
                client.close()
            new = self._move_ref(repo, chosen["name"], chosen["raw"], same_remote)
            if not same_remote:
                self._record_remote(repo)
            _consolidate_packs(repo.object_store)
            return new.decode()

    def _move_ref(self, repo: Repo, name: bytes, raw: bytes, same_remote: bool) -> bytes:
        """Point the mirror's ref at `raw` (objects are complete), refusing a rewrite if asked."""
        new = _peel(repo, raw, "fetch").id
        old_raw = _ref(repo, name)
        if old_raw == raw:
            return new
        if old_raw is not None and same_remote:
            old = _peel(repo, old_raw).id
            if old != new and not _is_ancestor(repo, old, new):
                if not self.allow_rewrite:
                    raise SourceError("fetch", f"{name.decode()} was rewritten (force-push) from "
                                               f"{old.decode()} to {new.decode()} and allow_rewrite is "
                                               f"false; keeping {old.decode()}")
                logger.warning("history rewritten on {} of {}: {} -> {} (force-push followed)",
                               name.decode(), self.url, old.decode(), new.decode())
        if not repo.refs.set_if_equals(name, old_raw, raw):
            raise SourceError("fetch", f"{name.decode()} changed in the mirror during the fetch")
        logger.info("fetched {} of {}: {} -> {}", name.decode(), self.url,
                    _peel(repo, old_raw).id.decode() if old_raw and same_remote else "(none)", new.decode())
        return new

    def _fetch_pinned(self, repo: Repo, sha: str) -> str:
        """Fetch a pinned commit: asked for directly, else with every branch and tag."""
        client, path = self.remote.client()
        try:
            def wants_sha(refs: Mapping[bytes, bytes], depth: int | None = None) -> list[bytes]:
                return [sha.encode()]

            def wants_all(refs: Mapping[bytes, bytes], depth: int | None = None) -> list[bytes]:
                return [v for n, v in refs.items() if n.startswith((b"refs/heads/", b"refs/tags/"))
                        and not n.endswith(b"^{}") and v not in repo.object_store]

            def fetch(wants: Any) -> Any:
                return self.remote.network("fetch", lambda: client.fetch(path.encode(), repo, wants,
                                                                         depth=self.depth or None))

            try:  # protocol v2 servers hand out any commit by SHA; older ones only advertised tips
                fetch(wants_sha)
            except SourceError as exc:
                if exc.unreachable:
                    raise
                fetch(wants_all)
        finally:
            client.close()
        if sha.encode() not in repo.object_store:
            raise SourceError("fetch", f"commit {sha} not found on {self.url}")
        _peel(repo, sha.encode(), "fetch")
        repo.refs.set_if_equals(b"refs/gitsync/pinned", None, sha.encode())  # keeps it from any gc
        return sha

    # -- local ---------------------------------------------------------------------------------------------

    def _open(self) -> Repo | None:
        if not (self.mirror_path / "objects").is_dir():
            return None
        return Repo(str(self.mirror_path))

    @contextlib.contextmanager
    def _mirror_commit(self, stage: str, sha: str) -> Iterator[tuple[Repo, Commit]]:
        """The open mirror and commit `sha` in it, or a SourceError of `stage` saying which is missing."""
        repo = self._open()
        if repo is None:
            raise SourceError(stage, f"no mirror at {self.mirror_path}: fetch first")
        with repo:
            try:
                commit = _peel(repo, sha.encode())
            except KeyError:
                raise SourceError(stage, f"commit {sha} is not in the mirror") from None
            yield repo, commit

    def _local_commit(self, sha: str) -> bool:
        repo = self._open()
        if repo is None:
            return False
        with repo:
            return sha.encode() in repo.object_store and isinstance(repo.object_store[sha.encode()], Commit)

    def local_sha(self) -> str | None:
        """The commit the mirror holds for the ref (no network), or None before the first fetch."""
        if self.pinned:
            return self.pinned if self._local_commit(self.pinned) else None
        repo = self._open()
        if repo is None:
            return None
        with repo:
            if not self._same_remote(repo):
                return None
            for name in self._candidates():
                if name in repo.refs:
                    return _peel(repo, repo.refs[name]).id.decode()
        return None

    # -- read ----------------------------------------------------------------------------------------------

    def read(self, sha: str, have: Callable[[str], bool] | None = None) -> CommitFiles:
        """The config files under the configured paths at commit `sha`, from the mirror's object store.

        `have(blob_sha)`: whether the caller (render's parse cache) already holds that file; its bytes
        are then read only if asked for later (`ConfigFiles.load`).

        Only config files (`is_config_file`) are read, and each only once its object header says it
        is within `max_file_size`: a large blob beside them costs nothing. Larger ones are listed in
        ``files.oversized`` for render to report. A symlink or submodule that may stand for config
        is skipped with a warning, as ``--dir`` does.

        A commit that only changes files of the last commit read (no name added, removed, or turned
        into a directory) is read by its difference from it: only the trees that differ are opened
        and only the changed files looked at; the others keep what the last read made of them (a
        file left unread is read when asked for, whoever holds it then). A skipped link or
        submodule is warned of when it is read, so once until it changes.
        """
        with self._mirror_commit("read", sha) as (repo, commit):
            store = repo.object_store
            objects = tuple(self._object_at(repo, commit, path) for path in self.paths)
            last = self._last_read
            if last is not None and (last.paths, last.max_file_size) != (self.paths, self.max_file_size):
                last = None
            try:
                changed = None if last is None else self._changed_since(store, last, objects)
            except KeyError:  # the last commit's trees are not in this mirror (made anew since)
                changed = None
            files = ConfigFiles()
            if changed is None:
                for path, (mode, object_id) in zip(self.paths, objects, strict=True):
                    for name, entry_mode, blob_id in self._entries(store, path, mode, object_id):
                        self._take(store, files, name, entry_mode, blob_id, have)
            else:
                files.blob_ids = dict(last.blob_ids)
                files.update(last.loaded)
                files.unread = set(last.unread)
                files.oversized = dict(last.oversized)
                for name, entry_mode, blob_id in changed:
                    files.pop(name, None)
                    files.unread.discard(name)
                    files.oversized.pop(name, None)
                    if not self._take(store, files, name, entry_mode, blob_id, have):
                        files.blob_ids.pop(name, None)
                files = _in_order(files)
            self._last_read = _LastRead(self.paths, self.max_file_size, objects, dict(files.blob_ids),
                                        dict(files), frozenset(files.unread), dict(files.oversized))
            files.load = self.blob
            return CommitFiles(commit.id.decode(), _subject(commit.message), files, dict(files.blob_ids),
                               commit.message.decode("utf-8", "replace"))

    def _take(self, store: DiskObjectStore, files: ConfigFiles, name: str, mode: int, blob_id: bytes,
              have: Callable[[str], bool] | None) -> bool:
        """Put the file `name` into `files` (its bytes, or unread, or oversized); False when it is no
        config file of ours (another kind of file, a link, a submodule)."""
        if mode not in FILE_MODES:
            if may_hold_config(name):
                skipped(name, "a submodule" if mode == SUBMODULE_MODE
                        else "a symbolic link (links are not followed)")
            return False
        if not is_config_file(name):
            return False
        files.blob_ids[name] = blob_sha = blob_id.decode()
        if have is not None and have(blob_sha):
            files.unread.add(name)
            return True
        size = _object_size(store, blob_id)
        if size > self.max_file_size:
            files.oversized[name] = size
            return True
        blob = store[blob_id]
        assert isinstance(blob, Blob)
        files[name] = blob.data
        return True

    def _changed_since(self, store: DiskObjectStore, last: _LastRead, objects: tuple[tuple[int, bytes], ...],
                       ) -> list[tuple[str, int, bytes]] | None:
        """The files that changed since the last read, when it can be read by difference (else None)."""
        changed: list[tuple[str, int, bytes]] = []
        for path, (old_mode, old_id), (mode, new_id) in zip(self.paths, last.objects, objects, strict=True):
            if old_id == new_id and old_mode == mode:
                continue
            if stat.S_ISDIR(mode) != stat.S_ISDIR(old_mode):
                return None
            if not stat.S_ISDIR(mode):
                changed.append((path, mode, new_id))  # a configured path that is one file
                continue
            inner = _changed_files(store, old_id, new_id, _under(path))
            if inner is None:
                return None
            changed += inner
        return changed

    def blob(self, blob_sha: str) -> bytes:
        """One blob's bytes, from the mirror (for a file `read` left unread)."""
        repo = self._open()
        if repo is None:
            raise SourceError("read", f"no mirror at {self.mirror_path}: fetch first")
        with repo:
            blob = repo.object_store[blob_sha.encode()]
        if not isinstance(blob, Blob):
            raise SourceError("read", f"{blob_sha} is not a blob")
        return blob.data

    def _object_at(self, repo: Repo, commit: Commit, path: str) -> tuple[int, bytes]:
        """The mode and object at configured `path` of `commit` (its tree for the repo's root)."""
        if not path:
            return stat.S_IFDIR, commit.tree
        try:
            return tree_lookup_path(repo.object_store.__getitem__, commit.tree, path.encode())
        except KeyError:
            raise SourceError("read", f"path {path!r} does not exist at commit "
                                      f"{commit.id.decode()}") from None

    @staticmethod
    def _entries(store: DiskObjectStore, path: str, mode: int, object_id: bytes,
                 ) -> Iterator[tuple[str, int, bytes]]:
        """(repo-relative name, mode, blob SHA) of every file at or under `path` (`mode`, `object_id`:
        what `_object_at` found there: a tree is known by its mode, as in a tree's entries)."""
        if not stat.S_ISDIR(mode):
            yield path, mode, object_id
            return
        yield from tree_files(store, object_id, _under(path))

    # -- verify --------------------------------------------------------------------------------------------

    def verify(self, sha: str) -> None:
        """Apply the signature policy to commit `sha`; SourceError if it must not be applied."""
        if self.signatures.verify == "none":
            return
        with self._mirror_commit("verify", sha) as (_repo, commit):
            payload, signature, _ = commit.extract_signature()
        if not signature:
            raise SourceError("verify", f"commit {sha} is not signed (verify = {self.signatures.verify})")
        kind = _signature_kind(signature)
        if kind != self.signatures.verify:
            raise SourceError("verify", f"commit {sha} has {'a ' + kind if kind else 'an unknown kind of'} "
                                        f"signature, but verify = {self.signatures.verify}")
        if kind == "ssh":
            _verify_ssh(sha, payload, signature, self.signatures.allowed_signers_file)
        else:
            policy = self.signatures
            _verify_gpg(sha, payload, signature, policy.gpg_key_ids, policy.gpg_keyring_file, self.timeout)
        logger.debug("commit {} has a trusted {} signature", sha, kind)


def _under(path: str) -> str:
    """The prefix of the names under configured directory `path` (none for the repo's root)."""
    return path + "/" if path else ""


def _in_order(files: ConfigFiles) -> ConfigFiles:
    """`files` with its read files in the order of `blob_ids` (the trees' order), as a whole read
    gives them."""
    ordered = ConfigFiles({name: files[name] for name in files.blob_ids if name in files}, files.oversized)
    ordered.blob_ids, ordered.unread = files.blob_ids, files.unread
    return ordered


def tree_files(store: DiskObjectStore, tree_id: bytes, prefix: str = "") -> Iterator[tuple[str, int, bytes]]:
    """(name, mode, SHA) of every entry under a tree that is not a tree, in the order of dulwich's
    ``iter_tree_contents`` (depth first, tree order), without the path joins and checks it makes per
    entry: most of reading a commit of a thousand files. `prefix` ends with ``/`` unless empty."""
    stack: list[tuple[str, int, bytes]] = [(prefix, stat.S_IFDIR, tree_id)]
    while stack:
        path, mode, sha = stack.pop()
        if not stat.S_ISDIR(mode):
            yield path, mode, sha
            continue
        tree = store[sha]
        if not isinstance(tree, Tree):
            raise SourceError("read", f"{sha.decode()} is not a tree")
        entries = [(path + name.decode("utf-8", "surrogateescape") + ("/" if stat.S_ISDIR(m) else ""),
                    m, child) for name, m, child in tree.iteritems()]
        stack.extend(reversed(entries))


# ---------------------------------------------------------------------------------------------------------
# Object sizes, from headers


def _object_size(store: DiskObjectStore, sha: bytes) -> int:
    """An object's size from its header, never inflating the object: a 300 MB blob costs a few
    hundred bytes read (a packed delta's size is in the first bytes of its delta data)."""
    hex_sha = sha.decode()
    for pack in store.packs:
        try:
            offset = pack.index.object_offset(sha)
        except KeyError:
            continue
        with open(pack.data.path, "rb") as stream:
            return _packed_size(stream, offset, len(hex_sha) // 2)
    with open(os.path.join(store.path, hex_sha[:2], hex_sha[2:]), "rb") as stream:
        header = _inflate_start(stream, lambda out: b"\0" in out)  # "blob <size>\0"
    return int(header.split(b"\0", 1)[0].split(b" ", 1)[1])


def _packed_size(stream: IO[bytes], offset: int, hash_size: int) -> int:
    """The size of the object at `offset` of a pack: from its entry header, or for a delta, the
    result size at the start of its delta data."""
    stream.seek(offset)
    byte = stream.read(1)[0]
    kind, size, shift = (byte >> 4) & 7, byte & 15, 4
    while byte & 0x80:
        byte = stream.read(1)[0]
        size |= (byte & 0x7F) << shift
        shift += 7
    if kind == OFS_DELTA:
        while stream.read(1)[0] & 0x80:  # the base's relative offset
            pass
    elif kind == REF_DELTA:
        stream.read(hash_size)  # the base's object id
    else:
        return size
    sizes = _varints(_inflate_start(stream, lambda out: _varints(out, 2) is not None), 2)
    assert sizes is not None
    return sizes[1]


def _varints(data: bytes, count: int) -> list[int] | None:
    """The first `count` little-endian base-128 numbers of `data` (a delta's base and result sizes),
    or None when `data` ends first."""
    numbers, value, shift = [], 0, 0
    for byte in data:
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            numbers.append(value)
            if len(numbers) == count:
                return numbers
            value, shift = 0, 0
    return None


def _inflate_start(stream: IO[bytes], enough: Callable[[bytes], bool], limit: int = 64) -> bytes:
    """The first inflated bytes of the zlib stream at `stream`'s position, as soon as `enough`."""
    inflater = zlib.decompressobj()
    out = b""
    while len(out) < limit and not inflater.eof:
        chunk = inflater.unconsumed_tail or stream.read(512)
        if not chunk:
            break
        out += inflater.decompress(chunk, limit - len(out))
        if enough(out):
            return out
    raise SourceError("read", "a git object has no readable header")


# ---------------------------------------------------------------------------------------------------------
# Signatures


def _signature_kind(signature: bytes) -> str | None:
    if signature.lstrip().startswith(b"-----BEGIN SSH SIGNATURE-----"):
        return "ssh"
    if signature.lstrip().startswith(b"-----BEGIN PGP SIGNATURE-----"):
        return "gpg"
    return None


def _verify_ssh(sha: str, payload: bytes, signature: bytes, allowed_signers_file: Path | None) -> None:
    """An SSH signature (namespace ``git``) by a key of the allowed-signers file that is valid now."""
    import sshsig.allowed_signers
    import sshsig.ssh_public_key
    import sshsig.sshsig

    assert allowed_signers_file is not None
    try:
        with open(allowed_signers_file) as f:
            signers = list(sshsig.allowed_signers.load_allowed_signers_file(f))
    except (OSError, ValueError, NotImplementedError) as exc:
        raise SourceError("verify", f"cannot read allowed signers {allowed_signers_file}: {exc}") from None
    keys = []
    now = time.strftime("%Y%m%d%H%M%S", time.gmtime())
    for signer in signers:
        options = signer.options or {}
        namespaces = options.get("namespaces")
        if namespaces is not None and "git" not in [n.strip() for n in namespaces.split(",")]:
            continue
        if "cert-authority" in options:
            continue
        if not _within(options.get("valid-after"), options.get("valid-before"), now):
            continue
        with contextlib.suppress(ValueError, NotImplementedError):
            openssh = f"{signer.key_type} {signer.base64_key}"
            keys.append(sshsig.ssh_public_key.PublicKey.from_openssh_str(openssh))
    if not keys:
        raise SourceError("verify", f"no usable key in allowed signers {allowed_signers_file}")
    try:
        sshsig.sshsig.verify(payload, signature.decode("ascii", "replace"), keys, namespace="git")
    except (sshsig.sshsig.InvalidSignature, NotImplementedError, ValueError) as exc:
        detail = str(exc) or "it does not match the commit"
        raise SourceError("verify", f"commit {sha}: bad or untrusted SSH signature ({detail})") from None


def _within(valid_after: str | None, valid_before: str | None, now: str) -> bool:
    """OpenSSH allowed-signers validity (YYYYMMDD[HHMM[SS]][Z]), compared as UTC digit strings."""
    def digits(stamp: str) -> str:
        return stamp.rstrip("Zz").ljust(14, "0")

    if valid_after and now < digits(valid_after):
        return False
    return not (valid_before and now >= digits(valid_before))


def _verify_gpg(sha: str, payload: bytes, signature: bytes, key_ids: Sequence[str],
                keyring_file: Path | None, timeout: float) -> None:
    """An OpenPGP signature that gpg calls good, made by one of `key_ids`, checked in a private
    GNUPGHOME holding only the keyring file's keys (or the default keyring when none is given)."""
    gpg = shutil.which("gpg")
    if gpg is None:
        raise SourceError("verify", 'verify = "gpg" needs the gpg program, which is not installed')
    with tempfile.TemporaryDirectory(prefix="gitsync-gpg-") as home:
        base = [gpg, "--batch", "--no-tty", "--no-autostart"]
        if keyring_file is not None:
            base += ["--homedir", home]
            imported = _run([*base, "--import", str(keyring_file)], timeout)
            if imported.returncode != 0:
                raise SourceError("verify", f"cannot import the keyring {keyring_file}")
        sig_path, data_path = Path(home) / "commit.sig", Path(home) / "commit.data"
        sig_path.write_bytes(signature)
        data_path.write_bytes(payload)
        result = _run([*base, "--status-fd", "1", "--verify", str(sig_path), str(data_path)], timeout)
    status = result.stdout.decode("utf-8", "replace").splitlines()
    good = any(line.startswith("[GNUPG:] GOODSIG ") for line in status)
    fingerprints = {field.upper() for line in status if line.startswith("[GNUPG:] VALIDSIG ")
                    for field in (line.split()[2], line.split()[-1])}
    if result.returncode != 0 or not good or not fingerprints:
        reason = next((line.split()[1] for line in status if line.split()[1:2] and line.split()[1] in (
            "BADSIG", "ERRSIG", "EXPKEYSIG", "REVKEYSIG", "EXPSIG", "NO_PUBKEY")), "not a good signature")
        raise SourceError("verify", f"commit {sha}: bad or unknown OpenPGP signature ({reason})")
    if not any(fpr.endswith(key) for fpr in fingerprints for key in key_ids):
        raise SourceError("verify", f"commit {sha}: signed by {', '.join(sorted(fingerprints))}, "
                                    f"which is not in gpg_key_ids")


def _run(args: list[str], timeout: float) -> subprocess.CompletedProcess[bytes]:
    try:
        return subprocess.run(args, capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise SourceError("verify", f"{Path(args[0]).name} did not finish within {timeout:g}s") from None


# ---------------------------------------------------------------------------------------------------------
# Helpers


def _normalize_path(path: str) -> str:
    """Repo-relative, without ``./`` or trailing slashes; ``""`` is the whole tree."""
    parts = [p for p in path.strip().replace("\\", "/").split("/") if p not in ("", ".")]
    if ".." in parts:
        raise SourceError("config", f"path {path!r} leaves the repo")
    return "/".join(parts)


def _is_hex(text: str) -> bool:
    return all(c in "0123456789ABCDEF" for c in text)


def _subject(message: bytes) -> str:
    return message.decode("utf-8", "replace").strip().split("\n", 1)[0]


# ---------------------------------------------------------------------------------------------------------
# One-shot commands


def writable_dir(directory: Path) -> bool:
    """Create `directory` if needed; True when this process can write in it."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError:
        return False
    return os.access(directory, os.W_OK | os.X_OK)


def read_input(settings: Settings) -> CommitFiles:
    """For render/validate/diff/sync --once with ``--repo``: fetch, verify and read one commit.

    The mirror lives in ``state_dir/mirror`` when the state dir is writable (so repeated runs
    fetch only what is new), else in a temp dir dropped afterwards. A mirror kept for another
    remote (the daemon's) is left alone: a one-shot for another repo uses a temp dir too.
    """
    source = Source.from_settings(settings)
    if writable_dir(settings.state_dir) and source.mirror_url() in (None, source.url):
        return _fetch_verify_read(source)
    with tempfile.TemporaryDirectory(prefix="gitsync-") as tmp:
        logger.debug("using a temporary mirror: {} is not writable or mirrors another remote",
                     settings.state_dir)
        return _fetch_verify_read(Source.from_settings(replace(settings, state_dir=Path(tmp))))


def _fetch_verify_read(source: Source) -> CommitFiles:
    sha = source.fetch()
    source.verify(sha)
    return source.read(sha)


__all__ = ["CommitFiles", "GitAuth", "Source", "SourceError", "read_input"]
