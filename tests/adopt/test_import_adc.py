"""``gitsync import adc`` and ``gitsync import apisix-yaml``, as real processes.

The takeover of a gateway each ADC release wrote (recorded ``adc sync`` runs) is in
tests/adopt/test_adc_releases.py; here: ADC's documented examples, what cannot be mapped,
and a file-driven ``apisix.yaml``.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

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
