"""Write-back against real remotes: git daemon with receive-pack, smart HTTP, a local bare repo."""

from __future__ import annotations

import argparse
import dataclasses
import io
import os
import re
import subprocess
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gitsync import log as gslog
from gitsync.agent.gate import fleet_table
from gitsync.agent.statedir import StateDir
from gitsync.cli.commands import status as status_command
from gitsync.names import decode_slug
from gitsync.settings import Settings, load
from gitsync.source.transport import Remote
from gitsync.writeback.fleet import read_fleet
from gitsync.writeback.notes import merge_note, parse_note, render_section
from gitsync.writeback.publisher import WriteBack, WriteBackOptions
from gitsync.writeback.wire import FailureNote, GatewayStatus, StatusReport, agent_slug, summary_text
from testkit.gitservers import BareRepo, GitDaemon, HttpAuth, HttpGitServer, HungServer, git

NOW = datetime.now(UTC)


def gateway(url: str = "http://127.0.0.1:9180", routes: int = 3, **extra) -> GatewayStatus:
    return GatewayStatus(url=url, status="applied", versions={"routes": routes, "upstreams": 7},
                         digest="d" * 64, counts={"routes": 2, "upstreams": 1},
                         pruned={"routes": ["old-route"]}, **extra)


def report(agent: str, commit: str, result: str = "applied", *, when: datetime = NOW,
           duration: float = 0.25, gateways: tuple[GatewayStatus, ...] | None = None,
           subject: str = "add route") -> StatusReport:
    return StatusReport(agent=agent, commit=commit, subject=subject, result=result,
                        gateways=gateways if gateways is not None else (gateway(), gateway("http://10.0.0.2:9180")),
                        time=when, duration=duration, version="0.1.0")


def failure(agent: str, commit: str, errors: list[str] | None = None, *, when: datetime = NOW,
            stage: str = "render") -> FailureNote:
    return FailureNote(agent=agent, commit=commit, time=when, stage=stage,
                       errors=errors if errors is not None else [
                           "routes.yaml:3:5: routes[r1].upstream_id: upstream u9 does not exist"])


class Clock:
    """A clock the test moves: a heartbeat comes due without waiting for it."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def writer(url: str, work: Path, *, timeout: float = 30.0, agent: str = "edge-1", clock: Clock | None = None,
           **options) -> WriteBack:
    return WriteBack(Remote.of(url, timeout=timeout), work, WriteBackOptions(agent=agent, **options),
                     clock=clock or time.time)


def status_commits(repo: BareRepo, agent: str = "edge-1") -> list[str]:
    """The commits of an agent's status ref (newest first): its status, and a heartbeat on it."""
    out = git("rev-list", f"refs/gitsync/status/{agent}", "--", cwd=repo.path, check=False)
    return out.split() if out else []


def status_refs(repo: BareRepo) -> list[str]:
    """The agents with a status ref on the remote."""
    out = repo.git("for-each-ref", "--format=%(refname)", "refs/gitsync/status/")
    return [line.removeprefix("refs/gitsync/status/") for line in out.splitlines()]


def status_text(repo: BareRepo, agent: str = "edge-1") -> str:
    return repo.git("show", f"refs/gitsync/status/{agent}:status.yaml")


def agent_files(repo: BareRepo, branch: str = "gitsync/status") -> list[str]:
    """The files on the status branch (the view)."""
    return repo.git("ls-tree", "--name-only", f"{branch}:agents").split()


def note_of(repo: BareRepo, sha: str) -> str:
    return repo.git("notes", "--ref=gitsync", "show", sha)


@pytest.fixture
def config_repo(remote_repo: BareRepo) -> tuple[BareRepo, str]:
    """A remote with one config commit on main (write-back shares the remote with the config)."""
    sha = remote_repo.commit({"routes.yaml": "routes: []\n"}, "add route")
    return remote_repo, sha


def test_applied_commit_gives_exactly_one_status_commit(config_repo, git_daemon, tmp_path):
    repo, sha = config_repo
    wb = writer(git_daemon.url(repo.path.name), tmp_path / "wb")

    assert wb.publish_status(report("edge-1", sha)) is True
    assert len(status_commits(repo)) == 1
    # The same result, later and slower: not a change in substance, so no commit.
    assert wb.publish_status(report("edge-1", sha, when=NOW + timedelta(minutes=5), duration=9.0)) is False
    assert len(status_commits(repo)) == 1
    assert wb.failures == 0 and wb.pending == 0

    message = repo.git("log", "-1", "--format=%B", "refs/gitsync/status/edge-1")
    assert message.splitlines()[0] == f"gitsync(edge-1): applied {sha[:7]} to 2 gateways"
    assert "add route" in message
    text = status_text(repo)
    assert f"commit: {sha}" in text and f"applied_at: '{NOW:%Y-%m-%dT%H:%M:%SZ}'" in text
    assert "url: http://10.0.0.2:9180" in text and "old-route" in text
    # The branch shows the same file, for people browsing the forge; the main branch is untouched.
    assert repo.git("show", "gitsync/status:agents/edge-1.yaml") == text
    assert repo.tip() == sha

    # A real change (a new commit applied) is a new status commit: no parents (the branch keeps history).
    sha2 = repo.commit({"routes.yaml": "routes: [1]\n"}, "second")
    assert wb.publish_status(report("edge-1", sha2, subject="second")) is True
    assert len(status_commits(repo)) == 1 and f"commit: {sha2}" in status_text(repo)
    assert status_refs(repo) == ["edge-1"]
    assert repo.git("rev-list", "--count", "gitsync/status") == "2"


def test_each_agent_keeps_its_own_file(config_repo, git_daemon, tmp_path):
    repo, sha = config_repo
    url = git_daemon.url(repo.path.name)
    assert writer(url, tmp_path / "a", agent="edge-a").publish_status(report("edge-a", sha))
    assert writer(url, tmp_path / "b", agent="edge-b").publish_status(report("edge-b", sha, result="failed"))
    assert status_refs(repo) == ["edge-a", "edge-b"]
    assert agent_files(repo) == ["edge-a.yaml", "edge-b.yaml"]

    fleet = read_fleet(Remote.of(url), "refs/gitsync/status", tmp_path / "fleet")
    assert [(e.agent, e.status.commit, e.status.result) for e in fleet] == [
        ("edge-a", sha, "applied"), ("edge-b", sha, "failed")]
    assert fleet[0].status.applied_at and fleet[1].status.applied_at is None  # edge-b never applied it
    table = fleet_table(fleet, NOW + timedelta(hours=2), 60).splitlines()
    assert table[0].split() == ["AGENT", "COMMIT", "RESULT", "AGE", "GROUP", "CHECKS", "SEEN", "TRUST"]
    # its status commit, and the ref, written just now (NOW is an hour ago)
    assert table[2].split() == ["edge-b", sha[:7], "failed", "1h", "-", "-", "1h", "(down)", "-"]


def test_failed_commit_gets_a_note_the_git_cli_reads(config_repo, git_daemon, tmp_path):
    repo, sha = config_repo
    url = git_daemon.url(repo.path.name)
    first = writer(url, tmp_path / "z")
    assert first.publish_failure(failure("edge-z", sha)) is True
    assert writer(url, tmp_path / "a").publish_failure(
        failure("edge-a", sha, ["a.yaml:1:1: routes[x].uri: required"], stage="validate")) is True

    text = note_of(repo, sha)
    assert text.index("agent: edge-a") < text.index("agent: edge-z")  # sorted by agent
    assert "stage: validate" in text and "'a.yaml:1:1: routes[x].uri: required'" in text
    assert "routes.yaml:3:5: routes[r1].upstream_id: upstream u9 does not exist" in text

    # The same failure seen again on the next poll writes nothing.
    assert first.publish_failure(failure("edge-z", sha, when=NOW + timedelta(minutes=1))) is False
    # A different failure replaces edge-z's section and keeps edge-a's.
    assert first.publish_failure(failure("edge-z", sha, ["b.yaml:2:3: services[s].x: bad"], stage="push"))
    _, sections = parse_note(note_of(repo, sha))
    assert sorted(sections) == ["edge-a", "edge-z"]
    assert sections["edge-z"].errors == ("b.yaml:2:3: services[s].x: bad",)
    assert sections["edge-z"].stage == "push"
    assert sections["edge-a"].stage == "validate"


def test_a_moved_notes_ref_is_fetched_and_rebuilt(config_repo, git_daemon, tmp_path):
    """Compare-and-swap on the shared notes ref: another agent pushes between our fetch and our push."""
    repo, sha = config_repo
    url = git_daemon.url(repo.path.name)
    other = writer(url, tmp_path / "other", agent="edge-other")

    class RacedWriteBack(WriteBack):
        raced = False

        def _notes_commit(self, work, tip, notes):
            if not self.raced:  # the other agent wins the race, after our fetch
                self.raced = True
                assert other.publish_failure(failure("edge-other", sha))
            return super()._notes_commit(work, tip, notes)

    raced = RacedWriteBack(Remote.of(url), tmp_path / "raced", WriteBackOptions(agent="edge-raced"))
    assert raced.publish_failure(failure("edge-raced", sha)) is True
    assert raced.failures == 0 and raced.conflicts == 1
    assert sorted(parse_note(note_of(repo, sha))[1]) == ["edge-other", "edge-raced"]
    assert len(repo.git("rev-list", "refs/notes/gitsync").split()) == 2  # linear: rebuilt on the other's


@pytest.mark.slow
def test_a_status_ref_moved_by_someone_else_is_read_and_built_on(config_repo, git_daemon, tmp_path):
    """The agent's own ref moved behind its back (its state dir was lost, or a namesake agent): the
    push finds it moved, reads it, and builds the new status on it; nothing is lost."""
    repo, sha = config_repo
    url = git_daemon.url(repo.path.name)
    assert writer(url, tmp_path / "before").publish_status(report("edge-1", sha))
    before = status_text(repo)
    fresh = writer(url, tmp_path / "after")  # a new work dir: it has never seen the ref
    assert fresh.publish_status(report("edge-1", sha)) is False  # read it: the same status, nothing to do
    assert fresh.conflicts == 1 and fresh.failures == 0 and fresh.pending == 0
    assert fresh.publish_status(report("edge-1", sha, result="failed")) is True  # now it knows the tip
    assert fresh.conflicts == 1
    assert "result: failed" in status_text(repo) and before != status_text(repo)

    # Two agents with one name: each finds the ref moved behind its back, and says so.
    log = io.StringIO()
    gslog.setup(stream=log)
    assert writer(url, tmp_path / "before").publish_status(report("edge-1", sha, result="drift_reported"))
    assert "refs/gitsync/status/edge-1 was moved by another writer" in log.getvalue()
    assert "another agent have the name 'edge-1'" in log.getvalue()


@pytest.mark.slow
def test_heartbeat_rewrites_the_tip_with_a_fresh_time_and_costs_nothing_until_due(config_repo, git_daemon,
                                                                                  tmp_path):
    repo, sha = config_repo
    url = git_daemon.url(repo.path.name)
    clock = Clock()
    wb = writer(url, tmp_path / "wb", heartbeat=1.0, clock=clock)
    assert wb.publish_status(report("edge-1", sha))
    first = status_commits(repo)
    # Not due yet: no network at all (a writer on the same work dir whose remote does not exist).
    offline = WriteBack(Remote.of("git://127.0.0.1:9/nowhere.git", timeout=1), tmp_path / "wb",
                        WriteBackOptions(agent="edge-1", heartbeat=60.0))
    assert offline.refresh() is False and offline.failures == 0 and offline.pending == 0

    for _ in range(2):
        clock.advance(1.1)  # the heartbeat period is whole seconds of commit time
        assert wb.refresh() is True
        beat = status_commits(repo)
        # a child of the status commit with its tree; the next heartbeat replaces it: never deeper than 2
        assert len(beat) == 2 and beat[1] == first[0]
        assert repo.git("rev-parse", f"{beat[0]}^{{tree}}") == repo.git("rev-parse", f"{first[0]}^{{tree}}")
    times = [int(repo.git("log", "-1", "--format=%ct", c)) for c in (first[0], beat[0])]
    assert times[1] > times[0]
    fleet = read_fleet(Remote.of(url), "refs/gitsync/status", tmp_path / "fleet")
    assert fleet[0].seen == datetime.fromtimestamp(times[1], UTC)
    assert fleet[0].written == datetime.fromtimestamp(times[0], UTC)

    # A change after heartbeats is a new status commit, without parents.
    sha2 = repo.commit({"routes.yaml": "routes: [2]\n"}, "two")
    assert wb.publish_status(report("edge-1", sha2))
    assert len(status_commits(repo)) == 1 and f"commit: {sha2}" in status_text(repo)


def test_applied_at_is_kept_while_the_commit_stays_and_renewed_with_a_new_one(config_repo, tmp_path):
    repo, sha = config_repo
    wb = writer(str(repo.path), tmp_path / "wb")
    assert wb.publish_status(report("edge-1", sha, when=NOW - timedelta(hours=1)))
    assert wb.publish_status(report("edge-1", sha, "healed"))  # a drift heal: the same commit
    applied = f"applied_at: '{NOW - timedelta(hours=1):%Y-%m-%dT%H:%M:%SZ}'"
    assert "result: healed" in status_text(repo) and applied in status_text(repo)
    sha2 = repo.commit({"routes.yaml": "routes: [2]\n"}, "two")
    assert wb.publish_status(report("edge-1", sha2, "failed"))  # refused: never applied
    assert "applied_at" not in status_text(repo)
    assert wb.publish_status(report("edge-1", sha2))
    assert f"applied_at: '{NOW:%Y-%m-%dT%H:%M:%SZ}'" in status_text(repo)


@pytest.mark.slow
def test_the_branch_is_a_view_of_the_refs_keeping_files_it_has_no_ref_for(config_repo, git_daemon, tmp_path):
    repo, sha = config_repo
    url = git_daemon.url(repo.path.name)
    # An older gitsync wrote its file on the branch directly.
    legacy = git("hash-object", "-w", "--stdin", cwd=repo.path, input=b"agent: legacy\nresult: applied\n")
    tree = git("mktree", cwd=repo.path, input=f"100644 blob {legacy}\tlegacy.yaml\n".encode())
    root = git("mktree", cwd=repo.path, input=f"040000 tree {tree}\tagents\n".encode())
    old = git("commit-tree", root, "-m", "gitsync(legacy): applied", cwd=repo.path)
    repo.git("update-ref", "refs/heads/gitsync/status", old)

    assert writer(url, tmp_path / "a", agent="edge-a").publish_status(report("edge-a", sha))
    assert writer(url, tmp_path / "b", agent="edge-b").publish_status(report("edge-b", sha))
    assert agent_files(repo) == ["edge-a.yaml", "edge-b.yaml", "legacy.yaml"]
    assert repo.git("rev-list", "--count", "gitsync/status") == "3"
    assert repo.git("log", "-1", "--format=%s", "gitsync/status") == f"gitsync(edge-b): applied {sha[:7]} " \
                                                                     "to 2 gateways"
    for agent in ("edge-a", "edge-b"):
        assert repo.git("show", f"gitsync/status:agents/{agent}.yaml") == status_text(repo, agent)
    # A heartbeat changes no file: the branch does not move.
    tip = repo.rev("gitsync/status")
    clock = Clock()
    hb = writer(url, tmp_path / "a", agent="edge-a", heartbeat=1.0, clock=clock)
    clock.advance(1.1)
    assert hb.refresh() is True and repo.rev("gitsync/status") == tip


@pytest.mark.slow
def test_a_remote_forbidding_rewrites_is_named_at_once(config_repo, git_daemon, tmp_path):
    """receive.denyNonFastForwards: git applies it under refs/heads/ only, so the status refs (outside)
    are rewritten freely; put them under refs/heads/ and the rewrite is refused at once, with the fix."""
    repo, sha = config_repo
    repo.git("config", "receive.denyNonFastForwards", "true")
    url = git_daemon.url(repo.path.name)
    for namespace, allowed in (("refs/gitsync/status", True), ("refs/heads/status", False)):
        clock = Clock()
        wb = writer(url, tmp_path / namespace.replace("/", "-"), heartbeat=1.0, status_refs=namespace,
                    clock=clock)
        assert wb.publish_status(report("edge-1", sha)) is True
        clock.advance(1.1)
        assert wb.refresh() is True  # the first heartbeat is a child of the status commit: a fast-forward
        clock.advance(1.1)
        began = time.monotonic()
        assert wb.refresh() is allowed  # the second replaces the first
        if not allowed:
            assert time.monotonic() - began < 5 and wb.failures == 1 and wb.pending == 1
            assert "allow non-fast-forward updates" in (wb.last_error or "")


@pytest.mark.parametrize(("name", "slug"), [
    ("edge-1", "edge-1"), ("gw eu/1", "gw%20eu%2F1"), ("..hidden", "%2E%2Ehidden"), ("a..b", "a.%2Eb"),
    ("x.lock", "x%2Elock"), ("trailing.", "trailing%2E"), ("ünï", "%C3%BCn%C3%AF"), ("100%", "100%25"),
    ("a@{b}", "a%40%7Bb%7D"), ("@", "%40"), ("a.b.c", "a.b.c"),
])
def test_agent_names_become_valid_ref_and_file_names(name, slug):
    assert agent_slug(name) == slug
    assert decode_slug(slug) == name
    assert git("check-ref-format", f"refs/gitsync/status/{slug}", check=False) == ""


def test_names_that_collided_before_get_refs_of_their_own():
    names = ["eu/1", "eu-1", "eu 1", "eu:1", "gw-é", "gw-ü", "eu%2F1", "eu.1", "eu..1", "eu.1.lock"]
    slugs = [agent_slug(n) for n in names]
    assert len(set(slugs)) == len(names), slugs
    assert [decode_slug(s) for s in slugs] == names


@pytest.mark.parametrize(("name", "why"), [
    ("", "cannot be empty"), ("a\nb", "control characters"), ("é" * 40, "at most 200 bytes"),
    ("x\udc80", "UTF-8"),
])
def test_names_that_cannot_be_encoded_are_refused(name, why):
    with pytest.raises(ValueError, match=why):
        agent_slug(name)


@pytest.mark.slow
def test_twenty_agents_at_once_lose_nothing(config_repo, git_daemon, tmp_path):
    """Twenty writers in one process, released together: a status ref each, no contention on them;
    the notes (one shared ref) are compare-and-swapped and all land."""
    repo, sha = config_repo
    url = git_daemon.url(repo.path.name)
    agents = [f"edge-{i:02d}" for i in range(20)]
    writers = {a: writer(url, tmp_path / a, agent=a) for a in agents}
    start = threading.Barrier(len(agents))
    outcomes: dict[str, tuple[bool, bool]] = {}

    def run(agent: str) -> None:
        wb = writers[agent]
        start.wait()
        status = wb.publish_status(report(agent, sha))
        note = wb.publish_failure(failure(agent, sha, [f"{agent}.yaml:1:1: routes[{agent}].uri: bad"]))
        # What a failed publish left pending goes out on the next refresh (the daemon's next poll).
        for _ in range(10):
            if not wb.pending:
                break
            wb.refresh()
        outcomes[agent] = (status, note)

    began = time.monotonic()
    threads = [threading.Thread(target=run, args=(a,)) for a in agents]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    elapsed = time.monotonic() - began

    assert status_refs(repo) == agents
    assert all(f"agent: {a}" in status_text(repo, a) for a in agents)
    assert all(status for status, _ in outcomes.values())  # the status refs: first try, every one
    _, sections = parse_note(note_of(repo, sha))
    assert sorted(sections) == agents
    for agent in agents:
        assert sections[agent].errors == (f"{agent}.yaml:1:1: routes[{agent}].uri: bad",)
    assert all(w.pending == 0 for w in writers.values())
    print(f"20 agents: {elapsed:.2f}s, conflicts={sum(w.conflicts for w in writers.values())}, "
          f"failures={sum(w.failures for w in writers.values())}, view={len(agent_files(repo))}")


def test_retention_prunes_old_notes(config_repo, tmp_path):
    repo, old_sha = config_repo
    mid_sha = repo.commit({"b.yaml": "routes: []\n"}, "mid")
    new_sha = repo.commit({"c.yaml": "routes: []\n"}, "new")
    url = str(repo.path)  # a local path remote
    # Notes written 40 days ago (by agents keeping them a year), and a recent one.
    year = writer(url, tmp_path / "year", notes_retention=365 * 86400)
    assert year.publish_failure(failure("edge-1", old_sha, when=NOW - timedelta(days=40)))
    assert year.publish_failure(failure("edge-1", mid_sha, when=NOW - timedelta(days=40)))
    assert year.publish_failure(failure("edge-2", mid_sha, when=NOW - timedelta(days=2)))
    assert len(repo.git("notes", "--ref=gitsync", "list").splitlines()) == 2

    # An agent keeping 30 days writes a note: the note on old_sha goes, and edge-1's section of mid_sha's.
    month = writer(url, tmp_path / "month", notes_retention=30 * 86400)
    assert month.publish_failure(failure("edge-3", new_sha))
    listed = {line.split()[1] for line in repo.git("notes", "--ref=gitsync", "list").splitlines()}
    assert listed == {mid_sha, new_sha}
    assert sorted(parse_note(note_of(repo, mid_sha))[1]) == ["edge-2"]
    assert "pruned 2 expired note" in repo.git("log", "-1", "--format=%s", "refs/notes/gitsync")


def test_note_section_size_is_bounded(config_repo, tmp_path):
    repo, sha = config_repo
    errors = [f"routes.yaml:{i}:3: routes[r{i}].uri: must start with /" for i in range(5000)]
    wb = writer(str(repo.path), tmp_path / "wb", note_max_bytes=2048)
    assert wb.publish_failure(failure("edge-1", sha, errors))
    text = note_of(repo, sha) + "\n"
    assert len(text.encode()) <= 2048
    section = parse_note(text)[1]["edge-1"]
    shown, summary = section.errors[:-1], section.errors[-1]
    assert shown == tuple(errors[: len(shown)]) and len(shown) > 10
    assert summary == f"… and {5000 - len(shown)} more"
    # One huge error is cut, not dropped, and the bound still holds.
    huge = render_section(failure("edge-1", sha, ["x" * 100_000]), 2048)
    assert len(huge.encode()) <= 2048 and "xxxx" in huge


def test_foreign_note_content_is_kept():
    hand_written = "reviewed by ops: known bad, see INC-42\n"
    merged = merge_note(hand_written, failure("edge-1", "a" * 40), 4096, 3600)
    assert merged is not None and merged.startswith(hand_written)
    foreign, sections = parse_note(merged)
    assert foreign == [hand_written] and list(sections) == ["edge-1"]


def test_canary_secret_never_reaches_the_remote(config_repo, git_daemon, tmp_path):
    repo, sha = config_repo
    canary = "canary-7f3a9c1e5b-secret"
    gslog.register_secret(canary)
    wb = writer(git_daemon.url(repo.path.name), tmp_path / "wb")
    leaky_gateway = gateway(f"http://admin:{canary}@127.0.0.1:9180", error=f"401 with key {canary}")
    assert wb.publish_status(report("edge-1", sha, result="failed", gateways=(leaky_gateway,),
                                    subject=f"rotate {canary}"))
    leaky_error = f"secrets.yaml:1:1: secrets[vault/x].token: {canary} bad"
    assert wb.publish_failure(failure("edge-1", sha, [leaky_error]))

    assert "***" in note_of(repo, sha)
    assert "http://127.0.0.1:9180" in repo.git("show", "gitsync/status:agents/edge-1.yaml")
    objects = subprocess.run(["git", "cat-file", "--batch-all-objects", "--batch"], cwd=repo.path,
                             capture_output=True, check=True).stdout
    assert b"secrets[vault/x].token" in objects  # the scan does see note contents
    assert canary.encode() not in objects


def test_unreachable_remote_never_raises_and_retries_on_next_publish(git_daemon, remotes_root, tmp_path):
    name = f"later-{time.monotonic_ns()}.git"
    wb = writer(git_daemon.url(name), tmp_path / "wb")
    sha = "b" * 40
    assert wb.publish_status(report("edge-1", sha)) is False  # no such repository yet
    assert wb.failures == 1 and wb.enabled and "no such repository" in (wb.last_error or "")
    assert wb.pending == 1

    repo = BareRepo.create(remotes_root / name)
    config = repo.commit({"a.yaml": "routes: []\n"})
    assert wb.publish_failure(failure("edge-1", config)) is True
    # The status that failed before went out with this publish, and into the view.
    assert status_text(repo).count(sha) == 1
    assert repo.git("show", "gitsync/status:agents/edge-1.yaml").count(sha) == 1
    assert wb.failures == 1 and wb.pending == 0


def test_refused_push_turns_auto_writeback_off_once(config_repo, remotes_root, tmp_path):
    repo, sha = config_repo
    log = io.StringIO()
    gslog.setup(stream=log)
    with GitDaemon(remotes_root, receive_pack=False) as read_only:
        wb = writer(read_only.url(repo.path.name), tmp_path / "wb", stop_when_denied=True)
        assert wb.publish_status(report("edge-1", sha)) is False
        assert wb.enabled is False and wb.failures == 1
        assert wb.publish_failure(failure("edge-1", sha)) is False
        assert wb.failures == 1  # not even tried again
    assert log.getvalue().count("write-back turned off") == 1
    assert status_refs(repo) == [] and wb.pending == 0  # turned off: nothing counts as pending


@pytest.mark.slow
def test_http_remote_refusing_credentials_is_a_permission_failure(config_repo, remotes_root, tmp_path):
    repo, sha = config_repo
    with HttpGitServer(remotes_root, HttpAuth(username="git", password="right-password")) as server:
        wb = writer(server.url(repo.path.name), tmp_path / "wb", stop_when_denied=True)
        assert wb.publish_status(report("edge-1", sha)) is False
        assert wb.enabled is False and server.rejected >= 1


def test_smart_http_push(config_repo, http_git, tmp_path):
    repo, sha = config_repo
    wb = writer(http_git.url(repo.path.name), tmp_path / "wb")
    assert wb.publish_status(report("edge-1", sha)) is True
    assert wb.publish_failure(failure("edge-1", sha)) is True
    assert "agent: edge-1" in note_of(repo, sha)
    assert len(status_commits(repo)) == 1 and agent_files(repo) == ["edge-1.yaml"]


def test_status_summary_text():
    assert summary_text({}, NOW) == "no sync yet\n"
    text = summary_text(report("edge-1", "c" * 40, when=NOW - timedelta(minutes=3)).to_dict(), NOW)
    assert "result:   applied" in text and "(3m ago)" in text and "add route" in text
    assert "gateway:  http://10.0.0.2:9180  applied  [routes=3, upstreams=7]" in text


def test_git_cli_notes_and_ours_coexist(config_repo, tmp_path):
    """A note the git CLI wrote on another commit survives our writes, and ours read back in git."""
    repo, sha = config_repo
    other = repo.commit({"x.yaml": "routes: []\n"}, "other")
    git("notes", "--ref=gitsync", "add", "-m", "written by a human", other, cwd=repo.path)
    assert writer(str(repo.path), tmp_path / "wb").publish_failure(failure("edge-1", sha))
    assert note_of(repo, other) == "written by a human"
    assert "agent: edge-1" in note_of(repo, sha)


def test_status_command_prints_this_agents_last_result(tmp_path, capsys):
    settings = load({"state_dir": str(tmp_path / "state")}, env={}, config=os.devnull)
    args = argparse.Namespace(fleet=False)
    assert status_command(settings, args) == 0
    assert capsys.readouterr().out == "no sync yet\n"

    state_dir = StateDir(settings.state_dir)
    state = state_dir.load()
    state.last_result = report("edge-1", "e" * 40).to_dict()
    state_dir.save(state)
    assert status_command(settings, args) == 0
    out = capsys.readouterr().out
    assert "commit:   " + "e" * 40 + "  add route" in out and "result:   applied" in out


def settings_for(tmp_path: Path, **flags) -> Settings:
    return load({"state_dir": str(tmp_path / "state"), **flags}, env={}, config=os.devnull)


@pytest.mark.parametrize(("flags", "enabled"), [
    ({"repo": "/srv/git/config.git"}, True),  # a local path can be pushed to
    ({"repo": "file:///srv/git/config.git"}, True),
    ({"repo": "git://127.0.0.1:9418/config.git"}, True),
    ({"repo": "https://git.example.test/config.git"}, False),  # read-only: no credentials
    ({"repo": "https://bot:s3cret-pass@git.example.test/config.git"}, True),  # credentials in the URL
    ({"repo": "ssh://git@git.example.test/config.git"}, False),  # no key configured
    ({"repo": "https://git.example.test/config.git", "writeback": "on"}, True),
    ({"repo": "/srv/git/config.git", "writeback": "off"}, False),
    ({"dir": "/srv/config"}, False),  # a plain directory has no remote
])
def test_from_settings_auto_mode(tmp_path, flags, enabled):
    wb = WriteBack.from_settings(settings_for(tmp_path, **flags))
    assert (wb is not None) is enabled
    if wb is not None:
        assert wb.work_dir == tmp_path / "state" / "writeback"
        assert wb.options.stop_when_denied is (flags.get("writeback", "auto") == "auto")
        assert "s3cret-pass" not in wb.url


def test_from_settings_with_token_pushes_over_http(config_repo, remotes_root, tmp_path):
    repo, sha = config_repo
    token = "tok-5d1e0c6a9b7f"
    token_file = tmp_path / "token"
    token_file.write_text(token + "\n")
    with HttpGitServer(remotes_root, HttpAuth(token=token)) as server:
        settings = settings_for(tmp_path, repo=server.url(repo.path.name), git_token_file=str(token_file),
                                agent_name="edge-http", status_branch="ops/status", notes_ref="ops-notes",
                                status_refs="refs/ops/status")
        wb = WriteBack.from_settings(settings)
        assert wb is not None
        assert wb.publish_status(report(settings.agent_name, sha)) is True
        assert wb.publish_failure(failure(settings.agent_name, sha)) is True
        assert "agent: edge-http" in repo.git("notes", "--ref=ops-notes", "show", sha)
        assert agent_files(repo, "ops/status") == ["edge-http.yaml"]
        assert "agent: edge-http" in repo.git("show", "refs/ops/status/edge-http:status.yaml")
    # The token went to the transport only: not into the local work repo, not to the remote.
    for path in wb.work_dir.rglob("*"):
        assert not path.is_file() or token.encode() not in path.read_bytes(), path


@pytest.mark.slow
def test_hung_remote_costs_at_most_the_timeout(tmp_path):
    with HungServer() as hung:
        wb = writer(f"git://127.0.0.1:{hung.port}/config.git", tmp_path / "wb", timeout=0.5, attempts=2)
        began = time.monotonic()
        assert wb.publish_status(report("edge-1", "f" * 40)) is False
        assert time.monotonic() - began < 3
    assert wb.failures == 1 and "no answer within 0.5s" in (wb.last_error or "")


def test_status_fleet_command(config_repo, git_daemon, tmp_path, capsys):
    repo, sha = config_repo
    url = git_daemon.url(repo.path.name)
    settings = settings_for(tmp_path, repo=url)
    assert status_command(settings, argparse.Namespace(fleet=True)) == 0
    assert capsys.readouterr().out == "no agent has written a status under refs/gitsync/status yet\n"
    checked = (gateway(checks={"passed": 2, "failed": []}),)
    for agent, group in (("edge-b", "main"), ("edge-a", "canary")):
        wb = writer(url, tmp_path / agent, agent=agent)
        assert wb.publish_status(dataclasses.replace(
            report(agent, sha, when=NOW - timedelta(hours=3), gateways=checked), group=group))
    assert status_command(settings, argparse.Namespace(fleet=True)) == 0
    lines = capsys.readouterr().out.splitlines()
    # The age is its status commit's (just now), not the time its file says (3 h ago).
    assert [line.split()[:3] + line.split()[4:7] for line in lines] == [
        ["AGENT", "COMMIT", "RESULT", "GROUP", "CHECKS", "SEEN"],
        ["edge-a", sha[:7], "applied", "canary", "2", "passed"],
        ["edge-b", sha[:7], "applied", "main", "2", "passed"]]
    assert all(re.fullmatch(r"\d+s", line.split()[3]) for line in lines[1:])
    assert all(re.fullmatch(r"\d+s", line.split()[-2]) for line in lines[1:])  # just written: live
    assert all(line.split()[-1] == "-" for line in lines[1:])  # status_signers not set: nothing checked

    gone = settings_for(tmp_path, repo=git_daemon.url("no-such-repo.git"))
    assert status_command(gone, argparse.Namespace(fleet=True)) == 1
    assert "cannot read refs/gitsync/status" in capsys.readouterr().err


@pytest.mark.slow
def test_ssh_remote_with_key_from_settings(config_repo, ssh_git, tmp_path):
    repo, sha = config_repo
    settings = settings_for(tmp_path, repo=ssh_git.url(repo.path), ssh_key_file=str(ssh_git.client_key),
                            ssh_known_hosts_file=str(ssh_git.known_hosts), agent_name="edge-ssh")
    wb = WriteBack.from_settings(settings)
    assert wb is not None
    assert wb.publish_status(report("edge-ssh", sha)) is True
    assert wb.publish_failure(failure("edge-ssh", sha)) is True
    assert status_refs(repo) == ["edge-ssh"] and agent_files(repo) == ["edge-ssh.yaml"]
    assert "agent: edge-ssh" in note_of(repo, sha)

    # A key the server does not know: ssh says "Permission denied", auto mode turns write-back off.
    refused = WriteBack.from_settings(settings_for(
        tmp_path, repo=ssh_git.url(repo.path), ssh_key_file=str(ssh_git.other_key),
        ssh_known_hosts_file=str(ssh_git.known_hosts)))
    assert refused is not None
    assert refused.publish_status(report("edge-other", sha)) is False
    assert refused.enabled is False and "Permission denied" in (refused.last_error or "")


# ---------------------------------------------------------------------------------------------------------
# Status refs sharded by group, and status_remote (issue 45)


def test_an_agent_with_a_group_writes_in_its_group_and_one_without_as_before(config_repo, git_daemon,
                                                                             tmp_path):
    repo, sha = config_repo
    url = git_daemon.url(repo.path.name)
    assert writer(url, tmp_path / "a", agent="edge-1").publish_status(report("edge-1", sha))
    assert writer(url, tmp_path / "b", agent="eu-1", group="eu.west").publish_status(
        dataclasses.replace(report("eu-1", sha), group="eu.west"))
    assert status_refs(repo) == ["edge-1", "eu.west/eu-1"]
    assert "group: eu.west" in status_text(repo, "eu.west/eu-1")
    assert sorted(agent_files(repo)) == ["edge-1.yaml", "eu-1.yaml"]  # the view: one file an agent


def test_an_agent_that_moves_to_a_group_deletes_the_ref_it_wrote_before(config_repo, git_daemon, tmp_path):
    """Upgraded (or given a group), an agent writes in its group, then deletes the ref its work repo says
    it wrote before; it leaves a ref of its old name that another writer moved since."""
    repo, sha = config_repo
    url = git_daemon.url(repo.path.name)
    work = tmp_path / "w"
    assert writer(url, work, agent="c1").publish_status(report("c1", sha))
    assert status_refs(repo) == ["c1"]
    moved = writer(url, work, agent="c1", group="canary")
    assert moved.publish_status(dataclasses.replace(report("c1", sha), group="canary"))
    assert status_refs(repo) == ["canary/c1"]
    again = writer(url, work, agent="c1", group="main")  # and on to another group
    old_tip = repo.git("rev-parse", "refs/gitsync/status/canary/c1")
    repo.git("update-ref", "refs/gitsync/status/canary/c1", repo.git("commit-tree", f"{old_tip}^{{tree}}",
                                                                     "-m", "someone else's"))
    assert again.publish_status(dataclasses.replace(report("c1", sha), group="main"))
    assert status_refs(repo) == ["canary/c1", "main/c1"]  # moved by another writer: not ours to delete
    assert again.failures == 0


def test_status_remote_of_each_group_holds_its_statuses_and_the_notes_stay_on_the_config_repo(
        config_repo, git_daemon, remotes_root, tmp_path):
    repo, sha = config_repo
    for group in ("canary", "main"):
        BareRepo.create(remotes_root / f"status-{group}.git")
    template = git_daemon.url("status-{group}.git")
    for agent, group in (("c1", "canary"), ("m1", "main")):
        settings = load({"repo": git_daemon.url(repo.path.name), "agent_name": agent, "group": group,
                         "status_remote": template, "writeback": "on",
                         "state_dir": str(tmp_path / agent)}, env={}, config=os.devnull)
        wb = WriteBack.from_settings(settings)
        assert wb is not None and wb.remote.url == git_daemon.url(f"status-{group}.git")
        assert wb.publish_status(dataclasses.replace(report(agent, sha), group=group))
        assert wb.publish_failure(failure(agent, sha))
    for group, agent in (("canary", "c1"), ("main", "m1")):
        held = git("for-each-ref", "--format=%(refname)", cwd=remotes_root / f"status-{group}.git").split()
        assert held == ["refs/gitsync/status/" + f"{group}/{agent}", "refs/heads/gitsync/status"]
    assert status_refs(repo) == []  # nothing of the statuses on the config repo
    assert "stage: render" in note_of(repo, sha) and "agent: m1" in note_of(repo, sha)
