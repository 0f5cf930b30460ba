"""The speed layer (`gitsync.render.memo`) decides nothing: an agent with it and an agent without it
(`parse_cache = false`, the plain path, its items checked by the reference schema walk alone, not the
compiled checks of `gitsync.schema.validity`) push the same bytes, refuse the same commits with the
same problems, and report the same statuses, over any sequence of commits."""

from __future__ import annotations

import itertools
import json
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from gitsync.agent.sync import Agent
from gitsync.settings import load
from gitsync.testing.apisix import ApisixDouble
from testkit.gitservers import BareRepo
from testkit.profiles import examples

FILES = ("a.yaml", "b.yaml", "c/d.yaml")
UPSTREAM = {"id": "u1", "type": "roundrobin", "nodes": {"127.0.0.1:1980": 1}}


def route(name: str, uri: str, upstream: str = "u1") -> dict[str, Any]:
    return {"id": name, "uri": uri, "upstream_id": upstream, "plugins": {"proxy-rewrite": {"uri": "/x"}}}


def base() -> dict[str, list[dict[str, Any]]]:
    return {"a.yaml": [route("r1", "/a"), route("r2", "/b")], "b.yaml": [route("r3", "/c")],
            "c/d.yaml": [route("r4", "/d")]}


# An edit of the repo: (what, which file, a number that picks the item or value).
KINDS_OF_EDIT = ["uri", "add", "remove", "dangling", "syntax", "template", "move", "revert", "check",
                 "uncheck", "refused"]
#: Items APISIX's schemas refuse (a wrong type, an unknown method, a plugin body's wrong type, a
#: value out of range beside defaults the walk writes): each refusal said at its file:line.
REFUSED = [{"priority": "high"}, {"methods": ["FETCH"]}, {"plugins": {"proxy-rewrite": {"uri": 5}}},
           {"upstream_id": None, "upstream": {"nodes": {"127.0.0.1:1980": 1}, "retries": -1}}]
#: The files' health checks (file → its checks), held beside its routes.
CHECKED = "checked"
EDITS = st.tuples(st.sampled_from(KINDS_OF_EDIT), st.sampled_from(FILES),
                  st.integers(min_value=0, max_value=5))


def apply_edit(files: dict[str, Any], edit: tuple[str, str, int], serial: int) -> dict[str, Any]:
    """The repo after one edit (files: path → list of routes, or raw text for a broken file)."""
    what, name, n = edit
    files = {k: (list(v) if isinstance(v, list) else v) for k, v in files.items()}
    if what in ("check", "uncheck"):  # a route changes too, so the push runs the checks the repo has
        checked = {k: v for k, v in files.get(CHECKED, {}).items() if k != name}
        files[CHECKED] = {**checked, name: [check(serial, n)]} if what == "check" else checked
        what = "uri"
    routes = files.get(name)
    if not isinstance(routes, list):
        routes = files[name] = [route(f"n{serial}", f"/n{serial}")]
    if what == "uri" and routes:
        routes[n % len(routes)] = {**routes[n % len(routes)], "uri": f"/u{serial}"}
    elif what == "add":
        routes.insert(n % (len(routes) + 1), route(f"x{serial}", f"/x{serial}"))
    elif what == "remove" and routes:
        routes.pop(n % len(routes))
    elif what == "dangling" and routes:
        routes[n % len(routes)] = {**routes[n % len(routes)], "upstream_id": "nope"}
    elif what == "syntax":
        files[name] = "routes:\n  - {id: broken, uri: [/unclosed\n"
    elif what == "refused" and routes:
        changed = {**routes[n % len(routes)], **REFUSED[n % len(REFUSED)]}
        routes[n % len(routes)] = {k: v for k, v in changed.items() if v is not None}
    elif what == "template" and routes:
        routes[n % len(routes)] = {**routes[n % len(routes)], "desc": "${{ vars.TEAM }}"}
    elif what == "move" and routes:  # an item moves to another file: ids in other places
        other = FILES[(FILES.index(name) + 1) % len(FILES)]
        moved = routes.pop(n % len(routes))
        target = files.get(other)
        files[other] = [*target, moved] if isinstance(target, list) else [moved]
    return files


def check(serial: int, n: int) -> dict[str, Any]:
    """A health check that passes (the gateway answers 404 where no route is) or, for odd `n`, fails."""
    return {"name": f"c{serial}", "request": {"path": "/nowhere"},
            "expect": {"status": 200 if n % 2 else 404}, "retries": 0, "timeout": "1s"}


def file_bytes(files: dict[str, Any]) -> dict[str, str]:
    out = {"upstreams.yaml": json.dumps({"upstreams": [UPSTREAM]})}
    checked = files.get(CHECKED, {})
    for name, value in files.items():
        if name == CHECKED:
            continue
        checks = {"checks": checked[name]} if name in checked else {}
        out[name] = value if isinstance(value, str) else json.dumps({"routes": value, **checks}, indent=1)
    return out


def status_of(agent: Agent, outcome: Any, gateway: ApisixDouble) -> dict[str, Any]:
    """The status the agent reports, and the outcome's result, stage and problems (each agent has a
    gateway of its own: its URL is left out)."""
    report = agent._report(outcome).to_dict()
    report.pop("time"), report.pop("duration")
    report["outcome"] = [outcome.result, outcome.stage, outcome.problems]
    return json.loads(json.dumps(report, default=str).replace(gateway.url, "<gateway>"))


_repos = itertools.count()


@contextmanager
def reference_walk_only() -> Iterator[None]:
    """Every schema question answered by `jsonschema`'s walk (the compiled check says "no" to all)."""
    with mock.patch("gitsync.schema.checks.valid", lambda schema, value: False), \
            mock.patch("gitsync.schema.checks._VALID_BODIES", set()):  # no plugin body taken as checked
        yield


@pytest.mark.slow
@examples(0.1)
@given(st.lists(EDITS, min_size=1, max_size=8))
@example([("check", "a.yaml", 1), ("uncheck", "a.yaml", 0)])  # checks taken out of a file that holds routes
def test_the_fast_path_and_the_plain_path_push_the_same_bytes(edits: list[tuple[str, str, int]]) -> None:
    with tempfile.TemporaryDirectory(prefix="gitsync-speed-") as tmp, \
            ApisixDouble("speed-key") as fast_gw, ApisixDouble("speed-key") as plain_gw:
        root = Path(tmp)
        repo = BareRepo.create(root / f"repo{next(_repos)}.git")
        (root / "key").write_text("speed-key")
        history = [base()]
        repo.commit(file_bytes(history[-1]), "base")

        def agent(gateway: ApisixDouble, name: str, parse_cache: bool) -> Agent:
            return Agent(load({"repo": str(repo.path), "gateways": [gateway.url],
                               "proxy_urls": [gateway.proxy_url], "admin_key_file": str(root / "key"),
                               "state_dir": str(root / name), "writeback": "off", "parse_cache": parse_cache,
                               "vars": {"TEAM": "t"}},
                              config="/dev/null", env={}))

        fast, plain = agent(fast_gw, "fast", True), agent(plain_gw, "plain", False)
        try:
            for serial, edit in enumerate([None, *edits]):
                if edit is not None:
                    files = history[-2] if edit[0] == "revert" and len(history) > 1 else \
                        apply_edit(history[-1], edit, serial)
                    history.append(files)
                    gone = {name: None for name in FILES if name not in files}
                    repo.commit({**file_bytes(files), **gone}, f"edit {serial}: {edit}")
                one = fast.sync_once()
                with reference_walk_only():
                    other = plain.sync_once()
                assert status_of(fast, one, fast_gw) == status_of(plain, other, plain_gw)
                assert fast_gw.put_bodies == plain_gw.put_bodies  # byte for byte, in the same order
            (plain_repo,), (fast_repo,) = plain.repos.all, fast.repos.all
            assert plain_repo.memo.parses >= fast_repo.memo.parses
        finally:
            fast.close()
            plain.close()
