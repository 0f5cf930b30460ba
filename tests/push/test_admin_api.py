"""The gateway client against gateways that misbehave at the socket level: every request ends by its
deadline and every answer within its size limit, whatever the other side does."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace

import pytest

from gitsync.push.admin_api import Endpoint, Gateway, GatewayProtocolError, GatewayUnavailable
from gitsync.push.apply import RetryPolicy, sync_gateway
from gitsync.push.results import SyncStatus
from gitsync.settings import Secret
from gitsync.testing.apisix import ApisixDouble

KEY = "test-admin-key"
HEADERS = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"


@contextmanager
def raw_server(serve: Callable[[socket.socket], None]) -> Iterator[str]:
    """A TCP server on 127.0.0.1 that hands each connection to `serve` in a thread of its own."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            threading.Thread(target=_serve_quietly, args=(serve, conn, stop), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(5)
        listener.close()


def _serve_quietly(serve: Callable[[socket.socket], None], conn: socket.socket,
                   stop: threading.Event) -> None:
    with conn:
        try:
            conn.recv(65536)  # the request (small)
            serve(conn)
        except OSError:
            pass  # the client gave up: what these tests want


def dripping(conn: socket.socket) -> None:
    """Headers promising a body, then one byte every 0.3 s, for a minute."""
    conn.sendall(HEADERS % 1000)
    for _ in range(200):
        conn.sendall(b" ")
        time.sleep(0.3)


def silent_headers(conn: socket.socket) -> None:
    """The status line, then one header byte at a time, never finishing the headers."""
    conn.sendall(b"HTTP/1.1 200 OK\r\n")
    for _ in range(200):
        conn.sendall(b"X")
        time.sleep(0.3)


def endless(conn: socket.socket) -> None:
    """A JSON body without end: 64 KiB chunks as fast as the client reads."""
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
    chunk = b"[" * 65536
    for _ in range(100_000):
        conn.sendall(b"%x\r\n" % len(chunk) + chunk + b"\r\n")


@pytest.mark.parametrize("serve", [dripping, silent_headers], ids=["body", "headers"])
def test_a_gateway_that_drips_its_answer_costs_one_deadline(serve: Callable[[socket.socket], None]) -> None:
    with raw_server(serve) as url, Gateway(Endpoint(url, Secret(KEY), timeout=1.0)) as gateway:
        started = time.monotonic()
        with pytest.raises(GatewayUnavailable, match="timed out: no complete answer within 1s"):
            gateway.get_config()
        assert time.monotonic() - started < 1.6


def test_a_sync_against_a_dripping_gateway_is_bounded_by_attempts_times_the_deadline() -> None:
    retry = RetryPolicy(attempts=2, unavailable_base=0.1, cap=0.2, probe_every=0.1)
    with raw_server(dripping) as url:
        started = time.monotonic()
        result = sync_gateway(Endpoint(url, Secret(KEY), timeout=0.5), {"routes": []}, retry=retry)
    assert result.status is SyncStatus.FAILED and result.attempts == 2
    assert time.monotonic() - started < 2 * 0.5 + 0.2 + 1.5  # two deadlines, a pause, and slack


def test_an_endless_answer_is_cut_at_the_size_limit() -> None:
    endpoint = Endpoint("", Secret(KEY), timeout=30, max_answer=2 << 20)
    with raw_server(endless) as url, Gateway(replace(endpoint, url=url)) as gw:
        started = time.monotonic()
        with pytest.raises(GatewayProtocolError, match=f"larger than {2 << 20} bytes"):
            gw.get_config()
        assert time.monotonic() - started < 10


def test_the_client_lives_across_requests_on_one_connection(apisix: ApisixDouble) -> None:
    with Gateway(Endpoint(apisix.url, Secret(KEY))) as gateway:
        for _ in range(5):
            gateway.head_config()
            gateway.get_config()
        assert len(apisix.requests) == 10 and gateway._http.connections == 1  # one kept-alive connection


def test_an_error_names_the_request_not_the_gateway_twice(apisix: ApisixDouble) -> None:
    result = sync_gateway(Endpoint(apisix.url, Secret("not-the-key-1234")), {"routes": []})
    assert result.summary().count(apisix.url) == 1
    assert result.summary().startswith(f"{apisix.url}: failed: GET /apisix/admin/configs refused (401)")


def test_a_plain_http_gateway_loads_no_tls_trust_store(monkeypatch: pytest.MonkeyPatch, tmp_path,
                                                      apisix: ApisixDouble) -> None:
    """Loading the system's trust store costs ~50 ms of every start; a gateway on plain HTTP (the
    usual admin API, on the same host or network) never needs it. An https one, or TLS files, do."""
    import gitsync.push.admin_api as gateway_module

    built: list[str] = []
    real = gateway_module._default_tls.__wrapped__
    monkeypatch.setattr(gateway_module, "_default_tls", lambda: built.append("default") or real())
    with Gateway(Endpoint(apisix.url, Secret(KEY), timeout=5.0)) as plain:
        assert plain.get_config().body is not None  # a real request over plain HTTP
    assert built == []
    assert gateway_module.uses_tls(Endpoint("https://127.0.0.1:1", Secret(KEY)))
    assert gateway_module.uses_tls(Endpoint("http://127.0.0.1:1", Secret(KEY), status_url="https://127.0.0.1:2"))
    assert gateway_module.uses_tls(Endpoint("http://127.0.0.1:1", Secret(KEY), ca_file=tmp_path / "ca.pem"))
    with Gateway(Endpoint("https://127.0.0.1:1", Secret(KEY), timeout=1.0)):
        assert built == ["default"]


def test_a_head_answer_is_remembered_until_a_put_or_a_failed_head(apisix: ApisixDouble) -> None:
    """`recent_head` is what a poll trusts instead of asking again: never an answer older than asked
    for, nor one a PUT may have made stale, nor one a later failed HEAD contradicts."""
    with Gateway(Endpoint(apisix.url, Secret(KEY), timeout=2.0)) as gateway:
        assert gateway.recent_head(60) is None  # nothing asked yet
        head = gateway.head_config()
        assert head is not None and gateway.recent_head(60) == head
        time.sleep(0.05)
        assert gateway.recent_head(0.01) is None  # older than asked for
        version = gateway.get_config().body["routes_conf_version"] + 1
        gateway.put_config(b'{"routes_conf_version": %d, "routes": []}' % version, "d1")
        assert gateway.recent_head(60) is None  # a PUT makes it stale
        assert gateway.head_config() is not None and gateway.recent_head(60) is not None
        apisix.stop()
        with pytest.raises(GatewayUnavailable):
            gateway.head_config()
        assert gateway.recent_head(60) is None  # the gateway no longer answers


def test_a_head_answered_across_a_put_is_not_remembered() -> None:
    """A HEAD sent before a PUT and answered after it may show the content the PUT replaced."""
    arrived, release, count = threading.Event(), threading.Event(), iter(range(100))

    def serve(conn: socket.socket) -> None:
        if next(count) == 0:  # the HEAD: answered once the PUT was
            arrived.set()
            release.wait(10)
            conn.sendall(b"HTTP/1.1 200 OK\r\nX-Digest: before\r\nContent-Length: 0\r\n\r\n")
        else:
            conn.sendall(b"HTTP/1.1 202 Accepted\r\nX-Digest: after\r\nContent-Length: 2\r\n\r\n{}")
        time.sleep(0.5)

    with raw_server(serve) as url, Gateway(Endpoint(url, Secret(KEY), timeout=5.0)) as gateway:
        heads: list[object] = []
        asking = threading.Thread(target=lambda: heads.append(gateway.head_config()))
        asking.start()
        assert arrived.wait(5)
        assert gateway.put_config(b"{}", "after").digest == "after"
        release.set()
        asking.join(5)
        assert heads and heads[0] is not None and heads[0].digest == "before"  # type: ignore[union-attr]
        assert gateway.recent_head(60) is None
