"""The docs site works offline: every script, stylesheet and font it loads is served with it.

The site is built here as ``make test`` builds it (``mkdocs build --strict``), into a temporary
folder, and every page's ``<script src>`` and ``<link href>`` and every stylesheet's ``url()`` and
``@import`` is read: none may point at another host (a CDN, a font service). Links a reader
follows (``<a href>``) may. Code blocks must still be highlighted, by classes the build wrote
and the site's own stylesheet.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
REMOTE = re.compile(r"^(https?:)?//", re.I)

pytestmark = pytest.mark.skipif(importlib.util.find_spec("mkdocs") is None,
                                reason="mkdocs is not installed (the test extra installs it)")


class _Loads(HTMLParser):
    """What a page makes the browser fetch by itself: scripts, stylesheets, icons, images."""

    def __init__(self) -> None:
        super().__init__()
        self.loads: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag in ("script", "img", "iframe") and found.get("src"):
            self.loads.append(found["src"])
        if tag == "link" and found.get("href") and found.get("rel") != "canonical":
            self.loads.append(found["href"])


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "-d", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return out


def test_the_built_site_loads_nothing_from_another_host(site):
    pages = sorted(site.rglob("*.html"))
    assert len(pages) > 15
    remote = {}
    for page in pages:
        parser = _Loads()
        parser.feed(page.read_text())
        remote.update({url: page.relative_to(site) for url in parser.loads if REMOTE.match(url)})
    for sheet in site.rglob("*.css"):
        text = sheet.read_text(errors="replace")
        urls = re.findall(r"url\(\s*['\"]?([^'\")]+)", text) + re.findall(r"@import\s+['\"]([^'\"]+)", text)
        remote.update({url: sheet.relative_to(site) for url in urls if REMOTE.match(url)})
    assert not remote, f"the docs site loads these from another host (lost offline): {remote}"


def test_code_blocks_are_highlighted_by_the_sites_own_stylesheet(site):
    page = (site / "other-libraries" / "index.html").read_text()
    assert '<span class="kn">import</span>' in page  # Pygments's keyword class, written at build time
    assert 'href="../css/pygments.css"' in page
    assert ".highlight .kn" in (site / "css" / "pygments.css").read_text()
