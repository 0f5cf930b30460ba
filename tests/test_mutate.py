"""scripts/mutate and its configuration, without running mutmut (a run takes minutes; the command is in
docs/development.md): every module, test file, function and constant that scripts/mutate.toml names is
in the tree, so that a move or a rename elsewhere does not leave the mutation run pointing at nothing."""

from __future__ import annotations

import ast
import importlib.machinery
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from testkit.processes import ROOT


def load_script() -> ModuleType:
    loader = importlib.machinery.SourceFileLoader("scripts_mutate", str(ROOT / "scripts" / "mutate"))
    spec = importlib.util.spec_from_loader("scripts_mutate", loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["scripts_mutate"] = module
    loader.exec_module(module)
    return module


mutate = load_script()
MODULES = mutate.load_modules(mutate.CONFIG)


def functions_of(path: Path) -> set[str]:
    """``name`` for each function of a module, ``Class.name`` for each method."""
    tree = ast.parse(path.read_text())
    found = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            found.add(node.name)
        elif isinstance(node, ast.ClassDef):
            found |= {f"{node.name}.{item.name}" for item in node.body
                      if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef)}
    return found


@pytest.mark.parametrize("module", MODULES, ids=[m.path for m in MODULES])
def test_what_the_configuration_names_is_in_the_tree(module):
    source = ROOT / module.path
    assert source.is_file(), f"scripts/mutate.toml: {module.path} is not a file"
    for test in module.tests:
        assert (ROOT / test.split("::", 1)[0]).is_file(), f"scripts/mutate.toml: {module.path}: no {test}"
    missing = set(module.functions) - functions_of(source)
    assert not missing, f"scripts/mutate.toml: {module.path} has no function {sorted(missing)}"
    text = source.read_text()
    for old, new in module.constants:
        assert text.count(old) == 1 and old != new, f"scripts/mutate.toml: {module.path}: {old!r}"
    for extra in module.copy:
        assert (ROOT / extra).exists(), f"scripts/mutate.toml: {module.path}: no {extra}"


def test_every_module_of_the_issue_is_configured():
    assert {m.path for m in MODULES} >= {
        "gitsync/writeback/trust.py", "gitsync/writeback/statusfile.py", "gitsync/agent/gate.py",
        "gitsync/agent/fleet_gate.py", "gitsync/ownership.py", "gitsync/render/compose.py",
        "gitsync/render/mask.py", "gitsync/render/secrets.py", "gitsync/push/plan.py",
        "gitsync/push/guard.py", "gitsync/push/moves.py", "gitsync/daemon/httpserver.py"}


def test_functions_are_named_as_mutmut_names_their_mutants():
    module = mutate.Module("gitsync/push/guard.py", ("tests/push/test_guard.py",),
                           ("trailers", "GuardPolicy.limit"))
    assert module.patterns() == ["gitsync.push.guard.x_trailers__mutmut_*",
                                 "gitsync.push.guard.xǁGuardPolicyǁlimit__mutmut_*"]
    assert module.scored("gitsync.push.guard.xǁGuardPolicyǁlimit__mutmut_3")
    assert not module.scored("gitsync.push.guard.x_allowance__mutmut_1")
    assert mutate.Module("gitsync/ownership.py", ()).patterns() == ["gitsync.ownership.x*__mutmut_*"]
    assert mutate.chosen(MODULES, ["push/guard"])[0].path == "gitsync/push/guard.py"
    assert mutate.chosen(MODULES, ["gitsync.push.guard"]) == mutate.chosen(MODULES, ["gitsync/push/guard.py"])


def test_a_report_keeps_the_modules_not_run_again(tmp_path):
    report = tmp_path / "mutation.md"
    guard, trust = (next(m for m in MODULES if m.path == path)
                    for path in ("gitsync/push/guard.py", "gitsync/writeback/trust.py"))
    first = mutate.Result(guard, killed=9, survived=["gitsync.push.guard.x_trailers__mutmut_4"], seconds=60)
    first.diffs["gitsync.push.guard.x_trailers__mutmut_4"] = "-    a\n+    b"
    mutate.write_report(report, MODULES, [first], 2)
    mutate.write_report(report, MODULES, [mutate.Result(trust, killed=5, seconds=30)], 2)
    text = report.read_text()
    assert "| gitsync/writeback/trust.py | 5 | 5 | 0 | 0 | 100.0 % | 0.5 |" in text
    assert "| gitsync/push/guard.py | 10 | 9 | 1 | 0 | 90.0 % | 1.0 |" in text
    assert "| all | 15 | 14 | 1 | 0 | 93.3 % | 1.5 | |" in text
    assert "- trailers #4 (survived):" in text and "  -    a\n  +    b" in text
    assert text.index("writeback/trust.py") < text.index("push/guard.py")  # in the config's order
    mutate.write_report(report, MODULES, [mutate.Result(guard, killed=10, seconds=60)], 2)
    assert "| gitsync/push/guard.py | 10 | 10 | 0 | 0 | 100.0 % |" in report.read_text()
    assert "trailers #4" not in report.read_text()
