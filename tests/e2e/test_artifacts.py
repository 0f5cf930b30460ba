"""Artifacts end to end, with real processes: CI publishes (``gitsync publish``) into a real registry
(Debian's docker-registry with htpasswd auth); three ``gitsync run`` agents pull from it against Admin
API doubles, one canary and two in the main group that follow it (``after_group``), their statuses
written to the config repo's git remote (a real git daemon). A tampered artifact (another payload under
the old signature) and an unsigned one are refused, the last good stays live and the agents' state says
why; the registry killed (SIGKILL) leaves the last good live, and back on its port it is asked again
and a new artifact goes live. Every gateway gets the host's own secret for the consumer's key; the
registry never holds it."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator

import pytest

from gitsync.artifact.registry import EMPTY_CONFIG, Reference, RegistryClient, manifest_of
from gitsync.testing.apisix import ApisixDouble
from testkit.agents import ADMIN_KEY, repo_url
from testkit.artifacts import HOST_SECRET, Publisher, agent_flags, host_secrets, registry_env, routes
from testkit.processes import run_gitsync, wait_for
from testkit.registry import PASSWORD, USER, Registry

pytestmark = pytest.mark.slow

SOAK = 1.0
NAME = "config"


@pytest.fixture
def doubles() -> Iterator[list[ApisixDouble]]:
    started = [ApisixDouble(ADMIN_KEY).start() for _ in range(3)]
    yield started
    for double in started:
        double.stop()


def uri(double: ApisixDouble) -> str | None:
    found = double.config().get("routes") or []
    return found[0]["uri"] if found else None


def key(double: ApisixDouble) -> str | None:
    found = double.config().get("consumers") or []
    return found[0]["plugins"]["key-auth"]["key"] if found else None


def publish(tmp_path, registry: Registry, url: str, publisher: Publisher) -> str:
    done = run_gitsync("publish", "--repo", url, "--to", registry.url(NAME), "--key", str(publisher.key),
                       "--state-dir", str(tmp_path / "ci"),
                       "--secrets-dir", str(host_secrets(tmp_path / "ci-s")),
                       env=registry_env(tmp_path))
    assert done.returncode == 0, done.stderr
    return done.stdout.split()[2]  # the manifest's digest


def test_ci_publishes_a_canary_gates_the_others_and_a_bad_artifact_or_a_dead_registry_leaves_the_last_good(
        tmp_path, spawn, git_daemon, remote_repo, doubles):
    url = repo_url(git_daemon, remote_repo)
    publisher = Publisher.make(tmp_path / "keys", f"main@{url}")
    secrets = host_secrets(tmp_path / "host-secrets")
    with Registry(tmp_path / "registry") as registry:
        v1 = remote_repo.commit(routes(uri="/v1"), "v1")
        publish(tmp_path, registry, url, publisher)
        common = [*agent_flags(registry, NAME, publisher, url, secrets), "--writeback", "on",
                  "--status-heartbeat", "1s", "--soak", f"{SOAK:g}s"]
        env = registry_env(tmp_path)
        canary = spawn(None, *common, "--group", "canary", "--agent-name", "canary-0",
                       gateways=[doubles[0].url], name="canary-0", env=env)
        mains = [spawn(None, *common, "--group", "main", "--after-group", "canary", "--after-count", "1",
                       "--agent-name", f"main-{i}", gateways=[doubles[1 + i].url], name=f"main-{i}", env=env)
                 for i in range(2)]
        agents = [canary, *mains]
        wait_for(lambda: all(uri(d) == "/v1" for d in doubles), 40, "v1 on every gateway")
        assert all(key(d) == HOST_SECRET for d in doubles)
        wait_for(lambda: all(a.state().get("last_good") == v1 for a in agents), 10, "v1 the last good")

        # A new commit: the canary first, the main group after the canary's status shows it for the soak.
        v2 = remote_repo.commit(routes(uri="/v2"), "v2")
        publish(tmp_path, registry, url, publisher)
        wait_for(lambda: uri(doubles[0]) == "/v2", 20, "v2 on the canary")
        on_canary = time.monotonic()
        assert uri(doubles[1]) == uri(doubles[2]) == "/v1"
        wait_for(lambda: uri(doubles[1]) == uri(doubles[2]) == "/v2", 30, "v2 on the main group")
        assert time.monotonic() - on_canary >= SOAK - 0.5
        assert all("waits" in m.log() for m in mains)

        # Tampered: another payload under the old signature, pushed straight to the registry.
        client = RegistryClient(Reference.parse(registry.url(NAME)), username=USER, password=PASSWORD)
        old_manifest = json.loads(client.manifest("main")[1])
        old = {layer["mediaType"]: layer for layer in old_manifest["layers"]}
        artifact = client.blob(old["application/vnd.gitsync.artifact.v1+json"]["digest"],
                               old["application/vnd.gitsync.artifact.v1+json"]["size"], 1 << 20)
        signature = client.blob(old["application/vnd.gitsync.artifact.signature.v1"]["digest"],
                                old["application/vnd.gitsync.artifact.signature.v1"]["size"], 1 << 20)
        document = json.loads(artifact)
        document["payload"]["routes"][0]["uri"] = "/stolen"
        forged = json.dumps(document, sort_keys=True, separators=(",", ":")).encode()

        def repush(artifact: bytes, signature: bytes | None) -> str:
            for blob in (EMPTY_CONFIG, artifact, *([signature] if signature else [])):
                client.push_blob(blob)
            manifest = json.loads(manifest_of(artifact, signature or b"", {}))
            if signature is None:
                manifest["layers"] = manifest["layers"][:1]
            return client.put_manifest("main", json.dumps(manifest).encode())

        tampered = repush(forged, signature).removeprefix("sha256:")
        wait_for(lambda: all(tampered in a.state().get("bad", {}) for a in agents), 20, "the forgery refused")
        assert all("bad signature" in a.state()["bad"][tampered] for a in agents)
        assert all(uri(d) == "/v2" for d in doubles)
        assert all(a.state().get("last_good") == v2 for a in agents)

        # Unsigned: the artifact alone, no signature layer.
        unsigned = repush(forged, None).removeprefix("sha256:")
        wait_for(lambda: all(unsigned in a.state().get("bad", {}) for a in agents), 20,
                 "the unsigned one refused")
        assert all("not signed" in a.state()["bad"][unsigned] for a in agents)
        assert all(uri(d) == "/v2" for d in doubles)

        # The registry killed: the last good stays live; back on its port, the next artifact goes live.
        assert registry.proc is not None
        registry.proc.send_signal(signal.SIGKILL)
        registry.proc.wait()
        syncs = [a.syncs() for a in agents]
        wait_for(lambda: all(a.syncs() > s + 1 for a, s in zip(agents, syncs, strict=True)), 20,
                 "polls while the registry is down")
        assert all(f"127.0.0.1:{registry.port}" in a.log() and "retrying" in a.log() for a in agents)
        assert all(uri(d) == "/v2" for d in doubles)
        registry.stop()
        registry.start()
        v3 = remote_repo.commit(routes(uri="/v3"), "v3")
        publish(tmp_path, registry, url, publisher)
        wait_for(lambda: all(uri(d) == "/v3" for d in doubles), 40, "v3 everywhere once the registry is back")
        wait_for(lambda: all(a.state().get("last_good") == v3 for a in agents), 10, "v3 the last good")

        every_byte = b"".join(p.read_bytes() for p in registry.storage.rglob("*") if p.is_file())
        assert HOST_SECRET.encode() not in every_byte
        assert all(HOST_SECRET not in a.log() for a in agents)
