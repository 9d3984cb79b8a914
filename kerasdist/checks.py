"""Checks of single values and data arrays at the edges (CLI, Python API, R), before anything is written.

Each check raises ``KerasdistError`` with one line in the form
``<what> must be <rule>. Received: <name>=<value>; <what to do>``, which the
command line prints after ``kerasdist: error:`` (exit status 2) and R raises
as its error message.
"""

import math
import numbers

import numpy as np

from kerasdist.errors import KerasdistError

SEED_LIMIT = 2**32
MAX_PORT = 65535
PIXEL_MAX = 255.0
IMAGE_SHAPES = ((28, 28), (784,))
NUM_CLASSES = 10


def fail(what, rule, name, value, fix):
    """Raise the one-line ``KerasdistError`` of a failed check.

    Example:
        >>> fail("seed", "an integer >= 0", "seed", -1, "try 0")
        Traceback (most recent call last):
        ...
        kerasdist.errors.KerasdistError: seed must be an integer >= 0. Received: seed=-1; try 0
    """
    raise KerasdistError(f"{what} must be {rule}. Received: {name}={_shown(value)}; {fix}")


def _shown(value, limit=80):
    text = repr(value) if isinstance(value, str) else str(value)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def whole(value):
    """``value`` as an int if it is a whole number (int, NumPy integer or integral float), else None."""
    if isinstance(value, (bool, np.bool_)):
        return None
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real) and math.isfinite(value) and float(value).is_integer():
        return int(value)
    return None


def integer(name, value, minimum=None, limit=None, fix="", rule=None):
    """Check that ``value`` is a whole number in ``[minimum, limit)``; return it as an int.

    Example:
        >>> integer("epochs", 3.0, minimum=1)
        3
    """
    number = whole(value)
    if (
        number is None
        or (minimum is not None and number < minimum)
        or (limit is not None and number >= limit)
    ):
        if rule is None:
            rule = "an integer" + (f" >= {minimum}" if minimum is not None else "")
            rule += f" and < {limit}" if limit is not None else ""
        fail(name, rule, name, value, fix or f"pass a whole number like {max(minimum or 0, 1)}")
    return number


def optional_integer(name, value, minimum=1, fix=""):
    """Like ``integer`` with ``None`` allowed (meaning "off" or "default")."""
    return (
        None
        if value is None
        else integer(name, value, minimum, fix=fix, rule=f"an integer >= {minimum} (or None)")
    )


def number(name, value, minimum=0.0, inclusive=True, fix=""):
    """Check that ``value`` is a finite real number >= (or >) ``minimum``; return it as a float.

    Example:
        >>> number("learning_rate", 0.01, inclusive=False)
        0.01
    """
    ok = isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))
    ok = ok and math.isfinite(value) and (value >= minimum if inclusive else value > minimum)
    if not ok:
        rule = f"a finite number {'>=' if inclusive else '>'} {minimum:g}"
        fail(name, rule, name, value, fix or "pass a number like 1")
    return float(value)


def choice(name, value, allowed, fix=""):
    """Check that ``value`` is one of ``allowed``; return it."""
    if not isinstance(value, str) or value not in allowed:
        fail(name, f"one of {', '.join(allowed)}", name, value, fix or f"use {allowed[0]!r}")
    return value


def random_seed(value, name="seed"):
    """Check a seed: an integer in [0, 2**32) (what NumPy's and TensorFlow's generators take)."""
    return integer(name, value, 0, SEED_LIMIT, "pick a seed such as 0 or 42", rule="an integer in [0, 2**32)")


def path(name, value, fix):
    """Check that ``value`` is a non-empty path (str or ``os.PathLike``); return it as a str."""
    import os

    try:
        text = os.fspath(value)
    except TypeError:
        text = None
    if not isinstance(text, str) or not text.strip() or "\0" in text:
        fail(name, "a non-empty path", name, value, fix)
    return text


def flag(name, value):
    """Check a switch: True or False (NumPy booleans too); return a bool."""
    if not isinstance(value, (bool, np.bool_)):
        fail(name, "True or False", name, value, f"pass {name}=True or {name}=False")
    return bool(value)


def workers(value):
    """Check the number of workers of a launch: an integer >= 1."""
    return integer("workers", value, 1, fix="use 2 for two local workers")


def ports(values, count):
    """Check launch ports: ``count`` distinct integers in 1..65535; return them as ints.

    Example:
        >>> ports([23456, 23457], 2)
        [23456, 23457]
    """
    checked = []
    for value in values:
        port = whole(value)
        if port is None or not 1 <= port <= MAX_PORT:
            fail(
                "each port",
                "an integer in 1..65535",
                "ports",
                ",".join(map(str, values)),
                "pick free ports such as 23456,23457, or leave --ports out",
            )
        checked.append(port)
    if len(set(checked)) != len(checked):
        fail(
            "ports",
            "distinct (one per task)",
            "ports",
            ",".join(map(str, values)),
            "give each task its own port, or leave --ports out",
        )
    if len(checked) != count:
        fail(
            "ports",
            f"{count} values, one per task",
            "ports",
            ",".join(map(str, values)),
            "give one port per worker (and one for the evaluator), or leave --ports out",
        )
    return checked


def images(x, name):
    """Check MNIST images: a non-empty (n, 28, 28) or (n, 784) array of finite pixels in [0, 255].

    Pixels are taken as raw 0..255 values and scaled by 1/255, unless every
    pixel is already within [0, 1] (scaled images are kept as they are).

    Returns:
        A float32 array of shape (n, 784) with values in [0, 1].

    Example:
        >>> images(np.zeros((2, 28, 28), "uint8"), "x_train").shape
        (2, 784)
    """
    x = np.asarray(x)
    fix = "images are n x 28 x 28 (or n x 784) grey levels 0..255 (or scaled to 0..1)"
    if x.dtype.kind not in "uif":
        fail(name, "real numbers", f"{name}.dtype", x.dtype, fix)
    if x.ndim < 1 or x.shape[1:] not in IMAGE_SHAPES:
        fail(name, "of shape (n, 28, 28) or (n, 784)", f"{name}.shape", x.shape, fix)
    if len(x) == 0:
        fail(name, "non-empty", f"{name}.shape", x.shape, "give at least one image per split")
    x = x.reshape(len(x), 784)
    if x.dtype.kind == "f" and not np.isfinite(x).all():
        row, column = np.argwhere(~np.isfinite(x))[0]
        fail(
            f"{name} pixels",
            "finite",
            f"{name}[{row}, {column}]",
            x[row, column],
            "replace NaN/inf pixels (e.g. by 0)",
        )
    low, high = x.min(), x.max()
    if low < 0 or high > PIXEL_MAX:
        row, column = np.argwhere((x < 0) | (x > PIXEL_MAX))[0]
        fail(
            f"{name} pixels",
            "within [0, 255] (or [0, 1] when scaled)",
            f"{name}[{row}, {column}]",
            x[row, column],
            "rescale the images to 0..255 or 0..1",
        )
    x = x.astype("float32", copy=False)
    return x / np.float32(PIXEL_MAX) if high > 1.0 else x


def labels(y, count, name):
    """Check digit labels: ``count`` whole numbers in 0..9; return them as int32.

    Example:
        >>> labels(np.array([0, 9.0]), 2, "y_test")
        array([0, 9], dtype=int32)
    """
    y = np.asarray(y)
    fix = f"labels are the digits 0..9, one per image of {name.replace('y_', 'x_')}"
    if y.dtype.kind not in "uif":
        fail(name, "whole numbers 0..9", f"{name}.dtype", y.dtype, fix)
    if y.ndim == 0 or y.size != len(y) or len(y) != count:
        fail(name, f"a vector of {count} labels", f"{name}.shape", y.shape, fix)
    y = y.reshape(-1)
    integral = np.isfinite(y) & (y == np.round(y)) if y.dtype.kind == "f" else np.ones(len(y), bool)
    inside = integral & (y >= 0) & (y < NUM_CLASSES)
    if not inside.all():
        index = int(np.argmin(inside))
        fail(name, "whole numbers 0..9", f"{name}[{index}]", y[index], fix)
    return y.astype("int32")
