"""The listener's limits (gitsync.daemon.httpserver): each one alone, exactly at it and one past, over
real connections on 127.0.0.1 with a route that says what it was given."""

from __future__ import annotations

import json
import os
import re
import resource
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest

from gitsync.daemon import httpserver
from gitsync.daemon.httpserver import (
    BodyProblem,
    Headers,
    HttpServer,
    Lane,
    LoopShare,
    Request,
    Response,
    Route,
    _HeadLines,
    _TurnedAway,
    json_response,
    open_files_for,
)
from testkit.logs import captured_log
from testkit.processes import gitsync_env, wait_for


@pytest.fixture
def log():
    with captured_log() as out:
        yield out



def said(request: Request) -> dict:
    """What a route's handler was given."""
    return {"problem": request.problem, "length": request.length, "body": request.body.decode("latin-1"),
            "deadline": request.body_deadline, "path": request.path}


@pytest.fixture
def make_server() -> Iterator:
    servers: list[HttpServer] = []

    def make(route=None, **limits) -> HttpServer:
        route = route or (lambda request: Route(lambda r: json_response(200, said(r)), None, 100))
        server = HttpServer("127.0.0.1", 0, route, **limits)
        server.start()
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.stop()


def send(server: HttpServer, data: bytes, timeout: float = 10) -> tuple[int, dict]:
    """One exchange on a new connection: `data` sent, the answer read to its end (status, JSON body)."""
    with socket.create_connection(server.address, timeout=timeout) as sock:
        sock.sendall(data)
        return read_answer(sock)


def read_answer(sock: socket.socket) -> tuple[int, dict]:
    received = b""
    while b"\r\n\r\n" not in received:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed after {received!r}")
        received += chunk
    head, body = received.split(b"\r\n\r\n", 1)
    length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length:"))
    while len(body) < length:
        body += sock.recv(65536)
    return int(head.split()[1]), json.loads(body) if body else {}


def get(target: str = "/", headers: bytes = b"") -> bytes:
    return b"GET " + target.encode() + b" HTTP/1.1\r\nHost: h\r\n" + headers + b"\r\n"


def post(body: bytes, target: str = "/", headers: bytes = b"") -> bytes:
    length = b"Content-Length: %d\r\n" % len(body)
    return b"POST " + target.encode() + b" HTTP/1.1\r\nHost: h\r\n" + length + headers + b"\r\n" + body


# ---------------------------------------------------------------------------------------------------------
# Pieces


def test_headers_size_is_each_lines_name_value_colon_space_and_end():
    assert Headers().size() == 0
    assert Headers([(b"Host", b"h")]).size() == len("host: h\r\n")
    two = Headers([(b"Host", b"h"), (b"X-Long", b"v" * 10)])
    assert two.size() == len("host: h\r\n") + len("x-long: ") + 12


def test_a_lane_admits_up_to_its_limit_and_again_once_one_is_released():
    lane = Lane("test", workers=1, max_in_flight=2)
    try:
        assert lane.admit() and lane.admit()
        assert not lane.admit() and lane.in_flight == 2
        lane.release()
        assert lane.in_flight == 1 and lane.admit() and not lane.admit()
    finally:
        lane.close()


@pytest.mark.parametrize(("body_timeout", "largest", "length", "seconds"), [
    (10.0, 1000, 1000, 10.0),  # the largest body: the whole deadline
    (10.0, 1000, 500, 5.0),  # proportional
    (10.0, 1000, 300, 3.0),
    (10.0, 1000, 100, 2.0),  # never under the floor
    (10.0, 1000, 0, 2.0),
    (1.0, 1000, 0, 1.0),  # a deadline shorter than the floor is the floor
    (1.0, 1000, 1000, 1.0),
    (10.0, 0, 1, 10.0),  # no body accepted: as if one byte were the largest
])
def test_a_body_deadline_grows_with_its_length_from_a_floor(body_timeout, largest, length, seconds):
    server = HttpServer("127.0.0.1", 0, lambda r: Route(lambda r: None), body_timeout=body_timeout,
                        largest_body=largest)
    try:
        assert server.body_deadline(length) == pytest.approx(seconds)
    finally:
        server.sock.close()


@pytest.fixture
def soft_limit() -> Iterator:
    """Sets this process's soft open-files limit for a test; the one it had is put back."""
    before = resource.getrlimit(resource.RLIMIT_NOFILE)

    def set_soft(soft: int) -> int:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, before[1]))
        return before[1]

    yield set_soft
    resource.setrlimit(resource.RLIMIT_NOFILE, before)


def test_open_files_are_raised_towards_the_cap_plus_a_reserve(soft_limit):
    hard = soft_limit(600)
    assert hard >= 5000, "the test needs a hard open-files limit of at least 5000"
    assert open_files_for(4096) == 2304  # soft raised to 4096 + 512: half of it at most
    assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] == 4608
    soft_limit(100)
    assert open_files_for(10) == 10 and resource.getrlimit(resource.RLIMIT_NOFILE)[0] == 522
    soft_limit(5000)
    assert open_files_for(100) == 100
    assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] == 5000  # never lowered
    soft_limit(1024)
    assert open_files_for(512) == 512  # soft 1024 is exactly 512 + 512: nothing to raise


def test_open_files_stop_at_the_hard_limit_and_the_cap_comes_down_to_fit(soft_limit):
    """In a process whose hard limit is low (set there: this one's is left alone)."""
    soft_limit(600)
    assert open_files_for(1) == 1  # here too: a mutation run counts only the calls made in its own process
    code = ("import resource, sys; from gitsync.daemon.httpserver import open_files_for as f\n"
            "resource.setrlimit(resource.RLIMIT_NOFILE, (600, 1500))\n"
            "print(f(4096), resource.getrlimit(resource.RLIMIT_NOFILE)[0], end=' ')\n"
            "resource.setrlimit(resource.RLIMIT_NOFILE, (300, 300))\n"
            "print(f(4096))\n")
    done = subprocess.run([sys.executable, "-c", code], env=gitsync_env(), capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    # hard 1500: soft raised to it, half of it for connections; hard 300: one connection still
    assert done.stdout.split() == ["750", "1500", "1"]


# ---------------------------------------------------------------------------------------------------------
# Over connections


def test_a_request_line_longer_than_the_head_limit_is_414_and_at_it_is_served(make_server):
    server = make_server(max_header_bytes=300)
    fits = "/" + "a" * (300 - len("GET") - 12 - 1)  # method + target + 12 is the line's count
    assert send(server, b"GET " + fits.encode() + b" HTTP/1.1\r\nHost: h\r\n\r\n")[0] == 431  # with a header
    assert send(server, b"GET " + fits.encode() + b"a HTTP/1.1\r\nHost: h\r\n\r\n") == \
        (414, {"error": "request-uri too long"})
    fits = fits[:-len("host: h\r\n")]
    assert send(server, b"GET " + fits.encode() + b" HTTP/1.1\r\nHost: h\r\n\r\n")[0] == 200


def test_headers_beyond_the_head_limit_are_431_and_at_it_are_served(make_server):
    server = make_server(max_header_bytes=300)
    line = len("GET") + len("/") + 12
    room = 300 - line - len("host: h\r\n") - len("x: \r\n")
    assert send(server, b"GET / HTTP/1.1\r\nHost: h\r\nx: " + b"v" * room + b"\r\n\r\n")[0] == 200
    assert send(server, b"GET / HTTP/1.1\r\nHost: h\r\nx: " + b"v" * (room + 1) + b"\r\n\r\n") == \
        (431, {"error": "request header fields too large"})


def test_a_body_is_read_up_to_the_routes_limit_and_a_longer_one_is_not_read(make_server):
    server = make_server()  # the route reads 100 bytes at most
    status, got = send(server, post(b"x" * 100))
    assert status == 200 and got["problem"] is None and got["body"] == "x" * 100 and got["length"] == 100
    status, got = send(server, post(b"x" * 101))
    assert status == 200 and got["problem"] == BodyProblem.TOO_LARGE and got["body"] == ""
    assert got["length"] == 101


def test_a_body_gets_its_own_deadline(make_server):
    server = make_server(body_timeout=4.0, largest_body=100)
    assert send(server, post(b"x" * 100))[1]["deadline"] == pytest.approx(4.0)
    assert send(server, post(b"x" * 10))[1]["deadline"] == pytest.approx(2.0)


def test_a_route_that_reads_no_body_leaves_it_unread(make_server):
    server = make_server(lambda request: Route(lambda r: json_response(200, said(r))))
    status, got = send(server, post(b"x" * 10))
    assert status == 200 and got["body"] == "" and got["problem"] is None


def test_a_chunked_body_is_refused_it_needs_a_length(make_server):
    server = make_server()
    data = b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"
    status, got = send(server, data)
    assert status == 200 and got["problem"] == BodyProblem.NO_LENGTH and got["body"] == ""


def test_a_body_cut_short_is_said_so(make_server):
    server = make_server()
    with socket.create_connection(server.address, timeout=10) as sock:
        sock.sendall(b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 50\r\n\r\n" + b"x" * 10)
        sock.shutdown(socket.SHUT_WR)
        status, got = read_answer(sock)
    assert status == 200 and got["problem"] == BodyProblem.CUT_SHORT and got["body"] == "x" * 10


def test_a_body_not_there_by_its_deadline_is_a_timeout(make_server):
    server = make_server(body_timeout=0.2, largest_body=100)
    with socket.create_connection(server.address, timeout=10) as sock:
        sock.sendall(b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 50\r\n\r\n" + b"x" * 10)
        status, got = read_answer(sock)
    assert status == 200 and got["problem"] == BodyProblem.TIMEOUT and got["body"] == "x" * 10
    assert got["deadline"] == pytest.approx(0.2)


def test_a_client_that_waits_for_100_continue_gets_it(make_server):
    server = make_server()
    with socket.create_connection(server.address, timeout=10) as sock:
        sock.sendall(b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n")
        interim = sock.recv(100)
        assert interim.startswith(b"HTTP/1.1 100 ")
        sock.sendall(b"hello")
        status, got = read_answer(sock)
    assert status == 200 and got["body"] == "hello"


def test_bodies_in_flight_hold_at_most_max_body_bytes(make_server):
    """Each request's declared length is reserved while it is read and handled: beyond the total, 503."""
    server = make_server(lambda request: Route(lambda r: json_response(200, said(r)), None, 1000),
                         max_body_bytes=100)
    assert send(server, post(b"x" * 100))[0] == 200  # exactly the total
    status, got = send(server, post(b"x" * 101))
    assert (status, got) == (503, {"error": "busy; retry later"})
    assert server.body_bytes == 0  # released after each


def test_a_body_reserves_its_length_until_it_is_handled(make_server):
    held = []

    def route(request: Request) -> Route:
        def handle(r: Request):
            held.append(server.body_bytes)
            return json_response(200, said(r))
        return Route(handle, None, 60)

    server = make_server(route, max_body_bytes=100)
    assert send(server, post(b"x" * 60))[0] == 200
    assert send(server, post(b"x" * 70))[0] == 200  # beyond the route's limit: not read, nothing reserved
    assert send(server, get())[0] == 200
    assert held == [60, 0, 0] and server.body_bytes == 0


def test_a_full_lane_answers_503_and_frees_its_place_after_each_request(make_server):
    lane = Lane("test", workers=1, max_in_flight=1)
    server = make_server(lambda request: Route(lambda r: json_response(200, said(r)), lane, 100))
    try:
        for _ in range(3):  # one at a time: each is admitted, its place given back
            assert send(server, post(b"abc"))[0] == 200
        assert lane.in_flight == 0
        lane.in_flight = 1  # one in flight: the next is turned away
        assert send(server, get()) == (503, {"error": "busy; retry later"})
        assert lane.in_flight == 1
    finally:
        lane.close()


def test_beyond_max_connections_a_connection_gets_503_and_a_closed_one_frees_its_place(make_server):
    server = make_server(max_connections=1)
    with socket.create_connection(server.address, timeout=10) as first:
        first.sendall(get())
        assert read_answer(first)[0] == 200  # open, kept alive
        wait_for(lambda: server.open == 1, 5, "the first connection counted")
        assert send(server, get()) == (503, {"error": "too many connections; retry later"})
    wait_for(lambda: server.open == 0, 5, "the first connection closed")
    assert send(server, get())[0] == 200


# ---------------------------------------------------------------------------------------------------------
# What each refusal says, and what is left behind


def closed_after_answer(sock: socket.socket) -> bool:
    """Whether the server closes the connection once its answer is read."""
    sock.settimeout(5)
    try:
        return sock.recv(1) == b""
    except TimeoutError:
        return False


def test_a_head_too_long_is_one_record_naming_the_client_and_the_connection_is_closed(make_server, log):
    server = make_server(max_header_bytes=300)
    with socket.create_connection(server.address, timeout=10) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: h\r\nx: " + b"v" * 300 + b"\r\n\r\n")
        assert read_answer(sock)[0] == 431
        assert closed_after_answer(sock)
    # refusals are logged as a count with the last one's client and reason (a flood is a few lines)
    assert log.getvalue().count("\n") == 1, log.getvalue()
    assert "listener: 1 malformed request(s) answered 4xx (the last from 127.0.0.1: 431: 330 bytes)" \
        in log.getvalue()


def test_an_answer_with_connection_close_closes_it(make_server):
    server = make_server()
    with socket.create_connection(server.address, timeout=10) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n")
        assert read_answer(sock)[0] == 200
        assert closed_after_answer(sock)


def test_a_body_in_pieces_is_read_whole(make_server):
    server = make_server()
    with socket.create_connection(server.address, timeout=10) as sock:
        sock.sendall(b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 10\r\n\r\nhello")
        time.sleep(0.05)
        sock.sendall(b"world")
        status, got = read_answer(sock)
    assert status == 200 and got["body"] == "helloworld" and got["problem"] is None


@pytest.mark.parametrize("problem", [BodyProblem.CUT_SHORT, BodyProblem.TIMEOUT])
def test_a_body_in_pieces_that_does_not_end_keeps_what_came(make_server, problem):
    server = make_server(body_timeout=0.5, largest_body=100)
    with socket.create_connection(server.address, timeout=10) as sock:
        sock.sendall(b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 50\r\n\r\nhello")
        time.sleep(0.05)
        sock.sendall(b"world")
        if problem is BodyProblem.CUT_SHORT:
            time.sleep(0.05)
            sock.shutdown(socket.SHUT_WR)
        status, got = read_answer(sock)
    assert status == 200 and got["body"] == "helloworld" and got["problem"] == problem


def test_a_client_gone_mid_body_is_one_record(make_server, log):
    server = make_server(body_timeout=5.0, largest_body=100)
    sock = socket.create_connection(server.address, timeout=10)
    sock.sendall(b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 50\r\n\r\nhello")
    time.sleep(0.05)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # a reset, not a close
    sock.close()
    wait_for(lambda: "went away" in log.getvalue(), 5, "the record of the client gone")
    assert "listener: 1 client(s) went away mid-request (the last from 127.0.0.1: ConnectionResetError)" \
        in log.getvalue()


def test_the_route_is_chosen_from_the_request(make_server):
    def route(request: Request) -> Route:
        return Route(lambda r: json_response(200, said(r)), None, 1 if request.path == "/one" else 0)

    server = make_server(route)
    assert send(server, post(b"x", "/one"))[1]["body"] == "x"  # a route of one byte reads one byte
    assert send(server, post(b"x", "/none"))[1]["body"] == ""


def test_a_lane_runs_its_handlers_on_its_own_threads_and_a_failing_one_is_a_500(make_server, log):
    lane = Lane("test", workers=1, max_in_flight=4)
    threads = []

    def handle(request: Request):
        threads.append(threading.current_thread().name)
        if request.path == "/fail":
            raise RuntimeError("boom")
        return json_response(200, said(request))

    server = make_server(lambda request: Route(handle, lane, 100))
    try:
        assert send(server, get())[0] == 200
        assert send(server, get("/fail")) == (500, {"error": "internal error; the agent's log says why"})
        assert all(name.startswith("listener-test") for name in threads) and len(threads) == 2
        assert "listener: request from 127.0.0.1 failed: RuntimeError('boom')" in log.getvalue()
    finally:
        lane.close()


def test_a_route_that_fails_costs_its_connection_and_one_record(make_server, log):
    def route(request: Request) -> Route:
        if request.path == "/bug":
            raise RuntimeError("a bug")
        return Route(lambda r: json_response(200, said(r)))

    server = make_server(route)
    with socket.create_connection(server.address, timeout=10) as sock:
        sock.sendall(get("/bug"))
        assert sock.recv(100) == b""  # closed, no answer
    wait_for(lambda: server.open == 0, 5, "the connection closed")
    assert "listener: request from 127.0.0.1 failed: RuntimeError('a bug')" in log.getvalue()
    assert send(server, get())[0] == 200  # the listener goes on


def test_bodies_in_flight_add_up(make_server):
    """Three requests at once on a lane: 60 and 10 bytes held, 30 more would be 100 > 80: refused."""
    lane = Lane("test", workers=3, max_in_flight=3)
    release = threading.Event()
    entered = []

    def handle(request: Request):
        entered.append(request.length)
        release.wait(10)
        return json_response(200, said(request))

    server = make_server(lambda request: Route(handle, lane, 100), max_body_bytes=80)
    answers: list = []
    try:
        first = threading.Thread(target=lambda: answers.append(send(server, post(b"x" * 60))[0]))
        first.start()
        wait_for(lambda: entered == [60], 5, "the first body held")
        second = threading.Thread(target=lambda: answers.append(send(server, post(b"y" * 10))[0]))
        second.start()
        wait_for(lambda: entered == [60, 10], 5, "the second body held")
        assert server.body_bytes == 70
        assert send(server, post(b"z" * 30))[0] == 503
    finally:
        release.set()
        lane.close()
    first.join(10)
    second.join(10)
    assert answers == [200, 200] and server.body_bytes == 0


def test_two_connections_count_as_two(make_server, log):
    server = make_server(max_connections=2)
    with socket.create_connection(server.address, timeout=10) as one, \
            socket.create_connection(server.address, timeout=10) as two:
        for sock in (one, two):
            sock.sendall(get())
            assert read_answer(sock)[0] == 200
        wait_for(lambda: server.open == 2, 5, "two connections counted")
        assert send(server, get()) == (503, {"error": "too many connections; retry later"})
    assert "listener: 1 connection(s) refused with 503 (the last from 127.0.0.1): 2 are served at once at " \
           "most" in log.getvalue()


def test_the_listeners_own_limits():
    """What a listener holds to unless told otherwise (docs/operations.md names them)."""
    server = HttpServer("127.0.0.1", 0, lambda request: Route(lambda r: None))
    try:
        assert (server.header_timeout, server.body_timeout) == (10.0, 10.0)
        assert (server.wanted_connections, server.max_header_bytes, server.max_body_bytes) == \
            (4096, 32 * 1024, 16 * 1024 * 1024)
        assert server.body_deadline(0) == 2.0
    finally:
        server.sock.close()


# ---------------------------------------------------------------------------------------------------------
# Who holds the connections: the cap, an address's share, the probes' reserve


def connect_from(server: HttpServer, address: str, data: bytes = b"") -> socket.socket:
    """A connection from `address` (any of 127.0.0.0/8 is this machine), `data` sent on it."""
    sock = socket.create_connection(server.address, timeout=10, source_address=(address, 0))
    if data:
        sock.sendall(data)
    return sock


def turned_away_at_once(sock: socket.socket) -> bool:
    """Whether the connection was answered 503 without sending anything (not held, not in the reserve)."""
    status, data = read_answer(sock)
    return status == 503 and data == {"error": "too many connections; retry later"}


@pytest.mark.parametrize(("cap", "share"), [
    (4096, 512),  # an eighth of the default cap
    (136, 17),  # an eighth, exactly
    (135, 16),  # 16.875: whole connections
    (128, 16),  # an eighth, exactly the floor
    (64, 16),  # under the floor: the floor
    (1, 16),
])
def test_an_address_holds_an_eighth_of_the_cap_and_16_at_least(cap, share):
    server = HttpServer("127.0.0.1", 0, lambda r: Route(lambda r: None), max_connections=cap)
    try:
        assert server.address_share == share
    finally:
        server.sock.close()


@pytest.fixture
def probes(make_server) -> Iterator:
    """A server whose route answers ``/healthz`` (the probe path) and everything else alike."""
    def make(**limits) -> HttpServer:
        return make_server(probe_paths=frozenset({"/healthz"}), header_timeout=30.0, **limits)

    return make


def test_an_address_past_its_share_goes_to_the_reserve_and_another_is_still_held(probes):
    server = probes(max_connections=64)  # a share of 16
    socks = [connect_from(server, "127.0.0.2") for _ in range(16)]
    try:
        wait_for(lambda: server.held == {"127.0.0.2": 16} and server.open == 16, 5, "16 held")
        socks.append(connect_from(server, "127.0.0.2"))  # its 17th: beyond its share, into the reserve
        wait_for(lambda: server.reserve == {"127.0.0.2": 1}, 5, "the 17th in the reserve")
        socks.append(connect_from(server, "127.0.0.3"))  # another address: held
        wait_for(lambda: server.held == {"127.0.0.2": 16, "127.0.0.3": 1}, 5, "the other held")
        assert server.open == 17 and server.reserve == {"127.0.0.2": 1}
        socks[16].sendall(get("/healthz"))  # the reserve's connection: one probe answered, then closed
        assert read_answer(socks[16])[0] == 200 and closed_after_answer(socks[16])
        wait_for(lambda: server.reserve == {}, 5, "its place in the reserve freed")
        assert server.open == 17
    finally:
        for sock in socks:
            sock.close()
    wait_for(lambda: server.held == {} and server.open == 0, 5, "every place freed")


def test_beyond_the_cap_a_connection_goes_to_the_reserve_whatever_its_address(probes):
    server = probes(max_connections=2)
    socks = [connect_from(server, "127.0.0.2"), connect_from(server, "127.0.0.3")]
    try:
        wait_for(lambda: server.open == 2, 5, "the cap reached")
        socks.append(connect_from(server, "127.0.0.4"))  # its first: held by nobody, but the cap is full
        wait_for(lambda: server.reserve == {"127.0.0.4": 1}, 5, "in the reserve")
        assert server.held == {"127.0.0.2": 1, "127.0.0.3": 1} and server.open == 2
        socks[2].sendall(get("/"))  # in the reserve, anything but a probe is turned away
        assert turned_away_at_once(socks[2])
        socks[0].close()  # a place freed: the next connection is held again
        wait_for(lambda: server.open == 1 and server.reserve == {}, 5, "a place freed")
        socks.append(connect_from(server, "127.0.0.4"))
        wait_for(lambda: server.held.get("127.0.0.4") == 1, 5, "held again")
        assert server.reserve == {}
    finally:
        for sock in socks:
            sock.close()


def test_an_address_holds_4_places_of_the_reserve_and_a_5th_is_turned_away(probes, log):
    server = probes(max_connections=1)
    held = connect_from(server, "127.0.0.2")
    try:
        wait_for(lambda: server.open == 1, 5, "the cap reached")
        reserved = [connect_from(server, "127.0.0.3") for _ in range(4)]
        wait_for(lambda: server.reserve == {"127.0.0.3": 4}, 5, "four in the reserve")
        with connect_from(server, "127.0.0.3") as fifth:  # left open, silent: it holds up nothing
            assert turned_away_at_once(fifth)
            other = connect_from(server, "127.0.0.4")  # another address still has room
            wait_for(lambda: server.reserve == {"127.0.0.3": 4, "127.0.0.4": 1}, 5, "another in the reserve")
            for sock in [*reserved, other]:
                sock.sendall(get("/healthz"))
                assert read_answer(sock)[0] == 200
                sock.close()
    finally:
        held.close()
    assert "listener: 1 connection(s) refused with 503 (the last from 127.0.0.3)" in log.getvalue()
    assert len(log.getvalue().splitlines()) == 1  # and no error of the event loop


def test_out_of_descriptors_the_listener_stops_accepting_for_a_second_and_then_serves(make_server, log,
                                                                                      soft_limit):
    server = make_server()
    hard = soft_limit(resource.getrlimit(resource.RLIMIT_NOFILE)[0])
    client = socket.socket()  # made before the limit: connecting takes no descriptor
    client.settimeout(10)
    lowest = os.dup(0)  # the lowest free descriptor: the next one the listener would get
    os.close(lowest)
    resource.setrlimit(resource.RLIMIT_NOFILE, (lowest, hard))
    try:
        client.connect(server.address)
        wait_for(lambda: "could not be accepted" in log.getvalue(), 5, "the failed accept told")
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (lowest + 4096, hard))
    with client:
        client.sendall(get("/"))  # accepted once the listener tries again
        assert read_answer(client)[0] == 200
    assert "listener: 1 time(s) a connection could not be accepted (Too many open files); trying again in " \
           "1s" in log.getvalue()
    assert len(log.getvalue().splitlines()) == 1  # that record alone: no error of the event loop


def test_the_reserve_holds_32_connections_and_the_33rd_is_turned_away(probes):
    server = probes(max_connections=1)
    socks = [connect_from(server, "127.0.0.2")]
    try:
        wait_for(lambda: server.open == 1, 5, "the cap reached")
        socks += [connect_from(server, f"127.0.0.{n}") for n in range(3, 11) for _ in range(4)]
        wait_for(lambda: sum(server.reserve.values()) == 32, 5, "32 in the reserve")
        assert len(server.reserve) == 8 and server.open == 1
        with connect_from(server, "127.0.0.11") as beyond:  # its first: the reserve is full
            assert turned_away_at_once(beyond)
        socks[1].sendall(get("/healthz"))
        assert read_answer(socks[1])[0] == 200
        wait_for(lambda: sum(server.reserve.values()) == 31, 5, "a place in the reserve freed")
        socks.append(connect_from(server, "127.0.0.11"))
        wait_for(lambda: server.reserve.get("127.0.0.11") == 1, 5, "the freed place taken")
    finally:
        for sock in socks:
            sock.close()


@pytest.mark.parametrize(("request_line", "answer"), [
    (b"GET /healthz HTTP/1.1", 200),
    (b"HEAD /healthz HTTP/1.1", 200),
    (b"GET /healthz?verbose=1 HTTP/1.1", 200),  # the path alone, without its query
    (b"GET /healthz?a=1?b=2 HTTP/1.1", 200),  # cut at the first '?'
    (b"GET /healthz", 400),  # a probe's path: parsed, and found malformed (no HTTP version)
    (b"POST /healthz HTTP/1.1", 503),
    (b"GET /healthzz HTTP/1.1", 503),
    (b"GET /health HTTP/1.1", 503),
    (b"GET / HTTP/1.1", 503),
    (b"GET", 503),  # a line that names no path
])
def test_in_the_reserve_only_a_probe_is_answered(probes, request_line, answer):
    server = probes(max_connections=1)
    with connect_from(server, "127.0.0.2") as held:
        wait_for(lambda: server.open == 1, 5, "the cap reached")
        with connect_from(server, "127.0.0.3") as sock:
            wait_for(lambda: server.reserve == {"127.0.0.3": 1}, 5, "in the reserve")
            sock.sendall(request_line + b"\r\nHost: h\r\n\r\n")
            if request_line.startswith(b"HEAD"):  # an answer without its body
                assert sock.recv(65536).startswith(b"HTTP/1.1 200 ")
            elif answer == 200:
                status, data = read_answer(sock)
                assert status == 200 and data["path"] == "/healthz"
            elif answer == 503:
                assert turned_away_at_once(sock)
            else:
                assert read_answer(sock)[0] == answer
        held.sendall(get("/healthz"))  # a held connection is served whatever it asks
        assert read_answer(held)[0] == 200


def test_a_held_connection_serves_any_path_and_is_kept_alive(probes):
    server = probes(max_connections=2)
    with connect_from(server, "127.0.0.2") as sock:
        for path in ("/", "/healthz", "/other"):
            sock.sendall(get(path))
            status, data = read_answer(sock)
            assert status == 200 and data["path"] == path


# ---------------------------------------------------------------------------------------------------------
# The head's lines, counted as they arrive


def head(headers: int) -> bytes:
    return b"GET / HTTP/1.1\r\n" + b"".join(b"X-%d: v\r\n" % n for n in range(headers)) + b"\r\n"


@pytest.mark.parametrize(("headers", "fits"), [(0, True), (99, True), (100, True), (101, False),
                                               (300, False)])
def test_a_head_holds_100_header_lines_at_most(headers, fits):
    lines = _HeadLines()
    assert lines.add(head(headers)) is fits
    assert lines.first_line == b"GET / HTTP/1.1\r" and lines.size == len(head(headers))


def test_header_lines_are_counted_whatever_pieces_they_come_in():
    for cut in (1, 2, 7, 15, 16, 17):
        lines = _HeadLines()
        data = head(101)
        pieces = [data[at:at + cut] for at in range(0, len(data), cut)]
        assert [lines.add(piece) for piece in pieces][-1] is False, cut
        lines = _HeadLines()
        data = head(100)
        assert all(lines.add(data[at:at + cut]) for at in range(0, len(data), cut)), cut
        assert lines.ended and lines.lines == 102 and lines.size == len(data)  # every piece's bytes


@pytest.mark.parametrize("end", [b"\r\n\r\n", b"\n\n", b"\r\n\n", b"\n\r\n"])
def test_a_head_ends_at_its_blank_line_and_what_follows_is_not_counted(end):
    lines = _HeadLines()
    data = b"POST / HTTP/1.1\r\nA: 1" + end + b"\n" * 500  # a body of newlines
    assert lines.add(data) and lines.ended and lines.lines == 3
    assert lines.add(b"\n" * 500) and lines.lines == 3  # later pieces of the body neither
    split = _HeadLines()  # the blank line cut between two pieces
    assert split.add(b"POST / HTTP/1.1\r\nA: 1\r\n\r") and not split.ended
    assert split.add(b"\n" + b"\n" * 500) and split.ended and split.lines == 3


def test_the_request_line_is_known_at_its_end_or_at_1024_bytes():
    lines = _HeadLines()
    lines.add(b"GET /a")
    assert lines.first_line is None
    lines.add(b"bc HTTP/1.1\nHost: h\n")
    assert lines.first_line == b"GET /abc HTTP/1.1"
    long = _HeadLines()
    long.add(b"GET /" + b"a" * 1018)
    assert long.first_line is None  # 1,023 bytes without its end
    long.add(b"a" * 5000)
    # known now, though it has not ended: what came of it (1,024 bytes of a piece at most)
    assert long.first_line == b"GET /" + b"a" * (1018 + 1024)
    exact = _HeadLines()
    exact.add(b"GET /" + b"a" * 1019)  # 1,024 bytes without its end: known
    assert exact.first_line == b"GET /" + b"a" * 1019


# ---------------------------------------------------------------------------------------------------------
# The loop's time per address


def test_an_address_may_spend_its_burst_exactly_and_then_waits_its_share():
    now = [0.0]
    share = LoopShare(share=0.1, burst=0.25, clock=lambda: now[0])
    share.charge("a", 0.25)  # its whole burst: nothing left, nothing owed
    assert share.wait("a") == 0.0
    share.charge("a", 0.01)
    assert share.wait("a") == pytest.approx(0.1)  # 0.01 s owed at 0.1 s a second
    now[0] = 0.1
    assert share.wait("a") == pytest.approx(0.0)
    now[0] = 1000.0  # however long it was idle, its balance is its burst, no more
    share.charge("a", 0.3)
    assert share.wait("a") == pytest.approx(0.5)


def test_an_address_is_forgotten_once_its_whole_burst_is_back_not_before():
    now = [0.0]
    share = LoopShare(share=0.1, burst=0.25, clock=lambda: now[0])
    share.charge("a", 0.1)
    now[0] = 0.999  # 0.0999 of 0.1 back
    assert share.wait("a") == 0.0 and "a" in share._spent
    now[0] = 1.0  # its whole burst back: nothing to keep
    assert share.wait("a") == 0.0 and share._spent == {}


def test_the_loops_share_defaults_are_5_percent_and_a_tenth_of_a_second():
    share = LoopShare()
    assert (share.share, share.burst) == (0.05, 0.1)


def test_each_request_costs_its_address_2_ms_of_the_loop(probes):
    server = probes()
    now = [0.0]
    server.loop_share = LoopShare(share=0.05, burst=0.1, clock=lambda: now[0])
    with connect_from(server, "127.0.0.2") as sock:
        for _ in range(3):
            sock.sendall(get("/"))
            assert read_answer(sock)[0] == 200
    assert server.loop_share._spent["127.0.0.2"][0] == pytest.approx(0.1 - 3 * 0.002)
    assert send(server, b"GET / HTTP/one\r\n\r\n")[0] == 400  # a malformed one costs as much
    assert server.loop_share._spent["127.0.0.1"][0] == pytest.approx(0.1 - 0.002)


def test_an_address_past_its_share_waits_before_it_is_read_and_a_probe_does_not(probes):
    server = probes(max_connections=8)
    server.header_timeout = 2.0  # the probe and the other are answered before it, however loaded the machine
    now = [0.0]
    server.loop_share = LoopShare(share=0.05, burst=0.1, clock=lambda: now[0])
    server.loop_share.charge("127.0.0.2", 100.0)  # owes 2,000 s of the loop: it waits to its deadline
    with connect_from(server, "127.0.0.2", get("/")) as waiting:
        with connect_from(server, "127.0.0.2", get("/healthz")) as probe:  # a probe does not wait
            assert read_answer(probe)[0] == 200
        with connect_from(server, "127.0.0.3", get("/")) as other:  # nor does another address
            assert read_answer(other)[0] == 200
        waiting.setblocking(False)
        with pytest.raises(BlockingIOError):
            waiting.recv(1)  # still not read
        waiting.setblocking(True)
        assert read_answer(waiting)[0] == 200  # read once it waited (at its deadline)


@pytest.mark.parametrize(("length", "measured"), [(16 * 1024, False), (16 * 1024 + 1, True)])
def test_a_handler_on_the_loop_costs_its_address_its_cpu_time_for_a_body_over_16_kib(make_server, length,
                                                                                     measured):
    burned: list[float] = []

    def handle(request: Request) -> Response:
        started = time.thread_time()
        while time.thread_time() - started < 0.05:  # 50 ms of the loop thread's own CPU time
            pass
        burned.append(time.thread_time() - started)
        return json_response(200, {"length": len(request.body)})

    server = make_server(lambda request: Route(handle, None, 1 << 20))
    now = [0.0]
    server.loop_share = LoopShare(share=0.05, burst=10.0, clock=lambda: now[0])
    for _ in range(3):  # the loop thread's own time grows first: a sum in place of a difference shows
        send(server, post(b"x" * 20_000))
    server.loop_share = LoopShare(share=0.05, burst=10.0, clock=lambda: now[0])
    burned.clear()
    assert send(server, post(b"x" * length)) == (200, {"length": length})
    spent = 10.0 - server.loop_share._spent["127.0.0.1"][0]
    if measured:
        assert abs(spent - 0.002 - burned[0]) < 0.005, (spent, burned)
    else:
        assert spent < 0.002 + 0.005 < burned[0]  # the request's cost (and its parsing), not the handler's


def test_a_connection_in_the_reserve_has_2_seconds_for_its_request_a_held_one_its_header_deadline(probes):
    server = probes(max_connections=1)  # a header deadline of 30 s
    with connect_from(server, "127.0.0.2") as held, connect_from(server, "127.0.0.3") as reserved:
        wait_for(lambda: server.reserve == {"127.0.0.3": 1} and server.open == 1, 5, "one held, one reserved")
        started = time.monotonic()
        assert reserved.recv(1) == b""  # closed, silently: it sent nothing
        assert time.monotonic() - started >= 1.9
        assert server.open == 1  # the held one, idle as long, is still open
        held.sendall(get("/"))
        assert read_answer(held)[0] == 200


def statuses_to_the_end(sock: socket.socket) -> list[int]:
    """The status of every answer on a connection, read until the server closes it."""
    received = b""
    while chunk := sock.recv(65536):
        received += chunk
    return [int(status) for status in re.findall(rb"^HTTP/1\.1 (\d{3}) ", received, re.MULTILINE)]


def test_a_pipelined_request_has_its_header_lines_counted_too(make_server):
    server = make_server()
    with socket.create_connection(server.address, timeout=10) as sock:
        sock.sendall(get("/first") + head(101))  # the second request came with the first
        assert statuses_to_the_end(sock) == [200, 431]
    with socket.create_connection(server.address, timeout=10) as sock:
        sock.sendall(get("/first") + head(98)[:-2] + b"Host: h\r\nConnection: close\r\n\r\n")  # 100 lines
        assert statuses_to_the_end(sock) == [200, 200]


def test_a_request_refused_for_its_header_lines_costs_its_address_2_ms(probes, log):
    server = probes()
    now = [0.0]
    server.loop_share = LoopShare(share=0.05, burst=0.1, clock=lambda: now[0])
    assert send(server, head(101)) == (431, {"error": "more than 100 header lines"})
    wait_for(lambda: "127.0.0.1" in server.loop_share._spent, 5, "charged (after its answer)")
    assert server.loop_share._spent["127.0.0.1"][0] == pytest.approx(0.1 - 0.002)
    assert "listener: 1 malformed request(s) answered 4xx (the last from 127.0.0.1: 431: more than 100 " \
           "header lines)" in log.getvalue()


def test_an_address_that_owes_half_a_second_waits_it(probes):
    server = probes()
    server.header_timeout = 5.0
    now = [0.0]
    server.loop_share = LoopShare(share=0.05, burst=0.1, clock=lambda: now[0])
    server.loop_share.charge("127.0.0.1", 0.1 + 0.025)  # 0.025 s owed at 0.05 s a second: 0.5 s
    started = time.monotonic()
    assert send(server, get("/"))[0] == 200
    assert time.monotonic() - started >= 0.45


@pytest.mark.parametrize(("size", "measured"), [(16 * 1024, False), (16 * 1024 + 1, True)])
def test_a_head_over_16_kib_costs_its_address_its_parsing_time(make_server, size, measured):
    server = make_server(max_header_bytes=32 * 1024)
    now = [0.0]
    server.loop_share = LoopShare(share=0.05, burst=10.0, clock=lambda: now[0])
    start = get("/", b"X-Pad: ")
    data = start[:-2] + b"p" * (size - len(start) - 2) + b"\r\n\r\n"
    assert len(data) == size
    assert send(server, data)[0] == 200
    spent = 10.0 - server.loop_share._spent["127.0.0.1"][0]
    if measured:
        assert spent > 0.002 + 1e-7  # the request's cost and the time its parsing took
    else:
        assert spent == pytest.approx(0.002, abs=1e-12)


def test_a_head_in_pieces_is_read_whole_and_one_cut_short_is_told(make_server, log):
    server = make_server()
    with socket.create_connection(server.address, timeout=10) as sock:
        sock.sendall(b"GET /pieces HTTP/1.1\r\nHo")
        wait_for(lambda: server.open == 1, 5, "connected")
        time.sleep(0.05)  # the first piece read alone
        sock.sendall(b"st: h\r\n\r\n")
        assert read_answer(sock)[1]["path"] == "/pieces"
    with socket.create_connection(server.address, timeout=10) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHo")
        sock.shutdown(socket.SHUT_WR)  # gone before the end of its headers
        assert sock.recv(1) == b""
    wait_for(lambda: "went away" in log.getvalue(), 5, "told")
    assert "listener: 1 client(s) went away mid-request (the last from 127.0.0.1: before the end of its " \
           "headers)" in log.getvalue()
    with socket.create_connection(server.address, timeout=10) as sock:
        sock.shutdown(socket.SHUT_WR)  # connected and gone without a byte: nothing to tell
        assert sock.recv(1) == b""
    wait_for(lambda: server.open == 0, 5, "closed")
    assert log.getvalue().count("went away") == 1


def test_a_head_not_whole_by_its_deadline_is_408_and_a_silent_connection_is_closed_silently(make_server):
    server = make_server(header_timeout=0.3)
    with socket.create_connection(server.address, timeout=10) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\n")
        assert read_answer(sock) == (408, {"error": "the request did not arrive in time"})
    with socket.create_connection(server.address, timeout=10) as sock:
        assert sock.recv(1) == b""


def test_the_access_log_names_the_path_without_its_query(make_server):
    server = make_server()
    with captured_log(verbose=2) as out:
        assert send(server, get("/orders?token=s3cr3t-value?x=1"))[0] == 200  # cut at the first '?'
        wait_for(lambda: "http 127.0.0.1" in out.getvalue(), 5, "the access log's line")
    line = next(line for line in out.getvalue().splitlines() if "http 127.0.0.1" in line)
    assert line.endswith(" TRACE   gitsync.daemon.httpserver http 127.0.0.1 GET /orders → 200")
    assert "s3cr3t" not in out.getvalue()


def test_at_most_64_connections_turned_away_wait_for_their_request(probes, monkeypatch):
    monkeypatch.setattr(httpserver, "TURN_AWAY_WAIT", 30.0)  # none stops waiting during the test
    refused: list[None] = []
    server = probes(max_connections=1, on_refused=lambda: refused.append(None))
    socks = [connect_from(server, "127.0.0.2")]
    try:
        wait_for(lambda: server.open == 1, 5, "the cap reached")
        socks += [connect_from(server, f"127.0.0.{n}") for n in range(3, 11) for _ in range(4)]
        wait_for(lambda: sum(server.reserve.values()) == 32, 5, "the reserve full")
        before = _TurnedAway.lingering
        socks += [connect_from(server, f"127.0.1.{n}") for n in range(65)]  # silent, each turned away
        wait_for(lambda: len(refused) == 65, 10, "65 turned away")
        assert _TurnedAway.lingering - before == 64  # the 65th closed at once
    finally:
        for sock in socks:
            sock.close()
    wait_for(lambda: _TurnedAway.lingering == before, 10, "each closed once its client closed")
