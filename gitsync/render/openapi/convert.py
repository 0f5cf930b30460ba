"""One declared spec → its APISIX items and their provenance, or its problems: a pure function of the
declaration, the repo's documents and where their nodes are."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gitsync.problems import Location, Problem
from gitsync.render.openapi.adc import Converter, Service
from gitsync.render.openapi.declaration import Declaration
from gitsync.render.openapi.items import Item, items
from gitsync.render.openapi.refs import MISSING, Documents, Place, Resolver
from gitsync.render.openapi.spec import METHODS, Spec


@dataclass
class Conversion:
    """What one declaration renders: items (in payload order per kind), ADC's services (what ``adc
    convert openapi`` would write), the files it read, and its problems."""

    declaration: Declaration
    items: list[Item] = field(default_factory=list)
    services: list[Service] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)


def convert(declaration: Declaration, documents: Documents, locate: Callable[[Place], Location],
            max_items: int | None = None, listed: Callable[[str, Any], list[tuple[Place, Any]]] | None = None,
            ) -> Conversion:
    """The items of `declaration`'s spec (see `gitsync.render.openapi`), reading the repo through
    `documents`, placing its nodes with `locate` (and listing a file's references with `listed`, when
    the caller keeps them)."""
    out = Conversion(declaration)
    resolver = Resolver(documents) if listed is None else Resolver(documents, listed)
    data = documents(declaration.spec)
    if data is MISSING:
        out.problems.append(Problem(f"the spec {declaration.spec!r} is not a file of the repo under the "
                                    "configured paths", declaration.locate(("spec",)), "openapi",
                                    declaration.name, "spec"))
        return out
    if data is None:
        return out  # it could not be read: its own problems say why
    spec = Spec(declaration.spec, data, resolver, locate, declaration.server_variables)
    if spec.version is not None:
        resolver.check(declaration.spec)
        operations = _count(spec)
        if max_items is not None and operations > max_items:
            resolver.problem(spec.root.child("paths"), f"the spec has {operations:,} operations, more routes "
                             f"than max_items = {max_items:,}")
        else:
            converter = Converter(spec, declaration)
            out.services = converter.services()
            made = items(spec, declaration, out.services)
            out.items = made.items
            out.problems = [Problem(message, where) for where, message in converter.refused] + made.problems
    for name in sorted(set(declaration.server_variables) - spec.used_variables):
        if spec.version is not None:
            out.problems.append(Problem(f"no server of the spec has a variable {name!r}",
                                        declaration.locate(("server_variables", name)), "openapi",
                                        declaration.name, f"server_variables.{name}"))
    out.problems = [Problem(message, locate(place)) for place, message in resolver.problems] + out.problems
    if out.problems:
        out.items = []  # the commit is refused: what the items would say of themselves adds only noise
    return out


def _count(spec: Spec) -> int:
    paths = spec.data.get("paths")
    if not isinstance(paths, dict):
        return 0
    return sum(sum(1 for key in item if key in METHODS) for item in paths.values() if isinstance(item, dict))


__all__ = ["Conversion", "convert"]
