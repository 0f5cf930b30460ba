"""Logging: loguru to stderr, human or JSON lines, with secret values scrubbed.

A JSON line is one compact object (`JSON_FIELDS`): time, level, message, logger, then the context
bound with `set_agent` and `context` (agent, commit, gateway) when known, any other bound field, and
the exception's text when there is one. docs/operations.md ("Logs") documents the fields.

Redaction happens in the sink, on the final text of each line, because that is
the only place that also sees exception text (a loguru patcher does not). Any
value registered with `register_secret` is replaced by ``***`` wherever it
appears, in any spelling (`spellings`), whole or cut short: message, ``extra``
fields, tracebacks.
"""

from __future__ import annotations

import bisect
import contextlib
import functools
import json
import logging
import re
import sys
import threading
import traceback
from collections.abc import Iterable, Iterator
from datetime import UTC
from types import TracebackType
from typing import Any, TextIO
from urllib.parse import quote, quote_plus

from loguru import logger

MASK = "***"
#: Shorter values would mask ordinary words wherever they appear: gitsync refuses them where it loads a
#: secret by name (settings, ``${{ secrets.NAME }}``); a shorter value decrypted from a SOPS file is
#: masked only where it stands as a whole quoted value.
MIN_SECRET_LENGTH = 4
#: How a cut text is marked: a value's first characters followed by one of these (or its last ones
#: preceded by one) are masked as the value. An ellipsis only, plain or as JSON writes it: gitsync
#: marks every cut (`clip`), and the end of a text or line is no sign of one (an agent named
#: ``gitsync-demo`` is not a cut ``gitsync-demo-key``).
CUT_MARKERS = ("…", "...", "\\u2026")
_CUT = re.compile("|".join(re.escape(marker) for marker in CUT_MARKERS))


def _json_body(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)[1:-1]


def _json_ascii_body(text: str) -> str:
    return json.dumps(text)[1:-1]


def _cjson_body(text: str) -> str:
    """APISIX's cjson also writes ``/`` as ``\\/``."""
    return _json_body(text).replace("/", "\\/")


def _slashed_ascii_body(text: str) -> str:
    """JSON with both ``\\/`` and ``\\uXXXX`` (PHP's and other encoders' default)."""
    return _json_ascii_body(text).replace("/", "\\/")


def _lua_body(text: str) -> str:
    from gitsync.problems import lua_quote

    return lua_quote(text)[1:-1]


def _repr_bodies(text: str) -> tuple[str, str]:
    """Python's repr inside its quotes, as it picks them, and single-quoted (a repr of a longer text)."""
    return repr(text)[1:-1], repr(text + '"')[1:-2]


def _one_line(text: str) -> str:
    from gitsync.problems import one_line

    return one_line(text)


#: Each way gitsync (or a gateway, or a library) may write a value inside a longer text.
_ESCAPES = (_json_body, _json_ascii_body, _cjson_body, _slashed_ascii_body, _lua_body, _one_line,
            lambda t: ascii(t)[1:-1], lambda t: quote(t, safe=""), quote, quote_plus)
#: What gitsync applies to a whole text that may already hold an escaped value: a JSON log line,
#: a JSON state file, one problem per line.
_WRAPPERS = (_json_body, _json_ascii_body, _one_line)


@functools.lru_cache(maxsize=512)
def spellings(value: str) -> frozenset[str]:
    """Every spelling of `value` a message may hold: the value, stripped, each of its lines, and each
    of those escaped once (JSON, cjson, Lua ``%q``, Python repr, URL encoding, one-line) or twice."""
    plain = {value, value.strip()}
    lines = value.splitlines()
    if len(lines) > 1:
        plain |= set(lines) | {line.strip() for line in lines}
    plain = {p for p in plain if p}
    escaped = {escape(p) for p in plain for escape in _ESCAPES} | {b for p in plain for b in _repr_bodies(p)}
    twice = {wrap(e) for e in escaped for wrap in _WRAPPERS}
    return frozenset(plain | escaped | twice)


class Redactor:
    """Masks a set of secret values in any text, whole or cut short, in every spelling of `spellings`.

    A value of `MIN_SECRET_LENGTH` or more is masked wherever it appears, as a whole word (`_mask_whole`:
    a value inside a longer word takes the whole word with it, never leaving half of it), and its first (last)
    characters too where the text was cut right after (before) them. A shorter value is masked only
    as a whole quoted value (``"x#y"``), or with `whole_words`, wherever it stands as a word.
    """

    def __init__(self, whole_words: bool = False) -> None:
        self.whole_words = whole_words
        self._lock = threading.Lock()
        self._values: set[str] = set()
        self._long: tuple[str, ...] = ()
        self._longest = 0
        self._heads: dict[str, tuple[str, ...]] = {}
        self._tails: dict[str, tuple[str, ...]] = {}
        self._ends: re.Pattern[str] | None = None  # finds each head or tail, overlapping
        self._short: re.Pattern[str] | None = None

    def add(self, values: Iterable[str]) -> None:
        with self._lock:
            fresh = {v for v in values if v and v.strip()} - self._values
            if not fresh:
                return
            self._values |= fresh
            long_ones: set[str] = set(self._long)
            short: set[str] = set()
            for value in fresh:
                for spelling in spellings(value):
                    (long_ones if len(spelling) >= MIN_SECRET_LENGTH else short).add(spelling)
            # Longest first, so a secret that contains another is masked whole.
            self._long = tuple(sorted(long_ones, key=len, reverse=True))
            self._longest = len(self._long[0]) if self._long else 0
            heads: dict[str, list[str]] = {}
            tails: dict[str, list[str]] = {}
            for spelling in self._long:
                heads.setdefault(spelling[:MIN_SECRET_LENGTH], []).append(spelling)
                tails.setdefault(spelling[-MIN_SECRET_LENGTH:], []).append(spelling)
            self._heads = {k: tuple(v) for k, v in heads.items()}
            self._tails = {k: tuple(v) for k, v in tails.items()}
            grams = sorted({*heads, *tails})
            self._ends = re.compile("(?=(" + "|".join(re.escape(g) for g in grams) + "))") if grams else None
            if short:
                previous = self._short.pattern + "|" if self._short is not None else ""
                alternatives = "|".join(re.escape(s) for s in sorted(short, key=len, reverse=True))
                if self.whole_words:
                    body = rf"(?<!\w)(?:{alternatives})(?!\w)"
                else:  # quoted whole, as messages quote a value: "v", 'v', \"v\"
                    body = rf"(?<=[\"'])(?:{alternatives})(?=\\?[\"'])"
                self._short = re.compile(previous + body)

    def __bool__(self) -> bool:
        return bool(self._values)

    def redact(self, text: str) -> str:
        """`text` with every known value, whole or cut, replaced by ``***``."""
        long_ones, short = self._long, self._short
        if not long_ones and short is None:
            return text
        for spelling in long_ones:
            if spelling in text:
                text = _mask_whole(text, spelling)
        text = self._cut_ends(text)
        if short is not None:
            text = short.sub(MASK, text)
        return text

    def _cut_ends(self, text: str) -> str:
        """Mask a value's first characters where the text was cut after them, and its last ones where
        it was cut before them: a message shortened mid-secret must not keep the part it shows."""
        heads, tails, ends, size = self._heads, self._tails, self._ends, MIN_SECRET_LENGTH
        if ends is None:
            return text
        markers = [(m.start(), m.end()) for m in _CUT.finditer(text)]
        if not markers:
            return text
        befores = {begin for begin, _ in markers}  # a marker follows
        afters = {end for _, end in markers}  # a marker precedes
        # A cut value lies within one spelling's length of a marker: only there is it looked for.
        reach = self._longest
        regions = _merged([(max(0, c - reach), c) for c in befores] + [(c, c + reach) for c in afters])
        cut_before = sorted(befores | {len(text) + 1})  # with sentinels: a bisect never runs off the end
        cut_after = sorted(afters | {-1})
        spans: list[tuple[int, int]] = []
        for low, high in regions:
            for found in ends.finditer(text, low, high):
                start, window = found.start(), found.group(1)
                for spelling in heads.get(window, ()):
                    nearest = cut_before[bisect.bisect_left(cut_before, start + size)]
                    if nearest >= start + len(spelling):
                        continue  # no cut within reach
                    end = start + _common_prefix(text, start, spelling)
                    if end in befores and end - start < len(spelling):
                        spans.append((start, end))
                end = start + size
                for spelling in tails.get(window, ()):
                    nearest = cut_after[bisect.bisect_right(cut_after, start) - 1]
                    if nearest <= end - len(spelling):
                        continue
                    begin = end - _common_suffix(text, end, spelling)
                    if begin in afters and end - begin < len(spelling):
                        spans.append((begin, end))
        if not spans:
            return text
        out: list[str] = []
        last = 0
        for begin, end in _merged(spans):
            out += [text[last:begin], MASK]
            last = end
        out.append(text[last:])
        return "".join(out)


_WORD_BEFORE = re.compile(r"\w+$")
_WORD_AFTER = re.compile(r"^\w+")


def _mask_whole(text: str, spelling: str) -> str:
    """`text` with each `spelling` masked as a whole value: where it is part of a longer word (a secret
    ``short`` in ``shorter``), the whole word goes, never half of it (``*** than``, not ``***er than``).
    The mask never shrinks below the value, so a secret written against other characters (``ab`` +
    secret) is masked all the same, with them."""
    out: list[str] = []
    last = 0
    start = text.find(spelling)
    while start >= 0:
        begin, end = start, start + len(spelling)
        if spelling[0].isalnum() or spelling[0] == "_":
            before = _WORD_BEFORE.search(text, last, begin)
            begin = before.start() if before else begin
        if spelling[-1].isalnum() or spelling[-1] == "_":
            after = _WORD_AFTER.search(text[end:])
            end += after.end() if after else 0
        out += [text[last:begin], MASK]
        last = end
        start = text.find(spelling, last)
    out.append(text[last:])
    return "".join(out)


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Overlapping spans as one."""
    merged: list[tuple[int, int]] = []
    for begin, end in sorted(spans):
        if merged and begin <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((begin, end))
    return merged


def _common_prefix(text: str, start: int, spelling: str) -> int:
    """How many first characters of `spelling` `text` holds from `start` (binary search: C compares)."""
    low, high = 0, min(len(spelling), len(text) - start)
    while low < high:
        middle = (low + high + 1) // 2
        if text.startswith(spelling[:middle], start):
            low = middle
        else:
            high = middle - 1
    return low


def _common_suffix(text: str, end: int, spelling: str) -> int:
    """How many last characters of `spelling` `text` holds just before `end`."""
    low, high = 0, min(len(spelling), end)
    while low < high:
        middle = (low + high + 1) // 2
        if text.endswith(spelling[-middle:], 0, end):
            low = middle
        else:
            high = middle - 1
    return low


_REDACTOR = Redactor()


def register_secret(value: str | bytes | None) -> None:
    """Remember a secret value so that no log line, error or note ever shows it, in any spelling."""
    if value is None:
        return
    text = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
    _REDACTOR.add([text])


def register_secrets(values: Iterable[str]) -> None:
    """`register_secret` for many values at once (those already known cost a set lookup each)."""
    _REDACTOR.add(values)


def redact(text: str) -> str:
    """Return `text` with every registered secret value replaced by ``***``."""
    return _REDACTOR.redact(text)


def clip(text: str, limit: int) -> str:
    """`text` redacted, then cut to `limit` characters (``…`` marks the cut): never cut first, or a
    secret across the limit would leave its start behind, masked by no full match."""
    text = redact(text)
    return text[:limit] + "…" if len(text) > limit else text


def forget_secrets() -> None:
    """Drop every registered secret (tests only)."""
    global _REDACTOR
    _REDACTOR = Redactor()


#: The context a JSON line carries when it is known: the agent's name (`set_agent`), the commit a sync
#: is applying and the gateway a push is for (`context`).
CONTEXT_FIELDS = ("agent", "commit", "gateway")
#: The fields of a JSON line, in their order; any other bound field follows the context, under its
#: own name (one that would hide one of these is prefixed with ``extra_``).
JSON_FIELDS = ("time", "level", "message", "logger", *CONTEXT_FIELDS, "exception")


class _ScrubbingSink:
    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def write(self, message: str) -> None:
        self.stream.write(redact(message))
        self.stream.flush()


class _JsonSink(_ScrubbingSink):
    """One compact JSON object per record (`json_line`), scrubbed like a human line."""

    def write(self, message: str) -> None:
        record = getattr(message, "record", None)
        super().write(json_line(record) if record is not None else message)


def json_line(record: Any) -> str:
    """A loguru record as one line of compact JSON: the `JSON_FIELDS` it has, each text redacted."""
    out: dict[str, Any] = {
        "time": _rfc3339(record["time"]),
        "level": record["level"].name,
        "message": redact(record["message"]),
        "logger": record["name"],
    }
    extra: dict[str, Any] = record["extra"]
    for key in CONTEXT_FIELDS:
        if extra.get(key) is not None:
            out[key] = redact(str(extra[key]))
    for key, value in extra.items():
        if key not in CONTEXT_FIELDS:
            out["extra_" + key if key in JSON_FIELDS else key] = _redacted(value)
    exception = record["exception"]
    if exception is not None and exception.type is not None:
        text = "".join(traceback.format_exception(exception.type, exception.value, exception.traceback))
        out["exception"] = redact(text.rstrip("\n"))
    return json.dumps(out, ensure_ascii=False, separators=(",", ":"), default=str) + "\n"


def _rfc3339(moment: Any) -> str:
    """UTC, milliseconds, ``Z``: ``2026-12-02T08:15:03.127Z``."""
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _redacted(value: Any) -> Any:
    """A bound field's value for JSON: numbers, booleans and null as they are, anything else as its
    redacted text."""
    if value is None or isinstance(value, bool | int | float):
        return value
    return redact(str(value))


def _human_format(record: dict) -> str:
    """loguru format template: time, level, module, message, then ``key=value`` for each bound extra
    (the context fields aside: a human line names its gateway and commit in its message)."""
    tail = "".join(f" {key}={{extra[{key}]}}" for key in record["extra"] if key not in CONTEXT_FIELDS)
    return (
        "{time:YYYY-MM-DD HH:mm:ss.SSS} {level: <7} {name} {message}" + tail + "\n{exception}"
    )


def _message_only(record: dict) -> str:
    return "{message}"


def set_agent(name: str | None) -> None:
    """Every record after this carries `name` as its ``agent`` (none: no agent field)."""
    logger.configure(extra={"agent": name} if name else {})


@contextlib.contextmanager
def context(**fields: str | None) -> Iterator[None]:
    """Records logged within (in this thread or task) carry these fields; None ones are left out."""
    with logger.contextualize(**{key: value for key, value in fields.items() if value is not None}):
        yield


def setup(*, verbose: int = 0, json_lines: bool = False, stream: TextIO | None = None,
          level: str | None = None) -> None:
    """Configure the one loguru sink: stderr (or `stream`), INFO by default, DEBUG with -v.

    `level` overrides the level `verbose` implies (the demo keeps its narration clear at WARNING).
    """
    if level is None:
        level = "TRACE" if verbose >= 2 else "DEBUG" if verbose >= 1 else "INFO"
    logger.remove()
    set_agent(None)
    if json_lines:
        # The line is made from the record (`json_line`): loguru formats nothing but the message.
        json_sink = _JsonSink(stream or sys.stderr)
        logger.add(json_sink.write, level=level, format=_message_only, diagnose=False, backtrace=False,
                   colorize=False)
    else:
        sink = _ScrubbingSink(stream or sys.stderr)
        logger.add(sink.write, level=level, format=_human_format, diagnose=False, backtrace=False,
                   colorize=False)


class _StdlibBridge(logging.Handler):
    """Records of libraries that log through `logging` (dulwich, httpx, APScheduler), sent to the
    loguru sink so that they are scrubbed like gitsync's own. Without it Python's last-resort
    handler prints them on stderr as they are (dulwich quotes a malformed ``http.extraHeader``
    value, token included; APScheduler prints the traceback of a job that raised)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            level: str | int = logger.level(record.levelname).name
        except ValueError:
            level = record.levelno
        try:
            message = record.getMessage()
        except Exception:  # a library's bad format string must not lose the record
            message = str(record.msg)
        logger.patch(lambda r: r.update(name=record.name)).opt(exception=record.exc_info).log(
            level, "{}", message)


_BRIDGE = _StdlibBridge(level=logging.WARNING)


def _log_uncaught(kind: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
    """sys.excepthook: the traceback as a log record (one JSON line with --log-json), scrubbed."""
    if issubclass(kind, KeyboardInterrupt):
        sys.__excepthook__(kind, exc, tb)
        return
    logger.opt(exception=(kind, exc, tb)).critical("uncaught exception")


def _log_uncaught_in_thread(args: threading.ExceptHookArgs) -> None:
    if args.exc_type is SystemExit or args.exc_value is None:
        return
    name = args.thread.name if args.thread is not None else "?"
    logger.opt(exception=(args.exc_type, args.exc_value, args.exc_traceback)).critical(
        "uncaught exception in thread {}", name)


def guard_process() -> None:
    """Make the whole process's error output go through the redactor (the command line calls it).

    Third-party `logging` records (WARNING and above) and the traceback of an uncaught exception,
    in the main thread or any other, go to the loguru sink: Python itself would print them on
    stderr as they are, an exception message quoting a secret value included.
    """
    root = logging.getLogger()
    if _BRIDGE not in root.handlers:
        root.addHandler(_BRIDGE)
    sys.excepthook = _log_uncaught
    threading.excepthook = _log_uncaught_in_thread


__all__ = ["CONTEXT_FIELDS", "JSON_FIELDS", "MASK", "Redactor", "clip", "context", "forget_secrets",
           "guard_process", "json_line", "logger", "redact", "register_secret", "register_secrets",
           "set_agent", "setup", "spellings"]
