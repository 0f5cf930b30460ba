"""Render options: what a render needs besides the files, all of it already resolved (pure data).

How the settings and the environment turn into them (vars files, secrets, age keys) is
`gitsync.render.environment`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from gitsync.limits import AMBIGUOUS_SCALARS, MAX_FILE_SIZE, MAX_ITEMS, MAX_PAYLOAD_SIZE
from gitsync.render.healthchecks import CheckLimits
from gitsync.render.secrets import NO_RULES, SecretRules


def no_secrets(_name: str) -> str | None:
    """The default secret lookup: nothing is defined."""
    return None


@dataclass(frozen=True)
class RenderOptions:
    """Everything `render` needs besides the files; all values already resolved by the caller."""

    paths: tuple[str, ...] = (".",)
    vars: Mapping[str, str] = field(default_factory=dict)
    secret_lookup: Callable[[str], str | None] = no_secrets
    decrypt: Callable[[str, dict], dict] | None = None
    max_file_size: int = MAX_FILE_SIZE
    max_items: int = MAX_ITEMS
    max_payload_size: int = MAX_PAYLOAD_SIZE
    #: Kinds the agent leaves as they are live: references into them cannot be checked here.
    unmanaged: frozenset[str] = frozenset()
    #: Partial apply: items with problems (and what refers to them) are left out, not the commit.
    partial: bool = False
    #: A plain scalar YAML 1.1 reads otherwise (`gitsync.render.scalars`): "warn" or "error".
    ambiguous_scalars: str = AMBIGUOUS_SCALARS
    #: The bounds of the repo's health checks (their number, their time, the body they read).
    check_limits: CheckLimits = field(default_factory=CheckLimits)
    #: Secret fields the settings declare (`secret_fields`), besides the repo's own.
    secret_rules: SecretRules = NO_RULES


__all__ = ["RenderOptions", "no_secrets"]
