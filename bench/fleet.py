"""The status channel's cost to the git server: requests and bytes per agent, per operation.

    python -m bench.fleet                 # fleets of 10 and 100 agents, over git:// and smart HTTP
    python -m bench.fleet --agents 300    # another size

A fleet of N writers (`WriteBack`, one status ref each) and a reader (`FleetReader`) run in this
process against a real server on 127.0.0.1: ``git daemon`` behind `testkit.gitservers.GitGate` (which
counts connections and bytes per service) and ``git http-backend`` (`HttpGitServer`, which counts
requests and body bytes per service). Each row is what the server saw for one operation of one
agent, measured by the difference of those counters around it:

- a poll with nothing due (the daemon calls `WriteBack.refresh` on every poll);
- a heartbeat (every `status_heartbeat`): the status ref's tip, with a fresh commit time;
- a status change (a commit applied): the status ref, then the view (the status branch) rebuilt
  from every ref that moved since this writer last rebuilt it (first: all of them);
- a read of the fleet (every poll of an agent with `after_group`): nothing moved since the last
  read; one agent's ref moved; every agent's ref moved (each wrote a heartbeat).

The figures are counts and bytes, not times: they do not depend on the machine's load.
"""

from __future__ import annotations

import argparse
import contextlib
import tempfile
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

from gitsync.source.transport import Remote
from gitsync.writeback.fleet import FleetReader
from gitsync.writeback.publisher import WriteBack, WriteBackOptions
from gitsync.writeback.wire import GatewayStatus, StatusReport
from testkit.gitservers import BareRepo, GitDaemon, GitGate, HttpGitServer, Traffic


def _report(agent: str, commit: str, result: str = "applied") -> StatusReport:
    gateways = [GatewayStatus(url=f"http://10.0.{i}.1:9180", status="applied", versions={"routes": 3},
                              digest="d" * 64, counts={"routes": 40, "upstreams": 4}, pruned={})
                for i in range(2)]
    return StatusReport(agent=agent, commit=commit, subject="routes: one more", result=result,
                        gateways=gateways, time=datetime.now(UTC), duration=0.2, group="main",
                        heartbeat=60.0)


def _total(traffic: dict[str, Traffic]) -> Traffic:
    return Traffic(sum(t.requests for t in traffic.values()), sum(t.sent for t in traffic.values()),
                   sum(t.received for t in traffic.values()))


def _delta(server: tuple[dict[str, Traffic], Callable[[], None]], action: Callable[[], object]) -> Traffic:
    """What the server saw while `action` ran (its connections relayed to their end: `settle`)."""
    traffic, settle = server
    settle()
    before = _total(traffic)
    action()
    settle()
    after = _total(traffic)
    return Traffic(after.requests - before.requests, after.sent - before.sent,
                   after.received - before.received)


@contextlib.contextmanager
def _server(kind: str, root: Path) -> Iterator[tuple[str, tuple[dict[str, Traffic], Callable[[], None]]]]:
    """The URL of the fleet's repo, the live traffic counters of its server, and how to wait for them."""
    if kind == "git":
        with GitDaemon(root, receive_pack=True) as daemon, GitGate(daemon.port) as gate:
            yield gate.url("fleet.git"), (gate.traffic, gate.settle)
    else:
        with HttpGitServer(root) as server:
            yield server.url("fleet.git"), (server.traffic, lambda: None)


def measure(kind: str, agents: int) -> list[tuple[str, Traffic]]:
    with tempfile.TemporaryDirectory(prefix="bench-fleet-") as tmp:
        root = Path(tmp)
        repo = BareRepo.create(root / "fleet.git")
        commit = repo.commit({"routes.yaml": "routes: []\n"}, "config")
        with _server(kind, root) as (url, traffic):
            names = [f"edge-{i:03d}" for i in range(agents)]
            writers = [WriteBack(Remote.of(url), root / "work" / n, WriteBackOptions(agent=n, heartbeat=1.0))
                       for n in names]
            for name, writer in zip(names, writers, strict=True):  # the fleet as it stands
                writer.publish_status(_report(name, commit))
            reader = FleetReader(Remote.of(url), root / "reader")
            rows = [("first read of the fleet (all new to this reader)", _delta(traffic, reader.read))]
            rows.append(("read of the fleet, nothing moved", _delta(traffic, reader.read)))
            first, last = writers[0], writers[-1]
            time.sleep(1.1)  # the heartbeat period of these writers
            rows.append(("heartbeat (refresh when due)", _delta(traffic, first.refresh)))
            quiet = WriteBack(Remote.of(url), first.work_dir,  # the same agent, a long heartbeat
                              WriteBackOptions(agent=names[0], heartbeat=3600))
            rows.append(("poll with nothing due (refresh)", _delta(traffic, quiet.refresh)))
            rows.append(("read of the fleet, one agent moved", _delta(traffic, reader.read)))
            changed = repo.commit({"routes.yaml": "routes: [1]\n"}, "change")
            rows.append(("status change, first: the ref, the view (all new)", _delta(
                traffic, lambda: first.publish_status(_report(names[0], changed)))))
            time.sleep(1.1)
            for writer in writers[1:]:
                writer.refresh()
            rows.append((f"read of the fleet, all {agents} moved (heartbeats)", _delta(traffic, reader.read)))
            rows.append(("status change, later: the ref, the view (moved only)", _delta(
                traffic, lambda: last.publish_status(_report(names[-1], changed)))))
            assert len(reader.read()) == agents
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fleet", description=__doc__.splitlines()[0])
    parser.add_argument("--agents", default="10,100", help="fleet sizes, comma-separated (default 10,100)")
    args = parser.parse_args(argv)
    for agents in (int(n) for n in args.agents.split(",")):
        for kind, unit in (("git", "connections"), ("http", "requests")):
            print(f"\n{agents} agents, {'git://' if kind == 'git' else 'smart HTTP'} "
                  f"({unit}; bytes client→server / server→client)")
            for what, cost in measure(kind, agents):
                print(f"  {what:<52} {cost.requests:>3} {unit:<11} {cost.sent:>8,} / {cost.received:>8,} B")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
