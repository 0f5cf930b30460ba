"""Commit statuses and review comments on the forges: one client per forge behind one interface.

GitHub (and GitHub Enterprise Server), GitLab (gitlab.com and self-hosted), Gitea/Forgejo and
Bitbucket Cloud each show a status beside a commit and a comment on a pull request, but differ in
paths, authentication, the names of the states and their limits. `Forge` is what the rest of
gitsync sees: `post_status`, `upsert_comment` and the links to the forge's pages; a subclass per
forge holds the differences. Every request has one deadline and every answer a size limit
(`gitsync.httpclient`); every failure is a `ForgeError` whose text is redacted (never the token).

The facts each client relies on, with the forges' published API descriptions they come from, are
in tests/data/forges/ (its README), where the contract doubles in the tests check every request
against them:

- GitHub refuses (422) a description longer than 140 characters instead of cutting it, so every
  client cuts descriptions itself.
- GitLab has no ``error`` state, refuses (400) posting the state a status already has, limits
  ``description``, ``target_url`` and ``ref`` to 255 characters, and takes a project by its path
  with every ``/`` written ``%2F``.
- Bitbucket names a status by a ``key`` of at most 40 characters and shows it on a pull request
  only when ``refname`` is the pull request's branch; its states are INPROGRESS, SUCCESSFUL,
  FAILED and STOPPED.
- Gitea and Forgejo take the token as ``Authorization: token <token>``.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import re
import ssl
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar
from urllib.parse import quote, urlsplit

from gitsync import __version__
from gitsync.feedback.dispatch import DeliveryError
from gitsync.httpclient import Answer, HttpClient, HttpError
from gitsync.log import clip, register_secret
from gitsync.settings import Secret, Settings, SettingsError, config_repo

FORGES = ("github", "gitlab", "gitea", "bitbucket")
#: gitsync's four states; each forge names them its own way.
STATES = ("pending", "success", "failure", "error")
MAX_ANSWER = 4 * 1024 * 1024  # a page of comments is the largest answer
MAX_PAGES = 50  # pages of comments read when looking for the sticky one


# ---------------------------------------------------------------------------------------------------------
# Errors


class ForgeError(DeliveryError):
    """A request to the forge failed; the text is redacted. `retry`: worth another try later."""


class ForgeUnavailable(ForgeError):
    """No answer, past the deadline, a 5xx, a rate limit (429) or a lock held (409): try again later."""

    retry = True


class ForgeAuthError(ForgeError):
    """401 or 403: the token is wrong, expired, or lacks the permission."""


class ForgeRejected(ForgeError):
    """Another 4xx: the forge refused the request itself (an unknown commit, a project, a field)."""


# ---------------------------------------------------------------------------------------------------------
# What is posted


@dataclass(frozen=True)
class CommitStatus:
    """A status on a commit, in gitsync's words: `state` is one of `STATES`; `ref` the branch the commit
    was taken from (GitLab files a status under a ref, Bitbucket shows it on that branch's pull request)."""

    sha: str
    context: str
    state: str
    description: str
    target_url: str | None = None
    ref: str | None = None


@dataclass(frozen=True)
class ForgeAddress:
    """Where a forge is and who gitsync is there."""

    kind: str  # one of FORGES
    web_url: str  # https://github.com, https://gitlab.example (no trailing slash)
    api_url: str
    project: str  # owner/repo, group/sub/project, workspace/slug
    token: Secret | None
    timeout: float = 10.0


# ---------------------------------------------------------------------------------------------------------
# Which forge: from the repo URL, or as set


_SCP = re.compile(r"^(?:[^@/]+@)?(?P<host>[^:/]+):(?P<path>[^/].*)$")


def repo_host_and_path(url: str) -> tuple[str | None, str | None]:
    """The host and the repository path (``.git`` and slashes stripped) of a git URL: https, ssh,
    git, or the scp-like ``git@host:owner/repo.git``; (None, None) when it has no host."""
    if "://" not in url:
        match = _SCP.match(url)
        if match is None:
            return None, None
        host, path = match["host"], match["path"]
    else:
        try:
            parts = urlsplit(url)
        except ValueError:
            return None, None
        host, path = parts.hostname, parts.path
    path = path.strip("/").removesuffix(".git").strip("/")
    return (host.lower() if host else None), (path or None)


def forge_of_host(host: str) -> str | None:
    """The forge a host name says: github.com, gitlab.com and bitbucket.org by name; a host with
    gitea, forgejo or codeberg in a label of its name is Gitea/Forgejo, with gitlab GitLab, with github
    GitHub Enterprise."""
    host = host.lower()
    exact = {"github.com": "github", "gitlab.com": "gitlab", "bitbucket.org": "bitbucket"}
    if host in exact:
        return exact[host]
    labels = host.split(".")
    for word, kind in (("gitea", "gitea"), ("forgejo", "gitea"), ("codeberg", "gitea"), ("gitlab", "gitlab"),
                       ("github", "github")):
        if any(word in label for label in labels):
            return kind
    return None


def default_api_url(kind: str, web_url: str) -> str:
    host = (urlsplit(web_url).hostname or "").lower()
    if kind == "github":
        return "https://api.github.com" if host == "github.com" else f"{web_url}/api/v3"
    if kind == "gitlab":
        return f"{web_url}/api/v4"
    if kind == "gitea":
        return f"{web_url}/api/v1"
    return "https://api.bitbucket.org/2.0"


#: The forges' own API hosts: the token goes there without a `forge_url` naming them.
WELL_KNOWN_APIS = frozenset({"api.github.com", "gitlab.com", "api.bitbucket.org", "codeberg.org"})


def address_from_settings(settings: Settings, *, need_token: bool = True) -> ForgeAddress | None:
    """The forge to post to, or None when no forge token is set (and `need_token`); `SettingsError` when
    the forge or the project cannot be told (naming the setting to set), and when the token would go to
    a host nobody named: the API's host is taken from the repo URL (`forge_url` and `forge_api_url`
    unset) and is not one of the forges' own (`WELL_KNOWN_APIS`). A repo URL names where the config
    is, not whom to trust with the forge token: a mirror or a look-alike host must not receive it."""
    if settings.forge_token is None and need_token:
        return None
    host, path = repo_host_and_path(config_repo(settings) or "")
    kind = settings.forge if settings.forge != "auto" else forge_of_host(host or "")
    if kind is None and settings.forge_url:
        kind = forge_of_host(urlsplit(settings.forge_url).hostname or "")
    if kind is None:
        raise SettingsError(f"forge: cannot tell the forge from the repo URL's host {host or '(none)'}: "
                            "set forge = \"github\", \"gitlab\", \"gitea\" or \"bitbucket\" (GITSYNC_FORGE, "
                            "--forge)")
    web_url = (settings.forge_url or (f"https://{host}" if host else "")).rstrip("/")
    if not web_url:
        raise SettingsError("forge_url: the repo URL has no host to take the forge's address from: set "
                            "forge_url (GITSYNC_FORGE_URL, --forge-url)")
    project = (settings.forge_project or path or "").strip("/")
    if project.count("/") < 1:
        raise SettingsError(f"forge_project: {project or '(none)'!r} is not a repository on the forge "
                            "(owner/repo): set forge_project (GITSYNC_FORGE_PROJECT, --forge-project)")
    api_url = (settings.forge_api_url or default_api_url(kind, web_url)).rstrip("/")
    api_host = (urlsplit(api_url).hostname or "").lower()
    if settings.forge_token is not None and not (settings.forge_url or settings.forge_api_url) \
            and api_host not in WELL_KNOWN_APIS:
        raise SettingsError(f"forge_url: the forge token would go to {api_url}, a host taken from the repo "
                            "URL: set forge_url (GITSYNC_FORGE_URL, --forge-url) to the forge's address to "
                            "say it is the forge to trust with it (or forge_api_url)")
    return ForgeAddress(kind, web_url, api_url, project, settings.forge_token, settings.feedback_timeout)


# ---------------------------------------------------------------------------------------------------------
# The clients


@functools.cache
def _default_tls() -> ssl.SSLContext:
    return ssl.create_default_context()


def _message(answer: Answer) -> str:
    """The forge's own words about a refusal (GitHub, GitLab, Gitea: ``message``; Bitbucket:
    ``error.message``), short."""
    try:
        body = answer.json()
    except ValueError:
        return clip(answer.text.strip(), 200)
    if isinstance(body, Mapping):
        error = body.get("error")
        message = error.get("message") if isinstance(error, Mapping) else body.get("message")
        errors = body.get("errors")
        first = errors[0] if isinstance(errors, list) and errors else None
        if isinstance(first, Mapping) and first.get("message"):
            message = f"{message}: {first['message']}"
        if message is not None:
            text = message if isinstance(message, str) else json.dumps(message, ensure_ascii=False)
            return clip(text, 200)
    return clip(answer.text.strip(), 200)


class Forge:
    """A forge's API for one repository: statuses on its commits, comments on its pull requests, and
    links to its pages. Thread-safe (`gitsync.httpclient.HttpClient` is)."""

    kind: ClassVar[str] = ""
    #: The longest description the forge takes (GitHub refuses longer ones; the others get as much).
    description_limit: ClassVar[int] = 140
    #: States the forge keeps until a later one replaces them (posting one again is refused or wasted).
    final_states: ClassVar[frozenset[str]] = frozenset({"success", "failure", "error"})
    accept: ClassVar[bytes] = b"application/json"

    def __init__(self, address: ForgeAddress, http: HttpClient | None = None) -> None:
        self.address = address
        self.web = address.web_url
        self.api = address.api_url
        self.project = address.project
        if address.token is not None:
            register_secret(address.token.reveal())
        tls = _default_tls() if urlsplit(address.api_url).scheme == "https" else None
        self._http = http or HttpClient(tls, address.timeout)

    @property
    def origin(self) -> str:
        """The API's scheme, host and port: how logs name the forge."""
        parts = urlsplit(self.api)
        return f"{parts.scheme}://{parts.netloc.rsplit('@', 1)[-1]}"

    # -- statuses ------------------------------------------------------------------------------------

    def post_status(self, status: CommitStatus) -> None:
        """Post `status` on its commit (the forge replaces the one of the same context)."""
        raise NotImplementedError

    def worth_posting(self, before: CommitStatus | None, after: CommitStatus) -> bool:
        """Whether posting `after` changes what the forge shows, given `before` was posted last."""
        return before != after

    def description(self, status: CommitStatus) -> str:
        """The description as sent: redacted, and cut to the forge's limit (``…`` marks the cut)."""
        return clip(" ".join(status.description.split()), self.description_limit - 1)

    # -- the sticky comment --------------------------------------------------------------------------

    def upsert_comment(self, number: int, body: str, marker: str) -> str:
        """Put `body` on pull request `number` as the one comment that holds `marker`: update it where
        there is one, else create it. Returns what was done: created, updated or unchanged."""
        body = self.comment_body(body)
        for ident, text in self.comments(number):
            if marker in text:
                if text.strip() == body.strip():
                    return "unchanged"
                self.update_comment(number, ident, body)
                return "updated"
        self.create_comment(number, body)
        return "created"

    def comments(self, number: int) -> Iterator[tuple[int, str]]:
        """(id, body) of each comment on pull request `number`, oldest first."""
        raise NotImplementedError

    def comment_body(self, body: str) -> str:
        """`body` as the forge should get it."""
        return body

    def create_comment(self, number: int, body: str) -> None:
        raise NotImplementedError

    def update_comment(self, number: int, ident: int, body: str) -> None:
        raise NotImplementedError

    # -- links ---------------------------------------------------------------------------------------

    def commit_url(self, sha: str) -> str:
        return f"{self.web}/{self.project}/commit/{sha}"

    def file_url(self, sha: str, path: str, line: int | None) -> str:
        return f"{self.web}/{self.project}/blob/{sha}/{quote(path)}" + (f"#L{line}" if line else "")

    def review_line_url(self, number: int, sha: str, path: str, line: int | None) -> str:
        """The line of a file in a pull request's diff (where the forge has an anchor for it), else
        the line in the pull request's head commit."""
        return self.file_url(sha, path, line)

    def branch_url(self, branch: str, path: str, *, directory: bool = False) -> str:
        return f"{self.web}/{self.project}/{'tree' if directory else 'blob'}/{quote(branch)}/{quote(path)}"

    # -- HTTP ----------------------------------------------------------------------------------------

    def auth_headers(self) -> list[tuple[bytes, bytes]]:
        raise NotImplementedError

    def _request(self, method: str, path: str, body: Any = None, *, ok: tuple[int, ...] = (200, 201, 204),
                 ) -> Answer:
        """One request to the API (`path` is below the API's base URL, already quoted, or a whole URL
        under it); an answer with an `ok` status, or a `ForgeError`."""
        url = path if path.startswith(self.api + "/") else self.api + path
        headers = [(b"Accept", self.accept), (b"User-Agent", f"gitsync/{__version__}".encode()),
                   *self.auth_headers()]
        data = None
        if body is not None:
            data = json.dumps(body, ensure_ascii=False).encode()
            headers.append((b"Content-Type", b"application/json"))
        what = f"{self.kind} {self.origin}: {method} {path.split('?')[0]}"
        try:
            answer = self._http.request(method, url, headers=headers, body=data, limit=MAX_ANSWER)
        except HttpError as exc:
            raise ForgeUnavailable(f"{what}: {exc}") from None
        if answer.status in ok:
            return answer
        why = f"{what}: {answer.status} {_message(answer)}"
        if answer.status in (401, 403):
            raise ForgeAuthError(why)
        if answer.status in (409, 429) or answer.status >= 500:
            raise ForgeUnavailable(why)
        raise ForgeRejected(why)

    def _json(self, answer: Answer) -> Any:
        try:
            return answer.json()
        except ValueError:
            raise ForgeError(f"{self.kind} {self.origin}: an answer that is not JSON") from None

    def close(self) -> None:
        self._http.close()


def _repo_path(project: str) -> str:
    owner, _, repo = project.partition("/")
    return f"/repos/{quote(owner, safe='')}/{quote(repo, safe='')}"


class GitHub(Forge):
    """api.github.com, or GitHub Enterprise Server at ``<host>/api/v3``."""

    kind = "github"
    description_limit = 140  # longer: 422 "description is too long (maximum is 140 characters)"
    accept = b"application/vnd.github+json"

    def auth_headers(self) -> list[tuple[bytes, bytes]]:
        headers = [(b"X-GitHub-Api-Version", b"2022-11-28")]
        if self.address.token is not None:
            headers.append((b"Authorization", b"Bearer " + self.address.token.reveal().encode()))
        return headers

    def post_status(self, status: CommitStatus) -> None:
        body = {"state": status.state, "context": status.context, "description": self.description(status)}
        if status.target_url:
            body["target_url"] = status.target_url
        self._request("POST", f"{_repo_path(self.project)}/statuses/{quote(status.sha, safe='')}", body,
                      ok=(201,))

    def comments(self, number: int) -> Iterator[tuple[int, str]]:
        for page in range(1, MAX_PAGES + 1):
            answer = self._request("GET", f"{_repo_path(self.project)}/issues/{number}/comments"
                                          f"?per_page=100&page={page}", ok=(200,))
            items = self._json(answer)
            if not isinstance(items, list):
                raise ForgeError(f"{self.kind} {self.origin}: a list of comments that is not a list")
            for item in items:
                if isinstance(item, Mapping) and isinstance(item.get("id"), int):
                    yield item["id"], str(item.get("body") or "")
            if len(items) < 100 or 'rel="next"' not in answer.headers.get("link", ""):
                return

    def create_comment(self, number: int, body: str) -> None:
        self._request("POST", f"{_repo_path(self.project)}/issues/{number}/comments", {"body": body},
                      ok=(201,))

    def update_comment(self, number: int, ident: int, body: str) -> None:
        self._request("PATCH", f"{_repo_path(self.project)}/issues/comments/{ident}", {"body": body},
                      ok=(200,))

    def review_line_url(self, number: int, sha: str, path: str, line: int | None) -> str:
        anchor = "diff-" + hashlib.sha256(path.encode()).hexdigest() + (f"R{line}" if line else "")
        return f"{self.web}/{self.project}/pull/{number}/files#{anchor}"


class Gitea(GitHub):
    """Gitea and Forgejo (``<host>/api/v1``): GitHub's shapes, its own token header, comments unpaged."""

    kind = "gitea"
    description_limit = 140  # no limit of its own: the same as GitHub, so every forge shows the same
    accept = b"application/json"

    def auth_headers(self) -> list[tuple[bytes, bytes]]:
        if self.address.token is None:
            return []
        return [(b"Authorization", b"token " + self.address.token.reveal().encode())]

    def comments(self, number: int) -> Iterator[tuple[int, str]]:
        items = self._json(self._request("GET", f"{_repo_path(self.project)}/issues/{number}/comments",
                                         ok=(200,)))
        for item in items if isinstance(items, list) else ():
            if isinstance(item, Mapping) and isinstance(item.get("id"), int):
                yield item["id"], str(item.get("body") or "")

    def update_comment(self, number: int, ident: int, body: str) -> None:
        self._request("PATCH", f"{_repo_path(self.project)}/issues/comments/{ident}", {"body": body},
                      ok=(200, 204))

    def file_url(self, sha: str, path: str, line: int | None) -> str:
        return f"{self.web}/{self.project}/src/commit/{sha}/{quote(path)}" + (f"#L{line}" if line else "")

    def review_line_url(self, number: int, sha: str, path: str, line: int | None) -> str:
        return self.file_url(sha, path, line)

    def branch_url(self, branch: str, path: str, *, directory: bool = False) -> str:
        return f"{self.web}/{self.project}/src/branch/{quote(branch)}/{quote(path)}"


class GitLab(Forge):
    """gitlab.com or a self-hosted GitLab (``<host>/api/v4``)."""

    kind = "gitlab"
    description_limit = 255  # also target_url and ref: longer ones are a 400
    _STATES: ClassVar[dict[str, str]] = {"pending": "pending", "success": "success", "failure": "failed",
                                         "error": "failed"}

    @property
    def _project_path(self) -> str:
        return "/projects/" + quote(self.project, safe="")  # group%2Fsub%2Fproject

    def auth_headers(self) -> list[tuple[bytes, bytes]]:
        if self.address.token is None:
            return []
        return [(b"PRIVATE-TOKEN", self.address.token.reveal().encode())]

    def worth_posting(self, before: CommitStatus | None, after: CommitStatus) -> bool:
        """GitLab refuses a status that does not change state (``Cannot transition status via :enqueue
        from :pending``), so a pending one's new description waits for the next state."""
        if before is not None and before.state == after.state and after.state not in self.final_states:
            return False
        return before != after

    def description(self, status: CommitStatus) -> str:
        text = super().description(status)
        if status.state == "error":  # GitLab has no error state: a failed one says it
            text = clip("error: " + text, self.description_limit - 1)
        return text

    def post_status(self, status: CommitStatus) -> None:
        body: dict[str, Any] = {"state": self._STATES[status.state], "name": status.context,
                                "description": self.description(status)}
        if status.target_url and len(status.target_url) <= 255:
            body["target_url"] = status.target_url
        if status.ref and len(status.ref) <= 255:
            body["ref"] = status.ref
        try:
            self._request("POST", f"{self._project_path}/statuses/{quote(status.sha, safe='')}", body,
                          ok=(200, 201))
        except ForgeRejected as exc:
            if "Cannot transition status" not in str(exc):
                raise
            # It holds this state already (posted before the agent's last restart): what we meant.

    def comments(self, number: int) -> Iterator[tuple[int, str]]:
        for page in range(1, MAX_PAGES + 1):
            items = self._json(self._request(
                "GET", f"{self._project_path}/merge_requests/{number}/notes?sort=asc&order_by=created_at"
                       f"&per_page=100&page={page}", ok=(200,)))
            if not isinstance(items, list):
                raise ForgeError(f"{self.kind} {self.origin}: a list of notes that is not a list")
            for item in items:
                if isinstance(item, Mapping) and isinstance(item.get("id"), int) and not item.get("system"):
                    yield item["id"], str(item.get("body") or "")
            if len(items) < 100:
                return

    def create_comment(self, number: int, body: str) -> None:
        self._request("POST", f"{self._project_path}/merge_requests/{number}/notes", {"body": body},
                      ok=(201,))

    def update_comment(self, number: int, ident: int, body: str) -> None:
        self._request("PUT", f"{self._project_path}/merge_requests/{number}/notes/{ident}", {"body": body},
                      ok=(200,))

    def comment_body(self, body: str) -> str:
        """A line of a note that starts with ``/`` runs as a quick action (``/merge``, ``/close``):
        never one of ours (a space before it keeps the text as it reads)."""
        return "\n".join(" " + line if line.startswith("/") else line for line in body.split("\n"))

    def commit_url(self, sha: str) -> str:
        return f"{self.web}/{self.project}/-/commit/{sha}"

    def file_url(self, sha: str, path: str, line: int | None) -> str:
        return f"{self.web}/{self.project}/-/blob/{sha}/{quote(path)}" + (f"#L{line}" if line else "")

    def branch_url(self, branch: str, path: str, *, directory: bool = False) -> str:
        return f"{self.web}/{self.project}/-/{'tree' if directory else 'blob'}/{quote(branch)}/{quote(path)}"


def bitbucket_key(context: str) -> str:
    """A status's key on Bitbucket (at most 40 characters): the context itself when it fits and is
    plain, else ``gitsync-`` and a hash of it."""
    plain = re.sub(r"[^A-Za-z0-9._-]", "-", context)
    if len(plain) <= 40 and plain == context.replace("/", "-"):
        return plain
    return "gitsync-" + hashlib.sha256(context.encode()).hexdigest()[:32]


class Bitbucket(Forge):
    """Bitbucket Cloud (``api.bitbucket.org/2.0``)."""

    kind = "bitbucket"
    description_limit = 255  # none published; GitLab's, to be safe
    _STATES: ClassVar[dict[str, str]] = {"pending": "INPROGRESS", "success": "SUCCESSFUL",
                                         "failure": "FAILED", "error": "FAILED"}

    @property
    def _repo_path(self) -> str:
        workspace, _, slug = self.project.partition("/")
        return f"/repositories/{quote(workspace, safe='')}/{quote(slug, safe='')}"

    def auth_headers(self) -> list[tuple[bytes, bytes]]:
        if self.address.token is None:
            return []
        token = self.address.token.reveal()
        if ":" in token:  # user:app-password (or Atlassian account e-mail:API token)
            return [(b"Authorization", b"Basic " + base64.b64encode(token.encode()))]
        return [(b"Authorization", b"Bearer " + token.encode())]

    def description(self, status: CommitStatus) -> str:
        text = super().description(status)
        return clip("error: " + text, self.description_limit - 1) if status.state == "error" else text

    def post_status(self, status: CommitStatus) -> None:
        body: dict[str, Any] = {"key": bitbucket_key(status.context), "state": self._STATES[status.state],
                                "name": status.context, "description": self.description(status),
                                # Bitbucket wants a valid URL: the commit's page when there is no other
                                "url": status.target_url or self.commit_url(status.sha)}
        if status.ref:
            body["refname"] = status.ref
        self._request("POST", f"{self._repo_path}/commit/{quote(status.sha, safe='')}/statuses/build", body,
                      ok=(200, 201))

    def comments(self, number: int) -> Iterator[tuple[int, str]]:
        path = f"{self._repo_path}/pullrequests/{number}/comments?pagelen=100"
        for _ in range(MAX_PAGES):
            page = self._json(self._request("GET", path, ok=(200,)))
            if not isinstance(page, Mapping):
                raise ForgeError(f"{self.kind} {self.origin}: a page of comments that is not an object")
            for item in page.get("values") or ():
                if isinstance(item, Mapping) and isinstance(item.get("id"), int) and not item.get("inline") \
                        and not item.get("deleted"):
                    content = item.get("content")
                    yield item["id"], str(content.get("raw") or "") if isinstance(content, Mapping) else ""
            following = page.get("next")
            # Only a link under the API's own address gets the token.
            if not isinstance(following, str) or not following.startswith(self.api + "/"):
                return
            path = following

    def create_comment(self, number: int, body: str) -> None:
        self._request("POST", f"{self._repo_path}/pullrequests/{number}/comments", {"content": {"raw": body}},
                      ok=(201,))

    def update_comment(self, number: int, ident: int, body: str) -> None:
        self._request("PUT", f"{self._repo_path}/pullrequests/{number}/comments/{ident}",
                      {"content": {"raw": body}}, ok=(200,))

    def commit_url(self, sha: str) -> str:
        return f"{self.web}/{self.project}/commits/{sha}"

    def file_url(self, sha: str, path: str, line: int | None) -> str:
        return f"{self.web}/{self.project}/src/{sha}/{quote(path)}" + (f"#lines-{line}" if line else "")

    def branch_url(self, branch: str, path: str, *, directory: bool = False) -> str:
        return f"{self.web}/{self.project}/src/{quote(branch)}/{quote(path)}"


CLIENTS: dict[str, type[Forge]] = {"github": GitHub, "gitlab": GitLab, "gitea": Gitea, "bitbucket": Bitbucket}


def forge_client(address: ForgeAddress) -> Forge:
    return CLIENTS[address.kind](address)


def forge_from_settings(settings: Settings) -> Forge | None:
    """The forge client the settings describe; None without a forge token."""
    address = address_from_settings(settings)
    return forge_client(address) if address is not None else None


__all__ = ["CLIENTS", "FORGES", "STATES", "WELL_KNOWN_APIS", "Bitbucket", "CommitStatus", "Forge",
           "ForgeAddress", "ForgeAuthError", "ForgeError", "ForgeRejected", "ForgeUnavailable", "GitHub",
           "GitLab", "Gitea", "address_from_settings", "bitbucket_key", "forge_client", "forge_from_settings",
           "forge_of_host", "repo_host_and_path"]
