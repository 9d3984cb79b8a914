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
# - what BatchNormalization and dropout do to the path, what synchronized BatchNormalization repairs
#   and what it costs;
# - how to read throughput on virtual CPU replicas, and what a cost model of the ring all-reduce
#   says about real GPUs;
# - what happens at a fixed **per-replica** batch, where the global batch grows with the replicas;
# - the linear learning-rate scaling rule with warm-up (Goyal et al., 2017), built from Keras' own
#   cosine-decay schedule, and what the warm-up costs, measured step by step;
# - gradient accumulation: the large global batch without more devices.
#
# **What you need**: lesson 1, R with keras3, tfdatasets and tensorflow
# (`install.packages(c("keras3", "tfdatasets"))`), rpy2 in the kernel's Python environment, and
# under two minutes on a 2-core CPU. The data is full MNIST when Keras has it cached or can download
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
# Lesson 1 listed when the claim holds, and showed the counter-examples step by step:
#
# 1. the same initial weights and the same data order;
# 2. equal shares: every replica gets as many examples as every other in every step;
# 3. no batch statistics: BatchNormalization normalises each replica's local batch with its own
#    statistics (and keeps its moving statistics per replica) unless `synchronized = TRUE`;
# 4. no random layer: dropout's seed is one mirrored variable, so every replica draws the same mask
#    for its own rows, which is not what one device draws for the global batch;
# 5. no gradient clipping in the optimizer: Keras 3 clips each replica's share before the
#    all-reduce.
#
# What is left is the order of floating-point additions. The guide's MLP (784-256-256-10, from the
# keras.io guide named in lesson 1) meets all five. Here we build conditions 1 and 2 with care and
# measure what is left; then we break condition 2 with an uneven batch, conditions 3 and 4 with
# BatchNormalization and dropout (and repair 3 with
# `layer_batch_normalization(synchronized = TRUE)`), over whole runs; end-of-lesson exercise 4
# breaks condition 5.
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
#
# The settings cell ends with `tf$config$experimental$enable_op_determinism()`. With it TensorFlow
# picks deterministic kernels (on GPUs some default ones add in a varying order) and keeps
# `tf.data`'s order, so that the same program on the same machine repeats its numbers (its
# docstring, `tensorflow/python/framework/config.py`). It does not make 1 device and 2 replicas add
# their gradients in the same order: the gap between them, measured below, stays.
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
# # Attach keras3, tfdatasets and tensorflow; then settings.
# library(keras3)
# library(tfdatasets, exclude = "shape")
# library(tensorflow, exclude = c("shape", "set_random_seed"))
# library(kerasdist)  # the course's R package: this lesson's checked exercises
# ex <- kd_exercises("03")
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
# # The guide's MLP, compiled; optionally with BatchNormalization ("local" or "synchronized") or
# # dropout (its rate) after dense_1, and an optimizer that accumulates gradients or clips them (used
# # in later sections and the exercises).
# build_model <- function(learning_rate = 1e-3, normalization = NULL, dropout = NULL,
#                         gradient_accumulation_steps = NULL, clipnorm = NULL) {
#   inputs <- keras_input(shape = 784, name = "digits")
#   hidden <- inputs |> layer_dense(units = 256, activation = "relu", name = "dense_1")
#   if (!is.null(normalization))
#     hidden <- hidden |> layer_batch_normalization(synchronized = normalization == "synchronized",
#                                                   name = "batch_norm")
#   if (!is.null(dropout))
#     hidden <- hidden |> layer_dropout(rate = dropout, name = "dropout")
#   logits <- hidden |>
#     layer_dense(units = 256, activation = "relu", name = "dense_2") |>
#     layer_dense(units = 10, name = "logits")
#   model <- keras_model(inputs, logits, name = "mnist_mlp")
#   model |> compile(
#     optimizer = optimizer_adam(learning_rate = learning_rate,
#                                gradient_accumulation_steps = gradient_accumulation_steps, clipnorm = clipnorm),
#     loss = loss_sparse_categorical_crossentropy(from_logits = TRUE),
#     metrics = list(metric_sparse_categorical_accuracy())
#   )
#   model
# }
#
# # Each epoch is shuffled with its own seed and the epochs are chained, so epoch k has the same
# # order in every run, and in a run resumed at epoch k (see "Fixed global batch" and end-of-lesson exercise 1).
# train_batches <- function(global_batch_size, run_epochs = epochs, seed = 0L) {
#   examples <- list(np_array(x_train, dtype = "float32"), np_array(y_train, dtype = "int32")) |>
#     tensor_slices_dataset()
#   per_epoch <- lapply(seq_len(run_epochs), function(epoch)
#     examples |>
#       dataset_shuffle(buffer_size = nrow(x_train), seed = seed * 1000L + epoch,
#                       reshuffle_each_iteration = FALSE) |>
#       dataset_batch(global_batch_size, drop_remainder = TRUE))
#   Reduce(dataset_concatenate, per_epoch) |> dataset_prefetch(tf$data$AUTOTUNE)
# }
#
# # Train from seed 0 under a strategy; keep each step's own batch loss and each epoch's time.
# # `...` goes to build_model(); `learning_rate` may be a number or a schedule.
# # Keras reports the running mean over the epoch; with equal batches the k-th batch's own loss is
# # k * mean_k - (k - 1) * mean_(k-1). keras3 numbers the batches from 1 (Python Keras from 0), so
# # k is `batch` itself; the running mean restarts with every epoch.
# train_run <- function(name, strategy, global_batch_size, learning_rate = 1e-3, run_epochs = epochs, ...) {
#   set_random_seed(0)
#   step_loss <- numeric()
#   previous_mean <- 0
#   epoch_seconds <- numeric()
#   record_loss <- callback_lambda(
#     on_train_batch_end = function(batch, logs) {
#       step_loss <<- c(step_loss, batch * logs$loss - (batch - 1) * previous_mean)
#       previous_mean <<- logs$loss
#       invisible(NULL)
#     },
#     on_epoch_begin = function(epoch, logs) {
#       previous_mean <<- 0
#       epoch_started <<- Sys.time()
#       invisible(NULL)
#     },
#     on_epoch_end = function(epoch, logs) {
#       epoch_seconds <<- c(epoch_seconds, as.numeric(difftime(Sys.time(), epoch_started, units = "secs")))
#       invisible(NULL)
#     }
#   )
#   epoch_started <- Sys.time()
#   with(strategy$scope(), model <- build_model(learning_rate, ...))
#   steps_per_epoch <- nrow(x_train) %/% global_batch_size
#   started <- Sys.time()
#   history <- model |> fit(train_batches(global_batch_size, run_epochs), epochs = run_epochs,
#                           steps_per_epoch = steps_per_epoch, validation_data = val_dataset,
#                           shuffle = FALSE, verbose = 0, callbacks = list(record_loss))
#   seconds <- as.numeric(difftime(Sys.time(), started, units = "secs"))
#   list(
#     steps = data.frame(run = name, epoch = seq_along(step_loss) / steps_per_epoch, loss = step_loss),
#     epochs = data.frame(run = name, epoch = seq_len(run_epochs), loss = unlist(history$metrics$loss),
#                         val_accuracy = unlist(history$metrics$val_sparse_categorical_accuracy)),
#     samples_per_s = run_epochs * steps_per_epoch * global_batch_size / seconds,
#     # Steady state: the epochs after the first, which also pays for tracing the step.
#     steady_samples_per_s = (run_epochs - 1) * steps_per_epoch * global_batch_size / sum(epoch_seconds[-1]),
#     global_batch_size = global_batch_size,
#     model = model
#   )
# }
#
# # Draw runs side by side: each step's batch loss, validation accuracy per epoch, and steady-state throughput.
# plot_runs <- function(runs, title) {
#   colors <- c("black", "darkorange", "steelblue")[seq_along(runs)]
#   styles <- c(1, 2, 2)[seq_along(runs)]
#   labels <- vapply(runs, function(run) run$epochs$run[1], "")
#   par(mfrow = c(1, 3), mar = c(4, 4.5, 2.5, 2), las = 1, cex = 0.9, cex.main = 1)
#   steps <- lapply(runs, function(run) run$steps)
#   plot(NULL, xlim = range(unlist(lapply(steps, `[[`, "epoch"))), ylim = range(unlist(lapply(steps, `[[`, "loss"))),
#        xlab = "epoch", ylab = "loss of each step's batch", main = title)
#   for (i in seq_along(runs)) lines(steps[[i]]$epoch, steps[[i]]$loss, col = colors[i], lty = styles[i], lwd = 1)
#   legend("topright", labels, col = colors, lty = styles, bty = "n", cex = 0.8)
#   accuracy <- sapply(runs, function(run) run$epochs$val_accuracy)
#   matplot(seq_len(epochs), accuracy, type = "o", pch = 19, col = colors, lty = styles, xaxt = "n",
#           xlab = "epoch", ylab = "accuracy", main = "Validation accuracy")
#   axis(1, at = seq_len(epochs))
#   speeds <- rev(vapply(runs, function(run) run$steady_samples_per_s, 0))
#   bars <- barplot(speeds, horiz = TRUE, col = "gray85", xlim = c(0, 1.05 * max(speeds)),
#                   xlab = "samples/s", main = "Steady-state throughput (after epoch 1)")
#   text(0, bars, rev(labels), pos = 4, cex = 0.9)  # each run's name, inside its bar
#   # The caveat goes between the title and the panel, clear of the x-axis label.
#   mtext("virtual CPUs share the same cores: more replicas cannot be faster here",
#         side = 3, line = 0.2, cex = 0.6, col = "firebrick")
# }

# %% [markdown]
# ## Fixed global batch: the curves coincide
#
# The same seed gives the same initial weights; `train_batches()` gives every run the same order of
# examples: each epoch is shuffled with its own seed and the epochs are chained, so epoch k has the
# same order in every run, and in a run resumed at epoch k (lesson 2). A seeded reshuffling dataset
# (`dataset_shuffle(seed = 0L)`, which reshuffles every epoch) also repeats its sequence of epoch
# orders in every run that builds it afresh, because its random stream restarts with the dataset;
# one dataset object iterated by two runs continues its stream instead, and a resumed run starts it
# again at epoch 1 (end-of-lesson exercise 1). The global batch is 64 in both runs: one on the default strategy
# (one device), one on the `MirroredStrategy` with two replicas of 32 samples each.
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

# %% language="R"
# # The 1-device run's batch loss at every step (the Python lesson prints the same numbers: a test compares them).
# losses <- one_device$steps$loss
# rows <- split(sprintf("%.4f", losses), (seq_along(losses) - 1) %/% 12)
# cat(sprintf("1 device, batch loss of steps 1-%d:\n", length(losses)),
#     paste0(vapply(rows, paste, "", collapse = " "), "\n"), sep = "")

# %% [markdown]
# In the figure the dashed 2-replica curve lies on the 1-device curve; the largest difference over all
# steps is of the size of float32 rounding, far smaller than the loss's own change from one step to
# the next. Most of it is not the training at all: each step's loss is
# rebuilt from Keras' running mean of the epoch (k times the mean after step k, minus k - 1 times the
# one before), which multiplies the float32 rounding of that mean by up to about 2k, so the gap
# grows along the epoch and is there from step 1, before any update. What the two runs really do
# differently is add up in another order (each replica sums over its 32 samples, then the
# all-reduce sums the two), and floating-point addition is not associative. Such rounding
# differences can also grow during training (a unit whose input sits
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
# batch (**strong scaling**: the same work split over more devices), one step on N devices takes
#
# `step time = compute of global batch / N on one device + all-reduce(N) + input time`
#
# A ring all-reduce of G bytes of gradients is a reduce-scatter followed by an all-gather: each
# device sends (and receives) `2 (N - 1) / N x G` bytes through its link (at bandwidth B), and waits
# for `2 (N - 1)` hops of latency. The model adds the three terms: it assumes that no communication
# overlaps with compute, which is how Keras' optimizer asks for it (one all-reduce once the tape has
# every gradient). Its figures come from kerasdist's one hardware model (`kerasdist.measure.hardware`,
# used by lessons 8 and 9 too): an NVIDIA H100 GPU's published peak and memory bandwidth, and a PCIe
# 4.0 link's bandwidth (a server of the previous generation: the H100 itself speaks PCIe 5.0, twice
# as fast). A device's compute is predicted, not assumed: each matrix product of the step takes the
# longer of its arithmetic at the peak and its memory traffic at the bandwidth (every operand read
# from the GPU's memory; its 50 MB cache could serve layers this small faster), plus Adam's update
# and an assumed floor for launching the step's kernels (a few microseconds each). A float32
# model's products run on the GPU's tensor cores as TensorFloat-32, TensorFlow's default there. The
# hop latency is assumed too, and the input is taken as hidden by prefetching (lesson 4).
#
#

# %% magic_args="-w 11 -h 4 --units in -r 90" language="R"
# # The cost model: a GPU's compute from kerasdist's hardware model (published figures, a model, not a
# # measurement), a PCIe 4.0 link, the MLP's float32 gradients; one step at a fixed global batch.
# hardware <- reticulate::import("kerasdist.measure.hardware")
# model_global_batch <- 4096L      # samples per step, fixed as N grows (strong scaling)
# model_input_s <- 0               # input hidden by prefetching (lesson 4)
# gpu <- hardware$H100_SXM
# link <- hardware$LINKS[["PCIe 4.0 x16"]]
# cat(hardware$describe_step(hardware$DENSE_LAYERS, model_global_batch), "\n", sep = "")
# gradient_bytes <- 4 * build_model()$count_params()  # float32 gradients of the MLP
# devices_n <- c(1L, 2L, 4L, 8L)
# step_parts <- sapply(devices_n, function(n) c(
#   compute = hardware$predicted_step(hardware$DENSE_LAYERS, model_global_batch %/% n)$seconds,
#   all_reduce = if (n > 1) 2 * (n - 1) / n * gradient_bytes / link$bandwidth + 2 * (n - 1) * link$alpha else 0,
#   input = model_input_s
# ))
# par(mfrow = c(1, 2), mar = c(7, 5, 2.5, 1), las = 1, cex = 0.9, cex.main = 0.95)
# barplot(1e6 * step_parts, names.arg = devices_n, col = c("steelblue", "darkorange", "gray70"),
#         xlab = "devices N", ylab = "µs per step", main = "MODEL, not a measurement: time per step",
#         legend.text = c("compute on each device", "all-reduce (ring)", "input"),
#         args.legend = list(bty = "n", cex = 0.8))
# modelled_speed <- model_global_batch / colSums(step_parts)
# plot(devices_n, modelled_speed / 1e6, type = "o", pch = 19,
#      ylim = c(0, max(modelled_speed[1] * devices_n, modelled_speed) / 1e6),
#      xlab = "devices N", ylab = "million samples/s", main = "MODEL: samples/s at a fixed global batch", xaxt = "n")
# axis(1, at = devices_n)
# lines(devices_n, modelled_speed[1] * devices_n / 1e6, lty = 3, col = "gray40")
# legend("topleft", c("model", "perfect scaling"), lty = c(1, 3), col = c("black", "gray40"), bty = "n", cex = 0.8)
# mtext(sprintf("step time = compute on each device + all-reduce(N) + input; global batch %d, compute from %s",
#               model_global_batch, paste0("kerasdist's hardware model (", gpu$name, ", TensorFloat-32)")),
#       side = 1, line = 4.5, adj = 1, cex = 0.6)
# mtext(sprintf("gradients %.2f MB, link %g GB/s, hop latency %g us (assumed), input %g us per step; no overlap",
#               gradient_bytes / 1e6, link$bandwidth / 1e9, 1e6 * link$alpha, 1e6 * model_input_s),
#       side = 1, line = 5.3, adj = 1, cex = 0.6)
# cat(sprintf("model: gradients of %.2f MB; 8 devices would be %.2fx as fast as 1 (perfect scaling: 8x)\n",
#             gradient_bytes / 1e6, modelled_speed[4] / modelled_speed[1]))

# %% language="R"
# # The model's terms for 1, 2 and 8 devices: each device's compute, and the all-reduce with its latency part.
# for (n in c(1L, 2L, 8L)) {
#   parts <- step_parts[, devices_n == n]
#   cat(sprintf("model, %d device(s): compute %.0f us on each; all-reduce %.0f us, of which latency %.0f us\n",
#               n, 1e6 * parts[["compute"]], 1e6 * parts[["all_reduce"]], 1e6 * 2 * (n - 1) * link$alpha))
# }

# %% [markdown]
# The model says three things. The compute per device does not shrink as 1/N: on a GPU this small
# MLP's step is mostly a fixed cost (the assumed kernel launches and Adam's update) that does not
# shrink with the batch; the matrix products alone nearly do. The bytes each device sends grow with
# N only up to twice the gradient: `2 (N - 1) / N` of it, whatever N, which is why the ring
# all-reduce scales; only the latency term, `2 (N - 1)` hops, grows without limit. And so, for a model this small, an all-reduce over PCIe takes about as long as
# the whole step on one GPU, or longer: more devices make it slower, as the printout says. Data parallelism pays when
# each device has enough compute per byte of gradient.
#
# When is a step compute-bound? Per device and step, with a per-device batch of b examples, the
# forward and backward pass of a dense layer cost about 6 floating-point operations per weight per
# example, at F operations/s; the all-reduce moves about 2 x g bytes per weight (g = 4 for float32
# gradients, 2 for bfloat16) at B bytes/s. Compute dominates when `6 b / F > 2 g / B`, that is
# `b > (g / 3) x F / B`: the per-device batch must grow with the ratio of the device's speed to its
# link's. The model's width cancels out (a wider MLP has more compute *and* proportionally more
# gradient); layers that use each weight many times per example (convolutions, sequence models) do
# more compute per byte. This leaves out the latency term, `2 (N - 1)` hops: it holds where the
# gradient is large. The cell below puts in the GPU's peak and two of its links.


# %% language="R"
# # Per-device batch above which compute at the GPU's peak outlasts the all-reduce's bandwidth term, b > (g / 3) x F / B.
# for (link_name in c("PCIe 4.0 x16", "NVLink 4 (H100)"))
#   for (number_type in c("tensorfloat32", "bfloat16")) {
#     bytes_per_value <- if (number_type == "tensorfloat32") 4 else 2
#     rate <- gpu$peak_flops[[number_type]]
#     bandwidth <- hardware$LINKS[[link_name]]$bandwidth
#     cat(sprintf("%s, %s (gradients of %d bytes): compute outlasts the bytes sent above %s examples per device\n", link_name,
#                 number_type, bytes_per_value, format(round(bytes_per_value / 3 * rate / bandwidth), big.mark = ",")))
#   }

# %% [markdown]
# At the peak, PCIe needs a per-device batch in the tens of thousands before compute outlasts the
# bytes sent, NVLink one in the thousands; bfloat16 halves the bytes and doubles the peak, so the
# batch stays where it was. Real kernels run below peak, which lowers it; real links below their
# bandwidth, and the latency term, raise it: for this MLP's small gradient the latency dominates
# (the model's terms above), so the batch it needs is larger still. Two more ways change the sum itself. **Overlap**: the gradients of
# the last layers are ready long before the backward pass ends; PyTorch's DistributedDataParallel,
# for one, all-reduces them in buckets while the pass goes on, so the step tends to max(compute,
# communication) instead of their sum. **Less communication**: bfloat16 gradients halve the bytes,
# and gradient accumulation (the last section) would all-reduce once per k steps. Not yet in Keras 3
# on TensorFlow: its optimizer applies the accumulated update, all-reduce included, inside a
# conditional, and `fit()` under `MirroredStrategy` fails there ("`merge_call` called while defining
# a new graph", keras-team/keras#20582, open), so on this stack accumulation runs on one device only.
# Lesson 9 measures an all-reduce on this machine and predicts a GPU cluster with the same model;
# `benchmarks/accelerator_step.py` times the step on a real GPU beside this prediction. Measure on your
# own GPUs before you trust any of these figures.

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
# ## BatchNormalization and dropout: when the paths part
#
# BatchNormalization normalises each unit with the mean and variance of the batch it is given,
# during training. On one device that is the global batch of 64; under `MirroredStrategy` each
# replica computes the statistics of its own 32 examples, so the same weights give another loss on
# the same global batch, from the very first step. `layer_batch_normalization(synchronized = TRUE)`
# makes the replicas all-reduce the sums behind the mean and variance (in Keras' TensorFlow backend,
# `keras/src/backend/tensorflow/nn.py`, `_compute_moments_sync`), so every replica normalises with
# the statistics of the global batch, as one device does.
#
# Below, the guide's MLP gets a BatchNormalization layer after `dense_1`; each variant trains for
# one epoch on 1 device and on 2 replicas, with the same seed and data order as before.
#
# **Predict, then run.** With plain BatchNormalization, do the two runs part at the first step or only
# later? And with `synchronized = TRUE`, do they agree to float rounding, like the plain MLP?

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # The MLP with BatchNormalization: local batch statistics, then synchronized ones; 1 device vs 2 replicas.
# one_device_strategy <- tf$distribute$get_strategy()
# bn_run <- function(n, run_strategy, normalization)
#   train_run(sprintf("%d replica(s), %s", n, normalization), run_strategy, batch_size, run_epochs = 1L,
#             normalization = normalization)
# local_statistics <- list(bn_run(1L, one_device_strategy, "local"), bn_run(2L, strategy, "local"))
# synchronized_statistics <- list(bn_run(1L, one_device_strategy, "synchronized"),
#                                 bn_run(2L, strategy, "synchronized"))
# local_gap <- abs(local_statistics[[2]]$steps$loss - local_statistics[[1]]$steps$loss)
# synchronized_gap <- abs(synchronized_statistics[[2]]$steps$loss - local_statistics[[1]]$steps$loss)
# stopifnot(max(synchronized_gap) < 1e-3, 1e-3 < max(local_gap))
# cat("BatchNormalization, 2 replicas vs 1 device: the same loss at every step:", max(local_gap) < 1e-3, "\n")
# cat("synchronized BatchNormalization, 2 replicas vs 1 device: the same loss at every step:",
#     max(synchronized_gap) < 1e-3, "\n")

# %% language="R"
# # The measured gaps, next to the float noise of the plain MLP above.
# cat(sprintf("BatchNormalization: |loss difference| %.1e at step 1, up to %.1e\n", local_gap[1], max(local_gap)))
# cat(sprintf("synchronized BatchNormalization: max |loss difference| %.1e (the plain MLP: %.1e)\n",
#             max(synchronized_gap), step_gap))

# %% magic_args="-w 7 -h 3.2 --units in -r 100" language="R"
# # Each step's batch loss in the first epoch: plain BatchNormalization parts, synchronized stays.
# par(mar = c(4, 4.5, 2, 1), las = 1, cex.main = 1)
# steps <- seq_along(local_gap)
# plot(steps, local_statistics[[1]]$steps$loss, type = "l", lwd = 5, col = adjustcolor("black", alpha.f = 0.35),
#      xlab = "step", ylab = "loss of each step's batch", main = "MLP with BatchNormalization, global batch 64")
# lines(steps, local_statistics[[2]]$steps$loss, col = "darkorange", lwd = 1.2)
# lines(steps, synchronized_statistics[[2]]$steps$loss, col = "steelblue", lty = 2, lwd = 1.2)
# legend("topright", c("1 device, BatchNormalization", "2 replicas, BatchNormalization (each its own statistics)",
#                      "2 replicas, synchronized = TRUE"), bty = "n", cex = 0.75,
#        col = c(adjustcolor("black", alpha.f = 0.35), "darkorange", "steelblue"), lty = c(1, 1, 2), lwd = c(5, 1.2, 1.2))

# %% [markdown]
# Plain BatchNormalization parts the runs at the first step, before any update: the same weights give
# another loss because each replica normalises its 32 examples with their own statistics. With
# `synchronized = TRUE` the 2-replica run stays on the 1-device run to float rounding. (Synchronized
# statistics are computed as E[x²] - E[x]², which rounds a little differently from one device's
# computation; the gap is still of the size of the plain MLP's.)
#
# The layer's moving statistics, which inference uses, part too. Lesson 1 showed why: each replica
# writes its own batch's statistics into its own copy; `save()` and `get_weights()` read replica 0's,
# while `evaluate()` and `predict()` under the strategy normalise each shard with its own replica's. Here are the copies after the epoch above.

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # The two copies of the moving mean after one epoch on 2 replicas, local and synchronized statistics.
# for (variant in list(list("BatchNormalization", local_statistics),
#                      list("synchronized BatchNormalization", synchronized_statistics))) {
#   moving_mean <- get_layer(variant[[2]][[2]]$model, "batch_norm")$moving_mean
#   copies <- lapply(moving_mean$value$values, function(component) component$numpy())
#   cat(sprintf("%s: moving_mean copies identical: %s; the model reads replica 0's: %s\n", variant[[1]],
#               identical(copies[[1]], copies[[2]]), identical(moving_mean$numpy(), copies[[1]])))
# }

# %% [markdown]
# So a model trained with plain BatchNormalization on N replicas is saved with the moving
# statistics of replica 0's shards only, and evaluated under the strategy with each replica's own. Synchronized BatchNormalization has a price, paid in
# every step of training, per BatchNormalization layer:
#
# - **forward**: three all-reduces, of the sums, the sums of squares and the counts, issued one
#   after another (`_compute_moments_sync` has a TODO to batch them);
# - **backward**: the gradient of an all-reduced sum is itself an all-reduced sum
#   (`tensorflow/python/distribute/distribute_lib.py`, `ReplicaContext.all_reduce`), so the sums and
#   the sums of squares are all-reduced again on the way back;
# - each of them carries one number per unit, so its cost is latency, not bandwidth, and it sits on
#   the critical path: the next layer waits for it.
#
# Goyal et al. (below) chose the other way on purpose: statistics per worker, over 32 examples each.
#
# Dropout breaks the path in another way. It looks at one example at a time, but lesson 1 showed that
# its seed state is one mirrored variable, so both replicas draw the **same** mask for their own 32
# rows, where one device draws a mask for all 64 rows of the global batch. The cell below checks the
# masks again on this strategy, then trains the MLP with a `layer_dropout()` that drops half of the
# units after `dense_1`, for one epoch on 1 device and on 2 replicas.

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # Dropout's masks on 2 replicas and on one device (lesson 1), then one epoch with dropout on each.
# # The per-replica function is Python (strategy$run calls it on TensorFlow's replica threads).
# reticulate::py_run_string(paste(
#   "def training_call(layer):",
#   "    return lambda rows: layer(rows, training=True)", sep = "\n"))
# ones <- tf$ones(c(2L * 4L, 6L))
# set_random_seed(0)
# with(strategy$scope(), probe_dropout <- layer_dropout(rate = 0.5, seed = 1L))
# ones_per_replica <- reticulate::iter_next(reticulate::as_iterator(
#   strategy$experimental_distribute_dataset(tensors_dataset(ones))))
# dropped <- tf_function(function(x) strategy$run(reticulate::py$training_call(probe_dropout), args = list(x)))(
#   ones_per_replica)
# replica_masks <- lapply(strategy$experimental_local_results(dropped), function(t) t$numpy() > 0)
# set_random_seed(0)
# one_device_dropout <- layer_dropout(rate = 0.5, seed = 1L)
# one_device_mask <- tf_function(function(x) one_device_dropout(x, training = TRUE))(ones)$numpy() > 0
# cat("the replicas draw the same mask:", identical(replica_masks[[1]], replica_masks[[2]]),
#     "; it is one device's mask for the first rows:", identical(replica_masks[[1]], one_device_mask[1:4, ]), "\n")
# with_dropout <- list(train_run("1 replica(s), dropout", one_device_strategy, batch_size, run_epochs = 1L, dropout = 0.5),
#                      train_run("2 replica(s), dropout", strategy, batch_size, run_epochs = 1L, dropout = 0.5))
# dropout_gap <- abs(with_dropout[[2]]$steps$loss - with_dropout[[1]]$steps$loss)
# stopifnot(max(dropout_gap) > 1e-3)
# cat("dropout, 2 replicas vs 1 device: the same loss at every step:", max(dropout_gap) < 1e-3, "\n")

# %% language="R"
# # The measured gap with dropout: from the first step, at the scale of the loss's own changes.
# cat(sprintf("dropout: |loss difference| %.1e at step 1, up to %.1e\n", dropout_gap[1], max(dropout_gap)))

# %% [markdown]
# The paths part at the first step: the second replica's 32 examples lose other units than they do on
# one device. No Keras option changes it; a model with dropout trains correctly on N replicas, with
# noise correlated across the replicas, but not on one device's path.

# %% [markdown]
# ### Exercise q1: stay on one device's path
#
# Write `normalized_mlp()`: the lesson's MLP (784 inputs, `dense_1` and `dense_2` of 256 ReLU units, 10 logits) with a batch normalization layer after `dense_1`, built so that training on 2 replicas stays on one device's path. The check builds it in a 2-replica `MirroredStrategy` scope and once more on one device with the same weights, and compares their training-mode outputs on 64 real digits (32 per replica).
#
# Complete the cell, then run the check below it; `kd_hint(ex$q1)` gives a hint, `kd_solution(ex$q1)` the solution.
#
# <details><summary>Solution</summary>
#
# `layer_batch_normalization(synchronized = TRUE)` all-reduces the sums behind the batch mean and variance, so each replica normalises its 32 digits with the statistics of all 64, as one device does. Plain BatchNormalization uses each replica's own 32 digits, and its outputs differ from the first step.
#
# </details>

# %% nbgrader={"grade": false, "grade_id": "q1_answer", "locked": false, "schema_version": 3, "solution": true, "task": false} language="R"
# normalized_mlp <- NULL  # a function of () that returns an uncompiled model
# ### BEGIN SOLUTION
# normalized_mlp <- function() {
#   inputs <- keras_input(shape = 784, name = "digits")
#   logits <- inputs |>
#     layer_dense(units = 256, activation = "relu", name = "dense_1") |>
#     layer_batch_normalization(synchronized = TRUE, name = "batch_norm") |>
#     layer_dense(units = 256, activation = "relu", name = "dense_2") |>
#     layer_dense(units = 10, name = "logits")
#   keras_model(inputs, logits)
# }
# ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "q1", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false} language="R"
# # NBVAL_CHECK_OUTPUT
# kd_check(ex$q1)
# ### BEGIN HIDDEN TESTS
# kd_assert_correct(ex$q1)
# ### END HIDDEN TESTS

# %% [markdown]
# ## Fixed per-replica batch: the global batch grows
#
# Now keep 64 samples **per replica**: 2 replicas make a global batch of 128, so an epoch has half
# as many steps. With the same learning rate, each epoch makes half as many updates of about the
# same size (the gradient is an average, so a bigger batch makes it less noisy, not larger), and
# training falls behind per epoch. Every run of this section goes through `train_run()`, with the
# data order of `train_batches()`; the 1-device run at batch 64 is `one_device` from the first
# section.

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # Train 2 replicas x 64 samples with the unchanged learning rate.
# k <- 2L
# same_rate <- train_run("2 replicas, batch 128, same rate", strategy, k * batch_size)
# for (run in list(one_device, same_rate))
#   cat(sprintf("%s: global batch %d: %d steps per epoch\n", run$epochs$run[1], run$global_batch_size,
#               nrow(x_train) %/% run$global_batch_size))

# %% [markdown]
# ## The linear scaling rule with warm-up
#
# Goyal et al. (2017, "Accurate, Large Minibatch SGD: Training ImageNet in 1 Hour") trained
# ResNet-50 on ImageNet with SGD and momentum, with k workers of n = 32 images each, up to a global
# batch of 8,192, and matched the small-batch accuracy. Their recipe:
#
# - **linear scaling**: when the global batch is multiplied by k, multiply the learning rate by k;
# - **gradual warm-up**: start from the base rate η and ramp it up linearly, by the same amount
#   each step, to kη over the first 5 epochs, because the linear rule breaks down early in
#   training, while the network changes fast; after the ramp the usual schedule resumes from kη
#   (divided by 10 at epochs 30, 60 and 80 of 90);
# - the loss of each worker divided by the **total** minibatch kn, as Keras does (lesson 1);
#   momentum correction when the rate changes, and weight decay kept as in the small-batch run
#   (scaling the loss is not the same as scaling the rate);
# - **BatchNormalization per worker**, over its n = 32 images, deliberately not synchronized: with
#   n fixed, the statistics (and the loss they define) stay those of the small-batch run.
#
# Keras has the ramp built in: `learning_rate_schedule_cosine_decay()` with `warmup_target` and
# `warmup_steps` ramps linearly from `initial_learning_rate` to `warmup_target`, by the same amount
# each step, then decays along a cosine for `decay_steps` steps down to `alpha` x `warmup_target`.
# This lesson trains a few epochs with Adam and has no later schedule to resume, so it holds kη
# after the ramp: with `alpha = 1` the "decay" ends where it starts. kerasdist builds the same
# schedule with `scale_learning_rate` and `warmup_epochs`. (A schedule written in R with
# `LearningRateSchedule()` would work on one device, but under `MirroredStrategy` the schedule is
# evaluated while the replicas' training step is traced, on TensorFlow's replica threads; a Keras
# schedule keeps R code out of the traced step.) Here k = 2: the rate goes from 1e-3 to 2e-3 over
# the first quarter epoch.
#
# **Two cautions, before the runs.** The linear rule was derived and tested for SGD with momentum.
# Adam divides each step by a running estimate of the gradient's size, and for such adaptive
# optimizers a *square-root* rule is often the better guess: multiply the rate by sqrt(k), not by k
# (Malladi et al., 2022, who adjust Adam's β1, β2 and ε as well). And every rule breaks down at some
# batch size, the *critical batch size* (McCandlish et al., 2018): beyond it, more replicas buy speed
# per epoch but need more epochs to reach the same accuracy. This lesson follows the paper and
# applies the linear rule to Adam. At k = 2 the two rules ask for 2 x and about 1.4 x the base rate,
# too close for runs this short to tell apart: the runs below show what the rule and its warm-up do
# here, not which rule is right (end-of-lesson exercise 3 tries a larger k).

# %% [markdown]
# **Predict, then run.** What is the scaled run's learning rate at its very first step: 0, the base
# rate 1e-3, or 2e-3? Decide, then run.

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # Keras' own warm-up from η to kη over the first quarter epoch, then held (alpha = 1: no decay).
# base_rate <- 1e-3
# steps_per_epoch <- nrow(x_train) %/% (k * batch_size)
# warmup_steps <- as.integer(0.25 * steps_per_epoch)
# schedule <- learning_rate_schedule_cosine_decay(
#   initial_learning_rate = base_rate, warmup_target = k * base_rate, warmup_steps = warmup_steps,
#   decay_steps = epochs * steps_per_epoch, alpha = 1
# )
# rate_at <- function(step) as.numeric(schedule(as.integer(step))$numpy())
# ramp <- vapply(0:(2 * warmup_steps), rate_at, 0)
# expected <- base_rate * (1 + (k - 1) * pmin(0:(2 * warmup_steps) / warmup_steps, 1))
# stopifnot(isTRUE(all.equal(ramp, expected, tolerance = 1e-6)),  # the same step up every step, then kη held
#           rate_at(epochs * steps_per_epoch) == ramp[length(ramp)])  # still kη at the end of training
# cat(sprintf("step 0: %g (the base rate); end of the warm-up and after: %g (k x base)\n",
#             ramp[1], ramp[warmup_steps + 1]))
# cat(sprintf("the rate at steps 0..%d: %s\n", length(ramp) - 1, paste(sprintf("%.5f", ramp), collapse = " ")))
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
# # Training loss per epoch (Keras' mean over each epoch's steps): the unscaled run lags.
# for (run in runs)
#   cat(sprintf("%-40s loss per epoch %s\n", run$epochs$run[1],
#               paste(sprintf("%.2f", run$epochs$loss), collapse = ", ")))

# %% [markdown]
# With the same learning rate, the 128-sample run ends its third epoch well above the 1-device loss:
# half the steps, the same step size. Doubling the rate (the linear rule) brings it back with the
# 1-device run by epochs 2 and 3 (a rate x sqrt(2) might do as well: at k = 2 these runs do not tell
# the rules apart), but its epoch-1 loss is still higher. Is that the warm-up? The warm-up lasts only a
# few steps, and the epoch-1 figure is the running mean over the whole epoch, which this lesson
# warned about. So measure it step by step instead: each step's batch loss against the **samples
# seen** (one step of the 128-sample runs sees as many samples as two of the 1-device run), averaged
# over stretches of epoch 1, with a fourth run that doubles the rate without warm-up.

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # A fourth run: the doubled rate from the first step, no warm-up.
# no_warmup <- train_run("2 replicas, batch 128, scaled, no warm-up", strategy, k * batch_size,
#                        learning_rate = k * base_rate)
# cat(sprintf("no warm-up: batch %d, learning rate %g from step 1\n", no_warmup$global_batch_size, k * base_rate))

# %% language="R"
# # Mean batch loss over stretches of samples seen: epoch 1 in three parts, then epochs 2 and 3.
# warmup_samples <- warmup_steps * k * batch_size
# half_epoch <- nrow(x_train) %/% 2
# stretches <- c("warm-up", "rest of 1st half", "2nd half", "epoch 2", "epoch 3")
# stretch_means <- function(run) {
#   per_epoch <- nrow(x_train) %/% run$global_batch_size
#   index <- seq_along(run$steps$loss) - 1
#   epoch <- index %/% per_epoch
#   start <- (index %% per_epoch) * run$global_batch_size
#   part <- ifelse(epoch > 0, epoch + 2, ifelse(start < warmup_samples, 0, ifelse(start < half_epoch, 1, 2)))
#   vapply(seq_along(stretches) - 1, function(p) mean(run$steps$loss[part == p]), 0)
# }
# means <- list(`1 device, batch 64` = stretch_means(one_device), `same rate` = stretch_means(same_rate),
#               `scaled + warm-up` = stretch_means(scaled), `scaled, no warm-up` = stretch_means(no_warmup))
# cat(sprintf("%20s", "samples seen:"), sprintf("%17s", stretches), "\n", sep = "")
# cat(sprintf("%20s", "(up to)"), sprintf("%17s", format(c(warmup_samples, half_epoch, nrow(x_train) * 1:3),
#                                                          big.mark = ",", trim = TRUE)), "\n", sep = "")
# for (name in names(means)) cat(sprintf("%20s", name), sprintf("%17.3f", means[[name]]), "\n", sep = "")
# lag <- means[["scaled + warm-up"]] - means[["1 device, batch 64"]]
# early_lag <- mean(lag[1:2])
# late_lag <- lag[3]
# epoch1 <- c(baseline = one_device$epochs$loss[1], scaled = scaled$epochs$loss[1],
#             no_warmup = no_warmup$epochs$loss[1])
# stopifnot(late_lag < early_lag,  # the lag is at the start of epoch 1
#           abs(epoch1[["no_warmup"]] - epoch1[["baseline"]]) < epoch1[["scaled"]] - epoch1[["baseline"]])
# cat(sprintf("scaled + warm-up minus 1 device: %+.3f in the first half of epoch 1, %+.3f in the second half\n",
#             early_lag, late_lag))
# cat(sprintf("epoch-1 mean loss: 1 device %.3f, scaled + warm-up %.3f, no warm-up %.3f\n",
#             epoch1[["baseline"]], epoch1[["scaled"]], epoch1[["no_warmup"]]))

# %% magic_args="-w 7 -h 3.2 --units in -r 100" language="R"
# # Epoch 1 step by step against the samples seen: the warm-up's stretch is shaded.
# par(mar = c(4, 4.5, 2, 1), las = 1, cex.main = 1)
# first_epoch <- function(run) {
#   per_epoch <- nrow(x_train) %/% run$global_batch_size
#   list(seen = seq_len(per_epoch) * run$global_batch_size, loss = run$steps$loss[seq_len(per_epoch)])
# }
# curves <- lapply(list(one_device, scaled, no_warmup), first_epoch)
# plot(NULL, xlim = c(0, max(curves[[1]]$seen)), ylim = range(unlist(lapply(curves, `[[`, "loss"))),
#      xlab = "samples seen", ylab = "loss of each step's batch",
#      main = "Epoch 1: each step's batch loss against samples seen")
# rect(0, -1, warmup_samples, 10, col = adjustcolor("gray", alpha.f = 0.3), border = NA)
# styles <- list(list(col = adjustcolor("black", alpha.f = 0.35), lwd = 5, lty = 1),
#                list(col = "steelblue", lwd = 1.5, lty = 1), list(col = "darkorange", lwd = 1.5, lty = 2))
# for (i in seq_along(curves))
#   lines(curves[[i]]$seen, curves[[i]]$loss, col = styles[[i]]$col, lwd = styles[[i]]$lwd, lty = styles[[i]]$lty)
# legend("topright", c("1 device, batch 64", "scaled + warm-up", "scaled, no warm-up", "warm-up"), bty = "n",
#        cex = 0.75, col = c(vapply(styles, `[[`, "", "col"), adjustcolor("gray", alpha.f = 0.3)),
#        lty = c(1, 1, 2, NA), lwd = c(5, 1.5, 1.5, NA), pch = c(NA, NA, NA, 15), pt.cex = 2)

# %% [markdown]
# What the measurement says: the scaled run falls behind while its rate ramps up and for a while
# after (its rate is lower than kη there, so it has made less progress per sample), and by the second
# half of epoch 1 most of that lag is gone; in epochs 2 and 3 it is with the 1-device run. The epoch-1
# mean averages those early steps in, so it shows a gap that the model has nearly closed by the end
# of the epoch. The run without warm-up keeps pace from the first samples, and its epoch-1 mean is
# with the 1-device run's: at k = 2 with Adam the warm-up costs a little progress and buys no
# stability that was missing. Goyal et al. introduced it for SGD on a deep network with k up to 256;
# end-of-lesson exercise 3 tries a larger k here.
#
# **Exercise.** Build a schedule with `learning_rate_schedule_cosine_decay()` that warms up from 0 to
# 2e-3 over 10 steps, then decays along the cosine to 1e-4 over the next 100 steps. Which `alpha` and
# `decay_steps`? Check the rate at steps 0, 10, 60 and 110.
#
# <details><summary>Solution</summary>
#
# ```r
# warm_then_decay <- learning_rate_schedule_cosine_decay(
#   initial_learning_rate = 0, warmup_target = 2e-3, warmup_steps = 10, decay_steps = 100, alpha = 1e-4 / 2e-3)
# vapply(c(0L, 10L, 60L, 110L), function(step) as.numeric(warm_then_decay(step)$numpy()), 0)  # 0 0.002 0.00105 1e-04
# ```
# `alpha` is a fraction of `warmup_target` (0.05), and `decay_steps` counts from the end of the
# warm-up; halfway through the decay the rate is halfway between 2e-3 and 1e-4.
# </details>

# %% [markdown]
# ### Exercise q2: a warm-up schedule
#
# Write `warmup_schedule(base_rate, k, warmup_steps, total_steps)`: a Keras learning-rate schedule for a global batch k times larger that starts at `base_rate`, ramps linearly to k x `base_rate` over `warmup_steps` steps, then holds that rate up to `total_steps`, as in the recipe above (with `alpha = 1` the schedule holds its rate after the warm-up, so its `decay_steps` changes nothing). The check puts your schedule into an Adam optimizer and reads the optimizer's rate at several steps, for two settings.
#
# Complete the cell, then run the check below it; `kd_hint(ex$q2)` gives a hint, `kd_solution(ex$q2)` the solution.
#
# <details><summary>Solution</summary>
#
# `learning_rate_schedule_cosine_decay()` with `initial_learning_rate = base_rate`, `warmup_target = k * base_rate` and `warmup_steps` ramps by the same amount at each step; after the ramp it decays towards `alpha` x the target over `decay_steps`, so `alpha = 1` holds the rate. The default `alpha = 0` would take it down to 0.
#
# </details>

# %% nbgrader={"grade": false, "grade_id": "q2_answer", "locked": false, "schema_version": 3, "solution": true, "task": false} language="R"
# warmup_schedule <- NULL  # a function of (base_rate, k, warmup_steps, total_steps)
# ### BEGIN SOLUTION
# warmup_schedule <- function(base_rate, k, warmup_steps, total_steps) {
#   learning_rate_schedule_cosine_decay(
#     initial_learning_rate = base_rate, warmup_target = k * base_rate,
#     warmup_steps = warmup_steps, decay_steps = total_steps, alpha = 1)
# }
# ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "q2", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false} language="R"
# # NBVAL_CHECK_OUTPUT
# kd_check(ex$q2)
# ### BEGIN HIDDEN TESTS
# kd_assert_correct(ex$q2)
# ### END HIDDEN TESTS

# %% [markdown]
# ## Gradient accumulation: a large batch without more devices
#
# A global batch of 128 does not need two devices. A Keras 3 optimizer built with
# `gradient_accumulation_steps = k` adds up the gradients of k steps and updates the weights only at
# every k-th step, with their average (`keras/src/optimizers/base_optimizer.py`, `apply`: the update
# step uses `(g + accumulated) / steps`). Each step's gradient is the mean over its batch of b
# examples, so the average of k of them is the mean gradient over k x b examples: the update of one
# step with batch k x b. Adam counts updates, not steps, for its bias correction (`iterations` is
# the step count divided by k).
#
# **Predict, then run.** On one device, train one epoch with batch 128, and one epoch with batch 64
# and `gradient_accumulation_steps = 2`, on the same data order. Compare each update's loss: for the
# accumulated run, the mean of its two batches' losses (both computed before the update).

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # Batch 128 vs 2 accumulated steps of 64, one device, one epoch, the same data order.
# accumulation_steps <- 2L
# large_batch <- train_run("1 device, batch 128", one_device_strategy, accumulation_steps * batch_size,
#                          run_epochs = 1L)
# accumulated <- train_run("1 device, 2 x 64 accumulated", one_device_strategy, batch_size, run_epochs = 1L,
#                          gradient_accumulation_steps = accumulation_steps)
# # Steps that complete no update (an epoch that does not divide by 2) are left out.
# updates_done <- nrow(large_batch$steps)
# per_update <- colMeans(matrix(accumulated$steps$loss[seq_len(accumulation_steps * updates_done)],
#                               nrow = accumulation_steps))
# update_gap <- abs(per_update - large_batch$steps$loss)
# weight_gap <- max(mapply(function(a, b) max(abs(a - b)), get_weights(large_batch$model),
#                          get_weights(accumulated$model)))
# updates <- c(as.integer(large_batch$model$optimizer$iterations$numpy()),
#              as.integer(accumulated$model$optimizer$iterations$numpy()))
# stopifnot(updates[1] == updates[2], max(update_gap) < 1e-3, 1e-3 < median(abs(diff(per_update))),
#           weight_gap < 1e-4)
# cat(sprintf("updates: %d with batch 128, %d from %d steps of 64\n", updates[1], updates[2],
#             nrow(accumulated$steps)))
# cat("the same loss at every update:", max(update_gap) < 1e-3, "\n")

# %% language="R"
# # The measured gaps: float rounding (the rebuilt per-step loss, sums in another order), as between
# # 1 device and 2 replicas.
# cat(sprintf("max |loss difference| per update: %.1e; max |weight difference| after the epoch: %.1e\n",
#             max(update_gap), weight_gap))

# %% [markdown]
# Accumulating k steps of b examples gives the global batch k x b without more devices: the same
# updates, k times slower per update on the same hardware. In principle it combines with replicas
# (global batch = replicas x per-replica batch x k), but Keras 3 on TensorFlow cannot do that yet:
# under `MirroredStrategy` its accumulating optimizer fails in `fit()` (keras-team/keras#20582, the
# paragraph on communication above). It is a larger global batch in every respect, so the linear
# scaling rule applies to k as it does to replicas: fewer updates per epoch, and a learning rate to
# scale by k with a warm-up. One trap: Keras' learning-rate schedules count *steps*, not updates
# (`_get_current_learning_rate` passes the optimizer's step counter; the optimizer's docstring says
# so), so a warm-up of W updates needs `warmup_steps = k x W`. And accumulation shares the caveat of
# the section on BatchNormalization: statistics are taken over each step's batch of b, not over k x b.
#
# **Exercise.** Accumulate 4 steps of 32 examples and compare with batch 128. Do the updates still
# agree to float rounding?
#
# <details><summary>Solution</summary>
#
# ```r
# four_steps <- train_run("1 device, 4 x 32 accumulated", one_device_strategy, 32L, run_epochs = 1L,
#                         gradient_accumulation_steps = 4L)
# four_per_update <- colMeans(matrix(four_steps$steps$loss[seq_len(4 * updates_done)], nrow = 4))
# max(abs(four_per_update - large_batch$steps$loss))  # float rounding again
# ```
# They do: every update averages the gradients of 4 x 32 = 128 examples, the same examples in the same
# order as one batch of 128, so only the order of the additions differs.
# </details>

# %% [markdown]
# ### Exercise q3: accumulate to a large batch
#
# Write `accumulating_optimizer(large_batch, batch_size, learning_rate)`: an Adam optimizer that, trained with batches of `batch_size`, makes the same updates as plain Adam with `learning_rate` and batches of `large_batch`. The check trains the course's MLP on real digits with your optimizer and, from the same weights, with the large batch and plain Adam, for two settings (batch 64 toward 256, and 32 toward 96 at another rate), and compares the number of updates and the final weights.
#
# Complete the cell, then run the check below it; `kd_hint(ex$q3)` gives a hint, `kd_solution(ex$q3)` the solution.
#
# <details><summary>Solution</summary>
#
# `gradient_accumulation_steps = large_batch %/% batch_size` adds up the gradients of that many steps and updates with their average, the mean gradient over the large batch. The learning rate stays as it is: the average already is the large batch's gradient, and Adam counts updates, not steps.
#
# </details>

# %% nbgrader={"grade": false, "grade_id": "q3_answer", "locked": false, "schema_version": 3, "solution": true, "task": false} language="R"
# accumulating_optimizer <- NULL  # a function of (large_batch, batch_size, learning_rate)
# ### BEGIN SOLUTION
# accumulating_optimizer <- function(large_batch, batch_size, learning_rate) {
#   optimizer_adam(learning_rate = learning_rate,
#                  gradient_accumulation_steps = large_batch %/% batch_size)
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
# - **Synchronize BatchNormalization when the per-replica batch is small**
#   (`layer_batch_normalization(synchronized = TRUE)`): it buys the statistics of the global batch, in
#   training and in the moving statistics that inference uses, and it costs small, latency-bound
#   all-reduces in the forward and the backward pass of every step.
# - **No more devices? Accumulate gradients** (`gradient_accumulation_steps = k`) to reach the global
#   batch you need, and scale the learning rate as you would for k replicas, counting a schedule's
#   warm-up in steps (k per update).

# %% [markdown]
# ## Summary
#
# - At a fixed global batch, 1 device and 2 replicas give the same loss at every step: the largest
#   difference measured over all steps is float32 round-off.
# - That needs the same initial weights, the same data order and no uneven last batch: a batch split
#   unevenly weighs the samples of the smaller share more.
# - Virtual CPU replicas share cores and cannot be faster. On real GPUs at a fixed global batch
#   (strong scaling), step time is about each device's compute + all-reduce + input when nothing
#   overlaps: a ring all-reduce sends less than twice the gradient per device whatever N, and only
#   its latency grows with N, so it is the compute shrinking beneath it that limits the speed-up of
#   small models; kerasdist's hardware model predicts that this MLP does not gain from 8 GPUs.
# - At a fixed per-replica batch the global batch grows with the replicas; with an unchanged
#   learning rate, training falls behind per epoch.
# - The linear scaling rule with warm-up (Goyal et al., 2017) brings it back: the rate ramps from η
#   to kη over the first steps (Keras' cosine-decay schedule with `warmup_target` and `alpha = 1`,
#   which then holds kη; the paper resumes its step schedule from kη). Goyal et al. also divided the
#   loss by the total batch, corrected momentum and kept BatchNormalization per worker. For Adam,
#   treat the rule as a starting point: a square-root rule (the rate x sqrt(k)) is often the
#   better guess, and at k = 2 these runs cannot tell the two apart.
# - Measured against samples seen, the warm-up's cost is a lag at the start of epoch 1 that is mostly
#   gone by its end; the epoch-1 running mean makes it look larger. At k = 2 with Adam, a run
#   without warm-up kept pace.
# - N replicas follow one device's path only under lesson 1's conditions: BatchNormalization parts
#   the paths from the first step and keeps its moving statistics per replica (`synchronized = TRUE`
#   joins them again, to float rounding, for a few all-reduces per step); dropout draws the same
#   mask on every replica and parts them too.
# - Gradient accumulation over k steps of batch b follows the same updates as batch k x b, to float
#   rounding: a large global batch without more devices, under the same scaling rule.

# %% [markdown]
# ## Exercises
#
# 1. Train the two fixed-global runs on a seeded dataset that reshuffles every epoch
#    (`dataset_shuffle(seed = 0L)`, its default `reshuffle_each_iteration`), built afresh for each
#    run. Do the curves still coincide? If not, find why.
#
# <details><summary>Hint</summary>
#
# Compare the loss per epoch of both runs with the float-rounding gap of the lesson. Then look at
# what Keras' `fit()` does with the dataset before its first step when the model was built under a
# strategy: `keras/src/backend/tensorflow/trainer.py`, `_maybe_symbolic_build`.
# </details>
#
# <details><summary>Solution</summary>
#
# ```r
# reshuffling <- function() {  # a seeded dataset that reshuffles every epoch, built afresh for each call
#   list(np_array(x_train, dtype = "float32"), np_array(y_train, dtype = "int32")) |>
#     tensor_slices_dataset() |> dataset_shuffle(nrow(x_train), seed = 0L) |>
#     dataset_batch(batch_size, drop_remainder = TRUE) |> dataset_repeat()
# }
# loss_per_epoch <- function(run_strategy, dataset) {
#   set_random_seed(0)
#   with(run_strategy$scope(), model <- build_model())
#   history <- model |> fit(dataset, epochs = epochs, steps_per_epoch = nrow(x_train) %/% batch_size,
#                           shuffle = FALSE, verbose = 0)
#   unlist(history$metrics$loss)
# }
# two <- loss_per_epoch(strategy, reshuffling())
# abs(loss_per_epoch(one_device_strategy, reshuffling()) - two)  # far above float rounding
# skipped <- reshuffling()
# invisible(reticulate::iter_next(reticulate::as_iterator(skipped)))  # draw one order, as fit() does under a strategy
# abs(loss_per_epoch(one_device_strategy, skipped) - two)  # float rounding again
# ```
# They part. Built afresh, the dataset repeats its sequence of orders from run to run, but under a
# strategy `fit()` first takes one batch from a new iterator to build the model (`_maybe_symbolic_build`,
# in `fit()` and `evaluate()`), and every new iterator of a reshuffling dataset draws the next order:
# the 2-replica run trains on the orders the 1-device run would see from its second iteration on.
# Skip one iteration on the 1-device side and the curves coincide again. One dataset object used by
# both runs is no better: the second run continues the first run's stream. `train_batches()` fixes
# each epoch's order with its own seed, so no iterator can move it.
# </details>
#
# 2. Lengthen the warm-up to one epoch (`warmup_steps = steps_per_epoch`, the length `kerasdist
#    compare` uses). How does the lag against the 1-device run change, stretch by stretch?
#
# <details><summary>Hint</summary>
#
# Build the schedule like `schedule` above, train it with `train_run()` and pass the run to
# `stretch_means()`. Note that the "warm-up" stretch of the table still means the quarter-epoch ramp
# of the lesson.
# </details>
#
# <details><summary>Solution</summary>
#
# ```r
# long_schedule <- learning_rate_schedule_cosine_decay(
#   initial_learning_rate = base_rate, warmup_target = k * base_rate, warmup_steps = steps_per_epoch,
#   decay_steps = epochs * steps_per_epoch, alpha = 1)
# long_warmup <- train_run("2 replicas, batch 128, 1-epoch warm-up", strategy, k * batch_size,
#                          learning_rate = long_schedule)
# round(rbind(long = stretch_means(long_warmup) - means[["1 device, batch 64"]], lesson = lag), 3)
# ```
# The lag grows and lasts through epoch 1: the rate stays below kη for the whole epoch. At k = 2
# with Adam a long warm-up only costs progress; warm-up matters for large k.
# </details>
#
# 3. Simulate a large k on one device: a global batch of 512 is k = 8 times the lesson's 64, so the
#    linear rule gives kη = 8e-3. Train it with and without a one-epoch warm-up from η = 1e-3, then
#    try a larger rate, 3e-2. When does warm-up start to pay?
#
# <details><summary>Hint</summary>
#
# Build the warm-up like `schedule` above, with `nrow(x_train) %/% 512L` warm-up steps, and pass the
# rate or the schedule to `train_run()` as `learning_rate`. Look at the first few `steps$loss`
# values, where a rate too large for fresh weights shows, and at the loss per epoch.
# </details>
#
# <details><summary>Solution</summary>
#
# ```r
# big_steps <- nrow(x_train) %/% 512L
# for (peak in c(8e-3, 3e-2)) {
#   warm <- learning_rate_schedule_cosine_decay(base_rate, decay_steps = epochs * big_steps, alpha = 1,
#                                               warmup_target = peak, warmup_steps = big_steps)
#   for (label in c("no warm-up", "warm-up")) {
#     run <- train_run(sprintf("batch 512, %g, %s", peak, label), one_device_strategy, 512L,
#                      learning_rate = if (label == "warm-up") warm else peak)
#     cat(sprintf("%-28s", run$epochs$run[1]), sprintf("%.2f", head(run$steps$loss, 8)), "|",
#         sprintf("%.3f", run$epochs$loss), "\n")
#   }
# }
# ```
# At 8e-3 warm-up does not pay on this MLP with Adam: the run without it falls fastest from the first
# step, with no jump, and the warmed-up run even bumps once its rate reaches 8e-3 (Adam's first steps
# are about the rate in size whatever the gradient's scale, and 8e-3 is not too much for fresh
# weights here). At 3e-2 the run without warm-up jumps within its first steps to a loss several times
# the initial one and ends epoch 1 far behind; the warmed-up run bumps too when it reaches the full
# rate, to about half that height, and ends epoch 1 well ahead. Warm-up pays once the scaled rate is
# too large for fresh weights, which for Adam on this small model takes a larger k than 8.
# </details>
#
# 4. Add gradient clipping, `clipnorm = 0.1` (`train_run(..., clipnorm = 0.1)`), and train 1 device
#    and 2 replicas for one epoch at the fixed global batch. Do the curves still coincide?
#
# <details><summary>Hint</summary>
#
# Compare each step's loss as in the first section, and remember where Keras 3 clips (lesson 1,
# "When N replicas follow one device's path").
# </details>
#
# <details><summary>Solution</summary>
#
# ```r
# clipped <- lapply(list(one_device_strategy, strategy), function(run_strategy)
#   train_run("clipnorm", run_strategy, batch_size, run_epochs = 1L, clipnorm = 0.1))
# clip_gap <- abs(clipped[[2]]$steps$loss - clipped[[1]]$steps$loss)
# cat(sprintf("step 1: %.1e, largest: %.1e\n", clip_gap[1], max(clip_gap)))
# ```
# Step 1 agrees (its loss is computed before any update); from the second step on the runs part by
# far more than float rounding: each replica clips its own half of the gradient before the
# all-reduce, so the update is not one device's clipped mean gradient. With a threshold the gradients
# never reach (say `clipnorm = 100`) they coincide again.
# </details>
#
# 5. From a terminal, run `kerasdist compare --replicas 1,2 --mode both --out results/compare` and
#    open the CSV it writes.
#
# <details><summary>Hint</summary>
#
# The CSV is in the long format: one row per run, level ("step" or "epoch"), index and metric.
# Filter on `metric == "batch_loss"` for the per-step curves.
# </details>
#
# <details><summary>Solution</summary>
#
# ```r
# rows <- read.csv("results/compare/comparison.csv")
# batch_loss <- subset(rows, metric == "batch_loss", select = c(run, index, value))
# head(reshape(batch_loss, idvar = "index", timevar = "run", direction = "wide"))
# ```
# </details>
#
# Next: [Input pipelines](04_input_pipelines_R.ipynb)
