"""The repos of an agent, one payload: which commit of each repo goes into it, and who a refusal
blames (pure functions over plain values; `gitsync.agent.repos` observes and acts).

Each repo is its own transaction. The payload is always every repo at its last good commit, the
newest where it is good:

* a repo whose tip is new and not refused contributes its tip; one whose tip was refused, or whose
  remote cannot be asked, its last good commit; one with no good commit yet and a refused tip,
  nothing (its items are not in the payload until it has a good commit); one with no good commit
  whose remote cannot be asked holds the whole composition back (leaving it out would delete its
  items from the gateways); when no repo's remote could be asked, there is nothing new to know: the
  sync failed to fetch; when every repo's tip is refused, nothing can go live: the composition is
  the tips', refused, and the sync skips it (either way the gateways are healed with the last good
  composition);
* the set of chosen commits is a *composition*, named by a digest of them, or, for the one unnamed
  repo of the ``[source]`` settings, by its commit: it is what the agent decides on, pushes and
  remembers as "the commit" (`gitsync.agent.decide` is unchanged);
* a refused composition blames the new commits it holds that the refusal names (an item's
  ``name:file:line``, a check's ``name:check``), or, when it names none of them, every new commit in
  it: those are marked bad, and the next composition leaves them out;
* a commit blamed only for the composition it was in (held: the gateways' deletion guard on the
  composed payload, a reference into another repo, a refusal that named no repo) is tried again once
  the other repos would give other commits (`retried`): a repo's first commit held while another repo
  had no good commit yet goes live when that one has.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from gitsync.agent.state import RepoState, SourceState


@dataclass(frozen=True)
class SourceTip:
    """What a check of one repo's remote gave: its tip, or why it is not known."""

    name: str | None  # None: the one repo of the ``[source]`` settings
    tip: str | None = None
    error: str | None = None


@dataclass(frozen=True)
class Candidate:
    """The commit a repo contributes (None: nothing yet), whether it is new (not its last good), why."""

    name: str | None
    commit: str | None
    new: bool = False
    why: str = ""


@dataclass(frozen=True)
class Choice:
    """The composition chosen: each repo's candidate and its id; or why none can be. `refused`: every
    tip is refused, the composition is theirs, and this is why (the first one's reason)."""

    candidates: tuple[Candidate, ...] = ()
    composition: str | None = None
    error: str | None = None
    refused: str | None = None
    retried: tuple[str, ...] = ()  # the repos whose held tip is tried again (`retried`)

    @property
    def commits(self) -> dict[str | None, str]:
        """Repo → commit, for the repos that contribute one."""
        return {c.name: c.commit for c in self.candidates if c.commit is not None}


def _said(name: str | None, text: str) -> str:
    """`text` said of repo `name`: ``source 'a': text`` (the unnamed repo's: `text` itself)."""
    return text if name is None else f"source {name!r}: {text}"


def choose(tips: Sequence[SourceTip], states: Mapping[str | None, RepoState]) -> Choice:
    """The composition of this sync (see the module)."""
    if tips and all(tip.tip is None for tip in tips):
        first = tips[0]
        return Choice(error=_said(first.name, first.error or "no tip"))
    again = retried(tips, states)
    refused = [(tip, why) for tip in tips if tip.tip is not None and tip.name not in again
               and (why := _state(states, tip.name).bad.get(tip.tip)) is not None]
    if tips and len(refused) == len(tips):
        candidates = tuple(Candidate(tip.name, tip.tip) for tip in tips)
        return Choice(candidates, composition_id_of(candidates), refused=_said(tips[0].name, refused[0][1]))
    candidates = []
    for tip in tips:
        state = _state(states, tip.name)
        if tip.tip is None:
            if state.last_good is None:
                why = f"{tip.error or 'no tip'} (it has no good commit yet: the sources wait for it)"
                return Choice(error=_said(tip.name, why))
            candidates.append(Candidate(tip.name, state.last_good, why=f"git remote: {tip.error}"))
        elif tip.tip in state.bad and tip.name not in again:
            candidates.append(Candidate(tip.name, state.last_good,
                                        why=f"the tip {tip.tip[:7]} was refused: {state.bad[tip.tip]}"))
        else:
            why = "its tip, held with other commits of the other sources, is tried again" \
                if tip.name in again else ""
            candidates.append(Candidate(tip.name, tip.tip, tip.tip != state.last_good, why))
    if not any(c.commit for c in candidates):
        return Choice(tuple(candidates), error="no source has a commit to apply yet")
    return Choice(tuple(candidates), composition_id_of(candidates), retried=tuple(sorted(map(str, again))))


def _state(states: Mapping[str | None, RepoState], name: str | None) -> RepoState:
    return states.get(name) or SourceState()


def retried(tips: Sequence[SourceTip], states: Mapping[str | None, RepoState]) -> frozenset[str | None]:
    """The repos whose tip was refused only for the composition it was in (held: the gateways' deletion
    guard, a reference across repos, a refusal that named no repo) and would now be composed with other
    commits of the other repos: those tips are tried again. A tip held with exactly the commits the others
    would give now stays refused, so that nothing is tried twice in the same company.

    Found from above: every held tip tried, then each one whose company would be the same dropped, and
    the rest judged again without them, until none is the same. So tips held together stay refused
    together (a platform commit that dropped an upstream and a team's new route naming it: until either
    repo, or a third one, moves), and a tip held while another repo had no good commit yet is tried once
    that repo has one. A tip held again is remembered with its new company: none is tried twice with the
    same company."""
    held = {tip.name: others for tip in tips if tip.tip is not None
            and (others := _state(states, tip.name).held_with(tip.tip)) is not None}
    again = frozenset(held)
    while again:
        gives = {tip.name: _gives(tip, _state(states, tip.name), tip.name in again) for tip in tips}
        same = frozenset(name for name in again
                         if held[name] == {str(other): sha for other, sha in gives.items() if other != name})
        if not same:
            break
        again -= same
    return again


def _gives(tip: SourceTip, state: RepoState, again: bool) -> str:
    """The commit a repo gives a composition (``-``: none), its tip tried `again` or not."""
    if tip.tip is not None and (again or tip.tip not in state.bad):
        return tip.tip
    return state.last_good or "-"


def company(name: str | None, commits: Mapping[str | None, str], names: Iterable[str | None],
            ) -> dict[str, str]:
    """What a commit of repo `name` is held with: every other repo's commit in the composition
    (`commits`), ``-`` for one that gives none (see `retried`)."""
    return {str(other): commits.get(other) or "-" for other in names if other != name}


def composition_id_of(candidates: Sequence[Candidate]) -> str:
    """A composition's name: the SHA-1 of ``name commit`` per source, in the settings' order (a source
    contributing nothing counts as ``-``), so the same commits always make the same composition. The
    unnamed repo of ``[source]`` is alone, and has nothing to name its composition by but its commit."""
    if len(candidates) == 1 and candidates[0].name is None and candidates[0].commit is not None:
        return candidates[0].commit
    text = "".join(f"{c.name} {c.commit or '-'}\n" for c in candidates)
    return hashlib.sha1(text.encode()).hexdigest()


def blamed(named: Iterable[str | None], new: Iterable[str | None]) -> frozenset[str | None]:
    """The repos a refusal blames: the new ones it names, else every new one."""
    new = frozenset(new)
    hit = frozenset(named) & new
    return hit or new


__all__ = ["Candidate", "Choice", "SourceTip", "blamed", "choose", "company", "composition_id_of", "retried"]
