"""examples/prometheus: the rules pass the real promtool (check and unit tests), and the rules and the
Grafana dashboard only use metrics the agent exports and series the rules record."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest
from ruamel.yaml import YAML

from gitsync.daemon.listener import Metrics
from testkit.processes import ROOT

KIT = ROOT / "examples" / "prometheus"
_METRIC = re.compile(r"\bgitsync_[a-z_]+")
_RECORDED = re.compile(r"\bgitsync:[a-z0-9_:]+")


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    tool = shutil.which("promtool")
    assert tool, "promtool comes with Debian's prometheus package (.ci/run installs it)"
    return subprocess.run([tool, *args], cwd=KIT, capture_output=True, text=True, timeout=120)


@pytest.mark.slow
def test_promtool_checks_the_rules_and_runs_their_unit_tests() -> None:
    checked = promtool("check", "rules", "gitsync-rules.yaml")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 15 rules found" in checked.stdout
    tested = promtool("test", "rules", "gitsync-rules.test.yaml")
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_every_alert_has_a_firing_and_a_quiet_case() -> None:
    rules = YAML(typ="safe").load((KIT / "gitsync-rules.yaml").read_text())
    alerts = {r["alert"] for g in rules["groups"] for r in g["rules"] if "alert" in r}
    tests = YAML(typ="safe").load((KIT / "gitsync-rules.test.yaml").read_text())["tests"]
    cases = [case for t in tests for case in t.get("alert_rule_test", ())]
    fired = {c["alertname"] for c in cases if c["exp_alerts"]}
    assert fired == alerts
    for test in tests:  # each test with a firing case also has series that must not fire
        names = {c["alertname"] for c in test.get("alert_rule_test", ())}
        for name in names:
            firing = [c for c in test["alert_rule_test"] if c["alertname"] == name and c["exp_alerts"]]
            quiet_series = len(test["input_series"]) > sum(len(c["exp_alerts"]) for c in firing)
            quiet_time = any(c["alertname"] == name and not c["exp_alerts"] for c in test["alert_rule_test"])
            assert quiet_series or quiet_time, name
    documented = set(re.findall(r"alert: (Gitsync\w+)", (ROOT / "docs/operations.md").read_text()))
    assert documented and documented <= alerts  # the docs' examples name real alerts


def test_the_rules_and_the_dashboard_use_only_exported_metrics() -> None:
    exported = Metrics().render().decode()
    rules_text = (KIT / "gitsync-rules.yaml").read_text()
    dashboard = json.loads((KIT / "gitsync-dashboard.json").read_text())
    recorded = {r["record"] for g in YAML(typ="safe").load(rules_text)["groups"] for r in g["rules"]
                if "record" in r}
    expressions = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    assert expressions
    for text in (rules_text, *expressions):
        names = _METRIC.findall(text)
        assert names or _RECORDED.search(text), f"no gitsync metric in {text[:80]!r}: the patterns miss it"
        for name in names:
            family = re.sub(r"_bucket$", "", name)  # a histogram's buckets belong to its family
            assert re.search(rf"^# TYPE {family} ", exported, re.M), name
        for name in _RECORDED.findall(text):
            assert name in recorded, name
    titles = " ".join(p["title"] for p in dashboard["panels"]).lower()
    for topic in ("sync results", "sync duration", "drift", "in sync", "write-back"):
        assert topic in titles, topic
