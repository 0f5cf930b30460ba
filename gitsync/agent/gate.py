"""Agent groups: may this agent apply a commit yet, given what the fleet's statuses show?

The fleet is what `gitsync.writeback.fleet.FleetReader` reads from the status refs: per ref a
`FleetEntry`, its status checked against the status schema (or why it is unreadable), whether its
signature is allowed for its agent and group (with `status_signers`), and the commit times git
holds: ``written`` (the status commit) and ``seen`` (the tip: the last status or heartbeat).

A status file is written by whoever can push under the status refs, so the gate believes only what
it can check:

* **who**: with `status_signers`, a status counts only when its commits are signed by a key allowed
  for its agent and group; an unreadable or unverified status never counts, for or against;
* **liveness**: an agent is **live** while its ref was written within `DOWN_AFTER` heartbeat
  periods of *this* agent's settings (the period a status file claims is not trusted); one missed
  heartbeat is tolerated, two are not. A down agent's good news does not count; its bad news does;
* **time**: a status is judged by its commit's time, not the times its file holds; one written in
  the future (beyond `CLOCK_SKEW`) or before the commit it reports was committed is refused;
* **soak**: runs on this agent's clock, from when it first saw that agent show the commit applied
  (`FleetGate` remembers; a restart starts every soak again, which only delays);
* **memory** (`GateMemory`, kept by `FleetGate` in the state dir across restarts): a verified failure
  of a commit holds that commit until a new one, whatever that agent's status says afterwards (a heal
  of an older commit, a heartbeat, a status deleted or rewritten by someone else); and an agent once
  seen verified in the group stays a member: while its status is gone, unreadable or unverified it
  holds the gate (it may be a canary whose bad news someone erased), until it shows a verified status
  again. A member leaves when a verified status of it names another group, or when `status_signers`
  names the group's agents and no longer names it.

An agent whose ``after_group`` is set applies a commit only when at least ``after_count`` live agents
of that group show that commit applied (``applied`` or ``healed``: on all their gateways), their
checks passed or none declared, seen so for at least ``soak``. Any agent of that group that shows
the commit failed (a refused commit, a gateway it could not be brought to, a failed check, a
rollback) holds the commit back, whatever the others show: the canaries exist to catch exactly
that. One still on its way (``canary``, ``soaking``) neither counts nor holds back.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from gitsync.display import format_age, short_sha
from gitsync.writeback.statusfile import FleetEntry

DOWN_AFTER = 2.0  # heartbeat periods without a write before an agent counts as down
CLOCK_SKEW = 120.0  # seconds another agent's clock (or a committer's) may be ahead of this one's
APPLIED_RESULTS = frozenset({"applied", "healed"})  # the commit is live on the agent's gateways
FAILED_RESULT = "failed"  # refused, rolled back, a gateway not brought to it ("canary", "soaking": not yet)
MAX_FAILED_COMMITS = 50  # commits whose failures the gate remembers (the latest), as the agent's bad ones


@dataclass(frozen=True)
class GateVerdict:
    """Whether the commit may be applied now, why (for the log and the status), and the earliest time
    it could become allowed if nothing else changes (None: not foreseeable, e.g. nobody ran it yet)."""

    allowed: bool
    why: str
    earliest: datetime | None = None


def is_live(entry: FleetEntry, now: datetime, heartbeat: float) -> bool:
    """Whether the agent wrote its status ref within `DOWN_AFTER` of this agent's heartbeat period."""
    return entry.seen is not None and (now - entry.seen).total_seconds() <= DOWN_AFTER * heartbeat


def time_problem(entry: FleetEntry, now: datetime, committed: datetime | None) -> str | None:
    """Why the commit times of a status cannot be believed, or None: written in the future, or before
    the commit it reports (`committed`: that commit's time, when known)."""
    skew = timedelta(seconds=CLOCK_SKEW)
    if entry.written is None or entry.seen is None:
        return "no commit time"
    if entry.written > now + skew or entry.seen > now + skew:
        return "written in the future"
    if committed is not None and entry.written < committed - skew:
        return "written before the commit it reports"
    return None


def checks_of(entry: FleetEntry) -> tuple[int, int] | None:
    """The health checks in a status, over its gateways: (passed, failed); None when none ran."""
    return entry.status.checks() if entry.status is not None else None


def checks_passed(entry: FleetEntry) -> bool:
    checks = checks_of(entry)
    return checks is None or checks[1] == 0


def _names(entries: Sequence[FleetEntry]) -> str:
    return ", ".join(e.agent for e in entries)


def _ran(entry: FleetEntry, commit: str) -> bool:
    status = entry.status
    return status is not None and status.commit == commit and status.result in APPLIED_RESULTS \
        and checks_passed(entry)


def _failed(entry: FleetEntry, commit: str) -> bool:
    status = entry.status
    return status is not None and status.commit == commit and (status.result == FAILED_RESULT
                                                                 or not checks_passed(entry))


@dataclass(frozen=True)
class GateMemory:
    """What the gate remembers of its group across reads and restarts (see the module): the agents
    seen verified in the group, and per commit (the latest `MAX_FAILED_COMMITS`) the agents seen fail it."""

    members: frozenset[str] = frozenset()
    failed: Mapping[str, frozenset[str]] = field(default_factory=dict)


def remember(memory: GateMemory, fleet: Sequence[FleetEntry], group: str,
             named: Collection[str] | None = None) -> GateMemory:
    """`memory` after a read of `fleet`: every verified status of `group` makes its agent a member and
    records a failure it shows (of whatever commit); a verified status of another group ends a
    membership; `named`, when `status_signers` names the group's agents, is who may be a member."""
    members = set(memory.members)
    failed = {commit: set(agents) for commit, agents in memory.failed.items()}
    for entry in fleet:
        if not entry.verified or entry.status is None:
            continue
        if entry.group != group:
            members.discard(entry.agent)
            continue
        members.add(entry.agent)
        commit = entry.status.commit
        if commit and _failed(entry, commit):
            failed.setdefault(commit, set()).add(entry.agent)
    if named is not None:
        members &= set(named)
    kept = list(failed)[-MAX_FAILED_COMMITS:]
    return GateMemory(frozenset(members), {commit: frozenset(failed[commit]) for commit in kept})


def holding(memory: GateMemory, fleet: Sequence[FleetEntry]) -> list[tuple[str, str]]:
    """The members whose status is gone, unreadable or unverified, and which (see the module)."""
    by_agent = {entry.agent: entry for entry in fleet}
    found = []
    for agent in sorted(memory.members):
        entry = by_agent.get(agent)
        if entry is None:
            found.append((agent, "its status ref is gone"))
        elif not entry.verified:
            found.append((agent, entry.trouble or "unverified"))
    return found


@dataclass(frozen=True)
class Judged:
    """A group's members sorted by what the gate makes of them."""

    members: tuple[FleetEntry, ...]
    failed: tuple[FleetEntry, ...]  # verified, and showing the commit failed: holds it back
    counted: tuple[FleetEntry, ...]  # verified, live, times believable, showing it applied
    down: tuple[FleetEntry, ...]
    refused: tuple[tuple[FleetEntry, str], ...]  # would count but for why


def judge(fleet: Sequence[FleetEntry], commit: str, group: str, now: datetime, heartbeat: float,
          committed: datetime | None) -> Judged:
    """Which of `group`'s statuses count for `commit`, hold it back, or are set aside, and why."""
    members = tuple(e for e in fleet if e.group == group)
    failed, counted, down, refused = [], [], [], []
    for entry in members:
        if not entry.verified:
            refused.append((entry, entry.trouble or "unverified"))
            continue
        if _failed(entry, commit):
            failed.append(entry)
            continue
        live = is_live(entry, now, heartbeat)
        if not live:
            down.append(entry)
        if not _ran(entry, commit) or not live:
            continue
        problem = time_problem(entry, now, committed)
        if problem:
            refused.append((entry, problem))
        else:
            counted.append(entry)
    return Judged(members, tuple(failed), tuple(counted), tuple(down), tuple(refused))


def group_gate(fleet: Sequence[FleetEntry], commit: str, after_group: str | None, after_count: int,
               soak: float, now: datetime, heartbeat: float, since: Mapping[str, datetime] | None = None,
               committed: datetime | None = None, memory: GateMemory | None = None) -> GateVerdict:
    """May `commit` be applied now by an agent that goes after `after_group`? (see the module)

    `heartbeat`: this agent's period; `soak` in seconds; `now` timezone-aware; `since`: per agent,
    when this agent first saw it show `commit` applied (absent: now); `committed`: the commit's time;
    `memory`: what the gate remembers, `remember`ed with `fleet` already.
    """
    if not after_group:
        return GateVerdict(True, "no after_group: a commit applies at once", now)
    memory = memory or GateMemory()
    commit_text = short_sha(commit)
    seen = judge(fleet, commit, after_group, now, heartbeat, committed)
    failed = sorted({e.agent for e in seen.failed} | memory.failed.get(commit, frozenset()))
    if failed:
        return GateVerdict(False, f"{commit_text} failed on {after_group} agent(s) {', '.join(failed)}: "
                                  "held back until a new commit")
    held = holding(memory, fleet)
    if held:
        return GateVerdict(False, f"waiting: {after_group} agent(s) " + ", ".join(
            f"{agent} ({why})" for agent, why in held) + ": a member of the group whose status is gone, "
            "unreadable or unverified holds the gate until it shows a verified status again")
    if not seen.members:
        why = f"waiting for group {after_group}: no agent of it has written a readable status"
        return GateVerdict(False, _with_refused(why, seen))
    since = since or {}
    ran = sorted(since.get(e.agent, now) for e in seen.counted)
    soak_time = timedelta(seconds=soak)
    soaked = [moment for moment in ran if now - moment >= soak_time]
    need = max(1, after_count)
    earliest = ran[need - 1] + soak_time if len(ran) >= need else None
    counts = (f"{len(soaked)} of {need} needed live agent(s) of {after_group} have run {commit_text} for "
              f"{format_age(soak)}")
    if len(soaked) >= need:
        return GateVerdict(True, counts, earliest)
    why = f"waiting: {counts}"
    if len(ran) > len(soaked):
        why += f" ({len(ran) - len(soaked)} more soaking)"
    if seen.down:
        why += "; down, not counted: " + ", ".join(f"{e.agent} seen {_ago(e, now)}" for e in seen.down)
    live = len(seen.members) - len(seen.down)
    if live < need:
        why += f"; only {live} live agent(s) in {after_group}"
    return GateVerdict(False, _with_refused(why, seen), earliest)


def _with_refused(why: str, seen: Judged) -> str:
    if not seen.refused:
        return why
    return why + "; not counted: " + ", ".join(f"{e.agent} ({reason})" for e, reason in seen.refused)


def _ago(entry: FleetEntry, now: datetime) -> str:
    return f"{format_age((now - entry.seen).total_seconds())} ago" if entry.seen else "never"


# ---------------------------------------------------------------------------------------------------------
# `gitsync status --fleet`


def _checks_text(entry: FleetEntry) -> str:
    checks = checks_of(entry)
    if checks is None:
        return "-"
    passed, failed = checks
    return f"{failed} failed" if failed else f"{passed} passed"


def fleet_table(fleet: Sequence[FleetEntry], now: datetime, heartbeat: float) -> str:
    """One aligned line per agent: commit, result, age of that status (its commit's time), group,
    checks, when its status ref was last written (``(down)`` once that is older than `DOWN_AFTER`
    heartbeats), and, last, why it does not count (``unreadable status: …``, ``unverified: …``) or
    ``verified`` when signatures are checked."""
    rows = [("AGENT", "COMMIT", "RESULT", "AGE", "GROUP", "CHECKS", "SEEN", "TRUST")]
    for entry in fleet:
        status = entry.status
        age = format_age((now - entry.written).total_seconds()) if entry.written else "?"
        seen = _ago(entry, now).removesuffix(" ago")
        if not is_live(entry, now, heartbeat):
            seen += " (down)"
        trust = entry.trouble or ("verified" if entry.signature is not None else "-")
        rows.append((_printable(entry.agent), short_sha(status.commit or "-") if status else "-",
                     status.result if status else "unreadable", age,
                     _printable(status.group or "-") if status else "-", _checks_text(entry), seen,
                     _printable(trust)))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    return "".join(
        "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row[:-1])) + "  " + row[-1] + "\n"
        for row in rows)


def _printable(text: str) -> str:
    """Text for one line of a terminal: control characters (an escape sequence, a newline) shown escaped."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


__all__ = ["APPLIED_RESULTS", "CLOCK_SKEW", "DOWN_AFTER", "MAX_FAILED_COMMITS", "GateMemory", "GateVerdict",
           "checks_of", "checks_passed", "fleet_table", "group_gate", "holding", "is_live", "judge",
           "remember", "time_problem"]
