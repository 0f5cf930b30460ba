"""Where a sync's time goes: its phases, and how much of it was the gateways' rather than gitsync's;
and the clock the agent reads the time from (`Clock`).

A sync's wall time mixes gitsync's own work (asking git, reading and rendering the commit, planning,
serializing) with waiting for gateways to answer (the GET before a push, the PUT, the read-back).
Only the first grows with gitsync's code; operators and the benchmark want it apart. Each phase is
timed where it runs, on the sync's thread or a gateway's worker, into one `Phases` per sync; the
sync's outcome keeps what it recorded (`gitsync.agent.outcomes.PhaseTimes`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime

#: The phases, in the order a sync goes through them. ``probe`` (a gateway's HEAD the git check did
#: not overlap), ``push-wait`` and ``read-back`` are spent waiting for a gateway; the others are
#: gitsync's own work.
PHASES = ("check", "fetch", "probe", "read", "render", "plan", "serialize", "push-wait", "read-back")
GATEWAY_PHASES = frozenset({"probe", "push-wait", "read-back"})


class Phases:
    """Seconds per phase of one sync (per gateway for the gateway phases); thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.seconds: dict[str, float] = {}
        self.waited: dict[str, float] = {}  # gateway URL → seconds waiting for its answers

    @contextmanager
    def timed(self, phase: str, gateway: str | None = None) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.add(phase, time.perf_counter() - started, gateway)

    def add(self, phase: str, seconds: float, gateway: str | None = None) -> None:
        with self._lock:
            self.seconds[phase] = self.seconds.get(phase, 0.0) + seconds
            if phase in GATEWAY_PHASES and gateway is not None:
                self.waited[gateway] = self.waited.get(gateway, 0.0) + seconds

    def snapshot(self) -> Mapping[str, float]:
        """Seconds per phase so far, in the order of `PHASES`."""
        with self._lock:
            return {phase: self.seconds[phase] for phase in PHASES if phase in self.seconds}

    def waits(self) -> Mapping[str, float]:
        """Seconds each gateway kept the sync waiting so far (its ``probe``, ``push-wait``, ``read-back``)."""
        with self._lock:
            return dict(self.waited)


@dataclass(frozen=True)
class Clock:
    """Where the agent reads the time, one clock for all of it: `wall` (seconds since the epoch: what it
    records, shows and compares with other agents) and `monotonic` (what it measures and waits by).
    Handed to the agent, so a test can set the time instead of waiting for it."""

    wall: Callable[[], float] = time.time
    monotonic: Callable[[], float] = time.monotonic

    def now(self) -> datetime:
        """The wall time, as an aware datetime (UTC)."""
        return datetime.fromtimestamp(self.wall(), UTC)


SYSTEM_CLOCK = Clock()

__all__ = ["GATEWAY_PHASES", "PHASES", "SYSTEM_CLOCK", "Clock", "Phases"]
