"""``gitsync import adc FILE…`` and ``gitsync import apisix-yaml FILE``: files into a new config repo.

Nothing is written when a file has a problem (each reported as ``file:line:col:
message``, exit 1); notes (what was left out on purpose, variables to set) are
printed and the import goes on. A literal credential (anything the secret classifier
finds, as ``gitsync export`` does) becomes ``${{ secrets.NAME }}``, its value in
``--secrets-out`` and its NAME in the notes. The written repo is rendered once more before
the command ends, so a problem of the result shows up here and not at the first sync.

``import adc`` writes what one ADC release writes (`adc_releases`) and says which:
the latest release unless ``--adc-version`` says otherwise, or, with ``--gateway``,
the one whose output the live gateway holds (`adc_gateway`), in the gateway's item
order, with what the first sync would still change.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gitsync.adopt import adc_gateway, import_adc, import_apisix_yaml, repo_writer
from gitsync.adopt.adc_releases import DEFAULT, LATEST_RELEASED, UnknownRelease, behaviour_for
from gitsync.adopt.export import usage_problem, write_secrets
from gitsync.adopt.secret_fields import extract_secrets
from gitsync.adopt.sops_writer import RecipientError
from gitsync.log import redact, register_secrets
from gitsync.problems import Problem, ProblemsError
from gitsync.push.admin_api import Gateway, GatewayError, endpoints_from_settings
from gitsync.push.plan import ItemChange
from gitsync.push.summary import ChangeGroup, summarise
from gitsync.render import RenderOptions, render
from gitsync.render.memo import ParseCache
from gitsync.render.secrets import SecretRules
from gitsync.render.sourcemap import field_text
from gitsync.settings import Settings, SettingsError
from gitsync.source.directory import read_directory

#: Lines of the first sync's changes an import with --gateway prints at most.
SHOWN_CHANGES = 20


@dataclass
class _Imported:
    payload: Mapping[str, Any]
    problems: list[Problem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    told: list[str] = field(default_factory=list)  # how the import was made, printed once it is written


class _UsageError(Exception):
    pass


def import_command(settings: Settings, args: argparse.Namespace) -> int:
    """Exit 0 written, 1 the files have problems (nothing written), 2 a usage, gateway or I/O error."""
    try:
        repo_writer.check_target(args.out)
        files = {str(path): path.read_bytes() for path in args.files}
        if args.format == "adc":
            imported = _import_adc(settings, args, files)
        else:
            imported = _import_apisix_yaml(args, files)
    except (repo_writer.WriteError, OSError, _UsageError) as exc:
        print(f"gitsync import: {redact(str(exc))}", file=sys.stderr)
        return 2
    if imported.problems:
        for problem in imported.problems:
            print(problem, file=sys.stderr)
        print(f"gitsync import: {len(imported.problems)} problem(s); nothing written", file=sys.stderr)
        return 1
    extracted = extract_secrets(imported.payload, repo_writer.escape_templates,
                                SecretRules.of(settings.secret_fields))
    register_secrets(extracted.values.values())
    problem = usage_problem(args, args.out, extracted.values, "the files hold")
    if problem:
        print(f"gitsync import: {problem} (a literal credential becomes ${{{{ secrets.NAME }}}})",
              file=sys.stderr)
        return 2
    written = repo_writer.render_files(repo_writer.plan_files(extracted.payload, args.layout))
    try:
        if extracted.values:
            write_secrets(args.secrets_out, extracted.values, args.age_recipient)
        repo_writer.write_tree(args.out, written)
    except (repo_writer.WriteError, RecipientError, OSError) as exc:
        print(f"gitsync import: {redact(str(exc))}", file=sys.stderr)
        return 2
    for line in imported.told:
        print(line)
    notes = imported.notes + extracted.warnings
    if extracted.values:
        notes.append(f"{len(extracted.values)} literal credential(s) became ${{{{ secrets.NAME }}}}, their "
                     f"values in {args.secrets_out}: " + ", ".join(extracted.values))
    for note in notes:
        print(f"note: {note}")
    count = sum(len(items) for items in imported.payload.values())
    print(f"imported {count} item(s) into {len(written)} file(s) under {args.out}")
    try:
        render(read_directory(args.out), RenderOptions(secret_lookup=extracted.values.get), memo=ParseCache())
    except ProblemsError as exc:
        # Variables and secrets are the host's to set; anything else is a problem of the result.
        real = [p for p in exc.problems if not p.message.startswith("undefined ")]
        for problem in real:
            print(f"gitsync import: the written repo does not validate: {problem}", file=sys.stderr)
        if real:
            return 1
    return 0


def _import_apisix_yaml(args: argparse.Namespace, files: dict[str, bytes]) -> _Imported:
    if len(files) != 1:
        raise _UsageError("import apisix-yaml: give one file")
    if getattr(args, "gateways", None):
        raise _UsageError("--gateway is for import adc (an apisix.yaml is its own gateway's state)")
    result = import_apisix_yaml.split(*next(iter(files.items())))
    return _Imported(result.payload, list(result.problems), list(result.notes))


def _import_adc(settings: Settings, args: argparse.Namespace, files: dict[str, bytes]) -> _Imported:
    try:
        version = behaviour_for(args.adc_version) if args.adc_version else None
    except UnknownRelease as exc:
        raise _UsageError(f"--adc-version: {exc}") from None
    given = adc_gateway.Given.of(version, args.managed_by_label, args.no_lint)
    adc = import_adc.read_files(files)
    selector = dict(args.label_selector)
    if getattr(args, "gateways", None):  # only a --gateway of this command line, never the settings'
        live, url = _read_gateway(settings)
        converted, told = _follow_gateway(adc, selector, given, live, url)
    else:
        behaviour = given.behaviour_without_gateway()
        converted = import_adc.convert_files(adc, selector, behaviour)
        told = [_offline_line(behaviour.name, args.adc_version)]
    notes = [str(n) for n in converted.notes]
    if converted.secrets:
        notes.append("ADC's ${NAME} became ${{ secrets.NAME }}: set GITSYNC_SECRET_<NAME> or a file "
                     "<NAME> in the secrets directory for " + ", ".join(sorted(converted.secrets)))
    return _Imported(converted.payload, converted.problems, notes, told)


def _offline_line(name: str, version: str | None) -> str:
    if version:
        return f"wrote what {name} writes (--adc-version {version})"
    return (f"wrote what {name} writes ({LATEST_RELEASED} is the latest release; another ADC: --adc-version "
            f"X.Y, or main for a build after {LATEST_RELEASED}, which stamps managed-by: adc; or --gateway "
            "URL --admin-key-file FILE to follow the gateway it wrote)")


def _read_gateway(settings: Settings) -> tuple[Mapping[str, Any], str]:
    try:
        endpoints = endpoints_from_settings(settings)
    except SettingsError as exc:
        raise _UsageError(str(exc)) from None
    if len(endpoints) != 1:
        raise _UsageError("give exactly one --gateway")
    try:
        with Gateway(endpoints[0]) as gateway:
            return gateway.get_config().body, endpoints[0].display_url
    except GatewayError as exc:
        raise _UsageError(f"cannot read the gateway {endpoints[0].display_url}: {exc}") from None


def _follow_gateway(adc: import_adc.AdcFiles, selector: dict[str, str], given: adc_gateway.Given,
                    live: Mapping[str, Any], url: str) -> tuple[import_adc.Converted, list[str]]:
    """The import as the ADC that wrote `live` made it, in the gateway's order, and what to tell."""
    probe = import_adc.convert_files(adc, selector, DEFAULT)
    followed = adc_gateway.follow(live, probe.payload, given)
    converted = probe if followed.behaviour == DEFAULT else \
        import_adc.convert_files(adc, selector, followed.behaviour)
    converted.payload, moved = adc_gateway.in_live_order(converted.payload, live)
    equal, changes = adc_gateway.compare(converted.payload, live)
    told = [f"following the gateway {url}, as the ADC that wrote it did ({followed.behaviour.name}):"]
    told += [f"  {choice}" for choice in followed.choices]
    told += _order_and_ids(moved, equal, changes)
    told += [f"warning: {warning}" for warning in followed.warnings]
    return converted, told + _first_sync(equal, changes)


def _order_and_ids(moved: list[str], equal: int, changes: list[ItemChange]) -> list[str]:
    on_gateway = equal + sum(1 for c in changes if c.action == "change")
    imported = on_gateway + sum(1 for c in changes if c.action == "add")
    order = (f"the gateway's, which differs from the files' for {', '.join(moved)} (ADC appends what a later "
             "sync adds)" if moved else "the gateway's, the same as the files'")
    return [f"  item order: {order}",
            f"  ids: {on_gateway:,} of the {imported:,} imported items are on the gateway under the same id"]


def _first_sync(equal: int, changes: list[ItemChange]) -> list[str]:
    if not changes:
        return [f"the import equals the gateway ({equal:,} items, modifiedIndex aside): the first sync "
                "changes no item and no version"]
    lines = [f"the first sync would change {len(changes):,} item(s) of the gateway (gitsync diff shows them "
             "once the repo is committed):"]
    for entry in summarise(changes, {}, {})[:SHOWN_CHANGES]:
        lines.append("  " + _change_line(entry))
    return lines


def _change_line(entry: ItemChange | ChangeGroup) -> str:
    """One change without its values (the gateway's may be secrets the repo does not know yet)."""
    mark = {"add": "+", "remove": "-", "prune": "!", "change": "~"}[entry.action]
    where = {"add": "only in the files", "remove": "only on the gateway", "prune": "only on the gateway"}
    if isinstance(entry, ChangeGroup):
        text = entry.describe(values=False) if entry.action == "change" else \
            f"{len(entry.ids):,} {entry.kind} {where[entry.action]}"
        return f"{mark} {text} (e.g. {entry.examples()})"
    fields = ", ".join(field_text(p) or "(whole item)" for p in entry.fields)
    return f"{mark} {entry.kind}[{entry.id}]" + (f": {fields}" if fields else f" {where[entry.action]}")
