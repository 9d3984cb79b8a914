"""nbval support for the lessons: pinned data, keras3 R twins skipped without keras3 (lesson 07 without JAX),
stderr not compared.

Run with ``pytest --nbval-lax --nbval-current-env notebooks``; pytest finds this file at the top
of the repository, which keeps the lessons folder to the lessons. Cells marked
``# NBVAL_CHECK_OUTPUT`` must reproduce their committed stdout; TensorFlow and
absl log lines go to stderr, which is never compared.
"""

import functools
import importlib.util
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

NOTEBOOKS = Path(__file__).resolve().parent / "notebooks"
R_PACKAGES = ("keras3", "tfdatasets")
# A keras3 R twin is an R notebook whose %%R cells load keras3 or tfdatasets.
KERAS3_LIBRARY = re.compile(r"\blibrary\((keras3|tfdatasets)\b")
# A lesson on Keras' JAX backend (lesson 07) chooses it in a code cell, in Python or in R.
JAX_BACKEND = re.compile(r'KERAS_BACKEND"\]\s*=\s*"jax"|use_backend\("jax"\)')

# Lessons read KERASDIST_DATA (default "auto"); tests pin the offline sample so that the
# checked outputs (data provenance, sample counts) are the same on every machine.
os.environ.setdefault("KERASDIST_DATA", "sample")


@functools.lru_cache(maxsize=None)
def needs_jax(path):
    """True if a notebook runs Keras on the JAX backend."""
    with open(path) as stream:
        cells = json.load(stream)["cells"]
    return any(cell["cell_type"] == "code" and JAX_BACKEND.search("".join(cell["source"])) for cell in cells)


def is_keras3_twin(path):
    """True if a notebook's %%R cells load keras3 or tfdatasets."""
    with open(path) as stream:
        cells = json.load(stream)["cells"]
    return any(
        cell["cell_type"] == "code"
        and "".join(cell["source"]).startswith("%%R")
        and KERAS3_LIBRARY.search("".join(cell["source"]))
        for cell in cells
    )


@functools.lru_cache(maxsize=None)
def missing_r_packages():
    """The R packages of ``R_PACKAGES`` that R cannot load (all of them if R is absent)."""
    if shutil.which("Rscript") is None:
        return R_PACKAGES
    script = (
        f"pkgs <- c({', '.join(repr(p) for p in R_PACKAGES)}); "
        "missing <- pkgs[!sapply(pkgs, requireNamespace, quietly = TRUE)]; "
        "cat(missing); quit(status = length(missing) > 0)"
    )
    done = subprocess.run(["Rscript", "-e", script], capture_output=True, text=True, timeout=120)
    return tuple(done.stdout.split()) if done.returncode else ()


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the xdist_group marks
def pytest_collection_modifyitems(config, items):
    """Mark lesson cells for the full tier, one xdist group (a lesson's cells share a kernel, so they
    run in order in one process); skip the keras3 R twins when R lacks keras3/tfdatasets; stop
    comparing stderr streams."""
    twins = {}
    for item in items:
        path = Path(str(item.fspath))
        if path.suffix != ".ipynb" or path.parent != NOTEBOOKS:
            continue
        item.add_marker(pytest.mark.slow)
        item.add_marker(pytest.mark.xdist_group("lessons"))
        notebook = item.parent
        if "stderr" not in getattr(notebook, "skip_compare", ("stderr",)):
            # absl/oneDNN start-up lines, rpy2 and R warnings vary by machine: compare stdout only.
            notebook.skip_compare = tuple(notebook.skip_compare) + ("stderr",)
        if path not in twins:
            twins[path] = is_keras3_twin(path)
        if needs_jax(path) and importlib.util.find_spec("jax") is None:
            item.add_marker(pytest.mark.skip(reason="needs JAX, the jax extra (pip install -e '.[jax]')"))
        if twins[path] and missing_r_packages():
            item.add_marker(pytest.mark.skip(reason=(
                f"needs the R packages {', '.join(missing_r_packages())} (not installed here); "
                "its R code is still parsed by tests/test_notebooks.py"
            )))
