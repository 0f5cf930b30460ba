"""The APISIX Admin API double in a process of its own, driven over stdin/stdout.

A real gateway does not share the agent's interpreter: run in-process, the double's JSON
and schema work would compete with the agent for the GIL and bill the agent for it. The
child prints ``{"url": ...}`` once started, then answers one JSON line per command line.
Times are `time.monotonic()` (CLOCK_MONOTONIC: one clock for every process of the machine).

- ``mark``: remember where the request log ends (what `wait_put` waits beyond);
- ``restart``: mark, then `ApisixDouble.restart()` (memory gone, connections cut); ``{"at"}``
  is when restart() was called;
- ``wait_put [TIMEOUT]``: wait for the first PUT accepted after the mark; ``{"at", "routes"}``,
  ``at`` null on timeout;
- ``quit``: stop and exit.

`DoubleProcess` is the parent's side.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from gitsync.testing.apisix import ApisixDouble

ROOT = Path(__file__).resolve().parent.parent
ACCEPTED = (200, 201, 202)
WAIT_TIMEOUT = 120.0
KEY_VARIABLE = "BENCH_ADMIN_KEY"  # not argv: other users can read a command line


def _accepted_put_after(double: ApisixDouble, seen: int, timeout: float) -> float | None:
    """When (monotonic) the first PUT after request number `seen` was seen accepted; None on timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for method, _path, status in double.requests[seen:]:
            if method == "PUT" and status in ACCEPTED:
                return time.monotonic()
        time.sleep(0.001)
    return None


def serve(admin_key: str, proxy: bool = False) -> int:
    double = ApisixDouble(admin_key, proxy=proxy).start()
    print(json.dumps({"url": double.url, "proxy_url": double.proxy_url}), flush=True)
    mark = 0
    for line in sys.stdin:
        command = line.strip()
        reply: dict[str, Any]
        if command == "quit":
            break
        if command == "mark":
            mark = len(double.requests)
            reply = {"at": time.monotonic()}
        elif command == "restart":
            mark = len(double.requests)
            reply = {"at": time.monotonic()}
            double.restart()
        elif command.startswith("wait_put"):
            _, _, timeout = command.partition(" ")
            at = _accepted_put_after(double, mark, float(timeout or WAIT_TIMEOUT))
            routes = double.config().get("routes") or []
            reply = {"at": at, "routes": len(routes) if isinstance(routes, list) else 0}
        else:
            reply = {"error": f"unknown command {command!r}"}
        print(json.dumps(reply), flush=True)
    double.stop()
    return 0


class DoubleProcess:
    """The parent's handle on a double running in a child process."""

    def __init__(self, admin_key: str, *, proxy: bool = False) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench.double", *(["--proxy"] if proxy else [])], cwd=ROOT,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1,
            env={**os.environ, KEY_VARIABLE: admin_key})
        started = self._ask(None)
        self.url: str = started["url"]
        self.proxy_url: str = started["proxy_url"]  # "" without a data plane

    def _ask(self, command: str | None) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        if command is not None:
            self.proc.stdin.write(command + "\n")
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the double exited (status {self.proc.wait()})")
        return json.loads(line)

    def mark(self) -> float:
        return self._ask("mark")["at"]

    def restart(self) -> float:
        """Restart the gateway (it forgets its config); when restart() was called."""
        return self._ask("restart")["at"]

    def wait_put(self, timeout: float = WAIT_TIMEOUT) -> tuple[float, int] | None:
        """When the first PUT after the last mark or restart was accepted, and the routes then held;
        None when none came within `timeout` seconds."""
        reply = self._ask(f"wait_put {timeout}")
        return None if reply["at"] is None else (reply["at"], reply["routes"])

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.write("quit\n")
                self.proc.stdin.close()
                self.proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()

    def __enter__(self) -> DoubleProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


if __name__ == "__main__":
    sys.exit(serve(os.environ[KEY_VARIABLE], proxy="--proxy" in sys.argv[1:]))
