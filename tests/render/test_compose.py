"""The composition's checks (gitsync.render.compose): what a source may declare, and which references
across sources name nothing. Each source is rendered for real (`render`), as the agent renders it."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from gitsync.kinds import KINDS
from gitsync.ownership import Claim, Ownership
from gitsync.render import RenderOptions, render
from gitsync.render.compose import Part, dangling, facts_of, rivals, shared_kinds

PLATFORM = Ownership((Claim(("global_rules",)), Claim(("upstreams",), "platform-")))
TEAM_A = Ownership((Claim(("routes", "upstreams"), "a-"),))
TEAM_B = Ownership((Claim(("routes",), None, (("team", "b"),)),))
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


def test_rivals_are_the_other_sources_claims_only_an_item_can_tell_apart():
    assert rivals("a", TEAM_A, OTHERS) == (("b", TEAM_B.claims[0]),)
    assert rivals("b", TEAM_B, OTHERS) == (("a", TEAM_A.claims[0]),)
    assert rivals("platform", PLATFORM, OTHERS) == ()  # by prefix against prefix: settled at start
    assert rivals("a", TEAM_A, (("a", TEAM_A),)) == ()  # never itself


def test_an_item_outside_what_its_source_owns_is_refused_naming_whose_it_is():
    b = part("b", {"r.yaml": "routes:\n" + route("a-three", "platform-web")})
    assert [str(p) for p in facts_of(b, OTHERS).problems] == [
        "r.yaml:2:5: routes[a-three]: source 'b' may not declare this item: it owns routes with label "
        "team=b; it belongs to source 'a' (routes with id prefix 'a-')"]
    nobody = part("a", {"r.yaml": "routes:\n" + route("c-one", "platform-web")})
    assert [str(p) for p in facts_of(nobody, OTHERS).problems] == [
        "r.yaml:2:5: routes[c-one]: source 'a' may not declare this item: it owns routes with id prefix 'a-'"]


def test_an_item_two_sources_claim_is_refused_where_it_is_declared():
    a = part("a", {"r.yaml": "routes:\n" + route("a-one", "platform-web") + route("a-two", "platform-web",
                                                                                   "{team: b}")})
    assert [str(p) for p in facts_of(a, OTHERS).problems] == [
        "r.yaml:5:5: routes[a-two]: claimed by two sources: 'a' (routes with id prefix 'a-') and 'b' (routes "
        "with label team=b); give it an id or labels only one of them claims"]


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


def test_an_item_owned_by_its_labels_is_its_sources_and_another_sources_by_label_is_named():
    b = part("b", {"r.yaml": "routes:\n" + route("anything", "platform-web", "{team: b}")})
    assert facts_of(b, OTHERS).problems == ()
    a = part("a", {"r.yaml": "routes:\n" + route("c-one", "platform-web", "{team: b}")})
    assert [str(p) for p in facts_of(a, OTHERS).problems] == [
        "r.yaml:2:5: routes[c-one]: source 'a' may not declare this item: it owns routes with id prefix "
        "'a-'; it belongs to source 'b' (routes with label team=b)"]


def test_an_item_both_claim_is_refused_in_the_source_that_tells_by_labels_too():
    b = part("b", {"r.yaml": "routes:\n" + route("a-x", "platform-web", "{team: b}")})
    assert [str(p) for p in facts_of(b, OTHERS).problems] == [
        "r.yaml:2:5: routes[a-x]: claimed by two sources: 'b' (routes with label team=b) and 'a' (routes "
        "with id prefix 'a-'); give it an id or labels only one of them claims"]


def test_two_claims_of_one_source_never_contend():
    both = Ownership((Claim(("routes",), "c-"), Claim(("routes",), None, (("team", "c"),))))
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
