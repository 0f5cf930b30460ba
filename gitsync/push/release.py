"""After the push: the repo's health checks on each gateway, and the rollback of a gateway that fails them.

One gateway's whole job runs on that gateway's worker (gitsync.push.workers): push the commit; when the
push changed something (or an earlier push of it was never checked: `Release.recheck`) and the repo
declares checks, run them against the gateway's data plane
(its ``/status/ready`` was already awaited by the push where configured); when one still fails
after its retries and the policy says ``rollback``, push the last good commit back at once. The
agent then refuses the commit (stage ``health``) and heals every other gateway that took it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, replace
from typing import Any

from gitsync.httpclient import HttpClient
from gitsync.log import logger
from gitsync.push.admin_api import Gateway, GatewayError, LiveConfig
from gitsync.push.apply import ProblemMapper, RetryPolicy, push
from gitsync.push.guard import GuardPolicy, GuardVerdict, check_deletions, deletion_verdict
from gitsync.push.health import run_checks
from gitsync.push.plan import Desired, LiveView, Policy
from gitsync.push.results import ChecksVerdict, GatewayResult, Known, SyncStatus
from gitsync.render.healthchecks import Check
from gitsync.timing import Phases

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
    #: `payload` prepared for plans once for every gateway (`Desired.of`, with render's contents).
    desired: Desired | None = None
    #: An earlier push of this commit to this gateway ended before its checks ran (the agent died):
    #: they run now even when the push finds the gateway holding it already.
    recheck: bool = False


@dataclass(frozen=True)
class Steps:
    """What each step of one gateway's release gave: the deletion guard's verdict (None: not asked, or
    the gateway could not be read for it), the push, the health checks' verdict (None: not run), the
    rollback's push (None: none)."""

    url: str
    guard: GuardVerdict | None = None
    push: GatewayResult | None = None
    checks: ChecksVerdict | None = None
    rollback: GatewayResult | None = None


def merged(steps: Steps) -> GatewayResult:
    """The release's one result for the gateway, from its steps (pure)."""
    if steps.guard is not None and steps.guard.refused:
        return GatewayResult(steps.url, SyncStatus.FAILED, error="refused by the deletion guard",
                             guard=steps.guard)
    assert steps.push is not None
    return replace(steps.push, checks=steps.checks, rollback=steps.rollback)


def release(client: Gateway, what: Release, policy: Policy, retry: RetryPolicy, *, proxy: HttpClient | None,
            proxy_url: str | None, live: Future[LiveConfig] | None = None, known: Known | None = None,
            sleep: Callable[[float], None] | None = None, phases: Phases | None = None,
            owned: Mapping[str, Collection[str]] | None = None) -> GatewayResult:
    """Push `what` to one gateway, check it, and roll it back if a check fails (see the module): the
    steps in order, each stopping the ones after it when it must, merged into one result.

    `live`: a GET of the gateway started earlier; `known`: the gateway as our last push left it, when
    its digest says it still holds it (then no GET at all)."""
    options: dict[str, Any] = {"phases": phases, **({} if sleep is None else {"sleep": sleep})}
    steps = Steps(client.url)
    if what.guard is not None:
        verdict, known, live = _guard(client, what, what.guard, policy, live, known, phases)
        steps = replace(steps, guard=verdict)
        if verdict is not None and verdict.refused:
            return merged(steps)
    steps = replace(steps, push=push(client, what.desired or what.payload, policy, source_map=what.source_map,
                                     retry=retry, live=live, known=known, owned=owned, **options))
    steps = replace(steps, checks=_checks(client.url, what, steps.push, proxy, proxy_url, sleep))
    if steps.checks is not None and not steps.checks.ok and what.rollback:
        steps = replace(steps, rollback=_rollback(client, what, steps.push, policy, retry, options))
    return merged(steps)


def _guard(client: Gateway, what: Release, guard: GuardPolicy, policy: Policy,
           live: Future[LiveConfig] | None, known: Known | None, phases: Phases | None,
           ) -> tuple[GuardVerdict | None, Known | None, Future[LiveConfig] | None]:
    """The deletion guard's verdict on the live gateway (read now unless `known`), and what the push
    may plan on after it: the gateway as read (then no GET is needed again)."""
    try:
        if known is None:
            with (phases or Phases()).timed("push-wait", client.url):
                current = live.result() if live is not None else client.get_config()
            known, live = Known(LiveView.of(current.body), current.digest), None
    except GatewayError:
        return None, known, live  # the push reports the gateway's state, and retries
    with (phases or Phases()).timed("plan"):
        verdict = _deletions(what, guard, known, policy)
    for line in verdict.problems if verdict.refused else ():
        logger.error("gateway {}: deletion guard: {}", client.url, line)
    return verdict, known, live


def _checks(url: str, what: Release, pushed: GatewayResult, proxy: HttpClient | None, proxy_url: str | None,
            sleep: Callable[[float], None] | None) -> ChecksVerdict | None:
    """The repo's health checks on the gateway after a push that changed it (or one never checked),
    None when there are none to run."""
    changed = pushed.status is SyncStatus.APPLIED and bool(pushed.puts)
    if not what.checks or not (changed or (what.recheck and pushed.ok)):
        return None
    if proxy is None or not proxy_url:
        logger.warning("gateway {}: the repo declares {} health check(s) but this gateway has no proxy_url: "
                       "not checked", url, len(what.checks))
        return None
    verdict = run_checks(what.checks, proxy_url, proxy, **({"sleep": sleep} if sleep else {}))
    for failed in verdict.failed:
        logger.error("gateway {}: {}", url, failed.describe())
    return verdict


def _rollback(client: Gateway, what: Release, pushed: GatewayResult, policy: Policy, retry: RetryPolicy,
              options: Mapping[str, Any]) -> GatewayResult | None:
    """The last good commit pushed back after a failed check; None when there is none to go back to."""
    if what.fallback is None:
        logger.error("gateway {}: no last good commit to roll back to; the commit stays live", client.url)
        return None
    logger.warning("gateway {}: rolling back to the last good commit", client.url)
    return push(client, what.fallback, policy, retry=retry, known=_known_after(pushed),
                owned=_owned_after(pushed, what.managed), **options)


def _owned_after(result: GatewayResult, managed: Collection[str]) -> dict[str, list[str]] | None:
    return result.after.ids(managed) if result.ok and result.after is not None else None


def _deletions(what: Release, guard: GuardPolicy, known: Known, policy: Policy) -> GuardVerdict:
    """The deletion guard's verdict, from the ids the prepared plan holds when it was prepared for this
    policy (walking every item of both sides otherwise)."""
    if what.desired is not None and what.desired.policy == policy:
        wanted = {kind: want.ids for kind, want in what.desired.wanted.items()}
        return deletion_verdict(wanted, known.view.ids(what.managed), what.managed, guard)
    return check_deletions(what.payload, known.view.body(), what.managed, guard)


def _known_after(result: GatewayResult) -> Known | None:
    """The gateway as a push confirmed it, for the next push to plan on."""
    return Known(result.after, result.digest) if result.ok and result.after is not None else None


__all__ = ["Release", "Steps", "merged", "release"]
