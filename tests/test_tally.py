"""Events told once in a while (gitsync.tally): every event counted, one record per interval with the
count since the last one, named for the code that counted it, never lost nor doubled across threads."""

from __future__ import annotations

import io
import threading
from collections.abc import Iterator
from types import SimpleNamespace

import pytest

import gitsync.tally
from gitsync.tally import LOG_INTERVAL, Tally
from testkit.logs import captured_log


@pytest.fixture
def log() -> Iterator[io.StringIO]:
    with captured_log() as out:
        yield out


@pytest.fixture
def clock(monkeypatch) -> list[float]:
    """The tally's monotonic clock, set by the test."""
    now = [1000.0]
    monkeypatch.setattr(gitsync.tally, "time", SimpleNamespace(monotonic=lambda: now[0]))
    return now


def records(log: io.StringIO) -> list[str]:
    return log.getvalue().splitlines()


def said(line: str) -> str:
    """A record's level and words, without its time and the name of the code that logged it: the caller
    of `Tally.add`, never the tally itself (in a mutation run, mutmut's own wrapper is the caller)."""
    _day, _time, level, name, words = line.split(None, 4)
    assert name != "gitsync.tally", line
    return f"{level} {words}"


def test_a_kind_of_event_is_told_every_ten_seconds_at_most_by_default():
    assert LOG_INTERVAL == 10.0
    assert Tally("x").interval == 10.0 and Tally("x").level == "WARNING"


def test_the_first_event_is_told_at_once_and_the_next_once_the_interval_is_over(log, clock):
    tally = Tally("{} refused (the last from {}){}", interval=10.0)
    tally.add("10.0.0.1", ": one")
    assert said(records(log)[-1]) == "WARNING 1 refused (the last from 10.0.0.1): one"
    for n in range(4):
        clock[0] += 2.0  # 8 s after the record: not yet
        tally.add(f"10.0.0.{n + 2}")
    assert len(records(log)) == 1 and tally.count == 4
    clock[0] += 1.999  # 9.999 s
    tally.add("10.0.0.7")
    assert len(records(log)) == 1
    clock[0] += 0.001  # exactly 10 s: the five since the record, the last one named
    tally.add("10.0.0.8", "!")
    assert said(records(log)[-1]) == "WARNING 6 refused (the last from 10.0.0.8)!"
    assert tally.count == 0
    clock[0] += 9.0  # the interval runs from the last record
    tally.add("x")
    assert len(records(log)) == 2


def test_every_event_is_counted_told_or_not(clock):
    counted: list[None] = []
    tally = Tally("{} {} {}", interval=10.0, counted=lambda: counted.append(None))
    for _ in range(5):
        tally.add("c")
    assert len(counted) == 5


def test_the_record_has_the_tallys_level_and_is_named_for_the_code_that_counted(log, clock):
    Tally("{} gone ({}{})", "INFO").add("10.0.0.1")
    assert said(records(log)[-1]) == "INFO 1 gone (10.0.0.1)"


def test_a_tally_with_no_interval_tells_every_event(log, clock):
    tally = Tally("{} x {}{}", interval=0.0)
    for _ in range(3):
        tally.add("c")
    assert [said(line) for line in records(log)] == ["WARNING 1 x c"] * 3


def test_events_from_many_threads_are_each_told_once(log):
    tally = Tally("{} e {}{}", interval=0.0)
    counted: list[None] = []
    tally.counted = lambda: counted.append(None)

    def add() -> None:
        for _ in range(200):
            tally.add("c")

    threads = [threading.Thread(target=add) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    told = [int(said(line).split()[1]) for line in records(log)]
    assert sum(told) == 1600 == len(counted)


def test_the_first_event_is_told_whatever_the_clock_says(log, clock):
    clock[0] = 0.0  # a monotonic clock may start anywhere, at 0 too
    Tally("{} x {}{}").add("c")
    assert len(records(log)) == 1
