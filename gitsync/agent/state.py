"""What the agent remembers between syncs, as data: the last good commit, what each gateway holds,
the commits refused and why (saved by `gitsync.agent.statedir`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, Protocol

MAX_BAD_COMMITS = 50  # remembered failures; older ones are forgotten (they are in git notes anyway)


class StateError(Exception):
    """The state directory cannot be used (locked by another agent, not writable)."""


@dataclass
class GatewayState:
    """What one gateway was last given by this agent."""

    commit: str
    digest: str
    versions: dict[str, int | float] = field(default_factory=dict)
    unmanaged: list[str] = field(default_factory=list)  # the policy it was pushed under
    since: float | None = None  # time.time() since when it holds this commit (a canary's soak)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> GatewayState:
        """From the state file; keys this version does not know (an older or newer gitsync's) are ignored."""
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


class RepoState(Protocol):
    """What is saved of one repo of an agent: its last good commit and the commits it refused. The repo
    of ``[source]`` keeps its own in the agent's `AgentState`; each ``[[sources]]`` repo a
    `SourceState` under `AgentState.sources`."""

    last_good: str | None
    last_good_subject: str
    bad: dict[str, str]

    def mark_bad(self, sha: str, reason: str, *, held_with: dict[str, str] | None = None) -> None: ...

    def held_with(self, sha: str) -> dict[str, str] | None: ...

    def forgive(self, sha: str) -> None: ...


@dataclass
class SourceState:
    """One source of a ``[[sources]]`` agent: its last good commit and the commits refused."""

    last_good: str | None = None  # its commit in the newest composition a gateway accepted
    last_good_subject: str = ""
    bad: dict[str, str] = field(default_factory=dict)  # commit SHA → why it was refused
    #: Commits of `bad` refused only for the composition they were in (the gateways' deletion guard, a
    #: reference across sources, a refusal that named no source): SHA → every other source's commit in
    #: that composition (``-``: none). Such a commit is tried again once the others' commits differ
    #: (`gitsync.agent.choice.choose`).
    held: dict[str, dict[str, str]] = field(default_factory=dict)

    def mark_bad(self, sha: str, reason: str, *, held_with: dict[str, str] | None = None) -> None:
        _remember(self.bad, sha, reason)
        self.held.pop(sha, None)
        if held_with is not None:
            self.held[sha] = dict(held_with)
        for gone in [k for k in self.held if k not in self.bad]:
            del self.held[gone]

    def held_with(self, sha: str) -> dict[str, str] | None:
        """The other sources' commits `sha` was held with, when it was refused only for its composition."""
        return self.held.get(sha)

    def forgive(self, sha: str) -> None:
        """`sha`, held before, went live: it is refused no more."""
        self.bad.pop(sha, None)
        self.held.pop(sha, None)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SourceState:
        held = {str(sha): {str(n): str(c) for n, c in others.items()}
                for sha, others in (data.get("held") or {}).items() if isinstance(others, dict)}
        return cls(data.get("last_good"), str(data.get("last_good_subject") or ""),
                   dict(data.get("bad") or {}), held)


def _remember(bad: dict[str, str], sha: str, reason: str) -> None:
    bad.pop(sha, None)
    bad[sha] = reason
    while len(bad) > MAX_BAD_COMMITS:
        bad.pop(next(iter(bad)))


@dataclass
class AgentState:
    """Everything the agent must remember across restarts."""

    last_good: str | None = None  # newest commit a gateway accepted and none refused: what heals
    last_good_subject: str = ""
    gateways: dict[str, GatewayState] = field(default_factory=dict)
    bad: dict[str, str] = field(default_factory=dict)  # commit SHA → why it was refused
    last_result: dict[str, Any] = field(default_factory=dict)  # the last sync's summary (gitsync status)
    #: Partial apply: commit SHA → for each left-out item that kept its last good version ("kind/id"),
    #: the commit whose own version it is, so the commit renders the same after a restart.
    kept_from: dict[str, dict[str, str]] = field(default_factory=dict)
    #: Gateway url → a commit pushed to it whose health checks have not run yet: recorded before the
    #: push, so that a sync that dies after it leaves it "unchecked", and the next one checks it.
    unchecked: dict[str, str] = field(default_factory=dict)
    #: With ``[[sources]]``: each source's own last good commit and refusals, and what each composition
    #: (the "commit" the gateways hold: every source at one commit) is made of: id → source → SHA.
    sources: dict[str, SourceState] = field(default_factory=dict)
    compositions: dict[str, dict[str, str]] = field(default_factory=dict)

    def expect_checks(self, pushes: dict[str, str]) -> set[str]:
        """Before pushing commits with checks (url → commit): record them unchecked; the urls whose same
        commit an earlier sync left unchecked, whose checks must run even if the gateway holds it."""
        recheck = {url for url, commit in pushes.items() if self.unchecked.get(url) == commit}
        self.unchecked.update(pushes)
        return recheck

    def after_push(self, url: str, commit: str, *, ok: bool, checked: bool, changed: bool) -> None:
        """A push of `commit` ended: its checks ran, or it changed nothing (the gateway held it, checked
        before), or the gateway now holds another commit. A push that failed leaves it as it was."""
        if checked or (ok and (not changed or self.unchecked.get(url) != commit)):
            self.unchecked.pop(url, None)

    def mark_bad(self, sha: str, reason: str, *, held_with: dict[str, str] | None = None) -> None:
        """`sha` (a commit or composition) is refused; `held_with` is for a source of several, never this."""
        _remember(self.bad, sha, reason)

    def held_with(self, sha: str) -> dict[str, str] | None:
        """The repo of ``[source]`` is alone: no commit of it is refused for another repo's sake."""
        return None

    def forgive(self, sha: str) -> None:
        """Refusals of the repo of ``[source]`` are final (its next commit is tried, never the same)."""

    def repo(self, name: str | None) -> RepoState:
        """The saved state of the agent's repo `name`: a ``[[sources]]`` repo's own, under `sources`; the
        repo of ``[source]`` (no name) keeps its last good commit and refusals in the agent's own fields
        (its compositions are its commits)."""
        return self if name is None else self.sources.setdefault(name, SourceState())

    def remember_composition(self, composition: str, commits: dict[str, str]) -> None:
        """Keep what `composition` is made of, forgetting the oldest ones no gateway holds."""
        self._keep(self.compositions, composition, commits)

    def keep_from(self, sha: str, origins: dict[str, str]) -> None:
        self._keep(self.kept_from, sha, origins)

    def _keep(self, table: dict[str, dict[str, str]], sha: str, value: dict[str, str]) -> None:
        """`table[sha] = value`, the newest last; of the commits no gateway holds, the oldest forgotten."""
        table.pop(sha, None)
        table[sha] = value
        live = {self.last_good, *(gw.commit for gw in self.gateways.values())}
        for old in [k for k in table if k not in live][:-MAX_BAD_COMMITS]:
            del table[old]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> AgentState:
        gateways = {url: GatewayState.from_json(g) for url, g in (data.get("gateways") or {}).items()}
        return cls(
            last_good=data.get("last_good"),
            last_good_subject=data.get("last_good_subject", ""),
            gateways=gateways,
            bad=dict(data.get("bad") or {}),
            last_result=dict(data.get("last_result") or {}),
            kept_from=dict(data.get("kept_from") or {}),
            unchecked={str(k): str(v) for k, v in (data.get("unchecked") or {}).items()},
            sources={str(name): SourceState.from_json(s) for name, s in (data.get("sources") or {}).items()
                     if isinstance(s, dict)},
            compositions={str(k): {str(n): str(c) for n, c in v.items()}
                          for k, v in (data.get("compositions") or {}).items() if isinstance(v, dict)},
        )
