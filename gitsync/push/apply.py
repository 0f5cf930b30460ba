"""The push loop: make one gateway hold the desired payload, and say what happened.

Per gateway: GET live → plan → PUT → read back and re-plan (nothing left to change means it is
live) → `/status/ready` when configured → `GatewayResult`. Reconcile stays pure and the gateway
client thin; the decisions about retrying live here:

- a stale-version 400 or a read-back that differs means another writer raced us (`Raced`): GET
  again, re-plan, retry soon;
- a connection error, a passed deadline or a 5xx: retry later; nothing was changed by a request
  that never reached the gateway or that it answered with 5xx. While it waits, the loop asks the
  gateway (HEAD) whether it is back, and retries at once when it is: a gateway back from a restart
  is refilled within a probe interval, not after the rest of a backoff;
- a validation 400, 401/403, or an answer not understood: fail at once, nothing retried.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Protocol

from gitsync.backoff import backoff_delay
from gitsync.kinds import KINDS, item_id
from gitsync.log import logger, redact
from gitsync.problems import Problem
from gitsync.push.admin_api import (
    VALIDATE_LIMIT,
    Endpoint,
    Gateway,
    GatewayAuthError,
    GatewayError,
    GatewayRejected,
    GatewayUnavailable,
    ItemError,
    LiveConfig,
    PutResult,
    ReadyResult,
)
from gitsync.push.guard import GuardPolicy
from gitsync.push.moves import CHECKED_KINDS, FirstStep, first_step, is_move_refusal
from gitsync.push.plan import MANAGE_ALL, Desired, ItemChange, LiveView, Plan, Policy, item_changes, plan
from gitsync.push.results import GatewayResult, Known, SyncStatus
from gitsync.settings import Settings
from gitsync.timing import Phases


class ProblemMapper(Protocol):
    """Render's source map: (kind, index in the payload list) → a `Problem` at file:line."""

    def problem(self, kind: str, index: int, message: str, field: tuple[str, ...] = ()) -> Problem: ...


class Raced(Exception):
    """Another writer changed the gateway's config between our read and our push, or right after."""


@dataclass(frozen=True)
class RetryPolicy:
    """Attempts per gateway and the pause between them (`gitsync.backoff`).

    A race needs only a fresh GET, so it backs off briefly; an unavailable gateway gets time to
    come back, and is asked every `probe_every` seconds whether it is. With the defaults a dead
    gateway fails in well under 10 s.
    """

    attempts: int = 5
    race_base: float = 0.05
    unavailable_base: float = 0.5
    cap: float = 5.0
    probe_every: float = 1.0

    def delay(self, attempt: int, *, race: bool) -> float:
        return backoff_delay(attempt, self.race_base if race else self.unavailable_base, self.cap)

    @classmethod
    def from_settings(cls, settings: Settings) -> RetryPolicy:
        return cls(attempts=max(1, settings.push_attempts), cap=min(cls.cap, settings.max_backoff),
                   probe_every=min(cls.probe_every, settings.drift_interval))


DEFAULT_RETRY = RetryPolicy()


# ---------------------------------------------------------------------------------------------------------
# One gateway


def item_problems(items: Sequence[ItemError], desired: Mapping[str, Sequence[Any]],
                  source_map: ProblemMapper | None) -> list[Problem]:
    """Gateway item errors as `Problem`s at file:line (the index is the item's place in the sent list)."""
    problems = []
    for err in items:
        kind, index, ident = err.kind, err.index, err.id
        listed = list(desired.get(kind) or ()) if kind else []
        if index is None and ident is not None:
            matches = [i for i, item in enumerate(listed) if item_id(kind or "", item) == ident]
            index = matches[-1] if matches else None  # a duplicate: the later one is the extra
        if ident is None and index is not None and 0 <= index < len(listed):
            ident = item_id(kind or "", listed[index])
        message = redact(err.message)
        if source_map is not None and kind and index is not None and 0 <= index < len(listed):
            problems.append(source_map.problem(kind, index, message))
        else:
            problems.append(Problem(message, kind=kind, id=ident))
    return problems


class GatewayPush:
    """One push of a desired config to one gateway while it runs: attempts, retries, the result."""

    def __init__(self, gateway: Gateway, desired: Mapping[str, Sequence[Any]] | Desired, policy: Policy,
                 source_map: ProblemMapper | None = None, retry: RetryPolicy = DEFAULT_RETRY,
                 live: Future[LiveConfig] | None = None,
                 sleep: Callable[[float], None] = time.sleep, known: Known | None = None,
                 phases: Phases | None = None, owned: Mapping[str, Collection[str]] | None = None) -> None:
        self.gateway = gateway
        self.phases = phases or Phases()
        self.owned = owned  # per kind, the ids gitsync pushed to this gateway before (reconcile.plan)
        self.prefetched = live  # this sync's GET, already under way: the first attempt's live config
        self.known = known  # the gateway as our last push left it, its digest still ours: no GET needed
        self.desired = Desired.of(desired, policy)  # shared by the plan and the read-back's
        self.source_map = source_map
        self.retry = retry
        self.sleep = sleep
        self.started = time.monotonic()
        self.attempts = 0
        self.puts = 0
        self.bytes_sent = 0
        self.two_step = False
        self.pruned_first: dict[str, tuple[str, ...]] = {}
        self.plan: Plan | None = None

    def result(self, status: SyncStatus, *, error: str | None = None, problems: Sequence[Problem] = (),
               digest: str | None = None, workers: bool | None = None,
               after: LiveView | None = None) -> GatewayResult:
        p = self.plan
        counts = {k.key: k.count for k in p.kinds if k.key in KINDS} if p else {}
        pruned = dict(self.pruned_first)  # a first step pruned what the second no longer sees
        for kind, ids in (p.pruned if p else {}).items():
            pruned[kind] = pruned.get(kind, ()) + ids
        return GatewayResult(
            url=self.gateway.url, status=status, versions=p.versions if p else {},
            digest=digest or (p.digest if p else None), counts=counts, pruned=pruned,
            problems=tuple(problems), error=redact(error) if error else None, attempts=self.attempts,
            puts=self.puts, bytes_sent=self.bytes_sent, duration=round(time.monotonic() - self.started, 3),
            two_step=self.two_step, plan=p, on_every_worker=workers, after=after,
        )

    def failed(self, error: str, problems: Sequence[Problem] = ()) -> GatewayResult:
        return self.result(SyncStatus.FAILED, error=error, problems=problems)

    def run(self) -> GatewayResult:
        last_error = "no attempt made"
        while self.attempts < self.retry.attempts:
            self.attempts += 1
            try:
                return self.attempt()
            except Raced as exc:
                last_error, race = f"another writer raced this push: {exc}", True
            except GatewayRejected as exc:
                if exc.stale is None:
                    return self.refused(exc)
                last_error, race = f"another writer raced this push: {exc}", True
            except GatewayUnavailable as exc:
                last_error, race = str(exc), False
            except (GatewayAuthError, GatewayError) as exc:
                return self.failed(str(exc))
            if self.attempts < self.retry.attempts:
                delay = self.retry.delay(self.attempts, race=race)
                logger.info("gateway {}: {}; retrying in {:.2f}s (attempt {}/{})", self.gateway.url,
                            last_error, delay, self.attempts + 1, self.retry.attempts)
                self.pause(delay, race=race)
        return self.failed(f"gave up after {self.attempts} attempts: {last_error}")

    def pause(self, delay: float, *, race: bool) -> None:
        """Wait before the next attempt; for a gateway that did not answer, only until it answers again."""
        if race:
            self.sleep(delay)
            return
        until = time.monotonic() + delay
        while (left := until - time.monotonic()) > 0:
            self.sleep(min(left, self.retry.probe_every))
            try:
                self.gateway.head_config()
            except GatewayError:
                continue
            logger.info("gateway {}: answers again; retrying now", self.gateway.url)
            return

    def attempt(self) -> GatewayResult:
        """One read → plan → PUT → read back; `Raced` when another writer got in the way."""
        url = self.gateway.url
        with self.phases.timed("push-wait", url):
            live = self._read()
        with self.phases.timed("plan"):
            self.plan = plan(self.desired, live.view, self.desired.policy, self.owned)
        if self.plan.problems:
            return self.failed("this gateway cannot take the config", self.plan.problems)
        if not self.plan.changes:
            # After a PUT whose answer was lost (timeout, 5xx from a proxy), the content may be ours.
            status = SyncStatus.APPLIED if self.puts else SyncStatus.UNCHANGED
            return self.result(status, digest=live.digest, after=self.plan.after)
        step = first_step(self.desired.payload, live.view.body(CHECKED_KINDS), self.desired.policy, self.plan)
        if step is not None:
            live = self._first_step(step, live)
        digest = self._digest_for(live.digest)
        with self.phases.timed("serialize"):
            body = self.plan.body
        self.puts += 1
        self.bytes_sent += len(body)
        try:
            with self.phases.timed("push-wait", url):
                put = self.gateway.put_config(body, digest)
        except GatewayRejected as exc:
            if self.two_step and exc.stale is None and is_move_refusal(str(exc)):
                raise Raced("the gateway did not yet run the first step of a two-step apply") from None
            raise
        with self.phases.timed("read-back", url):
            self._read_back(put, digest)
        if put.on_every_worker:
            return self.result(SyncStatus.APPLIED, digest=digest, workers=True, after=self.plan.after)
        with self.phases.timed("read-back", url):
            ready = self._wait_ready()
        if ready is not None and not ready.ready:
            return self.failed(f"the config was accepted but not every worker serves it: {ready.message}")
        return self.result(SyncStatus.APPLIED, digest=digest, workers=True if ready is not None else None,
                           after=self.plan.after)

    def _read(self) -> Known:
        """What the gateway holds now: our last push when its digest says so (first attempt only),
        the GET this sync started early, or a GET now (a retry always reads afresh)."""
        known, self.known = self.known, None
        prefetched, self.prefetched = self.prefetched, None
        if known is not None:
            return known
        live = prefetched.result() if prefetched is not None else self.gateway.get_config()
        return Known(LiveView.of(live.body), live.digest)

    def _read_back(self, put: PutResult, digest: str) -> None:
        """Prove the gateway holds what was sent, or raise `Raced`.

        A 202 and then our digest on HEAD mean the last config the gateway accepted is this PUT
        (another writer's PUT carries its own digest), and a PUT is all or nothing. Without HEAD
        (3.13), or after a 204 (the gateway had our digest, so it did not look at the body), the
        config is read back whole and planned on again."""
        if not put.already_live and self.gateway.has_head is not False:
            head = self.gateway.head_config()
            if head is not None and head.digest is not None:
                if head.digest != digest:
                    raise Raced("the config changed right after the push")
                return
        back = self.gateway.get_config()
        if back.digest is not None and back.digest != digest:
            raise Raced("the config changed right after the push")
        if plan(self.desired, back.body, self.desired.policy).changes:
            raise Raced("the gateway kept its digest but not our content" if put.already_live else
                        "the config read back differs from the push")

    def _first_step(self, step: FirstStep, live: Known) -> Known:
        """Push the config that takes the moved parts off their old owners, then plan the desired
        config on what the gateway holds now (read afresh); its PUT follows at once. In between,
        a moved key authenticates no one and a moved global-rule plugin runs nowhere."""
        self.plan = plan(step.payload, live.view, self.desired.policy)  # a refusal: about what was sent
        logger.info("gateway {}: two-step apply: {}", self.gateway.url, "; ".join(map(str, step.moves)))
        self.puts += 1
        self.bytes_sent += len(self.plan.body)
        self.gateway.put_config(self.plan.body, self._digest_for(live.digest))
        self.two_step = True
        self.pruned_first = self.plan.pruned
        self._wait_ready()  # where /status/ready is configured: every worker runs the first step
        back = self.gateway.get_config()
        self.plan = plan(self.desired, back.body, self.desired.policy)
        return Known(LiveView.of(back.body), back.digest)

    def refused(self, exc: GatewayRejected) -> GatewayResult:
        """A PUT the gateway refused (all or nothing: it changed nothing), with every item error.

        The PUT names one error (3.17+: without its index); the validate endpoint (3.15+) names
        them all, per item. It is asked only now: validating every push first would double the
        gateway's work on every sync for the rare one it refuses.
        """
        items, error = exc.items, f"the gateway rejected the config: {exc}"
        if self.plan is not None and len(self.plan.body) <= VALIDATE_LIMIT:
            try:
                checked = self.gateway.validate(self.plan.body)
            except GatewayError as validate_error:
                logger.debug("gateway {}: validate after a refused PUT: {}", self.gateway.url, validate_error)
            else:
                if checked.items:
                    items = checked.items
        return self.failed(error, item_problems(items, self.desired.payload, self.source_map))

    def _digest_for(self, live_digest: str | None) -> str:
        """The plan's digest, unless the gateway already carries it while holding other content.

        APISIX answers 204 to a known digest without looking at the body, so a digest
        that cannot be right any more gets a suffix that makes the push go through.
        """
        assert self.plan is not None
        if live_digest != self.plan.digest:
            return self.plan.digest
        return f"{self.plan.digest}-{int(time.time() * 1000)}"

    def _wait_ready(self) -> ReadyResult | None:
        """Poll ``/status/ready`` (when configured) until every worker serves the config, or time out."""
        deadline = time.monotonic() + self.gateway.endpoint.timeout
        while True:
            ready = self.gateway.ready()
            if ready is None or ready.ready or time.monotonic() >= deadline:
                return ready
            self.sleep(0.1)


def push(gateway: Gateway, desired: Mapping[str, Sequence[Any]] | Desired, policy: Policy = MANAGE_ALL, *,
         source_map: ProblemMapper | None = None, retry: RetryPolicy = DEFAULT_RETRY,
         live: Future[LiveConfig] | None = None, sleep: Callable[[float], None] = time.sleep,
         known: Known | None = None, phases: Phases | None = None,
         owned: Mapping[str, Collection[str]] | None = None) -> GatewayResult:
    """Make one gateway hold `desired` for every kind `policy` manages; logged, never raises.

    `live`: a GET of the gateway's config this sync started earlier, so that it overlaps the fetch
    and render; the first attempt plans on it, a retry reads afresh."""
    try:
        result = GatewayPush(gateway, desired, policy, source_map, retry, live, sleep, known, phases,
                             owned).run()
    except Exception as exc:  # a bug must not take other gateways down
        logger.exception("gateway {}: sync crashed", gateway.url)
        return GatewayResult(gateway.url, SyncStatus.FAILED, error=redact(f"{type(exc).__name__}: {exc}"))
    log = logger.info if result.ok else logger.error
    log("gateway {}: {}", result.url, result.summary().split(": ", 1)[1])
    for problem in result.problems:
        logger.error("{}", problem)
    return result


def sync_gateway(endpoint: Endpoint, desired: Mapping[str, Sequence[Any]], policy: Policy = MANAGE_ALL,
                 **options: Any) -> GatewayResult:
    """`push` to a gateway reached once (a one-shot command, a test): its own short-lived client."""
    with Gateway(endpoint) as gateway:
        return push(gateway, desired, policy, **options)


@dataclass(frozen=True)
class GatewayDiff:
    """What a sync would do to one gateway, from its live config; `error` when it could not be read."""

    url: str
    plan: Plan | None = None
    live: dict[str, Any] = field(default_factory=dict)
    changes: tuple[ItemChange, ...] = ()
    error: str | None = None
    first_step: FirstStep | None = None  # the moves that would take two pushes


def diff_gateway(gateway: Gateway, desired: Mapping[str, Sequence[Any]], policy: Policy = MANAGE_ALL,
                 owned: Mapping[str, Collection[str]] | None = None) -> GatewayDiff:
    """GET the live config and plan against it, without pushing anything. `owned`: what the agent
    pushed there (its state dir), which tells its own items from out-of-band ones."""
    try:
        live = gateway.get_config()
    except GatewayError as exc:
        return GatewayDiff(gateway.url, error=str(exc))
    the_plan = plan(desired, live.body, policy, owned)
    step = first_step(desired, live.body, policy, the_plan) if the_plan.changes else None
    return GatewayDiff(gateway.url, the_plan, live.body, tuple(item_changes(desired, live.body, the_plan)),
                       first_step=step)


def policy_from_settings(settings: Settings) -> Policy:
    return Policy(frozenset(settings.unmanaged))


def guard_policy_from_settings(settings: Settings, allowed: frozenset[str] = frozenset(), *,
                               by_flag: bool = False) -> GuardPolicy:
    """The settings' deletion guard, plus the kinds this commit (its trailers) or run may shrink freely."""
    return GuardPolicy(settings.guard, settings.max_delete, settings.max_delete_count,
                       dict(settings.max_delete_kinds), allowed | frozenset(settings.allow_delete), by_flag)
