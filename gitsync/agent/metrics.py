"""What the agent counts and measures (Prometheus), and whether it is ready (the readiness probe).

A module of its own so that a process that serves neither (``gitsync sync --once``) does not import
the HTTP listener, nor prometheus_client (`Metrics(recorded=False)`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any


class _Unrecorded:
    """A metric of a process that exports none: every update is taken and dropped."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def labels(self, *args: Any, **kwargs: Any) -> _Unrecorded:
        return self

    def inc(self, amount: float = 1) -> None:
        pass

    def set(self, value: float) -> None:
        pass

    def observe(self, value: float) -> None:
        pass

    def clear(self) -> None:
        pass


class Metrics:
    """Every metric the agent exports, in a registry of its own (no process-global state).

    `recorded=False`: a process that exports none (``gitsync sync --once``) records none either:
    each metric takes what it is given and keeps nothing, and prometheus_client is not imported."""

    def __init__(self, *, recorded: bool = True) -> None:
        self.recorded = recorded
        if recorded:
            from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
        else:
            CollectorRegistry = Counter = Gauge = Histogram = _Unrecorded
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.syncs = Counter("gitsync_syncs", "Syncs by result.", ["result"], registry=r)
        self.sync_duration = Histogram(
            "gitsync_sync_duration_seconds", "Duration of syncs that reached the gateways.",
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120), registry=r)
        self.sync_phase = Histogram(
            "gitsync_sync_phase_seconds", "Time of each phase of syncs that reached the gateways: check, "
            "fetch, read, render, plan, serialize, probe, push-wait, read-back (waiting for the gateway), "
            "and gitsync (the sync's time less its wait for the gateways).", ["phase"],
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30), registry=r)
        self.last_success = Gauge("gitsync_last_success_timestamp_seconds",
                                  "Unix time of the last successful sync.", registry=r)
        self.applied_commit = Gauge("gitsync_applied_commit_info", "The commit live on every gateway "
                                    "(value 1; the commit is a label).", ["commit"], registry=r)
        self.gateway_version = Gauge("gitsync_gateway_conf_version", "conf_version sent per gateway "
                                     "and kind.", ["gateway", "kind"], registry=r)
        self.gateway_up = Gauge("gitsync_gateway_in_sync", "1 when the gateway holds the last good "
                                "commit.", ["gateway"], registry=r)
        self.drift_heals = Counter("gitsync_drift_heals", "Gateways re-applied after drift.", ["gateway"],
                                   registry=r)
        self.drift_detected = Counter("gitsync_drift_detected", "Drift found by the watch.", ["gateway"],
                                      registry=r)
        self.writeback_failures = Counter("gitsync_writeback_failures", "Failed status or note pushes.",
                                          registry=r)
        self.webhooks = Counter("gitsync_webhook_requests", "Webhook requests by provider and result.",
                                ["provider", "result"], registry=r)
        self.check_failures = Counter("gitsync_check_failures", "Health checks that still failed after their "
                                      "retries, by check.", ["check"], registry=r)
        self.tip_refused = Gauge("gitsync_tip_refused", "1 while the remote's tip is a commit this agent "
                                 "refused (the last good commit stays live).", registry=r)
        self.left_out = Gauge("gitsync_left_out_items", "Items partial apply left out of the live commit "
                              "(partial = true): a broken item and what refers to it.", registry=r)
        self.fetch_failures = Counter("gitsync_fetch_failures", "Failed checks or fetches of the git "
                                      "remote.", registry=r)
        self.feedback_sent = Counter("gitsync_feedback_sent", "Commit statuses (channel forge) and "
                                     "notifications (channel notify) delivered.", ["channel"], registry=r)
        self.feedback_failures = Counter("gitsync_feedback_failures", "Commit statuses and notifications "
                                         "that failed an attempt (retried with backoff).", ["channel"],
                                         registry=r)
        self.feedback_dropped = Counter("gitsync_feedback_dropped", "Commit statuses and notifications given "
                                        "up: refused by the receiver, out of retries, or the queue full.",
                                        ["channel"], registry=r)
        self.fleet_status = Gauge("gitsync_fleet_status", "Per status ref the gate read (after_group), 1 in "
                                  "its state: counted (readable, and verified when status_signers is set), "
                                  "unreadable, or unverified.", ["agent", "state"], registry=r)
        self.refused_connections = Counter("gitsync_listener_refused_connections", "Connections answered "
                                           "503 because the listener served its maximum at once, or their "
                                           "address its share (beyond them only /healthz is answered).",
                                           registry=r)
        self.rejected_requests = Counter("gitsync_listener_rejected_requests", "Requests refused before any "
                                         "endpoint took them, by reason: malformed (400, 414, 431: too "
                                         "long, or more than 100 header lines), method (405).", ["reason"],
                                         registry=r)

        # What the gauges below were last set to: a poll sets the same values every time, and each
        # label lookup takes a lock; unchanged values are not set again.
        self._applied: str | None = None
        self._gateways: dict[str, tuple[tuple[tuple[str, int], ...], bool]] = {}

    def set_applied_commit(self, sha: str) -> None:
        if sha == self._applied:
            return
        self._applied = sha
        self.applied_commit.clear()
        self.applied_commit.labels(commit=sha).set(1)

    def set_gateway(self, url: str, versions: Mapping[str, int], in_sync: bool) -> None:
        """The versions sent to a gateway, per kind, and whether it holds the last good commit."""
        key = (tuple(versions.items()), in_sync)
        if self._gateways.get(url) == key:
            return
        self._gateways[url] = key
        for name, version in versions.items():
            self.gateway_version.labels(url, name.removesuffix("_conf_version")).set(version)
        self.gateway_up.labels(url).set(1 if in_sync else 0)

    def set_fleet(self, fleet: Iterable[Any]) -> None:
        """Each status ref's state (`gitsync.writeback.statusfile.FleetEntry`), labelled by the ref's agent
        (its last component: the same label whether the ref is in a group or not)."""
        self.fleet_status.clear()
        for entry in fleet:
            state = "counted" if entry.verified else "unreadable" if entry.status is None else "unverified"
            self.fleet_status.labels(entry.ref.rpartition("/")[2], state).set(1)

    def render(self) -> bytes:
        from prometheus_client import generate_latest

        return generate_latest(self.registry) if self.recorded else b""


@dataclass(frozen=True)
class Readiness:
    ready: bool
    reason: str


__all__ = ["Metrics", "Readiness"]
