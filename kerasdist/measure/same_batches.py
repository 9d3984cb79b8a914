"""The same batches from the same weights on TensorFlow's MirroredStrategy: lesson 07's reference run.

Lesson 07 trains the course's MLP on JAX in its kernel and compares it step by
step with TensorFlow. Keras takes one backend per process, so the TensorFlow
run is a command of its own:

    python -m kerasdist.measure.same_batches mirrored --arrays train.npz --weights initial.weights.h5

It trains from a ``.weights.h5`` file (a backend-neutral format) on the arrays
``x``, ``y`` of an ``.npz``, in that order, batch after batch (no shuffling),
under ``tf.distribute.MirroredStrategy`` with its default all-reduce, and
prints one JSON line (``replicas``, each step's ``losses``, the weights'
``digest``); ``--save-weights OUT.npz`` writes the final weights. The JAX side
of the lesson's comparisons is kerasdist's JAX engine (``kerasdist.engines.jax_engine``).
User errors print one line to stderr and exit 2.
"""

import argparse
import json
import os
import sys
import warnings

import numpy as np

from kerasdist.errors import KerasdistError
from kerasdist.startup import use_backend


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
    use_backend("tensorflow")
    import keras
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


def _parser():
    parser = argparse.ArgumentParser(prog="python -m kerasdist.measure.same_batches",
                                     description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    mirrored = commands.add_parser("mirrored", help="fit() under MirroredStrategy (TensorFlow backend)")
    mirrored.add_argument("--arrays", required=True, help=".npz with x and y, in training order")
    mirrored.add_argument("--weights", required=True, help="initial weights (.weights.h5)")
    mirrored.add_argument("--global-batch-size", type=int, default=64)
    mirrored.add_argument("--epochs", type=int, default=1)
    mirrored.add_argument("--replicas", type=int, default=2)
    mirrored.add_argument("--save-weights", help="write the final weights to this .npz (arr_0, ...)")
    return parser


def main(argv=None):
    """Run the command; print its result as one JSON line."""
    options = _parser().parse_args(argv)
    try:
        read_arrays(options.arrays)  # user errors first, before TensorFlow loads
        check_weights_file(options.weights)
        result = run_mirrored(options.arrays, options.weights, options.replicas, options.global_batch_size,
                              options.epochs, options.save_weights)
    except KerasdistError as error:
        print(f"kerasdist: error: {error}", file=sys.stderr)
        return 2
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
