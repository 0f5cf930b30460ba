"""Helpers for tests: the gitsync command as a real subprocess, ports, tools pip installed.

They live in `testkit` (shared with bench/); this module is where tests import them from.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from gitsync.kinds import item_id
from gitsync.render.result import Rendered
from gitsync.render.sourcemap import ItemSource, SourceMap
from gitsync.render.validate import item_contents
from testkit.processes import ROOT, free_port, gitsync_env, installed_tool, run_gitsync


def run_bench(module: str, report: str, out: Path, *args: str) -> tuple[dict[str, Any], str]:
    """`python -m <module> ARGS --out OUT` run to its end: the JSON report it wrote (`report`, a file
    name in `out`) and what it printed."""
    command = [sys.executable, "-m", module, *args, "--out", str(out)]
    done = subprocess.run(command, cwd=ROOT, env=gitsync_env(), capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads((out / report).read_text()), done.stdout


def rendered_alone(payload: dict[str, list[dict[str, Any]]]) -> Rendered:
    """A source's render, as `render` gives it (every item at a line of a file of its kind)."""
    sources = {kind: [ItemSource(f"{kind}.yaml", 0, n, (n + 1, 3), item_id(kind, item))
                      for n, item in enumerate(items)] for kind, items in payload.items() if items}
    source_map = SourceMap({}, sources)
    kept = {kind: items for kind, items in payload.items() if items}
    contents, splits = item_contents(kept, source_map, {})
    ids = {kind: [item_id(kind, item) for item in items] for kind, items in kept.items()}
    return Rendered(kept, source_map, frozenset(), (), contents, (), ids, splits)


__all__ = ["ROOT", "free_port", "gitsync_env", "installed_tool", "rendered_alone", "run_bench", "run_gitsync"]
