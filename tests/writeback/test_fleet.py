"""Reading the fleet (gitsync.writeback.fleet) against a real git daemon, with statuses written by real
publishers and an attacker's refs beside them: names that are no agent's, more refs than the reader
reads, a status of 64 MB of zeros; what a read costs when nothing moved and when one ref moved."""

from __future__ import annotations

import io
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from gitsync.source.transport import Remote
from gitsync.writeback.fleet import FleetReader, Ignored, choose_refs, is_agent_ref, parse_component
from gitsync.writeback.publisher import WriteBack, WriteBackOptions
from gitsync.writeback.remote import LOCAL_FLEET_PREFIX, open_work_repo
from gitsync.writeback.trust import StatusSigners
from gitsync.writeback.wire import GatewayStatus, StatusReport
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
