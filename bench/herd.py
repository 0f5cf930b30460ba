"""A fleet's thundering herd: one push wakes every agent at the same instant, against one git server, or
against one OCI registry the commit was published to (``--registry``).

    python -m bench.herd                      # 100 agents, 100 routes each, git daemon's default limits
    python -m bench.herd --agents 20 --quick  # the smoke test
    python -m bench.herd --max-connections 32 # git daemon's own default connection limit
    python -m bench.herd --registry           # the agents pull artifacts (repo = oci://…) instead

N real ``gitsync run`` processes (each its own state dir, its own gateway: the Admin API doubles, many
to a child process), all following one repo served by ``git daemon`` on 127.0.0.1 behind
`testkit.gitservers.GitGate`, which counts connections and bytes per service. Once every agent holds
the first commit, a new commit is made and every agent gets its signed webhook at the same instant
(threads released by one barrier). Measured:

- each agent's webhook → its gateway holding the commit (its ``/readyz`` naming it); every one must
  within `--deadline` (30 s), and none may give up (no ``fetch_failed`` or ``failed`` sync);
- the git server's work for the herd: connections and bytes per service at the gate, the most
  connections open at once, and the CPU of the ``git daemon`` process tree (its own and its reaped
  children's: ``upload-pack``, ``pack-objects``), per agent; extrapolated to 1,000 agents as
  per-agent work × 1,000.

With ``--registry``, the commit is published (``gitsync publish``, as CI would, straight to the
registry, before the webhooks) into Debian's ``docker-registry`` on 127.0.0.1 (testkit/registry.py,
htpasswd auth), and the agents follow ``oci://`` through `testkit.gitservers.TcpGate` (every
connection and byte counted); the server's CPU is the registry process's. JSON in
``bench/out/herd-latest.json`` (``herd-registry-latest.json`` with ``--registry``).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import hmac
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from bench.peer_adc import published
from bench.run import OUT, WEBHOOK_SECRET, Fixture, machine, process_env, write_report
from gitsync.testing.apisix import ApisixDouble
from testkit.git import GitDaemon
from testkit.gitservers import GitGate, TcpGate, Traffic
from testkit.processes import free_port, stop_process, wait_for_port
from testkit.registry import Registry

ADMIN_KEY = "bench-herd-admin-key"
DOUBLES_PER_PROCESS = 25
START_BATCH = 10  # agents started at once (a process start is ~0.5 s of CPU here)
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


# ---------------------------------------------------------------------------------------------------
# The gateways: many doubles to a child process


def serve_doubles(count: int) -> int:
    """The child: `count` doubles; prints their URLs as one JSON line, stops when stdin closes."""
    doubles = [ApisixDouble(os.environ["BENCH_ADMIN_KEY"], proxy=False).start() for _ in range(count)]
    print(json.dumps([d.url for d in doubles]), flush=True)
    sys.stdin.read()
    for double in doubles:
        double.stop()
    return 0


@contextlib.contextmanager
def doubles(count: int) -> Iterator[list[str]]:
    procs, urls = [], []
    try:
        for start in range(0, count, DOUBLES_PER_PROCESS):
            n = min(DOUBLES_PER_PROCESS, count - start)
            proc = subprocess.Popen([sys.executable, "-m", "bench.herd", "--serve-doubles", str(n)],
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                    env={**process_env(), "BENCH_ADMIN_KEY": ADMIN_KEY})
            procs.append(proc)
        for proc in procs:
            assert proc.stdout is not None
            urls += json.loads(proc.stdout.readline())
        yield urls
    finally:
        for proc in procs:
            with contextlib.suppress(OSError):
                assert proc.stdin is not None
                proc.stdin.close()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


# ---------------------------------------------------------------------------------------------------
# The agents


class Agent:
    """One ``gitsync run``: its webhook, its readiness."""

    def __init__(self, fx: Fixture, url: str, gateway: str, state: Path, extra: Sequence[str],
                 env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        args = [sys.executable, "-m", "gitsync", "run", "--repo", url, "--gateway", gateway,
                "--admin-key-file", str(fx.key_file), "--state-dir", str(state), "--no-writeback",
                "--listen", f"127.0.0.1:{self.port}", "--interval", "3600", "--jitter", "0",
                "--drift-interval", "3600", "--webhook-secret-file", str(fx.webhook_file), *extra]
        self.log = (fx.work / f"agent-{self.port}.log").open("w")
        self.proc = subprocess.Popen(args, env={**process_env(), **(env or {})}, stdout=subprocess.DEVNULL,
                                     stderr=self.log,
                                     start_new_session=True)
        self.http = httpx.Client(base_url=f"http://127.0.0.1:{self.port}", timeout=30)

    def started(self) -> bool:
        return wait_for_port(self.port, self.proc, timeout=120)

    def holds(self, sha: str) -> bool:
        try:
            response = self.http.get("/readyz")
        except httpx.HTTPError:
            return False
        return response.status_code == 200 and sha[:7] in response.text

    def webhook(self) -> None:
        body = b'{"ref": "refs/heads/main"}'
        signature = hmac.new(WEBHOOK_SECRET.encode(), body, hashlib.sha256).hexdigest()
        self.http.post("/hooks/generic", content=body,
                       headers={"X-Gitsync-Signature-256": f"sha256={signature}"})

    def gave_up(self) -> float:
        text = self.http.get("/metrics").text
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith(('gitsync_syncs_total{result="fetch_failed"}',
                                       'gitsync_syncs_total{result="failed"}')))

    def stop(self) -> None:
        self.http.close()
        stop_process(self.proc, grace=30)
        self.log.close()


def cpu_seconds(pid: int) -> float:
    """The CPU of a process tree, in seconds: each process's own and its reaped children's (utime,
    stime, cutime, cstime). ``git daemon`` is the git wrapper's child ``git-daemon``, which reaps the
    ``upload-pack`` it starts per connection (and those their ``pack-objects``)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:  # ended meanwhile: its parent's cutime has it
        return 0.0
    return sum(int(v) for v in fields[11:15]) / CLOCK_TICKS + sum(cpu_seconds(int(c)) for c in children)


class Peak:
    """The most connections the gate relayed at once, sampled every millisecond."""

    def __init__(self, gate: GitGate) -> None:
        self.gate, self.most = gate, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._stop.wait(0.001):
            self.most = max(self.most, self.gate._active)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.most


@dataclass
class Herd:
    agents: int
    routes: int
    deadline: float
    max_connections: int
    extra: tuple[str, ...]
    registry: bool = False


def _copy(traffic: dict[str, Traffic]) -> dict[str, Traffic]:
    """The gate's counters now (it adds to them in place)."""
    return {service: Traffic(t.requests, t.sent, t.received) for service, t in list(traffic.items())}


def traffic_delta(before: dict[str, Traffic], after: dict[str, Traffic]) -> dict[str, dict[str, int]]:
    zero = Traffic(0, 0, 0)
    return {service: {"connections": t.requests - before.get(service, zero).requests,
                      "sent": t.sent - before.get(service, zero).sent,
                      "received": t.received - before.get(service, zero).received}
            for service, t in after.items()}


def measure(herd: Herd, tmp: Path, say: Any) -> dict[str, Any]:
    served, work = tmp / "served", tmp / "work"
    served.mkdir()
    work.mkdir()
    with contextlib.ExitStack() as stack:
        daemon = stack.enter_context(GitDaemon(served, max_connections=herd.max_connections))
        fx = Fixture(herd.routes, work, daemon, ADMIN_KEY)
        extra, env = list(herd.extra), {}
        if herd.registry:
            registry = stack.enter_context(Registry(tmp / "registry"))
            gate = stack.enter_context(TcpGate(registry.port))
            flags, env = published(fx, registry, tmp / "publisher")
            flags[1] = f"oci://127.0.0.1:{gate.port}/config:main"  # the agents' side goes through the gate
            url, extra = flags[1], [*flags[2:], *extra]
            server = registry.pid
        else:
            gate = stack.enter_context(GitGate(daemon.port))
            url = gate.url(fx.repo.name)
            assert daemon.proc is not None
            server = daemon.proc.pid
        gateways = stack.enter_context(doubles(herd.agents))
        agents: list[Agent] = []
        try:
            for start in range(0, herd.agents, START_BATCH):
                batch = [Agent(fx, url, gateways[i], work / f"state-{i}", extra, env)
                         for i in range(start, min(herd.agents, start + START_BATCH))]
                agents += batch
                if not all(agent.started() for agent in batch):
                    raise RuntimeError(f"an agent did not start; see {work}")
                say(f"{len(agents)} agents started")
            tip = _tip(fx)
            _wait_all(agents, tip, 600)
            say("every agent holds the first commit; the push")
            gate.settle()
            tip = fx.commit()
            if herd.registry:
                published(fx, registry, tmp / "publisher")
            before, cpu_before = _copy(gate.traffic), cpu_seconds(server)
            barrier = threading.Barrier(len(agents) + 1)
            sent: list[float] = [0.0] * len(agents)

            def hook(i: int) -> None:
                barrier.wait()
                sent[i] = time.monotonic()
                agents[i].webhook()

            threads = [threading.Thread(target=hook, args=(i,), daemon=True) for i in range(len(agents))]
            for thread in threads:
                thread.start()
            peak = Peak(gate)
            barrier.wait()
            pushed = time.monotonic()
            latencies = _wait_all(agents, tip, herd.deadline, since=pushed)
            most = peak.stop()
            for thread in threads:
                thread.join()
            gate.settle()
            time.sleep(0.5)  # git daemon reaps its children on its next loop
            cpu = cpu_seconds(server) - cpu_before
            traffic = traffic_delta(before, _copy(gate.traffic))
            gave_up = sum(agent.gave_up() for agent in agents)
        finally:
            for agent in agents:
                agent.stop()
    done = [t for t in latencies if t is not None]
    n = herd.agents
    conns = sum(t["connections"] for t in traffic.values())
    sent_bytes = sum(t["sent"] for t in traffic.values())
    received = sum(t["received"] for t in traffic.values())
    per_agent = {"connections": conns / n, "bytes_to_server": sent_bytes / n,
                 "bytes_from_server": received / n, "server_cpu_ms": cpu * 1000 / n}
    return {"agents": n, "routes": herd.routes, "served": len(done), "deadline_s": herd.deadline,
            "all_served": len(done) == n, "gave_up_syncs": gave_up,
            "latency_s": {"p50": statistics.median(done) if done else None,
                          "p95": sorted(done)[int(0.95 * (len(done) - 1))] if done else None,
                          "max": max(done) if done else None},
            "latencies_s": latencies, "traffic": traffic, "peak_connections": most,
            "server_cpu_s": cpu, "per_agent": per_agent,
            "at_1000": {key: value * 1000 for key, value in per_agent.items()},
            "max_connections": herd.max_connections, "agent_args": list(herd.extra),
            "server": "docker-registry" if herd.registry else "git daemon"}


def _tip(fx: Fixture) -> str:
    return subprocess.run(["git", "rev-parse", "refs/heads/main"], cwd=fx.repo, capture_output=True,
                          text=True, check=True).stdout.strip()


def _wait_all(agents: list[Agent], sha: str, timeout: float,
              since: float | None = None) -> list[float | None]:
    """Poll every agent until it holds `sha`; each one's time since `since` (None: not within `timeout`)."""
    started = since if since is not None else time.monotonic()
    when: list[float | None] = [None] * len(agents)
    while time.monotonic() - started < timeout and None in when:
        for i, agent in enumerate(agents):
            if when[i] is None and agent.holds(sha):
                when[i] = time.monotonic() - started
        time.sleep(0.01)
    if since is None and None in when:
        raise RuntimeError(f"{when.count(None)} agents never held {sha[:7]}")
    return when


def summary(result: dict[str, Any]) -> str:
    lat, per, at = result["latency_s"], result["per_agent"], result["at_1000"]
    server = result.get("server", "git daemon")
    lines = [f"{result['agents']} agents, {result['routes']} routes each; {server}"
             f" (git daemon --max-connections={result['max_connections']}); agents: "
             f"{' '.join(result['agent_args']) or '(defaults)'}",
             f"served within {result['deadline_s']:.0f} s: {result['served']}/{result['agents']}; syncs that "
             f"gave up: {result['gave_up_syncs']:.0f}",
             f"push → served: p50 {lat['p50']:.2f} s, p95 {lat['p95']:.2f} s, max {lat['max']:.2f} s"
             if lat["p50"] is not None else "push → served: none",
             f"server: {result['peak_connections']} connections at once; per agent "
             f"{per['connections']:.2f} connections, {per['bytes_to_server']:.0f} B in, "
             f"{per['bytes_from_server']:.0f} B out, {per['server_cpu_ms']:.1f} ms CPU",
             "by service: " + ", ".join(f"{s} {t['connections']} conns {t['received']} B out"
                                         for s, t in result["traffic"].items()),
             f"at 1,000 agents (× per agent): {at['connections']:.0f} connections, "
             f"{at['bytes_from_server'] / 1e6:.1f} MB out, {at['server_cpu_ms'] / 1000:.1f} s CPU"]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.herd", description=__doc__.split("\n")[0])
    parser.add_argument("--agents", type=int, default=100)
    parser.add_argument("--routes", type=int, default=100, help="routes in the config (default 100)")
    parser.add_argument("--deadline", type=float, default=30.0, help="seconds each agent has to serve the "
                        "commit (default 30)")
    parser.add_argument("--max-connections", type=int, default=0, help="git daemon's connection limit "
                        "(0: none; its own default is 32)")
    parser.add_argument("--agent-arg", action="append", default=[], help="an argument for every "
                        "`gitsync run` (repeat)")
    parser.add_argument("--registry", action="store_true", help="the agents pull artifacts from a registry")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--serve-doubles", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve_doubles:
        return serve_doubles(args.serve_doubles)

    def say(message: str) -> None:
        print(f"… {message}", file=sys.stderr, flush=True)

    started = time.monotonic()
    report: dict[str, Any] = {"machine": machine()}
    tmp = Path(tempfile.mkdtemp(prefix="gitsync-herd-"))
    try:
        herd = Herd(args.agents, args.routes, args.deadline, args.max_connections, tuple(args.agent_arg),
                    args.registry)
        report["result"] = measure(herd, tmp, say)
    finally:
        if args.keep:
            say(f"work files kept in {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    name = "herd-registry" if args.registry else "herd"
    write_report(report, args.out, started, name, f"{name}-latest.json")
    m = report["machine"]
    print(f"gitsync {m['commit']}; {m['date']}; load {m['loadavg'][0]:.1f} → {m['loadavg_end'][0]:.1f}; "
          f"{report['seconds']:.0f} s")
    print(summary(report["result"]))
    return 0 if report["result"]["all_served"] and not report["result"]["gave_up_syncs"] else 1


if __name__ == "__main__":
    sys.exit(main())
