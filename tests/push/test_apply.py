"""The push loop against the APISIX Admin API double, over real HTTP on loopback.

In-process `sync_gateway` for the loop's behaviour (races, faults, versions, the data
plane), the real ``gitsync sync``/``diff`` processes for the seed scenario and the CLI.
"""

from __future__ import annotations

import json
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gitsync.kinds import KINDS, VERSIONED_KEYS, version_key
from gitsync.ownership import Claim, Ownership
from gitsync.push.admin_api import Endpoint, Gateway, LiveConfig
from gitsync.push.apply import RetryPolicy, guard_policy_from_settings, push, sync_gateway
from gitsync.push.guard import GuardPolicy
from gitsync.push.plan import MANAGE_ALL, Desired, Policy, items_equal
from gitsync.push.results import GatewayResult, SyncStatus
from gitsync.push.workers import GatewayPool, wait_for
from gitsync.render import RenderOptions, render
from gitsync.render.compose import Part, compose, facts_of
from gitsync.settings import Secret, load
from gitsync.source.directory import read_directory
from gitsync.testing.apisix import ApisixDouble
from gitsync.testing.http import Reply
from testkit.processes import free_port, run_gitsync
from testkit.profiles import examples
from testkit.renders import rendered_alone

KEY = "test-admin-key"
FAST = RetryPolicy(attempts=3, race_base=0.01, unavailable_base=0.01, cap=0.05)


def endpoint(double: ApisixDouble, *, key: str = KEY, timeout: float = 5.0) -> Endpoint:
    return Endpoint(double.url, Secret(key), timeout=timeout)


def sync(double: ApisixDouble, desired: dict[str, Any], policy: Policy = MANAGE_ALL, **kw: Any,
         ) -> GatewayResult:
    return sync_gateway(endpoint(double, timeout=kw.pop("timeout", 5.0)), desired, policy,
                        retry=kw.pop("retry", FAST), **kw)


def sync_all(endpoints: list[Endpoint], desired: dict[str, Any]) -> list[GatewayResult]:
    """Push to several gateways at once, each on its own worker, as the agent does."""
    with GatewayPool(endpoints) as gateways:
        results, _ = wait_for(gateways.push({url: lambda client: push(client, desired, retry=FAST)
                                             for url in gateways.urls}))
    return [results[url] for url in gateways.urls]


def route(rid: str, uri: str, **extra: Any) -> dict[str, Any]:
    return {"id": rid, "uri": uri, "upstream": {"type": "roundrobin", "nodes": {"127.0.0.1:1980": 1}},
            **extra}


def live_content(double: ApisixDouble) -> dict[str, Any]:
    """What GET shows, as the agent sees it."""
    response = httpx.get(double.url + "/apisix/admin/configs", headers={"X-API-KEY": KEY})
    return response.json()


# ---------------------------------------------------------------------------------------------------------
# The loop


def test_first_sync_applies_and_an_identical_repeat_sends_no_put(apisix: ApisixDouble) -> None:
    desired = {"routes": [route("r1", "/a")], "upstreams": [{"id": "u1", "type": "roundrobin", "nodes": []}]}
    first = sync(apisix, desired)
    assert first.status is SyncStatus.APPLIED and first.puts == 1 and first.attempts == 1
    assert first.versions["routes_conf_version"] == 1 and first.versions["secrets_conf_version"] == 0
    assert first.counts["routes"] == 1 and first.digest == apisix.config()["X-Digest"]
    # Validate only after a refusal; the read-back is a HEAD whose digest is ours.
    assert [m for m, _, _ in apisix.requests] == ["GET", "PUT", "HEAD"]
    before = len(apisix.requests)
    again = sync(apisix, desired)
    assert again.status is SyncStatus.UNCHANGED and again.ok
    assert (again.puts, again.bytes_sent) == (0, 0)
    assert apisix.requests[before:] == [("GET", "/apisix/admin/configs", 200)]
    assert len(apisix.put_bodies) == 1


def test_modified_index_follows_content_and_the_data_plane_serves_the_change(apisix: ApisixDouble) -> None:
    sync(apisix, {"routes": [route("r1", "/one"), route("r2", "/two")]})
    old = {r["id"]: r["modifiedIndex"] for r in apisix.config()["routes"]}
    result = sync(apisix, {"routes": [route("r1", "/one"), route("r2", "/two-b")]})
    assert result.status is SyncStatus.APPLIED
    assert result.plan is not None and result.plan.kind("routes").modified == ("r2",)
    new = {r["id"]: r["modifiedIndex"] for r in apisix.config()["routes"]}
    assert new["r1"] == old["r1"] and new["r2"] != old["r2"]
    served = httpx.get(apisix.proxy_url + "/two-b")
    assert served.headers.get("X-Route-Id") == "r2"
    assert httpx.get(apisix.proxy_url + "/two").status_code == 404
    assert httpx.get(apisix.proxy_url + "/one").headers.get("X-Route-Id") == "r1"


class RacingDouble(ApisixDouble):
    """Another writer lands between gitsync's GET and its PUT, `races` times."""

    races = 1

    def _put(self, h: Any, body: bytes) -> Any:
        if self.races > 0:
            self.races -= 1
            version = self.config()["routes_conf_version"] + 1_000
            self.out_of_band("routes", [route("intruder", "/x")], version=version)
        return super()._put(h, body)


def test_a_writer_racing_between_get_and_put_is_retried_and_converges() -> None:
    with RacingDouble(KEY) as double:
        desired = {"routes": [route("r1", "/a")]}
        result = sync(double, desired)
        assert result.status is SyncStatus.APPLIED and result.attempts == 2 and result.puts == 2
        assert [status for method, _, status in double.requests if method == "PUT"] == [400, 202]
        live = live_content(double)
        assert items_equal(desired["routes"], live["routes"])
        assert live["routes_conf_version"] == 1_000 + 1  # the racing writer's version, then ours
        assert result.pruned == {"routes": ("intruder",)}


def test_a_writer_that_never_stops_racing_exhausts_the_bounded_attempts() -> None:
    with RacingDouble(KEY) as double:
        double.races = 10
        result = sync(double, {"routes": [route("r1", "/a")]})
        assert result.status is SyncStatus.FAILED and result.attempts == FAST.attempts
        assert "raced" in (result.error or "")


def test_a_stale_digest_on_the_gateway_does_not_stop_a_push(apisix: ApisixDouble) -> None:
    """Another writer stored gitsync's digest with other content: APISIX would answer 204 to it."""
    desired = {"routes": [route("r1", "/a")]}
    digest = sync(apisix, desired).digest
    apisix.out_of_band("plugins")  # any other write moves the stored digest away from ours
    other = {**{version_key(k): 50 for k in VERSIONED_KEYS}, "routes": [route("r9", "/z")]}
    forged = httpx.put(apisix.url + "/apisix/admin/configs", content=json.dumps(other),
                       headers={"X-API-KEY": KEY, "X-Digest": digest or ""})
    assert forged.status_code == 202
    result = sync(apisix, desired)
    assert result.status is SyncStatus.APPLIED
    assert items_equal(desired["routes"], live_content(apisix)["routes"])


def test_the_seed_scenario_in_process(apisix: ApisixDouble) -> None:
    apisix.out_of_band("routes", [route("r1", "/a")], version=1720000000000)
    apisix.out_of_band("secrets", [{"id": "vault/other", "uri": "http://127.0.0.1:8200", "prefix": "kv",
                                    "token": "oob-token"}])
    desired = {"routes": [route("r1", "/a"), route("r2", "/b")]}
    kept = sync(apisix, desired, Policy(frozenset({"secrets"})))
    assert kept.status is SyncStatus.APPLIED and kept.attempts == 1 and not kept.pruned
    assert apisix.config()["secrets"][0]["id"] == "vault/other"
    assert kept.versions["routes_conf_version"] == 1720000000001
    pruned = sync(apisix, desired)
    assert pruned.status is SyncStatus.APPLIED and pruned.attempts == 1
    assert pruned.pruned == {"secrets": ("vault/other",)} and "secrets" not in apisix.config()
    assert "pruned 1 out-of-band secrets: vault/other" in pruned.summary()


class LostAnswerDouble(ApisixDouble):
    """The gateway applies the next PUT, but a proxy in front answers 502: the client never knows."""

    def _put(self, h: Any, body: bytes) -> Any:
        reply = super()._put(h, body)
        return Reply(502, b"<html>502 Bad Gateway</html>", content_type="text/html") if reply.status == 202 \
            and len(self.put_bodies) == 1 else reply


def test_a_put_whose_answer_is_lost_still_counts_as_applied() -> None:
    with LostAnswerDouble(KEY) as double:
        result = sync(double, {"routes": [route("r1", "/a")]})
        assert result.status is SyncStatus.APPLIED and result.attempts == 2 and result.puts == 1
        assert [status for method, _, status in double.requests if method == "PUT"] == [502]


@pytest.mark.parametrize(("version", "has_head"), [("3.18.0", True), ("3.13.0", False)])
def test_gateway_client_head_and_get(apisix: ApisixDouble, version: str, has_head: bool) -> None:
    with ApisixDouble(KEY, version=version) as double, Gateway(endpoint(double)) as gateway:
        fresh = gateway.get_config()
        assert set(fresh.versions.values()) == {0} and fresh.digest is None
        assert (gateway.head_config() is not None) == has_head
        result = sync(double, {"routes": [route("r1", "/a")]})
        head = gateway.head_config()
        live = gateway.get_config()
        assert "X-Digest" not in live.body and live.versions["routes_conf_version"] == 1
        if has_head:
            assert head is not None and head.digest == result.digest == live.digest
            assert head.last_modified and head.last_modified <= time.time() + 1
        else:
            assert head is None and live.digest is None
        assert gateway.server == f"APISIX/{version}"


@pytest.mark.parametrize(("version", "wait_sent"), [("3.18.0", False), ("3.19.0", True), ("3.21.0", True)])
def test_a_gateway_with_wait_confirms_every_worker(version: str, wait_sent: bool) -> None:
    with ApisixDouble(KEY, version=version) as double:
        result = sync(double, {"routes": [route("r1", "/a")]}, timeout=5.0)
        assert result.status is SyncStatus.APPLIED
        assert result.on_every_worker is (True if wait_sent else None)
        assert result.summary().endswith("on every worker" if wait_sent else "accepted")
        # 200 only answers a PUT that asked to wait (3.19+); without ?wait every version answers 202.
        puts = [status for method, _, status in double.requests if method == "PUT"]
        assert puts == [200 if wait_sent else 202]
        # 3.18 ignores ?wait, but gitsync asks only a gateway that reads it.
        (query,) = double.put_queries
        assert query.startswith("wait=") if wait_sent else "wait" not in query


@pytest.mark.slow
@pytest.mark.parametrize(("delay", "confirmed"), [(1.6, True), (6.0, False)])
def test_a_wait_that_runs_out_falls_back_to_readiness(delay: float, confirmed: bool) -> None:
    """The PUT may wait 1 s (a 2 s deadline); the workers take longer. 202 after the wait, so the
    status API (the data plane serves /status/ready once the config is applied) decides."""
    with ApisixDouble(KEY, version="3.19.0") as double:
        double.set_worker_delay(delay)
        with_status = Endpoint(double.url, Secret(KEY), status_url=double.proxy_url, timeout=2.0)
        result = sync_gateway(with_status, {"routes": [route("ready", "/status/ready")]}, retry=FAST)
        assert [status for method, _, status in double.requests if method == "PUT"] == [202]
        if confirmed:
            assert result.status is SyncStatus.APPLIED and result.on_every_worker is True
        else:
            assert result.status is SyncStatus.FAILED and "not every worker serves it" in (result.error or "")


def test_status_ready_is_awaited_when_configured(apisix: ApisixDouble) -> None:
    """The double has no status API; its data plane stands in: a route at /status/ready answers 200."""
    with_status = Endpoint(apisix.url, Secret(KEY), status_url=apisix.proxy_url, timeout=0.3)
    served = sync_gateway(with_status, {"routes": [route("ready", "/status/ready")]}, retry=FAST)
    assert served.status is SyncStatus.APPLIED
    never = sync_gateway(with_status, {"routes": [route("other", "/other")]}, retry=FAST)
    assert never.status is SyncStatus.FAILED and never.puts == 1
    assert "not every worker serves it" in (never.error or "") and "404" in (never.error or "")


def test_a_live_config_read_earlier_is_planned_on_once_and_a_retry_reads_afresh(apisix: ApisixDouble) -> None:
    earlier: Future[LiveConfig] = Future()
    with Gateway(endpoint(apisix)) as gateway:
        earlier.set_result(gateway.get_config())  # as the agent starts it, before rendering
    apisix.out_of_band("routes", [route("oob", "/oob")], version=7)  # another writer, in between
    before = len(apisix.requests)
    result = sync(apisix, {"routes": [route("r1", "/a")]}, live=earlier)
    assert result.status is SyncStatus.APPLIED and result.attempts == 2
    assert [(m, status) for m, _, status in apisix.requests[before:]] == [
        ("PUT", 400),  # planned on the earlier read: routes_conf_version 1 < 7, refused whole
        ("GET", 200), ("PUT", 202), ("HEAD", 200)]  # the retry reads afresh
    assert [r["id"] for r in apisix.config()["routes"]] == ["r1"]


# ---------------------------------------------------------------------------------------------------------
# Rejections map to file:line


def rendered(tmp_path: Path, files: dict[str, str]) -> Any:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    return render(read_directory(tmp_path), RenderOptions())


LEGACY_RULE = {"id": "legacy", "plugins": {"prometheus": {}}}
RULES = ("global_rules:\n"
         "  - id: metrics\n"
         "    plugins:\n"
         "      prometheus: {}\n"
         "  - id: legacy\n"  # kept: the plugin is not moving, two rules would hold it
         "    plugins:\n"
         "      prometheus: {}\n")


def test_a_rejected_item_is_reported_at_its_file_and_line(tmp_path: Path, apisix: ApisixDouble) -> None:
    # The rule is valid on its own; the gateway refuses it because a live rule, which the repo
    # keeps, has the same plugin.
    apisix.out_of_band("global_rules", [LEGACY_RULE])
    out = rendered(tmp_path, {"a.yaml": "routes: []\n", "rules.yaml": RULES})
    before = apisix.config()
    result = sync_gateway(endpoint(apisix), out.payload, source_map=out.source_map, retry=FAST)
    assert result.status is SyncStatus.FAILED and result.attempts == 1 and result.puts == 1
    assert [str(p) for p in result.problems] == [
        "rules.yaml:2:5: global_rules[metrics]: plugin 'prometheus' already exists in global rule with id "
        "'legacy'"]
    assert [(m, status) for m, _, status in apisix.requests] == [("GET", 200), ("PUT", 400), ("POST", 400)]
    assert apisix.config() == before  # a refused PUT changes nothing


@pytest.mark.parametrize("version", ["3.13.0", "3.14.0", "3.15.0"])
def test_older_gateways_prefixed_errors_map_to_file_and_line(tmp_path: Path, version: str) -> None:
    out = rendered(tmp_path, {"routes.yaml": "routes:\n  - id: ok\n    uri: /ok\n    upstream_id: u\n"
                                             "  - id: bad\n    uri: /bad\n    upstream_id: u\n",
                              "up.yaml": "upstreams:\n  - id: u\n    nodes: {'127.0.0.1:1': 1}\n"})
    payload = json.loads(json.dumps(out.payload))
    payload["routes"][1]["uri"] = 42  # what a gateway with a stricter schema than render's would refuse
    with ApisixDouble(KEY, version=version) as double:
        result = sync_gateway(endpoint(double), payload, source_map=out.source_map, retry=FAST)
        assert result.status is SyncStatus.FAILED and result.attempts == 1
        [problem] = result.problems
        assert str(problem).startswith("routes.yaml:5:5: routes[bad]: ")
        assert "invalid routes at index" not in problem.message and "uri" in problem.message
        validate_answers = [status for method, _, status in double.requests if method == "POST"]
        assert validate_answers == ([400] if version >= "3.15" else [404])
        assert len(double.put_bodies) == 1  # the refused PUT; validate was asked after it


@pytest.mark.parametrize("version", ["3.13.0", "3.14.0", "3.16.0"])
def test_older_gateways_sync_and_repeat_without_a_put(version: str) -> None:
    desired = {"routes": [route("r1", "/a")], "upstreams": [{"id": "u", "nodes": {"127.0.0.1:1": 1}}]}
    with ApisixDouble(KEY, version=version) as double:
        assert sync(double, desired).status is SyncStatus.APPLIED
        again = sync(double, desired)
        assert again.status is SyncStatus.UNCHANGED and again.puts == 0
        assert len(double.put_bodies) == 1


def test_stream_routes_on_a_gateway_without_them_fail_clearly() -> None:
    with ApisixDouble(KEY, version="3.13.0") as double:
        result = sync(double, {"stream_routes": [{"id": "s", "server_port": 9100,
                                                  "upstream": {"nodes": {"127.0.0.1:1": 1}}}]})
        assert result.status is SyncStatus.FAILED and not double.put_bodies
        assert "does not support stream_routes" in str(result.problems[0])


@pytest.mark.slow
def test_a_body_too_large_for_the_validate_endpoint_is_pushed_without_it(apisix: ApisixDouble) -> None:
    filler = "x" * 255
    routes = [route(f"r{i}", f"/r{i}", desc=filler) for i in range(4500)]
    result = sync(apisix, {"routes": routes}, timeout=60)  # the double validates 4,500 routes slowly
    assert result.status is SyncStatus.APPLIED and result.bytes_sent > 1536 * 1024
    assert [m for m, _, _ in apisix.requests] == ["GET", "PUT", "HEAD"]


def test_a_config_larger_than_the_gateways_shared_dict_is_refused_at_once(apisix: ApisixDouble) -> None:
    assert sync(apisix, {"routes": [route("r0", "/r0")]}).status is SyncStatus.APPLIED
    served, requests = apisix.running("routes"), len(apisix.requests)
    huge = [route("r0", "/r0", desc="x" * 250, plugins={"echo": {"body": "y" * (11 * 1024 * 1024)}})]
    result = sync(apisix, {"routes": huge}, timeout=60)
    assert result.status is SyncStatus.FAILED and result.refused and result.puts == 1  # not retried
    assert "cannot hold this config (11.0 MiB as sent" in result.problems[0].message
    assert "nginx_config.meta.lua_shared_dict.standalone-config" in result.problems[0].message
    assert [m for m, _, _ in apisix.requests[requests:]] == ["GET", "PUT"]
    # APISIX's shared dict evicted the config it held trying to make room; its workers serve it still
    assert "X-Digest" not in live_content(apisix) and apisix.running("routes") == served


# ---------------------------------------------------------------------------------------------------------
# Faults: nothing is touched, other gateways carry on


def test_wrong_admin_key_is_a_clear_auth_error_without_the_key(apisix: ApisixDouble) -> None:
    result = sync_gateway(endpoint(apisix, key="not-the-key-1234"), {"routes": [route("r", "/")]}, retry=FAST)
    assert result.status is SyncStatus.FAILED and result.attempts == 1
    assert "401" in (result.error or "") and "admin key" in (result.error or "")
    assert "not-the-key-1234" not in repr(result.to_dict())


def test_gateway_down_fails_after_bounded_retries() -> None:
    down = Endpoint(f"http://127.0.0.1:{free_port()}", Secret(KEY), timeout=1.0)
    started = time.monotonic()
    result = sync_gateway(down, {"routes": [route("r", "/")]}, retry=FAST)
    assert result.status is SyncStatus.FAILED and result.attempts == FAST.attempts and result.puts == 0
    assert "gave up after 3 attempts" in (result.error or "")
    assert time.monotonic() - started < 2


def test_5xx_fails_without_touching_the_live_config(apisix: ApisixDouble) -> None:
    sync(apisix, {"routes": [route("r1", "/a")]})
    before = apisix.config()
    apisix.fail_next(10, 503)
    result = sync(apisix, {"routes": [route("r1", "/changed")]})
    assert result.status is SyncStatus.FAILED and "503" in (result.error or "")
    assert apisix.config() == before


def test_a_transient_5xx_or_dropped_connection_is_retried(apisix: ApisixDouble) -> None:
    apisix.fail_next(1, 502)
    assert sync(apisix, {"routes": [route("r1", "/a")]}).attempts == 2
    apisix.drop_next(1)
    result = sync(apisix, {"routes": [route("r1", "/b")]})
    assert result.status is SyncStatus.APPLIED and result.attempts == 2


@pytest.mark.slow
def test_a_slow_gateway_times_out_and_is_left_untouched(apisix: ApisixDouble) -> None:
    sync(apisix, {"routes": [route("r1", "/a")]})
    before = apisix.config()
    apisix.set_latency(0.5)
    try:
        result = sync(apisix, {"routes": [route("r1", "/changed")]}, timeout=0.2)
    finally:
        apisix.set_latency(0)
    assert result.status is SyncStatus.FAILED and "timed out" in (result.error or "")
    assert apisix.config() == before and len(apisix.put_bodies) == 1


def test_two_gateways_one_down_the_other_is_applied(apisix: ApisixDouble) -> None:
    down = Endpoint(f"http://127.0.0.1:{free_port()}", Secret(KEY), timeout=1.0)
    results = sync_all([down, endpoint(apisix)], {"routes": [route("r1", "/a")]})
    assert [r.status for r in results] == [SyncStatus.FAILED, SyncStatus.APPLIED]
    assert results[0].url == down.url and results[1].url == apisix.url


def test_a_slow_gateway_does_not_delay_another(apisix: ApisixDouble) -> None:
    with ApisixDouble(KEY) as slow:
        slow.set_latency(0.4)
        try:
            results = sync_all([endpoint(slow, timeout=0.2), endpoint(apisix)],
                               {"routes": [route("r1", "/a")]})
        finally:
            slow.set_latency(0)
    assert [r.status for r in results] == [SyncStatus.FAILED, SyncStatus.APPLIED]
    assert results[1].duration < 0.4 < results[0].duration


def test_credentials_in_the_url_never_reach_results(apisix: ApisixDouble) -> None:
    url = apisix.url.replace("http://", "http://user:pa55word-xyz@")
    result = sync_gateway(Endpoint(url, Secret(KEY)), {"routes": [route("r1", "/a")]}, retry=FAST)
    assert result.status is SyncStatus.APPLIED and result.url == apisix.url


# ---------------------------------------------------------------------------------------------------------
# The deadlock matrix: whatever the gateway holds, a sync succeeds and the gateway holds the repo

TEMPLATES: dict[str, list[dict[str, Any]]] = {
    "routes": [{"id": "r1", "uri": "/r1", "upstream_id": "u1"},
               {"id": "r2", "uris": ["/r2", "/r2/*"], "upstream": {"type": "roundrobin",
                                                                   "nodes": {"127.0.0.1:1980": 1}}},
               {"id": "r3", "uri": "/r3", "service_id": "s1", "vars": [], "plugins": {}}],
    "services": [{"id": "s1", "upstream_id": "u1"}, {"id": "s2"}],
    "upstreams": [{"id": "u1", "type": "roundrobin", "nodes": {"127.0.0.1:1981": 1}},
                  {"id": "u2", "type": "chash", "key": "remote_addr",
                   "nodes": [{"host": "127.0.0.1", "port": 1982, "weight": 1}]}],
    "consumers": [{"username": "alice"}, {"username": "bob"}],
    "consumer_groups": [{"id": "g1", "plugins": {}}],
    "global_rules": [{"id": "gr1", "plugins": {"prometheus": {}}}],
    "plugin_configs": [{"id": "pc1", "plugins": {}}],
    "plugin_metadata": [{"id": "http-logger", "log_format": {"host": "$host"}}],
    "protos": [{"id": "p1", "content": 'syntax = "proto3";\npackage x;\nmessage M { string n = 1; }\n'}],
    "stream_routes": [{"id": "sr1", "server_port": 9100, "upstream_id": "u1"}],
    "secrets": [{"id": "vault/main", "uri": "http://127.0.0.1:8200", "prefix": "kv/apisix", "token": "tok"}],
    "ssls": [],
}


def vary(kind: str, item: dict[str, Any], n: int) -> dict[str, Any]:
    """The same item with a different value in a field its schema allows."""
    if n == 0:
        return dict(item)
    if kind == "global_rules":
        return {**item, "plugins": {"prometheus": {"prefer_name": n % 2 == 0}}}
    if kind == "plugin_metadata":
        return {**item, "log_format": {"host": "$host", "n": f"v{n}"}}
    if kind == "secrets":
        return {**item, "prefix": f"kv/v{n}"}
    return {**item, "desc": f"variant {n}"}


VERSIONS = st.one_of(st.integers(0, 10**13), st.integers(1_600_000_000_000, 1_900_000_000_000),
                     st.integers(0, 3))


@st.composite
def repo_items(draw: st.DrawFn, kind: str) -> list[dict[str, Any]]:
    templates = TEMPLATES[kind]
    picked = draw(st.lists(st.sampled_from(range(len(templates))), unique=True)) if templates else []
    return [vary(kind, templates[i], draw(st.integers(0, 2))) for i in picked]


def out_of_band_item(kind: str, n: int) -> dict[str, Any]:
    if kind == "consumers":
        return {"username": f"oob{n}"}
    if kind == "secrets":
        return {"id": f"vault/oob{n}", "uri": "http://127.0.0.1:8200", "prefix": "kv", "token": "x"}
    return {"id": f"oob{n}", "desc": "written by another tool"}


@st.composite
def live_items(draw: st.DrawFn, kind: str) -> list[dict[str, Any]]:
    """What another tool left: twins of repo items (maybe changed, maybe with its own index) and extras."""
    items = draw(repo_items(kind))
    for item in items:
        if draw(st.booleans()):
            item["modifiedIndex"] = draw(VERSIONS)
    items += [out_of_band_item(kind, n) for n in range(draw(st.integers(0, 2)))]
    return draw(st.permutations(items))


@pytest.mark.slow
@examples(1)
@given(data=st.data(), unmanaged=st.frozensets(st.sampled_from(KINDS), max_size=2))
def test_deadlock_matrix(shared_apisix: ApisixDouble, data: st.DataObject, unmanaged: frozenset[str]) -> None:
    double = shared_apisix
    for key in VERSIONED_KEYS:  # set any live state: versions, out-of-band items, twins
        items = data.draw(live_items(key), label=key) if key in KINDS else None
        double.out_of_band(key, items, version=data.draw(VERSIONS, label=version_key(key)))
    desired = {kind: data.draw(repo_items(kind), label=f"repo {kind}") for kind in KINDS}
    policy = Policy(unmanaged)
    before = double.config()
    result = sync(double, desired, policy)
    assert result.ok, (result.error, [str(p) for p in result.problems])
    assert result.attempts == 1
    after = double.config()
    for kind in KINDS:
        if kind in unmanaged:
            assert after.get(kind) == before.get(kind)
            assert after[version_key(kind)] == before[version_key(kind)]
        else:
            assert items_equal(desired[kind], after.get(kind)), kind
    assert after["plugins_conf_version"] == before["plugins_conf_version"]


LABELLED = ("routes", "services", "upstreams")  # kinds whose items carry labels: split between sources


@pytest.mark.slow
@examples(1)
@given(data=st.data(), count=st.integers(2, 3))
def test_deadlock_matrix_with_several_sources(shared_apisix: ApisixDouble, data: st.DataObject,
                                              count: int) -> None:
    """Whatever the gateway holds, one sync of a composition of sources with random ownerships (each
    kind whole to one source, or split between them by a label) is accepted at once."""
    double = shared_apisix
    for key in VERSIONED_KEYS:
        items = data.draw(live_items(key), label=key) if key in KINDS else None
        double.out_of_band(key, items, version=data.draw(VERSIONS, label=version_key(key)))
    claims: list[list[Claim]] = [[] for _ in range(count)]
    payloads: list[dict[str, list[dict[str, Any]]]] = [{} for _ in range(count)]
    for kind in KINDS:
        items = data.draw(repo_items(kind), label=f"repo {kind}")
        if kind in LABELLED and data.draw(st.booleans(), label=f"split {kind}"):
            for number in range(count):
                claims[number].append(Claim((kind,), None, (("team", f"t{number}"),)))
            for item in items:
                number = data.draw(st.integers(0, count - 1), label=f"owner of {kind} item")
                payloads[number].setdefault(kind, []).append({**item, "labels": {"team": f"t{number}"}})
        else:
            number = data.draw(st.integers(0, count - 1), label=f"owner of {kind}")
            claims[number].append(Claim((kind,)))
            payloads[number][kind] = items
    owners = [(f"s{n}", Ownership(tuple(c))) for n, c in enumerate(claims)]
    parts = [Part(name, "0" * 40, rendered_alone(payload), owns)
             for (name, owns), payload in zip(owners, payloads, strict=True)]
    assert not [p for part in parts for p in facts_of(part, owners).problems]
    composed = compose(parts)
    result = sync(double, Desired.of(composed.payload, MANAGE_ALL, composed.contents, composed.ids,
                                     composed.splits))
    assert result.ok, (result.error, [str(p) for p in result.problems])
    assert result.attempts == 1
    after = double.config()
    for kind in KINDS:
        assert items_equal(composed.payload.get(kind, []), after.get(kind)), kind


# ---------------------------------------------------------------------------------------------------------
# The command line


ROUTES = """routes:
  - id: r1
    uri: /a
    upstream_id: u1
upstreams:
  - id: u1
    type: roundrobin
    nodes:
      "127.0.0.1:1980": 1
"""


def cli_args(tmp_path: Path, double: ApisixDouble, key: str = KEY) -> list[str]:
    key_file = tmp_path / "admin.key"
    key_file.write_text(key + "\n")
    return ["--dir", str(tmp_path / "repo"), "--gateway", double.url, "--admin-key-file", str(key_file)]


@pytest.mark.slow
def test_seed_scenario_with_the_real_cli(tmp_path: Path, apisix: ApisixDouble) -> None:
    (tmp_path / "repo").mkdir()
    (tmp_path / "repo" / "apisix.yaml").write_text(ROUTES)
    # Routes live, written by another controller with millisecond versions; then a secrets manager
    # registered directly (version bump), which the repo knows nothing about.
    apisix.out_of_band("routes", [{"id": "r1", "uri": "/a", "upstream_id": "u1", "modifiedIndex": 17200}],
                       version=1720000000000)
    apisix.out_of_band("upstreams", [{"id": "u1", "type": "roundrobin", "nodes": {"127.0.0.1:1980": 1}}],
                       version=1720000000000)
    manager = {"id": "vault/ops", "uri": "http://127.0.0.1:8200", "prefix": "kv", "token": "ops-token-1"}
    apisix.out_of_band("secrets", [manager])
    args = cli_args(tmp_path, apisix)
    kept = run_gitsync("sync", "--once", *args, "--unmanaged", "secrets")
    assert kept.returncode == 0, kept.stderr
    assert kept.stdout == f"{apisix.url}: unchanged\n"  # routes equal, secrets not ours: nothing to push
    assert apisix.config()["secrets"] == [manager]
    apisix.out_of_band("routes", [], version=1720000000005)  # someone wiped the routes
    kept = run_gitsync("sync", "--once", *args, "--unmanaged", "secrets")
    assert kept.returncode == 0, kept.stderr
    assert kept.stdout == f"{apisix.url}: applied (routes changed), accepted\n"  # 3.18: not confirmed
    assert apisix.config()["secrets"] == [manager] and apisix.config()["routes_conf_version"] == 1720000000006
    # Managed secrets now: the manager would be pruned, which empties the kind. The deletion guard asks
    # for an explicit allowance; with it, the out-of-band manager goes.
    guarded = run_gitsync("sync", "--once", *args)
    assert guarded.returncode == 1
    assert "secrets: 1 → 0, deletes 1 of 1 (100 %)" in guarded.stdout + guarded.stderr
    assert apisix.config()["secrets"] == [manager]
    pruned = run_gitsync("sync", "--once", *args, "-vv", "--allow-delete", "secrets")
    assert pruned.returncode == 0, pruned.stderr
    assert "PUT /apisix/admin/configs" in pruned.stderr  # debug logging was on
    assert pruned.stdout == (f"{apisix.url}: applied (secrets changed), accepted; pruned 1 out-of-band "
                             "secrets: vault/ops\n")
    assert "secrets" not in apisix.config()
    assert httpx.get(apisix.proxy_url + "/a").headers.get("X-Route-Id") == "r1"
    assert "ops-token-1" not in kept.stdout + kept.stderr + pruned.stdout + pruned.stderr
    assert KEY not in kept.stderr + pruned.stderr


@pytest.mark.slow
def test_cli_diff_exit_codes_and_masked_secrets(tmp_path: Path, apisix: ApisixDouble) -> None:
    (tmp_path / "repo").mkdir()
    (tmp_path / "repo" / "apisix.yaml").write_text(
        ROUTES + "secrets:\n  - id: vault/main\n    uri: http://127.0.0.1:8200\n    prefix: kv\n"
                 "    token: ${{ secrets.VAULT_TOKEN }}\n")
    env = {"GITSYNC_SECRET_VAULT_TOKEN": "new-vault-token-77"}
    args = cli_args(tmp_path, apisix)
    apisix.out_of_band("secrets", [{"id": "vault/main", "uri": "http://127.0.0.1:8200", "prefix": "kv",
                                    "token": "old-vault-token-66"}, {"id": "vault/stray", "uri": "u",
                                                                     "prefix": "p", "token": "stray-tok-55"}])
    some = run_gitsync("diff", *args, env=env)
    assert some.returncode == 1, some.stderr
    lines = some.stdout.splitlines()
    assert lines[0] == f"{apisix.url}: 4 item change(s) in 3 kind(s)"
    assert "    + routes[r1]" in lines and "    + upstreams[u1]" in lines
    assert "    ~ secrets[vault/main]" in lines and '        token: "***" → "***"' in lines
    assert "    ! secrets[vault/stray]  (written out of band; pruned)" in lines
    assert "  secrets: secrets_conf_version 1 → 2" in lines
    for secret in ("new-vault-token-77", "old-vault-token-66", "stray-tok-55"):
        assert secret not in some.stdout + some.stderr
    assert apisix.put_bodies == []  # diff never pushes
    assert run_gitsync("sync", "--once", *args, env=env).returncode == 0
    none = run_gitsync("diff", *args, env=env)
    assert (none.returncode, none.stdout) == (0, f"{apisix.url}: no changes\n")
    wrong = run_gitsync("diff", *cli_args(tmp_path, apisix, key="wrong-key-0000"), env=env)
    assert wrong.returncode == 2 and "401" in wrong.stderr and "wrong-key-0000" not in wrong.stderr


@pytest.mark.slow
def test_cli_sync_failure_exit_code_and_problem_lines(tmp_path: Path, apisix: ApisixDouble) -> None:
    (tmp_path / "repo").mkdir()
    (tmp_path / "repo" / "rules.yaml").write_text(RULES)
    apisix.out_of_band("global_rules", [LEGACY_RULE])
    failed = run_gitsync("sync", "--once", *cli_args(tmp_path, apisix), "--push-attempts", "2")
    assert failed.returncode == 1
    assert failed.stdout.startswith(f"{apisix.url}: failed: ")
    assert ("rules.yaml:2:5: global_rules[metrics]: plugin 'prometheus' already exists in global rule "
            "with id 'legacy'") in failed.stderr.splitlines()


def test_display_url_drops_credentials_and_never_raises() -> None:
    from gitsync.push.admin_api import display_url

    assert display_url("http://admin:pw-1@127.0.0.1:9180/") == "http://127.0.0.1:9180"
    assert display_url("https://token-1@[::1]:9180/x") == "https://[::1]:9180/x"
    assert display_url("http://127.0.0.1:9180") == "http://127.0.0.1:9180"
    assert display_url("http://u:pw-1@host:notaport") == "http://host:notaport"  # no ValueError


def test_the_policy_of_the_settings_and_of_the_commit(tmp_path: Path) -> None:
    config = tmp_path / "gitsync.toml"
    config.write_text('[guard]\nguard = false\nmax_delete = 0.5\nmax_delete_count = 3\n'
                      'max_delete_kinds = { routes = 0.1 }\nallow_delete = ["ssls"]\n')
    settings = load(config=config, env={})
    policy = guard_policy_from_settings(settings, frozenset({"routes"}))
    assert policy == GuardPolicy(False, 0.5, 3, {"routes": 0.1}, frozenset({"routes", "ssls"}), False)
    assert guard_policy_from_settings(settings, by_flag=True).by_flag
    assert guard_policy_from_settings(settings).allowed == frozenset({"ssls"})
