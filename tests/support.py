"""Helpers for tests: the gitsync command as a real subprocess."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
def gitsync_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """An environment for `python -m gitsync` that imports this tree and no host settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITSYNC_", "SOPS_"))}
    env.pop("CREDENTIALS_DIRECTORY", None)
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


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (the caller retries if it is taken meanwhile)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
