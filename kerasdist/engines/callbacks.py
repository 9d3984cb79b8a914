"""The Keras callbacks both engines drive: the NaN guard, the metrics log, checkpoints, the stop on a signal.

``fit`` calls them itself; kerasdist's loop calls the same ones through a
``keras.callbacks.CallbackList`` (``kerasdist.engines.loop``), so both engines log,
save, stop and guard against divergence the same way.
"""

import math
import re
import time

import keras

from kerasdist import divergence
from kerasdist.engines import interrupt


def next_call_end(step, steps_per_epoch, steps_per_execution, save_every_steps):
    """The step after which a call of several steps returns: K steps on, a checkpoint step, or the epoch end.

    Where an engine runs several steps per call, the weights exist only at a
    call's end: ending calls at the checkpoint steps lets the callbacks save
    there (kerasdist's loop, the JAX engine's own loop).

    Example:
        >>> next_call_end(40, 52, 50, None), next_call_end(0, 52, 50, 20)
        (52, 20)
    """
    end = min(steps_per_epoch, step + steps_per_execution)
    if save_every_steps:
        end = min(end, (step // save_every_steps + 1) * save_every_steps)
    return end


class EpochStepCallback(keras.callbacks.Callback):
    """Base for callbacks that number steps within the epoch, right after a mid-epoch resume too.

    ``step_offset`` is how many batches of the first epoch were trained before
    this ``fit()`` call (the engine sets it when it resumes mid-epoch); it goes
    back to 0 when that epoch ends. Subclasses that override ``on_epoch_begin``
    or ``on_epoch_end`` call the base method.

    ``fit(steps_per_execution=K)`` calls ``on_train_batch_end`` once per call
    of K steps, with the index of the call's last batch (for the epoch's last,
    shorter call Keras passes the index a full call would end at:
    keras/src/trainers/epoch_iterator.py, ``_enumerate_iterator``, so
    ``step`` stops at ``steps_per_epoch``): ``steps_of_call`` gives the steps a
    call trained, and ``crossed`` whether a step due for a record or a
    checkpoint lies among them.

    Example:
        >>> class PrintStep(EpochStepCallback):
        ...     def on_train_batch_end(self, batch, logs=None):
        ...         print(self.epoch, self.step(batch))
    """

    def __init__(self, steps_per_epoch=None):
        super().__init__()
        self.steps_per_epoch = steps_per_epoch
        self.step_offset = 0
        self.epoch = 0
        self.last_step = 0

    def step(self, batch):
        """The 1-based step within the epoch of batch ``batch`` of this ``fit()`` call."""
        step = self.step_offset + batch + 1
        return min(step, self.steps_per_epoch) if self.steps_per_epoch else step

    def steps_of_call(self, batch):
        """(first, last): the 1-based steps in the epoch of the call that ended at batch ``batch``."""
        first, self.last_step = self.last_step + 1, self.step(batch)
        return first, self.last_step

    @staticmethod
    def crossed(first, last, every):
        """Whether a multiple of ``every`` lies in ``first..last``.

        Example:
            >>> EpochStepCallback.crossed(41, 50, 25), EpochStepCallback.crossed(41, 50, 30)
            (True, False)
        """
        return last // every > (first - 1) // every

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch
        self.last_step = self.step_offset

    def on_epoch_end(self, epoch, logs=None):
        self.step_offset = 0


class MetricsRecorder(EpochStepCallback):
    """Append per-step and per-epoch metrics (with wall time and samples/s) to a ``MetricsLog``.

    A step record's ``loss`` is what Keras reports after a batch: the running
    mean over the epoch so far. Its ``batch_loss`` is the loss of that batch
    alone: with equal batches (the last partial batch is dropped), the k-th
    batch's loss is ``k * mean_k - (k - 1) * mean_(k-1)``. Where ``fit()``
    runs several steps per call, a record is written at the end of each call
    that reaches a step due for one, without ``batch_loss`` (Keras reports
    only the running mean after the call's last step).

    Args:
        log: the ``MetricsLog`` to append to.
        steps_per_epoch: batches in a full epoch (to number steps globally).
        global_batch_size: samples per step.
        log_every_steps: write a step record every this many steps.

    Example:
        >>> model.fit(ds, callbacks=[MetricsRecorder(log, 52, 64)])  # doctest: +SKIP
    """

    def __init__(self, log, steps_per_epoch, global_batch_size, log_every_steps=1):
        super().__init__(steps_per_epoch)
        self.log = log
        self.global_batch_size = global_batch_size
        self.log_every_steps = max(1, int(log_every_steps))
        self._epoch_start = 0.0
        self._previous_mean = 0.0

    def on_epoch_begin(self, epoch, logs=None):
        super().on_epoch_begin(epoch, logs)
        self._epoch_start = time.perf_counter()
        self._previous_mean = 0.0

    def on_train_batch_end(self, batch, logs=None):
        logs = {name: float(value) for name, value in (logs or {}).items()}
        # Keras' metrics restart with each fit() call, so its batch index (not step) counts the running mean.
        # The loop engine knows each batch's loss and passes it as batch_loss.
        mean = logs.get("loss")
        batch_loss = logs.pop("batch_loss", None)
        first, step = self.steps_of_call(batch)
        if batch_loss is None and mean is not None and first == step:
            batch_loss = (batch + 1) * mean - batch * self._previous_mean
        self._previous_mean = mean
        if not self.crossed(first, step, self.log_every_steps) and step != self.steps_per_epoch:
            return
        record = {"kind": "step", "epoch": self.epoch, "step": step,
                  "global_step": self.epoch * self.steps_per_epoch + step, **logs}
        if batch_loss is not None:
            record["batch_loss"] = batch_loss
        self.log.append(record)

    def on_epoch_end(self, epoch, logs=None):
        seconds = time.perf_counter() - self._epoch_start
        samples = (self.steps_per_epoch - self.step_offset) * self.global_batch_size
        self.log.append({
            "kind": "epoch",
            "epoch": epoch,
            "global_step": (epoch + 1) * self.steps_per_epoch,
            **{name: float(value) for name, value in (logs or {}).items()},
            "wall_time_s": seconds,
            "samples_per_s": samples / seconds if seconds > 0 else None,
        })
        super().on_epoch_end(epoch, logs)


class CheckpointSaver(EpochStepCallback):
    """Write a ``CheckpointStore`` checkpoint after every epoch and, optionally, every N steps.

    Unlike ``keras.callbacks.BackupAndRestore``, a mid-epoch checkpoint records
    the batch position, and kerasdist resumes at the next batch (its data order
    is a function of seed and epoch), instead of replaying the epoch. With
    several steps per call, it saves at the end of a call that reaches a
    multiple of N (the weights exist only there).

    Args:
        store: the ``CheckpointStore``.
        steps_per_epoch: batches in a full epoch.
        save_every_steps: also save every this many steps within an epoch; None for epoch ends only.

    Example:
        >>> model.fit(ds, callbacks=[CheckpointSaver(store, 52, save_every_steps=20)])  # doctest: +SKIP
    """

    def __init__(self, store, steps_per_epoch, save_every_steps=None):
        super().__init__(steps_per_epoch)
        self.store = store
        self.save_every_steps = save_every_steps

    def on_train_batch_end(self, batch, logs=None):
        first, step = self.steps_of_call(batch)
        due = self.save_every_steps and self.crossed(first, step, self.save_every_steps)
        if due and step < self.steps_per_epoch:
            self.store.save(self.epoch, step, self.epoch * self.steps_per_epoch + step)

    def on_epoch_end(self, epoch, logs=None):
        self.store.save(epoch + 1, 0, (epoch + 1) * self.steps_per_epoch)
        super().on_epoch_end(epoch, logs)


class StopOnSignal(EpochStepCallback):
    """The ``fit`` engine's stop: after a signal, save at the end of the current batch and stop.

    Put it after the checkpoint and metrics callbacks. At an epoch's last
    batch it lets the epoch end (validation, the epoch checkpoint) and stops then.

    Args:
        store: the ``CheckpointStore``, or None.
        steps_per_epoch: batches in a full epoch.
        requested_signal: returns the signal that asks to stop, or None. The
            loop engine passes the signal every worker agreed on, and only at
            the steps where its weights match the step (the end of a call).

    Example:
        >>> model.fit(ds, callbacks=[recorder, saver, StopOnSignal(store, 52)])  # doctest: +SKIP
    """

    def __init__(self, store, steps_per_epoch, requested_signal=interrupt.requested_signal):
        super().__init__(steps_per_epoch)
        self.store = store
        self.requested_signal = requested_signal

    def on_train_batch_end(self, batch, logs=None):
        step = self.step(batch)
        if step >= self.steps_per_epoch:
            return  # the epoch's end checks
        signal_number = self.requested_signal()
        if signal_number is not None:
            global_step = self.epoch * self.steps_per_epoch + step
            path = self._saved_at(global_step) or (
                self.store.save(self.epoch, step, global_step) if self.store else None)
            raise interrupt.TrainingInterrupted(signal_number, path, self.epoch, step)

    def on_epoch_end(self, epoch, logs=None):
        super().on_epoch_end(epoch, logs)
        signal_number = self.requested_signal()
        if signal_number is not None:
            path = self.store.latest_checkpoint if self.store else None
            raise interrupt.TrainingInterrupted(signal_number, path, epoch + 1, 0)

    def _saved_at(self, global_step):
        """The checkpoint ``CheckpointSaver`` just wrote at this step, if it did."""
        latest = self.store.latest_checkpoint if self.store else None
        return latest if latest and re.search(rf"-{global_step}(\.npz)?$", latest) else None


class DivergenceGuard(EpochStepCallback):
    """Stop training at the first batch whose loss is NaN or inf (before it is logged or saved).

    Keras' ``TerminateOnNaN`` only sets ``stop_training``, so the epoch's end
    callbacks (a checkpoint among them) would still run; this raises at once.
    It reads the batch's own loss where the engine gives it (``batch_loss``),
    else the running mean (``loss``), which turns non-finite at the same batch.

    Example:
        >>> model.fit(ds, callbacks=[DivergenceGuard(), saver])  # doctest: +SKIP
    """

    def on_train_batch_end(self, batch, logs=None):
        logs = logs or {}
        loss = logs.get("batch_loss", logs.get("loss"))
        if loss is not None and not math.isfinite(float(loss)):
            divergence.check_losses([float(loss)], self.epoch, self.step(batch))


def standard_callbacks(log, store, steps_per_epoch, global_batch_size, log_every_steps, save_every_steps=None,
                       requested_signal=interrupt.requested_signal, extra=(), stop=None):
    """The callbacks every engine drives: NaN guard, metrics log, checkpoints, stop, then ``extra``.

    The guard comes first (it raises before a bad step is logged or saved);
    the stop comes after the step's log record and checkpoint.

    Args:
        log: the ``MetricsLog``.
        store: the checkpoint store (either backend's), or None.
        steps_per_epoch, global_batch_size, log_every_steps, save_every_steps: as for the callbacks above.
        requested_signal: returns the signal that asks to stop, or None.
        extra: the caller's own callbacks.
        stop: a ``StopOnSignal`` to use instead of the one made from ``requested_signal``.

    Example:
        >>> [type(c).__name__ for c in standard_callbacks(MetricsLog(), None, 52, 64, 1)]  # doctest: +SKIP
        ['DivergenceGuard', 'MetricsRecorder', 'StopOnSignal']
    """
    callbacks = [DivergenceGuard(steps_per_epoch),
                 MetricsRecorder(log, steps_per_epoch, global_batch_size, log_every_steps)]
    if store:
        callbacks.append(CheckpointSaver(store, steps_per_epoch, save_every_steps))
    callbacks.append(stop or StopOnSignal(store, steps_per_epoch, requested_signal))
    return callbacks + list(extra)
