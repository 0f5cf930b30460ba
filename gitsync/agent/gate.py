"""Agent groups: may this agent apply a commit yet, given what the fleet's statuses show? (pure)

The fleet is the list of status documents `gitsync.writeback.fleet.FleetReader` reads from the status
refs: each agent's last status (its ``group``, ``commit``, ``result``, ``applied_at``, the
``heartbeat`` period it promises, and per gateway the health checks' verdict: ``checks``,
``rolled_back``), plus ``seen``, when its status ref was last written (the heartbeat's commit time).

An agent is **live** while ``seen`` is younger than `DOWN_AFTER` heartbeats of that agent's own
period: one missed heartbeat is tolerated (a write-back that failed is retried on the next poll),
two are not. A down agent's good news does not count; its bad news still does.

An agent whose ``after_group`` is set applies a commit only when at least ``after_count`` live agents
of that group show that commit applied (``applied`` or ``healed``: on all their gateways), their
checks passed or none declared, for at least ``soak``. Any agent of that group that shows the commit
failed (a refused commit, a gateway it could not be brought to, a failed check, a rollback) holds
the commit back, whatever the others show: the canaries exist to catch exactly that. One still on
its way (``canary``, ``soaking``: its own gateways one by one) neither counts nor holds back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from gitsync.writeback.wire import format_age, parse_time, short_sha

DOWN_AFTER = 2.0  # heartbeat periods without a write before an agent counts as down
APPLIED_RESULTS = frozenset({"applied", "healed"})  # the commit is live on the agent's gateways
FAILED_RESULT = "failed"  # refused, rolled back, a gateway not brought to it ("canary", "soaking": not yet)


@dataclass(frozen=True)
class GateVerdict:
    """Whether the commit may be applied now, why (for the log and the status), and the earliest time
    it could become allowed if nothing else changes (None: not foreseeable, e.g. nobody ran it yet)."""

    allowed: bool
    why: str
    earliest: datetime | None = None


def heartbeat_of(doc: Mapping[str, Any], default: float) -> float:
    """The heartbeat period (seconds) the agent promises in its status, else `default`."""
    value = doc.get("heartbeat")
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return float(value)
    return default


def is_live(doc: Mapping[str, Any], now: datetime, heartbeat: float) -> bool:
    """Whether the agent wrote its status ref within `DOWN_AFTER` of its heartbeat period."""
    seen = parse_time(doc.get("seen")) if doc.get("seen") else None
    return seen is not None and (now - seen).total_seconds() <= DOWN_AFTER * heartbeat_of(doc, heartbeat)


def checks_of(doc: Mapping[str, Any]) -> tuple[int, int] | None:
    """The health checks in a status, over its gateways: (passed, failed); None when none ran. A
    gateway rolled back, or a verdict that cannot be read, counts as a failure."""
    passed = failed = 0
    ran = False
    for gateway in doc.get("gateways") or []:
        if not isinstance(gateway, Mapping):
            continue
        checks = gateway.get("checks")
        if gateway.get("rolled_back"):
            failed, ran = failed + 1, True
        if checks is None:
            continue
        ran = True
        if not isinstance(checks, Mapping):
            failed += 1
            continue
        count = checks.get("passed")
        passed += count if isinstance(count, int) and not isinstance(count, bool) else 0
        failed += len(checks.get("failed") or [])
    return (passed, failed) if ran else None


def checks_passed(doc: Mapping[str, Any]) -> bool:
    """The health checks' verdict in a status: passed on every gateway, or none declared."""
    checks = checks_of(doc)
    return checks is None or checks[1] == 0


def applied_since(doc: Mapping[str, Any]) -> datetime | None:
    """When the agent applied its commit: ``applied_at``, else (an older writer) its status's ``time``,
    which is later, so a soak measured from it is never shorter than the real one. A time written to
    the second (cut down: ``time``, an older writer's ``applied_at``) counts from the next second, for
    the same reason."""
    for key in ("applied_at", "time"):
        if doc.get(key):
            moment = parse_time(doc[key])
            if moment is not None:
                return moment if "." in str(doc[key]) else moment + timedelta(seconds=1)
    return None


def _names(docs: Sequence[Mapping[str, Any]]) -> str:
    return ", ".join(str(d.get("agent", "?")) for d in docs)


def group_gate(fleet: Sequence[Mapping[str, Any]], commit: str, after_group: str | None, after_count: int,
               soak: float, now: datetime, heartbeat: float) -> GateVerdict:
    """May `commit` be applied now by an agent that goes after `after_group`? (see the module's docstring)

    `heartbeat` is the period assumed for an agent whose status does not say its own; `soak` in
    seconds; `now` timezone-aware.
    """
    if not after_group:
        return GateVerdict(True, "no after_group: a commit applies at once", now)
    commit_text = short_sha(commit)
    members = [d for d in fleet if d.get("group") == after_group]
    if not members:
        return GateVerdict(False, f"waiting for group {after_group}: no agent of it has written a status")
    failed = [d for d in members if d.get("commit") == commit
              and (d.get("result") == FAILED_RESULT or not checks_passed(d))]
    if failed:
        return GateVerdict(False, f"{commit_text} failed on {after_group} agent(s) {_names(failed)}: held "
                                  "back until a new commit")
    live = [d for d in members if is_live(d, now, heartbeat)]
    down = [d for d in members if d not in live]
    ran = sorted(moment for d in live if d.get("commit") == commit and d.get("result") in APPLIED_RESULTS
                 if (moment := applied_since(d)) is not None)
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
    if down:
        seen = [f"{d.get('agent', '?')} seen {_ago(d, now)}" for d in down]
        why += f"; down, not counted: {', '.join(seen)}"
    if len(live) < need:
        why += f"; only {len(live)} live agent(s) in {after_group}"
    return GateVerdict(False, why, earliest)


def _ago(doc: Mapping[str, Any], now: datetime) -> str:
    seen = parse_time(doc.get("seen")) if doc.get("seen") else None
    return f"{format_age((now - seen).total_seconds())} ago" if seen else "never"


# ---------------------------------------------------------------------------------------------------------
# `gitsync status --fleet`


def _checks_text(doc: Mapping[str, Any]) -> str:
    checks = checks_of(doc)
    if checks is None:
        return "-"
    passed, failed = checks
    return f"{failed} failed" if failed else f"{passed} passed"


def fleet_table(fleet: Sequence[Mapping[str, Any]], now: datetime, heartbeat: float) -> str:
    """One aligned line per agent: commit, result, age of that result, group, checks, and when its
    status ref was last written (``(down)`` once that is older than `DOWN_AFTER` heartbeats)."""
    rows = [("AGENT", "COMMIT", "RESULT", "AGE", "GROUP", "CHECKS", "SEEN")]
    for doc in fleet:
        moment = parse_time(doc.get("time")) if doc.get("time") else None
        age = format_age((now - moment).total_seconds()) if moment else "?"
        seen = _ago(doc, now).removesuffix(" ago")
        if not is_live(doc, now, heartbeat):
            seen += " (down)"
        rows.append((str(doc.get("agent", "?")), short_sha(str(doc.get("commit") or "-")),
                     str(doc.get("result", "?")), age, str(doc.get("group") or "-"), _checks_text(doc), seen))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    return "".join(
        "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row[:-1])) + "  " + row[-1] + "\n"
        for row in rows)


__all__ = ["APPLIED_RESULTS", "DOWN_AFTER", "GateVerdict", "applied_since", "checks_of", "checks_passed",
           "fleet_table", "group_gate", "heartbeat_of", "is_live"]
