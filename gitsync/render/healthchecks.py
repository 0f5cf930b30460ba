r"""Health checks as the config repo declares them: parsed and checked at render, never pushed.

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

Checks run while a new commit waits on a gateway, so each is bounded, and refused here when it
could not run as written or within its bounds:

* the request is sent exactly as written: the path (with its ``;parameters`` and query) and the
  host must be ASCII, a character outside it percent-encoded (``/caf%C3%A9``, not ``/café``);
  header names are tokens and no value holds a control character;
* the regular expressions are RE2's (google-re2): they match in time linear in the answer, so a
  pattern like ``^(\w+\s?)*$`` cannot hold a gateway for minutes; what RE2 cannot run in linear
  time (backreferences, lookaround) is refused. RE2's ``\w``, ``\d`` and ``\s`` are ASCII;
* a repo declares at most `max_checks` checks, whose worst case on one gateway (every attempt
  timing out, every interval waited) is at most `max_check_time`; an answer's body is read up to
  `max_check_body`.
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import re2

from gitsync.limits import MAX_CHECK_BODY, MAX_CHECK_TIME, MAX_CHECKS
from gitsync.notation import parse_duration
from gitsync.problems import Location, Problem

CHECKS = "checks"
METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
MAX_RETRIES = 20
MAX_TIMEOUT = 60.0
MAX_PATTERN_MEMORY = 8 << 20  # bytes RE2 may use for one compiled pattern
_TOKEN = frozenset(string.ascii_letters + string.digits + "!#$%&'*+-.^_`|~")
_PERCENT = re.compile(r"%(?![0-9A-Fa-f]{2})")


@dataclass(frozen=True)
class CheckLimits:
    """The settings that bound a repo's checks (see the module)."""

    max_checks: int = MAX_CHECKS
    max_time: float = MAX_CHECK_TIME  # worst case of all checks on one gateway
    max_body: int = MAX_CHECK_BODY


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
    expect_headers: tuple[tuple[str, Any], ...] = ()  # (name, a compiled RE2 pattern)
    expect_body: Any = None  # a compiled RE2 pattern
    timeout: float = 2.0
    retries: int = 2
    interval: float = 1.0
    max_body: int = CheckLimits.max_body  # bytes of an answer's body read

    @property
    def worst_case(self) -> float:
        """The longest it can take: every attempt timing out, every interval between them waited."""
        return (self.retries + 1) * self.timeout + self.retries * self.interval


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


def _pattern(value: Any) -> Any:
    """A regular expression as RE2 compiles it: matched in linear time, or refused."""
    if not isinstance(value, str):
        raise ValueError(f"expected a regular expression (a string), got {type(value).__name__}")
    options = re2.Options()
    options.log_errors = False
    options.max_mem = MAX_PATTERN_MEMORY
    try:
        return re2.compile(value, options)
    except re2.error as exc:
        detail = exc.args[0].decode("utf-8", "replace") if exc.args and isinstance(exc.args[0], bytes) \
            else str(exc)
        raise ValueError(f"not a regular expression RE2 runs in linear time ({detail}); backreferences "
                         "and lookaround are not supported") from None


def _text_map(value: Any) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                              for k, v in value.items()):
        raise ValueError("expected a mapping of header names to strings")
    return tuple(value.items())


def _headers(value: Any) -> tuple[tuple[str, str], ...]:
    """Request headers as they can be sent: names are tokens, values hold no control characters."""
    headers = _text_map(value)
    for name, text in headers:
        if not name or not set(name) <= _TOKEN:
            raise ValueError(f"{name!r} is not a header name (letters, digits and !#$%&'*+-.^_`|~)")
        if any((ord(c) < 32 and c != "\t") or ord(c) == 127 for c in text):
            raise ValueError(f"header {name}: the value holds a control character")
        try:
            text.encode("latin-1")
        except UnicodeEncodeError:
            raise ValueError(f"header {name}: the value holds characters that cannot be sent "
                             "(outside Latin-1)") from None
    return headers


def _duration(value: Any, limit: float) -> float:
    seconds = parse_duration(value)
    if not 0 < seconds <= limit:
        raise ValueError(f"must be more than 0 and at most {limit:g}s, got {value!r}")
    return seconds


_FIELDS: dict[tuple[str, ...], Callable[[Any], tuple[str, Any]]] = {
    ("request", "method"): lambda v: ("method", _choice(str(v).upper(), METHODS)),
    ("request", "path"): lambda v: ("path", _path(v)),
    ("request", "host"): lambda v: ("host", _host(v)),
    ("request", "headers"): lambda v: ("headers", _headers(v)),
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
    """A path (with its ``;parameters`` and ``?query``) that is sent exactly as written."""
    if not isinstance(value, str) or not value.startswith("/"):
        raise ValueError(f"expected a path starting with /, got {value!r}")
    if not value.isascii():
        encoded = "".join(c if c.isascii() else "".join(f"%{b:02X}" for b in c.encode()) for c in value)
        raise ValueError(f"{value!r} cannot be sent as written: percent-encode what is not ASCII ({encoded})")
    if any(not c.isprintable() or c in " #" for c in value):
        raise ValueError(f"{value!r} cannot be sent as written: no spaces, control characters or '#' in a "
                         "path (percent-encode them)")
    if _PERCENT.search(value):
        raise ValueError(f"{value!r}: a '%' must start an escape like %20")
    return value


def _host(value: Any) -> str:
    host = _string(value)
    if not host or not host.isascii() or any(not c.isprintable() or c in " /?#@" for c in host):
        raise ValueError(f"{host!r} is not a host name that can be sent (ASCII; an IDN in its xn-- form)")
    return host


def _string(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"expected a string, got {type(value).__name__}")
    return value


def _count(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_RETRIES:
        raise ValueError(f"expected a whole number from 0 to {MAX_RETRIES}, got {value!r}")
    return value


def parse_checks(items: Sequence[Any], where: Callable[[int, tuple[str | int, ...]], Location],
                 limits: CheckLimits | None = None) -> tuple[list[Check], list[Problem]]:
    """The checks of the repo, and a problem at file:line for every field that is wrong, and for the
    checks beyond `limits` (their number, their worst-case time on one gateway).

    `where(index, path)`: the location of item `index`'s field `path` (the render's source map)."""
    limits = limits or CheckLimits()
    checks: list[Check] = []
    problems: list[Problem] = []
    if len(items) > limits.max_checks:
        problems.append(Problem(f"{len(items)} checks, more than max_checks ({limits.max_checks}) allows",
                                where(limits.max_checks, ()), CHECKS))
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
            checks.append(Check(name=name, location=where(index, ()), max_body=limits.max_body, **values))
    problems += _over_time(checks, limits.max_time)
    return checks, problems


def _over_time(checks: Sequence[Check], limit: float) -> list[Problem]:
    """A problem at the first check whose worst case takes the total past `limit`."""
    total = 0.0
    for check in checks:
        total += check.worst_case
        if total > limit:
            return [Problem(f"the checks could take {sum(c.worst_case for c in checks):g}s on one gateway "
                            f"(every attempt timing out: (retries + 1) × timeout + retries × interval each), "
                            f"more than max_check_time ({limit:g}s); this one passes it", check.location,
                            CHECKS, check.name)]
    return []


__all__ = ["CHECKS", "Check", "CheckLimits", "parse_checks"]
