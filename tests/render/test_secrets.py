"""The secret classifier's rules one by one: APISIX's encrypt_fields table, kind fields, names, shapes,
declared secret fields, URLs; and masking built on it (render, validate's messages, the log redactor)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from gitsync.adopt import export
from gitsync.log import MASK, redact
from gitsync.notation import secret_field_problem
from gitsync.problems import ProblemsError
from gitsync.render import RenderOptions, mask_secrets, render
from gitsync.render.memo import ParseCache, incremental
from gitsync.render.secrets import (
    NO_RULES,
    Finding,
    SecretRules,
    apisix_paths,
    classify,
    could_hold_secrets,
    document_secret_values,
    entropy,
    find_secrets,
    is_secret_name,
    mask_text,
    secret_values,
    value_at,
    walk_item,
)
from gitsync.schema.encrypt_fields import ENCRYPT_FIELDS, field_count
from gitsync.schema.plugins import PLUGINS
from gitsync.testing.apisix import ApisixDouble
from gitsync.urls import credentials, display_url
from gitsync.web.catalog import Catalog, written_lines
from testkit.leaks import Canary
from testkit.pem import pem_pair
from testkit.processes import ROOT, run_gitsync
from testkit.profiles import examples
from tests.adopt.test_export import KEY, fill

VENDORED = json.loads((ROOT / "tests" / "data" / "apisix-3.18-encrypt-fields.json").read_text())["plugins"]
_SCHEMAS = {"schema": "schema", "consumer_schema": "consumer", "metadata_schema": "metadata"}


def secrets_of(kind: str, item: Any, rules: SecretRules = NO_RULES) -> dict[str, list[str]]:
    """field path (dotted) → the secret pieces the classifier finds there."""
    return {".".join(map(str, f.path)): f.pieces(value_at(item, f.path)) for f in classify(kind, item, rules)}


# ---------------------------------------------------------------------------------------------------------
# APISIX's table


def test_every_plugin_gitsync_knows_has_all_its_apisix_encrypt_fields():
    """The vendored extraction of APISIX 3.18 is the reference: a plugin gitsync knows (PLUGINS) that
    declares encrypt_fields there must have every one of them in the table, on the same schema."""
    unknown = sorted(set(VENDORED) - PLUGINS)
    assert not unknown, f"APISIX plugins with encrypt_fields that gitsync does not know: {unknown}"
    for name, lists in VENDORED.items():
        declared = ENCRYPT_FIELDS.get(name)
        assert declared is not None, f"{name}: its encrypt_fields are not in the table"
        for schema, field in _SCHEMAS.items():
            assert tuple(lists.get(schema, ())) == getattr(declared, field), (name, schema)
        assert lists["declared_at"].startswith(declared.file), name
    assert (len(ENCRYPT_FIELDS), field_count()) == (44, 76)


def test_architecture_cites_the_file_declaring_each_list():
    text = (ROOT / "docs" / "architecture.md").read_text()
    uncited = sorted({d.file for d in ENCRYPT_FIELDS.values()} - {f for f in set(text.split("`")) if f})
    assert not uncited, uncited


@pytest.mark.parametrize("name", sorted(ENCRYPT_FIELDS))
def test_each_encrypt_field_is_secret_where_the_plugin_is_configured(name: str):
    """A canary at every path of the plugin's lists (one element per array on the way; a mapping
    leaf holds a header): every canary is found, nothing else is."""
    declared = ENCRYPT_FIELDS[name]
    conf: dict[str, Any] = {}
    canaries = []
    for n, path in enumerate((*declared.schema, *declared.consumer)):
        canaries.append(f"canary-{n}-e71b")
        _put(conf, path.split("."), canaries[-1])
    item = {"id": "x", "uri": "/x", "plugins": {name: conf}}
    found = [p for pieces in secrets_of("routes", item).values() for p in pieces]
    assert sorted(found) == sorted(canaries)
    if declared.metadata:
        meta: dict[str, Any] = {"id": name}
        for path in declared.metadata:
            _put(meta, path.split("."), "meta-canary-5d")
        assert secrets_of("plugin_metadata", meta)


def _put(conf: dict[str, Any], segments: list[str], value: str) -> None:
    """Set a dotted path; known arrays of APISIX's schemas become one-element lists."""
    arrays = {"instances", "brokers"}
    head, rest = segments[0], segments[1:]
    if not rest:
        conf[head] = {"X-Key": value} if head in ("header", "query", "headers") else \
            [value] if head == "secret_fallbacks" else value
        return
    if head in arrays:
        conf.setdefault(head, [{}])
        _put(conf[head][0], rest, value)
    else:
        _put(conf.setdefault(head, {}), rest, value)


def test_paths_are_walked_as_apisix_walks_them():
    conf = {"instances": [{"auth": {"header": {"a": "1", "b": {"deep": "2"}}}}, "not-a-table", {"auth": 5}],
            "brokers": {"sasl_config": {"password": "p"}}}
    assert list(apisix_paths(conf, ("instances", "auth", "header"))) == [("instances", 0, "auth", "header")]
    assert list(apisix_paths(conf, ("brokers", "sasl_config", "password"))) == [
        ("brokers", "sasl_config", "password")]  # a mapping on the way is entered
    assert list(apisix_paths(conf, ("missing", "x"))) == [] and list(apisix_paths("text", ("a",))) == []


def test_both_schemas_apply_wherever_the_plugin_is_and_metadata_only_to_its_metadata():
    consumer = {"username": "u",
                "plugins": {"key-auth": {"key": "k-1"}, "limit-count": {"redis_password": "r"}}}
    assert secrets_of("consumers", consumer) == {"plugins.key-auth.key": ["k-1"],
                                                 "plugins.limit-count.redis_password": ["r"]}
    route = {"id": "r", "uri": "/", "plugins": {"ldap-auth-advanced": {"ldap_password": "l"},
                                                "key-auth": {"header": "apikey", "query": "apikey"}}}
    assert secrets_of("routes", route) == {"plugins.ldap-auth-advanced.ldap_password": ["l"]}
    assert secrets_of("plugin_metadata", {"id": "azure-functions", "master_apikey": "m"}) == {
        "master_apikey": ["m"]}


def test_a_plugin_inside_workflow_counts_as_that_plugin():
    route = {"id": "r", "uri": "/", "plugins": {"workflow": {"rules": [{"actions": [
        ["limit-count", {"count": 1, "time_window": 1, "redis_password": "w-1"}]]}]}}}
    assert secrets_of("routes", route) == {"plugins.workflow.rules.0.actions.0.1.redis_password": ["w-1"]}


def test_kind_fields_and_secret_managers():
    assert secrets_of("ssls", {"id": "s", "key": "k", "keys": ["k1", "$env://K"], "cert": "c"}) == {
        "key": ["k"], "keys.0": ["k1"]}  # a reference is where a value comes from, not a value
    assert secrets_of("routes", {"id": "r", "upstream": {"tls": {"client_key": "ck"}}}) == {
        "upstream.tls.client_key": ["ck"]}
    assert secrets_of("secrets", {"id": "aws/p", "access_key_id": "id", "secret_access_key": "s",
                                  "region": "eu"}) == {"access_key_id": ["id"], "secret_access_key": ["s"]}
    assert secrets_of("secrets", {"id": "gcp/p", "auth_config": {"private_key": "g", "project_id": "p"}}) == {
        "auth_config.private_key": ["g"]}


# ---------------------------------------------------------------------------------------------------------
# Shapes


PEM = "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIAbcdef0123456789\n-----END EC PRIVATE KEY-----"
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"


@pytest.mark.parametrize(("value", "pieces"), [
    (f"see {PEM} here", [PEM]),
    (f"token {JWT}", [JWT]),
    ("Bearer abc123def456", ["abc123def456"]),
    ("Basic authentication is used", []),  # a word, not a credential
    ("http://user:p@ss/w?rd#x y@host:9000/log", ["p@ss/w?rd#x y"]),
    ("https://h.example/x?private_token=t0k3n&page=2", ["t0k3n"]),
    ("https://hooks.example/services/T0/B0/aB3dE5fG7hJ9kL1mN3pQ5rS7", ["aB3dE5fG7hJ9kL1mN3pQ5rS7"]),
    ("http://host:8080/@scope/pkg", []),  # a path holding @ after a port: not user info
    ("$secret://vault/main/key", []),
    ("${{ secrets.TOKEN }}", []),
])
def test_shapes_anywhere(value: str, pieces: list[str]):
    item = {"id": "r", "desc": value}
    assert secrets_of("routes", item).get("desc", []) == pieces


def test_header_maps_in_either_form_and_any_plugin():
    plugins = {"proxy-rewrite": {"headers": {"set": {"Authorization": "Bearer t-1", "Cookie": "sid=c-2",
                                                     "X-Api-Key": "k-3", "X-Host": "$host",
                                                     "Proxy-Authorization": "$http_x_auth",
                                                     "X-Request-Id": "r-1"}}},
               "forward-auth": {"extra_headers": {"X-Vendor-Token": "v-4"}}}
    upstream = {"checks": {"active": {"req_headers": ["Authorization: Basic dXNlcjpwdw==", "X-A: b"]}}}
    item = {"id": "r", "uri": "/", "plugins": plugins, "upstream": upstream}
    assert secrets_of("routes", item) == {
        "plugins.proxy-rewrite.headers.set.Authorization": ["t-1"],  # after its scheme
        "plugins.proxy-rewrite.headers.set.Cookie": ["sid=c-2"],
        "plugins.proxy-rewrite.headers.set.X-Api-Key": ["k-3"],
        "plugins.forward-auth.extra_headers.X-Vendor-Token": ["v-4"],
        "upstream.checks.active.req_headers.0": ["dXNlcjpwdw=="],
    }  # nginx variables are where a value comes from; X-Request-Id is no credential


def test_a_long_high_entropy_header_value_is_a_likely_secret():
    item = {"id": "r", "plugins": {"proxy-rewrite": {"headers": {"X-Custom": "Q2x8sK9mLp3Rt7vW1yZ4bN6c",
                                                                   "X-Trace": "abcdefghijklmnopqrstuvwxyz"}}}}
    [finding] = classify("routes", item)
    assert finding.path[-1] == "X-Custom" and not finding.certain


def test_urls_with_reserved_characters_in_the_password():
    for password in ("p@ss-secret", "pa/ss", "p?ss", "p#ss", "pa ss", "a@b/c?d#e f"):
        url = f"http://user:{password}@host.example:9000/path?x=1"
        [found] = credentials(url)
        assert url[found.start:found.end] == password
        assert display_url(url) == "http://host.example:9000/path?x=1"


def test_display_url_drops_token_parameters_and_user_info():
    assert display_url("https://git.example/o/r.git?private_token=glpat-1&ref=main") == \
        "https://git.example/o/r.git?ref=main"
    assert display_url("https://x.example/a?access_token=1&token=2&key=3&sig=4&keep=5") == \
        "https://x.example/a?keep=5"
    assert display_url("http://u:p@ss@127.0.0.1:9180/") == "http://127.0.0.1:9180"


# ---------------------------------------------------------------------------------------------------------
# Declared secret fields


def test_declared_secret_fields_from_the_repo_and_the_settings():
    files = {"a.yaml": b"secret_fields:\n  - my-plugin.conf.token\n  - upstreams.discovery_args.pass_word\n"
                       b"upstreams:\n  - id: u\n    nodes: {'h:1': 1}\n"
                       b"    discovery_args: {pass_word: dp-1}\n"
                       b"routes:\n  - id: r\n    uri: /\n    upstream_id: u\n"
                       b"    plugins:\n      ext-plugin-pre-req: {conf: [{name: n, value: v}]}\n"}
    rendered = render(files, RenderOptions(secret_rules=SecretRules.of(["ext-plugin-pre-req.conf.value"])))
    assert "secret_fields" not in rendered.payload  # the repo's own, never pushed
    shown = mask_secrets(rendered.payload, rendered.secret_values, rendered.secret_rules)
    assert shown["upstreams"][0]["discovery_args"] == {"pass_word": MASK}
    assert shown["routes"][0]["plugins"]["ext-plugin-pre-req"]["conf"] == [{"name": "n", "value": MASK}]
    assert redact("the value dp-1 and v") == f"the value {MASK} and v"  # dp-1 registered; "v" too short


def test_a_malformed_secret_field_is_a_problem_at_its_line():
    with pytest.raises(ProblemsError) as caught:
        render({"a.yaml": b"secret_fields:\n  - ok.path\n  - no_dot\n  - [1]\n"})
    assert [str(p) for p in caught.value.problems] == [
        "a.yaml:3:5: secret_fields: " + str(secret_field_problem("no_dot")),
        "a.yaml:4:5: secret_fields: " + str(secret_field_problem([1]))]


def test_render_masks_and_registers_literal_secrets_and_its_messages_mask_them():
    files = {"a.yaml": b"routes:\n  - id: r1\n    uri: /a\n    upstream_id: nope\n    plugins:\n"
                       b"      openid-connect: {client_id: c, client_secret: literal-cs-4821,\n"
                       b"        discovery: 'https://idp/x?access_token=literal-at-9173'}\n"}
    with pytest.raises(ProblemsError) as caught:
        render(files)
    assert "names no item of upstreams" in str(caught.value.problems[0])
    assert redact("literal-cs-4821 literal-at-9173") == f"{MASK} {MASK}"  # registered even when refused


def test_a_render_from_the_last_one_registers_the_secrets_of_the_files_it_changed():
    def routes(token: str) -> bytes:
        return (b"routes:\n  - id: r1\n    uri: /a\n    upstream_id: u1\n    plugins:\n      proxy-rewrite:\n"
                b"        headers: {set: {Authorization: 'Bearer " + token.encode() + b"'}}\n")

    first, second = (f"tok-{uuid.uuid4().hex}" for _ in range(2))
    files = {"up.yaml": b"upstreams:\n  - {id: u1, type: roundrobin, nodes: {'127.0.0.1:80': 1}}\n",
             "a.yaml": routes(first)}
    cache = ParseCache()
    render(files, memo=cache)
    assert redact(f"{first} {second}") == f"{MASK} {second}"
    followed: list[Any] = []
    with pytest.MonkeyPatch.context() as patch:
        real = incremental.render_next
        patch.setattr("gitsync.render.memo.cache.render_next", lambda *args: followed.append(real(*args)) or
                      followed[-1])
        rendered = render({**files, "a.yaml": routes(second)}, memo=cache)
    assert [made for made, _ in followed] == [rendered]  # from the last render, not in full
    assert redact(second) == MASK


# ---------------------------------------------------------------------------------------------------------
# The first look


_KEYS = st.sampled_from(["password", "x-api-key", "Authorization", "headers", "header", "conf", "uri",
                         "name", "key", "query", "secret_fallbacks", "plugins", "key-auth", "limit-count",
                         "redis_password", "auth", "desc", "tls", "client_key", "workflow", "rules",
                         "actions"])
_LEAVES = st.sampled_from(["v", "Bearer abc123def456", "http://u:pw@h/x?token=t", f"x {JWT}", PEM, "$host",
                           "Q2x8sK9mLp3Rt7vW1yZ4bN6c", "limit-count"]) | st.integers()
_VALUES = st.recursive(_LEAVES, lambda inner: st.lists(inner, max_size=3)
                       | st.dictionaries(_KEYS, inner, max_size=4), max_leaves=12)


@given(kind=st.sampled_from(["routes", "consumers", "plugin_metadata", "upstreams"]),
       item=st.dictionaries(_KEYS, _VALUES, max_size=5))
@example(kind="routes", item={"plugins": {"workflow": {"rules": 1}}})  # any shape: never an exception
@examples(1)
def test_the_first_look_never_skips_an_item_holding_a_secret(kind: str, item: dict[str, Any]):
    assert could_hold_secrets(kind, item) or not walk_item(kind, item)
    assert classify(kind, item) == walk_item(kind, item)
    values = secret_values({kind: [item]})
    assert all(v.strip() for v in values)


# ---------------------------------------------------------------------------------------------------------
# The four cases that found the gaps


@pytest.mark.slow
def test_regression_export_takes_out_oidc_keys_ai_proxy_query_key_and_a_cookie(apisix: ApisixDouble,
                                                                               tmp_path: Path):
    """openid-connect's client_secret, RSA private key and proxy Authorization, ai-proxy's query key and
    a Cookie under its auth.header: every one leaves the repo files for --secrets-out, and the export
    still proves its round trip."""
    _, private_key = pem_pair("oidc.example")
    proxy_auth = "Basic dXNlcjpjYW5hcnktcHJveHktcGFzcw=="
    values = {"client-secret": "canary-oidc-client-secret-4d1", "proxy": proxy_auth,
              "query-key": "canary-ai-query-key-8c2e", "cookie": "session=canary-cookie-91fb"}
    upstream = {"type": "roundrobin", "nodes": {"127.0.0.1:1980": 1}}
    route = {"id": "chat", "uri": "/chat", "upstream": upstream,
             "plugins": {
                 "openid-connect": {"client_id": "gw", "client_secret": values["client-secret"],
                                    "discovery": "https://idp.example/.well-known/openid-configuration",
                                    "client_rsa_private_key": private_key,
                                    "proxy_opts": {"http_proxy_authorization": proxy_auth}},
                 "ai-proxy": {"provider": "openai", "auth": {"query": {"key": values["query-key"]},
                                                             "header": {"Cookie": values["cookie"]}}}}}
    fill(apisix, {"routes": [route]})
    key_file = tmp_path / "admin_key"
    key_file.write_text(KEY)
    out, secrets = tmp_path / "exp", tmp_path / "sec"
    result = run_gitsync("export", "--gateway", apisix.url, "--admin-key-file", str(key_file),
                         "--out", str(out), "--secrets-out", str(secrets))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "round trip: render of the written repo equals the live config" in result.stdout
    hunted = [*values.values(), private_key.splitlines()[1][48:]]
    for value in hunted:
        assert Canary(value).leaks_in_tree(out) == {}, value
        Canary(value).assert_absent("export output", [result.stdout, result.stderr])
    stored = {p.name: p.read_text().strip() for p in secrets.iterdir()}
    assert sorted(stored.values()) == sorted([values["client-secret"], private_key.strip(), proxy_auth[6:],
                                              values["query-key"], values["cookie"]])
    written = (out / "routes.yaml").read_text()
    assert "http_proxy_authorization: Basic ${{ secrets." in written  # the scheme stays readable


def test_regression_a_flow_style_consumer_password_is_masked_as_written():
    """A consumer written in flow (JSON) style: the web view's "as written" masks its password where
    the parser says it is, however the line is spelled; so does render."""
    files = {"consumers.yaml": b'consumers:\n  - {"plugins": {"basic-auth": {"password":"hunter2-flow",'
                               b' "username": "bob"}}, "username": "bob"}\n'
                               b'  - username: carol\n    plugins:\n      "basic-auth":\n'
                               b'        "password": |\n          hunter3-block\n          second-line\n'
                               b"        'username': carol\n"
                               b"  - {username: dave, plugins: {key-auth: {key: 'dave''s-key-77'}}}\n"}
    rendered = render(files)
    catalog = Catalog("0" * 40, rendered, files)
    bob, carol, dave = (catalog.detail("consumers", name) for name in ("bob", "carol", "dave"))
    assert bob is not None and carol is not None and dave is not None
    assert bob.written == ((2, '  - {"plugins": {"basic-auth": {"password":"***", "username": "bob"}}, '
                                '"username": "bob"}'),)
    assert carol.written == ((3, "  - username: carol"), (4, "    plugins:"), (5, '      "basic-auth":'),
                             (6, '        "password": "***"'), (9, "        'username': carol"))
    assert dave.written == ((10, '  - {username: dave, plugins: {key-auth: {key: "***"}}}'),)
    shown = json.dumps(mask_secrets(rendered.payload, rendered.secret_values, rendered.secret_rules))
    for page in (bob, carol, dave):
        text = "\n".join(line for _, line in page.written) + page.pushed + shown
        for secret in ("hunter2-flow", "hunter3", "second-line", "dave's-key"):
            assert secret not in text


WRITTEN = {
    "crlf": (b"consumers:\r\n  - username: bob\r\n    plugins:\r\n"
             b"      basic-auth: {username: bob, password: \"hunter2-crlf\"}\r\n"),
    "bom": ("\ufeffconsumers:\n  - username: bob\n    plugins:\n"
            "      basic-auth: {username: bob, password: hunter2-bom}\n".encode()),
    "utf-16": ("consumers:\n  - username: bob\n    plugins:\n"
               "      basic-auth: {username: bob, password: hunter2-u16}\n".encode("utf-16")),
    "escapes": (b'consumers:\n  - username: bob\n    plugins:\n'
                b'      basic-auth: {username: bob, password: "hun\\tter2\\u00e9-esc"}\n'),
    "multi-line plain": (b"consumers:\n  - username: bob\n    plugins:\n      basic-auth:\n"
                         b"        username: bob\n        password: hunter2\n          second-line\n"),
}


@pytest.mark.parametrize("name", WRITTEN)
def test_as_written_masks_the_value_whatever_the_encoding_and_style(name: str):
    files = {"c.yaml": WRITTEN[name]}
    rendered = render(files)
    detail = Catalog("0" * 40, rendered, files).detail("consumers", "bob")
    assert detail is not None and detail.reformatted is None
    shown = "\n".join(line for _, line in detail.written)
    assert '"***"' in shown and "hunter2" not in shown and "second-line" not in shown
    assert shown.splitlines()[0] == "  - username: bob"
    # The page cuts the item's lines from the file (an excerpt); masked as the whole file's parse masks them.
    source = rendered.source_map.source("consumers", 0)
    assert source is not None
    assert list(detail.written) == written_lines(files["c.yaml"], "consumers", source, rendered.secret_values)


def test_regression_url_user_info_with_reserved_characters():
    """A password holding @ / ? # or a space is masked whole, and exported whole."""
    for password in ("p@ss-secret", "pa/ss-9", "pa?ss-9", "pa#ss-9", "pa ss-9"):
        uri = f"http://user:{password}@logs.example:9000/log"
        route = {"id": "r", "uri": "/", "plugins": {"http-logger": {"uri": uri}}}
        shown = mask_secrets({"routes": [route]}, ())["routes"][0]["plugins"]["http-logger"]["uri"]
        assert shown == "http://user:***@logs.example:9000/log"
        exported = export.build({"routes": [route]}, "per-kind")
        assert list(exported.secrets.values()) == [password]
        assert b"http://user:${{ secrets.ROUTES_R_HTTP_LOGGER_URI }}@logs.example:9000/log" in \
            exported.files["routes.yaml"]
        assert export.prove(exported) == ([], [])


def test_regression_display_url_drops_a_private_token_query():
    assert display_url("https://gitlab.example/group/config.git?private_token=glpat-canary-123") == \
        "https://gitlab.example/group/config.git"
    assert display_url("http://admin:p@ss/w?rd@127.0.0.1:9180/apisix?ref=main&token=t-1") == \
        "http://127.0.0.1:9180/apisix?ref=main"


# ---------------------------------------------------------------------------------------------------------
# The edges of the classifier, function by function


def test_rules_are_true_when_they_declare_something_and_add_up():
    assert not SecretRules.of([]) and not NO_RULES
    rules = SecretRules.of(["my-plugin.token", "routes.desc", "not valid", "my-plugin.token"])
    assert rules and rules.entries == ("my-plugin.token", "routes.desc")
    assert rules.plugins == {"my-plugin": (("token",),)} and rules.kinds == {"routes": (("desc",),)}
    both = SecretRules.of(["a-plugin.x"]) + SecretRules.of(["routes.y", "a-plugin.x"])
    assert both.entries == ("a-plugin.x", "routes.y")


def test_an_item_that_is_no_json_is_looked_at_whole():
    item = {"id": "r1", "values": {1, 2}}  # no JSON: the first look cannot rule it out
    assert could_hold_secrets("routes", item)
    assert not could_hold_secrets("routes", {"id": "r1", "uri": "/plain"})
    assert could_hold_secrets("ssls", {"id": "s1"}) and could_hold_secrets("secrets", {"id": "vault/x"})
    assert could_hold_secrets("routes", {"id": "r1"}, SecretRules.of(["routes.id"]))


@pytest.mark.parametrize("value", ["$secret://vault/gw/token", "$env://TOKEN", "$http_authorization",
                                   "${http_authorization}", "${{ secrets.token }}", "Bearer $env://TOKEN",
                                   ""])
def test_a_credential_header_that_names_where_its_value_comes_from_is_no_secret(value: str):
    item = {"id": "r1", "plugins": {"proxy-rewrite": {"headers": {"set": {"Authorization": value}}}}}
    assert secrets_of("routes", item) == {}


def test_a_credential_header_value_is_its_part_after_the_scheme():
    item = {"id": "r1", "plugins": {"proxy-rewrite": {"headers": {"set": {"Authorization": "  Bearer abc  ",
                                                                          "X-Api-Key": " k1 "}}}}}
    assert secrets_of("routes", item) == {"plugins.proxy-rewrite.headers.set.Authorization": ["abc"],
                                          "plugins.proxy-rewrite.headers.set.X-Api-Key": ["k1"]}


@pytest.mark.parametrize(("text", "pieces"), [
    ("https://hooks.example.com/T0AB12CD/B0XY34ZW/aZ3kP9qLmN7vR2sT5uW8yB1d", ["aZ3kP9qLmN7vR2sT5uW8yB1d"]),
    ("https://hooks.example.com", []),  # no path: nothing to look at
    ("see https://hooks.example.com/x/aZ3kP9qLmN7vR2sT5uW8yB1d", []),  # not a URL value
    ("https://h.example/p?q=aZ3kP9qLmN7vR2sT5uW8yB1d&x=1", ["aZ3kP9qLmN7vR2sT5uW8yB1d"]),
])
def test_a_likely_secret_in_a_url_is_a_high_entropy_part_of_its_path_or_query(text: str, pieces: list[str]):
    found = secrets_of("routes", {"id": "r1", "desc": text})
    assert found == ({"desc": pieces} if pieces else {})
    if pieces:
        (finding,) = classify("routes", {"id": "r1", "desc": text})
        assert not finding.certain and finding.why == "a high-entropy part of a URL"


def test_a_payload_is_looked_at_list_by_list():
    payload = {"routes": [{"id": "r1", "desc": "Bearer abcdefgh12345678"}, {"id": "r2", "uri": "/x"}],
               "plugin_metadata": {"not": "a list"}, "upstreams": [{"id": "u1", "nodes": {}}]}
    found = [(kind, index, f.path) for kind, index, f in find_secrets(payload)]
    assert found == [("routes", 0, ("desc",))]
    contents = {"routes": [b'{"desc":"Bearer abcdefgh12345678","id":"r1"}', b'{"id":"r2","uri":"/x"}'],
                "upstreams": [b"x"] * 5}  # a list of another length is not used
    assert [(k, i, f.path) for k, i, f in find_secrets(payload, NO_RULES, contents)] == found
    quiet = {"routes": [b'{"id":"r1"}', b'{"id":"r2"}']}  # contents without a stem: the list is skipped
    assert list(find_secrets(payload, NO_RULES, quiet)) == []
    assert secret_values(payload) == {"abcdefgh12345678"}


def test_a_documents_secret_values_are_those_of_its_kinds():
    document = {"routes": [{"id": "r1", "desc": "Bearer abcdefgh12345678"}], "x": [{"password": "p"}],
                "consumers": {"not": "a list"}}
    assert document_secret_values(document) == {"abcdefgh12345678"}
    assert document_secret_values(["routes"]) == set() and document_secret_values(None) == set()


def test_free_text_is_masked_by_shape_only():
    assert mask_text("nothing to see", "***") == "nothing to see"
    assert mask_text("password: hunter2", "***") == "password: hunter2"  # no header map in free text
    assert mask_text("got Bearer abcdefgh12345678 and Basic dXNlcjpwYXNzd29yZA==", "***") == \
        "got Bearer *** and Basic ***"
    assert mask_text("https://user:pa55@example.com/x", "***") == "https://user:***@example.com/x"


@pytest.mark.parametrize(("name", "secret"), [
    ("password", True), ("Password", True), ("PASSWORD", True), ("client-secret", True),
    ("Client_Secret", True), ("db_password", True), ("X-Api-Key", True), ("my-api-key", True),
    ("passwords", False), ("user", False), ("api", False),
    ("secret_fallbacks", True), ("token", True), ("tokens", False),
])
def test_a_secret_name_in_any_case_and_with_dashes(name: str, secret: bool):
    assert is_secret_name(name) is secret


@pytest.mark.parametrize(("text", "bits"), [("a", 0.0), ("aabb", 1.0), ("abcd", 2.0), ("aaab", 0.811)])
def test_entropy_is_in_bits_per_character(text: str, bits: float):
    assert entropy(text) == pytest.approx(bits, abs=0.001)


def test_shapes_in_a_header_value_are_its_secret_parts_at_their_offsets():
    headers = {"X-Note": "see https://u:p4ss@h.example/x and Bearer abcdefgh12345678"}
    item = {"id": "r1", "plugins": {"proxy-rewrite": {"headers": {"set": headers}}}}
    (finding,) = classify("routes", item)
    assert (finding.spans, finding.why, finding.certain) == (((14, 18), (42, 58)), "a URL password", True)
    lines = {"id": "r1", "plugins": {"proxy-rewrite": {"headers": ["X-Note: see Bearer abcdefgh12345678"]}}}
    (line,) = classify("routes", lines)
    assert line.pieces("X-Note: see Bearer abcdefgh12345678") == ["abcdefgh12345678"]


def test_a_likely_secret_header_value_is_its_text_without_the_blanks_and_not_certain():
    headers = {"X-Note": "  aZ3kP9qLmN7vR2sT5uW8yB1d  "}
    item = {"id": "r1", "plugins": {"proxy-rewrite": {"headers": {"set": headers}}}}
    (finding,) = classify("routes", item)
    assert (finding.spans, finding.why, finding.certain) == (
        ((2, 26),), "a high-entropy value of the header 'X-Note'", False)


def test_a_credential_headers_finding_says_which_header():
    item = {"id": "r1", "plugins": {"proxy-rewrite": {"headers": {"set": {"Authorization": "Bearer abc"}}}}}
    (finding,) = classify("routes", item)
    assert finding.why == "the value of the header 'Authorization'" and finding.spans == ((7, 10),)


def test_every_list_of_a_payload_is_looked_at_after_one_skipped():
    payload = {"plugin_metadata": {"not": "a list"}, "upstreams": [{"id": "u1", "nodes": {}}],
               "routes": [{"id": "r1", "desc": "Bearer abcdefgh12345678"}]}
    contents = {"upstreams": [b'{"id":"u1","nodes":[]}'], "routes": [b'{"desc":"Bearer abcdefgh12345678"}']}
    assert [(k, i) for k, i, _ in find_secrets(payload, NO_RULES, contents)] == [("routes", 0)]
    assert [(k, i) for k, i, _ in find_secrets(payload)] == [("routes", 0)]


# ---------------------------------------------------------------------------------------------------------
# Each finding's reason: export and validate name it, so a rule that finds a value for the wrong reason
# (a broader rule finding it again) is a changed decision


def why_of(kind: str, item: Any, rules: SecretRules = NO_RULES) -> dict[str, tuple[list[str], str]]:
    """field path (dotted) → (the secret pieces there, why), for findings the classifier is sure of."""
    found = {}
    for f in classify(kind, item, rules):
        assert f.certain, f
        found[".".join(map(str, f.path))] = (f.pieces(value_at(item, f.path)), f.why)
    return found


def test_each_plugin_rule_says_why():
    conf = {"jwt-auth": {"key": "user-key", "secret": "s-1"}, "my-plugin": {"conf": {"opaque": "o-1"}},
            "limit-count": {"redis_password": "r-1", "key": "remote_addr"}}
    rules = SecretRules.of(["my-plugin.conf.opaque"])
    assert why_of("consumers", {"username": "u", "plugins": conf}, rules) == {
        "plugins.jwt-auth.key": (["user-key"], "jwt-auth's credential"),  # an auth plugin's key
        "plugins.jwt-auth.secret": (["s-1"], "jwt-auth's encrypt_fields (apisix/plugins/jwt-auth.lua)"),
        "plugins.my-plugin.conf.opaque": (["o-1"], "secret_fields: my-plugin.conf.opaque"),
        "plugins.limit-count.redis_password": (
            ["r-1"], "limit-count's encrypt_fields (apisix/plugins/limit-count/init.lua)"),
    }  # limit-count's key names a variable
    assert why_of("consumers", {"username": "u", "plugins": {"jwt-auth": {"secret": "s-1"}}}) == {
        "plugins.jwt-auth.secret": (["s-1"], "jwt-auth's encrypt_fields (apisix/plugins/jwt-auth.lua)")}
    assert why_of("consumers", {"username": "u", "plugins": {"jwt-auth": ["key"]}}) == {}


def test_a_plugin_inside_workflow_says_it_is_that_plugins_field():
    limit = {"count": 1, "time_window": 1, "redis_password": "w-1"}
    actions = [5, ["limit-count"], [7, limit], "limit-count", ["jwt-auth", {"key": "k-2"}, "more"],
               ["limit-count", limit]]
    route = {"id": "r", "uri": "/", "plugins": {"workflow": {"rules": [
        "not a rule", {"case": []}, {"actions": "not a list"}, {"actions": actions}]}}}
    assert why_of("routes", route) == {
        "plugins.workflow.rules.3.actions.2.1.redis_password": (["w-1"], "the field name 'redis_password'"),
        "plugins.workflow.rules.3.actions.4.1.key": (["k-2"], "jwt-auth's credential"),
        "plugins.workflow.rules.3.actions.5.1.redis_password": (
            ["w-1"], "limit-count's encrypt_fields (apisix/plugins/limit-count/init.lua)"),
    }  # an action named by no string is no plugin: found by its field's name only
    not_listed = {"id": "r", "plugins": {"workflow": {"rules": {"actions": actions}}}}
    assert {why for _, why in why_of("routes", not_listed).values()} == {"the field name 'redis_password'"}
    # only workflow's actions are plugins: another plugin's rules are its own config
    other = {"id": "r", "plugins": {"my-plugin": {"rules": [{"actions": [["jwt-auth", {"key": "k-3"}]]}]}}}
    assert why_of("routes", other) == {}


def test_each_kind_rule_says_why():
    assert why_of("ssls", {"id": "s", "key": "k", "keys": ["k1", {"k": "k2"}]}) == {
        "key": (["k"], "ssls's key"), "keys.0": (["k1"], "ssls's keys"), "keys.1.k": (["k2"], "ssls's keys")}
    assert why_of("routes", {"id": "r", "upstream": {"tls": {"client_key": "ck"}}}) == {
        "upstream.tls.client_key": (["ck"], "routes's upstream.tls.client_key")}
    rules = SecretRules.of(["upstreams.discovery_args.opaque"])
    assert why_of("upstreams", {"id": "u", "discovery_args": {"opaque": "d-1"}}, rules) == {
        "discovery_args.opaque": (["d-1"], "secret_fields: upstreams.discovery_args.opaque")}


@pytest.mark.parametrize(("item", "found"), [
    ({"id": "vault/main", "token": "t-1", "uri": "http://v:8200"},
     {"token": (["t-1"], "the vault secret manager's token")}),
    ({"id": "aws/team/a", "secret_access_key": "s-1", "session_token": "t-2"},
     {"secret_access_key": (["s-1"], "the aws secret manager's secret_access_key"),
      "session_token": (["t-2"], "the aws secret manager's session_token")}),
    ({"id": "gcp/p", "auth_config": {"private_key": "g-1", "client_email": "e"}},
     {"auth_config.private_key": (["g-1"], "the gcp secret manager's auth_config.private_key")}),
    ({"id": "custom/x", "token": "t-3"}, {"token": (["t-3"], "the field name 'token'")}),  # no table
    ({"token": "t-4"}, {"token": (["t-4"], "the field name 'token'")}),
])
def test_a_secret_manager_says_which_manager_by_its_id(item: dict[str, Any], found: dict[str, Any]):
    assert why_of("secrets", item) == found


AZURE = "azure-functions's metadata encrypt_fields (apisix/plugins/azure-functions.lua)"


def test_plugin_metadata_says_its_plugins_metadata_and_declared_fields():
    assert why_of("plugin_metadata", {"id": "azure-functions", "master_apikey": "m-1"}) == {
        "master_apikey": (["m-1"], AZURE)}
    rules = SecretRules.of(["my-plugin.conf.opaque", "azure-functions.conf.opaque"])
    assert why_of("plugin_metadata", {"id": "my-plugin", "conf": {"opaque": "o-1"}}, rules) == {
        "conf.opaque": (["o-1"], "secret_fields: my-plugin.conf.opaque")}
    both = {"id": "azure-functions", "master_apikey": "m-1", "conf": {"opaque": "o-2"}}
    assert why_of("plugin_metadata", both, rules) == {
        "master_apikey": (["m-1"], AZURE),
        "conf.opaque": (["o-2"], "secret_fields: azure-functions.conf.opaque")}
    assert why_of("plugin_metadata", {"master_apikey": "m-1"}) == {
        "master_apikey": (["m-1"], "the field name 'master_apikey'")}  # whose metadata: unknown


def test_a_field_named_secret_says_its_name_whole_values_inside_it_too():
    item = {"id": "r", "desc": {"password": {"a": ["p-1", "$env://P"], "b": "p-2"}, "api_key": ""}}
    assert why_of("routes", item) == {"desc.password.a.0": (["p-1"], "the field name 'password'"),
                                      "desc.password.b": (["p-2"], "the field name 'password'")}


def test_an_authorization_field_is_read_as_the_header():
    item = {"id": "r", "desc": {"password": "p-1", "authorization": "Bearer t0ken-1",
                                "proxy_authorization": "$http_proxy_authorization",
                                "http_proxy_authorization": "Basic dXNlcjpwdw==", "Authorization": ["a-1"]}}
    assert why_of("routes", item) == {
        "desc.password": (["p-1"], "the field name 'password'"),
        "desc.authorization": (["t0ken-1"], "the value of the header 'Authorization'"),  # after its scheme
        "desc.http_proxy_authorization": (["dXNlcjpwdw=="], "the value of the header 'Authorization'"),
        "desc.Authorization.0": (["a-1"], "the field name 'Authorization'"),  # no string: whole
    }  # a variable is where the value comes from


def test_header_lines_in_a_header_list_and_nowhere_else():
    lines = ["Cookie: sid=a:b", f"{JWT}", "https://u:s3cret@h.example/x", "Token: $env://T", "X-A: b"]
    item = {"id": "r", "plugins": {"proxy-rewrite": {"headers": lines}}, "desc": "X-Api-Key: k3y-value"}
    assert why_of("routes", item) == {
        "plugins.proxy-rewrite.headers.0": (["sid=a:b"], "the value of the header 'Cookie'"),
        "plugins.proxy-rewrite.headers.1": ([JWT], "a JWT"),
        "plugins.proxy-rewrite.headers.2": (["s3cret"], "a URL password"),
    }  # a free text field is no header map: by shape only
    found = [f for f in classify("routes", item) if f.path == ("plugins", "proxy-rewrite", "headers", 0)]
    assert found == [Finding(("plugins", "proxy-rewrite", "headers", 0), ((8, 15),),
                             "the value of the header 'Cookie'")]


def test_shapes_say_which_shape_each_part_has():
    text = f"{PEM}{JWT} and Bearer abcdefgh-ijklmno and Basic dXNlcjpwdw== token=Bearer abc-defgh"
    (finding,) = classify("routes", {"id": "r", "desc": text})
    assert finding.why == "a PEM private key; a JWT; a credential after an authorization scheme"
    assert finding.pieces(text) == [PEM, JWT, "abcdefgh-ijklmno", "dXNlcjpwdw=="]  # side by side: two
    for words in ("Bearer abcdefghijklmnopqrstu", "Bearer abc-defgh", "Bearer abcdefg-ijklmn",
                  "https://h.example/x?token=$env://TOKEN"):
        assert classify("routes", {"id": "r", "desc": words}) == [], words  # words, a reference: none
    shaped = {"id": "r", "plugins": {"proxy-rewrite": {"headers": {"set": {"X-Note": f"see {JWT}"}}}}}
    assert classify("routes", shaped) == [
        Finding(("plugins", "proxy-rewrite", "headers", "set", "X-Note"), ((4, 4 + len(JWT)),), "a JWT")]


def test_a_non_item_is_looked_at_for_shapes_only():
    assert classify("routes", ["Bearer abcdefgh12345678", {"password": "p-1"}]) == [
        Finding((0,), ((7, 23),), "a credential after an authorization scheme"),
        Finding((1, "password"), None, "the field name 'password'")]
    assert classify("ssls", "-----BEGIN EC PRIVATE KEY-----") == [
        Finding((), ((0, 30),), "a PEM private key")]


def test_likely_secrets_at_their_edges():
    assert classify("routes", {"id": "r", "desc": "https://h.example/p/Q2x8sK9mLp3Rt7vW1yZ4"}) == [
        Finding(("desc",), ((20, 40),), "a high-entropy part of a URL", certain=False)]  # 20 characters
    assert classify("routes", {"id": "r", "desc": "https://h.example/p/Q2x8sK9mLp3Rt7vW1yZ"}) == []  # 19
    even = "aabbccddeeffgghh1111222233334444"  # exactly 3.5 bits a character
    assert entropy(even) == 3.5
    found = classify("routes", {"id": "r", "desc": f"https://h.example/{even}"})
    assert [f.spans for f in found] == [((18, 50),)]
    # the host is no secret, however random its name
    assert classify("routes", {"id": "r", "desc": "https://Q2x8sK9mLp3Rt7vW1yZ4bN6c.example/hook"}) == []


def test_contents_of_another_length_are_not_used():
    payload = {"routes": [{"id": "r1", "desc": "Bearer abcdefgh12345678"}]}
    assert [(k, i) for k, i, _ in find_secrets(payload, NO_RULES, {"routes": []})] == [("routes", 0)]


def test_a_fixed_credential_in_vars_and_literals_of_code_are_likely_secrets():
    """Issue 41, item 6: a route that lets in whoever sends a fixed key, and Lua holding a password."""
    route = {"id": "r", "uri": "/x",
             "vars": [["http_x_api_key", "==", "fixed"], ["arg_page", "==", "2"],
                      ["arg_sig", "==", "a1b2c3d4e5f6"], ["uri", "~~", "^/payments/"],
                      ["http_x_token", "==", "$http_x_other"]],
             "plugins": {
                 "serverless-pre-function": {"phase": "rewrite", "functions": [
                     "return function() if ngx.var.http_x_token ~= 'Sup3rS3cretValue' then "
                     "return ngx.exit(401) end ngx.req.set_header(\"X-Api-Key\", [[k3y-in-brackets]]) "
                     "ngx.log(ngx.ERR, '/payments/refund', \"a plain word\") end"]},
                 "traffic-split": {"rules": [{"match": [{"vars": [["cookie_session", "==", "s"]]}]}]}}}
    found = {f.path: f for f in classify("routes", route)}
    assert set(found) == {("vars", 0, 2), ("vars", 2, 2),
                          ("plugins", "serverless-pre-function", "functions", 0),
                          ("plugins", "traffic-split", "rules", 0, "match", 0, "vars", 0, 2)}
    assert not any(f.certain for f in found.values())
    code = route["plugins"]["serverless-pre-function"]["functions"][0]
    assert found[("plugins", "serverless-pre-function", "functions", 0)].pieces(code) == [
        "Sup3rS3cretValue", "k3y-in-brackets"]
    shown = mask_secrets({"routes": [route]}, frozenset())["routes"][0]
    assert shown["vars"][0][2] == "***" and shown["vars"][1][2] == "2"
    assert "Sup3rS3cretValue" not in str(shown) and "k3y-in-brackets" not in str(shown)
    assert "/payments/refund" in str(shown) and "X-Api-Key" in str(shown)
