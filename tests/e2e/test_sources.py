"""Many teams, one gateway, with real processes: two team repos and a platform repo on one git daemon,
one `gitsync run` agent, the APISIX double (its data plane forwarding to a real upstream, for the
health checks). Each source is its own transaction."""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
import pytest
from ruamel.yaml import YAML

from gitsync.testing.apisix import ApisixDouble
from testkit.agents import ADMIN_KEY, CHECKS, memory_limit, sources_toml, upstream
from testkit.gitservers import BareRepo, GitDaemon, git
from testkit.processes import free_port, run_gitsync, wait_for

#: The address space of an agent under attack (as tests/e2e/test_fleet_attacks.py gives its agents).
LIMIT_MB = 100
LIMITED_ENV = {"MALLOC_ARENA_MAX": "2"}

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
    tables = sources_toml(("platform", git_daemon.url(platform.path.name), "upstreams", "platform-"),
                          ("a", git_daemon.url(a.path.name), "routes", "a-"))
    # the platform lets the teams' routes name its upstreams
    config.write_text(tables.replace('prefix = "platform-" }]\n', 'prefix = "platform-" }]\n'
                                     'shares = [{ kinds = ["upstreams"] }]\n', 1))
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


PAYMENTS = {"conf/payments.yaml": """\
secret_fields: [routes.desc]
routes:
  - id: payments-pay
    uri: /payments/*
    hosts: [api.example.com]
    desc: payments-internal-note-xyz
    upstream_id: platform-web
    plugins:
      key-auth: {}
      consumer-restriction: {whitelist: [payments-alice]}
consumer_groups:
  - id: payments-vip
    labels: {team: payments}
    plugins: {limit-count: {count: 100, time_window: 60}}
consumers:
  - username: payments-alice
    group_id: payments-vip
    labels: {team: payments}
  - id: payments-alice/credentials/main
    plugins: {key-auth: {key: "${{ secrets.PAY_KEY }}"}}
"""}
ATTACKS = [
    # (what orders commits, the stage, the start of its note's first line)
    ("consumers:\n  - id: payments-alice/credentials/backdoor\n    labels: {team: orders}\n"
     "    plugins: {key-auth: {key: orders-chose-this-key}}\n", "ownership",
     "attack.yaml:2:5: consumers[payments-alice/credentials/backdoor]: source 'orders' may not declare this "
     "credential: a credential belongs to the source of its consumer"),
    ("consumers:\n  - username: orders-bob\n    labels: {team: orders}\n    group_id: payments-vip\n",
     "validate", "attack.yaml:4:5: consumers[orders-bob].group_id: group_id 'payments-vip' names "
     "consumer_groups of source 'payments', which does not share it with source 'orders'"),
    ("consumers:\n  - username: payments-alice\n    labels: {team: payments}\n", "ownership",
     "attack.yaml:2:5: consumers[payments-alice]: source 'orders' may not declare this item"),
    ("routes:\n  - id: orders-leak\n    uri: /orders/leak\n    upstream_id: platform-web\n    plugins:\n"
     "      proxy-rewrite:\n        headers:\n          set: {X-Leak: \"${{ secrets.admin_key }}|"
     "${{ secrets.LOOKS_OK }}\"}\n", "render",
     "attack.yaml:8:17: routes[orders-leak].plugins.proxy-rewrite.headers.set.X-Leak: cannot read "
     "secrets.admin_key: secrets.admin_key names one of gitsync's own credentials"),
    ("routes:\n  - id: orders-capture\n    uri: /payments/*\n    hosts: [api.example.com]\n"
     "    priority: 100\n    upstream_id: platform-web\n", "ownership",
     "attack.yaml:2:5: routes[orders-capture]: source 'orders' may not take traffic source 'payments' owns"),
    ("routes:\n  - id: orders-lua\n    uri: /orders/lua\n    upstream_id: platform-web\n    plugins:\n"
     "      serverless-pre-function: {phase: rewrite, functions: ['return function() end']}\n", "ownership",
     "attack.yaml:2:5: routes[orders-lua]: source 'orders' may not use serverless-pre-function"),
]


@pytest.mark.slow
def test_each_attack_of_a_hostile_team_is_refused_at_its_line_and_the_owner_is_untouched(
        spawn, git_daemon: GitDaemon, remotes_root: Path, tmp_path: Path) -> None:
    """Issue 41's attacks replayed by a real `gitsync run` over three repos on a git daemon: each refused
    at orders' file:line naming the owner; payments' items, commits and status unchanged; payments'
    next commit still applied; no credential of gitsync's in any payload; its secret field not found by
    the web view's search."""
    platform, payments, orders = (BareRepo.create(remotes_root / f"{tmp_path.name}-{name}.git")
                                  for name in ("platform", "payments", "orders"))
    secrets = tmp_path / "secrets"
    (secrets / "payments").mkdir(parents=True)
    (secrets / "payments" / "PAY_KEY").write_text("payments-alice-key-000")
    with ApisixDouble(ADMIN_KEY) as double:
        platform.commit({"platform.yaml": PLATFORM_UPSTREAM.format(node="127.0.0.1:1980")}, "platform v1")
        pay_first = payments.commit(PAYMENTS, "payments v1")
        orders.commit({"routes.yaml": "routes:\n  - id: orders-1\n    uri: /orders/*\n"
                                      "    upstream_id: platform-web\n"}, "orders v1")
        config = tmp_path / "gitsync.toml"
        config.write_text(f"""
[render]
secrets_dir = "{secrets}"
[writeback]
agent_name = "edge-1"

[[sources]]
name = "platform"
repo = "{git_daemon.url(platform.path.name)}"
owns = ["global_rules", {{ kinds = ["upstreams"], prefix = "platform-" }}]
shares = [{{ kinds = ["upstreams"], prefix = "platform-" }}]

[[sources]]
name = "payments"
repo = "{git_daemon.url(payments.path.name)}"
owns = [{{ kinds = ["routes", "upstreams"], prefix = "payments-" }},
        {{ kinds = ["consumers", "consumer_groups"], prefix = "payments-", labels = {{ team = "payments"}} }}]
traffic = {{ hosts = ["api.example.com"], paths = ["/payments"] }}

[[sources]]
name = "orders"
repo = "{git_daemon.url(orders.path.name)}"
owns = [{{ kinds = ["routes", "upstreams"], prefix = "orders-" }},
        {{ kinds = ["consumers", "consumer_groups"], prefix = "orders-", labels = {{ team = "orders" }} }}]
""")
        token = tmp_path / "ui-token"
        token.write_text("ui-token-of-the-tenancy-agent")
        agent = spawn(None, "--config", str(config), "--ui", "--ui-token-file", str(token),
                      gateways=[double.url])
        # the agent's admin key under config-secret names in the config secrets' directory
        key_file = tmp_path / "admin-key"
        (secrets / "admin_key").hardlink_to(key_file)
        (secrets / "orders").mkdir()
        (secrets / "orders" / "LOOKS_OK").symlink_to(key_file)  # in orders' own directory, another name
        wait_for(lambda: {"payments-pay", "orders-1"} <= set(live(double, "routes")), 15, "every source live")

        def payments_live() -> str:
            held = double.config()
            return json.dumps({kind: [i for i in held.get(kind) or [] if str(i.get("id", i.get("username")))
                                      .startswith("payments-")] for kind in ("routes", "consumers",
                                                                            "consumer_groups")},
                              sort_keys=True)

        before = payments_live()
        assert "payments-alice/credentials/main" in before
        for text, stage, first in ATTACKS:
            sha = orders.commit({"attack.yaml": text}, "orders: an attack")
            found = wait_for(lambda sha=sha: note(orders, sha), 15, f"the note on {first[:40]}")
            assert found[0] == stage and found[1][0].startswith(first), found
            if "LOOKS_OK" in text:
                assert "LOOKS_OK: a file gitsync reads for itself" in found[1][1], found
            assert payments_live() == before
            state = agent.state()["sources"]
            assert state["payments"]["last_good"] == pay_first and not state["payments"].get("bad")
            orders.commit({"attack.yaml": None}, "orders: back")  # the next attack starts from a good tip
        # the owner's own next commit goes live; no payload ever held the admin key
        more = ("routes:\n  - id: payments-more\n    uri: /payments/more\n    hosts: [api.example.com]\n"
                "    upstream_id: platform-web\n")
        pay_next = payments.commit(PAYMENTS | {"conf/more.yaml": more}, "payments v2")
        wait_for(lambda: "payments-more" in live(double, "routes"), 15, "payments' next commit live")
        # state.json is written once the sync is over, after the push
        wait_for(lambda: agent.state()["sources"]["payments"]["last_good"] == pay_next, 10,
                 "payments' next commit its last good")
        assert not any(ADMIN_KEY.encode() in body for body in double.put_bodies)
        # the web view's search never finds a value a source's secret_fields masks
        bearer = token.read_text()
        found = agent.get("/items?q=payments-internal", bearer=bearer)
        assert found.status_code == 200 and "payments-pay" not in found.text
        assert "payments-pay" in agent.get("/items?q=payments-pay", bearer=bearer).text


@pytest.mark.slow
def test_a_teams_commit_with_a_300_mb_file_is_refused_alone_and_costs_the_agent_nothing(
        spawn, git_daemon: GitDaemon, remotes_root: Path, tmp_path: Path) -> None:
    """Issue 42, attack 1 on a source: team A's first commit holds a 300 MB file of zeros beside its
    config (about 300 KB on the wire). A fresh agent, under an address-space limit of 100 MB, refuses
    that commit alone at verify (the object named, and the setting), never inflating it; team B's
    commit goes live all the same; A's next commit, without the file, goes live too."""
    a, b = (BareRepo.create(remotes_root / f"{tmp_path.name}-{name}.git") for name in ("a", "b"))
    with ApisixDouble(ADMIN_KEY) as double, upstream() as node:
        own = {"routes/orders.yaml": team_b(node)["conf/routes.yaml"].replace("b-orders", "a-orders")}
        a.commit(own, "a v1")
        blob = a.zeros(300)
        tree = a.git("mktree", input=f"100644 blob {blob}\tzeros.bin\n040000 tree "
                                     f"{a.git('rev-parse', 'main^{tree}:routes')}\troutes\n".encode())
        a_bomb = a.git("commit-tree", tree, "-p", "main", "-m", "a: the routes, and a large file")
        a.git("update-ref", "refs/heads/main", a_bomb)
        b_first = b.commit(team_b(node), "b v1")
        config = tmp_path / "gitsync.toml"
        config.write_text("".join(
            f'[[sources]]\nname = "{name}"\nrepo = "{git_daemon.url(repo.path.name)}"\n'
            f'owns = [{{ kinds = ["routes", "services", "upstreams"], prefix = "{name}-" }}]\n\n'
            for name, repo in (("a", a), ("b", b))))
        agent = spawn(None, "--config", str(config), gateways=[double.url], env=LIMITED_ENV,
                      preexec=memory_limit(LIMIT_MB))
        wait_for(lambda: set(live(double, "routes")) == {"b-orders"}, 30, "b live, a refused")
        sources = wait_for(lambda: (s := agent.state().get("sources", {})) and a_bomb in s["a"]["bad"] and s,
                           10, "a's commit refused")
        assert sources["b"]["last_good"] == b_first and sources["a"]["last_good"] is None
        why = sources["a"]["bad"][a_bomb]
        assert why.startswith("verify: git://") and re.search(
            r"object \d of \d in the pack \(a blob\) is 300\.0 MiB \(314,572,800 bytes\), more than "
            r"max_object_size = 32\.0 MiB", why), why
        a_next = a.commit({"zeros.bin": None}, "a: without the large file")
        wait_for(lambda: set(live(double, "routes")) == {"a-orders", "b-orders"}, 30, "a's next commit live")
        wait_for(lambda: agent.state()["sources"]["a"]["last_good"] == a_next, 10, "a's next commit recorded")
        log = agent.log()
        assert "Traceback" not in log and "MemoryError" not in log
        assert agent.proc is not None and agent.proc.poll() is None
