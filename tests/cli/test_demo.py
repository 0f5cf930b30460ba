"""`gitsync demo` as a user runs it: a real subprocess, every narrated step checked against evidence.

The demo's own JSON summary (`--json`) is one witness; the others are independent of it: with `--keep-running`
and `--workdir`, the test asks the still-running gateway double (data plane and Admin API) and the
agent's /metrics, reads the temp remote with the git CLI (the note on the broken commit, the status
branch), pushes a revert to it with `git push` and sees the agent apply it, then stops the demo
with SIGINT.
"""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from ruamel.yaml import YAML

from testkit.gitservers import git
from testkit.processes import ROOT, gitsync_env, run_gitsync, wait_for
from testkit.venvs import build_wheel, clean_env, venv_seeing_this_environment

STEPS = ("[0] set-up", "[1] first sync:", "[2] commit", "[3] another writer registers the secrets manager",
         "[4] commit", "[5] commit", "[6] the gateway restarts",
         "[7] status branch gitsync/status: agents/demo.yaml")
CHECK_FAILED = ("base/checks/orders.yaml:2:5: check orders-answer failed after 3 attempt(s): status 404, "
                "expected 200")
BROKEN_AT = "base/routes/api.yaml:7:5: routes[api-orders].upstream_id: upstream_id 'order' names no item"
DEMO_TOKEN = "demo-vault-token"
OTHER_WRITER_VERSION = 1735696800000  # the demo's other writer: a millisecond timestamp, fixed


def _summary(stdout: str) -> dict:
    lines = [line for line in stdout.splitlines() if line.startswith("DEMO-SUMMARY ")]
    assert len(lines) == 1, stdout
    return json.loads(lines[0][len("DEMO-SUMMARY "):])


def _check_narration(stdout: str) -> None:
    """Each step narrated, in order, with what it claims."""
    positions = [stdout.find(step) for step in STEPS]
    assert all(p >= 0 for p in positions) and positions == sorted(positions), stdout
    assert "through the data plane → 200, route api-orders" in stdout
    assert "before: GET /api/v2/orders/42 → 404" in stdout
    assert re.search(r"applied \d+\.\d\ds after the webhook \(sync reason: webhook\): "
                     r"GET /api/v2/orders/42 → 200, route api-orders", stdout)
    # Step 3: the out-of-band write, the refusal a cached-version pusher gets, the commit applied over it.
    assert (f"secrets_conf_version 1 → {OTHER_WRITER_VERSION} (a millisecond timestamp, as ADC writes them) "
            "→ 202") in stdout
    assert ("refused now, and on every retry: 400 secrets_conf_version must be greater than or equal to "
            f"({OTHER_WRITER_VERSION})") in stdout
    assert re.search(r"applied in \d+\.\d\ds \(sync reason: webhook\): GET /api/customers/7 → 200, "
                     r"route api-users", stdout)
    moved = f"routes 2 → 3, secrets 1 → {OTHER_WRITER_VERSION} → {OTHER_WRITER_VERSION + 1}"
    assert re.search(rf"versions +{moved}; every other kind kept", stdout)
    assert "pruned       secrets vault/ops:" in stdout
    # Step 4: a valid commit breaks the orders route; its check fails and the gateway is rolled back.
    assert re.search(r"pushed, then checked: failed at health; the gateway was rolled back to [0-9a-f]{7} "
                     r"\d+\.\d\ds after the webhook", stdout)
    assert CHECK_FAILED in stdout
    assert "GET /api/orders (Host: api.example.com) → 200, route api-orders; " in stdout
    assert re.search(r'"routes: orders back on api.example.com" lands on main; webhook → 202\n +applied',
                     stdout)
    assert "refused at validate" in stdout and BROKEN_AT in stdout
    assert "comes back empty: GET /api/v2/orders/42 → 404" in stdout
    assert re.search(r"the drift watch refilled it in \d+\.\d\ds \(sync reason: drift\)", stdout)
    assert re.search(r"\| demo +[0-9a-f]{7} +healed", stdout), "the fleet table"


def _check_summary(stdout: str) -> dict:
    """The ``--json`` summary agrees with the narration; return it."""
    summary = _summary(stdout)
    commits = summary["commits"]
    assert set(commits) == {"first", "change", "customers", "health", "fixed", "broken"}
    # Fixed authors and times: the same SHAs on every run.
    assert commits["first"].startswith("040469b"), "the sample repo or the demo commit changed"
    assert summary["first_answer"] == [200, "api-orders"]
    assert summary["before_change_answer"] == 404
    assert summary["webhook_sync_reason"] == "webhook"
    assert summary["webhook_apply_seconds"] < 1.0
    writer = summary["other_writer"]
    before, after = writer["before"], writer["after"]
    assert (before["secrets"], writer["written"], after["secrets"]) == (1, OTHER_WRITER_VERSION,
                                                                         OTHER_WRITER_VERSION + 1)
    assert after["routes"] == before["routes"] + 1
    assert {k: v for k, v in after.items() if k not in ("routes", "secrets")} == \
        {k: v for k, v in before.items() if k not in ("routes", "secrets")}
    assert writer["stale_put"] == [400, "secrets_conf_version must be greater than or equal to "
                                        f"({OTHER_WRITER_VERSION})"]
    assert writer["sync_reason"] == "webhook" and writer["pruned"] == {"secrets": ["vault/ops"]}
    assert summary["health_stage"] == "health" and summary["health_answer"] == [200, "api-orders"]
    assert [p for p in summary["health_problems"] if CHECK_FAILED in p], summary["health_problems"]
    assert summary["health_rollback_seconds"] < 2 * (1 + 0.3) + 1  # retries × (timeout + interval) + 1 s
    health_note = list(YAML(typ="safe").load_all(summary["health_note"]))
    assert [(s["agent"], s["stage"]) for s in health_note] == [("demo", "health")]
    assert summary["refused_stage"] == "validate"
    assert [p for p in summary["refused_problems"] if p.startswith(BROKEN_AT)]
    _check_note(summary["note"])
    assert summary["emptied_answer"] == 404
    assert summary["drift_sync_reason"] == "drift"
    status = YAML(typ="safe").load(summary["status_file"])
    assert (status["agent"], status["commit"], status["result"]) == ("demo", commits["fixed"], "healed")
    gateway = summary["gateway"]
    assert gateway["routes"] == ["api-orders", "api-users", "legacy", "www"]
    # Refilled after the restart: every managed kind at version 1 again, plugins untouched at 0.
    assert gateway["versions"]["routes_conf_version"] == 1
    assert gateway["versions"]["plugins_conf_version"] == 0
    return summary


def _check_note(text: str) -> None:
    """The note on the broken commit: one YAML section by this agent, naming file:line:col."""
    sections = list(YAML(typ="safe").load_all(text))
    assert [(s["agent"], s["stage"]) for s in sections] == [("demo", "validate")]
    assert [e for e in sections[0]["errors"] if e.startswith(BROKEN_AT)], sections


@pytest.mark.slow
def test_demo_runs_every_step_and_cleans_up():
    started = time.monotonic()
    result = run_gitsync("demo", "--json", timeout=60)
    took = time.monotonic() - started
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    _check_narration(result.stdout)
    summary = _check_summary(result.stdout)
    assert took < 15 and summary["seconds"] < 15
    workdir = re.search(r"^working in (\S+) \(removed at the end\)$", result.stdout, re.M)
    assert workdir and not Path(workdir.group(1)).exists()
    # Logs at WARNING: the refusal and the drift, nothing at INFO; no secret value anywhere.
    assert "ERROR   gitsync.agent.sync commit" in result.stderr and " INFO " not in result.stderr
    assert DEMO_TOKEN not in result.stdout + result.stderr
    assert "Traceback" not in result.stderr


class _Lines:
    """A child's stdout read line by line in a thread, so the test can wait with a timeout."""

    def __init__(self, stream) -> None:
        self.seen: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, args=(stream,), daemon=True).start()

    def _pump(self, stream) -> None:
        for line in stream:
            self._queue.put(line)
        self._queue.put(None)

    def until(self, prefix: str, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no line starting {prefix!r} in time:\n" + "".join(self.seen)) from None
            if line is None:
                raise AssertionError(f"stdout closed before {prefix!r}:\n" + "".join(self.seen))
            self.seen.append(line)
            if line.startswith(prefix):
                return line

    def rest(self, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while (line := self._queue.get(timeout=max(0.0, deadline - time.monotonic()))) is not None:
            self.seen.append(line)
        return "".join(self.seen)




@pytest.fixture
def kept_demo(tmp_path):
    """`gitsync demo --workdir DIR --keep-running`, stopped by SIGINT (by pid) after the test."""
    workdir = tmp_path / "demo"
    stderr = (tmp_path / "stderr").open("w+")
    proc = subprocess.Popen([sys.executable, "-m", "gitsync", "demo", "--workdir", str(workdir),
                             "--keep-running", "--json"], env=gitsync_env(), stdout=subprocess.PIPE,
                            stderr=stderr, text=True)
    lines = _Lines(proc.stdout)
    try:
        yield proc, lines, workdir, stderr
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        stderr.close()


@pytest.mark.slow
def test_demo_keep_running_leaves_real_evidence(kept_demo):
    proc, lines, workdir, stderr = kept_demo
    ready = lines.until("READY ", timeout=30)
    urls = dict(part.split("=", 1) for part in ready.split()[1:])
    _check_narration("".join(lines.seen))
    commits = _check_summary("".join(lines.seen))["commits"]
    admin_key = (workdir / "admin-key").read_text().strip()
    remote = workdir / "remote.git"

    with httpx.Client(trust_env=False, timeout=5) as http:
        # The gateway double, still up: the data plane serves the changed route, the Admin API holds it.
        answer = http.get(urls["data_plane"] + "/api/v2/orders/42", headers={"Host": "api.example.com"})
        assert answer.status_code == 200 and answer.headers["X-Route-Id"] == "api-orders"
        live = http.get(urls["admin"] + "/apisix/admin/configs", headers={"X-API-KEY": admin_key}).json()
        orders = next(r for r in live["routes"] if r["id"] == "api-orders")
        assert "/api/v2/orders/*" in orders["uris"] and orders["upstream_id"] == "orders"
        # Step 3's commit is served, and the other writer's secrets manager is gone.
        answer = http.get(urls["data_plane"] + "/api/customers/7", headers={"Host": "api.example.com"})
        assert answer.status_code == 200 and answer.headers["X-Route-Id"] == "api-users"
        assert [s["id"] for s in live["secrets"]] == ["vault/main"]
        # The agent's metrics: five accepted webhooks, two refusals (health, validate), one drift healed.
        metrics = http.get(urls["agent"] + "/metrics").text
        assert 'gitsync_webhook_requests_total{provider="github",result="accepted"} 5.0' in metrics
        assert 'gitsync_syncs_total{result="failed"} 2.0' in metrics
        assert 'gitsync_check_failures_total{check="orders-answer"} 1.0' in metrics
        assert re.search(r'gitsync_drift_heals_total\{gateway="[^"]+"\} 1\.0', metrics)
        # The web view, whose address the demo prints: the live commit, and items without the Vault token.
        assert f"open {urls['agent']}/" in "".join(lines.seen)
        overview = http.get(urls["agent"] + "/", headers={"Accept": "text/html"})
        assert overview.status_code == 200 and commits["change"][:7] in overview.text
        items = http.get(urls["agent"] + "/items?q=vault", headers={"Accept": "text/html"}).text
        vault = http.get(urls["agent"] + "/items/secrets/vault%2Fmain", headers={"Accept": "text/html"}).text
        assert 'href="/items/secrets/vault%2Fmain"' in items and "base/secrets/vault.yaml:4" in vault
        assert "&#34;token&#34;: &#34;***&#34;" in vault
        assert DEMO_TOKEN not in overview.text + items + vault

        # The temp remote, read with the git CLI: six commits, the notes, the status branch.
        subjects = git("-C", str(remote), "log", "--format=%s", "main").splitlines()
        assert subjects == ["routes: move api-orders to the new upstream",
                            "routes: orders back on api.example.com", "routes: orders on the new host name",
                            "routes: serve /api/customers as users too", "routes: serve /api/v2/orders too",
                            "sample: the embedded sample config repo, with a health check"]
        note = git("-C", str(remote), "notes", "--ref=gitsync", "show", commits["broken"])
        _check_note(note)
        health = git("-C", str(remote), "notes", "--ref=gitsync", "show", commits["health"])
        assert "stage: health" in health and "base/checks/orders.yaml:2:5: check orders-answer" in health
        status = YAML(typ="safe").load(git("-C", str(remote), "show", "gitsync/status:agents/demo.yaml"))
        assert (status["commit"], status["result"]) == (commits["fixed"], "healed")

        # Recovering from the bad commit as a user would: clone, revert, push; the agent polls it in.
        clone = workdir.parent / "clone"
        git("clone", "-q", ready_remote(lines), str(clone))
        git("-C", str(clone), "revert", "--no-edit", "HEAD")
        git("-C", str(clone), "push", "-q", "origin", "main")
        reverted = git("-C", str(clone), "rev-parse", "HEAD")
        status_file = "gitsync/status:agents/demo.yaml"
        wait_for(lambda: f"commit: {reverted}" in git("-C", str(remote), "show", status_file), 15,
                 "the revert in the status branch")
        live = http.get(urls["admin"] + "/apisix/admin/configs", headers={"X-API-KEY": admin_key}).json()
        assert next(r for r in live["routes"] if r["id"] == "api-orders")["upstream_id"] == "orders"

    os.kill(proc.pid, signal.SIGINT)
    assert proc.wait(timeout=15) == 0
    out = lines.rest(timeout=5)
    assert "stopping: the agent, the gateway double, the git server" in out
    with pytest.raises(httpx.ConnectError):
        httpx.get(urls["data_plane"] + "/", timeout=2, trust_env=False)
    with pytest.raises(httpx.ConnectError):
        httpx.get(urls["agent"] + "/healthz", timeout=2, trust_env=False)
    assert remote.is_dir(), "--workdir keeps the remote"
    stderr.seek(0)
    logs = stderr.read()
    assert admin_key not in out + logs and DEMO_TOKEN not in out + logs
    assert "Traceback" not in logs


def ready_remote(lines: _Lines) -> str:
    """The demo's git:// URL, from its set-up narration."""
    match = re.search(r"config repo +(git://\S+)", "".join(lines.seen))
    assert match
    return match.group(1)


@pytest.mark.slow
def test_workdir_must_be_empty(tmp_path):
    (tmp_path / "something").write_text("x")
    result = run_gitsync("demo", "--workdir", str(tmp_path), timeout=60)
    assert result.returncode == 1
    assert f"--workdir {tmp_path} is not empty" in result.stderr


@pytest.mark.slow
def test_the_wheel_carries_the_sample_repo_and_its_demo_runs(tmp_path):
    """`pip install .` then `gitsync demo`, outside the source tree: the sample repo comes from the wheel."""
    clean = clean_env()
    wheel = build_wheel(tmp_path / "dist")
    # The runtime dependencies (and pip) are this environment's; only gitsync itself comes from the wheel.
    python = venv_seeing_this_environment(tmp_path / "venv")
    gitsync = tmp_path / "venv" / "bin" / "gitsync"
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", str(wheel)], check=True,
                   capture_output=True, env=clean, timeout=300)
    probe = "from gitsync.cli.demo import sample_repo_dir; print(sample_repo_dir())"
    where = subprocess.run([str(python), "-c", probe], check=True, capture_output=True, text=True, env=clean,
                           cwd=tmp_path).stdout.strip()
    assert where.startswith(str(tmp_path / "venv")) and where.endswith("gitsync/_sample_repo")
    # The docs come along, where the systemd unit's Documentation= expects them under its prefix.
    assert (tmp_path / "venv" / "share" / "doc" / "gitsync" / "operations.md").is_file()
    result = subprocess.run([str(gitsync), "demo"], capture_output=True, text=True, env=clean,
                            cwd=tmp_path, timeout=60)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    _check_narration(result.stdout)
    assert "DEMO-SUMMARY" not in result.stdout, "the JSON summary is for --json only"


def test_readme_first_screen_and_doc_links():
    """Exactly two set-up commands on the README's first screen; every relative doc link resolves."""
    readme = (ROOT / "README.md").read_text()
    first_screen = "\n".join(readme.splitlines()[:30])
    block = re.search(r"```sh\n(.*?)```", first_screen, re.S)
    assert block, "a shell block on the first screen"
    commands = [line.split("#")[0].strip() for line in block.group(1).splitlines() if line.strip()]
    assert commands == ["pip install . && gitsync demo", "scripts/test"]
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if "://" not in target:
                assert (page.parent / target).exists(), f"{page.name}: broken link {target}"
    for doc in ("operations.md", "repo-format.md", "configuration.md", "security.md", "architecture.md",
                "development.md"):
        assert f"(docs/{doc})" in readme
