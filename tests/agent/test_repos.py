"""An agent's repos, one payload (gitsync.agent.repos): ``[[sources]]`` settings, ownership,
composition, and the agent with each repo its own transaction (in process, against bare repos on disk
and the APISIX double over loopback); and the repo of ``[source]`` as a composition of one, the same
bytes either way. The same with `gitsync run` as a real process and a git daemon:
tests/e2e/test_sources.py."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ruamel.yaml import YAML

from gitsync.agent.outcomes import Stage, SyncResult
from gitsync.agent.sync import Agent
from gitsync.kinds import KINDS, item_id
from gitsync.ownership import Claim, Ownership, Share, Traffic, static_overlap, trespass
from gitsync.problems import Location
from gitsync.push.plan import items_equal
from gitsync.render import RenderOptions, render
from gitsync.render.compose import Part, compose, dangling, facts_of, shared_kinds
from gitsync.render.references import refers_to
from gitsync.settings import SettingsError, load, source_settings
from gitsync.source.mirror import MAX_PACKS, UNTIDY_PACKS
from gitsync.testing.apisix import ApisixDouble, Reply, json_body
from testkit.agents import ADMIN_KEY, CHECKS, upstream
from testkit.gitservers import BareRepo, git
from testkit.processes import ROOT, free_port, run_gitsync

# ---------------------------------------------------------------------------------------------------------
# settings


def test_sources_take_the_keys_of_source_and_inherit_the_others(tmp_path: Path) -> None:
    token = tmp_path / "orders-token"
    token.write_text("orders-token-value")
    config = tmp_path / "gitsync.toml"
    config.write_text(f"""
[source]
git_timeout = "7s"
paths = ["base"]

[[sources]]
name = "platform"
repo = "https://git.example/platform.git"
owns = ["global_rules", {{ kinds = ["upstreams"], prefix = "platform-" }}]

[[sources]]
name = "orders"
repo = "https://git.example/orders.git"
ref = "release"
paths = ["base", "envs/prod"]
git_token_file = "{token}"
owns = [{{ kinds = ["routes", "upstreams"], prefix = "orders-" }},
        {{ kinds = ["consumers"], prefix = "orders-", labels = {{ team = "orders" }} }}]
""")
    settings = load(config=config, env={}, require=("repo",))
    platform, orders = settings.sources
    assert (platform.name, platform.values) == ("platform", {"repo": "https://git.example/platform.git"})
    assert orders.values["ref"] == "release" and orders.values["paths"] == ("base", "envs/prod")
    assert orders.values["git_token"].reveal() == "orders-token-value"
    assert orders.owns.claims == (Claim(("routes", "upstreams"), "orders-"),
                                  Claim(("consumers",), "orders-", (("team", "orders"),)))
    own = source_settings(settings, platform)
    assert (own.repo, own.ref, own.paths, own.git_timeout) == ("https://git.example/platform.git", "main",
                                                               ("base",), 7.0)
    assert own.state_dir == settings.state_dir / "sources" / "platform" and own.sources == ()


def test_the_example_for_a_platform_and_twenty_teams_loads(tmp_path: Path) -> None:
    text = (ROOT / "examples" / "sources" / "gitsync.toml").read_text()
    for name in ("known_hosts", "deploy-key", "allowed_signers", "admin_key"):
        (tmp_path / name).write_text("placeholder-" + name)
    config = tmp_path / "gitsync.toml"
    config.write_text(text.replace("/etc/gitsync/", f"{tmp_path}/").replace("/run/credentials/gitsync/",
                                                                             f"{tmp_path}/"))
    settings = load(config=config, env={})
    assert [s.name for s in settings.sources][:3] == ["platform", "orders", "payments"]
    assert len(settings.sources) == 21
    assert {source_settings(settings, s).verify for s in settings.sources} == {"ssh"}


@pytest.mark.parametrize(("owns_a", "owns_b", "error"), [
    ('["routes"]', '[{ kinds = ["routes"], prefix = "b-" }]', "both claim every item of routes / routes with "
                                                             "id prefix 'b-'"),
    ('[{ kinds = ["routes"], prefix = "a-" }]', '[{ kinds = ["routes"], prefix = "a-b" }]', "id prefix 'a-'"),
    # labels do not tell two sources apart: one id, two owners
    ('[{ kinds = ["routes"], prefix = "a-", labels = { team = "a" } }]',
     '[{ kinds = ["routes"], prefix = "a-", labels = { team = "b" } }]', "label team=b"),
    ('[{ kinds = ["routes"], prefix = "a-", labels = { team = "a" } }]',
     '[{ kinds = ["routes"], prefix = "a" }]', "id prefix 'a'"),
])
def test_two_sources_that_may_claim_one_item_are_a_settings_error_naming_both(
        tmp_path: Path, owns_a: str, owns_b: str, error: str) -> None:
    config = tmp_path / "gitsync.toml"
    config.write_text(f'[[sources]]\nname = "a"\nrepo = "/a"\nowns = {owns_a}\n\n'
                      f'[[sources]]\nname = "b"\nrepo = "/b"\nowns = {owns_b}\n')
    with pytest.raises(SettingsError) as refused:
        load(config=config, env={})
    text = str(refused.value)
    assert text.startswith(f"{config}:6: sources[1]: sources 'a' and 'b' may both claim one item: ")
    assert error in text and f"(also {config}:1: sources[0])" in text


@pytest.mark.parametrize(("owns_a", "owns_b"), [
    ('[{ kinds = ["routes"], prefix = "a-" }]', '[{ kinds = ["routes"], prefix = "b-" }]'),
    ('[{ kinds = ["consumers"], prefix = "a-", labels = { team = "a" } }]',
     '[{ kinds = ["consumers"], prefix = "b-", labels = { team = "a" } }]'),
    ('["routes"]', '["upstreams"]'),
])
def test_sources_told_apart_by_their_id_prefixes_start(tmp_path: Path, owns_a: str,
                                                                   owns_b: str) -> None:
    config = tmp_path / "gitsync.toml"
    config.write_text(f'[[sources]]\nname = "a"\nrepo = "/a"\nowns = {owns_a}\n\n'
                      f'[[sources]]\nname = "b"\nrepo = "/b"\nowns = {owns_b}\n')
    assert [s.name for s in load(config=config, env={}).sources] == ["a", "b"]


@pytest.mark.parametrize(("text", "error"), [
    ('[[sources]]\nrepo = "/a"\nowns = ["routes"]\n', ":1: sources[0]: every source needs a name"),
    ('[[sources]]\nname = "a"\nrepo = "/a"\n', ":1: sources[0]: source 'a' owns nothing"),
    ('[[sources]]\nname = "a"\nrepo = "/a"\nowns = ["route"]\n', ":4: sources[0].owns: unknown kind 'route' "
                                                                "(did you mean 'routes'?)"),
    ('[[sources]]\nname = "a"\nrepos = "/a"\nowns = ["routes"]\n', ":3: sources[0].repos: unknown key "
                                                                  "(did you mean 'repo'?)"),
    ('[[sources]]\nname = "a"\nowns = ["routes"]\n', ":1: sources[0]: source 'a' has no repo"),
    ('[[sources]]\nname = "a"\nrepo = "/a"\nowns = ["routes"]\n[[sources]]\nname = "a"\nrepo = "/b"\n'
     'owns = ["ssls"]\n', ":5: sources[1]: a second source named 'a'"),
    ('[source]\nrepo = "/x"\n[[sources]]\nname = "a"\nrepo = "/a"\nowns = ["routes"]\n',
     ":2: source.repo: repo cannot be set with [[sources]]"),
    ('[gateways]\nunmanaged = ["secrets"]\n[[sources]]\nname = "a"\nrepo = "/a"\nowns = ["secrets"]\n',
     ":3: sources[0]: source 'a' owns secrets, which unmanaged leaves as it is live"),
    ('[[sources]]\nname = "a"\nrepo = "/a"\ngit_token = "x"\nowns = ["routes"]\n',
     ":4: sources[0].git_token: secrets are not read from the settings file"),
    ('[[sources]]\nname = "a"\nrepo = "/a"\nowns = [{ kinds = ["consumers"], labels = { team = "a" } }]\n',
     ':4: sources[0].owns: a claim by labels needs an id prefix too ({ kinds = ["consumers"], prefix = '
     '"<team>-", labels = { ... } }): the owner of an id must follow from the settings alone'),
    ('[[sources]]\nname = "a"\nrepo = "/a"\nowns = [{ kinds = ["upstreams"], prefix = "a-" }]\n'
     'shares = [{ kinds = ["routes"] }]\n',
     ":5: sources[0].shares: source 'a' shares routes, which it does not own (it owns upstreams)"),
    ('[[sources]]\nname = "a"\nrepo = "/a"\nowns = ["upstreams"]\nshares = [{ kinds = ["upstreams"], '
     'with = ["b"] }]\n', ":1: sources[0]: source 'a' shares with 'b', which is no source"),
    ('[[sources]]\nname = "a"\nrepo = "/a"\nowns = ["upstreams"]\nshares = [{ kinds = ["upstreams"], '
     'prefix = "a-", ids = ["a-1"] }]\n', ":5: sources[0].shares: a share names a prefix or ids, not both"),
    ('[[sources]]\nname = "a"\nrepo = "/a"\nowns = ["routes"]\ntraffic = { paths = ["payments"] }\n',
     ":5: sources[0].traffic: paths: 'payments' is no path prefix (one starts with '/')"),
    ('[[sources]]\nname = "a"\nrepo = "/a"\nowns = ["routes"]\ntraffic = { host = ["x"] }\n',
     ":5: sources[0].traffic: unknown key 'host' (did you mean 'hosts'?)"),
    ('[[sources]]\nname = "a"\nrepo = "/a"\nowns = ["routes"]\ntraffic = { hosts = ["api.example.com"] }\n'
     '[[sources]]\nname = "b"\nrepo = "/b"\nowns = ["upstreams"]\n'
     'traffic = { hosts = ["*.example.com"], paths = ["/b"] }\n',
     ":6: sources[1]: sources 'a' and 'b' both own traffic: hosts api.example.com / hosts *.example.com; "
     "paths /b (also "),
])
def test_a_bad_source_table_is_a_settings_error_at_its_line(tmp_path: Path, text: str, error: str) -> None:
    config = tmp_path / "gitsync.toml"
    config.write_text(text)
    with pytest.raises(SettingsError) as refused:
        load(config=config, env={})
    assert str(refused.value).startswith(str(config) + error), str(refused.value)


def test_commit_statuses_on_the_forge_are_refused_with_sources_unless_turned_off(tmp_path: Path) -> None:
    config = tmp_path / "gitsync.toml"
    config.write_text('[[sources]]\nname = "a"\nrepo = "https://git.example/a.git"\nowns = ["routes"]\n')
    env = {"GITSYNC_FORGE_TOKEN": "forge-token-of-the-test"}
    with pytest.raises(SettingsError) as refused:
        load(config=config, env=env)
    assert str(refused.value).startswith("GITSYNC_FORGE_TOKEN: commit statuses on the forge cannot be posted "
                                         "with [[sources]]")
    assert load(config=config, env=env | {"GITSYNC_FORGE_STATUS": "off"}).forge_token is not None


def test_overlapping_sources_stop_the_agent_with_exit_2(tmp_path: Path) -> None:
    config = tmp_path / "gitsync.toml"
    config.write_text('[gateways]\ngateways = ["http://127.0.0.1:9"]\n'
                      '[[sources]]\nname = "a"\nrepo = "/a"\nowns = ["routes"]\n'
                      '[[sources]]\nname = "b"\nrepo = "/b"\n'
                      'owns = [{ kinds = ["routes"], prefix = "b-" }]\n')
    result = run_gitsync("run", "--config", str(config), "--state-dir", str(tmp_path / "state"))
    assert result.returncode == 2
    assert f"{config}:7: sources[1]: sources 'a' and 'b' may both claim one item" in result.stderr


# ---------------------------------------------------------------------------------------------------------
# ownership, composition, choice (pure)


def test_static_overlap_is_decided_by_ids_and_labels_only_narrow_a_claim() -> None:
    by_prefix, by_label = Claim(("routes",), "a-"), Claim(("routes",), "b-", (("team", "b"),))
    assert static_overlap(by_prefix, by_label) is None
    assert static_overlap(by_prefix, Claim(("upstreams",))) is None
    assert static_overlap(Claim(("routes",), "a-"), Claim(("routes",), "b-")) is None
    assert static_overlap(Claim(("routes",)), by_label)
    assert static_overlap(Claim(("routes",), "b-", (("team", "c"),)), by_label)  # one id, two owners
    assert by_prefix.matches("routes", "a-1", {}) and not by_prefix.matches("routes", "b-1", {})
    assert by_label.matches("routes", "b-x", {"labels": {"team": "b", "env": "p"}})
    assert not by_label.matches("routes", "b-x", {"labels": {"team": "a"}})
    assert not by_label.matches("routes", "b-x", {})


def rendered(files: dict[str, str], **options: Any) -> Any:
    return render({name: text.encode() for name, text in files.items()}, RenderOptions(**options))


PLATFORM = Ownership((Claim(("global_rules",)), Claim(("upstreams",), "platform-")),
                     shares=(Share(("upstreams",), prefix="platform-"),))
TEAM_A = Ownership((Claim(("routes", "upstreams"), "a-"),))
TEAM_B = Ownership((Claim(("routes",), "b-", (("team", "b"),)),))
OTHERS = (("platform", PLATFORM), ("a", TEAM_A), ("b", TEAM_B))


def part(name: str, files: dict[str, str]) -> Part:
    owns = dict(OTHERS)[name]
    return Part(name, "0" * 40, rendered(files, unmanaged=shared_kinds(owns)), owns)


def test_an_item_outside_its_sources_ownership_is_refused_at_its_line_naming_the_ids_owner() -> None:
    a = part("a", {"r.yaml": "routes:\n  - id: a-one\n    uri: /a\n    upstream_id: platform-web\n"
                             "  - id: b-one\n    uri: /b\n    upstream_id: platform-web\n"
                             "    labels: {team: b}\n"
                             "  - id: a-two\n    uri: /c\n    upstream_id: platform-web\n"
                             "    labels: {team: b}\n"})
    assert [str(p) for p in facts_of(a, OTHERS).problems] == [  # a label names no owner: the id does
        "r.yaml:5:5: routes[b-one]: source 'a' may not declare this item: it owns routes with id prefix "
        "'a-'; it belongs to source 'b' (routes with id prefix 'b-' and label team=b)"]
    b = part("b", {"r.yaml": "routes:\n  - id: a-three\n    uri: /a\n    upstream_id: platform-web\n"
                             "    labels: {team: b}\n"
                             "  - id: b-four\n    uri: /b\n    upstream_id: platform-web\n"})
    assert [str(p) for p in facts_of(b, OTHERS).problems] == [
        "r.yaml:2:5: routes[a-three]: source 'b' may not declare this item: it owns routes with id prefix "
        "'b-' and label team=b; it belongs to source 'a' (routes with id prefix 'a-')",
        "r.yaml:6:5: routes[b-four]: source 'b' may not declare this item: it owns routes with id prefix "
        "'b-' and label team=b; the id is its own, the item lacks the labels"]


def test_a_composed_payload_keeps_the_sources_order_and_places_and_checks_references_across_them() -> None:
    platform = part("platform", {"p.yaml": UPSTREAM})
    a = part("a", {"r.yaml": "routes:\n  - id: a-one\n    uri: /a\n    upstream_id: platform-web\n"
                             "  - id: a-two\n    uri: /b\n    upstream_id: platform-gone\n"
                             "upstreams:\n  - id: a-up\n    nodes: {\"127.0.0.1:2\": 1}\n"})
    parts = [platform, a]
    composed = compose(parts)
    assert [u["id"] for u in composed.payload["upstreams"]] == ["platform-web", "a-up"]
    assert composed.ids["upstreams"] == ["platform-web", "a-up"]
    assert len(composed.contents["routes"]) == 2 and len(composed.splits["upstreams"]) == 2
    assert composed.source_map.location("upstreams", 1) == Location("a:r.yaml", 9, 5)
    assert composed.source_map.index_of("routes", "a-two") == 1
    problem = composed.source_map.problem("routes", 1, "no", ("uri",))
    assert str(problem) == "a:r.yaml:6:5: routes[a-two].uri: no"
    found = dangling(parts, [facts_of(p, OTHERS) for p in parts])
    assert [(d.source, d.target, str(d.problem)) for d in found] == [
        ("a", ("upstreams", "platform-gone"),
         "a:r.yaml:7:5: routes[a-two].upstream_id: upstream_id 'platform-gone' names no item of upstreams")]


# ---------------------------------------------------------------------------------------------------------
# the agent (in process)


@dataclass
class Fleet:
    """Three source repos, one gateway, and an agent over them (made by `start`)."""

    root: Path
    apisix: ApisixDouble
    platform: BareRepo
    a: BareRepo
    b: BareRepo
    extra: str = ""

    def settings_file(self) -> Path:
        path = self.root / "gitsync.toml"
        path.write_text(f"""
[gateways]
gateways = ["{self.apisix.url}"]
admin_key_file = "{self.root / 'key'}"
{self.extra}
[agent]
state_dir = "{self.root / 'state'}"
[writeback]
agent_name = "edge-1"

[[sources]]
name = "platform"
repo = "{self.platform.path}"
owns = ["global_rules", {{ kinds = ["upstreams"], prefix = "platform-" }}]
shares = [{{ kinds = ["upstreams"], prefix = "platform-" }}]

[[sources]]
name = "a"
repo = "{self.a.path}"
owns = [{{ kinds = ["routes", "upstreams"], prefix = "a-" }}]

[[sources]]
name = "b"
repo = "{self.b.path}"
owns = [{{ kinds = ["routes", "upstreams"], prefix = "b-" }}]
""")
        return path

    def start(self) -> Agent:
        agent = Agent(load(config=self.settings_file(), env={}), env={})
        self.agents.append(agent)
        return agent

    def uris(self) -> dict[str, str]:
        return {r["id"]: r.get("uri") for r in self.apisix.config().get("routes") or []}

    def __post_init__(self) -> None:
        self.agents: list[Agent] = []
        (self.root / "key").write_text(ADMIN_KEY)


UPSTREAM = "upstreams:\n  - id: platform-web\n    nodes: {\"127.0.0.1:1980\": 1}\n"


def route(rid: str, uri: str, upstream: str = "platform-web", extra: str = "") -> str:
    return f"  - id: {rid}\n    uri: {uri}\n    upstream_id: {upstream}\n{extra}"


def rule(plugin: str) -> str:
    return f"global_rules:\n  - id: platform-rule\n    plugins: {{{plugin}: {{}}}}\n"


@pytest.fixture
def fleet(tmp_path: Path, apisix: ApisixDouble) -> Iterator[Fleet]:
    made = Fleet(tmp_path, apisix, *repos(tmp_path))
    made.platform.commit({"p.yaml": UPSTREAM + rule("prometheus")}, "platform v1")
    made.a.commit({"r.yaml": "routes:\n" + route("a-one", "/a/1")}, "a v1")
    made.b.commit({"r.yaml": "routes:\n" + route("b-one", "/b/1")}, "b v1")
    yield made
    for agent in made.agents:
        agent.close()


def repos(root: Path) -> list[BareRepo]:
    return [BareRepo.create(root / f"{name}.git") for name in ("platform", "a", "b")]


def note(repo: BareRepo, sha: str) -> str:
    return git("--git-dir", str(repo.path), "notes", "--ref=gitsync", "show", sha, check=False) or ""


def status_of(repo: BareRepo, agent: str = "edge-1") -> dict[str, Any]:
    text = git("--git-dir", str(repo.path), "show", f"refs/gitsync/status/{agent}:status.yaml", check=False)
    return YAML(typ="safe").load(text) if text else {}


def test_a_broken_commit_in_one_source_leaves_the_others_moving(fleet: Fleet) -> None:
    agent = fleet.start()
    assert agent.sync_once().result is SyncResult.APPLIED
    assert fleet.uris() == {"a-one": "/a/1", "b-one": "/b/1"}
    a_good = fleet.a.tip()

    broken = fleet.a.commit({"r.yaml": "routes:\n" + route("a-one", "42")}, "a broken")
    b_new = fleet.b.commit({"r.yaml": "routes:\n" + route("b-one", "/b/2")}, "b v2")
    outcome = agent.sync_once()
    assert outcome.result is SyncResult.FAILED and outcome.stage is Stage.VALIDATE
    assert outcome.problems[0].startswith("a:r.yaml:3:5: routes[a-one].uri: invalid configuration")
    assert fleet.uris() == {"a-one": "/a/1", "b-one": "/b/2"}  # b moved on, a stays at its last good
    sources = agent.state.sources
    assert (sources["a"].last_good, sources["b"].last_good) == (a_good, b_new)
    assert sources["a"].bad[broken].startswith("validate: r.yaml:3:5: routes[a-one].uri:")
    agent.close()  # the write-backs of this sync are done
    text = note(fleet.a, broken)
    assert "stage: validate" in text and "r.yaml:3:5: routes[a-one].uri: invalid configuration" in text
    assert status_of(fleet.a)["commit"] == broken and status_of(fleet.a)["result"] == "failed"
    assert status_of(fleet.b)["commit"] == b_new and status_of(fleet.b)["result"] == "applied"
    assert status_of(fleet.platform)["result"] == "noop"
    assert note(fleet.b, b_new) == ""

    # a platform change reaches the gateway while a is still broken; a's refused tip is not tried again
    again = fleet.start()
    fleet.platform.commit({"p.yaml": UPSTREAM + rule("zipkin")}, "platform v2")
    puts = len([r for r in fleet.apisix.requests if r[0] == "PUT"])
    assert again.sync_once().result is SyncResult.APPLIED
    assert list(fleet.apisix.config()["global_rules"][0]["plugins"]) == ["zipkin"]
    assert fleet.uris() == {"a-one": "/a/1", "b-one": "/b/2"}
    assert len([r for r in fleet.apisix.requests if r[0] == "PUT"]) == puts + 1
    assert again.sync_once().result is SyncResult.NOOP
    fixed = fleet.a.commit({"r.yaml": "routes:\n" + route("a-one", "/a/3")}, "a fixed")
    assert again.sync_once().result is SyncResult.APPLIED
    assert fleet.uris() == {"a-one": "/a/3", "b-one": "/b/2"}
    assert again.state.sources["a"].last_good == fixed


def test_a_team_route_using_the_platforms_upstream_applies_and_dropping_it_blames_the_platform(
        fleet: Fleet) -> None:
    agent = fleet.start()
    agent.sync_once()
    assert fleet.apisix.config()["routes"][0]["upstream_id"] == "platform-web"
    platform_good = fleet.platform.tip()
    dropped = fleet.platform.commit({"p.yaml": "upstreams:\n  - id: platform-other\n    nodes: "
                                               "{\"127.0.0.1:1981\": 1}\n" + rule("prometheus")}, "drop web")
    b_new = fleet.b.commit({"r.yaml": "routes:\n" + route("b-one", "/b/2")}, "b v2")
    outcome = agent.sync_once()
    assert outcome.result is SyncResult.FAILED and outcome.stage is Stage.VALIDATE
    assert list(outcome.problems) == [
        "a:r.yaml:4:5: routes[a-one].upstream_id: upstream_id 'platform-web' names no item of upstreams",
        "b:r.yaml:4:5: routes[b-one].upstream_id: upstream_id 'platform-web' names no item of upstreams"]
    # a is unchanged and b's new commit still names it: the platform's new commit is blamed, b's too, both
    # held together (for the company they were in): not tried again until a source moves
    platform, b = agent.state.sources["platform"], agent.state.sources["b"]
    assert platform.held[dropped] == {"a": fleet.a.tip(), "b": b_new}
    assert b.held[b_new] == {"platform": dropped, "a": fleet.a.tip()}
    assert platform.last_good == platform_good
    assert [u["id"] for u in fleet.apisix.config()["upstreams"]] == ["platform-web"]
    puts = len([r for r in fleet.apisix.requests if r[0] == "PUT"])
    assert agent.sync_once().result is SyncResult.NOOP  # a is at its last good commit, the others too
    assert len([r for r in fleet.apisix.requests if r[0] == "PUT"]) == puts
    # a's next commit (naming the upstream too) moves the company: tried with the platform's commit again,
    # a's and b's are held with it; the platform's own fix moves it again, and everything goes live
    a_new = fleet.a.commit({"r.yaml": "routes:\n" + route("a-one", "/a/2")}, "a v2")
    again = agent.sync_once()
    assert again.result is SyncResult.FAILED and again.stage is Stage.VALIDATE
    assert agent.state.sources["a"].held[a_new]["platform"] == dropped
    assert fleet.uris() == {"a-one": "/a/1", "b-one": "/b/1"}
    fixed = fleet.platform.commit({"p.yaml": UPSTREAM + rule("prometheus")}, "platform: web is back")
    assert agent.sync_once().result is SyncResult.APPLIED
    assert (platform.last_good, agent.state.sources["a"].last_good, b.last_good) == (fixed, a_new, b_new)
    assert fleet.uris() == {"a-one": "/a/2", "b-one": "/b/2"}


def test_an_item_with_another_sources_prefix_is_refused_at_its_file_line(fleet: Fleet) -> None:
    agent = fleet.start()
    agent.sync_once()
    steal = fleet.a.commit({"r.yaml": "routes:\n" + route("a-one", "/a/1") + route("b-two", "/x")}, "steal")
    outcome = agent.sync_once()
    assert outcome.stage is Stage.OWNERSHIP
    assert outcome.problems == ("a:r.yaml:5:5: routes[b-two]: source 'a' may not declare this item: it owns "
                                "routes with id prefix 'a-'; it belongs to source 'b' (routes with id prefix "
                                "'b-')",)
    assert agent.state.sources["a"].bad[steal].startswith("ownership: r.yaml:5:5: routes[b-two]")
    assert fleet.uris() == {"a-one": "/a/1", "b-one": "/b/1"}


def test_a_source_deleting_its_own_items_is_held_by_the_guard_against_its_own_last_good_commit(
        fleet: Fleet) -> None:
    agent = fleet.start()
    fleet.a.commit({"r.yaml": "routes:\n" + "".join(route(f"a-{n}", f"/a/{n}") for n in range(8))}, "a: 8")
    agent.sync_once()
    # 8 of the 9 live routes: few enough for the guard on the whole gateway (max_delete_count = 10),
    # but every one of a's own
    only_upstream = "upstreams:\n  - id: a-up\n    nodes: {\"127.0.0.1:1\": 1}\n"
    emptied = fleet.a.commit({"r.yaml": only_upstream}, "a: none")
    b_new = fleet.b.commit({"r.yaml": "routes:\n" + route("b-one", "/b/2")}, "b v2")
    outcome = agent.sync_once()
    assert outcome.stage is Stage.GUARD
    good = (agent.state.sources["a"].last_good or "")[:7]
    assert outcome.problems == (f"source 'a': deletion guard: against its last good commit {good}: routes: "
                                "8 → 0, deletes 8 of 8 (100 %), refused: add "
                                "\"Gitsync-Allow-Delete: routes\" (it would leave routes empty)",)
    assert emptied in agent.state.sources["a"].bad and agent.state.sources["b"].last_good == b_new
    assert len(fleet.uris()) == 9
    fleet.a.commit({"r.yaml": "routes:\n" + route("a-0", "/a/0")}, "a: one\n\nGitsync-Allow-Delete: routes")
    assert agent.sync_once().result is SyncResult.APPLIED  # its author allows it
    assert fleet.uris() == {"a-0": "/a/0", "b-one": "/b/2"}


class RefusingDouble(ApisixDouble):
    """An APISIX 3.14 whose PUT refuses any route of uri /refused, naming it by its index (as 3.13-3.16
    name an item they refuse), and applies the rest."""

    def _put(self, h: Any, body: bytes) -> Any:
        routes = json.loads(body).get("routes") or []
        for index, item in enumerate(routes):
            if isinstance(item, dict) and item.get("uri") == "/refused":
                return Reply(400, json_body({"error_msg": f"invalid routes at index {index}, err: refused "
                                                          "by this gateway"}))
        return super()._put(h, body)


def test_a_push_refused_for_one_sources_item_refuses_that_sources_commit_only(tmp_path: Path) -> None:
    with RefusingDouble(ADMIN_KEY, version="3.14.0") as apisix:
        made = Fleet(tmp_path, apisix, *repos(tmp_path))
        made.platform.commit({"p.yaml": UPSTREAM + rule("prometheus")}, "platform v1")
        made.a.commit({"r.yaml": "routes:\n" + route("a-one", "/a/1")}, "a v1")
        made.b.commit({"r.yaml": "routes:\n" + route("b-one", "/b/1")}, "b v1")
        agent = made.start()
        assert agent.sync_once().result is SyncResult.APPLIED
        a_new = made.a.commit({"r.yaml": "routes:\n" + route("a-one", "/a/2")}, "a v2")
        refused_route = route("b-one", "/b/1") + route("b-two", "/refused")
        b_refused = made.b.commit({"r.yaml": "routes:\n" + refused_route}, "b: a route the gateway refuses")
        outcome = agent.sync_once()
        assert outcome.stage is Stage.PUSH
        assert list(outcome.problems) == ["b:r.yaml:5:5: routes[b-two]: refused by this gateway"]
        assert agent.state.sources["b"].bad[b_refused] == \
            "push: r.yaml:5:5: routes[b-two]: refused by this gateway"
        assert agent.state.sources["a"].last_good == a_new
        assert made.uris() == {"a-one": "/a/2", "b-one": "/b/1"}
        agent.close()


def test_an_item_written_out_of_band_in_a_sources_slice_is_that_sources_drift(fleet: Fleet) -> None:
    agent = fleet.start()
    agent.sync_once()
    live = fleet.apisix.config()["routes"]
    fleet.apisix.out_of_band("routes", [*live, {"id": "a-by-hand", "uri": "/by-hand"},
                                        {"id": "nobodys", "uri": "/nobody"}])
    outcome = agent.sync_once()
    assert outcome.result is SyncResult.HEALED and fleet.uris() == {"a-one": "/a/1", "b-one": "/b/1"}
    agent.close()
    assert status_of(fleet.a)["gateways"][0]["pruned"] == {"routes": ["a-by-hand"]}
    assert status_of(fleet.b)["gateways"][0].get("pruned") in (None, {})


def test_the_last_good_commits_survive_a_restart_and_nothing_is_pushed_again(fleet: Fleet) -> None:
    agent = fleet.start()
    agent.sync_once()
    fleet.a.commit({"r.yaml": "routes:\n" + route("a-one", "42")}, "a broken")
    agent.sync_once()
    agent.close()
    state = json.loads((fleet.root / "state" / "state.json").read_text())
    assert set(state["sources"]) == {"platform", "a", "b"} and state["last_good"] in state["compositions"]
    shown = run_gitsync("status", "--config", str(fleet.settings_file())).stdout
    broken = fleet.a.tip() or ""
    assert f"source:   a  {state['sources']['a']['last_good']}  (its tip {broken[:7]} refused: validate: " \
        "r.yaml:3:5: routes[a-one].uri:" in shown
    assert f"source:   b  {fleet.b.tip()}\n" in shown
    puts = len([r for r in fleet.apisix.requests if r[0] == "PUT"])
    again = fleet.start()
    assert again.sync_once().result is SyncResult.NOOP  # a's tip is known bad: the last good one is live
    assert again.tip_refused
    refused = f"source a: the tip {fleet.a.tip()[:7]} is refused (validate: r.yaml:3:5:"
    assert refused in again.readiness().reason
    assert len([r for r in fleet.apisix.requests if r[0] == "PUT"]) == puts


def test_a_failing_health_check_rolls_back_its_own_source_only(tmp_path: Path) -> None:
    with ApisixDouble(ADMIN_KEY, forward=True) as apisix, upstream() as node:
        made = Fleet(tmp_path, apisix, *repos(tmp_path))
        made.extra = f'proxy_urls = ["{apisix.proxy_url}"]\n'
        made.platform.commit({"p.yaml": f"upstreams:\n  - id: platform-web\n    nodes: {{\"{node}\": 1}}\n"
                                        + rule("prometheus")}, "platform v1")
        made.a.commit({"r.yaml": "routes:\n" + route("a-one", "/a/1")}, "a v1")
        made.b.commit(b_files(node, "/orders"), "b v1")
        agent = made.start()
        try:
            assert agent.sync_once().result is SyncResult.APPLIED
            a_new = made.a.commit({"r.yaml": "routes:\n" + route("a-one", "/a/2")}, "a v2")
            dead = f"127.0.0.1:{free_port()}"
            b_bad = made.b.commit(b_files(dead, "/orders"), "b to a dead upstream")
            outcome = agent.sync_once()
            assert outcome.stage is Stage.HEALTH
            assert outcome.problems[0].startswith(f"{apisix.url}: b:conf/checks.yaml:2:5: check "
                                                  "b:orders-answer failed after 3 attempt(s): status 502")
            assert agent.state.sources["b"].bad[b_bad].startswith("health: ")
            assert agent.state.sources["a"].last_good == a_new  # a's change stays
            assert made.uris() == {"a-one": "/a/2", "b-orders": "/orders"}
            nodes = {u["id"]: u["nodes"] for u in apisix.config()["upstreams"]}
            assert nodes["b-up"] == {node: 1}  # b's items are its last good ones
        finally:
            agent.close()
        stage, errors = note_of(made.b, b_bad)
        assert stage == "health"
        assert errors[0].startswith(f"{apisix.url}: conf/checks.yaml:2:5: check orders-answer failed after 3 "
                                    "attempt(s): status 502")


def test_a_failing_health_check_reported_is_noted_on_its_own_sources_commit(tmp_path: Path) -> None:
    with ApisixDouble(ADMIN_KEY, forward=True) as apisix, upstream() as node:
        made = Fleet(tmp_path, apisix, *repos(tmp_path))
        made.extra = f'proxy_urls = ["{apisix.proxy_url}"]\n[rollout]\non_check_failure = "report"\n'
        made.platform.commit({"p.yaml": UPSTREAM + rule("prometheus")}, "platform v1")
        made.a.commit({"r.yaml": "routes:\n" + route("a-one", "/a/1")}, "a v1")
        made.b.commit(b_files(node, "/orders"), "b v1")
        agent = made.start()
        try:
            agent.sync_once()
            b_bad = made.b.commit(b_files(f"127.0.0.1:{free_port()}", "/orders"), "b to a dead upstream")
            outcome = agent.sync_once()
            assert outcome.result is SyncResult.APPLIED and outcome.stage is Stage.HEALTH
            assert agent.state.sources["b"].last_good == b_bad  # reported, not refused
        finally:
            agent.close()
        stage, errors = note_of(made.b, b_bad)
        assert stage == "health"
        assert errors[0].startswith(f"{apisix.url}: conf/checks.yaml:2:5: check orders-answer failed")
        assert note(made.a, made.a.tip() or "") == ""


def note_of(repo: BareRepo, sha: str) -> tuple[str, list[str]]:
    """The stage and errors of the agent's section of the note on `sha`."""
    section = next(s for s in YAML(typ="safe").load_all(note(repo, sha)) if s and s.get("agent") == "edge-1")
    return section["stage"], section["errors"]


def b_files(node: str, uri: str) -> dict[str, str]:
    return {"conf/routes.yaml": (f"upstreams:\n  - id: b-up\n    type: roundrobin\n    nodes:\n"
                                 f"      \"{node}\": 1\n"
                                 f"routes:\n  - id: b-orders\n    uri: {uri}\n    host: api.example.com\n"
                                 "    upstream_id: b-up\n"),
            "conf/checks.yaml": CHECKS}


@pytest.mark.slow
def test_sync_once_with_sources_applies_their_composition_and_exits_1_on_a_refused_source(
        fleet: Fleet) -> None:
    done = run_gitsync("sync", "--once", "--config", str(fleet.settings_file()))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1].startswith("applied: ")
    assert fleet.uris() == {"a-one": "/a/1", "b-one": "/b/1"}
    fleet.a.commit({"r.yaml": "routes:\n" + route("a-one", "42")}, "a broken")
    fleet.b.commit({"r.yaml": "routes:\n" + route("b-one", "/b/2")}, "b v2")
    done = run_gitsync("sync", "--once", "--config", str(fleet.settings_file()))
    assert done.returncode == 1
    assert "a:r.yaml:3:5: routes[a-one].uri: invalid configuration" in done.stderr
    assert fleet.uris() == {"a-one": "/a/1", "b-one": "/b/2"}


def test_an_agent_with_sources_reports_each_sources_status_in_gitsync_status_fleet(fleet: Fleet) -> None:
    agent = fleet.start()
    agent.sync_once()
    agent.close()
    result = run_gitsync("status", "--fleet", "--config", str(fleet.settings_file()))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    for name, repo in (("platform", fleet.platform), ("a", fleet.a), ("b", fleet.b)):
        at = lines.index(f"source {name} ({repo.path}):")
        tip = repo.tip() or ""
        assert any("edge-1" in line and tip[:7] in line for line in lines[at + 1:at + 4]), result.stdout



# ---------------------------------------------------------------------------------------------------------
# gitsync export --split-by: one repo per owner, composed again by an agent


LIVE = {
    "upstreams": [{"id": "platform-web", "type": "roundrobin", "nodes": {"127.0.0.1:1980": 1}}],
    "global_rules": [{"id": "observability", "plugins": {"prometheus": {}}}],
    "routes": [{"id": "a-one", "uri": "/a", "upstream_id": "platform-web", "labels": {"team": "a"}},
               {"id": "b-one", "uri": "/b", "upstream_id": "platform-web", "labels": {"team": "b"}},
               {"id": "a-two", "uri": "/a2", "upstream_id": "platform-web", "labels": {"team": "a"}}],
    "consumers": [{"username": "alice", "labels": {"team": "a"},
                   "plugins": {"key-auth": {"key": "alice-secret-key-1"}}}],
}


@pytest.mark.slow
def test_export_split_by_a_label_gives_one_repo_per_owner_that_the_agent_composes_again(
        tmp_path: Path, apisix: ApisixDouble) -> None:
    for kind, items in LIVE.items():
        apisix.out_of_band(kind, items)
    key = tmp_path / "key"
    key.write_text(ADMIN_KEY)
    out, secrets = tmp_path / "out", tmp_path / "secrets"
    done = run_gitsync("export", "--gateway", apisix.url, "--admin-key-file", str(key), "--out", str(out),
                       "--secrets-out", str(secrets), "--split-by", "team")
    assert done.returncode == 0, done.stderr
    assert "round trip: render of each written repo equals its live items" in done.stdout
    assert sorted(p.name for p in out.iterdir()) == ["a", "b", "platform", "sources.toml"]
    assert sorted(p.name for p in secrets.iterdir()) == ["a"]  # alice's key, out of a's repo
    assert "alice-secret-key-1" not in "".join(p.read_text() for p in out.rglob("*.yaml"))

    # each directory a repo, the settings written composing them: a fresh gateway gets the same items
    urls = {}
    for name in ("platform", "a", "b"):
        repo = BareRepo.create(tmp_path / f"{name}.git")
        repo.commit({str(p.relative_to(out / name)): p.read_text() for p in (out / name).rglob("*")
                     if p.is_file()}, f"{name} exported")
        urls[name] = str(repo.path)
    tables = (out / "sources.toml").read_text()
    for name, url in urls.items():
        tables = tables.replace(f"<the URL of the {name} repo>", url)
    # a claim by label with the id prefix its items share; what other owners' items name, shared with them
    assert ('owns = [{ kinds = ["routes"], prefix = "a-", labels = { team = "a" } },\n'
            '        { kinds = ["consumers"], prefix = "alice", labels = { team = "a" } }]') in tables
    assert ('owns = ["upstreams", "global_rules"]\nshares = [{ kinds = ["upstreams"], '
            'ids = ["platform-web"], with = ["a", "b"] }]') in tables
    with ApisixDouble(ADMIN_KEY) as fresh:
        config = tmp_path / "gitsync.toml"
        config.write_text(f'[gateways]\ngateways = ["{fresh.url}"]\nadmin_key_file = "{key}"\n'
                          f'[agent]\nstate_dir = "{tmp_path / "state"}"\n[writeback]\nwriteback = "off"\n'
                          f'[render]\nsecrets_dir = "{secrets}"\n\n' + tables)  # each source: its own
        done = run_gitsync("sync", "--once", "--config", str(config))
        assert done.returncode == 0, done.stderr
        held = fresh.config()
    for kind, items in LIVE.items():
        assert items_equal(sorted(items, key=str), sorted(held[kind], key=str)), kind


def test_export_split_by_refuses_a_kind_only_some_of_whose_items_carry_the_label(
        tmp_path: Path, apisix: ApisixDouble) -> None:
    nobody = {"id": "nobody", "uri": "/x", "upstream_id": "platform-web"}
    apisix.out_of_band("routes", [*LIVE["routes"], nobody])
    apisix.out_of_band("upstreams", LIVE["upstreams"])
    key = tmp_path / "key"
    key.write_text(ADMIN_KEY)
    done = run_gitsync("export", "--gateway", apisix.url, "--admin-key-file", str(key), "--out",
                       str(tmp_path / "out"), "--split-by", "team")
    assert done.returncode == 2
    assert ("gitsync export: --split-by team: routes[nobody] carries no label 'team' while other routes do: "
            "label them (each item needs one owner), or export without --split-by") in done.stderr
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


@pytest.mark.parametrize(("routes", "error"), [
    # the settings file written beside the repos cannot be a repo too: refused before anything is written
    ([{"id": "x-one", "uri": "/x", "labels": {"team": "sources.toml"}},
      {"id": "a-one", "uri": "/a", "labels": {"team": "a"}}],
     "routes[x-one]: label team='sources.toml' cannot name a source and its repo"),
    # a claim by label needs the id prefix its items share
    ([{"id": "one", "uri": "/x", "labels": {"team": "a"}},
      {"id": "two", "uri": "/y", "labels": {"team": "a"}}],
     "the routes of 'a' (one, two) share no id prefix, which a claim by label needs"),
    ([{"id": "a-one", "uri": "/x", "labels": {"team": "a"}}, {"id": "a-one-b", "uri": "/y",
                                                             "labels": {"team": "b"}}],
     "the routes of 'a' (id prefix 'a-one') and of 'b' (id prefix 'a-one-b') could hold one id"),
])
def test_export_split_by_writes_nothing_when_the_owners_cannot_be_told_apart_by_the_settings(
        tmp_path: Path, apisix: ApisixDouble, routes: list[dict[str, Any]], error: str) -> None:
    apisix.out_of_band("routes", routes)
    key = tmp_path / "key"
    key.write_text(ADMIN_KEY)
    done = run_gitsync("export", "--gateway", apisix.url, "--admin-key-file", str(key), "--out",
                       str(tmp_path / "out"), "--split-by", "team")
    assert done.returncode == 2
    assert f"gitsync export: --split-by team: {error}" in done.stderr
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_each_sources_mirror_is_tidied_after_its_syncs(fleet: Fleet) -> None:
    """The packs incremental fetches leave are merged once a sync is over, in every source's mirror
    as in one repo's (past MAX_PACKS; a fetch alone merges only past UNTIDY_PACKS)."""
    agent = fleet.start()
    assert agent.sync_once().result is SyncResult.APPLIED
    for n in range(MAX_PACKS + 4):
        fleet.a.commit({"r.yaml": "routes:\n" + route("a-one", f"/a/{n}")}, f"a v{n}")
        assert agent.sync_once().result is SyncResult.APPLIED
    (a,) = [repo for repo in agent.repos.all if repo.name == "a"]
    packs = list((a.source.mirror_path / "objects" / "pack").glob("*.pack"))
    assert 0 < len(packs) <= MAX_PACKS + 1 < UNTIDY_PACKS


# ---------------------------------------------------------------------------------------------------------
# one repo is a composition of one: the same code, the same bytes


ROUTES = "routes:\n" + route("r-one", "/one", "web") + route("r-two", "/two", "web")
WEB = "upstreams:\n  - id: web\n    nodes: {\"127.0.0.1:1980\": 1}\n"
#: Each step: the files of a new commit (a refused one among them), or None: a write on the gateway by
#: someone else, which the next sync heals (pruning what it added).
STEPS: list[dict[str, str] | None] = [
    {"conf/web.yaml": WEB, "conf/routes.yaml": ROUTES},
    {"conf/routes.yaml": "routes:\n" + route("r-one", "42", "web")},  # refused at validate
    {"conf/routes.yaml": ROUTES + route("r-three", "/three", "web")},
    {"conf/routes.yaml": ROUTES + route("r-four", "/refused", "web")},  # refused by the gateway
    None,
]
#: The times in a status file and a note, which differ from one run to the next.
TIMES = re.compile(rb"^(\s*)(time|duration|applied_at): .*$", re.MULTILINE)


def both_ways_settings(root: Path, apisix: ApisixDouble, repo: BareRepo, *, sources: bool) -> Path:
    """One repo as the ``[source]`` settings, or as ``[[sources]]`` with one source owning every kind."""
    (root / "key").write_text(ADMIN_KEY)
    config = root / "gitsync.toml"
    every = ", ".join(f'"{kind}"' for kind in KINDS)
    repo_part = (f'[[sources]]\nname = "all"\nrepo = "{repo.path}"\nowns = [{every}]\n' if sources
                 else f'[source]\nrepo = "{repo.path}"\n')
    config.write_text(f'[gateways]\ngateways = ["{apisix.url}"]\nadmin_key_file = "{root / "key"}"\n'
                      f'[agent]\nstate_dir = "{root / "state"}"\n[writeback]\nagent_name = "edge-1"\n'
                      + repo_part)
    return config


def one_scenario(root: Path, port: int, *, sources: bool) -> dict[str, Any]:
    """`STEPS`, each synced by an agent of its own (as `sync --once` runs), against a gateway of its own
    (on `port`: its URL is in the statuses); what the gateway received and what went back to the repo."""
    root.mkdir()
    repo = BareRepo.create(root / "config.git")  # the same commits make the same SHAs in both runs
    with RefusingDouble(ADMIN_KEY, version="3.14.0", port=port) as apisix:
        config = both_ways_settings(root, apisix, repo, sources=sources)
        results, statuses, shas = [], [], []
        for files in STEPS:
            if files is None:
                apisix.out_of_band("routes", [*apisix.config()["routes"], {"id": "by-hand", "uri": "/x"}])
            else:
                shas.append(repo.commit(files, f"step {len(shas) + 1}"))
            agent = Agent(load(config=config, env={}), env={})
            try:
                results.append(str(agent.sync_once().result))
            finally:
                agent.close()  # the write-backs of this sync are done
            statuses.append(git("--git-dir", str(repo.path), "show",
                                "refs/gitsync/status/edge-1:status.yaml"))
        notes = {sha: note(repo, sha) for sha in shas}
        return {"results": results, "puts": apisix.put_bodies, "statuses": statuses, "notes": notes,
                "state": json.loads((root / "state" / "state.json").read_text())}


def timeless(text: str) -> bytes:
    """`text` with its times (`time`, `duration`, `applied_at`) taken out: the one part two runs of one
    scenario cannot share."""
    return TIMES.sub(rb"\1\2: -", text.encode())


def test_one_repo_as_source_or_as_the_one_of_sources_pushes_notes_and_reports_the_same_bytes(
        tmp_path: Path) -> None:
    """The repo of ``[source]`` is a composition of one: the agent runs the same code for it as for
    ``[[sources]]``. One scenario run both ways (a commit applied, one refused at validate, one refused
    by the gateway, a drift healed) gives the gateway the same PUT bodies, byte for byte, and the repo the
    same notes and statuses, their times aside (normalised: two runs never share a clock)."""
    port = free_port()  # one after the other, on one port
    one = one_scenario(tmp_path / "source", port, sources=False)
    many = one_scenario(tmp_path / "sources", port, sources=True)
    assert one["results"] == ["applied", "failed", "applied", "failed", "healed"]
    assert many["results"] == one["results"]
    assert len(one["puts"]) >= 4 and many["puts"] == one["puts"]
    assert [timeless(s) for s in many["statuses"]] == [timeless(s) for s in one["statuses"]]
    refused = [sha for sha, text in one["notes"].items() if text]
    assert len(refused) == 2 and "stage: validate" in one["notes"][refused[0]]
    assert "stage: push" in one["notes"][refused[1]]
    assert {sha: timeless(text) for sha, text in many["notes"].items()} == \
        {sha: timeless(text) for sha, text in one["notes"].items()}
    # what differs is only where the state is kept: the one repo's in the agent's own fields (its
    # compositions are its commits), a source's under its name
    (gateway,) = one["state"]["gateways"].values()
    assert one["state"]["last_good"] == gateway["commit"]
    assert one["state"]["sources"] == {} and one["state"]["compositions"] == {}
    assert many["state"]["sources"]["all"]["last_good"] == one["state"]["last_good"]
    assert set(many["state"]["sources"]["all"]["bad"]) == set(one["state"]["bad"])


# ---------------------------------------------------------------------------------------------------------
# moving a live gateway to sources (docs/sources.md, "Moving a live gateway to sources")


def routes_of(prefix: str, count: int, uri: str = "") -> str:
    return "routes:\n" + "".join(route(f"{prefix}{n}", f"/{uri or prefix}{n}") for n in range(count))


def one_repo_live(tmp_path: Path, fleet: Fleet) -> None:
    """The gateway as one repo of ``[source]`` left it: the platform's upstream and rule, 12 routes of a's
    and 12 of b's; the same state dir as the sources' agent will use."""
    mono = BareRepo.create(tmp_path / "mono.git")
    mono.commit({"p.yaml": UPSTREAM + rule("prometheus"), "a.yaml": routes_of("a-", 12),
                 "b.yaml": routes_of("b-", 12)}, "everything")
    settings = fleet.settings_file().read_text()
    one = tmp_path / "one.toml"
    one.write_text(settings[:settings.index("[[sources]]")] + f'[source]\nrepo = "{mono.path}"\n')
    agent = Agent(load(config=one, env={}), env={})
    assert agent.sync_once().result is SyncResult.APPLIED
    agent.close()
    assert len(fleet.uris()) == 24


def test_moving_a_live_gateway_to_sources_a_first_commit_held_for_another_source_goes_live_with_it(
        tmp_path: Path, fleet: Fleet) -> None:
    one_repo_live(tmp_path, fleet)
    fleet.a.commit({"r.yaml": routes_of("a-", 12)}, "a: moved")
    broken = fleet.b.commit({"r.yaml": routes_of("b-", 12).replace("uri: /b-0\n", "uri: 42\n")},
                            "b: moved, broken")
    agent = fleet.start()
    outcome = agent.sync_once()
    # b's first commit is refused; without it the composition would delete b's 12 live routes: the guard
    # holds it, and the platform's and a's first commits are held for b's sake, not refused for good
    assert outcome.result is SyncResult.FAILED and len(fleet.uris()) == 24
    sources = agent.state.sources
    assert sources["b"].bad[broken].startswith("validate: r.yaml:3:5: routes[b-0].uri")
    assert broken not in sources["b"].held  # its own fault: tried again never
    for name in ("platform", "a"):
        tip = getattr(fleet, name).tip()
        assert sources[name].bad[tip].startswith("guard: ")
        assert sources[name].held[tip]["b"] == "-"
    agent.close()
    stage, told = note_of(fleet.a, fleet.a.tip())
    assert stage == "guard" and told[0].endswith("(it would delete 12 routes, more than 10)")
    assert told[1] == ("the items it would delete are source b's, which give(s) no commit of them here: this "
                       "commit is tried again once that changes (to delete them anyway, add \"Gitsync-Allow-"
                       f"Delete: routes\" to a new commit of source a ({fleet.a.path}))")

    again = fleet.start()
    assert again.sync_once().result is SyncResult.SKIPPED  # nothing changed: nothing is tried again
    assert again.state.sources["a"].last_good is None
    fixed = fleet.b.commit({"r.yaml": routes_of("b-", 12)}, "b: fixed")
    outcome = again.sync_once()
    assert outcome.result is SyncResult.APPLIED, outcome
    assert {name: s.last_good for name, s in again.state.sources.items()} == {
        "platform": fleet.platform.tip(), "a": fleet.a.tip(), "b": fixed}
    assert all(not s.bad and not s.held for name, s in again.state.sources.items() if name != "b")
    assert len(fleet.uris()) == 24


def test_moving_a_live_gateway_to_sources_the_guard_names_the_source_whose_commit_drops_its_items(
        tmp_path: Path, fleet: Fleet) -> None:
    one_repo_live(tmp_path, fleet)
    # a renames its routes on the way: its first commit would delete its 12 live ones
    fleet.a.commit({"r.yaml": routes_of("a-new-", 12)}, "a: moved, renamed")
    fleet.b.commit({"r.yaml": routes_of("b-", 12)}, "b: moved")
    agent = fleet.start()
    assert agent.sync_once().result is SyncResult.FAILED
    assert len(fleet.uris()) == 24
    a_tip, sources = fleet.a.tip(), agent.state.sources
    assert sources["a"].bad[a_tip].startswith("guard: ") and a_tip in sources["a"].held
    agent.close()
    told = "\n".join(note_of(fleet.a, a_tip)[1])
    assert ("it drops 12 of its own live item(s) (routes/a-0, routes/a-1, routes/a-10, routes/a-11, "
            "routes/a-2 and 7 more); to allow it, add \"Gitsync-Allow-Delete: routes\" to a new commit of "
            f"source a ({fleet.a.path})") in told
    # the platform and b, composed without a (no good commit yet), would delete a's routes: held for a
    assert sources["b"].held[fleet.b.tip()]["a"] == "-"

    # the trailer, in a's repo as the hint says: every first commit goes live together
    allowed = fleet.a.commit({"r.yaml": routes_of("a-new-", 12)},
                             "a: renamed\n\nGitsync-Allow-Delete: routes")
    again = fleet.start()
    assert again.sync_once().result is SyncResult.APPLIED
    assert sorted(fleet.uris()) == sorted([f"a-new-{n}" for n in range(12)] + [f"b-{n}" for n in range(12)])
    assert again.state.sources["a"].last_good == allowed


# one hostile source among several (issue 41): the others' live items and results as without it


HOSTILE_SETTINGS = """
[gateways]
gateways = ["{url}"]
admin_key_file = "{creds}/admin_key"
[render]
secrets_dir = "{creds}"
[agent]
state_dir = "{state}"
[writeback]
writeback = "off"

[[sources]]
name = "platform"
repo = "{root}/platform.git"
owns = ["global_rules", {{ kinds = ["upstreams"], prefix = "platform-" }}]
shares = [{{ kinds = ["upstreams"], prefix = "platform-" }}]

[[sources]]
name = "a"
repo = "{root}/a.git"
owns = [{{ kinds = ["routes", "upstreams"], prefix = "a-" }},
        {{ kinds = ["consumers", "consumer_groups"], prefix = "a-", labels = {{ team = "a" }} }}]
traffic = {{ hosts = ["api.example.com"], paths = ["/a"] }}

[[sources]]
name = "b"
repo = "{root}/b.git"
owns = [{{ kinds = ["routes", "upstreams"], prefix = "b-" }}]
"""
HOSTILE_TABLE = """
[[sources]]
name = "h"
repo = "{root}/h.git"
owns = [{{ kinds = ["routes", "upstreams"], prefix = "h-" }},
        {{ kinds = ["consumers", "consumer_groups"], prefix = "h-", labels = {{ team = "h" }} }}]
"""
BENIGN = {
    "platform": {"p.yaml": UPSTREAM + rule("prometheus")},
    "a": {"a.yaml": "routes:\n  - id: a-1\n    uri: /a/*\n    hosts: [api.example.com]\n"
                    "    upstream_id: a-up\n    plugins:\n      key-auth: {}\n"
                    "      consumer-restriction: {whitelist: [a-alice]}\n"
                    "upstreams:\n  - id: a-up\n    nodes: {\"127.0.0.1:1980\": 1}\n"
                    "consumer_groups:\n  - id: a-vip\n    labels: {team: a}\n"
                    "    plugins: {limit-count: {count: 10, time_window: 60}}\n"
                    "consumers:\n  - username: a-alice\n    group_id: a-vip\n    labels: {team: a}\n"
                    "  - id: a-alice/credentials/main\n"
                    "    plugins: {key-auth: {key: \"${{ secrets.A_KEY }}\"}}\n"},
    "b": {"b.yaml": "routes:\n" + route("b-1", "/b/1")},
}
# its own ids and targets more often than others': an attack goes live only when every item of the
# commit is accepted, so most examples must be mostly right for the wrong one to matter
HOSTILE_IDS = st.sampled_from(["h-1", "h-2", "h-3", "h-4", "a-1", "b-1", "a-alice", "platform-web", "x"])
HOSTILE_TARGETS = st.sampled_from(["platform-web", "h-up", "h-up", "h-up", "a-up", "b-up", "nowhere"])
HOSTILE_SECRETS = st.sampled_from(["admin_key", "ADMIN_KEY", "A_KEY", "a/A_KEY", "git_token", "H_KEY"])


@st.composite
def hostile_items(draw: st.DrawFn) -> str:
    """A hostile source's file: routes with random ids, references, traffic and code; consumers named as
    another team's, credentials under them, groups of theirs; secrets of gitsync's and of other teams'."""
    routes, consumers = [], []
    for _ in range(draw(st.integers(0, 2))):  # few items: one refused item refuses the source's commit
        rid, target = draw(HOSTILE_IDS), draw(HOSTILE_TARGETS)
        hosts = draw(st.sampled_from(["", "    hosts: [api.example.com]\n",
                                      "    hosts: ['*.example.com']\n"]))
        uri = draw(st.sampled_from(["/a/*", "/h/*", "/*", "/b/1"]))
        plugin = draw(st.sampled_from([
            "", "    priority: 100\n",
            "    plugins:\n      serverless-pre-function:\n"
            "        {phase: rewrite, functions: ['return function() end']}\n",
            "    plugins:\n      proxy-rewrite:\n        headers:\n          set: {X-Leak: \"${{ secrets."
            + draw(HOSTILE_SECRETS) + " }}\"}\n",
            "    plugins:\n      consumer-restriction: {whitelist: [a-alice]}\n"]))
        routes.append(f"  - id: {rid}\n    uri: {uri}\n{hosts}    upstream_id: {target}\n{plugin}")
    for _ in range(draw(st.integers(0, 1))):  # a consumer, or a credential alone (under anyone's consumer)
        who = draw(st.sampled_from(["h-eve", "a-alice", "a-bob"]))
        group = draw(st.sampled_from(["", "    group_id: a-vip\n", "    group_id: h-vip\n"]))
        consumers.append(draw(st.sampled_from([
            f"  - username: {who}\n    labels: {{team: h}}\n{group}",
            f"  - id: {who}/credentials/x\n    labels: {{team: h}}\n"
            "    plugins: {key-auth: {key: hostile-chosen-key-1}}\n"])))
    text = ("routes:\n" + "".join(routes) if routes else "") + \
        ("consumers:\n" + "".join(consumers) if consumers else "")
    return text + "upstreams:\n  - id: h-up\n    nodes: {\"127.0.0.1:1980\": 1}\n"


def _hostile_run(root: Path, hostile: str | None
                 ) -> tuple[dict[str, list[bytes]], dict[str | None, str | None], list[bytes]]:
    """One agent's first sync over the benign sources (and the hostile one): the live items that are not
    the hostile source's, each benign source's last good commit, every PUT body."""
    creds = root / "creds"
    (creds / "a").mkdir(parents=True)
    (creds / "admin_key").write_text(ADMIN_KEY)
    (creds / "git_token").write_text("a-git-token-of-the-agent")
    (creds / "a" / "A_KEY").write_text("team-a-consumer-key")
    repos = {name: BareRepo.create(root / f"{name}.git") for name in (*BENIGN, *(("h",) if hostile else ()))}
    for name, files in BENIGN.items():
        repos[name].commit(files, f"{name} v1")
    if hostile is not None:
        repos["h"].commit({"h.yaml": hostile}, "h v1")
    with ApisixDouble(ADMIN_KEY) as double:
        text = HOSTILE_SETTINGS + (HOSTILE_TABLE if hostile else "")
        config = root / "gitsync.toml"
        config.write_text(text.format(url=double.url, creds=creds, state=root / "state", root=root))
        agent = Agent(load(config=config, env={}), env={})
        try:
            agent.sync_once()
            good = {repo.name: repo.state.last_good for repo in agent.repos.all if repo.name != "h"}
        finally:
            agent.close()
        held = {kind: items for kind, items in double.config().items() if isinstance(items, list)}
        live = {kind: sorted(json.dumps(item, sort_keys=True).encode() for item in items
                             if not str(item_id(kind, item)).startswith("h-"))
                for kind, items in held.items()}
        theirs = [(kind, item) for kind, items in held.items() for item in items
                  if str(item_id(kind, item)).startswith("h-")]
        # what the hostile source's live items name: its own items, or what the platform shares; none of
        # them takes a's traffic or runs code
        named = {target for kind, item in theirs for target in refers_to(kind, item)}
        assert all(ident.startswith(("h-", "platform-")) for _, ident in named), named
        a_traffic = Traffic(hosts=("api.example.com",), paths=("/a",))
        assert not [item for kind, item in theirs if trespass(kind, item, a_traffic)]
        assert not [item for _, item in theirs if "serverless-pre-function" in (item.get("plugins") or {})]
        return live, good, list(double.put_bodies)


@pytest.mark.slow
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(hostile=hostile_items())
def test_a_hostile_source_changes_nothing_of_the_others(tmp_path_factory: pytest.TempPathFactory,
                                                         hostile: str) -> None:
    """Whatever one source declares (ids, duplicates and credentials of others', references into what is
    not shared, routes on owned traffic, code, gitsync's and other teams' secrets), every other source's
    live items and last good commits are byte for byte what they are without it, and no credential of
    gitsync's reaches a payload."""
    alone = _hostile_run(tmp_path_factory.mktemp("alone"), None)
    among = _hostile_run(tmp_path_factory.mktemp("among"), hostile)
    assert among[0] == alone[0]
    assert among[1] == alone[1] and all(alone[1].values())
    for body in among[2]:
        assert ADMIN_KEY.encode() not in body and b"a-git-token-of-the-agent" not in body
        assert body.count(b"team-a-consumer-key") <= 1  # a's own credential; never read by another source
