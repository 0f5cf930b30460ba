"""Generate a config repo of N routes (with upstreams, services, consumers and plugins) and its git history.

Files hold 10 routes each, as teams split config in practice; upstreams and services are shared
by groups of routes. `make_history` builds M commits with `git fast-import` (seconds, not minutes).

Upstream nodes are loopback addresses on a port nothing listens on (a real gateway's data plane
answers 502 at once, after the route's plugins ran), and the commit of revision `c` sets the first
route of file ``c % files`` to ``limit-count.count = 100 + c``: `changed_route` says which request
shows that commit served (APISIX sends ``X-RateLimit-Limit: <count>``).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

ROUTES_PER_FILE = 10
#: Above this many routes each route carries one plugin, not two (about 170 bytes of payload instead
#: of 230), so that 50,000 routes fit APISIX's 10 MiB shared dict (8.6 MB), as a real config that big
#: must.
LEAN_ABOVE = 20_000
#: A port on 127.0.0.x that nothing listens on: the data plane's 502 comes at once, not after a timeout.
DEAD_PORT = 1


def route_file(index: int, routes_per_file: int = ROUTES_PER_FILE, revision: int = 0, *,
               lean: bool = False, prefix: str = "") -> bytes:
    """The YAML of route file `index`: `routes_per_file` routes, the first one carrying `revision`;
    every id (and uri) starts with `prefix` (a team's, when several repos make one gateway's config)."""
    lines = ["routes:"]
    for n in range(index * routes_per_file, (index + 1) * routes_per_file):
        lines += [
            f"  - id: {prefix}r{n}",
            f"    uri: /{prefix}api/v1/svc{n // 100}/r{n}/*",
            "    methods: [GET, POST]",
            f"    service_id: {prefix}s{n // 100}",
            "    plugins:",
            "      limit-count:",
            f"        count: {100 + (revision if n == index * routes_per_file else 0)}",
            "        time_window: 60",
            "        rejected_code: 429",
        ]
        if not lean:
            lines += ["      proxy-rewrite:",
                      f"        regex_uri: ['^/{prefix}api/v1/svc{n // 100}/(.*)', '/$1']"]
    return ("\n".join(lines) + "\n").encode()


def shared_files(routes: int, prefix: str = "", global_rule: bool = True) -> dict[str, bytes]:
    """Upstreams and services (one per 100 routes), consumers, a global rule (ids after `prefix`)."""
    groups = max(1, (routes + 99) // 100)
    ups = ["upstreams:"]
    svcs = ["services:"]
    for g in range(groups):
        ups += [f"  - id: {prefix}u{g}", "    type: roundrobin", "    nodes:",
                f"      - {{host: 127.0.{g // 250}.{g % 250 + 1}, port: {DEAD_PORT}, weight: 1}}"]
        svcs += [f"  - id: {prefix}s{g}", f"    upstream_id: {prefix}u{g}", "    plugins:", "      cors: {}"]
    consumers = ["consumers:"]
    for c in range(max(1, routes // 100)):
        consumers += [f"  - username: {prefix}team{c}", "    plugins:", "      key-auth:",
                      f"        key: bench-key-{prefix}{c:05d}"]
    rules = ["global_rules:", "  - id: prometheus", "    plugins:", "      prometheus: {}"]
    files = {
        "shared/upstreams.yaml": ("\n".join(ups) + "\n").encode(),
        "shared/services.yaml": ("\n".join(svcs) + "\n").encode(),
        "shared/consumers.yaml": ("\n".join(consumers) + "\n").encode(),
    }
    if global_rule:
        files["shared/global_rules.yaml"] = ("\n".join(rules) + "\n").encode()
    return files


def files_count(routes: int, routes_per_file: int = ROUTES_PER_FILE) -> int:
    return max(1, (routes + routes_per_file - 1) // routes_per_file)


def changed_route(routes: int, revision: int) -> tuple[str, int]:
    """The request path of the route the commit of `revision` changed, and the limit it set."""
    n = (revision % files_count(routes)) * ROUTES_PER_FILE
    return f"/api/v1/svc{n // 100}/r{n}/probe", 100 + revision


def config_files(routes: int, revision: int = 0, routes_per_file: int = ROUTES_PER_FILE, *,
                 prefix: str = "", global_rule: bool = True) -> dict[str, bytes]:
    files = shared_files(routes, prefix, global_rule)
    for i in range(files_count(routes, routes_per_file)):
        files[f"routes/r{i:05d}.yaml"] = route_file(i, routes_per_file, revision if i == 0 else 0,
                                                    lean=routes > LEAN_ABOVE, prefix=prefix)
    return files


def make_history(repo: Path, routes: int, commits: int, *, branch: str = "main",
                 routes_per_file: int = ROUTES_PER_FILE, prefix: str = "", global_rule: bool = True) -> None:
    """A bare repo (a remote to serve) whose first commit holds the whole config and each later
    commit changes one route file (`prefix`, `global_rule`: see `config_files`)."""
    subprocess.run(["git", "init", "-q", "--bare", "-b", branch, str(repo)], check=True)
    stream: list[bytes] = []
    base = config_files(routes, routes_per_file=routes_per_file, prefix=prefix, global_rule=global_rule)
    files_n = files_count(routes, routes_per_file)

    def blob(data: bytes) -> bytes:
        return b"data %d\n%s\n" % (len(data), data)

    when = 1_700_000_000
    for c in range(commits):
        message = b"initial config" if c == 0 else b"tune route file %d" % (c % files_n)
        stream.append(b"commit refs/heads/%s\n" % branch.encode())
        stream.append(b"committer bench <bench@localhost> %d +0000\n" % (when + c))
        stream.append(blob(message))
        if c == 0:
            for rel, data in sorted(base.items()):
                stream.append(b"M 100644 inline %s\n" % rel.encode())
                stream.append(blob(data))
        else:
            i = c % files_n
            stream.append(b"M 100644 inline routes/r%05d.yaml\n" % i)
            stream.append(blob(route_file(i, routes_per_file, revision=c, lean=routes > LEAN_ABOVE,
                                          prefix=prefix)))
        stream.append(b"\n")
    subprocess.run(["git", "-C", str(repo), "fast-import", "--quiet"], input=b"".join(stream), check=True)


def add_commits(repo: Path, routes: int, count: int, start_revision: int, prefix: str = "") -> None:
    """Append `count` commits, each changing one route file, through the git CLI's fast-import."""
    files_n = files_count(routes)
    head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()
    branch = subprocess.run(["git", "-C", str(repo), "symbolic-ref", "--short", "HEAD"], capture_output=True,
                            text=True, check=True).stdout.strip()
    stream: list[bytes] = []
    for k in range(count):
        c = start_revision + k
        i = c % files_n
        data = route_file(i, revision=c, lean=routes > LEAN_ABOVE, prefix=prefix)
        stream.append(b"commit refs/heads/%s\n" % branch.encode())
        stream.append(b"committer bench <bench@localhost> %d +0000\n" % (1_800_000_000 + c))
        msg = b"tune route file %d (rev %d)" % (i, c)
        stream.append(b"data %d\n%s\n" % (len(msg), msg))
        if k == 0:
            stream.append(b"from %s\n" % head.encode())
        stream.append(b"M 100644 inline routes/r%05d.yaml\n" % i)
        stream.append(b"data %d\n%s\n\n" % (len(data), data))
    subprocess.run(["git", "-C", str(repo), "fast-import", "--quiet"], input=b"".join(stream), check=True)
