"""The NaN/inf guard: stop at the first non-finite loss, and never checkpoint non-finite weights.

Both engines use it through ``kerasdist.engines.callbacks.DivergenceGuard`` (a Keras
callback placed before the checkpoint saver); ``CheckpointStore.save`` calls
``check_weights``. The error is a ``TrainingDivergedError`` (exit status 3):
the checkpoints written before it hold finite weights, so a rerun with a
smaller learning rate resumes from the last of them.
"""

import numpy as np

from kerasdist.errors import TrainingDivergedError

ADVICE = (
    "try a 10x smaller --learning-rate (with --scale-learning-rate, or --warmup-epochs 1) and rerun: "
    "with --checkpoint-dir training resumes from the last good checkpoint"
)


def check_losses(losses, epoch, first_step):
    """Raise ``TrainingDivergedError`` at the first non-finite per-step loss.

    Args:
        losses: per-step training losses of consecutive steps.
        epoch: the 0-based epoch they belong to.
        first_step: the 1-based step (within the epoch) of ``losses[0]``.

    Example:
        >>> check_losses([0.5, 0.4], epoch=0, first_step=1)
        >>> check_losses([0.5, float("nan")], epoch=0, first_step=1)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        kerasdist.errors.TrainingDivergedError: the training loss must be finite. Received: loss=nan ...
    """
    finite = np.isfinite(np.asarray(losses, dtype="float64"))
    if not finite.all():
        index = int(np.argmin(finite))
        raise TrainingDivergedError(
            f"the training loss must be finite. Received: loss={float(losses[index])} at epoch {epoch + 1}, "
            f"step {first_step + index}; {ADVICE}"
        )


def check_weights(model, epoch, step_in_epoch):
    """Raise ``TrainingDivergedError`` if a weight or optimizer variable of ``model`` is not finite.

    Called before each checkpoint is written, so no checkpoint holds NaN or inf.

    Args:
        model: the compiled model.
        epoch, step_in_epoch: the position the checkpoint would record (0-based
            epoch to train next, batches of it done).

    Example:
        >>> check_weights(model, epoch=1, step_in_epoch=0)  # doctest: +SKIP
    """
    variables = list(model.weights) + list(model.optimizer.variables)
    bad = next((v for v in variables if not np.isfinite(np.asarray(v.numpy())).all()), None)
    if bad is not None:
        raise non_finite_weights(bad.path, epoch, step_in_epoch)


def non_finite_weights(path, epoch, step_in_epoch):
    """The ``TrainingDivergedError`` for a variable ``path`` holding NaN or inf at a checkpoint's position."""
    where = f"the end of epoch {epoch}" if step_in_epoch == 0 else f"epoch {epoch + 1}, step {step_in_epoch}"
    return TrainingDivergedError(
        f"the weights must be finite before a checkpoint is written. Received: NaN or inf in "
        f"{path} at {where}; {ADVICE}"
    )
