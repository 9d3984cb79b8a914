"""The instructor's side of the checked exercises, done by nbgrader: a student edition and a grader.

The lessons are nbgrader source notebooks: each checked exercise is an answer cell (the solution
between ``### BEGIN SOLUTION`` and ``### END SOLUTION``) and a check cell (``q1.check()``, or
``kd_check(ex$q1)`` in an R twin, with a hidden test). One lesson is one nbgrader assignment,
``lesson01`` ..., holding both twins.

- ``student_edition(out)`` writes every lesson without solutions (answer regions become
  ``# YOUR CODE HERE``, a stub valid in Python and in an ``%%R`` cell), without hidden tests,
  without the collapsed "Solution" blocks and without the tests' ``# NBVAL_CHECK_OUTPUT`` lines, with
  the exercise cells' outputs cleared, and the course
  map (``README.md``) its links point to; a later call adds lessons to the same folder.
- ``grade(submissions, csv_path)`` autogrades ``SUBMISSIONS/<student>/<lesson notebook>.ipynb``: one
  process per student and lesson, and one CSV, a row per student and a column per question. A cell
  that runs past ``cell_timeout_s`` (an answer cell: ``answer_timeout_s``) is interrupted and the
  lesson goes on, so a hanging answer fails its own question only (the CSV's status names it); a
  lesson that runs past ``timeout_s`` is killed and fails every question of that lesson; the other
  students are still graded.

    kerasdist course student ~/course-student
    kerasdist course grade submissions/ --csv grades.csv --timeout-s 600

Example:
    >>> assignment_of("01_quickstart_R.ipynb")
    'lesson01'
"""

import csv
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from kerasdist.course.exercises.core import CORRECT, INCORRECT, NOT_ATTEMPTED, exercises_of
from kerasdist.errors import KerasdistError

SOURCE = Path(__file__).resolve().parents[2] / "notebooks"
# A stub that is a comment in Python and in R, so an answer cell of an R twin (%%R) still runs.
CODE_STUB = "# YOUR CODE HERE"
DEFAULT_TIMEOUT_S = 600.0
MAX_DEFAULT_CELL_TIMEOUT_S = 120
_CONFIG = """\
c = get_config()  # noqa: F821
c.CourseDirectory.root = {root!r}
c.CourseDirectory.db_url = "sqlite:///" + {db!r}
c.ClearSolutions.code_stub = {{"python": {stub!r}}}
c.ClearSolutions.text_stub = "YOUR ANSWER HERE"
from nbgrader.converters import GenerateAssignment
from kerasdist.course.preprocessors import ClearExerciseOutputs, RemoveSolutionBlocks, RemoveTestMarkers
from nbgrader.preprocessors import ClearOutput
c.GenerateAssignment.preprocessors = [RemoveSolutionBlocks, RemoveTestMarkers] + [
    ClearExerciseOutputs if p is ClearOutput else p
    for p in GenerateAssignment.class_traits()["preprocessors"].default()]
c.Execute.kernel_name = "python3"
c.Execute.timeout = {cell_timeout!r}
from kerasdist.course.instructor import CellTimeouts
c.Execute.timeout_func = CellTimeouts(answer_s={answer_timeout!r}, cell_s={cell_timeout!r})
c.Execute.interrupt_on_timeout = True
"""


def assignment_of(notebook):
    """The nbgrader assignment a lesson notebook belongs to: ``lesson`` and its two digits."""
    match = re.match(r"(\d\d)_", Path(notebook).name)
    if not match:
        raise KerasdistError(f"a lesson notebook's name starts with two digits, e.g. 01_quickstart.ipynb. "
                             f"Received: {Path(notebook).name}")
    return f"lesson{match.group(1)}"


def lesson_assignment(number):
    """The assignment of a lesson given as ``"01"`` or ``"1"``.

    Example:
        >>> lesson_assignment("7")
        'lesson07'
    """
    text = str(number).strip()
    if not text.isdigit() or int(text) > 99:
        raise KerasdistError(f"a lesson is its number, e.g. 01. Received: {number!r}")
    return f"lesson{int(text):02d}"


def cell_timeout(timeout_s, cell_timeout_s=None):
    """A cell's bound in whole seconds: ``cell_timeout_s``, or a third of the lesson's (at most 120).

    Example:
        >>> cell_timeout(600), cell_timeout(240), cell_timeout(600, 30)
        (120, 80, 30)
    """
    if cell_timeout_s is None:
        return max(1, min(MAX_DEFAULT_CELL_TIMEOUT_S, int(timeout_s // 3)))
    if not 0 < cell_timeout_s < timeout_s:
        raise KerasdistError(f"the cell time limit must be shorter than the lesson's ({timeout_s:g} s), "
                             "so that a hanging answer fails its own question only. "
                             f"Received: {cell_timeout_s:g} s")
    return max(1, int(cell_timeout_s))


def answer_timeout(cell_timeout_s, answer_timeout_s=None):
    """An answer cell's bound in whole seconds: ``answer_timeout_s``, or every cell's (``cell_timeout_s``).

    Example:
        >>> answer_timeout(120), answer_timeout(120, 5)
        (120, 5)
    """
    if answer_timeout_s is None:
        return cell_timeout_s
    if not 0 < answer_timeout_s <= cell_timeout_s:
        raise KerasdistError(f"the answer cells' time limit must not be longer than the other cells' "
                             f"({cell_timeout_s:g} s). Received: {answer_timeout_s:g} s")
    return max(1, int(answer_timeout_s))


class CellTimeouts:
    """nbclient's ``timeout_func`` for grading: an answer cell's bound, or every other cell's.

    An answer cell is the one nbgrader names ``qN_answer``: the student's own code, which a teacher
    may bound more tightly than the lesson's own cells (training, measuring).

    Example:
        >>> bounds = CellTimeouts(answer_s=5, cell_s=120)
        >>> bounds({"metadata": {"nbgrader": {"grade_id": "q1_answer"}}}), bounds({"metadata": {}})
        (5, 120)
    """

    def __init__(self, answer_s, cell_s):
        self.answer_s, self.cell_s = answer_s, cell_s

    def __call__(self, cell):
        grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id", "")
        return self.answer_s if grade_id.endswith("_answer") else self.cell_s


def _course_directory(root, source, lessons, cell_timeout_s, answer_timeout_s=None):
    """An nbgrader course in ``root``: its config, and the lessons as source assignments."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "nbgrader_config.py").write_text(_CONFIG.format(
        root=str(root), db=str(root / "gradebook.db"), stub=CODE_STUB, cell_timeout=int(cell_timeout_s),
        answer_timeout=int(answer_timeout_s or cell_timeout_s)))
    for notebook in sorted(source.glob("[0-9][0-9]_*.ipynb")):
        assignment = assignment_of(notebook)
        if lessons and assignment not in lessons:
            continue
        folder = root / "source" / assignment
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copy2(notebook, folder / notebook.name)
        if (source / "figures").is_dir() and not (folder / "figures").exists():
            shutil.copytree(source / "figures", folder / "figures")
    return sorted(p.name for p in (root / "source").iterdir()) if (root / "source").is_dir() else []


def _nbgrader(root, *args, timeout_s=None):
    """Run one nbgrader command in the course ``root``; its own process group, killed at ``timeout_s``."""
    command = [sys.executable, "-m", "nbgrader", *args]
    # nbgrader runs alembic (its database migrations) by name: this Python's scripts come first on PATH.
    scripts = str(Path(sys.executable).parent)
    env = dict(os.environ, PATH=os.pathsep.join([scripts, os.environ.get("PATH", "")]))
    process = subprocess.Popen(command, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               start_new_session=True, env=env)
    try:
        output, _ = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)  # nbgrader and the kernel it started
        process.communicate()
        return None, f"timed out after {timeout_s:g} s"
    return process.returncode, output


def _outside(path, source):
    path = Path(path).expanduser().resolve()
    tree = source.resolve().parent
    if path == tree or tree in path.parents:
        raise KerasdistError(f"the student edition goes outside the course's source tree. Received: {path}; "
                             "choose a folder elsewhere, e.g. ~/kerasdist-student")
    return path


def student_edition(out, source=SOURCE, lessons=(), verbose=True):
    """Write the student edition of the lessons (all, or ``lessons`` like ``["lesson01"]``) into ``out``.

    Returns the notebooks written. ``out`` must be outside the source tree; a lesson already in it is
    refused (a student's work there is never overwritten), others are added beside it.

    Example:
        >>> student_edition("/tmp/kerasdist-student", lessons=["lesson01"])  # doctest: +SKIP
        [PosixPath('/tmp/kerasdist-student/01_quickstart.ipynb'), ...]
    """
    out = _outside(out, Path(source))
    wanted = [path.name for path in sorted(Path(source).glob("[0-9][0-9]_*.ipynb"))
              if not lessons or assignment_of(path) in lessons]
    present = [name for name in wanted if (out / name).exists()]
    if present:
        raise KerasdistError(f"{out} already holds {', '.join(present)}; give a new folder, or only lessons "
                             "it does not hold yet (--lesson NN)")
    with tempfile.TemporaryDirectory(prefix="kerasdist-course-") as work:
        root = Path(work)
        assignments = _course_directory(root, Path(source), set(lessons), cell_timeout(DEFAULT_TIMEOUT_S))
        if not assignments:
            raise KerasdistError(f"no lesson notebooks in {source} for {sorted(lessons) or 'all lessons'}")
        written = []
        out.mkdir(parents=True, exist_ok=True)
        for release in _release(root, assignments):
            for notebook in sorted(release.glob("*.ipynb")):
                shutil.copy2(notebook, out / notebook.name)
                written.append(out / notebook.name)
                if verbose:
                    print(f"student edition: {out / notebook.name}", flush=True)
            if (release / "figures").is_dir():
                shutil.copytree(release / "figures", out / "figures", dirs_exist_ok=True)
    course_map = Path(source).parent / "README.md"
    if course_map.is_file():
        (out / "README.md").write_text(handed_out_map(course_map.read_text()))
    return written


def handed_out_map(readme):
    """The README's course map (what each lesson teaches and needs), with links that work beside the lessons.

    Example:
        >>> handed_out_map("<!-- course-map -->\\n[01](notebooks/01_quickstart.ipynb)\\n<!-- /course-map -->")
        '# The lessons\\n\\n[01](01_quickstart.ipynb)\\n'
    """
    start, end = readme.find("<!-- course-map -->"), readme.find("<!-- /course-map -->")
    body = readme[start + len("<!-- course-map -->"):end] if 0 <= start < end else ""
    body = re.sub(r"<!-- /?[\w-]+ -->\n?", "", body).replace("](notebooks/", "](")
    return f"# The lessons\n\n{body.strip()}\n"


def _release(root, assignments):
    """nbgrader's student edition of the ``assignments`` of the course in ``root``, all in one nbgrader run;
    return their folders ``root/release/<assignment>``."""
    code, output = _nbgrader(root, "generate_assignment", "--force", "--CourseDirectory.assignment_id=*")
    if code != 0:
        raise KerasdistError(f"nbgrader could not make the student edition of {', '.join(assignments)}: "
                             f"{_last_error(output)}")
    releases = [root / "release" / assignment for assignment in assignments]
    for notebook in (notebook for release in releases for notebook in release.glob("*.ipynb")):
        if "BEGIN SOLUTION" in notebook.read_text():  # nbgrader ignored the course's configuration
            raise KerasdistError(f"nbgrader left solutions in {notebook.name}: {_last_error(output)}")
    return releases


def _last_error(output):
    lines = [line for line in (output or "").splitlines() if line.strip()]
    errors = [line for line in lines if "Error" in line or "error" in line]
    return (errors or lines or ["no output"])[-1].strip()[:300]


def _submissions(folder):
    """{student: [notebook path, ...]} from ``folder/<student>/*.ipynb``."""
    folder = Path(folder)
    if not folder.is_dir():
        raise KerasdistError(f"submissions must be a folder of <student>/<lesson notebook>.ipynb. "
                             f"Received: {folder}")
    found = {student.name: sorted(student.glob("[0-9][0-9]_*.ipynb"))
             for student in sorted(folder.iterdir()) if student.is_dir()}
    found = {student: notebooks for student, notebooks in found.items() if notebooks}
    if not found:
        raise KerasdistError(f"no submissions in {folder}: expected {folder}/<student>/01_quickstart.ipynb")
    return found


def grade(submissions, csv_path, source=SOURCE, timeout_s=DEFAULT_TIMEOUT_S, verbose=True,
          cell_timeout_s=None, whole=False, answer_timeout_s=None):
    """Grade every student's lesson notebooks; write one CSV (a row per student, a column per question).

    Each answer cell is checked in its exercise's own context (``kerasdist.course.grading``: seconds
    a student); an exercise that needs what its lesson computed, or every exercise with ``whole``,
    is graded by ``nbgrader autograde`` executing the student's whole lesson in its own process,
    bounded by ``timeout_s`` (past it, that lesson's questions score 0 and its status says so). A
    cell that runs past ``cell_timeout_s`` (see ``cell_timeout``; an answer cell: ``answer_timeout_s``,
    by default the same) is interrupted and the lesson goes on: its question scores 0 and the status
    names it, as it names an answer stopped at its check's time limit. A question of a notebook the
    student did not hand in (the other twin, another lesson) is left empty and not counted in
    ``max_score``. Returns the rows written.

    Example:
        >>> grade("submissions", "grades.csv", timeout_s=300)  # doctest: +SKIP
    """
    from kerasdist.course import grading

    per_cell = cell_timeout(timeout_s, cell_timeout_s)
    per_answer = answer_timeout(per_cell, answer_timeout_s)
    found = _submissions(submissions)
    lessons = {assignment_of(nb) for notebooks in found.values() for nb in notebooks}
    questions = _questions(Path(source), lessons)
    scores, status = {}, {}
    for student, notebooks in found.items():
        for assignment in {assignment_of(nb) for nb in notebooks}:
            status[student, assignment] = "graded"
    if not whole:
        points = {(notebook, question): value for _, notebook, question, value in questions}
        verdicts = grading.grade_answers(found, verbose)
        for (student, notebook, question), (verdict, message) in verdicts.items():
            scores[student, notebook, question] = points[notebook, question] if verdict == CORRECT else 0.0
            if "ran past" in message:
                status[student, assignment_of(notebook)] += f", {notebook} {question} ran past its time limit"
            elif verdict not in (CORRECT, INCORRECT, NOT_ATTEMPTED):  # R without keras3, a crashed session
                status[student, assignment_of(notebook)] += f", {notebook} {question} not checked ({message})"
    rest = {student: [nb for nb in notebooks if whole or any(
                grading.needs_the_lesson(q) for q in exercises_of(nb.name[:2]))]
            for student, notebooks in found.items()}
    rest = {student: notebooks for student, notebooks in rest.items() if notebooks}
    if rest:
        autograded, autostatus = _autograde(rest, Path(source), timeout_s, per_cell, per_answer, verbose)
        for key, score in autograded.items():
            exercise = {q.name: q for q in exercises_of(key[1][:2])}.get(key[2])
            if whole or (exercise is not None and grading.needs_the_lesson(exercise)):
                scores[key] = score
        for key, text in autostatus.items():
            status[key] = text if text.startswith(("timed out", "error")) or whole else (
                status[key] + text.removeprefix("graded"))
    return _write_csv(csv_path, found, questions, scores, status)


def _questions(source, lessons):
    """(assignment, notebook stem, question, points) of the lessons' checks, in each notebook's order."""
    import nbformat

    found = []
    for notebook in sorted(source.glob("[0-9][0-9]_*.ipynb")):
        if assignment_of(notebook) not in lessons:
            continue
        checks = [cell.metadata["nbgrader"] for cell in nbformat.read(notebook, as_version=4).cells
                  if cell.cell_type == "code" and cell.metadata.get("nbgrader", {}).get("grade")]
        found += [(assignment_of(notebook), notebook.stem, meta["grade_id"], float(meta.get("points", 1)))
                  for meta in sorted(checks, key=lambda meta: _question_order(meta["grade_id"]))]
    return found


def _autograde(found, source, timeout_s, per_cell, per_answer, verbose):
    """``nbgrader autograde`` of each student's lessons: ``(scores, status)`` keyed as ``grade`` keys them."""
    from nbgrader.api import Gradebook, MissingEntry

    lessons = {assignment_of(nb) for notebooks in found.values() for nb in notebooks}
    scores, status = {}, {}
    with tempfile.TemporaryDirectory(prefix="kerasdist-grading-") as work:
        root = Path(work)
        # The student editions record the lessons' questions in the gradebook.
        _release(root, _course_directory(root, source, lessons, per_cell, per_answer))
        for student, notebooks in found.items():
            for assignment in sorted({assignment_of(nb) for nb in notebooks}):
                folder = root / "submitted" / student / assignment
                folder.mkdir(parents=True, exist_ok=True)
                for notebook in notebooks:
                    if assignment_of(notebook) == assignment:
                        shutil.copy2(notebook, folder / notebook.name)
                code, output = _nbgrader(root, "autograde", assignment, "--student", student, "--force",
                                         "--create", timeout_s=timeout_s)
                status[student, assignment] = "graded" if code == 0 else (
                    output if code is None else f"error: {_last_error(output)}")
                if code == 0:
                    stopped = _stopped_questions(root / "autograded" / student / assignment)
                    status[student, assignment] += "".join(f", {what}" for what in stopped)
                if verbose:
                    print(f"{student} {assignment}: {status[student, assignment]}", flush=True)
        with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gradebook:
            for assignment in sorted(lessons):
                for student in found:
                    for notebook in gradebook.find_assignment(assignment).notebooks:
                        try:
                            submitted = gradebook.find_submission_notebook(notebook.name, assignment, student)
                        except MissingEntry:
                            continue
                        for result in submitted.grades:
                            scores[student, notebook.name, result.name] = result.score
    return scores, status


def _stopped_questions(folder):
    """What ran past a time limit in a student's graded lesson ("01_quickstart q1 ran past its time limit").

    A cell that nbgrader interrupted at its bound (an answer cell counts for its question),
    and a check that stopped the answer at the check's own limit (its verdict says "ran past").
    """
    import nbformat

    stopped = []
    for path in sorted(folder.glob("*.ipynb")):
        for index, cell in enumerate(nbformat.read(path, as_version=4).cells):
            if cell.cell_type != "code":
                continue
            errors = [output for output in cell.get("outputs", []) if output.get("output_type") == "error"]
            grade_id = cell.metadata.get("nbgrader", {}).get("grade_id", "").removesuffix("_answer")
            where = f"{path.stem} {grade_id or f'cell {index + 1}'}"
            if any(output.get("ename") == "CellTimeoutError" for output in errors) or (
                    grade_id and any("ran past" in output.get("evalue", "") for output in errors)):
                stopped.append(f"{where} ran past its time limit")
    return list(dict.fromkeys(stopped))


def _question_order(name):
    digits = re.sub(r"\D", "", name)
    return (int(digits) if digits else 0, name)


def _write_csv(csv_path, found, questions, scores, status):
    columns = [f"{notebook}:{question}" for _, notebook, question, _ in questions]
    rows = []
    for student, notebooks in found.items():
        row = {"student": student}
        submitted = {path.stem for path in notebooks}
        score = max_score = 0.0
        for (assignment, notebook, question, points), column in zip(questions, columns):
            if notebook not in submitted:  # the other twin of a lesson, or a lesson not handed in
                row[column] = ""
                continue
            graded = status.get((student, assignment), "").startswith("graded")
            row[column] = scores.get((student, notebook, question), 0.0) if graded else 0.0
            score, max_score = score + row[column], max_score + points
        row["score"], row["max_score"] = score, max_score
        row["status"] = "; ".join(f"{a}: {s}" for (name, a), s in sorted(status.items()) if name == student)
        rows.append(row)
    csv_path = Path(csv_path)
    csv_path.parent.mkdir(parents=True, exist_ok=True)
    with open(csv_path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["student", *columns, "score", "max_score", "status"])
        writer.writeheader()
        writer.writerows(rows)
    return rows
