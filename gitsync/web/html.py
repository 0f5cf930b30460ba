"""Building HTML safely: every value is escaped unless it is `Markup` this package built.

Everything the view shows comes from git or a gateway (ids, descriptions, file names, error
messages) and may hold markup; so the one way to put a value into a page is `esc` (or a helper
that calls it), and only the fragments built here are trusted as HTML. `Markup` is markupsafe's:
adding a plain string to it escapes that string, so concatenation cannot let markup in.
"""

from __future__ import annotations

from collections.abc import Iterable
from importlib import resources
from string import Template
from typing import Any

from markupsafe import Markup, escape


def esc(value: Any) -> Markup:
    """`value` as HTML text: escaped, quotes included (safe in text and in quoted attributes); Markup
    as it is; None as nothing."""
    return escape("" if value is None else value)


def join(parts: Iterable[Any], separator: str = "") -> Markup:
    return esc(separator).join(esc(p) for p in parts)


def attrs(values: dict[str, Any]) -> Markup:
    """` name="value"` for each attribute (None left out, True as a bare name)."""
    out = []
    for name, value in values.items():
        if value is None or value is False:
            continue
        name = name.rstrip("_").replace("_", "-")
        out.append(f" {name}" if value is True else f' {name}="{esc(value)}"')
    return Markup("".join(out))


VOID = frozenset({"input", "br", "meta", "link", "img", "hr"})


def tag(element: str, /, *children: Any, **attributes: Any) -> Markup:
    """``<element attrs>children</element>``: children escaped unless Markup (no end tag for a void one)."""
    if element in VOID:
        return Markup(f"<{element}{attrs(attributes)}>")
    return Markup(f"<{element}{attrs(attributes)}>{join(children)}</{element}>")


def link(href: str | None, text: Any, /, **attributes: Any) -> Markup:
    """A link, or the text alone when there is nowhere to go."""
    return tag("a", text, href=href, **attributes) if href else esc(text)


def table(headers: Iterable[Any], rows: Iterable[Iterable[Any]], *, caption: Any = None,
          **attributes: Any) -> Markup:
    """A table with a header row (`scope="col"`) and one row per item; cells escaped unless Markup."""
    head = Markup("".join(tag("th", h, scope="col") for h in headers))
    body = Markup("".join(f"<tr>{''.join(tag('td', c) for c in row)}</tr>" for row in rows))
    cap = tag("caption", caption) if caption is not None else Markup("")
    return Markup(f"<table{attrs(attributes)}>{cap}<thead><tr>{head}</tr></thead>"
                  f"<tbody>{body}</tbody></table>")


def _template(name: str) -> Template:
    return Template(resources.files(__package__).joinpath("templates", name).read_text("utf-8"))


LAYOUT = _template("layout.html")


def page(title: str, main: Markup, *, agent: str, nav: str, logout: bool) -> bytes:
    """A whole page in the layout: every value escaped, `main` already HTML."""
    items = [("/", "Overview", "overview"), ("/items", "Items", "items"), ("/fleet", "Fleet", "fleet")]
    links = Markup("".join(
        tag("li", tag("a", text, href=href, aria_current="page" if key == nav else None))
        for href, text, key in items))
    out = Markup("")
    if logout:
        out = Markup('<form method="post" action="/logout" class="logout">'
                     '<button type="submit">Log out</button></form>')
    return LAYOUT.substitute(title=esc(title), agent=esc(agent), nav=links, logout=out, main=main).encode()


__all__ = ["LAYOUT", "Markup", "attrs", "esc", "join", "link", "page", "table", "tag"]
