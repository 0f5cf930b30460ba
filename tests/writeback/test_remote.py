"""The write-back's side of the remote (gitsync.writeback.remote): what a work repo holds."""

from __future__ import annotations

from pathlib import Path

from dulwich.objects import Blob

from gitsync.writeback.remote import holder, open_work_repo
from testkit.git import git


def test_holder_says_what_sha_in_store_says_for_packed_loose_and_missing_objects(tmp_path: Path):
    repo = open_work_repo(tmp_path / "work")
    packed = [git("hash-object", "-w", "--stdin", cwd=tmp_path / "work", input=b"packed %d\n" % n).encode()
              for n in range(3)]
    git("pack-objects", "-q", "objects/pack/pack", cwd=tmp_path / "work", input=b"\n".join(packed) + b"\n")
    git("prune-packed", cwd=tmp_path / "work")
    loose = Blob.from_string(b"loose\n")
    repo.object_store.add_object(loose)
    missing = Blob.from_string(b"never written\n").id
    held = holder(repo.object_store)
    for sha in [*packed, loose.id, missing]:
        assert held(sha) == (sha in repo.object_store)
    assert [held(sha) for sha in [*packed, loose.id, missing]] == [True, True, True, True, False]
    repo.close()
