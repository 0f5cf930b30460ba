"""The APISIX double answers as APISIX 3.18 (and 3.13–3.21) does, over real loopback HTTP.

tests/testing/test_golden.py replays the recorded 3.18 answers; these tests cover what a recording
cannot: versions, fault knobs, the data plane's timing.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest

from gitsync.kinds import VERSIONED_KEYS
from gitsync.testing.apisix import ApisixDouble
from gitsync.testing.http import nginx_page
from testkit.processes import free_port, gitsync_env, wait_for

KEY = "test-admin-key"
CONFIGS = "/apisix/admin/configs"
FRESH = {f"{k}_conf_version": 0 for k in VERSIONED_KEYS}
CORS = {
    "access-control-allow-origin": "*",
    "access-control-allow-credentials": "true",
    "access-control-expose-headers": "*",
    "access-control-max-age": "3600",
}
ROUTE = {"id": "r1", "uri": "/a", "upstream_id": "u1"}
UPSTREAM = {"id": "u1", "nodes": {"127.0.0.1:1980": 1}}


@pytest.fixture
def admin(apisix: ApisixDouble) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=apisix.url, headers={"X-API-KEY": KEY}, timeout=10) as client:
        yield client


def put(client: httpx.Client, body: object, digest: str | None = "d1", **headers: str) -> httpx.Response:
    if digest is not None:
        headers["X-Digest"] = digest
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return client.put(CONFIGS, content=content, headers=headers)


def error(response: httpx.Response) -> str:
    assert response.text.endswith("}\n")
    return response.json()["error_msg"]


def proxy(apisix: ApisixDouble, path: str, host: str = "127.0.0.1", method: str = "GET") -> httpx.Response:
    return httpx.request(method, apisix.proxy_url + path, headers={"Host": host}, timeout=10)


# ---------------------------------------------------------------- rows 1-9: routing, CORS, auth


def test_row1_options_on_any_admin_path_is_a_cors_preflight(apisix):
    for path in (CONFIGS, "/apisix/admin/routes"):
        response = httpx.options(apisix.url + path)
        assert response.status_code == 200 and response.content == b""
        assert response.headers["content-type"] == "text/plain; charset=utf-8"  # recorded on 3.18
        assert response.headers["access-control-allow-methods"] == "POST, GET, PUT, OPTIONS, DELETE, PATCH"
        assert response.headers["access-control-allow-headers"] == "*"
        assert response.headers.get_list("access-control-allow-origin") == ["*"]
        assert "access-control-expose-headers" not in response.headers


@pytest.mark.parametrize(("method", "path"), [("DELETE", CONFIGS), ("POST", CONFIGS),
                                              ("GET", "/apisix/admin/routes"), ("GET", "/apisix/admin"),
                                              ("GET", CONFIGS + "/")])
def test_row2_unrouted_requests_get_nginx_404_before_auth(apisix, method, path):
    response = httpx.request(method, apisix.url + path)  # no key at all: routing comes first
    assert response.status_code == 404
    assert response.content == nginx_page(404)
    assert response.headers["content-type"] == "text/html; charset=utf-8"
    assert response.headers["server"] == "APISIX/3.18.0"


def test_row5_head_admin_needs_no_key(apisix):
    response = httpx.head(apisix.url + "/apisix/admin")
    assert response.status_code == 200 and response.content == b""
    assert response.headers["server"] == "APISIX/3.18.0"
    assert {k: response.headers[k] for k in CORS} == CORS


def test_row6_clients_outside_allow_admin_get_403():
    with ApisixDouble(KEY, host="::1", proxy=False) as ipv6:  # ::1 is not in 127.0.0.0/24
        response = httpx.get(ipv6.url + CONFIGS, headers={"X-API-KEY": KEY})
        assert response.status_code == 403 and response.content == nginx_page(403)


def test_rows7_to_9_token_checks(apisix):
    missing = httpx.get(apisix.url + CONFIGS)
    assert missing.status_code == 401
    assert missing.text == '{"error_msg":"failed to check token","description":"missing apikey"}\n'
    wrong = httpx.get(apisix.url + CONFIGS, headers={"X-API-KEY": "nope"})
    assert wrong.json() == {"error_msg": "failed to check token", "description": "wrong apikey"}
    assert {k: wrong.headers[k] for k in CORS} == CORS
    assert httpx.get(apisix.url + CONFIGS, params={"api_key": KEY}).status_code == 200
    assert httpx.get(apisix.url + CONFIGS, cookies={"x_api_key": KEY}).status_code == 200


def test_row9_viewer_may_only_get():
    with ApisixDouble(KEY, viewer_key="viewer-key", proxy=False) as gw:
        viewer = {"X-API-KEY": "viewer-key"}
        assert httpx.get(gw.url + CONFIGS, headers=viewer).status_code == 200
        for method in ("PUT", "HEAD", "POST"):
            path = CONFIGS + "/validate" if method == "POST" else CONFIGS
            response = httpx.request(method, gw.url + path, headers={**viewer, "X-Digest": "x"},
                                     content=b"{}")
            assert response.status_code == 401
            if method != "HEAD":
                assert response.json()["description"] == "invalid method for role viewer"
        assert gw.config() == FRESH


# ---------------------------------------------------------------- rows 10-14: GET and HEAD


def test_row10_fresh_get_has_13_versions_and_no_metadata(admin):
    response = admin.get(CONFIGS)
    assert response.status_code == 200
    assert response.json() == FRESH
    assert response.headers["content-type"] == "application/json"
    assert "x-digest" not in response.headers and "x-last-modified" not in response.headers
    head = admin.head(CONFIGS)
    assert head.status_code == 200 and head.content == b""
    assert "x-digest" not in head.headers and "x-last-modified" not in head.headers


def test_row11_yaml_on_accept_prefix(admin):
    put(admin, {"routes": [ROUTE], "upstreams": [{"id": "u1", "nodes": []}]})
    response = admin.get(CONFIGS, headers={"Accept": "application/yaml; q=1"})
    assert response.headers["content-type"] == "application/yaml"
    assert not response.text.startswith("---") and not response.text.rstrip().endswith("...")
    from ruamel.yaml import YAML
    data = YAML(typ="safe").load(response.text)
    assert data["routes"] == [ROUTE] and data["upstreams"][0]["nodes"] == []  # YAML keeps [] (recorded)
    assert admin.get(CONFIGS, headers={"Accept": "text/yaml"}).headers["content-type"] == "application/json"


def test_rows12_13_35_get_after_put_carries_metadata_and_renders_empty_arrays_as_objects(admin, apisix):
    before = int(time.time())
    body = {"routes": [{**ROUTE, "vars": []}], "upstreams": [{"id": "u1", "nodes": []}]}
    accepted = put(admin, body, digest="sha-1")
    assert accepted.status_code == 202 and accepted.content == b""
    assert accepted.headers["x-digest"] == "sha-1"
    modified = int(accepted.headers["x-last-modified"])
    assert before <= modified <= time.time()
    response = admin.get(CONFIGS)
    data = response.json()
    assert response.headers["x-digest"] == "sha-1" and int(response.headers["x-last-modified"]) == modified
    assert data["X-Digest"] == "sha-1" and data["X-Last-Modified"] == modified
    assert data["routes"] == [{**ROUTE, "vars": {}}]
    assert data["upstreams"] == [{"id": "u1", "nodes": {}}]
    assert all(data[f"{k}_conf_version"] == 1 for k in VERSIONED_KEYS)
    assert "services" not in data
    assert apisix.config()["routes"] == [{**ROUTE, "vars": []}]  # stored as sent
    head = admin.head(CONFIGS)
    assert head.headers["x-digest"] == "sha-1" and head.content == b""


# ---------------------------------------------------------------- rows 15-20: PUT framing


def test_row15_missing_digest_is_checked_before_the_body(admin):
    response = put(admin, b"", digest=None)
    assert response.status_code == 400 and error(response) == "missing digest header"


def test_rows16_to_18_bad_bodies(admin):
    assert error(put(admin, b"")) == "invalid request body: empty request body"
    assert error(put(admin, b"{abcd")) == (
        "invalid request body: Expected object key string but found invalid token at character 2")
    assert error(put(admin, b'{"routes": [1,]}')) == (
        "invalid request body: Expected value but found T_ARR_END at character 15")
    assert error(put(admin, b'{"a": 1} x')) == (
        "invalid request body: Expected the end but found invalid token at character 10")
    yaml_scalar = put(admin, b"just text", **{"Content-Type": "application/yaml"})
    assert error(yaml_scalar) == "invalid request body: invalid yaml request body"


def test_chunked_bodies_are_read(admin, apisix):
    def chunks() -> Iterator[bytes]:
        yield b'{"routes": ['
        yield json.dumps(ROUTE).encode() + b"]}"

    response = admin.put(CONFIGS, content=chunks(), headers={"X-Digest": "c"})
    assert response.status_code == 202 and apisix.config()["routes"] == [ROUTE]


def test_row19_yaml_syntax_error_crashes(admin, apisix):
    response = put(admin, b"routes: [", **{"Content-Type": "application/yaml"})
    assert response.status_code == 500 and response.content == nginx_page(500)
    assert apisix.config() == FRESH


def test_yaml_body_is_accepted(admin, apisix):
    response = put(admin, b"routes:\n  - id: r1\n    uri: /a\n    upstream_id: u1\n    desc: 2024-01-01\n"
                          b"---\nroutes: []\n", **{"Content-Type": "application/yaml"})
    assert response.status_code == 202
    assert apisix.config()["routes"] == [{**ROUTE, "desc": "2024-01-01"}]  # first document, text kept


def test_row20_same_digest_is_204_without_any_check(admin, apisix):
    assert put(admin, {"routes": [ROUTE], "routes_conf_version": 5}, digest="same").status_code == 202
    stored = apisix.config()
    again = put(admin, {"routes": [{"uri": 1}], "routes_conf_version": 1}, digest="same")
    assert again.status_code == 204 and again.content == b""
    assert "x-digest" not in again.headers and "content-type" not in again.headers
    assert apisix.config() == stored


# ---------------------------------------------------------------- rows 21-28: validation


def test_row21_version_not_a_number(admin, apisix):
    assert error(put(admin, {"routes_conf_version": "3"})) == "routes_conf_version must be a number"
    assert error(put(admin, {"ssls_conf_version": None})) == "ssls_conf_version must be a number"
    assert apisix.config() == FRESH


def test_row22_invalid_items_answer_the_bare_first_message(admin, apisix):
    response = put(admin, {"routes": [{"id": "r1", "uri": 1, "upstream_id": "u1"}]})
    assert response.status_code == 400
    assert response.text == ('{"error_msg":"invalid configuration: property \\"uri\\" validation failed: '
                             'wrong type: expected string, got number"}\n')
    assert error(put(admin, {"routes": [{**ROUTE, "plugins": {"invalid-plugin": {}}}]})) == (
        "unknown plugin [invalid-plugin]")
    assert error(put(admin, {"consumers": [{"id": "bob", "username": "alice"}]})) == "wrong username"
    assert apisix.config() == FRESH


def test_row23_duplicates(admin):
    assert error(put(admin, {"routes": [ROUTE, ROUTE]})) == "found duplicate id r1 in routes"
    assert error(put(admin, {"consumers": [{"username": "consumer1"}, {"username": "consumer1"}]})) == (
        "found duplicate username consumer1 in consumers")
    cred = {"id": "john_1/credentials/john-a", "plugins": {"key-auth": {"key": "k"}}}
    assert error(put(admin, {"consumers": [cred, cred]})) == (
        "found duplicate credential id john_1/credentials/john-a in consumers")


def test_row24_items_without_id_are_accepted_in_3_17(admin, apisix):
    idless = {"routes": [{"uri": "/x", "upstream_id": "u1"}], "upstreams": [UPSTREAM]}
    assert put(admin, idless).status_code == 202
    assert proxy(apisix, "/x").headers["x-route-id"] == "arr_1"  # the runtime's synthetic id


def test_rows25_26_secret_ids(admin):
    assert error(put(admin, {"secrets": [{"id": "vault1", "uri": "http://127.0.0.1:8200"}]})) == (
        "invalid secret id: vault1")
    assert error(put(admin, {"secrets": [{"id": "kms/1"}]})) == "invalid secret manager: kms"


def test_row27_global_rule_plugin_already_in_another_live_rule(admin):
    assert put(admin, {"global_rules": [{"id": "a", "plugins": {"prometheus": {}}}]}).status_code == 202
    moved = put(admin, {"global_rules": [{"id": "b", "plugins": {"prometheus": {}}}]}, digest="d2")
    assert error(moved) == "plugin 'prometheus' already exists in global rule with id 'a'"


def test_row28_consumer_auth_key_owned_by_another_live_consumer(admin):
    alice = {"username": "alice", "plugins": {"key-auth": {"key": "shared"}}}
    assert put(admin, {"consumers": [alice]}).status_code == 202
    bob = {"username": "bob", "plugins": {"key-auth": {"key": "shared"}}}
    assert error(put(admin, {"consumers": [bob]}, digest="d2")) == (
        "duplicate key of plugin key-auth found with consumer: alice")


# ---------------------------------------------------------------- rows 29-34: versions


def test_row29_lower_version_is_refused_and_nothing_applied(admin, apisix):
    assert put(admin, {"routes": [ROUTE], "routes_conf_version": 100}).status_code == 202
    stored = apisix.config()
    refused = put(admin, {"routes": [], "routes_conf_version": 99}, digest="d2")
    assert refused.status_code == 400
    assert error(refused) == "routes_conf_version must be greater than or equal to (100)"
    assert apisix.config() == stored
    assert error(put(admin, {"ssls_conf_version": -1}, digest="d3")) == (
        "ssls_conf_version must be greater than or equal to (1)")


def test_row30_equal_version_keeps_live_content_but_is_validated(admin, apisix):
    assert put(admin, {"routes": [ROUTE], "routes_conf_version": 7}).status_code == 202
    kept = put(admin, {"routes": [{**ROUTE, "uri": "/other"}], "routes_conf_version": 7}, digest="d2")
    assert kept.status_code == 202
    assert apisix.config()["routes"] == [ROUTE] and apisix.config()["X-Digest"] == "d2"
    no_list = put(admin, {"routes_conf_version": 7}, digest="d3")
    assert no_list.status_code == 202 and apisix.config()["routes"] == [ROUTE]
    invalid = put(admin, {"routes": [{"uri": 1}], "routes_conf_version": 7}, digest="d4")
    assert invalid.status_code == 400


def test_rows31_32_33_higher_absent_and_empty(admin, apisix):
    assert put(admin, {"routes": [ROUTE], "upstreams": [UPSTREAM], "routes_conf_version": 3,
                       "upstreams_conf_version": 3}).status_code == 202
    assert put(admin, {"routes_conf_version": 4, "upstreams_conf_version": 3}, digest="d2").status_code == 202
    config = apisix.config()
    assert "routes" not in config and config["routes_conf_version"] == 4
    assert config["upstreams"] == [UPSTREAM] and config["ssls_conf_version"] == 2
    assert put(admin, {"routes_conf_version": 15}, digest="d3").status_code == 202
    config = apisix.config()
    assert config["routes_conf_version"] == 15 and config["upstreams_conf_version"] == 4
    assert "upstreams" not in config
    assert put(admin, {}, digest="d4").status_code == 202
    versions = {k: v for k, v in apisix.config().items() if k.endswith("_version")}
    assert versions == {**{k: 4 for k in FRESH}, "routes_conf_version": 16, "upstreams_conf_version": 5}


def test_unknown_top_level_keys_and_body_metadata_are_ignored(admin, apisix):
    body = {"route": [ROUTE], "X-Digest": "forged", "X-Last-Modified": 1}
    assert put(admin, body, digest="real").status_code == 202
    config = apisix.config()
    assert "route" not in config and config["X-Digest"] == "real" and config["X-Last-Modified"] > 1


def test_versions_and_indexes_round_to_14_digits(admin, apisix):
    big = 123456789012345678
    body = {"routes": [{**ROUTE, "modifiedIndex": big}], "routes_conf_version": big}
    assert put(admin, body).status_code == 202
    config = apisix.config()
    assert config["routes_conf_version"] == 123456789012350000
    assert config["routes"][0]["modifiedIndex"] == 123456789012350000
    assert error(put(admin, {"routes_conf_version": 5}, digest="d2")) == (
        "routes_conf_version must be greater than or equal to (1.2345678901235e+17)")


def test_row34_config_larger_than_the_shared_dict(admin, apisix):
    huge = {"routes": [{**ROUTE, "plugins": {"echo": {"body": "x" * (10 * 1024 * 1024)}}}]}
    response = put(admin, huge)
    assert response.status_code == 500
    assert response.text == "failed to save config to shared dict: no memory"
    assert apisix.config() == FRESH


# ---------------------------------------------------------------- rows 36-37: data plane


def test_row36_unchanged_modified_index_keeps_the_old_object(admin, apisix):
    first = {"routes": [{**ROUTE, "modifiedIndex": 1}], "upstreams": [UPSTREAM]}
    assert put(admin, first).status_code == 202
    assert proxy(apisix, "/a").status_code == 200
    changed = {"routes": [{**ROUTE, "uri": "/b", "modifiedIndex": 1}], "upstreams": [UPSTREAM],
               "upstreams_conf_version": 1}
    assert put(admin, changed, digest="d2").status_code == 202
    assert admin.get(CONFIGS).json()["routes"][0]["uri"] == "/b"  # GET shows what was sent
    assert proxy(apisix, "/a").status_code == 200  # the data plane kept the old route
    assert proxy(apisix, "/b").json() == {"error_msg": "404 Route Not Found"}
    bumped = {"routes": [{**ROUTE, "uri": "/b", "modifiedIndex": 2}], "upstreams_conf_version": 1}
    assert put(admin, bumped, digest="d3").status_code == 202
    assert proxy(apisix, "/b").headers["x-route-id"] == "r1"
    assert proxy(apisix, "/a").status_code == 404
    # without modifiedIndex the item is rebuilt on every version bump
    unindexed = {"routes": [{**ROUTE, "uri": "/c"}], "upstreams_conf_version": 1}
    assert put(admin, unindexed, digest="d4").status_code == 202
    assert proxy(apisix, "/c").status_code == 200


def test_data_plane_matching_and_headers(admin, apisix):
    body = {
        "routes": [
            {"id": "exact", "uri": "/api/v1", "upstream_id": "u1", "methods": ["GET"]},
            {"id": "prefix", "uri": "/api/*", "service_id": "s1"},
            {"id": "hosted", "uris": ["/h"], "hosts": ["*.example.com"],
             "upstream": {"nodes": {"127.0.0.1:1": 1}}},
            {"id": "off", "uri": "/off", "upstream_id": "u1", "status": 0},
        ],
        "services": [{"id": "s1", "upstream_id": "u2"}],
        "upstreams": [UPSTREAM, {"id": "u2", "nodes": {"127.0.0.1:2": 1}}],
    }
    assert put(admin, body).status_code == 202
    exact = proxy(apisix, "/api/v1")
    assert (exact.headers["x-route-id"], exact.headers["x-upstream-id"]) == ("exact", "u1")
    post = proxy(apisix, "/api/v1", method="POST")
    assert (post.headers["x-route-id"], post.headers["x-upstream-id"], post.headers["x-service-id"]) == (
        "prefix", "u2", "s1")
    assert proxy(apisix, "/h", host="a.example.com").headers["x-route-id"] == "hosted"
    assert proxy(apisix, "/h", host="example.org").status_code == 404
    assert proxy(apisix, "/off").status_code == 404
    assert proxy(apisix, "/nothing").text == '{"error_msg":"404 Route Not Found"}\n'


def test_data_plane_evaluates_a_routes_vars_as_lua_resty_expr(admin, apisix):
    body = {
        "routes": [
            {"id": "templated", "uris": ["/users/*"], "vars": [["uri", "~~", "^/users/[^/]+$"]],
             "upstream_id": "u1"},
            {"id": "deeper", "uris": ["/users/*"], "priority": 13, "upstream_id": "u1",
             "vars": [["uri", "~~", "^/users/[^/]+/orders$"], ["request_method", "in", ["GET", "HEAD"]]]},
            {"id": "either", "uri": "/e", "upstream_id": "u1",
             "vars": ["OR", ["host", "==", "a.example.com"], ["host", "==", "b.example.com"]]},
            {"id": "negated", "uri": "/n", "upstream_id": "u1", "vars": [["uri", "!", "~~", "^/n$"]]},
        ],
        "upstreams": [UPSTREAM],
    }
    assert put(admin, body).status_code == 202
    assert proxy(apisix, "/users/42").headers["x-route-id"] == "templated"
    assert proxy(apisix, "/users/42/orders").headers["x-route-id"] == "deeper"
    assert proxy(apisix, "/users/42/orders", method="POST").status_code == 404
    assert proxy(apisix, "/users/4/2").status_code == 404  # a template is one segment
    assert proxy(apisix, "/users/%34%32").headers["x-route-id"] == "templated"  # vars see the decoded uri
    assert proxy(apisix, "/e", host="b.example.com").headers["x-route-id"] == "either"
    assert proxy(apisix, "/e", host="c.example.com").status_code == 404
    assert proxy(apisix, "/n").status_code == 404


def test_row37_dangling_references_are_accepted_then_fail_at_request_time(admin, apisix):
    body = {"routes": [{"id": "a", "uri": "/u", "upstream_id": "missing"},
                       {"id": "b", "uri": "/s", "service_id": "missing"},
                       {"id": "c", "uri": "/p", "plugin_config_id": "missing", "upstream_id": "u1"},
                       {"id": "d", "uri": "/n", "plugins": {"echo": {}}}],
            "upstreams": [UPSTREAM]}
    assert put(admin, body).status_code == 202
    assert [proxy(apisix, p).status_code for p in ("/u", "/s", "/p", "/n")] == [502, 404, 503, 503]


# ---------------------------------------------------------------- rows 38-41: validate, restart


def test_row38_39_validate_endpoint(admin, apisix):
    valid = admin.post(CONFIGS + "/validate", content=json.dumps({"routes": [ROUTE]}))
    assert valid.status_code == 200 and valid.json() == {}
    body = {"routes": [ROUTE, {"id": "r2", "uri": 1, "upstream_id": "u1"}, ROUTE], "ssls_conf_version": "x",
            "consumers": [{"username": "c", "plugins": {"nope": {}}}]}
    invalid = admin.post(CONFIGS + "/validate", content=json.dumps(body))
    assert invalid.status_code == 400
    assert invalid.json() == {"error_msg": "Configuration validation failed", "errors": [
        {"resource_type": "routes", "index": 1, "resource_id": "r2",
         "error": 'invalid configuration: property "uri" validation failed: wrong type: expected string, '
                  "got number"},
        {"resource_type": "routes", "index": 2, "resource_id": "r1",
         "error": "found duplicate id r1 in routes"},
        {"resource_type": "consumers", "index": 0, "resource_id": "c",
         "error": "invalid plugins configuration: unknown plugin [nope]"},
        {"resource_type": "ssls", "error": "ssls_conf_version must be a number, got string"},
    ]}
    assert apisix.config() == FRESH  # never stores
    yaml_error = admin.post(CONFIGS + "/validate", content=b"routes: [",
                            headers={"Content-Type": "application/yaml"})
    assert error(yaml_error) == "invalid request body: invalid yaml request body"


def test_row40_validate_body_limit(admin):
    size = 1572864 + 10
    response = admin.post(CONFIGS + "/validate", content=b" " * size)
    assert error(response) == (
        f"invalid request body: request size {size} is greater than the maximum size 1572864 allowed")


def test_row41_restart_is_fresh_and_the_data_plane_empty(admin, apisix):
    assert put(admin, {"routes": [ROUTE], "upstreams": [UPSTREAM]}).status_code == 202
    assert proxy(apisix, "/a").status_code == 200
    url = apisix.url
    apisix.restart()
    assert apisix.url == url
    response = admin.get(CONFIGS)  # the pooled connection was cut; the client reconnects
    assert response.json() == FRESH and "x-digest" not in response.headers
    assert proxy(apisix, "/a").json() == {"error_msg": "404 Route Not Found"}


# ---------------------------------------------------------------- the seed sequence


def test_seed_sequence_out_of_band_secret_manager_then_stale_push(admin, apisix):
    push = {"routes": [ROUTE], "upstreams": [UPSTREAM], **{f"{k}_conf_version": 1 for k in VERSIONED_KEYS}}
    assert put(admin, push).status_code == 202
    apisix.out_of_band("secrets", [{"id": "vault/1", "uri": "http://127.0.0.1:8200", "prefix": "kv/apisix",
                                    "token": "root"}])
    live = admin.get(CONFIGS).json()
    assert live["secrets_conf_version"] == 2 and live["X-Digest"] != "d1"
    stored = apisix.config()
    stale = put(admin, {**push, "routes": [{**ROUTE, "uri": "/new"}], "routes_conf_version": 2}, digest="d2")
    assert stale.status_code == 400
    assert stale.json() == {"error_msg": "secrets_conf_version must be greater than or equal to (2)"}
    assert apisix.config() == stored
    assert proxy(apisix, "/a").headers["x-route-id"] == "r1"
    assert proxy(apisix, "/new").status_code == 404


# ---------------------------------------------------------------- fault knobs


def test_fail_next_and_drop_next(admin, apisix):
    apisix.fail_next(2, 502)
    assert [admin.get(CONFIGS).status_code for _ in range(3)] == [502, 502, 200]
    apisix.drop_next(1)
    with pytest.raises(httpx.RemoteProtocolError):
        put(admin, {"routes": [ROUTE]})
    assert apisix.config() == FRESH
    assert put(admin, {"routes": [ROUTE]}).status_code == 202
    assert apisix.requests[-3:] == [("GET", CONFIGS, 200), ("PUT", CONFIGS, 0), ("PUT", CONFIGS, 202)]
    assert len(apisix.put_bodies) == 2 and b'"/a"' in apisix.put_bodies[-1]


def test_latency_and_body_limit(admin, apisix):
    apisix.set_latency(0.2)
    started = time.monotonic()
    admin.get(CONFIGS)
    assert time.monotonic() - started >= 0.2
    apisix.set_latency(0)
    apisix.set_body_limit(100)
    response = put(admin, {"routes": [{**ROUTE, "desc": "x" * 200}]})
    assert response.status_code == 413 and response.content == nginx_page(413)
    assert response.headers["connection"] == "close"  # the body was not read: no client may reuse it
    apisix.set_body_limit(None)
    assert put(admin, {"routes": [{**ROUTE, "desc": "x" * 200}]}).status_code == 202


def test_out_of_band_writer_on_a_fresh_gateway(apisix):
    apisix.out_of_band("routes", [ROUTE], version=1720000000000)
    config = apisix.config()
    assert config["routes_conf_version"] == 1720000000000 and config["routes"] == [ROUTE]
    assert config["ssls_conf_version"] == 0 and config["X-Digest"].startswith("out-of-band-")
    apisix.out_of_band("routes")
    assert apisix.config()["routes_conf_version"] == 1720000000001
    apisix.out_of_band("routes", [])
    assert "routes" not in apisix.config()


# ---------------------------------------------------------------- older gateways


def test_version_3_13_has_no_head_digest_or_metadata_and_prefixed_messages():
    with ApisixDouble(KEY, version="3.13.0", proxy=False) as gw, \
            httpx.Client(base_url=gw.url, headers={"X-API-KEY": KEY}) as client:
        assert client.head(CONFIGS).status_code == 404
        assert set(client.get(CONFIGS).json()) == {f"{k}_conf_version" for k in VERSIONED_KEYS
                                                   if k not in ("stream_routes", "plugins")}
        accepted = put(client, {"routes": [ROUTE]}, digest=None)
        assert accepted.status_code == 202 and "x-digest" not in accepted.headers
        assert "X-Digest" not in client.get(CONFIGS).json()
        assert error(put(client, {"routes": [{"id": "r", "uri": 1, "upstream_id": "u"}]}, digest=None)) == (
            'invalid routes at index 0, err: property "uri" validation failed: wrong type: expected string, '
            "got number")
        assert client.post(CONFIGS + "/validate", content=b"{}").status_code == 404


def test_version_3_14_and_3_15_messages_and_validate():
    with ApisixDouble(KEY, version="3.14.0", proxy=False) as gw, \
            httpx.Client(base_url=gw.url, headers={"X-API-KEY": KEY}) as client:
        assert client.post(CONFIGS + "/validate", content=b"{}").status_code == 404
        assert error(put(client, {"routes": [{"id": "r", "uri": 1, "upstream_id": "u"}]})) == (
            'invalid routes at index 0, err: invalid configuration: property "uri" validation failed: '
            "wrong type: expected string, got number")
        assert put(client, {"routes": [{"uri": "/", "upstream_id": "u"}]}).status_code == 500
    with ApisixDouble(KEY, version="3.15.0", proxy=False) as gw, \
            httpx.Client(base_url=gw.url, headers={"X-API-KEY": KEY}) as client:
        valid = client.post(CONFIGS + "/validate", content=json.dumps({"routes": [ROUTE]}))
        assert valid.status_code == 200 and valid.content == b""
        invalid = client.post(CONFIGS + "/validate", content=json.dumps({"routes": [{"id": "r", "uri": 1}]}))
        assert invalid.json()["errors"][0] == {
            "resource_type": "routes", "index": 0,
            "error": 'invalid routes at index 0, err: invalid configuration: property "uri" validation '
                     "failed: wrong type: expected string, got number"}
        assert client.get(CONFIGS).headers["server"] == "APISIX/3.15.0"


# ---------------------------------------------------------------- workers, 3.19 and 3.21


def served(apisix: ApisixDouble, path: str) -> int:
    return proxy(apisix, path).status_code


def test_the_data_plane_serves_a_config_only_once_the_workers_applied_it(admin, apisix):
    apisix.set_worker_delay(0.4)
    assert put(admin, {"routes": [ROUTE], "upstreams": [UPSTREAM]}).status_code == 202
    assert apisix.config()["routes"] == [ROUTE]  # stored (and shown by GET) at once
    assert served(apisix, "/a") == 404 and "r1" not in apisix.running("routes")
    wait_for(lambda: served(apisix, "/a") == 200, 5, "the route served once the workers applied it")
    assert "r1" in apisix.running("routes")


def test_a_restart_drops_configs_the_workers_had_not_applied_yet(admin, apisix):
    apisix.set_worker_delay(0.3)
    put(admin, {"routes": [ROUTE], "upstreams": [UPSTREAM]})
    apisix.restart()
    # a config put after the restart is applied after the one before it would have been
    put(admin, {"upstreams": [UPSTREAM]}, digest="after")
    wait_for(lambda: apisix.running("upstreams"), 5, "the config put after the restart applied")
    assert apisix.running("routes") == {} and served(apisix, "/a") == 404


@pytest.fixture
def gateway_3_19() -> Iterator[tuple[ApisixDouble, httpx.Client]]:
    with ApisixDouble(KEY, version="3.19") as gw, \
            httpx.Client(base_url=gw.url, headers={"X-API-KEY": KEY}, timeout=10) as client:
        yield gw, client


def put_waiting(client: httpx.Client, body: object, wait: object, digest: str = "d1") -> httpx.Response:
    return client.put(CONFIGS, params={"wait": wait}, content=json.dumps(body).encode(),
                      headers={"X-Digest": digest})


def test_3_19_put_with_wait_is_200_once_every_worker_applied_it(gateway_3_19):
    gw, client = gateway_3_19
    assert client.get(CONFIGS).headers["server"] == "APISIX/3.19.0"
    gw.set_worker_delay(0.2)
    started = time.monotonic()
    applied = put_waiting(client, {"routes": [ROUTE], "upstreams": [UPSTREAM]}, 5000)
    assert applied.status_code == 200 and applied.content == b""
    assert 0.2 <= time.monotonic() - started < 5  # answered when the workers were done, not at the deadline
    assert applied.headers["x-digest"] == "d1" and int(applied.headers["x-last-modified"]) > 0
    assert served(gw, "/a") == 200  # "applied on every worker" means served


def test_3_19_put_with_wait_is_202_when_the_workers_are_not_done_in_time(gateway_3_19):
    gw, client = gateway_3_19
    gw.set_worker_delay(0.5)
    late = put_waiting(client, {"routes": [ROUTE], "upstreams": [UPSTREAM]}, 100)
    assert late.status_code == 202 and served(gw, "/a") == 404  # accepted, not applied yet
    wait_for(lambda: served(gw, "/a") == 200, 5, "the route served once the workers applied it")
    no_wait = put(client, {"routes": [ROUTE], "upstreams": [UPSTREAM]}, digest="d2")
    assert no_wait.status_code == 202


@pytest.mark.parametrize("wait", ["60001", "-1", "soon", "1.5"])
def test_3_19_refuses_a_wait_that_is_not_0_to_60000_ms(gateway_3_19, wait):
    gw, client = gateway_3_19
    refused = put_waiting(client, {"routes": [ROUTE], "upstreams": [UPSTREAM]}, wait)
    assert refused.status_code == 400 and "wait" in error(refused)
    assert gw.config() == FRESH


def test_3_18_ignores_wait(admin, apisix):
    apisix.set_worker_delay(0.3)
    assert put_waiting(admin, {"routes": [ROUTE], "upstreams": [UPSTREAM]}, 5000).status_code == 202


@pytest.mark.parametrize("body", ["[]", '"text"', '{"routes": {"r1": {"uri": "/a"}}}', '{"routes": [1]}',
                                  '{"routes": "abc"}', '{"plugins": [1]}', '{"routes": [null]}'])
def test_3_19_refuses_a_body_of_the_wrong_shape_and_keeps_the_live_config(gateway_3_19, body):
    gw, client = gateway_3_19
    put(client, {"routes": [ROUTE], "upstreams": [UPSTREAM]}, digest="live")
    before = gw.config()
    refused = put(client, body.encode(), digest="bad")
    assert refused.status_code == 400 and error(refused)
    assert gw.config() == before and served(gw, "/a") == 200  # 3.18 wiped everything on "[]"
    validated = client.post(CONFIGS + "/validate", content=body.encode())
    assert validated.status_code == 400


def test_3_19_validate_lists_each_misshapen_kind_and_item(gateway_3_19):
    _, client = gateway_3_19
    answer = client.post(CONFIGS + "/validate", content=json.dumps(
        {"routes": [ROUTE, 1], "services": "abc", "upstreams": {}}).encode())
    assert answer.json()["errors"] == [
        {"resource_type": "routes", "index": 1, "resource_id": "",
         "error": "invalid configuration: routes[1] must be an object"},
        {"resource_type": "services", "error": "invalid configuration: services must be an array"}]


def test_3_18_still_wipes_everything_on_a_top_level_array(admin, apisix):
    put(admin, {"routes": [ROUTE], "upstreams": [UPSTREAM]}, digest="live")
    assert put(admin, b"[]", digest="array").status_code == 202
    assert "routes" not in apisix.config() and apisix.config()["routes_conf_version"] == 2


def test_3_21_refuses_an_empty_key_as_missing():
    with ApisixDouble(KEY, version="3.21.0", proxy=False) as gw:
        answer = httpx.get(gw.url + CONFIGS, headers={"X-API-KEY": ""})
        assert answer.status_code == 401 and answer.json()["description"] == "missing apikey"
    with ApisixDouble(KEY, proxy=False) as gw:  # 3.18: an empty key is a wrong one
        assert httpx.get(gw.url + CONFIGS, headers={"X-API-KEY": ""}).json()["description"] == "wrong apikey"


@pytest.mark.parametrize("keys", [{"admin_key": ""}, {"viewer_key": ""}])
def test_3_21_will_not_start_with_an_empty_admin_key_entry(keys):
    with pytest.raises(ValueError, match="empty admin_key entry"):
        ApisixDouble(**{"admin_key": KEY, **keys}, version="3.21.0")


def test_3_21_does_not_echo_an_invalid_plugin_configuration():
    secret_route = {**ROUTE, "plugins": {"key-auth": "s3cr3t-value"}}
    with ApisixDouble(KEY, version="3.21.0", proxy=False) as gw, \
            httpx.Client(base_url=gw.url, headers={"X-API-KEY": KEY}) as client:
        refused = error(put(client, {"routes": [secret_route]}))
        body = json.dumps({"routes": [secret_route]}).encode()
        validated = client.post(CONFIGS + "/validate", content=body)
    assert refused == "invalid plugin conf for plugin [key-auth]"
    assert validated.json()["errors"][0]["error"] == refused and "s3cr3t" not in validated.text
    with ApisixDouble(KEY, proxy=False) as gw, \
            httpx.Client(base_url=gw.url, headers={"X-API-KEY": KEY}) as client:
        assert error(put(client, {"routes": [secret_route]})) == (
            'invalid plugin conf "s3cr3t-value" for plugin [key-auth]')  # 3.18 echoes it


# ---------------------------------------------------------------- command line


@pytest.mark.slow
def test_command_line_entry_point():
    admin_port, proxy_port = free_port(), free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "gitsync.testing.apisix", "--listen", f"127.0.0.1:{admin_port}",
         "--admin-key", "cli-key", "--proxy-listen", f"127.0.0.1:{proxy_port}", "--worker-delay", "0.4"],
        env=gitsync_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = process.stdout.readline()
        expected = rf"admin http://127.0.0.1:{admin_port}, data plane http://127.0.0.1:{proxy_port}"
        assert re.search(expected, line)
        response = httpx.get(f"http://127.0.0.1:{admin_port}{CONFIGS}", headers={"X-API-KEY": "cli-key"})
        assert response.json() == FRESH
        assert httpx.get(f"http://127.0.0.1:{proxy_port}/x").status_code == 404
        body = {"routes": [ROUTE], "upstreams": [UPSTREAM]}
        headers = {"X-API-KEY": "cli-key", "X-Digest": "d"}
        httpx.put(f"http://127.0.0.1:{admin_port}{CONFIGS}", json=body, headers=headers)
        assert httpx.get(f"http://127.0.0.1:{proxy_port}/a").status_code == 404  # not applied yet
        wait_for(lambda: httpx.get(f"http://127.0.0.1:{proxy_port}/a").status_code == 200, 5,
                 "the route served once the workers applied it")
    finally:
        process.terminate()
        assert process.wait(timeout=10) == 0
    assert "cli-key" not in process.stderr.read()


def test_command_line_refuses_an_empty_key_in_3_21():
    process = subprocess.run(
        [sys.executable, "-m", "gitsync.testing.apisix", "--listen", f"127.0.0.1:{free_port()}",
         "--admin-key", "", "--version", "3.21"],
        env=gitsync_env(), capture_output=True, text=True, timeout=60)
    assert process.returncode == 2 and "empty admin_key entry" in process.stderr
