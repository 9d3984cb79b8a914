"""Stop on SIGINT/SIGTERM at the next step: write a checkpoint, say how to resume, exit 130/143.

The command line turns the signals into a *request* (``stop_on_signals``);
both engines look at it after each step (``fit``, through
``kerasdist.engines.callbacks.StopOnSignal``) or each call (the loop), save a
checkpoint at that step and raise ``TrainingInterrupted``. A second signal
while stopping interrupts at once.
"""

import contextlib
import os
import signal
import threading
import time

HANDLED_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_requested = []  # the signals received while stop_on_signals is active
_active = []  # one entry per stop_on_signals block being run


class TrainingInterrupted(Exception):
    """Training stopped at a step boundary because of a signal.

    Attributes:
        signal_number: the signal (``signal.SIGINT`` or ``signal.SIGTERM``).
        checkpoint: the checkpoint written at the stop, or None (no checkpoint directory).
        epoch, step: the 0-based epoch and the batches of it trained when it stopped
            (step 0: ``epoch`` epochs were complete).
    """

    def __init__(self, signal_number, checkpoint, epoch, step):
        self.signal_number, self.checkpoint, self.epoch, self.step = signal_number, checkpoint, epoch, step
        where = f"at epoch {epoch + 1}, step {step}" if step else f"after epoch {epoch}"
        if checkpoint:
            advice = f"saved {checkpoint}; rerun the same command to resume from there"
        else:
            advice = "nothing saved (no --checkpoint-dir); pass --checkpoint-dir to be able to resume"
        super().__init__(f"stopped by {signal.Signals(signal_number).name} {where}: {advice}")

    @property
    def exit_status(self):
        """What a shell reports for this signal: 130 for SIGINT, 143 for SIGTERM."""
        return 128 + self.signal_number


@contextlib.contextmanager
def stop_on_signals():
    """Within the block, SIGINT and SIGTERM ask training to stop at the next step instead of killing it.

    Only the main thread can install signal handlers; elsewhere the block
    changes nothing.

    Example:
        >>> with stop_on_signals():
        ...     result = run_training(epochs=3, checkpoint_dir="ckpt")  # doctest: +SKIP
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {number: signal.signal(number, _request_stop) for number in HANDLED_SIGNALS}
    _active.append(True)
    try:
        yield
    finally:
        _active.pop()
        for number, handler in previous.items():
            signal.signal(number, handler)
        _requested.clear()


def rearm():
    """Install the stop request again for SIGINT and SIGTERM, inside ``stop_on_signals`` only.

    TensorFlow's runtime takes SIGTERM over at the C level when a multi-worker
    cluster starts (its preemption notifier), and JAX's when its distributed
    runtime starts, so the worker would train on through ``scancel``, a
    requeue or a job's time limit; call this after the strategy (or JAX's
    ``initialize``) exists.

    Example:
        >>> rearm()  # outside stop_on_signals: changes nothing
    """
    if _active and threading.current_thread() is threading.main_thread():
        for number in HANDLED_SIGNALS:
            signal.signal(number, _request_stop)


def stop_when_parent_dies(descriptor, grace_s):
    """Stop training as SIGTERM would once ``descriptor`` ends; end the process ``grace_s`` later at most.

    A parent that starts this process with a pipe as ``descriptor`` (its stdin)
    and never writes to it closes that pipe whenever it ends, SIGKILL
    included, so the child cannot outlive it. On that end of stream the
    child's output goes to /dev/null (the parent no longer reads it), training
    stops at the next step and saves, and a process still running ``grace_s``
    later (stuck before training started) exits with status 143.

    Args:
        descriptor: a file descriptor whose other end the parent holds (e.g. 0, stdin). It is read
            with ``os.read``, never through a Python file object, whose lock would block the
            interpreter's exit.
        grace_s: the longest the process may run on after the parent is gone.

    Example:
        >>> stop_when_parent_dies(sys.stdin.fileno(), grace_s=120)  # doctest: +SKIP
    """
    def watch():
        while os.read(descriptor, 4096):
            pass  # the parent never writes: this returns at end of stream only
        silent = os.open(os.devnull, os.O_WRONLY)
        os.dup2(silent, 1)
        os.dup2(silent, 2)
        if not _requested:
            _requested.append(signal.SIGTERM)
        time.sleep(grace_s)
        os._exit(128 + signal.SIGTERM)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def requested_signal():
    """The signal that asked training to stop, or None."""
    return _requested[0] if _requested else None


def _request_stop(signal_number, frame):
    if _requested:  # a second signal: the user does not want to wait for the step to end
        raise KeyboardInterrupt
    _requested.append(signal_number)
    print(f"kerasdist: {signal.Signals(signal_number).name} received: stopping after this step "
          "(send it again to stop at once)", flush=True)
