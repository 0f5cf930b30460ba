"""``gitsync import adc`` and ``gitsync import apisix-yaml``, as real processes.

The takeover of a gateway each ADC release wrote (recorded ``adc sync`` runs) is in
tests/adopt/test_adc_releases.py; here: ADC's documented examples, what cannot be mapped,
a file-driven ``apisix.yaml``, and each place where ADC's reading of a file and gitsync's could
differ.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from gitsync.adopt.adc_releases import behaviour_for
from gitsync.adopt.import_adc import convert
from testkit.processes import run_gitsync


def sha1(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()


# ADC's documented examples: the quick start of ADC's documentation (a service with an upstream and a
# route) and the consumer of ADC's standalone end-to-end test (consumer.e2e-spec.ts: two key-auth
# credentials named after their keys).
ADC_QUICK_START = """\
services:
  - name: my-backend
    upstream:
      type: roundrobin
      nodes:
        - host: backend.example.com
          port: 8080
          weight: 1
    routes:
      - name: api-route
        uris:
          - /api/*
        methods:
          - GET
          - POST
"""
ADC_E2E_CONSUMER = """\
consumers:
  - username: consumer1
    credentials:
      - name: consumer1-key
        type: key-auth
        config: {key: consumer1-key}
      - name: consumer1-key2
        type: key-auth
        config: {key: consumer1-key2}
"""


@pytest.mark.slow
def test_adcs_documented_examples_import_with_adcs_ids_and_validate(tmp_path: Path) -> None:
    (tmp_path / "quick.yaml").write_text(ADC_QUICK_START)
    (tmp_path / "consumer.yaml").write_text(ADC_E2E_CONSUMER)
    out = tmp_path / "repo"
    result = run_gitsync("import", "adc", str(tmp_path / "quick.yaml"), str(tmp_path / "consumer.yaml"),
                         "--out", str(out), "--layout", "per-service", "--secrets-out", str(tmp_path / "sec"))
    assert result.returncode == 0, result.stdout + result.stderr
    service = (out / "services" / f"{sha1('my-backend')}.yaml").read_text()
    assert f"id: {sha1('my-backend.api-route')}" in service and "service_id: " + sha1("my-backend") in service
    consumers = (out / "consumers.yaml").read_text()
    assert f"consumer1/credentials/{sha1('consumer1.consumer1-key2')}" in consumers
    valid = run_gitsync("validate", "--dir", str(out), "--secrets-dir", str(tmp_path / "sec"))
    assert valid.returncode == 0, valid.stderr
    assert "valid: 1 routes, 1 services, 1 upstreams, 3 consumers" in valid.stdout


def test_what_cannot_be_mapped_is_reported_with_its_line_and_nothing_is_written(tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text("""\
services:
  - name: no-upstream
    routes:
      - name: r
        uris: [/r]
  - name: named
    upstream: {nodes: [{host: a, port: 1, weight: 1}]}
    upstreams:
      - name: other
    path_prefix: /v1
    retries: 3
consumer_groups:
  - name: gold
routes:
  - name: stray
unknown: {}
""")
    out = tmp_path / "repo"
    result = run_gitsync("import", "adc", str(tmp_path / "bad.yaml"), "--out", str(out))
    assert result.returncode == 1
    bad = str(tmp_path / "bad.yaml")
    for line, text in ((2, "has no upstream: adc sync stops on it"), (9, "ADC's lint refuses it"),
                       (11, "ADC has no field 'retries'"), (12, "consumer_groups are not written"),
                       (14, "top-level routes are not mapped"), (16, "unknown ADC key 'unknown'")):
        assert f"{bad}:{line}:" in result.stderr and text in result.stderr, (line, text, result.stderr)
    assert not out.exists()


@pytest.mark.slow
def test_a_file_driven_apisix_yaml_splits_into_the_per_kind_layout(tmp_path: Path) -> None:
    (tmp_path / "apisix.yaml").write_text("""\
routes:
  - id: r1
    uri: /hello
    upstream_id: u1
    plugins:
      proxy-rewrite: {headers: {set: {X-Env: "${{HELLO_ENV:=dev}}"}}}
upstreams:
  - id: u1
    nodes: {"127.0.0.1:1980": 1}
    type: roundrobin
plugins:
  - name: proxy-rewrite
#END
""")
    out = tmp_path / "repo"
    result = run_gitsync("import", "apisix-yaml", str(tmp_path / "apisix.yaml"), "--out", str(out))
    assert result.returncode == 0, result.stdout + result.stderr
    assert sorted(p.name for p in out.iterdir()) == ["routes.yaml", "upstreams.yaml"]
    assert "apisix.yaml:11:1: 'plugins' is file-driven APISIX's plugin list" in result.stdout
    assert "GITSYNC_VAR_HELLO_ENV" in result.stdout and "'dev'" in result.stdout
    rendered = run_gitsync("render", "--dir", str(out), env={"GITSYNC_VAR_HELLO_ENV": "dev"})
    assert rendered.returncode == 0, rendered.stderr
    assert json.loads(rendered.stdout)["routes"][0]["plugins"]["proxy-rewrite"]["headers"]["set"] == \
        {"X-Env": "dev"}


# ---------------------------------------------------------------------------------------------------------
# Where ADC's reading and gitsync's could differ (docs/adoption.md, "ADC's reading and gitsync's")

SERVICE = "services:\n  - name: s\n    upstream: {nodes: [{host: 127.0.0.1, port: 80, weight: 1}]}\n"


def test_empty_labels_stay_on_every_item_adc_writes_them_on() -> None:
    """ADC's standalone backend writes a resource's labels through ``fromADCLabels``
    (libs/backend-apisix-standalone/src/operator.ts, v0.28.0), which maps ``{}`` to ``{}`` and absent
    labels to none: services, routes, the service's own upstream, consumers and credentials alike."""
    text = """services:
  - name: s
    labels: {}
    upstream: {labels: {}, nodes: [{host: 127.0.0.1, port: 80, weight: 1}]}
    routes:
      - {name: r, labels: {}, uris: [/r]}
      - {name: q, uris: [/q]}
consumers:
  - username: carol
    labels: {}
    credentials: [{name: c, labels: {}, type: key-auth, config: {key: carol-key-123}}]
"""
    payload = convert({"a.yaml": text.encode()}).payload
    assert payload["services"][0]["labels"] == {}
    assert payload["upstreams"][0]["labels"] == {}
    assert [route.get("labels") for route in payload["routes"]] == [{}, None]
    assert [item["labels"] for item in payload["consumers"]] == [{}, {}]
    stamped = convert({"a.yaml": text.encode()}, {"team": "shop"}).payload
    assert stamped["services"][0]["labels"] == {"team": "shop"}


def test_plain_scalars_read_as_adc_reads_them() -> None:
    """js-yaml 5.2.0, ADC 0.28.0's parser (apps/cli/src/tasks/load_local.ts), reads plain scalars by the
    YAML 1.2 core schema: 1_000, 0b101, 0x_1F and 1_0.5 are text, 0777 is 777."""
    text = SERVICE + """    routes:
      - name: r
        uris: [/r]
        vars: [[arg_b, "==", 1_000], [arg_c, "==", 0777]]
        plugins: {proxy-rewrite: {headers: {set: {X-A: 0b101, X-B: 0x_1F, X-C: 1_0.5}}}}
"""
    route = convert({"a.yaml": text.encode()}).payload["routes"][0]
    assert route["vars"] == [["arg_b", "==", "1_000"], ["arg_c", "==", 777]]
    assert route["plugins"]["proxy-rewrite"]["headers"]["set"] == {"X-A": "0b101", "X-B": "0x_1F",
                                                                   "X-C": "1_0.5"}


NUMBERS_AS_TEXT = """services:
  - name: s
    upstream:
      nodes: [{host: 127.0.0.1, port: "18390", weight: 1}, {host: 127.0.0.2, port: "${PORT}", weight: 1}]
      timeout: {connect: 3, send: "5", read: 5}
"""


def test_numbers_written_as_text_are_read_as_adcs_lint_reads_them_with_a_note_each() -> None:
    """ADC's lint makes a number of text in a number field (z.coerce.number in libs/sdk/src/core/schema.ts,
    v0.28.0), after putting its environment variables in: such a field is that number, or the typed
    reference ${{ number(vars.NAME) }}."""
    converted = convert({"a.yaml": NUMBERS_AS_TEXT.encode()})
    assert converted.problems == []
    nodes = converted.payload["upstreams"][0]["nodes"]
    assert [node["port"] for node in nodes] == [18390, "${{ number(vars.PORT) }}"]
    assert converted.payload["upstreams"][0]["timeout"] == {"connect": 3, "send": 5, "read": 5}
    assert converted.variables == {"PORT"} and converted.secrets == set()
    assert [(n.location.line, n.message.split(":")[0]) for n in converted.notes if n.location] == [
        (4, "services[0].upstream.nodes[0].port"), (4, "services[0].upstream.nodes[1].port"),
        (5, "services[0].upstream.timeout.send")]


def test_with_no_lint_numbers_written_as_text_are_refused_as_no_gateway_can_hold_them() -> None:
    """``adc sync --no-lint`` writes the text as it is, and APISIX refuses text where it wants a number."""
    unlinted = behaviour_for("0.28").with_(lint=False)
    converted = convert({"a.yaml": NUMBERS_AS_TEXT.encode()}, behaviour=unlinted)
    assert [p.message.split(":")[0] for p in converted.problems] == [
        "services[0].upstream.nodes[0].port", "services[0].upstream.nodes[1].port",
        "services[0].upstream.timeout.send"]
    assert all("with --no-lint ADC writes the text" in p.message for p in converted.problems)


@pytest.mark.parametrize("text, line, message", [
    # ADC 0.28.0 exits 0 and writes neither the group nor its consumer: its standalone backend has no
    # consumer groups (libs/backend-apisix-standalone/src/typing.ts has none).
    (SERVICE + "consumer_groups:\n  - name: gold\n    consumers: [{username: dave}]\n", 4,
     "consumer_groups are not written by ADC's standalone backend"),
    # ADC keys a file's services by name and keeps the later of two without a word.
    (SERVICE + "  - name: s\n    upstream: {nodes: [{host: 127.0.0.2, port: 80, weight: 1}]}\n", 4,
     "duplicate services"),
    # js-yaml's CORE_SCHEMA has no merge key: ADC stores "<<" as a literal key.
    (SERVICE + "plugin_metadata:\n  http-logger:\n    log_format:\n      <<: {client: $remote_addr}\n", 7,
     "merge keys (<<) are not supported"),
    # js-yaml reads .inf and .nan as numbers, which JSON.stringify writes as null.
    (SERVICE + "plugin_metadata:\n  http-logger:\n    log_format: {n: .nan}\n", 6,
     "is not a number JSON can carry"),
])
def test_what_adc_gets_wrong_is_refused_at_its_line(text: str, line: int, message: str) -> None:
    problems = convert({"a.yaml": text.encode()}).problems
    assert any(message in p.message and p.location is not None and p.location.line == line
               for p in problems), problems


@pytest.mark.slow
def test_a_number_field_with_an_adc_variable_renders_the_number_the_var_holds(tmp_path: Path) -> None:
    (tmp_path / "adc.yaml").write_text(NUMBERS_AS_TEXT)
    out = tmp_path / "repo"
    result = run_gitsync("import", "adc", str(tmp_path / "adc.yaml"), "--out", str(out))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "set GITSYNC_VAR_<NAME> (or [render.vars]) for PORT" in result.stdout
    assert "port: ${{ number(vars.PORT) }}" in (out / "upstreams.yaml").read_text()
    rendered = run_gitsync("render", "--dir", str(out), env={"GITSYNC_VAR_PORT": "18391"})
    assert rendered.returncode == 0, rendered.stderr
    assert [n["port"] for n in json.loads(rendered.stdout)["upstreams"][0]["nodes"]] == [18390, 18391]
    refused = run_gitsync("render", "--dir", str(out), env={"GITSYNC_VAR_PORT": "a port"})
    assert refused.returncode == 1
    assert "upstreams.yaml:" in refused.stderr and "vars.PORT is 'a port', not a number" in refused.stderr


def test_an_apisix_yaml_scalar_lyaml_reads_the_yaml_11_way_is_a_note_at_its_line() -> None:
    """APISIX reads a file-driven apisix.yaml with lyaml (apisix/core/config_yaml.lua), whose implicit types
    are YAML 1.1's: its plain 1_000 is 1000 there, text to gitsync."""
    from gitsync.adopt.import_apisix_yaml import split

    text = b"routes:\n  - id: r1\n    uri: /a\n    vars: [[arg_b, '==', 1_000]]\n"
    done = split("apisix.yaml", text)
    assert done.payload["routes"][0]["vars"] == [["arg_b", "==", "1_000"]]
    assert any(note.startswith("apisix.yaml:4:26: unquoted 1_000") and "lyaml" in note for note in done.notes)
