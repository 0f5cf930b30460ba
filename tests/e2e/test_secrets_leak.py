"""The leak test: one canary value, in a SOPS file, a secrets directory and an environment variable,
goes through every command and the daemon; it appears nowhere but in what the gateway received.

The canary holds a ``/`` (cjson writes ``\\/``) and is also made to show up in error paths: a
``host`` that fails its schema pattern (the schema error quotes the value), a gateway that echoes a
refused value in its 400, and an out-of-band consumer on the gateway that holds it (GET returns it).
Each place is searched for the value and for every 10-character run of it (`testkit.leaks`), so a
truncated copy counts too: command output, daemon logs (-vv, human and JSON lines), /metrics and
/readyz, every file and git object of the state dir, and every object of the remote (status commits
and notes). The admin key and the age identity are hunted for in the same places.
"""

from __future__ import annotations

import io
import json
import re
import secrets
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from loguru import logger

from gitsync import log as gslog
from gitsync.problems import Problem, ProblemsError, lua_quote
from gitsync.render import RenderOptions, render
from gitsync.render.load import blob_sha
from gitsync.render.memo import ParseCache
from gitsync.render.memo.store import SUFFIX
from gitsync.testing.apisix import ApisixDouble
from gitsync.testing.http import Reply, json_body
from gitsync.writeback.notes import render_section
from gitsync.writeback.wire import FailureNote, summary_text
from testkit.gitservers import BareRepo, GitDaemon, git
from testkit.leaks import Canary, git_objects
from testkit.processes import free_port, gitsync_env, run_gitsync, wait_for
from testkit.profiles import examples
from testkit.sopsfiles import AgeKey, encrypt

CANARY = Canary(f"cnry/{secrets.token_hex(6)}+{secrets.token_hex(6)}")
ADMIN_KEY = Canary(f"admin-{secrets.token_hex(10)}")  # the gateway's key: the X-API-KEY header only
UPSTREAM = "    upstream: {type: roundrobin, nodes: {'127.0.0.1:1980': 1}}\n"
#: A file with neither expressions nor encryption: the only kind the parse cache keeps on disk.
PLAIN = "global_rules:\n  - id: g1\n    plugins:\n      prometheus: {}\n"

CONSUMERS = """\
consumers:
  - username: alice
    plugins:
      key-auth:
        key: "${{ secrets.LEAK_FILE }}"
  - username: bob
    plugins:
      basic-auth:
        username: bob
        password: "${{ secrets.LEAK_ENV }}"
"""


def routes(*extra: str, uri: str = "/a") -> str:
    """r1 sends the canary upstream in a header whose name says nothing: masked by its value only."""
    return ("routes:\n  - id: r1\n    uri: " + uri + "\n    plugins:\n      key-auth: {}\n"
            "      proxy-rewrite: {headers: {set: {X-Api-Key: \"$secret://vault/main/app/key\",\n"
            "                                      X-Upstream: \"${{ secrets.LEAK_FILE }}\"}}}\n"
            + UPSTREAM + "".join(extra))


#: A route whose host is the canary (fails the host pattern, which quotes the value), and an
#: unrelated schema error in the same commit.
BAD_ROUTES = ("  - id: r2\n    uri: /b\n    host: \"${{ secrets.LEAK_ENV }}\"\n" + UPSTREAM
              + "  - id: r3\n    uri: /c\n    methods: [FETCH]\n" + UPSTREAM)


class EchoingGateway(ApisixDouble):
    """A gateway with a check this gitsync does not model (a newer APISIX, a custom plugin).

    While `strict`, it refuses basic-auth passwords holding a ``/`` and, as APISIX's schema
    errors do, quotes the refused value in its answer (cjson-escaped).
    """

    strict = False

    def _echo(self, body: bytes) -> tuple[int, str] | None:
        try:
            data = json.loads(body)
        except ValueError:
            return None
        for index, item in enumerate(data.get("consumers") or [] if self.strict else []):
            password = ((item.get("plugins") or {}).get("basic-auth") or {}).get("password")
            if isinstance(password, str) and "/" in password:
                return index, ('invalid configuration: property "password" validation failed: failed to '
                               f'match pattern "^[^/]*$" with {lua_quote(password)}')
        return None

    def _validate(self, h: Any, body: bytes) -> Reply:
        echo = self._echo(body)
        if echo is None:
            return super()._validate(h, body)
        index, message = echo
        return Reply(400, json_body({"error_msg": "Configuration validation failed", "errors": [
            {"resource_type": "consumers", "index": index, "resource_id": "bob", "error": message}]}))

    def _put(self, h: Any, body: bytes) -> Reply:
        echo = self._echo(body)
        if echo is None:
            return super()._put(h, body)
        return Reply(400, json_body({"error_msg": echo[1]}))


@dataclass
class Leaky:
    """A config repo whose secrets are all the canary, served by git daemon, and one gateway."""

    repo: BareRepo
    url: str
    gateway: EchoingGateway
    tmp: Path
    sealed: str  # the SOPS file: vault/main, its token the canary
    identity: Canary  # the random part of the age identity
    env: dict[str, str]
    source_args: tuple[str, ...]
    gateway_args: tuple[str, ...]
    outputs: list[tuple[str, str]] = field(default_factory=list)  # (what, text) to search at the end

    @property
    def state(self) -> Path:
        return self.tmp / "state"

    def commit(self, routes_text: str, message: str, bob: str = "") -> str:
        """The three files; `bob`: a description of bob (a change to the consumers)."""
        consumers = CONSUMERS + (f"    desc: {bob}\n" if bob else "")
        return self.repo.commit({"secrets/vault.sops.yaml": self.sealed, "consumers.yaml": consumers,
                                 "routes.yaml": routes_text, "plain.yaml": PLAIN}, message)

    def run(self, *args: str, expect: int) -> subprocess.CompletedProcess[str]:
        """`gitsync ARGS`, its output kept for the final search."""
        result = run_gitsync(*args, env=self.env)
        self.outputs.append((" ".join(args[:2]), result.stdout + result.stderr))
        assert result.returncode == expect, f"{args}: {result.returncode}\n{result.stdout}\n{result.stderr}"
        return result

    def put_bodies(self) -> list[bytes]:
        return list(self.gateway.put_bodies)

    def assert_nowhere(self) -> None:
        """The canary, the admin key and the age identity in no output, no state file, no remote
        object: the canary only in PUT bodies."""
        remote = git_objects(self.repo.path)
        for secret in (CANARY, ADMIN_KEY, self.identity):
            for what, text in self.outputs:
                secret.assert_absent(what, [text])
            assert secret.leaks_in_tree(self.state) == {}
            secret.assert_absent("the remote's objects", [remote])


@pytest.fixture(scope="module")
def sealed(tmp_path_factory: pytest.TempPathFactory) -> tuple[AgeKey, str]:
    key = AgeKey.generate()
    text = encrypt(tmp_path_factory.mktemp("sops"), "vault.sops.yaml",
                   f"secrets:\n  - id: vault/main\n    uri: http://127.0.0.1:9\n    prefix: kv/apisix\n"
                   f"    token: {CANARY.value}\n", "--encrypted-regex", "^token$", recipients=key.recipient)
    assert CANARY.found_in(text) == []
    return key, text


@pytest.fixture
def leaky(tmp_path: Path, sealed: tuple[AgeKey, str], remote_repo: BareRepo,
          git_daemon: GitDaemon) -> Iterator[Leaky]:
    key, text = sealed
    secrets_dir = tmp_path / "credentials"
    secrets_dir.mkdir()
    (secrets_dir / "LEAK_FILE").write_text(CANARY.value + "\n")
    admin_key = tmp_path / "admin.key"
    url = git_daemon.url(remote_repo.path.name)
    with EchoingGateway(ADMIN_KEY.value) as gateway:
        admin_key.write_text(gateway.admin_key)
        yield Leaky(
            repo=remote_repo, url=url, gateway=gateway, tmp=tmp_path, sealed=text,
            identity=Canary(key.identity.removeprefix("AGE-SECRET-KEY-1")),
            env={"GITSYNC_SECRET_LEAK_ENV": CANARY.value},
            source_args=("--repo", url, "--secrets-dir", str(secrets_dir),
                         "--age-key-file", str(key.write(tmp_path / "age.key")),
                         "--state-dir", str(tmp_path / "state")),
            gateway_args=("--gateway", gateway.url, "--admin-key-file", str(admin_key)),
        )


def mallory() -> dict[str, Any]:
    """A consumer written on the gateway by hand, holding the canary as its key."""
    return {"username": "mallory", "plugins": {"key-auth": {"key": CANARY.value}}}


@pytest.mark.slow
def test_commands_show_the_canary_nowhere(leaky: Leaky):
    leaky.commit(routes(), "good")
    src, gw = leaky.source_args, leaky.gateway_args

    shown = leaky.run("render", *src, "--show-secrets", expect=0)
    assert shown.stdout.count(CANARY.value) == 4  # the control: token, key, password, header rendered
    leaky.outputs.pop()  # asked for in clear: the one output allowed to hold it
    masked = json.loads(leaky.run("render", *src, expect=0).stdout)
    assert masked["secrets"][0]["token"] == "***"
    assert masked["consumers"][0]["plugins"]["key-auth"]["key"] == "***"
    assert masked["consumers"][1]["plugins"]["basic-auth"]["password"] == "***"
    assert masked["routes"][0]["plugins"]["proxy-rewrite"]["headers"]["set"]["X-Upstream"] == "***"
    leaky.run("validate", *src, "-vv", expect=0)

    # The gateway holds an older alice and mallory (both with the canary): GET brings it back.
    leaky.gateway.out_of_band("consumers", [mallory(), {"username": "alice", "desc": "old",
                                                        "plugins": {"key-auth": {"key": CANARY.value}}}])
    leaky.gateway.out_of_band("routes", [{"id": "r1", "uri": "/a", "plugins": {
        "proxy-rewrite": {"headers": {"set": {"X-Upstream": "old-value"}}}}}])
    diff = leaky.run("diff", *src, *gw, "-vv", expect=1)
    assert "! consumers[mallory]" in diff.stdout and "~ consumers[alice]" in diff.stdout
    assert 'plugins.proxy-rewrite.headers.set.X-Upstream: "old-value" → "***"' in diff.stdout
    leaky.run("diff", *src, *gw, "--log-json", "-vv", expect=1)

    leaky.commit(routes(BAD_ROUTES), "bad: the canary as a host, and an unknown method")
    for command in ("render", "validate"):
        refused = leaky.run(command, *src, "-vv", expect=1)
        assert 'routes[r2].host: invalid configuration: property "host" validation failed: failed to ' \
               'match pattern' in refused.stderr and 'with "***"' in refused.stderr  # the echo, masked
    leaky.run("diff", *src, *gw, "-vv", expect=2)
    assert leaky.put_bodies() == []
    leaky.assert_nowhere()


@pytest.mark.slow
def test_sync_once_success_and_failures_leak_nothing(leaky: Leaky):
    src, gw = leaky.source_args, leaky.gateway_args
    sync = ("sync", "--once", *src, *gw, "--writeback", "on", "-vv")

    leaky.commit(routes(), "good")
    leaky.run(*sync, expect=0)
    assert CANARY.value in leaky.put_bodies()[-1].decode()

    schema_bad = leaky.commit(routes(BAD_ROUTES), "bad: the canary as a host")
    refused = leaky.run(*sync, expect=1)
    assert "routes.yaml:11:5: routes[r2].host:" in refused.stderr

    leaky.gateway.strict = True  # the gateway quotes bob's password in its 400
    echoed = leaky.commit(routes(), "refused by the gateway", bob="rotated")
    refused = leaky.run(*sync, "--log-json", expect=1)
    assert (f'gitsync sync: failed at push ({echoed[:12]}): consumers.yaml:6:5: consumers[bob]: invalid '
            'configuration: property "password" validation failed: failed to match pattern "^[^/]*$" with '
            '"***"') in refused.stderr.splitlines()
    leaky.gateway.strict = False

    leaky.gateway.out_of_band("consumers", [*leaky.gateway.config()["consumers"], mallory()])
    leaky.commit(routes(uri="/a3"), "alice's key is also mallory's, live (mallory is pruned)")
    moved = leaky.run(*sync, expect=0)  # the key moves from mallory to alice: two pushes, logged
    assert "two-step apply: consumers[alice] takes key-auth (duplicate key of plugin key-auth found with " \
           "consumer: mallory)" in moved.stderr

    leaky.run("status", "--state-dir", str(leaky.state), expect=0)
    leaky.run("status", "--fleet", "--repo", leaky.url, expect=0)
    cached = sorted(p.stem for p in (leaky.state / "parse-cache").rglob(f"*{SUFFIX}"))
    assert cached == [blob_sha(PLAIN.encode())]  # the files with secrets in them are never cached
    for sha in (schema_bad, echoed):
        note = git("notes", "--ref", "refs/notes/gitsync", "show", sha, cwd=leaky.repo.path)
        assert "errors:" in note
    accepted = [status for method, _, status in leaky.gateway.requests if method == "PUT" and status < 300]
    assert len(accepted) == 3  # the good commit and the two steps of the move; the others were refused
    leaky.assert_nowhere()


@pytest.mark.slow
@pytest.mark.parametrize("source", ["sops", "secrets-dir", "env"])
def test_each_source_alone_registers_the_canary(tmp_path: Path, sealed: tuple[AgeKey, str], source: str):
    """The canary from one source only, in a field masked by value alone (a description) and in
    one that quotes it in a schema error (a host): each source registers it before anything prints."""
    key, _ = sealed
    repo = tmp_path / "repo"
    key_file = key.write(tmp_path / "age.key")
    env: dict[str, str] = {}
    value = "${{ secrets.LEAK }}"
    if source == "secrets-dir":
        (tmp_path / "credentials").mkdir()
        (tmp_path / "credentials" / "LEAK").write_text(CANARY.value)
    elif source == "env":
        env["GITSYNC_SECRET_LEAK"] = CANARY.value
    else:
        value = CANARY.value

    def write(field: str) -> None:
        text = f"routes:\n  - id: r1\n    uri: /a\n    {field}: \"{value}\"\n" + UPSTREAM
        if source == "sops":
            (repo / "routes.yaml").unlink(missing_ok=True)
            encrypt(repo, "routes.yaml", text, "--encrypted-regex", f"^{field}$", recipients=key.recipient)
        else:
            repo.mkdir(exist_ok=True)
            (repo / "routes.yaml").write_text(text)

    args = ("--dir", str(repo), "--age-key-file", str(key_file),
            "--secrets-dir", str(tmp_path / "credentials"))
    write("desc")
    shown = run_gitsync("render", *args, "--show-secrets", env=env)
    assert json.loads(shown.stdout)["routes"][0]["desc"] == CANARY.value, shown.stderr  # the control
    masked = run_gitsync("render", *args, "-vv", env=env)
    assert masked.returncode == 0 and json.loads(masked.stdout)["routes"][0]["desc"] == "***"
    write("host")
    refused = run_gitsync("validate", *args, "-vv", env=env)
    assert refused.returncode == 1 and 'with "***"' in refused.stderr
    CANARY.assert_absent(f"render/validate, the canary from {source}",
                         [masked.stdout + masked.stderr, refused.stdout + refused.stderr])


# ---------------------------------------------------------------------------------------------------------
# the daemon


class Daemon:
    """`gitsync run` as a real process, its output in files, stopped by its pid."""

    def __init__(self, leaky: Leaky, *flags: str) -> None:
        self.leaky = leaky
        self.port = free_port()
        name = "json" if "--log-json" in flags else "human"
        self.stdout = leaky.tmp / f"daemon-{name}.out"
        self.stderr = leaky.tmp / f"daemon-{name}.err"
        args = [sys.executable, "-m", "gitsync", "run", *leaky.source_args, *leaky.gateway_args,
                "--writeback", "on", "--interval", "0.2", "--jitter", "0", "--drift-interval", "0.5",
                "--listen", f"127.0.0.1:{self.port}", *flags]
        with self.stdout.open("wb") as out, self.stderr.open("wb") as err:
            self.process = subprocess.Popen(args, env=gitsync_env(leaky.env), stdout=out, stderr=err,
                                            stdin=subprocess.DEVNULL)

    def state(self) -> dict[str, Any]:
        try:
            return json.loads((self.leaky.state / "state.json").read_text())
        except (OSError, ValueError):
            return {}

    def wait_for(self, what: str, check: Callable[[dict[str, Any]], bool], timeout: float = 60) -> None:
        """`check` of the daemon's state file, while the daemon runs (its log in the failure)."""
        def holds() -> bool:
            assert self.process.poll() is None, self.stderr.read_text()[-3000:]
            return check(self.state())

        try:
            wait_for(holds, timeout, f"daemon: {what}")
        except AssertionError as exc:
            raise AssertionError(f"{exc}: {self.stderr.read_text()[-3000:]}") from None

    def scrape(self) -> str:
        with httpx.Client(base_url=f"http://127.0.0.1:{self.port}", trust_env=False, timeout=5) as client:
            return "\n".join(client.get(path).text for path in ("/metrics", "/readyz", "/healthz"))

    def stop(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)
            raise

    def output(self) -> str:
        return self.stdout.read_text() + self.stderr.read_text()


@pytest.mark.slow
@pytest.mark.parametrize("log_flags", [("-vv",), ("-vv", "--log-json")], ids=["human", "json"])
def test_the_daemon_leaks_nothing(leaky: Leaky, log_flags: tuple[str, ...]):
    first = leaky.commit(routes(), "good")
    daemon = Daemon(leaky, *log_flags)
    try:
        daemon.wait_for("first apply", lambda s: s.get("last_good") == first)
        bad = leaky.commit(routes(BAD_ROUTES), "bad: the canary as a host")
        daemon.wait_for("refusal at validate", lambda s: bad in s.get("bad", {}))
        leaky.gateway.strict = True
        echoed = leaky.commit(routes(), "refused by the gateway", bob="rotated")
        daemon.wait_for("refusal at push", lambda s: echoed in s.get("bad", {}))
        leaky.gateway.strict = False
        fixed = leaky.commit(routes(uri="/a3"), "good again", bob="rotated")
        daemon.wait_for("second apply", lambda s: s.get("last_good") == fixed)
        leaky.outputs.append(("/metrics /readyz /healthz", daemon.scrape()))
    finally:
        status = daemon.stop()
    assert status == 0, daemon.output()[-3000:]
    logs = daemon.output()
    leaky.outputs.append((f"gitsync run {' '.join(log_flags)}", logs))
    assert "TRACE" in logs and "DEBUG" in logs  # really at -vv
    assert 'failed to match pattern \\"^[^/]*$\\" with \\"***\\"' in logs if "--log-json" in log_flags \
        else 'failed to match pattern "^[^/]*$" with "***"' in logs  # the gateway's echo, masked
    accepted = [status for method, _, status in leaky.gateway.requests if method == "PUT" and status < 300]
    assert len(accepted) == 2 and all(CANARY.value in b.decode() for b in leaky.put_bodies())
    for sha in (bad, echoed):
        assert "errors:" in git("notes", "--ref", "refs/notes/gitsync", "show", sha, cwd=leaky.repo.path)
    leaky.assert_nowhere()


# ---------------------------------------------------------------------------------------------------------
# redaction review: error texts cut short


class QuotingGateway(ApisixDouble):
    """A proxy in front of the gateway that refuses every PUT quoting a value of the body: in a long
    text (cut at 300 characters in the error), or in JSON without ``error_msg`` (shown as sent,
    cjson-escaped: ``/`` as ``\\/``)."""

    answer = "text"

    def _put(self, h: Any, body: bytes) -> Reply:
        password = json.loads(body)["consumers"][1]["plugins"]["basic-auth"]["password"]
        if self.answer == "json":
            return Reply(502, json_body({"message": f'password "{password}" refused'}))
        text = "bad gateway; upstream said: " + "." * 250 + f'password "{password}"'  # cut at 300
        return Reply(502, text.encode(), content_type="text/plain")


@pytest.mark.slow
@pytest.mark.parametrize("answer", ["text", "json"])
def test_a_quoted_secret_is_redacted_however_the_answer_spells_it(leaky: Leaky, answer: str):
    """A secret across the 300-character limit must not leave its start behind (cut after
    redaction, never before); cjson's ``\\/`` spelling of it is redacted as well."""
    leaky.commit(routes(), "good")
    src = leaky.source_args
    with QuotingGateway(ADMIN_KEY.value) as gateway:
        gateway.answer = answer
        failed = leaky.run("sync", "--once", *src, "--gateway", gateway.url, "--admin-key-file",
                           leaky.gateway_args[-1], "--push-attempts", "1", expect=1)
        assert "PUT /apisix/admin/configs answered 502: " in failed.stderr
        assert gateway.put_bodies and all(CANARY.value in b.decode() for b in gateway.put_bodies)
    leaky.assert_nowhere()


# ---------------------------------------------------------------------------------------------------------
# property: any secret value, rejected wherever a value can be, is in no message


ENCRYPTED = "ENC[AES256_GCM,data:eA==,iv:aXY=,tag:dGFn,type:str]"
#: Each place a value can be refused, as a route (one line per place: its problem is found by line).
#: {v} is the value's spelling in the file: ``${{ secrets.LEAK }}`` or a SOPS ``ENC[...]``.
REJECTING = {
    "host pattern (Lua %q)": 'host: "{v}"',
    "id (Python repr)": None,
    "plugin name (raw)": 'plugins: {{"{v}": {{}}}}',
    "plugin conf (cjson)": 'plugins: {{proxy-rewrite: "{v}"}}',
    "secret reference (repr)": 'plugins: {{proxy-rewrite: {{uri: "$secret://{v}"}}}}',
    "dangling reference (repr)": 'upstream_id: "{v}"',
    "unknown field (raw)": '"{v}": 1',
    "upstream key pattern": 'upstream: {{type: chash, hash_on: header, key: "{v}", '
                            'nodes: {{"127.0.0.1:1": 1}}}}',
}
#: The places a SOPS file can hold the value in (sops encrypts whole values, never keys).
SOPS_REJECTING = ["host pattern (Lua %q)", "id (Python repr)", "plugin conf (cjson)",
                  "dangling reference (repr)", "upstream key pattern"]


def rejecting_routes(spelling: str, places: list[str], prefix: str) -> tuple[str, dict[int, str]]:
    """A routes file with one route per place, and the line each place's problem is at."""
    lines, at = ["routes:"], {}
    for number, name in enumerate(places):
        text = REJECTING[name]
        # A problem is at its field's line; an id's is its item's, and so is a renamed key's.
        at[len(lines) + (1 if text is None or text.startswith('"{v}"') else 3)] = name
        lines += [f'  - id: "{spelling}"' if text is None else f"  - id: {prefix}{number}", "    uri: /p"]
        if text is not None:
            lines.append(f"    {text.format(v=spelling)}")
        if "upstream" not in (text or ""):
            lines.append("    upstream: {nodes: {'127.0.0.1:1': 1}}")
    return "\n".join(lines) + "\n", at


def fake_sops(value: str) -> Callable[[str, dict], dict]:
    """The decrypt seam: every ``ENC[...]`` of the document is `value`."""
    def decrypt(_file: str, document: dict) -> dict:
        def walk(node: Any) -> Any:
            if node == ENCRYPTED:
                return value
            if isinstance(node, dict):
                return {k: walk(v) for k, v in node.items()}
            return [walk(v) for v in node] if isinstance(node, list) else node
        return walk(document)
    return decrypt


#: Secret values as an operator's tools make them: any printable text, always with a character some
#: spelling escapes (quotes, backslashes, line breaks, ``/``, ``%``) and one that is not ASCII (so that a
#: short value cannot be found in the outputs by chance: they are ASCII but for the value). Never
#: ``*`` (the mask itself) and no run of blanks (indentation would match it).
SECRET_TEXT = st.text(
    st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters="*")
    | st.sampled_from(['"', "'", "\\", "\n", "\r", "\t", "/", "%", "&", "+", "é", "€", "\U0001f600",
                       "\u2028"]),
    min_size=4, max_size=200,
).filter(lambda v: len(v.strip()) >= 4 and not re.search(r"\s{3}", v)
         and any(c in v for c in "\"'\\\n/%") and not v.isascii())


def every_output(problems: list[Problem], log: io.StringIO) -> list[str]:
    """What gitsync makes of refused problems: the lines, log records (the sink `log` is), the note
    section, the status summary and the state file."""
    lines = [str(p) for p in problems]
    sha, now = "4b825dc642cb6eb9a060e54bf8d69288fbee4904", datetime.now(UTC)
    logger.error("commit {} refused at {} ({} problem(s))", sha[:7], "validate", len(lines))
    for line in lines:
        logger.error("  {}", line)
    return [*lines, log.getvalue(),
            render_section(FailureNote("agent-1", sha, now, "validate", lines), 4096),
            summary_text({"commit": sha, "result": "failed", "stage": "validate", "problems": lines}, now),
            json.dumps({"bad": {sha: f"validate: {lines[0]}"}, "problems": lines})]


REJECTING_FILES = (rejecting_routes("${{ secrets.LEAK }}", list(REJECTING), "plain-"),
                   rejecting_routes(ENCRYPTED, SOPS_REJECTING, "sealed-"))


@pytest.mark.slow
@pytest.mark.parametrize("json_lines", [False, True], ids=["human", "json"])
def test_a_secret_rejected_anywhere_is_in_no_message(json_lines: bool):
    """Random secret values, from ``${{ secrets.* }}`` and from SOPS, in every place that rejects a
    value: neither the value nor any 10-character run of it is in a problem, a log line (human or
    JSON), a note, the status or the state."""
    log = io.StringIO()
    gslog.setup(stream=log, verbose=2, json_lines=json_lines)
    (substituted, at), (sealed, sealed_at) = REJECTING_FILES
    files = {"routes.yaml": substituted.encode(),
             "sealed.yaml": (sealed + "sops: {version: 3.9.0}\n").encode()}
    cache = ParseCache()

    @given(value=SECRET_TEXT)
    @examples(0.75)
    def refused_quietly(value: str) -> None:
        gslog.forget_secrets()
        log.seek(0)
        log.truncate()
        options = RenderOptions(secret_lookup={"LEAK": value}.get, decrypt=fake_sops(value))
        with pytest.raises(ProblemsError) as caught:
            render(files, options, cache)
        problems = caught.value.problems
        for file, lines in (("routes.yaml", at), ("sealed.yaml", sealed_at)):  # refused in every place
            refused = {p.location.line for p in problems if p.location and p.location.file == file}
            assert set(lines) <= refused, (file, {lines[n] for n in set(lines) - refused}, problems)
        Canary(value).assert_absent("the outputs of a refused render", every_output(problems, log))

    try:
        refused_quietly()
    finally:
        gslog.setup()


#: Values whose spellings differ most from their plain text: a line break (Lua's ``\`` + newline,
#: JSON's ``\n``), quotes and backslashes, characters URL encoding changes, controls and non-BMP text.
TRICKY = {
    "multi-line": 'first-line\nsecond "quoted" line\\ with/slash é',
    "url-chars": "pa%2Fss wörd/ü+&=?#x-1234",
    "controls": "x\ty\r\nz€\U0001f600 \"'/-tail",
}


@pytest.mark.slow
@pytest.mark.parametrize("value", TRICKY.values(), ids=TRICKY.keys())
def test_a_tricky_secret_leaks_nowhere_end_to_end(tmp_path: Path, remote_repo: BareRepo,
                                                 git_daemon: GitDaemon, value: str):
    """The value from a secrets file and from the environment, refused by the schema in three places,
    then by a gateway quoting it as APISIX's schema does (Lua's %q): `validate`, `sync --once` (human
    and JSON logs, write-back on) and `status` show it nowhere, and neither does the state dir or any
    object of the remote (the notes on the commits, the status branch)."""
    canary = Canary(value)
    credentials = tmp_path / "credentials"
    credentials.mkdir()
    (credentials / "LEAK_FILE").write_text(value + "\n")
    env = {"GITSYNC_SECRET_LEAK_ENV": value}
    url = git_daemon.url(remote_repo.path.name)
    routes = ('routes:\n  - id: r1\n    uri: /a\n    host: "${{ secrets.LEAK_FILE }}"\n' + UPSTREAM
              + '  - id: r2\n    uri: /b\n    plugins: {proxy-rewrite: "${{ secrets.LEAK_ENV }}"}\n'
              + UPSTREAM
              + '  - id: r3\n    uri: /c\n'
              + '    plugins: {proxy-rewrite: {uri: "$secret://${{ secrets.LEAK_FILE }}"}}\n' + UPSTREAM)
    state = tmp_path / "state"
    source = ("--repo", url, "--secrets-dir", str(credentials), "--state-dir", str(state))
    outputs = []
    with EchoingGateway(ADMIN_KEY.value) as gateway:
        admin_key = tmp_path / "admin.key"
        admin_key.write_text(gateway.admin_key)
        sync = ("sync", "--once", *source, "--gateway", gateway.url, "--admin-key-file", str(admin_key),
                "--writeback", "on", "-vv")
        schema = remote_repo.commit({"routes.yaml": routes}, "refused: the secret where the schema quotes it")
        for args, expect in ((("validate", *source, "-vv"), 1), (sync, 1), ((*sync, "--log-json"), 1)):
            result = run_gitsync(*args, env=env)
            assert result.returncode == expect, (args, result.stdout, result.stderr)
            outputs.append(result.stdout + result.stderr)
        assert not gateway.put_bodies
        gateway.strict = True  # it quotes bob's password, Lua-style, in its 400
        good_routes = "routes:\n  - id: r1\n    uri: /a\n    plugins: {key-auth: {}}\n" + UPSTREAM
        echoed = remote_repo.commit({"routes.yaml": good_routes, "consumers.yaml": CONSUMERS},
                                    "refused by the gateway, which quotes it")
        for args, expect in ((sync, 1), (("status", "--state-dir", str(state)), 0),
                             (("status", "--fleet", "--repo", url), 0)):
            result = run_gitsync(*args, env=env)
            assert result.returncode == expect, (args, result.stdout, result.stderr)
            outputs.append(result.stdout + result.stderr)
        sent = [json.loads(body)["consumers"][1]["plugins"]["basic-auth"]["password"]
                for body in gateway.put_bodies]
        assert sent and all(password == value for password in sent)  # the control: it got the value
    assert 'routes.yaml:4:5: routes[r1].host: invalid configuration: property "host" validation failed: ' \
           'failed to match pattern' in outputs[0] and 'with "***"' in outputs[0]  # refused, masked
    assert 'consumers[bob]: invalid configuration: property "password" validation failed: failed to match ' \
           'pattern "^[^/]*$" with "***"' in outputs[3]
    notes = [git("notes", "--ref", "refs/notes/gitsync", "show", sha, cwd=remote_repo.path)
             for sha in (schema, echoed)]
    assert "routes[r2].plugins.proxy-rewrite: invalid plugin conf" in notes[0]  # the controls: noted
    assert "consumers[bob]" in notes[1]
    canary.assert_absent("command output", outputs)
    assert canary.leaks_in_tree(state) == {}
    canary.assert_absent("the remote's objects", [git_objects(remote_repo.path), *notes])
