"""Object sizes from their headers: how large a blob is, without inflating it (loose or packed,
as a delta or whole)."""

from __future__ import annotations

import os
import zlib
from collections.abc import Callable
from typing import IO, TYPE_CHECKING

from dulwich.object_store import DiskObjectStore
from dulwich.pack import OFS_DELTA, REF_DELTA, Pack

from gitsync.source.transport import SourceError

if TYPE_CHECKING:
    pass

def object_size(store: DiskObjectStore, sha: bytes) -> int:
    """An object's size from its header, never inflating the object: a 300 MB blob costs a few
    hundred bytes read (a packed delta's size is in the first bytes of its delta data)."""
    with ObjectSizes(store) as sizes:
        return sizes.size(sha)


class ObjectSizes:
    """`object_size` for many objects of one store, and where each is packed: the store's packs listed
    once (dulwich lists the pack directory on every ``store.packs``) and each pack file opened once,
    not once per object. Packs added to the store after it was made are not seen: make one per read."""

    def __init__(self, store: DiskObjectStore) -> None:
        self.store = store
        self.packs = store.packs
        self._files: dict[str, IO[bytes]] = {}

    def __enter__(self) -> ObjectSizes:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for stream in self._files.values():
            stream.close()
        self._files.clear()

    def find(self, sha: bytes) -> tuple[Pack, int] | None:
        """The pack holding `sha` (hex) and its offset there; None when it is not packed."""
        for pack in self.packs:
            try:
                return pack, pack.index.object_offset(sha)
            except KeyError:
                continue
        return None

    def size(self, sha: bytes) -> int:
        """The size of object `sha` (hex) from its header (see `object_size`)."""
        found = self.find(sha)
        if found is None:
            hex_sha = sha.decode()
            with open(os.path.join(self.store.path, hex_sha[:2], hex_sha[2:]), "rb") as stream:
                header = _inflate_start(stream, lambda out: b"\0" in out)  # "blob <size>\0"
            return int(header.split(b"\0", 1)[0].split(b" ", 1)[1])
        pack, offset = found
        path = pack.data.path
        stream = self._files.get(path)
        if stream is None:
            stream = self._files[path] = open(path, "rb")  # noqa: SIM115 (closed by close())
        return _packed_size(stream, offset, len(sha) // 2)


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
    sizes = varints(_inflate_start(stream, lambda out: varints(out, 2) is not None), 2)
    assert sizes is not None
    return sizes[1]


def varints(data: bytes, count: int) -> list[int] | None:
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
