"""The web view's speed: its pages at N routes (default 10,000), against the issue's 200 ms.

``python -m bench.webview`` serves a generated config repo (bench/generate.py) with git daemon, runs
`gitsync run --ui` as a real process against a gateway double in a child process, waits until the
commit is live, then times each page over HTTP from this process, as a browser's request is timed
(connect to the last byte): the overview, the first, a middle and the last items page, a search, an
item page. Cold is the first request after the commit went live (the view builds its index of the
items then); warm is the median (and p95) of the repetitions that follow. For scale, `/healthz` on
the same listener is timed too: the HTTP round trip alone. Item pages are also timed for another
route each time, and, with ``--viewers N``, asked by N clients at once. ``--routes-per-file`` puts
more routes in each file (``--routes 10000 --routes-per-file 10000``: one 2.6 MB file). ``--restarted``
also restarts the agent and times the first items page then: with nothing in the agent's memory, the
view renders the live commit itself once. ``--tree DIR`` runs the gitsync of another checkout.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from bench.double import DoubleProcess
from bench.generate import ROUTES_PER_FILE
from bench.run import ADMIN_KEY, ROOT, DaemonProcess, Fixture, add_tree_and_out, machine
from testkit.git import GitDaemon

TARGET = 0.200  # seconds: the overview and an items page at 10,000 routes
HTML = {"Accept": "text/html"}


def pages(routes: int) -> dict[str, str]:
    last = -(-(routes + routes // 100 * 3 + 1) // 100)  # routes, services, upstreams, consumers, a rule
    return {"overview": "/", "items, page 1": "/items", "items, middle page": f"/items?page={last // 2}",
            "items, last page": f"/items?page={last}", "items, search": f"/items?q=r{routes // 2}",
            "item page": f"/items/routes/r{routes // 3}", "healthz (floor)": "/healthz"}


def timed(client: httpx.Client, path: str) -> float:
    started = time.perf_counter()
    answer = client.get(path, headers=HTML)
    elapsed = time.perf_counter() - started
    if answer.status_code != 200:
        raise RuntimeError(f"{path} answered {answer.status_code}: {answer.text[:300]}")
    return elapsed


def summary(path: str, cold: float, samples: list[float]) -> dict[str, Any]:
    warm = sorted(samples)
    return {"path": path, "cold_s": cold, "p50_s": statistics.median(warm),
            "p95_s": warm[min(len(warm) - 1, int(0.95 * len(warm)))], "samples": warm}


def measure(base: str, routes: int, reps: int, viewers: int) -> dict[str, dict[str, Any]]:
    results: dict[str, dict[str, Any]] = {}
    with httpx.Client(base_url=base, timeout=120, trust_env=False) as client:
        for name, path in pages(routes).items():
            cold = timed(client, path)
            results[name] = summary(path, cold, [timed(client, path) for _ in range(reps)])
        distinct = item_paths(routes, reps + 1, offset=1)
        samples = [timed(client, path) for path in distinct]
        results["item page, another route each"] = summary(distinct[0], samples[0], samples[1:])
    if viewers > 1:
        results[f"item page, {viewers} viewers at once"] = at_once(base, routes, reps, viewers)
    return results


def item_paths(routes: int, count: int, offset: int = 0) -> list[str]:
    """`count` item pages of routes spread over the config (a prime stride), none asked before."""
    return [f"/items/routes/r{(offset + k * 7919) % routes}" for k in range(count)]


def at_once(base: str, routes: int, reps: int, viewers: int) -> dict[str, Any]:
    """`viewers` clients asking item pages at the same time, each a route of its own every time; the
    time of each page as its viewer saw it."""
    paths = item_paths(routes, viewers * reps, offset=routes // 2)

    def view(first: int) -> list[float]:
        with httpx.Client(base_url=base, timeout=300, trust_env=False) as client:
            return [timed(client, path) for path in paths[first::viewers]]

    with ThreadPoolExecutor(viewers) as pool:
        samples = [s for viewer in pool.map(view, range(viewers)) for s in viewer]
    return summary(paths[0], samples[0], samples)


def table(results: dict[str, dict[str, Any]], routes: int) -> str:
    lines = [f"{'page':<31} {'routes':>7} {'cold':>9} {'p50':>9} {'p95':>9}  target", "-" * 81]
    for name, r in results.items():
        target = "" if "floor" in name or name.startswith("item page") else (
            f"p50 ≤ {TARGET * 1000:.0f} ms " + ("met" if r["p50_s"] <= TARGET else "MISSED"))
        lines.append(f"{name:<31} {routes:>7,} {r['cold_s'] * 1000:>7.1f}ms {r['p50_s'] * 1000:>7.1f}ms "
                     f"{r['p95_s'] * 1000:>7.1f}ms  {target}".rstrip())
    return "\n".join(lines)


def run(routes: int, reps: int, restarted: bool, out: Path, *, routes_per_file: int = ROUTES_PER_FILE,
        viewers: int = 1, tree: Path = ROOT) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="gitsync-bench-webview-"))
    report: dict[str, Any] = {"machine": machine(), "routes": routes, "reps": reps,
                              "routes_per_file": routes_per_file, "viewers": viewers, "tree": str(tree)}
    try:
        served = tmp / "served"
        served.mkdir()
        work = tmp / "work"
        work.mkdir()
        with GitDaemon(served) as daemon, DoubleProcess(ADMIN_KEY) as gateway:
            fixture = Fixture(routes, work, daemon, routes_per_file=routes_per_file)
            state = work / "state"
            with DaemonProcess(fixture, gateway.url, state, drift_interval=3600, webhook=False,
                               extra=["--ui"], tree=tree) as agent:
                agent.wait_ready()
                report["results"] = measure(f"http://127.0.0.1:{agent.port}", routes, reps, viewers)
            if restarted:
                with DaemonProcess(fixture, gateway.url, state, drift_interval=3600, webhook=False,
                                   extra=["--ui"], tree=tree) as agent:
                    agent.wait_ready()
                    with httpx.Client(base_url=f"http://127.0.0.1:{agent.port}", timeout=300,
                                      trust_env=False) as client:
                        report["restarted_first_items_s"] = timed(client, "/items")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    report["table"] = table(report["results"], routes)
    out.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    for name in (f"webview-{stamp}.json", "webview-latest.json"):
        (out / name).write_text(json.dumps(report, indent=2) + "\n")
    return report


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.webview", description=__doc__.split("\n")[0])
    parser.add_argument("--routes", type=int, default=10_000,
                        help="routes in the config (default %(default)s)")
    parser.add_argument("--reps", type=int, default=20, help="timed requests per page after the first "
                        "(default %(default)s)")
    parser.add_argument("--restarted", action="store_true", help="also time the first items page of a "
                        "restarted agent (the view renders the commit itself)")
    parser.add_argument("--routes-per-file", type=int, default=ROUTES_PER_FILE,
                        help="routes in each route file (default %(default)s; --routes N for one file)")
    parser.add_argument("--viewers", type=int, default=1, help="also time item pages asked by this many "
                        "clients at once, --reps pages each (default %(default)s: not)")
    add_tree_and_out(parser)
    args = parser.parse_args(argv)
    report = run(args.routes, args.reps, args.restarted, args.out, routes_per_file=args.routes_per_file,
                 viewers=args.viewers, tree=args.tree.resolve())
    m = report["machine"]
    print(f"gitsync of {report['tree']} on {m['cpus']} CPUs, Python {m['python']}; {m['date']}; "
          f"{args.reps} requests per page after the first; {args.routes_per_file:,} routes per file")
    print(report["table"])
    if "restarted_first_items_s" in report:
        print(f"first items page after a restart (the view renders the commit): "
              f"{report['restarted_first_items_s']:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
