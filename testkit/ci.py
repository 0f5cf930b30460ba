"""A scaffold's CI files run as far as a machine without the forges allows: each GitHub Actions step's
``run`` as shell, with its ``if:`` and ``env`` worked out for an event and a set of secrets, and each
GitLab CI job's ``before_script`` and ``script``. ``uses:`` steps are the caller's to stand in for
(a checkout: the working directory; setup-python: a `python` on PATH)."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

_EXPRESSION = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")


@dataclass(frozen=True)
class Step:
    name: str
    script: str
    env: dict[str, str]


def _value(expression: str, event: str, secrets: Mapping[str, str], env: Mapping[str, str]) -> Any:
    """A GitHub expression of the few forms a scaffold uses: contexts, ``==``/``!=``, ``&&``/``||``,
    ``always()``, quoted strings (evaluated as Python once those are translated)."""
    text = expression.replace("&&", " and ").replace("||", " or ").replace("always()", "True")
    text = re.sub(r"secrets\.(\w+)", lambda m: repr(secrets.get(m.group(1), "")), text)
    text = re.sub(r"env\.(\w+)", lambda m: repr(env.get(m.group(1), "")), text)
    text = text.replace("github.event_name", repr(event))
    if re.search(r"[A-Za-z_]\w*\.", text):
        raise ValueError(f"an expression this runner cannot evaluate: {expression}")
    return eval(text, {"__builtins__": {}}, {"True": True})  # the scaffold's own text, no input


def github_steps(workflow: Path, job: str, event: str, secrets: Mapping[str, str]) -> list[Step]:
    """The ``run`` steps of `job` that run on `event`, with their env worked out."""
    data = YAML(typ="safe").load(workflow.read_text())
    steps = []
    for raw in data["jobs"][job]["steps"]:
        if "run" not in raw:
            continue
        env = {key: str(_value(m.group(1), event, secrets, {}) if (m := _EXPRESSION.fullmatch(str(v))) else v)
               for key, v in (raw.get("env") or {}).items()}
        condition = raw.get("if")
        if condition is not None and not _value(str(condition), event, secrets, env):
            continue
        steps.append(Step(raw.get("name", raw["run"].splitlines()[0]), raw["run"], env))
    return steps


def gitlab_script(ci_file: Path, job: str) -> str:
    """`job`'s ``before_script`` (its own or the default's) and ``script`` as one shell script."""
    data = YAML(typ="safe").load(ci_file.read_text())
    before = data[job].get("before_script", (data.get("default") or {}).get("before_script", []))
    return "set -e\n" + "\n".join([*before, *data[job]["script"]]) + "\n"


def run_shell(script: str, cwd: Path, env: Mapping[str, str], timeout: float = 300
              ) -> subprocess.CompletedProcess[str]:
    """`script` as a runner runs it: ``bash -e``."""
    return subprocess.run(["bash", "-e", "-c", script], cwd=cwd, env=dict(env), capture_output=True,
                          text=True, timeout=timeout)


__all__ = ["Step", "github_steps", "gitlab_script", "run_shell"]
