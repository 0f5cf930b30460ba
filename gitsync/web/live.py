"""What the web view asks outside the agent's snapshot, each answer kept briefly: the gateways' HEAD
(digest) and GET (live items), the fleet from the status branch, and the live commit's items.

Each is fetched by one thread at a time, whatever the number of readers: a page asked while a fetch
runs waits for that fetch instead of starting another, and a gateway that does not answer costs a
page at most `PROBE_TIMEOUT` (its own short-deadline clients, apart from the agent's).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from gitsync.agent.sync import gc_paused
from gitsync.agent.view import AgentReader, AgentView
from gitsync.kinds import KINDS, item_id
from gitsync.log import logger, redact
from gitsync.problems import ProblemsError
from gitsync.push.admin_api import Gateway, GatewayError, endpoints_from_settings
from gitsync.settings import RepoSettings, Settings, repos_of, status_settings
from gitsync.source.transport import SourceError
from gitsync.web.catalog import Catalog
from gitsync.writeback.fleet import FleetReader
from gitsync.writeback.statusfile import FleetEntry

T = TypeVar("T")

PROBE_TIMEOUT = 2.0  # seconds: the deadline of the view's HEAD of a gateway
HEAD_TTL = 2.0  # seconds a HEAD answer is shown before the gateway is asked again
CONFIG_TTL = 5.0  # seconds a GET of a gateway's config is used for item pages
FLEET_TTL = 15.0  # seconds the fleet read from the status branch is shown


class Cached(Generic[T]):
    """One value fetched on a thread of `pool`, kept `ttl` seconds; concurrent readers share a fetch."""

    def __init__(self, pool: ThreadPoolExecutor, ttl: float, fetch: Callable[[], T]) -> None:
        self._pool, self._ttl, self._fetch = pool, ttl, fetch
        self._lock = threading.Lock()
        self._future: Future[T] | None = None
        self._at = 0.0

    def future(self) -> Future[T]:
        """The fetch in flight, or a fresh answer's, or a new fetch."""
        with self._lock:
            now = time.monotonic()
            if self._future is None or (self._future.done() and now - self._at > self._ttl):
                self._future, self._at = self._pool.submit(self._fetch), now
            return self._future

    def get(self) -> T:
        return self.future().result()


@dataclass(frozen=True)
class Head:
    """A gateway's HEAD: its digest, or why there is none."""

    answered: bool
    digest: str | None = None
    no_head: bool = False  # APISIX 3.13 has no HEAD
    error: str | None = None


@dataclass(frozen=True)
class LiveItems:
    """A gateway's live config by kind and id, or why it could not be read."""

    items: Mapping[str, Mapping[str, Any]] | None
    error: str | None = None
    at: float = 0.0  # time.time() of the GET


class ViewGateways:
    """The view's own clients of the agent's gateways (short deadlines), and their cached answers."""

    def __init__(self, settings: Settings) -> None:
        endpoints = endpoints_from_settings(settings)
        self._pool = ThreadPoolExecutor(max_workers=max(2, min(8, 2 * len(endpoints))),
                                        thread_name_prefix="web-gateway")
        self.urls = [e.display_url for e in endpoints]
        heads = {e.display_url: Gateway(dataclasses.replace(e, timeout=min(e.timeout, PROBE_TIMEOUT)))
                 for e in endpoints}
        reads = {e.display_url: Gateway(e) for e in endpoints}
        self._clients = [*heads.values(), *reads.values()]
        self._heads = {url: Cached(self._pool, HEAD_TTL, lambda c=client: _head(c))
                       for url, client in heads.items()}
        self._lives = {url: Cached(self._pool, CONFIG_TTL, lambda c=client: _live(c))
                       for url, client in reads.items()}

    def heads(self) -> dict[str, Head]:
        """Every gateway's HEAD, asked in parallel (or cached)."""
        return _all(self._heads)

    def lives(self) -> dict[str, LiveItems]:
        return _all(self._lives)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        for client in self._clients:
            client.close()


def _all(cached: Mapping[str, Cached[T]]) -> dict[str, T]:
    """Every gateway's answer: all fetches started first, then waited for."""
    futures = {url: c.future() for url, c in cached.items()}
    return {url: f.result() for url, f in futures.items()}


def _head(client: Gateway) -> Head:
    try:
        answer = client.head_config()
    except GatewayError as exc:
        return Head(False, error=str(exc))
    if answer is None:
        return Head(True, no_head=True)
    return Head(True, digest=answer.digest)


def _live(client: Gateway) -> LiveItems:
    try:
        body = client.get_config().body
    except GatewayError as exc:
        return LiveItems(None, str(exc), time.time())
    items: dict[str, dict[str, Any]] = {}
    for kind in KINDS:
        listed = body.get(kind)
        by_id: dict[str, Any] = {}
        for item in listed if isinstance(listed, list) else ():
            ident = item_id(kind, item)
            if ident is not None:
                by_id.setdefault(ident, item)
        items[kind] = by_id
    return LiveItems(items, None, time.time())


# ---------------------------------------------------------------------------------------------------------
# The fleet


@dataclass(frozen=True)
class Fleet:
    """Every agent's status on one repo's status refs (`source`: the ``[[sources]]`` repo's name), or why
    it cannot be read."""

    agents: tuple[FleetEntry, ...]
    error: str | None = None
    at: float = 0.0
    source: str | None = None


class ViewFleet:
    """The fleet, read from each repo's status refs (`gitsync.settings.repos_of`) at most every
    `FLEET_TTL` seconds, by one reader per repo kept from read to read (a read costs what moved since the
    last: `gitsync.writeback.fleet`), made anew when a reload changes what it reads."""

    def __init__(self, settings: Callable[[], Settings], work_dir: Path) -> None:
        self._settings = settings
        self._work_dir = work_dir
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="web-fleet")
        self._cached = Cached(self._pool, FLEET_TTL, self._read)
        self._readers: dict[str | None, tuple[tuple[object, ...], FleetReader]] = {}

    def _reader_for(self, repo: RepoSettings, work_dir: Path) -> FleetReader:
        settings = status_settings(repo.settings)
        key = (settings.repo, settings.status_remote, settings.status_refs, settings.status_signers,
               settings.max_status_refs)
        kept = self._readers.get(repo.name)
        if kept is None or kept[0] != key:
            kept = self._readers[repo.name] = key, FleetReader.from_settings(settings, work_dir)
        return kept[1]

    def _read(self) -> tuple[Fleet, ...]:
        return tuple(self._read_one(repo, self._work_dir if repo.name is None else self._work_dir / repo.name)
                     for repo in repos_of(self._settings()))

    def _read_one(self, repo: RepoSettings, work_dir: Path) -> Fleet:
        settings, name = status_settings(repo.settings), repo.name
        if not (settings.repo or settings.status_remote):
            return Fleet((), "no git remote: the fleet is read from the repo's status refs", time.time(),
                         name)
        try:
            return Fleet(self._reader_for(repo, work_dir).read().entries, None, time.time(), name)
        except SourceError as exc:
            return Fleet((), redact(f"cannot read {settings.status_refs}: {exc.reason}"), time.time(), name)
        except Exception as exc:  # a broken work repo, say: the page says so, the agent goes on
            logger.warning("web view: reading the fleet failed: {}", redact(str(exc)))
            return Fleet((), redact(f"cannot read {settings.status_refs}: {exc}"), time.time(), name)

    def get(self) -> tuple[Fleet, ...]:
        """Each repo's fleet, in the settings' order."""
        return self._cached.get()

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


# ---------------------------------------------------------------------------------------------------------
# The live commit's items


class LiveCatalog:
    """The catalog of the last good commit: built from the agent's rendered copy when it holds one,
    else rendered once from its mirrors, apart from the agent (`AgentReader.render_apart`: after a
    restart, before the agent needs to). `warm`
    builds it, and its search index, in the background: the overview calls it, so the items pages
    that follow find it ready."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._catalog: Catalog | None = None
        self._error: tuple[str, str] | None = None  # (sha, why it cannot be shown)
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="web-catalog")
        self._warming: Future[None] | None = None

    def warm(self, view: AgentView, agent: AgentReader) -> None:
        known = self.peek(view.last_good)
        if (known is None or not known.prepared) and (self._warming is None or self._warming.done()):
            self._warming = self._pool.submit(self._prepare, view, agent)

    def _prepare(self, view: AgentView, agent: AgentReader) -> None:
        catalog, _ = self.get(view, agent)
        if catalog is not None:
            with gc_paused():
                catalog.prepare()

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def peek(self, sha: str | None) -> Catalog | None:
        """The catalog of `sha` if it is built already (never builds one)."""
        known = self._catalog
        return known if known is not None and known.sha == sha else None

    def get(self, view: AgentView, agent: AgentReader) -> tuple[Catalog | None, str | None]:
        """(the catalog, None), or (None, why not)."""
        sha = view.last_good
        if not sha:
            return None, "no commit is live yet"
        held = view.live_commit
        with self._lock:
            known = self._catalog
            if known is not None and known.sha == sha and (held is None or known.rendered is held.rendered):
                return known, None
            if held is not None:
                self._catalog = Catalog(sha, held.rendered, held.files)
                return self._catalog, None
            if self._error is not None and self._error[0] == sha:
                return None, self._error[1]
            try:
                with gc_paused():  # as a sync renders: no full collections over the growing payload
                    rendered, files = agent.render_apart(sha)
            except (SourceError, ProblemsError) as exc:
                why = redact(f"cannot render {sha[:7]} again: {exc}")
                self._error = (sha, why)
                return None, why
            self._catalog = Catalog(sha, rendered, files)
            return self._catalog, None


__all__ = ["Fleet", "Head", "LiveCatalog", "LiveItems", "ViewFleet", "ViewGateways"]
