"""The web view in a real browser (testkit/browser.py: Debian's Chromium through chromedriver), against
`gitsync run` as a real process with two APISIX doubles and a config repo served by git daemon.

One browser, one repo and one agent for the whole module; the tests run in order and build on each
other: the live commit on both gateways, the items, one item as written and pushed, markup from git
rendered inert, the fleet of three agents, a refused commit, accessibility, then a hunt for every
secret in every page the browser saw, and the token on an address that is not loopback. Every page
load fails the test on a console error (a CSP violation is one) and leaves a screenshot in the
module's temporary directory.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

from gitsync.testing.apisix import ApisixDouble
from gitsync.web.auth import MAX_FAILURES
from testkit.agents import ADMIN_KEY, AgentProcess
from testkit.browser import Browser
from testkit.gitservers import BareRepo, GitDaemon
from testkit.processes import run_gitsync, wait_for

# A real browser (chromium + chromedriver) for every test: the fast lane leaves them out.
pytestmark = pytest.mark.slow

ALICE_KEY = "alice-canary-3c9d1e7a"  # comes from the secrets directory
BOB_KEY = "bob-plaintext-canary-7f3a"  # written in the repo itself, in key-auth's secret field
UI_TOKEN = "ui-token-canary-5b2f8e41aa"
COMMIT_URL = "https://git.example/org/config/blob/{sha}/{path}#L{line}"
XSS_DESC = '<script>window.__xss = 1</script>"><img src=x onerror="window.__xss = 2">'
EVIL_FILE = 'conf/"><img src=x onerror=window.__xss=3>.yaml'

BASE = """upstreams:
  - id: u1
    type: roundrobin
    nodes:
      "127.0.0.1:1980": 1
routes:
  - id: r1
    uri: /v1
    upstream_id: u1
    plugins:
      key-auth: {}
consumers:
  - username: alice
    plugins:
      key-auth:
        key: "${{ secrets.ALICE_KEY }}"
  - username: bob
    desc: the second consumer
    plugins:
      key-auth:
        key: BOB_KEY
""".replace("BOB_KEY", BOB_KEY)
MORE_ROUTES = "".join(f"  - id: extra-{n:03d}\n    uri: /extra/{n}\n    upstream_id: u1\n"
                      for n in range(130))
XSS = f"""routes:
  - id: xss
    uri: /xss
    desc: '{XSS_DESC}'
    upstream_id: u1
""" + MORE_ROUTES
EVIL = "routes:\n  - id: evil-file\n    uri: /evil\n    upstream_id: u1\n"


def line_of(text: str, needle: str) -> int:
    return next(n for n, line in enumerate(text.splitlines(), 1) if needle in line)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, remotes_root: Path) -> Iterator[SimpleNamespace]:
    """The repo (two commits), two gateways, the agent with the view on, and the browser."""
    work = tmp_path_factory.mktemp("webview")
    repo = BareRepo.create(remotes_root / "webview.git")
    first = repo.commit({"conf/base.yaml": BASE}, "base config")
    second = repo.commit({"conf/xss.yaml": XSS, EVIL_FILE: EVIL}, "more routes, and markup in git")
    secrets = work / "secrets"
    secrets.mkdir()
    (secrets / "ALICE_KEY").write_text(ALICE_KEY)
    key_file = work / "admin-key"
    key_file.write_text(ADMIN_KEY)
    started: list[AgentProcess] = []
    with GitDaemon(remotes_root, receive_pack=True) as daemon, ApisixDouble(ADMIN_KEY) as gw1, \
            ApisixDouble(ADMIN_KEY) as gw2, ApisixDouble(ADMIN_KEY) as gw3:
        url = daemon.url(repo.path.name)
        common = ["--repo", url, "--admin-key-file", str(key_file), "--secrets-dir", str(secrets),
                  "--writeback", "on", "-v"]
        (work / "a").mkdir()
        agent = AgentProcess(work / "a", [
            *common, "--gateway", gw1.url, "--gateway", gw2.url, "--ui", "--commit-url", COMMIT_URL,
            "--agent-name", "edge-a", "--interval", "1s", "--jitter", "0s", "--drift-interval", "1s",
            "--drift", "report"])  # an item changed by hand stays changed: its page shows the difference
        started.append(agent.start())
        wait_for(lambda: agent.get("/readyz").status_code == 200 and second[:7] in agent.get("/readyz").text,
                 30, f"edge-a to apply {second[:7]} ({agent.log()[-2000:]})")
        browser = Browser(tmp_path_factory.mktemp("webview-screens"))
        try:
            yield SimpleNamespace(repo=repo, first=first, second=second, agent=agent, gw1=gw1, gw2=gw2,
                                  gw3=gw3, url=url, common=common, browser=browser, work=work, seen=[],
                                  base=f"http://127.0.0.1:{agent.port}", started=started)
        finally:
            browser.close()
            for one in started:
                one.kill()
            print(f"screenshots in {browser.screenshots}")


def visit(world: SimpleNamespace, path: str, shot: str | None = None, base: str | None = None) -> str:
    html = world.browser.visit((base or world.base) + path, shot)
    world.seen.append((path, html))
    return html


def test_overview_shows_the_commit_live_on_both_gateways(world):
    visit(world, "/", "overview")
    b = world.browser
    assert b.text("h1") == "Overview"
    rows = b.driver.find_elements(By.CSS_SELECTOR, "#gateways + table tbody tr")
    assert [r.find_element(By.CSS_SELECTOR, "td").text for r in rows] == [world.gw1.url, world.gw2.url]
    for row in rows:
        assert world.second[:7] in row.text and "in sync" in row.text and "match" in row.text
    tip = b.text("#tip + p")
    assert "applied" in tip and world.second[:7] in tip
    link = b.driver.find_element(By.CSS_SELECTOR, "#last-good + p a")
    assert link.get_attribute("href") == f"https://git.example/org/config/blob/{world.second}/"
    assert "Live on 2 of 2 gateway(s)" in b.text("main")
    history = b.text("#history + table")
    assert "applied" in history and "start" in history


def test_items_are_listed_searched_and_paged(world):
    visit(world, "/items", "items")
    b = world.browser
    total = 1 + 1 + 2 + 1 + 130 + 1  # u1, r1, alice and bob, xss, the extra routes, evil-file
    assert f"{total:,} in all" in b.text("main")
    assert b.text("#count").startswith(f"Items 1–100 of {total}")
    assert b.driver.find_element(By.LINK_TEXT, "Next →").get_attribute("href").endswith("page=2")
    visit(world, "/items?page=2")
    assert b.text("#count") == f"Items 101–{total} of {total}"
    visit(world, "/items?q=key-auth")  # a plugin name: r1, alice, bob
    assert sorted(b.ids()) == ["alice", "bob", "r1"]
    visit(world, "/items?q=%2Fextra%2F12&kind=routes")  # a uri
    assert b.text("#count").startswith("Items 1–11 of 11")
    visit(world, "/items")  # the script's filter narrows the rows already on the page
    box = b.driver.find_element(By.ID, "page-filter-0")
    box.send_keys("extra-007")
    assert b.ids() == ["extra-007"]
    b.assert_quiet("the page filter")


def test_an_item_page_shows_its_file_line_masked_secrets_and_live_twins(world):
    visit(world, "/items/consumers/alice", "item-alice")
    b = world.browser
    line = line_of(BASE, "username: alice")
    source = b.driver.find_element(By.XPATH, "//dt[.='Source']/following-sibling::dd[1]//a")
    assert source.text == f"conf/base.yaml:{line}"
    assert source.get_attribute("href") == f"https://git.example/org/config/blob/{world.second}/conf/base.yaml#L{line}"
    written = b.text("#written + pre")
    assert written.splitlines()[0] == f"{line}  - username: alice"
    assert 'key: "${{ secrets.ALICE_KEY }}"' in written  # where the value comes from, not the value
    pushed = b.text("#pushed + pre")
    assert '"key": "***"' in pushed
    twins = b.driver.find_elements(By.CSS_SELECTOR, "#twins + table tbody tr")
    assert len(twins) == 2 and all("equal" in t.text for t in twins)
    visit(world, "/items/consumers/bob", "item-bob")
    assert 'key: "***"' in b.text("#written + pre")
    world.gw2.out_of_band("routes", [{"id": "r1", "uri": "/changed-by-hand", "upstream_id": "u1"}])
    visit(world, "/items/routes/r1")  # the view's GET of the gateways is fresh after 5 s at most
    twins = wait_for(lambda: (visit(world, "/items/routes/r1") and "differs" in b.text("#twins + table")
                              and b.text("#twins + table")), 15, "the twin on gw2 to differ")
    assert "in: plugins, uri" in twins or "in: uri, plugins" in twins


def test_markup_from_git_renders_inert(world):
    b = world.browser
    for path in ("/items?q=xss", "/items/routes/xss", "/items/routes/evil-file", "/items?q=evil"):
        visit(world, path, "xss" if path == "/items/routes/xss" else None)
        assert b.js("return window.__xss === undefined"), path
        assert b.js("return document.querySelectorAll('main img, main script').length") == 0, path
    visit(world, "/items/routes/xss")
    assert XSS_DESC in b.text("#written + pre")
    visit(world, "/items?q=evil")
    assert f"{EVIL_FILE}:2" in b.text("#items-table")


def test_the_fleet_lists_three_agents_and_marks_the_one_behind(world):
    for name, ref in (("edge-b", world.first), ("edge-c", "main")):
        done = run_gitsync("sync", "--once", *world.common, "--gateway", world.gw3.url, "--agent-name", name,
                           "--ref", ref, "--state-dir", str(world.work / name))
        assert done.returncode == 0, done.stderr[-2000:]
    from gitsync.source.transport import Remote
    from gitsync.writeback.fleet import read_fleet

    def written() -> bool:
        return len(read_fleet(Remote.of(world.url), "gitsync/status", world.work / "fleet-check")) == 3

    wait_for(written, 20, "three status files")
    visit(world, "/fleet", "fleet")
    b = world.browser
    rows = {r.find_element(By.CSS_SELECTOR, "td").text: r.text
            for r in b.driver.find_elements(By.CSS_SELECTOR, "main table tbody tr")}
    assert sorted(name.split()[0] for name in rows) == ["edge-a", "edge-b", "edge-c"]
    behind = [name for name in rows if "behind" in name]
    assert behind == ["edge-b behind"], rows
    assert "1 behind the tip" in b.text("main")


def test_a_refused_commit_shows_its_stage_and_file_line(world):
    broken = BASE.replace("uri: /v1", "uri: 42")
    bad = world.repo.commit({"conf/base.yaml": broken}, "r1: a number as uri")
    wait_for(lambda: bad[:7] in world.agent.get("/readyz").text, 30, "the refusal")
    visit(world, "/", "overview-refused")
    b = world.browser
    tip = b.text("section[aria-labelledby=tip]")
    line = line_of(broken, "uri: 42")
    assert "refused" in tip and "stage validate" in tip and world.second[:7] in tip
    assert f"conf/base.yaml:{line}:5: routes[r1].uri:" in tip
    link = b.driver.find_element(By.CSS_SELECTOR, "#tip ~ ul.problems a")
    assert link.get_attribute("href") == f"https://git.example/org/config/blob/{bad}/conf/base.yaml#L{line}"
    assert f"conf/base.yaml:{line}:5" in b.text("#history + table")
    # the gateways keep the last good commit, and the items are still those of it
    visit(world, "/items/routes/r1")
    assert "uri: /v1" in b.text("#written + pre")


def test_every_page_passes_axe_and_works_from_the_keyboard(world):
    b = world.browser
    for path in ("/", "/items", "/items/consumers/alice", "/fleet", "/login"):
        visit(world, path)
        violations = b.axe()
        assert not violations, (path, [(v["id"], v["impact"], [n["target"] for n in v["nodes"][:3]])
                                       for v in violations])
    visit(world, "/items")
    body = b.driver.find_element(By.TAG_NAME, "body")
    body.send_keys(Keys.TAB)
    assert b.js("return document.activeElement.textContent") == "Skip to content"
    b.driver.switch_to.active_element.send_keys(Keys.ENTER)
    assert b.js("return document.activeElement.id") == "main"
    for _ in range(3):  # from the content skipped to, the search box is a few tabs away
        b.driver.switch_to.active_element.send_keys(Keys.TAB)
        assert b.js("return document.getElementById('main').contains(document.activeElement)")
        if b.js("return document.activeElement.id") == "q":
            break
    assert b.js("return document.activeElement.id") == "q"
    b.driver.switch_to.active_element.send_keys("alice", Keys.ENTER)
    wait_for(lambda: "q=alice" in b.driver.current_url and b.shown("#count"), 5, "the search to submit")
    assert b.ids() == ["alice"]


def crawl(world: SimpleNamespace, start: str = "/", limit: int = 60) -> None:
    """Visits every page of the view reachable from `start` by its own links (same origin, GET)."""
    queue, done = [start], set()
    while queue and len(done) < limit:
        path = queue.pop(0)
        if path in done:
            continue
        done.add(path)
        visit(world, path)
        for href in world.browser.js("return [...document.querySelectorAll('a[href]')].map(a => a.href)"):
            if href.startswith(world.base + "/"):
                queue.append(href[len(world.base):].split("#")[0])


def test_no_page_holds_a_secret(world):
    # Its own crawl: under pytest-xdist the tests before it may have run in another process.
    crawl(world)
    assert len(world.seen) >= 15
    for path, html in world.seen:
        for canary in (ALICE_KEY, BOB_KEY, ADMIN_KEY, UI_TOKEN):
            assert canary not in html, (path, canary)
    assert ALICE_KEY not in world.agent.log() and BOB_KEY not in world.agent.log()


def test_off_loopback_the_token_is_required(world, tmp_path):
    token_file = tmp_path / "ui-token"
    token_file.write_text(UI_TOKEN + "\n")
    gated = AgentProcess(tmp_path, [*world.common, "--gateway", world.gw1.url, "--ui", "--ui-token-file",
                                    str(token_file), "--agent-name", "edge-t", "--interval", "30s"])
    gated.args += ["--listen", f"0.0.0.0:{gated.port}"]
    world.started.append(gated.start())
    base = f"http://127.0.0.1:{gated.port}"
    assert httpx.get(base + "/", timeout=5).status_code == 401
    to_login = httpx.get(base + "/items?q=r1", headers={"Accept": "text/html"}, timeout=5)
    assert to_login.status_code == 303 and to_login.headers["Location"] == "/login?next=%2Fitems%3Fq%3Dr1"
    assert httpx.get(base + "/items", headers={"Authorization": "Bearer wrong-token-of-some-length"},
                     timeout=5).status_code == 401
    bearer = {"Authorization": f"Bearer {UI_TOKEN}"}
    assert httpx.get(base + "/fleet", headers=bearer, timeout=5).status_code == 200
    # Every answer of the view carries the security headers: pages, refusals and static files alike.
    for path, status in (("/", 200), ("/items?q=r1", 200), ("/static/filter.js", 200),
                         ("/items/routes/no-such-route", 404)):
        answer = httpx.get(base + path, headers=bearer, timeout=5)
        assert answer.status_code == status, path
        csp = answer.headers.get("Content-Security-Policy", "")
        assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp and "unsafe-inline" not in csp
        assert answer.headers.get("X-Content-Type-Options") == "nosniff", path
    refused = httpx.get(base + "/", timeout=5)  # no token: 401, with the same headers
    assert refused.status_code == 401
    assert "frame-ancestors 'none'" in refused.headers["Content-Security-Policy"]
    assert httpx.get(base + "/metrics", timeout=5).status_code == 200  # the rest of the listener is as before
    b = world.browser
    visit(world, "/items?q=r1", "login", base=base)
    assert b.text("h1") == "Log in"
    b.driver.find_element(By.ID, "token").send_keys("not-the-token-at-all", Keys.ENTER)
    wait_for(lambda: "not right" in b.shown("main"), 5, "the refusal")
    b.assert_quiet("a refused login")
    b.driver.find_element(By.ID, "token").send_keys(UI_TOKEN, Keys.ENTER)
    wait_for(lambda: "/items?q=r1" in b.driver.current_url and b.shown("h1") == "Items", 5, "the items page")
    b.assert_quiet("the login")
    world.seen.append(("/items?q=r1 (token)", b.driver.page_source))
    cookie = b.driver.get_cookie("gitsync_ui")
    assert cookie["httpOnly"] is True and cookie["sameSite"] == "Strict" and UI_TOKEN not in cookie["value"]
    visit(world, "/", base=base)
    assert b.text("h1") == "Overview"
    b.driver.find_element(By.CSS_SELECTOR, "form.logout button").click()
    wait_for(lambda: b.shown("h1") == "Log in", 5, "the login page after logging out")
    assert b.driver.get_cookie("gitsync_ui") is None
    # A stale token: after MAX_FAILURES tries from one address it is not even compared; the right one
    # from the same address (a colleague behind the same proxy) still opens the view. It was sent once
    # above (the Bearer refused on /items), so MAX_FAILURES - 1 more are compared.
    wrong = {"Authorization": "Bearer wrong-token-of-some-length"}
    answers = [httpx.get(base + "/fleet", headers=wrong, timeout=5).status_code
               for _ in range(MAX_FAILURES)]
    assert answers == [401] * (MAX_FAILURES - 1) + [429]
    blocked = httpx.get(base + "/fleet", headers=wrong, timeout=5)
    assert blocked.status_code == 429 and 0 < int(blocked.headers["Retry-After"]) <= 61
    assert httpx.get(base + "/fleet", headers=bearer, timeout=5).status_code == 200
    assert httpx.get(base + "/healthz", timeout=5).status_code == 200  # the listener is not affected
    assert UI_TOKEN not in gated.log()
    assert not re.search(r"wrong-token|not-the-token", gated.log())


def test_the_view_is_refused_off_loopback_without_a_token(world, tmp_path):
    done = run_gitsync("run", *world.common, "--gateway", world.gw1.url, "--ui", "--listen", "0.0.0.0:1",
                       "--state-dir", str(tmp_path / "state"), timeout=60)
    assert done.returncode == 2
    assert "ui = true with listen = 0.0.0.0:1, which is not a loopback address" in done.stderr
    assert "ui_token_file" in done.stderr
