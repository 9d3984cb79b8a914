"""The instructor's editions (nbgrader): the student edition, and grading submitted notebooks into a CSV."""

import csv
import re
import time

import nbformat
import pytest
from nbclient import NotebookClient

from helpers import run_cli
from kerasdist.course import instructor as course
from kerasdist.course.exercises import exercises_of


@pytest.fixture(scope="module")
def student(tmp_path_factory):
    out = tmp_path_factory.mktemp("edition") / "student"
    run = run_cli("course", "student", str(out))
    assert run.returncode == 0, run.stderr
    return out


def instructor_lines_outside_answers(path):
    """The lines of a lesson that are not in an answer cell or a collapsed solution."""
    notebook = nbformat.read(path, as_version=4)
    text = [course_free(cell) for cell in notebook.cells
            if not cell.metadata.get("nbgrader", {}).get("solution")]
    return set(line.strip() for cell in text for line in cell.splitlines())


def course_free(cell):
    from kerasdist.course.preprocessors import without_solutions

    return without_solutions(cell.source) if cell.cell_type == "markdown" else cell.source


@pytest.mark.slow
def test_student_edition_holds_no_solution_and_no_hidden_test(student):
    notebooks = sorted(student.glob("*.ipynb"))
    assert [p.name for p in notebooks] == sorted(p.name for p in course.SOURCE.glob("[0-9][0-9]_*.ipynb"))
    assert (student / "figures").is_dir()
    for path in notebooks:
        text = path.read_text()
        for marker in ("BEGIN SOLUTION", "HIDDEN TESTS", "assert_correct", "<summary>Solution", "NBVAL_"):
            assert marker not in text, f"{path.name}: {marker}"
        notebook = nbformat.read(path, as_version=4)
        shown = set(line.strip() for cell in notebook.cells for line in cell.source.splitlines())
        language = "r" if path.stem.endswith("_R") else "python"
        elsewhere = instructor_lines_outside_answers(course.SOURCE / path.name)
        for exercise in exercises_of(path.name[:2]):
            if language not in exercise.solutions:
                continue
            # Every line of the solution that the lesson does not show elsewhere is gone.
            telling = [line.strip() for line in exercise.solutions[language].splitlines()
                       if len(line.strip()) > 15 and line.strip() not in elsewhere]
            assert telling, f"{exercise.name}: its solution repeats the lesson"
            for line in telling:
                assert line not in shown, f"{path.name} {exercise.name}: {line}"
        exercise_cells = [c for c in notebook.cells if c.cell_type == "code" and "nbgrader" in c.metadata]
        assert exercise_cells and all(not c.outputs for c in exercise_cells)
        assert any(c.get("outputs") for c in notebook.cells if c.cell_type == "code"), "lesson outputs kept"


def test_the_student_edition_drops_the_nbval_lines_of_code_cells_and_keeps_the_rest():
    from kerasdist.course.preprocessors import RemoveTestMarkers

    cells = [nbformat.v4.new_code_cell("# NBVAL_CHECK_OUTPUT\n# Check the answer.\nq1.check()"),
             nbformat.v4.new_code_cell("%%R\n# NBVAL_CHECK_OUTPUT\nkd_check(ex$q1)"),
             nbformat.v4.new_code_cell("print('# NBVAL_CHECK_OUTPUT is only a comment here')"),
             nbformat.v4.new_markdown_cell("Cells that start with `# NBVAL_CHECK_OUTPUT`\n# NBVAL_CHECK_OUTPUT\n")]
    handed_out = [RemoveTestMarkers().preprocess_cell(cell.copy(), {}, index)[0].source
                  for index, cell in enumerate(cells)]
    assert handed_out[:3] == ["# Check the answer.\nq1.check()", "%%R\nkd_check(ex$q1)", cells[2].source]
    assert handed_out[3] == cells[3].source  # markdown is left as written


@pytest.mark.slow
def test_student_edition_reads_as_written_and_its_links_resolve(student):
    from markdown_it import MarkdownIt

    markdown = MarkdownIt("commonmark")
    tags = re.compile(r"<summary>.*?</summary>|<[^>]+>", re.S)
    assert (student / "README.md").is_file()
    for path in [*sorted(student.glob("*.ipynb")), student / "README.md"]:
        cells = ([cell.source for cell in nbformat.read(path, as_version=4).cells if cell.cell_type == "markdown"]
                 if path.suffix == ".ipynb" else [path.read_text()])
        for source in cells:
            # Markdown swallowed by an HTML block (a list item glued to </details>) would show as raw text.
            swallowed = [tags.sub("", token.content).strip() for token in markdown.parse(source)
                         if token.type == "html_block"]
            assert not any(swallowed), f"{path.name}: {swallowed}"
            for target in re.findall(r"\]\(([^)#\s]+)", source):
                if not re.match(r"[a-z]+:", target):
                    assert (student / target).exists(), f"{path.name} links to {target}"


@pytest.mark.slow
def test_lessons_are_added_to_an_edition_and_a_lesson_already_there_is_refused(tmp_path):
    out = tmp_path / "student"
    assert run_cli("course", "student", str(out), "--lesson", "01").returncode == 0
    added = run_cli("course", "student", str(out), "--lesson", "02")
    assert added.returncode == 0, added.stderr
    assert sorted(p.name[:2] for p in out.glob("*.ipynb")) == ["01", "01", "02", "02"]
    again = run_cli("course", "student", str(out), "--lesson", "01")
    assert again.returncode == 2 and "already holds 01_quickstart.ipynb, 01_quickstart_R.ipynb" in again.stderr


@pytest.mark.slow
def test_student_edition_runs_to_its_first_exercise_which_says_not_attempted(student, tmp_path):
    notebook = nbformat.read(student / "01_quickstart.ipynb", as_version=4)
    first_check = next(i for i, c in enumerate(notebook.cells) if c.metadata.get("nbgrader", {}).get("grade"))
    notebook.cells = notebook.cells[:first_check + 1]
    NotebookClient(notebook, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(student)}}).execute()
    printed = "".join(o.get("text", "") for o in notebook.cells[-1].outputs)
    assert "Not attempted\x1b[0m: define per_replica_batch (it is still None)" in printed


def answered(notebook, answers):
    """The notebook with each answer cell's stub replaced by ``answers[grade_id]``."""
    for cell in notebook.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id", "")
        if grade_id.endswith("_answer") and grade_id in answers:
            cell.source = cell.source.replace(course.CODE_STUB, answers[grade_id])
    return notebook


def made_up_class(student, folder):
    """Two submissions of lesson 01: all right; and one with a wrong answer (q2) and an answer cell that never
    ends (q1)."""
    q1, q2, q3 = exercises_of("01")[:3]
    solutions = {f"{q.name}_answer": q.solutions["python"] for q in (q1, q2, q3)}
    submissions = {
        "alice": solutions,
        "bob": dict(solutions, q1_answer="while True:\n    pass", q2_answer=q2.wrong[0].code["python"]),
    }
    for name, answers in submissions.items():
        (folder / name).mkdir(parents=True)
        notebook = answered(nbformat.read(student / "01_quickstart.ipynb", as_version=4), answers)
        nbformat.write(notebook, folder / name / "01_quickstart.ipynb")
    return folder


def graded(folder, csv_path, *options, bound=600):
    run = run_cli("course", "grade", str(folder), "--csv", str(csv_path), "--timeout-s", str(bound), *options,
                  timeout=5 * bound)
    assert run.returncode == 0, run.stderr
    return {row["student"]: row for row in csv.DictReader(open(csv_path))}


@pytest.mark.slow
def test_grading_a_class_each_answer_alone_equals_running_each_lesson_and_a_hang_costs_its_question(
        student, tmp_path):
    submitted = made_up_class(student, tmp_path / "submitted")
    started = time.monotonic()
    whole = graded(submitted, tmp_path / "whole.csv", "--whole", "--answer-timeout-s", "5")
    assert time.monotonic() - started < 2 * 600  # bob's q1 cell was stopped at its bound, not left to loop
    fast = graded(submitted, tmp_path / "fast.csv")
    columns = ["01_quickstart:q1", "01_quickstart:q2", "01_quickstart:q3"]
    assert [float(whole["alice"][c]) for c in columns] == [1.0, 1.0, 1.0]
    # Bob's first answer never ends: that cell is stopped at the answer cells' bound (5 s), while the
    # lesson's own cells keep theirs (120 s: lesson 01's training cell took over 20 s on a loaded machine).
    # His wrong second answer scores 0; his third is graded.
    assert [float(whole["bob"][c]) for c in columns] == [0.0, 0.0, 1.0], whole["bob"]["status"]
    assert whole["alice"]["status"] == "lesson01: graded"
    assert whole["bob"]["status"] == "lesson01: graded, 01_quickstart q1 ran past its time limit"
    assert float(whole["alice"]["score"]) == float(whole["alice"]["max_score"]) == 3.0  # one twin handed in
    assert whole["alice"]["01_quickstart_R:q1"] == ""
    assert fast == whole  # every answer checked alone gives the same row as the whole lesson run


def test_course_commands_refuse_bad_input_in_one_line(tmp_path):
    inside = run_cli("course", "student", str(course.SOURCE / "student"))
    assert inside.returncode == 2
    assert inside.stderr.startswith("kerasdist: error: the student edition goes outside the course's source tree")
    empty = run_cli("course", "grade", str(tmp_path))
    assert empty.returncode == 2 and "no submissions in" in empty.stderr and "Traceback" not in empty.stderr
    cell = run_cli("course", "grade", str(tmp_path), "--timeout-s", "60", "--cell-timeout-s", "60")
    assert cell.returncode == 2 and "the cell time limit must be shorter than the lesson's (60 s)" in cell.stderr
    answer = run_cli("course", "grade", str(tmp_path), "--cell-timeout-s", "30", "--answer-timeout-s", "40")
    assert answer.returncode == 2 and answer.stderr.strip().endswith(
        "the answer cells' time limit must not be longer than the other cells' (30 s). Received: 40 s")
    lesson = run_cli("course", "student", str(tmp_path / "s"), "--lesson", "one")
    assert lesson.returncode == 2 and "a lesson is its number, e.g. 01. Received: 'one'" in lesson.stderr
