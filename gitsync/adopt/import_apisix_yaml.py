"""A file-driven ``apisix.yaml`` → a gitsync payload, split into a layout.

The file already renders as it is (a trailing ``#END`` is a comment); importing splits
it into files per kind, item or service. What the file-driven mode has and the
API-driven mode does not is reported with its line: the ``plugins``/``stream_plugins``
lists (no effect when the Admin API drives APISIX) are left out with a note.

APISIX's own environment substitution (3.18: ``apisix/cli/file.lua``, ``var_sub``, applied to
the file's text before it is parsed) is ``${{NAME}}`` or ``${{NAME:=default}}``, blanks allowed
inside the braces, in keys and values alike, with no escape. Each becomes gitsync's
``${{ vars.NAME }}``, in keys too, and keeps its type: an unquoted value that is exactly one
reference is typed by gitsync as by APISIX, a quoted one is written quoted. What gitsync
cannot say the same way is reported at its ``file:line``: a default (gitsync has none: a
note names the variable to set and the default), a name gitsync does not take (``${{ 1A }}``,
``${{A B}}``: refused), a ``$`` right before a reference (``$${{`` is gitsync's escape of a
literal ``${{``: refused), and a value mixing references with digits, which APISIX types
after substitution when it is unquoted and gitsync keeps as text (a note).

APISIX parses the file with lyaml, which reads plain scalars as YAML 1.1 does (``yes`` is true,
``1_000`` is 1000); gitsync reads them as YAML 1.2 does. Each plain scalar the two read apart is
a note at its line, naming what to write (`gitsync.render.scalars`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from gitsync.adopt.export import live_items
from gitsync.adopt.repo_writer import TextTemplate, dollar_before, rewrite_matches
from gitsync.kinds import KINDS, VERSION_SUFFIX, item_id
from gitsync.problems import Location, Problem
from gitsync.render.load import Document, PlainTemplate, parse
from gitsync.render.sourcemap import FilePositions

_C_SPACE = " \t\n\v\f\r"
#: APISIX's pattern, ``%$%{%{%s*([%w_]+[%:%=]?.-)%s*%}%}``, in Python's words.
_APISIX_ENV = re.compile(r"\$\{\{[ \t\n\v\f\r]*([A-Za-z0-9_]+[:=]?.*?)[ \t\n\v\f\r]*\}\}", re.DOTALL)
_GITSYNC_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
#: What an unquoted value holds besides its references when APISIX might read the whole as a number.
_NUMERIC_REST = re.compile(r"[0-9.+\-eExXoO_]*\Z")
_NOT_IMPORTED = ("plugins", "stream_plugins")

Path = tuple[str | int, ...]


@dataclass
class Split:
    payload: dict[str, list[Any]]
    problems: list[Problem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    origins: dict[tuple[str, str], Location] = field(default_factory=dict)  # (kind, id) → where in the file


def _reference(match: re.Match[str]) -> tuple[str, str | None]:
    """The variable a match names and its default (None: no ``:=``), as APISIX splits them."""
    name, sep, default = match.group(1).partition(":=")
    return name, default.strip(_C_SPACE) if sep else None


def _one_reference(text: str) -> bool:
    """Whether `text` is exactly one reference (APISIX's first match spans all of it)."""
    match = _APISIX_ENV.search(text)
    return match is not None and match.span() == (0, len(text))


def _vars_text(match: re.Match[str]) -> str:
    return "${{ vars." + _reference(match)[0] + " }}"


def _to_repo_text(text: str) -> Any:
    """`text` in gitsync's syntax: each APISIX reference as ``${{ vars.NAME }}``, the rest escaped; a
    quoted value that is exactly one reference stays text (`TextTemplate`)."""
    if "${{" not in text:
        return text
    rewritten = rewrite_matches(text, _APISIX_ENV, _vars_text)
    if _one_reference(text) and not isinstance(text, PlainTemplate) and isinstance(rewritten, str):
        return TextTemplate(rewritten)
    return rewritten


def env_to_vars(value: Any) -> Any:
    """A copy of `value` with every string (keys too) in gitsync's syntax (`_to_repo_text`)."""
    if isinstance(value, str):
        return _to_repo_text(value)
    if isinstance(value, Mapping):
        return {_to_repo_text(k) if isinstance(k, str) else k: env_to_vars(v) for k, v in value.items()}
    if isinstance(value, list):
        return [env_to_vars(v) for v in value]
    return value


def _strings(value: Any, path: Path = ()) -> Iterator[tuple[Path, str, bool]]:
    """Every string in `value`, keys too: (path, text, is a key)."""
    if isinstance(value, str):
        yield path, value, False
    elif isinstance(value, Mapping):
        for key, child in value.items():
            if isinstance(key, str):
                yield (*path, key), key, True
            yield from _strings(child, (*path, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            yield from _strings(child, (*path, index))


@dataclass
class _References:
    """What the references of one file say: refusals, notes, and each variable's first place."""

    problems: list[Problem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    first: dict[str, Location] = field(default_factory=dict)


def _check_text(text: str, is_key: bool, where: Location, out: _References) -> None:
    matches = list(_APISIX_ENV.finditer(text))
    for match in matches:
        name, default = _reference(match)
        shown = match.group(0)
        if not _GITSYNC_NAME.match(name):
            out.problems.append(Problem(f"{shown}: APISIX reads the variable {name!r}, a name gitsync's "
                                        "${{ vars.NAME }} does not take (letters, digits and _, not a digit "
                                        "first): rename it", where))
            continue
        if text[:match.start()].endswith("$"):
            out.problems.append(Problem(dollar_before("$" + shown, name, "APISIX"), where))
        out.first.setdefault(name, where)
        if default is not None:
            out.notes.append(f"{where}: {shown} became ${{{{ vars.{name} }}}}: gitsync has no defaults; set "
                             f"GITSYNC_VAR_{name} or [render.vars] {name} (the file's default: {default!r})")
    mixed = not is_key and matches and not _one_reference(text)
    if mixed and _NUMERIC_REST.match(_APISIX_ENV.sub("", text)):
        out.notes.append(f"{where}: {text!r}: unquoted, APISIX types this value after substitution (a "
                         "number, if the values make one); gitsync keeps a value that is more than one "
                         "${{ vars.X }} text: write one ${{ vars.X }} holding the whole value if a number")


def references(name: str, documents: list[Document], data: bytes) -> _References:
    """Every APISIX reference in the file's documents, checked (see the module)."""
    out = _References()
    positions = FilePositions({name: data})
    for doc in documents:
        for path, text, is_key in _strings(doc.data):
            if "${{" in text:
                _check_text(text, is_key, positions.location(name, doc.index, path), out)
    return out


def _items(name: str, documents: list[Document], out: Split,
           ) -> tuple[dict[str, list[Any]], dict[str, list[Location]]]:
    """Every document's items by kind, in order, with where each was written; what is not imported is
    told in `out`."""
    body: dict[str, list[Any]] = {}
    places: dict[str, list[Location]] = {}
    for doc in documents:
        content = doc.data
        if content is None:
            continue
        if not isinstance(content, dict):
            out.problems.append(Problem("apisix.yaml must be a mapping of kinds to lists",
                                        Location(name, *doc.pos)))
            continue
        for key, value in content.items():
            where = Location(name, *doc.key_pos.get(key, doc.pos))
            if key in _NOT_IMPORTED:
                out.notes.append(f"{where}: {key!r} is file-driven APISIX's plugin list; it has no effect in "
                                 "API-driven mode and is not imported")
            elif key.endswith(VERSION_SUFFIX):
                out.notes.append(f"{where}: {key} is not imported: gitsync chooses versions")
            elif key not in KINDS:
                out.problems.append(Problem(f"unknown top-level key {key!r} (expected one of: "
                                            f"{', '.join(KINDS)})", where))
            elif isinstance(value, list):
                body.setdefault(key, []).extend(value)
                at = doc.item_pos.get(key, ())
                places.setdefault(key, []).extend(Location(name, *at[i]) if i < len(at) else where
                                                  for i in range(len(value)))
            elif value not in (None, {}):
                out.problems.append(Problem(f"{key} must be a list of items", where, key))
    return body, places


def _syntax_hint(lines: list[bytes], line: int) -> str:
    """A hint for a YAML error on a line with a reference: APISIX substitutes before parsing."""
    if 0 < line <= len(lines) and b"${{" in lines[line - 1]:
        return (" (APISIX substitutes ${{...}} in the text before it reads the YAML; gitsync reads the YAML "
                "first: quote the value, e.g. \"${{NAME}}\")")
    return ""


def split(name: str, data: bytes) -> Split:
    """The items of one apisix.yaml, every document merged in order; problems name file:line."""
    parsed = parse(data)
    out = Split({})
    if parsed.issues:
        lines = data.split(b"\n")
        out.problems = [Problem(i.message + _syntax_hint(lines, i.line), Location(name, i.line, i.col))
                        for i in parsed.issues]
        return out
    found = references(name, parsed.documents, data)
    out.problems += found.problems
    body, places = _items(name, parsed.documents, out)
    warnings: list[str] = []
    for kind, items in live_items(body, warnings).items():
        out.payload[kind] = [env_to_vars(item) for item in items]
        for item, where in zip(items, places.get(kind, ()), strict=False):
            ident = item_id(kind, item)
            if ident is not None:
                out.origins.setdefault((kind, ident), where)
    out.notes += [f"{name}: {w}" for w in warnings]
    out.notes += [f"{name}:{w.line}:{w.col}: {w.message} (APISIX reads apisix.yaml with lyaml, a YAML 1.1 "
                  "parser: the gateway may have read it the YAML 1.1 way)" for w in parsed.warnings]
    out.notes += found.notes
    for var, where in sorted(found.first.items()):
        out.notes.append(f"{where}: ${{{{{var}}}}} became ${{{{ vars.{var} }}}}: set GITSYNC_VAR_{var} or "
                         f"[render.vars] {var}")
    return out
