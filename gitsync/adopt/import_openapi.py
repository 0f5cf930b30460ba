"""``gitsync import openapi SPEC…``: OpenAPI specs → the items a repo that declares them renders.

The same conversion as a repo's ``openapi:`` section (`gitsync.render.openapi`), one-shot: the specs
are rendered in memory, each declared as if in a file beside them (``--server-variable``,
``--request-validation`` and ``--upstream-node`` fill that declaration in), and the payload is what the
import writes. Their references are read from disk, relative to the file that holds each, but not
outside the specs' common directory (and never from the network). Every problem is reported at its
place in the spec files, nothing written.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gitsync.configfiles import is_config_file
from gitsync.problems import Location, Problem, ProblemsError
from gitsync.render import RenderOptions, render
from gitsync.render.memo import render_memo
from gitsync.render.openapi.declaration import OPENAPI
from gitsync.render.openapi.slug import slugify
from gitsync.settings import Settings

#: The declaration the import renders with: a name no spec of a directory is likely to have.
DECLARATION = "gitsync-import-openapi.yaml"


class SpecFiles(Mapping[str, bytes]):
    """The specs (and the declaration) by their names under `root`; any other file of `root` is read
    from disk when a reference asks for it (up to `max_file_size` bytes)."""

    def __init__(self, root: Path, given: Mapping[str, bytes], max_file_size: int) -> None:
        self.root, self.given, self.max_file_size = root, dict(given), max_file_size
        self.read: dict[str, bytes] = {}

    def __getitem__(self, name: str) -> bytes:
        if name in self.given:
            return self.given[name]
        if name not in self.read:
            path = self.root / name
            if not is_config_file(name) or not path.is_file():
                raise KeyError(name)
            with path.open("rb") as handle:
                self.read[name] = handle.read(self.max_file_size + 1)
        return self.read[name]

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        return name in self.given or (is_config_file(name) and (self.root / name).is_file())

    def __iter__(self) -> Iterator[str]:
        return iter(self.given)  # only the declaration and the specs are config files

    def __len__(self) -> int:
        return len(self.given)


@dataclass
class Imported:
    payload: dict[str, list[Any]]
    problems: list[Problem] = field(default_factory=list)
    origins: dict[tuple[str, str], Location] = field(default_factory=dict)


def declaration(names: list[str], args: argparse.Namespace) -> bytes:
    """The ``openapi:`` section the import renders: one entry per spec, the flags' values in each."""
    entries = []
    used: set[str] = set()
    for name in names:
        ident = slugify(Path(name).stem) or "spec"
        while ident in used:
            ident += "-2"
        used.add(ident)
        entry: dict[str, Any] = {"name": ident, "spec": name}
        if args.server_variable:
            entry["server_variables"] = dict(args.server_variable)
        if args.upstream_node:
            entry["upstream_defaults"] = {"nodes": [{"host": host, "port": port, "weight": 1}
                                                    for host, port in args.upstream_node]}
        if args.request_validation:
            entry["request_validation"] = True
        entries.append(entry)
    return json.dumps({OPENAPI: entries}, indent=1).encode()


def convert(settings: Settings, args: argparse.Namespace, files: Mapping[str, bytes]) -> Imported:
    """The payload of the specs `files` (path as given → bytes), or their problems at their places."""
    paths = {name: Path(name).resolve() for name in files}
    root = Path(os.path.commonpath([str(p.parent) for p in paths.values()]))
    names = {paths[name].relative_to(root).as_posix(): data for name, data in files.items()}
    given = {**names, DECLARATION: declaration(list(names), args)}
    shown = {paths[name].relative_to(root).as_posix(): name for name in files}
    specs = SpecFiles(root, given, settings.max_file_size)
    options = RenderOptions(max_file_size=settings.max_file_size, max_items=settings.max_items)
    try:
        rendered = render(specs, options, memo=render_memo(settings))
    except ProblemsError as exc:
        return Imported({}, [_shown(p, root, shown) for p in exc.problems])
    origins = {}
    for kind, items in rendered.payload.items():
        for index, item in enumerate(items):
            where = rendered.source_map.location(kind, index)
            if where is not None:
                origins[(kind, str(item.get("id")))] = _place(where, root, shown)
    return Imported({kind: list(items) for kind, items in rendered.payload.items()}, [], origins)


def _place(location: Location, root: Path, shown: Mapping[str, str]) -> Location:
    """A place under the specs' root as the user knows the file: as given, or its path on disk."""
    name = shown.get(location.file) or str(root / location.file)
    return Location(name, location.line, location.col)


def _shown(problem: Problem, root: Path, shown: Mapping[str, str]) -> Problem:
    if problem.location is None:
        return problem
    return Problem(problem.message, _place(problem.location, root, shown), problem.kind, problem.id,
                   problem.field)


__all__ = ["DECLARATION", "Imported", "SpecFiles", "convert", "declaration"]
