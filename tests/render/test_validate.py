"""`gitsync validate`'s schema errors for people: the bad value and the allowed ones, at the field's own
line, while the message stays the gateway's own words (tests/testing/test_golden.py holds those)."""

from __future__ import annotations

from pathlib import Path

from gitsync.schema import check_item
from testkit.processes import run_gitsync

BAD = """\
routes:
  - id: r1
    uri: /x
    methods: [GETT]
    upstream_id: u1
upstreams:
  - id: u1
    nodes:
      - host: 127.0.0.1
        port: "18081x"
        weight: 1
"""


def test_the_bad_value_and_the_allowed_ones_at_the_fields_own_line(tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text(BAD)
    result = run_gitsync("validate", "--dir", str(tmp_path))
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert ('bad.yaml:4:15: routes[r1].methods[0]: invalid configuration: property "methods" validation '
            'failed: failed to validate item 1: matches none of the enum values (value "GETT"; allowed: GET, '
            'POST, PUT, DELETE, PATCH, HEAD, OPTIONS, CONNECT, TRACE, PURGE)') in lines
    # The port's error at the port's line (10), not the nodes line (8), its value and what was expected.
    assert ('bad.yaml:10:9: upstreams[u1].nodes[0].port: invalid configuration: property "nodes" validation '
            'failed: object matches none of the required (failed to validate item 1: property "port" '
            'validation failed: wrong type: expected integer, got string: value "18081x")') in lines


def test_the_gateways_words_are_unchanged() -> None:
    """What the double answers is the issue's message alone: the explanation is a separate field."""
    [issue] = check_item("routes", {"id": "r1", "uri": "/x", "methods": ["GETT"], "upstream_id": "u"})
    assert issue.message == ('invalid configuration: property "methods" validation failed: failed to '
                             'validate item 1: matches none of the enum values')
    assert issue.explanation is not None and issue.explanation[0].startswith('value "GETT"; allowed: GET, ')


def test_a_value_that_may_be_a_secret_is_never_shown(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text("upstreams:\n  - id: u\n    nodes: {\"a:1\": 1}\n    tls:\n"
                                     "      client_cert: x\n      client_key: 123456789\n")
    (tmp_path / "m.yaml").write_text("routes:\n  - id: r\n    uri: /x\n    upstream_id: u\n"
                                     "    methods: [SuperSecretToken-1234]\n")
    result = run_gitsync("validate", "--dir", str(tmp_path))
    assert result.returncode == 1
    assert "123456789" not in result.stderr  # a key: its value is never quoted
    assert 'value "SuperSecretToken-1234"' in result.stderr  # a method is no secret: it is shown
