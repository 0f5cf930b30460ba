"""A large public OpenAPI spec rendered as config, and (given a gateway) applied and probed.

    python -m bench.openapi [--spec FILE] [--reps 5]
    python -m bench.openapi --gateway http://127.0.0.1:9180 --proxy http://127.0.0.1:9080 \\
        --admin-key-file admin-key [--sample 200]
    python -m bench.openapi --quick            # a generated spec of 300 operations (the smoke test)

The spec: ``--spec FILE``, else GitHub's REST API description (``api.github.com.json`` of the npm
package ``@octokit/openapi``, 23.0.2: 13 MB, 1,223 operations), fetched at run time with ``npm pack``
into a temporary directory (nothing of it is committed). The repo: the spec and a declaration of it
(``openapi:``, its upstream a local echo server), ``max_file_size`` raised to hold it.

- **cold render**: `render()` with an empty parse cache (parse, the spec stage, build, validation of
  every generated item), against the floor: gitsync's loader parsing the same bytes alone (what any
  render of that file pays). ``json.loads`` of the bytes is reported beside it.
- **warm render**: the same render with the parse cache of the last one (the daemon's case when
  another file of the repo changes): the spec stage and validation only.

With ``--gateway/--proxy``: ``gitsync sync --once`` of the repo (its wall time), then a sample of the
operations (``--sample N``, evenly spread over the spec) requested through the data plane, each path's
templates filled in (``{owner}`` → ``owner1``): each must reach the echo server as that operation's
method and path; and each templated path with one more segment must not (404). The gateway's whole
config is replaced. JSON in ``bench/out/openapi-latest.json``.
"""

from __future__ import annotations

import argparse
import http.server
import json
import re
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench.run import OUT, machine, write_report
from gitsync.render import RenderOptions, render
from gitsync.render.load import parse
from gitsync.render.memo import ParseCache
from gitsync.render.openapi.spec import METHODS
from testkit.agents import serving
from testkit.processes import run_gitsync

PACKAGE = "@octokit/openapi@23.0.2"
MEMBER = "package/generated/api.github.com.json"
_TEMPLATE = re.compile(r"\{([^{}/]*)\}")


def npm_spec(workdir: Path) -> bytes:
    """GitHub's REST API description, from the npm registry (``npm pack``)."""
    subprocess.run(["npm", "pack", "--silent", PACKAGE, "--pack-destination", str(workdir)], check=True,
                   capture_output=True, timeout=600)
    [archive] = workdir.glob("octokit-openapi-*.tgz")
    with tarfile.open(archive) as tar:
        member = tar.extractfile(MEMBER)
        assert member is not None, MEMBER
        return member.read()


def generated_spec(operations: int) -> bytes:
    """A deterministic spec of `operations` operations (templated paths, parameters, bodies)."""
    paths: dict[str, Any] = {}
    for n in range(operations // 3):
        body = {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}}
        paths[f"/team{n}/items"] = {"get": {"operationId": f"list{n}"}, "post": {
            "operationId": f"add{n}",
            "requestBody": {"required": True, "content": {"application/json": {"schema": body}}}}}
        paths[f"/team{n}/items/{{id}}"] = {"get": {"operationId": f"get{n}", "parameters": [
            {"name": "id", "in": "path", "required": True, "schema": {"type": "integer"}}]}}
    spec = {"openapi": "3.0.3", "info": {"title": "Generated"}, "servers": [{"url": "https://api.example.com"}],
            "paths": paths}
    return json.dumps(spec, indent=1).encode()


def repo(spec: bytes, node: str) -> dict[str, bytes]:
    host, port = node.rsplit(":", 1)
    declaration = ("openapi:\n  - name: bench\n    spec: specs/spec.json\n    upstream_defaults:\n"
                   f"      nodes: [{{host: {host}, port: {port}, weight: 1}}]\n      scheme: http\n")
    return {"openapi.yaml": declaration.encode(), "specs/spec.json": spec}


def timed(reps: int, run: Any) -> list[float]:
    samples = []
    for _ in range(reps):
        started = time.perf_counter()
        run()
        samples.append(time.perf_counter() - started)
    return samples


def summary(samples: list[float]) -> dict[str, Any]:
    return {"median_s": round(statistics.median(samples), 3), "min_s": round(min(samples), 3),
            "max_s": round(max(samples), 3), "samples": [round(s, 3) for s in samples]}


def renders(files: dict[str, bytes], reps: int) -> dict[str, Any]:
    options = RenderOptions(max_file_size=len(files["specs/spec.json"]) + 1)
    spec = files["specs/spec.json"]
    cold, floor, loads = [], [], []
    for _ in range(reps):  # interleaved, so that the machine's load falls on each alike
        floor += timed(1, lambda: parse(spec))
        cold += timed(1, lambda: render(files, options, memo=ParseCache()))
        loads += timed(1, lambda: json.loads(spec))
    memo = ParseCache()
    rendered = render(files, options, memo=memo)
    warm = timed(reps, lambda: render(files, options, memo=memo))
    counts = {kind: len(items) for kind, items in rendered.payload.items()}
    return {"bytes": len(spec), "items": counts, "cold_render": summary(cold), "floor_parse": summary(floor),
            "json_loads": summary(loads), "warm_render": summary(warm),
            "cold_ratio": round(statistics.median(cold) / statistics.median(floor), 2)}


class _Echo(http.server.BaseHTTPRequestHandler):
    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        body = json.dumps({"method": self.command, "path": self.path}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_OPTIONS = do_HEAD = _answer

    def log_message(self, *args: Any) -> None:
        pass


def operations(spec: dict[str, Any], prefix: str) -> list[tuple[str, str, str]]:
    """(method, OpenAPI path, a concrete request path) of every operation."""
    out = []
    for path, item in spec.get("paths", {}).items():
        for method in item:
            if method in METHODS:
                concrete = _TEMPLATE.sub(lambda m: m.group(1).replace("_", "") + "1", path)
                out.append((method.upper(), path, prefix + concrete))
    return out


def _matchers(spec: dict[str, Any], prefix: str) -> dict[str, list[re.Pattern[str]]]:
    """Per method, what each of the spec's paths matches (a template: one segment)."""
    out: dict[str, list[re.Pattern[str]]] = {}
    for path, item in spec.get("paths", {}).items():
        literals = _TEMPLATE.split(prefix + path)[::2]  # the text between the templates
        pattern = re.compile("^" + "[^/]+".join(re.escape(part) for part in literals) + "$")
        for method in item:
            if method in METHODS:
                out.setdefault(method.upper(), []).append(pattern)
    return out


def probe(proxy: str, spec: dict[str, Any], prefix: str, sample: int) -> dict[str, Any]:
    every = operations(spec, prefix)
    matchers = _matchers(spec, prefix)
    step = max(1, len(every) // sample)
    chosen = every[::step][:sample]
    answered, refused, failures = 0, 0, []
    with httpx.Client(timeout=10) as client:
        for method, path, concrete in chosen:
            reply = client.request(method, proxy + concrete)
            seen = reply.json() if reply.status_code == 200 and method != "HEAD" else None
            if reply.status_code == 200 and (seen is None or seen == {"method": method, "path": concrete}):
                answered += 1
            else:
                failures.append(f"{method} {path}: {reply.status_code}")
            if "{" in path:  # one more segment: 404, unless another of the spec's paths matches it
                extra = concrete + "/extra"
                expected = 200 if any(p.match(extra) for p in matchers.get(method, ())) else 404
                status = client.request(method, proxy + extra).status_code
                refused += status == 404
                if status != expected:
                    failures.append(f"{method} {path}/extra: {status}, expected {expected}")
    templated = sum(1 for _, path, _ in chosen if "{" in path)
    return {"operations": len(every), "sampled": len(chosen), "answered": answered,
            "templated_sampled": templated, "one_segment_more_refused": refused,
            "one_segment_more_as_expected": templated - sum("/extra:" in f for f in failures),
            "failures": failures[:20]}


def apply(files: dict[str, bytes], args: argparse.Namespace, spec: dict[str, Any]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="gitsync-bench-openapi-") as tmp:
        root = Path(tmp) / "repo"
        for name, data in files.items():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_bytes(data)
        env = {"GITSYNC_MAX_FILE_SIZE": str(len(files["specs/spec.json"]) + 1)}
        started = time.perf_counter()
        synced = run_gitsync("sync", "--once", "--dir", str(root), "--gateway", args.gateway,
                             "--admin-key-file", str(args.admin_key_file), "--state-dir",
                             str(Path(tmp) / "state"), env=env, timeout=900)
        took = time.perf_counter() - started
        if synced.returncode != 0:
            return {"sync_once_s": round(took, 2), "error": (synced.stdout + synced.stderr)[-2000:]}
    time.sleep(0.5)  # APISIX's workers take a pushed config on their next poll
    servers = spec.get("servers") or [{}]
    prefix = re.sub(r"^[a-z]+://[^/]+", "", str(servers[0].get("url", ""))).rstrip("/")
    return {"sync_once_s": round(took, 2), **probe(args.proxy, spec, prefix, args.sample)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.openapi", description=__doc__.splitlines()[0])
    parser.add_argument("--spec", type=Path, help="the spec (default: GitHub's, from the npm registry)")
    parser.add_argument("--quick", action="store_true", help="a generated spec of 300 operations, 2 reps")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--gateway", help="a running APISIX's Admin API (its whole config is replaced)")
    parser.add_argument("--proxy", help="its data plane")
    parser.add_argument("--admin-key-file", type=Path)
    parser.add_argument("--sample", type=int, default=200, help="operations requested through the data plane")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="gitsync-bench-npm-") as tmp:
        if args.quick:
            spec, source, reps = generated_spec(300), "generated (300 operations)", 2
        elif args.spec:
            spec, source, reps = args.spec.read_bytes(), str(args.spec), args.reps
        else:
            spec, source, reps = npm_spec(Path(tmp)), f"{PACKAGE} {MEMBER}", args.reps
    report: dict[str, Any] = {"machine": machine(), "spec": source}
    with serving(_Echo) as node:
        files = repo(spec, node)
        report["render"] = renders(files, reps)
        line = report["render"]
        print(f"{source}: {line['bytes']:,} bytes, {line['items']}")
        for key in ("floor_parse", "cold_render", "warm_render", "json_loads"):
            figures = line[key]
            spread = f"{figures['min_s']:.3f}–{figures['max_s']:.3f}"
            print(f"  {key:12} median {figures['median_s']:.3f} s ({spread})")
        print(f"  cold render / parse: {line['cold_ratio']}×")
        if args.gateway:
            report["gateway"] = apply(files, args, json.loads(spec))
            print(f"  applied: {json.dumps(report['gateway'])}")
    write_report(report, args.out, started, "openapi", "openapi-latest.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
