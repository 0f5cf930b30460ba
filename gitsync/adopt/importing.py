"""``gitsync import adc FILE…`` and ``gitsync import apisix-yaml FILE``: files into a new config repo.

Nothing is written when a file has a problem (each reported as ``file:line:col:
message``, exit 1); notes (what was left out on purpose, variables to set) are
printed and the import goes on. A literal credential (anything the secret classifier
finds, as ``gitsync export`` does) becomes ``${{ secrets.NAME }}``, its value in
``--secrets-out`` and its NAME in the notes. The written repo is rendered once more before
the command ends, so a problem of the result shows up here and not at the first sync.
"""

from __future__ import annotations

import argparse
import sys

from gitsync.adopt import import_adc, import_apisix_yaml, repo_writer
from gitsync.adopt.export import usage_problem, write_secrets
from gitsync.adopt.secret_fields import extract_secrets
from gitsync.adopt.sops_writer import RecipientError
from gitsync.log import redact, register_secrets
from gitsync.problems import ProblemsError
from gitsync.render import RenderOptions, render
from gitsync.render.secrets import SecretRules
from gitsync.settings import Settings
from gitsync.source.directory import read_directory


def import_command(settings: Settings, args: argparse.Namespace) -> int:
    """Exit 0 written, 1 the files have problems (nothing written), 2 a usage or I/O error."""
    try:
        repo_writer.check_target(args.out)
        files = {str(path): path.read_bytes() for path in args.files}
    except (repo_writer.WriteError, OSError) as exc:
        print(f"gitsync import: {exc}", file=sys.stderr)
        return 2
    notes: list[str] = []
    if args.format == "adc":
        converted = import_adc.convert(files, dict(args.label_selector), not args.no_managed_by_label)
        payload, problems = converted.payload, converted.problems
        notes += [str(n) for n in converted.notes]
        if converted.secrets:
            notes.append("ADC's ${NAME} became ${{ secrets.NAME }}: set GITSYNC_SECRET_<NAME> or a file "
                         "<NAME> in the secrets directory for " + ", ".join(sorted(converted.secrets)))
    else:
        if len(files) != 1:
            print("gitsync import apisix-yaml: give one file", file=sys.stderr)
            return 2
        result = import_apisix_yaml.split(*next(iter(files.items())))
        payload, problems, notes = result.payload, result.problems, result.notes
    if problems:
        for problem in problems:
            print(problem, file=sys.stderr)
        print(f"gitsync import: {len(problems)} problem(s); nothing written", file=sys.stderr)
        return 1
    extracted = extract_secrets(payload, repo_writer.escape_templates, SecretRules.of(settings.secret_fields))
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
    notes += extracted.warnings
    if extracted.values:
        notes.append(f"{len(extracted.values)} literal credential(s) became ${{{{ secrets.NAME }}}}, their "
                     f"values in {args.secrets_out}: " + ", ".join(extracted.values))
    for note in notes:
        print(f"note: {note}")
    count = sum(len(items) for items in payload.values())
    print(f"imported {count} item(s) into {len(written)} file(s) under {args.out}")
    try:
        render(read_directory(args.out), RenderOptions(secret_lookup=extracted.values.get))
    except ProblemsError as exc:
        # Variables and secrets are the host's to set; anything else is a problem of the result.
        real = [p for p in exc.problems if not p.message.startswith("undefined ")]
        for problem in real:
            print(f"gitsync import: the written repo does not validate: {problem}", file=sys.stderr)
        if real:
            return 1
    return 0
