"""Settings: one frozen object from the TOML file, ``GITSYNC_*`` variables and flags.

Priority rises file → environment → command line. Every setting is declared once
in `SPECS`; the TOML sections, environment names, flags, validation and
``docs/configuration.md`` all come from that table, so they cannot drift apart.

Secret-bearing settings (admin key, git password/token, webhook secret, age key)
are never read from the TOML file itself: only from a file named by
``<name>_file`` (systemd credentials, docker secrets), from ``GITSYNC_<NAME>``
in the environment (containers), or from ``$CREDENTIALS_DIRECTORY/<name>``.
"""

from __future__ import annotations

import difflib
import os
import re
import socket
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from gitsync.kinds import KINDS
from gitsync.log import MIN_SECRET_LENGTH, register_secret

DEFAULT_CONFIG = Path("/etc/gitsync/gitsync.toml")
DOCKER_SECRETS = Path("/run/secrets")


class SettingsError(Exception):
    """A settings problem; the message names the file, line and key path, or the variable or flag."""


class Secret:
    """A secret string: registered with the log redactor on creation, masked in repr and str."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value
        register_secret(value)

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('***')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)


@dataclass(frozen=True)
class Spec:
    """One setting: its TOML section and key, its type, default, and help."""

    name: str
    section: str
    type: str  # str | int | bool | duration | size | path | list | enum | table
    default: Any
    help: str
    choices: tuple[str, ...] = ()
    secret: bool = False
    groups: tuple[str, ...] = ()  # command-line groups that carry the flag
    flag: str | None = None  # override of the default --name-with-dashes
    metavar: str | None = None

    @property
    def env(self) -> str:
        return "GITSYNC_" + self.name.upper()

    @property
    def option(self) -> str:
        return self.flag or "--" + self.name.replace("_", "-")

    @property
    def key_path(self) -> str:
        return f"{self.section}.{self.name}"


SPECS: tuple[Spec, ...] = (
    # [source]
    Spec("repo", "source", "str", None, "Git URL or local path of the config repo.", groups=("source",),
         metavar="URL_OR_PATH"),
    Spec("ref", "source", "str", "main", "Branch (followed), tag, or commit SHA (pinned) to apply.",
         groups=("source",)),
    Spec("paths", "source", "list", ["."], "Directories of the repo to read, layered in order: a later "
         "path's item replaces an earlier one with the same kind and id.", groups=("source",), flag="--path",
         metavar="P"),
    Spec("dir", "source", "path", None, "A plain directory instead of a git repo (pre-commit hooks, CI).",
         groups=("source",), metavar="PATH"),
    Spec("depth", "source", "int", 0, "Depth of the first fetch into the mirror; 0 fetches the full history.",
         groups=("source",)),
    Spec("allow_rewrite", "source", "bool", True, "Follow a force-pushed branch (logged as a rewrite); when "
         "false, a rewrite fails the sync and the last good commit stays live.", groups=("source",)),
    Spec("verify", "source", "enum", "none", "Commit signature policy: an unsigned or wrongly signed commit "
         "is not applied.", choices=("none", "ssh", "gpg"), groups=("source",)),
    Spec("allowed_signers_file", "source", "path", None, "OpenSSH allowed-signers file for verify = \"ssh\".",
         groups=("source",)),
    Spec("gpg_key_ids", "source", "list", [], "Trusted OpenPGP key ids for verify = \"gpg\".",
         groups=("source",), flag="--gpg-key-id"),
    Spec("gpg_keyring_file", "source", "path", None, "Armored public keys for verify = \"gpg\".",
         groups=("source",)),
    Spec("git_username", "source", "str", None, "User name for HTTP basic auth to the git remote.",
         groups=("source",)),
    Spec("git_password", "source", "str", None, "Password for HTTP basic auth to the git remote.",
         secret=True, groups=("source",)),
    Spec("git_token", "source", "str", None, "Token sent as `Authorization: Bearer` to an HTTP git remote.",
         secret=True, groups=("source",)),
    Spec("ssh_key_file", "source", "path", None, "Private key for ssh:// remotes.", groups=("source",)),
    Spec("ssh_known_hosts_file", "source", "path", None, "known_hosts for ssh:// remotes; host keys are "
         "checked strictly and never prompted for.", groups=("source",)),
    Spec("git_timeout", "source", "duration", 30.0, "Timeout of each git network operation.",
         groups=("source",)),
    # [render]
    Spec("vars", "render", "table", {}, "Values for `${{ vars.NAME }}` (TOML table; also `GITSYNC_VAR_NAME`, "
         "which wins, and `vars_file`, which loses)."),
    Spec("vars_file", "render", "path", None, "A YAML or JSON mapping of values for `${{ vars.NAME }}`.",
         groups=("source",)),
    Spec("secrets_dir", "render", "path", None, "Directory of files, one value each, for "
         "`${{ secrets.NAME }}`; defaults to `$CREDENTIALS_DIRECTORY`, else `/run/secrets` when present.",
         groups=("source",)),
    Spec("age_key", "render", "str", None, "age identity that decrypts SOPS files (also `SOPS_AGE_KEY_FILE` "
         "and `SOPS_AGE_KEY`, as sops reads them).", secret=True, groups=("source",)),
    Spec("max_file_size", "render", "size", 8 * 1024 * 1024, "Largest config file accepted."),
    Spec("max_items", "render", "int", 100_000, "Most items accepted in one payload."),
    Spec("max_payload_size", "render", "size", 9 * 1024 * 1024, "Largest rendered payload accepted "
         "(APISIX keeps its config in a 10 MiB shared dict)."),
    # [gateways]
    Spec("gateways", "gateways", "list", [], "Admin API base URLs of the gateways to keep in step.",
         groups=("gateway",), flag="--gateway", metavar="URL"),
    Spec("admin_key", "gateways", "str", None, "APISIX admin key (`X-API-KEY`).", secret=True,
         groups=("gateway",)),
    Spec("unmanaged", "gateways", "list", [], "Kinds whose live content gitsync keeps as it is "
         "(e.g. `[\"secrets\"]`).", groups=("gateway",), metavar="KIND"),
    Spec("status_urls", "gateways", "list", [], "APISIX status API base URLs (`/status/ready`), one per "
         "gateway, in the same order; empty to skip the readiness check.", groups=("gateway",),
         flag="--status-url", metavar="URL"),
    Spec("gateway_timeout", "gateways", "duration", 10.0, "Timeout of each Admin API request.",
         groups=("gateway",)),
    Spec("push_attempts", "gateways", "int", 5, "Attempts per gateway when a push races another writer or "
         "the gateway is unavailable.", groups=("gateway",)),
    Spec("ca_file", "gateways", "path", None, "CA bundle for https gateways.", groups=("gateway",)),
    Spec("client_cert_file", "gateways", "path", None, "Client certificate for mTLS to the Admin API.",
         groups=("gateway",)),
    Spec("client_key_file", "gateways", "path", None, "Client key for mTLS to the Admin API.",
         groups=("gateway",)),
    Spec("tls_verify", "gateways", "bool", True, "Verify the gateways' TLS certificates.",
         groups=("gateway",)),
    # [agent]
    Spec("interval", "agent", "duration", 30.0, "Poll interval of the git remote.", groups=("daemon",)),
    Spec("jitter", "agent", "duration", 5.0, "Random delay added to each poll, so agents spread out.",
         groups=("daemon",)),
    Spec("drift_interval", "agent", "duration", 10.0, "How often each gateway is checked for drift "
         "(a restart that emptied it, an out-of-band write).", groups=("daemon",)),
    Spec("drift", "agent", "enum", "heal", "On drift: re-apply the last good commit, or only report it.",
         choices=("heal", "report"), groups=("daemon",)),
    Spec("max_backoff", "agent", "duration", 300.0, "Longest wait between retries of a failing remote or "
         "gateway.", groups=("daemon",)),
    Spec("state_dir", "agent", "path", Path("/var/lib/gitsync"), "Mirror, last applied and last good "
         "commits; `$STATE_DIRECTORY` (systemd) when set.", groups=("daemon", "state")),
    Spec("listen", "agent", "str", "127.0.0.1:9480", "Address of /healthz, /readyz, /metrics and the "
         "webhooks.", groups=("daemon",), metavar="HOST:PORT"),
    Spec("webhook_secret", "agent", "str", None, "Shared secret of the webhooks (HMAC-SHA256 or token).",
         secret=True, groups=("daemon",)),
    # [writeback]
    Spec("writeback", "writeback", "enum", "auto", "Status commits and notes: `auto` writes back whenever "
         "the remote can be pushed to.", choices=("auto", "on", "off"), groups=("writeback",)),
    Spec("status_branch", "writeback", "str", "gitsync/status", "Branch holding one status file per agent.",
         groups=("writeback",)),
    Spec("notes_ref", "writeback", "str", "refs/notes/gitsync", "Notes ref for failed commits.",
         groups=("writeback",)),
    Spec("agent_name", "writeback", "str", None, "This agent's name in status files and notes "
         "(default: the host name).", groups=("writeback",)),
    Spec("author", "writeback", "str", "gitsync <gitsync@localhost>", "Author and committer of write-backs.",
         groups=("writeback",)),
    Spec("note_max_bytes", "writeback", "size", 16 * 1024, "Largest note section; longer ones are "
         "summarised.", groups=("writeback",)),
    Spec("notes_retention", "writeback", "duration", 30 * 86400.0, "Notes older than this are pruned.",
         groups=("writeback",)),
    # [log]
    Spec("log_json", "log", "bool", False, "One JSON object per log line (journald, containers).",
         groups=("global",)),
    Spec("verbose", "log", "int", 0, "0 info, 1 debug, 2 trace (`-v`, `-vv`).", groups=("global",)),
)

SPEC_BY_NAME = {s.name: s for s in SPECS}
SECTIONS = tuple(dict.fromkeys(s.section for s in SPECS))


def _hostname() -> str:
    return socket.gethostname().split(".")[0] or "gitsync"


@dataclass(frozen=True)
class Settings:
    """Every setting, resolved and typed. Secrets are `Secret`s, read once at load."""

    repo: str | None = None
    ref: str = "main"
    paths: tuple[str, ...] = (".",)
    dir: Path | None = None
    depth: int = 0
    allow_rewrite: bool = True
    verify: str = "none"
    allowed_signers_file: Path | None = None
    gpg_key_ids: tuple[str, ...] = ()
    gpg_keyring_file: Path | None = None
    git_username: str | None = None
    git_password: Secret | None = None
    git_password_file: Path | None = None
    git_token: Secret | None = None
    git_token_file: Path | None = None
    ssh_key_file: Path | None = None
    ssh_known_hosts_file: Path | None = None
    git_timeout: float = 30.0
    vars: Mapping[str, str] = field(default_factory=dict)
    vars_file: Path | None = None
    secrets_dir: Path | None = None
    age_key: Secret | None = None
    age_key_file: Path | None = None
    max_file_size: int = 8 * 1024 * 1024
    max_items: int = 100_000
    max_payload_size: int = 9 * 1024 * 1024
    gateways: tuple[str, ...] = ()
    admin_key: Secret | None = None
    admin_key_file: Path | None = None
    unmanaged: tuple[str, ...] = ()
    status_urls: tuple[str, ...] = ()
    gateway_timeout: float = 10.0
    push_attempts: int = 5
    ca_file: Path | None = None
    client_cert_file: Path | None = None
    client_key_file: Path | None = None
    tls_verify: bool = True
    interval: float = 30.0
    jitter: float = 5.0
    drift_interval: float = 10.0
    drift: str = "heal"
    max_backoff: float = 300.0
    state_dir: Path = Path("/var/lib/gitsync")
    listen: str = "127.0.0.1:9480"
    webhook_secret: Secret | None = None
    webhook_secret_file: Path | None = None
    writeback: str = "auto"
    status_branch: str = "gitsync/status"
    notes_ref: str = "refs/notes/gitsync"
    agent_name: str = field(default_factory=_hostname)
    author: str = "gitsync <gitsync@localhost>"
    note_max_bytes: int = 16 * 1024
    notes_retention: float = 30 * 86400.0
    log_json: bool = False
    verbose: int = 0
    config_file: Path | None = None  # the TOML file actually read, if any


def _check_table_matches_dataclass() -> None:
    names = {f.name for f in fields(Settings)} - {"config_file"}
    declared = {s.name for s in SPECS} | {s.name + "_file" for s in SPECS if s.secret}
    assert names == declared, f"Settings and SPECS disagree: {sorted(names ^ declared)}"


_check_table_matches_dataclass()

# ---------------------------------------------------------------------------------------------------------
# Conversion

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}
_SIZE = re.compile(r"^\s*(\d+)\s*(B|KiB|MiB|GiB|KB|MB|GB|k|K|M|G)?\s*$")
_SIZE_UNITS = {None: 1, "B": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3, "KB": 1000, "MB": 1000**2,
               "GB": 1000**3, "k": 1024, "K": 1024, "M": 1024**2, "G": 1024**3}
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def parse_duration(value: Any) -> float:
    """``30s``, ``5m``, ``1h``, ``2d``, ``250ms`` or a number of seconds → seconds."""
    if isinstance(value, bool):
        raise ValueError("expected a duration such as 30s or 5m, got a boolean")
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        match = _DURATION.match(str(value))
        if not match:
            raise ValueError(f"expected a duration such as 30s or 5m, got {value!r}")
        seconds = float(match.group(1)) * _DURATION_UNITS[match.group(2)]
    if seconds < 0:
        raise ValueError("a duration cannot be negative")
    return seconds


def parse_size(value: Any) -> int:
    """``512KiB``, ``9MiB`` or a number of bytes → bytes."""
    if isinstance(value, bool):
        raise ValueError("expected a size such as 9MiB, got a boolean")
    if isinstance(value, int):
        return value
    match = _SIZE.match(str(value))
    if not match:
        raise ValueError(f"expected a size such as 512KiB or 9MiB, got {value!r}")
    return int(match.group(1)) * _SIZE_UNITS[match.group(2)]


def _type_name(value: Any) -> str:
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "an array",
            dict: "a table"}.get(type(value), type(value).__name__)


def _convert(spec: Spec, value: Any, from_text: bool) -> Any:
    """Convert a raw value (TOML-typed, or text from env/flags) to the spec's type."""
    kind = spec.type
    if kind == "str":
        if not isinstance(value, str):
            raise ValueError(f"expected a string, got {_type_name(value)}")
        return value
    if kind == "path":
        if not isinstance(value, str):
            raise ValueError(f"expected a path (string), got {_type_name(value)}")
        return Path(value).expanduser()
    if kind == "int":
        if from_text:
            try:
                return int(str(value).strip())
            except ValueError:
                raise ValueError(f"expected an integer, got {value!r}") from None
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"expected an integer, got {_type_name(value)}")
        return value
    if kind == "bool":
        if from_text:
            text = str(value).strip().lower()
            if text in _TRUE:
                return True
            if text in _FALSE:
                return False
            raise ValueError(f"expected true or false, got {value!r}")
        if not isinstance(value, bool):
            raise ValueError(f"expected a boolean, got {_type_name(value)}")
        return value
    if kind == "duration":
        return parse_duration(value)
    if kind == "size":
        return parse_size(value)
    if kind == "enum":
        if value not in spec.choices:
            raise ValueError(f"expected one of {', '.join(spec.choices)}, got {value!r}")
        return value
    if kind == "list":
        if from_text and isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ValueError(f"expected an array of strings, got {_type_name(value)}")
        return tuple(value)
    if kind == "table":
        if not isinstance(value, dict):
            raise ValueError(f"expected a table, got {_type_name(value)}")
        bad = [k for k, v in value.items() if not isinstance(v, str | int | float | bool)]
        if bad:
            raise ValueError(f"values must be strings, numbers or booleans; {bad[0]!r} is not")
        return {k: v if isinstance(v, str) else str(v).lower() if isinstance(v, bool) else str(v)
                for k, v in value.items()}
    raise AssertionError(f"unknown spec type {kind}")


# ---------------------------------------------------------------------------------------------------------
# Layers


@dataclass
class _Raw:
    value: Any
    origin: str  # "FILE:LINE: section.key", "GITSYNC_X", "--flag"
    from_text: bool


def _key_line(text: str, section: str | None, key: str) -> int:
    """The 1-based line of `key` inside `[section]` (0 when not found); tomllib gives no positions."""
    current: str | None = None
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        header = re.match(r"^\[\s*([^\]\s]+)\s*\]", stripped)
        if header:
            current = header.group(1)
            if section is not None and key == "" and current == section:
                return number
            continue
        if current == section and re.match(rf"^\"?{re.escape(key)}\"?\s*=", stripped):
            return number
    return 0


def _suggest(word: str, candidates: Iterable[str]) -> str:
    close = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _read_file_layer(path: Path) -> dict[str, _Raw]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SettingsError(f"{path}: cannot read the settings file: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise SettingsError(f"{path}: the settings file is not UTF-8 text") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        match = re.search(r"\(at line (\d+), column (\d+)\)", message)
        where = f"{path}:{match.group(1)}:{match.group(2)}" if match else str(path)
        message = re.sub(r"\s*\(at line \d+, column \d+\)", "", message)
        raise SettingsError(f"{where}: TOML syntax error: {message}") from None

    layer: dict[str, _Raw] = {}
    by_section = {sec: {s.name: s for s in SPECS if s.section == sec} for sec in SECTIONS}
    all_keys = [s.key_path for s in SPECS] + [s.key_path + "_file" for s in SPECS if s.secret]
    for top, body in data.items():
        if top not in by_section:
            line = _key_line(text, None, top) or _key_line(text, top, "")
            hint = _suggest(top, SECTIONS)
            if not hint and top in SPEC_BY_NAME:
                hint = f" (it belongs in [{SPEC_BY_NAME[top].section}])"
            raise SettingsError(f"{path}:{line}: {top}: unknown key{hint}")
        if not isinstance(body, dict):
            line = _key_line(text, None, top)
            raise SettingsError(f"{path}:{line}: {top}: expected a table [{top}], got {_type_name(body)}")
        for key, value in body.items():
            line = _key_line(text, top, key)
            where = f"{path}:{line}: {top}.{key}"
            spec = by_section[top].get(key)
            if spec is None and key.endswith("_file"):
                base = by_section[top].get(key[: -len("_file")])
                if base is not None and base.secret:
                    layer[base.name + "_file"] = _Raw(value, where, False)
                    continue
            if spec is None:
                raise SettingsError(f"{where}: unknown key{_suggest(f'{top}.{key}', all_keys)}")
            if spec.secret:
                raise SettingsError(
                    f"{where}: secrets are not read from the settings file; put the value in a file and "
                    f"set {spec.key_path}_file = \"/path/to/{spec.name}\" (systemd: LoadCredential="
                    f"{spec.name}:..., docker: /run/secrets/{spec.name}), or pass it as {spec.env} "
                    "in the environment"
                )
            layer[spec.name] = _Raw(value, where, False)
    return layer


def _env_layer(env: Mapping[str, str]) -> dict[str, _Raw]:
    layer: dict[str, _Raw] = {}
    for spec in SPECS:
        if spec.type == "table":
            continue
        if spec.env in env:
            layer[spec.name] = _Raw(env[spec.env], spec.env, True)
        if spec.secret and spec.env + "_FILE" in env:
            layer[spec.name + "_file"] = _Raw(env[spec.env + "_FILE"], spec.env + "_FILE", True)
    known = {s.env for s in SPECS} | {s.env + "_FILE" for s in SPECS if s.secret}
    for name in env:
        if name.startswith("GITSYNC_") and not name.startswith(("GITSYNC_VAR_", "GITSYNC_SECRET_")) \
                and name not in known:
            raise SettingsError(f"{name}: unknown setting{_suggest(name, known)}")
    return layer


def _flag_layer(flags: Mapping[str, Any]) -> dict[str, _Raw]:
    layer: dict[str, _Raw] = {}
    for name, value in flags.items():
        if value is None:
            continue
        if name in SPEC_BY_NAME:
            spec = SPEC_BY_NAME[name]
            if spec.secret:
                raise AssertionError(f"secret {name} cannot be a flag")
            raw = list(value) if isinstance(value, list | tuple) else value
            layer[name] = _Raw(raw, spec.option, not isinstance(raw, bool | list))
        elif name.endswith("_file") and name[: -len("_file")] in SPEC_BY_NAME:
            spec = SPEC_BY_NAME[name[: -len("_file")]]
            layer[name] = _Raw(value, spec.option + "-file", True)
    return layer


def _read_secret_file(path: Path, origin: str) -> str:
    try:
        value = path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise SettingsError(f"{origin}: cannot read {path}: {exc.strerror or exc}") from None
    if not value:
        raise SettingsError(f"{origin}: {path} is empty")
    _refuse_short_secret(value, f"{origin}: {path}")
    return value


def _refuse_short_secret(value: str, where: str) -> None:
    """A secret shorter than the log redactor masks would be printed in clear: refused by name."""
    if len(value) < MIN_SECRET_LENGTH:
        raise SettingsError(f"{where}: the secret is {len(value)} character(s) long; at least "
                            f"{MIN_SECRET_LENGTH} are needed (a shorter one could not be kept out of logs)")


def load(
    flags: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    config: Path | str | None = None,
    require: Iterable[str] = (),
) -> Settings:
    """Build the settings: the TOML file, then ``GITSYNC_*`` variables, then flags.

    `config` None reads `DEFAULT_CONFIG` if it exists; a named file must exist.
    `require` names settings that must end up set (e.g. ``("repo", "gateways")``).
    """
    env = dict(os.environ if env is None else env)
    flags = dict(flags or {})
    if config is None and "GITSYNC_CONFIG" in env:
        config = env["GITSYNC_CONFIG"]
    config_path: Path | None = None
    layers: list[dict[str, _Raw]] = []
    if config is not None:
        config_path = Path(config)
        layers.append(_read_file_layer(config_path))
    elif DEFAULT_CONFIG.is_file():
        config_path = DEFAULT_CONFIG
        layers.append(_read_file_layer(config_path))
    env_for_layer = {k: v for k, v in env.items() if k != "GITSYNC_CONFIG"}
    layers += [_env_layer(env_for_layer), _flag_layer(flags)]

    merged: dict[str, _Raw] = {}
    for layer in layers:
        merged.update(layer)

    values: dict[str, Any] = {}
    for spec in SPECS:
        raw = merged.get(spec.name)
        if spec.secret:
            file_raw = merged.get(spec.name + "_file")
            values.update(_resolve_secret(spec, raw, file_raw, env))
            continue
        if raw is None:
            continue
        try:
            values[spec.name] = _convert(spec, raw.value, raw.from_text)
        except ValueError as exc:
            raise SettingsError(f"{raw.origin}: {exc}") from None

    values["vars"] = {**values.get("vars", {}), **{
        k[len("GITSYNC_VAR_"):]: v for k, v in env.items() if k.startswith("GITSYNC_VAR_")
    }}
    if "state_dir" not in values and env.get("STATE_DIRECTORY"):
        values["state_dir"] = Path(env["STATE_DIRECTORY"].split(":")[0])
    if "secrets_dir" not in values:
        values["secrets_dir"] = next((d for _, d in _credential_dirs(env) if d.is_dir()), None)
    for name in ("gateways", "status_urls"):
        for url in values.get(name, ()):
            problem = _url_problem(url)
            if problem:
                raise SettingsError(f"{merged[name].origin}: {problem}")
    unknown = [k for k in values.get("unmanaged", ()) if k not in KINDS]
    if unknown:
        origin = merged["unmanaged"].origin
        raise SettingsError(f"{origin}: unknown kind {unknown[0]!r}{_suggest(unknown[0], KINDS)}")
    settings = Settings(**values, config_file=config_path)
    missing = [name for name in require if not getattr(settings, name)]
    if missing:
        spec = SPEC_BY_NAME[missing[0]]
        how = f"{spec.option}, {spec.env} or {spec.key_path} in the settings file"
        if spec.secret:
            how = (f"{spec.option}-file, {spec.env}, {spec.env}_FILE or {spec.key_path}_file "
                   "in the settings file")
        raise SettingsError(f"{spec.name} is required: set {how}")
    return settings


def _url_problem(url: str) -> str | None:
    """Why `url` cannot be a gateway's base URL (without echoing a password it may carry)."""
    parts = urlsplit(url)
    shown = url.replace(f":{parts.password}@", ":***@") if parts.password else url
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"{shown!r} is not an http:// or https:// URL"
    try:
        parts.port  # noqa: B018 - urllib checks the port when it is read
    except ValueError:
        return f"{shown!r} has an invalid port"
    return None


def _resolve_secret(
    spec: Spec, raw: _Raw | None, file_raw: _Raw | None, env: Mapping[str, str]
) -> dict[str, Any]:
    """A secret comes from its file setting, its env variable, or $CREDENTIALS_DIRECTORY/<name>."""
    out: dict[str, Any] = {}
    if file_raw is not None and (raw is None or _rank(file_raw) >= _rank(raw)):
        if not isinstance(file_raw.value, str):
            got = _type_name(file_raw.value)
            raise SettingsError(f"{file_raw.origin}: expected a path (string), got {got}")
        path = Path(file_raw.value).expanduser()
        out[spec.name + "_file"] = path
        out[spec.name] = Secret(_read_secret_file(path, file_raw.origin))
    elif raw is not None:
        value = str(raw.value).strip()
        if not value:
            raise SettingsError(f"{raw.origin}: is empty")
        _refuse_short_secret(value, raw.origin)
        out[spec.name] = Secret(value)
    else:
        for where, directory in _credential_dirs(env):
            path = directory / spec.name
            if path.is_file():
                out[spec.name + "_file"] = path
                out[spec.name] = Secret(_read_secret_file(path, where))
                break
    return out


def _credential_dirs(env: Mapping[str, str]) -> list[tuple[str, Path]]:
    """Where secrets are looked up by name: systemd credentials, then docker secrets."""
    dirs = [("$CREDENTIALS_DIRECTORY", Path(env["CREDENTIALS_DIRECTORY"]))] if env.get(
        "CREDENTIALS_DIRECTORY") else []
    return [*dirs, ("/run/secrets", DOCKER_SECRETS)]


def _rank(raw: _Raw) -> int:
    if raw.origin.startswith("--"):
        return 2
    if raw.origin.startswith("GITSYNC_"):
        return 1
    return 0


# ---------------------------------------------------------------------------------------------------------
# Documentation


def _default_text(spec: Spec) -> str:
    if spec.name == "agent_name":
        return "the host name"
    if spec.default is None or spec.default == {} or spec.default == []:
        return "—"
    if spec.type == "duration":
        seconds = float(spec.default)
        for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
            if seconds >= size and seconds % size == 0:
                return f"`{int(seconds // size)}{unit}`"
        return f"`{seconds:g}s`"
    if spec.type == "size":
        size = int(spec.default)
        for unit, factor in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
            if size % factor == 0:
                return f"`{size // factor}{unit}`"
        return f"`{size}`"
    if spec.type == "bool":
        return f"`{str(spec.default).lower()}`"
    if spec.type == "list":
        return "`[" + ", ".join(f'"{v}"' for v in spec.default) + "]`"
    return f"`{spec.default}`"


def render_docs() -> str:
    """The text of ``docs/configuration.md``, generated from `SPECS`."""
    lines = [
        "# Configuration",
        "",
        "<!-- Generated by `python -m gitsync.settings`; do not edit by hand. -->",
        "",
        "gitsync reads, in rising priority: the TOML file (`/etc/gitsync/gitsync.toml`, or `--config FILE`,",
        "or `GITSYNC_CONFIG`), `GITSYNC_*` environment variables, and command-line flags. Durations are",
        "written `250ms`, `30s`, `5m`, `1h`, `2d`; sizes `512KiB`, `9MiB`. Lists in the environment are",
        "comma-separated. A bad file, an unknown key, a wrong type or a missing value stops gitsync with",
        "exit status 2 and a message naming the file, line and key.",
        "",
        "**Secrets** (marked 🔒) are never written in the TOML file: set `<key>_file` to a file holding the",
        "value (systemd `LoadCredential=`, docker secrets), or `GITSYNC_<KEY>` / `GITSYNC_<KEY>_FILE` in the",
        "environment. Without either, `$CREDENTIALS_DIRECTORY/<key>` (systemd) or `/run/secrets/<key>`",
        "(docker) is used when it exists.",
        "",
    ]
    for section in SECTIONS:
        lines += [f"## `[{section}]`", "", "| key | flag | environment | default | meaning |",
                  "|---|---|---|---|---|"]
        for spec in (s for s in SPECS if s.section == section):
            key = f"`{spec.name}_file` 🔒" if spec.secret else f"`{spec.name}`"
            flag = f"`{spec.option}-file`" if spec.secret else (f"`{spec.option}`" if spec.groups else "—")
            envs = f"`{spec.env}`, `{spec.env}_FILE`" if spec.secret else (
                "`GITSYNC_VAR_<NAME>`" if spec.type == "table" else f"`{spec.env}`")
            meaning = spec.help + (f" One of: {', '.join(spec.choices)}." if spec.choices else "")
            lines.append(f"| {key} | {flag} | {envs} | {_default_text(spec)} | {meaning} |")
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    print(render_docs(), end="")
