"""``$ref`` in an OpenAPI document: resolved in the document and in the repo's other files, never over
the network, every failure at the ``$ref``'s own place, every expansion bounded.

A reference is ``[file][#pointer]``: the file relative to the file that holds the reference (and
inside the repo), the pointer RFC 6901's (``~1`` for ``/``, ``~0`` for ``~``, percent-escapes decoded).
Two uses:

- `Resolver.follow`: an object that is a reference (a path item, a parameter, a request body) is
  taken from where it points, through a chain of at most `MAX_HOPS` references; a chain that comes
  back on itself is a cycle.
- `Resolver.expand`: a value with references inside it (a schema for request validation, an
  extension's value) is written out whole. A recursive schema cannot be written out (it is refused
  at the reference that recurses), and neither can a value that would grow past `MAX_NODES` nodes or
  `MAX_DEPTH` levels: references that expand exponentially (each level naming the next twice) are
  refused when the count passes the cap, never built to the end.

`Resolver.check` looks at every reference of a file without expanding it: one that does not resolve
makes the document invalid, wherever it is.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

#: A chain of references (a reference to a reference…) longer than this is refused.
MAX_HOPS = 32
#: Nodes (mappings, lists, scalars) one expanded value may have.
MAX_NODES = 20_000
#: Levels of nesting one expanded value may have (it goes into a route, itself nested in the payload).
MAX_DEPTH = 40
#: Nodes every expansion of one spec may produce together.
MAX_SPEC_NODES = 2_000_000

Path = tuple[str | int, ...]


@dataclass(frozen=True, order=True)
class Place:
    """Where a node is: a repo file and the path to the node in its (one) document."""

    file: str
    path: Path = ()

    def child(self, *steps: str | int) -> Place:
        return Place(self.file, (*self.path, *steps))


#: A repo file's document: `MISSING` for a file the repo does not have (under the configured paths),
#: None for one that cannot be read (its loader reports why, once, at the file).
Documents = Callable[[str], Any]

_CONTAINERS = (Mapping, list)
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
_MISSING = object()


class Expansion(Exception):
    """An expansion cannot be finished: its problem is recorded."""


@dataclass
class Resolver:
    """References of one spec's files (see the module); the problems found, each at its place."""

    documents: Documents
    #: Every reference of a file (`references`), as the caller may keep them (a file's never change).
    listed: Callable[[str, Any], list[tuple[Place, Any]]] = \
        lambda file, document: list(references(file, document))
    problems: dict[tuple[Place, str], None] = field(default_factory=dict)  # ordered, without repeats
    spent: int = 0  # nodes every expansion produced

    def problem(self, place: Place, message: str) -> None:
        self.problems.setdefault((place, message), None)

    def target(self, place: Place, ref: Any) -> tuple[Place, Any] | None:
        """What the reference `ref`, written at `place` (its ``$ref`` key), points at; None (a problem
        recorded) when it does not resolve."""
        at = place.child("$ref")
        if not isinstance(ref, str):
            self.problem(at, "a $ref must be text (a file and/or a #/json/pointer)")
            return None
        address, _, fragment = ref.partition("#")
        if _SCHEME.match(address) or address.startswith("//"):
            self.problem(at, f"$ref {ref!r} names another server: gitsync reads only the repo's files, never "
                             "the network (copy the document into the repo and refer to it by its path)")
            return None
        file = place.file
        if address:
            joined = posixpath.normpath(posixpath.join(posixpath.dirname(place.file), unquote(address)))
            if joined == ".." or joined.startswith("../") or joined.startswith("/"):
                self.problem(at, f"$ref {ref!r} leaves the repo")
                return None
            file = joined
        document = self.documents(file)
        if document is _MISSING or document is None:
            why = "cannot be read (see its own problems)" if document is None else \
                "is not a file of the repo under the configured paths"
            self.problem(at, f"$ref {ref!r}: the file {file!r} {why}")
            return None
        steps = _pointer(fragment)
        if steps is None:
            self.problem(at, f"$ref {ref!r}: the part after '#' must be empty or a JSON pointer starting "
                             "with '/'")
            return None
        node, path = document, []
        for step in steps:
            if isinstance(node, Mapping) and step in node:
                node, key = node[step], step
            elif isinstance(node, list) and step.isdigit() and str(int(step)) == step \
                    and int(step) < len(node):
                node, key = node[int(step)], int(step)
            else:
                self.problem(at, f"$ref {ref!r} does not resolve: {file!r} has no {_shown(path, step)}")
                return None
            path.append(key)
        return Place(file, tuple(path)), node

    def follow(self, place: Place, node: Any) -> tuple[Place, Any] | None:
        """The object `node` (at `place`) stands for: itself, or where its reference chain ends."""
        seen: list[Place] = []
        while isinstance(node, Mapping) and "$ref" in node:
            if place in seen or len(seen) >= MAX_HOPS:
                why = "is a cycle" if place in seen else f"is longer than {MAX_HOPS} references"
                self.problem(seen[0].child("$ref"), f"the chain of $ref from here {why}: "
                             + " → ".join(_where(p) for p in (*seen, place)))
                return None
            seen.append(place)
            found = self.target(place, node["$ref"])
            if found is None:
                return None
            place, node = found
        return place, node

    def expand(self, place: Place, node: Any, *, siblings_too: bool = False) -> Any:
        """`node` with every reference inside it written out (see the module); raises `Expansion` (its
        problem recorded). With `siblings_too` (JSON Schema 2020-12, OpenAPI 3.1) the keys beside a
        ``$ref`` apply too: ``{$ref, minLength}`` is ``allOf: [<target>, {minLength}]``."""
        budget = [min(MAX_NODES, MAX_SPEC_NODES - self.spent)]
        try:
            return self._expand(place, node, (), 0, budget, siblings_too)
        finally:
            self.spent += min(MAX_NODES, MAX_SPEC_NODES - self.spent) - budget[0]

    def _expand(self, place: Place, node: Any, stack: tuple[Place, ...], depth: int, budget: list[int],
                siblings: bool) -> Any:
        budget[0] -= 1
        if budget[0] < 0:
            self.problem(place, f"expanding the $ref here would make more than {MAX_NODES:,} nodes (or more "
                                f"than {MAX_SPEC_NODES:,} for the whole spec): refused, not built")
            raise Expansion
        if depth > MAX_DEPTH:
            self.problem(place, f"expanding the $ref here nests more than {MAX_DEPTH} levels deep")
            raise Expansion
        if isinstance(node, Mapping):
            if "$ref" in node:
                found = self.target(place, node["$ref"])
                if found is None:
                    raise Expansion
                target, value = found
                if target in stack:
                    self.problem(place.child("$ref"), "this $ref is recursive (it is inside what it refers "
                                 f"to, {_where(target)}): a recursive value cannot be written out")
                    raise Expansion
                if len(stack) >= MAX_DEPTH + MAX_HOPS:
                    self.problem(place.child("$ref"), f"more than {MAX_DEPTH + MAX_HOPS} references "
                                 "inside one another here")
                    raise Expansion
                inner = self._expand(target, value, (*stack, target), depth, budget, siblings)
                rest = {k: v for k, v in node.items() if k != "$ref"} if siblings else {}
                if not rest:
                    return inner
                return {"allOf": [inner, self._expand(place, rest, stack, depth + 1, budget, siblings)]}
            return {key: self._expand(place.child(key), value, stack, depth + 1, budget, siblings)
                    for key, value in node.items()}
        if isinstance(node, list):
            return [self._expand(place.child(i), value, stack, depth + 1, budget, siblings)
                    for i, value in enumerate(node)]
        return node

    def check(self, file: str) -> None:
        """Every reference in `file`'s document, and in the files they name, resolves (none expanded)."""
        pending, done = [file], set()
        while pending:
            current = pending.pop()
            if current in done:
                continue
            done.add(current)
            document = self.documents(current)
            if document is None or document is _MISSING:
                continue
            for place, ref in self.listed(current, document):
                found = self.target(place, ref)
                if found is not None and found[0].file not in done:
                    pending.append(found[0].file)


def references(file: str, document: Any) -> Iterator[tuple[Place, Any]]:
    """(the place of the object holding it, the reference) of every ``$ref`` in a document."""
    stack: list[tuple[Path, Any]] = [((), document)]
    while stack:
        path, node = stack.pop()
        if isinstance(node, Mapping):
            if isinstance(node.get("$ref"), str):
                yield Place(file, path), node["$ref"]
            stack += [((*path, key), value) for key, value in node.items() if isinstance(value, _CONTAINERS)]
        elif isinstance(node, list):
            stack += [((*path, i), value) for i, value in enumerate(node) if isinstance(value, _CONTAINERS)]


def _pointer(fragment: str) -> list[str] | None:
    if not fragment:
        return []
    if not fragment.startswith("/"):
        return None
    return [unquote(step).replace("~1", "/").replace("~0", "~") for step in fragment[1:].split("/")]


def _shown(path: list[str | int], step: str) -> str:
    return "/".join(["#", *map(str, path), step])


def _where(place: Place) -> str:
    steps = (str(step).replace("~", "~0").replace("/", "~1") for step in place.path)
    return place.file + "#/" + "/".join(steps)


MISSING = _MISSING

__all__ = ["MAX_DEPTH", "MAX_HOPS", "MAX_NODES", "MAX_SPEC_NODES", "MISSING", "Documents", "Expansion",
           "Place", "Resolver", "references"]
