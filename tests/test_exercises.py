"""The checked exercises: each lesson has them, the lessons hold their code, and every check can fail.

The self-test runs each exercise, in Python and (in Rscript, through the R package's kd_verdict()) in R,
with its solution (Correct), its untouched starter (Not attempted) and its typical wrong answers
(Incorrect, with the expected message), in a process of its own with the lesson's backend and devices.
"""

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import numpy as np
import pytest

from kerasdist.course.exercises import Exercise, Language, exercises_of
from kerasdist.course.exercises.core import CORRECT, INCORRECT, NOT_ATTEMPTED
from kerasdist.course.exercises.fixtures import real_number, whole_number
from kerasdist.course.exercises.selftest import r_cases, run_lesson

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = REPO / "notebooks"
LESSONS = sorted({p.name[:2] for p in NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")})
MINIMUM = {"00": 2}  # every other lesson has at least 3


def lesson_notebooks(lesson):
    """(language, notebook) of a lesson's Python lesson and R twin."""
    for path in sorted(NOTEBOOKS.glob(f"{lesson}_*.ipynb")):
        yield ("r" if path.stem.endswith("_R") else "python"), path


def answer_cells(notebook):
    """{grade_id: (starter, solution)} of the nbgrader answer cells; the %%R line dropped."""
    found = {}
    for cell in notebook.cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type == "code" and meta.get("solution"):
            text = cell.source.removeprefix("%%R\n")
            starter, _, rest = text.partition("\n### BEGIN SOLUTION\n")
            solution, _, after = rest.partition("\n### END SOLUTION")
            assert not after.strip(), f"{meta['grade_id']}: code after the solution region"
            found[meta["grade_id"]] = (starter, solution)
    return found


def check_cells(notebook):
    return {cell.metadata["nbgrader"]["grade_id"]: cell for cell in notebook.cells
            if cell.cell_type == "code" and cell.metadata.get("nbgrader", {}).get("grade")}


@pytest.mark.parametrize("lesson", LESSONS)
def test_every_lesson_has_its_checked_exercises(lesson):
    exercises = exercises_of(lesson)
    assert len(exercises) >= MINIMUM.get(lesson, 3)
    for exercise in exercises:
        assert exercise.wrong, f"{exercise.name}: no typical wrong answer to show the check can fail"
        assert len(exercise.hints) >= 2, f"{exercise.name}: graded hints, at least 2"
        for language in exercise.solutions:
            assert all(language in wrong.code for wrong in exercise.wrong)
            assert exercise.hint_text(len(exercise.hints), language)


@pytest.mark.parametrize("lesson", LESSONS)
def test_printing_an_exercise_shows_its_title_not_its_solution(lesson):
    for exercise in exercises_of(lesson):
        shown = repr(exercise) + str(exercise)
        assert exercise.title in shown
        leaked = [code for code in (*exercise.solutions.values(), *(w.code[k] for w in exercise.wrong for k in w.code))
                  if code.strip() and code.strip().splitlines()[-1].strip() in shown]
        assert not leaked, f"printing {exercise.name} shows answer-key code"


@pytest.mark.parametrize("lesson", LESSONS)
def test_lessons_hold_each_exercise_with_its_solution_and_a_correct_check(lesson):
    for language, path in lesson_notebooks(lesson):
        notebook = nbformat.read(path, as_version=4)
        answers, checks = answer_cells(notebook), check_cells(notebook)
        expected = [q for q in exercises_of(lesson) if language in q.solutions]
        assert sorted(checks) == sorted(q.name for q in expected), path.name
        for exercise in expected:
            starter, solution = answers[f"{exercise.name}_answer"]
            assert starter == exercise.starters[language], f"{path.name} {exercise.name}: starter"
            assert solution == exercise.solutions[language], f"{path.name} {exercise.name}: solution"
            check = checks[exercise.name]
            call = f"kd_check(ex${exercise.name})" if language == "r" else f"{exercise.name}.check()"
            assert call in check.source and "BEGIN HIDDEN TESTS" in check.source
            printed = "".join(output.get("text", "") for output in check.get("outputs", []))
            assert f"{CORRECT}\x1b[0m: " in printed, f"{path.name} {exercise.name}: committed without Correct"


@pytest.mark.slow  # an R session (about 20 s): make test
def test_verdicts_speak_the_students_language():
    q1 = exercises_of("01")[0]
    assert str(q1.verdict({}, "python")).startswith(f"{NOT_ATTEMPTED}: define per_replica_batch (it is not")
    assert "(it is still NULL)" in q1.verdict({"per_replica_batch": None}, "r").message
    # R's numbers are doubles: a whole one is a right answer there, a float is not in Python.
    assert q1.verdict({"per_replica_batch": lambda g, n: g / n}, "r").correct
    assert "not a whole number" in q1.verdict({"per_replica_batch": lambda g, n: g / n + 0.5}, "r").message
    assert "divide with //" in q1.verdict({"per_replica_batch": lambda g, n: g / n}, "python").message
    assert Language.of("r").value([1.0, 2.5]) == "c(1, 2.5)"
    raising = q1.verdict({"per_replica_batch": lambda g, n: 1 // 0})
    assert raising.message.startswith(
        "per_replica_batch raised ZeroDivisionError: integer division or modulo by zero (line ")
    assert "1 // 0" in raising.message  # the student's own line


def test_a_check_always_ends_in_a_verdict_and_within_its_time_limit():
    q1 = exercises_of("01")[0]

    def endless(global_batch, replicas):
        while True:
            try:
                pass
            except Exception:  # an answer's own handler cannot swallow the time limit
                pass

    started = time.monotonic()
    verdict = q1.verdict({"per_replica_batch": endless}, time_limit_s=1)
    assert time.monotonic() - started < 10
    assert verdict.status == INCORRECT and verdict.message.startswith("your code ran past 1 s")
    assert not verdict.internal
    # The limit is gone once the check ends: nothing fires later in the student's kernel.
    time.sleep(1.5)
    not_a_function = q1.verdict({"per_replica_batch": 32})
    assert not_a_function.status == INCORRECT and "not a function" in not_a_function.message


def test_an_error_of_the_check_itself_is_an_incorrect_marked_internal():
    def check(answers, language):
        return len(answers["n"])  # a check that forgot that n may be a number

    q = Exercise("00", "q9", "n", ("n",), check, hints=("a", "b"), solutions={}, starters={})
    verdict = q.verdict({"n": 3})
    assert verdict.status == INCORRECT and verdict.internal
    assert "TypeError" in verdict.message and "Traceback" not in verdict.message


def test_what_an_answer_prints_is_kept_and_check_shows_its_start(capsys):
    calls = []

    def loud(global_batch, replicas):
        calls.append(1)
        print("x" * 100_000)
        return global_batch // replicas

    exercises_of("01")[0].check({"per_replica_batch": loud})
    shown = capsys.readouterr().out
    assert f"[... {len(calls) * 100_001 - 2000} more characters your code printed]" in shown
    assert f"{CORRECT}\x1b[0m: " in shown and len(shown) < 3000


def test_typing_an_exercise_shows_no_solution():
    for lesson in LESSONS:
        for exercise in exercises_of(lesson):
            shown = repr(exercise)
            assert shown.startswith(f"<exercise {lesson} {exercise.name}") and "def " not in shown


def test_whole_numbers_follow_the_students_language():
    python, r = Language.of("python"), Language.of("r")
    assert [whole_number(v, python) for v in (3, np.int64(3), tf_scalar(3), 3.0, np.float32(3), True, "3")] == [
        3, 3, 3, None, None, None, None]
    assert [whole_number(v, r) for v in (3, 3.0, 3.5)] == [3, 3, None]
    assert [real_number(v) for v in (0.5, np.float32(0.5), 2, np.bool_(True), None)] == [0.5, 0.5, 2.0, None, None]


def tf_scalar(value):
    import tensorflow as tf

    return tf.constant(value)


def with_r_package(environment):
    """``environment`` with the project's R library (make setup installs the R package there) on R_LIBS."""
    return dict(environment, R_LIBS=os.pathsep.join(
        [str(REPO / ".Rlib")] + ([environment["R_LIBS"]] if environment.get("R_LIBS") else [])))


def test_the_r_session_is_bounded_and_each_case_it_did_not_reach_is_an_error(monkeypatch):
    if not shutil.which("Rscript"):
        pytest.skip("R is not installed")
    monkeypatch.setenv("R_LIBS", with_r_package(os.environ)["R_LIBS"])
    rows = list(run_lesson("00", languages=("r",), timeout_s=1))
    assert [row["case"] for row in rows] == [case["case"] for case in r_cases("00")]
    assert {row["status"] for row in rows} == {"error"}
    assert rows[0]["message"].startswith("timed out after 1 s before this case: ")


@pytest.mark.slow
@pytest.mark.parametrize("lesson", LESSONS)
def test_each_exercise_passes_its_solution_and_fails_its_starter_and_wrong_answers(lesson):
    run = subprocess.run([sys.executable, "-m", "kerasdist.course.exercises", "selftest", lesson],
                         capture_output=True, text=True, timeout=1500, env=with_r_package(os.environ), cwd=REPO)
    rows = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    assert rows, run.stderr[-3000:]
    ran = [row for row in rows if row["status"] != "skipped"]
    for row in rows:
        if row["status"] == "skipped":  # only R without keras3 (CI): the Python rows still ran
            assert row["message"] == "the R package keras3 is not installed", row
            continue
        assert row["status"] == row["expected"], row
        assert row["expected_message"] in row["message"], row
    python_rows = [row for row in ran if row["language"] == "python"]
    if any("python" in q.solutions for q in exercises_of(lesson)):
        assert {row["case"] for row in python_rows} >= {"solution", "starter", "wrong 1"}
    assert run.returncode == 0, run.stderr[-3000:]
