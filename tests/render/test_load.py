"""Loading YAML: values, positions, and every way a file can be refused — without ever crashing."""

from __future__ import annotations

import subprocess
import sys

from gitsync.render.load import blob_sha, parse, positions
from gitsync.render.memo import ParseCache
from gitsync.render.scalars import plain_value


def issues(data: bytes) -> list[tuple[int, int, str]]:
    return [(i.line, i.col, i.message) for i in parse(data).issues]


def test_values_follow_yaml_1_2_and_stay_json_safe():
    doc = parse(b"a: 0x1f\nb: yes\nc: 2024-01-01\nd: ~\ne: 1_000\nf: 1.5\ng: 'true'\n200: ok\ntrue: t\n")
    assert doc.issues == ()
    assert doc.documents[0].data == {"a": 31, "b": "yes", "c": "2024-01-01", "d": None, "e": "1_000",
                                     "f": 1.5, "g": "true", "200": "ok", "true": "t"}
    assert [(w.line, w.col) for w in doc.warnings] == [(2, 4), (3, 4), (5, 4)]  # YAML 1.1: yes, date, 1000


def test_item_positions_are_recorded_while_parsing():
    doc = parse(b"# head\nroutes:\n  - id: a\n  -   id: b\n---\nupstreams: [{id: u}]\n").documents
    assert doc[0].key_pos == {"routes": (2, 1)}
    assert doc[0].item_pos == {"routes": ((3, 5), (4, 7))}
    assert doc[1].item_pos == {"upstreams": ((6, 13),)}


def test_syntax_error_at_its_line_and_column():
    assert issues(b"routes:\n  - id: a\n   uri: b: c\n") == [
        (3, 4, "YAML syntax error: did not find expected '-' indicator (while parsing a block collection)")]


def test_duplicate_keys_are_all_reported():
    found = issues(b"a: 1\nb:\n  x: 1\n  x: 2\na: 3\n")
    assert found == [(4, 3, "duplicate key 'x' in this mapping"), (5, 1, "duplicate key 'a' in this mapping")]


def test_problems_deep_in_an_item_at_their_own_line_and_column():
    """Scalars below an item's fields keep no position of their own, but each problem or note about
    one is still placed where it is written (keys, values, flow items, quoted text)."""
    data = (b"routes:\n  - id: r1\n    plugins:\n      limit-count: {count: 1, count: 2}\n"
            b"      proxy-rewrite:\n        uri: &u '/x'\n        headers: {set: {a: .nan, b: 1_000}}\n"
            b"        regex_uri: [\"^/a\", !!int x, 'q']\n")
    parsed = parse(data)
    assert [(i.line, i.col, i.message[:24]) for i in parsed.issues] == [
        (4, 31, "duplicate key 'count' in"), (6, 14, "YAML anchors and aliases"),
        (7, 28, "'.nan' is not a number J"),
        (8, 28, "the tag !!int does not f")]
    assert [(w.line, w.col) for w in parsed.warnings] == [(7, 37)]
    route = parsed.documents[0].data["routes"][0]
    assert route["plugins"]["limit-count"] == {"count": 2}
    assert route["plugins"]["proxy-rewrite"] == {"uri": "/x", "headers": {"set": {"a": None, "b": "1_000"}},
                                                 "regex_uri": ["^/a", None, "q"]}
    assert parsed.documents[0].item_pos == {"routes": ((2, 5),)}


def test_anchors_and_aliases_are_refused():
    bomb = b"a: &a [x, x]\nb: &b [*a, *a]\nc: [*b, *b]\n"
    found = issues(bomb)
    assert [(line, col) for line, col, _ in found] == [(1, 4), (2, 4), (2, 8), (2, 12), (3, 5), (3, 9)]
    assert all("anchors and aliases" in message for _, _, message in found)


def test_unsupported_tags_and_values():
    found = issues(b"a: !!binary aGk=\nb: .nan\nc: !custom x\n<<: {d: 1}\n")
    assert [(line, col) for line, col, _ in found] == [(1, 4), (2, 4), (3, 4), (4, 1)]
    assert "merge keys" in found[3][2]


def test_deep_nesting_is_refused_not_a_crash():
    # ruamel's C composer recurses in C: this input kills a process that uses YAML(typ="safe").load.
    code = ("from gitsync.render.load import parse; import sys; "
            "print(parse(b'[' * 100000 + b']' * 100000).issues[0].message); "
            "print(parse(b'- ' * 100000 + b'x').issues[0].message)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["nested more than 64 levels deep"] * 2


def test_bad_encoding_at_its_offset():
    assert issues(b"a: b\nc: \xff\n") == [(2, 4, "cannot read the file: unacceptable character #x00ff: "
                                                 "invalid leading UTF-8 octet")]


def test_trailing_end_marker_and_json_with_tabs():
    assert parse(b"routes: []\n#END\n").documents[0].data == {"routes": []}
    parsed = parse(b'{\n\t"routes": [\n\t\t{"id": "r1"}\n\t]\n}\n')
    assert parsed.issues == ()
    assert parsed.documents[0].item_pos == {"routes": ((3, 3),)}


def test_positions_table_for_field_lookups():
    table = positions(b"routes:\n  - id: a\n    plugins:\n      key-auth: {key: x}\n"
                      b"    nodes: [a, {port: 1}]\n")
    assert table[(0, "routes", 0)] == (2, 5)
    assert table[(0, "routes", 0, "plugins", "key-auth", "key")] == (4, 18)
    assert table[(0, "routes", 0, "nodes", 1, "port")] == (5, 17)


def test_plain_value_types_like_yaml():
    assert [plain_value(t) for t in ("8080", "0x10", "true", "1.5", "abc", "null", ".nan")] == [
        8080, 16, True, 1.5, "abc", None, ".nan"]


def test_cache_is_keyed_by_git_blob_sha_and_bounded():
    assert blob_sha(b"hello\n") == "ce013625030ba8dba906f756967f9e9ca394464a"  # `git hash-object`
    cache = ParseCache(keep_renders=1)
    first = cache.get(b"routes: []\n")
    assert cache.get(b"routes: []\n") is first
    assert cache.parses == 1
    cache.end_render()
    cache.get(b"upstreams: []\n")
    cache.end_render()
    assert len(cache) == 1  # the file no render used since is gone
