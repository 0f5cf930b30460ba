"""APISIX 3.17+/3.18 validation: one set of schemas for ``gitsync validate`` and the test double.

Public interface (other stages code against exactly this):

- `check_item(kind, item)` → every `SchemaIssue` (JSON path + bare APISIX message) of one item;
- `check_payload(body)` → `PayloadIssue`s of ``config_validate`` over a whole PUT body;
- `PLUGINS`, `AUTH_PLUGINS` (and `STREAM_PLUGINS`): the plugin names APISIX knows.

Inside, `jsonschema` is the reference walk (every error in the library's words) and `validity` the
same walk compiled once per schema into a yes/no check; `checks` asks `validity` first and walks
`jsonschema` only for an item it refuses, so the words never depend on which answered.

`live_state.live_conflict` is what APISIX refuses because of the config it runs, not of the body
(shared with the pushes that need two steps).
"""

from __future__ import annotations

from gitsync.schema.checks import PayloadIssue, SchemaIssue, check_item, check_payload
from gitsync.schema.plugins import AUTH_PLUGINS, PLUGINS, STREAM_PLUGINS

__all__ = [
    "AUTH_PLUGINS",
    "PLUGINS",
    "STREAM_PLUGINS",
    "PayloadIssue",
    "SchemaIssue",
    "check_item",
    "check_payload",
]
