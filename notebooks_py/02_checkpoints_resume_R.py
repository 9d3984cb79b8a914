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
# - what `callback_model_checkpoint(save_freq = N)` saves every N batches, and why `fit()` cannot
#   continue from it;
# - mid-epoch backups: kerasdist resumes at the next batch, `callback_backup_and_restore()` replays
#   the epoch; and (end-of-lesson exercise 6) how to build mid-epoch resume for `fit()` yourself.
#
# **What you need**: lesson 1, R with keras3, tfdatasets and tensorflow
# (`install.packages(c("keras3", "tfdatasets"))`), rpy2 in the kernel's Python environment, and
# about a minute and a half on a 2-core CPU. The lesson writes into `results/02_checkpoints_R/` next
# to this notebook and empties that folder first. The data is full MNIST when Keras has it cached or
# can download it, otherwise a sample of real MNIST digits (offline). The stored outputs come from a
# run on that sample; `bash scripts/run_notebooks.sh --r-twins` runs the notebook again. Every count,
# step and checkpoint name in the text is printed by the run, so the lesson reads the same on either.

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
# There are two kinds of interruption. An **error** unwinds the stack: `on.exit()` handlers and
# `finally` blocks run, while Keras' callbacks stop at the failing batch (no `on_epoch_end`, no
# `on_train_end`: `fit()` has no `finally`), but what they had already written stays. A **kill**
# (`SIGKILL`, a power cut) runs nothing: only
# what was already completely on disk counts. We try both.

# %% [markdown]
# ## Setup
#
# The sections that teach a skill end with a checked exercise: complete the cell, run the check
# under it, and it answers Correct, Incorrect with what is wrong, or Not attempted; `kd_hint(ex$q1)`
# and `kd_solution(ex$q1)` help.

# %%
# Load the %%R magic; import kerasdist (it keeps TensorFlow's start-up lines quiet), then Keras in
# Python: keras3 then finds Keras loaded and its own start-up creates no tensor, so the devices
# can still be set.
# %load_ext rpy2.ipython
import kerasdist
import keras  # noqa: F401

# %% language="R"
# # rpy2 hooks a warning onto reticulate's loading about a crash that reticulate fixed long before
# # the versions keras3 needs (rstudio/reticulate#1188): drop the hook, keep the output clean.
# setHook(packageEvent("reticulate", "onLoad"), NULL, "replace")
# # Attach keras3, tfdatasets and tensorflow; settings (checkpoint interval too); an empty folder for this lesson.
# library(keras3)
# library(tfdatasets, exclude = "shape")
# library(tensorflow, exclude = c("shape", "set_random_seed"))
# library(kerasdist)  # the course's R package: this lesson's checked exercises
# ex <- kd_exercises("02")
# data_source <- Sys.getenv("KERASDIST_DATA", "auto")
# num_replicas <- 2L
# global_batch_size <- 64L
# epochs <- 3L
# save_every_steps <- 20L  # mid-epoch checkpoints: every 20 batches
# lost_steps <- 4L  # the mid-epoch crashes land 4 batches after the first mid-epoch checkpoint of epoch 2
# run_dir <- file.path("results", "02_checkpoints_R")
# unlink(run_dir, recursive = TRUE)
# dir.create(run_dir, recursive = TRUE)

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # Replicas, strategy and data, as in lesson 1; every step chosen below is derived from the steps per epoch.
# kerasdist <- reticulate::import("kerasdist")
# devices <- kerasdist$configure_replicas(num_replicas)
# strategy <- tf$distribute$MirroredStrategy(devices = as.list(devices))
# cat(sprintf("Number of devices: %d\n", strategy$num_replicas_in_sync))
# data <- kerasdist$load_mnist(data_source)
# x_train <- data$x_train
# y_train <- data$y_train
# steps_per_epoch <- nrow(x_train) %/% global_batch_size
# cat(sprintf("%d steps per epoch: %s training samples in batches of %d, the last %d dropped\n", steps_per_epoch,
#             format(nrow(x_train), big.mark = ","), global_batch_size, nrow(x_train) %% global_batch_size))
# if (steps_per_epoch <= save_every_steps + lost_steps)
#   stop(sprintf(paste("this lesson needs more than %d steps per epoch. Received: %d;",
#                      "use more training data or a smaller batch"),
#                save_every_steps + lost_steps, steps_per_epoch))

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
# in the middle of epoch 2; the error travels through Python's `fit()` and back to R. A second
# `callback_model_checkpoint()`, with `save_freq = 20`, also saves every 20 batches into another
# folder; a later section looks at its files.

# %% language="R"
# # Train towards 3 epochs with per-epoch checkpoints and a CSV log, and crash in the middle of epoch 2.
# keras_dir <- file.path(run_dir, "keras")
# dir.create(keras_dir)
# csv_log <- file.path(run_dir, "keras_log.csv")
# every_n_dir <- file.path(run_dir, "keras_every_n_batches")
# crash_batch <- steps_per_epoch %/% 2L
# keras_callbacks <- function() list(
#   callback_model_checkpoint(file.path(keras_dir, "ckpt-{epoch:02d}.keras")),
#   callback_csv_logger(csv_log, append = TRUE)
# )
# every_n_batches <- callback_model_checkpoint(file.path(every_n_dir, "ckpt-e{epoch:02d}-b{batch:03d}.keras"),
#                                              save_freq = save_every_steps)
# set_random_seed(0)
# with(strategy$scope(), model <- build_model())
# tryCatch(
#   model |> fit(train_dataset, epochs = epochs, validation_data = val_dataset, shuffle = FALSE, verbose = 2,
#                callbacks = c(keras_callbacks(), list(every_n_batches,
#                                                      callback_crash_at(epoch = 2, batch = crash_batch)))),
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
# par(mfrow = c(1, 2), mar = c(4, 5.5, 2.5, 1), las = 1, cex.main = 0.9)
# matplot(log_epochs, keras_log[, c("loss", "val_loss")], type = "o", pch = 19, lty = 1,
#         col = c("steelblue", "darkorange"), xaxt = "n", xlab = "epoch", ylab = "loss",
#         main = "Loss per epoch (one CSV log, two runs)")
# axis(1, at = log_epochs)
# abline(v = epochs_done + 0.5, col = "gray40", lty = 2)
# legend("topright", c("training", "validation", "crash + resume"), col = c("steelblue", "darkorange", "gray40"),
#        lty = c(1, 1, 2), pch = c(19, 19, NA), bty = "n")
# plot(log_epochs, keras_log$val_sparse_categorical_accuracy, type = "o", pch = 19, col = "darkorange",
#      xaxt = "n", xlab = "epoch", ylab = "", main = "Validation accuracy")
# axis(1, at = log_epochs)
# abline(v = epochs_done + 0.5, col = "gray40", lty = 2)

# %% [markdown]
# There is a catch: the resumed epoch 2 does not see the data in the order an uninterrupted epoch 2
# would have. `dataset_shuffle()` draws a new order for every pass over the dataset. Here we resumed
# in the same session with the same `train_dataset`, so its sequence of orders went on from where
# the crashed run left it; under a strategy, every `fit()` call also takes one order to build the
# model before its first step (lesson 3, end-of-lesson exercise 1). A new process starts the
# sequence again, and its resumed epoch 2 replays epoch 1's order. Either way the curve is
# continuous, but the run is not the same run. kerasdist fixes this by making each epoch's order a
# function of (seed, epoch) only; we use it from the command line below.

# %% [markdown]
# ## The ctime trap
#
# A widespread recipe picks the latest checkpoint as the newest file by ctime. It comes from the
# fault-tolerance part of the Keras guide
# [Multi-GPU distributed training with TensorFlow](https://keras.io/guides/distributed_training_with_tensorflow/)
# (its `make_or_restore_model()` takes `max(checkpoints, key=os.path.getctime)`), and it is copied
# widely. A file's *ctime* changes whenever the file is written, copied in or restored, and no copy
# tool can preserve it. Restore `ckpt-01.keras` from a backup,
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
# ### Exercise q1: make or restore
#
# Write `make_or_restore(directory, strategy)`, the start of a training script that survives crashes. `directory` is a path as a character string (`list.files()` lists its checkpoints), and the model, new or loaded, is made inside `with(strategy$scope(), ...)`. With no `ckpt-NN.keras` file in `directory` it builds a new model with `build_model()` and returns `list(model, 0L)`; otherwise it loads the latest checkpoint and returns `list(model, epochs_done)` (keras3's `fit()` then takes `initial_epoch = epochs_done + 1`). The check trains your model until a simulated crash in epoch 3, copies `ckpt-01.keras` aside and back (as a restore from a backup would), calls your function again and resumes.
#
# Complete the cell, then run the check below it; `kd_hint(ex$q1)` gives a hint, `kd_solution(ex$q1)` the solution.
#
# <details><summary>Solution</summary>
#
# Pick the checkpoint by the epoch number in its name (`checkpoint_epoch()`), never by file time: copying `ckpt-01.keras` back made it the newest file. Load it with `load_model()` inside the strategy's scope, so that its variables are mirrored again and the optimizer state (Adam's step count and moments) comes back with the weights; the epoch in its name is the number of epochs done.
#
# </details>

# %% nbgrader={"grade": false, "grade_id": "q1_answer", "locked": false, "schema_version": 3, "solution": true, "task": false} language="R"
# make_or_restore <- NULL  # a function of (directory, strategy): list(model, epochs_done)
# ### BEGIN SOLUTION
# make_or_restore <- function(directory, strategy) {
#   checkpoints <- list.files(directory, pattern = "^ckpt-[0-9]+\\.keras$",
#                             full.names = TRUE)
#   if (length(checkpoints) == 0) {
#     with(strategy$scope(), model <- build_model())
#     return(list(model, 0L))
#   }
#   latest <- checkpoints[which.max(checkpoint_epoch(checkpoints))]
#   with(strategy$scope(), model <- load_model(latest))
#   list(model, checkpoint_epoch(latest))
# }
# ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "q1", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false} language="R"
# # NBVAL_CHECK_OUTPUT
# kd_check(ex$q1)
# ### BEGIN HIDDEN TESTS
# kd_assert_correct(ex$q1)
# ### END HIDDEN TESTS

# %% [markdown]
# ## Save every N batches with ModelCheckpoint
#
# When an epoch takes hours, a checkpoint per epoch is too rare. `callback_model_checkpoint(save_freq
# = N)`, with an integer N, saves every N batches instead of at the end of every epoch. The crashed run
# above had one with `save_freq = 20` and the file name `ckpt-e{epoch:02d}-b{batch:03d}.keras`. Three
# things to know, all visible in the files it left:
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

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # The batch checkpoints of the crashed run, and what the newest one holds.
# batch_files <- list.files(every_n_dir, pattern = "^ckpt-e[0-9]+-b[0-9]+\\.keras$", full.names = TRUE)
# file_epoch <- as.integer(sub("^ckpt-e([0-9]+)-b.*$", "\\1", basename(batch_files)))
# file_batch <- as.integer(sub("^.*-b([0-9]+)\\.keras$", "\\1", basename(batch_files)))
# ordered <- order(file_epoch, file_batch)
# batch_files <- batch_files[ordered]
# newest_epoch <- tail(file_epoch[ordered], 1)
# newest_batch <- tail(file_batch[ordered], 1)
# cat(sprintf("%d file(s) from %s to %s\n", length(batch_files), basename(batch_files[1]),
#             basename(tail(batch_files, 1))))
# # Self-check: the last multiple of save_every_steps batches before the crash, counted across epochs.
# trained_before_crash <- steps_per_epoch + crash_batch
# stopifnot((newest_epoch - 1L) * steps_per_epoch + newest_batch ==
#           trained_before_crash %/% save_every_steps * save_every_steps)
# with(strategy$scope(), at_batch <- load_model(tail(batch_files, 1)))
# cat(sprintf("%s holds optimizer step %d = %d epoch(s) x %d batches + %d batches\n",
#             basename(tail(batch_files, 1)), as.integer(at_batch$optimizer$iterations$numpy()),
#             newest_epoch - 1L, steps_per_epoch, newest_batch))
# cat(sprintf(paste("fit(initial_epoch = %d) would start epoch %d at batch 1:",
#                   "its first %d batches would be trained a second time\n"),
#             newest_epoch, newest_epoch, newest_batch))

# %% [markdown]
# ### Exercise q2: which batches ModelCheckpoint saves
#
# Write `batch_checkpoint_names(steps_per_epoch, epochs, save_freq)`: the names of the files that `callback_model_checkpoint("ckpt-e{epoch:02d}-b{batch:03d}.keras", save_freq = save_freq)` leaves after `epochs` epochs of `steps_per_epoch` batches, such as `"ckpt-e02-b001.keras"`, as a character vector. The check trains a small model on real digits with a real checkpoint callback and compares your names with the files it wrote.
#
# Complete the cell, then run the check below it; `kd_hint(ex$q2)` gives a hint, `kd_solution(ex$q2)` the solution.
#
# <details><summary>Solution</summary>
#
# The callback counts batches across epochs: it saves after the global batches N, 2N, 3N, ... of the whole run. Global batch g (from 1) lies in epoch (g - 1) div steps_per_epoch + 1, at batch (g - 1) mod steps_per_epoch + 1 of that epoch. With 5 batches per epoch and `save_freq` 3, the files are `ckpt-e01-b003`, `ckpt-e02-b001`, `ckpt-e02-b004`, `ckpt-e03-b002` and `ckpt-e03-b005`.
#
# </details>

# %% nbgrader={"grade": false, "grade_id": "q2_answer", "locked": false, "schema_version": 3, "solution": true, "task": false} language="R"
# batch_checkpoint_names <- NULL  # a function of (steps_per_epoch, epochs, save_freq)
# ### BEGIN SOLUTION
# batch_checkpoint_names <- function(steps_per_epoch, epochs, save_freq) {
#   step <- seq(save_freq, steps_per_epoch * epochs, by = save_freq)
#   sprintf("ckpt-e%02d-b%03d.keras", (step - 1) %/% steps_per_epoch + 1,
#           (step - 1) %% steps_per_epoch + 1)
# }
# ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "q2", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false} language="R"
# # NBVAL_CHECK_OUTPUT
# kd_check(ex$q2)
# ### BEGIN HIDDEN TESTS
# kd_assert_correct(ex$q2)
# ### END HIDDEN TESTS

# %% [markdown]
# ## Kill a training process with SIGKILL
#
# An error is a polite failure. Now the real thing: the kerasdist command line trains in a child
# process, with a checkpoint at every epoch end and every 20 steps inside an epoch
# (`--save-every-steps 20`; kerasdist counts them from the start of each epoch). kerasdist names its
# checkpoints by global step, the batches trained in all: epoch 1 ends with `ckpt-` and the steps per
# epoch, and the first checkpoint inside epoch 2 comes 20 steps later (the next cell prints both).
# `lost_steps` steps after that one we send `SIGKILL`: no callback, no `finally`, no flush runs. We
# watch the child through the files it writes: TensorFlow's checkpoint index and kerasdist's metrics
# log (`metrics.jsonl`, one JSON line per logged step).
#
# The child is a `processx` process. Every wait has a deadline, and we ask `processx` whether the
# child is alive: it collects the exit status of a child that ended, so a dead child never looks
# alive. (`tools::pskill(pid, 0)`, "can I signal it?", is TRUE for a zombie, a dead child whose
# status nobody collected: a loop waiting on it would spin forever.)

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # The command: train towards 2 epochs, checkpointing every epoch and every 20 steps.
# cli_dir <- file.path(run_dir, "kerasdist")
# cli_epochs <- 2L
# python <- reticulate::py_exe()
# cli_args <- c("-m", "kerasdist", "train", "--replicas", num_replicas, "--epochs", cli_epochs,
#               "--global-batch-size", global_batch_size, "--data", data_source,
#               "--checkpoint-dir", cli_dir, "--save-every-steps", save_every_steps)
# cat("python", cli_args, "\n")
# first_in_epoch_2 <- steps_per_epoch + save_every_steps
# kill_after_step <- first_in_epoch_2 + lost_steps
# cat(sprintf(paste("checkpoints to expect: ckpt-%d (end of epoch 1), ckpt-%d (epoch 2, step %d);",
#                   "SIGKILL once step %d is logged\n"), steps_per_epoch, first_in_epoch_2, save_every_steps,
#             kill_after_step))

# %% language="R"
# # Start it, and kill it once its metrics log reaches kill_after_step (ten minutes at most).
# metrics_file <- file.path(cli_dir, "metrics.jsonl")
# log_file <- file.path(run_dir, "killed_run.log")
# json <- reticulate::import("json")
# metrics_records <- function() {
#   lines <- if (file.exists(metrics_file)) readLines(metrics_file, warn = FALSE) else character()
#   lapply(grep("\\}$", lines, value = TRUE), json$loads)  # complete lines only
# }
# last_logged_step <- function() {
#   records <- metrics_records()
#   if (length(records)) records[[length(records)]]$global_step else 0L
# }
# child <- processx::process$new(python, as.character(cli_args), stdout = log_file, stderr = "2>&1")
# deadline <- Sys.time() + 600
# while (last_logged_step() < kill_after_step) {
#   if (!child$is_alive())
#     stop(sprintf("the training process ended by itself (status %d) before step %d; see %s",
#                  child$get_exit_status(), kill_after_step, log_file))
#   if (Sys.time() > deadline) {
#     child$kill()
#     stop(sprintf("timed out after 600 s waiting for the training process to log step %d; see %s",
#                  kill_after_step, log_file))
#   }
#   Sys.sleep(0.02)
# }
# invisible(child$signal(tools::SIGKILL))
# child$wait(timeout = 30000)  # milliseconds
# if (child$is_alive())
#   stop(sprintf("the killed training process (pid %d) did not end within 30 s", child$get_pid()))
# if (!isTRUE(child$get_exit_status() == -tools::SIGKILL))
#   stop(sprintf("the training process ended by itself (status %d) before the kill; see %s",
#                child$get_exit_status(), log_file))

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # How it ended, and the newest checkpoint that TensorFlow's index file lists.
# latest <- tf$train$latest_checkpoint(cli_dir)
# cat(sprintf("exit status %d (killed by SIGKILL); latest complete checkpoint: %s\n",
#             child$get_exit_status(), basename(latest)))

# %% language="R"
# # How far the killed process got: its output, and the last step in its metrics log.
# cat(readLines(log_file, warn = FALSE), sep = "\n")
# killed_records <- Filter(function(record) record$kind == "step", metrics_records())
# killed_at <- last_logged_step()
# cat(sprintf("... it had logged up to global step %d when it was killed\n", killed_at))

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

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # Rerun the same command (ten minutes at most: processx stops it and raises an error after that) and
# # read the result record it prints as JSON on its last line.
# finished <- processx::run(python, as.character(c(cli_args, "--json")), timeout = 600)
# output <- strsplit(trimws(finished$stdout), "\n")[[1]]
# record <- json$loads(output[length(output)])
# cat(grep("^Resuming", output, value = TRUE), "\n")
# cat(sprintf("initial_epoch (0-based) %d, resumed after global step %d\n",
#             record$initial_epoch, record$resumed_from_step))
# cat("epochs in the history:", length(record$history$loss), "\n")

# %% language="R"
# # Self-check: the rerun continued after the newest checkpoint the killed process completed, which is
# # the last multiple of save_every_steps steps (counted inside epoch 2) before the kill.
# resumed_from <- record$resumed_from_step
# cat(sprintf("steps lost to the kill and trained again: %d\n", killed_at - resumed_from))
# stopifnot(resumed_from == as.integer(sub("^ckpt-", "", basename(latest))), resumed_from < killed_at,
#           resumed_from == steps_per_epoch +
#             (killed_at - steps_per_epoch) %/% save_every_steps * save_every_steps)

# %% [markdown]
# The metrics log stores two losses per logged step. `loss` is what Keras reports after each batch:
# the **mean** loss of the epoch so far (of the current `fit()` call, after a resume). Plotted as it
# is, that running mean drops at every epoch boundary, which reads like sudden learning but is only
# its reset. `batch_loss` is the loss of that step's batch alone: kerasdist recovers it from two
# consecutive means, since after k batches the mean is (sum of k losses) / k, so the k-th loss is
# k × mean after k − (k − 1) × mean after k − 1. Plot that one.

# %% language="R"
# # Each step's own batch loss, in the killed run's log and in the final log.
# killed_steps <- data.frame(
#   global_step = vapply(killed_records, function(r) r$global_step, numeric(1)),
#   batch_loss = vapply(killed_records, function(r) r$batch_loss, numeric(1)))
# final_steps <- data.frame(global_step = unlist(record$steps$global_step),
#                           batch_loss = unlist(record$steps$batch_loss))
# # The steps the kill lost were trained again from the checkpoint, on the same batches: compare their losses.
# again <- merge(killed_steps, final_steps, by = "global_step", suffixes = c("_killed", "_rerun"))
# again <- again[again$global_step > resumed_from, ]
# cat(sprintf("%d lost steps trained again: max |batch loss difference| between the two runs %.1e\n",
#             nrow(again), max(abs(again$batch_loss_killed - again$batch_loss_rerun))))

# %% magic_args="-w 9 -h 3.6 --units in -r 100" language="R"
# # Plot the per-step loss: the killed run, the steps it lost, and the resumed run, on one axis.
# par(mar = c(4, 4.5, 2.5, 1), las = 1, cex.main = 1)
# plot(killed_steps$global_step, killed_steps$batch_loss, type = "l", lwd = 6,
#      col = adjustcolor("firebrick", alpha.f = 0.35),
#      xlim = range(killed_steps$global_step, final_steps$global_step),
#      ylim = range(killed_steps$batch_loss, final_steps$batch_loss), xlab = "global step",
#      ylab = "training loss of the step",
#      main = "Per-step loss, one continuous log across a SIGKILL (thin line: end of epoch 1)")
# lines(final_steps$global_step, final_steps$batch_loss, col = "steelblue")
# abline(v = resumed_from, col = "gray40", lty = 2)
# abline(v = steps_per_epoch, lwd = 0.5)
# legend("topright", bty = "n", lty = c(1, 1, 2), lwd = c(6, 1, 1),
#        col = c(adjustcolor("firebrick", alpha.f = 0.35), "steelblue", "gray40"),
#        legend = c("killed run (its steps after the checkpoint are lost)", "final metrics log",
#                   sprintf("resumed after step %d", resumed_from)))

# %% [markdown]
# ### Exercise q3: an epoch that resumes at the next batch
#
# Write `resume_dataset(images, labels, epoch, batches_done, batch_size)`: a dataset (tfdatasets) of the `list(images, labels)` batches of epoch `epoch` that remain after its first `batches_done`, as kerasdist rebuilds them after a restart. Every epoch has its own shuffled order, which a new process must rebuild exactly; batch with `drop_remainder = TRUE`. The check builds whole and resumed epochs from 200 real digits and compares their batches.
#
# Complete the cell, then run the check below it; `kd_hint(ex$q3)` gives a hint, `kd_solution(ex$q3)` the solution.
#
# <details><summary>Solution</summary>
#
# Seed the shuffle with the epoch: the order then depends on the epoch alone, is the same in every process that builds it, and differs from one epoch to the next. Skip after batching, so that `batches_done` counts batches, not examples: the resumed epoch continues with the next batch of the same order.
#
# </details>

# %% nbgrader={"grade": false, "grade_id": "q3_answer", "locked": false, "schema_version": 3, "solution": true, "task": false} language="R"
# resume_dataset <- NULL  # function of (images, labels, epoch, batches_done, batch_size)
# ### BEGIN SOLUTION
# resume_dataset <- function(images, labels, epoch, batches_done, batch_size) {
#   tensor_slices_dataset(list(images, labels)) |>
#     dataset_shuffle(buffer_size = nrow(images), seed = epoch) |>
#     dataset_batch(batch_size, drop_remainder = TRUE) |>
#     dataset_skip(batches_done)
# }
# ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "q3", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false} language="R"
# # NBVAL_CHECK_OUTPUT
# kd_check(ex$q3)
# ### BEGIN HIDDEN TESTS
# kd_assert_correct(ex$q3)
# ### END HIDDEN TESTS

# %% [markdown]
# ## Keras BackupAndRestore replays the epoch
#
# keras3 has its own fault-tolerance callback, `callback_backup_and_restore()`. With `save_freq = 20`
# it backs up every 20 batches into two files: `latest.weights.h5` (weights and optimizer state) and
# `training_metadata.json`. It counts the batches **across epochs**, like
# `callback_model_checkpoint()` (and unlike kerasdist, which counts inside each epoch), and with an
# integer `save_freq` it writes nothing at an epoch's end; so its backups in epoch 2 fall at other
# batches than kerasdist's checkpoints did. To compare like with like, the crash below comes
# `lost_steps` batches after its newest backup, as the SIGKILL came `lost_steps` steps after
# kerasdist's newest checkpoint: both methods then lose the batches after their backup, and what we
# compare is what the restore does.

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
# # NBVAL_CHECK_OUTPUT
# # First run, 2 epochs: back up every 20 batches (counted across epochs), crash lost_steps batches after
# # the first backup of epoch 2, and read what the backup recorded.
# backup_dir <- file.path(run_dir, "backup_and_restore")
# epochs_backup <- 2L
# backup_in_epoch_2 <- (steps_per_epoch %/% save_every_steps + 1L) * save_every_steps - steps_per_epoch
# cat(sprintf("backups after global batches %d, %d, ...: in epoch 2 the first after its batch %d; the crash comes after batch %d\n",
#             save_every_steps, 2L * save_every_steps, backup_in_epoch_2, backup_in_epoch_2 + lost_steps))
# set_random_seed(0)
# with(strategy$scope(), model <- build_model())
# tryCatch(
#   model |> fit(train_dataset, epochs = epochs_backup, shuffle = FALSE, verbose = 0,
#                callbacks = list(callback_backup_and_restore(backup_dir, save_freq = save_every_steps),
#                                 callback_crash_at(epoch = 2, batch = backup_in_epoch_2 + lost_steps))),
#   error = function(e) cat("Training stopped:", crash_message(e), "\n")
# )
# metadata_file <- file.path(backup_dir, "training_metadata.json")
# metadata <- json$loads(paste(readLines(metadata_file, warn = FALSE), collapse = ""))
# cat(sprintf("Keras %s backup: %s, training_metadata.json = %s\n", reticulate::import("keras")$`__version__`,
#             paste(sort(list.files(backup_dir)), collapse = ", "),
#             paste(readLines(metadata_file, warn = FALSE), collapse = "")))
# backup_epoch <- metadata$epoch + 1L    # 1-based epoch of the backup
# backup_batches <- metadata$batch + 1L  # batches of that epoch done (the file stores a 0-based batch)
# cat(sprintf("the backup holds epoch %d up to its batch %d\n", backup_epoch, backup_batches))
# stopifnot(backup_epoch == 2L, backup_batches == backup_in_epoch_2)

# %% [markdown]
# The metadata records the epochs finished **and** the batch (0-based) of the backup. But when the
# next `fit()` starts, the callback's `on_train_begin` loads the weights and reads only the epoch (it
# becomes `fit()`'s initial epoch); the batch is written and never read (Keras 3.15's
# `keras/src/callbacks/backup_and_restore.py`, which keras3 calls). So the interrupted epoch starts
# again at its first batch, with weights that already contain the batches before the backup.
#
# **Predict, then run.** How many batches of epoch 2 will the restored run train: only those after
# the backup, or all of them? Decide, then run.

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # Second run: a fresh model and the same callback; count what each epoch trains.
# with(strategy$scope(), model <- build_model())
# model |> fit(train_dataset, epochs = epochs_backup, shuffle = FALSE, verbose = 0,
#              callbacks = list(callback_backup_and_restore(backup_dir, save_freq = save_every_steps),
#                               callback_batch_counter))
# cat("batches trained per epoch after the restore:\n")
# print(table(epoch = trained_epochs))
# cat("backup left after success:", dir.exists(backup_dir), "\n")
# replayed <- sum(trained_epochs == backup_epoch) - (steps_per_epoch - backup_batches)
# cat(sprintf("BackupAndRestore trained %d batches of epoch 2 twice (already in the restored weights)\n",
#             replayed))
# cat(sprintf("optimizer steps in all: %d, for %d batches in %d epochs\n",
#             as.integer(model$optimizer$iterations$numpy()), epochs_backup * steps_per_epoch, epochs_backup))
# cat(sprintf("kerasdist trained %d batches of epoch 2 after its restore, none of them twice\n",
#             steps_per_epoch - resumed_from %% steps_per_epoch))
# # Self-check: the whole epoch again, so every batch of the backup was replayed.
# stopifnot(sum(trained_epochs == backup_epoch) == steps_per_epoch, replayed == backup_batches)

# %% language="R"
# # Like with like: each method's newest backup before the failure, the batches trained after it (lost,
# # and trained again by any method), and the batches already in it that the restore trained again.
# # (kerasdist's kill lands a little after the step the cell waited for, so its loss varies by a few steps.)
# cat(sprintf("%-17s%-34s%6s%15s\n", "", "newest backup", "lost", "trained twice"))
# cat(sprintf("%-17s%-34s%6d%15d\n", "kerasdist",
#             sprintf("epoch 2, step %d (ckpt-%d)", resumed_from - steps_per_epoch, resumed_from),
#             killed_at - resumed_from, 0L))
# cat(sprintf("%-17s%-34s%6d%15d\n", "BackupAndRestore",
#             sprintf("epoch 2, batch %d (global batch %d)", backup_batches, steps_per_epoch + backup_batches),
#             backup_in_epoch_2 + lost_steps - backup_batches, replayed))

# %% [markdown]
# `callback_backup_and_restore()` restored the epoch but not the batch: it trained the whole of epoch
# 2 again, so the batches of epoch 2 in its backup were trained twice, on top of the batches between
# the backup and the crash, which any method loses and trains again. kerasdist trained only the
# batches that were missing. The table compares like with like: each method's own newest backup, and
# the failure the same number of batches after it (kerasdist's kill a few steps later, as the kill
# lands a little after the step the lesson waits for). The gap grows with the backup's position in
# its epoch: a backup late in a long epoch makes the callback replay almost the whole epoch. The callback also deleted its backup once training succeeded (the
# default, `delete_checkpoint = TRUE`), so it is a crash guard, not a record of the run.

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
#   newest `max_to_keep`. `callback_model_checkpoint(save_freq = N)` keeps every file it names
#   differently.
# - **Make the data order reproducible.** Seed each epoch's shuffle with (seed, epoch) so a resumed
#   epoch sees the same batches; otherwise the run continues, but it is a different run.
# - **Wait with a deadline, and reap.** A parent that watches a training process polls with a time
#   limit and collects the child's exit status (`processx`'s `$is_alive()` and `$wait(timeout)`); a
#   dead child nobody reaps is a zombie, and `tools::pskill(pid, 0)` stays TRUE for it.
# - **Expect a warning before the kill.** Cloud preemption and batch schedulers usually send
#   `SIGTERM` and wait a grace period before `SIGKILL`. Catch it, finish the step, save, exit:
#   kerasdist's trainer does this (`kerasdist/engines/interrupt.py`), and TensorFlow's
#   `tf$distribute$experimental$PreemptionCheckpointHandler` does it for a custom loop under
#   `MultiWorkerMirroredStrategy`, with every worker saving at the same step (unless told otherwise
#   it treats `SIGTERM` as the notice, and `TerminationConfig(grace_period = ...)` lets it train on
#   until the grace period nearly ends; `tensorflow/python/distribute/failure_handling/failure_handling.py`).
# - **Custom loops can checkpoint the data position itself.**
#   `tf$train$Checkpoint(iterator = iterator)` saves a tf.data iterator's state with the weights, and
#   restoring it continues at the next element (`_serialize_to_tensors` of the iterator in
#   `tensorflow/python/data/ops/iterator_ops.py`). The state includes the pipeline's buffers (the
#   `experimental_symbolic_checkpoint` option in `tensorflow/python/data/ops/options.py` stores
#   positions instead, but not for `dataset_shuffle()`, which reorders elements), so a large shuffle
#   buffer makes a large checkpoint. `fit()` creates its own iterator, so with `fit()` rebuild each
#   epoch's order from (seed, epoch) and skip the batches done (end-of-lesson exercise 6).
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
#   and position, and `fit()` gets `initial_epoch` (1-based in keras3); then epoch numbers and the
#   metrics log continue.
# - An error and a `SIGKILL` are different failures; only complete checkpoints on disk survive a
#   kill.
# - "Newest file by ctime" breaks as soon as a file is copied or restored; pick by epoch or step.
# - `callback_model_checkpoint(save_freq = N)` saves a whole model every N batches (counted across
#   epochs), but `fit()` can only start at an epoch boundary.
# - kerasdist resumes a mid-epoch checkpoint at the next batch with the same data order;
#   `callback_backup_and_restore()` writes the batch of its backup but restores only the epoch, and
#   replays the interrupted epoch from its first batch.
# - Keras reports a running epoch mean as "loss"; plot each step's own loss (kerasdist logs it as
#   `batch_loss`).

# %% [markdown]
# ## Exercises
#
# 1. Remove `initial_epoch = epochs_done + 1L` from the resume cell and run the lesson again. What
#    does Keras print, which checkpoint files are overwritten, and how many epochs are trained in all?
#
#    <details><summary>Hint</summary>
#
#    `initial_epoch` defaults to 1 in keras3 (0 in Python), and the checkpoint callback fills
#    `{epoch}` from the epoch `fit()` is in.
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
# 2. Set `cli_epochs <- 3L` and kill the kerasdist run in the middle of epoch 3
#    (`kill_after_step <- 2L * steps_per_epoch + save_every_steps + lost_steps`). From which epoch and
#    batch does the rerun resume, and how many steps were lost?
#
#    <details><summary>Hint</summary>
#
#    kerasdist saves at every epoch end and every `save_every_steps` steps counted inside each epoch,
#    and names a checkpoint by its global step.
#
#    </details>
#    <details><summary>Solution</summary>
#
#    The newest complete checkpoint is `ckpt-` followed by `2 * steps_per_epoch + save_every_steps`:
#    the rerun prints "epoch 3, step 20" and continues with the batch after it. The steps lost are
#    `killed_at - record$resumed_from_step`: `lost_steps` or a few more, as the kill lands a little
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
#    `tf$train$latest_checkpoint()` still names the corrupted one; kerasdist tries the checkpoints it
#    keeps from newest to oldest.
#
#    </details>
#    <details><summary>Solution</summary>
#
#    ```r
#    corrupted <- paste0(tf$train$latest_checkpoint(cli_dir), ".data-00000-of-00001")
#    writeBin(raw(0), corrupted)  # an empty file, as a write cut short would leave
#    rerun <- processx::run(python, as.character(cli_args), timeout = 600, error_on_status = FALSE)
#    cat(rerun$stdout, rerun$stderr)
#    ```
#
#    kerasdist warns "skipping checkpoint .../ckpt-N: it cannot be loaded (Read less bytes than
#    requested)" and restores the newest one that loads, the checkpoint before it (here the last
#    mid-epoch one of epoch 2), so it resumes a little earlier and trains those steps again.
#
#    </details>
#
# 5. How much does one checkpoint cost here, next to one training step? Time 20 saves of the model
#    with `tf$train$CheckpointManager` and 20 steps with `train_on_batch()`, and compare the medians.
#    What does saving every 20 steps then add to the training time?
#
#    <details><summary>Hint</summary>
#
#    Time in the same process, one action at a time, and take the median: a single timing on a
#    busy CPU says little. Trace the step once before timing it.
#
#    </details>
#    <details><summary>Solution</summary>
#
#    ```r
#    manager <- tf$train$CheckpointManager(tf$train$Checkpoint(model = model, optimizer = model$optimizer),
#                                          file.path(run_dir, "cost"), max_to_keep = 1L)
#    batch <- iter_next(as_iterator(train_dataset))
#    invisible(model |> train_on_batch(batch[[1]], batch[[2]]))  # trace the step once
#    median_ms <- function(action, repeats = 20L) {
#      seconds <- vapply(seq_len(repeats), function(i) {
#        started <- Sys.time()
#        action()
#        as.numeric(difftime(Sys.time(), started, units = "secs"))
#      }, numeric(1))
#      1e3 * median(seconds)
#    }
#    save_ms <- median_ms(function() manager$save())
#    step_ms <- median_ms(function() model |> train_on_batch(batch[[1]], batch[[2]]))
#    cat(sprintf("one save %.1f ms, one step %.1f ms: a save costs %.1f steps\n", save_ms, step_ms,
#                save_ms / step_ms))
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
#    saves weights, optimizer state, epoch and batch every `save_every_steps` batches (and at each
#    epoch end) with `tf$train$CheckpointManager`, and a `train()` that restores the newest
#    checkpoint and continues at the next batch with the same data order. Crash it with
#    `callback_crash_at(epoch = 2, batch = save_every_steps + lost_steps)`, call `train()` again, and
#    compare the final weights with an uninterrupted run.
#
#    <details><summary>Hint</summary>
#
#    Keep the position in two `tf$Variable`s inside the `tf$train$Checkpoint`. Give each epoch its
#    own dataset, shuffled with a seed made from the epoch, so that a new process can rebuild it;
#    train one epoch per `fit()` call (in keras3, `initial_epoch = e, epochs = e` for the 1-based
#    epoch e) and `dataset_skip()` the batches already done in the first one. Keras counts batches
#    from 1 again in a skipped epoch, so count them yourself.
#
#    </details>
#    <details><summary>Solution</summary>
#
#    ```r
#    epoch_dataset <- function(epoch) {  # epoch: 0-based, as stored; the order depends on the epoch only (its seed)
#      list(np_array(x_train, dtype = "float32"), np_array(y_train, dtype = "int32")) |>
#        tensor_slices_dataset() |>
#        dataset_shuffle(buffer_size = nrow(x_train), seed = epoch) |>
#        dataset_batch(global_batch_size, drop_remainder = TRUE)
#    }
#    callback_save_position <- Callback(
#      "SavePosition",
#      initialize = function(manager, epoch, batch, every) {
#        super$initialize()
#        self$manager <- manager
#        self$position_epoch <- epoch
#        self$position_batch <- batch
#        self$every <- as.integer(every)
#      },
#      on_train_batch_end = function(batch, logs = NULL) {
#        self$position_batch$assign_add(1L)
#        if (as.integer(self$position_batch$numpy()) %% self$every == 0L) self$manager$save()
#        invisible(NULL)
#      },
#      on_epoch_end = function(epoch, logs = NULL) {  # keras3's epoch is 1-based: `epoch` epochs are done
#        self$position_epoch$assign(epoch)
#        self$position_batch$assign(0L)
#        self$manager$save()
#        invisible(NULL)
#      }
#    )
#    train <- function(directory, callbacks = list()) {
#      set_random_seed(0)
#      with(strategy$scope(), {
#        model <- build_model()
#        model$optimizer$build(model$trainable_variables)  # its slots exist, so the restore fills them
#      })
#      epoch <- tf$Variable(0L, dtype = "int64")
#      batch <- tf$Variable(0L, dtype = "int64")
#      checkpoint <- tf$train$Checkpoint(model = model, optimizer = model$optimizer, epoch = epoch, batch = batch)
#      manager <- tf$train$CheckpointManager(checkpoint, directory, max_to_keep = 2L)
#      checkpoint$restore(manager$latest_checkpoint)  # nothing to restore on a fresh start
#      first <- as.integer(epoch$numpy())
#      skip <- as.integer(batch$numpy())
#      for (e in seq.int(first, length.out = epochs - first)) {  # the 0-based epochs still to train
#        model |> fit(epoch_dataset(e) |> dataset_skip(if (e == first) skip else 0L),
#                     initial_epoch = e + 1L, epochs = e + 1L, shuffle = FALSE, verbose = 0,
#                     callbacks = c(list(callback_save_position(manager, epoch, batch, save_every_steps)),
#                                   callbacks))
#      }
#      model
#    }
#    uninterrupted <- train(file.path(run_dir, "by_hand_whole"))
#    tryCatch(train(file.path(run_dir, "by_hand"),
#                   list(callback_crash_at(epoch = 2, batch = save_every_steps + lost_steps))),
#             error = function(e) cat(crash_message(e), "\n"))
#    resumed <- train(file.path(run_dir, "by_hand"))  # restores epoch 2, batch save_every_steps, and goes on
#    max(mapply(function(a, b) max(abs(a - b)), get_weights(uninterrupted), get_weights(resumed)))
#    ```
#
#    The resumed run ends with the weights of the uninterrupted one (the difference printed is 0, or
#    float rounding): it restored the optimizer's step count and moments, and it trained the same
#    batches in the same order, each once. `tf$train$Checkpoint` restores into the variables as they
#    are, so the model is built (and its optimizer's slots created) before the restore.
#
#    </details>
#
# Next: [Convergence](03_convergence_R.ipynb)
