"""Contract doubles of the forges' APIs, and a notification receiver, as real HTTP servers on 127.0.0.1.

A `ForgeDouble` serves the operations gitsync's forge clients use (commit statuses, the sticky
comment) and checks every request against the forge's published API description, vendored in
tests/data/forges/ (see its README for the sources and versions): the operation (method and path)
must be in the description, the authentication header in the form the forge documents, the body
valid against the request schema (types, enums, required fields, length limits). A request that is
not is answered as the forge answers it and listed in `violations`, which a test asserts empty.
Beyond the schemas, each double behaves as its forge does where the clients must cope: GitHub's 422
on a description over 140 characters, GitLab's 400 on a status posted again in the state it has,
Bitbucket's 400 on a key over 40 characters or an URL that is not one.

`Receiver` takes notifications and checks their signature as gitsync's own webhook receiver does.
"""

from __future__ import annotations

import base64
import copy
import itertools
import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Self
from urllib.parse import parse_qs, quote, unquote, urlsplit

import jsonschema

from gitsync.daemon.listener import verify_webhook

CONTRACTS = Path(__file__).resolve().parent.parent / "tests" / "data" / "forges"
FORGE_TOKEN = "forge-token-5e1f0c"
PROJECT = "octo-org/config-repo"
BASE_PATHS = {"github": "/api/v3", "gitea": "/api/v1", "gitlab": "/api/v4", "bitbucket": "/2.0"}


class LoopbackServer:
    """An HTTP server on 127.0.0.1 on a thread of its own (`_listen` makes it); a context manager."""

    _server: ThreadingHTTPServer
    _thread: threading.Thread

    def _listen(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"


def contract(kind: str) -> dict[str, Any]:
    return json.loads((CONTRACTS / f"{kind}.json").read_text())


def _nullable(schema: Any) -> Any:
    """OpenAPI 3.0's ``nullable: true`` as JSON Schema's ``type: [T, "null"]``."""
    if isinstance(schema, dict):
        out = {k: _nullable(v) for k, v in schema.items() if k != "nullable"}
        if schema.get("nullable") and isinstance(schema.get("type"), str):
            out["type"] = [schema["type"], "null"]
        return out
    if isinstance(schema, list):
        return [_nullable(v) for v in schema]
    return schema


def request_schemas(kind: str, *, forgejo: bool = False) -> dict[str, Any]:
    """operation id → the JSON Schema its request body must pass, from the vendored description."""
    c = contract(kind)
    ops = c["operations"]
    if kind == "github":
        return {op: _nullable(ops[op]["excerpt"]["requestBody"]["content"]["application/json"]["schema"])
                for op in ("repos/create-commit-status", "issues/create-comment", "issues/update-comment")}
    if kind == "gitea":
        definitions = copy.deepcopy(c["definitions"])
        if forgejo:
            definitions["CreateStatusOption"]["properties"]["state"]["enum"] = \
                c["forgejo_differences"]["state_enum"]
        body = {op: next(p["schema"] for p in ops[op]["excerpt"]["parameters"] if p["in"] == "body")
                for op in ("repoCreateStatus", "issueCreateComment", "issueEditComment")}
        return {op: {**schema, "definitions": definitions} for op, schema in body.items()}
    if kind == "gitlab":
        return {op: ops[op]["derived_request_schema"]
                for op in ("createCommitStatus", "createMergeRequestNote", "updateMergeRequestNote")}
    schemas = copy.deepcopy(c["components"]["schemas"])
    schemas["object"].pop("required")  # a response discriminator: request_body_notes.commitstatus
    root = {"components": {"schemas": schemas}}
    return {"createBuildStatus": {"$ref": "#/components/schemas/commitstatus", **root},
            "createPullRequestComment": {"$ref": "#/components/schemas/pullrequest_comment", **root},
            "updatePullRequestComment": {"$ref": "#/components/schemas/pullrequest_comment", **root}}


def _template(path: str) -> re.Pattern[str]:
    """A path of the description (``{name}`` or GitLab's ``:name``) as a pattern of raw path segments;
    GitHub's ``sha`` is multi-segment."""
    def part(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        return f"(?P<{name}>.+)" if name == "sha" else f"(?P<{name}>[^/]+)"
    return re.compile("^" + re.sub(r"\{(\w+)\}|:(\w+)", part, path) + "$")


@dataclass
class Recorded:
    """One request as the double saw it (the token masked) and what it answered."""

    method: str
    path: str  # raw, below the API's base, without the query
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: Any
    status: int = 0
    operation: str | None = None


@dataclass
class Operation:
    id: str
    method: str
    pattern: re.Pattern[str]
    handler: Callable[..., tuple[int, Any, dict[str, str]]]
    schema: dict[str, Any] | None = None


@dataclass
class ForgeDouble(LoopbackServer):
    """One forge's API for one project on 127.0.0.1; `url` is its web address, `api_url` its API's."""

    kind: str
    token: str = FORGE_TOKEN
    project: str = PROJECT
    forgejo: bool = False
    delay: float = 0.0  # seconds before each answer (a slow forge)
    requests: list[Recorded] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    statuses: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # sha → in the order posted
    comments: dict[int, list[dict[str, Any]]] = field(default_factory=dict)  # PR number → oldest first
    failures: list[int] = field(default_factory=list)  # statuses to answer the next requests with

    def __post_init__(self) -> None:
        self._ids = itertools.count(1001)
        self._lock = threading.Lock()
        self._gitlab_states: dict[tuple[str, str, str], str] = {}
        self.operations = self._operations()
        double = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _any(self) -> None:
                double._handle(self)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _any

        self._listen(Handler)

    @property
    def url(self) -> str:
        return self.origin

    @property
    def api_url(self) -> str:
        return self.url + BASE_PATHS[self.kind]

    # -- what tests look at --------------------------------------------------------------------------

    def latest(self, sha: str) -> dict[str, dict[str, Any]]:
        """context → the status the forge shows for it on `sha` (the last one posted)."""
        shown: dict[str, dict[str, Any]] = {}
        for status in self.statuses.get(sha, []):
            shown[status["context"]] = status
        return shown

    def seed_comment(self, number: int, body: str, *, system: bool = False) -> int:
        ident = next(self._ids)
        self.comments.setdefault(number, []).append({"id": ident, "body": body, "system": system})
        return ident

    # -- serving -------------------------------------------------------------------------------------

    def _handle(self, h: BaseHTTPRequestHandler) -> None:
        parts = urlsplit(h.path)
        base = BASE_PATHS[self.kind]
        length = int(h.headers.get("Content-Length") or 0)
        raw = h.rfile.read(length) if length else b""
        headers = {k.lower(): v for k, v in h.headers.items()}
        shown = {k: ("***" if k in ("authorization", "private-token") else v) for k, v in headers.items()}
        record = Recorded(h.command, parts.path.removeprefix(base), parse_qs(parts.query), shown, None)
        with self._lock:
            self.requests.append(record)
        status, body, extra = self._answer(h.command, parts.path, parts.query, headers, raw, record)
        record.status = status
        if self.delay:
            time.sleep(self.delay)
        data = b"" if body is None else json.dumps(body).encode()
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        for k, v in extra.items():
            h.send_header(k, v)
        h.end_headers()
        h.wfile.write(data)

    def _violation(self, text: str) -> None:
        with self._lock:
            self.violations.append(text)

    def _answer(self, method: str, path: str, query: str, headers: dict[str, str], raw: bytes,
                record: Recorded) -> tuple[int, Any, dict[str, str]]:
        base = BASE_PATHS[self.kind]
        if not path.startswith(base + "/"):
            self._violation(f"{method} {path}: not under the API's base path {base}")
            return 404, {"message": "Not Found"}, {}
        below = path[len(base):]
        op = next((o for o in self.operations if o.method == method and o.pattern.match(below)), None)
        if op is None:
            self._violation(f"{method} {below}: no such operation in the {self.kind} description")
            return 404, {"message": "Not Found"}, {}
        record.operation = op.id
        if self.failures:
            return self.failures.pop(0), {"message": "Service Unavailable"}, {}
        denied = self._check_auth(headers, parse_qs(query))
        if denied is not None:
            return denied
        body = None
        if raw:
            if headers.get("content-type", "").split(";")[0].strip() != "application/json":
                self._violation(f"{op.id}: a body without Content-Type: application/json")
            try:
                body = json.loads(raw)
            except ValueError:
                self._violation(f"{op.id}: a body that is not JSON")
                return 400, {"message": "Problems parsing JSON"}, {}
        record.body = body
        if op.schema is not None:
            errors = sorted(jsonschema.Draft202012Validator(op.schema).iter_errors(body), key=str)
            if errors:
                self._violation(f"{op.id}: {errors[0].message} at {list(errors[0].absolute_path)}")
                return self._schema_refusal(errors[0])
        params = {k: unquote(v) for k, v in op.pattern.match(below).groupdict().items()}
        raw_params = op.pattern.match(below).groupdict()
        return op.handler(params=params, raw=raw_params, query=parse_qs(query), body=body)

    def _check_auth(self, headers: dict[str, str], query: dict[str, list[str]],
                    ) -> tuple[int, Any, dict[str, str]] | None:
        auth, token = headers.get("authorization", ""), self.token
        if self.kind == "github":
            version = headers.get("x-github-api-version")
            if version is not None and version not in ("2022-11-28", "2026-03-10"):
                self._violation(f"X-GitHub-Api-Version {version} is not one GitHub publishes")
                return 400, {"message": f"Invalid API version provided: {version}"}, {}
            accept = headers.get("accept", "application/vnd.github+json")
            if accept not in ("application/vnd.github+json", "application/json", "*/*"):
                self._violation(f"Accept: {accept} is not GitHub's media type")
            ok = auth in (f"Bearer {token}", f"token {token}")
            form = auth.split(" ")[0] in ("Bearer", "token")
        elif self.kind == "gitea":
            if "token" in query or "access_token" in query:
                self._violation("a token in the query string: deprecated for removal in Gitea 1.23")
            ok, form = auth == f"token {token}", auth.startswith("token ")
        elif self.kind == "gitlab":
            private = headers.get("private-token")
            ok = private == token or auth == f"Bearer {token}"
            form = private is not None or auth.startswith("Bearer ")
        else:
            basic = "Basic " + base64.b64encode(token.encode()).decode() if ":" in token else None
            ok = auth in (f"Bearer {token}", basic)
            form = auth.split(" ")[0] in ("Bearer", "Basic")
        if not form:
            self._violation(f"no authentication header in the form {self.kind} documents: {auth[:12]!r}")
        if ok:
            return None
        if self.kind == "gitlab":
            return 401, {"message": "401 Unauthorized"}, {}
        if self.kind == "bitbucket":
            return 401, {"type": "error", "error": {"message": "Unauthorized"}}, {}
        return 401, {"message": "Requires authentication"}, {}

    def _schema_refusal(self, error: jsonschema.ValidationError) -> tuple[int, Any, dict[str, str]]:
        field_name = str(error.absolute_path[0]) if error.absolute_path else "body"
        if self.kind == "github":
            return 422, {"message": "Validation Failed", "errors": [
                {"resource": "Status", "field": field_name, "code": "invalid"}],
                "documentation_url": "https://docs.github.com/rest"}, {}
        if self.kind == "gitlab":
            return 400, {"message": {field_name: [error.message]}}, {}
        if self.kind == "bitbucket":
            return 400, {"type": "error", "error": {"message": f"{field_name}: {error.message}",
                                                    "fields": {field_name: [error.message]}}}, {}
        return 422, {"message": error.message}, {}

    # -- the operations of each forge ----------------------------------------------------------------

    def _operations(self) -> list[Operation]:
        c, schemas = contract(self.kind), request_schemas(self.kind, forgejo=self.forgejo)
        handlers: dict[str, Callable[..., tuple[int, Any, dict[str, str]]]] = {
            "github": {"repos/create-commit-status": self._github_status, "issues/list-comments": self._list,
                       "issues/create-comment": self._create, "issues/update-comment": self._update},
            "gitea": {"repoCreateStatus": self._github_status, "issueGetComments": self._list,
                      "issueCreateComment": self._create, "issueEditComment": self._update},
            "gitlab": {"createCommitStatus": self._gitlab_status, "listMergeRequestNotes": self._list,
                       "createMergeRequestNote": self._create, "updateMergeRequestNote": self._update},
            "bitbucket": {"createBuildStatus": self._bitbucket_status,
                          "listPullRequestComments": self._list, "createPullRequestComment": self._create,
                          "updatePullRequestComment": self._update},
        }[self.kind]
        return [Operation(op, spec["method"], _template(spec["path"]), handlers[op], schemas.get(op))
                for op, spec in c["operations"].items() if op in handlers]

    def _project_ok(self, params: dict[str, str], raw: dict[str, str]) -> bool:
        if self.kind == "gitlab":
            if raw["id"] != quote(self.project, safe=""):
                self._violation(f"GitLab project id {raw['id']!r}: not the project path with / as %2F")
            return params["id"] == self.project
        if self.kind == "bitbucket":
            return f"{params['workspace']}/{params['repo_slug']}" == self.project
        return f"{params['owner']}/{params['repo']}" == self.project

    def _github_status(self, *, params: dict[str, str], raw: dict[str, str], query: Any, body: Any,
                       ) -> tuple[int, Any, dict[str, str]]:
        if not self._project_ok(params, raw):
            return 404, {"message": "Not Found"}, {}
        sha, context = params["sha"], body.get("context") or "default"
        if self.kind == "github" and len(body.get("description") or "") > 140:
            return 422, {"message": "Validation Failed", "errors": [
                {"resource": "Status", "code": "custom", "field": "description",
                 "message": "description is too long (maximum is 140 characters)"}],
                "documentation_url": "https://docs.github.com/rest/commits/statuses"}, {}
        with self._lock:
            same = [s for s in self.statuses.get(sha, []) if s["context"].lower() == context.lower()]
            if len(same) >= 1000:
                return 422, {"message": "Validation Failed", "errors": [
                    {"resource": "Status", "code": "custom", "message": "This SHA and context has reached "
                     "the maximum number of statuses."}]}, {}
            status = {"id": next(self._ids), "context": context, "state": body.get("state"),
                      "description": body.get("description"), "target_url": body.get("target_url")}
            self.statuses.setdefault(sha, []).append(status)
        answer = dict(status)
        if self.kind == "gitea":
            answer["status"] = answer.pop("state")
        return 201, answer, {"Location": f"{self.api_url}/repos/{self.project}/statuses/{sha}"}

    def _gitlab_status(self, *, params: dict[str, str], raw: dict[str, str], query: Any, body: Any,
                       ) -> tuple[int, Any, dict[str, str]]:
        if not self._project_ok(params, raw):
            return 404, {"message": "404 Project Not Found"}, {}
        sha, name, state = params["sha"], body.get("name") or body.get("context") or "default", body["state"]
        key = (sha, name, body.get("ref") or "main")
        with self._lock:
            current = self._gitlab_states.get(key)
            if current == state and state in ("pending", "running"):
                event = {"pending": "enqueue", "running": "run"}[state]
                return 400, {"message": f"Cannot transition status via :{event} from :{state} (Reason(s): "
                                        f"Status cannot transition via \"{event}\")"}, {}
            self._gitlab_states[key] = state
            status = {"id": next(self._ids), "context": name, "state": state, "ref": key[2],
                      "description": body.get("description"), "target_url": body.get("target_url")}
            self.statuses.setdefault(sha, []).append(status)
        return 201, {**status, "name": name, "sha": sha, "status": state}, {}

    def _bitbucket_status(self, *, params: dict[str, str], raw: dict[str, str], query: Any, body: Any,
                          ) -> tuple[int, Any, dict[str, str]]:
        if not self._project_ok(params, raw):
            return 404, {"type": "error", "error": {"message": "Repository not found"}}, {}
        key = body["key"]
        if len(key) > 40:
            message = f"Ensure this value has at most 40 characters (it has {len(key)})."
            self._violation(f"createBuildStatus: key {key!r} over 40 characters")
            error = {"message": f"key: {message}", "fields": {"key": [message]}}
            return 400, {"type": "error", "error": error}, {}
        url = urlsplit(body.get("url") or "")
        if "url" in body and (url.scheme not in ("http", "https") or not url.netloc):
            self._violation(f"createBuildStatus: url {body['url']!r} is not a valid URL")
            return 400, {"type": "error", "error": {"fields": {"url": ["Enter a valid URL."]},
                                                    "message": "url: Enter a valid URL."}}, {}
        with self._lock:
            kept = [s for s in self.statuses.get(params["commit"], []) if s["key"] != key]
            status = {"key": key, "context": body.get("name") or key, "state": body["state"],
                      "description": body.get("description"), "target_url": body.get("url"),
                      "refname": body.get("refname")}
            self.statuses[params["commit"]] = [*kept, status]
        return 201, {"type": "build", **status}, {}

    # -- comments ------------------------------------------------------------------------------------

    def _number(self, params: dict[str, str]) -> int:
        return int(params.get("issue_number") or params.get("index") or params.get("merge_request_iid")
                   or params["pull_request_id"])

    def _page_size(self, query: dict[str, list[str]], name: str, default: int) -> int:
        size = int((query.get(name) or [default])[0])
        if size > 100:
            self._violation(f"{name}={size}: the {self.kind} description allows at most 100")
        return size

    def _list(self, *, params: dict[str, str], raw: dict[str, str], query: dict[str, list[str]], body: Any,
              ) -> tuple[int, Any, dict[str, str]]:
        if not self._project_ok(params, raw):
            return 404, {"message": "Not Found"}, {}
        items = [dict(c) for c in self.comments.get(self._number(params), [])]
        if self.kind == "gitea":
            return 200, [{"id": c["id"], "body": c["body"]} for c in items if not c["system"]], {}
        if self.kind == "bitbucket":
            size, page = self._page_size(query, "pagelen", 10), int((query.get("page") or ["1"])[0])
            chunk = items[(page - 1) * size:page * size]
            out: dict[str, Any] = {"pagelen": size, "page": page, "size": len(items), "values": [
                {"type": "pullrequest_comment", "id": c["id"], "content": {"raw": c["body"]}} for c in chunk]}
            if page * size < len(items):
                out["next"] = (f"{self.api_url}/repositories/{self.project}/pullrequests/"
                               f"{self._number(params)}/comments?pagelen={size}&page={page + 1}")
            return 200, out, {}
        default = 20 if self.kind == "gitlab" else 30
        size, page = self._page_size(query, "per_page", default), int((query.get("page") or ["1"])[0])
        if self.kind == "gitlab" and (query.get("sort") or ["desc"])[0] == "desc":
            items.reverse()
        elif self.kind == "github":
            items = [c for c in items if not c["system"]]
        chunk = items[(page - 1) * size:page * size]
        extra = {}
        if page * size < len(items):
            extra = {"Link": f'<{self.api_url}/next?page={page + 1}>; rel="next"'}
        return 200, [{"id": c["id"], "body": c["body"], "system": c["system"]} for c in chunk], extra

    def _create(self, *, params: dict[str, str], raw: dict[str, str], query: Any, body: Any,
                ) -> tuple[int, Any, dict[str, str]]:
        if not self._project_ok(params, raw):
            return 404, {"message": "Not Found"}, {}
        text = body["content"]["raw"] if self.kind == "bitbucket" else body["body"]
        if self.kind == "gitlab" and any(line.startswith("/") for line in text.split("\n")):
            self._violation("a line of a note that starts with / runs as a quick action")
        ident = self.seed_comment(self._number(params), text)
        return 201, {"id": ident, "body": text}, {}

    def _update(self, *, params: dict[str, str], raw: dict[str, str], query: Any, body: Any,
                ) -> tuple[int, Any, dict[str, str]]:
        if not self._project_ok(params, raw):
            return 404, {"message": "Not Found"}, {}
        ident = int(params["note_id"] if self.kind == "gitlab" else params.get("comment_id") or params["id"])
        text = body["content"]["raw"] if self.kind == "bitbucket" else body["body"]
        if self.kind == "gitlab" and any(line.startswith("/") for line in text.split("\n")):
            self._violation("a line of a note that starts with / runs as a quick action")
        for comments in self.comments.values():
            for comment in comments:
                if comment["id"] == ident and not comment["system"]:
                    comment["body"] = text
                    return 200, {"id": ident, "body": text}, {}
        return 404, {"message": "Not Found"}, {}


# ---------------------------------------------------------------------------------------------------------
# Notifications


@dataclass
class Delivery:
    headers: dict[str, str]
    body: bytes
    verified: bool
    at: float

    @property
    def json(self) -> Any:
        return json.loads(self.body)


class Receiver(LoopbackServer):
    """A notification receiver on 127.0.0.1: checks each POST's signature as gitsync's generic webhook
    receiver does, answers `status` after `delay` seconds, and keeps what it got."""

    def __init__(self, secret: str | None, *, delay: float = 0.0, status: int = 200) -> None:
        self.secret, self.delay, self.status = secret, delay, status
        self.deliveries: list[Delivery] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                headers = {k.lower(): v for k, v in self.headers.items()}
                verified = receiver.secret is not None and verify_webhook("generic", receiver.secret, headers,
                                                                          body)
                receiver.deliveries.append(Delivery(headers, body, verified, time.monotonic()))
                time.sleep(receiver.delay)
                self.send_response(receiver.status if verified or receiver.secret is None else 401)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self._listen(Handler)

    @property
    def url(self) -> str:
        """A path like a chat webhook's, whose last parts are its key."""
        return f"{self.origin}/hooks/gitsync/T0001/B0001/k3y"

    def events(self) -> list[str]:
        return [d.json["event"] for d in self.deliveries if d.verified]
