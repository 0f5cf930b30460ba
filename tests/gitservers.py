"""Real git servers on 127.0.0.1 and repos with commits, for tests: they live in `testkit.gitservers`
(shared with bench/); this module is where tests import them from."""

from __future__ import annotations

from testkit.gitservers import (
    BareRepo,
    CannedServer,
    GitDaemon,
    GitGate,
    Hold,
    HttpAuth,
    HttpGitServer,
    HungServer,
    Signer,
    SshGitServer,
    Traffic,
    git,
    git_env,
    gpg_signer,
    ssh_keygen,
    ssh_signer,
)

__all__ = ["BareRepo", "CannedServer", "GitDaemon", "GitGate", "Hold", "HttpAuth", "HttpGitServer",
           "HungServer", "Signer", "SshGitServer", "Traffic", "git", "git_env", "gpg_signer", "ssh_keygen",
           "ssh_signer"]
