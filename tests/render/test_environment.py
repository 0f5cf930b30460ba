"""What a render takes from the settings and the environment: vars, secrets, limits
(gitsync.render.environment)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gitsync import log as gslog
from gitsync.render.environment import options_from_settings, read_vars_file
from gitsync.settings import Settings, SettingsError


def test_options_from_settings(tmp_path: Path):
    vars_file = tmp_path / "vars.yaml"
    vars_file.write_text("HOST: from-file\nPORT: 8080\nONLY_FILE: yes\n")
    secrets_dir = tmp_path / "secrets"
    secrets_dir.mkdir()
    (secrets_dir / "FROM_DIR").write_text("dir-secret-value\n")
    settings = Settings(vars={"HOST": "from-settings"}, vars_file=vars_file, secrets_dir=secrets_dir,
                        paths=("base",), max_items=7, unmanaged=("secrets",))
    options = options_from_settings(settings, {"GITSYNC_SECRET_FROM_ENV": "env-secret-value",
                                               "GITSYNC_SECRET_FROM_DIR": "loses"})
    assert dict(options.vars) == {"HOST": "from-settings", "PORT": "8080", "ONLY_FILE": "yes"}
    assert options.paths == ("base",) and options.max_items == 7 and options.unmanaged == {"secrets"}
    assert options.secret_lookup("FROM_DIR") == "dir-secret-value"
    assert options.secret_lookup("FROM_ENV") == "env-secret-value"
    assert options.secret_lookup("NOPE") is None
    assert options.secret_lookup("../etc/passwd") is None
    assert gslog.redact("dir-secret-value env-secret-value") == "*** ***"
    vars_file.write_text("- not a mapping\n")
    with pytest.raises(SettingsError, match=r"vars\.yaml: the vars file must hold one mapping"):
        options_from_settings(settings, {})


def test_a_vars_file_is_one_mapping_of_names(tmp_path: Path):
    good = tmp_path / "vars.yaml"
    good.write_text("A: 1\nB: two\n")
    assert read_vars_file(good) == {"A": "1", "B": "two"}
    bad = tmp_path / "bad.yaml"
    bad.write_text("not-a-name!: 1\n")
    with pytest.raises(SettingsError, match="is not a valid name"):
        read_vars_file(bad)
    with pytest.raises(SettingsError, match="cannot read the vars file"):
        read_vars_file(tmp_path / "missing.yaml")
