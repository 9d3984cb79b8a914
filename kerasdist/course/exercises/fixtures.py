"""What the checks build their references from: 2 replicas, real digits, the course's MLP, array gaps.

Example:
    >>> import numpy as np
    >>> largest_gap([np.ones(3)], [np.ones(3) * 1.5])
    0.5
"""

import contextlib
import logging

import numpy as np


def two_replicas():
    """A MirroredStrategy on this process's first 2 logical devices (the lessons make at least 2).

    It sums with ``ReductionToOneDevice``: no collective ops, whose keys could clash with those of
    the lesson's own strategy in the same process (each MirroredStrategy numbers its collectives
    from the same start).
    """
    import tensorflow as tf

    from kerasdist.devices import replica_devices

    one_device = tf.distribute.ReductionToOneDevice()
    return tf.distribute.MirroredStrategy(replica_devices(2), cross_device_ops=one_device)


@contextlib.contextmanager
def quiet_tensorflow():
    """Keep TensorFlow's warnings (retracing: a check builds several small models) out of the output."""
    logger = logging.getLogger("tensorflow")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def digits_of_every_class(size):
    """``size`` real digits of every class (the offline sample is sorted by label: every k-th of it)."""
    images, labels = digit_batch(5000)
    chosen = np.arange(size) * (len(labels) // size)
    return images[chosen], labels[chosen]


def digit_batch(size=64, start=0):
    """``size`` real MNIST digits of the offline sample: float32 images scaled to [0, 1], int32 labels."""
    from kerasdist.data import sample_digits

    images, labels = sample_digits()
    chosen = slice(start, start + size)
    return (images[chosen] / 255.0).astype("float32"), labels[chosen].astype("int32")


def mlp(seed=1):
    """The course's MLP (784-256-256-10, logits), uncompiled, with weights from ``seed``."""
    import keras

    keras.utils.set_random_seed(seed)
    inputs = keras.Input(shape=(784,), name="digits")
    hidden = keras.layers.Dense(256, activation="relu", name="dense_1")(inputs)
    hidden = keras.layers.Dense(256, activation="relu", name="dense_2")(hidden)
    return keras.Model(inputs, keras.layers.Dense(10, name="logits")(hidden), name="mnist_mlp")


def as_arrays(values):
    """A list of NumPy arrays from a list of tensors, arrays or (from R) converted values."""
    return [np.asarray(value) for value in values]


def largest_gap(first, second):
    """The largest absolute difference between two lists of equally shaped arrays."""
    return max(float(np.max(np.abs(np.asarray(a) - np.asarray(b)))) for a, b in zip(first, second))


def call_answer(function, name, *args):
    """Call the student's function; its own error becomes the one sentence of an Incorrect."""
    from kerasdist.course.exercises.core import Incorrect

    try:
        return function(*args)
    except Exception as error:  # noqa: BLE001  (any error of the student's code is the verdict)
        raise Incorrect(f"{name} raised {type(error).__name__}: {error_line(error)[:200]}") from None


def error_line(error):
    """The line of an error that says what went wrong: its first, or, for an error raised inside a
    tf.function (whose first line is "in user code:" and whose traceback follows), its last."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()] or [type(error).__name__]
    return lines[-1] if lines[0] == "in user code:" else lines[0]
