"""The docs site builds offline with no warning (mkdocs --strict), and works in a browser.

The built site is served on 127.0.0.1 and opened in headless Chromium (Debian's ``chromium``,
which scripts/install-system-deps.sh installs), driven by the suite's browser driver
(tests/helpers/browser.py): the navigation lists every section, the search index loads and a query
finds pages, and the generated reference pages render. Screenshots of the home page and a
reference page are kept in ``$HERMES_ENVGEN_ARTIFACTS`` when it is set.
"""

from __future__ import annotations

import functools
import http.server
import os
import re
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.browser import Browser, chromium_path
from helpers.markdown_blocks import REPO

BUILD_TIMEOUT = 300
pytestmark = pytest.mark.slow


def mkdocs(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            str(REPO / ".venv" / "bin" / "mkdocs"),
            "build",
            "--strict",
            "-f",
            str(config),
            "-d",
            str(site),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT,
        env=os.environ | {"NO_MKDOCS_2_WARNING": "1", "HTTPS_PROXY": "http://127.0.0.1:9"},
        stdin=subprocess.DEVNULL,
    )


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    site = tmp_path_factory.mktemp("site")
    built = mkdocs(REPO / "mkdocs.yml", site)
    assert built.returncode == 0, built.stderr[-5000:]
    assert "WARNING" not in built.stderr, built.stderr[-5000:]
    return site


def test_the_site_is_offline(site: Path):
    # No web font, no script or style from elsewhere: the pages work with no network.
    for page in site.rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        assert "fonts.googleapis" not in text, page
        assert not re.search(r'<script[^>]+src="https?://', text), page
        for link in re.findall(r"<link[^>]+>", text):  # a canonical link is an address, not a fetch
            assert 'rel="canonical"' in link or 'href="http' not in link, (page, link)


def test_every_public_name_has_its_reference_entry(site: Path):
    from hermes_envgen import runtime, testing

    for module, page in ((runtime, "runtime"), (testing, "testing")):
        html = (site / "reference" / page / "index.html").read_text(encoding="utf-8")
        missing = [n for n in module.__all__ if f'id="{module.__name__}.{n}"' not in html]
        assert missing == [], f"reference/{page}.md renders no entry for {missing}"


def test_a_broken_link_fails_the_strict_build(tmp_path: Path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text("# Home\n\nSee [the missing page](missing.md).\n")
    config = tmp_path / "mkdocs.yml"
    config.write_text(
        f"INHERIT: {REPO / 'mkdocs.yml'}\ndocs_dir: {docs}\nhooks: []\nplugins: [search]\n"
        "nav: [index.md]\n"
    )
    built = mkdocs(config, tmp_path / "site")
    assert built.returncode != 0
    assert "missing.md" in built.stderr and "index.md" in built.stderr


@pytest.fixture(scope="module")
def served(site: Path) -> Iterator[str]:
    handler = functools.partial(QuietHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if chromium_path() is None:
        pytest.skip("chromium is not installed (Debian/Ubuntu: apt-get install -y chromium)")
    with Browser() as started:
        yield started


def keep(screenshot: Path) -> None:
    assert screenshot.stat().st_size > 10_000
    artifacts = os.environ.get("HERMES_ENVGEN_ARTIFACTS")
    if artifacts:
        Path(artifacts).mkdir(parents=True, exist_ok=True)
        shutil.copy(screenshot, Path(artifacts) / screenshot.name)


def test_navigation_search_and_reference_render_in_chromium(
    served: str, tmp_path: Path, browser: Browser
):
    # The navigation: every section, and its links lead to pages that exist.
    browser.open(served, height=900)
    sections = browser.js(
        "[...document.querySelectorAll('.md-nav--primary > .md-nav__list > .md-nav__item')]"
        ".map(item => item.querySelector('.md-nav__link').textContent.trim())"
    )
    for section in (
        "Home",
        "Quick start",
        "Tutorial",
        "Concepts",
        "How-to guides",
        "Reference",
    ):
        assert section in sections, sections
    links = browser.js(
        "[...document.querySelectorAll('.md-nav--primary a.md-nav__link')].map(a => a.href)"
    )
    assert len(links) >= 25, links
    keep(browser.screenshot(tmp_path / "docs-home.png"))

    # Search: the index loads in its worker, and a query finds the sandbox pages.
    found = browser.until(
        """(() => {
            const input = document.querySelector('[data-md-component=search-query]');
            if (input.value !== 'bubblewrap') {
                input.value = 'bubblewrap';
                input.dispatchEvent(new Event('input', {bubbles: true}));
                input.dispatchEvent(new KeyboardEvent('keyup', {bubbles: true}));
            }
            const hits = [...document.querySelectorAll('.md-search-result__item a')];
            return hits.length && hits.map(a => a.href);
        })()"""
    )
    assert any("concepts/sandboxes/" in url for url in found), found

    # A reference page generated from docstrings, and one from the settings' fields.
    browser.open(served + "reference/runtime/", height=900)
    headings = browser.until(
        "[...document.querySelectorAll('.doc-heading')].map(h => h.textContent)"
    )
    assert any("HermesAgentBaseEnv" in h for h in headings)
    assert any("ToolContext" in h for h in headings)
    keep(browser.screenshot(tmp_path / "docs-reference-runtime.png"))
    browser.open(served + "reference/settings/", height=900)
    cells = browser.js(
        "[...document.querySelectorAll('td:first-child code')].map(c => c.textContent)"
    )
    assert "--env.sandbox_backend" in cells and "--openai.base_url" in cells
