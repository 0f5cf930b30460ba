"""The one-shot commands as a person or a CI job meets them (gitsync.cli.commands): `sync --once` writes
no status ref unless asked or named, promises no next attempt, and with several sources ends with a
verdict that names what went live and what was refused. Real processes, bare repos on disk, the APISIX
double over loopback."""

from __future__ import annotations

from pathlib import Path

import pytest

from gitsync.settings import default_agent_name
from gitsync.testing.apisix import ApisixDouble
from testkit.agents import ADMIN_KEY, sources_toml
from testkit.gitservers import BareRepo
from testkit.processes import free_port, run_gitsync

ROUTE = "upstreams:\n  - id: u\n    nodes: {'127.0.0.1:1980': 1}\nroutes:\n  - id: r1\n    uri: /r1\n" \
        "    upstream_id: u\n"


def once(tmp_path: Path, gateway: str, *extra: str):
    key = tmp_path / "key"
    key.write_text(ADMIN_KEY)
    return run_gitsync("sync", "--once", "--gateway", gateway, "--admin-key-file", str(key),
                       "--state-dir", str(tmp_path / "state"), *extra)


def status_refs(repo: BareRepo) -> list[str]:
    return repo.git("for-each-ref", "--format=%(refname)", "refs/gitsync/status/").split()


def platform_and_team(tmp_path: Path, team_routes: str, team_subject: str) -> tuple[BareRepo, BareRepo, Path]:
    """A platform repo (the upstream p-u), a team repo (`team_routes`), and the settings composing them."""
    platform, team = (BareRepo.create(tmp_path / f"{name}.git") for name in ("platform", "team"))
    platform.commit({"up.yaml": "upstreams:\n  - id: p-u\n    nodes: {'127.0.0.1:1980': 1}\n"}, "platform v1")
    team.commit({"routes.yaml": team_routes}, team_subject)
    config = tmp_path / "gitsync.toml"
    tables = sources_toml(("platform", str(platform.path), "upstreams", "p-"),
                          ("team", str(team.path), "routes", "t-"))
    # the team's routes use p-u: the platform shares it
    shared = 'shares = [{ kinds = ["upstreams"], prefix = "p-", with = ["team"] }]\n'
    config.write_text(tables.replace('prefix = "p-" }]\n', 'prefix = "p-" }]\n' + shared, 1))
    return platform, team, config


@pytest.mark.slow
def test_a_one_shot_writes_no_status_ref_unless_asked_or_named(tmp_path: Path, apisix: ApisixDouble) -> None:
    repo = BareRepo.create(tmp_path / "repo.git")
    repo.commit({"r.yaml": ROUTE}, "one route")
    laptop = once(tmp_path, apisix.url, "--repo", str(repo.path), "--writeback", "on")
    assert laptop.returncode == 0, laptop.stderr
    assert [r["id"] for r in apisix.config()["routes"]] == ["r1"]
    assert status_refs(repo) == []  # the host's name is no agent of the fleet

    repo.commit({"r.yaml": ROUTE.replace("/r1", "/r2")}, "moved")
    asked = once(tmp_path, apisix.url, "--repo", str(repo.path), "--writeback", "on", "--status")
    assert asked.returncode == 0, asked.stderr
    assert status_refs(repo) == [f"refs/gitsync/status/{default_agent_name()}"]
    repo.commit({"r.yaml": ROUTE.replace("/r1", "/r3")}, "moved again")
    named = once(tmp_path, apisix.url, "--repo", str(repo.path), "--writeback", "on",
                 "--agent-name", "ci-deploy")
    assert named.returncode == 0, named.stderr
    assert "refs/gitsync/status/ci-deploy" in status_refs(repo)


@pytest.mark.slow
def test_a_one_shot_against_a_gateway_that_does_not_answer_promises_no_next_attempt(tmp_path: Path) -> None:
    repo = BareRepo.create(tmp_path / "repo.git")
    repo.commit({"r.yaml": ROUTE}, "one route")
    down = f"http://127.0.0.1:{free_port()}"
    done = once(tmp_path, down, "--repo", str(repo.path), "--writeback", "off", "--push-attempts", "1")
    assert done.returncode == 1
    assert "next attempt" not in done.stderr and down in done.stderr
    direct = once(tmp_path, down, "--dir", str(tmp_path / "nowhere"), "--push-attempts", "1")
    assert "next attempt" not in direct.stderr


@pytest.mark.slow
def test_sync_once_with_sources_names_what_went_live_and_what_was_refused(tmp_path: Path,
                                                                          apisix: ApisixDouble) -> None:
    platform, team, config = platform_and_team(
        tmp_path, "routes:\n  - id: t-r1\n    uri: /r1\n    upstream_id: p-u\n", "team v1")
    assert once(tmp_path, apisix.url, "--config", str(config), "--writeback", "off").returncode == 0

    moved = platform.commit({"up.yaml": "upstreams:\n  - id: p-u\n    nodes: {'127.0.0.1:1981': 1}\n"},
                            "platform v2")
    broken = team.commit({"routes.yaml": "routes:\n  - id: t-r1\n    uri: 42\n    upstream_id: p-u\n"},
                         "team broken")
    done = once(tmp_path, apisix.url, "--config", str(config), "--writeback", "off")
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("gitsync sync: applied composition ")
    assert f"platform {moved[:7]} platform v2" in last
    assert f"; refused: source team {broken[:7]} at validate: team:routes.yaml:3:5: routes[t-r1].uri" in last
    logged = [line for line in done.stderr.splitlines() if "sync (cli):" in line][-1]
    assert "applied composition" in logged and f"refused: source team {broken[:7]} at validate" in logged
    assert apisix.config()["upstreams"][0]["nodes"] == {"127.0.0.1:1981": 1}


@pytest.mark.slow
def test_diff_with_sources_names_the_source_whose_commit_would_delete_its_live_items(
        tmp_path: Path, apisix: ApisixDouble) -> None:
    apisix.out_of_band("upstreams", [{"id": "p-u", "nodes": {"127.0.0.1:1980": 1}, "type": "roundrobin"}])
    apisix.out_of_band("routes", [{"id": f"t-{n}", "uri": f"/{n}", "upstream_id": "p-u"} for n in range(12)])
    _, team, config = platform_and_team(
        tmp_path, "routes:\n  - id: t-new\n    uri: /new\n    upstream_id: p-u\n", "renamed")
    done = once(tmp_path, apisix.url, "--config", str(config))  # the agent, once
    shown = run_gitsync("diff", "--config", str(config), "--gateway", apisix.url, "--admin-key-file",
                        str(tmp_path / "key"), "--state-dir", str(tmp_path / "state"))
    assert shown.returncode == 4, shown.stdout + shown.stderr
    assert ("  guard: source team: it drops 12 of its own live item(s) (routes/t-0, routes/t-1, routes/t-10, "
            "routes/t-11, routes/t-2 and 7 more); to allow it, add \"Gitsync-Allow-Delete: routes\" to a new "
            f"commit of source team ({team.path})") in shown.stdout
    assert done.returncode == 1 and len(apisix.config()["routes"]) == 12  # the agent holds it the same way
