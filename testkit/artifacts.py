"""Artifacts in tests: a publisher's key and the agents' ``artifact_signers`` for it, a config repo whose
consumer's key is a secret reference, and the settings an artifact agent or a publisher runs with."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from testkit.gitservers import ssh_keygen
from testkit.registry import PASSWORD, USER, Registry

#: The host's value of ``${{ secrets.JACK_KEY }}``: it must reach the gateway, never the artifact.
HOST_SECRET = "jack-host-secret-value-4711"


def routes(node: str = "127.0.0.1:1980", uri: str = "/orders") -> dict[str, str]:
    """One upstream, one route behind key-auth, one consumer whose key is a secret reference."""
    return {"conf/routes.yaml": (
        "upstreams:\n  - id: orders\n    type: roundrobin\n    nodes:\n"
        f"      \"{node}\": 1\n"
        f"routes:\n  - id: orders\n    uri: {uri}\n    upstream_id: orders\n"
        "    plugins:\n      key-auth: {}\n"
        "consumers:\n  - username: jack\n    plugins:\n      key-auth:\n"
        "        key: ${{ secrets.JACK_KEY }}\n")}


@dataclass(frozen=True)
class Publisher:
    """A publisher's key and an allowed-signers file that lets it publish `principals`."""

    key: Path
    signers: Path

    @classmethod
    def make(cls, directory: Path, principals: str, name: str = "publisher") -> Publisher:
        directory.mkdir(parents=True, exist_ok=True)
        key = ssh_keygen(directory / name, name)
        key.chmod(0o600)
        kind, public = (directory / f"{name}.pub").read_text().split()[:2]
        signers = directory / f"{name}.signers"
        signers.write_text(f'{principals} namespaces="gitsync-artifact" {kind} {public}\n')
        return cls(key, signers)


def registry_env(directory: Path) -> dict[str, str]:
    """The registry's credentials as an agent or a publisher reads them (the password from a file)."""
    password = directory / "registry-password"
    password.write_text(PASSWORD)
    return {"GITSYNC_REGISTRY_USERNAME": USER, "GITSYNC_REGISTRY_PASSWORD_FILE": str(password)}


def agent_flags(registry: Registry, name: str, publisher: Publisher, repo_url: str,
                secrets: Path) -> list[str]:
    """The flags of an agent pulling `name`'s ``main`` tag, trusting `publisher` for `repo_url`."""
    return ["--repo", registry.url(name), "--artifact-signers", str(publisher.signers),
            "--artifact-repo", repo_url, "--secrets-dir", str(secrets)]


def host_secrets(directory: Path) -> Path:
    """A secrets directory holding ``JACK_KEY`` = `HOST_SECRET`."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "JACK_KEY").write_text(HOST_SECRET)
    return directory


__all__ = ["HOST_SECRET", "Publisher", "agent_flags", "host_secrets", "registry_env", "routes"]
