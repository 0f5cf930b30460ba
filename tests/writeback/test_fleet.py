"""Reading the fleet (gitsync.writeback.fleet) against a real git daemon, with statuses written by real
publishers and an attacker's refs beside them: names that are no agent's, more refs than the reader
reads, a status of 64 MB of zeros; what a read costs when nothing moved and when one ref moved."""

from __future__ import annotations

import io
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from gitsync.source.transport import Remote
from gitsync.writeback.fleet import FleetReader, Ignored, choose_refs, is_agent_ref
from gitsync.writeback.publisher import WriteBack, WriteBackOptions
from gitsync.writeback.remote import LOCAL_FLEET_PREFIX, open_work_repo
from gitsync.writeback.wire import GatewayStatus, StatusReport
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
