"""The lesson notebooks as files: pairing, headings, committed outputs, R code that parses.

Fast checks that never execute a notebook (nbval does that: see the conftest.py at the top of the repository).
A Python lesson is ``notebooks/NN_topic.ipynb``; its R twin ``NN_topic_R.ipynb`` runs the
same workflow in rpy2 ``%%R`` cells with keras3. R notebooks that do not load keras3 or
tfdatasets (the reticulate-only ones) need no Python twin.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import jupytext
import pytest

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = REPO / "notebooks"
# jupytext pairs each lesson with a percent-format script here (jupytext.toml).
PAIRED_SCRIPTS = REPO / "notebooks_py"
LESSON = re.compile(r"^\d\d_\w+\.ipynb$")
HEADING = re.compile(r"^(#{2,6})\s+(.+?)\s*#*\s*$")
KERAS3_LIBRARY = re.compile(r"\blibrary\((keras3|tfdatasets)\b")


def load(path):
    with open(path) as stream:
        return json.load(stream)


def source(cell):
    return "".join(cell["source"])


def r_cells(notebook):
    """Sources of the ``%%R`` cells of a notebook."""
    return [source(c) for c in notebook["cells"] if c["cell_type"] == "code" and source(c).startswith("%%R")]


def is_keras3_twin(path):
    return any(KERAS3_LIBRARY.search(cell) for cell in r_cells(load(path)))


def all_notebooks():
    return sorted(p for p in NOTEBOOKS.glob("*.ipynb") if LESSON.match(p.name))


def python_lessons():
    return [p for p in all_notebooks() if not p.stem.endswith("_R")]


def keras3_twins():
    return [p for p in all_notebooks() if p.stem.endswith("_R") and is_keras3_twin(p)]


def twin_of(python_lesson):
    return python_lesson.with_name(f"{python_lesson.stem}_R.ipynb")


def headings(notebook):
    """Section headings (level 2 and deeper) of the markdown cells, outside code fences."""
    found, fenced = [], False
    for cell in notebook["cells"]:
        if cell["cell_type"] != "markdown":
            continue
        for line in source(cell).splitlines():
            if line.lstrip().startswith("```"):
                fenced = not fenced
            elif not fenced and (match := HEADING.match(line)):
                found.append(f"{match.group(1)} {match.group(2)}")
    return found


def outputs(notebook):
    code = [cell for cell in notebook["cells"] if cell["cell_type"] == "code"]
    return [out for cell in code for out in cell.get("outputs", [])]


def ids(paths):
    return [p.name for p in paths]


def test_lessons_exist():
    assert python_lessons(), f"no Python lessons NN_topic.ipynb in {NOTEBOOKS}"


@pytest.mark.parametrize("lesson", python_lessons(), ids=ids(python_lessons()))
def test_python_lesson_has_an_r_twin(lesson):
    assert twin_of(lesson).exists(), f"{lesson.name} has no R twin {twin_of(lesson).name}"
    assert is_keras3_twin(twin_of(lesson)), f"{twin_of(lesson).name} never loads keras3/tfdatasets in %%R"


@pytest.mark.parametrize("twin", keras3_twins(), ids=ids(keras3_twins()))
def test_r_twin_has_a_python_lesson(twin):
    lesson = twin.with_name(twin.name.replace("_R.ipynb", ".ipynb"))
    assert lesson.exists(), f"{twin.name} has no Python twin {lesson.name}"


@pytest.mark.parametrize("lesson", python_lessons(), ids=ids(python_lessons()))
def test_twins_share_section_headings(lesson):
    if not twin_of(lesson).exists():
        pytest.skip("no R twin (reported by test_python_lesson_has_an_r_twin)")
    python_headings, r_headings = headings(load(lesson)), headings(load(twin_of(lesson)))
    assert python_headings, f"{lesson.name} has no ## section headings"
    assert r_headings == python_headings


@pytest.mark.parametrize("twin", keras3_twins(), ids=ids(keras3_twins()))
def test_r_twin_names_its_python_twin_at_the_top(twin):
    first = load(twin)["cells"][0]
    python_name = twin.name.replace("_R.ipynb", ".ipynb")
    assert first["cell_type"] == "markdown" and python_name in source(first), (
        f"the first cell of {twin.name} must point to {python_name}"
    )


@pytest.mark.parametrize("notebook", all_notebooks(), ids=ids(all_notebooks()))
def test_no_committed_output_is_an_error(notebook):
    errors = [f"{out.get('ename')}: {out.get('evalue')}"
              for out in outputs(load(notebook)) if out["output_type"] == "error"]
    assert not errors, f"{notebook.name} stores error outputs: {errors}"


@pytest.mark.parametrize("notebook", all_notebooks(), ids=ids(all_notebooks()))
def test_markdown_after_a_details_block_renders_as_markdown(notebook):
    """In CommonMark (Jupyter's renderer) a line of HTML runs on until a blank line: text right after a
    closing ``</details>`` would show as raw text (backticks, list numbers) instead of markdown."""
    glued = []
    for index, cell in enumerate(load(notebook)["cells"]):
        lines = source(cell).splitlines() if cell["cell_type"] == "markdown" else []
        glued += [f"cell {index}: {following.strip()[:60]!r}" for closing, following in zip(lines, lines[1:])
                  if closing.strip() == "</details>" and following.strip()
                  and not following.strip().startswith("<details>")]
    assert not glued, f"{notebook.name}: put a blank line after </details> before " + "; ".join(glued)


@pytest.mark.parametrize("notebook", all_notebooks(), ids=ids(all_notebooks()))
def test_outputs_name_no_machine_paths(notebook):
    text = json.dumps(outputs(load(notebook)))
    places = {str(REPO), tempfile.gettempdir().rstrip("/") + "/", os.path.expanduser("~").rstrip("/") + "/"}
    leaks = sorted(p for p in places if len(p) > 2 and p in text)
    assert not leaks, f"{notebook.name} outputs name machine paths {leaks}; print relative paths instead"


@pytest.mark.parametrize("notebook", all_notebooks(), ids=ids(all_notebooks()))
def test_each_cell_stores_one_piece_per_stream(notebook):
    """A reader sees a cell's printed lines together, not one cat() argument per line."""
    split = [index for index, cell in enumerate(load(notebook)["cells"])
             if any(a["output_type"] == b["output_type"] == "stream" and a["name"] == b["name"]
                    for a, b in zip(cell.get("outputs", []), cell.get("outputs", [])[1:]))]
    assert not split, (f"{notebook.name}: cells {split} store a stream in pieces; "
                       "run scripts/run_notebooks.sh (it coalesces them)")


# What R prints under a lesson's first %%R cell when rpy2 starts it, not what the lesson does: rpy2's
# warning about reticulate versions older than 1.25, and R's warning about empty library folders.
R_START_UP_WARNINGS = re.compile(r"only fixed recently|contains? no packages")


@pytest.mark.parametrize("notebook", all_notebooks(), ids=ids(all_notebooks()))
def test_outputs_show_no_r_start_up_warnings(notebook):
    found = R_START_UP_WARNINGS.findall(json.dumps(outputs(load(notebook))))
    assert not found, f"{notebook.name} outputs show R start-up warnings {found}; run it again"


def test_r_started_in_the_notebooks_folder_does_not_warn_about_empty_libraries(tmp_path):
    # %load_ext rpy2.ipython lists the installed packages, as importr() does; notebooks/.Rprofile
    # drops empty library folders first. Elsewhere, R warns about the empty one given here.
    pytest.importorskip("rpy2", reason="rpy2 (the r extra) starts R inside Python")
    if shutil.which("R") is None:
        pytest.skip("R is not installed")
    empty_library = tmp_path / "empty-library"
    empty_library.mkdir()
    probe = ("from rpy2.robjects.packages import importr; import rpy2.robjects as r\n"
             "importr('utils'); r.r('invisible(NULL)')  # R prints pending warnings after a call")
    environment = dict(os.environ, R_LIBS=str(empty_library))
    environment.pop("R_PROFILE_USER", None)
    for folder, warns in ((tmp_path, True), (NOTEBOOKS, False)):
        completed = subprocess.run([sys.executable, "-c", probe], cwd=folder, env=environment,
                                   capture_output=True, text=True, timeout=120)
        assert completed.returncode == 0, completed.stderr
        assert bool(R_START_UP_WARNINGS.search(completed.stdout + completed.stderr)) == warns, folder


EXECUTED_LESSONS = python_lessons() + keras3_twins()


@pytest.mark.parametrize("lesson", EXECUTED_LESSONS, ids=ids(EXECUTED_LESSONS))
def test_lesson_is_committed_executed_top_to_bottom(lesson):
    notebook = load(lesson)
    counts = [c.get("execution_count") for c in notebook["cells"] if c["cell_type"] == "code"]
    rerun = "bash scripts/run_notebooks.sh" + (" --r-twins" if lesson in keras3_twins() else "")
    assert None not in counts, f"{lesson.name} has unexecuted code cells; run {rerun}"
    assert counts == list(range(1, len(counts) + 1)), f"{lesson.name} was not run top to bottom in one kernel"
    assert outputs(notebook), f"{lesson.name} has no outputs; run {rerun}"
    images = [o for o in outputs(notebook) if "image/png" in o.get("data", {})]
    assert images, f"{lesson.name} shows no figure"


@pytest.mark.parametrize("twin", keras3_twins(), ids=ids(keras3_twins()))
def test_keras3_twin_draws_its_figures_in_r(twin):
    code = [c for c in load(twin)["cells"] if c["cell_type"] == "code"]
    python_figures = [i for i, c in enumerate(code) if not source(c).startswith("%%R")
                      and any("image/png" in o.get("data", {}) for o in c.get("outputs", []))]
    python_plotting = [i for i, c in enumerate(code) if not source(c).startswith("%%R")
                       and re.search(r"\b(matplotlib|plt|kerasdist\.plots|import plots)\b", source(c))]
    assert not python_figures and not python_plotting, (
        f"{twin.name}: code cells {python_figures + python_plotting} draw with Python; draw in %%R cells"
    )


@pytest.mark.parametrize("notebook", all_notebooks(), ids=ids(all_notebooks()))
def test_paired_script_matches_notebook(notebook):
    script = PAIRED_SCRIPTS / notebook.with_suffix(".py").name
    assert script.exists(), f"{notebook.name} has no paired script (run: jupytext --sync notebooks/{notebook.name})"
    cells = lambda nb: [(c.cell_type, c.source) for c in nb.cells]  # noqa: E731
    assert cells(jupytext.read(script)) == cells(jupytext.read(notebook)), (
        f"{script.name} and {notebook.name} differ; run: jupytext --sync notebooks/{notebook.name}"
    )


R_NOTEBOOKS = [path for path in all_notebooks() if r_cells(load(path))]


@pytest.mark.parametrize("notebook", R_NOTEBOOKS, ids=ids(R_NOTEBOOKS))
def test_r_cells_parse(notebook, tmp_path):
    bodies = [cell.split("\n", 1)[1] if "\n" in cell else "" for cell in r_cells(load(notebook))]
    if shutil.which("Rscript") is None:
        pytest.skip("R is not installed, so the %%R cells cannot be parsed")
    files = []
    for number, body in enumerate(bodies):
        files.append(tmp_path / f"cell{number}.R")
        files[-1].write_text(body)
    script = (
        "for (f in commandArgs(TRUE)) tryCatch(parse(file = f), "
        "error = function(e) cat(basename(f), ': ', conditionMessage(e), '\\n', sep = ''))"
    )
    done = subprocess.run(["Rscript", "-e", script, *map(str, files)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and not done.stdout.strip(), (
        f"%%R cells of {notebook.name} do not parse (cellN counts %%R cells from 0):\n"
        f"{done.stdout}{done.stderr}"
    )
