"""Fetches bounded before anything is inflated: every object a remote sends is measured from its
header in the pack as the pack streams in, and a pack that holds too much is refused there.

A git object is zlib-compressed in its pack, so a remote can send a 300 MB blob of zeros in a few
hundred kilobytes; dulwich indexes a pack by inflating each of its objects whole (about twice its size
at the peak). `PackGate` sits between the transport and the file the pack is written to, and reads
each entry's header as it passes:

* the pack's own header says how many objects follow: more than `ObjectLimits.objects` and the fetch
  stops there (dulwich keeps about half a kilobyte per object while it indexes a pack);
* each object's header says its size; a delta's data starts with the size of the object it makes: an
  object larger than `ObjectLimits.object_size` stops the fetch before a byte of it is inflated;
* the sizes add up: past `ObjectLimits.total` bytes in one fetch (counting each object at its full
  size) the fetch stops.

To find where one entry ends and the next begins the gate inflates each entry's data as it passes,
in chunks it throws away (64 KiB at a time at most): memory stays flat whatever an object holds, and
an object that inflates to more than its header said is refused as well. A refused fetch raises
`LimitExceeded` (a `SourceError`, never retried: the remote holds what it holds) naming the object (its
place in the pack, its type and size), the limit and the setting; nothing is written to the object
store. `fetch_bounded` is a fetch through any dulwich client with the gate in place; for a local path
remote (no pack on a wire) it reads each object's size from its header in the remote's object store
before the pack is built (`gitsync.source.sizes`).
"""

from __future__ import annotations

import contextlib
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from tempfile import SpooledTemporaryFile
from typing import Any

from dulwich.client import FetchPackResult, GitClient, LocalGitClient
from dulwich.object_store import DiskObjectStore
from dulwich.pack import OFS_DELTA, REF_DELTA, generate_unpacked_objects
from dulwich.repo import Repo

from gitsync.source.compat import asks_thin_packs
from gitsync.source.sizes import object_size, varints
from gitsync.source.transport import SourceError

#: Inflated bytes looked at in one step: what the gate holds of an object at a time.
STEP = 64 * 1024
#: Pack data held in memory before the incoming pack spills to a temporary file.
SPOOL = 1024 * 1024
TYPE_NAMES = {1: "commit", 2: "tree", 3: "blob", 4: "tag", OFS_DELTA: "delta", REF_DELTA: "delta"}


@dataclass(frozen=True)
class ObjectLimits:
    """What one fetch may bring: `object_size` bytes per object (a delta counted at the size of the
    object it makes, and of its own data), `objects` objects, `total` bytes of objects in all; each
    with the setting that sets it, for the error."""

    object_size: int
    objects: int
    total: int
    settings: tuple[str, str, str] = ("max_object_size", "max_fetch_objects", "max_fetch_size")


class LimitExceeded(SourceError):
    """A fetch refused because the remote's pack holds more than `ObjectLimits` allow (see the module).
    `setting` names the limit; `what` the object (its place in the pack, its type), when it is one."""

    def __init__(self, what: str, size: int, limit: int, setting: str, *, objects: bool = False) -> None:
        self.what, self.size, self.limit, self.setting = what, size, limit, setting
        super().__init__("fetch", f"{what} holds {size:,} objects, more than {setting} = {limit:,}" if objects
                         else f"{what} is {size_text(size)}, more than {setting} = {size_text(limit)}")


def size_text(size: int) -> str:
    """``300.0 MiB (314,572,800 bytes)``: a size for people, exact."""
    for unit, factor in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= factor:
            return f"{size / factor:.1f} {unit} ({size:,} bytes)"
    return f"{size:,} bytes"


class PackGate:
    """The pack as it streams, checked entry by entry (see the module); `write` passes each chunk on
    to `sink` once it is checked. `finish` says whether the whole pack went through."""

    def __init__(self, limits: ObjectLimits, sink: Callable[[bytes], object], hash_size: int = 20) -> None:
        self.limits = limits
        self.sink = sink
        self.hash_size = hash_size
        self.count: int | None = None  # objects the pack says it holds
        self.seen = 0  # entries whose data ended
        self.total = 0  # bytes of objects so far, each at its full size
        self._pending = b""  # bytes not parsed yet (a header cut by a chunk's end)
        self._inflater: Any = None  # the current entry's data, being inflated
        self._entry: tuple[int, int] = (0, 0)  # its type and declared size
        self._inflated = 0
        self._delta_start: bytes | None = None  # a delta's first inflated bytes, until its sizes are read

    def write(self, data: bytes) -> int:
        self._feed(bytes(data))
        self.sink(data)
        return len(data)

    __call__ = write

    @property
    def done(self) -> bool:
        return self.count is not None and self.seen >= self.count

    def _feed(self, data: bytes) -> None:
        buffer = self._pending + data if self._pending else data
        view = memoryview(buffer)
        at = 0
        while at < len(buffer) and not self.done:
            if self.count is None:
                if len(buffer) - at < 12:
                    break
                self._header(bytes(view[at:at + 12]))
                at += 12
            elif self._inflater is None:
                after = self._entry_header(view, at)
                if after is None:
                    break
                at = after
            else:
                at = self._inflate(view, at)
        self._pending = bytes(view[at:]) if not self.done else b""

    def _header(self, head: bytes) -> None:
        if head[:4] != b"PACK":
            raise SourceError("fetch", "the remote sent something that is not a git pack")
        self.count = int.from_bytes(head[8:12], "big")
        if self.count > self.limits.objects:
            raise LimitExceeded("the pack", self.count, self.limits.objects, self.limits.settings[1],
                                objects=True)

    def _entry_header(self, view: memoryview, at: int) -> int | None:
        """Parse the entry header at `at`: where its data starts, or None when `view` ends first."""
        end = len(view)
        byte = view[at]
        kind, size, shift = (byte >> 4) & 7, byte & 15, 4
        while byte & 0x80:
            at += 1
            if at >= end:
                return None
            byte = view[at]
            size |= (byte & 0x7F) << shift
            shift += 7
        at += 1
        if kind == OFS_DELTA:  # the base's distance back in the pack
            while True:
                if at >= end:
                    return None
                at += 1
                if not view[at - 1] & 0x80:
                    break
        elif kind == REF_DELTA:  # the base's id
            at += self.hash_size
            if at > end:
                return None
        self._check(kind, size)
        self._entry = (kind, size)
        self._inflater = zlib.decompressobj()
        self._inflated = 0
        self._delta_start = b"" if kind in (OFS_DELTA, REF_DELTA) else None
        return at

    def _what(self, kind: int) -> str:
        name = TYPE_NAMES.get(kind, f"type {kind}")
        article = "an" if name[0] in "aeiou" else "a"
        return f"object {self.seen + 1:,} of {self.count:,} in the pack ({article} {name})"

    def _check(self, kind: int, size: int) -> None:
        if size > self.limits.object_size:
            raise LimitExceeded(self._what(kind), size, self.limits.object_size, self.limits.settings[0])
        if kind not in (OFS_DELTA, REF_DELTA):
            self._count(kind, size)

    def _count(self, kind: int, size: int) -> None:
        self.total += size
        if self.total > self.limits.total:
            raise LimitExceeded(f"the pack, up to {self._what(kind)},", self.total, self.limits.total,
                                self.limits.settings[2])

    def _inflate(self, view: memoryview, at: int) -> int:
        """Inflate the current entry's data from `at` in bounded steps: where it ended, else the end of
        `view`. The input is given in slices little longer than the entry can be compressed to, so
        that zlib's copy of what follows a stream's end stays small (a pack holds many small objects)."""
        kind, size = self._entry
        inflater = self._inflater
        end = len(view)
        try:
            while at < end:
                piece = view[at:at + size + size // 1024 + 64]
                self._took(kind, size, inflater.decompress(piece, STEP))
                while inflater.unconsumed_tail and not inflater.eof:
                    self._took(kind, size, inflater.decompress(inflater.unconsumed_tail, STEP))
                if inflater.eof:
                    self._inflater = None
                    self.seen += 1
                    return at + len(piece) - len(inflater.unused_data)
                at += len(piece)
        except zlib.error as exc:
            raise SourceError("fetch", f"the remote's pack is damaged at {self._what(kind)}: {exc}") from None
        return at

    def _took(self, kind: int, size: int, out: bytes) -> None:
        self._inflated += len(out)
        if self._inflated > size:
            raise LimitExceeded(f"{self._what(kind)}, which says it is {size:,} bytes,", self._inflated,
                                size, "its own header")
        if self._delta_start is not None and out:  # a delta: the size of what it makes, from its start
            self._delta_start += out[:20]
            sizes = varints(self._delta_start, 2)
            if sizes is None:
                return
            self._delta_start = None
            if sizes[1] > self.limits.object_size:
                raise LimitExceeded(f"{self._what(kind)} making an object", sizes[1], self.limits.object_size,
                                    self.limits.settings[0])
            self._count(kind, sizes[1])

    def finish(self) -> None:
        """Raise unless the pack ended whole (its entries all seen); an empty fetch (no pack) is whole."""
        if self.count is None and not self._pending:
            return
        if not self.done:
            raise SourceError("fetch", f"the remote's pack ended after {self.seen} of {self.count or 0} "
                                       "objects")


DetermineWants = Callable[..., list[bytes]]


def fetch_bounded(client: GitClient, path: str, repo: Repo, determine_wants: DetermineWants,
                  limits: ObjectLimits | Callable[[int], ObjectLimits], *, graph_walker: Any = None,
                  depth: int | None = None, ref_prefix: Sequence[bytes] | None = None) -> FetchPackResult:
    """`client.fetch` into `repo`, with every object bounded by `limits` before it is inflated (see the
    module); `limits` may be a function of the number of objects wanted, asked once they are known.
    `graph_walker`: the 'have's to offer (default: the repo's own). The pack is spooled (in
    memory up to `SPOOL`, then in a temporary file beside the object store) and added to the store
    only when it went through whole; a client that takes whole packs writes it straight into the
    store, as ``GitClient.fetch`` does (`gitsync.source.compat.asks_thin_packs`)."""
    walker = graph_walker if graph_walker is not None else repo.get_graph_walker()
    store = repo.object_store
    scale = limits if callable(limits) else None
    gate = PackGate(limits if isinstance(limits, ObjectLimits) else limits(0), lambda data: None,
                    store.object_format.oid_length)

    def wanted(refs: Any, depth: int | None = None) -> list[bytes]:
        wants = determine_wants(refs, depth)
        if scale is not None:
            gate.limits = scale(len(wants))
        return wants

    if isinstance(client, LocalGitClient):
        return _fetch_local(path, repo, wanted, gate, walker, depth)
    with contextlib.ExitStack() as stack:
        if asks_thin_packs(client):  # completed with its bases from the store once whole
            spool = stack.enter_context(SpooledTemporaryFile(max_size=SPOOL, prefix="incoming-",
                                                             dir=getattr(store, "path", None)))
            sink, commit, abort = spool.write, partial(_add_thin, store, spool), lambda: None
        else:  # a whole pack: written into the store as it comes, indexed once whole
            pack, commit, abort = store.add_pack()
            sink = pack.write
        gate.sink = sink
        try:
            result = client.fetch_pack(path.encode() if isinstance(path, str) else path, wanted,
                                       walker, gate.write, depth=depth, ref_prefix=ref_prefix)
            gate.finish()
        except BaseException:
            abort()
            raise
        commit()
    repo.update_shallow(result.new_shallow, result.new_unshallow)
    return result


def _add_thin(store: Any, spool: Any) -> None:
    if spool.tell():
        spool.seek(0)
        store.add_thin_pack(spool.read, None)


def _fetch_local(path: str, repo: Repo, determine_wants: DetermineWants, gate: PackGate, walker: Any,
                 depth: int | None) -> FetchPackResult:
    """A fetch from a repo on this machine, as dulwich's local client makes it, with the objects it would
    copy measured from their headers in that repo's object store first (no pack crosses a wire)."""
    with Repo(path) as remote:
        missing = remote.find_missing_objects(determine_wants, walker, None, depth=depth)
        ids = list(missing) if missing is not None else []
        if ids:
            check_sizes(remote.object_store, [oid for oid, _hint in ids], gate.limits)
            repo.object_store.add_pack_data(len(ids), generate_unpacked_objects(
                remote.object_store, ids, other_haves=missing.get_remote_has()))  # type: ignore[union-attr]
        return FetchPackResult(dict(remote.get_refs()), remote.refs.get_symrefs(), b"gitsync",
                               object_format=remote.object_format.name)


def check_sizes(store: DiskObjectStore, ids: Iterable[bytes], limits: ObjectLimits) -> None:
    """Refuse `ids` of a local object store, by `limits`, from their headers alone."""
    ids = list(ids)
    if len(ids) > limits.objects:
        raise LimitExceeded("the fetch", len(ids), limits.objects, limits.settings[1], objects=True)
    total = 0
    for index, oid in enumerate(ids, 1):
        try:
            size = object_size(store, oid)
        except (OSError, KeyError, SourceError):  # in an alternate, say: the copy reads it as it is
            continue
        what = f"object {oid.decode()} ({index:,} of {len(ids):,})"
        if size > limits.object_size:
            raise LimitExceeded(what, size, limits.object_size, limits.settings[0])
        total += size
        if total > limits.total:
            raise LimitExceeded(f"the fetch, up to {what},", total, limits.total, limits.settings[2])


__all__ = ["LimitExceeded", "ObjectLimits", "PackGate", "check_sizes", "fetch_bounded", "size_text"]
