"""The pure reconcile plan, against a model of APISIX's per-key version algorithm (docs/architecture.md).

The model is a few lines of the gateway's own rules: a key left out is wiped and bumped,
a lower version rejects the whole push, an equal one keeps live content, a higher one
replaces it; GET renders empty arrays as ``{}``.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gitsync.kinds import KINDS, VERSIONED_KEYS, item_id, version_key
from gitsync.reconcile import (
    VERSION_LIMIT,
    KindStatus,
    Policy,
    canonical_json,
    content_index,
    content_indexes,
    item_changes,
    item_content,
    items_equal,
    normalize,
    plan,
)


class Stale(Exception):
    pass


def fresh(keys: tuple[str, ...] = VERSIONED_KEYS) -> dict[str, Any]:
    return {version_key(k): 0 for k in keys}


def render_empty_arrays_as_objects(value: Any) -> Any:
    """APISIX's GET quirk: every empty array anywhere comes back as ``{}``."""
    if isinstance(value, dict):
        return {k: render_empty_arrays_as_objects(v) for k, v in value.items()}
    if isinstance(value, list):
        return [render_empty_arrays_as_objects(v) for v in value] if value else {}
    return value


def apisix_put(stored: dict[str, Any], body: bytes) -> dict[str, Any]:
    """Apply a PUT to the stored config as APISIX 3.17+ does, or raise `Stale` (a 400)."""
    sent = json.loads(body)
    keys = [k[: -len("_conf_version")] for k in stored if k.endswith("_conf_version")]
    new: dict[str, Any] = {}
    for key in keys:
        vk = version_key(key)
        live_v = stored[vk]
        if vk not in sent:
            new[vk] = live_v + 1
            if sent.get(key):
                new[key] = sent[key]
        elif sent[vk] < live_v:
            raise Stale(f"{vk} must be greater than or equal to ({live_v})")
        elif sent[vk] == live_v:
            new[vk] = live_v
            if key in stored:
                new[key] = stored[key]
        else:
            new[vk] = sent[vk]
            if sent.get(key):
                new[key] = sent[key]
    return new


def get(stored: dict[str, Any]) -> dict[str, Any]:
    return render_empty_arrays_as_objects(json.loads(json.dumps(stored)))


def route(rid: str, uri: str = "/a", **extra: Any) -> dict[str, Any]:
    return {"id": rid, "uri": uri, "upstream": {"type": "roundrobin", "nodes": {"127.0.0.1:80": 1}}, **extra}


def test_fresh_gateway_gets_every_key_and_only_changed_lists() -> None:
    desired = {"routes": [route("r1")], "upstreams": []}
    p = plan(desired, fresh())
    body = json.loads(p.body)
    assert set(body) == {version_key(k) for k in VERSIONED_KEYS} | {"routes"}
    assert body["routes_conf_version"] == 1
    assert all(body[version_key(k)] == 0 for k in VERSIONED_KEYS if k != "routes")
    assert p.changes and p.kind("routes").added == ("r1",)
    index = body["routes"][0]["modifiedIndex"]
    assert isinstance(index, int) and 0 < index < 10**14
    assert p.body == canonical_json(body)  # canonical bytes


def test_repeat_plan_on_the_applied_config_changes_nothing() -> None:
    desired = {"routes": [route("r1"), route("r2", "/b")], "upstreams": [{"id": "u1", "nodes": []}]}
    live = get(apisix_put(fresh(), plan(desired, fresh()).body))
    assert live["upstreams"][0]["nodes"] == {}  # the GET quirk is in play
    again = plan(desired, live)
    assert not again.changes
    assert {k.status for k in again.kinds} == {KindStatus.UNCHANGED, KindStatus.KEPT}
    assert set(json.loads(again.body)) == {version_key(k) for k in VERSIONED_KEYS}  # versions only


def test_empty_object_and_array_are_equal_recursively() -> None:
    assert normalize({"a": {}, "b": [{"c": []}]}) == normalize({"a": [], "b": [{"c": {}}]})
    assert items_equal([{"id": "u", "nodes": []}], [{"id": "u", "nodes": {}, "modifiedIndex": 7}])
    assert items_equal([], {})
    assert not items_equal([{"id": "u"}], {"x": 1})


def test_numbers_compare_as_cjson_stores_them_and_types_stay_apart() -> None:
    assert canonical_json(normalize(1.0)) == canonical_json(normalize(1))
    assert normalize(0.12345678901234567) == normalize(0.12345678901235)
    assert canonical_json(normalize(True)) != canonical_json(normalize(1))
    assert not items_equal([{"id": "a", "x": True}], [{"id": "a", "x": 1}])


def test_modified_index_kept_when_equal_and_new_when_changed() -> None:
    live = get(apisix_put(fresh(), plan({"routes": [route("r1"), route("r2", "/b")]}, fresh()).body))
    old = {r["id"]: r["modifiedIndex"] for r in live["routes"]}
    p = plan({"routes": [route("r1"), route("r2", "/changed"), route("r3")]}, live)
    sent = {r["id"]: r["modifiedIndex"] for r in json.loads(p.body)["routes"]}
    assert sent["r1"] == old["r1"]
    assert sent["r2"] != old["r2"]
    kp = p.kind("routes")
    assert (kp.added, kp.modified, kp.removed, kp.pruned) == (("r3",), ("r2",), (), ())


def test_twin_index_kept_even_when_written_by_another_tool() -> None:
    live = fresh() | {"routes": [route("r1", modifiedIndex=1720000000000), route("r2", modifiedIndex=5)],
                      "routes_conf_version": 1720000000000}
    p = plan({"routes": [route("r1"), route("r2", "/new")]}, live)
    sent = {r["id"]: r["modifiedIndex"] for r in json.loads(p.body)["routes"]}
    assert sent["r1"] == 1720000000000 and sent["r2"] not in (5, None)
    assert json.loads(p.body)["routes_conf_version"] == 1720000000001


def test_derived_index_never_equals_the_twin() -> None:
    item = route("r1")
    usual, stand_in = content_indexes(item)
    assert usual != stand_in
    assert content_index(item) == usual and content_index(item, avoid=usual) == stand_in
    assert all(0 < i < VERSION_LIMIT for i in (usual, stand_in))
    # an index on the input is not content
    assert content_index({**item, "modifiedIndex": 3}) == usual


def test_out_of_band_items_are_pruned_and_gitsync_items_removed() -> None:
    ours = get(apisix_put(fresh(), plan({"routes": [route("r1"), route("r2")]}, fresh()).body))
    ours["routes"].append(route("oob", modifiedIndex=1))
    ours["routes"].append(route("oob2"))
    ours["routes_conf_version"] += 3
    p = plan({"routes": [route("r1")]}, ours)
    kp = p.kind("routes")
    assert kp.removed == ("r2",) and kp.pruned == ("oob", "oob2") and p.pruned == {"routes": ("oob", "oob2")}
    assert kp.version == ours["routes_conf_version"] + 1
    changes = {(c.action, c.id) for c in item_changes({"routes": [route("r1")]}, ours, p)}
    assert changes == {("remove", "r2"), ("prune", "oob"), ("prune", "oob2")}


def test_seed_scenario_out_of_band_secret_manager() -> None:
    """Routes live; a secrets manager registered out of band bumped secrets to 1; the repo has no secrets."""
    desired = {"routes": [route("r1")]}
    live = get(apisix_put(fresh(), plan(desired, fresh()).body))
    live["secrets"] = [{"id": "vault/x", "uri": "http://127.0.0.1:8200", "prefix": "kv", "token": "t"}]
    live["secrets_conf_version"] = 1
    kept = plan(desired, live, Policy(frozenset({"secrets"})))
    assert not kept.changes and kept.kind("secrets").status is KindStatus.UNMANAGED
    assert kept.kind("secrets").count == 1
    assert get(apisix_put(live, kept.body))["secrets"] == live["secrets"]
    pruned = plan(desired, live)
    assert pruned.kind("secrets").pruned == ("vault/x",) and json.loads(pruned.body)["secrets"] == []
    after = get(apisix_put(live, pruned.body))
    assert "secrets" not in after and after["secrets_conf_version"] == 2
    assert after["routes"] == live["routes"]


def test_plugins_and_unknown_version_keys_are_echoed() -> None:
    live = fresh() | {"plugins_conf_version": 9, "future_things_conf_version": 4,
                      "future_things": [{"id": "f"}]}
    p = plan({"routes": [route("r1")]}, live)
    body = json.loads(p.body)
    assert body["plugins_conf_version"] == 9 and body["future_things_conf_version"] == 4
    assert "future_things" not in body and p.kind("future_things").status is KindStatus.KEPT


def test_float_and_timestamp_versions() -> None:
    live = fresh() | {"routes_conf_version": 1.5, "services_conf_version": 1720000000123}
    p = plan({"routes": [route("r")], "services": [{"id": "s"}]}, live)
    body = json.loads(p.body)
    assert body["routes_conf_version"] == 2 and body["services_conf_version"] == 1720000000124


def test_version_at_the_limit_is_a_problem_not_a_wrong_push() -> None:
    live = fresh() | {"routes_conf_version": VERSION_LIMIT - 1}
    p = plan({"routes": [route("r")]}, live)
    assert p.problems and "routes_conf_version" in str(p.problems[0])
    # unchanged kinds at any value are fine: echoed as they are
    assert not plan({}, fresh() | {"routes_conf_version": VERSION_LIMIT * 5}).problems


def test_kind_the_gateway_does_not_know_is_a_problem() -> None:
    live = fresh(tuple(k for k in VERSIONED_KEYS if k not in ("stream_routes", "plugins")))  # APISIX 3.13
    p = plan({"stream_routes": [{"id": "s1", "server_port": 9100}]}, live)
    assert p.problems and "stream_routes" in p.problems[0].message
    assert not plan({"stream_routes": []}, live).problems


def test_order_change_alone_is_a_change() -> None:
    live = get(apisix_put(fresh(), plan({"routes": [route("a"), route("b")]}, fresh()).body))
    p = plan({"routes": [route("b"), route("a")]}, live)
    kp = p.kind("routes")
    assert kp.status is KindStatus.CHANGED and not (kp.added or kp.modified or kp.removed or kp.pruned)
    sent = {r["id"]: r["modifiedIndex"] for r in json.loads(p.body)["routes"]}
    assert sent == {r["id"]: r["modifiedIndex"] for r in live["routes"]}


def test_digest_depends_on_managed_content_only() -> None:
    a = {"routes": [route("r1")], "secrets": [{"id": "vault/a", "uri": "u", "prefix": "p", "token": "t"}]}
    b = {"routes": [route("r1", modifiedIndex=4)]}
    assert plan(a, fresh()).digest != plan(b, fresh()).digest
    only_routes = Policy(frozenset(set(KINDS) - {"routes"}))
    assert plan(a, fresh(), only_routes).digest == plan(b, fresh(), only_routes).digest
    assert plan(a, fresh()).digest == plan(a, get(apisix_put(fresh(), plan(a, fresh()).body))).digest


def test_plugin_metadata_gets_no_modified_index() -> None:
    p = plan({"plugin_metadata": [{"id": "http-logger", "log_format": {"host": "$host"}}]}, fresh())
    assert "modifiedIndex" not in json.loads(p.body)["plugin_metadata"][0]


# ---------------------------------------------------------------------------------------------------------
# Property: whatever the gateway holds, the push is accepted and the gateway ends up holding the repo.

IDS = st.sampled_from(["a", "b", "c", "d"])
SCALARS = st.one_of(st.integers(-5, 10**15), st.booleans(), st.text("xyz/", max_size=3),
                    st.floats(allow_nan=False, allow_infinity=False, width=32), st.none())
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=2),
                                                       st.dictionaries(st.sampled_from("pqr"), inner,
                                                                       max_size=2)), max_leaves=4)
VERSIONS = st.one_of(st.integers(0, 10**13), st.integers(1_600_000_000_000, 1_900_000_000_000),
                     st.integers(0, 5))


@st.composite
def items(draw: st.DrawFn, kind: str, live: bool) -> list[dict[str, Any]]:
    ids = draw(st.lists(IDS, unique=True, max_size=3))
    out = []
    for i in ids:
        fields = draw(st.dictionaries(st.sampled_from(["desc", "nodes", "vars", "x"]), VALUES, max_size=2))
        item: dict[str, Any] = {("username" if kind == "consumers" else "id"): i, **fields}
        if live and draw(st.booleans()):
            item["modifiedIndex"] = draw(VERSIONS)
        out.append(item)
    return out


@st.composite
def gateway_states(draw: st.DrawFn) -> dict[str, Any]:
    stored: dict[str, Any] = {}
    for key in VERSIONED_KEYS:
        stored[version_key(key)] = draw(VERSIONS)
        if key in KINDS and draw(st.booleans()):
            stored[key] = draw(items(key, live=True)) or []
    if draw(st.booleans()):
        stored["newer_kind_conf_version"] = draw(VERSIONS)
        stored["newer_kind"] = [{"id": "n"}]
    return stored


@st.composite
def repos(draw: st.DrawFn) -> dict[str, list[dict[str, Any]]]:
    return {k: draw(items(k, live=False)) for k in draw(st.lists(st.sampled_from(KINDS), unique=True))}


@pytest.mark.slow
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stored=gateway_states(), desired=repos(), unmanaged=st.frozensets(st.sampled_from(KINDS), max_size=3))
def test_any_live_state_converges_without_rejection(stored, desired, unmanaged) -> None:
    policy = Policy(unmanaged)
    live = get(stored)
    p = plan(desired, live, policy)
    assert not p.problems
    assert all(v < VERSION_LIMIT for k in p.kinds if k.status is KindStatus.CHANGED for v in [k.version])
    after = apisix_put(stored, p.body)  # never Stale: no version below live
    seen = get(after)
    for kind in KINDS:
        if policy.manages(kind):
            assert items_equal(desired.get(kind, []), seen.get(kind)), kind
        else:
            assert seen.get(kind) == live.get(kind) and seen[version_key(kind)] == live[version_key(kind)]
    assert seen.get("newer_kind") == live.get("newer_kind")
    # modifiedIndex changes iff content changes, against the live twin
    for kind in KINDS:
        if not policy.manages(kind) or kind == "plugin_metadata":
            continue
        live_items = live.get(kind) if isinstance(live.get(kind), list) else []
        twins = {item_id(kind, i): i for i in live_items[::-1]}
        for item in seen.get(kind) or []:
            twin = twins.get(item_id(kind, item))
            assert twin is not None or 0 < item["modifiedIndex"] < VERSION_LIMIT
            if twin is None or "modifiedIndex" not in twin:
                continue
            same = canonical_json(item_content(twin)) == canonical_json(item_content(item))
            assert (item["modifiedIndex"] == twin["modifiedIndex"]) == same
    # and a second sync is a no-op
    assert not plan(desired, seen, policy).changes
    # the plan did not mutate its inputs
    assert get(stored) == live and copy.deepcopy(desired) == desired


@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_round_trips(kind: str) -> None:
    desired = {kind: [{"id": "x1", "desc": "d", "list": []}]}
    live = get(apisix_put(fresh(), plan(desired, fresh()).body))
    assert not plan(desired, live).changes
