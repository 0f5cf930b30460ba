"""What gitsync publishes, as data: an agent's status (`StatusReport`), a refused commit's note
(`FailureNote`), and the pure functions that turn them into the files and names written to git."""

from __future__ import annotations

import io
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from ruamel.yaml import YAML

from gitsync import __version__
from gitsync.display import format_age, short_sha
from gitsync.log import redact
from gitsync.names import agent_slug
from gitsync.urls import display_url
from gitsync.writeback.statusfile import StatusError, load_document, status_from

if TYPE_CHECKING:
    pass


AGENTS_DIR = b"agents"  # on the status branch (the view): agents/<agent>.yaml
STATUS_FILE = b"status.yaml"  # in an agent's status ref
MAX_PRUNED_LISTED = 100  # pruned ids listed per kind in a status file; the count says the rest
MAX_CHECKS_LISTED = 50  # failed checks listed per gateway in a status file
MAX_TEXT = 4000  # characters of one message in a status file (readers refuse values past 16 KiB)
VOLATILE_STATUS_KEYS = ("time", "duration")  # a change of these alone is not worth a commit


# ---------------------------------------------------------------------------------------------------------
# What is published


@dataclass(frozen=True)
class GatewayStatus:
    """What one gateway was given in a sync, as the push stage reports it (url without credentials)."""

    url: str
    status: str
    versions: Mapping[str, int]
    digest: str | None
    counts: Mapping[str, int]
    pruned: Mapping[str, Sequence[str]]
    error: str | None = None
    checks: Mapping[str, Any] | None = None  # {passed: N, failed: [...]} when the repo declares checks
    rolled_back: bool = False  # a failed check gave this gateway the last good commit back
    two_step: bool = False  # moved keys or plugins took two pushes (gitsync.push.moves)

    def to_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "url": display_url(self.url),
            "status": self.status,
            "versions": {str(k): int(v) if float(v).is_integer() and abs(v) < 2**53 else v
                         for k, v in self.versions.items()},
            "digest": self.digest,
            "counts": {str(k): int(v) for k, v in self.counts.items()},
            "pruned": {str(k): _bounded_list(v, MAX_PRUNED_LISTED) for k, v in self.pruned.items() if v},
        }
        if self.error:
            doc["error"] = bounded_text(self.error)
        if self.checks is not None:
            doc["checks"] = {"passed": int(self.checks.get("passed") or 0),
                             "failed": [bounded_text(str(f)) for f in self.checks.get("failed") or []]
                             [:MAX_CHECKS_LISTED]}
        if self.rolled_back:
            doc["rolled_back"] = True
        if self.two_step:
            doc["two_step"] = True
        return doc


@dataclass(frozen=True)
class StatusReport:
    """One sync's outcome for this agent: the content of its status ref's ``status.yaml``.

    `applied_at` left None is derived when published: kept from the last status while the commit is
    the same, else the time of the status that first says it was applied (`with_applied_at`).
    `heartbeat` is the period (seconds) within which readers may expect the next write of the ref.
    The health checks' verdict is per gateway (`GatewayStatus.checks`, `rolled_back`).
    """

    agent: str
    commit: str
    subject: str
    result: str  # applied | healed | failed | drift_reported | ...
    gateways: Sequence[GatewayStatus]
    time: datetime
    duration: float
    version: str = __version__
    group: str | None = None
    applied_at: datetime | None = None
    heartbeat: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """The status file's content (also what the agent keeps as `last_result` in the state dir)."""
        doc: dict[str, Any] = {
            "agent": self.agent,
            "commit": self.commit,
            "subject": bounded_text(self.subject),
            "result": self.result,
            "gateways": [g.to_dict() for g in self.gateways],
            "time": iso_time(self.time),
            "duration": round(float(self.duration), 3),
            "gitsync": self.version,
        }
        if self.group:
            doc["group"] = self.group
        if self.applied_at is not None:
            doc["applied_at"] = iso_time(self.applied_at, precise=True)
        if self.heartbeat:
            doc["heartbeat"] = round(float(self.heartbeat), 3)
        return doc


@dataclass(frozen=True)
class FailureNote:
    """Why a commit was refused: one agent's section of the note on that commit."""

    agent: str
    commit: str
    time: datetime
    stage: str  # fetch | verify | render | validate | push
    errors: Sequence[str] = field(default_factory=tuple)  # each "file:line:col: kind[id].field: message"



# ---------------------------------------------------------------------------------------------------------
# Pure helpers: documents, notes, messages


def yaml_io() -> YAML:
    yaml = YAML(typ="safe")
    yaml.default_flow_style = False
    yaml.width = 1 << 16  # never fold a line: errors and URLs stay greppable
    yaml.allow_unicode = True
    return yaml


def dump_yaml(data: Any) -> str:
    out = io.StringIO()
    yaml_io().dump(data, out)
    return out.getvalue()


def iso_time(moment: datetime, *, precise: bool = False) -> str:
    """UTC, second precision (milliseconds when `precise`), ``Z`` suffix; a naive time is taken as UTC."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    moment = moment.astimezone(UTC)
    if precise:
        return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: Any) -> datetime | None:
    if isinstance(text, datetime):
        return text if text.tzinfo else text.replace(tzinfo=UTC)
    try:
        moment = datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def scrub(value: Any) -> Any:
    """`value` with every registered secret masked in every string, keys included (defence in depth)."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, Mapping):
        return {scrub(k): scrub(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [scrub(v) for v in value]
    return value


def bounded_text(text: str, limit: int = MAX_TEXT) -> str:
    """`text`, cut to `limit` characters (with an ellipsis) so that the status stays readable."""
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _bounded_list(items: Iterable[str], limit: int) -> list[str]:
    items = [str(i) for i in items]
    if len(items) <= limit:
        return items
    return [*items[:limit], f"… and {len(items) - limit} more"]


def agent_file_name(agent: str) -> str:
    """The agent's file on the status branch: ``<agent_slug>.yaml``."""
    return f"{agent_slug(agent)}.yaml"


def status_ref(prefix: str, agent: str, group: str | None = None) -> bytes:
    """``refs/gitsync/status`` and ``edge-1`` → ``refs/gitsync/status/edge-1``; with a group, the ref
    is sharded under it: ``refs/gitsync/status/canary/edge-1`` (a group's refs listed alone, by prefix)."""
    return group_prefix(prefix, group) + agent_slug(agent).encode()


def group_prefix(prefix: str, group: str | None) -> bytes:
    """The namespace of one group's status refs (``refs/gitsync/status/canary/``); without a group, the
    status refs' own namespace (where agents without a group, and gitsync before 45, write)."""
    base = status_prefix(prefix)
    return base + agent_slug(group).encode() + b"/" if group else base


def status_prefix(prefix: str) -> bytes:
    """The namespace of the status refs, with its trailing slash (``refs/`` added when missing)."""
    return full_ref(prefix.strip("/"), "refs/") + b"/"


def full_ref(name: str, default_prefix: str) -> bytes:
    """``gitsync/status`` → ``refs/heads/gitsync/status``; a name starting with ``refs/`` is kept."""
    return (name if name.startswith("refs/") else default_prefix + name).encode()


def status_headline(doc: Mapping[str, Any]) -> str:
    """``gitsync(<agent>): applied 1a2b3c4 to 2 gateways``: one status, in one line."""
    count = len(doc.get("gateways") or [])
    plural = "gateway" if count == 1 else "gateways"
    result = str(doc.get("result", "?"))
    preposition = "to" if result in ("applied", "healed", "unchanged") else "on"
    return redact(f"gitsync({doc.get('agent', '?')}): {result} {short_sha(str(doc.get('commit') or '-'))} "
                  f"{preposition} {count} {plural}")


def status_message(report: StatusReport) -> str:
    """The headline, then the applied commit's subject."""
    subject = report.subject.splitlines()[0] if report.subject else ""
    return redact(status_headline(report.to_dict()) + (f"\n\n{subject}\n" if subject else "\n"))


def same_substance(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """True when two status documents differ at most in time and duration."""
    def core(doc: Mapping[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in doc.items() if k not in VOLATILE_STATUS_KEYS}
    return core(old) == core(new)


def with_applied_at(previous: Mapping[str, Any] | None, doc: Mapping[str, Any]) -> dict[str, Any]:
    """`doc` with ``applied_at``: its own if set; the previous status's while the commit is the same;
    else its ``time`` when it says the commit was applied; else none (the commit never was)."""
    doc = dict(doc)
    if doc.get("applied_at") or not doc.get("commit"):
        return doc
    if previous and previous.get("commit") == doc["commit"] and previous.get("applied_at"):
        doc["applied_at"] = previous["applied_at"]
    elif doc.get("result") in ("applied", "healed"):
        doc["applied_at"] = doc.get("time")
    return doc


def status_document(report: StatusReport) -> dict[str, Any]:
    return scrub(report.to_dict())


def render_status(doc: Mapping[str, Any]) -> bytes:
    return dump_yaml(dict(doc)).encode()


def load_status(data: bytes) -> dict[str, Any] | None:
    """A status file as a plain document, when it passes the status schema (`statusfile`); else None.
    Bounded whatever the bytes are: a status ref may hold anything its writers pushed."""
    try:
        doc = load_document(data)
        status_from(doc)
    except StatusError:
        return None
    return doc


def summary_text(result: Mapping[str, Any], now: datetime, checked: datetime | None = None) -> str:
    """`gitsync status`: the last result from the state dir, readable; `checked`: when the agent last
    looked (polls that change nothing do not rewrite the result)."""
    if not result:
        return "no sync yet\n"
    lines = []
    commit = str(result.get("commit") or "-")
    subject = str(result.get("subject") or "")
    lines.append(f"agent:    {result.get('agent', '?')}")
    lines.append(f"commit:   {commit}" + (f"  {subject.splitlines()[0]}" if subject else ""))
    lines.append(f"result:   {result.get('result', '?')}")
    moment = parse_time(result.get("time")) if result.get("time") else None
    if moment:
        lines.append(f"time:     {iso_time(moment)} ({format_age((now - moment).total_seconds())} ago)")
        if checked is not None and (checked - moment).total_seconds() >= 1:
            lines.append(f"checked:  {iso_time(checked)} ({format_age((now - checked).total_seconds())} ago, "
                         "nothing changed since)")
    if "duration" in result:
        lines.append(f"duration: {float(result['duration']):.3f}s")
    for gateway in result.get("gateways") or []:
        versions = ", ".join(f"{k}={v}" for k, v in sorted((gateway.get("versions") or {}).items()))
        lines.append(f"gateway:  {gateway.get('url', '?')}  {gateway.get('status', '?')}"
                     + (f"  [{versions}]" if versions else ""))
        if gateway.get("error"):
            lines.append(f"  error:  {gateway['error']}")
    if result.get("last_good") and result.get("last_good") != result.get("commit"):
        lines.append(f"live:     {result['last_good']}  (last good)")
    for name, source in (result.get("sources") or {}).items():  # [[sources]]: each one's own
        refused = f"  (its tip {str(source['refused'])[:7]} refused: {source.get('why', '')})" \
            if source.get("refused") else ""
        lines.append(f"source:   {name}  {source.get('last_good') or '-'}{refused}")
    problems = list(result.get("problems") or [])
    for problem in problems[:10]:
        lines.append(f"problem:  {result.get('stage') or '?'}: {problem}")
    if len(problems) > 10:
        lines.append(f"problem:  ... and {len(problems) - 10} more")
    return redact("\n".join(lines) + "\n")
