"""The seed MLP (784-256-256-10), built and compiled inside a strategy's scope."""

import keras

from kerasdist.errors import KerasdistError

LOSS_METRIC = "loss"
ACCURACY_METRIC = "sparse_categorical_accuracy"


@keras.saving.register_keras_serializable(package="kerasdist")
class LinearWarmup(keras.optimizers.schedules.LearningRateSchedule):
    """Ramp the learning rate linearly from ``initial`` to ``peak`` over ``warmup_steps`` steps, then hold it.

    The gradual warm-up of Goyal et al. (2017, section 2.2): with the linear
    scaling rule the global batch grows k times and the rate goes from the
    base rate η at step 0 to kη at step ``warmup_steps``, by the same amount
    each step, then stays at kη. Without ``initial_learning_rate`` the ramp
    starts at ``peak / warmup_steps`` (a warm-up from near zero, for a rate
    that is not scaled).

    Args:
        peak_learning_rate: the rate reached at ``warmup_steps`` and held after (kη).
        warmup_steps: steps of the ramp.
        initial_learning_rate: the rate at step 0 (η); None for ``peak / warmup_steps``.

    Example:
        >>> schedule = LinearWarmup(peak_learning_rate=0.002, warmup_steps=100, initial_learning_rate=0.001)
        >>> [round(float(schedule(step)), 6) for step in (0, 50, 100, 500)]
        [0.001, 0.0015, 0.002, 0.002]
    """

    def __init__(self, peak_learning_rate, warmup_steps, initial_learning_rate=None):
        self.peak_learning_rate = float(peak_learning_rate)
        self.warmup_steps = max(1, int(warmup_steps))
        if initial_learning_rate is None:
            initial_learning_rate = self.peak_learning_rate / self.warmup_steps
        self.initial_learning_rate = float(initial_learning_rate)

    def __call__(self, step):
        fraction = keras.ops.minimum(1.0, keras.ops.cast(step, "float32") / self.warmup_steps)
        return self.initial_learning_rate + (self.peak_learning_rate - self.initial_learning_rate) * fraction

    def get_config(self):
        return {"peak_learning_rate": self.peak_learning_rate, "warmup_steps": self.warmup_steps,
                "initial_learning_rate": self.initial_learning_rate}


def learning_rate_for(base_learning_rate, num_replicas, scale_with_replicas=False, warmup_steps=0):
    """The learning rate (or schedule) for a run.

    Args:
        base_learning_rate: the rate for one replica (η).
        num_replicas: replicas in sync (k).
        scale_with_replicas: apply the linear scaling rule (rate x replicas),
            for when the per-replica batch is fixed and the global batch grows.
        warmup_steps: steps of linear warm-up; 0 for none. With scaling, the
            ramp goes from η to kη (Goyal et al., 2017); without, from
            ``η / warmup_steps`` to η.

    Returns:
        A float, or a ``LinearWarmup`` schedule when ``warmup_steps > 0``.

    Example:
        >>> schedule = learning_rate_for(0.001, 2, scale_with_replicas=True, warmup_steps=10)
        >>> round(float(schedule(0)), 6), round(float(schedule(10)), 6)
        (0.001, 0.002)
    """
    if base_learning_rate <= 0:
        raise KerasdistError(f"learning_rate must be > 0. Received: learning_rate={base_learning_rate}")
    scale = num_replicas if scale_with_replicas else 1
    peak = base_learning_rate * scale
    if warmup_steps <= 0:
        return peak
    return LinearWarmup(peak, warmup_steps, initial_learning_rate=base_learning_rate if scale > 1 else None)


def build_model(learning_rate=1e-3, jit_compile=False):
    """Build and compile the seed MLP; call it inside ``strategy.scope()``.

    Architecture: 784 inputs -> Dense 256 ReLU -> Dense 256 ReLU -> 10 logits;
    Adam, sparse categorical cross-entropy from logits, sparse categorical
    accuracy. The optimizer's slots are built at once, so a checkpoint can be
    restored into it before training starts.

    Args:
        learning_rate: a float or a learning-rate schedule.
        jit_compile: compile train steps with XLA.

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
    logits = keras.layers.Dense(10, name="logits")(hidden)
    model = keras.Model(inputs, logits, name="mnist_mlp")
    optimizer = keras.optimizers.Adam(learning_rate=learning_rate)
    model.compile(
        optimizer=optimizer,
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=[keras.metrics.SparseCategoricalAccuracy()],
        jit_compile=jit_compile,
    )
    optimizer.build(model.trainable_variables)
    return model


def model_signature(model):
    """The variable names and shapes that a checkpoint must match, as a list of strings."""
    return [f"{v.path}:{tuple(v.shape)}" for v in model.weights]
