"""What APISIX refuses because of the state it runs, not because of the rest of the body: a global
rule's plugin that another *live* global rule holds (3.17+, `apisix/admin/global_rules.lua`), a
consumer's auth key that another *live* consumer or credential uses (3.18+, `apisix/consumer.lua`).

Pure; shared by the double (`gitsync.schema.checks.check_payload`) and by the pushes that need two
steps (`gitsync.push.moves`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gitsync.kinds import is_credential
from gitsync.schema.jsonschema import is_secret_ref, lua_tostring
from gitsync.schema.plugins import AUTH_KEY_FIELDS


def _live_list(live: Mapping[str, Any] | None, kind: str) -> list[dict[str, Any]]:
    items = (live or {}).get(kind)
    return [i for i in items if isinstance(i, dict)] if isinstance(items, list) else []


def _global_rule_conflicts(item: dict[str, Any], live: Mapping[str, Any]) -> str | None:
    """3.17+: a plugin may live in one global rule only, compared with the live rules."""
    plugins = item.get("plugins")
    if not isinstance(plugins, dict):
        return None
    for name in plugins:
        for rule in _live_list(live, "global_rules"):
            if rule.get("id") != item.get("id") and name in (rule.get("plugins") or {}):
                owner = lua_tostring(rule.get("id"))
                return f"plugin '{name}' already exists in global rule with id '{owner}'"
    return None


def _auth_keys(item: Mapping[str, Any]) -> Iterable[tuple[str, str, str]]:
    plugins = item.get("plugins")
    if not isinstance(plugins, dict):
        return
    for plugin, attr in AUTH_KEY_FIELDS.items():
        conf = plugins.get(plugin)
        value = conf.get(attr) if isinstance(conf, dict) else None
        if isinstance(value, str) and not is_secret_ref(value):
            yield plugin, attr, value


def _consumer_key_conflict(item: dict[str, Any], live: Mapping[str, Any]) -> str | None:
    """3.18+: a consumer's auth key may not be used by another live consumer or credential."""
    username = item.get("username")
    for plugin, attr, value in _auth_keys(item):
        for other in _live_list(live, "consumers"):
            other_id = str(other.get("id", ""))
            if "/credentials/" in other_id:
                owner, cred = other_id.split("/credentials/", 1)
                if owner != username and (plugin, attr, value) in set(_auth_keys(other)):
                    return (f"duplicate {attr} of plugin {plugin} found with credential: {cred} "
                            f"of consumer: {owner}")
            elif other.get("username") != username and (plugin, attr, value) in set(_auth_keys(other)):
                return f"duplicate {attr} of plugin {plugin} found with consumer: {other.get('username')}"
    return None


def live_conflict(kind: str, item: object, live: Mapping[str, Any] | None) -> str | None:
    """What APISIX refuses in `item` because of the live config `live`: another owner of its auth
    key or of its global-rule plugin (the same push removing that owner does not help)."""
    if live is None or not isinstance(item, dict):
        return None
    if kind == "global_rules":
        return _global_rule_conflicts(item, live)
    if kind == "consumers" and not is_credential(kind, item):
        return _consumer_key_conflict(item, live)
    return None


__all__ = ["live_conflict"]
