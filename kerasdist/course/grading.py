"""Grading a class in minutes: every answer cell checked in its exercise's own context.

``nbgrader autograde`` executes a student's whole lesson, about a minute a student and lesson on two
cores. An answer needs only what its exercise's check sets up (the lesson's imports and helpers, the
exercise's ``context``), so the grader checks each answer cell as the self-test checks the answer
key: one child process per lesson and language checks every student's answers in turn, each
within its check's time limits (``kerasdist.course.exercises.sessions``). An exercise whose answer
reads what the lesson computed before it (``LESSON_STATE`` in its ``needs``: lesson 08's runs and
timings, lesson 09's timings) is left to ``nbgrader autograde`` of that student's whole lesson
(``kerasdist.course.instructor`` does both).

Example:
    >>> answer_code("%%R\\nx <- NULL  # a number\\nx <- 4\\n")
    'x <- NULL  # a number\\nx <- 4\\n'
"""

import threading
from pathlib import Path

from kerasdist.course.exercises.core import CORRECT, LESSON_STATE, exercises_of
from kerasdist.course.exercises.sessions import run_cases


def answer_code(source):
    """An answer cell's code, without the ``%%R`` line of an R twin's cell."""
    return source.removeprefix("%%R\n")


def language_of(notebook):
    return "r" if Path(notebook).stem.endswith("_R") else "python"


def answer_cells(path):
    """``{exercise name: code}`` of a submitted notebook's answer cells (nbgrader's ``qN_answer``)."""
    import nbformat

    found = {}
    for cell in nbformat.read(path, as_version=4).cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id", "")
        if cell.cell_type == "code" and grade_id.endswith("_answer"):
            found[grade_id.removesuffix("_answer")] = answer_code(cell.source)
    return found


def needs_the_lesson(exercise):
    """Whether an exercise's answer reads what its lesson computed, so only a whole-lesson run grades it."""
    return LESSON_STATE in exercise.needs


def grade_answers(submitted, progress=True, workers=2):
    """Check the answers of ``submitted`` (``{student: [notebook path, ...]}``) one by one.

    Returns ``{(student, notebook stem, exercise): (status, message)}`` for every exercise that does
    not need its lesson's state; exercises missing from a notebook count as not attempted. The
    students of a lesson are shared among ``workers`` child processes that run side by side.
    """
    from tqdm import tqdm

    jobs = {}  # (lesson, language) -> cases
    for student, notebooks in submitted.items():
        for path in notebooks:
            lesson, language = Path(path).name[:2], language_of(path)
            cells = answer_cells(path)
            for exercise in exercises_of(lesson):
                if language not in exercise.solutions or needs_the_lesson(exercise):
                    continue
                cases = jobs.setdefault((lesson, language), [])
                cases.append({"index": len(cases), "lesson": lesson, "exercise": exercise.name,
                              "student": student, "notebook": Path(path).stem,
                              "code": cells.get(exercise.name, exercise.starters[language]),
                              "context": exercise.context.get(language, ""), "time_limit_s": None,
                              "needs_keras3": "keras3" in exercise.needs})
    verdicts = {}
    left = {}
    for cases in jobs.values():
        for case in cases:
            left[case["student"]] = left.get(case["student"], 0) + 1
    lock = threading.Lock()

    def check(lesson, language, cases):
        for case, status, message, _ in run_cases(lesson, language, cases):
            with lock:
                verdicts[case["student"], case["notebook"], case["exercise"]] = (status, message)
                bar.update()
                left[case["student"]] -= 1
                if progress and not left[case["student"]]:
                    mine = [v for (s, _, _), v in verdicts.items() if s == case["student"]]
                    correct = sum(status == CORRECT for status, _ in mine)
                    bar.write(f"{case['student']}: {correct} of {len(mine)} answers correct")

    with tqdm(total=sum(left.values()), desc="answers checked", unit="answer", disable=not progress) as bar:
        for (lesson, language), cases in sorted(jobs.items()):
            students = sorted({case["student"] for case in cases})
            shares = [[case for case in cases if case["student"] in students[part::workers]]
                      for part in range(workers)]
            threads = [threading.Thread(target=check, args=(lesson, language, share))
                       for share in shares if share]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
    return verdicts
