"""What the course ships: checked exercises, the student edition and the grader, what each lesson needs.

``exercises`` (every lesson's checked exercises and their self-test), ``instructor`` (the student
edition and the grader, done by nbgrader), ``preprocessors`` (the two nbgrader steps the student
edition adds) and ``lesson_needs`` (what each lesson needs and how long it ran, the one table the
README, the site and ``kerasdist doctor`` read). May import everything but ``kerasdist.doctor`` and
the command line.
"""
