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
# # Quickstart: one machine, N replicas (R, keras3)
#
# This is the R twin of [01_quickstart.ipynb](01_quickstart.ipynb): the same workflow and the same
# sections, written with the R packages keras3, tfdatasets and tensorflow. The notebook runs on a
# Python kernel; the R code lives in `%%R` cells (rpy2), and R draws the figures too (`%%R -w -h`
# sets a figure's size in inches).
#
# **What you'll learn**
#
# - how to make N replicas on one machine: GPUs on a workstation, virtual CPU devices on a laptop;
# - the difference between the *global* batch and the *per-replica* batch;
# - why the model is built and compiled inside `with(strategy$scope(), ...)`;
# - what a *mirrored variable* is, and how to see that the replicas stay identical.
#
# **What you need**: R with the packages keras3, tfdatasets and tensorflow
# (`install.packages(c("keras3", "tfdatasets"))`), rpy2 in the kernel's Python environment, and
# about a minute on a 2-core CPU. The data is full MNIST when Keras has it cached or can download
# it, otherwise a 5,000-digit sample of real MNIST digits (offline). The stored outputs come from a
# run on that sample; `bash scripts/run_notebooks.sh --r-twins` runs the notebook again.

# %% [markdown]
# ## Introduction
#
# In **synchronous data parallelism** every device holds a full copy of the model, called a
# *replica*. At each training step the *global batch* is split into one *local batch* per replica;
# each replica computes gradients on its local batch; the gradients are summed across replicas (an
# *all-reduce*); and every replica applies the same update, so all copies of the weights stay
# identical. Training with N replicas therefore follows the same path as training on one device
# with the global batch, up to floating-point rounding. `tf$distribute$MirroredStrategy` does this
# on one machine, and keras3's `fit()` works with it unchanged, as long as the model is created
# inside the strategy's scope.

# %% [markdown]
# ## Setup
#
# The Python side loads rpy2's `%%R` magic and imports kerasdist, which starts TensorFlow with its
# C++ start-up lines kept out of the cell outputs. R then attaches keras3 and friends; reticulate
# uses this very Python process, so R and Python share one TensorFlow. `KERASDIST_DATA` chooses the
# data: `auto` (the default) takes full MNIST when available; the test suite sets it to `sample`.

# %%
# Load the %%R magic, and start TensorFlow quietly through kerasdist.
# %load_ext rpy2.ipython
import kerasdist

# %% language="R"
# # Attach keras3 (models), tfdatasets (input pipelines) and tensorflow (tf$distribute), then settings.
# library(keras3)
# library(tfdatasets, exclude = "shape")
# library(tensorflow, exclude = c("shape", "set_random_seed"))
# data_source <- Sys.getenv("KERASDIST_DATA", "auto")
# num_replicas <- 2L
# epochs <- 3L

# %% [markdown]
# ## Make N replicas
#
# A replica needs a device. kerasdist's `configure_replicas(n)` finds n of them: the first n GPUs
# when there are that many, one GPU split into n logical GPUs, or, with no GPU, the CPU split into n
# *virtual* CPU devices with `tf$config$set_logical_device_configuration()`. Virtual CPUs share the
# same cores, so they do not make training faster; they make the replicas real. This has to happen
# before TensorFlow uses its devices; to change the number of replicas later, restart the kernel.

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # Make the devices, then a MirroredStrategy that puts one replica on each of them.
# kerasdist <- reticulate::import("kerasdist")
# devices <- kerasdist$configure_replicas(num_replicas)
# strategy <- tf$distribute$MirroredStrategy(devices = as.list(devices))
# cat(sprintf("Number of devices: %d\n", strategy$num_replicas_in_sync))

# %% language="R"
# # The devices the replicas run on: virtual CPUs here, GPUs on a workstation.
# print(devices)

# %% [markdown]
# ## Global batch and per-replica batch
#
# The dataset is batched by the **global** batch size. The strategy cuts every global batch into
# one local batch per replica. Pick the per-replica batch that fits one device well, and multiply.

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # Load the digits with kerasdist's loader; it says which source it used and the sample counts.
# data <- kerasdist$load_mnist(data_source)
# x_train <- data$x_train
# y_train <- data$y_train
# cat("train images:", dim(x_train), " labels:", length(y_train), "\n")

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # Choose the batch per replica; the global batch follows from the number of replicas.
# per_replica_batch_size <- 32L
# global_batch_size <- per_replica_batch_size * strategy$num_replicas_in_sync
# cat(sprintf("global batch %d = %d per replica x %d replicas\n",
#             global_batch_size, per_replica_batch_size, strategy$num_replicas_in_sync))

# %% language="R"
# # Build the input pipelines with tfdatasets; R has no float32, so the images are converted on the way in.
# make_dataset <- function(x, y, batch_size, training = FALSE) {
#   dataset <- tensor_slices_dataset(list(np_array(x, dtype = "float32"), np_array(y, dtype = "int32")))
#   if (training)
#     dataset <- dataset |> dataset_shuffle(buffer_size = nrow(x), seed = 0L)
#   dataset |>
#     dataset_batch(batch_size, drop_remainder = training) |>
#     dataset_prefetch(tf$data$AUTOTUNE)
# }
# train_dataset <- make_dataset(x_train, y_train, global_batch_size, training = TRUE)
# val_dataset <- make_dataset(data$x_val, data$y_val, global_batch_size)
# test_dataset <- make_dataset(data$x_test, data$y_test, global_batch_size)

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # Look at one global batch the way the strategy splits it: one local batch per replica.
# distributed <- strategy$experimental_distribute_dataset(train_dataset)
# batch <- reticulate::iter_next(reticulate::as_iterator(distributed))
# local_images <- strategy$experimental_local_results(batch[[1]])
# local_labels <- strategy$experimental_local_results(batch[[2]])
# for (replica in seq_along(local_images)) {
#   cat(sprintf("replica %d: images (%s), labels (%s)\n", replica - 1L,
#               paste(unlist(local_images[[replica]]$shape$as_list()), collapse = ", "),
#               paste(unlist(local_labels[[replica]]$shape$as_list()), collapse = ", ")))
# }

# %% magic_args="-w 8 -h 2.6 --units in -r 100" language="R"
# # Show the first digits each replica gets in that step: different samples, same model.
# show_digit <- function(pixels, label) {  # a row of 784 pixels, drawn as 28 x 28, ink dark
#   image(t(matrix(pixels, 28, 28, byrow = TRUE))[, 28:1], col = gray.colors(64, start = 1, end = 0),
#         axes = FALSE)
#   title(label, line = 0.3, font.main = 1)
# }
# par(mfrow = c(length(local_images), 8), mar = c(0.3, 0.3, 1.4, 0.3), oma = c(0, 6, 2, 0))
# for (replica in seq_along(local_images)) {
#   images <- local_images[[replica]]$numpy()
#   labels <- local_labels[[replica]]$numpy()
#   for (i in 1:8) show_digit(images[i, ], labels[i])
#   mtext(sprintf("replica %d", replica - 1L), side = 2, outer = TRUE, las = 1, line = 0.5,
#         at = 1 - (replica - 0.5) / length(local_images))
# }
# mtext("One global batch, split across the replicas", outer = TRUE, line = 0.5)

# %% [markdown]
# ## Build and compile in the strategy scope
#
# Everything that creates variables must be created inside the strategy's scope: the layers'
# weights, the optimizer's state and the metrics. Created there, each variable becomes a
# *mirrored variable* with one copy per replica. This is the classic MNIST MLP (784-256-256-10).

# %% language="R"
# # Create the model, optimizer and metrics inside the scope so their variables are mirrored.
# set_random_seed(0)
# with(strategy$scope(), {
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
# })
# summary(model)

# %% [markdown]
# ## Train and evaluate
#
# `fit()` and `evaluate()` need no change: Keras sees the strategy the model was built under,
# distributes the dataset and runs every step on all replicas. The dataset shuffles itself, so
# `shuffle = FALSE` only tells `fit()` not to try.

# %% language="R"
# # Train: each step splits a global batch across the replicas and sums their gradients.
# history <- model |> fit(train_dataset, epochs = epochs, validation_data = val_dataset,
#                         shuffle = FALSE, verbose = 2)

# %% language="R"
# # Evaluate on the held-out test digits (evaluation is distributed the same way).
# scores <- model |> evaluate(test_dataset, verbose = 0)
# cat(sprintf("test loss %.3f, test accuracy %.3f\n", scores$loss, scores$sparse_categorical_accuracy))

# %% magic_args="-w 8 -h 4.5 --units in -r 100" language="R"
# # Plot the learning curves: keras3's plot() method for the history that fit() returned.
# plot(history)

# %% [markdown]
# ## What a mirrored variable is
#
# A Keras weight is a Keras variable; under a `MirroredStrategy` the TensorFlow variable inside it
# (`$value`) is a `MirroredVariable`: one component variable per device, kept equal by applying the
# same all-reduced update to every copy.

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # The first weight: a Keras variable wrapping a MirroredVariable with one component per device.
# # (In R every TensorFlow object has the class "tensorflow.tensor"; ask Python for the class name.)
# kernel <- model$weights[[1]]
# mirrored <- kernel$value
# components <- mirrored$values
# cat(sprintf("%s %s (%s)\n", kernel$`__class__`$`__name__`, kernel$path,
#             paste(unlist(kernel$shape$as_list()), collapse = ", ")))
# cat(mirrored$`__class__`$`__name__`, "with", length(components), "components\n")

# %% language="R"
# # Where the components live: one per replica device.
# for (component in components) cat(component$device, "\n")

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # After three epochs of training, every replica still holds exactly the same numbers.
# first <- components[[1]]$numpy()
# cat("all components identical:",
#     all(vapply(components, function(v) identical(v$numpy(), first), logical(1))), "\n")

# %% [markdown]
# ## The same run in one call
#
# kerasdist's `run_training()` does all of the above (replicas, strategy, data pipeline, model in
# scope, `fit`, `evaluate`) and returns a plain record of the run. From R it is one reticulate call;
# the command line does the same: `kerasdist train --replicas 2 --epochs 3 --data sample`.

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # Train the same model with kerasdist; the record's fields arrive as R values.
# result <- kerasdist$run_training(replicas = num_replicas, epochs = epochs,
#                                  global_batch_size = global_batch_size, data = data, verbose = 0L)
# cat(sprintf("replicas %d, global batch %d, per-replica batch %d, epochs run %d\n",
#             result$replicas, result$global_batch_size, result$per_replica_batch_size, result$epochs_run))

# %% language="R"
# # Its test accuracy and throughput (samples per second on this machine).
# cat(sprintf("test accuracy %.3f, %.0f samples/s\n", result$test$accuracy, result$samples_per_s))

# %% [markdown]
# ## Performance tips
#
# - **Virtual CPUs do not add compute.** Here both replicas share the same cores and also pay for
#   the all-reduce, so two replicas are slower than one device. The speed-up comes with real
#   devices: several GPUs, or several machines (lesson 5).
# - **Give each replica enough work.** On GPUs, raise the per-replica batch until a device is busy;
#   the global batch grows with it, and lesson 3 shows how to adjust the learning rate.
# - **Feed the replicas.** Batch by the global batch, then `dataset_cache()` and
#   `dataset_prefetch()` so that input never waits for the devices (lesson 4 measures this).
# - **Several steps per call.** `compile(steps_per_execution = N)` cuts per-step overhead, but under
#   `MirroredStrategy` it fails in Keras 3 today (keras-team/keras#19246); kerasdist's own training
#   loop (`engine = "loop"`) runs many steps per call instead.

# %% [markdown]
# ## Summary
#
# - A replica is a full copy of the model on one device; `configure_replicas()` makes the devices
#   (GPUs, a split GPU, or virtual CPUs) before TensorFlow starts using them.
# - Batch the data by the global batch = per-replica batch x replicas; the strategy splits it.
# - Build and compile inside `with(strategy$scope(), ...)`; then `fit()` and `evaluate()` run
#   unchanged.
# - Every weight is a `MirroredVariable` whose components stay identical, because every replica
#   applies the same all-reduced update.

# %% [markdown]
# ## Exercises
#
# 1. Set `num_replicas <- 4L`, restart the kernel and run all cells. What changes in the global
#    batch, in the split batch and in the number of components of a mirrored variable?
# 2. Keep the global batch at 64 with 4 replicas. What per-replica batch do you get, and do the
#    learning curves change?
# 3. Build the model *outside* the strategy scope and compile and fit it as before. Which strategy
#    does `model$distribute_strategy` report, and how many replicas actually train?
# 4. Are the optimizer's variables mirrored too? Inspect `model$optimizer$variables`.
# 5. In a terminal, run `python -m kerasdist train --replicas 2 --epochs 3 --data sample` and
#    compare the test accuracy with the one above.
