"""The package's layering (docs/architecture.md, "Contracts"), checked by import-linter against the
contracts in pyproject.toml: the tree keeps them, and a deliberately bad import breaks them."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from testkit.processes import ROOT

LINT_IMPORTS = str(Path(sys.executable).with_name("lint-imports"))


def lint_imports(tree: Path) -> subprocess.CompletedProcess[str]:
    """`lint-imports` over the package in `tree`, with the contracts of its pyproject.toml."""
    return subprocess.run([LINT_IMPORTS, "--config", str(tree / "pyproject.toml"), "--no-cache"],
                          cwd=tree, capture_output=True, text=True, timeout=300,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tree)})


def contracts() -> dict[str, dict]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    return {c["id"]: c for c in config["contracts"]}


@pytest.mark.slow
def test_the_tree_keeps_every_contract():
    done = lint_imports(ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "BROKEN" not in done.stdout and done.stdout.count("KEPT") == len(contracts())


def test_the_memo_wall_names_every_module_of_renders_core():
    """A module or package added to render/ is inside the wall (or in render/memo/, behind it) by
    construction (a package named in the contract holds its modules)."""
    render = ROOT / "gitsync" / "render"
    core = {f"gitsync.render.{p.stem}" for p in render.glob("*.py") if p.stem != "__init__"}
    core.add("gitsync.render")
    core |= {f"gitsync.render.{p.name}" for p in render.iterdir()
             if (p / "__init__.py").is_file() and p.name != "memo"}
    assert set(contracts()["memo-wall"]["source_modules"]) == core


def test_the_pure_contract_names_every_module_of_the_openapi_conversion():
    """A module added to render/openapi is a decision, pure, unless it is the render's hook (`stage`,
    which reads the repo's files through the render's memo, as the pipeline does)."""
    openapi = ROOT / "gitsync" / "render" / "openapi"
    conversion = {f"gitsync.render.openapi.{p.stem}" for p in openapi.glob("*.py")
                  if p.stem not in ("__init__", "stage")}
    pure = {m for m in contracts()["pure"]["source_modules"] if m.startswith("gitsync.render.openapi")}
    assert pure == conversion


@pytest.mark.slow
@pytest.mark.parametrize(("module", "bad_import", "contract"), [
    ("gitsync/agent/decide.py", "import dulwich.repo", "nothing that does I/O"),
    ("gitsync/render/validate.py", "from gitsync.render.memo import cache", "RenderMemo"),
    ("gitsync/source/mirror.py", "from gitsync.render import pipeline", "each stage imports only"),
    ("gitsync/agent/sync.py", "from gitsync.feedback import outbox", "each stage imports only"),
    ("gitsync/kinds.py", "from gitsync.schema import plugins", "the shared vocabulary imports no stage"),
    ("gitsync/writeback/wire.py", "from gitsync.writeback import notes", "no import cycle"),
    # the decisions do no I/O: neither the settings (files, the host name), the log, nor the modules that
    # reach the network, other processes, threads, the clock or the file system
    ("gitsync/agent/gate.py", "from gitsync.settings import Settings", "nothing that does I/O"),
    ("gitsync/push/plan.py", "from gitsync.log import logger", "nothing that does I/O"),
    ("gitsync/agent/choice.py", "import socket", "nothing that does I/O"),
    ("gitsync/push/moves.py", "import subprocess", "nothing that does I/O"),
    ("gitsync/render/compose.py", "import threading", "nothing that does I/O"),
    ("gitsync/agent/canary.py", "import time", "nothing that does I/O"),
    ("gitsync/ownership.py", "import os", "nothing that does I/O"),
])
def test_a_bad_import_breaks_its_contract(tmp_path, module, bad_import, contract):
    """In a copy of the tree, one import against the layering: lint-imports fails, naming the contract."""
    shutil.copytree(ROOT / "gitsync", tmp_path / "gitsync", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    target = tmp_path / module
    target.write_text(target.read_text() + f"\n{bad_import}  # noqa\n")
    done = lint_imports(tmp_path)
    assert done.returncode != 0
    broken = [line for line in done.stdout.splitlines() if line.endswith("BROKEN")]
    assert any(contract in line for line in broken), done.stdout
