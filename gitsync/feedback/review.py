"""Review on pull requests: ``gitsync validate`` and ``gitsync diff`` as a report where reviewers read,
and ``gitsync pr-comment`` that keeps it as one comment on the pull request.

`Findings` is where the two commands put what they find; as text (the default) it prints as it always
did. `Report` collects the same findings and renders them as Markdown, each problem's ``file:line``
linked to that line in the pull request's diff (GitHub) or its head commit (the other forges):
``--format markdown`` prints it; ``--format github`` writes it to the job summary
(``$GITHUB_STEP_SUMMARY``) and prints each problem as a workflow annotation, which GitHub shows on
that line of the diff. ``--output FILE`` also writes the Markdown to FILE, for ``gitsync pr-comment
FILE``, which finds the pull request (or merge request) from the CI's environment, and creates the
comment that holds `MARKER`, or updates it: one comment per pull request, however many pushes.

With a report format, the exit status says whether the commit could apply: 0 yes (with or without
changes), 1 no (problems, or the deletion guard would refuse it), 2 it could not be told (a gateway
did not answer, a settings error).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from gitsync.feedback.forge import (
    CLIENTS,
    Forge,
    ForgeAddress,
    ForgeError,
    address_from_settings,
    default_api_url,
)
from gitsync.log import redact
from gitsync.settings import Settings, SettingsError

MARKER = "<!-- gitsync-review -->"
FORMATS = ("text", "markdown", "github")
_LOCATION = re.compile(r"^(?P<file>[^\s:][^:]*?):(?P<line>\d+)(?::(?P<col>\d+))?: (?P<rest>.*)$", re.S)
MAX_PROBLEMS_SHOWN = 50  # in a report; the count says the rest
MAX_COMMENT = 60_000  # characters of a comment (GitHub takes 65,536)


# ---------------------------------------------------------------------------------------------------------
# Where a pull request is: from the CI's environment


@dataclass(frozen=True)
class PullRequest:
    """The pull (merge) request a CI job runs for, and its forge: what links and comments need."""

    kind: str
    web_url: str
    api_url: str
    project: str
    number: int | None  # None: not a pull request's job (a push)
    sha: str | None  # the pull request's head commit


def _int(text: str | None) -> int | None:
    return int(text) if text and text.isdigit() else None


def _github_event(path: str | None) -> Mapping[str, object]:
    try:
        event = json.loads(Path(path).read_text()) if path else {}
    except (OSError, ValueError):
        return {}
    pull = event.get("pull_request") if isinstance(event, dict) else None
    return pull if isinstance(pull, dict) else {}


def pull_request_from_env(env: Mapping[str, str]) -> PullRequest | None:
    """GitHub Actions (and Gitea/Forgejo Actions), GitLab CI, Bitbucket Pipelines; None elsewhere."""
    if env.get("GITHUB_ACTIONS") == "true":
        pull = _github_event(env.get("GITHUB_EVENT_PATH"))
        ref = re.match(r"^refs/pull/(\d+)/", env.get("GITHUB_REF", ""))
        number = pull.get("number")
        if not isinstance(number, int):
            number = _int(ref.group(1) if ref else None)
        head = pull.get("head")
        sha = head.get("sha") if isinstance(head, dict) else None
        gitea = env.get("GITEA_ACTIONS") == "true" or env.get("FORGEJO_ACTIONS") == "true"
        kind = "gitea" if gitea else "github"
        web = env.get("GITHUB_SERVER_URL", "https://github.com").rstrip("/")
        return PullRequest(kind, web, env.get("GITHUB_API_URL") or default_api_url(kind, web),
                           env.get("GITHUB_REPOSITORY", ""), number,
                           sha if isinstance(sha, str) else env.get("GITHUB_SHA"))
    if env.get("GITLAB_CI") == "true":
        web = env.get("CI_SERVER_URL", "https://gitlab.com").rstrip("/")
        return PullRequest("gitlab", web, env.get("CI_API_V4_URL") or default_api_url("gitlab", web),
                           env.get("CI_PROJECT_PATH", ""), _int(env.get("CI_MERGE_REQUEST_IID")),
                           env.get("CI_COMMIT_SHA"))
    if env.get("BITBUCKET_BUILD_NUMBER"):
        project = f"{env.get('BITBUCKET_WORKSPACE', '')}/{env.get('BITBUCKET_REPO_SLUG', '')}"
        return PullRequest("bitbucket", "https://bitbucket.org", default_api_url("bitbucket", ""), project,
                           _int(env.get("BITBUCKET_PR_ID")), env.get("BITBUCKET_COMMIT"))
    return None


def review_forge(settings: Settings, env: Mapping[str, str]) -> tuple[Forge | None, PullRequest | None]:
    """The forge client and pull request of this job: from the CI's environment, the forge settings
    filling in (and winning where they are set); the client has the token when one is set."""
    pull = pull_request_from_env(env)
    if pull is not None:
        kind = settings.forge if settings.forge != "auto" else pull.kind
        address = ForgeAddress(kind, (settings.forge_url or pull.web_url).rstrip("/"),
                               (settings.forge_api_url or pull.api_url).rstrip("/"),
                               settings.forge_project or pull.project, settings.forge_token,
                               settings.feedback_timeout)
        return CLIENTS[kind](address), pull
    try:
        address = address_from_settings(settings, need_token=False)
    except SettingsError:  # links are a courtesy here: without a forge, the report has none
        return None, None
    return (CLIENTS[address.kind](address) if address else None), None


# ---------------------------------------------------------------------------------------------------------
# What validate and diff find


class Findings:
    """Where ``validate`` and ``diff`` put what they find: as text, stdout and stderr, as always."""

    def problem(self, text: str) -> None:
        """A problem of the config (``file:line:col: kind[id].field: message``): the commit is refused."""
        print(text, file=sys.stderr)

    def refused(self, text: str) -> None:
        """The commit would be refused for another reason (the deletion guard)."""
        print(text, file=sys.stderr)

    def error(self, text: str) -> None:
        """Something that kept the command from telling (a gateway, a file, the settings)."""
        print(text, file=sys.stderr)

    def warning(self, text: str) -> None:
        print(f"warning: {text}", file=sys.stderr)

    def line(self, text: str) -> None:
        """A line of what would change."""
        print(text)

    def summary(self, text: str) -> None:
        """What was checked, in a line (``valid: 2 routes, 1 services``)."""
        print(text)

    def finish(self, status: int) -> int:
        return status


@dataclass
class Report(Findings):
    """The findings as a Markdown report (see the module's docstring)."""

    command: str
    fmt: str
    output: Path | None = None
    forge: Forge | None = None
    pull: PullRequest | None = None
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    problems: list[str] = field(default_factory=list)
    refusals: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    summaries: list[str] = field(default_factory=list)

    def problem(self, text: str) -> None:
        self.problems.append(redact(text))

    def refused(self, text: str) -> None:
        self.refusals.append(redact(text))

    def error(self, text: str) -> None:
        self.errors.append(redact(text))

    def warning(self, text: str) -> None:
        self.warnings.append(redact(text))

    def line(self, text: str) -> None:
        self.lines.append(redact(text))

    def summary(self, text: str) -> None:
        self.summaries.append(redact(text))

    # -- rendering -----------------------------------------------------------------------------------

    def link(self, path: str, line: int | None) -> str | None:
        forge, pull = self.forge, self.pull
        if forge is None or pull is None or not pull.sha:
            return None
        if pull.number is not None:
            return forge.review_line_url(pull.number, pull.sha, path, line)
        return forge.file_url(pull.sha, path, line)

    def _problem_markdown(self, text: str) -> str:
        match = _LOCATION.match(text)
        if match is None:
            return f"- {_escape(text)}"
        place = f"`{match['file']}:{match['line']}`"
        url = self.link(match["file"], int(match["line"]))
        return f"- {f'[{place}]({url})' if url else place} {_escape(match['rest'])}"

    def verdict(self) -> str:
        if self.problems:
            return f"❌ {len(self.problems)} problem(s): this commit would be refused"
        if self.refusals:
            return "❌ the deletion guard would refuse this commit"
        if self.errors:
            return "⚠️ could not tell: " + _escape(self.errors[0])
        if self.command == "validate":
            return "✅ valid"
        changes = sum(1 for line in self.lines if re.match(r"^\s+[+~!-] ", line))
        return f"✅ valid; {changes} item change(s) on the gateways" if changes else "✅ valid; no changes"

    def markdown(self) -> str:
        out = [MARKER, f"### gitsync {self.command}: {self.verdict()}", ""]
        if self.pull is not None and self.pull.sha:
            out += [f"Commit `{self.pull.sha[:12]}`.", ""]
        out += [*(_escape(s) for s in self.summaries), ""] if self.summaries else []
        if self.problems:
            out += [self._problem_markdown(p) for p in self.problems[:MAX_PROBLEMS_SHOWN]]
            if len(self.problems) > MAX_PROBLEMS_SHOWN:
                out.append(f"- … and {len(self.problems) - MAX_PROBLEMS_SHOWN} more")
            out.append("")
        sections = (("Refused", self.refusals), ("Errors", self.errors), ("Warnings", self.warnings))
        for title, items in sections:
            if items and (title != "Errors" or len(items) > 1 or self.problems or self.refusals):
                out += [f"**{title}**", "", *(f"- {_escape(i)}" for i in items), ""]
        if self.lines:
            out += ["<details open><summary>What would change</summary>", "", "```diff",
                    *(_diff_line(line) for line in self.lines), "```", "", "</details>", ""]
        text = "\n".join(out)
        return text if len(text) <= MAX_COMMENT else text[:MAX_COMMENT] + "\n\n… (cut: see the job's log)\n"

    def annotations(self) -> list[str]:
        """GitHub workflow commands: each problem on its line (GitHub shows it there in the diff)."""
        out = []
        for text in self.problems:
            match = _LOCATION.match(text)
            if match is None:
                out.append(f"::error title=gitsync {self.command}::{_command_data(text)}")
                continue
            props = [f"file={_command_property(match['file'])}", f"line={match['line']}"]
            if match["col"]:
                props.append(f"col={match['col']}")
            props.append(f"title=gitsync {self.command}")
            out.append(f"::error {','.join(props)}::{_command_data(match['rest'])}")
        out += [f"::error title=gitsync {self.command}::{_command_data(t)}" for t in self.refusals]
        out += [f"::warning title=gitsync {self.command}::{_command_data(t)}" for t in self.warnings]
        return out

    def finish(self, status: int) -> int:
        markdown = self.markdown()
        if self.output is not None:
            self.output.write_text(markdown)
        if self.fmt == "github":
            for annotation in self.annotations():
                print(annotation)
            summary = self.env.get("GITHUB_STEP_SUMMARY")
            if summary:
                with open(summary, "a", encoding="utf-8") as handle:
                    handle.write(markdown + "\n")
            else:
                print(markdown)
        elif self.output is None:
            print(markdown)
        if self.problems or self.refusals:
            return 1
        return 2 if self.errors or status == 2 else 0


def _escape(text: str) -> str:
    """Text as Markdown shows it, not as it would format it (no HTML, no emphasis, no links)."""
    return re.sub(r"([\\`*_{}\[\]<>#|])", r"\\\1", text)


def _diff_line(line: str) -> str:
    """A line of diff's text as a ``diff`` block colours it: an item added in the first column as ``+``,
    one removed or pruned as ``-``, the others plain."""
    line = line.replace("```", "`` `")
    stripped = line.lstrip()
    if stripped.startswith(("+ ", "- ", "! ")):
        mark = "+" if stripped[0] == "+" else "-"
        return mark + line.replace(stripped[0], " ", 1)[1:]
    return " " + line


def _command_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _command_property(text: str) -> str:
    return _command_data(text).replace(":", "%3A").replace(",", "%2C")


def findings(args: argparse.Namespace, command: str, settings: Settings) -> Findings:
    """The findings of `command` in the format its arguments ask for."""
    fmt = getattr(args, "format", None) or "text"
    output = getattr(args, "output", None)
    if fmt == "text" and output is None:
        return Findings()
    forge, pull = review_forge(settings, os.environ)
    return Report(command, fmt, Path(output) if output else None, forge, pull)


def format_arguments(parser: argparse.ArgumentParser) -> None:
    """``--format`` and ``--output`` of validate and diff."""
    parser.add_argument("--format", choices=FORMATS, default="text",
                        help="text (default); markdown: a report with each problem linked to its line; "
                             "github: the report in the job summary and each problem as an annotation on its "
                             "line")
    parser.add_argument("--output", metavar="FILE", default=None,
                        help="also write the Markdown report to FILE (for gitsync pr-comment FILE)")


# ---------------------------------------------------------------------------------------------------------
# gitsync pr-comment


def pr_comment_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("report", metavar="FILE", help="the Markdown report (gitsync validate/diff --output)")
    parser.add_argument("--pr", type=int, default=None, metavar="N",
                        help="the pull (merge) request's number (default: from the CI's environment)")


def pr_comment_command(settings: Settings, args: argparse.Namespace) -> int:
    """Put the report on the pull request as its one gitsync comment: exit 0 done, 1 the forge failed,
    2 nothing to comment on (no report, no pull request, no token)."""
    try:
        body = Path(args.report).read_text(encoding="utf-8")
    except OSError as exc:
        print(f"gitsync pr-comment: {args.report}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    forge, pull = review_forge(settings, os.environ)
    number = args.pr if args.pr is not None else (pull.number if pull else None)
    if forge is None or number is None:
        print("gitsync pr-comment: no pull request to comment on: run it in a pull (merge) request's CI job, "
              "or give --pr N and the forge settings (forge, forge_url, forge_project)", file=sys.stderr)
        return 2
    if forge.address.token is None:
        print("gitsync pr-comment: forge_token is not set (GITSYNC_FORGE_TOKEN, forge_token_file)",
              file=sys.stderr)
        return 2
    if MARKER not in body:
        body = f"{MARKER}\n{body}"
    try:
        done = forge.upsert_comment(number, body, MARKER)
    except ForgeError as exc:
        print(f"gitsync pr-comment: {exc}", file=sys.stderr)
        return 1
    finally:
        forge.close()
    print(f"gitsync pr-comment: {done} the comment on {forge.kind} {forge.project} #{number}")
    return 0


__all__ = ["FORMATS", "MARKER", "Findings", "PullRequest", "Report", "findings", "format_arguments",
           "pr_comment_arguments", "pr_comment_command", "pull_request_from_env", "review_forge"]

