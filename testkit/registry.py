"""A real OCI registry on 127.0.0.1: Debian's ``docker-registry`` (the CNCF distribution registry, 2.8),
with filesystem storage in a temporary directory and htpasswd (bcrypt) basic auth, stopped by pid.

`Registry.blob_path` finds a blob's file in the storage, so a test can change one byte of it behind
the registry's back (the registry serves what is on disk; the client must verify the digest).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from testkit.processes import LOCALHOST, ServerProcess, free_port, stop_process, wait_for_port

__all__ = ["Registry"]

USER = "ci"
PASSWORD = "registry-password-for-tests"  # long enough for the log redactor


class Registry(ServerProcess):
    """``docker-registry serve`` on a free port; `auth`: htpasswd basic auth for `USER`/`PASSWORD`.
    Started again after `stop()` it takes its old port and storage (clients keep their URL)."""

    def __init__(self, root: Path, *, auth: bool = True) -> None:
        self.root = root
        self.auth = auth
        self.port = 0
        self.storage = root / "storage"
        self.log = root / "registry.log"

    @property
    def address(self) -> str:
        return f"{LOCALHOST}:{self.port}"

    def url(self, name: str, tag: str = "main") -> str:
        """``oci://127.0.0.1:PORT/name:tag``: what `gitsync publish --to` and an agent's repo take."""
        return f"oci://{self.address}/{name}:{tag}"

    def _config(self, port: int) -> Path:
        self.storage.mkdir(parents=True, exist_ok=True)
        auth = ""
        if self.auth:
            htpasswd = self.root / "htpasswd"
            if not htpasswd.exists():
                subprocess.run(["htpasswd", "-Bbc", str(htpasswd), USER, PASSWORD], check=True,
                               capture_output=True, timeout=30)
            auth = f"auth:\n  htpasswd:\n    realm: gitsync-tests\n    path: {htpasswd}\n"
        config = self.root / "config.yml"
        config.write_text(
            "version: 0.1\nlog:\n  level: warn\n  accesslog:\n    disabled: true\n"
            f"storage:\n  filesystem:\n    rootdirectory: {self.storage}\n  delete:\n    enabled: true\n"
            f"  cache:\n    blobdescriptor: inmemory\n"
            f"http:\n  addr: {LOCALHOST}:{port}\n  secret: tests-only-secret\n{auth}")
        return config

    def start(self) -> Registry:
        reuse = self.port
        for _attempt in range(5):
            port = reuse or free_port()
            config = self._config(port)
            with self.log.open("ab") as log:
                proc = subprocess.Popen(["docker-registry", "serve", str(config)], stdout=log, stderr=log,
                                        start_new_session=True)
            if wait_for_port(port, proc):
                self.port, self.proc = port, proc
                return self
            stop_process(proc)
        raise RuntimeError(f"docker-registry did not start: {self.log.read_text()[-2000:]}")

    def blob_path(self, digest: str) -> Path:
        """The file holding blob `digest` (``sha256:…``) in the registry's storage."""
        hexdigest = digest.removeprefix("sha256:")
        return (self.storage / "docker/registry/v2/blobs/sha256" / hexdigest[:2] / hexdigest / "data")

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid
