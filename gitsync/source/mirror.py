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
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from dulwich.object_store import DiskObjectStore, ObjectStoreGraphWalker
from dulwich.objects import Blob, Commit, Tag
from dulwich.pack import full_unpacked_object
from dulwich.repo import ParentsProvider, Repo

from gitsync.backoff import Backoff, retried
from gitsync.configfiles import DEFAULT_MAX_FILE_SIZE
from gitsync.log import logger
from gitsync.settings import SPEC_BY_NAME
from gitsync.source.compat import remove_pack
from gitsync.source.packgate import LimitExceeded, ObjectLimits, fetch_bounded
from gitsync.source.read import CommitFiles, CommitReader
from gitsync.source.signatures import SignaturePolicy, verify_commit
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
#: A fetch merges packs itself only past this many (a caller that never calls `Source.tidy`).
UNTIDY_PACKS = 4 * MAX_PACKS
DEFAULT_LIMITS = ObjectLimits(*(SPEC_BY_NAME[name].default
                                for name in ("max_object_size", "max_fetch_objects", "max_fetch_size")))


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

    Without it every read walks one more pack per commit ever fetched, so reads slow down and the
    daemon's memory grows with every commit. dulwich's own `repack()` holds every object of the
    mirror in memory at once, which a large mirror cannot afford (bench/README.md has the figures).
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


class Source:
    """One git remote and ref, mirrored under ``state_dir / "mirror"``."""

    def __init__(self, remote: Remote, ref: str = "main", paths: Sequence[str] = (".",), *,
                 state_dir: Path = DEFAULT_STATE_DIR, depth: int = 0, allow_rewrite: bool = True,
                 signatures: SignaturePolicy = SignaturePolicy(),
                 max_file_size: int = DEFAULT_MAX_FILE_SIZE, limits: ObjectLimits = DEFAULT_LIMITS) -> None:
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
        self.limits = limits
        self.parents = ParentsMemo()  # the commits a fetch offers as 'have's, for the next fetch
        self.reader = CommitReader(self.paths, max_file_size)
        self._untidy = False  # a fetch added a pack that `tidy` has not looked at

    @classmethod
    def from_settings(cls, settings: Settings) -> Source:
        return cls(Remote.from_settings(settings), settings.ref, settings.paths, state_dir=settings.state_dir,
                   depth=settings.depth, allow_rewrite=settings.allow_rewrite,
                   signatures=SignaturePolicy.from_settings(settings), max_file_size=settings.max_file_size,
                   limits=limits_from_settings(settings))

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
            depth = self.depth if first and self.depth > 0 else None

            def determine_wants(refs: Mapping[bytes, bytes], _depth: int | None = None) -> list[bytes]:
                name, raw, _ = self._resolve(refs, "fetch")
                chosen["name"], chosen["raw"] = name, raw
                # A shallow fetch is always asked for, so the server resends the shallow list that a
                # fetch killed before it was written never recorded.
                return [raw] if depth or raw not in repo.object_store else []

            client, path = self.remote.client()

            def fetch() -> Any:
                return self.remote.network("fetch", lambda: fetch_bounded(
                    client, path, repo, determine_wants, self.limits, depth=depth,
                    ref_prefix=self._candidates()))

            tip_alone = False
            try:
                try:
                    self._bounded(chosen, fetch)
                except SourceError as exc:
                    if exc.stage != "verify" or depth or not self.allow_rewrite:
                        raise
                    # The history holds an object over the limits: the tip alone may not (the commit
                    # after the one that added a large file, removing it). Fetched shallow, the mirror
                    # keeps no history under it; a tip that itself holds one is refused as before.
                    logger.warning("{}: the history of {} holds what a fetch may not bring ({}); fetching "
                                   "the tip alone", self.url, self.ref, exc.reason.split(": ", 2)[-1])
                    depth, tip_alone = 1, True
                    self._bounded(chosen, fetch)
            finally:
                client.close()
            new = self._move_ref(repo, chosen["name"], chosen["raw"], same_remote, tip_alone=tip_alone)
            if not same_remote:
                self._record_remote(repo)
            self._untidy = True
            if len(repo.object_store.packs) > UNTIDY_PACKS:  # a caller that never tidies
                _consolidate_packs(repo.object_store)
            return new.decode()

    def _bounded(self, chosen: Mapping[str, Any], fetch: Callable[[], T]) -> T:
        """`fetch`, a pack over the limits refused as the commit's own problem: stage ``verify`` (a commit
        is checked before it is used: its signature, the size of its objects), never retried."""
        try:
            return fetch()
        except LimitExceeded as exc:
            raw = chosen.get("raw") or chosen.get("commit") or b""
            what = chosen["name"].decode() + " at " if "name" in chosen else "commit "
            commit = raw.decode() if isinstance(raw, bytes) else str(raw)
            raise SourceError("verify", f"{self.url}: {what}{commit[:12]}: {exc.reason}: not fetched "
                                        "(docs/security.md, \"Objects and packs\")") from None

    def tidy(self) -> None:
        """Merge the small packs fetches left (`_consolidate_packs`). Not part of a fetch: the agent
        tidies once a sync is over, so that a merge (every few fetches, tens of milliseconds) never
        holds up a commit on its way to the gateways."""
        if not self._untidy:
            return
        self._untidy = False
        try:
            with self._locked_mirror() as repo:
                _consolidate_packs(repo.object_store)
        except SourceError as exc:  # best effort, as the merge itself
            logger.warning("could not tidy the mirror: {}", exc.reason)

    def _move_ref(self, repo: Repo, name: bytes, raw: bytes, same_remote: bool, *,
                  tip_alone: bool = False) -> bytes:
        """Point the mirror's ref at `raw` (objects are complete), refusing a rewrite if asked. A tip
        fetched alone (`tip_alone`: its history was refused) cannot be told from a rewrite: that is
        followed only with `allow_rewrite`, which `fetch` checked."""
        new = _peel(repo, raw, "fetch").id
        old_raw = _ref(repo, name)
        if old_raw == raw:
            return new
        if old_raw is not None and same_remote and not tip_alone:
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
                return self._bounded({"commit": sha}, lambda: self.remote.network(
                    "fetch", lambda: fetch_bounded(client, path, repo, wants, self.limits,
                                                   depth=self.depth or None)))

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

    def commit_time(self, sha: str) -> datetime:
        """When commit `sha` was committed (its committer's clock), fetching it first if the mirror
        lacks it."""
        if not self._local_commit(sha):
            self.fetch()
        with self._mirror_commit("fetch", sha) as (_repo, commit):
            return datetime.fromtimestamp(commit.commit_time, UTC)

    # -- read and verify -------------------------------------------------------------------------------

    def read(self, sha: str, have: Callable[[str], bool] | None = None) -> CommitFiles:
        """The config files under the configured paths at commit `sha` (`CommitReader.read`)."""
        with self._mirror_commit("read", sha) as (repo, commit):
            return self.reader.read(repo, commit, have, self.blob)

    def subject(self, sha: str) -> str:
        """The first line of commit `sha`'s message, from the mirror; "" when the mirror does not hold it."""
        try:
            with self._mirror_commit("read", sha) as (_repo, commit):
                return commit.message.decode("utf-8", "replace").strip().split("\n", 1)[0]
        except (SourceError, KeyError, ValueError):
            return ""

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

    def verify(self, sha: str) -> None:
        """Apply the signature policy to commit `sha`; SourceError if it must not be applied."""
        with self._mirror_commit("verify", sha) as (_repo, commit):
            verify_commit(commit, self.signatures, self.timeout)


def limits_from_settings(settings: Settings) -> ObjectLimits:
    """`max_object_size`, `max_fetch_objects` and `max_fetch_size`."""
    return ObjectLimits(settings.max_object_size, settings.max_fetch_objects, settings.max_fetch_size)


def _normalize_path(path: str) -> str:
    """Repo-relative, without ``./`` or trailing slashes; ``""`` is the whole tree."""
    parts = [p for p in path.strip().replace("\\", "/").split("/") if p not in ("", ".")]
    if ".." in parts:
        raise SourceError("config", f"path {path!r} leaves the repo")
    return "/".join(parts)


T = TypeVar("T")
#: The first wait between tries of a git contact within one sync (`contacted`), doubled each time.
RETRY_BASE = 1.0


def contacted(action: Callable[[], T], url: str, attempts: int, max_backoff: float, *,
              remote: str = "git remote") -> T:
    """A contact of a source's remote (`Source.check`, `Source.fetch`; a registry's HEAD and pull), tried
    up to `attempts` times while the transport fails, with a jittered backoff between tries; the last
    failure raised. `remote` is what the log calls it."""
    def retrying(exc: Exception, attempt: int, delay: float) -> None:
        logger.warning("{} {}: {} (attempt {} of {}); retrying in {:.1f}s", remote, url, exc, attempt,
                       attempts, delay)

    return retried(action, attempts, Backoff(RETRY_BASE, max_backoff),
                   retry_if=lambda exc: isinstance(exc, SourceError) and exc.transient, on_retry=retrying)


__all__ = ["GitAuth", "Source", "SourceError", "contacted"]
