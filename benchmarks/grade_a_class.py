"""Grade a made-up class of one lesson and time it: each answer alone, and (for some) each whole lesson.

The class is written from the lesson's student edition and its answer key: each student answers
every exercise with one of, in rotation, the solution (8 in 20), a right answer written otherwise
(4), a typical wrong answer (5), an answer cell that raises (2) and one that never ends (1).
``kerasdist course grade`` grades them all by checking each answer cell in its exercise's context;
``--compare N`` also grades the first N whole (nbgrader executing every lesson) and says whether the
two CSVs hold the same rows.

    python benchmarks/grade_a_class.py --students 100 --compare 10     # lesson 01, Python twin

Exit status: 0 when the grading ran and the compared rows are equal, 1 otherwise.
"""

import argparse
import csv
import itertools
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat

from kerasdist.course.exercises import exercises_of

CODE_STUB = "# YOUR CODE HERE"


def kinds_of_answer(exercise):
    """(kind, answer code) for one exercise, as often as a class might write them (20 in all)."""
    right = ([answer["python"] for answer in exercise.right if "python" in answer]
             or [exercise.solutions["python"]])
    wrong = [answer.code["python"] for answer in exercise.wrong]
    yield from [("solution", exercise.solutions["python"])] * 8
    yield from (("right", right[n % len(right)]) for n in range(4))
    yield from (("wrong", wrong[n % len(wrong)]) for n in range(5))
    yield from [("raises", "raise RuntimeError('a typo in the answer cell')")] * 2
    yield "never ends", "while True:\n    pass"


def write_class(edition, lesson, students, folder):
    """``students`` submissions of ``lesson``'s Python notebook, the kinds of answer in rotation."""
    notebook_path = next(edition.glob(f"{lesson}_*[!R].ipynb"))
    answers = {q.name: list(kinds_of_answer(q)) for q in exercises_of(lesson) if "python" in q.solutions}
    for number in range(students):
        notebook = nbformat.read(notebook_path, as_version=4)
        for cell in notebook.cells:
            grade_id = cell.metadata.get("nbgrader", {}).get("grade_id", "")
            name = grade_id.removesuffix("_answer")
            if grade_id.endswith("_answer") and name in answers:
                kind, code = answers[name][(number + int(name[1:])) % len(answers[name])]
                cell.source = cell.source.replace(CODE_STUB, code)
        (folder / f"student{number:03d}").mkdir(parents=True)
        nbformat.write(notebook, folder / f"student{number:03d}" / notebook_path.name)


def grade(folder, csv_path, *options):
    started = time.monotonic()
    run = subprocess.run([sys.executable, "-m", "kerasdist", "course", "grade", str(folder), "--csv",
                          str(csv_path), *options], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         text=True, timeout=6 * 3600)
    if run.returncode != 0:
        raise SystemExit(f"grading failed: {run.stderr.strip().splitlines()[-1:]}")
    with open(csv_path, newline="") as stream:
        return time.monotonic() - started, {row["student"]: row for row in csv.DictReader(stream)}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lesson", default="01")
    parser.add_argument("--students", type=int, default=100)
    parser.add_argument("--compare", type=int, default=10, help="grade this many whole too (0: none)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="kerasdist-class-") as work:
        work = Path(work)
        subprocess.run([sys.executable, "-m", "kerasdist", "course", "student", str(work / "edition"),
                        "--lesson", args.lesson], check=True, stdout=subprocess.DEVNULL, timeout=1800)
        write_class(work / "edition", args.lesson, args.students, work / "class")
        fast_s, fast = grade(work / "class", work / "fast.csv")
        print(f"{args.students} students of lesson {args.lesson}, each answer checked alone: {fast_s:.0f} s "
              f"({fast_s / args.students:.1f} s a student)")
        equal = True
        if args.compare:
            some = work / "some"
            for student in itertools.islice(sorted((work / "class").iterdir()), args.compare):
                (some / student.name).mkdir(parents=True)
                for notebook in student.iterdir():
                    (some / student.name / notebook.name).write_bytes(notebook.read_bytes())
            whole_s, whole = grade(some, work / "whole.csv", "--whole")
            equal = all(whole[name] == fast[name] for name in whole)
            print(f"{args.compare} of them, each whole lesson executed: {whole_s:.0f} s "
                  f"({whole_s / args.compare:.1f} s a student); the same rows as checking each answer "
                  f"alone: {'yes' if equal else 'NO'}")
            for name in sorted(whole):
                if whole[name] != fast[name]:
                    print(f"  {name}: whole {whole[name]} / alone {fast[name]}")
    return 0 if equal else 1


if __name__ == "__main__":
    sys.exit(main())
