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
# - what a *mirrored variable* is, and what keeps its copies identical: an equal start and the
#   optimizer's all-reduced update, not a write;
# - what one synchronous step does, by doing it by hand and checking it against MirroredStrategy;
# - when N replicas train exactly like one device, and the layers and options that break it, each
#   shown by a run.
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
# Each replica holds its own copy of every weight; a weight kept as one copy per replica, with the
# copies updated alike, is a **mirrored variable** (the section "What a mirrored variable is" looks
# inside one). `tf$distribute$MirroredStrategy` does all of this on one machine, and keras3's `fit()` works with
# it unchanged, as long as the model is created inside the strategy's scope.
#
# Because the update is computed from the whole global batch, training with N replicas follows
# the same path as training on one device with that batch, up to floating-point rounding, when
# **all** of these hold:
#
# 1. **the same start and the same order**: the same initial weights, and the same examples in
#    every global batch;
# 2. **equal shares**: every replica gets as many examples as every other in every step (a short
#    last batch, split unevenly, counts the examples of the smaller share more);
# 3. **no layer that looks across the batch**, such as BatchNormalization: on N replicas it sees
#    only its replica's share of the batch;
# 4. **no random layer**, such as dropout: in Keras 3 every replica draws the *same* random mask;
# 5. **no gradient clipping in the optimizer**: Keras 3 clips each replica's share of the gradient,
#    not the summed gradient.
#
# Each of these is explained where it is shown: 3 to 5 in the section "When N replicas follow one
# device's path" below, each by a run; 1 and 2 in lesson 3, over whole trainings.
#
# What is left is the order of floating-point additions: two replicas sum their gradients in
# another order than one device, so the runs agree to rounding, not bit for bit (lesson 3 measures
# how closely). The step by hand below adds the same two replicas' gradients as the strategy, and
# matches it exactly (a sum of two numbers does not depend on their order, and dividing by 32, 2 or
# 64, powers of two, is exact in floating point); against one device's mean gradient the gap is a
# rounding error, as printed there. The MLP used here meets all five conditions. It is
# "the guide's MLP" of this course: 784-256-256-10 with Adam, `get_compiled_model()` of the keras.io guide
# [Multi-GPU distributed training with TensorFlow](https://keras.io/guides/distributed_training_with_tensorflow/).

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
#   which splits the layers (or the tensors) across devices and passes activations (a layer's
#   outputs, the next layer's inputs) between them.
#   In between sits *sharded* data parallelism: still data parallel (every device computes on
#   its own share of the batch), but each device keeps only a slice of the weights, of their
#   gradients and of the optimizer's state, where a replica of this lesson holds all of them in
#   full. With Adam in float32 that is 16 bytes per weight: 4 for the weight, 4 for its gradient
#   and 8 for Adam's two running averages; sharding divides it by the number of devices, at the
#   price of sending the slices back and forth. Its best-known implementations are ZeRO
#   (DeepSpeed) and FSDP (PyTorch's Fully Sharded Data Parallel); lesson 9 measures what it
#   sends, and lesson 7 shards weights with Keras' own `LayoutMap`.

# %% [markdown]
# ## Setup
#
# The Python side loads rpy2's `%%R` magic and imports kerasdist, which starts TensorFlow with its
# C++ start-up lines kept out of the cell outputs. R then attaches keras3 and friends; reticulate
# uses this very Python process, so R and Python share one TensorFlow. The environment variable
# `KERASDIST_DATA` chooses the data: `auto` (the default) takes full MNIST when Keras has it or can
# download it, `sample` always takes the offline sample (the stored outputs of this notebook come
# from it).
#
# The sections that teach a skill end with a checked exercise: complete the cell, run the check
# under it, and it answers Correct, Incorrect with what is wrong, or Not attempted; `kd_hint(ex$q1)`
# and `kd_solution(ex$q1)` help.
#
# In the course's own copy of the lessons, some code cells start with a comment in capitals,
# `# NBVAL` and a word after it. It is for the course's tests (nbval re-runs the lesson and
# compares that cell's output with the stored one); it changes nothing when you run the cell, and
# the copy handed out to students leaves it out.

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
# library(kerasdist)  # the course's R package: this lesson's checked exercises
# ex <- kd_exercises("01")
# data_source <- Sys.getenv("KERASDIST_DATA", "auto")
# num_replicas <- 2L
# epochs <- 3L

# %% [markdown]
# ## Make N replicas
#
# A replica needs a device. kerasdist's `configure_replicas(n)` finds n of them: the first n GPUs
# when there are that many, one GPU split into n logical GPUs, or, with no GPU, the CPU split into n
# *virtual* CPU devices with `tf$config$set_logical_device_configuration()`. Virtual CPUs share the
# same cores, so they do not make training faster; they make the replicas real, so everything in
# this lesson behaves as it would on n GPUs, except for speed and the all-reduce implementation: on
# CPUs (and on one GPU split in several) the strategy sums with TensorFlow's ring algorithm (RING),
# on physical GPUs with NVIDIA's NCCL library (lesson 6 shows which one a strategy picked). This
# has to happen before TensorFlow uses its devices; to change the number of replicas later,
# restart the kernel.

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
#
# The loader below prints which source it used and how many digits each split holds. With `auto`
# and no network, it first prints a line that starts "No network: using the offline sample", with
# the reason the download failed in brackets: that is information, not an error, and the lesson
# then runs on the sample.
#
# `fit()` splits every global batch for you. To look at the split yourself, two methods of the
# strategy help. `strategy$experimental_distribute_dataset(dataset)` wraps a dataset so that each
# element it yields is already cut into one local batch per replica: a `PerReplica` value, which
# holds one tensor per replica. `strategy$experimental_local_results(value)` returns those tensors
# as a list, replica 0's first.

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
#     dataset_batch(batch_size, drop_remainder = training) |>  # whole batches only: equal shares per replica
#     dataset_prefetch(tf$data$AUTOTUNE)  # prepare the next batch while this one trains (tf.data picks how many)
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
# ### Exercise q1: the per-replica batch
#
# Write a function `per_replica_batch(global_batch, num_replicas)` that returns how many examples of one global batch each replica gets. The check calls it for several batches and replica counts.
#
# Complete the cell, then run the check below it; `kd_hint(ex$q1)` gives a hint, `kd_solution(ex$q1)` the solution.
#
# <details><summary>Solution</summary>
#
# The global batch is split evenly: with N replicas each takes global_batch / N examples, a whole number (a batch size is a count). With 64 on 2 replicas that is 32, the `per_replica_batch_size` of this lesson.
#
# </details>

# %% nbgrader={"grade": false, "grade_id": "q1_answer", "locked": false, "schema_version": 3, "solution": true, "task": false} language="R"
# per_replica_batch <- NULL  # a function of (global_batch, num_replicas)
# ### BEGIN SOLUTION
# per_replica_batch <- function(global_batch, num_replicas) global_batch %/% num_replicas
# ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "q1", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false} language="R"
# # NBVAL_CHECK_OUTPUT
# kd_check(ex$q1)
# ### BEGIN HIDDEN TESTS
# kd_assert_correct(ex$q1)
# ### END HIDDEN TESTS

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
#
# A gradient by hand takes `tf$GradientTape()`, which Keras' `fit()` also uses inside each step.
# TensorFlow records the operations run inside `with(tf$GradientTape() %as% tape, { ... })`;
# afterwards `tape$gradient(loss, model$trainable_variables)` returns the gradient of `loss` with
# respect to each weight, as a list in the order of the weights. `gradients_of()` below does just
# that. With one such list per replica, `sum_over_replicas()` takes each weight's gradients across
# the replicas and sums them with `tf$add_n()`: the all-reduce, by hand.
#
# The `MirroredStrategy` step builds its model inside `with(strategy$scope(), ...)`, so that the
# model's weights get one copy per replica; the section "Build and compile in the strategy scope"
# shows what happens without it.

# %% language="R"
# # The course's model, as a function: every model of this lesson is built by it. It uses keras3's functional API
# # (each layer applied to the tensor before it, then keras_model(inputs, outputs)), the same MLP as a sequential
# # model. Its last layer gives logits, the scores before softmax, hence from_logits = TRUE in the losses.
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
# batch, divided by the number of replicas: the same as dividing its sum by the global batch, when
# the shares are equal); in a custom training loop you do it with
# `tf$nn$compute_average_loss(per_example_loss, global_batch_size = ...)` (lesson 6 writes such a
# loop cell by cell; lesson 5's multi-worker script is another). Both assume full, evenly split
# batches. With a fixed `global_batch_size`, a short last batch is still divided by the full global
# batch, so its step comes out smaller; without the argument, TensorFlow divides by the local batch
# size x N, which weighs an uneven share as `fit()` does. The exact mean divides the local sum by
# the all-reduced count of examples; this course drops the last partial batch instead (lesson 3).
#
# <details><summary>Look inside</summary>
#
# `compute_average_loss` is in `tensorflow/python/ops/nn_impl_distribute.py`: without
# `global_batch_size` it multiplies the local batch size by the number of replicas in sync.
#
# </details>

# %% [markdown]
# ### Exercise q2: one replica's gradients
#
# Write `local_gradients(model, images, labels, global_batch)`: the gradients one replica computes on its local batch in a synchronous step. The check splits real global batches among replicas (64 digits in two, and 48 in three unequal shares), adds your replicas' gradients, and compares the sum with the gradient MirroredStrategy all-reduces.
#
# Complete the cell, then run the check below it; `kd_hint(ex$q2)` gives a hint, `kd_solution(ex$q2)` the solution.
#
# <details><summary>Solution</summary>
#
# Each replica divides the sum of its per-example losses by the **global** batch, so the all-reduce (a sum over replicas) gives the mean gradient of the whole global batch, which is what one device would compute. Dividing by the local batch makes the sum N times too large.
#
# </details>

# %% nbgrader={"grade": false, "grade_id": "q2_answer", "locked": false, "schema_version": 3, "solution": true, "task": false} language="R"
# local_gradients <- NULL  # a function of (model, images, labels, global_batch)
# ### BEGIN SOLUTION
# local_gradients <- function(model, images, labels, global_batch) {
#   with(tf$GradientTape() %as% tape, {
#     per_example <- loss_sparse_categorical_crossentropy(labels, model(images), from_logits = TRUE)
#     loss <- tf$reduce_sum(per_example) / global_batch
#   })
#   tape$gradient(loss, model$trainable_variables)
# }
# ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "q2", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false} language="R"
# # NBVAL_CHECK_OUTPUT
# kd_check(ex$q2)
# ### BEGIN HIDDEN TESTS
# kd_assert_correct(ex$q2)
# ### END HIDDEN TESTS

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
# `summary()` gives the weights' memory in "MB", and Keras' MB there is 1024 x 1024 bytes, a
# *mebibyte* (MiB). Other tools, and lesson 9, write MB for a million bytes, so the same weights
# are about 5% more "MB" there. The cell below computes both from the number of weights, 4 bytes
# each in float32.

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # The weights' memory in both units.
# weight_count <- model$count_params()
# weight_bytes <- 4 * weight_count
# cat(sprintf("%s weights x 4 bytes = %s bytes\n", format(weight_count, big.mark = ","),
#             format(weight_bytes, big.mark = ",")))
# cat(sprintf("= %.2f MiB (1 MiB = 1,048,576 bytes)\n", weight_bytes / 2^20))
# cat(sprintf("= %.2f MB (1 MB = 1,000,000 bytes)\n", weight_bytes / 1e6))

# %% [markdown]
# **Why the scope.** Keras notes the strategy that is in force when a model is created, and
# TensorFlow makes a variable mirrored only when it is created under a strategy's scope. The cell
# below builds the same MLP outside the scope: nothing fails, but that model belongs to
# TensorFlow's *default strategy*, which runs everything on one device, and its weights are plain
# variables (`ResourceVariable`: TensorFlow's ordinary variable, one copy on one device). `fit()` would train it on one device, on the whole global batch, and never say so.

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # The same MLP built outside the scope, beside the one built inside it.
# outside <- build_mlp()
# for (built in list(list("inside the scope", model), list("outside the scope", outside))) {
#   built_strategy <- built[[2]]$distribute_strategy
#   cat(sprintf("built %s: %s with %d replica(s), its weights are %ss\n", built[[1]],
#               built_strategy$`__class__`$`__name__`, built_strategy$num_replicas_in_sync,
#               built[[2]]$weights[[1]]$value$`__class__`$`__name__`))
# }

# %% [markdown]
# ### Exercise q3: build and compile in the scope
#
# Write `build_and_compile(strategy)`: build the lesson's MLP with `build_mlp()` and compile it (Adam, sparse categorical cross-entropy from logits) so that it trains on all of the strategy's replicas. The check gives it two 2-replica MirroredStrategies, one after the other.
#
# Complete the cell, then run the check below it; `kd_hint(ex$q3)` gives a hint, `kd_solution(ex$q3)` the solution.
#
# <details><summary>Solution</summary>
#
# Variables made under `with(strategy$scope(), ...)` are mirrored: one copy per replica. The model and the optimizer (made by `compile()`) must both be created there; built and compiled outside, the model trains on one device with the default strategy and no error; built inside but compiled outside, `fit()` fails: the optimizer then belongs to the default strategy and the model's variables to this one.
#
# </details>

# %% nbgrader={"grade": false, "grade_id": "q3_answer", "locked": false, "schema_version": 3, "solution": true, "task": false} language="R"
# build_and_compile <- NULL  # a function of (strategy) that returns a compiled model
# ### BEGIN SOLUTION
# build_and_compile <- function(strategy) {
#   with(strategy$scope(), {
#     model <- build_mlp()
#     model |> compile(optimizer = optimizer_adam(),
#                      loss = loss_sparse_categorical_crossentropy(from_logits = TRUE))
#   })
#   model
# }
# ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "q3", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false} language="R"
# # NBVAL_CHECK_OUTPUT
# kd_check(ex$q3)
# ### BEGIN HIDDEN TESTS
# kd_assert_correct(ex$q3)
# ### END HIDDEN TESTS

# %% [markdown]
# ## Train and evaluate
#
# `fit()` and `evaluate()` need no change: Keras sees the strategy the model was built under,
# distributes the dataset and runs every step on all replicas. The order of the examples is the
# dataset's own (its seeded `dataset_shuffle()`): `fit()` ignores its `shuffle` argument when the
# data is a TensorFlow dataset (Keras only warns if it is `TRUE`), so `shuffle = FALSE` changes
# nothing but keeps that warning away.
#
# <details><summary>Look inside</summary>
#
# The warning is raised by `get_data_adapter` in `keras/src/trainers/data_adapters/__init__.py`.
#
# </details>

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
# (`$value`) is a `MirroredVariable`: one component variable per device, which the strategy treats
# as one variable.
#
# Two words first, for where code runs. Code that runs once for each replica, on that replica's
# device and with its share of the batch, runs in *replica context*: the body of a training step.
# Code that runs once for all the replicas runs in *cross-replica context*: creating the model in
# the strategy's scope, `get_weights()`, saving. `strategy$run(fn)` is the door from one to the
# other: called in cross-replica context, it calls `fn` once per replica, in replica context, and
# returns their results as one `PerReplica` value. Keras' `fit()`, `evaluate()` and `predict()`
# run every step that way. Inside `fn`, `tf$distribute$get_replica_context()$replica_id_in_sync_group`
# is the number of the replica running it, 0 to N-1. `strategy$run()` is meant to be called inside
# a `tf_function()` (TensorFlow's compiled graph, as Keras does; called eagerly it works but warns
# that it is slow), hence `tf_function(function() strategy$run(fn))()` in the cells below: build
# that graph, and call it at once. The strategy calls `fn` from threads of its own, where R cannot
# run, so these cells write `fn` in Python (`reticulate::py_run_string()`).

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
# A TensorFlow device name has the parts `/job:<name>/replica:<index>/task:<index>/device:<type>:<index>`.
# The job and the task say which process of a cluster holds the device (lesson 5's two workers are
# tasks 0 and 1 of the job "worker"; alone, the process is task 0 of the job "localhost"). The
# "replica" part belongs to that address of a process; a cluster defined by `TF_CONFIG` (lesson 5)
# names only jobs and tasks, so it stays 0. It is **not** the strategy's replica: the strategy's
# replicas differ in the last part, the device (`CPU:0`, `CPU:1`).
#
# Outside a replica step (`get_weights()`, saving) you read the first replica's component; inside
# one each replica reads its own. The cell below asks TensorFlow which context it is in, in the
# scope and inside `strategy$run()`.

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
# The components start equal: the strategy fills every component after the first with the first
# one's value when the variable is created (with several workers, worker 0 sends its initial
# values to the others, lesson 5). After that, nothing in the variable keeps the components equal.
# Each variable has an *aggregation*, its rule for a write made in replica context, and Keras
# creates its weights with aggregation "none": each replica's write changes only that replica's
# copy. The cell below shows such a write.
#
# What keeps the copies equal is the optimizer. In every step, in replica context, it sums the
# replicas' gradients with an all-reduce, so every replica holds the same sum. Then it steps out
# into cross-replica context (TensorFlow's call for that is `merge_call`: it pauses the replicas
# and runs a function once for all of them) and there applies that one update to every component
# of every weight, with `strategy$extended$update(variable, update_fn)`, which calls `update_fn` on
# each component. State that a layer writes in a replica step, without the optimizer, is not
# synchronized: the next section shows one.
#
# <details><summary>Look inside</summary>
#
# - The equal start: `_get_variable_creator_initial_value` in
#   `tensorflow/python/distribute/mirrored_strategy.py`.
# - Aggregation "none" for every Keras weight: `add_weight` in `keras/src/layers/layer.py`.
# - The optimizer's step under a strategy, in `keras/src/backend/tensorflow/optimizer.py`:
#   `_backend_update_step` calls `_all_reduce_sum_gradients`, then `merge_call` with
#   `_distributed_tf_update_step`, which calls `strategy.extended.update` for each variable.
#   (It asks through `maybe_merge_call`, `tensorflow/python/distribute/merge_call_interim.py`:
#   under XLA on GPUs only, MirroredStrategy skips the merge and each replica applies the same
#   summed update to its own copy.)
#
# </details>

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # A write inside a replica step: every replica assigns its own id + 1 to a mirrored variable.
# # The per-replica function is Python: the strategy calls it from its own threads, where R cannot run.
# with(strategy$scope(), written <- keras_variable(0, name = "written"))
# cat("aggregation:", written$value$aggregation$name, "\n")
# reticulate::py_run_string(paste(
#   "import tensorflow as tf",
#   "def assign_replica_id_to(variable):",
#   "    def step():",
#   "        replica = tf.distribute.get_replica_context().replica_id_in_sync_group",
#   "        variable.assign(tf.cast(replica, 'float32') + 1.0)",
#   "    return step", sep = "\n"))
# invisible(tf_function(function() strategy$run(reticulate::py$assign_replica_id_to(written)))())
# cat("components after the write:", vapply(written$value$values, function(c) as.numeric(c$numpy()), 0),
#     "; read outside the step:", as.numeric(written$numpy()), "\n")

# %% [markdown]
# **Predict, then run.** After three epochs of training, do the components of the first Dense
# layer's kernel (`mirrored`, the mirrored variable looked at above, not the `written` one) still hold
# exactly the same numbers, or have they drifted apart by rounding? Decide, then run.

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # The optimizer applied the same all-reduced update to every copy, so they are equal bit for bit.
# first <- components[[1]]$numpy()
# identical_components <- all(vapply(components, function(v) identical(v$numpy(), first), logical(1)))
# stopifnot(identical_components)
# cat("all components identical:", identical_components, "\n")

# %% [markdown]
# ## When N replicas follow one device's path
#
# The introduction listed five conditions. The step by hand showed the core of it; lesson 3 trains
# whole runs with the same start and order, and with uneven shares. Here are the other three, each
# in a few steps: BatchNormalization, dropout and gradient clipping.
#
# **BatchNormalization's moving statistics.** During training the layer also updates its
# `moving_mean` and `moving_variance`, which inference uses. It writes them in the replica step,
# with no optimizer involved, so each replica writes the statistics of its own local batch into its
# own copy. Below, a small model with BatchNormalization trains a few steps on 2 replicas, with
# `synchronized = FALSE` (the default) and `synchronized = TRUE`.

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # A few training steps of a model with BatchNormalization, then the copies of its moving mean.
# build_normalized <- function(synchronized) {
#   inputs <- keras_input(shape = 784, name = "digits")
#   outputs <- inputs |>
#     layer_dense(units = 32, activation = "relu", name = "dense_1") |>
#     layer_batch_normalization(synchronized = synchronized, name = "batch_norm") |>
#     layer_dense(units = 10, name = "logits")
#   keras_model(inputs, outputs)
# }
# copies_of <- function(variable) lapply(variable$value$values, function(component) component$numpy())
# moving_mean_spread <- c()
# for (synchronized in c(FALSE, TRUE)) {
#   set_random_seed(0)
#   with(strategy$scope(), {
#     normalized <- build_normalized(synchronized)
#     normalized |> compile(optimizer = optimizer_sgd(learning_rate = learning_rate),
#                           loss = loss_sparse_categorical_crossentropy(from_logits = TRUE))
#   })
#   invisible(normalized |> fit(dataset_take(train_dataset, 10), epochs = 1, shuffle = FALSE, verbose = 0))
#   moving_mean <- get_layer(normalized, "batch_norm")$moving_mean
#   copies <- copies_of(moving_mean)
#   kernel_copies <- copies_of(get_layer(normalized, "dense_1")$kernel)
#   moving_mean_spread[sprintf("synchronized=%s", synchronized)] <- max(abs(copies[[1]] - copies[[2]]))
#   cat(sprintf(paste("synchronized=%s: moving_mean copies identical: %s; read outside the step = replica 0's: %s;",
#                     "dense_1 kernel copies identical: %s\n"),
#               synchronized, all(vapply(copies[-1], function(other) identical(copies[[1]], other), logical(1))),
#               identical(moving_mean$numpy(), copies[[1]]),
#               all(vapply(kernel_copies[-1], function(other) identical(kernel_copies[[1]], other), logical(1)))))
# }

# %% language="R"
# # How far apart the two copies of the moving mean are after those steps.
# print(sprintf("%.1e", moving_mean_spread))

# %% [markdown]
# Without synchronization the copies part as soon as the replicas see different data (the printout
# shows them after the steps above), although the weights the optimizer
# updates stay identical. `save_model()` and `get_weights()` then give replica 0's statistics,
# gathered from half of the data, while `evaluate()` and `predict()` under the strategy normalise
# each shard with its own replica's copy (the same example can get another prediction on another
# replica). `synchronized = TRUE` all-reduces the batch statistics,
# so every replica normalises with those of the global batch and writes the same moving statistics
# (lesson 3 shows what it changes in the loss, and what it costs).
#
# **Dropout.** Dropout looks at one example at a time, but its random numbers come from the
# layer's seed state, and in Keras 3 that state is one mirrored variable (aggregation "none",
# created by the layer's `SeedGenerator`). Every replica starts its step from the same seed. Below, a
# `layer_dropout(rate = 0.5)` is applied to a global batch of 8 rows of ones, on 2 replicas and on
# one device, from the same seed.
#
# <details><summary>Look inside</summary>
#
# The seed state is created in `keras/src/random/seed_generator.py` (`SeedGenerator`), as a
# variable with aggregation "none".
#
# </details>

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # The same dropout layer on a batch of ones: on 2 replicas (4 rows each) and on one device (8 rows).
# # The per-replica function is Python again (strategy$run calls it on TensorFlow's replica threads).
# reticulate::py_run_string(paste(
#   "def training_call(layer):",
#   "    return lambda rows: layer(rows, training=True)", sep = "\n"))
# ones <- tf$ones(c(8L, 6L))
# set_random_seed(0)
# with(strategy$scope(), dropout <- layer_dropout(rate = 0.5, seed = 1L))
# seed_state <- dropout$seed_generator$state$value
# cat("seed state:", seed_state$`__class__`$`__name__`, seed_state$aggregation$name, "\n")
# ones_per_replica <- reticulate::iter_next(reticulate::as_iterator(
#   strategy$experimental_distribute_dataset(tensors_dataset(ones))))
# dropped <- tf_function(function(x) strategy$run(reticulate::py$training_call(dropout), args = list(x)))(
#   ones_per_replica)
# replica_masks <- lapply(strategy$experimental_local_results(dropped), function(t) (t$numpy() > 0) * 1L)
# set_random_seed(0)
# one_device_dropout <- layer_dropout(rate = 0.5, seed = 1L)
# one_device_mask <- (tf_function(function(x) one_device_dropout(x, training = TRUE))(ones)$numpy() > 0) * 1L
# half <- nrow(replica_masks[[1]])
# cat("the replicas draw the same mask:", all(vapply(replica_masks[-1], function(other) identical(replica_masks[[1]], other), logical(1))), "\n")
# cat("it is the mask one device draws for the first rows:",
#     identical(replica_masks[[1]], one_device_mask[seq_len(half), ]),
#     "; for the last rows:", identical(replica_masks[[1]], one_device_mask[half + seq_len(half), ]), "\n")

# %% language="R"
# # The masks themselves (1 = kept).
# for (replica in seq_along(replica_masks)) {
#   cat(sprintf("replica %d:\n", replica - 1L))
#   write.table(replica_masks[[replica]], row.names = FALSE, col.names = FALSE)
# }
# cat("one device:\n")
# write.table(one_device_mask, row.names = FALSE, col.names = FALSE)

# %% [markdown]
# Two replicas drop the same units for their first, second, ... local example: the noise is
# correlated across replicas, where one device draws independent masks for all the rows of the
# global batch. Training still works, but it follows another path, and no Keras option changes it.
#
# **Gradient clipping.** `clipnorm`, `global_clipnorm` and `clipvalue` clip the gradient before
# the update (`clipnorm` scales each gradient tensor down to that norm at most, like
# `tf$clip_by_norm()`).
#
# **Predict, then run.** One SGD step with `clipnorm`, on 2 replicas, from the initial weights of the
# step by hand: does it apply the mean gradient clipped, as one device would, or the sum of the two
# replicas' gradients, each clipped on its own?

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # One step of SGD with clipnorm on 2 replicas, against the two ways to clip by hand.
# clip_norm <- 0.1
# with(strategy$scope(), {
#   clipped <- build_mlp()
#   set_weights(clipped, initial_weights)
#   clipped |> compile(optimizer = optimizer_sgd(learning_rate = learning_rate, clipnorm = clip_norm),
#                      loss = loss_sparse_categorical_crossentropy(from_logits = TRUE))
# })
# invisible(clipped |> fit(one_global_batch, epochs = 1, shuffle = FALSE, verbose = 0))
# # By hand: clip the mean gradient (what one device does), or clip each replica's gradient, then sum.
# clip <- function(gradients) lapply(gradients, function(g) tf$clip_by_norm(g, clip_norm))
# mean_then_clip <- clip(mean_gradients)
# clip_then_sum <- sum_over_replicas(lapply(replica_gradients, clip))
# stopifnot(any(vapply(mean_gradients, function(g) as.numeric(tf$norm(g)) > clip_norm, logical(1))))  # active
# sgd_step <- function(gradients) Map(function(w, g) w - learning_rate * as.array(g), initial_weights, gradients)
# clipping_gaps <- c(
#   "the mean gradient, clipped" = max_abs_difference(get_weights(clipped), sgd_step(mean_then_clip)),
#   "each replica's gradient clipped, then summed" = max_abs_difference(get_weights(clipped), sgd_step(clip_then_sum)))
# for (name in names(clipping_gaps))
#   cat(sprintf("2 replicas' step = SGD with %s: %s\n", name, clipping_gaps[[name]] < 1e-6))

# %% language="R"
# # The gaps, next to how far the clipped step moved the weights.
# for (name in names(clipping_gaps))
#   cat(sprintf("2 replicas' step vs SGD with %s: max |weight difference| %.1e\n", name, clipping_gaps[[name]]))
# cat(sprintf("the clipped step moved the weights by up to %.1e\n",
#             max_abs_difference(get_weights(clipped), initial_weights)))

# %% [markdown]
# (Where the two steps print the same largest move, that weight's gradient was under the threshold on
# both replicas, so the clipping left it alone; the gap line shows how far the clipped weights moved
# apart.)
#
# The second: in Keras 3 the optimizer clips *each replica's* gradient (its share, divided by the
# global batch) and only then all-reduces. Each replica's share of the gradient is about 1/N of
# the mean gradient, so on N replicas the same threshold clips less of it, and the summed update
# may reach N times the threshold. Keras 3 has no switch to clip after the all-reduce: with
# clipping, N replicas train correctly but not as one device, and the threshold means something
# else for each N.
#
# **Op determinism.** Lesson 3 calls `tf$config$experimental$enable_op_determinism()`. It makes
# TensorFlow choose deterministic kernels (here: the ops' compiled routines, not a Dense layer's
# weights) and `tf.data` keep its order, so that the same program on
# the same machine repeats its numbers bit for bit. It does not make 1 device and N replicas add in
# the same order: their gap stays at rounding, not zero.
#
# <details><summary>Look inside</summary>
#
# - Clipping before the all-reduce: in `keras/src/optimizers/base_optimizer.py`, `apply` calls
#   `_clip_gradients`, then `_backend_update_step`, whose TensorFlow version
#   (`keras/src/backend/tensorflow/optimizer.py`) does the all-reduce.
# - What op determinism promises: the docstring of `enable_op_determinism` in
#   `tensorflow/python/framework/config.py`.
#
# </details>

# %% [markdown]
# ## The same run in one call
#
# kerasdist's `run_training()` does all of the above (replicas, strategy, data pipeline, model in
# scope, `fit`, `evaluate`) and returns a plain record of the run. One difference: on CPU devices
# its strategy sums on one device (`ReductionToOneDevice`) instead of the ring above, the same sums
# (lesson 6 says why). From R it is one reticulate call; the command line does the same:
# `kerasdist train --replicas 2 --epochs 3 --global-batch-size 64 --data sample`.

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
# - **Feed the replicas.** Read and decode, then `dataset_cache()`, then `dataset_shuffle()`, batch
#   by the global batch and `dataset_prefetch()`, so that input never waits for the devices (lesson
#   4 measures each step). Cache *before* the shuffle: a cache after it would store the first
#   epoch's order and replay it every epoch.
# - **Several steps per call.** `compile(steps_per_execution = N)` cuts per-step overhead. Under a
#   `MirroredStrategy` with TensorFlow's own all-reduce, as in this lesson, `fit()` fails with it in
#   Keras 3.15 (a graph execution error at the first step; keras-team/keras#19246); `kerasdist
#   doctor` tries it on your machine. kerasdist's own training loop (`engine = "loop"`) runs many
#   steps per call instead.

# %% [markdown]
# ## Summary
#
# - A replica is a full copy of the model on one device; `configure_replicas()` makes the devices
#   (GPUs, a split GPU, or virtual CPUs) before TensorFlow starts using them.
# - Batch the data by the global batch = per-replica batch x replicas; the strategy splits it.
# - Build and compile inside `with(strategy$scope(), ...)`; then `fit()` and `evaluate()` run
#   unchanged.
# - Every weight is a `MirroredVariable` with one copy per replica. The copies start identical (the
#   strategy fills them from the first copy) and stay identical because the optimizer all-reduces
#   the gradients and applies one update to every copy; a write inside a replica step
#   (BatchNormalization's moving statistics, unless `synchronized = TRUE`) changes only the local copy,
#   and reading or saving the model gives replica 0's.
# - Each replica divides its loss by the **global** batch, so the all-reduced sum of the
#   gradients is the mean gradient: one step with N replicas is the step of one device on the
#   global batch, as the step by hand showed.
# - N replicas follow one device's path, to rounding, only with the same start and data order,
#   equal shares of every batch, no batch statistics (BatchNormalization without
#   `synchronized = TRUE`), no random layer (dropout draws the same mask on every replica) and no
#   gradient clipping in the optimizer (Keras 3 clips each replica's share).
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
#   `strategy$reduce()`, runs once for all replicas, in *cross-replica context* ("What a mirrored
#   variable is" shows both; lesson 6's custom training loop uses `strategy$run()` and
#   `strategy$reduce()`, and so does lesson 5's multi-worker script).
# - **PerReplica**: a value with one component per replica, as the distributed dataset yields
#   (this lesson, "Global batch and per-replica batch") and `strategy$run()` returns;
#   `strategy$experimental_local_results()` lists its components.
# - **Mirrored variable**: a variable created in the strategy's scope, with one copy per replica;
#   the optimizer updates every copy identically, while a write inside a replica step changes only
#   the local copy ("What a mirrored variable is").
# - **Global batch**: the examples of one training step across all replicas; the dataset is
#   batched by it, and every replica's loss is divided by it ("Global batch and per-replica
#   batch", "Data parallelism from scratch"; lesson 3 on how its size changes training).
# - **All-reduce**: the collective operation that sums a value over all replicas and gives the
#   result to every one of them; here it sums the gradients ("Data parallelism from scratch"; across
#   machines in lesson 5, and its implementations in lesson 6).

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
#
# 2. Keep the global batch at 64 with 4 replicas. What per-replica batch do you get? Predict, then
#    measure: how far does the training loss per epoch move from the 2-replica run's?
#
#    <details><summary>Hint</summary>
#
#    Save `unlist(history$metrics$loss)` of the 2-replica run first, then set
#    `per_replica_batch_size <- 64L %/% num_replicas`, restart and compare. What does the optimizer
#    see in a step?
#
#    </details>
#    <details><summary>Solution</summary>
#
#    16 per replica. The losses agree to floating-point rounding (differences far below 1e-3): every
#    step still applies the mean gradient of the same 64 examples, in the same order, only computed
#    in four pieces, and the MLP meets the five conditions of the introduction (lesson 3 measures how
#    close the runs stay, step by step).
#
#    </details>
#
# 3. "Why the scope" built a model outside the strategy's scope. Now build it *inside* the scope
#    but `compile()` it *outside*, and fit it as before. What happens?
#
#    <details><summary>Hint</summary>
#
#    `compile()` creates the optimizer. Under which strategy is it created, and under which are
#    the model's weights?
#
#    </details>
#    <details><summary>Solution</summary>
#
#    `fit()` fails with `RuntimeError: Mixing different tf.distribute.Strategy objects`: the
#    optimizer was created outside the scope and belongs to the default strategy, while the
#    model's variables belong to the `MirroredStrategy`. Built and compiled outside (the cell
#    "Why the scope"), nothing fails and one device trains; built and compiled inside, all the
#    replicas train.
#
#    </details>
#
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
#    so they are `MirroredVariable`s too, with one component per replica. The moments have
#    aggregation "none", like the weights, and are updated with them from the all-reduced gradient;
#    the iteration counter and the learning rate have aggregation "only_first_replica"
#    (`v$value$aggregation$name`): a write in a replica step takes the first replica's value for every
#    copy.
#
#    </details>
#
# 5. Write the replicas' step yourself with `strategy$run()`, the single-device way: each replica
#    takes `tf$reduce_mean()` of its per-example losses (the mean over its *local* batch), and
#    all-reduces its gradients with `tf$distribute$get_replica_context()$all_reduce()`. Compare the
#    result with `mean_gradients`.
#
#    <details><summary>Hint</summary>
#
#    Build a model inside the scope with `initial_weights`; the per-replica function must be Python
#    (as in the glossary cell); run it on `batch`, the `PerReplica` values of "Global batch and
#    per-replica batch", inside `tf_function()`.
#
#    </details>
#    <details><summary>Solution</summary>
#
#    ```r
#    with(strategy$scope(), probe <- build_mlp())
#    set_weights(probe, initial_weights)
#    reticulate::py_run_string(paste(
#      "import keras, tensorflow as tf",
#      "def local_mean_step(model):",
#      "    def step(images, labels):",
#      "        with tf.GradientTape() as tape:",
#      "            per_example_loss = keras.losses.sparse_categorical_crossentropy(labels, model(images), from_logits=True)",
#      "            loss = tf.reduce_mean(per_example_loss)  # the mean over the LOCAL batch",
#      "        gradients = tape.gradient(loss, model.trainable_variables)",
#      "        return tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, gradients)",
#      "    return step", sep = "\n"))
#    summed <- tf_function(function(x, y) strategy$run(reticulate::py$local_mean_step(probe), args = list(x, y)))(
#      batch[[1]], batch[[2]])
#    summed <- lapply(summed, function(g) strategy$experimental_local_results(g)[[1]])
#    Map(function(s, m) as.numeric(tf$norm(s) / tf$norm(m)), summed, mean_gradients)  # 2 each
#    ```
#    Every gradient is N = 2 times the mean gradient, as in the predict-then-run cell: each replica's
#    mean over its local batch is already a mean, and the all-reduce adds N of them. Divide the sum
#    of the per-example losses by the global batch (`tf$nn$compute_average_loss()`) instead.
#
#    </details>
#
# 6. In a terminal, run `python -m kerasdist devices --replicas 2` and
#    `python -m kerasdist train --replicas 2 --epochs 3 --global-batch-size 64 --data sample`, and
#    compare the test accuracy with the one above.
#
#    <details><summary>Hint</summary>
#
#    Both train the same model with the same seed, batch and epochs on the sample.
#
#    </details>
#    <details><summary>Solution</summary>
#
#    `devices` lists the two virtual CPUs; `train` prints the per-epoch log and a test accuracy
#    within rounding of `run_training()`'s above (with `--data sample`; the lesson uses
#    `KERASDIST_DATA`, which may be full MNIST).
#
#    </details>
#
#
# Next: [Checkpoints and resume](02_checkpoints_resume_R.ipynb)
