"""``gitsync init`` (its CI files run as far as a local runner allows), ``gitsync schema`` (checked with
check-jsonschema), shell completion, and the
pre-commit hooks run by the real ``pre-commit try-repo``."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from gitsync.testing.apisix import ApisixDouble
from testkit.ci import github_steps, gitlab_script, run_shell
from testkit.gitservers import git_env
from testkit.processes import ROOT, gitsync_env, run_gitsync
from testkit.venvs import build_wheel, offline_pip, venv_seeing_this_environment

CHECK_JSONSCHEMA = str(Path(sys.executable).with_name("check-jsonschema"))
PRE_COMMIT = str(Path(sys.executable).with_name("pre-commit"))


def check_jsonschema(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([CHECK_JSONSCHEMA, *args], capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This tree's wheel, alone in a directory that stands for the package index."""
    return build_wheel(tmp_path_factory.mktemp("index"))


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtualenv (this environment's libraries visible, no gitsync): setup-python's place."""
    path = tmp_path_factory.mktemp("venv")
    venv_seeing_this_environment(path)
    return path


def _scaffold(tmp_path: Path, wheel: Path) -> Path:
    repo = tmp_path / "config"
    result = run_gitsync("init", str(repo), "--wheel", str(wheel))
    assert result.returncode == 0, result.stderr
    return repo


@pytest.mark.slow
def test_init_scaffolds_a_repo_that_validates_with_ci_files_the_forges_accept(wheel: Path,
                                                                             tmp_path: Path) -> None:
    repo = _scaffold(tmp_path, wheel)
    for name in ("README.md", ".gitignore", ".pre-commit-config.yaml", ".github/workflows/gitsync.yml",
                 ".gitlab-ci.yml", "routes/api.yaml", "services/api.yaml", "upstreams/web.yaml",
                 "consumers/partners.yaml", "ci/gitsync-requirements.txt", "ci/gitsync-libraries.txt"):
        assert (repo / name).is_file(), name
    valid = run_gitsync("validate", "--dir", str(repo))
    assert valid.returncode == 0, valid.stderr
    assert "2 routes, 1 services, 1 upstreams, 2 consumers" in valid.stdout
    for schema, path in (("vendor.github-workflows", ".github/workflows/gitsync.yml"),
                         ("vendor.gitlab-ci", ".gitlab-ci.yml")):
        checked = check_jsonschema("--builtin-schema", schema, str(repo / path))
        assert checked.returncode == 0, checked.stdout + checked.stderr
    # Only the steps that need a secret name one: none at job level, none where pip runs.
    workflow = YAML(typ="safe").load((repo / ".github/workflows/gitsync.yml").read_text())
    job = workflow["jobs"]["gitsync"]
    assert "env" not in job and "env" not in workflow
    for step in job["steps"]:
        if "secrets." in json.dumps(step.get("env", {})):
            assert "pip" not in step["run"], step
    assert "secrets.GITSYNC_ADMIN_KEY" in json.dumps(job["steps"])
    gitlab = YAML(typ="safe").load((repo / ".gitlab-ci.yml").read_text())
    assert gitlab["diff"]["environment"] == {"name": "gitsync-diff", "action": "access"}
    assert "environment" not in gitlab["validate"] and "environment" not in gitlab["review"]
    assert run_gitsync("init", str(repo), "--wheel", str(wheel)).returncode == 2  # never over a repo


def _github(repo: Path, event: str, secrets: dict[str, str], env: dict[str, str]
            ) -> list[tuple[str, subprocess.CompletedProcess[str]]]:
    """Each run step of the workflow, in order, until one fails (as a runner does)."""
    done = []
    for step in github_steps(repo / ".github/workflows/gitsync.yml", "gitsync", event, secrets):
        if step.name == "gitsync review comment":
            continue  # it talks to GitHub's API: tests/feedback covers pr-comment against a forge double
        summary = {"GITHUB_STEP_SUMMARY": str(repo.parent / "summary")}
        result = run_shell(step.script, repo, {**env, **step.env, **summary})
        done.append((step.name, result))
        if result.returncode:
            break
    return done


@pytest.mark.slow
def test_the_github_workflow_runs_its_steps_with_the_pinned_wheel(apisix: ApisixDouble, wheel: Path,
                                                                  venv: Path, tmp_path: Path) -> None:
    repo = _scaffold(tmp_path, wheel)
    env = offline_pip(wheel.parent, venv)
    secrets = {"GITSYNC_GATEWAYS": apisix.url, "GITSYNC_ADMIN_KEY": "test-admin-key"}
    steps = _github(repo, "pull_request", secrets, env)
    assert [name for name, _ in steps] == ["install gitsync", "gitsync validate", "gitsync diff"]
    for name, result in steps[:2]:
        assert result.returncode == 0, (name, result.stdout + result.stderr)
    # gitsync diff in a report format exits 0 when the commit could apply: the changes are the report.
    assert steps[2][1].returncode == 0, steps[2][1].stdout + steps[2][1].stderr
    assert re.search(r"^\+\s+routes\[api-orders\]$", (repo / "gitsync-review.md").read_text(), re.M)
    probe = "import gitsync; print(gitsync.__file__)"
    installed = subprocess.run([str(venv / "bin" / "python"), "-c", probe], capture_output=True, text=True,
                               cwd=repo,
                               env=env, timeout=60).stdout
    assert installed.startswith(str(venv)), installed  # the wheel's gitsync, not this checkout
    # A repo scaffolded before the one name still has its diff (the GitHub secret GITSYNC_GATEWAY).
    old_name = {"GITSYNC_GATEWAY": apisix.url, "GITSYNC_ADMIN_KEY": "test-admin-key"}
    old = _github(repo, "pull_request", old_name, env)
    assert old[-1][0] == "gitsync diff" and old[-1][1].returncode == 0
    assert "gitsync diff skipped" not in old[-1][1].stdout
    # Without the secrets the diff says so instead of passing in silence; on a push it does not run.
    bare = _github(repo, "pull_request", {}, env)
    assert bare[-1][1].returncode == 0
    assert "::notice::gitsync diff skipped: set the CI secrets GITSYNC_GATEWAYS" in bare[-1][1].stdout
    assert [name for name, _ in _github(repo, "push", {}, env)] == ["install gitsync", "gitsync validate"]


@pytest.mark.slow
def test_a_wheel_that_is_not_the_pinned_one_is_refused(wheel: Path, tmp_path: Path) -> None:
    """Another file under the same name and version (a squatter, a rebuilt wheel) never installs.

    Its own venv: in the module's, an earlier test may have installed the pinned wheel already, and pip
    checks no hash for a requirement already satisfied (a runner's machine starts without gitsync)."""
    venv = tmp_path / "venv"
    venv_seeing_this_environment(venv)
    repo = _scaffold(tmp_path, wheel)
    index = tmp_path / "other-index"
    index.mkdir()
    with zipfile.ZipFile(wheel) as original, zipfile.ZipFile(index / wheel.name, "w") as copy:
        for item in original.infolist():
            data = original.read(item)
            copy.writestr(item, data + b"\n# changed\n" if item.filename == "gitsync/__init__.py" else data)
    [(name, result)] = _github(repo, "push", {}, offline_pip(index, venv))
    assert name == "install gitsync" and result.returncode != 0
    assert "THESE PACKAGES DO NOT MATCH THE HASHES" in result.stderr


@pytest.mark.slow
def test_the_gitlab_jobs_run_their_scripts_and_pip_never_sees_the_key(apisix: ApisixDouble, wheel: Path,
                                                                      venv: Path, tmp_path: Path) -> None:
    repo = _scaffold(tmp_path, wheel)
    env = offline_pip(wheel.parent, venv)
    validate = run_shell(gitlab_script(repo / ".gitlab-ci.yml", "validate"), repo, env)
    assert validate.returncode == 0, validate.stdout + validate.stderr
    assert "gitsync validate: ✅ valid" in (repo / "gitsync-review.md").read_text()
    # A pip that tells which secrets it was given stands in front of the real one, by the job's PATH.
    spy = tmp_path / "spy"
    (spy / "pip").mkdir(parents=True)
    (spy / "pip" / "__init__.py").write_text("")
    (spy / "pip" / "__main__.py").write_text(
        "import os, runpy, sys\n"
        "seen = sorted(k for k in os.environ if k in ('GITSYNC_ADMIN_KEY', 'GITSYNC_GATEWAYS'))\n"
        "print('pip sees:', seen)\n"
        f"sys.path.remove({str(spy)!r}); sys.modules.pop('pip')\n"
        "runpy.run_module('pip', run_name='__main__')\n")
    variables = {"GITSYNC_GATEWAYS": apisix.url, "GITSYNC_ADMIN_KEY": "test-admin-key",
                 "PYTHONPATH": str(spy), "CI_PIPELINE_SOURCE": "merge_request_event"}
    diff = run_shell(gitlab_script(repo / ".gitlab-ci.yml", "diff"), repo, {**env, **variables})
    assert diff.returncode == 0, diff.stdout + diff.stderr
    assert diff.stdout.count("pip sees: []") == 3, diff.stdout
    assert re.search(r"^\+\s+routes\[api-orders\]$", (repo / "gitsync-review.md").read_text(), re.M)
    skipped = run_shell(gitlab_script(repo / ".gitlab-ci.yml", "diff"), repo, env)
    assert skipped.returncode == 0 and "gitsync diff skipped: set GITSYNC_GATEWAYS" in skipped.stdout


@pytest.mark.slow
def test_the_scaffolds_pre_commit_hook_runs_the_installed_gitsync(wheel: Path, venv: Path,
                                                                  tmp_path: Path) -> None:
    repo = _scaffold(tmp_path, wheel)
    env = git_env(offline_pip(wheel.parent, venv) | {"PRE_COMMIT_HOME": str(tmp_path / "cache")})
    [(_, installed)] = _github(repo, "push", {}, env)[:1]
    assert installed.returncode == 0, installed.stderr

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(args, cwd=repo, env=env, capture_output=True, text=True, timeout=300)

    assert run("git", "init", "-q").returncode == 0 and run("git", "add", "-A").returncode == 0
    good = run(PRE_COMMIT, "run", "--all-files")
    assert good.returncode == 0 and "Passed" in good.stdout, good.stdout + good.stderr
    routes = repo / "routes/api.yaml"
    routes.write_text(routes.read_text().replace("methods: [GET, POST]", "methods: [GETT]"))
    assert run("git", "add", "-A").returncode == 0
    bad = run(PRE_COMMIT, "run", "--all-files")
    assert bad.returncode == 1 and "routes/api.yaml:4:" in bad.stdout and "GETT" in bad.stdout, bad.stdout


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


AGENT_SOURCES = """
[render.vars]
REGION = "eu"

[[sources]]
name = "platform"
repo = "https://git.example/platform.git"
owns = ["global_rules", { kinds = ["upstreams"], prefix = "platform-" }]
shares = [{ kinds = ["upstreams"], prefix = "platform-", with = ["orders"] }]

[[sources]]
name = "orders"
repo = "https://git.example/orders.git"
paths = ["conf"]
owns = [{ kinds = ["routes", "upstreams"], prefix = "orders-" },
        { kinds = ["consumers"], prefix = "orders-", labels = { team = "orders" } }]

[[sources]]
name = "payments"
repo = "https://git.example/payments.git"
owns = [{ kinds = ["routes", "upstreams"], prefix = "payments-" }]
"""


@pytest.mark.slow
def test_a_teams_scaffold_validates_alone_in_its_ci_with_the_platforms_shared_items(
        wheel: Path, venv: Path, tmp_path: Path) -> None:
    """Issue 46 item 2: the repo of one source of a [[sources]] agent, its CI run as a runner runs it."""
    agent = tmp_path / "gitsync.toml"
    agent.write_text(AGENT_SOURCES)
    repo = tmp_path / "orders"
    made = run_gitsync("init", str(repo), "--wheel", str(wheel), "--config", str(agent), "--source", "orders")
    assert made.returncode == 0, made.stderr
    command = "gitsync validate --dir . --config ci/gitsync-sources.toml --source orders"
    assert command in made.stdout
    assert f"entry: {command}\n" in (repo / ".pre-commit-config.yaml").read_text()
    for schema, path in (("vendor.github-workflows", ".github/workflows/gitsync.yml"),
                         ("vendor.gitlab-ci", ".gitlab-ci.yml")):
        checked = check_jsonschema("--builtin-schema", schema, str(repo / path))
        assert checked.returncode == 0, checked.stdout + checked.stderr
    workflow = (repo / ".github/workflows/gitsync.yml").read_text()
    assert "GITSYNC_ADMIN_KEY" not in workflow and "gitsync diff" not in workflow  # the platform's diff
    assert "diff" not in YAML(typ="safe").load((repo / ".gitlab-ci.yml").read_text())
    env = offline_pip(wheel.parent, venv)
    steps = _github(repo, "push", {}, env)
    assert [(name, result.returncode) for name, result in steps] == [("install gitsync", 0),
                                                                     ("gitsync validate", 0)], steps[-1]
    # the team's route on the platform's shared upstream passes; one on payments' is refused at its line
    (repo / "conf" / "routes" / "more.yaml").write_text(
        "routes:\n  - id: orders-shared\n    uri: /s\n    upstream_id: platform-web\n"
        "  - id: orders-theirs\n    uri: /t\n    upstream_id: payments-web\n")
    # gitsync is installed in the venv already: the validate step (and the GitLab job's script) alone
    [validate] = [step for step in github_steps(repo / ".github/workflows/gitsync.yml", "gitsync", "push", {})
                  if step.name == "gitsync validate"]
    refused = run_shell(validate.script, repo, {**env, **validate.env,
                                                "GITHUB_STEP_SUMMARY": str(repo.parent / "summary")})
    assert refused.returncode == 1
    assert "::error file=conf/routes/more.yaml,line=7,col=5,title=gitsync validate::routes[orders-theirs]" \
           ".upstream_id: upstream_id 'payments-web' names upstreams of source 'payments', which does not " \
           "share it with source 'orders'" in refused.stdout
    job = YAML(typ="safe").load((repo / ".gitlab-ci.yml").read_text())["validate"]
    gitlab = run_shell("set -e\n" + "\n".join(job["script"]) + "\n", repo, env)
    assert gitlab.returncode == 1 and "which does not share it with source 'orders'" in \
        (repo / "gitsync-review.md").read_text()
    # what the platform shares changes: the file is written again from the agent's settings, alone
    agent.write_text(AGENT_SOURCES.replace('with = ["orders"] }]', 'with = ["orders"] }]\n'
                                           'shared_secrets = ["VAULT_TOKEN"]'))
    again = run_gitsync("init", str(repo), "--config", str(agent), "--source", "orders", "--sources-only")
    assert again.returncode == 0, again.stderr
    assert 'paths = ["conf"]' in (repo / "ci/gitsync-sources.toml").read_text()
    assert 'REGION = "eu"' in (repo / "ci/gitsync-sources.toml").read_text() or \
        '"REGION" = "eu"' in (repo / "ci/gitsync-sources.toml").read_text()
