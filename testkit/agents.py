"""`gitsync run` as a real process for tests: start it on a free port, watch its log, metrics and
state, stop it by pid. Shared by the daemon's tests and the safe-apply tests."""

from __future__ import annotations

import hashlib
import hmac
import http.server
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gitsync.testing.apisix import ApisixDouble
from testkit.gitservers import BareRepo, GitDaemon
from testkit.processes import free_port, gitsync_env, wait_for

ADMIN_KEY = "test-admin-key"
HOOK_SECRET = "hook-secret-d41e"
HOOK_BODY = b'{"ref": "refs/heads/main"}'



def config_files(n: int, *, bad: bool = False) -> dict[str, str]:
    """A config repo whose route r1 serves /v<n>; `bad` gives it a number as uri (a schema error)."""
    uri = "42" if bad else f"/v{n}"
    return {"conf/apisix.yaml": (
        "upstreams:\n  - id: u1\n    type: roundrobin\n    nodes:\n      \"127.0.0.1:1980\": 1\n"
        f"routes:\n  - id: r1\n    uri: {uri}\n    upstream_id: u1\n")}


def live_uri(double: ApisixDouble) -> str | None:
    """The uri of the route the gateway holds (None when it holds no route)."""
    routes = double.config().get("routes") or []
    return routes[0].get("uri") if routes else None




def signature(body: bytes, secret: str = HOOK_SECRET) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


class AgentProcess:
    """One `python -m gitsync run` with its listener on a free port; stopped by its pid."""

    def __init__(self, workdir: Path, args: list[str], env: dict[str, str] | None = None,
                 preexec: Callable[[], None] | None = None) -> None:
        self.workdir = workdir
        self.state_dir = workdir / "state"
        self.log_path = workdir / "agent.log"
        self.port = free_port()
        self.args = ["--state-dir", str(self.state_dir), "--listen", f"127.0.0.1:{self.port}", *args]
        self.env = gitsync_env(env)
        self.proc: subprocess.Popen[bytes] | None = None
        self.preexec = preexec

    def start(self, *, wait: bool = True) -> AgentProcess:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "gitsync", "run", *self.args], env=self.env,
                                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log,
                                         preexec_fn=self.preexec)
        if wait:
            wait_for(self.healthy, 15, f"/healthz of the agent (log: {self.log()[-2000:]})")
        return self

    def healthy(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"the agent exited with {self.proc.returncode}: {self.log()[-3000:]}")
        try:
            return self.get("/healthz").status_code == 200
        except httpx.TransportError:
            return False

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def get(self, path: str, bearer: str | None = None) -> httpx.Response:
        headers = {"Authorization": f"Bearer {bearer}"} if bearer else None
        return httpx.get(self.url(path), timeout=5, headers=headers)

    def hook(self, body: bytes | None = None, secret: str = HOOK_SECRET) -> int:
        """POST a GitHub push webhook signed with `secret`, as GitHub sends one: a delivery id and a body
        of its own each time (a body sent again is refused as a replay); the status code."""
        delivery = str(uuid.uuid4())
        if body is None:
            body = HOOK_BODY[:-1] + f', "delivery": "{delivery}"}}'.encode()
        return httpx.post(self.url("/hooks/github"), content=body, timeout=5,
                          headers={"X-Hub-Signature-256": signature(body, secret), "X-GitHub-Event": "push",
                                   "X-GitHub-Delivery": delivery}).status_code

    def metric(self, name: str, **labels: str) -> float:
        """One sample of /metrics (0 when absent)."""
        for family in text_string_to_metric_families(self.get("/metrics").text):
            for sample in family.samples:
                if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                    return sample.value
        return 0.0

    def syncs(self) -> float:
        """Every sync the agent ran, whatever its result."""
        return sum(sample.value for family in text_string_to_metric_families(self.get("/metrics").text)
                   for sample in family.samples if sample.name == "gitsync_syncs_total")

    def state(self) -> dict[str, Any]:
        """state.json, parsed (a half-written file fails the test)."""
        path = self.state_dir / "state.json"
        return json.loads(path.read_text()) if path.exists() else {}

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def signal(self, signum: int) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signum)

    def wait(self, timeout: float) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Callable[..., AgentProcess]]:
    """Start agents: `spawn(repo_url, *flags, gateways=[...], env=...)`; killed (by pid) at teardown."""
    key_file = tmp_path / "admin-key"
    key_file.write_text(ADMIN_KEY)
    hook_file = tmp_path / "webhook-secret"
    hook_file.write_text(HOOK_SECRET)
    started: list[AgentProcess] = []

    def start(repo_url: str | None, *flags: str, gateways: list[str] = (), env: dict[str, str] | None = None,
              wait: bool = True, name: str = "agent",
              preexec: Callable[[], None] | None = None) -> AgentProcess:
        workdir = tmp_path / name
        workdir.mkdir(exist_ok=True)
        args = [*(["--repo", repo_url] if repo_url else []), "--admin-key-file", str(key_file),
                "--webhook-secret-file", str(hook_file), "--interval", "1s", "--jitter", "0s",
                "--drift-interval", "1s", "-v"]
        for url in gateways:
            args += ["--gateway", url]
        agent = AgentProcess(workdir, [*args, *flags], env, preexec)
        started.append(agent)
        return agent.start(wait=wait)

    yield start
    for agent in started:
        agent.kill()


@pytest.fixture
def own_daemon(remotes_root: Path) -> Iterator[GitDaemon]:
    """A git daemon of this test's own, which the test may stop and start again (same port)."""
    with GitDaemon(remotes_root, receive_pack=True) as daemon:
        yield daemon


def memory_limit(megabytes: int) -> Callable[[], None]:
    """A `preexec_fn` that caps a child's address space (RLIMIT_AS): past it, an allocation fails in
    the child instead of the machine swapping. Thread stacks are made small (RLIMIT_STACK), as each
    reserves its stack in the address space; start the child with MALLOC_ARENA_MAX=2 for the same
    reason."""
    import resource

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_STACK, (1 << 20, 1 << 20))
        resource.setrlimit(resource.RLIMIT_AS, (megabytes << 20, megabytes << 20))

    return limit


def repo_url(daemon: GitDaemon, repo: BareRepo) -> str:
    return daemon.url(repo.path.name)




# ---------------------------------------------------------------------------------------------------------
# A real upstream, and a config with a health check on it (safe apply, groups)


@contextmanager
def upstream(body: bytes = b'{"status": "ok"}\n', delay: float = 0.0) -> Iterator[str]:
    """A real HTTP server on 127.0.0.1 answering 200 with `body` to everything, after `delay` seconds:
    `host:port`."""
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            time.sleep(delay)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    with serving(Handler) as address:
        yield address


@contextmanager
def serving(handler: type[http.server.BaseHTTPRequestHandler]) -> Iterator[str]:
    """A threading HTTP server of `handler` on 127.0.0.1 for the block: `host:port`."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True  # a delayed answer must not hold the test's end
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


CHECKS = """\
checks:
  - name: orders-answer
    request:
      path: /orders
      host: api.example.com
    expect:
      status: 200
      body: '"ok"'
    timeout: 500ms
    retries: 2
    interval: 200ms
"""
#: retries × (timeout + interval) + 1 s: the bound the issue sets on a rollback.
ROLLBACK_BOUND = 2 * (0.5 + 0.2) + 1


def config(node: str) -> dict[str, str]:
    """A route /orders on api.example.com to an upstream with one node, and the check above."""
    return {
        "conf/routes.yaml": ("upstreams:\n  - id: orders\n    type: roundrobin\n    nodes:\n"
                             f"      \"{node}\": 1\n"
                             "routes:\n  - id: orders\n    uri: /orders\n    host: api.example.com\n"
                             "    upstream_id: orders\n"),
        "conf/checks.yaml": CHECKS,
    }




def sources_toml(*sources: tuple[str, str, str, str]) -> str:
    """``[[sources]]`` tables, one per (name, repo URL, kind owned, id prefix)."""
    return "".join(f'[[sources]]\nname = "{name}"\nrepo = "{repo}"\n'
                   f'owns = [{{ kinds = ["{kind}"], prefix = "{prefix}" }}]\n\n'
                   for name, repo, kind, prefix in sources)


@contextmanager
def forwarding_doubles(count: int) -> Iterator[list[ApisixDouble]]:
    """`count` doubles whose data planes forward to real upstreams (for the health checks)."""
    with ExitStack() as stack:
        yield [stack.enter_context(ApisixDouble(ADMIN_KEY, forward=True)) for _ in range(count)]
