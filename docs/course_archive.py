"""Sphinx extension of the course website: the whole course as one zip to take home.

At the start of an HTML build, ``git archive`` writes the committed course (lessons executed,
package, R package, tests, Makefile) into ``kerasdist-course.zip`` beside the pages; the
landing page links to it. Unpacked anywhere, ``make lab`` sets it up and opens the lessons.
"""

import subprocess
from pathlib import Path

from sphinx.errors import ExtensionError

ARCHIVE = "kerasdist-course.zip"
GIT_TIMEOUT_S = 120


def write_course_archive(app):
    """Write the committed course as ``ARCHIVE`` (a ``kerasdist/`` folder inside) into the build folder."""
    if app.builder.format != "html":
        return
    target = Path(app.outdir) / ARCHIVE
    command = ["git", "archive", "--format=zip", "--prefix=kerasdist/", "-o", str(target), "HEAD"]
    try:
        subprocess.run(command, cwd=app.srcdir, capture_output=True, text=True, check=True,
                       timeout=GIT_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError) as error:
        detail = getattr(error, "stderr", "") or error
        raise ExtensionError(f"the course archive needs the course's git repository: {detail}") from error


def setup(app):
    """Register the archive's writer."""
    app.connect("builder-inited", write_course_archive)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
