"""Reading the fleet: every agent's status from the status refs, cheap enough for every poll, each one
checked as the untrusted input it is (`statusfile`) and, with `status_signers`, by its signature
(`trust`).

Whoever can push under the status refs can push anything there, so what a read costs is bounded
whatever the remote holds:

* **names**: a ref is ``<agent>`` (an agent without a group, or written before the refs were sharded)
  or ``<group>/<agent>`` (`parse_component`); one whose components are no agent's or group's (not what
  `gitsync.names.agent_slug` makes of a name, or nested deeper) is ignored;
* **groups**: a reader of one group (the gate) asks the server for that group's refs alone
  (``ls-refs`` with ``ref-prefix``), so a read costs the group, not the fleet; a status under a group's
  namespace that names another group is refused;
* **count**: at most `max_status_refs` refs of each group are read: the names asked for first (the
  gate's members) before the others, then by name; the excess is named in the log (when it changes)
  and ignored. A reader may also read `only` some names (the gate, when `status_signers` names its
  group's agents);
* **objects**: a read fetches the tips that moved only, bounded before anything is inflated
  (`gitsync.writeback.remote.status_limits`: nothing larger than a status may be, a few objects per
  tip); a ref whose objects go over the bounds alone is an unreadable entry (``not fetched: …``) and
  the others are read;
* **work**: a status is read, checked and verified once per tip; a read where nothing moved costs the
  listing of the refs, one where some moved what moved (`FleetRead.changed`), and the local refs that
  keep the objects are one packed-refs file, written when something moved.

`FleetSource` is what the gate, the forge's group statuses and the web view read through: the status
refs here (`FleetReader`); another distribution of statuses can stand in for it.
"""

from __future__ import annotations

import contextlib
import functools
import re
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from dulwich.objects import Commit, ShaFile, Tree, hex_to_sha

from gitsync.backoff import backoff_delay
from gitsync.log import logger
from gitsync.names import MAX_COMPONENT, agent_slug, decode_slug, group_problem
from gitsync.source.sizes import ObjectSizes
from gitsync.source.transport import Remote, SourceError
from gitsync.writeback.remote import (
    RefMoved,
    RefWire,
    TipsRead,
    mirror_fleet,
    open_work_repo,
    status_remote,
    tidy,
)
from gitsync.writeback.statusfile import MAX_STATUS_BYTES, FleetEntry, StatusFile, Unreadable, read_status
from gitsync.writeback.trust import StatusSigners
from gitsync.writeback.wire import STATUS_FILE, group_prefix, status_prefix

if TYPE_CHECKING:
    from gitsync.settings import Settings

#: Names shown in one log line about refs ignored.
SHOWN = 5
#: An agent's name that needs no encoding is its own ref component (most are).
_PLAIN = re.compile(rb"[A-Za-z0-9_-]{1,%d}" % MAX_COMPONENT)


# ---------------------------------------------------------------------------------------------------------
# What a read gives


@dataclass(frozen=True)
class Ignored:
    """Refs a read left aside: names that are no agent's, and agents beyond `max_status_refs`."""

    invalid: tuple[str, ...] = ()
    excess: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.invalid or self.excess)

    def describe(self, limit: int) -> str:
        parts = []
        if self.excess:
            parts.append(f"{len(self.excess):,} beyond max_status_refs = {limit:,} ({_some(self.excess)})")
        if self.invalid:
            parts.append(f"{len(self.invalid):,} whose name is no agent's ({_some(self.invalid)})")
        return "; ".join(parts)


def _some(names: tuple[str, ...]) -> str:
    shown = ", ".join(repr(n)[1:-1][:80] for n in names[:SHOWN])
    return shown + (f", … {len(names) - SHOWN:,} more" if len(names) > SHOWN else "")


@dataclass(frozen=True)
class FleetRead:
    """One read of the fleet: the entries (sorted by agent), which refs were read anew (new or moved)
    and which are gone since the reader's last read, and what was ignored."""

    entries: tuple[FleetEntry, ...]
    changed: frozenset[str] = frozenset()  # refs' last components
    gone: frozenset[str] = frozenset()
    ignored: Ignored = field(default_factory=Ignored)

    def group(self, name: str) -> tuple[FleetEntry, ...]:
        """The entries whose readable status says they are of group `name`."""
        return tuple(e for e in self.entries if e.group == name)


class FleetSource(Protocol):
    """What reads the fleet's statuses (see the module)."""

    def read(self, *, only: Collection[str] | None = None, first: Collection[str] = ()) -> FleetRead:
        """The statuses of every agent (or `only` those agents), the agents `first` read before any other
        when there are too many; raises `SourceError` when the statuses cannot be read."""
        ...


# ---------------------------------------------------------------------------------------------------------
# Which refs are read (pure)


@functools.lru_cache(maxsize=1 << 16)
def is_agent_ref(component: bytes) -> bool:
    """Whether a status ref's last component is what an agent's name encodes to (`agent_slug`)."""
    if _PLAIN.fullmatch(component):
        return True
    if b"/" in component:
        return False
    try:
        text = component.decode("ascii")
        return agent_slug(decode_slug(text)) == text
    except (UnicodeDecodeError, ValueError):
        return False


@functools.lru_cache(maxsize=1 << 16)
def is_group_component(component: bytes) -> bool:
    """Whether a status ref's group component is what a group's name encodes to (`group_prefix`)."""
    try:
        text = component.decode("ascii")
        group = decode_slug(text)
    except (UnicodeDecodeError, ValueError):
        return False
    return group_problem(group) is None and agent_slug(group) == text


def parse_component(component: bytes) -> tuple[str | None, str] | None:
    """What a status ref says under the status prefix: (its group, its agent's slug). ``edge-1`` is an
    agent without a group (or written by gitsync before status refs were sharded by group),
    ``canary/edge-1`` an agent of group ``canary``; None for anything else (no agent's ref)."""
    group, _, agent = component.rpartition(b"/")
    if not is_agent_ref(agent):
        return None
    if not group:
        return (None, agent.decode("ascii")) if not component.startswith(b"/") else None
    if b"/" in group or not is_group_component(group):
        return None
    return decode_slug(group.decode("ascii")), agent.decode("ascii")


def choose_refs(listed: Mapping[bytes, bytes], prefix: bytes, limit: int, only: Collection[str] | None = None,
                first: Collection[str] = (), groups: Collection[str] | None = None
                ) -> tuple[dict[bytes, bytes], Ignored]:
    """The status refs to read of those `listed` under `prefix` (ref → tip), and what is ignored: refs
    whose name is no agent's, and in each group beyond `limit` refs the others (`first` agents before
    the rest, then by name; the refs of agents without a group are a group of their own). With `only`,
    the refs of those agents alone (the others are neither read nor counted); with `groups`, the sharded
    refs of those groups alone (and the refs without a group: the layout before sharding). An agent
    with a ref in its group and one without (written before it was upgraded) is read in its group."""
    wanted = None if only is None else {slug for name in only if (slug := _slug(name)) is not None}
    preferred = {slug for name in first if (slug := _slug(name)) is not None}
    by_group: dict[str | None, dict[str, bytes]] = {}
    invalid = []
    for ref in listed:
        component = ref[len(prefix):]
        parsed = parse_component(component)
        if parsed is None:
            invalid.append(component.decode("utf-8", "replace"))
            continue
        group, name = parsed
        if (wanted is None or name in wanted) and (group is None or groups is None or group in groups):
            by_group.setdefault(group, {})[name] = ref
    sharded = {name for group, refs in by_group.items() if group is not None for name in refs}
    chosen: dict[bytes, bytes] = {}
    excess: list[str] = []
    for group, refs in sorted(by_group.items(), key=lambda item: item[0] or ""):
        names = [name for name in refs if group is not None or name not in sharded]
        order = sorted(names, key=lambda name: (name not in preferred, name))
        chosen |= {refs[name]: listed[refs[name]] for name in order[:limit]}
        excess += [refs[name][len(prefix):].decode("ascii") for name in order[limit:]]
    return chosen, Ignored(tuple(sorted(invalid)), tuple(sorted(excess)))


# ---------------------------------------------------------------------------------------------------------
# Reading the status refs


class FleetReader:
    """Every agent's status from the status refs, cheap enough to read on every poll (see the module).

    A read is one connection: the refs under the prefix (``ls-refs``, filtered by the server), then a
    fetch of only the tips this reader does not hold yet (none when no agent wrote since the last
    read), into a local work repo that keeps them for the next read. A status is read, checked and its
    signature verified once per tip (`FleetEntry`).

    With `group`, a read is of that group alone: the server lists the refs under
    ``<status_refs>/<group>/`` (``ls-refs`` with its ``ref-prefix``: what it sends grows with the group,
    not the fleet) and the refs without a group of the agents the read names (`only`, `first`: written
    by those agents before they were upgraded). While no agent of the group writes under its prefix yet
    (every one on a gitsync from before the sharding), a read lists the whole namespace, as before."""

    def __init__(self, remote: Remote, work_dir: Path, status_refs: str = "refs/gitsync/status",
                 signers: StatusSigners | None = None, max_refs: int = 1000,
                 group: str | None = None) -> None:
        self.remote = remote
        self.work_dir = Path(work_dir)
        self.prefix = status_prefix(status_refs)
        self.group = group
        self.group_prefix = group_prefix(status_refs, group)
        self.signers = signers
        self.max_refs = max_refs
        self._entries: dict[bytes, FleetEntry] = {}  # ref → what was read of its tip (`FleetEntry.tip`)
        self._ignored = Ignored()
        self._chosen: tuple[dict[bytes, bytes], tuple[object, ...], dict[bytes, bytes], Ignored] | None = None
        self._statuses: dict[bytes, StatusFile | Unreadable] = {}  # by blob: parsed once however many hold it

    @classmethod
    def from_settings(cls, settings: Settings, work_dir: Path | None = None, *,
                      group: str | None = None) -> FleetReader:
        """The agent's reader: the status remote (`status_remote`, else the config repo's), a work repo
        of its own in the state dir (``<state_dir>/fleet`` unless `work_dir`: readers run on different
        threads); with `group`, of that group alone."""
        return cls(status_remote(settings, group or settings.group),
                   work_dir or Path(settings.state_dir) / "fleet", settings.status_refs,
                   signers_from_settings(settings), settings.max_status_refs, group)

    def read(self, *, only: Collection[str] | None = None, first: Collection[str] = ()) -> FleetRead:
        """The statuses (see `FleetSource.read`); raises `SourceError` when the remote fails."""
        groups = None if self.group is None else (self.group,)

        def choose(listed: Mapping[bytes, bytes]) -> dict[bytes, bytes]:
            asked = (None if only is None else frozenset(only), frozenset(first))
            last = self._chosen
            if last is not None and last[1] == asked and last[0] == listed:  # nothing moved: as chosen
                tips, ignored[0] = last[2], last[3]
                return tips
            tips, ignored[0] = choose_refs(listed, self.prefix, self.max_refs, only, first, groups)
            self._chosen = (dict(listed), asked, tips, ignored[0])
            return tips

        ignored = [Ignored()]
        held = self._entries
        skip = {entry.tip.encode() for entry in held.values() if entry.status is None and entry.tip}
        with open_work_repo(self.work_dir) as repo, contextlib.closing(RefWire(self.remote, repo)) as wire:
            got = self._read_tips(wire, self.prefixes(only, first), choose, skip)
            if self.group is not None and not any(ref.startswith(self.group_prefix) for ref in got.listed):
                got = self._read_tips(wire, [self.prefix], choose, skip)  # none sharded yet: as before
            changed = {ref for ref, sha in got.tips.items()
                       if ref not in held or held[ref].tip != sha.decode()}
            with ObjectSizes(repo.object_store) as objects:  # after the fetch: its pack is listed
                entries = {ref: self._entry(objects, ref, sha, got.refused.get(ref)) if ref in changed
                           else held[ref] for ref, sha in got.tips.items()}
            gone = set(held) - set(entries)
            if changed or gone:
                mirror_fleet(repo, self.prefix, {ref: sha for ref, sha in got.tips.items()
                                                 if sha in repo.object_store})
                tidy(repo)  # each fetch adds a pack: read every poll, they would pile up
        self._entries = entries
        self._tell_ignored(ignored[0])
        name = self._component
        return FleetRead(tuple(sorted(entries.values(), key=lambda e: (e.agent, e.ref))),
                         frozenset(name(ref) for ref in changed), frozenset(name(ref) for ref in gone),
                         ignored[0])

    def prefixes(self, only: Collection[str] | None = None, first: Collection[str] = ()) -> list[bytes]:
        """What a read asks the server to list (``ref-prefix``): the whole namespace; with a group, the
        group's namespace and the refs without a group of the agents named (`only`, else `first`)."""
        if self.group is None:
            return [self.prefix]
        named = sorted({slug for name in (only if only is not None else first) if (slug := _slug(name))})
        return [self.group_prefix, *(self.prefix + slug.encode() for slug in named[:self.max_refs])]

    def _read_tips(self, wire: RefWire, prefixes: Sequence[bytes],
                   choose: Callable[[Mapping[bytes, bytes]], Mapping[bytes, bytes]],
                   skip: Collection[bytes]) -> TipsRead:
        for attempt in range(3):
            try:
                return wire.read_tips(prefixes, choose, haves=self._haves, skip=skip)
            except RefMoved:  # a local-path remote mid-push: read again
                time.sleep(backoff_delay(attempt + 1, base=0.05, cap=0.5))
        raise SourceError("writeback", f"{self.remote.url}: the status refs kept moving")

    def _component(self, ref: bytes) -> str:
        return ref[len(self.prefix):].decode("utf-8", "replace")

    def _haves(self, tips: Mapping[bytes, bytes]) -> list[bytes]:
        """The old tips of the refs that moved: what the server need not send again under them."""
        return [entry.tip.encode() for ref, sha in tips.items()
                if (entry := self._entries.get(ref)) is not None and entry.tip and entry.tip != sha.decode()]

    def _tell_ignored(self, ignored: Ignored) -> None:
        if ignored != self._ignored and ignored:
            logger.warning("fleet: status refs under {} ignored: {}", self.prefix.decode(),
                           ignored.describe(self.max_refs))
        self._ignored = ignored

    def _entry(self, objects: ObjectSizes, ref: bytes, sha: bytes, refused: str | None = None) -> FleetEntry:
        """What one status ref says, never raising: whatever its writer pushed, it is an entry."""
        name = self._component(ref)
        parsed = parse_component(ref[len(self.prefix):])
        group, slug = parsed if parsed is not None else (None, name)
        try:
            agent = decode_slug(slug)
        except UnicodeDecodeError:
            agent = name
        if not agent.isprintable():  # shown in logs and tables: the ref's own characters are safe there
            agent = name
        if refused is not None:
            return FleetEntry(name, agent, None, f"not fetched: {refused}", tip=sha.decode())
        try:
            return self._read_entry(objects, name, agent, sha, group)
        except Exception as exc:  # an object store that cannot read what was pushed: that agent's problem
            logger.debug("fleet: {}: {}: {}", name, type(exc).__name__, exc)
            return FleetEntry(name, agent, None, f"cannot be read ({type(exc).__name__})", tip=sha.decode())

    def _read_entry(self, objects: ObjectSizes, name: str, agent: str, sha: bytes, group: str | None
                    ) -> FleetEntry:
        tip = _small(objects, sha)
        if not isinstance(tip, Commit):
            what = tip.type_name.decode() if tip is not None else "object larger than a status may be"
            return FleetEntry(name, agent, None, f"the ref points to a {what}, not a commit",
                              tip=sha.decode())
        seen = _time(tip)
        status_commit = tip
        if tip.parents:  # a heartbeat: the status commit is its parent, with the same tree
            parent = _small(objects, tip.parents[0]) if tip.parents[0] in objects.store else None
            if not isinstance(parent, Commit) or parent.tree != tip.tree:
                return FleetEntry(name, agent, None, "a heartbeat whose parent is not its status",
                                  seen=seen, tip=sha.decode())
            status_commit = parent
        read = self._status_file(objects, tip)
        if isinstance(read, Unreadable):
            return FleetEntry(name, agent, None, read.reason, written=_time(status_commit), seen=seen,
                              tip=sha.decode())
        if _slug(read.agent) != name.rpartition("/")[2]:
            return FleetEntry(name, agent, None, f"it speaks for {read.agent!r}, not for its ref's agent",
                              written=_time(status_commit), seen=seen, tip=sha.decode())
        if group is not None and read.group != group:  # a group read must hold that group's statuses alone
            return FleetEntry(name, agent, None, f"it speaks for group {read.group!r}, not for its ref's "
                              f"group {group!r}", written=_time(status_commit), seen=seen, tip=sha.decode())
        signature = None
        if self.signers is not None:
            signature = self.signers.verify(tip, read.agent, read.group)
            if signature.verified and status_commit is not tip:
                signature = self.signers.verify(status_commit, read.agent, read.group)
        return FleetEntry(name, read.agent, read, None, signature, _time(status_commit), seen, sha.decode())

    def _status_file(self, objects: ObjectSizes, commit: Commit) -> StatusFile | Unreadable:
        """The status file of `commit`, parsed once per blob however many refs hold it."""
        tree = _small(objects, commit.tree)
        if not isinstance(tree, Tree) or STATUS_FILE not in tree:
            return Unreadable(f"no {STATUS_FILE.decode()} in the status commit")
        mode, blob = tree[STATUS_FILE]
        if mode & 0o170000 != 0o100000:
            return Unreadable(f"{STATUS_FILE.decode()} is not a file")
        known = self._statuses.get(blob)
        if known is None:
            if len(self._statuses) >= 2 * self.max_refs:
                self._statuses.clear()
            known = self._statuses[blob] = _status_blob(objects, blob)
        return known


def _slug(agent: str) -> str | None:
    try:
        return agent_slug(agent)
    except ValueError:
        return None


def _time(commit: Commit) -> datetime | None:
    try:
        return datetime.fromtimestamp(commit.commit_time, UTC)
    except (OverflowError, OSError, ValueError):
        return None


def _small(objects: ObjectSizes, sha: bytes) -> ShaFile | None:
    """The object `sha`, unless its header says it is larger than a status may be (then None, never
    inflated: objects an older gitsync fetched unbounded may be any size)."""
    if objects.size(sha) > MAX_STATUS_BYTES:
        return None
    return _object(objects, sha)


def _object(objects: ObjectSizes, sha: bytes) -> ShaFile:
    """The object `sha` read from the pack that holds it (found by `objects`, whose list of packs is read
    once: the store's own lookup lists the pack directory again for each object), else from the store."""
    found = objects.find(sha)
    if found is None:
        return objects.store[sha]
    return ShaFile.from_raw_string(*found[0].get_raw(hex_to_sha(sha)), sha=sha)


def _status_blob(objects: ObjectSizes, blob: bytes) -> StatusFile | Unreadable:
    size = objects.size(blob)
    if size > MAX_STATUS_BYTES:  # looked at before a byte of it is inflated
        return Unreadable(f"{size} bytes, more than the {MAX_STATUS_BYTES} a status file may have")
    return read_status(_object(objects, blob).data)  # type: ignore[attr-defined]


def signers_from_settings(settings: Settings) -> StatusSigners | None:
    """`status_signers`, loaded; a file that cannot be read stops the agent at start (SettingsError)."""
    if settings.status_signers is None:
        return None
    from gitsync.settings import SettingsError

    try:
        signers = StatusSigners(settings.status_signers)
    except SourceError as exc:
        raise SettingsError(f"status_signers: {exc.reason}") from None
    if not len(signers):
        raise SettingsError(f"status_signers: {settings.status_signers} names no usable key")
    return signers


def read_fleet(remote: Remote, status_refs: str, work_dir: Path, signers: StatusSigners | None = None,
               max_refs: int = 1000) -> list[FleetEntry]:
    """Every agent's status from the status refs, once (see `FleetReader`)."""
    return list(FleetReader(remote, work_dir, status_refs, signers, max_refs).read().entries)
