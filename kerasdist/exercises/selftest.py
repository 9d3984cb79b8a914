"""Every exercise of a lesson run with its solution, its untouched starter and its typical wrong answers.

The expected verdicts: the solution is Correct, the starter Not attempted, each wrong answer
Incorrect with its message. R answers run through rpy2 in this process and are checked by the R
package's ``kd_verdict()``, the route an R twin's ``kd_check()`` takes. What cannot run here (R
without keras3, JAX without the JAX backend) is a row with the reason.

    python -m kerasdist.exercises selftest 01 --language both

Example:
    >>> rows = run_lesson("01", languages=("python",), only=("q1",))  # doctest: +SKIP
    >>> [(row["case"], row["status"]) for row in rows][:3]  # doctest: +SKIP
    [('solution', 'Correct'), ('starter', 'Not attempted'), ('wrong 1', 'Incorrect')]
"""

import argparse
import json

from kerasdist.exercises.core import CORRECT, INCORRECT, NOT_ATTEMPTED, exercises_of

SKIPPED = "skipped"


def cases(exercise, language):
    """(case, code, expected status, expected message part) for one exercise in one language."""
    starter = exercise.starters[language]
    yield "solution", f"{starter}\n{exercise.solutions[language]}", CORRECT, ""
    yield "starter", starter, NOT_ATTEMPTED, ""
    for number, wrong in enumerate(exercise.wrong, start=1):
        yield f"wrong {number}", f"{starter}\n{wrong.code[language]}", INCORRECT, wrong.message


def _python_verdict(exercise, code):
    namespace = {"__name__": "__main__"}
    exec(exercise.context.get("python", ""), namespace)  # noqa: S102  (the course's own answer key)
    exec(code, namespace)  # noqa: S102
    return exercise.verdict({name: namespace[name] for name in exercise.answers if name in namespace})


def _r_session():
    """rpy2's R with the kerasdist R package attached, or the reason it cannot run."""
    try:
        import rpy2.robjects as ro
    except ImportError:
        return None, "rpy2 is not installed"
    # rpy2 hooks a warning about an old reticulate bug onto its loading: drop it, as the R twins do.
    ro.r('setHook(packageEvent("reticulate", "onLoad"), NULL, "replace")')
    ro.r('suppressPackageStartupMessages(library(kerasdist))')
    has_keras3 = bool(ro.r('isTRUE(requireNamespace("keras3", quietly = TRUE))')[0])
    return (ro, has_keras3), None


def _r_verdict(session, exercise, code):
    ro, _ = session
    ro.globalenv[".kd_selftest_code"] = ro.StrVector([exercise.context.get("r", ""), code])
    verdict = ro.r(f"""local({{
        env <- new.env(parent = globalenv())
        for (part in .kd_selftest_code) eval(parse(text = part), env)
        kd_verdict(kd_exercises("{exercise.lesson}")${exercise.name}, envir = env)
    }})""")
    return dict(zip(verdict.names, [str(v[0]) for v in verdict]))


def run_lesson(lesson, languages=("python", "r"), only=()):
    """Run every exercise of ``lesson`` (or those named in ``only``); one dict per case and language."""
    rows = []
    session, r_problem = (None, None)
    if "r" in languages:
        session, r_problem = _r_session()
    for exercise in exercises_of(lesson):
        if only and exercise.name not in only:
            continue
        for language in [language for language in languages if language in exercise.solutions]:
            reason = r_problem if language == "r" else None
            if language == "r" and session and "keras3" in exercise.needs and not session[1]:
                reason = "the R package keras3 is not installed"
            for case, code, expected, part in cases(exercise, language):
                row = {"lesson": lesson, "exercise": exercise.name, "language": language, "case": case,
                       "expected": expected, "expected_message": part}
                if reason:
                    rows.append(dict(row, status=SKIPPED, message=reason))
                    continue
                if language == "python":
                    verdict = _python_verdict(exercise, code)
                    rows.append(dict(row, status=verdict.status, message=verdict.message))
                else:
                    rows.append(dict(row, **_r_verdict(session, exercise, code)))
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m kerasdist.exercises",
                                     description="Run a lesson's exercises with their answer key.")
    commands = parser.add_subparsers(dest="command", required=True)
    selftest = commands.add_parser("selftest", help="solution, starter and wrong answers of every exercise")
    selftest.add_argument("lesson", help='two digits, e.g. "01"')
    selftest.add_argument("--language", choices=("python", "r", "both"), default="both")
    selftest.add_argument("--replicas", type=int, default=2, help="virtual devices to make first")
    args = parser.parse_args(argv)
    lesson_module = __import__(f"kerasdist.exercises.lesson{args.lesson}", fromlist=["BACKEND"])
    backend = getattr(lesson_module, "BACKEND", "tensorflow")
    from kerasdist import startup

    startup.use_backend(backend)
    if backend == "tensorflow":
        from kerasdist.devices import configure_replicas

        configure_replicas(args.replicas)
    else:
        from kerasdist.jax_engine import import_keras_on_jax

        import_keras_on_jax(args.replicas)
    languages = ("python", "r") if args.language == "both" else (args.language,)
    failed = 0
    for row in run_lesson(args.lesson, languages):
        good = row["status"] == SKIPPED or (row["status"] == row["expected"]
                                            and row["expected_message"] in row["message"])
        failed += not good
        print(json.dumps(dict(row, ok=good)), flush=True)
    return 1 if failed else 0
