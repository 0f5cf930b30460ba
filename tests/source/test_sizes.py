"""Object sizes from their headers (gitsync.source.sizes), packed (whole and as deltas) and loose, in a
repo git wrote."""

from __future__ import annotations

from pathlib import Path

from dulwich.objects import Blob
from dulwich.repo import Repo

from gitsync.source.sizes import ObjectSizes, object_size
from testkit.git import git


def test_object_sizes_reads_packed_and_loose_sizes_as_object_size_does(tmp_path: Path):
    repo_path = tmp_path / "repo.git"
    git("init", "-q", "--bare", str(repo_path))
    common = b"".join(b"line %d\n" % i for i in range(400))
    bodies = [common + b"and %d more\n" % n * n for n in range(1, 6)]  # deltas of one another
    shas = [git("hash-object", "-w", "--stdin", cwd=repo_path, input=body).encode() for body in bodies]
    git("pack-objects", "-q", "objects/pack/pack", cwd=repo_path, input=b"\n".join(shas) + b"\n")
    git("prune-packed", cwd=repo_path)
    index = next((repo_path / "objects" / "pack").glob("*.idx"))
    assert any(len(line.split()) == 7 for line in git("verify-pack", "-v", str(index)).splitlines())  # deltas
    loose = Blob.from_string(b"a loose one\n")
    with Repo(str(repo_path)) as repo:
        repo.object_store.add_object(loose)
        with ObjectSizes(repo.object_store) as sizes:
            assert [sizes.size(sha) for sha in shas] == [len(body) for body in bodies]
            assert [sizes.size(sha) for sha in shas] == [object_size(repo.object_store, sha) for sha in shas]
            assert all(sizes.find(sha) is not None for sha in shas)
            assert sizes.find(loose.id) is None and sizes.size(loose.id) == len(b"a loose one\n")
        assert not sizes._files  # the pack files it opened are closed
