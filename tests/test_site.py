"""Tests for `make site`: the course website builds without warnings, its links hold, a browser shows it."""

import contextlib
import functools
import html
import html.parser
import http.server
import importlib.util
import json
import os
import re
import subprocess
import threading
import zipfile
from pathlib import Path
from urllib.parse import unquote, urljoin, urlsplit

import pytest

import browser
from kerasdist.course import lesson_needs
from kerasdist.course.exercises import exercises_of

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


def test_the_landing_page_offers_the_whole_course_to_take_home(site):
    assert 'href="../kerasdist-course.zip"' in (site / "docs" / "index.html").read_text(encoding="utf-8")
    with zipfile.ZipFile(site / "kerasdist-course.zip") as archive:
        names = set(archive.namelist())
    committed = subprocess.run(["git", "ls-tree", "-r", "--name-only", "HEAD"], cwd=ROOT, capture_output=True,
                               text=True, check=True, timeout=60).stdout.split()
    assert {f"kerasdist/{name}" for name in committed} <= names
    assert {"kerasdist/Makefile", "kerasdist/notebooks/01_quickstart.ipynb"} <= names


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


def _switch(site, docname):
    """{language: href} of the Python | R switch on a lesson page (href None where that language has no page)."""
    text = (site / f"{docname}.html").read_text(encoding="utf-8")
    nav = re.search(r'<nav class="language-switch".*?</nav>', text, flags=re.DOTALL)
    assert nav, f"{docname} has no language switch"
    options = re.findall(r'<(a|span) class="language-switch-option[^"]*"(?: aria-current="page")?'
                         r'(?: data-language="(\w+)")?(?: href="([^"]*)")?[^>]*>(\w+)<', nav.group(0))
    return {label.lower(): href or None for _, _, href, label in options}


def test_every_lesson_page_switches_language_by_a_plain_link_to_its_twin(site):
    for lesson in lesson_needs.LESSONS:
        if len(lesson.notebooks) == 1:  # lesson 00: R only, Python shown as unavailable
            assert _switch(site, f"notebooks/{lesson.stem}") == {"python": None, "r": "#"}
            continue
        python, r = lesson.notebooks
        assert _switch(site, f"notebooks/{python}") == {"python": "#", "r": f"{r}.html"}
        assert _switch(site, f"notebooks/{r}") == {"python": f"{python}.html", "r": "#"}


def test_the_sidebar_lists_each_lesson_once(site):
    text = (site / "docs" / "index.html").read_text(encoding="utf-8")
    sidebar = text.split('class="bd-sidebar-primary')[1].split("</nav>")[0]
    listed = re.findall(r'href="\.\./notebooks/([^".#]+)\.html"', sidebar)
    assert listed == [lesson.stem for lesson in lesson_needs.LESSONS]


def test_every_lesson_page_opens_with_its_needs_from_the_single_source(site):
    for lesson in lesson_needs.LESSONS:
        for name in lesson.notebooks:
            text = (site / "notebooks" / f"{name}.html").read_text(encoding="utf-8")
            needs = re.search(r'<dl class="[^"]*lesson-needs[^"]*"[^>]*>(.*?)</dl>', text, flags=re.DOTALL)
            assert needs, f"{name} has no needs block"
            shown = [(html.unescape(re.sub(r"<[^>]+>", "", label)).strip().rstrip(":"),
                      html.unescape(re.sub(r"<[^>]+>", "", value)).strip())
                     for label, value in re.findall(r"<dt[^>]*>(.*?)</dt>\s*<dd[^>]*>(.*?)</dd>", needs.group(1),
                                                    flags=re.DOTALL)]
            assert shown == lesson.rows(), name
            # Both twins' notebooks to download, as the executed .ipynb files.
            downloads = re.findall(r'<a class="reference download internal" download="" href="([^"]+\.ipynb)"', text)
            own_first = sorted(lesson.notebooks, key=lambda notebook: notebook.endswith("_R") != name.endswith("_R"))
            assert [Path(link).name for link in downloads] == [f"{notebook}.ipynb" for notebook in own_first]
            for link in downloads:
                assert (site / "notebooks" / link).read_bytes() == (ROOT / "notebooks" / Path(link).name).read_bytes()
            words = re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", "", text)))
            assert "Run it yourself" in words and "run make lab" in words and f"Open notebooks/{name}.ipynb" in words


def test_exercises_show_the_cell_as_handed_out_and_the_filled_one_in_the_solution(site):
    for lesson in lesson_needs.LESSONS:
        count = len(exercises_of(lesson.number))
        for name in lesson.notebooks:
            text = (site / "notebooks" / f"{name}.html").read_text(encoding="utf-8")
            for hidden in ("BEGIN SOLUTION", "END SOLUTION", "HIDDEN TESTS", "NBVAL_", "assert_correct"):
                assert hidden not in text, f"{name} shows {hidden}"
            assert text.count("# YOUR CODE HERE") == count, name
            # The filled-in cell sits in a Solution dropdown, right after its title and explanation.
            solutions = text.split('<div class="dropdown lesson-solution admonition">')[1:]
            filled = [part for part in solutions if "The cell, filled in:" in part.split('class="dropdown')[0]]
            assert len(filled) == count, name


def test_solutions_and_hints_are_dropdowns_not_raw_details(site):
    for page in (site / "notebooks").glob("*.html"):
        text = page.read_text(encoding="utf-8")
        assert "<details><summary>" not in text, f"{page.name} still shows a raw <details>"
    text = (site / "notebooks" / "03_convergence.html").read_text(encoding="utf-8")
    source = (ROOT / "notebooks" / "03_convergence.ipynb").read_text(encoding="utf-8")
    assert text.count("dropdown lesson-solution admonition") == source.count("<summary>Solution</summary>") >= 3


def test_python_pages_step_over_the_r_only_lesson(site):
    landing = (site / "docs" / "index.html").read_text(encoding="utf-8")
    first = (site / "notebooks" / "01_quickstart.html").read_text(encoding="utf-8")
    assert re.search(r'<a class="right-next"\s+href="\.\./notebooks/01_quickstart.html"', landing)
    assert re.search(r'<a class="left-prev"\s+href="\.\./docs/index.html"', first)


def test_previous_and_next_links_follow_the_course_in_each_language(site):
    lessons = sorted(path.stem for path in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    for in_r in (False, True):
        track = [name for name in lessons if name.endswith("_R") == in_r]
        for before, after in zip(track, track[1:]):
            forward = (site / "notebooks" / f"{before}.html").read_text(encoding="utf-8")
            back = (site / "notebooks" / f"{after}.html").read_text(encoding="utf-8")
            assert re.search(rf'<a class="right-next"\s+href="{after}.html"', forward), before
            assert re.search(rf'<a class="left-prev"\s+href="{before}.html"', back), after


@pytest.mark.slow
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
            # A Python lesson's switch leads to its R twin, whose switch leads back.
            for docname, twin in ((LESSON, TWIN), (TWIN, LESSON)):
                page.open(base + docname + ".html")
                assert page.evaluate("document.querySelector('h1').innerText").startswith(_title(docname))
                images[docname] = _image_sizes(page)
                page.evaluate("document.querySelector('.language-switch a:not(.active)').click()")
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


SECTION = "gradient-accumulation-a-large-batch-without-more-devices"
SECTION_IN_VIEW = ("(() => {{ const top = document.getElementById({!r}).getBoundingClientRect().top;"
                   " return top >= -5 && top < window.innerHeight * 0.3; }})()")


@pytest.mark.slow
def test_the_language_switch_keeps_the_section_and_the_readers_choice(site):
    python, r = "notebooks/03_convergence", "notebooks/03_convergence_R"
    with serve(site) as base, browser.Page() as page:
        # Lesson 03 in Python, read at its section on gradient accumulation.
        page.open(f"{base}{python}.html#{SECTION}")
        page.wait_for(SECTION_IN_VIEW.format(SECTION))
        page.click(".language-switch a[data-language='r']")
        # The R twin opens at the same section.
        page.wait_for(f"location.href === {json.dumps(f'{base}{r}.html#{SECTION}')} && "
                      "document.readyState === 'complete'")
        page.wait_for(SECTION_IN_VIEW.format(SECTION))
        assert page.evaluate("document.querySelector('.language-switch .active').innerText") == "R"
        # Another lesson, opened from its Python address (a bookmark, a link): R is still chosen.
        page.open(f"{base}notebooks/05_multi_worker.html")
        page.wait_for(f"location.href === {json.dumps(base + 'notebooks/05_multi_worker_R.html')} && "
                      "document.readyState === 'complete'")
        assert page.evaluate("document.querySelector('.language-switch .active').innerText") == "R"
        # The sidebar and the next link lead to R pages now.
        sidebar = page.evaluate("[...document.querySelectorAll('.bd-sidebar-primary a')]"
                                ".map(link => link.getAttribute('href')).filter(href => /^\\d\\d_/.test(href))")
        assert len(sidebar) == len(lesson_needs.LESSONS), sidebar
        assert all(link.endswith("_R.html") for link in sidebar), sidebar
        assert page.evaluate("document.querySelector('.bd-sidebar-primary li.current > a').getAttribute('href')") \
            == "05_multi_worker_R.html"
        assert page.evaluate("document.querySelector('a.right-next').getAttribute('href')") == \
            "06_strategy_map_R.html"
        # On the landing page, the course map's "Python" link of a lesson is a choice too.
        page.open(f"{base}docs/index.html")
        page.evaluate("[...document.querySelectorAll('.bd-article a')].find(link => link.innerText === 'Python' && "
                      "link.getAttribute('href').endsWith('04_input_pipelines.html')).click()")
        page.wait_for(f"location.href === {json.dumps(base + 'notebooks/04_input_pipelines.html')} && "
                      "document.readyState === 'complete'")
        assert page.evaluate("document.querySelector('.language-switch .active').innerText") == "Python"
        # Python is chosen from now on: an R page's address leads to its Python lesson.
        page.open(f"{base}{r}.html")
        page.wait_for(f"location.href === {json.dumps(f'{base}{python}.html')} && document.readyState === 'complete'")


@pytest.mark.slow
def test_without_javascript_the_switch_is_a_plain_link_to_the_twin(site):
    with serve(site) as base, browser.Page() as page:
        page.disable_scripts()
        page.open(f"{base}notebooks/03_convergence.html")
        page.click(".language-switch a[data-language='r']")
        page.wait_for(f"location.href === {json.dumps(base + 'notebooks/03_convergence_R.html')} && "
                      "document.readyState === 'complete'")
        assert page.evaluate("document.querySelector('h1').innerText").startswith(_title("notebooks/03_convergence_R"))


# Elements whose text would be cut or would widen the page (code cells and their outputs scroll by design).
OVERFLOWING_TEXT = """[...document.querySelectorAll(
    '.bd-article p, .bd-article li, .bd-article td, .bd-article th, .bd-article dd, .bd-article h1,'
    + ' .pst-scrollable-table-container, .language-switch')]
  .filter(element => element.scrollWidth > element.clientWidth + 1 && !element.closest('pre, .cell_output'))
  .map(element => element.tagName + ': ' + element.innerText.slice(0, 60))"""


@pytest.mark.slow
def test_on_a_phone_the_sidebar_button_opens_the_lessons(site):
    with serve(site) as base, browser.Page() as page:
        page.set_viewport(390, 844, mobile=True)
        page.open(f"{base}notebooks/03_convergence.html")
        page.click(".header-article-items__start .primary-toggle")
        page.wait_for("document.getElementById('pst-primary-sidebar-modal').open")
        visible = page.evaluate("[...document.querySelectorAll('#pst-primary-sidebar-modal a')]"
                                ".filter(link => link.getBoundingClientRect().width > 0).map(link => link.innerText)")
        assert any("Quickstart" in text for text in visible), visible
        # On a wide window the same button folds the sidebar away.
        page.set_viewport(1280, 800)
        page.open(f"{base}notebooks/03_convergence.html")
        page.click(".header-article-items__start .primary-toggle")
        page.wait_for("document.getElementById('pst-primary-sidebar').classList.contains('pst-sidebar-hidden')")


@pytest.mark.slow
@pytest.mark.parametrize("width, height", [(1280, 800), (390, 844)])
def test_the_landing_page_and_a_lesson_fit_the_window_without_cut_text(site, tmp_path, width, height):
    with serve(site) as base, browser.Page() as page:
        page.set_viewport(width, height, mobile=width < 500)
        for name, url in (("landing", "docs/index.html"), ("lesson", "notebooks/03_convergence.html")):
            page.open(base + url)
            _assert_fits(page, f"{name} at {width} px")
            # The landing page's lesson tables, shown: every lesson row is on screen in full width.
            if name == "landing":
                assert page.evaluate("[...document.querySelectorAll('.bd-article table')]"
                                     ".every(table => table.getBoundingClientRect().right <= window.innerWidth)")
            page.save_screenshot(tmp_path / f"{name}-{width}.png")
            assert browser.png_size(tmp_path / f"{name}-{width}.png") == (width, height)
            assert (tmp_path / f"{name}-{width}.png").stat().st_size > 20_000
        if width < 500:  # every lesson on a phone
            for notebook in sorted((site / "notebooks").glob("*.html")):
                page.open(f"{base}notebooks/{notebook.name}")
                _assert_fits(page, f"{notebook.stem} at {width} px")


def _assert_fits(page, where):
    """The page does not scroll sideways and no text in it is cut."""
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth"), f"{where} scrolls sideways"
    assert page.evaluate(OVERFLOWING_TEXT) == [], where


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
