"""A wheel of this tree and a fresh virtualenv to install it in, for tests that run gitsync as a user
installs it (the README's quick start, a scaffold's CI), with no network and no package index."""

from __future__ import annotations

import os
import site
import subprocess
import sys
from pathlib import Path

from testkit.processes import ROOT, gitsync_env


def clean_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """`gitsync_env` without this tree on PYTHONPATH: what runs is what was installed."""
    env = {k: v for k, v in gitsync_env().items() if k != "PYTHONPATH"}
    env.update(extra or {})
    return env


def build_wheel(out: Path) -> Path:
    """The wheel of this tree (``apisix_gitsync-<version>-py3-none-any.whl``), built into `out`."""
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(ROOT)],
                   check=True, capture_output=True, env=clean_env(), timeout=300)
    return next(out.glob("apisix_gitsync-*.whl"))


def _is_gitsync(entry: str) -> bool:
    """A site-packages entry of gitsync itself: its package, its distribution's metadata, or the
    ``.pth`` of an editable install (of this checkout or another)."""
    name = entry.lower().replace("-", "_")
    return name == "gitsync" or name.startswith(("apisix_gitsync", "gitsync_", "gitsync.")) or \
        (name.endswith(".pth") and "gitsync" in name)


def venv_seeing_this_environment(path: Path) -> Path:
    """A new virtualenv that sees the packages installed for this interpreter, but not gitsync itself;
    returns its python.

    ``venv --system-site-packages`` would not do: run from a virtualenv, it reaches the *base*
    interpreter's site-packages, not this environment's (where pip put httpx & co.). Each of this
    environment's site directories is seen through a view of links, in the venv, to all its entries
    but gitsync's own (its package, ``apisix_gitsync-*.dist-info``, an editable install's ``.pth``):
    the suite itself runs from an editable install of the checkout, and pip would take that for the
    wheel a test installs ("already satisfied") and Python import it instead. A ``.pth`` file adds
    the views with `site.addsitedir` (so their own ``.pth`` files count too), after the venv's own
    site-packages: what pip installs there wins.
    """
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True, timeout=120)
    python = path / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                             check=True, capture_output=True, text=True, timeout=60).stdout.strip()
    sites = [*site.getsitepackages(), *([site.getusersitepackages()] if site.ENABLE_USER_SITE else [])]
    views = []
    for number, directory in enumerate(Path(d) for d in sites if Path(d).is_dir()):
        view = path / "environment" / str(number)
        view.mkdir(parents=True)
        for entry in directory.iterdir():
            if not _is_gitsync(entry.name):
                (view / entry.name).symlink_to(entry)
        views.append(str(view))
    adds = "; ".join(f"site.addsitedir({view!r})" for view in views)
    (Path(purelib) / "_this_environment.pth").write_text(f"import site; {adds}\n")
    return python


def offline_pip(find_links: Path, venv: Path) -> dict[str, str]:
    """An environment in which `python` and `pip` are the venv's, and pip reaches no index: only the
    wheels in `find_links` (and what this environment already has installed)."""
    return clean_env({"PATH": f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}", "VIRTUAL_ENV": str(venv),
                      "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(find_links), "PIP_CONSTRAINT": "",
                      "PIP_DISABLE_PIP_VERSION_CHECK": "1"})


__all__ = ["build_wheel", "clean_env", "offline_pip", "venv_seeing_this_environment"]
