"""An artifact's signature (gitsync.artifact.signing): a key allowed for ``<branch>@<repo>`` signs the
statement binding digest, repo, branch and commit; anything else is refused with the reason: another
statement, a signature in the status namespace (``git``, never replayable as an artifact's), a key not
allowed for that repo or branch, no signature at all. Keys are made in the test."""

from __future__ import annotations

import pytest

from gitsync.artifact.signing import ArtifactSigners, normal_repo, principal, sign, statement
from gitsync.source.transport import SourceError
from gitsync.writeback.trust import StatusSigner
from testkit.artifacts import Publisher

REPO = "https://git.example/org/config"
DIGEST = "sha256:" + "0" * 64
COMMIT = "c" * 40


@pytest.fixture
def publisher(tmp_path):
    return Publisher.make(tmp_path, f"main@{REPO},release-*@{REPO}")


def signed(publisher: Publisher, branch: str = "main", repo: str = REPO) -> bytes:
    return sign(StatusSigner(publisher.key), statement(DIGEST, repo, branch, COMMIT))


def test_a_signature_by_an_allowed_key_verifies(publisher):
    signers = ArtifactSigners(publisher.signers)
    signers.verify(statement(DIGEST, REPO, "main", COMMIT), signed(publisher), REPO, "main")
    signers.verify(statement(DIGEST, REPO, "release-1", COMMIT), signed(publisher, "release-1"), REPO,
                   "release-1")


@pytest.mark.parametrize("other", [
    statement("sha256:" + "1" * 64, REPO, "main", COMMIT),  # another artifact
    statement(DIGEST, REPO, "main", "d" * 40),  # another commit
    statement(DIGEST, "https://git.example/org/other", "main", COMMIT),  # another repo
])
def test_a_signature_of_another_statement_is_refused(publisher, other):
    with pytest.raises(SourceError, match="bad signature") as refused:
        ArtifactSigners(publisher.signers).verify(other, signed(publisher), REPO, "main")
    assert refused.value.stage == "verify"


def test_a_status_signature_cannot_be_replayed_as_an_artifact_one(publisher):
    payload = statement(DIGEST, REPO, "main", COMMIT)
    as_status = StatusSigner(publisher.key).sign(payload)  # namespace "git", as status commits are signed
    with pytest.raises(SourceError, match="bad signature"):
        ArtifactSigners(publisher.signers).verify(payload, as_status, REPO, "main")


@pytest.mark.parametrize(("repo", "branch"), [(REPO, "dev"), ("https://git.example/org/other", "main")])
def test_a_key_not_allowed_for_that_repo_or_branch_is_refused(publisher, repo, branch):
    with pytest.raises(SourceError, match=f"does not allow to publish {branch}@{repo}"):
        ArtifactSigners(publisher.signers).verify(statement(DIGEST, repo, branch, COMMIT),
                                                  signed(publisher, branch, repo), repo, branch)


def test_an_unsigned_artifact_is_refused(publisher):
    with pytest.raises(SourceError, match="not signed"):
        ArtifactSigners(publisher.signers).verify(statement(DIGEST, REPO, "main", COMMIT), b"", REPO, "main")


def test_a_signers_file_without_a_key_for_artifacts_is_a_settings_error(tmp_path):
    only_status = Publisher.make(tmp_path, "*")
    only_status.signers.write_text(only_status.signers.read_text().replace("gitsync-artifact", "git"))
    with pytest.raises(SourceError, match="names no key usable for the gitsync-artifact namespace"):
        ArtifactSigners(only_status.signers)


def test_the_principal_names_the_repo_without_its_credentials():
    assert normal_repo("https://ci:s3cret-token-value@git.example/org/config/") == REPO
    assert principal("https://ci:s3cret-token-value@git.example/org/config", "main") == f"main@{REPO}"
