"""What ``gitsync init``, ``schema``, ``export`` and ``import`` write: never through a symbolic link,
never a file name a Windows checkout cannot hold, and all or nothing.

The commands run as real processes; `write_tree`'s undo on a failed write is driven in this process,
where the failing write can be made to happen.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from gitsync.adopt import repo_writer
from gitsync.testing.apisix import ApisixDouble
from testkit.processes import run_gitsync

KEY = "test-admin-key"


def tree(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*"))


@pytest.mark.slow
def test_init_refuses_a_symlinked_pre_commit_config_before_writing_anything(tmp_path: Path) -> None:
    victim = tmp_path / "bashrc"
    victim.write_text("export PATH=/usr/bin\n")
    repo = tmp_path / "config"
    repo.mkdir()
    (repo / ".git").mkdir()  # an existing clone: dot-entries are allowed
    (repo / ".pre-commit-config.yaml").symlink_to(victim)
    result = run_gitsync("init", str(repo))
    assert result.returncode == 2, result.stdout + result.stderr
    assert ".pre-commit-config.yaml: a symbolic link; nothing is overwritten" in result.stderr
    assert "Traceback" not in result.stderr
    assert tree(repo) == [".git", ".pre-commit-config.yaml"]  # no .github/, .gitignore, .gitlab-ci.yml
    assert victim.read_text() == "export PATH=/usr/bin\n"


@pytest.mark.slow
def test_schema_out_refuses_symlinks_and_never_writes_through_them(tmp_path: Path) -> None:
    victim = tmp_path / "bashrc"
    victim.write_text("alias ll='ls -l'\n")
    out = tmp_path / ".schemas"
    out.mkdir()
    (out / "routes.schema.json").symlink_to(victim)
    result = run_gitsync("schema", "--out", str(out))
    assert result.returncode == 2, result.stdout + result.stderr
    assert "routes.schema.json: a symbolic link; nothing is written through it" in result.stderr
    assert victim.read_text() == "alias ll='ls -l'\n"
    assert tree(out) == ["routes.schema.json"]  # refused before the first file

    linked_dir = tmp_path / "elsewhere"
    linked_dir.mkdir()
    (tmp_path / "link").symlink_to(linked_dir, target_is_directory=True)
    result = run_gitsync("schema", "--out", str(tmp_path / "link"))
    assert result.returncode == 2 and "is a symbolic link; give a real directory" in result.stderr
    assert list(linked_dir.iterdir()) == []


@pytest.mark.slow
def test_schema_out_replaces_its_files_without_touching_a_hard_links_other_name(tmp_path: Path) -> None:
    out = tmp_path / ".schemas"
    assert run_gitsync("schema", "--out", str(out)).returncode == 0
    shared = tmp_path / "shared.json"
    os.link(out / "config-file.schema.json", shared)
    shared.write_text("{}\n")  # the same file under both names
    again = run_gitsync("schema", "--out", str(out))
    assert again.returncode == 0, again.stderr
    assert shared.read_text() == "{}\n"
    assert (out / "config-file.schema.json").read_text().startswith("{\n")
    assert (out / "config-file.schema.json").stat().st_size > 1000
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # no temporary file left


RESERVED_IDS = ["CON", "nul", "aux.yaml", "COM1", "lpt9.x", "Prn", "com0", "LPT1.tar.gz", "Con."]


@pytest.mark.slow
def test_export_per_item_never_writes_windows_reserved_names(apisix: ApisixDouble, tmp_path: Path) -> None:
    apisix.out_of_band("routes", [{"id": ident, "uri": f"/{i}", "upstream": {"nodes": {"10.0.0.1:80": 1}}}
                                  for i, ident in enumerate(RESERVED_IDS)])
    key = tmp_path / "key"
    key.write_text(KEY)
    out = tmp_path / "repo"
    result = run_gitsync("export", "--gateway", apisix.url, "--admin-key-file", str(key), "--out", str(out),
                         "--layout", "per-item")
    assert result.returncode == 0, result.stdout + result.stderr  # written and proven: same content
    names = sorted(p.name for p in (out / "routes").iterdir())
    for name in names:
        base = name.split(".")[0].lower()
        assert base not in repo_writer.WINDOWS_RESERVED, name
        assert not name.endswith((".", " "))
    assert {"_CON.yaml", "_nul.yaml", "_aux.yaml.yaml", "_COM1.yaml", "_lpt9.x.yaml", "_Prn.yaml",
            "_com0.yaml", "_LPT1.tar.gz.yaml"} <= set(names)
    assert len(names) == len(RESERVED_IDS)


def test_write_tree_is_all_or_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "out"
    files = {"a.yaml": b"a", "b/c.yaml": b"c", "d/e/f.yaml": b"f"}
    (tmp_path / "target").write_text("keep")
    out.mkdir()
    (out / "d").mkdir()
    (out / "d" / "e").mkdir()
    (out / "d" / "e" / "f.yaml").symlink_to(tmp_path / "target")
    with pytest.raises(repo_writer.WriteError, match="a symbolic link"):
        repo_writer.write_tree(out, files)
    assert tree(out) == ["d", "d/e", "d/e/f.yaml"]  # a.yaml and b/ were not written first
    (out / "d" / "e" / "f.yaml").unlink()

    real_open = os.open
    opened = []

    def full_disk(path: str, flags: int, mode: int = 0o777) -> int:
        opened.append(path)
        if len(opened) == 3:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_open(path, flags, mode)

    monkeypatch.setattr(os, "open", full_disk)
    with pytest.raises(OSError, match="No space left"):
        repo_writer.write_tree(tmp_path / "new" / "out", files)
    monkeypatch.undo()
    assert len(opened) == 3
    assert not (tmp_path / "new").exists()  # the files it wrote and the directories it made are gone
    assert repo_writer.write_tree(out, files) and tree(out) == ["a.yaml", "b", "b/c.yaml", "d", "d/e",
                                                                 "d/e/f.yaml"]


def test_text_yaml_11_would_read_otherwise_is_written_quoted_and_read_back_without_a_warning() -> None:
    from gitsync.render.load import parse

    labels = {"a": "yes", "b": "on", "c": "1_000", "d": "2024-01-02", "e": "0777", "f": "plain", "g": "y"}
    data = repo_writer.dump_documents([{"routes": [{"id": "r1", "labels": labels, "priority": 777}]}])
    parsed = parse(data)
    assert parsed.issues == () and parsed.warnings == ()
    assert parsed.documents[0].data == {"routes": [{"id": "r1", "labels": labels, "priority": 777}]}
    assert b'a: "yes"' in data and b"f: plain" in data
