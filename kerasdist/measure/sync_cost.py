"""What keeping replicas in sync costs: a ring all-reduce by hand, all-reduce timings, their alpha-beta
fit, the local batch above which computing outlasts communicating, and each device's bytes of state.

The alpha-beta model of a link: sending ``n`` bytes takes ``alpha + n * beta`` seconds (a latency
and the inverse of a bandwidth). A ring all-reduce over ``N`` devices is a reduce-scatter then an
all-gather, ``N - 1`` steps each, in which every device sends one chunk of ``n / N`` bytes::

    T_ring(n, N) = 2 (N - 1) alpha + 2 (N - 1) / N * n * beta

A binary tree (reduce to a root, then broadcast) takes ``2 ceil(log2 N)`` steps of ``n`` bytes each.
Functions that time a transport import TensorFlow; the rest need only NumPy.

Example:
    >>> import numpy as np
    >>> summed, steps = ring_allreduce([np.arange(6.0), np.ones(6), np.full(6, 2.0)])
    >>> summed[0].tolist(), len(steps)
    ([3.0, 4.0, 5.0, 6.0, 7.0, 8.0], 4)
    >>> ring_bytes_sent(1_000_000, 4)
    1500000.0
"""

import copy
import dataclasses
import json
import math
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

from kerasdist import checks
from kerasdist.errors import KerasdistError
from kerasdist.measure.json_child import run_json_child

BYTES_PER_FLOAT32 = 4


def ring_allreduce(arrays):
    """Sum equal-shaped arrays, one per device, the way a ring all-reduce does, and record each step.

    Each array is cut into N chunks. Reduce-scatter: at step s, device i sends chunk (i - s) mod N to
    device i + 1, which adds it to its own; after N - 1 steps device i holds the full sum of chunk
    (i + 1) mod N. All-gather: the summed chunks travel round the ring the same way, copied.

    Returns:
        (the N summed arrays, which are equal; a list of steps, each a dict with ``phase``
        ("reduce-scatter" or "all-gather"), ``step`` and ``sends``, a list of (from, to, chunk)).
    """
    devices = len(arrays)
    if devices < 1 or any(np.shape(a) != np.shape(arrays[0]) for a in arrays):
        raise ValueError("ring_allreduce needs one array per device, all of one shape.")
    shape = np.shape(arrays[0])
    chunks = [np.array_split(np.asarray(a, dtype="float64").ravel().copy(), devices) for a in arrays]
    steps = []
    for phase in ("reduce-scatter", "all-gather"):
        for step in range(devices - 1):
            offset = step if phase == "reduce-scatter" else step - 1
            sends = [(i, (i + 1) % devices, (i - offset) % devices) for i in range(devices)]
            outgoing = [chunks[source][chunk].copy() for source, _, chunk in sends]
            for (_, target, chunk), data in zip(sends, outgoing):
                chunks[target][chunk] = chunks[target][chunk] + data if phase == "reduce-scatter" else data
            steps.append({"phase": phase, "step": step + 1, "sends": sends})
    return [np.concatenate(parts).reshape(shape) for parts in chunks], steps


def ring_bytes_sent(nbytes, devices):
    """Bytes each device sends in a ring all-reduce of ``nbytes``: 2 (N - 1) / N of it."""
    return 2 * (devices - 1) / devices * nbytes


def ring_seconds(nbytes, devices, alpha, beta):
    """The alpha-beta model's time of a ring all-reduce of ``nbytes`` over ``devices``."""
    return 2 * (devices - 1) * alpha + ring_bytes_sent(nbytes, devices) * beta


def tree_seconds(nbytes, devices, alpha, beta):
    """The alpha-beta model's time of a binary-tree all-reduce (reduce, then broadcast)."""
    hops = 2 * math.ceil(math.log2(devices)) if devices > 1 else 0
    return hops * (alpha + nbytes * beta)


@dataclasses.dataclass(frozen=True)
class LinkFit:
    """A transport's fitted latency ``alpha`` (s) and inverse bandwidth ``beta`` (s/byte)."""

    alpha: float
    beta: float
    devices: int
    relative_rms_error: float

    @property
    def bandwidth(self):
        """Bytes per second, 1 / beta."""
        return math.inf if self.beta == 0 else 1 / self.beta

    def seconds(self, nbytes):
        """The fitted ring time of an all-reduce of ``nbytes``."""
        return ring_seconds(nbytes, self.devices, self.alpha, self.beta)


def fit_alpha_beta(nbytes, seconds, devices):
    """Fit a ring all-reduce's alpha and beta to measured times, by least squares on relative errors.

    The model ``t = 2 (N - 1) alpha + 2 (N - 1) / N * n * beta`` is linear in (alpha, beta); each
    timing is weighted by 1 / t so that the 1 KB and the 64 MB tensors count alike. A negative
    latency (noise on a fast link) is set to 0 and beta fitted alone.

    Example:
        >>> sizes = [1e3, 1e5, 1e7]
        >>> fit = fit_alpha_beta(sizes, [ring_seconds(n, 2, 5e-5, 1e-9) for n in sizes], 2)
        >>> round(fit.alpha * 1e6, 3), round(fit.bandwidth / 1e9, 3)
        (50.0, 1.0)
    """
    devices = checks.integer("devices", devices, 2, fix="an all-reduce needs 2 devices or more")
    nbytes, seconds = np.asarray(nbytes, dtype="float64"), np.asarray(seconds, dtype="float64")
    if nbytes.shape != seconds.shape or nbytes.size < 2 or np.any(seconds <= 0):
        raise ValueError("fit_alpha_beta needs 2 or more (bytes, seconds) pairs with positive seconds.")
    latency_terms = np.full_like(nbytes, 2 * (devices - 1))
    bandwidth_terms = 2 * (devices - 1) / devices * nbytes
    weights = 1 / seconds
    design = np.stack([latency_terms, bandwidth_terms], axis=1) * weights[:, None]
    (alpha, beta), *_ = np.linalg.lstsq(design, seconds * weights, rcond=None)
    if alpha < 0:
        alpha = 0.0
        weighted = bandwidth_terms * weights
        beta = float(np.sum(weighted * seconds * weights) / np.sum(weighted ** 2))
    beta = max(float(beta), 0.0)
    predicted = ring_seconds(nbytes, devices, alpha, beta)
    error = float(np.sqrt(np.mean(((predicted - seconds) / seconds) ** 2)))
    return LinkFit(float(alpha), beta, devices, error)


def time_allreduce(strategy, nbytes, repeats=5):
    """Median seconds of a sum all-reduce of a float32 tensor of ``nbytes`` on every replica of ``strategy``.

    The all-reduce is the replica context's ``all_reduce``, which goes through the strategy's own
    cross-device ops (e.g. ``CollectiveAllReduce`` or ``ReductionToOneDevice``), inside one
    ``tf.function`` traced per size; the first call (tracing, set-up) is not timed.

    Example:
        >>> import tensorflow as tf  # doctest: +SKIP
        >>> time_allreduce(tf.distribute.MirroredStrategy(["CPU:0", "CPU:1"]), 1 << 20)  # doctest: +SKIP
        0.0011
    """
    import tensorflow as tf

    elements = max(1, int(nbytes) // BYTES_PER_FLOAT32)

    def replica_sum(scale):
        context = tf.distribute.get_replica_context()
        value = tf.fill([elements], scale * tf.cast(context.replica_id_in_sync_group + 1, tf.float32))
        return context.all_reduce(tf.distribute.ReduceOp.SUM, value)

    # The scale is an argument, so that TensorFlow's graph optimizer cannot fold the sum into a constant.
    @tf.function
    def allreduce(scale):
        return strategy.experimental_local_results(strategy.run(replica_sum, args=(scale,)))[0][0]

    scale = tf.constant(1.0)
    expected = strategy.num_replicas_in_sync * (strategy.num_replicas_in_sync + 1) / 2
    summed = float(allreduce(scale))  # the untimed first call also checks the sum
    if summed != expected:
        raise RuntimeError(f"the all-reduce summed to {summed}, not {expected}")
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        allreduce(scale).numpy()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def break_even_local_batch(flops_per_sample, flop_rate, gradient_bytes, link):
    """The local batch at which one step's computing takes as long as its gradient's ring all-reduce.

    Above it, an all-reduce overlapped with the backward pass can hide behind computing; below it,
    adding replicas buys less and less. ``link`` is a :class:`LinkFit` (its devices and alpha, beta).

    Example:
        >>> link = LinkFit(alpha=1e-5, beta=1e-10, devices=4, relative_rms_error=0.0)
        >>> round(break_even_local_batch(1e6, 1e12, 4e6, link))
        660
    """
    return link.seconds(gradient_bytes) * flop_rate / flops_per_sample


def predicted_step_seconds(local_batch, flops_per_sample, flop_rate, gradient_bytes, link, buckets=None,
                           backward_share=2 / 3):
    """One synchronous step on ``link.devices`` replicas, computing and all-reducing the gradient.

    With ``buckets=None`` the all-reduce starts when the backward pass ends (no overlap). With ``buckets=k``
    the gradient is all-reduced in k equal buckets, each as soon as the backward pass has produced it
    (``backward_share`` of the compute; the bucketing of PyTorch's DDP, and what ``bytes_per_pack`` of
    ``tf.distribute.experimental.CommunicationOptions`` splits a collective into), one after another:
    all but the last bucket can hide behind computing, and every bucket pays the ring's latency.

    Example:
        >>> link = LinkFit(alpha=0.0, beta=1e-9, devices=2, relative_rms_error=0.0)
        >>> [round(predicted_step_seconds(1000, 3e6, 1e12, 3e6, link, buckets=k), 4) for k in (None, 1, 4)]
        [0.006, 0.006, 0.0045]
    """
    compute = local_batch * flops_per_sample / flop_rate
    if buckets is None:
        return compute + link.seconds(gradient_bytes)
    backward = backward_share * compute
    per_bucket = link.seconds(gradient_bytes / buckets)
    done = compute - backward
    for bucket in range(1, buckets + 1):
        done = max(done, compute - backward + backward * bucket / buckets) + per_bucket
    return done


def scaling_speedup(device_counts, local_batch, flops_per_sample, flop_rate, gradient_bytes, alpha, beta,
                    buckets=None, backward_share=2 / 3):
    """Throughput on N devices over one device's, at a fixed local batch (weak scaling), for each N.

    One device computes alone; N devices compute the same local batch each and all-reduce the gradient
    over a ring of latency ``alpha`` and inverse bandwidth ``beta`` (see :func:`predicted_step_seconds`).

    Example:
        >>> [round(x, 2) for x in scaling_speedup([1, 2, 8], 1000, 1e6, 1e12, 4e6, 1e-5, 1e-10)]
        [1.0, 1.41, 4.35]
    """
    one = local_batch * flops_per_sample / flop_rate
    speedups = []
    for devices in device_counts:
        link = LinkFit(alpha, beta, devices, 0.0)
        step = predicted_step_seconds(local_batch, flops_per_sample, flop_rate, gradient_bytes, link, buckets,
                                      backward_share)
        speedups.append(1.0 if devices == 1 else devices * one / step)
    return speedups


def pipeline_bubble(stages, micro_batches):
    """The idle share of a GPipe-style pipeline step: (p - 1) / (m + p - 1) for p stages, m micro-batches.

    Example:
        >>> pipeline_bubble(4, 1), pipeline_bubble(4, 16)
        (0.75, 0.15789473684210525)
    """
    return (stages - 1) / (micro_batches + stages - 1)


def time_synchronous_step(strategy, images, labels, steps_per_call=20, rounds=5):
    """The :class:`~kerasdist.measure.speed.Timing` of one training step of the course's MLP on ``strategy``'s
    replicas, with ``images`` and ``labels`` (numpy arrays) as the global batch, in seconds per step.

    The steps are kerasdist's loop (:class:`~kerasdist.engines.loop.DistributedSteps`): forward, backward, the
    gradients' all-reduce over the strategy's cross-device ops and Adam's update, ``steps_per_call`` steps
    per ``tf.function`` call, so the host's overhead per call is spread over them.

    Example:
        >>> time_synchronous_step(make_strategy("mirrored", 2), images, labels).median  # doctest: +SKIP
        0.0021
    """
    import tensorflow as tf

    from kerasdist.engines.loop import DistributedSteps
    from kerasdist.measure.speed import Timing, time_calls
    from kerasdist.model import build_model

    with strategy.scope():
        model = build_model()
    dataset = tf.data.Dataset.from_tensors((images, labels)).repeat()
    iterator = iter(strategy.experimental_distribute_dataset(dataset))
    steps = DistributedSteps(model, strategy, len(images), steps_per_call)
    timing = time_calls(steps.train, iterator, steps_per_call, rounds=rounds)
    return Timing(*(seconds / steps_per_call for seconds in timing))


# Bytes per parameter of the training state, by what it holds (Adam: two moments per parameter). The
# second layout is ZeRO/DeepSpeed's mixed precision (bfloat16 weights and gradients beside a float32 master
# copy), not Keras' mixed_bfloat16 policy, which keeps float32 variables and gradients (16 bytes too, as
# "float32" counts them).
ZERO_MIXED = "bf16 + fp32 master (ZeRO)"
STATE_BYTES = {
    "float32": {"weights": 4, "gradients": 4, "optimizer (Adam's 2 moments)": 8},
    ZERO_MIXED: {"weights": 2, "gradients": 2, "optimizer (Adam's 2 moments)": 8,
                 "float32 master weights": 4},
}
# What each ZeRO stage splits over the devices (stage 0 is plain data parallelism), and the bytes each device
# sends per step in multiples of the gradient's bytes n, for large N (each term's exact factor is (N - 1)/N):
# stages 1 and 2 reduce-scatter the gradients (n) and all-gather the updated weights (n), an all-reduce's
# 2n; stage 3 all-gathers the weights for the forward pass (n) and again for the backward pass (n) and
# reduce-scatters the gradients (n).
ZERO_STAGES = {
    0: ((), 2),
    1: (("optimizer (Adam's 2 moments)", "float32 master weights"), 2),
    2: (("optimizer (Adam's 2 moments)", "float32 master weights", "gradients"), 2),
    3: (("optimizer (Adam's 2 moments)", "float32 master weights", "gradients", "weights"), 3),
}


def _zero_stage(stage):
    """``ZERO_STAGES[stage]``, or a clear error for a stage that does not exist."""
    if stage not in ZERO_STAGES:
        raise ValueError(f"stage must be one of {list(ZERO_STAGES)}. Received: {stage!r}")
    return ZERO_STAGES[stage]


def zero_stage_shards(stage):
    """The parts of the training state that ZeRO ``stage`` (0 to 3) splits over the devices.

    Example:
        >>> zero_stage_shards(2)[1:]
        ['float32 master weights', 'gradients']
    """
    return list(_zero_stage(stage)[0])


def zero_stage_bytes(stage, devices, precision=ZERO_MIXED):
    """Bytes of training state per parameter on each device under ZeRO ``stage`` (0 to 3) over ``devices``.

    For ZeRO's mixed precision with Adam (16 bytes per parameter) that is 16, 4 + 12/N, 2 + 14/N and 16/N.

    Example:
        >>> [zero_stage_bytes(stage, 8) for stage in (0, 1, 2, 3)]
        [16.0, 5.5, 3.75, 2.0]
    """
    sharded = _zero_stage(stage)[0]
    parts = STATE_BYTES[precision].items()
    return float(sum(per / devices if part in sharded else per for part, per in parts))


def zero_stage_traffic(stage, devices):
    """Bytes each device sends per step under ZeRO ``stage``, in multiples of the gradient's bytes n:
    2(N - 1)/N for stages 0 to 2 (an all-reduce, or a reduce-scatter and an all-gather), 3(N - 1)/N for 3.

    Example:
        >>> [zero_stage_traffic(stage, 8) for stage in (0, 1, 2, 3)]
        [1.75, 1.75, 1.75, 2.625]
    """
    return _zero_stage(stage)[1] * (devices - 1) / devices


def accumulated_step_seconds(micro_batch, accumulation_steps, flops_per_sample, flop_rate, gradient_bytes,
                             link):
    """One optimizer step with gradient accumulation: ``accumulation_steps`` micro-batches of ``micro_batch``
    samples computed one after another (their gradients summed locally), then one all-reduce over ``link``.

    The all-reduce is paid once per k micro-batches, so the step is a step at a local batch of k x the
    micro-batch, whose activations take the memory of one micro-batch.

    Example:
        >>> link = LinkFit(alpha=1e-5, beta=1e-10, devices=4, relative_rms_error=0.0)
        >>> [round(accumulated_step_seconds(100, k, 1e6, 1e12, 4e6, link) * 1e3, 2) for k in (1, 4)]
        [0.76, 1.06]
    """
    return accumulation_steps * micro_batch * flops_per_sample / flop_rate + link.seconds(gradient_bytes)


def two_level_allreduce_seconds(nbytes, nodes, per_node, intra_alpha, intra_beta, inter_alpha, inter_beta):
    """A two-level (hierarchical) all-reduce of ``nbytes`` over ``nodes`` x ``per_node`` devices.

    A reduce-scatter inside each node (a ring of ``per_node`` over the fast link), then each device
    all-reduces its 1/``per_node`` share with the devices of the same rank on the other nodes (a ring of
    ``nodes`` over the slow link; ``per_node`` such rings run side by side, one network port per device),
    then an all-gather inside the node::

        T = 2 (g - 1) alpha_in + 2 (g - 1)/g n beta_in + 2 (M - 1) alpha_out + 2 (M - 1)/M (n/g) beta_out

    with g = ``per_node`` and M = ``nodes``.

    Example:
        >>> round(two_level_allreduce_seconds(1e8, 8, 8, 5e-6, 1 / 450e9, 20e-6, 1 / 50e9) * 1e3, 3)
        1.176
        >>> round(ring_seconds(1e8, 64, 20e-6, 1 / 50e9) * 1e3, 3)
        6.457
    """
    inside = ring_seconds(nbytes, per_node, intra_alpha, intra_beta) if per_node > 1 else 0.0
    across = ring_seconds(nbytes / per_node, nodes, inter_alpha, inter_beta) if nodes > 1 else 0.0
    return inside + across


def bus_bandwidth(algorithm_bandwidth, devices):
    """nccl-tests' bus bandwidth of an all-reduce: its algorithm bandwidth (bytes / seconds) times 2(N - 1)/N,
    the bytes each device sends per byte reduced; the ring model's 1 / beta is a bus bandwidth.

    Example:
        >>> bus_bandwidth(100e9, 8) / 1e9
        175.0
    """
    return algorithm_bandwidth * 2 * (devices - 1) / devices


def training_state_bytes(parameters, devices, sharded=False, precision="float32"):
    """Each device's bytes of training state for a model of ``parameters`` under data parallelism.

    Replicated (plain data parallelism, MirroredStrategy), every device holds the whole state;
    sharded (ZeRO stage 3, FSDP), each holds 1 / ``devices`` of each part, gathering weights when a
    layer needs them. Activations are left out (they scale with the batch, not the model).

    Returns:
        A dict of part -> bytes on one device, with a "total".

    Example:
        >>> training_state_bytes(1_000_000, 4)["total"]
        16000000
        >>> training_state_bytes(1_000_000, 4, sharded=True)["total"]
        4000000
    """
    if precision not in STATE_BYTES:
        raise ValueError(f"precision must be one of {', '.join(STATE_BYTES)}. Received: {precision!r}")
    share = devices if sharded else 1
    parts = {part: -(-parameters * per // share) for part, per in STATE_BYTES[precision].items()}
    return dict(parts, total=sum(parts.values()))


# The transports timed here: a plain MirroredStrategy's all-reduce (CollectiveAllReduce), ReductionToOneDevice
# (kerasdist's choice on CPUs), both on virtual CPU devices of one process, and MultiWorkerMirroredStrategy's
# collectives between worker processes (one device each) over loopback TCP, and JAX's CPU collectives
# (a psum, see kerasdist.measure.jax_collectives).
TRANSPORTS = ("collective ring", "reduction to one device", "worker processes over loopback",
              "JAX CPU collectives")
LOCAL_TRANSPORTS = TRANSPORTS[:2]


def cross_device_ops(transport):
    """The ``cross_device_ops`` of a MirroredStrategy that all-reduces over ``transport``."""
    import tensorflow as tf

    if transport not in LOCAL_TRANSPORTS:
        raise ValueError(f"transport must be one of {list(LOCAL_TRANSPORTS)}. Received: {transport!r}")
    return tf.distribute.ReductionToOneDevice() if transport == "reduction to one device" else None


DEFAULT_SIZES = tuple(1024 * 4 ** k for k in range(9))  # 1 KiB to 64 MiB
# The rows that ``measure_transports`` returned in this process, newest last (copies, the last 64): the
# record that lesson 09's check compares a student's ``timings`` with, so that redefining ``timings``
# cannot change what it checks.
_MEASURED = []
_KEPT = 64

# A process measures one transport: two collective strategies in one process draw the same collective
# group key and abort each other, so each (transport, replicas) runs in a child of its own. Its request
# comes on stdin, which holds more than a command line (four gradients of the MLP).
_CHILD = """
import json, os, sys
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
request = json.loads(sys.stdin.read())
if "tf_config" in request:
    os.environ["TF_CONFIG"] = request["tf_config"]
    from kerasdist.engines.strategy import make_strategy
    strategy = make_strategy("multi_worker", collective_timeout_s=request["timeout_s"], verbose=False)
else:
    from kerasdist.devices import configure_replicas
    devices = configure_replicas(request["replicas"], device_type="CPU")
    import tensorflow as tf
    from kerasdist.measure.sync_cost import cross_device_ops
    reduction = cross_device_ops(request["transport"])
    strategy = tf.distribute.MirroredStrategy(devices, cross_device_ops=reduction)
from kerasdist.measure.sync_cost import allreduce_values, time_allreduce
if "values" in request:
    print(json.dumps([summed.tolist() for summed in allreduce_values(strategy, request["values"])]))
else:
    print(json.dumps([time_allreduce(strategy, nbytes, request["repeats"]) for nbytes in request["sizes"]]))
"""


def measure_transports(replica_counts=(2, 4), sizes=DEFAULT_SIZES, repeats=5, timeout_s=300, report=print,
                       transports=TRANSPORTS):
    """Time all-reduces of ``sizes`` bytes on each transport and replica count (virtual CPU devices,
    a process each, or as many worker processes as replicas; each bounded by ``timeout_s``), and fit
    alpha and beta; ``report`` gets a line per fit.

    Returns:
        A list of dicts: transport, replicas, nbytes, seconds, alpha, beta, bandwidth, relative_rms_error.

    Raises:
        KerasdistError: when a measuring process fails or runs past ``timeout_s``.

    Example:
        >>> rows = measure_transports((2,), sizes=(1024, 1 << 20), repeats=3)  # doctest: +SKIP
        collective ring, 2 replicas: alpha 36.2 us, bandwidth 2.91 GB/s (fit error 4%)
    """
    rows = []
    for replicas in replica_counts:
        for transport in transports:
            if transport in LOCAL_TRANSPORTS:
                seconds = _time_in_child(transport, replicas, sizes, repeats, timeout_s)
            elif transport == "JAX CPU collectives":
                from kerasdist.measure.jax_collectives import jax_allreduce_seconds

                seconds = jax_allreduce_seconds(replicas, sizes, repeats, timeout_s)
            else:
                seconds = _time_over_workers(replicas, sizes, repeats, timeout_s)
            fit = fit_alpha_beta(sizes, seconds, replicas)
            report(f"{transport}, {replicas} replicas: alpha {fit.alpha * 1e6:.1f} us, bandwidth "
                   f"{fit.bandwidth / 1e9:.2f} GB/s (fit error {fit.relative_rms_error:.0%})")
            rows.append(_remember({"transport": transport, "replicas": replicas, "nbytes": list(sizes),
                                   "seconds": seconds, "alpha": fit.alpha, "beta": fit.beta,
                                   "bandwidth": fit.bandwidth, "relative_rms_error": fit.relative_rms_error}))
    return rows


def measured_rows(transport=None, replicas=None):
    """Copies of the rows ``measure_transports`` returned in this process (of ``transport`` and ``replicas``
    where given), oldest first (the last 64)."""
    return [copy.deepcopy(row) for row in _MEASURED
            if transport in (None, row["transport"]) and replicas in (None, row["replicas"])]


def _remember(row):
    _MEASURED.append(copy.deepcopy(row))
    del _MEASURED[:-_KEPT]
    return row


def strategy_allreduce(arrays, transport="collective ring", timeout_s=120):
    """What a MirroredStrategy's all-reduce returns on each replica, one array per replica, measured
    in a process of its own with ``len(arrays)`` virtual CPU devices (bounded by ``timeout_s``).

    Example:
        >>> strategy_allreduce([[1.0, 2.0], [10.0, 20.0]])  # doctest: +SKIP
        [array([11., 22.], dtype=float32), array([11., 22.], dtype=float32)]
    """
    request = {"transport": transport, "replicas": len(arrays), "values": np.asarray(arrays).tolist()}
    summed = _in_child(request, f"the {transport} all-reduce on {len(arrays)} replicas", timeout_s)
    return [np.asarray(values, dtype="float32") for values in summed]


def allreduce_values(strategy, arrays):
    """Each replica's result of the strategy's sum all-reduce, replica ``r`` contributing ``arrays[r]``."""
    import tensorflow as tf

    stacked = tf.constant(np.asarray(arrays, dtype="float32"))

    @tf.function
    def replica_sum():
        context = tf.distribute.get_replica_context()
        mine = tf.gather(stacked, context.replica_id_in_sync_group)
        return context.all_reduce(tf.distribute.ReduceOp.SUM, mine)

    return [summed.numpy() for summed in strategy.experimental_local_results(strategy.run(replica_sum))]


def _time_in_child(transport, replicas, sizes, repeats, timeout_s):
    """The median all-reduce seconds of each size, measured in a process of its own (bounded)."""
    request = {"transport": transport, "replicas": replicas, "repeats": repeats, "sizes": list(sizes)}
    return _in_child(request, f"timing the {transport} on {replicas} replicas", timeout_s)


def _time_over_workers(workers, sizes, repeats, timeout_s):
    """The median all-reduce seconds of each size between ``workers`` processes on loopback (bounded)."""
    from kerasdist.cluster.config import tf_config
    from kerasdist.cluster.ports import local_cluster

    what = f"timing {workers} worker processes over loopback"
    cluster = local_cluster(workers)
    with tempfile.TemporaryDirectory() as logs:
        processes, outputs = [], []
        try:
            for index in range(workers):
                request = {"tf_config": tf_config(cluster, "worker", index), "timeout_s": timeout_s,
                           "repeats": repeats, "sizes": list(sizes)}
                outputs.append((open(f"{logs}/{index}.out", "w+"), open(f"{logs}/{index}.err", "w+")))
                processes.append(subprocess.Popen([sys.executable, "-c", _CHILD], stdin=subprocess.PIPE,
                                                  stdout=outputs[-1][0], stderr=outputs[-1][1], text=True))
                processes[-1].stdin.write(json.dumps(request))
                processes[-1].stdin.close()
            _wait_for_all(processes, outputs, what, timeout_s)
            outputs[0][0].seek(0)
            return json.loads(outputs[0][0].read().strip().splitlines()[-1])
        finally:
            for process in processes:
                if process.poll() is None:
                    process.kill()
                    process.wait()
            for files in outputs:
                for file in files:
                    file.close()


def _wait_for_all(processes, outputs, what, timeout_s):
    """Wait for every process; the first failure or the deadline is one error (the caller kills the rest)."""
    deadline = time.monotonic() + timeout_s
    while any(process.poll() is None for process in processes):
        failed = [index for index, process in enumerate(processes) if process.poll()]
        if failed:
            break
        if time.monotonic() > deadline:
            raise KerasdistError(f"{what} took over {timeout_s:g} s; try fewer or smaller sizes")
        time.sleep(0.2)
    for process, (_, errors) in zip(processes, outputs):
        if process.poll():
            errors.seek(0)
            last = (errors.read().strip().splitlines() or ["no error output"])[-1]
            raise KerasdistError(f"{what} failed: {last}")


def _in_child(request, what, timeout_s):
    """Run ``_CHILD`` on ``request`` and return its answer; a failure or timeout is one error."""
    return run_json_child([sys.executable, "-c", _CHILD], request, what, timeout_s)
