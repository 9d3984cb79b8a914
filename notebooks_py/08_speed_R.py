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
# This is the R twin of [08_speed.ipynb](08_speed.ipynb): the same sections, measurements and
# printed lines, written with the R packages keras3, tfdatasets and tensorflow, and reticulate for
# kerasdist's Python pieces. The notebook runs on a Python kernel; the R code lives in `%%R` cells
# (rpy2), and R draws the figures too.
#
# **What you'll learn**
#
# - a **ladder** of ways to train the same model on one device, measured side by side: `fit()` as
#   TensorFlow's guide writes it, many steps per call (`steps_per_execution`), XLA (`jit_compile`),
#   kerasdist's loop engine, Keras on JAX, and a hand-written `jax.lax.scan` epoch, in which no step
#   returns to the host (the practical limit of dispatch overhead);
# - what mixed precision is: `mixed_bfloat16`, and `mixed_float16` with its loss scaling
#   (`LossScaleOptimizer`, `optimizer$scale_loss()`);
# - where one step's time goes: forward, backward, optimizer update and the host's overhead per call,
#   each timed alone, as medians with their spread, and the input pipeline sharing the CPU's cores;
# - a **roofline** at the model's own shapes: each matrix product's FLOPs and bytes, the CPU's
#   measured matrix-product rates at those shapes and its memory bandwidth (a triad), the attainable
#   step time from both, and each rung's **MFU** (model FLOPs utilization);
# - what of this carries over to GPUs.
#
# **What you need**: lessons 1 and 3, R with keras3, tfdatasets and tensorflow, rpy2 and JAX in the
# kernel's Python environment (the project's virtualenv, with the `jax` extra that set-up installs),
# Debian's `dataset-fashion-mnist` package (set-up installs it as root; without it Keras downloads
# the files), and about 3 minutes on a 2-core CPU. Unlike the other lessons this one always trains
# on **Fashion-MNIST**: 70,000 real 28x28 photos of clothing in 10 classes (Zalando), in MNIST's
# format, a full-size data set that needs no network here. `bash scripts/run_notebooks.sh --r-twins`
# runs it again.

# %% [markdown]
# ## Introduction
#
# On this course's 2-core CPU, replicas share the cores, so lessons 3 and 4 honestly showed them
# *slower* than one device. Yet on that one device the same model trains at very different speeds
# depending only on how its steps are run. A step of the MNIST MLP on a batch of 64 is some tens of
# millions of floating-point operations, a fraction of a millisecond of matrix products; around them
# are the host calling a TensorFlow function, one kernel per op, and memory traffic between ops.
#
# This lesson measures that on a data set of full size: first the ladder of settings, then the parts
# of one step, then the machine's limits, so that every speed-up has a reason.

# %% [markdown]
# ## Setup
#
# The Python side loads rpy2's `%%R` magic and imports kerasdist (which keeps TensorFlow's start-up
# lines quiet) and Keras; R then attaches keras3 and friends, and reticulate uses this very Python
# process, so R and kerasdist's Python helpers share one Keras and one TensorFlow.
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
# # Attach keras3, tfdatasets, tensorflow and reticulate, then kerasdist's Python modules and the settings.
# library(keras3)
# library(tfdatasets, exclude = "shape")
# library(tensorflow, exclude = c("shape", "set_random_seed"))
# library(reticulate)
# kerasdist <- import("kerasdist")
# kd_data <- import("kerasdist.data")
# kd_speed <- import("kerasdist.measure.speed")
# speed_ladder <- import("kerasdist.measure.speed_ladder")
# library(kerasdist)  # the course's R package: this lesson's checked exercises
# ex <- kd_exercises("08")
# # KERASDIST_SPEED_DATA can name another source: the test suite runs the lesson on a small stand-in.
# data_source <- Sys.getenv("KERASDIST_SPEED_DATA", "fashion")
# epochs <- 3L                                   # every rung trains this many epochs; the first includes tracing
# batch_size <- speed_ladder$BATCH_SIZE          # 64
# steps_per_call <- speed_ladder$STEPS_PER_CALL  # 50: steps_per_execution of fit(), and of kerasdist's loop
# seed <- 0L

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # The data: Fashion-MNIST through Keras' own loader (kerasdist's load_mnist), split like full MNIST
# # and kept as NumPy arrays (convert = FALSE), so that no copy passes through R.
# data <- import("kerasdist", convert = FALSE)$load_mnist(data_source, seed = seed)
# n_train <- py_len(data$y_train)
# cat(sprintf("classes: %s\n", paste(unlist(kd_data$FASHION_CLASSES), collapse = ", ")))

# %% [markdown]
# ## The ladder: from the guide's `fit` to a `lax.scan` epoch
#
# Seven ways to train the same MLP (784-256-256-10, Adam 1e-3, batch 64) on the same data for the
# same epochs on one device, each rung removing some work around the arithmetic:
#
# | rung | what changes |
# |---|---|
# | `fit()`, as TensorFlow's distributed-training guide writes it | one `tf.function` call per step |
# | `fit()` with `steps_per_execution = 50` | 50 steps per call: the host's overhead is paid once per 50 steps |
# | `fit()` with `steps_per_execution = 50, jit_compile = TRUE` | and each step is compiled by XLA, which fuses ops |
# | kerasdist's loop engine | its own `tf.function` running 50 steps per call (lesson 5 needs it for multi-worker) |
# | kerasdist's loop engine + XLA | the whole step, gradients and Adam's update, compiled by XLA |
# | Keras on JAX, `fit()` with `steps_per_execution = 50` | the same Keras code on the JAX backend: each step compiled by XLA (`"auto"` resolves to on), but still dispatched from Python one step at a time |
# | a `jax.lax.scan` epoch | one compiled call per *epoch*: the data stays on the device and no step returns to the host |
#
# A rung's speed is its **steady state**: samples/s of the median epoch after the first (the first
# pays for tracing and compiling; with 3 epochs, the mean of the last two), counting training only
# (kerasdist's loop also validates after each epoch; that pass is not counted). Besides the change
# each row names, the rungs feed their batches differently: the `fit()` rungs shuffle images through
# a buffer of ten thousand as the guide does, kerasdist's loop shuffles indices and gathers whole
# batches, Keras on JAX slices the arrays in Python, and the scan gathers each batch inside its
# compiled step. `fit()` also trains the last, partial batch of an epoch, which the others drop.
#
# On JAX, `steps_per_execution` does not put several steps in one compiled call: Keras' JAX trainer
# (`_make_function` in `keras/src/backend/jax/trainer.py`) loops over them in Python, calling the
# jitted step once per step; it only calls the callbacks less often. The scan rung is the step that
# Keras leaves to you: one compiled call for a whole epoch.
#
# The three `fit()` rungs are written below in keras3: a `keras_model_sequential()`, a tfdatasets
# pipeline from tensor slices (cached, shuffled, batched) and an R callback that times each epoch
# with `Sys.time()`. The other four are Python code that R reaches through reticulate:
# `speed_ladder$measure()`, the very function that the Python lesson calls. The JAX rungs run in
# processes of their own: Keras chooses its backend once, before it loads, and the Keras that keras3
# drives in this notebook runs on TensorFlow.
#
# Keras' `jit_compile` defaults to `"auto"`. Which way `"auto"` goes is decided in Keras' source,
# printed below: on TensorFlow it is off on a machine without a GPU, **and off for any model built
# in a `tf.distribute` strategy's scope**, so the guide's code (built in `MirroredStrategy`'s scope)
# is not compiled by XLA even on GPUs.

# %% language="R"
# # How Keras resolves jit_compile = "auto" (keras/src/trainers/trainer.py), and what the guide's model chose here.
# guide_model <- function(...) {
#   model <- keras_model_sequential(input_shape = 784) |>
#     layer_dense(256, activation = "relu") |>
#     layer_dense(256, activation = "relu") |>
#     layer_dense(10)
#   model |> compile(loss = loss_sparse_categorical_crossentropy(from_logits = TRUE),
#                    optimizer = optimizer_adam(), metrics = "accuracy", ...)
# }
# trainer <- import("keras.src.trainers.trainer")
# cat(import("inspect")$getsource(py_get_attr(trainer$Trainer, "_resolve_auto_jit_compile")), "\n", sep = "")
# cat(sprintf("the guide's fit chose jit_compile=%s on this machine\n", guide_model()$jit_compile))

# %% language="R"
# # Every rung, one after another in this run (a bar across them). The fit() rungs in keras3, the others
# # through speed_ladder$measure(); each returns its epochs' seconds, samples per epoch and test accuracy.
# fit_rung <- function(steps_per_execution, jit_compile) {
#   set_random_seed(seed)
#   model <- guide_model(steps_per_execution = steps_per_execution, jit_compile = jit_compile)
#   train <- tensor_slices_dataset(tuple(data$x_train, data$y_train)) |>
#     dataset_cache() |>
#     dataset_shuffle(buffer_size = 1e4) |>
#     dataset_batch(batch_size)
#   epoch_seconds <- c()
#   started <- NULL
#   timer <- callback_lambda(
#     on_epoch_begin = function(epoch, logs) started <<- Sys.time(),
#     on_epoch_end = function(epoch, logs) {
#       epoch_seconds <<- c(epoch_seconds, as.numeric(difftime(Sys.time(), started, units = "secs")))
#     }
#   )
#   model |> fit(train, epochs = epochs, callbacks = list(timer), verbose = 0, shuffle = FALSE)
#   accuracy <- evaluate(model, data$x_test, data$y_test, batch_size = 1024, verbose = 0)[["accuracy"]]
#   list(epoch_seconds = epoch_seconds, samples_per_epoch = n_train, test_accuracy = accuracy)
# }
# # Samples/s of the median epoch after the first (speed_ladder.steady_samples_per_s, in R).
# steady_samples_per_s <- function(run) run$samples_per_epoch / median(unlist(run$epoch_seconds)[-1])
# runs <- list()
# progress <- import("keras")$utils$Progbar(length(speed_ladder$RUNGS), unit_name = "rung")
# for (name in names(speed_ladder$RUNGS)) {
#   setting <- speed_ladder$RUNGS[[name]]
#   runs[[name]] <- if (setting$kind == "fit" && setting$backend == "tensorflow") {
#     fit_rung(setting$steps_per_execution, setting$jit_compile)
#   } else {
#     speed_ladder$measure(name, data_source, epochs, data = data)
#   }
#   progress$add(1L)
# }
# speed <- vapply(runs, steady_samples_per_s, numeric(1))
# accuracy <- vapply(runs, function(run) run$test_accuracy, numeric(1))
# limit_rung <- speed_ladder$LIMIT_RUNG
# comma <- function(x) formatC(x, format = "f", digits = 0, big.mark = ",")
# for (name in names(speed)) {
#   cat(sprintf("%-34s %8s samples/s  %4.1fx the guide's  %4.2fx the scan epoch  test accuracy %.3f\n", name,
#               comma(speed[[name]]), speed[[name]] / speed[["fit (guide)"]], speed[[name]] / speed[[limit_rung]],
#               accuracy[[name]]))
# }

# %% [markdown]
# The `lax.scan` rung is shown in full below (it is Python: JAX has no R interface here): a training
# step written with Keras' stateless API (`model.stateless_call`, `optimizer.stateless_apply`), and
# `jax.lax.scan` running it over every batch of an epoch inside one `jax.jit` call, gathering each
# batch from the arrays already on the device.

# %% language="R"
# cat(import("inspect")$getsource(py_get_attr(speed_ladder, "scan_epoch")), "\n", sep = "")

# %% [markdown]
# **Predict, then run.** Which rung is fastest, and how far below the scan epoch is the guide's
# `fit()`? Does any rung buy its speed with a worse model after the same epochs? Decide from the
# table above, then run the check.

# %% language="R"
# # Check: every rung reaches about the same accuracy (speeds are printed, not asserted: they vary with
# # what else the machine runs).
# stopifnot(max(accuracy) - min(accuracy) < 0.03)
# fastest <- names(which.max(speed))
# cat(sprintf("fastest rung: %s; the guide's fit runs at %.2fx the scan epoch; test accuracies within %.3f of each other\n",
#             fastest, speed[["fit (guide)"]] / speed[[limit_rung]], max(accuracy) - min(accuracy)))

# %% magic_args="-w 9 -h 3.8 --units in -r 100" language="R"
# # The ladder on one chart: each rung's speed, and its ratio to the scan epoch.
# dir.create("results/figures", recursive = TRUE, showWarnings = FALSE)  # beside the checkpoints, outside version control
# draw_ladder <- function() {
#   order <- rev(names(speed))
#   backend <- vapply(order, function(name) speed_ladder$RUNGS[[name]]$backend, character(1))
#   old <- par(mar = c(4.5, 15, 3, 1))
#   on.exit(par(old))
#   centers <- barplot(speed[order], horiz = TRUE, las = 1, cex.names = 0.75, xlim = c(0, 1.4 * max(speed)), xaxt = "n",
#                      col = ifelse(backend == "jax", "forestgreen", "steelblue"), cex.lab = 0.85,
#                      xlab = "training samples/s in the steady state (one device, batch 64; blue TensorFlow, green JAX)",
#                      main = sprintf("One MLP, %d epochs per rung, measured in one run", epochs), cex.main = 0.9)
#   ticks <- pretty(c(0, 1.4 * max(speed)))
#   axis(1, at = ticks, labels = comma(ticks), cex.axis = 0.8)
#   text(speed[order], centers, sprintf("%s/s = %.2fx scan", comma(speed[order]), speed[order] / speed[[limit_rung]]),
#        pos = 4, cex = 0.7)
# }
# png("results/figures/08_speed_R_ladder.png", width = 9, height = 3.8, units = "in", res = 100)
# draw_ladder()
# invisible(dev.off())
# draw_ladder()

# %% [markdown]
# Many steps per call and XLA usually remove work around the arithmetic, though not always (on a CPU,
# XLA's kernels are not always faster than TensorFlow's). The scan epoch removes what is left of the
# host: no Python or R, no `tf.data` iterator and no TensorFlow executor between steps. It is a limit
# of dispatch overhead, not of speed: it runs JAX's own XLA kernels and gathers its batches inside the
# step, so a TensorFlow rung with little overhead left can come out at or above it. The rest of a
# rung's time is the step itself, which the next sections take apart. On a shared machine one rung
# can come out slower than it should (another program took the cores during its epochs): compare the
# bars with that in mind, and rerun the cell before trusting a small difference. The accuracies differ
# by the initial weights and the data order each rung draws, and by rounding (XLA and other kernels
# sum in other orders): none of these settings changes what is computed.

# %% [markdown]
# ### Exercise q1: read your ladder
#
# From your own ladder, set `fastest_rung` to the name of the rung that trained fastest (among the ladder's rungs, the names of `runs`: the mixed-precision section below adds bfloat16 rungs to `speed`) and `times_the_guide` to how many times the guide's `fit()` speed it reached (its samples/s divided by the guide's, computed from `speed`, not typed from the rounded printout). The check recomputes both from your `runs`, the numbers this run measured, not from any fixed figure.
#
# Complete the cell, then run the check below it; `kd_hint(ex$q1)` gives a hint, `kd_solution(ex$q1)` the solution.
#
# <details><summary>Solution</summary>
#
# `speed` maps each rung to its steady-state samples/s, so the fastest rung is the one with the largest value, and its ratio to `"fit (guide)"` says how much work around the arithmetic the other settings removed. Which rung wins depends on the machine; the reasons are in the rest of the lesson.
#
# </details>

# %% nbgrader={"grade": false, "grade_id": "q1_answer", "locked": false, "schema_version": 3, "solution": true, "task": false} language="R"
# fastest_rung <- NULL     # the name of the fastest rung in your ladder
# times_the_guide <- NULL  # how many times the guide's fit() speed it reached
# ### BEGIN SOLUTION
# fastest_rung <- names(which.max(speed[names(runs)]))
# times_the_guide <- speed[[fastest_rung]] / speed[["fit (guide)"]]
# ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "q1", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false} language="R"
# # NBVAL_CHECK_OUTPUT
# kd_check(ex$q1)
# ### BEGIN HIDDEN TESTS
# kd_assert_correct(ex$q1)
# ### END HIDDEN TESTS

# %% [markdown]
# ## Mixed precision
#
# **Mixed precision** computes the layers in a 16-bit float type while the weights (and the
# optimizer's state) stay in float32. Keras sets it with a *dtype policy*:
# `config_set_dtype_policy("mixed_bfloat16")` makes every layer built afterwards compute in bfloat16
# and keep float32 variables. This lesson's model, like kerasdist's, keeps its last layer (the
# logits) in float32 (`layer_dense(10, dtype = "float32")`), as Keras' guide advises, so the loss
# and its statistics stay in float32.
#
# Two 16-bit types exist, and they differ where it matters for training:
#
# | type | exponent bits | mantissa bits | smallest normal number | smallest number at all | where it is fast |
# |---|---|---|---|---|---|
# | bfloat16 | 8 (as float32) | 7 | ~1e-38 | ~9e-41 | CPUs with AVX512_BF16/AMX, TPUs, recent GPUs |
# | float16 | 5 | 10 | ~6e-5 | ~6e-8 | GPUs (tensor cores), CPUs with AVX512_FP16/AMX-FP16 |
#
# bfloat16 keeps float32's range, so small gradients survive and `mixed_bfloat16` needs nothing else.
# float16 does not: below ~6e-5 its numbers lose precision (subnormals), and below about half of
# ~6e-8 they round to zero. That is why `mixed_float16` needs **loss scaling**: multiply the loss by
# a large factor before the backward pass (so the gradients are large enough for float16), then
# divide the gradients by it before the update; when a gradient overflows to inf, skip that step
# and lower the factor. keras3's `compile()` wraps the optimizer in a `LossScaleOptimizer` that does
# this whenever the model's policy is `mixed_float16` and `auto_scale_loss` is left at its default,
# `TRUE` (see `Trainer.compile` in `keras/src/trainers/trainer.py`); a custom loop must call `optimizer$scale_loss(loss)` before
# taking the gradients (the `LossScaleOptimizer` unscales them in `apply_gradients`), as kerasdist's
# loop does. The cell below shows all of that on this machine.

# %% language="R"
# # Which bfloat16 instructions this CPU has; what float16 and bfloat16 make of small gradients; what
# # compile() does to the optimizer under mixed_float16 (building a model needs no GPU).
# bf16_instructions <- unlist(kerasdist$cpu_bfloat16_instructions())
# if (length(bf16_instructions) > 0) {
#   cat(sprintf("this CPU has bfloat16 instructions: %s\n", paste(bf16_instructions, collapse = ", ")))
# } else {
#   cat("this CPU lacks bfloat16 instructions (no avx512_bf16 or amx_bf16): TensorFlow emulates",
#       "bfloat16 with float32 and it is slower, not faster\n")
# }
# for (small_gradient in c(1e-6, 1e-4) / batch_size) {
#   for (dtype in c("float16", "bfloat16")) {
#     # Back to float32 (exactly) before R reads it: R has no half-precision floats.
#     value <- as.numeric(tf$cast(tf$cast(small_gradient, dtype), "float32"))
#     cat(sprintf("a gradient of %.3e in %s: %.3e\n", small_gradient, dtype, value))
#   }
# }
# # The MLP as kerasdist builds it (kerasdist.model.build_model), in keras3: float32 logits, Adam's slots built.
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
# config_set_dtype_policy("mixed_float16")
# float16_model <- tryCatch(build_mlp(), finally = config_set_dtype_policy("float32"))
# hidden <- float16_model$layers[[2]]
# cat(sprintf(paste0("under mixed_float16: hidden layers compute in %s, keep %s weights; logits in %s; ",
#                    "compile() made the optimizer a %s (initial scale %.0f)\n"),
#             hidden$compute_dtype, hidden$variable_dtype, float16_model$layers[[length(float16_model$layers)]]$compute_dtype,
#             py_get_attr(py_get_attr(float16_model$optimizer, "__class__"), "__name__"),
#             float16_model$optimizer$initial_scale))

# %% [markdown]
# Now kerasdist's loop again, without and with XLA, under `mixed_bfloat16`, in the same run as the
# ladder:

# %% language="R"
# # kerasdist's loop, without and with XLA, under mixed_bfloat16.
# for (name in c("kerasdist loop", "kerasdist loop + XLA")) {
#   run <- speed_ladder$measure(name, data_source, epochs, data = data, precision = "mixed_bfloat16")
#   speed[[paste0(name, ", bfloat16")]] <- steady_samples_per_s(run)
#   accuracy[[paste0(name, ", bfloat16")]] <- run$test_accuracy
# }
# for (name in c("kerasdist loop", "kerasdist loop, bfloat16", "kerasdist loop + XLA", "kerasdist loop + XLA, bfloat16")) {
#   cat(sprintf("%-32s %8s samples/s  test accuracy %.3f\n", name, comma(speed[[name]]), accuracy[[name]]))
# }

# %% [markdown]
# Whether bfloat16 pays here depends on the CPU (the instructions printed above) and on where the
# step's time goes: the sections below measure the bfloat16 matrix products of TensorFlow's kernels
# and of XLA's, and a step whose time is not in its matrix products gains little from faster ones.

# %% [markdown]
# ## Where a step's time goes
#
# Each part of one step is timed alone, on batches already in memory, in a `tf_function()` that runs
# `steps_per_call` steps per call (so the host's overhead is paid once per 50 steps):
#
# - **forward**: the model's logits and loss;
# - **forward + backward**: and the gradients of all weights;
# - **optimizer update**: Adam's update of all weights from fixed gradients, alone;
# - **whole step**: forward, backward and update;
# - the same whole step at **one step per call**, as the guide's `fit()` runs it: the difference is
#   the host's overhead per call (here R's loop calling through reticulate, `tf.function` dispatch,
#   one executor run);
# - the same whole step compiled by **XLA**;
# - the **input pipeline** alone: kerasdist's `tf.data` pipeline (shuffle, batch, gather, prefetch),
#   drained without training.
#
# Each part is called eleven times after a warm-up call, each call timed with `Sys.time()` (which
# resolves microseconds); the tables give the **median** and the spread (25th to 75th percentile) of
# those calls, as `kerasdist.measure.speed.time_calls` does in the Python lesson. On a shared machine a few
# calls are slowed down by other programs: the median ignores them, the spread shows them.

# %% language="R"
# # Time each part of a step alone, per step, in milliseconds (median and spread of 11 calls).
# time_calls <- function(f, ..., rounds = 11L) {
#   call <- function() {  # .numpy() waits for the result: the time includes finishing the work
#     result <- f(...)
#     if (inherits(result, "python.builtin.object") && py_has_attr(result, "numpy")) result$numpy()
#   }
#   call()  # warm-up (and tracing)
#   seconds <- vapply(seq_len(rounds), function(i) {
#     started <- Sys.time()
#     call()
#     as.numeric(difftime(Sys.time(), started, units = "secs"))
#   }, numeric(1))
#   # Type 6 is the quantile of Python's statistics.quantiles(), which time_calls uses.
#   setNames(quantile(seconds, c(0.5, 0.25, 0.75), type = 6, names = FALSE), c("median", "low", "high"))
# }
# set_random_seed(seed)
# mlp <- build_mlp()
# loss_function <- mlp$loss
# optimizer <- mlp$optimizer
# np <- import("numpy", convert = FALSE)
# timed <- np$remainder(np$arange(steps_per_call * batch_size), n_train)  # the first 50 batches' samples
# x_steps <- tf$constant(py_get_item(data$x_train, timed)$reshape(tuple(steps_per_call, batch_size, -1L)))
# y_steps <- tf$constant(py_get_item(data$y_train, timed)$reshape(tuple(steps_per_call, batch_size)))
# fixed_gradients <- lapply(mlp$trainable_variables, function(variable) tf$fill(variable$shape, 1e-3))
# first <- function(n) import_builtins()$slice(NULL, n)  # Python's [:n]
# forward <- function(x, y) loss_function(y, mlp(x, training = TRUE))
# forward_backward <- function(x, y) {
#   with(tf$GradientTape() %as% tape, loss <- forward(x, y))
#   gradients <- tape$gradient(loss, mlp$trainable_variables)
#   # Return a number made of every gradient: TensorFlow prunes computations that no output uses.
#   loss + tf$add_n(lapply(gradients, function(g) tf$reduce_sum(py_get_item(g, first(1L)))))
# }
# optimizer_update <- function(x, y) {
#   optimizer$apply(fixed_gradients, mlp$trainable_variables)
#   tf$constant(0)
# }
# whole_step <- function(x, y) {
#   with(tf$GradientTape() %as% tape, loss <- forward(x, y))
#   optimizer$apply(tape$gradient(loss, mlp$trainable_variables), mlp$trainable_variables)
#   loss
# }
# # A tf_function() running `part` on each of the batches it is given, in one call (R's for over
# # tf$range() becomes a TensorFlow loop, by tfautograph).
# steps_in_one_call <- function(part, jit_compile = FALSE) {
#   tf_function(function(xs, ys) {
#     total <- tf$constant(0)
#     for (i in tf$range(tf$shape(xs)[1])) total <- total + part(py_get_item(xs, i), py_get_item(ys, i))
#     total
#   }, jit_compile = jit_compile)
# }
# one_step_per_call <- tf_function(whole_step)
# x_batches <- tf$unstack(x_steps)  # sliced once, as fit()'s iterator hands them out
# y_batches <- tf$unstack(y_steps)
# step_by_step <- function(xs, ys) {
#   for (i in seq_along(x_batches)) one_step_per_call(x_batches[[i]], y_batches[[i]])
# }
# pipeline <- kd_data$train_dataset(data$x_train, data$y_train, batch_size, seed, 0L, 1L)
# batches_per_epoch <- n_train %/% batch_size
# drain <- tf_function(function() pipeline$reduce(tf$constant(0), function(total, batch) total + batch[[1]][1, 1]))
# per_step_ms <- function(timing, steps) timing / steps * 1e3
# timings <- list(  # milliseconds per step
#   "input pipeline" = per_step_ms(time_calls(drain), batches_per_epoch),
#   "forward" = per_step_ms(time_calls(steps_in_one_call(forward), x_steps, y_steps), steps_per_call),
#   "forward + backward" = per_step_ms(time_calls(steps_in_one_call(forward_backward), x_steps, y_steps),
#                                      steps_per_call),
#   "optimizer update" = per_step_ms(time_calls(steps_in_one_call(optimizer_update), x_steps, y_steps),
#                                    steps_per_call),
#   "whole step" = per_step_ms(time_calls(steps_in_one_call(whole_step), x_steps, y_steps), steps_per_call),
#   "whole step, 1 per call" = per_step_ms(time_calls(step_by_step, x_steps, y_steps), steps_per_call),
#   "whole step, XLA" = per_step_ms(time_calls(steps_in_one_call(whole_step, jit_compile = TRUE), x_steps, y_steps),
#                                   steps_per_call)
# )
# for (name in names(timings)) {
#   timing <- timings[[name]]
#   cat(sprintf("%-24s %6.3f ms per step (spread %.3f to %.3f ms)\n", name, timing[["median"]], timing[["low"]],
#               timing[["high"]]))
# }
# x_one <- py_get_item(x_steps, 0L)
# y_one <- py_get_item(y_steps, 0L)
# graphs <- lapply(list("forward" = forward, "forward + backward" = forward_backward,
#                       "optimizer update" = optimizer_update, "whole step" = whole_step),
#                  function(part) tf_function(part)$get_concrete_function(x_one, y_one)$graph$get_operations())
# # An op is "large" when one of its outputs holds more than 1,000 numbers: a pass over an array in memory.
# is_large <- function(op) any(vapply(op$outputs, function(output) {
#   numbers <- output$shape$num_elements()  # NULL where the shape is not known
#   !is.null(numbers) && numbers > 1000
# }, logical(1)))
# large <- vapply(graphs, function(graph) sum(vapply(graph, is_large, logical(1))), integer(1))
# cat(sprintf("ops in one step's graph: %s\n",
#             paste(sprintf("%s %d (%d large)", names(graphs), lengths(graphs), large), collapse = ", ")))

# %% [markdown]
# The parts were timed alone, so they need not add up; the next cell checks how close they come.
# The op counts say why the update is slow for its arithmetic: Keras applies Adam variable by variable,
# a few element-wise ops per variable (the "large" ones, each a pass over a weight-sized array in
# memory) plus scalar bookkeeping (the step count, the bias corrections, reading variables), and each
# op is a kernel that TensorFlow's executor schedules.
#
# **Predict, then run.** Is the host's overhead per call a small or a large part of a step run one
# per call? Which part is largest at 50 steps per call: the matrix products (forward, backward) or
# the update? Decide from the numbers above, then run the cell.

# %% language="R"
# # The parts against the whole, and one step per call against 50 (printed: the shares move on a busy machine).
# median_ms <- vapply(timings, function(timing) timing[["median"]], numeric(1))
# parts <- c(
#   "forward" = median_ms[["forward"]],
#   "backward" = median_ms[["forward + backward"]] - median_ms[["forward"]],
#   "optimizer update" = median_ms[["optimizer update"]],
#   "host overhead per call" = median_ms[["whole step, 1 per call"]] - median_ms[["whole step"]]
# )
# parts[["rest (not in the parts timed alone)"]] <- max(0, median_ms[["whole step, 1 per call"]] - sum(parts))
# cat(sprintf("forward + backward + update alone: %.3f ms; the whole step: %.3f ms\n",
#             median_ms[["forward + backward"]] + median_ms[["optimizer update"]], median_ms[["whole step"]]))
# cat(sprintf("1 step per call: %.1fx the time of 50 per call\n",
#             median_ms[["whole step, 1 per call"]] / median_ms[["whole step"]]))
# cat(sprintf("shares of one step at 1 step per call: %s\n",
#             paste(sprintf("%s %.0f%%", names(parts), 100 * parts / median_ms[["whole step, 1 per call"]]),
#                   collapse = ", ")))

# %% [markdown]
# **The input pipeline shares the cores.** On a GPU machine the input pipeline runs on the CPU while
# the GPU computes, so prefetching hides it whenever it is faster than a step. Here there is nothing
# idle to hide it on: the pipeline's threads take CPU time from the step. The XLA-compiled step timed
# alone (its batches already in memory, 50 steps in one compiled loop) against a step of kerasdist's
# loop + XLA rung bounds what this costs: the rung reads its batches from that pipeline, and it also
# calls its compiled step once per step from a TensorFlow loop and keeps per-step statistics, so the
# difference is the pipeline's cost at most:

# %% language="R"
# # The XLA step alone against the same step in training (the loop + XLA rung of the ladder), per step.
# in_training_ms <- batch_size / speed[["kerasdist loop + XLA"]] * 1e3
# cat(sprintf("XLA step alone %.3f ms; in training %.3f ms per step; the input pipeline alone takes %.3f ms per batch (wall time, drained alone)\n",
#             median_ms[["whole step, XLA"]], in_training_ms, median_ms[["input pipeline"]]))

# %% magic_args="-w 11 -h 3.6 --units in -r 100" language="R"
# # Draw one step's time, part by part, beside the whole step compiled by XLA and the input pipeline,
# # with each median's spread as an error bar.
# bars <- c("1 step per call (parts)", "50 steps per call", "50 steps per call, XLA", "input pipeline alone")
# wholes <- c("whole step", "whole step, XLA", "input pipeline")
# stack <- matrix(0, nrow = length(parts) + length(wholes), ncol = length(bars), dimnames = list(c(names(parts), wholes), bars))
# stack[names(parts), bars[1]] <- parts
# for (i in seq_along(wholes)) stack[wholes[i], bars[i + 1]] <- median_ms[[wholes[i]]]
# colors <- c("steelblue", "lightblue", "orange", "firebrick", "khaki", "grey", "forestgreen", "olivedrab")
# draw_step_time <- function() {
#   old <- par(mar = c(4.5, 11, 3, 13))
#   on.exit(par(old))
#   centers <- barplot(stack, horiz = TRUE, las = 1, cex.names = 0.8, col = colors,
#                      xlim = c(0, 1.05 * max(sum(parts), timings[["whole step, 1 per call"]][["high"]])),
#                      xlab = "milliseconds per step of 64 samples (median of 11 calls, measured alone)",
#                      main = "Where one training step's time goes")
#   for (i in seq_along(wholes)) {
#     timing <- timings[[wholes[i]]]
#     arrows(timing[["low"]], centers[i + 1], timing[["high"]], centers[i + 1], angle = 90, code = 3, length = 0.04)
#   }
#   legend(par("usr")[2], mean(par("usr")[3:4]), rownames(stack), fill = colors, cex = 0.75, xjust = 0, yjust = 0.5,
#          xpd = NA, bty = "n")
# }
# png("results/figures/08_speed_R_step_time.png", width = 11, height = 3.6, units = "in", res = 100)
# draw_step_time()
# invisible(dev.off())
# draw_step_time()

# %% [markdown]
# Read the bars from the bottom. At one step per call, the host's work around each step is paid every
# step; `steps_per_execution` and the loop engine pay it once per 50 steps. The backward pass has
# 1.25 times the forward pass's FLOPs for this MLP (the next section counts them: the first layer,
# three quarters of the forward FLOPs, needs no input gradient). Adam's update is little arithmetic
# but many small element-wise ops over every weight. XLA fuses the update's ops, and the bias and
# ReLU ops, into few kernels; the XLA bar shows what that saves.

# %% [markdown]
# ### Exercise q2: the host's overhead in your timings
#
# From your own timings, set `overhead_ms` to the host's overhead per step when one step runs per call (in milliseconds, from the medians in `median_ms`), and `largest_part` to the name of the largest part of `parts`. The check recomputes both from your `timings`.
#
# Complete the cell, then run the check below it; `kd_hint(ex$q2)` gives a hint, `kd_solution(ex$q2)` the solution.
#
# <details><summary>Solution</summary>
#
# The same whole step was timed at 50 steps per call and at one step per call; the difference per step is what the host does around each call (R calling through reticulate, `tf.function` dispatch, one executor run). At 50 steps per call each step carries a fiftieth of it, which is why `steps_per_execution` and the loop engine win on the ladder whenever that overhead is a large part of a step.
#
# </details>

# %% nbgrader={"grade": false, "grade_id": "q2_answer", "locked": false, "schema_version": 3, "solution": true, "task": false} language="R"
# overhead_ms <- NULL   # the host's overhead per step at one step per call, in ms
# largest_part <- NULL  # the name of the largest part of a step at one step per call
# ### BEGIN SOLUTION
# overhead_ms <- median_ms[["whole step, 1 per call"]] - median_ms[["whole step"]]
# largest_part <- names(which.max(parts))
# ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "q2", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false} language="R"
# # NBVAL_CHECK_OUTPUT
# kd_check(ex$q2)
# ### BEGIN HIDDEN TESTS
# kd_assert_correct(ex$q2)
# ### END HIDDEN TESTS

# %% [markdown]
# ## The machine's limit: a roofline at the model's shapes
#
# A Dense layer with an `n_in x n_out` kernel multiplies each sample by its kernel: `2 n_in n_out`
# FLOPs (a multiply and an add per weight). Training adds the backward pass: as much again for the
# kernel's gradient, and as much again for the gradient of the layer's input, which the first layer
# does not need.

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # FLOPs per sample, layer by layer, from the kernels' shapes.
# flops <- kerasdist$training_flops_per_sample(mlp)
# for (layer in mlp$layers) {
#   if (!py_has_attr(layer, "kernel")) next  # the input layer
#   shape <- unlist(layer$kernel$shape$as_list())
#   cat(sprintf("Dense %3d x %3d: %7s FLOPs forward per sample\n", shape[1], shape[2], comma(2 * shape[1] * shape[2])))
# }
# cat(sprintf("training FLOPs per sample: %s forward + %s backward = %s (backward %.2fx forward)\n",
#             comma(flops$forward), comma(flops$backward), comma(flops$total), flops$backward / flops$forward))

# %% [markdown]
# A **roofline** bounds each kernel by two limits of the machine: its rate of arithmetic (FLOP/s) and
# its memory bandwidth (bytes/s). A kernel that does `F` FLOPs and must move `B` bytes takes at least
# `max(F / P, B / BW)`; its **arithmetic intensity** `F / B` says which limit binds. Here `P` is not
# a vendor's peak but the best rate this CPU reaches **at each kernel's own shape** (the faster of
# TensorFlow's kernel and XLA's), and `BW` is main memory's bandwidth, measured by STREAM's triad
# (`a = b + 3 c`, on every core). Adam's update is the memory-bound part: per weight it reads the
# gradient, both moments and the weight and writes three of them back, about 12 FLOPs for 28 bytes.
# (Its state, a few MB here, can stay in the CPU's caches, which are faster than main memory.)
# The step's matrix products, with the batch of 64, from `kerasdist.measure.speed`'s `step_kernels()`:

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # One step's matrix products: FLOPs, the fewest bytes they must move (float32), arithmetic intensity.
# step <- kd_speed$step_kernels(mlp, batch_size)
# for (kernel in step) {
#   cat(sprintf("%-24s (%3d x %3d) @ (%3d x %3d): %6.2f MFLOP, %5.3f MB, %5.1f FLOP/byte\n", kernel$name,
#               kernel$m, kernel$k, kernel$k, kernel$n, kernel$flops / 1e6, kernel$bytes / 1e6,
#               kernel$flops / kernel$bytes))
# }
# n_weights <- mlp$count_params()
# adam_bytes <- kd_speed$ADAM_BYTES_PER_WEIGHT * n_weights
# cat(sprintf("Adam's update, fused: %.2f MB for %s weights, %.2f FLOP/byte (about 12 FLOPs per weight)\n",
#             adam_bytes / 1e6, comma(n_weights), 12 * n_weights / adam_bytes))
# stopifnot(sum(vapply(step, function(kernel) kernel$flops, numeric(1))) == batch_size * flops$total)

# %% language="R"
# # The machine: each shape's best float32 matrix-product rate (the faster of TensorFlow's kernel and XLA's,
# # in their faster calls), a large product's rate, and the triad's memory bandwidth; then the attainable
# # time of one step from both.
# shape_of <- function(kernel) paste(kernel$m, kernel$k, kernel$n)
# rate <- list()
# for (kernel in step) {
#   if (is.null(rate[[shape_of(kernel)]])) {
#     rate[[shape_of(kernel)]] <- max(vapply(c(FALSE, TRUE), function(jit) {
#       kd_speed$gemm_flops_per_s(kernel$m, kernel$k, kernel$n, jit_compile = jit)[[3]]  # (median, low, high)
#     }, numeric(1)))
#   }
# }
# peak_flops <- kerasdist$matmul_flops_per_s("float32")
# bandwidth <- setNames(unlist(kd_speed$memory_bytes_per_s()), c("median", "low", "high"))
# cat(sprintf("peak: %s GFLOP/s float32 (1024 x 1024 products); memory: %.1f GB/s (triad, spread %.1f to %.1f)\n",
#             comma(peak_flops / 1e9), bandwidth[["median"]] / 1e9, bandwidth[["low"]] / 1e9, bandwidth[["high"]] / 1e9))
# ridge <- peak_flops / bandwidth[["median"]]  # the intensity where the two limits meet
# cat(sprintf("ridge point: %.1f FLOP/byte; a kernel of lower intensity is memory-bound at the peak\n", ridge))
# attainable_s <- 0
# for (kernel in step) {
#   kernel_rate <- rate[[shape_of(kernel)]]
#   attainable_s <- attainable_s + max(kernel$flops / kernel_rate, kernel$bytes / bandwidth[["median"]])
#   side <- if (kernel$flops / kernel$bytes < ridge) "memory" else "compute"
#   cat(sprintf("%-24s %6.1f GFLOP/s measured at its shape (%3.0f%% of peak); %s side of the ridge\n", kernel$name,
#               kernel_rate / 1e9, 100 * kernel_rate / peak_flops, side))
# }
# adam_s <- adam_bytes / bandwidth[["median"]]
# attainable_s <- attainable_s + adam_s
# cat(sprintf("attainable step: %.3f ms (Adam's update %.3f ms of it) = %s samples/s; at the peak rate alone: %.3f ms\n",
#             attainable_s * 1e3, adam_s * 1e3, comma(batch_size / attainable_s),
#             batch_size * flops$total / peak_flops * 1e3))

# %% magic_args="-w 8 -h 4.2 --units in -r 100" language="R"
# # The roofline chart: the machine's two limits, and each kernel where its intensity and measured rate put it.
# intensity <- 10^seq(-1, 3, length.out = 200)
# roof <- pmin(peak_flops, intensity * bandwidth[["median"]]) / 1e9
# kernel_names <- vapply(step, function(kernel) kernel$name, character(1))
# kernel_intensity <- vapply(step, function(kernel) kernel$flops / kernel$bytes, numeric(1))
# kernel_gflops <- vapply(step, function(kernel) rate[[shape_of(kernel)]] / 1e9, numeric(1))
# marks <- list(col = rep(c("steelblue", "darkorange", "forestgreen", "firebrick", "purple", "brown", "orchid", "grey40"),
#                         length.out = length(step)),
#               pch = rep(c(15:18, 0:3), length.out = length(step)))
# draw_roofline <- function() {
#   old <- par(mar = c(4.5, 4.5, 3, 1))
#   on.exit(par(old))
#   plot(intensity, roof, type = "l", log = "xy", ylim = range(c(roof, kernel_gflops)),
#        xlab = "arithmetic intensity (FLOP/byte)", ylab = "GFLOP/s",
#        main = "Roofline of this CPU at the MLP's shapes (batch 64, float32)", cex.main = 0.9)
#   points(kernel_intensity, kernel_gflops, pch = marks$pch, col = marks$col, cex = 1.2)
#   abline(v = 12 * n_weights / adam_bytes, col = "orange", lty = 3)
#   legend("topleft", kernel_names, pch = marks$pch, col = marks$col, cex = 0.65, bg = "white")
#   legend("bottomright", c("roofline: min(peak, intensity x bandwidth)", "Adam's update (intensity)"),
#          col = c("black", "orange"), lty = c(1, 3), cex = 0.7, bg = "white")
# }
# png("results/figures/08_speed_R_roofline.png", width = 8, height = 4.2, units = "in", res = 100)
# draw_roofline()
# invisible(dev.off())
# draw_roofline()

# %% [markdown]
# **MFU** (model FLOPs utilization) is the share of the peak that a run's *useful* FLOPs reach:
# samples/s times the model's FLOPs per sample, divided by the peak rate. It counts only the model's
# matrix products, so the update, the overhead and the pipeline all lower it. The roofline's
# attainable step, divided the same way, is what a step made of these kernels, each as fast as it ran
# alone, would reach: an estimate, not a law. Each kernel timed alone pays for its own loop iteration
# and for reading its result (for the smallest products, layer 3's, that is most of their time),
# which a step fused by XLA does not, and the update's state (a few MB) may sit in the caches, faster
# than the triad's main memory; so a fused rung can come out above it. The peak is this CPU's measured
# rate on large products, not the vendor's nominal peak.

# %% language="R"
# # Each rung's MFU against the measured peak, beside the roofline's attainable share.
# attainable_mfu <- batch_size / attainable_s * flops$total / peak_flops
# mfu <- speed[names(runs)] * flops$total / peak_flops
# for (name in names(runs)) cat(sprintf("%-34s MFU %4.1f%%\n", name, 100 * mfu[[name]]))
# cat(sprintf("%-34s MFU %4.1f%%\n", "attainable (roofline)", 100 * attainable_mfu))

# %% [markdown]
# **Predict, then run.** Can any rung reach an MFU of 100%? If one did, what would that say about
# the FLOP count or the peak? How close to the attainable estimate does the fastest rung come?
# Decide, then run the cell.

# %% language="R"
# # The fastest rung against the attainable estimate (printed, not asserted: on a busy machine the peak and
# # the rates measured alone move more than training does).
# fastest <- names(which.max(mfu))
# cat(sprintf("the fastest rung, %s, reaches %.0f%% of the attainable estimate\n", fastest,
#             100 * mfu[[fastest]] / attainable_mfu))

# %% [markdown]
# Now the bfloat16 limit. The same product at the first layer's shape, and a large one, in float32
# and bfloat16, with TensorFlow's kernel (what the loop without XLA runs) and with XLA's (what the
# `+ XLA` rungs run):

# %% language="R"
# # The largest kernel's shape and a large product, float32 and bfloat16, TensorFlow's kernel and XLA's.
# for (shape in list(c(batch_size, 784L, 256L), c(1024L, 1024L, 1024L))) {
#   rates <- c()
#   for (dtype in c("float32", "bfloat16")) {
#     for (jit in c(FALSE, TRUE)) {
#       value <- kd_speed$gemm_flops_per_s(shape[1], shape[2], shape[3], dtype = dtype, jit_compile = jit,
#                                          products = 10L)[[1]]
#       rates <- c(rates, sprintf("%s %s %s GFLOP/s", dtype, if (jit) "XLA" else "TensorFlow", comma(value / 1e9)))
#     }
#   }
#   cat(sprintf("%d x %d @ %d x %d: %s\n", shape[1], shape[2], shape[2], shape[3], paste(rates, collapse = ", ")))
# }

# %% [markdown]
# Compare the four rates of each row. Where the CPU has bfloat16 instructions, TensorFlow's kernel
# (oneDNN) uses them; whether XLA's kernel for this CPU does is what the row shows. A bfloat16 rate
# measured with one kernel does not bound a run that uses another: judge the `+ XLA, bfloat16` rung
# against XLA's bfloat16 rate. A bfloat16 step also does work a float32 step does not: every float32
# weight is cast to bfloat16 each step and every gradient back, and element-wise ops convert on the
# way. Where the products gain little, those casts can make the bfloat16 rungs slower than float32,
# as the mixed-precision table above shows on some CPUs.

# %% [markdown]
# ### Exercise q3: the roofline's step time
#
# Write `attainable_step_s(kernels, flop_rate, bandwidth)`: the roofline's time of one step's matrix products, in seconds (Adam's update left out), for a list of kernels like `kd_speed$step_kernels(mlp, batch_size)` (each a named list with `flops` and `bytes`), a FLOP rate (FLOP/s) and a memory bandwidth (bytes/s). The check calls it with this MLP's kernels at several rates and bandwidths.
#
# Complete the cell, then run the check below it; `kd_hint(ex$q3)` gives a hint, `kd_solution(ex$q3)` the solution.
#
# <details><summary>Solution</summary>
#
# A kernel cannot be faster than its arithmetic at the machine's rate, nor than moving its bytes at the memory's bandwidth: it takes at least `max(flops / flop_rate, bytes / bandwidth)`, the slower of the two. A step runs its kernels one after the other, so their times add up.
#
# </details>

# %% nbgrader={"grade": false, "grade_id": "q3_answer", "locked": false, "schema_version": 3, "solution": true, "task": false} language="R"
# attainable_step_s <- NULL  # a function of (kernels, flop_rate, bandwidth), in seconds
# ### BEGIN SOLUTION
# attainable_step_s <- function(kernels, flop_rate, bandwidth) {
#   sum(vapply(kernels, function(k) max(k$flops / flop_rate, k$bytes / bandwidth), numeric(1)))
# }
# ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "q3", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false} language="R"
# # NBVAL_CHECK_OUTPUT
# kd_check(ex$q3)
# ### BEGIN HIDDEN TESTS
# kd_assert_correct(ex$q3)
# ### END HIDDEN TESTS

# %% [markdown]
# ## What carries over to GPUs
#
# No GPU was measured for this course, so this section reasons from the measurements above and from
# kerasdist's **hardware model** (`kerasdist.measure.hardware`: an H100's published figures, a model,
# not a measurement), the one lessons 3 and 9 use.
#
# - **Per-call overhead matters more on a GPU.** Each op is a kernel launch of a few microseconds,
#   and a step of this MLP on a GPU is short; `steps_per_execution` and XLA's fusion carry over.
#   Keras does **not** turn XLA on for the guide's code there: `jit_compile = "auto"` is off for any
#   model built under a `tf.distribute` strategy (the source printed above), and passing
#   `jit_compile = TRUE` does not help: `fit()` compiled by XLA fails under a `MirroredStrategy` of two or
#   more replicas (one XLA cluster would read every replica's copy of a variable; keras-team/keras#19005).
#   XLA works on one device (the ladder's rung), in kerasdist's loop (which compiles each replica's
#   gradient, not the all-reduce), and on the JAX backend under `keras.distribution` (lesson 7),
#   where XLA compiles the whole step of every device.
# - **Mixed precision changes types, and float32 is not what it is on a CPU.** GPUs' tensor cores run
#   float16 and (recent ones) bfloat16; use `mixed_float16` with loss scaling (keras3's `fit()` adds it;
#   kerasdist's loop calls `optimizer.scale_loss`), or `mixed_bfloat16` where supported. But on an
#   A100 or H100 a float32 model's matrix products already run on the tensor cores, as
#   **TensorFloat-32** (float32's range, a 10-bit mantissa): TensorFlow turns it on by default there
#   (`tf$config$experimental$enable_tensor_float_32_execution()`), and so does JAX's default precision.
#   Its peak is half of bfloat16's, where plain float32's (without the tensor cores) is about a
#   fifteenth, so mixed precision gains about 2x on the products, and MFU of a float32 model is measured against TensorFloat-32's peak.
#   The CPU's ratios say nothing about a GPU's.
# - **A product's intensity grows with the batch, up to the layer's width.** A (b x n_in) @ (n_in x
#   n_out) product does about b / 2 FLOPs per byte of float32 operands (b per byte of bfloat16) while
#   b is well below n_in and n_out, then levels off at n_in n_out / (2 (n_in + n_out)) (the table
#   below gives this MLP's). A GPU's ridge is far higher than this CPU's: its peak outgrows a CPU's
#   by more than its memory bandwidth does (the ridges are printed below). So the same product can be compute-bound here and memory-bound there:
#   the classification depends on the machine.
# - **Gradients stay float32.** Under a mixed policy the weights are float32, so their gradients are
#   too: the all-reduce between replicas moves as many bytes as before (checked below).
# - **Compute shrinks, communication does not.** In lesson 3's model (a fixed global batch: **strong
#   scaling**) a step on N devices takes `each device's compute + all-reduce(N) + input`, with no
#   overlap: Keras and kerasdist all-reduce in
#   `apply_gradients`, after the whole backward pass (PyTorch's DDP and XLA's asynchronous
#   collectives overlap the two, which hides part of the all-reduce). Anything that makes compute
#   faster leaves the all-reduce as it is, so the speed-up from more devices drops.

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # Gradient bytes under mixed_bfloat16; then the hardware model's GPU (lessons 3 and 9 use the same) at lesson
# # 3's global batch, in float32 (TensorFloat-32 products) and mixed bfloat16: one GPU, and 8 on PCIe against 1.
# config_set_dtype_policy("mixed_bfloat16")
# tryCatch({
#   bfloat16_mlp <- build_mlp()
#   with(tf$GradientTape() %as% tape, {
#     bfloat16_loss <- bfloat16_mlp$loss(y_one, bfloat16_mlp(x_one, training = TRUE))
#   })
#   gradients <- tape$gradient(bfloat16_loss, bfloat16_mlp$trainable_variables)
#   gradient_dtypes <- sort(unique(vapply(gradients, function(g) g$dtype$name, character(1))))
# }, finally = config_set_dtype_policy("float32"))
# gradient_bytes <- sum(vapply(gradients, function(g) g$shape$num_elements() * g$dtype$size, numeric(1)))
# cat(sprintf("gradients under mixed_bfloat16: [%s], %.2f MB per step\n",
#             paste0("'", gradient_dtypes, "'", collapse = ", "), gradient_bytes / 1e6))
# hardware <- import("kerasdist.measure.hardware")
# model_global_batch <- 4096L  # lesson 3's, fixed as N grows (strong scaling)
# link <- hardware$LINKS[["PCIe 4.0 x16"]]
# # Seconds per step on n GPUs (kerasdist.experiments.plots.step_time_model): each GPU's compute of its share of
# # the global batch (the hardware model) + ring all-reduce; the input is taken as hidden by prefetching.
# step_time_model <- function(n, number_type) {
#   compute_s <- hardware$predicted_step(hardware$DENSE_LAYERS, model_global_batch %/% n, dtype = number_type)$seconds
#   all_reduce <- if (n > 1) 2 * (n - 1) / n * gradient_bytes / link$bandwidth + 2 * (n - 1) * link$alpha else 0
#   compute_s + all_reduce
# }
# for (number_type in c("tensorfloat32", "bfloat16")) {
#   cat(hardware$describe_step(hardware$DENSE_LAYERS, model_global_batch, dtype = number_type), "\n", sep = "")
#   cat(sprintf("model, %s: 8 GPUs on PCIe %.2fx as fast as 1\n", number_type,
#               step_time_model(1L, number_type) / step_time_model(8L, number_type)))
# }
# cat(sprintf("model: mixed bfloat16 makes one GPU %.2fx as fast as TensorFloat-32 (the launches and the update do not shrink)\n",
#             step_time_model(1L, "tensorfloat32") / step_time_model(1L, "bfloat16")))

# %% language="R"
# # Arithmetic intensity of the MLP's products against the batch, and how many of them sit on the memory side
# # of each machine's ridge: this CPU's (measured above), an H100's in TensorFloat-32 and in bfloat16 (model).
# ridges <- c("this CPU" = ridge, "H100, TF32" = hardware$ridge_point(),
#             "H100, bf16" = hardware$ridge_point(dtype = "bfloat16"))
# cat("ridge points: ", paste(sprintf("%s %.0f FLOP/byte", names(ridges), ridges), collapse = ", "), "\n", sep = "")
# cat(sprintf("%6s %30s %28s %10s %10s\n", "batch", "intensity (float32 operands)", "memory-bound of 8: this CPU",
#             "H100 TF32", "H100 bf16"))
# intensities_of <- function(batch, bytes_per_value) {
#   vapply(kd_speed$dense_kernels(hardware$DENSE_LAYERS, batch, bytes_per_value = bytes_per_value),
#          function(k) k$flops / k$bytes, numeric(1))
# }
# for (batch in c(64L, 256L, 1024L, 4096L)) {
#   four_byte <- intensities_of(batch, 4L)
#   two_byte <- intensities_of(batch, 2L)
#   cat(sprintf("%6d %13.1f to %-14.1f %28d %10d %10d\n", batch, min(four_byte), max(four_byte),
#               sum(four_byte < ridges[["this CPU"]]), sum(four_byte < ridges[["H100, TF32"]]),
#               sum(two_byte < ridges[["H100, bf16"]])))
# }

# %% [markdown]
# In the model, mixed precision halves the products' time but not the kernel launches and the
# update, so one GPU gains less than two; and 8 GPUs over PCIe are slower than one for this MLP at
# either precision, because its all-reduce takes longer than its whole step (lesson 9 predicts where
# larger models and faster links take it). The table shows why the GPU's step is short yet far from
# its peak: this MLP's layers are too narrow for its products' intensity to reach an H100's ridge at
# any batch, so all of them are memory-bound there, more than on this CPU. What does carry over from this CPU are the *reasons*: overhead per call, unfused
# small ops, a memory-bound optimizer update and a batch too small to keep the matrix units busy.
# The *numbers* do not: measure them on your own GPUs, with the same side-by-side method, before you
# trust any ratio (`benchmarks/accelerator_step.py` times this step on a GPU beside the model).

# %% [markdown]
# ## Performance tips
#
# - **Measure the steady state, side by side, in one run**: skip the first epoch (tracing), report
#   medians with their spread, and compare ratios, not absolute speeds from different runs or machines.
#   Time with a clock that resolves well below a step (`Sys.time()` differences), not
#   `system.time()`, which rounds to milliseconds.
# - **Run many steps per call** (`steps_per_execution` in `fit()`, or a loop in one `tf_function()`),
#   then try XLA (`jit_compile = TRUE` on one device; under a strategy `fit()` cannot be compiled, so
#   use kerasdist's loop or JAX); check the accuracy after the same epochs each time.
# - **Know the limit before optimizing**: the FLOPs and bytes of each kernel at your shapes, the
#   rates your machine reaches at those shapes and its bandwidth; MFU against the attainable, not
#   only against the peak, says whether to look at overhead, at memory traffic or at arithmetic.
# - **Use mixed precision where the hardware and the kernel have it** and the matrix products dominate;
#   keep the logits and the loss in float32; with float16, scale the loss.
# - **Look at the input pipeline where it shares the hardware**: on a CPU it takes cores from the
#   step; keep it cheap (shuffle indices, gather whole batches).

# %% [markdown]
# ## Summary
#
# - On one device the same model trains at very different speeds with the same accuracy: many steps
#   per call and XLA remove the work around the arithmetic, and a `lax.scan` epoch removes the host
#   entirely; the printed ladder says how close each rung comes to it.
# - One step's time splits into forward, backward (1.25 times the forward FLOPs here), optimizer
#   update and the host's overhead per call; the update is memory-bound and made of many small ops,
#   which XLA fuses.
# - A roofline at the model's shapes (measured matrix-product rates, a triad's bandwidth) gives the
#   attainable step; MFU against the peak and against the attainable says how much is left.
# - `mixed_bfloat16` keeps float32's range and needs no loss scaling; `mixed_float16` (GPUs) needs
#   it (`LossScaleOptimizer`, `optimizer$scale_loss()`). Gradients stay float32. A bfloat16 gain
#   needs a kernel that uses the CPU's bfloat16 instructions.
# - On GPUs the reasons carry over, the numbers do not; `fit()` cannot be XLA-compiled under a
#   multi-replica strategy (Keras leaves it off), and
#   faster compute leaves the all-reduce as the limit of scaling (lesson 3's model).

# %% [markdown]
# ## Exercises
#
# 1. Train the loop + XLA rung in float32 and in `mixed_bfloat16` at a global batch of 1024. Does
#    bfloat16 pay now? What MFU does each reach?
#
# <details><summary>Hint</summary>
#
# `speed_ladder$measure()` takes a `batch_size`; the MFU is samples/s times `flops$total` over the
# rate of the kernel and dtype the run trains with (XLA's, in bfloat16 for the bfloat16 run:
# `kd_speed$gemm_flops_per_s(..., dtype = "bfloat16", jit_compile = TRUE)`), not `peak_flops`, which
# is float32's. Adam at batch 1024 needs more epochs for the same accuracy.
# </details>
#
# <details><summary>Solution</summary>
#
# ```r
# for (precision in c("float32", "mixed_bfloat16")) {
#   dtype <- if (precision == "float32") "float32" else "bfloat16"
#   run <- speed_ladder$measure("kerasdist loop + XLA", data_source, epochs, data = data, precision = precision,
#                               batch_size = 1024L)
#   rate <- steady_samples_per_s(run)
#   peak <- kd_speed$gemm_flops_per_s(1024L, 1024L, 1024L, dtype = dtype, jit_compile = TRUE)[[1]]  # XLA's kernel
#   cat(sprintf("%s %s samples/s MFU %.0f%% of XLA's %s rate %.3f\n", precision, comma(rate),
#               100 * rate * flops$total / peak, dtype, run$test_accuracy))
# }
# ```
# Each product is 16 times larger while the overhead and the update per step stay the same, so both
# reach a larger MFU. Each MFU is against its own dtype's rate: against float32's, a bfloat16 run
# would read several times too high on a CPU with fast bfloat16 kernels. Whether bfloat16 pays is
# answered by the samples/s; bfloat16 gains where XLA's kernel uses the CPU's bfloat16 instructions.
# </details>
#
# 2. Time the whole step at 1, 5 and 50 steps per call. From how many steps per call on does the
#    host's overhead stop mattering?
#
# <details><summary>Hint</summary>
#
# `steps_in_one_call(whole_step)` runs as many steps as batches you pass it: take the first `k` with
# `py_get_item(x_steps, first(k))` (Python's `x_steps[:k]`), and time it with `time_calls()`.
# </details>
#
# <details><summary>Solution</summary>
#
# ```r
# run <- steps_in_one_call(whole_step)
# for (k in c(1L, 5L, 50L)) {
#   timing <- time_calls(run, py_get_item(x_steps, first(k)), py_get_item(y_steps, first(k)))
#   cat(sprintf("%d %.3f ms per step\n", k, timing[["median"]] / k * 1e3))
# }
# ```
# The time per step falls quickly from 1 to 5 steps per call and less after: the overhead is paid per
# call, so at 5 steps per call each step carries a fifth of one call's overhead, at 50 a fiftieth.
# (The call with one step is a one-iteration `tf_function()` loop, not the host's loop of the guide's
# `fit()`.)
# </details>
#
# 3. Measure a wider MLP (784-1024-1024-10): its FLOPs per sample, its kernels' arithmetic intensity,
#    and its MFU with `fit()` with `steps_per_execution = 50, jit_compile = TRUE` for two epochs.
#
# <details><summary>Hint</summary>
#
# Build it with `keras_model_sequential(input_shape = 784)` and three `layer_dense()` calls;
# `kerasdist$training_flops_per_sample()` and `kd_speed$step_kernels()` read the kernels' shapes of
# any model made of Dense layers; time the epochs with an R callback, as `fit_rung()` does.
# </details>
#
# <details><summary>Solution</summary>
#
# ```r
# wide <- keras_model_sequential(input_shape = 784) |> layer_dense(1024, activation = "relu") |>
#   layer_dense(1024, activation = "relu") |> layer_dense(10)
# wide |> compile(loss = loss_sparse_categorical_crossentropy(from_logits = TRUE), optimizer = "adam",
#                 steps_per_execution = steps_per_call, jit_compile = TRUE)
# wide_flops <- kerasdist$training_flops_per_sample(wide)$total
# print(vapply(kd_speed$step_kernels(wide, batch_size), function(k) round(k$flops / k$bytes, 1), numeric(1)))
# seconds <- c()
# timer <- callback_lambda(
#   on_epoch_begin = function(epoch, logs) started <<- Sys.time(),
#   on_epoch_end = function(epoch, logs) seconds <<- c(seconds, as.numeric(difftime(Sys.time(), started, units = "secs")))
# )
# wide |> fit(data$x_train, data$y_train, batch_size = batch_size, epochs = 2, callbacks = list(timer), verbose = 0)
# rate <- n_train / seconds[length(seconds)]
# cat(sprintf("%s FLOPs per sample, MFU %.0f%%\n", comma(wide_flops), 100 * rate * wide_flops / peak_flops))
# ```
# Its products are larger and more intense, and they dominate its step, so it reaches a larger MFU
# than the MLP at the same batch.
# </details>
#
# Next: back to the [course map](../README.md), or lesson 3's
# [cost model](03_convergence_R.ipynb) with your own GPU's numbers.
