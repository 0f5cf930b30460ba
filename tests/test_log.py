from __future__ import annotations

import io
import json

from loguru import logger

from gitsync import log as gslog

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
    assert records[0]["record"]["message"] == "connecting with token ***"
    assert records[1]["record"]["extra"]["token"] == "***"
    assert "bad credentials ***" in records[2]["text"]
    assert CANARY not in out.getvalue()


def test_secret_with_json_escapes_is_scrubbed_in_json_mode():
    out = io.StringIO()
    gslog.setup(stream=out, json_lines=True)
    tricky = 'pa"ss\\word-99'
    gslog.register_secret(tricky)
    logger.info("value {}", tricky)
    text = out.getvalue()
    assert tricky not in text and json.dumps(tricky)[1:-1] not in text
    assert json.loads(out.getvalue())["record"]["message"] == "value ***"


def test_short_values_are_not_registered():
    gslog.register_secret("ab")
    assert gslog.redact("abc ab") == "abc ab"


def test_longest_secret_masked_whole():
    gslog.register_secret("token-1234")
    gslog.register_secret("token-1234-extended")
    assert gslog.redact("x token-1234-extended y") == "x *** y"
