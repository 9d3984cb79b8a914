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
# # The strategy map: five strategies, one scope, and model parallelism (R, keras3)
#
# This is the R twin of [06_strategy_map.ipynb](06_strategy_map.ipynb): the same workflow and the
# same sections, written with the R packages keras3, tfdatasets and tensorflow. The notebook runs
# on a Python kernel; the R code lives in `%%R` cells (rpy2), and R draws the figures too
# (`%%R -w -h` sets a figure's size in inches).
#
# **What you'll learn**
#
# - the five `tf$distribute` strategies of the classic guides (Mirrored, CentralStorage,
#   MultiWorkerMirrored, ParameterServer, TPU): what each does, which of them run on one machine
#   (ParameterServer too, as a cluster inside one process), and which Keras 3 can train with;
# - how `MirroredStrategy` sums gradients by default (collective all-reduce), and what kerasdist's
#   `mirrored` does differently on CPUs;
# - how to switch strategy by changing only the scope the model is built in, and what to check when
#   you do;
# - that a saved model does not depend on the strategy it was trained under: save under
#   `MirroredStrategy`, load under another strategy or none;
# - model parallelism by device placement (`tf$device()`, the manual way: you place each layer yourself):
#   a model whose two halves live on two devices (pipeline parallelism without micro-batches, and
#   its idle "bubble"), contrasted with data parallelism, and where DTensor and Keras 3's
#   `keras.distribution` stand;
# - a custom training loop under `MirroredStrategy`, written cell by cell as in TensorFlow's
#   "Custom training with tf.distribute.Strategy" tutorial, that matches `fit()` step for step.
#
# **What you need**: R with the packages keras3, tfdatasets and tensorflow
# (`install.packages(c("keras3", "tfdatasets"))`), rpy2 in the kernel's Python environment, and
# about a minute on a 2-core CPU. The data is full MNIST when Keras has it cached or can download
# it, otherwise a 5,000-digit sample of real MNIST digits (offline). The stored outputs come from a
# run on that sample; `bash scripts/run_notebooks.sh --r-twins` runs the notebook again.

# %% [markdown]
# ## Introduction
#
# A `tf$distribute` strategy decides where a model's variables live and how the work of a training
# step is spread over devices. The model code stays the same: you build and compile the model inside
# `with(strategy$scope(), ...)`, and `fit()` does the rest.
#
# | strategy | parallelism | updates | where the variables live | needs |
# |---|---|---|---|---|
# | `MirroredStrategy` | data, one machine | synchronous (all-reduce) | a copy on every device | 1 machine, N devices |
# | `CentralStorageStrategy` (experimental) | data, one machine | synchronous | once, on the CPU (or the one GPU) | 1 machine, N devices |
# | `MultiWorkerMirroredStrategy` | data, many machines | synchronous (collective all-reduce) | a copy on every device of every worker | a cluster described by `TF_CONFIG` |
# | `ParameterServerStrategy` | data, many machines | asynchronous | on parameter-server tasks | `worker` and `ps` tasks, and a coordinator (the chief) that schedules the steps; Keras 3 cannot train with it |
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
# The Python side loads rpy2's `%%R` magic and imports kerasdist and Keras, which starts TensorFlow
# with its C++ start-up lines kept out of the cell outputs. R then attaches keras3 and friends; reticulate
# uses this very Python process, so R and Python share one TensorFlow. `KERASDIST_DATA` chooses
# the data: `auto` (the default) takes full MNIST when available; the test suite sets it to `sample`.
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
# # Attach keras3 (models), tfdatasets (input pipelines), tensorflow (tf$distribute) and reticulate, then settings.
# library(keras3)
# library(tfdatasets, exclude = "shape")
# library(tensorflow, exclude = c("shape", "set_random_seed"))
# library(reticulate)
# library(kerasdist)  # the course's R package: this lesson's checked exercises
# ex <- kd_exercises("06")
# data_source <- Sys.getenv("KERASDIST_DATA", "auto")
# num_replicas <- 2L
# global_batch_size <- 64L
# warmup_steps <- 5L  # steps left out of the throughput: the first one traces the training step
# work_dir <- file.path("results", "06_strategy_map_R")  # for the parameter-server script
# dir.create(work_dir, recursive = TRUE, showWarnings = FALSE)

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # Make the devices: GPUs, one GPU split in two, or (here) two virtual CPU devices.
# kerasdist <- import("kerasdist")
# devices <- unlist(kerasdist$configure_replicas(num_replicas))
# print(devices)

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # Load the digits with kerasdist's loader; it says which source it used and the sample counts.
# data <- kerasdist$load_mnist(data_source)
# x_train <- data$x_train
# y_train <- data$y_train
# x_val <- data$x_val
# y_val <- data$y_val

# %% [markdown]
# ## Which strategies run here
#
# kerasdist's `make_strategy()` builds a strategy by name. For two it raises an error that says
# why, instead of TensorFlow's own message: `tpu` needs a TPU, and `parameter_server` is one that
# Keras 3 cannot train with (below).

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # Try every strategy by name: build it, or show why kerasdist does not.
# # The first line of a Python error, without its class name.
# python_message <- function(error) {
#   sub("^[[:alnum:]_.]*Error: ", "", strsplit(conditionMessage(error), "\n")[[1]][1])
# }
# strategy_names <- c("default", "one_device", "mirrored", "central_storage", "multi_worker",
#                     "parameter_server", "tpu")
# for (name in strategy_names) {
#   tryCatch({
#     strategy <- kerasdist$make_strategy(name, num_replicas = num_replicas, verbose = FALSE)
#     cat(sprintf("%-17s runs: %s, %d replica(s)\n", name, strategy$`__class__`$`__name__`,
#                 strategy$num_replicas_in_sync))
#   }, error = function(error) cat(sprintf("%-17s not built: %s\n", name, python_message(error))))
# }

# %% [markdown]
# Three remarks on that list:
#
# - `multi_worker` builds, but without a `TF_CONFIG` describing a cluster it is a cluster of one
#   worker with one replica (its class is called `CollectiveAllReduceStrategy` inside TensorFlow).
#   Lesson 5 starts a real two-worker cluster on this machine. TensorFlow may warn that collective
#   ops were "not configured at program startup": this strategy was created after TensorFlow had
#   started. That is harmless for this one-worker strategy; in a cluster (with a `TF_CONFIG`) the
#   same late start is an error, "Collective ops must be configured at program startup", so a
#   worker creates the strategy before any other TensorFlow op, model or dataset (lesson 5).
# - `default` and `one_device` are single-device strategies, whatever `num_replicas` says.
# - `mirrored` is `MirroredStrategy` over the replica devices, with one choice of kerasdist's own:
#   on CPU devices it sums gradients with `ReductionToOneDevice` (copy the gradients to one device,
#   add them there, copy the sum back). TensorFlow's default, without `cross_device_ops`, is a
#   `CollectiveAllReduce`: RING on CPUs and on virtual GPUs, NCCL on physical GPUs
#   (`_make_collective_ops_with_fallbacks` in `tensorflow/python/distribute/mirrored_strategy.py`);
#   it falls back to `ReductionToOneDevice` only for a mix of CPUs and GPUs, or in TensorFlow 1's
#   graph mode with a device that is not a GPU. kerasdist avoids the collective on CPUs because
#   two collective `MirroredStrategy`s
#   with different replica counts in one process clash over their group keys; both sum the same
#   gradients. Every "mirrored" result below is kerasdist's `ReductionToOneDevice` one; the next cell
#   shows both.

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # How each MirroredStrategy sums gradients on these devices: TensorFlow's default, and kerasdist's "mirrored".
# # The strategy's cross-device ops (a private attribute, fine for a look), with its implementation.
# all_reduce_of <- function(strategy) {
#   cross_device_ops <- strategy$extended$`_cross_device_ops`
#   paste0(cross_device_ops$`__class__`$`__name__`,
#          if (py_has_attr(cross_device_ops, "_options"))
#            sprintf(" (%s)", cross_device_ops$`_options`$implementation$name) else "")
# }
# plain_mirrored <- tf$distribute$MirroredStrategy(devices = as.list(devices))
# cat("tf.distribute.MirroredStrategy(devices):", all_reduce_of(plain_mirrored), "\n")
# cat("kerasdist.make_strategy('mirrored'):    ",
#     all_reduce_of(kerasdist$make_strategy("mirrored", num_replicas = num_replicas, verbose = FALSE)), "\n")

# %% [markdown]
# TensorFlow's own errors for the last two strategies are less helpful:

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # TensorFlow's own messages when the parameter-server and TPU strategies are built bare.
# tryCatch(tf$distribute$experimental$ParameterServerStrategy(),
#          error = function(error) cat(strsplit(conditionMessage(error), "\n")[[1]][1], "\n"))
# tryCatch(tf$distribute$TPUStrategy(),
#          error = function(error) cat(strsplit(conditionMessage(error), "\n")[[1]][1], "\n"))

# %% [markdown]
# `TPUStrategy` needs a TPU system to connect to; virtual CPU devices cannot stand in for one.
#
# `ParameterServerStrategy` needs a `cluster_resolver` that describes `worker` and `ps` tasks. The
# variables live on the parameter servers (`ps`); each worker reads them, computes an update on its
# own batches and sends it back **asynchronously**, without waiting for the other workers; a
# coordinator (in TensorFlow 2, the chief: the program you run) creates the variables and schedules
# every step on a free worker with `tf$distribute$experimental$coordinator$ClusterCoordinator`.
# The tasks are usually processes on other machines, but TensorFlow's parameter-server tutorial
# starts them inside one process, one `tf$distribute$Server` per task. The R script below does the
# same (with `Rscript`, a process of its own, so that this session keeps its two devices): two
# workers and one parameter server, with the script as the coordinator. The step function is an R
# function made into a graph by `tf_function()`: the coordinator only traces it (on R's main
# thread) and ships the graph to the workers, so no R code runs on TensorFlow's threads.

# %%
# %%writefile results/06_strategy_map_R/parameter_server.R
# ParameterServerStrategy in one process: two workers and a parameter server, and this script as coordinator.
library(tensorflow, exclude = c("shape", "set_random_seed"))
library(reticulate)
num_workers <- 2L
num_ps <- 1L
steps <- 20L
free_port <- function() {
  socket <- import("socket")$socket()
  socket$bind(tuple("127.0.0.1", 0L))
  port <- socket$getsockname()[[2]]
  socket$close()
  port
}
# The cluster: each worker and parameter server is a tf$distribute$Server on a local port of this process.
addresses <- function(n) as.list(vapply(seq_len(n), function(i) sprintf("127.0.0.1:%d", free_port()), ""))
cluster <- tf$train$ClusterSpec(list(worker = addresses(num_workers), ps = addresses(num_ps)))
config <- tf$compat$v1$ConfigProto(inter_op_parallelism_threads = num_workers + 1L)  # enough threads on 2 cores
servers <- list()
for (job in c("worker", "ps"))
  for (index in seq_len(cluster$num_tasks(job)) - 1L)
    servers[[length(servers) + 1L]] <- tf$distribute$Server(cluster, job_name = job, task_index = index,
                                                           protocol = "grpc", config = config)

# The coordinator: the strategy, a variable (placed on the parameter server), and steps scheduled on the workers.
resolver <- tf$distribute$cluster_resolver$SimpleClusterResolver(cluster, rpc_layer = "grpc")
strategy <- tf$distribute$experimental$ParameterServerStrategy(resolver)
coordinator <- tf$distribute$experimental$coordinator$ClusterCoordinator(strategy)
with(strategy$scope(), steps_taken <- tf$Variable(0L, dtype = tf$int64))
step <- tf_function(function() {
  steps_taken$assign_add(1L)  # runs on whichever worker is free; the variable lives on the parameter server
  steps_taken$read_value()
})
results <- lapply(seq_len(steps), function(i) coordinator$schedule(step))
coordinator$join()  # wait for every scheduled step
cat(sprintf("%s: %d servers in this process (%d workers, %d parameter server)\n",
            strategy$`__class__`$`__name__`, length(servers), num_workers, num_ps))
cat(sprintf("the variable lives on /job:%s\n", sub("/.*", "", sub(".*/job:", "", steps_taken$device))))
cat(sprintf("%d steps scheduled, %d finished; the variable counted %d\n", length(results),
            sum(vapply(results, function(result) as.numeric(result$fetch()) > 0, TRUE)),
            as.integer(steps_taken$numpy())))

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # Run it with Rscript; the servers and the coordinator live and die with that one process.
# parameter_server_run <- processx::run(file.path(R.home("bin"), "Rscript"), file.path(work_dir, "parameter_server.R"),
#                                       env = c("current", RETICULATE_PYTHON = py_config()$python),
#                                       timeout = 300, error_on_status = FALSE)
# cat(if (parameter_server_run$status == 0) parameter_server_run$stdout else
#   substring(parameter_server_run$stderr, nchar(parameter_server_run$stderr) - 3000))

# %% [markdown]
# So the strategy *runs* on one machine. What Keras 3 cannot do is train with it: `fit()` would have
# to schedule its steps through a `ClusterCoordinator`, and nothing in Keras 3's source names
# either class. That, not the cluster, is why kerasdist's `make_strategy()` refuses
# `parameter_server` (TensorFlow's parameter-server tutorial trains with Keras 2's `fit()`, the
# `tf_keras` Python package).

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # Does Keras 3 know these classes? The files of its source that name them.
# keras_source <- file.path(dirname(import("keras")$`__file__`), "src")
# sources <- list.files(keras_source, pattern = "\\.py$", recursive = TRUE, full.names = TRUE)
# named <- Filter(function(path) any(grepl("ParameterServerStrategy|ClusterCoordinator", readLines(path, warn = FALSE))),
#                 sources)
# cat(sprintf("Keras 3's source: %d files name ParameterServerStrategy or ClusterCoordinator\n", length(named)))

# %% [markdown]
# ### Exercise q1: a MirroredStrategy that sums on one device
#
# Write a function `make_mirrored(devices)` that returns a `MirroredStrategy` with one replica per device in `devices`, summing the gradients with `ReductionToOneDevice`, as kerasdist's `mirrored` does on CPUs. The check calls it with several device lists (both devices, one of them, both in the other order) and looks at which devices the strategy uses and what it sums with.
#
# Complete the cell, then run the check below it; `kd_hint(ex$q1)` gives a hint, `kd_solution(ex$q1)` the solution.
#
# <details><summary>Solution</summary>
#
# `MirroredStrategy` takes the devices to mirror on (one replica each) and, as `cross_device_ops`, the object that sums the replicas' gradients. Without it TensorFlow chooses a `CollectiveAllReduce` (RING here, NCCL on GPUs); `ReductionToOneDevice()` copies the gradients to one device, adds them there and copies the sum back. Both give the same sums.
#
# </details>

# %% nbgrader={"grade": false, "grade_id": "q1_answer", "locked": false, "schema_version": 3, "solution": true, "task": false} language="R"
# make_mirrored <- NULL  # a function of (devices) that returns a MirroredStrategy
# ### BEGIN SOLUTION
# make_mirrored <- function(devices) {
#   tf$distribute$MirroredStrategy(devices = as.list(devices),
#                                  cross_device_ops = tf$distribute$ReductionToOneDevice())
# }
# ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "q1", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false} language="R"
# # NBVAL_CHECK_OUTPUT
# kd_check(ex$q1)
# ### BEGIN HIDDEN TESTS
# kd_assert_correct(ex$q1)
# ### END HIDDEN TESTS

# %% [markdown]
# ## Switching strategy by changing only the scope
#
# The same function trains the same model under four strategies; only the scope changes. The
# seed, the data and its order are the same in every run, so the four runs should agree.
# For each one we look at what kind of variable the scope created and where it lives, and we
# compare what `fit()` and `evaluate()` *report* with the validation accuracy we compute ourselves
# from the model's predictions. A small callback notes when each training step ends, so that we can
# measure the steady speed of training: the global batch over the median time of a step, leaving
# out the first steps (the first one traces the training step into a graph). The median, unlike
# the mean, is not thrown off by a step that waited for a busy CPU.

# %% language="R"
# # A callback that notes when each training step ends.
# step_end_times <- callback_lambda(
#   on_train_begin = function(logs) step_ends <<- numeric(),
#   on_train_batch_end = function(batch, logs) step_ends <<- c(step_ends, as.numeric(Sys.time()))
# )
# # Samples per second of a typical step: the global batch over the median step time after warmup_steps.
# steady_samples_per_second <- function(ends) global_batch_size / median(diff(ends[-seq_len(warmup_steps)]))

# %% language="R"
# # The guide's MLP (784-256-256-10, get_compiled_model() of the keras.io guide "Multi-GPU distributed
# # training with TensorFlow") and the data, then a function that trains one epoch under a strategy and
# # describes it.
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
# train_batches <- tensor_slices_dataset(list(np_array(x_train, dtype = "float32"),
#                                             np_array(y_train, dtype = "int32"))) |>
#   dataset_shuffle(nrow(x_train), seed = 0L, reshuffle_each_iteration = FALSE) |>
#   dataset_batch(global_batch_size, drop_remainder = TRUE) |>
#   dataset_prefetch()
# val_images <- np_array(x_val, dtype = "float32")
# val_batches <- tensor_slices_dataset(list(val_images, np_array(y_val, dtype = "int32"))) |>
#   dataset_batch(global_batch_size)
#
# train_under <- function(strategy) {
#   set_random_seed(0)
#   with(strategy$scope(), model <- build_model())
#   history <- model |> fit(train_batches, epochs = 1, shuffle = FALSE, verbose = 0,
#                           callbacks = list(step_end_times))
#   reported <- model |> evaluate(val_batches, verbose = 0)
#   logits <- as.array(model(val_images, training = FALSE))
#   kernel <- model$weights[[1]]$value
#   copies <- if (py_has_attr(kernel, "values")) kernel$values else list(kernel)  # one per device if mirrored
#   list(
#     model = model,
#     replicas = strategy$num_replicas_in_sync,
#     variable = kernel$`__class__`$`__name__`,
#     lives_on = paste(vapply(copies, function(copy) sub(".*device:", "", copy$device), ""), collapse = ", "),
#     reported_loss = history$metrics$loss[1],
#     reported_val_acc = reported$sparse_categorical_accuracy,
#     recomputed_val_acc = mean(max.col(logits, ties.method = "first") - 1L == y_val),
#     weights = get_weights(model),
#     steps = length(step_ends),
#     samples_per_second = steady_samples_per_second(step_ends)
#   )
# }

# %% language="R"
# # The same training under four strategies (under half a minute on an idle machine).
# runs <- list()
# for (name in c("default", "one_device", "mirrored", "central_storage"))
#   runs[[name]] <- train_under(kerasdist$make_strategy(name, num_replicas = num_replicas, verbose = FALSE))

# %% [markdown]
# **Predict, then run.** Under `MirroredStrategy` each of the two replicas sees only half of every
# batch. After one epoch, will its weights equal the default strategy's up to float rounding (the
# check below allows 1e-3: see why under the table), or differ visibly? And under
# `CentralStorageStrategy`? Decide, then run the next two cells.

# %% language="R"
# # What each strategy created, and how far its weights are from the default strategy's.
# cat(sprintf("%-16s %8s %20s %12s %9s %10s %18s %14s\n", "strategy", "replicas", "variable", "lives on",
#             "max |dw|", "loss (fit)", "val acc (evaluate)", "val acc (ours)"))
# for (name in names(runs)) {
#   run <- runs[[name]]
#   difference <- max(mapply(function(a, b) max(abs(a - b)), run$weights, runs$default$weights))
#   runs[[name]]$max_dw <- difference
#   cat(sprintf("%-16s %8d %20s %12s %9.1e %10.4f %18.4f %14.4f\n", name, run$replicas, run$variable,
#               run$lives_on, difference, run$reported_loss, run$reported_val_acc, run$recomputed_val_acc))
# }

# %% language="R"
# # Check the prediction: at a fixed global batch, every strategy trains the same weights up to float rounding.
# for (name in names(runs))
#   if (runs[[name]]$max_dw >= 1e-3)
#     stop(sprintf("%s: weights differ from the default strategy's by %.1e", name, runs[[name]]$max_dw))
# cat("all four strategies trained the same weights, to within 1e-3\n")

# %% [markdown]
# What the table shows:
#
# - **Variables.** Without a distributed scope, variables are plain `ResourceVariable`s.
#   `MirroredStrategy` makes a `MirroredVariable`: one copy per device, kept equal by applying the
#   same all-reduced update everywhere (here summed with kerasdist's `ReductionToOneDevice`;
#   end-of-lesson exercise 1 trains under TensorFlow's default collective all-reduce). `CentralStorageStrategy` makes an `AggregatingVariable`: a
#   single copy on the CPU that both replicas read and update.
# - **Same training.** The weights after one epoch agree to float rounding (`max |dw|` is the
#   largest difference from the default strategy's weights): at a fixed global batch, 2 synchronous
#   replicas compute the same updates as one device, only the order of the floating-point sums
#   differs. Why the check allows 1e-3: Adam divides each gradient by its own running size, so a
#   weight whose gradient is tiny, yet well above Adam's epsilon (1e-7), still takes a step of about
#   the learning rate (1e-3 here); where rounding, grown over the steps, flips the sign of such a
#   gradient, the two runs can step that weight up to twice the learning rate apart. (A gradient
#   far below epsilon barely moves its weight.) How often that happens depends on the
#   CPU's matrix kernels, so the same code gives smaller or larger gaps on another CPU (the test
#   suite runs this lesson with an older instruction set too). That holds for this MLP because it has no BatchNormalization and no dropout. A
#   BatchNormalization layer normalises each replica's share with that share's own mean and variance
#   (a batch of 32 here, not 64), unless it is built with `synchronized=True`, which all-reduces the
#   statistics across replicas; dropout draws its masks from one seed that every replica shares, so
#   the replicas' masks are the same rows, not independent ones (lesson 1 prints them). Lesson 3 runs
#   the BatchNormalization case, 2 replicas against one device
#   ([03_convergence_R.ipynb](03_convergence_R.ipynb)).
# - **Check the reported metrics.** Under `CentralStorageStrategy` the model is right (our own
#   accuracy matches the others), but the loss that `fit()` reports and the accuracy that
#   `evaluate()` reports are not: with Keras 3 the metric variables are not aggregated correctly
#   under this strategy (reproduced with Keras 3.15 and TensorFlow 2.21). It is still marked
#   experimental; prefer `MirroredStrategy`, and when you switch strategy, check one metric by hand.

# %% [markdown]
# How fast did each strategy train? The chart shows the steady-state throughput, in samples per
# second: the global batch over the median step time, with tracing and warm-up left out.

# %% magic_args="-w 8 -h 4 --units in -r 100" language="R"
# # Steady-state throughput under each strategy, with a note on what the replicas share here.
# speeds <- vapply(runs, function(run) run$samples_per_second, 0)
# bar_labels <- ifelse(names(speeds) == "mirrored", "mirrored\n(ReductionToOneDevice)", names(speeds))
# par(mar = c(7, 12, 3, 2), cex.main = 1)
# bars <- barplot(rev(speeds), names.arg = rev(bar_labels), horiz = TRUE, las = 1, col = "steelblue",
#                 xlim = c(0, max(speeds)) * 6 / 5, xlab = "samples/s",
#                 main = "fit() under each strategy: steady-state throughput\n(higher is better)")
# text(rev(speeds), bars, sprintf("%.0f", rev(speeds)), pos = 4)
# mtext(sprintf("The %d replicas are virtual CPU devices sharing the same cores:\nhere more replicas cannot be faster.",
#               num_replicas), side = 1, line = 5, col = "red3")
# cat(sprintf("steady state (median step of steps %d..%d of the epoch): %s samples/s\n", warmup_steps + 2L,
#             runs$default$steps,
#             paste(names(speeds), sprintf("%.0f", speeds), collapse = ", ")))

# %% [markdown]
# On this machine the two replicas are virtual devices sharing the same CPU cores, so more
# replicas cannot make training faster: they add the cost of splitting batches and all-reducing
# gradients, with no extra hardware to spend them on. The same sharing makes the bars jump from
# run to run when other programs use the CPU: compare them only on an idle machine, and read them
# as "no faster", not as a ranking. On a machine with N GPUs the same code runs
# N replicas on N devices: the computation of a step is divided by N, while the all-reduce and the
# input pipeline are not. Lesson 3 ([03_convergence_R.ipynb](03_convergence_R.ipynb)) writes this
# as a labelled cost model, step time = computation / N + all-reduce + input, with its parameters
# stated: that is what changes on real GPUs.

# %% [markdown]
# ## Saving under one strategy, loading under another
#
# A saved model does not record the strategy it was trained under. A `MirroredVariable` holds one
# copy per replica, but saving writes one plain value per variable, the first replica's, as for an
# ordinary variable. Since the copies are equal (they start equal and every replica applies the same
# all-reduced update), nothing is lost; BatchNormalization's unsynchronized moving statistics are
# the exception (lesson 1). Loading then creates whatever variables the *current* scope makes: plain
# ones with no strategy, mirrored ones under `MirroredStrategy`, an aggregating one under
# `CentralStorageStrategy`. That is how you train on several GPUs and predict on one CPU, or resume
# on a machine with another number of devices. The same holds for `tf$train$Checkpoint` (lesson 2).
#
# **Predict, then run.** The model trained under `MirroredStrategy` above keeps two copies of
# each weight and of each optimizer variable. How many arrays per variable will its saved file
# hold: one, or one per replica? Decide, then run.

# %% language="R"
# # Save the model trained under MirroredStrategy: whole (.keras), and its weights alone (.weights.h5).
# mirrored_model <- runs$mirrored$model
# save_dir <- tempfile("strategy_map_")
# dir.create(save_dir)
# model_file <- file.path(save_dir, "mirrored.keras")
# weights_file <- file.path(save_dir, "mirrored.weights.h5")
# save_model(mirrored_model, model_file)
# save_model_weights(mirrored_model, weights_file)
#
# # Count the copies in memory and the arrays in the weights file.
# saved_variables <- c(mirrored_model$weights, mirrored_model$optimizer$variables)
# copies_in_memory <- sum(vapply(saved_variables, function(variable) {
#   if (py_has_attr(variable$value, "values")) length(variable$value$values) else 1L
# }, 0L))
# arrays_in_file <- character()
# h5py <- import("h5py")
# saved <- h5py$File(weights_file, "r")
# saved$visititems(function(name, item) {
#   if (inherits(item, "h5py._hl.dataset.Dataset")) arrays_in_file <<- c(arrays_in_file, name)
#   NULL
# })
# saved$close()
# cat(sprintf("in memory: %d variables (weights and optimizer state), %d copies; in the file: %d arrays\n",
#             length(saved_variables), copies_in_memory, length(arrays_in_file)))

# %% language="R"
# # Check the prediction: one array per variable, however many replicas held a copy.
# stopifnot(length(arrays_in_file) == length(saved_variables), length(saved_variables) < copies_in_memory)
# cat("the file holds one array per variable\n")

# %% [markdown]
# Now load the file with no strategy, under `OneDeviceStrategy` and under `CentralStorageStrategy`,
# and load the weights alone into a model built under `OneDeviceStrategy`. Each must predict what
# the mirrored model predicts and carry on from the same optimizer step. (Keras builds a model's
# optimizer state at the first training step; build it before `load_model_weights()`, so that the
# file's optimizer variables have somewhere to go.)

# %% language="R"
# # Load under another strategy, or none, and compare weights, predictions and optimizer step with the original.
# reference_logits <- as.array(mirrored_model(val_images, training = FALSE))
# saved_step <- as.integer(mirrored_model$optimizer$iterations$numpy())
# loaded <- list(`no strategy` = load_model(model_file))
# for (name in c("one_device", "central_storage"))
#   with(kerasdist$make_strategy(name, num_replicas = num_replicas, verbose = FALSE)$scope(),
#        loaded[[name]] <- load_model(model_file))
# with(kerasdist$make_strategy("one_device", num_replicas = num_replicas, verbose = FALSE)$scope(), {
#   from_weights <- build_model()
#   from_weights$optimizer$build(from_weights$trainable_variables)
# })
# load_model_weights(from_weights, weights_file)
# loaded[["one_device, weights only"]] <- from_weights
#
# cat(sprintf("saved under mirrored: optimizer step %d\n", saved_step))
# loads <- list()
# for (name in names(loaded)) {
#   model <- loaded[[name]]
#   loads[[name]] <- list(
#     variable = model$weights[[1]]$value$`__class__`$`__name__`,
#     same_weights = all(mapply(identical, get_weights(model), get_weights(mirrored_model))),
#     max_dlogit = max(abs(as.array(model(val_images, training = FALSE)) - reference_logits)),
#     step = as.integer(model$optimizer$iterations$numpy())
#   )
#   with(loads[[name]], cat(sprintf("loaded with %-25s %20s: same weights %s, max |dlogit| %.1e, optimizer step %d\n",
#                                   name, variable, same_weights, max_dlogit, step)))
# }

# %% language="R"
# # The loaded models are the trained model: equal weights, equal predictions, the same optimizer step.
# for (name in names(loads))
#   with(loads[[name]], if (!same_weights || max_dlogit >= 1e-5 || step != saved_step)
#     stop(sprintf("%s does not reproduce the model trained under MirroredStrategy", name)))
# cat("every load reproduces the model trained under MirroredStrategy\n")

# %% [markdown]
# ### Exercise q2: load a saved model under a strategy
#
# Write a function `load_under(path, strategy)` that loads the `.keras` file at `path` so that the model's variables are mirrored by `strategy`, and returns the model. The check saves a model, calls your function with a `MirroredStrategy` on 2 devices (and again with another model, on the devices in the other order), and compares the weights.
#
# Complete the cell, then run the check below it; `kd_hint(ex$q2)` gives a hint, `kd_solution(ex$q2)` the solution.
#
# <details><summary>Solution</summary>
#
# The file holds one value per variable; the scope that is current while Keras loads it decides what kind of variables the model gets. Inside `with(strategy$scope(), ...)` they are `MirroredVariable`s, one copy per replica, filled from that one value; without a scope they are plain variables on one device.
#
# </details>

# %% nbgrader={"grade": false, "grade_id": "q2_answer", "locked": false, "schema_version": 3, "solution": true, "task": false} language="R"
# load_under <- NULL  # a function of (path, strategy) that returns the loaded model
# ### BEGIN SOLUTION
# load_under <- function(path, strategy) {
#   with(strategy$scope(), model <- load_model(path))
#   model
# }
# ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "q2", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false} language="R"
# # NBVAL_CHECK_OUTPUT
# kd_check(ex$q2)
# ### BEGIN HIDDEN TESTS
# kd_assert_correct(ex$q2)
# ### END HIDDEN TESTS

# %% [markdown]
# ## A custom training loop
#
# `fit()` hides the training loop. TensorFlow's tutorial *Custom training with
# tf.distribute.Strategy* writes it out, and it is worth doing once: it is what runs where `fit()`
# cannot (lesson 5: under `MultiWorkerMirroredStrategy`), and each of its lines says how a
# synchronous step works. We write it here cell by cell under `MirroredStrategy` with 2 replicas
# (kerasdist's `mirrored`, which sums with `ReductionToOneDevice`), train the guide's MLP with it
# for one epoch, and check step by step that it does what `fit()`
# does on the same batches in the same order. To show how a regularization loss is handled, the MLP
# gets an L2 penalty on its kernels (`l2_factor` times the sum of their squares).
#
# First the data: `strategy$experimental_distribute_dataset()` splits every global batch into
# per-replica batches, as `fit()` does behind the scenes (lesson 4).

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # The strategy, and the batches that fit() gets above, distributed over its 2 replicas.
# strategy <- kerasdist$make_strategy("mirrored", num_replicas = num_replicas, verbose = FALSE)
# distributed_train <- strategy$experimental_distribute_dataset(train_batches)
# distributed_val <- strategy$experimental_distribute_dataset(val_batches)
# batch <- iter_next(as_iterator(distributed_train))
# cat(batch[[1]]$`__class__`$`__name__`, paste0("(", vapply(strategy$experimental_local_results(batch[[1]]),
#     function(part) paste(unlist(part$shape$as_list()), collapse = ", "), ""), ")"), "\n")

# %% [markdown]
# Everything that holds variables is created in the strategy's scope: the model, the optimizer
# (built at once, before the first `tf_function()` call, so that its slot variables are created
# mirrored), and the metrics. The loss is made with `reduction = NULL`: it returns one loss per
# example, and we do the averaging ourselves.

# %% language="R"
# # The guide's MLP with an L2 penalty on its kernels, its optimizer, the loss and the metrics, all in the scope.
# l2_factor <- 1e-4
# build_regularized_mlp <- function() {  # the guide's MLP, each kernel penalised by l2_factor x its sum of squares
#   inputs <- keras_input(shape = 784, name = "digits")
#   logits <- inputs |>
#     layer_dense(units = 256, activation = "relu", kernel_regularizer = regularizer_l2(l2_factor), name = "dense_1") |>
#     layer_dense(units = 256, activation = "relu", kernel_regularizer = regularizer_l2(l2_factor), name = "dense_2") |>
#     layer_dense(units = 10, kernel_regularizer = regularizer_l2(l2_factor), name = "logits")
#   keras_model(inputs, logits, name = "regularized_mlp")
# }
# set_random_seed(0)
# with(strategy$scope(), {
#   loop_model <- build_regularized_mlp()
#   optimizer <- optimizer_adam(learning_rate = 1e-3)
#   optimizer$build(loop_model$trainable_variables)
#   loss_object <- loss_sparse_categorical_crossentropy(from_logits = TRUE, reduction = NULL)
#   train_accuracy <- metric_sparse_categorical_accuracy(name = "train_accuracy")
#   val_loss <- metric_mean(name = "val_loss")
#   val_accuracy <- metric_sparse_categorical_accuracy(name = "val_accuracy")
# })

# %% [markdown]
# One training step, as one replica runs it on its share of the batch (32 examples):
#
# - `tf$nn$compute_average_loss(per_example_loss, global_batch_size = 64)` sums the replica's
#   per-example losses and divides by the **global** batch, not by the replica's 32. The optimizer's
#   `apply_gradients()` sums the replicas' gradients (the all-reduce), so the sum is the gradient of
#   the mean loss over the global batch, as on one device.
# - The L2 penalty does not depend on the batch: every replica holds all of it. Summed over 2
#   replicas it would count twice, so `tf$nn$scale_regularization_loss()` divides it by the number of
#   replicas in sync (`tensorflow/python/ops/nn_impl_distribute.py`).
# - The metric is updated on each replica with its own share; Keras made its variables
#   `SyncOnReadVariable`s in the scope, which sum the replicas' counts when the result is read.
#
# The step returns its loss in three numbers: the whole loss, the cross-entropy part and the L2 part.
#
# One thing cannot be R here: `strategy$run()` calls the replica step on Python threads that
# `MirroredStrategy` starts for the call, one per replica (`_call_for_each_replica` in
# `tensorflow/python/distribute/mirrored_run.py`), while R code runs only on R's main thread.
# reticulate hands an R function called from another thread to the main thread, which is busy
# waiting for those very threads: the step never ends (we tried). So the replica steps are a few
# lines of Python, made by a function that R calls with R's model, optimizer, loss and metrics;
# everything around them (`tf_function()`, `strategy$run()`, `strategy$reduce()`, the loop) is R.

# %% language="R"
# # One step on one replica (Python, see above): forward pass, loss over the GLOBAL batch plus the scaled
# # L2 term, update, metric; and one evaluation step. R passes in the objects they use.
# py_run_string("
# import tensorflow as tf
#
# def replica_steps(model, optimizer, loss_object, train_accuracy, val_loss, val_accuracy, global_batch_size):
#     def train_step_on_replica(images, labels):
#         with tf.GradientTape() as tape:
#             logits = model(images, training=True)
#             per_example_loss = loss_object(labels, logits)
#             cross_entropy = tf.nn.compute_average_loss(per_example_loss, global_batch_size=global_batch_size)
#             l2_penalty = tf.nn.scale_regularization_loss(tf.add_n(model.losses))
#             loss = cross_entropy + l2_penalty
#         gradients = tape.gradient(loss, model.trainable_variables)
#         optimizer.apply_gradients(zip(gradients, model.trainable_variables))
#         train_accuracy.update_state(labels, logits)
#         return tf.stack([loss, cross_entropy, l2_penalty])
#
#     def val_step_on_replica(images, labels):
#         logits = model(images, training=False)
#         val_loss.update_state(loss_object(labels, logits))
#         val_accuracy.update_state(labels, logits)
#
#     return train_step_on_replica, val_step_on_replica
# ")
# replica_steps <- py$replica_steps(loop_model, optimizer, loss_object, train_accuracy, val_loss, val_accuracy,
#                                   global_batch_size)
# train_step_on_replica <- replica_steps[[1]]
# val_step_on_replica <- replica_steps[[2]]

# %% [markdown]
# `strategy$run()` calls that function on every replica with its share of the batch and returns the
# replicas' results as one `PerReplica` value; `strategy$reduce()` sums them into the loss of the
# global batch. Inside a `tf_function()` the whole step becomes one graph; called eagerly,
# `strategy$run()` is slow (TensorFlow warns about it).

# %% language="R"
# # The distributed steps: run the replica step on every replica, in a tf_function(), and sum what they return.
# distributed_train_step <- tf_function(function(images, labels) {
#   per_replica <- strategy$run(train_step_on_replica, args = list(images, labels))
#   strategy$reduce(tf$distribute$ReduceOp$SUM, per_replica, axis = NULL)
# })
# # Evaluation: each replica updates the metrics with its share of a validation batch (the last one is uneven).
# distributed_val_step <- tf_function(function(images, labels) {
#   strategy$run(val_step_on_replica, args = list(images, labels))
#   NULL
# })

# %% [markdown]
# Now the loop itself: one epoch of training steps, then one pass over the validation set.

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # Train one epoch with the loop, step by step, then evaluate; the first call also traces the step.
# loop_losses <- NULL
# iterator <- as_iterator(distributed_train)
# while (!is.null(batch <- iter_next(iterator)))
#   loop_losses <- rbind(loop_losses, as.numeric(distributed_train_step(batch[[1]], batch[[2]])))
# iterator <- as_iterator(distributed_val)
# while (!is.null(batch <- iter_next(iterator))) distributed_val_step(batch[[1]], batch[[2]])
# cat(sprintf("%d steps; step 1: loss %.4f = %.4f (cross-entropy) + %.4f (L2)\n", nrow(loop_losses),
#             loop_losses[1, 1], loop_losses[1, 2], loop_losses[1, 3]))

# %% [markdown]
# **Predict, then run.** `fit()` now trains the same model (same seed, same scope) on the same
# batches. Will its per-step losses, which include the L2 term, equal the loop's to within 1e-4?
# Will its weights after the epoch? (`fit()` reports a running mean of the loss after each batch;
# the callback below recovers each step's own loss from it.)

# %% language="R"
# # fit() on the same model and batches, recording each step's loss, then evaluate() on the validation set.
# running_means <- numeric()
# step_losses <- callback_lambda(
#   on_train_begin = function(logs) running_means <<- numeric(),
#   on_train_batch_end = function(batch, logs) running_means <<- c(running_means, logs$loss)
# )
# # Each step's own loss from the running means; keras3 numbers batches from 1, so after step k the mean is over k.
# losses_from_running_means <- function(means) {
#   steps <- seq_along(means)
#   means * steps - c(0, head(means * steps, -1))
# }
# set_random_seed(0)
# with(strategy$scope(), {
#   fit_model <- build_regularized_mlp()
#   fit_model |> compile(optimizer = optimizer_adam(learning_rate = 1e-3),
#                        loss = loss_sparse_categorical_crossentropy(from_logits = TRUE),
#                        metrics = list(metric_sparse_categorical_accuracy()))
# })
# history <- fit_model |> fit(train_batches, epochs = 1, shuffle = FALSE, verbose = 0, callbacks = list(step_losses))
# evaluated <- fit_model |> evaluate(val_batches, verbose = 0)

# %% language="R"
# # Check the prediction: per-step losses, weights, and the metrics of the loop against fit() and evaluate().
# loss_difference <- max(abs(losses_from_running_means(running_means) - loop_losses[, 1]))
# weight_difference <- max(mapply(function(a, b) max(abs(a - b)), get_weights(loop_model), get_weights(fit_model)))
# # evaluate() reports the cross-entropy plus the model's L2 penalty, as fit() does; our val_loss holds the cross-entropy.
# l2_now <- as.numeric(tf$add_n(loop_model$losses))
# loop_train_accuracy <- as.numeric(train_accuracy$result())
# loop_val_loss <- as.numeric(val_loss$result()) + l2_now
# loop_val_accuracy <- as.numeric(val_accuracy$result())
# cat(sprintf("custom loop vs fit(): %d steps, max |per-step loss difference| %.1e, max |weight difference| %.1e\n",
#             nrow(loop_losses), loss_difference, weight_difference))
# cat(sprintf("train accuracy: loop %.4f, fit() %.4f\n", loop_train_accuracy,
#             history$metrics$sparse_categorical_accuracy[1]))
# cat(sprintf("validation loss + L2: loop %.4f, evaluate() %.4f; validation accuracy: loop %.4f, evaluate() %.4f\n",
#             loop_val_loss, evaluated$loss, loop_val_accuracy, evaluated$sparse_categorical_accuracy))
# stopifnot(loss_difference < 1e-4, weight_difference < 1e-5,
#           abs(loop_train_accuracy - history$metrics$sparse_categorical_accuracy[1]) < 1e-6,
#           abs(loop_val_loss - evaluated$loss) < 1e-4,
#           abs(loop_val_accuracy - evaluated$sparse_categorical_accuracy) < 1e-6)

# %% [markdown]
# The loop and `fit()` trained the same weights (the printed difference is what remains after
# float rounding), and the per-step losses agree to the rounding of recovering them from `fit()`'s
# running mean. The metrics agree too: the per-replica updates were summed across replicas.
#
# ### kerasdist's loop engine is this loop
#
# kerasdist's loop engine (`engine = "loop"`, and every multi-worker run of lesson 5) is this loop
# with one change: it runs **many steps per `tf.function` call**. `DistributedSteps._train_steps`
# in `kerasdist/engines/loop.py` loops over `tf.range(num_steps)` inside the function, calling `strategy.run`
# once per step, keeps each step's loss sum, correct predictions and example count on the replicas,
# and reduces them once per call; Python is entered once per call instead of once per step. Its
# replica step is the one above (`compute_average_loss` over the global batch, and
# `scale_regularization_loss` for the model's losses). The source, from the installed package:

# %% language="R"
# # The training function and the replica step of kerasdist's loop engine.
# kerasdist_loop <- import("kerasdist.engines.loop")
# inspect <- import("inspect")
# cat(inspect$getsource(kerasdist_loop$DistributedSteps$`_train_steps`), "\n")
# cat(inspect$getsource(kerasdist_loop$DistributedSteps$`_gradients_on_replica`), "\n")

# %% language="R"
# # The same epoch with kerasdist's DistributedSteps, all steps in ONE tf.function call, against our loop.
# set_random_seed(0)
# with(strategy$scope(), {
#   engine_model <- build_regularized_mlp()
#   engine_model |> compile(optimizer = optimizer_adam(learning_rate = 1e-3),
#                           loss = loss_sparse_categorical_crossentropy(from_logits = TRUE))
#   engine_model$optimizer$build(engine_model$trainable_variables)
# })
# steps <- nrow(loop_losses)
# engine <- kerasdist_loop$DistributedSteps(engine_model, strategy, global_batch_size, steps_per_execution = steps)
# totals <- engine$train(as_iterator(strategy$experimental_distribute_dataset(train_batches)), steps)
# engine_cross_entropy <- totals[, 1] / totals[, 3]  # per step: summed loss / examples (the L2 term is not in it)
# engine_loss_difference <- max(abs(engine_cross_entropy - loop_losses[, 2]))
# engine_weight_difference <- max(mapply(function(a, b) max(abs(a - b)), get_weights(loop_model),
#                                        get_weights(engine_model)))
# cat(sprintf("DistributedSteps, %d steps in one call: max |per-step cross-entropy difference| %.1e, max |weight difference| %.1e\n",
#             steps, engine_loss_difference, engine_weight_difference))
# stopifnot(engine_loss_difference < 1e-5, engine_weight_difference < 1e-5)

# %% [markdown]
# ### Exercise q3: a replica step that matches fit()
#
# Write `make_replica_step(model, optimizer, loss_object, global_batch_size)` **in Python**, with `py_run_string()` as the lesson does (`strategy$run()` calls the replica step on threads where R code cannot run): it returns the function that one replica runs on its share of a batch, `step_on_replica(images, labels)`, which computes the loss with `tf.nn.compute_average_loss` (`loss_object` returns per-example losses) plus the L2 penalty of `model.losses` scaled with `tf.nn.scale_regularization_loss`, applies the gradients, and returns that total loss as one scalar. Use only its arguments: no metric or variable of the lesson (the check runs it under a strategy of its own). Then name it in R: `make_replica_step <- py$make_replica_step`. The check runs it with `strategy$run()` on 2 replicas for 3 steps and compares the summed losses and the weights with `fit()` on the same batches.
#
# Complete the cell, then run the check below it; `kd_hint(ex$q3)` gives a hint, `kd_solution(ex$q3)` the solution.
#
# <details><summary>Solution</summary>
#
# Each replica sums its per-example losses and divides by the **global** batch (`compute_average_loss`), and adds the L2 penalty divided by the number of replicas (`scale_regularization_loss`); the replicas' losses and gradients then add up to those of the mean loss over the global batch, which is what `fit()` computes. Dividing by the replica's own 32 examples doubles the cross-entropy, and an unscaled penalty counts twice.
#
# </details>

# %% nbgrader={"grade": false, "grade_id": "q3_answer", "locked": false, "schema_version": 3, "solution": true, "task": false} language="R"
# make_replica_step <- NULL  # a Python function that returns the replica step
# ### BEGIN SOLUTION
# py_run_string("
# import tensorflow as tf
#
# def make_replica_step(model, optimizer, loss_object, global_batch_size):
#     def step_on_replica(images, labels):
#         with tf.GradientTape() as tape:
#             per_example = loss_object(labels, model(images, training=True))
#             loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch_size)
#             loss += tf.nn.scale_regularization_loss(tf.add_n(model.losses))
#         gradients = tape.gradient(loss, model.trainable_variables)
#         optimizer.apply_gradients(zip(gradients, model.trainable_variables))
#         return loss
#     return step_on_replica
# ")
# make_replica_step <- py$make_replica_step
# ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "q3", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false} language="R"
# # NBVAL_CHECK_OUTPUT
# kd_check(ex$q3)
# ### BEGIN HIDDEN TESTS
# kd_assert_correct(ex$q3)
# ### END HIDDEN TESTS

# %% [markdown]
# ## Model parallelism by device placement
#
# Data parallelism copies the whole model to every device and splits the *batch*. Model
# parallelism splits the *model*: each device holds some of the layers, and the whole batch flows
# through the devices one after the other. It is what you do when a model does not fit on one
# device.
#
# ![Data parallelism: every device holds the whole model and gets a share of the batch; model parallelism: each device holds some of the layers and the whole batch passes through them in turn](figures/data_vs_model_parallelism.svg)
#
# The manual way to place variables and operations in TensorFlow is `tf$device()`: you decide where
# each layer lives (the end of this section says where the automatic ways stand). Below, the first hidden
# layer (784 x 256, most of the weights) lives on the first device, the second hidden layer and
# the output layer on the second. The activations of the first half are copied to the second
# device on every forward pass, and their gradients come back on every backward pass.

# %% language="R"
# # A model whose two halves live on two devices: dense_1 on one, dense_2 and logits on the other.
# TwoDeviceMLP <- Model(
#   classname = "TwoDeviceMLP",
#   initialize = function(first_device, second_device, ...) {
#     super$initialize(...)
#     self$first_device <- first_device
#     self$second_device <- second_device
#     self$dense_1 <- layer_dense(units = 256, activation = "relu", name = "dense_1")
#     self$dense_2 <- layer_dense(units = 256, activation = "relu", name = "dense_2")
#     self$logits <- layer_dense(units = 10, name = "logits")
#   },
#   # Variables are created on the device that is current when they are built.
#   build = function(input_shape) {
#     with(tf$device(self$first_device), self$dense_1$build(input_shape))
#     with(tf$device(self$second_device), {
#       self$dense_2$build(list(NULL, 256L))
#       self$logits$build(list(NULL, 256L))
#     })
#   },
#   # Each half computes where its weights are; TensorFlow copies the activations across.
#   call = function(inputs) {
#     with(tf$device(self$first_device), hidden <- self$dense_1(inputs))
#     with(tf$device(self$second_device), logits <- self$logits(self$dense_2(hidden)))
#     logits
#   }
# )

# %% [markdown]
# The optimizer has state too: Adam keeps two moment variables per weight. Keras asks for each
# moment to be created beside its weight, but this model has no strategy, so `fit()` builds the
# optimizer only while it traces the training step, and there the request is lost: every moment
# would land on the first device (exercise 4). Building the optimizer before training
# (`optimizer.build(trainable_variables)` after `compile()`) keeps each moment beside its weight;
# this small Adam does it for an optimizer that `fit()` builds. keras3 has constructors for subclassing layers,
# models and callbacks, not optimizers; its `%py_class%` subclasses any Python class, here
# `keras$optimizers$Adam`. Keras calls the method when it builds the optimizer, on R's main thread
# (it traces the training step there), so R code is fine here.

# %% language="R"
# # Adam whose moment variables live on the same device as the weight they belong to.
# ColocatedAdam(keras$optimizers$Adam) %py_class% {
#   add_variable_from_reference <- function(reference_variable, name = NULL, initializer = "zeros") {
#     with(tf$device(reference_variable$value$device),
#          variable <- super()$add_variable_from_reference(reference_variable, name, initializer))
#     variable
#   }
# }

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # Build and compile the two-device model (no strategy scope: we place things ourselves).
# set_random_seed(0)
# split_model <- TwoDeviceMLP(devices[[1]], devices[[2]], name = "two_device_mlp")
# split_model$build(list(NULL, 784L))
# split_model |> compile(
#   optimizer = ColocatedAdam(learning_rate = 1e-3),
#   loss = loss_sparse_categorical_crossentropy(from_logits = TRUE),
#   metrics = list(metric_sparse_categorical_accuracy()),
#   jit_compile = FALSE  # XLA would compile the step as one cluster and could ignore the placement
# )
# for (variable in split_model$weights)
#   cat(sprintf("%-32s %-11s %s\n", variable$path,
#               paste0("(", paste(unlist(variable$value$shape$as_list()), collapse = ", "), ")"),
#               sub(".*device:", "", variable$value$device)))

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # Follow one batch: where the hidden activations and the logits are computed.
# eight_images <- np_array(x_val[1:8, ], dtype = "float32")
# with(tf$device(devices[[1]]), hidden <- split_model$dense_1(eight_images))
# with(tf$device(devices[[2]]), logits <- split_model$logits(split_model$dense_2(hidden)))
# cat(sprintf("hidden (%s) on %s, logits (%s) on %s\n",
#             paste(unlist(hidden$shape$as_list()), collapse = ", "), sub(".*device:", "", hidden$device),
#             paste(unlist(logits$shape$as_list()), collapse = ", "), sub(".*device:", "", logits$device)))

# %% [markdown]
# **Predict, then run.** The split model has the guide's MLP's layers, initialised with the same seed,
# and trains on the same batches. Will its loss after one epoch equal the default strategy's loss
# in the table above (to within 1e-4), or differ? Decide, then run the next two cells.

# %% language="R"
# # Train it like any Keras model: one epoch on the same batches, timing the steady state as before.
# history <- split_model |> fit(train_batches, epochs = 1, shuffle = FALSE, verbose = 0,
#                               callbacks = list(step_end_times))
# model_parallel_loss <- history$metrics$loss[1]
# logits <- as.array(split_model(val_images, training = FALSE))
# cat(sprintf("model parallel: %.0f samples/s in the steady state (default strategy: %.0f), loss %.4f, val acc %.4f\n",
#             steady_samples_per_second(step_ends), runs$default$samples_per_second, model_parallel_loss,
#             mean(max.col(logits, ties.method = "first") - 1L == y_val)))

# %% language="R"
# # Check the prediction: placing the layers on two devices does not change what the model computes.
# stopifnot(abs(model_parallel_loss - runs$default$reported_loss) < 1e-4)
# cat("the split model's loss equals the one-device model's, to within 1e-4\n")

# %% [markdown]
# Same architecture, same seed, same batches: the split model computes what the one-device
# model computes (compare its accuracy with the table above, too).
#
# This split is **pipeline parallelism**: each device is a *stage* that holds some consecutive
# layers, and the batch passes through the stages in turn. Without anything more, as here, one
# stage works while the other waits: the second device waits for the first's activations in the
# forward pass, the first for the second's gradients in the backward pass. Pipelines such as GPipe
# cut each batch into m *micro-batches*, so that the p stages work on different micro-batches at
# the same time; each stage is still idle for a fraction (p - 1) / (m + p - 1) of the step, the
# pipeline *bubble* (1F1B schedules interleave the backward passes to hold fewer activations, with
# the same bubble). The gradients of the micro-batches are summed before the update, so the step is
# still the step of the whole batch.

# %% language="R"
# # The pipeline bubble: the share of a step that each of p stages is idle, with m micro-batches per batch.
# stages <- num_replicas
# for (micro_batches in c(1L, 4L, 16L))
#   cat(sprintf("p = %d stages, m = %2d micro-batch(es): each stage idle %.0f%% of the step\n", stages,
#               micro_batches, 100 * (stages - 1) / (micro_batches + stages - 1)))

# %% [markdown]
# What differs from data parallelism is what each device has to store. Count the numbers each device holds (weights plus Adam's two moments per
# weight) in the two kinds of parallelism.

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # Numbers stored per device: weights and Adam moments, data parallel vs model parallel.
# size_of <- function(variable) variable$value$shape$num_elements()
# stored_per_device <- function(variables) {
#   devices_of <- vapply(variables, function(variable) sub(".*device:", "", variable$value$device), "")
#   tapply(vapply(variables, size_of, 0), devices_of, sum)
# }
# model_parallel <- stored_per_device(c(split_model$weights, split_model$optimizer$variables))
# mirrored <- kerasdist$make_strategy("mirrored", num_replicas = num_replicas, verbose = FALSE)
# with(mirrored$scope(), {
#   mirrored_model <- build_model()
#   mirrored_model$optimizer$build(mirrored_model$trainable_variables)
# })
# per_copy <- sum(vapply(c(mirrored_model$weights, mirrored_model$optimizer$variables), size_of, 0))
# replica_devices <- sub(".*device:", "", unlist(mirrored$extended$worker_devices))
# data_parallel <- setNames(rep(per_copy, num_replicas), replica_devices)
# cat("data parallel: ", paste(names(data_parallel), data_parallel, sep = " = ", collapse = ", "), "\n")
# cat("model parallel:", paste(names(model_parallel), model_parallel, sep = " = ", collapse = ", "), "\n")

# %% magic_args="-w 8 -h 3.2 --units in -r 100" language="R"
# # Numbers stored per device, as bars.
# stored <- c(setNames(data_parallel, paste0("data parallel\n", names(data_parallel))),
#             setNames(as.vector(model_parallel), paste0("model parallel\n", names(model_parallel))))
# par(mar = c(4, 9, 3, 4), cex.main = 1)
# bars <- barplot(rev(stored), horiz = TRUE, las = 1, col = rep(c("darkorange", "steelblue"), each = 2),
#                 xlim = c(0, 1.2 * max(stored)), xlab = "numbers stored", axes = FALSE,
#                 main = "Memory per device: whole copies vs halves of the model")
# ticks <- pretty(c(0, max(stored)))
# axis(1, at = ticks, labels = format(ticks, big.mark = ",", scientific = FALSE))
# text(rev(stored), bars, format(rev(stored), big.mark = ","), pos = 4, cex = 0.8)

# %% [markdown]
# | | data parallelism | model parallelism |
# |---|---|---|
# | each device holds | the whole model (and optimizer state) | a part of it |
# | each device computes | the whole model on its share of the batch | its layers on the whole batch |
# | what crosses devices | gradients, once per step (all-reduce) | activations and their gradients, at every cut, forward and backward |
# | devices idle | rarely (all compute at once) | while waiting for the previous part, unless the batch is pipelined in micro-batches |
# | when to use it | the model fits on one device; you want more throughput | the model does not fit on one device |
#
# Two claims you may meet elsewhere are wrong for the strategies of this lesson. Data parallelism
# is not asynchronous by nature: `MirroredStrategy`, `MultiWorkerMirroredStrategy` and
# `TPUStrategy` update synchronously, and only `ParameterServerStrategy` lets workers update
# without waiting for each other. Nor is it the answer to a *data set* that does not fit in memory:
# every replica still holds the whole model, and a large data set is streamed from disk by
# tfdatasets (lesson 4) with one device or many. Data parallelism buys throughput; model
# parallelism buys room for a model that is too large for one device.
#
# Large models combine both: model parallelism inside a group of devices, data parallelism across
# groups. Placing layers by hand with `tf$device()` does not scale to that; the newer APIs describe
# where each tensor lives as a *layout* over a mesh of devices and let the framework place it:
#
# - **DTensor** (`tf$experimental$dtensor`) is TensorFlow's: it shards tensors over a mesh. It is
#   still experimental.
# - **`keras.distribution`** is Keras 3's (`DataParallel`, and `ModelParallel` with a `LayoutMap`
#   that shards each weight across a device mesh), and it expresses both kinds for a Keras model.
#   It is implemented for the JAX backend; its TensorFlow version is a prototype on DTensor that its
#   source marks "DO NOT USE" (`keras/src/backend/tensorflow/distribution_lib.py` in Keras 3.15).
#   Lesson 7 trains with it on JAX ([07_keras_distribution_jax_R.ipynb](07_keras_distribution_jax_R.ipynb)).

# %% [markdown]
# ## Performance tips
#
# - **One machine, several GPUs**: `MirroredStrategy`. Build and compile in its scope; batch by the
#   global batch (lesson 4).
# - **Several machines**: `MultiWorkerMirroredStrategy` with a custom loop today (lesson 5), since
#   Keras 3 `fit()` fails under it (keras-team/keras#20585); or Keras 3 on JAX (lesson 7). Keras 3
#   has no `ParameterServerStrategy` support at all.
# - **How gradients are summed** is `MirroredStrategy`'s `cross_device_ops =` argument, and its
#   default is usually right: a `CollectiveAllReduce`, with NCCL on physical GPUs and RING on CPUs
#   and virtual GPUs (printed above for this machine). Pass `tf$distribute$ReductionToOneDevice()`
#   where the collective does not suit you (kerasdist does on CPUs, to make several strategies in one
#   process). `tf$distribute$HierarchicalCopyAllReduce()` is not a general substitute: TensorFlow's
#   documentation says it "is a reduction created for Nvidia DGX-1 which assumes GPUs connects like
#   that on DGX-1 machine. If you have different GPU inter-connections, it is likely that it would
#   be slower than `tf.distribute.ReductionToOneDevice`." Measure steady-state throughput before
#   and after any change.
# - **Model parallelism** pays for copying activations at every cut: cut where the activations are
#   small, balance the work between devices, and feed micro-batches so that the pipeline's bubble
#   shrinks.
# - **When you switch strategy**, compare one metric computed by hand with what `fit()` reports.

# %% [markdown]
# ## Summary
#
# - Mirrored and CentralStorage run on one machine with several devices; MultiWorkerMirrored needs
#   a cluster (several processes described by `TF_CONFIG`); ParameterServer needs worker and `ps`
#   tasks, which TensorFlow can start inside one process, but Keras 3 cannot train with it; TPU
#   needs a TPU.
# - `MirroredStrategy` sums gradients with a collective all-reduce by default (RING on CPUs, NCCL
#   on GPUs); kerasdist's `mirrored` uses `ReductionToOneDevice` on CPUs. Both give the same sums.
# - Switching strategy means building and compiling the model in another `strategy$scope()`; the
#   variables change kind (`MirroredVariable`, `AggregatingVariable`), the training does not.
# - With Keras 3, `CentralStorageStrategy` trains correctly but reports wrong metrics; verify.
# - A saved model or checkpoint is independent of the strategy: mirrored variables are saved as one
#   value each, and loading under another strategy (or none) gives the same weights and predictions.
# - A custom loop under a strategy: `experimental_distribute_dataset()`, `strategy$run()` inside a
#   `tf_function()`, the per-example loss summed and divided by the **global** batch
#   (`tf$nn$compute_average_loss()`), regularization losses divided by the replicas
#   (`tf$nn$scale_regularization_loss()`), metrics updated on each replica. It trains what `fit()`
#   trains, step for step; kerasdist's loop engine is this loop with many steps per call.
# - Model parallelism places parts of the model on different devices with `tf$device()`; each
#   device stores less, but activations cross devices at every step and, split by layers (a
#   pipeline without micro-batches), the devices wait for each other.

# %% [markdown]
# ## Exercises
#
# 1. Train under TensorFlow's own `tf$distribute$MirroredStrategy(devices = as.list(devices))`,
#    with no `cross_device_ops`, using `train_under()`. How does it sum the gradients? Do its weights
#    match the default strategy's as closely as kerasdist's `mirrored` run did? Is it faster or
#    slower?
#
# <details><summary>Hint</summary>
#
# Inspect a plain `tf$distribute$MirroredStrategy()` (not one from kerasdist's `make_strategy()`):
# ``strategy$extended$`_cross_device_ops` `` is the object that sums (a private attribute, fine for
# a look), and its `` `_options`$implementation `` says which collective. `plain_mirrored` above is
# one.
#
# </details>
#
# <details><summary>Solution</summary>
#
# ```r
# run <- train_under(plain_mirrored)
# cat(all_reduce_of(plain_mirrored), "\n")
# cat(max(mapply(function(a, b) max(abs(a - b)), run$weights, runs$default$weights)),
#     run$samples_per_second, runs$mirrored$samples_per_second, "\n")
# ```
#
# It sums with a `CollectiveAllReduce` using RING, TensorFlow's default on CPU devices. The weights
# match the default strategy's to float rounding, as the `mirrored` run's do: how the gradients
# are summed changes where and in which order the sums are computed, not their value. On these
# virtual devices, which share the same cores and memory, the two are about as fast (measure it on
# an idle machine). On GPUs the default uses NCCL, which moves the data GPU to GPU; that is the
# choice to keep there.
#
# </details>
#
# 2. The loss that `fit()` reports is a `Mean` metric, the loss tracker (`model$metrics[[1]]`), with
#    two variables, `total` and `count`. **Predict** what they should hold after one epoch: Keras
#    adds each step's mean loss weighted by the step's batch size (`_loss_tracker.update_state(...,
#    sample_weight=...)` in `keras/src/backend/tensorflow/trainer.py`). Then print them under the
#    default strategy and under `central_storage`
#    (`runs$central_storage$model$metrics[[1]]$variables`). What do you see, and how would you
#    compute the training loss yourself?
#
# <details><summary>Hint</summary>
#
# With batch-size weights, `count` is the number of examples the epoch trained on (the steps times
# the global batch), and `total / count` is the reported loss. A loss function called on a batch
# returns that batch's mean loss.
#
# </details>
#
# <details><summary>Solution</summary>
#
# ```r
# for (name in c("default", "central_storage"))
#   for (variable in runs[[name]]$model$metrics[[1]]$variables)
#     cat(name, variable$path, variable$value$`__class__`$`__name__`, as.numeric(variable$numpy()), "\n")
# cat("examples trained on:", runs$default$steps * global_batch_size, "\n")
# model <- runs$central_storage$model
# loss_function <- loss_sparse_categorical_crossentropy(from_logits = TRUE)
# batch_losses <- numeric()
# iterator <- as_iterator(train_batches)
# while (!is.null(batch <- iter_next(iterator)))
#   batch_losses <- c(batch_losses, as.numeric(loss_function(batch[[2]], model(batch[[1]], training = FALSE))))
# mean(batch_losses)
# ```
#
# Under the default strategy `count` is the number of examples trained on and `total / count` is
# the loss `fit()` reported. Under `central_storage` both are `AggregatingVariable`s holding absurd
# values, many orders of magnitude above the number of examples, so their ratio is meaningless.
# Your own loss, a mean over the training batches of the trained model, is close to the other
# strategies' and shows the model itself is fine. (It is the loss *after* the epoch, so it is lower
# than `fit()`'s running mean over the epoch.)
#
# </details>
#
# 3. Move `dense_2` to the first device in `TwoDeviceMLP`. How do the numbers stored per device
#    change? Where would you cut a model whose layers all have the same size?
#
# <details><summary>Hint</summary>
#
# Change the device in both `build` and `call`, rebuild and recompile, train one step so that Adam
# creates its moments, then call `stored_per_device()` again.
#
# </details>
#
# <details><summary>Solution</summary>
#
# In `build`, build `dense_2` inside `with(tf$device(self$first_device), ...)`, and in `call`
# compute `self$dense_2(hidden)` there too; only `logits` stays on the second device. Then the first
# device holds almost everything (both hidden layers, their weights and two Adam moments each) and
# the second device only the output layer's 2,570 weights and their moments. The cut should
# balance what the devices store and compute, and cross where the activations are small: with
# layers of equal size, cut in the middle, so each device holds half the layers.
#
# </details>
#
# 4. Compile with `optimizer_adam()` instead of `ColocatedAdam`. Where do the moment variables end
#    up?
#
# <details><summary>Hint</summary>
#
# Compile a new `TwoDeviceMLP` with the plain optimizer, `fit()` it for a few steps
# (`dataset_take(train_batches, 3)`), then print `variable$value$device` for each of
# `model$optimizer$variables`.
#
# </details>
#
# <details><summary>Solution</summary>
#
# ```r
# set_random_seed(0)
# plain <- TwoDeviceMLP(devices[[1]], devices[[2]])
# plain$build(list(NULL, 784L))
# plain |> compile(optimizer = optimizer_adam(learning_rate = 1e-3),
#                  loss = loss_sparse_categorical_crossentropy(from_logits = TRUE), jit_compile = FALSE)
# plain |> fit(dataset_take(train_batches, 3), verbose = 0)
# for (variable in plain$optimizer$variables)
#   cat(variable$path, sub(".*device:", "", variable$value$device), "\n")
# ```
#
# `fit()` builds the optimizer while it traces the step, where Keras' request to put each moment
# beside its weight is lost (`plain$optimizer$build(plain$trainable_variables)` before `fit()` keeps it).
# So every moment lands on the first device, the second half's too: the memory is no
# longer split as the layers are, and every update of the second half's weights reads and writes
# its moments across devices.
#
# </details>
#
# 5. Save the model trained under the *default* strategy (`runs$default$model`) and load it under
#    `MirroredStrategy`. What kind of variable does the loaded model have, and does it predict what
#    the saved model predicts?
#
# <details><summary>Hint</summary>
#
# Load with `load_model()` inside `with(mirrored$scope(), ...)`; compare
# `model(val_images, training = FALSE)` of both models.
#
# </details>
#
# <details><summary>Solution</summary>
#
# ```r
# one_device_file <- file.path(save_dir, "default.keras")
# save_model(runs$default$model, one_device_file)
# with(kerasdist$make_strategy("mirrored", num_replicas = num_replicas, verbose = FALSE)$scope(),
#      mirrored_copy <- load_model(one_device_file))
# cat(mirrored_copy$weights[[1]]$value$`__class__`$`__name__`,
#     max(abs(as.array(mirrored_copy(val_images, training = FALSE)) -
#             as.array(runs$default$model(val_images, training = FALSE)))), "\n")
# ```
#
# A `MirroredVariable`, one copy per replica, filled from the one value in the file; the
# predictions are the same. Checkpoints go both ways between strategies.
#
# </details>
#
# 6. In the custom loop, forget `tf$nn$scale_regularization_loss()`: add the L2 term as it is on
#    each replica, and train one epoch from the same start. How much larger is step 1's loss than
#    `fit()`'s, and do the weights still match?
#
# <details><summary>Hint</summary>
#
# Rebuild `loop_model` and `optimizer` in the scope with the same seed, make the replica step again
# without the scaling (a Python function, as above), and wrap it in a **new** `tf_function()`: the
# old one traced the old step. Compare the first loss with
# `losses_from_running_means(running_means)[1]` and the weights with `fit_model`'s.
#
# </details>
#
# <details><summary>Solution</summary>
#
# ```r
# set_random_seed(0)
# with(strategy$scope(), {
#   loop_model <- build_regularized_mlp()
#   optimizer <- optimizer_adam(learning_rate = 1e-3)
#   optimizer$build(loop_model$trainable_variables)
# })
# py_run_string("
# def unscaled_step(model, optimizer, loss_object, global_batch_size):
#     def step_on_replica(images, labels):
#         with tf.GradientTape() as tape:
#             logits = model(images, training=True)
#             cross_entropy = tf.nn.compute_average_loss(loss_object(labels, logits), global_batch_size=global_batch_size)
#             l2_penalty = tf.add_n(model.losses)  # not divided by the number of replicas
#             loss = cross_entropy + l2_penalty
#         gradients = tape.gradient(loss, model.trainable_variables)
#         optimizer.apply_gradients(zip(gradients, model.trainable_variables))
#         return tf.stack([loss, cross_entropy, l2_penalty])
#     return step_on_replica
# ")
# unscaled_step_on_replica <- py$unscaled_step(loop_model, optimizer, loss_object, global_batch_size)
# unscaled_train_step <- tf_function(function(images, labels) {
#   strategy$reduce(tf$distribute$ReduceOp$SUM,
#                   strategy$run(unscaled_step_on_replica, args = list(images, labels)), axis = NULL)
# })
# unscaled <- NULL
# iterator <- as_iterator(distributed_train)
# while (!is.null(batch <- iter_next(iterator)))
#   unscaled <- rbind(unscaled, as.numeric(unscaled_train_step(batch[[1]], batch[[2]])))
# cat(unscaled[1, 1] - losses_from_running_means(running_means)[1], unscaled[1, 3] / num_replicas, "\n")
# cat(max(mapply(function(a, b) max(abs(a - b)), get_weights(loop_model), get_weights(fit_model))), "\n")
# ```
#
# Step 1's loss is larger by the L2 penalty itself (the first line prints it twice: the
# difference, and the penalty that one replica added): the sum over 2 replicas counts the penalty
# twice. Its gradient is counted twice too, so every step pulls the kernels towards zero twice as
# hard as `fit()` does, and the weights drift away from `fit()`'s: the difference is no longer
# float rounding. With N replicas the penalty would count N times: that is what
# `scale_regularization_loss()` divides away.
#
# </details>
#
# Next: [lesson 7](07_keras_distribution_jax_R.ipynb), Keras 3's own distribution API on JAX beside tf.distribute; or back to the [course map](../README.md#lessons).
