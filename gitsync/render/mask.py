"""Masking a payload for display: secret-bearing fields and every known secret value become ``***``.

Used by ``gitsync render`` (unless ``--show-secrets``) and anywhere else a payload
is shown. ``$secret://`` and ``$env://`` references are not secrets and stay
readable: they say where the value comes from.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from gitsync.log import MASK
from gitsync.render.validate import ENV_OR_SECRET
from gitsync.schema import AUTH_PLUGINS

#: Field names (lower case, ``-`` read as ``_``) that hold a secret wherever they appear: plugin
#: configs, secret managers, upstream TLS. Cloud access-key ids are masked with their secret half:
#: the pair is one credential.
SECRET_FIELDS = frozenset({
    "password", "secret", "secret_key", "private_key", "client_secret", "token", "api_key", "apikey",
    "access_token", "refresh_token", "session_token", "secret_access_key", "client_key", "auth_key",
    "passphrase", "credentials", "redis_password", "sasl_password", "auth_header", "authorization",
    "proxy_authorization", "access_key_id", "access_key", "accesskey", "secretkey", "secret_id",
})
_SECRET_SUFFIXES = ("_password", "_secret", "_token", "_api_key")
#: Per plugin, fields secret inside that plugin's config only (key-auth's ``key`` is the
#: credential; limit-count's ``key`` is only the name of a variable).
PLUGIN_SECRET_FIELDS: dict[str, frozenset[str]] = {
    **{name: frozenset({"key"}) for name in AUTH_PLUGINS},
    "csrf": frozenset({"key"}),  # the key that signs the tokens
}
#: Per kind, top-level fields that are secret (an SSL's private key(s)).
KIND_SECRET_FIELDS = {"ssls": frozenset({"key", "keys"})}
#: The password of a URL's user info (``scheme://user:password@host``).
_URL_PASSWORD = re.compile(r"(?<=://)([^/?#@\s:]*):([^/?#@\s]+)@")


def _is_secret_name(name: str) -> bool:
    normal = name.lower().replace("-", "_")
    return normal in SECRET_FIELDS or normal.endswith(_SECRET_SUFFIXES)


class _Masker:
    def __init__(self, secret_values: Iterable[str]) -> None:
        # Longest first, so a secret containing another is masked whole.
        self.values = sorted({v for v in secret_values if v}, key=len, reverse=True)

    def text(self, value: str) -> str:
        for secret in self.values:
            if secret in value:
                value = value.replace(secret, MASK)
        if "@" in value:
            value = _URL_PASSWORD.sub(rf"\1:{MASK}@", value)
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

    def walk(self, value: Any, extra: frozenset[str] = frozenset()) -> Any:
        """Mask secret fields (by name, plus `extra`, the current plugin's own) and known values."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, list):
            return [self.walk(v, extra) for v in value]
        if not isinstance(value, dict):
            return value
        out: dict[str, Any] = {}
        for key, child in value.items():
            if _is_secret_name(key) or key in extra:
                out[key] = self.whole(child)
            elif key == "plugins" and isinstance(child, dict):
                out[key] = {name: self.walk(conf, PLUGIN_SECRET_FIELDS.get(name, frozenset()))
                            for name, conf in child.items()}
            else:
                out[key] = self.walk(child, extra)
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
