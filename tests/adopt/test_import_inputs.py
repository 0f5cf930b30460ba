"""``gitsync import`` from careless or hostile input: wrong types, sizes, values that do not map one to
one, and a result that does not validate. Every case is all or nothing: exit 0 with a repo that
validates, or exit 1 with each problem at ``file:line:`` and not one file written.

The named cases run ``gitsync import`` as a real process; the property tests run the same command
in this process (`gitsync.cli.parser.main`), with a few examples again as processes.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gitsync.cli.parser import main
from gitsync.render.load import parse
from testkit.pem import pem_pair
from testkit.processes import run_gitsync
from testkit.profiles import examples

VALID_ADC = """\
services:
  - name: orders
    description: the orders API
    labels: {team: shop, tiers: [gold, silver]}
    upstream:
      nodes:
        - {host: 10.0.1.10, port: 8080, weight: 100}
      timeout: {connect: 3, send: 5, read: 5}
      checks:
        active: {type: http, healthy: {interval: 2}}
    plugins:
      limit-count: {count: 100, time_window: 60, key: remote_addr, key_type: var}
    routes:
      - name: list
        uris: [/orders]
        methods: [GET]
        plugins:
          key-auth: {}
  - name: mysql
    upstream:
      scheme: tcp
      nodes: [{host: 10.0.3.10, port: 3306, weight: 1}]
    stream_routes:
      - name: mysql
        server_port: 3306
consumers:
  - username: alice
    credentials:
      - name: primary
        type: key-auth
        config: {key: alice-primary-key}
global_rules:
  prometheus: {prefer_name: true}
plugin_metadata:
  http-logger:
    log_format: {host: $host}
"""

VALID_APISIX_YAML = """\
upstreams:
  - id: u1
    nodes:
      "10.0.0.1:80": 1
    type: roundrobin
routes:
  - id: r1
    uri: /a
    upstream_id: u1
    plugins:
      proxy-rewrite: {uri: /b}
services:
  - id: s1
    upstream_id: u1
#END
"""


def files_under(directory: Path) -> list[Path]:
    return sorted(p for p in directory.rglob("*")) if directory.exists() else []


def secrets_of(out: Path) -> Path:
    """Where an import into `out` puts the literal credentials it takes out (`--secrets-out`)."""
    return out.with_name("secrets")


def run_import(tmp_path: Path, fmt: str, text: str | bytes, *extra: str):
    source = tmp_path / ("input.yaml" if fmt == "adc" else "apisix.yaml")
    source.write_bytes(text.encode() if isinstance(text, str) else text)
    out = tmp_path / "repo"
    return run_gitsync("import", fmt, str(source), "--out", str(out), "--secrets-out", str(secrets_of(out)),
                       *extra), out


def assert_refused(result: Any, out: Path, *expected: str) -> None:
    """Exit 1, every expected text on stderr, no traceback, and nothing written (no secret either)."""
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    for text in expected:
        assert text in result.stderr, result.stderr
    assert "nothing written" in result.stderr
    assert files_under(out) == [] and files_under(secrets_of(out)) == []


# ---------------------------------------------------------------------------------------------------------
# Wrong types


WRONG_TYPES = [
    ('ssls: [{snis: [a.example.com], certificates: "abc"}]', "input.yaml:1:",
     "ssls[0].certificates: expected a list, got text"),
    ("ssls: [{snis: [a.example.com], certificates: [1, 2]}]", "input.yaml:1:",
     "ssls[0].certificates[0]: expected a mapping, got an integer"),
    ("consumers:\n  - username: a\n    credentials: 5\n", "input.yaml:3:",
     "consumers[0].credentials: expected a list, got an integer"),
    ("services:\n  - name: s\n    upstream: {nodes: []}\n    routes: 5\n", "input.yaml:4:",
     "services[0].routes: expected a list, got an integer"),
    ("stream_routes: 5\n", "input.yaml:1:", "stream_routes: expected a list, got an integer"),
    ("services:\n  - name: s\n    upstream: {nodes: []}\n    stream_routes: {a: 1}\n", "input.yaml:4:",
     "services[0].stream_routes: expected a list, got a mapping"),
    ("services:\n  - name: s\n    upstream:\n      nodes: [{host: a, port: '8_0', weight: 1}]\n",
     "input.yaml:4:",
     "services[0].upstream.nodes[0].port: expected an integer, got text '8_0', which JavaScript's Number() "
     "(ADC's lint) does not read as an integer either"),
    ("services:\n  - name: s\n    upstream:\n      nodes: [{host: a, port: 80, weight: '1.5'}]\n",
     "input.yaml:4:", "services[0].upstream.nodes[0].weight: expected an integer, got text '1.5'"),
    ("services:\n  - name: s\n    upstream:\n      nodes: [{host: a, port: 'p${PORT}', weight: 1}]\n",
     "input.yaml:4:", "services[0].upstream.nodes[0].port: 'p${PORT}' puts ${PORT} into a number field with "
                      "other text, which gitsync cannot write"),
    ("services:\n  - name: s\n    labels: {a: 5}\n    upstream: {nodes: []}\n", "input.yaml:3:",
     "services[0].labels.a: expected text or a list, got an integer"),
    ("services:\n  - name: s\n    upstream: {nodes: [], keepalive_pool: 3}\n", "input.yaml:3:",
     "services[0].upstream.keepalive_pool: expected a mapping, got an integer"),
    ("ssls:\n  - snis: a.example.com\n    certificates: []\n", "input.yaml:2:",
     "ssls[0].snis: expected a list, got text"),
    ("global_rules: {prometheus: 5}\n", "input.yaml:1:",
     "global_rules.prometheus: expected a mapping, got an integer"),
    ("plugin_metadata: [1]\n", "input.yaml:1:", "plugin_metadata: expected a mapping, got a list"),
    ("consumers:\n  - username: a\n    credentials: [{name: k, type: key-auth, config: 5}]\n",
     "input.yaml:3:",
     "consumers[0].credentials[0].config: expected a mapping, got an integer"),
    ("services:\n  - name: s\n    hosts: [1]\n    upstream: {nodes: []}\n", "input.yaml:3:",
     "services[0].hosts[0]: expected text, got an integer"),
    ("- a list\n", "input.yaml:1:", "the file: expected a mapping, got a list"),
]


@pytest.mark.slow
@pytest.mark.parametrize(("text", "where", "message"), WRONG_TYPES)
def test_import_adc_wrong_types_are_file_line_errors_and_nothing_is_written(tmp_path: Path, text: str,
                                                                             where: str, message: str,
                                                                             ) -> None:
    result, out = run_import(tmp_path, "adc", text)
    assert_refused(result, out, message)
    line = next(ln for ln in result.stderr.splitlines() if message in ln)
    assert line.startswith(str(tmp_path / where)), line


@pytest.mark.slow
def test_import_writes_nothing_when_the_result_does_not_validate(tmp_path: Path) -> None:
    """Ids APISIX refuses (ADC keeps an `id` as given): reported at the item in the ADC file, with the
    place it would have had in the repo; no file written."""
    result, out = run_import(tmp_path, "adc", "services:\n  - name: s\n    id: 'bad id!'\n"
                                              "    upstream: {nodes: []}\n")
    assert_refused(result, out, "upstreams[bad id!].id: invalid id 'bad id!'", "(imported as upstreams.yaml:")
    assert str(tmp_path / "input.yaml:2:") in result.stderr


# ---------------------------------------------------------------------------------------------------------
# Sizes


@pytest.mark.slow
def test_import_adc_of_dev_zero_is_refused_before_it_is_read(tmp_path: Path) -> None:
    out = tmp_path / "repo"
    result = run_gitsync("import", "adc", "/dev/zero", "--out", str(out), timeout=60)
    assert_refused(result, out, "/dev/zero: larger than max_file_size (8388608 bytes); not read")


@pytest.mark.slow
def test_a_24_mb_adc_file_is_refused_by_size_before_it_is_parsed(tmp_path: Path) -> None:
    route = "      - {name: r%d, uris: [/r%d]}\n"
    body = "services:\n  - name: s\n    upstream: {nodes: []}\n    routes:\n"
    text = body + "".join(route % (i, i) for i in range(600_000))
    assert len(text) > 24_000_000
    result, out = run_import(tmp_path, "adc", text)
    assert_refused(result, out, "input.yaml: larger than max_file_size (8388608 bytes)")


@pytest.mark.slow
def test_max_items_from_the_settings_bounds_an_import(tmp_path: Path) -> None:
    routes = "".join(f"      - {{name: r{i}, uris: [/r{i}]}}\n" for i in range(30))
    text = "services:\n  - name: s\n    upstream: {nodes: []}\n    routes:\n" + routes
    source = tmp_path / "input.yaml"
    source.write_text(text)
    out = tmp_path / "repo"
    result = run_gitsync("import", "adc", str(source), "--out", str(out), env={"GITSYNC_MAX_ITEMS": "20"})
    assert_refused(result, out, "the files make 32 items or more, more than max_items = 20")
    small = run_gitsync("import", "adc", str(source), "--out", str(out), env={"GITSYNC_MAX_FILE_SIZE": "100"})
    assert_refused(small, out, "input.yaml: larger than max_file_size (100 bytes)")


# ---------------------------------------------------------------------------------------------------------
# Values: ADC's and APISIX's substitution, mapped exactly or reported


@pytest.mark.slow
def test_adc_dollar_before_a_variable_is_reported_not_turned_into_an_escape(tmp_path: Path) -> None:
    result, out = run_import(tmp_path, "adc", 'services:\n  - name: s\n    description: "cost: $${PRICE}"\n'
                                              "    upstream: {nodes: []}\n")
    assert_refused(result, out, "input.yaml:3:", "$${PRICE}: ADC writes a '$' and then the value of PRICE")


@pytest.mark.slow
def test_adc_variables_and_escapes_keep_adcs_meaning(tmp_path: Path) -> None:
    text = ('services:\n  - name: s\n    description: "cost ${PRICE} not \\\\${LITERAL} nor ${{ x }}"\n'
            "    upstream: {nodes: []}\n")
    result, out = run_import(tmp_path, "adc", text)
    assert result.returncode == 0, result.stdout + result.stderr
    rendered = run_gitsync("render", "--dir", str(out), "--show-secrets",
                           env={"GITSYNC_SECRET_PRICE": "twelve-euro"})
    assert rendered.returncode == 0, rendered.stderr
    (service,) = json.loads(rendered.stdout)["services"]
    assert service["desc"] == "cost twelve-euro not ${LITERAL} nor ${{ x }}"


APISIX_REFERENCES = """\
upstreams:
  - id: u1
    nodes:
      "${{HOST:=127.0.0.1}}:80": 1
    retries: ${{ RETRIES }}
    timeout: {connect: 3, send: 5, read: 5}
    desc: "${{RETRIES}}"
routes:
  - id: r1
    uri: /a/${{ SEGMENT }}/b
    upstream_id: u1
#END
"""


@pytest.mark.slow
def test_import_apisix_yaml_maps_references_in_keys_and_with_blanks_and_keeps_their_types(tmp_path: Path,
                                                                                        ) -> None:
    result, out = run_import(tmp_path, "apisix-yaml", APISIX_REFERENCES)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "apisix.yaml:4:" in result.stdout and "gitsync has no defaults" in result.stdout
    assert "'127.0.0.1'" in result.stdout
    for name in ("HOST", "RETRIES", "SEGMENT"):
        assert f"GITSYNC_VAR_{name}" in result.stdout
    text = "".join(p.read_text() for p in files_under(out) if p.is_file())
    assert "${{HOST" not in text and "${{ RETRIES }}" not in text and "${{ SEGMENT }}" not in text
    env = {"GITSYNC_VAR_HOST": "10.0.0.9", "GITSYNC_VAR_RETRIES": "3", "GITSYNC_VAR_SEGMENT": "v1"}
    rendered = run_gitsync("render", "--dir", str(out), env=env)
    assert rendered.returncode == 0, rendered.stderr
    payload = json.loads(rendered.stdout)
    (upstream,) = payload["upstreams"]
    assert upstream["nodes"] == {"10.0.0.9:80": 1}
    assert upstream["retries"] == 3  # unquoted in apisix.yaml: a number, as APISIX reads it
    assert upstream["desc"] == "3"  # quoted: text
    assert payload["routes"][0]["uri"] == "/a/v1/b"


@pytest.mark.slow
@pytest.mark.parametrize(("text", "expected"), [
    ('routes:\n  - id: r1\n    uri: "/a$${{HOST}}"\n    upstream_id: u\n',
     "$${{HOST}}: APISIX writes a '$' and then the value of HOST"),
    ("routes:\n  - id: r1\n    uri: /x${{ 1A }}\n    upstream_id: u\n",
     "APISIX reads the variable '1A', a name gitsync's ${{ vars.NAME }} does not take"),
    ("routes:\n  - id: r1\n    uri: /x${{A-B}}\n    upstream_id: u\n", "APISIX reads the variable 'A-B'"),
])
def test_apisix_references_gitsync_cannot_spell_are_refused_at_their_line(tmp_path: Path, text: str,
                                                                         expected: str) -> None:
    result, out = run_import(tmp_path, "apisix-yaml", "upstreams:\n  - id: u\n    nodes: {'a:1': 1}\n" + text)
    assert_refused(result, out, "apisix.yaml:6:", expected)


# ---------------------------------------------------------------------------------------------------------
# Property: random documents of wrong shapes and types


@contextlib.contextmanager
def in_process() -> Iterator[tuple[io.StringIO, io.StringIO]]:
    """Run the command line here: settings from the environment only, output captured, and the process
    hooks the command line installs put back afterwards."""
    hooks = sys.excepthook, threading.excepthook
    env = {k: v for k, v in os.environ.items() if k.startswith("GITSYNC_")}
    for key in env:
        del os.environ[key]
    os.environ["GITSYNC_CONFIG"] = "/dev/null"
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            yield out, err
    finally:
        sys.excepthook, threading.excepthook = hooks
        del os.environ["GITSYNC_CONFIG"]
        os.environ.update(env)


def import_here(fmt: str, text: str, root: Path) -> tuple[int, str, Path]:
    source = root / "input.yaml"
    source.write_text(text)
    out = root / "repo"
    with in_process() as (stdout, stderr):
        code = main(["import", fmt, str(source), "--out", str(out), "--secrets-out", str(secrets_of(out))])
    return code, stdout.getvalue() + stderr.getvalue(), out


def validate_here(out: Path) -> tuple[int, str]:
    secrets = ["--secrets-dir", str(secrets_of(out))] if secrets_of(out).exists() else []
    with in_process() as (stdout, stderr):
        code = main(["validate", "--dir", str(out), *secrets])
    return code, stdout.getvalue() + stderr.getvalue()


def check_all_or_nothing(fmt: str, text: str) -> None:
    with tempfile.TemporaryDirectory(prefix="gitsync-import-") as tmp:
        code, output, out = import_here(fmt, text, Path(tmp))
        assert "Traceback" not in output
        assert code in (0, 1), output
        if code == 1:
            assert files_under(out) == [] and files_under(secrets_of(out)) == [], output
            return
        valid, said = validate_here(out)
        # A variable or secret the import names is the host's to set: validate's only allowed complaint.
        problems = [ln for ln in said.splitlines() if ": " in ln and "undefined " not in ln
                    and not ln.startswith(("valid:", "warning:"))]
        assert valid == 0 or not problems, said


FIELD_NAMES = ["services", "ssls", "consumers", "consumer_groups", "global_rules", "plugin_metadata",
               "routes", "stream_routes", "upstreams", "name", "id", "upstream", "nodes", "host", "port",
               "weight", "certificates", "certificate", "key", "snis", "credentials", "type", "config",
               "username", "labels", "plugins", "uris", "hosts", "checks", "active", "passive", "healthy",
               "timeout", "keepalive_pool", "description", "client", "depth", "key-auth", "prometheus",
               "server_port", "retries", "scheme", "uri", "upstream_id", "service_id"]
TEXTS = ["s", "r1", "/a", "key-auth", "http", "roundrobin", "${A}", "\\${A}", "$${A}", "${{A}}", "${{ B }}",
         "${{C:=1}}", "$${{D}}", "bad id!", "", "a.example.com", "10.0.0.1:80", "x" * 70]
scalars = st.one_of(st.none(), st.booleans(), st.integers(-3, 70000),
                    st.floats(allow_nan=False, allow_infinity=False), st.sampled_from(TEXTS),
                    st.text(max_size=6))
shapes = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3),
    st.dictionaries(st.sampled_from(FIELD_NAMES) | st.text(max_size=4), inner, max_size=4)), max_leaves=18)
#: What a mutation puts in: as often a scalar as a nested value (`shapes` alone is mostly containers).
replacements = st.one_of(scalars, shapes)
#: Each example runs the import and a validation in this process, a few tens of milliseconds.
PROPERTY = examples(1)


def yaml_of(value: Any) -> str:
    """JSON is YAML: any nested value as a document."""
    return json.dumps(value)


def mutated(document: Any, path: tuple[Any, ...], replacement: Any) -> Any:
    """`document` with the value at `path` replaced (a missing key is added)."""
    if not path:
        return replacement
    step, rest = path[0], path[1:]
    if isinstance(document, dict):
        return {**document, step: mutated(document.get(step), rest, replacement)}
    if isinstance(document, list) and isinstance(step, int) and step < len(document):
        return [*document[:step], mutated(document[step], rest, replacement), *document[step + 1:]]
    return replacement


def places(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in `value` (its own, each key's and each item's, nested) and a new key in each mapping."""
    found = [path]
    if isinstance(value, dict):
        found.append((*path, "extra"))
        for key, child in value.items():
            found += places(child, (*path, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            found += places(child, (*path, index))
    return found


CERT, PRIVATE_KEY = pem_pair("a.example.com")
VALID_ADC_DATA = {**parse(VALID_ADC.encode()).documents[0].data,
                  "ssls": [{"snis": ["a.example.com"], "client": {"ca": CERT},
                            "certificates": [{"certificate": CERT, "key": PRIVATE_KEY}]}]}
VALID_APISIX_DATA = parse(VALID_APISIX_YAML.encode()).documents[0].data


Change = tuple[tuple[Any, ...], Any]  # a place in a document and what is put there


def mutations(document: Any) -> st.SearchStrategy[list[Change]]:
    """One to four (place, replacement) pairs; half the places hold a list or a mapping (what a
    conversion walks), half are any place."""
    every = places(document)
    walked = [p for p in every if isinstance(_at(document, p), dict | list)]
    place = st.one_of(st.sampled_from(walked), st.sampled_from(every))
    return st.lists(st.tuples(place, replacements), min_size=1, max_size=4)


def _at(document: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        try:
            document = document[step]
        except (KeyError, IndexError, TypeError):
            return None
    return document


def applied(document: Any, changes: list[Change]) -> Any:
    for path, replacement in changes:
        document = mutated(document, path, replacement)
    return document


VALID = {"adc": VALID_ADC_DATA, "apisix-yaml": VALID_APISIX_DATA}


@pytest.mark.slow
@pytest.mark.parametrize("fmt", list(VALID))
@PROPERTY
@given(document=shapes)
def test_import_of_random_shapes_is_all_or_nothing(fmt: str, document: Any) -> None:
    check_all_or_nothing(fmt, yaml_of(document))


@pytest.mark.slow
@pytest.mark.parametrize("fmt", list(VALID))
@PROPERTY
@given(data=st.data())
def test_import_of_a_mutated_valid_file_is_all_or_nothing(fmt: str, data: st.DataObject) -> None:
    changes = data.draw(mutations(VALID[fmt]), label="changes")
    check_all_or_nothing(fmt, yaml_of(applied(VALID[fmt], changes)))


@pytest.mark.slow
@pytest.mark.parametrize(("fmt", "path", "replacement"), [
    ("adc", ["ssls"], [{"snis": ["a.example.com"], "certificates": [1, 2]}]),
    ("adc", ["services", 0, "routes"], 5),
    ("adc", ["services", 0, "upstream", "nodes", 0, "port"], "x"),
    ("apisix-yaml", ["routes", 0, "uri"], 5),
    ("apisix-yaml", ["upstreams"], {"a": 1}),
])
def test_a_few_mutations_as_real_processes(tmp_path: Path, fmt: str, path: list[Any], replacement: Any,
                                           ) -> None:
    base = VALID[fmt]
    result, out = run_import(tmp_path, fmt, yaml_of(mutated(base, tuple(path), replacement)))
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stdout + result.stderr
    assert files_under(out) == [] and files_under(secrets_of(out)) == []
    (tmp_path / "unchanged").mkdir()
    valid, _ = run_import(tmp_path / "unchanged", fmt, yaml_of(base))
    assert valid.returncode == 0, valid.stdout + valid.stderr  # the mutation alone made it fail
