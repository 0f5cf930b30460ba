"""`testkit.vaultrefs` against a real OpenBao dev server (KV version 1), as APISIX would ask it."""

from __future__ import annotations

import io
import json
import secrets

import httpx
import pytest
from loguru import logger

from gitsync import log as gslog
from testkit import vaultrefs

READ_POLICY = 'path "kv/apisix/*" { capabilities = ["read"] }'


@pytest.fixture
def stored(vault_server):
    """A value put under kv/apisix/<path> and a read-only token for the gateway."""
    path = "consumers/jack-" + secrets.token_hex(4)
    value = "auth-key-" + secrets.token_hex(8)
    vault_server.put_kv(f"apisix/{path}", **{"auth-key": value, "other": "x"})
    token = vault_server.create_token("apisix-read", READ_POLICY)
    return path, value, token


def manager(vault_server, token: str, **extra: object) -> dict:
    return {"id": "vault/main", "uri": vault_server.address, "prefix": "kv/apisix", "token": token, **extra}


def test_reference_resolves_against_the_real_server(vault_server, stored):
    path, value, token = stored
    items = [{"id": "vault/other", "uri": "http://127.0.0.1:9", "prefix": "x", "token": "unused"},
             manager(vault_server, token)]
    assert vaultrefs.resolve(f"$secret://vault/main/{path}/auth-key", items) == value
    assert vaultrefs.resolve(f"$SECRET://vault/main/{path}/other", items) == "x"  # prefix case as APISIX


def test_request_is_the_one_vault_lua_sends(vault_server, stored):
    path, _value, token = stored
    request = vaultrefs.vault_request(manager(vault_server, token, namespace="team-a", timeout=2),
                                  f"{path}/auth-key", {})
    assert request.url == f"{vault_server.address}/v1/kv/apisix/{path}"
    assert request.headers == {"X-Vault-Token": token, "X-Vault-Namespace": "team-a"}
    assert (request.field, request.timeout) == ("auth-key", 2.0)
    # split at the LAST slash; the path is normalised like APISIX's normpath
    odd = vaultrefs.vault_request({"uri": "http://h:1", "prefix": "kv//apisix/", "token": "t"},
                                  "a/./b/c/key", {})
    assert (odd.url, odd.field) == ("http://h:1/v1/kv/apisix/a/b/c", "key")


def test_token_from_the_gateway_environment(vault_server, stored):
    path, value, token = stored
    items = [manager(vault_server, "$env://GW_VAULT_TOKEN")]
    ref = f"$secret://vault/main/{path}/auth-key"
    assert vaultrefs.resolve(ref, items, env={"GW_VAULT_TOKEN": token}) == value
    nested = [manager(vault_server, "$ENV://GW_CREDS/vault")]
    assert vaultrefs.resolve(ref, nested, env={"GW_CREDS": json.dumps({"vault": token})}) == value
    unset = r"403: permission denied .*\$env://GW_VAULT_TOKEN is not set"
    with pytest.raises(vaultrefs.VaultError, match=unset):
        vaultrefs.resolve(ref, items, env={})


def test_wrong_token_fails_clearly_without_showing_it(vault_server, stored):
    path, _value, _token = stored
    wrong = "hvs.wrong-" + secrets.token_hex(8)
    with pytest.raises(vaultrefs.VaultError) as caught:
        vaultrefs.resolve(f"$secret://vault/main/{path}/auth-key", [manager(vault_server, wrong)])
    message = str(caught.value)
    assert f"GET {vault_server.address}/v1/kv/apisix/{path} answered 403: permission denied" in message
    assert "token is wrong" in message and wrong not in message


def test_policy_outside_the_prefix_is_denied(vault_server, stored):
    _path, _value, token = stored
    vault_server.put_kv("elsewhere/db", password="not-for-the-gateway")
    items = [{**manager(vault_server, token), "prefix": "kv/elsewhere"}]
    with pytest.raises(vaultrefs.VaultError, match="403: permission denied"):
        vaultrefs.resolve("$secret://vault/main/db/password", items)


def test_missing_field_path_and_manager_are_clear(vault_server, stored):
    path, _value, token = stored
    items = [manager(vault_server, token)]
    with pytest.raises(vaultrefs.VaultError, match=r"no field 'nope' in .* \(fields: auth-key, other\)"):
        vaultrefs.resolve(f"$secret://vault/main/{path}/nope", items)
    with pytest.raises(vaultrefs.VaultError, match="answered 404"):
        vaultrefs.resolve("$secret://vault/main/consumers/absent/key", items)
    with pytest.raises(vaultrefs.VaultError, match="no secret conf, secret_uri: vault/gone"):
        vaultrefs.resolve(f"$secret://vault/gone/{path}/auth-key", items)
    with pytest.raises(vaultrefs.VaultError, match="error key format, key: jack"):
        vaultrefs.resolve("$secret://vault/main/jack", items)
    with pytest.raises(vaultrefs.VaultError, match="only vault references"):
        vaultrefs.resolve("$secret://aws/main/jack/key", items)
    with pytest.raises(vaultrefs.VaultError, match="no secret manager"):
        vaultrefs.parse_reference("$secret://vault")
    with pytest.raises(vaultrefs.VaultError, match="no secret conf id"):
        vaultrefs.parse_reference("$secret://vault/main")


def test_kv_version_2_mount_is_not_what_apisix_reads(vault_server, stored):
    _path, _value, _token = stored
    vault_server.call("POST", "sys/mounts/kv2", {"type": "kv", "options": {"version": "2"}})
    vault_server.call("POST", "kv2/data/apisix/jack", {"data": {"auth-key": "v2-value"}})
    items = [{"id": "vault/main", "uri": vault_server.address, "prefix": "kv2/data/apisix",
              "token": vault_server.root_token}]
    with pytest.raises(vaultrefs.VaultError, match=r"no field 'auth-key' .*\(fields: data, metadata\)"):
        vaultrefs.resolve("$secret://vault/main/jack/auth-key", items)


def test_namespace_header_reaches_the_server(vault_server):
    vault_server.call("POST", "sys/namespaces/team-a")
    vault_server.mount_kv1(namespace="team-a")
    vault_server.put_kv("apisix/svc", namespace="team-a", key="in-namespace-value")
    items = [{"id": "vault/ns", "uri": vault_server.address, "prefix": "kv/apisix",
              "token": vault_server.root_token, "namespace": "team-a"}]
    assert vaultrefs.resolve("$secret://vault/ns/svc/key", items) == "in-namespace-value"
    with pytest.raises(vaultrefs.VaultError, match="answered 404"):  # the root namespace has no such secret
        vaultrefs.resolve("$secret://vault/ns/svc/key", [{**items[0], "namespace": None}])


def test_resolve_all_references_of_a_payload_and_mask_them(vault_server, stored):
    path, value, token = stored
    ref = f"$secret://vault/main/{path}/auth-key"
    payload = {
        "routes": [{"id": "r1", "uri": "/a", "plugins": {"limit-count": {"redis_password": ref}}}],
        "consumers": [{"username": "jack", "plugins": {"key-auth": {"key": ref}}}],
        "secrets": [manager(vault_server, token)],
    }
    out = io.StringIO()
    gslog.setup(stream=out)
    with httpx.Client(trust_env=False) as client:
        assert vaultrefs.resolve_all(payload, client=client) == {ref: value}
    logger.info("resolved {} and token {}", value, token)
    assert value not in out.getvalue() and token not in out.getvalue()
    payload["routes"][0]["plugins"]["limit-count"]["redis_password"] = f"$secret://vault/main/{path}/typo"
    typo = r"^routes\[0\]\.plugins\.limit-count\.redis_password: .*typo"
    with pytest.raises(vaultrefs.VaultError, match=typo):
        vaultrefs.resolve_all(payload)
