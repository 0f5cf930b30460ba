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
from dulwich.objects import Blob
from dulwich.repo import Repo
from hypothesis import given
from hypothesis import strategies as st

from gitsync.source.packgate import (
    LimitExceeded,
    ObjectLimits,
    PackGate,
    check_sizes,
    fetch_bounded,
    size_text,
)
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


# ---------------------------------------------------------------------------------------------------------
# Each limit alone, exactly at it and one past (packs made by hand)

def refused_as(refused: pytest.ExceptionInfo[LimitExceeded]) -> tuple[str, int, int]:
    return refused.value.setting, refused.value.size, refused.value.limit


BLOBS = [_entry(3, 1000, bytes([n]) * 1000) for n in range(10)]  # ten blobs of 1,000 bytes


@pytest.mark.parametrize(("limit", "fits"), [(10, True), (9, False)])
def test_a_pack_holds_max_fetch_objects_at_most(limit, fits):
    data = _pack(*BLOBS)
    if fits:
        assert gated(data, ObjectLimits(1 << 40, limit, 1 << 50)).seen == 10
    else:
        with pytest.raises(LimitExceeded) as refused:
            gated(data, ObjectLimits(1 << 40, limit, 1 << 50))
        assert refused_as(refused) == ("max_fetch_objects", 10, 9)


@pytest.mark.parametrize(("limit", "fits"), [(1000, True), (999, False)])
def test_an_object_is_max_object_size_at_most(limit, fits):
    data = _pack(*BLOBS)
    if fits:
        assert gated(data, ObjectLimits(limit, 1 << 30, 1 << 50)).total == 10_000
    else:
        with pytest.raises(LimitExceeded) as refused:
            gated(data, ObjectLimits(limit, 1 << 30, 1 << 50))
        assert refused_as(refused) == ("max_object_size", 1000, 999)
        assert refused.value.reason == ("object 1 of 10 in the pack (a blob) is 1,000 bytes, more than "
                                        "max_object_size = 999 bytes")


@pytest.mark.parametrize(("limit", "fits"), [(10_000, True), (9_999, False)])
def test_a_fetch_is_max_fetch_size_at_most(limit, fits):
    data = _pack(*BLOBS)
    if fits:
        assert gated(data, ObjectLimits(1 << 40, 1 << 30, limit)).total == 10_000
    else:
        with pytest.raises(LimitExceeded) as refused:
            gated(data, ObjectLimits(1 << 40, 1 << 30, limit))
        assert refused_as(refused) == ("max_fetch_size", 10_000,
                                                                                     9_999)
        assert refused.value.reason.startswith("the pack, up to object 10 of 10 in the pack (a blob), is")


def _ref_delta(base: bytes, makes: int, hash_size: int = 20) -> bytes:
    """A delta of `base` (by its id) that makes an object of `makes` bytes: copies of the base."""
    copies, left = b"", makes
    while left:
        step = min(left, len(base))
        copies += b"\x90" + bytes([step]) if step < 256 else b"\xb0" + step.to_bytes(2, "little")
        left -= step
    delta = _varint(len(base)) + _varint(makes) + copies
    return _entry(7, len(delta), delta, base=hashlib.sha1(base).digest()[:hash_size].ljust(hash_size, b"\0"))


@pytest.mark.parametrize(("makes", "fits"), [(2000, True), (2001, False)])
def test_a_delta_makes_max_object_size_at_most(makes, fits):
    base = b"b" * 100
    data = _pack(_entry(3, len(base), base), _ref_delta(base, makes))
    limits = ObjectLimits(2000, 1 << 30, 1 << 50)
    if fits:
        assert gated(data, limits).total == 100 + 2000  # a delta counts as what it makes
    else:
        with pytest.raises(LimitExceeded) as refused:
            gated(data, limits)
        assert (refused.value.setting, refused.value.size) == ("max_object_size", 2001)
        assert refused.value.reason == ("object 2 of 2 in the pack (a delta) making an object is 2.0 KiB "
                                        "(2,001 bytes), more than max_object_size = 2.0 KiB (2,000 bytes)")


@pytest.mark.parametrize(("total", "fits"), [(2100, True), (2099, False)])
def test_what_a_delta_makes_counts_towards_max_fetch_size(total, fits):
    base = b"b" * 100
    data = _pack(_entry(3, len(base), base), _ref_delta(base, 2000))
    limits = ObjectLimits(1 << 40, 1 << 30, total)
    if fits:
        assert gated(data, limits).total == 2100
    else:
        with pytest.raises(LimitExceeded, match="max_fetch_size"):
            gated(data, limits)


def test_a_delta_whose_own_data_is_over_the_limit_is_refused_at_its_header():
    """A delta of 100 copies (its own data 204 bytes) making 100 bytes: refused by its own size."""
    base = b"b" * 100
    delta = _varint(len(base)) + _varint(100) + b"\x90\x01" * 100
    data = _pack(_entry(3, len(base), base), _entry(7, len(delta), delta, base=hashlib.sha1(base).digest()))
    assert gated(data, ObjectLimits(len(delta), 10, 1 << 50)).total == 200  # the delta: what it makes
    with pytest.raises(LimitExceeded) as refused:
        gated(data, ObjectLimits(len(delta) - 1, 10, 1 << 50))
    assert (refused.value.setting, refused.value.size) == ("max_object_size", len(delta))


@pytest.mark.parametrize(("says", "fits"), [(1000, True), (999, False)])
def test_an_object_inflates_to_what_its_header_says_at_most(says, fits):
    data = _pack(_entry(3, says, b"x" * 1000))
    if fits:
        assert gated(data, UNBOUNDED).seen == 1
    else:
        with pytest.raises(LimitExceeded) as refused:
            gated(data, UNBOUNDED)
        assert refused_as(refused) == ("its own header", 1000, 999)


def test_entry_headers_cut_at_every_byte_read_the_same():
    """Sizes that take several header bytes, an offset delta (its base's distance in several bytes) and a
    reference delta (its base's id), fed one byte at a time."""
    base = bytes(range(256)) * 40  # 10,240 bytes: a size in three header bytes
    offset_delta = _varint(len(base)) + _varint(300) + b"\x90\xff\x90\x2d"
    ofs = bytearray()
    ofs.append((6 << 4) | len(offset_delta))  # a small size, one byte
    ofs += b"\x81\x01"  # a distance back in two bytes (the last one odd: only its top bit ends it)
    ofs += zlib.compress(offset_delta)
    data = _pack(_entry(3, len(base), base), bytes(ofs), _ref_delta(base, 700))
    whole = gated(data, UNBOUNDED)
    assert (whole.seen, whole.total) == (3, len(base) + 300 + 700)
    bytewise = gated(data, UNBOUNDED, list(range(len(data))))
    assert (bytewise.seen, bytewise.total) == (3, len(base) + 300 + 700)


def test_a_reference_delta_takes_the_hash_size_of_its_repository():
    base = b"b" * 100
    data = _pack(_entry(3, len(base), base), _ref_delta(base, 500, hash_size=32))
    sink = bytearray()
    gate = PackGate(UNBOUNDED, sink.extend, hash_size=32)
    for at in range(len(data)):
        gate.write(data[at:at + 1])
    gate.finish()
    assert (gate.seen, gate.total) == (2, 600)
    with pytest.raises(SourceError):  # read with sha1's 20 bytes, the id's last 12 are taken for data
        gated(data, UNBOUNDED)


def test_what_is_not_a_pack_and_a_pack_cut_short_are_refused_and_no_pack_is_whole():
    with pytest.raises(SourceError, match="not a git pack"):
        gated(b"PACX" + bytes(8), UNBOUNDED)
    empty = PackGate(UNBOUNDED, lambda data: None)
    empty.finish()  # nothing came: an empty fetch
    assert not empty.done
    cut = PackGate(UNBOUNDED, lambda data: None)
    cut.write(b"PACK\0\0")  # less than a header
    with pytest.raises(SourceError, match="ended after 0 of 0 objects"):
        cut.finish()
    none = PackGate(UNBOUNDED, lambda data: None)
    none.write(_pack())  # a pack of no object is whole
    assert none.done and none.count == 0
    none.finish()


@pytest.mark.parametrize(("size", "text"), [
    (0, "0 bytes"), (1023, "1,023 bytes"), (1024, "1.0 KiB (1,024 bytes)"),
    ((1 << 20) - 1, "1024.0 KiB (1,048,575 bytes)"), (1 << 20, "1.0 MiB (1,048,576 bytes)"),
    (1 << 30, "1.0 GiB (1,073,741,824 bytes)"), (3 << 29, "1.5 GiB (1,610,612,736 bytes)"),
])
def test_sizes_are_told_in_their_largest_unit_and_exactly(size, text):
    assert size_text(size) == text


@pytest.fixture
def loose_store(tmp_path):
    """A store of three loose blobs of 100, 200 and 300 bytes: their ids."""
    repo = Repo.init_bare(str(tmp_path / "store.git"), mkdir=True)
    blobs = [Blob.from_string(bytes([n]) * (100 * n)) for n in (1, 2, 3)]
    for blob in blobs:
        repo.object_store.add_object(blob)
    yield repo.object_store, [blob.id for blob in blobs]
    repo.close()


@pytest.mark.parametrize(("limits", "setting"), [
    (ObjectLimits(300, 3, 600), None),  # each exactly at its limit
    (ObjectLimits(300, 2, 600), "max_fetch_objects"),
    (ObjectLimits(299, 3, 600), "max_object_size"),
    (ObjectLimits(300, 3, 599), "max_fetch_size"),
])
def test_a_local_fetch_is_held_to_each_limit_alone(loose_store, limits, setting):
    store, ids = loose_store
    if setting is None:
        check_sizes(store, ids, limits)
        return
    with pytest.raises(LimitExceeded) as refused:
        check_sizes(store, ids, limits)
    assert refused.value.setting == setting
    sizes = {"max_fetch_objects": 3, "max_object_size": 300, "max_fetch_size": 600}
    assert refused.value.size == sizes[setting]


def test_a_local_object_that_cannot_be_measured_is_left_to_the_copy(loose_store):
    store, ids = loose_store
    check_sizes(store, [b"0" * 40, *ids], ObjectLimits(300, 4, 600))  # not in the store (an alternate's)
    with pytest.raises(LimitExceeded, match=r"\(3 of 3\)"):
        check_sizes(store, ids, ObjectLimits(299, 4, 600))


def test_a_local_fetchs_refusals_say_what_and_each_object_after_one_not_measured_is(loose_store):
    store, ids = loose_store
    with pytest.raises(LimitExceeded) as refused:
        check_sizes(store, ids, ObjectLimits(300, 2, 600))
    assert str(refused.value) == "fetch: the fetch holds 3 objects, more than max_fetch_objects = 2"
    with pytest.raises(LimitExceeded) as refused:
        check_sizes(store, ids, ObjectLimits(300, 3, 599))
    assert str(refused.value) == (f"fetch: the fetch, up to object {ids[2].decode()} (3 of 3), is 600 bytes, "
                                  "more than max_fetch_size = 599 bytes")
    with pytest.raises(LimitExceeded, match=r"\(4 of 4\) is 300 bytes"):  # measured after the one not
        check_sizes(store, [b"0" * 40, *ids], ObjectLimits(299, 4, 600))


def test_a_pack_cut_short_is_a_fetch_failure():
    cut = PackGate(UNBOUNDED, lambda data: None)
    cut.write(_pack(*BLOBS)[:-20 - len(BLOBS[-1]) - len(BLOBS[-2])])  # its last two objects and checksum
    with pytest.raises(SourceError) as failed:
        cut.finish()
    assert str(failed.value) == "fetch: the remote's pack ended after 8 of 10 objects"
    assert not failed.value.transient


def test_an_object_is_inflated_64_kib_at_a_time_and_its_header_held_to_the_sum():
    """A 4 MiB blob of zeros: never more than 64 KiB of it at once; a header that says 100,000 bytes
    for 200,000 (no single step over it) is refused once the steps add up past it."""
    seen: list[int] = []
    gate = PackGate(UNBOUNDED, lambda data: None)
    took = gate._took
    gate._took = lambda kind, size, out: (seen.append(len(out)), took(kind, size, out))[1]
    gate.write(_pack(_entry(3, 4 << 20, bytes(4 << 20))))
    gate.finish()
    assert sum(seen) == 4 << 20 and max(seen) == 64 * 1024
    with pytest.raises(LimitExceeded) as refused:
        gated(_pack(_entry(3, 100_000, bytes(200_000))), UNBOUNDED)
    assert refused.value.reason.startswith("object 1 of 1 in the pack (a blob), which says it is 100,000 "
                                           "bytes, is ")


def test_a_damaged_pack_and_a_deltas_total_name_the_object_and_its_type():
    with pytest.raises(SourceError) as damaged:
        gated(_pack(_entry(3, 4, b"abcd")[:-6] + b"garbage!"), UNBOUNDED)
    assert str(damaged.value).startswith("fetch: the remote's pack is damaged at object 1 of 1 in the pack "
                                         "(a blob): ")
    base = b"b" * 100
    with pytest.raises(LimitExceeded) as refused:
        gated(_pack(_entry(3, len(base), base), _ref_delta(base, 2000)), ObjectLimits(1 << 40, 10, 2099))
    assert refused.value.reason.startswith("the pack, up to object 2 of 2 in the pack (a delta), is ")


def test_a_packs_count_is_its_headers_four_bytes_and_what_is_no_pack_says_so():
    with pytest.raises(LimitExceeded) as refused:
        PackGate(ObjectLimits(1 << 20, (1 << 24) - 1, 1 << 30), lambda data: None).write(
            b"PACK" + (2).to_bytes(4, "big") + (1 << 24).to_bytes(4, "big"))
    assert refused_as(refused) == ("max_fetch_objects", 1 << 24, (1 << 24) - 1)
    with pytest.raises(SourceError) as failed:
        gated(b"PACX" + bytes(8), UNBOUNDED)
    assert str(failed.value) == "fetch: the remote sent something that is not a git pack"
