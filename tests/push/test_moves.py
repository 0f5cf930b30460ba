"""Moves the live state refuses (gitsync.push.moves) and the two-step apply that carries them out.

The pure first step is checked against `gitsync.schema.check_payload` with the live config,
the model of APISIX's checks the double answers with; the push loop against the double over
real HTTP (and once through the real ``gitsync sync`` process).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from ruamel.yaml import YAML

from gitsync.kinds import KINDS
from gitsync.push.admin_api import Endpoint
from gitsync.push.apply import RetryPolicy, sync_gateway
from gitsync.push.moves import first_step, is_move_refusal
from gitsync.push.plan import Policy, item_content, items_equal, plan
from gitsync.push.results import SyncStatus
from gitsync.schema import check_payload
from gitsync.schema.plugins import AUTH_KEY_FIELDS, PLUGINS
from gitsync.settings import Secret
from gitsync.testing.apisix import ApisixDouble
from gitsync.testing.http import Reply
from testkit.agents import repo_url
from testkit.gitservers import git
from testkit.processes import run_gitsync
from testkit.profiles import examples

KEY = "test-admin-key"
FAST = RetryPolicy(attempts=3, race_base=0.01, unavailable_base=0.01, cap=0.05)
#: Every auth plugin APISIX 3.18 refuses a shared key for, with the field that holds the key.
KEYED = {plugin: field for plugin, field in AUTH_KEY_FIELDS.items() if plugin in PLUGINS}
#: What else a plugin's consumer config needs to be valid, beside its key field.
REQUIRED = {"basic-auth": {"password": "a-password"}}


def consumer(name: str, **plugins: dict[str, Any]) -> dict[str, Any]:
    return {"username": name, "plugins": plugins}


def key_auth(key: str) -> dict[str, Any]:
    return {"key-auth": {"key": key}}


def rule(rid: str, *plugins: str) -> dict[str, Any]:
    return {"id": rid, "plugins": {name: {} for name in plugins}}


def refusals(body: dict[str, Any], live: dict[str, Any]) -> list[str]:
    """What the gateway model refuses in `body` while `live` is live."""
    return [issue.message for issue in check_payload(body, live=live)]


def assert_two_steps_pass(desired: dict[str, Any], live: dict[str, Any]) -> dict[str, Any]:
    """The one push is refused, the first step is not, and the desired config is not once the
    gateway holds the first step. Returns the first step's payload."""
    assert refusals(desired, live)  # why a first step is needed at all
    step = first_step(desired, live)
    assert step is not None
    assert refusals(step.payload, live) == []
    assert refusals(desired, {**live, **step.payload}) == []
    return step.payload


# ---------------------------------------------------------------------------------------------------------
# The first step, pure


def test_a_key_moved_to_another_consumer_is_left_out_of_the_first_step() -> None:
    live = {"consumers": [consumer("jack", **key_auth("k1"))]}
    limit = {"limit-count": {"count": 1, "time_window": 60}}
    desired = {"consumers": [consumer("rose", **key_auth("k1"), **limit)]}
    payload = assert_two_steps_pass(desired, live)
    assert payload["consumers"] == [consumer("rose", **limit)]  # jack already gone
    moves = first_step(desired, live).moves
    assert [str(m) for m in moves] == [
        "consumers[rose] takes key-auth (duplicate key of plugin key-auth found with consumer: jack)"]


@pytest.mark.parametrize("plugin", sorted(KEYED))
def test_every_keyed_auth_plugin_moves(plugin: str) -> None:
    field = KEYED[plugin]
    conf = {field: "secret-value-77", **REQUIRED.get(plugin, {})}
    live = {"consumers": [consumer("jack", **{plugin: conf}), consumer("rose")]}
    desired = {"consumers": [consumer("jack"), consumer("rose", **{plugin: conf})]}
    assert_two_steps_pass(desired, live)
    assert "secret-value-77" not in " ".join(map(str, first_step(desired, live).moves))  # logged: no keys


def test_two_consumers_swap_their_keys() -> None:
    live = {"consumers": [consumer("jack", **key_auth("k1")), consumer("rose", **key_auth("k2"))]}
    desired = {"consumers": [consumer("jack", **key_auth("k2")), consumer("rose", **key_auth("k1"))]}
    payload = assert_two_steps_pass(desired, live)
    assert payload["consumers"] == [consumer("jack"), consumer("rose")]


def test_a_key_taken_from_a_live_credential() -> None:
    live = {"consumers": [consumer("jack"), {"id": "jack/credentials/c1", "plugins": key_auth("k1")}]}
    desired = {"consumers": [consumer("jack"), consumer("rose", **key_auth("k1"))]}
    assert refusals(desired, live) == [
        "duplicate key of plugin key-auth found with credential: c1 of consumer: jack"]
    assert_two_steps_pass(desired, live)


def test_a_key_given_to_a_credential_needs_no_first_step() -> None:
    # APISIX 3.18 does not check a credential's key against live consumers (recorded on the gateway).
    live = {"consumers": [consumer("jack", **key_auth("k1"))]}
    desired = {"consumers": [consumer("rose"), {"id": "rose/credentials/c1", "plugins": key_auth("k1")}]}
    assert refusals(desired, live) == []
    assert first_step(desired, live) is None


def test_a_global_rule_plugin_moves_and_the_old_rule_keeps_the_rest() -> None:
    live = {"global_rules": [rule("g1", "cors", "prometheus")]}
    desired = {"global_rules": [rule("g1", "prometheus"), rule("g2", "cors", "real-ip")]}
    payload = assert_two_steps_pass(desired, live)
    assert payload["global_rules"] == [rule("g1", "prometheus"), rule("g2", "real-ip")]


def test_a_move_into_a_rule_that_keeps_its_id_is_no_move() -> None:
    live = {"global_rules": [rule("g1", "cors")]}
    assert first_step({"global_rules": [rule("g1", "cors", "prometheus")]}, live) is None


def test_a_part_the_desired_config_gives_to_two_owners_gets_no_first_step() -> None:
    live = {"consumers": [consumer("jack", **key_auth("k1"))], "global_rules": [rule("g1", "cors")]}
    both = {"consumers": [consumer("jack", **key_auth("k1")), consumer("rose", **key_auth("k1"))]}
    assert first_step(both, live) is None  # the gateway's own refusal is the right answer
    assert first_step({"global_rules": [rule("g1", "cors"), rule("g2", "cors")]}, live) is None


def test_no_first_step_for_kinds_not_sent() -> None:
    live = {"consumers": [consumer("jack", **key_auth("k1"))]}
    desired = {"consumers": [consumer("rose", **key_auth("k1"))]}
    assert first_step(desired, live, Policy(frozenset({"consumers"}))) is None  # unmanaged: not sent
    assert first_step(live, live) is None  # unchanged: not sent
    assert first_step({"consumers": [consumer("rose", **key_auth("$secret://vault/k1"))]}, live) is None


def test_the_refusals_the_push_loop_retries_after_a_first_step() -> None:
    assert is_move_refusal("the gateway rejected the config: duplicate key of plugin key-auth found with "
                           "consumer: jack")
    assert is_move_refusal("duplicate username of plugin basic-auth found with credential: c1 of consumer: j")
    assert is_move_refusal("plugin 'cors' already exists in global rule with id 'g1'")
    assert not is_move_refusal("found duplicate username jack in consumers")


# ---------------------------------------------------------------------------------------------------------
# The push loop


def endpoint(double: ApisixDouble) -> Endpoint:
    return Endpoint(double.url, Secret(KEY), timeout=5.0)


def served(double: ApisixDouble, kind: str) -> list[Any]:
    return [item_content(item) for item in double.running(kind).values()]


def test_a_key_and_a_plugin_move_in_one_sync_of_two_pushes(apisix: ApisixDouble) -> None:
    apisix.out_of_band("consumers", [consumer("jack", **key_auth("k1"))])
    apisix.out_of_band("global_rules", [rule("g1", "cors")])
    desired = {"consumers": [consumer("rose", **key_auth("k1"))], "global_rules": [rule("g2", "cors")]}
    result = sync_gateway(endpoint(apisix), desired, retry=FAST)
    assert result.status is SyncStatus.APPLIED and result.two_step and result.attempts == 1
    assert result.summary() == (f"{apisix.url}: applied (consumers, global_rules changed; two-step apply), "
                                "accepted; "
                                "pruned 1 out-of-band consumers: jack; pruned 1 out-of-band global_rules: g1")
    assert result.to_dict()["two_step"] is True
    assert [(m, status) for m, _, status in apisix.requests] == [
        ("GET", 200), ("PUT", 202), ("GET", 200), ("PUT", 202), ("HEAD", 200)]
    assert served(apisix, "consumers") == [item_content(c) for c in desired["consumers"]]
    assert served(apisix, "global_rules") == [item_content(r) for r in desired["global_rules"]]
    again = sync_gateway(endpoint(apisix), desired, retry=FAST)
    assert again.status is SyncStatus.UNCHANGED and not again.two_step and again.puts == 0


class LaggingDouble(ApisixDouble):
    """A gateway whose admin worker still runs the old consumers when the second push arrives."""

    lagged = 0

    def _put(self, h: Any, body: bytes) -> Reply:
        if self.put_bodies.count(body) == 1 and len(self.put_bodies) == 2 and not self.lagged:
            self.lagged += 1
            return Reply(400, b'{"error_msg":"duplicate key of plugin key-auth found with consumer: jack"}\n')
        return super()._put(h, body)


def test_a_second_push_refused_before_the_first_is_running_is_retried() -> None:
    with LaggingDouble(KEY) as double:
        double.out_of_band("consumers", [consumer("jack", **key_auth("k1"))])
        desired = {"consumers": [consumer("rose", **key_auth("k1"))]}
        result = sync_gateway(endpoint(double), desired, retry=FAST)
        assert double.lagged == 1
        assert result.status is SyncStatus.APPLIED and result.two_step and result.attempts == 2
        assert items_equal(desired["consumers"], double.config()["consumers"])


def test_a_refused_first_step_is_reported_for_what_it_sent(apisix: ApisixDouble) -> None:
    apisix.out_of_band("consumers", [consumer("jack", **key_auth("k1"))])
    desired = {"consumers": [consumer("rose", **key_auth("k1"))], "routes": [{"id": "r1", "uri": 5}]}
    result = sync_gateway(endpoint(apisix), desired, retry=FAST)
    assert result.status is SyncStatus.FAILED and not result.two_step and result.puts == 1
    assert [p.message for p in result.problems] == [  # the route, not the move the first step prepared
        'invalid configuration: property "uri" validation failed: wrong type: expected string, got number']


@pytest.mark.slow
def test_the_cli_says_a_two_step_apply_happened(tmp_path: Path, apisix: ApisixDouble) -> None:
    (tmp_path / "repo").mkdir()
    (tmp_path / "repo" / "consumers.yaml").write_text(
        "consumers:\n  - username: rose\n    plugins:\n      key-auth:\n        key: moved-key-31\n")
    (tmp_path / "admin.key").write_text(KEY + "\n")
    apisix.out_of_band("consumers", [consumer("jack", **key_auth("moved-key-31"))])
    done = run_gitsync("sync", "--once", "--dir", str(tmp_path / "repo"), "--gateway", apisix.url,
                       "--admin-key-file", str(tmp_path / "admin.key"))
    assert done.returncode == 0, done.stderr
    assert done.stdout == (f"{apisix.url}: applied (consumers changed; two-step apply), accepted; "
                           "pruned 1 out-of-band consumers: jack\n")
    assert ("two-step apply: consumers[rose] takes key-auth (duplicate key of plugin key-auth found with "
            "consumer: jack)") in done.stderr
    assert "moved-key-31" not in done.stdout + done.stderr


@pytest.mark.slow
def test_the_status_file_says_a_two_step_apply_happened(tmp_path: Path, apisix: ApisixDouble, git_daemon,
                                                        remote_repo) -> None:
    remote_repo.commit({"consumers.yaml": "consumers:\n  - username: rose\n    plugins:\n      key-auth:\n"
                                          "        key: moved-key-32\n"}, "rose takes jack's key")
    (tmp_path / "admin.key").write_text(KEY + "\n")
    apisix.out_of_band("consumers", [consumer("jack", **key_auth("moved-key-32"))])
    done = run_gitsync("sync", "--once", "--repo", repo_url(git_daemon, remote_repo), "--gateway",
                       apisix.url, "--admin-key-file", str(tmp_path / "admin.key"), "--state-dir",
                       str(tmp_path / "state"), "--writeback", "on", "--agent-name", "mover")
    assert done.returncode == 0, done.stderr
    status = git("--git-dir", str(remote_repo.path), "show", "refs/gitsync/status/mover:status.yaml")
    (gateway,) = YAML(typ="safe").load(status)["gateways"]
    assert gateway["two_step"] is True and gateway["status"] == "applied"
    assert "moved-key-32" not in status


# ---------------------------------------------------------------------------------------------------------
# Property: any move of keys and global-rule plugins between live items converges in one sync.

CONSUMERS = ("jack", "rose", "mary")
CREDENTIALS = ("jack/credentials/c1", "rose/credentials/c2")
KEYS = tuple((plugin, value) for plugin in ("key-auth", "basic-auth", "jwt-auth") for value in ("k1", "k2"))
RULES = ("g1", "g2", "g3")
RULE_PLUGINS = ("cors", "prometheus", "real-ip")


def owned(assignment: dict[Any, str | None]) -> dict[str, list[Any]]:
    """Owner → the parts it holds: a credential one auth plugin at most, a consumer one key per plugin."""
    held: dict[str, list[Any]] = {}
    for part, owner in assignment.items():
        if owner is None:
            continue
        mine = held.setdefault(owner, [])
        plugin = part[0] if isinstance(part, tuple) else part
        if ("/credentials/" in owner and mine) or any(
                (p[0] if isinstance(p, tuple) else p) == plugin for p in mine):
            continue
        mine.append(part)
    return held


def consumers_of(assignment: dict[Any, str | None], present: list[str]) -> list[dict[str, Any]]:
    held = owned(assignment)
    out: list[dict[str, Any]] = []
    for name in present:
        plugins = {plugin: {KEYED[plugin]: value, **REQUIRED.get(plugin, {})}
                   for plugin, value in held.get(name, [])}
        out.append({"username": name, "plugins": plugins})
        for credential in CREDENTIALS:
            if credential.startswith(name + "/") and held.get(credential):
                plugin, value = held[credential][0]
                out.append({"id": credential,
                            "plugins": {plugin: {KEYED[plugin]: value, **REQUIRED.get(plugin, {})}}})
    return out


def rules_of(assignment: dict[Any, str | None], present: list[str]) -> list[dict[str, Any]]:
    held = owned(assignment)
    return [rule(rid, *held.get(rid, [])) for rid in present]


@st.composite
def states(draw: st.DrawFn) -> tuple[list[Any], list[Any]]:
    present = draw(st.lists(st.sampled_from(CONSUMERS), unique=True, min_size=1))
    keys = {part: draw(st.sampled_from((None, *present, *CREDENTIALS))) for part in KEYS}
    rules = draw(st.lists(st.sampled_from(RULES), unique=True, min_size=1))
    plugins = {name: draw(st.sampled_from((None, *rules))) for name in RULE_PLUGINS}
    return consumers_of(keys, present), rules_of(plugins, rules)


@pytest.mark.slow
@examples(0.75)
@given(live=states(), wanted=states())
def test_any_move_converges_in_one_sync(shared_apisix: ApisixDouble, live: tuple, wanted: tuple) -> None:
    double = shared_apisix
    double.out_of_band("consumers", live[0])
    double.out_of_band("global_rules", live[1])
    before = double.config()
    moved = {"consumers": wanted[0], "global_rules": wanted[1]}
    desired: dict[str, Any] = {kind: [] for kind in KINDS} | moved
    needed = bool(refusals(moved, before))  # one push would be refused
    result = sync_gateway(endpoint(double), desired, retry=FAST)
    assert result.ok and result.attempts == 1, (result.error, [str(p) for p in result.problems])
    assert result.two_step == needed
    for kind in ("consumers", "global_rules"):
        assert items_equal(desired[kind], double.config().get(kind)), kind
        assert served(double, kind) == [item_content(i) for i in desired[kind]], kind
    again = sync_gateway(endpoint(double), desired, retry=FAST)
    assert again.status is SyncStatus.UNCHANGED and again.puts == 0


@pytest.mark.slow
def test_diff_says_a_two_step_apply_would_happen(tmp_path: Path, apisix: ApisixDouble) -> None:
    apisix.out_of_band("consumers", [consumer("jack", **key_auth("k-moving-1")), consumer("rose")])
    (tmp_path / "c.yaml").write_text("consumers:\n  - username: jack\n  - username: rose\n"
                                     "    plugins:\n      key-auth:\n        key: k-moving-1\n")
    key = tmp_path / "key"
    key.write_text(KEY)
    result = run_gitsync("diff", "--dir", str(tmp_path), "--gateway", apisix.url,
                         "--admin-key-file", str(key))
    assert result.returncode == 1, result.stderr
    assert "two-step apply: consumers[rose] takes key-auth" in result.stdout
    assert "k-moving-1" not in result.stdout + result.stderr


def test_each_moved_part_is_named_with_its_own_refusal() -> None:
    basic = {"basic-auth": {"username": "u1", "password": "a-password"}}
    live = {"consumers": [consumer("jack", **key_auth("k1")), consumer("jill", **basic), consumer("rose")]}
    limit = {"limit-count": {"count": 1, "time_window": 60}}
    rose = consumer("rose", **limit, **key_auth("k1"), **basic)  # the moved plugins after another one
    desired = {"consumers": [consumer("jack"), consumer("jill"), rose]}
    step = first_step(desired, live)
    assert step is not None
    assert [str(m) for m in step.moves] == [
        "consumers[rose] takes key-auth (duplicate key of plugin key-auth found with consumer: jack)",
        "consumers[rose] takes basic-auth (duplicate username of plugin basic-auth found with consumer: "
        "jill)"]
    assert step.payload["consumers"][2] == consumer("rose", **limit)


def test_moves_of_every_item_are_kept() -> None:
    live = {"consumers": [consumer("jack", **key_auth("k1")), consumer("rose", **key_auth("k2"))]}
    desired = {"consumers": [consumer("jack", **key_auth("k2")), consumer("rose", **key_auth("k1"))]}
    step = first_step(desired, live)
    assert step is not None
    assert [(m.id, m.plugin) for m in step.moves] == [("jack", "key-auth"), ("rose", "key-auth")]


def test_a_plan_that_does_not_send_a_kind_has_it_checked_by_nobody() -> None:
    live = {"consumers": [consumer("jack", **key_auth("k1"))], "consumers_conf_version": 1}
    desired = {"consumers": [consumer("rose", **key_auth("k1"))]}
    without = plan({"routes": []}, {"routes_conf_version": 1})  # a plan with no consumers in it
    assert first_step(desired, live, the_plan=without) is None
    assert first_step(desired, live, the_plan=plan(desired, live)) is not None
