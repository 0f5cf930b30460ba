"""How values are shown to people: a commit by its short SHA, an age as ``42s``, ``5m``, ``3h``, ``2d``.

Vocabulary (pure): logs, status files, notes, the fleet table, the gate's reasons and the web view all
show commits and ages the same way.
"""

from __future__ import annotations


def short_sha(sha: str) -> str:
    """A commit as people read it: its first 7 hex digits."""
    return sha[:7]


def short(sha: str | None) -> str:
    """`short_sha`, or ``(none)`` when there is no commit (a log line's "gateways stay on (none)")."""
    return short_sha(sha) if sha else "(none)"


def format_age(seconds: float) -> str:
    """``42s``, ``5m``, ``3h``, ``2d``: the largest whole unit (negative ages are shown as 0s)."""
    seconds = max(0, int(seconds))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


__all__ = ["format_age", "short", "short_sha"]
