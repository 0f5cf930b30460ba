"""A config commit reaching a fleet of light agents: what one git server and one OCI registry pay for it.

    python -m bench.fleetload                                  # 10,000 agents, 1,000 routes
    python -m bench.fleetload --agents 2000 --routes 10000 --concurrency 16

No daemons: each agent is a light client doing what an agent's source does, on its own connection
(an agent is another host), `--concurrency` at once, against servers on 127.0.0.1:

- **git**: a poll (the ref advertisement, dulwich's ``get_refs``), then a fetch of the new commit
  offering the agent's current one as a have (``fetch_pack``: the pack of the change), from a real
  ``git daemon`` behind `testkit.gitservers.GitGate` (connections and bytes counted);
- **registry**: a poll (a manifest HEAD, gitsync's `RegistryClient.head_manifest`), then the pull of
  the new artifact by digest (the manifest, the signature and the artifact blob, each checked against
  its digest), from a real ``docker-registry`` (bytes counted by the client: a relay in Python would
  be the bottleneck at these volumes).

The artifact is a real one: the generated repo's new commit rendered and signed by `gitsync publish`'s
code. Per agent: connections, bytes the server sent, the server's CPU (``/proc/<pid>/stat``, with its
reaped children for git daemon), and the wall time of the whole wave. Extrapolation to 100,000 agents
is on paper in bench/README.md (the costs are per agent: they scale linearly).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from dulwich.client import TCPGitClient

from bench.fleetsim import Server, server_cpu
from bench.generate import config_files
from gitsync.artifact.publish import built_artifact, push_oci
from gitsync.artifact.registry import Reference, RegistryClient, layers_of
from gitsync.settings import load
from testkit.artifacts import Publisher
from testkit.gitservers import BareRepo
from testkit.registry import Registry


@dataclass
class Wave:
    """What one operation of every agent cost the server, per agent."""

    server: str
    what: str
    agents: int
    connections: float
    server_sent: float  # bytes
    server_cpu_ms: float
    seconds: float  # wall, the whole wave
    failed: int = 0


class _Have:
    """A graph walker offering one commit the agent has (an agent's mirror holds the last one)."""

    def __init__(self, have: bytes) -> None:
        self._haves = [have]

    def ack(self, sha: bytes) -> None:
        self._haves = []

    def nak(self) -> None:
        return None

    def next(self) -> bytes | None:
        return self._haves.pop() if self._haves else None

    __next__ = next


def _wave(agents: int, concurrency: int, one: Callable[[int], int]) -> tuple[int, int, float]:
    """Run `one` for every agent; (bytes the clients counted, failures, seconds)."""
    counted, failed, lock = [0], [0], threading.Lock()

    def run(index: int) -> None:
        try:
            size = one(index)
        except Exception:  # a failure is counted, the wave goes on
            with lock:
                failed[0] += 1
            return
        with lock:
            counted[0] += size

    started = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(run, range(agents)))
    return counted[0], failed[0], time.perf_counter() - started


def git_waves(server: Server, name: str, old: str, new: str, agents: int, concurrency: int) -> list[Wave]:
    port = int(server.url(name).split(":")[2].split("/")[0])
    path = "/" + name

    def poll(_: int) -> int:
        TCPGitClient("127.0.0.1", port=port).get_refs(path.encode())
        return 0

    def fetch(_: int) -> int:
        sizes = [0]

        def wants(refs: Any, depth: Any = None) -> list[bytes]:
            return [new.encode()]

        def data(chunk: bytes) -> int:
            sizes[0] += len(chunk)
            return len(chunk)

        TCPGitClient("127.0.0.1", port=port).fetch_pack(path.encode(), wants, _Have(old.encode()), data)
        return sizes[0]

    waves = []
    for what, one in (("poll, nothing new", poll), ("fetch the new commit", fetch)):
        with server.measure(what, "git", agents) as out:
            _, failed, seconds = _wave(agents, concurrency, one)
        cost = out["cost"]
        waves.append(Wave("git daemon", what, agents, cost.connections, cost.server_sent, cost.server_cpu_ms,
                          round(seconds, 2), failed))
    return waves


def registry_waves(registry: Registry, tag: str, agents: int, concurrency: int) -> list[Wave]:
    reference = Reference.parse(registry.url("config", tag))

    def poll(_: int) -> int:
        client = RegistryClient(reference, timeout=60)
        try:
            client.head_manifest(tag)
        finally:
            client.close()
        return 0

    def pull(_: int) -> int:
        client = RegistryClient(reference, timeout=60)
        try:
            digest = client.head_manifest(tag)
            assert digest is not None
            _, manifest = client.manifest(digest)
            layers = layers_of(manifest)
            signature = client.blob(layers.signature, layers.signature_size, 1 << 20)
            artifact = client.blob(layers.artifact, layers.artifact_size, 1 << 30)
        finally:
            client.close()
        return len(manifest) + len(signature) + len(artifact)

    waves = []
    for what, one in (("poll, nothing new", poll), ("pull the new artifact", pull)):
        cpu = server_cpu(registry.pid)
        counted, failed, seconds = _wave(agents, concurrency, one)
        waves.append(Wave("docker-registry", what, agents, 1.0, counted / max(1, agents - failed),
                          (server_cpu(registry.pid) - cpu) * 1000 / agents, round(seconds, 2), failed))
    return waves


def run(agents: int, routes: int, concurrency: int, root: Path) -> tuple[list[Wave], dict[str, int]]:
    repo = BareRepo.create(root / "git" / "config.git")
    old = repo.commit(config_files(routes), "the fleet's current commit")
    changed = "routes/r00000.yaml"
    new = repo.commit({changed: config_files(routes, revision=1)[changed]}, "one route changed")
    with Server(root / "git") as server:
        publisher = Publisher.make(root / "keys", f"main@{server.url('config.git')}")
        settings = load(flags={"repo": server.url("config.git"), "state_dir": str(root / "publisher")},
                        env={})
        built = built_artifact(settings, publisher.key)
        waves = git_waves(server, "config.git", old, new, agents, concurrency)
    with Registry(root / "registry", auth=False) as registry:
        push_oci(built, registry.url("config", "main"), settings)
        waves += registry_waves(registry, "main", agents, concurrency)
    return waves, {"artifact_bytes": len(built.artifact), "signature_bytes": len(built.signature)}


def table(waves: Sequence[Wave]) -> str:
    lines = ["| server | operation | agents | connections / agent | bytes sent / agent "
             "| server CPU ms / agent | wave wall s | failed |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    lines += [f"| {w.server} | {w.what} | {w.agents:,} | {w.connections:.2f} | {w.server_sent:,.0f} | "
              f"{w.server_cpu_ms:.2f} | {w.seconds:,.1f} | {w.failed} |" for w in waves]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None, *, say: Callable[[str], None] = print) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fleetload", description=__doc__.split("\n")[0])
    parser.add_argument("--agents", type=int, default=10_000)
    parser.add_argument("--routes", type=int, default=1_000,
                        help="routes in the config (the artifact's size)")
    parser.add_argument("--concurrency", type=int, default=32, help="agents at once")
    parser.add_argument("--out", type=Path, default=Path("bench/out/fleetload-latest.json"))
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="gitsync-fleetload-") as tmp:
        waves, sizes = run(args.agents, args.routes, args.concurrency, Path(tmp))
    say(f"{args.agents:,} agents, {args.routes:,} routes (artifact {sizes['artifact_bytes']:,} bytes, "
        f"signature {sizes['signature_bytes']:,}), {args.concurrency} at once")
    say(table(waves))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, **sizes,
                                    "waves": [asdict(w) for w in waves]}, indent=1))
    return 0 if not any(w.failed for w in waves) else 1


if __name__ == "__main__":
    raise SystemExit(main())
