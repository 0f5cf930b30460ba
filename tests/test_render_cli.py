"""`gitsync render` and `gitsync validate` as real processes, and the double accepting the sample payload."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import httpx
import pytest

from gitsync.render import RenderOptions, payload_json, read_directory, render
from gitsync.testing.apisix import ApisixDouble
from tests.support import ROOT, run_gitsync

SAMPLE = ROOT / "sample-repo"
TOKEN = "vault-token-for-tests"
WITH_TOKEN = {"GITSYNC_SECRET_VAULT_TOKEN": TOKEN}


def test_validate_sample_repo_passes_with_its_secret():
    result = run_gitsync("validate", "--dir", str(SAMPLE), env=WITH_TOKEN)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("valid: 4 routes, 2 services, 3 upstreams,")
    layered = run_gitsync("validate", "--dir", str(SAMPLE), "--path", "base", "--path", "envs/prod",
                          env=WITH_TOKEN)
    assert layered.returncode == 0, layered.stderr


@pytest.mark.slow
def test_validate_reports_each_problem_as_file_line_col(tmp_path: Path):
    (tmp_path / "routes.yaml").write_text("routes:\n  - id: r1\n    uri: /a\n    upstream_id: nope\n"
                                          "  - id: r1\n    uri: /b\n    upstream_id: nope\n")
    result = run_gitsync("validate", "--dir", str(tmp_path))
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        "routes.yaml:4:5: routes[r1].upstream_id: upstream_id 'nope' names no item of upstreams",
        "routes.yaml:5:5: routes[r1]: duplicate id 'r1' in routes: also at routes.yaml:2:5",
    ]


@pytest.mark.slow
def test_missing_secret_fails_validation_at_its_line():
    result = run_gitsync("validate", "--dir", str(SAMPLE))
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "base/secrets/vault.yaml:7:5: secrets[vault/main].token: undefined secret secrets.VAULT_TOKEN "
        "(no file VAULT_TOKEN in the secrets directory, no GITSYNC_SECRET_VAULT_TOKEN)"]


@pytest.mark.slow
def test_render_prints_deterministic_masked_json(tmp_path: Path):
    first = run_gitsync("render", "--dir", str(SAMPLE), env=WITH_TOKEN)
    second = run_gitsync("render", "--dir", str(SAMPLE), env=WITH_TOKEN)
    assert first.returncode == 0, first.stderr
    assert first.stdout == second.stdout
    assert first.stdout.endswith("}\n") and first.stdout.count("\n") == 1
    payload = json.loads(first.stdout)
    assert payload["secrets"][0]["token"] == "***"
    assert payload["ssls"][0]["key"] == "***"
    assert TOKEN not in first.stdout + first.stderr
    # The same secret from a secrets directory, shown on request.
    (tmp_path / "VAULT_TOKEN").write_text(TOKEN + "\n")
    shown = run_gitsync("render", "--dir", str(SAMPLE), "--secrets-dir", str(tmp_path), "--show-secrets")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["secrets"][0]["token"] == TOKEN


@pytest.mark.slow
def test_render_and_validate_read_a_commit_with_repo(tmp_path: Path, git_daemon, remote_repo):
    """`--repo` reads the commit from a real git remote (git daemon), with the same output as `--dir`."""
    files = {str(p.relative_to(SAMPLE)): p.read_bytes() for p in SAMPLE.rglob("*") if p.is_file()}
    remote_repo.commit(files, "sample")
    url = git_daemon.url(remote_repo.path.name)
    state = ["--state-dir", str(tmp_path / "state")]
    from_repo = run_gitsync("render", "--repo", url, *state, env=WITH_TOKEN)
    from_dir = run_gitsync("render", "--dir", str(SAMPLE), env=WITH_TOKEN)
    assert from_repo.returncode == 0, from_repo.stderr
    assert from_repo.stdout == from_dir.stdout
    broken = files["base/routes/api.yaml"].replace(b"uri: /", b"uri: 42 #", 1)
    remote_repo.commit({"base/routes/api.yaml": broken}, "break a route")
    result = run_gitsync("validate", "--repo", url, *state, env=WITH_TOKEN)
    assert result.returncode == 1
    assert "base/routes/api.yaml:" in result.stderr and "routes[" in result.stderr
    missing = run_gitsync("validate", "--repo", git_daemon.url("nope.git"), *state)
    assert missing.returncode == 2 and "gitsync validate: error:" in missing.stderr


def test_the_double_accepts_the_rendered_sample_payload():
    rendered = render(read_directory(SAMPLE), RenderOptions(secret_lookup={"VAULT_TOKEN": TOKEN}.get))
    body = payload_json(rendered.payload)
    headers = {"X-API-KEY": "admin-key", "Content-Type": "application/json",
               "X-Digest": hashlib.sha256(body).hexdigest()}
    with ApisixDouble("admin-key") as gateway, httpx.Client(base_url=gateway.url, timeout=10) as client:
        assert client.post("/apisix/admin/configs/validate", content=body, headers=headers).status_code == 200
        response = client.put("/apisix/admin/configs", content=body, headers=headers)
        assert response.status_code == 202, response.text
        live = client.get("/apisix/admin/configs", headers=headers).json()
    for kind, items in rendered.payload.items():
        assert [item.get("id", item.get("username")) for item in live[kind]] == \
            [item.get("id", item.get("username")) for item in items]
