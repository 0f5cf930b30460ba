"""Ownership: which items each source of a gateway's payload may declare (vocabulary, pure).

A source (a team's repo, the platform's) owns a set of items: each `Claim` names kinds and, within
them, an id prefix, and maybe labels the items must carry (``labels: {team: orders}``; the settings
make a claim by labels name a prefix too); a source's claims are its `Ownership`.

The owner of an id follows from the settings alone (`owner_of`): two claims on a kind whose prefixes
start one another (or a whole kind) are a settings error (`static_overlap`), so no two sources may hold
one id, a fresh agent and a long-running one agree on whose it is, and a source that declares an id of
another's is the one refused, at its file:line.

A source's items are its own: another source's reference into one of them (a route's ``upstream_id``,
a consumer's ``group_id``, a ``$secret://`` manager) is refused unless the owner `shares` it with that
source (`Share`). A credential is its consumer's: no share lets another source add one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gitsync.kinds import KINDS


@dataclass(frozen=True)
class Claim:
    """Items of `kinds` whose id starts with `prefix` (None: any) and that carry every one of `labels`
    (in their ``labels`` mapping)."""

    kinds: tuple[str, ...]
    prefix: str | None = None
    labels: tuple[tuple[str, str], ...] = ()  # sorted (key, value) pairs

    @property
    def whole(self) -> bool:
        """Every item of its kinds."""
        return self.prefix is None and not self.labels

    def matches(self, kind: str, ident: str | None, item: Any) -> bool:
        if kind not in self.kinds:
            return False
        if self.prefix is not None and not (ident or "").startswith(self.prefix):
            return False
        if self.labels:
            labels = item.get("labels") if isinstance(item, dict) else None
            if not isinstance(labels, Mapping) or any(labels.get(k) != v for k, v in self.labels):
                return False
        return True

    def describe(self, kind: str | None = None) -> str:
        """``routes with id prefix 'orders-' and label team=orders`` (of `kind` only, when given)."""
        what = kind or ", ".join(self.kinds)
        parts = ([f"id prefix {self.prefix!r}"] if self.prefix is not None else []) + \
            [f"label {key}={value}" for key, value in self.labels]
        return f"{what} with {' and '.join(parts)}" if parts else f"every item of {what}"


#: A share's `readers` entry that names every other source.
EVERY_SOURCE = "*"


@dataclass(frozen=True)
class Share:
    """Items of `kinds` a source lets `readers` (source names, or `EVERY_SOURCE`) name in their items:
    those whose id starts with `prefix`, or is one of `ids`, or every one it owns of the kinds."""

    kinds: tuple[str, ...]
    readers: tuple[str, ...] = (EVERY_SOURCE,)
    prefix: str | None = None
    ids: tuple[str, ...] = ()

    def allows(self, kind: str, ident: str, reader: str | None) -> bool:
        if kind not in self.kinds or not (EVERY_SOURCE in self.readers or reader in self.readers):
            return False
        if self.ids:
            return ident in self.ids
        return self.prefix is None or ident.startswith(self.prefix)

    def describe(self) -> str:
        which = f"ids {', '.join(self.ids)}" if self.ids else (
            f"id prefix {self.prefix!r}" if self.prefix is not None else "every item")
        whom = "every source" if EVERY_SOURCE in self.readers else ", ".join(self.readers)
        return f"{', '.join(self.kinds)} ({which}) with {whom}"


#: Plugins that run code on the gateway's workers: a source uses one only when its settings allow it
#: (`Ownership.may_run`); a route's ``script`` counts as the plugin ``script``.
CODE_PLUGINS = frozenset({"serverless-pre-function", "serverless-post-function", "ext-plugin-pre-req",
                          "ext-plugin-post-req", "ext-plugin-post-resp", "script"})


@dataclass(frozen=True)
class Traffic:
    """The requests a source owns: to `hosts` (``*.example.com`` a suffix; none: every host) on paths
    starting with one of `paths` (none: every path), TLS handshakes for `snis`, stream `ports`."""

    hosts: tuple[str, ...] = ()
    paths: tuple[str, ...] = ()
    snis: tuple[str, ...] = ()
    ports: tuple[int, ...] = ()

    @property
    def http(self) -> bool:
        return bool(self.hosts or self.paths)

    def describe(self) -> str:
        parts = [f"hosts {', '.join(self.hosts)}" if self.hosts else "",
                 f"paths {', '.join(self.paths)}" if self.paths else "",
                 f"SNIs {', '.join(self.snis)}" if self.snis else "",
                 f"stream ports {', '.join(map(str, self.ports))}" if self.ports else ""]
        return "; ".join(p for p in parts if p)


def hosts_meet(a: str, b: str) -> bool:
    """Whether one host could answer both host patterns (``*.x.com``: any name ending ``.x.com``)."""
    a, b = a.lower().rstrip("."), b.lower().rstrip(".")
    if a.startswith("*.") and b.startswith("*."):
        return a[1:].endswith(b[1:]) or b[1:].endswith(a[1:])
    if a.startswith("*."):
        return b.endswith(a[1:])
    if b.startswith("*."):
        return a.endswith(b[1:])
    return a == b


def path_meets(uri: str, prefix: str) -> bool:
    """Whether a route's `uri` (exact, ``/a/*`` a prefix, ``:name`` a parameter) can match a path that
    starts with `prefix`."""
    cut = min((at for at in (uri.find("*"), uri.find(":")) if at >= 0), default=-1)
    if cut < 0:
        return uri.startswith(prefix)
    start = uri[:cut]
    return start.startswith(prefix) or prefix.startswith(start)


def _texts(item: dict, one: str, many: str) -> list[str]:
    """The text of field `one` and those of list `many` (``host``/``hosts``, ``uri``/``uris``)."""
    listed = item.get(many)
    return ([item[one]] if isinstance(item.get(one), str) else []) + \
        [text for text in (listed if isinstance(listed, list) else []) if isinstance(text, str)]


def trespass(kind: str, item: Any, traffic: Traffic) -> str | None:
    """What of `traffic` an item of another source would take (a route whose hosts and uris could match
    a request of it, whatever its priority, methods and vars: no hosts is every host, no uri every
    path; an SSL of one of its SNIs; a stream route on one of its ports, or on any), or None."""
    if not isinstance(item, dict):
        return None
    if kind == "routes" and traffic.http:
        hosts, uris = _texts(item, "host", "hosts"), _texts(item, "uri", "uris") or ["/*"]
        host_hit = not (traffic.hosts and hosts) or any(hosts_meet(h, t)
                                                        for h in hosts for t in traffic.hosts)
        if host_hit and (not traffic.paths or any(path_meets(u, p) for u in uris for p in traffic.paths)):
            return f"its hosts and uris could match requests of {traffic.describe()}"
    snis = _texts(item, "sni", "snis") if kind == "ssls" else []
    if any(hosts_meet(sni, t) for sni in snis for t in traffic.snis):
        return f"its SNIs meet {traffic.describe()}"
    if kind == "stream_routes" and traffic.ports:
        port = item.get("server_port")
        if port is None or port in traffic.ports:
            return f"it could take connections on {traffic.describe()}"
    return None


def traffic_overlap(a: Traffic, b: Traffic) -> str | None:
    """Why one request, handshake or connection could be both sources' traffic, or None."""
    if a.http and b.http:
        hosts = not (a.hosts and b.hosts) or any(hosts_meet(x, y) for x in a.hosts for y in b.hosts)
        paths = not (a.paths and b.paths) or any(x.startswith(y) or y.startswith(x)
                                                  for x in a.paths for y in b.paths)
        if hosts and paths:
            return f"{a.describe()} / {b.describe()}"
    if any(hosts_meet(x, y) for x in a.snis for y in b.snis) or set(a.ports) & set(b.ports):
        return f"{a.describe()} / {b.describe()}"
    return None


@dataclass(frozen=True)
class Ownership:
    """A source's claims, what it shares, the traffic it owns and the code plugins it may use;
    `everything`: the one implicit source of the single-repo settings (no check applies to it)."""

    claims: tuple[Claim, ...] = ()
    everything: bool = False
    shares: tuple[Share, ...] = ()
    traffic: Traffic = Traffic()
    #: plugins a source may use only when allowed (`CODE_PLUGINS` and those the settings add), and
    #: those of them this source may use
    restricted: frozenset[str] = CODE_PLUGINS
    may_run: frozenset[str] = frozenset()

    def shares_with(self, kind: str, ident: str, reader: str | None) -> bool:
        """Whether source `reader` may name this source's item (`kind`, `ident`)."""
        return any(share.allows(kind, ident, reader) for share in self.shares)

    def owns(self, kind: str, ident: str | None, item: Any) -> bool:
        return self.everything or any(claim.matches(kind, ident, item) for claim in self.claims)

    def may_own(self, kind: str, ident: str) -> bool:
        """Whether an item of `kind` with id `ident` could be this source's (its labels unknown)."""
        return self.everything or any(kind in claim.kinds and (claim.prefix is None or ident.startswith(
            claim.prefix)) for claim in self.claims)

    def kinds(self) -> frozenset[str]:
        """The kinds it may declare items of."""
        return frozenset(KINDS) if self.everything else frozenset(k for c in self.claims for k in c.kinds)

    def whole_kinds(self) -> frozenset[str]:
        """The kinds it owns every item of (no other source declares any)."""
        if self.everything:
            return frozenset(KINDS)
        return frozenset(k for c in self.claims if c.whole for k in c.kinds)

    def describe(self, kind: str) -> str:
        """What it owns of `kind`, for messages: ``routes with id prefix 'orders-'``."""
        found = [c.describe(kind) for c in self.claims if kind in c.kinds]
        return " or ".join(found) if found else f"no {kind}"


def owner_of(kind: str, ident: str, owners: Sequence[tuple[str | None, Ownership]]) -> str | None:
    """The source whose claims may hold an item of `kind` with id `ident`, from the settings alone (the
    first that may: the settings let no two); None when none may."""
    return next((name for name, owns in owners if owns.may_own(kind, ident)), None)


def static_overlap(a: Claim, b: Claim) -> str | None:
    """Why two claims (of two sources) may both hold an item of one id, or None when no id can be both's:
    a kind both name, and prefixes that start one another (a whole kind starts every id). Labels do not
    tell two sources apart: an id is unique per kind on the gateway, and its owner follows from the
    ids the claims hold; labels only narrow what a source may declare of them."""
    common = [kind for kind in a.kinds if kind in b.kinds]
    if not common:
        return None
    if a.prefix is not None and b.prefix is not None and not (
            a.prefix.startswith(b.prefix) or b.prefix.startswith(a.prefix)):
        return None  # no id starts with both
    return f"both claim {a.describe(common[0])} / {b.describe(common[0])}"


__all__ = ["CODE_PLUGINS", "EVERY_SOURCE", "Claim", "Ownership", "Share", "Traffic", "hosts_meet", "owner_of",
           "path_meets", "static_overlap", "traffic_overlap", "trespass"]
