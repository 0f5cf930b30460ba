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
  it: those are marked bad, and the next composition leaves them out.
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
    refused = [(tip, why) for tip in tips if tip.tip is not None
               and (why := (states.get(tip.name) or SourceState()).bad.get(tip.tip)) is not None]
    if tips and len(refused) == len(tips):
        candidates = tuple(Candidate(tip.name, tip.tip) for tip in tips)
        return Choice(candidates, composition_id_of(candidates), refused=_said(tips[0].name, refused[0][1]))
    candidates = []
    for tip in tips:
        state = states.get(tip.name) or SourceState()
        if tip.tip is None:
            if state.last_good is None:
                why = f"{tip.error or 'no tip'} (it has no good commit yet: the sources wait for it)"
                return Choice(error=_said(tip.name, why))
            candidates.append(Candidate(tip.name, state.last_good, why=f"git remote: {tip.error}"))
        elif tip.tip in state.bad:
            candidates.append(Candidate(tip.name, state.last_good,
                                        why=f"the tip {tip.tip[:7]} was refused: {state.bad[tip.tip]}"))
        else:
            candidates.append(Candidate(tip.name, tip.tip, tip.tip != state.last_good))
    if not any(c.commit for c in candidates):
        return Choice(tuple(candidates), error="no source has a commit to apply yet")
    return Choice(tuple(candidates), composition_id_of(candidates))


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


__all__ = ["Candidate", "Choice", "SourceTip", "blamed", "choose", "composition_id_of"]
