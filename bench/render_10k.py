"""Render 10,000 route files: cold, after a one-file change, and the parse-only floor.

    PYTHONPATH=. python bench/render_10k.py [--files 10000] [--repeat 3]

Prints medians in seconds of CPU time (this process; wall time is noisy on a shared
machine) and of wall time. The floor is ruamel.yaml's C safe loader over the same
bytes (what parsing alone costs); gitsync's own event loader is shown beside it.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from ruamel.yaml import YAML

from gitsync.render import ParseCache, RenderOptions, payload_json, render
from gitsync.render.load import parse


def route_file(i: int) -> bytes:
    return f"""routes:
  - id: route-{i}
    name: route number {i}
    uris: [/api/v{i}, /api/v{i}/*]
    methods: [GET, POST]
    hosts: [api{i % 50}.example.com]
    upstream_id: up-{i % 100}
    plugins:
      limit-count:
        count: {100 + i % 900}
        time_window: 60
        key: remote_addr
        rejected_code: 429
      proxy-rewrite:
        regex_uri: ["^/api/v{i}/(.*)", "/$1"]
        headers:
          set:
            X-Route: "{i}"
""".encode()


def repo(n: int) -> dict[str, bytes]:
    files = {f"routes/{i:05d}.yaml": route_file(i) for i in range(n)}
    files["upstreams.yaml"] = ("upstreams:\n" + "".join(
        f"  - id: up-{u}\n    nodes:\n      \"10.0.{u}.1:8080\": 1\n" for u in range(100))).encode()
    return files


def timed(fn: Callable[[], object], repeat: int) -> str:
    cpu, wall = [], []
    for _ in range(repeat):
        start_cpu, start_wall = time.process_time(), time.perf_counter()
        fn()
        cpu.append(time.process_time() - start_cpu)
        wall.append(time.perf_counter() - start_wall)
    return f"{statistics.median(cpu):5.2f} s CPU ({statistics.median(wall):5.2f} s wall)"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    files = repo(args.files)
    options = RenderOptions()
    size = sum(len(v) for v in files.values())

    def cold() -> None:
        render(files, options, ParseCache())

    cache = ParseCache()
    render(files, options, cache)
    counter = iter(range(10**9))

    def one_file_changed() -> None:
        changed = f"time_window: {next(counter) + 61}".encode()
        files["routes/00007.yaml"] = route_file(7).replace(b"time_window: 60", changed)
        render(files, options, cache)

    def floor() -> None:
        yaml = YAML(typ="safe")
        for data in files.values():
            yaml.load(data)

    def own_parse() -> None:
        for data in files.values():
            parse(data)

    rendered = render(files, options, cache)
    print(f"{args.files} route files, {size / 1e6:.1f} MB of YAML, payload "
          f"{len(payload_json(rendered.payload)) / 1e6:.1f} MB")
    assert "clib" in YAML(typ="safe").Parser.__module__, "ruamel.yaml's C loader is not installed"
    print(f"parse-only floor (ruamel C safe loader): {timed(floor, args.repeat)}")
    print(f"gitsync event loader, parse only:        {timed(own_parse, args.repeat)}")
    print(f"render cold (parse + check everything):  {timed(cold, args.repeat)}")
    before = cache.parses
    warm = timed(one_file_changed, args.repeat * 3)
    print(f"render after a one-file change:          {warm}  ({cache.parses - before} parses "
          f"in {args.repeat * 3} renders)")


if __name__ == "__main__":
    main()
