"""Who may see the web view.

It shows configuration, so it is off unless ``ui = true``. On a loopback listen address anyone who
can reach it may look (as anyone there can read ``/metrics``), but only through a loopback host name:
a page from elsewhere that re-points its own host name at 127.0.0.1 (DNS rebinding) is refused.
On any other address, or whenever ``ui_token_file`` is set, the token is required: typed into the
login form, which sets a cookie (HttpOnly, SameSite=Strict) holding an HMAC of it, never the token
itself; or sent as ``Authorization: Bearer``. Comparisons are constant-time, and the token never
appears in a log line, a page or an error. A client that sends a wrong token (login form or Bearer)
`MAX_FAILURES` times within `FAILURE_WINDOW` is answered 429 without its token being looked at until
the window moves on (`Failures`): guessing is slowed to a crawl, and other addresses are not locked
out. (The cookie is an HMAC of the token: guessing it is no easier than guessing the token.)
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
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
MAX_FAILURES = 10  # wrong tokens a client may send within FAILURE_WINDOW
FAILURE_WINDOW = 60.0  # seconds
MAX_CLIENTS = 1024  # clients whose failures are remembered (the oldest is forgotten first)
_SESSION_LABEL = b"gitsync web view session"


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


def session_value(token: Secret) -> str:
    """What the login cookie holds: an HMAC of the token (the cookie never carries the token)."""
    return hmac.new(token.reveal().encode(), _SESSION_LABEL, hashlib.sha256).hexdigest()


def _same(given: str, expected: str) -> bool:
    return hmac.compare_digest(given.encode("utf-8", "surrogateescape"), expected.encode())


class Access:
    """The access rule of one listener: `token_required` is fixed by the listen address at start;
    the token itself is read from the settings at each request (a SIGHUP may rotate it)."""

    def __init__(self, listen: str, token: Secret | None) -> None:
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
        return cookie is not None and _same(cookie, session_value(token))


class Failures:
    """Wrong tokens per client address, within a sliding window; thread-safe (one thread per request)."""

    def __init__(self, limit: int = MAX_FAILURES, window: float = FAILURE_WINDOW,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.limit, self.window, self._clock = limit, window, clock
        self._seen: OrderedDict[str, deque[float]] = OrderedDict()
        self._lock = threading.Lock()

    def retry_after(self, client: str) -> float:
        """Seconds until `client` may try a token again; 0 when it may now."""
        with self._lock:
            times = self._recent(client)
            return 0.0 if len(times) < self.limit else max(0.0, times[0] + self.window - self._clock())

    def add(self, client: str) -> None:
        with self._lock:
            self._recent(client).append(self._clock())
            self._seen.move_to_end(client)
            while len(self._seen) > MAX_CLIENTS:
                self._seen.popitem(last=False)

    def _recent(self, client: str) -> deque[float]:
        times = self._seen.setdefault(client, deque())
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


def set_cookie(value: str) -> str:
    return f"{COOKIE}={value}; Path=/; HttpOnly; SameSite=Strict"


def clear_cookie() -> str:
    return f"{COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0"


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


__all__ = ["COOKIE", "MAX_FORM_BYTES", "Access", "clear_cookie", "is_loopback", "local_path", "login_form",
           "session_value", "set_cookie", "token_matches"]
