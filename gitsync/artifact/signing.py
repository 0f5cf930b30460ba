"""An artifact's signature: an SSHSIG (the same signatures status commits carry,
`gitsync.writeback.trust`) in the namespace ``gitsync-artifact`` over a small statement binding the
artifact's digest to the repo, branch and commit it names.

The namespace keeps the two apart: a status commit's signature (namespace ``git``) never verifies as
an artifact's, nor the other way round, even by a key allowed for both.

`artifact_signers` is an OpenSSH allowed-signers file. Its principals say what a key may publish:
``<branch>@<repo>``, the repo as the artifact names it (credentials stripped, `normal_repo`), with
OpenSSH's patterns (``*@https://git.example/org/config`` lets one key publish every branch of that
repo). An entry limited by ``namespaces=`` must include ``gitsync-artifact``.
"""

from __future__ import annotations

from pathlib import Path

from gitsync.content import canonical_json
from gitsync.source.signatures import allowed_signers
from gitsync.source.transport import SourceError
from gitsync.urls import display_url
from gitsync.writeback.trust import StatusSigner, allows, fingerprint, signing_key

NAMESPACE = "gitsync-artifact"


def normal_repo(url: str) -> str:
    """A repo URL as an artifact names it and a principal matches it: credentials stripped, no
    trailing ``/`` (otherwise as written: ``…/config`` and ``…/config.git`` are two repos here)."""
    return display_url(url).rstrip("/")


def principal(repo: str, branch: str) -> str:
    """``<branch>@<repo>``: whom a key must be allowed to speak for to publish this branch of this repo."""
    return f"{branch}@{normal_repo(repo)}"


def statement(digest: str, repo: str, branch: str, commit: str) -> bytes:
    """What is signed: the artifact's digest bound to the repo, branch and commit it names."""
    return canonical_json({"type": "gitsync-artifact-statement", "artifact": digest,
                           "repo": normal_repo(repo), "branch": branch, "commit": commit})


def sign(signer: StatusSigner, signed: bytes) -> bytes:
    """The armored signature of a statement."""
    return signer.sign(signed, NAMESPACE.encode())


class ArtifactSigners:
    """`artifact_signers`: which key may publish which branch of which repo."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._keys = allowed_signers(self.path, NAMESPACE)
        if not self._keys:
            raise SourceError("config", f"artifact_signers {self.path} names no key usable for the "
                                        f"{NAMESPACE} namespace")

    def verify(self, signed: bytes, signature: bytes, repo: str, branch: str) -> None:
        """Is `signature` a good signature of `signed` by a key allowed for this repo and branch?
        `SourceError` (stage ``verify``) saying why not."""
        if not signature.strip():
            raise SourceError("verify", "the artifact is not signed")
        key = signing_key(signed, signature, NAMESPACE)
        if key is None:
            raise SourceError("verify", "bad signature: it does not sign this artifact in the "
                                        f"{NAMESPACE} namespace")
        who = principal(repo, branch)
        if not allows(self._keys, key, who):
            raise SourceError("verify", f"signed by {fingerprint(key)}, which artifact_signers does not "
                                        f"allow to publish {who}")


__all__ = ["NAMESPACE", "ArtifactSigners", "normal_repo", "principal", "sign", "statement"]
