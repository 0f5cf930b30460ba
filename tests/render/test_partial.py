"""Partial apply (``partial = true``): an item that fails validation, and every item that refers to
it, is left out of the commit; the rest goes live. A left-out item keeps its last good version where
there is one, also across a restart of the agent; the note on the commit lists what was left out.
"""

from __future__ import annotations

import pytest

from gitsync.problems import ProblemsError
from gitsync.render import LastGood, RenderOptions, render
from testkit.agents import ADMIN_KEY, repo_url
from testkit.gitservers import git
from testkit.processes import run_gitsync

UPSTREAMS = """upstreams:
  - id: u1
    type: roundrobin
    nodes: {"127.0.0.1:1980": 1}
  - id: u2
    type: roundrobin
    nodes: {"127.0.0.1:1981": 1}
"""


def services(s1_plugins: str = "{}") -> str:
    return f"""services:
  - id: s1
    upstream_id: u1
    plugins: {s1_plugins}
  - id: s2
    upstream_id: u2
"""


def routes(extra: str = "") -> str:
    return f"""routes:
  - id: r1
    uri: /one
    service_id: s1
  - id: r2
    uri: /two
    service_id: s2
  - id: r3
    uri: /three
    upstream_id: u2
{extra}"""


GOOD = {"conf/upstreams.yaml": UPSTREAMS, "conf/services.yaml": services(),
        "conf/routes.yaml": routes()}
#: s1 gets a plugin APISIX does not have; a new route r4 refers to s1; r3 changes, validly.
BROKEN = {"conf/services.yaml": services('{"no-such-plugin": {}}'),
          "conf/routes.yaml": routes("  - id: r4\n    uri: /four\n    service_id: s1\n").replace(
              "/three", "/three-v2")}


def files(changes: dict[str, str], base: dict[str, str] = GOOD) -> dict[str, bytes]:
    return {name: text.encode() for name, text in (base | changes).items()}


def ids(payload: dict, kind: str) -> set[str]:
    return {item["id"] for item in payload.get(kind, [])}


PARTIAL = RenderOptions(partial=True)


def test_without_partial_the_commit_is_refused() -> None:
    with pytest.raises(ProblemsError) as refused:
        render(files(BROKEN))
    assert [p.kind for p in refused.value.problems] == ["services"]


def test_the_broken_item_and_its_dependants_are_left_out_and_nothing_else() -> None:
    rendered = render(files(BROKEN), PARTIAL)
    assert ids(rendered.payload, "services") == {"s2"}
    assert ids(rendered.payload, "routes") == {"r2", "r3"}  # r1 and r4 name s1
    assert ids(rendered.payload, "upstreams") == {"u1", "u2"}
    assert [(o.kind, o.id, o.kept) for o in rendered.left_out] == [
        ("routes", "r1", False), ("routes", "r4", False), ("services", "s1", False)]
    lines = [o.describe() for o in rendered.left_out]
    assert lines[0] == ("conf/routes.yaml:2:5: routes[r1]: refers to services[s1], which is left out "
                        "(left out: not applied)")
    assert lines[1].startswith("conf/routes.yaml:11:5: routes[r4]: refers to services[s1]")
    assert lines[2].startswith("conf/services.yaml:4:15: services[s1].plugins.no-such-plugin: unknown plugin")


def test_dependants_are_followed_to_the_end() -> None:
    broken_upstream = UPSTREAMS.replace("  - id: u1\n", "  - id: u1\n    retries: -1\n")
    rendered = render(files({"conf/upstreams.yaml": broken_upstream}), PARTIAL)
    # u1 is broken; s1 names it; r1 names s1. u2, s2, r2, r3 are untouched.
    assert {(o.kind, o.id) for o in rendered.left_out} == {("upstreams", "u1"), ("services", "s1"),
                                                          ("routes", "r1")}
    assert ids(rendered.payload, "routes") == {"r2", "r3"}


def test_a_left_out_item_keeps_its_last_good_version() -> None:
    good = render(files({}))
    rendered = render(files(BROKEN), PARTIAL, fallback=LastGood.of(good))
    by_id = {item["id"]: item for item in rendered.payload["services"]}
    assert by_id["s1"] == next(s for s in good.payload["services"] if s["id"] == "s1")
    assert {r["id"]: r["uri"] for r in rendered.payload["routes"]} == {
        "r1": "/one", "r2": "/two", "r3": "/three-v2"}  # r1 as it was; r4 never was; r3 is new
    assert [(o.id, o.kept) for o in rendered.left_out] == [("r1", True), ("r4", False), ("s1", True)]
    assert rendered.left_out[0].describe().endswith("(left out: its last good version stays live)")


def test_a_last_good_version_that_no_longer_validates_is_left_out_too() -> None:
    good = render(files({}))
    # s1 breaks, and u1 (which s1's last good version names) is deleted by the same commit.
    upstreams = UPSTREAMS.split("  - id: u2")[0].replace("u1", "u2").replace("1980", "1981")
    rendered = render(files(BROKEN | {"conf/upstreams.yaml": upstreams}), PARTIAL,
                      fallback=LastGood.of(good))
    assert "s1" not in ids(rendered.payload, "services")
    assert {(o.id, o.kept) for o in rendered.left_out} >= {("s1", False), ("r1", False)}


def test_a_file_that_does_not_load_still_refuses_the_commit() -> None:
    with pytest.raises(ProblemsError):
        render(files({"conf/routes.yaml": "routes: [\n"}), PARTIAL)


@pytest.mark.slow
def test_sync_once_applies_the_rest_notes_what_it_left_out_and_keeps_it_across_runs(
        tmp_path, git_daemon, remote_repo, apisix) -> None:
    key = tmp_path / "key"
    key.write_text(ADMIN_KEY)
    args = ["sync", "--once", "--partial", "--repo", repo_url(git_daemon, remote_repo), "--gateway",
            apisix.url, "--admin-key-file", str(key), "--state-dir", str(tmp_path / "state"),
            "--writeback", "on"]
    remote_repo.commit(GOOD, "good")
    assert run_gitsync(*args).returncode == 0
    s1_before = next(s for s in apisix.config()["services"] if s["id"] == "s1")

    broken = remote_repo.commit(BROKEN, "s1 gets a plugin that does not exist; r4 uses s1")
    result = run_gitsync(*args)
    assert result.returncode == 0, result.stderr
    assert f"applied: {broken[:7]}" in result.stdout
    assert "warning: conf/services.yaml:4:15: services[s1].plugins.no-such-plugin" in result.stderr
    live = apisix.config()
    assert {r["id"]: r["uri"] for r in live["routes"]} == {"r1": "/one", "r2": "/two", "r3": "/three-v2"}
    assert next(s for s in live["services"] if s["id"] == "s1") == s1_before
    note = git("--git-dir", str(remote_repo.path), "notes", "--ref=gitsync", "show", broken)
    assert "stage: partial" in note
    assert ("conf/routes.yaml:11:5: routes[r4]: refers to services[s1], which is left out (left out: "
            "not applied)") in note
    assert "(left out: its last good version stays live)" in note

    # A later commit, rendered by a fresh process: s1 still keeps the first commit's version.
    later = remote_repo.commit({"conf/routes.yaml": BROKEN["conf/routes.yaml"].replace("/two", "/two-v3")},
                               "r2 changes")
    result = run_gitsync(*args)
    assert result.returncode == 0 and f"applied: {later[:7]}" in result.stdout, result.stderr
    live = apisix.config()
    assert {r["id"]: r["uri"] for r in live["routes"]} == {"r1": "/one", "r2": "/two-v3",
                                                           "r3": "/three-v2"}
    assert next(s for s in live["services"] if s["id"] == "s1") == s1_before

    fixed = remote_repo.commit({"conf/services.yaml": services()}, "s1 fixed")
    assert run_gitsync(*args).returncode == 0
    live = apisix.config()
    assert ids(live, "routes") == {"r1", "r2", "r3", "r4"}, fixed
