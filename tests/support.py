"""Helpers for tests: the gitsync command as a real subprocess, ports, tools pip installed.

They live in `testkit` (shared with bench/); this module is where tests import them from.
"""

from __future__ import annotations

from testkit.processes import ROOT, free_port, gitsync_env, installed_tool, run_gitsync

__all__ = ["ROOT", "free_port", "gitsync_env", "installed_tool", "run_gitsync"]
