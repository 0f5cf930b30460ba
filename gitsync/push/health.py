"""Health checks declared in the config repo, run against a gateway's data plane after a push.

A config file may hold a top-level ``checks:`` list beside its kinds; checks are never pushed to
APISIX. Each one is a request and what its answer must look like::

    checks:
      - name: api-health
        request: {method: GET, path: /api/health, host: api.example.com, headers: {X-Probe: gitsync}}
        expect: {status: [200, 204], headers: {Content-Type: "^application/json"}, body: '"ok"'}
        timeout: 2s        # one attempt, connect to the last byte
        retries: 3         # attempts after the first failed one
        interval: 1s       # between attempts

`status` is a code, a list of codes, or a range written ``"200-299"``; `headers` and `body` are
regular expressions searched in the answer. Parsing is pure (`parse_checks`, with file:line for every
problem); running (`run_checks`) is the I/O, one client per gateway's data plane.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gitsync.httpclient import Answer, HttpClient, HttpError
from gitsync.log import redact
from gitsync.problems import Location, Problem
from gitsync.settings import parse_duration

CHECKS = "checks"
METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
BODY_SHOWN = 200  # bytes of an answer's body a failure quotes
MAX_BODY_READ = 1 << 20
MAX_RETRIES = 20
MAX_TIMEOUT = 60.0


@dataclass(frozen=True)
class Check:
    """One health check, as the repo declares it."""

    name: str
    location: Location
    method: str = "GET"
    path: str = "/"
    host: str | None = None
    headers: tuple[tuple[str, str], ...] = ()
    body: str | None = None
    status: tuple[tuple[int, int], ...] = ((200, 299),)  # inclusive ranges
    expect_headers: tuple[tuple[str, re.Pattern[str]], ...] = ()
    expect_body: re.Pattern[str] | None = None
    timeout: float = 2.0
    retries: int = 2
    interval: float = 1.0

    @property
    def worst_case(self) -> float:
        """The longest this check can take before it is called failed."""
        return (self.retries + 1) * self.timeout + self.retries * self.interval

    def judge(self, answer: Answer) -> str | None:
        """Why `answer` fails this check, or None when it passes."""
        if not any(low <= answer.status <= high for low, high in self.status):
            return f"status {answer.status}, expected {_status_text(self.status)}"
        for name, pattern in self.expect_headers:
            value = answer.headers.get(name.lower())
            if value is None or not pattern.search(value):
                return f"header {name}: {value!r} does not match {pattern.pattern!r}"
        if self.expect_body is not None and not self.expect_body.search(answer.text):
            return f"body does not match {self.expect_body.pattern!r}"
        return None


@dataclass(frozen=True)
class CheckResult:
    """One check's verdict on one gateway: what it got on its last attempt."""

    name: str
    location: str  # file:line of the check
    passed: bool
    attempts: int
    status: int | None = None
    body: str = ""  # the first BODY_SHOWN bytes of the last answer, redacted
    why: str = ""

    def describe(self) -> str:
        """``checks.yaml:3:5: check api-health failed after 4 attempts: status 502, …; body: …``."""
        got = f"; body: {self.body!r}" if self.body else ""
        return f"{self.location}: check {self.name} failed after {self.attempts} attempt(s): {self.why}{got}"


@dataclass(frozen=True)
class ChecksVerdict:
    """Every check's result on one gateway."""

    results: tuple[CheckResult, ...] = ()

    @property
    def failed(self) -> tuple[CheckResult, ...]:
        return tuple(r for r in self.results if not r.passed)

    @property
    def ok(self) -> bool:
        return not self.failed

    def to_dict(self) -> dict[str, Any]:
        """The status file's ``checks`` entry."""
        return {"passed": len(self.results) - len(self.failed), "failed": [r.describe() for r in self.failed]}


# ---------------------------------------------------------------------------------------------------------
# Parsing (pure)


def _status_text(ranges: Sequence[tuple[int, int]]) -> str:
    return ", ".join(str(low) if low == high else f"{low}-{high}" for low, high in ranges)


def _statuses(value: Any) -> tuple[tuple[int, int], ...]:
    values = value if isinstance(value, list) else [value]
    ranges = []
    for one in values:
        if isinstance(one, int) and not isinstance(one, bool):
            low = high = one
        elif isinstance(one, str) and re.fullmatch(r"\s*\d{3}\s*-\s*\d{3}\s*", one):
            low, high = (int(part) for part in one.split("-"))
        else:
            raise ValueError(f"expected a status code, a list of them, or a range like \"200-299\", "
                             f"got {one!r}")
        if not 100 <= low <= high <= 599:
            raise ValueError(f"status codes are 100 to 599, got {one!r}")
        ranges.append((low, high))
    if not ranges:
        raise ValueError("expected at least one status code")
    return tuple(ranges)


def _pattern(value: Any) -> re.Pattern[str]:
    if not isinstance(value, str):
        raise ValueError(f"expected a regular expression (a string), got {type(value).__name__}")
    try:
        return re.compile(value)
    except re.error as exc:
        raise ValueError(f"not a valid regular expression: {exc}") from None


def _text_map(value: Any) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                              for k, v in value.items()):
        raise ValueError("expected a mapping of header names to strings")
    return tuple(value.items())


def _duration(value: Any, limit: float) -> float:
    seconds = parse_duration(value)
    if not 0 < seconds <= limit:
        raise ValueError(f"must be more than 0 and at most {limit:g}s, got {value!r}")
    return seconds


_FIELDS: dict[tuple[str, ...], Callable[[Any], tuple[str, Any]]] = {
    ("request", "method"): lambda v: ("method", _choice(str(v).upper(), METHODS)),
    ("request", "path"): lambda v: ("path", _path(v)),
    ("request", "host"): lambda v: ("host", _string(v)),
    ("request", "headers"): lambda v: ("headers", _text_map(v)),
    ("request", "body"): lambda v: ("body", _string(v)),
    ("expect", "status"): lambda v: ("status", _statuses(v)),
    ("expect", "headers"): lambda v: ("expect_headers", tuple((k, _pattern(p)) for k, p in _text_map(v))),
    ("expect", "body"): lambda v: ("expect_body", _pattern(v)),
    ("timeout",): lambda v: ("timeout", _duration(v, MAX_TIMEOUT)),
    ("interval",): lambda v: ("interval", _duration(v, MAX_TIMEOUT)),
    ("retries",): lambda v: ("retries", _count(v)),
}


def _choice(value: str, choices: Sequence[str]) -> str:
    if value not in choices:
        raise ValueError(f"expected one of {', '.join(choices)}, got {value!r}")
    return value


def _path(value: Any) -> str:
    if not isinstance(value, str) or not value.startswith("/"):
        raise ValueError(f"expected a path starting with /, got {value!r}")
    return value


def _string(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"expected a string, got {type(value).__name__}")
    return value


def _count(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_RETRIES:
        raise ValueError(f"expected a whole number from 0 to {MAX_RETRIES}, got {value!r}")
    return value


def parse_checks(items: Sequence[Any], where: Callable[[int, tuple[str | int, ...]], Location],
                 ) -> tuple[list[Check], list[Problem]]:
    """The checks of the repo, and a problem at file:line for every field that is wrong.

    `where(index, path)`: the location of item `index`'s field `path` (the render's source map)."""
    checks: list[Check] = []
    problems: list[Problem] = []
    for index, item in enumerate(items):
        before = len(problems)

        def problem(path: tuple[str | int, ...], message: str, index: int = index,
                    item: Any = item) -> None:
            name = item.get("name") if isinstance(item, dict) else None
            field_name = ".".join(str(p) for p in path) or None
            problems.append(Problem(message, where(index, path), CHECKS, str(name) if name else None,
                                    field_name))

        if not isinstance(item, dict):
            problem((), f"a check is a mapping with name, request and expect, not {type(item).__name__}")
            continue
        name = item.get("name")
        if not isinstance(name, str) or not NAME.match(name):
            problem(("name",), "every check needs a name: letters, digits, '.', '_' or '-', at most 64")
            continue
        known = ("name", "request", "expect", "timeout", "retries", "interval")
        for key in (k for k in item if k not in known):
            problem((key,), f"unknown field {key!r} (expected one of {', '.join(known)})")
        values: dict[str, Any] = {}
        for path, convert in _FIELDS.items():
            value: Any = item
            for step in path:
                value = value.get(step) if isinstance(value, dict) else None
            if value is None:
                continue
            try:
                key, converted = convert(value)
            except ValueError as exc:
                problem(path, str(exc))
                continue
            values[key] = converted
        for section in ("request", "expect"):
            if section in item and not isinstance(item[section], dict):
                problem((section,), f"{section} is a mapping")
        if len(problems) == before:
            checks.append(Check(name=name, location=where(index, ()), **values))
    return checks, problems


# ---------------------------------------------------------------------------------------------------------
# Running


def run_checks(checks: Sequence[Check], base_url: str, client: HttpClient,
               sleep: Callable[[float], None] = time.sleep) -> ChecksVerdict:
    """Every check against one gateway's data plane (`base_url`), each with its retries."""
    return ChecksVerdict(tuple(run_check(check, base_url, client, sleep) for check in checks))


def run_check(check: Check, base_url: str, client: HttpClient,
              sleep: Callable[[float], None] = time.sleep) -> CheckResult:
    headers = [(k.encode(), v.encode()) for k, v in check.headers]
    if check.host:
        headers.insert(0, (b"Host", check.host.encode()))
    url = base_url.rstrip("/") + check.path
    body = check.body.encode() if check.body is not None else None
    why, status, shown = "no attempt", None, ""
    for attempt in range(1, check.retries + 2):
        try:
            answer = client.request(check.method, url, headers=headers, body=body, limit=MAX_BODY_READ,
                                    timeout=check.timeout)
        except HttpError as exc:
            why, status, shown = f"no answer: {exc}", None, ""
        else:
            failure = check.judge(answer)
            if failure is None:
                return CheckResult(check.name, str(check.location), True, attempt, answer.status)
            why, status = failure, answer.status
            shown = redact(answer.body[:BODY_SHOWN].decode("utf-8", "replace"))
        if attempt <= check.retries:
            sleep(check.interval)
    return CheckResult(check.name, str(check.location), False, check.retries + 1, status, shown, why)


def proxy_urls(gateways: Sequence[str], proxies: Sequence[str]) -> Mapping[str, str]:
    """Each gateway's data-plane base URL, paired by position (like status_urls)."""
    return {gateway: proxy for gateway, proxy in zip(gateways, proxies, strict=False)}


__all__ = ["CHECKS", "Check", "CheckResult", "ChecksVerdict", "parse_checks", "proxy_urls", "run_checks"]

