"""Every reader of status files against random and hostile documents: aliases, deep nesting, huge
scalars, wrong types, NaN and infinity, times in every form. A reader either gets a `StatusFile` whose
every field has its type, or an "unreadable status: <reason>"; none raises, and none grows past a
few MB (measured with tracemalloc)."""

from __future__ import annotations

import math
import tracemalloc
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gitsync.agent.gate import fleet_table, group_gate
from gitsync.web import pages
from gitsync.web.links import Links
from gitsync.web.live import Fleet
from gitsync.writeback.statusfile import FleetEntry, GatewayEntry, StatusFile, Unreadable, read_status
from gitsync.writeback.wire import dump_yaml, load_status, status_headline
from testkit.profiles import examples

NOW = datetime(2026, 1, 1, tzinfo=UTC)
SHA = "a" * 40
MEMORY = 8 << 20  # bytes a reader may allocate for one file, at its peak (as tracemalloc counts)

VALID = {"agent": "edge-1", "commit": SHA, "subject": "s", "result": "applied",
         "time": "2025-12-31T23:59:00Z", "gitsync": "1.0", "group": "canary", "duration": 0.5,
         "gateways": [{"url": "http://gw:9180", "status": "applied", "versions": {"routes_conf_version": 3},
                       "digest": "d", "counts": {"routes": 1}, "pruned": {"routes": ["r9"]},
                       "checks": {"passed": 2, "failed": []}}]}

TIMES = st.sampled_from([
    "2025-01-01", "2025-01-01T00:00:00Z", "2025-01-01 00:00:00", "2025-01-01T00:00:00.123456+05:30",
    "2001-12-14 21:59:43.10 -5", "2025-13-01", "0000-01-01", "9999-12-31T23:59:59-23:59", "1e300", ".nan",
    "yesterday", "'2020-01-01T00:00:00Z'", "!!timestamp 2025-01-01", "-.inf", "~", "[]", "{}"])
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=40),
    st.datetimes(timezones=st.just(UTC)), st.dates())
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(st.text(max_size=10), inner, max_size=4), max_leaves=20)
FIELDS = st.sampled_from([*VALID, "applied_at", "heartbeat"])
GATEWAY_FIELDS = st.sampled_from([*VALID["gateways"][0], "error", "rolled_back", "two_step"])


def alias_bomb(depth: int, width: int, key: str) -> bytes:
    lines = ["a0: &a0 [lol]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * width)}]" for i in range(1, depth)]
    return ("\n".join(lines) + f"\n{key}: *a{depth - 1}\n").encode()


def nested(depth: int, open_: str, close: str) -> bytes:
    return (open_ * depth + close * depth).encode()


HOSTILE = st.one_of(
    st.binary(max_size=300),
    st.builds(alias_bomb, st.integers(2, 12), st.integers(2, 12), st.sampled_from(["agent", "result", "x"])),
    st.builds(nested, st.integers(1, 5000), st.sampled_from(["[", "{a: "]), st.sampled_from(["]", "}"])),
    st.builds(lambda n: b"duration: " + b"9" * n + b"\n", st.integers(1, 300_000)),
    st.builds(lambda n: b"subject: " + b"x" * n + b"\n", st.integers(1, 300_000)),
    st.builds(lambda t: f"agent: a\ncommit: {SHA}\nresult: applied\ntime: {t}\n".encode(), TIMES),
    st.builds(lambda n: b"gateways: [" + b"{}, " * n + b"]\n", st.integers(0, 30_000)),
)


def mutated(doc: dict, field: str, value: object, gateway_field: str | None) -> bytes:
    doc = {**doc, "gateways": [dict(g) for g in doc["gateways"]]}
    if gateway_field is None:
        doc[field] = value
    else:
        doc["gateways"][0][gateway_field] = value
    try:
        return dump_yaml(doc).encode()
    except Exception:  # a value the YAML writer refuses: the document as text, not YAML
        return repr(doc).encode()


MUTATED = st.builds(mutated, st.just(VALID), FIELDS, VALUES, st.none() | GATEWAY_FIELDS)


def assert_typed(status: StatusFile) -> None:
    assert isinstance(status.agent, str) and isinstance(status.result, str) and isinstance(status.commit, str)
    assert isinstance(status.time, datetime) and status.time.tzinfo is not None
    assert math.isfinite(status.duration) and (status.heartbeat is None or math.isfinite(status.heartbeat))
    for gateway in status.gateways:
        assert isinstance(gateway, GatewayEntry) and isinstance(gateway.url, str)
        assert all(isinstance(v, int | float) and math.isfinite(v) for v in gateway.versions.values())
        assert all(isinstance(v, int) and v >= 0 for v in gateway.counts.values())
        assert gateway.checks_passed is None or gateway.checks_passed >= 0
        assert all(isinstance(f, str) for f in gateway.checks_failed)


def every_reader(data: bytes) -> None:
    """What the gate, `status --fleet`, `/fleet` and the writer make of one status file."""
    read = read_status(data)
    assert isinstance(read, StatusFile | Unreadable)
    if isinstance(read, StatusFile):
        assert_typed(read)
        entry = FleetEntry("edge-1", read.agent, read, None, None, NOW - timedelta(seconds=5), NOW, "t")
    else:
        assert read.reason and len(read.reason) < 400
        entry = FleetEntry("edge-1", "edge-1", None, read.reason, None, NOW, NOW, "t")
    doc = load_status(data)
    assert (doc is None) == isinstance(read, Unreadable)
    if doc is not None:
        assert status_headline(doc).startswith("gitsync(")
    assert "AGENT" in fleet_table([entry], NOW, 60.0)
    assert not group_gate([entry], SHA, "canary", 1, 0.0, NOW, 60.0, {}, NOW - timedelta(hours=1)).allowed \
        or entry.verified
    pages.fleet((Fleet((entry,), None, NOW.timestamp()),), {None: SHA}, "refs/gitsync/status", Links(None),
                NOW.timestamp())


def within_memory(data: bytes) -> None:
    tracemalloc.start()
    try:
        every_reader(data)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < MEMORY + 2 * len(data), peak


@pytest.mark.slow
@examples(0.15)
@given(HOSTILE)
def test_hostile_documents(data):
    within_memory(data)


@examples(0.2)
@given(MUTATED)
def test_valid_documents_with_one_field_replaced(data):
    every_reader(data)


def test_the_billion_laughs_of_the_issue_is_refused_at_its_first_anchor():
    bomb = alias_bomb(9, 9, "agent")
    assert read_status(bomb) == Unreadable("line 1: anchors (&a0) are not allowed")
    within_memory(bomb)


def test_a_valid_status_reads_back_typed():
    status = read_status(dump_yaml(VALID).encode())
    assert isinstance(status, StatusFile) and status.checks() == (2, 0) and status.group == "canary"
