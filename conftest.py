"""Every test run's own user state; nbval support for the lessons: pinned data, keras3 R twins skipped
without keras3 (lesson 07 without JAX), stderr not compared.

Run with ``pytest --nbval-lax --nbval-current-env notebooks``; pytest finds this file at the top
of the repository, which keeps the lessons folder to the lessons. Cells marked
``# NBVAL_CHECK_OUTPUT`` must reproduce their committed stdout; TensorFlow and
absl log lines go to stderr, which is never compared.
"""

import doctest
import functools
import importlib.util
import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

# The user's own caches and settings, each moved into a folder of the test run: kerasdist doctor's probe
# answers ($XDG_CACHE_HOME/kerasdist), Keras' keras.json and dataset cache, matplotlib's matplotlibrc and
# font cache, Jupyter's and IPython's configuration (an IPython start-up script runs in every lesson's
# kernel), and what else follows the XDG folders (R's user cache). Read or written by a test, any of them
# would make a lesson print something else than on a fresh machine, or change the user's files.
USER_STATE = {
    "XDG_CACHE_HOME": "cache",
    "XDG_CONFIG_HOME": "config",
    "XDG_DATA_HOME": "data",
    "KERAS_HOME": "keras",
    "MPLCONFIGDIR": "matplotlib",
    "JUPYTER_CONFIG_DIR": "jupyter/config",
    "JUPYTER_DATA_DIR": "jupyter/data",
    "JUPYTER_RUNTIME_DIR": "jupyter/runtime",
    "IPYTHONDIR": "ipython",
}
# Settings of the user's shell that would change what a test trains: Keras' backend, a cluster's TF_CONFIG.
USER_SETTINGS = ("KERAS_BACKEND", "TF_CONFIG")
OWN_STATE = "KERASDIST_TEST_USER_STATE"


def user_state_environment(base):
    """The environment variables that move every entry of ``USER_STATE`` under ``base`` (created here).

    Example:
        >>> user_state_environment("/tmp/run")["KERAS_HOME"]  # doctest: +SKIP
        '/tmp/run/keras'
    """
    environment = {}
    for variable, folder in USER_STATE.items():
        environment[variable] = os.path.join(base, folder)
        os.makedirs(environment[variable], exist_ok=True)
    return environment


def isolate_user_state():
    """Give this test run its own user state (before Keras, matplotlib or a kernel starts); return its folder.

    pytest-xdist's workers share the folder their controller made; any other run makes a new one.
    """
    base = os.environ.get(OWN_STATE)
    if not (base and os.environ.get("PYTEST_XDIST_WORKER") and os.path.isdir(base)):
        base = tempfile.mkdtemp(prefix="kerasdist-test-user-state-")
    os.environ.update(user_state_environment(base), **{OWN_STATE: base})
    for variable in USER_SETTINGS:
        os.environ.pop(variable, None)
    return base


# In a pytest run (pytest sets PYTEST_VERSION), not where a script imports this file for its helpers.
ISOLATED_USER_STATE = isolate_user_state() if os.environ.get("PYTEST_VERSION") else None


def pytest_unconfigure(config):
    if ISOLATED_USER_STATE and not os.environ.get("PYTEST_XDIST_WORKER"):  # the controller made it
        shutil.rmtree(ISOLATED_USER_STATE, ignore_errors=True)


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


def lesson_group(path):
    """The xdist group of lesson NN's cells (both twins), and of the tests parametrized by its path (the tests
    that execute it again): they share the lesson's result files, so they run one after another in one
    process, while other lessons run in the other processes."""
    return f"lesson-{Path(path).name[:2]}"


# Module fixtures that take long to build (training runs, the student edition, the site): the tests that use
# one share an xdist group, so that one process builds it once and runs them all.
SHARED_FIXTURES = {"runs": "loop-runs", "comparison": "comparison", "student": "student-edition",
                   "site": "site"}

# The test that runs a lesson's cells under nbval as on another CPU (tests/test_other_cpu.py).
ON_ANOTHER_CPU = "test_checked_outputs_hold_on_a_cpu_with_other_instruction_sets"


def lessons_run_on_another_cpu(items):
    """The lessons whose cells a collected test of ``ON_ANOTHER_CPU`` runs under nbval (as on another CPU)."""
    return {Path(item.callspec.params["lesson"]) for item in items
            if getattr(item, "originalname", None) == ON_ANOTHER_CPU}


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the xdist_group marks
def pytest_collection_modifyitems(config, items):
    """Mark lesson cells for the full tier, one xdist group per lesson (a lesson's cells share a kernel, so
    they run in order in one process) joined by the tests parametrized with its path, and the tests of each
    of ``SHARED_FIXTURES`` one group; skip the
    keras3 R twins when R lacks keras3/tfdatasets; stop comparing stderr streams. A lesson that
    ``ON_ANOTHER_CPU`` runs under nbval in this run (as on another CPU: the same cells and comparisons,
    with other kernels) is not run here a second time; docstring examples that are all +SKIP are left out."""
    twins = {}
    for item in items:
        lesson = getattr(item, "callspec", None) and item.callspec.params.get("lesson")
        if isinstance(lesson, Path) and lesson.parent == NOTEBOOKS:
            item.add_marker(pytest.mark.xdist_group(lesson_group(lesson)))
        shared = [SHARED_FIXTURES[name] for name in getattr(item, "fixturenames", ())
                  if name in SHARED_FIXTURES]
        if shared and not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group(shared[0]))
        path = Path(str(item.fspath))
        if path.suffix != ".ipynb" or path.parent != NOTEBOOKS:
            continue
        item.add_marker(pytest.mark.slow)
        item.add_marker(pytest.mark.xdist_group(lesson_group(path)))
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
    elsewhere = lessons_run_on_another_cpu(items)
    deselected = [item for item in items
                  if Path(str(item.fspath)) in elsewhere or only_skipped_examples(item)]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = [item for item in items if item not in deselected]
    if config.getoption("dist", None) == "loadgroup":
        items.sort(key=scheduling_order)


def only_skipped_examples(item):
    """True for a docstring's examples that are all marked +SKIP (they need TensorFlow or a trained model):
    shown to a reader, never run, so not a test that skips (which CI would refuse)."""
    examples = getattr(getattr(item, "dtest", None), "examples", None)
    return bool(examples) and all(example.options.get(doctest.SKIP) for example in examples)


def scheduling_order(item):
    """Where an item's unit of work goes in pytest-xdist's queue (``--no-loadscope-reorder`` keeps this
    order): the xdist groups first (the training group, the lessons: the longest units), then the other slow
    tests, then the quick tier, whose short tests fill the processes at the end instead of one long test
    running alone."""
    if item.get_closest_marker("xdist_group"):
        return 0
    return 1 if item.get_closest_marker("slow") else 2
