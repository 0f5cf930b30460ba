"""How values are shown to people (gitsync.display)."""

from __future__ import annotations

from gitsync.display import format_age, short, short_sha


def test_a_commit_is_shown_by_its_first_seven_hex_digits() -> None:
    sha = "0123456789abcdef0123456789abcdef01234567"
    assert short_sha(sha) == "0123456" and short(sha) == "0123456"
    assert short(None) == short("") == "(none)"


def test_an_age_is_shown_in_its_largest_whole_unit() -> None:
    assert [format_age(s) for s in (-5, 0, 59, 60, 3599, 3600, 86399, 86400, 2.5 * 86400)] == \
        ["0s", "0s", "59s", "1m", "59m", "1h", "23h", "1d", "2d"]
