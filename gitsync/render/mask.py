"""Masking a payload for display: every secret the classifier finds, and every known secret value, as ``***``.

Used by ``gitsync render`` (unless ``--show-secrets``), ``gitsync diff`` and the web view.
What is secret is `gitsync.render.secrets`' decision (APISIX's ``encrypt_fields``, kind
fields, names, declared ``secret_fields``, shapes); the known values (``${{ secrets.* }}``,
SOPS) are masked wherever they appear besides. ``$secret://`` and ``$env://`` references
are not secrets and stay readable: they say where the value comes from.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Sequence
from typing import Any

from gitsync.log import MASK
from gitsync.render.secrets import NO_RULES, Finding, SecretRules, classify, mask_text, value_at


class _Known:
    """Known secret values, masked wherever they appear in a string."""

    def __init__(self, values: Iterable[str]) -> None:
        # Longest first, so a secret containing another is masked whole.
        self.values = sorted({v for v in values if v}, key=len, reverse=True)

    def text(self, value: str) -> str:
        for secret in self.values:
            if secret in value:
                value = value.replace(secret, MASK)
        return value

    def walk(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(value) if self.values else value
        if isinstance(value, list):
            return [self.walk(v) for v in value]
        if isinstance(value, dict):
            return {k: self.walk(v) for k, v in value.items()}
        return value


def masked_copy(value: Any, findings: Sequence[Finding]) -> Any:
    """`value` (an item, or a bare string) with the secret parts of each finding replaced by ``***``."""
    if not findings:
        return value
    if not findings[0].path:  # the value is the one string
        return findings[0].masked(value, MASK)
    value = copy.deepcopy(value)
    for finding in findings:
        holder = value_at(value, finding.path[:-1])
        holder[finding.path[-1]] = finding.masked(holder[finding.path[-1]], MASK)
    return value


def mask_item(kind: str, item: Any, secret_values: Iterable[str] = (), rules: SecretRules = NO_RULES) -> Any:
    """A copy of one item safe to show: each secret the classifier finds masked, then each known value."""
    return _Known(secret_values).walk(masked_copy(item, classify(kind, item, rules)))


def mask_secrets(payload: dict[str, Any], secret_values: Iterable[str],
                 rules: SecretRules = NO_RULES) -> dict[str, Any]:
    """A copy of `payload` safe to print: secrets (by the classifier) and secret values replaced by ``***``.

    A key that is not a kind (``{"lines": [...]}``) is masked the same way: its strings by shape."""
    values = tuple(secret_values)
    out: dict[str, Any] = {}
    for kind, items in payload.items():
        if isinstance(items, list):
            out[kind] = [mask_item(kind, item, values, rules) for item in items]
        else:
            out[kind] = mask_item(kind, items, values, rules)
    return out


def mask_known(text: str, secret_values: Iterable[str]) -> str:
    """`text` with each known secret value masked wherever it appears."""
    return _Known(secret_values).text(text)


def mask_line(text: str, secret_values: Iterable[str] = ()) -> str:
    """Free text (a line, a message) with secret shapes and known values masked."""
    return mask_known(mask_text(text, MASK), secret_values)


__all__ = ["mask_item", "mask_known", "mask_line", "mask_secrets", "masked_copy"]
