"""Logging: loguru to stderr, human or JSON lines, with secret values scrubbed.

Redaction happens in the sink, on the final text of each line, because that is
the only place that also sees exception text (a loguru patcher does not, see
STACK.md). Any value registered with `register_secret` is replaced by ``***``
wherever it appears: message, ``extra`` fields, tracebacks.
"""

from __future__ import annotations

import json
import sys
import threading
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
    # A value that went through JSON (serialized logs, payload echoes) is escaped.
    variants |= {json.dumps(v)[1:-1] for v in list(variants)}
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


__all__ = ["MASK", "forget_secrets", "logger", "redact", "register_secret", "setup"]
