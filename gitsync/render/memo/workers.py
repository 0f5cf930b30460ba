"""A cold render's per-file work on every CPU: parsing and checking many files in forked workers.

A render that finds most files parsed already (the parse cache, in memory or on disk) costs what
changed. The first one (a first `sync --once`, a new state dir, `gitsync validate` of a repo)
parses every file and checks every item against APISIX's schema: about a second per megabyte of
YAML on one CPU, all of it pure and per file. So when a render has at least `MIN_BYTES` of files to
parse and more than one CPU, it forks ``cpus - 1`` workers and works beside them; each takes the
next chunk of files from a shared pipe (a read of ≤ ``PIPE_BUF`` bytes is atomic), parses it with
the schema check of each plain document's lists (`FileFacts`, what validation asks of a file),
writes the plain files to the parse store on disk when the render has one, and hands back their
parse-store entries (`gitsync.render.memo.store`: the format a restarted process reads anyway). What a
worker did not hand back, whatever the reason, is parsed by the render as if nothing had been
done: workers can only save time, never change a result.

Only files that are plain are handed back (no ``${{ }}``, no SOPS: `stored.storable`), so no
substituted or decrypted value crosses back or reaches the disk: a worker works on the repo's bytes
alone, since substitution and decryption run later, in the render itself. (A forked child shares
its parent's memory, which in a daemon holds rendered payloads; a worker reads none of it but the
files it was given, and writes nothing else.)

A forked child of a process running other threads (the daemon's scheduler, the gateway probes of
a sync) may inherit a lock one of them held. A worker takes none it could find held: what it runs
is imported with this module (a test holds that `prepare` imports nothing more but the two
libraries checks load on first use: cryptography for certificates, lupa for Lua sources), it
neither logs nor touches a cache shared with other threads (the Lua checker's lock and state
are made anew in a child: `schema.lua`), runs none of the parent's signal handlers (signals are
held across the fork), writes to a file of its own and ends with `os._exit` (no handler, no buffer
flushed twice). And whatever a worker does, the render waits for it a bounded time only
(`_patience`), then kills it and parses what it did not hand back.
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
from collections.abc import Callable, Sequence
from typing import IO, Any

from gitsync import __version__
from gitsync.kinds import KINDS
from gitsync.render.facts import FileFacts
from gitsync.render.load import ParsedFile, parse
from gitsync.render.memo.store import MARSHAL_VERSION, ParseStore, decode, encode, storable
from gitsync.render.validate import segment_of

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
                        segment_of(facts, doc.index, kind, items)
    return parsed


def parse_all(files: Sequence[tuple[str, bytes]], put: Callable[[str, ParsedFile, bool], None],
              store: ParseStore | None) -> None:
    """Parse each (blob SHA, bytes) and `put` it (key, parsed, whether a worker stored it already in
    `store`), beside forked workers when it is worth it (else
    nothing: the render parses them one by one). Never raises for a worker's failure, nor for one
    to start one (no pipe, no fork: the render goes on alone, or with the workers it has)."""
    workers = min(cpus(), MAX_PROCESSES) - 1
    total = _size(files)
    if workers < 1 or total < MIN_BYTES or sys.platform != "linux":
        return
    chunks = _chunks(files, (workers + 1) * CHUNKS_PER_WORKER)
    store = store if store is not None and store.usable else None
    version = store.version if store is not None else __version__
    try:
        claims_r, claims_w = os.pipe()
    except OSError:
        return
    try:  # at most 2 × 64 + 1 claims of 4 bytes (see _chunks): they fit a pipe at once
        os.write(claims_w, b"".join(_CLAIM.pack(n) for n in range(len(chunks))))
    finally:
        os.close(claims_w)
    children: list[tuple[int, IO[bytes]]] = []
    ended: set[int] = set()
    try:
        for _ in range(workers):
            started = _start_worker(chunks, claims_r, store, version)
            if started is None:
                break  # no fork or no file for it: the workers started so far, and this process
            children.append(started)
        started_at, done = time.monotonic(), 0
        for index in _claimed(claims_r):
            for key, data in chunks[index]:
                put(key, prepare(data), False)
                done += len(data)
        deadline = time.monotonic() + _patience(time.monotonic() - started_at, done,
                                                max(map(_size, chunks)), total)
        for pid, out in children:
            status = _exit_status(pid, deadline)
            if status is not None:
                ended.add(pid)
            if status == 0:
                for key, entry, stored in _entries(out):
                    if (parsed := decode(entry, key, version)) is not None:
                        put(key, parsed, stored)
    finally:
        os.close(claims_r)
        for pid, out in children:
            out.close()
            if pid not in ended:  # still running: late, or the render failed meanwhile
                with contextlib.suppress(ChildProcessError, ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
        if store is not None and children:
            store.relist()  # workers wrote entries (and a killed one may have left a temporary file)


def _start_worker(chunks: list[list[tuple[str, bytes]]], claims: int, store: ParseStore | None,
                  version: str) -> tuple[int, IO[bytes]] | None:
    """Fork one worker, with the file it hands back through (memory, not a disk: a read-only root
    needs none); None when either cannot be made. Signals are held across the fork, so the child
    runs none of the parent's handlers before its own are reset."""
    try:
        out = _hand_back_file()
    except OSError:
        return None
    held = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        with warnings.catch_warnings():  # Python ≥ 3.12 warns of forking with threads: see above
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
        if pid == 0:  # pragma: no cover - the child's side; it ends in os._exit, whatever happens
            _work(chunks, claims, out, store, version, blocked)
    except OSError:  # EAGAIN: a pids limit, RLIMIT_NPROC
        out.close()
        return None
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
    return pid, out


def _hand_back_file() -> IO[bytes]:
    """An anonymous file in memory (`memfd_create`), or else an unlinked temp file."""
    try:
        return open(os.memfd_create("gitsync-parse"), "w+b")
    except (AttributeError, OSError):
        return tempfile.TemporaryFile()


#: A parse rate no machine is slower than (bytes of YAML per second and CPU, schema check included;
#: about 1 MB/s here): the patience when this process parsed nothing to measure its own.
_SLOWEST_RATE = 50_000


def _patience(own: float, done: int, largest: int, total: int) -> float:
    """How long the render waits for its workers once no chunk is left to claim. Each worker still
    busy is on its last chunk, at most the largest: four times what this process took for that many
    bytes, never less than a second. When this process parsed nothing, the workers may have all of
    it left: four times it at the slowest rate. Never more than `_MAX_PATIENCE`."""
    wait = 4 * largest * own / done if done else 4 * total / _SLOWEST_RATE
    return min(_MAX_PATIENCE, max(1.0, wait))


#: However big the repo, a render does not wait longer for a worker (a sync waits on it).
_MAX_PATIENCE = 300.0


def _exit_status(pid: int, deadline: float) -> int | None:
    """The worker's exit code, once it ended (-1 when it cannot be known: it is not ours to wait
    for any more, e.g. SIGCHLD ignored); None when it is still running at `deadline`."""
    while True:
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return -1
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            return None
        time.sleep(0.002)


def _size(files: Sequence[tuple[str, bytes]]) -> int:
    return sum(len(data) for _, data in files)


def _chunks(files: Sequence[tuple[str, bytes]], count: int) -> list[list[tuple[str, bytes]]]:
    """`files` cut into about `count` runs of at most about equal bytes, the largest first (a file
    bigger than that is a chunk of its own: started first, it does not finish last)."""
    per_chunk = max(1, _size(files) // count)
    chunks: list[list[tuple[str, bytes]]] = [[]]
    size = 0
    for key, data in files:
        if chunks[-1] and size + len(data) > per_chunk:
            chunks.append([])
            size = 0
        chunks[-1].append((key, data))
        size += len(data)
    return sorted(chunks, key=_size, reverse=True)


def _claimed(claims: int) -> Any:
    """The chunk numbers this process claims, one at a time, until none is left."""
    while len(raw := os.read(claims, _CLAIM.size)) == _CLAIM.size:
        yield _CLAIM.unpack(raw)[0]


def _work(chunks: list[list[tuple[str, bytes]]], claims: int, out: IO[bytes], store: ParseStore | None,
          version: str, mask: set[signal.Signals]) -> None:  # pragma: no cover - run in the child
    """A worker: prepare each claimed chunk's files; hand back the plain ones' parse-store entries,
    each written to the store already where there is one (what the render need not write after)."""
    code = 1
    try:
        with contextlib.suppress(ValueError):  # (the forking thread is the child's main thread)
            signal.set_wakeup_fd(-1)  # a signal here must not wake the parent's loop
            for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                signal.signal(number, signal.SIG_DFL)  # nor run the parent's handlers
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        entries = []
        for index in _claimed(claims):
            for key, data in chunks[index]:
                parsed = prepare(data)
                if storable(parsed):
                    entry = encode(key, parsed, version)
                    stored = False
                    if store is not None:
                        with contextlib.suppress(OSError):
                            store.write(key, entry)
                            stored = True
                    entries.append((key, entry, stored))
        marshal.dump(entries, out, MARSHAL_VERSION)
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
