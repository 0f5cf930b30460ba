"""The gate at work (gitsync.agent.fleet_gate.FleetGate): a fleet that cannot be read holds the commit;
what is read goes to `on_read` and to the pure gate, with the soak's start remembered per agent; and
what it remembers of its group across reads and restarts.

The fleet a gate reads is given here as `FleetRead`s (the reader's own answer) built from real status
documents; the memory goes through the real ``gate.json`` in a state directory, and a restart is a new
`FleetGate` on the same file. The readers themselves are tested against real git servers in
tests/writeback and tests/e2e.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gitsync.agent.fleet_gate import (
    GATE_FILE,
    FleetGate,
    load_memory,
    memory_from_json,
    memory_json,
    own_heartbeat,
)
from gitsync.agent.gate import MAX_FAILED_COMMITS, GateMemory, GateVerdict, group_gate, remember
from gitsync.agent.state import StateError
from gitsync.settings import load
from gitsync.source.transport import Remote, SourceError
from gitsync.writeback.fleet import FleetRead, FleetReader
from gitsync.writeback.statusfile import FleetEntry, Verdict, status_from
from testkit.logs import captured_log
from testkit.processes import free_port
from testkit.profiles import examples
from tests.agent.test_gate import COMMITTED, HEARTBEAT, NOW, SIGNED, SOAK, UNSIGNED, C, agent

COMMITS = ["a" * 40, "b" * 40, "c" * 40]
AGENTS = ["canary-1", "canary-2"]


@pytest.fixture
def log():
    with captured_log() as out:
        yield out


def status(agent: str, commit: str, result: str, *, group: str = "canary", checks_failed: bool = False,
           signature: Verdict | None = SIGNED, at: datetime = NOW) -> FleetEntry:
    """One agent's status as the reader gives it: written and seen at `at`."""
    gateway = {"url": "http://10.0.0.1:9180", "status": "applied"}
    if checks_failed:
        gateway["checks"] = {"passed": 1, "failed": ["orders (checks.yaml:3): got 502"]}
    doc = {"agent": agent, "group": group, "commit": commit, "result": result, "time": at.isoformat(),
           "gateways": [gateway]}
    return FleetEntry(agent, agent, status_from(doc), None, signature, at, at, "f" * 40)


def unreadable(agent: str, at: datetime = NOW) -> FleetEntry:
    return FleetEntry(agent, agent, None, "not YAML: found a tab", None, at, at, "e" * 40)


class Fleet:
    """The statuses the gate reads (a `FleetSource`), by agent, or the error it raises; what was asked is
    recorded."""

    def __init__(self, entries: Iterable[FleetEntry] | Exception = ()) -> None:
        self.error = entries if isinstance(entries, Exception) else None
        self.entries: dict[str, FleetEntry] = {} if isinstance(entries, Exception) else \
            {e.agent: e for e in entries}
        self.asked: list[tuple[object, object]] = []

    def read(self, *, only=None, first=()) -> FleetRead:
        self.asked.append((only, first))
        if self.error is not None:
            raise self.error
        return FleetRead(tuple(e for name, e in sorted(self.entries.items()) if only is None or name in only))


def remembering(fleet: Fleet, state: Path, after_count: int = 1, named=None) -> FleetGate:
    return FleetGate(fleet, "canary", after_count, 0.0, HEARTBEAT, memory_file=state / GATE_FILE, named=named)


def test_a_verified_failure_holds_its_commit_whatever_that_agent_says_afterwards(tmp_path):
    """The issue's case: two canaries, after_count = 1; canary-1's signed `failed` on C holds C when its
    status later heals the commit before, is deleted, or gets an unsigned heartbeat on top; and after a
    restart. A new commit goes on as the group allows."""
    fleet = Fleet()
    c, before, after = COMMITS
    fleet.entries = {"canary-1": status("canary-1", c, "failed"),
                     "canary-2": status("canary-2", c, "applied")}
    first = remembering(fleet, tmp_path)
    assert not first.verdict(c, NOW, NOW).allowed
    for later in (status("canary-1", before, "healed"), status("canary-1", c, "applied"),
                  status("canary-1", c, "applied", signature=UNSIGNED)):
        fleet.entries["canary-1"] = later
        verdict = first.verdict(c, NOW, NOW)
        assert not verdict.allowed and "failed on canary agent(s) canary-1" in verdict.why, verdict.why
    del fleet.entries["canary-1"]
    assert not first.verdict(c, NOW, NOW).allowed
    again = remembering(fleet, tmp_path)  # a restart: the memory is read back from gate.json
    fleet.entries["canary-1"] = status("canary-1", c, "applied")
    verdict = again.verdict(c, NOW, NOW)
    assert not verdict.allowed and "held back until a new commit" in verdict.why
    fleet.entries = {name: status(name, after, "applied") for name in AGENTS}
    assert again.verdict(after, NOW, NOW).allowed
    saved = json.loads((tmp_path / GATE_FILE).read_text())
    assert saved == {"group": "canary", "members": AGENTS, "failed": {c: ["canary-1"]}}


@pytest.mark.parametrize("trouble", ["deleted", "unreadable", "unsigned on top", "rewritten by another key"])
def test_a_member_whose_status_goes_bad_holds_the_gate_until_it_is_verified_again(tmp_path, trouble):
    fleet = Fleet()
    c = COMMITS[0]
    fleet.entries = {name: status(name, c, "applied") for name in AGENTS}
    judge = remembering(fleet, tmp_path)
    assert judge.verdict(c, NOW, NOW).allowed
    if trouble == "deleted":
        del fleet.entries["canary-2"]
        why = "canary-2 (its status ref is gone)"
    elif trouble == "unreadable":
        fleet.entries["canary-2"] = unreadable("canary-2")
        why = "canary-2 (unreadable status: not YAML: found a tab)"
    else:
        signature = UNSIGNED if trouble == "unsigned on top" else Verdict(False, "signed by SHA256:x")
        fleet.entries["canary-2"] = status("canary-2", c, "applied", signature=signature)
        why = f"canary-2 (unverified: {signature.why})"
    verdict = judge.verdict(c, NOW, NOW)
    assert not verdict.allowed and why in verdict.why, verdict.why
    assert not remembering(fleet, tmp_path).verdict(c, NOW, NOW).allowed  # after a restart too
    fleet.entries["canary-2"] = status("canary-2", c, "applied")
    assert judge.verdict(c, NOW, NOW).allowed


def test_a_member_leaves_the_group_by_a_verified_status_of_another_or_by_status_signers(tmp_path):
    fleet = Fleet()
    c = COMMITS[0]
    fleet.entries = {name: status(name, c, "applied") for name in AGENTS}
    judge = remembering(fleet, tmp_path)
    assert judge.verdict(c, NOW, NOW).allowed
    fleet.entries["canary-2"] = status("canary-2", c, "applied", group="main")
    assert judge.verdict(c, NOW, NOW).allowed and judge.memory.members == {"canary-1"}
    # status_signers names the group's agents: those are read alone, and only they may be members
    fleet.entries["canary-3"] = status("canary-3", c, "applied")
    named = remembering(fleet, tmp_path, named={"canary-1"})
    del fleet.entries["canary-3"]
    assert named.verdict(c, NOW, NOW).allowed
    assert fleet.asked[-1] == (frozenset({"canary-1"}), frozenset({"canary-1"}))


def test_the_reader_is_asked_for_the_members_first(tmp_path):
    fleet = Fleet()
    fleet.entries = {name: status(name, COMMITS[0], "applied") for name in AGENTS}
    judge = remembering(fleet, tmp_path)
    judge.verdict(COMMITS[0], NOW, NOW)
    judge.verdict(COMMITS[0], NOW, NOW)
    assert fleet.asked == [(None, frozenset()), (None, frozenset(AGENTS))]


def test_an_unreadable_memory_stops_the_start_and_says_how_to_go_on(tmp_path):
    (tmp_path / GATE_FILE).write_text('{"group": "canary", "members": "canary-1"}')
    with pytest.raises(StateError, match=r"gate.json: the gate's memory is unreadable .* delete it"):
        remembering(Fleet(), tmp_path)
    (tmp_path / GATE_FILE).write_text(json.dumps({"group": "other", "members": ["x"], "failed": {}}))
    assert remembering(Fleet(), tmp_path).memory == GateMemory()  # another group's memory is not this one's


def test_the_failures_of_the_latest_commits_are_remembered():
    fleet = [status("canary-1", f"{n:040x}", "failed") for n in range(MAX_FAILED_COMMITS + 5)]
    memory = GateMemory()
    for entry in fleet:
        memory = remember(memory, [entry], "canary")
    assert list(memory.failed) == [e.status.commit for e in fleet[-MAX_FAILED_COMMITS:]]


# ---------------------------------------------------------------------------------------------------------
# The property: over random histories of statuses, a verified failure on C is never followed by a go-ahead
# on C, and a member whose status is gone, unreadable or unverified always holds the gate.

STEP = st.one_of(
    st.tuples(st.just("status"), st.sampled_from(AGENTS), st.sampled_from(COMMITS),
              st.sampled_from(["applied", "healed", "failed", "canary"]), st.booleans(), st.booleans()),
    st.tuples(st.just("delete"), st.sampled_from(AGENTS)),
    st.tuples(st.just("unsigned on top"), st.sampled_from(AGENTS)),
    st.tuples(st.just("unreadable"), st.sampled_from(AGENTS)),
    st.tuples(st.just("other group"), st.sampled_from(AGENTS)),
    st.tuples(st.just("restart"),),
    st.tuples(st.just("later"),),
)


@examples(1.5)
@given(steps=st.lists(STEP, min_size=1, max_size=30), after_count=st.integers(1, 2),
       signed=st.booleans())
def test_a_verified_failure_is_never_followed_by_a_go_ahead_on_its_commit(tmp_path_factory, steps,
                                                                          after_count, signed):
    state = tmp_path_factory.mktemp("gate")
    fleet = Fleet()
    judge = remembering(fleet, state, after_count)
    now = NOW
    failed: set[str] = set()  # commits a read showed failed by a verified status
    members: set[str] = set()  # agents a read showed verified in the group
    for step in steps:
        kind, *args = step
        if kind == "status":
            agent, commit, result, checks_failed, verified = args
            signature = (SIGNED if verified else UNSIGNED) if signed else None
            fleet.entries[agent] = status(agent, commit, result, checks_failed=checks_failed,
                                          signature=signature, at=now)
        elif kind == "delete":
            fleet.entries.pop(args[0], None)
        elif kind == "unsigned on top" and args[0] in fleet.entries and signed:
            entry = fleet.entries[args[0]]
            fleet.entries[args[0]] = FleetEntry(entry.ref, entry.agent, entry.status, None, UNSIGNED,
                                                entry.written, now, "d" * 40)
        elif kind == "unreadable":
            fleet.entries[args[0]] = unreadable(args[0], now)
        elif kind == "other group":
            fleet.entries[args[0]] = status(args[0], COMMITS[0], "applied", group="main",
                                            signature=SIGNED if signed else None, at=now)
        elif kind == "restart":
            judge = remembering(fleet, state, after_count)
        else:
            now += timedelta(seconds=HEARTBEAT)
        entries = fleet.read().entries
        for entry in entries:
            if entry.verified and entry.group == "canary":
                members.add(entry.agent)
                if entry.status.result == "failed" or (entry.status.checks() and entry.status.checks()[1]):
                    failed.add(entry.status.commit)
            elif entry.verified:
                members.discard(entry.agent)
        troubled = [m for m in members if m not in fleet.entries or not fleet.entries[m].verified]
        for commit in COMMITS:
            verdict = judge.verdict(commit, now - timedelta(hours=1), now)
            if commit in failed:
                assert not verdict.allowed, (step, verdict.why)
                assert "held back until a new commit" in verdict.why
            if troubled:
                assert not verdict.allowed, (step, troubled, verdict.why)


# ---------------------------------------------------------------------------------------------------------
# Reading, on_read, the soak, from_settings


def test_a_fleet_that_cannot_be_read_holds_the_commit():
    seen = []
    reader = Fleet(SourceError("fetch", "git://127.0.0.1:1/status: connection refused", unreachable=True))
    gate = FleetGate(reader, "canary", 1, 0.0, HEARTBEAT, on_read=seen.append)
    verdict = gate.verdict(C, COMMITTED, NOW)
    assert verdict == GateVerdict(False, "cannot read the fleet's status: git://127.0.0.1:1/status: "
                                         "connection refused", None)
    assert seen == [] and len(reader.asked) == 1


def test_a_real_reader_whose_remote_does_not_answer_holds_the_commit(tmp_path):
    """Nothing listens on the port: the reader's SourceError is the gate's reason to hold."""
    remote = Remote.of(f"git://127.0.0.1:{free_port()}/config.git", timeout=5)
    reader = FleetReader(remote, tmp_path / "fleet")
    verdict = FleetGate(reader, "canary", 1, 0.0, HEARTBEAT).verdict(C, COMMITTED, NOW)
    assert not verdict.allowed and verdict.earliest is None
    assert verdict.why.startswith("cannot read the fleet's status: "), verdict.why


def test_what_it_reads_goes_to_on_read_and_to_the_gate():
    fleet = [agent("c1"), agent("c2"), agent("m1", group="main")]
    seen = []
    gate = FleetGate(Fleet(fleet), "canary", 2, SOAK, HEARTBEAT, on_read=seen.append)
    verdict = gate.verdict(C, COMMITTED, NOW)
    assert seen == [tuple(fleet)]
    # First seen now: both soak from now on this agent's clock, whatever their files say.
    since = {"c1": NOW, "c2": NOW}
    assert verdict == group_gate(fleet, C, "canary", 2, SOAK, NOW, HEARTBEAT, since, COMMITTED)
    assert not verdict.allowed and verdict.earliest == NOW + timedelta(seconds=SOAK)
    later = NOW + timedelta(seconds=SOAK)
    gate.reader = Fleet([replace(e, seen=later) for e in fleet])
    assert gate.verdict(C, COMMITTED, later).allowed
    # Their refs not written since: down, forgotten; back, each soaks again from when it is seen anew.
    gate.reader = Fleet(fleet)
    assert not gate.verdict(C, COMMITTED, later).allowed
    gate.reader = Fleet([replace(e, seen=later) for e in fleet])
    assert gate.verdict(C, COMMITTED, later).earliest == later + timedelta(seconds=SOAK)


def test_the_soak_is_remembered_per_agent_and_commit():
    fleet = [agent("c1")]
    gate = FleetGate(Fleet(fleet), "canary", 1, SOAK, HEARTBEAT)
    gate.verdict(C, COMMITTED, NOW)
    later = NOW + timedelta(seconds=60)
    gate.reader = Fleet([replace(fleet[0], seen=later)])
    verdict = gate.verdict(C, COMMITTED, later)
    assert verdict.earliest == NOW + timedelta(seconds=SOAK)  # from the first time it was seen
    other = "d" * 40
    gate.reader = Fleet([replace(agent("c1", commit=other), seen=later)])
    assert gate.verdict(other, COMMITTED, later).earliest == later + timedelta(seconds=SOAK)


def test_a_status_written_before_the_commit_it_reports_does_not_count():
    """The commit's time goes to the judging: a status older than the commit (beyond the clock skew)
    cannot be about it, whatever it says."""
    fleet = [agent("c1", written=7200)]  # the commit is an hour old
    gate = FleetGate(Fleet(fleet), "canary", 1, 0.0, HEARTBEAT)
    verdict = gate.verdict(C, COMMITTED, NOW)
    assert not verdict.allowed
    assert verdict.why.endswith("not counted: c1 (written before the commit it reports)"), verdict.why
    assert FleetGate(Fleet(fleet), "canary", 1, 0.0, HEARTBEAT).verdict(
        C, None, NOW).allowed  # the commit's time unknown: nothing to compare with


def test_a_status_not_counted_starts_no_soak():
    """The soak starts when a status first counts: one refused (written before the commit) is not
    remembered, so it soaks from when it does count."""
    fleet = [agent("c1", written=7200)]
    gate = FleetGate(Fleet(fleet), "canary", 1, SOAK, HEARTBEAT)
    assert not gate.verdict(C, COMMITTED, NOW).allowed
    later = NOW + timedelta(seconds=60)
    gate.reader = Fleet([replace(fleet[0], seen=later)])
    assert gate.verdict(C, None, later).earliest == later + timedelta(seconds=SOAK)


def test_count_and_group_are_the_gates():
    fleet = [agent("c1"), agent("c2", group="other")]
    assert not FleetGate(Fleet(fleet), "canary", 2, 0.0, HEARTBEAT).verdict(
        C, COMMITTED, NOW).allowed
    assert FleetGate(Fleet(fleet), "canary", 1, 0.0, HEARTBEAT).verdict(
        C, COMMITTED, NOW).allowed
    assert FleetGate(Fleet(fleet), "other", 1, 0.0, HEARTBEAT).verdict(
        C, COMMITTED, NOW).allowed


def settings(tmp_path: Path, **more: str):
    config = tmp_path / "gitsync.toml"
    rollout = {"after_group": "canary", "after_count": "2", "soak": "5m", **more}
    config.write_text("[source]\nrepo = \"git://127.0.0.1:1/config.git\"\n[agent]\n"
                      f"state_dir = \"{tmp_path / 'state'}\"\ninterval = \"30s\"\njitter = \"5s\"\n"
                      "[writeback]\nstatus_heartbeat = \"20s\"\n[rollout]\n"
                      + "".join(f'{key} = "{value}"\n' if not value.isdigit() else f"{key} = {value}\n"
                                for key, value in rollout.items()))
    return load(config=config, env={})


def test_from_settings_takes_the_group_count_soak_and_own_heartbeat(tmp_path, log):
    gate = FleetGate.from_settings(settings(tmp_path))
    assert (gate.after_group, gate.after_count, gate.soak, gate.heartbeat) == ("canary", 2, 300.0, 35.0)
    assert gate.reader.remote.url == "git://127.0.0.1:1/config.git"
    assert gate.reader.work_dir == tmp_path / "state" / "fleet"
    assert "after_group = 'canary' without status_signers: any writer of refs/gitsync/status can open " \
           "(or hold) this agent's gate" in log.getvalue()


def test_from_settings_hands_what_it_reads_to_the_metrics(tmp_path, log):
    class Metrics:
        def __init__(self):
            self.fleets = []

        def set_fleet(self, fleet):
            self.fleets.append(fleet)

    metrics = Metrics()
    gate = FleetGate.from_settings(settings(tmp_path), metrics)
    gate.reader = Fleet([agent("c1")])
    gate.verdict(C, COMMITTED, NOW)
    assert [[e.agent for e in fleet] for fleet in metrics.fleets] == [["c1"]]
    quiet = FleetGate.from_settings(settings(tmp_path))
    quiet.reader = Fleet([agent("c1")])
    assert quiet.verdict(C, COMMITTED, NOW).why  # no metrics: nothing to tell, and no error


@pytest.mark.parametrize(("heartbeat", "interval", "jitter", "expected"), [
    ("20s", "30s", "5s", 35.0), ("60s", "30s", "5s", 60.0), ("35s", "30s", "5s", 35.0)])
def test_the_heartbeat_expected_of_others_is_what_this_agent_writes_at(tmp_path, heartbeat, interval, jitter,
                                                                      expected):
    config = tmp_path / "gitsync.toml"
    config.write_text(f'[agent]\ninterval = "{interval}"\njitter = "{jitter}"\n'
                      f'[writeback]\nstatus_heartbeat = "{heartbeat}"\n')
    assert own_heartbeat(load(config=config, env={})) == expected


# ---------------------------------------------------------------------------------------------------------
# gate.json: what is written, what is read back, what stops the start


def test_gate_json_holds_the_group_its_members_sorted_and_each_commits_failures_oldest_first():
    memory = GateMemory(frozenset({"canary-2", "canary-1"}), {COMMITS[1]: frozenset({"b", "a"}),
                                                                 COMMITS[0]: frozenset({"c"})})
    text = memory_json(memory, "canary")
    assert text == (b'{\n "group": "canary",\n "members": [\n  "canary-1",\n  "canary-2"\n ],\n "failed": {\n'
                    b'  "' + COMMITS[1].encode() + b'": [\n   "a",\n   "b"\n  ],\n'
                    b'  "' + COMMITS[0].encode() + b'": [\n   "c"\n  ]\n }\n}\n')
    read = memory_from_json(json.loads(text), "canary")
    assert read == memory and list(read.failed) == [COMMITS[1], COMMITS[0]]


@pytest.mark.parametrize("data", [
    [], "x", None,
    {"group": "canary", "failed": {}},  # no members
    {"group": "canary", "members": "canary-1", "failed": {}},
    {"group": "canary", "members": [], "failed": []},
    {"group": "canary", "members": []},
    {"group": "canary", "members": [1], "failed": {}},
    {"group": "canary", "members": ["a"], "failed": {"c": "a"}},
    {"group": "canary", "members": ["a"], "failed": {"c": ["a", None]}},
])
def test_a_memory_that_is_not_what_gate_json_holds_is_refused(data):
    with pytest.raises(ValueError):
        memory_from_json(data, "canary")


def test_another_groups_memory_is_none_of_this_ones():
    data = {"group": "main", "members": ["m1"], "failed": {COMMITS[0]: ["m1"]}}
    assert memory_from_json(data, "canary") == GateMemory()
    assert memory_from_json({**data, "group": "canary"}, "canary") == GateMemory(
        frozenset({"m1"}), {COMMITS[0]: frozenset({"m1"})})


def test_a_missing_memory_is_an_empty_one_and_an_unreadable_one_stops_the_start(tmp_path, log):
    assert load_memory(tmp_path / "none.json", "canary") == GateMemory()
    assert "remembers" not in log.getvalue()
    (tmp_path / "dir.json").mkdir()
    with pytest.raises(StateError, match=r"dir.json: cannot read the gate's memory: Is a directory$"):
        load_memory(tmp_path / "dir.json", "canary")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(StateError, match=r"bad.json: the gate's memory is unreadable \(Expecting"):
        load_memory(tmp_path / "bad.json", "canary")
    (tmp_path / "empty.json").write_bytes(memory_json(GateMemory(), "canary"))
    assert load_memory(tmp_path / "empty.json", "canary") == GateMemory()
    assert "remembers" not in log.getvalue()
    (tmp_path / "gate.json").write_bytes(memory_json(GateMemory(frozenset({"a", "b"}),
                                                                {COMMITS[0]: frozenset({"a"})}), "canary"))
    assert load_memory(tmp_path / "gate.json", "canary").members == {"a", "b"}
    assert "gate: remembers 2 member(s) of group canary and failures of 1 commit(s)" in log.getvalue()
    (tmp_path / "failed.json").write_bytes(memory_json(GateMemory(failed={COMMITS[0]: frozenset({"a"})}),
                                                       "canary"))
    assert load_memory(tmp_path / "failed.json", "canary").failed == {COMMITS[0]: {"a"}}
    assert "remembers 0 member(s) of group canary and failures of 1 commit(s)" in log.getvalue()


def test_what_the_memory_gains_and_loses_is_told_and_written_before_it_is_used(tmp_path, log):
    fleet = Fleet([status("canary-1", COMMITS[0], "applied"), status("canary-2", COMMITS[0], "failed")])
    judge = remembering(fleet, tmp_path)
    judge.verdict(COMMITS[0], NOW, NOW)
    text = log.getvalue()
    assert "gate: canary-1 is a member of group canary now" in text
    assert "gate: canary-2 is a member of group canary now" in text
    assert f"gate: canary-2 of group canary failed {COMMITS[0][:7]}: held back until a new commit" in text
    written = (tmp_path / GATE_FILE).stat().st_mtime_ns
    (tmp_path / GATE_FILE).write_bytes(b"not read again")  # nothing new: not written again
    judge.verdict(COMMITS[0], NOW, NOW)
    assert (tmp_path / GATE_FILE).read_bytes() == b"not read again"
    assert log.getvalue().count("is a member of group canary now") == 2 and written
    fleet.entries["canary-1"] = status("canary-1", COMMITS[0], "applied", group="main")
    judge.verdict(COMMITS[0], NOW, NOW)
    assert "gate: canary-1 is no longer a member of group canary" in log.getvalue()
    assert json.loads((tmp_path / GATE_FILE).read_text())["members"] == ["canary-2"]
    unsaved = FleetGate(Fleet([status("canary-1", COMMITS[0], "applied")]), "canary", 1, 0.0, HEARTBEAT)
    unsaved.verdict(COMMITS[0], NOW, NOW)  # no memory file: remembered in the object alone
    assert unsaved.memory.members == {"canary-1"}
