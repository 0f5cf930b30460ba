"""The command line: argparse over the settings table, one subcommand per stage of work.

Each subcommand names the function that carries it out (``module:function``);
the function takes the resolved `Settings` and the parsed arguments and returns
the exit status. Settings errors and usage errors exit 2.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gitsync import __version__
from gitsync import log as gslog
from gitsync.settings import SPECS, Settings, SettingsError, load


@dataclass(frozen=True)
class Command:
    name: str
    help: str
    target: str  # "module:function"
    groups: tuple[str, ...]
    require: tuple[str, ...] = ()
    arguments: str = ""  # "module:function" adding the command's own arguments to its parser
    #: Everything it opens is closed when it returns (threads joined, files and locks released): its
    #: process may end without freeing its objects one by one (`gitsync.__main__.run`).
    closes_all: bool = False


COMMANDS: tuple[Command, ...] = (
    Command("render", "print the rendered payload as JSON (secret values masked unless asked)",
            "gitsync.cli.commands:render", ("source", "state"), closes_all=True),
    Command("validate", "check a config repo; each error as file:line:col: kind[id].field: message",
            "gitsync.cli.commands:validate", ("source", "state", "unmanaged"),
            arguments="gitsync.feedback.review:format_arguments", closes_all=True),
    Command("diff", "show per kind and item what a sync would change (exit 0 none, 1 some, 2 error, 4 the "
            "deletion guard would hold the commit)",
            "gitsync.cli.commands:diff", ("source", "gateway", "state"), ("gateways", "admin_key"),
            arguments="gitsync.feedback.review:format_arguments", closes_all=True),
    Command("sync", "one sync of the gateways to the repo (exit 0 applied or already live, 1 failed, "
            "3 synced but the write-back failed)",
            "gitsync.cli.commands:sync", ("source", "gateway", "writeback", "state", "feedback"),
            ("gateways", "admin_key"),
            closes_all=True),
    Command("publish", "render and validate a commit once, sign it and push it as an artifact to an OCI "
            "registry or a git ref (exit 0 published, 1 the commit has problems, 2 error)",
            "gitsync.artifact.publish:publish_command", ("source", "state"), ("repo",),
            "gitsync.artifact.publish:arguments", closes_all=True),
    Command("run", "the daemon: poll, webhook, drift watch, health and metrics",
            "gitsync.cli.commands:run", ("source", "gateway", "daemon", "writeback", "feedback"),
            ("gateways", "admin_key")),
    Command("status", "this agent's last result; --fleet: every agent's, from the status refs",
            "gitsync.cli.commands:status", ("state", "source", "writeback", "feedback")),
    Command("pr-comment", "put a validate/diff report on the pull request as its one gitsync comment "
            "(created once, then updated)", "gitsync.feedback.review:pr_comment_command", ("feedback",), (),
            "gitsync.feedback.review:pr_comment_arguments", closes_all=True),
    Command("demo", "the whole loop on the embedded sample repo, narrated",
            "gitsync.cli.demo:run_demo", ()),
    Command("export", "write a live gateway's configuration as a config repo, secrets kept out, round trip "
            "proven", "gitsync.adopt.export:export_command", ("gateway", "secret_fields"), ("gateways",),
            "gitsync.adopt.arguments:export"),
    Command("import", "convert ADC declarative files, a file-driven apisix.yaml or OpenAPI specs into a "
            "config repo",
            "gitsync.adopt.importing:import_command", ("connect", "secret_fields"), (),
            "gitsync.adopt.arguments:import_"),
    Command("init", "scaffold a config repo: examples, README, pre-commit, CI for GitHub and GitLab",
            "gitsync.adopt.init:init_command", (), (), "gitsync.adopt.arguments:init"),
    Command("schema", "write JSON Schema files of the repo format for editors (yaml-language-server)",
            "gitsync.adopt.schema_export:schema_command", (), (), "gitsync.adopt.arguments:schema"),
    Command("completion", "print a shell completion script (bash, zsh, fish)",
            "gitsync.cli.completion:completion_command", (), (), "gitsync.adopt.arguments:completion"),
)


def _add_setting_flags(parser: argparse.ArgumentParser, groups: Sequence[str]) -> None:
    for spec in SPECS:
        if not set(spec.groups) & set(groups) or spec.type == "table" or "global" in spec.groups:
            continue
        if spec.secret:
            parser.add_argument(spec.option + "-file", dest=spec.name + "_file", metavar="FILE",
                                default=None, help=f"file holding: {spec.help}")
            continue
        kwargs: dict = {"dest": spec.name, "default": None, "help": spec.help}
        if spec.type == "bool":
            kwargs["action"] = argparse.BooleanOptionalAction
        elif spec.type == "list":
            kwargs["action"] = "append"
            kwargs["metavar"] = spec.metavar or "VALUE"
        elif spec.type == "enum":
            kwargs["choices"] = spec.choices
        else:
            kwargs["metavar"] = spec.metavar or spec.type.upper()
        parser.add_argument(spec.option, **kwargs)
        if spec.name == "writeback":
            parser.add_argument("--no-writeback", dest="writeback", action="store_const", const="off",
                                help="no status commits or notes (same as --writeback off)")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole command line; with `only`, a command's flags for that command alone (every command
    is still listed): the flags of all commands are most of a parser's making, in every process."""
    parser = argparse.ArgumentParser(
        prog="gitsync",
        description="GitOps pull agent for Apache APISIX gateways in API-driven standalone mode.",
    )
    parser.add_argument("--version", action="version", version=f"gitsync {__version__}")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", metavar="FILE", default=None,
                        help="settings file (default /etc/gitsync/gitsync.toml)")
    common.add_argument("-v", "--verbose", action="count", default=None, help="more log detail (-vv: trace)")
    common.add_argument("--log-json", action="store_true", default=None, help="one JSON object per log line")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in COMMANDS:
        p = sub.add_parser(command.name, help=command.help, description=command.help, parents=[common])
        p.set_defaults(_command=command)
        if only is not None and command.name != only:
            continue
        _add_setting_flags(p, command.groups)
        if command.arguments:
            module_name, func_name = command.arguments.split(":")
            getattr(importlib.import_module(module_name), func_name)(p)
        if command.name in ("render", "validate"):  # not diff: the gateway's diff is of every source
            p.add_argument("--source", dest="only_source", metavar="NAME", default=None,
                           help="with [[sources]]: that source alone, from --dir or its repo (a team's CI): "
                                "references into items other sources share are theirs, others refused")
        if command.name == "render":
            p.add_argument("--show-secrets", action="store_true", help="print secret values in clear")
            p.add_argument("--explain", nargs=2, metavar=("KIND", "ID"), default=None,
                           help="instead of the payload: each field of one item and the file:line it came "
                                "from (the base item's or an overlay patch's)")
        if command.name in ("diff",):
            p.add_argument("--show-secrets", action="store_true", help="print secret values in clear")
        if command.name == "sync":
            p.add_argument("--once", action="store_true", help="one sync, then exit (the only mode of sync)")
            p.add_argument("--status", action="store_true",
                           help="write this agent's status ref (refs/gitsync/status/<agent>), as the daemon "
                                "does; without it, only an agent named with agent_name writes one")
        if command.name == "status":
            p.add_argument("--fleet", action="store_true", help="every agent's status from the status refs")
            p.add_argument("--publish", action="store_true",
                           help="with --fleet: post each group's commit status on the forge (forge_token)")
        if command.name == "demo":
            p.add_argument("--keep-running", action="store_true", help="stay up after the last step")
            p.add_argument("--json", action="store_true",
                           help="end with one line DEMO-SUMMARY {json}: what each step saw (for scripts)")
            p.add_argument("--workdir", metavar="DIR", default=None,
                           help="an empty directory for the demo's remote, state and keys, kept afterwards "
                                "(default: a temporary directory, removed at the end)")
    return parser


_NAMES = frozenset(command.name for command in COMMANDS)

#: What one-shot commands leave to the end of gitsync's own process (None: not in it, keep nothing).
_left_to_exit: list[Any] | None = None


def ending_process() -> None:
    """Called by gitsync's own process (`gitsync.__main__.run`), which ends with `os._exit` after a
    one-shot command: what the command leaves (`leave_to_exit`) is then freed by the operating system
    at once."""
    global _left_to_exit
    _left_to_exit = []


def leave_to_exit(*objects: Any) -> None:
    """Keep `objects` alive until gitsync's own process ends, rather than free them one by one as the
    command returns: after a sync of a large config its agent holds hundreds of thousands of objects,
    and freeing them is a measurable part of a ``sync --once``. In any other program, nothing is kept."""
    if _left_to_exit is not None:
        _left_to_exit.extend(objects)


def _flags(args: argparse.Namespace) -> dict:
    return {k: v for k, v in vars(args).items()
            if not k.startswith("_") and k != "reload_settings" and v is not None}


def main(argv: Sequence[str] | None = None) -> int:
    return dispatch(argv)[0]


def dispatch(argv: Sequence[str] | None = None) -> tuple[int, Command | None]:
    """Run the command `argv` names: its exit status, and the command (None: it did not start)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(only=argv[0] if argv and argv[0] in _NAMES else None)
    args = parser.parse_args(argv)
    command: Command = args._command
    gslog.setup(verbose=args.verbose or 0, json_lines=bool(args.log_json))
    gslog.guard_process()
    try:
        settings: Settings = load(_flags(args), config=args.config, require=command.require)
    except SettingsError as exc:
        print(f"gitsync {command.name}: error: {gslog.redact(str(exc))}", file=sys.stderr)
        return 2, None
    if (settings.verbose, settings.log_json) != (args.verbose or 0, bool(args.log_json)):
        gslog.setup(verbose=settings.verbose, json_lines=settings.log_json)  # the settings file's choice
    for notice in settings.notices:
        gslog.logger.warning("{}", notice)
    args.reload_settings = lambda: load(_flags(args), config=args.config, require=command.require)
    module_name, func_name = command.target.split(":")
    func = getattr(importlib.import_module(module_name), func_name)
    global _left_to_exit
    if not command.closes_all and _left_to_exit is not None:
        # gitsync's own process, started without the cyclic collector (`gitsync.__main__.run`): a
        # long-lived command frees what it is done with, and collects cycles; what start-up made lives
        # as long as the process, so no collection need walk it. A library caller's gc is its own.
        _left_to_exit = None
        gc.freeze()
        gc.enable()
    try:
        return int(func(settings, args)), command
    except KeyboardInterrupt:
        return 130, None


if __name__ == "__main__":
    sys.exit(main())
