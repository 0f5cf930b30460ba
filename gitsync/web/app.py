"""The web view's requests: routing, access, headers. A read-only view of what is live: it changes
nothing, and what it shows comes from the agent's snapshot, brief GETs and HEADs of the gateways,
and the status branch (gitsync.web.live). Every answer carries the security headers; every page
goes through the log redactor as well, so a secret the masking missed still never reaches a page.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Mapping
from importlib import resources
from pathlib import Path
from typing import BinaryIO
from urllib.parse import parse_qs, quote, unquote, urlencode

from gitsync.agent.view import AgentReader, AgentView
from gitsync.kinds import KINDS
from gitsync.log import logger, redact
from gitsync.render.compose import split_file
from gitsync.settings import Settings
from gitsync.tally import Tally
from gitsync.web import auth, pages
from gitsync.web.catalog import paginate
from gitsync.web.html import Markup, page
from gitsync.web.links import Links
from gitsync.web.live import LiveCatalog, ViewFleet, ViewGateways

Reply = tuple[int, bytes, str, list[tuple[str, str]]]

HTML = "text/html; charset=utf-8"
#: No inline script or style, nothing from elsewhere, no framing, forms only to this site.
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; form-action 'self'; "
       "frame-ancestors 'none'; base-uri 'none'")
SECURITY_HEADERS = [("Content-Security-Policy", CSP), ("X-Content-Type-Options", "nosniff"),
                    ("X-Frame-Options", "DENY"), ("Referrer-Policy", "no-referrer"),
                    ("Cross-Origin-Opener-Policy", "same-origin"),
                    ("Cross-Origin-Resource-Policy", "same-origin")]
STATIC = {"style.css": "text/css; charset=utf-8", "filter.js": "text/javascript; charset=utf-8",
          "favicon.svg": "image/svg+xml"}
PAGES = ("/", "/items", "/fleet", "/login", "/logout")
_PAGE = re.compile(r"[0-9]{1,9}")


def serves(path: str) -> bool:
    return path in PAGES or path.startswith(("/items/", "/static/"))


class WebView:
    """The web view of one `gitsync run`: `answer` is the listener's hook (gitsync.daemon.listener)."""

    def __init__(self, settings: Callable[[], Settings], agent: Callable[[], AgentReader | None],
                 work_dir: Path) -> None:
        current = settings()
        self._settings = settings
        self._agent = agent
        self.access = auth.Access(current.listen, current.ui_token)  # SettingsError: not allowed as set
        self._lock = threading.Lock()
        self._gateways = ViewGateways(current)
        self._gateways_of = current.gateways
        self.fleet = ViewFleet(settings, work_dir)
        self.catalog = LiveCatalog()
        self.failures = auth.Failures()
        self.wrong = Tally("web view: {} wrong token(s) or unreadable login form(s) refused (the last from "
                           "{}: {})")

    def close(self) -> None:
        self._gateways.close()
        self.fleet.close()
        self.catalog.close()

    def gateways(self, settings: Settings) -> ViewGateways:
        """The view's gateway clients, made again when a reload changed the gateways."""
        with self._lock:
            if settings.gateways != self._gateways_of:
                self._gateways.close()
                self._gateways, self._gateways_of = ViewGateways(settings), settings.gateways
            return self._gateways

    # -- requests ------------------------------------------------------------------------------------------

    def answer(self, method: str, target: str, headers: Mapping[str, str], body: BinaryIO,
               client: str = "") -> Reply | None:
        """The answer to a request, or None for a path the view does not serve."""
        path, _, query = target.partition("?")
        if not serves(path):
            return None
        if not self.access.allowed_host(headers):
            return _text(403, "This view answers only to a loopback host name (127.0.0.1, localhost, [::1]).")
        if path.startswith("/static/"):
            return _static(path[len("/static/"):])
        settings = self._settings()
        try:
            sent = headers.get("Authorization")
            if sent and self.access.token_required:
                wait = self.failures.retry_after(client, sent)
                if wait:  # this token, from this address, failed too often: not compared again for now
                    return _too_many(wait)
            if path == "/login":
                return self._login(method, query, headers, body, settings, client)
            if path == "/logout":
                if method != "POST":
                    return _text(405, "Log out with POST.", [("Allow", "POST")])
                session = auth.cookie_value(headers.get("Cookie") or "")
                if session is not None:
                    self.access.sessions.end(session)  # the same cookie is refused from now on
                return _redirect("/login", [("Set-Cookie", auth.clear_cookie(settings.ui_secure_cookie))])
            if method not in ("GET", "HEAD"):
                return _text(405, "This view is read-only.", [("Allow", "GET, HEAD")])
            if not self.access.authorized(headers, settings.ui_token):
                if sent:
                    self.failures.add(client, sent)  # a token was sent, and it was wrong
                    self.wrong.add(client, "Authorization")
                if headers.get("Authorization") or "text/html" not in (headers.get("Accept") or ""):
                    return _text(401, "This view needs the token: Authorization: Bearer <ui_token>.",
                                 [("WWW-Authenticate", 'Bearer realm="gitsync"')])
                return _redirect("/login?" + urlencode({"next": auth.local_path(target)}))
            return self._route(path, parse_qs(query), settings)
        except Exception as exc:  # a bug in a page must not take the listener's thread with it
            logger.opt(exception=exc).error("web view: {} {} failed: {}", method, path, redact(str(exc)))
            return _text(500, "The page could not be built; the agent's log says why.")

    def _login(self, method: str, query: str, headers: Mapping[str, str], body: BinaryIO,
               settings: Settings, client: str) -> Reply:
        if method in ("GET", "HEAD"):
            next_path = auth.local_path((parse_qs(query).get("next") or ["/"])[0])
            return self._page(200, "Log in", pages.login(next_path, failed=False), settings, nav="")
        if method != "POST":
            return _text(405, "Log in with GET or POST.", [("Allow", "GET, HEAD, POST")])
        length = auth.form_length(headers.get("Content-Length"))
        if length is None or length > auth.MAX_FORM_BYTES:
            wait = self.failures.retry_after(client, None)
            if wait:
                return _too_many(wait)
            self.failures.add(client, None)  # a login attempt all the same: it counts towards the limit
            self.wrong.add(client, "a login form whose length is " + ("not a number" if length is None
                                                                          else "too large"))
            if length is None:
                return _text(400, "The login form must say its length (Content-Length).")
            return _text(413, f"The login form must be at most {auth.MAX_FORM_BYTES} bytes.")
        try:
            form = body.read(length)
        except (TimeoutError, ConnectionError):  # the listener's deadline for a request passed
            return _text(408, "The login form did not arrive in time.")
        given, next_path = auth.login_form(form)
        if not self.access.token_required:
            return _redirect(next_path)
        wait = self.failures.retry_after(client, given)
        if wait:
            return _too_many(wait)
        if settings.ui_token is None or not auth.token_matches(given, settings.ui_token):
            self.failures.add(client, given)
            self.wrong.add(client, "the login form")
            # 200, not 401: a browser reports a 401 page as an error in its console
            return self._page(200, "Log in", pages.login(next_path, failed=True), settings, nav="")
        session = self.access.sessions.start(settings.ui_token, settings.ui_session_ttl)
        cookie = auth.set_cookie(session, settings.ui_session_ttl, settings.ui_secure_cookie)
        return _redirect(next_path, [("Set-Cookie", cookie)])

    def _route(self, path: str, params: dict[str, list[str]], settings: Settings) -> Reply:
        agent = self._agent()
        view = agent.view() if agent is not None else AgentView()
        # with several sources, a commit of the live composition is its own repo's: commit_url, one
        # repo's template, would link it to the wrong one
        links = Links(settings.commit_url if not view.sources else None)
        now = time.time()
        if path == "/":
            known = self.catalog.peek(view.last_good)
            body = pages.overview(view, self.gateways(settings).heads(), links, now,
                                  known.counts if known is not None else None)
            if agent is not None:  # after this page is built: the items pages that follow find it ready
                self.catalog.warm(view, agent)
            return self._page(200, "Overview", body, settings, nav="overview")
        if path == "/fleet":
            tips = {None: view.tip, **view.sources}  # the tip; each [[sources]] repo's commit live
            body = pages.fleet(self.fleet.get(), tips, settings.status_refs, links, now)
            return self._page(200, "Fleet", body, settings, nav="fleet")
        catalog, error = self.catalog.get(view, agent) if agent is not None else (None, "starting")
        if path == "/items":
            kind = _one(params, "kind")
            kind = kind if kind in KINDS else None
            query = _one(params, "q")[:200]
            number = _page_number(_one(params, "page"))
            if catalog is None:
                body = pages.items(None, {}, None, query, kind, links, error)
            else:
                found = paginate(catalog.search(query, kind), number)
                body = pages.items(catalog.sha, catalog.counts, found, query, kind, links)
            return self._page(200, "Items", body, settings, nav="items")
        kind, _, ident = path[len("/items/"):].partition("/")
        kind, ident = unquote(kind), unquote(ident)
        detail = catalog.detail(kind, ident) if catalog is not None else None
        if catalog is None or detail is None:
            what = error or f"The live commit has no item {kind}/{ident}."
            return self._page(404, "Not found", pages.not_found(what), settings, nav="items")
        lives = self.gateways(settings).lives()
        # the item's own [[sources]] repo's commit (the live commit itself for the repo of [source])
        sha = view.sources.get(split_file(detail.row.file or "")[0] or "", catalog.sha)
        body = pages.item(detail, sha, lives, list(view.unmanaged), links, now)
        return self._page(200, f"{kind} {ident}", body, settings, nav="items")

    def _page(self, status: int, title: str, main: Markup, settings: Settings,
              extra: list[tuple[str, str]] | None = None, *, nav: str) -> Reply:
        logout = self.access.token_required and nav != ""
        html = page(title, main, agent=settings.agent_name, nav=nav, logout=logout)
        body = redact(html.decode()).encode()
        return status, body, HTML, [*SECURITY_HEADERS, ("Cache-Control", "no-store"), *(extra or [])]


def _too_many(wait: float) -> Reply:
    return _text(429, "This token failed too often from this address: try again later.",
                 [("Retry-After", str(int(wait) + 1))])


def _one(params: Mapping[str, list[str]], name: str) -> str:
    return (params.get(name) or [""])[0]


def _page_number(text: str) -> int:
    """``page=N``: ASCII digits only (``²`` is a digit to str.isdigit(), not to int()); else page 1."""
    return int(text) if _PAGE.fullmatch(text) else 1


def _text(status: int, message: str, extra: list[tuple[str, str]] | None = None) -> Reply:
    return status, message.encode() + b"\n", "text/plain; charset=utf-8", [*SECURITY_HEADERS, *(extra or [])]


def _redirect(location: str, extra: list[tuple[str, str]] | None = None) -> Reply:
    headers = [*SECURITY_HEADERS, ("Location", quote(location, safe="/?=&%:;,+@")), *(extra or [])]
    return 303, b"", "text/plain; charset=utf-8", headers


def _static(name: str) -> Reply:
    if name not in STATIC:
        return _text(404, "No such file.")
    data = resources.files(__package__).joinpath("static", name).read_bytes()
    return 200, data, STATIC[name], [*SECURITY_HEADERS, ("Cache-Control", "max-age=300")]


__all__ = ["CSP", "SECURITY_HEADERS", "WebView", "serves"]
