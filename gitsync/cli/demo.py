"""`gitsync demo`: the whole loop on the embedded sample repo, narrated, on 127.0.0.1 only.

It needs nothing but the package, so a newcomer sees the loop work right after ``pip install``:

* the remote: the sample config repo (`sample_repo_dir`) committed into a temporary bare repo and
  served over ``git://`` by dulwich's own server on a free loopback port — a real network remote
  the agent fetches from and writes back to, with no git binary needed;
* the gateway: the Admin API double with its data plane (`gitsync.testing.apisix`);
* the agent: the `Daemon` that ``gitsync run`` runs, started in this process with a webhook secret
  and a fast drift watch; the sample's ``${{ secrets.VAULT_TOKEN }}`` comes from
  a demo token in a secrets directory, as a systemd credential would.

The steps: a first sync; a commit applied on a webhook; another writer registering a ``secrets``
manager out of band with a bumped ``secrets_conf_version`` (the state in which a pusher that
echoes cached versions, as ADC and the APISIX ingress controller do, is refused on every retry)
and the next commit applied over it; a commit that passes validation but breaks a route, rolled
back by the health check the demo adds to the sample (`CHECK_FILE`, run against the double's data
plane), then its fix applied; a broken commit refused with its file:line and a git note; a
gateway restart healed by the drift watch; the status branch.

Each step is narrated on stdout as it happens, with what was measured; the agent's own log lines
go to stderr at WARNING (``-v`` for more). ``--json`` adds a last line, ``DEMO-SUMMARY {json}``,
that scripts and tests can check. Every commit has a fixed author and time, so the SHAs are the
same on every run. Everything started is stopped at the end (daemon, double, git server) and the
temporary directory removed, unless ``--workdir`` keeps it; ``--keep-running`` stays up until
Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import hmac
import json
import secrets
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any, TypeVar

import httpx
from dulwich import porcelain
from dulwich.index import commit_tree
from dulwich.object_store import tree_lookup_path
from dulwich.objects import Blob, Commit
from dulwich.repo import Repo
from dulwich.server import DictBackend, TCPGitServer

import gitsync
from gitsync import __version__
from gitsync import log as gslog
from gitsync.agent.fleet_gate import own_heartbeat
from gitsync.agent.gate import fleet_table
from gitsync.agent.outcomes import SyncOutcome
from gitsync.agent.sync import Agent
from gitsync.daemon.service import Daemon
from gitsync.kinds import METADATA_KEYS, VERSION_SUFFIX
from gitsync.settings import Secret, Settings
from gitsync.source.transport import Remote
from gitsync.testing.apisix import ApisixDouble
from gitsync.writeback.fleet import read_fleet
from gitsync.writeback.wire import AGENTS_DIR, agent_file_name, full_ref, status_ref

AGENT_NAME = "demo"
REPO_NAME = "config.git"
BRANCH = b"refs/heads/main"
PATHS = ("base", "envs/prod")  # the sample's layering: base, then the prod overlay
DEMO_VAULT_TOKEN = "demo-vault-token"
AUTHOR = b"Demo User <demo@example.com>"
EPOCH = 1735689600  # 2025-01-01T00:00:00Z: fixed commit times make the same SHAs on every run
DRIFT_INTERVAL = 0.5  # seconds between drift checks: a restart is noticed fast
STEP_TIMEOUT = 10.0  # longest wait for any one step before the demo gives up (exit 1)
KEEP_RUNNING_POLL = 2.0  # with --keep-running, the agent polls the remote this often

# The scripted edits to the sample: (file, text before, text after, commit message).
ROUTE_FILE = "base/routes/api.yaml"
CHANGE = (ROUTE_FILE, "uris: [/api/orders, /api/orders/*]",
          "uris: [/api/orders, /api/orders/*, /api/v2/orders/*]", "routes: serve /api/v2/orders too")
CUSTOMERS = (ROUTE_FILE, "uri: /api/users/*\n", "uris: [/api/users/*, /api/customers/*]\n",
             "routes: serve /api/customers as users too")
BREAK = (ROUTE_FILE, "upstream_id: orders\n", "upstream_id: order\n",
         "routes: move api-orders to the new upstream")  # a typo: no upstream "order" exists
# A valid commit that breaks a route: a typo in its host, so requests for api.example.com find no route.
HOST_TYPO = (ROUTE_FILE, "hosts: [api.example.com]\n    upstream_id: orders",
             "hosts: [api.exmaple.com]\n    upstream_id: orders", "routes: orders on the new host name")
HOST_FIX = (ROUTE_FILE, HOST_TYPO[2], HOST_TYPO[1], "routes: orders back on api.example.com")
# The health check the demo adds to the sample: the orders route answers through the data plane.
CHECK_FILE = "base/checks/orders.yaml"
CHECK = b"""\
checks:
  - name: orders-answer
    request:
      path: /api/orders
      host: api.example.com
    expect:
      status: 200
    timeout: 1s
    retries: 2
    interval: 300ms
"""
CHECK_BOUND = 2 * (1 + 0.3) + 1  # retries x (timeout + interval) + 1 s: the rollback's bound
API_HOST = "api.example.com"
FIRST_PATH = "/api/orders"
CHANGED_PATH = "/api/v2/orders/42"
ROUTE_ID = "api-orders"
CUSTOMERS_PATH = "/api/customers/7"
USERS_ROUTE_ID = "api-users"

# The other writer of step 3: a secrets manager of its own, and its version, a millisecond
# timestamp as ADC writes them (fixed, so the narration is the same on every run).
OTHER_MANAGER = {"id": "vault/ops", "uri": "http://127.0.0.1:8201", "prefix": "kv/ops",
                 "token": "$env://OPS_VAULT_TOKEN"}
OTHER_WRITER_VERSION = (EPOCH + 7200) * 1000

T = TypeVar("T")


class DemoError(Exception):
    """A step did not happen as narrated (or the sample repo cannot be found): the demo exits 1."""


# ----------------------------------------------------------------------------------------------------
# the sample repo


def sample_repo_dir() -> Path:
    """The embedded sample config repo: ``gitsync/_sample_repo`` in a wheel, ``sample-repo/`` in a tree."""
    package = Path(gitsync.__file__).resolve().parent
    candidates = (package / "_sample_repo", package.parent / "sample-repo")
    for candidate in candidates:
        if (candidate / "base").is_dir():
            return candidate
    raise DemoError("the sample repo is missing: looked in " + " and ".join(str(c) for c in candidates))


def read_files(root: Path) -> dict[str, bytes]:
    """Every file below `root`, by POSIX path relative to it."""
    return {p.relative_to(root).as_posix(): p.read_bytes()
            for p in sorted(root.rglob("*")) if p.is_file() and "__pycache__" not in p.parts}


def edited(files: dict[str, bytes], path: str, before: str, after: str) -> dict[str, bytes]:
    """`files` with one exact, unique text replacement in `path` (line numbers elsewhere stay put)."""
    text = files[path].decode()
    if text.count(before) != 1:
        raise DemoError(f"sample repo changed: {path} no longer holds {before.strip()!r} exactly once")
    return {**files, path: text.replace(before, after).encode()}


# ----------------------------------------------------------------------------------------------------
# the remote: a bare repo served over git:// on loopback


class DemoRemote:
    """A bare repo served by dulwich's git:// server on 127.0.0.1 (fetch and push), plus commits into it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.repo = Repo.init_bare(str(path), mkdir=True)
        self.repo.refs.set_symbolic_ref(b"HEAD", BRANCH)
        self._commits = 0
        self._server = TCPGitServer(DictBackend({b"/" + REPO_NAME.encode(): self.repo}), "127.0.0.1", 0)
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="demo-git-server", daemon=True)
        self._thread.start()
        self.url = f"git://127.0.0.1:{self._server.server_address[1]}/{REPO_NAME}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
        self.repo.close()

    def commit(self, files: dict[str, bytes], message: str) -> str:
        """Commit `files` as the whole tree on main (as a `git push` would land it); return the SHA."""
        store = self.repo.object_store
        entries = []
        for path, data in files.items():
            blob = Blob.from_string(data)
            store.add_object(blob)
            entries.append((path.encode(), blob.id, 0o100644))
        parent: bytes | None = None
        with contextlib.suppress(KeyError):
            parent = self.repo.refs[BRANCH]
        commit = Commit()
        commit.tree = commit_tree(store, entries)
        commit.parents = [parent] if parent else []
        commit.author = commit.committer = AUTHOR
        commit.author_time = commit.commit_time = EPOCH + 60 * self._commits
        commit.author_timezone = commit.commit_timezone = 0
        commit.message = message.encode() + b"\n"
        store.add_object(commit)
        if not self.repo.refs.set_if_equals(BRANCH, parent, commit.id):
            raise DemoError("main moved under the demo")
        self._commits += 1
        return commit.id.decode()

    def note(self, sha: str, notes_ref: str) -> str | None:
        """The note on `sha` under `notes_ref` (e.g. ``refs/notes/gitsync``), as pushed by the agent."""
        name = notes_ref.removeprefix("refs/notes/").encode()
        with contextlib.suppress(KeyError):
            text = porcelain.notes_show(self.repo, sha.encode(), ref=name)
            return text.decode() if text is not None else None
        return None

    def status_file(self, branch: str, agent: str) -> str | None:
        """``agents/<agent>.yaml`` on the status branch, or None while there is none."""
        ref = full_ref(branch, "refs/heads/")
        if ref not in self.repo.refs:
            return None
        tree = self.repo[self.repo.refs[ref]].tree
        try:
            _, sha = tree_lookup_path(self.repo.object_store.__getitem__, tree,
                                      AGENTS_DIR + b"/" + agent_file_name(agent).encode())
        except KeyError:
            return None
        return self.repo.object_store[sha].data.decode()


# ----------------------------------------------------------------------------------------------------
# narration and waiting


class Narrator:
    """Numbered steps on stdout, flushed at once so they interleave rightly with the agent's log."""

    def __init__(self) -> None:
        self.started = time.monotonic()

    def step(self, number: int, text: str) -> None:
        print(f"\n[{number}] {text}", flush=True)

    def say(self, text: str) -> None:
        print(f"    {text}", flush=True)

    def block(self, text: str) -> None:
        for line in text.rstrip("\n").splitlines():
            print(f"      | {line}", flush=True)

    def elapsed(self) -> float:
        return time.monotonic() - self.started


def wait_for(what: str, probe: Callable[[], T | None], timeout: float = STEP_TIMEOUT) -> tuple[T, float]:
    """Poll `probe` until it returns something truthy; return it and the seconds it took."""
    started = time.monotonic()
    while True:
        value = probe()
        if value:
            return value, time.monotonic() - started
        if time.monotonic() - started > timeout:
            raise DemoError(f"gave up after {timeout:.0f}s waiting for {what}")
        time.sleep(0.02)


@dataclass(frozen=True)
class DemoAnswer:
    """One request through the gateway's data plane."""

    status: int
    route_id: str | None

    def __str__(self) -> str:
        return f"{self.status}" + (f", route {self.route_id}" if self.route_id else "")


class DataPlane:
    """Requests through the double's data plane, as a client of the gateway would send them."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._client = httpx.Client(base_url=url, timeout=2.0, trust_env=False)

    def get(self, path: str, host: str = API_HOST) -> DemoAnswer:
        try:
            response = self._client.get(path, headers={"Host": host})
        except httpx.TransportError:
            return DemoAnswer(0, None)
        return DemoAnswer(response.status_code, response.headers.get("X-Route-Id"))

    def close(self) -> None:
        self._client.close()


class OtherWriter:
    """Another client of the gateway's Admin API (an operator's script, ADC): whole configs in and out."""

    def __init__(self, url: str, admin_key: str) -> None:
        self._client = httpx.Client(base_url=url, timeout=5.0, trust_env=False,
                                    headers={"X-API-KEY": admin_key})

    def get(self) -> dict[str, Any]:
        """The live config, without the metadata keys (as ADC keeps it in its cache)."""
        response = self._client.get("/apisix/admin/configs")
        response.raise_for_status()
        return {k: v for k, v in response.json().items() if k not in METADATA_KEYS}

    def put(self, config: dict[str, Any]) -> httpx.Response:
        """PUT a whole config, its digest the SHA-1 of the body (as ADC sends it)."""
        body = json.dumps(config, sort_keys=True).encode()
        return self._client.put("/apisix/admin/configs", content=body,
                                headers={"Content-Type": "application/json",
                                         "X-Digest": hashlib.sha1(body).hexdigest()})

    def close(self) -> None:
        self._client.close()


def versions_of(config: dict[str, Any]) -> dict[str, Any]:
    """``{kind: version}`` of a config (``routes_conf_version`` → ``routes``)."""
    return {k.removesuffix(VERSION_SUFFIX): v for k, v in sorted(config.items())
            if k.endswith(VERSION_SUFFIX)}


def github_push(listen_url: str, secret: str, sha: str) -> int:
    """POST a GitHub push event, signed with the webhook secret, to the agent; return the status."""
    body = json.dumps({"ref": BRANCH.decode(), "after": sha}).encode()
    signature = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    response = httpx.post(listen_url + "/hooks/github", content=body, timeout=5.0, trust_env=False,
                          headers={"Content-Type": "application/json", "X-GitHub-Event": "push",
                                   "X-Hub-Signature-256": "sha256=" + signature})
    return response.status_code


def outcome_of(agent: Agent, sha: str, *results: str) -> SyncOutcome | None:
    """The agent's last sync outcome, if it is about `sha` with one of `results`."""
    outcome = agent.last_outcome
    if outcome is not None and outcome.commit == sha and outcome.result in results:
        return outcome
    return None


# ----------------------------------------------------------------------------------------------------
# the demo


def demo_settings(base: Settings, remote_url: str, gateway_url: str, proxy_url: str, admin_key: str,
                  workdir: Path) -> Settings:
    """Settings for the demo agent: only logging comes from the caller's settings, nothing from a host."""
    key_file = workdir / "admin-key"
    key_file.write_text(admin_key + "\n")
    key_file.chmod(0o600)
    secrets_dir = workdir / "secrets"
    secrets_dir.mkdir(mode=0o700)
    (secrets_dir / "VAULT_TOKEN").write_text(DEMO_VAULT_TOKEN)
    return Settings(
        repo=remote_url, ref="main", paths=PATHS, secrets_dir=secrets_dir,
        gateways=(gateway_url,), admin_key=Secret(admin_key), admin_key_file=key_file,
        proxy_urls=(proxy_url,), gateway_timeout=5.0, git_timeout=10.0,
        interval=3600.0, jitter=0.0,  # no polls during the steps: every sync has a reason shown
        drift_interval=DRIFT_INTERVAL, max_backoff=2.0,
        state_dir=workdir / "state", listen="127.0.0.1:0", ui=True,
        webhook_secret=Secret(secrets.token_hex(16)),
        writeback="on", agent_name=AGENT_NAME, author="gitsync demo <gitsync@localhost>",
        log_json=base.log_json, verbose=base.verbose,
    )


@contextlib.contextmanager
def _workdir(path: str | None) -> Iterator[Path]:
    """The directory the demo works in: the user's (kept) or a temporary one (removed)."""
    if path is None:
        with tempfile.TemporaryDirectory(prefix="gitsync-demo-") as tmp:
            yield Path(tmp)
        return
    workdir = Path(path).expanduser().resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    if any(workdir.iterdir()):
        raise DemoError(f"--workdir {workdir} is not empty")
    yield workdir


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


@contextlib.contextmanager
def _sigterm_interrupts() -> Iterator[None]:
    """SIGTERM acts like Ctrl-C, so either one unwinds the demo through its clean-up."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run_demo(settings: Settings, args: argparse.Namespace) -> int:
    """`gitsync demo`: narrate the loop; exit 0 when every step happened, 1 when one did not."""
    gslog.setup(verbose=settings.verbose, json_lines=settings.log_json,
                level=("WARNING", "INFO", "DEBUG", "TRACE")[min(settings.verbose, 3)])
    workdir_arg = getattr(args, "workdir", None)
    try:
        with _sigterm_interrupts(), _workdir(workdir_arg) as workdir, contextlib.ExitStack() as stack:
            print(f"gitsync {__version__} demo: the whole loop on the embedded sample repo, on 127.0.0.1 "
                  f"only\nworking in {workdir}" + (" (kept)" if workdir_arg else " (removed at the end)"),
                  flush=True)
            demo = Demo.start(settings, workdir, stack)
            demo.first_sync()
            demo.change_route()
            demo.other_writer()
            demo.failing_check()
            demo.broken_commit()
            demo.restart_gateway()
            demo.status_branch()
            demo.finish(json_summary=bool(getattr(args, "json", False)))
            if getattr(args, "keep_running", False):
                demo.keep_running()
            if workdir_arg:
                print(f"kept {workdir}: git -C {workdir / 'remote.git'} log --notes=gitsync main; "
                      f"gitsync status --state-dir {workdir / 'state'}", flush=True)
    except DemoError as exc:
        print(f"gitsync demo: error: {gslog.redact(str(exc))}", file=sys.stderr)
        return 1
    return 0


@dataclass
class Demo:
    """What the demo started, and what it has seen so far; one method per narrated step."""

    settings: Settings
    remote: DemoRemote
    double: ApisixDouble
    plane: DataPlane
    daemon: Daemon
    agent: Agent
    listen_url: str
    files: dict[str, bytes]
    shas: dict[str, str]
    say: Narrator = field(default_factory=Narrator)
    summary: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def start(cls, base: Settings, workdir: Path, stack: contextlib.ExitStack) -> Demo:
        """Step 0: the remote, the gateway double and the agent, each stopped by `stack` at the end."""
        say = Narrator()
        files = read_files(sample_repo_dir()) | {CHECK_FILE: CHECK}
        remote = DemoRemote(workdir / "remote.git")
        stack.callback(remote.close)
        shas = {"first": remote.commit(files, "sample: the embedded sample config repo, with a health check")}
        admin_key = secrets.token_hex(16)
        double = ApisixDouble(admin_key).start()
        stack.callback(double.stop)
        plane = DataPlane(double.proxy_url)
        stack.callback(plane.close)
        settings = demo_settings(base, remote.url, double.url, double.proxy_url, admin_key, workdir)
        say.step(0, "set-up")
        say.say(f"config repo  {remote.url}  (served by dulwich's git:// server; the sample repo "
                f"committed as {shas['first'][:7]}, read with paths = {list(PATHS)})")
        say.say(f"gateway      Admin API double {double.url}, data plane {double.proxy_url}")
        say.say(f"health check {CHECK_FILE}: GET {FIRST_PATH} (Host: {API_HOST}) through the data plane "
                "must answer 200, after every push that changes something")
        daemon = Daemon(settings)
        daemon.start()
        stack.callback(daemon.stop)  # stopped first: no push or write-back hits a stopped server
        assert daemon.agent is not None and daemon.server is not None
        listen_url = f"http://127.0.0.1:{daemon.server.port}"
        say.say(f"agent        gitsync run, in this process: {listen_url} (/healthz /readyz /metrics "
                f"/hooks/github), a webhook secret, drift watch every {DRIFT_INTERVAL}s, write-back on")
        say.say(f"secret       ${{{{ secrets.VAULT_TOKEN }}}}: a demo token in "
                f"{settings.secrets_dir}/VAULT_TOKEN")
        return cls(settings, remote, double, plane, daemon, daemon.agent, listen_url, files, shas, say,
                   {"remote": remote.url, "agent": AGENT_NAME, "commits": shas})

    def _serves(self, path: str) -> bool:
        return self.plane.get(path) == DemoAnswer(200, ROUTE_ID)

    def _commit(self, key: str, edit: tuple[str, str, str, str]) -> str:
        path, before, after, message = edit
        self.files = edited(self.files, path, before, after)
        self.shas[key] = self.remote.commit(self.files, message)
        return self.shas[key]

    def _webhook(self, sha: str) -> int:
        secret = self.settings.webhook_secret.reveal() if self.settings.webhook_secret else ""
        status = github_push(self.listen_url, secret, sha)
        if status != 202:
            raise DemoError(f"the webhook answered {status}")
        return status

    def first_sync(self) -> None:
        """Step 1: the agent's first sync, then a request through the data plane."""
        sha = self.shas["first"]
        outcome, took = wait_for("the first sync", lambda: outcome_of(self.agent, sha, "applied"))
        live = self.double.config()
        items = sum(len(v) for v in live.values() if isinstance(v, list))
        self.say.step(1, f"first sync: {sha[:7]} applied in {took:.2f}s (sync reason: {outcome.reason}); "
                         f"{items} items on the gateway")
        self.say.say("versions     " + ", ".join(f"{kind}={v}" for kind, v in versions_of(live).items()))
        answer = self.plane.get(FIRST_PATH)
        self.say.say(f"GET {FIRST_PATH} (Host: {API_HOST}) through the data plane → {answer}")
        if answer != DemoAnswer(200, ROUTE_ID):
            raise DemoError(f"the data plane answered {answer} for {FIRST_PATH}")
        self.summary["first_sync_seconds"] = round(took, 3)
        self.summary["first_answer"] = [answer.status, answer.route_id]

    def change_route(self) -> None:
        """Step 2: a commit that changes a route, applied on the webhook within a second."""
        before = self.plane.get(CHANGED_PATH)
        sha = self._commit("change", CHANGE)
        self.say.step(2, f"commit {sha[:7]} \"{CHANGE[3]}\" lands on main ({ROUTE_FILE}: "
                         f"{CHANGE[2].strip()})")
        self.say.say(f"before: GET {CHANGED_PATH} → {before}")
        sent = time.monotonic()
        status = self._webhook(sha)
        self.say.say(f"webhook: POST {self.listen_url}/hooks/github, signed X-Hub-Signature-256 → {status}")
        outcome, _ = wait_for("the changed route", lambda: self._serves(CHANGED_PATH)
                              and outcome_of(self.agent, sha, "applied"))
        took = time.monotonic() - sent
        answer = self.plane.get(CHANGED_PATH)
        self.say.say(f"applied {took:.2f}s after the webhook (sync reason: {outcome.reason}): "
                     f"GET {CHANGED_PATH} → {answer}")
        self.summary.update(before_change_answer=before.status, webhook_apply_seconds=round(took, 3),
                            webhook_sync_reason=outcome.reason)

    def other_writer(self) -> None:
        """Step 3: another writer bumps ``secrets_conf_version`` out of band; the next commit still applies.

        The drift watch is paused for the step: it would notice the write first and heal it the
        same way, and the point here is the next commit."""
        admin_key = self.settings.admin_key.reveal() if self.settings.admin_key else ""
        writer = OtherWriter(self.double.url, admin_key)
        drift = self.daemon.scheduler.get_job("drift")
        if drift is not None:
            drift.pause()
        self.say.step(3, f"another writer registers the secrets manager {OTHER_MANAGER['id']} out of band")
        try:
            cached = writer.get()  # what a pusher that caches versions (ADC, the ingress controller) holds
            before = versions_of(cached)
            config = {**cached, "secrets": [*(cached.get("secrets") or []), OTHER_MANAGER],
                      "secrets_conf_version": OTHER_WRITER_VERSION}
            written = writer.put(config)
            theirs = {str(s.get("id")) for s in writer.get().get("secrets") or []}
            self.say.say(f"PUT /apisix/admin/configs from another client: secrets_conf_version "
                         f"{before['secrets']} → {OTHER_WRITER_VERSION} (a millisecond timestamp, as ADC "
                         f"writes them) → {written.status_code}")
            if written.status_code != 202:
                raise DemoError(f"the other writer's PUT was answered {written.status_code}: {written.text}")
            stale = writer.put(cached)
            refusal = str(stale.json().get("error_msg")) if stale.status_code == 400 else stale.text
            self.say.say(f"a pusher that sends the versions it cached before (ADC, the ingress controller) "
                         f"is refused now, and on every retry: {stale.status_code} {refusal}")
            if stale.status_code != 400:
                raise DemoError(f"a stale PUT was answered {stale.status_code}, not 400")
            sha = self._commit("customers", CUSTOMERS)
            self.say.say(f"commit {sha[:7]} \"{CUSTOMERS[3]}\" lands on main ({ROUTE_FILE}: "
                         f"{CUSTOMERS[2].strip()}); webhook → {self._webhook(sha)}")
            outcome, took = wait_for("the commit over the other writer", lambda: self.plane.get(
                CUSTOMERS_PATH) == DemoAnswer(200, USERS_ROUTE_ID) and outcome_of(self.agent, sha, "applied"))
        finally:
            if drift is not None:
                drift.resume()
            writer.close()
        live = self.double.config()
        after = versions_of(live)
        self.say.say(f"applied in {took:.2f}s (sync reason: {outcome.reason}): GET {CUSTOMERS_PATH} → "
                     f"{self.plane.get(CUSTOMERS_PATH)}")
        moved = [f"{kind} {before.get(kind)}" + (f" → {OTHER_WRITER_VERSION}" if kind == "secrets" else "")
                 + f" → {after[kind]}" for kind in after if after[kind] != before.get(kind)]
        self.say.say(f"versions     {', '.join(moved)}; every other kind kept at its version: gitsync read "
                     "them live just before its PUT, so none it sent was below the gateway's")
        gone = sorted(theirs - {str(s.get("id")) for s in live.get("secrets") or []})
        pruned = {"secrets": gone} if gone else {}
        if gone:
            self.say.say(f"pruned       secrets {', '.join(gone)}: the repo is the truth for the kinds "
                         "gitsync manages (unmanaged = [\"secrets\"] leaves another tool's managers alone)")
        self.summary.update(other_writer={"before": before, "written": OTHER_WRITER_VERSION, "after": after,
                                          "stale_put": [stale.status_code, refusal],
                                          "sync_reason": outcome.reason, "pruned": pruned})

    def failing_check(self) -> None:
        """Step 4: a valid commit breaks a route; its health check fails and the gateway is rolled back;
        the fix that follows applies as any commit does."""
        good = self.shas["customers"]
        sha = self._commit("health", HOST_TYPO)
        self.say.step(4, f"commit {sha[:7]} \"{HOST_TYPO[3]}\" lands on main, with a typo that validation "
                         f"cannot know of ({ROUTE_FILE}: {HOST_TYPO[2].splitlines()[0].strip()})")
        sent = time.monotonic()
        self.say.say(f"webhook → {self._webhook(sha)}")
        outcome, _ = wait_for("the rollback", lambda: self._serves(FIRST_PATH)
                              and outcome_of(self.agent, sha, "failed"))
        took = time.monotonic() - sent
        self.say.say(f"pushed, then checked: failed at {outcome.stage}; the gateway was rolled back to "
                     f"{good[:7]} {took:.2f}s after the webhook (bound: retries × (timeout + interval) + 1 s "
                     f"= {CHECK_BOUND:.1f}s after the push):")
        for problem in outcome.problems:
            self.say.say(f"  {problem}")
        answer = self.plane.get(FIRST_PATH)
        self.say.say(f"GET {FIRST_PATH} (Host: {API_HOST}) → {answer}; {sha[:7]} is not tried again "
                     "until a new commit lands")
        if outcome.stage != "health" or answer != DemoAnswer(200, ROUTE_ID):
            raise DemoError(f"no rollback on the failed check: stage {outcome.stage}, {answer}")
        notes_ref = self.settings.notes_ref
        note, _ = wait_for("the git note", lambda: self.remote.note(sha, notes_ref))
        self.say.say(f"git note on {sha[:7]}:")
        self.say.block(note)
        fix = self._commit("fixed", HOST_FIX)
        self.say.say(f"commit {fix[:7]} \"{HOST_FIX[3]}\" lands on main; webhook → {self._webhook(fix)}")
        fixed, _ = wait_for("the fix", lambda: outcome_of(self.agent, fix, "applied"))
        self.say.say(f"applied (sync reason: {fixed.reason}): " + "; ".join(
            g.summary().split(": ", 1)[1] for g in fixed.gateways)
            + " (the same content as the rollback's, so nothing needed pushing)"
            * all(g.status == "unchanged" for g in fixed.gateways))
        self.summary.update(health_stage=str(outcome.stage), health_problems=outcome.problems,
                            health_rollback_seconds=round(took, 3), health_answer=[answer.status,
                                                                                  answer.route_id],
                            health_note=note)

    def broken_commit(self) -> None:
        """Step 5: a broken commit is refused with file:line, the gateway keeps the last good, a note."""
        sha = self._commit("broken", BREAK)
        self.say.step(5, f"commit {sha[:7]} \"{BREAK[3]}\" lands on main, with a typo ({ROUTE_FILE}: "
                         f"{BREAK[2].strip()})")
        self.say.say(f"webhook → {self._webhook(sha)}")
        outcome, took = wait_for("the refusal", lambda: outcome_of(self.agent, sha, "failed"))
        self.say.say(f"refused at {outcome.stage} in {took:.2f}s; nothing was pushed:")
        for problem in outcome.problems:
            self.say.say(f"  {problem}")
        still = self.plane.get(CHANGED_PATH)
        self.say.say(f"the gateway stays on {self.shas['fixed'][:7]}: GET {CHANGED_PATH} → {still}")
        if still != DemoAnswer(200, ROUTE_ID):
            raise DemoError(f"the gateway lost the last good commit: {still}")
        notes_ref = self.settings.notes_ref
        note, _ = wait_for("the git note", lambda: self.remote.note(sha, notes_ref))
        self.say.say(f"git note on {sha[:7]} in {notes_ref} (in a clone: "
                     f"git fetch origin {notes_ref}:{notes_ref} && git log --notes=gitsync):")
        self.say.block(note)
        self.summary.update(refused_stage=outcome.stage, refused_problems=outcome.problems, note=note)

    def restart_gateway(self) -> None:
        """Step 6: the gateway restarts empty; the drift watch refills it from the last good commit."""
        good, tip = self.shas["fixed"], self.shas["broken"]
        self.double.restart()
        emptied = self.plane.get(CHANGED_PATH)
        self.say.step(6, f"the gateway restarts and comes back empty: GET {CHANGED_PATH} → {emptied}")
        outcome, took = wait_for("the drift heal", lambda: self._serves(CHANGED_PATH)
                                 and outcome_of(self.agent, good, "healed"))
        self.say.say(f"the drift watch refilled it in {took:.2f}s (sync reason: {outcome.reason}) with "
                     f"the last good {good[:7]}, from the agent's mirror; main's tip {tip[:7]} stays refused")
        self.say.say(f"GET {CHANGED_PATH} → {self.plane.get(CHANGED_PATH)}")
        self.summary.update(emptied_answer=emptied.status, drift_heal_seconds=round(took, 3),
                            drift_sync_reason=outcome.reason)

    def status_branch(self) -> None:
        """Step 7: this agent's file on the status branch, and the fleet table `status --fleet` prints."""
        s = self.settings
        branch, good = s.status_branch, self.shas["fixed"]
        text, _ = wait_for("the status file", lambda: _status_naming(
            self.remote.status_file(branch, AGENT_NAME), good, "healed"))
        self.say.step(7, f"status branch {branch}: agents/{agent_file_name(AGENT_NAME)}")
        self.say.say(f"(the agent writes its own ref {status_ref(s.status_refs, AGENT_NAME).decode()}; the "
                     "branch is a view of every agent's ref, for browsing)")
        self.say.block(text)
        with tempfile.TemporaryDirectory(prefix="gitsync-demo-fleet-") as tmp:
            fleet = read_fleet(Remote.of(self.remote.url), s.status_refs, Path(tmp))
        self.say.say(f"gitsync status --fleet --repo {self.remote.url}")
        self.say.block(fleet_table(fleet, datetime.now(UTC), own_heartbeat(s)))
        self.summary["status_file"] = text

    def finish(self, *, json_summary: bool) -> None:
        """The closing line, and with ``--json`` the summary (the gateway's live versions and routes too)."""
        live = self.double.config()
        self.summary["gateway"] = {"versions": {k: v for k, v in live.items() if k.endswith("_conf_version")},
                                   "routes": sorted(str(r.get("id")) for r in live.get("routes") or [])}
        self.summary["seconds"] = round(self.say.elapsed(), 3)
        print(f"\ndone in {self.say.elapsed():.1f}s: every step happened as narrated.", flush=True)
        if json_summary:
            print("DEMO-SUMMARY " + gslog.redact(json.dumps(self.summary, sort_keys=True)), flush=True)

    def keep_running(self) -> None:
        """--keep-running: poll every few seconds, say how to play with it, stay up until a signal."""
        self.daemon.scheduler.reschedule_job("poll", trigger="interval", seconds=KEEP_RUNNING_POLL)
        key_file = self.settings.admin_key_file
        print(f"\nstaying up (Ctrl-C to stop); the agent now polls the remote every "
              f"{KEEP_RUNNING_POLL:.0f}s. Try:\n"
              f"  git clone {self.remote.url} demo-config   # edit, commit, git push: watch it apply\n"
              f"  curl -H 'Host: {API_HOST}' {self.double.proxy_url}{FIRST_PATH}\n"
              f"  curl -H \"X-API-KEY: $(cat {key_file})\" {self.double.url}/apisix/admin/configs\n"
              f"  curl {self.listen_url}/metrics\n"
              f"  open {self.listen_url}/   # the web view: what is live, and each item's file:line\n"
              f"READY data_plane={self.double.proxy_url} admin={self.double.url} agent={self.listen_url}",
              flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            print("stopping: the agent, the gateway double, the git server", flush=True)


def _status_naming(text: str | None, commit: str, result: str) -> str | None:
    """`text` when the status file names `commit` with `result` (as the agent writes it), else None."""
    if text and f"commit: {commit}" in text and f"result: {result}" in text:
        return text
    return None


__all__ = ["Demo", "DemoError", "DemoRemote", "run_demo", "sample_repo_dir"]
