"""Artifacts: a commit rendered and validated once (in CI, or by one designated agent), signed, and
distributed through an OCI registry (or a git ref) to agents that do not render it again.

document (the artifact: canonical JSON, content-addressed, secret references kept as references;
reading one back into a render with the host's own secrets, no YAML read), signing (its SSHSIG in the
``gitsync-artifact`` namespace over a statement binding digest, repo, branch and commit;
``artifact_signers``), registry (the OCI distribution spec over `gitsync.httpclient`: the manifest
of an artifact, HEAD/GET by tag or digest, blob upload, basic and token auth), source (the agent's
side: poll the tag, pull by digest, verify, keep), publish (``gitsync publish``: render, validate,
build, sign, push to a registry or a git ref).

The agent reaches it through `gitsync.agent.artifact_repo`, imported only when a repo is
``oci://…``: the small setup never loads it. docs/fleet.md says when to use it and what it trusts.
"""
