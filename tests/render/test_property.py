"""Property: whatever YAML and whatever item shapes a repo holds, render raises nothing but ProblemsError."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gitsync.kinds import KINDS
from gitsync.problems import ProblemsError
from gitsync.render import RenderOptions, mask_secrets, payload_json, render
from gitsync.render.memo import ParseCache
from testkit.profiles import examples

OPTIONS = RenderOptions(vars={"HOST": "10.0.0.1", "PORT": "8080"},
                        secret_lookup={"TOKEN": "secret-token-value"}.get,
                        paths=(".", "envs/prod"), max_payload_size=200_000)
CACHE = ParseCache()
PROPERTY = examples(0.6)

FIELDS = ["id", "username", "uri", "uris", "upstream_id", "service_id", "plugin_config_id", "group_id",
          "plugins", "upstream", "nodes", "host", "port", "weight", "cert", "key", "snis", "sni", "certs",
          "keys", "type", "token", "prefix", "content", "server_port", "desc", "labels", "key-auth",
          "proxy-rewrite", "limit-count", "modifiedIndex", "routes_conf_version", "sops", "<<", "route",
          "$patch"]
TEXTS = ["r1", "u1", "s1", "jack", "jack/credentials/k1", "vault/main", "vault/a/b", "${{ vars.HOST }}",
         "${{ secrets.TOKEN }}", "${{ vars.NOPE }}", "$${{ x }}", "${{ broken", "$secret://vault/main/a/b",
         "$secret://", "$env://HOME", "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
         "", " ", "0", "1.5", "true", "null", "a b", "*", "&x", "%", "#END", "x" * 70, "\u00e9\u2603",
         "merge"]

scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70),
                    st.floats(allow_nan=False, allow_infinity=False), st.sampled_from(TEXTS),
                    st.text(max_size=12))
values = st.recursive(scalars, lambda children: st.one_of(
    st.lists(children, max_size=4),
    st.dictionaries(st.sampled_from(FIELDS) | st.text(max_size=6), children, max_size=5),
), max_leaves=25)
items = st.one_of(values, st.dictionaries(st.sampled_from(FIELDS), values, max_size=6))
documents = st.one_of(
    st.dictionaries(st.sampled_from([*KINDS, *FIELDS]), st.one_of(st.lists(items, max_size=4), values),
                    max_size=4),
    values,
)


def yaml_text(value: Any, indent: int = 0) -> str:
    """Block-style YAML of `value` (scalars as JSON, which YAML reads), so block syntax gets exercised."""
    pad = " " * indent
    if isinstance(value, dict) and value:
        return "".join(f"{pad}{json.dumps(str(k))}:\n{yaml_text(v, indent + 2)}" for k, v in value.items())
    if isinstance(value, list) and value:
        return "".join(f"{pad}-\n{yaml_text(v, indent + 2)}" for v in value)
    if isinstance(value, str) and "${{" in value and "\n" not in value:
        return f"{pad}{value}\n"  # plain, so typed substitution and flow-indicator rules get exercised
    return f"{pad}{json.dumps(value)}\n"


def check(files: dict[str, bytes]) -> None:
    try:
        rendered = render(files, OPTIONS, CACHE)
    except ProblemsError as exc:
        assert exc.problems
        for problem in exc.problems:
            assert "secret-token-value" not in str(problem)
        return
    payload_json(rendered.payload)
    masked = payload_json(mask_secrets(rendered.payload, rendered.secret_values))
    assert b"secret-token-value" not in masked
    for kind, kind_items in rendered.payload.items():
        for index in range(len(kind_items)):
            assert rendered.source_map.location(kind, index) is not None


@pytest.mark.slow
@PROPERTY
@given(st.lists(documents, min_size=1, max_size=3), st.booleans())
def test_generated_documents_and_item_shapes(docs: list[Any], block: bool):
    if block:
        text = "---\n".join(yaml_text(doc) for doc in docs)
    else:
        text = "\n---\n".join(json.dumps(doc) for doc in docs)
    check({"a.yaml": text.encode(), "envs/prod/b.yaml": text.encode()})


@PROPERTY
@given(st.lists(st.sampled_from([
    "routes:", "  - id: r1", "    uri: /a", "  -", "    plugins: {a: 1", "upstreams: [", "- &a x", "- *a",
    "  key: !!binary aGk=", "? [a, b]", ": c", "%YAML 1.1", "---", "...", "#END", "\t- x",
    "  ${{ vars.HOST }}",
    "a: ${{ secrets.TOKEN }}", "b: '${{ secrets.NOPE'", "<<: {x: 1}", "x: .inf", "[[[[[[", "}}}", "'",
    "\"\\u00", "id: 1", "sops: {mac: x}", "routes_conf_version: 1",
]), max_size=12), st.binary(max_size=40))
def test_generated_yaml_lines_and_bytes(lines: list[str], noise: bytes):
    text = "\n".join(lines).encode()
    check({"a.yaml": text, "b.json": noise, "c.yml": text + noise})


# --- a warm render says what a cold one says -----------------------------------------------------------

ROUTE_IDS = ["r1", "r2", "r3", "r4"]
UPSTREAM_IDS = ["u1", "u2", "u3"]
route_items = st.fixed_dictionaries(
    {"id": st.sampled_from(ROUTE_IDS)},
    optional={"uri": st.sampled_from(["/a", "/b", 7]),
              "upstream_id": st.sampled_from([*UPSTREAM_IDS, "nope"]),
              "plugins": st.sampled_from([{"proxy-rewrite": {"uri": "/x"}}, {"no-such-plugin": {}}])})
upstream_items = st.fixed_dictionaries(
    {"id": st.sampled_from(UPSTREAM_IDS)},
    optional={"nodes": st.sampled_from([{"127.0.0.1:80": 1}, "bad"]), "type": st.just("roundrobin")})
repo_files = st.dictionaries(
    st.sampled_from(["a.yaml", "b.yaml", "envs/prod/a.yaml", "envs/prod/c.yaml"]),
    st.fixed_dictionaries({}, optional={"routes": st.lists(route_items, max_size=3),
                                        "upstreams": st.lists(upstream_items, max_size=2)}),
    min_size=1, max_size=4)


def outcome(files: dict[str, bytes], cache: ParseCache) -> Any:
    """Everything a render says: its problems, or its payload, contents, ids and item places."""
    options = RenderOptions(paths=(".", "envs/prod"), max_payload_size=500)  # BASE: 371 bytes
    try:
        rendered = render(files, options, cache)
    except ProblemsError as exc:
        return [str(problem) for problem in exc.problems]
    places = {kind: [str(rendered.source_map.location(kind, i)) for i in range(len(items))]
              for kind, items in rendered.payload.items()}
    return rendered.payload, rendered.contents, rendered.ids, rendered.splits, places


@PROPERTY
@given(st.lists(repo_files, min_size=2, max_size=4))
def test_a_render_with_a_warm_cache_says_what_a_cold_render_says(commits: list[dict[str, Any]]):
    """Render reuses what it knows of unchanged files (whole documents' lists, their checks and
    content): across commits that change, add and drop files, with overlays replacing items,
    duplicate ids, broken items and dangling references, it must say exactly what a fresh render
    of the same commit says."""
    warm = ParseCache()
    for commit in commits:
        files = {name: json.dumps(doc).encode() for name, doc in commit.items()}
        assert outcome(files, warm) == outcome(files, ParseCache())


BASE = {"upstreams.yaml": {"upstreams": [{"id": u, "type": "roundrobin", "nodes": {"127.0.0.1:80": 1}}
                                         for u in UPSTREAM_IDS]},
        "a.yaml": {"routes": [{"id": "r1", "uri": "/a", "upstream_id": "u1"},
                              {"id": "r2", "uri": "/b", "upstream_id": "u2"}]},
        "b.yaml": {"routes": [{"id": "r3", "uri": "/c", "upstream_id": "u3"}]},
        "envs/prod/x.yaml": {"routes": [{"id": "r5", "uri": "/e", "upstream_id": "u1"}]}}
edits = st.tuples(
    st.sampled_from(["a.yaml", "b.yaml", "upstreams.yaml", "envs/prod/x.yaml"]), st.integers(0, 1),
    st.sampled_from([("uri", "/x"), ("uri", "/" + "long" * 40), ("upstream_id", "u3"),
                     ("upstream_id", "nope"), ("plugins", {"proxy-rewrite": {"uri": "/z"}}),
                     ("plugins", {"no-such": {}}), ("id", "r9"), ("id", "r1"), ("nodes", "bad"),
                     ("nodes", {"127.0.0.2:81": 2}), ("drop", None), ("add file", None)]))


def edited(base: dict[str, Any], edit: tuple[str, int, tuple[str, Any]]) -> dict[str, Any]:
    name, index, (field, value) = edit
    files = json.loads(json.dumps(base))
    if field == "add file":
        files["c.yaml"] = {"routes": [{"id": "r4", "uri": "/d", "upstream_id": "u1"}]}
        return files
    kind = "upstreams" if name == "upstreams.yaml" else "routes"
    items = files[name][kind]
    if index >= len(items):
        return files
    if field == "drop":
        del items[index]
    else:
        items[index][field] = value
    return files


@PROPERTY
@given(st.lists(edits, min_size=1, max_size=6))
def test_the_next_render_from_the_last_one_says_what_a_full_render_says(changes) -> None:
    """A commit that changes items but not ids is rendered from the last render (only the changed
    files are looked at); any other is rendered in full. Either way it must say what a fresh render
    says: commit after commit, each editing the last (items, ids, references, plugins, files)."""
    warm = ParseCache()
    commit = BASE
    files = {name: json.dumps(doc).encode() for name, doc in commit.items()}
    assert outcome(files, warm) == outcome(files, ParseCache())
    for change in changes:
        commit = edited(commit, change)
        files = {name: json.dumps(doc).encode() for name, doc in commit.items()}
        assert outcome(files, warm) == outcome(files, ParseCache())


def test_a_one_file_change_of_items_is_rendered_from_the_last_render() -> None:
    import gitsync.render.memo.incremental as incremental

    files = {n: json.dumps(d).encode() for n, d in BASE.items()}
    cache = ParseCache()
    first = render(files, RenderOptions(), cache)
    files["a.yaml"] = json.dumps(edited(BASE, ("a.yaml", 0, ("uri", "/x")))["a.yaml"]).encode()
    looked: list[str] = []
    with pytest.MonkeyPatch.context() as patch:
        real = incremental._lists
        patch.setattr(incremental, "_lists", lambda name, *rest: looked.append(name) or real(name, *rest))
        second = render(files, RenderOptions(), cache)
    assert looked == ["a.yaml"]  # the only file looked at
    assert second.payload["routes"][0]["uri"] == "/x" and first.payload["routes"][0]["uri"] == "/a"
    assert str(second.source_map.location("routes", 0)).startswith("a.yaml:")
    files["a.yaml"] = json.dumps(edited(BASE, ("a.yaml", 0, ("upstream_id", "nope")))["a.yaml"]).encode()
    with pytest.raises(ProblemsError, match="upstream_id 'nope' names no item of upstreams"):
        render(files, RenderOptions(), cache)


def test_files_outside_the_configured_paths_do_not_keep_a_render_from_following_the_last() -> None:
    import gitsync.render.memo.incremental as incremental

    files = {f"base/{n}": json.dumps(d).encode() for n, d in BASE.items() if "/" not in n}
    files["elsewhere/t.yaml"] = b"routes:\n  - {id: t, uri: '${{ vars.NOPE }}'}\n"  # not rendered here
    cache, options = ParseCache(), RenderOptions(paths=("base",))
    render(files, options, cache)
    files["base/b.yaml"] = json.dumps(edited(BASE, ("b.yaml", 0, ("uri", "/new")))["b.yaml"]).encode()
    looked: list[str] = []
    with pytest.MonkeyPatch.context() as patch:
        real = incremental._lists
        patch.setattr(incremental, "_lists", lambda name, *rest: looked.append(name) or real(name, *rest))
        rendered = render(files, options, cache)
    assert looked == ["base/b.yaml"]
    assert rendered.payload == render(files, options, ParseCache()).payload


def test_a_file_of_several_kinds_in_any_order_follows_the_last_render() -> None:
    import gitsync.render.memo.incremental as incremental

    def both(uri: str) -> bytes:
        return (b"upstreams:\n  - {id: u1, type: roundrobin, nodes: {'127.0.0.1:80': 1}}\n"
                b"routes:\n  - {id: r1, uri: '" + uri.encode() + b"', upstream_id: u1}\n"
                b"---\nroutes:\n  - {id: r2, uri: /two, upstream_id: u1}\n")

    files = {"both.yaml": both("/one"), "other.yaml": b"routes:\n  - {id: r3, uri: /3, upstream_id: u1}\n"}
    cache = ParseCache()
    render(files, RenderOptions(), cache)
    files["both.yaml"] = both("/uno")
    followed: list[Any] = []
    with pytest.MonkeyPatch.context() as patch:
        real = incremental.render_next
        patch.setattr("gitsync.render.memo.cache.render_next", lambda *args: followed.append(real(*args)) or
                      followed[-1])
        rendered = render(files, RenderOptions(), cache)
    assert [made for made, _ in followed] == [rendered]  # rendered from the last render, not in full
    fresh = render(files, RenderOptions(), ParseCache())
    assert rendered.payload == fresh.payload and rendered.contents == fresh.contents
    assert [str(rendered.source_map.location("routes", i)) for i in range(3)] == \
        [str(fresh.source_map.location("routes", i)) for i in range(3)]


@pytest.mark.parametrize("declared", [b"checks:\n  - {name: c1, request: {path: /a}, retries: 0}\n",
                                      b"secret_fields: [my-plugin.conf.token]\n"])
def test_a_file_that_holds_or_held_checks_or_secret_fields_is_rendered_in_full(declared: bytes) -> None:
    """Health checks and secret fields are the repo's, not the payload's: a commit changing a file that
    declares them, or did in the last render, is rendered in full, so a declaration taken out is gone;
    a commit changing another file still follows the last render and keeps them."""
    import gitsync.render.memo.incremental as incremental

    upstreams = b"upstreams:\n  - {id: u1, type: roundrobin, nodes: {'127.0.0.1:80': 1}}\n"
    routes = b"routes:\n  - {id: r1, uri: /a, upstream_id: u1}\n"
    files = {"up.yaml": upstreams, "a.yaml": routes + declared,
             "b.yaml": b"routes:\n  - {id: r2, uri: /b, upstream_id: u1}\n"}
    cache = ParseCache()
    held = render(files, RenderOptions(), cache)
    assert held.checks or held.secret_rules
    followed: list[Any] = []
    with pytest.MonkeyPatch.context() as patch:
        real = incremental.render_next
        patch.setattr("gitsync.render.memo.cache.render_next", lambda *args: followed.append(real(*args)) or
                      followed[-1])
        files["b.yaml"] = files["b.yaml"].replace(b"/b", b"/bb")  # another file: from the last render
        kept = render(files, RenderOptions(), cache)
        files["a.yaml"] = routes.replace(b"/a", b"/aa")  # the declaration taken out, an item changed
        gone = render(files, RenderOptions(), cache)
    assert [made for made, _ in followed[:1]] == [kept] and followed[1] is None  # the second: in full
    assert (kept.checks, kept.secret_rules) == (held.checks, held.secret_rules)
    fresh = render(files, RenderOptions(), ParseCache())
    assert not fresh.checks and not fresh.secret_rules
    assert (gone.payload, gone.checks, gone.secret_rules) == (fresh.payload, fresh.checks, fresh.secret_rules)
