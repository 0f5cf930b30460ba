"""Secret values out of a payload: each becomes ``${{ secrets.NAME }}`` with a stable NAME.

Which strings (or which parts of a string: a URL's password, a header's credential after
``Bearer``) are secret is the classifier's decision (`gitsync.render.secrets`), the same
that masks ``gitsync render``'s output. A value the classifier only finds likely (a long
high-entropy header value or URL part) is taken out all the same, with a warning naming
the field. ``$secret://`` and ``$env://`` references are not secrets and stay as they are.

A NAME is the item's kind, id and field path in capitals (``SSLS_EXAMPLE_COM_KEY``,
``SECRETS_VAULT_MAIN_TOKEN``): the same item and field always give the same name,
so a second export of the same gateway needs no new secret. Names that would clash,
or run past 96 characters, end in a digest of what they stand for.
"""

from __future__ import annotations

import copy
import hashlib
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gitsync.kinds import item_id
from gitsync.render.secrets import NO_RULES, Finding, SecretRules, classify, value_at
from gitsync.render.sourcemap import field_text

MAX_NAME = 96
_NOT_NAME = re.compile(r"[^A-Z0-9]+")
#: An expression in repo text (a `Placeholder`'s): a secret part holding one is not a literal value.
_EXPRESSION = re.compile(r"(?<!\$)\$\{\{")


class Placeholder(str):
    """A string already written in repo syntax (holds ``${{ secrets.NAME }}``): not escaped again."""

    __slots__ = ()


@dataclass(frozen=True)
class SecretSpot:
    """One secret found: where (kind, item index, field path, nth in that string) and its value."""

    kind: str
    index: int
    ident: str
    path: tuple[str | int, ...]
    nth: int
    value: str

    def base_name(self, several: bool) -> str:
        words = [self.kind, self.ident, *(str(p) for p in self.path if p != "plugins")]
        if several:
            words.append(str(self.nth + 1))
        name = _NOT_NAME.sub("_", "_".join(words).upper()).strip("_")
        return name if name[:1].isalpha() else "S_" + name

    @property
    def origin(self) -> str:
        return f"{self.kind}\0{self.ident}\0{self.path!r}\0{self.nth}"


@dataclass
class Extracted:
    """A payload with its secrets taken out: the payload in repo text, ``{NAME: value}``, and warnings
    (values taken out because they look like credentials, fields the classifier could not use)."""

    payload: dict[str, list[Any]]
    values: dict[str, str]
    warnings: list[str] = field(default_factory=list)


def runs(value: str, finding: Finding) -> list[tuple[bool, str]]:
    """`value` as (is_secret, text) runs by `finding`'s spans; whitespace around a secret stays literal
    text: a secret read from a file is stripped (a PEM key's last newline would otherwise be lost)."""
    spans = finding.spans if finding.spans is not None else ((0, len(value)),)
    out: list[tuple[bool, str]] = []
    pos = 0
    for start, end in spans:
        text = value[start:end]
        core = text.strip()
        lead = start + (text.index(core) if core else len(text))
        out += [(False, value[pos:lead]), (bool(core), core)]
        pos = lead + len(core)
    out.append((False, value[pos:]))
    return [(is_secret, text) for is_secret, text in out if text]


def _set(container: Any, path: Sequence[str | int], value: Any) -> None:
    for step in path[:-1]:
        container = container[step]
    container[path[-1]] = value


def _names(spots: list[SecretSpot], several: set[tuple[int, str, tuple]]) -> dict[str, str]:
    """origin → NAME; a base name used for two different origins gets a digest on each."""
    bases = {s.origin: s.base_name((s.index, s.kind, s.path) in several) for s in spots}
    count: dict[str, int] = {}
    for base in bases.values():
        count[base] = count.get(base, 0) + 1
    names = {}
    for origin, base in bases.items():
        if count[base] > 1 or len(base) > MAX_NAME:
            digest = hashlib.sha1(origin.encode("utf-8", "surrogatepass")).hexdigest()[:8].upper()
            base = f"{base[:MAX_NAME - 9]}_{digest}"
        names[origin] = base
    return names


def _literal_runs(value: str, finding: Finding) -> list[tuple[bool, str]] | None:
    """The runs of `value`, secret parts as literal values; None when a secret part of a `Placeholder`
    holds an expression (it is a reference, not a value to take out)."""
    found = runs(value, finding)
    if not isinstance(value, Placeholder):
        return found
    if any(is_secret and _EXPRESSION.search(text) for is_secret, text in found):
        return None
    return [(is_secret, text.replace("$${{", "${{") if is_secret else text) for is_secret, text in found]


def extract_secrets(payload: Mapping[str, Sequence[Any]], escape: Callable[[Any], Any],
                    rules: SecretRules = NO_RULES) -> Extracted:
    """The payload with every secret string (or part) replaced by ``${{ secrets.NAME }}``, and the values.

    `escape` turns literal text into repo syntax (``${{`` → ``$${{``); the strings this puts in are
    `Placeholder`s, already escaped. A string that is a `Placeholder` already is repo text: its
    literal parts stay as they are.
    """
    out = {kind: copy.deepcopy(list(items)) for kind, items in payload.items()}
    found: list[tuple[SecretSpot, list[tuple[bool, str]], Finding]] = []
    warnings: list[str] = []
    for kind, items in payload.items():
        for index, item in enumerate(items):
            ident = item_id(kind, item) or f"#{index}"
            for finding in classify(kind, item, rules):
                parts = _literal_runs(value_at(item, finding.path), finding)
                if parts is None:
                    continue
                secrets = [text for is_secret, text in parts if is_secret]
                for nth, text in enumerate(secrets):
                    found.append((SecretSpot(kind, index, ident, finding.path, nth, text), parts, finding))
    several = {(s.index, s.kind, s.path) for s, _, _ in found if s.nth > 0}
    names = _names([s for s, _, _ in found], several)
    values: dict[str, str] = {}
    done: set[tuple[str, int, tuple]] = set()
    for spot, parts, finding in found:
        key = (spot.kind, spot.index, spot.path)
        if key in done:
            continue
        done.add(key)
        literal = not isinstance(value_at(payload[spot.kind][spot.index], spot.path), Placeholder)
        text, nth, named = "", 0, []
        for is_secret, run in parts:
            if not is_secret:
                text += escape(run) if literal else run
                continue
            name = names[SecretSpot(spot.kind, spot.index, spot.ident, spot.path, nth, run).origin]
            values[name] = run
            named.append(name)
            text += "${{ secrets." + name + " }}"
            nth += 1
        _set(out[spot.kind][spot.index], spot.path, Placeholder(text))
        if not finding.certain:
            where = f"{spot.kind}[{spot.ident}].{field_text(spot.path)}"
            warnings.append(f"{where}: {finding.why}, taken out as a secret ({', '.join(named)}): "
                            "nothing names it secret, but it looks like a credential")
    return Extracted(out, dict(sorted(values.items())), warnings)


__all__ = ["Extracted", "Placeholder", "SecretSpot", "extract_secrets", "runs"]
