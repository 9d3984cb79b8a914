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
# # Keras 3's own distribution API on JAX, side by side with tf.distribute (R, keras3)
#
# This is the R twin of [07_keras_distribution_jax.ipynb](07_keras_distribution_jax.ipynb): the
# same workflow and the same sections, written with the R package keras3 on its JAX backend. The
# notebook runs on a Python kernel; the R code lives in `%%R` cells (rpy2), and R draws the figure
# too. keras3 wraps layers, models and callbacks; `keras.distribution` has no R wrappers yet, so
# the R code reaches it as `keras$distribution$...` through reticulate.
#
# **What you'll learn**
#
# - why Keras' backend is chosen before Keras loads (`use_backend("jax")`), and why a running
#   session cannot switch it;
# - how to get N devices out of one CPU for JAX (`--xla_force_host_platform_device_count`), the
#   counterpart of lesson 1's virtual CPUs;
# - `DataParallel`: `fit()` on N devices, with the same per-step loss as one device and as
#   TensorFlow's `MirroredStrategy` on the same data order;
# - `ModelParallel`: a `DeviceMesh` and a `LayoutMap` that shard the Dense kernels across two
#   devices (tensor parallelism), how to read where each weight lives, and where Adam's moments go;
# - how to compare runs that should take the same steps: by their weights, since a per-step loss
#   recovered from Keras' running mean is only as precise as that mean;
# - beyond one machine: `keras$distribution$initialize` joins processes in which `fit()` trains as
#   one, the multi-worker `fit()` that the TensorFlow backend cannot run today (lesson 5);
#   kerasdist's JAX engine runs it (`kerasdist launch --backend jax`, or one process per Slurm task)
#   with checkpoints that resume exactly;
# - checkpoint and resume with `callback_backup_and_restore()` on JAX (and `OrbaxCheckpoint`, which
#   saves several processes' state; resuming from it is up to you), and a map from every tf.distribute idea of lessons 1-6 to its
#   keras.distribution counterpart.
#
# **What you need**: R with the package keras3 (`install.packages("keras3")`), rpy2 and JAX (the
# `jax` extra) in the kernel's Python environment, and about a minute on a 2-core CPU. The data is
# full MNIST when Keras has it cached or can download it, otherwise a sample of a few thousand real
# MNIST digits (offline). The stored outputs come from a run on that sample;
# `bash scripts/run_notebooks.sh --r-twins` runs the notebook again.

# %% [markdown]
# ## Introduction
#
# Lessons 1-6 distribute training with `tf$distribute`: a *strategy* owns the devices, and a model
# built in its scope gets *mirrored variables*. Keras 3's own answer, `keras.distribution`, is
# implemented today for JAX. It describes the devices as a **mesh** with named axes and each tensor
# by a **layout**: along which mesh axes it is split. Data parallelism splits the batch along the
# `batch` axis and copies every weight; model parallelism splits chosen weights along the `model`
# axis. JAX compiles one program for all devices from those layouts and inserts the all-reduce.
#
# ![A device mesh of two CPU devices. DataParallel: the batch is split along the mesh axis, every
# weight is copied on both devices, and the gradients are all-reduced. ModelParallel: the hidden
# Dense layers' kernels and biases are split by columns along the model axis, each device holds
# half of each, the logits layer is copied on both, and the batch is not
# split](figures/keras_distribution_mesh.svg)
#
# The lesson trains the course's MLP on the same digits, in the same order, from the same initial
# weights, five ways: one JAX device, `DataParallel` on two, `ModelParallel` on two, TensorFlow's
# `MirroredStrategy` on two virtual CPUs, and two JAX processes, and checks that they take the
# same steps.

# %% [markdown]
# ## Setup
#
# Keras reads `KERAS_BACKEND` once, when it is first imported, and JAX reads `XLA_FLAGS` once, when
# it first starts its CPU client. keras3's `use_backend("jax")` sets `KERAS_BACKEND` for R and for
# Python; `XLA_FLAGS` is set in Python's environment the same way. Both happen before anything
# loads Keras; in particular the Python side of this notebook imports nothing but rpy2's magic
# (kerasdist's TensorFlow work needs Keras on the TensorFlow backend, which cannot share a process
# with Keras on JAX): the TensorFlow run is a command of its own (`python -m
# kerasdist.measure.same_batches mirrored`), and so are the processes of kerasdist's JAX engine
# (`kerasdist launch --backend jax`). kerasdist's data loader needs no backend and runs in this
# session. `KERASDIST_DATA` chooses the data: `auto` (the default) takes full MNIST when
# available; the test suite sets it to `sample`.
#
# The sections that teach a skill end with a checked exercise: complete the cell, run the check
# under it, and it answers Correct, Incorrect with what is wrong, or Not attempted; `kd_hint(ex$q1)`
# and `kd_solution(ex$q1)` help.

# %%
# Load the %%R magic; nothing else on the Python side, so Keras is not loaded yet.
# %load_ext rpy2.ipython

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # rpy2 hooks a warning onto reticulate's loading about a crash that reticulate fixed long before
# # the versions keras3 needs (rstudio/reticulate#1188): drop the hook, keep the output clean.
# setHook(packageEvent("reticulate", "onLoad"), NULL, "replace")
# # Choose the backend and the number of CPU devices first, then attach keras3. reticulate attaches to
# # this kernel's Python, whose environment was copied when it started: pass both settings on to it.
# num_devices <- 2L
# keras3::use_backend("jax")
# reticulate::import("os")$environ$update(list(
#   KERAS_BACKEND = Sys.getenv("KERAS_BACKEND"),
#   XLA_FLAGS = sprintf("--xla_force_host_platform_device_count=%d", num_devices)))
# library(keras3)
# cat("Keras backend:", config_backend(), "\n")

# %% language="R"
# # Settings: where the digits come from, the global batch, the epochs of the resume example.
# data_source <- Sys.getenv("KERASDIST_DATA", "auto")
# global_batch_size <- 64L
# epochs <- 2L
# wait_s <- 300  # the longest any helper process may take
# python <- reticulate::py_exe()
# workdir <- tempfile("lesson07-")
# dir.create(workdir)
# np <- reticulate::import("numpy", convert = FALSE)
# library(kerasdist)  # the course's R package: this lesson's checked exercises
# ex <- kd_exercises("07")

# %% [markdown]
# **Predict, then run.** The cell below sets `KERAS_BACKEND` to `tensorflow` in this running
# session. Which backend does Keras report afterwards?

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # Keras read KERAS_BACKEND at import: changing it now changes nothing in this process.
# reticulate::import("os")$environ$update(list(KERAS_BACKEND = "tensorflow"))
# stopifnot(config_backend() == "jax")
# cat("after setting KERAS_BACKEND=tensorflow, Keras backend:", config_backend(), "\n")
# reticulate::import("os")$environ$update(list(KERAS_BACKEND = "jax"))
# # And keras3's use_backend() refuses once Keras is loaded.
# tryCatch(use_backend("tensorflow"), error = function(e) cat("use_backend(\"tensorflow\"):", conditionMessage(e), "\n"))

# %% [markdown]
# `use_backend()` refuses, and Python's `keras.config.set_backend()` works by deleting every `keras`
# module and importing Keras again, which leaves every model made before unusable. JAX's
# device count is fixed for good once its CPU client has started. So a session picks one backend;
# anything on another backend runs in another process, as the TensorFlow run below does.

# %% [markdown]
# ## N devices on one CPU
#
# Lesson 1 split the CPU into virtual devices with `tf$config$set_logical_device_configuration()`.
# JAX's counterpart is the XLA flag `--xla_force_host_platform_device_count=N`, read when JAX
# starts: the CPU then shows up as N devices that share the same cores but hold their own arrays,
# with a real all-reduce between them. (JAX's own setting `jax_num_cpu_devices`, made with
# `jax$config$update()` before JAX starts its CPU client, does the same without an environment
# variable.) `keras$distribution$list_devices()` lists them for any backend.

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # The devices JAX sees, and Keras' names for them.
# jax <- reticulate::import("jax", convert = FALSE)
# devices <- keras$distribution$list_devices()
# cat(sprintf("JAX %s: %d devices: %s\n", reticulate::py_to_r(jax$`__version__`),
#             reticulate::py_to_r(jax$device_count()), reticulate::py_str(jax$devices())))
# cat("Keras names them:", unlist(devices), "\n")

# %% [markdown]
# ## The same data and the same starting weights
#
# Every run starts from one set of initial weights, saved once to a backend-neutral `.weights.h5`
# file, and reads the same training digits in the same order, with no shuffling. The digits come
# from kerasdist's loader (NumPy arrays, no backend); it prints which source it used and how many
# samples each split holds.

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # Load the digits with kerasdist's loader: NumPy arrays, split with seed 0 as in every lesson.
# data <- reticulate::import("kerasdist")$load_mnist(data_source, seed = 0L)
# x_train <- data$x_train
# y_train <- data$y_train

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # Fix the order once: NumPy's seeded permutation (the Python lesson's), cut to whole global batches.
# n_train <- length(y_train)
# steps <- n_train %/% global_batch_size
# order <- reticulate::py_to_r(np$random$default_rng(0L)$permutation(n_train)) + 1L  # R counts from 1
# order <- order[seq_len(steps * global_batch_size)]
# x_ordered <- x_train[order, ]
# y_ordered <- as.integer(y_train[order])
# arrays_file <- file.path(workdir, "train.npz")
# np$savez(arrays_file, x = np$asarray(x_ordered, dtype = "float32"), y = np$asarray(y_ordered, dtype = "int32"))
# cat(sprintf("%d steps of %d digits; %d digits left over\n", steps, global_batch_size,
#             n_train - steps * global_batch_size))

# %% language="R"
# # The course's MLP, and its initial weights saved once for every run.
# build_mlp <- function() {
#   inputs <- keras_input(shape = 784, name = "digits")
#   logits <- inputs |>
#     layer_dense(256, activation = "relu", name = "dense_1") |>
#     layer_dense(256, activation = "relu", name = "dense_2") |>
#     layer_dense(10, name = "logits")
#   keras_model(inputs, logits, name = "mnist_mlp")
# }
# compiled_mlp <- function() {  # the MLP from the saved initial weights, compiled as in every lesson
#   model <- build_mlp()
#   load_model_weights(model, weights_file)
#   model |> compile(optimizer = optimizer_adam(learning_rate = 1e-3),
#                    loss = loss_sparse_categorical_crossentropy(from_logits = TRUE),
#                    metrics = list(metric_sparse_categorical_accuracy()))
#   model
# }
# # set_random_seed() also seeds TensorFlow where it is installed, so TensorFlow loads here (its
# # start-up lines go to stderr); Keras stays on JAX.
# set_random_seed(0)
# weights_file <- file.path(workdir, "initial.weights.h5")
# save_model_weights(build_mlp(), weights_file)

# %% [markdown]
# Keras logs the epoch's **running mean** of the loss after each batch, not the batch's own loss.
# The callback below recovers step k's loss from two means: k x mean_k - (k - 1) x mean_(k-1). Each
# mean is a float32, rounded to the nearest of its representable values, which lie one *ulp* (unit
# in the last place) apart; multiplied by k, that rounding grows k times. So two recovered losses
# can differ by up to about k x ulp(mean_k) + (k - 1) x ulp(mean_(k-1)) through rounding alone,
# however equal the runs: the callback keeps the means to compute that bound. Comparing the final
# **weights** is exact, and the lesson does both.

# %% language="R"
# # Each step's own loss, recovered from the running means that Keras logs (kept too, for the precision).
# # keras3 numbers batches from 1, so batch k's own loss is k * mean_k - (k - 1) * mean_(k-1).
# fit_one_epoch <- function(model) {
#   losses <- numeric(0)
#   means <- numeric(0)
#   previous_mean <- 0
#   recorder <- callback_lambda(
#     on_epoch_begin = function(epoch, logs) previous_mean <<- 0,
#     on_train_batch_end = function(batch, logs) {
#       losses[batch] <<- batch * logs$loss - (batch - 1) * previous_mean
#       means[batch] <<- logs$loss
#       previous_mean <<- logs$loss
#     })
#   model |> fit(x_ordered, y_ordered, batch_size = global_batch_size, epochs = 1L, shuffle = FALSE,
#                verbose = 0, callbacks = list(recorder))
#   list(losses = losses, means = means)
# }
# # The largest |difference| between two lists of weight arrays (0: the same values).
# max_weight_gap <- function(weights, reference) max(mapply(function(a, b) max(abs(a - b)), weights, reference))
# # The final weights a helper process wrote with --save-weights (arr_0, arr_1, ... in order).
# saved_weights <- function(path) {
#   saved <- np$load(path)
#   lapply(seq_len(reticulate::py_len(saved$files)) - 1L,
#          function(index) reticulate::py_to_r(saved$get(sprintf("arr_%d", index))))
# }

# %% [markdown]
# ## DataParallel: fit() on N devices
#
# `DataParallel` makes a one-axis mesh over the devices (axis `batch`), copies every weight onto
# each device and splits every batch along that axis. Used as a scope (`with(distribution$scope(),
# ...)`) or set for the whole session with `keras$distribution$set_distribution()`, it applies to
# the model built in it and to `fit()`. The loss of a step is the mean over the **global** batch, so
# the step is the same as on one device. First the reference: one device, no distribution.

# %% language="R"
# # The reference run: no distribution, so JAX puts everything on its first device.
# one_device <- compiled_mlp()
# one_device_run <- fit_one_epoch(one_device)
# one_device_losses <- one_device_run$losses
# cat("one device: weights on", reticulate::py_str(one_device$weights[[1]]$value$sharding$device_set), "\n")

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # The same model and data with DataParallel over all the devices.
# data_parallel <- keras$distribution$DataParallel(devices = devices)
# with(data_parallel$scope(), {
#   replicated <- compiled_mlp()
#   data_parallel_losses <- fit_one_epoch(replicated)$losses
# })
# cat("mesh shape", unlist(data_parallel$device_mesh$shape), "axes", unlist(data_parallel$device_mesh$axis_names), "\n")

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # Where the first kernel lives now: a full copy on every device (PartitionSpec() splits nothing).
# shard_shapes <- function(variable) vapply(variable$value$addressable_shards, function(shard)
#   sprintf("%s: (%s)", reticulate::py_str(shard$device), paste(unlist(shard$data$shape), collapse = ", ")), "")
# kernel <- replicated$weights[[1]]
# cat(kernel$path, sprintf("(%s)", paste(unlist(kernel$shape), collapse = ", ")), "->",
#     reticulate::py_str(kernel$value$sharding$spec), "\n")
# cat(paste0("  ", shard_shapes(kernel), "\n"), sep = "")

# %% [markdown]
# **Predict, then run.** TensorFlow's `MirroredStrategy` on two virtual CPUs now trains the same
# model from the same weights file on the same batches, in a process of its own. Will its per-step
# losses equal JAX's exactly, or only up to rounding? And how close is `DataParallel` to one JAX
# device?

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # TensorFlow's MirroredStrategy on the same batches, in a TensorFlow process.
# mirrored_weights_file <- file.path(workdir, "mirrored_final.npz")
# mirrored_run <- processx::run(python, c("-m", "kerasdist.measure.same_batches", "mirrored", "--arrays", arrays_file,
#                                         "--weights", weights_file, "--global-batch-size", global_batch_size,
#                                         "--replicas", num_devices, "--save-weights", mirrored_weights_file),
#                               timeout = wait_s, error_on_status = FALSE)
# if (mirrored_run$status != 0) cat(substring(mirrored_run$stderr, nchar(mirrored_run$stderr) - 3000))
# mirrored <- jsonlite::fromJSON(tail(strsplit(mirrored_run$stdout, "\n")[[1]], 1))
# mirrored_losses <- mirrored$losses
# cat(sprintf("MirroredStrategy: %d replicas, %d steps\n", mirrored$replicas, length(mirrored_losses)))

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # Compare the per-step losses of the three runs.
# jax_devices_gap <- max(abs(data_parallel_losses - one_device_losses))
# backends_gap <- max(abs(mirrored_losses - one_device_losses))
# stopifnot(length(one_device_losses) == steps, length(data_parallel_losses) == steps,
#           length(mirrored_losses) == steps, jax_devices_gap < 1e-4, backends_gap < 1e-4)
# cat("the same loss at every step on all three runs:", TRUE, "\n")

# %% language="R"
# # The measured gaps, how precise a recovered loss is, and for scale how far the loss moved.
# ulp_times_k <- seq_len(steps) * reticulate::py_to_r(np$spacing(np$asarray(one_device_run$means, dtype = "float32")))
# resolution <- ulp_times_k + c(0, head(ulp_times_k, -1))  # k x ulp(mean_k) + (k - 1) x ulp(mean_(k-1))
# cat(sprintf(paste("max |loss difference| per step: DataParallel vs one device %.1e,",
#                   "MirroredStrategy (TensorFlow) vs one device (JAX) %.1e\n"), jax_devices_gap, backends_gap))
# cat(sprintf(paste("what rounding the running means allows (k x ulp(mean_k) + (k - 1) x ulp(mean_(k-1))):",
#                   "up to %.1e\n"), max(resolution)))
# cat(sprintf("the loss went from %.3f to %.3f\n", one_device_losses[1], one_device_losses[steps]))

# %% [markdown]
# The loss gaps are of the size of what that rounding allows: the recovered per-step losses
# cannot tell these runs apart any better. The final weights can.

# %% language="R"
# # The final weights of each run against one device's: exact, unlike the recovered losses.
# data_parallel_weight_gap <- max_weight_gap(get_weights(replicated), get_weights(one_device))
# mirrored_weight_gap <- max_weight_gap(saved_weights(mirrored_weights_file), get_weights(one_device))
# cat(sprintf(paste("max |weight difference| after one epoch: DataParallel vs one device %.1e,",
#                   "MirroredStrategy (TensorFlow) vs one device (JAX) %.1e\n"), data_parallel_weight_gap,
#             mirrored_weight_gap))

# %% magic_args="-w 10 -h 3.4 --units in -r 100" language="R"
# # Plot the three runs' per-step losses, and their differences from the one-device run.
# par(mfrow = c(1, 2), mar = c(4, 4.5, 2, 1))
# step_numbers <- seq_len(steps)
# plot(step_numbers, one_device_losses, type = "l", lwd = 5, col = adjustcolor("steelblue", 0.4),
#      ylim = c(0, max(one_device_losses)), xlab = "step", ylab = "loss", main = "Loss of each step's batch")
# lines(step_numbers, data_parallel_losses, lty = 2, col = "darkorange")
# lines(step_numbers, mirrored_losses, lty = 3, lwd = 2, col = "forestgreen")
# legend("topright", cex = 0.75, lty = c(1, 2, 3), lwd = c(5, 1, 2),
#        col = c(adjustcolor("steelblue", 0.4), "darkorange", "forestgreen"),
#        legend = c("JAX, one device", sprintf("JAX DataParallel, %d devices", num_devices),
#                   sprintf("TensorFlow MirroredStrategy, %d replicas", num_devices)))
# grid()
# floor <- 1e-9  # a log scale has no zero: equal losses are drawn on this line
# plot(step_numbers, pmax(abs(data_parallel_losses - one_device_losses), floor), log = "y", pch = 16, cex = 0.6,
#      col = "steelblue", ylim = c(floor / 2, 1e-3), xlab = "step", ylab = "(equal: on the bottom line)",
#      main = "|difference| from one JAX device")
# points(step_numbers, pmax(abs(mirrored_losses - one_device_losses), floor), pch = 15, cex = 0.6, col = "darkorange")
# lines(step_numbers, resolution, col = "black")
# legend("topright", cex = 0.75, pch = c(16, 15, NA), lty = c(NA, NA, 1), col = c("steelblue", "darkorange", "black"),
#        legend = c("DataParallel - one device", "MirroredStrategy - one device", "what rounding the means allows"))
# grid()

# %% [markdown]
# The per-step loss gaps stay near or under the black line, the rounding bound, which grows with
# the step number: they measure the recovery, not the runs. The weights tell the runs apart. Two
# backends agree to float32 rounding, not bit for bit: XLA on JAX and TensorFlow's kernels add the
# same numbers in other orders, and every step's rounding feeds the next. Between one JAX device
# and `DataParallel` on two, the weight gap printed above is what splitting the batch does: each
# device sums the gradient of its half, and the all-reduce adds the two halves, another order of
# additions than one device's sum over the whole batch.

# %% [markdown]
# ### Exercise q1: fit()'s batch size under DataParallel
#
# Write a function `fit_batch_size(distribution, per_device_batch)` that returns the `batch_size` to pass to `fit()` under a `DataParallel` distribution so that every device gets `per_device_batch` digits in each step (`distribution$device_mesh$shape` is an R list: take its `[[1]]`). The check calls it with `DataParallel` over 2 devices and over 1, then places a batch of that size with the distribution's own data layout (`distribution$get_data_layout()`) and counts the rows JAX gives each device.
#
# Complete the cell, then run the check below it; `kd_hint(ex$q1)` gives a hint, `kd_solution(ex$q1)` the solution.
#
# <details><summary>Solution</summary>
#
# In one process, `fit(batch_size = ...)` is the global batch (with several processes, each passes its own share): `DataParallel` splits it along its mesh's `batch` axis, so every device gets batch_size / (the size of that axis). To give each device `per_device_batch`, multiply by the size of the axis, `distribution$device_mesh$shape[[1]]` (the mesh of a `DataParallel` has that one axis). With 2 devices and 32 per device that is 64, this lesson's `global_batch_size`; over 1 device it stays 32, which is why the number of devices JAX has is the wrong factor.
#
# </details>

# %% nbgrader={"grade": false, "grade_id": "q1_answer", "locked": false, "schema_version": 3, "solution": true, "task": false} language="R"
# fit_batch_size <- NULL  # a function of (distribution, per_device_batch)
# ### BEGIN SOLUTION
# fit_batch_size <- function(distribution, per_device_batch) {
#   per_device_batch * distribution$device_mesh$shape[[1]]
# }
# ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "q1", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false} language="R"
# # NBVAL_CHECK_OUTPUT
# kd_check(ex$q1)
# ### BEGIN HIDDEN TESTS
# kd_assert_correct(ex$q1)
# ### END HIDDEN TESTS

# %% [markdown]
# ## ModelParallel: a DeviceMesh and a LayoutMap
#
# `ModelParallel` splits weights. A `DeviceMesh` names the axes of the devices; here a 1 x 2 mesh
# with axes `batch` (size 1) and `model` (size 2). A `LayoutMap` maps variable paths (regular
# expressions) to layouts: `list(NULL, "model")` splits a kernel's columns across the `model` axis,
# `list("model")` its bias. Weights that match no key are copied on every device. reticulate's
# `py_set_item()` sets a key of the Python `LayoutMap`.
#
# Splitting the weights *inside* a layer like this is **tensor parallelism** (intra-layer model
# parallelism): each device holds a slice of the columns of every hidden kernel and computes its
# slice of the layer's outputs; the next layer needs all of them, so XLA inserts the collectives
# that gather them. It is the column split of Megatron-LM's layers, and the opposite of lesson 6's
# `tf$device()` split, which gave each device whole layers (pipeline parallelism).

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # A 1 x 2 mesh, and a layout map that splits the hidden Dense layers' kernels and biases by columns.
# mesh <- keras$distribution$DeviceMesh(shape = list(1L, num_devices), axis_names = list("batch", "model"),
#                                       devices = devices)
# layout_map <- keras$distribution$LayoutMap(mesh)
# reticulate::py_set_item(layout_map, "dense.*kernel", reticulate::tuple(NULL, "model"))
# reticulate::py_set_item(layout_map, "dense.*bias", reticulate::tuple("model"))
# model_parallel <- keras$distribution$ModelParallel(layout_map = layout_map, batch_dim_name = "batch")
# with(model_parallel$scope(), sharded <- compiled_mlp())
# cat("mesh shape", unlist(mesh$shape), "axes", unlist(mesh$axis_names), "\n")

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # How each weight is laid out: its partition spec, and the piece every device holds.
# for (variable in sharded$weights) {
#   cat(sprintf("%-18s %-11s %-32s %s\n", variable$path, sprintf("(%s)", paste(unlist(variable$shape), collapse = ", ")),
#               reticulate::py_str(variable$value$sharding$spec), paste(shard_shapes(variable), collapse = ", ")))
# }

# %% [markdown]
# **Predict, then run.** Each device now holds half of every hidden kernel. Does training the
# split model change the per-step loss?

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # Train the split model on the same batches and compare with one device.
# with(model_parallel$scope(), model_parallel_losses <- fit_one_epoch(sharded)$losses)
# model_parallel_gap <- max(abs(model_parallel_losses - one_device_losses))
# stopifnot(model_parallel_gap < 1e-4)
# cat("ModelParallel gives the one-device loss at every step:", TRUE, "\n")
# cat("its kernel is still split after training:", reticulate::py_str(sharded$weights[[1]]$value$sharding$spec), "\n")

# %% language="R"
# # The measured gaps: the recovered losses, and the final weights.
# cat(sprintf("max |loss difference| per step: ModelParallel vs one device %.1e\n", model_parallel_gap))
# cat(sprintf("max |weight difference| after one epoch: ModelParallel vs one device %.1e\n",
#             max_weight_gap(get_weights(sharded), get_weights(one_device))))

# %% [markdown]
# The optimizer state is split too. Adam keeps two moments per weight, each as large as the weight;
# under `ModelParallel` Keras creates each moment with the layout of its weight, so a device holds
# the moments of its own slices only. (On TensorFlow, lesson 6 had to build the optimizer before `fit()`, or use a `ColocatedAdam`, to
# get that.)

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # Adam's variables for the first hidden layer, and their layouts: the layout of the weight they belong to.
# for (variable in sharded$optimizer$variables)
#   if (grepl("dense_1", variable$path))
#     cat(sprintf("%-30s %-11s %s\n", variable$path, sprintf("(%s)", paste(unlist(variable$shape), collapse = ", ")),
#                 reticulate::py_str(variable$value$sharding$spec)))

# %% [markdown]
# ### Exercise q2: a LayoutMap that splits columns, then rows
#
# Megatron-LM splits an MLP's two layers in complementary ways: the first by columns (each device computes half of the hidden units), the second by **rows** (each device multiplies only its own half of those units, and one all-reduce sums the two partial outputs). Write `megatron_layout_map(mesh)` that returns a `keras$distribution$LayoutMap` on `mesh` (a 1 x 2 mesh with axes `batch` and `model`, like `mesh` above) that splits `dense_1`'s kernel by columns and its bias with them, splits `dense_2`'s kernel by rows, and leaves every other weight (`dense_2`'s bias, the `logits` layer) copied. The check builds the course's MLP under `ModelParallel` with your map and reads the piece of every weight that each JAX device holds.
#
# Complete the cell, then run the check below it; `kd_hint(ex$q2)` gives a hint, `kd_solution(ex$q2)` the solution.
#
# <details><summary>Solution</summary>
#
# The keys are regular expressions that must match a weight's whole path (Keras uses `re.fullmatch`), so `"dense_1.*kernel"` names one layer (the lesson's `"dense.*kernel"` matches both). `reticulate::tuple(NULL, "model")` splits a kernel's second dimension, its columns (outputs); `reticulate::tuple("model", NULL)` its first, its rows (inputs). dense_2's rows are exactly the hidden units that dense_1's column split left on each device, so each device multiplies its half without gathering them first; the two partial outputs are summed, and dense_2's bias is added once to that sum, so it stays copied. Each device holds (784, 128) of dense_1's kernel and (128, 256) of dense_2's.
#
# </details>

# %% nbgrader={"grade": false, "grade_id": "q2_answer", "locked": false, "schema_version": 3, "solution": true, "task": false} language="R"
# megatron_layout_map <- NULL  # a function of (mesh) that returns a LayoutMap
# ### BEGIN SOLUTION
# megatron_layout_map <- function(mesh) {
#   layout_map <- keras$distribution$LayoutMap(mesh)
#   reticulate::py_set_item(layout_map, "dense_1.*kernel", reticulate::tuple(NULL, "model"))
#   reticulate::py_set_item(layout_map, "dense_1.*bias", reticulate::tuple("model"))
#   reticulate::py_set_item(layout_map, "dense_2.*kernel", reticulate::tuple("model", NULL))
#   layout_map
# }
# ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "q2", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false} language="R"
# # NBVAL_CHECK_OUTPUT
# kd_check(ex$q2)
# ### BEGIN HIDDEN TESTS
# kd_assert_correct(ex$q2)
# ### END HIDDEN TESTS

# %% [markdown]
# ## Beyond one machine: several processes, kerasdist's JAX engine, Slurm
#
# On several machines, each runs one process, and `keras$distribution$initialize(job_addresses =
# ..., num_processes = ..., process_id = ...)` joins them into one JAX cluster: process 0 serves as
# the coordinator, and afterwards `jax$devices()` lists the devices of **all** processes. A
# `DataParallel` over them is one mesh spanning the processes, and `fit()` works as on one machine:
# the multi-worker `fit()` that the TensorFlow backend cannot run today (keras-team/keras#20585,
# lesson 5).
#
# kerasdist's JAX engine (`kerasdist/engines/jax_engine.py`, the course package's trainer for the JAX
# backend) trains the course's MLP this way. Like kerasdist's TensorFlow trainer of lessons 2 and 5,
# it writes checkpoints that a rerun resumes from. `kerasdist launch --backend jax
# --workers 2` starts two processes on 127.0.0.1, which play two machines with one CPU device
# each (from R, `kd_train(backend = "jax")` trains in one process). On a CPU:
#
# - the all-reduce between processes needs a communication library (JAX's *collectives*): on CPUs
#   gloo, the default of the installed JAX (`jax/_src/config.py`), NCCL on GPUs; the engine names
#   gloo explicitly
#   (`jax.config.update("jax_cpu_collectives_implementation", "gloo")`) before `initialize`;
# - each process feeds **its own share** of every global batch: with a global batch of 64 and two
#   processes, process 0 passes the first 32 digits of each batch and process 1 the last 32, with
#   `batch_size = 32` on each; Keras assembles the global batch from the pieces;
# - so the distribution's `auto_shard_dataset` is off. Left on, Keras shards the input itself in a
#   multi-process run, which it can do only for a `tf.data.Dataset`: `fit()` on arrays stops with
#   "When using a multi-worker distribution with auto-sharding enabled, the data must be provided
#   as a `tf.data.Dataset` instance".
#
# The processes are Python (an R process would make the same calls through keras3). In short, each
# runs:
#
# ```python
# jax.config.update("jax_cpu_collectives_implementation", "gloo")
# keras.distribution.initialize(job_addresses="127.0.0.1:PORT", num_processes=2, process_id=p)
# keras.utils.set_random_seed(0)
# my_rows = order.reshape(-1, 64)[:, p * 32:(p + 1) * 32].ravel()  # my half of every global batch
# with keras.distribution.DataParallel(devices=jax.devices(), auto_shard_dataset=False).scope():
#     model = ...  # the course's MLP, compiled
#     model.fit(x[my_rows], y[my_rows], batch_size=64 // 2, shuffle=False, callbacks=[...])
# ```
#
# Process 0 writes the checkpoints (weights, Adam's state and the position, mid-epoch too) and the
# metrics log; a rerun of the same command resumes from the newest checkpoint, in every process.
# Its epoch 1 takes the digits in the order this lesson drew above (NumPy's permutation with seed
# 0, `kerasdist.data.epoch_order`), and it seeds Keras with 0 before building the same network as
# `build_mlp`, as this lesson did before saving `initial.weights.h5`: so it starts from the same
# weights, and should match the one-device run up to rounding, and `DataParallel` in this kernel
# bit for bit (both split every batch into the same two halves).
#
# `--json` prints the run's record last: its logged steps (`global_step`, counted from 1, and each
# step's `batch_loss`; the engine logs every step here, about 100 per epoch on full MNIST), each
# worker's weight digest, and its last checkpoint, a `.npz` file whose `model/0`, `model/1`, ...
# are the weights in order. The worker lines and the ports vary from run to run.

# %% language="R"
# # kerasdist's JAX engine: two processes on 127.0.0.1 train one epoch together; process 0 checkpoints.
# engine_dir <- file.path(workdir, "engine")
# launch <- processx::run(python, c("-m", "kerasdist", "launch", "--backend", "jax", "--workers", 2, "--epochs", 1,
#                                   "--data", data_source, "--global-batch-size", global_batch_size,
#                                   "--checkpoint-dir", engine_dir, "--json"),
#                         timeout = wait_s, error_on_status = FALSE)
# if (launch$status != 0) cat(substring(launch$stdout, nchar(launch$stdout) - 3000))
# lines <- strsplit(launch$stdout, "\n")[[1]]
# record <- jsonlite::fromJSON(tail(lines, 1), simplifyVector = FALSE)
# cat(grep("^\\[launch\\]", lines, value = TRUE), sep = "\n")

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # Both processes hold the same weights, and they took the steps of one device.
# logged_steps <- unlist(record$steps$global_step)
# processes_gap <- max(abs(unlist(record$steps$batch_loss) - one_device_losses[logged_steps]))
# digests <- unique(vapply(record$workers, function(worker) worker$weights_sha256, ""))
# stopifnot(length(digests) == 1, processes_gap < 1e-4)
# cat(sprintf("backend %s: %s over %d devices in %d processes\n", record$backend, record$strategy,
#             record$replicas, length(record$workers)))
# cat("identical weights in both processes:", length(digests) == 1, "\n")
# cat("the one-device loss at every logged step:", processes_gap < 1e-4, "\n")

# %% language="R"
# # The measured gaps: the recovered losses, and the final weights in process 0's last checkpoint (also
# # against DataParallel in this kernel, which splits every batch between two devices the same way).
# checkpoint <- np$load(record$checkpoint)
# processes_weights <- lapply(seq_along(get_weights(one_device)) - 1L,
#                             function(index) reticulate::py_to_r(checkpoint$get(sprintf("model/%d", index))))
# cat(sprintf("%d steps logged; max |loss difference| per step: two processes vs one device %.1e\n",
#             length(logged_steps), processes_gap))
# cat(sprintf("max |weight difference| after one epoch: two processes vs one device %.1e, vs DataParallel in this kernel %.1e\n",
#             max_weight_gap(processes_weights, get_weights(one_device)),
#             max_weight_gap(processes_weights, get_weights(replicated))))

# %% [markdown]
# On a cluster, Slurm starts the processes: one per task, each running `kerasdist worker --backend
# jax`, which takes the process count, its index and the coordinator (the first node of the job
# step, at a port derived from the job id) from the variables `srun` sets (`SLURM_STEP_NUM_TASKS`,
# `SLURM_PROCID`, `SLURM_STEP_NODELIST`). The script's defaults are one node with two tasks and 3
# epochs; `--nodes 2 --tasks-per-node 1` puts one process on each of two machines, and `--epochs`
# is the total to reach, as everywhere in kerasdist. `kerasdist slurm-script` writes the sbatch
# script; with `--requeue`, a job whose node fails, or that is preempted on a cluster whose
# `PreemptMode` is `REQUEUE`, is queued again, and it resumes. Slurm first sends SIGTERM, which
# `jax.distributed.initialize` hands to JAX's preemption notifier: it tells every process, all of
# them stop at the one step it agrees on (`multihost_utils.reached_preemption_sync_point`),
# process 0 saves there, and the rerun continues from that checkpoint (the project's tests requeue
# such a job with `scontrol requeue` on a real one-node Slurm, and compare its final weights with
# an uninterrupted run's). `--save-every-steps` bounds what a failure that gives no warning (a
# node lost at once) costs.

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # The sbatch script for two JAX processes, requeued after a preemption, checkpointing every 50 steps.
# script <- processx::run(python, c("-m", "kerasdist", "slurm-script", "--backend", "jax", "--requeue",
#                                   "--save-every-steps", 50), timeout = wait_s, error_on_status = FALSE)
# cat(if (script$status == 0) script$stdout else script$stderr)

# %% [markdown]
# ### Exercise q3: each process's share of every global batch
#
# In kerasdist's JAX engine each process passes `fit()` only its own rows of every global batch, and Keras assembles the global batch from the processes' pieces. Write `process_rows(order, process_id, num_processes, global_batch)`: given the epoch's order of example indices (it reaches R as a numeric 1-d array of whole numbers; R's `matrix()` fills column by column, so `matrix(order, nrow = global_batch)` holds one global batch per column) (a whole number of global batches), return the indices that process `process_id` (counted from 0, as JAX counts processes) feeds, in the order it feeds them. The check compares them, for every process and several orders and batch sizes, with the rows JAX places on that process's device when `DataParallel` splits each global batch along its `batch` axis.
#
# Complete the cell, then run the check below it; `kd_hint(ex$q3)` gives a hint, `kd_solution(ex$q3)` the solution.
#
# <details><summary>Solution</summary>
#
# A `DataParallel` mesh splits each global batch into `num_processes` consecutive blocks, block p to device p; with one device per process, process p feeds block p of **every** global batch, batch after batch. `matrix(order, nrow = global_batch)` puts one global batch per column; its rows `process_id * share + seq_len(share)` (with `share <- global_batch %/% num_processes`) are block p, and `as.vector()` reads them column after column, batch after batch: the engine's `my_rows` above. A contiguous half of the epoch would give process 1 rows of other batches than process 0 in the same step, and every other index mixes the two blocks of every batch.
#
# </details>

# %% nbgrader={"grade": false, "grade_id": "q3_answer", "locked": false, "schema_version": 3, "solution": true, "task": false} language="R"
# process_rows <- NULL  # a function of (order, process_id, num_processes, global_batch)
# ### BEGIN SOLUTION
# process_rows <- function(order, process_id, num_processes, global_batch) {
#   share <- global_batch %/% num_processes
#   batches <- matrix(order, nrow = global_batch)  # one global batch per column
#   as.vector(batches[process_id * share + seq_len(share), ])
# }
# ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "q3", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false} language="R"
# # NBVAL_CHECK_OUTPUT
# kd_check(ex$q3)
# ### BEGIN HIDDEN TESTS
# kd_assert_correct(ex$q3)
# ### END HIDDEN TESTS

# %% [markdown]
# ## Checkpoint and resume on JAX
#
# The engine above checkpointed two processes its own way. Here is Keras' standard callback for one
# process first, then what Keras offers for several.
#
# `callback_backup_and_restore()` works on JAX as on TensorFlow (lesson 2): at the end of each epoch
# it writes the weights, the optimizer state and the epoch; a new `fit()` with the same backup
# folder loads them and starts at the next epoch. Under a distribution, the restored weights take
# the layouts of the model they are loaded into. A `DataParallel` run is stopped in its second
# epoch and resumed, and ends where an uninterrupted run ends. keras3 numbers epochs and batches
# from 1 in R callbacks.
#
# That is one process. With several (`keras$distribution$initialize()`), each would write the same
# `.weights.h5` files on its own; Keras 3's `keras$callbacks$OrbaxCheckpoint` (it needs the Python
# package `orbax-checkpoint`; keras3 has no wrapper for it yet) is the callback for that case: its
# docstring says that on JAX it "automatically coordinates checkpointing across all hosts", and it
# saves in the background while training goes on. It only saves, like `ModelCheckpoint`: to resume,
# load its directory yourself (`load_model()`) and pass `fit(initial_epoch = ...)`;
# `callback_backup_and_restore()` does both. kerasdist's JAX engine (above) takes a third way:
# under `DataParallel` every process holds the same full weights, so process 0 alone writes them,
# with Adam's state and the position.

# %% language="R"
# # A callback that stops training with an error in the middle of the second epoch, like a crash,
# # and one that records the epochs a fit() call actually trains.
# crash <- callback_lambda(
#   on_epoch_begin = function(epoch, logs) current_epoch <<- epoch,
#   on_train_batch_end = function(batch, logs) if (current_epoch == 2 && batch == steps %/% 2 + 1) stop("simulated crash"))
# epochs_run <- integer(0)
# record_epochs <- callback_lambda(on_epoch_begin = function(epoch, logs) epochs_run <<- c(epochs_run, epoch))
# backup_dir <- file.path(workdir, "backup")
# fit_epochs <- function(model, callbacks = list()) model |> fit(
#   x_ordered, y_ordered, batch_size = global_batch_size, epochs = epochs, shuffle = FALSE, verbose = 0,
#   callbacks = callbacks)

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # The uninterrupted run, then a run that crashes in epoch 2 and a new fit() that resumes it.
# with(data_parallel$scope(), {
#   uninterrupted <- compiled_mlp()
#   fit_epochs(uninterrupted)
#   crashed <- compiled_mlp()
#   tryCatch(fit_epochs(crashed, list(callback_backup_and_restore(backup_dir), crash)), error = function(e)
#     cat("first fit(): simulated crash in epoch 2; the backup holds:", sort(list.files(backup_dir)), "\n"))
#   resumed <- compiled_mlp()
#   fit_epochs(resumed, list(callback_backup_and_restore(backup_dir), record_epochs))
# })
# cat("second fit() trained epochs", epochs_run, "of", epochs, "\n")

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # The resumed run ends with the uninterrupted run's weights and optimizer step.
# resume_gap <- max(mapply(function(a, b) max(abs(a - b)), get_weights(uninterrupted), get_weights(resumed)))
# iterations <- c(as.integer(reticulate::py_to_r(resumed$optimizer$iterations$numpy())),
#                 as.integer(reticulate::py_to_r(uninterrupted$optimizer$iterations$numpy())))
# stopifnot(resume_gap < 1e-5, identical(epochs_run, epochs), all(iterations == epochs * steps))
# cat("resumed = uninterrupted weights:", resume_gap < 1e-5, "; optimizer steps equal:", TRUE, "\n")

# %% language="R"
# # The measured gap; and the multi-process checkpoint callback, which Keras 3.15 has.
# cat(sprintf("resumed vs uninterrupted, final weights: max |difference| %.1e\n", resume_gap))
# cat("keras.callbacks.OrbaxCheckpoint exists:", reticulate::py_has_attr(keras$callbacks, "OrbaxCheckpoint"), "\n")

# %% [markdown]
# ## tf.distribute and keras.distribution side by side
#
# | idea (lesson) | tf.distribute (TensorFlow backend) | keras.distribution (JAX backend) |
# |---|---|---|
# | devices on one CPU (1) | `tf$config$set_logical_device_configuration(cpu, ...)` | `XLA_FLAGS=--xla_force_host_platform_device_count=N` before JAX starts |
# | where training runs (1) | `with(strategy$scope(), ...)`: build and compile | `with(distribution$scope(), ...)` or `keras$distribution$set_distribution()`, for building **and** `fit()` |
# | replicas (1) | `strategy$num_replicas_in_sync` | the size of the mesh's batch axis (`distribution$device_mesh$shape`) |
# | replica / device (1) | a replica: one copy of the model per device | a position on the `batch` axis of a `DeviceMesh` |
# | copied weights (1) | `MirroredVariable`, one component per replica | a `jax.Array` with `PartitionSpec()`: one full shard per device |
# | global batch (1, 4) | the dataset's batch, split by the strategy | `fit(batch_size = ...)`, split along the batch axis by its layout |
# | all-reduce (1, 6) | `CollectiveAllReduce` / NCCL, chosen by the strategy | inserted by XLA from the layouts (`jax.jit` with shardings) |
# | input sharding across workers (4, 5) | tf.data auto-shard policy (`DATA`, `FILE`, `OFF`) | `auto_shard_dataset = TRUE` for a `tf.data.Dataset`; `FALSE` when each process feeds its own shard |
# | several machines (5) | `TF_CONFIG` + `MultiWorkerMirroredStrategy`; `fit()` fails (keras-team/keras#20585), a custom loop works | `keras$distribution$initialize(job_addresses, num_processes, process_id)`; `fit()` works |
# | checkpoint and resume (2, 5) | `callback_backup_and_restore()`, `callback_model_checkpoint()`, `.keras` | the same callbacks and files in one process (weights take the layout of the model they are loaded into); `OrbaxCheckpoint` saves across processes (resume by hand: load it, `fit(initial_epoch=...)`) |
# | model parallelism (6) | layers placed with `tf$device()` (pipeline parallelism) | `ModelParallel` with a `DeviceMesh` and a `LayoutMap` that splits the weights themselves (tensor parallelism); the optimizer state follows |
#
# The files are the same on both backends: the `.weights.h5` file made here on JAX started the
# TensorFlow run.

# %% [markdown]
# ## Performance tips
#
# - **Virtual devices do not add compute.** The N CPU devices share the same cores, as lesson 1's
#   virtual CPUs did; real speed-ups come with GPUs or TPUs, which
#   `keras$distribution$list_devices()` lists without any flag.
# - **JAX compiles once per shape and layout.** Keep the batch size fixed (drop or pad the last
#   partial batch) so that `fit()` compiles its step once.
# - **Split only what is too big.** `DataParallel` is the fast default while the model fits on one
#   device; `ModelParallel` pays for moving activations between devices.
# - **A mesh can be both.** A 2 x 4 mesh (`batch`, `model`) trains two data-parallel copies of a
#   model split four ways; only the mesh's shape changes.
# - **Checkpoint several processes with `OrbaxCheckpoint`**: it coordinates the processes and saves
#   in the background; it keeps the model's state, not the position in the data, and it does not
#   restore: resuming (load, `initial_epoch`) is yours to write.
# - **Compare runs by their weights.** A loss recovered from Keras' running mean is only as precise
#   as k float32 steps (ulps) of that mean; two runs that differ less than that look equal in the
#   losses.

# %% [markdown]
# ## Summary
#
# - The backend is chosen by `use_backend("jax")` (`KERAS_BACKEND`) before Keras loads, and JAX's
#   CPU device count by `XLA_FLAGS` before JAX starts; a session keeps them, so another backend
#   runs in another process.
# - `keras.distribution` describes devices as a mesh with named axes and tensors by layouts;
#   `DataParallel` splits the batch and copies the weights, `ModelParallel` splits the weights a
#   `LayoutMap` names.
# - On the same data order and initial weights, one JAX device, `DataParallel`, `ModelParallel`
#   (tensor parallelism; Adam's moments take their weight's layout), TensorFlow's
#   `MirroredStrategy` and two JAX processes took the same steps, up to float32 rounding: their
#   final weights say so exactly, where the recovered per-step losses only can to their precision.
# - `keras$distribution$initialize` joins processes into one cluster in which `fit()` works; with
#   NumPy input each process feeds its own share and `auto_shard_dataset` is off. kerasdist's JAX
#   engine does this (`kerasdist launch --backend jax`, `srun kerasdist worker --backend jax`,
#   `kd_train(backend = "jax")` in one process): both processes ended with identical weights, and
#   its checkpoints let a preempted Slurm job resume.
# - `callback_backup_and_restore()` resumes on JAX as on TensorFlow, in one process;
#   `OrbaxCheckpoint` saves several processes' state, and resuming from it is written by hand.

# %% [markdown]
# ## Exercises
#
# 1. Set `num_devices <- 4L`, restart the kernel and run all cells. What changes in the shards of a
#    copied weight under `DataParallel`, and in the pieces of the split kernels under
#    `ModelParallel`?
#
#    <details><summary>Hint</summary>
#
#    The mesh is (1, 4) for `ModelParallel`; 256 output units split four ways.
#
#    </details>
#    <details><summary>Solution</summary>
#
#    `DataParallel` keeps one full copy per device; `ModelParallel` gives each device a quarter of
#    the columns of each hidden kernel, (784, 64) and (256, 64), and of each bias. The per-step
#    losses still match one device up to rounding.
#
#    </details>
#
# 2. Make `ModelParallel` also split the `logits` layer:
#    `reticulate::py_set_item(layout_map, "logits.*kernel", reticulate::tuple(NULL, "model"))`. What happens with
#    two devices, and with four (`num_devices <- 4L`)? Why?
#
#    <details><summary>Hint</summary>
#
#    How many output units does `logits` have, and into how many pieces does the mesh split them?
#
#    </details>
#    <details><summary>Solution</summary>
#
#    With two devices it works: 10 columns split into two pieces of 5. With four devices it fails
#    (JAX: "the global size of its dimension 1 should be divisible by 4, but it is equal to 10"): a
#    split dimension must divide evenly across its mesh axis, as the hidden layers' 256 columns do.
#
#    </details>
#
# 3. In kerasdist's JAX engine (`kerasdist/engines/jax_engine.py`, where `_JaxRun` makes the
#    `DataParallel`), use the default `auto_shard_dataset=True` and run the launch cell again. What
#    does a failing process print? (Drop `auto_shard_dataset=False` in `_JaxRun.__init__`: the
#    package is installed in editable mode and the workers are new processes, so no restart is
#    needed. The launch cell then fails to read a record: the answer is in the `[worker i]` lines
#    it prints first.)
#
#    <details><summary>Hint</summary>
#
#    Read `get_data_adapter` in Keras' `keras/src/trainers/data_adapters/__init__.py`.
#
#    </details>
#    <details><summary>Solution</summary>
#
#    Each worker's output, prefixed `[worker i]`, ends in the traceback of Keras' check
#    (`keras/src/trainers/data_adapters/__init__.py`): "ValueError: When using a multi-worker
#    distribution with auto-sharding enabled, the data must be provided as a `tf.data.Dataset`
#    instance. Received: type(x)=<class 'numpy.ndarray'>. If the dataset is already sharded across
#    workers, then set `distribution.auto_shard_dataset = False`." The engine's input is already
#    sharded (each process passes its own share), which is why it sets that.
#
#    </details>
#
# 4. Leave out the `XLA_FLAGS` line of the first `%%R` cell, restart the kernel and run the first
#    cells. How many devices does JAX see?
#
#    <details><summary>Hint</summary>
#
#    `jax$device_count()`.
#
#    </details>
#    <details><summary>Solution</summary>
#
#    One: `DataParallel` makes a mesh of one device, and `ModelParallel` cannot make a 1 x 2 mesh.
#    Setting `XLA_FLAGS` after JAX has started changes nothing: restart the kernel.
#
#    </details>
#
# 5. Which three environment variables does `keras$distribution$initialize()` read when it is
#    called without arguments?
#
#    <details><summary>Hint</summary>
#
#    Its docstring: `reticulate::py_help(keras$distribution$initialize)`.
#
#    </details>
#    <details><summary>Solution</summary>
#
#    `KERAS_DISTRIBUTION_JOB_ADDRESSES` (the coordinator's address, the same on every process),
#    `KERAS_DISTRIBUTION_NUM_PROCESSES` and `KERAS_DISTRIBUTION_PROCESS_ID` (0, 1, ...).
#
#    </details>
#
#
# Next: back to the [course map](../README.md#lessons).
