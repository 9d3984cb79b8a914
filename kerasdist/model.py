"""The guide's MNIST MLP (784-256-256-10), built and compiled inside a strategy's scope."""

import hashlib

import keras
import numpy as np

from kerasdist.errors import KerasdistError

LOSS_METRIC = "loss"
ACCURACY_METRIC = "sparse_categorical_accuracy"


def learning_rate_for(base_learning_rate, num_replicas, scale_with_replicas=False, warmup_steps=0):
    """The learning rate (or schedule) for a run.

    With scaling, the gradual warm-up of Goyal et al. (2017, section 2.2):
    the global batch grows k times and the rate goes from the one-replica
    rate η at step 0 to kη at step ``warmup_steps``, by the same amount each
    step, then stays at kη (the paper then resumes its usual schedule from
    kη; kerasdist trains a few epochs and holds it). A warm-up always starts
    at the unscaled rate η: without scaling (or with k = 1) the target is η
    itself, so the "ramp" is flat. The ramp is Keras' own ``CosineDecay``
    with ``initial_learning_rate=η``, ``warmup_target=kη`` and ``alpha=1.0``
    (the decay after the warm-up ends where it starts, so ``decay_steps``
    changes nothing); it is a schedule whenever ``warmup_steps > 0``, even a
    flat one, so the optimizer holds the same variables as in checkpoints
    written by earlier versions.

    Args:
        base_learning_rate: the rate for one replica (η).
        num_replicas: replicas in sync (k).
        scale_with_replicas: apply the linear scaling rule (rate x replicas),
            for when the per-replica batch is fixed and the global batch grows.
        warmup_steps: steps of linear warm-up from η to the scaled rate; 0 for none.

    Returns:
        A float, or a ``keras.optimizers.schedules.CosineDecay`` when ``warmup_steps > 0``.

    Raises:
        KerasdistError: if ``base_learning_rate`` is not > 0.

    Example:
        >>> schedule = learning_rate_for(0.001, 2, scale_with_replicas=True, warmup_steps=10)
        >>> [round(float(schedule(step)), 6) for step in (0, 5, 10, 500)]
        [0.001, 0.0015, 0.002, 0.002]
        >>> flat = learning_rate_for(0.001, 4, warmup_steps=10)  # no scaling: η to η
        >>> [round(float(flat(step)), 6) for step in (0, 5, 10, 500)]
        [0.001, 0.001, 0.001, 0.001]
    """
    if base_learning_rate <= 0:
        raise KerasdistError(f"learning_rate must be > 0. Received: learning_rate={base_learning_rate}")
    peak = base_learning_rate * (num_replicas if scale_with_replicas else 1)
    warmup_steps = int(warmup_steps)
    if warmup_steps <= 0:
        return peak
    return keras.optimizers.schedules.CosineDecay(
        initial_learning_rate=base_learning_rate, warmup_target=peak, warmup_steps=warmup_steps,
        decay_steps=1, alpha=1.0,
    )


def build_model(learning_rate=1e-3, jit_compile=False, steps_per_execution=1):
    """Build and compile the guide's MLP; call it inside ``strategy.scope()``.

    Architecture: 784 inputs -> Dense 256 ReLU -> Dense 256 ReLU -> 10 logits;
    Adam, sparse categorical cross-entropy from logits, sparse categorical
    accuracy. The optimizer's slots are built at once, so a checkpoint can be
    restored into it before training starts.

    Args:
        learning_rate: a float or a learning-rate schedule.
        jit_compile: compile train steps with XLA.
        steps_per_execution: steps per compiled call of ``fit()`` (its callbacks run once per call).

    Returns:
        A compiled ``keras.Model``.

    Example:
        >>> import tensorflow as tf
        >>> with tf.distribute.MirroredStrategy().scope():  # doctest: +SKIP
        ...     model = build_model()
    """
    inputs = keras.Input(shape=(784,), name="digits")
    hidden = keras.layers.Dense(256, activation="relu", name="dense_1")(inputs)
    hidden = keras.layers.Dense(256, activation="relu", name="dense_2")(hidden)
    # float32 logits under a mixed-precision policy too: the loss and its statistics stay in float32.
    logits = keras.layers.Dense(10, name="logits", dtype="float32")(hidden)
    model = keras.Model(inputs, logits, name="mnist_mlp")
    optimizer = keras.optimizers.Adam(learning_rate=learning_rate)
    model.compile(
        optimizer=optimizer,
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=[keras.metrics.SparseCategoricalAccuracy()],
        jit_compile=jit_compile,
        steps_per_execution=steps_per_execution,
    )
    optimizer.build(model.trainable_variables)
    return model


def model_signature(model):
    """The variable names and shapes that a checkpoint must match, as a list of strings."""
    return [f"{v.path}:{tuple(v.shape)}" for v in model.weights]


def weights_digest(weights):
    """SHA-256 (hex) of a list of weight arrays in order: equal digests mean bit-identical weights.

    Example:
        >>> weights_digest([np.zeros(2, np.float32)])[:16]
        'af5570f5a1810b7a'
    """
    digest = hashlib.sha256()
    for array in weights:
        digest.update(np.ascontiguousarray(array).tobytes())
    return digest.hexdigest()
