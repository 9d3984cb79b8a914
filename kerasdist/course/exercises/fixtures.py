"""What the checks build their references from: 2 replicas, real digits, the course's MLP, array gaps.

Example:
    >>> import numpy as np
    >>> largest_gap([np.ones(3)], [np.ones(3) * 1.5])
    0.5
"""

import contextlib
import copy
import logging
import math
import numbers

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
    """Call the student's function with copies of its plain arguments; its own error becomes an Incorrect.

    Lists, dicts, sets and arrays are passed as copies, so an answer that changes its input cannot
    change what the check compares it with. The Incorrect names the error and, where the answer's
    source is known (a notebook cell), its line.
    """
    from kerasdist.course.exercises.core import (
        Incorrect,
        TimeUp,
        answer_running,
        answer_time_left,
        student_frame,
    )

    if not callable(function):
        raise Incorrect(f"{name} is {describe(function)}, not a function: define it with "
                        f"def {name}(...) in Python or {name} <- function(...) in R.")
    arguments = [copy.deepcopy(arg) if isinstance(arg, _PLAIN) else arg for arg in args]
    try:
        with answer_running():
            return function(*arguments)
    except SystemExit:
        raise Incorrect(f"{name} called sys.exit() (or exit(), quit()), which would end the session: return "
                        "its result instead.") from None
    except Exception as error:  # noqa: BLE001  (any error of the student's code is the verdict)
        if answer_time_left() <= 0.05 or "reached elapsed time limit" in str(error):
            raise TimeUp() from None  # R's own bound (kd_verdict) stopped an R answer
        frame = student_frame(error)
        where = f" (line {frame.lineno}: {frame.line.strip()[:80]})" if frame and frame.line else ""
        raise Incorrect(f"{name} raised {type(error).__name__}: {error_line(error)[:200]}{where}") from None


_PLAIN = (list, dict, set, tuple, np.ndarray)


def describe(value):
    """What a value is, for a message: its type and a short repr ("a float, 32.0").

    Example:
        >>> describe(np.float32(32)), describe("32"), describe(None)
        ('a float32, 32.0', "a str, '32'", 'None')
    """
    if value is None:
        return "None"
    kind = type(value).__name__
    text = repr(value.item() if isinstance(value, np.generic) else value)
    text = text if len(text) <= 60 else text[:57] + "..."
    return f"{'an' if kind[:1].lower() in 'aeiou' else 'a'} {kind}, {text}"


def whole_number(value, language):
    """The int a whole-number answer stands for, or None where the student's language would not write it.

    Python: an int, a NumPy integer or an integer tensor scalar (not a float, not a bool). R: any
    whole number, since R's numbers are doubles (``floor(g / n)`` is a right answer there).

    Example:
        >>> from kerasdist.course.exercises.core import Language
        >>> whole_number(np.int64(32), Language.of("python")), whole_number(32.0, Language.of("python"))
        (32, None)
        >>> whole_number(32.0, Language.of("r")), whole_number(32.5, Language.of("r"))
        (32, None)
    """
    value = scalar(value)
    if isinstance(value, (bool, np.bool_)) or value is None:
        return None
    if isinstance(value, numbers.Integral):
        return int(value)
    if language.name == "r" and isinstance(value, numbers.Real) and float(value).is_integer():
        return int(value)
    return None


def real_number(value):
    """A float from a Python, NumPy or tensor scalar (and R's numbers), or None for anything else.

    Example:
        >>> real_number(np.float32(0.5)), real_number(True), real_number("1")
        (0.5, None, None)
    """
    value = scalar(value)
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        return None
    return float(value)


def scalar(value):
    """A NumPy scalar for a 0-d array or tensor (or a length-1 R vector); anything else as it is."""
    if hasattr(value, "numpy") and callable(value.numpy):
        value = value.numpy()
    if isinstance(value, np.ndarray) and value.size == 1 and value.ndim <= 1:
        return value.reshape(()).item() if value.dtype.kind in "biuf" else value
    if isinstance(value, np.generic):
        return value.item() if value.dtype.kind != "b" else bool(value)
    return value


def error_line(error):
    """The line of an error that says what went wrong: its first, or, for an error raised inside a
    tf.function (whose first line is "in user code:" and whose traceback follows), its last."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()] or [type(error).__name__]
    return lines[-1] if lines[0] == "in user code:" else lines[0]


def received(value, language):
    """What an answer gave, as the student's language shows it (with its type, in Python), on one line.

    Example:
        >>> from kerasdist.course.exercises.core import Language
        >>> received("5.4x", Language.of("r")), received(None, Language.of("python"))
        ('"5.4x"', 'None')
    """
    if language.name == "r" and isinstance(value, (list, tuple)):
        return f"a vector or list of {len(value)} values"
    shown = language.value(value) if language.name == "r" and isinstance(value, (str, int, float)) else None
    if shown is not None and len(shown) <= 60:
        return shown
    shown = language.none if value is None else describe(value)
    return shown if "\n" not in shown else f"a {type(value).__name__}"


def a_number(value, name, language):
    """``value`` as a float (a Python, NumPy or tensor scalar, or R's number), or an Incorrect saying what
    ``name`` is instead."""
    from kerasdist.course.exercises.core import Incorrect

    got = real_number(value)
    if got is None or not math.isfinite(got):
        raise Incorrect(f"{name} is {received(value, language)}: make it one number.")
    return got


def described(value, language):
    """What ``value`` is, for a message: R's numbers, strings and vectors as R writes them, anything else
    as ``describe`` words it, cut to its type where that text spans lines or shows an object's address."""
    if language.name == "r" and isinstance(value, (str, float, int, list)) and not isinstance(value, bool):
        kind = {str: "the string", list: "the vector"}.get(type(value), "the number")
        if not isinstance(value, list) or all(isinstance(v, (int, float, str)) for v in value):
            return f"{kind} {language.value(value)}"
    text = describe(value)
    return text.split(", ")[0] if "\n" in text or " object at 0x" in text else text


def on_one_line(value, language):
    """What an answer gave, as the student's language shows it (with its type, in Python), on one short
    line."""
    text = " ".join((describe(value) if language.name == "python" else language.value(value)).split())
    return text if len(text) <= 80 else text[:77] + "..."
