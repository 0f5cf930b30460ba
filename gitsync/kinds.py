"""The resource kinds of APISIX's standalone config, and how each item is identified.

One table for the whole project: render, reconcile, the schemas and the test
double all read it (docs/architecture.md, "The gateway's contract").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

#: The kinds a config repo may declare, in the order gitsync renders them.
KINDS: tuple[str, ...] = (
    "routes",
    "services",
    "upstreams",
    "consumers",
    "consumer_groups",
    "ssls",
    "global_rules",
    "plugin_configs",
    "plugin_metadata",
    "protos",
    "stream_routes",
    "secrets",
)

#: Kinds a config repo may declare that are gitsync's own, never pushed: health checks (gitsync.push.health),
#: the site's secret fields (gitsync.render.secrets) and the OpenAPI specs it renders
#: (gitsync.render.openapi).
REPO_ONLY_KINDS: tuple[str, ...] = ("checks", "secret_fields", "openapi")

#: Every key APISIX 3.14+ keeps a ``<key>_conf_version`` for: the kinds plus ``plugins``.
VERSIONED_KEYS: tuple[str, ...] = (*KINDS, "plugins")

VERSION_SUFFIX = "_conf_version"

#: Metadata keys APISIX 3.14+ adds to the stored config (and to GET bodies).
METADATA_KEYS: tuple[str, ...] = ("X-Last-Modified", "X-Digest")


def version_key(kind: str) -> str:
    return kind + VERSION_SUFFIX


def is_credential(kind: str, item: Any) -> bool:
    """A consumer credential is a ``consumers`` item whose id holds ``/credentials/``."""
    return kind == "consumers" and isinstance(item, dict) and "/credentials/" in str(item.get("id", ""))


def distinct_ids(ids: Sequence[str | None]) -> bool:
    """Every item has an id, and no two the same one."""
    return None not in ids and len(set(ids)) == len(ids)


def item_id(kind: str, item: Any) -> str | None:
    """The identity APISIX gives an item: ``id``, or for a consumer ``username`` (as text, a boolean
    as JSON writes it: ``routes[true]``, never Python's ``True``); a health check's is its ``name``."""
    if not isinstance(item, dict):
        return None
    value = item.get("name") if kind in REPO_ONLY_KINDS else item.get("id")
    if value is None and kind == "consumers":
        value = item.get("username")
    if isinstance(value, bool):
        return "true" if value else "false"
    return None if value is None else str(value)
