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
# # Speed: where a training step's time goes (R, keras3)
#
# This is the R twin of [08_speed.ipynb](08_speed.ipynb): the same workflow and the same sections,
# written with the R packages keras3, tfdatasets and tensorflow. The notebook runs on a Python
# kernel; the R code lives in `%%R` cells (rpy2), and R draws the figures too.
#
# **What you'll learn**
#
# - how much faster the same model trains with many steps per call (`steps_per_execution`,
#   kerasdist's loop engine) and XLA (`jit_compile = TRUE`), side by side on one device, with the
#   accuracy each setting reaches after the same epochs;
# - what mixed precision is: `mixed_bfloat16` on a CPU with bfloat16 instructions, and
#   `mixed_float16` on GPUs with its loss scaling (`LossScaleOptimizer`);
# - where the time of one step goes: input pipeline, forward pass, backward pass, optimizer update
#   and the host's overhead per call, each measured alone;
# - the machine's limit: FLOPs per sample from the layer shapes against the measured matmul
#   throughput, and each setting's share of it;
# - what of this carries over to GPUs, with lesson 3's cost model.
#
# **What you need**: R with keras3, tfdatasets and tensorflow, rpy2 in the kernel's Python
# environment, Debian's `dataset-fashion-mnist` package (else Keras downloads the files) and about
# 2-3 minutes on a 2-core CPU. The data is **Fashion-MNIST**: 70,000 real 28x28 photos of clothing in
# 10 classes (Zalando), in MNIST's format. `bash scripts/run_notebooks.sh --r-twins` runs it again.

# %% [markdown]
# ## Introduction
#
# On this course's 2-core CPU, replicas share the cores, so lessons 3 and 4 showed them slower than
# one device. Yet the same model trains several times faster on that one device when its steps are
# run differently: a step of the MLP on a batch of 64 is a fraction of a millisecond of matrix
# multiplication, and everything around it (the host calling a TensorFlow function, one kernel per
# op, memory traffic between ops) can cost more than the arithmetic. We measure the settings side by
# side, then the parts of one step, then the machine's limit.

# %% [markdown]
# ## Setup
#
# The Python side loads rpy2's `%%R` magic and imports kerasdist (which keeps TensorFlow's start-up lines
# quiet) and Keras; R then attaches keras3 and friends, and reticulate uses this very Python process.

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
# # Attach keras3, tfdatasets, tensorflow and reticulate, then the settings.
# library(keras3)
# library(tfdatasets, exclude = "shape")
# library(tensorflow, exclude = c("shape", "set_random_seed"))
# library(reticulate)
# data_source <- Sys.getenv("KERASDIST_SPEED_DATA", "fashion")
# epochs <- 3L          # every setting trains this many epochs; the first one includes tracing
# batch_size <- 64L
# steps_per_call <- 50L
# seed <- 0L

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # The data: Fashion-MNIST through Keras' own loader (kerasdist's load_mnist), kept as NumPy arrays.
# kerasdist <- import("kerasdist")
# kd_data <- import("kerasdist.data")
# data <- import("kerasdist", convert = FALSE)$load_mnist(data_source, seed = seed)
# n_train <- py_len(data$y_train)
# cat(sprintf("classes: %s\n", paste(unlist(kd_data$FASHION_CLASSES), collapse = ", ")))

# %% [markdown]
# ## The settings side by side
#
# Five ways to train the same MLP (784-256-256-10, Adam, batch 64) on the same data, each for the
# same number of epochs on one device: keras3's `fit()` as the seed writes it; with
# `steps_per_execution = 50`; with XLA as well (`jit_compile = TRUE`); kerasdist's loop engine
# (50 steps per call); and the loop engine with XLA. A setting's speed is its **steady state**: the
# samples/s of its fastest epoch after the first. Keras' `jit_compile` defaults to `"auto"`, which
# Keras turns off on a machine without a GPU: the printout shows what it chose here.

# %% language="R"
# # keras3 fit of the guide's model, timed per epoch; kerasdist's loop engine under a dtype policy.
# train_with_fit <- function(...) {
#   set_random_seed(seed)
#   model <- keras_model_sequential(input_shape = 784) |>
#     layer_dense(256, activation = "relu") |>
#     layer_dense(256, activation = "relu") |>
#     layer_dense(10)
#   model |> compile(loss = loss_sparse_categorical_crossentropy(from_logits = TRUE),
#                    optimizer = optimizer_adam(), metrics = "accuracy", ...)
#   train <- tensor_slices_dataset(tuple(data$x_train, data$y_train)) |>
#     dataset_cache() |> dataset_shuffle(10000) |> dataset_batch(batch_size)
#   seconds <- c()
#   started <- NULL
#   timer <- callback_lambda(
#     on_epoch_begin = function(epoch, logs) started <<- Sys.time(),
#     on_epoch_end = function(epoch, logs) seconds <<- c(seconds, as.numeric(Sys.time() - started, units = "secs"))
#   )
#   model |> fit(train, epochs = epochs, callbacks = list(timer), verbose = 0, shuffle = FALSE)
#   accuracy <- evaluate(model, data$x_test, data$y_test, batch_size = 1024, verbose = 0)[["accuracy"]]
#   list(speed = n_train / min(seconds[-1]), accuracy = accuracy, model = model)
# }
# train_with_kerasdist <- function(jit_compile, precision = "float32") {
#   config_set_dtype_policy(precision)
#   on.exit(config_set_dtype_policy("float32"))
#   result <- kerasdist$run_training(replicas = 1L, epochs = epochs, global_batch_size = batch_size,
#                                    data = data, seed = seed, engine = "loop",
#                                    steps_per_execution = steps_per_call, jit_compile = jit_compile,
#                                    verbose = 0L)
#   list(speed = max(unlist(result$history$samples_per_s)[-1]), accuracy = result$test$accuracy)
# }
# runs <- list()
# runs[["fit (guide)"]] <- train_with_fit()
# cat(sprintf("the guide's fit chose jit_compile=%s on this machine\n",
#             if (runs[["fit (guide)"]]$model$jit_compile) "True" else "False"))
# runs[["fit, 50 steps/call"]] <- train_with_fit(steps_per_execution = steps_per_call)
# runs[["fit, 50 steps/call, XLA"]] <- train_with_fit(steps_per_execution = steps_per_call, jit_compile = TRUE)
# runs[["loop"]] <- train_with_kerasdist(FALSE)
# runs[["loop + XLA"]] <- train_with_kerasdist(TRUE)
# speed <- vapply(runs, `[[`, numeric(1), "speed")
# accuracy <- vapply(runs, `[[`, numeric(1), "accuracy")
# for (name in names(speed)) {
#   cat(sprintf("%-26s %8s samples/s  %4.1fx the guide's  test accuracy %.3f\n", name,
#               format(round(speed[[name]]), big.mark = ","), speed[[name]] / speed[["fit (guide)"]],
#               accuracy[[name]]))
# }

# %% [markdown]
# **Predict, then run.** Which setting is fastest, and by how much does it beat the guide's `fit()`?
# Does any setting buy its speed with a worse model after the same 3 epochs? Decide, then run the
# check (its margin is loose: on an idle machine loop + XLA runs about three times as fast, but
# other programs on a shared machine slow some settings more than others).

# %% language="R"
# # Check: loop + XLA beats the guide's fit, and every setting reaches about the same accuracy.
# ratio <- speed[["loop + XLA"]] / speed[["fit (guide)"]]
# stopifnot(diff(range(accuracy)) < 0.03)
# cat(sprintf("loop + XLA: %.1fx the guide's fit; test accuracies within %.3f of each other\n",
#             ratio, diff(range(accuracy))))

# %% [markdown]
# Many steps per call and XLA each remove work around the arithmetic, most of all together (on a busy
# machine a single setting can still come out slower than it should); none changes what is computed, so
# the accuracies differ only by the randomness of initial weights and data order.

# %% [markdown]
# ## Mixed precision
#
# **Mixed precision** computes the layers in a 16-bit float type while the weights and the
# optimizer's state stay in float32: `config_set_dtype_policy("mixed_bfloat16")` makes every layer
# built afterwards compute in bfloat16. kerasdist's model keeps its logits in float32, as Keras'
# guide advises. bfloat16 keeps float32's 8 exponent bits (range), float16 has 5: small gradients
# become zero in float16, so `mixed_float16` (GPUs) needs **loss scaling**: multiply the loss by a
# large factor before the backward pass, divide the gradients by it before the update, and skip a
# step whose gradients overflowed. keras3's `compile()` wraps the optimizer in a
# `LossScaleOptimizer` whenever the model's policy is `mixed_float16`; a custom loop must do it
# itself. The cell below shows this on this machine.

# %% language="R"
# # This CPU's bfloat16 instructions; a small gradient in float16 and bfloat16; compile() under mixed_float16.
# cpuinfo <- if (file.exists("/proc/cpuinfo")) readLines("/proc/cpuinfo") else character(0)
# flags <- strsplit(sub("^flags\\s*:\\s*", "", grep("^flags", cpuinfo, value = TRUE)[1]), " ")[[1]]
# bf16_instructions <- sort(unique(grep("bf16$", flags, value = TRUE)))
# if (length(bf16_instructions) > 0) {
#   cat(sprintf("this CPU has bfloat16 instructions: %s\n", paste(bf16_instructions, collapse = ", ")))
# } else {
#   cat("this CPU lacks bfloat16 instructions (no avx512_bf16 or amx_bf16): TensorFlow emulates",
#       "bfloat16 with float32 and it is slower, not faster\n")
# }
# small_gradient <- 1e-6 / batch_size
# for (dtype in c("float16", "bfloat16")) {
#   cat(sprintf("a gradient of %.2e in %s: %.2e\n", small_gradient, dtype,
#               as.numeric(tf$cast(tf$cast(small_gradient, dtype), "float32"))))
# }
# build_mlp <- function() {
#   inputs <- keras_input(shape = 784)
#   logits <- inputs |> layer_dense(256, activation = "relu") |> layer_dense(256, activation = "relu") |>
#     layer_dense(10, dtype = "float32")
#   model <- keras_model(inputs, logits)
#   model |> compile(loss = loss_sparse_categorical_crossentropy(from_logits = TRUE), optimizer = optimizer_adam())
#   model
# }
# config_set_dtype_policy("mixed_float16")
# float16_model <- build_mlp()
# config_set_dtype_policy("float32")
# hidden <- float16_model$layers[[2]]
# cat(sprintf(paste0("under mixed_float16: hidden layers compute in %s, keep %s weights; logits in %s; ",
#                    "compile() made the optimizer a %s (initial scale %.0f)\n"),
#             hidden$compute_dtype, hidden$variable_dtype, float16_model$layers[[4]]$compute_dtype,
#             float16_model$optimizer$`__class__`$`__name__`, float16_model$optimizer$initial_scale))

# %% [markdown]
# Now the two loop settings again, under `mixed_bfloat16`, in the same run as the others:

# %% language="R"
# # kerasdist's loop, without and with XLA, under mixed_bfloat16.
# runs[["loop, bfloat16"]] <- train_with_kerasdist(FALSE, "mixed_bfloat16")
# runs[["loop + XLA, bfloat16"]] <- train_with_kerasdist(TRUE, "mixed_bfloat16")
# speed <- vapply(runs, `[[`, numeric(1), "speed")
# accuracy <- vapply(runs, `[[`, numeric(1), "accuracy")
# for (name in c("loop", "loop, bfloat16", "loop + XLA", "loop + XLA, bfloat16")) {
#   cat(sprintf("%-22s %8s samples/s  test accuracy %.3f\n", name, format(round(speed[[name]]), big.mark = ","),
#               accuracy[[name]]))
# }

# %% magic_args="-w 9 -h 3.8 --units in -r 100" language="R"
# # Every setting's steady-state speed, with its test accuracy after the same epochs.
# dir.create("results/figures", recursive = TRUE, showWarnings = FALSE)
# order <- rev(names(speed))
# old <- par(mar = c(4.5, 12, 3, 1))
# centers <- barplot(speed[order], horiz = TRUE, las = 1, cex.names = 0.8, xlim = c(0, 1.45 * max(speed)),
#                    col = ifelse(grepl("bfloat16", order), "purple", "steelblue"),
#                    xlab = "samples/s in the steady state (one device, batch 64)",
#                    main = sprintf("Fashion-MNIST MLP, %d epochs per setting, one run", epochs), cex.main = 0.9)
# text(speed[order], centers, sprintf("%s/s, acc %.3f", format(round(speed[order]), big.mark = ","),
#                                     accuracy[order]), pos = 4, cex = 0.7)
# par(old)

# %% [markdown]
# At batch 64 bfloat16 gains little here, or even loses, although the CPU multiplies bfloat16
# matrices several times faster than float32 ones (measured below): the matrices of one step are
# small, and the time goes elsewhere. The next section finds where.

# %% [markdown]
# ## Where a step's time goes
#
# Each part of one step is timed alone, on batches already in memory, in a `tf_function()` that runs
# 50 steps per call: the **forward** pass and loss; **forward + backward** (the gradients too); the
# **whole step** (and Adam's update); the whole step at **one step per call**, as the guide's `fit()`
# runs it (the difference is the host's overhead per call); the whole step compiled by **XLA**; and
# the **input pipeline** alone (kerasdist's `tf.data` pipeline drained without training; with
# prefetching it runs beside training). Each time is the best of ten calls after a warm-up call.

# %% language="R"
# # Time each part of a step alone, per step, in milliseconds.
# best_seconds <- function(f, ...) {
#   f(...)
#   min(vapply(1:10, function(i) system.time(f(...))[["elapsed"]], numeric(1)))
# }
# set_random_seed(seed)
# mlp <- build_mlp()
# loss_function <- mlp$loss
# optimizer <- mlp$optimizer
# optimizer$build(mlp$trainable_variables)
# np <- import("numpy", convert = FALSE)
# timed <- np$remainder(np$arange(steps_per_call * batch_size), n_train)  # the first 50 batches' samples
# x_steps <- tf$reshape(tf$constant(py_get_item(data$x_train, timed)), c(steps_per_call, batch_size, -1L))
# y_steps <- tf$reshape(tf$constant(py_get_item(data$y_train, timed)), c(steps_per_call, batch_size))
# forward <- function(x, y) loss_function(y, mlp(x, training = TRUE))
# forward_backward <- function(x, y) {
#   with(tf$GradientTape() %as% tape, loss <- forward(x, y))
#   gradients <- tape$gradient(loss, mlp$trainable_variables)
#   # Return a number made of every gradient: TensorFlow prunes computations that no output uses.
#   loss + tf$add_n(lapply(gradients, function(g) tf$reduce_sum(tf$gather(g, 0L))))
# }
# whole_step <- function(x, y) {
#   with(tf$GradientTape() %as% tape, loss <- forward(x, y))
#   optimizer$apply(tape$gradient(loss, mlp$trainable_variables), mlp$trainable_variables)
#   loss
# }
# steps_in_one_call <- function(part, jit_compile = FALSE) {
#   tf_function(function(xs, ys) {
#     total <- tf$constant(0)
#     for (i in tf$range(tf$shape(xs)[1])) total <- total + part(tf$gather(xs, i), tf$gather(ys, i))
#     total
#   }, jit_compile = jit_compile)
# }
# one_step_per_call <- tf_function(whole_step)
# step_by_step <- function(xs, ys) {
#   for (i in seq_len(steps_per_call) - 1L) one_step_per_call(tf$gather(xs, i), tf$gather(ys, i))
# }
# pipeline <- kd_data$train_dataset(data$x_train, data$y_train, batch_size, seed, 0L, 1L)
# drain <- tf_function(function() pipeline$reduce(tf$constant(0), function(total, batch) total + batch[[1]][1, 1]))
# per_step_ms <- function(seconds, steps) seconds / steps * 1e3
# milliseconds <- c(
#   "input pipeline" = per_step_ms(best_seconds(drain), n_train %/% batch_size),
#   "forward" = per_step_ms(best_seconds(steps_in_one_call(forward), x_steps, y_steps), steps_per_call),
#   "forward + backward" = per_step_ms(best_seconds(steps_in_one_call(forward_backward), x_steps, y_steps),
#                                      steps_per_call),
#   "whole step" = per_step_ms(best_seconds(steps_in_one_call(whole_step), x_steps, y_steps), steps_per_call),
#   "whole step, 1 per call" = per_step_ms(best_seconds(step_by_step, x_steps, y_steps), steps_per_call),
#   "whole step, XLA" = per_step_ms(best_seconds(steps_in_one_call(whole_step, TRUE), x_steps, y_steps),
#                                   steps_per_call)
# )
# parts <- c(
#   "forward" = milliseconds[["forward"]],
#   "backward" = milliseconds[["forward + backward"]] - milliseconds[["forward"]],
#   "optimizer update" = milliseconds[["whole step"]] - milliseconds[["forward + backward"]],
#   "host overhead per call" = milliseconds[["whole step, 1 per call"]] - milliseconds[["whole step"]]
# )
# for (name in names(milliseconds)) cat(sprintf("%-24s %6.3f ms per step\n", name, milliseconds[[name]]))
# cat(sprintf("one step at 1 step per call: %s\n",
#             paste(sprintf("%s %.0f%%", names(parts), 100 * parts / milliseconds[["whole step, 1 per call"]]),
#                   collapse = ", ")))

# %% [markdown]
# **Predict, then run.** Is the host's overhead per call a small or a large part of a step run one
# per call? Is the input pipeline slower than a training step? Decide, then run the check.

# %% language="R"
# # Check: one step per call costs clearly more than 50 per call, and the input pipeline keeps up.
# stopifnot(milliseconds[["whole step, 1 per call"]] > 1.2 * milliseconds[["whole step"]],
#           milliseconds[["input pipeline"]] < milliseconds[["whole step"]])
# cat(sprintf("1 step per call: %.1fx the time of 50 per call; the input pipeline needs %.0f%% of a step\n",
#             milliseconds[["whole step, 1 per call"]] / milliseconds[["whole step"]],
#             100 * milliseconds[["input pipeline"]] / milliseconds[["whole step"]]))

# %% magic_args="-w 9 -h 3.4 --units in -r 100" language="R"
# # Draw one step's time, part by part, beside the whole step compiled by XLA and the input pipeline.
# flops <- kerasdist$training_flops_per_sample(mlp)
# matmul_float32 <- kerasdist$matmul_flops_per_s("float32")
# matmul_bfloat16 <- kerasdist$matmul_flops_per_s("bfloat16")
# limit_ms <- batch_size * flops$total / matmul_float32 * 1e3
# rows <- c("input pipeline alone", "50 steps per call, XLA", "50 steps per call", "1 step per call")
# stack <- matrix(0, nrow = 5, ncol = 4, dimnames = list(c(names(parts), "measured as a whole"), rows))
# stack[names(parts), "1 step per call"] <- parts
# stack["measured as a whole", rows[1:3]] <- milliseconds[c("input pipeline", "whole step, XLA", "whole step")]
# colors <- c("steelblue", "lightblue", "orange", "firebrick", "grey")
# old <- par(mar = c(4.5, 11, 3, 1))
# barplot(stack, horiz = TRUE, las = 1, cex.names = 0.8, col = colors, xlim = c(0, 1.3 * sum(parts)),
#         xlab = "milliseconds per step of 64 samples (measured alone)", main = "Where one training step's time goes")
# abline(v = limit_ms, lty = 2)
# legend("bottomright", c(rownames(stack), sprintf("float32 matmul limit (%.2f ms)", limit_ms)),
#        fill = c(colors, NA), border = c(rep("black", 5), NA), lty = c(rep(NA, 5), 2), cex = 0.7, bg = "white")
# par(old)

# %% [markdown]
# At one step per call a large share of each step is the host's work around it, which
# `steps_per_execution` and the loop engine pay once per 50 steps. The rest splits between the
# forward pass, the backward pass (about twice its FLOPs) and Adam's update, which Keras applies
# variable by variable as dozens of small ops; on a shared machine these shares move from run to run,
# so read them as rough. XLA fuses the many small ops into few kernels; its bar shows what that saves.
# The dashed line is the time the step's matrix products would take at the CPU's full matmul speed.

# %% [markdown]
# ## The machine's limit
#
# A Dense layer with an `n_in x n_out` kernel costs `2 n_in n_out` FLOPs per sample forward; training
# adds as much again for the kernel's gradient and as much again for the input's gradient, which the
# first layer does not need. The CPU's matmul throughput (1024 x 1024 products, twenty in a chain,
# best of ten rounds, float32 and bfloat16 through the same op) divided by the FLOPs per sample is
# the most samples per second any loop could reach here.

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # FLOPs per sample, layer by layer, from the kernels' shapes.
# for (layer in mlp$layers[-1]) {
#   shape <- unlist(layer$kernel$shape$as_list())
#   cat(sprintf("Dense %3d x %3d: %7s FLOPs forward per sample\n", shape[1], shape[2],
#               format(2 * shape[1] * shape[2], big.mark = ",")))
# }
# cat(sprintf("training FLOPs per sample: %s forward + %s backward = %s\n", format(flops$forward, big.mark = ","),
#             format(flops$backward, big.mark = ","), format(flops$total, big.mark = ",")))

# %% language="R"
# # The limit in samples/s, and each setting's share of it (bfloat16 settings against the bfloat16 limit).
# # The matmuls are timed a second time and the faster kept: other programs slow some rounds down.
# matmul_float32 <- max(matmul_float32, kerasdist$matmul_flops_per_s("float32"))
# matmul_bfloat16 <- max(matmul_bfloat16, kerasdist$matmul_flops_per_s("bfloat16"))
# limit <- c(float32 = matmul_float32 / flops$total, bfloat16 = matmul_bfloat16 / flops$total)
# cat(sprintf("matmul throughput: %s GFLOP/s float32, %s GFLOP/s bfloat16 (%.1fx)\n",
#             format(round(matmul_float32 / 1e9), big.mark = ","), format(round(matmul_bfloat16 / 1e9), big.mark = ","),
#             matmul_bfloat16 / matmul_float32))
# cat(sprintf("limit: %s samples/s float32, %s samples/s bfloat16\n", format(round(limit[["float32"]]), big.mark = ","),
#             format(round(limit[["bfloat16"]]), big.mark = ",")))
# share <- speed / ifelse(grepl("bfloat16", names(speed)), limit[["bfloat16"]], limit[["float32"]])
# for (name in names(speed)) {
#   cat(sprintf("%-26s %8s samples/s = %5.1f%% of the limit\n", name, format(round(speed[[name]]), big.mark = ","),
#               100 * share[[name]]))
# }

# %% [markdown]
# **Predict, then run.** Can any setting exceed 100% of the limit? What would that say about the
# FLOP count or the measurement? (The check allows a quarter for other programs slowing the matmul
# measurement on a shared machine.)

# %% language="R"
# # Check: no setting beats the machine's limit, and the fastest uses more of it than the guide's fit.
# stopifnot(all(share < 1.25), share[["loop + XLA"]] > share[["fit (guide)"]])
# best <- names(which.max(speed))
# cat(sprintf("fastest setting: %s, %.1fx the guide's fit, %.0f%% of its limit\n", best,
#             speed[[best]] / speed[["fit (guide)"]], 100 * share[[best]]))

# %% [markdown]
# The fastest setting uses a good deal more of the limit than the guide's code, but not all of it:
# the FLOP count leaves out the optimizer's update, element-wise ops and memory traffic, and a batch
# of 64 makes small matrix products. A larger batch moves a step towards the limit (exercise 1).

# %% [markdown]
# ## What carries over to GPUs
#
# No GPU was measured for this course; this section reasons from the measurements above and lesson
# 3's **cost model** (assumptions, not measurements). Per-call overhead and unfused small ops matter
# even more on a GPU (a kernel launch per op), so `steps_per_execution` and XLA carry over, and
# Keras already turns `jit_compile = "auto"` on when a GPU is present. Tensor cores run float16 and
# (recent ones) bfloat16: use `mixed_float16` with loss scaling or `mixed_bfloat16`. Under a mixed
# policy the weights, and so the gradients that replicas all-reduce, stay float32 (checked below);
# faster compute leaves the all-reduce as it is, so the speed-up from more devices drops.

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # Gradient dtypes under mixed_bfloat16, and lesson 3's cost model with its assumed parameters.
# config_set_dtype_policy("mixed_bfloat16")
# bfloat16_mlp <- build_mlp()
# config_set_dtype_policy("float32")
# with(tf$GradientTape() %as% tape, {
#   bfloat16_loss <- bfloat16_mlp$loss(y_steps[1, ], bfloat16_mlp(x_steps[1, , ], training = TRUE))
# })
# gradient_dtypes <- sort(unique(vapply(tape$gradient(bfloat16_loss, bfloat16_mlp$trainable_variables),
#                                       function(g) g$dtype$name, character(1))))
# gradient_bytes <- 4 * mlp$count_params()
# cat(sprintf("gradients under mixed_bfloat16: ['%s'], %.2f MB per step\n", paste(gradient_dtypes, collapse = "', '"),
#             gradient_bytes / 1e6))
# model_compute_s <- 1e-3             # lesson 3's assumptions: one global batch of 4096 on one GPU,
# model_bandwidth_bytes_per_s <- 10e9  # a PCIe-class link,
# model_latency_s <- 10e-6            # latency per hop of the ring,
# model_input_s <- 0.1e-3             # input time not hidden by prefetching
# step_time <- function(n, compute_s) {
#   all_reduce <- if (n > 1) 2 * (n - 1) / n * gradient_bytes / model_bandwidth_bytes_per_s + 2 * (n - 1) * model_latency_s else 0
#   compute_s / n + all_reduce + model_input_s
# }
# for (compute_s in c(model_compute_s, model_compute_s / 2)) {
#   cat(sprintf("model, compute %.1f ms per step: 8 devices %.1fx as fast as 1\n", compute_s * 1e3,
#               step_time(1, compute_s) / step_time(8, compute_s)))
# }

# %% [markdown]
# Halving the compute makes one device twice as fast but lowers what 8 devices add. The *reasons*
# carry over from this CPU (overhead per call, unfused small ops, a FLOP limit a small batch does not
# reach); the *numbers* do not: measure on your own GPUs, side by side, before you trust any ratio.

# %% [markdown]
# ## Performance tips
#
# - **Measure the steady state, side by side, in one run**, and compare ratios, not absolute speeds.
# - **Run many steps per call** (`steps_per_execution`, or a loop in one `tf_function()`), then try
#   XLA; check the accuracy after the same epochs each time.
# - **Compute the limit** from the layer shapes and the measured matmul throughput.
# - **Use mixed precision where the hardware has it** and the matrix products dominate; keep the
#   logits and loss in float32; with float16, scale the loss.
# - **Time the parts alone** before optimizing one.

# %% [markdown]
# ## Summary
#
# - On one device the same model trained several times faster with many steps per call and XLA,
#   with the same accuracy after the same epochs.
# - One step's time splits into forward, backward, optimizer update and the host's overhead per
#   call; at one step per call the overhead is a large share.
# - FLOPs per sample from the layer shapes and the measured matmul throughput give the machine's
#   limit; even the fastest setting reaches only part of it at batch 64.
# - `mixed_bfloat16` needs no loss scaling; `mixed_float16` does, and `compile()` adds a
#   `LossScaleOptimizer`. Gradients stay float32.
# - On GPUs the reasons carry over, the numbers do not.

# %% [markdown]
# ## Exercises
#
# 1. Train loop + XLA in float32 and in `mixed_bfloat16` at a global batch of 1024. Does bfloat16
#    pay now? What share of the limit does each reach?
#
# <details><summary>Hint</summary>
#
# Set `batch_size <- 1024L` and call `train_with_kerasdist()` again; compare with `share`.
# </details>
#
# <details><summary>Solution</summary>
#
# ```r
# batch_size <- 1024L
# for (precision in c("float32", "mixed_bfloat16")) {
#   run <- train_with_kerasdist(TRUE, precision)
#   cat(precision, round(run$speed), run$speed / limit[[if (precision == "float32") "float32" else "bfloat16"]],
#       run$accuracy, "\n")
# }
# ```
# Both run closer to their limits than at batch 64, and bfloat16 gains more once the products dominate.
# </details>
#
# 2. Time the whole step at 1, 5 and 50 steps per call.
#
# <details><summary>Hint</summary>
#
# `steps_in_one_call(whole_step)` runs as many steps as batches you pass it: slice `x_steps[1:k, , ]`.
# </details>
#
# <details><summary>Solution</summary>
#
# ```r
# run <- steps_in_one_call(whole_step)
# for (k in c(1L, 5L, 50L)) cat(k, best_seconds(run, x_steps[1:k, , ], y_steps[1:k, ]) / k * 1e3, "ms per step\n")
# ```
# The time per step falls quickly from 1 to 5 steps per call, and little after.
# </details>
#
# 3. Compute the FLOPs per sample of a 784-1024-1024-10 MLP with `kerasdist$training_flops_per_sample()`.
#
# <details><summary>Hint</summary>
#
# Build it with `keras_model_sequential(input_shape = 784)` and three `layer_dense()` calls.
# </details>
#
# <details><summary>Solution</summary>
#
# ```r
# wide <- keras_model_sequential(input_shape = 784) |> layer_dense(1024, activation = "relu") |>
#   layer_dense(1024, activation = "relu") |> layer_dense(10)
# wide_flops <- kerasdist$training_flops_per_sample(wide)$total
# cat(wide_flops, "FLOPs per sample, limit", round(matmul_float32 / wide_flops), "samples/s\n")
# ```
# </details>
#
# Next: back to the [course map](../README.md).
