"""Health checks as the config repo declares them: parsed and checked at render, never pushed.

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
problem); running them is the push stage's (`gitsync.push.health`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from gitsync.problems import Location, Problem
from gitsync.settings import parse_duration

CHECKS = "checks"
METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
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


# ---------------------------------------------------------------------------------------------------------
# Parsing (pure)


def status_text(ranges: Sequence[tuple[int, int]]) -> str:
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


__all__ = ["CHECKS", "Check", "parse_checks"]
