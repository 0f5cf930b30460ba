"""The composition's checks (gitsync.render.compose): what a source may declare, and which references
across sources name nothing or an item its owner does not share. Each source is rendered for real
(`render`), as the agent renders it. Then the same as a hostile team tries it: a credential under
another team's consumer, a reference into an item the owner does not share, an id of another team's;
each refused at the attacker's file:line naming the owner, the owner's own items untouched. The agent
over real repos: tests/agent/test_repos.py; a team's own CI: tests/cli/test_render.py."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from gitsync.kinds import KINDS
from gitsync.ownership import Claim, Ownership, Share, owner_of
from gitsync.render import RenderOptions, render
from gitsync.render.compose import Part, dangling, external, facts_of, shared_kinds

PLATFORM = Ownership((Claim(("global_rules",)), Claim(("upstreams",), "platform-")),
                     shares=(Share(("upstreams",), prefix="platform-"),))
TEAM_A = Ownership((Claim(("routes", "upstreams"), "a-"),))
TEAM_B = Ownership((Claim(("routes",), "b-", (("team", "b"),)),))
OTHERS = (("platform", PLATFORM), ("a", TEAM_A), ("b", TEAM_B))
UPSTREAM = 'upstreams:\n  - id: platform-web\n    nodes: {"127.0.0.1:1980": 1}\n'


def rendered(files: dict[str, str], **options: Any) -> Any:
    return render({name: text.encode() for name, text in files.items()}, RenderOptions(**options))


def part(name: str, files: dict[str, str], owns: Ownership | None = None) -> Part:
    owns = owns or dict(OTHERS)[name]
    return Part(name, "0" * 40, rendered(files, unmanaged=shared_kinds(owns)), owns)


def route(rid: str, upstream: str, labels: str = "") -> str:
    return f"  - id: {rid}\n    uri: /{rid}\n    upstream_id: {upstream}\n" + (f"    labels: {labels}\n"
                                                                                if labels else "")


def test_shared_kinds_are_those_not_owned_whole():
    assert shared_kinds(PLATFORM) == frozenset(KINDS) - {"global_rules"}
    assert shared_kinds(TEAM_A) == frozenset(KINDS)
    assert shared_kinds(Ownership(everything=True)) == frozenset()


def test_an_item_outside_what_its_source_owns_is_refused_naming_whose_it_is():
    b = part("b", {"r.yaml": "routes:\n" + route("a-three", "platform-web")})
    assert [str(p) for p in facts_of(b, OTHERS).problems] == [
        "r.yaml:2:5: routes[a-three]: source 'b' may not declare this item: it owns routes with id prefix "
        "'b-' and label team=b; it belongs to source 'a' (routes with id prefix 'a-')"]
    nobody = part("a", {"r.yaml": "routes:\n" + route("c-one", "platform-web")})
    assert [str(p) for p in facts_of(nobody, OTHERS).problems] == [
        "r.yaml:2:5: routes[c-one]: source 'a' may not declare this item: it owns routes with id prefix 'a-'"]


def test_labels_do_not_make_an_id_another_sources():
    a = part("a", {"r.yaml": "routes:\n" + route("a-one", "platform-web") + route("a-two", "platform-web",
                                                                                   "{team: b}")})
    assert facts_of(a, OTHERS).problems == ()


def test_references_into_shared_kinds_that_its_own_items_do_not_answer():
    a = part("a", {"r.yaml": "routes:\n" + route("a-one", "platform-web") + route("a-two", "a-up")
                   + 'upstreams:\n  - id: a-up\n    nodes: {"127.0.0.1:2": 1}\n'})
    facts = facts_of(a, OTHERS)
    assert facts.problems == ()
    outgoing = [(o.kind, o.index, o.reference.target, o.reference.ident, o.message) for o in facts.references]
    assert outgoing == [("routes", 0, "upstreams", "platform-web",
                         "upstream_id 'platform-web' names no item of upstreams")]
    assert facts.declared == {"routes": frozenset({"a-one", "a-two"}), "upstreams": frozenset({"a-up"})}


def test_references_into_a_kind_the_source_owns_whole_are_its_render_s_own():
    rules = "global_rules:\n  - id: g1\n    plugins: {}\n"
    platform = part("platform", {"g.yaml": rules, "u.yaml": UPSTREAM})
    assert facts_of(platform, OTHERS).references == ()


def test_a_reference_another_source_answers_is_not_dangling_and_one_nobody_answers_is():
    platform = part("platform", {"p.yaml": UPSTREAM})
    a = part("a", {"r.yaml": "routes:\n" + route("a-one", "platform-web") + route("a-two", "platform-gone")})
    parts = [platform, a]
    found = dangling(parts, [facts_of(p, OTHERS) for p in parts])
    assert [(d.source, d.target, str(d.problem)) for d in found] == [
        ("a", ("upstreams", "platform-gone"),
         "a:r.yaml:7:5: routes[a-two].upstream_id: upstream_id 'platform-gone' names no item of upstreams")]


def test_a_reference_into_an_unmanaged_kind_is_never_dangling():
    """The gateway's own items of an unmanaged kind are not in the payload: nothing to check against."""
    a = part("a", {"r.yaml": "routes:\n" + route("a-one", "platform-gone")
                   + "    plugins:\n      key-auth: {}\n    service_id: nowhere\n"})
    facts = [facts_of(a, OTHERS)]
    everything = {d.target for d in dangling([a], facts)}
    assert everything == {("upstreams", "platform-gone"), ("services", "nowhere")}
    assert [d.target for d in dangling([a], facts, frozenset({"upstreams"}))] == [("services", "nowhere")]
    assert dangling([a], facts, frozenset({"upstreams", "services"})) == []


def test_facts_of_the_last_commit_are_reused_for_the_same_items_and_worked_out_for_new_ones():
    first = part("a", {"r.yaml": "routes:\n" + route("a-one", "platform-web")})
    before = facts_of(first, OTHERS)
    again = facts_of(first, OTHERS, before)
    item = first.rendered.payload["routes"][0]
    assert again.memo[id(item)] is before.memo[id(item)]  # the same item: not looked at again
    assert again.references == before.references and again.problems == before.problems
    changed = part("a", {"r.yaml": "routes:\n" + route("c-one", "nowhere")})
    facts = facts_of(changed, OTHERS, before)
    assert [str(p) for p in facts.problems] == [
        "r.yaml:2:5: routes[c-one]: source 'a' may not declare this item: it owns routes with id prefix 'a-'"]
    assert [o.reference.ident for o in facts.references] == ["nowhere"]


def test_a_memo_entry_for_another_object_at_the_same_address_is_not_trusted():
    """id() of a freed item may be reused by a new one: the memo keeps the item and checks it is the same."""
    first = part("a", {"r.yaml": "routes:\n" + route("a-one", "platform-web")})
    changed = part("a", {"r.yaml": "routes:\n" + route("c-one", "nowhere")})
    before = facts_of(first, OTHERS)
    new_item = changed.rendered.payload["routes"][0]
    old_item = first.rendered.payload["routes"][0]
    forged = type(before)(before.problems, before.references, before.declared,
                          {id(new_item): before.memo[id(old_item)]})
    facts = facts_of(changed, OTHERS, forged)
    assert [o.reference.ident for o in facts.references] == ["nowhere"]
    assert len(facts.problems) == 1


def test_an_item_owned_by_its_id_and_labels_is_its_sources_and_the_owner_of_another_id_is_named():
    b = part("b", {"r.yaml": "routes:\n" + route("b-anything", "platform-web", "{team: b}")})
    assert facts_of(b, OTHERS).problems == ()
    a = part("a", {"r.yaml": "routes:\n" + route("b-one", "platform-web", "{team: b}")})
    assert [str(p) for p in facts_of(a, OTHERS).problems] == [
        "r.yaml:2:5: routes[b-one]: source 'a' may not declare this item: it owns routes with id prefix "
        "'a-'; it belongs to source 'b' (routes with id prefix 'b-' and label team=b)"]


def test_two_claims_of_one_source_never_contend():
    both = Ownership((Claim(("routes",), "c-"), Claim(("routes",), "c-x", (("team", "c"),))))
    others = (*OTHERS, ("c", both))
    c = part("c", {"r.yaml": "routes:\n" + route("c-one", "platform-web", "{team: c}")}, both)
    assert facts_of(c, others).problems == ()


def test_facts_hold_each_items_own_answer():
    first = part("a", {"r.yaml": "routes:\n" + route("a-one", "platform-web")})
    item = first.rendered.payload["routes"][0]
    remembered = facts_of(first, OTHERS).memo[id(item)]
    assert remembered[0] is item and remembered[1] is None
    assert [(ref.target, ref.ident) for ref, _ in remembered[2]] == [("upstreams", "platform-web")]


def test_a_render_without_its_ids_is_read_by_each_items_id():
    a = part("a", {"r.yaml": "routes:\n" + route("a-one", "a-up") + route("c-two", "platform-web")
                   + 'upstreams:\n  - id: a-up\n    nodes: {"127.0.0.1:2": 1}\n'})
    bare = dataclasses.replace(a, rendered=dataclasses.replace(a.rendered, ids={}))
    with_ids, without = facts_of(a, OTHERS), facts_of(bare, OTHERS)
    assert without.declared == with_ids.declared == {"routes": frozenset({"a-one", "c-two"}),
                                                      "upstreams": frozenset({"a-up"})}
    assert [str(p) for p in without.problems] == [str(p) for p in with_ids.problems] != []
    assert [o.reference.ident for o in without.references] == ["platform-web"]


def test_dangling_needs_the_facts_of_each_part():
    a = part("a", {"r.yaml": "routes:\n" + route("a-one", "platform-web")})
    with pytest.raises(ValueError):
        dangling([a], [])


# ---------------------------------------------------------------------------------------------------------
# a hostile team (issue 41)

THE_PLATFORM = Ownership((Claim(("global_rules", "secrets")),
                      Claim(("upstreams", "plugin_configs"), "platform-")),
                     shares=(Share(("upstreams",), prefix="platform-"), Share(("secrets",), ("orders",))))
ORDERS = Ownership((Claim(("routes", "upstreams"), "orders-"),
                    Claim(("consumers", "consumer_groups"), "orders-", (("team", "orders"),))))
PAYMENTS = Ownership((Claim(("routes", "upstreams"), "payments-"),
                      Claim(("consumers", "consumer_groups"), "payments-", (("team", "payments"),))),
                     shares=(Share(("consumer_groups",), ("catalog",), ids=("payments-vip",)),))
SOURCES = (("platform", THE_PLATFORM), ("orders", ORDERS), ("payments", PAYMENTS))
NOT_SHARED = "which does not share it with source 'orders' (see the shares of its [[sources]] table)"

HOSTILE_PAYMENTS_FILES = {"c.yaml": "consumers:\n  - username: payments-alice\n    labels: {team: payments}\n"
                            "  - id: payments-alice/credentials/main\n"
                            "    plugins: {key-auth: {key: payments-alice-key-0001}}\n"
                            "consumer_groups:\n  - id: payments-vip\n    labels: {team: payments}\n"
                            "    plugins: {limit-count: {count: 100, time_window: 60}}\n"
                            "upstreams:\n  - id: payments-web\n    nodes: {\"127.0.0.1:1980\": 1}\n"}
HOSTILE_PLATFORM_FILES = {"p.yaml": "upstreams:\n  - id: platform-web\n    nodes: {\"127.0.0.1:1980\": 1}\n"
                            "plugin_configs:\n  - id: platform-auth\n    plugins: {key-auth: {}}\n"
                            "secrets:\n  - id: vault/1\n    uri: http://127.0.0.1:8200\n"
                            "    prefix: kv/apisix\n    token: a-vault-token-for-the-test\n"}


def team_part(name: str, files: dict[str, str]) -> Part:
    owns = dict(SOURCES)[name]
    rendered = render({file: text.encode() for file, text in files.items()},
                      RenderOptions(unmanaged=shared_kinds(owns)))
    return Part(name, "0" * 40, rendered, owns)


def problems_of(orders_files: dict[str, str]) -> list[str]:
    """Every problem of orders' commit composed with the platform's and payments' (its own refusals
    first, then its references)."""
    parts = [team_part("platform", HOSTILE_PLATFORM_FILES), team_part("orders", orders_files),
             team_part("payments", HOSTILE_PAYMENTS_FILES)]
    facts = [facts_of(p, SOURCES) for p in parts]
    own = [str(problem) for f in facts for problem in f.problems]
    return own or [str(miss.problem) for miss in dangling(parts, facts)]


def test_a_credential_under_another_teams_consumer_is_refused_whatever_its_labels() -> None:
    backdoor = {"c.yaml": "consumers:\n  - id: payments-alice/credentials/backdoor\n"
                          "    labels: {team: orders}\n"
                          "    plugins: {key-auth: {key: orders-chose-this-key-1}}\n"}
    assert problems_of(backdoor) == [
        "c.yaml:2:5: consumers[payments-alice/credentials/backdoor]: source 'orders' may not declare this "
        "credential: a credential belongs to the source of its consumer, and it owns consumers with id "
        "prefix 'orders-' and label team=orders; consumer 'payments-alice' belongs to source 'payments'"]
    # its own consumer's credential needs no label of its own: it is its consumer's
    own = {"c.yaml": "consumers:\n  - username: orders-bob\n    labels: {team: orders}\n"
                     "  - id: orders-bob/credentials/main\n"
                     "    plugins: {key-auth: {key: orders-bob-key-00001}}\n"}
    assert problems_of(own) == []


def test_a_reference_into_an_item_the_owner_does_not_share_is_refused_naming_the_owner() -> None:
    files = {"r.yaml": "consumers:\n  - username: orders-bob\n    labels: {team: orders}\n"
                       "    group_id: payments-vip\n"
                       "routes:\n  - id: orders-a\n    uri: /a\n    upstream_id: payments-web\n"
                       "  - id: orders-b\n    uri: /b\n    upstream_id: platform-web\n"
                       "    plugin_config_id: platform-auth\n"
                       "  - id: orders-c\n    uri: /c\n    upstream_id: platform-web\n"
                       "    plugins: {consumer-restriction: {whitelist: [payments-alice]}}\n"}
    assert problems_of(files) == [  # in the payload's order: routes before consumers
        "orders:r.yaml:8:5: routes[orders-a].upstream_id: upstream_id 'payments-web' names upstreams of "
        "source 'payments', " + NOT_SHARED,
        "orders:r.yaml:12:5: routes[orders-b].plugin_config_id: plugin_config_id 'platform-auth' names "
        "plugin_configs of source 'platform', " + NOT_SHARED,
        "orders:r.yaml:16:50: routes[orders-c].plugins.consumer-restriction.whitelist[0]: whitelist entry "
        "'payments-alice' names consumers of source 'payments', " + NOT_SHARED,
        "orders:r.yaml:4:5: consumers[orders-bob].group_id: group_id 'payments-vip' names consumer_groups of "
        "source 'payments', " + NOT_SHARED]


def test_what_the_owner_shares_may_be_named_and_a_secret_manager_only_by_whom_it_is_shared_with() -> None:
    route = ("routes:\n  - id: orders-a\n    uri: /a\n    upstream_id: platform-web\n"
             "    plugins: {key-auth: {}, proxy-rewrite: {headers: {set: {X-K: \"$secret://vault/1/k/v\"}}}}\n")
    assert problems_of({"r.yaml": route}) == []
    theirs = {"r.yaml": route.replace("orders-", "payments-")}
    parts = [team_part("platform", HOSTILE_PLATFORM_FILES), team_part("payments", theirs)]
    found = dangling(parts, [facts_of(p, SOURCES) for p in parts])
    assert [str(miss.problem).split(": ", 2)[2][:60] for miss in found] == [
        "secret reference 'vault/1' names secrets of source 'platform"]
    assert [(miss.source, miss.owner) for miss in found] == [("payments", "platform")]


def test_an_id_of_another_team_is_refused_where_it_is_declared_and_its_owner_known_from_settings() -> None:
    impostor = {"c.yaml": "consumers:\n  - username: payments-alice\n    labels: {team: orders}\n"
                          "    plugins: {key-auth: {key: orders-chose-this-key-1}}\n"}
    assert problems_of(impostor) == [
        "c.yaml:2:5: consumers[payments-alice]: source 'orders' may not declare this item: it owns consumers "
        "with id prefix 'orders-' and label team=orders; it belongs to source 'payments' (consumers with id "
        "prefix 'payments-' and label team=payments)"]
    assert owner_of("consumers", "payments-alice", SOURCES) == "payments"
    assert owner_of("consumers", "alice", SOURCES) is None
    # the owner's facts do not depend on the impostor: its commit has nothing to answer for
    assert facts_of(team_part("payments", HOSTILE_PAYMENTS_FILES), SOURCES).problems == ()


def test_a_source_alone_takes_what_others_share_as_theirs_and_refuses_the_rest() -> None:
    files = {"r.yaml": "routes:\n  - id: orders-a\n    uri: /a\n    upstream_id: platform-web\n"
                       "  - id: orders-b\n    uri: /b\n    upstream_id: payments-web\n"
                       "  - id: orders-c\n    uri: /c\n    upstream_id: nobodys-web\n"
                       "  - id: orders-d\n    uri: /d\n    upstream_id: orders-gone\n"}
    alone = team_part("orders", files)
    found = external("orders", facts_of(alone, SOURCES), alone.rendered.source_map, SOURCES)
    assert [str(p) for p in found] == [
        "r.yaml:7:5: routes[orders-b].upstream_id: upstream_id 'payments-web' names upstreams of source "
        "'payments', " + NOT_SHARED,
        "r.yaml:10:5: routes[orders-c].upstream_id: upstream_id 'nobodys-web' names no item of upstreams",
        "r.yaml:13:5: routes[orders-d].upstream_id: upstream_id 'orders-gone' names no item of upstreams"]



def test_a_route_on_traffic_another_team_owns_and_code_on_the_workers_are_refused_at_their_line() -> None:
    """Issue 41, attack 5: orders' route on payments' host and path, at any priority; serverless Lua."""
    from gitsync.ownership import Traffic
    payments = Ownership(PAYMENTS.claims, traffic=Traffic(hosts=("api.example.com",), paths=("/payments",)),
                         may_run=frozenset({"serverless-pre-function"}))
    sources = (("platform", THE_PLATFORM), ("orders", ORDERS), ("payments", payments))
    files = {"r.yaml": "routes:\n  - id: orders-capture\n    uri: /payments/*\n    hosts: [api.example.com]\n"
                       "    priority: 100\n    upstream_id: orders-up\n"
                       "  - id: orders-lua\n    uri: /orders/*\n    hosts: [api.example.com]\n"
                       "    upstream_id: orders-up\n    plugins:\n      serverless-pre-function:\n"
                       "        phase: rewrite\n        functions: [\"return function() end\"]\n"
                       "  - id: orders-fine\n    uri: /orders/*\n    hosts: [api.example.com]\n"
                       "    upstream_id: orders-up\n"
                       "upstreams:\n  - id: orders-up\n    nodes: {\"127.0.0.1:1980\": 1}\n"}
    orders = Part("orders", "0" * 40, render({"r.yaml": files["r.yaml"].encode()},
                                              RenderOptions(unmanaged=shared_kinds(ORDERS))), ORDERS)
    assert [str(p) for p in facts_of(orders, sources).problems] == [
        "r.yaml:2:5: routes[orders-capture]: source 'orders' may not take traffic source 'payments' owns: "
        "its hosts and uris could match requests of hosts api.example.com; paths /payments",
        "r.yaml:7:5: routes[orders-lua]: source 'orders' may not use serverless-pre-function: it runs code "
        "on the gateway's workers, which a source does only when its [[sources]] table's may_run lists it"]
    own = {"r.yaml": "routes:\n  - id: payments-capture\n    uri: /payments/*\n    hosts: [api.example.com]\n"
                     "    plugins:\n      serverless-pre-function:\n        phase: rewrite\n"
                     "        functions: [\"return function() end\"]\n"}
    theirs = Part("payments", "0" * 40, render({"r.yaml": own["r.yaml"].encode()},
                                                RenderOptions(unmanaged=shared_kinds(payments))), payments)
    assert facts_of(theirs, sources).problems == ()  # its own traffic, its own allowance
