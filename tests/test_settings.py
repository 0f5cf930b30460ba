from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from gitsync import settings as gs
from gitsync.log import redact
from gitsync.settings import Secret, SettingsError, load
from gitsync.writeback.remote import status_remote
from testkit.processes import ROOT, run_gitsync


def write(tmp_path: Path, text: str, name: str = "gitsync.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_priority_flag_over_env_over_file(tmp_path):
    cfg = write(tmp_path, '[agent]\ninterval = "1m"\njitter = "3s"\ndrift_interval = "20s"\n')
    s = load(config=cfg, env={})
    assert (s.interval, s.jitter, s.drift_interval) == (60.0, 3.0, 20.0)
    s = load(config=cfg, env={"GITSYNC_INTERVAL": "2m", "GITSYNC_JITTER": "4s"})
    assert (s.interval, s.jitter, s.drift_interval) == (120.0, 4.0, 20.0)
    s = load({"interval": "5m"}, config=cfg, env={"GITSYNC_INTERVAL": "2m"})
    assert (s.interval, s.jitter) == (300.0, 3.0)


def test_priority_through_the_real_command_line(tmp_path):
    cfg = write(tmp_path, '[agent]\nstate_dir = "/from/file"\n')
    # `status` prints nothing useful yet without a state dir; check the resolved value through load instead
    s = load({"state_dir": str(tmp_path / "flag")}, config=cfg, env={"GITSYNC_STATE_DIR": "/from/env"})
    assert s.state_dir == tmp_path / "flag"
    s = load({}, config=cfg, env={"GITSYNC_STATE_DIR": "/from/env"})
    assert s.state_dir == Path("/from/env")


def test_durations_sizes_lists_and_bools():
    s = load(env={"GITSYNC_INTERVAL": "250ms", "GITSYNC_GATEWAYS": "http://a:9180, http://b:9180",
                  "GITSYNC_MAX_PAYLOAD_SIZE": "2MiB", "GITSYNC_TLS_VERIFY": "no"}, config="/dev/null")
    assert s.interval == 0.25
    assert s.gateways == ("http://a:9180", "http://b:9180")
    assert s.max_payload_size == 2 * 1024 * 1024
    assert s.tls_verify is False


def test_toml_syntax_error_names_file_and_line(tmp_path):
    cfg = write(tmp_path, '[agent]\ninterval = "30s"\njitter = = 3\n')
    with pytest.raises(SettingsError) as err:
        load(config=cfg, env={})
    assert str(err.value).startswith(f"{cfg}:3:")
    assert "TOML syntax error" in str(err.value)


def test_unknown_key_names_its_path_line_and_a_hint(tmp_path):
    cfg = write(tmp_path, '[source]\nrepo = "x"\nrefs = "main"\n')
    with pytest.raises(SettingsError) as err:
        load(config=cfg, env={})
    assert str(err.value) == f"{cfg}:3: source.refs: unknown key (did you mean 'source.ref'?)"


def test_unknown_section_and_key_in_the_wrong_section(tmp_path):
    cfg = write(tmp_path, 'interval = "30s"\n')
    with pytest.raises(SettingsError) as err:
        load(config=cfg, env={})
    assert "interval: unknown key (it belongs in [agent])" in str(err.value)
    assert str(err.value).startswith(f"{cfg}:1:")


def test_wrong_type_names_the_key_path(tmp_path):
    cfg = write(tmp_path, '[agent]\n\ninterval = true\n')
    with pytest.raises(SettingsError) as err:
        load(config=cfg, env={})
    assert str(err.value) == f"{cfg}:3: agent.interval: expected a duration such as 30s or 5m, got a boolean"
    cfg = write(tmp_path, '[gateways]\ngateways = "http://one"\n')
    with pytest.raises(SettingsError, match=r":2: gateways.gateways: expected an array of strings"):
        load(config=cfg, env={})
    with pytest.raises(SettingsError, match=r"^GITSYNC_PUSH_ATTEMPTS: expected an integer"):
        load(config="/dev/null", env={"GITSYNC_PUSH_ATTEMPTS": "many"})


def test_inline_secret_is_refused_with_how_to_pass_it(tmp_path):
    cfg = write(tmp_path, '[gateways]\nadmin_key = "edd1c9f034335f136f87ad84b625c8f1"\n')
    with pytest.raises(SettingsError) as err:
        load(config=cfg, env={})
    text = str(err.value)
    assert text.startswith(f"{cfg}:2: gateways.admin_key: secrets are not read from the settings file")
    assert "admin_key_file" in text and "GITSYNC_ADMIN_KEY" in text and "LoadCredential" in text
    assert "edd1c9f034335f136f87ad84b625c8f1" not in text


def test_secrets_from_file_env_and_credentials_directory(tmp_path):
    key = tmp_path / "admin_key"
    key.write_text("file-secret-value\n")
    cfg = write(tmp_path, f'[gateways]\nadmin_key_file = "{key}"\n')
    s = load(config=cfg, env={})
    assert isinstance(s.admin_key, Secret) and s.admin_key.reveal() == "file-secret-value"
    assert "file-secret-value" not in repr(s)
    assert redact("key=file-secret-value") == "key=***"
    s = load(config=cfg, env={"GITSYNC_ADMIN_KEY": "env-secret-value"})
    assert s.admin_key.reveal() == "env-secret-value"
    creds = tmp_path / "creds"
    creds.mkdir()
    (creds / "webhook_secret").write_text("hook-secret-value")
    s = load(config="/dev/null", env={"CREDENTIALS_DIRECTORY": str(creds)})
    assert s.webhook_secret.reveal() == "hook-secret-value"
    # the credentials directory is gitsync's own: not where ${{ secrets.NAME }} reads (docs/security.md)
    assert s.secrets_dir == (gs.DEFAULT_SECRETS_DIR if gs.DEFAULT_SECRETS_DIR.is_dir() else None)
    assert creds / "webhook_secret" in s.credential_files and creds / "admin_key" in s.credential_files
    assert s.notices == ()
    (creds / "VAULT_TOKEN").write_text("a-config-secret-value")  # an install that used the old default
    s = load(config="/dev/null", env={"CREDENTIALS_DIRECTORY": str(creds)})
    assert s.notices == (
        f"secrets_dir is not set: ${{{{ secrets.NAME }}}} no longer reads {creds} (the directory of "
        "gitsync's own credentials), which holds other files; move the config's secrets to "
        f"/etc/gitsync/secrets, or set secrets_dir = \"{creds}\" (gitsync's own credentials stay "
        "unreadable from config either way)",)
    with pytest.raises(SettingsError, match="cannot read"):
        load(config="/dev/null", env={"GITSYNC_ADMIN_KEY_FILE": str(tmp_path / "missing")})


def test_missing_required_value_and_missing_named_file(tmp_path):
    with pytest.raises(SettingsError, match=r"^gateways is required: set --gateway, GITSYNC_GATEWAYS"):
        load(config="/dev/null", env={}, require=["gateways"])
    with pytest.raises(SettingsError, match="cannot read the settings file"):
        load(config=tmp_path / "nope.toml", env={})


def test_unknown_environment_variable_and_unknown_kind():
    with pytest.raises(SettingsError, match=r"^GITSYNC_INTERVALL: unknown setting \(did you mean"):
        load(config="/dev/null", env={"GITSYNC_INTERVALL": "3s"})
    with pytest.raises(SettingsError, match="unknown kind 'secret'"):
        load({"unmanaged": ["secret"]}, config="/dev/null", env={})


def test_vars_from_table_and_environment(tmp_path):
    cfg = write(tmp_path, '[render.vars]\nHOST = "a.example"\nPORT = 8080\n')
    s = load(config=cfg, env={"GITSYNC_VAR_HOST": "b.example"})
    assert s.vars == {"HOST": "b.example", "PORT": "8080"}


def test_settings_errors_exit_2_through_the_cli(tmp_path):
    cfg = write(tmp_path, "[agent]\ninterval = [\n")
    result = run_gitsync("validate", "--config", str(cfg), "--dir", str(tmp_path))
    assert result.returncode == 2
    assert f"{cfg}:" in result.stderr and "TOML syntax error" in result.stderr


def test_configuration_docs_are_generated_from_the_specs():
    assert (ROOT / "docs" / "configuration.md").read_text() == gs.render_docs()


def test_gateway_urls_are_checked_without_echoing_a_password():
    expected = r"^--gateway: 'http://u:\*\*\*@host:notaport' has an invalid port"
    with pytest.raises(SettingsError, match=expected):
        load({"gateways": ["http://u:pw-1234@host:notaport"]}, config="/dev/null", env={})
    with pytest.raises(SettingsError, match="is not an http:// or https:// URL"):
        load(config="/dev/null", env={"GITSYNC_GATEWAYS": "127.0.0.1:9180"})
    assert load({"gateways": ["https://gw:9180"]}, config="/dev/null", env={}).gateways == ("https://gw:9180",)


def test_the_fetch_limits_cover_a_config_file_and_are_read_as_sizes():
    settings = load(env={"GITSYNC_MAX_OBJECT_SIZE": "64MiB", "GITSYNC_MAX_FETCH_OBJECTS": "1000",
                            "GITSYNC_MAX_FETCH_SIZE": "2GiB", "GITSYNC_MAX_STATUS_REFS": "50"},
                    config="/dev/null")
    assert (settings.max_object_size, settings.max_fetch_objects, settings.max_fetch_size,
            settings.max_status_refs) == (64 << 20, 1000, 2 << 30, 50)
    with pytest.raises(SettingsError, match=r"GITSYNC_MAX_OBJECT_SIZE: max_object_size \(1048576\) must "
                                            r"be at least max_file_size \(8388608\): a config file is one "
                                            r"git object"):
        load(env={"GITSYNC_MAX_OBJECT_SIZE": "1MiB"}, config="/dev/null")


def test_an_artifact_source_names_its_signers_and_its_repo(tmp_path):
    signers = tmp_path / "signers"
    signers.write_text("")
    oci = "oci://registry.example/config:main"
    with pytest.raises(SettingsError, match="artifact source: artifact_signers is required"):
        load({"repo": oci, "artifact_repo": "https://git.example/config"}, config="/dev/null", env={})
    with pytest.raises(SettingsError, match="artifact source: artifact_repo is required"):
        load({"repo": oci, "artifact_signers": str(signers)}, config="/dev/null", env={})
    with pytest.raises(SettingsError, match="checked with artifact_signers"):
        load({"repo": oci, "artifact_signers": str(signers), "artifact_repo": "https://git.example/config",
              "verify": "ssh"}, config="/dev/null", env={})
    settings = load({"repo": oci, "artifact_signers": str(signers), "artifact_repo": "https://git.example/config"},
                    config="/dev/null", env={})
    assert gs.config_repo(settings) == "https://git.example/config"
    assert gs.status_settings(settings).repo == "https://git.example/config"
    # notes stay on the config repo; the status refs follow status_remote (writeback.remote.status_remote)
    with_statuses = gs.status_settings(replace(settings, status_remote="https://git.example/statuses"))
    assert with_statuses.repo == "https://git.example/config"
    assert status_remote(with_statuses).url == "https://git.example/statuses"


def test_a_git_source_needs_none_of_the_artifact_settings():
    settings = load({"repo": "https://git.example/config"}, config="/dev/null", env={})
    assert settings.artifact_signers is None and settings.artifact_repo is None
    assert gs.status_settings(settings) is settings
    assert gs.config_repo(settings) == "https://git.example/config"


def test_status_remote_may_name_the_group_and_then_needs_one(tmp_path):
    base = {"repo": "git://127.0.0.1/config.git"}
    settings = load({**base, "status_remote": "git://127.0.0.1/status-{group}.git", "group": "canary"},
                    env={}, config=os.devnull)
    assert settings.status_remote == "git://127.0.0.1/status-{group}.git"
    assert load(base, env={}, config=os.devnull).status_remote is None  # the config repo: as before
    with pytest.raises(SettingsError, match=r"status_remote holds \{group\}, so this agent needs a group"):
        load({**base, "status_remote": "git://127.0.0.1/status-{group}.git"}, env={}, config=os.devnull)
    assert load({**base, "status_remote": "git://127.0.0.1/s-{group}.git", "writeback": "off"}, env={},
                config=os.devnull).group is None  # it writes nothing: it needs none
    with pytest.raises(SettingsError, match=r"status_remote may hold \{group\} and no other field"):
        load({**base, "status_remote": "git://127.0.0.1/{region}.git", "group": "a"}, env={},
             config=os.devnull)
    config = tmp_path / "gitsync.toml"
    config.write_text('[[sources]]\nname = "a"\nrepo = "git://127.0.0.1/a.git"\nowns = ["routes"]\n\n'
                      '[writeback]\nstatus_remote = "git://127.0.0.1/s.git"\n')
    with pytest.raises(SettingsError, match=r"status_remote cannot be set with \[\[sources\]\]"):
        load({}, env={}, config=config)
