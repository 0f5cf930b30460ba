"""The groups' gate and liveness (gitsync.agent.gate): pure functions over status documents, table-driven."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gitsync.agent.gate import DOWN_AFTER, fleet_table, group_gate, is_live

NOW = datetime(2025, 6, 1, 12, 0, 0, tzinfo=UTC)
C = "c" * 40  # the commit gated
OLD = "0" * 40
HEARTBEAT = 60.0
SOAK = 300.0


def ago(seconds: float, precise: bool = False) -> str:
    """A status time `seconds` before NOW: to the second (status times), or to the millisecond
    (``applied_at`` as gitsync writes it)."""
    moment = NOW - timedelta(seconds=seconds)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.000Z" if precise else "%Y-%m-%dT%H:%M:%SZ")


def agent(name: str, group: str = "canary", commit: str = C, result: str = "applied", *, applied: float = 600,
          seen: float = 10, checks: object = None, heartbeat: float | None = None, rolled_back: bool = False,
          **extra) -> dict:
    """A status as FleetReader returns it: applied `applied` s ago, its ref last written `seen` s ago;
    two gateways, the first with `checks` (the second passed its 3 when `checks` is given)."""
    gateways: list[dict] = [{"url": f"http://10.0.0.{i}:9180", "status": "applied"} for i in (1, 2)]
    if checks is not None:
        gateways[0]["checks"], gateways[1]["checks"] = checks, {"passed": 3, "failed": []}
    if rolled_back:
        gateways[0]["rolled_back"] = True
    doc = {"agent": name, "group": group, "commit": commit, "result": result, "time": ago(min(applied, 30)),
           "seen": ago(seen), "gateways": gateways, **extra}
    if result in ("applied", "healed"):
        doc["applied_at"] = ago(applied, precise=True)
    if heartbeat is not None:
        doc["heartbeat"] = heartbeat
    return doc


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
    ("unreadable checks fail", [agent("c1", checks="garbage")], 1, False, None, ["failed on"]),
    ("a gateway rolled back fails", [agent("c1", rolled_back=True)], 1, False, None, ["failed on"]),
    ("on its way: neither counted nor failed", [agent("c1", result="soaking"), agent("c2")], 1, True, -300,
     []),
    ("only on its way", [agent("c1", result="canary")], 1, False, None, ["0 of 1"]),
    ("down canary does not count", [agent("c1", seen=3 * HEARTBEAT)], 1, False, None,
     ["down, not counted: c1 seen 3m ago", "only 0 live"]),
    ("one missed heartbeat is tolerated", [agent("c1", seen=DOWN_AFTER * HEARTBEAT - 1)], 1, True, -300, []),
    ("down after two", [agent("c1", seen=DOWN_AFTER * HEARTBEAT + 1)], 1, False, None, ["down"]),
    ("its own longer heartbeat keeps it live", [agent("c1", seen=3 * HEARTBEAT, heartbeat=300)], 1, True,
     -300, []),
    ("never seen is down", [{**agent("c1"), "seen": None}], 1, False, None, ["c1 seen never"]),
    ("down canary's failure still holds back", [agent("c1"), agent("c2", result="failed", seen=3600)], 1,
     False, None, ["failed on canary agent(s) c2"]),
    ("a down one and a live one", [agent("c1", seen=3600), agent("c2")], 1, True, -300, []),
    ("other groups ignored", [agent("m1", "main"), agent("c1", "canary-eu")], 1, False, None,
     ["no agent of it"]),
    # An older writer without applied_at: its status's time (30 s ago here, later than the apply) is used,
    # from the next second (it is written cut down to the second).
    ("older writer: soak from its time", [{**agent("c1"), "applied_at": None}], 1, False, 271, ["soaking"]),
    ("an applied_at to the second counts from the next", [{**agent("c1"), "applied_at": ago(SOAK)}], 1, False,
     1, ["0 of 1"]),
]


@pytest.mark.parametrize(("case", "fleet", "count", "allowed", "earliest", "words"), CASES,
                         ids=[c[0] for c in CASES])
def test_group_gate(case, fleet, count, allowed, earliest, words):
    verdict = group_gate(fleet, C, "canary", count, SOAK, NOW, HEARTBEAT)
    assert verdict.allowed is allowed, verdict.why
    assert verdict.earliest == (None if earliest is None else NOW + timedelta(seconds=earliest)), verdict.why
    for word in words:
        assert word in verdict.why


def test_no_after_group_is_allowed_at_once():
    verdict = group_gate([], C, None, 1, SOAK, NOW, HEARTBEAT)
    assert verdict.allowed and verdict.earliest == NOW


def test_the_verdict_changes_with_time_alone():
    """What a main agent sees poll after poll while the canaries soak, and when one goes down."""
    fleet = [agent("c1", applied=0, seen=0), agent("c2", applied=0, seen=0)]
    early = group_gate(fleet, C, "canary", 2, SOAK, NOW, HEARTBEAT)
    assert not early.allowed and early.earliest == NOW + timedelta(seconds=SOAK)
    later = NOW + timedelta(seconds=SOAK)
    beating = [{**d, "seen": later.strftime("%Y-%m-%dT%H:%M:%SZ")} for d in fleet]
    assert group_gate(beating, C, "canary", 2, SOAK, later, HEARTBEAT).allowed
    # c2 stopped writing at NOW: by the end of the soak it is down, and one canary is not two.
    one_down = [beating[0], fleet[1]]
    verdict = group_gate(one_down, C, "canary", 2, SOAK, later, HEARTBEAT)
    assert not verdict.allowed and "c2 seen 5m ago" in verdict.why


@pytest.mark.parametrize(("seen", "declared", "live"), [
    (0, None, True), (120, None, True), (121, None, False), (500, 300, True), (601, 300, False),
    (None, None, False), (-30, None, True),  # a writer's clock ahead of ours: not down
])
def test_is_live(seen, declared, live):
    doc = {"seen": None if seen is None else ago(seen)}
    if declared:
        doc["heartbeat"] = declared
    assert is_live(doc, NOW, HEARTBEAT) is live


def test_fleet_table_marks_down_agents_and_shows_groups_and_checks():
    fleet = [agent("c1", checks=PASSED), agent("c2", checks=FAILED, seen=3600), agent("m1", "main", OLD)]
    lines = fleet_table(fleet, NOW, HEARTBEAT).splitlines()
    assert [line.split() for line in lines] == [
        ["AGENT", "COMMIT", "RESULT", "AGE", "GROUP", "CHECKS", "SEEN"],
        ["c1", C[:7], "applied", "30s", "canary", "6", "passed", "10s"],  # over its two gateways
        ["c2", C[:7], "applied", "30s", "canary", "1", "failed", "1h", "(down)"],
        ["m1", OLD[:7], "applied", "30s", "main", "-", "10s"]]
    assert lines[0].index("SEEN") == lines[1].index("10s")  # aligned
