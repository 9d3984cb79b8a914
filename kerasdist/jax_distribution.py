"""Keras 3's ``keras.distribution`` on JAX beside tf.distribute, each in a process of its own (lesson 07).

A process chooses Keras' backend once, before Keras loads, and importing
kerasdist loads TensorFlow; so a lesson on the JAX backend runs these pieces
as commands, ``python -m kerasdist.jax_distribution COMMAND``:

- ``data OUT.npz``: the lesson's MNIST (any ``--data`` source), as arrays;
- ``mirrored``: the TensorFlow reference, ``fit()`` under MirroredStrategy;
- ``worker``: one process of a multi-process ``fit()`` on JAX
  (``keras.distribution.initialize``, JAX's gloo CPU collectives);
- ``launch``: N workers on 127.0.0.1, every wait bounded.

``mirrored``, ``worker`` and ``launch`` train the course's MLP from a
``.weights.h5`` file on the arrays ``x``, ``y`` of an ``.npz``, in that order,
batch after batch (no shuffling); each prints one JSON line as its last line
of stdout, and with ``--save-weights OUT.npz`` writes the final weights
(``model.get_weights()``, in order; process 0's for ``launch``), so that a
lesson can compare them with its own. User errors print one line to stderr
and exit 2.
"""

import argparse
import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import warnings

import numpy as np

from kerasdist.errors import KerasdistError

STDERR_TAIL_CHARS = 3000


def read_arrays(path):
    """The training arrays ``x`` (float32) and ``y`` (int32) of an .npz file.

    Raises:
        KerasdistError: if the file is missing or lacks ``x`` or ``y``.
    """
    if not os.path.isfile(path):
        raise KerasdistError(f"arrays file not found. Received: arrays={path}; "
                             "write it with numpy.savez(path, x=..., y=...)")
    with np.load(path) as arrays:
        if "x" not in arrays or "y" not in arrays:
            raise KerasdistError(f"the arrays file must hold x and y. "
                                 f"Received: keys {sorted(arrays.files)} in {path}")
        return arrays["x"].astype(np.float32), arrays["y"].astype(np.int32)


def check_weights_file(path):
    """Raise a one-line ``KerasdistError`` unless ``path`` is an existing ``.weights.h5`` file."""
    if not (path.endswith(".weights.h5") and os.path.isfile(path)):
        raise KerasdistError(f"weights must be an existing .weights.h5 file. Received: weights={path}; "
                             "write it with model.save_weights('initial.weights.h5')")


def _import_keras(backend):
    """Keras on ``backend``, which this process must not have loaded on another one."""
    previous = os.environ.get("KERAS_BACKEND")
    os.environ["KERAS_BACKEND"] = backend
    import keras

    if keras.config.backend() != backend:
        if previous is None:
            del os.environ["KERAS_BACKEND"]
        else:
            os.environ["KERAS_BACKEND"] = previous
        raise KerasdistError(
            f"this command needs Keras on {backend} in a process of its own. Received: Keras "
            f"already loaded on {keras.config.backend()}; run python -m kerasdist.jax_distribution")
    return keras


def _short_digest(model):
    """The first 16 hex digits of ``kerasdist.model.weights_digest`` of the model's weights."""
    from kerasdist import model as model_module

    return model_module.weights_digest(model.get_weights())[:16]


def _model_from(weights_path):
    from kerasdist import model as model_module

    model = model_module.build_model(jit_compile="auto")
    with warnings.catch_warnings():  # the file holds no optimizer state: Adam starts from zero
        warnings.filterwarnings("ignore", message="Skipping variable loading for optimizer")
        model.load_weights(weights_path)
    return model


def save_final_weights(model, path):
    """Write ``model.get_weights()`` to the .npz ``path`` (``arr_0``, ``arr_1``, ... in order), if given."""
    if path:
        np.savez(path, *model.get_weights())


def load_final_weights(path):
    """The weight arrays that ``save_final_weights`` wrote, in order."""
    with np.load(path) as saved:
        return [saved[f"arr_{index}"] for index in range(len(saved.files))]


def _step_losses(keras):
    """A callback whose ``losses`` holds each step's own loss (Keras logs the epoch's running mean)."""

    class StepLosses(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.losses, self._previous_mean = [], 0.0

        def on_epoch_begin(self, epoch, logs=None):
            self._previous_mean = 0.0

        def on_train_batch_end(self, batch, logs=None):
            mean = float(logs["loss"])
            self.losses.append((batch + 1) * mean - batch * self._previous_mean)
            self._previous_mean = mean

    return StepLosses()


def run_mirrored(arrays, weights, replicas, global_batch_size, epochs, save_weights=None):
    """Train under TensorFlow's MirroredStrategy; return ``{"replicas", "losses", "digest"}``.

    TensorFlow's own ``MirroredStrategy(devices)``: its default all-reduce
    (``CollectiveAllReduce``), not kerasdist's ``make_strategy("mirrored")``.
    ``save_weights``: an .npz path for the final weights (``save_final_weights``).
    """
    keras = _import_keras("tensorflow")
    import tensorflow as tf

    import kerasdist

    devices = kerasdist.configure_replicas(replicas)

    x, y = read_arrays(arrays)
    strategy = tf.distribute.MirroredStrategy(devices)
    with strategy.scope():
        model = _model_from(weights)
    recorder = _step_losses(keras)
    model.fit(x, y, batch_size=global_batch_size, epochs=epochs, shuffle=False, verbose=0,
              callbacks=[recorder])
    save_final_weights(model, save_weights)
    return {"replicas": strategy.num_replicas_in_sync, "losses": recorder.losses,
            "digest": _short_digest(model)}


def run_worker(process_id, processes, coordinator, arrays, weights, global_batch_size, epochs,
               save_weights=None):
    """One process of a multi-process ``fit()`` with ``keras.distribution`` on JAX.

    Every process joins the cluster at ``coordinator`` (process 0 serves it),
    builds the same model from ``weights`` and feeds only its own share of
    each global batch: rows ``[p * local, (p + 1) * local)`` of every batch of
    ``global_batch_size`` rows, ``local = global_batch_size / processes``.
    The distribution's ``auto_shard_dataset`` is off because that input is
    already sharded (Keras can shard only a tf.data.Dataset itself).
    Process 0 writes its final weights to ``save_weights`` (an .npz path), if given.

    Returns:
        ``{"process", "devices", "losses", "digest"}``: the global device
        count, each step's loss and the final weights' digest.
    """
    keras = _import_keras("jax")
    import jax

    jax.config.update("jax_cpu_collectives_implementation", "gloo")  # all-reduce between CPU processes

    keras.distribution.initialize(job_addresses=coordinator, num_processes=processes, process_id=process_id)
    x, y = read_arrays(arrays)
    local = global_batch_size // processes
    steps = len(y) // global_batch_size
    mine = (np.arange(steps)[:, None] * global_batch_size + process_id * local + np.arange(local)).ravel()
    keras.distribution.set_distribution(keras.distribution.DataParallel(auto_shard_dataset=False))
    model = _model_from(weights)
    recorder = _step_losses(keras)
    model.fit(x[mine], y[mine], batch_size=local, epochs=epochs, shuffle=False, verbose=0,
              callbacks=[recorder])
    if process_id == 0:
        save_final_weights(model, save_weights)
    return {"process": process_id, "devices": jax.device_count(), "losses": recorder.losses,
            "digest": _short_digest(model)}


def free_port():
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def launch(arrays, weights, processes=2, global_batch_size=64, epochs=1, timeout_s=240, save_weights=None):
    """Run ``processes`` workers on 127.0.0.1 and wait for all of them, at most ``timeout_s`` in all.

    ``save_weights``: an .npz path where process 0 writes its final weights.

    Returns:
        The workers' results (see ``run_worker``), by process id.

    Raises:
        KerasdistError: if a worker fails or the time runs out (the others
            are stopped); the message ends with the failing worker's stderr tail.

    Example:
        >>> results = launch("train.npz", "initial.weights.h5")  # doctest: +SKIP
        >>> len({r["digest"] for r in results})  # doctest: +SKIP
        1
    """
    if global_batch_size % processes:
        raise KerasdistError(f"global_batch_size must be divisible by processes. "
                             f"Received: global_batch_size={global_batch_size}, processes={processes}")
    coordinator = f"127.0.0.1:{free_port()}"
    environment = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}  # one CPU device per process
    with tempfile.TemporaryDirectory(prefix="kerasdist-jax-") as logs, contextlib.ExitStack() as files:
        workers, outputs = [], []
        for process_id in range(processes):
            outputs.append([files.enter_context(open(os.path.join(logs, f"{process_id}.{kind}"), "w+"))
                            for kind in ("out", "err")])
            command = [sys.executable, "-m", "kerasdist.jax_distribution", "worker",
                       "--process-id", str(process_id), "--processes", str(processes),
                       "--coordinator", coordinator, "--arrays", arrays, "--weights", weights,
                       "--global-batch-size", str(global_batch_size), "--epochs", str(epochs)]
            if save_weights:
                command += ["--save-weights", save_weights]
            workers.append(subprocess.Popen(command, stdout=outputs[-1][0], stderr=outputs[-1][1],
                                            env=environment))
        deadline = time.monotonic() + timeout_s
        try:
            # Until all end, one fails (the others would wait for it in the next all-reduce),
            # or time runs out.
            while (any(w.poll() is None for w in workers) and all(w.poll() in (None, 0) for w in workers)
                   and time.monotonic() < deadline):
                time.sleep(0.2)
        finally:
            for worker in workers:
                if worker.poll() is None:
                    worker.kill()
                    worker.wait(timeout=30)
        timed_out = time.monotonic() >= deadline
        results, failures = [], []
        for process_id, (worker, (stdout, stderr)) in enumerate(zip(workers, outputs)):
            stdout.seek(0)
            stderr.seek(0)
            if worker.returncode == 0:
                results.append(json.loads(stdout.read().strip().splitlines()[-1]))
            elif worker.returncode > 0 or timed_out:
                why = (f"exit status {worker.returncode}" if worker.returncode > 0
                       else f"stopped after {timeout_s} s")
                failures.append(f"worker {process_id} failed ({why}); its stderr ends with:\n"
                                f"{stderr.read()[-STDERR_TAIL_CHARS:]}")
            else:
                failures.append(f"worker {process_id} was stopped: another worker failed")
    if failures:
        raise KerasdistError(f"the {processes}-process run failed: " + "\n".join(failures))
    return results


def write_data(out, source, seed=0):
    """Load MNIST as every lesson does (printing its source) and save the splits to ``out`` (.npz)."""
    from kerasdist import data as data_module

    data = data_module.load_mnist(source, seed=seed)
    np.savez(out, x_train=data.x_train, y_train=data.y_train, x_val=data.x_val, y_val=data.y_val,
             x_test=data.x_test, y_test=data.y_test)


def _parser():
    parser = argparse.ArgumentParser(prog="python -m kerasdist.jax_distribution",
                                     description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    data = commands.add_parser("data", help="save the lesson's MNIST splits to an .npz")
    data.add_argument("out")
    data.add_argument("--data", default="auto", help="auto, keras, sample or an .npz path (default auto)")
    data.add_argument("--seed", type=int, default=0)
    for name, text in (("mirrored", "fit() under MirroredStrategy (TensorFlow backend)"),
                       ("worker", "one process of a multi-process fit() on JAX"),
                       ("launch", "N workers on 127.0.0.1, bounded waits")):
        command = commands.add_parser(name, help=text)
        command.add_argument("--arrays", required=True, help=".npz with x and y, in training order")
        command.add_argument("--weights", required=True, help="initial weights (.weights.h5)")
        command.add_argument("--global-batch-size", type=int, default=64)
        command.add_argument("--epochs", type=int, default=1)
        command.add_argument("--save-weights", help="write the final weights to this .npz (arr_0, ...)")
    commands.choices["mirrored"].add_argument("--replicas", type=int, default=2)
    commands.choices["worker"].add_argument("--process-id", type=int, required=True)
    commands.choices["worker"].add_argument("--coordinator", required=True, help="HOST:PORT of process 0")
    for name in ("worker", "launch"):
        commands.choices[name].add_argument("--processes", type=int, default=2)
    commands.choices["launch"].add_argument("--timeout-s", type=float, default=240)
    return parser


def main(argv=None):
    """Run one command; print its result as one JSON line (``data`` prints the data source)."""
    options = _parser().parse_args(argv)
    try:
        if options.command == "data":
            write_data(options.out, options.data, options.seed)
            return 0
        read_arrays(options.arrays)  # user errors first, before a backend loads
        check_weights_file(options.weights)
        common = {"arrays": options.arrays, "weights": options.weights,
                  "global_batch_size": options.global_batch_size, "epochs": options.epochs,
                  "save_weights": options.save_weights}
        if options.command == "mirrored":
            result = run_mirrored(replicas=options.replicas, **common)
        elif options.command == "worker":
            result = run_worker(options.process_id, options.processes, options.coordinator, **common)
        else:
            result = launch(processes=options.processes, timeout_s=options.timeout_s, **common)
    except KerasdistError as error:
        print(f"kerasdist: error: {error}", file=sys.stderr)
        return 2
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
