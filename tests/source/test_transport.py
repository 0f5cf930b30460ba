"""The git transport's errors as people read them: one line, what failed and what to check."""

from __future__ import annotations

import socket
import ssl
from pathlib import Path

import pytest

from gitsync.source.transport import Remote, SourceError, _network
from testkit.processes import free_port, run_gitsync


def test_an_unreachable_http_remote_is_one_line_saying_what_to_check() -> None:
    port = free_port()
    remote = Remote.of(f"http://127.0.0.1:{port}/config.git", timeout=5)
    with pytest.raises(SourceError) as raised:
        remote.network("fetch", lambda: remote.ls_refs([b"refs/heads/"]))
    text = str(raised.value)
    assert f"connection refused by 127.0.0.1:{port}: check that the git server listens there" in text
    assert "\n" not in text and "HTTPConnectionPool" not in text and "Errno" not in text and len(text) < 200
    assert raised.value.unreachable


@pytest.mark.parametrize(("error", "says"), [
    (socket.gaierror(-2, "Name or service not known"), "cannot resolve host git.example: check the URL's"),
    (ssl.SSLCertVerificationError(1, "certificate verify failed"), "TLS with git.example:443 failed ("),
    (OSError(113, "No route to host"), "cannot reach git.example:443 (No route to host): check the URL, the"),
])
def test_each_network_error_names_the_host_and_what_to_check(error: OSError, says: str) -> None:
    assert _network(error, Remote.of("https://git.example/apisix-config.git")).startswith(says)


def test_sync_once_ends_with_the_verdict_and_its_reason(tmp_path: Path) -> None:
    key = tmp_path / "admin_key"
    key.write_text("test-admin-key-0123")
    key.chmod(0o600)
    port = free_port()
    result = run_gitsync("sync", "--once", "--repo", f"http://127.0.0.1:{port}/x.git", "--gateway",
                         f"http://127.0.0.1:{free_port()}", "--admin-key-file", str(key), "--state-dir",
                         str(tmp_path / "state"), timeout=120)
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("gitsync sync: fetch failed at fetch (no commit read): "), last
    assert f"connection refused by 127.0.0.1:{port}" in last and "HTTPConnectionPool" not in result.stderr
