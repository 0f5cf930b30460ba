"""URLs as gitsync reads and shows them: where their credentials are, and never with them.

A URL's user info (``scheme://user:password@host``) and its query parameters named like
credentials (``?private_token=…``, ``&sig=…``) are found by one parse (`credentials`), used
by `display_url` (logs, results, status files: both dropped) and by the secret classifier
(`gitsync.render.secrets`: both masked, both exported as secrets).

People write passwords into URLs without percent-encoding them, so the parse is more
forgiving than RFC 3986's: the user info ends at the last ``@`` that is followed by a
host (and port) ending the authority, so ``http://u:p@ss/w?rd#x@host/path`` has the password
``p@ss/w?rd#x``. `urllib.parse.urlsplit` then reads the rest (host, path, query).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

#: ``scheme://``, where a URL starts.
SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
#: What may follow the ``@`` that ends the user info: a host, an optional port, the authority's end.
_HOST_AFTER_AT = re.compile(r"(?:\[[^\]\s/?#@]*\]|[^\s/?#@:\[\]]+)(?::[^\s/?#@]*)?(?=[/?#\s\"'<>]|$)")
#: A user info whose "password" is a port and a path: ``host:8080/@scope`` is a path, not a password.
_PORT_THEN_PATH = re.compile(r"\d+[/?#]")
_NOT_IN_USER = re.compile(r"[\s/?#]")
#: Query parameter names (lower case, ``-`` read as ``_``) whose value is a credential.
TOKEN_PARAMETERS = frozenset({
    "token", "access_token", "private_token", "refresh_token", "id_token", "auth_token", "api_key", "apikey",
    "key", "sig", "signature", "secret", "client_secret", "password", "passwd", "pwd", "pass", "auth",
    "x_amz_signature", "x_amz_security_token", "x_amz_credential", "x_goog_signature", "x_goog_credential",
    "code", "session", "sessionid", "jwt",
})
_TOKEN_SUFFIXES = ("_token", "_secret", "_password", "_key", "_signature", "_sig")


@dataclass(frozen=True)
class Credential:
    """One credential inside a text: its characters ``text[start:end]`` and what it is."""

    start: int
    end: int
    what: str  # "URL password", "URL user info", "query parameter 'token'"


def token_parameter(name: str) -> bool:
    """Whether a query parameter of this name carries a credential."""
    normal = name.strip().lower().replace("-", "_")
    return normal in TOKEN_PARAMETERS or normal.endswith(_TOKEN_SUFFIXES)


def _userinfo_end(text: str, authority: int, end: int) -> int | None:
    """The index of the ``@`` ending the user info of the URL whose authority starts at `authority`:
    the last one followed by a host that ends the authority, with no ``/?#`` or space in the user name
    before it (``host:8080/@scope`` is a path). The last, not the first: a password holding ``@`` and
    ``/`` is then hidden whole, and a path holding ``@`` only hides more than it must."""
    found = None
    at = text.find("@", authority, end)
    while at != -1:
        if _HOST_AFTER_AT.match(text, at + 1, end):
            user, _, password = text[authority:at].partition(":")
            if _NOT_IN_USER.search(user) is None and not _PORT_THEN_PATH.match(password):
                found = at
        at = text.find("@", at + 1, end)
    return found


def _url_end(text: str, start: int, authority: int) -> int:
    """Where the URL starting at `start` ends: the whole text when it is one URL, else the next
    whitespace after its user info (or after ``scheme://``)."""
    if not text[:start].strip():
        return len(text.rstrip())
    following = SCHEME.search(text, authority)
    limit = following.start() if following else len(text)
    at = _userinfo_end(text, authority, limit)
    space = re.compile(r"[\s\"'<>]").search(text, at + 1 if at is not None else authority, limit)
    return space.start() if space else limit


def credentials(text: str) -> list[Credential]:
    """The credentials of every URL in `text`: each password (or user info that is one token), and each
    value of a query parameter named like a credential. Never raises."""
    found: list[Credential] = []
    for match in SCHEME.finditer(text):
        start, authority = match.start(), match.end()
        end = _url_end(text, start, authority)
        if found and start < found[-1].end:
            continue  # ``scheme://`` inside a credential already found
        found += _in_one_url(text, authority, end)
    return found


def _in_one_url(text: str, authority: int, end: int) -> list[Credential]:
    out: list[Credential] = []
    at = _userinfo_end(text, authority, end)
    rest = authority
    if at is not None:
        user, colon, password = text[authority:at].partition(":")
        if colon and password:
            out.append(Credential(authority + len(user) + 1, at, "URL password"))
        elif not colon and _looks_like_token(user):
            out.append(Credential(authority, at, "URL user info"))
        rest = at + 1
    query = text.find("?", rest, end)
    if query == -1:
        return out
    fragment = text.find("#", query, end)
    stop = end if fragment == -1 else fragment
    pos = query + 1
    while pos <= stop:
        amp = text.find("&", pos, stop)
        part_end = stop if amp == -1 else amp
        name, eq, value = text[pos:part_end].partition("=")
        if eq and value and token_parameter(name):
            out.append(Credential(pos + len(name) + 1, part_end, f"query parameter {name!r}"))
        pos = part_end + 1
    return out


def _looks_like_token(user: str) -> bool:
    """A user name alone is a credential when it reads like a token (``https://ghp_…@github.com``)."""
    return len(user) >= 16 and any(c.isdigit() for c in user) and any(c.isalpha() for c in user)


def display_url(url: str) -> str:
    """The URL without user info and without credential query parameters, for logs, results and status
    files (never raises)."""
    text = url.strip()
    match = SCHEME.match(text)
    if match is None:
        return url.rstrip("/")
    at = _userinfo_end(text, match.end(), len(text))
    if at is not None:
        text = text[:match.end()] + text[at + 1:]
    try:
        parts = urlsplit(text)
    except ValueError:  # an URL too broken to parse (an unclosed IPv6 bracket): its query goes
        return text.split("?", 1)[0].rstrip("/")
    if parts.query:
        kept = [p for p in parts.query.split("&") if not token_parameter(p.partition("=")[0])]
        parts = parts._replace(query="&".join(kept))
    return urlunsplit(parts).rstrip("/")


__all__ = ["SCHEME", "TOKEN_PARAMETERS", "Credential", "credentials", "display_url", "token_parameter"]
