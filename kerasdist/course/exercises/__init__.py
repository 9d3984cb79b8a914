"""Checked exercises: the student's own objects checked at once, with graded hints and the solution.

Every lesson's module (``kerasdist.course.exercises.lesson01`` ...) defines its exercises ``q1``, ``q2`` ...
In a Python lesson the student completes a cell, then asks::

    from kerasdist.course.exercises.lesson01 import q1
    q1.check()      # Correct / Incorrect: what is wrong, in one sentence / Not attempted: what to do
    q1.hint()       # the first hint; q1.hint(2) the next, more telling one
    q1.solution()   # the worked solution

``check()`` reads the answer's names from the caller's globals (the notebook). In an R twin the R
package's ``kd_exercises()``, ``kd_check()``, ``kd_hint()`` and ``kd_solution()`` reach the same
checks through reticulate, with the R objects converted and the messages in R's terms.

The course's grading tool (nbgrader, see ``kerasdist.course.instructor``) runs ``assert_correct()`` in the
hidden test of each check cell; ``python -m kerasdist.course.exercises selftest LESSON`` runs every exercise
with its solution, its untouched starter code and its typical wrong answers.

Example:
    >>> from kerasdist.course.exercises.lesson01 import q1
    >>> print(q1.verdict({"per_replica_batch": lambda g, n: g // n}))
    Correct: per_replica_batch(global_batch, num_replicas) gives every replica its share of the global batch.
    >>> print(q1.verdict({"per_replica_batch": None}))
    Not attempted: define per_replica_batch (it is still None), then run the check again.
"""

from kerasdist.course.exercises.core import Exercise, Incorrect, Language, Verdict, WrongAnswer, exercises_of

__all__ = ["Exercise", "Incorrect", "Language", "Verdict", "WrongAnswer", "exercises_of"]
