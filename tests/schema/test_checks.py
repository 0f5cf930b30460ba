"""The shared APISIX schemas speak APISIX 3.17+'s exact words (one test per message family)."""

from __future__ import annotations

import pytest

from gitsync.kinds import KINDS
from gitsync.schema import AUTH_PLUGINS, PLUGINS, PayloadIssue, SchemaIssue, check_item, check_payload

INVALID = "invalid configuration: "
ROUTE = {"id": "r1", "uri": "/a", "upstream_id": "u1"}
UPSTREAM = {"id": "u1", "nodes": {"127.0.0.1:80": 1}}


def first(kind: str, item: object) -> SchemaIssue:
    issues = check_item(kind, item)
    assert issues, f"{kind} item unexpectedly valid: {item}"
    return issues[0]


def messages(kind: str, item: object) -> list[str]:
    return [issue.message for issue in check_item(kind, item)]


# references long enough for the schema's minLength (128 and 64), which applies to them too (recorded on 3.18)
CERT_REF = "$secret://vault/1/" + "c" * 110
KEY_REF = "$env://" + "K" * 57
VALID_ITEMS = {
    "routes": [ROUTE, {"id": 2, "uris": ["/a", "/b"], "hosts": ["a.example", "*.b.example"],
                       "methods": ["GET"], "plugins": {"key-auth": {}}, "modifiedIndex": 7},
               {"id": "r3", "uri": "/x", "upstream": {"nodes": [{"host": "127.0.0.1", "port": 80,
                                                                 "weight": 1}], "type": "chash",
                                                      "key": "remote_addr", "modifiedIndex": 3}}],
    "services": [{"id": "s1"}, {"id": "s2", "upstream_id": "u1", "hosts": ["a.example"]}],
    "upstreams": [UPSTREAM, {"id": "u2", "nodes": []}, {"id": "u3", "service_name": "x",
                                                        "discovery_type": "dns"}],
    "consumers": [{"username": "jack", "plugins": {"key-auth": {"key": "k"}}},
                  {"id": "jill", "username": "jill"},
                  {"id": "jack/credentials/cred-1",
                   "plugins": {"basic-auth": {"username": "j", "password": "p"}}}],
    "consumer_groups": [{"id": "g1", "plugins": {"limit-count": {"count": 1, "time_window": 60}}}],
    "ssls": [{"id": "s1", "sni": "a.example", "cert": CERT_REF, "key": KEY_REF}],
    "global_rules": [{"id": "g1", "plugins": {"prometheus": {}}}],
    "plugin_configs": [{"id": "p1", "plugins": {}}],
    "plugin_metadata": [{"id": "http-logger", "log_format": {}}],
    "protos": [{"id": "p1", "content": "syntax = \"proto3\";"}],
    "stream_routes": [{"id": "s1", "server_port": 9100, "upstream_id": "u1",
                       "plugins": {"ip-restriction": {}}}],
    "secrets": [{"id": "vault/1", "uri": "http://127.0.0.1:8200", "prefix": "kv/apisix", "token": "t",
                 "modifiedIndex": 4},
                {"id": "aws/1", "access_key_id": "a", "secret_access_key": "b"},
                {"id": "gcp/1", "auth_file": "/etc/gcp.json"}],
}


@pytest.mark.parametrize("kind", KINDS)
def test_valid_items_of_every_kind_pass(kind):
    for item in VALID_ITEMS[kind]:
        assert check_item(kind, item) == [], item


def test_checks_run_on_a_copy():
    item = {"id": "u9", "nodes": {"127.0.0.1:80": 1}}
    assert check_item("upstreams", item) == []
    assert item == {"id": "u9", "nodes": {"127.0.0.1:80": 1}}  # no defaults written back


def test_wrong_type_names_lua_types():
    assert first("routes", {**ROUTE, "uri": 1}) == SchemaIssue(
        ("uri",), INVALID + 'property "uri" validation failed: wrong type: expected string, got number')
    assert first("routes", {**ROUTE, "uris": {"a": 1}, "uri": None}).message == (
        INVALID + 'property "uri" validation failed: wrong type: expected string, got userdata')
    assert first("routes", {**ROUTE, "enable_websocket": "yes"}).message == (
        INVALID + 'property "enable_websocket" validation failed: wrong type: expected boolean, got string')
    assert first("routes", {**ROUTE, "methods": "GET"}).message == (
        INVALID + 'property "methods" validation failed: wrong type: expected array, got string')


def test_required_and_nested_paths():
    issue = first("upstreams", {"id": "u1", "nodes": {"a:1": 1}, "timeout": {"connect": 1, "send": 1}})
    assert issue == SchemaIssue(("timeout",), INVALID + 'property "timeout" validation failed: '
                                'property "read" is required')
    assert first("consumers", {"plugins": {}}).message == INVALID + 'property "username" is required'
    assert first("protos", {"id": "p"}).message == INVALID + 'property "content" is required'


def test_additional_properties_point_at_the_key():
    assert first("routes", {**ROUTE, "url": "/x"}) == SchemaIssue(
        ("url",), INVALID + "additional properties forbidden, found url")


def test_integer_and_modified_index():
    assert first("routes", {**ROUTE, "modifiedIndex": 1.5}) == SchemaIssue(
        ("modifiedIndex",),
        INVALID + 'property "modifiedIndex" validation failed: wrong type: expected integer, got number')
    assert check_item("routes", {**ROUTE, "modifiedIndex": 3.0}) == []
    assert first("routes", {**ROUTE, "priority": True}).message == (
        INVALID + 'property "priority" validation failed: wrong type: expected integer, got boolean')


def test_numeric_ranges():
    assert first("upstreams", {**UPSTREAM, "retries": -1}).message == (
        INVALID + 'property "retries" validation failed: expected -1 to be at least 0')
    assert first("upstreams", {**UPSTREAM, "timeout": {"connect": 0, "send": 1, "read": 1}}).message == (
        INVALID + 'property "timeout" validation failed: property "connect" validation failed: '
        "expected 0 to be greater than 0")
    assert first("stream_routes", {"id": "s", "server_port": 70000}).message == (
        INVALID + 'property "server_port" validation failed: expected 70000 to be at most 65535')


def test_string_lengths_and_patterns():
    assert first("routes", {**ROUTE, "uri": ""}).message == (
        INVALID + 'property "uri" validation failed: string too short, expected at least 1, got 0')
    assert first("routes", {**ROUTE, "desc": "x" * 257}).message == (
        INVALID + 'property "desc" validation failed: string too long, expected at most 256, got 257')
    assert first("routes", {**ROUTE, "host": "bad host"}).message == (
        INVALID + 'property "host" validation failed: failed to match pattern '
        '"^\\\\*$|^\\\\*?[0-9a-zA-Z-._\\\\[\\\\]:]+$" with "bad host"')


def test_id_schema_any_of_without_required_list():
    assert first("routes", {**ROUTE, "id": "bad id!"}).message == (
        INVALID + 'property "id" validation failed: object matches none of the required')
    assert first("routes", {**ROUTE, "id": 0}).message == (
        INVALID + 'property "id" validation failed: object matches none of the required')


def test_route_needs_exactly_one_of_uri_uris_and_a_target():
    assert messages("routes", {"id": "r", "upstream_id": "u"})[0] == (
        INVALID + "allOf 1 failed: value should match only one schema, but matches none")
    assert messages("routes", {"id": "r", "uri": "/", "uris": ["/"], "upstream_id": "u"})[0] == (
        INVALID + "allOf 1 failed: value should match only one schema, but matches both schemas 1 and 2")
    assert first("routes", {"id": "r", "uri": "/"}).message == (
        INVALID + 'object matches none of the required: ["plugins","uri"] or ["upstream","uri"] or '
        '["upstream_id","uri"] or ["service_id","uri"] or ["plugins","uris"] or ["upstream","uris"] or '
        '["upstream_id","uris"] or ["service_id","uris"] or ["script","uri"] or ["script","uris"]')
    assert first("routes", {**ROUTE, "script": "return {} -- x", "plugins": {}}).message == (
        INVALID + "value wasn't supposed to match schema")


def test_host_and_hosts_are_exclusive_before_the_schema():
    assert first("routes", {**ROUTE, "host": "a.example", "hosts": ["b.example"]}) == SchemaIssue(
        ("hosts",), "only one of host or hosts is allowed")
    assert first("routes", {**ROUTE, "remote_addr": "127.0.0.1", "remote_addrs": ["127.0.0.2"]}).message == (
        "only one of remote_addr or remote_addrs is allowed")


def test_enum_and_unique_items():
    assert first("routes", {**ROUTE, "methods": ["GET", "FETCH"]}).message == (
        INVALID + 'property "methods" validation failed: failed to validate item 2: '
        "matches none of the enum values")
    assert first("routes", {**ROUTE, "methods": ["GET", "POST", "GET"]}).message == (
        INVALID + 'property "methods" validation failed: expected unique items but items 1 and 3 are equal')
    assert first("routes", {**ROUTE, "hosts": []}).message == (
        INVALID + 'property "hosts" validation failed: expect array to have at least 1 items')


def test_labels_pattern_properties():
    assert first("routes", {**ROUTE, "labels": {"env": "two words"}}) == SchemaIssue(
        ("labels", "env"), INVALID + 'property "labels" validation failed: failed to validate env '
        '(matching ".*"): failed to match pattern "^\\\\S+$" with "two words"')


def test_upstream_one_of_nodes_or_discovery():
    assert first("upstreams", {"id": "u"}).message == (
        INVALID + "value should match only one schema, but matches none")
    assert first("routes", {**ROUTE, "upstream": {"nodes": {"a:1": "x"}}}).message == (
        INVALID + 'property "upstream" validation failed: property "nodes" validation failed: '
        "object matches none of the required")


def test_dependencies_and_max_items():
    cert = "-----BEGIN CERTIFICATE-----" + "A" * 101  # the 128 characters a certificate needs
    assert first("upstreams", {**UPSTREAM, "tls": {"client_cert": cert}}) == SchemaIssue(
        ("tls",), INVALID + 'property "tls" validation failed: failed to validate dependent schema for '
        '"client_cert": property "client_key" is required')
    ssl = {"id": "s", "sni": "a.example", "cert": CERT_REF, "key": KEY_REF}
    assert first("ssls", {**ssl, "ssl_protocols": ["TLSv1.1", "TLSv1.2", "TLSv1.3", "TLSv1.3"]}).message == (
        INVALID + 'property "ssl_protocols" validation failed: expect array to have at most 3 items')


def test_upstream_semantic_checks():
    assert first("upstreams", {"id": "u", "nodes": {"127.0.0.1:70000": 1}}) == SchemaIssue(
        ("nodes", "127.0.0.1:70000"), "invalid port 70000")
    assert first("routes", {"id": "r", "uri": "/", "upstream": {"nodes": {"[::1]:0": 1}}}) == SchemaIssue(
        ("upstream", "nodes", "[::1]:0"), "invalid port 0")
    assert first("upstreams", {**UPSTREAM, "type": "chash"}).message == "missing key"
    assert check_item("upstreams", {**UPSTREAM, "type": "chash", "hash_on": "consumer"}) == []
    assert first("upstreams", {**UPSTREAM, "type": "chash", "key": "bogus"}).message == (
        INVALID + 'failed to match pattern "^((uri|server_name|server_addr|request_uri|remote_port|'
        'remote_addr|query_string|host|hostname|mqtt_client_id)|arg_[0-9a-zA-z_-]+)$" with "bogus"')
    assert first("upstreams", {**UPSTREAM, "pass_host": "rewrite"}).message == (
        "`upstream_host` can't be empty when `pass_host` is `rewrite`")


def test_plugins_unknown_and_not_a_table():
    assert first("routes", {**ROUTE, "plugins": {"invalid-plugin": {}}}) == SchemaIssue(
        ("plugins", "invalid-plugin"), "unknown plugin [invalid-plugin]")
    assert first("routes", {**ROUTE, "plugins": {"key-auth": "on"}}).message == (
        'invalid plugin conf "on" for plugin [key-auth]')
    assert first("global_rules", {"id": "g", "plugins": {"nope": {}}}).message == "unknown plugin [nope]"
    assert first("stream_routes", {"id": "s", "plugins": {"key-auth": {}}}).message == (
        "unknown plugin [key-auth]")
    assert "key-auth" in PLUGINS and "key-auth" in AUTH_PLUGINS and "limit-count" not in AUTH_PLUGINS


def test_consumers_username_and_plugins():
    assert first("consumers", {"id": "bob", "username": "alice"}) == SchemaIssue(("id",), "wrong username")
    assert first("consumers", {"username": "a", "plugins": {"nope": {}}}).message == (
        "invalid plugins configuration: unknown plugin [nope]")
    assert first("consumers", {"username": "a b"}).message == (
        INVALID + 'property "username" validation failed: failed to match pattern '
        '"^[a-zA-Z0-9_\\\\-]+$" with "a b"')


def test_credentials():
    limit = {"count": 1, "time_window": 60}
    assert first("consumers", {"id": "jack/credentials/c1", "plugins": {"limit-count": limit}}).message == (
        "only supports auth type plugins in consumer credential")
    assert first("consumers", {"id": "jack/credentials/c1", "plugins": {"limit-count": {}}}).message == (
        "invalid plugins configuration: failed to check the configuration of plugin limit-count err: "
        "value should match only one schema, but matches none")  # the plugin's own check comes first
    assert first("consumers", {"id": "jack/credentials/c1",
                               "plugins": {"key-auth": {}, "basic-auth": {}}}).message == (
        INVALID + 'property "plugins" validation failed: expect object to have at most 1 properties')
    assert first("consumers", {"id": "jack/credentials/", "plugins": {}}).message == (
        INVALID + 'property "id" validation failed: failed to match pattern '
        '"^[a-zA-Z0-9-_]+/credentials/[a-zA-Z0-9-_.]+$" with "jack/credentials/"')
    assert first("consumers", {"id": "jack/credentials/c1", "plugins": {"nope": {}}}).message == (
        "invalid plugins configuration: unknown plugin [nope]")


def test_ssl_needs_sni_cert_key_and_parses_pem():
    assert first("ssls", {"id": "s"}).message == INVALID + "then clause did not match"
    assert first("ssls", {"id": "s", "type": "client"}).message == INVALID + "else clause did not match"
    bogus = "-----BEGIN CERTIFICATE-----\n" + "A" * 80 + "\n-----END CERTIFICATE-----"
    bogus_key = "-----BEGIN PRIVATE KEY-----\n" + "A" * 80 + "\n-----END PRIVATE KEY-----"
    assert first("ssls", {"id": "s", "sni": "a.example", "cert": bogus, "key": bogus_key}).message == (
        "failed to parse cert: PEM_read_bio_X509_AUX() failed")


def test_secret_references_skip_certificate_parsing_but_not_the_length_check():
    ssl = {"id": "s", "sni": "a.example", "cert": CERT_REF, "key": "$ENV://" + "K" * 57}
    assert check_item("ssls", ssl) == []
    assert first("ssls", {**ssl, "cert": "$secret://vault/1/c"}).message == (
        INVALID + 'property "cert" validation failed: string too short, expected at least 128, got 19')


def test_secret_references_in_plugin_bodies_skip_every_constraint():
    ref = {"key-auth": {"key": "$secret://vault/1/jack/key"}}
    assert check_item("consumers", {"username": "jack", "plugins": ref}) == []
    # the field is taken out of the schema too: "required" no longer applies to it
    assert check_item("routes", {**ROUTE, "plugins": {"proxy-rewrite": {"uri": "$env://URI"}}}) == []
    assert first("routes", {**ROUTE, "plugins": {"proxy-rewrite": {"uri": "no-slash"}}}).message == (
        'failed to check the configuration of plugin proxy-rewrite err: property "uri" validation failed: '
        'failed to match pattern "^\\\\/.*" with "no-slash"')


def test_secret_managers():
    assert first("secrets", {"id": "vault1"}) == SchemaIssue(("id",), "invalid secret id: vault1")
    assert first("secrets", {"uri": "http://x"}).message == "invalid secret id: nil"
    assert first("secrets", {"id": "hashicorp/1"}).message == "invalid secret manager: hashicorp"
    assert messages("secrets", {"id": "vault/1", "uri": "http://127.0.0.1:8200"}) == [
        INVALID + 'property "prefix" is required', INVALID + 'property "token" is required']
    assert first("secrets", {"id": "vault/1", "uri": "127.0.0.1", "prefix": "p", "token": "t"}).message == (
        INVALID + 'property "uri" validation failed: failed to match pattern '
        '"^[^\\\\/]+:\\\\/\\\\/([\\\\da-zA-Z.-]+|\\\\[[\\\\da-fA-F:]+\\\\])(:\\\\d+)?" with "127.0.0.1"')
    assert first("secrets", {"id": "gcp/1"}).message == (
        INVALID + "value should match only one schema, but matches none")


def test_plugin_metadata_names():
    assert first("plugin_metadata", {"log_format": {}}).message == "missing plugin name"
    assert first("plugin_metadata", {"id": "no-such-plugin"}).message == "invalid plugin name"


def test_non_object_items():
    assert first("routes", 1).message == "attempt to index local 'item' (a number value)"
    assert first("routes", "x").message == INVALID + "wrong type: expected object, got string"
    assert first("routes", [1]).message == INVALID + "wrong type: expected object, got table"


def test_payload_version_types_and_put_wording():
    body = {"routes_conf_version": "1", "services_conf_version": None, "ssls_conf_version": 3}
    assert check_payload(body) == [
        PayloadIssue("routes", None, None, "routes_conf_version must be a number, got string"),
        PayloadIssue("services", None, None, "services_conf_version must be a number, got userdata"),
    ]
    assert check_payload(body, collect_all=False) == [
        PayloadIssue("routes", None, None, "routes_conf_version must be a number")]


def test_payload_items_and_duplicates():
    body = {
        "routes": [ROUTE, {**ROUTE, "uri": 1}, ROUTE],
        "consumers": [{"username": "c1"}, {"username": "c1"},
                      {"id": "john_1/credentials/john-a", "plugins": {"key-auth": {"key": "k"}}},
                      {"id": "john_1/credentials/john-a", "plugins": {"key-auth": {"key": "k"}}}],
    }
    assert check_payload(body) == [
        PayloadIssue("routes", 1, "r1", INVALID + 'property "uri" validation failed: wrong type: '
                     "expected string, got number"),
        PayloadIssue("routes", 1, "r1", "found duplicate id r1 in routes"),
        PayloadIssue("routes", 2, "r1", "found duplicate id r1 in routes"),
        PayloadIssue("consumers", 1, "c1", "found duplicate username c1 in consumers"),
        PayloadIssue("consumers", 3, "john_1/credentials/john-a",
                     "found duplicate credential id john_1/credentials/john-a in consumers"),
    ]
    assert check_payload(body, collect_all=False) == check_payload(body)[:1]


def test_payload_ids_are_optional_and_numbers_differ_from_strings():
    assert check_payload({"routes": [{"uri": "/", "upstream_id": 1}, {"uri": "/", "upstream_id": 1}]}) == []
    assert check_payload({"routes": [{**ROUTE, "id": 1}, {**ROUTE, "id": "1"}]}) == []


def test_payload_secrets_and_plugins_key():
    assert check_payload({"secrets": [{"id": "nope"}], "plugins": [{"name": "x"}]}) == [
        PayloadIssue("secrets", 0, "nope", "invalid secret id: nope")]


def test_payload_live_state_checks():
    live = {
        "global_rules": [{"id": "a", "plugins": {"prometheus": {}}}],
        "consumers": [{"username": "alice", "plugins": {"key-auth": {"key": "k1"}}},
                      {"id": "bob/credentials/c1", "plugins": {"key-auth": {"key": "k2"}}}],
    }
    body = {
        "global_rules": [{"id": "b", "plugins": {"prometheus": {}}}],
        "consumers": [{"username": "carol", "plugins": {"key-auth": {"key": "k1"}}},
                      {"username": "dave", "plugins": {"key-auth": {"key": "k2"}}},
                      {"username": "alice", "plugins": {"key-auth": {"key": "k1"}}}],
    }
    assert [i.message for i in check_payload(body, live=live)] == [
        "duplicate key of plugin key-auth found with consumer: alice",
        "duplicate key of plugin key-auth found with credential: c1 of consumer: bob",
        "plugin 'prometheus' already exists in global rule with id 'a'",
    ]
    assert check_payload(body) == []


def test_a_valid_plugin_body_is_checked_once_and_equal_looking_values_are_kept_apart(monkeypatch) -> None:
    from gitsync.schema import checks

    calls: list[tuple] = []
    real = checks._plugin_conf_problem
    monkeypatch.setattr(checks, "_VALID_BODIES", set())
    monkeypatch.setattr(checks, "_plugin_conf_problem", lambda *args: calls.append(args) or real(*args))
    body = {"count": 1, "time_window": 60}
    assert checks.plugin_conf_problem("limit-count", body) is None
    assert checks.plugin_conf_problem("limit-count", dict(body)) is None
    assert len(calls) == 1  # the equal body: known valid from the first check
    assert body == {"count": 1, "time_window": 60}  # schema defaults never reach the caller's body
    # True == 1 in Python, and hashes alike: the body with true is its own, and refused
    assert "count" in (checks.plugin_conf_problem("limit-count", {"count": True, "time_window": 60}) or "")
    assert "count" in (checks.plugin_conf_problem("limit-count", {"count": True, "time_window": 60}) or "")
    assert len(calls) == 3  # a refused body is checked each time: only valid ones are remembered
    assert all(len(key) == 32 for key in checks._VALID_BODIES)  # digests, never a body
