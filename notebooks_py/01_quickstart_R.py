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
# - what a *mirrored variable* is, and how to see that the replicas stay identical;
# - what one synchronous step does, by doing it by hand and checking it against MirroredStrategy.
#
# **What you need**: R with the packages keras3, tfdatasets and tensorflow
# (`install.packages(c("keras3", "tfdatasets"))`), rpy2 in the kernel's Python environment, and
# about a minute on a 2-core CPU. The data is full MNIST when Keras has it cached or can download
# it, otherwise a sample of a few thousand real MNIST digits (offline). The stored outputs come from a
# run on that sample; `bash scripts/run_notebooks.sh --r-twins` runs the notebook again.

# %% [markdown]
# ## Introduction
#
# In **synchronous data parallelism** every device holds a full copy of the model, called a
# *replica*. At each training step:
#
# 1. the *global batch* is split into one *local batch* per replica;
# 2. each replica runs the forward and backward pass on its local batch and gets gradients of
#    its loss, which is the sum of its per-example losses divided by the **global** batch size
#    (not by its own, local batch size);
# 3. the gradients are summed across replicas (an *all-reduce*); because every replica divided by
#    the global batch, this sum is the **mean** gradient over the whole global batch, not N times
#    larger;
# 4. every replica applies the same update, so all copies of the weights stay identical.
#
# ![One synchronous step with two replicas: the global batch is split into two shards, each
# replica computes the gradient of its shard's loss divided by the global batch, the all-reduce
# sums them into the mean gradient, and every replica applies the same update to its mirrored
# variables](figures/sync_step_all_reduce.svg)
#
# Training with N replicas therefore follows the same path as training on one device with the
# global batch, up to floating-point rounding (lesson 3 measures how close), under one condition
# given below. `tf$distribute$MirroredStrategy` does this on one machine, and keras3's `fit()`
# works with it unchanged, as long as the model is created inside the strategy's scope.
#
# The condition: each example's loss must depend only on the weights and on that example. The
# guide's MLP used here meets it. A **BatchNormalization** layer does not (during training it
# normalises with the mean and variance of the batch it sees, and each replica sees only its local
# batch), nor does **dropout** (each replica draws a random mask for its own local batch, not the
# mask one device would draw for the global batch): with either, N replicas train correctly but
# follow another path than one device. Lesson 3 measures this, and repairs BatchNormalization with
# `synchronized = TRUE`.

# %% [markdown]
# ## Data parallelism, not model parallelism
#
# ![Data parallelism: the whole model on each device, the batch split between them, gradients
# all-reduced every step. Model parallelism: the layers split across the devices, activations
# passed from one device to the next](figures/data_vs_model_parallelism.svg)
#
# Two claims that circulate about data parallelism are wrong for what this course teaches:
#
# - **"Data parallelism is asynchronous."** Not here: `MirroredStrategy` (and
#   `MultiWorkerMirroredStrategy`, lesson 5) is **synchronous**. At every step each replica waits
#   in the all-reduce until every replica has sent its gradients, and all of them apply the same
#   update. Asynchronous training, where workers push updates whenever they are ready and may
#   compute on stale weights, is the parameter-server style (`ParameterServerStrategy`, lesson 6).
# - **"Use data parallelism when the data does not fit in memory."** No: data parallelism is for
#   training **faster** on more devices, or with a bigger global batch than one device could hold.
#   Data that does not fit in memory is the input pipeline's job: tfdatasets streams it from disk
#   (lesson 4). A **model** that does not fit on one device is the case for model parallelism,
#   which splits the layers (or the tensors) across devices and passes activations between them.

# %% [markdown]
# ## Setup
#
# The Python side loads rpy2's `%%R` magic and imports kerasdist, which starts TensorFlow with its
# C++ start-up lines kept out of the cell outputs. R then attaches keras3 and friends; reticulate
# uses this very Python process, so R and Python share one TensorFlow. `KERASDIST_DATA` chooses the
# data: `auto` (the default) takes full MNIST when available; the test suite sets it to `sample`.

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
# What the distributed dataset yields is a `PerReplica` value: one tensor per replica.

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
# cat(sprintf("the distributed dataset yields %s values\n", batch[[1]]$`__class__`$`__name__`))
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
# ## Data parallelism from scratch
#
# Before letting the strategy do it, do one synchronous step by hand, with the two local batches
# above as the two replicas' shards:
#
# 1. each "replica" computes the gradient of its loss = (sum of its per-example losses) / global
#    batch size, with `tf$GradientTape()`;
# 2. the "all-reduce" adds the two gradients up;
# 3. the same plain SGD update, `w <- w - learning_rate * gradient`, is applied to a copy of the
#    model.
#
# Then one `MirroredStrategy` step with 2 replicas, from the same initial weights and on the same
# global batch, must end with the same weights. The model is the classic MNIST MLP
# (784-256-256-10) that the whole course uses.

# %% language="R"
# # The course's model, as a function: every model of this lesson is built by it.
# build_mlp <- function() {
#   inputs <- keras_input(shape = 784, name = "digits")
#   logits <- inputs |>
#     layer_dense(units = 256, activation = "relu", name = "dense_1") |>
#     layer_dense(units = 256, activation = "relu", name = "dense_2") |>
#     layer_dense(units = 10, name = "logits")
#   keras_model(inputs, logits, name = "mnist_mlp")
# }
# # Gradients of (sum of the per-example losses) / divide_by with respect to the model's weights.
# gradients_of <- function(model, images, labels, divide_by) {
#   with(tf$GradientTape() %as% tape, {
#     per_example_loss <- loss_sparse_categorical_crossentropy(labels, model(images), from_logits = TRUE)
#     loss <- tf$reduce_sum(per_example_loss) / divide_by
#   })
#   tape$gradient(loss, model$trainable_variables)
# }
# # The all-reduce by hand: the element-wise sum of the replicas' gradient lists.
# sum_over_replicas <- function(gradients) {
#   lapply(seq_along(gradients[[1]]), function(i) tf$add_n(lapply(gradients, function(g) g[[i]])))
# }
# max_abs_difference <- function(a, b) max(unlist(Map(function(x, y) max(abs(as.array(x) - as.array(y))), a, b)))

# %% language="R"
# # The starting point: one set of initial weights, and the global batch whose halves we saw above.
# learning_rate <- 0.1
# set_random_seed(1)
# initial_weights <- get_weights(build_mlp())
# shards <- Map(list, local_images, local_labels)  # replica r trains on shards[[r]] = (images, labels)
# global_images <- tf$concat(local_images, axis = 0L)
# global_labels <- tf$concat(local_labels, axis = 0L)

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # Each replica's gradient (its loss divided by the GLOBAL batch), then the all-reduce: their sum.
# by_hand <- build_mlp()
# set_weights(by_hand, initial_weights)
# replica_gradients <- lapply(shards, function(s) gradients_of(by_hand, s[[1]], s[[2]], global_batch_size))
# summed_gradients <- sum_over_replicas(replica_gradients)
# mean_gradients <- gradients_of(by_hand, global_images, global_labels, global_batch_size)
# gap <- max_abs_difference(summed_gradients, mean_gradients)
# cat(sprintf("%d replicas: sum of their gradients = mean gradient of the global batch: %s\n",
#             length(shards), gap < 1e-6))

# %% language="R"
# # How far apart they are: float32 rounding only (this figure may differ between processors).
# cat(sprintf("max |sum - mean gradient|: %.1e\n", gap))

# %% [markdown]
# **Predict, then run.** Suppose each replica divided its loss by its *own* local batch size
# instead, as it would on a single device. How would the sum of the replicas' gradients compare
# with the mean gradient of the global batch? Decide, then run.

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # Each replica averages over its local batch: the all-reduced sum is N times the mean gradient.
# local_mean_gradients <- lapply(shards, function(s) gradients_of(by_hand, s[[1]], s[[2]], per_replica_batch_size))
# summed_local_means <- sum_over_replicas(local_mean_gradients)
# n <- strategy$num_replicas_in_sync
# stopifnot(all(unlist(Map(function(s, m) all(abs(as.array(s) - n * as.array(m)) <= 1e-7 + 1e-4 * abs(n * as.array(m))),
#                          summed_local_means, mean_gradients))))
# cat(sprintf("dividing by the local batch: the sum is %d x the mean gradient\n", n))

# %% language="R"
# # The same update on every weight of the copy: w <- w - learning_rate * (summed gradient).
# for (i in seq_along(summed_gradients))
#   by_hand$trainable_variables[[i]]$assign_sub(learning_rate * summed_gradients[[i]])

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # One MirroredStrategy step from the same weights: fit() on one global batch, plain SGD, 2 replicas.
# with(strategy$scope(), {
#   mirrored_model <- build_mlp()
#   set_weights(mirrored_model, initial_weights)
#   mirrored_model |> compile(optimizer = optimizer_sgd(learning_rate = learning_rate),
#                             loss = loss_sparse_categorical_crossentropy(from_logits = TRUE))
# })
# one_global_batch <- tensor_slices_dataset(list(global_images, global_labels)) |>
#   dataset_batch(global_batch_size)
# invisible(mirrored_model |> fit(one_global_batch, epochs = 1, shuffle = FALSE, verbose = 0))
# difference <- max_abs_difference(get_weights(by_hand), get_weights(mirrored_model))
# moved <- max_abs_difference(initial_weights, get_weights(mirrored_model))
# stopifnot(moved > 0, difference < 1e-6)
# cat("the step by hand gives the weights of the MirroredStrategy step:", difference < 1e-6, "\n")

# %% language="R"
# # The difference, and for scale how far the step moved the weights.
# cat(sprintf("by hand vs MirroredStrategy, weights after one step: max |difference| %.1e\n", difference))
# cat(sprintf("the step moved the weights by up to %.1e\n", moved))

# %% [markdown]
# That is all `MirroredStrategy` does in a step: split the global batch, compute each replica's
# gradient of its loss divided by the global batch, sum them with an all-reduce, and apply the same
# update everywhere. keras3's `fit()` scales each replica's loss for you (its mean over the local
# batch, divided by the number of replicas: the same as dividing its sum by the global batch); in a
# custom training loop you do it with `tf$nn$compute_average_loss(per_example_loss,
# global_batch_size = ...)` (lesson 5).

# %% [markdown]
# ## Build and compile in the strategy scope
#
# Everything that creates variables must be created inside the strategy's scope: the layers'
# weights, the optimizer's state and the metrics. Created there, each variable becomes a
# *mirrored variable* with one copy per replica. The model is the same MLP, built by `build_mlp()`.

# %% language="R"
# # Create the model, optimizer and metrics inside the scope so their variables are mirrored.
# set_random_seed(0)
# with(strategy$scope(), {
#   model <- build_mlp()
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
# distributes the dataset and runs every step on all replicas. The order of the examples is the
# dataset's own (its seeded `dataset_shuffle()`): `fit()` ignores its `shuffle` argument when the
# data is a TensorFlow dataset (Keras' data adapter only warns if it is `TRUE`; see
# `keras/src/trainers/data_adapters/__init__.py`), so `shuffle = FALSE` changes nothing but keeps
# that warning away.

# %% language="R"
# # Train: each step splits a global batch across the replicas and all-reduces their gradients.
# history <- model |> fit(train_dataset, epochs = epochs, validation_data = val_dataset,
#                         shuffle = FALSE, verbose = 2)

# %% language="R"
# # Evaluate on the held-out test digits (evaluation is distributed the same way).
# scores <- model |> evaluate(test_dataset, verbose = 0)
# cat(sprintf("test loss %.3f, test accuracy %.3f\n", scores$loss, scores$sparse_categorical_accuracy))

# %% magic_args="-w 9 -h 3.4 --units in -r 100" language="R"
# # Plot the learning curves from the history that fit() returned, one panel per metric with a short
# # title (keras3's plot(history) draws them too, labelled with the full metric names).
# curves <- history$metrics
# par(mfrow = c(1, 2), mar = c(4, 4, 2.5, 1), oma = c(0, 0, 1.5, 0), las = 1, cex.main = 0.95)
# for (metric in c("loss", "sparse_categorical_accuracy")) {
#   values <- cbind(unlist(curves[[metric]]), unlist(curves[[paste0("val_", metric)]]))
#   matplot(seq_len(epochs), values, type = "o", pch = 19, lty = 1, col = c("steelblue", "darkorange"),
#           xaxt = "n", xlab = "epoch", ylab = "",
#           main = if (metric == "loss") "Loss (training: mean of the epoch's steps)" else "Accuracy")
#   axis(1, at = seq_len(epochs))
#   grid()
#   legend(if (metric == "loss") "topright" else "bottomright", c("training", "validation"),
#          col = c("steelblue", "darkorange"), lty = 1, pch = 19, bty = "n")
# }
# mtext(sprintf("%d replicas, global batch %d", strategy$num_replicas_in_sync, global_batch_size),
#       side = 3, line = 0.2, outer = TRUE, cex = 0.85)

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

# %% [markdown]
# **Predict, then run.** After three epochs of training, do the components of this mirrored
# variable still hold exactly the same numbers, or have they drifted apart by rounding? Decide,
# then run.

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # Every replica applied the same all-reduced updates, so the copies are equal bit for bit.
# first <- components[[1]]$numpy()
# identical_components <- all(vapply(components, function(v) identical(v$numpy(), first), logical(1)))
# stopifnot(identical_components)
# cat("all components identical:", identical_components, "\n")

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
# - Each replica divides its loss by the **global** batch, so the all-reduced sum of the
#   gradients is the mean gradient: one step with N replicas is the step of one device on the
#   global batch, as the step by hand showed, as long as no layer looks across the batch
#   (BatchNormalization, dropout).
# - This is synchronous data parallelism, for speed on more devices; data that does not fit in
#   memory is streamed by the input pipeline, and a model that does not fit calls for model
#   parallelism.

# %% [markdown]
# ## Glossary
#
# - **Replica**: one copy of the model, with its own device, that computes on its share of every
#   global batch. Made here by `configure_replicas()` and `MirroredStrategy`; one per worker in
#   lesson 5.
# - **Replica context vs cross-replica context**: code inside `strategy$run(fn)` runs once per
#   replica, in *replica context* (`tf$distribute$get_replica_context()` says which replica);
#   code in the strategy's scope outside `strategy$run()`, such as creating variables or calling
#   `strategy$reduce()`, runs once for all replicas, in *cross-replica context*. The cell below
#   shows both; lesson 5's custom training loop uses `strategy$run()` and `strategy$reduce()`.
# - **PerReplica**: a value with one component per replica, as the distributed dataset yields
#   (this lesson, "Global batch and per-replica batch") and `strategy$run()` returns;
#   `strategy$experimental_local_results()` lists its components.
# - **Mirrored variable**: a variable created in the strategy's scope, with one copy per replica
#   that every step updates identically ("What a mirrored variable is").
# - **Global batch**: the examples of one training step across all replicas; the dataset is
#   batched by it, and every replica's loss is divided by it ("Global batch and per-replica
#   batch", "Data parallelism from scratch"; lesson 3 on how its size changes training).
# - **All-reduce**: the collective operation that sums a value over all replicas and gives the
#   result to every one of them; here it sums the gradients ("Data parallelism from scratch"; across
#   machines in lesson 5, and its implementations in lesson 6).

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # Cross-replica context in the scope; replica context (once per replica) inside strategy$run().
# # The per-replica function is Python: the strategy calls it from its own threads, where R cannot run.
# reticulate::py_run_string(paste(
#   "import tensorflow as tf",
#   "def replica_id():",
#   "    return tf.distribute.get_replica_context().replica_id_in_sync_group", sep = "\n"))
# with(strategy$scope(),
#      cat("in strategy$scope(): cross-replica context:", tf$distribute$in_cross_replica_context(), "\n"))
# replica_ids <- tf_function(function() strategy$run(reticulate::py$replica_id))()  # a PerReplica value
# cat("inside strategy$run(): replica ids",
#     vapply(strategy$experimental_local_results(replica_ids), function(i) as.integer(i), integer(1)), "\n")

# %% [markdown]
# ## Exercises
#
# 1. Set `num_replicas <- 4L`, restart the kernel and run all cells. What changes in the global
#    batch, in the split batch and in the number of components of a mirrored variable?
#
#    <details><summary>Hint</summary>
#
#    The per-replica batch is fixed at 32; the global batch is computed from it.
#
#    </details>
#    <details><summary>Solution</summary>
#
#    The global batch becomes 32 x 4 = 128, the split shows four local batches of 32, every
#    mirrored variable has four components (all identical), and an epoch has half as many steps.
#    The step by hand still matches once `shards` has four entries: the sum of four gradients,
#    each divided by the global batch, is again the mean gradient.
#
#    </details>
# 2. Keep the global batch at 64 with 4 replicas. What per-replica batch do you get, and do the
#    learning curves change?
#
#    <details><summary>Hint</summary>
#
#    Set `per_replica_batch_size <- 64L %/% num_replicas`. What does the optimizer see in a step?
#
#    </details>
#    <details><summary>Solution</summary>
#
#    16 per replica. The curves stay the same up to floating-point rounding: every step still
#    applies the mean gradient of the same 64 examples, only computed in four pieces (lesson 3
#    measures how close the runs stay).
#
#    </details>
# 3. Build the model *outside* the strategy scope and compile and fit it as before. Which strategy
#    does `model$distribute_strategy` report, and how many replicas actually train?
#
#    <details><summary>Hint</summary>
#
#    Print `` model$distribute_strategy$`__class__`$`__name__` `` and
#    `model$distribute_strategy$num_replicas_in_sync`.
#
#    </details>
#    <details><summary>Solution</summary>
#
#    The default strategy (`_DefaultDistributionStrategy`) with 1 replica: the variables are plain,
#    not mirrored, and one device trains on the whole global batch. Nothing fails, which is why
#    the scope is easy to forget.
#
#    </details>
# 4. Are the optimizer's variables mirrored too? Inspect `model$optimizer$variables`.
#
#    <details><summary>Hint</summary>
#
#    Look at `` v$value$`__class__`$`__name__` `` for each optimizer variable `v`.
#
#    </details>
#    <details><summary>Solution</summary>
#
#    Yes: Adam's moments, its iteration counter and its learning rate were created in the scope,
#    so they are `MirroredVariable`s too, with one component per replica; every replica applies the
#    same update to them as well.
#
#    </details>
# 5. In "Data parallelism from scratch", replace `global_batch_size` by `per_replica_batch_size`
#    in `replica_gradients`. Which check fails, and by how much do the weights differ?
#
#    <details><summary>Hint</summary>
#
#    With plain SGD, the update is proportional to the gradient.
#
#    </details>
#    <details><summary>Solution</summary>
#
#    The summed gradient becomes twice the mean gradient (the predict-then-run cell), so the step
#    by hand moves every weight twice as far as `MirroredStrategy` does, and the final
#    `stopifnot(difference < 1e-6)` fails: the difference is about as large as the step itself.
#
#    </details>
# 6. In a terminal, run `python -m kerasdist train --replicas 2 --epochs 3 --data sample` and
#    compare the test accuracy with the one above.
#
#    <details><summary>Hint</summary>
#
#    Both train the same model with the same seed, batch and epochs on the sample.
#
#    </details>
#    <details><summary>Solution</summary>
#
#    It prints the per-epoch log and a test accuracy within rounding of `run_training()`'s above
#    (with `--data sample`; the lesson uses `KERASDIST_DATA`, which may be full MNIST).
#
#    </details>
#
# Next: [Checkpoints and resume](02_checkpoints_resume_R.ipynb)
