"""The agent's side of an artifact source (gitsync.artifact.source), against a real registry and a real git
daemon: a published artifact is found by one HEAD, pulled by digest, verified and kept on disk (a
restart with the registry down still has it); a blob changed on the registry's disk, a manifest
re-pushed with another payload, an unsigned artifact, one signed by a key not allowed, and one naming
another repo or branch are each refused at ``verify`` with the reason."""

from __future__ import annotations

import json

import pytest

from gitsync.artifact.document import digest_of
from gitsync.artifact.publish import built_artifact, push_oci
from gitsync.artifact.registry import EMPTY_CONFIG, Reference, RegistryClient, layers_of, manifest_of
from gitsync.artifact.source import ArtifactSource
from gitsync.settings import load
from gitsync.source.transport import SourceError
from testkit.agents import repo_url
from testkit.artifacts import Publisher, routes
from testkit.registry import PASSWORD, USER, Registry

pytestmark = pytest.mark.slow
ENV = {"GITSYNC_REGISTRY_PASSWORD": PASSWORD}


@pytest.fixture
def registry(tmp_path):
    with Registry(tmp_path / "registry") as started:
        yield started


@pytest.fixture
def setup(tmp_path, git_daemon, remote_repo, registry):
    """A repo with one commit, published to the registry's ``config:main`` by an allowed publisher."""
    url = repo_url(git_daemon, remote_repo)
    remote_repo.commit(routes(), "v1")
    publisher = Publisher.make(tmp_path / "keys", f"main@{url}")
    flags = {"registry_username": USER, "state_dir": str(tmp_path / "pub")}
    published = load(flags={"repo": url, **flags}, env=ENV)
    built = built_artifact(published, publisher.key)
    _, manifest = push_oci(built, registry.url("config"), published)
    return url, publisher, built, manifest, flags


def agent(tmp_path, registry: Registry, url: str, signers, **more) -> ArtifactSource:
    settings = load(flags={"repo": registry.url("config"), "artifact_signers": str(signers),
                           "artifact_repo": url, "registry_username": USER,
                           "state_dir": str(tmp_path / "agent"), **more}, env=ENV)
    return ArtifactSource(settings)


def test_a_published_artifact_is_found_pulled_verified_and_kept(tmp_path, registry, setup):
    url, publisher, built, manifest, _ = setup
    source = agent(tmp_path, registry, url, publisher.signers)
    assert source.check() == manifest
    pulled = source.pull(manifest)
    assert pulled.commit == built.provenance.commit and pulled.digest == built.digest
    assert source.known(manifest) == pulled.commit
    registry.stop()
    again = agent(tmp_path, registry, url, publisher.signers)  # a restart, the registry down
    assert again.artifact(pulled.commit).digest == built.digest
    with pytest.raises(SourceError) as down:
        again.check()
    assert down.value.transient


def refused(source: ArtifactSource, digest: str, message: str) -> None:
    with pytest.raises(SourceError, match=message) as caught:
        source.pull(digest)
    assert caught.value.stage == "verify"
    assert source.refused[digest] is caught.value


def test_a_blob_changed_in_the_registry_is_refused(tmp_path, registry, setup):
    url, publisher, built, manifest, _ = setup
    path = registry.blob_path(built.digest)
    path.write_bytes(built.artifact.replace(b'"v1"', b'"v2"'))
    refused(agent(tmp_path, registry, url, publisher.signers), manifest, "tampered")


def repushed(registry: Registry, artifact: bytes, signature: bytes) -> str:
    client = RegistryClient(Reference.parse(registry.url("config")), username=USER, password=PASSWORD)
    for blob in (EMPTY_CONFIG, artifact, signature):
        client.push_blob(blob)
    return client.put_manifest("main", manifest_of(artifact, signature, {}))


def test_a_manifest_repushed_with_another_payload_is_refused(tmp_path, registry, setup):
    url, publisher, built, _, _ = setup
    document = json.loads(built.artifact)
    document["payload"]["routes"][0]["uri"] = "/stolen"
    other = json.dumps(document, sort_keys=True, separators=(",", ":")).encode()
    digest = repushed(registry, other, built.signature)  # the old signature, on another artifact
    source = agent(tmp_path, registry, url, publisher.signers)
    assert source.check() == digest
    refused(source, digest, "bad signature")


def test_an_unsigned_artifact_is_refused(tmp_path, registry, setup):
    url, publisher, built, _, _ = setup
    client = RegistryClient(Reference.parse(registry.url("config")), username=USER, password=PASSWORD)
    manifest = json.loads(manifest_of(built.artifact, b"", {}))
    manifest["layers"] = manifest["layers"][:1]
    body = json.dumps(manifest).encode()
    digest = client.put_manifest("main", body)
    refused(agent(tmp_path, registry, url, publisher.signers), digest, "not signed")


def test_a_key_not_allowed_is_refused(tmp_path, registry, setup):
    url, _, _, manifest, _ = setup
    stranger = Publisher.make(tmp_path / "stranger", f"main@{url}", name="stranger")
    refused(agent(tmp_path, registry, url, stranger.signers), manifest, "does not allow to publish")


def test_an_artifact_of_another_repo_or_branch_is_refused(tmp_path, registry, setup):
    url, publisher, _, manifest, _ = setup
    refused(agent(tmp_path, registry, url + "-other", publisher.signers), manifest, "not of artifact_repo")
    refused(agent(tmp_path, registry, url, publisher.signers, ref="dev"), manifest, "not of dev")


def test_a_larger_artifact_than_allowed_is_refused_from_its_manifest(tmp_path, registry, remote_repo, setup):
    url, publisher, _, _, flags = setup
    remote_repo.commit(routes(uri="/" + "o" * 2000), "v2: a long uri")
    published = load(flags={"repo": url, **flags}, env=ENV)
    built = built_artifact(published, publisher.key)
    _, manifest = push_oci(built, registry.url("config"), published)
    source = agent(tmp_path, registry, url, publisher.signers, max_artifact_size=1024)
    layers = layers_of(source.client.manifest(manifest)[1])
    assert layers.artifact_size == len(built.artifact) > 1024
    assert digest_of(built.artifact) == layers.artifact
    requests = source.client.requests
    refused(source, manifest, "more than the limit")
    assert source.client.requests == requests + 2  # the manifest and the signature: never the artifact


def test_an_older_artifact_tagged_again_is_refused_and_publishing_it_again_is_a_rollback(
        tmp_path, registry, remote_repo, setup):
    url, publisher, first, _, flags = setup
    settings = load(flags={"repo": url, **flags}, env=ENV)
    remote_repo.commit(routes(uri="/v2"), "v2")
    second = built_artifact(settings, publisher.key)
    _, second_manifest = push_oci(second, registry.url("config"), settings)
    source = agent(tmp_path, registry, url, publisher.signers)
    assert source.pull(second_manifest).commit == second.provenance.commit
    # Whoever can write the tag puts v1's artifact back: well signed, but older than what the agent has.
    replayed = repushed(registry, first.artifact, first.signature)
    assert source.check() == replayed
    refused(source, replayed, "published at .* before the one of commit "
                              f"{second.provenance.commit}.*an older artifact tagged again")
    restarted = agent(tmp_path, registry, url, publisher.signers)  # the newest is kept on disk
    refused(restarted, replayed, "an older artifact tagged again")
    # A deliberate rollback is a publication: v1's content reverted to in git, published, is newer.
    remote_repo.commit(routes(), "revert to v1")
    rollback = built_artifact(settings, publisher.key)
    _, rollback_manifest = push_oci(rollback, registry.url("config"), settings)
    pulled = restarted.pull(rollback_manifest)
    assert pulled.payload["routes"][0]["uri"] == "/orders"
    assert pulled.published > restarted.artifact(second.provenance.commit).published


def test_the_newest_time_kept_unreadable_stops_the_source(tmp_path, registry, setup):
    url, publisher, _, manifest, _ = setup
    agent(tmp_path, registry, url, publisher.signers).pull(manifest)
    (tmp_path / "agent" / "artifacts" / "newest.json").write_text("{not json")
    with pytest.raises(SourceError, match=r"newest\.json: cannot read the newest artifact's time"):
        agent(tmp_path, registry, url, publisher.signers)
