"""A machine's limit for training a model: FLOPs and bytes per step, the CPU's matmul and memory rates."""

import collections
import contextlib
import logging
import os
import re
import statistics
import threading
import time
from typing import NamedTuple

import numpy as np

# A fused Adam update reads gradient, m, v and weight and writes m, v and weight (float32).
ADAM_BYTES_PER_WEIGHT = 28


# Every Timing that ``time_calls`` or ``time_programs`` returned in this process, newest last: the record
# that lesson 08's check compares a student's ``timings`` with, so that redefining ``timings`` cannot change
# what it checks.
_MEASURED = collections.deque(maxlen=256)


class Timing(NamedTuple):
    """Seconds of repeated calls: the median and the spread (25th to 75th percentile)."""

    median: float
    low: float
    high: float


class Rate(NamedTuple):
    """A rate (FLOP/s, bytes/s) of repeated calls: at the median call, and the spread (at the quartiles)."""

    median: float
    low: float
    high: float


def _rate(amount, timing):
    return Rate(amount / timing.median, amount / timing.high, amount / timing.low)


class NominalPeak(NamedTuple):
    """A CPU's nominal peak: cores x FLOPs per cycle of a core x clock, and what each factor was read from."""

    flops_per_s: float
    cores: int
    flops_per_cycle: int
    clock_hz: float
    instructions: str
    clock_source: str
    model: str


def time_calls(function, *arguments, rounds=11):
    """The ``Timing`` of ``rounds`` calls of ``function(*arguments)`` after one warm-up call.

    A call's result is converted with ``.numpy()`` where it has one, so that
    the time includes finishing the work, not only launching it.

    Example:
        >>> time_calls(sum, range(1000)).median < 1  # doctest: +SKIP
        True
    """
    return time_programs({"the function": (function, arguments)}, rounds=rounds)["the function"]


def time_programs(programs, rounds=11, on_round=None):
    """The ``Timing`` of each of several programs, timed in turns: each round calls every program once.

    ``programs`` maps a name to ``(function, arguments)``. Taking turns, the
    programs share whatever else the machine does while they are timed, so a
    busy spell lands on all of them instead of on one, and their differences
    hold. Each program is called once to warm up; ``on_round()``, if given, is
    called after each round (a progress bar).

    Returns:
        ``{name: Timing}`` in seconds per call, each also recorded (``measured_timings``).

    Example:
        >>> timings = time_programs({"short": (sum, (range(10),)), "long": (sum, (range(10**5),))})
        >>> timings["short"].median < timings["long"].median
        True
    """
    def finished(function, arguments):
        def call():
            result = function(*arguments)
            if hasattr(result, "numpy"):
                result.numpy()
        return call

    calls = {name: finished(function, arguments) for name, (function, arguments) in programs.items()}
    with retracing_warning_left_out():
        for call in calls.values():
            call()
    seconds = {name: [] for name in calls}
    for _ in range(rounds):
        for name, call in calls.items():
            started = time.perf_counter()
            call()
            seconds[name].append(time.perf_counter() - started)
        if on_round is not None:
            on_round()
    timings = {}
    for name, times in seconds.items():
        low, median, high = statistics.quantiles(times, n=4)
        timings[name] = _remember(Timing(median, low, high))
    return timings


@contextlib.contextmanager
def retracing_warning_left_out():
    """Leave out TensorFlow's warning that a ``tf.function`` is traced again and again, while the block runs.

    TensorFlow counts traces per function code (``__code__``), so warming up
    several programs made by one function (each traced once, in a row) looks
    like retracing to it; nothing is traced again. A warning left out still
    counts toward TensorFlow's two per code.

    Example:
        >>> with retracing_warning_left_out():
        ...     pass
    """
    def not_retracing(record):
        return "triggered tf.function retracing" not in record.getMessage()

    logger = logging.getLogger("tensorflow")
    logger.addFilter(not_retracing)
    try:
        yield
    finally:
        logger.removeFilter(not_retracing)


def measured_timings():
    """The ``Timing``s that ``time_calls`` and ``time_programs`` returned, oldest first (the last 256)."""
    return list(_MEASURED)


def _remember(timing):
    _MEASURED.append(Timing(*timing))
    return timing


def step_breakdown(medians):
    """One training step at one step per call, split into parts that add up to it exactly.

    Each part is the difference between two nested programs, each timed as a
    whole (``medians``, e.g. milliseconds per step): forward; forward +
    backward; the whole step (and the update), all at many steps per call;
    and the whole step at one step per call. So no time is counted twice, and
    the parts sum to ``medians["whole step, 1 per call"]``. A part can come out
    slightly negative where it is smaller than the timings' noise.

    Example:
        >>> step_breakdown({"forward": 0.3, "forward + backward": 0.5, "whole step": 1.2,
        ...                 "whole step, 1 per call": 1.5})
        {'forward': 0.3, 'backward': 0.2, 'optimizer update': 0.7, 'host overhead per call': 0.3}
    """
    nested = [("forward", "forward"), ("backward", "forward + backward"), ("optimizer update", "whole step"),
              ("host overhead per call", "whole step, 1 per call")]
    parts, below = {}, 0.0
    for part, program in nested:
        parts[part] = round(medians[program] - below, 12)
        below = medians[program]
    return parts


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
        A ``Rate``: FLOP/s at the median call, and the spread of the calls (see ``time_calls``).

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

    return _rate(2 * m * k * n * products, time_calls(run, lefts, right, rounds=rounds))


def memory_bytes_per_s(megabytes=256, rounds=7):
    """Memory bandwidth from STREAM's triad ``a = b + 3 c`` on arrays of ``megabytes`` each, on every core.

    One thread per usable core computes its share, block by block (each
    block's ``3 c`` stays in the cache), so the traffic is the triad's 12
    bytes per float32 element: two read, one written (the cache's extra read
    before a write is not counted, as in STREAM). Arrays much larger than the
    caches measure main memory.

    Returns:
        A ``Rate`` in bytes/s, as ``gemm_flops_per_s``.

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

    return _rate(12 * elements, time_calls(all_cores, rounds=rounds))


def matmul_flops_per_s(dtype="float32", size=1024, repeats=20, rounds=11):
    """The measured peak: the ``Rate`` of ``repeats`` chained ``size x size`` matmuls in one ``tf.function``.

    Each product feeds the next, so no matmul can be skipped as a repeat of
    another; float32 and bfloat16 run the same op, ``tf.linalg.matmul``, on
    the same device. The median of ``rounds`` calls, with their spread, as
    every other rate of the course.

    Example:
        >>> matmul_flops_per_s("float32").median > 1e9  # doctest: +SKIP
        True
    """
    import tensorflow as tf

    generator = tf.random.Generator.from_seed(0)
    a = tf.cast(generator.normal((size, size)), dtype)
    b = tf.cast(generator.normal((size, size)) / size**0.5, dtype)  # keeps the chain's values near 1

    @tf.function(autograph=False)  # a Python loop of a fixed length: nothing for AutoGraph to convert
    def chain(a, b):
        for _ in range(repeats):
            a = tf.linalg.matmul(a, b)
        return tf.reduce_sum(tf.cast(a[0, :8], tf.float32))

    return _rate(2 * size**3 * repeats, time_calls(chain, a, b, rounds=rounds))


# The most FMA units an x86 core has (Intel since Haswell, AMD since Zen 2, with AVX2; some with AVX-512):
# assumed for every CPU, so that the nominal peak is an upper bound, loose on a core with fewer or
# narrower ones (AMD's Zen 4 runs AVX-512 on 256-bit units: half the FLOPs per cycle counted here).
FMA_UNITS_PER_CORE = 2


def nominal_flops_per_s(dtype="float32", cpuinfo="/proc/cpuinfo",
                        cpufreq="/sys/devices/system/cpu/cpu0/cpufreq"):
    """The CPU's nominal peak: usable cores x FLOPs per cycle of a core x the highest clock reported.

    FLOPs per cycle: ``FMA_UNITS_PER_CORE`` fused multiply-adds (2 FLOPs) on
    the widest vector of the instructions in ``/proc/cpuinfo`` (avx512f: 16
    float32 lanes, avx2 or avx: 8, else 4). For ``"bfloat16"``: AMX (amx_bf16)
    1,024 per cycle, AVX512_BF16's dot products 32 lanes, else float32's rate
    (bfloat16 is then converted). The clock is the highest of cpufreq's
    maximum, the model name's "@ ...GHz" and the "cpu MHz" lines (on a virtual
    machine only the host's timer or base clock may show, and the cores may run
    faster: the figure is then no bound, which a measured rate above it reveals).

    Example:
        >>> nominal_flops_per_s().flops_per_s > 1e9  # doctest: +SKIP
        True
    """
    try:
        with open(cpuinfo) as stream:
            text = stream.read()
    except OSError as error:
        raise RuntimeError(f"the nominal peak needs {cpuinfo} (Linux): {error}") from None
    flags = set(next((line.split(":", 1)[1].split() for line in text.splitlines()
                      if line.startswith(("flags", "Features"))), []))
    if "avx512f" in flags:
        lanes, instructions = 16, "avx512f"
    elif flags & {"avx2", "avx"}:
        lanes, instructions = 8, "avx2/avx"
    else:
        lanes, instructions = 4, "128-bit vectors"
    per_cycle = FMA_UNITS_PER_CORE * 2 * lanes
    if dtype == "bfloat16" and "amx_bf16" in flags:
        per_cycle, instructions = 1024, "amx_bf16"
    elif dtype == "bfloat16" and "avx512_bf16" in flags:
        per_cycle, instructions = FMA_UNITS_PER_CORE * 2 * 32, "avx512_bf16"
    reported = re.findall(r"^cpu MHz\s*:\s*([\d.]+)", text, re.M)
    clocks = {"cpu MHz": max((float(value) * 1e6 for value in reported), default=0.0)}
    named = re.search(r"@\s*([\d.]+)\s*GHz", text)
    clocks["model name"] = float(named.group(1)) * 1e9 if named else 0.0
    try:
        with open(os.path.join(cpufreq, "cpuinfo_max_freq")) as stream:
            clocks["cpufreq maximum"] = float(stream.read()) * 1e3
    except (OSError, ValueError):
        pass
    source, clock = max(clocks.items(), key=lambda item: item[1])
    if not clock:
        raise RuntimeError(f"no clock rate in {cpuinfo} or {cpufreq}: the nominal peak is unknown here")
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    model = re.search(r"^model name\s*:\s*(.+)$", text, re.M)
    return NominalPeak(cores * per_cycle * clock, cores, per_cycle, clock, instructions, source,
                       model.group(1).strip() if model else "unknown CPU")


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
