"""A real OCI registry on 127.0.0.1: Debian's ``docker-registry`` (the CNCF distribution registry, 2.8),
with filesystem storage in a temporary directory and htpasswd (bcrypt) basic auth, stopped by pid; or,
with a `TokenService`, the registry's token auth: a ``401`` with ``WWW-Authenticate: Bearer realm=…``,
and a token service (a stdlib HTTP server here, as a forge's or a cloud's would be) that checks the
basic credentials and answers a JWT the registry verifies against the service's certificate.

`Registry.blob_path` finds a blob's file in the storage, so a test can change one byte of it behind
the registry's back (the registry serves what is on disk; the client must verify the digest).
"""

from __future__ import annotations

import base64
import datetime
import json
import secrets
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from testkit.processes import LOCALHOST, ServerProcess, free_port, stop_process, wait_for_port

__all__ = ["Registry", "TokenService"]

USER = "ci"
PASSWORD = "registry-password-for-tests"  # long enough for the log redactor


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class TokenService:
    """A registry token service on 127.0.0.1: ``GET /token?service=…&scope=…`` with basic auth for
    `USER`/`PASSWORD` → ``{"token": <JWT>}`` (ES256, its certificate in ``x5c``), as distribution's
    token auth expects. `requests` counts what it was asked."""

    SERVICE = "gitsync-tests"
    ISSUER = "gitsync-test-issuer"

    def __init__(self, root: Path) -> None:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID

        root.mkdir(parents=True, exist_ok=True)
        self._key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, self.ISSUER)])
        now = datetime.datetime.now(datetime.UTC)
        self._cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
                      .public_key(self._key.public_key()).serial_number(x509.random_serial_number())
                      .not_valid_before(now - datetime.timedelta(days=1))
                      .not_valid_after(now + datetime.timedelta(days=1))
                      .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                      .sign(self._key, hashes.SHA256()))
        self.certificate = root / "token-cert.pem"
        self.certificate.write_bytes(self._cert.public_bytes(serialization.Encoding.PEM))
        self.requests: list[str] = []
        service = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                service.requests.append(self.path)
                expected = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
                if self.headers.get("Authorization") != expected:
                    self.send_response(401)
                    self.end_headers()
                    return
                scope = parse_qs(urlsplit(self.path).query).get("scope", [""])[0]
                body = json.dumps({"token": service.token(scope)}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer((LOCALHOST, 0), Handler)
        self.realm = f"http://{LOCALHOST}:{self._server.server_address[1]}/token"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def token(self, scope: str) -> str:
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

        access = []
        if scope.startswith("repository:"):
            _, name, actions = scope.split(":", 2)
            access.append({"type": "repository", "name": name, "actions": actions.split(",")})
        der = self._cert.public_bytes(serialization.Encoding.DER)
        header = {"typ": "JWT", "alg": "ES256", "x5c": [base64.b64encode(der).decode()]}
        now = int(time.time())
        claims = {"iss": self.ISSUER, "sub": USER, "aud": self.SERVICE, "iat": now, "nbf": now - 60,
                  "exp": now + 300, "jti": secrets.token_hex(8), "access": access}
        signing_input = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}"
        r, s = decode_dss_signature(self._key.sign(signing_input.encode(), ec.ECDSA(hashes.SHA256())))
        return f"{signing_input}.{_b64(r.to_bytes(32, 'big') + s.to_bytes(32, 'big'))}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class Registry(ServerProcess):
    """``docker-registry serve`` on a free port; `auth`: htpasswd basic auth for `USER`/`PASSWORD`;
    `token`: the token auth of that service instead. Started again after `stop()` it takes its old port
    and storage (clients keep their URL)."""

    def __init__(self, root: Path, *, auth: bool = True, token: TokenService | None = None) -> None:
        self.root = root
        self.auth = auth
        self.token = token
        self.port = 0
        self.storage = root / "storage"
        self.log = root / "registry.log"

    @property
    def address(self) -> str:
        return f"{LOCALHOST}:{self.port}"

    def url(self, name: str, tag: str = "main") -> str:
        """``oci://127.0.0.1:PORT/name:tag``: what `gitsync publish --to` and an agent's repo take."""
        return f"oci://{self.address}/{name}:{tag}"

    def _config(self, port: int) -> Path:
        self.storage.mkdir(parents=True, exist_ok=True)
        auth = ""
        if self.token is not None:
            auth = (f"auth:\n  token:\n    realm: {self.token.realm}\n    service: {self.token.SERVICE}\n"
                    f"    issuer: {self.token.ISSUER}\n    rootcertbundle: {self.token.certificate}\n")
        elif self.auth:
            htpasswd = self.root / "htpasswd"
            if not htpasswd.exists():
                subprocess.run(["htpasswd", "-Bbc", str(htpasswd), USER, PASSWORD], check=True,
                               capture_output=True, timeout=30)
            auth = f"auth:\n  htpasswd:\n    realm: gitsync-tests\n    path: {htpasswd}\n"
        config = self.root / "config.yml"
        config.write_text(
            "version: 0.1\nlog:\n  level: warn\n  accesslog:\n    disabled: true\n"
            f"storage:\n  filesystem:\n    rootdirectory: {self.storage}\n  delete:\n    enabled: true\n"
            f"  cache:\n    blobdescriptor: inmemory\n"
            f"http:\n  addr: {LOCALHOST}:{port}\n  secret: tests-only-secret\n{auth}")
        return config

    def start(self) -> Registry:
        reuse = self.port
        for _attempt in range(5):
            port = reuse or free_port()
            config = self._config(port)
            with self.log.open("ab") as log:
                proc = subprocess.Popen(["docker-registry", "serve", str(config)], stdout=log, stderr=log,
                                        start_new_session=True)
            if wait_for_port(port, proc):
                self.port, self.proc = port, proc
                return self
            stop_process(proc)
        raise RuntimeError(f"docker-registry did not start: {self.log.read_text()[-2000:]}")

    def blob_path(self, digest: str) -> Path:
        """The file holding blob `digest` (``sha256:…``) in the registry's storage."""
        hexdigest = digest.removeprefix("sha256:")
        return (self.storage / "docker/registry/v2/blobs/sha256" / hexdigest[:2] / hexdigest / "data")

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid
