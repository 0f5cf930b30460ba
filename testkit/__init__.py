"""Helpers that both the test suite (tests/) and the benchmark (bench/) run on; not part of the wheel.

`testkit.processes`: ports, child processes stopped by pid, ``gitsync`` as a real subprocess of
this tree, and where pip put a tool. `testkit.git`: the git CLI with a fixed identity, and
``git daemon`` on 127.0.0.1. `testkit.gitservers`: bare repos with commits, smart HTTP and ssh
servers, a relay that counts and holds git traffic. Test-only fixtures (OpenBao, SOPS files) stay
in tests/; the APISIX double, which users may run in their own CI too, is `gitsync.testing.apisix`.
"""
