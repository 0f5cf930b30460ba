"""The parse cache and the one factory of the speed layer (gitsync.render.memo.cache)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from gitsync.render import RenderOptions, render
from gitsync.render.memo import ParseCache, render_memo
from gitsync.render.memo_api import NoMemo
from gitsync.settings import Settings

FILES = {"routes.yaml": b"routes:\n  - id: r1\n    uri: /a\n    upstream: {nodes: {'127.0.0.1:80': 1}}\n"}


def test_the_factory_keeps_parses_on_disk_in_the_store_it_is_given(tmp_path: Path) -> None:
    memo = render_memo(Settings(), tmp_path / "parse-cache")
    assert isinstance(memo, ParseCache) and memo.store is not None
    rendered = render(FILES, RenderOptions(), memo=memo)
    assert memo.parses == 1 and list((tmp_path / "parse-cache").iterdir())
    again = render_memo(Settings(), tmp_path / "parse-cache")  # a later process: nothing parsed
    assert render(FILES, RenderOptions(), memo=again).payload == rendered.payload and again.parses == 0


def test_without_a_store_it_is_in_memory_and_off_when_the_settings_say_so(tmp_path: Path) -> None:
    in_memory = render_memo(Settings())
    assert isinstance(in_memory, ParseCache) and in_memory.store is None
    assert isinstance(render_memo(), ParseCache)  # no settings: a one-shot render of files made here
    off = render_memo(replace(Settings(), parse_cache=False), tmp_path / "parse-cache")
    assert isinstance(off, NoMemo)
    plain = render(FILES, RenderOptions(), memo=off).payload
    assert plain == render(FILES, RenderOptions(), memo=in_memory).payload
    assert not (tmp_path / "parse-cache").exists()
