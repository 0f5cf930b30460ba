"""One-shot commands: ``gitsync render`` and ``gitsync validate`` (see DESIGN.md §8).

Each takes the resolved settings and the parsed arguments and returns the exit
status: 0 fine, 1 the config repo has problems (each on stderr as
``file:line:col: kind[id].field: message``, the file relative to the repo root, as
in git notes), 2 a usage or settings error.
"""

from __future__ import annotations

import argparse
import os
import sys

from gitsync.log import redact
from gitsync.problems import ProblemsError
from gitsync.render import (
    Rendered,
    mask_secrets,
    options_from_settings,
    payload_json,
    read_directory,
)
from gitsync.render import (
    render as render_files,
)
from gitsync.settings import Settings, SettingsError


def _render_source(settings: Settings, command: str) -> Rendered | int:
    """Render the configured source, or print why not and return the exit status."""
    if settings.dir is None:
        if settings.repo:
            print(f"gitsync {command}: --repo is not available yet; use --dir", file=sys.stderr)
        else:
            print(f"gitsync {command}: no source: give --dir PATH", file=sys.stderr)
        return 2
    try:
        files = read_directory(settings.dir)
        options = options_from_settings(settings, os.environ)
    except (OSError, SettingsError) as exc:
        print(f"gitsync {command}: error: {redact(str(exc))}", file=sys.stderr)
        return 2
    try:
        return render_files(files, options)
    except ProblemsError as exc:
        for problem in exc.problems:
            print(redact(str(problem)), file=sys.stderr)
        return 1


def render(settings: Settings, args: argparse.Namespace) -> int:
    """Print the payload as deterministic JSON; secret values masked unless ``--show-secrets``."""
    rendered = _render_source(settings, "render")
    if isinstance(rendered, int):
        return rendered
    payload = rendered.payload
    if not getattr(args, "show_secrets", False):
        payload = mask_secrets(payload, rendered.secret_values)
    sys.stdout.buffer.write(payload_json(payload) + b"\n")
    sys.stdout.flush()
    return 0


def validate(settings: Settings, args: argparse.Namespace) -> int:
    """Exit 0 when the config is valid; 1 with every problem on stderr."""
    rendered = _render_source(settings, "validate")
    if isinstance(rendered, int):
        return rendered
    counts = ", ".join(f"{len(items)} {kind}" for kind, items in rendered.payload.items())
    print(f"valid: {counts or 'no items'}")
    return 0
