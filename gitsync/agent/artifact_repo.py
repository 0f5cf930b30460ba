"""A config repo whose commits arrive as signed artifacts from an OCI registry (``repo = "oci://…"``):
the same `Repo` to the rest of the agent (its tip, its commits as renders, its refusals, its notes and
status), so canaries, the guard, checks, rollback, the web view and the forge statuses work as on the
git path.

Its tip is the commit the verified artifact at its tag names. The tag is polled with one manifest
HEAD; the artifact is pulled only when the digest moved (`gitsync.artifact.source`). One that cannot
be verified (tampered, unsigned, signed by a key not allowed, of another repo or branch) is refused
as a commit would be: its tip is the manifest's digest (64 hex: there is no commit it can be trusted
to name), refused at ``verify`` with the reason, and the gateways stay on the last good commit. A
commit's render is the artifact with the host's own secrets put in for its references: no YAML is
read, nothing is validated again (the publisher validated it; the gateway's refusal is still placed
at file:line by the carried source map).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from gitsync.agent.outcomes import Stage
from gitsync.agent.repo import Repo
from gitsync.agent.run import SyncRun
from gitsync.artifact.document import expand_references
from gitsync.artifact.source import ArtifactSource
from gitsync.display import short
from gitsync.log import logger
from gitsync.render import LastGood, Rendered
from gitsync.settings import Settings
from gitsync.source.transport import SourceError
from gitsync.timing import Phases


class ArtifactRepo(Repo):
    """A `Repo` over an artifact source (see the module)."""

    REMOTE = "registry"
    artifacts: ArtifactSource

    def _open(self, settings: Settings) -> None:
        self.artifacts = ArtifactSource(settings)

    @property
    def url(self) -> str:
        return self.artifacts.url

    def _look(self, run: SyncRun, phases: Phases) -> str:
        with phases.timed("check"):
            digest = self._contact(self.artifacts.check)
        known = self.artifacts.known(digest)
        if known is not None:
            return known
        refused = self.artifacts.refused.get(digest)
        if refused is None:
            try:
                with phases.timed("fetch"):
                    return self._contact(lambda: self.artifacts.pull(digest).commit)
            except SourceError as exc:
                if exc.stage != "verify":
                    raise
                refused = exc
        tip = digest.removeprefix("sha256:")
        run.unfetchable[self.name] = tip, refused
        return tip

    def commit_time(self, sha: str) -> datetime:
        """When `sha` was committed, as its artifact says; a refused artifact's digest raises why it was
        refused (stage ``verify``: the act refuses it, the group gate does not wait on it)."""
        refused = self.artifacts.refused.get("sha256:" + sha)
        if refused is not None:
            raise refused
        return self.artifacts.commit_time(sha)

    def _rendered(self, sha: str, *, fetch: bool, run: SyncRun, fallback: LastGood | None,
                  ) -> tuple[Rendered, str, str, Mapping[str, bytes]]:
        """`sha`'s artifact as a render; `fetch` and `fallback` do not apply: the artifact was pulled when
        the tip was looked at, and a published one is whole. It carries no files."""
        artifact = self.artifacts.artifact(sha)
        with run.phases.timed("render"):
            rendered = expand_references(artifact, self.options.secret_lookup, self.options.check_limits)
        logger.debug("{}commit {}: artifact {} ({} bytes)", self.label, short(sha), artifact.digest,
                     artifact.size)
        return rendered, artifact.subject, artifact.message, {}

    def render_again(self, sha: str, *, apart: bool = False) -> tuple[Rendered, Mapping[str, bytes]]:
        """`sha`'s artifact as a render again (it carries no files: the web view places items by its
        source map)."""
        artifact = self.artifacts.artifact(sha)
        return expand_references(artifact, self.options.secret_lookup, self.options.check_limits), {}

    def note(self, sha: str, stage: Stage, lines: list[str]) -> None:
        """A note on a refused commit; none on a refused artifact's digest (no commit it names can be
        trusted: the agent's log and status say why)."""
        if len(sha) == 40:
            super().note(sha, stage, lines)

    def remote_subject(self, sha: str) -> str:
        return self.artifacts.subject(sha)

    def tidy(self) -> None:
        """Nothing to merge: the artifacts kept are pruned as they are written."""


__all__ = ["ArtifactRepo"]
