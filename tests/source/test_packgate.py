"""Fetches bounded before anything is inflated (gitsync.source.packgate): the gate over packs git itself
writes (whole objects, offset and ref deltas) cut at any byte, packs made to go over each limit, and
fetches from a real git daemon and from a local path."""

from __future__ import annotations

import hashlib
import itertools
import subprocess
import zlib
from pathlib import Path

import pytest
from dulwich.repo import Repo
from hypothesis import given
from hypothesis import strategies as st

from gitsync.source.packgate import LimitExceeded, ObjectLimits, PackGate, check_sizes, fetch_bounded
from gitsync.source.transport import Remote, SourceError
from testkit.gitservers import BareRepo
from testkit.profiles import examples

UNBOUNDED = ObjectLimits(1 << 40, 1 << 30, 1 << 50)


def pack_of(repo: BareRepo, revs: str = "--all", *, thin_base: str | None = None) -> bytes:
    """What git sends for `revs`: `git pack-objects --stdout` of their objects."""
    objects = repo.git("rev-list", "--objects", revs)
    args = ["git", "pack-objects", "--stdout", "-q"]
    if thin_base:
        args.append("--thin")
    return subprocess.run(args, cwd=repo.path, input=objects.encode(), capture_output=True, check=True).stdout


def gated(data: bytes, limits: ObjectLimits, cuts: list[int] | None = None) -> PackGate:
    """`data` through a gate in pieces (cut at `cuts`, else whole); the gate after `finish`."""
    sink = bytearray()
    gate = PackGate(limits, sink.extend)
    bounds = [0, *sorted(c for c in (cuts or []) if 0 < c < len(data)), len(data)]
    for start, end in itertools.pairwise(bounds):
        gate.write(data[start:end])
    gate.finish()
    assert bytes(sink) == data  # what passes is passed on unchanged
    return gate


@pytest.fixture(scope="module")
def history(tmp_path_factory) -> BareRepo:
    """A repo of 40 commits over 30 files (many objects deltas of others), a tag and a 3 MB blob."""
    repo = BareRepo.create(tmp_path_factory.mktemp("packgate") / "history.git")
    repo.fast_import(40, 30, files_per_commit=3, dirs=5)
    repo.commit({"big.bin": bytes(range(256)) * 12288}, "a 3 MB file")
    repo.tag("v1", repo.tip() or "", annotated=True)
    return repo


def test_packs_git_writes_pass_whole_and_every_object_is_counted(history):
    data = pack_of(history)
    gate = gated(data, UNBOUNDED)
    count = int.from_bytes(data[8:12], "big")
    assert gate.count == gate.seen == count > 150
    assert gate.total >= 3 * 1024 * 1024  # each object at its full size, deltas at what they make


@examples(0.5)
@given(cuts=st.lists(st.integers(0, 1 << 20), max_size=40))
def test_a_pack_cut_anywhere_reads_the_same(history, cuts):
    data = pack_of(history)
    gate = gated(data, UNBOUNDED, [c % len(data) for c in cuts] + [1, 2, 11, 12, 13])
    assert gate.seen == gate.count


def test_an_object_over_the_limit_is_refused_at_its_header_before_it_is_inflated(tmp_path):
    repo = BareRepo.create(tmp_path / "bomb.git")
    repo.commit({"conf/a.yaml": "routes: []\n"}, "config")
    blob = repo.zeros(64)
    repo.git("update-ref", "refs/heads/bomb", repo.git("commit-tree", repo.git(
        "mktree", input=f"100644 blob {blob}\tzeros.bin\n".encode()), "-m", "bomb"))
    data = pack_of(repo, "refs/heads/bomb")
    assert len(data) < 200_000  # 64 MB of zeros on the wire
    passed = bytearray()
    gate = PackGate(ObjectLimits(1 << 20, 1000, 1 << 30), passed.extend)
    with pytest.raises(LimitExceeded) as refused:
        gate.write(data)
    assert refused.value.setting == "max_object_size" and refused.value.size == 64 << 20
    assert refused.value.reason == ("object 3 of 3 in the pack (a blob) is 64.0 MiB (67,108,864 bytes), "
                                    "more than max_object_size = 1.0 MiB (1,048,576 bytes)")
    assert not refused.value.transient and not passed  # nothing reaches the pack file


def _entry(kind: int, size: int, body: bytes, base: bytes = b"") -> bytes:
    header = bytearray()
    byte = (kind << 4) | (size & 15)
    size >>= 4
    while size:
        header.append(byte | 0x80)
        byte, size = size & 0x7F, size >> 7
    header.append(byte)
    return bytes(header) + base + zlib.compress(body)


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        out.append((value & 0x7F) | (0x80 if value > 0x7F else 0))
        value >>= 7
        if not out[-1] & 0x80:
            return bytes(out)


def _pack(*entries: bytes) -> bytes:
    body = b"PACK" + (2).to_bytes(4, "big") + len(entries).to_bytes(4, "big") + b"".join(entries)
    return body + hashlib.sha1(body).digest()


def test_a_delta_is_measured_by_the_object_it_makes():
    """A small delta (a copy of its base, over and over) that makes a 2 GiB object: refused by what it
    makes, from the first bytes of its data."""
    base = b"\0" * 4096
    copies = b"".join(b"\x90\x10" for _ in range(100))  # copy 4,096 bytes of the base, a hundred times
    delta = _varint(len(base)) + _varint(2 << 30) + copies
    data = _pack(_entry(3, len(base), base), _entry(7, len(delta), delta, base=hashlib.sha1(base).digest()))
    with pytest.raises(LimitExceeded) as refused:
        gated(data, ObjectLimits(1 << 20, 100, 1 << 40))
    assert refused.value.reason.startswith("object 2 of 2 in the pack (a delta) making an object is 2.0 GiB")


def test_too_many_objects_too_many_bytes_and_a_lying_header_are_refused():
    blobs = [_entry(3, 1000, bytes([n]) * 1000) for n in range(10)]
    with pytest.raises(LimitExceeded, match=r"the pack holds 10 objects, more than max_fetch_objects = 9$"):
        gated(_pack(*blobs), ObjectLimits(1 << 20, 9, 1 << 30))
    with pytest.raises(LimitExceeded, match=r"the pack, up to object 6 of 10 in the pack \(a blob\), is "
                                            r"5\.9 KiB \(6,000 bytes\), more than max_fetch_size = 5\.4 KiB"):
        gated(_pack(*blobs), ObjectLimits(1 << 20, 100, 5500))
    liar = _entry(3, 10, b"x" * 100_000)  # says 10 bytes, inflates to 100,000
    with pytest.raises(LimitExceeded, match=r"which says it is 10 bytes, is .* more than its own header"):
        gated(_pack(liar), UNBOUNDED)
    with pytest.raises(SourceError, match="damaged at object 1 of 1"):
        gated(_pack(_entry(3, 4, b"abcd")[:-6] + b"garbage!"), UNBOUNDED)
    with pytest.raises(SourceError, match="ended after 1 of 2 objects"):
        gated(_pack(*blobs[:2])[:-len(blobs[1]) - 20], UNBOUNDED)


def test_a_fetch_over_the_limits_leaves_the_store_as_it_was(tmp_path, git_daemon, remote_repo):
    remote_repo.commit({"conf/a.yaml": "routes: []\n"}, "config")
    good = remote_repo.commit({"zeros.bin": bytes(8 << 20)}, "an 8 MB file")
    target = Repo.init_bare(str(tmp_path / "target"), mkdir=True)
    for url in (git_daemon.url(remote_repo.path.name), str(remote_repo.path)):
        client, path = Remote.of(url).client()
        before = sorted(p.name for p in (tmp_path / "target" / "objects").rglob("*") if p.is_file())
        with pytest.raises(LimitExceeded, match=r"is 8\.0 MiB .*more than max_object_size = 1\.0 MiB"):
            fetch_bounded(client, path, target, lambda refs, depth=None: [refs[b"refs/heads/main"]],
                          ObjectLimits(1 << 20, 1000, 1 << 30))
        assert sorted(p.name for p in (tmp_path / "target" / "objects").rglob("*") if p.is_file()) == before
        fetch_bounded(client, path, target, lambda refs, depth=None: [refs[b"refs/heads/main"]],
                      ObjectLimits(16 << 20, 1000, 1 << 30))
        assert good.encode() in target.object_store
        client.close()
        target = Repo.init_bare(str(tmp_path / f"target-{len(url)}"), mkdir=True)


def test_a_local_store_is_measured_from_its_headers(remote_repo):
    blob = remote_repo.zeros(5)
    with Repo(str(remote_repo.path)) as repo:
        with pytest.raises(LimitExceeded, match=rf"object {blob} \(1 of 1\) is 5\.0 MiB"):
            check_sizes(repo.object_store, [blob.encode()], ObjectLimits(1 << 20, 10, 1 << 30))
        check_sizes(repo.object_store, [blob.encode()], ObjectLimits(5 << 20, 10, 1 << 30))


def test_object_limits_name_the_settings_by_default():
    assert ObjectLimits(1, 2, 3).settings == ("max_object_size", "max_fetch_objects", "max_fetch_size")


def test_fetch_bounded_takes_limits_that_grow_with_what_is_wanted(tmp_path, git_daemon, remote_repo):
    tips = [remote_repo.commit({f"f{n}.yaml": f"n: {n}\n"}, f"c{n}") for n in range(3)]
    asked: list[int] = []
    target = Repo.init_bare(str(tmp_path / "grow"), mkdir=True)
    client, path = Remote.of(git_daemon.url(remote_repo.path.name)).client()
    try:
        def limits(wanted: int) -> ObjectLimits:
            asked.append(wanted)
            return ObjectLimits(1 << 20, 4 * wanted, 1 << 30)

        with pytest.raises(LimitExceeded, match="more than max_fetch_objects = 4"):
            fetch_bounded(client, path, target, lambda refs, depth=None: [tips[-1].encode()], limits)
        assert asked[-1] == 1
    finally:
        client.close()
    assert Path(target.path, "objects", "pack").is_dir()
