"""JSON log lines: one compact object per line with the documented fields, redacted."""

from __future__ import annotations

import io
import json
import logging
import threading
from datetime import UTC, datetime, timedelta

import pytest
from loguru import logger

from gitsync import log as gslog
from testkit.agents import ADMIN_KEY, config_files, repo_url
from testkit.processes import ROOT, run_gitsync

CANARY = "canary-51d0-7e2a-b9c4"


def _json_lines(**setup: object) -> io.StringIO:
    out = io.StringIO()
    gslog.setup(stream=out, json_lines=True, **setup)  # type: ignore[arg-type]
    return out


def _records(out: io.StringIO) -> list[dict]:
    lines = out.getvalue().splitlines()
    assert out.getvalue().endswith("\n") and all(lines), "one object per line, nothing between"
    return [json.loads(line) for line in lines]


def test_a_line_is_one_compact_object_with_the_documented_fields_in_order():
    out = _json_lines()
    before = datetime.now(UTC)
    logger.info("applied {} to {} gateway(s)", "0123abc", 2)
    records = _records(out)
    assert len(records) == 1
    record = records[0]
    assert list(record) == ["time", "level", "message", "logger"]
    assert record["level"] == "INFO" and record["message"] == "applied 0123abc to 2 gateway(s)"
    assert record["logger"] == __name__  # the module that logged
    # RFC 3339, UTC, milliseconds: 2026-12-02T08:15:03.127Z
    assert len(record["time"]) == 24 and record["time"].endswith("Z") and record["time"][10] == "T"
    stamp = datetime.fromisoformat(record["time"])
    assert stamp.tzinfo is not None and stamp.utcoffset() == timedelta(0)
    assert before - timedelta(seconds=1) <= stamp <= datetime.now(UTC) + timedelta(seconds=1)
    line = out.getvalue()
    assert ", " not in line and '": ' not in line  # compact separators
    assert line == json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n"
    assert len(line) < 200  # loguru's own serialisation of this record is about 1 KB


def test_context_fields_follow_the_logger_when_known_and_stay_out_of_human_lines():
    out = _json_lines()
    logger.info("no context yet")
    gslog.set_agent("gw-eu-1")
    logger.info("agent known")
    with gslog.context(commit="a" * 40, gateway="http://apisix:9180", unused=None):
        logger.warning("pushing")
    logger.info("after the push")
    first, agent_only, pushing, after = _records(out)
    assert set(first) == {"time", "level", "message", "logger"}
    assert agent_only["agent"] == "gw-eu-1" and "commit" not in agent_only
    assert list(pushing) == ["time", "level", "message", "logger", "agent", "commit", "gateway"]
    assert (pushing["commit"], pushing["gateway"]) == ("a" * 40, "http://apisix:9180")
    assert "unused" not in pushing
    assert set(after) == {"time", "level", "message", "logger", "agent"}

    human = io.StringIO()
    gslog.setup(stream=human)
    gslog.set_agent("gw-eu-1")
    with gslog.context(commit="a" * 40, gateway="http://apisix:9180"):
        logger.bind(attempt=2).warning("pushing")
    assert human.getvalue().rstrip("\n").endswith(" pushing attempt=2")  # as before: no context tail
    assert "gw-eu-1" not in human.getvalue()


def test_setup_forgets_the_agent_of_an_earlier_setup():
    gslog.set_agent("old-agent")
    out = _json_lines()
    logger.info("x")
    assert "agent" not in _records(out)[0]


def test_context_is_per_thread():
    out = _json_lines()
    entered, release = threading.Event(), threading.Event()

    def worker() -> None:
        with gslog.context(gateway="http://gw-2:9180"):
            entered.set()
            release.wait(5)
            logger.info("worker")

    thread = threading.Thread(target=worker)
    thread.start()
    entered.wait(5)
    logger.info("main")
    release.set()
    thread.join(5)
    by_message = {r["message"]: r for r in _records(out)}
    assert "gateway" not in by_message["main"]
    assert by_message["worker"]["gateway"] == "http://gw-2:9180"


def test_other_bound_fields_follow_and_cannot_hide_a_documented_one():
    out = _json_lines()
    logger.bind(attempt=3, ok=True, ratio=0.5, none=None, path=ROOT, level="x").info("m")
    record = _records(out)[0]
    assert record["level"] == "INFO" and record["extra_level"] == "x"
    assert (record["attempt"], record["ok"], record["ratio"], record["none"]) == (3, True, 0.5, None)
    assert record["path"] == str(ROOT)


def test_an_exception_is_one_field_of_the_same_line_redacted():
    out = _json_lines()
    gslog.register_secret(CANARY)
    try:
        raise RuntimeError(f"remote said:\n  bad credentials {CANARY}")
    except RuntimeError:
        logger.exception("fetch failed with {}", CANARY)
    (record,) = _records(out)
    assert record["level"] == "ERROR" and record["message"] == "fetch failed with ***"
    assert record["exception"].startswith("Traceback (most recent call last):\n")
    assert record["exception"].endswith("RuntimeError: remote said:\n  bad credentials ***")
    assert CANARY not in out.getvalue()


def test_a_library_record_names_its_logger():
    out = _json_lines()
    gslog.guard_process()
    logging.getLogger("dulwich.client").warning("Ignoring invalid value %r", "x")
    record = _records(out)[-1]
    assert (record["logger"], record["level"], record["message"]) == (
        "dulwich.client", "WARNING", "Ignoring invalid value 'x'")


def test_tricky_secrets_leave_every_line_valid_json_and_masked():
    values = ['pa"ss\\word-99', "tok/en-é-1234", "line one\nline two", "{\"k\": 1}-zz", "\\u2026-abcd"]
    out = _json_lines()
    for value in values:
        gslog.register_secret(value)
    for value in values:
        logger.bind(field=value).info("value {} and {}", value, json.dumps(value))
        logger.info("cut {}…", value[:6])
    records = _records(out)
    assert len(records) == 2 * len(values)
    text = "\n".join(r["message"] + str(r.get("field", "")) for r in records)
    for value in values:
        assert value not in text and json.dumps(value) not in text


@pytest.mark.slow
def test_sync_once_writes_json_lines_with_the_agent_commit_and_gateway(tmp_path, git_daemon, remote_repo,
                                                                        apisix):
    """The real command: every stderr line is one object; the push's lines carry all three contexts."""
    sha = remote_repo.commit(config_files(1), "v1")
    key = tmp_path / "key"
    key.write_text(ADMIN_KEY)
    result = run_gitsync("sync", "--once", "--log-json", "--agent-name", "edge-7", "--repo",
                         repo_url(git_daemon, remote_repo), "--gateway", apisix.url,
                         "--admin-key-file", str(key), "--state-dir", str(tmp_path / "state"))
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in result.stderr.splitlines()]
    assert records and all(r["agent"] == "edge-7" for r in records)
    pushed = [r for r in records if r.get("gateway") == apisix.url]
    assert pushed and all(r["commit"] == sha for r in pushed)
    assert any(r["logger"] == "gitsync.push.apply" and r["message"].startswith(f"gateway {apisix.url}: ")
               for r in pushed)
    assert ADMIN_KEY not in result.stderr
