"""Signature policy: which commits may be applied (any, or signed by a trusted SSH or OpenPGP key).

Trust is always explicit (an allowed-signers file, or key ids + keyring): dulwich alone lets
unsigned commits through when it has no key ids."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from dulwich.objects import Commit

from gitsync.log import logger
from gitsync.source.transport import SourceError

if TYPE_CHECKING:
    from sshsig.ssh_public_key import PublicKey

    from gitsync.settings import Settings

VERIFY_POLICIES = ("none", "ssh", "gpg")
MIN_GPG_KEY_ID = 16  # hex digits: short (8-digit) key ids collide on purpose-built keys


@dataclass(frozen=True)
class SignaturePolicy:
    """Which commits may be applied: any (``none``), or signed by a trusted ssh or OpenPGP key.

    Trust is always explicit (an allowed-signers file, or key ids + keyring): dulwich alone lets
    unsigned commits through when it has no key ids."""

    verify: str = "none"
    allowed_signers_file: Path | None = None
    gpg_key_ids: tuple[str, ...] = ()
    gpg_keyring_file: Path | None = None

    def __post_init__(self) -> None:
        keys = tuple(k.strip().upper().removeprefix("0X") for k in self.gpg_key_ids if k.strip())
        object.__setattr__(self, "gpg_key_ids", keys)
        if self.verify not in VERIFY_POLICIES:
            raise SourceError("config", f"verify must be one of {', '.join(VERIFY_POLICIES)}, "
                                        f"not {self.verify!r}")
        if self.verify == "ssh" and self.allowed_signers_file is None:
            raise SourceError("config", 'verify = "ssh" needs allowed_signers_file')
        if self.verify == "gpg":
            if not keys:
                raise SourceError("config", 'verify = "gpg" needs gpg_key_ids (trusted key fingerprints)')
            short = [k for k in keys if len(k) < MIN_GPG_KEY_ID or not _is_hex(k)]
            if short:
                raise SourceError("config", f"gpg_key_ids must be long key ids or fingerprints "
                                            f"(16+ hex digits): {', '.join(short)}")

    @classmethod
    def from_settings(cls, settings: Settings) -> SignaturePolicy:
        return cls(settings.verify, settings.allowed_signers_file, tuple(settings.gpg_key_ids),
                   settings.gpg_keyring_file)




def _signature_kind(signature: bytes) -> str | None:
    if signature.lstrip().startswith(b"-----BEGIN SSH SIGNATURE-----"):
        return "ssh"
    if signature.lstrip().startswith(b"-----BEGIN PGP SIGNATURE-----"):
        return "gpg"
    return None


def allowed_signers(path: Path, namespace: str = "git") -> list[tuple[str, PublicKey]]:
    """The keys of an OpenSSH allowed-signers file usable now for `namespace`, each with its principals
    pattern list (``*``, ``?``, ``!``, comma-separated): an entry limited to other namespaces, a
    certificate authority, or one outside its valid-after/valid-before window is left out. Raises
    SourceError (stage ``verify``) when the file cannot be read."""
    import sshsig.allowed_signers
    import sshsig.ssh_public_key

    try:
        with open(path) as f:
            signers = list(sshsig.allowed_signers.load_allowed_signers_file(f))
    except (OSError, ValueError, NotImplementedError, UnicodeDecodeError) as exc:
        raise SourceError("verify", f"cannot read allowed signers {path}: {exc}") from None
    keys = []
    now = time.strftime("%Y%m%d%H%M%S", time.gmtime())
    for signer in signers:
        options = signer.options or {}
        namespaces = options.get("namespaces")
        if namespaces is not None and namespace not in [n.strip() for n in namespaces.split(",")]:
            continue
        if "cert-authority" in options:
            continue
        if not _within(options.get("valid-after"), options.get("valid-before"), now):
            continue
        with contextlib.suppress(ValueError, NotImplementedError):
            openssh = f"{signer.key_type} {signer.base64_key}"
            keys.append((signer.principals, sshsig.ssh_public_key.PublicKey.from_openssh_str(openssh)))
    return keys


def _verify_ssh(sha: str, payload: bytes, signature: bytes, allowed_signers_file: Path | None) -> None:
    """An SSH signature (namespace ``git``) by a key of the allowed-signers file that is valid now."""
    import sshsig.sshsig

    assert allowed_signers_file is not None
    keys = [key for _, key in allowed_signers(allowed_signers_file)]
    if not keys:
        raise SourceError("verify", f"no usable key in allowed signers {allowed_signers_file}")
    try:
        sshsig.sshsig.verify(payload, signature.decode("ascii", "replace"), keys, namespace="git")
    except Exception as exc:  # a forged blob can make the library fail in its own ways (an assert)
        detail = str(exc) or "it does not match the commit"
        raise SourceError("verify", f"commit {sha}: bad or untrusted SSH signature ({detail})") from None


def _within(valid_after: str | None, valid_before: str | None, now: str) -> bool:
    """OpenSSH allowed-signers validity (YYYYMMDD[HHMM[SS]][Z]), compared as UTC digit strings."""
    def digits(stamp: str) -> str:
        return stamp.rstrip("Zz").ljust(14, "0")

    if valid_after and now < digits(valid_after):
        return False
    return not (valid_before and now >= digits(valid_before))


def _verify_gpg(sha: str, payload: bytes, signature: bytes, key_ids: Sequence[str],
                keyring_file: Path | None, timeout: float) -> None:
    """An OpenPGP signature that gpg calls good, made by one of `key_ids`, checked in a private
    GNUPGHOME holding only the keyring file's keys (or the default keyring when none is given)."""
    gpg = shutil.which("gpg")
    if gpg is None:
        raise SourceError("verify", 'verify = "gpg" needs the gpg program, which is not installed')
    with tempfile.TemporaryDirectory(prefix="gitsync-gpg-") as home:
        base = [gpg, "--batch", "--no-tty", "--no-autostart"]
        if keyring_file is not None:
            base += ["--homedir", home]
            imported = _run([*base, "--import", str(keyring_file)], timeout)
            if imported.returncode != 0:
                raise SourceError("verify", f"cannot import the keyring {keyring_file}")
        sig_path, data_path = Path(home) / "commit.sig", Path(home) / "commit.data"
        sig_path.write_bytes(signature)
        data_path.write_bytes(payload)
        result = _run([*base, "--status-fd", "1", "--verify", str(sig_path), str(data_path)], timeout)
    status = result.stdout.decode("utf-8", "replace").splitlines()
    good = any(line.startswith("[GNUPG:] GOODSIG ") for line in status)
    fingerprints = {field.upper() for line in status if line.startswith("[GNUPG:] VALIDSIG ")
                    for field in (line.split()[2], line.split()[-1])}
    if result.returncode != 0 or not good or not fingerprints:
        reason = next((line.split()[1] for line in status if line.split()[1:2] and line.split()[1] in (
            "BADSIG", "ERRSIG", "EXPKEYSIG", "REVKEYSIG", "EXPSIG", "NO_PUBKEY")), "not a good signature")
        raise SourceError("verify", f"commit {sha}: bad or unknown OpenPGP signature ({reason})")
    if not any(fpr.endswith(key) for fpr in fingerprints for key in key_ids):
        raise SourceError("verify", f"commit {sha}: signed by {', '.join(sorted(fingerprints))}, "
                                    f"which is not in gpg_key_ids")


def _run(args: list[str], timeout: float) -> subprocess.CompletedProcess[bytes]:
    try:
        return subprocess.run(args, capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise SourceError("verify", f"{Path(args[0]).name} did not finish within {timeout:g}s") from None




def _is_hex(text: str) -> bool:
    return all(c in "0123456789ABCDEF" for c in text)


def verify_commit(commit: Commit, policy: SignaturePolicy, timeout: float) -> None:
    """Apply the signature policy to `commit`; SourceError if it must not be applied."""
    if policy.verify == "none":
        return
    sha = commit.id.decode()
    payload, signature, _ = commit.extract_signature()
    if not signature:
        raise SourceError("verify", f"commit {sha} is not signed (verify = {policy.verify})")
    kind = _signature_kind(signature)
    if kind != policy.verify:
        raise SourceError("verify", f"commit {sha} has {'a ' + kind if kind else 'an unknown kind of'} "
                                    f"signature, but verify = {policy.verify}")
    if kind == "ssh":
        _verify_ssh(sha, payload, signature, policy.allowed_signers_file)
    else:
        _verify_gpg(sha, payload, signature, policy.gpg_key_ids, policy.gpg_keyring_file, timeout)
    logger.debug("commit {} has a trusted {} signature", sha, kind)
