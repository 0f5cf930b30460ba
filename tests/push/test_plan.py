"""The pure reconcile plan, against the APISIX double's own version rule and data plane.

The double keeps versions the way APISIX 3.18 does (a key left out is wiped and bumped, a
lower version refuses the whole push, an equal one keeps live content, a higher one
replaces it; every number stored with 14 significant digits; the data plane picks a kind
up only when its stored version changes; GET renders empty arrays as ``{}``). Its schema
validation is left out here, so that items can be anything.
"""

from __future__ import annotations

import copy
import decimal
import hashlib
import json
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from gitsync.content import content_bytes
from gitsync.kinds import KINDS, VERSIONED_KEYS, item_id, version_key
from gitsync.ownership import Claim, Ownership
from gitsync.push.plan import (
    VERSION_LIMIT,
    Desired,
    KindStatus,
    LiveView,
    Policy,
    canonical_json,
    changed_fields,
    content_index,
    content_indexes,
    item_changes,
    item_content,
    items_equal,
    next_version,
    normalize,
    plan,
    written_by_gitsync,
)
from gitsync.render.compose import Part, compose, facts_of
from gitsync.testing.apisix import ApisixDouble
from gitsync.testing.cjson import round_numbers
from testkit.profiles import examples
from testkit.renders import rendered_alone


class Stale(Exception):
    pass


def fresh(keys: tuple[str, ...] = VERSIONED_KEYS) -> dict[str, Any]:
    return {version_key(k): 0 for k in keys}


class Gateway:
    """The double's PUT after validation (refuse a lower version, store, let the data plane pick
    kinds up) and its GET, without HTTP or schema checks."""

    def __init__(self, stored: dict[str, Any] | None = None) -> None:
        self.double = ApisixDouble()
        for key in VERSIONED_KEYS:  # another writer left this state
            if stored is not None and version_key(key) in stored:
                self.double.out_of_band(key, stored.get(key), version=stored[version_key(key)])

    def get(self) -> dict[str, Any]:
        return json.loads(self.double._get("application/json").body)

    def put(self, body: bytes) -> dict[str, Any]:
        """Apply a PUT or raise `Stale` (the gateway's 400); return what GET shows after it."""
        double, sent = self.double, json.loads(body)
        old = double._stored
        refusal = double._stale_version(sent, old, double._keys)
        if refusal:
            raise Stale(refusal)
        double._commit(old, double._next_config(sent, old))
        return self.get()

    def served(self, kind: str) -> list[Any]:
        """What the data plane runs for `kind`, as content (no modifiedIndex)."""
        return [item_content(item) for item in self.double.running(kind).values()]


def applied(body: bytes, stored: dict[str, Any] | None = None) -> dict[str, Any]:
    """GET after one PUT of `body` on a gateway holding `stored` (fresh when None)."""
    return Gateway(stored).put(body)


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
    live = applied(plan(desired, fresh()).body)
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
    live = applied(plan({"routes": [route("r1"), route("r2", "/b")]}, fresh()).body)
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
    ours = applied(plan({"routes": [route("r1"), route("r2")]}, fresh()).body)
    ours["routes"].append(route("oob", modifiedIndex=1))
    ours["routes"].append(route("oob2"))
    ours["routes_conf_version"] += 3
    p = plan({"routes": [route("r1")]}, ours)
    kp = p.kind("routes")
    assert kp.removed == ("r2",) and kp.pruned == ("oob", "oob2") and p.pruned == {"routes": ("oob", "oob2")}
    assert kp.version == ours["routes_conf_version"] + 1
    changes = {(c.action, c.id) for c in item_changes({"routes": [route("r1")]}, ours, p)}
    assert changes == {("remove", "r2"), ("prune", "oob"), ("prune", "oob2")}


@pytest.mark.parametrize(("owned", "removed", "pruned"), [
    (None, ("r2",), ("oob",)),  # without a record: gitsync's own by the modifiedIndex it derives
    ({"routes": ["r2"]}, ("r2",), ("oob",)),
    ({"routes": ["oob"]}, ("oob",), ("r2",)),  # the record wins over the index
    ({"routes": ["r2", "oob"]}, ("r2", "oob"), ()),
    ({"routes": []}, (), ("r2", "oob")),
    ({"upstreams": ["r2"]}, (), ("r2", "oob")),  # a record without this kind: nothing of it is ours
])
def test_owned_tells_items_gitsync_pushed_from_items_written_out_of_band(owned, removed, pruned) -> None:
    live = applied(plan({"routes": [route("r1"), route("r2")]}, fresh()).body)
    live["routes"].append(route("oob", modifiedIndex=1))
    kp = plan({"routes": [route("r1")]}, live, owned=owned).kind("routes")
    assert (kp.removed, kp.pruned) == (removed, pruned)


def test_owned_changes_only_what_is_said_of_the_items_not_the_body() -> None:
    live = applied(plan({"routes": [route("r1"), route("r2")]}, fresh()).body)
    bodies = {plan({"routes": [route("r1")]}, live, owned=owned).body for owned in (None, {"routes": []})}
    assert len(bodies) == 1


def test_seed_scenario_out_of_band_secret_manager() -> None:
    """Routes live; a secrets manager registered out of band bumped secrets to 1; the repo has no secrets."""
    desired = {"routes": [route("r1")]}
    gateway = Gateway()
    gateway.put(plan(desired, fresh()).body)
    manager = {"id": "vault/x", "uri": "http://127.0.0.1:8200", "prefix": "kv", "token": "t"}
    gateway.double.out_of_band("secrets", [manager])
    live = gateway.get()
    assert live["secrets_conf_version"] == 1
    kept = plan(desired, live, Policy(frozenset({"secrets"})))
    assert not kept.changes and kept.kind("secrets").status is KindStatus.UNMANAGED
    assert kept.kind("secrets").count == 1
    assert gateway.put(kept.body)["secrets"] == [manager]
    pruned = plan(desired, live)
    assert pruned.kind("secrets").pruned == ("vault/x",) and json.loads(pruned.body)["secrets"] == []
    after = gateway.put(pruned.body)
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


@pytest.mark.parametrize(("live", "sent"), [
    (5, 6), (1.5, 2), (-1.5, -1), (-0.25, 0), (99999999999999, 100000000000000),
    (1720000000123, 1720000000124),  # milliseconds: still below 10^14
    (1.7000000000001e15, 1700000000000200),  # live + 1 would round back to the stored value
    (1.2345678901235e17, 1.2345678901236e17),  # a value APISIX rounded up
    (1e17, 1.0000000000001e17), (1e20, 1.0000000000001e20),
    (-1e20, -9.9999999999999e19),  # towards zero the digits below the power of ten count
    (-1e14, -99999999999999), (1e308, 1.0000000000001e308),
    # the next integer exactly at the magnitude limit is not stored apart from the live value: 14 digits
    (99999999999999.5, 100000000000010), (-100000000000000.5, -99999999999999),
    (10**14, 100000000000010), (99999999999998.5, 99999999999999), (-99999999999999.5, -99999999999999),
])
def test_a_changed_kind_gets_the_next_version_apisix_stores_apart(live: float, sent: float) -> None:
    body = json.loads(plan({"routes": [route("r")]}, fresh() | {"routes_conf_version": live}).body)
    assert body["routes_conf_version"] == sent and type(body["routes_conf_version"]) is type(sent)


def test_the_largest_storable_version_is_the_only_one_that_stops_a_change() -> None:
    top = 1.7976931348623e308  # %.14g of the largest double: no 14-digit number above it is finite
    p = plan({"routes": [route("r")]}, fresh() | {"routes_conf_version": top})
    assert [str(problem) for problem in p.problems] == [
        "routes: routes_conf_version is 1.7976931348623e+308 on the gateway, the largest number APISIX can "
        "store: no version can follow it until the gateway restarts"]
    # unchanged kinds at any value are fine: echoed as they are
    assert not plan({}, fresh() | {"routes_conf_version": top}).problems
    assert json.loads(plan({}, fresh() | {"routes_conf_version": top}).body)["routes_conf_version"] == top


_FOURTEEN_DIGITS = decimal.Context(prec=14)
STORED_VERSIONS = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False),  # every magnitude a JSON number can take
    st.integers(-10**20, 10**20), st.integers(-10**15, 10**15),
    st.floats(-1e20, 1e20, allow_nan=False), st.floats(-1, 1, allow_nan=False),
).map(round_numbers)  # what APISIX holds: 14 significant digits


@pytest.mark.slow
@examples(3)
@given(stored=STORED_VERSIONS)
@example(stored=1.7000000000001e15)
@example(stored=1.7976931348623e308)
@example(stored=-1e20)
@example(stored=5e-324)
def test_next_version_is_stored_apart_and_read_back_exactly(stored: float) -> None:
    sent = next_version(stored)
    if sent is None:
        assert stored == 1.7976931348623e308
        return
    as_read = json.loads(canonical_json(sent))  # what the gateway parses from the PUT body
    assert as_read == sent and float(as_read) > stored
    assert round_numbers(as_read) == as_read  # stored exactly as sent: a GET shows it back
    if abs(sent) < VERSION_LIMIT:
        assert type(sent) is int and sent - 1 <= stored  # the next integer
    else:  # the next number with 14 significant digits: the one below it is not above the stored one
        assert float(_FOURTEEN_DIGITS.next_minus(decimal.Decimal(f"{sent:.14g}"))) <= stored
    gateway = Gateway(fresh() | {"routes_conf_version": stored, "routes": [route("r", "/old")]})
    gateway.put(canonical_json(fresh() | {"routes_conf_version": sent, "routes": [route("r", "/new")]}))
    assert gateway.served("routes") == [item_content(route("r", "/new"))]  # the data plane picked it up


def test_kind_the_gateway_does_not_know_is_a_problem() -> None:
    live = fresh(tuple(k for k in VERSIONED_KEYS if k not in ("stream_routes", "plugins")))  # APISIX 3.13
    p = plan({"stream_routes": [{"id": "s1", "server_port": 9100}]}, live)
    assert p.problems and "stream_routes" in p.problems[0].message
    assert not plan({"stream_routes": []}, live).problems


def test_order_change_alone_is_a_change() -> None:
    live = applied(plan({"routes": [route("a"), route("b")]}, fresh()).body)
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
    assert plan(a, fresh()).digest == plan(a, applied(plan(a, fresh()).body)).digest


def test_digest_is_sha256_of_each_kinds_items_one_per_line() -> None:
    """The digest's value is pinned: gateways hold the digests of earlier pushes as their X-Digest, and
    a gitsync that worked out another for the same content would not know its own push after an
    upgrade (a GET instead, and a 202 where a 204 was due)."""
    desired = {"routes": [route("r1"), route("r2", uri="/b")], "upstreams": [{"id": "u1", "nodes": {}}],
               "secrets": [{"id": "vault/a", "uri": "u", "prefix": "p", "token": "t"}]}
    got = Desired.of(desired)
    lines = b"".join(kind.encode() + b"\n" + b"\n".join(canonical_json(item_content(item))
                                                        for item in desired.get(kind, ())) + b"\n\n"
                     for kind in got.wanted)
    assert got.digest == hashlib.sha256(lines).hexdigest()
    assert {"routes", "upstreams", "secrets", "ssls"} <= set(got.wanted)  # empty kinds count too


def test_plugin_metadata_gets_no_modified_index() -> None:
    p = plan({"plugin_metadata": [{"id": "http-logger", "log_format": {"host": "$host"}}]}, fresh())
    assert "modifiedIndex" not in json.loads(p.body)["plugin_metadata"][0]


# ---------------------------------------------------------------------------------------------------------
# Property: whatever the gateway holds, the push is accepted and the gateway ends up holding the repo.

IDS = st.sampled_from(["a", "b", "c", "d"])
#: Item contents, from a fixed pool (cheap to draw): pairs that APISIX stores as the same ({} for
#: [], numbers at 14 significant digits) and pairs that must stay apart (true and 1, 1 and "1").
FIELDS = st.sampled_from([
    {}, {"desc": "x"}, {"desc": "1"}, {"desc": 1}, {"desc": 1.0}, {"desc": True}, {"desc": None},
    {"nodes": {}}, {"nodes": []}, {"nodes": [{}]}, {"nodes": {"p": []}}, {"nodes": {"p": {}}},
    {"x": 10**15}, {"x": 10**15 + 1}, {"x": 0.12345678901234567}, {"x": 0.12345678901235},
    {"x": 123456789012345678, "vars": [[]]}, {"vars": [1, "x"], "desc": ""}, {"vars": {"q": {"r": 1.5}}},
    {"x": -2.5, "desc": "y/z"}, {"x": 3.4028234663852886e38}, {"nodes": [{"p": [True, 0]}], "x": 1e-7},
])
VERSIONS = st.one_of(
    st.sampled_from([0, 1, 5, 99999999999999, 10**14, 1.7000000000001e15, 123456789012345678, 10**17 + 1,
                     1_720_000_000_000, -3, 0.5]),
    st.integers(0, 10**20),  # up to nanosecond timestamps, and beyond
    st.floats(-1e20, 1e20, allow_nan=False),  # negative and fractional: the gateway accepts them
)
INDEXES = st.none() | st.integers(0, 10**13) | st.integers(10**13, 10**20)  # modifiedIndex is an integer


def items(kind: str, live: bool) -> st.SearchStrategy[list[dict[str, Any]]]:
    key = "username" if kind == "consumers" else "id"

    def item(drawn: tuple[str, dict[str, Any], int | None]) -> dict[str, Any]:
        name, fields, index = drawn
        return {key: name, **fields} | ({} if index is None else {"modifiedIndex": index})

    entries = st.tuples(IDS, FIELDS, INDEXES if live else st.none())
    listed = st.lists(entries, max_size=3, unique_by=lambda entry: entry[0])
    return listed.map(lambda drawn: [item(e) for e in drawn])


@st.composite
def gateway_states(draw: st.DrawFn) -> dict[str, Any]:
    stored: dict[str, Any] = {version_key(key): draw(VERSIONS) for key in VERSIONED_KEYS}
    for kind in draw(st.lists(st.sampled_from(KINDS), unique=True)):
        stored[kind] = draw(items(kind, live=True))
    return stored


@st.composite
def repos(draw: st.DrawFn) -> dict[str, list[dict[str, Any]]]:
    return {k: draw(items(k, live=False)) for k in draw(st.lists(st.sampled_from(KINDS), unique=True))}


@pytest.mark.slow
@examples(2.5)
@given(stored=gateway_states(), desired=repos(), unmanaged=st.frozensets(st.sampled_from(KINDS), max_size=3))
def test_any_live_state_converges_without_rejection(stored, desired, unmanaged) -> None:
    converges(stored, desired, unmanaged)


def converges(stored: dict[str, Any], desired: dict[str, list[dict[str, Any]]],
              unmanaged: frozenset[str]) -> None:
    """One plan and PUT bring a gateway holding `stored` to `desired` without a rejection, serve what
    changed, keep modifiedIndex with content, and leave nothing to do."""
    policy = Policy(unmanaged)
    gateway = Gateway(stored)
    live = gateway.get()
    p = plan(desired, live, policy)
    assert not p.problems
    seen = gateway.put(p.body)  # never Stale: no version below live
    for kind in KINDS:
        if policy.manages(kind):
            assert items_equal(desired.get(kind, []), seen.get(kind)), kind
        else:
            assert seen.get(kind) == live.get(kind) and seen[version_key(kind)] == live[version_key(kind)]
    for kind_plan in p.kinds:  # what changed is served: its stored version moved, at any magnitude
        if kind_plan.status is KindStatus.CHANGED:
            assert seen[kind_plan.version_key] != live[kind_plan.version_key]
            served = gateway.served(kind_plan.key)
            assert served == [item_content(i) for i in desired.get(kind_plan.key, [])], kind_plan.key
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
    assert copy.deepcopy(desired) == desired


# Several sources, one payload: each source owns items of some kinds (all of a kind, or those with its
# id prefix), may declare some it does not own, and the composition of the sources whose items are
# all theirs converges like one repo.


@st.composite
def ownerships(draw: st.DrawFn) -> list[Ownership]:
    """2 to 4 sources; each kind unowned, owned whole by one source, or split by prefix among some."""
    count = draw(st.integers(2, 4))
    claims: list[list[Claim]] = [[] for _ in range(count)]
    for kind in KINDS:
        mode = draw(st.sampled_from(["none", "whole", "split"]))
        if mode == "whole":
            claims[draw(st.integers(0, count - 1))].append(Claim((kind,)))
        elif mode == "split":
            for number in draw(st.sets(st.integers(0, count - 1), min_size=1)):
                claims[number].append(Claim((kind,), f"s{number}-"))
    return [Ownership(tuple(c)) for c in claims]


@st.composite
def sources(draw: st.DrawFn) -> list[tuple[str, Ownership, dict[str, list[dict[str, Any]]]]]:
    """Sources with random ownerships, each declaring items of its own (and, now and then, not its own)."""
    made = []
    for number, owns in enumerate(draw(ownerships())):
        payload: dict[str, list[dict[str, Any]]] = {}
        for kind in draw(st.lists(st.sampled_from(KINDS), unique=True, max_size=4)):
            key = "username" if kind == "consumers" else "id"
            own = [claim.prefix or "" for claim in owns.claims if kind in claim.kinds]
            prefixes = [*own, "s9-"] if draw(st.integers(0, 4)) == 0 else own  # s9-: nobody's
            if prefixes:
                names = draw(st.lists(st.tuples(st.sampled_from(prefixes), IDS, FIELDS), max_size=3,
                                      unique_by=lambda drawn: drawn[0] + drawn[1]))
                payload[kind] = [{key: prefix + name, **fields} for prefix, name, fields in names]
        made.append((f"s{number}", owns, payload))
    return made


@pytest.mark.slow
@examples(2)
@given(stored=gateway_states(), drawn=sources(), unmanaged=st.frozensets(st.sampled_from(KINDS), max_size=2))
def test_several_sources_with_random_ownerships_compose_and_converge_without_rejection(
        stored, drawn, unmanaged) -> None:
    others = [(name, owns) for name, owns, _ in drawn]
    parts = []
    for name, owns, payload in drawn:
        part = Part(name, "0" * 40, rendered_alone(payload), owns)
        refused = {(p.kind, p.id) for p in facts_of(part, others).problems}
        assert refused == {(kind, item_id(kind, item)) for kind, items in payload.items() for item in items
                           if not owns.owns(kind, item_id(kind, item), item)}
        if not refused:  # a source declaring what it does not own stays out (at its last good commit)
            parts.append(part)
    composed = compose(parts)
    for kind, items in composed.payload.items():  # one owner each, in the sources' order
        owners = [next(n for n, owns in others if owns.owns(kind, item_id(kind, i), i)) for i in items]
        assert owners == sorted(owners, key=[n for n, _ in others].index)
        assert len({item_id(kind, i) for i in items}) == len(items)
        assert composed.ids[kind] == [item_id(kind, i) for i in items]
        assert composed.contents[kind] == [c for p in parts for c in p.rendered.contents.get(kind, ())]
    converges(stored, composed.payload, unmanaged)
    prepared = Desired.of(composed.payload, Policy(unmanaged), composed.contents, composed.ids,
                          composed.splits)
    assert prepared.digest == Desired.of(composed.payload, Policy(unmanaged)).digest


@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_round_trips(kind: str) -> None:
    desired = {kind: [{"id": "x1", "desc": "d", "list": []}]}
    live = applied(plan(desired, fresh()).body)
    assert not plan(desired, live).changes


@st.composite
def recommits(draw: st.DrawFn) -> tuple[dict[str, list[dict[str, Any]]], dict[str, list[dict[str, Any]]]]:
    """A repo, and a later commit of it that changes items' fields but keeps every id in its place."""
    first = draw(repos())
    second = {kind: [{key: value for key, value in item.items() if key in ("id", "username")} | draw(FIELDS)
                     if draw(st.booleans()) else item for item in listed] for kind, listed in first.items()}
    return first, second


@examples(0.75)
@given(stored=gateway_states(), commits=recommits())
def test_a_plan_on_our_own_push_with_the_same_ids_in_place_equals_the_general_plan(
        stored, commits) -> None:
    """The next commit usually changes items, not which: planned against gitsync's own last push, only
    the changed items are looked at (`_changed_in_place`). It must plan exactly what the general
    plan does: the same body bytes, kinds, and view of the gateway after."""
    import gitsync.push.plan as reconcile

    first, second = commits
    p1 = plan(first, Gateway(stored).get())
    fast = plan(second, p1.after)
    general = reconcile._in_place
    reconcile._in_place = lambda *args: False  # type: ignore[assignment]
    try:
        slow = plan(second, p1.after)
    finally:
        reconcile._in_place = general
    assert fast.body == slow.body
    assert fast.kinds == slow.kinds
    assert fast.after is not None and slow.after is not None
    assert canonical_json(fast.after.body()) == canonical_json(slow.after.body())
    assert fast.after.odd_indexes(KINDS) == slow.after.odd_indexes(KINDS)
    # a third commit planned on each after-view agrees too (fragments and odd indexes carried right)
    assert plan(first, fast.after).body == plan(first, slow.after).body


def test_a_plan_on_our_own_push_looks_only_at_the_changed_items(monkeypatch: pytest.MonkeyPatch) -> None:
    import gitsync.push.plan as reconcile

    desired = {"routes": [route(f"r{i}", f"/{i}") for i in range(50)]}
    p1 = plan(desired, fresh())
    changed = copy.deepcopy(desired)
    changed["routes"][7]["uri"] = "/seven"
    looked: list[Any] = []
    real = reconcile.content_indexes
    monkeypatch.setattr(reconcile, "content_indexes", lambda item, content=None: looked.append(item) or
                        real(item, content))
    p2 = plan(changed, p1.after)
    assert [item["id"] for item in looked] == ["r7"]
    assert p2.kind("routes").modified == ("r7",)  # type: ignore[union-attr]
    assert json.loads(p2.body)["routes"][7]["uri"] == "/seven"


def test_a_changed_item_planned_in_place_never_gets_its_twins_index() -> None:
    """The stand-in index on the in-place path: the live twin (kept from another writer by our last
    push) carries exactly the index the new content derives, so the new content gets the stand-in."""
    import gitsync.push.plan as reconcile

    old, new, other = route("r1", "/old"), route("r1", "/new"), route("r2", "/2")
    usual, stand_in = content_indexes(new)
    p1 = plan({"routes": [old, other]}, {**fresh(), "routes": [{**old, "modifiedIndex": usual}]})
    assert p1.after is not None and p1.after.odd_indexes(["routes"]) == {"routes": {"r1": usual}}
    assert reconcile._in_place("routes", reconcile.Desired.of({"routes": [new, other]}).wanted["routes"],
                               p1.after.listed("routes"))
    p2 = plan({"routes": [new, other]}, p1.after)
    sent = json.loads(p2.body)["routes"][0]
    assert sent["uri"] == "/new" and sent["modifiedIndex"] == stand_in
    assert p2.after is not None and p2.after.odd_indexes(["routes"]) == {"routes": {"r1": stand_in}}


ITEMS_WITH_ANY_FIELDS = st.lists(st.tuples(IDS, FIELDS, FIELDS, INDEXES), max_size=4).map(
    lambda drawn: [{"id": name, **a, **{f"z{k}": v for k, v in b.items()}, "a": 1}
                   | ({} if index is None else {"modifiedIndex": index}) for name, a, b, index in drawn])


@examples(1)
@given(ITEMS_WITH_ANY_FIELDS, st.integers(1, VERSION_LIMIT - 1))
def test_an_items_json_is_its_content_with_the_index_put_in_when_the_content_is_its_own(items, index) -> None:
    from gitsync.content import content_bytes, content_split, with_index

    for item in items:
        content = content_bytes(item)
        split = content_split(item, content)
        own = {k: v for k, v in item.items() if k != "modifiedIndex"}
        if split < 0:
            assert canonical_json(own) != content  # normalize changed it: it is encoded when sent
            continue
        assert with_index(content, split, index) == canonical_json({**own, "modifiedIndex": index})


@examples(1)
@given(stored=gateway_states(), desired=repos())
def test_a_body_written_from_contents_and_splits_is_byte_for_byte_the_encoded_one(stored, desired) -> None:
    """Render gives each item's content and split; the body is then mostly joined from them. It must be
    exactly the body encoded item by item, on any gateway state."""
    from gitsync.content import content_bytes, content_split
    from gitsync.push.plan import Desired

    contents = {kind: [content_bytes(item) for item in items] for kind, items in desired.items()}
    splits = {}
    for kind, items in desired.items():
        splits[kind] = [content_split(item, content) for item, content in zip(items, contents[kind],
                                                                                strict=True)]
    live = Gateway(stored).get()
    with_splits = plan(Desired.of(desired, contents=contents, splits=splits), live)
    assert with_splits.body == plan(desired, live).body
    assert with_splits.after is not None
    again = {kind: list(reversed(items)) for kind, items in desired.items()}  # a next commit, on our push
    assert plan(Desired.of(again, contents={k: v[::-1] for k, v in contents.items()},
                           splits={k: v[::-1] for k, v in splits.items()}), with_splits.after).body == \
        plan(again, with_splits.after).body


def test_a_plan_on_a_restored_view_sends_what_a_plan_on_the_read_config_sends_and_makes_one_item():
    """After a restart, the gateway as gitsync's last push left it is rebuilt from what was pushed
    (`LiveView.restored`), not read: a one-item change plans and writes the same body as against the
    same config read by a GET, and only the changed item is rebuilt (the others' JSON is as sent)."""
    from gitsync.content import content_bytes, content_split
    from gitsync.push.plan import _UNMADE, Desired, LiveView

    routes = [{"id": f"r{n}", "uri": f"/r{n}", "upstream": {"nodes": {"127.0.0.1:80": 1}}}
              for n in range(200)]
    empty = {version_key(kind): 0 for kind in KINDS}
    first = plan({"routes": routes}, empty)
    read = json.loads(first.body)
    read["routes"][7]["modifiedIndex"] = 777  # an index another writer chose, kept since
    odd = {"routes": {"r7": 777}}
    changed = copy.deepcopy(routes)
    changed[150]["uri"] = "/changed"

    contents = [content_bytes(item) for item in routes]
    splits = [content_split(item, content) for item, content in zip(routes, contents, strict=True)]
    pushed = Desired.of({"routes": routes}, contents={"routes": contents}, splits={"routes": splits})
    restored = LiveView.restored(pushed, first.versions, odd)
    ours = plan({"routes": changed}, restored)
    theirs = plan({"routes": changed}, read)
    assert ours.body == theirs.body
    assert [k.modified for k in ours.kinds if k.key == "routes"] == [("r150",)]
    items = restored.listed("routes").items
    assert [n for n in range(len(items)) if items._made[n] is not _UNMADE] == [150]
    assert json.loads(ours.body)["routes"][7]["modifiedIndex"] == 777
    # the view after the push answers as a list would, item by item and whole
    after = ours.after.listed("routes").items
    assert after[150]["uri"] == "/changed" and after[-1]["id"] == "r199" and len(after[10:20]) == 10
    assert ours.after.body()["routes"] == json.loads(ours.body)["routes"]


# ---------------------------------------------------------------------------------------------------------
# The edges of the plan's rules, at the level of the functions


def test_a_policy_manages_the_kinds_it_does_not_leave_out() -> None:
    policy = Policy(frozenset({"secrets", "ssls"}))
    assert policy.managed == frozenset(KINDS) - {"secrets", "ssls"}
    assert policy.manages("routes") and not policy.manages("secrets") and not policy.manages("plugins")
    assert Policy().managed == frozenset(KINDS)


@pytest.mark.parametrize("version", ["7", True, None, float("nan"), float("inf"), [1]])
def test_a_live_version_that_is_not_a_number_is_a_problem_and_is_not_sent(version: Any) -> None:
    live = fresh() | {"routes_conf_version": version}
    p = plan({"routes": [route("r1")]}, live)
    assert [str(problem) for problem in p.problems] == [
        f"routes: the gateway reports a routes_conf_version that is not a number: {version!r}"]
    assert "routes_conf_version" not in json.loads(p.body) and p.kind("routes") is None
    assert p.kind("upstreams").status is KindStatus.UNCHANGED


def test_a_managed_kind_this_gateway_does_not_know_is_a_problem() -> None:
    live = fresh(tuple(k for k in VERSIONED_KEYS if k != "stream_routes"))
    p = plan({"stream_routes": [{"id": "s1", "server_port": 9100}]}, live)
    assert [str(problem) for problem in p.problems] == [
        "stream_routes: the gateway has no stream_routes_conf_version: this APISIX version does not support "
        "stream_routes"]
    assert not plan({"stream_routes": []}, live).problems  # nothing of it wanted: nothing to say


def test_desired_is_prepared_once_per_policy() -> None:
    desired = Desired.of({"routes": [route("r1")]})
    assert Desired.of(desired) is desired
    other = Desired.of(desired, Policy(frozenset({"routes"})))
    assert other is not desired and "routes" not in other.wanted and other.digest != desired.digest


def test_after_a_push_the_view_knows_the_ids_it_holds() -> None:
    p = plan({"routes": [route("r1"), route("r2")], "upstreams": [{"id": "u1", "nodes": {}}]}, fresh())
    assert p.after is not None
    assert p.after.ids(["routes", "upstreams", "future"]) == {"routes": ["r1", "r2"], "upstreams": ["u1"]}
    assert p.after.count("routes") == 2 and p.after.items("routes")[0]["id"] == "r1"


@pytest.mark.parametrize(("live_item", "desired_item", "fields"), [
    (route("r1"), route("r1"), []),
    (route("r1", modifiedIndex=5), route("r1"), []),  # the index is not content
    (route("r1"), route("r1", "/b"), [("uri",)]),
    (route("r1"), route("r1", desc="d"), [("desc",)]),
    (route("r1", desc="d"), route("r1"), [("desc",)]),
    (route("r1"), route("r1", upstream={"type": "chash", "nodes": {"127.0.0.1:80": 1}}),
     [("upstream", "type")]),
    (route("r1", methods=["GET"]), route("r1", methods=["GET", "POST"]), [("methods",)]),  # one field
    (route("r1", a={"b": {"c": 1}}), route("r1", a={"b": {"c": 2, "d": 3}}),
     [("a", "b", "c"), ("a", "b", "d")]),
])
def test_changed_fields_are_the_paths_that_differ(live_item, desired_item, fields) -> None:
    assert changed_fields(live_item, desired_item) == fields


def test_item_changes_say_per_item_what_the_push_does_kind_by_kind() -> None:
    live = applied(plan({"routes": [route("r1"), route("r2"), route("r3", "/c")],
                         "upstreams": [{"id": "u1", "nodes": {}}, {"id": "u2", "nodes": {}}]}, fresh()).body)
    live["routes"].append(route("oob", modifiedIndex=1))
    live["upstreams"].append({"id": "u-oob", "nodes": {}, "modifiedIndex": 1})
    desired = {"routes": [route("r1"), route("r3", "/changed", desc="d"), route("r4")],
               "upstreams": [{"id": "u1", "nodes": {}}, {"id": "u3", "nodes": {}}], "ssls": []}
    changes = item_changes(desired, live, plan(desired, live))
    assert [(c.kind, c.id, c.action, c.fields) for c in changes] == [
        ("routes", "r4", "add", ()),
        ("routes", "r3", "change", (("desc",), ("uri",))),
        ("routes", "r2", "remove", ()),
        ("routes", "oob", "prune", ()),
        ("upstreams", "u3", "add", ()),
        ("upstreams", "u2", "remove", ()),
        ("upstreams", "u-oob", "prune", ()),
    ]


def test_item_changes_of_a_plan_that_changes_nothing_are_none() -> None:
    live = applied(plan({"routes": [route("r1")]}, fresh()).body)
    assert item_changes({"routes": [route("r1")]}, live, plan({"routes": [route("r1")]}, live)) == []



def test_an_index_is_derived_from_the_content_it_is_given() -> None:
    item, other = route("r1"), route("r2", "/other")
    assert content_index(item, content=content_bytes(other)) == content_index(other)
    assert content_index(item, avoid=content_index(other), content=content_bytes(other)) == \
        content_indexes(other)[1]
    marked = {**item, "modifiedIndex": content_index(other)}
    assert written_by_gitsync(marked, content_bytes(other)) and not written_by_gitsync(marked)
    assert not written_by_gitsync("not an item")


def test_a_read_view_knows_the_indexes_gitsync_did_not_derive() -> None:
    live = applied(plan({"routes": [route("r1"), route("r2")]}, fresh()).body)
    live["routes"][1]["modifiedIndex"] = 5
    view = LiveView.of(live)
    assert view.odd_indexes(["routes", "upstreams"]) == {"routes": {"r2": 5}}
    assert LiveView.of(view) is view


def test_a_views_body_holds_the_lists_asked_for() -> None:
    p = plan({"routes": [route("r1")], "upstreams": [{"id": "u1", "nodes": {}}]}, fresh())
    assert p.after is not None
    body = p.after.body(["routes"])
    assert [item["id"] for item in body["routes"]] == ["r1"] and "upstreams" not in body
    assert body["upstreams_conf_version"] == 1 and body["routes_conf_version"] == 1
    assert set(p.after.body()) >= {"routes", "upstreams"}


def test_a_restored_view_of_plugin_metadata_plans_as_the_read_one() -> None:
    """plugin_metadata has no modifiedIndex: restored as pushed, it plans the bodies a GET would."""
    metadata = [{"id": "http-logger", "log_format": {"host": "$host"}}]
    desired = {"routes": [route("r1")], "plugin_metadata": metadata}
    first = plan(desired, fresh())
    read = json.loads(first.body)
    restored = LiveView.restored(Desired.of(desired), first.versions, {})
    assert restored.ids(["plugin_metadata"]) == {"plugin_metadata": ["http-logger"]}
    assert not plan(desired, restored).changes
    changed = {**desired, "plugin_metadata": [{"id": "http-logger", "log_format": {"host": "$remote_addr"}}]}
    assert plan(changed, restored).body == plan(changed, read).body
    assert "modifiedIndex" not in json.loads(plan(changed, restored).body)["plugin_metadata"][0]


def test_a_restored_view_without_splits_plans_as_the_read_one_and_keeps_the_odd_indexes() -> None:
    routes = [route(f"r{n}", f"/r{n}") for n in range(5)]
    first = plan({"routes": routes}, fresh())
    read = json.loads(first.body)
    read["routes"][2]["modifiedIndex"] = 777
    odd = {"routes": {"r2": 777, "gone": 1}}
    restored = LiveView.restored(Desired.of({"routes": routes}), first.versions, odd)
    assert restored.odd_indexes(["routes"]) == {"routes": {"r2": 777}}  # only the ids it holds
    changed = [*routes[:4], route("r4", "/changed")]
    assert plan({"routes": changed}, restored).body == plan({"routes": changed}, read).body


def test_changed_fields_of_a_field_that_changed_shape() -> None:
    assert changed_fields(route("r1"), {**route("r1"), "upstream": "u1"}) == [("upstream",)]
    assert changed_fields({**route("r1"), "upstream": "u1"}, route("r1")) == [("upstream",)]


def test_item_changes_find_items_by_their_kinds_id() -> None:
    live = applied(plan({"consumers": [{"username": "jack", "desc": "a"}]}, fresh()).body)
    desired = {"consumers": [{"username": "jack", "desc": "b"}]}
    assert [(c.kind, c.id, c.action, c.fields) for c in item_changes(desired, live, plan(desired, live))] == [
        ("consumers", "jack", "change", (("desc",),))]


def test_the_derived_index_is_the_same_in_every_gitsync_version() -> None:
    """An item gitsync pushed is known as gitsync's by its derived index (`written_by_gitsync`), also by
    a later gitsync: the derivation is fixed, the first 8 bytes of the content's SHA-256, big-endian,
    mod 10^14 - 1, plus 1 (the stand-in: of the content and a NUL byte)."""
    for item in (route("r1"), route("r2", "/b", desc="x"), {"id": "u1", "nodes": {}}):
        content = content_bytes(item)
        usual = int.from_bytes(hashlib.sha256(content).digest()[:8], "big") % (10**14 - 1) + 1
        stand_in = int.from_bytes(hashlib.sha256(content + b"\x00").digest()[:8], "big") % (10**14 - 1) + 1
        assert content_indexes(item) == (usual, stand_in)
