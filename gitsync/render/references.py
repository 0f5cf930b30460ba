"""References: the ids an item names, and where (pure). A route's ``upstream_id``, a plugin's
``proto_id`` or consumer-restriction list, an upstream's client certificate, the consumer a
credential belongs to, the secret manager of a ``$secret://`` value.

Standalone APISIX checks none of them (it accepts a dangling one, then answers 404, 502 or 503), so
render checks them (`gitsync.render.validate`), and so does the composition of several sources
(`gitsync.render.compose`), where a reference may name another source's item.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from gitsync.kinds import KINDS, is_credential, item_id
from gitsync.render.sourcemap import FieldPath, string_leaves

SECRET_REFERENCE = re.compile(r"^\$secret://([^/]*)/([^/]*)/(.+)$")

#: Kinds whose items carry ``plugins``, and where an upstream can be written (its own kind, inline).
PLUGIN_HOLDERS = ("routes", "services", "plugin_configs", "global_rules", "consumers", "consumer_groups",
                  "stream_routes")
UPSTREAM_HOLDERS: tuple[tuple[str, FieldPath], ...] = (
    ("upstreams", ()), ("routes", ("upstream",)), ("services", ("upstream",)),
    ("stream_routes", ("upstream",)))
ANY = "*"  # a step of a reference's path: every item of a list
TRAFFIC_SPLIT: FieldPath = ("plugins", "traffic-split", "rules", ANY, "weighted_upstreams", ANY)

#: (kind, path of the field, kind the field names): every id an item or a plugin can refer to.
#: Standalone APISIX checks none of them (it accepts a dangling one, then answers 404, 502 or 503).
REFERENCES: tuple[tuple[str, FieldPath, str], ...] = (
    ("routes", ("upstream_id",), "upstreams"),
    ("routes", ("service_id",), "services"),
    ("routes", ("plugin_config_id",), "plugin_configs"),
    ("services", ("upstream_id",), "upstreams"),
    ("consumers", ("group_id",), "consumer_groups"),
    ("stream_routes", ("upstream_id",), "upstreams"),
    ("stream_routes", ("service_id",), "services"),
    ("stream_routes", ("protocol", "superior_id"), "stream_routes"),
    *((kind, (*TRAFFIC_SPLIT, "upstream_id"), "upstreams") for kind in PLUGIN_HOLDERS),
    *((kind, ("plugins", "grpc-transcode", "proto_id"), "protos") for kind in PLUGIN_HOLDERS),
    *((kind, ("plugins", "consumer-restriction", "allowed_by_methods", ANY, "user"), "consumers")
      for kind in PLUGIN_HOLDERS),
    *((kind, (*base, "tls", "client_cert_id"), "ssls") for kind, base in UPSTREAM_HOLDERS),
    *((kind, (*TRAFFIC_SPLIT, "upstream", "tls", "client_cert_id"), "ssls") for kind in PLUGIN_HOLDERS),
)
#: consumer-restriction's ``type``: what the names of its whitelist and blacklist are.
RESTRICTED = {"consumer_name": "consumers", "service_id": "services", "route_id": "routes",
              "consumer_group_id": "consumer_groups"}


@dataclass(frozen=True)
class Reference:
    """An id an item names: the kind it must be in, where in the item, and how a problem calls it."""

    target: str
    at: FieldPath
    ident: str
    label: str  # "upstream_id", "whitelist entry", ...


def _at(value: Any, path: FieldPath, walked: FieldPath = ()) -> Iterator[tuple[FieldPath, Any]]:
    """The values at `path` inside `value` (`ANY` steps into every list item), with their full paths."""
    if not path:
        yield walked, value
        return
    step, rest = path[0], path[1:]
    if step == ANY:
        if isinstance(value, list):
            for index, child in enumerate(value):
                yield from _at(child, rest, (*walked, index))
    elif isinstance(value, dict) and step in value:
        yield from _at(value[step], rest, (*walked, step))


def _id_text(value: Any) -> str | None:
    """A reference's id as APISIX compares it (text), or None for what cannot be an id (the schema
    reports its type)."""
    if isinstance(value, bool) or not isinstance(value, str | int):
        return None
    return str(value)


#: The reference paths of each kind.
_REFERENCES_OF: dict[str, tuple[tuple[FieldPath, str], ...]] = {
    kind: tuple((path, target) for k, path, target in REFERENCES if k == kind) for kind in KINDS}


def may_refer(kind: str) -> bool:
    """Whether an item of `kind` can name another item by id (`REFERENCES`, or through a plugin)."""
    return bool(_REFERENCES_OF.get(kind)) or kind in PLUGIN_HOLDERS


def ids_named(kind: str, item: Any) -> tuple[Reference, ...]:
    """Every id `item` names (`REFERENCES`, consumer-restriction's lists)."""
    found: list[Reference] = []
    for path, target in _REFERENCES_OF.get(kind, ()):
        for at, value in _at(item, path):
            ident = _id_text(value)
            if ident is not None:
                found.append(Reference(target, at, ident, str(at[-1])))
    if kind in PLUGIN_HOLDERS:
        for at, conf in _at(item, ("plugins", "consumer-restriction")):
            target = RESTRICTED.get(conf.get("type", "consumer_name")) if isinstance(conf, dict) else None
            for listed in ("whitelist", "blacklist") if target else ():
                for name_at, name in _at(conf, (listed, ANY)):
                    ident = _id_text(name)
                    if ident is not None:
                        found.append(Reference(str(target), (*at, *name_at), ident, f"{listed} entry"))
    return tuple(found)


def references_of(kind: str, item: Any) -> list[tuple[Reference, str]]:
    """Every item `item` names (references, the consumer a credential belongs to, the secret managers
    of its ``$secret://`` references), each with what a problem says when no item of that id exists."""
    if not isinstance(item, dict):
        return []
    found = [(ref, f"{ref.label} {ref.ident!r} names no item of {ref.target}")
             for ref in ids_named(kind, item)]
    if is_credential(kind, item) and isinstance(item.get("id"), str):
        owner = item["id"].split("/credentials/")[0]
        found.append((Reference("consumers", ("id",), owner, "consumer"),
                      f"credential of an unknown consumer {owner!r}"))
    for path, text in string_leaves(item):
        match = SECRET_REFERENCE.match(text) if text.startswith("$secret://") else None
        if match:
            manager = f"{match.group(1)}/{match.group(2)}"
            found.append((Reference("secrets", path, manager, "secret reference"),
                          f"{text!r} names no item of secrets (declare one with id {manager})"))
    return found


def refers_to(kind: str, item: Any) -> set[tuple[str, str]]:
    """(kind, id) of every item `item` names: references, the consumer a credential belongs to, the
    secret managers of its ``$secret://`` references."""
    return {(ref.target, ref.ident) for ref, _ in references_of(kind, item)}


def dependants(payload: Mapping[str, list[Any]], named: set[tuple[str, str]]) -> set[tuple[str, str]]:
    """(kind, id) of the items that name one of `named`."""
    return {(kind, ident) for kind, items in payload.items() for item in items
            if (ident := item_id(kind, item)) is not None and refers_to(kind, item) & named}


__all__ = ["ANY", "PLUGIN_HOLDERS", "REFERENCES", "SECRET_REFERENCE", "Reference", "dependants", "ids_named",
           "may_refer", "references_of", "refers_to"]
