"""The git transport: how gitsync reaches a config repo's remote, for fetches and write-backs alike.

One `Remote` per URL: the URL without credentials (they never reach the mirror's config, a log or
an error), the credentials for the transport only (an HTTP header, an ssh ``-i``), a dulwich client
per scheme with every network wait bounded by `timeout`, and one table that turns whatever a
transport raises into a `SourceError` worded for people and free of secrets.
"""

from __future__ import annotations

import os
import shlex
import socket
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit, urlunsplit

from dulwich.client import (
    GitClient,
    HTTPUnauthorized,
    LocalGitClient,
    SSHGitClient,
    SubprocessSSHVendor,
    SubprocessWrapper,
    Urllib3HttpGitClient,
    default_urllib3_manager,
)
from dulwich.errors import GitProtocolError, HangupException, NotGitRepository
from dulwich.refs import filter_ref_prefix

from gitsync.log import logger, redact, register_secret
from gitsync.settings import Secret
from gitsync.source.compat import TimeoutTCPGitClient, readable

if TYPE_CHECKING:
    import urllib3

    from gitsync.settings import Settings


class SourceError(Exception):
    """A failure of the config source. The message starts with the stage
    (config/check/fetch/verify/read/writeback) and holds no secret."""

    def __init__(self, stage: str, message: str, *, unreachable: bool = False,
                 transient: bool = False) -> None:
        self.stage = stage
        self.reason = redact(message)
        self.unreachable = unreachable  # the remote did not answer, refused us, or was not there
        #: The transport failed (no connection, a hang-up, a timeout, an HTTP error) rather than the remote
        #: giving an answer (a missing ref, a refused login): another try may go through.
        self.transient = transient
        super().__init__(f"{stage}: {self.reason}")


@dataclass(frozen=True)
class GitAuth:
    """Credentials for the remote: HTTP basic or bearer token, or an ssh key and known_hosts."""

    username: str | None = None
    password: Secret | None = None
    token: Secret | None = None
    ssh_key_file: Path | None = None
    ssh_known_hosts_file: Path | None = None

    @classmethod
    def from_settings(cls, settings: Settings) -> GitAuth:
        return cls(username=settings.git_username, password=settings.git_password, token=settings.git_token,
                   ssh_key_file=settings.ssh_key_file, ssh_known_hosts_file=settings.ssh_known_hosts_file)

    @property
    def can_write(self) -> bool:
        """Whether these credentials could push at all (a password, a token or an ssh key)."""
        return bool(self.password or self.token or self.ssh_key_file)


# ---------------------------------------------------------------------------------------------------------
# ssh with a read timeout


class _TimedPipe(SubprocessWrapper):
    """The ssh subprocess's pipes, where a read that waits longer than `timeout` kills ssh."""

    def __init__(self, wrapped: SubprocessWrapper, timeout: float) -> None:
        # Reads go straight to the pipe; `wrapped` stays referenced because its unused
        # BufferedReader owns stdout and would close it when garbage-collected.
        self._wrapped = wrapped
        self.proc = wrapped.proc
        self.write = wrapped.write
        self.timeout = timeout
        self.read = self._read  # type: ignore[method-assign]

    def _read(self, size: int = -1) -> bytes:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        chunks: list[bytes] = []
        wanted = size if size >= 0 else 1 << 62
        while wanted > 0:
            if not readable(fd, self.timeout):
                self.proc.kill()
                raise TimeoutError(f"no answer within {self.timeout:g}s")
            chunk = os.read(fd, min(wanted, 1 << 16))
            if not chunk:
                break
            chunks.append(chunk)
            wanted -= len(chunk)
        return b"".join(chunks)

    def can_read(self) -> bool:
        assert self.proc.stdout is not None
        return readable(self.proc.stdout.fileno(), 0)


class _TimedSSHVendor(SubprocessSSHVendor):
    """OpenSSH as dulwich runs it, with a read timeout on the connection."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout

    def run_command(self, *args: Any, **kwargs: Any) -> SubprocessWrapper:
        return _TimedPipe(super().run_command(*args, **kwargs), self.timeout)


# ---------------------------------------------------------------------------------------------------------
# URLs


def split_credentials(url: str) -> tuple[str, str | None, str | None]:
    """Take user and password out of an http(s) URL (they must never be stored with it).

    A user without a password in an http(s) URL is a token (``https://TOKEN@host/...``): it is
    registered as a secret too. An ssh URL keeps its user (a login name) and loses any password.
    """
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https", "ssh", "git+ssh") or "@" not in parts.netloc:
        return url, None, None
    userinfo, _, hostport = parts.netloc.rpartition("@")
    user, _, password = userinfo.partition(":")
    user_text = unquote(user) or None
    password_text = unquote(password) or None
    register_secret(password_text)
    if parts.scheme in ("ssh", "git+ssh"):
        if user:
            hostport = f"{user}@{hostport}"
    elif password_text is None:
        register_secret(user_text)
    return urlunsplit(parts._replace(netloc=hostport)), user_text, password_text


def is_local(url: str) -> bool:
    """A path or ``file://`` URL (scp-like ssh, ``host:path``, has a colon before any slash)."""
    if url.startswith("file://"):
        return True
    if "://" in url:
        return False
    head = url.split("/", 1)[0]
    return ":" not in head


# ---------------------------------------------------------------------------------------------------------
# Errors: what a transport raises → (reason, unreachable)


def _cause_chain(exc: BaseException) -> list[BaseException]:
    chain: list[BaseException] = []
    seen: BaseException | None = exc
    while seen is not None and seen not in chain:
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    return chain


def _unreachable(exc: BaseException | None) -> bool:
    """Whether an OSError says the remote could not be reached. A connection cut short is not
    that: servers also hang up on a want they refuse."""
    return isinstance(exc, OSError) and not isinstance(
        exc, ConnectionResetError | BrokenPipeError | ConnectionAbortedError)


def _first_lines(text: str, limit: int = 3) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return " / ".join(lines[:limit]) or "failed"


def _hangup(exc: HangupException, remote: Remote) -> tuple[str, bool]:
    # ssh's own last lines say why ("Host key verification failed.", "Permission denied").
    lines = [ln.decode("utf-8", "replace").strip() for ln in (exc.stderr_lines or [])]
    lines = [ln for ln in lines if ln and not ln.startswith("@")]
    # Without ssh's words a hang-up is ambiguous: servers also hang up on a want they refuse.
    return " / ".join(lines[-2:]) or str(exc), bool(lines)


def _network(exc: OSError, remote: Remote) -> str:
    """An OSError as one line that says what failed and what to check (never a library's repr)."""
    if remote.local:
        return exc.strerror or str(exc)
    where = urlsplit(remote.url)
    host = where.hostname or remote.url
    port = where.port or {"https": 443, "http": 80, "ssh": 22, "git": 9418}.get(where.scheme, "")
    if isinstance(exc, socket.gaierror):
        return f"cannot resolve host {host}: check the URL's host name and this host's DNS"
    if isinstance(exc, ConnectionRefusedError):
        return (f"connection refused by {host}:{port}: check that the git server listens there and that "
                "the URL's port is right")
    if isinstance(exc, ssl.SSLError):
        reason = getattr(exc, "verify_message", None) or getattr(exc, "reason", None) or exc.strerror or \
            "handshake failed"
        return f"TLS with {host}:{port} failed ({reason}): check the server's certificate and ca_file"
    reason = exc.strerror or str(exc) or type(exc).__name__
    return f"cannot reach {host}:{port} ({reason}): check the URL, the network and any proxy"


def _protocol(exc: GitProtocolError, remote: Remote) -> tuple[str, bool]:
    # dulwich wraps a failed read's OSError (a timeout among them) in a GitProtocolError; over HTTP the
    # OSError is under urllib3's errors (MaxRetryError → NewConnectionError → ConnectionRefusedError)
    chain = _cause_chain(exc)
    if any(isinstance(e, TimeoutError) for e in chain):
        return remote.timed_out(), True
    cause = next((e for e in chain if isinstance(e, OSError)), None)
    if cause is not None:
        return _network(cause, remote), _unreachable(cause)
    return _first_lines(str(exc)), _unreachable(exc.__cause__)


#: First match wins: more specific types first.
_ERROR_MAP: tuple[tuple[type[BaseException], Callable[[Any, Remote], tuple[str, bool]]], ...] = (
    (HTTPUnauthorized, lambda exc, remote: ("authentication failed (HTTP 401)", True)),
    (NotGitRepository, lambda exc, remote: ("not a git repository", True)),
    (HangupException, _hangup),
    (TimeoutError, lambda exc, remote: (remote.timed_out(), True)),
    (GitProtocolError, _protocol),
    (OSError, lambda exc, remote: (_network(exc, remote), _unreachable(exc))),
)


def _pool_manager(cls: type[urllib3.PoolManager], headers: Mapping[str, str]) -> Callable[..., Any]:
    """A urllib3 pool manager class as dulwich builds it, plus our headers and one try per request
    (urllib3 would retry a timed-out read, multiplying the timeout)."""
    import urllib3  # only for http(s) remotes: its import is a visible part of every start otherwise

    once = urllib3.Retry(total=None, connect=0, read=0, status=0, other=0, redirect=5)

    def build(*args: Any, **kwargs: Any) -> urllib3.PoolManager:
        kwargs["headers"] = {**(kwargs.get("headers") or {}), **headers}
        return cls(*args, retries=once, **kwargs)

    return build


# ---------------------------------------------------------------------------------------------------------
# The remote


@dataclass(frozen=True)
class Remote:
    """One git remote: a credential-free URL, the credentials, and the longest silence accepted."""

    url: str
    auth: GitAuth = GitAuth()
    timeout: float = 30.0

    @classmethod
    def of(cls, url: str, auth: GitAuth = GitAuth(), timeout: float = 30.0) -> Remote:
        """The remote for a URL as a user writes it: credentials in an http(s) URL move to `auth`
        (unless `auth` has its own), a local path becomes absolute."""
        clean, url_user, url_password = split_credentials(url)
        if (url_user or url_password) and urlsplit(clean).scheme in ("http", "https") \
                and auth.password is None and auth.token is None:
            auth = replace(auth, username=auth.username or url_user,
                           password=Secret(url_password) if url_password else None)
        if is_local(clean):
            local = clean[len("file://"):] if clean.startswith("file://") else clean
            clean = str(Path(local).expanduser().resolve())
        return cls(clean, auth, timeout)

    @classmethod
    def from_settings(cls, settings: Settings) -> Remote:
        if not settings.repo:
            raise SourceError("config", "no repo: set source.repo (--repo, GITSYNC_REPO)")
        return cls.of(settings.repo, GitAuth.from_settings(settings), settings.git_timeout)

    @property
    def local(self) -> bool:
        return is_local(self.url)

    @property
    def can_push(self) -> bool:
        """Could this agent plausibly push here? A local path, git:// (no auth at all: test servers,
        trusted networks), or write credentials."""
        return self.local or urlsplit(self.url).scheme == "git" or self.auth.can_write

    def timed_out(self) -> str:
        return f"no answer within {self.timeout:g}s"

    def client(self) -> tuple[GitClient, str]:
        """A dulwich client for the URL, with the credentials and timeouts, and the remote path.
        The caller closes it."""
        if self.local:
            return LocalGitClient(), self.url
        parts = urlsplit(self.url)
        scheme = parts.scheme
        if scheme in ("http", "https"):
            return self._http_client(), ""
        if scheme == "git":
            host = parts.hostname or ""
            return TimeoutTCPGitClient(host, parts.port, self.timeout,
                                       thin_packs=(host, parts.port or 9418) not in _WHOLE_PACKS), parts.path
        if scheme in ("ssh", "git+ssh") or "://" not in self.url:
            if "://" in self.url:
                host, port, user, path = parts.hostname or "", parts.port, parts.username, parts.path
            else:  # scp-like user@host:path
                userhost, _, path = self.url.partition(":")
                user, _, host = userhost.rpartition("@")
                port = None
            client = SSHGitClient(host, port=port, username=user or None,
                                  vendor=_TimedSSHVendor(self.timeout), ssh_command=self.ssh_command())
            return client, path
        raise SourceError("config", f"unsupported URL scheme {scheme!r} in {self.url}")

    def ls_refs(self, prefixes: list[bytes]) -> Mapping[bytes, bytes | None]:
        """The remote's refs under `prefixes` (full names), as dulwich's ``get_refs`` gives them: an
        annotated tag's commit as ``name^{}``. A ``git://`` server is asked in protocol v2 (it filters
        the refs itself), and whether it spoke it is remembered for the next fetch (`_WHOLE_PACKS`)."""
        client, path = self.client()
        try:
            if not isinstance(client, TimeoutTCPGitClient):
                return client.get_refs(path.encode(), ref_prefix=prefixes).refs
            refs = client.get_refs(path.encode(), protocol_version=2, ref_prefix=prefixes).refs
            parts = urlsplit(self.url)
            address = (parts.hostname or "", parts.port or 9418)
            if client.protocol_version == 2:
                _WHOLE_PACKS.add(address)
            else:
                _WHOLE_PACKS.discard(address)
                refs = filter_ref_prefix(dict(refs), prefixes)  # a v0 server lists every ref
            return refs
        finally:
            client.close()

    def _http_client(self) -> Urllib3HttpGitClient:
        # A token wins over basic credentials: one Authorization header, never two.
        basic = self.auth.token is None and (self.auth.username or self.auth.password)
        username = (self.auth.username or "") if basic else None
        password = (self.auth.password.reveal() if self.auth.password else "") if basic else None
        # dulwich (1.2) keeps `extra_headers=` but never sends them: the token rides on the pool
        # manager's headers, which dulwich sends with every request.
        headers = {"Authorization": f"Bearer {self.auth.token.reveal()}"} if self.auth.token else {}
        import urllib3

        pool = default_urllib3_manager(None, base_url=self.url, timeout=self.timeout,
                                       pool_manager_cls=_pool_manager(urllib3.PoolManager, headers),
                                       proxy_manager_cls=_pool_manager(urllib3.ProxyManager, headers))
        return Urllib3HttpGitClient(self.url, pool_manager=pool, username=username, password=password,
                                    timeout=self.timeout)

    def ssh_command(self) -> str:
        """OpenSSH that never prompts: strict host keys, batch mode, bounded connect and keepalive."""
        alive = max(1, int(self.timeout / 3))
        args = ["ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes",
                "-o", f"ConnectTimeout={max(1, int(self.timeout))}", "-o", f"ServerAliveInterval={alive}",
                "-o", "ServerAliveCountMax=3", "-o", "PasswordAuthentication=no",
                "-o", "KbdInteractiveAuthentication=no"]
        if self.auth.ssh_known_hosts_file is not None:
            args += ["-o", f"UserKnownHostsFile={self.auth.ssh_known_hosts_file}",
                     "-o", "GlobalKnownHostsFile=none"]
        if self.auth.ssh_key_file is not None:
            args += ["-o", "IdentitiesOnly=yes", "-i", str(self.auth.ssh_key_file)]
        return shlex.join(args)

    def network(self, stage: str, action: Callable[[], Any]) -> Any:
        """Run one network operation; whatever the transport raises becomes a `SourceError` of
        `stage`, worded for people (`_ERROR_MAP`) and free of secrets."""
        try:
            return action()
        except SourceError:
            raise
        except Exception as exc:
            for kind, describe in _ERROR_MAP:
                if isinstance(exc, kind):
                    reason, unreachable = describe(exc, self)
                    break
            else:  # a remote that breaks the protocol in a way dulwich does not name
                logger.opt(exception=True).debug("unexpected error from {}", self.url)
                reason, unreachable = f"{type(exc).__name__}: {_first_lines(str(exc))}", False
            raise SourceError(stage, f"{self.url}: {reason}", unreachable=unreachable,
                              transient=not isinstance(exc, HTTPUnauthorized | NotGitRepository)) from None


#: ``git://`` servers (host, port) last seen speaking protocol v2: git's own ``upload-pack``, which sends
#: a whole pack to a client that does not ask for a thin one. A fetch from one asks for a whole pack,
#: which the mirror takes as it comes (a thin pack must first be completed with its bases, most of a
#: one-commit fetch into a large mirror). A server speaking only v0 (dulwich's own, the demo's remote)
#: requires a client that takes thin packs: `Remote.ls_refs` forgets a server once it answers in v0.
_WHOLE_PACKS: set[tuple[str, int]] = set()


__all__ = ["GitAuth", "Remote", "SourceError", "is_local", "split_credentials"]
