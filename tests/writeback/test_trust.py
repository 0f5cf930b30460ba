"""Signed statuses' signers file (gitsync.writeback.trust): whom it names for a group."""

from __future__ import annotations

import subprocess
from pathlib import Path

from gitsync.writeback.trust import StatusSigners


def _key(tmp_path: Path, name: str) -> str:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / name)], check=True)
    return (tmp_path / f"{name}.pub").read_text().strip()


def test_the_agents_a_signers_file_names_for_a_group_or_none_when_a_pattern_may_name_more(tmp_path):
    one, two = _key(tmp_path, "one"), _key(tmp_path, "two")
    path = tmp_path / "status_signers"
    path.write_text(f"canary-0@canary,main-0@main {one}\neu%2F1@canary,!canary-9@canary {two}\n"
                    f"*@main {two}\n")
    signers = StatusSigners(path)
    assert signers.agents_of("canary") == {"canary-0", "eu/1"}  # decoded as agents name themselves
    assert signers.agents_of("main") is None  # *@main: any agent of main may speak
    assert signers.agents_of("edge") == frozenset()  # nobody may speak for it
    path.write_text(f"canary-? {one}\n")  # no group: a name alone, and patterns may match x@canary too
    assert StatusSigners(path).agents_of("canary") is None
