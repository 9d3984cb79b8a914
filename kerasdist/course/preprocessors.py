"""The two nbgrader preprocessors of the student edition (named in ``kerasdist.course.instructor``).

Example:
    >>> SOLUTION_BLOCK.sub("", "Try it.\\n<details><summary>Solution</summary>\\n\\n42\\n\\n</details>\\n")
    'Try it.\\n'
"""

import re

from nbgrader.preprocessors import NbGraderPreprocessor

SOLUTION_BLOCK = re.compile(r"<details>\s*<summary>\s*Solution\s*</summary>.*?</details>\s*", re.S | re.I)


class RemoveSolutionBlocks(NbGraderPreprocessor):
    """Drop every collapsed "Solution" block (``<details><summary>Solution</summary>``) of markdown."""

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type == "markdown":
            cell.source = SOLUTION_BLOCK.sub("", cell.source)
        return cell, resources


class ClearExerciseOutputs(NbGraderPreprocessor):
    """Clear the outputs of the exercise cells (nbgrader's cells); the lesson's own outputs stay."""

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type == "code" and "nbgrader" in cell.metadata:
            cell.outputs, cell.execution_count = [], None
        return cell, resources
