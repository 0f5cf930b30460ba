"""Renders made for tests without files: a payload as `render` would give it."""

from __future__ import annotations

from typing import Any

from gitsync.kinds import item_id
from gitsync.render.result import Rendered
from gitsync.render.sourcemap import ItemSource, SourceMap
from gitsync.render.validate import item_contents


def rendered_alone(payload: dict[str, list[dict[str, Any]]]) -> Rendered:
    """A source's render, as `render` gives it (every item at a line of a file of its kind)."""
    sources = {kind: [ItemSource(f"{kind}.yaml", 0, n, (n + 1, 3), item_id(kind, item))
                      for n, item in enumerate(items)] for kind, items in payload.items() if items}
    source_map = SourceMap({}, sources)
    kept = {kind: items for kind, items in payload.items() if items}
    contents, splits = item_contents(kept, source_map, {})
    ids = {kind: [item_id(kind, item) for item in items] for kind, items in kept.items()}
    return Rendered(kept, source_map, frozenset(), (), contents, (), ids, splits)
