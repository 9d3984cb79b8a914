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
# # Convergence: one device vs N replicas (R, keras3)
#
# This is the R twin of [03_convergence.ipynb](03_convergence.ipynb): the same workflow and the same
# sections, written with the R packages keras3, tfdatasets and tensorflow. The notebook runs on a
# Python kernel; the R code lives in `%%R` cells (rpy2), and R draws the figures too (`%%R -w -h`
# sets a figure's size in inches). Where the Python lesson calls kerasdist's comparison, this one
# builds the experiment in keras3, so you can see every piece it needs.
#
# **What you'll learn**
#
# - that synchronous data parallelism at a fixed **global** batch trains the same model as one
#   device: the loss curves coincide, and we measure how closely;
# - why an uneven last batch would make them part, and why the last partial batch is dropped;
# - what happens at a fixed **per-replica** batch, where the global batch grows with the replicas;
# - the linear learning-rate scaling rule with warm-up (Goyal et al., 2017), built from a keras3
#   learning-rate schedule.
#
# **What you need**: lesson 1, R with keras3, tfdatasets and tensorflow
# (`install.packages(c("keras3", "tfdatasets"))`), rpy2 in the kernel's Python environment, and
# about a minute on a 2-core CPU. The data is full MNIST when Keras has it cached or can download
# it, otherwise a 5,000-digit sample of real MNIST digits (offline). The stored outputs come from a
# run on that sample; `bash scripts/run_notebooks.sh --r-twins` runs the notebook again.

# %% [markdown]
# ## Introduction
#
# Lesson 1 claimed that N synchronous replicas follow the same path as one device given the same
# global batch. Here we test the claim: train the same model twice, on one device and on two
# replicas, from the same initial weights and with the same data order, and compare the loss after
# every step.
#
# There are two ways to use more replicas, and they answer different questions:
#
# - **fixed global batch**: each replica gets `global / N` samples. Same optimization, more devices
#   share each step: this is how you check correctness, and how you speed up a step that is too big
#   for one device.
# - **fixed per-replica batch**: each replica keeps its batch, so the global batch is N times larger
#   and an epoch has N times fewer steps. This is how data parallelism is used for speed, and it
#   changes the optimization: the learning rate has to follow.

# %% [markdown]
# ## Setup

# %%
# Load the %%R magic, and start TensorFlow quietly through kerasdist.
# %load_ext rpy2.ipython
import kerasdist

# %% language="R"
# # Attach keras3, tfdatasets and tensorflow; then settings.
# library(keras3)
# library(tfdatasets, exclude = "shape")
# library(tensorflow, exclude = c("shape", "set_random_seed"))
# epochs <- 3L
# batch_size <- 64L

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # Make two replicas, load the data, and make TensorFlow's ops deterministic.
# kerasdist <- reticulate::import("kerasdist")
# devices <- kerasdist$configure_replicas(2L)
# strategy <- tf$distribute$MirroredStrategy(devices = as.list(devices))
# data <- kerasdist$load_mnist(Sys.getenv("KERASDIST_DATA", "auto"))
# x_train <- data$x_train
# y_train <- data$y_train
# val_dataset <- list(np_array(data$x_val, dtype = "float32"), np_array(data$y_val, dtype = "int32")) |>
#   tensor_slices_dataset() |>
#   dataset_batch(batch_size)
# tf$config$experimental$enable_op_determinism()

# %% language="R"
# # The pieces of a fair comparison: one model builder, one data order, one training function.
# build_model <- function(learning_rate = 1e-3) {
#   inputs <- keras_input(shape = 784, name = "digits")
#   logits <- inputs |>
#     layer_dense(units = 256, activation = "relu", name = "dense_1") |>
#     layer_dense(units = 256, activation = "relu", name = "dense_2") |>
#     layer_dense(units = 10, name = "logits")
#   model <- keras_model(inputs, logits, name = "mnist_mlp")
#   model |> compile(
#     optimizer = optimizer_adam(learning_rate = learning_rate),
#     loss = loss_sparse_categorical_crossentropy(from_logits = TRUE),
#     metrics = list(metric_sparse_categorical_accuracy())
#   )
#   model
# }
#
# # Each epoch is shuffled with its own seed and the epochs are chained, so epoch k has the same
# # order in every run, however many times the dataset is iterated (a reshuffling dataset would not).
# train_batches <- function(global_batch_size, seed = 0L) {
#   examples <- list(np_array(x_train, dtype = "float32"), np_array(y_train, dtype = "int32")) |>
#     tensor_slices_dataset()
#   per_epoch <- lapply(seq_len(epochs), function(epoch)
#     examples |>
#       dataset_shuffle(buffer_size = nrow(x_train), seed = seed * 1000L + epoch,
#                       reshuffle_each_iteration = FALSE) |>
#       dataset_batch(global_batch_size, drop_remainder = TRUE))
#   Reduce(dataset_concatenate, per_epoch) |> dataset_prefetch(tf$data$AUTOTUNE)
# }
#
# # Train from seed 0 under a strategy; keep the loss after every step (the running epoch mean).
# train_run <- function(name, strategy, global_batch_size, learning_rate = 1e-3) {
#   set_random_seed(0)
#   step_loss <- numeric()
#   record_loss <- callback_lambda(on_train_batch_end = function(batch, logs) {
#     step_loss <<- c(step_loss, logs$loss)
#     invisible(NULL)
#   })
#   with(strategy$scope(), model <- build_model(learning_rate))
#   steps_per_epoch <- nrow(x_train) %/% global_batch_size
#   started <- Sys.time()
#   history <- model |> fit(train_batches(global_batch_size), epochs = epochs,
#                           steps_per_epoch = steps_per_epoch, validation_data = val_dataset,
#                           shuffle = FALSE, verbose = 0, callbacks = list(record_loss))
#   seconds <- as.numeric(difftime(Sys.time(), started, units = "secs"))
#   list(
#     steps = data.frame(run = name, epoch = seq_along(step_loss) / steps_per_epoch, loss = step_loss),
#     epochs = data.frame(run = name, epoch = seq_len(epochs), loss = unlist(history$metrics$loss),
#                         val_accuracy = unlist(history$metrics$val_sparse_categorical_accuracy)),
#     samples_per_s = epochs * steps_per_epoch * global_batch_size / seconds,
#     global_batch_size = global_batch_size
#   )
# }
#
# # Draw runs side by side: loss per step, validation accuracy per epoch, and throughput.
# plot_runs <- function(runs, title) {
#   colors <- c("black", "darkorange", "steelblue")[seq_along(runs)]
#   styles <- c(1, 2, 2)[seq_along(runs)]
#   labels <- vapply(runs, function(run) run$epochs$run[1], "")
#   par(mfrow = c(1, 3), mar = c(4, 4.5, 2.5, 1), las = 1, cex = 0.9, cex.main = 1)
#   steps <- lapply(runs, function(run) run$steps)
#   plot(NULL, xlim = range(unlist(lapply(steps, `[[`, "epoch"))), ylim = range(unlist(lapply(steps, `[[`, "loss"))),
#        xlab = "epoch", ylab = "loss (running epoch mean)", main = title)
#   for (i in seq_along(runs)) lines(steps[[i]]$epoch, steps[[i]]$loss, col = colors[i], lty = styles[i], lwd = 1.5)
#   legend("topright", labels, col = colors, lty = styles, bty = "n", cex = 0.8)
#   accuracy <- sapply(runs, function(run) run$epochs$val_accuracy)
#   matplot(seq_len(epochs), accuracy, type = "o", pch = 19, col = colors, lty = styles, xaxt = "n",
#           xlab = "epoch", ylab = "accuracy", main = "Validation accuracy")
#   axis(1, at = seq_len(epochs))
#   bars <- barplot(rev(vapply(runs, function(run) run$samples_per_s, 0)), horiz = TRUE, col = "gray85",
#                   xlab = "samples/s", main = "Throughput (this machine)")
#   text(0, bars, rev(labels), pos = 4, cex = 0.9)  # each run's name, inside its bar
# }

# %% [markdown]
# ## Fixed global batch: the curves coincide
#
# The same seed gives the same initial weights, `train_batches()` gives the same data order, and the
# global batch is 64 in both runs: one on the default strategy (one device), one on the
# `MirroredStrategy` with two replicas of 32 samples each.

# %% language="R"
# # Train the same model on 1 device and on 2 replicas, global batch 64 in both.
# one_device <- train_run("1 device, batch 64", tf$distribute$get_strategy(), batch_size)
# two_replicas <- train_run("2 replicas, batch 64", strategy, batch_size)

# %% magic_args="-w 13 -h 3.8 --units in -r 90" language="R"
# # Both loss curves per step, validation accuracy per epoch, and throughput.
# plot_runs(list(one_device, two_replicas), "Training loss, fixed global batch")

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # The measured gap: float32 round-off, far below anything that changes training.
# step_gap <- max(abs(two_replicas$steps$loss - one_device$steps$loss))
# epoch_gap <- max(abs(two_replicas$epochs$loss - one_device$epochs$loss))
# cat("max |loss difference| below 1e-3, per step and per epoch:", step_gap < 1e-3, epoch_gap < 1e-3, "\n")

# %% language="R"
# # The values themselves.
# cat(sprintf("max |loss difference|: %.1e over all steps, %.1e over epochs\n", step_gap, epoch_gap))

# %% [markdown]
# The dashed 2-replica curve lies on the 1-device curve; the largest difference over all steps is of
# the size of float32 rounding (about 2e-7 in the Python twin's run). It is not exactly zero because
# two replicas add up the gradient in a different order (each sums over its 32 samples, then the
# all-reduce sums the two), and floating-point addition is not associative. Such rounding
# differences can also grow during training (a unit whose input sits near zero may switch its ReLU
# in one run and not in the other), so on other hardware or with other seeds a gap up to ~1e-4 is
# still "the same curve"; a real difference (another data order, another batch) shows up at the
# scale of the loss's own step-to-step change, around 1e-2.
#
# The throughput panel is the honest part: on this machine the two "replicas" are virtual devices
# that share the same CPU cores and also pay for the all-reduce, so they are slower than one device.
# Parallel speed needs parallel hardware (lesson 4 and 5 measure more).

# %% [markdown]
# ## Why an uneven last batch would make them part
#
# The sample has 3,333 training digits: 52 batches of 64 and 5 left over. `train_batches()` drops
# that partial batch (`drop_remainder = TRUE`), and that is what keeps the curves together. Had it
# been kept, the strategy would split its 5 samples 3 + 2. Each replica averages the loss over its
# own share, and the all-reduce then averages the replicas, so every sample on the smaller replica
# weighs 1/4 instead of 1/5:

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # Five per-sample losses: one device averages all five; two replicas average the two averages.
# losses <- c(0.2, 0.4, 0.6, 1.0, 2.0)
# cat(sprintf("one device, mean of 5:             %.3f\n", mean(losses)))
# cat(sprintf("two replicas, mean of (3) and (2): %.3f\n", (mean(losses[1:3]) + mean(losses[4:5])) / 2))

# %% language="R"
# # The same effect on the real gradient: as many training digits as are left over, at the initial weights.
# set_random_seed(0)
# mlp <- build_model()
# loss_function <- loss_sparse_categorical_crossentropy(from_logits = TRUE)
# leftover <- nrow(x_train) %% batch_size
# rows <- seq(nrow(x_train) - leftover + 1L, nrow(x_train))
# gradient <- function(rows) {
#   x <- np_array(x_train[rows, , drop = FALSE], dtype = "float32")
#   y <- np_array(y_train[rows], dtype = "int32")
#   with(tf$GradientTape() %as% tape, {
#     loss <- loss_function(y, mlp(x))
#   })
#   unlist(lapply(tape$gradient(loss, mlp$trainable_weights), function(g) as.numeric(g$numpy())))
# }
# split <- (leftover + 1L) %/% 2L
# one <- gradient(rows)
# two <- (gradient(rows[seq_len(split)]) + gradient(rows[-seq_len(split)])) / 2
# cat(sprintf("%d samples split %d + %d: the 2-replica gradient differs from the 1-device one by %.0f%%\n",
#             leftover, split, leftover - split, 100 * sqrt(sum((two - one)^2)) / sqrt(sum(one^2))))

# %% [markdown]
# One such step per epoch is enough to send the two runs on different paths, and the gap then grows
# step by step. Dropping the remainder costs 5 of 3,333 samples per epoch, and with a different
# shuffle each epoch, no digit is left out for good. With data that divides evenly (a last batch of
# 6 split 3 + 3), the curves would coincide again.

# %% [markdown]
# ## Fixed per-replica batch: the global batch grows
#
# Now keep 64 samples **per replica**: 2 replicas make a global batch of 128, so an epoch has 26
# steps instead of 52. With the same learning rate, each epoch makes half as many updates of about
# the same size (the gradient is an average, so a bigger batch makes it less noisy, not larger), and
# training falls behind per epoch.

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # Train 2 replicas x 64 samples with the unchanged learning rate.
# same_rate <- train_run("2 replicas, batch 128, same rate", strategy, 2L * batch_size)
# for (run in list(one_device, same_rate))
#   cat(sprintf("global batch %d: %d steps per epoch\n", run$global_batch_size,
#               nrow(x_train) %/% run$global_batch_size))

# %% [markdown]
# ## The linear scaling rule with warm-up
#
# Goyal et al. (2017, "Accurate, Large Minibatch SGD: Training ImageNet in 1 Hour") trained
# ResNet-50 with global batches up to 8,192 and matched the small-batch accuracy with two rules:
#
# - **linear scaling**: when the global batch is multiplied by k, multiply the learning rate by k;
# - **gradual warm-up**: start from the small rate and ramp it up linearly to the scaled one over the
#   first epochs (5 of 90 in the paper), because a large rate applied to freshly initialized weights
#   can diverge.
#
# keras3 has no schedule called "linear warm-up", but a piecewise-constant schedule with one boundary
# per step is one: the rate climbs from the base rate to k times it, one step at a time, then stays.
# (A schedule written in R with `LearningRateSchedule()` would work on one device, but under
# `MirroredStrategy` the schedule is evaluated while the replicas' training step is traced, on
# TensorFlow's replica threads; keeping R code out of the traced step is the safe choice.) Here
# k = 2: the rate goes from 1e-3 to 2e-3 over the first quarter epoch.

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # Linear warm-up from the base rate to k x base: one value per step (steps are counted from 0).
# k <- 2L
# base_rate <- 1e-3
# warmup_steps <- as.integer(0.25 * (nrow(x_train) %/% (k * batch_size)))
# schedule <- learning_rate_schedule_piecewise_constant_decay(
#   boundaries = as.list(seq_len(warmup_steps - 1L) - 1L),
#   values = as.list(seq(base_rate, k * base_rate, length.out = warmup_steps))
# )
# cat(sprintf("peak learning rate %g, reached at step %d\n", k * base_rate, warmup_steps - 1L))

# %% language="R"
# # Train 2 replicas x 64 samples with the learning rate doubled, after the warm-up.
# scaled <- train_run("2 replicas, batch 128, scaled + warm-up", strategy, k * batch_size,
#                     learning_rate = schedule)
# runs <- list(one_device, same_rate, scaled)

# %% magic_args="-w 6.5 -h 3.2 --units in -r 100" language="R"
# # The three learning-rate schedules, step by step, drawn against epochs (the scaled one asked of the schedule).
# par(mar = c(4, 5, 2, 1), las = 1)
# plot(NULL, xlim = c(0, epochs), ylim = c(0, 2.3e-3), xlab = "epoch", ylab = "", main = "Learning rate")
# lines(c(0, epochs), rep(base_rate, 2), col = adjustcolor("black", alpha.f = 0.4), lwd = 5)
# lines(c(0, epochs), rep(base_rate, 2), col = "darkorange", lty = 2, lwd = 1.5)
# scaled_steps <- seq(0, epochs * nrow(x_train) %/% (k * batch_size) - 1)
# scaled_rates <- vapply(scaled_steps, function(step) as.numeric(schedule(as.integer(step))$numpy()), 0)
# lines(scaled_steps / (nrow(x_train) %/% (k * batch_size)), scaled_rates, type = "s", col = "steelblue", lwd = 1.5)
# legend("bottomright", vapply(runs, function(run) run$epochs$run[1], ""), bty = "n", cex = 0.75,
#        col = c(adjustcolor("black", alpha.f = 0.4), "darkorange", "steelblue"), lty = c(1, 2, 1), lwd = c(5, 1.5, 1.5))

# %% magic_args="-w 13 -h 3.8 --units in -r 90" language="R"
# # Compare the three runs: training loss against epochs, validation accuracy, and throughput.
# plot_runs(runs, "Training loss, fixed per-replica batch")

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # Training loss per epoch: the unscaled run lags; the scaled run is back with the 1-device run.
# for (run in runs)
#   cat(sprintf("%-40s loss per epoch %s\n", run$epochs$run[1],
#               paste(round(run$epochs$loss, 2), collapse = ", ")))

# %% [markdown]
# With the same learning rate, the 128-sample run ends its third epoch well above the 1-device loss:
# half the steps, the same step size. Doubling the rate puts it back on the 1-device curve after the
# first epoch, where the warm-up still holds it back a little. With k = 2 and Adam, the rate could
# even be doubled without warm-up (try it); warm-up starts to matter when k is large, which is
# exactly the regime of the paper.
#
# Two cautions. The linear rule was derived and tested for SGD with momentum; Adam divides the step
# by a running estimate of the gradient's size, and for adaptive optimizers a square-root rule
# (rate x sqrt(k)) is often the better guess (Malladi et al., 2022). And every rule breaks down at
# some batch size: beyond it, more replicas buy speed per epoch but need more epochs to reach the
# same accuracy.

# %% [markdown]
# ## Performance tips
#
# - **Check correctness at a fixed global batch first.** If 1 device and N replicas do not give the
#   same curve (up to ~1e-6 here), something in the input pipeline or the loss is wrong: a different
#   data order, an uneven last batch, a loss that is not averaged by the global batch.
# - **Then scale the per-replica batch for speed**, with the learning rate scaled and warmed up, and
#   compare accuracy *per epoch* and *per second*: more samples per step only pay if convergence per
#   epoch holds up.
# - **Read throughput from real devices.** Virtual CPUs share cores: their samples/s shows the cost
#   of the all-reduce, not the gain of parallelism.

# %% [markdown]
# ## Summary
#
# - At a fixed global batch, 1 device and 2 replicas give the same loss curve: the largest
#   difference over all steps is float32 round-off (about 2e-7 in the Python twin's run).
# - That needs the same initial weights, the same data order and no uneven last batch: a batch split
#   unevenly weighs the samples of the smaller share more.
# - At a fixed per-replica batch the global batch grows with the replicas; with an unchanged
#   learning rate, training falls behind per epoch.
# - The linear scaling rule with warm-up (Goyal et al., 2017) brings it back: rate x k, ramped up
#   over the first steps; for Adam, treat it as a starting point.

# %% [markdown]
# ## Exercises
#
# 1. Train both fixed-global runs with a data order that reshuffles (`dataset_shuffle()` with its
#    default `reshuffle_each_iteration`) on one dataset object reused by both runs. Do the curves
#    still coincide, and why not?
# 2. Train the scaled run with `learning_rate = 2e-3` and no warm-up. Is warm-up needed at k = 2?
#    Then write the same warm-up as an R `LearningRateSchedule()` and train it on one device.
# 3. Simulate a large k on one device: global batch 512 with `learning_rate = 8e-3`, with and without
#    a one-epoch warm-up. When does warm-up start to pay?
# 4. Replace linear scaling by square-root scaling (peak `1e-3 * sqrt(2)`). Which rule works better
#    for Adam here?
# 5. Run kerasdist's own experiment from R, `kerasdist$run_comparison(c(1L, 2L), epochs = 3L,
#    data = data)`, and compare its `max_abs_loss_difference` with your measured gap.
