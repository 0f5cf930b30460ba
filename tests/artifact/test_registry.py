"""The OCI registry client (gitsync.artifact.registry) against a real registry (Debian's docker-registry
2.8, htpasswd auth, started by testkit.registry): blobs up and down by digest, the artifact's manifest
under a tag, a HEAD that tells the tag's digest without a body, bytes changed on the registry's disk
caught by their digest, a blob larger than the limit refused from the manifest before it is read,
credentials refused or missing said so, the token flow of a registry with token auth (a token per
scope, kept between polls), and references read as written."""

from __future__ import annotations

import json
from urllib.parse import parse_qs, urlsplit

import pytest

from gitsync.artifact.registry import (
    ARTIFACT_MEDIA_TYPE,
    EMPTY_CONFIG,
    Reference,
    RegistryClient,
    digest_of,
    layers_of,
    manifest_of,
    tag_of,
)
from gitsync.source.transport import SourceError
from testkit.registry import PASSWORD, USER, Registry, TokenService

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    with Registry(tmp_path_factory.mktemp("registry")) as started:
        yield started


def client(registry: Registry, name: str = "config", password: str | None = PASSWORD) -> RegistryClient:
    return RegistryClient(Reference.parse(registry.url(name)), username=USER, password=password, timeout=10)


def pushed(registry: Registry, name: str, artifact: bytes, signature: bytes = b"sig") -> str:
    up = client(registry, name)
    for blob in (EMPTY_CONFIG, artifact, signature):
        up.push_blob(blob)
    return up.put_manifest("main", manifest_of(artifact, signature,
                                               {"org.opencontainers.image.revision": "c" * 40}))


def test_an_artifact_goes_up_and_comes_down_by_digest(registry):
    digest = pushed(registry, "up-down", b'{"format":1}')
    down = client(registry, "up-down")
    assert down.head_manifest("main") == digest
    got, manifest = down.manifest(digest)
    assert got == digest
    layers = layers_of(manifest)
    assert layers.artifact == digest_of(b'{"format":1}') and layers.revision == "c" * 40
    assert json.loads(manifest)["artifactType"] == "application/vnd.gitsync.artifact.v1"
    assert down.blob(layers.artifact, layers.artifact_size, 1 << 20) == b'{"format":1}'
    assert down.blob(layers.signature, layers.signature_size, 1 << 20) == b"sig"


def test_a_poll_that_finds_the_tag_unmoved_is_one_head(registry):
    digest = pushed(registry, "poll", b'{"v":1}')
    poller = client(registry, "poll")
    poller.head_manifest("main")  # the first asks twice: the 401, then with credentials
    before = poller.requests
    assert poller.head_manifest("main") == digest
    assert poller.requests == before + 1
    moved = pushed(registry, "poll", b'{"v":2}')
    assert poller.head_manifest("main") == moved != digest


def test_an_absent_tag_is_none(registry):
    pushed(registry, "absent", b"{}")
    assert client(registry, "absent").head_manifest("no-such-tag") is None


def test_a_blob_changed_on_the_registrys_disk_is_caught_by_its_digest(registry):
    data = b'{"payload":"original"}'
    pushed(registry, "tamper", data)
    path = registry.blob_path(digest_of(data))
    path.write_bytes(data.replace(b"original", b"0riginal"))  # one byte, same size
    with pytest.raises(SourceError, match="do not have that digest: tampered") as refused:
        client(registry, "tamper").blob(digest_of(data), len(data), 1 << 20)
    assert refused.value.stage == "verify"


def test_a_blob_over_the_limit_is_refused_before_it_is_read(registry):
    data = b"x" * 5000
    pushed(registry, "large", data)
    reader = client(registry, "large")
    before = reader.requests
    with pytest.raises(SourceError, match="more than the limit"):
        reader.blob(digest_of(data), len(data), 4096)
    assert reader.requests == before  # nothing asked


def test_a_blob_longer_than_its_manifest_says_is_not_read_past_that(registry):
    data = b"y" * 9000
    pushed(registry, "lying", data)
    with pytest.raises(SourceError, match="larger than 4196 bytes"):  # its size and a refusal's allowance
        client(registry, "lying").blob(digest_of(data), 100, 1 << 20)


def test_credentials_refused_or_missing_are_said_so(registry):
    pushed(registry, "auth", b"{}")
    with pytest.raises(SourceError, match=r"credentials refused \(401\)"):
        client(registry, "auth", password="not-the-password-at-all").head_manifest("main")
    anonymous = RegistryClient(Reference.parse(registry.url("auth")), timeout=10)
    with pytest.raises(SourceError, match="set registry_username and registry_password"):
        anonymous.head_manifest("main")


def test_a_registry_that_does_not_answer_is_a_transient_failure(tmp_path):
    stopped = Registry(tmp_path).start()
    url = stopped.url("gone")
    stopped.stop()
    with pytest.raises(SourceError) as failed:
        RegistryClient(Reference.parse(url), username=USER, password=PASSWORD,
                       timeout=2).head_manifest("main")
    assert failed.value.transient and failed.value.unreachable


def test_a_manifest_without_a_signature_layer_is_refused():
    manifest = json.loads(manifest_of(b"{}", b"sig", {}))
    manifest["layers"] = [layer for layer in manifest["layers"] if layer["mediaType"] == ARTIFACT_MEDIA_TYPE]
    with pytest.raises(SourceError, match="not signed"):
        layers_of(json.dumps(manifest).encode())
    with pytest.raises(SourceError, match="not an OCI image manifest"):
        layers_of(b"[]")


@pytest.mark.parametrize(("text", "expected"), [
    ("oci://127.0.0.1:5000/config:main", Reference("127.0.0.1:5000", "config", "main")),
    ("oci://registry.example/team/config", Reference("registry.example", "team/config")),
    ("oci://r.example:443/a/b:v1.2@sha256:" + "a" * 64,
     Reference("r.example:443", "a/b", "v1.2", "sha256:" + "a" * 64)),
])
def test_references_are_read_as_written(text, expected):
    assert Reference.parse(text) == expected


@pytest.mark.parametrize(("text", "message"), [
    ("https://r.example/a", "oci://host"),
    ("oci://user:pw@r.example/a", "no credentials"),
    ("oci://r.example/UPPER", "not a repository name"),
    ("oci://r.example/a:bad/tag", "not a repository name"),
    ("oci://r.example/a@sha256:123", "not a sha256 digest"),
])
def test_a_bad_reference_is_refused_naming_why(text, message):
    with pytest.raises(ValueError, match=message):
        Reference.parse(text)


def test_loopback_is_plain_http_and_any_other_host_https():
    assert Reference.parse("oci://127.0.0.1:5000/a").base == "http://127.0.0.1:5000/v2/a"
    assert Reference.parse("oci://registry.example/a").base == "https://registry.example/v2/a"


def test_a_branch_becomes_a_tag():
    assert tag_of("main") == "main"
    assert tag_of("release/2026-12") == "release-2026-12"


def test_the_token_flow_of_a_registry_with_token_auth(tmp_path):
    service = TokenService(tmp_path / "token")
    try:
        with Registry(tmp_path / "registry", token=service) as registry:
            up = RegistryClient(Reference.parse(registry.url("team/config")), username=USER,
                                password=PASSWORD, timeout=10)
            for blob in (EMPTY_CONFIG, b'{"v":1}', b"sig"):
                up.push_blob(blob)
            digest = up.put_manifest("main", manifest_of(b'{"v":1}', b"sig", {}))
            # a pull token first (the HEAD of a blob), then one for pull and push (the upload's 401)
            assert [parse_qs(urlsplit(path).query)["scope"] for path in service.requests] == \
                [["repository:team/config:pull"], ["repository:team/config:pull,push"]]

            poller = RegistryClient(Reference.parse(registry.url("team/config")), username=USER,
                                    password=PASSWORD, timeout=10)
            asked = len(service.requests)
            assert [poller.head_manifest("main") for _ in range(3)] == [digest] * 3
            assert len(service.requests) == asked + 1  # one token, kept for the polls after

            wrong = RegistryClient(Reference.parse(registry.url("team/config")), username=USER,
                                   password="not-the-password-at-all", timeout=10)
            with pytest.raises(SourceError, match=r"token service of .* answered 401"):
                wrong.head_manifest("main")
    finally:
        service.close()
