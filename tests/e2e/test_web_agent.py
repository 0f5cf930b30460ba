"""The web view's requests against a real `gitsync run --ui` over real sockets: the login form's
length, the page number, sessions (logout, expiry, cookie flags) and item pages of one large file.
The browser's walk through the pages is tests/e2e/test_webview.py."""

from __future__ import annotations

import json
import socket
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from gitsync.web.auth import MAX_FAILURES
from testkit.agents import AgentProcess, repo_url
from testkit.processes import wait_for

pytestmark = pytest.mark.slow  # real agents

UI_TOKEN = "ui-token-of-the-agent-7c1f"
BEARER = {"Authorization": f"Bearer {UI_TOKEN}"}


def routes_file(count: int) -> str:
    lines = ["upstreams:", "  - id: u1", "    nodes:", '      "127.0.0.1:1980": 1', "routes:"]
    for n in range(count):
        lines += [f"  - id: r{n}", f"    uri: /r{n}", "    upstream_id: u1", "    plugins:",
                  "      key-auth: {}"]
    return "\n".join(lines) + "\n"


@pytest.fixture
def viewed(spawn, git_daemon, remote_repo, apisix, tmp_path):
    """An agent with the view on, a token, one file of 2,000 routes applied; JSON log lines."""
    def start(*flags: str) -> AgentProcess:
        token_file = tmp_path / "ui-token"
        token_file.write_text(UI_TOKEN)
        remote_repo.commit({"conf/routes.yaml": routes_file(2000)}, "2,000 routes in one file")
        agent = spawn(repo_url(git_daemon, remote_repo), "--ui", "--ui-token-file", str(token_file),
                      "--log-json", *flags, gateways=[apisix.url])
        wait_for(lambda: agent.get("/readyz").status_code == 200, 60,
                 f"the first sync ({agent.log()[-2000:]})")
        return agent
    return start


def raw(agent: AgentProcess, request: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", agent.port), timeout=10) as sock:
        sock.sendall(request)
        return b"".join(iter(lambda: sock.recv(65536), b""))


def login(agent: AgentProcess, token: str = UI_TOKEN) -> httpx.Response:
    return httpx.post(agent.url("/login"), data={"token": token, "next": "/items"}, timeout=10)


def no_traceback(agent: AgentProcess) -> None:
    records = [json.loads(line) for line in agent.log().splitlines()]  # every line is JSON
    assert not [r["message"] for r in records
                if "exception" in r or "Traceback" in r["message"] or r["level"] == "ERROR"]
    assert UI_TOKEN not in agent.log()


def test_a_login_form_of_a_5000_digit_length_is_400_and_guessing_stays_limited(viewed):
    agent = viewed()
    huge = raw(agent, b"POST /login HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: " + b"9" * 5000
               + b"\r\n\r\ntoken=x")
    assert huge.startswith(b"HTTP/1.1 400 ")
    for length in (b"\xc2\xb2", b"1e3", b"-5"):  # not ASCII digits: refused before the view
        assert raw(agent, b"POST /login HTTP/1.1\r\nHost: x\r\nContent-Length: " + length
                   + b"\r\n\r\n").startswith(b"HTTP/1.1 400 ")
    too_long = b"POST /login HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999\r\n\r\ntoken=x"
    answers = [raw(agent, too_long).split(b" ", 2)[1] for _ in range(MAX_FAILURES + 1)]
    assert answers[:MAX_FAILURES] == [b"413"] * MAX_FAILURES  # each counted as a failed login
    assert answers[-1] == b"429"  # the limit: the next one is not even read
    assert login(agent).status_code == 303  # the right token from the same address: not locked out
    assert agent.get("/healthz").status_code == 200
    no_traceback(agent)


def test_a_page_number_that_is_no_ascii_number_is_page_one(viewed):
    agent = viewed()
    first = httpx.get(agent.url("/items"), headers=BEARER, timeout=10)
    assert first.status_code == 200 and "Items 1–100 of" in first.text
    for page in ("%C2%B2", "%D9%A3", "9" * 5000, "-2", "1e3", "%00"):  # ², Arabic-Indic 3
        answer = httpx.get(agent.url(f"/items?page={page}"), headers=BEARER, timeout=10)
        assert answer.status_code == 200 and "Items 1–100 of" in answer.text, page
    last = httpx.get(agent.url("/items?page=999999999"), headers=BEARER, timeout=10)
    assert last.status_code == 200 and "Items 2,001–2,001 of 2,001" in last.text  # past the end: the last
    no_traceback(agent)


def test_logout_ends_the_session_and_its_cookie_is_refused_after(viewed):
    agent = viewed()
    refused = login(agent, "not-the-token-at-all")
    assert refused.status_code == 200 and "set-cookie" not in refused.headers
    answer = login(agent)
    assert answer.status_code == 303 and answer.headers["Location"] == "/items"
    cookie = answer.headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Max-Age=43200" in cookie
    assert "Secure" not in cookie and UI_TOKEN not in cookie
    session = {"Cookie": cookie.split(";", 1)[0]}
    assert httpx.get(agent.url("/items"), headers=session, timeout=10).status_code == 200
    second = login(agent).headers["Set-Cookie"].split(";", 1)[0]
    assert second != session["Cookie"]  # a new random id each time, not a function of the token
    out = httpx.post(agent.url("/logout"), headers=session, timeout=10)
    assert out.status_code == 303 and "Max-Age=0" in out.headers["Set-Cookie"]
    assert httpx.get(agent.url("/items"), headers=session, timeout=10).status_code == 401
    to_login = httpx.get(agent.url("/items"), headers={**session, "Accept": "text/html"}, timeout=10)
    assert to_login.status_code == 303 and to_login.headers["Location"].startswith("/login")
    assert httpx.get(agent.url("/items"), headers={"Cookie": second}, timeout=10).status_code == 200
    no_traceback(agent)


def test_a_session_ends_after_its_ttl_and_the_cookie_can_be_secure(viewed):
    agent = viewed("--ui-session-ttl", "2s", "--ui-secure-cookie")
    cookie = login(agent).headers["Set-Cookie"]
    assert cookie.endswith("; Secure") and "Max-Age=2" in cookie
    session = {"Cookie": cookie.split(";", 1)[0]}
    assert httpx.get(agent.url("/fleet"), headers=session, timeout=10).status_code == 200
    wait_for(lambda: httpx.get(agent.url("/fleet"), headers=session, timeout=10).status_code == 401, 10,
             "the session ended after its ttl")
    no_traceback(agent)


def test_item_pages_of_one_large_file_show_their_own_lines_to_concurrent_viewers(viewed):
    """2,000 routes in one file, 8 viewers at once on different routes: every page shows its own
    route's lines, from its line in the file."""
    agent = viewed()
    wanted = [7, 1999, 1000, 3, 512, 1500, 42, 999]

    def page(n: int) -> tuple[int, str]:
        answer = httpx.get(agent.url(f"/items/routes/r{n}"), headers=BEARER, timeout=60)
        return answer.status_code, answer.text

    with ThreadPoolExecutor(8) as viewers:
        pages = list(viewers.map(page, wanted * 2))
    for n, (status, text) in zip(wanted * 2, pages, strict=True):
        assert status in (200, 503), (n, status)  # 503: beyond the web view's lane, at once
        if status == 200:
            line = 6 + 5 * n  # after the upstream's four lines and "routes:"
            assert f"conf/routes.yaml:{line}" in text, n
            assert f'aria-hidden="true">{line}</span>  - id: r{n}\n' in text, n
    assert sum(status == 200 for status, _ in pages) >= len(wanted)
    no_traceback(agent)
