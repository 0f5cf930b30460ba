"""$ref: resolved in the repo's files only, every failure at the reference, every expansion bounded."""

from __future__ import annotations

from typing import Any

import pytest

from gitsync.render.openapi.refs import MISSING, Expansion, Place, Resolver

FILES: dict[str, Any] = {
    "a/spec.yaml": {"x": {"$ref": "../b.yaml#/defs/a~1b"}, "loop": {"$ref": "#/loop"},
                    "list": [{"$ref": "#/list/1"}, 7], "esc": {"$ref": "#/with%20space"}, "with space": 1},
    "b.yaml": {"defs": {"a/b": {"v": {"$ref": "#/defs/c~0d"}}, "c~d": 3}},
}


def resolver() -> Resolver:
    return Resolver(lambda name: FILES.get(name, MISSING))


def test_a_reference_to_another_file_resolves_relative_to_its_own_file_with_pointer_escapes() -> None:
    r = resolver()
    assert r.follow(Place("a/spec.yaml", ("x",)), FILES["a/spec.yaml"]["x"]) == \
        (Place("b.yaml", ("defs", "a/b")), {"v": {"$ref": "#/defs/c~0d"}})
    assert r.expand(Place("a/spec.yaml", ("x",)), FILES["a/spec.yaml"]["x"]) == {"v": 3}
    assert r.expand(Place("a/spec.yaml", ("list",)), FILES["a/spec.yaml"]["list"]) == [7, 7]
    assert r.expand(Place("a/spec.yaml", ("esc",)), FILES["a/spec.yaml"]["esc"]) == 1
    assert r.problems == {}


@pytest.mark.parametrize(("ref", "why"), [
    ("../../c.yaml", "leaves the repo"), ("nope.yaml", "is not a file of the repo"),
    ("#nope", "must be empty or a JSON pointer"), ("#/list/2", "has no #/list/2"),
    ("http://example.com/x", "never the network"), ("//example.com/x", "never the network"),
])
def test_a_reference_that_does_not_resolve_is_a_problem_at_it(ref: str, why: str) -> None:
    r = resolver()
    assert r.follow(Place("a/spec.yaml", ("y",)), {"$ref": ref}) is None
    [(place, message)] = r.problems
    assert place == Place("a/spec.yaml", ("y", "$ref")) and why in message


def test_a_cycle_is_named_with_its_chain() -> None:
    r = resolver()
    assert r.follow(Place("a/spec.yaml", ("loop",)), FILES["a/spec.yaml"]["loop"]) is None
    [(_, message)] = r.problems
    assert "is a cycle: a/spec.yaml#/loop → a/spec.yaml#/loop" in message
    with pytest.raises(Expansion):
        r.expand(Place("a/spec.yaml", ("loop",)), FILES["a/spec.yaml"]["loop"])


def test_check_finds_every_dangling_reference_without_expanding() -> None:
    files = {"s.yaml": {"a": {"$ref": "#/b"}, "deep": [{"x": {"$ref": "t.yaml#/nope"}}]}, "t.yaml": {}}
    r = Resolver(lambda name: files.get(name, MISSING))
    r.check("s.yaml")
    assert sorted(place.path for place, _ in r.problems) == [("a", "$ref"), ("deep", 0, "x", "$ref")]
