"""How values are written: durations, sizes, shares and secret field names (gitsync.notation)."""

from __future__ import annotations

import pytest

from gitsync.notation import parse_duration, parse_percent, parse_size, secret_field_problem


def test_durations_in_their_units():
    assert parse_duration("1h") == 3600 and parse_duration("2d") == 172800
    assert parse_duration("250ms") == 0.25 and parse_duration(" 5m ") == 300 and parse_duration(7) == 7.0
    for bad in ("soon", "5 weeks", True, -1):
        with pytest.raises(ValueError):
            parse_duration(bad)


def test_sizes_in_binary_and_decimal_units():
    assert parse_size("9MiB") == 9 * 1024**2 and parse_size("2KB") == 2000 and parse_size(512) == 512
    for bad in ("big", "1.5MiB", False):
        with pytest.raises(ValueError):
            parse_size(bad)


def test_shares_as_percentages_or_fractions():
    assert parse_percent("25%") == 0.25 and parse_percent(0.25) == 0.25 and parse_percent(25) == 0.25
    for bad in ("150%", "a lot", True):
        with pytest.raises(ValueError):
            parse_percent(bad)


def test_a_secret_field_is_a_name_and_dotted_steps():
    assert secret_field_problem("my-plugin.conf.token") is None
    assert secret_field_problem("upstreams.discovery_args.token") is None
    assert "is not PLUGIN.PATH or KIND.PATH" in str(secret_field_problem("no_dot"))
    assert "is not PLUGIN.PATH or KIND.PATH" in str(secret_field_problem("a..b"))
    assert "got int" in str(secret_field_problem(1))
