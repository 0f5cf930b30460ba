"""What a hostile git server costs a reader: object bombs and ref floods, as real processes.

    python -m bench.hostile                        # 300 MB bombs, 20,000 status refs
    python -m bench.hostile --bomb-mb 100 --refs 5000
    python -m bench.hostile --tree /path/to/other/checkout   # the same against another gitsync

Each scenario serves a bare repo with git daemon on 127.0.0.1 and runs the gitsync of ``--tree`` in a
child process (its code only: the child's working directory and PYTHONPATH are the tree; bytecode goes
to the usual cache outside it); the child's peak RSS is read from ``wait4`` and its time from the clock:

- ``status_bomb``: a status ref whose ``status.yaml`` is `--bomb-mb` MB of zeros, beside a real
  canary's status: ``gitsync status --fleet``, once as it is and once under an address-space limit of
  `--limit-mb` (RLIMIT_AS, with MALLOC_ARENA_MAX=2 and 1 MB thread stacks): peak RSS, exit code,
  whether the canary's row is there, whether a traceback or a MemoryError was printed;
- ``source_bomb``: a config repo with a `--bomb-mb` MB file of zeros beside its config: a first fetch
  into a new mirror, then a read of the config (as the agent's source does), as it is and under the limit;
- ``ref_flood``: `--refs` status refs to one tiny status commit: one `FleetReader` reading three
  times (the first read, a read where nothing moved, a read where one ref moved), each read's seconds,
  the entries it returned and the refs it left in its work repo (loose files, and lines of its
  packed-refs file).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.run import add_tree_and_out, machine, print_report, process_env, write_report
from testkit.git import GitDaemon, git

#: The child's script for the ref flood: one reader, three reads; prints one JSON line.
FLOOD_READER = """
import json, sys, time, subprocess
from pathlib import Path
from gitsync.source.transport import Remote
from gitsync.writeback.fleet import FleetReader
url, work, served, ref = sys.argv[1:5]
reader = FleetReader(Remote.of(url), Path(work))
def entries(read):
    return len(getattr(read, "entries", read))
times, counts = [], []
for step in range(3):
    if step == 2:
        subprocess.run(["git", "update-ref", ref, sys.argv[5]], cwd=served, check=True)
    started = time.perf_counter()
    read = reader.read()
    times.append(time.perf_counter() - started)
    counts.append(entries(read))
loose = sum(1 for p in (Path(work) / "refs").rglob("*") if p.is_file())
packed = Path(work) / "packed-refs"
packed = sum(1 for line in packed.read_text().splitlines() if " refs/" in line) if packed.exists() else 0
print(json.dumps({"seconds": times, "entries": counts, "loose_refs": loose, "packed_refs": packed}))
"""

#: The child's script for the source bomb: a first fetch into a new mirror, then a read of the config.
SOURCE_READER = """
import json, sys
from pathlib import Path
from gitsync.source.mirror import Source
from gitsync.source.transport import Remote, SourceError
url, state = sys.argv[1:3]
source = Source(Remote.of(url), "main", ["conf"], state_dir=Path(state))
try:
    sha = source.fetch()
    files = source.read(sha).files
    print(json.dumps({"ok": True, "files": sorted(files)}))
except SourceError as exc:
    print(json.dumps({"ok": False, "error": exc.reason[:300]}))
"""

STATUS = ("agent: {agent}\ngroup: canary\ncommit: {commit}\nresult: applied\ntime: '2026-01-01T00:00:00Z'\n"
          "gateways: []\n")


def limited(megabytes: int) -> Any:
    """A `preexec_fn`: the child's address space capped at `megabytes` (see testkit.agents.memory_limit)."""
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_STACK, (1 << 20, 1 << 20))
        resource.setrlimit(resource.RLIMIT_AS, (megabytes << 20, megabytes << 20))
    return limit


def child(args: Sequence[str], tree: Path, limit_mb: int | None = None,
          timeout: float = 600) -> dict[str, Any]:
    """Run `python ARGS` with the gitsync of `tree`: exit code, output, seconds, peak RSS (MB)."""
    env = process_env()
    env["PYTHONPATH"] = str(tree)
    if limit_mb is not None:
        env["MALLOC_ARENA_MAX"] = "2"
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        return _child(args, tree, env, limit_mb, timeout, out, err)


def _child(args: Sequence[str], tree: Path, env: dict[str, str], limit_mb: int | None, timeout: float,
           out: Any, err: Any) -> dict[str, Any]:
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, *args], cwd=tree, env=env, stdout=out, stderr=err,
                            preexec_fn=limited(limit_mb) if limit_mb else None)
    deadline = time.monotonic() + timeout
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() > deadline:
            proc.kill()
            pid, status, usage = os.wait4(proc.pid, 0)
            break
        time.sleep(0.02)
    proc.returncode = os.waitstatus_to_exitcode(status)
    seconds = time.perf_counter() - started
    out.seek(0)
    err.seek(0)
    stdout, stderr = out.read().decode(errors="replace"), err.read().decode(errors="replace")
    return {"exit": proc.returncode, "seconds": round(seconds, 3), "rss_mb": round(usage.ru_maxrss / 1024, 1),
            "stdout": stdout[-4000:], "stderr": stderr[-4000:], "traceback": "Traceback" in stderr,
            "memory_error": "MemoryError" in stderr + stdout}


def zeros(path: Path, megabytes: int) -> Path:
    with open(path, "wb") as handle:
        chunk = b"\0" * (1 << 20)
        for _ in range(megabytes):
            handle.write(chunk)
    return path


def status_commit(repo: Path, text: str) -> str:
    blob = git("hash-object", "-w", "--stdin", cwd=repo, input=text.encode())
    return status_tree_commit(repo, blob)


def status_tree_commit(repo: Path, blob: str) -> str:
    tree = git("mktree", cwd=repo, input=f"100644 blob {blob}\tstatus.yaml\n".encode())
    return git("commit-tree", tree, "-m", "gitsync: status", cwd=repo,
               env={"GIT_COMMITTER_DATE": f"{int(time.time())} +0000"})


def config_commit(repo: Path, big: Path | None) -> str:
    """A commit with conf/routes.yaml and, when `big` is given, that file beside it as big.bin."""
    routes = ("routes:\n  - id: r1\n    uri: /r1\n    upstream:\n      type: roundrobin\n"
              "      nodes:\n        \"127.0.0.1:1980\": 1\n")
    blob = git("hash-object", "-w", "--stdin", cwd=repo, input=routes.encode())
    conf = git("mktree", cwd=repo, input=f"100644 blob {blob}\troutes.yaml\n".encode())
    entries = f"040000 tree {conf}\tconf\n"
    if big is not None:
        entries += f"100644 blob {git('hash-object', '-w', str(big), cwd=repo)}\tbig.bin\n"
    tree = git("mktree", cwd=repo, input=entries.encode())
    sha = git("commit-tree", tree, "-m", "config", cwd=repo)
    git("update-ref", "refs/heads/main", sha, cwd=repo)
    return sha


def status_bomb(tmp: Path, daemon: GitDaemon, tree: Path, megabytes: int, limit_mb: int) -> dict[str, Any]:
    repo = tmp / "served" / "status-bomb.git"
    git("init", "--bare", "-q", str(repo))
    commit = config_commit(repo, None)
    git("update-ref", "refs/gitsync/status/canary-0",
        status_commit(repo, STATUS.format(agent="canary-0", commit=commit)), cwd=repo)
    blob = git("hash-object", "-w", str(zeros(tmp / "zeros", megabytes)), cwd=repo)
    git("update-ref", "refs/gitsync/status/bomb", status_tree_commit(repo, blob), cwd=repo)
    git("repack", "-adq", cwd=repo)
    wire = sum(p.stat().st_size for p in (repo / "objects" / "pack").glob("*.pack"))
    result: dict[str, Any] = {"scenario": "status_bomb", "bomb_mb": megabytes, "pack_bytes": wire}
    for name, limit in (("free", None), ("limited", limit_mb)):
        run = child(["-m", "gitsync", "status", "--fleet", "--repo", daemon.url(repo.name)], tree, limit)
        run["canary_read"] = any(line.split()[:3] == ["canary-0", commit[:7], "applied"]
                                 for line in run["stdout"].splitlines())
        result[name] = run
    return result


def source_bomb(tmp: Path, daemon: GitDaemon, tree: Path, megabytes: int, limit_mb: int) -> dict[str, Any]:
    repo = tmp / "served" / "source-bomb.git"
    git("init", "--bare", "-q", str(repo))
    config_commit(repo, zeros(tmp / "zeros", megabytes))
    git("repack", "-adq", cwd=repo)
    wire = sum(p.stat().st_size for p in (repo / "objects" / "pack").glob("*.pack"))
    result: dict[str, Any] = {"scenario": "source_bomb", "bomb_mb": megabytes, "pack_bytes": wire}
    for name, limit in (("free", None), ("limited", limit_mb)):
        state = tmp / f"source-{name}"
        run = child(["-c", SOURCE_READER, daemon.url(repo.name), str(state)], tree, limit)
        result[name] = run
    return result


def ref_flood(tmp: Path, daemon: GitDaemon, tree: Path, refs: int) -> dict[str, Any]:
    repo = tmp / "served" / "ref-flood.git"
    git("init", "--bare", "-q", str(repo))
    commit = config_commit(repo, None)
    tiny = status_commit(repo, STATUS.format(agent="flood", commit=commit))
    other = status_commit(repo, STATUS.format(agent="flood", commit=commit).replace("applied", "healed"))
    lines = "".join(f"create refs/gitsync/status/a{i:06d} {tiny}\n" for i in range(refs))
    git("update-ref", "--stdin", cwd=repo, input=lines.encode())
    git("pack-refs", "--all", cwd=repo)
    run = child(["-c", FLOOD_READER, daemon.url(repo.name), str(tmp / "flood-work"), str(repo),
                 "refs/gitsync/status/a000000", other], tree)
    result: dict[str, Any] = {"scenario": "ref_flood", "refs": refs, "run": run}
    if run["exit"] == 0:
        result |= json.loads(run["stdout"].strip().splitlines()[-1])
    return result


def run(tree: Path, megabytes: int, refs: int, limit_mb: int, out: Path,
        scenarios: Sequence[str]) -> dict[str, Any]:
    started = time.monotonic()
    report: dict[str, Any] = {"machine": machine(), "tree": str(tree), "limit_mb": limit_mb, "results": []}
    tmp = Path(tempfile.mkdtemp(prefix="gitsync-bench-hostile-"))
    try:
        (tmp / "served").mkdir()
        with GitDaemon(tmp / "served") as daemon:
            if "status_bomb" in scenarios:
                report["results"].append(status_bomb(tmp, daemon, tree, megabytes, limit_mb))
            if "source_bomb" in scenarios:
                report["results"].append(source_bomb(tmp, daemon, tree, megabytes, limit_mb))
            if "ref_flood" in scenarios:
                report["results"].append(ref_flood(tmp, daemon, tree, refs))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    report["table"] = table(report["results"], limit_mb)
    write_report(report, out, started, "hostile", "hostile-latest.json")
    return report


def _outcome(run: dict[str, Any]) -> str:
    words = [f"exit {run['exit']}"]
    if run.get("memory_error"):
        words.append("MemoryError")
    if run.get("traceback"):
        words.append("traceback")
    if "canary_read" in run:
        words.append("canary read" if run["canary_read"] else "canary NOT read")
    return ", ".join(words)


def table(results: Sequence[dict[str, Any]], limit_mb: int) -> str:
    lines = []
    for r in results:
        if r["scenario"] in ("status_bomb", "source_bomb"):
            lines.append(f"{r['scenario']}: {r['bomb_mb']} MB of zeros, {r['pack_bytes']:,} bytes packed")
            for name in ("free", "limited"):
                run = r[name]
                what = "no limit" if name == "free" else f"under {limit_mb} MB"
                lines.append(f"  {what:<14} peak RSS {run['rss_mb']:>7.1f} MB  {run['seconds']:>7.2f} s  "
                             f"{_outcome(run)}")
                if r["scenario"] == "source_bomb" and run["exit"] == 0 and run["stdout"].strip():
                    lines.append(f"  {'':<14} {run['stdout'].strip().splitlines()[-1][:150]}")
        else:
            if "seconds" not in r:
                lines.append(f"ref_flood: {r['refs']:,} refs: {_outcome(r['run'])}")
                continue
            first, quiet, moved = r["seconds"]
            lines.append(f"ref_flood: {r['refs']:,} status refs to one commit; peak RSS "
                         f"{r['run']['rss_mb']:.1f} MB; refs left in the work repo: {r['loose_refs']:,} "
                         f"loose, {r['packed_refs']:,} in packed-refs")
            lines.append(f"  first read {first:>7.2f} s   nothing moved {quiet:>7.2f} s   one moved "
                         f"{moved:>7.2f} s   entries {r['entries']}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.hostile", description=__doc__.split("\n")[0])
    parser.add_argument("--bomb-mb", type=int, default=300, help="megabytes of zeros in each bomb "
                        "(default %(default)s)")
    parser.add_argument("--refs", type=int, default=20_000, help="status refs of the flood (default "
                        "%(default)s)")
    parser.add_argument("--limit-mb", type=int, default=300, help="address-space limit of the limited "
                        "runs (default %(default)s)")
    parser.add_argument("--only", default="status_bomb,source_bomb,ref_flood",
                        help="scenarios, comma-separated (default %(default)s)")
    add_tree_and_out(parser)
    args = parser.parse_args(argv)
    report = run(args.tree.resolve(), args.bomb_mb, args.refs, args.limit_mb, args.out,
                 [s.strip() for s in args.only.split(",") if s.strip()])
    print_report(report, f"load {', '.join(f'{x:.1f}' for x in report['machine']['loadavg'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
