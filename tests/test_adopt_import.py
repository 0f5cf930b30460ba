"""``gitsync import adc`` and ``gitsync import apisix-yaml``, as real processes.

ADC cannot run here (it is not on the npm registry; its releases are binaries from
GitHub), so the gateway an ``adc sync`` leaves behind is written by hand in this file,
from what ADC 0.28's standalone backend writes (ids from names, ``status: 1``,
``managed-by: adc``, the service's upstream split out, every item's ``modifiedIndex``
and every changed kind's version the same millisecond timestamp) and PUT to the
double as ADC does. gitsync's import of the same ADC file must then take it over with
no change at all.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from gitsync.kinds import VERSIONED_KEYS, version_key
from gitsync.testing.apisix import ApisixDouble
from tests.pem import pem_pair
from tests.support import run_gitsync

KEY = "test-admin-key"
STAMP = 1764500000123  # ADC's timestamp: every version it bumps and every modifiedIndex it writes


def sha1(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()


CERT, PRIVATE_KEY = pem_pair("example.com")


def indent(text: str, spaces: int) -> str:
    return "\n".join(" " * spaces + line for line in text.strip().splitlines())


ADC_FILE = f"""\
services:
  - name: orders
    description: the orders API
    labels: {{team: shop, tiers: [gold, silver]}}
    hosts: [api.example.com]
    upstream:
      nodes:
        - {{host: 10.0.1.10, port: 8080, weight: 100}}
      timeout: {{connect: 3, send: 5, read: 5}}
      keepalive_pool: {{size: 64}}
    plugins:
      limit-count: {{count: 100, time_window: 60, key: remote_addr, key_type: var}}
    routes:
      - name: list
        uris: [/orders]
        methods: [GET]
        plugins:
          key-auth: {{}}
      - name: create
        uris: [/orders]
        methods: [POST]
        priority: 10
  - name: mysql
    upstream:
      scheme: tcp
      nodes: [{{host: 10.0.3.10, port: 3306, weight: 1}}]
    stream_routes:
      - name: mysql
        server_port: 3306
ssls:
  - snis: [example.com, www.example.com]
    certificates:
      - certificate: |
{indent(CERT, 10)}
        key: ${{EXAMPLE_COM_KEY}}
consumers:
  - username: alice
    plugins:
      key-auth: {{key: "${{ALICE_KEY}}"}}
    credentials:
      - name: primary
        type: key-auth
        config: {{key: alice-primary-key}}
  - username: bob
    credentials:
      - name: basic
        type: basic-auth
        config: {{username: bob, password: "\\\\${{NOT_ENV}}"}}
global_rules:
  prometheus: {{prefer_name: true}}
plugin_metadata:
  http-logger:
    log_format: {{host: $host}}
"""


def adc_wrote() -> dict[str, Any]:
    """The body ADC 0.28 PUTs for ADC_FILE on a fresh gateway (ALICE_KEY=alice-env-key)."""
    orders, mysql = sha1("orders"), sha1("mysql")
    adc = {"managed-by": "adc"}
    items = {
        "services": [
            {"id": orders, "name": "orders", "desc": "the orders API", "hosts": ["api.example.com"],
             "labels": {"team": "shop", "tiers": '["gold","silver"]', **adc}, "upstream_id": orders,
             "plugins": {"limit-count": {"count": 100, "time_window": 60, "key": "remote_addr",
                                         "key_type": "var"}}},
            {"id": mysql, "name": "mysql", "labels": adc, "upstream_id": mysql},
        ],
        "upstreams": [
            {"id": orders, "name": "orders", "type": "roundrobin", "scheme": "http", "pass_host": "pass",
             "nodes": [{"host": "10.0.1.10", "port": 8080, "weight": 100, "priority": 0}],
             "timeout": {"connect": 3, "send": 5, "read": 5},
             "keepalive_pool": {"size": 64, "idle_timeout": 60, "requests": 1000}},
            {"id": mysql, "name": "mysql", "type": "roundrobin", "scheme": "tcp", "pass_host": "pass",
             "nodes": [{"host": "10.0.3.10", "port": 3306, "weight": 1, "priority": 0}]},
        ],
        "routes": [
            {"id": sha1("orders.list"), "name": "list", "labels": adc, "uris": ["/orders"],
             "methods": ["GET"], "service_id": orders, "plugins": {"key-auth": {}}, "status": 1},
            {"id": sha1("orders.create"), "name": "create", "labels": adc, "uris": ["/orders"],
             "methods": ["POST"], "service_id": orders, "priority": 10, "status": 1},
        ],
        "stream_routes": [{"id": sha1("mysql.mysql"), "name": "mysql", "labels": adc, "server_port": 3306,
                           "service_id": mysql}],
        "ssls": [{"id": sha1("example.com,www.example.com"), "labels": adc, "type": "server",
                  "snis": ["example.com", "www.example.com"], "cert": CERT.strip() + "\n", "key": PRIVATE_KEY,
                  "status": 1}],
        "consumers": [
            {"username": "alice", "labels": adc, "plugins": {"key-auth": {"key": "alice-env-key"}}},
            {"username": "bob", "labels": adc},
            {"id": "alice/credentials/" + sha1("alice.primary"), "name": "primary",
             "plugins": {"key-auth": {"key": "alice-primary-key"}}},
            {"id": "bob/credentials/" + sha1("bob.basic"), "name": "basic",
             "plugins": {"basic-auth": {"username": "bob", "password": "${NOT_ENV}"}}},
        ],
        "global_rules": [{"id": "prometheus", "plugins": {"prometheus": {"prefer_name": True}}}],
        "plugin_metadata": [{"id": "http-logger", "log_format": {"host": "$host"}}],
    }
    body: dict[str, Any] = {version_key(k): 0 for k in VERSIONED_KEYS}
    for kind, listed in items.items():
        body[kind] = [{**item, "modifiedIndex": STAMP} for item in listed]
        body[version_key(kind)] = STAMP
    return body


def adc_sync(double: ApisixDouble) -> None:
    """What `adc sync -f adc.yaml` does to a fresh standalone gateway: one PUT of the whole config."""
    text = json.dumps(adc_wrote())
    response = httpx.put(double.url + "/apisix/admin/configs", content=text, headers={
        "X-API-KEY": KEY, "X-Digest": hashlib.sha1(text.encode()).hexdigest(),
        "Content-Type": "application/json"})
    assert response.status_code == 202, response.text


def live(double: ApisixDouble) -> dict[str, Any]:
    return httpx.get(double.url + "/apisix/admin/configs", headers={"X-API-KEY": KEY}).json()


@pytest.mark.slow
def test_an_adc_managed_gateway_is_taken_over_with_zero_changed_items(apisix: ApisixDouble,
                                                                      tmp_path: Path) -> None:
    adc_sync(apisix)
    before = live(apisix)
    (tmp_path / "adc.yaml").write_text(ADC_FILE)
    (tmp_path / "admin_key").write_text(KEY)
    secrets = tmp_path / "secrets"
    imported = run_gitsync("import", "adc", str(tmp_path / "adc.yaml"), "--out", str(tmp_path / "repo"),
                           "--secrets-out", str(secrets))
    assert imported.returncode == 0, imported.stdout + imported.stderr
    assert "ALICE_KEY" in imported.stdout and "EXAMPLE_COM_KEY" in imported.stdout
    repo = (tmp_path / "repo").as_posix()
    consumers = (tmp_path / "repo" / "consumers.yaml").read_text()
    assert "${{ secrets.ALICE_KEY }}" in consumers
    # The file's literal credentials are taken out too, named in the notes, their values in --secrets-out.
    assert "alice-primary-key" not in consumers and "NOT_ENV" not in consumers
    assert sorted(p.read_text().strip() for p in secrets.iterdir()) == ["${NOT_ENV}", "alice-primary-key"]
    assert "2 literal credential(s) became ${{ secrets.NAME }}" in imported.stdout
    puts = len(apisix.put_bodies)
    env = {"GITSYNC_SECRET_ALICE_KEY": "alice-env-key", "GITSYNC_SECRET_EXAMPLE_COM_KEY": PRIVATE_KEY}
    gateway = ["--gateway", apisix.url, "--admin-key-file", str(tmp_path / "admin_key"),
               "--secrets-dir", str(secrets)]
    diff = run_gitsync("diff", "--dir", repo, *gateway, env=env)
    assert diff.returncode == 0 and "no changes" in diff.stdout, diff.stdout + diff.stderr
    sync = run_gitsync("sync", "--once", "--dir", repo, *gateway, env=env)
    assert sync.returncode == 0 and "unchanged" in sync.stdout, sync.stdout + sync.stderr
    assert len(apisix.put_bodies) == puts
    after = live(apisix)
    assert {k: v for k, v in after.items() if k.endswith("_conf_version")} == \
        {k: v for k, v in before.items() if k.endswith("_conf_version")}
    indexes = {(kind, json.dumps(item, sort_keys=True)) for kind in VERSIONED_KEYS
               for item in after.get(kind) or () if isinstance(after.get(kind), list)}
    assert indexes == {(kind, json.dumps(item, sort_keys=True)) for kind in VERSIONED_KEYS
                       for item in before.get(kind) or () if isinstance(before.get(kind), list)}


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
    for line, text in ((2, "has no upstream"), (8, "named 'upstreams' are not mapped"),
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
