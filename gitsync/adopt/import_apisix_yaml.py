"""A file-driven ``apisix.yaml`` → a gitsync payload, split into a layout.

The file already renders as it is (a trailing ``#END`` is a comment); importing splits
it into files per kind, item or service. What the file-driven mode has and the
API-driven mode does not is reported with its line: the ``plugins``/``stream_plugins``
lists (no effect when the Admin API drives APISIX) are left out with a note.
APISIX's own environment substitution ``${{NAME}}`` / ``${{NAME:=default}}`` becomes
``${{ vars.NAME }}``, with a note naming the variable (and its default) to set.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from gitsync.adopt.export import live_items
from gitsync.adopt.repo_writer import rewrite_matches
from gitsync.kinds import KINDS, VERSION_SUFFIX
from gitsync.problems import Location, Problem
from gitsync.render.load import parse

#: APISIX's file-driven substitution: ``${{NAME}}`` or ``${{NAME:=default}}`` (no spaces, no ``vars.``).
_APISIX_ENV = re.compile(r"\$\{\{([A-Za-z_][A-Za-z0-9_]*)(?::=([^}]*))?\}\}")
_NOT_IMPORTED = ("plugins", "stream_plugins")


@dataclass
class Split:
    payload: dict[str, list[Any]]
    problems: list[Problem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _env_to_vars(value: Any, found: dict[str, str | None]) -> Any:
    def replace(match: re.Match[str]) -> str:
        found.setdefault(match.group(1), match.group(2))
        return "${{ vars." + match.group(1) + " }}"

    return rewrite_matches(value, _APISIX_ENV, replace)


def split(name: str, data: bytes) -> Split:
    """The items of one apisix.yaml, every document merged in order; problems name file:line."""
    parsed = parse(data)
    out = Split({})
    if parsed.issues:
        out.problems = [Problem(i.message, Location(name, i.line, i.col)) for i in parsed.issues]
        return out
    body: dict[str, list[Any]] = {}
    for doc in parsed.documents:
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
            elif value not in (None, {}):
                out.problems.append(Problem(f"{key} must be a list of items", where, key))
    warnings: list[str] = []
    found: dict[str, str | None] = {}
    out.payload = {kind: _env_to_vars(items, found) for kind, items in live_items(body, warnings).items()}
    out.notes += [f"{name}: {w}" for w in warnings]
    for var, default in sorted(found.items()):
        hint = f" (the file's default was {default!r})" if default is not None else ""
        out.notes.append(f"{name}: ${{{{{var}}}}} became ${{{{ vars.{var} }}}}: set GITSYNC_VAR_{var} or "
                         f"[render.vars] {var}{hint}")
    return out
