"""Where answers are checked: a Python process or an R session set up as the lesson's, every case bounded.

A case is one answer to check: ``{"index", "lesson", "exercise", "code", "context", "time_limit_s",
"needs_keras3"}``. The self-test checks its Python cases in its own process and its R cases in an R
session; the grader (``kerasdist.course.grading``) checks a class's answers in one child process
per lesson and language. A child prints one JSON line per case; the parent waits for each line
within a bound, so a child that hangs or dies turns the cases it did not reach into errors.

    python -m kerasdist.course.exercises.sessions LESSON REPLICAS CASES.json

Example:
    >>> json_line(0, "Correct", "n is 4.")
    '@@kerasdist-case {"index": 0, "status": "Correct", "message": "n is 4.", "internal": false}'
"""

import contextlib
import importlib
import io
import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time

from kerasdist.course.exercises.core import (
    INCORRECT,
    Bounds,
    Language,
    TimeUp,
    Verdict,
    answer_running,
    bounded,
    exercises_of,
    ran_past,
)

# How long a child may take to start (TensorFlow, R and keras3 load) before its first case.
STARTUP_S = 180.0
# What starts a child's line about a case (anything else on its output is the answers' own printing).
LINE_PREFIX = "@@kerasdist-case "

# The R session's loop: the R package's kd_verdict() checks each case, as an R twin's kd_check() does.
# (Inside rpy2, Debian 12's reticulate 1.28 calls Python from an R function that Python called without
# holding the GIL, which aborts the process: the R cases run in Rscript, which hosts Python.)
R_RUNNER = """
suppressPackageStartupMessages(library(kerasdist))
sessions <- reticulate::import("kerasdist.course.exercises.sessions")
arguments <- commandArgs(TRUE)  # lesson, replicas, cases file
sessions$prepare_process(arguments[[1]], as.integer(arguments[[2]]))
has_keras3 <- requireNamespace("keras3", quietly = TRUE)
for (case in sessions$read_cases(arguments[[3]])) {
  verdict <- if (case$needs_keras3 && !has_keras3) {
    list(status = "skipped", message = "the R package keras3 is not installed")
  } else {
    tryCatch({
      env <- new.env(parent = globalenv())
      eval(parse(text = case$context), env)
      # An answer may not end the session that checks the others.
      env$quit <- env$q <- function(...) stop("an answer may not end R: quit() is not allowed here")
      exercise <- kd_exercises(case$lesson)[[case$exercise]]
      limit <- if (is.null(case$time_limit_s)) exercise$python$time_limit_s else case$time_limit_s
      # Like a notebook cell: an error in the answer's code leaves what it defined before it; a cell
      # that runs past the limit is stopped, as the check stops a function that does.
      stopped <- FALSE
      setTimeLimit(elapsed = limit, transient = TRUE)
      invisible(utils::capture.output(tryCatch(eval(parse(text = case$code), env), error = function(e) {
        if (grepl("time limit", conditionMessage(e))) stopped <<- TRUE
      })))
      setTimeLimit(elapsed = Inf)
      if (stopped) {
        list(status = "Incorrect", message = sessions$cell_ran_past(limit), internal = FALSE)
      } else {
        verdict <- kd_verdict(exercise, envir = env, time_limit_s = case$time_limit_s)
        verdict[c("status", "message", "internal")]
      }
    }, error = function(e) list(status = "error", message = conditionMessage(e), internal = FALSE))
  }
  line <- sessions$json_line(case$index, verdict$status, verdict$message, isTRUE(verdict$internal))
  cat(line, "\\n", sep = "")
}
"""


def prepare_process(lesson, replicas):
    """Choose the lesson's Keras backend and make ``replicas`` devices, before Keras is imported."""
    lesson_module = importlib.import_module(f"kerasdist.course.exercises.lesson{lesson}")
    backend = getattr(lesson_module, "BACKEND", "tensorflow")
    from kerasdist import startup

    startup.use_backend(backend)
    if backend == "tensorflow":
        from kerasdist.devices import configure_replicas

        configure_replicas(replicas)
    else:
        from kerasdist.engines.jax_engine import import_keras_on_jax

        import_keras_on_jax(replicas)


def python_verdict(exercise, code, time_limit_s=None):
    """Run the exercise's context, then the answer ``code`` (bounded, as its own code), then check it.

    As in a notebook, an answer cell that raises or is stopped still leaves what it defined before.
    """
    namespace = {"__name__": "__main__"}
    exec(exercise.context.get("python", ""), namespace)  # noqa: S102  (the course's own context)
    limit = exercise.time_limit_s if time_limit_s is None else time_limit_s
    limits = None
    try:
        with bounded(limit) as limits, answer_running(), contextlib.redirect_stdout(io.StringIO()):
            exec(code, namespace)  # noqa: S102  (the answer to check)
    except TimeUp:
        return Verdict(INCORRECT, ran_past(limits, Language.of("python")))
    except (Exception, SystemExit):  # noqa: BLE001, S110  (as in a notebook: the check says what is missing)
        pass
    answers = {name: namespace[name] for name in exercise.answers if name in namespace}
    return exercise.verdict(answers, time_limit_s=time_limit_s)


def cell_ran_past(seconds):
    """The Incorrect sentence for an R answer cell stopped at ``seconds`` (as ``ran_past`` says it)."""
    limits = Bounds(seconds, 0.0, seconds, 0.0)
    return ran_past(limits, Language.of("r"))


def json_line(index, status, message, internal=False):
    """A child's line about a case."""
    row = {"index": index, "status": status, "message": message, "internal": internal}
    return LINE_PREFIX + json.dumps(row)


def read_cases(path):
    with open(path, encoding="utf-8") as stream:
        return json.load(stream)


def run_cases(lesson, language, cases, replicas=2, timeout_s=None):
    """Check ``cases`` in a child process of ``language``; yields ``(case, status, message, internal)``.

    Each case's line is awaited for at most its bound (the check's limits and a margin; the first
    also ``STARTUP_S``), or ``timeout_s`` for all together where given; a case not reached is an
    ``error`` whose message says why.
    """
    if not cases:
        return
    from kerasdist.course.exercises.core import CHECK_TIME_LIMIT_S

    if language == "r" and not shutil.which("Rscript"):
        for case in cases:
            yield case, "skipped", "R is not installed", False
        return
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as stream:
        json.dump(cases, stream)
    try:
        environment = dict(os.environ, RETICULATE_PYTHON=sys.executable)
        arguments = [lesson, str(replicas), stream.name]
        command = (["Rscript", "-e", R_RUNNER, *arguments] if language == "r" else
                   [sys.executable, "-m", "kerasdist.course.exercises.sessions", *arguments])
        child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 env=environment)
        lines = queue.Queue()
        threading.Thread(target=_pass_lines, args=(child.stdout, lines), daemon=True).start()
        started = time.monotonic()
        done, line, reason = 0, "", None
        while done < len(cases):
            bound = (STARTUP_S if done == 0 else 0) + CHECK_TIME_LIMIT_S + 60
            wait = bound if timeout_s is None else timeout_s - (time.monotonic() - started)
            try:
                line = lines.get(timeout=max(0.0, wait))
            except queue.Empty:
                reason = f"timed out after {timeout_s if timeout_s is not None else bound:g} s"
                break
            if line is None:
                break
            if line.startswith(LINE_PREFIX):
                row = json.loads(line[len(LINE_PREFIX):])
                yield cases[done], row["status"], row["message"], row.get("internal", False)
                done += 1
        if done == len(cases):
            child.wait(timeout=60)
            return
        child.kill()
        stderr = [text for text in child.communicate()[1].splitlines() if text.strip()]
        reason = reason or f"{'R' if language == 'r' else 'Python'} ended with exit code {child.returncode}"
        last = stderr[-1] if stderr else "nothing on stderr"
        for case in cases[done:]:
            yield case, "error", f"{reason} before this case: {last}", False
    finally:
        os.remove(stream.name)


def _pass_lines(stream, lines):
    """Put each line of ``stream`` on the queue ``lines``, then None at its end."""
    for line in stream:
        lines.put(line)
    lines.put(None)


def main(argv=None):
    """The Python child: check every case of a cases file, one JSON line each."""
    lesson, replicas, path = (argv or sys.argv[1:])[:3]
    prepare_process(lesson, int(replicas))
    exercises = {exercise.name: exercise for exercise in exercises_of(lesson)}
    for case in read_cases(path):
        verdict = python_verdict(exercises[case["exercise"]], case["code"], case.get("time_limit_s"))
        print(json_line(case["index"], verdict.status, verdict.message, verdict.internal), flush=True)


if __name__ == "__main__":
    main()
