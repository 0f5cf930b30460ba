"""What a commit's status on the forge says (pure): one agent's, or one group's from the fleet.

gitsync's four states are GitHub's: ``pending`` (an agent started on the commit, or the group is on its
way), ``success`` (applied, and on how many gateways), ``failure`` (the commit was refused: at which
stage, and the first problem's ``file:line: message``) and ``error`` (the commit is not at fault, a
gateway did not answer). Each forge client maps them to its own (`gitsync.feedback.forge`).

A fleet posts one status per group (`group_verdict`), computed from the agents' status documents (the
status refs, `gitsync.writeback.fleet.FleetReader`), and by one agent of the group: the live one
whose name sorts first (`reporter`). Every agent reads the same refs, so they agree on who that is
and a status has one writer at a time, which is what a forge that keeps the last status posted for a
context needs. The count is over the group's members: the agents seen within `MEMBER_PERIODS` of
their heartbeat, so that an agent late with its heartbeat (busy, or its write-back slow) still counts,
and one gone for longer has left the group. Status documents are untrusted input: each field is
checked before use.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from gitsync.agent.gate import APPLIED_RESULTS, DOWN_AFTER, heartbeat_of
from gitsync.agent.outcomes import Stage, SyncOutcome, SyncResult
from gitsync.log import redact
from gitsync.writeback.wire import parse_time

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


def own_document(agent: str, group: str | None, commit: str, result: str, gateways: int, seen: str,
                 ) -> dict[str, Any]:
    """This agent's status as the fleet's documents say it (its own write-back may lag behind)."""
    return {"agent": agent, "group": group, "commit": commit, "result": result, "seen": seen,
            "gateways": [{} for _ in range(gateways)]}


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def readable(doc: Any) -> bool:
    """A status document whose fields this module reads have the types it expects; any other is
    left out (never counted, never a crash)."""
    if not isinstance(doc, Mapping) or not _text(doc.get("agent")):
        return False
    if not all(isinstance(doc.get(k, ""), str) for k in ("commit", "result", "seen")):
        return False
    gateways = doc.get("gateways", [])
    return isinstance(gateways, list) and all(isinstance(g, Mapping) for g in gateways)


def checks_failed(doc: Mapping[str, Any]) -> bool:
    """A gateway of a (readable) status was rolled back, or its health checks failed or cannot be read."""
    for gateway in doc.get("gateways", []):
        checks = gateway.get("checks")
        if gateway.get("rolled_back") or (checks is not None and (not isinstance(checks, Mapping)
                                                                   or checks.get("failed"))):
            return True
    return False


def seen_within(doc: Mapping[str, Any], now: datetime, heartbeat: float, periods: float) -> bool:
    """Whether the agent wrote its status within `periods` of its heartbeat period."""
    seen = parse_time(doc.get("seen")) if doc.get("seen") else None
    return seen is not None and (now - seen).total_seconds() <= periods * heartbeat_of(doc, heartbeat)


def members(fleet: Sequence[Any], group: str | None, own: Mapping[str, Any] | None, now: datetime | None,
            heartbeat: float) -> list[Mapping[str, Any]]:
    """The members of `group` (None: agents without one): the agents seen within `MEMBER_PERIODS` (`now`
    None: whenever), this agent's `own` document (when it is one of them) in place of what the status
    refs say of it."""
    me = own.get("agent") if own is not None else None
    found = [d for d in fleet if readable(d) and d["agent"] != me and (d.get("group") or None) == group
             and (now is None or seen_within(d, now, heartbeat, MEMBER_PERIODS))]
    return sorted([*found, *([own] if own is not None else [])], key=lambda d: _text(d.get("agent")))


def groups(fleet: Sequence[Any], now: datetime, heartbeat: float) -> list[str | None]:
    """The groups of the fleet's members (None: agents without a group), in name order."""
    found = {d.get("group") or None for d in fleet if readable(d)
             and seen_within(d, now, heartbeat, MEMBER_PERIODS) and isinstance(d.get("group") or "", str)}
    return sorted(found, key=lambda g: g or "")


def reporter(group_members: Sequence[Mapping[str, Any]], me: str, now: datetime, heartbeat: float) -> str:
    """The agent that posts the group's status: the live one (`me`, or seen within `DOWN_AFTER` of its
    heartbeat) whose name sorts first."""
    return min(_text(d.get("agent")) for d in group_members
               if d.get("agent") == me or seen_within(d, now, heartbeat, DOWN_AFTER))


def _gateway_count(doc: Mapping[str, Any]) -> int:
    gateways = doc.get("gateways")
    return len(gateways) if isinstance(gateways, list) else 0


def group_verdict(group_members: Sequence[Mapping[str, Any]], commit: str, own: Verdict | None = None,
                  me: str = "", *, alone: bool = False) -> Verdict:
    """The group's status on `commit`: ``failure`` once any agent failed it (its own words when that
    is this agent, else who), ``success`` once every live agent applied it, else ``pending``; the
    description counts (``3/5 applied``). An agent `alone` in its group (no other has ever written a
    status) says what it says itself."""
    if alone and own is not None:
        return own
    total = len(group_members)
    on = [d for d in group_members if d.get("commit") == commit]
    applied = [d for d in on if d.get("result") in COUNTED_APPLIED and not checks_failed(d)]
    failed = [d for d in on if d.get("result") == "failed" or checks_failed(d)]
    count = f"{len(applied)}/{total} applied"
    if failed:
        names = [_text(d.get("agent")) or "?" for d in failed]
        if me in names and own is not None and own[0] in ("failure", "error"):
            return own[0], f"{count}; {me}: {own[1]}"
        more = f" and {len(names) - 1} more" if len(names) > 1 else ""
        return "failure", f"{count}; failed on {names[0]}{more}"
    if len(applied) == total:
        return "success", f"{count} ({sum(_gateway_count(d) for d in applied)} gateway(s))"
    on_the_way = sum(1 for d in on if d.get("result") in ON_THE_WAY)
    return "pending", count + (f", {on_the_way} on the way" if on_the_way else "")


def context_of(prefix: str, mode: str, agent: str, group: str | None) -> str:
    """The status's name: ``<prefix>/<agent>`` per agent; ``<prefix>/<group>`` per group
    (``<prefix>`` for agents without a group)."""
    if mode == "agent":
        return f"{prefix}/{agent}"
    return f"{prefix}/{group}" if group else prefix


__all__ = ["COUNTED_APPLIED", "ON_THE_WAY", "Verdict", "checks_failed", "context_of", "group_verdict",
           "groups", "members", "outcome_verdict", "own_document", "readable", "reporter", "seen_within",
           "started"]
