"""Sphinx configuration of the course website (`make site`): the executed lessons and the reference pages.

The source folder is the project root, so links between pages, lessons and files are the
same paths on the site as in the repository; only ``docs/`` and the lessons are read.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # the site's own extensions, beside this file

project = "kerasdist"
author = "the kerasdist authors"
copyright = "the kerasdist authors, Apache-2.0"

root_doc = "docs/index"
include_patterns = ["docs/**", "notebooks/[0-9][0-9]_*.ipynb"]
# Folders never to walk (the virtualenv, the build output, what lessons and runs write).
exclude_patterns = [".*", "**/.*", "build", "results", "notebooks/results", "r/*.Rcheck"]

extensions = ["myst_nb", "sphinx_togglebutton", "lessons", "lesson_exercises", "course_archive"]
# The lessons are committed executed: the site shows their stored outputs and never runs them.
nb_execution_mode = "off"
myst_heading_anchors = 3

html_theme = "sphinx_book_theme"
html_title = "kerasdist course"
html_theme_options = {
    "home_page_in_toc": True,
    "show_toc_level": 2,
    # A lesson's Python | R switch sits in the header that stays on screen (docs/lessons.py).
    "article_header_start": ["toggle-primary-sidebar.html", "language-switch.html"],
}
templates_path = ["_templates"]
html_static_path = ["_static"]  # the switch's script, the site's style
# The site's front door (build/site/index.html) leads to the landing page.
html_additional_pages = {"index": "redirect.html"}
html_show_sourcelink = False
