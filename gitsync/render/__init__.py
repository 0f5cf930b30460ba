"""Render: a config repo's files → one APISIX standalone payload, with a source map.

load (YAML, parsed once per blob; plain scalars read as YAML 1.2's core schema, `scalars`) → decrypt
(`sops`) → substitute (vars/secrets) → OpenAPI specs (`gitsync.render.openapi`: the declared specs'
items) → build (layers, `patch` overlays) → validate (`references`, `certs`, the schemas); pure over
``{path: bytes}``, from `pipeline.render`. What a render needs besides the files is
`options.RenderOptions`; how the settings and the environment make them, `environment`. `result` is
what it gives (`Rendered`), with `sourcemap` (item → file:line), `mask`/`secrets` (which values are
secret) and `healthchecks` (the repo's declared checks). `compose` (pure) makes one payload of several
repos' renders. What a stage works out once per parse of a file is kept with the parse (`filememo`,
`facts`); the speed layer that keeps parses between renders is `memo`, behind `memo_api`.
"""

from gitsync.render.environment import options_from_settings
from gitsync.render.mask import mask_secrets
from gitsync.render.options import RenderOptions
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
