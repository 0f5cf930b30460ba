"""The events people are told about, from a sync's outcome (pure, but for the clock passed in).

A commit applied, refused (at verify, render, validate or push), rolled back by a health check, or
held by the deletion guard; drift healed; a gateway that has not answered for longer than a
threshold, and the same gateway answering again. `outcome_events` reads them off one outcome;
`Reachability` remembers since when each gateway has not answered, across outcomes.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from gitsync.agent.outcomes import Stage, SyncOutcome, SyncResult
from gitsync.display import format_age, short_sha
from gitsync.log import clip, redact
from gitsync.push.results import GatewayResult

MAX_PROBLEMS = 20  # problems in one event; the note on the commit has them all


class EventKind(StrEnum):
    APPLIED = "applied"
    REFUSED = "refused"
    ROLLED_BACK = "rolled_back"
    HELD_BY_GUARD = "held_by_guard"
    DRIFT_HEALED = "drift_healed"
    GATEWAY_UNREACHABLE = "gateway_unreachable"
    GATEWAY_BACK = "gateway_back"


_MARK = {EventKind.APPLIED: "✅", EventKind.REFUSED: "❌", EventKind.ROLLED_BACK: "↩️",
         EventKind.HELD_BY_GUARD: "✋", EventKind.DRIFT_HEALED: "🩹", EventKind.GATEWAY_UNREACHABLE: "⚠️",
         EventKind.GATEWAY_BACK: "✅"}


@dataclass(frozen=True)
class Event:
    """One thing that happened, as notifications carry it (problems redacted when made)."""

    kind: EventKind
    agent: str
    commit: str | None = None
    subject: str = ""
    stage: str | None = None
    problems: tuple[str, ...] = ()
    gateways: tuple[str, ...] = ()
    group: str | None = None
    seconds: float | None = None  # how long a gateway has not answered
    extra: Mapping[str, Any] = field(default_factory=dict)
    #: Tells apart events that are otherwise the same (two outages of one gateway, two drifts healed).
    occurrence: float | None = None

    @property
    def id(self) -> str:
        """The same for the same event told again (a retry, a later outcome): what dedup keys on."""
        key = [str(self.kind), self.agent, self.commit, self.stage, sorted(self.gateways), self.occurrence]
        return hashlib.sha256(json.dumps(key).encode()).hexdigest()[:20]

    @property
    def text(self) -> str:
        """One line for people (the ``text`` a chat's incoming webhook shows)."""
        who = f"gitsync {self.agent}" + (f" ({self.group})" if self.group else "")
        commit = short_sha(self.commit) if self.commit else ""
        subject = f" “{clip(self.subject, 72)}”" if self.subject else ""
        first = f": {self.problems[0]}" if self.problems else ""
        gateways = ", ".join(self.gateways)
        line = {
            EventKind.APPLIED: f"applied {commit}{subject} to {len(self.gateways)} gateway(s)",
            EventKind.REFUSED: f"refused {commit}{subject} at {self.stage}{first}",
            EventKind.ROLLED_BACK: f"rolled back {commit}{subject}: a health check failed{first}",
            EventKind.HELD_BY_GUARD: f"held {commit}{subject} by the deletion guard{first}",
            EventKind.DRIFT_HEALED: f"drift healed on {gateways}: {commit} re-applied",
            EventKind.GATEWAY_UNREACHABLE: f"gateway {gateways} has not answered for "
                                           f"{format_age(self.seconds or 0)}",
            EventKind.GATEWAY_BACK: f"gateway {gateways} answers again",
        }[self.kind]
        return redact(f"{_MARK[self.kind]} {who}: {line}")

    def to_json(self, time: str) -> dict[str, Any]:
        """The notification's body: the event, and `text` for chats; every text in it redacted (a
        subject, a problem, an extra's error may quote a secret)."""
        body: dict[str, Any] = {"event": str(self.kind), "id": self.id, "agent": self.agent,
                                "group": self.group, "commit": self.commit, "subject": self.subject,
                                "stage": self.stage, "problems": list(self.problems),
                                "gateways": list(self.gateways), "time": time, "text": self.text}
        if self.seconds is not None:
            body["seconds"] = round(self.seconds, 1)
        return redacted(body | dict(self.extra))


def redacted(value: Any) -> Any:
    """`value` (JSON: mappings, lists, texts, numbers) with every text in it redacted, keys too."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, Mapping):
        return {redact(str(key)): redacted(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [redacted(item) for item in value]
    return value


def _refusal_kind(stage: Stage | None) -> EventKind:
    if stage is Stage.HEALTH:
        return EventKind.ROLLED_BACK
    if stage is Stage.GUARD:
        return EventKind.HELD_BY_GUARD
    return EventKind.REFUSED


def outcome_events(outcome: SyncOutcome, bad: Mapping[str, str], agent: str, group: str | None = None, *,
                   now: float = 0.0) -> list[Event]:
    """What `outcome` (ended at `now`) tells people: applied, refused / rolled back / held (a commit now
    in `bad`), drift healed. A failure that is not the commit's (a gateway that did not answer) is none
    of these: `Reachability` tells it once it lasts."""
    problems = tuple(redact(p) for p in outcome.problems[:MAX_PROBLEMS])
    common = {"agent": agent, "group": group, "commit": outcome.commit, "subject": outcome.subject}
    events = []
    if outcome.result is SyncResult.APPLIED:
        gateways = tuple(r.url for r in outcome.gateways if r.ok and r.rollback is None)
        events.append(Event(EventKind.APPLIED, gateways=gateways, **common))
    elif outcome.result is SyncResult.FAILED and outcome.commit in bad:
        events.append(Event(_refusal_kind(outcome.stage), stage=str(outcome.stage) if outcome.stage else None,
                            problems=problems, gateways=tuple(r.url for r in outcome.gateways), **common))
    if outcome.drifted and outcome.result in (SyncResult.HEALED, SyncResult.APPLIED):
        healed = tuple(r.url for r in outcome.gateways if r.url in outcome.drifted and r.ok)
        if healed:
            events.append(Event(EventKind.DRIFT_HEALED, gateways=healed, occurrence=now, **common))
    return events


class Reachability:
    """Since when each gateway has not answered, from the push results of each outcome: a gateway
    unreachable for `threshold` seconds is told once, and again when it answers."""

    def __init__(self, threshold: float) -> None:
        self.threshold = threshold
        self._down_since: dict[str, float] = {}
        self._told: set[str] = set()

    def observe(self, results: Iterable[GatewayResult], now: float, agent: str, group: str | None = None,
                ) -> list[Event]:
        results = list(results)
        events = []
        for result in results:
            if result.unreachable:
                self._down_since.setdefault(result.url, now)
            elif result.ok:
                self._down_since.pop(result.url, None)
                if result.url in self._told:
                    self._told.discard(result.url)
                    events.append(Event(EventKind.GATEWAY_BACK, agent, gateways=(result.url,), group=group,
                                        occurrence=now))
        for url, since in self._down_since.items():
            if url not in self._told and now - since >= self.threshold:
                self._told.add(url)
                events.append(Event(EventKind.GATEWAY_UNREACHABLE, agent, gateways=(url,), group=group,
                                    seconds=now - since, occurrence=since,
                                    extra={"error": next((redact(r.error or "") for r in results
                                                          if r.url == url and r.error), None)}))
        return events


__all__ = ["Event", "EventKind", "Reachability", "outcome_events", "redacted"]
