"""Masking a payload for display: secret-bearing fields and every known secret value become ``***``.

Used by ``gitsync render`` (unless ``--show-secrets``) and anywhere else a payload
is shown. ``$secret://`` and ``$env://`` references are not secrets and stay
readable: they say where the value comes from.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from gitsync.log import MASK
from gitsync.render.validate import ENV_OR_SECRET
from gitsync.schema import AUTH_PLUGINS

#: Field names that hold a secret wherever they appear (plugin configs, secret managers, ...).
SECRET_FIELDS = frozenset({
    "password", "secret", "secret_key", "private_key", "client_secret", "token", "api_key", "apikey",
    "access_token", "refresh_token", "session_token", "secret_access_key", "client_key", "auth_key",
    "passphrase", "credentials", "redis_password", "sasl_password",
})
#: Also secret inside an auth plugin's config (key-auth's ``key``, ...).
AUTH_SECRET_FIELDS = frozenset({"key"})
#: Per kind, top-level fields that are secret (an SSL's private key(s)).
KIND_SECRET_FIELDS = {"ssls": frozenset({"key", "keys"})}


def _is_secret_name(name: str) -> bool:
    lowered = name.lower()
    return lowered in SECRET_FIELDS or lowered.endswith(("_password", "_secret", "_token"))


class _Masker:
    def __init__(self, secret_values: Iterable[str]) -> None:
        # Longest first, so a secret containing another is masked whole.
        self.values = sorted({v for v in secret_values if v}, key=len, reverse=True)

    def text(self, value: str) -> str:
        for secret in self.values:
            if secret in value:
                value = value.replace(secret, MASK)
        return value

    def whole(self, value: Any) -> Any:
        """A secret field: strings become ``***`` (references stay), containers are masked inside."""
        if isinstance(value, str):
            return value if ENV_OR_SECRET.match(value) else MASK
        if isinstance(value, list):
            return [self.whole(v) for v in value]
        if isinstance(value, dict):
            return {k: self.whole(v) for k, v in value.items()}
        return value

    def walk(self, value: Any, auth: bool = False) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, list):
            return [self.walk(v, auth) for v in value]
        if not isinstance(value, dict):
            return value
        out: dict[str, Any] = {}
        for key, child in value.items():
            if _is_secret_name(key) or (auth and key in AUTH_SECRET_FIELDS):
                out[key] = self.whole(child)
            elif key == "plugins" and isinstance(child, dict):
                out[key] = {name: self.walk(conf, name in AUTH_PLUGINS) for name, conf in child.items()}
            else:
                out[key] = self.walk(child, auth)
        return out


def mask_secrets(payload: dict[str, Any], secret_values: Iterable[str]) -> dict[str, Any]:
    """A copy of `payload` safe to print: secret fields and secret values replaced by ``***``."""
    masker = _Masker(secret_values)
    out: dict[str, Any] = {}
    for kind, items in payload.items():
        if not isinstance(items, list):
            out[kind] = masker.walk(items)
            continue
        fields = KIND_SECRET_FIELDS.get(kind, frozenset())
        masked = []
        for item in items:
            if isinstance(item, dict):
                item = {k: masker.whole(v) if k in fields else v for k, v in item.items()}
            masked.append(masker.walk(item))
        out[kind] = masked
    return out
