"""Versions at any magnitude: the double keeps them as APISIX 3.18 does, and gitsync syncs over them.

Facts recorded on a real APISIX 3.18 (2026-11-30): versions are stored and served with 14
significant digits; a PUT whose version rounds to the stored one is answered 202 and shows
in GET, but the data plane keeps serving the old content; re-sending a value that was
rounded up is refused. From APISIX's code: cjson reads every number as a double, so
``100000000000000001`` is the same version as a stored ``1e+17``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from gitsync.testing.apisix import ApisixDouble
from testkit.processes import run_gitsync
from tests.push.test_apply import ROUTES

KEY = "test-admin-key"


def route(uri: str, **extra: Any) -> dict[str, Any]:
    upstream = {"type": "roundrobin", "nodes": {"127.0.0.1:1980": 1}}
    return {"id": "r1", "uri": uri, "upstream": upstream, **extra}


def raw_body(version: str, *routes: dict[str, Any]) -> str:
    """A PUT body with `version` written exactly so (json.dumps would print it its own way)."""
    return f'{{"routes_conf_version":{version},"routes":{json.dumps(list(routes))}}}'


def put(double: ApisixDouble, body: dict[str, Any] | str) -> httpx.Response:
    text = body if isinstance(body, str) else json.dumps(body)
    return httpx.put(double.url + "/apisix/admin/configs", content=text,
                     headers={"X-API-KEY": KEY, "X-Digest": f"d{len(double.put_bodies)}"})


def get(double: ApisixDouble) -> tuple[dict[str, Any], str]:
    response = httpx.get(double.url + "/apisix/admin/configs", headers={"X-API-KEY": KEY})
    return response.json(), response.text


def served_uri(double: ApisixDouble) -> str:
    return next(iter(double.running("routes").values()))["uri"]


def test_a_version_that_rounds_to_the_stored_one_is_shown_but_not_served(apisix: ApisixDouble) -> None:
    apisix.out_of_band("routes", [route("/a")], version=1.7000000000001e15)
    assert put(apisix, {"routes_conf_version": 1700000000000101, "routes": [route("/b")]}).status_code == 202
    body, text = get(apisix)
    assert '"routes_conf_version":1.7000000000001e+15' in text
    assert body["routes"][0]["uri"] == "/b" and served_uri(apisix) == "/a"
    assert put(apisix, {"routes_conf_version": 1700000000000201, "routes": [route("/c")]}).status_code == 202
    assert '"routes_conf_version":1.7000000000002e+15' in get(apisix)[1] and served_uri(apisix) == "/c"
    assert httpx.get(apisix.proxy_url + "/c").status_code == 200
    assert httpx.get(apisix.proxy_url + "/a").status_code == 404


def test_a_version_rounded_up_cannot_be_sent_again(apisix: ApisixDouble) -> None:
    assert put(apisix, raw_body("123456789012345678", route("/a"))).status_code == 202
    assert '"routes_conf_version":1.2345678901235e+17' in get(apisix)[1]
    again = put(apisix, {"routes_conf_version": 123456789012345678, "routes": [route("/b")]})
    assert (again.status_code, again.json()) == (
        400, {"error_msg": "routes_conf_version must be greater than or equal to (1.2345678901235e+17)"})
    echoed = put(apisix, raw_body("1.2345678901235e+17", route("/b")))
    assert echoed.status_code == 202 and get(apisix)[0]["routes"][0]["uri"] == "/a"  # equal: list kept


def test_versions_compare_as_the_doubles_cjson_reads(apisix: ApisixDouble) -> None:
    apisix.out_of_band("routes", [route("/a")], version=10**17)
    assert put(apisix, raw_body("100000000000000001", route("/b"))).status_code == 202
    assert get(apisix)[0]["routes"][0]["uri"] == "/a"  # the same double as the stored 1e+17: kept
    lower = put(apisix, raw_body("99999999999999990"))  # the double below 1e+17
    assert lower.json() == {"error_msg": "routes_conf_version must be greater than or equal to (1e+17)"}


def test_fractional_versions_are_kept_as_sent_and_a_negative_one_is_lower(apisix: ApisixDouble) -> None:
    assert put(apisix, {"routes_conf_version": 2.5, "services_conf_version": 0.125}).status_code == 202
    body, text = get(apisix)
    assert '"routes_conf_version":2.5' in text and body["services_conf_version"] == 0.125
    lower = put(apisix, {"upstreams_conf_version": -2})
    assert lower.json() == {"error_msg": "upstreams_conf_version must be greater than or equal to (1)"}


def test_a_modified_index_that_rounds_to_the_running_one_keeps_the_old_object(apisix: ApisixDouble) -> None:
    put(apisix, {"routes_conf_version": 1, "routes": [route("/a", modifiedIndex=10**17 + 1)]})
    put(apisix, {"routes_conf_version": 2, "routes": [route("/b", modifiedIndex=10**17 + 2)]})
    assert get(apisix)[0]["routes"][0]["uri"] == "/b" and served_uri(apisix) == "/a"


@pytest.mark.slow
def test_a_gateway_at_1_7e15_converges_in_one_sync_and_serves_the_change(tmp_path: Path,
                                                                          apisix: ApisixDouble) -> None:
    (tmp_path / "repo").mkdir()
    (tmp_path / "repo" / "apisix.yaml").write_text(ROUTES)
    (tmp_path / "admin.key").write_text(KEY + "\n")
    # Another tool, with micro- and nanosecond timestamps, left items in several kinds.
    apisix.out_of_band("routes", [{"id": "r1", "uri": "/old", "upstream_id": "u1", "modifiedIndex": 10**17},
                                  {"id": "stray", "uri": "/stray", "upstream_id": "u1"}],
                       version=1.7000000000001e15)
    apisix.out_of_band("upstreams", [{"id": "u1", "type": "roundrobin", "nodes": {"127.0.0.1:1980": 1}}],
                       version=1_732_000_000_000_123_456)
    apisix.out_of_band("services", [{"id": "s1", "upstream_id": "u1"}], version=-3.5)
    apisix.out_of_band("consumers", [{"username": "stray"}], version=1.2345678901235e17)
    assert httpx.get(apisix.proxy_url + "/old").status_code == 200
    # Pruning the stray service and consumer empties those kinds: the deletion guard asks for consent.
    args = ["--dir", str(tmp_path / "repo"), "--gateway", apisix.url,
            "--admin-key-file", str(tmp_path / "admin.key"), "--allow-delete", "services",
            "--allow-delete", "consumers"]
    first = run_gitsync("sync", "--once", *args)
    assert first.returncode == 0, first.stderr
    assert first.stdout == (f"{apisix.url}: applied (routes, services, consumers changed), accepted; "
                            "pruned 1 out-of-band routes: stray; pruned 1 out-of-band services: s1; "
                            "pruned 1 out-of-band consumers: stray\n")
    assert len(apisix.put_bodies) == 1
    sent = json.loads(apisix.put_bodies[0])
    assert (sent["routes_conf_version"], sent["upstreams_conf_version"]) == (1700000000000200, 1.732e18 + 1e5)
    assert (sent["services_conf_version"], sent["consumers_conf_version"]) == (-3, 1.2345678901236e17)
    answer = httpx.get(apisix.proxy_url + "/a")
    assert answer.status_code == 200 and answer.headers["X-Route-Id"] == "r1"
    assert httpx.get(apisix.proxy_url + "/old").status_code == 404
    second = run_gitsync("sync", "--once", *args)
    assert (second.returncode, second.stdout) == (0, f"{apisix.url}: unchanged\n")
    assert len(apisix.put_bodies) == 1  # no PUT
