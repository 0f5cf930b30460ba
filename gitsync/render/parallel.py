"""A cold render's per-file work on every CPU: parsing and checking many files in forked workers.

A render that finds most files parsed already (the parse cache, in memory or on disk) costs what
changed. The first one (a first `sync --once`, a new state dir, `gitsync validate` of a repo)
parses every file and checks every item against APISIX's schema: about a second per megabyte of
YAML on one CPU, all of it pure and per file. So when a render has at least `MIN_BYTES` of files to
parse and more than one CPU, it forks ``cpus - 1`` workers and works beside them; each takes the
next chunk of files from a shared pipe (a read of ≤ ``PIPE_BUF`` bytes is atomic), parses it with
the schema check of each plain document's lists (`FileFacts`, what validation asks of a file),
writes the plain files to the parse store on disk when the render has one, and hands back their
parse-store entries (`gitsync.render.stored`: the format a restarted process reads anyway). What a
worker did not hand back, whatever the reason, is parsed by the render as if nothing had been
done: workers can only save time, never change a result.

Only files that are plain are handed back (no ``${{ }}``, no SOPS: `stored.storable`), so no
substituted or decrypted value crosses the pipe; the workers never see a secret, since substitution
and decryption run later, in the render itself.

A forked child of a process running other threads (the daemon's scheduler, the gateway probes of
a sync) may inherit a lock one of them held. A worker takes none it could find held: what it runs
is imported with this module (a test holds that `prepare` imports nothing more but the two
libraries checks load on first use: cryptography for certificates, lupa for Lua sources), it
neither logs nor touches a cache shared with other threads, it writes to a file of its own and
ends with `os._exit` (no handler, no buffer flushed twice). And whatever a worker does, the render
waits for it a bounded time only (`_patience`), then kills it and parses what it did not hand back.
"""

from __future__ import annotations

import contextlib
import marshal
import os
import signal
import struct
import sys
import tempfile
import time
import warnings
from collections.abc import Sequence
from typing import IO, Any

from gitsync import __version__
from gitsync.kinds import KINDS
from gitsync.render.load import ParseCache, ParsedFile, parse
from gitsync.render.stored import ParseStore, decode, encode, storable
from gitsync.render.validate import FileFacts

#: Below this many bytes to parse, one CPU is as fast as forking (a fork and a hand-back cost a few ms).
MIN_BYTES = 256 * 1024
#: Chunks per worker: small enough that a worker which finished early takes the rest.
CHUNKS_PER_WORKER = 8
MAX_PROCESSES = 8  # the render and at most 7 workers
_CLAIM = struct.Struct("=I")


def cpus() -> int:
    """The CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def prepare(data: bytes) -> ParsedFile:
    """`parse`, and for a plain file the facts validation keeps of each document's lists: each item's
    own problems (APISIX's schema), the ids it names, its size and canonical content."""
    parsed = parse(data)
    if storable(parsed):
        facts = FileFacts.of(parsed)
        for doc in parsed.documents:
            content = doc.shared
            if isinstance(content, dict):
                for kind in KINDS:
                    items = content.get(kind)
                    if isinstance(items, list) and items:
                        facts.segment(doc.index, kind, items)
    return parsed


def parse_all(cache: ParseCache, files: Sequence[tuple[str, bytes]]) -> None:
    """Put each (blob SHA, bytes) in `cache` parsed, beside forked workers when it is worth it (else
    nothing: the render parses them one by one). Never raises for a worker's failure."""
    workers = min(cpus(), MAX_PROCESSES) - 1
    if workers < 1 or sum(len(data) for _, data in files) < MIN_BYTES or sys.platform != "linux":
        return
    chunks = _chunks(files, (workers + 1) * CHUNKS_PER_WORKER)
    store = cache.store if cache.store is not None and cache.store.usable else None
    claims_r, claims_w = os.pipe()
    os.write(claims_w, b"".join(_CLAIM.pack(n) for n in range(len(chunks))))  # ≤ 64 chunks: fits a pipe
    os.close(claims_w)
    children: list[tuple[int, IO[bytes]]] = []
    reaped: set[int] = set()
    try:
        for _ in range(workers):
            out = tempfile.TemporaryFile()  # noqa: SIM115 - closed in the finally below
            with warnings.catch_warnings():  # Python ≥ 3.12 warns of forking with threads: see above
                warnings.simplefilter("ignore", DeprecationWarning)
                pid = os.fork()
            if pid == 0:  # pragma: no cover - the child's side; it ends in os._exit, whatever happens
                _work(chunks, claims_r, out, store)
            children.append((pid, out))
        started = time.monotonic()
        for index in _claimed(claims_r):
            for key, data in chunks[index]:
                cache.put(key, prepare(data))
        deadline = time.monotonic() + _patience(time.monotonic() - started)
        for pid, out in children:
            status = _exit_status(pid, deadline)
            if status is not None:
                reaped.add(pid)
            if status == 0:
                for key, entry, stored in _entries(out):
                    if (parsed := decode(entry, key, __version__)) is not None:
                        cache.put(key, parsed, stored)
    finally:
        os.close(claims_r)
        for pid, out in children:
            out.close()
            if pid not in reaped:  # still running: late, or the render failed meanwhile
                with contextlib.suppress(ChildProcessError, ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)


def _patience(own: float) -> float:
    """How long the render waits for its workers once no chunk is left: a worker still busy is on its
    last chunk, about an eighth of this process's share; twice that, and never less than a second."""
    return max(1.0, own / 4)


def _exit_status(pid: int, deadline: float) -> int | None:
    """The worker's exit code, once it ended; None when it is still running at `deadline`."""
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            return None
        time.sleep(0.002)


def _chunks(files: Sequence[tuple[str, bytes]], count: int) -> list[list[tuple[str, bytes]]]:
    """`files` cut into about `count` runs of about equal bytes, in order."""
    per_chunk = max(1, sum(len(data) for _, data in files) // count)
    chunks: list[list[tuple[str, bytes]]] = [[]]
    size = 0
    for key, data in files:
        if size >= per_chunk:
            chunks.append([])
            size = 0
        chunks[-1].append((key, data))
        size += len(data)
    return chunks


def _claimed(claims: int) -> Any:
    """The chunk numbers this process claims, one at a time, until none is left."""
    while len(raw := os.read(claims, _CLAIM.size)) == _CLAIM.size:
        yield _CLAIM.unpack(raw)[0]


def _work(chunks: list[list[tuple[str, bytes]]], claims: int, out: IO[bytes],
          store: ParseStore | None) -> None:  # pragma: no cover - run in the child
    """A worker: prepare each claimed chunk's files; hand back the plain ones' parse-store entries,
    each written to the store already where there is one (what the render need not write after)."""
    code = 1
    try:
        with contextlib.suppress(ValueError):  # (the forking thread is the child's main thread)
            signal.set_wakeup_fd(-1)  # a signal here must not wake the parent's loop
            for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                signal.signal(number, signal.SIG_DFL)  # nor run the parent's handlers
        entries = []
        for index in _claimed(claims):
            for key, data in chunks[index]:
                parsed = prepare(data)
                if storable(parsed):
                    entry = encode(key, parsed, __version__)
                    stored = False
                    if store is not None:
                        with contextlib.suppress(OSError):
                            store.write(key, entry)
                            stored = True
                    entries.append((key, entry, stored))
        marshal.dump(entries, out, 4)
        out.flush()
        code = 0
    finally:
        os._exit(code)


def _entries(out: IO[bytes]) -> list[tuple[str, bytes, bool]]:
    """What a worker handed back: (blob SHA, parse-store entry, written to the store); nothing when
    it is damaged."""
    out.seek(0)
    try:
        entries = marshal.load(out)
        return [(key, entry, stored is True) for key, entry, stored in entries
                if type(key) is str and type(entry) is bytes]
    except (EOFError, ValueError, TypeError):
        return []
