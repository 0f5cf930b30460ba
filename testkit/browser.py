"""A real browser for tests: Debian's Chromium, headless, driven by chromedriver through selenium.

Selenium with Debian's chromium-driver, not Playwright: the driver comes from the same Debian source
package as the browser, so their versions always match, and nothing is downloaded at run time
(Playwright's Python package brings its own driver and expects its own browser builds). One browser
per test module; every page load is checked for console errors (a CSP violation is one).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

from testkit.processes import ROOT

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
AXE = ROOT / "tests" / "a11y" / "node_modules" / "axe-core" / "axe.min.js"
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--window-size=1280,900")


class Browser:
    """Chromium with a fresh profile; `visit` loads a page and fails on any console error."""

    def __init__(self, screenshots: Path) -> None:
        for path in (CHROMIUM, CHROMEDRIVER):
            if not Path(path).exists():
                raise RuntimeError(f"{path} is missing: apt-get install chromium chromium-driver "
                                   "(.ci/run does)")
        self.profile = tempfile.mkdtemp(prefix="gitsync-chromium-")
        self.screenshots = screenshots
        options = webdriver.ChromeOptions()
        options.binary_location = CHROMIUM
        for flag in (*FLAGS, f"--user-data-dir={self.profile}"):
            options.add_argument(flag)
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        self.driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)

    def visit(self, url: str, shot: str | None = None) -> str:
        """Load `url`; assert the console stayed quiet; save a full-page screenshot as `shot`.png."""
        self.driver.get(url)
        self.assert_quiet(url)
        if shot:
            self.screenshot(shot)
        return self.driver.page_source

    def assert_quiet(self, what: str) -> None:
        noisy = [e for e in self.driver.get_log("browser") if e["level"] in ("SEVERE", "WARNING")]
        assert not noisy, f"console messages on {what}: {noisy}"

    def screenshot(self, name: str) -> Path:
        height = self.driver.execute_script("return document.documentElement.scrollHeight")
        self.driver.set_window_size(1280, min(max(int(height), 600), 4000))
        path = self.screenshots / f"{name}.png"
        self.driver.save_screenshot(str(path))
        self.driver.set_window_size(1280, 900)
        return path

    def ids(self, css: str = "#items-table tbody tr") -> list[str]:
        """The second cell of each row shown (the items' ids)."""
        rows = self.driver.find_elements(By.CSS_SELECTOR, css)
        return [r.text.split()[1] for r in rows if r.is_displayed()]

    def shown(self, css: str) -> str:
        """The text of `css`, or "" while it is not there (a page being replaced): for waits."""
        return self.driver.execute_script("const e = document.querySelector(arguments[0]);"
                                          "return e ? e.innerText : '';", css)

    def text(self, css: str = "main") -> str:
        return self.driver.find_element(By.CSS_SELECTOR, css).text

    def js(self, script: str, *args: Any) -> Any:
        return self.driver.execute_script(script, *args)

    def axe(self) -> list[dict[str, Any]]:
        """axe-core's violations of WCAG 2.x A and AA on the page as it is now."""
        if not AXE.exists():
            raise RuntimeError(f"{AXE} is missing: npm ci --prefix tests/a11y (.ci/run does)")
        self.driver.execute_script(AXE.read_text())
        result = self.driver.execute_async_script(
            "const done = arguments[arguments.length - 1];"
            "axe.run(document, {runOnly: {type: 'tag', values: ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa',"
            " 'best-practice']}}).then(r => done(JSON.stringify(r.violations)), e => done('ERROR ' + e));")
        assert not result.startswith("ERROR"), result
        return json.loads(result)

    def close(self) -> None:
        self.driver.quit()
        shutil.rmtree(self.profile, ignore_errors=True)
