"""What a render and its health checks accept unless the settings say otherwise (and how it takes a
plain scalar YAML 1.1 reads otherwise).

Vocabulary (pure): `gitsync.settings` declares these as the settings' defaults, and render's
options (`gitsync.render.options.RenderOptions`) and check limits
(`gitsync.render.healthchecks.CheckLimits`) start from them, so a render made without settings
(a test, the bench) keeps the same limits as the agent.
"""

from __future__ import annotations

MAX_FILE_SIZE = 8 * 1024 * 1024  # bytes: the largest config file accepted
MAX_ITEMS = 100_000  # items in one payload
MAX_PAYLOAD_SIZE = 9 * 1024 * 1024  # bytes of the rendered payload (APISIX's shared dict holds 10 MiB)
#: A plain scalar YAML 1.1 tools read otherwise than YAML 1.2: "warn" (render, told at file:line) or "error".
AMBIGUOUS_SCALARS = "warn"
AMBIGUOUS_SCALARS_CHOICES = ("warn", "error")
MAX_CHECKS = 20  # health checks a repo may declare
MAX_CHECK_TIME = 120.0  # seconds the health checks may take on one gateway, all counted
MAX_CHECK_BODY = 64 * 1024  # bytes of an answer's body a health check reads

__all__ = ["AMBIGUOUS_SCALARS", "AMBIGUOUS_SCALARS_CHOICES", "MAX_CHECKS", "MAX_CHECK_BODY", "MAX_CHECK_TIME",
           "MAX_FILE_SIZE", "MAX_ITEMS", "MAX_PAYLOAD_SIZE"]
