"""The status channel of a fleet of 10,000 agents, simulated: what one git server pays for it.

    python -m bench.fleetsim                          # 10,000 agents in 50 groups, 300 writes a layout
    python -m bench.fleetsim --agents 2000 --writes 200 --groups 10

No daemons: the fleet's statuses are written into the served repos at once (``git fast-import``: one
status commit an agent, each with its own ``status.yaml`` as an agent writes it), then light clients
do what agents do, against a real ``git daemon`` on 127.0.0.1 behind `testkit.gitservers.GitGate` (which
counts connections and bytes), while the daemon's CPU is read from ``/proc/<pid>/stat`` (its own and
its reaped children's: each connection is a child ``git upload-pack`` / ``receive-pack``):

- **writes**: `--writes` status writes (a new status commit, `WriteBack.publish_status`), 8 at a time,
  spread over the fleet, in three layouts: *flat* (every ref ``<status_refs>/<agent>`` in one repo, as
  before issue 45), *sharded* (``<status_refs>/<group>/<agent>``, one repo) and *a repo per group*
  (``status_remote`` with ``{group}``). Per write: connections, bytes the server sent and received, the
  server's CPU. A push (protocol v0: git has no v2 push) starts with the server advertising every ref
  of the repo, so a write costs what the repo holds, not what the writer writes: the figures say by how
  much. The 10,000 writes of a heartbeat round are the per-write figure times 10,000 (said so);
- **reads**: a gate's read of its group (first read, a read where nothing moved), and ``status
  --fleet``'s read of the whole fleet (first, nothing moved), in each layout: seconds (wall, on this
  loaded machine, and the client's own CPU seconds, which the load does not change), bytes, server CPU,
  entries.

Extrapolation to 100,000 agents is on paper, in bench/README.md, from the per-ref and per-write costs.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gitsync.source.transport import Remote
from gitsync.writeback.fleet import FleetReader
from gitsync.writeback.publisher import WriteBack, WriteBackOptions
from gitsync.writeback.wire import GatewayStatus, StatusReport, render_status, status_document, status_ref
from testkit.gitservers import BareRepo, GitDaemon, GitGate, Traffic

STATUS_REFS = "refs/gitsync/status"
LAYOUTS = ("flat", "sharded", "per-group")
TICKS = os.sysconf("SC_CLK_TCK")


def agent_name(index: int) -> str:
    return f"edge-{index:05d}"


def group_name(index: int, groups: int) -> str:
    return f"g{index % groups:03d}"


def report(agent: str, group: str, commit: str, gateways: int = 2) -> StatusReport:
    """A status as an agent of 2 gateways writes it (about 1 KB of YAML)."""
    return StatusReport(
        agent=agent, commit=commit, subject="routes: one more", result="applied", group=group,
        gateways=[GatewayStatus(url=f"http://10.{i}.0.1:9180", status="applied",
                                versions={"routes": 10_000, "upstreams": 200}, digest="d" * 64,
                                counts={"routes": 10_000, "upstreams": 200}, pruned={})
                  for i in range(gateways)],
        time=datetime.now(UTC), duration=1.9, heartbeat=60.0, applied_at=datetime.now(UTC))


def populate(repo: Path, agents: Sequence[tuple[str, str]], bodies: dict[str, bytes], commit: str,
             sharded: bool) -> None:
    """One status commit per (agent, group) under its ref, written by ``git fast-import`` at once."""
    stamp = int(time.time())
    chunks: list[bytes] = []
    for agent, group in agents:
        body = bodies[agent]
        ref = status_ref(STATUS_REFS, agent, group if sharded else None)
        message = f"gitsync({agent}): applied {commit[:7]} to 2 gateways\n".encode()
        chunks.append(b"commit %s\ncommitter gitsync <gitsync@localhost> %d +0000\ndata %d\n%s"
                      b"M 100644 inline status.yaml\ndata %d\n%s\n"
                      % (ref, stamp, len(message), message, len(body), body))
    subprocess.run(["git", "fast-import", "--quiet"], cwd=repo, input=b"".join(chunks), check=True)
    subprocess.run(["git", "pack-refs", "--all"], cwd=repo, check=True)


def server_cpu(pid: int) -> float:
    """CPU seconds of a process and its reaped children (utime, stime, cutime, cstime)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(f) for f in fields[11:15]) / TICKS


@dataclass
class Cost:
    what: str
    layout: str
    count: int  # operations measured
    connections: float  # per operation
    server_sent: float  # bytes, per operation
    server_received: float
    server_cpu_ms: float  # per operation
    seconds: float  # wall, all operations
    entries: int = 0
    client_cpu: float = 0.0  # this process's CPU seconds, all operations (the load does not change it)


class Server:
    """git daemon behind a counting relay; `measure` gives what one batch of operations cost it."""

    def __init__(self, root: Path) -> None:
        self.daemon = GitDaemon(root, receive_pack=True, max_connections=64)
        self.gate: GitGate | None = None

    def __enter__(self) -> Server:
        self.daemon.start()
        self.gate = GitGate(self.daemon.port).__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.gate is not None
        self.gate.__exit__(*exc)
        self.daemon.stop()

    def url(self, name: str) -> str:
        assert self.gate is not None
        return self.gate.url(name)

    def _totals(self) -> tuple[Traffic, float]:
        assert self.gate is not None and self.daemon.proc is not None
        self.gate.settle(60)
        traffic = self.gate.traffic
        total = Traffic(sum(t.requests for t in traffic.values()), sum(t.sent for t in traffic.values()),
                        sum(t.received for t in traffic.values()))
        # `git daemon` runs /usr/lib/git-core/git-daemon as its child: that one forks a child a connection
        # and reaps them when it wakes (a connection wakes it): poke it, then read its children's CPU
        pid = self.daemon.proc.pid
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        socket.create_connection(("127.0.0.1", self.daemon.port)).close()
        time.sleep(0.3)
        return total, server_cpu(int(children[0]) if children else pid)

    @contextmanager
    def measure(self, what: str, layout: str, count: int) -> Iterator[dict[str, Any]]:
        before, cpu = self._totals()
        out: dict[str, Any] = {}
        started, cpu_started = time.perf_counter(), time.process_time()
        yield out
        seconds, client_cpu = time.perf_counter() - started, time.process_time() - cpu_started
        after, cpu_after = self._totals()
        out["cost"] = Cost(what, layout, count, (after.requests - before.requests) / count,
                           (after.received - before.received) / count, (after.sent - before.sent) / count,
                           (cpu_after - cpu) * 1000 / count, round(seconds, 3), out.get("entries", 0),
                           round(client_cpu, 3))


def _repo_of(layout: str, group: str) -> str:
    return f"status-{group}.git" if layout == "per-group" else f"{layout}.git"


def run(agents: int, groups: int, writes: int, root: Path, layouts: Sequence[str] = LAYOUTS,
        fleet_reads: Sequence[str] = LAYOUTS) -> list[Cost]:
    fleet = [(agent_name(i), group_name(i, groups)) for i in range(agents)]
    config = BareRepo.create(root / "config.git")
    commit = config.commit({"routes.yaml": "routes: []\n"}, "config")
    started = time.perf_counter()
    bodies = {agent: render_status(status_document(report(agent, group, commit))) for agent, group in fleet}
    for layout in ("flat", "sharded"):
        BareRepo.create(root / f"{layout}.git")
        populate(root / f"{layout}.git", fleet, bodies, commit, sharded=layout == "sharded")
    for group in sorted({g for _, g in fleet}):
        BareRepo.create(root / f"status-{group}.git")
        populate(root / f"status-{group}.git", [a for a in fleet if a[1] == group], bodies, commit,
                 sharded=True)
    print(f"fleet of {agents:,} written in {time.perf_counter() - started:.1f}s", flush=True)
    costs: list[Cost] = []
    gate_group = group_name(0, groups)
    with Server(root) as server:
        for layout in layouts:
            costs += _reads(server, root, layout, gate_group, fleet, groups, layout in fleet_reads)
            costs.append(_writes(server, root, layout, fleet, writes, commit))
            print(json.dumps(asdict(costs[-1])), flush=True)
    return costs


def _reads(server: Server, root: Path, layout: str, gate_group: str, fleet: Sequence[tuple[str, str]],
           groups: int, whole: bool = True) -> list[Cost]:
    costs = []
    sharded = layout != "flat"
    reader = FleetReader(Remote.of(server.url(_repo_of(layout, gate_group))), root / f"gate-{layout}",
                         STATUS_REFS, group=gate_group if sharded else None, max_refs=len(fleet))
    members = [agent for agent, group in fleet if group == gate_group]
    for what in ("gate read, first", "gate read, nothing moved"):
        with server.measure(what, layout, 1) as out:
            out["entries"] = len(reader.read(first=members).group(gate_group))
        costs.append(out["cost"])
        print(json.dumps(asdict(costs[-1])), flush=True)
    if not whole:
        return costs
    names = [_repo_of(layout, group_name(g, groups)) for g in range(groups)] if layout == "per-group" \
        else [_repo_of(layout, "")]
    readers = [FleetReader(Remote.of(server.url(name)), root / f"fleet-{layout}-{n}", STATUS_REFS,
                           max_refs=len(fleet)) for n, name in enumerate(names)]
    for what in ("status --fleet, first", "status --fleet, nothing moved"):
        with server.measure(what, layout, 1) as out:
            out["entries"] = sum(len(r.read().entries) for r in readers)
        costs.append(out["cost"])
        print(json.dumps(asdict(costs[-1])), flush=True)
    return costs


def _writes(server: Server, root: Path, layout: str, fleet: Sequence[tuple[str, str]], writes: int,
            commit: str) -> Cost:
    """`writes` agents spread over the fleet each write a new status (8 at a time), as a running agent
    does: each writer wrote once before (not measured), so it knows its tip and pushes once."""
    step = max(1, len(fleet) // writes)
    chosen = fleet[::step][:writes]
    writers = {agent: WriteBack(Remote.of(server.url(_repo_of(layout, group))),
                                root / "writers" / layout / agent,
                                WriteBackOptions(agent=agent, group=group if layout != "flat" else None,
                                                 status_branch="", attempts=3))
               for agent, group in chosen}

    def write(item: tuple[str, str], result: str = "applied") -> bool:
        agent, group = item
        return writers[agent].publish_status(dataclasses.replace(report(agent, group, commit), result=result))

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(write, chosen))
    with server.measure("status write", layout, len(chosen)) as out, ThreadPoolExecutor(8) as pool:
        written = sum(pool.map(lambda item: write(item, "healed"), chosen))
    if written != len(chosen):
        print(f"{layout}: {len(chosen) - written} of {len(chosen)} writes failed", flush=True)
    return out["cost"]


def table(costs: Sequence[Cost]) -> str:
    lines = ["| operation | layout | n | conn/op | server sent B/op | server recv B/op | server CPU ms/op "
             "| wall s | client CPU s | entries |", "|---|---|---|---|---|---|---|---|---|---|"]
    for c in costs:
        lines.append(f"| {c.what} | {c.layout} | {c.count} | {c.connections:g} | {c.server_sent:,.0f} | "
                     f"{c.server_received:,.0f} | {c.server_cpu_ms:,.1f} | {c.seconds:.2f} | "
                     f"{c.client_cpu:.2f} | {c.entries:,} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None, *, say: Callable[[str], None] = print) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fleetsim", description=__doc__.split("\n")[0])
    parser.add_argument("--agents", type=int, default=10_000)
    parser.add_argument("--groups", type=int, default=50)
    parser.add_argument("--writes", type=int, default=300, help="status writes measured per layout")
    parser.add_argument("--layouts", default=",".join(LAYOUTS), help="of flat, sharded, per-group")
    parser.add_argument("--fleet-reads", default=",".join(LAYOUTS),
                        help="the layouts whose whole fleet is read (status --fleet: minutes at 10,000)")
    parser.add_argument("--out", type=Path, default=Path("bench/out/fleetsim-latest.json"))
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the servers, remove the repos
    root = Path(tempfile.mkdtemp(prefix="gitsync-fleetsim-"))
    try:
        costs = run(args.agents, args.groups, args.writes, root, args.layouts.split(","),
                    args.fleet_reads.split(","))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    say(table(costs))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"agents": args.agents, "groups": args.groups, "writes": args.writes,
                                    "load": os.getloadavg(), "costs": [asdict(c) for c in costs]}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
