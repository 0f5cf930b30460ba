"""Notes on refused commits: one section per agent in a git note, merged, bounded and pruned
(pure functions over the note's text)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from ruamel.yaml.error import YAMLError

from gitsync.log import clip, redact
from gitsync.writeback.wire import FailureNote, dump_yaml, iso_time, parse_time, yaml_io

if TYPE_CHECKING:
    pass


MAX_ERROR_CHARS = 1024  # one error line in a note; longer ones are cut (a section is bounded anyway)
_SECTION_SPLIT = re.compile(r"^---[ \t]*$\n?", re.MULTILINE)


@dataclass(frozen=True)
class NoteSection:
    agent: str
    time: datetime | None
    stage: str
    errors: tuple[str, ...]
    text: str  # as written, starting with ``---``


def render_section(note: FailureNote, max_bytes: int) -> str:
    """One agent's section: a YAML document, at most `max_bytes` (errors beyond are summarised)."""
    header = "---\n" + dump_yaml({"agent": redact(note.agent), "time": iso_time(note.time),
                                  "stage": redact(note.stage)})
    errors = [redact(e) for e in note.errors]
    if not errors:
        return header + "errors: []\n"
    per_error = max(64, min(MAX_ERROR_CHARS, max_bytes // 4))
    text = header + "errors:\n"
    used = len(text.encode())
    for index, error in enumerate(errors):
        error = clip(error, per_error)
        line = dump_yaml([error])
        left = len(errors) - index - 1
        reserve = len(dump_yaml([f"… and {left} more"]).encode()) if left else 0
        if used + len(line.encode()) + reserve > max_bytes:
            return text + dump_yaml([f"… and {len(errors) - index} more"])
        text += line
        used += len(line.encode())
    return text


def parse_note(text: str) -> tuple[list[str], dict[str, NoteSection]]:
    """Split a note into foreign pieces (kept verbatim, e.g. written by hand) and gitsync sections."""
    foreign: list[str] = []
    sections: dict[str, NoteSection] = {}
    pieces = _SECTION_SPLIT.split(text)
    if pieces and pieces[0].strip():
        foreign.append(pieces[0].rstrip("\n") + "\n")
    for piece in pieces[1:]:
        if not piece.strip():
            continue
        try:
            doc = yaml_io().load(piece)
        except YAMLError:
            doc = None
        if not (isinstance(doc, dict) and isinstance(doc.get("agent"), str)):
            foreign.append("---\n" + piece.rstrip("\n") + "\n")
            continue
        errors = doc.get("errors") or []
        sections[doc["agent"]] = NoteSection(
            agent=doc["agent"], time=parse_time(doc.get("time")), stage=str(doc.get("stage", "")),
            errors=tuple(str(e) for e in errors) if isinstance(errors, list) else (str(errors),),
            text="---\n" + piece.rstrip("\n") + "\n")
    return foreign, sections


def join_note(foreign: Sequence[str], sections: Mapping[str, NoteSection | str]) -> str:
    parts = list(foreign)
    for agent in sorted(sections):
        section = sections[agent]
        parts.append(section.text if isinstance(section, NoteSection) else section)
    return "".join(parts)


def merge_note(old: str | None, note: FailureNote, max_bytes: int, refresh_after: float) -> str | None:
    """The note with this agent's section replaced (others kept), or None when nothing changes.

    A section equal in substance (stage and errors) is rewritten only once it is older than
    `refresh_after` seconds, so a failure seen on every poll does not write on every poll, yet a
    failure that persists is not pruned by retention.
    """
    foreign, sections = parse_note(old or "")
    new_text = render_section(note, max_bytes)
    agent = redact(note.agent)
    current = sections.get(agent)
    if current is not None:
        _, fresh = parse_note(new_text)
        same = (current.stage, current.errors) == (fresh[agent].stage, fresh[agent].errors)
        age = (_utc(note.time) - current.time).total_seconds() if current.time else float("inf")
        if same and age < refresh_after:
            return None
    merged: dict[str, NoteSection | str] = dict(sections)
    merged[agent] = new_text
    return join_note(foreign, merged)


def prune_note(text: str, cutoff: datetime) -> str | None:
    """The note without sections older than `cutoff`; "" when nothing is left, None when unchanged."""
    foreign, sections = parse_note(text)
    kept = {a: s for a, s in sections.items() if s.time is None or s.time >= cutoff}
    if len(kept) == len(sections):
        return None
    return join_note(foreign, kept)


def oldest_section(text: str) -> datetime | None:
    times = [s.time for s in parse_note(text)[1].values() if s.time is not None]
    return min(times) if times else None


def _utc(moment: datetime) -> datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
