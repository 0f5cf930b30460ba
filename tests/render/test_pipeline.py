"""render(): every error class of the repo format at its file:line:col, layering, substitution, caching."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from gitsync import log as gslog
from gitsync.kinds import KINDS
from gitsync.problems import ProblemsError
from gitsync.render import (
    RenderOptions,
    mask_secrets,
    render,
)
from gitsync.render.memo import ParseCache
from gitsync.source.directory import read_directory

SAMPLE = Path(__file__).resolve().parents[2] / "sample-repo"
CERT = (SAMPLE / "certs/example.com.crt").read_text()
KEY = (SAMPLE / "certs/example.com.key").read_text()

ROUTE = "routes:\n  - id: r1\n    uri: /a\n    upstream_id: u1\n"
UPSTREAM = "upstreams:\n  - id: u1\n    nodes: {'10.0.0.1:80': 1}\n"


def files(**texts: str) -> dict[str, bytes]:
    """``a__b_yaml="..."`` → ``{"a/b.yaml": b"..."}``."""
    return {name.replace("__", "/").replace("_yaml", ".yaml").replace("_json", ".json"): text.encode()
            for name, text in texts.items()}


def errors(given: dict[str, bytes], stage: str | None = None, **options: object) -> list[str]:
    with pytest.raises(ProblemsError) as caught:
        render(given, RenderOptions(**options))
    if stage:
        assert caught.value.stage == stage
    return [str(p) for p in caught.value.problems]


def indent(text: str, spaces: int) -> str:
    return "".join(" " * spaces + line + "\n" for line in text.strip().splitlines())


# --- loading ---------------------------------------------------------------------------------------------


def test_syntax_error_duplicate_key_and_alias_each_at_file_line_col():
    assert errors(files(a_yaml="routes:\n  - id: r1\n    uri: [/a\n", b_yaml=UPSTREAM + "    nodes: {}\n",
                        c_yaml="x: &a 1\n"), stage="render") == [
        "a.yaml:4:1: YAML syntax error: did not find expected ',' or ']' (while parsing a flow sequence)",
        "b.yaml:4:5: duplicate key 'nodes' in this mapping",
        "c.yaml:1:4: YAML anchors and aliases (&name, *name) are not accepted: they can hide a huge "
        "document; write the value out",
    ]


def test_document_shape_unknown_keys_and_versions():
    text = ("routes: []\n---\n- not a mapping\n---\nroute:\n  - id: r1\nstreamroutes: []\n"
            "routes_conf_version: 3\n")
    assert errors(files(a_yaml=text, b_yaml="services: {id: s1}\n"), stage="validate") == [
        "a.yaml:3:1: a document must be a mapping of kinds to lists (routes: [...]), not a list",
        "a.yaml:5:1: unknown top-level key 'route' (did you mean 'routes'?)",
        "a.yaml:7:1: unknown top-level key 'streamroutes' (did you mean 'stream_routes'?)",
        "a.yaml:8:1: routes_conf_version does not belong in the repo: versions are chosen by the agent "
        "from the live gateway; remove it",
        "b.yaml:1:1: services: expected a list of items, got a mapping",
    ]


def test_file_size_item_count_and_payload_size_limits():
    big = "routes:\n" + "".join(f"  - {{id: r{i}, uri: /{i}, upstream_id: u1}}\n" for i in range(30))
    assert errors(files(a_yaml=big, u_yaml=UPSTREAM), max_file_size=100) == [
        f"a.yaml: the file is {len(big)} bytes, more than max_file_size = 100"]
    assert errors(files(a_yaml=big, u_yaml=UPSTREAM), max_items=30) == [
        "31 items, more than max_items = 30"]
    problems = errors(files(a_yaml=big, u_yaml=UPSTREAM), max_payload_size=1000)
    assert len(problems) == 1 and problems[0].startswith("the rendered payload is ")
    assert "more than max_payload_size = 1000 (APISIX keeps its whole config in a 10 MiB shared dict)" \
        in problems[0]


def test_a_path_without_config_files_is_an_error():
    assert errors(files(base__a_yaml=ROUTE + UPSTREAM), paths=("base", "envs/prdo")) == [
        "no config files (*.yaml, *.yml, *.json) under the path 'envs/prdo'"]


# --- items -----------------------------------------------------------------------------------------------


def test_schema_error_positions():
    text = ("routes:\n  - id: r1\n    uri: 42\n    upstream_id: u1\n    plugins:\n      no-such-plugin: {}\n"
            + UPSTREAM)
    assert errors(files(a_yaml=text)) == [
        'a.yaml:3:5: routes[r1].uri: invalid configuration: property "uri" validation failed: wrong type: '
        "expected string, got number (value 42)",
        "a.yaml:6:7: routes[r1].plugins.no-such-plugin: unknown plugin [no-such-plugin]",
    ]


def test_ids_present_and_well_formed():
    text = ("routes:\n  - uri: /a\n    upstream_id: u1\n  - id: 'has space'\n    uri: /b\n"
            f"    upstream_id: u1\n  - id: {'x' * 65}\n    uri: /c\n    upstream_id: u1\n  - id: 0\n"
            "    uri: /d\n    upstream_id: u1\n"
            "secrets:\n  - id: vault/a/b\n    uri: http://127.0.0.1:8200\n    prefix: kv\n    token: t\n"
            "  - uri: http://127.0.0.1:8200\n")
    assert errors(files(a_yaml=text + UPSTREAM)) == [
        "a.yaml:2:5: routes.id: missing id: every item needs one (APISIX before 3.17 fails on items without)",
        "a.yaml:4:5: routes[has space].id: invalid id 'has space': only letters, digits, '-', '_' and '.' "
        "are allowed",
        f"a.yaml:7:5: routes[{'x' * 65}].id: invalid id: 65 characters, at most 64 are allowed",
        "a.yaml:10:5: routes[0].id: an integer id must be 1 or more",
        "a.yaml:14:5: secrets[vault/a/b].id: invalid secret id: vault/a/b (the name after 'vault/' must be "
        "one segment of letters, digits, '-', '_' and '.': a $secret:// reference can name no other)",
        "a.yaml:18:5: secrets.id: missing id: a secret manager's id is <manager>/<name>, e.g. vault/main",
    ]


def test_duplicate_ids_across_files_name_both_places():
    assert errors(files(a_yaml=ROUTE + UPSTREAM, b__c_yaml="# another\n" + ROUTE)) == [
        "b/c.yaml:3:5: routes[r1]: duplicate id 'r1' in routes: also at a.yaml:2:5"]
    consumers = "consumers:\n  - username: jack\n"
    assert errors(files(a_yaml=consumers, b_yaml=consumers)) == [
        "b.yaml:2:5: consumers[jack]: duplicate username 'jack' in consumers: also at a.yaml:2:5"]


def test_consumer_username_and_credential_rules():
    text = ("consumers:\n  - username: 'bad name'\n  - username: jack\n    id: john\n"
            "  - id: jack/credentials/a b\n    plugins: {key-auth: {key: abcdef}}\n"
            "  - id: nobody/credentials/k1\n    plugins: {key-auth: {key: abcdef}}\n")
    assert errors(files(a_yaml=text)) == [
        'a.yaml:2:5: consumers[bad name].username: invalid configuration: property "username" validation '
        'failed: failed to match pattern "^[a-zA-Z0-9_\\\\-]+$" with "bad name"',
        "a.yaml:4:5: consumers[john].id: wrong username",
        'a.yaml:5:5: consumers[jack/credentials/a b].id: invalid configuration: property "id" validation '
        'failed: failed to match pattern "^[a-zA-Z0-9-_]+/credentials/[a-zA-Z0-9-_.]+$" with '
        '"jack/credentials/a b"',
        "a.yaml:7:5: consumers[nobody/credentials/k1].id: credential of an unknown consumer 'nobody'",
    ]


def test_every_reference_is_checked():
    text = """routes:
  - {id: r1, uri: /a, upstream_id: u9}
  - {id: r2, uri: /b, service_id: s9}
  - {id: r3, uri: /c, upstream_id: u1, plugin_config_id: p9}
services:
  - {id: s1, upstream_id: u9}
consumers:
  - {username: jack, group_id: g9}
stream_routes:
  - {id: t1, upstream_id: u9}
  - {id: t2, service_id: s9}
"""
    assert errors(files(a_yaml=text + UPSTREAM)) == [
        "a.yaml:2:23: routes[r1].upstream_id: upstream_id 'u9' names no item of upstreams",
        "a.yaml:3:23: routes[r2].service_id: service_id 's9' names no item of services",
        "a.yaml:4:40: routes[r3].plugin_config_id: plugin_config_id 'p9' names no item of plugin_configs",
        "a.yaml:6:14: services[s1].upstream_id: upstream_id 'u9' names no item of upstreams",
        "a.yaml:8:22: consumers[jack].group_id: group_id 'g9' names no item of consumer_groups",
        "a.yaml:10:14: stream_routes[t1].upstream_id: upstream_id 'u9' names no item of upstreams",
        "a.yaml:11:14: stream_routes[t2].service_id: service_id 's9' names no item of services",
    ]


def test_references_into_unmanaged_kinds_are_not_checked():
    text = "routes:\n  - {id: r1, uri: /a, upstream_id: u1, plugins: {proxy-rewrite: {uri: '$secret://vault/x/a/b'}}}\n"
    rendered = render(files(a_yaml=text + UPSTREAM), RenderOptions(unmanaged=frozenset({"secrets"})))
    assert rendered.payload["routes"][0]["upstream_id"] == "u1"


def test_secret_references_name_a_declared_manager():
    text = """secrets:
  - {id: vault/main, uri: "http://127.0.0.1:8200", prefix: kv, token: root}
routes:
  - id: r1
    uri: /a
    upstream_id: u1
    plugins:
      proxy-rewrite:
        headers:
          set: {A: "$secret://vault/main/a/b", B: "$secret://vault/other/a/b", C: "$secret://vault/main"}
"""
    assert errors(files(a_yaml=text + UPSTREAM)) == [
        "a.yaml:10:48: routes[r1].plugins.proxy-rewrite.headers.set.B: '$secret://vault/other/a/b' names no "
        "item of secrets (declare one with id vault/other)",
        "a.yaml:10:80: routes[r1].plugins.proxy-rewrite.headers.set.C: malformed secret reference "
        "'$secret://vault/main': expected $secret://<manager>/<name>/<key>",
    ]


def test_ssl_certificate_key_and_sni_checks():
    other_key = ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()).decode()
    text = (f"ssls:\n  - id: good\n    snis: [example.com]\n    cert: |\n{indent(CERT, 6)}"
            f"    key: |\n{indent(KEY, 6)}"
            f"  - id: mismatch\n    sni: Example.com\n    cert: |\n{indent(CERT, 6)}"
            f"    key: |\n{indent(other_key, 6)}"
            f"  - id: broken\n    sni: other.example.com\n    cert: |\n{indent('x' * 200, 6)}"
            f"    key: |\n{indent(KEY, 6)}"
            # references must still be as long as a certificate (128) and a key (64): recorded on APISIX 3.18
            f"  - id: by-reference\n    sni: ref.example.com\n"
            f"    cert: $secret://vault/main/ssl/{'c' * 104}\n"
            f"    key: $env://SSL_KEY_{'K' * 50}\n"
            "secrets:\n  - {id: vault/main, uri: 'http://127.0.0.1:8200', prefix: kv, token: root}\n")
    lines = text.splitlines()
    mismatch = lines.index("  - id: mismatch") + 1
    broken = lines.index("  - id: broken") + 1
    assert errors(files(a_yaml=text)) == [
        f"a.yaml:{mismatch + 1}:5: ssls[mismatch].sni: sni 'Example.com' is also served by ssls[good] "
        "at a.yaml:2:5",
        f"a.yaml:{mismatch + 15}:5: ssls[mismatch].key: the private key does not match the certificate",
        f"a.yaml:{broken + 2}:5: ssls[broken].cert: failed to parse cert: PEM_read_bio_X509_AUX() failed",
    ]


# --- substitution ----------------------------------------------------------------------------------------


def test_vars_secrets_escapes_and_passthrough():
    text = """upstreams:
  - id: u1
    nodes:
      "${{ vars.HOST }}:80": 1
    timeout:
      connect: ${{ vars.TIMEOUT }}
      send: 5
      read: 5
routes:
  - id: r1
    uri: /a
    upstream_id: u1
    desc: "${{ vars.TIMEOUT }} is text when quoted"
    plugins:
      proxy-rewrite:
        headers:
          set:
            X-Token: Bearer ${{secrets.API_TOKEN}}
            X-Host: $host ${host} $secret://vault/main/a/b $env://HOME
            X-Literal: $${{ vars.HOST }}
secrets:
  - {id: vault/main, uri: "http://127.0.0.1:8200", prefix: kv, token: "${{ secrets.API_TOKEN }}"}
"""
    lookups: list[str] = []

    def lookup(name: str) -> str | None:
        lookups.append(name)
        return {"API_TOKEN": "tok-123456"}.get(name)

    rendered = render(files(a_yaml=text), RenderOptions(vars={"HOST": "10.0.0.1", "TIMEOUT": "2.5"},
                                                        secret_lookup=lookup))
    upstream = rendered.payload["upstreams"][0]
    assert upstream["nodes"] == {"10.0.0.1:80": 1}
    assert upstream["timeout"]["connect"] == 2.5  # unquoted and alone: typed as YAML would
    route = rendered.payload["routes"][0]
    assert route["desc"] == "2.5 is text when quoted"
    assert route["plugins"]["proxy-rewrite"]["headers"]["set"] == {
        "X-Token": "Bearer tok-123456",
        "X-Host": "$host ${host} $secret://vault/main/a/b $env://HOME",
        "X-Literal": "${{ vars.HOST }}",
    }
    assert rendered.secret_values == frozenset({"tok-123456"})
    assert lookups == ["API_TOKEN"]  # looked up once per render
    assert gslog.redact("x tok-123456 y") == "x *** y"  # registered with the redactor on the spot


def test_undefined_names_and_bad_expressions_at_their_line():
    text = ("upstreams:\n  - id: u1\n    nodes:\n      - host: ${{ vars.NOPE }}\n        port: 80\n"
            "        weight: 1\n    desc: ${{ secrets.MISSING }} ${{ var.TYPO }} ${{ vars.X\n")
    assert errors(files(a_yaml=text), stage="render") == [
        "a.yaml:4:9: upstreams[u1].nodes[0].host: undefined variable vars.NOPE (set it in [render.vars], "
        "the vars file, or GITSYNC_VAR_NOPE)",
        "a.yaml:7:5: upstreams[u1].desc: undefined secret secrets.MISSING (no file MISSING in the secrets "
        "directory, no GITSYNC_SECRET_MISSING)",
        "a.yaml:7:5: upstreams[u1].desc: unknown expression ${{ var.TYPO }}: expected ${{ vars.NAME }} or "
        "${{ secrets.NAME }}",
        "a.yaml:7:5: upstreams[u1].desc: '${{' without a closing '}}' (write '$${{' for a literal)",
    ]


def test_secrets_stay_text_even_when_they_look_like_numbers():
    text = ("secrets:\n  - id: vault/main\n    uri: http://127.0.0.1:8200\n    prefix: kv\n"
            "    token: ${{ secrets.T }}\n")
    rendered = render(files(a_yaml=text), RenderOptions(secret_lookup=lambda name: "123456"))
    assert rendered.payload["secrets"][0]["token"] == "123456"


def test_number_renders_a_var_as_a_number_quoted_or_not():
    text = ('upstreams:\n  - id: u1\n    nodes: [{host: a.b, port: "${{ number(vars.PORT) }}", weight: 1}]\n'
            "    retries: ${{ number(vars.RETRIES) }}\n"
            "    timeout: {connect: '${{ number(vars.T) }}', send: 1, read: 1}\n")
    rendered = render(files(a_yaml=text), RenderOptions(vars={"PORT": "18390", "RETRIES": " 2 ", "T": "1e1"}))
    upstream = rendered.payload["upstreams"][0]
    assert upstream["nodes"][0]["port"] == 18390 and type(upstream["nodes"][0]["port"]) is int
    assert upstream["retries"] == 2
    assert upstream["timeout"]["connect"] == 10.0


def test_number_refuses_what_is_not_a_number_at_its_line():
    text = ("upstreams:\n  - id: u1\n    nodes: {'a.b:80': 1}\n"
            "    retries: ${{ number(vars.R) }}\n"
            "    desc: 'port ${{ number(vars.R) }}'\n"
            "    key: ${{ number(secrets.TOKEN) }}\n"
            "    scheme: ${{ number(vars.NOPE) }}\n"
            "    labels: {'${{ number(vars.N) }}': x}\n")
    assert errors(files(a_yaml=text), stage="render", vars={"R": "1_000", "N": "5"},
                  secret_lookup={"TOKEN": "12345678"}.get) == [
        "a.yaml:4:5: upstreams[u1].retries: vars.R is '1_000', not a number: ${{ number(vars.R) }} needs an "
        "integer or a decimal number, as YAML 1.2 reads one (8080, 2.5, 1e3)",
        "a.yaml:5:5: upstreams[u1].desc: ${{ number(vars.R) }} must be the whole value: it renders a number, "
        "which cannot be part of a text",
        "a.yaml:6:5: upstreams[u1].key: ${{ number(secrets.TOKEN) }}: number() takes vars.NAME; a secret "
        "stays text (write ${{ secrets.TOKEN }}, or give the value as vars.TOKEN)",
        "a.yaml:7:5: upstreams[u1].scheme: undefined variable vars.NOPE (set it in [render.vars], the vars "
        "file, or GITSYNC_VAR_NOPE)",
        "a.yaml:8:14: upstreams[u1].labels.${{ number(vars.N) }}: a key is text: number() has no place in it",
    ]


def test_an_unquoted_var_is_typed_by_the_yaml_12_reading():
    text = ("upstreams:\n  - id: u1\n    nodes: {'a.b:80': 1}\n    desc: ${{ vars.D }}\n"
            "    retries: ${{ vars.R }}\n")
    rendered = render(files(a_yaml=text), RenderOptions(vars={"D": "1_000", "R": "0777"}))
    assert rendered.payload["upstreams"][0]["desc"] == "1_000"  # text in YAML 1.2, as ADC and editors read it
    assert rendered.payload["upstreams"][0]["retries"] == 777


def test_empty_maps_and_lists_stay_as_written():
    """APISIX stores ``labels: {}`` as sent (ADC writes it on services and routes); its GET renders every
    empty table as ``{}``, which reconcile takes for ``[]`` too, but the payload keeps what the file says."""
    text = ROUTE + "    labels: {}\n    plugins: {}\n    hosts: []\n" + UPSTREAM + "    labels: {}\n"
    with pytest.raises(ProblemsError):  # hosts: [] is APISIX's to refuse (minItems 1), as written
        render(files(a_yaml=text))
    rendered = render(files(a_yaml=text.replace("    hosts: []\n", "")))
    assert rendered.payload["routes"][0]["labels"] == {} and rendered.payload["routes"][0]["plugins"] == {}
    assert rendered.payload["upstreams"][0]["labels"] == {}


# --- scalars YAML 1.1 reads otherwise ---------------------------------------------------------------------

AMBIGUOUS = ROUTE + "    vars: [[arg_b, '==', 1_000]]\n    labels: {canary: yes}\n" + UPSTREAM


def test_a_scalar_yaml_11_reads_otherwise_is_a_warning_at_its_line_and_renders_as_yaml_12():
    rendered = render(files(b_yaml=AMBIGUOUS, a_yaml=UPSTREAM.replace("u1", "u0")))
    assert rendered.payload["routes"][0]["vars"] == [["arg_b", "==", "1_000"]]
    assert rendered.payload["routes"][0]["labels"] == {"canary": "yes"}
    assert [str(w).split(": unquoted")[0] for w in rendered.warnings] == ["b.yaml:5:26", "b.yaml:6:22"]
    assert 'write 1000 for the number' in rendered.warnings[0].message


def test_ambiguous_scalars_error_refuses_the_commit_with_each_at_its_line():
    assert [p.split(": unquoted")[0] for p in errors(files(a_yaml=AMBIGUOUS), ambiguous_scalars="error")] == [
        "a.yaml:5:26", "a.yaml:6:22"]
    assert render(files(a_yaml=ROUTE + UPSTREAM), RenderOptions(ambiguous_scalars="error")).warnings == ()


@pytest.mark.parametrize("strict", [False, True])
def test_a_render_from_the_last_one_tells_the_same_warnings_as_a_full_render(strict: bool):
    options = RenderOptions(ambiguous_scalars="error" if strict else "warn")
    routes = {f"r{n}_yaml": ROUTE.replace("r1", f"r{n}").replace("/a", f"/{n}") for n in range(4)}
    first = files(u_yaml=UPSTREAM, **routes)
    first["r0.yaml"] += b"    labels: {a: on}\n"
    cache = ParseCache()
    if strict:
        with pytest.raises(ProblemsError):
            render(first, options, memo=cache)
        first["r0.yaml"] = first["r0.yaml"].replace(b"on}", b"'on'}")
    render(first, options, memo=cache)
    r2 = first["r2.yaml"]
    for change in (b"    labels: {a: yes}\n", b"    labels: {a: 'yes'}\n", b"    desc: x\n"):
        second = dict(first, **{"r2.yaml": r2 + change})
        try:
            full = render(second, options).warnings
        except ProblemsError as exc:
            assert strict
            with pytest.raises(ProblemsError) as caught:
                render(second, options, memo=cache)
            assert caught.value.problems == exc.problems
            continue
        assert render(second, options, memo=cache).warnings == full
        first = second


def test_a_composed_payload_names_each_warning_by_its_source():
    from gitsync.ownership import Claim, Ownership
    from gitsync.render.compose import Part, compose

    one = render(files(a_yaml=AMBIGUOUS))
    composed = compose([Part("team", "c0ffee", one, Ownership((Claim(("routes", "upstreams")),)))])
    assert [str(w).split(": unquoted")[0] for w in composed.warnings] == ["team:a.yaml:5:26",
                                                                          "team:a.yaml:6:22"]


# --- layering --------------------------------------------------------------------------------------------


def test_layering_replaces_whole_items_in_place_and_appends_new_ones():
    base = ("upstreams:\n  - id: web\n    nodes: {'10.0.0.1:80': 1}\n    retries: 2\n"
            "  - id: api\n    nodes: {'10.0.0.2:80': 1}\n")
    prod = ("upstreams:\n  - id: web\n    nodes: {'10.8.0.1:80': 1}\n"
            "  - id: extra\n    nodes: {'10.8.0.9:80': 1}\n")
    given = files(base__u_yaml=base, envs__prod__u_yaml=prod, envs__dev__u_yaml=prod)
    rendered = render(given, RenderOptions(paths=("base", "envs/prod")))
    assert rendered.payload["upstreams"] == [
        {"id": "web", "nodes": {"10.8.0.1:80": 1}},  # whole: no `retries` left from base
        {"id": "api", "nodes": {"10.0.0.2:80": 1}},
        {"id": "extra", "nodes": {"10.8.0.9:80": 1}},
    ]
    assert str(rendered.source_map.location("upstreams", 0)) == "envs/prod/u.yaml:2:5"
    assert str(rendered.source_map.location("upstreams", 1)) == "base/u.yaml:5:5"
    single = render(given, RenderOptions(paths=("base/u.yaml", "envs/prod/u.yaml")))
    assert single.payload == rendered.payload  # a configured path may also name one file
    # "." plus a nested overlay: the overlay's files belong to the overlay only (envs/dev stays in ".").
    with pytest.raises(ProblemsError) as caught:
        render(given, RenderOptions(paths=(".", "envs/prod")))
    assert [str(p) for p in caught.value.problems] == [
        "envs/dev/u.yaml:2:5: upstreams[web]: duplicate id 'web' in upstreams: also at base/u.yaml:2:5"]


def test_payload_order_and_source_map_lookups():
    given = files(b_yaml=ROUTE, a_yaml=UPSTREAM + "routes:\n  - {id: r0, uri: /z, upstream_id: u1}\n")
    rendered = render(given)
    assert list(rendered.payload) == ["routes", "upstreams"]
    assert [r["id"] for r in rendered.payload["routes"]] == ["r0", "r1"]  # path order: a.yaml first
    source_map = rendered.source_map
    assert source_map.index_of("routes", "r1") == 1
    assert source_map.index_of("routes", "nope") is None
    assert source_map.location("routes", 5) is None
    problem = source_map.problem("routes", 1, "invalid routes at index 1", field=("upstream_id",))
    assert str(problem) == "b.yaml:4:5: routes[r1].upstream_id: invalid routes at index 1"
    assert str(source_map.problem("routes", None, "no index")) == "routes: no index"


# --- caching ---------------------------------------------------------------------------------------------


def test_one_changed_file_parses_one_file():
    given = {f"routes/r{i}.yaml": f"routes:\n  - {{id: r{i}, uri: /{i}, upstream_id: u1}}\n".encode()
             for i in range(20)}
    given["u.yaml"] = UPSTREAM.encode()
    cache = ParseCache()
    first = render(given, memo=cache)
    assert cache.parses == 21
    given["routes/r7.yaml"] = b"routes:\n  - {id: r7, uri: /seven, upstream_id: u1}\n"
    second = render(given, memo=cache)
    assert cache.parses == 22
    seven = second.source_map.index_of("routes", "r7")
    assert second.payload["routes"][seven]["uri"] == "/seven"
    assert first.payload["routes"][seven]["uri"] == "/7"  # the changed file's earlier item is its own
    # An unchanged file's items are the same objects render after render (read-only for every stage).
    third = render(given, memo=cache)
    assert third.payload["routes"][0] is second.payload["routes"][0] is first.payload["routes"][0]
    assert cache.parses == 22


# --- masking, options, directories ----------------------------------------------------------------------


def test_mask_secrets_masks_fields_and_values_but_not_references():
    payload = {
        "secrets": [{"id": "vault/main", "uri": "http://v", "token": "root-token"}],
        "ssls": [{"id": "s", "cert": "CERT", "key": "KEY", "keys": ["K2"]}],
        "consumers": [{"username": "a", "plugins": {"key-auth": {"key": "k-1"},
                                                    "limit-count": {"key": "remote_addr"}}},
                      {"username": "b", "plugins": {"basic-auth": {"username": "b", "password": "$env://PW"}}}],
        "routes": [{"id": "r", "plugins": {"proxy-rewrite": {"headers": {"set": {"A": "Bearer s3cret-v"}}}}}],
    }
    masked = mask_secrets(payload, {"s3cret-v"})
    assert masked["secrets"][0]["token"] == "***"
    assert masked["ssls"][0] == {"id": "s", "cert": "CERT", "key": "***", "keys": ["***"]}
    assert masked["consumers"][0]["plugins"] == {"key-auth": {"key": "***"},
                                                 "limit-count": {"key": "remote_addr"}}
    assert masked["consumers"][1]["plugins"]["basic-auth"] == {"username": "b", "password": "$env://PW"}
    assert masked["routes"][0]["plugins"]["proxy-rewrite"]["headers"]["set"]["A"] == "Bearer ***"
    assert payload["secrets"][0]["token"] == "root-token"  # a copy


def test_mask_secrets_covers_every_kind_of_credential():
    """Manager tokens and keys, SSL keys, auth plugin keys and passwords, headers, URL passwords."""
    payload = {
        "secrets": [{"id": "aws/a", "access_key_id": "S3CR-AKIA-1", "secret_access_key": "S3CR-sak-1",
                     "session_token": "S3CR-st-1", "region": "eu-west-1"},
                    {"id": "gcp/a", "auth_config": {"client_email": "e@x", "private_key": "S3CR-pk-1",
                                                    "project_id": "p"}}],
        "upstreams": [{"id": "u", "tls": {"client_cert": "CERT", "client_key": "S3CR-ck-1"}}],
        "consumers": [{"username": "a", "plugins": {
            "jwt-auth": {"key": "S3CR-jk-1", "secret": "S3CR-js-1"},
            "hmac-auth": {"key_id": "kid", "secret_key": "S3CR-hs-1"}}}],
        "routes": [{"id": "r", "plugins": {
            "proxy-rewrite": {"headers": {"set": {"Authorization": "Bearer S3CR-b-1",
                                                  "X-Api-Key": "S3CR-xk-1", "X-Auth-Token": "S3CR-xt-1",
                                                  "X-Trace": "keep"}}},
            "http-logger": {"uri": "https://user:S3CR-up-1@logs.example/in?x=1", "auth_header": "S3CR-ah-1"},
            "csrf": {"key": "S3CR-csrf-1"}, "limit-count": {"key": "remote_addr"},
            "aws-lambda": {"authorization": {"iam": {"accesskey": "S3CR-ak-2", "secretkey": "S3CR-sk-2"}}},
            "redirect": {"uri": "mailto:ops@example.org"}}}],
    }
    masked = json.dumps(mask_secrets(payload, []))
    assert "S3CR" not in masked
    for value in ("eu-west-1", "e@x", "CERT", "kid", "keep", "remote_addr", "https://user:***@logs.example/in",
                  "mailto:ops@example.org"):
        assert value in masked


def test_read_directory_skips_dot_files_git_and_symlinks(tmp_path: Path):
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "config.yaml").write_text("x: 1\n")
    (tmp_path / ".hidden").mkdir()
    (tmp_path / ".hidden" / "a.yaml").write_text("x: 1\n")
    (tmp_path / "routes").mkdir()
    (tmp_path / "routes" / "a.yaml").write_text(ROUTE)
    (tmp_path / "routes" / ".draft.yaml").write_text("x: 1\n")
    (tmp_path / "b.json").write_text("{}")
    (tmp_path / "notes.txt").write_text("x")
    os.symlink("/etc/hostname", tmp_path / "link.yaml")
    assert sorted(read_directory(tmp_path)) == ["b.json", "routes/a.yaml"]


def test_sample_repo_renders_with_its_one_secret():
    rendered = render(read_directory(SAMPLE), RenderOptions(secret_lookup={"VAULT_TOKEN": "dev-root"}.get))
    assert tuple(rendered.payload) == KINDS  # every kind, in order
    assert rendered.payload["secrets"][0]["token"] == "dev-root"
    layered = render(read_directory(SAMPLE), RenderOptions(paths=("base", "envs/prod"),
                                                           secret_lookup={"VAULT_TOKEN": "dev-root"}.get))
    assert layered.payload == rendered.payload
    assert rendered.payload["ssls"][0]["cert"] == CERT and rendered.payload["ssls"][0]["key"] == KEY


def test_an_existing_file_driven_apisix_yaml_works_unchanged():
    text = ("routes:\n  - id: 1\n    uri: /hello\n    upstream_id: 1\nupstreams:\n  - id: 1\n    nodes:\n"
            "      \"127.0.0.1:1980\": 1\n    type: roundrobin\n#END\n")
    rendered = render(files(apisix_yaml=text))
    assert rendered.payload == {
        "routes": [{"id": 1, "uri": "/hello", "upstream_id": 1}],
        "upstreams": [{"id": 1, "nodes": {"127.0.0.1:1980": 1}, "type": "roundrobin"}],
    }
    assert errors(files(apisix_yaml=text.replace("#END", "plugins:\n  - name: key-auth\n#END"))) == [
        "apisix.yaml:10:1: 'plugins' (file-driven APISIX's plugin list) is not managed by gitsync: it has no "
        "effect in API-driven mode; remove it"]


def test_secret_values_never_reach_a_problem():
    text = "consumers:\n  - username: ${{ secrets.NAME }}\n"
    problems = errors(files(a_yaml=text), secret_lookup={"NAME": "not a valid name"}.get)
    assert problems == ['a.yaml:2:5: consumers[***].username: invalid configuration: property "username" '
                        'validation failed: failed to match pattern "^[a-zA-Z0-9_\\\\-]+$" with "***"']


def test_sops_seam_decrypts_registers_and_reports():
    encrypted = ("secrets:\n  - id: vault/main\n    uri: http://127.0.0.1:8200\n    prefix: kv\n"
                 "    token: ENC[AES256_GCM,data:abc,iv:x,tag:y,type:str]\nsops:\n  version: 3.9.0\n")

    def decrypt(path: str, doc: dict) -> dict:
        assert path == "s.sops.yaml"
        doc["secrets"][0]["token"] = "decrypted-token"
        return doc

    rendered = render({"s.sops.yaml": encrypted.encode()}, RenderOptions(decrypt=decrypt))
    assert rendered.payload["secrets"][0]["token"] == "decrypted-token"
    assert "sops" not in rendered.payload
    assert rendered.secret_values == frozenset({"decrypted-token"})
    assert gslog.redact("decrypted-token") == "***"
    assert errors({"s.sops.yaml": encrypted.encode()}, stage="render") == [
        "s.sops.yaml:1:1: this file is encrypted with SOPS but no age identity is configured "
        "(--age-key-file, GITSYNC_AGE_KEY, SOPS_AGE_KEY_FILE)"]

    def failing(path: str, doc: dict) -> dict:
        raise ValueError("MAC mismatch for decrypted-token")

    assert errors({"s.sops.yaml": encrypted.encode()}, decrypt=failing) == [
        "s.sops.yaml:1:1: cannot decrypt: MAC mismatch for ***"]


# --- hostile and careless input --------------------------------------------------------------------------


def test_every_reference_a_plugin_or_kind_holds_is_checked():
    """Beyond the top-level ids: traffic-split's upstreams, grpc-transcode's proto, a stream route's
    superior, consumer-restriction's names, an upstream's client certificate (inline ones too)."""
    text = """routes:
  - id: r1
    uri: /a
    upstream_id: u1
    plugins:
      traffic-split:
        rules:
          - weighted_upstreams:
              - {upstream_id: u1, weight: 1}
              - {upstream_id: u9, weight: 1}
              - {upstream: {nodes: {'10.0.0.2:80': 1}, tls: {client_cert_id: nossl}}, weight: 1}
      grpc-transcode: {proto_id: p9, service: a.B, method: C}
      consumer-restriction: {whitelist: [jack, nobody]}
  - id: r2
    uri: /b
    upstream: {nodes: {'10.0.0.3:80': 1}, tls: {client_cert_id: s1}}
    plugins:
      consumer-restriction: {type: service_id, blacklist: [s9]}
global_rules:
  - id: g1
    plugins:
      consumer-restriction: {allowed_by_methods: [{user: nobody, methods: [GET]}]}
stream_routes:
  - {id: t1, upstream_id: u1, protocol: {name: redis, superior_id: t9}}
upstreams:
  - {id: u1, nodes: {'10.0.0.1:80': 1}}
  - {id: u2, nodes: {'10.0.0.1:80': 1}, tls: {client_cert_id: nossl}}
consumers:
  - {username: jack}
ssls:
  - {id: s1, type: client, cert: "$env://CERT", key: "$env://KEY"}
""".replace("CERT", "C" * 130).replace("KEY", "K" * 70)  # the lengths APISIX requires of a reference
    standalone = ("client_cert_id 's1': a standalone gateway cannot use it (APISIX looks the ssl up in "
                  "etcd, which standalone mode has not, and refuses the config); give the certificate inline "
                  "as tls.client_cert and tls.client_key")
    assert errors(files(a_yaml=text)) == [
        "a.yaml:10:18: routes[r1].plugins.traffic-split.rules[0].weighted_upstreams[1].upstream_id: "
        "upstream_id 'u9' names no item of upstreams",
        "a.yaml:11:62: routes[r1].plugins.traffic-split.rules[0].weighted_upstreams[2].upstream.tls."
        "client_cert_id: client_cert_id 'nossl' names no item of ssls",
        "a.yaml:12:24: routes[r1].plugins.grpc-transcode.proto_id: proto_id 'p9' names no item of protos",
        "a.yaml:13:48: routes[r1].plugins.consumer-restriction.whitelist[1]: whitelist entry 'nobody' names "
        "no item of consumers",
        f"a.yaml:16:49: routes[r2].upstream.tls.client_cert_id: {standalone}",
        "a.yaml:18:60: routes[r2].plugins.consumer-restriction.blacklist[0]: blacklist entry 's9' names no "
        "item of services",
        "a.yaml:22:52: global_rules[g1].plugins.consumer-restriction.allowed_by_methods[0].user: user "
        "'nobody' names no item of consumers",
        "a.yaml:24:55: stream_routes[t1].protocol.superior_id: superior_id 't9' names no item of "
        "stream_routes",
        "a.yaml:27:47: upstreams[u2].tls.client_cert_id: client_cert_id 'nossl' names no item of ssls",
    ]


def test_a_file_that_fails_to_load_hides_only_the_references_it_may_satisfy():
    """A YAML error in one file: every other file's references and secrets are still checked; a
    reference to an id the broken file's text holds is not reported (it may declare it)."""
    broken = "upstreams:\n  - id: u1\n    nodes: {'10.0.0.1:80': 1\n"  # unclosed flow mapping
    other = """routes:
  - {id: r1, uri: /a, upstream_id: u1}
  - {id: r2, uri: /b, upstream_id: u9}
  - id: r3
    uri: /c
    upstream_id: u1
    plugins: {proxy-rewrite: {headers: {set: {A: "$secret://vault/nope/a/b", B: "${{ secrets.NONE }}"}}}}
"""
    problems = errors(files(broken_yaml=broken, routes_yaml=other))
    assert problems[0].startswith("broken.yaml:4:1: YAML syntax error")
    assert problems[1:] == [
        "routes.yaml:3:23: routes[r2].upstream_id: upstream_id 'u9' names no item of upstreams",
        "routes.yaml:7:47: routes[r3].plugins.proxy-rewrite.headers.set.A: '$secret://vault/nope/a/b' names "
        "no item of secrets (declare one with id vault/nope)",
        "routes.yaml:7:78: routes[r3].plugins.proxy-rewrite.headers.set.B: undefined secret secrets.NONE (no "
        "file NONE in the secrets directory, no GITSYNC_SECRET_NONE)",
    ]
    # A file never read (too large) may declare anything: no reference is reported.
    too_large = errors(files(broken_yaml=UPSTREAM + "#" * 200, routes_yaml=other), max_file_size=150)
    assert [p for p in too_large if "names no item" in p] == []


def test_a_huge_integer_is_refused_at_its_own_place_in_plain_words():
    text = "routes:\n  - id: r1\n    uri: /a\n    priority: " + "1" * 5000 + "\n    upstream_id: u1\n"
    assert errors(files(a_yaml=text + UPSTREAM)) == [
        "a.yaml:4:15: the number '111111111111111111111111'… (5000 characters) is too large: APISIX reads "
        "numbers as 64-bit floats, which end near 1.8e308; quote it if it is text"]
    assert "0xffffffffffffffffffffff" in errors(files(a_yaml="a: 0x" + "f" * 5000 + "\n"))[0]
    assert render(files(a_yaml=ROUTE.replace("/a", "/a\n    priority: " + "9" * 300) + UPSTREAM))


def test_a_yaml_1_1_directive_is_refused_and_1_2_accepted():
    assert errors(files(a_yaml="%YAML 1.1\n---\n" + ROUTE + UPSTREAM)) == [
        "a.yaml:1:1: %YAML 1.1: gitsync reads YAML 1.2 only (yes/no/on/off are text, 0777 is decimal); "
        "remove the directive, and quote or rewrite the values YAML 1.1 would read otherwise"]
    assert render(files(a_yaml="%YAML 1.2\n---\n" + ROUTE + UPSTREAM)).payload["routes"][0]["id"] == "r1"


def test_a_boolean_id_is_shown_as_the_file_writes_it():
    assert errors(files(a_yaml="routes:\n  - {id: true, uri: /a, upstream_id: u1}\n" + UPSTREAM)) == [
        "a.yaml:2:6: routes[true].id: the id must be a string, not a boolean"]


def test_a_secret_shorter_than_4_characters_is_refused_where_it_is_used():
    text = 'routes:\n  - id: r1\n    uri: /a\n    desc: "${{ secrets.PIN }}"\n    upstream_id: u1\n'
    text += UPSTREAM
    assert errors(files(a_yaml=text), secret_lookup={"PIN": "x#y"}.get) == [
        "a.yaml:4:5: routes[r1].desc: secrets.PIN is 3 character(s) long: a secret needs at least 4 (a "
        "shorter one could not be kept out of logs without masking ordinary words)"]
    assert render(files(a_yaml=text), RenderOptions(secret_lookup={"PIN": "x#y!"}.get))


def test_a_short_sops_value_is_masked_where_a_problem_quotes_it():
    """sops may decrypt a short string (it encrypts every value by default): a problem about its
    field does not quote it, wherever the message puts it."""
    sealed = ("routes:\n  - id: r1\n    uri: /a\n    host: ENC[x]\n    remote_addr: ENC[x]\n"
              "    upstream_id: u1\nsops: {version: 3.9.0}\n")

    def decrypt(_file: str, document: dict) -> dict:
        route = document["routes"][0]
        route["host"] = route["remote_addr"] = "x#y"
        return document

    problems = errors(files(a_yaml=sealed + UPSTREAM), decrypt=decrypt)
    assert len(problems) == 2 and not any("x#y" in p for p in problems)
    assert problems[0].endswith('with "***"')


def test_read_directory_reads_any_case_skips_links_and_fifos_with_a_warning(tmp_path: Path):
    (tmp_path / "A.YAML").write_text(ROUTE)
    (tmp_path / "b.Json").write_text("{}")
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "u.yml").write_text(UPSTREAM)
    os.symlink("conf", tmp_path / "linked")
    os.symlink("A.YAML", tmp_path / "copy.yaml")
    os.symlink("A.YAML", tmp_path / "README.md")  # not config: silent
    os.mkfifo(tmp_path / "pipe.yaml")
    os.mkfifo(tmp_path / "pipe")  # not config: silent
    (tmp_path / "big.yaml").write_text("#" * 200)
    log = io.StringIO()
    gslog.setup(stream=log)
    try:
        read = read_directory(tmp_path, max_file_size=100)
    finally:
        gslog.setup()
    assert sorted(read) == ["A.YAML", "b.Json", "conf/u.yml"] and read.oversized == {"big.yaml": 200}
    then = "nothing in it is applied (its items are pruned from the gateways)"
    assert [line.split("gitsync.configfiles ")[1] for line in log.getvalue().splitlines()] == [
        f"skipped linked: a symbolic link to a directory (links are not followed); {then}",
        f"skipped copy.yaml: a symbolic link (links are not followed); {then}",
        f"skipped pipe.yaml: not a regular file (a FIFO, socket or device); {then}",
    ]
