"""A parse's memo: one typed slot per stage (gitsync.render.filememo)."""

from __future__ import annotations

from gitsync.render import RenderOptions, render
from gitsync.render.build import UNITS
from gitsync.render.facts import FACTS, FileFacts
from gitsync.render.filememo import FileMemo, MemoSlot
from gitsync.render.memo import ParseCache
from gitsync.render.pipeline import SECRET_VALUES


def test_each_slot_holds_its_own_value() -> None:
    memo = FileMemo()
    counts: MemoSlot[int] = MemoSlot("counts")
    names: MemoSlot[list[str]] = MemoSlot("names")
    assert memo.get(counts) is None
    assert memo.setdefault(counts, 1) == 1 and memo.setdefault(counts, 2) == 1
    assert memo.put(names, ["a"]) == ["a"] and memo.get(names) == ["a"] and memo.get(counts) == 1
    assert memo.get(MemoSlot("counts")) is None  # a slot is its declaration, not its name


def test_a_render_keeps_the_facts_units_and_secret_values_of_a_plain_file_in_their_slots() -> None:
    data = (b"routes:\n  - id: r1\n    uri: /a\n    plugins: {key-auth: {}}\n"
            b"    upstream: {nodes: {'h:80': 1}}\n"
            b"consumers:\n  - username: u\n    plugins: {key-auth: {key: the-key-of-u}}\n")
    cache = ParseCache()
    render({"a.yaml": data}, RenderOptions(), memo=cache)
    (parsed, _), = cache._entries.values()
    assert isinstance(parsed.memo.get(FACTS), FileFacts)
    units = parsed.memo.get(UNITS)
    assert units is not None and [unit.kind for unit in units["a.yaml", 0][1]] == ["routes", "consumers"]
    assert "the-key-of-u" in next(iter((parsed.memo.get(SECRET_VALUES) or {}).values()))
