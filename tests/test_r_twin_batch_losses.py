"""Lesson 3's R twin records each step's batch loss as its Python lesson does, step by step.

Both notebooks print the 1-device run's batch loss at every step (the same model, seed and data
order in both languages). The R twin recovers each batch's loss from the running mean that keras3
reports with 1-based batch numbers, the Python lesson from Keras' 0-based ones: a formula written
for the other numbering doubles the first step's loss and dips at every epoch start, which this
test sees at once. It reads the committed outputs, so it runs on every machine.
"""

import re

from test_r_twins import NOTEBOOKS, printed

HEADER = re.compile(r"^1 device, batch loss of steps 1-(\d+):\n((?:[\d. -]+\n)+)", flags=re.MULTILINE)
TOLERANCE = 2e-4  # printed with 4 decimals; the runs agree to float32 rounding


def batch_losses(notebook):
    """The per-step batch losses a lesson printed for its 1-device run."""
    match = HEADER.search(printed(notebook))
    assert match, f"{notebook.name} prints no '1 device, batch loss of steps 1-N:' table"
    losses = [float(value) for value in match.group(2).split()]
    assert len(losses) == int(match.group(1)), f"{notebook.name}: {len(losses)} losses for {match.group(1)} steps"
    return losses


def test_r_twin_prints_the_python_lessons_batch_loss_at_every_step():
    python_losses = batch_losses(NOTEBOOKS / "03_convergence.ipynb")
    r_losses = batch_losses(NOTEBOOKS / "03_convergence_R.ipynb")
    assert len(r_losses) == len(python_losses)
    apart = [(step, r, p) for step, (r, p) in enumerate(zip(r_losses, python_losses), start=1)
             if abs(r - p) > TOLERANCE]
    assert not apart, (f"{len(apart)} of {len(python_losses)} steps differ by more than {TOLERANCE} "
                       f"(step, R twin, Python lesson), first ones: {apart[:5]}")
