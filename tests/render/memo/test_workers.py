"""A cold render's parse and per-file checks on forked workers (`gitsync.render.memo.workers`): the same
result as one CPU's, whatever a worker does (dies, hangs), in a threaded process too; workers
write the parse store themselves, plain files only.
"""

from __future__ import annotations

import os
import random
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from gitsync.problems import ProblemsError
from gitsync.render import RenderOptions, render
from gitsync.render.load import blob_sha
from gitsync.render.memo import ParseCache
from gitsync.render.memo import workers as parallel
from gitsync.render.memo.store import SUFFIX, ParseStore

ROOT = Path(__file__).resolve().parents[3]


def route_file(index: int) -> str:
    """Ten routes with plugins (a repeated body and one of their own each), one file's worth."""
    return "routes:\n" + "".join(
        f"  - id: r{index:03d}-{n}\n    uri: /r/{index}/{n}\n    upstream_id: u1\n"
        f"    plugins:\n      limit-count: {{count: 100, time_window: 60}}\n"
        f"      proxy-rewrite: {{uri: /to/{index}/{n}}}\n" for n in range(10))


UPSTREAM = 'upstreams:\n  - id: u1\n    type: roundrobin\n    nodes: {"127.0.0.1:1980": 1}\n'
TEMPLATED = 'routes:\n  - id: t1\n    uri: /t\n    upstream_id: u1\n    desc: "${{ vars.OWNER }}"\n'
REPO = {"upstreams.yaml": UPSTREAM, "templated.yaml": TEMPLATED} | {
    f"routes/r{i:03d}.yaml": route_file(i) for i in range(60)}
OPTIONS = RenderOptions(vars={"OWNER": "team-a"})


def encoded(files: dict[str, str]) -> dict[str, bytes]:
    return {name: text.encode() for name, text in files.items()}


@pytest.fixture
def workers(monkeypatch) -> list[int]:
    """Workers for any render size, two of them whatever the machine; the pids forked, and a count of
    the files this process prepared itself (`prepared[0]`)."""
    monkeypatch.setattr(parallel, "MIN_BYTES", 0)
    monkeypatch.setattr(parallel, "cpus", lambda: 3)
    pids: list[int] = []
    real_fork = os.fork

    def fork() -> int:
        pid = real_fork()
        if pid:
            pids.append(pid)
        return pid

    monkeypatch.setattr(os, "fork", fork)
    return pids


@pytest.fixture
def prepared(monkeypatch) -> list[int]:
    count = [0]
    real = parallel.prepare

    def counting(data: bytes):  # a worker counts in its own memory: only this process's shows here
        count[0] += 1
        return real(data)

    monkeypatch.setattr(parallel, "prepare", counting)
    return count


@pytest.fixture
def parent_idle(monkeypatch) -> None:
    """This process claims no chunk: the workers parse every file (what they hand back is tested)."""
    parent = os.getpid()
    real = parallel._claimed
    monkeypatch.setattr(parallel, "_claimed", lambda claims: iter(()) if os.getpid() == parent
                        else real(claims))


def in_child(body):
    """A stand-in for `_work`: `body`, then `os._exit` whatever happens (never back into pytest)."""
    def work(*args: object) -> None:
        code = 3
        try:
            code = body(*args)
        finally:
            os._exit(code or 0)
    return work


def alone(files: dict[str, bytes], options: RenderOptions = OPTIONS):
    """The render on one CPU (no worker), as the reference."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(parallel, "cpus", lambda: 1)
        return render(files, options, memo=ParseCache())


def assert_same(one, other) -> None:
    assert one.payload == other.payload and one.contents == other.contents
    assert one.splits == other.splits and one.ids == other.ids
    for kind, items in one.payload.items():  # every item at the same file:line
        assert [other.source_map.location(kind, i) for i in range(len(items))] == \
            [one.source_map.location(kind, i) for i in range(len(items))]


def assert_gone(pids: list[int]) -> None:
    for pid in pids:
        with pytest.raises((ChildProcessError, ProcessLookupError)):
            os.waitpid(pid, os.WNOHANG)  # reaped already: not a child of this process any more


def test_a_render_on_workers_equals_one_on_one_cpu(workers, prepared, parent_idle) -> None:
    files = encoded(REPO)
    cache = ParseCache()
    rendered = render(files, OPTIONS, memo=cache)
    assert len(workers) == 2
    assert prepared[0] == 0  # the workers prepared every file (the templated one, never handed back,
    # was parsed by the render itself)
    assert cache.parses == len(files)  # each file parsed once, wherever
    assert_same(alone(files), rendered)
    assert_gone(workers)


@pytest.mark.slow
def test_this_process_and_the_workers_share_the_chunks(workers, prepared) -> None:
    files = encoded(REPO)
    cache = ParseCache()
    assert_same(alone(files), render(files, OPTIONS, memo=cache))
    assert cache.parses == len(files) and prepared[0] <= len(files)
    assert_gone(workers)


def test_problems_are_the_same_whoever_found_them(workers, parent_idle) -> None:
    files = encoded(REPO | {"routes/r007.yaml": route_file(7).replace("uri: /r/7/3", "uri: 42"),
                            "routes/r008.yaml": "routes:\n  - id: [\n",
                            "routes/r009.yaml": route_file(9).replace("count: 100", "count: -1")})
    with pytest.raises(ProblemsError) as on_workers:
        render(files, OPTIONS, memo=ParseCache())
    with pytest.raises(ProblemsError) as on_one:
        alone(files)
    assert [str(p) for p in on_workers.value.problems] == [str(p) for p in on_one.value.problems]
    texts = [str(p) for p in on_workers.value.problems]
    assert any("routes/r007.yaml:" in t and "uri" in t for t in texts)
    assert any("routes/r008.yaml:" in t for t in texts)
    assert any("routes/r009.yaml:" in t and "limit-count" in t for t in texts)


@pytest.mark.slow
def test_a_worker_that_dies_costs_nothing_but_its_share(workers, prepared, monkeypatch) -> None:
    def die(chunks, claims, *rest) -> int:
        for _ in parallel._claimed(claims):
            return 3  # takes a chunk, then dies before handing anything back
        return 3

    monkeypatch.setattr(parallel, "_work", in_child(die))
    files = encoded(REPO)
    cache = ParseCache()
    rendered = render(files, OPTIONS, memo=cache)
    assert prepared[0] < len(files)  # what the dead workers took was not prepared here…
    assert cache.parses == len(files)  # …but parsed by the render, one by one
    assert_same(alone(files), rendered)
    assert_gone(workers)


@pytest.mark.slow
def test_a_worker_that_hangs_is_killed_and_its_files_parsed_by_the_render(workers, monkeypatch) -> None:
    def hang(chunks, claims, *rest) -> int:
        for _ in parallel._claimed(claims):
            time.sleep(120)  # takes a chunk and never ends it
        return 0

    monkeypatch.setattr(parallel, "_work", in_child(hang))
    monkeypatch.setattr(parallel, "_patience", lambda *args: 0.2)
    files = encoded(REPO)
    started = time.monotonic()
    rendered = render(files, OPTIONS, memo=ParseCache())
    assert time.monotonic() - started < 60  # not the worker's 120 s
    assert_same(alone(files), rendered)
    assert_gone(workers)


@pytest.mark.slow
def test_a_damaged_hand_back_is_ignored(workers, parent_idle, monkeypatch) -> None:
    def scribble(chunks, claims, out, *rest) -> int:
        for _ in parallel._claimed(claims):
            pass  # claims every chunk it can, hands back garbage
        out.write(b"\x00not marshal")
        out.flush()
        return 0

    monkeypatch.setattr(parallel, "_work", in_child(scribble))
    files = encoded(REPO)
    cache = ParseCache()
    assert_same(alone(files), render(files, OPTIONS, memo=cache))
    assert cache.parses == len(files)


def test_workers_write_the_parse_store_plain_files_only(tmp_path, workers, parent_idle, monkeypatch) -> None:
    saved: list[str] = []
    real_save = ParseStore.save
    monkeypatch.setattr(ParseStore, "save", lambda self, key, parsed: (saved.append(key),
                                                                       real_save(self, key, parsed)))
    files = encoded(REPO)
    rendered = render(files, OPTIONS, memo=ParseCache(store=ParseStore(tmp_path)))
    entries = {p.name[:-len(SUFFIX)]: p for p in tmp_path.rglob(f"*{SUFFIX}")}
    plain = {blob_sha(data) for name, data in files.items() if name != "templated.yaml"}
    assert set(entries) == plain  # no entry for the file with an expression
    assert {stat.S_IMODE(p.stat().st_mode) for p in entries.values()} == {0o600}
    assert not set(saved) & plain  # the workers wrote every plain file: the render wrote none again
    again = ParseCache(store=ParseStore(tmp_path))
    assert_same(rendered, render(files, OPTIONS, memo=again))
    assert again.parses == 1  # the templated file, never stored


def test_a_render_in_a_threaded_process_uses_workers_too(workers, prepared, parent_idle) -> None:
    stop = threading.Event()
    busy = threading.Thread(target=stop.wait, name="another-thread")
    busy.start()
    try:
        files = encoded(REPO)
        rendered = render(files, OPTIONS, memo=ParseCache())
    finally:
        stop.set()
        busy.join()
    assert prepared[0] == 0 and len(workers) == 2
    assert_same(alone(files), rendered)


def test_a_small_render_forks_nothing(monkeypatch) -> None:
    def fork() -> int:
        raise AssertionError("forked for a small render")

    monkeypatch.setattr(os, "fork", fork)
    monkeypatch.setattr(parallel, "cpus", lambda: 4)
    files = encoded({"upstreams.yaml": UPSTREAM, "routes/r001.yaml": route_file(1)})
    assert render(files, OPTIONS, memo=ParseCache()).payload["routes"]


@pytest.mark.slow
@pytest.mark.parametrize("failure", ["fork", "hand-back file", "pipe"])
def test_no_worker_to_be_had_leaves_the_render_to_this_process(failure, workers, prepared,
                                                               monkeypatch) -> None:
    def refuse(*args: object) -> int:
        raise BlockingIOError(11, "Resource temporarily unavailable")

    target = {"fork": (os, "fork"), "hand-back file": (parallel, "_hand_back_file"),
              "pipe": (os, "pipe")}[failure]
    monkeypatch.setattr(*target, refuse)
    files = encoded(REPO)
    cache = ParseCache()
    assert_same(alone(files), render(files, OPTIONS, memo=cache))
    assert cache.parses == len(files) and workers == []


@pytest.mark.slow
def test_workers_reaped_by_the_system_are_not_waited_for(workers, parent_idle) -> None:
    previous = signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children reaped as they end
    try:
        files = encoded(REPO)
        cache = ParseCache()
        rendered = render(files, OPTIONS, memo=cache)
    finally:
        signal.signal(signal.SIGCHLD, previous)
    assert_same(alone(files), rendered)  # what they did is unknown: parsed here again
    assert cache.parses == len(files)


@pytest.mark.slow
def test_a_worker_with_a_big_file_is_given_the_time_it_needs() -> None:
    # this process parsed 1 MB in a second; a worker may still be on the largest chunk, 3 MB
    assert parallel._patience(1.0, 1_000_000, 3_000_000, 6_000_000) >= 12
    assert parallel._patience(0.1, 1_000_000, 100_000, 2_000_000) == 1.0  # never less than a second
    assert parallel._patience(0.0, 0, 100_000, 2_000_000) >= 2_000_000 / 50_000  # parsed nothing here
    chunks = parallel._chunks([("a", b"x" * 10), ("big", b"y" * 1000), ("b", b"z" * 10)], 3)
    assert [key for key, _ in chunks[0]] == ["big"]  # the largest chunk is claimed first
    rng = random.Random(17)
    for _ in range(300):  # however the sizes fall, every file once, and few enough claims for a pipe
        files = [(str(n), b"x" * rng.choice([1, 100, 10_000, rng.randint(1, 50_000)]))
                 for n in range(rng.randint(1, 2000))]
        count = rng.randint(1, 64)
        chunks = parallel._chunks(files, count)
        assert len(chunks) <= 2 * count + 1
        assert sorted(key for chunk in chunks for key, _ in chunk) == sorted(key for key, _ in files)


def test_a_forked_child_gets_a_lua_lock_of_its_own() -> None:
    from gitsync.schema import lua

    with lua._lock:  # held by "another thread" of the parent when it forks
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            code = 1
            try:
                code = 0 if lua.compile_problem("return 1") is None else 2
            finally:
                os._exit(code)
        deadline = time.monotonic() + 60
        while (done := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
    if done[0] == 0:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    assert done[0] == pid and os.waitstatus_to_exitcode(done[1]) == 0


@pytest.mark.slow
def test_what_a_worker_runs_imports_nothing_more() -> None:
    """A worker forked from a threaded process should take no lock another thread may hold: an import
    takes one. What `prepare` runs is imported with the module (every kind, every check), but for
    the two libraries a check loads on first use (cryptography for certificates, lupa for Lua
    sources): a worker stuck on one of those is killed after `_patience` like any late worker."""
    script = (
        "import sys, contextlib\n"
        "from pathlib import Path\n"
        "from gitsync.render.memo import workers as parallel\n"
        "import cryptography.x509, cryptography.hazmat.primitives.serialization\n"
        "with contextlib.suppress(ImportError):\n"
        "    import lupa.luajit21\n"
        "from gitsync.source.directory import read_directory\n"
        f"files = read_directory(Path({str(ROOT / 'sample-repo')!r}))\n"
        "extra = [b'routes:\\n  - id: x\\n    uri: /x\\n    vars: [[\"arg_a\", \"==\", \"1\"]]\\n'\n"
        "         b'    filter_func: \"function(vars) return true end\"\\n    script: \"return {}\"\\n'\n"
        "         b'    upstream: {type: chash, hash_on: header, key: h, nodes: {\"a:1\": 1}}\\n']\n"
        "before = set(sys.modules)\n"
        "for data in [*files.values(), *extra]:\n"
        "    parallel.prepare(data)\n"
        "print(sorted(set(sys.modules) - before))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
