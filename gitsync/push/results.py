"""What a push did to one gateway, as plain data: the push's status, the health checks' verdict, the
gateway as the push left it. Shared with the agent, its outcomes and its records (no I/O here)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from enum import StrEnum
from typing import Any

from gitsync.problems import Problem
from gitsync.push.guard import GuardVerdict
from gitsync.push.plan import LiveView, Plan


class SyncStatus(StrEnum):
    APPLIED = "applied"  # a PUT made the gateway hold the desired config
    UNCHANGED = "unchanged"  # it already did: no PUT
    FAILED = "failed"


@dataclass(frozen=True)
class Known:
    """A gateway's config as a plan needs it, and the digest it carries."""

    view: LiveView
    digest: str | None


@dataclass(frozen=True)
class CheckResult:
    """One check's verdict on one gateway: what it got on its last attempt."""

    name: str
    location: str  # file:line of the check
    passed: bool
    attempts: int
    status: int | None = None
    body: str = ""  # the first BODY_SHOWN bytes of the last answer, redacted
    why: str = ""

    def describe(self) -> str:
        """``checks.yaml:3:5: check api-health failed after 4 attempts: status 502, …; body: …``."""
        got = f"; body: {self.body!r}" if self.body else ""
        return f"{self.location}: check {self.name} failed after {self.attempts} attempt(s): {self.why}{got}"


@dataclass(frozen=True)
class ChecksVerdict:
    """Every check's result on one gateway."""

    results: tuple[CheckResult, ...] = ()

    @property
    def failed(self) -> tuple[CheckResult, ...]:
        return tuple(r for r in self.results if not r.passed)

    @property
    def ok(self) -> bool:
        return not self.failed

    def to_dict(self) -> dict[str, Any]:
        """The status file's ``checks`` entry."""
        return {"passed": len(self.results) - len(self.failed), "failed": [r.describe() for r in self.failed]}


@dataclass(frozen=True)
class GatewayResult:
    """What one sync did to one gateway."""

    url: str  # without credentials
    status: SyncStatus
    versions: dict[str, int | float] = field(default_factory=dict)  # as sent (or live, when unchanged)
    digest: str | None = None
    counts: dict[str, int] = field(default_factory=dict)  # items per kind after the sync
    pruned: dict[str, tuple[str, ...]] = field(default_factory=dict)  # out-of-band items dropped
    problems: tuple[Problem, ...] = ()
    error: str | None = None
    attempts: int = 0
    puts: int = 0
    bytes_sent: int = 0
    duration: float = 0.0
    two_step: bool = False  # a first push moved keys or plugins off their live owners (gitsync.push.moves)
    plan: Plan | None = field(default=None, repr=False, compare=False)
    #: After a PUT: True when the gateway confirmed every worker applies it (3.19's ?wait, or
    #: /status/ready); None when it only accepted it (nothing asked could tell).
    on_every_worker: bool | None = None
    guard: GuardVerdict | None = None  # the deletion guard's verdict, when it refused the push
    checks: ChecksVerdict | None = None  # the repo's health checks on this gateway after the push
    rollback: GatewayResult | None = None  # the last good commit given back after a failed check
    #: The gateway after this sync, as a plan sees it (a later sync plans on it when the gateway's
    #: digest is still ours); None when it is not known.
    after: LiveView | None = field(default=None, repr=False, compare=False)

    @property
    def ok(self) -> bool:
        return self.status is not SyncStatus.FAILED

    @property
    def unhealthy(self) -> bool:
        """The push went through but a health check failed on this gateway afterwards."""
        return self.checks is not None and not self.checks.ok

    @property
    def refused(self) -> bool:
        """The gateway refused the config itself (the commit is bad), not just failed to answer."""
        return self.status is SyncStatus.FAILED and bool(self.problems)

    @property
    def unreachable(self) -> bool:
        """Failed for the gateway's sake (no answer, 5xx, auth), not the config's: worth a backoff."""
        return self.status is SyncStatus.FAILED and not self.problems and self.guard is None

    def to_dict(self) -> dict[str, Any]:
        """Plain data for status files and JSON output (no plan, problems as text)."""
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("plan", "after")}
        data["versions"], data["counts"] = dict(self.versions), dict(self.counts)
        data["checks"] = self.checks.to_dict() if self.checks is not None else None
        data["guard"] = self.guard.problems if self.guard is not None else None
        data["rollback"] = self.rollback.summary() if self.rollback is not None else None
        data["status"] = str(self.status)
        data["problems"] = [str(p) for p in self.problems]
        data["pruned"] = {k: list(v) for k, v in self.pruned.items()}
        return data

    def summary(self) -> str:
        """One line for humans."""
        if self.status is SyncStatus.FAILED:
            return f"{self.url}: failed: {self.error or 'see problems'}"
        changed = [k.key for k in self.plan.kinds if k.status == "changed"] if self.plan else []
        text = f"{self.url}: {self.status}"
        if self.status is SyncStatus.APPLIED:
            steps = "; two-step apply" if self.two_step else ""
            text += f" ({', '.join(changed) or 'nothing'} changed{steps})"
            if self.puts:
                text += ", on every worker" if self.on_every_worker else ", accepted"
        for kind, ids in self.pruned.items():
            text += f"; pruned {len(ids)} out-of-band {kind}: {', '.join(ids)}"
        if self.checks is not None:
            text += f"; checks: {len(self.checks.results) - len(self.checks.failed)} passed"
            text += f", {len(self.checks.failed)} failed" if self.checks.failed else ""
        if self.rollback is not None:
            text += f"; rolled back: {self.rollback.status}"
        return text
