"""SSL items: the certificate and key parse, and the key belongs to the certificate."""

from __future__ import annotations

from typing import Any

from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization


def _public_der(key: Any) -> bytes:
    return key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


def check_pair(cert_pem: str, key_pem: str) -> list[tuple[str, str]]:
    """Problems as (message, "cert" | "key"); the key's content never appears in a message."""
    problems: list[tuple[str, str]] = []
    cert = key = None
    try:
        cert = x509.load_pem_x509_certificate(cert_pem.encode())
    except (ValueError, UnsupportedAlgorithm):
        problems.append(("not a PEM certificate (-----BEGIN CERTIFICATE-----)", "cert"))
    try:
        # Parsing is all that is needed here; skipping RSA's slow consistency check keeps it cheap.
        key = serialization.load_pem_private_key(key_pem.encode(), password=None,
                                                 unsafe_skip_rsa_key_validation=True)
    except TypeError:
        problems.append(("the private key is encrypted; APISIX needs it unencrypted (or a $secret:// "
                         "reference)", "key"))
    except (ValueError, UnsupportedAlgorithm):
        problems.append(("not a PEM private key (-----BEGIN PRIVATE KEY-----)", "key"))
    if cert is not None and key is not None:
        try:
            matches = _public_der(cert.public_key()) == _public_der(key.public_key())
        except (ValueError, UnsupportedAlgorithm):
            matches = False
        if not matches:
            problems.append(("the private key does not match the certificate", "key"))
    return problems
