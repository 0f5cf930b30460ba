"""Write-back: tell git what happened, where GitOps users look.

Three things are written to the config repo's remote, with dulwich and no work tree:

* **one status ref per agent**, ``refs/gitsync/status/<agent>`` (`status_refs`): a commit whose tree
  holds one file, ``status.yaml``: the commit this agent last synced, the result, what each gateway
  was given and its health checks' verdict, the agent's group, when that commit was applied. Each agent
  writes only its own ref, so a fleet publishing at once never contends. A status commit, without
  parents, is made when the status changes in substance (time and duration do not count); every
  `status_heartbeat` in between, the ref moves to a heartbeat: a child of that status commit with
  the same tree and a fresh commit time, replacing the last heartbeat. So a reader tells a live
  agent from a down one (`gitsync.agent.gate`) at the cost of one small object, the server leaves out
  the tree and blob a reader has (they hang from a commit it has), and a ref is never more than
  two commits deep: a reader never fetches an agent's history;
* the **status branch** (``gitsync/status``; empty: none): ``agents/<agent>.yaml`` for every agent, a
  view built from the refs for people browsing the forge, whose history is the fleet's. An agent
  rebuilds it after changing its own status, with compare-and-swap and bounded attempts; it is best
  effort (the next rebuild, by any agent, catches up what one lost) and nothing in gitsync reads it;
* **notes** (default ``refs/notes/gitsync``) on a commit that failed: one section per agent (a YAML
  document each, sorted by agent), holding the stage and every error as
  ``file:line:col: kind[id].field: message``. A section is bounded in size, and sections older than
  the retention are pruned whenever notes are written, so the notes ref cannot grow without bound.
  The notes ref is shared by the fleet (writes are rare: a refused commit): compare-and-swap with
  retries, as the view.

A status or note that could not be written stays pending: it is retried on the next publish and on
every `WriteBack.refresh` (the daemon's poll), and `sync --once` exits 3 while anything is pending.
Nothing here raises to the sync.

The local side is a small bare repo in the state dir (``<state_dir>/writeback``), separate from the
source mirror: it only ever holds status commits and notes, which share no history with the config
branches.
"""

from __future__ import annotations

import contextlib
import io
import re
import stat
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dulwich.errors import HangupException
from dulwich.file import FileLocked
from dulwich.gc import maybe_auto_gc
from dulwich.notes import NotesTree
from dulwich.objects import Blob, Commit, Tree
from dulwich.protocol import PEELED_TAG_SUFFIX, ZERO_SHA
from dulwich.repo import Repo
from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from gitsync import __version__
from gitsync.backoff import Backoff, backoff_delay
from gitsync.log import clip, logger, redact
from gitsync.source.mirror import SHA_RE
from gitsync.source.transport import Remote, SourceError
from gitsync.urls import display_url

if TYPE_CHECKING:

    from gitsync.settings import Settings

AGENTS_DIR = b"agents"  # on the status branch (the view): agents/<agent>.yaml
STATUS_FILE = b"status.yaml"  # in an agent's status ref
MAX_ERROR_CHARS = 1024  # one error line in a note; longer ones are cut (a section is bounded anyway)
MAX_PRUNED_LISTED = 100  # pruned ids listed per kind in a status file; the count says the rest
MAX_PENDING_NOTES = 100  # failure notes kept for the next publish when the remote is unreachable
VOLATILE_STATUS_KEYS = ("time", "duration")  # a change of these alone is not worth a commit
# The work repo's refs: what it last saw of each remote ref. Under refs/heads/, because a fetch
# offers the local heads as what it has: the server then sends only objects the repo lacks.
LOCAL_OWN_REF = b"refs/heads/own"  # this agent's status ref
LOCAL_VIEW_REF = b"refs/heads/view"
LOCAL_NOTES_REF = b"refs/heads/notes"
LOCAL_FLEET_PREFIX = b"refs/heads/fleet/"  # every agent's status ref
_NON_FAST_FORWARD = re.compile(r"non-fast-forward|not a fast.forward", re.IGNORECASE)
# Words in a refusal that mean "you may not push here", as git daemon, http-backend, ssh and the OS say it.
_DENIED = re.compile(
    r"permission denied|access denied|not permitted|forbidden|unauthori[sz]ed|authentication failed|"
    r"\b40[13]\b|service not enabled|read-only|read only", re.IGNORECASE)


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
            doc["error"] = self.error
        if self.checks is not None:
            doc["checks"] = dict(self.checks)
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
            "subject": self.subject,
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


def _yaml() -> YAML:
    yaml = YAML(typ="safe")
    yaml.default_flow_style = False
    yaml.width = 1 << 16  # never fold a line: errors and URLs stay greppable
    yaml.allow_unicode = True
    return yaml


def dump_yaml(data: Any) -> str:
    out = io.StringIO()
    _yaml().dump(data, out)
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


def _bounded_list(items: Iterable[str], limit: int) -> list[str]:
    items = [str(i) for i in items]
    if len(items) <= limit:
        return items
    return [*items[:limit], f"… and {len(items) - limit} more"]


_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9._-]")


def agent_slug(agent: str) -> str:
    """An agent's name as one path component, valid in a file name and a ref name alike: anything but
    ``[A-Za-z0-9._-]`` becomes ``-``, runs of dots one dot, no dot at either end, no ``.lock`` suffix."""
    name = re.sub(r"\.{2,}", ".", _UNSAFE_NAME.sub("-", agent)).strip(".")
    if name.endswith(".lock"):
        name = name.removesuffix(".lock") + "-lock"
    return name or "agent"


def agent_file_name(agent: str) -> str:
    """The agent's file on the status branch: ``<agent_slug>.yaml``."""
    return f"{agent_slug(agent)}.yaml"


def status_ref(prefix: str, agent: str) -> bytes:
    """``refs/gitsync/status`` and ``edge-1`` → ``refs/gitsync/status/edge-1``."""
    return status_prefix(prefix) + agent_slug(agent).encode()


def status_prefix(prefix: str) -> bytes:
    """The namespace of the status refs, with its trailing slash (``refs/`` added when missing)."""
    return full_ref(prefix.strip("/"), "refs/") + b"/"


def full_ref(name: str, default_prefix: str) -> bytes:
    """``gitsync/status`` → ``refs/heads/gitsync/status``; a name starting with ``refs/`` is kept."""
    return (name if name.startswith("refs/") else default_prefix + name).encode()


def short_sha(sha: str) -> str:
    return sha[:7]


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
    try:
        doc = _yaml().load(data)
    except YAMLError:
        return None
    return doc if isinstance(doc, dict) else None


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
            doc = _yaml().load(piece)
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


def is_permission_denied(failure: BaseException | str) -> bool:
    """Does this push failure mean "you may not write here" (as opposed to "try again later")?"""
    if isinstance(failure, PermissionError):
        return True
    text = failure if isinstance(failure, str) else f"{type(failure).__name__}: {failure}"
    return bool(_DENIED.search(text))


# ---------------------------------------------------------------------------------------------------------
# Talking to the remote


class WriteBackError(Exception):
    """A write-back could not be completed (the remote refused, kept moving, or is unreachable)."""


class _RefMoved(Exception):
    """The remote ref is no longer the tip the new commit was built on."""


def open_work_repo(path: Path) -> Repo:
    """The local bare repo holding fetched status/notes objects; created on first use."""
    if (path / "objects").is_dir():
        return Repo(str(path))
    path.mkdir(parents=True, exist_ok=True)
    return Repo.init_bare(str(path))


def _under(ref: bytes, wanted: Sequence[bytes]) -> bool:
    """`ref` is one of `wanted`: a name ending in ``/`` is a namespace, any other an exact ref."""
    return any(ref.startswith(w) and (w.endswith(b"/") or ref == w) for w in wanted)


def _transient(exc: BaseException) -> bool:
    """A failure worth another try soon: no answer, or a connection dropped (a busy server: git daemon
    drops connections beyond --max-connections), as opposed to a refusal or a missing repository."""
    if isinstance(exc, SourceError):
        cause = exc.__context__  # what the transport raised (`Remote.network` words it for people)
        return exc.unreachable or isinstance(cause, HangupException | ConnectionError | TimeoutError)
    return isinstance(exc, ConnectionError | TimeoutError)


class _Wire:
    """The remote seen from the local work repo: read the refs of some names (fetching only the tips
    it lacks), and move one ref by compare-and-swap."""

    def __init__(self, remote: Remote, repo: Repo) -> None:
        self.url = remote.url
        self.remote = remote
        self.client, self.path = remote.client()
        self.repo = repo

    def close(self) -> None:
        self.client.close()

    def _network(self, action: Callable[[], Any]) -> Any:
        return self.remote.network("writeback", action)

    def fetch(self, wanted: Sequence[bytes]) -> dict[bytes, bytes]:
        """The remote's refs among `wanted` (ref → commit), the objects of each tip fetched unless held.

        Protocol v2 filters the advertisement by prefix on the server (``ls-refs``); a read where no
        ref moved asks for no pack at all."""
        store = self.repo.object_store

        def wants(refs: Mapping[bytes, bytes], depth: int | None = None) -> list[bytes]:
            return list(dict.fromkeys(sha for ref, sha in refs.items()
                                      if _under(ref, wanted) and sha != ZERO_SHA and sha not in store))

        result = self._network(lambda: self.client.fetch(self.path, self.repo, determine_wants=wants,
                                                         ref_prefix=list(wanted)))
        tips = {ref: sha for ref, sha in result.refs.items()
                if _under(ref, wanted) and sha and sha != ZERO_SHA and not ref.endswith(PEELED_TAG_SUFFIX)}
        if any(sha not in store for sha in tips.values()):
            # A local-path remote seen mid-push by another writer: the ref moved before its pack showed.
            raise _RefMoved("the remote's new tip is not readable yet")
        return tips

    def push(self, ref: bytes, base: bytes | None, new: bytes) -> None:
        """Move the remote `ref` from `base` to `new`, or raise `_RefMoved` if it is no longer at `base`."""
        expected = base or ZERO_SHA
        moved = False

        def update_refs(refs: dict[bytes, bytes]) -> dict[bytes, bytes]:
            nonlocal moved
            moved = refs.get(ref, ZERO_SHA) != expected
            return {} if moved else {ref: new}  # nothing at all is sent when the ref moved

        def send() -> Any:
            try:
                return self.client.send_pack(self.path, update_refs,
                                             self.repo.object_store.generate_pack_data)
            except FileLocked:  # a local-path remote: another writer holds the ref's lock right now
                return None

        result = self._network(send)
        if result is None:
            raise _RefMoved("locked by another writer")
        if moved:
            raise _RefMoved("moved by another writer since it was read")
        failed = {name: why for name, why in (result.ref_status or {}).items() if why}
        if failed:
            why = failed.get(ref) or next(iter(failed.values()))
            if is_permission_denied(why):
                raise WriteBackError(f"{self.url}: push of {ref.decode()} refused: {why}")
            if _NON_FAST_FORWARD.search(why) and base is not None and base not in self.repo[new].parents:
                # a status ref is rewritten by design: a remote that forbids that always will
                raise WriteBackError(f"{self.url}: push of {ref.decode()} refused: {why} (status refs are "
                                     "rewritten on every change and heartbeat: allow non-fast-forward "
                                     "updates of them, e.g. git config receive.denyNonFastForwards false)")
            raise _RefMoved(f"remote refused: {why}")  # "failed to lock", "stale info": someone was faster


def _set_local(repo: Repo, local_ref: bytes, sha: bytes | None) -> None:
    """Point a local ref at what the remote holds (delete it when the remote has none)."""
    if sha is None:
        if local_ref in repo.refs:
            del repo.refs[local_ref]
    elif _local(repo, local_ref) != sha:
        repo.refs[local_ref] = sha


def _local(repo: Repo, local_ref: bytes) -> bytes | None:
    try:
        return repo.refs[local_ref]
    except KeyError:
        return None


def _status_of(store: Any, commit_sha: bytes) -> tuple[bytes, dict[str, Any] | None] | None:
    """The ``status.yaml`` blob of a status commit and its document (None when unreadable); None when
    the commit holds no such file."""
    tree = store[store[commit_sha].tree]
    if STATUS_FILE not in tree:
        return None
    mode, blob = tree[STATUS_FILE]
    if not stat.S_ISREG(mode):
        return None
    return blob, load_status(store[blob].data)


def _mirror_fleet(repo: Repo, prefix: bytes, tips: Mapping[bytes, bytes]) -> None:
    """Keep a local ref per remote status ref (what the next fetch negotiates with), drop the gone ones."""
    local = {LOCAL_FLEET_PREFIX + ref[len(prefix):]: sha for ref, sha in tips.items()}
    held = repo.refs.as_dict(LOCAL_FLEET_PREFIX)
    for name, sha in local.items():
        if held.get(name[len(LOCAL_FLEET_PREFIX):]) != sha:
            repo.refs[name] = sha
    for name in held:
        if LOCAL_FLEET_PREFIX + name not in local:
            del repo.refs[LOCAL_FLEET_PREFIX + name]


# ---------------------------------------------------------------------------------------------------------
# The writer


@dataclass(frozen=True)
class WriteBackOptions:
    """Where and how write-backs are written."""

    agent: str = "gitsync"  # whose status ref this writer moves
    status_refs: str = "refs/gitsync/status"
    status_branch: str = "gitsync/status"
    notes_ref: str = "refs/notes/gitsync"
    author: str = "gitsync <gitsync@localhost>"
    note_max_bytes: int = 16 * 1024
    notes_retention: float = 30 * 86400.0
    heartbeat: float = 60.0  # the status ref is written at least this often (when asked: `refresh`)
    attempts: int = 8  # tries of one publish: compare-and-swap conflicts and dropped connections
    stop_when_denied: bool = False  # writeback = "auto": a remote that refuses pushes turns it off

    @classmethod
    def from_settings(cls, settings: Settings) -> WriteBackOptions:
        return cls(agent=settings.agent_name, status_refs=settings.status_refs,
                   status_branch=settings.status_branch, notes_ref=settings.notes_ref, author=settings.author,
                   note_max_bytes=settings.note_max_bytes, notes_retention=settings.notes_retention,
                   heartbeat=settings.status_heartbeat, stop_when_denied=settings.writeback == "auto")


class WriteBack:
    """Publishes this agent's status and failure notes to the config repo's remote.

    Thread-safe (one publish at a time). Never raises from `publish_*` or `refresh`: failures are
    logged, counted in `failures`, and what was not written stays `pending`, retried on the next
    publish or refresh.
    """

    def __init__(self, remote: Remote, work_dir: Path, options: WriteBackOptions | None = None) -> None:
        self.remote = remote
        self.url = remote.url
        self.work_dir = Path(work_dir)
        self.options = options = options or WriteBackOptions()
        self.own_ref = status_ref(options.status_refs, options.agent)
        self.status_prefix = status_prefix(options.status_refs)
        self.view_ref = full_ref(options.status_branch, "refs/heads/") if options.status_branch else None
        self.notes_ref = full_ref(options.notes_ref, "refs/notes/")
        self.enabled = True
        self.failures = 0  # write-backs that failed (exposed as a metric)
        self.conflicts = 0  # pushes refused because another writer moved the ref first (then rebuilt)
        self.last_error: str | None = None
        self._lock = threading.Lock()
        self._pending_status: StatusReport | None = None
        self._own_failed = False  # the last write of the status ref failed (a heartbeat, maybe)
        self._pending_notes: dict[tuple[str, str], FailureNote] = {}
        self._view_stale = False  # the status branch may not show this agent's latest status
        self._view_backoff = Backoff(base=30.0, cap=3600.0)
        self._view_denied = False
        self._note_oldest: dict[bytes, datetime | None] = {}  # note blob → its oldest section (cache)

    @classmethod
    def from_settings(cls, settings: Settings) -> WriteBack | None:
        """The writer the settings ask for; None when write-back is off or cannot work (auto)."""
        if settings.writeback == "off" or not settings.repo or settings.dir:
            return None
        remote = Remote.from_settings(settings)
        if settings.writeback == "auto" and not remote.can_push:
            logger.info("write-back off: no write credentials for {} (set writeback = \"on\" to force)",
                        remote.url)
            return None
        return cls(remote, Path(settings.state_dir) / "writeback", WriteBackOptions.from_settings(settings))

    # -- public -----------------------------------------------------------------------------------------

    @property
    def pending(self) -> int:
        """Statuses and notes not written yet (a failed write is retried on the next publish or refresh);
        0 once write-back turned itself off (``writeback = "auto"`` and the remote refuses pushes)."""
        if not self.enabled:
            return 0
        own = self._pending_status is not None or self._own_failed
        return own + len(self._pending_notes)

    def publish_status(self, report: StatusReport) -> bool:
        """Write this agent's status ref; True iff it was written (a change, or a heartbeat due)."""
        with self._lock:
            self._pending_status = report
            return bool(self._flush(self._flush_status, self._flush_notes))

    def publish_failure(self, note: FailureNote) -> bool:
        """Write this agent's section of the note on the failed commit; True iff it changed and was pushed."""
        if not SHA_RE.match(note.commit):
            logger.error("write-back: no note for {!r}: not a commit SHA", note.commit)
            return False
        with self._lock:
            self._pending_notes.pop((note.commit, note.agent), None)
            self._pending_notes[(note.commit, note.agent)] = note
            while len(self._pending_notes) > MAX_PENDING_NOTES:
                self._pending_notes.pop(next(iter(self._pending_notes)))
            return bool(self._flush(self._flush_notes, self._flush_status))

    def refresh(self) -> bool:
        """What is due, on every poll: the heartbeat, a status or notes a publish failed to write, the
        view. Costs no network when nothing is due. True iff the status ref was written."""
        with self._lock:
            written = self._flush(self._flush_status, self._flush_notes)
            return bool(written)

    def _flush(self, first: Callable[[], bool | None], then: Callable[[], bool | None]) -> bool | None:
        """`first`; when the remote answered, `then` (what an earlier publish left pending) and the view."""
        written = first()
        if written is not None:
            then()
            self._refresh_view()
        return written

    # -- flushing pending work --------------------------------------------------------------------------

    def _flush_status(self) -> bool | None:
        """Write the status ref (the pending report, else a heartbeat when due): True written, False
        nothing due, None failed (kept pending)."""
        if not self.enabled:
            return False
        report = self._pending_status
        changed: list[bool] = []

        def build(repo: Repo, tip: bytes | None, _refs: Mapping[bytes, bytes]) -> bytes | None:
            new, substance = self._own_commit(repo, tip, report)
            changed[:] = [substance]
            return new

        context = f"commit {short_sha(report.commit)}" if report else "heartbeat"
        pushed = self._publish("status", self.own_ref, LOCAL_OWN_REF, build, context=context,
                               trust_local=True)
        if pushed is None:
            self._own_failed = True
            return None
        self._pending_status, self._own_failed = None, False
        if pushed and changed and changed[0]:
            self._view_stale = True
        return pushed

    def _flush_notes(self) -> bool | None:
        """Publish the pending notes, in one commit; same answers as `_flush_status`."""
        notes = list(self._pending_notes.values())
        if not notes or not self.enabled:
            return False
        pushed = self._publish("note", self.notes_ref, LOCAL_NOTES_REF,
                               lambda repo, tip, _refs: self._notes_commit(repo, tip, notes),
                               context=", ".join(short_sha(n.commit) for n in notes))
        if pushed is not None:
            for note in notes:
                self._pending_notes.pop((note.commit, note.agent), None)
        return pushed

    def _refresh_view(self) -> None:
        """Fold the status refs into the status branch, when this agent's latest may be missing there.
        Best effort: a failure is logged at debug level and retried later (backing off)."""
        view = self.view_ref
        if view is None or not (self._view_stale and self.enabled) or self._view_denied \
                or not self._view_backoff.ready():
            return
        pushed = self._publish("view", view, LOCAL_VIEW_REF, self._view_commit,
                               context=self.options.status_branch, also=(self.status_prefix,), quiet=True)
        if pushed is None:
            self._view_backoff.failed()
            return
        self._view_backoff.succeeded()
        self._view_stale = False

    def _publish(self, what: str, ref: bytes, local_ref: bytes,
                 build: Callable[[Repo, bytes | None, Mapping[bytes, bytes]], bytes | None], context: str, *,
                 trust_local: bool = False, also: Sequence[bytes] = (), quiet: bool = False) -> bool | None:
        """Read, build, compare-and-swap push, retry. True pushed, False nothing to do, None failed.

        `trust_local`: build on the tip last seen (a ref only this agent writes), reading the remote only
        when the push finds it moved. `also`: more refs to read with `ref`, passed to `build`.
        A conflict or a dropped connection is retried (bounded, with jitter); a refusal is not."""
        try:
            with open_work_repo(self.work_dir) as repo, contextlib.closing(_Wire(self.remote, repo)) as wire:
                read = not trust_local
                tip, refs = _local(repo, local_ref), {}
                last = ""
                for attempt in range(self.options.attempts):
                    try:
                        if read:
                            refs = wire.fetch([ref, *also])
                            tip = refs.get(ref)
                            _set_local(repo, local_ref, tip)
                        new = build(repo, tip, refs)
                        if new is None:
                            return False
                        wire.push(ref, tip, new)
                    except (_RefMoved, SourceError) as exc:
                        if isinstance(exc, SourceError) and not _transient(exc):
                            raise
                        last = str(exc) if isinstance(exc, _RefMoved) else exc.reason
                        self.conflicts += isinstance(exc, _RefMoved)
                        if trust_local and not read and tip is not None and isinstance(exc, _RefMoved):
                            logger.warning("write-back: {} was moved by another writer since this agent "
                                           "wrote it: does another agent have the name {!r}? Agent names "
                                           "must be unique in a fleet", ref.decode(), self.options.agent)
                        read = True
                        if attempt + 1 < self.options.attempts:
                            time.sleep(backoff_delay(attempt + 1, base=0.2, cap=4.0))
                        continue
                    _set_local(repo, local_ref, new)
                    logger.debug("write-back: pushed {} {} ({})", what, new.decode()[:7], context)
                    _tidy(repo)
                    return True
                raise WriteBackError(f"{self.url}: {ref.decode()} not updated after {self.options.attempts} "
                                     f"attempts (last: {last})")
        except Exception as exc:  # write-back must never break a sync
            self._failed(what, context, exc, quiet=quiet)
            return None

    def _failed(self, what: str, context: str, exc: Exception, *, quiet: bool = False) -> None:
        if isinstance(exc, SourceError):
            reason = exc.reason
        elif isinstance(exc, WriteBackError):
            reason = str(exc)
        else:
            reason = f"{self.url}: {type(exc).__name__}: {exc}"
        reason = redact(reason)
        if quiet:  # the view: best effort, retried later, never a failure of the agent
            if is_permission_denied(exc):
                self._view_denied = True
                logger.warning("write-back: the status branch {} cannot be written ({}); the status refs are "
                               "(gitsync status --fleet reads them)", self.options.status_branch, reason)
            else:
                logger.debug("write-back of the status branch failed, will retry: {}", reason)
            return
        self.failures += 1
        self.last_error = reason
        if self.options.stop_when_denied and is_permission_denied(exc):
            self.enabled = False
            logger.warning("write-back turned off: the remote refuses pushes ({}); status stays in the state "
                           "dir and /metrics", reason)
            return
        logger.warning("write-back of {} ({}) failed, will retry on the next poll: {}", what, context, reason)

    # -- building commits -------------------------------------------------------------------------------

    def _commit(self, repo: Repo, tree: Tree, parents: Sequence[bytes], message: bytes | str) -> bytes:
        commit = Commit()
        commit.tree = tree.id
        commit.parents = list(parents)
        commit.author = commit.committer = self.options.author.encode()
        commit.author_time = commit.commit_time = int(time.time())
        commit.author_timezone = commit.commit_timezone = 0
        commit.encoding = b"UTF-8"
        commit.message = message.encode() if isinstance(message, str) else message
        repo.object_store.add_object(commit)
        return commit.id

    def _own_commit(self, repo: Repo, tip: bytes | None, report: StatusReport | None
                    ) -> tuple[bytes | None, bool]:
        """The next commit of this agent's status ref, and whether it changes the status in substance:
        a new status; `tip`'s status again with a fresh commit time when the heartbeat is due; None
        when nothing is."""
        store = repo.object_store
        held = _status_of(store, tip) if tip else None
        previous = held[1] if held else None
        if report is not None:
            doc = with_applied_at(previous, status_document(report))
            if previous is None or not same_substance(previous, doc):
                blob = Blob.from_string(render_status(doc))
                tree = Tree()
                tree.add(STATUS_FILE, stat.S_IFREG | 0o644, blob.id)
                store.add_objects([(blob, None), (tree, None)])
                return self._commit(repo, tree, [], status_message(report)), True
        if tip is None or time.time() - store[tip].commit_time < self.options.heartbeat:
            return None, False
        old = store[tip]  # the heartbeat: a child of the status commit, with the same tree and message
        status = old.parents[0] if old.parents else tip
        return self._commit(repo, store[old.tree], [status], old.message), False

    def _view_commit(self, repo: Repo, tip: bytes | None, refs: Mapping[bytes, bytes]) -> bytes | None:
        """The status branch with every agent's ``status.yaml`` from its ref (files of agents without a
        ref, e.g. older gitsync versions writing the branch, are kept); None when it shows them already."""
        store = repo.object_store
        root = store[store[tip].tree] if tip else Tree()
        agents = Tree()
        if AGENTS_DIR in root:
            mode, sha = root[AGENTS_DIR]
            if stat.S_ISDIR(mode):
                agents = store[sha]
        fleet = {ref: sha for ref, sha in refs.items() if ref.startswith(self.status_prefix)}
        _mirror_fleet(repo, self.status_prefix, fleet)
        new_agents = _copy_tree(agents)
        headlines = []
        for ref, sha in sorted(fleet.items()):
            slug = ref[len(self.status_prefix):]
            if b"/" in slug:
                continue
            held = _status_of(store, sha)
            if held is None:
                continue
            blob, doc = held
            name = slug + b".yaml"
            if name in agents and agents[name][1] == blob:
                continue
            new_agents.add(name, stat.S_IFREG | 0o644, blob)
            headlines.append(status_headline(doc) if doc else f"gitsync({slug.decode()}): unreadable status")
        if not headlines:
            return None
        new_root = _copy_tree(root)
        new_root.add(AGENTS_DIR, stat.S_IFDIR, new_agents.id)
        store.add_objects([(new_agents, None), (new_root, None)])
        if len(headlines) == 1:
            message = headlines[0] + "\n"
        else:
            message = f"gitsync: {len(headlines)} agents' status\n\n" + "".join(f"{h}\n" for h in headlines)
        return self._commit(repo, new_root, [tip] if tip else [], redact(message))

    def _notes_commit(self, repo: Repo, tip: bytes | None, notes: Sequence[FailureNote]) -> bytes | None:
        store = repo.object_store
        tree = store[repo[tip].tree] if tip else Tree()
        if not tip:
            store.add_object(tree)
        notes_tree = NotesTree(tree, store)
        changed: list[str] = []
        for note in notes:
            old_bytes = notes_tree.get_note(note.commit.encode())
            old = old_bytes.decode("utf-8", "replace") if old_bytes is not None else None
            merged = merge_note(old, note, self.options.note_max_bytes, self.options.notes_retention / 2)
            if merged is not None:
                tree = notes_tree.set_note(note.commit.encode(), merged.encode())
                changed.append(f"{note.stage} on {short_sha(note.commit)}")
        pruned = 0
        cutoff = datetime.fromtimestamp(time.time() - self.options.notes_retention, UTC)
        for target, blob_sha in list(notes_tree.list_notes()):
            oldest = self._oldest(store, blob_sha)
            if oldest is None or oldest >= cutoff:
                continue
            kept = prune_note(store[blob_sha].data.decode("utf-8", "replace"), cutoff)
            if kept is None:
                continue
            pruned += 1
            if kept.strip():
                tree = notes_tree.set_note(target, kept.encode())
            else:
                tree = notes_tree.remove_note(target) or tree
        if not changed and not pruned:
            return None
        agents = sorted({redact(n.agent) for n in notes})
        message = f"gitsync({', '.join(agents)}): note {', '.join(changed) or 'retention'}"
        if pruned:
            message += f"; pruned {pruned} expired note(s)"
        return self._commit(repo, tree, [tip] if tip else [], redact(message) + "\n")

    def _oldest(self, store: Any, blob_sha: bytes) -> datetime | None:
        if blob_sha not in self._note_oldest:
            if len(self._note_oldest) > 10_000:
                self._note_oldest.clear()
            self._note_oldest[blob_sha] = oldest_section(store[blob_sha].data.decode("utf-8", "replace"))
        return self._note_oldest[blob_sha]


def _tidy(repo: Repo) -> None:
    """Keep the work repo small: git's auto-gc thresholds (loose objects, pack count), best effort."""
    try:
        maybe_auto_gc(repo)
    except Exception as exc:  # a cache: a failed gc costs disk, never a write-back
        logger.debug("write-back: gc of {} failed: {}", repo.path, exc)


def _copy_tree(tree: Tree) -> Tree:
    copy = Tree()
    for entry in tree.items():
        copy.add(entry.path, entry.mode, entry.sha)
    return copy


# ---------------------------------------------------------------------------------------------------------
# Reading the fleet


class FleetReader:
    """Every agent's status from the status refs, cheap enough to read on every poll.

    A read is one connection: the refs under the prefix (``ls-refs``, filtered by the server), then a
    fetch of only the tips this reader does not hold yet (none when no agent wrote since the last
    read), into a local work repo that keeps them for the next negotiation. A document is parsed once
    per tip. Each document returned carries ``seen``: the commit time of the agent's ref (its last
    write: a status or a heartbeat).
    """

    def __init__(self, remote: Remote, work_dir: Path, status_refs: str = "refs/gitsync/status") -> None:
        self.remote = remote
        self.work_dir = Path(work_dir)
        self.prefix = status_prefix(status_refs)
        self._docs: dict[bytes, dict[str, Any]] = {}  # tip commit → its document, with "seen"

    @classmethod
    def from_settings(cls, settings: Settings) -> FleetReader:
        """The agent's reader: the config repo's remote, its own work repo in the state dir
        (``<state_dir>/fleet``, apart from write-back's: the two run on different threads)."""
        return cls(Remote.from_settings(settings), Path(settings.state_dir) / "fleet", settings.status_refs)

    def read(self) -> list[dict[str, Any]]:
        """Every agent's status document, sorted by agent; raises `SourceError` when the remote fails."""
        with open_work_repo(self.work_dir) as repo, contextlib.closing(_Wire(self.remote, repo)) as wire:
            for attempt in range(3):
                try:
                    tips = wire.fetch([self.prefix])
                    break
                except _RefMoved:  # a local-path remote mid-push: read again
                    time.sleep(backoff_delay(attempt + 1, base=0.05, cap=0.5))
            else:
                raise SourceError("writeback", f"{self.remote.url}: the status refs kept moving")
            _mirror_fleet(repo, self.prefix, tips)
            docs = {sha: self._docs.get(sha) or self._document(repo, ref, sha) for ref, sha in tips.items()}
            if set(docs) - set(self._docs):
                _tidy(repo)  # each fetch adds a pack: read every poll, they would pile up
        self._docs = docs
        return sorted((dict(d) for d in docs.values()), key=lambda d: str(d.get("agent", "")))

    def _document(self, repo: Repo, ref: bytes, sha: bytes) -> dict[str, Any]:
        store = repo.object_store
        held = _status_of(store, sha)
        doc = held[1] if held and held[1] is not None else None
        if doc is None:
            doc = {"agent": ref[len(self.prefix):].decode("utf-8", "replace"), "result": "unreadable"}
        doc["seen"] = iso_time(datetime.fromtimestamp(store[sha].commit_time, UTC))
        return doc


def read_fleet(remote: Remote, status_refs: str, work_dir: Path) -> list[dict[str, Any]]:
    """Every agent's status from the status refs, once (see `FleetReader`)."""
    return FleetReader(remote, work_dir, status_refs).read()


def format_age(seconds: float) -> str:
    seconds = max(0, int(seconds))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


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
    problems = list(result.get("problems") or [])
    for problem in problems[:10]:
        lines.append(f"problem:  {result.get('stage') or '?'}: {problem}")
    if len(problems) > 10:
        lines.append(f"problem:  ... and {len(problems) - 10} more")
    return redact("\n".join(lines) + "\n")
