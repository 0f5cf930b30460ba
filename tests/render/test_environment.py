"""What a render takes from the settings and the environment: vars, secrets, limits
(gitsync.render.environment)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gitsync import log as gslog
from gitsync.render.environment import options_from_settings, read_vars_file
from gitsync.settings import Settings, SettingsError, load, repos_of


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


def test_config_never_reads_gitsyncs_own_credentials_whatever_directory_they_share(tmp_path: Path):
    """Attack 3 of issue 41: ${{ secrets.admin_key }} beside the admin key; a link to it under another
    name; the settings file's own *_file paths."""
    shared = tmp_path / "run-secrets"
    shared.mkdir()
    for name in ("admin_key", "ui_token", "git_token", "VAULT_TOKEN"):
        (shared / name).write_text(f"value-of-{name}-0001\n")
    (shared / "INNOCENT").symlink_to(shared / "admin_key")
    (shared / "HARD").hardlink_to(shared / "git_token")
    key_file = tmp_path / "elsewhere-key"
    key_file.write_text("the-forge-token-0001\n")
    (shared / "LOOKS_FINE").symlink_to(key_file)
    config = tmp_path / "gitsync.toml"
    config.write_text(f'[render]\nsecrets_dir = "{shared}"\n[feedback]\nforge_token_file = "{key_file}"\n')
    settings = load(config=config, env={"CREDENTIALS_DIRECTORY": str(shared)})
    lookup = options_from_settings(settings, {"GITSYNC_SECRET_admin_key": "env-0000000000"}).secret_lookup
    assert lookup("VAULT_TOKEN") == "value-of-VAULT_TOKEN-0001"
    for name in ("admin_key", "ADMIN_KEY", "age_key", "git_token", "webhook_secret", "ui_token",
                 "forge_token"):
        with pytest.raises(SettingsError, match=f"^secrets.{name} names one of gitsync's own credentials"):
            lookup(name)
    for name, target in (("INNOCENT", "INNOCENT"), ("HARD", "HARD"), ("LOOKS_FINE", "LOOKS_FINE")):
        with pytest.raises(SettingsError, match=f"^{shared / target}: a file gitsync reads for itself"):
            lookup(name)


def test_a_source_reads_its_own_secrets_and_only_the_names_shared_with_it(tmp_path: Path):
    secrets = tmp_path / "secrets"
    (secrets / "orders").mkdir(parents=True)
    (secrets / "payments").mkdir()
    (secrets / "orders" / "DB_PASSWORD").write_text("orders-db-password\n")
    (secrets / "payments" / "DB_PASSWORD").write_text("payments-db-password\n")
    (secrets / "payments" / "STRIPE_KEY").write_text("payments-stripe-key\n")
    (secrets / "VAULT_TOKEN").write_text("platform-vault-token\n")
    (secrets / "PLATFORM_ONLY").write_text("platform-only-value\n")
    config = tmp_path / "gitsync.toml"
    config.write_text(f'[render]\nsecrets_dir = "{secrets}"\n'
                      '[[sources]]\nname = "orders"\nrepo = "/o"\n'
                      'owns = [{ kinds = ["routes"], prefix = "o-" }]\n'
                      'shared_secrets = ["VAULT_TOKEN", "FROM_ENV"]\n'
                      '[[sources]]\nname = "payments"\nrepo = "/p"\n'
                      'owns = [{ kinds = ["routes"], prefix = "p-" }]\n')
    settings = load(config=config, env={})
    env = {"GITSYNC_SECRET_FROM_ENV": "an-env-secret-value", "GITSYNC_SECRET_OTHER": "another-env-value"}
    orders, payments = (options_from_settings(repo.settings, env).secret_lookup
                        for repo in repos_of(settings))
    assert orders("DB_PASSWORD") == "orders-db-password" and payments("DB_PASSWORD") == "payments-db-password"
    assert orders("STRIPE_KEY") is None  # payments' own
    assert orders("VAULT_TOKEN") == "platform-vault-token" and payments("VAULT_TOKEN") is None
    assert orders("PLATFORM_ONLY") is None and orders("FROM_ENV") == "an-env-secret-value"
    assert orders("OTHER") is None and payments("FROM_ENV") is None
