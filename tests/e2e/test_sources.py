"""Many teams, one gateway, with real processes: two team repos and a platform repo on one git daemon,
one `gitsync run` agent, the APISIX double (its data plane forwarding to a real upstream, for the
health checks). Each source is its own transaction."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from ruamel.yaml import YAML

from gitsync.testing.apisix import ApisixDouble
from testkit.agents import ADMIN_KEY, CHECKS, sources_toml, upstream
from testkit.gitservers import BareRepo, GitDaemon, git
from testkit.processes import free_port, run_gitsync, wait_for

PLATFORM_UPSTREAM = ("upstreams:\n  - id: platform-web\n    type: roundrobin\n    nodes:\n"
                     "      \"{node}\": 1\n")


def global_rule(plugin: str) -> str:
    return f"global_rules:\n  - id: platform-observability\n    plugins:\n      {plugin}: {{}}\n"


def team_a(uri: str, *extra: str) -> dict[str, str]:
    """Team A's repo: a route on the platform's upstream (and `extra` routes)."""
    routes = f"routes:\n  - id: a-orders\n    uri: {uri}\n    upstream_id: platform-web\n" + "".join(extra)
    return {"routes/orders.yaml": routes}


def team_b(node: str, uri: str = "/orders") -> dict[str, str]:
    """Team B's repo: its own upstream and route, and a health check through the gateway on it."""
    return {"conf/routes.yaml": ("upstreams:\n  - id: b-orders\n    type: roundrobin\n    nodes:\n"
                                 f"      \"{node}\": 1\n"
                                 f"routes:\n  - id: b-orders\n    uri: {uri}\n    host: api.example.com\n"
                                 "    upstream_id: b-orders\n"),
            "conf/checks.yaml": CHECKS}


def note(repo: BareRepo, sha: str) -> tuple[str, list[str]] | None:
    """The stage and errors of this agent's section of the note on `sha` in `repo`, once there is one."""
    text = git("--git-dir", str(repo.path), "notes", "--ref=gitsync", "show", sha, check=False)
    sections = [s for s in YAML(typ="safe").load_all(text or "") if s and s.get("agent") == "edge-1"]
    return (sections[0]["stage"], sections[0]["errors"]) if sections else None


def live(double: ApisixDouble, kind: str) -> dict[str, dict]:
    return {item.get("id"): item for item in double.config().get(kind) or []}


@pytest.mark.slow
def test_three_repos_one_agent_each_source_its_own_transaction(spawn, git_daemon: GitDaemon,
                                                              remotes_root: Path, tmp_path: Path) -> None:
    platform, a, b = (BareRepo.create(remotes_root / f"{tmp_path.name}-{name}.git")
                      for name in ("platform", "a", "b"))
    with ApisixDouble(ADMIN_KEY, forward=True) as double, upstream() as node:
        platform.commit({"platform.yaml": PLATFORM_UPSTREAM.format(node=node) + global_rule("prometheus")},
                        "platform v1")
        a_first = a.commit(team_a("/a/v1"), "a v1")
        b.commit(team_b(node), "b v1")
        config = tmp_path / "gitsync.toml"
        config.write_text(f"""
[gateways]
proxy_urls = ["{double.proxy_url}"]

[writeback]
agent_name = "edge-1"

[[sources]]
name = "platform"
repo = "{git_daemon.url(platform.path.name)}"
owns = ["global_rules", "plugin_metadata", {{ kinds = ["upstreams"], prefix = "platform-" }}]
shares = [{{ kinds = ["upstreams"], prefix = "platform-" }}]

[[sources]]
name = "a"
repo = "{git_daemon.url(a.path.name)}"
owns = [{{ kinds = ["routes", "services", "upstreams"], prefix = "a-" }}]

[[sources]]
name = "b"
repo = "{git_daemon.url(b.path.name)}"
owns = [{{ kinds = ["routes", "services", "upstreams"], prefix = "b-" }}]
""")
        token = tmp_path / "ui-token"
        token.write_text("ui-token-of-the-sources-agent")
        agent = spawn(None, "--config", str(config), "--ui", "--ui-token-file", str(token),
                      gateways=[double.url])

        # a team route using the platform's upstream renders and applies
        wait_for(lambda: set(live(double, "routes")) == {"a-orders", "b-orders"}, 15, "every source live")
        assert live(double, "routes")["a-orders"]["upstream_id"] == "platform-web"
        assert httpx.get(double.proxy_url + "/orders", headers={"Host": "api.example.com"}).status_code == 200
        # the web view: which source, file and commit each item came from
        page = wait_for(lambda: (answer := agent.get("/items/routes/a-orders", bearer=token.read_text()))
                        .status_code == 200 and answer.text, 10, "the item page")
        assert "a:routes/orders.yaml:2" in page and a_first[:7] in page

        # a broken commit in A leaves B's new commit applied and A's last good items live
        a_broken = a.commit(team_a("42"), "a broken")
        more = {"conf/more.yaml": "routes:\n  - id: b-more\n    uri: /more\n    upstream_id: b-orders\n"}
        b_new = b.commit(team_b(node, "/orders") | more, "b v2")
        wait_for(lambda: "b-more" in live(double, "routes"), 10, "b's new commit applied")
        assert live(double, "routes")["a-orders"]["uri"] == "/a/v1"
        sources = wait_for(lambda: (s := agent.state().get("sources", {})) and a_broken in s["a"]["bad"]
                           and s["b"]["last_good"] == b_new and s, 5, "a's commit refused, b's the last good")
        assert sources["a"]["last_good"] == a_first
        stage, errors = wait_for(lambda: note(a, a_broken), 10, "the note on a's refused commit, in a's repo")
        assert stage == "validate"
        assert errors[0].startswith("routes/orders.yaml:3:5: routes[a-orders].uri: invalid configuration")

        # a platform change to a global rule reaches the gateway while A is broken
        platform.commit({"platform.yaml": PLATFORM_UPSTREAM.format(node=node) + global_rule("zipkin")},
                        "platform: zipkin everywhere")
        wait_for(lambda: "zipkin" in live(double, "global_rules")["platform-observability"]["plugins"], 10,
                 "the platform's change live")
        assert live(double, "routes")["a-orders"]["uri"] == "/a/v1"

        # A adding a route with B's id prefix is refused at its file:line
        stolen = "  - id: b-stolen\n    uri: /stolen\n    upstream_id: platform-web\n"
        a_steals = a.commit(team_a("/a/v2", stolen), "a takes b's prefix")
        stage, errors = wait_for(lambda: note(a, a_steals), 10, "the note on a's second refused commit")
        assert (stage, errors) == ("ownership", [
            "routes/orders.yaml:5:5: routes[b-stolen]: source 'a' may not declare this item: it owns routes "
            "with id prefix 'a-'; it belongs to source 'b' (routes with id prefix 'b-')"])
        assert set(live(double, "routes")) == {"a-orders", "b-orders", "b-more"}
        assert live(double, "routes")["a-orders"]["uri"] == "/a/v1"

        # a health-check failure in B's commit rolls back only B's items
        a_fixed = a.commit(team_a("/a/v3"), "a fixed")
        wait_for(lambda: live(double, "routes")["a-orders"]["uri"] == "/a/v3", 10, "a's fix live")
        dead = f"127.0.0.1:{free_port()}"  # nothing answers there: the data plane gives 502
        b_bad = b.commit(team_b(dead), "b to an upstream that does not answer")
        stage, errors = wait_for(lambda: note(b, b_bad), 15, "the note on b's unhealthy commit")
        assert stage == "health"
        assert errors[0].startswith(f"{double.url}: conf/checks.yaml:2:5: check orders-answer failed")
        wait_for(lambda: live(double, "upstreams")["b-orders"]["nodes"] == {node: 1}, 5, "b rolled back")
        assert live(double, "routes")["a-orders"]["uri"] == "/a/v3"  # a's newer commit stays
        assert "b-more" in live(double, "routes")  # b is back at b v2's items
        sources = wait_for(lambda: b_bad in (s := agent.state()["sources"])["b"]["bad"] and s, 5, "b refused")
        assert sources["b"]["bad"][b_bad].startswith("health: ")
        assert (sources["a"]["last_good"], sources["b"]["last_good"]) == (a_fixed, b_new)
        assert httpx.get(double.proxy_url + "/orders", headers={"Host": "api.example.com"}).status_code == 200


def test_render_validate_and_diff_compose_the_sources_as_the_agent_would(git_daemon: GitDaemon,
                                                                         remotes_root: Path,
                                                                         tmp_path: Path) -> None:
    platform, a = (BareRepo.create(remotes_root / f"{tmp_path.name}-{name}.git")
                   for name in ("platform", "a"))
    platform.commit({"platform.yaml": PLATFORM_UPSTREAM.format(node="127.0.0.1:1980")}, "platform v1")
    a.commit(team_a("/a/v1"), "a v1")
    config = tmp_path / "gitsync.toml"
    config.write_text(sources_toml(("platform", git_daemon.url(platform.path.name), "upstreams", "platform-"),
                                   ("a", git_daemon.url(a.path.name), "routes", "a-")))
    key = tmp_path / "admin-key"
    key.write_text(ADMIN_KEY)
    common = ["--config", str(config), "--state-dir", str(tmp_path / "state")]
    rendered = run_gitsync("render", *common)
    assert rendered.returncode == 0, rendered.stderr
    payload = json.loads(rendered.stdout)
    assert [r["id"] for r in payload["routes"]] == ["a-orders"]
    assert [u["id"] for u in payload["upstreams"]] == ["platform-web"]  # referred to across sources
    explained = run_gitsync("render", *common, "--explain", "routes", "a-orders")
    assert explained.returncode == 0 and "a:routes/orders.yaml:2" in explained.stdout, explained.stdout
    assert run_gitsync("validate", *common).returncode == 0
    with ApisixDouble(ADMIN_KEY) as double:
        diff = run_gitsync("diff", *common, "--gateway", double.url, "--admin-key-file", str(key))
        assert diff.returncode == 1, diff.stderr
        assert "a-orders" in diff.stdout and "platform-web" in diff.stdout, diff.stdout
        # an item a source does not own, and a reference that names nothing, at source:file:line
        a.commit(team_a("/a/v1", "  - id: stray\n    uri: /stray\n    upstream_id: platform-gone\n"), "a v2")
        refused = run_gitsync("validate", *common)
        assert refused.returncode == 1
        assert "a:routes/orders.yaml:5" in refused.stderr and "stray" in refused.stderr, refused.stderr
        assert "Traceback" not in refused.stderr
        a.commit(team_a("/a/v1", "  - id: a-more\n    uri: /more\n    upstream_id: platform-gone\n"), "a v3")
        dangling = run_gitsync("validate", *common)
        assert dangling.returncode == 1 and "platform-gone" in dangling.stderr, dangling.stderr
        assert "a:routes/orders.yaml:" in dangling.stderr
        assert double.config().get("routes") is None  # diff and validate never push
