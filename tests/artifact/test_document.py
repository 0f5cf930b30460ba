"""The artifact document (gitsync.artifact.document): secret references stay references (a value the
host holds never reaches the artifact), the document is canonical (one render, one digest), it reads
back into the render the git path would give once the host's secrets are in, with file:line for every
item and the checks as declared, and a malformed one is refused naming what is wrong."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from gitsync.artifact.document import (
    ArtifactError,
    Provenance,
    ReferenceMarkers,
    build,
    digest_of,
    expand_references,
    parse,
)
from gitsync.problems import ProblemsError
from gitsync.render import render
from gitsync.render.options import RenderOptions
from testkit.artifacts import HOST_SECRET, routes

CHECKS = ("checks:\n  - name: orders-up\n"
          "    request: {path: /orders, host: api.example.com, headers: {X-Probe: a}}\n"
          "    expect: {status: [200, \"300-302\"], headers: {Content-Type: '^application/json'},"
          " body: '\"ok\"'}\n"
          "    timeout: 2s\n    retries: 1\n    interval: 0.5s\n")
PROVENANCE = Provenance(repo="git://127.0.0.1:9418/config", branch="main", commit="a" * 40, subject="v1",
                        message="v1\n", committed="2026-12-07T00:00:00+00:00", version="0.1.0")


def published(files: dict[str, str]) -> bytes:
    """`files` rendered as the publisher renders them (a marker per secret), built into an artifact."""
    markers = ReferenceMarkers()
    rendered = render({k: v.encode() for k, v in files.items()}, RenderOptions(secret_lookup=markers))
    return build(rendered, markers, PROVENANCE)


def host(name: str) -> str | None:
    return HOST_SECRET if name == "JACK_KEY" else None


def test_a_secret_reference_stays_a_reference_and_the_host_puts_its_own_value_in():
    files = routes()
    artifact = published(files)
    assert HOST_SECRET.encode() not in artifact
    document = json.loads(artifact)
    consumer = document["payload"]["consumers"][0]
    assert consumer["plugins"]["key-auth"]["key"] == "${{ secrets.JACK_KEY }}"
    assert document["references"] == {"consumers": [0]}

    rendered = expand_references(parse(artifact), host)
    on_git = render({k: v.encode() for k, v in files.items()}, RenderOptions(secret_lookup=host))
    assert rendered.payload == on_git.payload
    assert rendered.contents == on_git.contents
    assert rendered.ids == on_git.ids
    assert rendered.splits == on_git.splits
    assert rendered.secret_values == frozenset({HOST_SECRET})
    assert document["contents"]["consumers"] == [None]  # its content is the host's: worked out there
    assert document["contents"]["routes"] == [on_git.contents["routes"][0].decode()]


def test_a_literal_expression_written_escaped_survives_the_round_trip():
    files = {"conf/routes.yaml": "routes:\n  - id: r\n    uri: /a\n    desc: \"costs $${{ not.a.secret }}\"\n"
                                 "    upstream: {nodes: {\"127.0.0.1:1\": 1}, type: roundrobin}\n"}
    artifact = published(files)
    assert json.loads(artifact)["payload"]["routes"][0]["desc"] == "costs $${{ not.a.secret }}"
    rendered = expand_references(parse(artifact), host)
    assert rendered.payload["routes"][0]["desc"] == "costs ${{ not.a.secret }}"


def test_the_same_render_gives_the_same_bytes_and_digest():
    first, second = published(routes()), published(routes())
    assert first == second  # the markers' nonces differ: the document does not show them
    assert digest_of(first) == parse(first).digest
    assert first == json.dumps(json.loads(first), sort_keys=True, separators=(",", ":"),
                               ensure_ascii=False).encode()
    assert published(routes(uri="/other")) != first


def test_every_item_keeps_its_file_and_line():
    rendered = expand_references(parse(published(routes())), host)
    on_git = render({k: v.encode() for k, v in routes().items()}, RenderOptions(secret_lookup=host))
    assert str(rendered.source_map.location("routes", 0)) == "conf/routes.yaml:7:5"
    assert str(rendered.source_map.location("consumers", 0)) == "conf/routes.yaml:13:5"
    for kind, items in on_git.payload.items():
        assert [rendered.source_map.location(kind, i) for i in range(len(items))] == \
            [on_git.source_map.location(kind, i) for i in range(len(items))]


def test_checks_are_carried_as_declared():
    files = {**routes(), "conf/checks.yaml": CHECKS}
    on_git = render({k: v.encode() for k, v in files.items()}, RenderOptions(secret_lookup=host))
    carried = expand_references(parse(published(files)), host).checks
    assert len(carried) == 1
    check, declared = carried[0], on_git.checks[0]
    assert replace(check, expect_body=None, expect_headers=()) == \
        replace(declared, expect_body=None, expect_headers=())
    assert check.expect_body.pattern == declared.expect_body.pattern
    assert [(n, p.pattern) for n, p in check.expect_headers] == \
        [(n, p.pattern) for n, p in declared.expect_headers]
    assert str(check.location) == "conf/checks.yaml:2:5"


def test_a_secret_the_host_lacks_is_refused_at_the_items_place():
    with pytest.raises(ProblemsError) as refused:
        expand_references(parse(published(routes())), lambda name: None)
    assert refused.value.stage == "render"
    (problem,) = refused.value.problems
    assert str(problem.location) == "conf/routes.yaml:13:5"
    assert "undefined secret secrets.JACK_KEY" in problem.message


def test_a_decrypted_value_cannot_be_published():
    markers = ReferenceMarkers()
    rendered = render({k: v.encode() for k, v in routes().items()}, RenderOptions(secret_lookup=markers))
    with_sops = replace(rendered, secret_values=rendered.secret_values | {"a-value-from-a-sops-file"})
    with pytest.raises(ArtifactError, match="SOPS"):
        build(with_sops, markers, PROVENANCE)


def test_no_yaml_is_read_on_the_host(monkeypatch):
    artifact = published({**routes(), "conf/checks.yaml": CHECKS})

    def no_yaml(*_args, **_kwargs):
        raise AssertionError("the artifact path parsed YAML")

    import gitsync.render.load as load
    monkeypatch.setattr(load, "_Loader", no_yaml)  # the one YAML reader: every parse and position
    rendered = expand_references(parse(artifact), host)
    assert rendered.payload["consumers"][0]["plugins"]["key-auth"]["key"] == HOST_SECRET
    with pytest.raises(AssertionError, match="parsed YAML"):  # the patch is where the git path parses
        render({k: v.encode() for k, v in routes().items()}, RenderOptions(secret_lookup=host))


@pytest.mark.parametrize(("change", "message"), [
    (lambda d: d.update(format=2), "this gitsync reads format 1"),
    (lambda d: d.pop("payload"), "field 'payload' is missing"),
    (lambda d: d["sources"]["routes"].pop(), "its items and its sources do not match"),
    (lambda d: d.update(references={"routes": [7]}), "indexes into its payload list"),
    (lambda d: d.update(commit="not-a-commit"), "not a commit id"),
    (lambda d: d["contents"]["routes"].pop(), "one per item of its payload list"),
    (lambda d: d.pop("published"), "field 'published' is missing"),
    (lambda d: d.update(published="yesterday"), "'published' is not an ISO 8601 time"),
    (lambda d: d.update(published="2026-12-08T01:00:00"), "'published' has no time zone"),
])
def test_a_malformed_artifact_is_refused_naming_what_is_wrong(change, message):
    document = json.loads(published(routes()))
    change(document)
    with pytest.raises(ArtifactError, match=message):
        parse(json.dumps(document).encode())


def test_bytes_that_are_not_json_are_refused():
    with pytest.raises(ArtifactError, match="not JSON"):
        parse(b"\x00garbage")
