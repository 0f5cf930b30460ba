from __future__ import annotations

import subprocess
import sys
import time

import pytest

from gitsync.agent.state import AgentState, GatewayState, StateError
from gitsync.agent.statedir import StateDir


def test_round_trip(tmp_path):
    sd = StateDir(tmp_path / "state")
    gateway = GatewayState("a" * 40, "d1", {"routes": 3})
    state = AgentState(last_good="a" * 40, gateways={"http://g:9180": gateway})
    state.mark_bad("b" * 40, "render: x.yaml:1:1: broken")
    sd.ensure()
    sd.save(state)
    assert sd.load() == state
    assert not list(sd.path.glob(".state.json.*"))  # no temporary left behind


def test_fresh_and_corrupt_state(tmp_path):
    sd = StateDir(tmp_path)
    assert sd.load() == AgentState()
    sd.state_file.write_text('{"last_good": ')
    assert sd.load(repair=False) == AgentState()
    assert sd.state_file.exists()  # a reader (gitsync status) leaves it in place
    assert sd.load() == AgentState()
    assert (tmp_path / "state.corrupt").read_text() == '{"last_good": '


def test_bad_commits_are_bounded():
    state = AgentState()
    for i in range(80):
        state.mark_bad(f"{i:040d}", "why")
    assert len(state.bad) == 50
    assert f"{79:040d}" in state.bad and f"{0:040d}" not in state.bad


def test_single_instance_lock_names_the_holder(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time; from gitsync.agent.statedir import StateDir; "
         "s = StateDir(sys.argv[1]); s.acquire();"
         "print('locked', flush=True); time.sleep(30)", str(tmp_path)],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(StateError, match=f"in use by pid {holder.pid}"):
            StateDir(tmp_path).acquire()
    finally:
        holder.kill()
        holder.wait()
    deadline = time.monotonic() + 5
    while True:  # the kernel drops the flock with the process
        try:
            StateDir(tmp_path).acquire()
            break
        except StateError:
            assert time.monotonic() < deadline
            time.sleep(0.05)
