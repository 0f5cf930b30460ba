"""Reading the fleet (gitsync.writeback.fleet) against a real git daemon, with statuses written by real
publishers and an attacker's refs beside them: names that are no agent's, more refs than the reader
reads, a status of 64 MB of zeros; what a read costs when nothing moved and when one ref moved."""

from __future__ import annotations

import io
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from dulwich.objects import Blob, Commit, Tree

from gitsync.source.sizes import ObjectSizes
from gitsync.source.transport import Remote
from gitsync.writeback.fleet import FleetReader, Ignored, choose_refs, is_agent_ref, parse_component
from gitsync.writeback.publisher import WriteBack, WriteBackOptions
from gitsync.writeback.remote import LOCAL_FLEET_PREFIX, open_work_repo
from gitsync.writeback.statusfile import MAX_STATUS_BYTES, FleetEntry, Verdict
from gitsync.writeback.trust import StatusSigners
from gitsync.writeback.wire import GatewayStatus, StatusReport, render_status, status_document
from testkit.git import git
from testkit.gitservers import GitGate, ssh_keygen
from testkit.logs import captured_log

PREFIX = b"refs/gitsync/status/"


def report(agent: str, commit: str, group: str = "canary") -> StatusReport:
    return StatusReport(agent=agent, commit=commit, subject="s", result="applied",
                        gateways=[GatewayStatus(url="http://10.0.0.1:9180", status="applied", versions={},
                                                digest=None, counts={}, pruned={})],
                        time=datetime.now(UTC), duration=0.1, group=group)


@pytest.fixture
def log() -> Iterator[io.StringIO]:
    with captured_log() as out:
        yield out


@pytest.mark.parametrize(("component", "valid"), [
    (b"edge-1", True), (b"eu%2F1", True), (b"gw-%C3%A9", True), (b"a.b", True),
    (b"eu/1", False), (b"%2e", False), (b"a%2Db", False),  # not how an agent's name encodes
    (b"%FF", False), (b"", False), (b"x" * 201, False), (b".hidden", False), (b"\xff", False),
])
def test_a_ref_is_read_only_when_its_name_is_what_an_agents_name_encodes_to(component, valid):
    assert is_agent_ref(component) is valid


def test_which_refs_are_read_past_the_limit_the_groups_first():
    listed = {PREFIX + name.encode(): b"%040x" % n for n, name in enumerate(
        ["a1", "a2", "b1", "canary-0", "z9", "eu/x/1", "%zz"])}
    tips, ignored = choose_refs(listed, PREFIX, 3, first=["canary-0", "z9"])
    assert list(tips) == [PREFIX + b"canary-0", PREFIX + b"z9", PREFIX + b"a1"]
    assert ignored == Ignored(invalid=("%zz", "eu/x/1"), excess=("a2", "b1"))
    assert ignored.describe(3) == ("2 beyond max_status_refs = 3 (a2, b1); 2 whose name is no agent's "
                                   "(%zz, eu/x/1)")
    tips, ignored = choose_refs(listed, PREFIX, 3, only=["canary-0", "nobody"])
    assert list(tips) == [PREFIX + b"canary-0"] and ignored.excess == ()


def test_a_flood_and_a_bomb_cost_a_reader_what_it_reads_and_a_quiet_poll_nothing(tmp_path, git_daemon,
                                                                                 remote_repo, log):
    url = git_daemon.url(remote_repo.path.name)
    commit = remote_repo.commit({"a.yaml": "routes: []\n"}, "config")
    writers = {name: WriteBack(Remote.of(url), tmp_path / name, WriteBackOptions(agent=name, heartbeat=3600))
               for name in ("canary-0", "main-0", "zz-last")}
    for name, writer in writers.items():
        assert writer.publish_status(report(name, commit))
    blob = remote_repo.zeros(64)
    tree = remote_repo.git("mktree", input=f"100644 blob {blob}\tstatus.yaml\n".encode())
    remote_repo.git("update-ref", "refs/gitsync/status/bomb", remote_repo.git("commit-tree", tree, "-m", "x"))
    seed = remote_repo.git("rev-parse", "refs/gitsync/status/main-0")
    remote_repo.git("update-ref", "--stdin", input="".join(
        f"create refs/gitsync/status/f{i:04d} {seed}\ncreate refs/gitsync/status/x/y/{i} {seed}\n"
        for i in range(120)).encode())
    work = tmp_path / "reader"
    open_work_repo(work).close()  # as an older gitsync left it: a loose ref per agent
    (work / "refs" / "heads" / "fleet").mkdir(parents=True)
    (work / "refs" / "heads" / "fleet" / "left-by-an-older-gitsync").write_text(seed + "\n")

    reader = FleetReader(Remote.of(url), work, max_refs=50)
    read = reader.read(first=["zz-last"])
    names = [e.ref for e in read.entries]
    assert len(names) == 50 and "zz-last" in names and "canary-0" in names and "bomb" in names
    bomb = next(e for e in read.entries if e.ref == "bomb")
    assert bomb.status is None and bomb.unreadable.startswith("not fetched: object ")
    assert "is 64.0 MiB (67,108,864 bytes), more than the size a status may have" in bomb.unreadable
    # the flood's refs hold main-0's status: each speaks for another agent than its ref's
    assert {e.agent for e in read.entries if e.status is not None} == {"canary-0", "zz-last"}
    assert "main-0" not in names  # beyond the 50 read (zz-last first, then by name)
    assert read.changed == frozenset(names) and read.gone == frozenset()
    assert len(read.ignored.excess) == 3 + 120 + 1 - 50 and len(read.ignored.invalid) == 120
    assert log.getvalue().count("fleet: status refs under refs/gitsync/status/ ignored: 74 beyond "
                                "max_status_refs = 50") == 1
    packed = (work / "packed-refs").read_text()
    assert packed.count(LOCAL_FLEET_PREFIX.decode()) == 49  # every ref read but the bomb, in one file
    assert not (work / "refs" / "heads" / "fleet").exists()  # the loose ones of an older gitsync: gone
    packs = sorted((work / "objects" / "pack").glob("*.pack"))

    quiet = reader.read(first=["zz-last"])  # nothing moved: nothing fetched, nothing read again
    assert quiet.changed == frozenset() and quiet.entries == read.entries
    assert sorted((work / "objects" / "pack").glob("*.pack")) == packs
    assert log.getvalue().count("ignored: 74 beyond") == 1  # told once, not every poll

    writers["canary-0"].publish_status(report("canary-0", commit, group="main"))
    moved = reader.read(first=["zz-last"])
    assert moved.changed == frozenset({"canary-0"})
    assert next(e for e in moved.entries if e.ref == "canary-0").group == "main"
    remote_repo.git("update-ref", "-d", "refs/gitsync/status/zz-last")
    assert reader.read(first=["zz-last"]).gone == frozenset({"zz-last"})


def test_a_status_ref_with_a_long_history_is_refused_alone_by_its_count_of_objects(tmp_path, git_daemon,
                                                                                   remote_repo):
    url = git_daemon.url(remote_repo.path.name)
    commit = remote_repo.commit({"a.yaml": "routes: []\n"}, "config")
    WriteBack(Remote.of(url), tmp_path / "w", WriteBackOptions(agent="canary-0")).publish_status(
        report("canary-0", commit))
    tip = remote_repo.git("rev-parse", "refs/gitsync/status/canary-0")
    tree = remote_repo.git("rev-parse", f"{tip}^{{tree}}")
    for n in range(60):  # a heartbeat on a heartbeat on … : sixty commits under one ref
        tip = remote_repo.git("commit-tree", tree, "-p", tip, "-m", f"deep {n}")
    remote_repo.git("update-ref", "refs/gitsync/status/deep", tip)
    read = FleetReader(Remote.of(url), tmp_path / "reader").read()
    deep = next(e for e in read.entries if e.ref == "deep")
    assert deep.unreadable is not None and deep.unreadable.startswith("not fetched: the pack holds ")
    assert deep.unreadable.endswith("objects, more than the objects a read of the status refs may bring = 24")
    assert next(e for e in read.entries if e.ref == "canary-0").status is not None


# ---------------------------------------------------------------------------------------------------------
# Status refs sharded by group (issue 45): <status_refs>/<group>/<agent>, a group read by ref-prefix


@pytest.mark.parametrize(("component", "parsed"), [
    (b"edge-1", (None, "edge-1")), (b"canary/edge-1", ("canary", "edge-1")),
    (b"eu.west/gw-%C3%A9", ("eu.west", "gw-%C3%A9")),
    (b"eu/x/1", None), (b"/edge-1", None), (b"canary/", None), (b"-bad%/a", None),  # no group's name
    (b"%2Ecanary/a", None), (b"can%61ry/a", None),  # not how a group's name encodes
    (b"canary/%zz", None), (b"x" * 65 + b"/a", None),
])
def test_a_status_ref_names_an_agent_and_maybe_its_group(component, parsed):
    assert parse_component(component) == parsed


def test_a_group_read_chooses_its_groups_refs_and_an_agents_ref_in_its_group_over_its_old_one():
    listed = {PREFIX + name.encode(): b"%040x" % n for n, name in enumerate(
        ["canary/c1", "canary/c2", "canary/c3", "c1", "old-c4", "main/m1", "main/m2", "m3"])}
    tips, ignored = choose_refs(listed, PREFIX, 2, groups=["canary"])
    # c1 has a ref in its group and one from before: the group's; main's refs are not this read's
    assert sorted(tips) == [PREFIX + b"canary/c1", PREFIX + b"canary/c2", PREFIX + b"m3", PREFIX + b"old-c4"]
    assert ignored == Ignored(excess=("canary/c3",))  # the limit is per group: canary's 3 over 2
    tips, ignored = choose_refs(listed, PREFIX, 2)  # the whole fleet: at most 2 of each group
    assert sorted(tips) == [PREFIX + n for n in (b"canary/c1", b"canary/c2", b"m3", b"main/m1", b"main/m2",
                                                 b"old-c4")]
    tips, _ = choose_refs(listed, PREFIX, 5, only=["c1", "m1"])
    assert sorted(tips) == [PREFIX + b"canary/c1", PREFIX + b"main/m1"]


def test_a_group_reader_asks_the_server_for_its_group_and_its_named_agents_old_refs(tmp_path):
    reader = FleetReader(Remote.of("git://127.0.0.1:1/x"), tmp_path, group="canary", max_refs=2)
    assert reader.prefixes() == [PREFIX + b"canary/"]
    assert reader.prefixes(first=["c2", "c1", "eu/1"]) == [PREFIX + b"canary/", PREFIX + b"c1",
                                                            PREFIX + b"c2"]
    assert reader.prefixes(only=["c9"], first=["c1"]) == [PREFIX + b"canary/", PREFIX + b"c9"]
    assert FleetReader(Remote.of("git://127.0.0.1:1/x"), tmp_path).prefixes(first=["c1"]) == [PREFIX]


def _flood_of_other_groups(repo, seed: str, count: int) -> None:
    repo.git("update-ref", "--stdin", input="".join(
        f"create refs/gitsync/status/g{i % 50:02d}/agent-{i:05d} {seed}\n" for i in range(count)).encode())
    repo.git("pack-refs", "--all")


@pytest.mark.slow
def test_a_group_read_costs_the_server_the_group_not_the_fleet(tmp_path, git_daemon, http_git, remote_repo):
    """3 canaries beside 5,000 status refs of 50 other groups: over git:// (bytes counted by a relay) and
    smart HTTP (bytes counted by the server), the group's read gets its 3 refs alone, and what the server
    sends for it is a small fraction of what it sends for one listing of the fleet."""
    commit = remote_repo.commit({"a.yaml": "routes: []\n"}, "config")
    for name in ("c1", "c2", "c3"):
        writer = WriteBack(Remote.of(git_daemon.url(remote_repo.path.name)), tmp_path / name,
                           WriteBackOptions(agent=name, group="canary", status_branch=""))
        assert writer.publish_status(report(name, commit))
    assert remote_repo.git("for-each-ref", "--format=%(refname)", "refs/gitsync/status/").split() == [
        "refs/gitsync/status/canary/c1", "refs/gitsync/status/canary/c2", "refs/gitsync/status/canary/c3"]
    _flood_of_other_groups(remote_repo, remote_repo.git("rev-parse", "refs/gitsync/status/canary/c1"), 5000)
    with GitGate(git_daemon.port) as relay:
        servers = (("git", relay.url(remote_repo.path.name), lambda: relay.traffic),
                   ("http", http_git.url(remote_repo.path.name), lambda: http_git.traffic))
        for name, url, traffic in servers:
            def sent_by_server(traffic=traffic) -> int:
                relay.settle()
                return sum(t.received for service, t in traffic().items() if "upload-pack" in service)

            group = FleetReader(Remote.of(url), tmp_path / f"{name}-group", group="canary")
            before = sent_by_server()
            read = group.read()
            group_bytes = sent_by_server() - before
            assert [(e.ref, e.group) for e in read.entries] == [
                ("canary/c1", "canary"), ("canary/c2", "canary"), ("canary/c3", "canary")]
            assert read.ignored == Ignored()
            before = sent_by_server()
            assert group.read().changed == frozenset()
            quiet_bytes = sent_by_server() - before

            before = sent_by_server()
            FleetReader(Remote.of(url), tmp_path / f"{name}-whole", max_refs=5).read()
            fleet_bytes = sent_by_server() - before
            assert fleet_bytes > 5000 * 50  # a listing of 5,003 refs: tens of bytes each
            assert quiet_bytes * 100 < fleet_bytes, (name, quiet_bytes, fleet_bytes)
            assert group_bytes * 20 < fleet_bytes, (name, group_bytes, fleet_bytes)


def test_a_status_under_one_groups_refs_that_names_another_group_is_refused(tmp_path, git_daemon,
                                                                           remote_repo):
    url = git_daemon.url(remote_repo.path.name)
    commit = remote_repo.commit({"a.yaml": "routes: []\n"}, "config")
    WriteBack(Remote.of(url), tmp_path / "m1", WriteBackOptions(agent="m1", group="main")).publish_status(
        report("m1", commit, group="main"))
    tip = remote_repo.git("rev-parse", "refs/gitsync/status/main/m1")
    remote_repo.git("update-ref", "refs/gitsync/status/canary/m1", tip)  # main's status, under canary
    read = FleetReader(Remote.of(url), tmp_path / "reader", group="canary").read()
    (entry,) = read.entries
    assert entry.ref == "canary/m1" and entry.status is None and entry.group is None
    assert entry.trouble == "unreadable status: it speaks for group 'main', not for its ref's group 'canary'"


def test_a_status_signed_for_another_group_is_not_verified_in_this_one(tmp_path, git_daemon, remote_repo):
    """m1's key is allowed for m1@main: a status it signs saying canary, under canary's refs, is refused."""
    url = git_daemon.url(remote_repo.path.name)
    commit = remote_repo.commit({"a.yaml": "routes: []\n"}, "config")
    keys = {name: ssh_keygen(tmp_path / f"{name}.key") for name in ("c1", "m1")}
    signers = tmp_path / "allowed_signers"
    signers.write_text(f"c1@canary {(tmp_path / 'c1.key.pub').read_text()}"
                       f"m1@main {(tmp_path / 'm1.key.pub').read_text()}")
    for name, group in (("c1", "canary"), ("m1", "canary")):  # m1 claims canary
        WriteBack(Remote.of(url), tmp_path / name, WriteBackOptions(agent=name, group=group,
                                                                    signing_key=keys[name])
                  ).publish_status(report(name, commit, group=group))
    read = FleetReader(Remote.of(url), tmp_path / "reader", signers=StatusSigners(signers),
                       group="canary").read()
    verdicts = {e.ref: (e.verified, e.trouble) for e in read.entries}
    assert verdicts["canary/c1"] == (True, None)
    assert verdicts["canary/m1"][0] is False and verdicts["canary/m1"][1].startswith("unverified: ")


def test_a_group_read_during_an_upgrade_reads_the_old_layout_then_its_members_old_refs(tmp_path, git_daemon,
                                                                                      remote_repo):
    """Before any canary is upgraded, every status ref is <status_refs>/<agent>: the gate reads them as it
    did. Once one canary writes under canary/, the gate lists canary/ and the old refs of the members it
    knows (its memory: `first`), and nothing else: a canary still on the old version keeps counting."""
    url = git_daemon.url(remote_repo.path.name)
    commit = remote_repo.commit({"a.yaml": "routes: []\n"}, "config")
    old = {name: WriteBack(Remote.of(url), tmp_path / name, WriteBackOptions(agent=name))  # old refs
           for name in ("c1", "c2", "m1")}
    for name, writer in old.items():
        writer.publish_status(report(name, commit, group="main" if name == "m1" else "canary"))
    _flood_of_other_groups(remote_repo, remote_repo.git("rev-parse", "refs/gitsync/status/m1"), 200)
    reader = FleetReader(Remote.of(url), tmp_path / "reader", group="canary")
    first = reader.read()
    assert {e.ref for e in first.group("canary")} == {"c1", "c2"}  # the old layout, read whole

    # c1 is upgraded: it writes in its group and deletes its old ref; c2 is not yet
    upgraded = WriteBack(Remote.of(url), tmp_path / "c1", WriteBackOptions(agent="c1", group="canary"))
    assert upgraded.publish_status(report("c1", commit))
    refs = remote_repo.git("for-each-ref", "--format=%(refname)", "refs/gitsync/status/").split()
    assert "refs/gitsync/status/canary/c1" in refs and "refs/gitsync/status/c1" not in refs
    second = reader.read(first=["c1", "c2"])
    assert [(e.ref, e.group) for e in second.entries] == [("canary/c1", "canary"), ("c2", "canary")]
    assert second.ignored == Ignored()  # main's m1 and the 200 others were never listed
# Which refs are read: each bound alone, exactly at it and one past


def listed_refs(*names: str) -> dict[bytes, bytes]:
    return {PREFIX + name.encode(): b"%040x" % n for n, name in enumerate(names, 1)}


@pytest.mark.parametrize(("limit", "read", "excess"), [
    (3, ["a", "b", "c"], ()), (2, ["a", "b"], ("c",)), (0, [], ("a", "b", "c")), (10, ["a", "b", "c"], ()),
])
def test_max_status_refs_are_read_at_most_the_others_named(limit, read, excess):
    listed = listed_refs("c", "a", "b")
    tips, ignored = choose_refs(listed, PREFIX, limit)
    assert list(tips) == [PREFIX + name.encode() for name in read]
    assert all(tips[ref] == listed[ref] for ref in tips)
    assert ignored == Ignored((), excess) and bool(ignored) is bool(excess)


def test_the_agents_asked_for_first_are_read_first_whatever_their_names():
    listed = listed_refs("a", "b", "eu/x/1", "z")
    tips, ignored = choose_refs(listed, PREFIX, 2, first=["z", "eu/x/1", "not a name\n"])
    # eu/x/1's ref would be eu%2Fx%2F1: no such ref (and a ref two levels down is no agent's)
    assert list(tips) == [PREFIX + b"z", PREFIX + b"a"]
    assert ignored == Ignored(("eu/x/1",), ("b",))


def test_only_the_agents_asked_for_are_read_or_counted():
    listed = listed_refs("a", "b", "eu%2F1", "..")
    tips, ignored = choose_refs(listed, PREFIX, 1, only=["eu/1", "b", "not a name\n"])
    assert list(tips) == [PREFIX + b"b"]  # one of the two asked for, by name
    assert ignored == Ignored(("..",), ("eu%2F1",))
    tips, ignored = choose_refs(listed, PREFIX, 5, only=[])
    assert tips == {} and ignored == Ignored(("..",), ())


def test_ignored_refs_are_told_with_five_names_at_most():
    assert not Ignored() and Ignored(invalid=("x",)) and Ignored(excess=("y",))
    excess = tuple(f"a{n}" for n in range(7))
    assert Ignored(excess=excess).describe(2) == "7 beyond max_status_refs = 2 (a0, a1, a2, a3, a4, … 2 more)"
    assert Ignored(excess=excess[:5]).describe(2) == "5 beyond max_status_refs = 2 (a0, a1, a2, a3, a4)"
    assert Ignored(invalid=("x" * 100 + "\n",)).describe(1) == f"1 whose name is no agent's ({'x' * 80})"


# ---------------------------------------------------------------------------------------------------------
# What one status ref may say (an object store on disk, objects written by hand)


class Store:
    """A bare repo to write a status ref's objects into, and a reader over it."""

    def __init__(self, path, max_refs: int = 1000, signers=None) -> None:
        self.repo = open_work_repo(path)
        self.reader = FleetReader(Remote.of(str(path)), path, signers=signers, max_refs=max_refs)
        self.time = 1_700_000_000

    def add(self, obj):
        self.repo.object_store.add_object(obj)
        return obj

    def blob(self, data: bytes) -> Blob:
        return self.add(Blob.from_string(data))

    def tree(self, entries: dict[bytes, tuple[int, bytes]]) -> Tree:
        tree = Tree()
        for name, (mode, sha) in entries.items():
            tree.add(name, mode, sha)
        return self.add(tree)

    def status_tree(self, agent: str = "edge-1", data: bytes | None = None) -> Tree:
        blob = self.blob(data if data is not None else status_bytes(agent))
        return self.tree({b"status.yaml": (0o100644, blob.id)})

    def commit(self, tree: Tree, parents: tuple[bytes, ...] = (), seconds: int = 0) -> Commit:
        commit = Commit()
        commit.tree, commit.parents = tree.id, list(parents)
        commit.author = commit.committer = b"a <a@example.com>"
        commit.author_time = commit.commit_time = self.time + seconds
        commit.author_timezone = commit.commit_timezone = 0
        commit.message = b"status\n"
        return self.add(commit)

    def entry(self, sha: bytes, name: str = "edge-1", refused: str | None = None):
        with ObjectSizes(self.repo.object_store) as objects:
            return self.reader._entry(objects, PREFIX + name.encode(), sha, refused)


def status_bytes(agent: str, group: str = "canary") -> bytes:
    return render_status(status_document(report(agent, "a" * 40, group)))


@pytest.fixture
def store(tmp_path) -> Iterator[Store]:
    made = Store(tmp_path / "fleet")
    yield made
    made.repo.close()


def test_a_status_commit_is_read_with_its_time(store):
    commit = store.commit(store.status_tree())
    entry = store.entry(commit.id)
    assert entry.status is not None and entry.verified and entry.unreadable is None
    assert (entry.ref, entry.agent, entry.tip) == ("edge-1", "edge-1", commit.id.decode())
    assert entry.written == entry.seen == datetime.fromtimestamp(store.time, UTC)
    assert entry.signature is None


def test_a_heartbeat_is_read_through_its_parent_with_the_same_tree(store):
    tree = store.status_tree()
    status = store.commit(tree)
    beat = store.commit(tree, (status.id,), seconds=60)
    entry = store.entry(beat.id)
    assert entry.verified and entry.tip == beat.id.decode()
    assert entry.written == datetime.fromtimestamp(store.time, UTC)  # the status's time
    assert entry.seen == datetime.fromtimestamp(store.time + 60, UTC)  # the agent's last write


@pytest.mark.parametrize("parent", ["another tree", "missing", "a blob"])
def test_a_heartbeat_whose_parent_is_not_its_status_is_unreadable(store, parent):
    tree = store.status_tree()
    other = {"another tree": lambda: store.commit(store.status_tree(data=status_bytes("edge-1", "main"))).id,
             "missing": lambda: b"1" * 40, "a blob": lambda: store.blob(b"x").id}[parent]()
    beat = store.commit(tree, (other,), seconds=60)
    entry = store.entry(beat.id)
    assert entry.status is None and entry.unreadable == "a heartbeat whose parent is not its status"
    assert (entry.ref, entry.agent) == ("edge-1", "edge-1")
    assert entry.seen == datetime.fromtimestamp(store.time + 60, UTC) and entry.tip == beat.id.decode()


def test_a_ref_to_anything_but_a_commit_is_unreadable(store):
    blob = store.blob(b"x")
    assert store.entry(blob.id) == FleetEntry("edge-1", "edge-1", None,
                                              "the ref points to a blob, not a commit", tip=blob.id.decode())
    assert store.entry(store.status_tree().id).unreadable == "the ref points to a tree, not a commit"
    at = store.blob(b"x" * MAX_STATUS_BYTES)  # as large as a status may be: looked at
    assert store.entry(at.id).unreadable == "the ref points to a blob, not a commit"
    past = store.blob(b"x" * (MAX_STATUS_BYTES + 1))  # larger: never inflated
    assert store.entry(past.id).unreadable == ("the ref points to a object larger than a status may be, "
                                               "not a commit")



def test_packed_objects_are_read_and_bounded_as_loose_ones(store):
    """A fetch leaves the objects in a pack (as deltas of one another): read from the pack that holds
    them, sized from their headers there, they give the entries the loose objects give."""
    status = store.commit(store.status_tree())
    beat = store.commit(store.status_tree(), parents=(status.id,), seconds=60)
    data = status_bytes("edge-1")
    data += b"#" + b"x" * (MAX_STATUS_BYTES - len(data) - 1) + b"\n"  # one byte more than a status may be
    over = store.commit(store.status_tree(data=data))
    large = store.blob(b"x" * (MAX_STATUS_BYTES + 1))
    other = store.commit(store.status_tree("edge-2"))
    shas = [status.id, beat.id, over.id, large.id, other.id]
    loose = [store.entry(sha) for sha in shas]
    repo = Path(store.repo.path)
    listed = git("cat-file", "--batch-all-objects", "--batch-check=%(objectname)", cwd=repo)
    git("pack-objects", "-q", "objects/pack/pack", cwd=repo, input=listed.encode() + b"\n")
    git("prune-packed", cwd=repo)
    assert not any(len(d.name) == 2 and any(d.iterdir()) for d in (repo / "objects").iterdir())
    index = next((repo / "objects" / "pack").glob("*.idx"))
    assert any(len(line.split()) == 7 for line in git("verify-pack", "-v", str(index)).splitlines())  # deltas
    with ObjectSizes(store.repo.object_store) as objects:
        assert all(objects.find(sha) is not None for sha in shas)
    packed = [store.entry(sha) for sha in shas]
    assert packed == loose
    assert packed[0].verified and packed[1].verified and packed[1].seen != packed[1].written
    assert packed[2].unreadable == "262145 bytes, more than the 262144 a status file may have"
    assert packed[3].unreadable == "the ref points to a object larger than a status may be, not a commit"
    assert packed[4].unreadable == "it speaks for 'edge-2', not for its ref's agent"


@pytest.mark.parametrize(("size", "readable"), [(MAX_STATUS_BYTES, True), (MAX_STATUS_BYTES + 1, False)])
def test_a_status_file_is_read_up_to_256_kib(store, size, readable):
    data = status_bytes("edge-1")
    data += b"#" + b"x" * (size - len(data) - 2) + b"\n"  # a comment to the size
    assert len(data) == size
    entry = store.entry(store.commit(store.status_tree(data=data)).id)
    if readable:
        assert entry.verified
    else:
        assert entry.unreadable == "262145 bytes, more than the 262144 a status file may have"


def test_a_status_commit_without_its_status_file_is_unreadable(store):
    none = store.commit(store.tree({b"other.yaml": (0o100644, store.blob(status_bytes("edge-1")).id)}))
    at = datetime.fromtimestamp(store.time, UTC)
    assert store.entry(none.id) == FleetEntry("edge-1", "edge-1", None, "no status.yaml in the status commit",
                                              written=at, seen=at, tip=none.id.decode())
    inner = store.status_tree()
    folder = store.commit(store.tree({b"status.yaml": (0o040000, inner.id)}))
    assert store.entry(folder.id).unreadable == "status.yaml is not a file"
    link = store.commit(store.tree({b"status.yaml": (0o120000, store.blob(b"elsewhere").id)}))
    assert store.entry(link.id).unreadable == "status.yaml is not a file"
    executable = store.commit(store.tree({b"status.yaml": (0o100755, store.blob(status_bytes("edge-1")).id)}))
    assert store.entry(executable.id).verified


def test_a_status_that_speaks_for_another_agent_is_unreadable(store):
    commit = store.commit(store.status_tree("edge-2"))
    entry = store.entry(commit.id)
    assert entry.status is None and entry.agent == "edge-1"
    at = datetime.fromtimestamp(store.time, UTC)
    assert entry == FleetEntry("edge-1", "edge-1", None, "it speaks for 'edge-2', not for its ref's agent",
                               written=at, seen=at, tip=commit.id.decode())
    encoded = store.entry(store.commit(store.status_tree("eu/1")).id, "eu%2F1")  # its ref's encoding
    assert encoded.verified and encoded.agent == "eu/1"


def test_a_ref_not_fetched_or_not_readable_is_an_entry_that_says_why(store):
    assert store.entry(b"1" * 40, refused="over the bounds") == FleetEntry(
        "edge-1", "edge-1", None, "not fetched: over the bounds", tip="1" * 40)
    with captured_log() as out:
        missing = store.entry(b"2" * 40)
    assert missing == FleetEntry("edge-1", "edge-1", None, "cannot be read (FileNotFoundError)", tip="2" * 40)
    assert "DEBUG   gitsync.writeback.fleet fleet: edge-1: FileNotFoundError: [Errno 2]" in out.getvalue()


@pytest.mark.parametrize(("name", "agent"), [("eu%2F1", "eu/1"), ("%0A", "%0A"), ("%FF", "%FF"), ("a", "a")])
def test_an_agents_name_is_its_refs_decoded_when_that_is_printable(store, name, agent):
    assert store.entry(b"3" * 40, name).agent == agent


class Signers:
    """Says each commit it is asked about verified or not, and records what it was asked."""

    def __init__(self, verified: bool) -> None:
        self.verified, self.asked = verified, []

    def verify(self, commit, agent, group):
        self.asked.append((commit.id, agent, group))
        return Verdict(self.verified, "" if self.verified else "no allowed key")


@pytest.mark.parametrize("verified", [True, False])
def test_a_heartbeats_status_commit_is_verified_too_when_its_tip_is(tmp_path, verified):
    signers = Signers(verified)
    store = Store(tmp_path / "fleet", signers=signers)
    tree = store.status_tree()
    status = store.commit(tree)
    beat = store.commit(tree, (status.id,), seconds=60)
    entry = store.entry(beat.id)
    assert entry.verified is verified
    assert entry.signature == Verdict(verified, "" if verified else "no allowed key")
    both = [(beat.id, "edge-1", "canary"), (status.id, "edge-1", "canary")]
    assert signers.asked == (both if verified else both[:1])
    signers.asked.clear()
    store.entry(status.id)  # no heartbeat: its tip alone
    assert signers.asked == [(status.id, "edge-1", "canary")]
    store.repo.close()


def test_a_status_file_is_parsed_once_per_blob_and_the_memo_is_bounded(tmp_path):
    store = Store(tmp_path / "fleet", max_refs=2)
    trees = [store.status_tree(f"edge-{n}") for n in range(5)]
    first = store.entry(store.commit(trees[0]).id, "edge-0")
    again = store.entry(store.commit(trees[0], seconds=5).id, "edge-0")  # another commit of the same blob
    assert again.verified and again.status is first.status and len(store.reader._statuses) == 1
    for n in (1, 2, 3):
        store.entry(store.commit(trees[n]).id, f"edge-{n}")
    assert len(store.reader._statuses) == 4  # twice max_status_refs: full
    store.entry(store.commit(trees[4]).id, "edge-4")
    assert list(store.reader._statuses) == [store.repo[trees[4].id][b"status.yaml"][1]]  # emptied, then one
    store.repo.close()


def test_a_ref_whose_name_is_not_utf8_is_ignored_and_named_readably():
    listed = {PREFIX + b"a": b"1" * 40, PREFIX + b"\xff\xfe": b"2" * 40}
    tips, ignored = choose_refs(listed, PREFIX, 5)
    assert list(tips) == [PREFIX + b"a"] and ignored.invalid == ("\ufffd\ufffd",)
