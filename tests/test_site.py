"""Tests for `make site`: the course website builds without warnings, its links hold, a browser shows it."""

import contextlib
import functools
import html.parser
import http.server
import importlib.util
import json
import os
import re
import subprocess
import threading
from pathlib import Path
from urllib.parse import unquote, urljoin, urlsplit

import pytest

import browser

ROOT = Path(__file__).resolve().parent.parent
LESSON, TWIN = "notebooks/01_quickstart", "notebooks/01_quickstart_R"
SERVER_LIFETIME_S = 600  # the longest the test server stays up, whatever happens to the test


class _Links(html.parser.HTMLParser):
    """The links (href, src) and the anchors (id, name) of one HTML page."""

    def __init__(self):
        super().__init__()
        self.links, self.anchors = [], set()

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        self.links += [attributes[key] for key in ("href", "src") if attributes.get(key)]
        self.anchors |= {attributes[key] for key in ("id", "name") if attributes.get(key)}


@functools.cache
def _page(path):
    parser = _Links()
    parser.feed(path.read_text(encoding="utf-8"))
    return parser


def broken_links(site):
    """Every link inside ``site`` (a built HTML folder) to a file that is missing or an anchor it lacks."""
    broken = []
    # _static holds the theme's assets, among them template fragments (.html) that are no pages.
    pages = [path for path in site.rglob("*.html") if "_static" not in path.relative_to(site).parts]
    for page in sorted(pages):
        page_url = page.relative_to(site).as_posix()
        for link in _page(page).links:
            target = urlsplit(urljoin(page_url, link))
            if target.scheme or target.netloc:  # another site (a CDN, GitHub), data:, mailto:
                continue
            path = site / unquote(target.path) if target.path else page
            if path.is_dir():
                path = path / "index.html"
            if not path.is_file():
                broken.append(f"{page_url}: {link} (no such file)")
            elif (target.fragment and path.suffix == ".html"
                  and unquote(target.fragment) not in _page(path).anchors):
                broken.append(f"{page_url}: {link} (no such anchor)")
    return broken


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The website built by scripts/site.sh (what `make site` runs) into a temporary folder."""
    if importlib.util.find_spec("myst_nb") is None or not (ROOT / ".venv" / "bin" / "python").exists():
        reason = "the docs extra is not in .venv (bash scripts/setup.sh test installs it)"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run(["bash", "scripts/site.sh", str(out)], cwd=ROOT, capture_output=True, text=True,
                          timeout=600, check=False)
    assert done.returncode == 0, f"the site did not build:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return out


@contextlib.contextmanager
def serve(folder):
    """Serve ``folder`` on a free loopback port for at most SERVER_LIFETIME_S; yield its base URL."""
    handler = functools.partial(_QuietHandler, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)  # port 0: a free one
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    guard = threading.Timer(SERVER_LIFETIME_S, server.shutdown)
    guard.daemon = True
    thread.start()
    guard.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        guard.cancel()
        server.shutdown()
        server.server_close()
        thread.join(timeout=30)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):
        pass


def _title(docname):
    """The first heading of a lesson notebook, as the site shows it."""
    cells = json.loads((ROOT / f"{docname}.ipynb").read_text())["cells"]
    return "".join(cells[0]["source"]).splitlines()[0].lstrip("# ")


def test_the_site_has_every_page_and_no_broken_link(site):
    lessons = {path.stem for path in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")}
    assert {path.stem for path in (site / "notebooks").glob("*.html")} == lessons
    references = {path.stem for path in (ROOT / "docs" / "reference").glob("*.md")}
    assert {path.stem for path in (site / "docs" / "reference").glob("*.html")} == references
    assert (site / "index.html").is_file() and (site / "search.html").is_file()
    assert broken_links(site) == []


def test_the_link_check_finds_a_broken_link(tmp_path):
    (tmp_path / "a.html").write_text('<p id="here"><a href="b.html">b</a> <a href="#here">x</a> '
                                     '<a href="#gone">y</a> <img src="c.png"> <a href="https://example.org/">z</a>')
    (tmp_path / "b.html").write_text('<a href="a.html#here">back</a>')
    assert broken_links(tmp_path) == ["a.html: #gone (no such anchor)", "a.html: c.png (no such file)"]


def test_the_exit_status_page_lists_every_status_the_cli_uses():
    source = (ROOT / "kerasdist" / "cli.py").read_text()
    statuses = {int(status) for status in re.findall(r"^EXIT_\w+ = (\d+)", source, re.MULTILINE)}
    statuses |= {int(status) for status in re.findall(r"(\d+): \"SIG\w+\"", source)}  # stopped by a signal
    page = (ROOT / "docs" / "reference" / "exit-statuses.md").read_text()
    rows = {int(status) for status in re.findall(r"^\| (\d+) \|", page, re.MULTILINE)}
    assert {1, 2, 3, 130, 143} <= statuses <= rows


def test_every_lesson_links_to_its_twin_under_its_title(site):
    twins = sorted((ROOT / "notebooks").glob("0[1-9]_*_R.ipynb"))
    assert len(twins) >= 6
    for twin in twins:
        python = twin.name.removesuffix("_R.ipynb")
        for page, target in ((python, twin.stem), (twin.stem, python)):
            text = (site / "notebooks" / f"{page}.html").read_text(encoding="utf-8")
            line = re.search(r'<div class="twin-link[^"]*">\s*<p>[^<]*<a [^>]*href="([^"]+)"', text)
            assert line and line.group(1) == f"{target}.html", f"{page} has no line that links to {target}"


def test_previous_and_next_links_follow_the_course_in_each_language(site):
    lessons = sorted(path.stem for path in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    for in_r in (False, True):
        track = [name for name in lessons if name.endswith("_R") == in_r]
        for before, after in zip(track, track[1:]):
            forward = (site / "notebooks" / f"{before}.html").read_text(encoding="utf-8")
            back = (site / "notebooks" / f"{after}.html").read_text(encoding="utf-8")
            assert re.search(rf'<a class="right-next"\s+href="{after}.html"', forward), before
            assert re.search(rf'<a class="left-prev"\s+href="{before}.html"', back), after


def test_a_browser_shows_the_landing_page_a_lesson_and_its_twin(site, tmp_path):
    with serve(site) as base:
        with browser.Page() as page:
            # The front door leads to the landing page: the course map and a search box.
            page.open(base)
            page.wait_for(f"location.href === {json.dumps(base + 'docs/index.html')} && "
                          "document.readyState === 'complete'")
            assert "01 Quickstart" in page.evaluate("document.body.innerText")
            assert page.evaluate("document.querySelectorAll('.search-button-field').length") > 0
            images = {"landing page": _image_sizes(page)}
            # The search box's page finds the lessons that teach a word.
            page.open(base + "search.html?q=MirroredStrategy")
            page.wait_for("[...document.querySelectorAll('#search-results li')]"
                          ".some(result => result.innerText.includes('Quickstart: one machine'))")
            # A Python lesson's twin link leads to its R twin, whose twin link leads back.
            for docname, twin in ((LESSON, TWIN), (TWIN, LESSON)):
                page.open(base + docname + ".html")
                assert page.evaluate("document.querySelector('h1').innerText").startswith(_title(docname))
                images[docname] = _image_sizes(page)
                page.evaluate("document.querySelector('.twin-link a').click()")
                page.wait_for(f"location.href === {json.dumps(base + twin + '.html')} && "
                              "document.readyState === 'complete'")
                assert page.evaluate("document.querySelector('h1').innerText").startswith(_title(twin))
        # Screenshots of the landing page and a lesson: rendered pages, not blank ones (a blank PNG is ~5 kB).
        for name, url in (("landing", base), ("lesson", f"{base}{LESSON}.html")):
            browser.screenshot(url, tmp_path / f"{name}.png")
            assert browser.png_size(tmp_path / f"{name}.png") == browser.WINDOW
            assert (tmp_path / f"{name}.png").stat().st_size > 20_000
    # Every image on those pages loaded; a lesson shows its figures and diagrams.
    for name, sizes in images.items():
        assert all(width > 0 for _, width in sizes), f"{name}: images that did not load: {sizes}"
    assert len(images[LESSON]) >= 3 and len(images[TWIN]) >= 3


def _image_sizes(page):
    """(src, naturalWidth) of every image on the page, once each has finished loading (bounded)."""
    page.evaluate("document.querySelectorAll('img').forEach(image => { image.loading = 'eager'; })")
    page.wait_for("[...document.images].every(image => image.complete)")
    return page.evaluate("[...document.images].map(image => [image.src, image.naturalWidth])")


def test_the_benchmarks_page_holds_lesson_09s_own_printout():
    page = (ROOT / "docs" / "reference" / "benchmarks.md").read_text()
    section = page.split("## What synchronization costs (lesson 09)")[1].split("\n## ")[0]
    shown = [line for block in re.findall(r"```text\n(.*?)```", section, flags=re.DOTALL)
             for line in block.splitlines()]
    cells = json.loads((ROOT / "notebooks" / "09_sync_cost.ipynb").read_text())["cells"]
    printed = {line for cell in cells if cell["cell_type"] == "code" for output in cell.get("outputs", [])
               if output.get("name") == "stdout" for line in "".join(output["text"]).splitlines()}
    assert len(shown) >= 8 and any("worker processes over loopback" in line for line in shown)
    assert [line for line in shown if line not in printed] == []
