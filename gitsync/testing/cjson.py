"""JSON the way APISIX's lua-cjson reads and writes it: its error messages and number precision.

APISIX answers a malformed body with cjson's own parser message (``invalid
request body: Expected object key string but found invalid token at character
2``) and stores numbers with 14 significant digits. The double reproduces both.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from gitsync.schema.jsonschema import is_number

MAX_DEPTH = 1000
_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?")
_LITERALS = {"true": "T_BOOLEAN", "false": "T_BOOLEAN", "null": "T_NULL"}
_PUNCTUATION = {"{": "T_OBJ_BEGIN", "}": "T_OBJ_END", "[": "T_ARR_BEGIN", "]": "T_ARR_END",
                ":": "T_COLON", ",": "T_COMMA"}


class CJsonError(ValueError):
    """A body cjson refuses, with cjson's message."""


class _Parser:
    """Just enough of cjson's tokenizer and grammar to name the first error as cjson does."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.depth = 0

    def token(self) -> tuple[str, int, str]:
        """(type, 0-based index, error text for T_ERROR)."""
        text = self.text
        while self.pos < len(text) and text[self.pos] in " \t\n\r":
            self.pos += 1
        start = self.pos
        if start >= len(text):
            return "T_END", start, ""
        char = text[start]
        if char in _PUNCTUATION:
            self.pos += 1
            return _PUNCTUATION[char], start, ""
        if char == '"':
            return self._string(start)
        if char == "-" or char.isdigit():
            match = _NUMBER.match(text, start)
            if not match:
                return "T_ERROR", start, "invalid number"
            self.pos = match.end()
            return "T_NUMBER", start, ""
        for literal, kind in _LITERALS.items():
            if text.startswith(literal, start):
                self.pos += len(literal)
                return kind, start, ""
        return "T_ERROR", start, "invalid token"

    def _string(self, start: int) -> tuple[str, int, str]:
        text = self.text
        pos = start + 1
        while pos < len(text):
            char = text[pos]
            if char == '"':
                self.pos = pos + 1
                return "T_STRING", start, ""
            if char == "\\":
                if pos + 1 >= len(text):
                    break
                escape = text[pos + 1]
                if escape == "u":
                    if not re.fullmatch(r"[0-9a-fA-F]{4}", text[pos + 2:pos + 6]):
                        return "T_ERROR", pos, "invalid unicode escape code"
                    pos += 6
                    continue
                if escape not in '"\\/bfnrt':
                    return "T_ERROR", pos, "invalid escape code"
                pos += 2
                continue
            pos += 1
        return "T_ERROR", len(text), "unexpected end of string"

    @staticmethod
    def fail(expected: str, token: tuple[str, int, str]) -> CJsonError:
        kind, index, error = token
        found = error if kind == "T_ERROR" else kind
        return CJsonError(f"Expected {expected} but found {found} at character {index + 1}")

    def value(self, token: tuple[str, int, str]) -> None:
        kind = token[0]
        if kind in ("T_OBJ_BEGIN", "T_ARR_BEGIN"):
            self.depth += 1
            if self.depth > MAX_DEPTH:
                raise CJsonError(f"Found too many nested data structures ({self.depth}) at character "
                                 f"{token[1] + 1}")
            (self.object if kind == "T_OBJ_BEGIN" else self.array)()
            self.depth -= 1
        elif kind not in ("T_STRING", "T_NUMBER", "T_BOOLEAN", "T_NULL"):
            raise self.fail("value", token)

    def object(self) -> None:
        token = self.token()
        if token[0] == "T_OBJ_END":
            return
        while True:
            if token[0] != "T_STRING":
                raise self.fail("object key string", token)
            colon = self.token()
            if colon[0] != "T_COLON":
                raise self.fail("colon", colon)
            self.value(self.token())
            token = self.token()
            if token[0] == "T_OBJ_END":
                return
            if token[0] != "T_COMMA":
                raise self.fail("comma or object end", token)
            token = self.token()

    def array(self) -> None:
        token = self.token()
        if token[0] == "T_ARR_END":
            return
        while True:
            self.value(token)
            token = self.token()
            if token[0] == "T_ARR_END":
                return
            if token[0] != "T_COMMA":
                raise self.fail("comma or array end", token)
            token = self.token()

    def document(self) -> None:
        self.value(self.token())
        end = self.token()
        if end[0] != "T_END":
            raise self.fail("the end", end)


def decode(data: bytes) -> Any:
    """Decode like ``core.json.decode``; raise `CJsonError` with cjson's message."""
    text = data.decode("utf-8", "surrogateescape")
    try:
        return json.loads(text, strict=False)
    except ValueError as exc:
        try:
            _Parser(text).document()
        except CJsonError as cjson_error:
            raise cjson_error from None
        raise CJsonError(str(exc)) from None


def as_double(value: int | float) -> float:
    """A JSON number as cjson reads it: the nearest double (Python keeps integers exact, Lua cannot)."""
    try:
        return float(value)
    except OverflowError:
        return math.copysign(math.inf, value)


def round_numbers(value: Any) -> Any:
    """What a value becomes once cjson has stored it (14 significant digits, integers as integers)."""
    if is_number(value):
        number = float(format(value, ".14g"))
        return int(number) if number.is_integer() and abs(number) < 2**53 else number
    if isinstance(value, list):
        return [round_numbers(v) for v in value]
    if isinstance(value, dict):
        return {k: round_numbers(v) for k, v in value.items()}
    return value


def empty_arrays_as_objects(value: Any) -> Any:
    """GET's ``core.json.encode(config, true)`` quirk: every empty array is rendered ``{}``."""
    if isinstance(value, list):
        return [empty_arrays_as_objects(v) for v in value] if value else {}
    if isinstance(value, dict):
        return {k: empty_arrays_as_objects(v) for k, v in value.items()}
    return value
