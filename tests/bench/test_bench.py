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
from bench.generate import changed_route, config_files
from bench.peer_adc import adc_config
from bench.run import EXTERNAL_GROUPS, ON_DOUBLES, SCENARIOS, SERVED
from testkit.processes import ROOT, gitsync_env


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
    assert set(by_scenario) == set(SCENARIOS) - set(SERVED)  # those need data planes (--proxy)
    for name, result in by_scenario.items():
        assert result["routes"] == 100 and result["value"] > 0 and result["samples"], name
    for name in ("cold_render", "change_applied", "noop_poll", "incremental_fetch", "restart_refill",
                 "sync_once_first"):
        assert by_scenario[name]["floor"] > 0 and by_scenario[name]["ratio"] > 0, name
    assert by_scenario["restart_refill"]["details"]["healed"] is True
    assert by_scenario["daemon_rss"]["details"]["syncs"] == len(by_scenario["daemon_rss"]["samples"])
    assert len(by_scenario["webhook_live"]["samples"]) == by_scenario["webhook_live"]["details"]["commits"]
    assert report["machine"]["commit"] and report["table"] in done.stdout
    for name, (title, _target) in SCENARIOS.items():
        if name not in SERVED:
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
    assert {r["scenario"] for r in report["results"]} == set(SCENARIOS) - set(ON_DOUBLES) - set(SERVED)
    assert f"gateways: {ours.url} (gitsync), {floors.url} (floors)" in done.stdout
    # what was measured went to the gateways given: each holds the bench's config of 100 routes
    for config in held:
        assert len(config["routes"]) == 100 and config["routes_conf_version"] > 1


@pytest.mark.slow
def test_given_their_data_planes_running_gateways_are_watched_serving_each_commit(tmp_path: Path):
    """``--proxy``: the daemon (webhook → served) and the refill (a gateway emptied → back) run against
    gateways the bench did not start, and watch their data planes (two doubles with data planes here)."""
    key = "their-own-admin-key"
    key_file = tmp_path / "admin-key"
    key_file.write_text(key)
    out = tmp_path / "out"
    with DoubleProcess(key, proxy=True) as ours, DoubleProcess(key, proxy=True) as floors:
        done = _bench("--quick", "--out", str(out), "--only", "refill,daemon", "--gateway", ours.url,
                      "--floor-gateway", floors.url, "--admin-key-file", str(key_file), "--proxy",
                      ours.proxy_url, "--floor-proxy", floors.proxy_url)
        assert done.returncode == 0, done.stderr[-3000:]
        path, limit = changed_route(100, _last_revision(out))
        served = [httpx.get(plane + path).json()["route"]["plugins"]["limit-count"]["count"]
                  for plane in (ours.proxy_url, floors.proxy_url)]
    assert served == [limit, limit]  # both data planes serve the last commit
    report = json.loads((out / "latest.json").read_text())
    assert report["gateways"]["proxies"] == [ours.proxy_url, floors.proxy_url]
    by_scenario = {r["scenario"]: r for r in report["results"]}
    assert set(by_scenario) == set(SERVED)
    served_result = by_scenario["webhook_served"]
    assert len(served_result["samples"]) == len(served_result["floor_samples"]) == 3
    assert all(sample > 0 for sample in served_result["samples"] + served_result["floor_samples"])
    assert by_scenario["refill_served"]["floor"] > 0 and by_scenario["refill_served"]["value"] > 0
    phases = by_scenario["webhook_own"]["details"]["phases_s"]
    assert {"fetch", "push-wait", "gitsync", "wall", "unattributed"} <= set(phases)


def _last_revision(out: Path) -> int:
    """The revision of the bench's last commit at 100 routes: its history (20), the refill's none, and the
    daemon's three (one per served sync)."""
    report = json.loads((out / "latest.json").read_text())
    return 20 + len(next(r for r in report["results"] if r["scenario"] == "webhook_served")["samples"]) - 1


def test_adc_gets_the_same_config_as_gitsync_in_its_own_format():
    config = adc_config(config_files(200), {})
    assert [s["name"] for s in config["services"]] == ["s0", "s1"]
    first = config["services"][0]
    assert first["upstream"]["nodes"] == [{"host": "127.0.0.1", "port": 1, "weight": 1}]
    assert first["plugins"] == {"cors": {}}
    assert len(first["routes"]) == 100 and first["routes"][0] == {
        "name": "r0", "uris": ["/api/v1/svc0/r0/*"], "methods": ["GET", "POST"],
        "plugins": {"limit-count": {"count": 100, "time_window": 60, "rejected_code": 429},
                    "proxy-rewrite": {"regex_uri": ["^/api/v1/svc0/(.*)", "/$1"]}}}
    assert [c["username"] for c in config["consumers"]] == ["team0", "team1"]
    assert config["global_rules"] == {"prometheus": {}}


@pytest.mark.slow
def test_peer_adc_without_adc_measures_gitsync_and_the_floors(tmp_path: Path):
    key = "their-own-admin-key"
    key_file = tmp_path / "admin-key"
    key_file.write_text(key)
    out = tmp_path / "out"
    with DoubleProcess(key, proxy=True) as ours, DoubleProcess(key, proxy=True) as peer:
        done = subprocess.run([sys.executable, "-m", "bench.peer_adc", "--gateway", ours.url, "--proxy",
                               ours.proxy_url, "--peer-gateway", peer.url, "--peer-proxy", peer.proxy_url,
                               "--admin-key-file", str(key_file), "--routes", "100", "--reps", "1", "--out",
                               str(out)], cwd=ROOT, env=gitsync_env(), capture_output=True, text=True,
                              timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((out / "peer-adc-latest.json").read_text())
    for scenario in ("first", "change"):
        assert set(report["results"][scenario]) == {"gitsync", "floor"}
        gitsync = report["results"][scenario]["gitsync"]
        assert gitsync["served_s"] > 0 and gitsync["wall_s"] > 0 and gitsync["rss_mb"] > 10
    assert "first sync" in done.stdout and "(no ADC given)" in done.stdout


@pytest.mark.slow
def test_a_small_herd_serves_one_push_and_counts_the_git_servers_work(tmp_path: Path):
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "bench.herd", "--agents", "3", "--out", str(out)], cwd=ROOT,
                          env=gitsync_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    result = json.loads((out / "herd-latest.json").read_text())["result"]
    assert result["all_served"] and result["served"] == 3 and result["gave_up_syncs"] == 0
    assert result["per_agent"]["connections"] >= 1 and result["per_agent"]["bytes_from_server"] > 0
    assert result["server_cpu_s"] > 0 and result["peak_connections"] >= 1


@pytest.mark.slow
def test_peer_adc_measures_a_first_sync_from_an_artifact(tmp_path: Path):
    key_file = tmp_path / "admin-key"
    key_file.write_text("their-own-admin-key")
    out = tmp_path / "out"
    with DoubleProcess("their-own-admin-key", proxy=True) as ours, \
            DoubleProcess("their-own-admin-key", proxy=True) as peer:
        done = subprocess.run([sys.executable, "-m", "bench.peer_adc", "--gateway", ours.url, "--proxy",
                               ours.proxy_url, "--peer-gateway", peer.url, "--peer-proxy", peer.proxy_url,
                               "--admin-key-file", str(key_file), "--routes", "100", "--reps", "1", "--out",
                               str(out), "--artifact", "--first-only"], cwd=ROOT, env=gitsync_env(),
                              capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((out / "peer-adc-latest.json").read_text())
    assert set(report["results"]["first"]) == {"gitsync", "artifact", "floor"}
    assert report["results"]["change"] == {}
    assert report["results"]["first"]["artifact"]["served_s"] > 0


@pytest.mark.slow
def test_a_small_herd_against_a_registry_counts_the_registrys_work(tmp_path: Path):
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "bench.herd", "--agents", "3", "--registry", "--out",
                           str(out)], cwd=ROOT, env=gitsync_env(), capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    result = json.loads((out / "herd-registry-latest.json").read_text())["result"]
    assert result["server"] == "docker-registry"
    assert result["all_served"] and result["served"] == 3 and result["gave_up_syncs"] == 0
    assert set(result["traffic"]) == {"http"} and result["per_agent"]["bytes_from_server"] > 0
    assert result["server_cpu_s"] > 0


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
        ([*given, "--proxy", "http://127.0.0.1:9080"], "--proxy and --floor-proxy go together"),
        ([*given, "--restart-gateway", "true", "--restart-floor", "true"], "need --proxy and --floor-proxy"),
        ([*given, "--proxy", "http://127.0.0.1:9080", "--floor-proxy", "http://127.0.0.1:9081",
          "--restart-gateway", "true"], "--restart-gateway and --restart-floor go together"),
    ]:
        done = _bench(*args, timeout=60)
        assert done.returncode == 2 and says in done.stderr, (args, done.stderr)


@pytest.mark.slow
def test_the_hostile_remote_benchmark_runs_each_attack_and_writes_its_json(tmp_path: Path):
    """`python -m bench.hostile` end to end, small: a 5 MB bomb in a status and in a source, 50 refs."""
    done = subprocess.run([sys.executable, "-m", "bench.hostile", "--bomb-mb", "5", "--refs", "50",
                           "--out", str(tmp_path)], cwd=ROOT, env=gitsync_env(), capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((tmp_path / "hostile-latest.json").read_text())
    by_scenario = {r["scenario"]: r for r in report["results"]}
    assert by_scenario["status_bomb"]["limited"]["canary_read"] is True
    assert json.loads(by_scenario["source_bomb"]["free"]["stdout"].splitlines()[-1])["ok"] is True
    flood = by_scenario["ref_flood"]
    assert flood["entries"] == [50, 50, 50] and len(flood["seconds"]) == 3
    assert report["table"] in done.stdout


@pytest.mark.slow
def test_fleetload_counts_what_a_commit_costs_each_server_per_agent(tmp_path: Path):
    """A few light agents poll and take one commit from a real git daemon and a real registry: every
    operation measured, none failed; an agent pulls the whole artifact (and its manifest and signature)
    from the registry, the change's pack alone from git."""
    out = tmp_path / "fleetload.json"
    done = subprocess.run([sys.executable, "-m", "bench.fleetload", "--agents", "6", "--routes", "100",
                           "--concurrency", "3", "--out", str(out)], cwd=ROOT, env=gitsync_env(),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    waves = {(w["server"], w["what"]): w for w in report["waves"]}
    assert len(waves) == 4 and all(w["agents"] == 6 and w["failed"] == 0 for w in waves.values())
    pulled = waves["docker-registry", "pull the new artifact"]["server_sent"]
    assert report["artifact_bytes"] + report["signature_bytes"] < pulled < report["artifact_bytes"] + 4096
    fetched = waves["git daemon", "fetch the new commit"]
    assert 0 < fetched["server_sent"] < report["artifact_bytes"] / 10 and fetched["connections"] == 1
    assert all(w["server_cpu_ms"] > 0 for w in waves.values())


@pytest.mark.slow
def test_fleetsim_measures_each_layout_of_the_status_channel(tmp_path: Path):
    out = tmp_path / "fleetsim.json"
    done = subprocess.run([sys.executable, "-m", "bench.fleetsim", "--agents", "40", "--groups", "4",
                           "--writes", "4", "--out", str(out)], cwd=ROOT, env=gitsync_env(),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    costs = json.loads(out.read_text())["costs"]
    by = {(c["what"], c["layout"]): c for c in costs}
    assert {layout for _, layout in by} == {"flat", "sharded", "per-group"}
    for layout in ("flat", "sharded", "per-group"):
        assert by["gate read, first", layout]["entries"] == 10  # its group of the 40, in 4 groups
        assert by["status --fleet, first", layout]["entries"] == 40
        assert by["status write", layout]["count"] == 4
    # a gate's read of its group costs the server less when the refs are sharded by group
    assert by["gate read, first", "sharded"]["server_sent"] < by["gate read, first", "flat"]["server_sent"]
