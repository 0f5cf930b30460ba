"""What a render takes from the settings and the process's environment: ``${{ vars.NAME }}`` (the vars
file, the settings, ``GITSYNC_VAR_*``), ``${{ secrets.NAME }}`` (the secrets directory,
``GITSYNC_SECRET_*``), the age identities that decrypt SOPS files, and the limits
(`options_from_settings` → `gitsync.render.options.RenderOptions`). Reads files; render's core
takes the options it makes and reads nothing.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from gitsync.log import register_secret
from gitsync.render.healthchecks import CheckLimits
from gitsync.render.options import RenderOptions
from gitsync.render.secrets import SecretRules
from gitsync.render.sops import SopsError, decryptor, identities_from_settings
from gitsync.settings import OWN_SECRET_NAMES, SPEC_BY_NAME, Settings, SettingsError, _convert

#: Names usable in ``${{ vars.NAME }}`` / ``${{ secrets.NAME }}`` (also keeps secret files inside the dir).
NAME_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")  # \Z: `$` also matches before a final newline
SECRET_ENV_PREFIX = "GITSYNC_SECRET_"


class SecretsLookup:
    """``${{ secrets.NAME }}``: the file NAME in the secrets directory, then ``GITSYNC_SECRET_NAME``.

    Scoped: a name of gitsync's own credentials (`OWN_SECRET_NAMES`: ``admin_key``, ``age_key``,
    ``git_token``, …) is never read, nor any file gitsync reads for itself (`refused_files`, compared
    as files: a link or another name for one is refused too), whatever directory it is in. A source of
    several (`source`) reads its own subdirectory ``<directory>/<source>/``; the directory itself and
    ``GITSYNC_SECRET_*`` only for the names the settings share with it (`shared`).

    A value is read only when a config file asks for it, and registered with the log
    redactor at once.
    """

    def __init__(self, directory: Path | None, env: Mapping[str, str], *, refused_files: Iterable[Path] = (),
                 source: str | None = None, shared: Iterable[str] = ()) -> None:
        self.directory = directory
        self.env = {k[len(SECRET_ENV_PREFIX):]: v for k, v in env.items() if k.startswith(SECRET_ENV_PREFIX)}
        self.source = source
        self.shared = frozenset(shared)
        self.refused = {key for path in refused_files if (key := _file_key(path)) is not None}

    def __call__(self, name: str) -> str | None:
        if not NAME_PATTERN.match(name):
            return None
        if name.lower() in OWN_SECRET_NAMES:
            raise SettingsError(f"secrets.{name} names one of gitsync's own credentials, which config can "
                                "never read (give the value another name in the secrets directory)")
        common = self.source is None or name in self.shared
        places = [] if self.directory is None else (
            [self.directory / name] if self.source is None else
            [self.directory / self.source / name, *([self.directory / name] if common else [])])
        value = next((found for path in places if (found := self._read(path)) is not None), None)
        if value is None and common and name in self.env:
            value = self.env[name]
            reason = not_utf8(value)
            if reason:
                raise SettingsError(f"{SECRET_ENV_PREFIX}{name}: cannot read the secret: {reason}")
        register_secret(value)
        return value

    def _read(self, path: Path) -> str | None:
        key = _file_key(path)
        if key is None:
            return None
        if key in self.refused:
            raise SettingsError(f"{path}: a file gitsync reads for itself (a credential, a *_file "
                                "setting's); config can never read it")
        try:
            return path.read_text(encoding="utf-8").strip()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None
        except (OSError, UnicodeDecodeError) as exc:
            raise SettingsError(f"{path}: cannot read the secret: {exc}") from None


def _file_key(path: Path) -> tuple[int, int] | None:
    """The file `path` is (device, inode), links followed; None when there is none."""
    try:
        found = path.stat()
    except OSError:
        return None
    return (found.st_dev, found.st_ino)


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
        secret_lookup=SecretsLookup(settings.secrets_dir, env, refused_files=settings.credential_files,
                                    source=settings.source_name, shared=settings.shared_secrets),
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


__all__ = ["SecretsLookup", "options_from_settings", "read_vars_file"]
