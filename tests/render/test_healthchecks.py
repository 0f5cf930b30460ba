"""Health checks bounded and sent as written: `gitsync validate` refuses a check that cannot be sent as
written or that could run past its bounds, at its file:line; a check runs against a real HTTP server
on 127.0.0.1 with its path intact (``;parameters`` too), its regexes in linear time, its body read
capped, and anything that goes wrong with it is the check's failure, never an exception."""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from gitsync.httpclient import HttpClient
from gitsync.problems import Location, ProblemsError
from gitsync.push.health import run_check, run_checks
from gitsync.render import render
from gitsync.render.healthchecks import Check, CheckLimits, _pattern
from gitsync.render.options import RenderOptions
from testkit.processes import run_gitsync


def checks_file(body: str) -> dict[str, bytes]:
    return {"conf/checks.yaml": f"routes: []\nchecks:\n{body}".encode()}


def problems(body: str, limits: CheckLimits | None = None) -> list[str]:
    options = RenderOptions(check_limits=limits) if limits else RenderOptions()
    try:
        render(checks_file(body), options)
    except ProblemsError as exc:
        return [str(p) for p in exc.problems]
    return []


def test_validate_refuses_a_path_that_cannot_be_sent_as_written_and_keeps_parameters(tmp_path):
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "checks.yaml").write_text(
        "routes: []\nchecks:\n  - name: cafe\n    request: {path: /café}\n"
        "  - name: api\n    request: {path: \"/api;v=1?x=%C3%A9\"}\n", encoding="utf-8")
    done = run_gitsync("validate", "--dir", str(tmp_path))
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        "conf/checks.yaml:4:15: checks[cafe].request.path: '/café' cannot be sent as written: "
        "percent-encode what is not ASCII (/caf%C3%A9)"]
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(("request_", "words"), [
    ("{path: /a b}", "no spaces"), ("{path: '/a#frag'}", "'#'"), ("{path: /100%}", "must start an escape"),
    ("{path: /x, host: bücher.example}", "xn--"), ("{path: /x, headers: {'X Bad': v}}", "not a header name"),
    ("{path: /x, headers: {X-A: \"a\\r\\nInjected: 1\"}}", "control character"),
    ("{path: /x, headers: {X-A: 'a€'}}", "Latin-1"),
])
def test_requests_that_cannot_be_sent_are_refused(request_, words):
    found = problems(f"  - name: c\n    request: {request_}\n")
    assert len(found) == 1 and words in found[0], found


@pytest.mark.parametrize("pattern", [r"(a)\1", r"(?=a)b", r"(?<!a)b", r"a\Z"])
def test_patterns_re2_cannot_run_in_linear_time_are_refused(pattern):
    found = problems(f"  - name: c\n    expect: {{body: '{pattern}'}}\n")
    assert len(found) == 1 and "linear time" in found[0] and "checks.yaml:4" in found[0], found


def test_the_number_of_checks_and_their_worst_case_time_are_capped():
    many = "".join(f"  - name: c{i}\n" for i in range(4))
    assert problems(many, CheckLimits(max_checks=4)) == []
    over = problems(many + "  - name: c4\n", CheckLimits(max_checks=4))
    assert over == ["conf/checks.yaml:7:5: checks: 5 checks, more than max_checks (4) allows"]
    # 3 attempts of 5 s and 2 intervals of 1 s: 17 s each; the second takes the total to 34 s.
    slow = "".join(f"  - name: s{i}\n    timeout: 5s\n    retries: 2\n    interval: 1s\n" for i in range(2))
    assert problems(slow, CheckLimits(max_time=34)) == []
    found = problems(slow, CheckLimits(max_time=30))
    assert len(found) == 1
    assert found[0].startswith("conf/checks.yaml:7:5: checks[s1]: the checks could take 34s")


# ---------------------------------------------------------------------------------------------------------
# Running against a real server


@contextmanager
def server(body: bytes) -> Iterator[tuple[str, list[str]]]:
    """A real HTTP server on 127.0.0.1 answering 200 with `body`; yields its URL and the paths asked."""
    asked: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            asked.append(self.path)
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", asked
    finally:
        httpd.shutdown()
        httpd.server_close()


def check(**fields: object) -> Check:
    values: dict = {"name": "c", "location": Location("checks.yaml", 3, 5), "retries": 0,
                    "timeout": 2.0, **fields}
    return Check(**values)


@pytest.fixture
def client() -> Iterator[HttpClient]:
    http_client = HttpClient(None, 5.0)
    yield http_client
    http_client.close()


def test_a_path_with_parameters_is_sent_as_written(client):
    with server(b"ok") as (url, asked):
        result = run_check(check(path="/api;v=1?x=%C3%A9"), url, client)
    assert result.passed and asked == ["/api;v=1?x=%C3%A9"]


def test_a_check_that_cannot_be_sent_is_a_failed_check_not_an_exception(client):
    with server(b"ok") as (url, asked):
        result = run_check(check(path="/café", retries=3), url, client, sleep=lambda s: None)
        crlf = run_check(check(headers=(("X-A", "a\r\nInjected: 1"),)), url, client)
    assert not result.passed and result.attempts == 1 and result.why.startswith("cannot be sent")
    assert not crlf.passed and asked == []


def test_a_backtracking_pattern_runs_in_linear_time(client):
    body = b"a" * 30_000 + b"!"
    with server(body) as (url, _):
        began = time.monotonic()
        result = run_check(check(expect_body=_pattern(r"^(\w+\s?)*$")), url, client)
        took = time.monotonic() - began
    assert not result.passed and "body does not match" in result.why
    assert took < 1.0, took  # Python's re takes minutes on 30 characters of this


def test_the_body_read_is_capped(client):
    with server(b"x" * 5000) as (url, _):
        small = run_check(check(max_body=4096), url, client)
        enough = run_check(check(max_body=8192), url, client)
    assert not small.passed and "larger than 4096 bytes" in small.why
    assert enough.passed


def test_checks_past_their_declared_time_fail_unrun(client):
    ticks = iter([0.0, 0.0, 100.0])  # the clock: at the start, before the first check, before the second
    with server(b"ok") as (url, asked):
        verdict = run_checks([check(name="a"), check(name="b")], url, client, clock=lambda: next(ticks))
    assert [r.passed for r in verdict.results] == [True, False]
    assert verdict.results[1].why == "not run: the checks' time on this gateway ran out" and len(asked) == 1
