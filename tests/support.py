"""Helpers for tests: the gitsync command as a real subprocess, ports, tools pip installed.

They live in `testkit` (shared with bench/); this module is where tests import them from.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from testkit.processes import ROOT, free_port, gitsync_env, installed_tool, run_gitsync


def run_bench(module: str, report: str, out: Path, *args: str) -> tuple[dict[str, Any], str]:
    """`python -m <module> ARGS --out OUT` run to its end: the JSON report it wrote (`report`, a file
    name in `out`) and what it printed."""
    command = [sys.executable, "-m", module, *args, "--out", str(out)]
    done = subprocess.run(command, cwd=ROOT, env=gitsync_env(), capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads((out / report).read_text()), done.stdout


__all__ = ["ROOT", "free_port", "gitsync_env", "installed_tool", "run_bench", "run_gitsync"]
