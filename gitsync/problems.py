"""Problems: one error shape for the whole project.

Every error a user sees about their config repo — a YAML syntax error, a schema
violation, a gateway rejecting an item, a note on a failed commit — is a
`Problem`, printed as ``file:line:col: kind[id].field: message``. Parts that are
unknown are left out, never invented.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: Characters that would break a one-line record or hide what a name really is: controls (C0, DEL,
#: C1), Unicode line and paragraph separators, and the lone surrogates that stand for bytes that are
#: not UTF-8 (``surrogateescape``).
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\udc80-\udcff]")
_C_ESCAPES = {"\a": "\\a", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\v": "\\v", "\f": "\\f",
              "\r": "\\r", '"': '\\"', "\\": "\\\\"}


def _octal(char: str) -> str:
    """A character as git writes an unprintable one: the octal escape of each of its bytes."""
    data = char.encode("utf-8", "surrogateescape")
    return "".join(f"\\{byte:03o}" for byte in data)


def quote_name(name: str) -> str:
    """A file name as one safe line: as it is when it is printable, else in double quotes with C
    escapes, the way git quotes paths (``"a\\nb.yaml"``; ``"caf\\351.yaml"`` for a byte that is not
    UTF-8). Every file name gitsync prints goes through it: a name cannot forge a log line or a
    ``file:line:col`` record, and the text always encodes as UTF-8."""
    if not _UNSAFE.search(name) and '"' not in name and "\\" not in name:
        return name
    return '"' + "".join(_C_ESCAPES.get(c) or (_octal(c) if _UNSAFE.match(c) else c) for c in name) + '"'


def lua_quote(text: str) -> str:
    """Lua's ``string.format("%q", text)``."""
    out = ['"']
    for char in text:
        if char in '"\\':
            out.append("\\" + char)
        elif char == "\n":
            out.append("\\\n")
        elif char == "\r":
            out.append("\\r")
        elif char == "\0":
            out.append("\\0")
        else:
            out.append(char)
    out.append('"')
    return "".join(out)


def one_line(text: str) -> str:
    """`text` on one line: line breaks and other control characters written as escapes (``\\n``)."""
    if not _UNSAFE.search(text):
        return text
    return _UNSAFE.sub(_escape, text)


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    if char in _C_ESCAPES:
        return _C_ESCAPES[char]
    return f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}"


@dataclass(frozen=True, order=True)
class Location:
    """Where something is in the config repo: a file and a 1-based line and column."""

    file: str
    line: int = 0
    col: int = 0

    def __str__(self) -> str:
        parts = [quote_name(self.file)]
        if self.line:
            parts.append(str(self.line))
            if self.col:
                parts.append(str(self.col))
        return ":".join(parts)


@dataclass(frozen=True)
class Problem:
    """One thing wrong, with as much of its place as is known."""

    message: str
    location: Location | None = None
    kind: str | None = None
    id: str | None = None
    field: str | None = None
    #: What the message leaves out for the person reading it (the value, the allowed ones), printed in
    #: parentheses after it: `message` stays the gateway's own words where they are its.
    detail: str | None = None

    def subject(self) -> str:
        """The ``kind[id].field`` part, or ``""`` when nothing of it is known."""
        text = self.kind or ""
        if self.id is not None:
            text += f"[{self.id}]"
        if self.field:
            text += f".{self.field}" if text else self.field
        return text

    def __str__(self) -> str:
        """One line, whatever the parts hold (a value's newline is written ``\\n``)."""
        head = [str(self.location)] if self.location else []
        subject = self.subject()
        if subject:
            head.append(subject)
        message = f"{self.message} ({self.detail})" if self.detail else self.message
        return one_line(": ".join([*head, message]))


class ProblemsError(Exception):
    """Raised when a stage refuses its input; carries every problem found, not just the first."""

    def __init__(self, stage: str, problems: list[Problem]) -> None:
        self.stage = stage
        self.problems = list(problems)
        first = str(self.problems[0]) if self.problems else "no detail"
        more = f" (and {len(self.problems) - 1} more)" if len(self.problems) > 1 else ""
        super().__init__(f"{stage} failed: {first}{more}")
