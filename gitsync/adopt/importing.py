"""``gitsync import adc FILE…`` and ``gitsync import apisix-yaml FILE``: files into a new config repo.

All or nothing. Each file is read up to ``max_file_size`` (a larger one, or ``/dev/zero``,
is refused before it is parsed), its items counted against ``max_items`` (ADC files before
they are converted), converted;
then the repo's files are made in memory and rendered as ``gitsync validate`` would, and
only a result that validates is written. A problem anywhere (a wrong type, what cannot be
mapped, an item APISIX would refuse) is reported as ``file:line:col: message`` at its
place in the imported files, exit 1, nothing written. Notes (what was left out on
purpose, variables to set) are printed and the import goes on.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gitsync.adopt import import_adc, import_apisix_yaml, repo_writer
from gitsync.adopt.adc_shapes import too_many_items
from gitsync.problems import Location, Problem, ProblemsError
from gitsync.render import RenderOptions, render
from gitsync.settings import SPEC_BY_NAME


class InputTooLarge(Exception):
    """An input file over ``max_file_size``: refused before it is parsed."""


@dataclass
class Imported:
    """The payload of the input files, what is wrong with them and where each item came from."""

    payload: dict[str, list[Any]]
    problems: list[Problem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    origins: Mapping[tuple[str, str], Location] = field(default_factory=dict)


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


def convert(fmt: str, files: Mapping[str, bytes], args: argparse.Namespace, max_items: int) -> Imported:
    """The input files as a payload, by their format (ADC files counted against `max_items` before they
    are converted)."""
    if fmt == "adc":
        converted = import_adc.convert(files, dict(args.label_selector), not args.no_managed_by_label,
                                       max_items)
        notes = [str(n) for n in converted.notes]
        if converted.secrets:
            notes.append("ADC's ${NAME} became ${{ secrets.NAME }}: set GITSYNC_SECRET_<NAME> or a file "
                         "<NAME> in the secrets directory for " + ", ".join(sorted(converted.secrets)))
        return Imported(converted.payload, converted.problems, notes, converted.origins)
    split = import_apisix_yaml.split(*next(iter(files.items())))
    return Imported(split.payload, split.problems, split.notes, split.origins)


def too_many(payload: Mapping[str, Sequence[Any]], max_items: int) -> Problem | None:
    count = sum(len(items) for items in payload.values())
    return Problem(too_many_items(count, max_items)) if count > max_items else None


def result_problems(written: Mapping[str, bytes], imported: Imported, options: RenderOptions,
                    ) -> list[Problem]:
    """What ``gitsync validate`` would say of the written files, each at its item's place in the input
    files. Undefined variables and secrets are left out: they are the host's to set."""
    try:
        render(written, options)
    except ProblemsError as exc:
        return [_at_origin(p, imported.origins) for p in exc.problems
                if not p.message.startswith("undefined ")]
    return []


def _at_origin(problem: Problem, origins: Mapping[tuple[str, str], Location]) -> Problem:
    origin = origins.get((problem.kind or "", problem.id or ""))
    if origin is None:  # about the repo as a whole (a file too large for max_file_size: another --layout)
        return Problem(problem.message + " (in the repo the import would write)", problem.location,
                       problem.kind, problem.id, problem.field)
    written = f" (imported as {problem.location})" if problem.location is not None else ""
    return Problem(problem.message + written, origin, problem.kind, problem.id, problem.field)


def _refuse(problems: Sequence[Problem]) -> int:
    for problem in problems:
        print(problem, file=sys.stderr)
    print(f"gitsync import: {len(problems)} problem(s); nothing written", file=sys.stderr)
    return 1


def _limit(settings: object, name: str) -> int:
    value = getattr(settings, name, None)
    return value if isinstance(value, int) else SPEC_BY_NAME[name].default


def import_command(settings: object, args: argparse.Namespace) -> int:
    """Exit 0 written, 1 the files have problems (nothing written), 2 a usage or I/O error."""
    if args.format == "apisix-yaml" and len(args.files) != 1:
        print("gitsync import apisix-yaml: give one file", file=sys.stderr)
        return 2
    max_file_size = _limit(settings, "max_file_size")
    try:
        repo_writer.check_target(args.out)
        files = read_inputs(args.files, max_file_size)
    except InputTooLarge as exc:
        return _refuse([Problem(str(exc))])
    except (repo_writer.WriteError, OSError) as exc:
        print(f"gitsync import: {exc}", file=sys.stderr)
        return 2
    max_items = _limit(settings, "max_items")
    imported = convert(args.format, files, args, max_items)
    if imported.problems:
        return _refuse(imported.problems)
    crowded = too_many(imported.payload, max_items)
    if crowded is not None:
        return _refuse([crowded])
    written = repo_writer.render_files(repo_writer.plan_files(imported.payload, args.layout))
    options = RenderOptions(max_file_size=max_file_size, max_items=max_items)
    invalid = result_problems(written, imported, options)
    if invalid:
        return _refuse(invalid)
    try:
        repo_writer.write_tree(args.out, written)
    except (repo_writer.WriteError, OSError) as exc:
        print(f"gitsync import: {exc}", file=sys.stderr)
        return 2
    for note in imported.notes:
        print(f"note: {note}")
    count = sum(len(items) for items in imported.payload.values())
    print(f"imported {count} item(s) into {len(written)} file(s) under {args.out}")
    return 0
