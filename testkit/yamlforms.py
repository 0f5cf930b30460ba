"""The repo format's reading of YAML, as an oracle any parser of it can be checked against.

`gitsync.render.scalars.read` is the one reading of a plain scalar, and `gitsync.render.load.parse`
the one reading of a file. A faster parser (another path to the same documents) must give the same
values, positions, problems and warnings; this module gives a test what to check either against:

- `core_reading`: the YAML 1.2 core schema straight from the spec's regular expressions (YAML 1.2.2,
  10.3.2), written apart from gitsync's own table;
- `yaml11_reading`: what YAML 1.1 reads, by PyYAML's own resolver and constructor, with the ``y``/``n``
  booleans of the YAML 1.1 type repository (yaml.org/type/bool.html);
- `recorded`: what js-yaml 5.2.0 (ADC 0.28.0's parser) and yaml 2.9.0 (yaml-language-server's) read,
  recorded in tests/data/yaml-forms;
- `expected_reading`: what gitsync must make of a text, from the two readings above;
- strategies: `plain_texts` (texts either schema may read as something else than text) and
  `documents` (files of such scalars, with the values, positions and warnings a parse must give);
- `signature` / `assert_same_parse`: everything of a `ParsedFile` a render uses, for comparing two
  parsers of the same bytes.
"""

from __future__ import annotations

import json
import math
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from gitsync.render.load import ParsedFile

DATA = Path(__file__).resolve().parents[1] / "tests" / "data" / "yaml-forms" / "plain-scalars.jsonl"

# YAML 1.2.2, 10.3.2 "Tag Resolution" of the core schema, in its order.
_CORE = [
    ("null", re.compile(r"null|Null|NULL|~")),
    ("bool", re.compile(r"true|True|TRUE|false|False|FALSE")),
    ("int", re.compile(r"[-+]?[0-9]+")),
    ("int8", re.compile(r"0o[0-7]+")),
    ("int16", re.compile(r"0x[0-9a-fA-F]+")),
    ("float", re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?")),
    ("inf", re.compile(r"[-+]?(\.inf|\.Inf|\.INF)")),
    ("nan", re.compile(r"\.nan|\.NaN|\.NAN")),
]


def core_reading(text: str) -> tuple[str, Any]:
    """(kind, value) of a plain scalar by the YAML 1.2 core schema: null, bool, int, float, inf, nan or
    text."""
    if text == "":
        return "null", None
    for kind, rule in _CORE:
        if rule.fullmatch(text):
            if kind == "null":
                return kind, None
            if kind == "bool":
                return kind, text.lower() == "true"
            if kind == "int":
                return kind, int(text, 10)
            if kind in ("int8", "int16"):
                return "int", int(text[2:], 8 if kind == "int8" else 16)
            if kind == "float":
                return kind, float(text)
            return kind, text
    return "text", text


def yaml11_reading(text: str) -> tuple[str, Any]:
    """(kind, value) of a plain scalar as YAML 1.1 reads it: PyYAML's resolver and safe constructor
    (kinds null, bool, int, float, date, text, or error: PyYAML cannot build it), and ``y``/``n``."""
    import yaml

    if text in ("y", "Y", "n", "N"):
        return "bool", text in ("y", "Y")
    tag = yaml.resolver.Resolver().resolve(yaml.ScalarNode, text, (True, False))
    kind = tag.rsplit(":", 1)[1]
    if kind == "str":
        return "text", text
    loader = yaml.SafeLoader("")
    try:
        value = loader.construct_object(yaml.ScalarNode(tag, text))
    except Exception:  # a type PyYAML's safe loader refuses (=, <<) or a number it cannot build
        return "error", text
    finally:
        loader.dispose()
    if kind == "timestamp":
        return "date", text
    return kind, value


@dataclass(frozen=True)
class Expected:
    """What gitsync must make of a plain scalar: its value, whether it is refused, whether it is noted."""

    value: Any
    refused: bool
    noted: bool


def _fits_json(kind: str, value: Any) -> bool:
    if kind == "int":
        return abs(value) <= sys.float_info.max
    if kind == "float":
        return math.isfinite(value)
    return kind not in ("inf", "nan")


def _same(core: tuple[str, Any], yaml11: tuple[str, Any]) -> bool:
    return core[0] == yaml11[0] and type(core[1]) is type(yaml11[1]) and core[1] == yaml11[1]


def expected_reading(text: str) -> Expected:
    """gitsync reads the core schema's value, refuses what JSON cannot carry (its value: None) and YAML
    1.1's merge key (kept as text, so that keys stay apart), and notes every other text YAML 1.1 reads
    otherwise."""
    core = core_reading(text)
    if text == "<<":
        return Expected(text, True, False)
    if not _fits_json(*core):
        return Expected(None, True, False)
    return Expected(core[1], False, not _same(core, yaml11_reading(text)))


@dataclass(frozen=True)
class Recorded:
    """One text as the YAML 1.2 tools read it (tests/data/yaml-forms/README.md)."""

    text: str
    js_yaml: tuple[str, Any]
    yaml: tuple[str, Any]


def recorded() -> list[Recorded]:
    return [Recorded(text, tuple(a), tuple(b))  # type: ignore[arg-type]
            for text, a, b in map(json.loads, DATA.read_text(encoding="utf-8").splitlines())]


# ---------------------------------------------------------------------------------------------------------
# Strategies

_WORDS = ["", "~", "null", "Null", "NULL", "nULL", "true", "True", "TRUE", "tRue", "false", "FALSE",
          "yes", "Yes", "YES", "no", "No", "NO", "on", "On", "ON", "off", "Off", "OFF", "y", "Y", "n", "N",
          "=", "<<", ".inf", "-.Inf", "+.INF", ".nan", ".NaN", ".NAN", "2001-12-14",
          "2001-12-14 21:59:43.10 -5"]
_DIGITS = "0123456789abcdefABCDEF_"


@st.composite
def _numeric(draw: st.DrawFn) -> str:
    """A number in any notation of either schema, or something close to one."""
    digits = _DIGITS[:10] + "_" if draw(st.booleans()) else _DIGITS
    sign = draw(st.sampled_from(["", "", "-", "+"]))
    base = draw(st.sampled_from(["", "", "", "0", "0x", "0o", "0b"]))
    parts = [sign, base, draw(st.text(alphabet=digits, max_size=6))]
    if draw(st.booleans()):
        parts.append("." + draw(st.text(alphabet="0123456789_", max_size=4)))
    if draw(st.booleans()) and draw(st.booleans()):
        parts.append(draw(st.sampled_from(["e", "E"])) + draw(st.sampled_from(["", "-", "+"]))
                     + draw(st.text(alphabet="0123456789", min_size=1, max_size=3)))
    for _ in range(draw(st.integers(0, 2)) if draw(st.booleans()) else 0):
        parts.append(":" + draw(st.text(alphabet="0123456789", min_size=1, max_size=2)))
    return "".join(parts)


def plain_texts() -> st.SearchStrategy[str]:
    """Texts either schema may read as something else than text: numbers in every notation, the words
    of both schemas, and short texts of the characters numbers are written with."""
    return st.one_of(st.sampled_from(_WORDS), _numeric(),
                     st.text(alphabet="0123456789_.:+-xobeEaAfF", max_size=8))


def writable(text: str, flow: bool = False) -> bool:
    """Whether `text` can be written as a plain scalar after ``k: `` (or inside ``[…]`` when `flow`)
    and read back as one scalar: a YAML indicator may not start it bare, nor ``:`` end it; and in a flow
    collection the parser (libyaml's) takes no ``:`` in a plain scalar, nor ``?`` before one."""
    indicator = text[:1] in "-:?#&*!|>'\"%@`"
    if text == "" or (indicator and not (text[:1] in "-:?" and len(text) > 1 and text[1] not in " ,[]{}")):
        return False
    if text.endswith(":") or ": " in text or " #" in text or text != text.strip():
        return False
    return not (flow and (text[:1] == "?" or any(c in text for c in ",[]{}:")))


@dataclass(frozen=True)
class Case:
    """A file of plain scalars, and what its parse must give."""

    data: bytes
    content: Any  # the one document's content, values read by `expected_reading`
    refused_at: tuple[tuple[int, int], ...]  # (line, column) of each refused scalar, in file order
    noted_at: tuple[tuple[int, int], ...]  # of each scalar YAML 1.1 reads otherwise
    key_pos: dict[str, tuple[int, int]]
    item_pos: dict[str, tuple[tuple[int, int], ...]]


def key_text(value: Any) -> str:
    """A scalar key as the repo format names it (``200`` → ``"200"``, ``true`` → ``"true"``, ``~`` →
    ``"null"``)."""
    if isinstance(value, str):
        return value
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value) if isinstance(value, float) else str(value)


@st.composite
def documents(draw: st.DrawFn) -> Case:
    """A config file: kinds of items, each item a mapping of scalars (block or flow), with some scalars
    as keys, some quoted, some in flow lists; its expected parse."""
    lines: list[str] = []
    refused: list[tuple[int, int]] = []
    noted: list[tuple[int, int]] = []
    content: dict[str, Any] = {}
    key_pos: dict[str, tuple[int, int]] = {}
    item_pos: dict[str, list[tuple[int, int]]] = {}

    def scalar(line: int, col: int, flow: bool, marks: list[tuple[str, tuple[int, int]]]) -> tuple[str, Any]:
        text = draw(plain_texts().filter(lambda t: writable(t, flow)))
        if draw(st.booleans()) and draw(st.booleans()):  # a quarter quoted: always text, never noted
            return json.dumps(text), text
        expected = expected_reading(text)
        if expected.refused or expected.noted:
            marks.append(("refused" if expected.refused else "noted", (line, col)))
        return text, expected.value

    for kind in draw(st.lists(st.sampled_from(["routes", "upstreams", "services"]), min_size=1, max_size=3,
                              unique=True)):
        lines.append(f"{kind}:")
        key_pos[kind] = (len(lines), 1)
        items: list[Any] = []
        for _ in range(draw(st.integers(1, 3))):
            item: dict[str, Any] = {}
            for field in range(draw(st.integers(1, 4))):
                prefix = "  - " if not item else "    "
                line, col = len(lines) + 1, len(prefix) + 1
                marks: list[tuple[str, tuple[int, int]]] = []
                value: Any
                if draw(st.booleans()):  # a scalar key
                    written, key = scalar(line, col, False, marks)
                    name, text, value = key_text(key), f"{prefix}{written}: x{field}", f"x{field}"
                elif draw(st.booleans()):  # a flow list
                    name = f"f{field}"
                    parts, value, at = [], [], col + len(name) + 3
                    for _ in range(draw(st.integers(0, 3))):
                        written, one = scalar(line, at, True, marks)
                        parts.append(written)
                        value.append(one)
                        at += len(written) + 2
                    text = f"{prefix}{name}: [{', '.join(parts)}]"
                else:
                    name = f"v{field}"
                    written, value = scalar(line, col + len(name) + 2, False, marks)
                    text = f"{prefix}{name}: {written}"
                if name in item:
                    continue  # a duplicate key is a problem of its own: not written
                if not item:
                    item_pos.setdefault(kind, []).append((line, col))
                lines.append(text)
                item[name] = value
                for mark, at_place in marks:
                    (refused if mark == "refused" else noted).append(at_place)
            items.append(item)
        content[kind] = items
    data = ("\n".join(lines) + "\n").encode()
    return Case(data, content, tuple(sorted(refused)), tuple(sorted(noted)), key_pos,
                {k: tuple(v) for k, v in item_pos.items()})


# ---------------------------------------------------------------------------------------------------------
# Two parses of the same bytes


def signature(parsed: ParsedFile) -> tuple[Any, ...]:
    """Everything of a parsed file that a render uses: each document's index, position, content and the
    places of its top-level keys and items; the problems and warnings with their places; the flags."""
    documents = tuple((doc.index, doc.pos, doc.data, doc.key_pos, doc.item_pos) for doc in parsed.documents)
    return (documents, parsed.issues, parsed.warnings, parsed.has_templates, parsed.has_sops,
            parsed.has_secret_references, parsed.size)


def assert_same_parse(one: ParsedFile, other: ParsedFile) -> None:
    """Two parses of the same bytes agree on everything a render uses (values compared with their types:
    ``1`` and ``1.0`` and ``True`` are three values)."""
    assert _typed(signature(one)) == _typed(signature(other))


def _typed(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _typed(v) for key, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_typed(v) for v in value)
    return (type(value).__name__, value)


__all__ = ["Case", "Expected", "Recorded", "assert_same_parse", "core_reading", "documents",
           "expected_reading", "key_text", "plain_texts", "recorded", "signature", "writable",
           "yaml11_reading"]
