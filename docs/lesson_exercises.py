"""Sphinx extension of the course website: the lessons' exercises as a reader meets them.

Solutions and hints (``<details><summary>...`` in the lessons' Markdown) become sphinx-togglebutton
dropdowns. A checked exercise's answer cell, committed with its solution filled in (nbval checks
that the check prints Correct), shows the cell as the student edition hands it out, with
``# YOUR CODE HERE``; the filled-in cell moves into the exercise's Solution dropdown. nbval's
markers and nbgrader's hidden tests are left out of every cell.
"""

import re

from docutils import nodes

from kerasdist.course.instructor import CODE_STUB

DETAILS_TAG = re.compile(r"\s*(</details>|<details>\s*<summary>.*?</summary>)\s*", re.DOTALL)
DETAILS_OPEN = re.compile(r"^\s*<details>\s*<summary>(.*?)</summary>\s*$", re.DOTALL)
DETAILS_CLOSE = re.compile(r"^\s*</details>\s*$")
# What only nbval and nbgrader read: their markers, the hidden tests, and an answer cell's solution.
TEST_MARKER = re.compile(r"^[ \t]*# NBVAL_\w+[ \t]*\n", re.MULTILINE)
HIDDEN_TESTS = re.compile(r"^[ \t]*### BEGIN HIDDEN TESTS\n.*?### END HIDDEN TESTS[ \t]*\n?",
                          re.MULTILINE | re.DOTALL)
SOLUTION_MARKER = re.compile(r"^[ \t]*### (BEGIN|END) SOLUTION[ \t]*\n?", re.MULTILINE)
SOLUTION = re.compile(r"^([ \t]*)### BEGIN SOLUTION\n.*?### END SOLUTION[ \t]*$", re.MULTILINE | re.DOTALL)


def details_to_dropdowns(app, doctree):
    """Turn a lesson's ``<details><summary>X</summary> ... </details>`` into a dropdown titled X."""
    # One raw HTML block may hold several tags ("</details>" then the next "<details><summary>"): one each.
    for raw in list(doctree.findall(nodes.raw)):
        tags, rest = DETAILS_TAG.findall(raw.astext()), DETAILS_TAG.split(raw.astext())[::2]
        if raw.get("format") == "html" and len(tags) > 1 and not "".join(rest):
            raw.replace_self([nodes.raw("", tag, format="html") for tag in tags])
    for opening in list(doctree.findall(nodes.raw)):
        match = DETAILS_OPEN.match(opening.astext()) if opening.get("format") == "html" else None
        if not match or opening.parent is None:
            continue
        parent = opening.parent
        start = parent.index(opening)
        closings = (index for index in range(start + 1, len(parent))
                    if isinstance(parent[index], nodes.raw) and DETAILS_CLOSE.match(parent[index].astext()))
        end = next(closings, None)
        if end is None:
            continue
        summary = match.group(1).strip()
        dropdown = nodes.admonition("", nodes.title("", summary),
                                    classes=["dropdown", "lesson-" + summary.split()[0].lower()])
        dropdown.extend(node.deepcopy() for node in parent[start + 1:end])
        parent[start:end + 1] = [dropdown]


def _with_text(block, text):
    """``block`` copied to hold ``text``, as its source too (Sphinx highlights only then)."""
    return block.__class__(text, text, **block.attributes)


def exercises_for_reading(app, doctree):
    """Show a checked exercise as a student meets it: the cell as handed out, the filled one in a dropdown.

    The committed lessons hold each answer cell with its solution filled in (nbval checks that the
    check prints Correct). On the site the cell shows its starter with the solution replaced by
    ``# YOUR CODE HERE``; the filled-in cell moves into the exercise's Solution dropdown. nbval's
    markers and nbgrader's hidden tests are left out of every cell.
    """
    for block in list(doctree.findall(nodes.literal_block)):
        text = HIDDEN_TESTS.sub("", TEST_MARKER.sub("", block.astext()))
        if text != block.astext():
            block.replace_self(_with_text(block, text.rstrip("\n")))
    for block in list(doctree.findall(nodes.literal_block)):
        cell = block.parent.parent if block.parent is not None else None
        if not SOLUTION.search(block.astext()) or cell is None or "cell" not in cell.get("classes", []):
            continue
        handed_out = cell.deepcopy()
        starter = SOLUTION.sub(lambda match: match.group(1) + CODE_STUB, block.astext())
        for copy in handed_out.findall(nodes.literal_block):
            copy.replace_self(_with_text(copy, starter))
        before = cell.parent[cell.parent.index(cell) - 1] if cell.parent.index(cell) else None
        if not (isinstance(before, nodes.admonition) and "lesson-solution" in before["classes"]):
            before = nodes.admonition("", nodes.title("", "Solution"),
                                      classes=["dropdown", "lesson-solution"])
            cell.parent.insert(cell.parent.index(cell), before)
        cell.replace_self(handed_out)
        filled = SOLUTION_MARKER.sub("", block.astext()).rstrip("\n")
        block.replace_self(_with_text(block, filled))
        before += nodes.paragraph("", "The cell, filled in:")
        before += cell


def setup(app):
    """Register the doctree hooks, before Sphinx's own collectors (priority 500) read the doctree."""
    app.connect("doctree-read", details_to_dropdowns, priority=400)
    app.connect("doctree-read", exercises_for_reading, priority=400)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
