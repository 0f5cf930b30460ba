"""A SOPS file of ``NAME: value`` pairs, encrypted for one or more age recipients.

The mirror of `gitsync.render.sops` (which decrypts): each value is AES-256-GCM with a
32-byte IV and its key path (``NAME:``) as additional data, the data key is wrapped for
each recipient with age (armored), and ``sops.mac`` is the SHA-512 of the values in file
order, encrypted with ``sops.lastmodified`` as additional data. The real ``sops -d``
decrypts it (tests/adopt/test_export.py checks that).
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import os
from collections.abc import Mapping, Sequence

import pyrage
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from gitsync.adopt.repo_writer import dump_documents

SOPS_FORMAT_VERSION = "3.11.0"


class RecipientError(ValueError):
    """An age recipient that cannot be used (not ``age1…``)."""


def _seal(key: bytes, plain: bytes, aad: str) -> str:
    iv = os.urandom(32)
    sealed = AESGCM(key).encrypt(iv, plain, aad.encode("utf-8"))
    data, tag = sealed[:-16], sealed[-16:]
    text = ",".join(f"{name}:{base64.b64encode(part).decode()}" for name, part in
                    (("data", data), ("iv", iv), ("tag", tag)))
    return f"ENC[AES256_GCM,{text},type:str]"


def parse_recipients(recipients: Sequence[str]) -> list[pyrage.x25519.Recipient]:
    parsed = []
    for text in recipients:
        try:
            parsed.append(pyrage.x25519.Recipient.from_str(text.strip()))
        except Exception:  # pyrage raises its own error types per version
            raise RecipientError(f"{text.strip()[:20]!r}… is not an age recipient (age1…)") from None
    return parsed


def encrypt_values(values: Mapping[str, str], recipients: Sequence[str],
                   now: dt.datetime | None = None) -> bytes:
    """The YAML text of a SOPS file holding `values` (sorted by name), for the age `recipients`."""
    parsed = parse_recipients(recipients)
    key = os.urandom(32)
    lastmodified = (now or dt.datetime.now(dt.UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")
    mac = hashlib.sha512()
    body: dict[str, object] = {}
    for name in sorted(values):
        plain = values[name].encode("utf-8")
        mac.update(plain)
        body[name] = _seal(key, plain, name + ":") if plain else ""
    body["sops"] = {
        "age": [{"recipient": str(r), "enc": pyrage.encrypt(key, [r], armored=True).decode("ascii")}
                for r in parsed],
        "lastmodified": lastmodified,
        "mac": _seal(key, mac.hexdigest().upper().encode("ascii"), lastmodified),
        "unencrypted_suffix": "_unencrypted",
        "version": SOPS_FORMAT_VERSION,
    }
    return dump_documents([body])
