"""Sphinx extension of the course website: lessons link to their twins and to the landing page; R code is R.

A Python lesson ``notebooks/NN_topic`` and its R twin ``notebooks/NN_topic_R`` each get a
line under their title that leads to the other. The lessons link to the README's course map
(``../README.md#lessons``); on the site that map is the landing page's. R cells of the
Python-kernel notebooks are highlighted as R.
"""

import re

from docutils import nodes
from sphinx import addnodes

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


def add_twin_link(app, doctree):
    """Under a lesson's title, a line that links to its twin (a lesson without one gets none)."""
    docname = app.env.docname
    twin = twin_of(docname)
    if not docname.startswith(LESSONS_FOLDER) or twin not in app.env.found_docs:
        return
    language = "Python" if docname.endswith(R_SUFFIX) else "R"
    # An implicit reference to a document: Sphinx writes the twin's title as the link text.
    reference = addnodes.pending_xref("", nodes.inline(), refdomain="std", reftype="doc",
                                      reftarget="/" + twin, refexplicit=False, refdoc=docname)
    line = nodes.paragraph("", f"This lesson in {language}: ", reference)
    section = doctree.next_node(nodes.section)
    section.insert(1, nodes.container("", line, classes=["twin-link", "admonition", "tip"]))


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


def setup(app):
    """Register the doctree hooks."""
    app.connect("doctree-read", add_twin_link)
    app.connect("doctree-read", link_readme_to_landing_page)
    app.connect("doctree-read", highlight_r_cells_as_r)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
