"""Render: a config repo's files → one APISIX standalone payload, with a source map.

load (YAML, cached by blob SHA) → decrypt (SOPS seam) → substitute (vars/secrets)
→ OpenAPI specs (`gitsync.render.openapi`: the declared specs' items) → build (layering)
→ validate; pure over ``{path: bytes}``.
"""

from gitsync.render.mask import mask_secrets
from gitsync.render.options import RenderOptions, options_from_settings
from gitsync.render.pipeline import render
from gitsync.render.result import LastGood, LeftOut, Rendered
from gitsync.render.sourcemap import SourceMap
from gitsync.render.validate import payload_json, unmanaged_warnings

__all__ = [
    "LastGood",
    "LeftOut",
    "RenderOptions",
    "Rendered",
    "SourceMap",
    "mask_secrets",
    "options_from_settings",
    "payload_json",
    "render",
    "unmanaged_warnings",
]
