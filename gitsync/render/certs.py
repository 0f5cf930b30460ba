"""SSL items: does the private key belong to the certificate? (Whether each parses is the schema's check.)"""

from __future__ import annotations

from typing import Any

from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization


def _public_der(key: Any) -> bytes:
    return key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


def key_matches(cert_pem: str, key_pem: str) -> bool:
    """False only when both parse and the key's public half is not the certificate's."""
    try:
        cert = x509.load_pem_x509_certificate(cert_pem.encode())
        # Parsing is all that is needed; skipping RSA's slow consistency check keeps it cheap.
        key = serialization.load_pem_private_key(key_pem.encode(), password=None,
                                                 unsafe_skip_rsa_key_validation=True)
        return _public_der(cert.public_key()) == _public_der(key.public_key())
    except (ValueError, TypeError, UnsupportedAlgorithm):
        return True  # unparseable: reported by the schema check, not as a mismatch
