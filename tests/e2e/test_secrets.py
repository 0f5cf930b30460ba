"""Secrets end to end: a repo declares `vault/main` with its token in a SOPS file; `gitsync sync
--once --repo` (a real process) pushes it to the Admin API double; the reference resolves against a
real OpenBao server (KV version 1) as APISIX's vault manager would resolve it.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from gitsync.testing.apisix import ApisixDouble
from testkit import vaultrefs
from testkit.gitservers import BareRepo, GitDaemon, git
from testkit.leaks import Canary, git_objects
from testkit.processes import run_gitsync
from testkit.sopsfiles import AgeKey, encrypt
from testkit.vaultserver import VaultServer

READ_POLICY = 'path "kv/apisix/*" { capabilities = ["read"] }'
REFERENCE = "$secret://vault/main/jack/auth-key"

UPSTREAM = "    upstream: {type: roundrobin, nodes: {'127.0.0.1:1980': 1}}\n"


def route(rid: str, uri: str, reference: str = REFERENCE) -> str:
    """A route whose proxy-rewrite sends a header taken from a secret manager (APISIX 3.17+)."""
    return (f"  - id: {rid}\n    uri: {uri}\n"
            f"    plugins:\n      proxy-rewrite:\n        headers:\n          set:\n"
            f"            X-Api-Key: \"{reference}\"\n" + UPSTREAM)


@dataclass
class Setup:
    """The repo on git daemon, the gateway double, and the flags of every `gitsync sync --once`."""

    repo: BareRepo
    double: ApisixDouble
    token: str  # the decrypted vault token: only ever inside a PUT body
    value: str  # what the reference resolves to in the real server
    state: Path
    args: tuple[str, ...]  # the flags of every sync: repo, gateway, key files, state dir

    def sync(self, *extra: str) -> Any:
        result = run_gitsync("sync", "--once", *self.args, *extra)
        Canary(self.token).assert_absent("gitsync sync --once", [result.stdout + result.stderr])
        return result


@pytest.fixture
def setup(tmp_path: Path, vault_server: VaultServer, apisix: ApisixDouble, remote_repo: BareRepo,
          git_daemon: GitDaemon) -> Setup:
    value = "jack-key-" + secrets.token_hex(8)
    vault_server.put_kv("apisix/jack", **{"auth-key": value})
    token = vault_server.create_token("apisix-read", READ_POLICY)  # read-only, as a gateway gets

    key = AgeKey.generate()
    work = tmp_path / "work"
    sealed = encrypt(work, "vault.sops.yaml",
                     f"secrets:\n  - id: vault/main\n    uri: {vault_server.address}\n    prefix: kv/apisix\n"
                     f"    token: {token}\n", "--encrypted-regex", "^token$", recipients=key.recipient)
    assert token not in sealed
    remote_repo.commit({"secrets/vault.sops.yaml": sealed,
                        "routes.yaml": "routes:\n" + route("r1", "/jack")}, "vault/main and a route")

    admin_key = tmp_path / "admin.key"
    admin_key.write_text(apisix.admin_key + "\n")
    args = ("--repo", git_daemon.url(remote_repo.path.name), "--gateway", apisix.url,
            "--admin-key-file", str(admin_key), "--age-key-file", str(key.write(tmp_path / "age.key")),
            "--state-dir", str(tmp_path / "state"), "--writeback", "on", "--status")
    return Setup(remote_repo, apisix, token, value, tmp_path / "state", args)


def last_put(double: ApisixDouble) -> dict[str, Any]:
    assert double.put_bodies, "the double received no PUT"
    return json.loads(double.put_bodies[-1])


def legacy_manager() -> dict[str, Any]:
    return {"id": "vault/legacy", "uri": "http://127.0.0.1:9", "prefix": "kv/old", "token": "legacy-t0ken"}


@pytest.mark.slow
def test_vault_token_from_sops_resolves_against_the_real_server(setup: Setup, vault_server: VaultServer):
    double = setup.double
    double.out_of_band("secrets", [legacy_manager()])  # a manager added by hand on the gateway

    applied = setup.sync()
    assert applied.returncode == 0, applied.stderr
    assert "pruned 1 out-of-band secrets: vault/legacy" in applied.stdout
    body = last_put(double)
    assert [s["id"] for s in body["secrets"]] == ["vault/main"]
    assert body["secrets"][0]["token"] == setup.token  # decrypted in memory, sent only here
    assert body["routes"][0]["plugins"]["proxy-rewrite"]["headers"]["set"]["X-Api-Key"] == REFERENCE
    assert set(double.running("secrets")) == {"vault/main"}

    # The gateway's vault manager: the secrets items it was sent, the real server, KV v1.
    assert vaultrefs.resolve(REFERENCE, body["secrets"]) == setup.value
    assert vaultrefs.resolve_all(body) == {REFERENCE: setup.value}

    # Nothing that gitsync wrote to the remote (status branch) holds the token.
    assert "refs/heads/gitsync/status" in git("for-each-ref", "--format=%(refname)", cwd=setup.repo.path)
    assert Canary(setup.token).found_in(git_objects(setup.repo.path)) == []

    # Another manager written by hand, and `unmanaged = ["secrets"]`: kept as it is.
    live = list(double.config()["secrets"])
    double.out_of_band("secrets", [*live, legacy_manager()])
    setup.repo.commit({"routes.yaml": "routes:\n" + route("r1", "/jack") + route("r2", "/jill")}, "r2")
    puts = len(double.put_bodies)
    kept = setup.sync("--unmanaged", "secrets")
    assert kept.returncode == 0, kept.stderr
    assert "pruned" not in kept.stdout
    assert len(double.put_bodies) == puts + 1
    body = last_put(double)
    assert "secrets" not in body and body["secrets_conf_version"] == double.config()["secrets_conf_version"]
    assert set(double.running("secrets")) == {"vault/main", "vault/legacy"}
    assert set(double.running("routes")) == {"r1", "r2"}
    assert Canary(setup.token).leaks_in_tree(setup.state) == {}  # mirror, state file, write-back clone


@pytest.mark.slow
def test_an_undeclared_manager_is_an_error_at_its_line(setup: Setup):
    assert setup.sync().returncode == 0
    puts = len(setup.double.put_bodies)
    bad = setup.repo.commit({"routes.yaml": "routes:\n" + route("r1", "/jack")
                             + route("r2", "/nope", "$secret://vault/nope/jack/auth-key")}, "a typo")
    refused = setup.sync()
    assert refused.returncode == 1
    where = ("routes.yaml:16:13: routes[r2].plugins.proxy-rewrite.headers.set.X-Api-Key: "
             "'$secret://vault/nope/jack/auth-key' names no item of secrets (declare one with id vault/nope)")
    assert where in refused.stderr, refused.stderr
    assert len(setup.double.put_bodies) == puts  # nothing pushed: the gateway keeps the last good
    assert set(setup.double.running("routes")) == {"r1"}
    note = git("notes", "--ref", "refs/notes/gitsync", "show", bad, cwd=setup.repo.path)
    section = YAML(typ="safe").load(note.removeprefix("---\n"))
    assert (section["stage"], section["errors"]) == ("validate", [where])
