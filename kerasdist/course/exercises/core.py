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

import dataclasses
import importlib
import sys
from pathlib import Path
from typing import Callable, Mapping

CORRECT, INCORRECT, NOT_ATTEMPTED = "Correct", "Incorrect", "Not attempted"
# The label's colour in a notebook's output (ANSI: JupyterLab, R's console and the course site show it).
_COLOURS = {CORRECT: "\x1b[1;32m", INCORRECT: "\x1b[1;31m", NOT_ATTEMPTED: "\x1b[1;33m"}
_RESET = "\x1b[0m"


class Incorrect(Exception):
    """Raised by a check with the one sentence that tells the student what is wrong."""


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
    """The outcome of a check: ``status`` (Correct, Incorrect, Not attempted) and one sentence."""

    status: str
    message: str

    def __str__(self):
        return f"{self.status}: {self.message}"

    def coloured(self):
        """The verdict with its label in colour, as ``check()`` prints it."""
        return f"{_COLOURS[self.status]}{self.status}{_RESET}: {self.message}"

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

    def verdict(self, answers, language="python"):
        """Check ``answers`` (a mapping of this exercise's names to values) and return the Verdict."""
        words = Language.of(language)
        for name in self.answers:
            if answers.get(name) is None:
                state = "it is still " + words.none if name in answers else "it is not defined yet"
                return Verdict(NOT_ATTEMPTED, f"define {name} ({state}), then run the check again.")
        try:
            praise = self.check_answers(dict(answers), words)
        except Incorrect as wrong:
            return Verdict(INCORRECT, str(wrong))
        return Verdict(CORRECT, praise)

    def _answers_from(self, namespace):
        return {name: namespace.get(name) for name in self.answers if name in namespace}

    def check(self, namespace=None):
        """Check the student's answer (the caller's globals) and print the verdict."""
        namespace = sys._getframe(1).f_globals if namespace is None else namespace
        print(self.verdict(self._answers_from(namespace)).coloured())

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
