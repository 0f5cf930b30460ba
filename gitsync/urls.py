"""URLs as gitsync shows them: never with a user name or password."""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit

_USERINFO = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*://)[^/?#]*@")


def display_url(url: str) -> str:
    """The URL without user name or password, for logs, results and status files (never raises).

    An URL too broken to parse (an unclosed IPv6 bracket) loses its user info by text."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return _USERINFO.sub(r"\1", url).rstrip("/")
    if "@" not in parts.netloc:
        return url.rstrip("/")
    return urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1])).rstrip("/")


__all__ = ["display_url"]
