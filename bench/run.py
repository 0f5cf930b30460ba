"""The benchmark runner: what a sync costs as the config grows, each scenario against its floor.

Every figure is a median of several repetitions, and every floor is measured in the same run
on the same machine, so the ratio means something on a noisy, shared host. See bench/README.md
for what each floor is and why.

Processes: the git remote is ``git daemon`` on 127.0.0.1; each gateway is the Admin API double
in a child process (bench/double.py); the agent runs in this process (scenarios 1–3) or as a
real ``gitsync`` subprocess (``run`` for 5–7, ``sync --once`` for 7). The floors' HTTP goes from
this process to a second double that receives exactly the same bodies.

``--gateway URL --floor-gateway URL --admin-key-file F`` measures against two gateways that are
already running (two real APISIX instances in API-driven standalone mode) instead of the doubles:
scenarios 1-4, 7 and 8, the ones that need nothing of a gateway but its Admin API; with their data
planes (``--proxy URL --floor-proxy URL``) also the daemon (6: webhook → served) and the refill (5:
a gateway that lost its config → served again), which then watch the data plane, not the Admin API.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import hmac
import json
import os
import platform
import re
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import dulwich
import httpx
from ruamel.yaml import YAML

from bench.double import DoubleProcess
from bench.generate import ROUTES_PER_FILE, add_commits, changed_route, make_history
from gitsync import log as gslog
from gitsync.agent.outcomes import SyncOutcome, Trigger
from gitsync.agent.sync import Agent, gc_paused
from gitsync.push.plan import plan
from gitsync.render import render
from gitsync.render.memo import ParseCache
from gitsync.settings import Settings, load
from gitsync.source.mirror import Source
from gitsync.source.transport import Remote
from testkit.git import GitDaemon, git
from testkit.processes import free_port, gitsync_env, stop_process, wait_for_port

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out"
ADMIN_KEY = "bench-admin-key"
WEBHOOK_SECRET = "bench-webhook-secret"
HISTORY = 20  # commits in each repo before the run
FETCH_BATCH = 50  # commits per incremental fetch (scenario 4)
REFILL_DEADLINE = 30.0  # seconds a restarted gateway is given to be refilled by the drift watch
DAEMON_SIZE = 1000  # routes of the webhook and daemon-memory scenarios (6, 7)
CONFIGS = "/apisix/admin/configs"
REFSPEC = "+refs/heads/main:refs/heads/main"
MB = 1024 * 1024
#: Scenario groups that need nothing of a gateway but its Admin API: these can run against gateways
#: given by URL (``--gateway``); refill and daemon restart the double and ask it when a PUT came, or,
#: given the gateways' data planes too (``--proxy``), watch those.
EXTERNAL_GROUPS = ("agent", "fetch", "memory", "once", "sources")
SERVED_REPS = 11  # syncs of the daemon watched on the data plane: the median is over ≥ 11
#: Seconds between two requests to a data plane waiting for a commit: each one is a request the
#: gateway's worker serves (and logs as a failed upstream); more often would slow what it measures.
PROBE_EVERY = 0.01
#: The Python double takes ~40 s to validate and store 50,000 routes (APISIX: well under a second).
BENCH_GATEWAY_TIMEOUT = 300

#: (title, target, how the target reads). Ratios are gitsync ÷ floor; "max" targets are absolute.
SCENARIOS: dict[str, tuple[str, str]] = {
    "cold_render": ("1 cold render", "render ÷ ruamel C loader ≤ 2×"),
    "change_applied": ("2 one-file change → applied", "÷ httpx GET+PUT ≤ 1.5× at 10,000"),
    "change_own": ("2 … gitsync's own time", "≤ 60 ms at 10,000"),
    "noop_poll": ("3 no-op poll", "÷ ref advertisement ≤ 1.2×"),
    "incremental_fetch": ("4 fetch of 50 commits", "÷ git fetch (no target)"),
    "restart_refill": ("5 restart → refilled", "÷ restart+GET+PUT (no target)"),
    "refill_own": ("5 … gitsync's own time", "(no target)"),
    "webhook_live": ("6 webhook → live p50", "p50 ≤ 300 ms"),
    "sync_once_rss": ("7 sync --once peak RSS", "≤ 150 MB at 10,000"),
    "sync_once_kept": ("8 sync --once, state kept", "(the process, gateway's wait included)"),
    "sync_once_own": ("8 … less the gateway's wait", "≤ 1.0 s at 10,000"),
    "sync_once_first": ("8 sync --once, first run", "÷ clone --bare + PUT ≤ 2×"),
    "daemon_rss": ("7 daemon RSS, 100 syncs", "no growth"),
    "webhook_served": ("6 webhook → served", "÷ bare PUT → served ≤ 1.15×"),
    "webhook_own": ("6 … gitsync's own time", "≤ 40 ms at 10,000"),
    "refill_served": ("5 lost config → back", "÷ lose + GET+PUT (no target)"),
    "refill_served_own": ("5 … gitsync's own time", "(no target)"),
    "sources_change": ("9 one-file change, 10 sources", "÷ the same in one repo (no target)"),
    "sources_own": ("9 … gitsync's own time", "÷ the same in one repo (no target)"),
    "sources_rest": ("9 … less the git contacts", "÷ the same in one repo ≤ 1.25×"),
}
#: The scenarios measured on gateways' data planes (``--proxy``); the others where there are none.
SERVED = ("webhook_served", "webhook_own", "refill_served", "refill_served_own")
ON_DOUBLES = ("restart_refill", "refill_own", "webhook_live", "daemon_rss")
SOURCES = 10  # scenario 9: the repos (one team's each) one gateway's config is split into


@dataclass
class Result:
    """One scenario at one size: gitsync's median, the floor's median, and the target."""

    scenario: str
    routes: int
    value: float
    unit: str  # "s" or "MB"
    floor: float | None = None
    target: float | None = None
    target_kind: str = "ratio"  # "ratio": value/floor ≤ target; "max": value ≤ target
    samples: list[float] = field(default_factory=list)
    floor_samples: list[float] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def ratio(self) -> float | None:
        """The median of the per-repetition ratios: each run sits next to its floor's run, so a
        burst of load from elsewhere mostly hits both sides of a pair. (Ratio of medians when the
        runs are not paired.)"""
        if not self.floor:
            return None
        if len(self.samples) == len(self.floor_samples) and all(self.floor_samples):
            pairs = zip(self.samples, self.floor_samples, strict=True)
            return median([ours / floor for ours, floor in pairs])
        return self.value / self.floor

    @property
    def met(self) -> bool | None:
        if self.target is None:
            return None
        measured = self.ratio if self.target_kind == "ratio" else self.value
        return measured is not None and measured <= self.target

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ratio": _round(self.ratio), "met": self.met}


def _round(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(value, digits)


def median(samples: Sequence[float]) -> float:
    return statistics.median(samples)


def timed(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


# ---------------------------------------------------------------------------------------------------
# The world of one size: a served repo, two gateways, settings


def process_env() -> dict[str, str]:
    """The environment of a gitsync process: `gitsync_env` (this tree, its bytecode cached as an
    installed package has it), with the bench's gateway timeout."""
    return gitsync_env({"GITSYNC_GATEWAY_TIMEOUT": str(BENCH_GATEWAY_TIMEOUT)})


class Fixture:
    """A repo of `routes` routes served by git daemon, with a counter of the commits added since."""

    def __init__(self, routes: int, work: Path, daemon: GitDaemon, admin_key: str = ADMIN_KEY,
                 routes_per_file: int = ROUTES_PER_FILE) -> None:
        self.routes = routes
        self.work = work
        self.repo = daemon.base_path / f"config-{routes}.git"
        make_history(self.repo, routes, HISTORY, routes_per_file=routes_per_file)
        self.revision = HISTORY
        self.url = daemon.url(self.repo.name)
        self.port = daemon.port
        self.key_file = work / "admin-key"
        self.admin_key = admin_key
        self.key_file.write_text(admin_key)
        self.key_file.chmod(0o600)
        self.webhook_file = work / "webhook-secret"
        self.webhook_file.write_text(WEBHOOK_SECRET)

    def commit(self, count: int = 1) -> str:
        """`count` new commits on the remote, each changing one route file; the new tip."""
        add_commits(self.repo, self.routes, count, self.revision)
        self.revision += count
        return git("rev-parse", "refs/heads/main", cwd=self.repo)

    def probe(self) -> tuple[str, int]:
        """The request that shows the remote's tip served, and the limit it answers with then."""
        return changed_route(self.routes, self.revision - 1)

    def settings(self, gateway: str, state_dir: Path) -> Settings:
        return load({"repo": self.url, "gateways": [gateway], "admin_key_file": str(self.key_file),
                     "state_dir": str(state_dir), "writeback": "off",
                     "gateway_timeout": BENCH_GATEWAY_TIMEOUT},
                    env={}, config=os.devnull)

    def gitsync_args(self, gateway: str, state_dir: Path) -> list[str]:
        return ["--repo", self.url, "--gateway", gateway, "--admin-key-file", str(self.key_file),
                "--state-dir", str(state_dir), "--no-writeback"]


@dataclass(frozen=True)
class ExternalGateway:
    """A gateway the bench did not start (``--gateway``): only its Admin API's URL is known."""

    url: str


Gateway = DoubleProcess | ExternalGateway


class DataPlane:
    """A gateway's data plane (its proxy port), asked when it serves a commit: the route the commit
    changed answers with the limit it set (APISIX: ``X-RateLimit-Limit``; the double's data plane
    answers with the matched route itself)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.client = httpx.Client(base_url=url, timeout=10)

    def serves(self, path: str, limit: int) -> bool:
        try:
            response = self.client.get(path)
        except httpx.HTTPError:
            return False
        header = response.headers.get("x-ratelimit-limit")
        if header is not None:
            return header == str(limit)
        if response.headers.get("content-type", "").startswith("application/json"):
            with contextlib.suppress(ValueError, AttributeError, TypeError):
                return response.json()["route"]["plugins"]["limit-count"]["count"] == limit
        return False

    def wait_served(self, path: str, limit: int, timeout: float = 60.0) -> float | None:
        """When (monotonic) the data plane first served `limit` on `path`; None after `timeout`."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.serves(path, limit):
                return time.monotonic()
            time.sleep(PROBE_EVERY)
        return None

    def wait_dropped(self, path: str, limit: int, timeout: float = 60.0) -> None:
        """Wait until the data plane no longer serves `limit` on `path` (an emptied gateway's workers
        apply the empty config a poll later: a probe before that sees the old one)."""
        deadline = time.monotonic() + timeout
        while self.serves(path, limit):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.url}{path} still serves limit {limit} after {timeout:g} s")
            time.sleep(PROBE_EVERY)

    def close(self) -> None:
        self.client.close()


@dataclass
class Planes:
    """With ``--proxy``: the two gateways' data planes, and how each loses its config for the refill
    (a user's restart command; None: a PUT of an empty config)."""

    ours: DataPlane
    floor: DataPlane
    restart_ours: str | None = None
    restart_floor: str | None = None


class FloorClient:
    """The floors' plain HTTP client: one keep-alive httpx connection to a gateway."""

    def __init__(self, url: str, admin_key: str = ADMIN_KEY) -> None:
        self.client = httpx.Client(base_url=url, headers={"X-API-KEY": admin_key}, timeout=120)

    def get_put(self, body: bytes, digest: str) -> None:
        """GET the live config (read, parsed: a client needs the live versions), PUT `body`.

        Without cyclic GC, as gitsync's syncs run: this process also holds the in-process agent's
        data, which a full collection would walk, billing the floor for gitsync's heap."""
        with gc_paused():
            self.client.get(CONFIGS).raise_for_status().json()
            response = self.client.put(CONFIGS, content=body,
                                       headers={"Content-Type": "application/json", "X-Digest": digest})
        if response.status_code != 202:
            raise RuntimeError(f"floor PUT answered {response.status_code}: {response.text[:200]}")

    def live(self) -> dict[str, Any]:
        return self.client.get(CONFIGS).raise_for_status().json()

    def put_raw(self, body: bytes) -> str:
        """A PUT of `body` as it is, with a digest of its own (a first sync's floor); that digest."""
        digest = f"{hashlib.sha256(body).hexdigest()}-{time.time_ns()}"  # never a 204: a real apply
        response = self.client.put(CONFIGS, content=body, headers={"Content-Type": "application/json",
                                                                   "X-Digest": digest})
        if response.status_code != 202:
            raise RuntimeError(f"floor PUT answered {response.status_code}: {response.text[:200]}")
        return digest

    def wait_digest_not(self, digest: str, timeout: float = 60.0) -> float | None:
        """When (monotonic) the gateway's HEAD first showed a digest other than `digest` (a PUT since)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError):
                if self.client.head(CONFIGS).headers.get("x-digest") not in (None, digest):
                    return time.monotonic()
            time.sleep(PROBE_EVERY)
        return None

    def put_timed(self, body: bytes, digest: str) -> float:
        """A bare PUT (no GET first); when its 202 came (monotonic)."""
        response = self.client.put(CONFIGS, content=body, headers={"Content-Type": "application/json",
                                                                   "X-Digest": digest})
        if response.status_code != 202:
            raise RuntimeError(f"floor PUT answered {response.status_code}: {response.text[:200]}")
        return time.monotonic()

    def close(self) -> None:
        self.client.close()


class FloorTwin:
    """The floor's side of a served scenario: each commit of the fixture rendered in this process
    (its own mirror and parse cache) and planned on what the floor's gateway holds, so that the floor
    sends the body gitsync would, with no GET in its timing."""

    def __init__(self, fx: Fixture) -> None:
        self.source = Source(Remote.of(fx.url), state_dir=fx.work / "twin-state")
        self.cache = ParseCache()

    def payload(self) -> dict[str, Any]:
        tip = self.source.fetch()
        return dict(render(self.source.read(tip).files, memo=self.cache).payload)

    def body(self, floor: FloorClient) -> tuple[bytes, str]:
        """The tip's body and digest planned on the floor gateway's live config (read now, untimed)."""
        planned = plan(self.payload(), floor.live())
        return planned.body, f"{planned.digest}-{time.time_ns()}"


def _pkt(data: bytes) -> bytes:
    return b"%04x%s" % (len(data) + 4, data)


def _read_to_flush(conn: socket.socket) -> bytes:
    """Read pkt-lines up to a flush-pkt (bytes end with ``0000``, good enough for these answers)."""
    data = b""
    while not data.endswith(b"0000"):
        chunk = conn.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def ref_advertisement(port: int, path: str) -> bytes:
    """The floor of a poll: the remote's ref advertisement alone (git protocol v0, one round trip),
    over a raw socket, nothing parsed."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as conn:
        conn.sendall(_pkt(b"git-upload-pack /%s\0host=127.0.0.1:%d\0" % (path.encode(), port)))
        data = _read_to_flush(conn)
        conn.sendall(b"0000")  # no wants: the server ends the conversation
    return data


def ls_refs_v2(port: int, path: str, ref: bytes = b"refs/heads/main") -> bytes:
    """For reference: the same question in protocol v2 (capabilities, then ``ls-refs`` with a
    ref-prefix), as gitsync asks it: two round trips, and only the asked ref comes back."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as conn:
        conn.sendall(_pkt(b"git-upload-pack /%s\0host=127.0.0.1:%d\0\0version=2\0" % (path.encode(), port)))
        _read_to_flush(conn)
        conn.sendall(_pkt(b"command=ls-refs\n") + b"0001" + _pkt(b"ref-prefix " + ref + b"\n") + b"0000")
        return _read_to_flush(conn)


def add_tree_and_out(parser: argparse.ArgumentParser) -> None:
    """``--tree`` (the checkout whose gitsync a `DaemonProcess` runs) and ``--out``, for the scripts
    that time `gitsync run`."""
    parser.add_argument("--tree", type=Path, default=ROOT, help="the checkout whose gitsync runs (default: "
                        "this one)")
    parser.add_argument("--out", type=Path, default=OUT, help="where the JSON goes (default bench/out)")


class DaemonProcess:
    """``gitsync run`` as a real subprocess; its metrics and memory read from outside."""

    def __init__(self, fixture: Fixture, gateway: str, state_dir: Path, *, drift_interval: float,
                 webhook: bool, extra: Sequence[str] = (), tree: Path = ROOT,
                 nofile: int | None = None) -> None:
        """`tree`: the checkout whose gitsync runs (its code only: the process's working directory and
        PYTHONPATH; bytecode goes to the usual cache outside it). `nofile`: the process's open-files
        limit, soft and hard (a container's `ulimit -n`)."""
        self.port = free_port()
        args = [sys.executable, "-m", "gitsync", "run", *fixture.gitsync_args(gateway, state_dir),
                "--listen", f"127.0.0.1:{self.port}", "--interval", "3600", "--jitter", "0",
                "--drift-interval", str(drift_interval), *extra]
        if webhook:
            args += ["--webhook-secret-file", str(fixture.webhook_file)]
        self.log = (fixture.work / f"daemon-{self.port}.log").open("w")
        env = process_env()
        env["PYTHONPATH"] = str(tree)
        def limit() -> None:
            if nofile is not None:
                resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

        self.proc = subprocess.Popen(args, cwd=tree, env=env, stdout=subprocess.DEVNULL, stderr=self.log,
                                     start_new_session=True, preexec_fn=limit)
        self.http = httpx.Client(base_url=f"http://127.0.0.1:{self.port}", timeout=30)
        if not wait_for_port(self.port, self.proc, timeout=30):
            self.stop()
            raise RuntimeError(f"gitsync run did not start; see {self.log.name}")

    def syncs(self) -> dict[str, float]:
        """gitsync_syncs_total by result, from /metrics."""
        text = self.http.get("/metrics").text
        return {m[1]: float(m[2]) for m in re.finditer(r'^gitsync_syncs_total\{result="(\w+)"\} (\S+)$',
                                                       text, re.M)}

    def own_seconds(self) -> tuple[float, float]:
        """(sum, count) of gitsync_sync_phase_seconds{phase="gitsync"}: the daemon's own time in the
        syncs that reached a gateway (their wall time less the wait for the gateway)."""
        text = self.http.get("/metrics").text
        found = {m[1]: float(m[2]) for m in re.finditer(
            r'^gitsync_sync_phase_seconds_(sum|count)\{phase="gitsync"\} (\S+)$', text, re.M)}
        return found.get("sum", 0.0), found.get("count", 0.0)

    def phase_sums(self) -> dict[str, float]:
        """Seconds so far per phase (gitsync_sync_phase_seconds_sum, "gitsync" its own time) and in all
        ("wall": gitsync_sync_duration_seconds_sum), over the syncs that reached a gateway."""
        text = self.http.get("/metrics").text
        sums = {m[1]: float(m[2]) for m in re.finditer(
            r'^gitsync_sync_phase_seconds_sum\{phase="([\w-]+)"\} (\S+)$', text, re.M)}
        wall = re.search(r"^gitsync_sync_duration_seconds_sum (\S+)$", text, re.M)
        return {**sums, "wall": float(wall[1]) if wall else 0.0}

    def wait_syncs(self, result: str, count: float, timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        while self.syncs().get(result, 0) < count:
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError(f"the daemon did not reach {count:g} {result} syncs; see {self.log.name}")
            time.sleep(0.01)

    def wait_ready(self, timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        while self.http.get("/readyz").status_code != 200:
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError(f"the daemon never became ready; see {self.log.name}")
            time.sleep(0.05)

    def webhook(self) -> None:
        body = b'{"ref": "refs/heads/main"}'
        signature = hmac.new(WEBHOOK_SECRET.encode(), body, hashlib.sha256).hexdigest()
        response = self.http.post("/hooks/generic", content=body,
                                  headers={"X-Gitsync-Signature-256": f"sha256={signature}"})
        if response.status_code != 202:
            raise RuntimeError(f"webhook answered {response.status_code}")

    def rss_mb(self) -> float:
        status = Path(f"/proc/{self.proc.pid}/status").read_text()
        match = re.search(r"^VmRSS:\s+(\d+) kB", status, re.M)
        assert match is not None
        return int(match[1]) / 1024

    def stop(self) -> None:
        self.http.close()
        stop_process(self.proc, grace=30)
        self.log.close()

    def __enter__(self) -> DaemonProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


TIME = "/usr/bin/time"


def peak_rss_mb(args: list[str], log: Path) -> tuple[float, int]:
    """Run a process to its end under GNU time; its peak RSS (MB) and exit status.

    Not this process's wait4(): a child spawned straight from here starts its maximum-RSS
    account at this (big) process's, which Linux carries over the exec. time(1) is small.
    """
    report = log.with_suffix(".maxrss")
    with log.open("w") as err:
        status = subprocess.run([TIME, "-f", "%M", "-o", str(report), *args], env=process_env(),
                                stdout=subprocess.DEVNULL, stderr=err, check=False).returncode
    return int(report.read_text().split()[-1]) / 1024, status


# ---------------------------------------------------------------------------------------------------
# Scenarios


@dataclass
class Reps:
    """Repetitions for one size."""

    reps: int  # of the slow scenarios (1, 2, 4, 5)
    fast_reps: int  # of the no-op poll
    rss_reps: int
    webhook_commits: int
    daemon_syncs: int
    served_reps: int = SERVED_REPS  # of the daemon watched on a data plane


def in_process(fx: Fixture, gw: Gateway, floor: FloorClient, reps: Reps) -> list[Result]:
    """Scenarios 1–3 with one `Agent` in this process, as the daemon holds it between syncs."""
    agent = Agent(fx.settings(gw.url, fx.work / "agent-state"))
    try:
        first = agent.sync_once({Trigger.CLI})
        if first.result != "applied":
            raise RuntimeError(f"first sync: {first.result}: {first.problems[:3]}")
        result = first.gateways[0]
        floor.get_put(result.plan.body, result.digest)  # the floor gateway starts where gw is
        return [cold_render(fx, agent, reps), *change_applied(fx, agent, floor, reps),
                noop_poll(fx, agent, reps)]
    finally:
        agent.close()


def cold_render(fx: Fixture, agent: Agent, reps: Reps) -> Result:
    """render() of every file with an empty parse cache vs ruamel's C safe loader over the same bytes."""
    (repo,) = agent.repos.all
    tip = repo.source.local_sha()
    assert tip is not None
    files = repo.source.read(tip).files
    yaml = YAML(typ="safe", pure=False)
    if "clib" not in yaml.Parser.__module__:
        raise RuntimeError("ruamel.yaml's C loader is not installed: the floor would be wrong")

    def parse_only() -> None:
        for data in files.values():
            list(yaml.load_all(data))

    ours, floors = [], []
    for _ in range(reps.reps):
        floors.append(timed(parse_only))
        ours.append(timed(lambda: render(files, repo.options, ParseCache())))
    return Result("cold_render", fx.routes, median(ours), "s", median(floors), 2.0, samples=ours,
                  floor_samples=floors, details={"files": len(files),
                                                 "yaml_bytes": sum(len(d) for d in files.values())})


def change_applied(fx: Fixture, agent: Agent, floor: FloorClient, reps: Reps) -> list[Result]:
    """A commit changing one route file, synced (check, fetch, render, plan, PUT, read-back) vs the
    same PUT body sent by plain httpx (GET + PUT) to a second gateway in the same state; and gitsync's
    own time in that sync (its wall time less its wait for the gateway), against an absolute target."""
    ours, floors, own, waited = [], [], [], []
    body_bytes = 0
    phases: dict[str, list[float]] = {}
    for _ in range(reps.reps):
        fx.commit()
        seconds, outcome = applied_sync(agent)
        ours.append(seconds)
        own.append(outcome.phases.agent_time(outcome.duration))
        waited.append(outcome.duration - own[-1])
        for phase, seconds in outcome.phases.snapshot().items():
            phases.setdefault(phase, []).append(seconds)
        result = outcome.gateways[0]
        assert result.plan is not None
        body_bytes = len(result.plan.body)
        floors.append(timed(lambda r=result: floor.get_put(r.plan.body, r.digest)))
    medians = {phase: round(median(values), 5) for phase, values in phases.items()}
    return [Result("change_applied", fx.routes, median(ours), "s", median(floors),
                   1.5 if fx.routes >= 10_000 else None, samples=ours, floor_samples=floors,
                   details={"put_bytes": body_bytes}),
            Result("change_own", fx.routes, median(own), "s", None, 0.060 if fx.routes >= 10_000 else None,
                   "max", samples=own, details={"gateway_wait_s": round(median(waited), 5),
                                               "phases_s": medians})]


def applied_sync(agent: Agent) -> tuple[float, SyncOutcome]:
    """One sync of a one-file change, timed; it must apply."""
    started = time.perf_counter()
    outcome = agent.sync_once({Trigger.CLI})
    seconds = time.perf_counter() - started
    if outcome.result != "applied":
        raise RuntimeError(f"one-file change: {outcome.result}: {outcome.problems[:3]}")
    return seconds, outcome


def noop_poll(fx: Fixture, agent: Agent, reps: Reps) -> Result:
    """The daemon's poll (`Agent.sync_once({Trigger.POLL})`) with nothing new vs the ref advertisement alone;
    protocol v2's ``ls-refs`` and `git ls-remote` for reference. Before each poll the drift watch
    runs, as the daemon's does every `drift_interval` (its HEAD, timed apart): a poll does not ask a
    gateway the watch has just seen holding our push."""
    (repo,) = agent.repos.all
    tip = repo.source.local_sha()
    assert tip is not None
    path = fx.repo.name
    ours, floors, v2, ls_remote, watch = [], [], [], [], []
    for _ in range(reps.fast_reps):
        started = time.perf_counter()
        if agent.drift_suspects():
            raise RuntimeError("no-op poll: the drift watch suspects a gateway")
        watch.append(time.perf_counter() - started)
        floors.append(timed(lambda: ref_advertisement(fx.port, path)))
        started = time.perf_counter()
        outcome = agent.sync_once({Trigger.POLL})
        ours.append(time.perf_counter() - started)
        if outcome.result != "noop":
            raise RuntimeError(f"no-op poll: {outcome.result}")
        v2.append(timed(lambda: ls_refs_v2(fx.port, path)))
        ls_remote.append(timed(lambda: git("ls-remote", fx.url, "refs/heads/main")))
    answers = (ref_advertisement(fx.port, path), ls_refs_v2(fx.port, path))
    if not all(tip.encode() in answer for answer in answers):
        raise RuntimeError("an answer does not carry the tip: the floor is wrong")
    return Result("noop_poll", fx.routes, median(ours), "s", median(floors), 1.2, samples=ours,
                  floor_samples=floors,
                  details={"ls_refs_v2_s": median(v2), "git_ls_remote_s": median(ls_remote),
                           "drift_watch_s": median(watch)})


def incremental_fetch(fx: Fixture, reps: Reps) -> Result:
    """gitsync's Source.fetch of 50 new commits vs `git fetch` of the same into a bare clone."""
    source = Source(Remote.of(fx.url), state_dir=fx.work / "fetch-state")
    cli = fx.work / "fetch-cli.git"
    first = timed(source.fetch)
    first_git = timed(lambda: git("clone", "--bare", "--quiet", fx.url, str(cli)))
    ours, floors = [], []
    for rep in range(reps.reps):
        tip = fx.commit(FETCH_BATCH)
        pair = [(ours, source.fetch), (floors, lambda: git("fetch", "--quiet", "origin", REFSPEC, cwd=cli))]
        for samples, action in pair if rep % 2 == 0 else reversed(pair):
            samples.append(timed(action))
        if not source.local_sha() == tip == git("rev-parse", "refs/heads/main", cwd=cli):
            raise RuntimeError("the two fetches did not reach the same tip")
    return Result("incremental_fetch", fx.routes, median(ours), "s", median(floors), samples=ours,
                  floor_samples=floors, details={"first_fetch_s": first, "git_clone_s": first_git})


def sync_once_rss(fx: Fixture, gw: Gateway, reps: Reps) -> Result:
    """Peak RSS of `gitsync sync --once` from an empty state dir (clone, render, push a change)."""
    samples = []
    for rep in range(reps.rss_reps):
        fx.commit()
        state = fx.work / f"once-{rep}"
        rss, status = peak_rss_mb([sys.executable, "-m", "gitsync", "sync", "--once",
                                   *fx.gitsync_args(gw.url, state)], fx.work / f"once-{rep}.log")
        if status != 0:
            raise RuntimeError(f"gitsync sync --once exited {status}; see {fx.work}/once-{rep}.log")
        samples.append(rss)
    imports, _ = peak_rss_mb([sys.executable, "-c",
                              "import gitsync.agent.sync, gitsync.cli.commands, gitsync.cli.parser"],
                             fx.work / "imports.log")
    return Result("sync_once_rss", fx.routes, median(samples), "MB", None,
                  150.0 if fx.routes >= 10_000 else None, "max", samples=samples,
                  details={"python_and_imports_mb": imports})


def sync_once_times(fx: Fixture, gw: Gateway, floor: FloorClient, reps: Reps) -> list[Result]:
    """`gitsync sync --once` as a process: with the state dir kept from the last run (the mirror, the
    parse cache: only what changed is fetched and parsed), one commit changing one route file; and
    from an empty state dir against `git clone --bare` + the same PUT by httpx."""
    state = fx.work / "once-kept"
    # -vv: the sync's debug line gives its phases and its own time (`Phases.describe`)
    args = [sys.executable, "-m", "gitsync", "sync", "--once", "-vv", *fx.gitsync_args(gw.url, state)]
    env = process_env()

    def once() -> tuple[float, float]:
        """The process's wall time, and the sync's wait on the gateway (from its phases line)."""
        started = time.perf_counter()
        done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=600)
        took = time.perf_counter() - started
        if done.returncode != 0:
            raise RuntimeError(f"gitsync sync --once exited {done.returncode}: {done.stderr[-2000:]}")
        own = re.search(r"gitsync's own ([0-9.]+) ms of ([0-9.]+) ms", done.stderr)
        if own is None:
            raise RuntimeError(f"no phases line in gitsync's log: {done.stderr[-2000:]}")
        return took, (float(own.group(2)) - float(own.group(1))) / 1000

    fx.commit()
    once()  # the state dir starts here
    runs = []
    for _ in range(reps.reps):
        fx.commit()
        runs.append(once())
    kept = [took for took, _ in runs]
    kept_own = [took - waited for took, waited in runs]
    first, floors = [], []
    for rep in range(reps.rss_reps):
        fx.commit()
        shutil.rmtree(state, ignore_errors=True)
        first.append(once()[0])
        clone = fx.work / f"clone-{rep}.git"
        ours = FloorClient(gw.url, fx.admin_key)  # gitsync's gateway holds the whole config, whatever ran
        try:
            body = json.dumps(ours.live()).encode()  # a body the size of the config
        finally:
            ours.close()
        started = time.perf_counter()
        git("clone", "--bare", "-q", fx.url, str(clone))
        floor.put_raw(body)
        floors.append(time.perf_counter() - started)
        shutil.rmtree(clone, ignore_errors=True)
    return [Result("sync_once_kept", fx.routes, median(kept), "s", None, None, samples=kept),
            Result("sync_once_own", fx.routes, median(kept_own), "s", None,
                   1.0 if fx.routes >= 10_000 else None, "max", samples=kept_own,
                   details={"gateway_wait_s": round(median([waited for _, waited in runs]), 5)}),
            Result("sync_once_first", fx.routes, median(first), "s", median(floors), 2.0, samples=first,
                   floor_samples=floors)]


def restart_refill(fx: Fixture, gw: DoubleProcess, fl: DoubleProcess, floor: FloorClient,
                   reps: Reps) -> list[Result]:
    """From the gateway's restart() to it holding the config again, healed by a running daemon's
    drift watch (drift_interval 0.1 s) vs restart() then GET + PUT of the full payload by httpx.

    A refill that does not come within REFILL_DEADLINE is reported (value = the deadline, and
    ``healed: false``), not waited for: the next poll would heal it, an interval later."""
    ours, floors, own = [], [], []
    healed = True
    source = Source(Remote.of(fx.url), state_dir=fx.work / "fetch-state")
    payload = render(source.read(source.fetch()).files).payload
    fl.restart()
    full = plan(payload, floor.live())  # what an emptied gateway needs: every kind at live + 1
    with DaemonProcess(fx, gw.url, fx.work / "refill-state", drift_interval=0.1, webhook=False) as daemon:
        daemon.wait_ready()
        before = daemon.own_seconds()
        for rep in range(reps.reps):
            started = gw.restart()
            done = gw.wait_put(REFILL_DEADLINE)
            if done is None:
                healed = False
                ours.append(REFILL_DEADLINE)
                break
            if done[1] != fx.routes:
                raise RuntimeError(f"refilled with {done[1]} routes, not {fx.routes}")
            ours.append(done[0] - started)
            daemon.wait_syncs("healed", rep + 1)
            after = daemon.own_seconds()
            if after[1] > before[1]:
                own.append((after[0] - before[0]) / (after[1] - before[1]))
            before = after
            started = fl.restart()
            floor.get_put(full.body, full.digest)
            floors.append(time.monotonic() - started)
        rss = daemon.rss_mb()
    return [Result("restart_refill", fx.routes, median(ours), "s", median(floors), samples=ours,
                   floor_samples=floors, details={"drift_interval_s": 0.1, "put_bytes": len(full.body),
                                                  "healed": healed, "daemon_rss_mb": rss}),
            Result("refill_own", fx.routes, median(own) if own else 0.0, "s", None, samples=own,
                   details={"what": "the heal syncs' own time (gitsync_sync_phase_seconds{phase=gitsync})"})]


def webhook_and_memory(fx: Fixture, gw: DoubleProcess, reps: Reps) -> list[Result]:
    """Scenario 6 (webhook → the gateway accepts the new commit) and the daemon's memory over many
    syncs (scenario 7): every sync applies a new one-file commit, announced by a signed webhook."""
    latencies: list[float] = []
    rss: list[float] = []
    with DaemonProcess(fx, gw.url, fx.work / "webhook-state", drift_interval=10, webhook=True) as daemon:
        daemon.wait_ready()
        applied = daemon.syncs().get("applied", 0)
        for n in range(reps.daemon_syncs):
            fx.commit()
            gw.mark()
            started = time.monotonic()
            daemon.webhook()
            live = gw.wait_put()
            if live is None:
                raise RuntimeError(f"webhook: no PUT came; see {daemon.log.name}")
            daemon.wait_syncs("applied", applied + n + 1)
            if n < reps.webhook_commits:
                latencies.append(live[0] - started)
            rss.append(daemon.rss_mb())
    ordered = sorted(latencies)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    warm = rss[min(9, len(rss) - 1)]
    window = max(1, len(rss) // 10)  # RSS samples jitter by ~1 MB: compare medians of windows
    middle = len(rss) // 2
    half = median(rss[middle - window // 2:middle - window // 2 + window])
    growth = median(rss[-window:]) - half
    webhook = Result("webhook_live", fx.routes, median(latencies), "s", None, 0.3, "max", samples=latencies,
                     details={"p95_s": p95, "commits": len(latencies)})
    memory = Result("daemon_rss", fx.routes, rss[-1], "MB", None, None, "max", samples=rss,
                    details={"syncs": len(rss), "rss_after_10_mb": warm, "rss_at_half_mb": half,
                             "growth_second_half_mb": growth, "no_growth": growth <= max(2.0, 0.02 * half)})
    return [webhook, memory]


def _phase_deltas(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """Per phase, what one sync added; "unattributed": its wall time that no phase accounts for."""
    delta = {phase: after.get(phase, 0.0) - before.get(phase, 0.0) for phase in after}
    timed_phases = sum(seconds for phase, seconds in delta.items() if phase not in ("wall", "gitsync"))
    delta["unattributed"] = delta.get("wall", 0.0) - timed_phases
    return delta


def _served(plane: DataPlane, path: str, limit: int, started: float, what: str) -> float:
    at = plane.wait_served(path, limit)
    if at is None:
        raise RuntimeError(f"{what}: {plane.url}{path} never answered with limit {limit}")
    return at - started


def webhook_served(fx: Fixture, gw: Gateway, floor: FloorClient, planes: Planes, reps: Reps) -> list[Result]:
    """Scenario 6 on data planes: a signed webhook to a running `gitsync run` → its gateway's data plane
    serves the new commit, against a bare PUT of the same change to the floor's gateway → its data plane
    serves it; interleaved, the order alternating. The daemon's phases per sync from its /metrics."""
    ours, floors, accepted = [], [], []
    phases: dict[str, list[float]] = {}
    twin = FloorTwin(fx)
    body, digest = twin.body(floor)
    floor.put_timed(body, digest)  # the floor's gateway starts where gitsync's will be
    with DaemonProcess(fx, gw.url, fx.work / "served-state", drift_interval=10, webhook=True) as daemon:
        daemon.wait_ready()
        applied = daemon.syncs().get("applied", 0)
        for n in range(reps.served_reps):
            fx.commit()
            path, limit = fx.probe()
            body, digest = twin.body(floor)
            before = daemon.phase_sums()

            def gitsync_side(path: str = path, limit: int = limit) -> None:
                started = time.monotonic()
                daemon.webhook()
                ours.append(_served(planes.ours, path, limit, started, "webhook"))

            def floor_side(path: str = path, limit: int = limit, body: bytes = body, digest: str = digest,
                           ) -> None:
                # The data plane is probed from the start, during the PUT, as gitsync's is during its sync.
                started = time.monotonic()

                def send() -> None:
                    accepted.append(floor.put_timed(body, digest) - started)

                put = threading.Thread(target=send)
                put.start()
                floors.append(_served(planes.floor, path, limit, started, "floor PUT"))
                put.join()

            for side in (gitsync_side, floor_side) if n % 2 == 0 else (floor_side, gitsync_side):
                side()
            daemon.wait_syncs("applied", applied + n + 1)
            for phase, seconds in _phase_deltas(before, daemon.phase_sums()).items():
                phases.setdefault(phase, []).append(seconds)
    medians = {phase: round(median(values), 5) for phase, values in phases.items()}
    own = phases.get("gitsync", [])
    return [Result("webhook_served", fx.routes, median(ours), "s", median(floors), 1.15, samples=ours,
                   floor_samples=floors, details={"floor_put_202_s": round(median(accepted), 5),
                                                  "floor_put_202_samples": accepted,
                                                  "put_bytes": len(body), "syncs": len(ours)}),
            Result("webhook_own", fx.routes, median(own), "s", None, 0.040 if fx.routes >= 10_000 else None,
                   "max", samples=own, details={"phases_s": medians,
                                                "phases_samples_s": {k: [round(v, 5) for v in vs]
                                                                     for k, vs in phases.items()}})]


def _lose_config(client: FloorClient, restart: str | None) -> tuple[float, str | None]:
    """Make a gateway lose its config: its restart command (it must return once the gateway answers
    again), or a PUT of an empty config; when it was lost (monotonic), and the empty PUT's digest."""
    if restart is None:
        digest = client.put_raw(b"{}")
        return time.monotonic(), digest
    subprocess.run(restart, shell=True, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.monotonic(), None


def _refilled(client: FloorClient, plane: DataPlane, lost: tuple[float, str | None], probe: tuple[str, int],
              what: str) -> float:
    """From the loss to the config back: after a restart, its data plane serving the commit (it came
    back empty); after an empty PUT, the gateway taking the next PUT (its HEAD: the data plane applies
    the two configs in order, possibly within one of its polls, so it cannot tell when the second came)."""
    started, emptied = lost
    if emptied is None:
        return _served(plane, *probe, started, what)
    at = client.wait_digest_not(emptied)
    if at is None:
        raise RuntimeError(f"{what}: the emptied gateway {client.client.base_url} never took a PUT again")
    return at - started


def refill_served(fx: Fixture, gw: Gateway, floor: FloorClient, planes: Planes, reps: Reps) -> list[Result]:
    """Scenario 5 on running gateways: a gateway loses its config (restarted by the user's command, or
    emptied by a PUT) → it holds the config again (restarted: its data plane serves the commit; emptied:
    its Admin API took the next PUT), healed by a running `gitsync run` whose drift watch HEADs every
    0.1 s; against the floor's gateway losing it the same way, then a GET and a PUT of the whole config
    (no versions: the gateway takes each as its own + 1)."""
    ours, floors, own = [], [], []
    payload = FloorTwin(fx).payload()
    full = json.dumps(payload, separators=(",", ":")).encode()
    probe = fx.probe()
    ours_admin = FloorClient(gw.url, fx.admin_key)
    try:
        floor.put_raw(full)
        with DaemonProcess(fx, gw.url, fx.work / "refill-served-state", drift_interval=0.1,
                           webhook=False) as daemon:
            daemon.wait_ready()
            if not (planes.ours.wait_served(*probe) and planes.floor.wait_served(*probe)):
                raise RuntimeError("refill: the gateways do not serve the tip before the run")
            before = daemon.own_seconds()
            for rep in range(reps.reps):
                lost = _lose_config(ours_admin, planes.restart_ours)
                ours.append(_refilled(ours_admin, planes.ours, lost, probe, "refill"))
                daemon.wait_syncs("healed", rep + 1)
                after = daemon.own_seconds()
                if after[1] > before[1]:
                    own.append((after[0] - before[0]) / (after[1] - before[1]))
                before = after
                planes.ours.wait_served(*probe)
                lost = _lose_config(floor, planes.restart_floor)
                floor.get_put(full, f"{hashlib.sha256(full).hexdigest()}-{time.time_ns()}")
                floors.append(_refilled(floor, planes.floor, lost, probe, "floor refill"))
                planes.floor.wait_served(*probe)
    finally:
        ours_admin.close()
    how = "restart command → served" if planes.restart_ours else "empty PUT → the next PUT taken"
    return [Result("refill_served", fx.routes, median(ours), "s", median(floors), samples=ours,
                   floor_samples=floors, details={"lost_by": how, "drift_interval_s": 0.1,
                                                  "put_bytes": len(full)}),
            Result("refill_served_own", fx.routes, median(own) if own else 0.0, "s", None, samples=own,
                   details={"what": "the heal syncs' own time (gitsync_sync_phase_seconds{phase=gitsync})"})]


class SourcesFixture:
    """Scenario 9's repos: `SOURCES` teams of ``routes / SOURCES`` routes each (ids after ``t<k>-``,
    the first team's holding the global rule), served by the daemon that serves `fx`."""

    def __init__(self, fx: Fixture) -> None:
        self.fx = fx
        self.per = fx.routes // SOURCES
        self.repos = [fx.repo.with_name(f"team{k}-{fx.routes}.git") for k in range(SOURCES)]
        for k, repo in enumerate(self.repos):
            make_history(repo, self.per, HISTORY, prefix=f"t{k}-", global_rule=k == 0)
        self.revisions = [HISTORY] * SOURCES

    def commit(self, k: int) -> None:
        """A commit changing one route file of team `k`."""
        add_commits(self.repos[k], self.per, 1, self.revisions[k], prefix=f"t{k}-")
        self.revisions[k] += 1

    def settings(self, gateway: str, state_dir: Path) -> Settings:
        url = self.fx.url.rsplit("/", 1)[0]
        tables = "".join(
            f'[[sources]]\nname = "team{k}"\nrepo = "{url}/{repo.name}"\nowns = ['
            + ('"global_rules", ' if k == 0 else "")
            + f'{{ kinds = ["routes", "services", "upstreams", "consumers"], prefix = "t{k}-" }}]\n\n'
            for k, repo in enumerate(self.repos))
        config = self.fx.work / "sources.toml"
        config.write_text(tables)
        # guard off: its first sync replaces whatever the gateway held (the one-repo config of other groups)
        return load({"gateways": [gateway], "admin_key_file": str(self.fx.key_file),
                     "state_dir": str(state_dir), "writeback": "off", "guard": False,
                     "gateway_timeout": BENCH_GATEWAY_TIMEOUT}, env={}, config=config)


def sources_change(fx: Fixture, gw: Gateway, fl: Gateway, reps: Reps) -> list[Result]:
    """A commit changing one route file in one of `SOURCES` repos (one agent with ``[[sources]]``,
    its gateway `gw`) vs a commit changing one route file in one repo of as many routes (an agent of
    its own on `fl`), in turns; the sync's time, gitsync's own part of it (less the gateway's wait),
    and that less its git contacts (a command's sync fetches every repo's tip at once: `SOURCES` remotes
    against one, those with nothing new a ref advertisement each)."""
    teams = SourcesFixture(fx)
    several = Agent(teams.settings(gw.url, fx.work / "sources-state"))
    one = Agent(fx.settings(fl.url, fx.work / "one-repo-state"))
    ours, floors, own, own_floor, rest, rest_floor = [], [], [], [], [], []
    phases: dict[Agent, dict[str, list[float]]] = {several: {}, one: {}}
    try:
        for agent in (several, one):
            first = agent.sync_once({Trigger.CLI})
            if first.result != "applied":
                raise RuntimeError(f"first sync: {first.result}: {first.problems[:3]}")
        for rep in range(reps.reps):
            teams.commit(rep % SOURCES)
            fx.commit()
            sides = ((several, ours, own, rest), (one, floors, own_floor, rest_floor))
            for agent, total, mine, rests in sides:
                seconds, outcome = applied_sync(agent)
                total.append(seconds)
                mine.append(outcome.phases.agent_time(outcome.duration))
                spent = outcome.phases.snapshot()
                rests.append(mine[-1] - spent.get("check", 0.0) - spent.get("fetch", 0.0))
                for phase, seconds in outcome.phases.snapshot().items():
                    phases[agent].setdefault(phase, []).append(seconds)
    finally:
        several.close()
        one.close()
    medians = {side: {phase: round(median(values), 5) for phase, values in phases[agent].items()}
               for side, agent in (("sources", several), ("one_repo", one))}
    details = {"sources": SOURCES, "routes_per_source": teams.per}
    return [Result("sources_change", fx.routes, median(ours), "s", median(floors), None, samples=ours,
                   floor_samples=floors, details=details),
            Result("sources_own", fx.routes, median(own), "s", median(own_floor), None, samples=own,
                   floor_samples=own_floor, details={**details, "phases_s": medians}),
            Result("sources_rest", fx.routes, median(rest), "s", median(rest_floor), 1.25, samples=rest,
                   floor_samples=rest_floor, details=details)]


# ---------------------------------------------------------------------------------------------------
# The run


#: Scenario groups, in the order they run (``--only`` picks some; the JSON of a full run has all).
GROUPS = ("agent", "fetch", "memory", "once", "refill", "daemon", "sources")


def _empty_both(ours: FloorClient, floor: FloorClient) -> None:
    """Empty both running gateways, gitsync's with each kind's version above the floor's: the floors
    send gitsync's own bodies, versions included, which a gateway refuses below what it holds."""
    floor.put_raw(b"{}")
    held = [ours.live(), floor.live()]
    versions = {key: max(int(live.get(key) or 0) for live in held) + 1
                for key in {k for live in held for k in live if k.endswith("_conf_version")}}
    ours.put_raw(json.dumps(versions).encode())


def run_size(routes: int, reps: Reps, daemon: GitDaemon, work: Path, with_daemon: bool,
             say: Callable[[str], None], only: Sequence[str] = GROUPS,
             external: tuple[str, str] | None = None, admin_key: str = ADMIN_KEY,
             planes: Planes | None = None) -> list[Result]:
    """Every scenario of `only` at one size, against two doubles, or the two gateways of `external`
    (gitsync's, the floor's: each config the bench pushes replaces what they held), whose data planes
    `planes` are when given (then the refill and the daemon watch those, at every size)."""
    fx = Fixture(routes, work, daemon, admin_key)
    results: list[Result] = []
    with contextlib.ExitStack() as stack:
        if external is None:
            gw: Gateway = stack.enter_context(DoubleProcess(admin_key))
            fl: Gateway = stack.enter_context(DoubleProcess(admin_key))
        else:
            gw, fl = ExternalGateway(external[0]), ExternalGateway(external[1])
        floor = FloorClient(fl.url, admin_key)
        if external is not None:  # what an earlier size left there would trip the deletion guard
            _empty_both(stack.enter_context(contextlib.closing(FloorClient(gw.url, admin_key))), floor)
        try:
            if "agent" in only:
                say(f"{routes} routes: render, one-file change, no-op poll")
                results += in_process(fx, gw, floor, reps)
            if "fetch" in only:
                say(f"{routes} routes: incremental fetch")
                results.append(incremental_fetch(fx, reps))
            if "memory" in only:
                say(f"{routes} routes: sync --once memory")
                results.append(sync_once_rss(fx, gw, reps))
            if "once" in only:
                say(f"{routes} routes: sync --once with a kept state dir, and a first one")
                results += sync_once_times(fx, gw, floor, reps)
            if "refill" in only and planes is not None:
                say(f"{routes} routes: a lost config refilled, watched on the data plane")
                results += refill_served(fx, gw, floor, planes, reps)
            elif "refill" in only:
                assert isinstance(gw, DoubleProcess) and isinstance(fl, DoubleProcess), EXTERNAL_GROUPS
                say(f"{routes} routes: restart refill")
                results += restart_refill(fx, gw, fl, floor, reps)
            if "daemon" in only and planes is not None:
                say(f"{routes} routes: webhook → served, watched on the data plane")
                results += webhook_served(fx, gw, floor, planes, reps)
            elif with_daemon and "daemon" in only:
                assert isinstance(gw, DoubleProcess), EXTERNAL_GROUPS
                say(f"{routes} routes: webhook latency and daemon memory")
                results += webhook_and_memory(fx, gw, reps)
            if "sources" in only and routes >= SOURCES * ROUTES_PER_FILE:
                say(f"{routes} routes: a one-file change in one of {SOURCES} sources, and in one repo")
                results += sources_change(fx, gw, fl, reps)
        finally:
            floor.close()
    return results


def plan_for(routes: int, quick: bool, reps: int | None, daemon_syncs: int | None = None) -> Reps:
    slow = reps or (3 if quick else 7 if routes <= 1000 else 5)
    return Reps(reps=slow, fast_reps=10 if quick else 25, rss_reps=1 if quick else 2,
                webhook_commits=5 if quick else 20, daemon_syncs=daemon_syncs or (10 if quick else 100),
                served_reps=3 if quick else max(SERVED_REPS, reps or 0))


def machine() -> dict[str, Any]:
    def out(*args: str) -> str:
        return subprocess.run(args, capture_output=True, text=True, cwd=ROOT).stdout.strip()

    dirty = bool(out("git", "status", "--porcelain", "--untracked-files=no"))
    return {"date": datetime.now(UTC).isoformat(timespec="seconds"),
            "commit": out("git", "rev-parse", "--short", "HEAD") + ("+dirty" if dirty else ""),
            "python": platform.python_version(), "platform": platform.platform(),
            "cpus": os.cpu_count(), "loadavg": os.getloadavg(), "git": out("git", "--version"),
            "dulwich": ".".join(map(str, dulwich.__version__))}


def fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "MB":
        return f"{value:.0f} MB"
    return f"{value * 1000:.1f} ms" if value < 1 else f"{value:.2f} s"


def table(results: Sequence[Result]) -> str:
    lines = [f"{'scenario':<28} {'routes':>7} {'gitsync':>10} {'floor':>10} {'ratio':>7}  target",
             "-" * 96]
    for r in sorted(results, key=lambda r: (list(SCENARIOS).index(r.scenario), r.routes)):
        title, target = SCENARIOS[r.scenario]
        ratio = f"{r.ratio:.2f}×" if r.ratio is not None else "-"
        verdict = {True: "met", False: "MISSED", None: ""}[r.met]
        if r.scenario == "daemon_rss":
            title = f"7 daemon RSS, {r.details['syncs']} syncs"
            verdict = "met" if r.details["no_growth"] else "MISSED"
            ratio = f"{r.details['growth_second_half_mb']:+.1f} MB"
        if r.scenario == "restart_refill" and not r.details["healed"]:
            verdict = f"NOT REFILLED within {REFILL_DEADLINE:g} s"
        if r.scenario == "webhook_live":
            ratio = f"p95 {r.details['p95_s'] * 1000:.0f} ms"
        lines.append(f"{title:<28} {r.routes:>7,} {fmt(r.value, r.unit):>10} {fmt(r.floor, r.unit):>10} "
                     f"{ratio:>7}  {target} {verdict}".rstrip())
    return "\n".join(lines)


def run(sizes: Sequence[int], *, quick: bool = False, reps: int | None = None, out: Path = OUT,
        keep: bool = False, only: Sequence[str] = GROUPS, say: Callable[[str], None] = print,
        daemon_syncs: int | None = None, external: tuple[str, str] | None = None,
        admin_key: str = ADMIN_KEY, planes: Planes | None = None) -> dict[str, Any]:
    """Run every scenario at every size; write the JSON report; return it."""
    started = time.monotonic()
    gslog.setup(verbose=0, stream=open(os.devnull, "w"))  # noqa: SIM115 - the in-process agent's logs
    daemon_size = DAEMON_SIZE if DAEMON_SIZE in sizes else min(sizes)
    report: dict[str, Any] = {"machine": machine(), "sizes": list(sizes), "quick": quick, "only": list(only),
                              "daemon_routes": daemon_size, "results": [],
                              "gateways": {"kind": "double"} if external is None else
                              {"kind": "external", "gitsync": external[0], "floor": external[1],
                               **({"proxies": [planes.ours.url, planes.floor.url],
                                   "lost_by": "restart command" if planes.restart_ours else "empty PUT"}
                                  if planes else {})}}
    results: list[Result] = []
    tmp = Path(tempfile.mkdtemp(prefix="gitsync-bench-"))
    try:
        served = tmp / "served"
        served.mkdir()
        with GitDaemon(served) as daemon:
            for routes in sizes:
                work = tmp / f"work-{routes}"
                work.mkdir()
                results += run_size(routes, plan_for(routes, quick, reps, daemon_syncs), daemon, work,
                                    routes == daemon_size, say, only, external, admin_key, planes)
    finally:
        if keep:
            say(f"work files kept in {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    report["results"] = [r.to_dict() for r in results]
    report["table"] = table(results)
    write_report(report, out, started, "bench", "latest.json")
    return report


def write_report(report: dict[str, Any], out: Path, started: float, prefix: str, latest: str) -> None:
    """The run's time and the machine's load at its end into `report`; written to ``out`` as
    ``<prefix>-<UTC time>.json`` and as `latest`."""
    report["seconds"] = round(time.monotonic() - started, 1)
    report["machine"]["loadavg_end"] = os.getloadavg()
    out.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    for name in (f"{prefix}-{stamp}.json", latest):
        (out / name).write_text(json.dumps(report, indent=2) + "\n")


def print_report(report: dict[str, Any], extra: str) -> None:
    """The header of a script that runs the gitsync of a tree (``--tree``), `extra` at its end, then
    the report's table."""
    m = report["machine"]
    print(f"gitsync of {report['tree']} on {m['cpus']} CPUs, Python {m['python']}; {m['date']}; {extra}")
    print(report["table"])


def parse_sizes(text: str) -> list[int]:
    return [int(part.replace("_", "").replace(",", "")) for part in text.split(",") if part.strip()]


def _external(parser: argparse.ArgumentParser, args: argparse.Namespace) -> tuple[str, str, str] | None:
    """The two running gateways of ``--gateway``/``--floor-gateway``, checked, and their admin key;
    None for the doubles."""
    given = [args.gateway, args.floor_gateway, args.admin_key_file]
    if not any(given):
        return None
    if not all(given):
        parser.error("--gateway, --floor-gateway and --admin-key-file go together: gitsync's gateway, the "
                     "floors' (a second one: the floors' PUTs would change what gitsync finds), the key")
    if args.gateway.rstrip("/") == args.floor_gateway.rstrip("/"):
        parser.error("--floor-gateway must be another gateway than --gateway: the floors' PUTs would "
                     "change what gitsync finds there")
    try:
        key = args.admin_key_file.read_text().strip()
    except OSError as exc:
        parser.error(f"--admin-key-file: {exc.strerror}: {args.admin_key_file}")
    return args.gateway.rstrip("/"), args.floor_gateway.rstrip("/"), key


def _planes(parser: argparse.ArgumentParser, args: argparse.Namespace,
            external: tuple[str, str] | None) -> Planes | None:
    """The data planes of ``--proxy``/``--floor-proxy`` (with ``--gateway``), and the restart commands."""
    if not (args.proxy or args.floor_proxy):
        if args.restart_gateway or args.restart_floor:
            parser.error("--restart-gateway and --restart-floor need --proxy and --floor-proxy")
        return None
    if external is None or not (args.proxy and args.floor_proxy):
        parser.error("--proxy and --floor-proxy go together, with --gateway and --floor-gateway")
    if bool(args.restart_gateway) != bool(args.restart_floor):
        parser.error("--restart-gateway and --restart-floor go together: both gateways lose their config "
                     "the same way")
    return Planes(DataPlane(args.proxy.rstrip("/")), DataPlane(args.floor_proxy.rstrip("/")),
                  args.restart_gateway, args.restart_floor)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="100,1000,10000", help="route counts, comma-separated "
                        "(default %(default)s)")
    parser.add_argument("--quick", action="store_true", help="100 routes only, fewer repetitions "
                        "(the smoke test)")
    parser.add_argument("--reps", type=int, help="repetitions of the slow scenarios (default by size)")
    parser.add_argument("--daemon-syncs", type=int, help="webhook-driven syncs of the daemon whose RSS is "
                        "followed (scenario 7; default 100)")
    parser.add_argument("--out", type=Path, default=OUT, help="where the JSON goes (default bench/out)")
    parser.add_argument("--keep", action="store_true", help="keep the work files (repos, daemon logs)")
    parser.add_argument("--only", help="scenario groups to run, comma-separated: agent (1-3), fetch (4), "
                        "memory (7, sync --once), once (8), refill (5), daemon (6, 7), sources (9); "
                        "default all "
                        f"({','.join(EXTERNAL_GROUPS)} with --gateway)")
    parser.add_argument("--gateway", metavar="URL", help="measure gitsync against this running gateway's "
                        "Admin API (a real APISIX in API-driven standalone mode) instead of a double; "
                        "its whole config is replaced")
    parser.add_argument("--floor-gateway", metavar="URL", help="with --gateway: a second running gateway "
                        "for the floors (its whole config is replaced too)")
    parser.add_argument("--admin-key-file", type=Path, help="with --gateway: a file holding the admin key "
                        "of both gateways")
    parser.add_argument("--proxy", metavar="URL", help="with --gateway: its data plane; the daemon and "
                        "refill groups then watch it serve each commit")
    parser.add_argument("--floor-proxy", metavar="URL", help="with --proxy: the floor gateway's data plane")
    parser.add_argument("--restart-gateway", metavar="CMD", help="with --proxy: a shell command that "
                        "restarts gitsync's gateway and returns once it answers (the refill's lost config; "
                        "default: a PUT of an empty config)")
    parser.add_argument("--restart-floor", metavar="CMD", help="with --restart-gateway: the same for the "
                        "floor's gateway")
    args = parser.parse_args(argv)
    sizes = [100] if args.quick else parse_sizes(args.sizes)
    given = _external(parser, args)
    external = given[:2] if given else None
    planes = _planes(parser, args, external)
    only = [group.strip() for group in (args.only or ",".join(
        EXTERNAL_GROUPS if external and planes is None else GROUPS)).split(",") if group.strip()]
    unknown = [group for group in only if group not in GROUPS]
    if unknown:
        parser.error(f"unknown group {unknown[0]!r}: choose from {', '.join(GROUPS)}")
    doubles_only = [group for group in only if group not in EXTERNAL_GROUPS]
    if external and doubles_only and planes is None:
        parser.error(f"--gateway: the {doubles_only[0]!r} group restarts the double and asks it when a PUT "
                     f"came; against running gateways give their data planes (--proxy, --floor-proxy) or "
                     f"choose from {', '.join(EXTERNAL_GROUPS)}")
    admin_key = given[2] if given else ADMIN_KEY

    def say(message: str) -> None:
        print(f"… {message}", file=sys.stderr, flush=True)

    try:
        report = run(sizes, quick=args.quick, reps=args.reps, out=args.out, keep=args.keep, only=only,
                     say=say, daemon_syncs=args.daemon_syncs, external=external, admin_key=admin_key,
                     planes=planes)
    finally:
        if planes is not None:
            planes.ours.close()
            planes.floor.close()
    m = report["machine"]
    print(f"gitsync {m['commit']} on {m['cpus']} CPUs, Python {m['python']}, {m['git']}, dulwich "
          f"{m['dulwich']}; {m['date']}; {report['seconds']:.0f} s; medians")
    if external:
        print(f"gateways: {external[0]} (gitsync), {external[1]} (floors)"
              + (f"; data planes {planes.ours.url}, {planes.floor.url}" if planes else ""))
    print(report["table"])
    return 0

