"""A proto file's field types, checked as APISIX's ``protoc.lua`` (lua-protobuf) checks them.

APISIX compiles every ``protos`` item and refuses one that does not compile,
with ``protoc.lua``'s message. gitsync recognises one failure, the most common
one: a field whose type is neither a scalar nor a message or enum declared in
the file (``filename for loaded:2:13: unknown type 'strin'``). Everything it does
not understand it leaves to the gateway, so it never refuses a file APISIX takes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

SCALARS = frozenset({
    "double", "float", "int32", "int64", "uint32", "uint64", "sint32", "sint64", "fixed32", "fixed64",
    "sfixed32", "sfixed64", "bool", "string", "bytes",
})
_TOKEN = re.compile(r'\s+|//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\''
                    r"|[A-Za-z_.][\w.]*|\d[\w.]*|.", re.S)
_LABELS = frozenset({"repeated", "optional", "required"})
_SKIPPED_STATEMENTS = frozenset({"syntax", "package", "import", "option", "reserved", "extensions",
                                  "edition"})


@dataclass(frozen=True)
class _Token:
    text: str
    line: int
    column: int


def _tokens(text: str) -> list[_Token]:
    tokens = []
    line, line_start = 1, 0
    for match in _TOKEN.finditer(text):
        chunk = match.group()
        if not chunk.isspace() and not chunk.startswith(("//", "/*")):
            tokens.append(_Token(chunk, line, match.start() - line_start + 1))
        newlines = chunk.count("\n")
        if newlines:
            line += newlines
            line_start = match.start() + chunk.rindex("\n") + 1
    return tokens


class _Unsupported(Exception):
    """A construct this checker does not follow: the file is left to the gateway."""


class _Reader:
    def __init__(self, tokens: list[_Token]) -> None:
        self.tokens = tokens
        self.pos = 0
        self.declared: set[str] = set()
        self.used: list[_Token] = []

    def peek(self) -> str:
        return self.tokens[self.pos].text if self.pos < len(self.tokens) else ""

    def take(self) -> _Token:
        if self.pos >= len(self.tokens):
            raise _Unsupported
        token = self.tokens[self.pos]
        self.pos += 1
        return token

    def skip_statement(self) -> None:
        """To the end of the statement: its ``;`` (optional before a ``}``, as protoc.lua allows) or block."""
        depth = 0
        while True:
            if depth == 0 and self.peek() == "}":
                return
            text = self.take().text
            if text in "{[(":
                depth += 1
            elif text in "}])":
                depth -= 1
                if depth == 0 and text == "}":
                    return
            elif text == ";" and depth == 0:
                return

    def body(self) -> None:
        """Declarations up to the closing brace (or the end of the file at the top level)."""
        while self.peek() not in ("", "}"):
            word = self.peek()
            if word in ("message", "enum"):
                self.take()
                self.declared.add(self.take().text)
                if word == "enum":
                    self.take()  # "{"
                    while self.peek() != "}":
                        self.skip_statement()
                    self.take()
                else:
                    if self.take().text != "{":
                        raise _Unsupported
                    self.body()
                    self.take()
            elif word in _SKIPPED_STATEMENTS or word in ("service", "extend"):
                self.skip_statement()
            elif word == ";":
                self.take()
            elif word == "oneof":
                self.take()
                self.take()
                if self.take().text != "{":
                    raise _Unsupported
                self.body()
                self.take()
            else:
                self.field()

    def field(self) -> None:
        if self.peek() in _LABELS:
            self.take()
        if self.peek() == "map":
            self.skip_statement()  # map<K, V> name = N;: key and value types not followed
            return
        type_token = self.take()
        if not re.fullmatch(r"[A-Za-z_.][\w.]*", type_token.text):
            raise _Unsupported
        self.used.append(type_token)
        self.skip_statement()


def unknown_type(content: str) -> str | None:
    """``filename for loaded:L:C: unknown type 'T'`` for the first undeclared field type, else None."""
    reader = _Reader(_tokens(content))
    try:
        reader.body()
    except _Unsupported:
        return None
    for token in reader.used:
        name = token.text.lstrip(".")
        if name in SCALARS or name in reader.declared or name.rsplit(".", 1)[-1] in reader.declared:
            continue
        return f"filename for loaded:{token.line}:{token.column}: unknown type '{token.text}'"
    return None
