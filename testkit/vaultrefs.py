"""Resolve ``$secret://vault/...`` references the way APISIX's vault secret manager does.

For the end-to-end secrets tests: given the ``secrets`` items of a rendered payload, check
that a reference really resolves against the Vault (or OpenBao) server the gateway would ask.
It follows APISIX's ``apisix/secret.lua``, ``apisix/secret/vault.lua`` and
``apisix/core/env.lua``:

- ``$secret://<manager>/<confid>/<key>`` (prefix case-insensitive); the manager
  config is the ``secrets`` item whose id is ``<manager>/<confid>``;
- the key is split at its **last** ``/`` into a path and a field;
- ``GET <uri>`` + normpath(``/v1/<prefix>/<path>``) with ``X-Vault-Token`` (which may be
  ``$env://NAME[/field]``, the literal string when the variable is unset) and
  ``X-Vault-Namespace`` when set, a ``{}`` body, ``timeout`` seconds (default 5);
- the value is ``data[<field>]`` of the answer: the KV version 1 shape.

APISIX does not look at the status code; here a failure raises `VaultError` with the
status and Vault's own error text, so that a CI log says why (never the token).
"""

from __future__ import annotations

import json
import os
import posixpath
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from gitsync.log import redact, register_secret
from gitsync.render.sourcemap import string_leaves

SECRET_PREFIX = "$secret://"
ENV_PREFIX = "$env://"
DEFAULT_TIMEOUT = 5.0  # seconds, as vault.lua when the manager has no `timeout`


class VaultError(Exception):
    """A reference that APISIX could not resolve either; the message never holds a secret."""

    def __init__(self, message: str) -> None:
        super().__init__(redact(message))


@dataclass(frozen=True)
class SecretReference:
    """``$secret://<manager>/<conf_id>/<key>``, parsed as secret.lua ``parse_secret_uri`` does."""

    manager: str
    conf_id: str
    key: str

    @property
    def manager_id(self) -> str:
        """The id of the ``secrets`` item that configures this manager."""
        return f"{self.manager}/{self.conf_id}"


def is_reference(value: object) -> bool:
    """True for a string APISIX would treat as a secret reference."""
    return isinstance(value, str) and value[: len(SECRET_PREFIX)].lower() == SECRET_PREFIX


def parse_reference(ref: str) -> SecretReference:
    """Split a reference; errors use APISIX's wording."""
    if not is_reference(ref):
        raise VaultError(f"error secret_uri prefix: {ref}")
    path = ref[len(SECRET_PREFIX):]
    manager, sep, rest = path.partition("/")
    if not sep:
        raise VaultError(f"{ref}: error format: no secret manager")
    conf_id, sep, key = rest.partition("/")
    if not sep:
        raise VaultError(f"{ref}: error format: no secret conf id")
    if not key:
        raise VaultError(f"{ref}: error format: no secret key id")
    return SecretReference(manager, conf_id, key)


def env_value(value: str, env: Mapping[str, str]) -> str | None:
    """``$env://NAME`` or ``$env://NAME/field`` (JSON) as core/env.lua reads it; None when unset."""
    if value[: len(ENV_PREFIX)].upper() != ENV_PREFIX.upper():
        return None
    name, sep, field = value[len(ENV_PREFIX):].partition("/")
    main = env.get(name)
    if main is None or not sep or not field:
        return main
    try:
        decoded = json.loads(main)
    except ValueError:
        return None
    found = decoded.get(field) if isinstance(decoded, dict) else None
    return found if isinstance(found, str) else None


@dataclass(frozen=True)
class VaultRequest:
    """The HTTP request vault.lua sends for one key (pure: no I/O)."""

    url: str
    headers: dict[str, str]
    field: str
    timeout: float
    token_from_env: str | None  # the variable named by `$env://`, when the token is one and unset


def vault_request(manager: Mapping[str, Any], key: str, env: Mapping[str, str]) -> VaultRequest:
    """Build the GET for `key` (``<path>/<field>``) from a vault manager item."""
    path, sep, field = key.rpartition("/")
    if not sep:
        raise VaultError(f"error key format, key: {key}")
    for name in ("uri", "prefix", "token"):
        if not isinstance(manager.get(name), str):
            raise VaultError(f"secret manager {manager.get('id')}: `{name}` must be a string")
    raw_token = manager["token"]
    token = env_value(raw_token, env)
    unset = None
    if token is None and raw_token[: len(ENV_PREFIX)].upper() == ENV_PREFIX.upper():
        unset = raw_token[len(ENV_PREFIX):]  # a variable name, not a secret
    else:
        register_secret(token or raw_token)
    token = raw_token if token is None else token  # APISIX falls back to the literal string
    headers = {"X-Vault-Token": token}
    if manager.get("namespace"):
        headers["X-Vault-Namespace"] = str(manager["namespace"])
    url = manager["uri"] + posixpath.normpath(f"/v1/{manager['prefix']}/{path}")
    timeout = manager.get("timeout") or DEFAULT_TIMEOUT
    return VaultRequest(url, headers, field, float(timeout), unset)


def find_manager(secrets: Iterable[Mapping[str, Any]], manager_id: str) -> Mapping[str, Any]:
    """The ``secrets`` item with id `manager_id` (``vault/main``)."""
    for item in secrets:
        if isinstance(item, Mapping) and item.get("id") == manager_id:
            return item
    raise VaultError(f"no secret conf, secret_uri: {manager_id} is not among the secrets items")


def resolve(ref: str, secrets: Iterable[Mapping[str, Any]], *, env: Mapping[str, str] | None = None,
            client: httpx.Client | None = None) -> object:
    """The value APISIX would put in place of `ref`, fetched from the real server now.

    `secrets` are the payload's ``secrets`` items; `env` stands for the gateway's environment
    (``$env://`` tokens), this process's by default. The value is registered as a secret.
    """
    reference = parse_reference(ref)
    if reference.manager != "vault":
        raise VaultError(f"{ref}: only vault references can be resolved here, not {reference.manager}")
    request = vault_request(find_manager(secrets, reference.manager_id), reference.key,
                            os.environ if env is None else env)
    answer = _get(request, ref, client)
    data = answer.get("data") if isinstance(answer, dict) else None
    if not isinstance(data, dict):
        raise VaultError(f"{ref}: GET {request.url} answered without `data` (is the mount KV version 1?)")
    if request.field not in data:
        raise VaultError(f"{ref}: no field {request.field!r} in {request.url} (fields: "
                         f"{', '.join(sorted(data)) or 'none'})")
    value = data[request.field]
    register_secret(value if isinstance(value, str) else json.dumps(value))
    return value


def _get(request: VaultRequest, ref: str, client: httpx.Client | None) -> object:
    own = client is None
    http = client or httpx.Client(trust_env=False)
    try:
        response = http.request("GET", request.url, headers=request.headers, content=b"{}",
                                timeout=request.timeout)
    except httpx.HTTPError as exc:
        raise VaultError(f"{ref}: GET {request.url} failed: {type(exc).__name__}: {exc}") from None
    finally:
        if own:
            http.close()
    try:
        answer = response.json()
    except ValueError:
        answer = None
    if response.status_code != 200:
        errors = answer.get("errors") if isinstance(answer, dict) else None
        detail = "; ".join(_error_lines(errors)) if errors else response.reason_phrase
        hint = ""
        if response.status_code == 403:
            hint = " (the manager's token is wrong, expired or lacks a read policy"
            hint += f"; $env://{request.token_from_env} is not set)" if request.token_from_env else ")"
        raise VaultError(f"{ref}: GET {request.url} answered {response.status_code}: "
                         f"{detail or 'no detail'}{hint}")
    return answer


def _error_lines(errors: object) -> list[str]:
    """Vault's ``errors`` as single lines ("1 error occurred:\\n\\t* permission denied" → the bullet)."""
    lines: list[str] = []
    for error in errors if isinstance(errors, list) else [errors]:
        text = str(error)
        bullets = [line.strip()[2:] for line in text.splitlines() if line.strip().startswith("* ")]
        lines += bullets or [" ".join(text.split())]
    return lines


def find_references(node: object) -> Iterator[tuple[tuple[str | int, ...], str]]:
    """Every secret reference string inside `node`, with its path (kind, index, field, ...)."""
    return ((where, text) for where, text in string_leaves(node) if is_reference(text))


def resolve_all(payload: Mapping[str, Any], *, env: Mapping[str, str] | None = None,
                client: httpx.Client | None = None) -> dict[str, object]:
    """Resolve every ``$secret://vault/...`` reference of a payload against its ``secrets`` items.

    Returns ``{reference: value}``; any reference that fails makes one `VaultError` listing all
    failures, each with the place it is used (``routes[0].plugins...``).
    """
    secrets = payload.get("secrets") or []
    values: dict[str, object] = {}
    failures: list[str] = []
    for where, ref in find_references({k: v for k, v in payload.items() if k != "secrets"}):
        if ref in values or not ref[len(SECRET_PREFIX):].lower().startswith("vault/"):
            continue
        try:
            values[ref] = resolve(ref, secrets, env=env, client=client)
        except VaultError as exc:
            place = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in where).lstrip(".")
            failures.append(f"{place}: {exc}")
    if failures:
        raise VaultError("\n".join(failures))
    return values


__all__ = [
    "SecretReference",
    "VaultError",
    "VaultRequest",
    "env_value",
    "find_manager",
    "find_references",
    "is_reference",
    "parse_reference",
    "resolve",
    "resolve_all",
    "vault_request",
]
