"""An item's content as gitsync compares it: the normal form, and its canonical JSON bytes.

What APISIX gives back is not byte for byte what it was sent (``[]`` comes back as ``{}``, numbers
keep 14 significant digits), so two items are compared, and hashed into digests and
``modifiedIndex`` values, in a normal form. Render computes it once per item of an unchanged file;
reconcile compares with it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

#: Versions and indexes stay below this: APISIX round-trips numbers with 14 significant digits.
VERSION_LIMIT = 10**14

INDEX_FIELD = "modifiedIndex"


def normalize(value: Any) -> Any:
    """The form in which two values are compared: what APISIX would give back for what it was sent.

    Empty objects and arrays are the same (GET renders ``[]`` as ``{}``), and numbers are
    rounded the way cjson stores them (14 significant digits; integral floats are ints).
    Plain dicts, lists, strings and small ints (nearly everything) take the fast paths: this
    runs over every item of both sides of every plan.
    """
    kind = type(value)
    if kind is str or value is None or kind is bool:
        return value
    if kind is dict:
        if not value:
            return []
        return {k if type(k) is str else str(k): v if type(v) is str else normalize(v)
                for k, v in value.items()}
    if kind is list:
        return [v if type(v) is str else normalize(v) for v in value]
    if kind is int and -VERSION_LIMIT < value < VERSION_LIMIT:
        return value
    return _normalize_other(value)


def _normalize_other(value: Any) -> Any:
    """`normalize` for what is not a plain dict, list, string or small int."""
    if isinstance(value, Mapping):
        return {str(k): normalize(v) for k, v in value.items()} if value else []
    if isinstance(value, list | tuple):
        return [normalize(v) for v in value]
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int | float):
        if isinstance(value, float) and not math.isfinite(value):
            return value
        if abs(value) >= VERSION_LIMIT or isinstance(value, float):
            rounded = float(f"{value:.14g}")
            return int(rounded) if rounded.is_integer() and abs(rounded) < 2**53 else rounded
        return value
    return value


def canonical_json(value: Any) -> bytes:
    """Deterministic JSON bytes: sorted keys, no spaces, UTF-8."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False).encode("utf-8")


def item_content(item: Any) -> Any:
    """An item's normal form without its ``modifiedIndex`` (which is bookkeeping, not content)."""
    if isinstance(item, Mapping):
        item = {k: v for k, v in item.items() if k != INDEX_FIELD}
    return normalize(item)


def content_split(item: Any, content: bytes) -> int:
    """Where the item's ``modifiedIndex`` goes in `content` (`with_index`), when `content` is also the
    item's own JSON less its index (nothing normalized away: no ``{}``, float or huge number); else -1.

    Render works it out once per item of a file; a push then writes an item's JSON by inserting its
    index into its content instead of encoding it again (most of a large body)."""
    if not isinstance(item, dict):
        return -1
    own = {k: v for k, v in item.items() if k != INDEX_FIELD}
    try:
        if canonical_json(own) != content:
            return -1
        left = {k: v for k, v in own.items() if k < INDEX_FIELD}
    except (TypeError, ValueError):  # keys that are not all text: json cannot sort them
        return -1
    return len(canonical_json(left)) - 1 if left else 1


_INDEX_KEY = b'"' + INDEX_FIELD.encode() + b'":'


def with_index(content: bytes, split: int, index: int) -> bytes:
    """`canonical_json` of the item of `content` (split at `split`, from `content_split`) with its
    ``modifiedIndex``: the field goes where sorting the keys puts it."""
    field = _INDEX_KEY + str(index).encode()
    if split == 1:  # no key sorts before it
        return b"{" + field + (b"," if len(content) > 2 else b"") + content[1:]
    return content[:split] + b"," + field + content[split:]


def content_bytes(item: Any) -> bytes:
    """The canonical JSON of an item's content: what equality, indexes and the digest are computed on."""
    return canonical_json(item_content(item))


__all__ = ["INDEX_FIELD", "VERSION_LIMIT", "canonical_json", "content_bytes", "content_split", "item_content",
           "normalize", "with_index"]
