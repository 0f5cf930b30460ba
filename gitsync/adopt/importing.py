"""``gitsync import adc FILE…``, ``gitsync import apisix-yaml FILE`` and ``gitsync import openapi SPEC…``:
files into a new config repo.

All or nothing. Each file is read up to ``max_file_size`` (a larger one, or ``/dev/zero``,
is refused before it is parsed), its items counted against ``max_items`` (ADC files before
they are converted), converted; a literal credential (anything the secret classifier finds,
as ``gitsync export`` does) becomes ``${{ secrets.NAME }}``, its value for ``--secrets-out``
and its NAME in the notes; then the repo's files are made in memory and rendered as
``gitsync validate`` would (the secrets put back), and only a result that validates is
written. A problem anywhere (a wrong type, what cannot be mapped, an item APISIX would
refuse) is reported as ``file:line:col: message`` at its place in the imported files, exit
1, nothing written. Notes (what was left out on purpose, variables to set) are printed and
the import goes on.

``import openapi`` writes what a repo declaring the specs renders (`import_openapi`), and proves it:
the written repo renders the same payload, or nothing is written.

``import adc`` writes what one ADC release writes (`adc_releases`) and says which:
the latest release unless ``--adc-version`` says otherwise, or, with ``--gateway``,
the one whose output the live gateway holds (`adc_gateway`), in the gateway's item
order, with what the first sync would still change.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gitsync.adopt import adc_gateway, import_adc, import_apisix_yaml, import_openapi, repo_writer
from gitsync.adopt.adc_releases import DEFAULT, LATEST_RELEASED, UnknownRelease, behaviour_for
from gitsync.adopt.adc_shapes import too_many_items
from gitsync.adopt.export import usage_problem, write_secrets
from gitsync.adopt.secret_fields import Extracted, extract_secrets
from gitsync.adopt.sops_writer import RecipientError
from gitsync.log import redact, register_secrets
from gitsync.problems import Location, Problem, ProblemsError
from gitsync.push.admin_api import Gateway, GatewayError, endpoints_from_settings
from gitsync.push.plan import ItemChange
from gitsync.push.summary import ChangeGroup, summarise
from gitsync.render import RenderOptions, payload_json, render
from gitsync.render.memo import render_memo
from gitsync.render.secrets import SecretRules
from gitsync.render.sourcemap import field_text
from gitsync.settings import Settings, SettingsError

#: Lines of the first sync's changes an import with --gateway prints at most.
SHOWN_CHANGES = 20


@dataclass
class _Imported:
    """The payload of the input files, what is wrong with them and where each item came from."""

    payload: Mapping[str, Any]
    problems: list[Problem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    told: list[str] = field(default_factory=list)  # how the import was made, printed once it is written
    origins: Mapping[tuple[str, str], Location] = field(default_factory=dict)  # (kind, id) → input place


class _UsageError(Exception):
    pass


class InputTooLarge(Exception):
    """An input file over ``max_file_size``: refused before it is parsed."""


def read_inputs(paths: Sequence[Path], max_file_size: int) -> dict[str, bytes]:
    """Each file's bytes, read no further than `max_file_size` + 1 bytes (a device or a pipe that never
    ends is refused, not read to the end)."""
    files = {}
    for path in paths:
        with path.open("rb") as handle:
            data = handle.read(max_file_size + 1)
        if len(data) > max_file_size:
            raise InputTooLarge(f"{path}: larger than max_file_size ({max_file_size} bytes); not read "
                                "(raise max_file_size in the settings, or split the file)")
        files[str(path)] = data
    return files


def import_command(settings: Settings, args: argparse.Namespace) -> int:
    """Exit 0 written, 1 the files have problems (nothing written), 2 a usage, gateway or I/O error."""
    try:
        repo_writer.check_target(args.out)
        files = read_inputs(args.files, settings.max_file_size)
        if args.format == "adc":
            imported = _import_adc(settings, args, files)
        elif args.format == "openapi":
            imported = _import_openapi(settings, args, files)
        else:
            imported = _import_apisix_yaml(args, files)
    except InputTooLarge as exc:
        return _refuse([Problem(str(exc))])
    except (repo_writer.WriteError, OSError, _UsageError) as exc:
        print(f"gitsync import: {redact(str(exc))}", file=sys.stderr)
        return 2
    if imported.problems:
        return _refuse(imported.problems)
    extracted = extract_secrets(imported.payload, repo_writer.escape_templates,
                                SecretRules.of(settings.secret_fields))
    register_secrets(extracted.values.values())
    written = repo_writer.render_files(repo_writer.plan_files(extracted.payload, args.layout))
    invalid = result_problems(written, imported, settings, extracted.values)
    if invalid:
        return _refuse(invalid)
    if args.format == "openapi":
        if not same_render(written, imported.payload, settings, extracted.values):
            return _refuse([Problem("round trip: the written repo does not render what the specs render "
                                    "(nothing written)")])
        imported.told.append("round trip: render of the written repo equals the specs' render")
    if not _written(args, written, extracted.values):
        return 2
    _tell(imported, extracted, len(written), args)
    return 0


def _written(args: argparse.Namespace, files: Mapping[str, bytes], secrets: Mapping[str, str]) -> bool:
    """The repo's files written under ``--out`` and the secret values taken out to ``--secrets-out``;
    False (said why) when they cannot go there."""
    problem = usage_problem(args, args.out, secrets, "the files hold")
    if problem:
        print(f"gitsync import: {problem} (a literal credential becomes ${{{{ secrets.NAME }}}})",
              file=sys.stderr)
        return False
    try:
        repo_writer.check_tree(args.out, files)  # a tree that cannot be written stops the secrets too
        if secrets:
            write_secrets(args.secrets_out, secrets, args.age_recipient)
        repo_writer.write_tree(args.out, files)
    except (repo_writer.WriteError, RecipientError, OSError) as exc:
        print(f"gitsync import: {redact(str(exc))}", file=sys.stderr)
        return False
    return True


def _tell(imported: _Imported, extracted: Extracted, files: int, args: argparse.Namespace) -> None:
    """How the import was made, its notes (the credentials taken out among them) and what it wrote."""
    for line in imported.told:
        print(line)
    notes = imported.notes + extracted.warnings
    if extracted.values:
        notes.append(f"{len(extracted.values)} literal credential(s) became ${{{{ secrets.NAME }}}}, their "
                     f"values in {args.secrets_out}: " + ", ".join(extracted.values))
    for note in notes:
        print(f"note: {note}")
    print(f"imported {_count(imported.payload)} item(s) into {files} file(s) under {args.out}")


def _count(payload: Mapping[str, Sequence[Any]]) -> int:
    return sum(len(items) for items in payload.values())


def _refuse(problems: Sequence[Problem]) -> int:
    for problem in problems:
        print(problem, file=sys.stderr)
    print(f"gitsync import: {len(problems)} problem(s); nothing written", file=sys.stderr)
    return 1


def result_problems(written: Mapping[str, bytes], imported: _Imported, settings: Settings,
                    secrets: Mapping[str, str]) -> list[Problem]:
    """What ``gitsync validate`` would say of the files the import would write (too many items first),
    with the `secrets` it took out put back, each problem at its item's place in the input files.
    Undefined variables and other secrets are left out: they are the host's to set."""
    count = _count(imported.payload)
    if count > settings.max_items:
        return [Problem(too_many_items(count, settings.max_items))]
    options = RenderOptions(max_file_size=settings.max_file_size, max_items=settings.max_items,
                            secret_lookup=secrets.get)
    try:
        render(written, options, memo=render_memo(settings))
    except ProblemsError as exc:
        return [_at_origin(p, imported.origins) for p in exc.problems
                if not p.message.startswith("undefined ")]
    return []


def same_render(written: Mapping[str, bytes], payload: Mapping[str, Any], settings: Settings,
                secrets: Mapping[str, str]) -> bool:
    """Whether the files the import would write render exactly `payload` (the secrets put back)."""
    options = RenderOptions(max_file_size=settings.max_file_size, max_items=settings.max_items,
                            secret_lookup=secrets.get)
    try:
        again = render(written, options, memo=render_memo(settings)).payload
    except ProblemsError:
        return False
    return payload_json(again) == payload_json({kind: items for kind, items in payload.items() if items})


def _import_openapi(settings: Settings, args: argparse.Namespace, files: dict[str, bytes]) -> _Imported:
    if getattr(args, "gateways", None):
        raise _UsageError("--gateway is for import adc (a spec says what it renders)")
    converted = import_openapi.convert(settings, args, files)
    return _Imported(converted.payload, converted.problems, origins=converted.origins)


def _at_origin(problem: Problem, origins: Mapping[tuple[str, str], Location]) -> Problem:
    origin = origins.get((problem.kind or "", problem.id or ""))
    if origin is None:  # about the repo as a whole (a file too large for max_file_size: another --layout)
        return Problem(problem.message + " (in the repo the import would write)", problem.location,
                       problem.kind, problem.id, problem.field)
    written = f" (imported as {problem.location})" if problem.location is not None else ""
    return Problem(problem.message + written, origin, problem.kind, problem.id, problem.field)


def _import_apisix_yaml(args: argparse.Namespace, files: dict[str, bytes]) -> _Imported:
    if len(files) != 1:
        raise _UsageError("import apisix-yaml: give one file")
    if getattr(args, "gateways", None):
        raise _UsageError("--gateway is for import adc (an apisix.yaml is its own gateway's state)")
    result = import_apisix_yaml.split(*next(iter(files.items())))
    return _Imported(result.payload, list(result.problems), list(result.notes), origins=result.origins)


def _import_adc(settings: Settings, args: argparse.Namespace, files: dict[str, bytes]) -> _Imported:
    try:
        version = behaviour_for(args.adc_version) if args.adc_version else None
    except UnknownRelease as exc:
        raise _UsageError(f"--adc-version: {exc}") from None
    given = adc_gateway.Given.of(version, args.managed_by_label, args.no_lint)
    adc = import_adc.read_files(files, settings.max_items)
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
    if converted.variables:
        notes.append("ADC's ${NAME} in a number field became ${{ number(vars.NAME) }}: set "
                     "GITSYNC_VAR_<NAME> (or [render.vars]) for " + ", ".join(sorted(converted.variables)))
    return _Imported(converted.payload, converted.problems, notes, told, converted.origins)


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
