"""The gate at work (gitsync.agent.fleet_gate.FleetGate): a fleet that cannot be read holds the commit;
what is read goes to `on_read` and to the pure gate, with the soak's start remembered per agent."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest

from gitsync.agent.fleet_gate import FleetGate, own_heartbeat
from gitsync.agent.gate import GateVerdict, group_gate
from gitsync.settings import load
from gitsync.source.transport import Remote, SourceError
from gitsync.writeback.fleet import FleetReader
from testkit.logs import captured_log
from testkit.processes import free_port
from tests.agent.test_gate import COMMITTED, HEARTBEAT, NOW, SOAK, C, agent


@pytest.fixture
def log():
    with captured_log() as out:
        yield out



class Reader:
    """A fleet reader that returns what it is given, or raises it."""

    def __init__(self, fleet=()):
        self.fleet = fleet
        self.reads = 0

    def read(self):
        self.reads += 1
        if isinstance(self.fleet, Exception):
            raise self.fleet
        return list(self.fleet)


def test_a_fleet_that_cannot_be_read_holds_the_commit():
    seen = []
    reader = Reader(SourceError("fetch", "git://127.0.0.1:1/status: connection refused", unreachable=True))
    gate = FleetGate(reader, "canary", 1, 0.0, HEARTBEAT, on_read=seen.append)  # type: ignore[arg-type]
    verdict = gate.verdict(C, COMMITTED, NOW)
    assert verdict == GateVerdict(False, "cannot read the fleet's status: git://127.0.0.1:1/status: "
                                         "connection refused", None)
    assert seen == [] and reader.reads == 1


def test_a_real_reader_whose_remote_does_not_answer_holds_the_commit(tmp_path):
    """Nothing listens on the port: the reader's SourceError is the gate's reason to hold."""
    remote = Remote.of(f"git://127.0.0.1:{free_port()}/config.git", timeout=5)
    reader = FleetReader(remote, tmp_path / "fleet")
    verdict = FleetGate(reader, "canary", 1, 0.0, HEARTBEAT).verdict(C, COMMITTED, NOW)
    assert not verdict.allowed and verdict.earliest is None
    assert verdict.why.startswith("cannot read the fleet's status: "), verdict.why


def test_what_it_reads_goes_to_on_read_and_to_the_gate():
    fleet = [agent("c1"), agent("c2"), agent("m1", group="main")]
    seen = []
    gate = FleetGate(Reader(fleet), "canary", 2, SOAK, HEARTBEAT, on_read=seen.append)  # type: ignore[arg-type]
    verdict = gate.verdict(C, COMMITTED, NOW)
    assert seen == [fleet]
    # First seen now: both soak from now on this agent's clock, whatever their files say.
    since = {"c1": NOW, "c2": NOW}
    assert verdict == group_gate(fleet, C, "canary", 2, SOAK, NOW, HEARTBEAT, since, COMMITTED)
    assert not verdict.allowed and verdict.earliest == NOW + timedelta(seconds=SOAK)
    later = NOW + timedelta(seconds=SOAK)
    gate.reader = Reader([replace(e, seen=later) for e in fleet])  # type: ignore[assignment]
    assert gate.verdict(C, COMMITTED, later).allowed
    # Their refs not written since: down, forgotten; back, each soaks again from when it is seen anew.
    gate.reader = Reader(fleet)  # type: ignore[assignment]
    assert not gate.verdict(C, COMMITTED, later).allowed
    gate.reader = Reader([replace(e, seen=later) for e in fleet])  # type: ignore[assignment]
    assert gate.verdict(C, COMMITTED, later).earliest == later + timedelta(seconds=SOAK)


def test_the_soak_is_remembered_per_agent_and_commit():
    fleet = [agent("c1")]
    gate = FleetGate(Reader(fleet), "canary", 1, SOAK, HEARTBEAT)  # type: ignore[arg-type]
    gate.verdict(C, COMMITTED, NOW)
    later = NOW + timedelta(seconds=60)
    gate.reader = Reader([replace(fleet[0], seen=later)])  # type: ignore[assignment]
    verdict = gate.verdict(C, COMMITTED, later)
    assert verdict.earliest == NOW + timedelta(seconds=SOAK)  # from the first time it was seen
    other = "d" * 40
    gate.reader = Reader([replace(agent("c1", commit=other), seen=later)])  # type: ignore[assignment]
    assert gate.verdict(other, COMMITTED, later).earliest == later + timedelta(seconds=SOAK)


def test_a_status_written_before_the_commit_it_reports_does_not_count():
    """The commit's time goes to the judging: a status older than the commit (beyond the clock skew)
    cannot be about it, whatever it says."""
    fleet = [agent("c1", written=7200)]  # the commit is an hour old
    gate = FleetGate(Reader(fleet), "canary", 1, 0.0, HEARTBEAT)  # type: ignore[arg-type]
    verdict = gate.verdict(C, COMMITTED, NOW)
    assert not verdict.allowed
    assert verdict.why.endswith("not counted: c1 (written before the commit it reports)"), verdict.why
    assert FleetGate(Reader(fleet), "canary", 1, 0.0, HEARTBEAT).verdict(  # type: ignore[arg-type]
        C, None, NOW).allowed  # the commit's time unknown: nothing to compare with


def test_a_status_not_counted_starts_no_soak():
    """The soak starts when a status first counts: one refused (written before the commit) is not
    remembered, so it soaks from when it does count."""
    fleet = [agent("c1", written=7200)]
    gate = FleetGate(Reader(fleet), "canary", 1, SOAK, HEARTBEAT)  # type: ignore[arg-type]
    assert not gate.verdict(C, COMMITTED, NOW).allowed
    later = NOW + timedelta(seconds=60)
    gate.reader = Reader([replace(fleet[0], seen=later)])  # type: ignore[assignment]
    assert gate.verdict(C, None, later).earliest == later + timedelta(seconds=SOAK)


def test_count_and_group_are_the_gates():
    fleet = [agent("c1"), agent("c2", group="other")]
    assert not FleetGate(Reader(fleet), "canary", 2, 0.0, HEARTBEAT).verdict(  # type: ignore[arg-type]
        C, COMMITTED, NOW).allowed
    assert FleetGate(Reader(fleet), "canary", 1, 0.0, HEARTBEAT).verdict(  # type: ignore[arg-type]
        C, COMMITTED, NOW).allowed
    assert FleetGate(Reader(fleet), "other", 1, 0.0, HEARTBEAT).verdict(  # type: ignore[arg-type]
        C, COMMITTED, NOW).allowed


def settings(tmp_path: Path, **more: str):
    config = tmp_path / "gitsync.toml"
    rollout = {"after_group": "canary", "after_count": "2", "soak": "5m", **more}
    config.write_text("[source]\nrepo = \"git://127.0.0.1:1/config.git\"\n[agent]\n"
                      f"state_dir = \"{tmp_path / 'state'}\"\ninterval = \"30s\"\njitter = \"5s\"\n"
                      "[writeback]\nstatus_heartbeat = \"20s\"\n[rollout]\n"
                      + "".join(f'{key} = "{value}"\n' if not value.isdigit() else f"{key} = {value}\n"
                                for key, value in rollout.items()))
    return load(config=config, env={})


def test_from_settings_takes_the_group_count_soak_and_own_heartbeat(tmp_path, log):
    gate = FleetGate.from_settings(settings(tmp_path))
    assert (gate.after_group, gate.after_count, gate.soak, gate.heartbeat) == ("canary", 2, 300.0, 35.0)
    assert gate.reader.remote.url == "git://127.0.0.1:1/config.git"
    assert gate.reader.work_dir == tmp_path / "state" / "fleet"
    assert "after_group = 'canary' without status_signers: any writer of refs/gitsync/status can open " \
           "(or hold) this agent's gate" in log.getvalue()


def test_from_settings_hands_what_it_reads_to_the_metrics(tmp_path, log):
    class Metrics:
        def __init__(self):
            self.fleets = []

        def set_fleet(self, fleet):
            self.fleets.append(fleet)

    metrics = Metrics()
    gate = FleetGate.from_settings(settings(tmp_path), metrics)  # type: ignore[arg-type]
    gate.reader = Reader([agent("c1")])  # type: ignore[assignment]
    gate.verdict(C, COMMITTED, NOW)
    assert [[e.agent for e in fleet] for fleet in metrics.fleets] == [["c1"]]
    quiet = FleetGate.from_settings(settings(tmp_path))
    quiet.reader = Reader([agent("c1")])  # type: ignore[assignment]
    assert quiet.verdict(C, COMMITTED, NOW).why  # no metrics: nothing to tell, and no error


@pytest.mark.parametrize(("heartbeat", "interval", "jitter", "expected"), [
    ("20s", "30s", "5s", 35.0), ("60s", "30s", "5s", 60.0), ("35s", "30s", "5s", 35.0)])
def test_the_heartbeat_expected_of_others_is_what_this_agent_writes_at(tmp_path, heartbeat, interval, jitter,
                                                                      expected):
    config = tmp_path / "gitsync.toml"
    config.write_text(f'[agent]\ninterval = "{interval}"\njitter = "{jitter}"\n'
                      f'[writeback]\nstatus_heartbeat = "{heartbeat}"\n')
    assert own_heartbeat(load(config=config, env={})) == expected
