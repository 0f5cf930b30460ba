from __future__ import annotations

import contextlib
import hashlib
import hmac
import io
import json
import select
import socket
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gitsync import log as gslog
from gitsync.server import Metrics, Readiness, StatusServer
from gitsync.settings import Secret
from tests.agents import config_files, repo_url, wait_for

SECRET = "hook-secret-5b1d"
BODY = b'{"ref": "refs/heads/main"}'


@pytest.fixture
def server():
    triggers: list[str] = []
    state = {"ready": Readiness(False, "no sync yet")}
    srv = StatusServer("127.0.0.1:0", Metrics(), lambda: state["ready"], triggers.append, Secret(SECRET))
    srv.start()
    srv.triggers = triggers
    srv.state = state
    yield srv
    srv.stop()


def url(srv: StatusServer, path: str) -> str:
    return f"http://127.0.0.1:{srv.port}{path}"


def sig(body: bytes = BODY, secret: str = SECRET) -> str:
    return hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def test_healthz_and_readyz(server):
    assert httpx.get(url(server, "/healthz")).json() == {"status": "ok"}
    r = httpx.get(url(server, "/readyz"))
    assert r.status_code == 503 and r.json() == {"ready": False, "reason": "no sync yet"}
    server.state["ready"] = Readiness(True, "abc1234 live on 1 gateway")
    assert httpx.get(url(server, "/readyz")).status_code == 200


@pytest.mark.parametrize(("provider", "headers"), [
    ("github", {"X-Hub-Signature-256": "sha256=" + sig()}),
    ("gitea", {"X-Gitea-Signature": sig()}),
    ("gitlab", {"X-Gitlab-Token": SECRET}),
    ("generic", {"X-Gitsync-Signature-256": "sha256=" + sig()}),
    ("generic", {"Authorization": "Bearer " + SECRET}),
])
def test_valid_webhooks_trigger(server, provider, headers):
    r = httpx.post(url(server, f"/hooks/{provider}"), content=BODY, headers=headers)
    assert r.status_code == 202
    assert server.triggers == [f"webhook:{provider}"]


@pytest.mark.parametrize(("provider", "headers"), [
    ("github", {}),
    ("github", {"X-Hub-Signature-256": "sha256=" + sig(secret="wrong-secret")}),
    ("github", {"X-Hub-Signature-256": sig()}),  # missing the sha256= prefix
    ("gitea", {"X-Gitea-Signature": sig(body=b"other body")}),
    ("gitlab", {"X-Gitlab-Token": "wrong-token"}),
    ("generic", {"Authorization": "Bearer wrong"}),
])
def test_bad_webhooks_get_401_and_trigger_nothing(server, provider, headers):
    r = httpx.post(url(server, f"/hooks/{provider}"), content=BODY, headers=headers)
    assert r.status_code == 401
    assert server.triggers == []
    assert SECRET not in r.text


def test_webhook_body_limit_and_unknown_provider(server):
    big = b"x" * (1024 * 1024 + 1)
    headers = {"X-Hub-Signature-256": "sha256=" + sig(big)}
    r = httpx.post(url(server, "/hooks/github"), content=big, headers=headers)
    assert r.status_code == 413 and server.triggers == []
    assert httpx.post(url(server, "/hooks/bitbucket"), content=BODY).status_code == 404


def test_webhooks_off_without_a_secret():
    srv = StatusServer("127.0.0.1:0", Metrics(), lambda: Readiness(True, ""), lambda r: None, None).start()
    try:
        r = httpx.post(url(srv, "/hooks/github"), content=BODY, headers={"X-Hub-Signature-256": "sha256=x"})
        assert r.status_code == 403
    finally:
        srv.stop()


def test_metrics_exposition(server):
    m = server.metrics
    m.syncs.labels("applied").inc()
    m.set_applied_commit("a" * 40)
    m.gateway_version.labels("http://127.0.0.1:9180", "routes").set(7)
    httpx.post(url(server, "/hooks/github"), content=BODY)  # unauthorized, counted
    text = httpx.get(url(server, "/metrics")).text
    assert 'gitsync_syncs_total{result="applied"} 1.0' in text
    assert f'gitsync_applied_commit_info{{commit="{"a" * 40}"}} 1.0' in text
    assert 'gitsync_gateway_conf_version{gateway="http://127.0.0.1:9180",kind="routes"} 7.0' in text
    assert 'gitsync_webhook_requests_total{provider="github",result="unauthorized"} 1.0' in text
    for name in ("gitsync_sync_duration_seconds_bucket", "gitsync_last_success_timestamp_seconds",
                 "gitsync_drift_heals_total", "gitsync_writeback_failures_total"):
        assert name in text


def test_gateway_and_commit_gauges_follow_each_change_and_skip_repeats():
    from gitsync.metrics import Metrics

    m = Metrics()
    gw = "http://127.0.0.1:9180"
    for versions, in_sync, sha in [({"routes_conf_version": 7}, True, "a" * 40),
                                   ({"routes_conf_version": 7}, True, "a" * 40),  # a poll: the same again
                                   ({"routes_conf_version": 9, "ssls_conf_version": 2}, False, "b" * 40),
                                   ({"routes_conf_version": 9, "ssls_conf_version": 2}, True, "a" * 40)]:
        m.set_gateway(gw, versions, in_sync)
        m.set_applied_commit(sha)
        text = m.render().decode()
        for kind, version in versions.items():
            name = kind.removesuffix("_conf_version")
            assert f'gitsync_gateway_conf_version{{gateway="{gw}",kind="{name}"}} {version}.0' in text
        assert f'gitsync_gateway_in_sync{{gateway="{gw}"}} {1.0 if in_sync else 0.0}' in text
        assert text.count("gitsync_applied_commit_info{") == 1
        assert f'gitsync_applied_commit_info{{commit="{sha}"}} 1.0' in text


# ---------------------------------------------------------------------------------------------------------
# hostile and careless clients, over real sockets


@pytest.fixture
def log() -> Iterator[io.StringIO]:
    """The agent's log sink, in memory."""
    out = io.StringIO()
    gslog.setup(stream=out, verbose=1)
    yield out
    gslog.setup()


@pytest.fixture
def strict():
    """A listener with short deadlines and a cap of 8 connections."""
    triggers: list[str] = []
    srv = StatusServer("127.0.0.1:0", Metrics(), lambda: Readiness(True, "ok"), triggers.append,
                       Secret(SECRET), header_timeout=1.0, body_timeout=1.0, max_connections=8).start()
    srv.triggers = triggers
    yield srv
    srv.stop()


def connect(srv: StatusServer, data: bytes = b"", timeout: float = 10) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", srv.port), timeout=timeout)
    if data:
        sock.sendall(data)
    return sock


def answer(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes (the socket's timeout bounds the wait)."""
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    sock.close()
    return b"".join(chunks)


def post(path: str, headers: dict[str, bytes], body: bytes = BODY) -> bytes:
    lines = [f"POST {path} HTTP/1.1".encode(), b"Host: gitsync"]
    lines += [name.encode() + b": " + value for name, value in headers.items()]
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


def counted(srv: StatusServer, provider: str, result: str) -> float:
    return srv.metrics.registry.get_sample_value("gitsync_webhook_requests_total",
                                                 {"provider": provider, "result": result}) or 0.0


@pytest.mark.parametrize(("provider", "header"), [
    ("github", "X-Hub-Signature-256"), ("gitea", "X-Gitea-Signature"), ("generic", "X-Gitsync-Signature-256"),
    ("gitlab", "X-Gitlab-Token"), ("generic", "Authorization")])
def test_a_non_ascii_signature_is_a_counted_401(strict, log, provider, header):
    """Comparing str with a non-ASCII character raises TypeError: the handler compares bytes."""
    value = {"X-Gitea-Signature": b"\xe9", "X-Gitlab-Token": b"tok\xe9n",
             "Authorization": b"Bearer \xe9"}.get(header, b"sha256=\xe9")
    headers = {header: value, "Content-Length": b"%d" % len(BODY)}
    reply = answer(connect(strict, post(f"/hooks/{provider}", headers)))
    assert reply.startswith(b"HTTP/1.0 401 ") and b"bad or missing signature" in reply
    assert counted(strict, provider, "unauthorized") == 1 and strict.triggers == []
    assert log.getvalue().count("bad or missing signature; ignored") == 1


@pytest.mark.parametrize("length", [b"-1", b"abc", b"1e3", b"+5", b"0x10", b"", b"5, 5"])
def test_a_content_length_that_is_no_whole_number_is_400(strict, log, length):
    reply = answer(connect(strict, post("/hooks/github", {"Content-Length": length}, b"")))
    assert reply.startswith(b"HTTP/1.0 400 ") and b"Content-Length must be one whole number of bytes" in reply
    assert b"at most" not in reply  # not the body limit's 413
    assert counted(strict, "github", "bad_request") == 1
    assert log.getvalue().count("webhook github from 127.0.0.1: Content-Length must be") == 1


def test_two_content_lengths_are_400(strict):
    data = post("/hooks/github", {"Content-Length": b"2", "content-length": b"5"})
    assert answer(connect(strict, data)).startswith(b"HTTP/1.0 400 ")


@pytest.mark.slow
def test_a_body_cut_short_is_dropped_at_the_deadline(strict, log):
    """Content-Length 100, 10 bytes sent, the client waits: 408 once the body deadline passes."""
    sock = connect(strict, post("/hooks/github", {"Content-Length": b"100"}, b"x" * 10))
    reply = answer(sock)  # the client's 10 s timeout bounds the test; the server's deadline is 1 s
    assert reply.startswith(b"HTTP/1.0 408 ") and b"the body did not arrive within 1s" in reply
    assert counted(strict, "github", "timeout") == 1
    assert log.getvalue().count("webhook github from 127.0.0.1: the body did not arrive") == 1


@pytest.mark.slow
def test_a_trickling_client_is_cut_at_the_header_deadline(strict, log):
    """A byte every 0.1 s never leaves the socket silent: the deadline still closes it."""
    sock = connect(strict)
    request = post("/hooks/github", {"Content-Length": b"2"}, b"{}") * 10
    started, sent = time.monotonic(), 0
    with contextlib.suppress(OSError):
        while sent < len(request) and time.monotonic() - started < 8:
            sock.send(request[sent:sent + 1])
            sent += 1
            time.sleep(0.1)
            readable, _, _ = select.select([sock], [], [], 0)
            if readable and not sock.recv(65536):
                break  # closed by the server
    sock.close()
    assert sent < 60, "the server kept reading a trickle past its 1 s header deadline"
    assert "listener: 127.0.0.1 Request timed out" in log.getvalue()


@pytest.mark.slow
def test_stuck_clients_take_at_most_the_cap_of_threads(log):
    """300 connections that send only a request line: 8 are held (until their header deadline), every
    other is answered 503 at once by the accepting thread; no thread beyond the cap is started."""
    srv = StatusServer("127.0.0.1:0", Metrics(), lambda: Readiness(True, "ok"), lambda reason: None,
                       Secret(SECRET), header_timeout=5.0, max_connections=8).start()
    try:
        before = threading.active_count()
        socks, most = [], before
        started = time.monotonic()  # the held ones' header deadlines run from their connects, not after
        for _ in range(300):
            socks.append(connect(srv, b"POST /hooks/github HTTP/1.1\r\n"))
            most = max(most, threading.active_count())
        turned_away = []
        waiting = set(socks)
        deadline = started + 4.5  # before the first held one's 5 s deadline, however long 300 connects took
        while len(turned_away) < 292 and time.monotonic() < deadline:
            for sock in select.select(list(waiting), [], [], 0.1)[0]:
                turned_away.append(answer(sock))
                waiting.discard(sock)
        assert most <= before + 8 and len(waiting) == 8, (most - before, len(waiting))
        assert all(reply.startswith(b"HTTP/1.0 503 ") for reply in turned_away)
        assert srv.metrics.registry.get_sample_value("gitsync_listener_refused_connections_total") == 292
        assert log.getvalue().count("connection(s) refused with 503") == 1  # one record per 10 s, not 292
        for sock in waiting:
            assert answer(sock) == b""  # closed at the header deadline (each socket waits 10 s at most)
        assert httpx.get(url(srv, "/healthz")).status_code == 200
        assert log.getvalue().count("Request timed out") == 8
    finally:
        srv.stop()


def test_a_client_gone_mid_request_is_one_record_and_no_traceback(strict, log, capfd):
    sock = connect(strict, post("/hooks/github", {"Content-Length": b"100"}, b"x" * 10))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # reset, not FIN
    sock.close()
    deadline = time.monotonic() + 5
    while "went away" not in log.getvalue() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert log.getvalue().count("listener: 127.0.0.1 went away: ConnectionResetError") == 1
    assert "Traceback" not in log.getvalue() + capfd.readouterr().err


@pytest.mark.parametrize(("request_bytes", "status"), [
    (b"PUT /hooks/github HTTP/1.1\r\n\r\n", b"405"),
    (b"GARBAGE / HTTP/1.1\r\n\r\n", b"405"),
    (b"GET / HTTP/one\r\n\r\n", b"400"),
    (b"GET /" + b"a" * 70000 + b" HTTP/1.1\r\n\r\n", b"414"),
])
def test_a_malformed_request_is_a_4xx_and_one_record(strict, log, request_bytes, status):
    reply = answer(connect(strict, request_bytes))
    assert reply.split(b" ", 2)[1] == status
    assert log.getvalue().count("listener: 127.0.0.1 ") == 1


# ---------------------------------------------------------------------------------------------------------
# a real agent process


@pytest.mark.slow
def test_the_listener_holds_against_stuck_clients_and_odd_requests(spawn, git_daemon, remote_repo, apisix):
    """A real `gitsync run --log-json`: 300 connections that send only a request line start at most
    the cap of threads (32), the rest get 503 at once; a non-ASCII signature is a counted 401; a client
    that resets mid-body is one record; every line the agent writes stays JSON, no traceback."""
    remote_repo.commit(config_files(1), "v1")
    agent = spawn(repo_url(git_daemon, remote_repo), "--log-json", gateways=[apisix.url])
    wait_for(lambda: agent.get("/readyz").status_code == 200, 10, "the first sync")
    assert agent.proc is not None
    status = Path(f"/proc/{agent.proc.pid}/status")

    def threads() -> int:
        lines = status.read_text().splitlines()
        return int(next(line.split()[1] for line in lines if line.startswith("Threads:")))

    def messages() -> list[str]:
        return [json.loads(line)["message"] for line in agent.log().splitlines()]

    before = most = threads()
    socks = []
    for _ in range(300):
        sock = socket.create_connection(("127.0.0.1", agent.port), timeout=10)
        sock.sendall(b"POST /hooks/github HTTP/1.1\r\n")
        socks.append(sock)
        most = max(most, threads())
    waiting, refused = set(socks), 0
    deadline = time.monotonic() + 5  # before the held ones' 10 s header deadline
    while refused < 268 and time.monotonic() < deadline:
        for sock in select.select(list(waiting), [], [], 0.1)[0]:
            assert sock.recv(65536).startswith(b"HTTP/1.0 503 ")
            refused += 1
            waiting.discard(sock)
            sock.close()
    most = max(most, threads())
    assert refused == 268 and len(waiting) == 32
    assert most <= before + 32 + 4, (before, most)  # + the scheduler's own workers, which come and go
    for sock in waiting:
        sock.close()  # gone mid-request: dropped, not acted on
    wait_for(lambda: messages().count("listener: 127.0.0.1 went away before the end of its request headers")
             == 32, 5, "the held connections to be dropped")

    def raw(request: bytes) -> bytes:
        with socket.create_connection(("127.0.0.1", agent.port), timeout=10) as sock:
            sock.sendall(request)
            return b"".join(iter(lambda: sock.recv(65536), b""))

    non_ascii = b"X-Hub-Signature-256: sha256=\xe9\r\nContent-Length: 2\r\n\r\n{}"
    assert raw(b"POST /hooks/github HTTP/1.1\r\n" + non_ascii).startswith(b"HTTP/1.0 401 ")
    assert raw(b"POST /hooks/github HTTP/1.1\r\nContent-Length: -1\r\n\r\n").startswith(b"HTTP/1.0 400 ")
    gone = socket.create_connection(("127.0.0.1", agent.port), timeout=10)
    gone.sendall(b"POST /hooks/github HTTP/1.1\r\nContent-Length: 100\r\n\r\n0123456789")
    gone.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    gone.close()
    wait_for(lambda: any("ConnectionResetError" in m for m in messages()), 5, "the record of the client gone")
    assert agent.metric("gitsync_webhook_requests_total", provider="github", result="unauthorized") == 1
    assert agent.metric("gitsync_webhook_requests_total", provider="github", result="bad_request") == 1
    assert agent.metric("gitsync_listener_refused_connections_total") == 268
    records = [json.loads(line) for line in agent.log().splitlines()]  # every line is JSON
    assert sum("connection(s) refused with 503" in m for m in messages()) == 1
    assert sum("went away: ConnectionResetError" in m for m in messages()) == 1
    assert not any("exception" in r or "Traceback" in r["message"] for r in records)
