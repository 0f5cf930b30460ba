"""Substitution: ``${{ vars.NAME }}`` and ``${{ secrets.NAME }}`` in every string scalar.

``$${{`` writes a literal ``${{``. Nothing else that starts with ``$`` is touched:
nginx's ``$var``/``${var}`` and APISIX's ``$secret://…``/``$env://…`` pass through.

An unquoted scalar that is exactly one ``${{ vars.NAME }}`` takes the type YAML
would give the value (``port: ${{ vars.PORT }}`` → ``8080``, a number); quote it
to keep text. Secrets always stay text: a rotated password that happens to be
all digits must not change type.

``${{ number(vars.NAME) }}`` says the type: the value must be a number (as YAML 1.2
reads one: ``8080``, ``2.5``, ``1e3``), or the render refuses it at its line; quoted
or not, the scalar becomes that number. It must be the whole value, and takes a
var only (a number is not a credential; a secret stays text).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gitsync.log import MIN_SECRET_LENGTH, redact, register_secret
from gitsync.render.load import PlainTemplate
from gitsync.render.scalars import plain_value, read, shown

_TOKEN = re.compile(r"\$\$\{\{|\$\{\{(.*?)\}\}|\$\{\{", re.DOTALL)
_EXPRESSION = re.compile(r"^\s*(vars|secrets)\.([A-Za-z_][A-Za-z0-9_]*)\s*$")
_NUMBER = re.compile(r"^\s*number\(\s*(vars|secrets)\.([A-Za-z_][A-Za-z0-9_]*)\s*\)\s*$")

Path = tuple[str | int, ...]


@dataclass
class Substitution:
    """The lookups of one render, with what they produced: used secret values and the problems."""

    vars: Mapping[str, str]
    secret_lookup: Callable[[str], str | None]
    secret_values: set[str] = field(default_factory=set)
    problems: list[tuple[Path, str]] = field(default_factory=list)  # (path in the document, message)
    #: (path in the document, value) of each string a secret went into: its problems must not quote it.
    secret_leaves: list[tuple[Path, str]] = field(default_factory=list)
    _secrets: dict[str, str | None] = field(default_factory=dict)

    def secret(self, name: str) -> str | None:
        """A secret's value, looked up once per render."""
        if name not in self._secrets:
            self._secrets[name] = self.secret_lookup(name)
        return self._secrets[name]

    def expand(self, text: str, path: Path) -> Any:
        """`text` with every expression replaced; problems are recorded against `path`."""
        typed = isinstance(text, PlainTemplate)
        used_secret = False
        numbers: list[int | float] = []

        def replace(match: re.Match[str]) -> str:
            nonlocal used_secret
            token = match.group(0)
            if token == "$${{":
                return "${{"
            if match.group(1) is None:
                self.problems.append((path, "'${{' without a closing '}}' (write '$${{' for a literal)"))
                return token
            number = _NUMBER.match(match.group(1))
            if number:
                found = self.number(token, *number.groups(), whole=match.span() == (0, len(text)), path=path)
                if found is None:
                    return token
                numbers.append(found)
                return token
            expression = _EXPRESSION.match(match.group(1))
            if not expression:
                self.problems.append((path, f"unknown expression {redact(token)}: expected "
                                            "${{ vars.NAME }} or ${{ secrets.NAME }}"))
                return token
            source, name = expression.groups()
            if source == "vars":
                value = self.vars.get(name)
                if value is None:
                    self.problems.append((path, f"undefined variable vars.{name} (set it in [render.vars], "
                                                f"the vars file, or GITSYNC_VAR_{name})"))
                    return token
                return value
            used_secret = True
            try:
                secret = self.secret(name)
            except Exception as exc:  # the lookup is a seam: report whatever it raises, redacted
                self.problems.append((path, f"cannot read secrets.{name}: {redact(str(exc))}"))
                return token
            if secret is None:
                self.problems.append((path, f"undefined secret secrets.{name} (no file {name} in the "
                                            f"secrets directory, no GITSYNC_SECRET_{name})"))
                return token
            if not secret.strip():
                self.problems.append((path, f"secrets.{name} is empty"))
                return token
            if len(secret) < MIN_SECRET_LENGTH:
                self.problems.append((path, f"secrets.{name} is {len(secret)} character(s) long: a secret "
                                            f"needs at least {MIN_SECRET_LENGTH} (a shorter one could not be "
                                            "kept out of logs without masking ordinary words)"))
                return token
            register_secret(secret)
            self.secret_values.add(secret)
            self.secret_leaves.append((path, secret))
            return secret

        result = _TOKEN.sub(replace, text)
        if numbers:
            return numbers[0]
        if typed and not used_secret and result != text:
            return plain_value(result)
        return result

    def number(self, token: str, source: str, name: str, whole: bool, path: Path) -> int | float | None:
        """The value of ``${{ number(vars.NAME) }}`` (`token`) as a number, or None with the problem."""
        if source != "vars":
            self.problems.append((path, f"{token}: number() takes vars.NAME; a secret stays text (write "
                                        f"${{{{ secrets.{name} }}}}, or give the value as vars.{name})"))
            return None
        if not whole:
            self.problems.append((path, f"{token} must be the whole value: it renders a number, which cannot "
                                        "be part of a text"))
            return None
        value = self.vars.get(name)
        if value is None:
            self.problems.append((path, f"undefined variable vars.{name} (set it in [render.vars], the vars "
                                        f"file, or GITSYNC_VAR_{name})"))
            return None
        reading = read(value.strip())
        if reading.error is not None or type(reading.value) not in (int, float):
            self.problems.append((path, f"vars.{name} is {shown(value)}, not a number: {token} needs "
                                        "an integer or a decimal number, as YAML 1.2 reads one (8080, 2.5, "
                                        "1e3)"))
            return None
        return reading.value

    def document(self, data: Any, path: Path = ()) -> Any:
        """A copy of `data` with every string (keys too) expanded; the parse cache's copy is never touched."""
        if isinstance(data, str):
            return self.expand(data, path) if "${{" in data else str(data)
        if isinstance(data, dict):
            out: dict[str, Any] = {}
            for key, value in data.items():
                new_key = key
                if "${{" in key:
                    new_key = self.expand(key, (*path, key))
                    if not isinstance(new_key, str):
                        self.problems.append(((*path, key), "a key is text: number() has no place in it"))
                        new_key = str(key)
                    if new_key in out or (new_key != key and new_key in data):
                        self.problems.append(((*path, key), f"duplicate key {new_key!r} after substitution"))
                out[new_key] = self.document(value, (*path, key))
            return out
        if isinstance(data, list):
            return [self.document(value, (*path, i)) for i, value in enumerate(data)]
        return data
