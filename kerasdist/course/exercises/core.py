"""The parts every checked exercise is made of: the answer's names, a check, hints, a solution.

A check is a plain function ``check(answers, language)``: ``answers`` maps each name the student
defines to its value (a number, a list, a function, a Keras model; from R, reticulate has converted
it), and ``language`` words values and code the way the student's notebook writes them. It returns
one sentence of praise, or raises ``Incorrect`` with one sentence a student understands.

Example:
    >>> def check(answers, language):
    ...     if answers["n"] != 4:
    ...         raise Incorrect(f"n is {language.value(answers['n'])}, but 2 + 2 is 4.")
    ...     return "n is 4."
    >>> q = Exercise("00", "q9", "Add", ("n",), check, hints=("Add.",), solutions={"python": "n = 4"},
    ...              starters={"python": "n = None"})
    >>> print(q.verdict({"n": 5}))
    Incorrect: n is 5, but 2 + 2 is 4.
    >>> print(q.verdict({"n": None}, language="r"))
    Not attempted: define n (it is still NULL), then run the check again.
"""

import contextlib
import dataclasses
import gc
import importlib
import io
import os
import signal
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Callable, Mapping

CORRECT, INCORRECT, NOT_ATTEMPTED = "Correct", "Incorrect", "Not attempted"
# The label's colour in a notebook's output (ANSI: JupyterLab, R's console and the course site show it).
_COLOURS = {CORRECT: "\x1b[1;32m", INCORRECT: "\x1b[1;31m", NOT_ATTEMPTED: "\x1b[1;33m"}
_RESET = "\x1b[0m"
# How long the answer's own code may run in one check (all its calls together), how long the whole
# check may run (the check's own work on the answer included), and how much of what the answer
# printed ``check()`` shows.
DEFAULT_TIME_LIMIT_S = 30.0
CHECK_TIME_LIMIT_S = 120.0
SHOWN_OUTPUT_CHARS = 2000
# In an exercise's ``needs``: its answer reads what the lesson computed before it (graded by running
# the whole lesson, not in the exercise's own context).
LESSON_STATE = "lesson state"
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Incorrect(Exception):
    """Raised by a check with the one sentence that tells the student what is wrong."""


class TimeUp(BaseException):
    """Raised inside a check that runs past its time limit.

    A BaseException, so that an answer's own ``except Exception`` cannot swallow it.
    """


@dataclasses.dataclass
class Bounds:
    """The running check's limits: the answer's time left, and the whole check's deadline (monotonic)."""

    answer_s: float
    answer_left: float
    check_s: float
    deadline: float


_running = None  # the Bounds of the check running now (checks run in the main thread)


def _arm(seconds):
    # Fire in ``seconds``, then every second: an answer that catches TimeUp meets it again.
    signal.setitimer(signal.ITIMER_REAL, max(seconds, 0.001), 1.0)


def _on_alarm(signum, frame):
    if _running is not None:
        raise TimeUp()


@contextlib.contextmanager
def bounded(answer_s, check_s=CHECK_TIME_LIMIT_S):
    """Run a check whose answer may take ``answer_s`` seconds in all (see ``answer_running``) and which
    may take ``check_s`` in all; past either, ``TimeUp`` is raised in it.

    A SIGALRM timer bounds Python code (a loop, an endless dataset); off the main thread, where no
    signal reaches, nothing is bounded. An R answer is bounded by R itself (``kd_verdict``).

    Example:
        >>> with bounded(answer_s=1, check_s=0.2) as limits:
        ...     try:
        ...         while True:
        ...             pass
        ...     except TimeUp:
        ...         print("stopped")
        stopped
    """
    global _running
    if threading.current_thread() is not threading.main_thread():
        yield Bounds(answer_s, answer_s, check_s, float("inf"))
        return
    previous = signal.signal(signal.SIGALRM, _on_alarm)
    _running = Bounds(answer_s, answer_s, check_s, time.monotonic() + check_s)
    _arm(check_s)
    try:
        yield _running
    finally:
        _running = None  # first: an alarm that still comes raises nothing
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@contextlib.contextmanager
def collected_first():
    """Collect garbage before a check and not during it.

    TensorFlow functions of earlier checks, collected while ``fit()`` traces its own, can deadlock on
    a graph's lock (seen after a few checks that train, in one process).
    """
    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def answer_time_left():
    """Seconds the running check's answer may still take (infinite outside a check)."""
    limits = _running
    return float("inf") if limits is None else limits.answer_left


@contextlib.contextmanager
def answer_running():
    """Count the time spent in the answer's own code against its limit (``fixtures.call_answer`` uses it)."""
    limits = _running
    if limits is None:
        yield
        return
    started = time.monotonic()
    _arm(min(limits.answer_left, limits.deadline - started))
    try:
        yield
    finally:
        limits.answer_left -= time.monotonic() - started
        if _running is limits and limits.deadline > time.monotonic():
            _arm(limits.deadline - time.monotonic())


@dataclasses.dataclass(frozen=True)
class Language:
    """How the student's language writes values and code: ``Language.of("python")`` or ``("r")``.

    Example:
        >>> Language.of("r").value([1, 2.5]), Language.of("python").value(None)
        ('c(1, 2.5)', 'None')
    """

    name: str
    none: str
    true: str
    false: str
    int_div: str

    @classmethod
    def of(cls, name):
        if name not in _LANGUAGES:
            raise ValueError(f"language must be one of {sorted(_LANGUAGES)}. Received: {name!r}")
        return _LANGUAGES[name]

    def value(self, value):
        """``value`` written as this language would print it (short; for messages)."""
        if value is None:
            return self.none
        if isinstance(value, bool):
            return self.true if value else self.false
        if isinstance(value, (list, tuple)):
            inner = ", ".join(self.value(v) for v in value)
            return f"c({inner})" if self.name == "r" else f"[{inner}]"
        if isinstance(value, float) and value.is_integer() and self.name == "r":
            return str(int(value))
        if isinstance(value, str):
            return f'"{value}"' if self.name == "r" else repr(value)
        return str(value)

    def pick(self, python, r):
        """The Python or the R wording of a phrase."""
        return python if self.name == "python" else r


_LANGUAGES = {
    "python": Language("python", none="None", true="True", false="False", int_div="//"),
    "r": Language("r", none="NULL", true="TRUE", false="FALSE", int_div="%/%"),
}


@dataclasses.dataclass(frozen=True)
class Verdict:
    """The outcome of a check: ``status`` (Correct, Incorrect, Not attempted) and one sentence.

    ``printed`` is what the answer's code printed while it was checked, ``answer_s`` how long the
    answer's own code ran in it; ``internal`` marks an Incorrect that came from an error of the check
    itself, not from the answer (a bug the self-test reports).
    """

    status: str
    message: str
    printed: str = ""
    internal: bool = False
    answer_s: float = 0.0

    def __str__(self):
        return f"{self.status}: {self.message}"

    def coloured(self):
        """The verdict with its label in colour, as ``check()`` prints it."""
        return f"{_COLOURS[self.status]}{self.status}{_RESET}: {self.message}"

    def shown_output(self):
        """What the answer printed during the check, cut to its first ``SHOWN_OUTPUT_CHARS`` characters."""
        if len(self.printed) <= SHOWN_OUTPUT_CHARS:
            return self.printed
        more = len(self.printed) - SHOWN_OUTPUT_CHARS
        return f"{self.printed[:SHOWN_OUTPUT_CHARS]}\n[... {more} more characters your code printed]\n"

    @property
    def correct(self):
        return self.status == CORRECT


@dataclasses.dataclass(frozen=True)
class WrongAnswer:
    """A typical wrong answer, per language, and the words its Incorrect message must contain."""

    code: Mapping[str, str]
    message: str


@dataclasses.dataclass(frozen=True)
class Exercise:
    """One checked exercise of a lesson.

    ``answers`` are the names the student's cell defines; ``solutions`` and ``starters`` hold that
    cell's code per language (``"python"``, ``"r"``), exactly as the lessons hold it (a test compares
    them); ``hints`` run from a nudge to nearly the answer, each a string or a per-language mapping;
    ``context`` is code per language that the self-test runs before the answer (the lesson's imports).
    """

    lesson: str
    name: str
    title: str
    answers: tuple
    check_answers: Callable
    hints: tuple
    solutions: Mapping[str, str]
    starters: Mapping[str, str]
    wrong: tuple = ()
    context: Mapping[str, str] = dataclasses.field(default_factory=dict)
    needs: tuple = ()  # what the self-test needs beyond TensorFlow: "keras3" (R), "jax" (backend)
    right: tuple = ()  # right answers written otherwise than the solution: code per language
    time_limit_s: float = DEFAULT_TIME_LIMIT_S  # the answer's own code, in one check
    reads: tuple = ()  # names among ``answers`` the check may read but the student need not define

    def verdict(self, answers, language="python", time_limit_s=None):
        """Check ``answers`` (a mapping of this exercise's names to values) and return the Verdict.

        Always a verdict: an error of the answer's code is Incorrect with that error, and so is an
        answer whose code runs past ``time_limit_s`` in all (default: the exercise's), or with which
        the whole check runs past ``CHECK_TIME_LIMIT_S``.
        """
        words = Language.of(language)
        for name in self.answers:
            if answers.get(name) is None and name not in self.reads:
                state = "it is still " + words.none if name in answers else "it is not defined yet"
                return Verdict(NOT_ATTEMPTED, f"define {name} ({state}), then run the check again.")
        limit = self.time_limit_s if time_limit_s is None else time_limit_s
        printed = io.StringIO()
        limits = None
        try:
            with contextlib.redirect_stdout(printed), collected_first(), bounded(limit) as limits:
                status, message = CORRECT, self.check_answers({**dict.fromkeys(self.reads), **answers}, words)
        except Incorrect as wrong:
            status, message = INCORRECT, str(wrong)
        except TimeUp:
            status, message = INCORRECT, ran_past(limits, words)
        except SystemExit:
            status, message = INCORRECT, "your code called sys.exit() (or exit(), quit()): return instead."
        except Exception as error:  # noqa: BLE001  (a student sees a verdict, never a traceback)
            return Verdict(INCORRECT, unusable_answer(error), printed.getvalue(), internal=True)
        return Verdict(status, message, printed.getvalue(), answer_s=limits.answer_s - limits.answer_left)

    def _answers_from(self, namespace):
        return {name: namespace.get(name) for name in self.answers if name in namespace}

    def check(self, namespace=None):
        """Check the student's answer (the caller's globals) and print the verdict."""
        namespace = sys._getframe(1).f_globals if namespace is None else namespace
        verdict = self.verdict(self._answers_from(namespace))
        print(f"{verdict.shown_output()}{verdict.coloured()}")

    def __repr__(self):
        # The exercise, not its answer key: a student's kernel shows this for `q1`.
        return f"<exercise {self.lesson} {self.name}: {self.title}; q.check(), q.hint()>"

    def assert_correct(self, namespace=None):
        """The autograder's test: raise AssertionError with the verdict unless it is Correct."""
        namespace = sys._getframe(1).f_globals if namespace is None else namespace
        verdict = self.verdict(self._answers_from(namespace))
        if not verdict.correct:
            raise AssertionError(f"{self.name}: {verdict}")

    def hint_text(self, number=1, language="python"):
        """Hint ``number`` (1 is the first), in the student's language."""
        if not 1 <= number <= len(self.hints):
            raise ValueError(f"{self.name} has hints 1 to {len(self.hints)}. Received: {number}")
        hint = self.hints[number - 1]
        return hint[language] if isinstance(hint, Mapping) else hint

    def hint(self, number=1):
        """Print hint ``number``; the last one nearly gives the answer away."""
        more = f" (hint {number + 1} of {len(self.hints)}: {self.name}.hint({number + 1}))" \
            if number < len(self.hints) else ""
        print(f"Hint {number}: {self.hint_text(number)}{more}")

    def solution_text(self, language="python"):
        """The worked solution's code, as the instructor's edition of the lesson holds it."""
        return self.solutions[language]

    def solution(self):
        """Print the worked solution."""
        print(f"Solution to {self.name}, {self.title}:\n\n{self.solution_text()}")


def ran_past(limits, language):
    """The Incorrect sentence for an answer stopped at a time limit (``limits``: the check's Bounds)."""
    endless = language.pick("an endless dataset (.repeat()) or a while loop whose condition stays True",
                            "a repeat {} or while loop that never breaks, or an endless dataset")
    if limits.answer_left > 0.05:  # the check's own work on the answer ran out of time
        return f"the check ran past {limits.check_s:g} s with your answer: look for {endless}."
    return f"your code ran past {limits.answer_s:g} s, the check's time limit: look for {endless}."


def student_frame(error):
    """The innermost line of the student's own code in an error's traceback, or None."""
    library = (_PACKAGE, sys.prefix, sys.base_prefix, os.path.dirname(os.__file__))
    frames = [frame for frame in traceback.extract_tb(error.__traceback__)
              if not frame.filename.startswith(library)
              and not any(part in frame.filename for part in ("site-packages", "dist-packages", "rpytools"))]
    return frames[-1] if frames else None


def unusable_answer(error):
    """The Incorrect sentence when the check itself failed on what the answer gave it."""
    return (f"the check could not use what your answer gave it ({type(error).__name__}: "
            f"{str(error).strip().splitlines()[0][:160] if str(error).strip() else 'no message'}): "
            "make sure it returns what the task asks for (a function that forgets to return gives None).")


def exercises_of(lesson):
    """The exercises of ``lesson`` ("01" ... "09"), in order, from ``kerasdist.course.exercises.lessonNN``.

    Example:
        >>> [q.name for q in exercises_of("01")]
        ['q1', 'q2', 'q3']
    """
    try:
        module = importlib.import_module(f"kerasdist.course.exercises.lesson{lesson}")
    except ModuleNotFoundError:
        from kerasdist.errors import KerasdistError

        known = [path.stem.removeprefix("lesson") for path in Path(__file__).parent.glob("lesson*.py")]
        raise KerasdistError(
            f"lesson {lesson} has no checked exercises; these have: {', '.join(sorted(known))}") from None
    found = [value for value in vars(module).values() if isinstance(value, Exercise)]
    return sorted(found, key=lambda q: int(q.name[1:]))
