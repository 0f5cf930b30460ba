"""Real git servers on 127.0.0.1 for tests and the benchmark, and quick ways to make repos with commits.

Servers: `GitDaemon` (git://, optionally with receive-pack; in `testkit.git`), `HttpGitServer` (smart HTTP:
``git http-backend`` behind a threaded stdlib CGI runner, with basic or bearer auth),
`SshGitServer` (``sshd -D`` as the current user, key auth, its own host key) and `HungServer`
(accepts TCP and never answers). Each is a context manager; subprocesses are stopped by pid.
`GitGate` relays git:// to a git daemon, counting connections and bytes per service; it and
`HttpGitServer` can hold the requests of one service until a number of them wait (`Hold`), to
release a fleet's pushes at one instant.

Repos: `BareRepo` is a bare repo on disk (the "remote") with `commit()` (plumbing, so it can
sign, branch from any parent and force-move a ref) and `fast_import()` (thousands of commits
in a second or two). The git CLI is fine here: gitsync itself never needs it.
"""

from __future__ import annotations

import base64
import contextlib
import hmac
import os
import re
import select
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import BinaryIO, Self

from testkit.git import GitDaemon, git, git_env
from testkit.processes import LOCALHOST, ServerProcess, free_port, stop_process, wait_for_port

__all__ = ["BareRepo", "GitDaemon", "GitGate", "Hold", "HttpAuth", "HttpGitServer", "HungServer", "Signer",
           "SshGitServer", "TcpGate", "Traffic", "git", "git_env", "gpg_signer", "ssh_keygen", "ssh_signer"]


# ---------------------------------------------------------------------------------------------------------
# Repos


@dataclass
class Signer:
    """How `BareRepo.commit` signs: ``ssh`` (a private key file) or ``gpg`` (a key id in a GNUPGHOME)."""

    format: str  # "ssh" | "gpg"
    key: str  # ssh: private key path; gpg: key id
    gnupghome: Path | None = None

    def git_args(self) -> list[str]:
        if self.format == "ssh":
            return ["-c", "gpg.format=ssh", "-c", f"user.signingkey={self.key}"]
        return ["-c", "gpg.format=openpgp"]

    def env(self) -> dict[str, str]:
        return {"GNUPGHOME": str(self.gnupghome)} if self.gnupghome else {}

    def sign_flag(self) -> str:
        return "-S" if self.format == "ssh" else f"-S{self.key}"

    def close(self) -> None:
        """Stop the gpg-agent that signing started in this signer's GNUPGHOME (it outlives gpg)."""
        if self.gnupghome is not None:
            subprocess.run(["gpgconf", "--kill", "all"], env={**os.environ, "GNUPGHOME": str(self.gnupghome)},
                           capture_output=True, timeout=30)


@dataclass
class BareRepo:
    """A bare repo on disk: the remote that gitsync mirrors."""

    path: Path
    default_branch: str = "main"
    _clock: int = field(default=1_700_000_000, repr=False)

    @classmethod
    def create(cls, path: Path, default_branch: str = "main") -> BareRepo:
        git("init", "--bare", "-q", "-b", default_branch, str(path))
        return cls(path, default_branch)

    def git(self, *args: str, input: bytes | None = None, env: Mapping[str, str] | None = None) -> str:
        return git(*args, cwd=self.path, input=input, env=env)

    def _dated(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """Distinct, increasing commit dates: two commits of the same tree never share a SHA by accident."""
        self._clock += 1
        date = f"{self._clock} +0000"
        return {"GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date, **(extra or {})}

    def rev(self, name: str) -> str:
        return self.git("rev-parse", "--verify", "-q", name + "^{commit}")

    def tip(self, branch: str | None = None) -> str | None:
        ref = f"refs/heads/{branch or self.default_branch}"
        out = git("rev-parse", "--verify", "-q", ref, cwd=self.path, check=False)
        return out or None

    def commit(self, files: Mapping[str, bytes | str | None], message: str = "change", *,
               branch: str | None = None, parent: str | None = "tip", signer: Signer | None = None,
               replace: bool = False, modes: Mapping[str, str] | None = None) -> str:
        """Commit `files` ({path: content, or None to delete}) on `branch` and move the branch to it.

        `parent="tip"` continues the branch; another SHA (or None, a root commit) force-moves it,
        which is how tests make a force-push. `replace=True` starts from an empty tree. `modes`
        gives a path another mode than ``100644``: ``120000`` a symlink (content: its target),
        ``160000`` a submodule (content: hashed into the commit id it points at).
        """
        branch = branch or self.default_branch
        ref = f"refs/heads/{branch}"
        if parent == "tip":
            parent = self.tip(branch)
        index = self.path / f"tmp-index-{os.getpid()}-{threading.get_ident()}"
        index_env = {"GIT_INDEX_FILE": str(index)}
        try:
            if parent and not replace:
                self.git("read-tree", parent, env=index_env)
            else:
                self.git("read-tree", "--empty", env=index_env)
            for name, content in files.items():
                if content is None:  # mode 0 removes the entry (--force-remove wants a work tree)
                    gone = f"0 {'0' * 40}\t{name}\n".encode()
                    self.git("update-index", "--index-info", env=index_env, input=gone)
                    continue
                data = content.encode() if isinstance(content, str) else content
                blob = self.git("hash-object", "-w", "--stdin", input=data)
                mode = (modes or {}).get(name, "100644")
                self.git("update-index", "--add", "--cacheinfo", f"{mode},{blob},{name}", env=index_env)
            tree = self.git("write-tree", env=index_env)
        finally:
            index.unlink(missing_ok=True)
        args = [*(signer.git_args() if signer else []), "commit-tree", tree, "-m", message]
        if parent:
            args += ["-p", parent]
        if signer:
            args.append(signer.sign_flag())
        sha = self.git(*args, env=self._dated(signer.env() if signer else None))
        self.git("update-ref", ref, sha)
        return sha

    def zeros(self, megabytes: int) -> str:
        """A blob of `megabytes` MB of zeros written into the repo (an object bomb: it packs to about a
        thousandth of its size); its id. Streamed through a file, never held in memory."""
        path = self.path / f"tmp-zeros-{os.getpid()}-{threading.get_ident()}"
        try:
            with open(path, "wb") as handle:
                for _ in range(megabytes):
                    handle.write(bytes(1 << 20))
            return self.git("hash-object", "-w", str(path))
        finally:
            path.unlink(missing_ok=True)

    def tag(self, name: str, target: str, annotated: bool = False) -> None:
        if annotated:
            self.git("tag", "-f", "-a", name, target, "-m", f"tag {name}", env=self._dated())
        else:
            self.git("tag", "-f", name, target)

    def fast_import(self, commits: int, files: int, *, branch: str | None = None,
                    files_per_commit: int = 2, dirs: int = 100) -> str:
        """Append `commits` commits to `branch` with `git fast-import`; the first adds `files` files.

        Each later commit rewrites `files_per_commit` of them. Returns the new tip.
        """
        branch = branch or self.default_branch
        ref = f"refs/heads/{branch}"
        parent = self.tip(branch)
        start = self._clock + 1
        self._clock += commits
        chunks: list[bytes] = []
        for n in range(commits):
            date = start + n
            message = f"commit {n}\n".encode()
            chunks.append(f"commit {ref}\ncommitter Test Committer <committer@example.test> {date} +0000\n"
                          f"data {len(message)}\n".encode() + message)
            if n == 0 and parent:
                chunks.append(f"from {parent}\n".encode())
            changed = range(files) if n == 0 and parent is None else (
                (n * files_per_commit + k) % files for k in range(files_per_commit))
            for i in changed:
                body = f"routes:\n  - id: r{i}\n    uri: /r{i}\n    upstream_id: u{date}\n".encode()
                chunks.append(f"M 100644 inline d{i % dirs}/f{i}.yaml\ndata {len(body)}\n".encode() + body)
            chunks.append(b"\n")
        self.git("fast-import", "--quiet", "--force", input=b"".join(chunks))
        tip = self.tip(branch)
        assert tip is not None
        return tip


# ---------------------------------------------------------------------------------------------------------
# What a server did, and holding requests back


@dataclass
class Traffic:
    """Requests (HTTP) or connections (git://) of one git service, and the bytes each way."""

    requests: int = 0
    sent: int = 0  # client → server
    received: int = 0  # server → client


class Hold:
    """Holds the first `count` requests for one git service (``git-receive-pack``, ``git-upload-pack``)
    until that many wait, then lets them all through at once; after `timeout` it gives up holding."""

    def __init__(self, service: str, count: int, timeout: float = 600.0) -> None:
        self.service = service
        self.count = count
        self.timeout = timeout
        self.waiting = 0
        self.released = threading.Event()
        self._cond = threading.Condition()

    def wait(self, service: str) -> None:
        if service != self.service or self.released.is_set():
            return
        with self._cond:
            self.waiting += 1
            # the last one to arrive releases them all; so does a wait that timed out
            if self.waiting >= self.count or not self._cond.wait_for(self.released.is_set, self.timeout):
                self.released.set()
                self._cond.notify_all()


def _count(traffic: dict[str, Traffic], lock: threading.Lock, service: str, sent: int, received: int) -> None:
    with lock:
        seen = traffic.setdefault(service, Traffic())
        seen.requests += 1
        seen.sent += sent
        seen.received += received


# ---------------------------------------------------------------------------------------------------------
# Smart HTTP: git http-backend behind a threaded CGI runner


@dataclass(frozen=True)
class HttpAuth:
    """What the HTTP server demands: nothing, basic auth, or a bearer token."""

    username: str | None = None
    password: str | None = None
    token: str | None = None

    def accepts(self, header: str | None) -> bool:
        if self.token is not None:
            expected = f"Bearer {self.token}"
        elif self.username is not None:
            expected = "Basic " + base64.b64encode(f"{self.username}:{self.password or ''}".encode()).decode()
        else:
            return True
        return header is not None and hmac.compare_digest(header.encode(), expected.encode())

    def challenge(self) -> str:
        return 'Bearer realm="git"' if self.token is not None else 'Basic realm="git"'

    def remote_user(self) -> str:
        return self.username or ("token" if self.token else "anonymous")


def _read_chunked(rfile: BinaryIO) -> bytes:
    body = bytearray()
    while True:
        size = int(rfile.readline().split(b";")[0].strip(), 16)
        if size == 0:
            while rfile.readline() not in (b"\r\n", b"\n", b""):
                pass
            return bytes(body)
        body += rfile.read(size)
        rfile.readline()


_DENIED = b"authentication required\n"


class _CgiHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _GitHttpd

    def log_message(self, format: str, *args: object) -> None:
        pass  # requests are recorded in `_run_backend`, with their protocol-v2 command

    def do_GET(self) -> None:
        self._run_backend()

    def do_POST(self) -> None:
        self._run_backend()

    def handle(self) -> None:
        with contextlib.suppress(ConnectionError):  # a client that hangs up is not a server failure
            super().handle()

    def _run_backend(self) -> None:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            body = _read_chunked(self.rfile)
        else:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        command = re.search(rb"command=([a-z-]+)", body[:64])  # protocol v2: ls-refs or fetch
        suffix = f" {command[1].decode()}" if command else ""
        self.server.requests.append(f"{self.command} {self.path}{suffix}")
        if not self.server.auth.accepts(self.headers.get("Authorization")):
            self.server.rejected += 1
            self.send_response(401)
            self.send_header("WWW-Authenticate", self.server.auth.challenge())
            self.send_header("Content-Length", str(len(_DENIED)))
            self.end_headers()
            self.wfile.write(_DENIED)
            return
        path, _, query = self.path.partition("?")
        service = path.rsplit("/", 1)[-1] if self.command == "POST" else \
            f"info/refs {query.removeprefix('service=')}"
        if self.server.hold is not None:
            self.server.hold.wait(service)
        env = git_env({
            "GIT_PROJECT_ROOT": str(self.server.project_root),
            "GIT_HTTP_EXPORT_ALL": "1",
            "GATEWAY_INTERFACE": "CGI/1.1",
            "REQUEST_METHOD": self.command,
            "PATH_INFO": path,
            "QUERY_STRING": query,
            "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(len(body)),
            "REMOTE_USER": self.server.auth.remote_user(),
            "REMOTE_ADDR": self.client_address[0],
            "SERVER_PROTOCOL": "HTTP/1.1",
        })
        for header in ("Content-Encoding", "Git-Protocol"):
            if self.headers.get(header):
                env["HTTP_" + header.upper().replace("-", "_")] = self.headers[header]
        if self.server.receive_pack:
            env["GIT_CONFIG_PARAMETERS"] = "'http.receivepack'='true'"
        result = subprocess.run([self.server.backend], input=body, env=env, capture_output=True, timeout=120)
        separator = b"\r\n\r\n" if b"\r\n\r\n" in result.stdout else b"\n\n"
        head, _, payload = result.stdout.partition(separator)
        status = 200
        headers: list[tuple[str, str]] = []
        for line in head.decode("latin-1").splitlines():
            name, _, value = line.partition(":")
            if name.lower() == "status":
                status = int(value.strip().split()[0])
            elif name:
                headers.append((name, value.strip()))
        # counted before answering: once the client has its answer, the count is there to read
        _count(self.server.traffic, self.server.lock, f"{service}{suffix}", len(body), len(payload))
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


class _GitHttpd(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, project_root: Path, auth: HttpAuth, receive_pack: bool) -> None:
        super().__init__((LOCALHOST, 0), _CgiHandler)
        self.project_root = project_root
        self.auth = auth
        self.receive_pack = receive_pack
        self.backend = str(Path(git("--exec-path")) / "git-http-backend")
        self.requests: list[str] = []
        self.rejected = 0
        self.hold: Hold | None = None
        self.traffic: dict[str, Traffic] = {}  # by service and protocol-v2 command, request bodies only
        self.lock = threading.Lock()


class HttpGitServer:
    """Smart HTTP for every repo under `project_root` as ``http://127.0.0.1:PORT/<name>``.

    `traffic` counts the requests and the bytes of their bodies each way (headers aside) by service:
    ``info/refs``, ``git-upload-pack ls-refs``, ``git-upload-pack fetch``, ``git-receive-pack``."""

    def __init__(self, project_root: Path, auth: HttpAuth = HttpAuth(), *, receive_pack: bool = True) -> None:
        self.httpd = _GitHttpd(project_root, auth, receive_pack)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="git-http", daemon=True)

    @property
    def requests(self) -> list[str]:
        return self.httpd.requests

    @property
    def rejected(self) -> int:
        return self.httpd.rejected

    @property
    def traffic(self) -> dict[str, Traffic]:
        return self.httpd.traffic

    def hold(self, service: str, count: int, timeout: float = 600.0) -> Hold:
        """Hold the next `count` requests for `service` until all of them wait (see `Hold`)."""
        self.httpd.hold = Hold(service, count, timeout)
        return self.httpd.hold

    def url(self, name: str) -> str:
        return f"http://{LOCALHOST}:{self.port}/{name}"

    def start(self) -> HttpGitServer:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)

    def __enter__(self) -> HttpGitServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# ---------------------------------------------------------------------------------------------------------
# ssh://: sshd in the foreground as the current user


def ssh_keygen(path: Path, comment: str = "gitsync-test") -> Path:
    """A new ed25519 key pair at `path` and `path`.pub (no passphrase)."""
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
                   check=True, capture_output=True, timeout=30)
    return path


class SshGitServer(ServerProcess):
    """``sshd -D`` on 127.0.0.1 with its own host key; the client key in `client_key` may log in.

    `known_hosts` holds the right host key; `wrong_known_hosts` another key for the same host.
    URLs are ``ssh://USER@127.0.0.1:PORT/<absolute path of the repo>``.
    """

    def __init__(self, workdir: Path) -> None:
        self.dir = workdir
        self.dir.mkdir(parents=True, exist_ok=True)
        self.user = _current_user()
        self.port = 0
        self.proc: subprocess.Popen | None = None
        self.host_key = ssh_keygen(self.dir / "host_key", "host")
        self.client_key = ssh_keygen(self.dir / "client_key", "client")
        self.other_key = ssh_keygen(self.dir / "other_key", "other")
        (self.dir / "authorized_keys").write_text((self.dir / "client_key.pub").read_text())
        for path in (self.host_key, self.client_key, self.other_key):
            path.chmod(0o600)
        self.known_hosts = self.dir / "known_hosts"
        self.wrong_known_hosts = self.dir / "wrong_known_hosts"

    def url(self, repo: Path) -> str:
        return f"ssh://{self.user}@{LOCALHOST}:{self.port}{repo}"

    def ssh_command(self, known_hosts: Path | None = None, key: Path | None = None) -> list[str]:
        """The ssh client command a git CLI in tests can use (GIT_SSH_COMMAND)."""
        return ["ssh", "-F", "none", "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes",
                "-o", f"UserKnownHostsFile={known_hosts or self.known_hosts}", "-o", "IdentitiesOnly=yes",
                "-i", str(key or self.client_key)]

    def _config(self, port: int) -> Path:
        config = self.dir / "sshd_config"
        config.write_text(
            f"Port {port}\nListenAddress {LOCALHOST}\nHostKey {self.host_key}\n"
            f"AuthorizedKeysFile {self.dir / 'authorized_keys'}\nPidFile none\nStrictModes no\n"
            "UsePAM no\nPubkeyAuthentication yes\nPasswordAuthentication no\n"
            "KbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\n"
            "AcceptEnv GIT_PROTOCOL\nLogLevel ERROR\nMaxStartups 50\n"
        )
        return config

    def start(self) -> SshGitServer:
        if os.geteuid() == 0:
            Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege-separation dir
        for _attempt in range(5):
            port = free_port()
            proc = subprocess.Popen(["/usr/sbin/sshd", "-D", "-e", "-f", str(self._config(port))],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
            if wait_for_port(port, proc):
                self.port, self.proc = port, proc
                host_pub = (self.dir / "host_key.pub").read_text().split()[:2]
                other_pub = (self.dir / "other_key.pub").read_text().split()[:2]
                self.known_hosts.write_text(f"[{LOCALHOST}]:{port} {' '.join(host_pub)}\n")
                self.wrong_known_hosts.write_text(f"[{LOCALHOST}]:{port} {' '.join(other_pub)}\n")
                return self
            stop_process(proc)
        raise RuntimeError("sshd did not start")


def _current_user() -> str:
    import pwd

    return pwd.getpwuid(os.geteuid()).pw_name


# ---------------------------------------------------------------------------------------------------------
# A remote that hangs


class _Listener:
    """Accepts TCP connections on 127.0.0.1 in a thread and hands each to `accepted`; a context manager."""

    def __init__(self, port: int = 0, backlog: int = 16) -> None:
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((LOCALHOST, port))
        self.sock.listen(backlog)
        self.port = self.sock.getsockname()[1]
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._accept, name=type(self).__name__, daemon=True)

    def accepted(self, conn: socket.socket) -> None:
        raise NotImplementedError

    def closed(self) -> None:
        """After the listener stopped: release what `accepted` kept."""

    def _accept(self) -> None:
        self.sock.settimeout(0.1)
        while not self._stop.is_set():
            with contextlib.suppress(TimeoutError, OSError):
                conn, _ = self.sock.accept()
                self.accepted(conn)

    def __enter__(self) -> Self:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self.thread.join(timeout=5)
        self.closed()
        self.sock.close()


class HungServer(_Listener):
    """Listens on 127.0.0.1 and never says a word: connections are accepted and left hanging."""

    def __init__(self, port: int = 0) -> None:
        super().__init__(port)
        self._held: list[socket.socket] = []

    def accepted(self, conn: socket.socket) -> None:
        self._held.append(conn)

    def closed(self) -> None:
        for conn in self._held:
            conn.close()


class CannedServer(_Listener):
    """Answers each connection's first request with the same bytes, then waits for the client to close:
    a git server that speaks only protocol v0, or one that refuses with ``ERR``."""

    def __init__(self, answer: bytes) -> None:
        super().__init__()
        self.answer = answer
        self.connections = 0

    def accepted(self, conn: socket.socket) -> None:
        self.connections += 1
        threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):
            conn.settimeout(5)
            conn.recv(65536)
            conn.sendall(self.answer)
            while conn.recv(65536):
                pass


# ---------------------------------------------------------------------------------------------------------
# A relay in front of git daemon: what each service costs, and holding a fleet's pushes


class GitGate(_Listener):
    """Relays ``git://127.0.0.1:PORT/<name>`` to a git daemon's port. It reads each connection's request
    (``git-upload-pack /x.git\\0host=…``) to know its service: `traffic` counts connections and bytes
    each way per service, and `hold` keeps connections for one service waiting (see `Hold`)."""

    def __init__(self, target_port: int, hold: Hold | None = None) -> None:
        super().__init__(backlog=1024)
        self.target_port = target_port
        self.hold = hold
        self.traffic: dict[str, Traffic] = {}
        self._lock = threading.Lock()
        self._active = 0  # connections being relayed
        self._idle = threading.Condition(self._lock)

    def url(self, name: str) -> str:
        return f"git://{LOCALHOST}:{self.port}/{name}"

    def accepted(self, conn: socket.socket) -> None:
        with self._lock:
            self._active += 1
        threading.Thread(target=self._relay, args=(conn,), name="git-gate-conn", daemon=True).start()

    def settle(self, timeout: float = 10.0) -> None:
        """Wait until every connection accepted so far is relayed to its end (and counted)."""
        with self._idle:
            self._idle.wait_for(lambda: self._active == 0, timeout)

    def _relay(self, client: socket.socket) -> None:
        try:
            self._relay_one(client)
        finally:
            with self._idle:
                self._active -= 1
                self._idle.notify_all()

    def _relay_one(self, client: socket.socket) -> None:
        with contextlib.ExitStack() as stack:
            stack.enter_context(client)
            client.settimeout(60)
            try:
                head = _read_exactly(client, 4)
                first = head + _read_exactly(client, int(head, 16) - 4)
            except (OSError, ValueError):
                return
            service = first[4:].split(b" ", 1)[0].decode(errors="replace")
            if self.hold is not None:
                self.hold.wait(service)
            try:
                upstream = stack.enter_context(socket.create_connection((LOCALHOST, self.target_port), 10))
                upstream.sendall(first)
            except OSError:
                return
            sent, received = _pump(client, upstream)
            _count(self.traffic, self._lock, service, sent + len(first), received)


class TcpGate(GitGate):
    """A `GitGate` for any TCP service (an OCI registry's HTTP): every connection relayed as it comes and
    counted under one service name, its bytes as they pass (HTTP clients keep connections open)."""

    def __init__(self, target_port: int, service: str = "http") -> None:
        super().__init__(target_port)
        self.service = service

    def _relay_one(self, client: socket.socket) -> None:
        with contextlib.ExitStack() as stack:
            stack.enter_context(client)
            client.settimeout(60)
            try:
                upstream = stack.enter_context(socket.create_connection((LOCALHOST, self.target_port), 10))
            except OSError:
                return
            _count(self.traffic, self._lock, self.service, 0, 0)
            _pump(client, upstream, self._passed)

    def settle(self, timeout: float = 10.0) -> None:
        """Wait until no byte has passed for 0.3 s (kept-alive connections do not end)."""
        deadline = time.monotonic() + timeout

        def totals() -> tuple[int, int, int]:
            with self._lock:
                seen = self.traffic.get(self.service) or Traffic()
                return seen.requests, seen.sent, seen.received

        last = totals()
        while time.monotonic() < deadline:
            time.sleep(0.3)
            now = totals()
            if now == last:
                return
            last = now

    def _passed(self, from_client: bool, size: int) -> None:
        with self._lock:
            seen = self.traffic[self.service]
            if from_client:
                seen.sent += size
            else:
                seen.received += size


def _read_exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise OSError("closed")
        data += chunk
    return data


def _pump(client: socket.socket, upstream: socket.socket,
          on_chunk: Callable[[bool, int], None] | None = None) -> tuple[int, int]:
    """Copy both ways until both sides are done; the bytes client → upstream and back. `on_chunk(from
    the client, bytes)` as each chunk passes (a connection kept alive is counted as it goes)."""
    counts = {client: 0, upstream: 0}
    peer = {client: upstream, upstream: client}
    open_ = {client, upstream}
    while open_:
        ready, _, _ = select.select(list(open_), [], [], 60)
        if not ready:
            break
        for sock in ready:
            try:
                chunk = sock.recv(1 << 16)
            except OSError:
                chunk = b""
            if not chunk:
                open_.discard(sock)
                with contextlib.suppress(OSError):
                    peer[sock].shutdown(socket.SHUT_WR)
                if sock is upstream:  # the server is done: nothing more will be read from the client
                    open_.discard(client)
                continue
            counts[sock] += len(chunk)
            if on_chunk is not None:
                on_chunk(sock is client, len(chunk))
            try:
                peer[sock].sendall(chunk)
            except OSError:
                open_.clear()
    return counts[client], counts[upstream]


# ---------------------------------------------------------------------------------------------------------
# Signing keys


def ssh_signer(directory: Path, name: str = "signer") -> tuple[Signer, str]:
    """A new SSH signing key; returns the signer and its allowed-signers line (principal ``*``)."""
    key = ssh_keygen(directory / name, name)
    key.chmod(0o600)
    public = (directory / f"{name}.pub").read_text().split()[:2]
    return Signer("ssh", str(key)), f"* namespaces=\"git\" {' '.join(public)}\n"


def gpg_signer(directory: Path, name: str = "signer") -> tuple[Signer, bytes, str]:
    """A new OpenPGP key in its own GNUPGHOME; returns the signer, the armored public key, the fingerprint."""
    home = directory / f"gnupg-{name}"
    home.mkdir(mode=0o700)
    env = {**os.environ, "GNUPGHOME": str(home)}
    subprocess.run(["gpg", "--batch", "--passphrase", "", "--quick-gen-key", f"{name} <{name}@example.test>",
                    "ed25519", "sign", "never"], env=env, check=True, capture_output=True, timeout=60)
    listing = subprocess.run(["gpg", "--batch", "--with-colons", "--list-keys"], env=env, check=True,
                             capture_output=True, timeout=30).stdout.decode()
    fingerprint = next(line.split(":")[9] for line in listing.splitlines() if line.startswith("fpr:"))
    armored = subprocess.run(["gpg", "--batch", "--armor", "--export", fingerprint], env=env, check=True,
                             capture_output=True, timeout=30).stdout
    return Signer("gpg", fingerprint, home), armored, fingerprint
