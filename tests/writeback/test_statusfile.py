"""Every reader of status files against random and hostile documents: aliases, deep nesting, huge
scalars, wrong types, NaN and infinity, times in every form. A reader either gets a `StatusFile` whose
every field has its type, or an "unreadable status: <reason>"; none raises, and none grows past a
few MB (measured with tracemalloc)."""

from __future__ import annotations

import math
import tracemalloc
from datetime import UTC, date, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st
from ruamel.yaml import YAML

from gitsync.agent.gate import fleet_table, group_gate
from gitsync.web import pages
from gitsync.web.links import Links
from gitsync.web.live import Fleet
from gitsync.writeback import statusfile
from gitsync.writeback.statusfile import (
    FleetEntry,
    GatewayEntry,
    StatusFile,
    Unreadable,
    Verdict,
    parse_moment,
    read_status,
)
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


# ---------------------------------------------------------------------------------------------------------
# Each bound alone, exactly at it and one past: the bounds overlap (a large file is also many nodes), so
# each is shown by a document that is within every other one and names the bound it meets.

BASE = dump_yaml(VALID)
WITHOUT_DURATION = dump_yaml({k: v for k, v in VALID.items() if k != "duration"})
WITHOUT_GATEWAYS = dump_yaml({k: v for k, v in VALID.items() if k != "gateways"})


def refused(text: str | bytes) -> str:
    read = read_status(text if isinstance(text, bytes) else text.encode())
    assert isinstance(read, Unreadable), read
    return read.reason


def readable(text: str | bytes) -> StatusFile:
    read = read_status(text if isinstance(text, bytes) else text.encode())
    assert isinstance(read, StatusFile), read
    return read


def padded(size: int) -> bytes:
    """The valid status, then comment lines (no value) up to exactly `size` bytes."""
    data = BASE.encode()
    filler = size - len(data)
    lines = [b"#" + b"x" * 99 + b"\n"] * (filler // 101)
    rest = filler - 101 * len(lines)
    if rest:
        lines.append(b"#" + b"x" * (rest - 1) if rest > 1 else b"\n")
    return data + b"".join(lines)


def test_the_byte_cap_is_256_kib():
    assert len(padded(256 * 1024)) == 256 * 1024
    assert readable(padded(256 * 1024)).agent == "edge-1"
    assert refused(padded(256 * 1024 + 1)) == "262145 bytes, more than the 262144 a status file may have"


def nested_list(depth: int) -> str:
    """The valid status with one more key whose value is `depth` lists, one in another."""
    return BASE + "extra: " + "[" * depth + "1" + "]" * depth + "\n"


def test_nesting_is_limited_to_8_levels():
    """The document is level 1: seven lists under it are 8 levels, eight are 9."""
    assert readable(nested_list(7))
    assert refused(nested_list(8)) == f"line {BASE.count(chr(10)) + 1}: nested deeper than 8 levels"
    assert refused("a: " + "{b: " * 8 + "1" + "}" * 8 + "\n") == "line 1: nested deeper than 8 levels"


def test_nesting_counts_down_as_collections_close():
    """Many collections side by side are as deep as one."""
    assert readable(BASE + "extra: [" + ", ".join(["[[[[[[1]]]]]]"] * 50) + "]\n")


def nodes(text: str) -> int:
    from ruamel.yaml import YAML
    from ruamel.yaml.events import NodeEvent

    return sum(isinstance(event, NodeEvent) for event in YAML(typ="safe").parse(text))


BASE_NODES = nodes(BASE)


def with_values(count: int) -> str:
    """The valid status with one more key holding a list: `count` values (nodes) in all."""
    extra = count - BASE_NODES - 2  # the key and the list are two
    return BASE + "extra: [" + ", ".join(["1"] * extra) + "]\n"


def test_at_most_10000_values():
    assert readable(with_values(10_000))
    assert refused(with_values(10_001)) == "more than 10000 values"


def test_a_value_is_at_most_16384_characters():
    status = readable(dump_yaml({**VALID, "subject": "s" * 16_384}))
    assert len(status.subject) == 16_384
    line = dump_yaml(VALID).split("\n").index("subject: s") + 1
    assert refused(dump_yaml({**VALID, "subject": "s" * 16_385})) == \
        f"line {line}: a value longer than 16384 characters"


def test_at_most_1000_gateways():
    def many(count: int) -> str:
        return WITHOUT_GATEWAYS + "gateways:\n" + "- {url: 'http://gw:9180', status: applied}\n" * count

    assert len(readable(many(1000)).gateways) == 1000
    assert refused(many(1001)) == "gateways: more than 1000"


@pytest.mark.parametrize("number", [2**53, -(2**53), float(2**53), 0, -1, 0.5])
def test_a_version_within_2_to_the_53_either_way_is_kept(number):
    doc = {**VALID, "gateways": [{"url": "u", "status": "applied",
                                  "versions": {"routes_conf_version": number}}]}
    assert readable(dump_yaml(doc)).gateways[0].versions == {"routes_conf_version": number}


@pytest.mark.parametrize("number", [2**53 + 1, -(2**53) - 1, 2**60, -(2**60), 1e300, -1e300])
def test_a_version_beyond_2_to_the_53_either_way_is_refused(number):
    doc = {**VALID, "gateways": [{"url": "u", "status": "applied",
                                  "versions": {"routes_conf_version": number}}]}
    assert refused(dump_yaml(doc)) == "gateways[0].versions.routes_conf_version: beyond ±2^53"


@pytest.mark.parametrize(("field", "value", "reason"), [
    ("duration", 2**53 + 1, "duration: beyond ±2^53"),
    ("duration", -0.5, "duration: expected a positive number, got -0.5"),
    ("duration", ".nan", "duration: expected a finite number, got nan"),
    ("duration", ".inf", "duration: expected a finite number, got inf"),
    ("duration", "-.inf", "duration: expected a finite number, got -inf"),
    ("duration", "true", "duration: expected a number, got bool"),
    ("duration", "'1'", "duration: expected a number, got str"),
    ("heartbeat", -1, "heartbeat: expected a positive number, got -1.0"),
    ("heartbeat", "[]", "heartbeat: expected a number, got list"),
])
def test_a_number_field_is_finite_positive_and_within_2_to_the_53(field, value, reason):
    assert refused(WITHOUT_DURATION + f"{field}: {value}\n") == reason


@pytest.mark.parametrize(("value", "expected"), [(2**53, float(2**53)), (0, 0.0), (1.5, 1.5)])
def test_a_number_field_at_its_bounds_is_kept(value, expected):
    assert readable(WITHOUT_DURATION + f"heartbeat: {value}\n").heartbeat == expected
    assert readable(WITHOUT_DURATION + f"duration: {value}\n").duration == expected


def test_without_a_duration_or_heartbeat():
    status = readable(dump_yaml({k: v for k, v in VALID.items() if k != "duration"}))
    assert status.duration == 0.0 and status.heartbeat is None


@pytest.mark.parametrize(("counts", "reason"), [
    ({"routes": -1}, "gateways[0].counts.routes: expected a count, got -1"),
    ({"routes": 2**53 + 1}, "gateways[0].counts.routes: beyond ±2^53"),
    ({"routes": 1.5}, "gateways[0].counts.routes: expected a whole number, got float"),
    ({"routes": True}, "gateways[0].counts.routes: expected a whole number, got bool"),
])
def test_a_count_is_a_whole_number_from_0_to_2_to_the_53(counts, reason):
    doc = {**VALID, "gateways": [{"url": "u", "status": "applied", "counts": counts}]}
    assert refused(dump_yaml(doc)) == reason


def test_counts_at_their_bounds_are_kept():
    counts = {"routes": 0, "upstreams": 2**53}
    doc = {**VALID, "gateways": [{"url": "u", "status": "applied", "counts": counts}]}
    assert readable(dump_yaml(doc)).gateways[0].counts == {"routes": 0, "upstreams": 2**53}


@pytest.mark.parametrize(("field", "limit"), [("agent", 1024), ("commit", 64), ("gitsync", 64), ("group", 64),
                                              ("result", 32)])
def test_a_text_field_is_at_most_its_limit(field, limit):
    too_long = dump_yaml({**VALID, field: "a" * (limit + 1)})
    assert refused(too_long) == f"{field}: longer than {limit} characters"
    if field in ("agent", "gitsync", "group"):
        assert getattr(readable(dump_yaml({**VALID, field: "a" * limit})),
                       {"gitsync": "version"}.get(field, field)) == "a" * limit


@pytest.mark.parametrize(("field", "limit"), [("url", 2048), ("status", 32), ("digest", 256)])
def test_a_gateway_text_field_is_at_most_its_limit(field, limit):
    gateway = {"url": "u", "status": "applied"}
    assert refused(dump_yaml({**VALID, "gateways": [{**gateway, field: "a" * (limit + 1)}]})) == \
        f"gateways[0].{field}: longer than {limit} characters"
    read = readable(dump_yaml({**VALID, "gateways": [{**gateway, field: "a" * limit}]}))
    assert getattr(read.gateways[0], field) == "a" * limit


@pytest.mark.parametrize(("text", "reason"), [
    (b"\xff\xfe", "not UTF-8 text (byte 0)"),
    (BASE.encode() + b"subject: \xc3\x28\n", f"not UTF-8 text (byte {len(BASE) + 9})"),
    ("- 1\n- 2\n", "expected a mapping, got list"),
    ("", "expected a mapping, got nothing"),
    ("just text", "expected a mapping, got str"),
    (BASE + "---\n" + BASE, "more than one YAML document"),
    ("a: &x 1\nb: *x\n", "line 1: anchors (&x) are not allowed"),
    ("a: *x\n", "line 1: aliases (*x) are not allowed"),
    ("a: 1\nb: !!python/object:os.system 1\n",  # the tag's first 40 characters
     "line 2: the tag 'tag:yaml.org,2002:python/object:os.syste' is not allowed"),
    ("a: !custom 1\n", "line 1: the tag '!custom' is not allowed"),
    ("a: [1\n", "not YAML: while parsing a flow sequence in \"<unicode string>\", line 1, column 4 did not "
     "find expected ',' or ']' in \"<unicode string>\", line 2, column 1"),
])
def test_what_is_not_a_status_document_says_why(text, reason):
    assert refused(text) == reason


def test_plain_tags_are_allowed():
    status = readable(BASE + "extra: !!str 1\nmore: !!int 2\nlist: !!seq [1]\nmap: !!map {a: 1}\n"
                      "f: !!float 1\nb: !!bool true\nn: !!null ~\nt: !!timestamp 2025-01-01\nq: ! 1\n")
    assert status.agent == "edge-1"


@pytest.mark.parametrize(("change", "reason"), [
    ({"commit": "A" * 40}, "commit: expected a commit SHA, got 'AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA'"),
    ({"commit": "a" * 39}, f"commit: expected a commit SHA, got {'a' * 39!r}"),
    ({"commit": "a" * 41}, f"commit: expected a commit SHA, got {'a' * 41!r}"),
    ({"result": "Applied"}, "result: expected a word, got 'Applied'"),
    ({"result": "a" * 33}, "result: longer than 32 characters"),
    ({"result": "applied\n"}, "result: expected a word, got 'applied\\n'"),
    ({"result": ""}, "result: expected a word, got ''"),
    ({"result": "failed\n"}, "result: expected a word, got 'failed\\n'"),  # not "failed" to the gate
    ({"commit": "a" * 40 + "\n"}, f"commit: expected a commit SHA, got {'a' * 40 + chr(10)!r}"),
    ({"commit": "a" * 64}, None),
    ({"commit": "a" * 63}, f"commit: expected a commit SHA, got {'a' * 63!r}"),
    ({"agent": 5}, "agent: expected text, got int"),
    ({"agent": None}, "agent: expected text, got nothing"),
    ({"gateways": {"a": 1}}, "gateways: expected a list, got dict"),
    ({"gateways": [5]}, "gateways[0]: expected a mapping, got int"),
    ({"gateways": [{"url": "u"}]}, "gateways[0].status: expected text, got nothing"),
    ({"gateways": [{"status": "applied"}]}, "gateways[0].url: expected text, got nothing"),
    ({"gateways": [{"url": "u", "status": "s", "checks": []}]},
     "gateways[0].checks: expected a mapping, got list"),
    ({"gateways": [{"url": "u", "status": "s", "checks": {"passed": -1}}]},
     "gateways[0].checks.passed: expected a count, got -1"),
    ({"gateways": [{"url": "u", "status": "s", "checks": {"failed": [1]}}]},
     "gateways[0].checks.failed: expected a list of text"),
    ({"gateways": [{"url": "u", "status": "s", "checks": {"failed": "x"}}]},
     "gateways[0].checks.failed: expected a list of text"),
    ({"gateways": [{"url": "u", "status": "s", "pruned": {"routes": "r1"}}]},
     "gateways[0].pruned.routes: expected a list of text"),
    ({"gateways": [{"url": "u", "status": "s", "versions": []}]},
     "gateways[0].versions: expected a mapping, got list"),
    ({"gateways": [{"url": "u", "status": "s", "versions": {"routes_conf_version": "3"}}]},
     "gateways[0].versions.routes_conf_version: expected a number, got str"),
    ({"gateways": [{"url": "u", "status": "s", "rolled_back": "yes"}]},
     "gateways[0].rolled_back: expected true or false, got str"),
    ({"gateways": [{"url": "u", "status": "s", "two_step": 1}]},
     "gateways[0].two_step: expected true or false, got int"),
    ({"gateways": [{"url": "u", "status": "s"}, {"url": "u", "status": 1}]},
     "gateways[1].status: expected text, got int"),
    ({"time": "yesterday"}, "time: expected a time (ISO 8601), got str 'yesterday'"),
    ({"time": None}, "time: expected a time (ISO 8601), got nothing 'None'"),
    ({"applied_at": 5}, "applied_at: expected a time (ISO 8601), got int '5'"),
    ({"subject": 5}, "subject: expected text, got int"),
])
def test_a_wrong_field_is_named_with_what_was_expected(change, reason):
    if reason is None:
        assert readable(dump_yaml({**VALID, **change}))
    else:
        assert refused(dump_yaml({**VALID, **change})) == reason


def test_each_field_reads_back():
    doc = {**VALID, "applied_at": "2025-12-31T23:58:00Z", "heartbeat": 30,
           "gateways": [{**VALID["gateways"][0], "error": "e", "rolled_back": True, "two_step": True,
                         "checks": {"passed": 2, "failed": ["c1"]}}, {"url": "u2", "status": "failed"}]}
    status = readable(dump_yaml(doc))
    assert (status.agent, status.commit, status.result, status.subject, status.version, status.group) == \
        ("edge-1", SHA, "applied", "s", "1.0", "canary")
    assert status.time == datetime(2025, 12, 31, 23, 59, tzinfo=UTC)
    assert status.applied_at == datetime(2025, 12, 31, 23, 58, tzinfo=UTC)
    assert (status.duration, status.heartbeat) == (0.5, 30.0)
    first, second = status.gateways
    assert (first.url, first.status, first.digest, first.error) == ("http://gw:9180", "applied", "d", "e")
    assert first.versions == {"routes_conf_version": 3} and first.counts == {"routes": 1}
    assert first.pruned == {"routes": ("r9",)}
    assert (first.checks_passed, first.checks_failed, first.rolled_back, first.two_step) == \
        (2, ("c1",), True, True)
    assert (second.url, second.status, second.digest, second.error, second.checks_passed) == \
        ("u2", "failed", None, None, None)
    assert (second.versions, second.counts, second.pruned, second.rolled_back, second.two_step) == \
        ({}, {}, {}, False, False)
    assert status.checks() == (2, 2)  # c1 failed, and the rollback counts as a failure


def test_optional_fields_default():
    status = readable(dump_yaml({"agent": "a", "result": "failed", "time": "2025-01-01T00:00:00Z"}))
    assert (status.commit, status.subject, status.version, status.group) == ("", "", "", None)
    assert (status.applied_at, status.gateways) == (None, ())
    assert status.checks() is None
    assert readable(dump_yaml({**VALID, "gateways": None})).gateways == ()
    checks_without_passed = {**VALID, "gateways": [{"url": "u", "status": "s", "checks": {}}]}
    assert readable(dump_yaml(checks_without_passed)).gateways[0].checks_passed == 0


@pytest.mark.parametrize(("gateways", "checks"), [
    ([{"url": "u", "status": "s"}], None),
    ([{"url": "u", "status": "s", "checks": {"passed": 3}}], (3, 0)),
    ([{"url": "u", "status": "s", "checks": {"passed": 3}}, {"url": "u", "status": "s", "rolled_back": True}],
     (3, 1)),
    ([{"url": "u", "status": "s", "checks": {"passed": 1, "failed": ["a", "b"]}},
      {"url": "u", "status": "s", "checks": {"passed": 4}}], (5, 2)),
])
def test_checks_add_up_over_the_gateways_that_ran_them(gateways, checks):
    assert readable(dump_yaml({**VALID, "gateways": gateways})).checks() == checks


@pytest.mark.parametrize(("value", "expected"), [
    ("2025-01-01T00:00:00Z", datetime(2025, 1, 1, tzinfo=UTC)),
    ("2025-01-01T00:00:00z", datetime(2025, 1, 1, tzinfo=UTC)),
    (" 2025-01-01T00:00:00Z ", datetime(2025, 1, 1, tzinfo=UTC)),
    ("2025-01-01T02:00:00+02:00", datetime(2025, 1, 1, tzinfo=UTC)),
    ("2025-01-01T00:00:00", datetime(2025, 1, 1, tzinfo=UTC)),  # naive: UTC
    ("1970-01-01T00:00:00Z", datetime(1970, 1, 1, tzinfo=UTC)),
    ("1969-12-31T23:59:59Z", None),
    ("1970-01-01T00:30:00+01:00", None),  # 1969 in UTC
    ("9999-12-31T23:59:59-01:00", None),  # beyond 9999 in UTC
    ("x" * 65, None),
    ("2025-01-01T00:00:00Z" + " " * 44, datetime(2025, 1, 1, tzinfo=UTC)),  # 64 characters
    ("2025-01-01T00:00:00Z" + " " * 45, None),
    (datetime(2025, 1, 1, 5), datetime(2025, 1, 1, 5, tzinfo=UTC)),
    (datetime(2025, 1, 1, 5, tzinfo=timezone(timedelta(hours=5))), datetime(2025, 1, 1, tzinfo=UTC)),
    (date(2025, 1, 2), datetime(2025, 1, 2, tzinfo=UTC)),
    (5, None),
    (None, None),
])
def test_a_moment_in_any_form_yaml_or_iso_8601_writes(value, expected):
    moment = parse_moment(value)
    assert moment == expected
    if moment is not None:
        assert moment.utcoffset() == timedelta(0)


def entry(status: StatusFile | None = None, unreadable: str | None = None,
          signature: Verdict | None = None) -> FleetEntry:
    return FleetEntry("edge-1", "edge-1", status, unreadable, signature, NOW, NOW, "t")


def test_a_fleet_entry_counts_only_when_readable_and_verified_as_asked():
    status = readable(BASE)
    assert entry(status).verified and entry(status).trouble is None and entry(status).group == "canary"
    assert entry(status, signature=Verdict(True)).verified
    assert entry(status, signature=Verdict(True)).trouble is None
    unverified = entry(status, signature=Verdict(False, "not signed"))
    assert not unverified.verified and unverified.trouble == "unverified: not signed"
    broken = entry(None, "more than 10000 values")
    assert not broken.verified and broken.trouble == "unreadable status: more than 10000 values"
    assert broken.group is None
    assert not entry(None, "x", Verdict(True)).verified


def test_nesting_is_counted_again_after_a_collection_closes():
    """Three levels down, one list closes: the next one opened is at the fourth level again."""
    assert readable(BASE + "x: [[[1], [[[[[1]]]]]]]\n")  # 8 levels
    assert refused(BASE + "x: [[[1], [[[[[[1]]]]]]]]\n") == \
        f"line {BASE.count(chr(10)) + 1}: nested deeper than 8 levels"


def _yaml_error(text: str) -> str:
    from ruamel.yaml import YAML

    try:
        YAML(typ="safe").load(text)
    except Exception as exc:
        return " ".join(str(exc).split())
    raise AssertionError("the YAML library took it")


@pytest.mark.parametrize("size", [199, 200, 201])
def test_what_the_yaml_library_refuses_is_its_first_200_characters(size):
    """A document whose events pass (a value is read as its tag says only when the document is
    built): the library's message on one line, cut at 200 characters with "…"."""
    shortest = len(_yaml_error("a: !!int x\n"))  # the message quotes the value: one character, one more
    text = f"a: !!int {'x' * (1 + size - shortest)}\n"
    message = _yaml_error(text)
    assert len(message) == size
    assert refused(text) == "not YAML: " + (message if size <= 200 else message[:200] + "…")


def test_a_duplicate_key_is_refused_when_the_document_is_built():
    assert refused("agent: a\nagent: b\n").startswith(
        'not YAML: while constructing a mapping in "<unicode string>", line 1, column 1 found duplicate key '
        '"agent" with value "b"')


@pytest.mark.parametrize(("gateway", "reason"), [
    ({"pruned": ["r1"]}, "gateways[0].pruned: expected a mapping, got list"),
    ({"counts": 3}, "gateways[0].counts: expected a mapping, got int"),
    ({"error": 5}, "gateways[0].error: expected text, got int"),
    ({"digest": 5}, "gateways[0].digest: expected text, got int"),
])
def test_a_wrong_gateway_field_is_named_with_its_gateway(gateway, reason):
    assert refused(dump_yaml({**VALID, "gateways": [{"url": "u", "status": "s", **gateway}]})) == reason


def test_a_time_that_is_no_time_is_quoted_up_to_60_characters():
    value = "t" * 100
    assert refused(dump_yaml({**VALID, "time": value})) == \
        f"time: expected a time (ISO 8601), got str {'t' * 60!r}"


@pytest.fixture
def tokyo():
    """This process's local time zone is Asia/Tokyo for the test (naive times must not be read in it)."""
    import os
    import time

    before = os.environ.get("TZ")
    os.environ["TZ"] = "Asia/Tokyo"
    time.tzset()
    yield
    if before is None:
        del os.environ["TZ"]
    else:
        os.environ["TZ"] = before
    time.tzset()


def test_a_naive_time_is_utc_whatever_the_machines_zone(tokyo):
    assert datetime(2025, 1, 1).astimezone().utcoffset() == timedelta(hours=9)  # the zone took
    assert parse_moment("2025-01-01T00:00:00") == datetime(2025, 1, 1, tzinfo=UTC)
    assert parse_moment("2025-01-01T09:00:00+09:00").utcoffset() == timedelta(0)
    assert readable(BASE).time.utcoffset() == timedelta(0)


# ---------------------------------------------------------------------------------------------------------
# The fast reader (issue 45): what it reads, it reads as the checked loader does; the rest it leaves to it


def _checked(text: str) -> object:
    """The document as the checked reader alone makes it (before the fast one), or its refusal."""
    try:
        statusfile._check_events(text)
        return ("ok", YAML(typ="safe").load(text))
    except statusfile.StatusError as exc:
        return ("refused", str(exc))
    except Exception as exc:
        return ("refused", f"not YAML: {statusfile._first_line(exc)}")


def _loaded(text: str) -> object:
    try:
        return ("ok", statusfile.load_document(text.encode()))
    except statusfile.StatusError as exc:
        return ("refused", str(exc))


def _same(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, dict) and isinstance(b, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


_PLAINS = st.sampled_from(["3", "-0", "0x1F", "0o17", "017", "1_000", "1e3", ".inf", ".NaN", "true", "True",
                           "yes", "no", "null", "~", "", "2026-01-01", "2026-12-08T00:20:04.175Z",
                           "2026-01-01 10:00", "applied", "<<", "=", "a: b", "- x", "'q'", "\"d\"", "&a x",
                           "*a", "!!str 5", "!!int x", "! 5", "{a: 1}", "[1, 2]", "? k", "%YAML 1.1", "---",
                           "|\n  block", "#c", "@x", "k:", "a: 1\na: 2"])
_SCALAR_VALUES = st.one_of(st.none(), st.booleans(), st.integers(-2**60, 2**60),
                           st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=20), _PLAINS)
_DOCS = st.recursive(_SCALAR_VALUES, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.one_of(st.text(max_size=8), _PLAINS), inner, max_size=4)),
    max_leaves=20)


@examples(0.3)
@given(_DOCS)
def test_the_fast_reader_reads_what_gitsync_writes_as_the_checked_loader_does(doc):
    text = dump_yaml(doc)
    assert _same(_loaded(text), _checked(text)), text


@examples(0.3)
@given(st.lists(st.one_of(_PLAINS, st.sampled_from(["\n", "  ", ": ", "- ", "a", "{", "}", "[", "]", ",",
                                                     "&x ", "*x", "!t ", "\t", "\"", "'", "#", "---\n",
                                                     "k: v\n"])), max_size=12))
def test_the_fast_reader_reads_or_refuses_any_text_as_the_checked_loader_does(parts):
    text = "".join(parts)
    assert _same(_loaded(text), _checked(text)), repr(text)


def test_the_fast_reader_leaves_what_it_does_not_read_to_the_checked_one():
    for text in ("a: &x 1\nb: *x\n", "a: !!str 5\n", "%YAML 1.1\n---\na: yes\n", "a: 1\na: 2\n", "1: x\n",
                 "<<: {a: 1}\n", "---\na\n---\nb\n", "[" * 10 + "]" * 10):
        with pytest.raises(statusfile._Unusual):
            statusfile._plain_document(text)
    read = statusfile._plain_document("a: [1, {b: 2026-01-01}]\nc: '3'\n")
    assert read == {"a": [1, {"b": date(2026, 1, 1)}], "c": "3"}


def test_a_status_as_gitsync_writes_it_is_read_by_the_fast_reader():
    from gitsync.writeback.wire import GatewayStatus, StatusReport, render_status, status_document

    report = StatusReport(agent="edge-1", commit="a" * 40, subject="routes: one more", result="applied",
                          gateways=[GatewayStatus(url="http://10.0.0.1:9180", status="applied",
                                                  versions={"routes": 3}, digest="d" * 64,
                                                  counts={"routes": 40}, pruned={"routes": ["r1"]},
                                                  checks={"passed": 2, "failed": ["x: 503"]})],
                          time=datetime.now(UTC), duration=0.2, group="canary", heartbeat=60.0,
                          applied_at=datetime.now(UTC))
    text = render_status(status_document(report)).decode()
    assert _same(("ok", statusfile._plain_document(text)), _checked(text))  # no fallback: read in one pass
