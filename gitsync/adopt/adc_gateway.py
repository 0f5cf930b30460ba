"""``gitsync import adc --gateway``: follow what the ADC that wrote the live gateway did.

Pure functions over the body of ``GET /apisix/admin/configs`` and the import's
payload. `follow` reads the evidence the gateway holds for each choice a release of
ADC makes differently (`gitsync.adopt.adc_releases`) — the service's upstream inside
the service or apart, health checks and service discovery written or dropped,
``nodes: []``, the name of the certificate-verification default, the lint's defaults,
the ``managed-by`` label — and says what it chose and why. `in_live_order` puts each
kind in the gateway's order (gitsync compares a kind in order, and ADC appends what a
later sync adds), and `compare` lists what the first sync would still change.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gitsync.adopt.adc_releases import (
    MANAGED_BY,
    RELEASES,
    VERIFY_CERT,
    VERIFY_CERT_OLD,
    Behaviour,
    Release,
)
from gitsync.adopt.repo_writer import NumberReference
from gitsync.adopt.secret_fields import Placeholder
from gitsync.content import content_bytes
from gitsync.kinds import KINDS, is_credential, item_id
from gitsync.push.plan import ItemChange, changed_fields

#: The kinds ADC stamps with ``managed-by`` (credentials and upstreams excepted).
LABELLED = ("services", "routes", "stream_routes", "consumers", "ssls")
_FILLED = ("type", "scheme", "pass_host")
_DISCOVERY = ("service_name", "discovery_type", "discovery_args")


@dataclass(frozen=True)
class Choice:
    """One decision the import took from the gateway: what, and the evidence."""

    subject: str
    decision: str
    evidence: str

    def __str__(self) -> str:
        return f"{self.subject}: {self.decision} ({self.evidence})"


@dataclass(frozen=True)
class Given:
    """What the command line fixed, which the gateway's evidence does not override."""

    behaviour: Behaviour | None = None  # --adc-version
    managed_by: bool | None = None  # --managed-by-label / --no-managed-by-label, else --adc-version's
    no_lint: bool = False  # --no-lint

    @classmethod
    def of(cls, version: Behaviour | None, label: bool | None, no_lint: bool) -> Given:
        """From the flags: an ``--adc-version`` fixes the label too, unless a label flag says otherwise."""
        return cls(version, label if label is not None else version.managed_by if version else None, no_lint)

    def behaviour_without_gateway(self) -> Behaviour:
        """The latest release's behaviour, or ``--adc-version``'s, with the label and lint flags."""
        return (self.behaviour or Behaviour()).with_(managed_by=bool(self.managed_by), lint=not self.no_lint)


@dataclass
class Followed:
    behaviour: Behaviour
    choices: list[Choice] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class _Clue:
    """Evidence that narrows the releases that could have written the gateway."""

    releases: frozenset[int]  # indexes into RELEASES
    text: str


def _plural(count: int, word: str) -> str:
    return f"{count:,} {word}" + ("" if count == 1 else "s")


def _some(count: int, word: str, where: str, verb: tuple[str, str]) -> str:
    """``3 upstreams on the gateway carry``: a count, its noun, and a verb that agrees."""
    return f"{_plural(count, word)} {where} {verb[count != 1]}"


def _span(indexes: Iterable[int]) -> str:
    found = sorted(indexes)
    first, last = RELEASES[found[0]], RELEASES[found[-1]]
    return first.name if first is last else f"{first.first} – {last.last}"


def _releases(test: Callable[[Release], bool]) -> frozenset[int]:
    return frozenset(i for i, r in enumerate(RELEASES) if test(r))


def _by_id(items: Any, kind: str) -> dict[str, Any]:
    return {i: item for item in items or () if (i := item_id(kind, item)) is not None} \
        if isinstance(items, list) else {}


def _live_upstreams(live: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """Every upstream on the gateway by id: the upstreams items, and ADC 0.20's upstream inside a
    service under the service's id (the id ADC 0.21.0 on gives it)."""
    out = {ident: item for ident, item in _by_id(live.get("upstreams"), "upstreams").items()
           if isinstance(item, Mapping)}
    for ident, service in _by_id(live.get("services"), "services").items():
        if isinstance(service.get("upstream"), Mapping):
            out.setdefault(ident, service["upstream"])
    return out


def _layout_clue(live: Mapping[str, Any], probe: Mapping[str, Sequence[Any]]) -> _Clue | None:
    services = _by_id(live.get("services"), "services")
    mine = [services[i] for i in _by_id(probe.get("services"), "services") if i in services]
    nested = sum(1 for s in mine if isinstance(s.get("upstream"), Mapping) and "upstream_id" not in s)
    if nested:
        return _Clue(_releases(lambda r: r.nested_upstream),
                     _some(nested, "service", "on the gateway", ("holds its", "hold their"))
                     + " upstream inside")
    if any("upstream_id" in s for s in mine):
        return _Clue(_releases(lambda r: not r.nested_upstream),
                     "the gateway's services point at an upstreams item (upstream_id)")
    return None


def _pairs(live: Mapping[str, Any], probe: Mapping[str, Sequence[Any]]) -> list[tuple[Any, Any]]:
    """Each upstream of the import with the gateway's upstream of the same id."""
    there = _live_upstreams(live)
    return [(up, there[i]) for i, up in _by_id(probe.get("upstreams"), "upstreams").items() if i in there]


def _active_check(upstream: Mapping[str, Any]) -> Mapping[str, Any] | None:
    checks = upstream.get("checks")
    active = checks.get("active") if isinstance(checks, Mapping) else None
    return active if isinstance(active, Mapping) else None


def _upstream_clues(live: Mapping[str, Any], probe: Mapping[str, Sequence[Any]], verify_names: bool,
                    ) -> list[_Clue]:
    """Health checks and discovery written or dropped, ``nodes: []``, the verification flag's name:
    each upstream the files give such fields, compared with the gateway's."""
    pairs = _pairs(live, probe)
    clues: list[_Clue] = []
    extras = [there for up, there in pairs if "checks" in up or "service_name" in up]
    if extras:
        kept = sum(1 for there in extras if any(k in there for k in ("checks", *_DISCOVERY)))
        clues.append(_Clue(_releases(lambda r: r.checks),
                           _some(kept, "upstream", "on the gateway", ("carries", "carry"))
                           + " health checks or discovery")
                     if kept else
                     _Clue(_releases(lambda r: not r.checks),
                           "the gateway has none of the health checks or discovery fields of "
                           f"{_plural(len(extras), 'upstream')} in the files"))
    bare = [there for up, there in pairs if "nodes" not in up]
    if bare:
        empty = sum(1 for there in bare if there.get("nodes") in ([], {}))  # APISIX answers [] as {}
        clues.append(_Clue(_releases(lambda r: r.empty_nodes),
                           _some(empty, "upstream", "without nodes on the gateway", ("says", "say"))
                           + " nodes: []")
                     if empty else
                     _Clue(_releases(lambda r: not r.empty_nodes),
                           _some(len(bare), "upstream", "without nodes on the gateway", ("has", "have"))
                           + " no nodes field"))
    actives = [a for _, there in pairs if (a := _active_check(there)) is not None]
    for name, other in ((VERIFY_CERT_OLD, VERIFY_CERT), (VERIFY_CERT, VERIFY_CERT_OLD)):
        count = sum(1 for a in actives if name in a and other not in a) if verify_names else 0
        if count:
            clues.append(_Clue(_releases(lambda r, n=name: r.checks and r.verify_cert == n),
                               _some(count, "active health check", "on the gateway", ("says", "say"))
                               + f" {name}"))
    return clues


def _defaulted(upstream: Mapping[str, Any]) -> bool:
    """Whether an upstream has the fields ADC's lint (zod 4) always fills in."""
    nodes = upstream.get("nodes")
    listed = [node for node in nodes if isinstance(node, Mapping)] if isinstance(nodes, list) else []
    return all(k in upstream for k in _FILLED) and all("priority" in node for node in listed)


def _lint_evidence(live: Mapping[str, Any], probe: Mapping[str, Sequence[Any]], release: Release,
                   ) -> tuple[bool, str] | None:
    """Whether ADC's lint filled in its defaults: (ran, why), or None when nothing tells."""
    mine = [there for _, there in _pairs(live, probe)]
    if release.full_defaults:
        lacking = sum(1 for up in mine if not _defaulted(up))
        what = "type, scheme, pass_host and each node's priority"
    else:
        pools = [up["keepalive_pool"] for up in mine if isinstance(up.get("keepalive_pool"), Mapping)]
        mine = pools
        lacking = sum(1 for pool in pools if not all(k in pool for k in ("size", "idle_timeout", "requests")))
        what = "keepalive_pool's size, idle_timeout and requests"
    if not mine:
        return None
    if lacking:
        return False, f"{lacking:,} of {_plural(len(mine), 'upstream')} on the gateway lack {what}"
    return True, f"every one of the {_plural(len(mine), 'upstream')} on the gateway has {what}"


def _label_evidence(live: Mapping[str, Any], probe: Mapping[str, Sequence[Any]]) -> tuple[int, int]:
    """(items with ``managed-by: adc``, items looked at): the gateway's items of the labelled kinds that
    the import maps (credentials aside)."""
    key, value = MANAGED_BY
    stamped = total = 0
    for kind in LABELLED:
        there = _by_id(live.get(kind), kind)
        for ident, item in _by_id(probe.get(kind), kind).items():
            if ident not in there or is_credential(kind, item):
                continue
            total += 1
            labels = there[ident].get("labels")
            stamped += isinstance(labels, Mapping) and labels.get(key) == value
    return stamped, total


def _choose_release(clues: list[_Clue], given: Given, followed: Followed) -> Release:
    allowed = frozenset(range(len(RELEASES)))
    for clue in clues:
        allowed &= clue.releases
    evidence = "; ".join(c.text for c in clues) or "nothing on the gateway tells the releases apart"
    if given.behaviour is not None:
        chosen = given.behaviour.release
        if allowed and RELEASES.index(chosen) not in allowed:
            followed.warnings.append(f"--adc-version says ADC {chosen.name}, but the gateway looks written "
                                     f"by ADC {_span(allowed)} ({evidence}): the first sync may change "
                                     "upstreams")
        followed.choices.append(Choice("ADC release", f"{chosen.name}, as --adc-version says", evidence))
        return chosen
    if not allowed:
        followed.warnings.append(f"the gateway fits no single ADC release ({evidence}): following the "
                                 f"latest, {RELEASES[-1].name}")
        return RELEASES[-1]
    chosen = RELEASES[max(allowed)]
    if len(allowed) == 1:
        followed.choices.append(Choice("ADC release", chosen.name, evidence))
    else:
        followed.choices.append(Choice("ADC release", f"{chosen.name}, the newest of {_span(allowed)}",
                                       f"{evidence}; those write these files alike"))
    return chosen


def follow(live: Mapping[str, Any], probe: Mapping[str, Sequence[Any]], given: Given) -> Followed:
    """The behaviour that writes what the gateway holds, and the choices made on the way.

    `probe` is the import under the latest release with its defaults (what the files say, in the
    fullest shape ADC writes); `given`, what the command line fixed."""
    followed = Followed(Behaviour())
    clues = [_layout_clue(live, probe), *_upstream_clues(live, probe, verify_names=not given.no_lint)]
    release = _choose_release([c for c in clues if c is not None], given, followed)
    lint = _lint_evidence(live, probe, release)
    if given.no_lint:
        followed.choices.append(Choice("defaults", "none, as --no-lint says", lint[1] if lint else "-"))
        if lint and lint[0]:
            followed.warnings.append(f"--no-lint given, but {lint[1]}: ADC's lint filled in its defaults")
        ran = False
    elif lint is None:
        ran = True
        followed.choices.append(Choice("defaults", "filled in as ADC's lint does",
                                       "no upstream on the gateway tells otherwise"))
    else:
        ran = lint[0]
        followed.choices.append(Choice("defaults", "filled in as ADC's lint does" if ran
                                       else "none, as adc sync --no-lint writes", lint[1]))
    managed_by = _choose_label(live, probe, given, followed)
    followed.behaviour = Behaviour(release, managed_by, ran)
    return followed


def _choose_label(live: Mapping[str, Any], probe: Mapping[str, Sequence[Any]], given: Given,
                  followed: Followed) -> bool:
    stamped, total = _label_evidence(live, probe)
    what = "services, routes, stream routes, consumers and SSLs"
    evidence = (f"{stamped:,} of the {total:,} {what} on the gateway {('has', 'have')[stamped != 1]} "
                "labels.managed-by: adc") if total else f"the gateway holds none of the imported {what}"
    if given.managed_by is not None:
        decision = "stamped" if given.managed_by else "left out"
        followed.choices.append(Choice("managed-by label", f"{decision}, as the command line says", evidence))
        if total and (stamped * 2 > total) != given.managed_by:
            followed.warnings.append(f"the command line says the managed-by label is {decision}, but "
                                     f"{evidence}: the first sync changes their labels")
        return given.managed_by
    chosen = bool(total) and stamped * 2 > total
    if 0 < stamped < total:
        followed.warnings.append(f"only {evidence}: the first sync changes the labels of the others")
    followed.choices.append(Choice("managed-by label", "stamped (ADC after 0.28.0)" if chosen
                                   else "left out (ADC up to 0.28.0)", evidence))
    return chosen


# ---------------------------------------------------------------------------------------------------------
# Order and comparison


def in_live_order(payload: Mapping[str, list[Any]], live: Mapping[str, Any]
                  ) -> tuple[dict[str, list[Any]], list[str]]:
    """Each kind in the gateway's order (items it does not hold last, in file order), and the kinds
    whose order that changed."""
    out: dict[str, list[Any]] = {}
    moved: list[str] = []
    for kind, items in payload.items():
        position = {ident: n for n, ident in enumerate(_by_id(live.get(kind), kind))}
        keyed = [(position.get(item_id(kind, item), len(position)), n) for n, item in enumerate(items)]
        order = [n for _, n in sorted(keyed)]
        out[kind] = [items[n] for n in order]
        if order != sorted(order):
            moved.append(kind)
    return out, moved


_SECRET = re.compile(r"\$\{\{ secrets\.\w+ \}\}")


def _placeholder_pattern(text: str) -> re.Pattern[str]:
    literal = [re.escape(part.replace("$${{", "${{")) for part in _SECRET.split(text)]
    return re.compile("(.*)".join(literal), re.DOTALL)


def resolved(imported: Any, live: Any) -> Any:
    """`imported` with each ``${{ secrets.NAME }}`` text that matches the live value replaced by it, and
    each ``${{ number(vars.NAME) }}`` where the gateway holds a number: what the repo renders once those
    secrets and variables are set as on the gateway."""
    if isinstance(imported, NumberReference):
        return live if isinstance(live, int | float) and not isinstance(live, bool) else imported
    if isinstance(imported, Placeholder):
        return live if isinstance(live, str) and _placeholder_pattern(imported).fullmatch(live) else imported
    if isinstance(imported, Mapping) and isinstance(live, Mapping):
        return {k: resolved(v, live.get(k)) for k, v in imported.items()}
    if isinstance(imported, list) and isinstance(live, list) and len(imported) == len(live):
        return [resolved(a, b) for a, b in zip(imported, live, strict=True)]
    return imported


def compare(payload: Mapping[str, list[Any]], live: Mapping[str, Any]) -> tuple[int, list[ItemChange]]:
    """(items equal to the gateway's, what the first sync would change): per kind the items that differ
    (with their fields), that only the files have (add) and that only the gateway has (remove)."""
    equal, changes = 0, []
    for kind in KINDS:
        there = _by_id(live.get(kind), kind)
        here = _by_id(payload.get(kind), kind)
        for ident, item in here.items():
            if ident not in there:
                changes.append(ItemChange(kind, ident, "add"))
                continue
            mine = resolved(item, there[ident])
            if content_bytes(mine) == content_bytes(there[ident]):
                equal += 1
            else:
                changes.append(ItemChange(kind, ident, "change", tuple(changed_fields(there[ident], mine))))
        changes += [ItemChange(kind, ident, "remove") for ident in there if ident not in here]
    return equal, changes
