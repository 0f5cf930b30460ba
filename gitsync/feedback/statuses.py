"""What a commit's status on the forge says (pure): one agent's, or one group's from the fleet.

gitsync's four states are GitHub's: ``pending`` (an agent started on the commit, or the group is on its
way), ``success`` (applied, and on how many gateways), ``failure`` (the commit was refused: at which
stage, and the first problem's ``file:line: message``) and ``error`` (the commit is not at fault, a
gateway did not answer). Each forge client maps them to its own (`gitsync.feedback.forge`).

A fleet posts one status per group (`group_verdict`), computed from the agents' statuses (the status
refs as `gitsync.writeback.fleet.FleetReader` reads them: `FleetEntry`), and by one agent of the
group: the live one whose name sorts first (`reporter`). Every agent reads the same refs, so they
agree on who that is and a status has one writer at a time, which is what a forge that keeps the
last status posted for a context needs. The count is over the group's members: the agents seen
within `MEMBER_PERIODS` of this agent's heartbeat, so that an agent late with its heartbeat (busy, or
its write-back slow) still counts, and one gone for longer has left the group.

A status ref is written by whoever can push there, so a status counts here only as it would for the
group gate (`gitsync.agent.gate`): readable and verified (`FleetEntry.trouble` is None: with
`status_signers`, signed by a key allowed for its agent and group), not written in the future, its
liveness judged by this agent's heartbeat and never by the period the file claims. An unreadable or
unverified status is no member: it neither counts, nor holds back, nor becomes the reporter.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

from gitsync.agent.gate import (
    APPLIED_RESULTS,
    DOWN_AFTER,
    FAILED_RESULT,
    checks_passed,
    is_live,
    time_problem,
)
from gitsync.agent.outcomes import Stage, SyncOutcome, SyncResult
from gitsync.log import redact
from gitsync.writeback.statusfile import FleetEntry, GatewayEntry, StatusFile

#: Results that put a commit on its way on an agent without being its verdict yet.
ON_THE_WAY = frozenset({"applying", "canary", "soaking", "waiting", "deferred"})
#: Results whose commit counts as applied on an agent (drift reported: applied, then changed by hand).
COUNTED_APPLIED = APPLIED_RESULTS | {"drift_reported"}
#: Heartbeat periods within which an agent's status was written for it to count in its group.
MEMBER_PERIODS = 10.0

Verdict = tuple[str, str]  # (state, description)


def _first(problems: Sequence[str]) -> str:
    """The first problem, its gateway prefix kept (which gateway is part of what went wrong)."""
    return redact(problems[0]) if problems else ""


def started(gateways: int) -> Verdict:
    return "pending", f"applying to {gateways} gateway(s)"


def outcome_verdict(outcome: SyncOutcome, bad: Mapping[str, str], after_group: str | None = None,
                    ) -> Verdict | None:
    """The status `outcome` gives its commit, or None when it says nothing new about it (a poll that
    found nothing to do, a known-bad tip skipped again, the remote not answering)."""
    result, first = outcome.result, _first(outcome.problems)
    if result is SyncResult.APPLIED:
        ok = [r for r in outcome.gateways if r.ok and r.rollback is None]
        checks = sum(len(r.checks.results) for r in ok if r.checks is not None)
        text = f"applied to {len(ok)} gateway(s)" + (", health checks passed" if checks else "")
        if outcome.stage is Stage.PARTIAL:
            text += f", without {len(outcome.problems)} item(s) left out"
        return "success", text
    if result is SyncResult.FAILED and outcome.commit in bad:
        if outcome.stage is Stage.HEALTH:
            return "failure", f"rolled back: {first}"
        if outcome.stage is Stage.GUARD:
            return "failure", f"held by the deletion guard: {first}"
        return "failure", f"refused at {outcome.stage}: {first}"
    if result is SyncResult.FAILED:
        return "error", f"not applied, retrying: {first}"
    if result is SyncResult.CANARY:
        return "pending", "on the canary gateway; the others follow after the soak"
    if result is SyncResult.SOAKING:
        return "pending", "soaking on the canary gateway"
    if result is SyncResult.WAITING:
        return "pending", f"waiting for group {after_group}" if after_group else "waiting"
    return None


def own_entry(agent: str, group: str | None, commit: str, result: str, gateways: int, now: datetime,
              ) -> FleetEntry:
    """This agent's status as the fleet's would say it (its own write-back may lag behind)."""
    status = StatusFile(agent=agent, commit=commit, result=result, time=now, group=group,
                        gateways=tuple(GatewayEntry(url="", status=result) for _ in range(gateways)))
    return FleetEntry(ref="", agent=agent, status=status, written=now, seen=now)


def is_member(entry: FleetEntry, now: datetime, heartbeat: float) -> bool:
    """Written within `MEMBER_PERIODS` of this agent's heartbeat `heartbeat`: what `is_live` says for a
    period that many times `DOWN_AFTER` longer."""
    return is_live(entry, now, heartbeat * MEMBER_PERIODS / DOWN_AFTER)


def _counts(entry: FleetEntry, now: datetime | None, heartbeat: float) -> bool:
    """Whether a status may count at all: readable, verified, and (`now` given) a member's whose
    times can be believed."""
    if entry.trouble is not None:
        return False
    return now is None or (is_member(entry, now, heartbeat) and time_problem(entry, now, None) is None)


def members(fleet: Sequence[FleetEntry], group: str | None, own: FleetEntry | None, now: datetime | None,
            heartbeat: float) -> list[FleetEntry]:
    """The members of `group` (None: agents without one), by name: the agents whose statuses count,
    seen within `MEMBER_PERIODS` (`now` None: whenever), with this agent's `own` entry (when it is one
    of them) in place of what the status refs say of it."""
    me = own.agent if own is not None else None
    found = [e for e in fleet if e.agent != me and (e.group or None) == group and _counts(e, now, heartbeat)]
    return sorted([*found, *([own] if own is not None else [])], key=lambda e: e.agent)


def groups(fleet: Sequence[FleetEntry], now: datetime, heartbeat: float) -> list[str | None]:
    """The groups of the fleet's members (None: agents without a group), in name order."""
    found = {e.group or None for e in fleet if _counts(e, now, heartbeat)}
    return sorted(found, key=lambda g: g or "")


def reporter(group_members: Sequence[FleetEntry], me: str, now: datetime, heartbeat: float) -> str:
    """The agent that posts the group's status: the live one (`me`, or `is_live` by this agent's
    heartbeat) whose name sorts first."""
    return min(e.agent for e in group_members if e.agent == me or is_live(e, now, heartbeat))


def _on(entry: FleetEntry, commit: str) -> StatusFile | None:
    """The entry's status when it reports `commit`."""
    return entry.status if entry.status is not None and entry.status.commit == commit else None


def group_verdict(group_members: Sequence[FleetEntry], commit: str, own: Verdict | None = None,
                  me: str = "", *, alone: bool = False) -> Verdict:
    """The group's status on `commit`: ``failure`` once any agent failed it (its own words when that
    is this agent, else who), ``success`` once every member applied it, else ``pending``; the
    description counts (``3/5 applied``). An agent `alone` in its group (no other has ever written a
    status) says what it says itself."""
    if alone and own is not None:
        return own
    total = len(group_members)
    on = [(e, status) for e in group_members if (status := _on(e, commit)) is not None]
    applied = [(e, s) for e, s in on if s.result in COUNTED_APPLIED and checks_passed(e)]
    failed = [e for e, s in on if s.result == FAILED_RESULT or not checks_passed(e)]
    count = f"{len(applied)}/{total} applied"
    if failed:
        names = [e.agent for e in failed]
        if me in names and own is not None and own[0] in ("failure", "error"):
            return own[0], f"{count}; {me}: {own[1]}"
        more = f" and {len(names) - 1} more" if len(names) > 1 else ""
        return "failure", f"{count}; failed on {names[0]}{more}"
    if len(applied) == total:
        return "success", f"{count} ({sum(len(s.gateways) for _, s in applied)} gateway(s))"
    on_the_way = sum(1 for _, s in on if s.result in ON_THE_WAY)
    return "pending", count + (f", {on_the_way} on the way" if on_the_way else "")


def context_of(prefix: str, mode: str, agent: str, group: str | None) -> str:
    """The status's name: ``<prefix>/<agent>`` per agent; ``<prefix>/<group>`` per group
    (``<prefix>`` for agents without a group)."""
    if mode == "agent":
        return f"{prefix}/{agent}"
    return f"{prefix}/{group}" if group else prefix


__all__ = ["COUNTED_APPLIED", "MEMBER_PERIODS", "ON_THE_WAY", "Verdict", "context_of", "group_verdict",
           "groups", "is_member", "members", "outcome_verdict", "own_entry", "reporter", "started"]
