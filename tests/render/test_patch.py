"""Overlays that patch (`$patch: merge`): a JSON merge patch (RFC 7386) of an earlier path's item.

The property test checks a render against a reference RFC 7386 written here from the RFC's own
pseudo-code, and `--explain` against the lines of files this test writes itself (each field's line
is recorded as the text is written, not read back through gitsync's parser).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gitsync.problems import ProblemsError
from gitsync.render import RenderOptions, render
from gitsync.render.memo import ParseCache
from gitsync.render.sourcemap import FieldPath
from testkit.processes import run_gitsync
from testkit.profiles import examples

_MISSING = object()


def rfc7386(target: Any, patch: Any) -> Any:
    """RFC 7386, section 2, as its pseudo-code reads (on copies):

        define MergePatch(Target, Patch):
          if Patch is an Object:
            if Target is not an Object:
              Target = {} # Ignore the contents and set it to an empty Object
            for each Name/Value pair in Patch:
              if Value is null:
                if Name exists in Target:
                  remove the Name/Value pair from Target
              else:
                Target[Name] = MergePatch(Target[Name], Value)
            return Target
          else:
            return Patch
    """
    if isinstance(patch, dict):
        if not isinstance(target, dict):
            target = {}
        target = dict(target)
        for name, value in patch.items():
            if value is None:
                if name in target:
                    del target[name]
            else:
                target[name] = rfc7386(target.get(name, _MISSING), value)
        return target
    return copy.deepcopy(patch)


def writes(target: Any, patch: Any, path: FieldPath) -> bool:
    """Whether applying `patch` to `target` writes the field at `path` (or a part of the path above it)
    with the patch's own value, by RFC 7386's rules: a non-object value, or an object put where no
    object was, is the patch's whole."""
    for depth in range(len(path)):
        step = path[depth]
        if not isinstance(patch, dict) or step not in patch:
            return False
        patch = patch[step]
        target = target.get(step, _MISSING) if isinstance(target, dict) else _MISSING
        if not isinstance(patch, dict) or not isinstance(target, dict):
            return True
    return False


def nodes(value: Any, path: FieldPath = ()) -> list[FieldPath]:
    """The path of every node of `value`, containers included."""
    children = value.items() if isinstance(value, dict) else \
        enumerate(value) if isinstance(value, list) else ()
    return [path, *(p for key, child in children for p in nodes(child, (*path, key)))]


def field_paths(value: Any, path: FieldPath = ()) -> list[FieldPath]:
    if isinstance(value, dict) and value:
        return [p for key, child in value.items() for p in field_paths(child, (*path, key))]
    if isinstance(value, list) and value:
        return [p for index, child in enumerate(value) for p in field_paths(child, (*path, index))]
    return [path]


class Text:
    """JSON written one key and one list item per line, recording the line of each path as it goes."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.line_of: dict[FieldPath, int] = {}

    def write(self, value: Any, path: FieldPath = (), lead: str = "", tail: str = "",
              indent: int = 0) -> None:
        pad = " " * indent
        if path:
            self.line_of[path] = len(self.lines) + 1
        if isinstance(value, dict) and value:
            self.lines.append(f"{pad}{lead}{{")
            for n, (key, child) in enumerate(value.items()):
                self.write(child, (*path, key), json.dumps(key) + ": ", "," if n < len(value) - 1 else "",
                           indent + 1)
            self.lines.append(f"{pad}}}{tail}")
        elif isinstance(value, list) and value:
            self.lines.append(f"{pad}{lead}[")
            for n, child in enumerate(value):
                self.write(child, (*path, n), "", "," if n < len(value) - 1 else "", indent + 1)
            self.lines.append(f"{pad}]{tail}")
        else:
            self.lines.append(f"{pad}{lead}{json.dumps(value)}{tail}")

    def data(self) -> bytes:
        return ("\n".join(self.lines) + "\n").encode()


def config_file(item: dict[str, Any]) -> tuple[bytes, dict[FieldPath, int]]:
    """``{"routes": [item]}`` as text, and the line of each field of the item."""
    text = Text()
    text.write({"routes": [item]})
    return text.data(), {path[2:]: line for path, line in text.line_of.items() if path[:2] == ("routes", 0)}


# A route whose free parts can take any shape: prometheus' configuration takes any extra field, labels
# any string values. RFC 7386's every case (delete, merge, replace a list, an object over a scalar and
# the other way round) happens inside them.
KEYS = st.sampled_from(["a", "b", "c", "d", "e"])
SCALARS = st.one_of(st.integers(-5, 5), st.booleans(), st.text("xyz", max_size=3), st.floats(-2, 2, width=32))
TREES = st.recursive(SCALARS, lambda children: st.one_of(st.lists(children, max_size=3),
                                                          st.dictionaries(KEYS, children, max_size=3)),
                     max_leaves=8)
PATCH_TREES = st.recursive(st.one_of(SCALARS, st.none()), lambda children: st.one_of(
    st.lists(st.one_of(SCALARS, TREES), max_size=3), st.dictionaries(KEYS, children, max_size=3)),
    max_leaves=8)
LABEL_VALUES = st.text("abc", min_size=1, max_size=3)
LABELS = st.dictionaries(KEYS, st.text("abc", min_size=1, max_size=3), max_size=3)


@st.composite
def bases(draw: st.DrawFn) -> dict[str, Any]:
    base: dict[str, Any] = {"id": "orders", "uri": draw(st.sampled_from(["/a", "/b/*"])),
                            "upstream": {"type": "roundrobin", "nodes": {"127.0.0.1:80": 1}}}
    if draw(st.booleans()):
        base["labels"] = draw(LABELS)
    if draw(st.booleans()):
        base["desc"] = draw(st.text("abc ", max_size=8))
    if draw(st.booleans()):
        base["plugins"] = {"prometheus": draw(st.dictionaries(KEYS, TREES, max_size=4))}
    return base


@st.composite
def patches(draw: st.DrawFn) -> dict[str, Any]:
    patch: dict[str, Any] = {"id": "orders", "$patch": "merge"}
    if draw(st.booleans()):
        patch["labels"] = draw(st.none() | st.dictionaries(KEYS, st.none() | LABEL_VALUES, max_size=3))
    if draw(st.booleans()):
        patch["desc"] = draw(st.none() | st.text("abc ", max_size=8))
    if draw(st.booleans()):
        patch["uri"] = draw(st.sampled_from(["/a", "/c"]))
    if draw(st.booleans()):
        nodes = [{"127.0.0.1:80": None, "10.0.0.1:80": 2}, [{"host": "10.0.0.2", "port": 80, "weight": 1}]]
        patch["upstream"] = {"nodes": draw(st.sampled_from(nodes))}
    if draw(st.booleans()):
        patch["plugins"] = draw(st.none() | st.fixed_dictionaries(
            {"prometheus": st.none() | st.dictionaries(KEYS, PATCH_TREES, max_size=4)}))
    return patch


LAYERS = ("base", "envs/prod", "envs/prod-eu")


@examples(1.5)
@given(base=bases(), overlays=st.lists(patches(), min_size=1, max_size=2))
def test_a_patch_overlay_renders_as_rfc7386_applied_to_the_base_and_explain_names_each_fields_line(
        base: dict[str, Any], overlays: list[dict[str, Any]]) -> None:
    files: dict[str, bytes] = {}
    lines: list[dict[FieldPath, int]] = []
    for layer, item in zip(LAYERS, [base, *overlays], strict=False):
        files[f"{layer}/routes.json"], line_of = config_file(item)
        lines.append(line_of)
    expected: Any = base
    origin = {path: 0 for path in nodes(base)}  # which file each node (containers too) comes from
    for number, patch in enumerate(overlays, 1):
        body = {k: v for k, v in patch.items() if k != "$patch"}
        after = rfc7386(expected, body)
        origin = {path: number if writes(expected, body, path) else origin[path] for path in nodes(after)}
        expected = after

    rendered = render(files, RenderOptions(paths=LAYERS[:len(overlays) + 1]))

    assert rendered.payload == {"routes": [expected]}
    explained = rendered.source_map.explain("routes", 0, rendered.payload["routes"][0])
    assert [path for path, _ in explained] == field_paths(expected)
    for path, where in explained:
        layer = origin[path]
        assert (where.file, where.line) == (f"{LAYERS[layer]}/routes.json", lines[layer][path]), path


def test_a_patch_without_a_base_is_refused_at_its_own_line() -> None:
    files = {"base/a.yaml": b"routes:\n  - id: one\n    uri: /one\n    upstream_id: u\n"
                            b"upstreams:\n  - id: u\n    nodes: {\"127.0.0.1:80\": 1}\n",
             "prod/a.yaml": b"routes:\n  - id: two\n    $patch: merge\n    uri: /two\n"}
    with pytest.raises(ProblemsError) as refused:
        render(files, RenderOptions(paths=("base", "prod")))
    assert [str(p) for p in refused.value.problems] == [
        "prod/a.yaml:2:5: routes[two]: $patch: merge patches routes[two], but no earlier path declares it "
        "(a patch changes an item of an earlier path in `paths`; without $patch the item is new)"]


def test_a_problem_in_a_patched_item_names_the_patchs_line_and_the_base_items() -> None:
    files = {"base/a.yaml": b"routes:\n  - id: one\n    uri: /one\n    upstream_id: u\n"
                            b"upstreams:\n  - id: u\n    nodes: {\"127.0.0.1:80\": 1}\n",
             "prod/a.yaml": b"# prod\nroutes:\n  - id: one\n    $patch: merge\n    upstream_id: nowhere\n"
                            b"    priority: high\n"}
    with pytest.raises(ProblemsError) as refused:
        render(files, RenderOptions(paths=("base", "prod")))
    both = "(patched by prod/a.yaml:3:5 onto its base item at base/a.yaml:2:5)"
    assert [str(p) for p in refused.value.problems] == [
        "prod/a.yaml:5:5: routes[one].upstream_id: upstream_id 'nowhere' names no item of upstreams " + both,
        "prod/a.yaml:6:5: routes[one].priority: invalid configuration: property \"priority\" validation "
        "failed: wrong type: expected integer, got string (value \"high\") " + both,
    ]
    # a field the base item wrote is placed in the base file
    files["prod/a.yaml"] = b"routes:\n  - id: one\n    $patch: merge\n    desc: fine\n"
    files["base/a.yaml"] = files["base/a.yaml"].replace(b"uri: /one", b"uri: 42")
    with pytest.raises(ProblemsError) as refused:
        render(files, RenderOptions(paths=("base", "prod")))
    assert [str(p).split(": ")[0] for p in refused.value.problems] == ["base/a.yaml:3:5"]
    assert "(patched by prod/a.yaml:2:5 onto its base item at base/a.yaml:2:5)" \
        in str(refused.value.problems[0])


def test_only_merge_patches_and_a_patch_in_the_base_items_own_path_is_a_duplicate() -> None:
    base = b"routes:\n  - id: one\n    uri: /one\n    upstream: {nodes: {\"127.0.0.1:80\": 1}}\n"
    with pytest.raises(ProblemsError) as refused:
        render({"base/a.yaml": base, "prod/a.yaml": b"routes:\n  - id: one\n    $patch: strategic\n"},
               RenderOptions(paths=("base", "prod")))
    assert [str(p) for p in refused.value.problems] == [
        "prod/a.yaml:2:5: routes[one]: $patch must be 'merge' (a JSON merge patch, RFC 7386), "
        "not 'strategic'"]
    with pytest.raises(ProblemsError) as refused:
        render({"base/a.yaml": base,
                "base/b.yaml": b"routes:\n  - id: one\n    $patch: merge\n    uri: /b\n"},
               RenderOptions(paths=("base",)))
    assert [str(p) for p in refused.value.problems] == [
        "base/b.yaml:2:5: routes[one]: duplicate id 'one' in routes: also at base/a.yaml:2:5 (a $patch "
        "changes the item of an earlier path: put the patch in a directory listed after it in `paths`)"]


BASE = b"routes:\n  - id: one\n    uri: /one\n    desc: base\n    upstream: {nodes: {\"127.0.0.1:80\": 1}}\n"


def test_a_replacing_overlay_after_a_patch_replaces_the_patched_item_whole() -> None:
    base = BASE
    patch = b"routes:\n  - id: one\n    $patch: merge\n    desc: patched\n"
    whole = b"routes:\n  - id: one\n    uri: /whole\n    upstream: {nodes: {\"127.0.0.1:81\": 1}}\n"
    rendered = render({"a/r.yaml": base, "b/r.yaml": patch, "c/r.yaml": whole},
                      RenderOptions(paths=("a", "b", "c")))
    assert rendered.payload["routes"] == [{"id": "one", "uri": "/whole",
                                           "upstream": {"nodes": {"127.0.0.1:81": 1}}}]
    assert not rendered.source_map.patched
    explained = rendered.source_map.explain("routes", 0, rendered.payload["routes"][0])
    assert {where.file for _, where in explained} == {"c/r.yaml"}


def test_the_speed_layer_renders_a_commit_that_turns_an_item_into_a_patch_as_a_full_render_does() -> None:
    base = BASE
    files = {"base/r.yaml": base, "prod/r.yaml": b"routes:\n  - id: two\n    uri: /two\n    upstream: "
                                                  b"{nodes: {\"127.0.0.1:80\": 1}}\n"}
    options = RenderOptions(paths=("base", "prod"))
    cache = ParseCache()
    render(files, options, memo=cache)
    files["prod/r.yaml"] = b"routes:\n  - id: one\n    $patch: merge\n    desc: prod\n"
    assert render(files, options, memo=cache).payload == render(files, options).payload == {
        "routes": [{"id": "one", "uri": "/one", "desc": "prod", "upstream": {"nodes": {"127.0.0.1:80": 1}}}]}


def test_render_explain_prints_each_field_and_its_place(tmp_path: Path) -> None:
    (tmp_path / "base").mkdir()
    (tmp_path / "prod").mkdir()
    (tmp_path / "base" / "r.yaml").write_text(
        "routes:\n  - id: one\n    uri: /one\n    upstream:\n      type: roundrobin\n"
        "      nodes: [{host: 10.0.0.1, port: 80, weight: 1}]\n")
    (tmp_path / "prod" / "r.yaml").write_text(
        "routes:\n  - id: one\n    $patch: merge\n    upstream:\n      nodes:\n"
        "        - {host: 10.9.0.1, port: 80, weight: 1}\n")
    result = run_gitsync("render", "--dir", str(tmp_path), "--path", "base", "--path", "prod",
                         "--explain", "routes", "one")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "routes[one]: patched by prod/r.yaml:2:5 onto its base item at base/r.yaml:2:5",
        "id                        prod/r.yaml:2:5",
        "uri                       base/r.yaml:3:5",
        "upstream.type             base/r.yaml:5:7",
        "upstream.nodes[0].host    prod/r.yaml:6:12",
        "upstream.nodes[0].port    prod/r.yaml:6:28",
        "upstream.nodes[0].weight  prod/r.yaml:6:38",
    ]
    missing = run_gitsync("render", "--dir", str(tmp_path), "--path", "base", "--path", "prod",
                          "--explain", "routes", "two")
    assert missing.returncode == 1
    assert missing.stderr.strip().endswith("gitsync render: no item routes[two] in the rendered payload")
