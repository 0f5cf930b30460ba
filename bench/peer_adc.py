"""gitsync beside ADC's CLI (``adc sync``), on two running gateways, in one run.

    python -m bench.peer_adc --gateway http://127.0.0.1:9180 --proxy http://127.0.0.1:9080 \\
        --peer-gateway http://127.0.0.1:9280 --peer-proxy http://127.0.0.1:9380 \\
        --admin-key-file admin-key --adc /path/to/adc/dist/apps/cli/main.cjs [--routes 10000] [--reps 5]

Both tools are given the same config: the bench's fixture (bench/generate.py: N routes in N/100
services, each route with ``limit-count`` and ``proxy-rewrite``), gitsync as its git repo (over
``git daemon``), ADC as one ``adc.yaml`` written from the same commit (services holding their
routes and upstream, consumers, global rules). gitsync syncs `--gateway`, ADC `--peer-gateway`
(each tool finds its own writes there: ADC diffs against what it dumps, gitsync against its state
dir). Measured per repetition, the tools' order alternating:

- **first sync**: the gateway emptied (a PUT of an empty config), then ``gitsync sync --once`` from an
  empty state dir, or ``adc sync``: the process's wall time, its start → the data plane serving the
  commit, and its peak RSS (GNU ``time -v``). The floor: ``git clone --bare`` + one PUT of the whole
  config (gitsync's payload) → served;
- **one-route change**: a new commit changing one route file; ``gitsync sync --once`` with its state
  dir kept, and ``adc sync`` of the file written anew: the same three figures. The floor: a bare PUT
  of the peer gateway's live config with one route changed → its 202, and → served.

With ``--artifact``, a third side of the first sync: the fixture's commit published once (``gitsync
publish``, as CI would, outside the timings) into a real registry on 127.0.0.1 (Debian's
``docker-registry``, testkit/registry.py), then ``gitsync sync --once`` from an empty state dir with
``repo = oci://…``: one manifest HEAD, the artifact pulled by digest and verified, no render. It is
synced to `--gateway` (as gitsync's git side is).

``--adc`` is a node script (``.js``, ``.cjs``, ``.mjs``: run with ``node``) or an executable; ADC is
not on the npm registry, so without ``--adc`` gitsync and the floors alone are measured. The
gateways' whole configs are replaced. JSON in ``bench/out/peer-adc-latest.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from bench.run import (
    OUT,
    PROBE_EVERY,
    DataPlane,
    Fixture,
    FloorClient,
    FloorTwin,
    machine,
    process_env,
    write_report,
)
from gitsync import log as gslog
from testkit.artifacts import Publisher, registry_env
from testkit.git import GitDaemon, git
from testkit.registry import Registry

TIME = "/usr/bin/time"
SERVED_TIMEOUT = 120.0


# ---------------------------------------------------------------------------------------------------
# ADC's input, from the fixture's commit


def adc_config(files: dict[str, bytes], parsed: dict[bytes, Any]) -> dict[str, Any]:
    """The fixture's config in ADC's format: each service with its upstream and its routes inside.
    `parsed` memoizes each file's YAML by its bytes (only a changed file is parsed again)."""
    yaml = YAML(typ="safe", pure=False)
    kinds: dict[str, list[dict[str, Any]]] = {}
    for path in sorted(files):
        data = files[path]
        if data not in parsed:
            parsed[data] = yaml.load(data)
        for kind, items in (parsed[data] or {}).items():
            kinds.setdefault(kind, []).extend(items)
    upstreams = {u["id"]: {k: v for k, v in u.items() if k != "id"} for u in kinds.get("upstreams", [])}
    services: dict[str, dict[str, Any]] = {}
    for s in kinds.get("services", []):
        services[s["id"]] = {"name": s["id"], "upstream": upstreams[s["upstream_id"]],
                             "plugins": s.get("plugins", {}), "routes": []}
    for r in kinds.get("routes", []):
        route = {"name": r["id"], "uris": [r["uri"]], "methods": r["methods"],
                 "plugins": r.get("plugins", {})}
        services[r["service_id"]]["routes"].append(route)
    rules = {name: conf for rule in kinds.get("global_rules", []) for name, conf in rule["plugins"].items()}
    return {"services": list(services.values()), "consumers": kinds.get("consumers", []),
            "global_rules": rules}


class AdcFile:
    """``adc.yaml`` written from the fixture's tip (a mirror of its own), outside the timings."""

    def __init__(self, fx: Fixture, path: Path) -> None:
        self.twin = FloorTwin(fx)
        self.path = path
        self.parsed: dict[bytes, Any] = {}

    def write(self) -> None:
        tip = self.twin.source.fetch()
        config = adc_config(dict(self.twin.source.read(tip).files), self.parsed)
        self.path.write_text(json.dumps(config))  # JSON is YAML: ADC reads it as such


# ---------------------------------------------------------------------------------------------------
# A process, timed until the data plane serves the commit


@dataclass
class Run:
    """One process: its wall time, its start → served, its peak RSS."""

    wall: float
    served: float
    rss_mb: float


def run_until_served(args: Sequence[str], env: dict[str, str], cwd: Path, plane: DataPlane,
                     probe: tuple[str, int], log: Path) -> Run:
    """Start `args` under GNU time; watch the data plane from its start until it serves `probe`."""
    report = log.with_suffix(".time")
    started = time.monotonic()
    with log.open("w") as err:
        proc = subprocess.Popen([TIME, "-v", "-o", str(report), *args], env=env, cwd=cwd,
                                stdout=err, stderr=subprocess.STDOUT)
        served_at = None
        ended_at = None
        deadline = started + SERVED_TIMEOUT
        while served_at is None and time.monotonic() < deadline:
            if ended_at is None and proc.poll() is not None:
                ended_at = time.monotonic()
                if proc.returncode != 0:
                    raise RuntimeError(f"{args[0]} exited {proc.returncode}; see {log}")
            if plane.serves(*probe):
                served_at = time.monotonic()
                break
            time.sleep(PROBE_EVERY)
        proc.wait(timeout=SERVED_TIMEOUT)
        ended_at = ended_at or time.monotonic()
    if proc.returncode != 0:
        raise RuntimeError(f"{args[0]} exited {proc.returncode}; see {log}")
    if served_at is None:
        raise RuntimeError(f"{plane.url}{probe[0]} never served limit {probe[1]}; see {log}")
    rss = next(int(line.split(":")[1]) for line in report.read_text().splitlines()
               if "Maximum resident set size" in line)
    return Run(ended_at - started, served_at - started, rss / 1024)


# ---------------------------------------------------------------------------------------------------
# The run


@dataclass
class Side:
    """One tool's (or the floor's) samples of one scenario."""

    wall: list[float] = field(default_factory=list)
    served: list[float] = field(default_factory=list)
    rss_mb: list[float] = field(default_factory=list)

    def add(self, run: Run) -> None:
        self.wall.append(run.wall)
        self.served.append(run.served)
        self.rss_mb.append(run.rss_mb)

    def summary(self) -> dict[str, Any]:
        def med(values: list[float]) -> float | None:
            return round(statistics.median(values), 4) if values else None

        return {"wall_s": med(self.wall), "served_s": med(self.served), "rss_mb": med(self.rss_mb),
                "samples": {"wall_s": self.wall, "served_s": self.served, "rss_mb": self.rss_mb}}


@dataclass
class PeerRun:
    """Everything one run needs: the fixture, the two gateways and their data planes, ADC."""

    fx: Fixture
    ours: FloorClient
    peer: FloorClient
    ours_plane: DataPlane
    peer_plane: DataPlane
    adc: list[str] | None
    adc_file: AdcFile
    urls: tuple[str, str]
    artifact: list[str] | None = None  # `sync --once` flags of the artifact side, with its env
    artifact_env: dict[str, str] = field(default_factory=dict)

    def empty(self, admin: FloorClient, plane: DataPlane) -> None:
        """Empty a gateway, and wait until its data plane serves nothing of the commit any more."""
        admin.put_raw(b"{}")
        plane.wait_dropped(*self.fx.probe())

    def gitsync(self, state: Path, log: Path) -> Run:
        args = [sys.executable, "-m", "gitsync", "sync", "--once", "-v",
                *self.fx.gitsync_args(self.urls[0], state)]
        return run_until_served(args, process_env(), self.fx.work, self.ours_plane, self.fx.probe(), log)

    def from_artifact(self, state: Path, log: Path) -> Run:
        assert self.artifact is not None
        args = [sys.executable, "-m", "gitsync", "sync", "--once", "-v", *self.artifact,
                "--gateway", self.urls[0], "--admin-key-file", str(self.fx.key_file),
                "--state-dir", str(state), "--no-writeback"]
        return run_until_served(args, {**process_env(), **self.artifact_env}, self.fx.work, self.ours_plane,
                                self.fx.probe(), log)

    def adc_sync(self, log: Path) -> Run:
        assert self.adc is not None
        env = {**os.environ, "ADC_BACKEND": "apisix-standalone", "ADC_SERVER": self.urls[1],
               "ADC_TOKEN": self.fx.admin_key}  # not argv: other users can read a command line
        cwd = self.fx.work / "adc-cwd"
        cwd.mkdir(exist_ok=True)
        return run_until_served([*self.adc, "sync", "-f", str(self.adc_file.path)], env, cwd,
                                self.peer_plane, self.fx.probe(), log)

    def floor_first(self, body: bytes) -> tuple[Run, float]:
        """`git clone --bare` + a PUT of the whole config → served, on the peer's gateway; its 202."""
        clone = self.fx.work / "floor-clone.git"
        shutil.rmtree(clone, ignore_errors=True)
        started = time.monotonic()
        git("clone", "--bare", "-q", self.fx.url, str(clone))
        accepted = self.peer.put_timed(body, f"floor-{time.time_ns()}")
        at = self.peer_plane.wait_served(*self.fx.probe(), timeout=SERVED_TIMEOUT)
        if at is None:
            raise RuntimeError("floor: the first PUT was never served")
        return Run(accepted - started, at - started, 0.0), accepted - started

    def floor_change(self) -> tuple[Run, float]:
        """A bare PUT of the peer gateway's live config with the changed route's limit set apart."""
        live = self.peer.live()
        path, limit = self.fx.probe()
        name = path.split("/")[4]  # /api/v1/svcN/rM/probe: the route named rM (ADC's name)
        floor_limit = limit + 100_000
        for route in live.get("routes") or []:
            if route.get("name") == name or route.get("id") == name:
                route["plugins"]["limit-count"]["count"] = floor_limit
                route["modifiedIndex"] = route.get("modifiedIndex", 0) + 1  # APISIX reloads a changed index
        body = {k: v for k, v in live.items() if not k.endswith("_conf_version") and not k.startswith("X-")}
        data = json.dumps(body, separators=(",", ":")).encode()
        started = time.monotonic()
        accepted = self.peer.put_timed(data, f"floor-{time.time_ns()}")
        at = self.peer_plane.wait_served(path, floor_limit, timeout=SERVED_TIMEOUT)
        if at is None:
            raise RuntimeError("floor: the change was never served")
        return Run(accepted - started, at - started, 0.0), accepted - started


def published(fx: Fixture, registry: Registry, directory: Path) -> tuple[list[str], dict[str, str]]:
    """The fixture's tip published into `registry` (``gitsync publish``, as CI would, with the key made in
    `directory` the first time); the flags and the environment of an agent pulling it."""
    publisher = Publisher(directory / "publisher", directory / "publisher.signers")
    if not publisher.key.exists():
        publisher = Publisher.make(directory, f"main@{fx.url}")
    env = registry_env(directory)
    done = subprocess.run([sys.executable, "-m", "gitsync", "publish", "--repo", fx.url, "--to",
                           registry.url("config"), "--key", str(publisher.key), "--state-dir",
                           str(directory / "state")], env={**process_env(), **env}, capture_output=True,
                          text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"publish failed: {done.stderr[-2000:]}")
    return ["--repo", registry.url("config"), "--artifact-signers", str(publisher.signers),
            "--artifact-repo", fx.url], env


def measure(run: PeerRun, reps: int, say: Callable[[str], None], changes: bool = True) -> dict[str, Any]:
    """First syncs, then one-route changes, each tool and the floor per repetition."""
    first = {"gitsync": Side(), "artifact": Side(), "adc": Side(), "floor": Side()}
    change = {"gitsync": Side(), "adc": Side(), "floor": Side()}
    work, state = run.fx.work, run.fx.work / "gitsync-state"
    full = json.dumps(FloorTwin(run.fx).payload(), separators=(",", ":")).encode()
    run.adc_file.write()
    for rep in range(reps):
        say(f"first sync {rep + 1}/{reps}")

        def ours_first(rep: int = rep) -> None:
            run.empty(run.ours, run.ours_plane)
            shutil.rmtree(state, ignore_errors=True)
            first["gitsync"].add(run.gitsync(state, work / f"gitsync-first-{rep}.log"))

        def adc_first(rep: int = rep) -> None:
            run.empty(run.peer, run.peer_plane)
            first["adc"].add(run.adc_sync(work / f"adc-first-{rep}.log"))

        def floor_first() -> None:
            run.empty(run.peer, run.peer_plane)
            first["floor"].add(run.floor_first(full)[0])

        def artifact_first(rep: int = rep) -> None:
            run.empty(run.ours, run.ours_plane)
            shutil.rmtree(state, ignore_errors=True)
            first["artifact"].add(run.from_artifact(state, work / f"artifact-first-{rep}.log"))

        sides = [ours_first, floor_first] + ([adc_first] if run.adc else []) + \
            ([artifact_first] if run.artifact else [])
        for side in sides if rep % 2 == 0 else reversed(sides):
            side()
    if run.adc and changes:  # the peer's gateway as ADC writes it: ADC cannot diff items it did not name
        run.peer.put_raw(b"{}")
        run.adc_sync(work / "adc-settle.log")
    for rep in range(reps if changes else 0):
        say(f"one-route change {rep + 1}/{reps}")
        run.fx.commit()
        run.adc_file.write()

        def ours_change(rep: int = rep) -> None:
            change["gitsync"].add(run.gitsync(state, work / f"gitsync-change-{rep}.log"))

        def adc_change(rep: int = rep) -> None:
            change["adc"].add(run.adc_sync(work / f"adc-change-{rep}.log"))

        sides = [ours_change] + ([adc_change] if run.adc else [])
        for side in sides if rep % 2 == 0 else reversed(sides):
            side()
        change["floor"].add(run.floor_change()[0])  # after ADC's: it changes one route ADC then fixes
    return {"first": {k: v.summary() for k, v in first.items() if v.wall},
            "change": {k: v.summary() for k, v in change.items() if v.wall},
            "put_bytes": len(full)}


def table(results: dict[str, Any]) -> str:
    lines = [f"{'scenario':<22} {'tool':<8} {'wall':>9} {'→ served':>9} {'peak RSS':>9}  gitsync ÷ ADC",
             "-" * 80]
    for scenario, title in (("first", "first sync"), ("change", "one-route change")):
        sides = results[scenario]
        for tool, side in sides.items():
            ratio = ""
            if tool in ("gitsync", "artifact") and "adc" in sides:
                ratio = (f"wall {side['wall_s'] / sides['adc']['wall_s']:.2f}×, served "
                         f"{side['served_s'] / sides['adc']['served_s']:.2f}×")
            rss = f"{side['rss_mb']:.0f} MB" if side["rss_mb"] else "-"
            wall = "(202)" if tool == "floor" else ""
            lines.append(f"{title:<22} {tool:<8} {side['wall_s']:>8.3f}s {side['served_s']:>8.3f}s "
                         f"{rss:>9}  {ratio}{wall}".rstrip())
    return "\n".join(lines)


def adc_command(given: str | None) -> list[str] | None:
    if given is None:
        return None
    if given.endswith((".js", ".cjs", ".mjs")):
        node = shutil.which("node")
        if node is None:
            raise SystemExit("--adc: a node script, and no node on PATH")
        return [node, given]
    return [given]


def main(argv: Sequence[str] | None = None) -> int:
    global SERVED_TIMEOUT
    parser = argparse.ArgumentParser(prog="python -m bench.peer_adc", description=__doc__.split("\n")[0])
    parser.add_argument("--gateway", required=True, metavar="URL", help="gitsync's gateway (Admin API)")
    parser.add_argument("--proxy", required=True, metavar="URL", help="its data plane")
    parser.add_argument("--peer-gateway", required=True, metavar="URL",
                        help="ADC's gateway (and the floors')")
    parser.add_argument("--peer-proxy", required=True, metavar="URL", help="its data plane")
    parser.add_argument("--admin-key-file", required=True, type=Path, help="the admin key of both gateways")
    parser.add_argument("--adc", help="ADC's CLI: a node script or an executable (none: gitsync and the "
                        "floors alone)")
    parser.add_argument("--artifact", action="store_true",
                        help="measure a first sync from an artifact in a local registry too")
    parser.add_argument("--first-only", action="store_true", help="first syncs alone (no one-route change)")
    parser.add_argument("--served-timeout", type=float, default=SERVED_TIMEOUT, metavar="SECONDS",
                        help=f"how long a process may take to be served (default {SERVED_TIMEOUT:g})")
    parser.add_argument("--routes", type=int, default=10_000)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--keep", action="store_true", help="keep the work files (repos, logs)")
    args = parser.parse_args(argv)
    if args.gateway.rstrip("/") == args.peer_gateway.rstrip("/"):
        parser.error("--peer-gateway must be another gateway than --gateway")
    key = args.admin_key_file.read_text().strip()
    adc = adc_command(args.adc)
    SERVED_TIMEOUT = args.served_timeout

    def say(message: str) -> None:
        print(f"… {message}", file=sys.stderr, flush=True)

    gslog.setup(verbose=0, stream=open(os.devnull, "w"))  # noqa: SIM115 - this process's own mirror's logs
    started = time.monotonic()
    report: dict[str, Any] = {"machine": machine(), "routes": args.routes, "reps": args.reps,
                              "adc": args.adc, "gateways": [args.gateway, args.peer_gateway]}
    tmp = Path(tempfile.mkdtemp(prefix="gitsync-peer-"))
    planes = (DataPlane(args.proxy.rstrip("/")), DataPlane(args.peer_proxy.rstrip("/")))
    ours, peer = FloorClient(args.gateway.rstrip("/"), key), FloorClient(args.peer_gateway.rstrip("/"), key)
    try:
        (tmp / "served").mkdir()
        with GitDaemon(tmp / "served") as daemon:
            work = tmp / "work"
            work.mkdir()
            fx = Fixture(args.routes, work, daemon, key)
            run = PeerRun(fx, ours, peer, *planes, adc, AdcFile(fx, work / "adc.yaml"),
                          (args.gateway.rstrip("/"), args.peer_gateway.rstrip("/")))
            with contextlib.ExitStack() as stack:
                if args.artifact:
                    say("publishing the fixture's commit into a local registry")
                    run.artifact, run.artifact_env = published(fx, stack.enter_context(
                        Registry(tmp / "registry", auth=True)), tmp / "publisher")
                report["results"] = measure(run, args.reps, say, changes=not args.first_only)
    finally:
        ours.close()
        peer.close()
        for plane in planes:
            plane.close()
        if args.keep:
            say(f"work files kept in {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    report["table"] = table(report["results"])
    write_report(report, args.out, started, "peer-adc", "peer-adc-latest.json")
    m = report["machine"]
    print(f"gitsync {m['commit']} beside {args.adc or '(no ADC given)'}; {args.routes:,} routes; "
          f"{m['date']}; load {m['loadavg'][0]:.1f} → {m['loadavg_end'][0]:.1f}; {report['seconds']:.0f} s; "
          f"medians of {args.reps}")
    print(report["table"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
