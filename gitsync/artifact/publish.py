"""``gitsync publish``: render and validate one commit of the config repo once, as ``validate`` does, build
its artifact (`gitsync.artifact.document`), sign it (`gitsync.artifact.signing`) and push it:

* ``--to oci://host[:port]/name[:tag]``: to an OCI registry, the tag the branch's (``/`` → ``-``) unless
  given; the manifest's digest is printed, for pinning;
* ``--to git``: to the config repo itself, as the ref ``refs/gitsync/artifacts/<branch>``: a commit whose
  tree holds ``artifact.json`` and ``artifact.sig`` (for a site with no registry; agents do not pull it
  yet, see docs/fleet.md).

Exit status: 0 published, 1 the commit has problems (each at its file:line, as ``validate`` prints
them: nothing is published), 2 a usage, settings, source, key or registry error.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

from gitsync import __version__
from gitsync.artifact.document import ArtifactError, Provenance, ReferenceMarkers, build, digest_of
from gitsync.artifact.registry import EMPTY_CONFIG, Reference, RegistryClient, manifest_of, tag_of
from gitsync.artifact.signing import normal_repo, sign, statement
from gitsync.log import logger, redact
from gitsync.problems import ProblemsError
from gitsync.render import options_from_settings, render
from gitsync.settings import Settings, SettingsError, repos_of
from gitsync.source.inputs import writable_dir
from gitsync.source.mirror import Source
from gitsync.source.transport import SourceError
from gitsync.writeback.trust import SigningError, StatusSigner

GIT_TARGET = "git"
ARTIFACT_REFS = "refs/gitsync/artifacts/"


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--to", required=True, metavar="TARGET",
                        help="oci://host[:port]/name[:tag] (a registry; the tag defaults to the branch's) or "
                             "'git' (the ref refs/gitsync/artifacts/<branch> of the config repo)")
    parser.add_argument("--key", required=True, type=Path, metavar="PATH",
                        help="the publisher's SSH private key (OpenSSH, ed25519 or RSA, unencrypted); agents "
                             "allow its public key in artifact_signers")
    parser.add_argument("--repo-url", metavar="URL",
                        help="the repo URL the artifact names (default: repo); agents compare it with their "
                             "artifact_repo")


@dataclass(frozen=True)
class Built:
    """A commit's artifact and signature, ready to push."""

    artifact: bytes
    signature: bytes
    provenance: Provenance

    @property
    def digest(self) -> str:
        return digest_of(self.artifact)


def built_artifact(settings: Settings, key: Path, repo_url: str | None = None) -> Built:
    """The commit of `settings` (its repo and ref) rendered, validated, built and signed.
    `ProblemsError` with its problems; `SourceError`, `ArtifactError`, `SigningError`, `SettingsError`."""
    signer = StatusSigner(key)  # before any fetch: a bad key costs nothing
    if settings.dir is not None or not settings.repo:
        raise SettingsError("publish takes a git repo (--repo URL): an artifact names the commit it holds")
    with tempfile.TemporaryDirectory(prefix="gitsync-publish-") as tmp:
        state = settings.state_dir if writable_dir(settings.state_dir) else Path(tmp)
        source = Source.from_settings(replace(settings, state_dir=state))
        if source.mirror_url() not in (None, source.url):
            source = Source.from_settings(replace(settings, state_dir=Path(tmp)))
        sha = source.fetch()
        source.verify(sha)
        files = source.read(sha)
        committed = source.commit_time(sha)
    markers = ReferenceMarkers()
    options = replace(options_from_settings(settings, os.environ), secret_lookup=markers, partial=False)
    rendered = render(files.files, options)
    provenance = Provenance(repo=normal_repo(repo_url or settings.repo), branch=settings.ref, commit=sha,
                            subject=files.subject, message=files.message, committed=committed.isoformat(),
                            version=__version__)
    artifact = build(rendered, markers, provenance)
    signed = statement(digest_of(artifact), provenance.repo, provenance.branch, provenance.commit)
    return Built(artifact, sign(signer, signed), provenance)


def push_oci(built: Built, target: str, settings: Settings) -> tuple[str, str]:
    """Push to the registry: both blobs, the empty config, then the manifest under its tag. The tag and
    the manifest's digest."""
    reference = Reference.parse(target)
    tag = reference.tag or tag_of(built.provenance.branch)
    password = settings.registry_password.reveal() if settings.registry_password is not None else None
    client = RegistryClient(reference, username=settings.registry_username, password=password,
                            timeout=settings.git_timeout)
    try:
        for blob in (EMPTY_CONFIG, built.artifact, built.signature):
            client.push_blob(blob)
        manifest = manifest_of(built.artifact, built.signature, {
            "org.opencontainers.image.revision": built.provenance.commit,
            "org.opencontainers.image.source": built.provenance.repo,
            "dev.gitsync.branch": built.provenance.branch})
        return tag, client.put_manifest(tag, manifest)
    finally:
        client.close()


def push_git(built: Built, settings: Settings) -> str:
    """Push to the config repo as ``refs/gitsync/artifacts/<branch>`` (compare-and-swap); the ref."""
    from dulwich.objects import Blob, Tree

    from gitsync.source.transport import Remote
    from gitsync.writeback.remote import RefMoved, RefWire, add_commit, open_work_repo

    ref = (ARTIFACT_REFS + built.provenance.branch).encode()
    with tempfile.TemporaryDirectory(prefix="gitsync-publish-") as tmp:
        repo = open_work_repo(Path(tmp) / "work")
        wire = RefWire(Remote.from_settings(settings), repo)
        try:
            for _attempt in range(3):
                base = wire.fetch([ref]).get(ref)
                tree = Tree()
                for name, data in (("artifact.json", built.artifact), ("artifact.sig", built.signature)):
                    blob = Blob.from_string(data)
                    repo.object_store.add_object(blob)
                    tree.add(name.encode(), 0o100644, blob.id)
                repo.object_store.add_object(tree)
                commit = add_commit(repo, tree, [base] if base else [],
                                    f"artifact {built.digest} of {built.provenance.commit}\n",
                                    author=settings.author, when=int(time.time()))
                try:
                    wire.push(ref, base, commit)
                    return ref.decode()
                except RefMoved:
                    continue
            raise SourceError("push", f"{ref.decode()} kept moving: another publisher is writing it")
        finally:
            wire.close()
            repo.close()


def publish_command(settings: Settings, args: argparse.Namespace) -> int:
    """``gitsync publish`` (see the module)."""
    if len(repos_of(settings)) != 1:
        print("gitsync publish: error: an artifact is one repo's commit: with [[sources]], publish each "
              "with --source NAME", file=sys.stderr)
        return 2
    settings = repos_of(settings)[0].settings
    target: str = args.to
    if target != GIT_TARGET:
        try:
            Reference.parse(target)
        except ValueError as exc:
            print(f"gitsync publish: error: --to {exc}", file=sys.stderr)
            return 2
    try:
        built = built_artifact(settings, args.key, args.repo_url)
    except ProblemsError as exc:
        for problem in exc.problems:
            print(redact(str(problem)), file=sys.stderr)
        print(f"gitsync publish: {len(exc.problems)} problem(s): nothing published", file=sys.stderr)
        return 1
    except (SourceError, ArtifactError, SigningError, SettingsError) as exc:
        print(redact(f"gitsync publish: error: {exc}"), file=sys.stderr)
        return 2
    try:
        if target == GIT_TARGET:
            where = push_git(built, settings)
            print(f"published {built.digest} ({built.provenance.commit[:12]}) to {where}")
            return 0
        tag, manifest = push_oci(built, target, settings)
    except SourceError as exc:
        print(redact(f"gitsync publish: error: {exc}"), file=sys.stderr)
        return 2
    reference = Reference.parse(target)
    logger.info("published artifact {} of {} as {}", built.digest, built.provenance.commit, manifest)
    print(f"published {reference.with_tag(tag)} {manifest} (artifact {built.digest}, commit "
          f"{built.provenance.commit})")
    return 0


__all__ = ["Built", "built_artifact", "publish_command", "push_git", "push_oci"]
