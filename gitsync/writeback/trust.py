"""Signed statuses: each agent signs its write-back commits with its own SSH key, and readers count
a status only when its commit is signed by a key `status_signers` allows for that agent and group.

The signature is the one git makes with ``gpg.format = ssh``: an SSHSIG (OpenSSH's PROTOCOL.sshsig)
in the namespace ``git`` over the commit without its ``gpgsig`` header, armored, in that header. So
``git log --show-signature refs/gitsync/status/<agent>`` with ``gpg.ssh.allowedSignersFile`` set to
the same file checks one by hand.

`status_signers` is an OpenSSH allowed-signers file. Its principals say whom a key may speak for:
``<agent>@<group>`` (the agent's name as its status ref writes it, `gitsync.names.principal`), or
the agent's name alone for an agent without a group; patterns as OpenSSH reads them (``*``, ``?``,
``!``, comma-separated), so ``*@canary`` lets one key speak for every canary, which defeats the
point but is the operator's choice. An entry limited by ``namespaces=`` must include ``git``.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import io
import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from dulwich.objects import Commit

from gitsync.names import decode_slug, principal
from gitsync.source.signatures import allowed_signers
from gitsync.writeback.statusfile import Verdict

if TYPE_CHECKING:
    from sshsig.ssh_public_key import PublicKey

NAMESPACE = b"git"  # what git signs commits in: `git verify-commit` checks this one
HASH = b"sha512"


class SigningError(Exception):
    """The signing key cannot be used (missing, encrypted, of a kind gitsync does not sign with)."""


def _string(value: bytes) -> bytes:
    return len(value).to_bytes(4, "big") + value


class StatusSigner:
    """This agent's private key: signs a commit's payload as ``git commit -S`` with an SSH key does."""

    def __init__(self, path: Path) -> None:
        from cryptography.hazmat.primitives import serialization  # only where a key is configured
        from cryptography.hazmat.primitives.asymmetric import ed25519, rsa

        try:
            key = serialization.load_ssh_private_key(Path(path).read_bytes(), password=None)
        except (OSError, ValueError, TypeError) as exc:
            raise SigningError(f"signing key {path}: cannot use it ({exc}); it must be an unencrypted "
                               "OpenSSH ed25519 or RSA private key") from None
        if not isinstance(key, ed25519.Ed25519PrivateKey | rsa.RSAPrivateKey):
            raise SigningError(f"signing key {path}: {type(key).__name__} keys are not supported: "
                               "use ed25519 (or RSA)")
        self._key = key
        openssh = key.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                                serialization.PublicFormat.OpenSSH)
        self.public_openssh = openssh.decode()
        self._public_blob = base64.b64decode(openssh.split()[1])

    def sign(self, payload: bytes, namespace: bytes = NAMESPACE) -> bytes:
        """The armored SSHSIG of `payload` (namespace ``git`` unless another is given, SHA-512): a
        signature in one namespace never verifies in another (an artifact's is not a status's)."""
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ed25519, padding
        from sshsig.binary_io import SshWriter

        signed = (b"SSHSIG" + _string(namespace) + _string(b"") + _string(HASH)
                  + _string(hashlib.sha512(payload).digest()))
        if isinstance(self._key, ed25519.Ed25519PrivateKey):
            blob = _string(b"ssh-ed25519") + _string(self._key.sign(signed))
        else:
            signature = self._key.sign(signed, padding.PKCS1v15(), hashes.SHA512())
            blob = _string(b"rsa-sha2-512") + _string(signature)
        out = SshWriter(io.BytesIO())
        out.write(b"SSHSIG")
        out.write_uint32(1)
        for part in (self._public_blob, namespace, b"", HASH, blob):
            out.write_string(part)
        armored = base64.b64encode(out.output_fh.getvalue()).decode()
        lines = [armored[i:i + 76] for i in range(0, len(armored), 76)]
        return "\n".join(["-----BEGIN SSH SIGNATURE-----", *lines, "-----END SSH SIGNATURE-----\n"]).encode()

    def signed(self, commit: Commit) -> bool:
        """Whether `commit` carries a good signature by this key."""
        import sshsig.sshsig
        from sshsig.ssh_public_key import PublicKey

        payload, signature, _ = commit.extract_signature()
        if not signature:
            return False
        try:
            key = sshsig.sshsig.check_signature(payload, signature, namespace=NAMESPACE.decode())
            return bool(key == PublicKey.from_openssh_str(self.public_openssh))
        except Exception:
            return False

    def sign_commit(self, commit: Commit) -> None:
        """Put the signature of `commit` (as it is now, unsigned) in its ``gpgsig`` header."""
        commit.gpgsig = self.sign(commit.as_raw_string())


def _pattern(text: str) -> re.Pattern[str]:
    """One OpenSSH pattern (``*``, ``?``; nothing else is special) as a regular expression."""
    return re.compile("".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in text) + r"\Z")


def matches(patterns: str, name: str) -> bool:
    """OpenSSH's `match_pattern_list`: a negated pattern (``!x``) that matches refuses; else any match."""
    found = False
    for pattern in (p.strip() for p in patterns.split(",")):
        negated = pattern.startswith("!")
        if _pattern(pattern[1:] if negated else pattern).match(name):
            if negated:
                return False
            found = True
    return found


class StatusSigners:
    """`status_signers`: which key may speak for which agent and group."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._keys = allowed_signers(self.path, NAMESPACE.decode())

    def __len__(self) -> int:
        return len(self._keys)

    def agents_of(self, group: str) -> frozenset[str] | None:
        """The agents this file lets speak for `group`, when it names them one by one (principals
        ``<agent>@<group>``); None when a pattern with ``*`` or ``?`` might match one it does not name."""
        found = set()
        suffix = f"@{group}"
        for patterns, _key in self._keys:
            for pattern in (p.strip() for p in patterns.split(",")):
                if pattern.startswith("!"):
                    continue
                if "*" in pattern or "?" in pattern:
                    tail = pattern.rpartition("@")[2] if "@" in pattern else "*"
                    if "*" in tail or "?" in tail or tail == group:
                        return None
                elif pattern.endswith(suffix):
                    slug = pattern[:-len(suffix)]
                    with contextlib.suppress(UnicodeDecodeError):
                        found.add(decode_slug(slug))
        return frozenset(found)

    def verify(self, commit: Commit, agent: str, group: str | None) -> Verdict:
        """Is `commit` signed by a key allowed for `agent` in `group`? Never raises."""
        payload, signature, _ = commit.extract_signature()
        if not signature:
            return Verdict(False, "not signed")
        key = signing_key(payload, signature, NAMESPACE.decode())
        if key is None:
            return Verdict(False, "bad signature")
        who = principal(agent, group)
        if allows(self._keys, key, who):
            return Verdict(True)
        return Verdict(False, f"signed by {fingerprint(key)}, which status_signers does not allow for {who}")


def signing_key(payload: bytes, signature: bytes, namespace: str) -> PublicKey | None:
    """The key of `signature` when it is a good signature of `payload` in `namespace`; None otherwise
    (any bytes an attacker wrote: a bad signature, whatever the library says)."""
    import sshsig.sshsig

    try:
        return sshsig.sshsig.check_signature(payload, signature, namespace=namespace)
    except Exception:
        return None


def allows(keys: Sequence[tuple[str, PublicKey]], key: PublicKey, who: str) -> bool:
    """Whether an allowed-signers entry lets `key` speak for principal `who`."""
    return any(key == allowed and matches(patterns, who) for patterns, allowed in keys)


def fingerprint(key: PublicKey) -> str:
    try:
        return key.sha256_str()
    except Exception:
        return "an unknown key"


__all__ = ["NAMESPACE", "SigningError", "StatusSigner", "StatusSigners", "Verdict", "allows", "fingerprint",
           "matches", "signing_key"]
