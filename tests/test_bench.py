"""The benchmark runner's quick mode as a smoke test: it runs end to end and reports every scenario.

Timings are not checked (the machine is shared and noisy): only that each scenario produced a
measurement, its floor where it has one, and the JSON and table the README describes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.run import SCENARIOS
from tests.support import ROOT, gitsync_env


@pytest.mark.slow
def test_quick_mode_runs_every_scenario_and_writes_its_json(tmp_path: Path):
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "bench", "--quick", "--out", str(out)], cwd=ROOT,
                          env=gitsync_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((out / "latest.json").read_text())
    assert report["sizes"] == [100] and report["quick"] is True
    assert [r for r in out.iterdir() if r.name.startswith("bench-")]  # the dated copy too
    by_scenario = {r["scenario"]: r for r in report["results"]}
    assert set(by_scenario) == set(SCENARIOS)
    for name, result in by_scenario.items():
        assert result["routes"] == 100 and result["value"] > 0 and result["samples"], name
    for name in ("cold_render", "change_applied", "noop_poll", "incremental_fetch", "restart_refill",
                 "sync_once_first"):
        assert by_scenario[name]["floor"] > 0 and by_scenario[name]["ratio"] > 0, name
    assert by_scenario["restart_refill"]["details"]["healed"] is True
    assert by_scenario["daemon_rss"]["details"]["syncs"] == len(by_scenario["daemon_rss"]["samples"])
    assert len(by_scenario["webhook_live"]["samples"]) == by_scenario["webhook_live"]["details"]["commits"]
    assert report["machine"]["commit"] and report["table"] in done.stdout
    for title, _target in SCENARIOS.values():
        assert title.split(",")[0].split(" …")[0] in done.stdout
