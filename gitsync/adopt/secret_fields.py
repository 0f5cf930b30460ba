"""Secret values out of a payload: each becomes ``${{ secrets.NAME }}`` with a stable NAME.

Which strings are secret is decided by the same rules that mask ``gitsync render``'s
output (`gitsync.render.mask_secrets`): a field is secret when the masker hides it, and
a URL's password when the masker hides that part. ``$secret://`` and ``$env://``
references are not secrets and stay as they are.

A NAME is the item's kind, id and field path in capitals (``SSLS_EXAMPLE_COM_KEY``,
``SECRETS_VAULT_MAIN_TOKEN``): the same item and field always give the same name,
so a second export of the same gateway needs no new secret. Names that would clash,
or run past 96 characters, end in a digest of what they stand for.
"""

from __future__ import annotations

import copy
import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gitsync.kinds import item_id
from gitsync.log import MASK
from gitsync.render import mask_secrets
from gitsync.render.sourcemap import string_leaves

MAX_NAME = 96
_NOT_NAME = re.compile(r"[^A-Z0-9]+")


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


def _pieces(value: str, shown: str) -> list[tuple[bool, str]] | None:
    """`value` split into (is_secret, text) runs, from where the masked `shown` has ``***``."""
    if shown == MASK:
        return [(True, value)]
    parts = shown.split(MASK)
    if not value.startswith(parts[0]):
        return None
    runs: list[tuple[bool, str]] = [(False, parts[0])] if parts[0] else []
    pos = len(parts[0])
    for literal in parts[1:]:
        end = len(value) if literal == "" else value.find(literal, pos + 1)
        if end <= pos:
            return None
        runs.append((True, value[pos:end]))
        if literal:
            runs.append((False, literal))
        pos = end + len(literal)
    return runs if pos == len(value) else None


def _trimmed(runs: list[tuple[bool, str]]) -> list[tuple[bool, str]]:
    """Whitespace around a secret stays literal text: a secret read from a file is stripped (a PEM
    key's last newline would otherwise be lost), so only the part between is the secret."""
    out: list[tuple[bool, str]] = []
    for is_secret, text in runs:
        core = text.strip()
        if not is_secret or not core:
            out.append((False, text))
            continue
        start = text.index(core)
        out += [(False, text[:start]), (True, core), (False, text[start + len(core):])]
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


def extract_secrets(payload: Mapping[str, Sequence[Any]], escape: Any) -> tuple[dict[str, list[Any]],
                                                                                dict[str, str]]:
    """The payload with every secret string replaced, and ``{NAME: value}``.

    `escape` turns literal text into repo syntax (``${{`` → ``$${{``); the strings this
    puts in are `Placeholder`s, already escaped.
    """
    masked = mask_secrets({k: list(v) for k, v in payload.items()}, ())
    out = {kind: copy.deepcopy(list(items)) for kind, items in payload.items()}
    found: list[tuple[SecretSpot, list[tuple[bool, str]]]] = []
    for kind, items in payload.items():
        for index, item in enumerate(items):
            ident = item_id(kind, item) or f"#{index}"
            shown_leaves = string_leaves(masked[kind][index])
            for (path, value), (_, shown) in zip(string_leaves(item), shown_leaves, strict=False):
                if value == shown:
                    continue
                runs = _trimmed(_pieces(value, shown) or [(True, value)])
                secrets = [text for is_secret, text in runs if is_secret]
                if not secrets:
                    continue
                for nth, text in enumerate(secrets):
                    found.append((SecretSpot(kind, index, ident, path, nth, text), runs))
    several = {(s.index, s.kind, s.path) for s, _ in found if s.nth > 0}
    names = _names([s for s, _ in found], several)
    values: dict[str, str] = {}
    done: set[tuple[str, int, tuple]] = set()
    for spot, runs in found:
        key = (spot.kind, spot.index, spot.path)
        if key in done:
            continue
        done.add(key)
        nth = 0
        text = ""
        for is_secret, run in runs:
            if not is_secret:
                text += escape(run)
                continue
            origin = SecretSpot(spot.kind, spot.index, spot.ident, spot.path, nth, run).origin
            values[names[origin]] = run
            text += "${{ secrets." + names[origin] + " }}"
            nth += 1
        _set(out[spot.kind][spot.index], spot.path, Placeholder(text))
    return out, dict(sorted(values.items()))
