"""SOPS files decrypted in memory, in pure Python (AES-256-GCM values, age-wrapped data key).

A SOPS document keeps its keys in clear and replaces each value with
``ENC[AES256_GCM,data:…,iv:…,tag:…,type:…]``; the additional data of each value
is its key path joined by ``:`` plus a trailing ``:`` (list indices are not part
of it), so a value moved to another key no longer decrypts. The data key is
wrapped for each age recipient under ``sops.age``. ``sops.mac`` is the SHA-512
of every leaf value in walk order, encrypted with ``sops.lastmodified`` as
additional data: it is what catches values swapped inside a list, dropped,
added, or edited in clear. This module follows sops 3.11 (``sops.go``,
``aes/cipher.go``, the YAML and JSON stores) and was checked against files
written by the real binary (tests/render/test_sops.py).

Every decrypted value is registered with the log redactor the moment it is
decrypted. A failure of any kind raises `SopsError` naming the file; nothing is
returned until the whole file has decrypted and its MAC has matched.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import hashlib
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gitsync.log import register_secret
from gitsync.problems import Location, Problem, quote_name
from gitsync.settings import Settings

if TYPE_CHECKING:
    from pyrage.x25519 import Identity


def __getattr__(name: str) -> Any:
    """`Identity`, pyrage's age identity, imported when first used: pyrage and cryptography are
    loaded only by a process that has a key or a SOPS file (their import weighs on every start)."""
    if name == "Identity":
        import pyrage

        return pyrage.x25519.Identity
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

ENCRYPTED_VALUE = re.compile(r"^ENC\[AES256_GCM,data:(.+),iv:(.+),tag:(.+),type:(.+)\]")
DEFAULT_UNENCRYPTED_SUFFIX = "_unencrypted"
# sops seeds the hash with sha256(b"sops") when only encrypted values are MAC'ed, so the two
# modes never produce the same MAC (sops.go MACOnlyEncryptedInitialization).
MAC_ONLY_ENCRYPTED_SEED = hashlib.sha256(b"sops").digest()
RULE_NAMES = ("unencrypted_suffix", "encrypted_suffix", "unencrypted_regex", "encrypted_regex",
              "unencrypted_comment_regex", "encrypted_comment_regex")
# Decrypted values of these types are secrets for the redactor. Booleans and numbers are not
# registered: masking every "True" or "8080" would garble the logs, and a secret is a string.
_SECRET_KINDS = frozenset({"str", "bytes", "time"})
_GO_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_GO_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})

KeyPath = tuple[str | int, ...]


class SopsError(Exception):
    """A SOPS file that cannot be used: the message names the file and never holds a value."""

    def __init__(self, file: str, message: str, field: KeyPath = ()) -> None:
        self.file = file or "<sops document>"
        self.message = message
        self.field = field
        name = quote_name(self.file)
        where = f"{name}: {_dotted(field)}: " if field else f"{name}: "
        super().__init__(where + message)

    def problem(self) -> Problem:
        """The same error as a `Problem` of the file (render reports it with the others)."""
        return Problem(self.message, Location(self.file), field=_dotted(self.field) or None)


def _dotted(field: KeyPath) -> str:
    text = ""
    for part in field:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text


# --- identities -------------------------------------------------------------------------------

def parse_identities(text: str, origin: str) -> list[Identity]:
    """age identities from a key file's text: one per line, ``#`` comments and blank lines skipped."""
    import pyrage

    identities = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        register_secret(line)
        try:
            identities.append(pyrage.x25519.Identity.from_str(line))
        except pyrage.IdentityError:
            # Never echo the line: it is (a damaged copy of) a private key.
            raise SopsError(origin, f"line {number} is not an age identity (one starts with "
                                    "AGE-SECRET-KEY-1)") from None
    if not identities:
        raise SopsError(origin, "holds no age identity")
    return identities


def load_identities(age_key_file: Path | None, env: Mapping[str, str], *,
                    age_key: str | None = None) -> list[Identity]:
    """The host's age identities: gitsync's own setting first, else the variables sops reads.

    `age_key` is the identity text already read by the settings (from ``age_key_file``,
    ``GITSYNC_AGE_KEY`` or ``$CREDENTIALS_DIRECTORY/age_key``); without it `age_key_file` is
    read here. Without either, ``SOPS_AGE_KEY_FILE`` and ``SOPS_AGE_KEY`` are used, both when
    both are set, as sops itself does. No configured key gives ``[]``: only a SOPS file
    needs one, and `decrypt_document` says so.
    """
    if age_key is not None:
        return parse_identities(age_key, str(age_key_file) if age_key_file else "age_key")
    if age_key_file is not None:
        return parse_identities(_read_key_file(age_key_file, "age_key_file"), str(age_key_file))
    identities: list[Identity] = []
    if env.get("SOPS_AGE_KEY_FILE"):
        key_file = Path(env["SOPS_AGE_KEY_FILE"]).expanduser()
        identities += parse_identities(_read_key_file(key_file, "SOPS_AGE_KEY_FILE"), str(key_file))
    if env.get("SOPS_AGE_KEY"):
        identities += parse_identities(env["SOPS_AGE_KEY"], "SOPS_AGE_KEY")
    return identities


def identities_from_settings(settings: Settings, env: Mapping[str, str]) -> list[Identity]:
    """`load_identities` for the agent: ``age_key`` / ``age_key_file`` settings, else sops's variables."""
    age_key = settings.age_key.reveal() if settings.age_key is not None else None
    return load_identities(settings.age_key_file, env, age_key=age_key)


def _read_key_file(path: Path, origin: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise SopsError(str(path), f"cannot read the age key ({origin}): {reason}") from None


# --- metadata -----------------------------------------------------------------------------------

def is_sops_document(doc: object) -> bool:
    """True for a top-level mapping whose ``sops`` key is SOPS metadata (a mapping with mac or age)."""
    if not isinstance(doc, Mapping):
        return False
    meta = doc.get("sops")
    return isinstance(meta, Mapping) and ("mac" in meta or "age" in meta)


@dataclass(frozen=True)
class _Rule:
    """Which values of the file are encrypted (sops.go shouldBeEncrypted, one rule per file)."""

    name: str
    pattern: str

    def encrypts(self, path: Sequence[str]) -> bool:
        if self.name == "unencrypted_suffix":
            return not any(part.endswith(self.pattern) for part in path)
        if self.name == "encrypted_suffix":
            return any(part.endswith(self.pattern) for part in path)
        if self.name == "unencrypted_regex":
            return not any(re.search(self.pattern, part) for part in path)
        return any(re.search(self.pattern, part) for part in path)  # encrypted_regex


@dataclass(frozen=True)
class _Metadata:
    key_groups: tuple[tuple[tuple[str, str], ...], ...]  # per group: (age recipient, armored key)
    threshold: int  # key groups needed (Shamir); sops's default is all of them
    lastmodified: str
    mac: str
    rule: _Rule
    mac_only_encrypted: bool


def _metadata(meta: object, file: str) -> _Metadata:
    if not isinstance(meta, Mapping):
        raise SopsError(file, "the sops metadata is not a mapping")
    rules = [(name, meta[name]) for name in RULE_NAMES if meta.get(name) not in (None, "")]
    if len(rules) > 1:
        names = ", ".join(name for name, _ in rules)
        raise SopsError(file, f"the sops metadata sets more than one encryption rule ({names})")
    if rules and rules[0][0].endswith("comment_regex"):
        raise SopsError(file, f"{rules[0][0]} is not supported: comments are not visible once the "
                              "YAML is parsed; use a key suffix or key regex instead")
    name, pattern = rules[0] if rules else ("unencrypted_suffix", DEFAULT_UNENCRYPTED_SUFFIX)
    if not isinstance(pattern, str):
        raise SopsError(file, f"sops.{name} is not a string")
    if name.endswith("regex"):
        try:
            re.compile(pattern)
        except re.error as exc:
            raise SopsError(file, f"sops.{name} is not a valid regular expression: {exc}") from None
    mac, lastmodified = meta.get("mac"), meta.get("lastmodified")
    if not isinstance(mac, str) or not mac:
        raise SopsError(file, "the sops metadata has no mac")
    groups = _key_groups(meta, file)
    threshold = meta.get("shamir_threshold") or len(groups)
    if not isinstance(threshold, int) or not 1 <= threshold <= len(groups):
        raise SopsError(file, "sops.shamir_threshold is not a number of key groups")
    return _Metadata(groups, threshold, _go_rfc3339(lastmodified, file), mac,
                     _Rule(name, pattern), meta.get("mac_only_encrypted") is True)


def _key_groups(meta: Mapping[str, Any], file: str) -> tuple[tuple[tuple[str, str], ...], ...]:
    """The age-wrapped data key (or Shamir part) of each key group: ((recipient, armored), ...)."""
    groups = meta.get("key_groups")
    if groups is None:
        groups = [meta]
    if not isinstance(groups, list) or not all(isinstance(group, Mapping) for group in groups):
        raise SopsError(file, "sops.key_groups is not a list of mappings")
    wrapped = tuple(
        tuple((str(entry.get("recipient", "?")), entry["enc"]) for entry in group.get("age") or []
              if isinstance(entry, Mapping) and isinstance(entry.get("enc"), str))
        for group in groups
    )
    if not any(wrapped):
        others = sorted({k for group in groups for k in ("pgp", "kms", "gcp_kms", "azure_kv", "hc_vault",
                                                          "hckms") if group.get(k)})
        also = f" (it has {', '.join(others)} keys only)" if others else ""
        raise SopsError(file, f"the file is not encrypted to any age recipient{also}")
    return wrapped


def _go_rfc3339(value: object, file: str) -> str:
    """``lastmodified`` as sops re-formats it (Go time.RFC3339: seconds, ``Z`` for UTC)."""
    if isinstance(value, str):
        try:
            value = dt.datetime.fromisoformat(value)
        except ValueError:
            raise SopsError(file, "sops.lastmodified is not an RFC 3339 time") from None
    if isinstance(value, dt.datetime):
        return _go_time_text(value)
    raise SopsError(file, "the sops metadata has no lastmodified time")


def _go_time_text(value: dt.date, *, nano: bool = False) -> str:
    """A time as Go formats it with time.RFC3339, or RFC3339Nano (fraction without trailing zeros).

    A date is midnight UTC and a naive time is UTC, as yaml.v3 decodes them.
    """
    if not isinstance(value, dt.datetime):
        value = dt.datetime(value.year, value.month, value.day, tzinfo=dt.UTC)
    offset = value.utcoffset() or dt.timedelta(0)
    text = value.replace(tzinfo=None, microsecond=0).isoformat()
    if nano and value.microsecond:
        text += f".{value.microsecond:06d}".rstrip("0")
    if not offset:
        return text + "Z"
    minutes = int(offset.total_seconds()) // 60
    sign = "+" if minutes >= 0 else "-"
    return f"{text}{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"


def _go_float_text(value: float) -> str:
    """strconv.FormatFloat(v, 'f', -1, 64): shortest round-trip digits, never an exponent."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return format(Decimal(repr(value)).normalize(), "f")


# --- decryption ---------------------------------------------------------------------------------

def _data_key(meta: _Metadata, identities: Sequence[Identity], file: str) -> bytes:
    if not identities:
        raise SopsError(file, "no age identity is configured to decrypt it (set age_key_file, "
                              "GITSYNC_AGE_KEY, SOPS_AGE_KEY_FILE or SOPS_AGE_KEY)")
    parts = [part for part in (_open_group(group, identities) for group in meta.key_groups) if part]
    if len(parts) < meta.threshold:
        recipients = ", ".join(recipient for group in meta.key_groups for recipient, _ in group)
        which = f"{len(identities)} configured age identit{'y' if len(identities) == 1 else 'ies'}"
        if meta.threshold > 1:
            reason = f"the {which} open only {len(parts)} of the {meta.threshold} key groups needed"
        else:
            reason = f"none of the {which} can decrypt the data key"
        raise SopsError(file, f"{reason} (the file is encrypted to {recipients})")
    key = parts[0] if len(meta.key_groups) == 1 else _shamir_combine(parts)
    if len(key) != 32:
        raise SopsError(file, "the decrypted data key is not 32 bytes long")
    return key


def _open_group(group: Sequence[tuple[str, str]], identities: Sequence[Identity]) -> bytes | None:
    import pyrage

    for _recipient, armored in group:
        try:
            return pyrage.decrypt(armored.encode("utf-8"), list(identities))
        except (pyrage.DecryptError, ValueError, TypeError):
            continue
    return None


def _gf_mul(a: int, b: int) -> int:
    """Multiplication in GF(2^8) modulo x^8+x^4+x^3+x+1, the field of sops's (Vault's) shamir."""
    product = 0
    while b:
        if b & 1:
            product ^= a
        a = ((a << 1) ^ 0x11B) if a & 0x80 else a << 1
        b >>= 1
    return product


def _gf_inv(a: int) -> int:
    result, power = 1, a
    for bit in range(8):  # a^254 = a^-1
        if (254 >> bit) & 1:
            result = _gf_mul(result, power)
        power = _gf_mul(power, power)
    return result


def _shamir_combine(parts: Sequence[bytes]) -> bytes:
    """shamir.Combine: each part is the y values of one share followed by its x coordinate."""
    xs = [part[-1] for part in parts]
    if len(set(xs)) != len(xs) or len({len(part) for part in parts}) != 1:
        return b""
    basis = []
    for i, xi in enumerate(xs):
        value = 1
        for j, xj in enumerate(xs):
            if i != j:  # Lagrange basis at 0: xj / (xi + xj), addition being XOR
                value = _gf_mul(value, _gf_mul(xj, _gf_inv(xi ^ xj)))
        basis.append(value)
    secret = bytearray()
    for index in range(len(parts[0]) - 1):
        byte = 0
        for part, weight in zip(parts, basis, strict=True):
            byte ^= _gf_mul(part[index], weight)
        secret.append(byte)
    return bytes(secret)


def _open(token: str, key: bytes, aad: str) -> tuple[bytes, str] | None:
    """AES-256-GCM open of one ``ENC[...]`` token; None when it is malformed or does not authenticate."""
    from cryptography.exceptions import InvalidTag
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    match = ENCRYPTED_VALUE.match(token)
    if match is None:
        return None
    try:
        data, iv, tag = (base64.b64decode(match[i], validate=True) for i in (1, 2, 3))
        return AESGCM(key).decrypt(iv, data + tag, aad.encode("utf-8")), match[4]
    except (binascii.Error, InvalidTag, ValueError):
        return None


def _typed(plain: bytes, kind: str) -> tuple[object, bytes] | None:
    """The value of a decrypted plaintext per its sops type, and the bytes the MAC covers for it."""
    text = plain.decode("utf-8", "strict") if kind != "bytes" else None
    if kind == "str":
        return text, plain
    if kind in ("int", "int64"):
        return int(text), str(int(text)).encode()
    if kind == "float":
        number = float(text)
        # sops -d prints a whole float without a fraction (yaml.v3/encoding/json), so a JSON
        # port 8080 (a float to Go) comes back as the int it was.
        value: object = int(number) if re.fullmatch(r"-?\d+", text) else number
        return value, _go_float_text(number).encode()
    if kind == "bool":
        if text not in _GO_TRUE | _GO_FALSE:
            return None
        return text in _GO_TRUE, (b"True" if text in _GO_TRUE else b"False")
    if kind == "time":
        return text, plain
    if kind == "bytes":
        return plain.decode("utf-8"), plain
    return None


def _mac_bytes(value: object) -> bytes:
    """sops.ToBytes of a value left in clear, with its Go type as the YAML/JSON store decoded it."""
    if isinstance(value, bool):
        return b"True" if value else b"False"
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, int):
        return str(value).encode()
    if isinstance(value, float):
        return _go_float_text(value).encode()
    if isinstance(value, bytes):
        return value
    if isinstance(value, dt.date):
        return _go_time_text(value, nano=True).encode()
    raise TypeError(type(value).__name__)


class _Decryption:
    """One walk over a file's documents, in sops order, hashing what the MAC covers."""

    def __init__(self, key: bytes, meta: _Metadata, file: str, found: set[str] | None) -> None:
        self.key, self.meta, self.file, self.found = key, meta, file, found
        self.hash = hashlib.sha512()
        if meta.mac_only_encrypted:
            self.hash.update(MAC_ONLY_ENCRYPTED_SEED)

    def walk(self, node: object, keys: tuple[str, ...], field: KeyPath) -> object:
        if isinstance(node, Mapping):
            out = {}
            for name, value in node.items():
                if not isinstance(name, str):
                    raise SopsError(self.file, f"key {name!r} is not a string (sops only writes string "
                                               "keys)", field)
                out[name] = self.walk(value, (*keys, name), (*field, name))
            return out
        if isinstance(node, list):
            return [self.walk(value, keys, (*field, index)) for index, value in enumerate(node)]
        if node is None:
            return None
        return self.leaf(node, keys, field)

    def leaf(self, value: object, keys: tuple[str, ...], field: KeyPath) -> object:
        encrypted = self.meta.rule.encrypts(keys)
        if encrypted and value != "":
            value, covered = self.decrypt(value, keys, field)
        else:
            try:
                covered = _mac_bytes(value)
            except TypeError as exc:
                raise SopsError(self.file, f"a {exc} value cannot be in a SOPS file", field) from None
        if encrypted or not self.meta.mac_only_encrypted:
            self.hash.update(covered)
        return value

    def decrypt(self, token: object, keys: tuple[str, ...], field: KeyPath) -> tuple[object, bytes]:
        if not isinstance(token, str) or not token.startswith("ENC["):
            raise SopsError(self.file, "the value is not encrypted, though the file's rules say it "
                                       "must be (was it edited without sops?)", field)
        opened = _open(token, self.key, ":".join(keys) + ":")
        if opened is None:
            raise SopsError(self.file, "the value does not decrypt: it was changed, or moved here from "
                                       "another key", field)
        plain, kind = opened
        if kind in _SECRET_KINDS:
            register_secret(plain)
        try:
            typed = _typed(plain, kind)
        except (UnicodeDecodeError, ValueError):
            typed = None
        if typed is None:
            raise SopsError(self.file, f"the decrypted value is not a valid sops {kind!r} value", field)
        value, covered = typed
        if kind in _SECRET_KINDS and self.found is not None:
            self.found.add(value)
        return value, covered

    def check_mac(self) -> None:
        opened = _open(self.meta.mac, self.key, self.meta.lastmodified)
        if opened is None:
            raise SopsError(self.file, "the MAC does not decrypt: sops.mac or sops.lastmodified was "
                                       "changed")
        expected = opened[0].decode("ascii", "replace")
        if expected != self.hash.hexdigest().upper():
            raise SopsError(self.file, "MAC mismatch: values were changed, swapped, added or removed "
                                       "without sops")


def decrypt_documents(docs: Sequence[Mapping[str, Any]], identities: Sequence[Identity], *,
                      path: str = "", found: set[str] | None = None) -> list[dict[str, Any]]:
    """Decrypt every document of one SOPS file (its MAC covers all of them together).

    The metadata is read from the first document, as sops does. Returns the plain
    documents without their ``sops`` keys, or raises `SopsError` (never a partial result).
    Decrypted string values are added to `found` (render's ``secret_values``) when given.
    """
    if not docs or not is_sops_document(docs[0]):
        raise SopsError(path, "no sops metadata found (a top-level `sops` mapping)")
    meta = _metadata(docs[0]["sops"], path)
    decryption = _Decryption(_data_key(meta, identities, path), meta, path, found)
    plain = []
    for doc in docs:
        if not isinstance(doc, Mapping):
            raise SopsError(path, "a SOPS document must be a mapping")
        body = {name: value for name, value in doc.items() if name != "sops"}
        plain.append(decryption.walk(body, (), ()))
    decryption.check_mac()
    return plain


def decrypt_document(doc: Mapping[str, Any], identities: Sequence[Identity], *,
                     path: str = "", found: set[str] | None = None) -> dict[str, Any]:
    """Decrypt one single-document SOPS file (see `decrypt_documents`)."""
    return decrypt_documents([doc], identities, path=path, found=found)[0]


def decryptor(identities: Sequence[Identity], found: set[str] | None = None) -> Callable[[str, dict], dict]:
    """The render stage's seam: ``decrypt(path, doc) -> plain doc`` over the host's identities."""
    identities = tuple(identities)

    def decrypt(path: str, doc: dict) -> dict:
        return decrypt_document(doc, identities, path=path, found=found)

    return decrypt


__all__ = [
    "Identity",
    "SopsError",
    "decrypt_document",
    "decrypt_documents",
    "decryptor",
    "identities_from_settings",
    "is_sops_document",
    "load_identities",
    "parse_identities",
]
