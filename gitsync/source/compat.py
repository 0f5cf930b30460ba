"""Every use of dulwich's private API, in one place.

dulwich is pinned below 2; these pieces reach past its public surface because the public one
cannot do what gitsync needs. `tests/source/test_compat.py` checks each against the installed dulwich and
fails loudly, naming the piece, when dulwich changes it: review the piece, then update the recorded
fingerprint.

- `TimeoutTCPGitClient`: ``git://`` with a timeout. dulwich's `TCPGitClient` opens its socket
  without one, so a silent daemon would hang a fetch forever; this is its ``_connect`` for the
  direct (no proxy) case with the socket made by ``socket.create_connection(..., timeout)``, and
  its writes held until the next read (`_WriteBehind`): one send per request, not per pkt-line.
- `asks_thin_packs`: whether a client asks the server for thin packs (its private
  ``_fetch_capabilities``, set in ``GitClient.__init__``). `gitsync.source.packgate.fetch_bounded` fetches
  as ``GitClient.fetch`` does, with a gate on the pack: a thin pack spooled and completed, a whole pack
  written straight into the store; which one is that client's choice.
- `remove_pack`: drop a pack from a disk object store (its cache entry, mmaps and files). The
  mirror merges the small packs incremental fetches leave; dulwich's public ``repack()`` would
  hold every object of the mirror in memory.
"""

from __future__ import annotations

import contextlib
import math
import select
import socket
from collections.abc import Callable
from typing import IO

from dulwich.client import GitClient, TCPGitClient
from dulwich.object_store import DiskObjectStore
from dulwich.pack import Pack
from dulwich.protocol import (
    CAPABILITY_THIN_PACK,
    DEFAULT_GIT_PROTOCOL_VERSION_FETCH,
    DEFAULT_GIT_PROTOCOL_VERSION_SEND,
    Protocol,
    format_cmd_pkt,
)

#: sha256 of the source of each dulwich method copied or called here, as last reviewed (dulwich 1.2.21).
REVIEWED: dict[str, str] = {
    "dulwich.client.TCPGitClient._connect":
        "a2b90669dd4c89d1e22b1bfd690b9a8a69c568850af65468006171ffab3b1bb1",
    "dulwich.object_store.DiskObjectStore._remove_pack":
        "37168609d04c0ecfe226bff964d7c1e51a01e97469f2a68dad316e37b794ffce",
    "dulwich.client.GitClient.__init__":
        "f2f8bd6ee97c33f1f3513475009f0f566190638faf6101ee0100278de8bee4eb",
    "dulwich.client.GitClient.fetch":
        "d341476f3ecbddf53b361c4a81b8dbea86b8afa7c6a8cde3e38df29422a9bf3f",
}


class TimeoutTCPGitClient(TCPGitClient):
    """``git://`` with a timeout on connect and on every read."""

    def __init__(self, host: str, port: int | None, timeout: float, thin_packs: bool = True) -> None:
        super().__init__(host, port, thin_packs=thin_packs)
        self.timeout = timeout

    def _connect(
        self, cmd: bytes, path: str | bytes, protocol_version: int | None = None
    ) -> tuple[Protocol, Callable[[], bool], IO[bytes] | None]:
        if not isinstance(path, bytes):
            path = path.encode(self._remote_path_encoding)
        sock = daemon_socket(self._host, self._port, self.timeout)
        rfile = sock.makefile("rb", -1)
        wire = _WriteBehind(sock)

        def read(size: int = -1) -> bytes:
            wire.flush()
            return rfile.read(size)

        def close() -> None:
            with contextlib.suppress(OSError):
                wire.flush()
            rfile.close()
            sock.close()

        def shutdown_write() -> None:
            wire.flush()
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_WR)

        proto = Protocol(read, wire.write, close, report_activity=self._report_activity,
                         shutdown_write=shutdown_write)
        if cmd == b"upload-pack":
            self.protocol_version = (DEFAULT_GIT_PROTOCOL_VERSION_FETCH if protocol_version is None
                                     else protocol_version)
        else:
            self.protocol_version = DEFAULT_GIT_PROTOCOL_VERSION_SEND
        proto.write_pkt_line(daemon_request(cmd, path, self._host, self.protocol_version == 2))

        def can_read() -> bool:
            return readable(sock.fileno(), 0)

        return proto, can_read, None


def readable(fd: int, timeout: float) -> bool:
    """Whether `fd` has something to read (or its end) within `timeout` seconds. poll(), not dulwich's
    select(): select() cannot watch a descriptor above 1,023, and the agent's listener, holding many
    connections, makes the agent's own descriptors that high."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(max(0, math.ceil(timeout * 1000))))


def daemon_socket(host: str, port: int, timeout: float) -> socket.socket:
    """A connection to a ``git://`` server: every operation bounded by `timeout`, pkt-lines sent without
    Nagle's delay."""
    sock = socket.create_connection((host, port), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def daemon_request(cmd: bytes, path: bytes, host: str, v2: bool) -> bytes:
    """The request that opens a ``git://`` conversation (a pkt-line's payload), as dulwich's
    ``_connect`` writes it: ``git-<cmd> <path>\\0host=<host>\\0``, with protocol v2 asked for
    (upload-pack only) in the extra parameters; a ``/~user`` path loses its leading slash."""
    if path.startswith(b"/~"):
        path = path[1:]
    version = b"\0\0version=2\0" if cmd == b"upload-pack" and v2 else b""
    return format_cmd_pkt(b"git-" + cmd, path, b"host=" + host.encode("ascii") + version)


class _WriteBehind:
    """A socket's writes, held until the client next reads (or closes, or ends its side) and then
    sent in one `sendall`. dulwich writes each pkt-line on its own: a ref query was a dozen sends and a
    fetch one per 'have', each a segment with TCP_NODELAY. A client only waits for the server when it
    reads, and every read sends what is held first, so nothing waits on a held write. Large writes (a
    pack being pushed) go out as they come, past `LIMIT` held bytes."""

    LIMIT = 64 * 1024

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._held = bytearray()

    def write(self, data: bytes) -> int:
        self._held += data
        if len(self._held) >= self.LIMIT:
            self.flush()
        return len(data)

    def flush(self) -> None:
        if self._held:
            held, self._held = bytes(self._held), bytearray()
            self._sock.sendall(held)


def asks_thin_packs(client: GitClient) -> bool:
    """Whether `client` asks for thin packs (as ``GitClient.fetch`` decides where a pack goes)."""
    return CAPABILITY_THIN_PACK in client._fetch_capabilities


def remove_pack(store: DiskObjectStore, pack: Pack) -> None:
    """Remove `pack` from `store`: dulwich's own removal (its pack cache, the mmaps, the files)."""
    store._remove_pack(pack)


__all__ = ["TimeoutTCPGitClient", "asks_thin_packs", "daemon_request", "daemon_socket", "readable",
           "remove_pack"]
