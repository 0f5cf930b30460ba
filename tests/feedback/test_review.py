"""The pull-request flow of the CI files ``gitsync init`` writes: each step they run (gitsync commands,
the diff's behind a check that its secrets are set) run here as the CI would, in its environment, with
the secrets only where a step names them, against the APISIX double and the forge's contract double:
problems annotated on their line and linked to it in the report, the diff in the job summary, one
sticky comment (a merge request note on GitLab) created, then updated."""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from gitsync.feedback.review import MARKER, Report, pull_request_from_env
from gitsync.testing.apisix import ApisixDouble
from testkit import ci
from testkit.ci import Step
from testkit.forges import FORGE_TOKEN, PROJECT, ForgeDouble
from testkit.processes import gitsync_env, run_gitsync

ADMIN_KEY = "test-admin-key"
HEAD = "5d41402abc4b2a76b9719d911017c592" + "00000000"
BROKEN_ROUTE = "routes:\n  - id: api-orders\n    uri: 42\n    upstream_id: web\n"
GOOD_ROUTE = "routes:\n  - id: api-orders\n    uri: /orders\n    upstream_id: web\n"


def scaffold(tmp_path: Path) -> Path:
    repo = tmp_path / "config"
    assert run_gitsync("init", str(repo)).returncode == 0
    return repo


def this_gitsync(tmp_path: Path, env: dict[str, str]) -> dict[str, str]:
    """`env` for a CI step's shell in which `gitsync` is this tree's (the install step's, on a runner)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    shim = bin_dir / "gitsync"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m gitsync "$@"\n')
    shim.chmod(0o755)
    full = gitsync_env(env)
    return full | {"PATH": f"{bin_dir}{os.pathsep}{full['PATH']}"}


def github_steps(repo: Path, secrets: dict[str, str]) -> list[Step]:
    """The workflow's gitsync steps on a pull request (the install step is the shim's)."""
    steps = ci.github_steps(repo / ".github/workflows/gitsync.yml", "gitsync", "pull_request", secrets)
    return [step for step in steps if step.name != "install gitsync"]


def run_github_steps(repo: Path, secrets: dict[str, str], env: dict[str, str]) -> list[tuple[str, int, str]]:
    """Each gitsync step as GitHub runs it on a pull request: in order, a step after a failed one only
    when its condition says always(); the secrets only where a step's env names them. (name, exit
    status, output)."""
    workflow = YAML(typ="safe").load((repo / ".github/workflows/gitsync.yml").read_text())
    always = {step.get("name") for step in workflow["jobs"]["gitsync"]["steps"]
              if "always()" in str(step.get("if", ""))}
    ran, failed = [], False
    for step in github_steps(repo, secrets):
        if failed and step.name not in always:
            continue
        result = ci.run_shell(step.script, repo, this_gitsync(repo.parent, env | step.env))
        ran.append((step.name, result.returncode, result.stdout + result.stderr))
        failed = failed or result.returncode != 0
    return ran


@pytest.mark.slow
def test_the_github_workflow_annotates_summarises_and_keeps_one_comment(tmp_path: Path, apisix: ApisixDouble):
    repo = scaffold(tmp_path)
    secrets = {"GITSYNC_GATEWAYS": apisix.url, "GITSYNC_ADMIN_KEY": ADMIN_KEY, "GITHUB_TOKEN": FORGE_TOKEN}
    steps = github_steps(repo, secrets)
    assert [s.name for s in steps] == ["gitsync validate", "gitsync diff", "gitsync review comment"]
    assert {name for s in steps for name in s.env} == {"GITSYNC_GATEWAYS", "GITSYNC_ADMIN_KEY",
                                                       "GITSYNC_FORGE_TOKEN"}
    assert set(steps[1].env) == {"GITSYNC_GATEWAYS", "GITSYNC_ADMIN_KEY"}  # the admin key: diff's alone
    (repo / "routes/api.yaml").write_text(BROKEN_ROUTE)
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"pull_request": {"number": 7, "head": {"sha": HEAD}}}))
    summary = tmp_path / "summary.md"
    with ForgeDouble("github") as github:
        github.seed_comment(7, "LGTM, but wait for the checks")
        env = {"GITHUB_ACTIONS": "true", "GITHUB_EVENT_NAME": "pull_request", "GITHUB_EVENT_PATH": str(event),
               "GITHUB_REF": "refs/pull/7/merge", "GITHUB_SHA": "f" * 40, "GITHUB_REPOSITORY": PROJECT,
               "GITHUB_SERVER_URL": github.url, "GITHUB_API_URL": github.api_url,
               "GITHUB_STEP_SUMMARY": str(summary)}

        # A broken commit: validate fails, diff does not run, the comment says why, at the line.
        ran = run_github_steps(repo, secrets, env)
        assert [(name, status) for name, status, _ in ran] == [("gitsync validate", 1),
                                                               ("gitsync review comment", 0)], ran
        anchor = "diff-" + hashlib.sha256(b"routes/api.yaml").hexdigest() + "R3"
        assert "::error file=routes/api.yaml,line=3,col=5,title=gitsync validate::routes[api-orders].uri:" \
            in ran[0][2]
        report = summary.read_text()
        link = f"{github.url}/{PROJECT}/pull/7/files#{anchor}"
        assert f"[`routes/api.yaml:3`]({link}) routes\\[api-orders\\].uri" in report
        assert "would be refused" in report
        [comment] = [c for c in github.comments[7] if MARKER in c["body"]]
        assert comment["body"] == (repo / "gitsync-review.md").read_text()

        # Fixed: validate passes, diff shows the changes, the same comment is updated.
        (repo / "routes/api.yaml").unlink()
        (repo / "routes/orders.yaml").write_text(GOOD_ROUTE.replace("api-orders", "orders"))
        ran = run_github_steps(repo, secrets, env)
        assert [(name, status) for name, status, _ in ran] == [("gitsync validate", 0), ("gitsync diff", 0),
                                                               ("gitsync review comment", 0)]
        assert "+     routes[orders]" in summary.read_text()
        ours = [c for c in github.comments[7] if MARKER in c["body"]]
        assert len(ours) == 1 and ours[0]["id"] == comment["id"] and "routes[orders]" in ours[0]["body"]
        assert "✅ valid; 7 item change(s) on the gateways" in ours[0]["body"]
        assert github.violations == []


@pytest.mark.slow
def test_the_gitlab_pipeline_keeps_one_merge_request_note(tmp_path: Path, apisix: ApisixDouble):
    repo = scaffold(tmp_path)
    pipeline = YAML(typ="safe").load((repo / ".gitlab-ci.yml").read_text())
    jobs = [pipeline[name] for name in ("validate", "diff", "review")]
    assert [job["stage"] for job in jobs] == pipeline["stages"]
    (repo / "routes/api.yaml").write_text(BROKEN_ROUTE)
    with ForgeDouble("gitlab") as gitlab:
        gitlab.seed_comment(3, "added 1 commit", system=True)
        env = {"GITLAB_CI": "true", "CI_PIPELINE_SOURCE": "merge_request_event", "CI_SERVER_URL": gitlab.url,
               "CI_API_V4_URL": gitlab.api_url, "CI_PROJECT_PATH": PROJECT, "CI_MERGE_REQUEST_IID": "3",
               "CI_COMMIT_SHA": HEAD, "GITSYNC_GATEWAYS": apisix.url, "GITSYNC_ADMIN_KEY": ADMIN_KEY,
               "GITSYNC_FORGE_TOKEN": FORGE_TOKEN}

        def run(job: dict[str, Any]) -> int:
            script = "set -e\n" + "\n".join(job["script"]) + "\n"  # before_script installs: the shim's
            return ci.run_shell(script, repo, this_gitsync(tmp_path, env)).returncode

        assert [run(job) for job in (jobs[0], jobs[2])] == [1, 0]  # diff's stage is skipped after a failure
        note = next(c for c in gitlab.comments[3] if MARKER in c["body"])
        link = f"{gitlab.url}/{PROJECT}/-/blob/{HEAD}/routes/api.yaml#L3"
        assert f"[`routes/api.yaml:3`]({link})" in note["body"]
        (repo / "routes/api.yaml").write_text(GOOD_ROUTE)
        assert [run(job) for job in jobs] == [0, 0, 0]
        notes = [c for c in gitlab.comments[3] if MARKER in c["body"]]
        assert len(notes) == 1 and notes[0]["id"] == note["id"]
        assert "gitsync diff: ✅ valid" in notes[0]["body"]
        assert gitlab.violations == []


def test_the_ci_environment_says_which_pull_request_and_forge(tmp_path: Path):
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"pull_request": {"number": 12, "head": {"sha": HEAD}}}))
    github = pull_request_from_env({"GITHUB_ACTIONS": "true", "GITHUB_EVENT_PATH": str(event),
                                    "GITHUB_REPOSITORY": "o/r", "GITHUB_SERVER_URL": "https://github.com",
                                    "GITHUB_API_URL": "https://api.github.com"})
    assert github is not None and (github.kind, github.number, github.sha, github.project) == (
        "github", 12, HEAD, "o/r")
    gitea = pull_request_from_env({"GITHUB_ACTIONS": "true", "GITEA_ACTIONS": "true",
                                   "GITHUB_REF": "refs/pull/4/head", "GITHUB_SERVER_URL": "https://codeberg.org",
                                   "GITHUB_REPOSITORY": "o/r"})
    assert gitea is not None
    assert (gitea.kind, gitea.number, gitea.api_url) == ("gitea", 4, "https://codeberg.org/api/v1")
    push = pull_request_from_env({"GITLAB_CI": "true", "CI_SERVER_URL": "https://gitlab.example",
                                  "CI_PROJECT_PATH": "g/s/p", "CI_COMMIT_SHA": HEAD})
    assert push is not None and push.number is None and push.api_url == "https://gitlab.example/api/v4"
    bitbucket = pull_request_from_env({"BITBUCKET_BUILD_NUMBER": "9", "BITBUCKET_WORKSPACE": "ws",
                                       "BITBUCKET_REPO_SLUG": "cfg", "BITBUCKET_PR_ID": "5"})
    assert bitbucket is not None and (bitbucket.project, bitbucket.number) == ("ws/cfg", 5)
    assert pull_request_from_env({}) is None


def test_a_report_escapes_what_it_quotes_and_annotations_escape_workflow_commands():
    report = Report("validate", "github", env={})
    report.problem("conf/a.yaml:3:5: routes[r1].desc: <script> *bold* 50%\nnext")
    assert report.annotations() == ["::error file=conf/a.yaml,line=3,col=5,title=gitsync validate::"
                                    "routes[r1].desc: <script> *bold* 50%25%0Anext"]
    assert "routes\\[r1\\].desc: \\<script\\> \\*bold\\* 50%" in report.markdown()
