"""`python -m bench.openapi --quick`: a generated spec rendered cold and warm against its floor, the JSON
written (the timings are not checked here)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.openapi import generated_spec, operations
from testkit.processes import ROOT, gitsync_env


@pytest.mark.slow
def test_quick_mode_renders_a_generated_spec_and_writes_its_json(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "bench.openapi", "--quick", "--out", str(tmp_path)],
                            cwd=ROOT, env=gitsync_env(), capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads((tmp_path / "openapi-latest.json").read_text())
    assert report["render"]["items"] == {"routes": 300, "services": 1, "upstreams": 1}
    for key in ("cold_render", "warm_render", "floor_parse"):
        assert len(report["render"][key]["samples"]) == 2


def test_every_operation_of_the_generated_spec_gets_a_concrete_request() -> None:
    spec = json.loads(generated_spec(30))
    found = operations(spec, "/api")
    assert len(found) == 30
    assert ("GET", "/team0/items/{id}", "/api/team0/items/id1") in found
