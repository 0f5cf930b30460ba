"""Signed statuses (gitsync.writeback.trust): who may speak for which agent and group, and whom a signers
file names for a group.

`matches` is OpenSSH's principal pattern list (anchored at both ends, ``*``, ``?``, ``!`` refuses);
`StatusSigners.verify` accepts a status commit only when its key is allowed *for that principal*;
`StatusSigner` signs as ``git commit -S`` with an SSH key does, and the real ``git verify-commit``
accepts what it signs. Keys are made in the test, commits built in memory (dulwich objects)."""

from __future__ import annotations

import base64
import subprocess
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from dulwich.objects import Commit, Tree

from gitsync.writeback.statusfile import Verdict
from gitsync.writeback.trust import SigningError, StatusSigner, StatusSigners, matches

# ---------------------------------------------------------------------------------------------------------
# matches(): the principals' pattern list


@pytest.mark.parametrize(("patterns", "name", "expected"), [
    ("web-1", "web-1", True),
    ("web-1", "web-10", False),  # anchored at its end
    ("web-1", "xweb-1", False),  # and at its start
    ("eb-1", "web-1", False),
    ("web-1@canary", "web-1@canary", True),
    ("web-1@canary", "web-1@canary-2", False),
    ("web-1@canary", "web-1", False),
    ("*@canary", "web-1@canary", True),
    ("*@canary", "web-1@prod", False),
    ("*@canary", "@canary", True),  # * matches nothing too
    ("web-*", "web-", True),
    ("web-*", "web-1@x", True),
    ("web-?", "web-1", True),
    ("web-?", "web-10", False),  # ? is one character
    ("web-?", "web-", False),
    ("??", "ab", True),
    ("??", "a", False),
    ("a.b", "a.b", True),
    ("a.b", "axb", False),  # nothing but * and ? is special
    ("a+", "aa", False),
    ("a+", "a+", True),
    ("[ab]", "a", False),
    ("web-1,web-2", "web-2", True),
    ("web-1,web-2", "web-3", False),
    ("web-1, web-2", "web-2", True),  # blanks around a pattern do not count
    (" web-1 ,web-2", "web-1", True),
    ("", "web-1", False),
])
def test_a_pattern_list_matches_as_openssh_reads_it(patterns, name, expected):
    assert matches(patterns, name) is expected


@pytest.mark.parametrize(("patterns", "name", "expected"), [
    ("*,!web-1", "web-1", False),  # a negated pattern that matches refuses, whatever matched before
    ("!web-1,*", "web-1", False),  # or after
    ("*,!web-1", "web-2", True),
    ("*, !web-1", "web-1", False),
    ("!web-1", "web-2", False),  # a negation alone allows nothing
    ("!web-1", "web-1", False),
    ("*@canary,!web-9@*", "web-9@canary", False),
    ("*@canary,!web-9@*", "web-1@canary", True),
    ("!web-?,web-10", "web-10", True),
])
def test_a_negated_pattern_refuses(patterns, name, expected):
    assert matches(patterns, name) is expected


# ---------------------------------------------------------------------------------------------------------
# Keys, commits and the allowed-signers file


def _write_key(path: Path, key) -> Path:
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                       serialization.NoEncryption()))
    return path


@pytest.fixture(scope="module")
def keys(tmp_path_factory) -> dict[str, Path]:
    """Private key files: two ed25519 agents and one RSA agent."""
    root = tmp_path_factory.mktemp("keys")
    return {"a": _write_key(root / "a", ed25519.Ed25519PrivateKey.generate()),
            "b": _write_key(root / "b", ed25519.Ed25519PrivateKey.generate()),
            "rsa": _write_key(root / "rsa", rsa.generate_private_key(public_exponent=65537, key_size=2048))}


def status_commit(message: bytes = b"status of web-1\n") -> Commit:
    commit = Commit()
    commit.tree = Tree().id
    commit.author = commit.committer = b"gitsync <gitsync@localhost>"
    commit.author_time = commit.commit_time = 1_700_000_000
    commit.author_timezone = commit.commit_timezone = 0
    commit.message = message
    return commit


def signed_by(key: Path, message: bytes = b"status of web-1\n") -> Commit:
    commit = status_commit(message)
    StatusSigner(key).sign_commit(commit)
    return commit


def signers_file(tmp_path: Path, *entries: tuple[str, Path] | str) -> Path:
    """An allowed-signers file: (principals, private key path) entries, or raw lines."""
    lines = []
    for entry in entries:
        if isinstance(entry, str):
            lines.append(entry)
        else:
            principals, key = entry
            lines.append(f"{principals} {StatusSigner(key).public_openssh}")
    path = tmp_path / "allowed_signers"
    path.write_text("\n".join(lines) + "\n")
    return path


# ---------------------------------------------------------------------------------------------------------
# StatusSigners.verify: the key must be allowed for this principal


def test_a_key_allowed_for_its_agent_verifies_its_status(tmp_path, keys):
    signers = StatusSigners(signers_file(tmp_path, ("web-1@canary", keys["a"])))
    verdict = signers.verify(signed_by(keys["a"]), "web-1", "canary")
    assert verdict.verified and verdict.why == ""


def test_a_key_allowed_for_one_agent_cannot_sign_for_another(tmp_path, keys):
    """Both keys are allowed, each for its own agent: a's key speaking for web-2 is refused."""
    signers = StatusSigners(signers_file(tmp_path, ("web-1@canary", keys["a"]), ("web-2@canary", keys["b"])))
    assert signers.verify(signed_by(keys["b"]), "web-2", "canary").verified
    fingerprint = signers._keys[0][1].sha256_str()
    assert signers.verify(signed_by(keys["a"]), "web-2", "canary") == Verdict(
        False, f"signed by {fingerprint}, which status_signers does not allow for web-2@canary")


def test_the_group_is_part_of_whom_a_key_speaks_for(tmp_path, keys):
    signers = StatusSigners(signers_file(tmp_path, ("web-1@canary", keys["a"])))
    assert not signers.verify(signed_by(keys["a"]), "web-1", "prod").verified
    assert not signers.verify(signed_by(keys["a"]), "web-1", None).verified
    assert "does not allow for web-1@prod" in signers.verify(signed_by(keys["a"]), "web-1", "prod").why
    assert signers.verify(signed_by(keys["a"]), "web-1", None).why.endswith("does not allow for web-1")


def test_an_agent_without_a_group_is_its_name_alone(tmp_path, keys):
    signers = StatusSigners(signers_file(tmp_path, ("web-1", keys["a"])))
    assert signers.verify(signed_by(keys["a"]), "web-1", None).verified
    assert not signers.verify(signed_by(keys["a"]), "web-1", "canary").verified
    assert signers.verify(signed_by(keys["a"]), "web-1", "canary").why.endswith("for web-1@canary")


def test_a_pattern_speaks_for_what_it_matches_and_a_negation_refuses(tmp_path, keys):
    signers = StatusSigners(signers_file(tmp_path, ("*@canary,!web-9@canary", keys["a"])))
    assert signers.verify(signed_by(keys["a"]), "web-1", "canary").verified
    assert not signers.verify(signed_by(keys["a"]), "web-9", "canary").verified
    assert not signers.verify(signed_by(keys["a"]), "web-10", "canary-2").verified


def test_the_right_key_among_several_entries_is_found(tmp_path, keys):
    signers = StatusSigners(signers_file(tmp_path, ("web-2", keys["b"]), ("web-3", keys["a"]),
                                         ("web-1", keys["a"])))
    assert len(signers) == 3
    assert signers.verify(signed_by(keys["a"]), "web-1", None).verified
    assert signers.verify(signed_by(keys["a"]), "web-3", None).verified
    assert not signers.verify(signed_by(keys["b"]), "web-1", None).verified


def test_an_unsigned_status_is_refused(tmp_path, keys):
    signers = StatusSigners(signers_file(tmp_path, ("*", keys["a"])))
    assert signers.verify(status_commit(), "web-1", None) == Verdict(False, "not signed")


@pytest.mark.parametrize("tamper", ["message", "garbage"])
def test_a_bad_signature_is_refused(tmp_path, keys, tamper):
    signers = StatusSigners(signers_file(tmp_path, ("*", keys["a"])))
    commit = signed_by(keys["a"])
    if tamper == "message":
        commit.message = b"status of web-1: all applied\n"  # the signature is over the old message
    else:
        commit.gpgsig = b"-----BEGIN SSH SIGNATURE-----\nAAAA\n-----END SSH SIGNATURE-----\n"
    assert signers.verify(commit, "web-1", None) == Verdict(False, "bad signature")


def test_entries_for_other_namespaces_are_left_out(tmp_path, keys):
    public = StatusSigner(keys["a"]).public_openssh
    signers = StatusSigners(signers_file(tmp_path, f'web-1 namespaces="file" {public}'))
    assert len(signers) == 0
    assert not signers.verify(signed_by(keys["a"]), "web-1", None).verified
    assert len(StatusSigners(signers_file(tmp_path, f'web-1 namespaces="file,git" {public}'))) == 1


def test_the_agents_a_signers_file_names_for_a_group_or_none_when_a_pattern_may_name_more(tmp_path, keys):
    signers = StatusSigners(signers_file(tmp_path, ("canary-0@canary,main-0@main", keys["a"]),
                                         ("eu%2F1@canary,!canary-9@canary", keys["b"]),
                                         ("*@main", keys["b"])))
    assert signers.agents_of("canary") == {"canary-0", "eu/1"}  # decoded as agents name themselves
    assert signers.agents_of("main") is None  # *@main: any agent of main may speak
    assert signers.agents_of("edge") == frozenset()  # nobody may speak for it
    # no group: a name alone, and patterns may match x@canary too
    assert StatusSigners(signers_file(tmp_path, ("canary-?", keys["a"]))).agents_of("canary") is None


# ---------------------------------------------------------------------------------------------------------
# StatusSigner: signs as git does


@pytest.mark.parametrize("kind", ["a", "rsa"])
def test_what_it_signs_git_verifies_with_the_same_allowed_signers(tmp_path, keys, kind):
    """The signature is git's own: `git verify-commit` with gpg.ssh.allowedSignersFile accepts it."""
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", "--bare", str(repo)], check=True)
    commit = signed_by(keys[kind])
    raw = commit.as_raw_string()
    sha = subprocess.run(["git", "-C", str(repo), "hash-object", "-t", "commit", "-w", "--stdin"],
                         input=raw, capture_output=True, check=True).stdout.decode().strip()
    assert sha == commit.id.decode()
    allowed = signers_file(tmp_path, ("gitsync@localhost", keys[kind]))
    checked = subprocess.run(["git", "-C", str(repo), "-c", "gpg.format=ssh",
                              "-c", f"gpg.ssh.allowedSignersFile={allowed}", "verify-commit", sha],
                             capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr
    assert 'Good "git" signature' in checked.stderr


def test_the_armor_is_opensshs(keys):
    armored = StatusSigner(keys["a"]).sign(b"payload").decode()
    lines = armored.split("\n")
    assert lines[0] == "-----BEGIN SSH SIGNATURE-----"
    assert lines[-2:] == ["-----END SSH SIGNATURE-----", ""]
    body = lines[1:-2]
    assert all(len(line) == 76 for line in body[:-1]) and 0 < len(body[-1]) <= 76


def _strings(blob: bytes) -> list[bytes]:
    out = []
    while blob:
        size = int.from_bytes(blob[:4], "big")
        out.append(blob[4:4 + size])
        blob = blob[4 + size:]
    return out


def test_the_signature_blob_is_protocol_sshsig(tmp_path):
    """OpenSSH's PROTOCOL.sshsig: magic, version 1, the public key, namespace "git", an empty reserved
    field, "sha512", and the signature (its algorithm and bytes)."""
    keys = {"ed25519": ed25519.Ed25519PrivateKey.generate(),
            "rsa": rsa.generate_private_key(public_exponent=65537, key_size=1024)}
    for kind, key in keys.items():
        signer = StatusSigner(_write_key(tmp_path / kind, key))
        armored = signer.sign(b"payload").decode().split("\n")[1:-2]
        blob = base64.b64decode("".join(armored))
        assert blob[:6] == b"SSHSIG" and int.from_bytes(blob[6:10], "big") == 1
        public, namespace, reserved, hashing, signature = _strings(blob[10:])
        assert public == base64.b64decode(signer.public_openssh.split()[1])
        assert (namespace, reserved, hashing) == (b"git", b"", b"sha512")
        algorithm, _ = _strings(signature)
        assert algorithm == {"ed25519": b"ssh-ed25519", "rsa": b"rsa-sha2-512"}[kind]


def test_it_knows_its_own_signature_and_no_other(keys):
    own, other = StatusSigner(keys["a"]), StatusSigner(keys["b"])
    commit = signed_by(keys["a"])
    assert own.signed(commit)
    assert not other.signed(commit)
    assert not own.signed(status_commit())
    tampered = signed_by(keys["a"])
    tampered.message = b"another\n"
    assert not own.signed(tampered)


def test_signing_changes_only_the_signature_header(keys):
    commit = status_commit()
    unsigned = commit.as_raw_string()
    StatusSigner(keys["a"]).sign_commit(commit)
    payload, signature, _ = commit.extract_signature()
    assert payload == unsigned
    assert signature.startswith(b"-----BEGIN SSH SIGNATURE-----\n")


def test_a_key_it_cannot_sign_with_is_a_clear_error(tmp_path):
    ecdsa = _write_key(tmp_path / "ecdsa", ec.generate_private_key(ec.SECP256R1()))
    unsupported = r"ecdsa: EC\w*PrivateKey keys are not supported: use ed25519 \(or RSA\)$"
    with pytest.raises(SigningError, match=unsupported):
        StatusSigner(ecdsa)
    encrypted = tmp_path / "encrypted"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "passphrase", "-f", str(encrypted)],
                   check=True)
    with pytest.raises(SigningError, match=r"cannot use it .*must be an unencrypted OpenSSH ed25519 or RSA"):
        StatusSigner(encrypted)
    with pytest.raises(SigningError, match=rf"signing key {tmp_path / 'missing'}: cannot use it"):
        StatusSigner(tmp_path / "missing")


def test_its_public_key_is_the_openssh_line_of_its_private_key(keys):
    signer = StatusSigner(keys["a"])
    key_type, _ = signer.public_openssh.split()
    assert key_type == "ssh-ed25519"
    assert serialization.load_ssh_public_key(signer.public_openssh.encode()).public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw) == serialization.load_ssh_private_key(
        keys["a"].read_bytes(), None).public_key().public_bytes(serialization.Encoding.Raw,
                                                                serialization.PublicFormat.Raw)
