"""Lesson 08's speed ladder: one MLP trained by each rung, from the TensorFlow guide's ``fit()`` to a
``jax.lax.scan`` epoch.

Every rung trains the same model (784-256-256-10, Adam 1e-3, batch 64) for
the same epochs on the same data and reports each epoch's training seconds
(kerasdist's loop validates after each epoch: that pass is not counted) and
the test accuracy. A rung runs in the calling process when it uses the backend
Keras loaded there, and otherwise in a process of its own
(``python -m kerasdist.measure.speed_ladder RUNG``), because Keras chooses its
backend once, before it loads; every wait for such a process is bounded.

Example:
    >>> from kerasdist.measure import speed_ladder
    >>> result = speed_ladder.measure("JAX lax.scan epoch", "sample", epochs=2)  # doctest: +SKIP
    >>> round(speed_ladder.steady_samples_per_s(result))  # doctest: +SKIP
    41873
"""

import argparse
import copy
import json
import os
import statistics
import subprocess
import sys
import time

import keras
import numpy as np

from kerasdist.errors import KerasdistError

BATCH_SIZE = 64
STEPS_PER_CALL = 50
SEED = 0
TIMEOUT_S = 900
STDERR_TAIL_CHARS = 3000

# Each rung: the backend it needs, and how it trains.
RUNGS = {
    "fit (guide)": {"backend": "tensorflow", "kind": "fit", "steps_per_execution": 1, "jit_compile": False},
    "fit, 50 steps/call": {"backend": "tensorflow", "kind": "fit", "steps_per_execution": STEPS_PER_CALL,
                           "jit_compile": False},
    "fit, 50 steps/call, XLA": {"backend": "tensorflow", "kind": "fit", "steps_per_execution": STEPS_PER_CALL,
                                "jit_compile": True},
    "kerasdist loop": {"backend": "tensorflow", "kind": "kerasdist", "jit_compile": False},
    "kerasdist loop + XLA": {"backend": "tensorflow", "kind": "kerasdist", "jit_compile": True},
    "Keras on JAX, fit, 50 steps/call": {"backend": "jax", "kind": "fit",
                                         "steps_per_execution": STEPS_PER_CALL, "jit_compile": True},
    "JAX lax.scan epoch": {"backend": "jax", "kind": "scan"},
}
SCAN_RUNG = "JAX lax.scan epoch"
# What ``measure`` returned in this process, per (rung, precision, batch size): copies of the last few,
# oldest first. Lesson 08's check compares a student's ``runs`` with them, so that redefining ``runs``
# cannot change what it checks.
_MEASURED = {}
_KEPT = 8


def measure(rung, data_source="fashion", epochs=3, data=None, precision="float32", batch_size=BATCH_SIZE,
            own_process=False):
    """Train ``rung`` for ``epochs``; its epochs' seconds, samples per epoch and test accuracy.

    Args:
        rung: a name of ``RUNGS``.
        data_source: what ``kerasdist.load_mnist`` loads ("fashion", "sample", an .npz path).
        epochs: epochs to train; the first includes tracing and compiling.
        data: the loaded data, to reuse in this process (a rung in a process of its own loads
            ``data_source`` itself).
        precision: a Keras dtype policy, e.g. "mixed_bfloat16".
        batch_size: samples per step.
        own_process: run in a process of its own even where this process could run it (a benchmark's
            rungs then share no state).

    Returns:
        ``{"epoch_seconds": [...], "samples_per_epoch": n, "test_accuracy": a}``.

    Raises:
        KerasdistError: for an unknown rung, or a rung's process that fails or outlives ``TIMEOUT_S``.
    """
    if rung not in RUNGS:
        raise KerasdistError(f"unknown rung. Received: {rung!r}; use one of {', '.join(RUNGS)}")
    if RUNGS[rung]["backend"] == keras.backend.backend() and not own_process:
        if data is None:
            from kerasdist.data import load_mnist

            data = load_mnist(data_source, seed=SEED, verbose=False)
        return _remember(rung, _train(rung, data, epochs, precision, batch_size), precision, batch_size)
    command = [sys.executable, "-m", "kerasdist.measure.speed_ladder", rung, "--data", str(data_source),
               "--epochs", str(epochs), "--precision", precision, "--batch-size", str(batch_size)]
    environment = dict(os.environ, KERAS_BACKEND=RUNGS[rung]["backend"])
    try:
        completed = subprocess.run(command, capture_output=True, text=True, env=environment,
                                   timeout=TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        raise KerasdistError(f"the rung {rung!r} did not finish within {TIMEOUT_S} s") from None
    if completed.returncode:
        raise KerasdistError(f"the rung {rung!r} failed (exit {completed.returncode}):\n"
                             f"{completed.stderr[-STDERR_TAIL_CHARS:]}")
    return _remember(rung, json.loads(completed.stdout.strip().splitlines()[-1]), precision, batch_size)


def measured(rung, precision="float32", batch_size=BATCH_SIZE):
    """Copies of what ``measure(rung, ...)`` returned in this process at ``precision`` and ``batch_size``,
    oldest first (the last few)."""
    return copy.deepcopy(_MEASURED.get((rung, precision, int(batch_size)), []))


def _remember(rung, result, precision="float32", batch_size=BATCH_SIZE):
    kept = _MEASURED.setdefault((rung, precision, int(batch_size)), [])
    kept.append(copy.deepcopy(result))
    del kept[:-_KEPT]
    return result


def steady_samples_per_s(result):
    """Samples/s of the median epoch after the first (which pays for tracing and compiling)."""
    return result["samples_per_epoch"] / statistics.median(result["epoch_seconds"][1:])


def _train(rung, data, epochs, precision, batch_size):
    setting = RUNGS[rung]
    keras.utils.set_random_seed(SEED)
    keras.mixed_precision.set_global_policy(precision)
    try:
        if setting["kind"] == "kerasdist":
            return _train_kerasdist(setting, data, epochs, batch_size)
        if setting["kind"] == "fit":
            return _train_fit(setting, data, epochs, batch_size)
        return _train_scan(data, epochs, batch_size)
    finally:
        keras.mixed_precision.set_global_policy("float32")


class TrainingTimer(keras.callbacks.Callback):
    """Seconds each epoch spends training: from its start to its validation, or to its end if it has none."""

    def __init__(self):
        super().__init__()
        self.seconds, self.started = [], None

    def on_epoch_begin(self, epoch, logs=None):
        self.started = time.perf_counter()

    def on_test_begin(self, logs=None):
        self._stop()

    def on_epoch_end(self, epoch, logs=None):
        self._stop()

    def _stop(self):
        if self.started is not None:
            self.seconds.append(time.perf_counter() - self.started)
            self.started = None


def guide_model(**compile_options):
    """The MLP as TensorFlow's distributed-training guide writes it: Sequential, a plain ``compile``."""
    model = keras.Sequential([
        keras.Input(shape=(784,)),
        keras.layers.Dense(256, activation="relu"),
        keras.layers.Dense(256, activation="relu"),
        keras.layers.Dense(10),
    ])
    model.compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  optimizer=keras.optimizers.Adam(), metrics=["accuracy"], **compile_options)
    return model


def _train_fit(setting, data, epochs, batch_size):
    model = guide_model(steps_per_execution=setting["steps_per_execution"],
                        jit_compile=setting["jit_compile"])
    timer = TrainingTimer()
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        train = tf.data.Dataset.from_tensor_slices((data.x_train, data.y_train)).cache().shuffle(10_000)
        model.fit(train.batch(batch_size), epochs=epochs, callbacks=[timer], shuffle=False, verbose=0)
    else:  # JAX: Keras batches the arrays itself, shuffled each epoch
        model.fit(data.x_train, data.y_train, batch_size=batch_size, epochs=epochs, callbacks=[timer],
                  verbose=0)
    _, accuracy = model.evaluate(data.x_test, data.y_test, batch_size=1024, verbose=0)
    return {"epoch_seconds": timer.seconds, "samples_per_epoch": len(data.y_train), "test_accuracy": accuracy}


def _train_kerasdist(setting, data, epochs, batch_size):
    from kerasdist.engines.train import run_training

    timer = TrainingTimer()
    result = run_training(replicas=1, epochs=epochs, global_batch_size=batch_size, data=data, seed=SEED,
                          engine="loop", steps_per_execution=STEPS_PER_CALL,
                          jit_compile=setting["jit_compile"], callbacks=(timer,), verbose=0)
    return {"epoch_seconds": timer.seconds, "samples_per_epoch":
            len(data.y_train) // batch_size * batch_size, "test_accuracy": result.test["accuracy"]}


def stateless_step(model):
    """One training step of a compiled ``model`` as a pure function: ``step(state, (images, labels))``
    returns the new state and the step's loss.

    Written with Keras' stateless API (``model.stateless_call``,
    ``optimizer.stateless_apply``): the state is ``scan_state``'s tuple of
    values, and nothing is assigned to the model's variables, so JAX can trace,
    jit and scan the step.

    Example:
        >>> step = stateless_step(model)                              # doctest: +SKIP
        >>> state, loss = jax.jit(step)(scan_state(model), (x, y))    # doctest: +SKIP
    """
    import jax

    optimizer, loss_function = model.optimizer, model.loss

    def loss_of(trainable, non_trainable, images, labels):
        logits, non_trainable = model.stateless_call(trainable, non_trainable, images, training=True)
        return loss_function(labels, logits), non_trainable

    gradient_of = jax.value_and_grad(loss_of, has_aux=True)

    def step(state, batch):
        trainable, non_trainable, optimizer_variables = state
        (loss, non_trainable), gradients = gradient_of(trainable, non_trainable, *batch)
        trainable, optimizer_variables = optimizer.stateless_apply(optimizer_variables, gradients, trainable)
        return (trainable, non_trainable, optimizer_variables), loss

    return step


def scan_epoch(model, x, y, batch_size):
    """A jitted function training one epoch of ``model`` as one ``jax.lax.scan`` over device-resident batches.

    ``x`` and ``y`` stay on the device; each call takes the epoch's order of
    sample indices and the state (trainable, non-trainable and optimizer
    variables), and returns the new state and each step's loss. Each step
    gathers its batch from ``x`` and ``y`` and runs ``stateless_step``. The
    whole epoch is one call: no step returns to Python.

    Example:
        >>> train_epoch = scan_epoch(model, jax.device_put(x), jax.device_put(y), 64)  # doctest: +SKIP
        >>> state, losses = train_epoch(state, jnp.arange(64 * 10))                     # doctest: +SKIP
    """
    import jax

    train_step = stateless_step(model)

    def step(state, indices):
        return train_step(state, (x[indices], y[indices]))

    @jax.jit
    def epoch(state, order):
        return jax.lax.scan(step, state, order.reshape(-1, batch_size))

    return epoch


def scan_state(model):
    """The (trainable, non-trainable, optimizer) variables' values of ``model``: the state ``scan_epoch``'s
    function takes and returns."""
    return tuple([variable.value for variable in variables] for variables in
                 (model.trainable_variables, model.non_trainable_variables, model.optimizer.variables))


def validated_scan_epoch(model, x, y, x_val, y_val, batch_size):
    """``scan_epoch`` followed, in the same jitted call, by the loss and accuracy on (x_val, y_val).

    The hand-written JAX program that kerasdist's engines are measured against
    (``benchmarks/benchmark_engines.py``): an epoch and its validation, one
    call, nothing returning to Python in between.

    Example:
        >>> epoch = validated_scan_epoch(model, x, y, x_val, y_val, 64)             # doctest: +SKIP
        >>> state, losses, (val_loss, val_accuracy) = epoch(state, order)           # doctest: +SKIP
    """
    import jax
    import jax.numpy as jnp

    train_epoch = scan_epoch(model, x, y, batch_size)

    @jax.jit
    def epoch(state, order):
        state, losses = train_epoch(state, order)
        logits, _ = model.stateless_call(state[0], state[1], x_val, training=False)
        accuracy = jnp.mean(jnp.argmax(logits, axis=-1) == y_val)
        return state, losses, (model.loss(y_val, logits), accuracy)

    return epoch


def _train_scan(data, epochs, batch_size):
    import jax
    import jax.numpy as jnp

    model = guide_model()
    model.optimizer.build(model.trainable_variables)
    x, y = jax.device_put(data.x_train), jax.device_put(data.y_train.astype(np.int32))
    train_epoch = scan_epoch(model, x, y, batch_size)
    state = scan_state(model)
    steps = len(data.y_train) // batch_size
    generator, seconds = np.random.default_rng(SEED), []
    for _ in range(epochs):
        order = jnp.asarray(generator.permutation(len(data.y_train))[:steps * batch_size])
        started = time.perf_counter()
        state, losses = train_epoch(state, order)
        losses.block_until_ready()
        seconds.append(time.perf_counter() - started)
    for variable, value in zip(model.trainable_variables, state[0]):
        variable.assign(value)
    accuracy = float(np.mean(np.argmax(model.predict(data.x_test, batch_size=1024, verbose=0), axis=1)
                             == data.y_test))
    return {"epoch_seconds": seconds, "samples_per_epoch": steps * batch_size, "test_accuracy": accuracy}


def main(argv=None):
    """``python -m kerasdist.measure.speed_ladder RUNG``: train one rung here; print its result as one JSON
    line."""
    parser = argparse.ArgumentParser(prog="python -m kerasdist.measure.speed_ladder",
                                     description=main.__doc__)
    parser.add_argument("rung", choices=list(RUNGS))
    parser.add_argument("--data", default="fashion")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--precision", default="float32")
    parser.add_argument("--batch-size", type=int, default=BATCH_SIZE)
    args = parser.parse_args(argv)
    if RUNGS[args.rung]["backend"] != keras.backend.backend():
        parser.exit(2, f"kerasdist: error: the rung {args.rung!r} needs KERAS_BACKEND="
                       f"{RUNGS[args.rung]['backend']}. Received: {keras.backend.backend()}\n")
    try:
        result = measure(args.rung, args.data, args.epochs, precision=args.precision,
                         batch_size=args.batch_size)
    except KerasdistError as error:
        parser.exit(2, f"kerasdist: error: {error}\n")
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
