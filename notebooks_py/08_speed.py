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
# - how much faster the same model trains when the steps run many to a call (`steps_per_execution`,
#   kerasdist's loop engine) and compiled by XLA (`jit_compile=True`), measured side by side on one
#   device, with the accuracy each setting reaches after the same epochs;
# - what mixed precision is: `mixed_bfloat16` on a CPU with bfloat16 instructions, and
#   `mixed_float16` on GPUs with its loss scaling (`LossScaleOptimizer`);
# - where the time of one step goes: input pipeline, forward pass, backward pass, optimizer update
#   and the host's overhead per call, each measured alone;
# - the machine's limit: the model's FLOPs per sample from its layer shapes against the CPU's measured
#   matmul throughput, and each setting's share of it;
# - what of this carries over to GPUs, with lesson 3's cost model.
#
# **What you need**: lessons 1 and 3, the project's virtualenv as the kernel, Debian's
# `dataset-fashion-mnist` package (set-up installs it as root; without it Keras downloads the files),
# and about 2-3 minutes on a 2-core CPU. Unlike the other lessons this one always trains on
# **Fashion-MNIST**: 70,000 real 28x28 photos of clothing in 10 classes (Zalando), in MNIST's format,
# a full-size data set that needs no network here.
#
# **R users**: the same lesson written with keras3 is [08_speed_R.ipynb](08_speed_R.ipynb).

# %% [markdown]
# ## Introduction
#
# On this course's 2-core CPU, replicas share the cores, so lessons 3 and 4 honestly showed them
# *slower* than one device. Yet the same model can train several times faster on that one device,
# with no change to the model or to the data: the speed is lost in how the steps are run, not in the
# arithmetic. A step of the MNIST MLP on a batch of 64 is some tens of millions of floating-point
# operations, a fraction of a millisecond of matrix multiplication; everything around it (Python calling a
# TensorFlow function, one kernel launched per op, memory traffic between ops) can cost more than the
# arithmetic itself.
#
# This lesson measures that, step by step, on a data set of full size: first the settings side by
# side, then the parts of one step, then the machine's limit, so that every speed-up has a reason.

# %% [markdown]
# ## Setup

# %%
# Import kerasdist first (it keeps TensorFlow's start-up lines quiet), then the libraries this lesson uses.
import os
import time
import warnings

import kerasdist
import keras
import matplotlib.pyplot as plt
import numpy as np
import tensorflow as tf
from kerasdist import data as data_module
from kerasdist import model as model_module
from kerasdist import plots

# %%
# NBVAL_CHECK_OUTPUT
# Settings, and the data: Fashion-MNIST through Keras' own loader, split like full MNIST
# (KERASDIST_SPEED_DATA can name another source: the test suite runs the lesson on a small stand-in).
DATA_SOURCE = os.environ.get("KERASDIST_SPEED_DATA", "fashion")
EPOCHS = 3            # every setting trains this many epochs; the first one includes tracing
BATCH_SIZE = 64
STEPS_PER_CALL = 50   # steps_per_execution of fit, and of kerasdist's loop engine
SEED = 0
data = kerasdist.load_mnist(DATA_SOURCE, seed=SEED)
print("classes:", ", ".join(data_module.FASHION_CLASSES))

# %% [markdown]
# ## The settings side by side
#
# Five ways to train the same MLP (784-256-256-10, Adam 1e-3, batch 64) on the same data, each for
# the same number of epochs on one device:
#
# | setting | what changes |
# |---|---|
# | Keras `fit`, as TensorFlow's distributed-training guide writes it | one `tf.function` call per step |
# | `fit(steps_per_execution=50)` | 50 steps per call: the host's overhead is paid once per 50 steps |
# | `fit(steps_per_execution=50, jit_compile=True)` | and each step is compiled by XLA, which fuses ops |
# | kerasdist's loop engine | its own `tf.function` running 50 steps per call (lesson 5 needs it for multi-worker) |
# | loop engine + XLA | the whole step, gradients and Adam update, compiled by XLA |
#
# A setting's speed is its **steady state**: the samples/s of its fastest epoch after the first (the
# first pays for tracing and compiling). Keras' `jit_compile` defaults to `"auto"`, which Keras turns
# off on a machine without a GPU (`_resolve_auto_jit_compile` in `keras/src/trainers/trainer.py`):
# the printout below shows what it chose here.

# %%
# Keras fit of the guide's model, timed per epoch; the same seed for every setting.
class EpochTimer(keras.callbacks.Callback):
    """Seconds of each epoch of fit()."""

    def on_train_begin(self, logs=None):
        self.seconds = []

    def on_epoch_begin(self, epoch, logs=None):
        self.started = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        self.seconds.append(time.perf_counter() - self.started)


def train_with_fit(**compile_options):
    """Train the guide's Sequential MLP with fit; return (steady samples/s, test accuracy, the model)."""
    keras.utils.set_random_seed(SEED)
    model = keras.Sequential([
        keras.Input(shape=(784,)),
        keras.layers.Dense(256, activation="relu"),
        keras.layers.Dense(256, activation="relu"),
        keras.layers.Dense(10),
    ])
    model.compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  optimizer=keras.optimizers.Adam(), metrics=["accuracy"], **compile_options)
    train = tf.data.Dataset.from_tensor_slices((data.x_train, data.y_train)).cache().shuffle(10_000)
    timer = EpochTimer()
    with warnings.catch_warnings():  # Keras warns that fit's shuffle=True does not apply to a tf.data.Dataset
        warnings.filterwarnings("ignore", message="`shuffle=True` was passed")
        model.fit(train.batch(BATCH_SIZE), epochs=EPOCHS, callbacks=[timer], verbose=0)
    _, accuracy = model.evaluate(data.x_test, data.y_test, batch_size=1024, verbose=0)
    return len(data.y_train) / min(timer.seconds[1:]), accuracy, model


def train_with_kerasdist(jit_compile, precision="float32"):
    """kerasdist's loop engine under a dtype policy; return (steady samples/s, test accuracy)."""
    keras.mixed_precision.set_global_policy(precision)
    try:
        result = kerasdist.run_training(replicas=1, epochs=EPOCHS, global_batch_size=BATCH_SIZE, data=data,
                                        seed=SEED, engine="loop", steps_per_execution=STEPS_PER_CALL,
                                        jit_compile=jit_compile, verbose=0)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    return max(result.history["samples_per_s"][1:]), result.test["accuracy"]


speed, accuracy = {}, {}
speed["fit (guide)"], accuracy["fit (guide)"], seed_model = train_with_fit()
print(f"the guide's fit chose jit_compile={seed_model.jit_compile} on this machine")
speed["fit, 50 steps/call"], accuracy["fit, 50 steps/call"], _ = train_with_fit(
    steps_per_execution=STEPS_PER_CALL)
speed["fit, 50 steps/call, XLA"], accuracy["fit, 50 steps/call, XLA"], _ = train_with_fit(
    steps_per_execution=STEPS_PER_CALL, jit_compile=True)
speed["loop"], accuracy["loop"] = train_with_kerasdist(jit_compile=False)
speed["loop + XLA"], accuracy["loop + XLA"] = train_with_kerasdist(jit_compile=True)
for name in speed:
    print(f"{name:26s} {speed[name]:8,.0f} samples/s  {speed[name] / speed['fit (guide)']:4.1f}x the guide's  "
          f"test accuracy {accuracy[name]:.3f}")

# %% [markdown]
# **Predict, then run.** Which setting is fastest, and by how much does it beat the guide's `fit`?
# Does any setting buy its speed with a worse model after the same 3 epochs? Decide from the table
# above, then run the check. (Its margin is loose on purpose: on an idle machine loop + XLA runs
# about three times as fast, but other programs on a shared machine slow some settings down more
# than others.)

# %%
# Check: every setting reaches about the same accuracy (the speed-up is printed, not asserted: it varies
# with what else the machine runs).
ratio = speed["loop + XLA"] / speed["fit (guide)"]
assert max(accuracy.values()) - min(accuracy.values()) < 0.03, accuracy
print(f"loop + XLA: {ratio:.1f}x the guide's fit; test accuracies within "
      f"{max(accuracy.values()) - min(accuracy.values()):.3f} of each other")

# %% [markdown]
# Many steps per call and XLA each remove work around the arithmetic, and they remove most together;
# on a busy machine a single setting can still come out slower than it should (another program took
# the cores during its epochs), which is why the check above only compares loop + XLA with the guide's
# `fit`, with a margin. The loop engine also validates after every epoch and logs each step's loss,
# which the guide's `fit` does not; its speed includes that. The accuracies differ only by the randomness of initial weights and data order:
# none of these settings changes what is computed, only how it is scheduled.

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
# | type | exponent bits | mantissa bits | smallest normal number | where it is fast |
# |---|---|---|---|---|
# | bfloat16 | 8 (as float32) | 7 | ~1e-38 | CPUs with AVX512_BF16/AMX, TPUs, recent GPUs |
# | float16 | 5 | 10 | ~6e-5 | GPUs (tensor cores) |
#
# bfloat16 keeps float32's range, so small gradients survive and `mixed_bfloat16` needs nothing else.
# float16 does not: gradients below its range become zero. That is why `mixed_float16` needs **loss
# scaling**: multiply the loss by a large factor before the backward pass (so the gradients are large
# enough for float16), then divide the gradients by it before the update; when a gradient overflows to
# inf, skip that step and lower the factor. Keras' `compile()` wraps the optimizer in a
# `LossScaleOptimizer` that does this whenever the model's policy is `mixed_float16` (see
# `Trainer.compile` in `keras/src/trainers/trainer.py`); a custom loop must do it itself
# (`optimizer.scale_loss(loss)` before the gradients, and a `LossScaleOptimizer` to unscale them).
# The cell below shows all of that on this machine.

# %%
# Which bfloat16 instructions this CPU has; what float16 and bfloat16 make of a small gradient; what
# compile() does to the optimizer under mixed_float16 (building a model needs no GPU).
bf16_instructions = kerasdist.cpu_bfloat16_instructions()
if bf16_instructions:
    print("this CPU has bfloat16 instructions:", ", ".join(bf16_instructions))
else:
    print("this CPU lacks bfloat16 instructions (no avx512_bf16 or amx_bf16): TensorFlow emulates "
          "bfloat16 with float32 and it is slower, not faster")
small_gradient = 1e-6 / BATCH_SIZE
for dtype in ("float16", "bfloat16"):
    print(f"a gradient of {small_gradient:.2e} in {dtype}: {float(tf.cast(small_gradient, dtype)):.2e}")
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
# Now the two loop settings again, under `mixed_bfloat16`, in the same run as the others:

# %%
# kerasdist's loop, without and with XLA, under mixed_bfloat16.
speed["loop, bfloat16"], accuracy["loop, bfloat16"] = train_with_kerasdist(False, "mixed_bfloat16")
speed["loop + XLA, bfloat16"], accuracy["loop + XLA, bfloat16"] = train_with_kerasdist(True, "mixed_bfloat16")
for name in ("loop", "loop, bfloat16", "loop + XLA", "loop + XLA, bfloat16"):
    print(f"{name:22s} {speed[name]:8,.0f} samples/s  test accuracy {accuracy[name]:.3f}")

# %%
# Every setting's steady-state speed, with its test accuracy after the same epochs.
os.makedirs("results/figures", exist_ok=True)  # beside the checkpoints, outside version control
figure, axis = plt.subplots(figsize=(9, 3.8))
names = list(speed)
bars = axis.barh(names[::-1], [speed[name] for name in names[::-1]],
                 color=["tab:purple" if "bfloat16" in name else "tab:blue" for name in names[::-1]])
axis.bar_label(bars, [f"{speed[name]:,.0f}/s, acc {accuracy[name]:.3f}" for name in names[::-1]],
               fontsize=8, padding=3)
axis.set_xlim(0, 1.45 * max(speed.values()))
axis.set(xlabel="samples/s in the steady state (one device, batch 64)",
         title=f"Fashion-MNIST MLP, {EPOCHS} epochs per setting, measured in one run")
figure.tight_layout()
figure.savefig("results/figures/08_settings.png", dpi=100, bbox_inches="tight")
plt.show()

# %% [markdown]
# At batch 64 bfloat16 gains little here, or even loses, although the CPU multiplies bfloat16 matrices
# several times faster than float32 ones (measured below): the matrices of one step are small, and
# the time goes elsewhere. Casting between float32 and bfloat16 adds work of its own. The next
# section finds where.

# %% [markdown]
# ## Where a step's time goes
#
# Each part of one step is timed alone, on batches already in memory, in a `tf.function` that runs
# `STEPS_PER_CALL` steps per call (so Python's overhead is paid once per 50 steps):
#
# - **forward**: the model's logits and loss;
# - **forward + backward**: and the gradients of all weights;
# - **whole step**: and Adam's update of the weights;
# - the same whole step at **one step per call**, as the guide's `fit` runs it: the difference is the
#   host's overhead per call (Python, `tf.function` dispatch, one executor run);
# - the same whole step compiled by **XLA**;
# - the **input pipeline** alone: kerasdist's `tf.data` pipeline (cache, shuffle, batch, prefetch),
#   drained without training. With prefetching it runs beside training, so it adds to a step only
#   when it is slower than the step.
#
# Each time is the best of ten calls after a warm-up call: on a shared machine, the call least
# slowed down by other programs.

# %%
# Time each part of a step alone, per step, in milliseconds.
def best_seconds(function, *arguments, rounds=10):
    """Best wall time of ``rounds`` calls after one warm-up call."""
    function(*arguments)
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        function(*arguments)
        times.append(time.perf_counter() - started)
    return min(times)


keras.utils.set_random_seed(SEED)
mlp = model_module.build_model()
loss_function, optimizer = mlp.loss, mlp.optimizer
timed = np.arange(STEPS_PER_CALL * BATCH_SIZE) % len(data.y_train)  # the first 50 batches' samples
x_steps = tf.constant(data.x_train[timed].reshape(STEPS_PER_CALL, BATCH_SIZE, -1))
y_steps = tf.constant(data.y_train[timed].reshape(STEPS_PER_CALL, BATCH_SIZE))


def forward(x, y):
    return loss_function(y, mlp(x, training=True))


def forward_backward(x, y):
    with tf.GradientTape() as tape:
        loss = forward(x, y)
    gradients = tape.gradient(loss, mlp.trainable_variables)
    # Return a number made of every gradient: TensorFlow prunes computations that no output uses.
    return loss + tf.add_n([tf.reduce_sum(g[:1]) for g in gradients])


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


def python_loop_of_steps(xs, ys):
    for i in range(STEPS_PER_CALL):
        one_step_per_call(xs[i], ys[i])


pipeline = data_module.train_dataset(data.x_train, data.y_train, BATCH_SIZE, SEED, 0, 1)
batches_per_epoch = len(data.y_train) // BATCH_SIZE
drain = tf.function(lambda: pipeline.reduce(tf.constant(0.0), lambda total, batch: total + batch[0][0, 0]))

milliseconds = {  # per step
    "input pipeline": best_seconds(drain) / batches_per_epoch * 1e3,
    "forward": best_seconds(steps_per_call(forward), x_steps, y_steps) / STEPS_PER_CALL * 1e3,
    "forward + backward": best_seconds(steps_per_call(forward_backward), x_steps, y_steps) / STEPS_PER_CALL * 1e3,
    "whole step": best_seconds(steps_per_call(whole_step), x_steps, y_steps) / STEPS_PER_CALL * 1e3,
    "whole step, 1 per call": best_seconds(python_loop_of_steps, x_steps, y_steps) / STEPS_PER_CALL * 1e3,
    "whole step, XLA": best_seconds(steps_per_call(whole_step, jit_compile=True), x_steps,
                                    y_steps) / STEPS_PER_CALL * 1e3,
}
parts = {
    "forward": milliseconds["forward"],
    "backward": milliseconds["forward + backward"] - milliseconds["forward"],
    "optimizer update": milliseconds["whole step"] - milliseconds["forward + backward"],
    "host overhead per call": milliseconds["whole step, 1 per call"] - milliseconds["whole step"],
}
for name, value in milliseconds.items():
    print(f"{name:24s} {value:6.3f} ms per step")
print("one step at 1 step per call: " + ", ".join(
    f"{name} {value / milliseconds['whole step, 1 per call']:.0%}" for name, value in parts.items()))

# %% [markdown]
# **Predict, then run.** Is the host's overhead per call a small or a large part of a step run one
# per call? Is the input pipeline slower than a training step (so that training would wait for it)?
# Decide from the numbers above, then run the check.

# %%
# Check: one step per call costs clearly more than 50 per call, and the input pipeline keeps up.
assert milliseconds["whole step, 1 per call"] > 1.2 * milliseconds["whole step"], milliseconds
assert milliseconds["input pipeline"] < milliseconds["whole step"], milliseconds
print(f"1 step per call: {milliseconds['whole step, 1 per call'] / milliseconds['whole step']:.1f}x the time of "
      f"50 per call; the input pipeline needs {milliseconds['input pipeline'] / milliseconds['whole step']:.0%} "
      "of a step")

# %%
# Draw one step's time, part by part, beside the whole step compiled by XLA and the input pipeline.
flops = kerasdist.training_flops_per_sample(mlp)
matmul_float32 = kerasdist.matmul_flops_per_s("float32")
matmul_bfloat16 = kerasdist.matmul_flops_per_s("bfloat16")
limit_ms = BATCH_SIZE * flops["total"] / matmul_float32 * 1e3
figure, axis = plt.subplots(figsize=(11, 3.4))
left = 0.0
for (name, value), color in zip(parts.items(), ("tab:blue", "tab:cyan", "tab:orange", "tab:red")):
    axis.barh("1 step per call", value, left=left, color=color, label=name)
    left += value
axis.barh("50 steps per call", milliseconds["whole step"], color="tab:gray", label="whole step, 50 per call")
axis.barh("50 steps per call, XLA", milliseconds["whole step, XLA"], color="tab:green", label="whole step, XLA")
axis.barh("input pipeline alone", milliseconds["input pipeline"], color="tab:olive", label="input pipeline")
axis.axvline(limit_ms, color="black", linestyle="--", label=f"float32 matmul limit ({limit_ms:.2f} ms)")
axis.set(xlabel="milliseconds per step of 64 samples (measured alone)", title="Where one training step's time goes")
axis.set_xlim(0, 1.05 * left)
axis.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
figure.tight_layout()
figure.savefig("results/figures/08_step_time.png", dpi=100, bbox_inches="tight")
plt.show()

# %% [markdown]
# Read the bars from the bottom. At one step per call, a large share of each step is the host's work
# around it, which `steps_per_execution` and the loop engine pay once per 50 steps. The rest splits
# between the forward pass, the backward pass (about twice the forward pass's FLOPs: two products per
# layer, one for the weights' gradients and one for the inputs') and Adam's update, which Keras
# applies variable by variable as dozens of small element-wise ops, each a kernel for TensorFlow's
# executor to schedule. On a shared machine these shares move from run to run (other programs take
# the cores at random moments): read them as rough. XLA fuses the update's ops, and the bias and ReLU
# ops, into few kernels; the XLA bar shows what that saves. The dashed line is
# the time the step's matrix products would take at the CPU's full matmul speed: the gap between it
# and the bars is the subject of the next section.

# %% [markdown]
# ## The machine's limit
#
# A Dense layer with an `n_in x n_out` kernel multiplies each sample by its kernel: `2 n_in n_out`
# FLOPs (a multiply and an add per weight). Training adds the backward pass: as much again for the
# kernel's gradient, and as much again for the gradient of the layer's input, which the first layer
# does not need. Biases, activations, the loss and the optimizer's update add under 5% for this MLP
# and are left out. The CPU's throughput is measured on a large matrix product (1024 x 1024, twenty
# in a chain, in one `tf.function`, best of ten rounds), in float32 and in bfloat16, with the same op
# on the same cores: that is as fast as this machine multiplies matrices. Dividing the two gives the most samples per second
# any training loop could reach; each setting's share of it says how much is left on the table.

# %%
# NBVAL_CHECK_OUTPUT
# FLOPs per sample, layer by layer, from the kernels' shapes.
kernels = [layer.kernel.shape for layer in mlp.layers if hasattr(layer, "kernel")]
for n_in, n_out in kernels:
    print(f"Dense {n_in:3d} x {n_out:3d}: {2 * n_in * n_out:7,} FLOPs forward per sample")
print(f"training FLOPs per sample: {flops['forward']:,} forward + {flops['backward']:,} backward = "
      f"{flops['total']:,}")

# %%
# The limit in samples/s, and each setting's share of it (bfloat16 settings against the bfloat16 limit).
# The matmuls are timed a second time and the faster kept: other programs slow some rounds down.
matmul_float32 = max(matmul_float32, kerasdist.matmul_flops_per_s("float32"))
matmul_bfloat16 = max(matmul_bfloat16, kerasdist.matmul_flops_per_s("bfloat16"))
limit = {"float32": matmul_float32 / flops["total"], "bfloat16": matmul_bfloat16 / flops["total"]}
print(f"matmul throughput: {matmul_float32 / 1e9:,.0f} GFLOP/s float32, {matmul_bfloat16 / 1e9:,.0f} GFLOP/s "
      f"bfloat16 ({matmul_bfloat16 / matmul_float32:.1f}x)")
print(f"limit: {limit['float32']:,.0f} samples/s float32, {limit['bfloat16']:,.0f} samples/s bfloat16")
share = {name: speed[name] / limit["bfloat16" if "bfloat16" in name else "float32"] for name in speed}
for name in speed:
    print(f"{name:26s} {speed[name]:8,.0f} samples/s = {share[name]:5.1%} of the limit")

# %% [markdown]
# **Predict, then run.** Can any setting exceed 100% of the limit? If one did, what would that say
# about the FLOP count or the measurement? Decide, then run the check. (A share a little above 100%
# can also mean that other programs slowed the matmul measurement more than the training: the check
# allows a quarter for that on a shared machine.)

# %%
# Check: no setting beats the machine's limit, and the fastest uses more of it than the guide's fit.
assert all(value < 1.25 for value in share.values()), share
assert share["loop + XLA"] > share["fit (guide)"], share
best = max(speed, key=speed.get)
print(f"fastest setting: {best}, {speed[best] / speed['fit (guide)']:.1f}x the guide's fit, {share[best]:.0%} of "
      "its limit")

# %% [markdown]
# The guide's code uses a small part of what the cores can do; the fastest setting a good deal more,
# but still far from all of it. The rest is the work the FLOP count leaves out (the optimizer's update,
# element-wise ops, memory traffic between ops) and the small matrices of a batch of 64, which keep
# two cores' vector units less busy than one large product does. A larger batch moves a step towards
# the limit (exercise 1); bfloat16 raises the limit itself but only pays once the matrix products
# dominate a step.

# %% [markdown]
# ## What carries over to GPUs
#
# No GPU was measured for this course, so this section reasons from the measurements above and from
# lesson 3's **cost model** (assumptions, not measurements).
#
# - **Per-call overhead matters more on a GPU.** Each op is a kernel launch of a few microseconds,
#   and a step of this MLP on a GPU is short; `steps_per_execution` and XLA's fusion (fewer, larger
#   kernels) carry over and usually gain more there. Keras already turns `jit_compile="auto"` on
#   when a GPU is present, so the guide's code is compiled by XLA on a GPU machine.
# - **Mixed precision changes types.** GPUs' tensor cores run float16 and (recent ones) bfloat16;
#   use `mixed_float16` with loss scaling (Keras' `fit` adds it), or `mixed_bfloat16` where
#   supported. The measured CPU ratio of bfloat16 to float32 matmul says nothing about a GPU's.
# - **Gradients stay float32.** Under a mixed policy the weights are float32, so their gradients are
#   too: the all-reduce between replicas moves as many bytes as before (checked below).
# - **Compute shrinks, communication does not.** In lesson 3's model a step on N devices takes
#   `compute / N + all-reduce(N) + input`. Anything that makes compute faster (XLA, mixed precision,
#   a better GPU) leaves the all-reduce as it is, so the speed-up from more devices drops.

# %%
# NBVAL_CHECK_OUTPUT
# Gradient bytes under mixed_bfloat16, and lesson 3's cost model with its assumed parameters: the
# speed-up of 8 devices over 1 when one device's compute takes the assumed time, and half of it.
keras.mixed_precision.set_global_policy("mixed_bfloat16")
try:
    bfloat16_mlp = model_module.build_model()
    with tf.GradientTape() as tape:
        bfloat16_loss = bfloat16_mlp.loss(y_steps[0], bfloat16_mlp(x_steps[0], training=True))
    gradient_dtypes = {g.dtype.name for g in tape.gradient(bfloat16_loss, bfloat16_mlp.trainable_variables)}
finally:
    keras.mixed_precision.set_global_policy("float32")
gradient_bytes = 4 * mlp.count_params()
print(f"gradients under mixed_bfloat16: {sorted(gradient_dtypes)}, {gradient_bytes / 1e6:.2f} MB per step")
MODEL_COMPUTE_S = 1e-3             # lesson 3's assumptions: one global batch of 4096 on one GPU,
MODEL_BANDWIDTH_BYTES_PER_S = 10e9  # a PCIe-class link,
MODEL_LATENCY_S = 10e-6            # latency per hop of the ring,
MODEL_INPUT_S = 0.1e-3             # input time not hidden by prefetching
for compute_s in (MODEL_COMPUTE_S, MODEL_COMPUTE_S / 2):
    one, eight = (sum(plots.step_time_model(n, compute_s, gradient_bytes, MODEL_BANDWIDTH_BYTES_PER_S,
                                            MODEL_LATENCY_S, MODEL_INPUT_S)) for n in (1, 8))
    print(f"model, compute {compute_s * 1e3:.1f} ms per step: 8 devices {one / eight:.1f}x as fast as 1")

# %% [markdown]
# In the model, halving the compute (say, by mixed precision) makes one device twice as fast but
# lowers what 8 devices add on top. What does carry over from this CPU are the *reasons*: overhead per
# call, unfused small ops and a FLOP limit that a small batch does not reach. The *numbers* do not:
# measure them on your own GPUs, with the same side-by-side method, before you trust any ratio.

# %% [markdown]
# ## Performance tips
#
# - **Measure the steady state, side by side, in one run**: skip the first epoch (tracing), and
#   compare ratios, not absolute speeds from different runs or machines.
# - **Run many steps per call** (`steps_per_execution` in `fit`, or a loop in one `tf.function`), then
#   try XLA (`jit_compile=True`); check the accuracy after the same epochs each time.
# - **Compute the limit**: FLOPs per sample from the layer shapes, divided into the measured matmul
#   throughput; the share of it tells you whether to look at overhead or at arithmetic.
# - **Use mixed precision where the hardware has it** (bfloat16 instructions, tensor cores) and the
#   matrix products dominate; keep the logits and the loss in float32; with float16, scale the loss.
# - **Time the parts alone** before you optimize one: here the input pipeline was never the problem.

# %% [markdown]
# ## Summary
#
# - On one device the same model trained several times faster with many steps per call and XLA,
#   with the same accuracy after the same epochs: the time was lost around the arithmetic, not in it.
# - One step's time splits into forward, backward, optimizer update and the host's overhead per call;
#   at one step per call the overhead is a large share, and XLA shrinks the rest by fusing ops.
# - The MLP's FLOPs per training sample follow from its layer shapes; the CPU's measured matmul
#   throughput turns them into a limit in samples/s, and even the fastest setting reaches only part of
#   it at batch 64.
# - `mixed_bfloat16` keeps float32's range and needs no loss scaling; `mixed_float16` (GPUs) needs
#   it, and Keras' `compile()` adds a `LossScaleOptimizer` for it. Gradients stay float32.
# - On GPUs the reasons carry over, the numbers do not; faster compute leaves the all-reduce as the
#   limit of scaling (lesson 3's model).

# %% [markdown]
# ## Exercises
#
# 1. Train the loop + XLA setting in float32 and in `mixed_bfloat16` at a global batch of 1024
#    (`BATCH_SIZE = 1024`, then rerun the settings cells). Does bfloat16 pay now? What share of the
#    limit does each reach?
#
# <details><summary>Hint</summary>
#
# A batch of 1024 makes each matrix product 16 times larger, while the overhead per step stays the
# same; compare `share` before and after. Adam at batch 1024 needs more epochs for the same accuracy.
# </details>
#
# <details><summary>Solution</summary>
#
# ```python
# BATCH_SIZE = 1024
# for precision in ("float32", "mixed_bfloat16"):
#     rate, acc = train_with_kerasdist(True, precision)
#     limit_of = limit["bfloat16" if precision != "float32" else "float32"]
#     print(precision, f"{rate:,.0f} samples/s", f"{rate / limit_of:.0%} of its limit", round(acc, 3))
# ```
# Both run closer to their limits than at batch 64, and bfloat16 gains more once the products
# dominate; the accuracy after 3 epochs drops a little at this batch for both.
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
#     print(k, f"{best_seconds(run, x_steps[:k], y_steps[:k]) / k * 1e3:.3f} ms per step")
# ```
# The time per step falls quickly from 1 to 5 steps per call and little after: the overhead is paid
# per call, so 5 calls' worth spread over 50 steps is already small.
# </details>
#
# 3. Compute the FLOPs per sample of a wider MLP (784-1024-1024-10) with
#    `kerasdist.training_flops_per_sample`, and predict its limit in samples/s on this CPU.
#
# <details><summary>Hint</summary>
#
# Build it with `keras.Sequential` and `keras.Input(shape=(784,))`; the function reads the kernels'
# shapes of any model made of Dense layers.
# </details>
#
# <details><summary>Solution</summary>
#
# ```python
# wide = keras.Sequential([keras.Input(shape=(784,)), keras.layers.Dense(1024, activation="relu"),
#                          keras.layers.Dense(1024, activation="relu"), keras.layers.Dense(10)])
# wide_flops = kerasdist.training_flops_per_sample(wide)["total"]
# print(f"{wide_flops:,} FLOPs per sample, limit {matmul_float32 / wide_flops:,.0f} samples/s")
# ```
# Several times the MLP's FLOPs, so a limit as many times lower; its larger products usually reach a
# larger share of it.
# </details>
#
# Next: back to the [course map](../README.md), or lesson 3's
# [cost model](03_convergence.ipynb) with your own GPU's numbers.
