"""Write-back: tell git what happened, where GitOps users look.

Three things are written to the config repo's remote (the first two to `status_remote` when set), with
dulwich and no work tree:

* **one status ref per agent**, ``refs/gitsync/status/<agent>`` (`status_refs`), or with a group
  ``refs/gitsync/status/<group>/<agent>`` (a gate lists its group's alone; when the agent wrote another
  before, before it had that group or before the sharding, it deletes that one: `WriteBack._retire`),
  in `status_remote` (default: the config repo; ``{group}`` in it makes a repo per group): a commit
  whose tree holds one file, ``status.yaml``: the commit this agent last synced, the result, what each gateway
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
import stat
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dulwich.notes import NotesTree
from dulwich.objects import Blob, Tree
from dulwich.protocol import ZERO_SHA
from dulwich.repo import Repo

from gitsync.backoff import Backoff, backoff_delay
from gitsync.display import short_sha
from gitsync.log import logger, redact
from gitsync.source.mirror import DEFAULT_LIMITS, SHA_RE, limits_from_settings
from gitsync.source.packgate import ObjectLimits
from gitsync.source.transport import Remote, SourceError
from gitsync.writeback.fleet import choose_refs
from gitsync.writeback.notes import merge_note, oldest_section, prune_note
from gitsync.writeback.remote import (
    RefMoved,
    RefWire,
    WriteBackError,
    add_commit,
    is_permission_denied,
    local_ref_sha,
    mirror_fleet,
    open_work_repo,
    set_local_ref,
    status_of,
    status_remote,
    tidy,
    transient,
)
from gitsync.writeback.trust import StatusSigner
from gitsync.writeback.wire import (
    AGENTS_DIR,
    STATUS_FILE,
    FailureNote,
    StatusReport,
    full_ref,
    group_prefix,
    render_status,
    same_substance,
    status_document,
    status_headline,
    status_message,
    status_prefix,
    status_ref,
    with_applied_at,
)

if TYPE_CHECKING:
    from gitsync.settings import Settings


MAX_PENDING_NOTES = 100  # failure notes kept for the next publish when the remote is unreachable
# The work repo's refs: what it last saw of each remote ref. Under refs/heads/, because a fetch
# offers the local heads as what it has: the server then sends only objects the repo lacks.
LOCAL_OWN_PREFIX = b"refs/heads/own/"  # this agent's status ref, by its name: a renamed agent starts anew
LOCAL_OWN_GROUP_PREFIX = b"refs/heads/own-in/"  # the same, for a ref sharded by group (<group>/<agent>)
LOCAL_VIEW_REF = b"refs/heads/view"
LOCAL_NOTES_REF = b"refs/heads/notes"


# ---------------------------------------------------------------------------------------------------------
# The writer


@dataclass(frozen=True)
class WriteBackOptions:
    """Where and how write-backs are written."""

    agent: str = "gitsync"  # whose status ref this writer moves
    group: str | None = None  # its group: the ref is <status_refs>/<group>/<agent> (`status_ref`)
    status_refs: str = "refs/gitsync/status"
    status_branch: str = "gitsync/status"
    notes_ref: str = "refs/notes/gitsync"
    author: str = "gitsync <gitsync@localhost>"
    note_max_bytes: int = 16 * 1024
    notes_retention: float = 30 * 86400.0
    heartbeat: float = 60.0  # the status ref is written at least this often (when asked: `refresh`)
    attempts: int = 8  # tries of one publish: compare-and-swap conflicts and dropped connections
    stop_when_denied: bool = False  # writeback = "auto": a remote that refuses pushes turns it off
    signing_key: Path | None = None  # the agent's own SSH key: every commit written is signed with it
    max_status_refs: int = 1000  # status refs folded into the status branch (`gitsync.writeback.fleet`)
    limits: ObjectLimits = DEFAULT_LIMITS  # what one fetch of the notes or the status branch may bring

    @classmethod
    def from_settings(cls, settings: Settings) -> WriteBackOptions:
        return cls(agent=settings.agent_name, group=settings.group, status_refs=settings.status_refs,
                   status_branch=settings.status_branch, notes_ref=settings.notes_ref, author=settings.author,
                   note_max_bytes=settings.note_max_bytes, notes_retention=settings.notes_retention,
                   heartbeat=settings.status_heartbeat, stop_when_denied=settings.writeback == "auto",
                   signing_key=settings.signing_key_file, max_status_refs=settings.max_status_refs,
                   limits=limits_from_settings(settings))


class WriteBack:
    """Publishes this agent's status and failure notes to the config repo's remote.

    Thread-safe (one publish at a time). Never raises from `publish_*` or `refresh`: failures are
    logged, counted in `failures`, and what was not written stays `pending`, retried on the next
    publish or refresh.
    """

    def __init__(self, remote: Remote, work_dir: Path, options: WriteBackOptions | None = None, *,
                 clock: Callable[[], float] = time.time, notes_remote: Remote | None = None) -> None:
        self.remote = remote  # the status refs and the status branch (`status_remote`)
        self.notes_remote = notes_remote or remote  # the notes: on the config repo, beside its commits
        self.clock = clock  # commit times, heartbeats and retention (tests move it instead of sleeping)
        self.url = remote.url
        self.work_dir = Path(work_dir)
        self.options = options = options or WriteBackOptions()
        self.own_ref = status_ref(options.status_refs, options.agent, options.group)
        self.local_own_ref = local_own_ref(options.status_refs, self.own_ref)
        self.signer = StatusSigner(options.signing_key) if options.signing_key is not None else None
        self.status_prefix = status_prefix(options.status_refs)
        self.group_prefix = group_prefix(options.status_refs, options.group)
        self._retire_due = True  # look once for this agent's refs under another group (`_retire`)
        self.view_ref = full_ref(options.status_branch, "refs/heads/") if options.status_branch else None
        self.notes_ref = full_ref(options.notes_ref, "refs/notes/")
        self.enabled = True
        self.failures = 0  # write-backs that failed (exposed as a metric)
        self.conflicts = 0  # pushes refused because another writer moved the ref first (then rebuilt)
        self.last_error: str | None = None
        self._lock = threading.Lock()
        self._pending_status: StatusReport | None = None
        self._last_report: StatusReport | None = None  # the last status written, to put back if overwritten
        self._own_failed = False  # the last write of the status ref failed (a heartbeat, maybe)
        self._pending_notes: dict[tuple[str, str], FailureNote] = {}
        self._view_stale = False  # the status branch may not show this agent's latest status
        self._view_backoff = Backoff(base=30.0, cap=3600.0)
        self._view_denied = False
        self._note_oldest: dict[bytes, datetime | None] = {}  # note blob → its oldest section (cache)

    @classmethod
    def from_settings(cls, settings: Settings) -> WriteBack | None:
        """The writer the settings ask for; None when write-back is off or cannot work (auto)."""
        if settings.writeback == "off" or not (settings.repo or settings.status_remote) \
                or (settings.dir and not settings.status_remote):
            return None
        remote = status_remote(settings, settings.group)
        if settings.writeback == "auto" and not remote.can_push:
            logger.info("write-back off: no write credentials for {} (set writeback = \"on\" to force)",
                        remote.url)
            return None
        notes = Remote.from_settings(settings) if settings.repo and not settings.dir else remote
        return cls(remote, Path(settings.state_dir) / "writeback", WriteBackOptions.from_settings(settings),
                   notes_remote=notes)

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
        pushed = self._publish("status", self.own_ref, self.local_own_ref, build, context=context,
                               trust_local=True)
        if pushed is None:
            self._own_failed = True
            return None
        if report is not None:
            self._last_report = report
        self._pending_status, self._own_failed = None, False
        if self._retire_due:
            self._retire()
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
                               context=", ".join(short_sha(n.commit) for n in notes),
                               remote=self.notes_remote)
        if pushed is not None:
            for note in notes:
                self._pending_notes.pop((note.commit, note.agent), None)
        return pushed

    def _retire(self) -> None:
        """Delete the status refs this agent wrote before under another name of its own: without a group
        (before gitsync sharded the status refs by group, or before it had one) or under another group
        (it moved), as its work repo remembers them (each by its own local ref), once its status is
        written where it is now. Compare-and-swap against what it wrote: a ref another writer moved
        since is left. Best effort: what is not deleted is only stale (a reader prefers an agent's ref
        in a group to its ref without one), and the next start tries again."""
        self._retire_due = False
        try:
            with open_work_repo(self.work_dir) as repo:
                old = {local: sha for local, sha in repo.get_refs().items()
                       if local != self.local_own_ref and (remote_ref := own_remote_ref(
                           self.options.status_refs, local)) is not None
                       and remote_ref.rpartition(b"/")[2] == self.own_ref.rpartition(b"/")[2]}
                if not old:
                    return
                with contextlib.closing(RefWire(self.remote, repo, self.options.limits)) as wire:
                    for local, sha in old.items():
                        ref = own_remote_ref(self.options.status_refs, local)
                        assert ref is not None
                        try:
                            wire.push(ref, sha, ZERO_SHA)
                            logger.info("write-back: deleted {} (this agent's status is {} now)",
                                        ref.decode(), self.own_ref.decode())
                        except RefMoved:  # gone already, or another writer's now: not ours to delete
                            pass
                        set_local_ref(repo, local, None)
        except Exception as exc:  # stale refs cost a reader a line, never a sync
            self._retire_due = True
            logger.info("write-back: could not delete this agent's former status ref, will retry: {}",
                        redact(str(exc.reason if isinstance(exc, SourceError) else exc)))

    def _refresh_view(self) -> None:
        """Fold the status refs into the status branch, when this agent's latest may be missing there.
        Best effort: a failure is logged at debug level and retried later (backing off)."""
        view = self.view_ref
        if view is None or not (self._view_stale and self.enabled) or self._view_denied \
                or not self._view_backoff.ready():
            return
        pushed = self._publish("view", view, LOCAL_VIEW_REF, self._view_commit,
                               context=self.options.status_branch, statuses=True, quiet=True)
        if pushed is None:
            self._view_backoff.failed()
            return
        self._view_backoff.succeeded()
        self._view_stale = False

    def _publish(self, what: str, ref: bytes, local_ref: bytes,
                 build: Callable[[Repo, bytes | None, Mapping[bytes, bytes]], bytes | None], context: str, *,
                 trust_local: bool = False, statuses: bool = False, quiet: bool = False,
                 remote: Remote | None = None) -> bool | None:
        """Read, build, compare-and-swap push, retry. True pushed, False nothing to do, None failed.

        `trust_local`: build on the tip last seen (a ref only this agent writes), reading the remote only
        when the push finds it moved. `statuses`: read the status refs too (as a fleet reader chooses them,
        each bounded as it reads them: `gitsync.writeback.fleet`), passed to `build` with `ref`.
        A conflict or a dropped connection is retried (bounded, with jitter); a refusal is not. `remote`:
        where `ref` is (default: the status remote)."""
        remote = remote or self.remote
        try:
            with open_work_repo(self.work_dir) as repo, \
                    contextlib.closing(RefWire(remote, repo, self.options.limits)) as wire:
                read = not trust_local
                tip, refs = local_ref_sha(repo, local_ref), {}
                last = ""
                for attempt in range(self.options.attempts):
                    try:
                        if read:
                            refs = wire.fetch([ref])
                            if statuses:
                                refs |= self._status_tips(wire)
                            tip = refs.get(ref)
                            set_local_ref(repo, local_ref, tip)
                        new = build(repo, tip, refs)
                        if new is None:
                            return False
                        wire.push(ref, tip, new)
                    except (RefMoved, SourceError) as exc:
                        if isinstance(exc, SourceError) and not transient(exc):
                            raise
                        last = str(exc) if isinstance(exc, RefMoved) else exc.reason
                        self.conflicts += isinstance(exc, RefMoved)
                        if trust_local and not read and tip is not None and isinstance(exc, RefMoved):
                            logger.warning("write-back: {} was moved by another writer since this agent "
                                           "wrote it: does another agent have the name {!r}? Agent names "
                                           "must be unique in a fleet", ref.decode(), self.options.agent)
                        read = True
                        if attempt + 1 < self.options.attempts:
                            time.sleep(backoff_delay(attempt + 1, base=0.2, cap=4.0))
                        continue
                    set_local_ref(repo, local_ref, new)
                    logger.debug("write-back: pushed {} {} ({})", what, new.decode()[:7], context)
                    tidy(repo)
                    return True
                raise WriteBackError(f"{remote.url}: {ref.decode()} not updated after "
                                     f"{self.options.attempts} attempts (last: {last})")
        except Exception as exc:  # write-back must never break a sync
            self._failed(what, context, exc, quiet=quiet)
            return None

    def _status_tips(self, wire: RefWire) -> dict[bytes, bytes]:
        """The status refs a fleet reader would read (agents' names, at most max_status_refs), with their
        objects, but for those whose objects go over a status's bounds (left out of the view). An agent
        with a group reads its group's refs alone (what its group's agents fold into the view: each
        group keeps its own agents' files current, at the cost of its group, not of the fleet)."""
        prefix, limit, group = self.status_prefix, self.options.max_status_refs, self.options.group
        groups = None if group is None else (group,)
        got = wire.read_tips(self.group_prefix,
                             lambda listed: choose_refs(listed, prefix, limit, groups=groups)[0])
        for ref, why in got.refused.items():
            logger.debug("write-back: {} left out of the status branch: {}", ref.decode(), why)
        return {ref: sha for ref, sha in got.tips.items() if ref not in got.refused}

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
        return add_commit(repo, tree, parents, message, author=self.options.author, when=int(self.clock()),
                          signer=self.signer)

    def _own_commit(self, repo: Repo, tip: bytes | None, report: StatusReport | None
                    ) -> tuple[bytes | None, bool]:
        """The next commit of this agent's status ref, and whether it changes the status in substance:
        a new status; `tip`'s status again with a fresh commit time when the heartbeat is due; None
        when nothing is."""
        store = repo.object_store
        ours = tip is not None and self._signed_by_us(store, tip)
        if not ours:  # another writer's status on our ref: never carry it on, put ours back
            report = report or self._last_report
        held = status_of(store, tip) if tip and ours else None
        previous = held[1] if held else None
        if report is not None:
            doc = with_applied_at(previous, status_document(report))
            if previous is None or not same_substance(previous, doc):
                blob = Blob.from_string(render_status(doc))
                tree = Tree()
                tree.add(STATUS_FILE, stat.S_IFREG | 0o644, blob.id)
                store.add_objects([(blob, None), (tree, None)])
                return self._commit(repo, tree, [], status_message(report)), True
        if tip is None or not ours or self.clock() - store[tip].commit_time < self.options.heartbeat:
            return None, False
        old = store[tip]  # the heartbeat: a child of the status commit, with the same tree and message
        status = old.parents[0] if old.parents else tip
        return self._commit(repo, store[old.tree], [status], old.message), False

    def _signed_by_us(self, store: Any, tip: bytes) -> bool:
        """Whether the tip of our ref, and the status commit under it, are signed by this agent's key
        (always true without one: then nothing on the ref can be told apart)."""
        if self.signer is None:
            return True
        commit = store[tip]
        commits = [commit, *(store[p] for p in commit.parents[:1])]
        return all(self.signer.signed(c) for c in commits)

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
        mirror_fleet(repo, self.status_prefix, fleet)
        new_agents = _copy_tree(agents)
        headlines = []
        read: dict[bytes, tuple[bytes, dict[str, Any] | None] | None] = {}  # by tip: a flood shares one
        for ref, sha in sorted(fleet.items()):
            slug = ref[len(self.status_prefix):].rpartition(b"/")[2]  # <agent>, or <group>/<agent>
            held = read[sha] if sha in read else read.setdefault(sha, status_of(store, sha))
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
        cutoff = datetime.fromtimestamp(self.clock() - self.options.notes_retention, UTC)
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



def local_own_ref(status_refs: str, own_ref: bytes) -> bytes:
    """The work repo's ref of this agent's status ref: ``own/<agent>`` for a ref without a group (as
    before sharding: an upgraded agent keeps its work repo), ``own-in/<group>/<agent>`` for one in a
    group (another namespace: an agent named as a group never clashes with it)."""
    component = own_ref[len(status_prefix(status_refs)):]
    return (LOCAL_OWN_GROUP_PREFIX if b"/" in component else LOCAL_OWN_PREFIX) + component


def own_remote_ref(status_refs: str, local: bytes) -> bytes | None:
    """The status ref a work repo's own ref stands for (the inverse of `local_own_ref`); None for others."""
    for local_prefix in (LOCAL_OWN_PREFIX, LOCAL_OWN_GROUP_PREFIX):
        if local.startswith(local_prefix):
            return status_prefix(status_refs) + local[len(local_prefix):]
    return None


def _copy_tree(tree: Tree) -> Tree:
    copy = Tree()
    for entry in tree.items():
        copy.add(entry.path, entry.mode, entry.sha)
    return copy
