"""One agent's gateways: for each, a client that lives as long as the agent and a worker of its own.

A gateway's worker runs that gateway's pushes, one at a time, and owns its backoff (no other thread
changes it). So a hung or slow gateway ties up its own worker and nothing else: the agent waits
for a push only until a new trigger arrives, and leaves a push still running to finish on its own
(`collect` picks up its result later). HEADs and early GETs run on a small shared pool, so the
drift watch can ask a gateway whose worker is busy.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import TypeVar

from gitsync.backoff import Backoff
from gitsync.log import logger
from gitsync.push.admin_api import ConfigHead, Endpoint, Gateway, GatewayError, LiveConfig
from gitsync.push.results import GatewayResult

T = TypeVar("T")

#: GatewayPool that failed wait this long before the next try, doubling up to `max_backoff`.
BACKOFF_BASE = 1.0


class GatewayWorker:
    """One gateway: its client, its backoff, and the thread that runs its pushes."""

    def __init__(self, endpoint: Endpoint, max_backoff: float, *, one_shot: bool = False) -> None:
        self.endpoint = endpoint
        self.one_shot = one_shot  # a command that exits after its sync: there is no next attempt to promise
        self.url = endpoint.display_url
        self.client = Gateway(endpoint)
        self.backoff = Backoff(BACKOFF_BASE, max_backoff)
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gateway")
        self._last: Future[GatewayResult] | None = None

    @property
    def busy(self) -> bool:
        """A push is queued or running."""
        return self._last is not None and not self._last.done()

    def push(self, job: Callable[[Gateway], GatewayResult]) -> Future[GatewayResult]:
        """Run `job` on this gateway's thread; its result moves the backoff (on that thread too)."""
        def run() -> GatewayResult:
            result = job(self.client)
            if result.unreachable:
                delay = self.backoff.failed()
                if not self.one_shot:
                    logger.warning("gateway {}: next attempt in {:.1f}s at the earliest", self.url, delay)
            else:
                self.backoff.succeeded()
            return result

        self._last = self._thread.submit(run)
        return self._last

    def answered(self) -> Future[None]:
        """The gateway answers again: its backoff ends (changed on its own thread, after any push)."""
        return self._thread.submit(self.backoff.succeeded)

    def close(self) -> None:
        self._thread.shutdown(wait=False, cancel_futures=True)
        self.client.close()


class GatewayPool:
    """Every gateway of one agent, by URL (without credentials), in the configured order."""

    def __init__(self, endpoints: Iterable[Endpoint], max_backoff: float = 300.0, *, one_shot: bool = False,
                 ) -> None:
        workers = (GatewayWorker(endpoint, max_backoff, one_shot=one_shot) for endpoint in endpoints)
        self.workers = {worker.url: worker for worker in workers}
        self._pool = ThreadPoolExecutor(max_workers=max(1, min(8, len(self.workers))),
                                        thread_name_prefix="gateway-probe")

    def __enter__(self) -> GatewayPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def urls(self) -> list[str]:
        return list(self.workers)

    def client(self, url: str) -> Gateway:
        return self.workers[url].client

    def each(self, urls: Iterable[str], work: Callable[[Gateway], T]) -> dict[str, Future[T]]:
        """Start `work` with each gateway's client on the shared pool (HEADs, GETs, diffs)."""
        return {url: self._pool.submit(work, self.workers[url].client) for url in urls}

    def heads(self, urls: Iterable[str]) -> dict[str, Future[ConfigHead | None]]:
        return self.each(urls, Gateway.head_config)

    def read_live(self, urls: Iterable[str]) -> dict[str, Future[LiveConfig]]:
        """Start a GET of each gateway's live config, for the push that follows the render."""
        return self.each(urls, Gateway.get_config)

    def answers(self, url: str) -> bool:
        """Does the gateway's Admin API answer at all (a HEAD)?"""
        try:
            self.workers[url].client.head_config()
        except GatewayError as exc:
            logger.debug("gateway {}: {}", url, exc)
            return False
        return True

    def push(self, jobs: Mapping[str, Callable[[Gateway], GatewayResult]],
             ) -> dict[str, Future[GatewayResult]]:
        """Start each gateway's job on its own worker."""
        return {url: self.workers[url].push(job) for url, job in jobs.items()}

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        for worker in self.workers.values():
            worker.close()


#: How long a sync waits for its pushes before a new trigger may cut the wait short: a push of a
#: healthy gateway ends well within it.
PATIENCE = 1.0


def wait_for(futures: Mapping[str, Future[T]], stop_waiting: Callable[[], bool] = lambda: False,
             patience: float = PATIENCE) -> tuple[dict[str, T], list[str]]:
    """The results of the futures done, and the URLs still running when `stop_waiting()` turned true
    (asked only after `patience` seconds)."""
    pending = dict(futures)
    done: dict[str, T] = {}
    started = time.monotonic()
    while pending:
        finished, _ = wait(list(pending.values()), timeout=0.1, return_when=FIRST_COMPLETED)
        for url in [u for u, f in pending.items() if f in finished]:
            done[url] = pending.pop(url).result()
        if pending and time.monotonic() - started >= patience and stop_waiting():
            break
    return done, list(pending)


__all__ = ["GatewayPool", "GatewayWorker", "wait_for"]
