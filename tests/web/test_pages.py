"""The web view's pure parts: escaping, masking an item's own lines, search and pages, access rules,
forge links, the agent's history. The browser tests (tests/e2e/test_webview.py) show the whole; these pin the
rules one by one, fast."""

from __future__ import annotations

from collections import deque

import httpx
import pytest

from gitsync.agent.view import GatewayOutcome, SyncRecord, remember
from gitsync.daemon.listener import Metrics, Readiness, StatusServer
from gitsync.render import render
from gitsync.settings import Secret, SettingsError
from gitsync.web import auth
from gitsync.web.catalog import Catalog, paginate, written_lines
from gitsync.web.html import Markup, esc, tag
from gitsync.web.links import Links
from gitsync.web.pages import problem
from testkit.processes import run_bench

SECRET_FILE = """consumers:
  - username: carol
    plugins:
      basic-auth: {username: carol, password: pw-one-1234, other: x}
      jwt-auth:
        key: carol-key
        secret: |
          line-one-of-the-secret
          line-two-of-the-secret
    desc: after the secret
  # a comment about the next item
  - username: dave
    plugins:
      key-auth: {key: dave-key-5678}
upstreams:
  - id: u1
    nodes:
      "127.0.0.1:1980": 1
    desc: http://user:url-password-9@example.com/x
"""


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    files = {"c.yaml": SECRET_FILE.encode(),
             "j.json": b'{"routes": [{"id": "a", "uri": "/a", "upstream_id": "u1"}, '
                       b'{"id": "b", "uri": "/b", "upstream_id": "u1"}]}'}
    return Catalog("0" * 40, render(files), files)


def test_markup_concatenation_escapes_what_is_not_markup():
    assert esc('<a href="x">') == "&lt;a href=&#34;x&#34;&gt;" and esc(None) == ""
    joined = tag("b", "x") + '<img src=x onerror="y">'
    assert isinstance(joined, Markup) and joined == '<b>x</b>&lt;img src=x onerror=&#34;y&#34;&gt;'
    assert "<p>" + tag("i", "<") == "&lt;p&gt;<i>&lt;</i>"
    assert tag("input", value='"><script>') == '<input value="&#34;&gt;&lt;script&gt;">'


def test_an_items_lines_are_shown_with_every_secret_masked_where_it_is_written(catalog):
    carol = catalog.detail("consumers", "carol")
    assert carol is not None and carol.reformatted is None
    assert carol.written == (
        (2, "  - username: carol"),
        (3, "    plugins:"),
        (4, '      basic-auth: {username: carol, password: "***", other: x}'),  # the value only
        (5, "      jwt-auth:"),
        (6, '        key: "***"'),
        (7, '        secret: "***"'),  # its two lines dropped
        (10, "    desc: after the secret"),
    )  # and the comment before the next item is not this item's
    text = "\n".join(line for _, line in carol.written) + carol.pushed
    for secret in ("pw-one-1234", "carol-key", "line-one", "line-two"):
        assert secret not in text
    dave = catalog.detail("consumers", "dave")
    assert dave is not None and dave.written[-1] == (14, '      key-auth: {key: "***"}')
    upstream = catalog.detail("upstreams", "u1")
    assert upstream is not None and "url-password-9" not in str(upstream.written) + upstream.pushed
    assert "http://user:***@example.com/x" in str(upstream.written)


UPSTREAM = b'upstreams:\n  - id: u1\n    nodes:\n      "127.0.0.1:1980": 1\n'
TWO_ROUTES = ("routes:\n  - id: a\n    uri: /a\n    upstream_id: u1\n"
              "  - id: b\n    uri: /b\n    upstream_id: u1\n")
PRETTY_JSON = """{
  "routes": [
    {
      "id": "a",
      "uri": "/a",
      "upstream_id": "u1"
    },
    {
      "id": "b",
      "uri": "/b",
      "upstream_id": "u1"
    }
  ]
}
"""
#: One file in each layout an item's lines may take; the item pages must show from an excerpt of the
#: file what they show from the whole file. The value: the file, and how many of its items an excerpt
#: cannot stand for (the whole file is then read: its positions and value spans once, then kept, and
#: its content).
LAYOUTS = {
    "block.yaml": (SECRET_FILE.replace("upstreams:\n  - id: u1", """routes:
  - id: r1
    uri: /r1
    upstream_id: u1
    desc: |
      two
      lines

  # next
  - id: r2
    uri: /r2   # a comment
    upstream_id: u1
upstreams:
  - id: u2"""), 0),
    "zero-indent.yaml": (TWO_ROUTES.replace("\n  ", "\n"), 0),
    "docs.yaml": ("routes:\n  - id: a\n    uri: /a\n    upstream_id: u1\n---\n# two\nroutes:\n  - id: b\n"
                  "    uri: /b\n    upstream_id: u1\n...\n---\nconsumers:\n  - username: erin\n"
                  "    plugins:\n      key-auth:\n        key: erin-key-9\n", 0),
    "crlf.yaml": (TWO_ROUTES.replace("\n", "\r\n"), 0),
    "flow-in-block.yaml": ("routes:\n  - {id: a, uri: /a,\n     upstream_id: u1}\n"
                           "  - {id: b, uri: /b, upstream_id: u1}\n", 0),
    "one-line.json": (" ".join(PRETTY_JSON.split()), 0),
    "pretty.json": (PRETTY_JSON, 1),
    "flow-lines.yaml": ("routes: [\n  {id: a, uri: /a, upstream_id: u1},\n"
                        "  {id: b, uri: /b, upstream_id: u1}\n]\n", 1),
    "dash-alone.yaml": ("routes:\n-\n  id: a\n  uri: /a\n  upstream_id: u1\n-\n  id: b\n  uri: /b\n"
                        "  upstream_id: u1\n", 2),
    "lone-cr.yaml": (TWO_ROUTES.replace("\n", "\r"), 2),
}


def whole_file_reads(monkeypatch, data: bytes) -> list[int]:
    """Each time the catalog parses a file of `data`'s size, whole (for positions or content)."""
    from gitsync.web import catalog as catalog_module

    reads: list[int] = []
    for name in ("positions", "value_spans", "parse"):
        real = getattr(catalog_module, name)

        def spy(given: bytes, real=real):  # type: ignore[no-untyped-def]
            if len(given) == len(data):
                reads.append(len(given))
            return real(given)

        monkeypatch.setattr(catalog_module, name, spy)
    return reads


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_an_item_page_shows_from_an_excerpt_what_the_whole_file_shows(name, monkeypatch):
    text, fallen_back = LAYOUTS[name]
    data = text.encode()
    files = {"u.yaml": UPSTREAM, name: data}
    rendered = render(files)
    expected = {(kind, source.id): written_lines(data, kind, source, rendered.secret_values)
                for kind, sources in rendered.source_map.lists().items() for source in sources
                if source.file == name}
    assert len(expected) >= 2
    reads = whole_file_reads(monkeypatch, data)
    catalog = Catalog("0" * 40, rendered, files)
    for (kind, ident), lines in expected.items():
        detail = catalog.detail(kind, ident)
        assert detail is not None
        if lines is None:
            assert detail.written == () and detail.reformatted is not None, (kind, ident)
        else:
            assert detail.written == tuple(lines), (kind, ident)
    assert len(reads) == (2 + fallen_back if fallen_back else 0), reads  # places once, content each
    if name == "block.yaml":
        text = str([catalog.detail("consumers", who).written for who in ("carol", "dave")])
        assert "pw-one-1234" not in text and "carol-key" not in text and "dave-key-5678" not in text


def test_an_item_page_of_a_large_file_parses_its_own_lines_only(monkeypatch):
    """2,000 routes in one file: every item page cuts its route's lines; the file is never parsed
    whole, whichever routes are asked for and in whatever order."""
    data = b"routes:\n" + b"".join(b"  - id: r%d\n    uri: /r%d\n    upstream_id: u1\n    plugins:\n"
                                    b"      key-auth: {}\n" % (n, n) for n in range(2000))
    files = {"u.yaml": UPSTREAM, "routes.yaml": data}
    catalog = Catalog("0" * 40, render(files), files)
    reads = whole_file_reads(monkeypatch, data)
    for n in (1999, 0, 1000, 7, 1000):
        detail = catalog.detail("routes", f"r{n}")
        assert detail is not None and detail.written == (
            (2 + 5 * n, f"  - id: r{n}"), (3 + 5 * n, f"    uri: /r{n}"), (4 + 5 * n, "    upstream_id: u1"),
            (5 + 5 * n, "    plugins:"), (6 + 5 * n, "      key-auth: {}"))
    assert reads == []


def test_items_sharing_their_lines_are_shown_reformatted(catalog):
    route = catalog.detail("routes", "b")
    assert route is not None and route.written == ()
    assert route.reformatted == "id: b\nupstream_id: u1\nuri: /b\n"
    assert route.row.file == "j.json" and route.row.line == 1


def test_search_and_pages(catalog):
    assert [r.id for r in catalog.search("jwt")] == ["carol"]
    assert [r.id for r in catalog.search("/b")] == ["b"]
    assert [r.id for r in catalog.search("c.yaml 1980")] == ["u1"]
    assert [r.id for r in catalog.search("", "routes")] == ["a", "b"]
    assert len(catalog.search("pw-one")) == 0  # a secret is not searchable, as it is not shown
    page = paginate(catalog.search(), 2, per_page=2)
    assert (page.number, page.pages, page.start, [r.id for r in page.rows]) == (2, 3, 2, ["u1", "carol"])
    assert paginate([], 5).number == 1 and paginate(catalog.search(), 99, per_page=2).number == 3
    assert catalog.prepared  # a search with words built every row's text


@pytest.mark.parametrize(("host", "loopback"), [
    ("127.0.0.1", True), ("127.8.9.1", True), ("::1", True), ("[::1]", True), ("localhost", True),
    ("app.localhost", True), ("0.0.0.0", False), ("10.0.0.1", False), ("example.com", False),
    ("localhost.example.com", False)])
def test_loopback_addresses(host, loopback):
    assert auth.is_loopback(host) is loopback


def test_access_rules():
    with pytest.raises(SettingsError, match=r"not a loopback address: .* set ui_token_file"):
        auth.Access("0.0.0.0:9480", None)
    with pytest.raises(SettingsError, match="shorter than 16 characters"):
        auth.Access("0.0.0.0:9480", Secret("short-token"))
    token = Secret("a-token-of-24-characters")
    open_view = auth.Access("127.0.0.1:0", None)
    assert not open_view.token_required and open_view.authorized({}, None)
    assert open_view.allowed_host({"Host": "127.0.0.1:9480"}) and open_view.allowed_host({"Host": "[::1]:1"})
    assert not open_view.allowed_host({"Host": "rebound.example.com:9480"})
    gated = auth.Access("0.0.0.0:9480", token)
    assert gated.token_required and gated.allowed_host({"Host": "gw.example.com"})
    assert gated.authorized({"Authorization": "Bearer a-token-of-24-characters"}, token)
    assert not gated.authorized({"Authorization": "Bearer a-token-of-24-characterz"}, token)
    assert not gated.authorized({"Authorization": "Bearer é"}, token)  # not ASCII: refused, no TypeError
    cookie = gated.sessions.start(token, 60)
    assert "a-token" not in cookie and gated.authorized({"Cookie": f"x=1; gitsync_ui={cookie}"}, token)
    assert not gated.authorized({"Cookie": f"gitsync_ui={cookie}"}, Secret("another-token-of-24-chars"))
    assert not gated.authorized({"Cookie": f"gitsync_ui={cookie}x"}, token)
    made_elsewhere = auth.Access("0.0.0.0:9480", token).sessions.start(token, 60)
    assert not gated.authorized({"Cookie": f"gitsync_ui={made_elsewhere}"}, token)  # only its own sessions
    assert auth.Access("[::1]:9480", token).token_required  # a token set is always asked for


def test_sessions_are_random_end_at_their_time_at_logout_and_with_their_token():
    now = [1000.0]
    sessions = auth.Sessions(limit=3, clock=lambda: now[0])
    token, other = Secret("a-token-of-24-characters"), Secret("another-token-of-24-chars")
    first, second = sessions.start(token, 60), sessions.start(token, 600)
    assert first != second and len(first) >= 43 and token.reveal() not in first
    assert sessions.valid(first, token) and sessions.valid(second, token)
    assert not sessions.valid(first, other)  # a new token (SIGHUP) ends the old token's sessions
    now[0] += 60
    assert not sessions.valid(first, token) and sessions.valid(second, token)  # ended at its time
    sessions.end(second)
    assert not sessions.valid(second, token)  # logged out: the same id is refused
    assert len(sessions) == 0
    many = [sessions.start(token, 60) for _ in range(5)]
    assert [sessions.valid(s, token) for s in many] == [False, False, True, True, True]  # the oldest end


def test_the_session_cookie_flags():
    assert auth.set_cookie("abc", 43200, secure=False) == (
        "gitsync_ui=abc; Path=/; Max-Age=43200; HttpOnly; SameSite=Strict")
    assert auth.set_cookie("abc", 60.5, secure=True).endswith("; HttpOnly; SameSite=Strict; Secure")
    assert "Max-Age=0" in auth.clear_cookie() and auth.clear_cookie(True).endswith("; Secure")


@pytest.mark.parametrize(("header", "length"), [
    ("12", 12), (" 4096 ", 4096), ("0", 0), ("²", None), ("١٢", None), ("9" * 5000, None), ("-1", None),
    ("1e3", None), ("", None), (None, None), ("1234567890", None)])
def test_a_login_forms_length_is_ascii_digits_only(header, length):
    assert auth.form_length(header) == length


@pytest.mark.parametrize(("target", "safe"), [
    ("/items?q=a", "/items?q=a"), ("//evil.example/", "/"), ("https://evil.example/", "/"),
    ("/\\evil.example", "/"), ("items", "/"), ("/x\r\nSet-Cookie: a=b", "/")])
def test_login_goes_back_only_to_this_site(target, safe):
    assert auth.local_path(target) == safe


def test_wrong_tokens_are_counted_per_address_and_token_in_a_sliding_window():
    now = [1000.0]
    failures = auth.Failures(limit=3, window=60.0, clock=lambda: now[0])
    for _ in range(3):
        assert failures.retry_after("10.0.0.1", "stale-token") == 0.0
        failures.add("10.0.0.1", "stale-token")
        now[0] += 10
    assert failures.retry_after("10.0.0.1", "stale-token") == 30.0  # the first leaves the window at 1060
    assert failures.retry_after("10.0.0.2", "stale-token") == 0.0  # another address is not locked out
    assert failures.retry_after("10.0.0.1", "the-right-token") == 0.0  # nor another token from it
    assert failures.retry_after("10.0.0.1", None) == 0.0  # nor its unreadable login forms
    assert b"stale-token" not in repr(failures._seen).encode()  # kept as a keyed digest
    now[0] = 1060.0
    assert failures.retry_after("10.0.0.1", "stale-token") == 0.0


def test_forge_links():
    plain = Links("https://git.example/o/r/commit/{sha}")
    assert plain.commit("abc") == "https://git.example/o/r/commit/abc"
    assert plain.file("abc", "conf/a b.yaml", 3) == "https://git.example/o/r/commit/abc"
    deep = Links("https://git.example/o/r/blob/{sha}/{path}#L{line}")
    assert deep.commit("abc") == "https://git.example/o/r/blob/abc/"
    assert deep.file("abc", 'conf/"><x.yaml', 3) == "https://git.example/o/r/blob/abc/conf/%22%3E%3Cx.yaml#L3"
    assert Links(None).commit("abc") is None and Links(None).file("abc", "f", 1) is None


def test_a_problems_file_line_is_linked_and_a_gateway_url_is_not():
    links = Links("https://g/{sha}/{path}#L{line}")
    linked = problem("conf/a.yaml:7:5: routes[r1].uri: <bad>", "abc", links)
    assert linked == ('<a href="https://g/abc/conf/a.yaml#L7"><code>conf/a.yaml:7:5</code></a>'
                      ": routes[r1].uri: &lt;bad&gt;")
    assert problem("http://127.0.0.1:9180: no answer", "abc", links) == "http://127.0.0.1:9180: no answer"


def test_a_sync_like_the_one_before_is_counted_on_it():
    history: deque = deque(maxlen=50)

    def record(result, t, gateways=()):
        return SyncRecord(t, result, "poll", "c", duration=0.1, gateways=tuple(gateways), first_time=t)

    for t in range(5):
        remember(history, record("noop", t))
    remember(history, record("applied", 5, [GatewayOutcome("u", "applied")]))
    remember(history, record("noop", 6))
    assert [(r.result, r.count, r.first_time, r.time) for r in history] == [
        ("noop", 5, 0, 4), ("applied", 1, 5, 5), ("noop", 1, 6, 6)]


def test_the_view_is_off_unless_asked_for():
    server = StatusServer("127.0.0.1:0", Metrics(), lambda: Readiness(True, "ok"), lambda reason: None,
                          None).start()
    try:
        for path in ("/", "/items", "/fleet", "/static/style.css"):
            assert httpx.get(f"http://127.0.0.1:{server.port}{path}", timeout=5).status_code == 404
    finally:
        server.stop()


@pytest.mark.slow
def test_the_web_view_benchmark_runs_and_writes_its_json(tmp_path):
    """`python -m bench.webview` end to end at 100 routes: every page measured (timings not checked)."""
    report, printed = run_bench("bench.webview", "webview-latest.json", tmp_path, "--routes", "100",
                                "--reps", "2")
    assert report["routes"] == 100 and report["table"] in printed
    assert set(report["results"]) == {"overview", "items, page 1", "items, middle page", "items, last page",
                                      "items, search", "item page", "item page, another route each",
                                      "healthz (floor)"}
    assert all(r["cold_s"] > 0 and len(r["samples"]) == 2 for r in report["results"].values())


def test_an_item_generated_from_a_spec_is_shown_reformatted_without_reading_the_spec_whole(monkeypatch):
    spec = (b"openapi: 3.0.0\ninfo: {title: T}\nservers: [{url: 'http://b.example.com'}]\npaths:\n"
            b"  /a/{id}:\n    get: {operationId: getA}\n")
    files = {"openapi.yaml": b"openapi:\n  - {name: t, spec: s.yaml}\n", "s.yaml": spec}
    rendered = render(files)
    catalog = Catalog("0" * 40, rendered, files)
    reads = whole_file_reads(monkeypatch, spec)
    ident = rendered.payload["routes"][0]["id"]
    detail = catalog.detail("routes", ident)
    assert detail is not None and detail.written == () and "getA" in (detail.reformatted or "")
    assert (detail.row.file, detail.row.line) == ("s.yaml", 6)
    assert reads == []


def test_secret_fields_of_every_source_mask_the_composed_list_and_its_search():
    """Issue 41, attack 4: a source's `secret_fields` hold in the composed payload; the search index
    never holds such a value (a viewer could recover it one character at a time)."""
    from gitsync.ownership import Claim, Ownership
    from gitsync.render import RenderOptions, mask_secrets
    from gitsync.render.compose import Part, compose, compose_files, shared_kinds

    orders = {"r.yaml": b"secret_fields: [routes.desc, upstreams.name]\n"
                        b"routes:\n  - id: o-1\n    uri: /o\n    desc: orders-private-words\n"
                        b"    upstream_id: o-up\n"
                        b"upstreams:\n  - id: o-up\n    name: hidden-upstream-name\n"
                        b"    nodes: {\"127.0.0.1:1980\": 1}\n"}
    payments = {"r.yaml": b"routes:\n  - id: p-1\n    uri: /p\n    desc: payments-words\n"
                          b"    upstream_id: p-up\n"
                          b"upstreams:\n  - id: p-up\n    nodes: {\"127.0.0.1:1980\": 1}\n"}
    parts = []
    for name, files in (("orders", orders), ("payments", payments)):
        owns = Ownership((Claim(("routes", "upstreams"), f"{name[0]}-"),))
        parts.append(Part(name, "0" * 40, render(files, RenderOptions(unmanaged=shared_kinds(owns))), owns))
    composed = compose(parts)
    catalog = Catalog("0" * 40, composed, compose_files([("orders", orders), ("payments", payments)]))
    # the rules of every source hold for the composed payload (a field one source calls secret is masked
    # in the others' items too: more masked, never less)
    for word in ("orders-private", "private", "hidden-upstream", "payments-words"):
        assert len(catalog.search(word)) == 0, word
    assert [r.id for r in catalog.search("/p")] == ["p-1"]
    assert all("private" not in row.haystack and "hidden" not in row.haystack for row in catalog.search())
    assert catalog.row("routes", "o-1").title == "***"
    shown = mask_secrets(composed.payload, composed.secret_values, composed.secret_rules)
    assert "orders-private-words" not in str(shown) and "hidden-upstream-name" not in str(shown)
