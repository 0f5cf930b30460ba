"""The parse cache on disk (`gitsync.render.memo.store`): `gitsync sync --once` with a kept state dir
parses only what changed and, when the gateway's digest is still its own push's, reads nothing from
the gateway before its PUT. What the cache holds is plain files only; an entry that is corrupt or
not its own is ignored, never trusted.
"""

from __future__ import annotations

import hashlib
import marshal
import os
import stat

import pytest

from gitsync.configfiles import ConfigFiles
from gitsync.render import RenderOptions, render
from gitsync.render.load import blob_sha, parse
from gitsync.render.memo import ParseCache
from gitsync.render.memo.store import SUFFIX, ParseStore, decode
from testkit.agents import ADMIN_KEY, repo_url
from testkit.processes import run_gitsync
from testkit.yamlforms import assert_same_parse

CONFIGS = "/apisix/admin/configs"


def route_file(index: int, uri: str = "/r") -> str:
    """Ten routes; the file's number and `uri` make each one's content its own."""
    return "routes:\n" + "".join(f"  - id: r{index:03d}-{n}\n    uri: {uri}/{index}/{n}\n"
                                 "    upstream_id: u1\n" for n in range(10))


UPSTREAM = 'upstreams:\n  - id: u1\n    type: roundrobin\n    nodes: {"127.0.0.1:1980": 1}\n'
THOUSAND = {"upstreams.yaml": UPSTREAM} | {f"routes/r{i:03d}.yaml": route_file(i) for i in range(100)}


@pytest.mark.slow
def test_sync_once_parses_one_changed_file_and_sends_no_get_before_its_put(tmp_path, git_daemon, remote_repo,
                                                                            apisix) -> None:
    key = tmp_path / "key"
    key.write_text(ADMIN_KEY)
    state = tmp_path / "state"
    args = ["sync", "--once", "-v", "--repo", repo_url(git_daemon, remote_repo), "--gateway", apisix.url,
            "--admin-key-file", str(key), "--state-dir", str(state), "--no-writeback"]
    remote_repo.commit(THOUSAND, "1,000 routes")
    first = run_gitsync(*args)
    assert first.returncode == 0, first.stderr
    assert "101 config file(s), 101 parsed" in first.stderr
    assert len(apisix.config()["routes"]) == 1000

    changed = remote_repo.commit({"routes/r042.yaml": route_file(42, "/v2")}, "one route file")
    apisix.requests.clear()
    second = run_gitsync(*args)
    assert second.returncode == 0, second.stderr
    assert f"applied: {changed[:7]}" in second.stdout
    assert "101 config file(s), 1 parsed" in second.stderr  # the new commit: one file
    assert "0 parsed" in second.stderr  # the commit the gateway holds, rebuilt from the cache alone
    asked = [(method, status) for method, path, status in apisix.requests if path.startswith(CONFIGS)]
    put = asked.index(("PUT", 202))
    assert [method for method, _ in asked[:put]] == ["HEAD"]  # the digest was ours: no GET
    live = {r["id"]: r["uri"] for r in apisix.config()["routes"]}
    assert live["r042-3"] == "/v2/42/3" and live["r041-3"] == "/r/41/3" and len(live) == 1000

    entries = list((state / "parse-cache").rglob(f"*{SUFFIX}"))
    assert stat.S_IMODE(entries[0].parent.stat().st_mode) == 0o700
    assert {stat.S_IMODE(p.stat().st_mode) for p in entries} == {0o600}
    # The files of the two commits the last run rendered: 101, and the old version of the changed one.
    assert len(entries) == 102


def test_a_later_run_reads_back_what_was_stored_and_parses_nothing(tmp_path) -> None:
    files = {name: text.encode() for name, text in THOUSAND.items()}
    first = ParseCache(store=ParseStore(tmp_path))
    rendered = render(files, RenderOptions(), memo=first)
    assert first.parses == 101
    again = ParseCache(store=ParseStore(tmp_path))
    stored = render(files, RenderOptions(), memo=again)
    assert again.parses == 0
    assert stored.payload == rendered.payload and stored.contents == rendered.contents
    assert stored.splits == rendered.splits and stored.ids == rendered.ids
    for kind, items in rendered.payload.items():  # every item at the same file:line
        assert [stored.source_map.location(kind, i) for i in range(len(items))] == \
            [rendered.source_map.location(kind, i) for i in range(len(items))]


def test_a_later_run_reads_no_file_the_store_holds(tmp_path) -> None:
    """As a git source gives a commit to a later run: every file unread, its blob named; render asks
    for no file's bytes that the store holds (at 10,000 routes reading them all cost a second)."""
    files = {name: text.encode() for name, text in THOUSAND.items()}
    rendered = render(files, RenderOptions(), memo=ParseCache(store=ParseStore(tmp_path)))
    by_sha = {blob_sha(data): data for data in files.values()}
    asked: list[str] = []
    lazy = ConfigFiles()
    lazy.blob_ids = {name: blob_sha(data) for name, data in files.items()}
    lazy.unread = set(files)
    lazy.load = lambda sha: asked.append(sha) or by_sha[sha]
    again = render(lazy, RenderOptions(), memo=ParseCache(store=ParseStore(tmp_path)))
    assert asked == [] and lazy.unread == set(files)
    assert again.payload == rendered.payload


@pytest.mark.slow
def test_a_corrupt_or_foreign_entry_is_ignored_and_the_file_parsed_again(tmp_path) -> None:
    files = {name: text.encode() for name, text in THOUSAND.items()}
    render(files, RenderOptions(), memo=ParseCache(store=ParseStore(tmp_path)))
    store = ParseStore(tmp_path)
    one, other = blob_sha(files["routes/r001.yaml"]), blob_sha(files["routes/r002.yaml"])
    entry = store.dir / f"{one}{SUFFIX}"
    entry.write_bytes(b"\x00garbage")  # corrupt
    foreign = (store.dir / f"{other}{SUFFIX}").read_bytes()
    (store.dir / f"{blob_sha(files['routes/r003.yaml'])}{SUFFIX}").write_bytes(foreign)  # another blob's
    checksum, _, body = (store.dir / f"{other}{SUFFIX}").read_bytes().partition(b"\n")
    doctored = marshal.loads(body)
    routes = marshal.loads(doctored["documents"][0][4])
    routes["routes"][0]["uri"] = "/evil"  # content changed, checksum kept
    doctored["documents"][0][4] = marshal.dumps(routes)
    (store.dir / f"{other}{SUFFIX}").write_bytes(checksum + b"\n" + marshal.dumps(doctored))
    cut = store.dir / f"{blob_sha(files['routes/r004.yaml'])}{SUFFIX}"
    cut.write_bytes(cut.read_bytes()[:-7])  # a killed writer's torn entry
    shaped = store.dir / f"{blob_sha(files['routes/r005.yaml'])}{SUFFIX}"
    body = marshal.loads(shaped.read_bytes().partition(b"\n")[2])
    body["documents"][0][4] = "routes: []"  # a checksum of its own, but not the shape of an entry
    data = marshal.dumps(body)
    shaped.write_bytes(hashlib.sha256(data).hexdigest().encode() + b"\n" + data)
    unread = store.dir / f"{blob_sha(files['routes/r006.yaml'])}{SUFFIX}"
    body = marshal.loads(unread.read_bytes().partition(b"\n")[2])
    body["documents"][0][4] = b"\xff not marshal"  # the right shape, a document that does not read
    data = marshal.dumps(body)
    unread.write_bytes(hashlib.sha256(data).hexdigest().encode() + b"\n" + data)

    cache = ParseCache(store=ParseStore(tmp_path))
    rendered = render(files, RenderOptions(), memo=cache)
    assert cache.parses == 6
    assert "/evil" not in {r["uri"] for r in rendered.payload["routes"]}
    assert render(files, RenderOptions(), memo=ParseCache()).payload == rendered.payload


def test_files_with_expressions_or_encryption_are_never_stored(tmp_path) -> None:
    files = {"plain.yaml": UPSTREAM.encode(),
             "templated.yaml": b"routes:\n  - id: r1\n    uri: /a\n    upstream_id: u1\n"
                               b"    desc: \"${{ vars.OWNER }}\"\n",
             "sealed.yaml": b"secrets:\n  - id: vault/x\n    token: ENC[AES256_GCM,data:abc,iv:abc,tag:abc,"
                            b"type:str]\nsops:\n  version: 3.9.0\n"}
    cache = ParseCache(store=ParseStore(tmp_path))
    for data in files.values():
        cache.get(data)
    cache.end_render()
    stored = sorted(p.stem for p in tmp_path.rglob(f"*{SUFFIX}"))
    assert stored == [blob_sha(files["plain.yaml"])]


def test_another_versions_entries_are_removed(tmp_path) -> None:
    old = ParseStore(tmp_path, version="0.0.1")
    cache = ParseCache(store=old)
    cache.get(UPSTREAM.encode())
    cache.end_render()
    assert old.dir.is_dir()
    cache = ParseCache(store=ParseStore(tmp_path, version="9.9.9"))
    assert cache.cached(blob_sha(UPSTREAM.encode())) is None  # keyed by gitsync's version
    cache.get(UPSTREAM.encode())
    cache.end_render()
    assert not old.dir.exists()


def test_a_long_lived_cache_keeps_the_recent_renders_files_and_lists_the_store_once(tmp_path,
                                                                                     monkeypatch) -> None:
    """A daemon renders for months: its store holds the files of the renders its cache keeps and
    nothing else, and the store is listed once, not at every render (a render's clean-up costs what
    it removes). After parse workers wrote to it (`relist`), it is listed again, and what they left
    that no render keeps is removed."""
    listed: list[object] = []
    listdir = os.listdir
    monkeypatch.setattr(os, "listdir", lambda path: listed.append(path) or listdir(path))
    store = ParseStore(tmp_path)
    cache = ParseCache(store=store)  # keeps the files of the last two renders
    files = {name: text.encode() for name, text in THOUSAND.items()}
    renders = []
    for n in range(6):
        files = files | {f"routes/r{n:03d}.yaml": route_file(n, uri=f"/v{n}").encode()}
        render(files, RenderOptions(), memo=cache)
        renders.append(files)
    kept = {f"{blob_sha(data)}{SUFFIX}" for rendered in renders[-2:] for data in rendered.values()}
    assert set(listdir(store.dir)) == kept
    assert listed == [tmp_path]  # other versions' directories looked for once; the entries, known, never
    stray = store.dir / f"{'0' * 40}{SUFFIX}"  # as a worker killed while writing would leave it
    stray.write_bytes(b"torn")
    store.relist()
    render(files, RenderOptions(), memo=cache)
    last = {f"{blob_sha(data)}{SUFFIX}" for data in files.values()}  # the last two renders: the same files
    assert not stray.exists() and set(listdir(store.dir)) == last
    assert listed == [tmp_path, store.dir]


def _doctored(entry: bytes, change) -> bytes:  # type: ignore[no-untyped-def]
    """`entry` with its body changed by `change` and a checksum of its own (what a bug, or a hand in the
    state dir, could leave: intact, but not what this version writes)."""
    body = marshal.loads(entry.partition(b"\n")[2])
    change(body)
    data = marshal.dumps(body)
    return hashlib.sha256(data).hexdigest().encode() + b"\n" + data


def _stored(tmp_path, data: bytes) -> tuple[str, ParseStore, bytes]:  # type: ignore[no-untyped-def]
    """The parse store's entry of a file `data` a render wrote: its key, the store, the entry's bytes."""
    key = blob_sha(data)
    cache = ParseCache(store=ParseStore(tmp_path))
    render({"a.yaml": data}, RenderOptions(), memo=cache)
    cache.end_render()
    store = ParseStore(tmp_path)
    return key, store, (store.dir / f"{key}{SUFFIX}").read_bytes()


def test_an_entry_whose_facts_or_positions_are_not_of_their_shape_is_refused(tmp_path) -> None:
    """Each list of an entry is checked as a whole (in C) and kept as marshal gave it back; whatever
    does not pass is refused as before, one value at a time: the entry is ignored, the file parsed."""
    data = (UPSTREAM + "routes:\n  - id: r1\n    uri: /a\n    upstream_id: u1\n").encode()
    key, store, entry = _stored(tmp_path, data)
    assert decode(entry, key, store.version) is not None
    assert decode(_doctored(entry, lambda b: None), key, store.version) is not None

    def segment(field: int, value: object):  # type: ignore[no-untyped-def]
        return lambda b: b["facts"]["segments"][0].__setitem__(field, value)

    def positions(value: object):  # type: ignore[no-untyped-def]
        return lambda b: b["documents"][0][3].__setitem__("routes", value)

    refused = {
        "a split at 0": segment(7, [0]), "a split past the content": segment(7, [10_000]),
        "a split below -1": segment(7, [-2]), "a split that is text": segment(7, ["10"]),
        "a split that is true": segment(7, [True]), "a size that is text": segment(5, ["41"]),
        "content that is text": segment(6, ['{"id":"r1"}']),
        "a position of three": positions(((6, 5, 1),)), "a position with a float": positions(((6, 5.0),)),
        "a position that is text": positions(("6:5",)),
    }
    for why, change in refused.items():
        assert decode(_doctored(entry, change), key, store.version) is None, why
    lists = decode(_doctored(entry, positions([[6, 5]])), key, store.version)  # lists: read as pairs
    assert lists is not None and lists.documents[0].item_pos["routes"] == ((6, 5),)


def test_a_files_warnings_are_stored_with_it_and_read_back_as_parsed(tmp_path) -> None:
    route = "routes:\n  - id: r1\n    uri: /a\n    upstream_id: u1\n    labels: {a: yes}\n"
    data = (UPSTREAM + route).encode()
    key, store, entry = _stored(tmp_path, data)
    stored = decode(entry, key, store.version)
    assert stored is not None and len(stored.warnings) == 1
    assert_same_parse(stored, parse(data))
    for bad in ([[1, 2]], [["1", 2, "x"]], [[1, 2, b"x"]], None):
        assert decode(_doctored(entry, lambda b, bad=bad: b.__setitem__("warnings", bad)), key,
                      store.version) is None, bad
