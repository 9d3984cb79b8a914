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
# - how to read throughput on virtual CPU replicas, and what a cost model says about real GPUs;
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
# # rpy2 hooks a warning onto reticulate's loading about a crash that reticulate fixed long before
# # the versions keras3 needs (rstudio/reticulate#1188): drop the hook, keep the output clean.
# setHook(packageEvent("reticulate", "onLoad"), NULL, "replace")
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
# # Train from seed 0 under a strategy; keep each step's own batch loss and each epoch's time.
# # Keras reports the running mean over the epoch; with equal batches the k-th batch's own loss is
# # k * mean_k - (k - 1) * mean_(k-1) (`batch` counts from 0).
# train_run <- function(name, strategy, global_batch_size, learning_rate = 1e-3) {
#   set_random_seed(0)
#   step_loss <- numeric()
#   previous_mean <- 0
#   epoch_seconds <- numeric()
#   record_loss <- callback_lambda(
#     on_train_batch_end = function(batch, logs) {
#       step_loss <<- c(step_loss, (batch + 1) * logs$loss - batch * previous_mean)
#       previous_mean <<- logs$loss
#       invisible(NULL)
#     },
#     on_epoch_begin = function(epoch, logs) {
#       epoch_started <<- Sys.time()
#       invisible(NULL)
#     },
#     on_epoch_end = function(epoch, logs) {
#       epoch_seconds <<- c(epoch_seconds, as.numeric(difftime(Sys.time(), epoch_started, units = "secs")))
#       invisible(NULL)
#     }
#   )
#   epoch_started <- Sys.time()
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
#     # Steady state: the epochs after the first, which also pays for tracing the step.
#     steady_samples_per_s = (epochs - 1) * steps_per_epoch * global_batch_size / sum(epoch_seconds[-1]),
#     global_batch_size = global_batch_size
#   )
# }
#
# # Draw runs side by side: each step's batch loss, validation accuracy per epoch, and steady-state throughput.
# plot_runs <- function(runs, title) {
#   colors <- c("black", "darkorange", "steelblue")[seq_along(runs)]
#   styles <- c(1, 2, 2)[seq_along(runs)]
#   labels <- vapply(runs, function(run) run$epochs$run[1], "")
#   par(mfrow = c(1, 3), mar = c(4, 4.5, 2.5, 1), las = 1, cex = 0.9, cex.main = 1)
#   steps <- lapply(runs, function(run) run$steps)
#   plot(NULL, xlim = range(unlist(lapply(steps, `[[`, "epoch"))), ylim = range(unlist(lapply(steps, `[[`, "loss"))),
#        xlab = "epoch", ylab = "loss of each step's batch", main = title)
#   for (i in seq_along(runs)) lines(steps[[i]]$epoch, steps[[i]]$loss, col = colors[i], lty = styles[i], lwd = 1)
#   legend("topright", labels, col = colors, lty = styles, bty = "n", cex = 0.8)
#   accuracy <- sapply(runs, function(run) run$epochs$val_accuracy)
#   matplot(seq_len(epochs), accuracy, type = "o", pch = 19, col = colors, lty = styles, xaxt = "n",
#           xlab = "epoch", ylab = "accuracy", main = "Validation accuracy")
#   axis(1, at = seq_len(epochs))
#   bars <- barplot(rev(vapply(runs, function(run) run$steady_samples_per_s, 0)), horiz = TRUE, col = "gray85",
#                   xlab = "samples/s", main = "Steady-state throughput (after epoch 1)")
#   text(0, bars, rev(labels), pos = 4, cex = 0.9)  # each run's name, inside its bar
#   mtext("virtual CPU replicas share the same cores: more replicas cannot be faster here",
#         side = 1, line = 2.8, adj = 1, cex = 0.6, col = "firebrick")
# }

# %% [markdown]
# ## Fixed global batch: the curves coincide
#
# The same seed gives the same initial weights, `train_batches()` gives the same data order, and the
# global batch is 64 in both runs: one on the default strategy (one device), one on the
# `MirroredStrategy` with two replicas of 32 samples each.
#
# The loss plotted is each step's **own batch loss**. What Keras reports after a batch is the
# running mean over the epoch so far: it is smooth within an epoch and drops at every epoch
# boundary, when the mean restarts, which looks like learning but is only arithmetic. With equal
# batches the k-th batch's own loss is `k * mean_k - (k - 1) * mean_(k-1)`; `train_run()` keeps it.

# %% language="R"
# # Train the same model on 1 device and on 2 replicas, global batch 64 in both.
# one_device <- train_run("1 device, batch 64", tf$distribute$get_strategy(), batch_size)
# two_replicas <- train_run("2 replicas, batch 64", strategy, batch_size)

# %% magic_args="-w 13 -h 3.8 --units in -r 90" language="R"
# # Both loss curves per step, validation accuracy per epoch, and throughput.
# plot_runs(list(one_device, two_replicas), "Training loss, fixed global batch")

# %% [markdown]
# **Predict, then run.** At a fixed global batch, do 1 device and 2 replicas compute the same loss
# at *every* step, up to float rounding, or only the same loss per epoch? Decide, then run.

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # Each step's batch loss, 1 device vs 2 replicas: the same to far below the loss's step-to-step change.
# step_difference <- abs(two_replicas$steps$loss - one_device$steps$loss)
# step_change <- abs(diff(one_device$steps$loss))
# stopifnot(max(step_difference) < 1e-3, 1e-3 < median(step_change))
# cat("the same loss at every step:", max(step_difference) < 1e-3, "\n")

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # The measured gap: float32 round-off, far below anything that changes training.
# step_gap <- max(abs(two_replicas$steps$loss - one_device$steps$loss))
# epoch_gap <- max(abs(two_replicas$epochs$loss - one_device$epochs$loss))
# cat("max |loss difference| below 1e-3, per step and per epoch:", step_gap < 1e-3, epoch_gap < 1e-3, "\n")

# %% language="R"
# # The values themselves.
# cat(sprintf("max |loss difference|: %.1e over all steps, %.1e over epochs\n", step_gap, epoch_gap))
# cat(sprintf("median change of the batch loss from one step to the next: %.1e\n", median(step_change)))

# %% [markdown]
# The dashed 2-replica curve lies on the 1-device curve; the largest difference over all steps is of
# the size of float32 rounding, far smaller than the loss's own change from one step to the next.
# It is not exactly zero because two replicas add up the gradient in a different order (each sums
# over its 32 samples, then the all-reduce sums the two), and floating-point addition is not
# associative. Such rounding differences can also grow during training (a unit whose input sits
# near zero may switch its ReLU in one run and not in the other), so on other hardware or with
# other seeds a gap up to ~1e-4 is still "the same curve"; a real difference (another data order,
# another batch) shows up at the scale of the step-to-step change.

# %% [markdown]
# ## Throughput: virtual replicas and real GPUs
#
# The throughput panel leaves out the first epoch, which also pays for tracing and compiling the
# training step, and shows the steady state. Even so, on this machine the two "replicas" are virtual
# devices that share the same CPU cores: they cannot compute in parallel, and they add the
# all-reduce, so they are slower than one device.

# %% language="R"
# # Steady-state samples/s (epochs after the first) of both runs, and the whole run's rate with tracing.
# for (run in list(one_device, two_replicas))
#   cat(sprintf("%s: %.0f samples/s in the steady state, %.0f samples/s over the whole run (tracing included)\n",
#               run$epochs$run[1], run$steady_samples_per_s, run$samples_per_s))
# cat(sprintf("2 replicas / 1 device, steady state: %.2fx on virtual CPU devices\n",
#             two_replicas$steady_samples_per_s / one_device$steady_samples_per_s))

# %% [markdown]
# On real GPUs each device has its own compute, and the picture changes. No GPU measurement exists
# for this course yet, so the figure below is a **cost model, not a measurement**. At a fixed global
# batch, one step on N devices takes
#
# `step time = compute / N + all-reduce(N) + input time`
#
# where a ring all-reduce of G bytes of gradients sends `2 (N - 1) / N x G` bytes through each link
# (at bandwidth B) and waits `2 (N - 1)` hop latencies. The parameters are assumptions set in the
# code cell below and written on the chart: the compute time of one global batch on one GPU, the
# link bandwidth (PCIe-class), the hop latency and an input time not hidden by prefetching; the
# gradient size is that of this lesson's MLP.

# %% magic_args="-w 11 -h 4 --units in -r 90" language="R"
# # The cost model's parameters (assumptions, not measurements) and its chart.
# model_global_batch <- 4096       # samples per step, fixed as N grows
# model_compute_s <- 1e-3          # forward + backward of one global batch on one GPU
# model_bandwidth <- 10e9          # bytes/s of one PCIe-class link
# model_latency_s <- 10e-6         # per hop of the ring
# model_input_s <- 0.1e-3          # input time per step not overlapped with compute
# gradient_bytes <- 4 * build_model()$count_params()  # float32 gradients of the MLP
# devices_n <- c(1, 2, 4, 8)
# step_parts <- sapply(devices_n, function(n) c(
#   compute = model_compute_s / n,
#   all_reduce = if (n > 1) 2 * (n - 1) / n * gradient_bytes / model_bandwidth + 2 * (n - 1) * model_latency_s else 0,
#   input = model_input_s
# ))
# par(mfrow = c(1, 2), mar = c(5, 4.5, 2.5, 1), las = 1, cex = 0.9, cex.main = 0.95)
# barplot(1e3 * step_parts, names.arg = devices_n, col = c("steelblue", "darkorange", "gray70"),
#         xlab = "devices N", ylab = "ms per step", main = "MODEL, not a measurement: time per step",
#         legend.text = c("compute / N", "all-reduce (ring)", "input"), args.legend = list(bty = "n", cex = 0.8))
# modelled_speed <- model_global_batch / colSums(step_parts)
# plot(devices_n, modelled_speed, type = "o", pch = 19, ylim = c(0, max(modelled_speed[1] * devices_n)),
#      xlab = "devices N", ylab = "samples/s", main = "MODEL: samples/s at a fixed global batch", xaxt = "n")
# axis(1, at = devices_n)
# lines(devices_n, modelled_speed[1] * devices_n, lty = 3, col = "gray40")
# legend("topleft", c("model", "perfect scaling"), lty = c(1, 3), col = c("black", "gray40"), bty = "n", cex = 0.8)
# mtext(sprintf("step time = compute/N + all-reduce(N) + input; global batch %d, compute %g ms on 1 device",
#               model_global_batch, 1e3 * model_compute_s), side = 1, line = 3, adj = 1, cex = 0.6)
# mtext(sprintf("gradients %.2f MB, link %g GB/s, hop latency %g us, input %g ms per step",
#               gradient_bytes / 1e6, model_bandwidth / 1e9, 1e6 * model_latency_s, 1e3 * model_input_s),
#       side = 1, line = 3.8, adj = 1, cex = 0.6)
# cat(sprintf("model: gradients of %.2f MB; 8 devices would be %.1fx as fast as 1 (perfect scaling: 8x)\n",
#             gradient_bytes / 1e6, modelled_speed[4] / modelled_speed[1]))

# %% [markdown]
# The model says two things. Compute does shrink as 1/N, which virtual CPU devices cannot show. But
# the all-reduce grows with N while the compute per device shrinks, so a small model like this MLP
# soon spends more time exchanging gradients than computing them: its speed-up stays far below N.
# A bigger model (more compute per byte of gradient), a bigger global batch, or faster links
# (NVLink instead of PCIe) move the balance towards N. Measure on your own GPUs before you trust
# any of these parameters.

# %% [markdown]
# ## Why an uneven last batch would make them part
#
# The training set rarely divides evenly by the global batch; `train_batches()` drops the last,
# partial batch (`drop_remainder = TRUE`), and that is what keeps the curves together.

# %% language="R"
# # How much this data set leaves over at global batch 64.
# leftover <- nrow(x_train) %% batch_size
# cat(sprintf("%d training digits: %d batches of %d and %d left over, dropped each epoch\n",
#             nrow(x_train), nrow(x_train) %/% batch_size, batch_size, leftover))

# %% [markdown]
# To see why, build an uneven batch of our own: 5 samples on 2 replicas. The strategy splits them
# 3 + 2. Each replica averages the loss over its own share, and the all-reduce then averages the
# replicas, so every sample on the smaller replica weighs 1/4 instead of 1/5:

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # Five per-sample losses: one device averages all five; two replicas average the two averages.
# losses <- c(0.2, 0.4, 0.6, 1.0, 2.0)
# cat(sprintf("one device, mean of 5:             %.3f\n", mean(losses)))
# cat(sprintf("two replicas, mean of (3) and (2): %.3f\n", (mean(losses[1:3]) + mean(losses[4:5])) / 2))

# %% language="R"
# # The same effect on the real gradient: 5 training digits split 3 + 2, at the initial weights.
# uneven_batch <- 5L
# set_random_seed(0)
# mlp <- build_model()
# loss_function <- loss_sparse_categorical_crossentropy(from_logits = TRUE)
# rows <- seq_len(uneven_batch)
# gradient <- function(rows) {
#   x <- np_array(x_train[rows, , drop = FALSE], dtype = "float32")
#   y <- np_array(y_train[rows], dtype = "int32")
#   with(tf$GradientTape() %as% tape, {
#     loss <- loss_function(y, mlp(x))
#   })
#   unlist(lapply(tape$gradient(loss, mlp$trainable_weights), function(g) as.numeric(g$numpy())))
# }
# split <- (uneven_batch + 1L) %/% 2L
# one <- gradient(rows)
# two <- (gradient(rows[seq_len(split)]) + gradient(rows[-seq_len(split)])) / 2
# cat(sprintf("%d samples split %d + %d: the 2-replica gradient differs from the 1-device one by %.0f%%\n",
#             uneven_batch, split, uneven_batch - split, 100 * sqrt(sum((two - one)^2)) / sqrt(sum(one^2))))

# %% language="R"
# # What dropping the remainder costs on this data.
# cat(sprintf("Dropping the remainder costs %d of %d training digits per epoch (%.1f%%), and with a new\n",
#             leftover, nrow(x_train), 100 * leftover / nrow(x_train)),
#     "shuffle each epoch no digit is left out for good.\n")

# %% [markdown]
# One such step per epoch is enough to send the two runs on different paths, and the gap then grows
# step by step. With data that divides evenly (a last batch of 6 split 3 + 3), the curves would
# coincide again.

# %% [markdown]
# ## Fixed per-replica batch: the global batch grows
#
# Now keep 64 samples **per replica**: 2 replicas make a global batch of 128, so an epoch has half
# as many steps. With the same learning rate, each epoch makes half as many updates of about the
# same size (the gradient is an average, so a bigger batch makes it less noisy, not larger), and
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
# - **gradual warm-up**: start from the base rate η and ramp it up linearly, by the same amount
#   each step, to kη over the first epochs (5 of 90 in the paper), then hold kη, because a large
#   rate applied to freshly initialized weights can diverge.
#
# keras3 has no schedule called "linear warm-up", but a piecewise-constant schedule with one boundary
# per step is one: the rate climbs from the base rate η at step 0 to kη at the end of the warm-up,
# one step at a time, then stays (the same schedule as kerasdist's `LinearWarmup`).
# (A schedule written in R with `LearningRateSchedule()` would work on one device, but under
# `MirroredStrategy` the schedule is evaluated while the replicas' training step is traced, on
# TensorFlow's replica threads; keeping R code out of the traced step is the safe choice.) Here
# k = 2: the rate goes from 1e-3 to 2e-3 over the first quarter epoch.

# %% [markdown]
# **Predict, then run.** What is the scaled run's learning rate at its very first step: 0, the base
# rate 1e-3, or 2e-3? Decide, then run.

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # Linear warm-up from η at step 0 to k x η at step warmup_steps, then held (steps are counted from 0).
# k <- 2L
# base_rate <- 1e-3
# warmup_steps <- as.integer(0.25 * (nrow(x_train) %/% (k * batch_size)))
# schedule <- learning_rate_schedule_piecewise_constant_decay(
#   boundaries = as.list(seq_len(warmup_steps) - 1L),
#   values = as.list(seq(base_rate, k * base_rate, length.out = warmup_steps + 1L))
# )
# rate_at <- function(step) as.numeric(schedule(as.integer(step))$numpy())
# stopifnot(isTRUE(all.equal(rate_at(0), base_rate, tolerance = 1e-6)),
#           isTRUE(all.equal(rate_at(warmup_steps), k * base_rate, tolerance = 1e-6)),
#           isTRUE(all.equal(rate_at(10 * warmup_steps), k * base_rate, tolerance = 1e-6)))
# cat(sprintf("step 0: %g (the base rate); end of the warm-up and after: %g (k x base)\n",
#             rate_at(0), rate_at(warmup_steps)))
# cat(sprintf("peak learning rate %g, reached after %d warm-up steps\n", k * base_rate, warmup_steps))

# %% language="R"
# # Train 2 replicas x 64 samples with the learning rate doubled, after the warm-up.
# scaled <- train_run("2 replicas, batch 128, scaled + warm-up", strategy, k * batch_size,
#                     learning_rate = schedule)
# runs <- list(one_device, same_rate, scaled)

# %% magic_args="-w 6.5 -h 3.2 --units in -r 100" language="R"
# # The three learning-rate schedules, step by step, drawn against epochs (the scaled one asked of the schedule).
# par(mar = c(4, 5, 2, 1), las = 1)
# plot(NULL, xlim = c(0, epochs), ylim = c(0, 2.3e-3), xlab = "epoch", ylab = "",
#      main = "Learning rate (warm-up from η to kη, Goyal et al.)")
# lines(c(0, epochs), rep(base_rate, 2), col = adjustcolor("black", alpha.f = 0.4), lwd = 5)
# lines(c(0, epochs), rep(base_rate, 2), col = "darkorange", lty = 2, lwd = 1.5)
# scaled_steps <- seq(0, epochs * nrow(x_train) %/% (k * batch_size) - 1)
# scaled_rates <- vapply(scaled_steps, rate_at, 0)
# lines(scaled_steps / (nrow(x_train) %/% (k * batch_size)), scaled_rates, type = "s", col = "steelblue", lwd = 1.5)
# legend("bottomright", vapply(runs, function(run) run$epochs$run[1], ""), bty = "n", cex = 0.75,
#        col = c(adjustcolor("black", alpha.f = 0.4), "darkorange", "steelblue"), lty = c(1, 2, 1), lwd = c(5, 1.5, 1.5))

# %% magic_args="-w 13 -h 3.8 --units in -r 90" language="R"
# # Compare the three runs: each step's batch loss against epochs, validation accuracy, and throughput.
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
#   same per-step loss (up to float rounding), something in the input pipeline or the loss is
#   wrong: a different data order, an uneven last batch, a loss that is not averaged by the global
#   batch.
# - **Plot each step's batch loss, not Keras' running epoch mean**: the mean drops at every epoch
#   boundary whether or not the model learns.
# - **Then scale the per-replica batch for speed**, with the learning rate scaled and warmed up, and
#   compare accuracy *per epoch* and *per second*: more samples per step only pay if convergence per
#   epoch holds up.
# - **Read throughput in the steady state and from real devices.** The first epoch pays for tracing;
#   virtual CPUs share cores, so their samples/s shows the cost of the all-reduce, not the gain of
#   parallelism.

# %% [markdown]
# ## Summary
#
# - At a fixed global batch, 1 device and 2 replicas give the same loss at every step: the largest
#   difference measured over all steps is float32 round-off.
# - That needs the same initial weights, the same data order and no uneven last batch: a batch split
#   unevenly weighs the samples of the smaller share more.
# - Virtual CPU replicas share cores and cannot be faster; on real GPUs, step time is about
#   compute / N + all-reduce(N) + input, and the all-reduce limits the speed-up of small models.
# - At a fixed per-replica batch the global batch grows with the replicas; with an unchanged
#   learning rate, training falls behind per epoch.
# - The linear scaling rule with warm-up (Goyal et al., 2017) brings it back: the rate ramps from η
#   to kη over the first steps, then holds; for Adam, treat it as a starting point.

# %% [markdown]
# ## Exercises
#
# 1. Train both fixed-global runs with a data order that reshuffles (`dataset_shuffle()` with its
#    default `reshuffle_each_iteration`) on one dataset object reused by both runs. Do the curves
#    still coincide, and why not?
#
# <details><summary>Hint</summary>
#
# A reshuffling dataset draws a new order each time it is iterated: the second run does not see the
# first run's order. Compare the loss gap with the step-to-step change of the loss.
# </details>
#
# <details><summary>Solution</summary>
#
# ```r
# shuffled <- list(np_array(x_train, dtype = "float32"), np_array(y_train, dtype = "int32")) |>
#   tensor_slices_dataset() |> dataset_shuffle(nrow(x_train), seed = 0L) |>
#   dataset_batch(batch_size, drop_remainder = TRUE) |> dataset_repeat()
# steps <- nrow(x_train) %/% batch_size
# fit_once <- function(strategy) {
#   set_random_seed(0)
#   with(strategy$scope(), model <- build_model())
#   history <- model |> fit(shuffled, epochs = epochs, steps_per_epoch = steps, verbose = 0)
#   unlist(history$metrics$loss)
# }
# abs(fit_once(tf$distribute$get_strategy()) - fit_once(strategy))  # ~1e-2, not float rounding: another order
# ```
# </details>
#
# 2. Train the scaled run with `learning_rate = 2e-3` and no warm-up. Is warm-up needed at k = 2?
#    Then write the same warm-up as an R `LearningRateSchedule()` and train it on one device.
#
# <details><summary>Hint</summary>
#
# `train_run()` takes a number or a schedule as `learning_rate`. An R schedule is a class with a
# `call(step)` method that returns `base + (peak - base) * min(1, step / warmup_steps)`.
# </details>
#
# <details><summary>Solution</summary>
#
# ```r
# no_warmup <- train_run("2 replicas, batch 128, 2e-3, no warm-up", strategy, k * batch_size, learning_rate = 2e-3)
# rbind(no_warmup$epochs$loss, scaled$epochs$loss)  # close at k = 2 with Adam
# LinearWarmup <- LearningRateSchedule("LinearWarmup",
#   initialize = function(base, peak, warmup_steps) {
#     self$base <- base; self$peak <- peak; self$warmup_steps <- warmup_steps
#   },
#   call = function(step) {
#     fraction <- op_minimum(1, op_cast(step, "float32") / self$warmup_steps)
#     self$base + (self$peak - self$base) * fraction
#   })
# one_device_warm <- train_run("1 device, R warm-up", tf$distribute$get_strategy(), k * batch_size,
#                              learning_rate = LinearWarmup(base_rate, k * base_rate, warmup_steps))
# ```
# </details>
#
# 3. Simulate a large k on one device: global batch 512 with `learning_rate = 8e-3`, with and without
#    a one-epoch warm-up. When does warm-up start to pay?
#
# <details><summary>Hint</summary>
#
# Build the one-epoch warm-up like `schedule` above, with `nrow(x_train) %/% 512L` warm-up steps and
# rates from 1e-3 to 8e-3; look at the first few `steps$loss`.
# </details>
#
# <details><summary>Solution</summary>
#
# ```r
# big_steps <- nrow(x_train) %/% 512L
# warm <- learning_rate_schedule_piecewise_constant_decay(
#   boundaries = as.list(seq_len(big_steps) - 1L), values = as.list(seq(1e-3, 8e-3, length.out = big_steps + 1L)))
# cold_run <- train_run("batch 512, 8e-3", tf$distribute$get_strategy(), 512L, learning_rate = 8e-3)
# warm_run <- train_run("batch 512, 8e-3, warm-up", tf$distribute$get_strategy(), 512L, learning_rate = warm)
# rbind(head(cold_run$steps$loss), head(warm_run$steps$loss))  # the cold start jumps; the warm one does not
# ```
# </details>
#
# 4. Replace linear scaling by square-root scaling (peak `1e-3 * sqrt(2)`). Which rule works better
#    for Adam here?
#
# <details><summary>Hint</summary>
#
# Train 2 replicas at global batch 128 with `learning_rate = 1e-3 * sqrt(2)` and compare its
# `epochs$loss` and `epochs$val_accuracy` with `scaled`.
# </details>
#
# <details><summary>Solution</summary>
#
# ```r
# sqrt_rate <- train_run("2 replicas, batch 128, sqrt rule", strategy, k * batch_size, learning_rate = 1e-3 * sqrt(2))
# rbind(linear = scaled$epochs$val_accuracy, sqrt = sqrt_rate$epochs$val_accuracy)
# ```
# On this small problem both are close; neither rule is exact for Adam, so measure.
# </details>
#
# 5. Run kerasdist's own experiment from R, `kerasdist$run_comparison(c(1L, 2L), epochs = 3L,
#    data = data)`, and compare its `max_abs_loss_difference` with your measured gap.
#
# <details><summary>Hint</summary>
#
# The result is a Python object; `$max_abs_loss_difference` is a named list with one entry per mode.
# </details>
#
# <details><summary>Solution</summary>
#
# ```r
# kd_result <- kerasdist$run_comparison(c(1L, 2L), epochs = 3L, data = data, verbose = 0L)
# str(kd_result$max_abs_loss_difference$fixed_global)  # step and epoch gaps: float rounding, like step_gap
# ```
# </details>
#
# Next: [Input pipelines](04_input_pipelines_R.ipynb)
