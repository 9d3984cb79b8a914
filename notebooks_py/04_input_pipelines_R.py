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
# # Input pipelines: global batch, shuffle, cache, prefetch (R, keras3)
#
# This is the R twin of [04_input_pipelines.ipynb](04_input_pipelines.ipynb): the same workflow and
# the same sections, written with the R packages keras3, tfdatasets and tensorflow. The notebook
# runs on a Python kernel; the R code lives in `%%R` cells (rpy2), and R draws the figures too
# (`%%R -w -h` sets a figure's size in inches).
#
# **What you'll learn**
#
# - how a tfdatasets pipeline builds the *global* batch that a strategy then splits across replicas;
# - what `dataset_shuffle()`, `dataset_prefetch()`, a parallel `dataset_map()` and `dataset_cache()`
#   each buy, measured side by side, and how many reads a parallel `dataset_map()` can keep in
#   flight (tf.data's thread pool caps it);
# - what changes with more replicas: per-replica batch = global batch / N, how
#   `strategy$experimental_distribute_dataset()` splits a batch (also an uneven one), which
#   all-reduce a `MirroredStrategy` uses, and how workers share a dataset (and why an unseeded
#   shuffle is not safe for that, even under a global seed).
#
# **What you need**: R with the packages keras3, tfdatasets and tensorflow
# (`install.packages(c("keras3", "tfdatasets"))`), rpy2 in the kernel's Python environment, and
# under two minutes on a 2-core CPU. The data is full MNIST when Keras has it cached or can download
# it, otherwise a sample of real MNIST digits (offline); the timings read the same 24
# global batches per epoch whatever the source. The stored outputs come from a run on that sample;
# `bash scripts/run_notebooks.sh --r-twins` runs the notebook again.

# %% [markdown]
# ## Introduction
#
# In synchronous data parallelism every training step consumes one **global batch**. The strategy
# cuts it into N equal **per-replica batches**, each replica computes gradients on its share of a
# loss divided by the *global* batch size, the gradients are summed across replicas (so the sum is
# the gradient of the mean loss over the global batch, not N times larger), and every replica
# applies the same update. The devices can only be as busy as the input pipeline lets them be: if
# reading and decoding the next batch takes longer than a step, the replicas wait.
#
# | transformation | what it does | what it costs or saves |
# |---|---|---|
# | `dataset_batch(global_batch_size)` | groups examples into the global batch | one batch per step, for all replicas together |
# | `dataset_shuffle(buffer_size)` | draws examples in random order | memory for the buffer; a wait while it fills |
# | `dataset_prefetch()` | prepares the next batches while the model trains on this one | overlaps input with compute |
# | `dataset_cache()` | keeps what was read (and decoded) after the first epoch | later epochs skip reading |
#
# Here we time them on a pipeline with a deliberately slow source: alone, with a stand-in for the
# training step, and feeding the real model under `MirroredStrategy`.

# %% [markdown]
# ## Setup
#
# The Python side loads rpy2's `%%R` magic and imports kerasdist, which starts TensorFlow with its
# C++ start-up lines kept out of the cell outputs. R then attaches keras3 and friends; reticulate
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
# ex <- kd_exercises("04")
# data_source <- Sys.getenv("KERASDIST_DATA", "auto")
# num_replicas <- 2L
# global_batch_size <- 64L
# timed_batches <- 24L  # global batches per epoch in the timings below
# autotune <- tf$data$AUTOTUNE

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # Make the replicas' devices: GPUs, one GPU split in two, or (here) two virtual CPU devices.
# kerasdist <- reticulate::import("kerasdist")
# devices <- kerasdist$configure_replicas(num_replicas)
# print(unlist(devices))

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # Load the digits with kerasdist's loader; it says which source it used and the sample counts.
# data <- kerasdist$load_mnist(data_source)
# x_train <- data$x_train
# y_train <- data$y_train

# %% [markdown]
# ## The global batch
#
# Batch the dataset by the **global** batch size, not the per-replica one. The strategy divides
# each global batch between the replicas, so with the global batch fixed, adding replicas gives each
# one less work per step, and the number of steps per epoch does not change.
#
# A `MirroredStrategy` sums the replicas' gradients with an all-reduce. Left to choose, TF 2.21 takes
# `CollectiveAllReduce` (a ring) when all devices are CPUs, as here, and NCCL on physical GPUs
# (`_make_collective_ops_with_fallbacks` in `tensorflow/python/distribute/mirrored_strategy.py`).
# We pass `ReductionToOneDevice` instead, as kerasdist does on CPU devices (`kerasdist.make_strategy`):
# it sums on one device, gives the same sums here, and lets `fit()` run several steps per call
# (shown near the end of the lesson). Both twins of this lesson use it, and every timing of the
# model below is `MirroredStrategy` with `ReductionToOneDevice`.

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # One strategy, one replica per device, with an explicit all-reduce; the global batch is split between them.
# strategy <- tf$distribute$MirroredStrategy(devices = as.list(unlist(devices)),
#                                           cross_device_ops = tf$distribute$ReductionToOneDevice())
# cat(sprintf("Number of devices: %d; all-reduce: ReductionToOneDevice\n", strategy$num_replicas_in_sync))
# per_replica_batch_size <- global_batch_size %/% strategy$num_replicas_in_sync
# steps_per_epoch <- nrow(x_train) %/% global_batch_size
# cat(sprintf("global batch %d = %d replicas x %d examples; %d steps per epoch\n", global_batch_size,
#             strategy$num_replicas_in_sync, per_replica_batch_size, steps_per_epoch))

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # The simplest pipeline: examples from memory, batched by the global batch size (R has no float32).
# in_memory <- tensor_slices_dataset(list(np_array(x_train, dtype = "float32"),
#                                         np_array(y_train, dtype = "int32")))
# print(dataset_batch(in_memory, global_batch_size, drop_remainder = TRUE)$element_spec)

# %% [markdown]
# **Predict, then run.** Batched by the global batch of 64 with the remainder dropped, how many
# examples does each of the 2 replicas receive per step, and how many steps does one epoch of this
# training set hold? Decide from the line printed above, then run the check.

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # Check the prediction on the dataset itself: split one global batch, count the batches of an epoch.
# batched <- dataset_batch(in_memory, global_batch_size, drop_remainder = TRUE)
# first <- iter_next(as_iterator(strategy$experimental_distribute_dataset(batched)))
# shares <- vapply(strategy$experimental_local_results(first[[1]]),
#                  function(part) as.integer(part$shape$as_list()[[1]]), integer(1))
# batches <- as.integer(batched$cardinality()$numpy())
# stopifnot(identical(shares, rep(global_batch_size %/% num_replicas, num_replicas)),
#           batches == nrow(x_train) %/% global_batch_size, batches == steps_per_epoch)
# cat(sprintf("each replica gets %d examples per step; %d steps per epoch\n", shares[1], batches))

# %% [markdown]
# ### Exercise q1: global batches for the strategy
#
# Write a function `distribute_batches(strategy, dataset, global_batch)` that batches a dataset of single examples by the global batch, dropping the remainder so that every step holds a whole global batch, and returns it split between the strategy's replicas. The check calls it with 2 replicas on 200 real digits at a global batch of 64 and on 150 at 48, and reads the shares of every step.
#
# Complete the cell, then run the check below it; `kd_hint(ex$q1)` gives a hint, `kd_solution(ex$q1)` the solution.
#
# <details><summary>Solution</summary>
#
# Batch by the global batch (64), not the per-replica one, and drop the remainder: `dataset_batch(dataset, global_batch, drop_remainder = TRUE)`. Then `strategy$experimental_distribute_dataset()` cuts each global batch into 2 shares of 32, one per replica. Without `drop_remainder` the last step of 200 examples would hold 8, 4 per replica.
#
# </details>

# %% nbgrader={"grade": false, "grade_id": "q1_answer", "locked": false, "schema_version": 3, "solution": true, "task": false} language="R"
# distribute_batches <- NULL  # a function of (strategy, dataset, global_batch)
# ### BEGIN SOLUTION
# distribute_batches <- function(strategy, dataset, global_batch) {
#   batches <- dataset_batch(dataset, global_batch, drop_remainder = TRUE)
#   strategy$experimental_distribute_dataset(batches)
# }
# ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "q1", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false} language="R"
# # NBVAL_CHECK_OUTPUT
# kd_check(ex$q1)
# ### BEGIN HIDDEN TESTS
# kd_assert_correct(ex$q1)
# ### END HIDDEN TESTS

# %% [markdown]
# ## A pipeline with a slow source
#
# MNIST fits in memory, so reading it costs nothing. Real data sits in files on a disk or on network
# storage, and every read has a latency. To see what the pipeline transformations do, we put the
# images "on storage" as raw bytes and read them through a function that waits 20 ms per request,
# as one round trip to network storage might. Each request fetches the records of one batch by
# their keys, the way a random-access data loader does: shuffling the *keys* is then enough to
# shuffle the data. We put `timed_batches` (24) global batches' worth of records there, whatever
# the data source: enough to time, short enough to repeat.
#
# tf.data calls the reader on its own threads, several at once. R code runs on R's main thread
# only, so the reader itself is a few lines of Python (through reticulate); the pipeline around it
# is built in R, and `tf$numpy_function()` puts the reader into it.

# %% language="R"
# # The records "on storage" (raw bytes and labels), and a reader with one 20 ms round trip per request.
# num_records <- min(nrow(x_train), timed_batches * global_batch_size)
# batches_per_epoch <- num_records %/% global_batch_size
# py$images_on_storage <- np_array(round(x_train[seq_len(num_records), ] * 255), dtype = "uint8")
# py$labels_on_storage <- np_array(y_train[seq_len(num_records)], dtype = "int32")
# py$read_latency_s <- 0.020
# py_run_string("
# import time
#
# def read_records(keys):
#     time.sleep(read_latency_s)
#     return images_on_storage[keys], labels_on_storage[keys]
# ")
#
# # Read a batch of records, then decode the pixels to floats in [0, 1].
# read_and_decode <- function(keys) {
#   records <- tf$numpy_function(py$read_records, list(keys), list(tf$uint8, tf$int32))
#   images <- tf$ensure_shape(records[[1]], list(NULL, 784L))
#   labels <- tf$ensure_shape(records[[2]], list(NULL))
#   list(tf$cast(images, tf$float32) / 255, labels)
# }

# %% [markdown]
# Recent TensorFlow versions quietly append a prefetch to a pipeline that does not end with one
# (the `inject_prefetch` optimization). That is a good default, but it would hide what an explicit
# `dataset_prefetch()` does, so we switch it off for the five pipelines we compare.

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # Five pipelines, each adding one transformation to the one before.
# keys <- range_dataset(0, num_records)
# shuffled_keys <- function() dataset_shuffle(keys, num_records, seed = 0L)
# cached <- keys |>
#   dataset_batch(global_batch_size) |>
#   dataset_map(read_and_decode, num_parallel_calls = autotune) |>
#   dataset_unbatch() |>
#   dataset_cache() |>
#   dataset_shuffle(num_records, seed = 0L) |>
#   dataset_batch(global_batch_size, drop_remainder = TRUE)
# # dataset_unbatch() forgets how many batches there are; say it, so Keras knows where an epoch ends.
# cached <- cached$apply(tf$data$experimental$assert_cardinality(batches_per_epoch))
# pipelines <- list(
#   "read" = keys |> dataset_batch(global_batch_size, drop_remainder = TRUE) |>
#     dataset_map(read_and_decode),
#   "+ shuffle" = shuffled_keys() |> dataset_batch(global_batch_size, drop_remainder = TRUE) |>
#     dataset_map(read_and_decode),
#   "+ prefetch" = shuffled_keys() |> dataset_batch(global_batch_size, drop_remainder = TRUE) |>
#     dataset_map(read_and_decode) |> dataset_prefetch(autotune),
#   "+ parallel map" = shuffled_keys() |> dataset_batch(global_batch_size, drop_remainder = TRUE) |>
#     dataset_map(read_and_decode, num_parallel_calls = autotune) |> dataset_prefetch(autotune),
#   "+ cache" = cached |> dataset_prefetch(autotune)
# )
# only_explicit_prefetch <- tf$data$Options()
# optimization <- only_explicit_prefetch$experimental_optimization
# optimization$inject_prefetch <- FALSE
# pipelines <- lapply(pipelines, function(pipeline) pipeline$with_options(only_explicit_prefetch))
# for (name in names(pipelines))
#   cat(sprintf("%-15s %s\n", name, py_str(pipelines[[name]]$element_spec[[1]])))

# %% [markdown]
# ## Measuring the pipelines
#
# First, how long does one training step of the MLP take here with 2 replicas, when the data is
# already in memory? That is the time a pipeline has to prepare the next batch. The MLP
# (784-256-256-10, Adam, cross-entropy from logits) is `get_compiled_model()` of the keras.io guide
# [Multi-GPU distributed training with TensorFlow](https://keras.io/guides/distributed_training_with_tensorflow/);
# `build_model()` below writes it with keras3.
#
# Timings vary from run to run on a shared machine: compare the numbers of one run with each other,
# never with another run's. Every timing is the **median of several timed epochs after a warm-up
# epoch** (steady state): the first epoch also traces the training step and fills caches, and the
# median is not thrown off by an epoch that waited for a busy CPU, as a single run or the mean
# would be. Each timed epoch reads all `timed_batches` global batches, so it lasts long enough
# (a second or more with training) for a short burst of load to matter little. What we compare is
# timed in turns, round after round, so that a longer burst of load slows all of it alike.

# %% language="R"
# # The keras.io guide's MLP (its get_compiled_model()), built and compiled (call it inside a strategy scope).
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
#
# # Time training: every run gets a fresh model, an untimed warm-up epoch (tracing, filling caches),
# # then the runs train one epoch each in turn, for `rounds` rounds; each reports its median epoch.
# # runs: a named list of list(on = strategy, dataset = dataset).
# rounds <- 3L
# seconds_per_epoch_training <- function(runs, rounds_to_time = rounds) {
#   models <- lapply(runs, function(run) {
#     set_random_seed(0)
#     with(run$on$scope(), model <- build_model())
#     model |> fit(run$dataset, epochs = 1L, shuffle = FALSE, verbose = 0)
#     model
#   })
#   epochs <- matrix(NA_real_, rounds_to_time, length(runs), dimnames = list(NULL, names(runs)))
#   for (round in seq_len(rounds_to_time)) {
#     for (label in names(runs)) {
#       started <- Sys.time()
#       models[[label]] |> fit(runs[[label]]$dataset, epochs = 1L, shuffle = FALSE, verbose = 0)
#       epochs[round, label] <- as.numeric(difftime(Sys.time(), started, units = "secs"))
#     }
#   }
#   apply(epochs, 2, median)
# }

# %% language="R"
# # The model fed from memory (cache, shuffle, batch, prefetch), under MirroredStrategy with ReductionToOneDevice.
# from_memory <- tensor_slices_dataset(list(np_array(x_train[seq_len(num_records), ], dtype = "float32"),
#                                           np_array(y_train[seq_len(num_records)], dtype = "int32"))) |>
#   dataset_cache() |>
#   dataset_shuffle(num_records, seed = 0L) |>
#   dataset_batch(global_batch_size, drop_remainder = TRUE) |>
#   dataset_prefetch(autotune)
# memory_epoch_s <- seconds_per_epoch_training(list("from memory" = list(on = strategy, dataset = from_memory)))[[1]]
# step_s <- memory_epoch_s / batches_per_epoch
# cat(sprintf("from memory, mirrored (ReductionToOneDevice): %.2f s/epoch, %.0f ms per training step\n",
#             memory_epoch_s, step_s * 1e3))

# %% [markdown]
# On this CPU the model and the pipeline compete for the same two cores, which blurs any timing of
# the two together. On a GPU workstation the model runs on the GPU while the CPU prepares batches.
# To see what a GPU would see, we stand in for the training step with a wait of the same length,
# which uses no CPU. Each pipeline is timed twice:
#
# 1. **alone**: iterate it with nothing consuming the batches (how fast can it deliver?);
# 2. **with a training step**: wait `step_s` after each batch, as a training step would.

# %% language="R"
# # Time one epoch of a pipeline, with an optional stand-in training step after each batch.
# seconds_per_epoch <- function(dataset, step_seconds = 0) {
#   started <- Sys.time()
#   iterate(dataset, function(batch) Sys.sleep(step_seconds))
#   as.numeric(difftime(Sys.time(), started, units = "secs"))
# }

# %% language="R"
# # Measure the five pipelines both ways (the slowest cell of the lesson): a warm-up epoch each (it also fills
# # the cache), then `rounds` rounds that time every pipeline in turn; each reports its median epoch.
# for (pipeline in pipelines) seconds_per_epoch(pipeline)
# alone_epochs <- matrix(NA_real_, rounds, length(pipelines))
# with_step_epochs <- alone_epochs
# for (round in seq_len(rounds)) {
#   for (i in seq_along(pipelines)) {
#     alone_epochs[round, i] <- seconds_per_epoch(pipelines[[i]])
#     with_step_epochs[round, i] <- seconds_per_epoch(pipelines[[i]], step_s)
#   }
# }
# timings <- data.frame(pipeline = names(pipelines), alone = apply(alone_epochs, 2, median),
#                       with_step = apply(with_step_epochs, 2, median))
# print(timings, digits = 3)
# cat(sprintf("for reference: all reads take %.2f s, all training steps %.2f s per epoch\n",
#             batches_per_epoch * py$read_latency_s, batches_per_epoch * step_s))

# %% [markdown]
# The chart puts both measurements side by side, pipeline by pipeline. Over each bar: its seconds
# per epoch and its speed-up over **read** in the same series (×2 = twice as fast).

# %% language="R"
# # Grouped bars (base graphics), each bar labelled with its value and its speed-up over the first group.
# grouped_bars <- function(values, ylab, main, note) {
#   # Integer sizes in points: the labels' font size, then smaller for the bar labels and the note.
#   par(mar = c(6, 5, 3, 1), cex.main = 1, las = 1, ps = 11)
#   centres <- barplot(values, beside = TRUE, col = c("steelblue", "darkorange")[seq_len(nrow(values))],
#                      ylim = c(0, max(values) * 8 / 5), ylab = ylab, main = main,
#                      legend.text = rownames(values), args.legend = list(x = "topright"))
#   speed_ups <- values[, 1] / values
#   labels <- ifelse(col(values) == 1, sprintf("%.2f", values),
#                    sprintf("%.2f\n\u00d7%.1f", values, speed_ups))
#   par(ps = 8)
#   text(centres, values, labels, pos = 3)
#   par(ps = 9)
#   mtext(note, side = 1, line = 4, adj = 0, font = 3)
# }
# timing_matrix <- rbind(t(timings$alone), t(timings$with_step))
# dimnames(timing_matrix) <- list(c("pipeline alone", sprintf("with a %.0f ms training step", step_s * 1e3)),
#                                 timings$pipeline)
# timing_note <- sprintf(paste("Median of %d epochs after a warm-up, timed in turns; %d global batches of %d;",
#                              "one read waits %.0f ms.\nThe training step is a wait as long as a step of",
#                              "%d virtual CPU replicas here."), rounds, batches_per_epoch, global_batch_size,
#                        py$read_latency_s * 1e3, num_replicas)
# draw_timings <- function() grouped_bars(timing_matrix, "seconds per epoch (lower is better)",
#                                         "Input pipelines: what each transformation buys", timing_note)
# dir.create(file.path("results", "figures"), recursive = TRUE, showWarnings = FALSE)  # outside version control
# png("results/figures/04_input_pipelines_R_alone_vs_training_step.png", width = 10, height = 4, units = "in", res = 100)
# draw_timings()
# invisible(dev.off())

# %% magic_args="-w 10 -h 4 --units in -r 100" language="R"
# # Both timings of every pipeline: alone, and with a stand-in training step after each batch.
# draw_timings()

# %% language="R"
# # What this run measured, transformation by transformation (each against the one before), and the
# # ordering of the five; a factor within no_change_within of 1 is read as "no change" (noise).
# no_change_within <- 0.15
# verdict <- function(factor)  # "faster", "slower" or "no change" for a speed-up factor (time before / time after)
#   ifelse(factor > 1 + no_change_within, "faster",
#          ifelse(factor < 1 / (1 + no_change_within), "slower", "no change"))
# alone <- setNames(timings$alone, timings$pipeline)
# with_step <- setNames(timings$with_step, timings$pipeline)
# for (i in 2:length(alone)) {
#   factors <- c(alone[[i - 1]] / alone[[i]], with_step[[i - 1]] / with_step[[i]])
#   cat(sprintf("%-15s vs %-15s alone x%4.1f %-9s   with a training step x%4.1f %s\n", names(alone)[i],
#               names(alone)[i - 1], factors[1], verdict(factors[1]), factors[2], verdict(factors[2])))
# }
# cat("alone, fastest first:", paste(names(sort(alone)), collapse = " < "), "\n")
# cat("with a training step, fastest first:", paste(names(sort(with_step)), collapse = " < "), "\n")

# %% [markdown]
# What each transformation can buy, and why; the verdicts above say what this run measured (on a
# busy machine a small effect can come out either way, which is why they allow for noise):
#
# - **+ shuffle** shuffles a few thousand keys, which costs next to nothing beside a 20 ms read.
#   Without a prefetch, reading and training take turns: each epoch costs all the reads *plus* all
#   the steps.
# - **+ prefetch** has nothing to overlap with when the pipeline runs alone. With a training step
#   it reads the next batch while the step runs, so an epoch costs about the *larger* of "all
#   reads" and "all steps" instead of their sum.
# - **+ parallel map** keeps several reads in flight, which shortens the pipeline alone: but only
#   as many as tf.data's thread pool has threads (next cell). With a training step it can only help
#   as long as reading is slower than training: after that the step time sets the pace, and the
#   "alone" bars show the head room left for a faster accelerator.
# - **+ cache** reads storage only in the first epoch; later epochs come from memory, so alone it
#   needs no reads at all, and with a training step the step time sets the pace again.
#   `dataset_cache()` replays what reached it, in that order: a shuffle placed before it is frozen
#   into the cache, so shuffle after the cache.
#
# How many reads does the parallel map keep in flight? A map runs each call of its function on
# tf.data's thread pool, which by default has one thread per schedulable CPU core; a read that
# waits holds its thread. `AUTOTUNE` never gives a map more parallel calls than that pool has
# threads (the autotuner's `parallelism` parameter has the maximum `ctx->runner_threadpool_size()`,
# `tensorflow/core/kernels/data/parallel_map_dataset_op.cc` in TensorFlow's source; the C++ is not
# in the wheel). We time the parallel map alone with 1 call, with `AUTOTUNE`, with 8 calls, and with
# both on a private pool of 8 threads (the `threading$private_threadpool_size` option); the reads in
# flight are all the reads of an epoch one after another, divided by the epoch's time.

# %% language="R"
# # Reads in flight: the parallel-map pipeline alone, with several num_parallel_calls and thread-pool sizes.
# parallel_reads <- function(calls, threads = NULL) {
#   options <- tf$data$Options()
#   optimization <- options$experimental_optimization
#   optimization$inject_prefetch <- FALSE
#   if (!is.null(threads)) {
#     threading <- options$threading
#     threading$private_threadpool_size <- as.integer(threads)
#   }
#   shuffled_keys() |> dataset_batch(global_batch_size, drop_remainder = TRUE) |>
#     dataset_map(read_and_decode, num_parallel_calls = calls) |> dataset_prefetch(autotune) |>
#     dataset_options(options)
# }
# settings <- list("1 call" = parallel_reads(1L), "AUTOTUNE" = parallel_reads(autotune),
#                  "8 calls" = parallel_reads(8L), "8 calls, 8 threads" = parallel_reads(8L, threads = 8L),
#                  "AUTOTUNE, 8 threads" = parallel_reads(autotune, threads = 8L))
# for (pipeline in settings) seconds_per_epoch(pipeline)  # warm-up (AUTOTUNE also tunes here)
# settings_epochs <- matrix(NA_real_, rounds, length(settings), dimnames = list(NULL, names(settings)))
# for (round in seq_len(rounds))
#   for (name in names(settings)) settings_epochs[round, name] <- seconds_per_epoch(settings[[name]])
# all_reads_s <- batches_per_epoch * py$read_latency_s
# in_flight <- all_reads_s / apply(settings_epochs, 2, median)
# cat(sprintf("schedulable CPU cores: %d\n", py_eval("len(__import__('os').sched_getaffinity(0))")))
# for (name in names(in_flight))
#   cat(sprintf("%-20s %5.2f s/epoch: %4.1f reads in flight\n", name, all_reads_s / in_flight[[name]],
#               in_flight[[name]]))

# %% [markdown]
# On the default pool, neither `AUTOTUNE` nor an explicit 8 gets beyond about one read in flight
# per core: calls beyond the pool's threads wait for a thread. With a pool of 8 threads, both reach 8
# reads at once (fewer on average over this short epoch, as printed). A read that waits for storage uses no CPU, so for latency-bound input (network
# storage, a remote service) give the pipeline more threads than cores and set the parallelism to
# match; for CPU-bound decoding, more threads than cores only adds switching.
#
# Finally the real model, fed by the slowest and by the fastest pipeline. Two things blur this
# comparison. The model and the pipeline share two CPU cores here, so how long a step takes depends
# on what else runs. And under a strategy with several replicas, `experimental_distribute_dataset()`
# (which `fit()` calls) reads ahead by itself: it cuts each global batch into per-replica slices and
# appends `prefetch(replicas per worker)` to the pipeline (`_make_rebatch_fn` in TensorFlow's
# `tensorflow/python/distribute/input_lib.py`), so even **read** prepares the next batch while the
# model trains, and hides some of its reads. The cell says which pipeline was faster in this run,
# by how much, and whether that is beyond what we read as noise.

# %% language="R"
# # The real model under MirroredStrategy (ReductionToOneDevice), fed by the slowest and the fastest pipeline.
# trained <- seconds_per_epoch_training(lapply(pipelines[c("read", "+ cache")],
#                                               function(pipeline) list(on = strategy, dataset = pipeline)))
# for (name in names(trained)) cat(sprintf("%-15s %5.2f s/epoch\n", name, trained[[name]]))
# ranked <- names(sort(trained))
# factor <- trained[[ranked[2]]] / trained[[ranked[1]]]
# cat(sprintf("with the real model, '%s' took %.0f%% less time per epoch than '%s': x%.2f, %s the %.0f%% read as noise\n",
#             ranked[1], (1 - 1 / factor) * 1e2, ranked[2], factor,
#             if (verdict(factor) == "no change") "within" else "beyond", no_change_within * 1e2))

# %% [markdown]
# ### Exercise q2: cache, then shuffle
#
# Write a function `epoch_pipeline(records, global_batch, seed)` for records that are slow to read (a small dataset of `(image, label)` examples, which fits in a shuffle buffer): read them only in the first epoch, reshuffle every epoch from `seed`, batch by the global batch with the remainder dropped, and prepare the next batch while the model trains. The check reads two epochs, counts the reads, and compares the orders.
#
# Complete the cell, then run the check below it; `kd_hint(ex$q2)` gives a hint, `kd_solution(ex$q2)` the solution.
#
# <details><summary>Solution</summary>
#
# `records |> dataset_cache() |> dataset_shuffle(buffer_size, seed = seed) |> dataset_batch(global_batch, drop_remainder = TRUE) |> dataset_prefetch()`. `dataset_cache()` comes first: after one epoch read to the end, later epochs come from memory. The shuffle comes after it, so that each epoch is drawn anew (a shuffle before the cache would be cached too, and every epoch would repeat the first order). A seeded shuffle gives the same sequence of epoch orders every time the pipeline is built; `dataset_prefetch()` goes last.
#
# </details>

# %% nbgrader={"grade": false, "grade_id": "q2_answer", "locked": false, "schema_version": 3, "solution": true, "task": false} language="R"
# epoch_pipeline <- NULL  # a function of (records, global_batch, seed)
# ### BEGIN SOLUTION
# epoch_pipeline <- function(records, global_batch, seed) {
#   records |>
#     dataset_cache() |>
#     dataset_shuffle(1000, seed = seed) |>
#     dataset_batch(global_batch, drop_remainder = TRUE) |>
#     dataset_prefetch()
# }
# ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "q2", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false} language="R"
# # NBVAL_CHECK_OUTPUT
# kd_check(ex$q2)
# ### BEGIN HIDDEN TESTS
# kd_assert_correct(ex$q2)
# ### END HIDDEN TESTS

# %% [markdown]
# ## What changes with more replicas
#
# The pipeline itself does not know about replicas: it yields global batches. `fit()` hands the
# dataset to `strategy$experimental_distribute_dataset()`, which splits every global batch into
# per-replica batches and places each on its replica's device. We can call it ourselves to look.

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # Split the global batches between the replicas and look at the first one.
# distributed <- strategy$experimental_distribute_dataset(pipelines[["+ cache"]])
# batch <- iter_next(as_iterator(distributed))
# for (part in strategy$experimental_local_results(batch[[1]]))
#   cat(sprintf("%s: (%s)\n", part$device, paste(unlist(part$shape$as_list()), collapse = ", ")))

# %% [markdown]
# A final batch that is smaller than the global batch is cut, in replica order, into shares of
# (its size / N) rounded up; the last replica gets what is left, which may be fewer or even none.
# Each replica averages the loss over its own share, and the strategy then averages the replicas,
# so the examples of a smaller share weigh more. That is the one place in the input pipeline where 1
# replica and N replicas would compute different gradients from the same data (lesson 3 shows other
# causes in the model), and it is why kerasdist batches training data with `drop_remainder = TRUE`.
# The exact remedy, if you keep the last batch, is to divide each replica's *sum* of per-example
# losses by the number of examples in the whole global batch (a count summed over the replicas), in
# a custom loop; `fit()` instead divides each replica's mean by N (`scale_loss_for_distribution` in
# `keras/src/losses/loss.py`). We build such a last batch ourselves, of 5 examples.
#
# **Predict, then run.** How will 2 replicas share 5 examples? Decide, then run: the cell asserts
# the rule above.

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # An uneven global batch of 5 examples, split between 2 replicas.
# remainder_size <- 5L
# remainder <- in_memory |> dataset_take(remainder_size) |> dataset_batch(global_batch_size)
# batch <- iter_next(as_iterator(strategy$experimental_distribute_dataset(remainder)))
# shares <- vapply(strategy$experimental_local_results(batch[[2]]),
#                  function(part) as.integer(part$shape$as_list()[[1]]), integer(1))
# print(shares)
# share <- -(-remainder_size %/% num_replicas)  # remainder_size / num_replicas, rounded up
# stopifnot(identical(shares, pmax(0L, pmin(share, remainder_size - (seq_len(num_replicas) - 1L) * share))))
# cat(sprintf("an example of the share of %d weighs %.2g times as much as one of the share of %d\n",
#             min(shares), max(shares) / min(shares), max(shares)))
# cat(sprintf("fit() weighs each example 1/(N x its share): %s; a sum divided by the %d examples of the step weighs each 1/%d\n",
#             paste0("1/", num_replicas * shares, collapse = ", "), remainder_size, remainder_size))

# %% [markdown]
# When each worker should build its own pipeline (for example to read only its own files),
# `strategy$distribute_datasets_from_function()` calls your function once per input pipeline with
# an input context. Then *you* batch by the per-replica batch size, which the context computes from
# the global one, and you shard by input pipeline. On one machine there is one input pipeline; with
# several workers (lesson 5) there is one per worker.

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # Build the pipeline per input pipeline, batched by the per-replica batch size.
# make_dataset <- function(input_context) {
#   batch_size <- input_context$get_per_replica_batch_size(global_batch_size)
#   cat(sprintf("input pipeline %d of %d: %d replicas in sync, per-replica batch %d\n",
#               input_context$input_pipeline_id, input_context$num_input_pipelines,
#               input_context$num_replicas_in_sync, batch_size))
#   in_memory |>
#     dataset_shard(input_context$num_input_pipelines, input_context$input_pipeline_id) |>
#     dataset_cache() |>
#     dataset_shuffle(nrow(x_train), seed = 0L) |>
#     dataset_batch(batch_size, drop_remainder = TRUE) |>
#     dataset_prefetch(autotune)
# }
# per_replica_batches <- strategy$distribute_datasets_from_function(make_dataset)
# batch <- iter_next(as_iterator(per_replica_batches))
# for (part in strategy$experimental_local_results(batch[[1]]))
#   cat(sprintf("(%s)\n", paste(unlist(part$shape$as_list()), collapse = ", ")))

# %% [markdown]
# With more replicas you choose what stays fixed:
#
# - **the global batch** (as above): each replica gets a smaller share, the steps per epoch stay
#   the same, and training follows the same curve as on one device (lesson 3). Small shares can
#   leave big accelerators underused.
# - **the per-replica batch**: the global batch grows with N, an epoch has N times fewer steps,
#   and the learning rate usually has to grow with it (the linear scaling rule with warm-up,
#   lesson 3).

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # Per-replica batch and steps per epoch, for both choices, on this training set.
# per_replica_batch_size_fixed <- 32L
# replicas <- c(1L, 2L, 4L, 8L)
# print(data.frame(
#   replicas = replicas,
#   fixed_global_per_replica = global_batch_size %/% replicas,
#   fixed_global_steps = nrow(x_train) %/% global_batch_size,
#   fixed_per_replica_global = per_replica_batch_size_fixed * replicas,
#   fixed_per_replica_steps = nrow(x_train) %/% (per_replica_batch_size_fixed * replicas)
# ), row.names = FALSE)

# %% [markdown]
# And the time per epoch? With the global batch fixed, each replica computes on half the examples,
# so on two real GPUs a step would take about half the compute, plus the all-reduce. We measure it
# here, at steady state (the median of the timed epochs after an untimed first one, so tracing is
# excluded), with 1 and with 2 replicas, the model fed from memory, both under `MirroredStrategy` with
# `ReductionToOneDevice` and the same pipeline. But here the **virtual CPU replicas share the same CPU
# cores**: two replicas do the same arithmetic on the same cores, plus the all-reduce, so more
# replicas add no compute on this machine: expect no speed-up (a difference either way is per-replica
# overhead: two copies of the step competing for the cores, and the all-reduce; or noise). For
# what changes on real GPUs (compute / N +
# all-reduce + input time), see the labelled cost model of lesson 3
# ([03_convergence_R.ipynb](03_convergence_R.ipynb)).

# %% language="R"
# # Steady-state seconds per epoch with 1 and with 2 replicas (MirroredStrategy, ReductionToOneDevice), the same
# # global batch, fed from memory.
# one_replica <- tf$distribute$MirroredStrategy(devices = list(unlist(devices)[[1]]),
#                                               cross_device_ops = tf$distribute$ReductionToOneDevice())
# # Timed in turns, so that both see the same load on the machine.
# replica_runs <- list(list(on = one_replica, dataset = from_memory), list(on = strategy, dataset = from_memory))
# names(replica_runs) <- c("1 replica", sprintf("%d replicas", num_replicas))
# replica_epoch_s <- seconds_per_epoch_training(replica_runs)
# for (label in names(replica_epoch_s))
#   cat(sprintf("%-10s %5.2f s/epoch, %6.0f samples/s (mirrored, ReductionToOneDevice)\n", label,
#               replica_epoch_s[[label]], batches_per_epoch * global_batch_size / replica_epoch_s[[label]]))
# replica_matrix <- matrix(replica_epoch_s, nrow = 1,
#                          dimnames = list("seconds per epoch, steady state (median)", names(replica_epoch_s)))
# replica_note <- paste(sprintf("MirroredStrategy with ReductionToOneDevice; median of %d epochs after a warm-up.", rounds),
#                       "Virtual CPU replicas share the same CPU cores: expect no speed-up here.",
#                       "On real GPUs: see lesson 3's cost model (compute / N + all-reduce + input time).",
#                       sep = "\n")
# draw_replicas <- function() grouped_bars(replica_matrix, "seconds per epoch (lower is better)",
#                                          sprintf("Same global batch (%d), 1 vs %d replicas",
#                                                  global_batch_size, num_replicas), replica_note)
# png("results/figures/04_input_pipelines_R_replicas_steady_state.png", width = 8, height = 4, units = "in", res = 100)
# draw_replicas()
# invisible(dev.off())

# %% magic_args="-w 8 -h 4 --units in -r 100" language="R"
# # The same, drawn here: steady-state seconds per epoch, 1 vs 2 virtual CPU replicas.
# draw_replicas()

# %% [markdown]
# The all-reduce matters for one more thing. `compile(steps_per_execution = N)` makes `fit()` run N
# steps per call of its compiled function, which saves the per-step overhead of small models. Under
# `MirroredStrategy` with TF's own choice of all-reduce it fails in Keras 3.15 (keras-team/keras#19246,
# open); with `ReductionToOneDevice` it runs. The next cell tries both, with 2 steps per call.

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # fit() with 2 steps per call under MirroredStrategy: TF's own all-reduce choice, then ReductionToOneDevice.
# tf_choice <- tf$distribute$MirroredStrategy(devices = as.list(unlist(devices)))
# # Which all-reduce TF chose: a private attribute, read only to show it.
# cat("TF's choice over these CPU devices:", tf_choice$extended$`_cross_device_ops`$`__class__`$`__name__`, "\n")
# for (label in c("TF's choice", "ReductionToOneDevice")) {
#   on <- if (label == "TF's choice") tf_choice else strategy
#   set_random_seed(0)
#   with(on$scope(), {
#     model <- build_model()
#     model |> compile(optimizer = optimizer_adam(learning_rate = 1e-3),
#                      loss = loss_sparse_categorical_crossentropy(from_logits = TRUE), steps_per_execution = 2L)
#   })
#   outcome <- tryCatch({
#     model |> fit(from_memory, epochs = 1L, shuffle = FALSE, verbose = 0)
#     sprintf("fit ran, %d steps in %d calls", as.integer(model$optimizer$iterations$numpy()), batches_per_epoch %/% 2L)
#   }, error = function(error) {
#     text <- conditionMessage(error)
#     if (grepl("InvalidArgumentError", text) && grepl("You must feed a value", text))
#       "fit failed with InvalidArgumentError: You must feed a value for placeholder tensor ..."
#     else paste("fit failed:", strsplit(text, "\n")[[1]][1])
#   })
#   cat(sprintf("%s: %s\n", label, outcome))
# }

# %% [markdown]
# ### Sharding across workers
#
# Across **several workers** the dataset is also *sharded*: each worker must train on different
# examples. Under `MultiWorkerMirroredStrategy`, `experimental_distribute_dataset()` rewrites each
# worker's copy of the pipeline, as its options' `experimental_distribute$auto_shard_policy` says
# (`tensorflow/python/data/experimental/ops/distribute.py`, the auto-shard rewrite):
#
# - `AUTO`, the default: try `FILE`, and when the pipeline reads no files (no file reader such as
#   `tfrecord_dataset()` at its source, as with an in-memory array) fall back to `DATA`;
# - `FILE`: each worker reads only its own files: the rewrite shards the list of files, before
#   anything is read. You need at least as many files as workers; with fewer, `FILE` fails, and so
#   does `AUTO`, which falls back to `DATA` only when there are no files at all (end-of-lesson exercise 5);
# - `DATA`: every worker runs the whole pipeline and keeps its share by position. Each global batch
#   is first cut into per-replica slices, one per replica of the cluster
#   (`tensorflow/python/distribute/input_lib.py`), and then a `shard(number of workers, worker
#   index)` at the end of the pipeline keeps every k-th **per-replica slice** (k workers), starting
#   at the worker's own index (with one replica per worker: worker 0 gets slice 0 of each global
#   batch, worker 1 slice 1, and so on);
# - `OFF`: no sharding, every worker sees everything (and `HINT` fills in a `shard(SHARD_HINT, ...)`
#   that you placed).
#
# Under `DATA` the workers never tell each other which examples they took: each one keeps slices by
# their position in its own copy of the pipeline. That is right only if **every worker produces the
# same elements in the same order**, so a shuffle must have a seed. With an in-memory array there are
# no files to split, so kerasdist's pipelines ask for `DATA` themselves and seed each epoch's
# shuffle with (seed, epoch); here is how to ask for it.

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # The default policy; then ask for sharding by data and read the policy back from the dataset. reticulate
# # would turn the enum into a plain integer, which the option rejects: keep it a Python object (convert = FALSE).
# tf_python <- import("tensorflow", convert = FALSE)
# shard_policy <- function(value) py_to_r(tf_python$data$experimental$AutoShardPolicy(value)$name)
# cat("default:", shard_policy(tf_python$data$Options()$experimental_distribute$auto_shard_policy), "\n")
# sharding <- tf$data$Options()
# distribute <- sharding$experimental_distribute
# distribute$auto_shard_policy <- tf_python$data$experimental$AutoShardPolicy$DATA
# sharded <- from_memory$with_options(sharding)
# cat("asked for:", shard_policy(sharded$options()$experimental_distribute$auto_shard_policy), "\n")

# %% [markdown]
# We can watch `DATA` sharding without a cluster: build two workers' copies of a pipeline of keys in
# this process and apply what the rewrite applies (per-replica slices of the global batch, then
# `shard`), with one replica per worker. Each worker runs its own program, which usually starts by
# setting a global seed (`set_random_seed()` calls `tf.random.set_seed`); we simulate that by
# setting it again before building each worker's pipeline. The global seed matters here: a shuffle
# without a seed of its own then takes the next seed from a generator seeded by the global seed, so
# the n-th unseeded random op of every program gets the same seed (`get_seed` in
# `tensorflow/python/framework/random_seed.py`); with no global seed, it draws a random one.
#
# **Predict, then run.** Four cases: no global seed and an unseeded shuffle; a global seed and an
# unseeded shuffle; the same, but worker 1's program made one more random op before its pipeline
# (say, a validation set it alone shuffles); and `dataset_shuffle(..., seed = 0L)`. In which do some
# keys reach both workers, and some neither?

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # Two workers' shares of one epoch under DATA sharding; each worker's program is simulated from its start.
# num_workers <- 2L
# worker_share <- function(worker_index, shuffle_seed) {  # the keys one worker trains on in one epoch
#   global_batches <- keys |> dataset_shuffle(num_records, seed = shuffle_seed) |>
#     dataset_batch(global_batch_size, drop_remainder = TRUE)
#   slices <- global_batches$rebatch(global_batch_size %/% num_workers)  # one replica per worker
#   slices |> dataset_shard(num_workers, as.integer(worker_index))
# }
# share_keys <- function(dataset) unlist(iterate(dataset, function(batch) as.numeric(as.array(batch))))
# # The keys a worker's program trains on: set the global seed (NULL: none), maybe make one more unseeded
# # random op, then build the worker's share.
# worker_program <- function(worker_index, global_seed, shuffle_seed = NULL, one_more_random_op = FALSE) {
#   tf$random$set_seed(global_seed)
#   if (one_more_random_op && worker_index == 1L)
#     keys |> dataset_shuffle(num_records)  # creating it takes the next op seed
#   share_keys(worker_share(worker_index, shuffle_seed))
# }
# cases <- list("no global seed, unseeded shuffle" = list(global_seed = NULL),
#               "global seed, unseeded shuffle" = list(global_seed = 0L),
#               "global seed, unseeded, one more op" = list(global_seed = 0L, one_more_random_op = TRUE),
#               "shuffle(seed=0)" = list(global_seed = NULL, shuffle_seed = 0L))
# overlap <- c()
# for (label in names(cases)) {
#   shares <- lapply(seq_len(num_workers) - 1L, function(index) do.call(worker_program, c(list(index), cases[[label]])))
#   on_both <- length(intersect(shares[[1]], shares[[2]]))
#   on_neither <- num_records - length(union(shares[[1]], shares[[2]]))
#   overlap[label] <- on_both
#   cat(sprintf("%-34s: %d keys, worker 0 trains on %d, worker 1 on %d; %s on both, %s on neither\n", label,
#               num_records, length(shares[[1]]), length(shares[[2]]), if (on_both > 0) "some" else "none",
#               if (on_neither > 0) "some" else "none"))
# }
# stopifnot(identical(unname(overlap > 0), c(TRUE, FALSE, TRUE, FALSE)))

# %% [markdown]
# With `shuffle(seed=0)` the two shares are a clean partition of the epoch. With a global seed the
# unseeded shuffles agreed too, but only because both programs made the same random ops in the same
# order: one op more in one program, and they part, as without any seed (this run's overlaps are
# printed below; as many keys were never trained on). That is fragile (a chief-only step, a
# library that adds a random op), so **seed the shuffle itself**, and with several epochs seed
# each epoch's shuffle with (seed, epoch), as kerasdist does. The cell also checks that the
# simulation takes the same slices as TensorFlow's own rewrite (the private class the strategy
# calls), with the default policy `AUTO`, which falls back to `DATA` here.

# %% language="R"
# # How many keys the unseeded shares overlapped in this run; and the simulation against TensorFlow's rewrite.
# rewrite <- import("tensorflow.python.data.experimental.ops.distribute")$`_AutoShardDataset`  # private: the rewrite itself
# for (label in c("no global seed, unseeded shuffle", "global seed, unseeded, one more op"))
#   cat(sprintf("%s: %d of %d keys on both workers (and as many on neither)\n", label, overlap[[label]],
#               num_records))
# for (index in seq_len(num_workers) - 1L) {
#   global_batches <- keys |> dataset_shuffle(num_records, seed = 0L) |>
#     dataset_batch(global_batch_size, drop_remainder = TRUE)
#   rewritten <- rewrite(global_batches$rebatch(global_batch_size %/% num_workers), num_workers, index,
#                        num_replicas = num_workers)
#   stopifnot(identical(share_keys(worker_share(index, 0L)), share_keys(rewritten)))
# }
# cat(sprintf("TensorFlow's auto-shard rewrite (policy AUTO) kept the same slices as worker_share, for all %d workers\n",
#             num_workers))

# %% [markdown]
# ### Exercise q3: the same order on every worker
#
# Write a function `worker_dataset(keys, global_batch, seed)` that every worker of a cluster would call to build its copy of the pipeline: shuffle the keys (few enough for one shuffle buffer), batch them by the global batch with the remainder dropped, and ask for `DATA` sharding. The check builds two workers' copies, the second after one more random op, as in the cell above, shards them with TensorFlow's own rewrite, and checks that every key reaches exactly one worker.
#
# Complete the cell, then run the check below it; `kd_hint(ex$q3)` gives a hint, `kd_solution(ex$q3)` the solution.
#
# <details><summary>Solution</summary>
#
# Under `DATA` sharding each worker keeps its slices of every global batch by position, so all copies must make the same order: `keys |> dataset_shuffle(buffer_size, seed = seed) |> dataset_batch(global_batch, drop_remainder = TRUE)`, then `dataset_options()` with `auto_shard_policy` set to `AutoShardPolicy$DATA` (kept a Python object, `convert = FALSE`, as above). An unseeded shuffle takes its seed from the program's random state, which one extra random op changes: some keys then reach both workers and as many neither.
#
# </details>

# %% nbgrader={"grade": false, "grade_id": "q3_answer", "locked": false, "schema_version": 3, "solution": true, "task": false} language="R"
# worker_dataset <- NULL  # a function of (keys, global_batch, seed)
# ### BEGIN SOLUTION
# worker_dataset <- function(keys, global_batch, seed) {
#   options <- tf$data$Options()
#   distribute <- options$experimental_distribute
#   distribute$auto_shard_policy <-
#     import("tensorflow", convert = FALSE)$data$experimental$AutoShardPolicy$DATA
#   keys |>
#     dataset_shuffle(1000, seed = seed) |>
#     dataset_batch(global_batch, drop_remainder = TRUE) |>
#     dataset_options(options)
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
# - **Order the steps**: list the files -> `dataset_shard()` them (when you shard by hand) -> read
#   (`dataset_interleave()` over the files) -> decode (parallel `dataset_map()`) -> `dataset_cache()`
#   -> `dataset_shuffle()` -> `dataset_batch(global_batch_size, drop_remainder = TRUE)` -> per-batch
#   work (a vectorized map) -> `dataset_prefetch()` last.
# - **Cache before shuffling**, after the expensive deterministic work: caching after the shuffle
#   would freeze the first epoch's order for every epoch. Data too big for memory can be cached to a
#   local file: `dataset_cache(filename = ...)`.
# - **Shuffle buffer**: a buffer as large as the dataset gives a uniform shuffle; a small one only
#   mixes neighbours. For big datasets shuffle the file order and keys, and keep the buffer modest.
#   Give every shuffle a seed, per epoch: (seed, epoch), as kerasdist does, so that workers agree
#   and a resumed run sees the same order as an uninterrupted one (lesson 2).
# - **Prefetch always**, and let `tf$data$AUTOTUNE` pick the prefetch buffer and the parallelism of
#   a CPU-bound `dataset_map()`. `AUTOTUNE` stops at the thread pool's size (one thread per core by
#   default), so for latency-bound reads give the pipeline more threads (the
#   `threading$private_threadpool_size` option) and set `num_parallel_calls` to match, as measured
#   above. `dataset_interleave(..., num_parallel_calls = ...)` reads several files at once, on the
#   same pool. Where the order does not matter, the `deterministic = FALSE` option lets parallel
#   stages hand out elements as they finish.
# - **Keep R out of the per-element path**: functions given to `dataset_map()` are traced once into
#   a TensorFlow graph, which is fast; R code that must run per element cannot run on tf.data's
#   threads.
# - **Batch by the global batch** and drop the remainder, so every replica gets an equal share; if
#   you must keep the last batch, divide each replica's summed loss by the global count of examples.
# - **Shard early.** With files, shard the file list, before reading, so that each worker reads only
#   its own (what `FILE` does; end-of-lesson exercise 5). With `distribute_datasets_from_function()`, shard by
#   `input_context$input_pipeline_id` first, then shuffle and batch by the per-replica batch size.
# - **`compile(steps_per_execution = N)`** runs many steps per call and helps small models a lot.
#   Under `MirroredStrategy` with TF's own all-reduce choice it fails in Keras 3.15 ("You must feed a
#   value for placeholder tensor", keras-team/keras#19246; shown above on CPU devices, where TF picks
#   `CollectiveAllReduce`; GPUs were not tried here); with `ReductionToOneDevice` it runs.
#   kerasdist's own loop (`engine = "loop"`) runs many steps per call under any strategy.
# - **Look before tuning**: the TensorFlow Profiler's input-pipeline analyser says whether a
#   step waits for input.

# %% [markdown]
# ## Summary
#
# - A pipeline yields **global** batches; the strategy splits each into N per-replica batches
#   (`experimental_distribute_dataset()`), or you build per-replica batches yourself with
#   `distribute_datasets_from_function()` and the input context's `get_per_replica_batch_size()`.
# - With a slow source, `dataset_prefetch()` overlaps reading with training, a parallel
#   `dataset_map()` overlaps reads with each other (at most one per thread of tf.data's pool, one per
#   core by default, whatever `AUTOTUNE` or `num_parallel_calls` say), and `dataset_cache()` removes
#   reading after the first epoch; shuffling keys is free.
# - An uneven last batch gives replicas unequal shares and unequal weights; drop it for training.
# - With more replicas, either the global batch stays fixed (same curve, smaller shares) or the
#   per-replica batch does (fewer steps, scale the learning rate); across workers the data is also
#   sharded, and `DATA` sharding needs every worker's shuffle to have the same explicit seed.

# %% [markdown]
# ## Exercises
#
# 1. Set `py$read_latency_s <- 0.002`. Which transformations still matter, and why? (Compare the
#    read time per batch with the training step time.)
#
#    <details><summary>Hint</summary>
#
#    A prefetch or a parallel map hides reads only when there is something slow to hide: compare
#    `batches_per_epoch * py$read_latency_s` with `batches_per_epoch * step_s`.
#    </details>
#
#    <details><summary>Solution</summary>
#
#    ```r
#    py$read_latency_s <- 0.002  # read_records reads the Python global at call time
#    for (name in names(pipelines))
#      cat(sprintf("%-15s alone %.2f  with a step %.2f\n", name, seconds_per_epoch(pipelines[[name]]),
#                  seconds_per_epoch(pipelines[[name]], step_s)))
#    ```
#
#    The reads now take a tenth of what they took, a small share of the training steps, so every
#    pipeline with a training step takes
#    about "all the steps": prefetch, parallel map and cache hardly matter any more. They matter
#    again as soon as the accelerator gets faster than the input (a bigger GPU, more replicas).
#    </details>
#
# 2. Move `dataset_cache()` after `dataset_shuffle()` in the cached pipeline and print the first
#    five labels of two epochs. What happens to the order, and why is that bad for training?
#
#    <details><summary>Hint</summary>
#
#    `dataset_cache()` stores the elements exactly as they reach it, the first time through.
#    </details>
#
#    <details><summary>Solution</summary>
#
#    ```r
#    frozen <- keys |> dataset_batch(global_batch_size) |> dataset_map(read_and_decode) |>
#      dataset_unbatch() |> dataset_shuffle(num_records, seed = 0L) |> dataset_cache() |>
#      dataset_batch(global_batch_size)
#    # Whole epochs: a cache is kept only once an epoch has been read to the end.
#    for (epoch in 1:2) {
#      labels <- integer()
#      iterate(frozen, function(batch) labels <<- c(labels, as.integer(batch[[2]])))
#      print(labels[1:5])
#    }
#    ```
#
#    Both epochs print the same labels: the shuffled order of the first epoch was cached, so every
#    epoch sees the same batches in the same order, and the model can fit to that order.
#    </details>
#
# 3. Give the parallel-map pipeline a private pool of 8 threads (`parallel_reads(calls, threads = 8L)`)
#    and try `num_parallel_calls` of 2, 4, 8 and 16, and `autotune`. How many reads are in flight
#    with each? Where does `AUTOTUNE` stop, and why?
#
#    <details><summary>Hint</summary>
#
#    What does a thread do while `time.sleep()` waits for "storage"? And how many threads can run
#    the map's calls?
#    </details>
#
#    <details><summary>Solution</summary>
#
#    ```r
#    for (calls in c(2L, 4L, 8L, 16L, autotune)) {
#      pipeline <- parallel_reads(calls, threads = 8L)
#      seconds_per_epoch(pipeline)  # warm-up
#      cat(sprintf("%d %.1f reads in flight\n", calls, all_reads_s / seconds_per_epoch(pipeline)))
#    }
#    ```
#
#    The reads in flight follow the calls up to 8, the number of threads: a read that waits for
#    storage uses no CPU, so 8 waiting reads run on 2 cores, but each holds a thread. 16 calls do no
#    better than 8: the calls beyond the threads wait for one. `AUTOTUNE` climbs to 8 at once (fewer on average over a short epoch) and stops
#    there: the autotuner never gives a parallel map more calls than the thread pool has threads
#    (its `parallelism` parameter has the maximum `ctx->runner_threadpool_size()`,
#    `tensorflow/core/kernels/data/parallel_map_dataset_op.cc`). On the default pool that cap is the
#    number of cores, which is what the lesson's run measured.
#    </details>
#
# 4. Set `num_replicas <- 4L`, restart the kernel and split a global batch of 70 examples. What
#    shares do the replicas get?
#
#    <details><summary>Hint</summary>
#
#    Shares of 70 / 4 rounded up, in replica order; the last replica gets what is left.
#    </details>
#
#    <details><summary>Solution</summary>
#
#    ```r
#    batch <- iter_next(as_iterator(strategy$experimental_distribute_dataset(
#      in_memory |> dataset_take(70) |> dataset_batch(70))))
#    print(sapply(strategy$experimental_local_results(batch[[2]]), function(part) part$shape$as_list()[[1]]))
#    ```
#
#    The first three replicas get 18 examples and the last one 16, whose examples weigh a little
#    more in the averaged gradient. Try 6 examples too: shares of 2, 2, 2 and 0, one replica idle.
#    </details>
#
# 5. Shard files. Write the keys 0-399 into 4 TFRecord files of 100 keys each, read them with
#    `dataset_interleave()` over the file list, and apply TensorFlow's rewrite for 2 workers
#    (`rewrite(dataset, 2L, worker_index, num_replicas = 2L)`, as above) with the default policy,
#    then with `DATA`. Which files does each worker read? Then try 1 file for 2 workers.
#
#    <details><summary>Hint</summary>
#
#    `tf_python$io$TFRecordWriter(path)$write(...)` writes a record; write a key serialized with
#    `tf_python$io$serialize_tensor()` (the module imported with `convert = FALSE`, so the bytes stay
#    Python bytes); `tf$io$parse_tensor(record, tf$int64)` reads it back. A key's file is
#    `key %/% 100`.
#    </details>
#
#    <details><summary>Solution</summary>
#
#    ```r
#    folder <- tempfile("keys")
#    dir.create(folder)
#    files <- file.path(folder, sprintf("keys-%d.tfrecord", 0:3))
#    for (index in 0:3) {
#      writer <- tf_python$io$TFRecordWriter(files[index + 1])
#      for (key in seq.int(index * 100L, length.out = 100L))
#        writer$write(tf_python$io$serialize_tensor(tf_python$constant(key, tf_python$int64))$numpy())
#      writer$close()
#    }
#    from_files <- function(paths, policy = "AUTO") {
#      options <- tf$data$Options()
#      distribute <- options$experimental_distribute
#      distribute$auto_shard_policy <- tf_python$data$experimental$AutoShardPolicy[[policy]]
#      tensor_slices_dataset(as.array(paths)) |>  # as.array: a 1-d array even for one file
#        dataset_interleave(function(path) tfrecord_dataset(path), cycle_length = 2L, num_parallel_calls = 2L) |>
#        dataset_map(function(record) tf$io$parse_tensor(record, tf$int64)) |>
#        dataset_shuffle(400L, seed = 0L) |>
#        dataset_batch(32L) |>
#        dataset_options(options)
#    }
#    for (policy in c("AUTO", "DATA")) {
#      for (worker in 0:1) {
#        keys_read <- share_keys(rewrite(from_files(files, policy), 2L, worker, num_replicas = 2L))
#        cat(policy, worker, "files", sort(unique(keys_read %/% 100)), length(keys_read), "\n")
#      }
#    }
#    iter_next(as_iterator(rewrite(from_files(files[1]), 2L, 0L, num_replicas = 2L)))  # one file, two workers
#    ```
#
#    With `AUTO` the rewrite finds the file reader and shards the *file list*: worker 0 reads files
#    0 and 2, worker 1 files 1 and 3, each whole file and nothing else, so no worker reads what it
#    does not train on. With `DATA` both read all four files and keep every other batch. With one
#    file and two workers `AUTO` does not fall back to `DATA`: the iterator fails with "Could not
#    apply FILE based sharding: the dataset only has 1 file(s), which is not enough for the required
#    2 shards/workers", and suggests `DATA` or `OFF`, or more files than workers.
#    </details>
#
# Next: [Multi-worker training](05_multi_worker_R.ipynb)
