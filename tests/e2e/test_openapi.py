"""A spec in the repo, with real processes: `gitsync sync --once` pushes its routes to the APISIX double,
whose data plane answers each operation's requests (and no other path); `gitsync diff` shows a changed
spec as the routes it adds, changes and removes; a broken spec is refused with its file:line and the
gateway keeps what it had."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from gitsync.testing.apisix import ApisixDouble
from testkit.openapi import spec_repo
from testkit.processes import run_gitsync

KEY = "test-admin-key"
SPEC = """\
openapi: 3.0.3
info: {title: Shop}
servers: [{url: "https://shop.example.com/api"}]
paths:
  /orders:
    get: {operationId: listOrders}
    post: {operationId: createOrder}
  /orders/{id}:
    get: {operationId: getOrder}
    delete: {operationId: cancelOrder}
  /orders/{id}/items/{item}.json:
    get: {operationId: getItem}
  /orders/latest:
    get: {operationId: latestOrder}
"""
DECLARATION = """\
openapi:
  - name: shop
    spec: specs/shop.yaml
    upstream_defaults: {nodes: [{host: 127.0.0.1, port: 1980, weight: 1}], scheme: http}
"""


def gateway(double: ApisixDouble, tmp_path: Path) -> list[str]:
    key = tmp_path / "admin_key"
    key.write_text(KEY)
    return ["--gateway", double.url, "--admin-key-file", str(key)]


def answered_by(double: ApisixDouble, method: str, path: str) -> str | None:
    """The name of the route the double's data plane picks for a request (None: 404)."""
    reply = httpx.request(method, double.proxy_url + path, timeout=10)
    if reply.status_code == 404:
        return None
    route = next(r for r in double.config()["routes"] if r["id"] == reply.headers["x-route-id"])
    return route["name"]


@pytest.mark.slow
def test_a_specs_operations_answer_on_the_data_plane_and_a_spec_change_is_a_diff(apisix: ApisixDouble,
                                                                                 tmp_path: Path) -> None:
    repo = spec_repo(tmp_path / "repo", {"specs/shop.yaml": SPEC}, DECLARATION)
    source = ["--dir", str(repo), *gateway(apisix, tmp_path)]
    synced = run_gitsync("sync", "--once", *source)
    assert synced.returncode == 0, synced.stdout + synced.stderr
    for method, path, name in (("GET", "/api/orders", "listOrders"), ("POST", "/api/orders", "createOrder"),
                               ("GET", "/api/orders/42", "getOrder"),
                               ("DELETE", "/api/orders/42", "cancelOrder"),
                               ("GET", "/api/orders/42/items/7.json", "getItem"),
                               ("GET", "/api/orders/latest", "latestOrder"),  # the literal path wins
                               ("DELETE", "/api/orders/latest", "cancelOrder"),  # the template, for DELETE
                               ("PUT", "/api/orders/42", None), ("GET", "/api/orders/42/extra", None),
                               ("GET", "/api/orders/42/items/7.xml", None), ("GET", "/orders", None),
                               ("GET", "/api/orders/", None)):
        assert answered_by(apisix, method, path) == name, (method, path)

    changed = SPEC.replace("    delete: {operationId: cancelOrder}\n", "") \
        .replace("get: {operationId: getOrder}", "get: {operationId: getOrder, x-adc-labels: {v: '2'}}") \
        + "  /refunds:\n    post: {operationId: refund}\n"
    (repo / "specs" / "shop.yaml").write_text(changed)
    diff = run_gitsync("diff", *source, "-v")
    assert diff.returncode == 1, diff.stdout + diff.stderr
    lines = diff.stdout.splitlines()
    routes = {r["name"]: r["id"] for r in apisix.config()["routes"]}
    assert f"    - routes[{routes['cancelOrder']}]" in lines, diff.stdout
    changed_at = lines.index(f"    ~ routes[{routes['getOrder']}]")
    assert lines[changed_at + 1].strip() == 'labels: (absent) → {"v":"2"}'
    assert sum(line.startswith("    + routes[") for line in lines) == 1

    broken = changed.replace("/refunds:", "/refunds/{:")
    (repo / "specs" / "shop.yaml").write_text(broken)
    refused = run_gitsync("sync", "--once", *source)
    assert refused.returncode == 1
    assert "specs/shop.yaml:14:3: the path '/refunds/{' has a '{' or '}'" in refused.stderr
    assert answered_by(apisix, "DELETE", "/api/orders/42") == "cancelOrder"  # the last good config stays
    rendered = run_gitsync("render", "--dir", str(repo))
    assert rendered.returncode == 1 and not rendered.stdout.strip()


@pytest.mark.slow
def test_render_explain_points_at_the_spec(tmp_path: Path) -> None:
    repo = spec_repo(tmp_path / "repo", {"specs/shop.yaml": SPEC}, DECLARATION)
    payload = json.loads(run_gitsync("render", "--dir", str(repo)).stdout)
    ident = next(r["id"] for r in payload["routes"] if r["name"] == "getItem")
    explained = run_gitsync("render", "--dir", str(repo), "--explain", "routes", ident)
    assert explained.returncode == 0, explained.stderr
    first, *fields = explained.stdout.splitlines()
    assert first == (f"routes[{ident}]: generated from GET /orders/{{id}}/items/{{item}}.json (operationId "
                     "getItem) of the OpenAPI spec specs/shop.yaml (openapi shop at openapi.yaml:2:5)")
    assert any(line.startswith("vars[0][2] ") and line.endswith(" specs/shop.yaml:11:3") for line in fields)
    assert any(line.startswith("name ") and line.endswith(" specs/shop.yaml:12:11") for line in fields)
