"""The peer watchdog: end this task with one line when training makes no progress for a timeout.

TensorFlow can block a worker's Python threads while it waits for a peer,
and a coordination call to a stopped (SIGSTOP) chief has no deadline, so the
watching runs in a small process of its own (``watchdog_process.py``); the
training engines feed it through a Keras callback (``PeerWatchdog.callback``).
"""

import json
import os
import subprocess
import sys
import time

import keras

from kerasdist.cluster import watchdog_process
from kerasdist.cluster.peers import DEFAULT_PEER_TIMEOUT_S, peer_addresses


class PeerWatchdog:
    """End this process with one line if training makes no progress for ``timeout_s``.

    In synchronous training every step waits for every peer, so no progress
    for that long means a peer stopped, hung or became unreachable. The
    watching runs in a small process of its own (``watchdog_process.py``),
    since TensorFlow can block this process's Python threads while it waits
    for a peer; it names each peer and what a connection attempt to it shows,
    then SIGKILLs this process (TensorFlow's own shutdown would wait on the
    silent peer too).

    Args:
        task: this process's ``ClusterTask``.
        timeout_s: seconds without progress before giving up.
        cleanup: a directory to delete before the process is ended (e.g. a temporary copy).

    Example:
        >>> with PeerWatchdog(task, timeout_s=60) as watchdog:         # doctest: +SKIP
        ...     run_training(..., callbacks=[watchdog.callback()])
    """

    def __init__(self, task, timeout_s=DEFAULT_PEER_TIMEOUT_S, cleanup=None):
        self.config = {"pid": os.getpid(), "name": task.name, "peers": peer_addresses(task),
                       "timeout_s": timeout_s, "cleanup": cleanup}
        self._process = None
        self._last_beat = 0.0

    def __enter__(self):
        # -I: the script's folder (this package's modules) stays off its sys.path.
        command = [sys.executable, "-I", watchdog_process.__file__, json.dumps(self.config)]
        self._process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
        os.set_blocking(self._process.stdin.fileno(), False)
        return self

    def beat(self):
        """Record progress (at most a few times a second)."""
        now = time.monotonic()
        if now - self._last_beat > 0.2:
            self._last_beat = now
            try:
                os.write(self._process.stdin.fileno(), b".")
            except (BlockingIOError, BrokenPipeError):
                pass  # a full pipe already holds beats; a gone watchdog cannot take them

    def callback(self):
        """A Keras callback that beats whenever training moves on (joined, a step, validation, an epoch)."""
        return ProgressBeat(self.beat)

    def __exit__(self, *exc_info):
        self._process.stdin.close()
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()


class ProgressBeat(keras.callbacks.Callback):
    """Call ``beat`` at each sign of progress an engine reports: training began, a batch, validation, epochs.

    Example:
        >>> model.fit(ds, callbacks=[ProgressBeat(lambda: print("moved on"))])  # doctest: +SKIP
    """

    def __init__(self, beat):
        super().__init__()
        self.beat = beat

    def on_train_begin(self, logs=None):
        self.beat()

    def on_train_batch_end(self, batch, logs=None):
        self.beat()

    def on_test_end(self, logs=None):
        self.beat()

    def on_epoch_end(self, epoch, logs=None):
        self.beat()
