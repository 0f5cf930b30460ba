"""The ids an item names (gitsync.render.references)."""

from __future__ import annotations

from gitsync.render.references import Reference, dependants, may_refer, references_of, refers_to


def test_an_items_references_are_its_fields_plugins_credential_owner_and_secret_managers() -> None:
    route = {"id": "r1", "upstream_id": "u1", "service_id": 7,
             "plugins": {"consumer-restriction": {"whitelist": ["alice"]},
                         "key-auth": {"header": "$secret://vault/main/key/value"}}}
    found = {(ref.target, ref.ident, ref.label) for ref, _ in references_of("routes", route)}
    assert found == {("upstreams", "u1", "upstream_id"), ("services", "7", "service_id"),
                     ("consumers", "alice", "whitelist entry"), ("secrets", "vault/main", "secret reference")}
    message = dict((ref.target, text) for ref, text in references_of("routes", route))["upstreams"]
    assert message == "upstream_id 'u1' names no item of upstreams"
    credential = {"id": "alice/credentials/one", "plugins": {}}
    assert refers_to("consumers", credential) == {("consumers", "alice")}
    assert references_of("routes", "not an item") == []


def test_which_kinds_may_refer_and_who_names_what() -> None:
    assert may_refer("routes") and may_refer("global_rules") and not may_refer("protos")
    payload = {"routes": [{"id": "r1", "upstream_id": "u1"}, {"id": "r2", "uri": "/x"}],
               "upstreams": [{"id": "u1"}]}
    assert dependants(payload, {("upstreams", "u1")}) == {("routes", "r1")}
    assert Reference("upstreams", ("upstream_id",), "u1", "upstream_id").label == "upstream_id"
