from __future__ import annotations

from gitsync import __version__
from gitsync.cli import COMMANDS
from tests.support import run_gitsync


def test_help_lists_every_subcommand_of_the_design():
    result = run_gitsync("--help")
    assert result.returncode == 0
    names = {"render", "validate", "diff", "sync", "run", "status", "demo",
             "export", "import", "init", "schema", "completion"}
    for name in names:
        assert f"    {name}" in result.stdout
    assert {c.name for c in COMMANDS} == names


def test_version():
    result = run_gitsync("--version")
    assert result.returncode == 0
    assert result.stdout.strip() == f"gitsync {__version__}"


def test_usage_error_exits_2():
    result = run_gitsync("sync", "--no-such-flag")
    assert result.returncode == 2
    assert "unrecognized arguments" in result.stderr


def test_flags_of_the_contract_exist():
    result = run_gitsync("run", "--help")
    for flag in ("--interval", "--jitter", "--drift-interval", "--state-dir", "--listen",
                 "--webhook-secret-file", "--repo", "--ref", "--path", "--gateway", "--admin-key-file",
                 "--no-writeback", "--status-branch", "--notes-ref", "--agent-name"):
        assert flag in result.stdout, flag
