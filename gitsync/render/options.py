"""Render options: what a render needs besides the files, and how settings turn into them."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from gitsync.log import register_secret
from gitsync.render.healthchecks import CheckLimits
from gitsync.render.secrets import NO_RULES, SecretRules
from gitsync.render.sops import SopsError, decryptor, identities_from_settings
from gitsync.settings import SPEC_BY_NAME, Settings, SettingsError, _convert

#: Names usable in ``${{ vars.NAME }}`` / ``${{ secrets.NAME }}`` (also keeps secret files inside the dir).
NAME_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
SECRET_ENV_PREFIX = "GITSYNC_SECRET_"


def no_secrets(_name: str) -> str | None:
    """The default secret lookup: nothing is defined."""
    return None


@dataclass(frozen=True)
class RenderOptions:
    """Everything `render` needs besides the files; all values already resolved by the caller."""

    paths: tuple[str, ...] = (".",)
    vars: Mapping[str, str] = field(default_factory=dict)
    secret_lookup: Callable[[str], str | None] = no_secrets
    decrypt: Callable[[str, dict], dict] | None = None
    max_file_size: int = SPEC_BY_NAME["max_file_size"].default
    max_items: int = SPEC_BY_NAME["max_items"].default
    max_payload_size: int = SPEC_BY_NAME["max_payload_size"].default
    #: Kinds the agent leaves as they are live: references into them cannot be checked here.
    unmanaged: frozenset[str] = frozenset()
    #: Partial apply: items with problems (and what refers to them) are left out, not the commit.
    partial: bool = False
    #: A plain scalar YAML 1.1 reads otherwise (`gitsync.render.scalars`): "warn" or "error".
    ambiguous_scalars: str = SPEC_BY_NAME["ambiguous_scalars"].default
    #: The bounds of the repo's health checks (their number, their time, the body they read).
    check_limits: CheckLimits = field(default_factory=CheckLimits)
    #: Secret fields the settings declare (`secret_fields`), besides the repo's own.
    secret_rules: SecretRules = NO_RULES


class SecretsLookup:
    """``${{ secrets.NAME }}``: the file NAME in the secrets directory, then ``GITSYNC_SECRET_NAME``.

    A value is read only when a config file asks for it, and registered with the log
    redactor at once.
    """

    def __init__(self, directory: Path | None, env: Mapping[str, str]) -> None:
        self.directory = directory
        self.env = {k[len(SECRET_ENV_PREFIX):]: v for k, v in env.items() if k.startswith(SECRET_ENV_PREFIX)}

    def __call__(self, name: str) -> str | None:
        if not NAME_PATTERN.match(name):
            return None
        value: str | None = None
        if self.directory is not None:
            path = self.directory / name
            try:
                value = path.read_text(encoding="utf-8").strip()
            except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
                value = None
            except (OSError, UnicodeDecodeError) as exc:
                raise SettingsError(f"{path}: cannot read the secret: {exc}") from None
        if value is None and name in self.env:
            value = self.env[name]
            reason = not_utf8(value)
            if reason:
                raise SettingsError(f"{SECRET_ENV_PREFIX}{name}: cannot read the secret: {reason}")
        register_secret(value)
        return value


def not_utf8(text: str) -> str | None:
    """Why an environment value is not UTF-8 text (Python keeps such bytes as lone surrogates), or None."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        try:
            text.encode("utf-8", "surrogateescape").decode("utf-8")
        except UnicodeDecodeError as exc:
            return str(exc)
        return "it holds characters that are not UTF-8"
    return None


def read_vars_file(path: Path) -> dict[str, str]:
    """A YAML or JSON mapping of names to values, for ``${{ vars.NAME }}``."""
    from gitsync.render.load import parse

    try:
        data = path.read_bytes()
    except OSError as exc:
        raise SettingsError(f"{path}: cannot read the vars file: {exc.strerror or exc}") from None
    parsed = parse(data)
    if parsed.issues:
        issue = parsed.issues[0]
        raise SettingsError(f"{path}:{issue.line}:{issue.col}: {issue.message}")
    documents = [d.data for d in parsed.documents if d.data is not None]
    if not documents:
        return {}
    if len(documents) > 1 or not isinstance(documents[0], dict):
        raise SettingsError(f"{path}: the vars file must hold one mapping of NAME: value")
    try:
        values = _convert(SPEC_BY_NAME["vars"], documents[0], False)
    except ValueError as exc:
        raise SettingsError(f"{path}: {exc}") from None
    bad = [name for name in values if not NAME_PATTERN.match(name)]
    if bad:
        raise SettingsError(f"{path}: {bad[0]!r} is not a valid name (letters, digits, _)")
    return values


def options_from_settings(settings: Settings, env: Mapping[str, str] | None = None) -> RenderOptions:
    """Render options from the settings: vars (file < settings < GITSYNC_VAR_*), secrets, limits."""
    env = os.environ if env is None else env
    variables: dict[str, str] = {}
    if settings.vars_file is not None:
        variables.update(read_vars_file(settings.vars_file))
    variables.update(settings.vars)
    for name, value in variables.items():
        reason = not_utf8(value)
        if reason:  # only the environment can carry bytes that are not UTF-8
            raise SettingsError(f"GITSYNC_VAR_{name}: cannot read the variable: {reason}")
    try:
        identities = identities_from_settings(settings, env)
    except SopsError as exc:
        raise SettingsError(str(exc)) from None
    return RenderOptions(
        paths=tuple(settings.paths),
        vars=variables,
        secret_lookup=SecretsLookup(settings.secrets_dir, env),
        decrypt=decryptor(identities),
        max_file_size=settings.max_file_size,
        max_items=settings.max_items,
        max_payload_size=settings.max_payload_size,
        unmanaged=frozenset(settings.unmanaged),
        partial=settings.partial,
        ambiguous_scalars=settings.ambiguous_scalars,
        check_limits=CheckLimits(settings.max_checks, settings.max_check_time, settings.max_check_body),
        secret_rules=SecretRules.of(settings.secret_fields),
    )
