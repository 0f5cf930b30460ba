"""Looking for a secret value where it must not be: output text, files, git objects.

A value can leak whole, JSON-escaped (``\\/`` as cjson writes it), or cut short (an error
text truncated before it was redacted). `Canary.found_in` looks for the value and for
every run of `FRAGMENT` characters taken from it, so a truncated copy counts as a leak.
"""

from __future__ import annotations

import functools
import json
import re
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from testkit.gitservers import git_env

FRAGMENT = 10  # characters of the canary that, seen together, count as a leak


def git_objects(repo: Path) -> bytes:
    """Every object of a git repo (loose or packed), inflated: what `git cat-file --batch` shows."""
    result = subprocess.run(["git", "cat-file", "--batch-all-objects", "--batch"], cwd=repo,
                            env=git_env(), capture_output=True, timeout=60, check=True)
    return result.stdout


def git_dirs(root: Path) -> list[Path]:
    """The git repos (bare or not) below `root`: their objects are compressed on disk."""
    return sorted({p.parent for p in root.rglob("objects") if (p.parent / "HEAD").is_file()})


@dataclass(frozen=True)
class Canary:
    """A secret value to hunt for."""

    value: str

    @functools.cached_property
    def forms(self) -> frozenset[str]:
        """The value and each run of `FRAGMENT` characters of it: plain, and as JSON (with and without
        ASCII escapes, cjson's ``\\/``) and a Python repr would spell it inside a quoted string."""
        runs = {self.value[i:i + FRAGMENT] for i in range(len(self.value) - FRAGMENT + 1)} | {self.value}
        spelled = set(runs)
        for run in runs:
            for ascii_only in (True, False):
                inner = json.dumps(run, ensure_ascii=ascii_only)[1:-1]
                spelled |= {inner, inner.replace("/", "\\/")}
            spelled.add(repr(run)[1:-1])
        return frozenset(spelled)

    @functools.cached_property
    def _pattern(self) -> re.Pattern[bytes]:
        """One scan of a text for every form (a text can be megabytes, the forms hundreds)."""
        forms = sorted((f.encode() for f in self.forms), key=len, reverse=True)
        return re.compile(b"|".join(re.escape(f) for f in forms))

    def found_in(self, text: str | bytes) -> list[str]:
        """The forms of the canary that occur in `text` (empty: no leak)."""
        data = text if isinstance(text, bytes) else text.encode("utf-8", "replace")
        if self._pattern.search(data) is None:
            return []
        return sorted(f for f in self.forms if f.encode() in data)

    def leaks_in_tree(self, root: Path) -> dict[str, list[str]]:
        """Per file below `root` (and per git repo, its inflated objects), the forms found."""
        found: dict[str, list[str]] = {}
        for path in sorted(root.rglob("*")):
            if path.is_file() and not path.is_symlink():
                hits = self.found_in(path.read_bytes())
                if hits:
                    found[str(path)] = hits
        for repo in git_dirs(root):
            hits = self.found_in(git_objects(repo))
            if hits:
                found[f"{repo} (git objects)"] = hits
        return found

    def assert_absent(self, where: str, texts: Iterable[str | bytes]) -> None:
        for text in texts:
            hits = self.found_in(text)
            assert not hits, f"canary in {where}: {hits}\n{text[-3000:]!r}"
