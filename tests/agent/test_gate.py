"""The groups' gate and liveness (gitsync.agent.gate): pure functions over status documents, table-driven."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from gitsync.agent.fleet_gate import FleetGate
from gitsync.agent.gate import (
    CLOCK_SKEW,
    DOWN_AFTER,
    GateMemory,
    GateVerdict,
    fleet_table,
    group_gate,
    holding,
    is_live,
    judge,
    remember,
    time_problem,
)
from gitsync.writeback.fleet import FleetRead
from gitsync.writeback.statusfile import FleetEntry, Verdict, status_from

NOW = datetime(2025, 6, 1, 12, 0, 0, tzinfo=UTC)
C = "c" * 40  # the commit gated
OLD = "0" * 40
HEARTBEAT = 60.0
SOAK = 300.0
COMMITTED = NOW - timedelta(hours=1)  # when the commit gated was committed


def ago(seconds: float, precise: bool = False) -> str:
    """A status time `seconds` before NOW: to the second (status times), or to the millisecond
    (``applied_at`` as gitsync writes it)."""
    moment = NOW - timedelta(seconds=seconds)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.000Z" if precise else "%Y-%m-%dT%H:%M:%SZ")


def agent(name: str, group: str = "canary", commit: str = C, result: str = "applied", *, applied: float = 600,
          seen: float = 10, checks: object = None, rolled_back: bool = False, written: float | None = None,
          signature: Verdict | None = None, **extra) -> FleetEntry:
    """A status as FleetReader returns it: first seen applied by this agent `applied` s ago, its ref last
    written `seen` s ago, its status commit `written` s ago (default: 30 s, or `seen` if older); two
    gateways, the first with `checks` (the second passed its 3 when `checks` is given)."""
    gateways: list[dict] = [{"url": f"http://10.0.0.{i}:9180", "status": "applied"} for i in (1, 2)]
    if checks is not None:
        gateways[0]["checks"], gateways[1]["checks"] = checks, {"passed": 3, "failed": []}
    if rolled_back:
        gateways[0]["rolled_back"] = True
    doc = {"agent": name, "group": group, "commit": commit, "result": result, "time": ago(30),
           "gateways": gateways, **extra}
    written = max(30, seen) if written is None else written
    entry = FleetEntry(name, name, status_from(doc), None, signature, NOW - timedelta(seconds=written),
                       NOW - timedelta(seconds=seen), "t" * 40)
    APPLIED[id(entry)] = NOW - timedelta(seconds=applied)
    return entry


def unreadable(name: str, why: str = "gateways: expected a list, got int") -> FleetEntry:
    return FleetEntry(name, name, None, why, None, NOW - timedelta(seconds=30), NOW - timedelta(seconds=10))


APPLIED: dict[int, datetime] = {}  # an entry → when this agent first saw it applied (set by `agent`)


def since(fleet) -> dict[str, datetime]:
    return {e.agent: APPLIED[id(e)] for e in fleet if id(e) in APPLIED}


UNSIGNED = Verdict(False, "not signed")
SIGNED = Verdict(True)


PASSED = {"passed": 3, "failed": []}
FAILED = {"passed": 2, "failed": ["orders-200 (routes/checks.yaml:4): got 502"]}

# (case, fleet, after_count, allowed, earliest: seconds from NOW or None, words in `why`)
CASES = [
    ("no canary ever wrote", [agent("m1", "main")], 1, False, None, ["no agent of it"]),
    ("one canary soaked", [agent("c1")], 1, True, -300, ["1 of 1"]),
    ("soaked, checks passed", [agent("c1", checks=PASSED)], 1, True, -300, []),
    ("still soaking", [agent("c1", applied=100)], 1, False, 200, ["0 of 1", "1 more soaking"]),
    ("exactly the soak", [agent("c1", applied=SOAK)], 1, True, 0, []),
    ("needs two, one soaked", [agent("c1"), agent("c2", applied=60)], 2, False, 240, ["1 of 2"]),
    ("needs two, two soaked", [agent("c1"), agent("c2", applied=400)], 2, True, -100, ["2 of 2"]),
    ("healed counts as applied", [agent("c1", result="healed")], 1, True, -300, []),
    ("canary on another commit", [agent("c1", commit=OLD)], 1, False, None, ["0 of 1"]),
    ("checks failed on one canary", [agent("c1"), agent("c2", checks=FAILED)], 1, False, None,
     ["failed on canary agent(s) c2"]),
    ("refused on one canary", [agent("c1"), agent("c2", result="failed")], 1, False, None,
     ["failed on canary agent(s) c2", "held back"]),
    ("a failure of another commit does not count", [agent("c1"), agent("c2", commit=OLD, result="failed")],
     1, True, -300, []),
    ("an unreadable status neither counts nor holds back", [unreadable("c1"), agent("c2")], 1, True, -300,
     []),
    ("only unreadable statuses", [unreadable("c1")], 1, False, None, ["no agent of it"]),
    ("a gateway rolled back fails", [agent("c1", rolled_back=True)], 1, False, None, ["failed on"]),
    ("on its way: neither counted nor failed", [agent("c1", result="soaking"), agent("c2")], 1, True, -300,
     []),
    ("only on its way", [agent("c1", result="canary")], 1, False, None, ["0 of 1"]),
    ("down canary does not count", [agent("c1", seen=3 * HEARTBEAT)], 1, False, None,
     ["down, not counted: c1 seen 3m ago", "only 0 live"]),
    ("one missed heartbeat is tolerated", [agent("c1", seen=DOWN_AFTER * HEARTBEAT - 1)], 1, True, -300, []),
    ("down after two", [agent("c1", seen=DOWN_AFTER * HEARTBEAT + 1)], 1, False, None, ["down"]),
    ("the heartbeat a status claims is not trusted", [agent("c1", seen=3 * HEARTBEAT, heartbeat=86400)], 1,
     False, None, ["down"]),
    ("never seen is down", [replace(agent("c1"), seen=None)], 1, False, None, ["c1 seen never"]),
    ("down canary's failure still holds back", [agent("c1"), agent("c2", result="failed", seen=3600)], 1,
     False, None, ["failed on canary agent(s) c2"]),
    ("a down one and a live one", [agent("c1", seen=3600), agent("c2")], 1, True, -300, []),
    ("other groups ignored", [agent("m1", "main"), agent("c1", "canary-eu")], 1, False, None,
     ["no agent of it"]),
    ("the times in the file are not trusted", [agent("c1", applied=0, applied_at="2020-01-01T00:00:00Z")], 1,
     False, SOAK, ["1 more soaking"]),
    ("written in the future", [agent("c1", written=-3600)], 1, False, None, ["c1 (written in the future)"]),
    ("seen in the future", [agent("c1", seen=-3600, written=30)], 1, False, None, ["written in the future"]),
    ("a little clock skew is tolerated", [agent("c1", written=-60, seen=-60)], 1, True, -300, []),
    ("written before the commit it reports", [agent("c1", written=2 * 3600)], 1, False, None,
     ["c1 (written before the commit it reports)"]),
    ("unsigned, when signatures are checked", [agent("c1", signature=UNSIGNED)], 1, False, None,
     ["c1 (unverified: not signed)"]),
    ("signed, when signatures are checked", [agent("c1", signature=SIGNED)], 1, True, -300, []),
    ("an unsigned failure does not hold back", [agent("c1", signature=SIGNED),
                                                agent("c2", result="failed", signature=UNSIGNED)], 1, True,
     -300, []),
]


@pytest.mark.parametrize(("case", "fleet", "count", "allowed", "earliest", "words"), CASES,
                         ids=[c[0] for c in CASES])
def test_group_gate(case, fleet, count, allowed, earliest, words):
    verdict = group_gate(fleet, C, "canary", count, SOAK, NOW, HEARTBEAT, since(fleet), COMMITTED)
    assert verdict.allowed is allowed, verdict.why
    assert verdict.earliest == (None if earliest is None else NOW + timedelta(seconds=earliest)), verdict.why
    for word in words:
        assert word in verdict.why


def test_no_after_group_is_allowed_at_once():
    verdict = group_gate([], C, None, 1, SOAK, NOW, HEARTBEAT)
    assert verdict.allowed and verdict.earliest == NOW


def test_the_soak_runs_on_this_agents_clock_from_when_it_first_saw_the_status(tmp_path):
    """What a main agent sees poll after poll while the canaries soak, and when one goes down: the
    gate's memory starts each soak when it first sees the status, whatever the file says."""
    class Reader:
        def __init__(self):
            self.fleet: list[FleetEntry] = []

        def read(self, *, only=None, first=()):
            return FleetRead(tuple(self.fleet))

    reader = Reader()
    gate = FleetGate(reader, "canary", 2, SOAK, HEARTBEAT)  # type: ignore[arg-type]
    reader.fleet = [replace(agent(n, applied_at="2000-01-01T00:00:00Z"), written=NOW - timedelta(seconds=5),
                            seen=NOW) for n in ("c1", "c2")]
    early = gate.verdict(C, COMMITTED, NOW)
    assert not early.allowed and early.earliest == NOW + timedelta(seconds=SOAK), early.why
    later = NOW + timedelta(seconds=SOAK)
    reader.fleet = [replace(e, seen=later) for e in reader.fleet]
    assert gate.verdict(C, COMMITTED, later).allowed
    # c2 stopped writing at NOW: by the end of the soak it is down, and one canary is not two.
    reader.fleet = [reader.fleet[0], replace(reader.fleet[1], seen=NOW)]
    verdict = gate.verdict(C, COMMITTED, later)
    assert not verdict.allowed and "c2 seen 5m ago" in verdict.why, verdict.why
    # Back, it soaks again from now: it had stopped counting.
    reader.fleet = [replace(e, seen=later) for e in reader.fleet]
    again = gate.verdict(C, COMMITTED, later)
    assert not again.allowed and again.earliest == later + timedelta(seconds=SOAK)


@pytest.mark.parametrize(("seen", "live"), [
    (0, True), (120, True), (121, False), (None, False), (-30, True),  # a writer's clock ahead: not down
])
def test_is_live(seen, live):
    entry = replace(agent("c1"), seen=None if seen is None else NOW - timedelta(seconds=seen))
    assert is_live(entry, NOW, HEARTBEAT) is live


def test_fleet_table_marks_down_agents_and_shows_groups_checks_and_trouble():
    fleet = [agent("c1", checks=PASSED), agent("c2", checks=FAILED, seen=3600), agent("m1", "main", OLD),
             unreadable("x1"), agent("u1", signature=UNSIGNED), agent("s1", signature=SIGNED)]
    lines = fleet_table(fleet, NOW, HEARTBEAT).splitlines()
    assert [line.split() for line in lines] == [
        ["AGENT", "COMMIT", "RESULT", "AGE", "GROUP", "CHECKS", "SEEN", "TRUST"],
        ["c1", C[:7], "applied", "30s", "canary", "6", "passed", "10s", "-"],  # over its two gateways
        ["c2", C[:7], "applied", "1h", "canary", "1", "failed", "1h", "(down)", "-"],
        ["m1", OLD[:7], "applied", "30s", "main", "-", "10s", "-"],
        ["x1", "-", "unreadable", "30s", "-", "-", "10s",
         *["unreadable", "status:", "gateways:", "expected", "a", "list,", "got", "int"]],
        ["u1", C[:7], "applied", "30s", "canary", "-", "10s", "unverified:", "not", "signed"],
        ["s1", C[:7], "applied", "30s", "canary", "-", "10s", "verified"]]
    assert lines[0].index("SEEN") == lines[1].index("10s")  # aligned


def test_fleet_table_shows_control_characters_escaped():
    entry = unreadable("evil\x1b[2J\nname", "bad\r\nline")
    text = fleet_table([entry], NOW, HEARTBEAT)
    assert len(text.splitlines()) == 2 and "\x1b" not in text and "\\x1b" in text


# ---------------------------------------------------------------------------------------------------------
# The edges of each rule, and the whole of what the gate says


def at(entry: FleetEntry, *, written: float | None = None, seen: float | None = None) -> FleetEntry:
    """`entry` with its commit times `written` / `seen` seconds after NOW (None: unknown)."""
    return replace(entry, written=None if written is None else NOW + timedelta(seconds=written),
                   seen=None if seen is None else NOW + timedelta(seconds=seen))


@pytest.mark.parametrize(("written", "seen", "problem"), [
    (-30, -10, None),
    (None, -10, "no commit time"),
    (-30, None, "no commit time"),
    (CLOCK_SKEW, -10, None),  # exactly the skew ahead: tolerated
    (CLOCK_SKEW + 0.001, -10, "written in the future"),
    (-30, CLOCK_SKEW, None),
    (-30, CLOCK_SKEW + 0.001, "written in the future"),
])
def test_a_status_is_believed_up_to_the_clock_skew_ahead(written, seen, problem):
    assert time_problem(at(agent("c1"), written=written, seen=seen), NOW, None) == problem


@pytest.mark.parametrize(("written", "problem"), [
    (-CLOCK_SKEW, None),  # written exactly the skew before the commit: tolerated
    (-CLOCK_SKEW - 0.001, "written before the commit it reports"),
    (0, None),
    (CLOCK_SKEW + 60, None),
])
def test_a_status_written_before_its_commit_is_not_believed(written, problem):
    committed = NOW - timedelta(seconds=600)
    entry = replace(agent("c1"), written=committed + timedelta(seconds=written), seen=NOW)
    assert time_problem(entry, NOW, committed) == problem
    assert time_problem(entry, NOW, None) is None


def test_judge_sorts_every_member_whatever_comes_before_it():
    """(An unreadable status has no group: it is nobody's member.)"""
    fleet = [agent("u1", signature=UNSIGNED), agent("f1", result="failed"), agent("d1", seen=3600),
             agent("c1"), agent("o1", commit=OLD), agent("t1", written=2 * 3600), unreadable("x1"),
             agent("c2"), agent("m1", "main")]
    seen = judge(fleet, C, "canary", NOW, HEARTBEAT, COMMITTED)
    assert [e.agent for e in seen.members] == ["u1", "f1", "d1", "c1", "o1", "t1", "c2"]
    assert [e.agent for e in seen.failed] == ["f1"]
    assert [e.agent for e in seen.counted] == ["c1", "c2"]
    assert [e.agent for e in seen.down] == ["d1"]
    assert [(e.agent, why) for e, why in seen.refused] == [
        ("u1", "unverified: not signed"), ("t1", "written before the commit it reports")]


def test_without_after_group_a_commit_applies_at_once():
    assert group_gate([agent("c1", result="failed")], C, None, 1, SOAK, NOW, HEARTBEAT) == \
        GateVerdict(True, "no after_group: a commit applies at once", NOW)
    assert group_gate([], C, "", 1, SOAK, NOW, HEARTBEAT).allowed


def test_what_the_gate_says_whole():
    failed = [agent("c1", result="failed"), agent("c2", checks=FAILED), agent("c3")]
    assert group_gate(failed, C, "canary", 1, SOAK, NOW, HEARTBEAT, since(failed), COMMITTED).why == \
        "ccccccc failed on canary agent(s) c1, c2: held back until a new commit"
    waiting = [agent("c1", applied=100), agent("c2", applied=400), agent("d1", seen=3600),
               agent("d2", seen=7200), agent("u1", signature=UNSIGNED), agent("t1", written=2 * 3600)]
    verdict = group_gate(waiting, C, "canary", 3, SOAK, NOW, HEARTBEAT, since(waiting), COMMITTED)
    assert verdict.why == (
        "waiting: 1 of 3 needed live agent(s) of canary have run ccccccc for 5m (1 more soaking); "
        "down, not counted: d1 seen 1h ago, d2 seen 2h ago; "
        "not counted: u1 (unverified: not signed), t1 (written before the commit it reports)")
    enough_live = [agent("c1", applied=100), agent("c2", applied=100)]
    assert group_gate(enough_live, C, "canary", 2, SOAK, NOW, HEARTBEAT, since(enough_live), COMMITTED).why \
        == "waiting: 0 of 2 needed live agent(s) of canary have run ccccccc for 5m (2 more soaking)"
    too_few = [agent("c1")]
    assert group_gate(too_few, C, "canary", 2, SOAK, NOW, HEARTBEAT, since(too_few), COMMITTED).why == (
        "waiting: 1 of 2 needed live agent(s) of canary have run ccccccc for 5m; "
        "only 1 live agent(s) in canary")


def test_an_agent_not_in_since_ran_it_from_now():
    fleet = [agent("c1"), agent("c2")]
    verdict = group_gate(fleet, C, "canary", 2, SOAK, NOW, HEARTBEAT, {"c1": NOW - timedelta(hours=1)},
                         COMMITTED)
    assert not verdict.allowed and verdict.earliest == NOW + timedelta(seconds=SOAK)
    assert verdict.why.endswith("(1 more soaking)")


def test_fleet_table_shows_what_is_unknown_as_such():
    no_commit = replace(agent("n1", commit="", group="canary"), written=None)
    no_group = FleetEntry("g1", "g1", status_from({"agent": "g1", "commit": C, "result": "applied",
                                                   "time": ago(30)}), None, None, NOW, NOW)
    lines = fleet_table([no_commit, no_group], NOW, HEARTBEAT).splitlines()
    assert lines[1].split() == ["n1", "-", "applied", "?", "canary", "-", "10s", "-"]
    assert lines[2].split()[:5] == ["g1", C[:7], "applied", "0s", "-"]


def test_fleet_table_keeps_printable_text_as_it_is():
    text = fleet_table([unreadable("a\\b'c\"d", "it's \\ fine")], NOW, HEARTBEAT)
    assert "a\\b'c\"d" in text and "it's \\ fine" in text


@pytest.mark.parametrize(("ahead", "problem"), [(120, None), (121, "written in the future")])
def test_the_clock_skew_tolerated_is_two_minutes(ahead, problem):
    assert time_problem(at(agent("c1"), written=ahead, seen=-10), NOW, None) == problem


# ---------------------------------------------------------------------------------------------------------
# What the gate remembers of its group (`remember`, `holding`): pure, over entries as the reader gives them


def test_a_verified_status_of_the_group_makes_a_member_and_records_a_failure_of_any_commit():
    memory = remember(GateMemory(), [agent("c1", signature=SIGNED), agent("c2", commit=OLD, result="failed"),
                                     agent("c3", checks=FAILED), agent("c4", result="canary")], "canary")
    assert memory.members == {"c1", "c2", "c3", "c4"}
    assert memory.failed == {OLD: {"c2"}, C: {"c3"}}  # failed, or its checks did; "canary" is not yet


def test_a_status_not_verified_changes_nothing_remembered():
    memory = GateMemory(frozenset({"c1"}), {OLD: frozenset({"c1"})})
    fleet = [agent("c1", "main", signature=UNSIGNED), agent("c2", result="failed", signature=UNSIGNED),
             unreadable("c1")]
    assert remember(memory, fleet, "canary") == memory


def test_a_verified_status_of_another_group_ends_a_membership_not_a_failure():
    memory = GateMemory(frozenset({"c1", "c2"}), {OLD: frozenset({"c1"})})
    after = remember(memory, [agent("c1", "main", result="failed")], "canary")
    assert after.members == {"c2"} and after.failed == {OLD: {"c1"}}  # its failure elsewhere is not ours


def test_a_status_that_names_no_commit_records_no_failure():
    assert remember(GateMemory(), [agent("c1", commit="", result="failed")], "canary").failed == {}


def test_status_signers_names_who_may_be_a_member():
    memory = GateMemory(frozenset({"c1", "c9"}))
    after = remember(memory, [agent("c1"), agent("c2"), agent("c3")], "canary", named={"c1", "c2"})
    assert after.members == {"c1", "c2"}  # c3 is not named, c9 no longer
    assert remember(memory, [agent("c3")], "canary", named=None).members == {"c1", "c9", "c3"}


@pytest.mark.parametrize(("commits", "kept"), [(50, 50), (51, 50), (49, 49)])
def test_the_failures_of_50_commits_are_remembered_the_latest(commits, kept):
    memory = GateMemory()
    names = [f"{n:040x}" for n in range(commits)]
    for name in names:
        memory = remember(memory, [agent("c1", commit=name, result="failed")], "canary")
    assert list(memory.failed) == names[-kept:]


def test_remembering_leaves_the_memory_it_was_given_as_it_was():
    memory = GateMemory(frozenset({"c1"}), {OLD: frozenset({"c1"})})
    remember(memory, [agent("c2", commit=OLD, result="failed")], "canary")
    assert memory == GateMemory(frozenset({"c1"}), {OLD: frozenset({"c1"})})


def test_members_whose_status_is_gone_or_not_verified_hold_the_gate_and_say_why():
    memory = GateMemory(frozenset({"c3", "c1", "c2", "c4"}))
    fleet = [agent("c1"), agent("c2", signature=UNSIGNED), unreadable("c3"), agent("x9", signature=UNSIGNED)]
    assert holding(memory, fleet) == [("c2", "unverified: not signed"),
                                      ("c3", "unreadable status: gateways: expected a list, got int"),
                                      ("c4", "its status ref is gone")]
    assert holding(GateMemory(), fleet) == []


def test_every_status_is_read_whatever_comes_before_it():
    fleet = [agent("c0", signature=UNSIGNED), unreadable("c9"), agent("m1", "main"),
             agent("c1", result="failed")]
    memory = remember(GateMemory(frozenset({"m1"})), fleet, "canary")
    assert memory.members == {"c1"} and memory.failed == {C: {"c1"}}


def test_status_signers_names_who_may_be_a_member_not_who_is_one():
    assert remember(GateMemory(), [agent("c1")], "canary", named={"c1", "c2"}).members == {"c1"}
