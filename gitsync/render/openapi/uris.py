"""An OpenAPI path → how an APISIX route matches exactly that path.

APISIX's default router (``router.http: radixtree_host_uri``, and ``radixtree_uri``) builds its radix
tree with ``no_param_match`` (``apisix/utils/router.lua``): a ``:id`` in a route's uri is literal
text there, and only ``radixtree_uri_with_parameter`` reads it as a parameter. ADC's converter writes
``/users/:id``, which on a default gateway matches only a request for ``/users/:id`` itself. So a
path with a template is matched, on every router, by what every router honours the same way:

- the uri is the path's literal text up to its first template, then ``*`` (radixtree's prefix
  match: ``/users/{id}/orders`` → ``/users/*``);
- ``vars`` holds ``["uri", "~~", "^/users/[^/]+/orders$"]``: the whole path, each template one
  segment's worth of characters (at least one, never a ``/``), the rest literal;
- ``priority`` is the number of the path's literal characters, so that of two templated paths under
  one prefix that both match a request, the more literal one is tried first, as OpenAPI asks
  ("concrete paths are matched before their templated counterparts"). A path without a template is
  an exact uri, which radixtree tries before any prefix.

A literal ``*`` or ``:`` (which some routers read as a prefix or a parameter) is matched the same
way: the uri stops before it and the expression says it literally.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import unquote

#: Characters after which a uri cannot be written literally on every router.
_SPECIAL = "{*:"
_TEMPLATE = re.compile(r"\{([^{}/]*)\}")
_TEMPLATE_SPLIT = re.compile(r"(\{[^{}/]*\})")
#: One template's worth of a request's uri: one or more characters of one segment.
SEGMENT = "[^/]+"
_UNSAFE = re.compile(r"[\x00-\x1f\x7f?#]")


@dataclass(frozen=True)
class Matcher:
    """How a route matches one OpenAPI path: `uri`, and for a templated path the `regex` of the
    ``vars`` condition on ``uri`` and the route's `priority`."""

    uri: str
    regex: str | None = None
    priority: int | None = None

    def vars_condition(self) -> list[str] | None:
        """The ``vars`` condition that matches the whole path (None: the uri is exact)."""
        return None if self.regex is None else ["uri", "~~", self.regex]


def _escape(text: str) -> str:
    """`text` as a literal in a PCRE pattern: ASCII punctuation escaped, other characters as they are
    (the gateway matches without the UTF-8 flag, byte for byte)."""
    return "".join("\\" + c if c.isascii() and not c.isalnum() and c not in "/_-~" else c for c in text)


def matcher(path: str) -> Matcher | str:
    """The matcher of an OpenAPI path (already prefixed with the server's path), or why the path cannot
    become one. Percent-escapes are decoded: APISIX matches the request's decoded uri (nginx's ``$uri``)."""
    if not path.startswith("/"):
        return f"the path {path!r} does not start with '/'"
    bad = _UNSAFE.search(path)
    if bad is not None:
        what = {"?": "a query ('?')", "#": "a fragment ('#')"}.get(bad.group(), "a control character")
        return f"the path {path!r} holds {what}, which a request's uri never holds"
    rest = _TEMPLATE.sub("", path)
    if "{" in rest or "}" in rest:
        return f"the path {path!r} has a '{{' or '}}' that does not open or close a template ({{name}})"
    empty = next((m for m in _TEMPLATE.finditer(path) if not m.group(1)), None)
    if empty is not None:
        return f"the path {path!r} has an empty template '{{}}' at character {empty.start() + 1}"
    parts = _TEMPLATE_SPLIT.split(path)  # literal text at even places, templates at odd ones
    path = "".join(unquote(part) if n % 2 == 0 else part for n, part in enumerate(parts))
    cut = min((i for i in (path.find(c) for c in _SPECIAL) if i >= 0), default=-1)
    if cut < 0:
        return Matcher(path)
    parts, literal, end = [], 0, 0
    for match in _TEMPLATE.finditer(path):
        parts += [_escape(path[end:match.start()]), SEGMENT]
        literal += match.start() - end
        end = match.end()
    parts.append(_escape(path[end:]))
    literal += len(path) - end
    return Matcher(path[:cut] + "*", "^" + "".join(parts) + "$", literal)


def template_key(path: str) -> str:
    """The path with every template's name left out: two paths with the same key match the same
    requests (OpenAPI: "templated paths with the same hierarchy but different templated names MUST
    NOT exist as they are identical")."""
    return _TEMPLATE.sub("{}", path)


__all__ = ["SEGMENT", "Matcher", "matcher", "template_key"]
