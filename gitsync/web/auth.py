"""Who may see the web view.

It shows configuration, so it is off unless ``ui = true``. On a loopback listen address anyone who
can reach it may look (as anyone there can read ``/metrics``), but only through a loopback host name:
a page from elsewhere that re-points its own host name at 127.0.0.1 (DNS rebinding) is refused.
On any other address, or whenever ``ui_token_file`` is set, the token is required: typed into the
login form, which starts a session, or sent as ``Authorization: Bearer``. A session lives on the
server (`Sessions`): the cookie (HttpOnly, SameSite=Strict, Secure with ``ui_secure_cookie``) holds
only its random id, never the token; it ends after ``ui_session_ttl``, at "Log out" (the same cookie
is refused afterwards), when the token changes (a SIGHUP with a new ``ui_token_file``) and when the
agent restarts. Comparisons are constant-time, and the token never appears in a log line, a page or
an error. The same wrong token (login form or Bearer), or a login form that cannot be read, sent
`MAX_FAILURES` times within `FAILURE_WINDOW` from one address is answered 429, without being compared,
until the window moves on (`Failures`, per address and token): a script with a stale token stops
hammering, and nobody else behind the same address (a TLS proxy) is locked out, the right token
included. What defeats guessing is the token itself: at least 16 characters, and random ones are
what the docs make (`openssl rand -hex 24`: 2^96 to try). A session id is 256 random bits: guessing
one is hopeless.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import re
import secrets
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping
from http.cookies import CookieError, SimpleCookie
from urllib.parse import parse_qs

from gitsync.settings import Secret, SettingsError

COOKIE = "gitsync_ui"
MIN_TOKEN_LENGTH = 16
MAX_FORM_BYTES = 4096
MAX_FAILURES = 10  # times one address may send one wrong token within FAILURE_WINDOW
FAILURE_WINDOW = 60.0  # seconds
MAX_REMEMBERED = 4096  # (address, token) pairs whose failures are remembered (the oldest forgotten first)
MAX_SESSIONS = 1024  # sessions kept at once (the oldest ends first)
_SESSION_LABEL = b"gitsync web view session"
_LENGTH = re.compile(r"[0-9]{1,9}")  # ASCII digits only: str.isdigit() also takes "²", which int() refuses


def is_loopback(host: str) -> bool:
    """A name or address that can only mean this machine."""
    host = host.strip().strip("[]").lower().rstrip(".")
    if host in ("localhost", "ip6-localhost") or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def host_name(host_header: str) -> str:
    """The host part of a ``Host`` header (``[::1]:9480`` → ``::1``)."""
    host_header = host_header.strip()
    if host_header.startswith("["):
        return host_header[1:host_header.find("]")] if "]" in host_header else host_header
    return host_header.rsplit(":", 1)[0] if host_header.count(":") == 1 else host_header


def token_mark(token: Secret) -> bytes:
    """Which token a session was opened with (an HMAC of it, never the token): a new token ends the
    sessions of the old one."""
    return hmac.new(token.reveal().encode(), _SESSION_LABEL, hashlib.sha256).digest()


class Sessions:
    """The login form's sessions, on the server: a random id (the cookie's value), when it ends and
    which token opened it, for at most `limit` sessions at once; thread-safe. Ids are kept hashed:
    the table holds nothing a cookie could be made from."""

    def __init__(self, limit: int = MAX_SESSIONS, clock: Callable[[], float] = time.monotonic) -> None:
        self.limit, self._clock = limit, clock
        self._table: OrderedDict[bytes, tuple[float, bytes]] = OrderedDict()  # hash → (end, token mark)
        self._lock = threading.Lock()

    def start(self, token: Secret, ttl: float) -> str:
        """A new session of `ttl` seconds: its id, for the cookie."""
        session = secrets.token_urlsafe(32)
        with self._lock:
            self._forget_ended()
            self._table[_hashed(session)] = (self._clock() + ttl, token_mark(token))
            while len(self._table) > self.limit:
                self._table.popitem(last=False)
        return session

    def valid(self, session: str, token: Secret) -> bool:
        """`session` is one this table holds, not ended, opened with `token`."""
        with self._lock:
            entry = self._table.get(_hashed(session))
        return (entry is not None and entry[0] > self._clock()
                and hmac.compare_digest(entry[1], token_mark(token)))

    def end(self, session: str) -> None:
        with self._lock:
            self._table.pop(_hashed(session), None)

    def __len__(self) -> int:
        with self._lock:
            self._forget_ended()
            return len(self._table)

    def _forget_ended(self) -> None:
        now = self._clock()
        for key in [key for key, (end, _) in self._table.items() if end <= now]:
            del self._table[key]


def _hashed(session: str) -> bytes:
    return hashlib.sha256(session.encode("utf-8", "surrogateescape")).digest()


def _same(given: str, expected: str) -> bool:
    return hmac.compare_digest(given.encode("utf-8", "surrogateescape"), expected.encode())


class Access:
    """The access rule of one listener: `token_required` is fixed by the listen address at start;
    the token itself is read from the settings at each request (a SIGHUP may rotate it)."""

    def __init__(self, listen: str, token: Secret | None, sessions: Sessions | None = None) -> None:
        self.sessions = sessions or Sessions()
        host = listen.rpartition(":")[0].strip("[]") or "127.0.0.1"  # as the listener binds it
        self.loopback = is_loopback(host)
        if not self.loopback and token is None:
            raise SettingsError(f"ui = true with listen = {listen}, which is not a loopback address: the web "
                                "view shows configuration, so set ui_token_file (a token of at least "
                                f"{MIN_TOKEN_LENGTH} characters), or listen on 127.0.0.1")
        check_token(token)
        self.token_required = token is not None or not self.loopback

    def allowed_host(self, headers: Mapping[str, str]) -> bool:
        """Without a token, only a loopback host name may be asked for (no DNS rebinding)."""
        return self.token_required or is_loopback(host_name(headers.get("Host") or "127.0.0.1"))

    def authorized(self, headers: Mapping[str, str], token: Secret | None) -> bool:
        if not self.token_required:
            return True
        if token is None:
            return False
        auth = headers.get("Authorization") or ""
        if auth[:7].lower() == "bearer ":
            return _same(auth[7:].strip(), token.reveal())
        cookie = cookie_value(headers.get("Cookie") or "")
        return cookie is not None and self.sessions.valid(cookie, token)


class Failures:
    """Failed tokens per client address and token, within a sliding window; thread-safe (one thread per
    request). A token is kept as a keyed digest (a key of this process's own), never as it was sent;
    `None` stands for a login form that could not be read."""

    def __init__(self, limit: int = MAX_FAILURES, window: float = FAILURE_WINDOW,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.limit, self.window, self._clock = limit, window, clock
        self._key = secrets.token_bytes(32)
        self._seen: OrderedDict[tuple[str, bytes], deque[float]] = OrderedDict()
        self._lock = threading.Lock()

    def _mark(self, client: str, token: str | None) -> tuple[str, bytes]:
        if token is None:
            return client, b""
        return client, hmac.new(self._key, token.encode("utf-8", "surrogateescape"), hashlib.sha256).digest()

    def retry_after(self, client: str, token: str | None) -> float:
        """Seconds until `client` may send `token` again; 0 when it may now."""
        with self._lock:
            times = self._recent(self._mark(client, token))
            return 0.0 if len(times) < self.limit else max(0.0, times[0] + self.window - self._clock())

    def add(self, client: str, token: str | None) -> None:
        key = self._mark(client, token)
        with self._lock:
            self._recent(key).append(self._clock())
            self._seen.move_to_end(key)
            while len(self._seen) > MAX_REMEMBERED:
                self._seen.popitem(last=False)

    def _recent(self, key: tuple[str, bytes]) -> deque[float]:
        times = self._seen.setdefault(key, deque())
        while times and times[0] <= self._clock() - self.window:
            times.popleft()
        return times


def check_token(token: Secret | None) -> None:
    if token is not None and len(token.reveal()) < MIN_TOKEN_LENGTH:
        raise SettingsError(f"ui_token: the token is shorter than {MIN_TOKEN_LENGTH} characters; use a "
                            "random one (e.g. `openssl rand -hex 24`)")


def cookie_value(header: str) -> str | None:
    try:
        jar = SimpleCookie(header)
    except CookieError:
        return None
    morsel = jar.get(COOKIE)
    return morsel.value if morsel is not None else None


def set_cookie(value: str, max_age: float, secure: bool) -> str:
    """The session cookie: gone from the browser when the session ends on the server."""
    return f"{COOKIE}={value}; Path=/; Max-Age={int(max_age)}; HttpOnly; SameSite=Strict" + (
        "; Secure" if secure else "")


def clear_cookie(secure: bool = False) -> str:
    return f"{COOKIE}=; Path=/; Max-Age=0; HttpOnly; SameSite=Strict" + ("; Secure" if secure else "")


def form_length(header: str | None) -> int | None:
    """The login form's Content-Length, or None when it is no plain number (``²``, 5,000 digits)."""
    text = (header or "").strip()
    return int(text) if _LENGTH.fullmatch(text) else None


def login_form(body: bytes) -> tuple[str, str]:
    """The token and the page to go back to, from the login form's body."""
    fields = parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True)
    token = (fields.get("token") or [""])[0]
    return token, local_path((fields.get("next") or ["/"])[0])


def local_path(target: str) -> str:
    """`target` when it is a path of this site, else ``/`` (never a redirect elsewhere)."""
    if not target.startswith("/") or target.startswith("//") or "\\" in target or any(
            ord(c) < 32 for c in target):
        return "/"
    return target


def token_matches(given: str, token: Secret | None) -> bool:
    return token is not None and _same(given, token.reveal())


__all__ = ["COOKIE", "MAX_FORM_BYTES", "Access", "Sessions", "clear_cookie", "form_length", "is_loopback",
           "local_path", "login_form", "set_cookie", "token_mark", "token_matches"]
