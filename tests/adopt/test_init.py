"""``gitsync init``, ``gitsync schema`` (checked with check-jsonschema), shell completion, and the
pre-commit hooks run by the real ``pre-commit try-repo``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gitsync.testing.apisix import ApisixDouble
from testkit.gitservers import git_env
from testkit.processes import ROOT, gitsync_env, run_gitsync

CHECK_JSONSCHEMA = str(Path(sys.executable).with_name("check-jsonschema"))
PRE_COMMIT = str(Path(sys.executable).with_name("pre-commit"))


def check_jsonschema(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([CHECK_JSONSCHEMA, *args], capture_output=True, text=True, timeout=120)


@pytest.mark.slow
def test_init_scaffolds_a_repo_that_validates_with_ci_that_runs(apisix: ApisixDouble, tmp_path: Path) -> None:
    repo = tmp_path / "config"
    result = run_gitsync("init", str(repo))
    assert result.returncode == 0, result.stderr
    for name in ("README.md", ".gitignore", ".pre-commit-config.yaml", ".github/workflows/gitsync.yml",
                 ".gitlab-ci.yml", "routes/api.yaml", "services/api.yaml", "upstreams/web.yaml",
                 "consumers/partners.yaml"):
        assert (repo / name).is_file(), name
    valid = run_gitsync("validate", "--dir", str(repo))
    assert valid.returncode == 0, valid.stderr
    assert "2 routes, 1 services, 1 upstreams, 2 consumers" in valid.stdout
    for schema, path in (("vendor.github-workflows", ".github/workflows/gitsync.yml"),
                         ("vendor.gitlab-ci", ".gitlab-ci.yml")):
        checked = check_jsonschema("--builtin-schema", schema, str(repo / path))
        assert checked.returncode == 0, checked.stdout + checked.stderr
    # The CI's diff step, as the workflow runs it: the gateway and key from the environment.
    diff = run_gitsync("diff", "--dir", str(repo), env={"GITSYNC_GATEWAYS": apisix.url,
                                                        "GITSYNC_ADMIN_KEY": "test-admin-key"})
    assert diff.returncode == 1 and "+ routes[api-orders]" in diff.stdout, diff.stdout + diff.stderr
    assert run_gitsync("init", str(repo)).returncode == 2  # never over an existing repo


@pytest.fixture(scope="module")
def schemas(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("schemas")
    result = run_gitsync("schema", "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert "# yaml-language-server: $schema=" in result.stdout
    return out


@pytest.mark.slow
def test_schemas_have_descriptions_and_pass_the_sample_repo(schemas: Path) -> None:
    whole = json.loads((schemas / "config-file.schema.json").read_text())
    assert whole["$schema"].startswith("http://json-schema.org/draft-07")
    assert "uri" in json.dumps(whole["properties"]["routes"]) and whole["properties"]["routes"]["description"]
    assert "Unquoted values are read as YAML 1.2 reads them" in whole["description"]
    checked = check_jsonschema("--check-metaschema", str(schemas / "config-file.schema.json"),
                               str(schemas / "routes.schema.json"))
    assert checked.returncode == 0, checked.stdout
    files = sorted(str(p) for p in (ROOT / "sample-repo").rglob("*.yaml"))
    checked = check_jsonschema("--schemafile", str(schemas / "config-file.schema.json"), *files)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    routes = check_jsonschema("--schemafile", str(schemas / "routes.schema.json"),
                              str(ROOT / "sample-repo/base/routes/api.yaml"))
    assert routes.returncode == 0, routes.stdout


BROKEN = {  # file → the field (JSON path) both gitsync validate and the editor schema name
    "uri.yaml": ("routes:\n  - id: r1\n    uri: 5\n    upstream_id: u\nupstreams:\n  - id: u\n"
                 "    nodes: {\"a:1\": 1}\n", "routes[r1].uri", "$.routes[0].uri"),
    "timeout.yaml": ("upstreams:\n  - id: u\n    nodes: {\"a:1\": 1}\n    timeout: {connect: -1, send: 1, "
                     "read: 1}\n", "upstreams[u].timeout.connect", "$.upstreams[0].timeout.connect"),
    "plugin.yaml": ("global_rules:\n  - id: g\n    plugins:\n      no-such-plugin: {}\n",
                    "global_rules[g].plugins.no-such-plugin", "$.global_rules[0].plugins"),
    "method.yaml": ("routes:\n  - id: r2\n    uri: /x\n    methods: [FETCH]\n    plugins: {key-auth: {}}\n",
                    "routes[r2].methods", "$.routes[0].methods[0]"),
    "kind.yaml": ("route:\n  - id: x\n", "unknown top-level key 'route'", "$"),
    "version.yaml": ("routes_conf_version: 3\n", "routes_conf_version does not belong", "$"),
    "secret-fields.yaml": ("secret_fields:\n  - my-plugin.token\n  - no_dot\n",
                           "secret_fields: 'no_dot' is not", "$.secret_fields[1]"),
}


def _paths(report: Any) -> set[str]:
    found: set[str] = set()
    if isinstance(report, dict):
        if isinstance(report.get("path"), str):
            found.add(report["path"])
        for value in report.values():
            found |= _paths(value)
    elif isinstance(report, list):
        for value in report:
            found |= _paths(value)
    return found


@pytest.mark.slow
def test_broken_files_fail_on_the_same_fields_as_gitsync_validate(schemas: Path, tmp_path: Path) -> None:
    for name, (text, _, _) in BROKEN.items():
        (tmp_path / name).write_text(text)
    valid = run_gitsync("validate", "--dir", str(tmp_path))
    assert valid.returncode == 1
    checked = check_jsonschema("-v", "-o", "json", "--schemafile", str(schemas / "config-file.schema.json"),
                               *(str(tmp_path / name) for name in sorted(BROKEN)))
    assert checked.returncode == 1, checked.stdout
    errors = json.loads(checked.stdout)["errors"]
    for name, (_, validate_says, schema_path) in BROKEN.items():
        lines = valid.stderr.splitlines()
        assert any(line.startswith(f"{name}:") and validate_says in line for line in lines), (name, lines)
        paths = _paths([e for e in errors if e["filename"].endswith("/" + name)])
        assert schema_path in paths, (name, paths)


@pytest.mark.slow
def test_completion_scripts_complete_subcommands_and_flags(tmp_path: Path) -> None:
    scripts = {}
    for shell in ("bash", "zsh", "fish"):
        result = run_gitsync("completion", shell)
        assert result.returncode == 0, result.stderr
        assert "export" in result.stdout and "--layout" in result.stdout
        scripts[shell] = result.stdout
    (tmp_path / "gitsync.bash").write_text(scripts["bash"])
    probe = ('source "$1"; COMP_WORDS=(gitsync ex); COMP_CWORD=1; _shtab_gitsync; printf "%s\\n" '
             '"${COMPREPLY[@]}"; COMP_WORDS=(gitsync export --lay); COMP_CWORD=2; _shtab_gitsync; '
             'printf "%s\\n" "${COMPREPLY[@]}"')
    done = subprocess.run(["bash", "-c", probe, "bash", str(tmp_path / "gitsync.bash")], capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["export", "--layout"]
    for shell in ("zsh", "fish"):
        if shutil.which(shell):
            (tmp_path / f"gitsync.{shell}").write_text(scripts[shell])
            parsed = subprocess.run([shell, "-n", str(tmp_path / f"gitsync.{shell}")], capture_output=True,
                                    text=True, timeout=30)
            assert parsed.returncode == 0, parsed.stderr


@pytest.mark.slow
def test_pre_commit_hooks_pass_a_good_commit_and_stop_a_bad_one_with_file_and_line(tmp_path: Path) -> None:
    """`pre-commit try-repo` on this repository's .pre-commit-hooks.yaml, offline (language: system)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    launcher = bin_dir / "gitsync"
    launcher.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m gitsync "$@"\n')
    launcher.chmod(0o755)
    env = gitsync_env(git_env({"PRE_COMMIT_HOME": str(tmp_path / "cache"),
                               "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}))
    repo = tmp_path / "config"
    shutil.copytree(ROOT / "sample-repo", repo)
    (repo / "base/secrets/vault.yaml").unlink()  # its token is a host secret; not needed here

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(args, cwd=repo, env=env, capture_output=True, text=True, timeout=300)

    assert run("git", "init", "-q").returncode == 0
    sample = (repo / "base/consumers/partners.yaml").read_text()
    (repo / "base/consumers/partners.yaml").write_text(sample.replace("$secret://vault/main/consumers/alice-key",
                                                                      "$env://ALICE_KEY").replace(
        "$secret://vault/main/consumers/bob-password", "$env://BOB_PASSWORD"))
    assert run("git", "add", "-A").returncode == 0
    good = run(PRE_COMMIT, "try-repo", str(ROOT), "--all-files")  # every hook of the repo
    assert good.returncode == 0, good.stdout + good.stderr
    assert good.stdout.count("Passed") == 2
    routes = repo / "base/routes/api.yaml"
    routes.write_text(routes.read_text().replace("uri: /api/users/*", "uri: 42"))
    assert run("git", "add", "-A").returncode == 0
    bad = run(PRE_COMMIT, "try-repo", str(ROOT))
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert bad.stdout.count("Failed") == 2
    assert bad.stdout.count("base/routes/api.yaml:13:5: routes[api-users].uri: invalid configuration") == 2
