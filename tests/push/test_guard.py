"""The deletion guard: the pure verdict, and `gitsync sync --once` / `diff` as real processes against
the double and a real git remote."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gitsync.push.guard import GuardPolicy, KindChange, allowed_kinds, check_deletions, trailers
from gitsync.testing.apisix import ApisixDouble
from testkit.agents import ADMIN_KEY, repo_url
from testkit.gitservers import git, git_env
from testkit.processes import run_gitsync


def routes(n: int, start: int = 0) -> list[dict]:
    return [{"id": f"r{i}", "uri": f"/r{i}", "upstream_id": "u"} for i in range(start, start + n)]


@pytest.mark.parametrize(("live", "desired", "refused"), [
    (20, 0, "it would leave routes empty"),
    (1, 0, "it would leave routes empty"),  # even one item: emptying a kind is never silent
    (20, 8, "it would delete 12 routes, more than 10"),  # 60 %: over max(25 % of 20, 10)
    (20, 18, None),  # 10 %
    (100, 70, "it would delete 30 routes, more than 25"),
    (100, 75, None),  # exactly 25 %
    (12, 2, None),  # 10 items: always allowed
])
def test_the_verdict(live: int, desired: int, refused: str | None) -> None:
    verdict = check_deletions({"routes": routes(desired)}, {"routes": routes(live)}, ["routes"],
                              GuardPolicy())
    (change,) = verdict.kinds
    assert (change.live, change.after, change.deleted) == (live, desired, live - desired)
    assert change.refused == refused


def test_the_described_line_and_the_allowances() -> None:
    live = {"routes": routes(812), "upstreams": [{"id": "u"}]}
    verdict = check_deletions({"upstreams": [{"id": "u"}]}, live, ["routes", "upstreams"], GuardPolicy())
    assert verdict.problems == ['routes: 812 → 0, deletes 812 of 812 (100 %), refused: add '
                                '"Gitsync-Allow-Delete: routes" (it would leave routes empty)']
    for allowed in ({"routes"}, {"all"}):
        assert not check_deletions({}, live, ["routes"], GuardPolicy(allowed=frozenset(allowed))).refused
    assert not check_deletions({}, live, ["routes"], GuardPolicy(enabled=False)).refused
    (upstreams,) = check_deletions({}, live, ["upstreams"], GuardPolicy()).kinds
    assert upstreams.refused == "it would leave upstreams empty"
    per_kind = GuardPolicy(per_kind={"routes": 0.5})  # 406 of 812 may go
    assert not check_deletions({"routes": routes(406)}, live, ["routes"], per_kind).refused
    assert check_deletions({"routes": routes(405)}, live, ["routes"], per_kind).refused


def test_unmanaged_kinds_are_not_looked_at() -> None:
    assert check_deletions({}, {"secrets": [{"id": "vault/a"}]}, ["routes"], GuardPolicy()).kinds == ()


@pytest.mark.parametrize(("message", "kinds"), [
    ("Drop the legacy API\n\nGitsync-Allow-Delete: routes, upstreams\n", {"routes", "upstreams"}),
    ("x\n\ngitsync-allow-delete: all\n", {"all"}),
    ("x\n\nGitsync-Allow-Delete: routes\nGitsync-Allow-Delete: ssls\n", {"routes", "ssls"}),
    ("x\n\nGitsync-Allow-Delete: nonsense\n", set()),
    ("Mentions Gitsync-Allow-Delete: routes in the middle of a line", set()),
    # only the last paragraph, and never the subject
    ("Gitsync-Allow-Delete: routes\n", set()),
    ("Gitsync-Allow-Delete: routes\n\nThe body.\n", set()),
    ("x\n\nGitsync-Allow-Delete: routes\n\nA last paragraph of prose.\n", set()),
    # a paragraph of prose with one trailer-like line in it is not a trailer block
    ("x\n\nWe talked about it.\nGitsync-Allow-Delete: routes\n", set()),
    # ... unless git generated a trailer there and a quarter of its lines are trailers
    ("x\n\nWe talked about it.\nGitsync-Allow-Delete: routes\nSigned-off-by: A <a@example.com>\n",
     {"routes"}),
    # values: kind names or all only, any case; a value with any other word allows nothing
    ("x\n\nGitsync-Allow-Delete: routes was wrong last time\n", set()),
    ("x\n\nGitsync-Allow-Delete: none of the routes please\n", set()),
    ("x\n\nGitsync-Allow-Delete: ROUTES, Upstreams\n", {"routes", "upstreams"}),
    ("x\n\nGITSYNC-ALLOW-DELETE: All\n", {"all"}),
    ("x\n\nGitsync-Allow-Delete routes\n", set()),  # no colon: not a trailer
    # a continuation line, comments and trailing blank lines, as git reads them
    ("x\n\nGitsync-Allow-Delete: routes,\n  upstreams\n# a comment\n\n\n", {"routes", "upstreams"}),
    ("x\n\nGitsync-Allow-Delete : ssls\n", {"ssls"}),
])
def test_trailers(message: str, kinds: set[str]) -> None:
    assert allowed_kinds(message) == kinds


def git_trailers(message: str) -> list[tuple[str, str]]:
    """git's own reading: ``git interpret-trailers --parse --no-divider`` (no trailer.* settings)."""
    result = subprocess.run(["git", "interpret-trailers", "--parse", "--no-divider"], input=message.encode(),
                            capture_output=True, env=git_env(), timeout=30, check=True)
    pairs = []
    # lines end at "\n" only: a value may hold a "\r" (splitlines would cut it there)
    for line in result.stdout.decode().split("\n")[:-1]:
        token, _, value = line.partition(": ")
        pairs.append((token, value))
    return pairs


LINES = ["Fix the routes", "", " ", "Gitsync-Allow-Delete: routes", "gitsync-allow-delete: ROUTES, ssls",
         "Gitsync-Allow-Delete: routes was wrong last time", "Gitsync-Allow-Delete : all",
         "Gitsync-Allow-Delete:routes", "Gitsync-Allow-Delete:", "Reviewed-by: B <b@example.com>",
         "Signed-off-by: A <a@example.com>", "(cherry picked from commit 0123abc)", "  continued here",
         "\tand a tab", "Some prose: with a colon", "prose without one", "# a comment", "#123 issue",
         "Bug #42: x", "Key x: y", ": no token", "Ünïcode: value", "Token-With-Dashes-2: v",
         "Gitsync-Allow-Delete: routes\r"]


#: Messages at the edges of git's rules (each one checked against git itself, every run).
EDGES = [
    "x\n\nA: b", "x\n\nA: b\n", "x\n\nA: b\n\n\n", "x\n\nA: b\n#c\n\n#d\n", "x\n\nA: b\n#c\nd: e\n",
    "x\n\nA : b\n", "x\n\nA\t: b\n", "x\n\nA x: b\n", "x\n\n A: b\n", "x\n\n: b\n", "x\n\nA.b: c\n",
    "x\n\nA:b\n", "x\n\nA:\n", "x\n\nA: b\n  c\n  d\n", "x\n\nA: b\n\tc\n", "x\n\nA: b\n  c\n#x\nD: e\n",
    "x\n\n  c\nA: b\n", "x\n\nprose\n  c\nA: b\n",
    "x\n\np1\np2\np3\nSigned-off-by: A <a@b>\n", "x\n\np1\np2\np3\np4\nSigned-off-by: A <a@b>\n",
    "x\n\np1\n  c1\n  c2\nSigned-off-by: A <a@b>\n", "x\n\np1\np2\n#c\n  c\nSigned-off-by: A <a@b>\n",
    "x\n\np1\n(cherry picked from commit 0123abc)\n", "x\n\nSigned-off-by: A\n  more\np\n",
    "x\n\n\u00a0\nA: b\n", "x\n\u00a0\nA: b\n", "x\n\nA: b \u00a0\n", "x\n\n\u00a0A: b\n",
    "x\n\nA: b\r\n", "x\n#\n\nA: b\n", "#x\n\nA: b\n", "# x\nA: b\n", "A: b\n\nC: d\n",
    "x\n\nA: b\nC: d\n\n", "x\n\nA: b\n \nC: d\n", "x\n \nA: b\n", "x\n\nA: b\n\n#\n",
    "x\n\nA: b\n  c \n", "x\n\nA: b\n\t\tc\td\n", "x\n\nA:  \t b \t\n", "x\n\nA-1: b\nB_2: c\n",
    "x\n\nA: b\n#c\n", "x\n\n#c\nA: b\n", "x\n\nA: b\nprose\n", "x\n\nprose\nA: b\n", "x\n", "",
    "\n", "\n\nA: b\n", "x\n\nA: b\n  \n", "x\n\nA X: b\n", "x\n\nA\tX: b\n",
    # the quarter of trailers a generated one needs, with continuation lines and comments counted
    "x\n\np1\n  c1\n  c2\np2\nSigned-off-by: S\n", "x\n\np1\np2\n#c\n  c1\n  c2\nSigned-off-by: S\n",
    "x\n\n  c1\n  c2\np1\np2\nSigned-off-by: S\n",
    "x\n\n" + "p\n" * 7 + "A: b\nSigned-off-by: S\n", "x\n\n" + "p\n" * 6 + "A: b\nSigned-off-by: S\n",
    "x\n\n  c1\nSigned-off-by: S\n", "x\n\nA: b\n \u00a0c\n",
    # a value that holds a carriage return, continued on the next line
    "\nA: b\r\n  c", "x\n\nGitsync-Allow-Delete: routes\r\n  continued here\n",
]


@pytest.mark.parametrize("message", EDGES)
def test_trailers_at_the_edges_of_gits_rules(message: str) -> None:
    assert trailers(message) == git_trailers(message)


@given(st.lists(st.sampled_from(LINES), min_size=1, max_size=9), st.booleans())
def test_trailers_are_read_as_git_interpret_trailers_reads_them(lines: list[str], newline: bool) -> None:
    message = "\n".join(lines) + ("\n" if newline else "")
    assert trailers(message) == git_trailers(message), message


# ---------------------------------------------------------------------------------------------------------
# real processes


def route_file(n: int, start: int = 0) -> str:
    lines = ["upstreams:", "  - id: u", "    nodes: {'127.0.0.1:1980': 1}", "routes:"]
    for i in range(start, start + n):
        lines += [f"  - id: r{i}", f"    uri: /r{i}", "    upstream_id: u"]
    return "\n".join(lines) + "\n"


@pytest.fixture
def once(tmp_path: Path, git_daemon, remote_repo, apisix: ApisixDouble):
    key = tmp_path / "key"
    key.write_text(ADMIN_KEY)

    def run(command: str = "sync", *extra: str):
        once_flag = ["--once"] if command == "sync" else []
        return run_gitsync(command, *once_flag, "--repo", repo_url(git_daemon, remote_repo), "--gateway",
                           apisix.url, "--admin-key-file", str(key), "--state-dir", str(tmp_path / "state"),
                           *extra)

    return run


def live_routes(apisix: ApisixDouble) -> int:
    return len(apisix.config().get("routes") or [])


@pytest.mark.slow
@pytest.mark.parametrize("emptied", ["", "---\n", "# nothing left\n"])
def test_an_emptied_commit_is_refused_and_its_trailer_lets_it_through(once, remote_repo, apisix, emptied):
    remote_repo.commit({"conf/routes.yaml": route_file(20)}, "twenty routes")
    assert once().returncode == 0 and live_routes(apisix) == 20
    puts = len(apisix.put_bodies)

    bad = remote_repo.commit({"conf/routes.yaml": emptied}, "truncated by accident")
    result = once()
    assert result.returncode == 1
    assert "failed at guard" in result.stderr
    assert ('routes: 20 → 0, deletes 20 of 20 (100 %), refused: add "Gitsync-Allow-Delete: routes"'
            in result.stderr)
    assert len(apisix.put_bodies) == puts and live_routes(apisix) == 20  # nothing pushed
    note = git("--git-dir", str(remote_repo.path), "notes", "--ref=gitsync", "show", bad)
    assert "stage: guard" in note and "refused: add" in note

    diff = once("diff")
    assert diff.returncode == 4 and "the deletion guard would hold this commit" in diff.stderr

    remote_repo.commit({"conf/routes.yaml": emptied},
                       "Retire every route\n\nGitsync-Allow-Delete: routes, upstreams")
    assert once().returncode == 0
    assert live_routes(apisix) == 0


@pytest.mark.slow
def test_a_60_percent_deletion_is_refused_and_a_10_percent_one_applied(once, remote_repo, apisix):
    remote_repo.commit({"conf/routes.yaml": route_file(20)}, "twenty routes")
    assert once().returncode == 0
    remote_repo.commit({"conf/routes.yaml": route_file(8)}, "twelve gone")
    refused = once()
    assert refused.returncode == 1 and "routes: 20 → 8, deletes 12 of 20 (60 %)" in refused.stderr
    assert live_routes(apisix) == 20
    diff = once("diff")
    assert diff.returncode == 4 and "guard: routes: 20 → 8, deletes 12 of 20 (60 %)" in diff.stdout
    remote_repo.commit({"conf/routes.yaml": route_file(18)}, "two gone")
    diff = once("diff")
    assert diff.returncode == 1 and "guard: routes: 20 → 18, deletes 2 of 20 (10 %)" in diff.stdout
    assert once().returncode == 0 and live_routes(apisix) == 18


@pytest.mark.slow
def test_dir_needs_allow_delete(tmp_path: Path, apisix: ApisixDouble) -> None:
    key = tmp_path / "key"
    key.write_text(ADMIN_KEY)
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "routes.yaml").write_text(route_file(20))
    args = ["sync", "--once", "--dir", str(conf), "--gateway", apisix.url, "--admin-key-file", str(key)]
    assert run_gitsync(*args).returncode == 0
    (conf / "routes.yaml").write_text("routes: []\n")
    refused = run_gitsync(*args)
    assert refused.returncode == 1 and "refused by the deletion guard" in refused.stdout
    # --dir has no commit message: the refusal points at the flag, not at a trailer
    assert "routes: 20 → 0, deletes 20 of 20 (100 %), refused: pass --allow-delete routes" in refused.stderr
    assert "Gitsync-Allow-Delete" not in refused.stderr
    diff = run_gitsync("diff", *args[2:])
    assert diff.returncode == 4 and "refused: pass --allow-delete routes" in diff.stdout, diff.stdout
    assert live_routes(apisix) == 20
    # the trailer takes kind names in any case; so does the flag
    assert run_gitsync(*args, "--allow-delete", "ROUTES", "--allow-delete", "Upstreams").returncode == 0
    assert live_routes(apisix) == 0


@pytest.mark.slow
@pytest.mark.parametrize("message", [
    "Gitsync-Allow-Delete: routes",  # the subject
    "Retire the routes\n\nGitsync-Allow-Delete: routes was wrong last time",  # prose, not kind names
    "Retire the routes\n\nGitsync-Allow-Delete: none of the routes please",
    "Retire the routes\n\nGitsync-Allow-Delete: routes\n\nSee the ticket.",  # not the last paragraph
])
def test_only_a_trailer_as_git_reads_it_lets_a_deletion_through(once, remote_repo, apisix, message: str,
                                                                 ) -> None:
    remote_repo.commit({"conf/routes.yaml": route_file(20)}, "twenty routes")
    assert once().returncode == 0 and live_routes(apisix) == 20
    remote_repo.commit({"conf/routes.yaml": "routes: []\n"}, message)
    refused = once()
    assert refused.returncode == 1 and "failed at guard" in refused.stderr, refused.stderr
    assert live_routes(apisix) == 20
    remote_repo.commit({"conf/routes.yaml": "routes: []\n"},
                       "Retire the routes\n\nGitsync-Allow-Delete: ROUTES, Upstreams")
    assert once().returncode == 0 and live_routes(apisix) == 0


def test_the_same_ids_on_both_sides_count_as_the_sets_would() -> None:
    """`deletion_verdict` takes a shortcut when the live ids are the desired ones: its counts are
    those of the sets either way (duplicates, None, one list a copy of the other or not)."""
    from gitsync.push.guard import KindChange, deletion_verdict

    def by_sets(wanted: list, live: list) -> KindChange | None:
        live_ids, wanted_ids = set(live) - {None}, set(wanted) - {None}
        if not live_ids:
            return None
        return KindChange("routes", len(live_ids), len(wanted_ids), len(live_ids - wanted_ids), None)

    cases = [(["a", "b"], ["a", "b"]), (["a", "a", "b"], ["a", "a", "b"]), (["a", None], ["a", None]),
             (["a", "b"], ["b", "a"]), (["a"], ["a", "b"]), ([], []), ([None], [None])]
    for wanted, live in cases:
        verdict = deletion_verdict({"routes": wanted}, {"routes": list(live)}, ["routes"], GuardPolicy())
        expected = by_sets(wanted, live)
        assert verdict.kinds == ((expected,) if expected else ()), (wanted, live)


def test_a_kind_that_grows_while_it_loses_items_reads_right() -> None:
    """`routes: 1 → 3 (−100 %)` read as a contradiction: the share is of what is live; the adds are told."""
    verdict = check_deletions({"routes": routes(3, start=10)}, {"routes": routes(1)}, ["routes"],
                              GuardPolicy(max_delete_count=0))
    [change] = verdict.kinds
    assert change.describe().startswith("routes: 1 → 3, deletes 1 of 1 (100 %), adds 3, refused: ")
    kept = check_deletions({"routes": routes(19)}, {"routes": routes(20)}, ["routes"], GuardPolicy())
    assert [c.describe() for c in kept.kinds] == ["routes: 20 → 19, deletes 1 of 20 (5 %)"]
    same = check_deletions({"routes": routes(4)}, {"routes": routes(4)}, ["routes"], GuardPolicy())
    assert [c.describe() for c in same.kinds] == ["routes: 4 → 4"]


def test_each_kind_is_judged_after_one_left_as_it_is_or_empty_on_both_sides() -> None:
    live = {"routes": routes(3), "services": [], "upstreams": [{"id": "u1"}, {"id": "u2"}]}
    desired = {"routes": routes(3), "upstreams": []}
    verdict = check_deletions(desired, live, ["routes", "services", "upstreams"], GuardPolicy())
    assert [(k.kind, k.live, k.after, k.deleted, k.refused) for k in verdict.kinds] == [
        ("routes", 3, 3, 0, None), ("upstreams", 2, 0, 2, "it would leave upstreams empty")]


def test_items_are_told_apart_by_their_kinds_id():
    """A consumer is its username: a payload without them empties the consumers."""
    live = {"consumers": [{"username": "jack"}, {"username": "jill"}]}
    (change,) = check_deletions({"consumers": []}, live, ["consumers"], GuardPolicy()).kinds
    assert (change.live, change.after, change.refused) == (2, 0, "it would leave consumers empty")
    both = {"consumers": [{"username": "jill"}, {"username": "jack"}]}
    (kept,) = check_deletions(both, live, ["consumers"], GuardPolicy()).kinds
    assert (kept.live, kept.after, kept.deleted, kept.refused) == (2, 2, 0, None)


def test_a_refusal_names_the_kinds_own_limit() -> None:
    live = {"routes": routes(812)}
    policy = GuardPolicy(per_kind={"routes": 0.5})
    (change,) = check_deletions({"routes": routes(312)}, live, ["routes"], policy).kinds
    assert change.refused == "it would delete 500 routes, more than 406"


@pytest.mark.parametrize(("change", "line"), [
    (KindChange("routes", 10, 10, 0), "routes: 10 → 10"),
    (KindChange("routes", 10, 8, 2), "routes: 10 → 8, deletes 2 of 10 (20 %)"),
    (KindChange("routes", 0, 3, 0), "routes: 0 → 3"),
    (KindChange("routes", 10, 0, 10, "it would leave routes empty", 'add "Gitsync-Allow-Delete: routes"'),
     'routes: 10 → 0, deletes 10 of 10 (100 %), refused: add "Gitsync-Allow-Delete: routes"'),
])
def test_a_kind_change_describes_itself(change: KindChange, line: str) -> None:
    assert change.describe() == line


def test_the_remedy_is_the_trailer_or_with_no_commit_the_flag() -> None:
    assert GuardPolicy().remedy("routes") == 'add "Gitsync-Allow-Delete: routes"'
    assert GuardPolicy(by_flag=True).remedy("routes") == "pass --allow-delete routes"
    verdict = check_deletions({}, {"ssls": [{"id": "s"}]}, ["ssls"], GuardPolicy(by_flag=True))
    assert verdict.problems == ["ssls: 1 → 0, deletes 1 of 1 (100 %), refused: pass --allow-delete ssls "
                                "(it would leave ssls empty)"]


def test_every_kind_is_judged_after_one_whose_ids_are_the_same_list() -> None:
    from gitsync.push.guard import deletion_verdict

    wanted, live = {"routes": ["a", "b"], "upstreams": []}, {"routes": ["a", "b"], "upstreams": ["u"]}
    verdict = deletion_verdict(wanted, live, ["routes", "upstreams"], GuardPolicy())
    assert [(k.kind, k.deleted, k.refused) for k in verdict.kinds] == [
        ("routes", 0, None), ("upstreams", 1, "it would leave upstreams empty")]
