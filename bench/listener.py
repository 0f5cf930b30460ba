"""The listener under stalled and hostile clients: `/healthz`, threads, memory and log of `gitsync run --ui`.

``python -m bench.listener`` serves a small generated config repo (bench/generate.py) with git daemon,
runs `gitsync run --ui` as a real process against a gateway double in a child process, waits until the
commit is live, then for each count of stalled connections (default 0, 100 and 1,000): opens that many
connections that each send a request line and one header and then say nothing more, and, while they
are held open (well within the listener's 10 s header deadline), asks `/healthz` on a new connection
each time as a container's probe does, and reads the process's thread count and RSS from /proc. The
connections are then closed and the agent given a few seconds to drop them before the next count.

Then the attack (``--flood``, ``--heavy``; 0 skips it): one client (from 127.0.0.2) opens `--flood`
connections that each send one byte, while `--heavy` clients (from 127.0.0.3, .4, …) each send webhook
requests with 3,700 header names and a wrong signature, one after another; meanwhile `/healthz` is
asked from 127.0.0.1 every 50 ms for `--attack-seconds` (within the flood's 10 s header deadline). It
reports the probes' answers and p50/p99/max, what became of the flood's connections (held, or
answered), the heavy clients' requests and answers, and the agent's log lines per second.

``--tree DIR`` runs the gitsync of another checkout (its code only: the child's working directory and
PYTHONPATH are DIR; bytecode goes to the usual cache outside it), for a before/after comparison.
"""

from __future__ import annotations

import argparse
import re
import resource
import shutil
import socket
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.double import DoubleProcess
from bench.run import ADMIN_KEY, DaemonProcess, Fixture, add_tree_and_out, machine, print_report, write_report
from testkit.git import GitDaemon

STALL = b"POST /hooks/github HTTP/1.1\r\nHost: 127.0.0.1\r\n"  # and nothing more
PROBE = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
HEADER_NAMES = 3700


def heavy_request(names: int = HEADER_NAMES) -> bytes:
    """A webhook with `names` distinct header names (three letters or digits each, empty values: about
    22 KB, under the 32 KB a head may be) and a wrong signature."""
    alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
    lines = [f"x{alphabet[i // 1296 % 36]}{alphabet[i // 36 % 36]}{alphabet[i % 36]}:" for i in range(names)]
    head = ["POST /hooks/github HTTP/1.1", "Host: 127.0.0.1", "Connection: close", "Content-Length: 2",
            "X-Hub-Signature-256: sha256=" + "0" * 64, *lines]
    return ("\r\n".join(head) + "\r\n\r\n{}").encode()


def raise_open_files(needed: int) -> None:
    """This process holds one socket per stalled connection: a soft limit of 1,024 is not enough."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(needed, hard), hard))


def stall(port: int, count: int) -> list[socket.socket]:
    socks = []
    for _ in range(count):
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        sock.sendall(STALL)
        socks.append(sock)
    return socks


def probe(port: int) -> tuple[int, float]:
    """(status, seconds) of one `GET /healthz` on a new connection: connect to the last byte."""
    started = time.perf_counter()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(PROBE)
            answer = b"".join(iter(lambda: sock.recv(65536), b""))
    except OSError:
        return 0, time.perf_counter() - started
    elapsed = time.perf_counter() - started
    status = answer.split(b" ", 2)[1] if answer.count(b" ") >= 2 else b"0"
    return int(status) if status.isdigit() else 0, elapsed


def process_status(pid: int) -> tuple[int, float]:
    """(threads, RSS in MB) of a process, from /proc."""
    text = Path(f"/proc/{pid}/status").read_text()
    threads = re.search(r"^Threads:\s+(\d+)", text, re.M)
    rss = re.search(r"^VmRSS:\s+(\d+) kB", text, re.M)
    assert threads is not None and rss is not None
    return int(threads[1]), int(rss[1]) / 1024


def measure(port: int, pid: int, stalled: int, probes: int) -> dict[str, Any]:
    started = time.monotonic()
    socks = stall(port, stalled)
    opened = time.monotonic() - started
    time.sleep(0.5)  # the listener has seen them all
    most_threads, most_rss = process_status(pid)
    answers = []
    for _ in range(probes):
        answers.append(probe(port))
        threads, rss = process_status(pid)
        most_threads, most_rss = max(most_threads, threads), max(most_rss, rss)
        time.sleep(0.05)
    measured_within = time.monotonic() - started
    held = sum(1 for sock in socks if _still_open(sock))
    for sock in socks:
        sock.close()
    latencies, statuses = summary(answers)
    return {"stalled": stalled, "held_open": held, "open_s": opened, "measured_within_s": measured_within,
            "threads": most_threads, "rss_mb": most_rss, "statuses": statuses,
            "p50_s": statistics.median(latencies), "max_s": latencies[-1], "samples": latencies}


def summary(answers: Sequence[tuple[int, float]]) -> tuple[list[float], dict[str, int]]:
    """The probes' times, sorted, and how many got each status."""
    statuses: dict[str, int] = {}
    for status, _ in answers:
        statuses[str(status)] = statuses.get(str(status), 0) + 1
    return sorted(seconds for _, seconds in answers), statuses


def _still_open(sock: socket.socket) -> bool:
    """The server has neither answered nor closed this connection."""
    sock.setblocking(False)
    try:
        return not sock.recv(1, socket.MSG_PEEK)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        sock.setblocking(True)


def _flood(port: int, count: int, source: str, stop: threading.Event, socks: list[socket.socket]) -> None:
    for _ in range(count):
        if stop.is_set():
            return
        try:
            sock = socket.create_connection(("127.0.0.1", port), timeout=10, source_address=(source, 0))
            sock.sendall(b"P")
        except OSError:
            return
        socks.append(sock)


def _heavy(port: int, source: str, stop: threading.Event, answers: dict[str, int],
           lock: threading.Lock) -> None:
    request = heavy_request()
    while not stop.is_set():
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=10,
                                          source_address=(source, 0)) as sock:
                sock.sendall(request)
                reply = b"".join(iter(lambda: sock.recv(65536), b""))
            status = reply.split(b" ", 2)[1].decode() if reply.count(b" ") >= 2 else "closed"
        except OSError as exc:
            status = type(exc).__name__
        with lock:
            answers[status] = answers.get(status, 0) + 1


def attack(port: int, pid: int, log: Path, flood: int, heavy: int, seconds: float) -> dict[str, Any]:
    """One client's `flood` one-byte connections, `heavy` clients' 3,700-header webhooks, and /healthz
    every 50 ms from another address meanwhile (see the module)."""
    lines_before = _lines(log)
    stop, lock, answers = threading.Event(), threading.Lock(), {}
    socks: list[socket.socket] = []
    workers = [threading.Thread(target=_flood, args=(port, flood, "127.0.0.2", stop, socks), daemon=True)]
    workers += [threading.Thread(target=_heavy, args=(port, f"127.0.0.{3 + n}", stop, answers, lock),
                                 daemon=True) for n in range(heavy)]
    window = time.monotonic()
    for worker in workers:
        worker.start()
    probes, most_threads, most_rss = [], 0, 0.0
    while time.monotonic() - window < seconds:
        probes.append(probe(port))
        threads, rss = process_status(pid)
        most_threads, most_rss = max(most_threads, threads), max(most_rss, rss)
        time.sleep(0.05)
    held = sum(1 for sock in socks if _still_open(sock))
    stop.set()
    for worker in workers:
        worker.join(15)
    elapsed = time.monotonic() - window
    for sock in socks:
        sock.close()
    latencies, statuses = summary(probes)
    written = _written_since(log, lines_before)
    lines = len(written)
    return {"flood": flood, "flood_opened": len(socks), "flood_held": held, "samples": [t for _, t in probes],
            "heavy": heavy, "heavy_answers": answers, "seconds": elapsed, "statuses": statuses,
            "p50_s": statistics.median(latencies), "p99_s": latencies[min(len(latencies) - 1,
                                                                        int(len(latencies) * 0.99))],
            "max_s": latencies[-1], "probes": len(latencies), "threads": most_threads, "rss_mb": most_rss,
            "log_lines": lines, "log_lines_per_s": lines / max(elapsed, 1e-9), "log": written[:50],
            "cap": open_files_cap(pid)}


def _lines(path: Path) -> int:
    with open(path, "rb") as handle:
        return sum(chunk.count(b"\n") for chunk in iter(lambda: handle.read(1 << 16), b""))


def _written_since(path: Path, lines: int) -> list[str]:
    """The log's lines after its first `lines` (the agent's log during the attack), for the report."""
    with open(path, encoding="utf-8", errors="replace") as handle:
        return [line.rstrip("\n")[:300] for n, line in enumerate(handle) if n >= lines]


def open_files_cap(pid: int) -> int | None:
    """The agent's soft open-files limit (what its connection cap is made to fit)."""
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            return int(line.split()[3])
    return None


def run(counts: Sequence[int], probes: int, tree: Path, out: Path, flood: int = 5000, heavy: int = 8,
        seconds: float = 8.0, nofile: int | None = None) -> dict[str, Any]:
    started = time.monotonic()
    raise_open_files(max(*counts, flood) + 512)
    tmp = Path(tempfile.mkdtemp(prefix="gitsync-bench-listener-"))
    report: dict[str, Any] = {"machine": machine(), "tree": str(tree), "probes": probes, "results": []}
    try:
        served, work = tmp / "served", tmp / "work"
        served.mkdir()
        work.mkdir()
        with GitDaemon(served) as daemon, DoubleProcess(ADMIN_KEY) as gateway:
            fixture = Fixture(100, work, daemon)
            with DaemonProcess(fixture, gateway.url, work / "state", drift_interval=3600, webhook=True,
                               extra=["--ui"], tree=tree, nofile=nofile) as agent:
                agent.wait_ready()
                for count in counts:
                    report["results"].append(measure(agent.port, agent.proc.pid, count, probes))
                    time.sleep(3)  # the agent drops the closed connections
                if flood or heavy:
                    report["attack"] = attack(agent.port, agent.proc.pid, Path(agent.log.name), flood, heavy,
                                              seconds)
                    time.sleep(3)
                report["threads_after"], report["rss_mb_after"] = process_status(agent.proc.pid)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    report["table"] = table(report["results"]) + ("\n" + attack_table(report["attack"])
                                                   if "attack" in report else "")
    write_report(report, out, started, "listener", "listener-latest.json")
    return report


def table(results: Sequence[dict[str, Any]]) -> str:
    lines = [f"{'stalled':>7} {'held':>5} {'threads':>7} {'RSS':>8} {'healthz p50':>11} {'max':>9}  answers",
             "-" * 66]
    for r in results:
        answers = ", ".join(f"{n}× {status}" for status, n in sorted(r["statuses"].items()))
        lines.append(f"{r['stalled']:>7,} {r['held_open']:>5} {r['threads']:>7} {r['rss_mb']:>6.1f}MB "
                     f"{r['p50_s'] * 1000:>9.1f}ms {r['max_s'] * 1000:>7.1f}ms  {answers}")
    return "\n".join(lines)


def attack_table(a: dict[str, Any]) -> str:
    answers = ", ".join(f"{n}× {status}" for status, n in sorted(a["statuses"].items()))
    heavy = ", ".join(f"{n:,}× {status}" for status, n in sorted(a["heavy_answers"].items()))
    return "\n".join([
        f"attack: 1 client × {a['flood']:,} one-byte connections ({a['flood_opened']:,} opened, "
        f"{a['flood_held']:,} of them held at the end) + {a['heavy']} clients × {HEADER_NAMES:,}-header "
        f"webhooks ({heavy or 'none'}); agent soft open-files limit {a['cap']}",
        f"  /healthz over {a['seconds']:.1f}s: {a['probes']} probes, p50 {a['p50_s'] * 1000:.1f}ms, "
        f"p99 {a['p99_s'] * 1000:.1f}ms, max {a['max_s'] * 1000:.1f}ms; {answers}",
        f"  agent: {a['threads']} threads, {a['rss_mb']:.1f}MB; log {a['log_lines']:,} lines "
        f"({a['log_lines_per_s']:.1f}/s)"])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.listener", description=__doc__.split("\n")[0])
    parser.add_argument("--stalled", default="0,100,1000",
                        help="counts of stalled connections, comma-separated (default %(default)s)")
    parser.add_argument("--probes", type=int, default=20, help="/healthz requests per count (default "
                        "%(default)s; they must fit in the 10 s header deadline of the stalled ones)")
    parser.add_argument("--flood", type=int, default=5000, help="one-byte connections of the attack's one "
                        "client (default %(default)s; 0 and --heavy 0 skip the attack)")
    parser.add_argument("--heavy", type=int, default=8, help="clients sending 3,700-header webhooks "
                        "(default %(default)s)")
    parser.add_argument("--attack-seconds", type=float, default=8.0, help="how long /healthz is asked "
                        "during the attack (default %(default)s; within the flood's 10 s header deadline)")
    parser.add_argument("--agent-nofile", type=int, default=None, help="the agent's open-files limit, as "
                        "a container's ulimit -n (default: this process's)")
    add_tree_and_out(parser)
    args = parser.parse_args(argv)
    counts = [int(n) for n in args.stalled.split(",") if n.strip()]
    report = run(counts, args.probes, args.tree.resolve(), args.out, args.flood, args.heavy,
                 args.attack_seconds, args.agent_nofile)
    print_report(report, f"{args.probes} /healthz probes per count")
    return 0


if __name__ == "__main__":
    sys.exit(main())
