"""After the push: the repo's health checks on each gateway, and the rollback of a gateway that fails them.

One gateway's whole job runs on that gateway's worker (gitsync.gateways): push the commit; when the
push changed something and the repo declares checks, run them against the gateway's data plane
(its ``/status/ready`` was already awaited by the push where configured); when one still fails
after its retries and the policy says ``rollback``, push the last good commit back at once. The
agent then refuses the commit (stage ``health``) and heals every other gateway that took it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, replace
from typing import Any

from gitsync.checks import Check, run_checks
from gitsync.gateway import Gateway, GatewayError, LiveConfig
from gitsync.guard import GuardPolicy, check_deletions
from gitsync.httpclient import HttpClient
from gitsync.log import logger
from gitsync.push import GatewayResult, ProblemMapper, RetryPolicy, SyncStatus, push
from gitsync.reconcile import Policy

Payload = Mapping[str, Sequence[Any]]


@dataclass(frozen=True)
class Release:
    """What a gateway is to be given, and what it falls back to."""

    payload: Payload
    source_map: ProblemMapper | None
    checks: tuple[Check, ...] = ()
    fallback: Payload | None = None  # the last good commit's payload: what a rollback pushes
    rollback: bool = True  # on_check_failure = "rollback"
    guard: GuardPolicy | None = None  # a new commit passes the deletion guard first
    managed: frozenset[str] = frozenset()  # the kinds the guard looks at


def release(client: Gateway, what: Release, policy: Policy, retry: RetryPolicy, *, proxy: HttpClient | None,
            proxy_url: str | None, live: Any = None, sleep: Callable[[float], None] | None = None,
            ) -> GatewayResult:
    """Push `what` to one gateway, check it, and roll it back if a check fails (see the module)."""
    options: dict[str, Any] = {} if sleep is None else {"sleep": sleep}
    if what.guard is not None:
        try:
            current = live.result() if live is not None else client.get_config()
        except GatewayError:
            current = None  # the push reports the gateway's state, and retries
        if current is not None:
            verdict = check_deletions(what.payload, current.body, what.managed, what.guard)
            if verdict.refused:
                for line in verdict.problems:
                    logger.error("gateway {}: deletion guard: {}", client.url, line)
                return GatewayResult(client.url, SyncStatus.FAILED, error="refused by the deletion guard",
                                     guard=verdict)
            live = _done(current)
    result = push(client, what.payload, policy, source_map=what.source_map, retry=retry, live=live, **options)
    if not what.checks or result.status is not SyncStatus.APPLIED or not result.puts:
        return result
    if proxy is None or not proxy_url:
        logger.warning("gateway {}: the repo declares {} health check(s) but this gateway has no proxy_url: "
                       "not checked", client.url, len(what.checks))
        return result
    verdict = run_checks(what.checks, proxy_url, proxy, **options)
    result = replace(result, checks=verdict)
    for failed in verdict.failed:
        logger.error("gateway {}: {}", client.url, failed.describe())
    if verdict.ok or not what.rollback:
        return result
    if what.fallback is None:
        logger.error("gateway {}: no last good commit to roll back to; the commit stays live", client.url)
        return result
    logger.warning("gateway {}: rolling back to the last good commit", client.url)
    back = push(client, what.fallback, policy, retry=retry, **options)
    return replace(result, rollback=back)


def _done(value: LiveConfig) -> Future[LiveConfig]:
    future: Future[LiveConfig] = Future()
    future.set_result(value)
    return future


__all__ = ["Release", "release"]
