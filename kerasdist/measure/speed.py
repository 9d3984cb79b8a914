"""A machine's limit for training a model: FLOPs and bytes per step, the CPU's matmul and memory rates."""

import collections
import os
import statistics
import threading
import time
from typing import NamedTuple

import numpy as np

# A fused Adam update reads gradient, m, v and weight and writes m, v and weight (float32).
ADAM_BYTES_PER_WEIGHT = 28


# Every Timing that ``time_calls`` returned in this process, newest last: the record that lesson 08's check
# compares a student's ``timings`` with, so that redefining ``timings`` cannot change what it checks.
_MEASURED = collections.deque(maxlen=256)


class Timing(NamedTuple):
    """Seconds of repeated calls: the median and the spread (25th to 75th percentile)."""

    median: float
    low: float
    high: float


def time_calls(function, *arguments, rounds=11):
    """The ``Timing`` of ``rounds`` calls of ``function(*arguments)`` after one warm-up call.

    A call's result is converted with ``.numpy()`` where it has one, so that
    the time includes finishing the work, not only launching it.

    Example:
        >>> time_calls(sum, range(1000)).median < 1  # doctest: +SKIP
        True
    """
    def call():
        result = function(*arguments)
        if hasattr(result, "numpy"):
            result.numpy()

    call()
    seconds = []
    for _ in range(rounds):
        started = time.perf_counter()
        call()
        seconds.append(time.perf_counter() - started)
    low, median, high = statistics.quantiles(seconds, n=4)
    return _remember(Timing(median, low, high))


def measured_timings():
    """The ``Timing``s that ``time_calls`` returned in this process, oldest first (the last 256)."""
    return list(_MEASURED)


def _remember(timing):
    _MEASURED.append(Timing(*timing))
    return timing


def training_flops_per_sample(model):
    """Multiply-add FLOPs of one training sample through the model's Dense layers, from their shapes.

    A Dense layer with an ``n_in x n_out`` kernel costs ``2 n_in n_out`` FLOPs
    forward, as much again for its kernel's gradient, and as much again for
    the gradient of its input, which the first layer does not need. Biases,
    activations, the loss and the optimizer's update are left out (under 5%
    for the MLP).

    Returns:
        ``{"forward": ..., "backward": ..., "total": ...}`` in FLOPs per sample.

    Example:
        >>> training_flops_per_sample(kerasdist.model.build_model())  # doctest: +SKIP
        {'forward': 537600, 'backward': 673792, 'total': 1211392}
    """
    kernels = [layer.kernel.shape for layer in model.layers if hasattr(layer, "kernel")]
    forward = sum(2 * n_in * n_out for n_in, n_out in kernels)
    backward = forward + sum(2 * n_in * n_out for n_in, n_out in kernels[1:])
    return {"forward": forward, "backward": backward, "total": forward + backward}


def step_kernels(model, batch_size):
    """The matrix products of one training step of a model of Dense layers, with their FLOPs and bytes.

    See ``dense_kernels``, which this calls with the model's kernel shapes and float32 values.

    Example:
        >>> [kernel["name"] for kernel in step_kernels(build_model(), 64)][:2]  # doctest: +SKIP
        ['layer 1 forward', 'layer 1 kernel gradient']
    """
    shapes = [tuple(layer.kernel.shape) for layer in model.layers if hasattr(layer, "kernel")]
    return dense_kernels(shapes, batch_size)


def dense_kernels(layers, batch_size, bytes_per_value=4):
    """The matrix products of one training step through Dense kernels of shapes ``layers``.

    Per layer with an ``n_in x n_out`` kernel, on a batch of ``b``: the
    forward product (b x n_in) @ (n_in x n_out), the kernel's gradient
    (n_in x b) @ (b x n_out), and, except for the first layer, the input's
    gradient (b x n_out) @ (n_out x n_in). A product (m x k) @ (k x n) costs
    ``2 m k n`` FLOPs and moves at least ``bytes_per_value (m k + k n + m n)``
    bytes (each operand read once, the result written once).

    Returns:
        A list of ``{"name", "m", "k", "n", "flops", "bytes"}``.

    Example:
        >>> [(kernel["name"], kernel["flops"]) for kernel in dense_kernels([(784, 256)], 64)]
        [('layer 1 forward', 25690112), ('layer 1 kernel gradient', 25690112)]
    """
    kernels = []
    for index, (n_in, n_out) in enumerate(layers):
        shapes = [("forward", batch_size, n_in, n_out), ("kernel gradient", n_in, batch_size, n_out)]
        if index:
            shapes.append(("input gradient", batch_size, n_out, n_in))
        for part, m, k, n in shapes:
            kernels.append({"name": f"layer {index + 1} {part}", "m": m, "k": k, "n": n,
                            "flops": 2 * m * k * n, "bytes": bytes_per_value * (m * k + k * n + m * n)})
    return kernels


def gemm_flops_per_s(m, k, n, dtype="float32", jit_compile=False, products=50, rounds=7):
    """FLOP/s of (m x k) @ (k x n) products at this one shape: ``products`` of them in one ``tf.function``.

    Each product has its own left operand (so none repeats another) and its
    result is summed (so none is pruned); ``jit_compile=True`` runs XLA's
    kernel instead of TensorFlow's (oneDNN on x86 CPUs).

    Returns:
        ``(median, low, high)`` FLOP/s: the median call and the spread of the calls (see ``time_calls``).

    Example:
        >>> gemm_flops_per_s(64, 784, 256)[0] > 1e9  # doctest: +SKIP
        True
    """
    import tensorflow as tf

    generator = tf.random.Generator.from_seed(0)
    lefts = tf.cast(generator.normal((products, m, k)), dtype)
    right = tf.cast(generator.normal((k, n)), dtype)

    @tf.function(jit_compile=jit_compile)
    def run(lefts, right):
        total = tf.constant(0.0)
        for index in tf.range(products):
            total += tf.cast(tf.reduce_sum(tf.linalg.matmul(lefts[index], right)), tf.float32)
        return total

    timing = time_calls(run, lefts, right, rounds=rounds)
    flops = 2 * m * k * n * products
    return flops / timing.median, flops / timing.high, flops / timing.low


def memory_bytes_per_s(megabytes=256, rounds=7):
    """Memory bandwidth from STREAM's triad ``a = b + 3 c`` on arrays of ``megabytes`` each, on every core.

    One thread per usable core computes its share, block by block (each
    block's ``3 c`` stays in the cache), so the traffic is the triad's 12
    bytes per float32 element: two read, one written (the cache's extra read
    before a write is not counted, as in STREAM). Arrays much larger than the
    caches measure main memory.

    Returns:
        ``(median, low, high)`` bytes/s, as ``gemm_flops_per_s``.

    Example:
        >>> memory_bytes_per_s()[0] > 1e9  # doctest: +SKIP
        True
    """
    elements = int(megabytes * 2**20) // 4
    b, c = np.ones(elements, np.float32), np.full(elements, 2.0, np.float32)
    a = np.empty_like(b)
    threads = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    block = 2**14
    bounds = np.linspace(0, elements, threads + 1).astype(int)

    def triad(start, stop):
        scratch = np.empty(block, np.float32)
        for first in range(start, stop, block):
            last = min(first + block, stop)
            np.multiply(c[first:last], 3.0, out=scratch[:last - first])
            np.add(b[first:last], scratch[:last - first], out=a[first:last])

    def all_cores():
        workers = [threading.Thread(target=triad, args=(bounds[i], bounds[i + 1])) for i in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()

    timing = time_calls(all_cores, rounds=rounds)
    moved = 12 * elements
    return moved / timing.median, moved / timing.high, moved / timing.low


def matmul_flops_per_s(dtype="float32", size=1024, repeats=20, rounds=10):
    """The best FLOP/s of ``repeats`` chained ``size x size`` matmuls in one ``tf.function``, over ``rounds``.

    Each product feeds the next, so no matmul can be skipped as a repeat of
    another; float32 and bfloat16 run the same op, ``tf.linalg.matmul``, on
    the same device. Many short rounds: on a shared machine the best of them
    is the one least slowed down by other programs.

    Example:
        >>> matmul_flops_per_s("bfloat16") / matmul_flops_per_s("float32")  # doctest: +SKIP
        4.2
    """
    import tensorflow as tf

    generator = tf.random.Generator.from_seed(0)
    a = tf.cast(generator.normal((size, size)), dtype)
    b = tf.cast(generator.normal((size, size)) / size**0.5, dtype)  # keeps the chain's values near 1

    @tf.function
    def chain(a, b):
        for _ in range(repeats):
            a = tf.linalg.matmul(a, b)
        return tf.reduce_sum(tf.cast(a[0, :8], tf.float32))

    chain(a, b).numpy()  # trace and warm up
    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        chain(a, b).numpy()
        best = min(best, time.perf_counter() - started)
    return 2 * size**3 * repeats / best


def cpu_bfloat16_instructions(cpuinfo="/proc/cpuinfo"):
    """The CPU's bfloat16 instruction sets in ``/proc/cpuinfo`` (e.g. avx512_bf16, amx_bf16); () if none.

    Without them TensorFlow still runs bfloat16, converting to float32 and back,
    usually slower than float32. Returns () where the file does not exist (not Linux).
    """
    try:
        with open(cpuinfo) as stream:
            flags = next((line.split(":", 1)[1].split() for line in stream if line.startswith("flags")), [])
    except OSError:
        return ()
    return tuple(sorted(flag for flag in set(flags) if flag.endswith("bf16")))
