"""Ownership (gitsync.ownership): which items a source's claims match, and which two claims could meet."""

from __future__ import annotations

import pytest

from gitsync.kinds import KINDS
from gitsync.ownership import (
    EVERY_SOURCE,
    Claim,
    Ownership,
    Share,
    Traffic,
    owner_of,
    static_overlap,
    traffic_overlap,
    trespass,
)

ORDERS = Claim(("routes", "services"), prefix="orders-")
TEAM = Claim(("routes",), labels=(("team", "orders"),))
TWO_LABELS = Claim(("routes",), labels=(("team", "orders"), ("tier", "gold")))
BOTH = Claim(("routes",), prefix="orders-", labels=(("team", "orders"),))
WHOLE = Claim(("upstreams",))


@pytest.mark.parametrize(("claim", "kind", "ident", "item", "expected"), [
    (ORDERS, "routes", "orders-1", {}, True),
    (ORDERS, "services", "orders-1", {}, True),
    (ORDERS, "upstreams", "orders-1", {}, False),  # not its kind
    (ORDERS, "routes", "billing-1", {}, False),
    (ORDERS, "routes", "x-orders-1", {}, False),  # a prefix, not a part
    (ORDERS, "routes", "orders-", {}, True),
    (ORDERS, "routes", None, {}, False),  # no id: no prefix
    (Claim(("routes",), prefix="X"), "routes", None, {}, False),
    (Claim(("routes",), prefix=""), "routes", None, {}, True),
    (TEAM, "routes", None, {"labels": {"team": "orders"}}, True),
    (TEAM, "routes", "r1", {"labels": {"team": "orders", "more": "x"}}, True),
    (TEAM, "routes", "r1", {"labels": {"team": "billing"}}, False),
    (TEAM, "routes", "r1", {"labels": {"owner": "orders"}}, False),
    (TEAM, "routes", "r1", {"labels": ["team", "orders"]}, False),  # labels that are not a mapping
    (TEAM, "routes", "r1", {}, False),
    (TEAM, "routes", "r1", "not an item", False),
    (TEAM, "services", "r1", {"labels": {"team": "orders"}}, False),
    (TWO_LABELS, "routes", "r1", {"labels": {"team": "orders", "tier": "gold"}}, True),
    (TWO_LABELS, "routes", "r1", {"labels": {"team": "orders"}}, False),  # every label, not any
    (TWO_LABELS, "routes", "r1", {"labels": {"tier": "gold"}}, False),
    (TWO_LABELS, "routes", "r1", {"labels": {"team": "orders", "tier": "silver"}}, False),
    (BOTH, "routes", "orders-1", {"labels": {"team": "orders"}}, True),
    (BOTH, "routes", "orders-1", {"labels": {"team": "billing"}}, False),
    (BOTH, "routes", "billing-1", {"labels": {"team": "orders"}}, False),
    (WHOLE, "upstreams", None, None, True),
    (WHOLE, "routes", "u1", {}, False),
])
def test_a_claim_matches_its_kinds_with_its_prefix_and_every_label(claim, kind, ident, item, expected):
    assert claim.matches(kind, ident, item) is expected


def test_whole_is_a_claim_on_every_item_of_its_kinds():
    assert WHOLE.whole
    assert not ORDERS.whole and not TEAM.whole and not BOTH.whole
    assert not Claim(("routes",), prefix="").whole  # "" is a prefix every id has, but a prefix


@pytest.mark.parametrize(("claim", "kind", "text"), [
    (ORDERS, None, "routes, services with id prefix 'orders-'"),
    (ORDERS, "routes", "routes with id prefix 'orders-'"),
    (TEAM, None, "routes with label team=orders"),
    (TWO_LABELS, "routes", "routes with label team=orders and label tier=gold"),
    (BOTH, None, "routes with id prefix 'orders-' and label team=orders"),
    (WHOLE, None, "every item of upstreams"),
    (WHOLE, "upstreams", "every item of upstreams"),
])
def test_a_claim_describes_itself(claim, kind, text):
    assert claim.describe(kind) == text


PLATFORM = Ownership((WHOLE, Claim(("routes",), prefix="platform-")))


def test_an_ownership_owns_what_any_of_its_claims_matches():
    assert PLATFORM.owns("upstreams", "u1", {})
    assert PLATFORM.owns("routes", "platform-1", {})
    assert not PLATFORM.owns("routes", "orders-1", {})
    assert not PLATFORM.owns("services", "platform-1", {})
    assert not Ownership().owns("routes", "r1", {})
    assert Ownership((TEAM,)).owns("routes", "r1", {"labels": {"team": "orders"}})
    assert not Ownership((TEAM,)).owns("routes", "r1", {"labels": {"team": "billing"}})
    assert Ownership(everything=True).owns("routes", "r1", {})
    assert Ownership(everything=True).owns("consumers", None, None)


def test_may_own_is_by_kind_and_prefix_with_labels_unknown():
    labelled = Ownership((TEAM,))
    assert labelled.may_own("routes", "anything")  # its labels could be the team's
    assert not labelled.may_own("services", "anything")
    assert PLATFORM.may_own("routes", "platform-9")
    assert not PLATFORM.may_own("routes", "orders-9")
    assert PLATFORM.may_own("upstreams", "u9")
    assert Ownership(everything=True).may_own("ssls", "s1")
    assert not Ownership().may_own("routes", "r1")


def test_kinds_and_whole_kinds():
    assert PLATFORM.kinds() == frozenset({"upstreams", "routes"})
    assert PLATFORM.whole_kinds() == frozenset({"upstreams"})
    assert Ownership((ORDERS, TEAM)).whole_kinds() == frozenset()
    assert Ownership(everything=True).kinds() == frozenset(KINDS)
    assert Ownership(everything=True).whole_kinds() == frozenset(KINDS)
    assert Ownership().kinds() == frozenset()


def test_an_ownership_describes_what_it_owns_of_a_kind():
    assert PLATFORM.describe("routes") == "routes with id prefix 'platform-'"
    assert PLATFORM.describe("upstreams") == "every item of upstreams"
    assert Ownership((ORDERS, TEAM)).describe("routes") == \
        "routes with id prefix 'orders-' or routes with label team=orders"
    assert PLATFORM.describe("ssls") == "no ssls"


@pytest.mark.parametrize(("a", "b", "why"), [
    (WHOLE, Claim(("upstreams", "routes"), prefix="x"),
     "both claim every item of upstreams / upstreams with id prefix 'x'"),
    (Claim(("routes",), prefix="x"), Claim(("services", "routes"),),
     "both claim routes with id prefix 'x' / every item of routes"),
    (ORDERS, Claim(("routes",), prefix="orders-eu-"),
     "both claim routes with id prefix 'orders-' / routes with id prefix 'orders-eu-'"),
    (TEAM, Claim(("routes",), labels=(("team", "orders"),)),
     "both claim routes with label team=orders / routes with label team=orders"),
    (TEAM, BOTH, "both claim routes with label team=orders / routes with id prefix 'orders-' and label "
                 "team=orders"),
    # labels never tell two owners of one id apart: only prefixes that do not start one another do
    (ORDERS, TEAM, "both claim routes with id prefix 'orders-' / routes with label team=orders"),
    (TEAM, ORDERS, "both claim routes with label team=orders / routes with id prefix 'orders-'"),
    (TEAM, Claim(("routes",), labels=(("team", "billing"),)),
     "both claim routes with label team=orders / routes with label team=billing"),
    (BOTH, Claim(("routes",), prefix="orders-", labels=(("team", "billing"),)),
     "both claim routes with id prefix 'orders-' and label team=orders / routes with id prefix 'orders-' and "
     "label team=billing"),
    (BOTH, Claim(("routes",), prefix="billing-", labels=(("team", "orders"),)), None),
    (ORDERS, Claim(("routes",), prefix="billing-"), None),  # they cannot meet
    (ORDERS, Claim(("upstreams",)), None),
])
def test_static_overlap_names_pairs_the_settings_alone_show(a, b, why):
    assert static_overlap(a, b) == why


def test_the_owner_of_an_id_follows_from_the_prefixes_alone():
    owners = (("platform", Ownership((WHOLE,))), ("orders", Ownership((BOTH,))),
              ("billing", Ownership((Claim(("routes",), prefix="billing-"),))))
    assert owner_of("routes", "orders-x", owners) == "orders"  # whatever labels the item carries
    assert owner_of("routes", "billing-x", owners) == "billing"
    assert owner_of("upstreams", "anything", owners) == "platform"
    assert owner_of("routes", "nobodys", owners) is None


@pytest.mark.parametrize(("share", "kind", "ident", "reader", "allowed"), [
    (Share(("upstreams",)), "upstreams", "x", "orders", True),  # every item, every source
    (Share(("upstreams",)), "routes", "x", "orders", False),
    (Share(("upstreams",), prefix="platform-"), "upstreams", "platform-web", "orders", True),
    (Share(("upstreams",), prefix="platform-"), "upstreams", "web", "orders", False),
    (Share(("upstreams",), ("orders",), ids=("web",)), "upstreams", "web", "orders", True),
    (Share(("upstreams",), ("orders",), ids=("web",)), "upstreams", "web2", "orders", False),
    (Share(("upstreams",), ("orders",), ids=("web",)), "upstreams", "web", "billing", False),
    (Share(("upstreams",), (EVERY_SOURCE,), ids=("web",)), "upstreams", "web", "billing", True),
])
def test_a_share_allows_its_kinds_ids_to_its_readers(share, kind, ident, reader, allowed):
    assert share.allows(kind, ident, reader) is allowed
    assert Ownership((WHOLE,), shares=(share,)).shares_with(kind, ident, reader) is allowed
    assert not Ownership((WHOLE,)).shares_with(kind, ident, reader)


PAYMENTS_TRAFFIC = Traffic(hosts=("api.example.com",), paths=("/payments",), snis=("pay.example.com",),
                           ports=(9100,))


@pytest.mark.parametrize(("kind", "item", "taken"), [
    # issue 41, attack 5: another team's route on the same host and path, whatever its priority
    ("routes", {"uri": "/payments/*", "hosts": ["api.example.com"], "priority": 100}, True),
    ("routes", {"uri": "/payments/refund", "host": "api.example.com"}, True),
    ("routes", {"uri": "/payments/*"}, True),  # no hosts: every host
    ("routes", {"hosts": ["api.example.com"]}, True),  # no uri: every path
    ("routes", {"uri": "/*", "hosts": ["*.example.com"]}, True),  # a wildcard host, a * suffix
    ("routes", {"uris": ["/orders/*", "/payments"], "hosts": ["API.example.com"]}, True),
    ("routes", {"uri": "/:section/refund", "hosts": ["api.example.com"]}, True),  # a parameter
    ("routes", {"uri": "/payments/*", "hosts": ["api.example.com"],
                "vars": [["http_x_team", "==", "orders"]]}, True),  # vars do not narrow the claim
    ("routes", {"uri": "/orders/*", "hosts": ["api.example.com"]}, False),
    ("routes", {"uri": "/payments/*", "hosts": ["shop.example.com"]}, False),
    ("routes", {"uri": "/pay", "hosts": ["api.example.com"]}, False),  # exact, shorter than the prefix
    ("ssls", {"snis": ["*.example.com"]}, True),
    ("ssls", {"sni": "shop.example.com"}, False),
    ("stream_routes", {"server_port": 9100}, True),
    ("stream_routes", {}, True),  # no port: every port
    ("stream_routes", {"server_port": 9200}, False),
    ("upstreams", {"nodes": {"api.example.com:443": 1}}, False),
])
def test_traffic_another_source_owns_is_taken_by_what_could_match_it(kind, item, taken):
    assert (trespass(kind, item, PAYMENTS_TRAFFIC) is not None) is taken


def test_two_sources_owning_one_request_overlap():
    assert traffic_overlap(PAYMENTS_TRAFFIC, Traffic(hosts=("*.example.com",), paths=("/payments/v2",)))
    assert traffic_overlap(PAYMENTS_TRAFFIC, Traffic(paths=("/",)))
    assert traffic_overlap(PAYMENTS_TRAFFIC, Traffic(ports=(9100,)))
    assert traffic_overlap(PAYMENTS_TRAFFIC, Traffic(hosts=("api.example.com",), paths=("/orders",))) is None
    assert traffic_overlap(PAYMENTS_TRAFFIC, Traffic(hosts=("shop.example.com",))) is None
