"""How a scaffold's CI installs gitsync (`gitsync.adopt.pin`), and no install of the bare name anywhere.

The name ``gitsync`` on the package index is an unrelated project's: an install by that name, in the repo
or in a scaffold, runs someone else's code (where the scaffold's CI once held the admin key, too)."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

import gitsync
from gitsync.adopt import pin
from gitsync.adopt.init import scaffold_files
from testkit.processes import ROOT, run_gitsync

#: An install of the bare distribution name ``gitsync``, in the shapes a doc, a CI file or a
#: requirements file would write it (``apisix-gitsync`` is the project's and is no match).
_NAME = r"(?<![\w.-])gitsync(?![\w.-])"
BARE_INSTALLS = (
    re.compile(r"\b(?:pip3?|pipx|uv pip|python3? -m pip)\s+install(?:\s+-{1,2}[\w-]+(?:[= ](?!gitsync)\S+)?)*"
               r"\s+[\"']?" + _NAME + r"(?!/)"),
    re.compile(_NAME + r"\s*(?:\[[\w,]*\])?\s*(?:==|>=|<=|~=|!=|===|@\s)"),
    re.compile(r"^\s*" + _NAME + r"\s*(?:\[[\w,]*\])?\s*(?:[<>=!~;#].*)?$", re.M),  # a requirements line
    re.compile(r"/project/gitsync/"),  # the package index's page of that other project
)
REQUIREMENT_FILES = re.compile(r"(?:^|/)(?:requirements[^/]*\.(?:txt|in)|[^/]*-requirements\.txt|"
                               r"[^/]*-libraries\.txt|constraints[^/]*\.txt)$")


def bare_installs(path: str, text: str) -> list[str]:
    """Each line of `text` that installs the bare name (requirement lines only in requirements files)."""
    found = []
    patterns = BARE_INSTALLS if REQUIREMENT_FILES.search(path) else (BARE_INSTALLS[0], BARE_INSTALLS[1],
                                                                     BARE_INSTALLS[3])
    for pattern in patterns:
        for match in pattern.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            found.append(f"{path}:{line}: {text.splitlines()[line - 1].strip()}")
    return found


def test_the_finder_finds_each_shape_of_a_bare_install_and_not_the_projects_name() -> None:
    for bad in ('pip install gitsync', 'pip install "gitsync==0.1.0"', "pip install -U gitsync",
                "python -m pip install --user gitsync>=0.1", "pipx install gitsync", "gitsync==0.1.0",
                "uv pip install gitsync", "link: https://example.org/project/gitsync/"):
        assert bare_installs("README.md", bad), bad
    assert bare_installs("ci/requirements.txt", "gitsync\n")
    assert bare_installs("x-requirements.txt", "gitsync>=1\n")
    for good in ("pip install apisix-gitsync", 'pip install "apisix-gitsync==0.1.0"', "pip install .",
                 "pip install -e '.[test]'", "apisix-gitsync==0.1.0 --hash=sha256:00",
                 "gitsync validate --dir .",
                 "pip install gitsync-helper", "pip install ./gitsync/", "gitsync sync --once",
                 "/opt/gitsync/bin/pip install apisix_gitsync-0.1.0-py3-none-any.whl"):
        assert not bare_installs("README.md", good), good
    assert not bare_installs("ci/gitsync-libraries.txt", "dulwich<2,>=1.2\n")


def _tracked_texts() -> list[tuple[str, str]]:
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True,
                            timeout=60).stdout.decode().split("\0")
    texts = []
    for name in filter(None, listed):
        path = ROOT / name
        if name == "tests/adopt/test_pin.py" or not path.is_file() or path.stat().st_size > 2_000_000:
            continue
        try:
            texts.append((name, path.read_text(encoding="utf-8")))
        except UnicodeDecodeError:
            continue  # a binary file
    return texts


def test_nothing_in_the_repo_or_a_new_scaffold_installs_the_bare_name() -> None:
    wheel = pin.WheelPin("0.1.0", "0" * 64, ("dulwich<2,>=1.2",))
    scaffold = [(f"scaffold/{path}", data.decode()) for path, data in scaffold_files(wheel).items()]
    texts = _tracked_texts()
    assert len(texts) > 300 and any(name == "README.md" for name, _ in texts)  # the listing worked
    found = [hit for name, text in [*texts, *scaffold] for hit in bare_installs(name, text)]
    assert not found, "\n".join(found)


def test_the_distribution_name_is_the_projects_everywhere_it_is_written() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["name"] == gitsync.DISTRIBUTION == "apisix-gitsync"
    assert project["scripts"] == {"gitsync": "gitsync.__main__:run"}  # the command stays gitsync
    assert 'org.opencontainers.image.title="apisix-gitsync"' in (ROOT / "Dockerfile").read_text()
    for doc in ("README.md", "docs/operations.md", "docs/adoption.md"):
        assert "apisix-gitsync" in (ROOT / doc).read_text(), doc


def _wheel(tmp_path: Path, name: str = "apisix-gitsync", version: str = "9.8.7") -> Path:
    path = tmp_path / f"{name.replace('-', '_')}-{version}-py3-none-any.whl"
    metadata = (f"Metadata-Version: 2.3\nName: {name}\nVersion: {version}\nRequires-Dist: dulwich<2,>=1.2\n"
                "Requires-Dist: ruamel-yaml[oldlibyaml]<0.20,>=0.19\n"
                "Requires-Dist: pytest>=8; extra == 'test'\n\nThe README.\n")
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(f"{name.replace('-', '_')}-{version}.dist-info/METADATA", metadata)
        archive.writestr("gitsync/__init__.py", "")
    return path


def test_a_wheel_is_pinned_by_its_sha256_with_the_libraries_it_declares(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path)
    pinned = pin.from_wheel(wheel)
    assert pinned.version == "9.8.7" and pinned.sha256 == hashlib.sha256(wheel.read_bytes()).hexdigest()
    assert pinned.requires == ("dulwich<2,>=1.2", "ruamel-yaml[oldlibyaml]<0.20,>=0.19")  # no test extra
    files = pinned.files()
    requirement = [ln for ln in files[pin.REQUIREMENTS].splitlines() if not ln.startswith("#")]
    assert requirement == ["apisix-gitsync==9.8.7 \\", f"    --hash=sha256:{pinned.sha256}"]
    assert files[pin.LIBRARIES].splitlines()[-2:] == list(pinned.requires)
    by_url = pin.from_wheel(wheel, "https://artifacts.example/w.whl").requirements()
    assert "apisix-gitsync @ https://artifacts.example/w.whl \\\n" in by_url


def test_a_file_that_is_not_a_gitsync_wheel_is_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(pin.PinError, match="a wheel of 'gitsync', not of apisix-gitsync"):
        pin.from_wheel(_wheel(tmp_path, name="gitsync"))
    (tmp_path / "junk.whl").write_bytes(b"not a zip")
    with pytest.raises(pin.PinError, match=r"junk\.whl: cannot read the wheel"):
        pin.from_wheel(tmp_path / "junk.whl")
    with pytest.raises(pin.PinError, match="--wheel-url needs --wheel FILE"):
        pin.choose(None, "https://artifacts.example/w.whl")


def test_init_without_a_wheel_to_pin_writes_a_scaffold_whose_ci_fails_closed(tmp_path: Path) -> None:
    """This tree is not installed from a wheel (the suite imports it from the checkout): init writes the
    repo all the same, says how to pin it, and its requirements file is one pip refuses (no hash)."""
    repo = tmp_path / "config"
    result = run_gitsync("init", str(repo))
    assert result.returncode == 0, result.stderr
    assert "is not pinned yet" in result.stderr and "gitsync init --pin-only --wheel apisix_gitsync-" in \
        result.stderr and "pip download apisix-gitsync==" in result.stderr
    requirements = (repo / pin.REQUIREMENTS).read_text()
    assert "NOT PINNED YET" in requirements and "--hash" not in requirements.split("NOT PINNED")[1]
    (tmp_path / "index").mkdir()  # the wheel is to be had: pip refuses it for the missing hash alone
    _wheel(tmp_path / "index", version=gitsync.__version__)
    refused = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed",
                              "--no-index", "--find-links", str(tmp_path / "index"), "--require-hashes",
                              "--no-deps", "-r", str(repo / pin.REQUIREMENTS)],
                             capture_output=True, text=True, timeout=120)
    assert refused.returncode != 0 and "Hashes are required in --require-hashes mode" in refused.stderr
    assert run_gitsync("validate", "--dir", str(repo)).returncode == 0  # the rest of the scaffold as ever
    pinned = run_gitsync("init", "--pin-only", str(repo))
    assert pinned.returncode == 2 and "--pin-only needs the wheel your agents run" in pinned.stderr
    assert (repo / pin.REQUIREMENTS).read_text() == requirements  # nothing rewritten


def test_pin_only_moves_an_existing_repos_ci_to_another_wheel(tmp_path: Path) -> None:
    repo = tmp_path / "config"
    assert run_gitsync("init", str(repo), "--wheel", str(_wheel(tmp_path, version="1.0.0"))).returncode == 0
    (tmp_path / "newer").mkdir()
    newer = _wheel(tmp_path / "newer", version="1.1.0")
    routes = (repo / "routes/api.yaml").read_text()
    moved = run_gitsync("init", "--pin-only", "--wheel", str(newer), str(repo))
    assert moved.returncode == 0, moved.stderr
    assert "apisix-gitsync==1.1.0 \\" in (repo / pin.REQUIREMENTS).read_text()
    assert hashlib.sha256(newer.read_bytes()).hexdigest() in (repo / pin.REQUIREMENTS).read_text()
    assert (repo / "routes/api.yaml").read_text() == routes  # nothing else rewritten
    assert run_gitsync("init", str(repo), "--wheel", str(newer)).returncode == 2  # a whole init: never over


def test_the_wheel_pip_recorded_is_the_default_pin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """pip writes the wheel's URL and sha256 into the installed distribution's direct_url.json (PEP 610)."""
    site = tmp_path / "site"
    info = site / f"apisix_gitsync-{gitsync.__version__}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.3\nName: apisix-gitsync\n"
                                   f"Version: {gitsync.__version__}\nRequires-Dist: httpx<1,>=0.28\n"
                                   "Requires-Dist: ruff; extra == 'test'\n")
    direct = {"url": "file:///srv/wheels/x.whl", "archive_info": {"hashes": {"sha256": "ab" * 32}}}
    (info / "direct_url.json").write_text(json.dumps(direct))
    monkeypatch.syspath_prepend(str(site))
    recorded = pin.choose(None, None)
    assert recorded == pin.WheelPin(gitsync.__version__, "ab" * 32, ("httpx<1,>=0.28",), None)
    (info / "direct_url.json").write_text(json.dumps(direct | {"url": "https://artifacts.example/x.whl"}))
    assert pin.choose(None, None).url == "https://artifacts.example/x.whl"
    (info / "direct_url.json").write_text(json.dumps({"url": "file:///src", "dir_info": {"editable": True}}))
    unpinned = pin.choose(None, None)  # an editable install: no hash, a file that stops CI until pinned
    assert unpinned.sha256 is None and "pip recorded no wheel hash" in unpinned.why
    assert "NOT PINNED YET" in unpinned.requirements() and "--hash" not in unpinned.requirements()
