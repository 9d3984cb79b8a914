"""Every exercise of a lesson run with its answer key: solution, starter, wrong and right answers, breakers.

The expected verdicts: the solution and each right answer written otherwise are Correct, the
starter Not attempted, each wrong answer Incorrect with its message, and each breaker (an answer
that raises, returns nothing, never ends or floods the output) Incorrect with what it did. A
verdict that came from an error of the check itself fails the self-test, whatever its status.

Python answers run in this process; R answers in an R session (Rscript) that hosts Python through
reticulate, checked by the R package's ``kd_verdict()``, which an R twin's ``kd_check()`` calls.
What cannot run here (R without keras3) is a row with the reason.

    python -m kerasdist.course.exercises selftest 01 --language both

Example:
    >>> rows = list(run_lesson("01", languages=("python",), only=("q1",)))  # doctest: +SKIP
    >>> [(row["case"], row["status"]) for row in rows][:3]  # doctest: +SKIP
    [('solution', 'Correct'), ('starter', 'Not attempted'), ('wrong 1', 'Incorrect')]
"""

import argparse
import json
import time

from kerasdist.course.exercises.core import CORRECT, INCORRECT, NOT_ATTEMPTED, exercises_of
from kerasdist.course.exercises.sessions import prepare_process, python_verdict, run_cases

SKIPPED = "skipped"
# The breakers' time limit: a check that is bounded stops an endless answer at any limit.
BREAKER_LIMIT_S = 1.0
# Answers that break a check, for an answer that is a function: (case, code, expected message part).
BREAKERS = {
    "python": (
        ("breaker: raises", "def {name}(*args, **kwargs):\n    raise RuntimeError('broken on purpose')",
         "RuntimeError: broken on purpose"),
        ("breaker: returns None", "def {name}(*args, **kwargs):\n    return None", ""),
        ("breaker: never ends", "def {name}(*args, **kwargs):\n    while True:\n        pass", "ran past"),
        ("breaker: floods the output", "def {name}(*args, **kwargs):\n    print('x' * 100_000)", ""),
    ),
    "r": (
        ("breaker: raises", "{name} <- function(...) stop('broken on purpose')", "broken on purpose"),
        ("breaker: returns NULL", "{name} <- function(...) NULL", ""),
        ("breaker: never ends", "{name} <- function(...) repeat {{}}", "ran past"),
        ("breaker: floods the output", "{name} <- function(...) {{ cat(strrep('x', 1e5)); NULL }}", ""),
    ),
}
_DEFINES_FUNCTION = {"python": "def {name}(", "r": "{name} <- function("}


def cases(exercise, language):
    """(case, code, expected status, expected message part, time limit or None) for one exercise."""
    starter = exercise.starters[language]
    yield "solution", f"{starter}\n{exercise.solutions[language]}", CORRECT, "", None
    yield "starter", starter, NOT_ATTEMPTED, "", None
    for number, wrong in enumerate(exercise.wrong, start=1):
        yield f"wrong {number}", f"{starter}\n{wrong.code[language]}", INCORRECT, wrong.message, None
    right = [answer for answer in exercise.right if language in answer]
    for number, answer in enumerate(right, start=1):
        yield f"right {number}", f"{starter}\n{answer[language]}", CORRECT, "", None
    functions = [name for name in exercise.answers
                 if _DEFINES_FUNCTION[language].format(name=name) in exercise.solutions[language]]
    for name in functions:
        for case, code, part in BREAKERS[language]:
            label = case if len(functions) == 1 else f"{case} ({name})"
            yield (label, f"{starter}\n{exercise.solutions[language]}\n{code.format(name=name)}", INCORRECT,
                   part, BREAKER_LIMIT_S)


def r_cases(lesson, only=""):
    """The R cases of a lesson's exercises (those named in ``only``, comma-separated, or all), numbered."""
    found = []
    for exercise in exercises_of(lesson):
        if "r" in exercise.solutions and (not only or exercise.name in only.split(",")):
            for case, code, expected, part, limit in cases(exercise, "r"):
                found.append({"index": len(found), "lesson": lesson, "exercise": exercise.name, "case": case,
                              "expected": expected, "expected_message": part, "code": code,
                              "time_limit_s": limit,
                              "context": exercise.context.get("r", ""),
                              "needs_keras3": "keras3" in exercise.needs})
    return found


def _row(case, status, message, internal=False):
    keys = ("lesson", "exercise", "case", "expected", "expected_message")
    return dict({key: case[key] for key in keys}, language="r", status=status, message=message,
                internal=internal)


def run_lesson(lesson, languages=("python", "r"), only=(), replicas=2, timeout_s=None):
    """Run every exercise of ``lesson`` (or those named in ``only``); yields one dict per case and language.

    The Python cases run in this process, which ``prepare_process`` has set up; the R cases in Rscript,
    each within its bound (or all within ``timeout_s``).
    """
    if "python" in languages:
        for exercise in exercises_of(lesson):
            if (only and exercise.name not in only) or "python" not in exercise.solutions:
                continue
            for case, code, expected, part, limit in cases(exercise, "python"):
                started = time.monotonic()
                verdict = python_verdict(exercise, code, limit)
                yield {"lesson": lesson, "exercise": exercise.name, "language": "python", "case": case,
                       "expected": expected, "expected_message": part, "status": verdict.status,
                       "message": verdict.message, "internal": verdict.internal,
                       "seconds": round(time.monotonic() - started, 2),
                       "answer_seconds": round(verdict.answer_s, 2)}
    if "r" in languages:
        found = run_cases(lesson, "r", r_cases(lesson, ",".join(only)), replicas, timeout_s)
        for case, status, message, internal in found:
            yield _row(case, status, message, internal)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m kerasdist.course.exercises",
                                     description="Run a lesson's exercises with their answer key.")
    commands = parser.add_subparsers(dest="command", required=True)
    selftest = commands.add_parser("selftest", help="every exercise with its answer key: solution, starter, "
                                   "wrong and right answers, breakers")
    selftest.add_argument("lesson", help='two digits, e.g. "01"')
    selftest.add_argument("--language", choices=("python", "r", "both"), default="both")
    selftest.add_argument("--replicas", type=int, default=2, help="virtual devices to make first")
    selftest.add_argument("--timeout-s", type=int, default=None,
                          help="bound on all the R session's cases (default: a bound per case)")
    args = parser.parse_args(argv)
    if args.language != "r":
        prepare_process(args.lesson, args.replicas)
    languages = ("python", "r") if args.language == "both" else (args.language,)
    failed = 0
    for row in run_lesson(args.lesson, languages, replicas=args.replicas, timeout_s=args.timeout_s):
        good = row["status"] == SKIPPED or (row["status"] == row["expected"] and not row.get("internal")
                                            and row["expected_message"] in row["message"])
        failed += not good
        print(json.dumps(dict(row, ok=good)), flush=True)
    return 1 if failed else 0
