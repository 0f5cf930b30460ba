"""What APISIX refuses because of the state it runs (gitsync.schema.live_state)."""

from __future__ import annotations

from gitsync.schema.live_state import live_conflict

LIVE = {"global_rules": [{"id": "g1", "plugins": {"prometheus": {}}}],
        "consumers": [{"username": "alice", "plugins": {"key-auth": {"key": "k-alice"}}},
                      {"id": "bob/credentials/c1", "plugins": {"key-auth": {"key": "k-bob"}}}]}


def test_a_global_rules_plugin_held_by_another_live_rule_is_refused() -> None:
    assert live_conflict("global_rules", {"id": "g2", "plugins": {"prometheus": {}}}, LIVE) == \
        "plugin 'prometheus' already exists in global rule with id 'g1'"
    assert live_conflict("global_rules", {"id": "g1", "plugins": {"prometheus": {}}}, LIVE) is None
    assert live_conflict("global_rules", {"id": "g2", "plugins": {"zipkin": {}}}, LIVE) is None


def test_a_consumers_key_used_by_another_live_consumer_or_credential_is_refused() -> None:
    def consumer(key: str) -> dict:
        return {"username": "carol", "plugins": {"key-auth": {"key": key}}}

    assert live_conflict("consumers", consumer("k-alice"), LIVE) == \
        "duplicate key of plugin key-auth found with consumer: alice"
    assert live_conflict("consumers", consumer("k-bob"), LIVE) == \
        "duplicate key of plugin key-auth found with credential: c1 of consumer: bob"
    assert live_conflict("consumers", consumer("k-new"), LIVE) is None
    assert live_conflict("consumers", consumer("$secret://vault/main/k"), LIVE) is None  # resolved later
    assert live_conflict("routes", {"id": "r1"}, LIVE) is None
    assert live_conflict("consumers", {}, None) is None
