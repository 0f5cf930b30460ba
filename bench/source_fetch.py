"""Benchmark of the git source against the git CLI, on one repo served by ``git daemon``.

The repo: 5,000 commits and 10,000 small YAML files (built with ``git fast-import``). Measured in
the same run, so the two sides share the machine's state:

- a no-op poll: ``Source.check()`` vs ``git ls-remote``;
- an incremental fetch of 50 new commits: ``Source.fetch()`` vs ``git fetch`` into a bare mirror;
- a no-op fetch, the first (full) fetch vs ``git clone --bare``, and ``read()`` of all 10,000 files.

Usage: ``python bench/source_fetch.py [--commits 5000] [--files 10000] [--rounds 5]``.
Prints a table and writes ``bench/out/source_fetch.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gitsync import log as gslog  # noqa: E402
from gitsync.source import Source  # noqa: E402
from tests.gitservers import BareRepo, GitDaemon, git  # noqa: E402


def timed(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def median_ms(samples: list[float]) -> float:
    return round(statistics.median(samples) * 1000, 1)


def run(commits: int, files: int, rounds: int, batch: int) -> dict:
    gslog.setup(verbose=0, stream=open("/dev/null", "w"))  # noqa: SIM115 - for the whole run
    with tempfile.TemporaryDirectory(prefix="gitsync-bench-") as tmp:
        root = Path(tmp) / "served"
        root.mkdir()
        repo = BareRepo.create(root / "config.git")
        build = timed(lambda: repo.fast_import(commits, files))
        with GitDaemon(root) as daemon:
            url = daemon.url("config.git")
            source = Source(url, state_dir=Path(tmp) / "state")
            cli_mirror = Path(tmp) / "cli-mirror.git"
            results: dict[str, object] = {"commits": commits, "files": files, "rounds": rounds,
                                          "build_s": round(build, 2)}
            results["first_fetch_ms"] = {
                "gitsync": median_ms([timed(source.fetch)]),
                "git": median_ms([timed(lambda: git("clone", "--bare", "--quiet", url, str(cli_mirror)))]),
            }
            fetch_cli = ["fetch", "--quiet", "origin", "+refs/heads/main:refs/heads/main"]
            results["noop_check_ms"] = {
                "gitsync": median_ms([timed(source.check) for _ in range(rounds * 4)]),
                "git": median_ms([timed(lambda: git("ls-remote", url, "refs/heads/main"))
                                  for _ in range(rounds * 4)]),
            }
            results["noop_fetch_ms"] = {
                "gitsync": median_ms([timed(source.fetch) for _ in range(rounds * 4)]),
                "git": median_ms([timed(lambda: git(*fetch_cli, cwd=cli_mirror)) for _ in range(rounds * 4)]),
            }
            ours, theirs = [], []
            for _ in range(rounds):
                tip = repo.fast_import(batch, files)
                ours.append(timed(source.fetch))
                theirs.append(timed(lambda: git(*fetch_cli, cwd=cli_mirror)))
                assert source.local_sha() == tip == git("rev-parse", "refs/heads/main", cwd=cli_mirror)
            results[f"incremental_fetch_{batch}_commits_ms"] = {"gitsync": median_ms(ours),
                                                                "git": median_ms(theirs)}
            tip = source.local_sha()
            assert tip is not None
            results["read_all_files_ms"] = {"gitsync": median_ms([timed(lambda: source.read(tip))
                                                                  for _ in range(rounds)])}
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--commits", type=int, default=5000)
    parser.add_argument("--files", type=int, default=10000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batch", type=int, default=50, help="commits per incremental fetch")
    args = parser.parse_args()
    results = run(args.commits, args.files, args.rounds, args.batch)
    out = ROOT / "bench" / "out"
    out.mkdir(parents=True, exist_ok=True)
    (out / "source_fetch.json").write_text(json.dumps(results, indent=2) + "\n")
    print(f"repo: {args.commits} commits, {args.files} files (built in {results['build_s']} s), "
          f"git daemon on 127.0.0.1, medians of {args.rounds}+ runs")
    print(f"{'operation':<34} {'gitsync (dulwich)':>18} {'git CLI':>10}")
    for key, value in results.items():
        if isinstance(value, dict):
            print(f"{key:<34} {value['gitsync']:>15} ms {value.get('git', '-'):>7} ms")
    subprocess.run(["git", "--version"], check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
