"""An HTTP/1.1 server on one asyncio event loop, speaking the protocol through h11.

Every connection is a coroutine, not a thread: a client that connects and then says nothing costs a
few kilobytes and a file descriptor, never a thread, so stalled clients cannot starve a probe. Work
that may block runs in a `Lane`: a small thread pool that admits a bounded number of requests at
once (running or queued) and answers 503 at once beyond it. What runs on the loop itself must not
block (``/healthz``, webhook checks).

The limits, every one answered with a status and counted, and told in the log at most once every
ten seconds per kind (`gitsync.tally`), never a traceback:

- connections: at most `max_connections` open at once, and at most an address's share of them
  (`address_share`: an eighth, at least `MIN_ADDRESS_SHARE`), so that no one client holds the
  listener. A connection beyond either is given one of `PROBE_RESERVE` places kept for probes
  (`probe_paths`, ``/healthz``): its request must arrive within `PROBE_TIMEOUT`, and anything but a
  probe is answered 503 (so is a connection beyond the reserve, at once). `start` raises the
  process's soft open-files limit towards what the cap needs (up to the hard limit) and lowers the cap
  to fit what it gets;
- a request's line and headers must arrive within `header_timeout` of the connection (of the end of
  the previous answer, on a kept-alive connection), be at most `max_header_bytes` (414 for a request
  line that long, else 431) and hold at most `MAX_HEADERS` header lines (431, counted as the bytes
  arrive, before any is parsed). Deadlines, not silences: a byte now and then does not extend them;
- the event loop's time: what the loop spends on one address's requests (`REQUEST_COST` each, for
  its connection, reading and answer; a large head parsed or a large body checked on the loop, as
  the loop thread's CPU time) is drawn from that address's share (`CPU_SHARE` of the time, up to
  `CPU_BURST` at once); an address past it waits before the loop reads its next request (a probe's
  never does), so that one client sending costly requests, or many, slows itself, not ``/healthz``;
- a route says how large a body it reads (`Route.max_body`); a larger declared length is not read;
  a body must arrive within its own deadline (`body_deadline`: `body_timeout` for the largest body
  any route accepts, proportionally less for a smaller one, never under `MIN_BODY_TIMEOUT`); the
  bodies being read or handled at once hold at most `max_body_bytes`; a body without a
  Content-Length (chunked) is refused;
- an answer must be taken by the client within `body_timeout`, or the connection is dropped.

A connection whose request body was left unread is closed gracefully: the answer sent, the sending
side shut, what the client still sends read and dropped for a moment (`LINGER`), so that its reading
of the answer is not cut by a reset.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import resource
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from email.utils import formatdate
from enum import StrEnum
from http import HTTPStatus
from typing import Any

import h11

from gitsync.log import logger
from gitsync.problems import one_line
from gitsync.tally import Tally

HEADER_TIMEOUT = 10.0  # seconds from the connection (or the last answer) to the end of the headers
BODY_TIMEOUT = 10.0  # seconds for the largest body accepted; the time a client has to take an answer
MIN_BODY_TIMEOUT = 2.0  # seconds at least for any body, however small
MAX_CONNECTIONS = 4096  # open at once; stalled ones cost no thread, only a descriptor and a few KB
MIN_ADDRESS_SHARE = 16  # connections one address may hold at least, whatever the cap
PROBE_RESERVE = 32  # connections beyond the cap, or an address's share, kept for probes
PROBE_RESERVE_PER_ADDRESS = 4  # of those, what one address may hold
PROBE_TIMEOUT = 2.0  # seconds a connection in the probes' reserve has to send its request
FD_RESERVE = 512  # open files kept for the agent's own work (git, gateways, state, parse workers)
MAX_HEADER_BYTES = 32 * 1024
MAX_HEADERS = 100  # header lines in one request, as Apache's LimitRequestFields
CPU_SHARE = 0.05  # of the event loop's time, what one address's requests may take on average
CPU_BURST = 0.1  # seconds of the loop's time one address may take at once
REQUEST_COST = 0.002  # seconds of the loop a request costs beyond its parsing: accept, read, answer, close
MEASURED = 16 * 1024  # bytes of a head or body past which the loop's time on it is measured, not assumed
MAX_BODY_BYTES = 16 * 1024 * 1024  # declared body lengths being read or handled at once
LINGER = 2.0  # seconds an unread body is drained before closing
LINGER_BYTES = 4 * 1024 * 1024
TURN_AWAY_WAIT = 0.5  # seconds a connection beyond the cap is given to deliver what it sent
MAX_LINGERING = 64  # connections turned away that may wait for their request at once
READ_CHUNK = 64 * 1024
#: Connections the kernel holds for the listener before it accepts them (capped by net.core.somaxconn).
#: asyncio would set 100: a burst of connections while the loop is busy (a thousand stalled ones) then
#: overflows the queue, and the kernel drops a probe's handshake until it has room, for seconds.
BACKLOG = 4096
#: Connections accepted in one turn of the event loop: a burst of thousands accepted at once would
#: hold the loop, a probe waiting behind them.
ACCEPT_BATCH = 100
ACCEPT_RETRY = 1.0  # seconds before accepting again after the process ran out of descriptors


class Headers(Mapping[str, str]):
    """A request's headers, looked up by name whatever its case (the first of repeated ones). Values
    are decoded as ISO-8859-1, as http.server does: any byte reads, none is lost."""

    def __init__(self, raw: Iterable[tuple[bytes, bytes]] = ()) -> None:
        self._items = [(name.decode("latin-1").lower(), value.decode("latin-1")) for name, value in raw]
        self._first: dict[str, str] = {}  # each name's first value: a lookup is one step, however many
        for key, value in self._items:
            self._first.setdefault(key, value)

    def __getitem__(self, name: str) -> str:
        return self._first[name.lower()]

    def __iter__(self) -> Iterator[str]:
        return iter(self._first)

    def __len__(self) -> int:
        return len(self._first)

    def get_all(self, name: str) -> list[str]:
        name = name.lower()
        return [value for key, value in self._items if key == name]

    def size(self) -> int:
        """Their bytes as sent, about (each line's name, value, colon, space and line end)."""
        return sum(len(key) + len(value) + 4 for key, value in self._items)


class BodyProblem(StrEnum):
    """Why a request's body was not read whole."""

    NO_LENGTH = "no_length"  # chunked, or any transfer coding: a Content-Length is required
    TOO_LARGE = "too_large"  # its declared length is beyond the route's limit: not read
    TIMEOUT = "timeout"  # it did not arrive within its deadline
    CUT_SHORT = "cut_short"  # the client closed its end before the declared length


@dataclass(frozen=True)
class Request:
    method: str
    target: str
    headers: Headers
    client: str  # the peer's address
    body: bytes = b""
    problem: BodyProblem | None = None
    length: int = 0  # the declared Content-Length
    body_deadline: float = 0.0  # the seconds the body was given

    @property
    def path(self) -> str:
        return self.target.split("?", 1)[0]


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes = b""
    content_type: str = "application/json"
    headers: Sequence[tuple[str, str]] = ()
    close: bool = False  # close the connection after this answer


def json_response(status: int, data: Mapping[str, Any], headers: Sequence[tuple[str, str]] = (),
                  close: bool = False) -> Response:
    return Response(status, json.dumps(data).encode() + b"\n", "application/json", headers, close)


class Lane:
    """A thread pool for handlers that may block, admitting at most `max_in_flight` requests at once
    (running or waiting for a thread). Counted on the event loop's thread only: no lock."""

    def __init__(self, name: str, workers: int, max_in_flight: int) -> None:
        self.name = name
        self.max_in_flight = max_in_flight
        self.in_flight = 0
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=f"listener-{name}")

    def admit(self) -> bool:
        if self.in_flight >= self.max_in_flight:
            return False
        self.in_flight += 1
        return True

    def release(self) -> None:
        self.in_flight -= 1

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)


@dataclass(frozen=True)
class Route:
    """How to answer a request, chosen from its line and headers (on the loop: cheap)."""

    handle: Callable[[Request], Response | None]  # None: no answer (the client is gone)
    lane: Lane | None = None  # None: on the event loop, which it must not block
    max_body: int = 0  # bytes of body read for `handle`; 0: a body is left unread


class LoopShare:
    """Per client address, the event loop's time its requests may take: `share` of the time on average,
    `burst` seconds at once (a token bucket), counted in the loop thread's own CPU time (what a client
    costs, not what the machine's load or another thread adds to it). Addresses with their whole burst
    left are not kept: the table holds only those that spent some lately. Used on the loop's thread
    only: no lock."""

    def __init__(self, share: float = CPU_SHARE, burst: float = CPU_BURST,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.share, self.burst, self._clock = share, burst, clock
        self._spent: dict[str, tuple[float, float]] = {}  # address → (balance, when)

    def _balance(self, client: str) -> float:
        balance, when = self._spent.get(client, (self.burst, 0.0))
        return min(self.burst, balance + (self._clock() - when) * self.share)

    def wait(self, client: str) -> float:
        """Seconds `client` must wait before the loop spends more on it (0: it may now)."""
        balance = self._balance(client)
        if balance >= self.burst:
            self._spent.pop(client, None)
        return 0.0 if balance >= 0 else -balance / self.share

    def charge(self, client: str, seconds: float) -> None:
        self._spent[client] = (self._balance(client) - seconds, self._clock())


def open_files_for(connections: int) -> int:
    """Raise the soft open-files limit towards `connections` + `FD_RESERVE` (never past the hard
    limit, never lowering it); the connections that then fit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = connections + FD_RESERVE
    if soft != resource.RLIM_INFINITY and soft < wanted:
        target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft == resource.RLIM_INFINITY:
        return connections
    return max(1, min(connections, soft - FD_RESERVE, soft // 2))


def listening_socket(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(BACKLOG)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


class HttpServer:
    """The server: `route` chooses a `Route` for each request's line and headers; `probe_paths` are the
    paths (GET or HEAD) served from the probes' reserve."""

    def __init__(self, host: str, port: int, route: Callable[[Request], Route], *,
                 header_timeout: float = HEADER_TIMEOUT, body_timeout: float = BODY_TIMEOUT,
                 largest_body: int = 1024 * 1024, max_connections: int = MAX_CONNECTIONS,
                 max_header_bytes: int = MAX_HEADER_BYTES, max_body_bytes: int = MAX_BODY_BYTES,
                 probe_paths: frozenset[str] = frozenset(), on_refused: Callable[[], None] = lambda: None,
                 on_rejected: Callable[[str], None] = lambda reason: None) -> None:
        self.sock = listening_socket(host, port)  # bound now: an address in use fails the start
        self.route = route
        self.header_timeout = header_timeout
        self.body_timeout = body_timeout
        self.largest_body = largest_body
        self.wanted_connections = max_connections
        self.max_connections = max_connections
        self.max_header_bytes = max_header_bytes
        self.max_body_bytes = max_body_bytes
        self.probe_paths = probe_paths
        self.on_refused = on_refused
        self.open = 0  # connections open now
        self.held: dict[str, int] = {}  # per address, its connections open now (not in the reserve)
        self.reserve: dict[str, int] = {}  # per address, its connections in the probes' reserve
        self.body_bytes = 0  # declared lengths of the bodies being read or handled
        self.loop_share = LoopShare()
        self.refused = self._refusals()
        self.stalled = Tally("listener: {} connection(s) closed without a whole request within "
                             f"{header_timeout:g}s (the last from {{}})")
        self.busy = Tally("listener: {} request(s) answered 503, too many at once (the last from {})")
        self.gone = Tally("listener: {} client(s) went away mid-request (the last from {}: {})", "INFO")
        self.unaccepted = Tally("listener: {} time(s) a connection could not be accepted{} ({}); trying "
                                f"again in {ACCEPT_RETRY:g}s", "ERROR")
        self.malformed = Tally("listener: {} malformed request(s) answered 4xx (the last from {}: {})",
                               counted=lambda: on_rejected("malformed"))
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._started = threading.Event()
        self._thread: threading.Thread | None = None
        self._tasks: set[asyncio.Task[Any]] = set()

    @property
    def address(self) -> tuple[str, int]:
        host, port = self.sock.getsockname()[:2]
        return host, port

    @property
    def address_share(self) -> int:
        """The connections one address may hold: an eighth of the cap, `MIN_ADDRESS_SHARE` at least."""
        return max(MIN_ADDRESS_SHARE, self.max_connections // 8)

    def _refusals(self) -> Tally:
        return Tally("listener: {} connection(s) refused with 503 (the last from {}): "
                     f"{self.max_connections} are served at once at most, {self.address_share} from one "
                     "address; /healthz is answered beyond")

    def body_deadline(self, length: int) -> float:
        """Seconds a body of `length` bytes is given: proportional to its size, `body_timeout` for
        the largest accepted, `MIN_BODY_TIMEOUT` at least (or `body_timeout`, when shorter)."""
        floor = min(self.body_timeout, MIN_BODY_TIMEOUT)
        return max(floor, self.body_timeout * length / max(1, self.largest_body))

    def start(self) -> None:
        self.max_connections = open_files_for(self.wanted_connections)
        self.refused = self._refusals()
        self._thread = threading.Thread(target=self._run, name="listener", daemon=True)
        self._thread.start()
        self._started.wait(10)

    def stop(self) -> None:
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop ended already
                loop.call_soon_threadsafe(stop.set)
        if self._thread is not None:
            self._thread.join(10)
        self.sock.close()

    def _run(self) -> None:
        try:
            asyncio.run(self._serve())
        except Exception as exc:  # the loop itself failed: one record; the agent's probes will notice
            logger.opt(exception=exc).error("listener: the event loop ended: {!r}", exc)
        finally:
            self._started.set()

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop.set_exception_handler(_loop_error)
        self._stop = asyncio.Event()
        self._loop.add_reader(self.sock.fileno(), self._accept)
        self._started.set()
        try:
            await self._stop.wait()
        finally:
            self._loop.remove_reader(self.sock.fileno())
            for task in list(self._tasks):
                task.cancel()


    def _accept(self) -> None:
        """Accept what the kernel holds, `ACCEPT_BATCH` connections a turn at most. A connection beyond
        the cap or its address's share, and beyond the probes' reserve, is turned away here, before a
        transport or a task is made for it: a flood of connections costs the loop little."""
        assert self._loop is not None
        for _ in range(ACCEPT_BATCH):
            try:
                conn, peer = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # out of descriptors, say: the kernel keeps them queued a second
                self.unaccepted.add("", exc.strerror or str(exc))
                self._loop.remove_reader(self.sock.fileno())
                self._loop.call_later(ACCEPT_RETRY, self._loop.add_reader, self.sock.fileno(), self._accept)
                return
            client = str(peer[0]) if isinstance(peer, tuple) else "?"
            conn.setblocking(False)
            probe_only = self.open >= self.max_connections or self.held.get(client, 0) >= self.address_share
            if probe_only and (sum(self.reserve.values()) >= PROBE_RESERVE
                               or self.reserve.get(client, 0) >= PROBE_RESERVE_PER_ADDRESS):
                _TurnedAway(self._loop, conn, self.turned_away(client))
                continue
            counts = self.reserve if probe_only else self.held
            counts[client] = counts.get(client, 0) + 1
            self.open += not probe_only
            task = self._loop.create_task(self._accepted(conn, client, probe_only, counts))
            self._tasks.add(task)  # held: the loop keeps only a weak reference to a task
            task.add_done_callback(self._tasks.discard)

    async def _accepted(self, conn: socket.socket, client: str, probe_only: bool,
                        counts: dict[str, int]) -> None:
        writer = None
        try:
            reader, writer = await asyncio.open_connection(sock=conn, limit=READ_CHUNK)
            await _Connection(self, reader, writer, client, probe_only=probe_only).serve()
        except asyncio.CancelledError:
            pass
        except Exception as exc:  # a bug here must cost one connection and one record, not the listener
            logger.opt(exception=exc).error("listener: request from {} failed: {!r}", client, exc)
        finally:
            self.open -= not probe_only
            counts[client] -= 1
            if not counts[client]:
                del counts[client]
            if writer is not None:
                await _close(writer)
            else:
                conn.close()

    def turned_away(self, client: str) -> bytes:
        """Count a connection refused for want of room: the answer to send it."""
        self.on_refused()
        self.refused.add(client)
        return _raw_answer(503, {"error": "too many connections; retry later"}, [("Retry-After", "1")])


class _TurnedAway:
    """A connection answered 503 and closed, on the loop without a transport or a task: the answer sent,
    the sending side shut, what the client sent read and dropped, then closed as soon as nothing more is
    waiting (closing on unread data would reset the connection, and the 503 with it). One that has sent
    nothing yet is given `TURN_AWAY_WAIT` for its request, unless `MAX_LINGERING` already wait: each
    holds a descriptor, and a flood must not spend them."""

    lingering = 0  # connections waiting for their request, on the loop's thread

    def __init__(self, loop: asyncio.AbstractEventLoop, conn: socket.socket, answer: bytes) -> None:
        self.loop, self.conn = loop, conn
        try:
            conn.send(answer)  # a few hundred bytes: the socket's buffer takes them at once
            conn.shutdown(socket.SHUT_WR)
        except OSError:
            conn.close()
            return
        if self._drained() or _TurnedAway.lingering >= MAX_LINGERING:
            conn.close()
            return
        _TurnedAway.lingering += 1
        loop.add_reader(conn.fileno(), self._readable)
        self.timer = loop.call_later(TURN_AWAY_WAIT, self._close)

    def _drained(self) -> bool:
        """Read what is waiting; True when something was read and nothing more waits, or the client
        closed (safe to close now)."""
        read = False
        while True:
            try:
                data = self.conn.recv(READ_CHUNK)
            except (BlockingIOError, InterruptedError):
                return read
            except OSError:
                return True
            if not data:
                return True
            read = True

    def _readable(self) -> None:
        if self._drained():
            self.timer.cancel()
            self._close()

    def _close(self) -> None:
        _TurnedAway.lingering -= 1
        with contextlib.suppress(OSError, ValueError):
            self.loop.remove_reader(self.conn.fileno())
        self.conn.close()


class _Connection:
    """One client's connection: requests one after another (keep-alive), each within its deadlines. In
    the probes' reserve (`probe_only`): one request, a probe or turned away as soon as its line shows
    it is none."""

    def __init__(self, server: HttpServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 client: str, *, probe_only: bool = False) -> None:
        self.server = server
        self.reader = reader
        self.writer = writer
        self.client = client
        self.probe_only = probe_only
        self.h11 = h11.Connection(h11.SERVER, max_incomplete_event_size=server.max_header_bytes)
        self.loop = asyncio.get_running_loop()
        self.head = _HeadLines()

    async def serve(self) -> None:
        while True:
            timeout = PROBE_TIMEOUT if self.probe_only else self.server.header_timeout
            request = await self._request(self.loop.time() + timeout)
            if request is None:
                return
            response = await self._answer(request)
            if response is None:
                return  # nobody to answer
            if not await self._send(response, request.method):
                return
            logger.trace("http {} {} {} → {}", self.client, request.method,  # -vv: an access log, no query
                         one_line(request.target.split("?", 1)[0]), response.status)
            if self.h11.their_state is not h11.DONE:  # a body left unread: drained, then closed
                await self._linger()
                return
            if self.h11.our_state is not h11.DONE or self.probe_only:
                return
            self.h11.start_next_cycle()

    # -- reading -----------------------------------------------------------------------------------------

    async def _read(self, deadline: float) -> bytes:
        """The next bytes from the client (b"" at its end), or TimeoutError at `deadline`."""
        async with asyncio.timeout_at(deadline):
            return await self.reader.read(READ_CHUNK)

    async def _request(self, deadline: float) -> Request | None:
        """The next request's line and headers; None when there is none to answer (after answering
        a malformed one, or the client gone or too slow). The loop's time it takes is the client's
        (`LoopShare`, and `REQUEST_COST` once it is whole or answered): a client past its share waits
        before it is parsed again, unless its request is a probe."""
        self.head = _HeadLines()
        share = self.server.loop_share
        data = self.h11.trailing_data[0]  # what came with the last request (pipelined)
        while True:
            if data and not await self._took(data):
                share.charge(self.client, REQUEST_COST)
                return None
            wait = share.wait(self.client)
            # Waits once its request line shows what it asks: before, a probe could not be told apart.
            if wait > 0 and self.head.first_line is not None and not self._probe():
                await asyncio.sleep(min(wait, max(0.0, deadline - self.loop.time())))
            # A small head costs the loop less than what REQUEST_COST counts, and reading the
            # thread's CPU clock is a system call: measured only for a large one.
            started = time.thread_time() if self.head.size > MEASURED else None
            try:
                event = self.h11.next_event()
                if isinstance(event, h11.Request):
                    share.charge(self.client, REQUEST_COST)
                    return Request(event.method.decode("ascii", "replace"), event.target.decode("latin-1"),
                                   Headers(event.headers), self.client)
            except h11.RemoteProtocolError as exc:
                share.charge(self.client, REQUEST_COST)
                await self._malformed(exc)
                return None
            finally:
                if started is not None:
                    share.charge(self.client, time.thread_time() - started)
            if isinstance(event, h11.ConnectionClosed):
                return None
            try:
                data = await self._read(deadline)
            except TimeoutError:
                await self._too_slow()
                return None
            except ConnectionError as exc:
                self._gone(exc)
                return None
            if not data and self.h11.trailing_data[0]:
                self.server.gone.add(self.client, "before the end of its headers")
                return None
            self.h11.receive_data(data)

    def _probe(self) -> bool:
        """Whether the request line that arrived asks for a probe (``GET``/``HEAD`` of `probe_paths`)."""
        line = self.head.first_line
        if line is None:
            return False
        parts = line.split()
        return len(parts) >= 2 and parts[0] in (b"GET", b"HEAD") \
            and parts[1].split(b"?", 1)[0].decode("latin-1") in self.server.probe_paths

    async def _took(self, data: bytes) -> bool:
        """Look at what arrived of a request's head before it is parsed: False (the client answered)
        when it holds more than `MAX_HEADERS` lines, or, in the probes' reserve, when its line is no
        probe's."""
        if not self.head.add(data):
            self.server.malformed.add(self.client, f"431: more than {MAX_HEADERS} header lines")
            await self._send_raw(_raw_answer(431, {"error": f"more than {MAX_HEADERS} header lines"}))
            return False
        if self.probe_only and self.head.first_line is not None and not self._probe():
            await self._send_raw(self.server.turned_away(self.client))
            return False
        return True

    async def _malformed(self, exc: h11.RemoteProtocolError) -> None:
        pending = self.h11.trailing_data[0]
        status = exc.error_status_hint
        if status == 431 and b"\n" not in pending:
            status = HTTPStatus.REQUEST_URI_TOO_LONG
        self.server.malformed.add(self.client, f"{int(status)}: {one_line(str(exc))[:200]}")
        await self._send_raw(_raw_answer(status, {"error": HTTPStatus(status).phrase.lower()}))

    async def _too_slow(self) -> None:
        """The header deadline passed: 408 to a client that began a request, silence to an idle one."""
        self.server.stalled.add(self.client)
        if self.h11.trailing_data[0]:
            await self._send_raw(_raw_answer(408, {"error": "the request did not arrive in time"}))

    def _gone(self, exc: BaseException) -> None:
        self.server.gone.add(self.client, type(exc).__name__)

    async def _body(self, request: Request, limit: int) -> Request | None:
        """The request with its body read, or with why not; None when the client is gone."""
        headers = request.headers
        if "transfer-encoding" in headers:
            return replace(request, problem=BodyProblem.NO_LENGTH)
        length = int(headers.get("content-length") or 0)  # h11 checked it: digits only
        request = replace(request, length=length)
        if length > limit:
            return replace(request, problem=BodyProblem.TOO_LARGE)
        seconds = self.server.body_deadline(length)
        request = replace(request, body_deadline=seconds)
        if self.h11.they_are_waiting_for_100_continue:
            self.writer.write(self.h11.send(h11.InformationalResponse(status_code=100, headers=[])))
        deadline = self.loop.time() + seconds
        chunks: list[bytes] = []
        while True:
            try:
                event = self.h11.next_event()
            except h11.RemoteProtocolError:  # closed before the declared length
                return replace(request, body=b"".join(chunks), problem=BodyProblem.CUT_SHORT)
            if isinstance(event, h11.Data):
                chunks.append(bytes(event.data))
                continue
            if isinstance(event, h11.EndOfMessage):
                return replace(request, body=b"".join(chunks))
            try:
                data = await self._read(deadline)
            except TimeoutError:
                return replace(request, body=b"".join(chunks), problem=BodyProblem.TIMEOUT)
            except ConnectionError as exc:
                self._gone(exc)
                return None
            self.h11.receive_data(data)

    # -- answering ---------------------------------------------------------------------------------------

    async def _answer(self, request: Request) -> Response | None:
        too_long = self._head_too_long(request)
        if too_long is not None:
            return too_long
        if not self._has_body(request):
            self.h11.next_event()  # its EndOfMessage: the request is whole
        route = self.server.route(request)
        lane = route.lane
        if lane is not None and not lane.admit():
            return self._busy()
        try:
            return await self._handle(request, route)
        finally:
            if lane is not None:
                lane.release()

    async def _handle(self, request: Request, route: Route) -> Response | None:
        """`route`'s answer, its body read first (within the bytes all bodies may hold at once)."""
        reads = route.max_body > 0 and self._has_body(request)
        declared = int(request.headers.get("content-length") or 0)  # h11 checked it: digits only
        reserved = declared if reads and declared <= route.max_body else 0
        if self.server.body_bytes + reserved > self.server.max_body_bytes:
            return self._busy()
        self.server.body_bytes += reserved
        try:
            if reads:
                read = await self._body(request, route.max_body)
                if read is None:
                    return None
                request = read
            if route.lane is None:  # on the loop: its time is the client's (a large body's, measured)
                started = time.thread_time() if len(request.body) > MEASURED else None
                try:
                    return _handled(route.handle, request)
                finally:
                    if started is not None:
                        self.server.loop_share.charge(self.client, time.thread_time() - started)
            return await self.loop.run_in_executor(route.lane.pool, _handled, route.handle, request)
        finally:
            self.server.body_bytes -= reserved

    def _busy(self) -> Response:
        self.server.busy.add(self.client)
        return json_response(503, {"error": "busy; retry later"}, [("Retry-After", "1")], close=True)

    def _head_too_long(self, request: Request) -> Response | None:
        line = len(request.method) + len(request.target) + 12
        head = line + request.headers.size()
        if line > self.server.max_header_bytes:
            status = HTTPStatus.REQUEST_URI_TOO_LONG
        elif head > self.server.max_header_bytes:
            status = HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE
        else:
            return None
        self.server.malformed.add(self.client, f"{int(status)}: {head} bytes")
        return json_response(status, {"error": status.phrase.lower()}, close=True)

    @staticmethod
    def _has_body(request: Request) -> bool:
        headers = request.headers
        return "transfer-encoding" in headers or (headers.get("content-length") or "0") != "0"

    async def _send(self, response: Response, method: str) -> bool:
        """Send `response`; False when the connection is done for (the client gone or not reading)."""
        headers = [("Content-Type", response.content_type), ("Content-Length", str(len(response.body))),
                   ("Server", "gitsync"), ("Date", formatdate(usegmt=True)), *response.headers]
        if response.close or self.h11.their_state is not h11.DONE:
            headers.append(("Connection", "close"))
        try:
            data = self.h11.send(h11.Response(status_code=response.status, headers=headers,
                                              reason=_phrase(response.status)))
            if response.body and method != "HEAD":
                data += self.h11.send(h11.Data(data=response.body))
            data += self.h11.send(h11.EndOfMessage())
        except h11.LocalProtocolError as exc:  # e.g. a status h11 refuses: the client gets a closed socket
            logger.error("listener: cannot answer {} with {}: {}", self.client, response.status, exc)
            return False
        return await self._write(data)

    async def _send_raw(self, data: bytes) -> None:
        await self._write(data)

    async def _write(self, data: bytes) -> bool:
        self.writer.write(data)
        try:
            async with asyncio.timeout(self.server.body_timeout):  # a client that never reads its answer
                await self.writer.drain()
        except TimeoutError:
            logger.info("listener: {} did not take its answer within {:g}s", self.client,
                        self.server.body_timeout)
            return False
        except ConnectionError as exc:
            self._gone(exc)
            return False
        return True

    async def _linger(self) -> None:
        """Shut our side, then drop what the client still sends (bounded), so that the answer it is
        about to read is not cut by the reset a close on unread data would send."""
        with contextlib.suppress(OSError, RuntimeError):
            if self.writer.can_write_eof():
                self.writer.write_eof()
        drained = 0
        deadline = self.loop.time() + LINGER
        with contextlib.suppress(TimeoutError, ConnectionError):
            while drained < LINGER_BYTES:
                data = await self._read(deadline)
                if not data:
                    break
                drained += len(data)


_BLANK_LINE = re.compile(rb"\n\r?\n")  # the end of a request's head, as h11 finds it


class _HeadLines:
    """The lines of one request's head, counted as its bytes arrive, up to the blank line that ends it
    (what follows is its body); the request line, once it is whole."""

    def __init__(self) -> None:
        self.lines = 0
        self.size = 0  # bytes seen
        self.ended = False
        self.first_line: bytes | None = None
        self._start = b""  # the bytes before the first line's end
        self._tail = b""  # the last bytes seen, for a blank line cut in two

    def add(self, data: bytes) -> bool:
        """Count `data`; False once the head holds more lines than `MAX_HEADERS` (and its request line)."""
        if self.ended:
            return True
        self.size += len(data)
        if self.first_line is None:
            self._start += data[:1024]
            if b"\n" in self._start or len(self._start) >= 1024:
                self.first_line = self._start.split(b"\n", 1)[0]
        scan = self._tail + data
        end = _BLANK_LINE.search(scan)
        upto = len(data) if end is None else max(0, end.end() - len(self._tail))
        self.lines += data.count(b"\n", 0, upto)
        self.ended = end is not None
        self._tail = scan[-2:]
        return self.lines <= MAX_HEADERS + 2  # the request line's end, each header's, the blank line


async def _close(writer: asyncio.StreamWriter) -> None:
    """Close after what was written is sent; a client that does not take it is cut off."""
    writer.close()
    try:
        async with asyncio.timeout(LINGER):
            await writer.wait_closed()
    except (TimeoutError, ConnectionError, asyncio.CancelledError):
        writer.transport.abort()


def _handled(handle: Callable[[Request], Response | None], request: Request) -> Response | None:
    """The handler's answer; a bug in it is one record and a 500, not a traceback on stderr."""
    try:
        return handle(request)
    except Exception as exc:
        logger.opt(exception=exc).error("listener: request from {} failed: {!r}", request.client, exc)
        return json_response(500, {"error": "internal error; the agent's log says why"}, close=True)


def _phrase(status: int) -> bytes:
    try:
        return HTTPStatus(status).phrase.encode()
    except ValueError:
        return b""


def _raw_answer(status: int, data: Mapping[str, Any], headers: Sequence[tuple[str, str]] = ()) -> bytes:
    """An answer written without h11 (for a connection h11 has given up on): always closing."""
    body = json.dumps(data).encode() + b"\n"
    lines = [b"HTTP/1.1 %d %s" % (status, _phrase(status)), b"Content-Type: application/json",
             b"Content-Length: %d" % len(body), b"Server: gitsync", b"Connection: close",
             *(f"{name}: {value}".encode() for name, value in headers)]
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


def _loop_error(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """What asyncio would print to stderr: one record instead."""
    error = context.get("exception")
    if isinstance(error, ConnectionError | TimeoutError):
        return
    logger.warning("listener: {}{}", context.get("message") or "event loop error",
                   f": {error!r}" if error is not None else "")


__all__ = ["BODY_TIMEOUT", "HEADER_TIMEOUT", "MAX_CONNECTIONS", "BodyProblem", "Headers", "HttpServer",
           "Lane", "Request", "Response", "Route", "json_response"]
