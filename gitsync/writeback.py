"""Write-back: tell git what happened, where GitOps users look.

Two things are written to the config repo's remote, with dulwich and no work tree:

* the **status branch** (default ``gitsync/status``): one file per agent, ``agents/<agent>.yaml``,
  saying which commit this agent last synced, the result and what each gateway was given. A new
  commit is made only when the file changes in substance (time and duration do not count), so a
  poll that changes nothing writes nothing;
* **notes** (default ``refs/notes/gitsync``) on a commit that failed: one section per agent (a YAML
  document each, sorted by agent), holding the stage and every error as
  ``file:line:col: kind[id].field: message``. A section is bounded in size, and sections older than
  the retention are pruned whenever notes are written, so the notes ref cannot grow without bound.

Both refs are shared by every agent of a fleet, so every push is a compare-and-swap: the ref is
fetched, the new commit is built on its tip, and the push names that tip as the old value. When
another agent moved the ref in between, the push is refused; the ref is fetched again and the
commit rebuilt (bounded attempts, with jitter). Write-back is best effort: a failure is logged,
counted in `WriteBack.failures` and retried on the next publish; it never raises to the sync.

The local side is a small bare repo in the state dir (``<state_dir>/writeback``), separate from the
source mirror: it only ever holds the status branch and the notes, which share no history with the
config branches.
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

from dulwich.file import FileLocked
from dulwich.gc import maybe_auto_gc
from dulwich.notes import NotesTree
from dulwich.objects import Blob, Commit, Tree
from dulwich.protocol import ZERO_SHA
from dulwich.repo import Repo
from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from gitsync import __version__
from gitsync.backoff import backoff_delay
from gitsync.gitremote import Remote, SourceError
from gitsync.log import clip, logger, redact
from gitsync.source import SHA_RE
from gitsync.urls import display_url

if TYPE_CHECKING:

    from gitsync.settings import Settings

AGENTS_DIR = b"agents"
MAX_ERROR_CHARS = 1024  # one error line in a note; longer ones are cut (a section is bounded anyway)
MAX_PRUNED_LISTED = 100  # pruned ids listed per kind in a status file; the count says the rest
MAX_PENDING_NOTES = 100  # failure notes kept for the next publish when the remote is unreachable
VOLATILE_STATUS_KEYS = ("time", "duration")  # a change of these alone is not worth a commit
LOCAL_STATUS_REF = b"refs/writeback/status"
LOCAL_NOTES_REF = b"refs/writeback/notes"
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
    two_step: bool = False  # moved keys or plugins took two pushes (gitsync.moves)

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
    """One sync's outcome for this agent: the content of its file on the status branch."""

    agent: str
    commit: str
    subject: str
    result: str  # applied | unchanged | failed | ...
    gateways: Sequence[GatewayStatus]
    time: datetime
    duration: float
    version: str = __version__

    def to_dict(self) -> dict[str, Any]:
        """The status file's content (also what the agent keeps as `last_result` in the state dir)."""
        return {
            "agent": self.agent,
            "commit": self.commit,
            "subject": self.subject,
            "result": self.result,
            "gateways": [g.to_dict() for g in self.gateways],
            "time": iso_time(self.time),
            "duration": round(float(self.duration), 3),
            "gitsync": self.version,
        }


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


def iso_time(moment: datetime) -> str:
    """UTC, second precision, ``Z`` suffix; a naive time is taken as UTC."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


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


def agent_file_name(agent: str) -> str:
    """A file name for an agent: its name with anything but ``[A-Za-z0-9._-]`` replaced by ``-``."""
    name = _UNSAFE_NAME.sub("-", agent).lstrip(".") or "agent"
    return f"{name}.yaml"


def full_ref(name: str, default_prefix: str) -> bytes:
    """``gitsync/status`` → ``refs/heads/gitsync/status``; a name starting with ``refs/`` is kept."""
    return (name if name.startswith("refs/") else default_prefix + name).encode()


def short_sha(sha: str) -> str:
    return sha[:7]


def status_message(report: StatusReport) -> str:
    """``gitsync(<agent>): applied 1a2b3c4 to 2 gateways``, then the applied commit's subject."""
    count = len(report.gateways)
    plural = "gateway" if count == 1 else "gateways"
    preposition = "to" if report.result in ("applied", "unchanged") else "on"
    subject = report.subject.splitlines()[0] if report.subject else ""
    head = (f"gitsync({report.agent}): {report.result} {short_sha(report.commit)} "
            f"{preposition} {count} {plural}")
    return redact(head + (f"\n\n{subject}\n" if subject else "\n"))


def same_substance(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """True when two status documents differ at most in time and duration."""
    def core(doc: Mapping[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in doc.items() if k not in VOLATILE_STATUS_KEYS}
    return core(old) == core(new)


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


class _RemoteRef:
    """One ref of the remote, fetched into and pushed from the local work repo."""

    def __init__(self, remote: Remote, repo: Repo, ref: bytes, local_ref: bytes) -> None:
        self.url = remote.url
        self.remote = remote
        self.client, self.path = remote.client()
        self.repo = repo
        self.ref = ref
        self.local_ref = local_ref

    def close(self) -> None:
        self.client.close()

    def _network(self, action: Callable[[], Any]) -> Any:
        return self.remote.network("writeback", action)

    def fetch(self) -> bytes | None:
        """The remote tip of the ref (None when it does not exist yet), its objects fetched."""
        store = self.repo.object_store

        def wants(refs: Mapping[bytes, bytes], depth: int | None = None) -> list[bytes]:
            sha = refs.get(self.ref)
            return [sha] if sha and sha != ZERO_SHA and sha not in store else []

        result = self._network(lambda: self.client.fetch(self.path, self.repo, determine_wants=wants,
                                                         ref_prefix=[self.ref]))
        tip = result.refs.get(self.ref)
        if tip is None or tip == ZERO_SHA:
            return None
        if tip not in store:
            # A local-path remote seen mid-push by another writer: the ref moved before its pack showed.
            raise _RefMoved("the remote's new tip is not readable yet")
        self.repo.refs[self.local_ref] = tip
        return tip

    def push(self, base: bytes | None, new: bytes) -> None:
        """Move the remote ref from `base` to `new`, or raise `_RefMoved` if it is no longer at `base`."""
        expected = base or ZERO_SHA
        moved = False

        def update_refs(refs: dict[bytes, bytes]) -> dict[bytes, bytes]:
            nonlocal moved
            moved = refs.get(self.ref, ZERO_SHA) != expected
            return {} if moved else {self.ref: new}  # nothing at all is sent when the ref moved

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
            raise _RefMoved("moved by another writer since the fetch")
        failed = {ref: why for ref, why in (result.ref_status or {}).items() if why}
        if failed:
            why = failed.get(self.ref) or next(iter(failed.values()))
            if is_permission_denied(why):
                raise WriteBackError(f"{self.url}: push of {self.ref.decode()} refused: {why}")
            raise _RefMoved(f"remote refused: {why}")  # "failed to lock", "stale info": someone was faster
        self.repo.refs[self.local_ref] = new


# ---------------------------------------------------------------------------------------------------------
# The writer


@dataclass(frozen=True)
class WriteBackOptions:
    """Where and how write-backs are written."""

    status_branch: str = "gitsync/status"
    notes_ref: str = "refs/notes/gitsync"
    author: str = "gitsync <gitsync@localhost>"
    note_max_bytes: int = 16 * 1024
    notes_retention: float = 30 * 86400.0
    attempts: int = 5  # compare-and-swap attempts of one publish
    stop_when_denied: bool = False  # writeback = "auto": a remote that refuses pushes turns it off

    @classmethod
    def from_settings(cls, settings: Settings) -> WriteBackOptions:
        return cls(settings.status_branch, settings.notes_ref, settings.author, settings.note_max_bytes,
                   settings.notes_retention, stop_when_denied=settings.writeback == "auto")


class WriteBack:
    """Publishes this agent's status and failure notes to the config repo's remote.

    Thread-safe (one publish at a time). Never raises from `publish_*`: failures are logged,
    counted in `failures`, and what was not published is retried on the next publish.
    """

    def __init__(self, remote: Remote, work_dir: Path, options: WriteBackOptions | None = None) -> None:
        self.remote = remote
        self.url = remote.url
        self.work_dir = Path(work_dir)
        self.options = options = options or WriteBackOptions()
        self.status_ref = full_ref(options.status_branch, "refs/heads/")
        self.notes_ref = full_ref(options.notes_ref, "refs/notes/")
        self.enabled = True
        self.failures = 0  # write-backs that failed (exposed as a metric)
        self.conflicts = 0  # pushes refused because another agent moved the ref first (then rebuilt)
        self.last_error: str | None = None
        self._lock = threading.Lock()
        self._pending_status: StatusReport | None = None
        self._pending_notes: dict[tuple[str, str], FailureNote] = {}
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
        """Status files and notes waiting for the next publish (a failed one is retried then)."""
        return (self._pending_status is not None) + len(self._pending_notes)

    def publish_status(self, report: StatusReport) -> bool:
        """Write this agent's status file; True iff a new status commit was pushed."""
        with self._lock:
            self._pending_status = report
            pushed = self._flush_status()
            if pushed is not None:  # the remote answered: also send notes left from a failed publish
                self._flush_notes()
            return bool(pushed)

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
            pushed = self._flush_notes()
            if pushed is not None:
                self._flush_status()
            return bool(pushed)

    # -- flushing pending work --------------------------------------------------------------------------

    def _flush_status(self) -> bool | None:
        """Publish the pending status: True pushed, False nothing to push, None failed (kept pending)."""
        report = self._pending_status
        if report is None or not self.enabled:
            return False
        pushed = self._publish("status", self.status_ref, LOCAL_STATUS_REF,
                               lambda repo, tip: self._status_commit(repo, tip, report),
                               context=f"commit {short_sha(report.commit)}")
        if pushed is not None:
            self._pending_status = None
        return pushed

    def _flush_notes(self) -> bool | None:
        """Publish the pending notes, in one commit; same answers as `_flush_status`."""
        notes = list(self._pending_notes.values())
        if not notes or not self.enabled:
            return False
        pushed = self._publish("note", self.notes_ref, LOCAL_NOTES_REF,
                               lambda repo, tip: self._notes_commit(repo, tip, notes),
                               context=", ".join(short_sha(n.commit) for n in notes))
        if pushed is not None:
            for note in notes:
                self._pending_notes.pop((note.commit, note.agent), None)
        return pushed

    def _publish(self, what: str, ref: bytes, local_ref: bytes,
                 build: Callable[[Repo, bytes | None], bytes | None], context: str) -> bool | None:
        """Fetch, build, compare-and-swap push, retry. True pushed, False nothing to do, None failed."""
        try:
            with open_work_repo(self.work_dir) as repo, contextlib.closing(
                    _RemoteRef(self.remote, repo, ref, local_ref)) as remote:
                last = ""
                for attempt in range(self.options.attempts):
                    try:
                        tip = remote.fetch()
                        new = build(repo, tip)
                        if new is None:
                            return False
                        remote.push(tip, new)
                    except _RefMoved as moved:
                        last = str(moved)
                        self.conflicts += 1
                        if attempt + 1 < self.options.attempts:
                            time.sleep(backoff_delay(attempt + 1, base=0.15, cap=3.0))
                        continue
                    logger.debug("write-back: pushed {} {} ({})", what, new.decode()[:7], context)
                    _tidy(repo)
                    return True
                raise WriteBackError(f"{self.url}: {ref.decode()} not updated after {self.options.attempts} "
                                     f"attempts (last: {last})")
        except Exception as exc:  # write-back must never break a sync
            self._failed(what, context, exc)
            return None

    def _failed(self, what: str, context: str, exc: Exception) -> None:
        self.failures += 1
        if isinstance(exc, SourceError):
            reason = exc.reason
        elif isinstance(exc, WriteBackError):
            reason = str(exc)
        else:
            reason = f"{self.url}: {type(exc).__name__}: {exc}"
        reason = redact(reason)
        self.last_error = reason
        if self.options.stop_when_denied and is_permission_denied(exc):
            self.enabled = False
            logger.warning("write-back turned off: the remote refuses pushes ({}); status stays in the state "
                           "dir and /metrics", reason)
            return
        logger.warning("write-back of {} ({}) failed, will retry on the next sync: {}", what, context, reason)

    # -- building commits -------------------------------------------------------------------------------

    def _commit(self, repo: Repo, tree: Tree, parent: bytes | None, message: str) -> bytes:
        commit = Commit()
        commit.tree = tree.id
        commit.parents = [parent] if parent else []
        commit.author = commit.committer = self.options.author.encode()
        commit.author_time = commit.commit_time = int(time.time())
        commit.author_timezone = commit.commit_timezone = 0
        commit.encoding = b"UTF-8"
        commit.message = message.encode()
        repo.object_store.add_object(commit)
        return commit.id

    def _status_commit(self, repo: Repo, tip: bytes | None, report: StatusReport) -> bytes | None:
        store = repo.object_store
        root = store[repo[tip].tree] if tip else Tree()
        agents = Tree()
        if AGENTS_DIR in root:
            mode, sha = root[AGENTS_DIR]
            if stat.S_ISDIR(mode):
                agents = store[sha]
        name = agent_file_name(redact(report.agent)).encode()
        doc = status_document(report)
        if name in agents:
            old = load_status(store[agents[name][1]].data)
            if old is not None and same_substance(old, doc):
                return None
        blob = Blob.from_string(render_status(doc))
        new_agents = _copy_tree(agents)
        new_agents.add(name, stat.S_IFREG | 0o644, blob.id)
        new_root = _copy_tree(root)
        new_root.add(AGENTS_DIR, stat.S_IFDIR, new_agents.id)
        store.add_objects([(blob, None), (new_agents, None), (new_root, None)])
        return self._commit(repo, new_root, tip, status_message(report))

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
        return self._commit(repo, tree, tip, redact(message) + "\n")

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
# Reading the fleet, and `gitsync status`


def read_fleet(remote: Remote, status_branch: str, work_dir: Path) -> list[dict]:
    """Every agent's status file on the remote status branch, sorted by agent (empty if none)."""
    ref = full_ref(status_branch, "refs/heads/")
    with open_work_repo(Path(work_dir)) as repo, \
            contextlib.closing(_RemoteRef(remote, repo, ref, LOCAL_STATUS_REF)) as status:
        tip = status.fetch()
        if tip is None:
            return []
        store = repo.object_store
        root = store[repo[tip].tree]
        if AGENTS_DIR not in root:
            return []
        fleet = []
        for entry in store[root[AGENTS_DIR][1]].items():
            name = entry.path.decode("utf-8", "replace")
            if not name.endswith(".yaml") or not stat.S_ISREG(entry.mode):
                continue
            doc = load_status(store[entry.sha].data)
            fleet.append(doc if doc is not None else {"agent": name[:-5], "result": "unreadable"})
    return sorted(fleet, key=lambda d: str(d.get("agent", "")))


def format_age(seconds: float) -> str:
    seconds = max(0, int(seconds))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def fleet_table(fleet: Sequence[Mapping[str, Any]], now: datetime) -> str:
    """Agent, commit (short), result, age: one line per agent, aligned."""
    rows = [("AGENT", "COMMIT", "RESULT", "AGE")]
    for doc in fleet:
        moment = parse_time(doc.get("time"))
        age = format_age((now - moment).total_seconds()) if moment else "?"
        rows.append((str(doc.get("agent", "?")), short_sha(str(doc.get("commit") or "-")),
                     str(doc.get("result", "?")), age))
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    return "".join(
        "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row[:3])) + "  " + row[3] + "\n"
        for row in rows)


def summary_text(result: Mapping[str, Any], now: datetime) -> str:
    """`gitsync status`: the last result from the state dir, readable."""
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
