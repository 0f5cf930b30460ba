"""The git CLI with a fixed identity and no host configuration, and ``git daemon`` on 127.0.0.1.

The git CLI is fine here: it makes the repos that gitsync, which never needs it, then reads.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from pathlib import Path

from testkit.processes import LOCALHOST, ServerProcess, free_port, stop_process, wait_for_port

# A fixed identity and no user/system config: the same commits on every machine.
GIT_ENV = {
    "GIT_AUTHOR_NAME": "Test Author",
    "GIT_AUTHOR_EMAIL": "author@example.test",
    "GIT_COMMITTER_NAME": "Test Committer",
    "GIT_COMMITTER_EMAIL": "committer@example.test",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_TERMINAL_PROMPT": "0",
}


def git_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_ENV)
    env.update(extra or {})
    return env


def git(*args: str, cwd: Path | None = None, input: bytes | None = None,
        env: Mapping[str, str] | None = None, check: bool = True) -> str:
    """Run the git CLI; return stdout as text (stripped)."""
    result = subprocess.run(["git", *args], cwd=cwd, input=input, env=git_env(env),
                            capture_output=True, timeout=120)
    if check and result.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed: {result.stderr.decode(errors='replace')}")
    return result.stdout.decode().strip()


class GitDaemon(ServerProcess):
    """``git daemon`` serving every repo under `base_path` as ``git://127.0.0.1:PORT/<name>``."""

    def __init__(self, base_path: Path, *, receive_pack: bool = False, max_connections: int = 32) -> None:
        self.base_path = base_path
        self.receive_pack = receive_pack
        # git daemon's own default is 32; past it, it kills a child of the same client address to make
        # room (on loopback, any of them): a fleet test sizes it to its fleet.
        self.max_connections = max_connections
        self.port = 0
        self.proc: subprocess.Popen | None = None

    def url(self, name: str) -> str:
        return f"git://{LOCALHOST}:{self.port}/{name}"

    def start(self) -> GitDaemon:
        """Listen; a daemon started again after `stop()` takes its old port (clients keep their URL)."""
        # git daemon cannot listen on port 0: pick a free port and retry if someone took it.
        reuse = self.port
        for _attempt in range(5):
            port = reuse or free_port()
            args = ["git", "daemon", "--reuseaddr", f"--listen={LOCALHOST}", f"--port={port}",
                    f"--base-path={self.base_path}", "--export-all", "--informative-errors",
                    f"--max-connections={self.max_connections}"]
            if self.receive_pack:
                args.append("--enable=receive-pack")
            args.append(str(self.base_path))
            proc = subprocess.Popen(args, env=git_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                    start_new_session=True)
            if wait_for_port(port, proc):
                self.port, self.proc = port, proc
                return self
            stop_process(proc)
        raise RuntimeError("git daemon did not start")
