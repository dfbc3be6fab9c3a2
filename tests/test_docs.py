"""The documentation site: it builds with warnings as errors (``mkdocs build --strict``, as
``make docs`` does), every link inside it leads to a file and an anchor the site has, the
command-line reference holds every command, and in headless Chromium, served over HTTP, the
home page and an API page render their content without console errors."""

import functools
import http.server
import os
import subprocess
import sys
import threading
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from tests.browser import chromium, page_errors

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    for module in ("mkdocs", "material", "mkdocstrings_handlers.python", "mkdocs_gen_files"):
        pytest.importorskip(
            module,
            reason="the docs tools are not installed "
            "(pip install -e '.[docs]'; `make install` does it)",
        )
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "DISABLE_MKDOCS_2_WARNING": "true", "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return out


class _Page(HTMLParser):
    """The ids a page defines and the links (``href``, ``src``) it holds."""

    def __init__(self):
        super().__init__()
        self.ids: set[str] = set()
        self.links: list[str] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if attrs.get("id"):
            self.ids.add(attrs["id"])
        if tag == "a" and attrs.get("name"):
            self.ids.add(attrs["name"])
        for name in ("href", "src"):
            if attrs.get(name):
                self.links.append(attrs[name])


@functools.cache
def _parse(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text(encoding="utf-8"))
    return page


def test_every_internal_link_resolves(site):
    pages = sorted(site.rglob("*.html"))
    assert len(pages) >= 15
    broken = []
    for page in pages:
        for link in _parse(page).links:
            parts = urlsplit(link)
            if parts.scheme or parts.netloc:  # another site (or data:, mailto:)
                continue
            base = site if parts.path.startswith("/") else page.parent  # 404.html: from the root
            target = (base / unquote(parts.path).lstrip("/")).resolve() if parts.path else page
            if target.is_dir():
                target = target / "index.html"
            name = f"{page.relative_to(site)}: {link}"
            if not target.is_relative_to(site.resolve()) or not target.is_file():
                broken.append(f"{name} (no file)")
            elif (
                parts.fragment
                and target.suffix == ".html"
                and unquote(parts.fragment) not in _parse(target).ids
            ):
                broken.append(f"{name} (no anchor)")
    assert broken == []


def test_the_cli_reference_holds_every_command(site):
    from attnkit.cli.main import build_parser

    ids = _parse(site / "reference" / "cli.html").ids
    parser = build_parser()
    [commands] = [a for a in parser._actions if a.dest == "command"]
    [tasks] = [a for a in commands.choices["train"]._actions if a.dest == "task"]
    want = {f"attnkit-{c}" for c in commands.choices} | {
        f"attnkit-train-{t}" for t in tasks.choices
    }
    assert want <= ids
    assert len(want) >= 18


@pytest.fixture(scope="module")
def served(site):
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(site))
    handler.log_message = lambda *args: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def browser():
    driver = chromium()
    yield driver
    driver.quit()


def test_the_home_page_renders(browser, served):
    browser.get(f"{served}/index.html")
    assert browser.find_element("css selector", "article h1").text == "Getting started"
    nav = browser.find_element("css selector", "nav.md-nav--primary").get_attribute("textContent")
    for entry in ("Command line", "attnkit.attention", "Performance", "Architecture"):
        assert entry in nav
    assert browser.find_elements("css selector", "article pre code")  # the commands
    assert page_errors(browser) == []


def test_an_api_page_renders_the_docstrings(browser, served):
    browser.get(f"{served}/reference/api/attention.html")
    heading = browser.find_element("id", "attnkit.attention.Attention")
    assert heading.tag_name.startswith("h") and "Attention" in heading.text
    body = browser.find_element("css selector", "article").text
    assert "True where a query may attend" in body or "may attend" in body
    assert browser.find_element("id", "attnkit.attention.SelfAttention")
    assert page_errors(browser) == []
