from __future__ import annotations

import hashlib
import hmac

import httpx
import pytest

from gitsync.server import Metrics, Readiness, StatusServer
from gitsync.settings import Secret

SECRET = "hook-secret-5b1d"
BODY = b'{"ref": "refs/heads/main"}'


@pytest.fixture
def server():
    triggers: list[str] = []
    state = {"ready": Readiness(False, "no sync yet")}
    srv = StatusServer("127.0.0.1:0", Metrics(), lambda: state["ready"], triggers.append, Secret(SECRET))
    srv.start()
    srv.triggers = triggers
    srv.state = state
    yield srv
    srv.stop()


def url(srv: StatusServer, path: str) -> str:
    return f"http://127.0.0.1:{srv.port}{path}"


def sig(body: bytes = BODY, secret: str = SECRET) -> str:
    return hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def test_healthz_and_readyz(server):
    assert httpx.get(url(server, "/healthz")).json() == {"status": "ok"}
    r = httpx.get(url(server, "/readyz"))
    assert r.status_code == 503 and r.json() == {"ready": False, "reason": "no sync yet"}
    server.state["ready"] = Readiness(True, "abc1234 live on 1 gateway")
    assert httpx.get(url(server, "/readyz")).status_code == 200


@pytest.mark.parametrize(("provider", "headers"), [
    ("github", {"X-Hub-Signature-256": "sha256=" + sig()}),
    ("gitea", {"X-Gitea-Signature": sig()}),
    ("gitlab", {"X-Gitlab-Token": SECRET}),
    ("generic", {"X-Gitsync-Signature-256": "sha256=" + sig()}),
    ("generic", {"Authorization": "Bearer " + SECRET}),
])
def test_valid_webhooks_trigger(server, provider, headers):
    r = httpx.post(url(server, f"/hooks/{provider}"), content=BODY, headers=headers)
    assert r.status_code == 202
    assert server.triggers == [f"webhook:{provider}"]


@pytest.mark.parametrize(("provider", "headers"), [
    ("github", {}),
    ("github", {"X-Hub-Signature-256": "sha256=" + sig(secret="wrong-secret")}),
    ("github", {"X-Hub-Signature-256": sig()}),  # missing the sha256= prefix
    ("gitea", {"X-Gitea-Signature": sig(body=b"other body")}),
    ("gitlab", {"X-Gitlab-Token": "wrong-token"}),
    ("generic", {"Authorization": "Bearer wrong"}),
])
def test_bad_webhooks_get_401_and_trigger_nothing(server, provider, headers):
    r = httpx.post(url(server, f"/hooks/{provider}"), content=BODY, headers=headers)
    assert r.status_code == 401
    assert server.triggers == []
    assert SECRET not in r.text


def test_webhook_body_limit_and_unknown_provider(server):
    big = b"x" * (1024 * 1024 + 1)
    headers = {"X-Hub-Signature-256": "sha256=" + sig(big)}
    r = httpx.post(url(server, "/hooks/github"), content=big, headers=headers)
    assert r.status_code == 413 and server.triggers == []
    assert httpx.post(url(server, "/hooks/bitbucket"), content=BODY).status_code == 404


def test_webhooks_off_without_a_secret():
    srv = StatusServer("127.0.0.1:0", Metrics(), lambda: Readiness(True, ""), lambda r: None, None).start()
    try:
        r = httpx.post(url(srv, "/hooks/github"), content=BODY, headers={"X-Hub-Signature-256": "sha256=x"})
        assert r.status_code == 403
    finally:
        srv.stop()


def test_metrics_exposition(server):
    m = server.metrics
    m.syncs.labels("applied").inc()
    m.set_applied_commit("a" * 40)
    m.gateway_version.labels("http://127.0.0.1:9180", "routes").set(7)
    httpx.post(url(server, "/hooks/github"), content=BODY)  # unauthorized, counted
    text = httpx.get(url(server, "/metrics")).text
    assert 'gitsync_syncs_total{result="applied"} 1.0' in text
    assert f'gitsync_applied_commit_info{{commit="{"a" * 40}"}} 1.0' in text
    assert 'gitsync_gateway_conf_version{gateway="http://127.0.0.1:9180",kind="routes"} 7.0' in text
    assert 'gitsync_webhook_requests_total{provider="github",result="unauthorized"} 1.0' in text
    for name in ("gitsync_sync_duration_seconds_bucket", "gitsync_last_success_timestamp_seconds",
                 "gitsync_drift_heals_total", "gitsync_writeback_failures_total"):
        assert name in text
