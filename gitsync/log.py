"""Logging: loguru to stderr, human or JSON lines, with secret values scrubbed.

Redaction happens in the sink, on the final text of each line, because that is
the only place that also sees exception text (a loguru patcher does not).
Any value registered with `register_secret` is replaced by ``***``
wherever it appears: message, ``extra`` fields, tracebacks.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
from types import TracebackType
from typing import TextIO

from loguru import logger

MASK = "***"
MIN_SECRET_LENGTH = 4  # shorter values would mask ordinary words; settings refuse them instead

_lock = threading.Lock()
_secrets: set[str] = set()
_ordered: tuple[str, ...] = ()


def register_secret(value: str | bytes | None) -> None:
    """Remember a secret value so that no log line, error or note ever shows it."""
    if value is None:
        return
    text = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
    variants = {text, text.strip()}
    # APISIX's cjson writes "/" as "\/" (a gateway answer shown as it came), and a value that went
    # through JSON (serialized logs, payload echoes) is escaped, once more in JSON log lines.
    variants |= {v.replace("/", "\\/") for v in variants if "/" in v}
    variants |= {json.dumps(v, ensure_ascii=ascii)[1:-1] for v in list(variants) for ascii in (True, False)}
    global _ordered
    with _lock:
        added = {v for v in variants if len(v) >= MIN_SECRET_LENGTH} - _secrets
        if not added:
            return
        _secrets.update(added)
        # Longest first, so a secret that contains another is masked whole.
        _ordered = tuple(sorted(_secrets, key=len, reverse=True))


def redact(text: str) -> str:
    """Return `text` with every registered secret value replaced by ``***``."""
    for secret in _ordered:
        if secret in text:
            text = text.replace(secret, MASK)
    return text


def forget_secrets() -> None:
    """Drop every registered secret (tests only)."""
    global _ordered
    with _lock:
        _secrets.clear()
        _ordered = ()


class _ScrubbingSink:
    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def write(self, message: str) -> None:
        self.stream.write(redact(message))
        self.stream.flush()


def _human_format(record: dict) -> str:
    """loguru format template: time, level, module, message, then ``key=value`` for each bound extra."""
    tail = "".join(f" {key}={{extra[{key}]}}" for key in record["extra"])
    return (
        "{time:YYYY-MM-DD HH:mm:ss.SSS} {level: <7} {name} {message}" + tail + "\n{exception}"
    )


def setup(*, verbose: int = 0, json_lines: bool = False, stream: TextIO | None = None,
          level: str | None = None) -> None:
    """Configure the one loguru sink: stderr (or `stream`), INFO by default, DEBUG with -v.

    `level` overrides the level `verbose` implies (the demo keeps its narration clear at WARNING).
    """
    if level is None:
        level = "TRACE" if verbose >= 2 else "DEBUG" if verbose >= 1 else "INFO"
    logger.remove()
    sink = _ScrubbingSink(stream or sys.stderr)
    if json_lines:
        logger.add(sink.write, level=level, serialize=True, diagnose=False, backtrace=False, colorize=False)
    else:
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


__all__ = ["MASK", "forget_secrets", "guard_process", "logger", "redact", "register_secret", "setup"]
