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
import json
import os
import re
import socket
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import MISSING, dataclass, field, fields, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from gitsync import limits
from gitsync.kinds import KINDS
from gitsync.log import MIN_SECRET_LENGTH, register_secret
from gitsync.names import group_problem, name_problem
from gitsync.notation import (
    parse_duration,
    parse_percent,
    parse_size,
    secret_field_problem,
)
from gitsync.ownership import (
    CODE_PLUGINS,
    EVERY_SOURCE,
    Claim,
    Ownership,
    Share,
    Traffic,
    static_overlap,
    traffic_overlap,
)
from gitsync.urls import display_url

DEFAULT_CONFIG = Path("/etc/gitsync/gitsync.toml")
DOCKER_SECRETS = Path("/run/secrets")
#: Where ``${{ secrets.NAME }}`` values are read from when `secrets_dir` is not set (when it exists): not
#: a directory of gitsync's own credentials (`$CREDENTIALS_DIRECTORY`, `/run/secrets`).
DEFAULT_SECRETS_DIR = Path("/etc/gitsync/secrets")


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
    """One setting: its TOML section and key, its type, default, and help (from `Settings`' fields)."""

    name: str
    section: str
    type: str  # str | int | bool | duration | size | percent | path | list | enum | table | address | sources
    default: Any
    help: str
    choices: tuple[str, ...] = ()
    secret: bool = False
    groups: tuple[str, ...] = ()  # command-line groups that carry the flag
    flag: str | None = None  # override of the default --name-with-dashes
    metavar: str | None = None
    minimum: float | None = None  # durations and integers: the smallest value that makes sense
    must_exist: bool = False  # paths: a file (or directory) that must be there when read

    @property
    def env(self) -> str:
        return "GITSYNC_" + self.name.upper()

    @property
    def option(self) -> str:
        return self.flag or "--" + self.name.replace("_", "-")

    @property
    def key_path(self) -> str:
        return f"{self.section}.{self.name}"


def setting(section: str, kind: str, default: Any, help: str, *, factory: Any = None, **spec: Any) -> Any:
    """A `Settings` field and its `Spec`, declared together: the TOML key, environment variable, flag,
    validation and ``docs/configuration.md`` all come from this one declaration."""
    meta = {"spec": {"section": section, "type": kind, "help": help, **spec}}
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


def _secret_file() -> Any:
    """The `<name>_file` companion of a secret setting: where its value was read from."""
    return field(default=None, metadata={"secret_file": True})


def default_agent_name() -> str:
    """The agent's name when none is given: the host's (a one-shot so named writes no status ref unless
    asked: `gitsync.cli.commands.sync`)."""
    return socket.gethostname().split(".")[0] or "gitsync"


@dataclass(frozen=True)
class SourceSpec:
    """One ``[[sources]]`` table: a repo of its own (any key of ``[source]``, the others taken from
    ``[source]``) and what it owns (`gitsync.ownership`). `origin`: ``FILE:LINE`` of its header."""

    name: str
    values: Mapping[str, Any]
    owns: Ownership
    origin: str = ""


#: A source's name: in its state directory, its statuses and every file:line it reports (`name:file`).
SOURCE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


# Command-line groups: each subcommand carries the flags of its groups (gitsync/cli.py).
SOURCE, GATEWAY, DAEMON, WRITEBACK, FEEDBACK = "source", "gateway", "daemon", "writeback", "feedback"
STATE, GLOBAL = "state", "global"
#: The flags that reach one gateway's Admin API and nothing more (a one-shot read: `import adc --gateway`).
CONNECT = "connect"


@dataclass(frozen=True)
class Settings:
    """Every setting, resolved and typed. Secrets are `Secret`s, read once at load."""

    # [source]
    repo: str | None = setting("source", "str", None, "Git URL or local path of the config repo.",
                               groups=(SOURCE,), metavar="URL_OR_PATH")
    ref: str = setting("source", "str", "main", "Branch (followed), tag, or commit SHA (pinned) to apply.",
                       groups=(SOURCE,))
    paths: tuple[str, ...] = setting(
        "source", "list", (".",), "Directories of the repo to read, layered in order: a later path's item "
        "replaces an earlier one with the same kind and id (or patches it: `$patch: merge`).",
        groups=(SOURCE,), flag="--path", metavar="P")
    dir: Path | None = setting("source", "path", None, "A plain directory instead of a git repo (pre-commit "
                               "hooks, CI).", groups=(SOURCE,), metavar="PATH")
    depth: int = setting("source", "int", 0, "Depth of the first fetch into the mirror; 0 fetches the full "
                         "history.", groups=(SOURCE,), minimum=0)
    allow_rewrite: bool = setting("source", "bool", True, "Follow a force-pushed branch (logged as a "
                                  "rewrite); when false, a rewrite fails the sync and the last good commit "
                                  "stays live.", groups=(SOURCE,))
    verify: str = setting("source", "enum", "none", "Commit signature policy: an unsigned or wrongly signed "
                          "commit is not applied.", choices=("none", "ssh", "gpg"), groups=(SOURCE,))
    allowed_signers_file: Path | None = setting("source", "path", None, "OpenSSH allowed-signers file for "
                                                "verify = \"ssh\".", groups=(SOURCE,), must_exist=True)
    gpg_key_ids: tuple[str, ...] = setting("source", "list", (), "Trusted OpenPGP key ids for "
                                           "verify = \"gpg\".", groups=(SOURCE,), flag="--gpg-key-id")
    gpg_keyring_file: Path | None = setting("source", "path", None, "Armored public keys for "
                                            "verify = \"gpg\".", groups=(SOURCE,), must_exist=True)
    git_username: str | None = setting("source", "str", None, "User name for HTTP basic auth to the git "
                                       "remote.", groups=(SOURCE,))
    git_password: Secret | None = setting("source", "str", None, "Password for HTTP basic auth to the git "
                                          "remote.", secret=True, groups=(SOURCE,))
    git_password_file: Path | None = _secret_file()
    git_token: Secret | None = setting("source", "str", None, "Token sent as `Authorization: Bearer` to an "
                                       "HTTP git remote.", secret=True, groups=(SOURCE,))
    git_token_file: Path | None = _secret_file()
    ssh_key_file: Path | None = setting("source", "path", None, "Private key for ssh:// remotes.",
                                        groups=(SOURCE,), must_exist=True)
    ssh_known_hosts_file: Path | None = setting("source", "path", None, "known_hosts for ssh:// remotes; "
                                                "host keys are checked strictly and never prompted for.",
                                                groups=(SOURCE,), must_exist=True)
    git_timeout: float = setting("source", "duration", 30.0, "Timeout of each git network operation.",
                                 groups=(SOURCE,), minimum=0.1)
    max_object_size: int = setting("source", "size", 32 * 1024 * 1024, "Largest git object a fetch may bring "
                                   "(a file, a tree, a commit), read from its header as the pack arrives, "
                                   "before it is inflated: a commit that holds a larger one is refused "
                                   "(verify), its source alone. At least `max_file_size`.",
                                   groups=(SOURCE,), minimum=1024)
    max_fetch_objects: int = setting("source", "int", 250_000, "Most objects one fetch may bring (a first "
                                     "fetch brings the whole history, unless `depth` is set); more and the "
                                     "commit is refused (verify).", groups=(SOURCE,), minimum=16)
    max_fetch_size: int = setting("source", "size", 1024 * 1024 * 1024, "Most bytes of objects one fetch "
                                  "may bring, each counted at its full size from its header; more and the "
                                  "commit is refused (verify).", groups=(SOURCE,), minimum=1024 * 1024)
    artifact_signers: Path | None = setting("source", "path", None, "With `repo = \"oci://…\"` (an "
                                            "artifact source, docs/fleet.md): an OpenSSH allowed-signers "
                                            "file naming the keys that may publish artifacts; principals "
                                            "`<branch>@<repo>`. Required for an artifact source.",
                                            groups=(SOURCE,), must_exist=True)
    artifact_repo: str | None = setting("source", "str", None, "With an artifact source: the git repo its "
                                        "artifacts must name (credentials stripped); one naming another "
                                        "repo is refused. Required for an artifact source; also where "
                                        "statuses go unless `status_remote` says otherwise.",
                                        groups=(SOURCE,), metavar="URL")
    registry_username: str | None = setting("source", "str", None, "User name for the OCI registry of an "
                                            "artifact source (basic auth, or the token service's).",
                                            groups=(SOURCE,))
    registry_password: Secret | None = setting("source", "str", None, "Password or token for the OCI "
                                               "registry of an artifact source.", secret=True,
                                               groups=(SOURCE,))
    registry_password_file: Path | None = _secret_file()
    max_artifact_size: int = setting("source", "size", 256 * 1024 * 1024, "Largest artifact (and "
                                     "signature) an artifact source reads: a larger one is refused from "
                                     "its manifest, before a byte of it is read.", groups=(SOURCE,),
                                     minimum=1024)
    # [[sources]]
    sources: tuple[SourceSpec, ...] = setting(
        "sources", "sources", (), "Several repos, one payload: each `[[sources]]` table is a repo with "
        "its own `name`, any key of `[source]` (`repo`, `ref`, `paths`, credentials, `verify`, …; a key "
        "left out is taken from `[source]`) and what it `owns`; each source is its own transaction "
        "(docs/sources.md).", factory=tuple)
    # [render]
    vars: Mapping[str, str] = setting("render", "table", None, "Values for `${{ vars.NAME }}` (TOML table; "
                                      "also `GITSYNC_VAR_NAME`, which wins, and `vars_file`, which loses).",
                                      factory=dict)
    vars_file: Path | None = setting("render", "path", None, "A YAML or JSON mapping of values for "
                                     "`${{ vars.NAME }}`.", groups=(SOURCE,), must_exist=True)
    secrets_dir: Path | None = setting("render", "path", None, "Directory of files, one value each, for "
                                       "`${{ secrets.NAME }}`; defaults to `/etc/gitsync/secrets` when "
                                       "present (not `$CREDENTIALS_DIRECTORY` nor `/run/secrets`: gitsync's "
                                       "own credentials are never readable from config, whatever directory "
                                       "they share). With `[[sources]]`, a source reads its own subdirectory "
                                       "`<secrets_dir>/<name>/` only, and the names its `shared_secrets` "
                                       "lists.",
                                       groups=(SOURCE,))
    age_key: Secret | None = setting("render", "str", None, "age identity that decrypts SOPS files (also "
                                     "`SOPS_AGE_KEY_FILE` and `SOPS_AGE_KEY`, as sops reads them).",
                                     secret=True, groups=(SOURCE,))
    age_key_file: Path | None = _secret_file()
    max_file_size: int = setting("render", "size", limits.MAX_FILE_SIZE, "Largest config file accepted.",
                                 minimum=1)
    max_items: int = setting("render", "int", limits.MAX_ITEMS, "Most items accepted in one payload.",
                             minimum=1)
    partial: bool = setting("render", "bool", False, "Partial apply: an item that fails validation, and "
                            "every item that refers to it, is left out of the commit (keeping its last good "
                            "version where there is one) instead of refusing the whole commit; a file that "
                            "does not load still refuses it.", groups=(SOURCE,))
    ambiguous_scalars: str = setting("render", "enum", limits.AMBIGUOUS_SCALARS, "Plain (unquoted) values "
                                     "that YAML 1.1 tools read otherwise than YAML 1.2, which gitsync reads "
                                     "(`yes`, `on`, `0777`, `1_000`, `0b101`, `1:20`, `2024-01-02`, …): "
                                     "`warn` reports each at its file:line and renders the commit, `error` "
                                     "refuses it (docs/repo-format.md, \"How values are read\").",
                                     choices=limits.AMBIGUOUS_SCALARS_CHOICES, groups=(SOURCE,))
    max_payload_size: int = setting("render", "size", limits.MAX_PAYLOAD_SIZE, "Largest rendered payload "
                                    "accepted (APISIX keeps its config in a 10 MiB shared dict).", minimum=1)
    restricted_plugins: tuple[str, ...] = setting(
        "render", "list", (), "With `[[sources]]`: plugins a source may use only when its table's `may_run` "
        "lists them, besides those that run code on the gateway's workers (`serverless-pre-function`, "
        "`serverless-post-function`, `ext-plugin-pre-req`, `ext-plugin-post-req`, `ext-plugin-post-resp`, a "
        "route's `script`), on routes, services, plugin configs, global rules, consumers and groups.")
    secret_fields: tuple[str, ...] = setting(
        "render", "list", (), "Fields holding secrets besides those gitsync knows (APISIX's "
        "`encrypt_fields`, field names, shapes): `PLUGIN.PATH` (`\"my-plugin.conf.token\"`: that plugin's "
        "config wherever it is, and its plugin_metadata) or `KIND.PATH` "
        "(`\"upstreams.discovery_args.token\"`); masked in every output, taken out by export and import. A "
        "config file may add its own "
        "(`secret_fields:`).",
        groups=(SOURCE, "secret_fields"), flag="--secret-field", metavar="PLUGIN.PATH")
    parse_cache: bool = setting("render", "bool", True, "Keep parsed files (in memory and in the state "
                                "dir) and render a commit from the last one where it can: the speed layer. "
                                "`false` parses every file of every commit anew and renders it in full; the "
                                "payload is the same either way (for diagnosis).")
    # [gateways]
    gateways: tuple[str, ...] = setting("gateways", "list", (), "Admin API base URLs of the gateways to keep "
                                        "in step.", groups=(GATEWAY, CONNECT), flag="--gateway",
                                        metavar="URL")
    admin_key: Secret | None = setting("gateways", "str", None, "APISIX admin key (`X-API-KEY`).",
                                       secret=True, groups=(GATEWAY, CONNECT))
    admin_key_file: Path | None = _secret_file()
    unmanaged: tuple[str, ...] = setting("gateways", "list", (), "Kinds whose live content gitsync keeps "
                                         "as it is (e.g. `[\"secrets\"]`).", groups=(GATEWAY, "unmanaged"),
                                         metavar="KIND")
    status_urls: tuple[str, ...] = setting("gateways", "list", (), "APISIX status API base URLs "
                                           "(`/status/ready`), one per gateway, in the same order; empty to "
                                           "skip the readiness check.", groups=(GATEWAY,),
                                           flag="--status-url", metavar="URL")
    proxy_urls: tuple[str, ...] = setting("gateways", "list", (), "Data-plane base URLs (APISIX's proxy "
                                          "port), one per gateway, in the same order: where the repo's "
                                          "health checks run after a push.", groups=(GATEWAY,),
                                          flag="--proxy-url", metavar="URL")
    gateway_timeout: float = setting("gateways", "duration", 10.0, "Deadline of each Admin API request, from "
                                     "connect to the last byte of the answer.", groups=(GATEWAY, CONNECT),
                                     minimum=0.1)
    push_attempts: int = setting("gateways", "int", 5, "Attempts per gateway when a push races another "
                                 "writer or the gateway is unavailable.", groups=(GATEWAY,), minimum=1)
    ca_file: Path | None = setting("gateways", "path", None, "CA bundle for https gateways.",
                                   groups=(GATEWAY, CONNECT), must_exist=True)
    client_cert_file: Path | None = setting("gateways", "path", None, "Client certificate for mTLS to the "
                                            "Admin API.", groups=(GATEWAY, CONNECT), must_exist=True)
    client_key_file: Path | None = setting("gateways", "path", None, "Client key for mTLS to the Admin API.",
                                           groups=(GATEWAY, CONNECT), must_exist=True)
    tls_verify: bool = setting("gateways", "bool", True, "Verify the gateways' TLS certificates.",
                               groups=(GATEWAY, CONNECT))
    # [rollout]
    on_check_failure: str = setting("rollout", "enum", "rollback", "When a health check still fails after "
                                    "its retries: give that gateway the last good commit back and refuse the "
                                    "commit, or only report it.", choices=("rollback", "report"),
                                    groups=(GATEWAY,))
    rollout: str = setting("rollout", "enum", "all", "How a new commit reaches this agent's gateways: all "
                           "at once, or the first gateway first (`canary`), then, once its checks pass and "
                           "`soak` has passed, the others.", choices=("all", "canary"), groups=(GATEWAY,))
    soak: float = setting("rollout", "duration", 60.0, "How long a new commit must run, its checks passed, "
                          "on the canary (rollout = canary) before the other gateways get it, and on "
                          "`after_group`'s agents before this agent applies it.", groups=(GATEWAY,),
                          minimum=0)
    group: str | None = setting("rollout", "str", None, "This agent's group in the fleet (in its status), "
                                "for other agents' `after_group`.", groups=(GATEWAY,))
    after_group: str | None = setting("rollout", "str", None, "Apply a new commit only once `after_count` "
                                      "live agents of this group have run it, checks passed, for `soak`.",
                                      groups=(GATEWAY,))
    after_count: int = setting("rollout", "int", 1, "How many agents of `after_group` must have run a "
                               "commit.", groups=(GATEWAY,), minimum=1)
    max_checks: int = setting("rollout", "int", limits.MAX_CHECKS, "Most health checks a repo may declare; "
                              "a commit with more is refused at validate.", groups=(SOURCE,), minimum=0)
    max_check_time: float = setting("rollout", "duration", limits.MAX_CHECK_TIME, "Longest the health checks "
                                    "may take on one gateway, every attempt and interval counted; a repo "
                                    "whose checks could take longer is refused at validate, and checks still "
                                    "running then fail.", groups=(SOURCE,), minimum=1)
    max_check_body: int = setting("rollout", "size", limits.MAX_CHECK_BODY, "Most of an answer's body a "
                                  "health check reads; a longer body fails the check.", groups=(GATEWAY,),
                                  minimum=1024)
    # [guard]
    guard: bool = setting("guard", "bool", True, "Refuse a commit that would leave a kind empty that holds "
                          "items now, or delete more of a kind than max_delete allows, unless its message "
                          "says `Gitsync-Allow-Delete: KIND` (or `all`).", groups=(GATEWAY,))
    max_delete: float = setting("guard", "percent", 0.25, "Largest share of a kind's live items one commit "
                                "may delete without an allowance (but see max_delete_count).",
                                groups=(GATEWAY,))
    max_delete_count: int = setting("guard", "int", 10, "Deleting up to this many items of a kind is always "
                                    "allowed.", groups=(GATEWAY,), minimum=0)
    max_delete_kinds: Mapping[str, float] = setting("guard", "table", None, "max_delete for some kinds (a "
                                                  "table: `routes = \"50%\"`).", factory=dict)
    allow_delete: tuple[str, ...] = setting("guard", "list", (), "Kinds (or `all`) this run may empty or cut "
                                            "beyond max_delete: for `--dir`, which has no commit message to "
                                            "carry the trailer.", groups=(GATEWAY,), metavar="KIND")
    # [agent]
    interval: float = setting("agent", "duration", 30.0, "Poll interval of the git remote.", groups=(DAEMON,),
                              minimum=0.1)
    jitter: float = setting("agent", "duration", 5.0, "Random delay added to each poll, so agents spread "
                            "out.", groups=(DAEMON,), minimum=0)
    webhook_jitter: float = setting("agent", "duration", 0.0, "Random delay before the sync a webhook asks "
                                    "for, so that a fleet woken by one push spreads its fetches over it "
                                    "(docs/operations.md, \"A fleet\").", groups=(DAEMON,), minimum=0)
    drift_interval: float = setting("agent", "duration", 10.0, "How often each gateway is checked for drift "
                                    "(a restart that emptied it, an out-of-band write); a poll does not "
                                    "check a gateway again within it.", groups=(DAEMON,),
                                    minimum=0.1)
    drift: str = setting("agent", "enum", "heal", "On drift: re-apply the last good commit, or only report "
                         "it.", choices=("heal", "report"), groups=(DAEMON,))
    max_backoff: float = setting("agent", "duration", 300.0, "Longest wait between retries of a failing "
                                 "remote or gateway.", groups=(DAEMON,), minimum=0.1)
    state_dir: Path = setting("agent", "path", Path("/var/lib/gitsync"), "Mirror, last applied and last good "
                              "commits; `$STATE_DIRECTORY` (systemd) when set.", groups=(DAEMON, STATE))
    listen: str = setting("agent", "address", "127.0.0.1:9480", "Address of /healthz, /readyz, /metrics and "
                          "the webhooks. The default answers this host only: a forge's webhook needs a "
                          "reachable address behind a TLS proxy (operations.md, \"Webhooks from a forge\").",
                          groups=(DAEMON,), metavar="HOST:PORT")
    webhook_secret: Secret | None = setting("agent", "str", None, "Shared secret of the webhooks "
                                            "(HMAC-SHA256 or token).", secret=True, groups=(DAEMON,))
    webhook_secret_file: Path | None = _secret_file()
    ui: bool = setting("agent", "bool", False, "Serve the read-only web view (`/`, `/items`, `/fleet`) on "
                       "`listen`. On an address that is not loopback it needs `ui_token_file`.",
                       groups=(DAEMON,))
    ui_token: Secret | None = setting("agent", "str", None, "Token that opens the web view (typed into its "
                                      "login form, or sent as `Authorization: Bearer`); at least 16 "
                                      "characters. Required when `listen` is not loopback.", secret=True,
                                      groups=(DAEMON,))
    ui_token_file: Path | None = _secret_file()
    ui_session_ttl: float = setting("agent", "duration", 12 * 3600.0, "How long a web view login lasts: the "
                                    "session then ends on the agent and its cookie is refused (so do "
                                    "\"Log out\", a new token and a restart).", groups=(DAEMON,), minimum=1)
    ui_secure_cookie: bool = setting("agent", "bool", False, "Mark the web view's session cookie `Secure`, "
                                     "so a browser sends it over HTTPS only: set it when the view is reached "
                                     "through a proxy that terminates TLS.", groups=(DAEMON,))
    commit_url: str | None = setting("agent", "str", None, "Link template of a commit in the web view, with "
                                     "`{sha}` (`https://git.example/org/repo/commit/{sha}`); with `{path}` "
                                     "and `{line}` too, each `file:line` links to that line "
                                     "(`…/blob/{sha}/{path}#L{line}`).", groups=(DAEMON,), metavar="TEMPLATE")
    # [writeback]
    writeback: str = setting("writeback", "enum", "auto", "Status commits and notes: `auto` writes back "
                             "whenever the remote can be pushed to.", choices=("auto", "on", "off"),
                             groups=(WRITEBACK,))
    status_refs: str = setting("writeback", "str", "refs/gitsync/status", "Namespace of the status refs: "
                               "each agent writes only `<status_refs>/<agent_name>`, so a fleet never "
                               "contends; `status --fleet` and `after_group` read them.", groups=(WRITEBACK,),
                               metavar="REF")
    status_remote: str | None = setting("writeback", "str", None, "Where the status refs and the status "
                                        "branch are written and read (a git URL or path, with the config "
                                        "repo's credentials); `{group}` in it is the agent's `group` (a "
                                        "gate's: its `after_group`), so that each group writes to a repo of "
                                        "its own (docs/fleet.md). Default: the config repo (for an "
                                        "artifact source, `artifact_repo`). Notes stay on the config repo.",
                                        groups=(WRITEBACK,), metavar="URL")
    status_branch: str = setting("writeback", "str", "gitsync/status", "Branch showing every agent's status "
                                 "as `agents/<agent>.yaml`, rebuilt from the status refs by an agent whose "
                                 "status changed, for people browsing the forge (best effort); empty: this "
                                 "agent does not write it.", groups=(WRITEBACK,))
    max_status_refs: int = setting("writeback", "int", 1000, "Most status refs read: refs whose name is "
                                   "no agent's are ignored, and past this many the others are named in the "
                                   "log and ignored (the gate reads its own group's agents first).",
                                   groups=(WRITEBACK,), minimum=1)
    status_heartbeat: float = setting("writeback", "duration", 60.0, "The status ref is rewritten (a fresh "
                                      "commit time) at least this often, on the first poll after it is due, "
                                      "so readers tell a live agent from a down one: down after two periods "
                                      "without a write.", groups=(WRITEBACK,), minimum=1)
    signing_key_file: Path | None = setting("writeback", "path", None, "This agent's own SSH private key "
                                            "(OpenSSH format, ed25519 or RSA, unencrypted): every status "
                                            "commit and note it writes is signed with it, as git signs with "
                                            "`gpg.format = ssh`.", groups=(WRITEBACK,), must_exist=True)
    status_signers: Path | None = setting("writeback", "path", None, "An OpenSSH allowed-signers file "
                                          "naming which key may speak for which agent: principals "
                                          "`<agent>@<group>` (docs/security.md). When set, a gate counts "
                                          "only statuses signed by a key allowed for that agent and group; "
                                          "others show as unverified.", groups=(WRITEBACK,), must_exist=True)
    notes_ref: str = setting("writeback", "str", "refs/notes/gitsync", "Notes ref for failed commits.",
                             groups=(WRITEBACK,))
    agent_name: str = setting("writeback", "str", None, "This agent's name in status files and notes "
                              "(default: the host name). A `sync --once` named after the host writes no "
                              "status ref unless run with `--status` (docs/operations.md).",
                              groups=(WRITEBACK,), factory=default_agent_name)
    author: str = setting("writeback", "str", "gitsync <gitsync@localhost>", "Author and committer of "
                          "write-backs.", groups=(WRITEBACK,))
    note_max_bytes: int = setting("writeback", "size", 16 * 1024, "Largest note section; longer ones are "
                                  "summarised.", groups=(WRITEBACK,), minimum=256)
    notes_retention: float = setting("writeback", "duration", 30 * 86400.0, "Notes older than this are "
                                     "pruned.", groups=(WRITEBACK,), minimum=60)
    # [feedback]
    forge: str = setting("feedback", "enum", "auto", "The forge that shows commit statuses and review "
                         "comments; `auto` tells it from the repo URL (github.com, gitlab.com, "
                         "bitbucket.org, a host named gitea, forgejo or codeberg).",
                         choices=("auto", "github", "gitlab", "gitea", "bitbucket"), groups=(FEEDBACK,))
    forge_url: str | None = setting("feedback", "str", None, "The forge's web address (GitHub Enterprise, "
                                    "self-hosted GitLab, Gitea, Forgejo); default: `https://` and the repo "
                                    "URL's host.", groups=(FEEDBACK,), metavar="URL")
    forge_api_url: str | None = setting("feedback", "str", None, "The forge's API base URL; default: from "
                                        "`forge_url` (`https://api.github.com`, `<forge_url>/api/v3` for "
                                        "GitHub Enterprise, `/api/v4` GitLab, `/api/v1` Gitea, "
                                        "`https://api.bitbucket.org/2.0`).", groups=(FEEDBACK,),
                                        metavar="URL")
    forge_allow_http: bool = setting("feedback", "bool", False, "Allow an `http://` `forge_url` or "
                                     "`forge_api_url`: the forge token then crosses the network in clear "
                                     "(a forge on this host, a test).", groups=(FEEDBACK,))
    forge_project: str | None = setting("feedback", "str", None, "The repository on the forge "
                                        "(`owner/repo`, a GitLab `group/sub/project`, a Bitbucket "
                                        "`workspace/slug`); default: the repo URL's path.",
                                        groups=(FEEDBACK,), metavar="PATH")
    forge_token: Secret | None = setting("feedback", "str", None, "Token for the forge's API; commit "
                                         "statuses are posted only when it is set (Bitbucket: an access "
                                         "token, or `user:app-password`).", secret=True, groups=(FEEDBACK,))
    forge_token_file: Path | None = _secret_file()
    forge_status: str = setting("feedback", "enum", "group", "Who posts commit statuses: `group`, one "
                                "status per agent group, its count (`3/5 applied`) read from the status "
                                "refs and posted by one agent of the group; `agent`, one status per agent; "
                                "`off`, none (`gitsync status --fleet --publish` may post them instead).",
                                choices=("group", "agent", "off"), groups=(FEEDBACK,))
    forge_context: str = setting("feedback", "str", "gitsync", "Name of the commit statuses: "
                                 "`<forge_context>/<group>` (`<forge_context>` for agents without a group), "
                                 "`<forge_context>/<agent>` with forge_status = \"agent\".",
                                 groups=(FEEDBACK,))
    ui_url: str | None = setting("feedback", "str", None, "The web view's address as people reach it "
                                 "(`https://gitsync.example/`): commit statuses link to it; without it they "
                                 "link to the agent's file on the status branch.", groups=(FEEDBACK,),
                                 metavar="URL")
    notify_urls: tuple[str, ...] = setting("feedback", "list", (), "URLs that get a signed JSON POST for "
                                           "each event (applied, refused, rolled back, held by the guard, "
                                           "drift healed, a gateway unreachable); its `text` field makes a "
                                           "chat incoming-webhook URL work as it is.", groups=(FEEDBACK,),
                                           flag="--notify-url", metavar="URL")
    notify_secret: Secret | None = setting("feedback", "str", None, "Key of the notifications' signature "
                                           "(`X-Gitsync-Signature-256: sha256=<HMAC-SHA256 of the body>`).",
                                           secret=True, groups=(FEEDBACK,))
    notify_secret_file: Path | None = _secret_file()
    notify_unreachable_after: float = setting("feedback", "duration", 300.0, "A gateway that does not answer "
                                              "for this long is an event.", groups=(FEEDBACK,), minimum=1)
    feedback_timeout: float = setting("feedback", "duration", 10.0, "Deadline of each request to the forge "
                                      "or a notification URL.", groups=(FEEDBACK,), minimum=0.1)
    # [log]
    log_json: bool = setting("log", "bool", False, "One JSON object per log line (journald, containers).",
                             groups=(GLOBAL,))
    verbose: int = setting("log", "int", 0, "0 info, 1 debug, 2 trace (`-v`, `-vv`).", groups=(GLOBAL,),
                           minimum=0)
    config_file: Path | None = None  # the TOML file actually read, if any
    #: Files gitsync reads for itself (every ``*_file`` setting's of the agent and of each source, its
    #: credentials found by name): ``${{ secrets.NAME }}`` never resolves to one of them.
    credential_files: tuple[Path, ...] = ()
    #: With ``[[sources]]``: the source this is the settings of (`source_settings`), and the names of the
    #: agent's own ``${{ secrets }}`` (in `secrets_dir` itself, ``GITSYNC_SECRET_*``) it may read too.
    source_name: str | None = None
    shared_secrets: tuple[str, ...] = ()
    #: Said once at start, as a warning (a setting whose default changed under an install that used it).
    notices: tuple[str, ...] = ()
    #: ``--source NAME`` of render/validate/diff: that ``[[sources]]`` table's files alone (its repo, or
    #: ``--dir``), references into items other sources share taken as theirs (a team's CI; no agent)
    only_source: str | None = None


def _specs() -> tuple[Spec, ...]:
    specs = []
    for f in fields(Settings):
        if "spec" not in f.metadata:
            continue
        default = f.default if f.default is not MISSING else None
        if f.metadata["spec"]["type"] == "table":
            default = {}
        elif f.metadata["spec"]["type"] == "sources":
            default = ()
        specs.append(Spec(name=f.name, default=default, **f.metadata["spec"]))
    names = {f.name for f in fields(Settings)}
    missing = [s.name for s in specs if s.secret and s.name + "_file" not in names]
    assert not missing, f"secret settings without a _file field: {missing}"
    return tuple(specs)


SPECS: tuple[Spec, ...] = _specs()
SPEC_BY_NAME = {s.name: s for s in SPECS}
SECTIONS = tuple(dict.fromkeys(s.section for s in SPECS))

# ---------------------------------------------------------------------------------------------------------
# Conversion

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def _type_name(value: Any) -> str:
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "an array",
            dict: "a table"}.get(type(value), type(value).__name__)


def _convert(spec: Spec, value: Any, from_text: bool) -> Any:
    """Convert a raw value (TOML-typed, or text from env/flags) to the spec's type, and check it."""
    converted = _typed(spec, value, from_text)
    if spec.minimum is not None and isinstance(converted, int | float) and converted < spec.minimum:
        if spec.type == "duration":
            raise ValueError(f"must be at least {spec.minimum:g}s, got {value!r}")
        raise ValueError(f"must be at least {spec.minimum:g}, got {value!r}")
    if spec.must_exist and converted is not None and not converted.exists():
        raise ValueError(f"{converted}: no such file")
    return converted


def parse_address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6; an empty host is 127.0.0.1) → (host, port)."""
    host, sep, port = text.strip().rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"expected HOST:PORT, got {text!r}")
    number = int(port)
    if not 0 < number < 65536:
        raise ValueError(f"port must be 1 to 65535, got {text!r}")
    if host.startswith("[") != host.endswith("]") or (":" in host and not host.startswith("[")):
        raise ValueError(f"expected HOST:PORT (an IPv6 host in brackets: [::1]:9480), got {text!r}")
    return host.strip("[]") or "127.0.0.1", number


def _typed(spec: Spec, value: Any, from_text: bool) -> Any:
    kind = spec.type
    if kind == "percent":
        return parse_percent(value)
    if kind == "address":
        if not isinstance(value, str):
            raise ValueError(f"expected HOST:PORT (a string), got {_type_name(value)}")
        parse_address(value)
        return value.strip()
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
    if kind == "sources":
        return value  # read whole by the file layer (`_read_sources`): lines of each table are needed
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
class _LayerValue:
    value: Any
    origin: str  # "FILE:LINE: section.key", "GITSYNC_X", "--flag"
    from_text: bool


_HEADER = re.compile(r"^\[\s*([^\]]+?)\s*\]")
_ASSIGNMENT = re.compile(r"^([A-Za-z0-9_\-\"'. ]+?)\s*=")


def _dotted(text: str) -> tuple[str, ...]:
    """The parts of a TOML key as written (``a."b".c`` → a, b, c); quotes dropped."""
    return tuple(part.strip().strip("\"'") for part in text.split("."))


def _key_line(text: str, section: str | None, key: str) -> int:
    """The 1-based line where `section.key` is set (or `[section]` starts, for key ""), 0 when not found.

    tomllib gives no positions. A key may be written under its table header (``[source]`` then
    ``repo = …``) or dotted from an outer table (``source.repo = …`` at the top)."""
    wanted = (section, key) if section is not None and key else ((section,) if section else (key,))
    current: tuple[str, ...] = ()
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        header = _HEADER.match(stripped)
        if header:
            current = _dotted(header.group(1))
            if current == wanted[:1] and len(wanted) == 1:
                return number
            continue
        assignment = _ASSIGNMENT.match(stripped)
        if assignment:
            path = current + _dotted(assignment.group(1))
            if path[: len(wanted)] == wanted:
                return number
    return 0


def _suggest(word: str, candidates: Iterable[str]) -> str:
    close = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _read_file_layer(path: Path) -> dict[str, _LayerValue]:
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

    layer: dict[str, _LayerValue] = {}
    by_section = {sec: {s.name: s for s in SPECS if s.section == sec} for sec in SECTIONS}
    all_keys = [s.key_path for s in SPECS] + [s.key_path + "_file" for s in SPECS if s.secret]
    for top, body in data.items():
        if top == "sources" and isinstance(body, list):
            layer[top] = _LayerValue(_read_sources(path, text, body), f"{path}: [[sources]]", False)
            continue
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
                    layer[base.name + "_file"] = _LayerValue(value, where, False)
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
            layer[spec.name] = _LayerValue(value, where, False)
    return layer


# ---------------------------------------------------------------------------------------------------------
# [[sources]]

#: The keys of a ``[[sources]]`` table beside those of ``[source]``.
SOURCE_KEYS = ("name", "owns", "shares", "shared_secrets", "traffic", "may_run")
TRAFFIC_KEYS = ("hosts", "paths", "snis", "ports")
#: Keys of other sections a ``[[sources]]`` table takes: its own SOPS identity.
SOURCE_RENDER_KEYS = ("age_key",)
CLAIM_KEYS = ("kinds", "prefix", "labels")
SHARE_KEYS = ("kinds", "prefix", "ids", "with")


def _array_headers(text: str, name: str) -> list[int]:
    """The 1-based line of each ``[[name]]`` header, in order."""
    pattern = re.compile(r"^\[\[\s*" + re.escape(name) + r"\s*\]\]")
    return [number for number, line in enumerate(text.splitlines(), 1) if pattern.match(line.strip())]


def _line_in_table(text: str, header: int, key: str) -> int:
    """The line where `key` is set in the table whose header is on line `header` (the header's line when
    not found: an inline array of tables, say)."""
    for number, line in enumerate(text.splitlines()[header:], header + 1):
        stripped = line.strip()
        if stripped.startswith("["):
            break
        assignment = _ASSIGNMENT.match(stripped)
        if assignment and _dotted(assignment.group(1))[0] == key:
            return number
    return header


def _read_sources(path: Path, text: str, tables: list[Any]) -> tuple[SourceSpec, ...]:
    """Each ``[[sources]]`` table as a `SourceSpec`, every problem named by file, line and key."""
    headers = _array_headers(text, "sources")
    specs = []
    for number, table in enumerate(tables):
        header = headers[number] if number < len(headers) else _key_line(text, None, "sources")
        where = f"{path}:{header}: sources[{number}]"
        if not isinstance(table, dict):
            raise SettingsError(f"{where}: expected a table ([[sources]]), got {_type_name(table)}")

        def at(key: str, table_header: int = header, index: int = number) -> str:
            return f"{path}:{_line_in_table(text, table_header, key)}: sources[{index}].{key}"

        specs.append(_source_spec(table, where, at))
    return tuple(specs)


def _source_spec(table: Mapping[str, Any], where: str, at: Any) -> SourceSpec:
    """One ``[[sources]]`` table, converted as its ``[source]`` keys are; `at(key)`: where a key is set."""
    name = table.get("name")
    if not isinstance(name, str) or not SOURCE_NAME.match(name):
        raise SettingsError(f"{at('name') if 'name' in table else where}: every source needs a name of 1 to "
                            f"64 letters, digits, '.', '_' or '-', starting with a letter or digit (got "
                            f"{name!r})")
    allowed = {spec.name: spec for spec in SPECS
               if spec.section == "source" or spec.name in SOURCE_RENDER_KEYS}
    values: dict[str, Any] = {}
    for key, raw in table.items():
        if key in SOURCE_KEYS:
            continue
        if key.endswith("_file") and key[: -len("_file")] in allowed and allowed[key[: -len("_file")]].secret:
            spec = allowed[key[: -len("_file")]]
            if not isinstance(raw, str):
                raise SettingsError(f"{at(key)}: expected a path (string), got {_type_name(raw)}")
            values[key] = Path(raw).expanduser()
            values[spec.name] = Secret(_read_secret_file(values[key], at(key)))
            continue
        spec = allowed.get(key)
        if spec is None or spec.name == "dir":
            hint = _suggest(key, [*SOURCE_KEYS, *(n for n in allowed if n != "dir")])
            raise SettingsError(f"{at(key)}: unknown key{hint} (a source takes name, owns and the keys of "
                                "[source])")
        if spec.secret:
            raise SettingsError(f"{at(key)}: secrets are not read from the settings file; set "
                                f"{spec.name}_file = \"/path/to/{spec.name}\"")
        try:
            values[key] = _convert(spec, raw, False)
        except ValueError as exc:
            raise SettingsError(f"{at(key)}: {exc}") from None
    if "owns" not in table:
        raise SettingsError(f"{where}: source {name!r} owns nothing: set owns = [...] (kinds, and within a "
                            "kind an id prefix or labels)")
    shared = table.get("shared_secrets", [])
    if not isinstance(shared, list) or not all(isinstance(n, str) and re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", n)
                                               for n in shared):
        raise SettingsError(f"{at('shared_secrets')}: expected an array of secret names (letters, digits, _)")
    if shared:
        values["shared_secrets"] = tuple(shared)
    claims = _claims(table["owns"], at("owns"))
    shares = _shares(table["shares"], at("shares")) if "shares" in table else ()
    owned = Ownership(claims)
    for share in shares:
        for kind in share.kinds:
            if kind not in owned.kinds():
                raise SettingsError(f"{at('shares')}: source {name!r} shares {kind}, which it does not own "
                                    f"(it owns {', '.join(sorted(owned.kinds()))})")
    traffic = _traffic(table["traffic"], at("traffic")) if "traffic" in table else Traffic()
    may_run = table.get("may_run", [])
    if not isinstance(may_run, list) or not all(isinstance(p, str) and p for p in may_run):
        raise SettingsError(f"{at('may_run')}: expected an array of plugin names")
    return SourceSpec(name, values, Ownership(claims, shares=shares, traffic=traffic,
                                              may_run=frozenset(may_run)), where)


def _traffic(table: Any, where: str) -> Traffic:
    """``traffic = { hosts, paths, snis, ports }``: the requests a source owns."""
    if not isinstance(table, dict) or not table:
        raise SettingsError(f"{where}: expected a table {{ hosts = [...], paths = [...], snis = [...], "
                            "ports = [...] }")
    unknown = [key for key in table if key not in TRAFFIC_KEYS]
    if unknown:
        raise SettingsError(f"{where}: unknown key {unknown[0]!r}{_suggest(unknown[0], TRAFFIC_KEYS)}")
    texts = {}
    for key in ("hosts", "paths", "snis"):
        value = table.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise SettingsError(f"{where}: {key}: expected an array of strings")
        texts[key] = tuple(value)
    bad = [p for p in texts["paths"] if not p.startswith("/")]
    if bad:
        raise SettingsError(f"{where}: paths: {bad[0]!r} is no path prefix (one starts with '/')")
    ports = table.get("ports", [])
    if not isinstance(ports, list) or not all(isinstance(p, int) and not isinstance(p, bool) and 0 < p < 65536
                                              for p in ports):
        raise SettingsError(f"{where}: ports: expected an array of port numbers")
    return Traffic(texts["hosts"], texts["paths"], texts["snis"], tuple(ports))


def _kinds_of(entry: Mapping[str, Any], where: str) -> list[str]:
    """The ``kinds`` of an ``owns`` or ``shares`` table, each one known."""
    kinds = entry.get("kinds")
    kinds = [kinds] if isinstance(kinds, str) else kinds
    if not isinstance(kinds, list) or not kinds or not all(isinstance(k, str) for k in kinds):
        raise SettingsError(f"{where}: kinds: expected a non-empty array of kinds")
    for kind in kinds:
        if kind not in KINDS:
            raise SettingsError(f"{where}: unknown kind {kind!r}{_suggest(kind, KINDS)}")
    return kinds


def _kinds_and_prefix(entry: Any, keys: tuple[str, ...], where: str, what: str
                      ) -> tuple[list[str], str | None]:
    """The ``kinds`` and ``prefix`` of an ``owns`` or ``shares`` table, its other keys among `keys`."""
    if not isinstance(entry, dict):
        raise SettingsError(f"{where}: expected {what}, got {_type_name(entry)}")
    unknown = [key for key in entry if key not in keys]
    if unknown:
        raise SettingsError(f"{where}: unknown key {unknown[0]!r}{_suggest(unknown[0], keys)}")
    prefix = entry.get("prefix")
    if prefix is not None and (not isinstance(prefix, str) or not prefix):
        raise SettingsError(f"{where}: prefix: expected a non-empty string")
    return _kinds_of(entry, where), prefix


def _shares(shares: Any, where: str) -> tuple[Share, ...]:
    """``shares``: tables ``{kinds, prefix or ids, with}``: what other sources may name of this one's."""
    if not isinstance(shares, list):
        raise SettingsError(f"{where}: expected an array of tables "
                            "({ kinds = [...], prefix = \"...\", with = [\"orders\"] })")
    found = []
    for entry in shares:
        kinds, prefix = _kinds_and_prefix(entry, SHARE_KEYS, where, "a table")
        ids = entry.get("ids", [])
        if not isinstance(ids, list) or not all(isinstance(i, str) and i for i in ids):
            raise SettingsError(f"{where}: ids: expected an array of ids")
        if prefix is not None and ids:
            raise SettingsError(f"{where}: a share names a prefix or ids, not both")
        readers = entry.get("with", [EVERY_SOURCE])
        readers = [readers] if isinstance(readers, str) else readers
        if not isinstance(readers, list) or not readers or not all(isinstance(r, str) for r in readers):
            raise SettingsError(f"{where}: with: expected an array of source names, or \"*\" (every source)")
        found.append(Share(tuple(kinds), tuple(readers), prefix, tuple(ids)))
    return tuple(found)


def _claims(owns: Any, where: str) -> tuple[Claim, ...]:
    """``owns``: a list of kinds (all their items) and tables ``{kinds, prefix, labels}``."""
    if not isinstance(owns, list) or not owns:
        raise SettingsError(f"{where}: expected a non-empty array of kinds and tables "
                            "({ kinds = [...], prefix = \"...\", labels = { key = \"value\" } })")
    claims = []
    for entry in owns:
        if isinstance(entry, str):
            entry = {"kinds": [entry]}
        kinds, prefix = _kinds_and_prefix(entry, CLAIM_KEYS, where, "a kind or a table")
        labels = entry.get("labels", {})
        if not isinstance(labels, dict) or not all(isinstance(v, str) for v in labels.values()):
            raise SettingsError(f"{where}: labels: expected a table of strings "
                                "(labels = { team = \"orders\" })")
        if labels and prefix is None:
            # ids are unique per kind on the gateway: with labels alone, who owns an id would be up to the
            # items, and two sources declaring one id could not be told apart (which one to refuse)
            raise SettingsError(f"{where}: a claim by labels needs an id prefix too ({{ kinds = "
                                f"{json.dumps(kinds)}, prefix = \"<team>-\", labels = {{ ... }} }}): the "
                                "owner of an id must follow from the settings alone")
        claims.append(Claim(tuple(kinds), prefix, tuple(sorted(labels.items()))))
    return tuple(claims)


def _check_sources(values: Mapping[str, Any], merged: Mapping[str, Any]) -> None:
    """The sources together: distinct names, a repo each, no item two may claim (`static_overlap`),
    and no setting that works for one repo only."""
    sources: tuple[SourceSpec, ...] = values.get("sources", ())
    if not sources:
        return
    for name, why in (("repo", "each source names its own repo"),
                      *(() if values.get("only_source") else (("dir", "a source is a git repo (give --source "
                                                                      "NAME to read one source's files from "
                                                                      "--dir)"),)),
                      ("partial", "a left-out item keeps its last good version from its repo's last good "
                                  "commit, which the state of a source does not record"),
                      ("status_remote", "each source's statuses are on its own repo, under the same "
                                        "agent name"),
                      ("after_group", "the group gate compares the commit each agent of a group applied, "
                                      "read from one repo's status refs, and a composition is no repo's "
                                      "commit")):
        if values.get(name):
            raise SettingsError(f"{merged[name].origin}: {name} cannot be set with [[sources]] ({why})")
    if values.get("forge_token") is not None and values.get("forge_status", "group") != "off":
        where = merged.get("forge_token") or merged.get("forge_token_file")
        origin = where.origin if where else "forge_token"
        raise SettingsError(f"{origin}: commit statuses on the forge cannot be posted with [[sources]] (a "
                            "status is posted on the commit the gateways run, and a composition of several "
                            "repos is no repo's commit; each source's status is on its own status ref): "
                            "unset forge_token or set forge_status = \"off\"")
    seen: dict[str, SourceSpec] = {}
    for spec in sources:
        if spec.name in seen:
            raise SettingsError(f"{spec.origin}: a second source named {spec.name!r} "
                                f"(also {seen[spec.name].origin})")
        seen[spec.name] = spec
        if not spec.values.get("repo"):
            raise SettingsError(f"{spec.origin}: source {spec.name!r} has no repo")
        for share in spec.owns.shares:
            names = {other.name for other in sources}
            unknown = [r for r in share.readers if r != EVERY_SOURCE and r not in names]
            if unknown:
                raise SettingsError(f"{spec.origin}: source {spec.name!r} shares with {unknown[0]!r}, "
                                    "which is no source")
        unmanaged = spec.owns.kinds() & set(values.get("unmanaged", ()))
        if unmanaged:
            raise SettingsError(f"{spec.origin}: source {spec.name!r} owns {sorted(unmanaged)[0]}, which "
                                "unmanaged leaves as it is live")
    pairs = [(one, other) for index, one in enumerate(sources) for other in sources[index + 1:]]
    for one, other in pairs:
        why = next((why for a in one.owns.claims for b in other.owns.claims if (why := static_overlap(a, b))),
                   None)
        traffic = traffic_overlap(one.owns.traffic, other.owns.traffic)
        if traffic:
            raise SettingsError(f"{other.origin}: sources {one.name!r} and {other.name!r} both own traffic: "
                                f"{traffic} (also {one.origin}); give each its own hosts, paths, SNIs or "
                                "ports")
        if why:
            raise SettingsError(f"{other.origin}: sources {one.name!r} and {other.name!r} may both claim "
                                f"one item: {why} (also {one.origin}); tell them apart by id prefixes "
                                "that do not start one another, or by one label with different values")


@dataclass(frozen=True)
class RepoSettings:
    """One config repo of an agent: its name (None for the one repo of ``[source]``), its own settings
    (a repo of its own, `source_settings`) and what it owns."""

    name: str | None
    settings: Settings
    owns: Ownership


def config_repo(settings: Settings) -> str | None:
    """The git repo the config is written in: the repo, or an artifact source's `artifact_repo` (the
    forge shows its commits' statuses there)."""
    return settings.artifact_repo if is_artifact_source(settings.repo) else settings.repo


def status_settings(settings: Settings) -> Settings:
    """The settings whose repo is the config repo write-back knows: the repo, or an artifact source's
    `artifact_repo` (None without it: no write-back). Notes go there; status refs and the status
    branch go to `status_remote` when set (`gitsync.writeback.remote.status_remote`, which makes a
    ``{group}`` in it one repo per group), else there too."""
    if is_artifact_source(settings.repo):
        return replace(settings, repo=config_repo(settings))
    return settings


def repos_of(settings: Settings) -> tuple[RepoSettings, ...]:
    """The config repos the settings name: one per ``[[sources]]`` table, or the one repo of ``[source]``
    (unnamed, owning every item): a composition of one. The one place that tells the two apart."""
    if settings.only_source is not None:
        spec = next(spec for spec in settings.sources if spec.name == settings.only_source)
        own = source_settings(settings, spec)
        alone = replace(own, dir=settings.dir, repo=None if settings.dir else own.repo)
        return (RepoSettings(spec.name, alone, spec.owns),)
    if settings.sources:
        return tuple(RepoSettings(spec.name, source_settings(settings, spec), spec.owns)
                     for spec in settings.sources)
    return (RepoSettings(None, settings, Ownership(everything=True)),)


def source_settings(settings: Settings, spec: SourceSpec) -> Settings:
    """The settings of one source as a repo of its own: its keys over ``[source]``'s, its own state
    directory (mirror, parse cache, write-back) under the agent's."""
    return replace(settings, **{**spec.values, "sources": (), "dir": None, "source_name": spec.name,
                                "state_dir": settings.state_dir / "sources" / spec.name})


def _env_layer(env: Mapping[str, str]) -> dict[str, _LayerValue]:
    layer: dict[str, _LayerValue] = {}
    for spec in SPECS:
        if spec.type in ("table", "sources"):
            continue
        if spec.env in env:
            layer[spec.name] = _LayerValue(env[spec.env], spec.env, True)
        if spec.secret and spec.env + "_FILE" in env:
            layer[spec.name + "_file"] = _LayerValue(env[spec.env + "_FILE"], spec.env + "_FILE", True)
    known = {s.env for s in SPECS} | {s.env + "_FILE" for s in SPECS if s.secret}
    for name in env:
        if name.startswith("GITSYNC_") and not name.startswith(("GITSYNC_VAR_", "GITSYNC_SECRET_")) \
                and name not in known:
            raise SettingsError(f"{name}: unknown setting{_suggest(name, known)}")
    return layer


def _flag_layer(flags: Mapping[str, Any]) -> dict[str, _LayerValue]:
    layer: dict[str, _LayerValue] = {}
    for name, value in flags.items():
        if value is None:
            continue
        if name in SPEC_BY_NAME:
            spec = SPEC_BY_NAME[name]
            if spec.secret:
                raise AssertionError(f"secret {name} cannot be a flag")
            raw = list(value) if isinstance(value, list | tuple) else value
            layer[name] = _LayerValue(raw, spec.option, not isinstance(raw, bool | list))
        elif name.endswith("_file") and name[: -len("_file")] in SPEC_BY_NAME:
            spec = SPEC_BY_NAME[name[: -len("_file")]]
            layer[name] = _LayerValue(value, spec.option + "-file", True)
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
    only_source = flags.pop("only_source", None)
    if config is None and "GITSYNC_CONFIG" in env:
        config = env["GITSYNC_CONFIG"]
    config_path: Path | None = None
    layers: list[dict[str, _LayerValue]] = []
    if config is not None:
        config_path = Path(config)
        layers.append(_read_file_layer(config_path))
    elif DEFAULT_CONFIG.is_file():
        config_path = DEFAULT_CONFIG
        layers.append(_read_file_layer(config_path))
    env_for_layer = {k: v for k, v in env.items() if k != "GITSYNC_CONFIG"}
    layers += [_env_layer(env_for_layer), _flag_layer(flags)]

    merged: dict[str, _LayerValue] = {}
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
    notices = []
    if "secrets_dir" not in values:
        values["secrets_dir"] = DEFAULT_SECRETS_DIR if DEFAULT_SECRETS_DIR.is_dir() else None
        left = [d for _, d in _credential_dirs(env) if d.is_dir() and any(
            p.name.lower() not in OWN_SECRET_NAMES for p in _listed(d))]
        if left:
            notices.append(f"secrets_dir is not set: ${{{{ secrets.NAME }}}} no longer reads {left[0]} (the "
                           f"directory of gitsync's own credentials), which holds other files; move the "
                           f"config's secrets to {DEFAULT_SECRETS_DIR}, or set secrets_dir = \"{left[0]}\" "
                           "(gitsync's own credentials stay unreadable from config either way)")
    values["notices"] = tuple(notices)
    for entry in values.get("secret_fields", ()):
        problem = secret_field_problem(entry)
        if problem:
            raise SettingsError(f"{merged['secret_fields'].origin}: {problem}")
    for name in ("gateways", "status_urls", "proxy_urls", "notify_urls", "forge_url", "forge_api_url",
                 "ui_url"):
        urls = values.get(name) or ()
        for url in (urls,) if isinstance(urls, str) else urls:
            problem = _url_problem(url)
            if problem:
                raise SettingsError(f"{merged[name].origin}: {problem}")
    problem = _template_problem(values.get("commit_url"))
    if problem:
        raise SettingsError(f"{merged['commit_url'].origin}: {problem}")
    if "allow_delete" in values:  # kind names in any case, as the commit trailer takes them
        values["allow_delete"] = tuple(kind.lower() for kind in values["allow_delete"])
    for name, extra in (("unmanaged", ()), ("allow_delete", ("all",)), ("max_delete_kinds", ())):
        unknown = [k for k in values.get(name, ()) if k not in (*KINDS, *extra)]
        if unknown:
            origin = merged[name].origin
            raise SettingsError(f"{origin}: unknown kind {unknown[0]!r}{_suggest(unknown[0], KINDS)}")
    try:
        values["max_delete_kinds"] = {kind: parse_percent(share)
                                      for kind, share in values.get("max_delete_kinds", {}).items()}
    except ValueError as exc:
        raise SettingsError(f"{merged['max_delete_kinds'].origin}: {exc}") from None
    _check_names(values, merged)
    if only_source is not None:
        names = [spec.name for spec in values.get("sources", ())]
        if only_source not in names:
            raise SettingsError(f"--source {only_source}: " + (
                f"no [[sources]] table is named so (they are {', '.join(names)})" if names else
                "the settings have no [[sources]] tables (--source picks one of them)"))
        values["only_source"] = only_source
    _check_sources(values, merged)
    _check_limits(values, merged)
    _check_artifact_source(values, merged)
    if values.get("sources"):  # the plugins each source may use only when allowed: the agent's list too
        restricted = CODE_PLUGINS | frozenset(values.get("restricted_plugins", ()))
        values["sources"] = tuple(replace(spec, owns=replace(spec.owns, restricted=restricted))
                                  for spec in values["sources"])
    if values.get("after_group") and values.get("after_group") == values.get("group"):
        raise SettingsError(f"{merged['after_group'].origin}: after_group names this agent's own group "
                            f"{values['group']!r}: its agents would wait for one another forever")
    settings = Settings(**values, config_file=config_path,
                        credential_files=_credential_files(values, config_path, env))
    if settings.sources:  # each source names its repo
        require = [name for name in require if name != "repo"]
    missing = [name for name in require if not getattr(settings, name)]
    if missing:
        spec = SPEC_BY_NAME[missing[0]]
        how = f"{spec.option}, {spec.env} or {spec.key_path} in the settings file"
        if spec.secret:
            how = (f"{spec.option}-file, {spec.env}, {spec.env}_FILE or {spec.key_path}_file "
                   "in the settings file")
        raise SettingsError(f"{spec.name} is required: set {how}")
    return settings


def is_artifact_source(repo: str | None) -> bool:
    """Whether a repo setting names an OCI artifact (``oci://…``) rather than a git repo."""
    return bool(repo) and str(repo).startswith("oci://")


def _check_artifact_source(values: Mapping[str, Any], merged: Mapping[str, Any]) -> None:
    """An artifact source names who may sign it and which repo it must come from."""
    repos = [(values.get("repo"), values, merged.get("repo"))]
    repos += [(spec.values.get("repo"), {**values, **spec.values}, None)
              for spec in values.get("sources", ())]
    for repo, own, where in repos:
        if not is_artifact_source(repo):
            continue
        origin = f"{where.origin}: " if where is not None else ""
        for name in ("artifact_signers", "artifact_repo"):
            if not own.get(name):
                raise SettingsError(f"{origin}repo {repo} is an artifact source: {name} is required "
                                    "(docs/fleet.md)")
        if own.get("verify", "none") != "none":
            raise SettingsError(f"{origin}repo {repo} is an artifact source: verify is git's commit "
                                "signatures; an artifact's signature is checked with artifact_signers")


def _check_limits(values: Mapping[str, Any], merged: Mapping[str, Any]) -> None:
    """A config file a fetch may not bring could never be read: max_object_size covers max_file_size;
    and a forge token goes over `http://` only when allowed."""
    largest, file_size = (values.get(name, SPEC_BY_NAME[name].default) for name in ("max_object_size",
                                                                                     "max_file_size"))
    if largest < file_size:
        name = "max_object_size" if "max_object_size" in merged else "max_file_size"
        raise SettingsError(f"{merged[name].origin}: max_object_size ({largest}) must be at least "
                            f"max_file_size ({file_size}): a config file is one git object")
    if not values.get("forge_allow_http"):
        for name in ("forge_url", "forge_api_url"):
            url = values.get(name)
            if url and urlsplit(url).scheme == "http":
                raise SettingsError(f"{merged[name].origin}: {name} is http://, so the forge token would "
                                    "cross the network in clear: use https://, or set forge_allow_http = "
                                    "true for a forge on this host")


def _check_names(values: Mapping[str, Any], merged: Mapping[str, Any]) -> None:
    """The agent's name must encode into its status ref, and group names match `status_signers`."""
    checks = [("agent_name", name_problem)] + [(name, group_problem) for name in ("group", "after_group")]
    for name, problem_of in checks:
        value = values.get(name)
        problem = problem_of(value) if value is not None else None
        if problem:
            raise SettingsError(f"{merged[name].origin}: {problem}")
    template = values.get("status_remote")
    if template:
        fields = set(re.findall(r"\{([^{}]*)\}", template))
        if fields - {"group"} or template.count("{") != template.count("}"):
            raise SettingsError(f"{merged['status_remote'].origin}: status_remote may hold {{group}} and no "
                                f"other field, not {display_url(template)!r}")
        if fields and not values.get("group") and values.get("writeback", "auto") != "off":
            raise SettingsError(f"{merged['status_remote'].origin}: status_remote holds {{group}}, so this "
                                "agent needs a group to write its status (set group, or writeback = \"off\")")


def _url_problem(url: str) -> str | None:
    """Why `url` cannot be a gateway's base URL (without echoing a password it may carry)."""
    try:
        parts = urlsplit(url)
    except ValueError as exc:  # e.g. an unclosed IPv6 bracket
        return f"{display_url(url)!r} is not a valid URL: {exc}"
    shown = url.replace(f":{parts.password}@", ":***@") if parts.password else url
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"{shown!r} is not an http:// or https:// URL"
    try:
        parts.port  # noqa: B018 - urllib checks the port when it is read
    except ValueError:
        return f"{shown!r} has an invalid port"
    return None


_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")


def _template_problem(template: str | None) -> str | None:
    """Why `template` cannot be a `commit_url`: an http(s) URL with `{sha}` (and `{path}`, `{line}`)."""
    if template is None:
        return None
    names = _PLACEHOLDER.findall(template)
    unknown = [n for n in names if n not in ("sha", "path", "line")]
    if unknown:
        return f"unknown placeholder {{{unknown[0]}}} (use {{sha}}, {{path}} and {{line}})"
    if "sha" not in names:
        return "the template must contain {sha}"
    return _url_problem(template)



def _resolve_secret(
    spec: Spec, raw: _LayerValue | None, file_raw: _LayerValue | None, env: Mapping[str, str]
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


#: The names of gitsync's own credentials (and of every file setting's stem): never a ``${{ secrets }}`` name.
OWN_SECRET_NAMES = frozenset(
    {spec.name for spec in SPECS if spec.secret} |
    {f.name[: -len("_file")] for f in fields(Settings) if f.name.endswith("_file")} |
    {"ssh_key", "signing_key", "client_key", "client_cert", "sops_age_key", "credentials", "age_keys"}) - {
        "config", "vars"}


def _listed(directory: Path) -> list[Path]:
    try:
        return list(directory.iterdir())
    except OSError:
        return []


def _credential_files(values: Mapping[str, Any], config: Path | None, env: Mapping[str, str]
                      ) -> tuple[Path, ...]:
    """Every file gitsync reads for itself: each ``*_file`` setting's (the agent's and each source's), the
    settings file, its credentials by name in the credential directories, sops's key file."""
    found: list[Path] = [config] if config is not None else []
    for table in (values, *(spec.values for spec in values.get("sources", ()))):
        found += [path for name, path in table.items() if name.endswith("_file") and isinstance(path, Path)]
    found += [directory / name for _, directory in _credential_dirs(env) for name in OWN_SECRET_NAMES]
    if env.get("SOPS_AGE_KEY_FILE"):
        found.append(Path(env["SOPS_AGE_KEY_FILE"]))
    return tuple(dict.fromkeys(found))


def _credential_dirs(env: Mapping[str, str]) -> list[tuple[str, Path]]:
    """Where secrets are looked up by name: systemd credentials, then docker secrets."""
    dirs = [("$CREDENTIALS_DIRECTORY", Path(env["CREDENTIALS_DIRECTORY"]))] if env.get(
        "CREDENTIALS_DIRECTORY") else []
    return [*dirs, ("/run/secrets", DOCKER_SECRETS)]


def _rank(raw: _LayerValue) -> int:
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
    if spec.default is None or spec.default in ({}, [], ()):
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
    if spec.type == "percent":
        return f"`{spec.default * 100:g}%`"
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
        if section == "sources":
            lines += _sources_docs()
            continue
        lines += [f"## `[{section}]`", "", "| key | flag | environment | default | meaning |",
                  "|---|---|---|---|---|"]
        for spec in (s for s in SPECS if s.section == section):
            key = f"`{spec.name}_file` 🔒" if spec.secret else f"`{spec.name}`"
            flag = f"`{spec.option}-file`" if spec.secret else (f"`{spec.option}`" if spec.groups else "—")
            envs = f"`{spec.env}`, `{spec.env}_FILE`" if spec.secret else f"`{spec.env}`"
            if spec.type == "table":  # tables come from the file only; vars also from GITSYNC_VAR_<NAME>
                envs = "`GITSYNC_VAR_<NAME>`" if spec.name == "vars" else "—"
            meaning = spec.help + (f" One of: {', '.join(spec.choices)}." if spec.choices else "")
            lines.append(f"| {key} | {flag} | {envs} | {_default_text(spec)} | {meaning} |")
        lines.append("")
    return "\n".join(lines)


def _sources_docs() -> list[str]:
    """The ``[[sources]]`` part of the settings page: its keys, from the ``[source]`` specs."""
    keys = ", ".join(f"`{spec.name}_file`" if spec.secret else f"`{spec.name}`"
                     for spec in SPECS if (spec.section == "source" and spec.name != "dir")
                     or spec.name in SOURCE_RENDER_KEYS)
    return [
        "## `[[sources]]`", "", SPEC_BY_NAME["sources"].help + " File only (no flag or variable).", "",
        "| key | meaning |", "|---|---|",
        "| `name` | The source's name (1 to 64 letters, digits, `.`, `_`, `-`): its state directory "
        "(`<state_dir>/sources/<name>`) and the prefix of every place it reports (`name:file:line`). |",
        "| `owns` | What it may declare: an array of kinds (every item of each) and tables "
        "`{ kinds = [...], prefix = \"orders-\", labels = { team = \"orders\" } }` (the items of those "
        "kinds whose id starts with `prefix` and that carry every one of `labels`; a claim by labels needs a "
        "`prefix` too). Two sources whose claims could hold one id are a settings error: the owner of an id "
        "follows from the settings alone. |",
        "| `shares` | What other sources' items may name of its own (a route's `upstream_id`, a consumer's "
        "`group_id`, a `$secret://` manager, …): tables `{ kinds = [...], prefix = \"platform-\" (or ids = "
        "[...]), with = [\"orders\"] (or \"*\", the default: every source) }`. Nothing else of it may be "
        "named by another source. |",
        "| `shared_secrets` | Names of the agent's own `${{ secrets.NAME }}` values (the files of "
        "`secrets_dir` itself, `GITSYNC_SECRET_NAME`) it may read beside its own directory "
        "`<secrets_dir>/<name>/`. |",
        f"| {keys} | As in `[source]`; a key left out is `[source]`'s. |",
        "",
    ]


if __name__ == "__main__":
    print(render_docs(), end="")
