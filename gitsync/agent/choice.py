"""Several sources, one payload: which commit of each source goes into it, and who a refusal blames
(pure functions over plain values; `gitsync.agent.sources` observes and acts).

Each source is its own transaction. The payload is always every source at its last good commit, the
newest where it is good:

* a source whose tip is new and not refused contributes its tip; one whose tip was refused, or whose
  remote cannot be asked, its last good commit; one with no good commit yet and a refused tip,
  nothing (its items are not in the payload until it has a good commit); one with no good commit
  whose remote cannot be asked holds the whole composition back (leaving it out would delete its
  items from the gateways);
* the set of chosen commits is a *composition*, named by a digest of them: it is what the agent
  decides on, pushes and remembers as "the commit" (`gitsync.agent.decide` is unchanged);
* a refused composition blames the new commits it holds that the refusal names (an item's
  ``name:file:line``, a check's ``name:check``), or, when it names none of them, every new commit in
  it: those are marked bad, and the next composition leaves them out.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from gitsync.agent.state import SourceState


@dataclass(frozen=True)
class SourceTip:
    """What a check of one source's remote gave: its tip, or why it is not known."""

    name: str
    tip: str | None = None
    error: str | None = None


@dataclass(frozen=True)
class Candidate:
    """The commit a source contributes (None: nothing yet), whether it is new (not its last good), why."""

    name: str
    commit: str | None
    new: bool = False
    why: str = ""


@dataclass(frozen=True)
class Choice:
    """The composition chosen: each source's candidate and its id; or why none can be."""

    candidates: tuple[Candidate, ...] = ()
    composition: str | None = None
    error: str | None = None

    @property
    def commits(self) -> dict[str, str]:
        """Source → commit, for the sources that contribute one."""
        return {c.name: c.commit for c in self.candidates if c.commit is not None}


def choose(tips: Sequence[SourceTip], states: Mapping[str, SourceState]) -> Choice:
    """The composition of this sync (see the module)."""
    candidates = []
    for tip in tips:
        state = states.get(tip.name) or SourceState()
        if tip.tip is None:
            if state.last_good is None:
                return Choice(error=f"source {tip.name!r}: {tip.error or 'no tip'} (it has no good commit "
                                    "yet: the sources wait for it)")
            candidates.append(Candidate(tip.name, state.last_good, why=f"git remote: {tip.error}"))
        elif tip.tip in state.bad:
            candidates.append(Candidate(tip.name, state.last_good,
                                        why=f"the tip {tip.tip[:7]} was refused: {state.bad[tip.tip]}"))
        else:
            candidates.append(Candidate(tip.name, tip.tip, tip.tip != state.last_good))
    if not any(c.commit for c in candidates):
        return Choice(tuple(candidates), error="no source has a commit to apply yet")
    return Choice(tuple(candidates), composition_id_of(candidates))


def composition_id_of(candidates: Iterable[Candidate]) -> str:
    """A composition's name: the SHA-1 of ``name commit`` per source, in the settings' order (a source
    contributing nothing counts as ``-``), so the same commits always make the same composition."""
    text = "".join(f"{c.name} {c.commit or '-'}\n" for c in candidates)
    return hashlib.sha1(text.encode()).hexdigest()


def blamed(named: Iterable[str], new: Iterable[str]) -> frozenset[str]:
    """The sources a refusal blames: the new ones it names, else every new one."""
    new = frozenset(new)
    hit = frozenset(named) & new
    return hit or new


__all__ = ["Candidate", "Choice", "SourceTip", "blamed", "choose", "composition_id_of"]
