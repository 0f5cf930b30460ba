"""An OCI registry, as the distribution spec describes it, over the project's HTTP client
(`gitsync.httpclient`: a deadline per request, every answer read up to a limit). Plain HTTP requests,
no client library: the artifact needs six of them (manifest HEAD and GET, blob HEAD, GET and the
two-step upload, manifest PUT), and every library that speaks them brings a second HTTP stack
without our deadlines and limits.

An artifact is one OCI image manifest (``application/vnd.oci.image.manifest.v1+json``) with
``artifactType`` `ARTIFACT_TYPE`, the empty config (``application/vnd.oci.empty.v1+json``, ``{}``)
and two layers: the artifact (`ARTIFACT_MEDIA_TYPE`) and its signature (`SIGNATURE_MEDIA_TYPE`).
Debian's ``docker-registry`` 2.8 stores and serves it as is (custom media types and
``artifactType`` included); it has no referrers API, so the signature travels in the manifest, not
beside it. Tags: one per branch (``main``); the manifest's digest names it for good.

Where the registry is: ``oci://host[:port]/name[:tag|@sha256:…]``. A loopback host (``127.0.0.1``,
``localhost``, ``::1``) is spoken to in plain HTTP, any other in HTTPS with the system's CAs.
Credentials: HTTP basic, and the token flow (a ``401`` with ``WWW-Authenticate: Bearer realm=…``: a
token from the realm for the repository's scope, with the basic credentials when there are some).
"""

from __future__ import annotations

import base64
import json
import re
import ssl
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import quote, urlencode, urljoin, urlsplit

from gitsync.artifact.document import digest_of
from gitsync.httpclient import Answer, HttpClient, HttpError
from gitsync.source.transport import SourceError

MANIFEST_MEDIA_TYPE = "application/vnd.oci.image.manifest.v1+json"
EMPTY_MEDIA_TYPE = "application/vnd.oci.empty.v1+json"
ARTIFACT_TYPE = "application/vnd.gitsync.artifact.v1"
ARTIFACT_MEDIA_TYPE = "application/vnd.gitsync.artifact.v1+json"
SIGNATURE_MEDIA_TYPE = "application/vnd.gitsync.artifact.signature.v1"
EMPTY_CONFIG = b"{}"
#: A manifest of two layers is a few hundred bytes: a larger one is no artifact of ours.
MAX_MANIFEST = 64 * 1024
#: What a refusal's body may take beyond a blob's size (the registry's JSON error).
ERROR_ALLOWANCE = 4096
_LOOPBACK = ("127.0.0.1", "localhost", "::1", "[::1]")
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_NAME = re.compile(r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*$")
_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_CHALLENGE = re.compile(r'(\w+)="([^"]*)"')


def tag_of(branch: str) -> str:
    """A branch's tag: characters a tag may not hold (``/``) become ``-``."""
    tag = re.sub(r"[^A-Za-z0-9_.-]", "-", branch).lstrip(".-")[:128]
    return tag or "latest"


@dataclass(frozen=True)
class Reference:
    """``oci://host[:port]/name[:tag|@digest]``, read."""

    host: str  # with its port
    name: str
    tag: str | None = None
    digest: str | None = None

    @classmethod
    def parse(cls, text: str) -> Reference:
        """`ValueError` naming what is wrong."""
        if not text.startswith("oci://"):
            raise ValueError(f"{text!r}: an artifact's place is oci://host[:port]/name[:tag]")
        rest = text[len("oci://"):]
        host, _, path = rest.partition("/")
        if not host or not path or "@" in host:
            raise ValueError(f"{text!r}: expected oci://host[:port]/name[:tag] (no credentials in it)")
        digest = tag = None
        if "@" in path:
            path, _, digest = path.partition("@")
            if not _DIGEST.match(digest):
                raise ValueError(f"{text!r}: {digest!r} is not a sha256 digest")
        last = path.rsplit("/", 1)[-1]
        if ":" in last:
            path, _, tag = path.rpartition(":")
            if not _TAG.match(tag):
                raise ValueError(f"{text!r}: {tag!r} is not a tag (letters, digits, '_', '.', '-')")
        if not _NAME.match(path):
            raise ValueError(f"{text!r}: {path!r} is not a repository name (lower case, digits, '/', '.', "
                             "'_', '-')")
        return cls(host, path, tag, digest)

    @property
    def base(self) -> str:
        hostname = urlsplit("//" + self.host).hostname or ""
        scheme = "http" if hostname in _LOOPBACK else "https"
        return f"{scheme}://{self.host}/v2/{self.name}"

    def with_tag(self, tag: str) -> Reference:
        return Reference(self.host, self.name, tag, None)

    def __str__(self) -> str:
        return f"oci://{self.host}/{self.name}" + (f"@{self.digest}" if self.digest else
                                                    f":{self.tag}" if self.tag else "")


@dataclass(frozen=True)
class Layers:
    """What a gitsync artifact's manifest names: its artifact and signature blobs, with their sizes."""

    artifact: str
    artifact_size: int
    signature: str
    signature_size: int
    revision: str | None = None


def _descriptor(media_type: str, data: bytes) -> dict[str, object]:
    return {"mediaType": media_type, "digest": digest_of(data), "size": len(data)}


def manifest_of(artifact: bytes, signature: bytes, annotations: dict[str, str]) -> bytes:
    """The OCI image manifest of an artifact and its signature (canonical JSON)."""
    document = {
        "schemaVersion": 2, "mediaType": MANIFEST_MEDIA_TYPE, "artifactType": ARTIFACT_TYPE,
        "config": _descriptor(EMPTY_MEDIA_TYPE, EMPTY_CONFIG),
        "layers": [_descriptor(ARTIFACT_MEDIA_TYPE, artifact), _descriptor(SIGNATURE_MEDIA_TYPE, signature)],
        "annotations": annotations,
    }
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()


def layers_of(manifest: bytes) -> Layers:
    """The artifact and signature a manifest names; `SourceError` (verify) when it is no gitsync artifact."""
    try:
        document = json.loads(manifest)
        layers = {layer["mediaType"]: layer for layer in document["layers"]}
        artifact, signature = layers.get(ARTIFACT_MEDIA_TYPE), layers.get(SIGNATURE_MEDIA_TYPE)
        if artifact is None:
            raise SourceError("verify", f"the manifest has no {ARTIFACT_MEDIA_TYPE} layer: not a gitsync "
                                        "artifact")
        if signature is None:
            raise SourceError("verify", "the artifact is not signed (its manifest has no signature layer)")
        for layer in (artifact, signature):
            if not isinstance(layer.get("digest"), str) or not _DIGEST.match(layer["digest"]) \
                    or not isinstance(layer.get("size"), int) or layer["size"] < 0:
                raise SourceError("verify", "a layer of the manifest has no sha256 digest or size")
        revision = (document.get("annotations") or {}).get("org.opencontainers.image.revision")
        return Layers(artifact["digest"], artifact["size"], signature["digest"], signature["size"],
                      revision if isinstance(revision, str) else None)
    except (ValueError, KeyError, TypeError, AttributeError):
        raise SourceError("verify", "the manifest is not an OCI image manifest") from None


class RegistryClient:
    """One registry repository (`Reference`'s host and name): the requests an artifact needs."""

    def __init__(self, reference: Reference, *, username: str | None = None, password: str | None = None,
                 timeout: float = 30.0, http: HttpClient | None = None) -> None:
        self.reference = reference
        self._basic = None
        if username is not None and password is not None:
            self._basic = "Basic " + base64.b64encode(f"{username}:{password}".encode()).decode()
        base = reference.base
        self._http = http or HttpClient(ssl.create_default_context() if base.startswith("https") else None,
                                        timeout)
        self._authorization: str | None = None  # what the registry last accepted
        self.requests = 0  # sent, for the bench and the tests (each HEAD of a poll is one)

    @property
    def where(self) -> str:
        return str(self.reference)

    def close(self) -> None:
        self._http.close()

    # -- requests ------------------------------------------------------------------------------------

    def _send(self, method: str, url: str, headers: Iterable[tuple[str, str]], body: bytes | None,
              limit: int, stage: str) -> Answer:
        try:
            sent = [(k.encode(), v.encode()) for k, v in headers]
            if self._authorization is not None:
                sent.append((b"Authorization", self._authorization.encode()))
            self.requests += 1
            return self._http.request(method, url, headers=sent, body=body, limit=limit)
        except HttpError as exc:
            if exc.too_large:
                raise SourceError("verify", f"{method} {self._shown(url)}: {exc}") from None
            raise SourceError(stage, f"registry {self.reference.host}: {method} {self._shown(url)} {exc}",
                              unreachable=True, transient=True) from None

    def _shown(self, url: str) -> str:
        return urlsplit(url).path

    def request(self, method: str, path: str, *, headers: Iterable[tuple[str, str]] = (),
                body: bytes | None = None, limit: int = MAX_MANIFEST, stage: str = "fetch",
                absolute: str | None = None) -> Answer:
        """One request to the repository (`path` under ``/v2/<name>``), authenticating on a 401 and
        following a redirect (a blob served from elsewhere); `SourceError` when there is no answer."""
        url = absolute or self.reference.base + path
        headers = list(headers)
        answer = self._send(method, url, headers, body, limit, stage)
        if answer.status == 401:
            self._authenticate(answer, stage)
            answer = self._send(method, url, headers, body, limit, stage)
        for _ in range(3):
            location = answer.headers.get("location")
            if answer.status not in (301, 302, 303, 307, 308) or not location or method == "PUT":
                break
            target = urljoin(url, location)
            kept, self._authorization = self._authorization, None  # never sent to another host
            try:
                answer = self._send(method, target, headers, None, limit, stage)
            finally:
                self._authorization = kept
        if answer.status == 401:
            raise SourceError(stage, f"registry {self.reference.host}: credentials refused (401)")
        if answer.status == 403:
            raise SourceError(stage, f"registry {self.reference.host}: access denied (403)")
        if answer.status >= 500 or answer.status == 429:
            raise SourceError(stage, f"registry {self.reference.host}: {method} {path} answered "
                                     f"{answer.status}", transient=True)
        return answer

    def _authenticate(self, answer: Answer, stage: str) -> None:
        challenge = answer.headers.get("www-authenticate", "")
        scheme = challenge.split(" ", 1)[0].lower()
        if scheme == "basic":
            if self._basic is None:
                raise SourceError(stage, f"registry {self.reference.host} asks for credentials: set "
                                         "registry_username and registry_password")
            self._authorization = self._basic
            return
        if scheme != "bearer":
            raise SourceError(stage, f"registry {self.reference.host}: unknown authentication {scheme!r}")
        params = dict(_CHALLENGE.findall(challenge))
        realm = params.get("realm")
        if not realm or not realm.startswith(("http://", "https://")):
            raise SourceError(stage, f"registry {self.reference.host}: a Bearer challenge without a realm")
        query = {k: v for k, v in (("service", params.get("service")),
                                   ("scope", params.get("scope") or
                                    f"repository:{self.reference.name}:pull,push")) if v}
        url = realm + ("&" if "?" in realm else "?") + urlencode(query)
        headers = [(b"Authorization", self._basic.encode())] if self._basic else []
        try:
            self.requests += 1
            token_http = HttpClient(ssl.create_default_context() if url.startswith("https") else None,
                                    self._http.timeout, max_connections=1)
            try:
                got = token_http.request("GET", url, headers=headers, limit=MAX_MANIFEST)
            finally:
                token_http.close()
        except HttpError as exc:
            raise SourceError(stage, f"token service of {self.reference.host}: {exc}", unreachable=True,
                              transient=True) from None
        if got.status != 200:
            raise SourceError(stage, f"token service of {self.reference.host} answered {got.status}")
        try:
            found = got.json()
            token = found.get("token") or found.get("access_token")
        except (ValueError, AttributeError):
            token = None
        if not isinstance(token, str) or not token:
            raise SourceError(stage, f"token service of {self.reference.host}: no token in its answer")
        self._authorization = f"Bearer {token}"

    # -- manifests -----------------------------------------------------------------------------------

    def head_manifest(self, tag: str) -> str | None:
        """The digest `tag` names now (one HEAD, no body), or None when there is no such tag."""
        answer = self.request("HEAD", f"/manifests/{quote(tag)}", headers=[("Accept", MANIFEST_MEDIA_TYPE)],
                              stage="check")
        if answer.status == 404:
            return None
        if answer.status != 200:
            raise SourceError("check", f"registry {self.reference.host}: HEAD of {tag} answered "
                                       f"{answer.status}")
        digest = answer.headers.get("docker-content-digest", "")
        if not _DIGEST.match(digest):  # a registry that does not say: ask for the manifest itself
            return digest_of(self.manifest(tag)[1])
        return digest

    def manifest(self, ref: str) -> tuple[str, bytes]:
        """The manifest a tag or digest names, and its digest (checked against the bytes when asked by
        digest)."""
        answer = self.request("GET", f"/manifests/{quote(ref)}", headers=[("Accept", MANIFEST_MEDIA_TYPE)])
        if answer.status == 404:
            raise SourceError("fetch", f"{self.where}: no manifest {ref}")
        if answer.status != 200:
            raise SourceError("fetch", f"{self.where}: GET manifest {ref} answered {answer.status}")
        digest = digest_of(answer.body)
        if _DIGEST.match(ref) and digest != ref:
            raise SourceError("verify", f"the manifest served for {ref} has the digest {digest}: tampered")
        return digest, answer.body

    def put_manifest(self, tag: str, manifest: bytes) -> str:
        answer = self.request("PUT", f"/manifests/{quote(tag)}", body=manifest,
                              headers=[("Content-Type", MANIFEST_MEDIA_TYPE)], stage="push")
        if answer.status not in (200, 201):
            raise SourceError("push", f"{self.where}: PUT manifest {tag} answered {answer.status}: "
                                      f"{answer.text[:300]}")
        return digest_of(manifest)

    # -- blobs ---------------------------------------------------------------------------------------

    def blob(self, digest: str, size: int, limit: int) -> bytes:
        """Blob `digest` of `size` bytes (as the manifest says), refused before it is read when `size` is
        over `limit`, and read no further than `size`; its digest checked."""
        if size > limit:
            raise SourceError("verify", f"blob {digest} is {size} bytes, more than the limit ({limit})")
        # an answer may be a refusal before it is the blob (a 401's JSON): a few KiB over the size for it
        answer = self.request("GET", f"/blobs/{digest}", limit=size + ERROR_ALLOWANCE)
        if answer.status != 200:
            raise SourceError("fetch", f"{self.where}: GET blob {digest} answered {answer.status}")
        if len(answer.body) != size or digest_of(answer.body) != digest:
            raise SourceError("verify", f"blob {digest}: the bytes served do not have that digest: tampered "
                                        "or damaged")
        return answer.body

    def has_blob(self, digest: str) -> bool:
        return self.request("HEAD", f"/blobs/{digest}", stage="push").status == 200

    def push_blob(self, data: bytes) -> str:
        """Upload `data` (POST, then one monolithic PUT) unless the registry has it already."""
        digest = digest_of(data)
        if self.has_blob(digest):
            return digest
        started = self.request("POST", "/blobs/uploads/", body=b"", stage="push")
        location = started.headers.get("location")
        if started.status != 202 or not location:
            raise SourceError("push", f"{self.where}: starting an upload answered {started.status}")
        target = urljoin(self.reference.base + "/", location)
        target += ("&" if "?" in target else "?") + urlencode({"digest": digest})
        done = self.request("PUT", "", absolute=target, body=data, stage="push",
                            headers=[("Content-Type", "application/octet-stream")])
        if done.status != 201:
            raise SourceError("push", f"{self.where}: uploading {digest} answered {done.status}")
        return digest


__all__ = ["ARTIFACT_MEDIA_TYPE", "ARTIFACT_TYPE", "EMPTY_CONFIG", "MANIFEST_MEDIA_TYPE",
           "SIGNATURE_MEDIA_TYPE", "Layers", "Reference", "RegistryClient", "digest_of", "layers_of",
           "manifest_of", "tag_of"]
