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
# # Speed: where a training step's time goes
#
# **What you'll learn**
#
# - a **ladder** of ways to train the same model on one device, measured side by side: `fit` as
#   TensorFlow's guide writes it, many steps per call (`steps_per_execution`), XLA (`jit_compile`),
#   kerasdist's loop engine, Keras on JAX, and a hand-written `jax.lax.scan` epoch, in which no step
#   returns to the host, each against the guide's `fit`; then the scan epoch taken apart, to measure
#   what running every step in one call saves;
# - what mixed precision is: `mixed_bfloat16`, and `mixed_float16` with its loss scaling
#   (`LossScaleOptimizer`, `optimizer.scale_loss`);
# - where one step's time goes: forward, backward, optimizer update and the host's overhead per call,
#   as parts that add up to the measured step, and the input pipeline sharing the CPU's cores; then a
#   profiler's trace of one step, read and drawn;
# - a **roofline** at the model's own shapes: each matrix product's FLOPs and bytes, the CPU's
#   **nominal peak** (from its cores, vector width and clock) and **measured peak**, its memory
#   bandwidth (a triad), the bound these give a step and the estimate its kernels' measured rates give,
#   and each rung's **MFU** (model FLOPs utilization);
# - what of this carries over to GPUs.
#
# **What you need**: lessons 1 and 3 (the JAX it uses is explained where it comes), the project's virtualenv as the kernel (with JAX, the `jax`
# extra that set-up installs), Debian's `dataset-fashion-mnist` package (set-up installs it as root;
# without it Keras downloads the files), and about 3 minutes on a 2-core CPU. Unlike the other
# lessons this one always trains on **Fashion-MNIST**: 70,000 real 28x28 photos of clothing in 10
# classes (Zalando), in MNIST's format, a full-size data set that needs no network here.
#
# **R users**: the same lesson written with keras3 is [08_speed_R.ipynb](08_speed_R.ipynb).

# %% [markdown]
# ## Introduction
#
# On this course's 2-core CPU, replicas share the cores, so lessons 3 and 4 honestly showed them
# *slower* than one device. Yet on that one device the same model trains at very different speeds
# depending only on how its steps are run. A step of the MNIST MLP on a batch of 64 is some tens of
# millions of floating-point operations, a fraction of a millisecond of matrix products; around them
# are Python calling a TensorFlow function, one kernel per op, and memory traffic between ops.
#
# This lesson measures that on a data set of full size: first the ladder of settings, then the parts
# of one step, then the machine's limits, so that every speed-up has a reason.
#
# Words this lesson uses. The **host** is the CPU side that drives a computation: your Python program
# and the framework's runtime; on a GPU machine the *device* is the GPU, here the device is the same
# CPU. Each operation of a model (a product, an addition) runs as a **kernel**, a routine for that op
# on that device (not a Jupyter kernel, nor a Dense layer's `kernel` weights). TensorFlow's
# **executor** is the runtime that runs a graph's ops, each as soon as its inputs are ready; to
# **dispatch** a call is the host's work of handing it to the runtime. The first call of a
# `tf.function` runs the Python code once to record its graph, **tracing**, then optimizes the graph
# (it traces again for inputs of new shapes or dtypes). **XLA** (Accelerated Linear Algebra) is the
# compiler TensorFlow and JAX share: it compiles a whole function to machine code at once and
# **fuses** ops, computing several of them in one kernel and one pass over memory instead of one
# kernel and one pass each. JAX's `jax.jit` traces a Python function and compiles it with XLA;
# `jax.lax.scan` runs one function over the items of an array inside one compiled loop; and Keras'
# stateless API (`model.stateless_call`, `optimizer.stateless_apply`) computes a step from the
# weights' values passed in and returned, without assigning variables, which is what `jax.jit` needs.

# %% [markdown]
# ## Setup
#
# The sections that teach a skill end with a checked exercise: complete the cell, run the check
# under it, and it answers Correct, Incorrect with what is wrong, or Not attempted; `q1.hint()` and
# `q1.solution()` help.

# %%
# Import kerasdist first (it keeps TensorFlow's start-up lines quiet), then the libraries this lesson uses.
import collections
import inspect
import os
import statistics

import kerasdist
import keras
import matplotlib.pyplot as plt
import ml_dtypes
import numpy as np
import tensorflow as tf
from kerasdist import data as data_module
from kerasdist import model as model_module
from kerasdist.experiments import plots
from kerasdist.measure import hardware, scan_variants, speed_ladder, trace
from kerasdist.measure import speed as speed_module
from kerasdist.measure.speed import (ADAM_BYTES_PER_WEIGHT, Timing, dense_kernels, gemm_flops_per_s, memory_bytes_per_s,
                             nominal_flops_per_s, step_breakdown, step_kernels, time_calls, time_programs)
from kerasdist.course.exercises.lesson08 import q1, q2, q3  # this lesson's checked exercises

# %%
# NBVAL_CHECK_OUTPUT
# Settings, and the data: Fashion-MNIST through Keras' own loader, split like full MNIST
# (KERASDIST_SPEED_DATA can name another source: the test suite runs the lesson on a small stand-in).
DATA_SOURCE = os.environ.get("KERASDIST_SPEED_DATA", "fashion")
EPOCHS = 3            # every rung trains this many epochs; the first one includes tracing and compiling
BATCH_SIZE = speed_ladder.BATCH_SIZE            # 64
STEPS_PER_CALL = speed_ladder.STEPS_PER_CALL    # 50: steps_per_execution of fit, and of kerasdist's loop
SEED = 0
data = kerasdist.load_mnist(DATA_SOURCE, seed=SEED)
print("classes:", ", ".join(data_module.FASHION_CLASSES))

# %% [markdown]
# ## The ladder: from the guide's `fit` to a `lax.scan` epoch
#
# Seven ways to train the same MLP (784-256-256-10, Adam 1e-3, batch 64) on the same data for the
# same epochs on one device, each rung removing some work around the arithmetic:
#
# | rung | what changes |
# |---|---|
# | `fit`, as TensorFlow's distributed-training guide writes it | one `tf.function` call per step |
# | `fit(steps_per_execution=50)` | 50 steps per call: the host's overhead is paid once per 50 steps |
# | `fit(steps_per_execution=50, jit_compile=True)` | and each step is compiled by XLA, which fuses ops |
# | kerasdist's loop engine | its own `tf.function` running 50 steps per call (lesson 5 needs it for multi-worker) |
# | kerasdist's loop engine + XLA | the whole step, gradients and Adam's update, compiled by XLA |
# | Keras on JAX, `fit(steps_per_execution=50)` | the same Keras code on the JAX backend: each step compiled by XLA (`"auto"` resolves to on), but still dispatched from Python one step at a time |
# | a `jax.lax.scan` epoch | one compiled call per *epoch*: the data stays on the device and no step returns to Python |
#
# A rung's speed is its **steady state**: samples/s of the median epoch after the first (the first
# pays for tracing and compiling; with 3 epochs, the mean of the last two), counting training only
# (kerasdist's loop also validates after each epoch; that pass is not counted). Two steady epochs are
# too few for quartiles, so the printout gives their range as the spread
# (`benchmarks/benchmark_engines.py --part ladder` runs every rung in 3 rounds of their own). The JAX rungs run in
# processes of their own: Keras chooses its backend once, before it loads, and this notebook's Keras
# runs on TensorFlow. Besides the change each row names, the rungs feed their batches differently:
# the `fit` rungs shuffle images through a buffer of ten thousand as the guide does, kerasdist's loop
# shuffles indices and gathers whole batches, Keras on JAX slices the arrays in Python, and the scan
# gathers each batch inside its compiled step. `fit` also trains the last, partial batch of an epoch,
# which the others drop.
#
# On JAX, `steps_per_execution` does not put several steps in one compiled call: Keras' JAX trainer
# (`_make_function` in `keras/src/backend/jax/trainer.py`) loops over them in Python, calling the
# jitted step once per step; it only calls the callbacks less often. The scan rung is the step that
# Keras leaves to you: one compiled call for a whole epoch.
#
# Keras' `jit_compile` defaults to `"auto"`. Which way `"auto"` goes is decided in Keras' source,
# printed below: on TensorFlow it is off on a machine without a GPU, **and off for any model built
# in a `tf.distribute` strategy's scope**, so the guide's code, which builds its model in
# `MirroredStrategy.scope()`, is not compiled by XLA even on GPUs. The ladder's `fit (guide)` rung
# trains on one device and builds its model without a strategy (one device needs none), so on this
# machine the first rule, no GPU, is the one that decides.

# %%
# How Keras resolves jit_compile="auto" (keras/src/trainers/trainer.py), and what the guide's model chose here.
print(inspect.getsource(keras.src.trainers.trainer.Trainer._resolve_auto_jit_compile))
print(f"the guide's fit chose jit_compile={speed_ladder.guide_model().jit_compile} on this machine")

# %%
# Every rung, one after another in this run (a bar across them); their speeds are printed when all have run.
runs = {}
progress = keras.utils.Progbar(len(speed_ladder.RUNGS), unit_name="rung")
for name in speed_ladder.RUNGS:
    runs[name] = speed_ladder.measure(name, DATA_SOURCE, EPOCHS, data=data)
    progress.add(1)
speed = {name: speed_ladder.steady_samples_per_s(run) for name, run in runs.items()}
accuracy = {name: run["test_accuracy"] for name, run in runs.items()}
for name, run in runs.items():
    steady = [run["samples_per_epoch"] / seconds for seconds in run["epoch_seconds"][1:]]
    print(f"{name:34s} {speed[name]:8,.0f} samples/s (steady epochs {min(steady):,.0f} to {max(steady):,.0f})  "
          f"{speed[name] / speed['fit (guide)']:4.1f}x the guide's  test accuracy {accuracy[name]:.3f}")

# %% [markdown]
# The `lax.scan` rung is shown in full below: a training step written with Keras' stateless API
# (`model.stateless_call`, `optimizer.stateless_apply`), and `jax.lax.scan` running it over every batch of
# an epoch inside one `jax.jit` call, gathering each batch from the arrays already on the device.

# %%
print(inspect.getsource(speed_ladder.stateless_step))
print(inspect.getsource(speed_ladder.scan_epoch))

# %% [markdown]
# **Predict, then run.** Which rung is fastest, and how many times the guide's `fit` speed does it reach?
# Does any rung buy its speed with a worse model after the same epochs? Decide from the speeds printed
# above, then run the next cell: it checks the accuracies and names the fastest rung.

# %%
# Check: every rung reaches about the same accuracy (speeds are printed, not asserted: they vary with
# what else the machine runs).
assert max(accuracy.values()) - min(accuracy.values()) < 0.03, accuracy
fastest = max(speed, key=speed.get)
print(f"fastest rung: {fastest}, {speed[fastest] / speed['fit (guide)']:.1f}x the guide's fit; "
      f"test accuracies within {max(accuracy.values()) - min(accuracy.values()):.3f} of each other")

# %%
# The ladder on one chart: each rung's speed, and its ratio to the guide's fit.
os.makedirs("results/figures", exist_ok=True)  # beside the checkpoints, outside version control
figure, axis = plt.subplots(figsize=(9, 3.8))
names = list(speed)[::-1]
colors = ["tab:green" if speed_ladder.RUNGS[name]["backend"] == "jax" else "tab:blue" for name in names]
bars = axis.barh(names, [speed[name] for name in names], color=colors)
axis.bar_label(bars, [f"{speed[name]:,.0f}/s = {speed[name] / speed['fit (guide)']:.1f}x the guide's" for name in names],
               fontsize=8, padding=3)
axis.set_xlim(0, 1.4 * max(speed.values()))
axis.set(xlabel="training samples/s in the steady state (one device, batch 64; blue TensorFlow, green JAX)",
         title=f"One MLP, {EPOCHS} epochs per rung, measured in one run")
figure.tight_layout()
figure.savefig("results/figures/08_ladder.png", dpi=100, bbox_inches="tight")
plt.show()

# %% [markdown]
# Many steps per call and XLA usually remove work around the arithmetic, though not always (on a CPU,
# XLA's kernels are not always faster than TensorFlow's). The scan epoch removes what is left of the
# host: no Python, no `tf.data` iterator and no TensorFlow executor between steps. That makes it the
# rung with the least *host* work, not necessarily the fastest program: how much that saves, and
# whether its other choices cost anything, is measured next. The rest of a rung's time is the step
# itself, which the sections after take apart. On a shared machine one rung
# can come out slower than it should (another program took the cores during its epochs): compare the
# bars with that in mind, and rerun the cell before trusting a small difference. The accuracies differ
# by the initial weights and the data order each rung draws, and by rounding (XLA and other kernels
# sum in other orders): none of these settings changes what is computed.

# %% [markdown]
# ## The scan epoch taken apart
#
# How much does running a whole epoch in one call save, and do the scan's other choices cost anything?
# The cell below trains the same 200 steps, from the same weights on the same batches, five ways, in
# a JAX process of its own; the five take turns over 5 rounds (so that a busy spell of the machine
# falls on all of them), and each gets the median and spread of its rounds:
#
# - the scan as the rung runs it: each batch gathered from the data arrays inside its step;
# - the scan over batches gathered before it starts (one gather of all 200 batches);
# - the scan with 10 steps unrolled in each loop iteration (`jax.lax.scan(..., unroll=10)`: XLA
#   compiles 10 copies of the step into the loop's body, so the loop runs a tenth as many iterations);
# - one jitted step per Python call, on the batches gathered before: a step dispatched from Python,
#   without anything Keras' `fit` adds;
# - the same with the state **donated** (`jax.jit(..., donate_argnums=0)`): XLA may write the new
#   weights and optimizer state into the buffers of the old ones instead of allocating new ones.

# %%
# The same 200 steps, five ways, in a JAX process; samples/s as median and spread of 5 rounds.
variants = scan_variants.measure(DATA_SOURCE)
rung_rate = variants["scan, each batch gathered in its step (the rung)"]["samples_per_s"][0]
for name, variant in variants.items():
    median_rate, low, high = variant["samples_per_s"]
    print(f"{name:48s} {median_rate:8,.0f} samples/s (spread {low:,.0f} to {high:,.0f}), "
          f"{median_rate / rung_rate:.2f}x the rung's way")
per_call_rate = variants["one jitted step per Python call"]["samples_per_s"][0]
print(f"one step: {BATCH_SIZE / rung_rate * 1e6:,.0f} µs in the scan, {BATCH_SIZE / per_call_rate * 1e6:,.0f} µs "
      "dispatched from Python, one call per step (medians)")

# %% [markdown]
# Read each ratio against the spreads: a ratio whose spreads overlap the rung's means that choice makes
# no difference on this machine. Donation lets XLA write the new state into the old state's buffers
# instead of allocating new ones: it saves memory, which is what it is for on an accelerator with
# little of it. It need not save time: where the printout shows it slower, as it can on a CPU, it cost
# time here, for a reason this lesson does not take apart. The difference between a step dispatched from Python and the same step
# in the scan is what the host costs per step when nothing else is in the way. Keras' `fit` on JAX
# pays more than that: its data adapter slices every batch from the arrays in Python and hands it to
# the jitted step (`get_jax_iterator` in `keras/src/trainers/data_adapters/array_data_adapter.py`),
# and it runs its callbacks between calls. Both JAX rungs compile the same model's step with XLA
# (Keras' also updates its loss and accuracy metrics), so what separates them on the ladder is mostly
# the host's work per step; what is left of a step's time is the
# step's own arithmetic and memory traffic, which the next sections take apart.

# %% [markdown]
# ### Exercise q1: read your ladder
#
# From your own ladder, set `fastest_rung` to the name of the rung that trained fastest (among the ladder's rungs, the names of `runs`: the mixed-precision section below adds bfloat16 rungs to `speed`) and `times_the_guide` to how many times the guide's `fit` speed it reached (its samples/s divided by the guide's, computed from `speed`, not typed from the rounded printout). The check recomputes both from the ladder kerasdist measured in this run (its own copy: redefining `runs` changes nothing), not from any fixed figure.
#
# Complete the cell, then run the check below it; `q1.hint()` gives a hint, `q1.solution()` the solution.
#
# <details><summary>Solution</summary>
#
# `speed` maps each rung to its steady-state samples/s, so the fastest rung is the one with the largest value, and its ratio to `"fit (guide)"` says how much work around the arithmetic the other settings removed. Which rung wins depends on the machine; the reasons are in the rest of the lesson.
#
# </details>

# %% nbgrader={"grade": false, "grade_id": "q1_answer", "locked": false, "schema_version": 3, "solution": true, "task": false}
fastest_rung = None     # the name of the fastest rung in your ladder
times_the_guide = None  # how many times the guide's fit() speed it reached
### BEGIN SOLUTION
fastest_rung = max(runs, key=speed.get)
times_the_guide = speed[fastest_rung] / speed["fit (guide)"]
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "q1", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
# NBVAL_CHECK_OUTPUT
q1.check()
### BEGIN HIDDEN TESTS
q1.assert_correct()
### END HIDDEN TESTS

# %% [markdown]
# ## Mixed precision
#
# **Mixed precision** computes the layers in a 16-bit float type while the weights (and the
# optimizer's state) stay in float32. Keras sets it with a *dtype policy*:
# `keras.mixed_precision.set_global_policy("mixed_bfloat16")` makes every layer built afterwards
# compute in bfloat16 and keep float32 variables. kerasdist's model keeps its last layer (the logits)
# in float32, as Keras' guide advises, so the loss and its statistics stay in float32.
#
# Two 16-bit types exist, and they differ where it matters for training:
#
# | type | exponent bits | mantissa bits | smallest normal number | smallest number at all | where it is fast |
# |---|---|---|---|---|---|
# | bfloat16 | 8 (as float32) | 7 | ~1e-38 | ~9e-41 | CPUs with AVX512_BF16/AMX, TPUs, recent GPUs |
# | float16 | 5 | 10 | ~6e-5 | ~6e-8 | GPUs (tensor cores), CPUs with AVX512_FP16/AMX-FP16 |
#
# bfloat16 keeps float32's range, so small gradients survive and `mixed_bfloat16` needs nothing else.
# float16 does not: below ~6e-5 its numbers lose precision (subnormals), and below about half of
# ~6e-8 they round to zero. That is why `mixed_float16` needs **loss scaling**: multiply the loss by
# a large factor before the backward pass (so the gradients are large enough for float16), then
# divide the gradients by it before the update; when a gradient overflows to inf, skip that step
# and lower the factor. Keras' `compile()` wraps the optimizer in a `LossScaleOptimizer` that does
# this whenever the model's policy is `mixed_float16` and `auto_scale_loss` is left at its default,
# True (see `Trainer.compile` in
# `keras/src/trainers/trainer.py`); a custom loop must call `optimizer.scale_loss(loss)` before taking
# the gradients (the `LossScaleOptimizer` unscales them in `apply_gradients`), as kerasdist's loop
# does. The cell below shows all of that on this machine.

# %%
# Which bfloat16 instructions this CPU has; what float16 and bfloat16 make of small gradients; what
# compile() does to the optimizer under mixed_float16 (building a model needs no GPU).
bf16_instructions = kerasdist.cpu_bfloat16_instructions()
if bf16_instructions:
    print("this CPU has bfloat16 instructions:", ", ".join(bf16_instructions))
else:
    print("this CPU lacks bfloat16 instructions (no avx512_bf16 or amx_bf16): TensorFlow emulates "
          "bfloat16 with float32 and it is slower, not faster")
# The two types' rounding, by NumPy's float16 and ml_dtypes' bfloat16 (the bfloat16 of TensorFlow and JAX), from
# float32 as TensorFlow's casts round: the same numbers, without running a float16 kernel on this CPU.
number_types = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16}
for small_gradient in (1e-6 / BATCH_SIZE, 1e-4 / BATCH_SIZE):
    for dtype, number_type in number_types.items():
        print(f"a gradient of {small_gradient:.3e} in {dtype}: {float(np.float32(small_gradient).astype(number_type)):.3e}")
keras.mixed_precision.set_global_policy("mixed_float16")
try:
    float16_model = model_module.build_model()
finally:
    keras.mixed_precision.set_global_policy("float32")
print(f"under mixed_float16: hidden layers compute in {float16_model.layers[1].compute_dtype}, "
      f"keep {float16_model.layers[1].variable_dtype} weights; logits in {float16_model.layers[-1].compute_dtype}; "
      f"compile() made the optimizer a {type(float16_model.optimizer).__name__} "
      f"(initial scale {float(float16_model.optimizer.initial_scale):.0f})")

# %% [markdown]
# Now kerasdist's loop again, without and with XLA, under `mixed_bfloat16`, in the same run as the
# ladder:

# %%
# kerasdist's loop, without and with XLA, under mixed_bfloat16 (a bar across the two).
progress = keras.utils.Progbar(2, unit_name="rung")
for name in ("kerasdist loop", "kerasdist loop + XLA"):
    run = speed_ladder.measure(name, DATA_SOURCE, EPOCHS, data=data, precision="mixed_bfloat16")
    speed[f"{name}, bfloat16"] = speed_ladder.steady_samples_per_s(run)
    accuracy[f"{name}, bfloat16"] = run["test_accuracy"]
    progress.add(1)
for name in ("kerasdist loop", "kerasdist loop, bfloat16", "kerasdist loop + XLA", "kerasdist loop + XLA, bfloat16"):
    print(f"{name:32s} {speed[name]:8,.0f} samples/s  test accuracy {accuracy[name]:.3f}")

# %% [markdown]
# Whether bfloat16 pays here depends on the CPU (the instructions printed above) and on where the
# step's time goes: the sections below measure the bfloat16 matrix products of TensorFlow's kernels
# and of XLA's, and a step whose time is not in its matrix products gains little from faster ones.

# %% [markdown]
# ## Where a step's time goes
#
# Each of these programs runs on batches already in memory, in a `tf.function` that runs
# `STEPS_PER_CALL` steps per call (so Python's overhead is paid once per 50 steps):
#
# - **forward**: the model's logits and loss;
# - **forward + backward**: and the gradients of all weights;
# - **optimizer update**: Adam's update of all weights from fixed gradients, alone;
# - **whole step**: forward, backward and update;
# - the same whole step at **one step per call**, as the guide's `fit` runs it: the difference is the
#   host's overhead per call (Python, `tf.function` dispatch, one executor run);
# - the same whole step compiled by **XLA**;
# - the **input pipeline** alone: kerasdist's `tf.data` pipeline (shuffle, batch, gather, prefetch),
#   drained without training.
#
# The programs take turns: after a warm-up call of each, eleven rounds call every program once, so
# that a busy spell of the machine falls on all of them (`time_programs`). The tables give the
# **median** and the spread (25th to 75th percentile) of each program's calls, the statistic of every
# rate in this lesson. On a shared machine a few calls are slowed down by other
# programs: the median ignores them, the spread shows them.

# %%
# Time each program, per step, in milliseconds (median and spread of 11 calls).
keras.utils.set_random_seed(SEED)
mlp = model_module.build_model()
loss_function, optimizer = mlp.loss, mlp.optimizer
timed = np.arange(STEPS_PER_CALL * BATCH_SIZE) % len(data.y_train)  # the first 50 batches' samples
x_steps = tf.constant(data.x_train[timed].reshape(STEPS_PER_CALL, BATCH_SIZE, -1))
y_steps = tf.constant(data.y_train[timed].reshape(STEPS_PER_CALL, BATCH_SIZE))
fixed_gradients = [tf.fill(variable.shape, 1e-3) for variable in mlp.trainable_variables]


def forward(x, y):
    return loss_function(y, mlp(x, training=True))


def forward_backward(x, y):
    with tf.GradientTape() as tape:
        loss = forward(x, y)
    gradients = tape.gradient(loss, mlp.trainable_variables)
    # Return a number made of every gradient: TensorFlow prunes computations that no output uses.
    return loss + tf.add_n([tf.reduce_sum(g[:1]) for g in gradients])


def optimizer_update(x, y):
    optimizer.apply(fixed_gradients, mlp.trainable_variables)
    return tf.constant(0.0)


def whole_step(x, y):
    with tf.GradientTape() as tape:
        loss = forward(x, y)
    optimizer.apply(tape.gradient(loss, mlp.trainable_variables), mlp.trainable_variables)
    return loss


def steps_per_call(part, jit_compile=False):
    """A tf.function running ``part`` on each of the batches it is given, in one call."""
    @tf.function(jit_compile=jit_compile)
    def run(xs, ys):
        total = tf.constant(0.0)
        for i in tf.range(tf.shape(xs)[0]):
            total += part(xs[i], ys[i])
        return total
    return run


one_step_per_call = tf.function(whole_step)


x_batches, y_batches = tf.unstack(x_steps), tf.unstack(y_steps)  # sliced once, as fit's iterator hands them out


def python_loop_of_steps(xs, ys):
    for x, y in zip(x_batches, y_batches):
        one_step_per_call(x, y)


pipeline = data_module.train_dataset(data.x_train, data.y_train, BATCH_SIZE, SEED, 0, 1)  # epochs 0 to 1
batches_per_epoch = len(data.y_train) // BATCH_SIZE
drain = tf.function(lambda: pipeline.reduce(tf.constant(0.0), lambda total, batch: total + batch[0][0, 0]))


def per_step_ms(timing, steps):
    return Timing(*(seconds / steps * 1e3 for seconds in timing))


programs = {  # each program, its arguments, and the steps one call runs
    "input pipeline": (drain, (), batches_per_epoch),
    "forward": (steps_per_call(forward), (x_steps, y_steps), STEPS_PER_CALL),
    "forward + backward": (steps_per_call(forward_backward), (x_steps, y_steps), STEPS_PER_CALL),
    "optimizer update": (steps_per_call(optimizer_update), (x_steps, y_steps), STEPS_PER_CALL),
    "whole step": (steps_per_call(whole_step), (x_steps, y_steps), STEPS_PER_CALL),
    "whole step, 1 per call": (python_loop_of_steps, (x_steps, y_steps), STEPS_PER_CALL),
    "whole step, XLA": (steps_per_call(whole_step, jit_compile=True), (x_steps, y_steps), STEPS_PER_CALL),
}
# The programs take turns, 11 rounds of one call each (a bar across the rounds), so that a busy spell of the
# machine falls on all of them and the parts below, their differences, hold.
progress = keras.utils.Progbar(11, unit_name="round")
per_call = time_programs({name: (program, arguments) for name, (program, arguments, _) in programs.items()},
                         rounds=11, on_round=lambda: progress.add(1))
timings = {name: per_step_ms(per_call[name], steps) for name, (_, _, steps) in programs.items()}  # ms per step
for name, timing in timings.items():
    print(f"{name:24s} {timing.median:6.3f} ms per step (spread {timing.low:.3f} to {timing.high:.3f} ms)")
graphs = {name: tf.function(part).get_concrete_function(x_steps[0], y_steps[0]).graph.get_operations()
          for name, part in (("forward", forward), ("forward + backward", forward_backward),
                             ("optimizer update", optimizer_update), ("whole step", whole_step))}
# An op is "large" when one of its outputs holds more than 1,000 numbers: a pass over an array in memory.
large = {name: sum(any((output.shape.num_elements() or 0) > 1000 for output in op.outputs) for op in graph)
         for name, graph in graphs.items()}
print("ops in one step's graph: " + ", ".join(f"{name} {len(graph)} ({large[name]} large)"
                                               for name, graph in graphs.items()))

# %% [markdown]
# The programs above are nested: forward; forward + backward; the whole step (forward, backward and
# update); the whole step at one step per call. So each part of a step is the difference between one
# program's median and the median of the program inside it (`step_breakdown`): the backward pass is
# forward + backward minus forward, the update is the whole step minus forward + backward, and the
# host's overhead is one step per call minus 50 per call. The parts then add up to the measured step
# at one step per call, and no time is counted twice. The update timed alone is printed beside its
# part: alone it runs without the backward pass's ops around it, so the two need not agree.
# The op counts say why the update is slow for its arithmetic: Keras applies Adam variable by variable,
# a few element-wise ops per variable (the "large" ones, each a pass over a weight-sized array in
# memory) plus scalar bookkeeping (the step count, the bias corrections, reading variables), and each
# op is a kernel that TensorFlow's executor schedules.
#
# **Predict, then run.** Is the host's overhead per call a small or a large part of a step run one
# per call? Which part is largest at 50 steps per call: the matrix products (forward, backward) or
# the update? Decide from the numbers above, then run the cell.

# %%
# One step at one step per call, in parts that add up to it (printed: the shares move on a busy machine).
median = {name: timing.median for name, timing in timings.items()}
parts = step_breakdown(median)  # ms: forward, backward, optimizer update, host overhead per call
print(" + ".join(f"{name} {value:.3f}" for name, value in parts.items())
      + f" = {sum(parts.values()):.3f} ms, the measured step at 1 per call: {median['whole step, 1 per call']:.3f} ms")
print(f"the optimizer update timed alone: {median['optimizer update']:.3f} ms; its part of the step: "
      f"{parts['optimizer update']:.3f} ms")
print(f"1 step per call: {median['whole step, 1 per call'] / median['whole step']:.1f}x the time of 50 per call")
print("shares of one step at 1 step per call: " + ", ".join(
    f"{name} {value / median['whole step, 1 per call']:.0%}" for name, value in parts.items()))
for name in [name for name, value in parts.items() if value < 0]:
    print(f"{name} came out below zero: smaller than the timings' noise here; run the timing cell again")

# %% [markdown]
# **The input pipeline shares the cores.** On a GPU machine the input pipeline runs on the CPU while
# the GPU computes, so prefetching hides it whenever it is faster than a step. Here there is nothing
# idle to hide it on: the pipeline's threads take CPU time from the step. The XLA-compiled step timed
# alone (its batches already in memory, 50 steps in one compiled loop) against a step of kerasdist's
# loop + XLA rung bounds what this costs: the rung reads its batches from that pipeline, and it also
# calls its compiled step once per step from a TensorFlow loop and keeps per-step statistics, so the
# difference is the pipeline's cost at most (on a busy machine it can even come out below zero, when
# the noise is larger than the cost):

# %%
# The XLA step alone against the same step in training (the loop + XLA rung of the ladder), per step; and
# against a step of the scan epoch (the same arithmetic, compiled from JAX).
in_training_ms = BATCH_SIZE / speed["kerasdist loop + XLA"] * 1e3
print(f"XLA step alone {median['whole step, XLA']:.3f} ms; in training {in_training_ms:.3f} ms per step; "
      f"the input pipeline alone takes {median['input pipeline']:.3f} ms per batch (wall time, drained alone)")
print(f"a step of the scan epoch: {BATCH_SIZE / speed['JAX lax.scan epoch'] * 1e3:.3f} ms")

# %% [markdown]
# The last line sets TensorFlow's XLA step, timed alone, beside a step of the scan epoch: the same
# arithmetic, each compiled by XLA from its own program (the scan's step also gathers its batch), and
# neither with host work between steps. The printout says which is faster here: the rung with the
# least host work need not run the fastest compiled step.

# %%
# Draw one step's time in its parts, with the measured step marked, beside the whole step at 50 per call, the
# same compiled by XLA, the update and the input pipeline each timed alone (error bars: the spread).
figure, axis = plt.subplots(figsize=(11, 3.8))
left = 0.0
for (name, value), color in zip(parts.items(), ("tab:blue", "tab:cyan", "tab:orange", "tab:red")):
    axis.barh("1 step per call, in parts", value, left=left, color=color, label=name)
    left += value
whole = timings["whole step, 1 per call"]
axis.errorbar(whole.median, "1 step per call, in parts", xerr=[[whole.median - whole.low], [whole.high - whole.median]],
              fmt="D", color="black", capsize=4, label="the step measured at 1 per call")
for label, name, color in (("50 steps per call", "whole step", "tab:gray"),
                           ("50 steps per call, XLA", "whole step, XLA", "tab:green"),
                           ("update alone", "optimizer update", "tab:orange"),
                           ("input pipeline alone", "input pipeline", "tab:olive")):
    timing = timings[name]
    axis.barh(label, timing.median, xerr=[[timing.median - timing.low], [timing.high - timing.median]],
              color=color, label=None if name == "optimizer update" else name, capsize=3)
axis.set(xlabel="milliseconds per step of 64 samples (median and spread of 11 calls)",
         title="Where one training step's time goes")
axis.set_xlim(0, 1.05 * max([left, whole.high] + [timings[name].high for name in
                                                    ("whole step", "whole step, XLA", "optimizer update", "input pipeline")]))
axis.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
figure.tight_layout()
figure.savefig("results/figures/08_step_time.png", dpi=100, bbox_inches="tight")
plt.show()

# %% [markdown]
# Read the bars from the bottom. The bottom bar's parts add up to the step measured at one step per call
# (the black mark, with its spread). At one step per call, the host's work around each step is paid every
# step; `steps_per_execution` and the loop engine pay it once per 50 steps. The backward pass has
# 1.25 times the forward pass's FLOPs for this MLP (the next section counts them: the first layer,
# three quarters of the forward FLOPs, needs no input gradient). Adam's update is little arithmetic
# but many small element-wise ops over every weight. XLA fuses the update's ops, and the bias and
# ReLU ops, into few kernels; the XLA bar shows what that saves here, if anything. On a busy machine a
# part can even come out below zero: each median comes from its own program's calls, and a difference
# smaller than their spread has no sign (the cell above then says so); run the timing cell again.

# %% [markdown]
# ### A profiler's trace of one step
#
# Timing programs says how long each takes, not what the machine does during a step. A **profiler**
# records every op as it runs: which thread ran it, when it started and how long it took.
# TensorFlow's (`tf.profiler.experimental.start` and `stop`) writes a trace file that TensorBoard's
# profile plugin draws; `kerasdist.measure.trace` reads the same file back. Below, one step at one
# step per call, as the guide's `fit` runs it: each op is a bar on the thread of TensorFlow's
# executor that ran it, coloured by the part of the step it belongs to (from its name scope:
# `gradient_tape/` for the backward pass, the optimizer's name, `optimizer.name`, for the update).
# (The products' kernels are named `_Mkl...`: oneDNN's, under its former name, MKL-DNN.) Recording adds
# time to every op, and a freshly made function runs slower than one that has run
# many times (below), so the traced step is slower than the steps timed above: read the trace for
# the order and the gaps, not for the time. TensorFlow's executor learns which ops are cheap: once a function has run many
# times, it runs those ops inline and the profiler no longer records them. So the cell traces a
# freshly made `tf.function` of the same step, whose first calls record far more of its ops; the
# printout sets the ops recorded beside the ops of the step's graph (which also counts constants and
# other ops that do no work).

# %%
# Trace one step at one step per call, of a freshly made tf.function: each op's thread, start and duration.
traced = trace.trace_step(tf.function(whole_step), x_batches[0], y_batches[0], optimizer_name=optimizer.name)
ops_by_part = collections.defaultdict(list)
for op in traced["ops"]:
    ops_by_part[op["part"]].append(op)
threads = sorted({op["thread"] for op in traced["ops"]})
print(f"one traced step: {traced['seconds'] * 1e3:.3f} ms (untraced, at 1 per call: {median['whole step, 1 per call']:.3f} ms), "
      f"{len(traced['ops'])} ops recorded (its graph has "
      f"{len(graphs['whole step'])}) on {len(threads)} threads; no recorded op running for "
      f"{1 - trace.busy_seconds(traced['ops']) / traced['seconds']:.0%} of it")
for part, ops in ops_by_part.items():
    longest = max(ops, key=lambda op: op["seconds"])
    print(f"{part:28s} {len(ops):4d} ops, {sum(op['seconds'] for op in ops) * 1e3:6.3f} ms of op time; the longest: "
          f"{longest['type']} ({longest['name']}), {longest['seconds'] * 1e3:.3f} ms")

# %%
# Draw the trace: one row per executor thread, each op a bar from its start to its end.
figure, axis = plt.subplots(figsize=(11, 0.5 * len(threads) + 1.6))
part_colors = {trace.OTHER_PART: "tab:blue", "backward": "tab:cyan", "optimizer update": "tab:orange"}  # as above
for part, ops in ops_by_part.items():
    color = part_colors[part]
    for thread in threads:
        axis.broken_barh([(op["start"] * 1e3, op["seconds"] * 1e3) for op in ops if op["thread"] == thread],
                         (thread - 0.4, 0.8), color=color, label=part if thread == threads[0] else None)
axis.axvline(traced["seconds"] * 1e3, color="black", linestyle="--", label="the call returns")
axis.set(yticks=threads, yticklabels=[f"thread {thread}" for thread in threads],
         xlabel="milliseconds from the call's start", title="One training step, one step per call, as the profiler saw it")
axis.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
figure.tight_layout()
figure.savefig("results/figures/08_trace.png", dpi=100, bbox_inches="tight")
plt.show()

# %% [markdown]
# Read the trace from the left. TensorFlow's executor starts an op as soon as its inputs are ready,
# on whichever of its threads is free. So the update's ops that depend on nothing computed in the
# step (reading the variables, Adam's step count and bias corrections, all scalars) can run at once,
# before or beside the forward pass: the first orange slivers. Then the forward products follow one
# another, then the backward ones, and a weight's update can start as soon as its gradient exists,
# while other gradients are still being computed. Most ops are short: their bars are slivers, and the printout names the
# longest of each part. The white space, where no recorded op runs, is the host's share of this step:
# the Python call, the function's dispatch and the executor's scheduling between ops (with the ops the
# profiler left out). A fresh function sends every op through the executor's threads, so its white
# space is larger than the host's overhead of a step that has run many times (the breakdown above
# measured that one); it is the kind of overhead that more steps per call and XLA's fusion remove.

# %% [markdown]
# ### Exercise q2: the host's overhead in your timings
#
# From your own timings, set `overhead_ms` to the host's overhead per step when one step runs per call (in milliseconds, from the medians), and `largest_part` to the name of the largest part of `parts`. The check recomputes both from the timings kerasdist measured in this run (its own copy of them).
#
# Complete the cell, then run the check below it; `q2.hint()` gives a hint, `q2.solution()` the solution.
#
# <details><summary>Solution</summary>
#
# The same whole step was timed at 50 steps per call and at one step per call; the difference per step is what the host does around each call (Python, `tf.function` dispatch, one executor run). At 50 steps per call each step carries a fiftieth of it, which is why `steps_per_execution` and the loop engine win on the ladder whenever that overhead is a large part of a step.
#
# </details>

# %% nbgrader={"grade": false, "grade_id": "q2_answer", "locked": false, "schema_version": 3, "solution": true, "task": false}
overhead_ms = None   # the host's overhead per step at one step per call, in ms
largest_part = None  # the name of the largest part of a step at one step per call
### BEGIN SOLUTION
overhead_ms = median["whole step, 1 per call"] - median["whole step"]
largest_part = max(parts, key=parts.get)
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "q2", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
# NBVAL_CHECK_OUTPUT
q2.check()
### BEGIN HIDDEN TESTS
q2.assert_correct()
### END HIDDEN TESTS

# %% [markdown]
# ## The machine's limit: a roofline at the model's shapes
#
# A Dense layer with an `n_in x n_out` kernel multiplies each sample by its kernel: `2 n_in n_out`
# FLOPs (a multiply and an add per weight). Training adds the backward pass: as much again for the
# kernel's gradient, and as much again for the gradient of the layer's input, which the first layer
# does not need.

# %%
# NBVAL_CHECK_OUTPUT
# FLOPs per sample, layer by layer, from the kernels' shapes.
flops = kerasdist.training_flops_per_sample(mlp)
kernels = [layer.kernel.shape for layer in mlp.layers if hasattr(layer, "kernel")]
for n_in, n_out in kernels:
    print(f"Dense {n_in:3d} x {n_out:3d}: {2 * n_in * n_out:7,} FLOPs forward per sample")
print(f"training FLOPs per sample: {flops['forward']:,} forward + {flops['backward']:,} backward = "
      f"{flops['total']:,} (backward {flops['backward'] / flops['forward']:.2f}x forward)")

# %% [markdown]
# A **roofline** bounds each kernel by two limits of the machine: its rate of arithmetic (FLOP/s) and
# its memory bandwidth (bytes/s). A kernel that does `F` FLOPs and must move `B` bytes takes at least
# `max(F / P, B / BW)`; its **arithmetic intensity** `F / B` says which limit binds, and the
# intensity where the two meet, `P / BW`, is the machine's **ridge point**. For a bound, `P` must be
# a rate no kernel can beat: the CPU's **nominal peak**, cores x FLOPs per cycle of one core x clock,
# read from the CPU below. A core's FLOPs per cycle come from its vector instructions: one **fused
# multiply-add** (FMA) computes `a x b + c` on every lane of a vector register at once, two FLOPs per
# lane (16 float32 lanes in AVX-512's 512-bit registers), and a core has up to two FMA units. Two
# assumptions stand in this figure. Two FMA units per core can count too many (AMD's Zen 4, for one,
# runs AVX-512 on 256-bit units: half the FLOPs per cycle), which makes the bound loose and MFU read
# low. The highest clock the system reports (its source is printed: `cpu MHz` is /proc/cpuinfo's line,
# `cpufreq maximum` the kernel's frequency driver's) can be too low (a virtual machine may report only its
# timer's clock, below what the cores run at), which can make it no bound at all: the cell says so if
# a measured rate beats it. The share of the measured peak, beside MFU, reads high.
# Beside it the **measured peak**: the median rate of large chained products, what this CPU
# really reaches. `BW` is main memory's (DRAM) bandwidth, measured by the triad of STREAM, the standard benchmark of memory bandwidth (`a = b + 3 c`, on
# every core). Adam's update is the memory-bound part: per weight it reads the gradient, both moments
# and the weight and writes three of them back, about 12 FLOPs for 28 bytes.
# The step's matrix products, with the batch of 64:

# %%
# NBVAL_CHECK_OUTPUT
# One step's matrix products: FLOPs, the fewest bytes they must move (float32), arithmetic intensity.
step = step_kernels(mlp, BATCH_SIZE)
for kernel in step:
    print(f"{kernel['name']:24s} ({kernel['m']:3d} x {kernel['k']:3d}) @ ({kernel['k']:3d} x {kernel['n']:3d}): "
          f"{kernel['flops'] / 1e6:6.2f} MFLOP, {kernel['bytes'] / 1e6:5.3f} MB, "
          f"{kernel['flops'] / kernel['bytes']:5.1f} FLOP/byte")
adam_bytes = ADAM_BYTES_PER_WEIGHT * mlp.count_params()
print(f"Adam's update, fused: {adam_bytes / 1e6:.2f} MB for {mlp.count_params():,} weights, "
      f"{12 * mlp.count_params() / adam_bytes:.2f} FLOP/byte (about 12 FLOPs per weight)")
assert sum(kernel["flops"] for kernel in step) == BATCH_SIZE * flops["total"]

# %%
# The machine, each rate the median of its calls with their spread, printed as measured: the nominal peak (read
# from the CPU), the measured peak (chained 1024 x 1024 products), main memory's bandwidth (the triad), and
# each product's rate at its own shape (the faster of TensorFlow's kernel and XLA's).
nominal = nominal_flops_per_s("float32")
print(f"CPU: {nominal.model}")
print(f"nominal peak: {nominal.cores} cores x {nominal.flops_per_cycle} FLOPs per cycle ({nominal.instructions}, "
      f"{speed_module.FMA_UNITS_PER_CORE} FMA units assumed) x {nominal.clock_hz / 1e9:.2f} GHz "
      f"({nominal.clock_source}) = {nominal.flops_per_s / 1e9:,.0f} GFLOP/s float32")
peak = kerasdist.matmul_flops_per_s("float32")
print(f"measured peak: {peak.median / 1e9:,.0f} GFLOP/s (spread {peak.low / 1e9:,.0f} to {peak.high / 1e9:,.0f}), "
      f"{peak.median / nominal.flops_per_s:.0%} of the nominal peak")
if peak.high > nominal.flops_per_s:
    print("the measured peak beat the nominal one: the cores run faster than the clock reported, so it is no bound here")
bandwidth = memory_bytes_per_s()
print(f"main memory: {bandwidth.median / 1e9:,.1f} GB/s (triad, spread {bandwidth.low / 1e9:,.1f} to "
      f"{bandwidth.high / 1e9:,.1f})")
ridge = nominal.flops_per_s / bandwidth.median  # the intensity where the two roofs meet
print(f"ridge point: {ridge:.1f} FLOP/byte; the largest product moves {max(k['bytes'] for k in step) / 1e6:.2f} MB")
rate = {}
for kernel in step:
    shape = (kernel["m"], kernel["k"], kernel["n"])
    if shape not in rate:
        rate[shape] = max((gemm_flops_per_s(*shape, jit_compile=jit) for jit in (False, True)), key=lambda r: r.median)
    intensity, measured = kernel["flops"] / kernel["bytes"], rate[shape]
    roof = min(nominal.flops_per_s, intensity * bandwidth.median)
    print(f"{kernel['name']:24s} {measured.median / 1e9:6.1f} GFLOP/s (spread {measured.low / 1e9:5.1f} to "
          f"{measured.high / 1e9:5.1f}), {measured.median / roof:4.0%} of the roof at its intensity, "
          f"{'memory' if intensity < ridge else 'compute'} side of the ridge")

# %%
# What a step can take: a bound (the products at the nominal peak) and an estimate (each product at its own
# measured rate, or main memory's bandwidth if that is slower, and Adam's update at main memory's bandwidth).
bound_s = BATCH_SIZE * flops["total"] / nominal.flops_per_s
adam_s = adam_bytes / bandwidth.median
estimate_s = adam_s + sum(max(kernel["flops"] / rate[(kernel["m"], kernel["k"], kernel["n"])].median,
                              kernel["bytes"] / bandwidth.median) for kernel in step)
print(f"bound: at least {bound_s * 1e3:.3f} ms per step for its products alone = at most {BATCH_SIZE / bound_s:,.0f} "
      "samples/s")
print(f"isolated-kernel estimate: {estimate_s * 1e3:.3f} ms per step (Adam's update {adam_s * 1e3:.3f} ms of it) = "
      f"{BATCH_SIZE / estimate_s:,.0f} samples/s")

# %% [markdown]
# The bound holds for any program: it counts only the products' FLOPs, each at the nominal peak, and
# a real step does those and more. The estimate is of another kind: each product as fast as it ran
# *alone*, paying for its own loop iteration and the read of its result (for the smallest products,
# layer 3's, most of their time), which a step fused by XLA does not pay; and Adam's state (a few MB)
# may sit in the caches, faster than main memory. So a fused rung can come out faster than the
# estimate, never faster than the bound. The rates above were measured one after another: on a busy
# machine a product can come out faster than the measured peak taken a few seconds before it, which
# says how much the load moved, not that the product beat the machine.

# %%
# The roofline chart: the bound's two roofs, the measured peak, and each product at its intensity and measured rate.
figure, axis = plt.subplots(figsize=(10, 4.4))
intensity = np.logspace(-1, 3, 200)
axis.plot(intensity, np.minimum(nominal.flops_per_s, intensity * bandwidth.median) / 1e9, color="black",
          label="roofline: min(nominal peak, intensity x main memory's bandwidth)")
axis.axhline(peak.median / 1e9, color="gray", linestyle="--", label="measured peak (median)")
for kernel, marker in zip(step, "os^Dv<>P"):  # a marker per product, named in the legend (labels would overlap)
    measured = rate[(kernel["m"], kernel["k"], kernel["n"])]
    point = (kernel["flops"] / kernel["bytes"], measured.median / 1e9)
    axis.errorbar(*point, yerr=[[(measured.median - measured.low) / 1e9], [(measured.high - measured.median) / 1e9]],
                  fmt=marker, markersize=5, capsize=2, label=kernel["name"])
axis.axvline(12 * mlp.count_params() / adam_bytes, color="tab:orange", linestyle=":", label="Adam's update (intensity)")
axis.set(xscale="log", yscale="log", xlabel="arithmetic intensity (FLOP/byte)", ylabel="GFLOP/s",
         title="This CPU's roofline and the MLP's products (batch 64, float32; medians)")
axis.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
figure.tight_layout()
figure.savefig("results/figures/08_roofline.png", dpi=100, bbox_inches="tight")
plt.show()

# %% [markdown]
# The memory roof is main memory's: a product whose operands come from DRAM cannot beat it. But every
# product here moves about a megabyte or less (printed above), and that fits in the caches of a
# current CPU (a few MB), which are faster than main memory; so for these products the memory roof is
# a guide, not a limit, and a product left of the ridge is not held back by DRAM. The printout says
# how far below the roof each product runs. A product far below both roofs is held back by neither
# arithmetic nor memory, but by the work around it: the smallest, layer 3's, with ten outputs per
# sample, take little more time than launching a kernel and reading its result.
#
# **MFU** (model FLOPs utilization) is the share of the hardware's nominal peak that a run's *useful*
# FLOPs reach: samples/s times the model's FLOPs per sample, divided by the nominal peak, as the PaLM
# paper defines it. It counts only the model's products, so the update, the overhead and the pipeline
# all lower it, and no run can reach 100%. Divided by the measured peak instead, the same figure is a
# **share of the measured peak**: it reads higher, and it is named so, not MFU.

# %%
# Each rung's MFU (against the nominal peak) and share of the measured peak, and the same for the estimate.
mfu = {name: speed[name] * flops["total"] / nominal.flops_per_s for name in runs}
for name in runs:
    print(f"{name:34s} MFU {mfu[name]:5.1%}, share of the measured peak {mfu[name] * nominal.flops_per_s / peak.median:5.1%}")
estimate_mfu = BATCH_SIZE / estimate_s * flops["total"] / nominal.flops_per_s
print(f"{'isolated-kernel estimate':34s} MFU {estimate_mfu:5.1%}, share of the measured peak "
      f"{estimate_mfu * nominal.flops_per_s / peak.median:5.1%}")

# %% [markdown]
# **Predict, then run.** Can any rung reach an MFU of 100%? If one did, what would that say about
# the FLOP count or the nominal peak? Can the fastest rung beat the isolated-kernel estimate?
# Decide, then run the cell.

# %%
# The fastest rung against the bound and the estimate (printed, not asserted: on a busy machine the rates
# measured alone move more than training does).
fastest = max(mfu, key=mfu.get)
assert mfu[fastest] < 1, "a rung beat the nominal peak: check the FLOP count and the clock the CPU reports"
print(f"the fastest rung, {fastest}, reaches {mfu[fastest]:.0%} of the bound and "
      f"{mfu[fastest] / estimate_mfu:.0%} of the isolated-kernel estimate")

# %% [markdown]
# Now the bfloat16 limit. The same product at the first layer's shape, and a large one, in float32
# and bfloat16, with TensorFlow's kernel (what the loop without XLA runs) and with XLA's (what the
# `+ XLA` rungs run):

# %%
# The largest kernel's shape and a large product, float32 and bfloat16, TensorFlow's kernel and XLA's (medians
# and spreads), beside each dtype's nominal peak.
print(", ".join(f"nominal peak {dtype} {nominal_flops_per_s(dtype).flops_per_s / 1e9:,.0f} GFLOP/s"
                for dtype in ("float32", "bfloat16")))
# 50 products per call at the small shape, as the roofline cell; 10 of the large ones make a long enough call.
for shape, products in (((BATCH_SIZE, 784, 256), 50), ((1024, 1024, 1024), 10)):
    print(f"{shape[0]} x {shape[1]} @ {shape[1]} x {shape[2]}:")
    for dtype in ("float32", "bfloat16"):
        for jit in (False, True):
            value = gemm_flops_per_s(*shape, dtype=dtype, jit_compile=jit, products=products)
            print(f"  {dtype:8s} {'XLA' if jit else 'TensorFlow':10s} {value.median / 1e9:6,.0f} GFLOP/s "
                  f"(spread {value.low / 1e9:,.0f} to {value.high / 1e9:,.0f})")

# %% [markdown]
# Compare the four rates of each shape. Where the CPU has bfloat16 instructions, TensorFlow's kernel
# (from oneDNN, the library of CPU kernels TensorFlow uses for products on x86) uses them; whether XLA's kernel for this CPU does is what the row shows. A bfloat16 rate
# measured with one kernel does not bound a run that uses another: judge the `+ XLA, bfloat16` rung
# against XLA's bfloat16 rate. A bfloat16 step also does work a float32 step does not: every float32
# weight is cast to bfloat16 each step and every gradient back, and element-wise ops convert on the
# way. Where the products are a small part of the step, those casts can make a bfloat16 rung slower
# than float32 even when its products run faster,
# as the mixed-precision table above shows on some CPUs.

# %% [markdown]
# ### Exercise q3: the roofline's step time
#
# Write `attainable_step_s(kernels, flop_rate, bandwidth)`: the roofline's time of one step's matrix products, in seconds (Adam's update left out), for a list of kernels like `step_kernels(mlp, BATCH_SIZE)` (each a dict with keys `"flops"` and `"bytes"`), a FLOP rate (FLOP/s) and a memory bandwidth (bytes/s). The check calls it with this MLP's kernels at several rates and bandwidths.
#
# Complete the cell, then run the check below it; `q3.hint()` gives a hint, `q3.solution()` the solution.
#
# <details><summary>Solution</summary>
#
# A kernel cannot be faster than its arithmetic at the machine's rate, nor than moving its bytes at the memory's bandwidth: it takes at least `max(flops / flop_rate, bytes / bandwidth)`, the slower of the two. A step runs its kernels one after the other, so their times add up.
#
# </details>

# %% nbgrader={"grade": false, "grade_id": "q3_answer", "locked": false, "schema_version": 3, "solution": true, "task": false}
attainable_step_s = None  # a function of (kernels, flop_rate, bandwidth), in seconds
### BEGIN SOLUTION
def attainable_step_s(kernels, flop_rate, bandwidth):
    return sum(max(k["flops"] / flop_rate, k["bytes"] / bandwidth) for k in kernels)
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "q3", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
# NBVAL_CHECK_OUTPUT
q3.check()
### BEGIN HIDDEN TESTS
q3.assert_correct()
### END HIDDEN TESTS

# %% [markdown]
# ## What carries over to GPUs
#
# No GPU was measured for this course, so this section reasons from the measurements above and from
# kerasdist's **hardware model** (`kerasdist.measure.hardware`: an H100's published figures, a model,
# not a measurement), the one lessons 3 and 9 use.
#
# - **Per-call overhead matters more on a GPU.** Each op is a kernel launch of a few microseconds,
#   and a step of this MLP on a GPU is short; `steps_per_execution` and XLA's fusion carry over.
#   Keras does **not** turn XLA on for the guide's code there: `jit_compile="auto"` is off for any
#   model built under a `tf.distribute` strategy (the source printed above), and passing
#   `jit_compile=True` does not help: `fit()` compiled by XLA fails under a `MirroredStrategy` of two or
#   more replicas (the one program XLA would compile would read every replica's copy of a variable;
#   keras-team/keras#19005).
#   XLA works on one device (the ladder's rung), in kerasdist's loop (which compiles each replica's
#   gradient, not the all-reduce), and on the JAX backend under `keras.distribution` (lesson 7),
#   where XLA compiles the whole step of every device.
# - **Mixed precision changes types, and float32 is not what it is on a CPU.** GPUs' tensor cores run
#   float16 and (recent ones) bfloat16; use `mixed_float16` with loss scaling (Keras' `fit` adds it;
#   kerasdist's loop calls `optimizer.scale_loss`), or `mixed_bfloat16` where supported. But on an
#   A100 or H100 a float32 model's matrix products already run on the tensor cores, as
#   **TensorFloat-32** (float32's range, a 10-bit mantissa): TensorFlow turns it on by default there
#   (`tf.config.experimental.enable_tensor_float_32_execution`), and so does JAX's default precision.
#   Its peak is half of bfloat16's, where plain float32's (without the tensor cores) is about a
#   fifteenth, so mixed precision gains about 2x on the products, and MFU of a float32 model is measured against TensorFloat-32's peak.
#   The CPU's ratios say nothing about a GPU's.
# - **A product's intensity grows with the batch, up to the layer's width.** A (b x n_in) @ (n_in x
#   n_out) product does about b / 2 FLOPs per byte of float32 operands (b per byte of bfloat16) while
#   b is well below n_in and n_out, then levels off at n_in n_out / (2 (n_in + n_out)) (the table
#   below gives this MLP's). A GPU's ridge is far higher than this CPU's: its peak outgrows a CPU's
#   by more than its memory bandwidth does (the ridges are printed below). So the same product can be compute-bound here and memory-bound there:
#   the classification depends on the machine.
# - **Gradients stay float32.** Under a mixed policy the weights are float32, so their gradients are
#   too: the all-reduce between replicas moves as many bytes as before (checked below).
# - **Compute shrinks, communication does not.** In lesson 3's model (a fixed global batch: **strong
#   scaling**) a step on N devices takes `each device's compute + all-reduce(N) + input`, with no
#   overlap: Keras and kerasdist all-reduce in
#   `apply_gradients`, after the whole backward pass (PyTorch's DistributedDataParallel, DDP, and XLA's asynchronous
#   collectives overlap the two, which hides part of the all-reduce). Anything that makes compute
#   faster leaves the all-reduce as it is, so the speed-up from more devices drops.

# %%
# NBVAL_CHECK_OUTPUT
# Gradient bytes under mixed_bfloat16; then the hardware model's GPU (lessons 3 and 9 use the same) at lesson
# 3's global batch, in float32 (TensorFloat-32 products) and mixed bfloat16: one GPU, and 8 on PCIe against 1.
keras.mixed_precision.set_global_policy("mixed_bfloat16")
try:
    bfloat16_mlp = model_module.build_model()
    with tf.GradientTape() as tape:
        bfloat16_loss = bfloat16_mlp.loss(y_steps[0], bfloat16_mlp(x_steps[0], training=True))
    gradients = tape.gradient(bfloat16_loss, bfloat16_mlp.trainable_variables)
    gradient_dtypes = {g.dtype.name for g in gradients}
finally:
    keras.mixed_precision.set_global_policy("float32")
gradient_bytes = sum(g.shape.num_elements() * g.dtype.size for g in gradients)
print(f"gradients under mixed_bfloat16: {sorted(gradient_dtypes)}, {gradient_bytes / 1e6:.2f} MB per step")
MODEL_GLOBAL_BATCH = 4096  # lesson 3's, fixed as N grows (strong scaling)
link = hardware.LINKS["PCIe 4.0 x16"]
one_gpu_s = {}
for number_type in ("tensorfloat32", "bfloat16"):
    print(hardware.describe_step(hardware.DENSE_LAYERS, MODEL_GLOBAL_BATCH, dtype=number_type))
    step_s = {n: sum(plots.step_time_model(
        n, hardware.predicted_step(hardware.DENSE_LAYERS, MODEL_GLOBAL_BATCH // n, dtype=number_type)["seconds"],
        gradient_bytes, link["bandwidth"], link["alpha"], 0.0)) for n in (1, 8)}  # alpha: the link's latency per
    # step of a ring (lesson 9's model), 0.0: no input pipeline in the model
    one_gpu_s[number_type] = step_s[1]
    print(f"model, {number_type}: 8 GPUs on PCIe {step_s[1] / step_s[8]:.2f}x as fast as 1")
print(f"model: mixed bfloat16 makes one GPU {one_gpu_s['tensorfloat32'] / one_gpu_s['bfloat16']:.2f}x as fast "
      "as TensorFloat-32 (the launches and the update do not shrink)")

# %%
# Arithmetic intensity of the MLP's products against the batch, and how many of them sit on the memory side
# of each machine's ridge: this CPU's (nominal peak over measured bandwidth, above), an H100's in TensorFloat-32
# and in bfloat16 (model).
ridges = {"this CPU": ridge, "H100, TF32": hardware.ridge_point(), "H100, bf16": hardware.ridge_point(dtype="bfloat16")}
print("ridge points: " + ", ".join(f"{name} {value:.0f} FLOP/byte" for name, value in ridges.items()))
print(f"{'batch':>6} {'intensity (float32 operands)':>30} {'memory-bound of 8: this CPU':>28} {'H100 TF32':>10} "
      f"{'H100 bf16':>10}")
for batch in (64, 256, 1024, 4096):
    four_byte = [k["flops"] / k["bytes"] for k in dense_kernels(hardware.DENSE_LAYERS, batch)]
    two_byte = [k["flops"] / k["bytes"] for k in dense_kernels(hardware.DENSE_LAYERS, batch, bytes_per_value=2)]
    below = [sum(i < ridges[name] for i in intensities)
             for name, intensities in (("this CPU", four_byte), ("H100, TF32", four_byte), ("H100, bf16", two_byte))]
    print(f"{batch:>6} {min(four_byte):>13.1f} to {max(four_byte):<14.1f} {below[0]:>28} {below[1]:>10} {below[2]:>10}")

# %% [markdown]
# In the model, mixed precision halves the products' time but not the kernel launches and the
# update, so one GPU gains less than two; and 8 GPUs over PCIe are slower than one for this MLP at
# either precision, because its all-reduce takes longer than its whole step (lesson 9 predicts where
# larger models and faster links take it). The table shows why the GPU's step is short yet far from
# its peak: this MLP's layers are too narrow for its products' intensity to reach an H100's ridge at
# any batch, so all of them are memory-bound there, more than on this CPU. What does carry over from this CPU are the *reasons*: overhead per call, unfused
# small ops, a memory-bound optimizer update and a batch too small to keep the matrix units busy.
# The *numbers* do not: measure them on your own GPUs, with the same side-by-side method, before you
# trust any ratio (`benchmarks/accelerator_step.py` times this step on a GPU beside the model).

# %% [markdown]
# ## Performance tips
#
# - **Measure the steady state, side by side, in one run**: skip the first epoch (tracing), report
#   medians with their spread, and compare ratios, not absolute speeds from different runs or machines.
# - **Run many steps per call** (`steps_per_execution` in `fit`, or a loop in one `tf.function`), then
#   try XLA (`jit_compile=True` on one device; under a strategy `fit()` cannot be compiled, so use
#   kerasdist's loop or JAX); check the accuracy after the same epochs each time.
# - **Know the limit before optimizing**: the FLOPs and bytes of each kernel at your shapes, the
#   machine's nominal peak and bandwidth (the bound), and the rates it reaches at those shapes (the
#   estimate); MFU against the nominal peak, beside the estimate, says whether to look at overhead,
#   at memory traffic or at arithmetic.
# - **Use mixed precision where the hardware and the kernel have it** and the matrix products dominate;
#   keep the logits and the loss in float32; with float16, scale the loss.
# - **Look at the input pipeline where it shares the hardware**: on a CPU it takes cores from the
#   step; keep it cheap (shuffle indices, gather whole batches).

# %% [markdown]
# ## Summary
#
# - On one device the same model trains at very different speeds with the same accuracy: many steps
#   per call and XLA remove the work around the arithmetic, and a `lax.scan` epoch removes the host's
#   work between steps; the ladder gives each rung's speed against the guide's `fit`, and the scan
#   taken apart measures what dispatching each step from Python costs.
# - One step's time splits into forward, backward (1.25 times the forward FLOPs here), optimizer
#   update and the host's overhead per call, measured as differences of nested programs so that they
#   add up to the step; a profiler's trace shows the same step op by op. The update is memory-bound
#   and made of many small ops, which XLA fuses.
# - A roofline from the nominal peak and main memory's bandwidth bounds the step; the products' rates
#   measured at their shapes give an estimate, which a fused step can beat; MFU is against the
#   nominal peak, and a share of the measured peak is named as such. Every rate is a median with its
#   spread.
# - `mixed_bfloat16` keeps float32's range and needs no loss scaling; `mixed_float16` (GPUs) needs
#   it (`LossScaleOptimizer`, `optimizer.scale_loss`). Gradients stay float32. A bfloat16 gain needs
#   a kernel that uses the CPU's bfloat16 instructions.
# - On GPUs the reasons carry over, the numbers do not; `fit()` cannot be XLA-compiled under a
#   multi-replica strategy (Keras leaves it off), and
#   faster compute leaves the all-reduce as the limit of scaling (lesson 3's model).

# %% [markdown]
# ## Exercises
#
# 1. Train the loop + XLA rung in float32 and in `mixed_bfloat16` at a global batch of 1024. Does
#    bfloat16 pay now? What MFU does each reach, and what share of the rate its own kernel reaches?
#
# <details><summary>Hint</summary>
#
# `speed_ladder.measure` takes a `batch_size`. The MFU is samples/s times `flops["total"]` over the
# nominal peak of the dtype the products run in: `nominal_flops_per_s("bfloat16")` for the bfloat16
# run, not `nominal`, which is float32's. The share of the measured rate divides by the rate of the
# kernel the run uses (XLA's, in that dtype: `gemm_flops_per_s(..., dtype="bfloat16", jit_compile=True)`).
# Adam at batch 1024 needs more epochs for the same accuracy.
# </details>
#
# <details><summary>Solution</summary>
#
# ```python
# for precision, dtype in (("float32", "float32"), ("mixed_bfloat16", "bfloat16")):
#     run = speed_ladder.measure("kerasdist loop + XLA", DATA_SOURCE, EPOCHS, data=data, precision=precision,
#                                batch_size=1024)
#     rate = speed_ladder.steady_samples_per_s(run)
#     useful = rate * flops["total"]  # FLOP/s
#     kernel = gemm_flops_per_s(1024, 1024, 1024, dtype=dtype, jit_compile=True).median  # XLA's, this dtype
#     print(precision, f"{rate:,.0f} samples/s", f"MFU {useful / nominal_flops_per_s(dtype).flops_per_s:.0%}",
#           f"share of XLA's measured {dtype} rate {useful / kernel:.0%}", round(run["test_accuracy"], 3))
# ```
# Each product is 16 times larger while the overhead and the update per step stay the same, so both
# reach a larger MFU. Each is against its own dtype's peak: against float32's, a bfloat16 run would
# read several times too high on a CPU with fast bfloat16 instructions. Whether bfloat16 pays is
# answered by the samples/s; bfloat16 gains where XLA's kernel uses the CPU's bfloat16 instructions.
# </details>
#
# 2. Time the whole step at 1, 5 and 50 steps per call. From how many steps per call on does the
#    host's overhead stop mattering?
#
# <details><summary>Hint</summary>
#
# `steps_per_call(whole_step)` runs as many steps as batches you pass it: slice `x_steps[:k]`.
# </details>
#
# <details><summary>Solution</summary>
#
# ```python
# run = steps_per_call(whole_step)
# for k in (1, 5, 50):
#     timing = time_calls(run, x_steps[:k], y_steps[:k])
#     print(k, f"{timing.median / k * 1e3:.3f} ms per step")
# ```
# The time per step falls quickly from 1 to 5 steps per call and less after: the overhead is paid per
# call, so at 5 steps per call each step carries a fifth of one call's overhead, at 50 a fiftieth. (The call with one step is a
# one-iteration `tf.function` loop, not the Python loop of the guide's `fit`.)
# </details>
#
# 3. Measure a wider MLP (784-1024-1024-10): its FLOPs per sample, its kernels' arithmetic intensity,
#    and its MFU with `fit(steps_per_execution=50, jit_compile=True)` for two epochs.
#
# <details><summary>Hint</summary>
#
# Build it with `keras.Sequential` and `keras.Input(shape=(784,))`; `kerasdist.training_flops_per_sample`
# and `step_kernels` read the kernels' shapes of any model made of Dense layers; time the epochs
# with `speed_ladder.TrainingTimer()`, a Keras callback that records each epoch's training seconds.
# </details>
#
# <details><summary>Solution</summary>
#
# ```python
# wide = keras.Sequential([keras.Input(shape=(784,)), keras.layers.Dense(1024, activation="relu"),
#                          keras.layers.Dense(1024, activation="relu"), keras.layers.Dense(10)])
# wide.compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), optimizer="adam",
#              steps_per_execution=STEPS_PER_CALL, jit_compile=True)
# wide_flops = kerasdist.training_flops_per_sample(wide)["total"]
# print([round(k["flops"] / k["bytes"], 1) for k in step_kernels(wide, BATCH_SIZE)])
# timer = speed_ladder.TrainingTimer()
# wide.fit(data.x_train, data.y_train, batch_size=BATCH_SIZE, epochs=2, callbacks=[timer], verbose=0)
# rate = len(data.y_train) / timer.seconds[-1]
# print(f"{wide_flops:,} FLOPs per sample, MFU {rate * wide_flops / nominal.flops_per_s:.0%}")
# ```
# Its products are larger and more intense, and they dominate its step, so it reaches a larger MFU
# than the MLP at the same batch.
# </details>
#
# Next: back to the [course map](../README.md), or lesson 3's
# [cost model](03_convergence.ipynb) with your own GPU's numbers.
