"""What a render takes from the settings and the environment: vars, secrets, limits
(gitsync.render.environment)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gitsync import log as gslog
from gitsync.render.environment import SecretsLookup, not_utf8, options_from_settings, read_vars_file
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


# ---------------------------------------------------------------------------------------------------------
# SecretsLookup itself: each rule of what a name may read, and where


@pytest.fixture
def secrets_dir(tmp_path: Path) -> Path:
    """A secrets directory: TOP at the top, orders/OWN and orders/TOP in the source orders' own."""
    top = tmp_path / "secrets"
    (top / "orders").mkdir(parents=True)
    (top / "TOP").write_text("  top-secret-value-1  \n")
    (top / "orders" / "OWN").write_text("orders-own-value-1\n")
    (top / "orders" / "TOP").write_text("orders-top-value-1\n")
    return top


@pytest.mark.parametrize("name", ["../TOP", "TOP/x", "1TOP", "TOP-1", "", "T OP", "TOP\n"])
def test_a_name_that_is_not_one_reads_nothing(secrets_dir: Path, name):
    assert SecretsLookup(secrets_dir, {f"GITSYNC_SECRET_{name}": "env-value-00001"})(name) is None


def test_a_lookup_without_sources_reads_the_directory_then_the_environment(secrets_dir: Path):
    env = {"GITSYNC_SECRET_TOP": "env-loses-00001", "GITSYNC_SECRET_ENV": "e-v-1", "SECRET_OTHER": "x",
           "GITSYNC_SECRET_": "empty-name"}
    lookup = SecretsLookup(secrets_dir, env)
    assert lookup("TOP") == "top-secret-value-1"  # stripped
    assert lookup("ENV") == "e-v-1" and lookup("OTHER") is None and lookup("_TOP") is None
    assert lookup("orders") is None  # a directory is no secret
    assert SecretsLookup(None, {"GITSYNC_SECRET_ENV": "e-v-1"})("ENV") == "e-v-1"
    assert SecretsLookup(None, {})("TOP") is None


def test_a_source_reads_its_own_directory_first_and_the_rest_only_for_names_shared_with_it(secrets_dir: Path):
    env = {"GITSYNC_SECRET_ENV": "env-value-00001"}
    alone = SecretsLookup(secrets_dir, env, source="orders")
    assert alone("OWN") == "orders-own-value-1" and alone("TOP") == "orders-top-value-1"
    assert alone("ENV") is None
    (secrets_dir / "orders" / "TOP").unlink()
    assert alone("TOP") is None  # the directory's own: not shared
    shared = SecretsLookup(secrets_dir, env, source="orders", shared=["TOP", "ENV"])
    assert shared("TOP") == "top-secret-value-1" and shared("ENV") == "env-value-00001"
    (secrets_dir / "orders" / "TOP").write_text("orders-top-value-1\n")
    assert shared("TOP") == "orders-top-value-1"  # its own first
    other = SecretsLookup(secrets_dir, env, source="payments", shared=["TOP"])
    assert other("OWN") is None and other("TOP") == "top-secret-value-1"


@pytest.mark.parametrize("name", ["admin_key", "Admin_Key", "GIT_TOKEN", "age_key"])
def test_gitsyncs_own_credentials_are_refused_by_name_in_any_case(secrets_dir: Path, name):
    (secrets_dir / name).write_text("a-credential-00001\n")
    with pytest.raises(SettingsError, match=f"^secrets.{name} names one of gitsync's own credentials"):
        SecretsLookup(secrets_dir, {})(name)


def test_a_file_gitsync_reads_is_refused_by_what_it_is_not_by_its_name(secrets_dir: Path, tmp_path: Path):
    key = tmp_path / "key"
    key.write_text("the-key-value-00001\n")
    (secrets_dir / "LINK").symlink_to(key)
    (secrets_dir / "orders" / "MINE").symlink_to(key)
    lookup = SecretsLookup(secrets_dir, {}, refused_files=[key, tmp_path / "missing"], source="orders",
                           shared=["LINK"])
    with pytest.raises(SettingsError, match=r"LINK: a file gitsync reads for itself"):
        lookup("LINK")
    with pytest.raises(SettingsError, match=r"orders/MINE: a file gitsync reads for itself"):
        lookup("MINE")
    assert lookup("OWN") == "orders-own-value-1"
    assert SecretsLookup(secrets_dir, {})("LINK") == "the-key-value-00001"  # not refused: read


def test_a_secret_that_cannot_be_read_as_text_is_an_error_naming_it(secrets_dir: Path):
    (secrets_dir / "BINARY").write_bytes(b"\xff\xfe")
    with pytest.raises(SettingsError, match=r"secrets/BINARY: cannot read the secret: 'utf-8' codec"):
        SecretsLookup(secrets_dir, {})("BINARY")
    (secrets_dir / "FILE").write_text("x")
    assert SecretsLookup(secrets_dir / "FILE", {})("TOP") is None  # a path through a file: nothing there
    with pytest.raises(SettingsError, match=r"^GITSYNC_SECRET_BAD: cannot read the secret: it holds"):
        SecretsLookup(None, {"GITSYNC_SECRET_BAD": "bad-\udcc3\udca9-value"})("BAD")  # é, as bytes
    with pytest.raises(SettingsError, match=r"^GITSYNC_SECRET_BAD: cannot read the secret: 'utf-8' codec"):
        SecretsLookup(None, {"GITSYNC_SECRET_BAD": "bad-\udcff-value"})("BAD")  # no UTF-8 at all


def test_a_secret_read_is_masked_in_the_log_at_once(secrets_dir: Path):
    (secrets_dir / "FRESH").write_text("a-fresh-secret-value-7731\n")
    assert gslog.redact("a-fresh-secret-value-7731") == "a-fresh-secret-value-7731"
    assert SecretsLookup(secrets_dir, {})("FRESH") == "a-fresh-secret-value-7731"
    assert gslog.redact("x a-fresh-secret-value-7731 y") == "x *** y"


@pytest.mark.parametrize(("text", "why"), [
    ("plain", None), ("é ü", None),
    ("\udcc3\udca9", "it holds characters that are not UTF-8"),  # UTF-8 bytes the environment held apart
    ("\udcff", "'utf-8' codec can't decode byte 0xff in position 0: invalid start byte"),
])
def test_an_environment_value_is_utf8_or_says_why_not(text, why):
    assert not_utf8(text) == why
