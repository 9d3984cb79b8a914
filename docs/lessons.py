"""Sphinx extension of the course website: one page per lesson and language, with a switch between them.

A Python lesson ``notebooks/NN_topic`` and its R twin ``notebooks/NN_topic_R`` share their
section headings. Every lesson page gets, in its header, a Python | R switch: a plain link to
the twin (without JavaScript), and with ``language-switch.js`` a link to the same section that
also remembers the reader's choice. The sidebar lists each lesson once (the Python page, or
lesson 00's R page); an R page's previous/next links follow the R twins. Under a lesson's title
come what it needs (``kerasdist.course.lesson_needs``, the table the README and the doctor read), its
notebooks to download and how to run it yourself. The lessons' links to the README's course map
lead to the landing page; R cells of the Python-kernel notebooks are highlighted as R. How
exercises read on the site is ``lesson_exercises.py``'s concern.
"""

import json
import re

from docutils import nodes
from sphinx import addnodes

from kerasdist.course import lesson_needs
from kerasdist.doctor.checks import INSTALL_R

LESSONS_FOLDER = "notebooks/"
R_SUFFIX = "_R"
# A code cell whose first line runs the rest as R (rpy2's %%R) or saves it as an R script.
R_CELL = re.compile(r"%%R\b|%%writefile\s+\S+\.R\s*$")



def twin_of(docname):
    """The lesson's twin in the other language.

    Args:
        docname: a lesson's document name, e.g. ``notebooks/01_quickstart``.

    Returns:
        The twin's document name.

    Example:
        >>> twin_of("notebooks/01_quickstart"), twin_of("notebooks/01_quickstart_R")
        ('notebooks/01_quickstart_R', 'notebooks/01_quickstart')
    """
    return docname.removesuffix(R_SUFFIX) if docname.endswith(R_SUFFIX) else docname + R_SUFFIX


def language_of(docname):
    """``"r"`` for an R lesson, ``"python"`` for a Python one.

    Example:
        >>> language_of("notebooks/03_convergence_R")
        'r'
    """
    return "r" if docname.endswith(R_SUFFIX) else "python"


def _is_lesson(app, docname):
    return docname.startswith(LESSONS_FOLDER) and docname in app.env.found_docs


def _has_twin(app, docname):
    return _is_lesson(app, docname) and twin_of(docname) in app.env.found_docs


def keep_r_twins_out_of_the_sidebar(app, doctree):
    """An R twin is reached through its Python lesson's switch, so it needs no entry of its own."""
    docname = app.env.docname
    if language_of(docname) == "r" and _has_twin(app, docname):
        app.env.metadata[docname]["orphan"] = True


def add_lesson_header(app, doctree):
    """Under a lesson's title: what it needs, its notebooks to download, and how to run it yourself."""
    docname = app.env.docname
    if not _is_lesson(app, docname):
        return
    lesson = lesson_needs.lesson_of(docname)
    needs = nodes.field_list(classes=["lesson-needs"])
    for label, value in lesson.rows():
        body = nodes.field_body("", nodes.paragraph("", value))
        needs += nodes.field("", nodes.field_name("", label), body)
    downloads = nodes.paragraph("", "Download the notebook: ", classes=["lesson-downloads"])
    # This page's own notebook first.
    own_first = sorted(lesson.notebooks, key=lambda name: language_of(name) != language_of(docname))
    for index, name in enumerate(own_first):
        language = "R" if language_of(name) == "r" else "Python"
        downloads += nodes.Text(" · " if index else "")
        downloads += addnodes.download_reference(
            "", "", nodes.literal("", f"{name}.ipynb"), nodes.Text(f" ({language})"),
            reftarget=f"/{LESSONS_FOLDER}{name}.ipynb", refdoc=docname, refexplicit=True, reftype="download",
            refdomain="")
    legend = nodes.paragraph("", "", *_inline(lesson.notes(docname.removeprefix(LESSONS_FOLDER))),
                             classes=["lesson-needs-legend"])
    header = nodes.container("", needs, legend, downloads, _run_it_yourself(docname, lesson),
                             classes=["lesson-header"])
    section = doctree.next_node(nodes.section)
    section.insert(1, header)


def _inline(text):
    """Text and ``literal`` nodes from Markdown-like text whose code is in backticks."""
    return [nodes.literal("", part) if index % 2 else nodes.Text(part)
            for index, part in enumerate(text.split("`")) if part]


def _run_it_yourself(docname, lesson):
    """A dropdown with the steps that open this lesson on the reader's own machine, what it needs first."""
    name = docname.removeprefix(LESSONS_FOLDER)
    steps = []
    if language_of(docname) == "r":
        step = (f"R first: `{INSTALL_R}` (or `make setup` run as root); set-up then adds the kerasdist "
                "R package. The R code runs in `%%R` cells of the Python kernel, through rpy2.")
        if lesson.r_packages == lesson_needs.KERAS3_TWIN:
            step += (" This R twin also needs keras3, which needs reticulate 1.42 or newer: in R, "
                     '`install.packages(c("reticulate", "keras3", "tfdatasets", "tensorflow"))`.')
        steps.append(step)
    if lesson.data == lesson_needs.FASHION:
        steps.append("Its data: `sudo apt-get install dataset-fashion-mnist` (30 MB; `make setup` run as "
                     "root does it).")
    steps += [
        "In your copy of the course (Linux, Python 3.10-3.13; a laptop or a GPU workstation), run "
        "`make lab`: it sets up `.venv` (TensorFlow's GPU build when `nvidia-smi` lists a GPU), registers "
        "the Python (kerasdist) kernel and opens JupyterLab.",
        f"Open `notebooks/{name}.ipynb` and run its cells in order; `.venv/bin/kerasdist doctor` says "
        "what this machine lacks for each lesson.",
    ]
    listing = nodes.enumerated_list()
    for step in steps:
        listing += nodes.list_item("", nodes.paragraph("", "", *_inline(step)))
    return nodes.admonition("", nodes.title("", "Run it yourself"), listing,
                            classes=["dropdown", "run-it-yourself"])


def link_readme_to_landing_page(app, doctree):
    """Point the lessons' links to the README (not part of the site) at the landing page, same anchor."""
    for node in doctree.findall(addnodes.pending_xref):
        if node.get("reftype") == "myst" and node.get("refdomain") == "doc" and node["reftarget"] == "README":
            node["reftarget"] = app.config.root_doc


def highlight_r_cells_as_r(app, doctree):
    """Highlight the R code of a lesson's ``%%R`` and ``%%writefile *.R`` cells as R, not as Python."""
    for block in doctree.findall(nodes.literal_block):
        if R_CELL.match(block.astext().split("\n", 1)[0]):
            block["language"] = "r"


def _sections(app, docname):
    """(ids, title) of every section of a document, in document order."""
    return [(section["ids"], section.next_node(nodes.title).astext())
            for section in app.env.get_doctree(docname).findall(nodes.section)]


def section_pairs(app, docname):
    """Each section id of a lesson, mapped to its twin's section with the same heading in the same place."""
    pairs = {}
    twin_sections = _sections(app, twin_of(docname))[1:]  # the first is the page itself: its title
    for (ids, title), (twin_ids, twin_title) in zip(_sections(app, docname)[1:], twin_sections):
        if title == twin_title and twin_ids:
            pairs.update(dict.fromkeys(ids, twin_ids[0]))
    return pairs


def _relation_link(app, pagename, docname):
    return {"link": app.builder.get_relative_uri(pagename, docname),
            "title": app.builder.render_partial(app.env.titles[docname])["title"]}


def add_language_switch(app, pagename, templatename, context, doctree):
    """The switch's links and section map for a lesson page; an R page's previous/next follow the R twins."""
    if not _is_lesson(app, pagename):
        return
    language = language_of(pagename)
    links = {language: "#"}
    if _has_twin(app, pagename):
        links[language_of(twin_of(pagename))] = app.builder.get_relative_uri(pagename, twin_of(pagename))
    context["language_switch"] = {
        "current": language, "python": links.get("python"), "r": links.get("r"),
        "sections": json.dumps(section_pairs(app, pagename) if _has_twin(app, pagename) else {}),
    }
    if language == "r":
        # An R twin has no place in the sidebar's toctree: it takes its Python lesson's neighbours.
        source = twin_of(pagename) if _has_twin(app, pagename) else pagename
        _, previous, following = app.env.collect_relations()[source]
        for key, neighbour in (("prev", previous), ("next", following)):
            if neighbour and language_of(neighbour) == "python" and _has_twin(app, neighbour):
                neighbour = twin_of(neighbour)
            context[key] = _relation_link(app, pagename, neighbour) if neighbour else None


def keep_python_readers_off_r_only_lessons(app, pagename, templatename, context, doctree):
    """On a page in Python (or in no language), previous/next step over a lesson that is in R only (00)."""
    if language_of(pagename) != "python":
        return
    relations = app.env.collect_relations()
    for key, position in (("prev", 1), ("next", 2)):
        neighbour = relations.get(pagename, (None, None, None))[position]
        if neighbour and language_of(neighbour) == "r" and not _has_twin(app, neighbour):
            beyond = relations[neighbour][position]
            context[key] = _relation_link(app, pagename, beyond) if beyond else None


def add_assets(app):
    """The site's scripts and style; language-switch.js learns the twins ({Python page: R page})."""
    twins = {LESSONS_FOLDER + lesson.notebooks[0]: LESSONS_FOLDER + lesson.notebooks[1]
             for lesson in lesson_needs.LESSONS if len(lesson.notebooks) == 2}
    app.add_js_file(None, body=f"const kerasdistTwins = {json.dumps(twins)};")
    app.add_js_file("language-switch.js")
    app.add_js_file("sidebar-toggles.js")
    app.add_js_file("narrow-tables.js")
    app.add_css_file("kerasdist.css")


def setup(app):
    """Register the doctree and page hooks and the switch's script and style."""
    # Before Sphinx's own collectors (priority 500): the header's download links must be collected.
    app.connect("doctree-read", add_lesson_header, priority=400)
    app.connect("doctree-read", keep_r_twins_out_of_the_sidebar)
    app.connect("doctree-read", link_readme_to_landing_page)
    app.connect("doctree-read", highlight_r_cells_as_r)
    app.connect("html-page-context", add_language_switch)
    app.connect("html-page-context", keep_python_readers_off_r_only_lessons)
    app.connect("builder-inited", add_assets)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
