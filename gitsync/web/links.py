"""Links to the forge from `commit_url`: ``{sha}`` for a commit; with ``{path}`` and ``{line}`` too, a
``file:line`` links to that line, and a commit to the template's part before ``{path}`` (on GitHub,
GitLab and Gitea, the tree at that commit). Without ``{path}``, a ``file:line`` links to its commit."""

from __future__ import annotations

from urllib.parse import quote


class Links:
    def __init__(self, template: str | None) -> None:
        self.template = template

    def commit(self, sha: str | None) -> str | None:
        if not self.template or not sha:
            return None
        template = self.template
        if "{path}" in template:
            template = template[:template.index("{path}")]
        return template.replace("{sha}", quote(sha, safe="")).replace("{line}", "")

    def file(self, sha: str | None, path: str | None, line: int | None) -> str | None:
        if not self.template or not sha or not path:
            return None
        if "{path}" not in self.template:
            return self.commit(sha)
        return (self.template.replace("{sha}", quote(sha, safe="")).replace("{path}", quote(path, safe="/"))
                .replace("{line}", str(line or 1)))


__all__ = ["Links"]
