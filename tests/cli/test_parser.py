from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from gitsync import __version__
from gitsync.cli.parser import COMMANDS
from testkit.agents import ADMIN_KEY, repo_url
from testkit.processes import gitsync_env, run_gitsync


def test_help_lists_every_subcommand_of_the_design():
    result = run_gitsync("--help")
    assert result.returncode == 0
    names = {"render", "validate", "diff", "sync", "run", "status", "demo",
             "export", "import", "init", "schema", "completion", "pr-comment", "publish"}
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


# ---------------------------------------------------------------------------------------------------------
# Settings and flags that cannot work: the documented message and exit 2, never a traceback


@pytest.fixture
def basics(tmp_path):
    key = tmp_path / "admin-key"
    key.write_text("test-admin-key\n")
    config = tmp_path / "config"
    config.mkdir()
    (config / "a.yaml").write_text("routes: []\n")
    (tmp_path / "junk.pem").write_text("not a certificate\n")
    return tmp_path, ["--admin-key-file", str(key), "--state-dir", str(tmp_path / "state")]


@pytest.mark.parametrize(("args", "message"), [
    (["run", "--repo", "{tmp}", "--gateway", "http://127.0.0.1:1", "--listen", "127.0.0.1:99999"],
     "--listen: port must be 1 to 65535, got '127.0.0.1:99999'"),
    (["run", "--repo", "{tmp}", "--gateway", "http://127.0.0.1:1", "--listen", "nonsense"],
     "--listen: expected HOST:PORT, got 'nonsense'"),
    (["run", "--dir", "{tmp}/config", "--gateway", "http://127.0.0.1:1"],
     "the daemon follows a git repo (--repo); --dir is for validate, render, diff and sync"),
    (["diff", "--dir", "{tmp}/config", "--gateway", "http://[::1"],
     "--gateway: 'http://[::1' is not a valid URL"),
    (["diff", "--dir", "{tmp}/config", "--gateway", "https://127.0.0.1:1", "--ca-file", "/nonexistent"],
     "--ca-file: /nonexistent: no such file"),
    (["diff", "--dir", "{tmp}/config", "--gateway", "https://127.0.0.1:1",
      "--client-cert-file", "{tmp}/junk.pem"], "not a usable PEM certificate or key"),
    (["run", "--repo", "{tmp}", "--gateway", "http://127.0.0.1:1", "--interval", "0"],
     "--interval: must be at least 0.1s, got '0'"),
    (["sync", "--once", "--dir", "{tmp}/config", "--gateway", "http://127.0.0.1:1",
      "--gateway-timeout", "0s"], "--gateway-timeout: must be at least 0.1s"),
])
@pytest.mark.slow
def test_settings_that_cannot_work_exit_2_with_the_message(basics, args, message):
    tmp, common = basics
    result = run_gitsync(*[a.replace("{tmp}", str(tmp)) for a in args], *common, timeout=60)
    assert result.returncode == 2, result.stderr
    assert message.replace("{tmp}", str(tmp)) in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_a_listen_port_in_use_exits_2(basics):
    tmp, common = basics
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_gitsync("run", "--repo", str(tmp), "--gateway", "http://127.0.0.1:1",
                             "--listen", f"127.0.0.1:{port}", *common, timeout=60)
    assert result.returncode == 2, result.stderr
    assert f"listen = 127.0.0.1:{port}: cannot listen there: Address already in use" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_dotted_key_error_names_its_line(tmp_path):
    config = tmp_path / "gitsync.toml"
    config.write_text('# gitsync\nsource.repo = 1\n\n[agent]\ninterval = "30s"\n')
    result = run_gitsync("validate", "--config", str(config), "--dir", str(tmp_path))
    assert result.returncode == 2
    assert f"{config}:2: source.repo: expected a string, got an integer" in result.stderr


UNMANAGED_SECRETS = (
    "secrets:\n  - id: vault/main\n    uri: http://127.0.0.1:8200\n    prefix: kv\n"
    "    token: t0k3n-abcd\n"
    "routes:\n  - id: r1\n    uri: /a\n    upstream: {type: roundrobin, nodes: {'127.0.0.1:1980': 1}}\n"
    "    plugins:\n      key-auth:\n        header: $secret://vault/main/key\n")


@pytest.mark.slow
def test_validate_takes_unmanaged_and_warns_about_the_repos_items_it_leaves_out(tmp_path):
    config = tmp_path / "config"
    config.mkdir()
    (config / "a.yaml").write_text(UNMANAGED_SECRETS)
    managed = run_gitsync("validate", "--dir", str(config))
    assert managed.returncode == 0 and "warning" not in managed.stderr
    left_out = run_gitsync("validate", "--dir", str(config), "--unmanaged", "secrets")
    assert left_out.returncode == 0, left_out.stderr
    assert "warning: 1 secrets item(s) of the repo are not pushed: secrets is unmanaged" in left_out.stderr
    assert "1 pushed item(s) refer to them and work only if the gateway holds its own: routes/r1" \
        in left_out.stderr
    assert "t0k3n-abcd" not in left_out.stderr


@pytest.mark.slow
def test_sync_from_the_repo_warns_about_the_repos_items_it_leaves_out(tmp_path, git_daemon, remote_repo,
                                                                      apisix):
    """The warning `validate` gives, `sync --once --repo` (the agent's render) gives too."""
    remote_repo.commit({"a.yaml": UNMANAGED_SECRETS}, "a secrets manager, and a route using it")
    key = tmp_path / "key"
    key.write_text(ADMIN_KEY)
    result = run_gitsync("sync", "--once", "--repo", repo_url(git_daemon, remote_repo), "--gateway",
                         apisix.url, "--admin-key-file", str(key), "--state-dir", str(tmp_path / "state"),
                         "--unmanaged", "secrets")
    assert result.returncode == 0, result.stderr
    assert "1 secrets item(s) of the repo are not pushed: secrets is unmanaged" in result.stderr
    assert "refer to them and work only if the gateway holds its own: routes/r1" in result.stderr
    assert [r["id"] for r in apisix.config()["routes"]] == ["r1"] and not apisix.config().get("secrets")
    assert "t0k3n-abcd" not in result.stdout + result.stderr


@pytest.mark.slow
def test_a_process_loads_only_what_its_configuration_needs():
    """What a `gitsync sync` process imports leaves out what only some setups use: urllib3
    (http(s) remotes), pyrage and cryptography (age keys, SOPS files), importlib.metadata (the version
    is written in the package), trio (httpcore's async support), prometheus_client and the HTTP
    listener (the daemon's). Each is tens of ms of every start."""
    code = ("import sys; from gitsync.__main__ import run; sys.modules.setdefault('trio', None); "
            "import gitsync.cli.parser, gitsync.cli.commands, gitsync.agent.sync; "
            "from gitsync.agent.metrics import Metrics; "
            "m = Metrics(recorded=False); m.syncs.labels('applied').inc(); m.set_applied_commit('c'); "
            "m.sync_phase.labels('fetch').observe(0.1); m.gateway_up.labels('g').set(1); "
            "print(sorted(m for m in ('urllib3', 'pyrage', 'cryptography', 'importlib.metadata', "
            "'prometheus_client', 'http.server', 'gitsync.daemon.httpserver') "
            "if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], env=gitsync_env(), capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def run_spying_on_dispatch(argv: list[str], report: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`gitsync <argv>` as its own process (`gitsync.__main__.run`), printing on stderr, once the command
    has returned and before the process ends, the tuple `report` (Python over `gc`, `cli`, `status`,
    `command`)."""
    code = ("import gc, sys; import gitsync.cli.parser as cli; from gitsync.__main__ import run\n"
            "dispatch = cli.dispatch\n"
            "def spy(*a):\n"
            "    status, command = dispatch(*a)\n"
            f"    print(*({report}), file=sys.stderr, flush=True)\n"
            "    return status, command\n"
            f"cli.dispatch = spy; sys.argv = ['gitsync', *{argv!r}]; run()")
    return subprocess.run([sys.executable, "-c", code], env=gitsync_env({"GITSYNC_CONFIG": "/dev/null"}),
                          capture_output=True, text=True, timeout=60, cwd=cwd)


@pytest.mark.parametrize(("argv", "collects"), [
    (["completion", "bash"], True),
    (["validate", "--repo", "not-a-repo", "--state-dir", "state"], False)])
def test_a_gitsync_process_collects_cycles_in_a_long_lived_command_only(tmp_path, argv, collects):
    """`gitsync.__main__.run` starts without the cyclic collector (start-up's objects live as long as
    the process); a command that is not one-shot gets it back before it starts, a one-shot one
    (``closes_all``) runs to its end without it."""
    done = run_spying_on_dispatch(argv, "'collector', gc.isenabled(), command.name", tmp_path)
    assert f"collector {collects} {argv[0]}" in done.stderr.splitlines(), done.stderr[-2000:]


def test_a_parser_made_for_one_command_has_all_of_its_flags_and_lists_every_command():
    """`dispatch` makes the flags of the command it runs only; that command's flags, defaults and help
    are those of the whole command line."""
    import argparse

    from gitsync.cli.parser import build_parser

    def commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        return dict(sub.choices)

    def flags(parser: argparse.ArgumentParser) -> list[tuple]:
        return [(tuple(a.option_strings), a.dest, a.default, a.help, a.choices) for a in parser._actions]

    whole = commands(build_parser())
    assert sorted(whole) == sorted(c.name for c in COMMANDS)
    for name, full in whole.items():
        one = commands(build_parser(only=name))
        assert sorted(one) == sorted(whole)
        assert flags(one[name]) == flags(full), name
        assert len(flags(full)) > 4, name  # beyond -h and the common flags: the test sees real flags


@pytest.mark.slow
def test_a_one_shot_command_leaves_its_objects_to_the_process_end_only_in_gitsyncs_own_process(tmp_path):
    """In `gitsync`'s own process a one-shot command's large objects (the render, the agent) are kept
    for `os._exit` to free at once; a program calling `main` keeps nothing."""
    from gitsync.cli import parser as cli

    (tmp_path / "routes.yaml").write_text("routes:\n  - id: r1\n    uri: /a\n    upstream:\n"
                                          "      nodes: {'127.0.0.1:1980': 1}\n")
    argv = ["render", "--dir", str(tmp_path), "--state-dir", str(tmp_path / "state")]
    done = run_spying_on_dispatch(argv, "'left', status, [type(o).__name__ for o in cli._left_to_exit]",
                                  tmp_path)
    assert "left 0 ['Rendered']" in done.stderr.splitlines(), done.stderr[-2000:]
    assert '"uri":"/a"' in done.stdout

    assert cli.main(argv) == 0
    assert cli._left_to_exit is None


def test_a_library_caller_keeps_its_own_garbage_collector_settings():
    """Only gitsync's own process (started without the collector) has it turned on and its start-up
    frozen by a long-lived command; a program that turned the collector off keeps it off."""
    import gc

    from gitsync.cli import parser as cli

    frozen = gc.get_freeze_count()
    gc.disable()
    try:
        assert cli.main(["completion", "bash"]) == 0
        assert not gc.isenabled()
        assert gc.get_freeze_count() == frozen
    finally:
        gc.enable()
