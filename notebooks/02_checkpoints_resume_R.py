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
# # Checkpoints and resume: surviving an interrupted run (R, keras3)
#
# This is the R twin of [02_checkpoints_resume.ipynb](02_checkpoints_resume.ipynb): the same
# workflow and the same sections, written with the R packages keras3, tfdatasets and tensorflow. The
# notebook runs on a Python kernel; the R code lives in `%%R` cells (rpy2), and R draws the figures
# too (`%%R -w -h` sets a figure's size in inches).
#
# **What you'll learn**
#
# - how to interrupt training on purpose: a keras3 callback that fails, and a training process
#   killed with `SIGKILL`;
# - how to resume so that the epoch numbering continues and the metrics log stays one curve;
# - why "the newest file by ctime" is the wrong way to find the latest checkpoint;
# - mid-epoch backups: kerasdist resumes at the next batch, `callback_backup_and_restore()` replays
#   the whole epoch.
#
# **What you need**: lesson 1, R with keras3, tfdatasets and tensorflow
# (`install.packages(c("keras3", "tfdatasets"))`), rpy2 in the kernel's Python environment, and
# about a minute and a half on a 2-core CPU. The lesson writes into `results/02_checkpoints_R/` next
# to this notebook and empties that folder first. The data is full MNIST when Keras has it cached or
# can download it, otherwise a 5,000-digit sample of real MNIST digits (offline). The stored outputs
# come from a run on that sample; `bash scripts/run_notebooks.sh --r-twins` runs the notebook again.

# %% [markdown]
# ## Introduction
#
# Long runs get interrupted: a preempted cloud machine, the out-of-memory killer, a lost GPU,
# Ctrl-C. In synchronous training one missing replica stops them all, because every all-reduce waits
# for every replica. So training must be able to stop at any moment and continue later as if nothing
# happened. For that, a checkpoint has to hold the weights **and** the optimizer state, the position
# (which epoch, and which batch inside it, comes next), and enough to rebuild the same data order;
# and the metrics written so far must survive too, so the learning curve stays one curve.
#
# There are two kinds of interruption. An **error** unwinds the stack: `on.exit()` handlers,
# `finally` blocks and callbacks still run. A **kill** (`SIGKILL`, a power cut) runs nothing: only
# what was already completely on disk counts. We try both.

# %% [markdown]
# ## Setup

# %%
# Load the %%R magic, and start TensorFlow quietly through kerasdist.
# %load_ext rpy2.ipython
import kerasdist

# %% language="R"
# # Attach keras3, tfdatasets and tensorflow; settings; an empty folder for this lesson's files.
# library(keras3)
# library(tfdatasets, exclude = "shape")
# library(tensorflow, exclude = c("shape", "set_random_seed"))
# data_source <- Sys.getenv("KERASDIST_DATA", "auto")
# num_replicas <- 2L
# global_batch_size <- 64L
# epochs <- 3L
# run_dir <- file.path("results", "02_checkpoints_R")
# unlink(run_dir, recursive = TRUE)
# dir.create(run_dir, recursive = TRUE)

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # Replicas, strategy and data, as in lesson 1.
# kerasdist <- reticulate::import("kerasdist")
# devices <- kerasdist$configure_replicas(num_replicas)
# strategy <- tf$distribute$MirroredStrategy(devices = as.list(devices))
# cat(sprintf("Number of devices: %d\n", strategy$num_replicas_in_sync))
# data <- kerasdist$load_mnist(data_source)
# x_train <- data$x_train
# y_train <- data$y_train
# steps_per_epoch <- nrow(x_train) %/% global_batch_size
# cat(steps_per_epoch, "steps per epoch\n")

# %% language="R"
# # Input pipelines and the lesson-1 model, built by a function so that we can build it again.
# train_dataset <- list(np_array(x_train, dtype = "float32"), np_array(y_train, dtype = "int32")) |>
#   tensor_slices_dataset() |>
#   dataset_shuffle(buffer_size = nrow(x_train), seed = 0L) |>
#   dataset_batch(global_batch_size, drop_remainder = TRUE) |>
#   dataset_prefetch(tf$data$AUTOTUNE)
# val_dataset <- list(np_array(data$x_val, dtype = "float32"), np_array(data$y_val, dtype = "int32")) |>
#   tensor_slices_dataset() |>
#   dataset_batch(global_batch_size)
#
# build_model <- function() {
#   inputs <- keras_input(shape = 784, name = "digits")
#   logits <- inputs |>
#     layer_dense(units = 256, activation = "relu", name = "dense_1") |>
#     layer_dense(units = 256, activation = "relu", name = "dense_2") |>
#     layer_dense(units = 10, name = "logits")
#   model <- keras_model(inputs, logits, name = "mnist_mlp")
#   model |> compile(
#     optimizer = optimizer_adam(learning_rate = 1e-3),
#     loss = loss_sparse_categorical_crossentropy(from_logits = TRUE),
#     metrics = list(metric_sparse_categorical_accuracy())
#   )
#   model
# }

# %% language="R"
# # A callback that fails at the end of one batch; keras3 passes 1-based epoch and batch numbers.
# callback_crash_at <- Callback(
#   "CrashAt",
#   initialize = function(epoch, batch) {
#     super$initialize()
#     self$crash_epoch <- as.integer(epoch)
#     self$crash_batch <- as.integer(batch)
#     self$current_epoch <- 0L
#   },
#   on_epoch_begin = function(epoch, logs = NULL) {
#     self$current_epoch <- epoch
#     invisible(NULL)
#   },
#   on_train_batch_end = function(batch, logs = NULL) {
#     if (self$current_epoch == self$crash_epoch && batch == self$crash_batch)
#       stop(sprintf("simulated crash in epoch %d, batch %d", self$crash_epoch, self$crash_batch))
#     invisible(NULL)
#   }
# )
# # The error arrives wrapped by Python; keep just our message.
# crash_message <- function(error) regmatches(conditionMessage(error),
#                                             regexpr("simulated crash[^\n]*", conditionMessage(error)))

# %% [markdown]
# ## Interrupt training with a callback that raises
#
# Plain keras3 first. `callback_model_checkpoint()` writes the whole model (weights and optimizer
# state) to `ckpt-01.keras`, `ckpt-02.keras`, ... at the end of every epoch;
# `callback_csv_logger()` appends one line of metrics per epoch. The crash callback calls `stop()`
# in the middle of epoch 2; the error travels through Python's `fit()` and back to R.

# %% language="R"
# # Train towards 3 epochs with per-epoch checkpoints and a CSV log, and crash in epoch 2.
# keras_dir <- file.path(run_dir, "keras")
# dir.create(keras_dir)
# csv_log <- file.path(run_dir, "keras_log.csv")
# keras_callbacks <- function() list(
#   callback_model_checkpoint(file.path(keras_dir, "ckpt-{epoch:02d}.keras")),
#   callback_csv_logger(csv_log, append = TRUE)
# )
# set_random_seed(0)
# with(strategy$scope(), model <- build_model())
# tryCatch(
#   model |> fit(train_dataset, epochs = epochs, validation_data = val_dataset, shuffle = FALSE, verbose = 2,
#                callbacks = c(keras_callbacks(), list(callback_crash_at(epoch = 2, batch = 20)))),
#   error = function(e) cat("Training stopped:", crash_message(e), "\n")
# )

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # What survived: the checkpoint of epoch 1 and one line of metrics.
# print(sort(list.files(keras_dir)))
# print(round(read.csv(csv_log)[, c("epoch", "loss")], 2), row.names = FALSE)

# %% [markdown]
# ## Resume where the checkpoints left off
#
# To resume: find the latest checkpoint **by the epoch number in its name**, load it (inside the
# scope, so the restored variables are mirrored again), and tell `fit()` where to start. keras3
# counts epochs from 1, so `initial_epoch` is the first epoch still to train: epochs done + 1 (the
# Python API counts from 0 and takes the epochs done). Keras then counts on ("Epoch 2/3"), the
# checkpoint callback writes `ckpt-02` and `ckpt-03` instead of overwriting `ckpt-01`, and the CSV
# logger continues the same file. Forgetting `initial_epoch` is the classic mistake: training
# restarts at "Epoch 1", overwrites the early checkpoints and runs more epochs than asked for.

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # Find the latest checkpoint by its epoch number.
# checkpoint_epoch <- function(path) as.integer(sub("^ckpt-([0-9]+)\\.keras$", "\\1", basename(path)))
# checkpoints <- list.files(keras_dir, pattern = "^ckpt-[0-9]+\\.keras$", full.names = TRUE)
# latest <- checkpoints[which.max(checkpoint_epoch(checkpoints))]
# epochs_done <- checkpoint_epoch(latest)
# cat(sprintf("Resuming from %s: %d epoch(s) done, training epochs %d..%d\n",
#             basename(latest), epochs_done, epochs_done + 1L, epochs))

# %% language="R"
# # Restore the model (weights + optimizer state) in the scope and continue the epoch count.
# with(strategy$scope(), model <- load_model(latest))
# history <- model |> fit(train_dataset, initial_epoch = epochs_done + 1L, epochs = epochs,
#                         validation_data = val_dataset, shuffle = FALSE, verbose = 2,
#                         callbacks = keras_callbacks())

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # One checkpoint per epoch, and one CSV row per epoch: the log is continuous.
# print(sort(list.files(keras_dir)))
# keras_log <- read.csv(csv_log)
# cat("epochs in the log:", keras_log$epoch + 1, "\n")

# %% magic_args="-w 9 -h 3.4 --units in -r 100" language="R"
# # Plot the CSV log; the dashed line marks where the run was interrupted and resumed.
# log_epochs <- keras_log$epoch + 1
# par(mfrow = c(1, 2), mar = c(4, 4.5, 2.5, 1), las = 1, cex.main = 1)
# matplot(log_epochs, keras_log[, c("loss", "val_loss")], type = "o", pch = 19, lty = 1,
#         col = c("steelblue", "darkorange"), xaxt = "n", xlab = "epoch", ylab = "loss",
#         main = "Loss (one CSV log across two runs)")
# axis(1, at = log_epochs)
# abline(v = 1.5, col = "gray40", lty = 2)
# legend("topright", c("training", "validation", "crash + resume"), col = c("steelblue", "darkorange", "gray40"),
#        lty = c(1, 1, 2), pch = c(19, 19, NA), bty = "n")
# plot(log_epochs, keras_log$val_sparse_categorical_accuracy, type = "o", pch = 19, col = "darkorange",
#      xaxt = "n", xlab = "epoch", ylab = "accuracy", main = "Validation accuracy")
# axis(1, at = log_epochs)
# abline(v = 1.5, col = "gray40", lty = 2)

# %% [markdown]
# There is a catch: the resumed epoch 2 does not see the data in the order an uninterrupted epoch 2
# would have. `dataset_shuffle()` draws a new order for every pass over the dataset, and a new
# process starts that sequence again. The curve is continuous, but the run is not the same run.
# kerasdist fixes this by making each epoch's order a function of (seed, epoch) only; we use it from
# the command line below.

# %% [markdown]
# ## The ctime trap
#
# A widespread recipe (the original TensorFlow multi-worker guide among them) picks the latest
# checkpoint as the newest file by ctime. A file's *ctime* changes whenever the file is written,
# copied in or restored, and no copy tool can preserve it. Restore `ckpt-01.keras` from a backup,
# sync the folder from another machine, or just copy a file aside and back, and "newest" no longer
# means "latest epoch". Even `file.copy(copy.date = TRUE)`, which keeps the modification time,
# produces a brand-new ctime.

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # Copy the epoch-1 checkpoint aside and back (as a restore from backup would), then pick "the latest" twice.
# old <- file.path(keras_dir, "ckpt-01.keras")
# backup <- file.path(run_dir, "backup.keras")
# invisible(file.copy(old, backup, copy.date = TRUE))
# Sys.sleep(0.05)
# invisible(file.copy(backup, old, overwrite = TRUE, copy.date = TRUE))
# checkpoints <- sort(list.files(keras_dir, pattern = "^ckpt-[0-9]+\\.keras$", full.names = TRUE))
# by_ctime <- checkpoints[which.max(file.info(checkpoints)$ctime)]
# by_epoch <- checkpoints[which.max(checkpoint_epoch(checkpoints))]
# cat("newest by ctime:", basename(by_ctime), "\n")
# cat("latest by epoch:", basename(by_epoch), "\n")

# %% language="R"
# # What each choice would resume from: the ctime pick silently throws away two epochs of training.
# for (choice in list(list("by ctime", by_ctime), list("by epoch", by_epoch))) {
#   with(strategy$scope(), candidate <- load_model(choice[[2]]))
#   scores <- candidate |> evaluate(val_dataset, verbose = 0)
#   cat(sprintf("%s: %s, optimizer step %d, validation accuracy %.3f\n", choice[[1]], basename(choice[[2]]),
#               as.integer(candidate$optimizer$iterations$numpy()), scores$sparse_categorical_accuracy))
# }

# %% [markdown]
# Pick the latest checkpoint **by meaning**: parse the epoch from the name, as above (the keras3
# distributed-training vignette does this), or better, store the position inside the checkpoint.
# kerasdist numbers its checkpoints by global step, stores epoch and batch in the checkpoint itself,
# lets TensorFlow update its `checkpoint` index file atomically after the data files are complete,
# and skips a checkpoint that fails to load.

# %% [markdown]
# ## Kill a training process with SIGKILL
#
# An error is a polite failure. Now the real thing: the kerasdist command line trains in a child
# process, with a checkpoint at every epoch end and every 20 steps (`--save-every-steps 20`).
# kerasdist names checkpoints by global step, so epoch 1 ends with `ckpt-52` and the first
# checkpoint inside epoch 2 is `ckpt-72`. A few steps after that one we send `SIGKILL` with
# `tools::pskill()`: no callback, no `finally`, no flush runs. We watch the child through the files
# it writes: TensorFlow's checkpoint index and kerasdist's metrics log (`metrics.jsonl`, one JSON
# line per logged step).

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # The command: train towards 2 epochs, checkpointing every epoch and every 20 steps.
# cli_dir <- file.path(run_dir, "kerasdist")
# cli_epochs <- 2L
# save_every_steps <- 20L
# python <- reticulate::py_exe()
# cli_args <- c("-m", "kerasdist", "train", "--replicas", num_replicas, "--epochs", cli_epochs,
#               "--global-batch-size", global_batch_size, "--data", data_source,
#               "--checkpoint-dir", cli_dir, "--save-every-steps", save_every_steps)
# cat("python", cli_args, "\n")

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # Start it, and kill it 4 steps after the first checkpoint inside epoch 2 (global step 72).
# kill_after_step <- steps_per_epoch + save_every_steps + 4L
# metrics_file <- file.path(cli_dir, "metrics.jsonl")
# json <- reticulate::import("json")
# metrics_records <- function() {
#   lines <- if (file.exists(metrics_file)) readLines(metrics_file, warn = FALSE) else character()
#   lapply(grep("\\}$", lines, value = TRUE), json$loads)  # complete lines only
# }
# last_logged_step <- function() {
#   records <- metrics_records()
#   if (length(records)) records[[length(records)]]$global_step else 0L
# }
# pid_file <- file.path(run_dir, "killed_run.pid")
# log_file <- file.path(run_dir, "killed_run.log")
# # The shell writes its process id, then `exec` replaces it by Python under the same id.
# shell_command <- sprintf("echo $$ > %s; exec %s %s > %s 2>&1", shQuote(pid_file), shQuote(python),
#                          paste(shQuote(cli_args), collapse = " "), shQuote(log_file))
# system2("sh", c("-c", shQuote(shell_command)), wait = FALSE)
# # Every wait is bounded: a child that never starts, trains or dies must not hang the notebook.
# wait_for <- function(done, seconds, what) {
#   deadline <- Sys.time() + seconds
#   while (!done()) {
#     if (Sys.time() > deadline) stop("timed out waiting for ", what, "; see ", log_file)
#     Sys.sleep(0.02)
#   }
# }
# wait_for(function() file.exists(pid_file) && length(readLines(pid_file, warn = FALSE)) > 0, 60,
#          "the training process to start")
# pid <- as.integer(readLines(pid_file, warn = FALSE))
# alive <- function() tools::pskill(pid, 0L)  # signal 0 only asks whether the process exists
# deadline <- Sys.time() + 600
# repeat {
#   if (!alive()) stop("the training process ended by itself; see ", log_file)
#   if (last_logged_step() >= kill_after_step) break
#   if (Sys.time() > deadline) stop("timed out waiting for the training process")
#   Sys.sleep(0.02)
# }
# invisible(tools::pskill(pid, tools::SIGKILL))
# wait_for(function() !alive(), 30, "the killed process to end")
# latest <- tf$train$latest_checkpoint(cli_dir)  # reads TensorFlow's checkpoint index file
# cat("killed by SIGKILL; latest complete checkpoint:", basename(latest), "\n")

# %% language="R"
# # How far the killed process got: its output, and the last step in its metrics log.
# cat(readLines(log_file, warn = FALSE), sep = "\n")
# killed_records <- Filter(function(record) record$kind == "step", metrics_records())
# cat(sprintf("... it had logged up to global step %d when it was killed\n", last_logged_step()))

# %% [markdown]
# ## Resume mid-epoch at the next batch
#
# Rerun the **same** command. `--epochs 2` is the target, not "2 more", so a rerun resumes. kerasdist
# restores weights, optimizer state and position from `ckpt-72` (epoch 2, batch 20), rebuilds epoch
# 2's data order from (seed, epoch), skips the 20 batches already trained, and continues with batch
# 21. The few steps the killed process trained after `ckpt-72` are lost and trained again; the
# metrics log is cut back to step 72 so that they do not appear twice.

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # Rerun the same command (for at most 10 minutes) and read the result record it prints as JSON on its last line.
# output <- system2(python, shQuote(c(cli_args, "--json")), stdout = TRUE, stderr = FALSE, timeout = 600)
# record <- json$loads(output[length(output)])
# cat(grep("^Resuming", output, value = TRUE), "\n")
# cat(sprintf("initial_epoch (0-based) %d, resumed after global step %d\n",
#             record$initial_epoch, record$resumed_from_step))
# cat("epochs in the history:", length(record$history$loss), "\n")

# %% magic_args="-w 9 -h 3.6 --units in -r 100" language="R"
# # Plot the per-step loss: the killed run, the steps it lost, and the resumed run, on one axis.
# killed_steps <- data.frame(global_step = vapply(killed_records, function(r) r$global_step, numeric(1)),
#                            loss = vapply(killed_records, function(r) r$loss, numeric(1)))
# final_steps <- data.frame(global_step = unlist(record$steps$global_step), loss = unlist(record$steps$loss))
# resumed_after <- record$resumed_from_step
# par(mar = c(4, 4.5, 2.5, 1), las = 1, cex.main = 1)
# plot(killed_steps, type = "l", lwd = 6, col = adjustcolor("firebrick", alpha.f = 0.35),
#      xlim = range(killed_steps$global_step, final_steps$global_step),
#      ylim = range(killed_steps$loss, final_steps$loss), xlab = "global step",
#      ylab = "training loss (running epoch mean)",
#      main = "One continuous log across a SIGKILL (thin line: end of epoch 1)")
# lines(final_steps, col = "steelblue")
# abline(v = resumed_after, col = "gray40", lty = 2)
# abline(v = steps_per_epoch, lwd = 0.5)
# legend("topright", bty = "n", lty = c(1, 1, 2), lwd = c(6, 1, 1),
#        col = c(adjustcolor("firebrick", alpha.f = 0.35), "steelblue", "gray40"),
#        legend = c("killed run (its steps after the checkpoint are lost)", "final metrics log",
#                   sprintf("resumed after step %d", resumed_after)))

# %% [markdown]
# ## Keras BackupAndRestore replays the epoch
#
# keras3 has its own fault-tolerance callback, `callback_backup_and_restore()`. With `save_freq = 20`
# it also backs up every 20 batches, and it restores weights, optimizer state and the epoch number.
# But it does not record the batch position: after a crash in the middle of epoch 2 it starts epoch
# 2 again from its first batch, with weights that have already seen 20 of them. We count the
# batches of the resumed epoch to see it.

# %% language="R"
# # A callback that notes the epoch of every batch it sees.
# trained_epochs <- integer()
# current_epoch <- 0L
# callback_batch_counter <- callback_lambda(
#   on_epoch_begin = function(epoch, logs) {
#     current_epoch <<- epoch
#     invisible(NULL)
#   },
#   on_train_batch_end = function(batch, logs) {
#     trained_epochs <<- c(trained_epochs, current_epoch)
#     invisible(NULL)
#   }
# )

# %% language="R"
# # First run, 2 epochs: back up every 20 batches and crash in epoch 2 after batch 30.
# backup_dir <- file.path(run_dir, "backup_and_restore")
# set_random_seed(0)
# with(strategy$scope(), model <- build_model())
# tryCatch(
#   model |> fit(train_dataset, epochs = 2L, shuffle = FALSE, verbose = 0,
#                callbacks = list(callback_backup_and_restore(backup_dir, save_freq = 20L),
#                                 callback_crash_at(epoch = 2, batch = 30))),
#   error = function(e) cat("Training stopped:", crash_message(e), "\n")
# )

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # Second run: a fresh model and the same callback; count what each epoch trains.
# with(strategy$scope(), model <- build_model())
# model |> fit(train_dataset, epochs = 2L, shuffle = FALSE, verbose = 0,
#              callbacks = list(callback_backup_and_restore(backup_dir, save_freq = 20L),
#                               callback_batch_counter))
# cat("batches trained per epoch after the restore:\n")
# print(table(epoch = trained_epochs))
# cat("backup left after success:", dir.exists(backup_dir), "\n")
# cat(sprintf("kerasdist trained %d batches of epoch 2 after its restore\n",
#             steps_per_epoch - record$resumed_from_step %% steps_per_epoch))

# %% [markdown]
# `callback_backup_and_restore()` restarted at epoch 2 (it did restore the epoch) but trained all 52
# batches of it, after a backup taken at batch 20: 20 batches of epoch 2 were trained twice.
# kerasdist trained only the 32 that were missing. It also deleted its backup once training
# succeeded (the default), so it is a crash guard, not a record of the run.

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
#   and position, and `fit()` gets `initial_epoch` (1-based in keras3); then epoch numbers and the
#   metrics log continue.
# - An error and a `SIGKILL` are different failures; only complete checkpoints on disk survive a
#   kill.
# - "Newest file by ctime" breaks as soon as a file is copied or restored; pick by epoch or step.
# - kerasdist resumes a mid-epoch checkpoint at the next batch with the same data order;
#   `callback_backup_and_restore()` restarts the interrupted epoch from its first batch.

# %% [markdown]
# ## Exercises
#
# 1. Remove `initial_epoch = epochs_done + 1L` from the resume cell and run the lesson again. What
#    does Keras print, which checkpoint files are overwritten, and how many epochs are trained in all?
# 2. Set `cli_epochs <- 3L` and kill the kerasdist run in the middle of epoch 3
#    (`kill_after_step <- 130L`). From which epoch and batch does the rerun resume, and how many steps
#    were lost?
# 3. Rerun the kerasdist command a third time. What does it print, and why does it train nothing?
# 4. Corrupt the newest kerasdist checkpoint (truncate its `.data-*` file) and rerun: which
#    checkpoint does it use, and what does it warn?
# 5. Time one epoch with and without `--save-every-steps 5`. How much does a checkpoint cost here?
