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
# # Multi-worker training: TF_CONFIG, a local cluster, and a custom loop (R, keras3)
#
# This is the R twin of [05_multi_worker.ipynb](05_multi_worker.ipynb): the same workflow and the
# same sections, written with the R packages keras3, tfdatasets and tensorflow. The notebook runs
# on a Python kernel; the R code lives in `%%R` cells (rpy2), and R draws the figures too
# (`%%R -w -h` sets a figure's size in inches). The workers are `Rscript` processes.
#
# **What you'll learn**
#
# - what `TF_CONFIG` is, and how to build one for a cluster of two workers on this machine;
# - the roles a task can have: chief, worker and evaluator;
# - why Keras 3 `fit()` fails under `MultiWorkerMirroredStrategy` today (keras-team/keras#20585),
#   seen on a real two-worker cluster, and how a custom training loop trains the same model;
# - how to launch a cluster with `kerasdist launch`, and check that both workers end with
#   identical weights.
#
# **What you need**: R with the packages keras3, tfdatasets and tensorflow
# (`install.packages(c("keras3", "tfdatasets"))`), rpy2 in the kernel's Python environment, and
# about two minutes on a 2-core CPU. The workers are separate processes on this machine that talk
# over the loopback network (127.0.0.1). The data is full MNIST when Keras has it cached or can
# download it, otherwise a 5,000-digit sample of real MNIST digits (offline). The stored outputs
# come from a run on that sample; `bash scripts/run_notebooks.sh --r-twins` runs the notebook again.

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
# The notebook itself trains nothing: it starts worker processes and reads what they print. R uses
# kerasdist's `cluster` helpers through reticulate, and Python's `json` module to write and read
# JSON. `KERASDIST_DATA` chooses the data for the workers: `auto` (the default) takes full MNIST
# when available; the test suite sets it to `sample`.

# %%
# Load the %%R magic, and start TensorFlow quietly through kerasdist.
# %load_ext rpy2.ipython
import kerasdist

# %% language="R"
# # Attach keras3, tfdatasets, tensorflow and reticulate; then settings, and a folder for the workers.
# library(keras3)
# library(tfdatasets, exclude = "shape")
# library(tensorflow, exclude = c("shape", "set_random_seed"))
# library(reticulate)
# data_source <- Sys.getenv("KERASDIST_DATA", "auto")
# num_workers <- 2L
# work_dir <- file.path("results", "05_multi_worker_R")
# dir.create(work_dir, recursive = TRUE, showWarnings = FALSE)
# json <- import("json")
# cluster_tools <- import("kerasdist.cluster")
# # The first line of a Python error, without its class name.
# python_message <- function(error) {
#   sub("^[[:alnum:]_.]*Error: ", "", strsplit(conditionMessage(error), "\n")[[1]][1])
# }

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
# ports will do). An R `list()` of strings becomes a JSON array; a named list becomes an object.

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # Build TF_CONFIG by hand: the same cluster for everyone, and this process's own task.
# cluster <- list(worker = list("127.0.0.1:12345", "127.0.0.1:12346"))
# tf_config_worker_0 <- list(cluster = cluster, task = list(type = "worker", index = 0L))
# cat(json$dumps(tf_config_worker_0, indent = 2L), "\n")

# %% [markdown]
# Worker 1 gets the same `cluster` and `"index": 1`. kerasdist's `tf_config()` writes that JSON
# text, and `parse_tf_config()` checks one and says what it describes, the way a worker reads its
# own.

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # The TF_CONFIG text of each worker, and what each one means.
# for (index in seq_len(num_workers) - 1L) {
#   text <- cluster_tools$tf_config(cluster, "worker", index)
#   task <- cluster_tools$parse_tf_config(text)
#   cat(sprintf("TF_CONFIG='%s'\n  -> %s: chief=%s, %d workers, listens on %s\n",
#               text, task$name, task$is_chief, task$num_workers, task$address))
# }

# %% [markdown]
# A wrong `TF_CONFIG` makes TensorFlow wait or fail far from the cause, so kerasdist checks it first
# and says what is wrong in one line:

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # Three common mistakes, and what kerasdist says about each.
# mistakes <- c(
#   '{"cluster": {"worker": ["127.0.0.1:12345"]}, "task": {"type": "worker", "index": 1}}',
#   '{"cluster": {"worker": ["127.0.0.1:12345"], "ps": ["127.0.0.1:12347"]}, "task": {"type": "worker"}}',
#   '{"cluster": {"worker": ["localhost"]}, "task": {"type": "worker", "index": 0}}'
# )
# for (text in mistakes)
#   tryCatch(cluster_tools$parse_tf_config(text), error = function(error) cat("-", python_message(error), "\n"))

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

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # Add an evaluator: its TF_CONFIG, and the training cluster the workers' all-reduce uses.
# cluster_with_evaluator <- c(cluster, list(evaluator = list("127.0.0.1:12347")))
# evaluator <- cluster_tools$parse_tf_config(cluster_tools$tf_config(cluster_with_evaluator, "evaluator", 0L))
# cat(sprintf("%s: chief=%s, trains: %s\n", evaluator$name, evaluator$is_chief,
#             evaluator$task_type %in% cluster_tools$TRAINING_ROLES))
# cat("training cluster:", json$dumps(evaluator$training_cluster()), "\n")

# %% [markdown]
# ## Why Keras 3 fit() fails here
#
# With a `TF_CONFIG` in each process, the rest is the code of lesson 1: make the strategy, build
# and compile the model in its scope, call `fit()`. Under `MultiWorkerMirroredStrategy`, Keras 3's
# `fit()` stops at the first step with `ValueError: Attempt to convert a value (PerReplica...)`:
# its training step does not reduce the per-replica values of a multi-worker strategy
# (keras-team/keras#20585, also tensorflow/tensorflow#72388, open at the time of writing). keras3
# calls the same Python `fit()`, so R meets the same error.
#
# A custom training loop does not depend on that code. The pattern, from the TensorFlow guides:
#
# 1. create the model, and build its optimizer, inside the strategy's scope;
# 2. write one training step for one replica: forward pass, loss **averaged over the global
#    batch** (`tf$nn$compute_average_loss()`), gradients, `apply_gradients()` (which all-reduces
#    the gradients across replicas and workers before the update);
# 3. run it on every replica with `strategy$run()`, inside a `tf_function()`;
# 4. feed it from `strategy$experimental_distribute_dataset()`, which gives each worker its shard.
#
# TensorFlow runs step 2 on its own threads, one per replica, and R code runs on R's main thread
# only; so from R the practical way is a loop whose per-replica step is Python. kerasdist's loop is
# exactly that (`kerasdist.loop.DistributedSteps`, many steps per call), and it trains any compiled
# Keras model, including one built with keras3 in R. The worker script below does both in each
# worker: first `fit()`, then the loop, for one epoch. We save it to a file and start it twice with
# `Rscript`, with one `TF_CONFIG` each.
#
# One thing is different in a script of its own: the order. TensorFlow sets up collective ops (the
# all-reduce between workers) only when it starts its runtime, and keras3 starts that runtime as
# soon as it first loads Keras. So the script creates `MultiWorkerMirroredStrategy()` first and
# attaches keras3 after it; the other way round, the strategy fails with "Collective ops must be
# configured at program startup". (In this notebook the Python side started TensorFlow long ago,
# which is why the lessons can attach keras3 first.)

# %%
# %%writefile results/05_multi_worker_R/fit_then_loop.R
# One worker: try keras3 fit() under MultiWorkerMirroredStrategy, then train the same model with kerasdist's loop.
# The strategy comes first, before keras3 loads Keras (which starts TensorFlow's runtime).
library(tensorflow, exclude = c("shape", "set_random_seed"))
library(reticulate)
cluster_tools <- import("kerasdist.cluster")
task <- cluster_tools$parse_tf_config(Sys.getenv("TF_CONFIG"))
strategy <- tf$distribute$MultiWorkerMirroredStrategy()  # reads TF_CONFIG; waits for the other workers
library(keras3)
library(tfdatasets, exclude = "shape")

global_batch_size <- 64L
kerasdist <- import("kerasdist")
kerasdist_loop <- import("kerasdist.loop")
mnist <- kerasdist$load_mnist(Sys.getenv("KERASDIST_DATA", "auto"), verbose = FALSE)
dataset <- tensor_slices_dataset(list(np_array(mnist$x_train, dtype = "float32"),
                                      np_array(mnist$y_train, dtype = "int32"))) |>
  dataset_shuffle(nrow(mnist$x_train), seed = 0L) |>
  dataset_batch(global_batch_size, drop_remainder = TRUE)

build_model <- function() {
  inputs <- keras_input(shape = 784, name = "digits")
  logits <- inputs |>
    layer_dense(units = 256, activation = "relu", name = "dense_1") |>
    layer_dense(units = 256, activation = "relu", name = "dense_2") |>
    layer_dense(units = 10, name = "logits")
  model <- keras_model(inputs, logits, name = "mnist_mlp")
  model |> compile(
    optimizer = optimizer_adam(learning_rate = 1e-3),
    loss = loss_sparse_categorical_crossentropy(from_logits = TRUE),
    metrics = list(metric_sparse_categorical_accuracy())
  )
  model
}

# 1. keras3 fit(), exactly as on one machine.
with(strategy$scope(), model <- build_model())
outcome <- tryCatch({
  model |> fit(dataset, epochs = 1, shuffle = FALSE, verbose = 0)
  "finished"
}, error = function(error) {
  paste("failed:", substr(gsub("\\s+", " ", conditionMessage(error)), 1, 70), "...")
})
cat(sprintf("%s: fit() %s\n", task$name, outcome))

# 2. The same model trained by kerasdist's loop; build the optimizer inside the scope first.
set_random_seed(0)
with(strategy$scope(), {
  model <- build_model()
  model$optimizer$build(model$trainable_variables)
})
steps <- nrow(mnist$x_train) %/% global_batch_size
loop <- kerasdist_loop$DistributedSteps(model, strategy, global_batch_size, steps_per_execution = steps)
iterator <- as_iterator(strategy$experimental_distribute_dataset(dataset))
totals <- loop$train(iterator, steps)  # per step: summed loss, correct predictions, examples
cat(sprintf("%s: kerasdist's loop trained %d steps, last loss %.4f\n", task$name, steps,
            totals[steps, 1] / totals[steps, 3]))
cat(sprintf("%s: weights sha256 %s\n", task$name, substr(import("kerasdist.roles")$weights_digest(model), 1, 16)))
# A last all-reduce, so that neither worker exits while the other still needs it.
invisible(strategy$reduce(tf$distribute$ReduceOp$SUM, strategy$run(tf$ones, args = list(list())), axis = NULL))

# %% language="R"
# # Start the script twice, as worker 0 and worker 1 of a cluster on free local ports.
# local_cluster <- cluster_tools$local_cluster(num_workers)
# script <- file.path(work_dir, "fit_then_loop.R")
# worker_names <- sprintf("worker-%d", seq_len(num_workers) - 1L)
# logs <- file.path(work_dir, paste0(worker_names, ".log"))        # what each worker prints
# errors <- file.path(work_dir, paste0(worker_names, ".stderr"))   # TensorFlow's log lines, and any R error
# start_worker <- function(index) processx::process$new(
#   file.path(R.home("bin"), "Rscript"), script, stdout = logs[index + 1L], stderr = errors[index + 1L],
#   env = c("current",  # this notebook's environment, plus:
#           TF_CONFIG = cluster_tools$tf_config(local_cluster, "worker", index),
#           RETICULATE_PYTHON = py_config()$python,  # the workers use this notebook's Python
#           KERASDIST_DATA = data_source))
# workers <- lapply(seq_len(num_workers) - 1L, start_worker)
# # Wait for both, 5 minutes at most in all; a worker still running then is stopped.
# deadline <- Sys.time() + 300
# for (worker in workers) {
#   worker$wait(timeout = 1000 * max(0, as.numeric(difftime(deadline, Sys.time(), units = "secs"))))
#   if (worker$is_alive()) worker$kill()
# }
# worker_lines <- unlist(lapply(logs, readLines, warn = FALSE))
# cat(worker_lines, sep = "\n")
# statuses <- vapply(workers, function(worker) as.integer(worker$get_exit_status()), 0L)
# cat(sprintf("(exit statuses: %s)\n", paste(statuses, collapse = ", ")))
# # A worker that failed says why at the end of its stderr.
# for (i in which(is.na(statuses) | statuses != 0))
#   cat(sprintf("--- %s failed; the end of %s:", worker_names[i], basename(errors[i])),
#       tail(readLines(errors[i], warn = FALSE), 15), sep = "\n")

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # What both workers say: fit() fails, the loop trains, and their weights are identical.
# digests <- unique(sub(".*weights sha256 ", "", grep("weights sha256", worker_lines, value = TRUE)))
# cat("fit() failed on every worker:", sum(grepl("fit\\(\\) failed", worker_lines)) == num_workers, "\n")
# cat("the loop finished on every worker:", sum(grepl("loop trained", worker_lines)) == num_workers, "\n")
# cat("identical final weights:", length(digests) == 1, "\n")

# %% [markdown]
# Both workers trained the same steps on different halves of each global batch, and ended with
# the same weights, bit for bit: every update was the same all-reduced update.

# %% [markdown]
# ## A two-worker cluster with kerasdist launch
#
# kerasdist's loop engine wraps that loop with the rest of a training run: the same metrics as
# `fit()` (loss, accuracy, validation), checkpoints that every worker writes in step (the chief's
# are kept), resuming, and a timeout so that a stuck peer cannot hang the others. `kerasdist launch`
# starts the workers with their `TF_CONFIG` (free ports on 127.0.0.1), prefixes each output line
# with the task's name, and checks the final weights:
#
# ```
# python -m kerasdist launch --workers 2 --epochs 2 --data sample --checkpoint-dir DIR --evaluator
# ```
#
# Each worker runs `python -m kerasdist worker`, which reads `TF_CONFIG`; on real machines you
# start that command yourself on each machine, with its own `TF_CONFIG`. With `--evaluator` a
# third task evaluates every checkpoint the chief writes. From R, `system2()` runs the command
# with this notebook's Python.

# %% language="R"
# # Launch 2 workers and an evaluator; each prints with its name (this takes about 45 seconds; at most 10 minutes).
# checkpoint_dir <- file.path(work_dir, "checkpoints")
# unlink(checkpoint_dir, recursive = TRUE)  # start afresh each time the notebook runs
# output <- system2(py_config()$python,
#                   c("-m", "kerasdist", "launch", "--workers", num_workers, "--epochs", 2, "--data", data_source,
#                     "--checkpoint-dir", shQuote(checkpoint_dir), "--evaluator", "--json"),
#                   stdout = TRUE, stderr = TRUE, timeout = 600)
# launch_log <- head(output, -1)
# cat(launch_log[!grepl("site-packages", launch_log)], sep = "\n")
# record <- json$loads(tail(output, 1))

# %% [markdown]
# Reading the log: both workers print "Number of devices: 2", the number of replicas in sync across
# the cluster (one per worker here); each trains the same epochs and prints the same metrics,
# because the metrics are all-reduced too. The evaluator evaluates each new checkpoint it finds
# (`ckpt-52` after epoch 1, `ckpt-104` after epoch 2); when training outpaces it, as it can on a
# small dataset, it skips to the newest one, and it always evaluates the last.

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # The chief's result record (the --json line): epochs, replicas, and the final weights of each worker.
# cat(sprintf("engine %s, strategy %s, %d replicas in sync\n", record$engine, record$strategy, record$replicas))
# cat(sprintf("epochs trained: %d of %d, global batch %d = %d x %d\n", record$epochs_run, record$epochs,
#             record$global_batch_size, record$replicas, record$per_replica_batch_size))
# cat("identical final weights:",
#     length(unique(vapply(record$workers, function(worker) worker$weights_sha256, ""))) == 1, "\n")
# cat("the evaluator evaluated the last checkpoint:", record$evaluator$final$epoch == record$epochs, "\n")

# %% magic_args="-w 9 -h 3.6 --units in -r 100" language="R"
# # Plot what the cluster learned: the chief's training loss per step, and validation accuracy per epoch.
# steps <- data.frame(epoch = unlist(record$steps$epoch), step = unlist(record$steps$step),
#                     loss = unlist(record$steps$loss))
# history <- data.frame(epoch = unlist(record$history$epoch) + 1L,
#                       val_accuracy = unlist(record$history$val_sparse_categorical_accuracy))
# evaluations <- data.frame(
#   epoch = vapply(record$evaluator$evaluations, function(e) as.numeric(e$epoch), 0),
#   val_accuracy = vapply(record$evaluator$evaluations, function(e) e$val_sparse_categorical_accuracy, 0)
# )
# par(mfrow = c(1, 2), mar = c(4, 4.5, 2.5, 1), oma = c(0, 0, 1.5, 0), las = 1, cex.main = 1)
# plot(steps$epoch + steps$step / max(steps$step), steps$loss, type = "l", col = "steelblue",
#      xlab = "epoch", ylab = "loss", main = "Training loss (running epoch mean)")
# plot(history$epoch, history$val_accuracy, type = "o", pch = 19, col = "steelblue", xaxt = "n",
#      ylim = range(history$val_accuracy, evaluations$val_accuracy) + c(-0.01, 0.01), xlab = "epoch", ylab = "accuracy",
#      main = "Validation accuracy")
# axis(1, at = history$epoch)
# points(evaluations$epoch, evaluations$val_accuracy, pch = 4, cex = 2.5, col = "darkorange")
# legend("topleft", c("workers (end of each epoch)", "evaluator (checkpoints)"), bty = "n",
#        col = c("steelblue", "darkorange"), pch = c(19, 4), lty = c(1, NA))
# mtext("2 workers, MultiWorkerMirroredStrategy, kerasdist's loop", outer = TRUE)

# %% language="R"
# # What the evaluator evaluated, and the training history the chief logged.
# for (evaluation in record$evaluator$evaluations)
#   cat(sprintf("evaluator: %s (epoch %d): val accuracy %.4f\n", basename(evaluation$checkpoint),
#               evaluation$epoch, evaluation$val_sparse_categorical_accuracy))
# for (i in seq_along(record$history$loss))
#   cat(sprintf("epoch %d: loss %.4f, val accuracy %.4f\n", i, record$history$loss[[i]],
#               record$history$val_sparse_categorical_accuracy[[i]]))

# %% [markdown]
# ## Performance tips
#
# - **One worker per machine**, each with all of its GPUs: `MultiWorkerMirroredStrategy` uses every
#   local GPU of a worker as a replica, and the all-reduce runs first inside a machine, then across.
# - **Choose the all-reduce implementation**: `tf$distribute$experimental$CommunicationOptions(
#   implementation = "NCCL")` on NVIDIA GPUs, `"RING"` (gRPC) otherwise; `"AUTO"` picks one.
# - **The network is the new bottleneck**: gradients cross it every step. Larger per-worker batches
#   (fewer steps) and many steps per `tf_function()` call help; so does a fast interconnect.
# - **Shard the input** by files where you can (`AutoShardPolicy$FILE`), so each worker reads only
#   its own; kerasdist's in-memory data is sharded by data (lesson 4).
# - **Set a collective timeout** (`CommunicationOptions(timeout_seconds = ...)`; kerasdist's
#   `--collective-timeout-s`), so that a dead worker stops the others instead of hanging them, and
#   rerun the same command to resume from the last checkpoint.

# %% [markdown]
# ## Summary
#
# - `TF_CONFIG` gives every process the same `cluster` (roles -> `host:port` lists) and its own
#   `task` (role and index); kerasdist's `tf_config()`, `parse_tf_config()` and `local_cluster()`
#   build and check it.
# - Chief and workers train and all-reduce; the chief (or worker 0) keeps the checkpoints; an
#   evaluator evaluates them on the side; `ps` belongs to `ParameterServerStrategy` only.
# - Keras 3 `fit()` fails under `MultiWorkerMirroredStrategy` today (keras-team/keras#20585), from
#   R as from Python; a custom loop (here kerasdist's, on a keras3 model) trains the same model, and
#   the workers end with identical weights.
# - `kerasdist launch --workers N` runs such a cluster on one machine; `kerasdist worker` is the
#   command to start on each machine of a real one.

# %% [markdown]
# ## Exercises
#
# 1. Run the launch again with `--epochs 3` and the same `--checkpoint-dir`. Which epochs are
#    trained, and what does the evaluator evaluate?
# 2. Change `index = 1L` to `index = 2L` in worker 1's `TF_CONFIG`. What does `parse_tf_config()`
#    say? What would TensorFlow do with it?
# 3. In `fit_then_loop.R`, call `loop$train()` twice with half the steps each. Are the final
#    weights the same as with one call? Why?
# 4. Launch with `--workers 3 --global-batch-size 63`, then with `--global-batch-size 64`. What does
#    kerasdist say, and why?
