"""Reading a commit's config files straight from a mirror's object store, the next commit by its
difference from the last one read."""

from __future__ import annotations

import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dulwich.object_store import DiskObjectStore, tree_lookup_path
from dulwich.objects import Blob, Commit, Tree, parse_tree
from dulwich.repo import Repo

from gitsync.configfiles import ConfigFiles, is_config_file, may_hold_config, skipped
from gitsync.source.sizes import object_size
from gitsync.source.transport import SourceError

if TYPE_CHECKING:
    pass

FILE_MODES = (0o100644, 0o100755)  # regular files; symlinks and submodules are not config
SUBMODULE_MODE = 0o160000


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



class CommitReader:
    """Reads the config files of commits from a mirror's object store, each commit by its difference
    from the last one read when it can (see `read`)."""

    def __init__(self, paths: tuple[str, ...], max_file_size: int) -> None:
        self.paths = paths
        self.max_file_size = max_file_size  # a larger config blob is never loaded
        self.last: _LastRead | None = None  # the last commit read, to read the next by difference


    def read(self, repo: Repo, commit: Commit, have: Callable[[str], bool] | None,
             load: Callable[[str], bytes]) -> CommitFiles:
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
        if True:
            store = repo.object_store
            objects = tuple(self._object_at(repo, commit, path) for path in self.paths)
            last = self.last
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
            self.last = _LastRead(self.paths, self.max_file_size, objects, dict(files.blob_ids),
                                        dict(files), frozenset(files.unread), dict(files.oversized))
            files.load = load
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
        size = object_size(store, blob_id)
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




def _subject(message: bytes) -> str:
    return message.decode("utf-8", "replace").strip().split("\n", 1)[0]
