"""The git source against real servers: git daemon, smart HTTP (http-backend), sshd, local paths."""

from __future__ import annotations

import contextlib
import io
import logging
import os
import random
import resource
import signal
import subprocess
import sys
import threading
import time
import tracemalloc
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from dulwich.object_store import DiskObjectStore
from dulwich.repo import Repo

from gitsync import log as gslog
from gitsync.configfiles import is_config_file
from gitsync.problems import ProblemsError
from gitsync.render import RenderOptions, render
from gitsync.settings import Secret, Settings
from gitsync.source import mirror
from gitsync.source.inputs import read_input
from gitsync.source.mirror import MAX_HAVES, MAX_PACKS, Source, _packs_to_merge
from gitsync.source.read import tree_files
from gitsync.source.signatures import SignaturePolicy
from gitsync.source.sizes import object_size
from gitsync.source.transport import GitAuth, Remote, SourceError
from testkit.gitservers import (
    BareRepo,
    CannedServer,
    GitDaemon,
    HttpAuth,
    HttpGitServer,
    HungServer,
    SshGitServer,
    git,
    gpg_signer,
    ssh_signer,
)
from testkit.processes import gitsync_env

TRANSPORTS = ("local", "file", "git", "http", "ssh")


@pytest.fixture
def logs() -> Iterator[io.StringIO]:
    """Everything gitsync logs (TRACE and up) during the test, as the real sink writes it."""
    stream = io.StringIO()
    gslog.setup(verbose=2, stream=stream)
    yield stream
    gslog.setup()


def make_source(url: str, ref: str = "main", *, auth: GitAuth | None = None, timeout: float = 30.0,
                verify: str = "none", allowed_signers_file: Path | None = None, gpg_key_ids: tuple = (),
                gpg_keyring_file: Path | None = None, **options) -> Source:
    """A Source for `url` as the settings would build it (the remote and signature policy groups)."""
    signatures = SignaturePolicy(verify, allowed_signers_file, tuple(gpg_key_ids), gpg_keyring_file)
    return Source(Remote.of(url, auth or GitAuth(), timeout), ref, signatures=signatures,
                  state_dir=options.pop("state_dir", Path("/nonexistent")), **options)


def source_for(kind: str, repo: BareRepo, state_dir: Path, servers: dict, **options) -> Source:
    """A Source reaching `repo` over transport `kind`."""
    auth = GitAuth()
    if kind == "local":
        url = str(repo.path)
    elif kind == "file":
        url = "file://" + str(repo.path)
    elif kind == "ssh":
        ssh: SshGitServer = servers["ssh"]
        url = ssh.url(repo.path)
        auth = GitAuth(ssh_key_file=ssh.client_key, ssh_known_hosts_file=ssh.known_hosts)
    else:
        url = servers[kind].url(repo.path.name)
    return make_source(url, auth=options.pop("auth", auth), state_dir=state_dir, **options)


def objects_in(repo_path: Path) -> set[str]:
    """Every distinct object id stored in a repo (packs and loose)."""
    out = git("cat-file", "--batch-all-objects", "--batch-check=%(objectname)", cwd=repo_path)
    return set(out.split())


def objects_between(repo: BareRepo, old: str, new: str) -> set[str]:
    return {line.split()[0] for line in repo.git("rev-list", "--objects", f"{old}..{new}").splitlines()}


def files_at(repo: BareRepo, sha: str) -> dict[str, bytes]:
    """Every config file of commit `sha` as the git CLI reads it (one ``cat-file --batch``)."""
    names = [n for n in repo.git("ls-tree", "-r", "--name-only", sha).splitlines() if is_config_file(n)]
    wanted = "".join(f"{sha}:{n}\n" for n in names).encode()
    batch = subprocess.run(["git", "cat-file", "--batch"], input=wanted, cwd=repo.path, capture_output=True,
                           check=True).stdout
    files, offset = {}, 0
    for name in names:
        header_end = batch.index(b"\n", offset)
        size = int(batch[offset:header_end].split()[2])
        files[name] = batch[header_end + 1:header_end + 1 + size]
        offset = header_end + 1 + size + 1
    return files


# ---------------------------------------------------------------------------------------------------------
# Fetching


@pytest.mark.slow
@pytest.mark.parametrize("kind", TRANSPORTS)
def test_first_fetch_then_incremental_fetch_brings_only_new_objects(kind, remote_repo, servers_by_kind,
                                                                    tmp_path):
    remote_repo.commit({"conf/a.yaml": "routes: []\n", "README.md": "hi\n"}, "first")
    first = remote_repo.fast_import(100, 200)
    source = source_for(kind, remote_repo, tmp_path / "state", servers_by_kind)

    assert source.local_sha() is None
    assert source.check() == first
    assert source.fetch() == first
    assert source.local_sha() == first
    assert objects_in(source.mirror_path) == objects_in(remote_repo.path)

    second = remote_repo.fast_import(10, 200)
    assert source.check() == second and source.local_sha() == first
    before = objects_in(source.mirror_path)
    assert source.fetch() == second
    assert objects_in(source.mirror_path) - before == objects_between(remote_repo, first, second)
    assert source.local_sha() == second

    files = source.read(second)
    assert files.sha == second and files.subject == "commit 9"
    assert files.files == files_at(remote_repo, second)


@contextlib.contextmanager
def descriptors_above(floor: int) -> Iterator[None]:
    """Every descriptor this process opens meanwhile is above `floor`: those below are taken (the soft
    open-files limit raised for them when needed)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < floor + 256:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(floor + 256, hard), hard))
    taken: list[int] = []
    try:
        while not taken or taken[-1] < floor:
            taken.append(os.open(os.devnull, os.O_RDONLY))
        yield
    finally:
        for fd in taken:
            os.close(fd)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["git", "ssh"])
def test_an_incremental_fetch_works_with_descriptors_above_1023(kind, remote_repo, servers_by_kind, tmp_path):
    """The agent's listener may hold a thousand connections, so a fetch's own connection may get a
    descriptor above 1,023, which select() cannot watch; a fetch offering 'have's asks whether the
    server answered yet (dulwich's `can_read`), and the ssh pipe waits for each read."""
    remote_repo.commit({"conf/a.yaml": "routes: []\n"}, "first")
    source = source_for(kind, remote_repo, tmp_path / "state", servers_by_kind)
    source.fetch()
    second = remote_repo.commit({"conf/a.yaml": "routes: []\n# two\n"}, "second")
    with descriptors_above(1100):
        assert source.check() == second
        assert source.fetch() == second
    assert source.read(second).files["conf/a.yaml"] == b"routes: []\n# two\n"


@pytest.mark.slow
def test_many_incremental_fetches_leave_few_packs_and_all_readable(remote_repo, git_daemon, tmp_path):
    first = remote_repo.fast_import(1, 50)
    source = source_for("git", remote_repo, tmp_path / "state", {"git": git_daemon})
    source.fetch()
    tips = [first]
    packs = source.mirror_path / "objects" / "pack"
    for _ in range(40):  # one pack per fetch, merged geometrically past MAX_PACKS when the agent tidies
        tips.append(remote_repo.fast_import(1, 50))
        before = len(list(packs.glob("*.pack")))
        assert source.fetch() == tips[-1]
        assert len(list(packs.glob("*.pack"))) == before + 1  # the fetch itself merges nothing
        source.tidy()
        assert len(list(packs.glob("*.pack"))) <= MAX_PACKS + 1
    assert objects_in(source.mirror_path) == objects_in(remote_repo.path)
    for tip in (tips[0], tips[17], tips[-1]):
        assert source.read(tip).files == files_at(remote_repo, tip)
    assert git("fsck", "--strict", cwd=source.mirror_path) == ""


@pytest.mark.slow
def test_a_caller_that_never_tidies_still_has_its_packs_merged(remote_repo, git_daemon, tmp_path,
                                                               monkeypatch):
    monkeypatch.setattr(mirror, "UNTIDY_PACKS", 12)
    remote_repo.fast_import(1, 50)
    source = source_for("git", remote_repo, tmp_path / "state", {"git": git_daemon})
    source.fetch()
    counts = []
    for _ in range(16):
        tip = remote_repo.fast_import(1, 50)
        assert source.fetch() == tip
        counts.append(len(list((source.mirror_path / "objects" / "pack").glob("*.pack"))))
    assert max(counts) == 12 and counts[-1] < 12  # a fetch that makes it 13 merges them
    assert source.read(tip).files == files_at(remote_repo, tip)


def test_packs_to_merge_is_geometric():
    assert _packs_to_merge([1000]) == 0
    assert _packs_to_merge([5, 5, 5, 5, 1000]) == 4  # the small ones, merged: 20 and 1000
    assert _packs_to_merge([1, 1, 1, 1, 20, 1000]) == 4  # 4 then 20: already geometric
    assert _packs_to_merge([1] * 16 + [20, 1000]) == 17  # 16 ones make 16, which the 20 joins
    assert _packs_to_merge([10, 30, 100, 1000]) == 0


def posts(server: HttpGitServer) -> list[str]:
    """The protocol-v2 commands the server was sent (``ls-refs``, ``fetch``)."""
    return [r.split()[-1] for r in server.requests if r.startswith("POST")]


def test_no_op_check_reads_the_advertisement_only(remote_repo, http_git, tmp_path):
    tip = remote_repo.commit({"a.yaml": "x: 1\n"})
    source = make_source(http_git.url(remote_repo.path.name), state_dir=tmp_path / "state")
    http_git.requests.clear()
    assert source.check() == tip
    assert not (tmp_path / "state").exists(), "check() must not touch the state dir"
    assert posts(http_git) == ["ls-refs"], http_git.requests

    source.fetch()
    packs = sorted((source.mirror_path / "objects" / "pack").glob("*.pack"))
    http_git.requests.clear()
    assert source.check() == source.local_sha() == tip
    assert source.fetch() == tip  # nothing new: no pack asked for, none written
    assert posts(http_git) == ["ls-refs"] * 2, http_git.requests
    assert sorted((source.mirror_path / "objects" / "pack").glob("*.pack")) == packs


@pytest.mark.slow
def test_shallow_first_fetch_then_incremental(remote_repo, git_daemon, tmp_path):
    remote_repo.fast_import(50, 40)
    source = make_source(git_daemon.url(remote_repo.path.name), state_dir=tmp_path / "s", depth=1)
    tip = source.fetch()
    assert len(objects_in(source.mirror_path)) < len(objects_in(remote_repo.path)) / 2
    new = remote_repo.fast_import(3, 40)
    before = objects_in(source.mirror_path)
    assert source.fetch() == new
    assert objects_in(source.mirror_path) - before == objects_between(remote_repo, tip, new)


@pytest.mark.slow
def test_branch_tag_annotated_tag_and_pinned_sha(remote_repo, git_daemon, tmp_path):
    a = remote_repo.commit({"v.yaml": "1"}, "one")
    b = remote_repo.commit({"v.yaml": "2"}, "two")
    remote_repo.tag("light", a)
    remote_repo.tag("release", b, annotated=True)
    url = git_daemon.url(remote_repo.path.name)
    state = tmp_path / "state"

    branch = make_source(url, "main", state_dir=state)
    assert branch.fetch() == b
    c = remote_repo.commit({"v.yaml": "3"}, "three")
    assert branch.check() == c and branch.fetch() == c  # a branch is followed

    assert make_source(url, "light", state_dir=state).fetch() == a
    release = make_source(url, "release", state_dir=state)
    assert release.check() == b and release.fetch() == b  # peeled to the commit
    assert release.local_sha() == b and release.read(b).files == {"v.yaml": b"2"}
    assert make_source(url, "refs/tags/light", state_dir=state).fetch() == a

    pinned = make_source(url, a, state_dir=tmp_path / "fresh")
    assert pinned.check() == a  # nothing to ask the remote
    assert pinned.local_sha() is None
    assert pinned.fetch() == a and pinned.local_sha() == a
    assert pinned.read(a).files == {"v.yaml": b"1"}

    with pytest.raises(SourceError, match=r"^fetch: commit 1{40} not found"):
        make_source(url, "1" * 40, state_dir=state).fetch()
    with pytest.raises(SourceError, match=r"^check: ref 'nope' not found on .*\(branches: main\)"):
        make_source(url, "nope", state_dir=state).check()


@contextlib.contextmanager
def dulwich_git_server(repo_path: Path) -> Iterator[int]:
    """dulwich's own git:// server (protocol v0 only, as the demo runs it): its port."""
    from dulwich.server import DictBackend, TCPGitServer

    with Repo(str(repo_path)) as repo:
        server = TCPGitServer(DictBackend({b"/" + repo_path.name.encode(): repo}), "127.0.0.1", 0)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield server.server_address[1]
        finally:
            server.shutdown()
            server.server_close()
            thread.join(5)


@pytest.mark.slow
@pytest.mark.parametrize("protocol", ["v2", "v0"])
def test_the_ref_query_over_git_protocol_answers_as_dulwichs_client(protocol, remote_repo, git_daemon,
                                                                    caplog):
    """The check asks git:// in protocol v2 (`Remote.ls_refs`): git daemon answers in v2, dulwich's own
    server in v0. For every kind of ref it must see what dulwich's plain `get_refs` sees, annotated tags
    peeled alike, and leave the server a clean end of the conversation."""
    a = remote_repo.commit({"v.yaml": "1"})
    b = remote_repo.commit({"v.yaml": "2"})
    remote_repo.tag("light", a)
    remote_repo.tag("release", b, annotated=True)
    remote_repo.tag("main", a, annotated=True)
    path = b"/" + remote_repo.path.name.encode()
    tag = git("rev-parse", "refs/tags/release", cwd=remote_repo.path).strip().encode()
    with contextlib.ExitStack() as stack:
        port = (git_daemon.port if protocol == "v2"
                else stack.enter_context(dulwich_git_server(remote_repo.path)))
        remote = Remote.of(f"git://127.0.0.1:{port}{path.decode()}")
        client, _ = remote.client()
        for prefixes in ([b"refs/heads/main"], [b"refs/heads/main", b"refs/tags/main"],
                         [b"refs/tags/release"], [b"refs/tags/"], [b"refs/"], [b"HEAD"],
                         [b"refs/heads/nope"]):
            ours = remote.ls_refs(prefixes)
            assert ours == client.get_refs(path, ref_prefix=prefixes).refs, prefixes
        assert remote.ls_refs([b"refs/tags/release"]) == {
            b"refs/tags/release": tag, b"refs/tags/release^{}": b.encode()}
        assert make_source(remote.url, "release").check() == b
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text


@pytest.mark.slow
@pytest.mark.parametrize("protocol", ["v2", "v0"])
def test_a_fetch_asks_a_server_seen_speaking_v2_for_a_whole_pack(protocol, remote_repo, git_daemon,
                                                                 tmp_path, monkeypatch):
    """git's own upload-pack (protocol v2) sends a whole pack to a client that does not ask for a thin
    one, which the mirror takes as it comes; dulwich's server (v0 only) requires thin packs: a
    fetch from it takes one and completes it, as before. Either way the mirror holds the commit."""
    taken: list[str] = []
    for method in ("add_pack", "add_thin_pack"):
        real = getattr(DiskObjectStore, method)
        monkeypatch.setattr(DiskObjectStore, method,
                            lambda self, *a, _real=real, _name=method, **k: (taken.append(_name),
                                                                             _real(self, *a, **k))[1])
    remote_repo.commit({f"routes/r{i}.yaml": f"routes: [{{id: r{i}, uri: /{i}}}]\n" for i in range(20)})
    with contextlib.ExitStack() as stack:
        port = (git_daemon.port if protocol == "v2"
                else stack.enter_context(dulwich_git_server(remote_repo.path)))
        source = make_source(f"git://127.0.0.1:{port}/{remote_repo.path.name}", state_dir=tmp_path)
        for round in range(2):  # a first fetch (a clone), then one commit more
            if round:
                remote_repo.commit({"routes/r3.yaml": "routes: [{id: r3, uri: /three}]\n"})
            tip = source.check()
            taken.clear()
            assert source.fetch() == tip
            assert taken == (["add_pack"] if protocol == "v2" else ["add_thin_pack"])
            assert source.read(tip).files["routes/r3.yaml"] == (b"routes: [{id: r3, uri: /three}]\n" if round
                                                               else b"routes: [{id: r3, uri: /3}]\n")


def test_a_v0_advertisement_of_many_refs_is_read_across_its_pieces():
    """A v0 server advertises every ref (a fleet's status refs among them): lines are split across
    the socket's reads, and only the asked prefixes come back."""
    refs = {b"refs/heads/b%05d" % i: b"%040x" % i for i in range(5000)}
    refs[b"refs/tags/t1"], refs[b"refs/tags/t1^{}"] = b"a" * 40, b"b" * 40
    lines = [sha + b" " + name + (b"\0multi_ack side-band-64k ofs-delta\n" if i == 0 else b"\n")
             for i, (name, sha) in enumerate(refs.items())]
    advertisement = b"".join(b"%04x" % (len(line) + 4) + line for line in lines) + b"0000"
    assert len(advertisement) > 4 * 65536
    with CannedServer(advertisement) as server:
        got = Remote.of(f"git://127.0.0.1:{server.port}/r.git").ls_refs([b"refs/heads/b01", b"refs/tags/t1"])
    assert got == {name: sha for name, sha in refs.items()
                   if name.startswith((b"refs/heads/b01", b"refs/tags/t1"))}
    assert len(got) == 1000 + 2


def test_an_err_from_a_git_protocol_server_is_worded_as_the_checks_error():
    refusal = b"ERR access denied or repository not exported: /r.git\n"
    with CannedServer(b"%04x" % (len(refusal) + 4) + refusal) as server:
        url = f"git://127.0.0.1:{server.port}/r.git"
        with pytest.raises(SourceError, match=r"^check: git://127\.0\.0\.1:\d+/r\.git: access denied or "
                                              r"repository not exported: /r\.git$"):
            make_source(url).check()


def test_a_branch_wins_over_a_tag_of_the_same_name(remote_repo, git_daemon, tmp_path, logs):
    a = remote_repo.commit({"v.yaml": "1"})
    b = remote_repo.commit({"v.yaml": "2"})
    remote_repo.tag("main", a)
    assert make_source(git_daemon.url(remote_repo.path.name), "main", state_dir=tmp_path).fetch() == b
    assert "both a branch and a tag" in logs.getvalue()


def test_a_fetch_offers_the_tip_and_a_bounded_run_of_its_ancestors(remote_repo, git_daemon, tmp_path,
                                                                    monkeypatch):
    """Each 'have' is a pkt-line written and a commit parsed: a mirror with a long history offers its tip
    and at most MAX_HAVES - 1 ancestors, and still gets a minimal pack; a rewrite deeper than that is
    still fetched whole."""
    import gitsync.source.mirror as source_module

    first = remote_repo.fast_import(3 * MAX_HAVES, 5)
    source = make_source(git_daemon.url(remote_repo.path.name), state_dir=tmp_path)
    assert source.fetch() == first
    offered: list[bytes] = []
    walker = source_module._BoundedGraphWalker

    class Counting(walker):  # type: ignore[misc,valid-type]
        def next(self):  # type: ignore[no-untyped-def]
            sha = super().next()
            if sha is not None:
                offered.append(sha)
            return sha

        __next__ = next

    monkeypatch.setattr(source_module, "_BoundedGraphWalker", Counting)
    second = remote_repo.fast_import(1, 5)
    before = objects_in(source.mirror_path)
    assert source.fetch() == second
    assert offered[0] == first.encode() and len(offered) == MAX_HAVES
    assert objects_in(source.mirror_path) - before == objects_between(remote_repo, first, second)

    deep = remote_repo.rev(f"{first}~{2 * MAX_HAVES}")
    rewritten = remote_repo.commit({"v.yaml": "rewritten"}, parent=deep)
    assert source.fetch() == rewritten
    assert source.read(rewritten).files == files_at(remote_repo, rewritten)


@pytest.mark.slow
def test_a_fetch_reads_the_commits_it_offers_once_then_takes_their_parents_from_memory(
        remote_repo, git_daemon, tmp_path, monkeypatch):
    """A daemon fetches again and again, and each negotiation walks the tip and its latest ancestors:
    each commit is read from the packs once; later fetches take its parents from the memo and offer
    exactly the 'have's a fetch without it offers, into the same mirror. A shallow mirror keeps none
    (its boundary moves when it deepens)."""
    import gitsync.source.mirror as source_module

    url = git_daemon.url(remote_repo.path.name)
    remote_repo.fast_import(3 * MAX_HAVES, 5)
    kept = make_source(url, state_dir=tmp_path / "kept")
    plain = make_source(url, state_dir=tmp_path / "plain")
    plain.parents = None
    shallow = make_source(url, state_dir=tmp_path / "shallow", depth=2)
    for source in (kept, plain, shallow):
        source.fetch()
    reads: list[bytes] = []
    offered: list[bytes] = []
    read_parents = source_module.ParentsProvider.get_parents
    next_have = source_module._BoundedGraphWalker.next

    def counted_read(self, sha, *args, **kwargs):  # type: ignore[no-untyped-def]
        reads.append(sha)
        return read_parents(self, sha, *args, **kwargs)

    def counted_next(self):  # type: ignore[no-untyped-def]
        sha = next_have(self)
        if sha is not None:
            offered.append(sha)
        return sha

    monkeypatch.setattr(source_module.ParentsProvider, "get_parents", counted_read)
    monkeypatch.setattr(source_module._BoundedGraphWalker, "next", counted_next)
    monkeypatch.setattr(source_module._BoundedGraphWalker, "__next__", counted_next)

    def fetch(source: Source) -> tuple[list[bytes], list[bytes]]:
        reads.clear()
        offered.clear()
        source.fetch()
        return list(reads), list(offered)

    for round_ in range(3):
        tip = remote_repo.fast_import(1, 5)
        read_plain, offered_plain = fetch(plain)
        read_kept, offered_kept = fetch(kept)
        assert len(offered_plain) == MAX_HAVES and len(read_plain) == MAX_HAVES
        assert offered_kept == offered_plain
        if round_ == 0:  # the first fetch with a tip to offer: every commit walked is read
            assert read_kept == read_plain
        else:  # only the tip the last fetch brought is new to the memo
            assert read_kept == [offered_kept[0]]
        assert kept.local_sha() == plain.local_sha() == tip
        assert objects_in(kept.mirror_path) == objects_in(plain.mirror_path)
        fetch(shallow)
        assert shallow.local_sha() == tip and len(shallow.parents) == 0
    assert len(kept.parents) == MAX_HAVES + 2


def test_force_push_is_followed_and_logged(remote_repo, git_daemon, tmp_path, logs):
    a = remote_repo.commit({"v.yaml": "1"})
    b = remote_repo.commit({"v.yaml": "2"})
    source = make_source(git_daemon.url(remote_repo.path.name), state_dir=tmp_path)
    assert source.fetch() == b
    c = remote_repo.commit({"v.yaml": "3"}, parent=a)  # main now a -> c: b is gone
    assert source.fetch() == c
    assert f"history rewritten on refs/heads/main of {source.url}: {b} -> {c}" in logs.getvalue()


def test_force_push_refused_keeps_the_last_good_commit(remote_repo, git_daemon, tmp_path):
    a = remote_repo.commit({"v.yaml": "1"})
    b = remote_repo.commit({"v.yaml": "2"})
    source = make_source(git_daemon.url(remote_repo.path.name), state_dir=tmp_path, allow_rewrite=False)
    assert source.fetch() == b
    c = remote_repo.commit({"v.yaml": "3"}, parent=a)
    with pytest.raises(SourceError, match=rf"^fetch: refs/heads/main was rewritten \(force-push\) from {b} "
                                          rf"to {c} and allow_rewrite is false; keeping {b}"):
        source.fetch()
    assert source.local_sha() == b and source.read(b).files == {"v.yaml": b"2"}
    d = remote_repo.commit({"v.yaml": "4"}, parent=b)  # history restored and moved on: a fast-forward
    assert source.fetch() == d


def test_a_new_remote_url_starts_afresh_rather_than_reporting_a_rewrite(remotes_root, git_daemon, tmp_path):
    one = BareRepo.create(remotes_root / "one-of-two.git")
    two = BareRepo.create(remotes_root / "two-of-two.git")
    one.commit({"v.yaml": "1"})
    other = two.commit({"w.yaml": "2"})
    first = make_source(git_daemon.url("one-of-two.git"), state_dir=tmp_path, allow_rewrite=False)
    first.fetch()
    moved = make_source(git_daemon.url("two-of-two.git"), state_dir=tmp_path, allow_rewrite=False)
    assert moved.local_sha() is None
    assert moved.fetch() == other and moved.local_sha() == other
    assert "url = " + moved.url in (moved.mirror_path / "config").read_text()


# ---------------------------------------------------------------------------------------------------------
# Reading


def test_tree_files_walks_a_tree_as_dulwich_does():
    """`tree_files` replaces dulwich's `iter_tree_contents` when reading a commit: the same entries in
    the same order, whatever the tree holds (files between directories, links, a submodule, a name
    that is not UTF-8, empty and deep directories)."""
    from dulwich.object_store import MemoryObjectStore, iter_tree_contents
    from dulwich.objects import Blob, Tree

    store = MemoryObjectStore()

    def tree(entries: dict[bytes, tuple[int, bytes]]) -> bytes:
        made = Tree()
        for name, (mode, sha) in entries.items():
            made.add(name, mode, sha)
        store.add_object(made)
        return made.id

    def blob(text: bytes) -> bytes:
        made = Blob.from_string(text)
        store.add_object(made)
        return made.id

    deep = tree({b"d.yaml": (0o100644, blob(b"d: 1\n"))})
    for depth in range(4):
        deep = tree({b"level%d" % depth: (0o040000, deep),
                     b"x%d.yml" % depth: (0o100755, blob(b"%d" % depth))})
    root = tree({
        b"a.yaml": (0o100644, blob(b"a: 1\n")),
        b"conf": (0o040000, tree({b"b.yaml": (0o100644, blob(b"b\n")),
                                  b"link.yaml": (0o120000, blob(b"b.yaml")),
                                  b"sub": (0o160000, b"1" * 40), b"empty": (0o040000, tree({}))})),
        b"deep": (0o040000, deep),
        b"m.json": (0o100644, blob(b"{}")),
        b"\xff-not-utf8.yaml": (0o100644, blob(b"x: 1\n")),
        b"z": (0o040000, tree({b"z.yaml": (0o100644, blob(b"z\n"))})),
    })
    for prefix, tree_id in (("", root), ("deep/", deep)):
        expected = [(prefix + e.path.decode("utf-8", "surrogateescape"), e.mode, e.sha)
                    for e in iter_tree_contents(store, tree_id)]
        assert list(tree_files(store, tree_id, prefix)) == expected
        assert len(expected) >= 5


def test_read_layers_paths_and_exposes_blob_ids(remote_repo, tmp_path):
    sha = remote_repo.commit({"base/routes.yaml": "r: 1\n", "base/deep/u.yaml": "u: 1\n",
                              "overlays/prod/routes.yaml": "r: 2\n", "overlays/dev/x.yaml": "x\n",
                              "top.yaml": "t\n"}, "layered\n\nbody")
    source = make_source(str(remote_repo.path), paths=["./base/", "overlays/prod", "top.yaml"],
                         state_dir=tmp_path)
    files = source.read(source.fetch())
    assert files.subject == "layered"
    assert list(files.files) == ["base/deep/u.yaml", "base/routes.yaml", "overlays/prod/routes.yaml",
                                 "top.yaml"]
    assert files.files["overlays/prod/routes.yaml"] == b"r: 2\n"
    assert files.blob_ids == {n: remote_repo.git("rev-parse", f"{sha}:{n}") for n in files.files}

    with pytest.raises(SourceError, match=r"^read: path 'nowhere' does not exist at commit"):
        make_source(str(remote_repo.path), paths=["nowhere"], state_dir=tmp_path).read(sha)
    with pytest.raises(SourceError, match=r"^config: path '../x' leaves the repo"):
        make_source(str(remote_repo.path), paths=["../x"], state_dir=tmp_path)


def _random_change(rng: random.Random, tree: dict[str, tuple[str, str]]) -> tuple[dict, dict]:
    """One commit's change to `tree` (path → (content, mode)), mostly files edited in place, sometimes
    a file added, removed, made executable, turned into a link, grown past max_file_size, or a
    directory turned into a file; `tree` is updated. Returns the files and modes to commit."""
    names = ["top.yaml", "x.json", "notes.txt", "a/r1.yaml", "a/r2.yml", "a/b/u.yaml", "a/b/deep/c.yaml",
             "a/c.yaml", "big.yaml", "link.yaml"]
    change: dict[str, str | None] = {}
    modes: dict[str, str] = {}
    kind = rng.choice(["edit"] * 6 + ["add", "remove", "exec", "link", "grow", "flatten"])
    present = sorted(tree)
    if kind == "edit" or not present:
        for name in rng.sample(present, min(len(present), rng.randint(1, 3))) if present else []:
            if tree[name][1] == "100644" or tree[name][1] == "100755":
                change[name] = f"routes: []  # {rng.random()}\n"
                modes[name] = tree[name][1]
    elif kind == "add":
        free = [n for n in names if n not in tree  # nor under a directory that is now a file
                and not any("/".join(n.split("/")[:i]) in tree for i in range(1, n.count("/") + 1))]
        if free:
            name = rng.choice(free)
            change[name], modes[name] = f"upstreams: []  # {rng.random()}\n", "100644"
    elif kind == "remove":
        change[rng.choice(present)] = None
    elif kind == "exec":
        name = rng.choice(present)
        change[name], modes[name] = tree[name][0], "100755"
    elif kind == "link":
        name = rng.choice(present)
        change[name], modes[name] = "top.yaml", "120000"
    elif kind == "grow":
        name = rng.choice(present)
        change[name], modes[name] = "routes: []\n" + "#" * 80 + "\n", "100644"
    elif kind == "flatten" and any(n.startswith("a/b/") for n in tree):
        for name in [n for n in tree if n.startswith("a/b/")]:
            change[name] = None
        change["a/b"], modes["a/b"] = "routes: []\n", "100644"
    for name, content in change.items():
        if content is None:
            tree.pop(name, None)
        else:
            tree[name] = (content, modes.get(name, "100644"))
    return change, modes


@pytest.mark.slow
@pytest.mark.parametrize("paths", [["."], ["a", "top.yaml"]])
def test_a_commit_read_by_its_difference_from_the_last_reads_as_a_whole_read_does(remote_repo, tmp_path,
                                                                                  monkeypatch, paths):
    """Forty random commits (files edited, added, removed, made executable, turned into links, grown
    past max_file_size, a directory replaced by a file), each read by a Source that read the one
    before (by difference, where it can) and by a Source reading it whole: the same files, blob ids,
    order, unread and oversized files, with a `have` and without; and a Source alternating the two
    reads the same files with the same contents (a file one read left unread is read when asked for).
    Most reads are by difference."""
    import gitsync.source.read as source_module

    whole_reads: list[str] = []  # trees listed whole by the Sources that read by difference
    tree_files = source_module.tree_files

    def counted(store, tree_id, prefix=""):  # type: ignore[no-untyped-def]
        if counting:
            whole_reads.append(prefix)
        return tree_files(store, tree_id, prefix)

    monkeypatch.setattr(source_module, "tree_files", counted)
    rng = random.Random(20261201)
    tree = {"top.yaml": ("routes: []\n", "100644"), "notes.txt": ("n\n", "100644"),
            "a/r1.yaml": ("routes: []\n", "100644"), "a/b/u.yaml": ("upstreams: []\n", "100644"),
            "a/b/deep/c.yaml": ("consumers: []\n", "100644")}
    remote_repo.commit({name: content for name, (content, _) in tree.items()}, "first")
    url = str(remote_repo.path)

    def have(blob: str) -> bool:  # a parse cache that holds a third of the blobs, the same ones always
        return int(blob, 16) % 3 == 0

    def source(name: str) -> Source:
        return make_source(url, paths=paths, state_dir=tmp_path / name, max_file_size=64)

    def seen(files) -> tuple:  # type: ignore[no-untyped-def]
        return (list(files.blob_ids.items()), list(files.files.items()), sorted(files.files.unread),
                files.files.oversized)

    def contents(files) -> dict[str, bytes]:  # type: ignore[no-untyped-def]
        return {name: files.files[name] for name in files.files.names()}

    counting = False
    by_difference = {"none": source("none"), "have": source("have"), "mixed": source("mixed")}
    for one in by_difference.values():
        one.fetch()
    whole = source("whole")
    whole.fetch()
    for step in range(40):
        change, modes = _random_change(rng, tree)
        if change:
            remote_repo.commit(change, f"step {step}", modes=modes)
        sha = by_difference["none"].fetch()
        by_difference["have"].fetch()
        by_difference["mixed"].fetch()
        whole.fetch()
        for name, asked in (("none", None), ("have", have)):
            whole.reader.last = None
            expected = whole.read(sha, asked)
            counting = True
            got = by_difference[name].read(sha, asked)
            counting = False
            assert seen(got) == seen(expected), (step, name, change)
        whole.reader.last = None
        expected = whole.read(sha)
        counting = True
        got = by_difference["mixed"].read(sha, have if step % 2 else None)  # what another `have` left
        counting = False
        assert list(got.blob_ids.items()) == list(expected.blob_ids.items()), step
        assert {name: got.files[name] for name in expected.files.names()} == contents(expected), step
        assert set(expected.files.oversized) <= set(got.files.oversized) | got.files.unread, step
    assert 0 < len(whole_reads) < 3 * 40 / 4, whole_reads  # read whole: the first read, and structure changes


def test_a_read_whose_last_commit_is_not_in_the_mirror_reads_whole(remote_repo, tmp_path):
    """The mirror may have been made anew since the last read (another remote): its trees are not
    there to compare with, and the commit is read whole."""
    first = remote_repo.commit({"a/r.yaml": "routes: []\n", "u.yaml": "upstreams: []\n"})
    source = make_source(str(remote_repo.path), state_dir=tmp_path)
    source.fetch()
    source.read(first)
    assert source.reader.last is not None
    gone = replace(source.reader.last, objects=((0o40000, b"1" * 40),))
    second = remote_repo.commit({"a/r.yaml": "routes: [] # 2\n"})
    source.fetch()
    source.reader.last = gone
    files = source.read(second).files
    assert files == {"a/r.yaml": b"routes: [] # 2\n", "u.yaml": b"upstreams: []\n"}


def test_read_works_with_the_remote_down(remotes_root, tmp_path):
    repo = BareRepo.create(remotes_root / "down.git")
    sha = repo.commit({"a.yaml": "a: 1\n"})
    with GitDaemon(remotes_root) as daemon:
        source = make_source(daemon.url("down.git"), state_dir=tmp_path)
        source.fetch()
    with pytest.raises(SourceError, match=r"connection refused by 127\.0\.0\.1:"):
        source.check()
    assert source.local_sha() == sha and source.read(sha).files == {"a.yaml": b"a: 1\n"}


def test_read_input_uses_the_state_dir_mirror_or_a_temporary_one(remote_repo, tmp_path):
    sha = remote_repo.commit({"conf/a.yaml": "a: 1\n", "other.txt": "x"})
    settings = Settings(repo=str(remote_repo.path), paths=("conf",), state_dir=tmp_path / "state")
    files = read_input(settings)
    assert (files.sha, files.files) == (sha, {"conf/a.yaml": b"a: 1\n"})
    assert (tmp_path / "state" / "mirror" / "objects").is_dir()

    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    files = read_input(replace(settings, state_dir=blocker / "state"))
    assert files.files == {"conf/a.yaml": b"a: 1\n"}

    other = BareRepo.create(tmp_path / "other.git")
    other_sha = other.commit({"conf/b.yaml": "b: 1\n"})
    files = read_input(replace(settings, repo=str(other.path)))  # the state dir mirrors another remote
    assert (files.sha, files.files) == (other_sha, {"conf/b.yaml": b"b: 1\n"})
    kept = make_source(str(remote_repo.path), state_dir=tmp_path / "state")
    assert kept.mirror_url() == kept.url and kept.local_sha() == sha


# ---------------------------------------------------------------------------------------------------------
# Authentication and secrets


def test_http_basic_auth(remote_repo, remotes_root, tmp_path):
    tip = remote_repo.commit({"a.yaml": "1"})
    with HttpGitServer(remotes_root, HttpAuth("deploy", "s3cret-pass")) as server:
        url = server.url(remote_repo.path.name)
        good = make_source(url, auth=GitAuth("deploy", Secret("s3cret-pass")), state_dir=tmp_path / "good")
        assert good.check() == tip and good.fetch() == tip
        in_url = make_source(url.replace("http://", "http://deploy:s3cret-pass@"), state_dir=tmp_path / "url")
        assert in_url.fetch() == tip and in_url.url == url
        for auth in (GitAuth("deploy", Secret("wrong-pass")), GitAuth()):
            bad = make_source(url, auth=auth, state_dir=tmp_path / "bad")
            with pytest.raises(SourceError, match=r"^check: .*authentication failed \(HTTP 401\)"):
                bad.check()
            with pytest.raises(SourceError, match=r"^fetch: .*authentication failed \(HTTP 401\)"):
                bad.fetch()


def test_http_bearer_token(remote_repo, remotes_root, tmp_path):
    tip = remote_repo.commit({"a.yaml": "1"})
    with HttpGitServer(remotes_root, HttpAuth(token="tok-abcdef")) as server:
        url = server.url(remote_repo.path.name)
        token = GitAuth(token=Secret("tok-abcdef"))
        assert make_source(url, auth=token, state_dir=tmp_path / "a").fetch() == tip
        with pytest.raises(SourceError, match=r"authentication failed \(HTTP 401\)"):
            make_source(url, auth=GitAuth(token=Secret("tok-wrong")), state_dir=tmp_path / "b").fetch()


@pytest.mark.slow
def test_ssh_key_auth_and_strict_host_keys(remote_repo, ssh_git, tmp_path):
    tip = remote_repo.commit({"a.yaml": "1"})
    url = ssh_git.url(remote_repo.path)
    good = GitAuth(ssh_key_file=ssh_git.client_key, ssh_known_hosts_file=ssh_git.known_hosts)
    assert make_source(url, auth=good, state_dir=tmp_path / "a").fetch() == tip

    unknown_key = replace(good, ssh_key_file=ssh_git.other_key)
    with pytest.raises(SourceError, match=r"^fetch: .*Permission denied \(publickey\)"):
        make_source(url, auth=unknown_key, state_dir=tmp_path / "b").fetch()

    wrong_host = replace(good, ssh_known_hosts_file=ssh_git.wrong_known_hosts)
    empty_known_hosts = tmp_path / "empty_known_hosts"
    empty_known_hosts.touch()
    for auth in (wrong_host, replace(good, ssh_known_hosts_file=empty_known_hosts)):
        started = time.monotonic()
        with pytest.raises(SourceError, match=r"^check: .*Host key verification failed"):
            make_source(url, auth=auth, state_dir=tmp_path / "c", timeout=20).check()
        assert time.monotonic() - started < 5, "a host key problem must fail at once, never prompt"


@pytest.mark.slow
def test_credentials_never_reach_the_mirror_logs_or_errors(remote_repo, remotes_root, tmp_path, logs, caplog):
    caplog.set_level(logging.DEBUG)
    remote_repo.commit({"a.yaml": "1"})
    password, token, wrong = "canary-PASS-7f3a", "canary-TOKEN-9b1c", "canary-WRONG-5d2e"
    user_token = "canary-USERTOKEN-3c4d"  # https://TOKEN@host/...: a token in the user part
    errors: list[str] = []
    state = tmp_path / "state"
    with HttpGitServer(remotes_root, HttpAuth("deploy", password)) as basic, \
            HttpGitServer(remotes_root, HttpAuth(token=token)) as bearer, \
            HttpGitServer(remotes_root, HttpAuth(user_token, "")) as token_as_user:
        name = remote_repo.path.name
        make_source(basic.url(name), auth=GitAuth("deploy", Secret(password)), state_dir=state).fetch()
        make_source(basic.url(name).replace("//", f"//deploy:{password}@"), state_dir=state).fetch()
        make_source(bearer.url(name), auth=GitAuth(token=Secret(token)), state_dir=state).fetch()
        make_source(token_as_user.url(name).replace("//", f"//{user_token}@"), state_dir=state).fetch()
        for source in (make_source(basic.url(name), auth=GitAuth("deploy", Secret(wrong)), state_dir=state),
                       make_source(basic.url(name).replace("//", f"//deploy:{wrong}@"), state_dir=state),
                       make_source(bearer.url(name), auth=GitAuth(token=Secret(wrong)), state_dir=state)):
            for operation in (source.check, source.fetch):
                with pytest.raises(SourceError) as caught:
                    operation()
                errors.append(str(caught.value))
                errors.append(repr(source))
    captured = logs.getvalue() + caplog.text + "\n".join(errors)
    assert "authentication failed" in captured
    assert "fetched refs/heads/main of http://127.0.0.1:" in captured
    for canary in (password, token, wrong, user_token):
        assert canary not in captured
        for path in state.rglob("*"):
            if path.is_file():
                assert canary.encode() not in path.read_bytes(), path


# ---------------------------------------------------------------------------------------------------------
# Signatures


@pytest.fixture(scope="module")
def keys(tmp_path_factory) -> Iterator[dict]:
    """A trusted and an untrusted signer for each kind, with the files a policy needs."""
    directory = tmp_path_factory.mktemp("keys")
    trusted_ssh, trusted_line = ssh_signer(directory, "trusted")
    other_ssh, _ = ssh_signer(directory, "other")
    allowed = directory / "allowed_signers"
    allowed.write_text(trusted_line)
    trusted_gpg, trusted_armor, trusted_fpr = gpg_signer(directory, "trusted")
    other_gpg, other_armor, _ = gpg_signer(directory, "other")
    unknown_gpg, _, _ = gpg_signer(directory, "unknown")  # not in the keyring at all
    keyring = directory / "keyring.asc"
    keyring.write_bytes(trusted_armor + other_armor)  # both known; only one trusted by key id
    yield {"ssh": trusted_ssh, "ssh-other": other_ssh, "allowed": allowed, "gpg": trusted_gpg,
           "gpg-other": other_gpg, "gpg-unknown": unknown_gpg, "keyring": keyring, "fpr": trusted_fpr}
    for signer in (trusted_gpg, other_gpg, unknown_gpg):
        signer.close()


def forge(repo: BareRepo, signed: str, files: dict[str, str]) -> str:
    """A commit with different content carrying `signed`'s signature (a tampered commit)."""
    raw = repo.git("cat-file", "commit", signed)
    tampered_tree = repo.git("rev-parse", repo.commit(files, "tampered") + "^{tree}")
    lines = raw.split("\n")
    lines[0] = f"tree {tampered_tree}"
    sha = repo.git("hash-object", "-t", "commit", "-w", "--stdin", input=("\n".join(lines) + "\n").encode())
    repo.git("update-ref", "refs/heads/main", sha)
    return sha


def policy_source(policy: str, repo: BareRepo, keys: dict, state: Path) -> Source:
    trust = {"ssh": {"allowed_signers_file": keys["allowed"]},
             "gpg": {"gpg_key_ids": [keys["fpr"][-16:]], "gpg_keyring_file": keys["keyring"]}}
    options = trust.get(policy, {})
    return make_source(str(repo.path), state_dir=state, verify=policy, **options)


@pytest.mark.slow
def test_signature_policies(remote_repo, keys, tmp_path):
    commits = {
        "unsigned": remote_repo.commit({"v.yaml": "0"}),
        "ssh": remote_repo.commit({"v.yaml": "1"}, signer=keys["ssh"]),
        "ssh-other": remote_repo.commit({"v.yaml": "2"}, signer=keys["ssh-other"]),
        "gpg": remote_repo.commit({"v.yaml": "3"}, signer=keys["gpg"]),
        "gpg-other": remote_repo.commit({"v.yaml": "4"}, signer=keys["gpg-other"]),
        "gpg-unknown": remote_repo.commit({"v.yaml": "5"}, signer=keys["gpg-unknown"]),
    }
    commits["ssh-forged"] = forge(remote_repo, commits["ssh"], {"v.yaml": "evil"})
    commits["gpg-forged"] = forge(remote_repo, commits["gpg"], {"v.yaml": "evil"})
    accepted = {"none": set(commits), "ssh": {"ssh"}, "gpg": {"gpg"}}
    reasons = {
        "unsigned": "is not signed",
        "ssh-other": "bad or untrusted SSH signature",
        "ssh-forged": "bad or untrusted SSH signature",
        "gpg-other": "which is not in gpg_key_ids",
        "gpg-unknown": "bad or unknown OpenPGP signature (ERRSIG)",
        "gpg-forged": "bad or unknown OpenPGP signature (BADSIG)",
    }
    for policy, passing in accepted.items():
        source = policy_source(policy, remote_repo, keys, tmp_path / policy)
        for sha in commits.values():  # forging moved main: fetch each commit by its SHA
            make_source(str(remote_repo.path), sha, state_dir=source.state_dir).fetch()
        for name, sha in commits.items():
            if name in passing:
                source.verify(sha)
                continue
            with pytest.raises(SourceError) as caught:
                source.verify(sha)
            message = str(caught.value)
            assert message.startswith(f"verify: commit {sha}"), message
            if name.split("-")[0] not in (policy, "unsigned"):
                assert f"but verify = {policy}" in message, message
            else:
                assert reasons[name] in message, message


def test_policy_needs_explicit_trust(remote_repo, tmp_path):
    with pytest.raises(SourceError, match=r'^config: verify = "ssh" needs allowed_signers_file'):
        make_source(str(remote_repo.path), state_dir=tmp_path, verify="ssh")
    with pytest.raises(SourceError, match=r'^config: verify = "gpg" needs gpg_key_ids'):
        make_source(str(remote_repo.path), state_dir=tmp_path, verify="gpg")
    with pytest.raises(SourceError, match=r"16\+ hex digits\): DEADBEEF"):
        make_source(str(remote_repo.path), state_dir=tmp_path, verify="gpg", gpg_key_ids=["deadbeef"])


def test_expired_ssh_signer_is_not_trusted(remote_repo, keys, tmp_path):
    sha = remote_repo.commit({"v.yaml": "1"}, signer=keys["ssh"])
    line = keys["allowed"].read_text()
    expired = tmp_path / "allowed_expired"
    expired.write_text(line.replace('namespaces="git"', 'namespaces="git",valid-before="20200101"'))
    source = make_source(str(remote_repo.path), state_dir=tmp_path, verify="ssh",
                         allowed_signers_file=expired)
    source.fetch()
    with pytest.raises(SourceError, match="no usable key in allowed signers"):
        source.verify(sha)


# ---------------------------------------------------------------------------------------------------------
# Failures: hung remotes, kills, leftovers


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["git", "http", "ssh"])
def test_a_hung_remote_times_out(kind, ssh_git, tmp_path):
    with HungServer() as hung:
        url = {"git": f"git://127.0.0.1:{hung.port}/r.git", "http": f"http://127.0.0.1:{hung.port}/r.git",
               "ssh": f"ssh://{ssh_git.user}@127.0.0.1:{hung.port}/r.git"}[kind]
        auth = GitAuth(ssh_key_file=ssh_git.client_key, ssh_known_hosts_file=ssh_git.known_hosts)
        source = make_source(url, auth=auth, state_dir=tmp_path, timeout=0.5)
        for stage, operation in (("check", source.check), ("fetch", source.fetch)):
            started = time.monotonic()
            with pytest.raises(SourceError, match=rf"^{stage}: .*no answer within 0.5s") as caught:
                operation()
            assert time.monotonic() - started < 3
            assert caught.value.unreachable


def test_a_hung_remote_leaves_the_mirror_intact(remotes_root, tmp_path):
    repo = BareRepo.create(remotes_root / "hangs.git")
    sha = repo.commit({"a.yaml": "a: 1\n"})
    with GitDaemon(remotes_root) as daemon:
        source = make_source(daemon.url("hangs.git"), state_dir=tmp_path, timeout=0.5)
        assert source.fetch() == sha
    repo.commit({"a.yaml": "a: 2\n"})
    with HungServer(daemon.port), pytest.raises(SourceError, match="no answer within"):
        source.fetch()
    assert source.local_sha() == sha and source.read(sha).files == {"a.yaml": b"a: 1\n"}


def test_a_held_mirror_lock_fails_a_second_fetch_cleanly(remote_repo, tmp_path):
    import fcntl

    remote_repo.commit({"a.yaml": "1"})
    source = make_source(str(remote_repo.path), state_dir=tmp_path, timeout=0.3)
    source.fetch()
    with open(source.mirror_path / "gitsync.lock", "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        with pytest.raises(SourceError, match="is busy"):
            source.fetch()


@pytest.mark.slow
def test_leftovers_of_a_killed_fetch_do_not_break_the_next(remote_repo, tmp_path):
    """The states a SIGKILL can leave: a ref lock, a temp pack, a pack renamed in without its index."""
    a = remote_repo.commit({"a.yaml": "1"})
    source = make_source(str(remote_repo.path), state_dir=tmp_path)
    source.fetch()
    b = remote_repo.commit({"a.yaml": "2"})
    mirror = source.mirror_path
    (mirror / "refs" / "heads" / "main.lock").write_text(a)
    (mirror / "objects" / "tmp_pack_dead").write_bytes(b"PACK\0\0\0\2")
    (mirror / "objects" / "pack" / ("pack-" + "0" * 40 + ".pack")).write_bytes(b"PACK\0\0")
    (mirror / "config.lock").write_text("")
    assert source.fetch() == b
    assert [p.name for p in mirror.rglob("*.lock")] == ["gitsync.lock"]
    assert not (mirror / "objects" / "tmp_pack_dead").exists()
    git("fsck", "--full", "--no-dangling", cwd=mirror)


KILLED_FETCH = """
import sys
from pathlib import Path
from gitsync.source.transport import Remote
from gitsync.source.mirror import Source
Source(Remote.of(sys.argv[1]), state_dir=Path(sys.argv[2])).fetch()
"""


@pytest.mark.slow
def test_sigkill_during_a_big_fetch_then_a_clean_fetch(remotes_root, git_daemon, tmp_path):
    repo = BareRepo.create(remotes_root / "big.git")
    tip = repo.fast_import(1500, 3000)
    url, state = git_daemon.url("big.git"), tmp_path / "state"
    mirror = state / "mirror"

    def writing_pack() -> bool:
        return any((mirror / "objects").glob("tmp_pack_*"))

    def talking() -> bool:
        return (mirror / "gitsync.lock").exists()

    kills = 0
    for moment in (talking, writing_pack):
        proc = subprocess.Popen([sys.executable, "-c", KILLED_FETCH, url, str(state)], env=gitsync_env())
        deadline = time.monotonic() + 30
        while not moment() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.002)
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            kills += 1
        proc.wait()
        source = make_source(url, state_dir=state)
        assert source.local_sha() in (None, tip)
    assert kills == 2, "the fetch ended before it could be killed: make the repo bigger"

    source = make_source(url, state_dir=state)
    assert source.fetch() == tip and source.local_sha() == tip
    git("fsck", "--full", "--no-dangling", cwd=mirror)
    assert len(source.read(tip).files) == 3000


# ---------------------------------------------------------------------------------------------------------
# reading: config files only, each blob's size from its header first

BIG = 32 * 1024 * 1024  # zeros: a few KB packed, 32 MB once inflated


@pytest.mark.slow
def test_read_takes_config_files_only_and_never_inflates_an_oversized_blob(remote_repo, git_daemon, tmp_path):
    zeros = b"\0" * BIG
    sha = remote_repo.commit({"routes.yaml": "routes: []\n", "video.bin": zeros, "huge.YAML": zeros,
                              "notes.txt": "n\n", "B.Yml": "upstreams: []\n"}, "a big blob beside the config")
    source = source_for("git", remote_repo, tmp_path / "state", {"git": git_daemon}, max_file_size=1 << 20)
    assert source.fetch() == sha
    tracemalloc.start()
    try:
        commit = source.read(sha)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.reset_peak()
        generous = replace_limit(source, BIG).read(sha)  # the control: loading it shows in the peak
        loaded_peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert commit.files == {"routes.yaml": b"routes: []\n", "B.Yml": b"upstreams: []\n"}  # any case
    assert commit.files.oversized == {"huge.YAML": BIG}
    assert peak < 2 * 1024 * 1024 < BIG < loaded_peak, (peak, loaded_peak)
    assert sorted(generous.files) == ["B.Yml", "huge.YAML", "routes.yaml"]
    with pytest.raises(ProblemsError) as refused:
        render(commit.files, RenderOptions(max_file_size=1 << 20))
    assert [str(p) for p in refused.value.problems] == [
        f"huge.YAML: the file is {BIG} bytes, more than max_file_size = 1048576"]


def replace_limit(source: Source, max_file_size: int) -> Source:
    source.reader.max_file_size = max_file_size
    return source


def test_object_sizes_come_from_headers_loose_packed_and_as_deltas(remote_repo):
    """`object_size` against `git cat-file -s`, for loose objects, a pack with offset deltas and
    one with ref deltas (each pack holds deltas: the control)."""
    text = "".join(f"line {n}: " + "x" * (n % 70) + "\n" for n in range(3000))
    for version in range(4):
        remote_repo.commit({"big.yaml": text + f"version {version}\n" * (version + 1),
                            "small.json": f'{{"v": {version}}}\n'}, f"v{version}")

    def blobs() -> list[str]:
        listing = remote_repo.git("cat-file", "--batch-all-objects", "--batch-check")
        return [line.split()[0] for line in listing.splitlines() if line.split()[1] == "blob"]

    def check() -> None:
        with Repo(str(remote_repo.path)) as repo:
            for sha in blobs():
                size = int(remote_repo.git("cat-file", "-s", sha))
                assert object_size(repo.object_store, sha.encode()) == size

    check()  # loose
    for options in ((), ("-c", "repack.useDeltaBaseOffset=false")):
        remote_repo.git(*options, "repack", "-a", "-d", "-f", "-q")
        pack = next((remote_repo.path / "objects" / "pack").glob("*.idx"))
        verified = remote_repo.git("verify-pack", "-v", str(pack))
        assert "chain length = 1" in verified  # deltas there are
        check()


def test_read_warns_about_links_and_submodules_that_may_hold_config(remote_repo, git_daemon, tmp_path):
    log = io.StringIO()
    gslog.setup(stream=log)
    try:
        links = {"linked.yaml": "routes.yaml", "conf": "base", "README.md": "routes.yaml", "vendor": "x"}
        sha = remote_repo.commit({"routes.yaml": "routes: []\n", "base/u.yaml": "upstreams: []\n", **links},
                                 "links", modes={"linked.yaml": "120000", "conf": "120000",
                                                 "README.md": "120000", "vendor": "160000"})
        source = source_for("git", remote_repo, tmp_path / "state", {"git": git_daemon})
        source.fetch()
        files = source.read(sha).files
    finally:
        gslog.setup()
    assert files == {"routes.yaml": b"routes: []\n", "base/u.yaml": b"upstreams: []\n"}
    warnings = [line.split("gitsync.configfiles ", 1)[1] for line in log.getvalue().splitlines()
                if "WARNING" in line]
    link = "a symbolic link (links are not followed)"
    then = "nothing in it is applied (its items are pruned from the gateways)"
    assert warnings == [f"skipped conf: {link}; {then}", f"skipped linked.yaml: {link}; {then}",
                        f"skipped vendor: a submodule; {then}"]


# ---------------------------------------------------------------------------------------------------------
# object bombs (issue 42): a commit whose objects go over the limits is refused at verify


@pytest.mark.parametrize("kind", ["git", "local"])
def test_a_commit_with_an_object_over_the_limit_is_refused_and_the_next_fetches_its_tip_alone(
        kind, tmp_path, remote_repo, git_daemon, logs):
    """The history holds a 64 MB file of zeros (a few KB on the wire): the commit that adds it is refused
    at verify, naming the object and the setting; the commit that removes it is fetched alone (its
    history cannot be) and read; with allow_rewrite = false, where a tip fetched alone cannot be told
    from a rewrite, it is refused too."""
    url = git_daemon.url(remote_repo.path.name) if kind == "git" else str(remote_repo.path)
    limits = mirror.ObjectLimits(1 << 20, 10_000, 1 << 30)
    first = remote_repo.commit({"conf/a.yaml": "routes: []\n"}, "config")
    source = make_source(url, state_dir=tmp_path / "s", limits=limits)
    assert source.fetch() == first
    blob = remote_repo.zeros(64)
    bomb = remote_repo.git("commit-tree", remote_repo.git(
        "mktree", input=f"100644 blob {blob}\tzeros.bin\n040000 tree "
                        f"{remote_repo.git('rev-parse', 'main^{tree}:conf')}\tconf\n".encode()),
        "-p", first, "-m", "a large file")
    remote_repo.git("update-ref", "refs/heads/main", bomb)
    with pytest.raises(SourceError) as refused:
        source.fetch()
    assert refused.value.stage == "verify" and not refused.value.transient
    assert "64.0 MiB (67,108,864 bytes), more than max_object_size = 1.0 MiB" in refused.value.reason
    assert refused.value.reason.startswith(f"{source.url}: refs/heads/main at {bomb[:12]}: ")
    assert source.local_sha() == first  # the mirror is as it was
    after = remote_repo.commit({"zeros.bin": None, "conf/a.yaml": "routes: [{id: r1, uri: /a}]\n"}, "fixed")
    strict = make_source(url, state_dir=tmp_path / "strict", limits=limits, allow_rewrite=False)
    with pytest.raises(SourceError, match="more than max_object_size"):
        strict.fetch()
    assert source.fetch() == after
    assert "fetching the tip alone" in logs.getvalue() and "rewritten" not in logs.getvalue()
    assert source.read(after).files["conf/a.yaml"] == b"routes: [{id: r1, uri: /a}]\n"


def test_the_source_takes_its_limits_from_the_settings(tmp_path):
    source = Source.from_settings(Settings(repo=str(tmp_path), state_dir=tmp_path, max_object_size=9 << 20,
                                           max_fetch_objects=77, max_fetch_size=5 << 30))
    assert source.limits == mirror.ObjectLimits(9 << 20, 77, 5 << 30)


def test_a_contact_retried_names_its_remote_as_the_source_calls_it():
    """A transient failure is tried again with a log line per retry naming the remote's kind (a git
    remote by default; an artifact source says registry), its URL and the attempt; the last one raised."""
    from gitsync.source.mirror import contacted
    from gitsync.source.transport import SourceError
    from testkit.logs import captured_log

    tries = []

    def failing() -> str:
        tries.append(1)
        raise SourceError("check", "connection refused", transient=True)

    for remote, url in (("git remote", "git://127.0.0.1:1/config"), ("registry", "oci://127.0.0.1:1/c:main")):
        tries.clear()
        with captured_log() as log, pytest.raises(SourceError, match="connection refused"):
            contacted(failing, url, 2, 0.01, **({} if remote == "git remote" else {"remote": remote}))
        assert len(tries) == 2
        assert f"{remote} {url}: " in log.getvalue() and "(attempt 1 of 2); retrying in" in log.getvalue()
        assert log.getvalue().count("retrying in") == 1
