"""Which commit of each repo goes into the payload, and who a refusal blames (gitsync.agent.choice)."""

from __future__ import annotations

from gitsync.agent.choice import SourceTip, blamed, choose, composition_id_of
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
