"""An artifact source: ``repo = "oci://host[:port]/name:tag"``. The tag is polled with one manifest
HEAD (its digest compared with the last one seen: nothing else is asked while it has not moved); a
new digest is pulled by digest, and its manifest, both blobs, their sizes and digests, the signature
(`gitsync.artifact.signing`) and the repo and branch it names are checked before anything of it is
used. A verified artifact is kept under ``<state_dir>/artifacts/`` (as the git path keeps its mirror),
so a restart with the registry down still has the last good one.

No replay: an artifact published before the newest one this agent has verified is refused (its
signature is good, but an older artifact tagged again, by whoever can write the tag, would roll the
gateways back). The newest's time of publication is kept beside the artifacts (``newest.json``), so a
restart keeps it. A deliberate rollback is a publication: revert in git, or publish the older commit
again (a new publication time). Publishers' clocks must agree (NTP) to within the time between two
publications of one tag.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from gitsync.artifact.document import Artifact, ArtifactError, parse
from gitsync.artifact.registry import Reference, RegistryClient, layers_of
from gitsync.artifact.signing import ArtifactSigners, normal_repo, statement
from gitsync.files import atomic_write
from gitsync.settings import Settings
from gitsync.source.transport import SourceError

#: Artifacts kept on disk (each a verified one): the last few, for the last good and the ones around it.
KEPT = 8
#: The newest verified artifact's time of publication and commit, beside the kept artifacts.
NEWEST = "newest.json"


class ArtifactSource:
    """The registry side of an artifact source (see the module)."""

    def __init__(self, settings: Settings) -> None:
        assert settings.repo is not None and settings.artifact_signers is not None
        try:
            self.reference = Reference.parse(settings.repo)
        except ValueError as exc:
            raise SourceError("config", str(exc)) from None
        self.tag = self.reference.tag or "latest"
        password = settings.registry_password.reveal() if settings.registry_password is not None else None
        self.client = RegistryClient(self.reference, username=settings.registry_username, password=password,
                                     timeout=settings.git_timeout)
        self.signers = ArtifactSigners(settings.artifact_signers)
        self.repo = normal_repo(settings.artifact_repo or "")
        self.branch = settings.ref
        self.limit = settings.max_artifact_size
        self.store = Path(settings.state_dir) / "artifacts"
        self._by_digest: dict[str, str] = {}  # manifest digest → the commit its artifact names
        self._by_commit: dict[str, Artifact] = {}
        self.refused: dict[str, SourceError] = {}  # manifest digest → why it cannot go live
        self.newest = _newest(self.store / NEWEST)  # (published, commit) of the newest verified

    @property
    def url(self) -> str:
        return str(self.reference)

    def check(self) -> str:
        """The digest the tag names now (one HEAD)."""
        digest = self.client.head_manifest(self.tag)
        if digest is None:
            raise SourceError("check", f"{self.url}: no such tag (nothing published for it yet)")
        return digest

    def known(self, digest: str) -> str | None:
        """The commit of an artifact pulled and verified before, by its manifest's digest."""
        return self._by_digest.get(digest)

    def pull(self, digest: str) -> Artifact:
        """Manifest `digest`'s artifact, verified (see the module); `SourceError` (stage ``verify`` for
        an artifact that cannot go live, ``fetch`` for a registry that did not answer)."""
        try:
            _, manifest = self.client.manifest(digest)
            layers = layers_of(manifest)
            signature = self.client.blob(layers.signature, layers.signature_size, min(self.limit, 64 * 1024))
            data = self.client.blob(layers.artifact, layers.artifact_size, self.limit)
            artifact = self._verified(data, signature)
            self._not_a_replay(artifact)
        except SourceError as exc:
            if exc.stage == "verify":
                self.refused[digest] = exc
            raise
        self._keep(digest, artifact, data, signature)
        return artifact

    def _verified(self, data: bytes, signature: bytes) -> Artifact:
        try:
            artifact = parse(data)
        except ArtifactError as exc:
            raise SourceError("verify", f"not a gitsync artifact: {exc}") from None
        self.signers.verify(statement(artifact.digest, artifact.repo, artifact.branch, artifact.commit),
                            signature, artifact.repo, artifact.branch)
        if normal_repo(artifact.repo) != self.repo:
            raise SourceError("verify", f"the artifact is of {artifact.repo}, not of artifact_repo "
                                        f"{self.repo}")
        if artifact.branch != self.branch:
            raise SourceError("verify", f"the artifact is of branch {artifact.branch}, not of {self.branch} "
                                        "(ref)")
        return artifact

    def _not_a_replay(self, artifact: Artifact) -> None:
        if self.newest is not None and artifact.published < self.newest[0]:
            published, commit = self.newest
            raise SourceError("verify", f"the artifact of commit {artifact.commit} was published at "
                                        f"{artifact.published.isoformat()}, before the one of commit "
                                        f"{commit} this agent has ({published.isoformat()}): an older "
                                        "artifact tagged again is refused (to roll back, revert in git or "
                                        "publish that commit again)")

    def _keep(self, digest: str, artifact: Artifact, data: bytes, signature: bytes) -> None:
        self._by_digest[digest] = artifact.commit
        self._by_commit[artifact.commit] = artifact
        if self.newest is None or artifact.published >= self.newest[0]:
            self.newest = artifact.published, artifact.commit
            atomic_write(self.store / NEWEST, json.dumps({"published": artifact.published.isoformat(),
                                                    "commit": artifact.commit}).encode())
        for suffix, content in ((".json", data), (".sig", signature)):
            atomic_write(self.store / (artifact.commit + suffix), content)
        kept = sorted((path for path in self.store.glob("*.json") if path.name != NEWEST),
                      key=lambda p: p.stat().st_mtime)
        for old in kept[:-KEPT]:  # the oldest written: the last good is among the newest unless 8 came after
            old.unlink(missing_ok=True)
            old.with_suffix(".sig").unlink(missing_ok=True)

    def artifact(self, commit: str) -> Artifact:
        """The verified artifact of `commit`: pulled this run, or kept on disk (verified again)."""
        known = self._by_commit.get(commit)
        if known is not None:
            return known
        path = self.store / (commit + ".json")
        try:
            data, signature = path.read_bytes(), path.with_suffix(".sig").read_bytes()
        except OSError:
            raise SourceError("read", f"no artifact of commit {commit} here: it was never pulled, or "
                                      "dropped") from None
        artifact = self._verified(data, signature)
        self._by_commit[commit] = artifact
        return artifact

    def subject(self, commit: str) -> str:
        known = self._by_commit.get(commit)
        return known.subject if known is not None else ""

    def commit_time(self, commit: str) -> datetime:
        try:
            return datetime.fromisoformat(self.artifact(commit).committed).astimezone(UTC)
        except ValueError:
            raise SourceError("read", f"the artifact of {commit} has no commit time") from None

    def close(self) -> None:
        self.client.close()


def _newest(path: Path) -> tuple[datetime, str] | None:
    """The newest verified artifact's (published, commit), as kept; None when none was kept. A file
    that cannot be read stops the agent (forgetting it would let an older artifact back in)."""
    try:
        kept = json.loads(path.read_bytes())
        published = datetime.fromisoformat(kept["published"])
        if published.tzinfo is None or not isinstance(kept["commit"], str):
            raise ValueError("no time zone, or no commit")
        return published, kept["commit"]
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError, KeyError) as exc:
        raise SourceError("config", f"{path}: cannot read the newest artifact's time ({exc}); it keeps "
                                    "older artifacts out: restore it, or remove it to accept any") from None


__all__ = ["ArtifactSource"]
