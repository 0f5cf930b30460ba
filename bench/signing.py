"""What signed statuses cost: signing one status commit (the writer, per status or heartbeat) and
verifying one (a reader, per agent whose ref moved), and a whole fleet read of N agents' statuses.

    python -m bench.signing                     # ed25519 and RSA-3072 keys, a fleet of 100 agents
    python -m bench.signing --agents 300 --rounds 2000

Keys are made with ``ssh-keygen`` in a temporary directory; the commits are real status commits
(a ``status.yaml`` of one gateway, as `WriteBack` writes it) in memory. Each figure is the median
of `--rounds` runs (per operation) or of 5 runs (the fleet read's verification).
"""

from __future__ import annotations

import argparse
import stat
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from dulwich.objects import Blob, Commit, Tree

from gitsync.writeback.statusfile import read_status
from gitsync.writeback.trust import StatusSigner, StatusSigners
from gitsync.writeback.wire import GatewayStatus, StatusReport, render_status, status_document


def status_commit(agent: str, group: str) -> Commit:
    gateway = GatewayStatus("http://10.0.0.1:9180", "applied", {"routes_conf_version": 3}, "d" * 64,
                            {"routes": 40}, {})
    report = StatusReport(agent=agent, commit="c" * 40, subject="v1", result="applied",
                          time=datetime.now(UTC), duration=0.2, group=group, gateways=[gateway])
    blob = Blob.from_string(render_status(status_document(report)))
    tree = Tree()
    tree.add(b"status.yaml", stat.S_IFREG | 0o644, blob.id)
    commit = Commit()
    commit.tree, commit.parents = tree.id, []
    commit.author = commit.committer = b"gitsync <gitsync@localhost>"
    commit.author_time = commit.commit_time = int(time.time())
    commit.author_timezone = commit.commit_timezone = 0
    commit.message = f"gitsync({agent}): applied cccccc to 1 gateway\n".encode()
    BLOBS[agent] = blob.data
    return commit


BLOBS: dict[str, bytes] = {}  # agent → its status.yaml, for the read below


def median_us(action: Callable[[], object], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        began = time.perf_counter()
        action()
        times.append(time.perf_counter() - began)
    return statistics.median(times) * 1e6


def run(kind: str, bits: list[str], agents: int, rounds: int, work: Path) -> list[str]:
    names = [f"agent-{i:03d}" for i in range(agents)]
    keys = {}
    for name in names:
        path = work / f"{kind}-{name}"
        subprocess.run(["ssh-keygen", "-q", "-t", kind, *bits, "-N", "", "-f", str(path)], check=True)
        keys[name] = path
    signers_file = work / f"{kind}-signers"
    signers_file.write_text("".join(f"{n}@canary {keys[n].with_suffix('.pub').read_text()}" for n in names))
    signers = StatusSigners(signers_file)
    commits = {}
    for name in names:
        commit = status_commit(name, "canary")
        StatusSigner(keys[name]).sign_commit(commit)
        commits[name] = commit
    one = names[0]
    signer = StatusSigner(keys[one])
    sign = median_us(lambda: signer.sign_commit(status_commit(one, "canary")), rounds)
    unsigned = median_us(lambda: status_commit(one, "canary").as_raw_string(), rounds)
    verify = median_us(lambda: signers.verify(commits[one], one, "canary"), rounds)
    parse = median_us(lambda: read_status(BLOBS[one]), rounds)
    fleet = statistics.median(
        [_timed(lambda: [signers.verify(commits[n], n, "canary") for n in names]) for _ in range(5)])
    return [f"| {kind}{' ' + bits[1] if bits else ''} | {sign - unsigned:.0f} µs | {verify:.0f} µs | "
            f"{parse:.0f} µs | {agents} | {fleet * 1e3:.1f} ms |"]


def _timed(action: Callable[[], object]) -> float:
    began = time.perf_counter()
    action()
    return time.perf_counter() - began


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.signing", description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=500)
    args = parser.parse_args(argv)
    print("| key | sign one status commit | verify one (against status_signers of N keys) | "
          "read its status.yaml | N agents | verify a fleet read (N statuses) |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="gitsync-bench-signing-") as tmp:
        for kind, bits in (("ed25519", []), ("rsa", ["-b", "3072"])):
            for line in run(kind, bits, args.agents, args.rounds, Path(tmp)):
                print(line, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
