"""`gitsync render` and `gitsync validate` as real processes, and the double accepting the sample payload."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import httpx
import pytest

from gitsync.render import RenderOptions, payload_json, render
from gitsync.source.directory import read_directory
from gitsync.testing.apisix import ApisixDouble
from testkit.gitservers import BareRepo, GitDaemon, git
from testkit.processes import ROOT, run_gitsync

SAMPLE = ROOT / "sample-repo"
TOKEN = "vault-token-for-tests"
WITH_TOKEN = {"GITSYNC_SECRET_VAULT_TOKEN": TOKEN}


@pytest.mark.slow
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


# --- hostile and careless input --------------------------------------------------------------------------

ROUTE = "routes:\n  - id: r1\n    uri: /a\n    upstream: {nodes: {'127.0.0.1:1980': 1}}\n"
THEN = "nothing in it is applied (its items are pruned from the gateways)"


@pytest.mark.slow
def test_validate_skips_a_fifo_and_links_with_a_warning_each_and_never_hangs(tmp_path: Path):
    (tmp_path / "routes.yaml").write_text(ROUTE)
    os.mkfifo(tmp_path / "x.yaml")  # opening it to read would wait for a writer forever
    os.symlink("routes.yaml", tmp_path / "copy.yaml")
    (tmp_path / "real").mkdir()
    os.symlink("real", tmp_path / "conf")
    for command in ("validate", "render"):
        result = run_gitsync(command, "--dir", str(tmp_path), timeout=60)
        assert result.returncode == 0, result.stderr
        warnings = [line.split("gitsync.configfiles ", 1)[1] for line in result.stderr.splitlines()]
        assert warnings == [f"skipped conf: a symbolic link to a directory (links are not followed); {THEN}",
                            f"skipped copy.yaml: a symbolic link (links are not followed); {THEN}",
                            f"skipped x.yaml: not a regular file (a FIFO, socket or device); {THEN}"]


@pytest.mark.slow
def test_file_names_with_a_newline_or_bytes_that_are_not_utf8_print_quoted_on_one_line(tmp_path: Path):
    (tmp_path / "bad\nname.yaml").write_text("routes: [\n")
    with open(os.fsencode(tmp_path) + b"/caf\xe9.yaml", "wb") as f:
        f.write(b"routes:\n  - {id: r2, uri: 42, upstream_id: u1}\n")
    result = run_gitsync("validate", "--dir", str(tmp_path))
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert len(lines) == 3, lines  # each problem one line, the other file's references still checked
    assert lines[0].startswith('"bad\\nname.yaml":2:1: YAML syntax error')
    assert lines[1].startswith('"caf\\351.yaml":2:14: routes[r2].uri: invalid configuration')
    assert lines[2] == '"caf\\351.yaml":2:23: routes[r2].upstream_id: upstream_id \'u1\' names no item of ' \
                       "upstreams"


@pytest.mark.slow
def test_environment_values_that_are_not_utf8_get_a_clear_error(tmp_path: Path):
    (tmp_path / "routes.yaml").write_text(ROUTE.replace("/a", '/a\n    desc: "${{ secrets.TOKEN }}"'))
    bad = os.fsdecode(b"caf\xe9-value")  # what os.environ holds for those bytes
    var = run_gitsync("validate", "--dir", str(tmp_path), env={"GITSYNC_VAR_HOST": bad})
    assert var.returncode == 2 and "Traceback" not in var.stderr
    assert var.stderr.strip() == (
        "gitsync validate: error: GITSYNC_VAR_HOST: cannot read the variable: 'utf-8' codec can't decode "
        "byte 0xe9 in position 3: invalid continuation byte")
    secret = run_gitsync("validate", "--dir", str(tmp_path), env={"GITSYNC_SECRET_TOKEN": bad})
    assert secret.returncode == 1 and "Traceback" not in secret.stderr
    assert secret.stderr.strip() == (
        "routes.yaml:4:5: routes[r1].desc: cannot read secrets.TOKEN: GITSYNC_SECRET_TOKEN: cannot read the "
        "secret: 'utf-8' codec can't decode byte 0xe9 in position 3: invalid continuation byte")


def test_a_secret_setting_shorter_than_4_characters_is_refused(tmp_path: Path):
    (tmp_path / "routes.yaml").write_text(ROUTE)
    key = tmp_path / "admin.key"
    key.write_text("x#y\n")
    result = run_gitsync("diff", "--dir", str(tmp_path), "--gateway", "http://127.0.0.1:9",
                         "--admin-key-file", str(key))
    assert result.returncode == 2 and "x#y" not in result.stderr
    assert result.stderr.startswith(f"gitsync diff: error: --admin-key-file: {key}: the secret is 3 "
                                    "character(s) long; at least 4 are needed")


@pytest.mark.slow
def test_a_git_path_that_is_not_utf8_is_quoted_in_the_output_and_the_note(
        tmp_path: Path, remote_repo: BareRepo, git_daemon: GitDaemon, apisix: ApisixDouble):
    """The failure note is written (it was never: UnicodeEncodeError, retried on every sync)."""
    refused = remote_repo.commit({"caf\udce9.yaml": "routes:\n  - {id: r1, uri: 42}\n",
                                  "new\nline.yaml": "routes: [\n"}, "names git allows")
    key = tmp_path / "admin.key"
    key.write_text(apisix.admin_key)
    result = run_gitsync("sync", "--once", "--repo", git_daemon.url(remote_repo.path.name), "--state-dir",
                         str(tmp_path / "state"), "--gateway", apisix.url, "--admin-key-file", str(key),
                         "--writeback", "on")
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    note = git("notes", "--ref", "refs/notes/gitsync", "show", refused, cwd=remote_repo.path)
    assert "- '\"caf\\351.yaml\":2:5: routes[r1]: invalid configuration" in note
    assert "- '\"new\\nline.yaml\":2:1: YAML syntax error" in note
    assert '"caf\\351.yaml":2:5: routes[r1]: invalid configuration' in result.stderr


TEAM_SETTINGS = """
[[sources]]
name = "platform"
repo = "https://git.example/platform.git"
owns = ["global_rules", { kinds = ["upstreams"], prefix = "platform-" }]
shares = [{ kinds = ["upstreams"], prefix = "platform-", with = ["orders"] }]

[[sources]]
name = "orders"
repo = "https://git.example/orders.git"
owns = [{ kinds = ["routes", "upstreams"], prefix = "orders-" }]

[[sources]]
name = "payments"
repo = "https://git.example/payments.git"
owns = [{ kinds = ["routes", "upstreams"], prefix = "payments-" }]
"""


@pytest.mark.slow
def test_a_team_validates_its_repo_alone_with_the_platforms_shared_items_taken_as_the_platforms(
        tmp_path: Path) -> None:
    """A team's CI: `validate --dir . --config FILE --source NAME`, the other repos unread; a reference
    into what the platform shares passes, one into what it does not is refused at the team's own file."""
    config = tmp_path / "gitsync.toml"
    config.write_text(TEAM_SETTINGS)
    team = tmp_path / "orders"
    team.mkdir()
    routes = "routes:\n  - id: orders-a\n    uri: /a\n    upstream_id: platform-web\n"
    (team / "routes.yaml").write_text(routes)
    ok = run_gitsync("validate", "--config", str(config), "--source", "orders", "--dir", str(team))
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.startswith("valid: 1 routes")
    theirs = "  - id: orders-b\n    uri: /b\n    upstream_id: payments-web\n"
    squatted = "  - id: payments-c\n    uri: /c\n    upstream_id: platform-web\n"
    (team / "routes.yaml").write_text(routes + theirs + squatted)
    refused = run_gitsync("validate", "--config", str(config), "--source", "orders", "--dir", str(team))
    assert refused.returncode == 1
    assert refused.stderr.splitlines() == [
        "routes.yaml:8:5: routes[payments-c]: source 'orders' may not declare this item: it owns routes with "
        "id prefix 'orders-'; it belongs to source 'payments' (routes with id prefix 'payments-')"]
    (team / "routes.yaml").write_text(routes + theirs)
    refused = run_gitsync("validate", "--config", str(config), "--source", "orders", "--dir", str(team))
    assert refused.stderr.splitlines() == [
        "routes.yaml:7:5: routes[orders-b].upstream_id: upstream_id 'payments-web' names upstreams of source "
        "'payments', which does not share it with source 'orders' (see the shares of its [[sources]] table)"]
    # without --source, a directory cannot stand for one of several repos; an unknown name is said so
    assert "give --source NAME" in run_gitsync("validate", "--config", str(config), "--dir", str(team)).stderr
    unknown = run_gitsync("validate", "--config", str(config), "--source", "order", "--dir", str(team))
    assert unknown.returncode == 2
    assert "--source order: no [[sources]] table is named so (they are platform, orders, payments)" in \
        unknown.stderr
