"""The nbgrader preprocessors of the student edition (named in ``kerasdist.course.instructor``).

Example:
    >>> without_solutions("Try it.\\n<details><summary>Solution</summary>\\n\\n42\\n\\n</details>\\n")
    'Try it.\\n'
    >>> without_solutions("1. A\\n   <details><summary>Solution</summary>\\n\\n   B\\n   </details>\\n2. C")
    '1. A\\n\\n2. C'
    >>> COURSE_MAP_LINK.sub("](README.md)", "back to the [course map](../README.md#lessons).")
    'back to the [course map](README.md).'
    >>> without_test_markers("%%R\\n# NBVAL_CHECK_OUTPUT\\n# Train.\\nfit()")
    '%%R\\n# Train.\\nfit()'
"""

import re

from nbgrader.preprocessors import NbGraderPreprocessor

# A lesson's link to the course map; the handed-out folder holds the map beside the lessons.
COURSE_MAP_LINK = re.compile(r"\]\(\.\./README\.md(?:#[\w-]*)?\)")
SOLUTION_BLOCK = re.compile(r"[ \t]*<details>\s*<summary>\s*Solution\s*</summary>.*?</details>[ \t]*(?:\n|$)",
                            re.S | re.I)
# The first line of a code cell that nbval checks (``# NBVAL_CHECK_OUTPUT``): for the course's tests only.
TEST_MARKER = re.compile(r"^[ \t]*# NBVAL_\w+[ \t]*(?:\n|$)", re.M)


def without_solutions(markdown):
    """``markdown`` without its collapsed "Solution" blocks.

    What followed a block starts a new paragraph (a blank line), so that a list item or a link
    after it is not read as part of the HTML block before it.
    """
    text = SOLUTION_BLOCK.sub("\n", markdown)
    return re.sub(r"\n{3,}", "\n\n", text).rstrip("\n") + ("\n" if markdown.endswith("\n") else "")


def without_test_markers(source):
    """A code cell's ``source`` without the lines that only nbval reads (``# NBVAL_CHECK_OUTPUT``)."""
    return TEST_MARKER.sub("", source)


class RemoveSolutionBlocks(NbGraderPreprocessor):
    """Drop every collapsed "Solution" block (``<details><summary>Solution</summary>``) of markdown, and
    point the links to the course map at the copy beside the handed-out lessons."""

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type == "markdown":
            cell.source = COURSE_MAP_LINK.sub("](README.md)", without_solutions(cell.source))
        return cell, resources


class RemoveTestMarkers(NbGraderPreprocessor):
    """Drop the nbval markers (``# NBVAL_CHECK_OUTPUT``) from code cells: they mean nothing to a student."""

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type == "code":
            cell.source = without_test_markers(cell.source)
        return cell, resources


class ClearExerciseOutputs(NbGraderPreprocessor):
    """Clear the outputs of the exercise cells (nbgrader's cells); the lesson's own outputs stay."""

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type == "code" and "nbgrader" in cell.metadata:
            cell.outputs, cell.execution_count = [], None
        return cell, resources
