"""Overlays that patch: an item of a later path marked ``$patch: merge`` is a JSON merge patch
(RFC 7386) of the item with the same kind and id from an earlier path, instead of its replacement.

RFC 7386 in three rules: a key whose value is null is deleted, an object is merged key by key into
an object (and replaces anything else), and any other value (a list, a number, a string) replaces
whatever was there. Applying a patch here also records which layer wrote each part of the result
(`Patched`), so that a problem, and ``gitsync render --explain``, can name the file and line each
field of a patched item came from.
"""

from __future__ import annotations

from typing import Any

from gitsync.render.sourcemap import FieldPath, ItemSource, Patched

#: The key that marks an item as a patch, and the one kind of patch there is.
PATCH_KEY = "$patch"
MERGE = "merge"

_ABSENT = object()


def is_patch(item: Any) -> bool:
    return isinstance(item, dict) and PATCH_KEY in item


def patch_problem(item: dict[str, Any]) -> str | None:
    """Why a marked item cannot be applied as a patch, or None."""
    kind = item.get(PATCH_KEY)
    if kind != MERGE:
        return f"{PATCH_KEY} must be {MERGE!r} (a JSON merge patch, RFC 7386), not {kind!r}"
    return None


def apply_patch(base: Any, patch: dict[str, Any], base_source: ItemSource, patch_source: ItemSource,
                before: Patched | None) -> tuple[Any, Patched]:
    """The item `patch` (still holding its ``$patch`` key) makes of `base`, and where its parts come
    from. `before`: the provenance of `base` when it was itself patched. Neither input is changed:
    the result shares the parts it takes whole (no stage after render changes an item)."""
    sources = (*before.sources, patch_source) if before is not None else (base_source, patch_source)
    owners = dict(before.owners) if before is not None else {}
    body = {key: value for key, value in patch.items() if key != PATCH_KEY}
    merged = _merge(base, body, (), len(sources) - 1, owners)
    return merged, Patched(sources, owners)


def _merge(target: Any, patch: Any, path: FieldPath, owner: int, owners: dict[FieldPath, int]) -> Any:
    """RFC 7386's MergePatch(Target, Patch), without changing either, recording in `owners` the parts
    the patch writes whole."""
    if not isinstance(patch, dict):
        _own(owners, path, owner)
        return patch
    if not isinstance(target, dict):
        _own(owners, path, owner)  # whatever was there is dropped: all of it is the patch's now
        target = {}
    result = dict(target)
    for name, value in patch.items():
        if value is None:
            result.pop(name, None)
            _forget(owners, (*path, name))
        else:
            result[name] = _merge(result.get(name, _ABSENT), value, (*path, name), owner, owners)
    return result


def _own(owners: dict[FieldPath, int], path: FieldPath, owner: int) -> None:
    _forget(owners, path)
    owners[path] = owner


def _forget(owners: dict[FieldPath, int], path: FieldPath) -> None:
    """Drop what is known of `path` and everything under it (written again, or deleted)."""
    for known in [p for p in owners if p[:len(path)] == path]:
        del owners[known]


__all__ = ["MERGE", "PATCH_KEY", "apply_patch", "is_patch", "patch_problem"]
