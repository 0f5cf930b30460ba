from __future__ import annotations

import io
import json
import subprocess
import sys

from loguru import logger

from gitsync import log as gslog
from testkit.processes import gitsync_env

CANARY = "canary-7f3a9e1b2c4d"


def _emit_everywhere() -> None:
    logger.info("connecting with token {}", CANARY)
    logger.bind(token=CANARY).warning("bound extra field")
    try:
        raise RuntimeError(f"remote said: bad credentials {CANARY}")
    except RuntimeError:
        logger.exception("fetch failed")


def test_canary_is_scrubbed_from_human_lines():
    out = io.StringIO()
    gslog.setup(stream=out)
    gslog.register_secret(CANARY)
    _emit_everywhere()
    text = out.getvalue()
    assert "connecting with token ***" in text
    assert "token=***" in text
    assert "RuntimeError: remote said: bad credentials ***" in text
    assert CANARY not in text


def test_canary_is_scrubbed_from_json_lines():
    out = io.StringIO()
    gslog.setup(stream=out, json_lines=True)
    gslog.register_secret(CANARY)
    _emit_everywhere()
    lines = out.getvalue().splitlines()
    assert len(lines) == 3
    records = [json.loads(line) for line in lines]
    assert records[0]["message"] == "connecting with token ***"
    assert records[1]["token"] == "***"
    assert "bad credentials ***" in records[2]["exception"]
    assert CANARY not in out.getvalue()


def test_secret_with_json_escapes_is_scrubbed_in_json_mode():
    out = io.StringIO()
    gslog.setup(stream=out, json_lines=True)
    tricky = 'pa"ss\\word-99'
    gslog.register_secret(tricky)
    logger.info("value {}", tricky)
    text = out.getvalue()
    assert tricky not in text and json.dumps(tricky)[1:-1] not in text
    assert json.loads(out.getvalue())["message"] == "value ***"


def test_short_values_are_not_registered():
    gslog.register_secret("ab")
    assert gslog.redact("abc ab") == "abc ab"


def test_longest_secret_masked_whole():
    gslog.register_secret("token-1234")
    gslog.register_secret("token-1234-extended")
    assert gslog.redact("x token-1234-extended y") == "x *** y"


GUARDED = f"""
import logging, threading
from gitsync import log
log.setup()
log.guard_process()
log.register_secret({CANARY!r})
logging.getLogger("dulwich.client").warning(
    "Ignoring invalid http.extraHeader value %r (missing ': ' separator)", b"Authorization:Bearer {CANARY}")
logging.getLogger("apscheduler.executors.default").info("not shown: below WARNING {CANARY}")
def job():
    raise RuntimeError("job failed with {CANARY}")
thread = threading.Thread(target=job, name="sync-worker")
thread.start()
thread.join()
raise ValueError("uncaught: {CANARY}")
"""


def test_library_logs_and_uncaught_exceptions_are_scrubbed():
    """Python itself prints these on stderr: the guard routes them through the redactor."""
    result = subprocess.run([sys.executable, "-c", GUARDED], capture_output=True, text=True, timeout=60,
                            env=gitsync_env())
    assert result.returncode == 1
    assert CANARY not in result.stderr
    assert "WARNING dulwich.client Ignoring invalid http.extraHeader value b'Authorization:Bearer ***'" \
        in result.stderr
    assert "not shown" not in result.stderr
    assert "CRITICAL gitsync.log uncaught exception in thread sync-worker" in result.stderr
    assert "RuntimeError: job failed with ***" in result.stderr
    assert "CRITICAL gitsync.log uncaught exception" in result.stderr
    assert result.stderr.rstrip().endswith("ValueError: uncaught: ***")


def test_cjson_spelling_of_a_secret_is_scrubbed_in_both_log_modes():
    """APISIX's cjson writes '/' as '\\/': a gateway answer quoted as it came is still masked."""
    secret = "tok/en-é-1234"
    gslog.register_secret(secret)
    escaped = secret.replace("/", "\\/")
    assert gslog.redact(f'answer {{"message":"{escaped}"}}') == 'answer {"message":"***"}'
    for json_lines in (False, True):
        out = io.StringIO()
        gslog.setup(stream=out, json_lines=json_lines)
        logger.warning("gateway said {}", escaped)
        assert "tok" not in out.getvalue() and "gateway said ***" in out.getvalue()


def test_every_spelling_of_a_secret_is_masked():
    """The spellings a message may give a value: Lua's %q (a line break as backslash and
    newline), JSON with and without \\u escapes, cjson's \\/, Python's repr, URL encoding, each line
    of a multi-line value, and a JSON log line of any of them."""
    from urllib.parse import quote, quote_plus

    from gitsync.problems import lua_quote

    value = 'first "line"\nsecond\\line/é+&'
    gslog.register_secret(value)
    spelled = [value, lua_quote(value), json.dumps(value), json.dumps(value, ensure_ascii=False),
               json.dumps(value).replace("/", "\\/"), repr(value), repr([value]), quote(value, safe=""),
               quote_plus(value), json.dumps(lua_quote(value)), "first \"line\"", "second\\line/é+&"]
    for text in spelled:
        masked = gslog.redact(f"before {text} after")
        assert "first" not in masked and "second" not in masked, (text, masked)


def test_a_secret_cut_short_is_masked_on_either_side_of_the_ellipsis():
    value = "tok-0123456789-abcdef"
    gslog.register_secret(value)
    assert gslog.redact(f"answered: password {value[:9]}…") == "answered: password ***…"
    assert gslog.redact(f"…{value[-8:]} was refused") == "…*** was refused"
    assert gslog.redact(f'{{"message": "{value[:12]}..."}}') == '{"message": "***..."}'
    assert gslog.clip("x" * 20 + " " + value, 25) == "x" * 20 + " ***"  # redacted first, then cut
    # Not a cut: an ordinary word that happens to start the value, at the end of a line, stays.
    assert gslog.redact("agent tok-0\n") == "agent tok-0\n"


def test_a_short_value_is_masked_only_as_a_whole_quoted_value():
    gslog.register_secret("x#y")
    assert gslog.redact('with "x#y" and \'x#y\' and \\"x#y\\"') == 'with "***" and \'***\' and \\"***\\"'
    assert gslog.redact("x#yz, ax#y, x#y") == "x#yz, ax#y, x#y"


def test_a_secret_is_masked_as_a_whole_word_never_half_of_one():
    """A secret inside a longer word takes the word with it: no `***er than 16 characters`, and never a
    secret let through because something was written against it."""
    gslog.register_secret("short")
    gslog.register_secret("Tok3n-of-the-gateway")
    assert gslog.redact("the key must be shorter than 16 characters") == \
        "the key must be *** than 16 characters"
    assert gslog.redact("key=short; (short) 'short'") == "key=***; (***) '***'"
    assert gslog.redact("prefixTok3n-of-the-gatewaysuffix next") == "*** next"
    assert gslog.redact("Bearer Tok3n-of-the-gateway.") == "Bearer ***."


def test_whole_word_masking_in_log_lines_exceptions_and_notes(capsys):
    """The rule holds where secrets are met: a log line, an exception's text in it, a note's text."""
    from datetime import UTC, datetime

    from gitsync.writeback.notes import render_section
    from gitsync.writeback.wire import FailureNote

    secret = "hunter2-admin-key"
    gslog.register_secret(secret)
    gslog.setup(stream=sys.stderr)
    try:
        raise RuntimeError(f"gateway said: key {secret}x is invalid (expected {secret})")
    except RuntimeError:
        logger.opt(exception=True).error("push failed for {}", secret + "s")
    logged = capsys.readouterr().err
    assert secret not in logged and "key *** is invalid (expected ***)" in logged
    assert "push failed for ***" in logged
    note = render_section(FailureNote("agent-1", "c0ffee", datetime.now(UTC), "push",
                                      (f"routes[r1]: the gateway refused {secret}ed keys like {secret}",)),
                          4096)
    assert secret not in note and "the gateway refused *** keys like ***" in note
