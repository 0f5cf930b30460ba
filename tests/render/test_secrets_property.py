"""The property of the secret classifier, end to end: random valid configurations with a distinct canary
in every ``encrypt_fields`` path of APISIX 3.18's plugins and in every value shape (credential headers
in header maps, URL user info with reserved characters, token query parameters, PEM keys, JWTs,
high-entropy header values), in routes, services, consumers, credentials, consumer groups, global
rules, plugin configs, plugin metadata, SSLs, upstreams and secret managers.

Each configuration goes onto the APISIX double, then through ``gitsync export`` (in process), ``gitsync
render`` of the exported repo and of the configuration written by hand in the repo (block, flow or
JSON style), ``gitsync diff`` of that repo with every canary changed, a refused commit (its problems,
log lines, note, status summary and status file) and every page of the web view (the items list, each
item's page, the overview with the refusal, the fleet). No canary is in any of them nor in any file
written into the repo; the secrets directory holds every one; the exported repo renders to the live
config. Before each step the log redactor forgets every value, so each step's own classification is
what hides them.
"""

from __future__ import annotations

import io
import json
import time
from contextlib import redirect_stderr, redirect_stdout
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st
from loguru import logger

from gitsync import log as gslog
from gitsync.agent.outcomes import Stage, SyncOutcome, SyncResult, Trigger
from gitsync.agent.view import AgentView, SyncRecord
from gitsync.cli.parser import main
from gitsync.kinds import KINDS
from gitsync.problems import ProblemsError
from gitsync.render import render
from gitsync.schema.encrypt_fields import ENCRYPT_FIELDS
from gitsync.schema.plugins import AUTH_PLUGINS
from gitsync.testing.apisix import ApisixDouble
from gitsync.web import pages
from gitsync.web.catalog import Catalog, paginate
from gitsync.web.links import Links
from gitsync.web.live import Fleet, LiveItems
from gitsync.writeback.statusfile import FleetEntry, StatusFile, read_status
from gitsync.writeback.wire import GatewayStatus, StatusReport, render_status, status_document
from testkit.leaks import Canary
from testkit.pem import pem_pair
from testkit.profiles import examples
from testkit.secretconfigs import Canaries, plugin_conf
from tests.adopt.test_export import KEY, fill
from tests.e2e.test_secrets_leak import every_output

pytestmark = pytest.mark.slow

UPSTREAM = {"type": "roundrobin", "nodes": {"127.0.0.1:1980": 1}}
#: Where a plugin configured by its ``schema`` may be; an auth plugin's ``consumer_schema`` fields go
#: on a consumer or a credential.
HOLDERS = ("routes", "services", "plugin_configs", "global_rules", "consumer_groups")
STYLES = ("block", "flow", "json")
SSL = pem_pair("canary.example")
CLIENT = pem_pair("client.internal")


def _item(kind: str, ident: str, plugins: dict[str, Any]) -> dict[str, Any]:
    if kind == "routes":
        return {"id": ident, "uri": f"/{ident}", "upstream": UPSTREAM, "plugins": plugins}
    if kind == "services":
        return {"id": ident, "upstream": UPSTREAM, "plugins": plugins}
    if kind == "consumers":
        return {"username": ident, "plugins": plugins}
    return {"id": ident, "plugins": plugins}


@st.composite
def configurations(draw: st.DrawFn) -> tuple[dict[str, list[Any]], list[str], list[str]]:
    """A payload with a canary in every secret place, the canary tokens, and the private parts of the
    PEM keys of its SSL and upstream (real keys, which a canary token cannot replace)."""
    canaries = Canaries(draw(st.integers(0, 2**32 - 1)))
    elements = lambda: draw(st.integers(1, 2))  # noqa: E731 - array sizes drawn as the builder goes
    payload: dict[str, list[Any]] = {kind: [] for kind in KINDS}
    grouped: dict[tuple[str, int], dict[str, Any]] = {}
    credentials = []
    for n, (name, declared) in enumerate(sorted(ENCRYPT_FIELDS.items())):
        if declared.schema:
            kind = draw(st.sampled_from(HOLDERS))
            bucket = n if kind == "global_rules" else draw(st.integers(0, 1))  # a plugin in one rule only
            conf = plugin_conf(name, declared.schema, canaries, elements)
            grouped.setdefault((kind, bucket), {})[name] = conf
        if declared.consumer:
            conf = plugin_conf(name, declared.consumer, canaries, elements)
            if name in AUTH_PLUGINS and draw(st.booleans()):
                credentials.append({"id": f"owner/credentials/c{n}", "plugins": {name: conf}})
            else:
                grouped.setdefault(("consumers", n), {})[name] = conf
        if declared.metadata:
            payload["plugin_metadata"].append({"id": name, **plugin_conf(name, declared.metadata, canaries,
                                                                           elements)})
    for (kind, bucket), plugins in sorted(grouped.items()):
        payload[kind].append(_item(kind, f"{kind.replace('_', '-')}-{bucket}", plugins))
    if credentials:
        payload["consumers"] += [{"username": "owner"}, *credentials]
    _shapes(payload, canaries, draw)
    keys = [SSL[1].splitlines()[1][48:], CLIENT[1].splitlines()[1][48:]]
    return {kind: items for kind, items in payload.items() if items}, canaries.made, keys


def _shapes(payload: dict[str, list[Any]], canaries: Canaries, draw: st.DrawFn) -> None:
    """Canaries that only their shape or their place tells: headers, URLs, PEM keys, JWTs, likely ones."""
    headers = canaries.headers(draw(st.integers(1, 3)))
    likely = {"X-Custom-Signature-Base": canaries.token() + canaries.token()}  # no name says secret
    shapes = {
        "proxy-rewrite": {"headers": {"set": headers, "add": likely}},
        "forward-auth": {"uri": "http://auth.example/check", "extra_headers": canaries.headers(1)},
        "http-logger": {"uri": canaries.url()},
        "openid-connect": {"client_id": "gw", "discovery": f"https://idp.example/.well-known/x?access_token="
                                                          f"{canaries.token()}",
                           "proxy_opts": {"http_proxy_authorization": f"Basic {canaries.token()}"}},
        "mocking": {"response_example": f"token {canaries.jwt()}"},
        "ext-plugin-pre-req": {"conf": [{"name": "key", "value": canaries.pem()}]},
        "ai-request-rewrite": {"prompt": "p", "provider": "openai",
                               "auth": {"header": canaries.headers(1)}},
    }
    kind = draw(st.sampled_from(("routes", "services", "plugin_configs")))
    payload[kind].append(_item(kind, "shapes", shapes))
    probe = ["X-Probe: yes", *(f"{name}: {value}" for name, value in canaries.headers(1).items())]
    tls = {"client_cert": CLIENT[0], "client_key": CLIENT[1]}
    payload["upstreams"].append({"id": "checked", "type": "roundrobin", "nodes": {"127.0.0.1:1980": 1},
                                 "scheme": "https", "tls": tls, "checks": {"active": {"req_headers": probe}}})
    payload["ssls"].append({"id": "canary", "snis": ["canary.example"], "cert": SSL[0], "key": SSL[1]})
    payload["plugin_metadata"].append({"id": "opentelemetry", "collector": {
        "address": "127.0.0.1:4318", "request_headers": canaries.headers(1)}})
    payload["secrets"] += [
        {"id": "vault/main", "uri": "http://127.0.0.1:8200", "prefix": "kv", "token": canaries.token()},
        {"id": "aws/prod", "access_key_id": canaries.token(), "secret_access_key": canaries.token(),
         "session_token": canaries.token()},
        {"id": "gcp/prod", "auth_config": {"client_email": "gw@example.iam", "project_id": "p",
                                           "private_key": canaries.pem()}}]


def _repo(payload: dict[str, list[Any]], styles: dict[str, str]) -> dict[str, bytes]:
    """The payload written by hand: a file per kind, in block, flow or JSON style."""
    from gitsync.adopt import repo_writer

    files = {}
    for kind, items in payload.items():
        style = styles[kind]
        if style == "json":
            files[f"{kind}.json"] = json.dumps({kind: items}, indent=2, ensure_ascii=False).encode()
        elif style == "flow":
            lines = [f"{kind}:", *(f"  - {json.dumps(item, ensure_ascii=False)}" for item in items)]
            files[f"{kind}.yaml"] = ("\n".join(lines) + "\n").encode()
        else:
            files.update(repo_writer.render_files(repo_writer.plan_files({kind: items}, "per-kind")))
    return files


def _write(root: Path, files: dict[str, bytes]) -> Path:
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    return root


def _cli(*argv: str) -> tuple[int, str]:
    """A gitsync command in this process: its exit status, and everything it printed and logged."""
    out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", write_through=True)
    err = io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(list(argv))
    return code, out.buffer.getvalue().decode() + err.getvalue()  # type: ignore[attr-defined]


def _renamed(payload: dict[str, list[Any]], tokens: list[str]) -> tuple[dict[str, list[Any]], list[str]]:
    """The payload with every canary token replaced by a new one (a commit changing every secret)."""
    text = json.dumps(payload)
    fresh = [token[::-1] + "Zq9" for token in tokens]
    for old, new in zip(tokens, fresh, strict=True):
        text = text.replace(old, new)
    return json.loads(text), fresh


REFUSED = """routes:
  - id: refused-host
    uri: /x
    host: "{url}"
    upstream: {{nodes: {{"127.0.0.1:1": 1}}}}
  - id: refused-uri
    uri: /y
    upstream: {{nodes: {{"127.0.0.1:1": 1}}}}
    plugins: {{proxy-rewrite: {{uri: "Bearer {token}"}}}}
"""


def _pages(files: dict[str, bytes], problems: list[str], double: ApisixDouble) -> list[str]:
    """Every page of the web view for the commit of `files`, refused with `problems` after a good one."""
    good, tip, now = "1" * 40, "2" * 40, time.time()
    rendered = render({k: v for k, v in files.items() if k != "refused.yaml"})
    catalog = Catalog(good, rendered, files)
    links = Links("https://git.example/{sha}/{path}#L{line}")
    live = httpx.get(double.url + "/apisix/admin/configs", headers={"X-API-KEY": KEY}).json()
    by_id = {kind: {str(i.get("id") or i.get("username")): i for i in live[kind]}
             for kind in KINDS if isinstance(live.get(kind), list)}
    lives = {double.url: LiveItems(by_id, at=now)}
    found = catalog.search()
    out = [pages.items(good, catalog.counts, paginate(found, n, per_page=10), "", None, links)
           for n in range(1, paginate(found, 1, per_page=10).pages + 1)]
    for row in found:
        detail = catalog.detail(row.kind, row.id)
        assert detail is not None
        out.append(pages.item(detail, good, lives, [], links, now))
    outcome = SyncOutcome(frozenset({Trigger.POLL}), SyncResult.FAILED, tip, "change every secret",
                          Stage.VALIDATE, problems)
    view = AgentView("a1", "https://git.example/config.git", "main", (".",), tip,
                     f"validate: {gslog.redact(problems[0])}", good, history=(SyncRecord.of(outcome, now),))
    out.append(pages.overview(view, {}, links, now, catalog.counts))
    status = read_status(render_status(status_document(_failed_status(tip, problems))))
    assert isinstance(status, StatusFile)
    written = datetime.fromtimestamp(now, UTC)
    entry = FleetEntry("a1", status.agent, status, written=written, seen=written)
    out.append(pages.fleet((Fleet((entry,), at=now),), {None: tip}, "gitsync/status", links, now))
    return [str(page) for page in out]


def _failed_status(tip: str, problems: list[str]) -> StatusReport:
    error = "; ".join(problems[:3])
    gateway = GatewayStatus("http://127.0.0.1:9180", "failed", {}, None, {}, {}, error=error)
    return StatusReport("a1", tip, "change every secret", "failed", [gateway], datetime.now(UTC), 0.1)


@pytest.fixture
def key_file(tmp_path: Path) -> Path:
    path = tmp_path / "admin_key"
    path.write_text(KEY)
    return path


def test_no_secret_reaches_any_output_and_export_round_trips(apisix: ApisixDouble, key_file: Path,
                                                             tmp_path_factory: pytest.TempPathFactory):
    @given(config=configurations(), styles=st.fixed_dictionaries({k: st.sampled_from(STYLES) for k in KINDS}))
    # Each example is an export, three renders, a diff and every web page: a few seconds. A failing one is
    # shown as found (a shrink would re-run those hundreds of times).
    @settings(examples(0.06), phases=(Phase.explicit, Phase.reuse, Phase.generate))
    def through_every_output(config: tuple[dict[str, list[Any]], list[str], list[str]],
                             styles: dict[str, str]) -> None:
        payload, tokens, keys = config
        hunted = [*tokens, *keys]
        root = tmp_path_factory.mktemp("example")
        gslog.forget_secrets()
        fill(apisix, payload)
        gateway = ("--gateway", apisix.url, "--admin-key-file", str(key_file))
        outputs: list[str] = []

        # export: every canary out of the repo, into the secrets directory; the round trip proven
        out, secrets = root / "exp", root / "sec"
        code, printed = _cli("export", *gateway, "--out", str(out), "--secrets-out", str(secrets))
        assert code == 0, printed
        assert "round trip: render of the written repo equals the live config" in printed
        assert "X-Custom-Signature-Base" in printed  # the likely one, named in a warning
        stored = "\n".join(p.read_text() for p in secrets.iterdir())
        outputs.append(printed)
        for value in hunted:
            assert value in stored, value
            assert Canary(value).leaks_in_tree(out) == {}, value

        # render: the exported repo with its secrets, and the configuration written in the repo itself
        gslog.forget_secrets()
        code, printed = _cli("render", "--dir", str(out), "--secrets-dir", str(secrets))
        assert code == 0, printed
        outputs.append(printed)
        files = _repo(payload, styles)
        gslog.forget_secrets()
        code, printed = _cli("render", "--dir", str(_write(root / "lit", files)))
        assert code == 0, printed
        outputs.append(printed)

        # diff: every secret changed; neither the live value nor the new one shows
        changed, fresh = _renamed(payload, tokens)
        files = _repo(changed, styles)
        gslog.forget_secrets()
        code, printed = _cli("diff", "--dir", str(_write(root / "new", files)), *gateway)
        assert code == 1, printed
        outputs.append(printed)

        # a refused commit: its problems quote shaped secrets; log, note, status summary, status file
        gslog.forget_secrets()
        log = io.StringIO()
        gslog.setup(stream=log, verbose=2)
        url, token = Canaries(len(hunted)).url(), Canaries(len(fresh)).token()
        files["refused.yaml"] = REFUSED.format(url=url, token=token).encode()
        with pytest.raises(ProblemsError) as caught:
            render(files)
        lines = [str(p) for p in caught.value.problems]
        assert {"refused-host", "refused-uri"} <= {p.id for p in caught.value.problems}
        outputs += every_output(caught.value.problems, log)
        # A gateway refusing the PUT may echo what it was sent: only the values render registered hide it.
        echoed = json.dumps(changed).replace("/", "\\/")
        logger.error("gateway {}: refused: {}", apisix.url, echoed)
        outputs.append(log.getvalue())
        outputs.append(render_status(status_document(_failed_status("2" * 40, [echoed, *lines]))).decode())

        # the web view: every page
        outputs += _pages(files, lines, apisix)

        for value in [*hunted, *fresh, token, url.split("@logs")[0].split(":", 2)[2]]:
            Canary(value).assert_absent("the outputs", outputs)

    try:
        through_every_output()
    finally:
        gslog.setup()
