"""The benchmark runner's quick mode as a smoke test: it runs end to end and reports every scenario.

Timings are not checked (the machine is shared and noisy): only that each scenario produced a
measurement, its floor where it has one, and the JSON and table the README describes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from bench.double import DoubleProcess
from bench.run import EXTERNAL_GROUPS, SCENARIOS
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


def _bench(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "bench", *args], cwd=ROOT, env=gitsync_env(),
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
def test_running_gateways_given_by_url_are_measured_instead_of_the_doubles(tmp_path: Path):
    """``--gateway``: the bench's gitsync and its floors talk to gateways it did not start (two real
    APISIX instances in use; here two doubles stand in, started by this test with a key of their own)."""
    key = "their-own-admin-key"
    key_file = tmp_path / "admin-key"
    key_file.write_text(key + "\n")
    out = tmp_path / "out"
    with DoubleProcess(key) as ours, DoubleProcess(key) as floors:
        done = _bench("--quick", "--out", str(out), "--gateway", ours.url, "--floor-gateway", floors.url,
                      "--admin-key-file", str(key_file))
        assert done.returncode == 0, done.stderr[-3000:]
        held = [httpx.get(f"{gw.url}/apisix/admin/configs", headers={"X-API-KEY": key}).json()
                for gw in (ours, floors)]
    report = json.loads((out / "latest.json").read_text())
    assert report["gateways"] == {"kind": "external", "gitsync": ours.url, "floor": floors.url}
    assert report["only"] == list(EXTERNAL_GROUPS)
    needs_the_double = {"restart_refill", "refill_own", "webhook_live", "daemon_rss"}
    assert {r["scenario"] for r in report["results"]} == set(SCENARIOS) - needs_the_double
    assert f"gateways: {ours.url} (gitsync), {floors.url} (floors)" in done.stdout
    # what was measured went to the gateways given: each holds the bench's config of 100 routes
    for config in held:
        assert len(config["routes"]) == 100 and config["routes_conf_version"] > 1


@pytest.mark.slow
def test_running_gateways_are_refused_what_only_the_double_can_do(tmp_path: Path):
    key_file = tmp_path / "admin-key"
    key_file.write_text("k")
    given = ["--gateway", "http://127.0.0.1:9180", "--floor-gateway", "http://127.0.0.1:9181",
             "--admin-key-file", str(key_file)]
    for args, says in [
        ([*given, "--only", "agent,refill"], "the 'refill' group restarts the double"),
        ([*given, "--only", "daemon"], "the 'daemon' group restarts the double"),
        (given[:2], "--gateway, --floor-gateway and --admin-key-file go together"),
        ([*given[:2], "--floor-gateway", "http://127.0.0.1:9180/", *given[4:]], "another gateway"),
        ([*given[:4], "--admin-key-file", str(tmp_path / "missing")], "--admin-key-file: No such file"),
    ]:
        done = _bench(*args, timeout=60)
        assert done.returncode == 2 and says in done.stderr, (args, done.stderr)
