"""Which commit of each repo goes into the payload, and who a refusal blames (gitsync.agent.choice)."""

from __future__ import annotations

from gitsync.agent.choice import SourceTip, blamed, choose, company, composition_id_of, retried
from gitsync.agent.state import AgentState, SourceState


def test_the_composition_is_every_source_at_its_last_good_commit_the_newest_where_good() -> None:
    states = {"a": SourceState("a1", bad={"a2": "render: x"}), "b": SourceState("b1"), "c": SourceState()}
    choice = choose([SourceTip("a", "a2"), SourceTip("b", "b2"), SourceTip("c", "c1")], states)
    assert [(c.name, c.commit, c.new) for c in choice.candidates] == [("a", "a1", False), ("b", "b2", True),
                                                                       ("c", "c1", True)]
    assert choice.composition == composition_id_of(choice.candidates)
    down = choose([SourceTip("a", error="timed out"), SourceTip("b", "b1")], states)
    assert down.commits == {"a": "a1", "b": "b1"}
    assert choose([SourceTip("c", error="timed out")], states).error.startswith("source 'c': timed out")
    never = choose([SourceTip("c", "c9"), SourceTip("b", "b1")], states | {"c": SourceState(bad={"c9": "x"})})
    assert never.commits == {"b": "b1"}  # a source with no good commit and a refused tip: nothing yet
    assert blamed({"a"}, {"a", "b"}) == {"a"} and blamed({"x"}, {"a", "b"}) == {"a", "b"}


def test_the_one_repo_of_source_makes_compositions_that_are_its_commits() -> None:
    state = AgentState(last_good="a1", bad={"a2": "render: x"})
    assert choose([SourceTip(None, "a3")], {None: state}).composition == "a3"
    down = choose([SourceTip(None, error="timed out")], {None: state})
    assert (down.composition, down.error) == (None, "timed out")  # no remote answered: nothing to compose
    refused = choose([SourceTip(None, "a2")], {None: state})
    assert (refused.composition, refused.refused) == ("a2", "render: x")  # skipped: the tip is refused


def test_every_tip_refused_or_no_remote_answering_is_said_for_named_sources_too() -> None:
    states = {"a": SourceState("a1", bad={"a2": "validate: y"}),
              "b": SourceState("b1", bad={"b2": "push: z"})}
    refused = choose([SourceTip("a", "a2"), SourceTip("b", "b2")], states)
    assert refused.commits == {"a": "a2", "b": "b2"} and refused.refused == "source 'a': validate: y"
    assert refused.composition == composition_id_of(refused.candidates) not in ("a2", "b2")
    assert choose([SourceTip("a", "a2"), SourceTip("b", "b1")], states).refused is None  # b is at its tip
    down = choose([SourceTip("a", error="timed out"), SourceTip("b", error="refused")], states)
    assert down.error == "source 'a': timed out"


def held(last_good: str | None, tip: str, company_of: dict[str, str]) -> SourceState:
    state = SourceState(last_good)
    state.mark_bad(tip, "guard: held", held_with=company_of)
    return state


def test_a_tip_held_for_its_company_is_tried_again_once_another_source_would_give_another_commit() -> None:
    # the migration: b's first commit refused for its own sake; a's and the platform's held without b
    states = {"p": held(None, "p1", {"a": "a1", "b": "-"}), "a": held(None, "a1", {"p": "p1", "b": "-"}),
              "b": SourceState(bad={"b1": "validate: x"})}
    tips = [SourceTip("p", "p1"), SourceTip("a", "a1"), SourceTip("b", "b1")]
    assert retried(tips, states) == frozenset()  # the same company: not tried twice
    assert choose(tips, states).refused is not None  # every tip refused: the sync skips
    fixed = [SourceTip("p", "p1"), SourceTip("a", "a1"), SourceTip("b", "b2")]
    choice = choose(fixed, states)
    assert choice.commits == {"p": "p1", "a": "a1", "b": "b2"} and choice.retried == ("a", "p")
    assert all(c.new for c in choice.candidates)


def test_tips_held_together_stay_refused_together_and_a_refused_one_is_never_tried_again() -> None:
    # b's route names the upstream p's new commit dropped: both held, each with the other's commit
    states = {"p": held("p0", "p1", {"b": "b1"}), "b": held("b0", "b1", {"p": "p1"})}
    assert retried([SourceTip("p", "p1"), SourceTip("b", "b1")], states) == frozenset()
    # one held with the other's last good commit: that other is held again, so it is the same company
    states = {"p": held("p0", "p1", {"b": "b1"}), "b": held("b0", "b1", {"p": "p0"})}
    assert retried([SourceTip("p", "p1"), SourceTip("b", "b1")], states) == frozenset()
    # refused for its own sake: never, whatever the others do
    states = {"p": SourceState("p0", bad={"p1": "render: x"}), "b": SourceState("b0")}
    assert retried([SourceTip("p", "p1"), SourceTip("b", "b9")], states) == frozenset()
    assert company("a", {"a": "a1", "b": "b1"}, ["a", "b", "c"]) == {"b": "b1", "c": "-"}
    # the repo of [source] is alone: nothing of it is ever held
    assert AgentState().held_with("x") is None


def test_a_held_commit_that_goes_live_is_forgiven() -> None:
    state = held(None, "a1", {"b": "-"})
    state.forgive("a1")
    assert (state.bad, state.held) == ({}, {})
    saved = {"bad": {"a1": "guard: x"}, "held": {"a1": {"b": "-"}}}
    assert SourceState.from_json(saved).held == {"a1": {"b": "-"}}
