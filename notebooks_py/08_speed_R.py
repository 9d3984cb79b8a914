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
#   returns to the host, each against the guide's `fit()`; then the scan epoch taken apart, to measure
#   what running every step in one call saves;
# - what mixed precision is: `mixed_bfloat16`, and `mixed_float16` with its loss scaling
#   (`LossScaleOptimizer`, `optimizer$scale_loss()`);
# - where one step's time goes: forward, backward, optimizer update and the host's overhead per call,
#   as parts that add up to the measured step, and the input pipeline sharing the CPU's cores; then a
#   profiler's trace of one step, read and drawn;
# - a **roofline** at the model's own shapes: each matrix product's FLOPs and bytes, the CPU's
#   **nominal peak** (from its cores, vector width and clock) and **measured peak**, its memory
#   bandwidth (a triad), the bound these give a step and the estimate its kernels' measured rates give,
#   and each rung's **MFU** (model FLOPs utilization);
# - what of this carries over to GPUs.
#
# **What you need**: lessons 1 and 3 (the JAX it uses is explained where it comes), R with keras3, tfdatasets and tensorflow, rpy2 and JAX in the
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
#
# Words this lesson uses. The **host** is the CPU side that drives a computation: your R program (and
# the Python that reticulate calls) and the framework's runtime; on a GPU machine the *device* is the
# GPU, here the device is the same CPU. Each operation of a model (a product, an addition) runs as a
# **kernel**, a routine for that op on that device (not a Jupyter kernel, nor a Dense layer's `kernel`
# weights). TensorFlow's **executor** is the runtime that runs a graph's ops, each as soon as its
# inputs are ready; to **dispatch** a call is the host's work of handing it to the runtime. The first
# call of a `tf_function()` runs the code once to record its graph, **tracing**, then optimizes the
# graph (it traces again for inputs of new shapes or dtypes). **XLA** (Accelerated Linear Algebra) is
# the compiler TensorFlow and JAX share: it compiles a whole function to machine code at once and
# **fuses** ops, computing several of them in one kernel and one pass over memory instead of one
# kernel and one pass each. JAX's `jax.jit` traces a Python function and compiles it with XLA;
# `jax.lax.scan` runs one function over the items of an array inside one compiled loop; and Keras'
# stateless API (`model.stateless_call`, `optimizer.stateless_apply`) computes a step from the
# weights' values passed in and returned, without assigning variables, which is what `jax.jit` needs.

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
# scan_variants <- import("kerasdist.measure.scan_variants")
# kd_trace <- import("kerasdist.measure.trace")
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
# (kerasdist's loop also validates after each epoch; that pass is not counted). Two steady epochs are
# too few for quartiles, so the printout gives their range as the spread
# (`benchmarks/benchmark_engines.py --part ladder` runs every rung in 3 rounds of their own). Besides the change
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
# in a `tf.distribute` strategy's scope**, so the guide's code, which builds its model in
# `MirroredStrategy`'s scope, is not compiled by XLA even on GPUs. The ladder's `fit (guide)` rung
# trains on one device and builds its model without a strategy (one device needs none), so on this
# machine the first rule, no GPU, is the one that decides.

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
# comma <- function(x) formatC(x, format = "f", digits = 0, big.mark = ",")
# for (name in names(speed)) {
#   steady <- runs[[name]]$samples_per_epoch / unlist(runs[[name]]$epoch_seconds)[-1]
#   cat(sprintf("%-34s %8s samples/s (steady epochs %s to %s)  %4.1fx the guide's  test accuracy %.3f\n", name,
#               comma(speed[[name]]), comma(min(steady)), comma(max(steady)), speed[[name]] / speed[["fit (guide)"]],
#               accuracy[[name]]))
# }

# %% [markdown]
# The `lax.scan` rung is shown in full below (it is Python: JAX has no R interface here): a training
# step written with Keras' stateless API (`model.stateless_call`, `optimizer.stateless_apply`), and
# `jax.lax.scan` running it over every batch of an epoch inside one `jax.jit` call, gathering each
# batch from the arrays already on the device.

# %% language="R"
# for (name in c("stateless_step", "scan_epoch")) {
#   cat(import("inspect")$getsource(py_get_attr(speed_ladder, name)), "\n", sep = "")
# }

# %% [markdown]
# **Predict, then run.** Which rung is fastest, and how many times the guide's `fit()` speed does it
# reach? Does any rung buy its speed with a worse model after the same epochs? Decide from the
# speeds printed above, then run the next cell: it checks the accuracies and names the fastest rung.

# %% language="R"
# # Check: every rung reaches about the same accuracy (speeds are printed, not asserted: they vary with
# # what else the machine runs).
# stopifnot(max(accuracy) - min(accuracy) < 0.03)
# fastest <- names(which.max(speed))
# cat(sprintf("fastest rung: %s, %.1fx the guide's fit; test accuracies within %.3f of each other\n",
#             fastest, speed[[fastest]] / speed[["fit (guide)"]], max(accuracy) - min(accuracy)))

# %% magic_args="-w 9 -h 3.8 --units in -r 100" language="R"
# # The ladder on one chart: each rung's speed, and its ratio to the guide's fit.
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
#   text(speed[order], centers, sprintf("%s/s = %.1fx the guide's", comma(speed[order]), speed[order] / speed[["fit (guide)"]]),
#        pos = 4, cex = 0.7)
# }
# png("results/figures/08_speed_R_ladder.png", width = 9, height = 3.8, units = "in", res = 100)
# draw_ladder()
# invisible(dev.off())
# draw_ladder()

# %% [markdown]
# Many steps per call and XLA usually remove work around the arithmetic, though not always (on a CPU,
# XLA's kernels are not always faster than TensorFlow's). The scan epoch removes what is left of the
# host: no Python or R, no `tf.data` iterator and no TensorFlow executor between steps. That makes it
# the rung with the least *host* work, not necessarily the fastest program: how much that saves, and
# whether its other choices cost anything, is measured next. The rest of a rung's time is the step
# itself, which the sections after take apart. On a shared machine one rung
# can come out slower than it should (another program took the cores during its epochs): compare the
# bars with that in mind, and rerun the cell before trusting a small difference. The accuracies differ
# by the initial weights and the data order each rung draws, and by rounding (XLA and other kernels
# sum in other orders): none of these settings changes what is computed.

# %% [markdown]
# ## The scan epoch taken apart
#
# How much does running a whole epoch in one call save, and do the scan's other choices cost anything?
# The cell below trains the same 200 steps, from the same weights on the same batches, five ways, in
# a JAX process of its own (`scan_variants$measure()`, Python: JAX has no R interface here); the five
# take turns over 5 rounds (so that a busy spell of the machine falls on all of them), and each gets
# the median and spread of its rounds:
#
# - the scan as the rung runs it: each batch gathered from the data arrays inside its step;
# - the scan over batches gathered before it starts (one gather of all 200 batches);
# - the scan with 10 steps unrolled in each loop iteration (`jax.lax.scan(..., unroll=10)`: XLA
#   compiles 10 copies of the step into the loop's body, so the loop runs a tenth as many iterations);
# - one jitted step per Python call, on the batches gathered before: a step dispatched from Python,
#   without anything Keras' `fit()` adds;
# - the same with the state **donated** (`jax.jit(..., donate_argnums=0)`): XLA may write the new
#   weights and optimizer state into the buffers of the old ones instead of allocating new ones.

# %% language="R"
# # The same 200 steps, five ways, in a JAX process; samples/s as median and spread of 5 rounds.
# variants <- scan_variants$measure(data_source)
# rung_rate <- variants[["scan, each batch gathered in its step (the rung)"]]$samples_per_s[[1]]
# for (name in names(variants)) {
#   rates <- unlist(variants[[name]]$samples_per_s)  # median, low, high
#   cat(sprintf("%-48s %8s samples/s (spread %s to %s), %.2fx the rung's way\n", name, comma(rates[1]),
#               comma(rates[2]), comma(rates[3]), rates[1] / rung_rate))
# }
# per_call_rate <- variants[["one jitted step per Python call"]]$samples_per_s[[1]]
# cat(sprintf("one step: %s µs in the scan, %s µs dispatched from Python, one call per step (medians)\n",
#             comma(batch_size / rung_rate * 1e6), comma(batch_size / per_call_rate * 1e6)))

# %% [markdown]
# Read each ratio against the spreads: a ratio whose spreads overlap the rung's means that choice makes
# no difference on this machine. Donation lets XLA write the new state into the old state's buffers
# instead of allocating new ones: it saves memory, which is what it is for on an accelerator with
# little of it. It need not save time: where the printout shows it slower, as it can on a CPU, it cost
# time here, for a reason this lesson does not take apart. The difference between a step dispatched from Python and the same step
# in the scan is what the host costs per step when nothing else is in the way. Keras' `fit()` on JAX
# pays more than that: its data adapter slices every batch from the arrays in Python and hands it to
# the jitted step (`get_jax_iterator` in `keras/src/trainers/data_adapters/array_data_adapter.py`),
# and it runs its callbacks between calls. Both JAX rungs compile the same model's step with XLA
# (Keras' also updates its loss and accuracy metrics), so what separates them on the ladder is mostly
# the host's work per step; what is left of a step's time is the step's own arithmetic and memory
# traffic, which the next sections take apart.

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
# # The two types' rounding, by NumPy's float16 and ml_dtypes' bfloat16 (the bfloat16 of TensorFlow and JAX), from
# # float32 as TensorFlow's casts round: the same numbers, without running a float16 kernel on this CPU.
# numpy <- import("numpy", convert = FALSE)
# number_types <- list(float16 = numpy$float16, bfloat16 = import("ml_dtypes")$bfloat16)
# for (small_gradient in c(1e-6, 1e-4) / batch_size) {
#   for (dtype in names(number_types)) {
#     # Back to float64 (exactly) before R reads it: R has no half-precision floats.
#     value <- py_to_r(numpy$float32(small_gradient)$astype(number_types[[dtype]])$astype("float64")$item())
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
# # kerasdist's loop, without and with XLA, under mixed_bfloat16 (a bar across the two).
# progress <- import("keras")$utils$Progbar(2L, unit_name = "rung")
# for (name in c("kerasdist loop", "kerasdist loop + XLA")) {
#   run <- speed_ladder$measure(name, data_source, epochs, data = data, precision = "mixed_bfloat16")
#   speed[[paste0(name, ", bfloat16")]] <- steady_samples_per_s(run)
#   accuracy[[paste0(name, ", bfloat16")]] <- run$test_accuracy
#   progress$add(1L)
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
# Each of these programs runs on batches already in memory, in a `tf_function()` that runs
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
# The programs take turns: after a warm-up call of each, eleven rounds call every program once, so
# that a busy spell of the machine falls on all of them, each call timed with `Sys.time()` (which
# resolves microseconds). The tables give the **median** and the spread (25th to 75th percentile) of
# each program's calls, as `kerasdist.measure.speed.time_programs` does in the Python lesson: the
# statistic of every rate in this lesson. On a shared machine a few
# calls are slowed down by other programs: the median ignores them, the spread shows them.

# %% language="R"
# # Time each program, per step, in milliseconds (median and spread of 11 calls).
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
# # Several programs (each a list of a function and its arguments) timed in turns, as time_programs() in Python.
# time_programs <- function(programs, rounds = 11L) {
#   finish <- function(result) {  # .numpy() waits for the result
#     if (inherits(result, "python.builtin.object") && py_has_attr(result, "numpy")) result$numpy()
#   }
#   # Warm-up (and tracing), one call each. Every tf_function() of an R function with the same arguments shares
#   # one code object, so TensorFlow takes these first traces, in a row, for retracing: kerasdist leaves that
#   # warning out during the warm-up.
#   with(kd_speed$retracing_warning_left_out(), for (program in programs) finish(do.call(program[[1]], program[[2]])))
#   seconds <- matrix(NA_real_, rounds, length(programs), dimnames = list(NULL, names(programs)))
#   progress <- import("keras")$utils$Progbar(rounds, unit_name = "round")
#   for (round in seq_len(rounds)) {
#     for (name in names(programs)) {
#       started <- Sys.time()
#       finish(do.call(programs[[name]][[1]], programs[[name]][[2]]))
#       seconds[round, name] <- as.numeric(difftime(Sys.time(), started, units = "secs"))
#     }
#     progress$add(1L)
#   }
#   lapply(setNames(nm = names(programs)), function(name) {
#     setNames(quantile(seconds[, name], c(0.5, 0.25, 0.75), type = 6, names = FALSE), c("median", "low", "high"))
#   })
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
# pipeline <- kd_data$train_dataset(data$x_train, data$y_train, batch_size, seed, 0L, 1L)  # epochs 0 to 1
# batches_per_epoch <- n_train %/% batch_size
# drain <- tf_function(function() pipeline$reduce(tf$constant(0), function(total, batch) total + batch[[1]][1, 1]))
# per_step_ms <- function(timing, steps) timing / steps * 1e3
# batches <- list(x_steps, y_steps)
# programs <- list(  # each program, its arguments, and the steps one call runs
#   "input pipeline" = list(drain, list(), batches_per_epoch),
#   "forward" = list(steps_in_one_call(forward), batches, steps_per_call),
#   "forward + backward" = list(steps_in_one_call(forward_backward), batches, steps_per_call),
#   "optimizer update" = list(steps_in_one_call(optimizer_update), batches, steps_per_call),
#   "whole step" = list(steps_in_one_call(whole_step), batches, steps_per_call),
#   "whole step, 1 per call" = list(step_by_step, batches, steps_per_call),
#   "whole step, XLA" = list(steps_in_one_call(whole_step, jit_compile = TRUE), batches, steps_per_call)
# )
# # The programs take turns, 11 rounds of one call each (a bar across the rounds), so that a busy spell of the
# # machine falls on all of them and the parts below, their differences, hold.
# per_call <- time_programs(lapply(programs, function(program) program[1:2]))
# timings <- lapply(setNames(nm = names(programs)), function(name) per_step_ms(per_call[[name]], programs[[name]][[3]]))
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
# The programs above are nested: forward; forward + backward; the whole step (forward, backward and
# update); the whole step at one step per call. So each part of a step is the difference between one
# program's median and the median of the program inside it (`kd_speed$step_breakdown()`): the
# backward pass is forward + backward minus forward, the update is the whole step minus forward +
# backward, and the host's overhead is one step per call minus 50 per call. The parts then add up to
# the measured step at one step per call, and no time is counted twice. The update timed alone is
# printed beside its part: alone it runs without the backward pass's ops around it, so the two need
# not agree.
# The op counts say why the update is slow for its arithmetic: Keras applies Adam variable by variable,
# a few element-wise ops per variable (the "large" ones, each a pass over a weight-sized array in
# memory) plus scalar bookkeeping (the step count, the bias corrections, reading variables), and each
# op is a kernel that TensorFlow's executor schedules.
#
# **Predict, then run.** Is the host's overhead per call a small or a large part of a step run one
# per call? Which part is largest at 50 steps per call: the matrix products (forward, backward) or
# the update? Decide from the numbers above, then run the cell.

# %% language="R"
# # One step at one step per call, in parts that add up to it (printed: the shares move on a busy machine).
# median_ms <- vapply(timings, function(timing) timing[["median"]], numeric(1))
# parts <- unlist(kd_speed$step_breakdown(as.list(median_ms)))  # ms: forward, backward, update, host overhead
# cat(sprintf("%s = %.3f ms, the measured step at 1 per call: %.3f ms\n",
#             paste(sprintf("%s %.3f", names(parts), parts), collapse = " + "), sum(parts),
#             median_ms[["whole step, 1 per call"]]))
# cat(sprintf("the optimizer update timed alone: %.3f ms; its part of the step: %.3f ms\n",
#             median_ms[["optimizer update"]], parts[["optimizer update"]]))
# cat(sprintf("1 step per call: %.1fx the time of 50 per call\n",
#             median_ms[["whole step, 1 per call"]] / median_ms[["whole step"]]))
# cat(sprintf("shares of one step at 1 step per call: %s\n",
#             paste(sprintf("%s %.0f%%", names(parts), 100 * parts / median_ms[["whole step, 1 per call"]]),
#                   collapse = ", ")))
# for (name in names(parts)[parts < 0]) {
#   cat(sprintf("%s came out below zero: smaller than the timings' noise here; run the timing cell again\n", name))
# }

# %% [markdown]
# **The input pipeline shares the cores.** On a GPU machine the input pipeline runs on the CPU while
# the GPU computes, so prefetching hides it whenever it is faster than a step. Here there is nothing
# idle to hide it on: the pipeline's threads take CPU time from the step. The XLA-compiled step timed
# alone (its batches already in memory, 50 steps in one compiled loop) against a step of kerasdist's
# loop + XLA rung bounds what this costs: the rung reads its batches from that pipeline, and it also
# calls its compiled step once per step from a TensorFlow loop and keeps per-step statistics, so the
# difference is the pipeline's cost at most (on a busy machine it can even come out below zero, when
# the noise is larger than the cost):

# %% language="R"
# # The XLA step alone against the same step in training (the loop + XLA rung of the ladder), per step; and
# # against a step of the scan epoch (the same arithmetic, compiled from JAX).
# in_training_ms <- batch_size / speed[["kerasdist loop + XLA"]] * 1e3
# cat(sprintf("XLA step alone %.3f ms; in training %.3f ms per step; the input pipeline alone takes %.3f ms per batch (wall time, drained alone)\n",
#             median_ms[["whole step, XLA"]], in_training_ms, median_ms[["input pipeline"]]))
# cat(sprintf("a step of the scan epoch: %.3f ms\n", batch_size / speed[["JAX lax.scan epoch"]] * 1e3))

# %% [markdown]
# The last line sets TensorFlow's XLA step, timed alone, beside a step of the scan epoch: the same
# arithmetic, each compiled by XLA from its own program (the scan's step also gathers its batch), and
# neither with host work between steps. The printout says which is faster here: the rung with the
# least host work need not run the fastest compiled step.

# %% magic_args="-w 11 -h 3.8 --units in -r 100" language="R"
# # Draw one step's time in its parts, with the measured step marked, beside the whole step at 50 per call, the
# # same compiled by XLA, the update and the input pipeline each timed alone (error bars: the spread).
# bars <- c("1 step per call, in parts", "50 steps per call", "50 steps per call, XLA", "update alone",
#           "input pipeline alone")
# alone <- c("whole step", "whole step, XLA", "optimizer update", "input pipeline")  # the timing of bars 2 to 5
# stack <- matrix(0, nrow = length(parts) + length(alone), ncol = length(bars),
#                 dimnames = list(c(names(parts), paste(alone, "(alone)")), bars))
# stack[names(parts), bars[1]] <- parts
# for (i in seq_along(alone)) stack[i + length(parts), bars[i + 1]] <- median_ms[[alone[i]]]
# colors <- c("steelblue", "lightblue", "orange", "firebrick", "grey", "forestgreen", "orange", "olivedrab")
# shown <- -7  # the update alone has the update's colour: one legend entry for both
# draw_step_time <- function() {
#   old <- par(mar = c(4.5, 11, 3, 14))
#   on.exit(par(old))
#   centers <- barplot(stack, horiz = TRUE, las = 1, cex.names = 0.8, col = colors,
#                      xlim = c(0, 1.05 * max(sum(parts), vapply(timings, function(t) t[["high"]], numeric(1)))),
#                      xlab = "milliseconds per step of 64 samples (median and spread of 11 calls)",
#                      main = "Where one training step's time goes")
#   for (i in seq_along(alone)) {
#     timing <- timings[[alone[i]]]
#     arrows(timing[["low"]], centers[i + 1], timing[["high"]], centers[i + 1], angle = 90, code = 3, length = 0.04)
#   }
#   whole <- timings[["whole step, 1 per call"]]  # the step measured at 1 per call, marked on the parts' bar
#   arrows(whole[["low"]], centers[1], whole[["high"]], centers[1], angle = 90, code = 3, length = 0.04)
#   points(whole[["median"]], centers[1], pch = 18, cex = 1.6)
#   legend(par("usr")[2], mean(par("usr")[3:4]), c(rownames(stack)[shown], "the step measured at 1 per call"),
#          fill = c(colors[shown], NA), border = c(rep("black", 7), NA), pch = c(rep(NA, 7), 18), cex = 0.75,
#          xjust = 0, yjust = 0.5, xpd = NA, bty = "n")
# }
# png("results/figures/08_speed_R_step_time.png", width = 11, height = 3.8, units = "in", res = 100)
# draw_step_time()
# invisible(dev.off())
# draw_step_time()

# %% [markdown]
# Read the bars from the bottom. The bottom bar's parts add up to the step measured at one step per call
# (the black mark, with its spread). At one step per call, the host's work around each step is paid every
# step; `steps_per_execution` and the loop engine pay it once per 50 steps. The backward pass has
# 1.25 times the forward pass's FLOPs for this MLP (the next section counts them: the first layer,
# three quarters of the forward FLOPs, needs no input gradient). Adam's update is little arithmetic
# but many small element-wise ops over every weight. XLA fuses the update's ops, and the bias and
# ReLU ops, into few kernels; the XLA bar shows what that saves here, if anything. On a busy machine a
# part can even come out below zero: each median comes from its own program's calls, and a difference
# smaller than their spread has no sign (the cell above then says so); run the timing cell again.

# %% [markdown]
# ### A profiler's trace of one step
#
# Timing programs says how long each takes, not what the machine does during a step. A **profiler**
# records every op as it runs: which thread ran it, when it started and how long it took.
# TensorFlow's (`tf$profiler$experimental$start()` and `stop()`) writes a trace file that
# TensorBoard's profile plugin draws; `kerasdist.measure.trace` reads the same file back. Below, one
# step at one step per call, as the guide's `fit()` runs it: each op is a bar on the thread of
# TensorFlow's executor that ran it, coloured by the part of the step it belongs to (from its name
# scope: `gradient_tape/` for the backward pass, the optimizer's name, `optimizer$name`, for the
# update). (The products' kernels are named `_Mkl...`: oneDNN's, under its former name, MKL-DNN.)
# Recording adds time to every op, and a freshly made function runs slower than one that
# has run many times (below), so the traced step is slower than the steps timed above: read the trace
# for the order and the gaps, not for the time. TensorFlow's executor learns which ops are cheap: once a function has run
# many times, it runs those ops inline and the profiler no longer records them. So the cell traces a
# freshly made `tf_function()` of the same step, whose first calls record far more of its ops; the
# printout sets the ops recorded beside the ops of the step's graph (which also counts constants and
# other ops that do no work).

# %% language="R"
# # Trace one step at one step per call, of a freshly made tf_function(): each op's thread, start and duration.
# traced <- kd_trace$trace_step(tf_function(whole_step), x_batches[[1]], y_batches[[1]], optimizer_name = optimizer$name)
# ops <- do.call(rbind, lapply(traced$ops, function(op) data.frame(thread = op$thread, start = op$start,
#                                                                    seconds = op$seconds, name = op$name,
#                                                                    type = op$type, part = op$part)))
# threads <- sort(unique(ops$thread))
# cat(sprintf("one traced step: %.3f ms (untraced, at 1 per call: %.3f ms), %d ops recorded (its graph has %d) on %d threads; no recorded op running for %.0f%% of it\n",
#             traced$seconds * 1e3, median_ms[["whole step, 1 per call"]], nrow(ops), length(graphs[["whole step"]]), length(threads),
#             100 * (1 - kd_trace$busy_seconds(traced$ops) / traced$seconds)))
# for (part in unique(ops$part)) {
#   mine <- ops[ops$part == part, ]
#   longest <- mine[which.max(mine$seconds), ]
#   cat(sprintf("%-28s %4d ops, %6.3f ms of op time; the longest: %s (%s), %.3f ms\n", part, nrow(mine),
#               sum(mine$seconds) * 1e3, longest$type, longest$name, longest$seconds * 1e3))
# }

# %% magic_args="-w 11 -h 2.6 --units in -r 100" language="R"
# # Draw the trace: one row per executor thread, each op a bar from its start to its end.
# part_colors <- c("steelblue", "lightblue", "orange")  # the colours of the step's parts above
# names(part_colors) <- c(kd_trace$OTHER_PART, "backward", "optimizer update")
# part_colors <- part_colors[unique(ops$part)]
# draw_trace <- function() {
#   old <- par(mar = c(4.5, 6, 3, 13))
#   on.exit(par(old))
#   plot(NA, xlim = c(0, traced$seconds * 1e3), ylim = range(threads) + c(-0.6, 0.6), yaxt = "n",
#        xlab = "milliseconds from the call's start", ylab = "",
#        main = "One training step, one step per call, as the profiler saw it", cex.main = 0.9)
#   axis(2, at = threads, labels = paste("thread", threads), las = 1, cex.axis = 0.8)
#   rect(ops$start * 1e3, ops$thread - 0.4, (ops$start + ops$seconds) * 1e3, ops$thread + 0.4,
#        col = part_colors[ops$part], border = NA)
#   abline(v = traced$seconds * 1e3, lty = 2)
#   legend(par("usr")[2], mean(par("usr")[3:4]), c(names(part_colors), "the call returns"),
#          fill = c(part_colors, NA), border = c(rep("black", length(part_colors)), NA),
#          lty = c(rep(NA, length(part_colors)), 2), cex = 0.75, xjust = 0, yjust = 0.5, xpd = NA, bty = "n")
# }
# png("results/figures/08_speed_R_trace.png", width = 11, height = 2.6, units = "in", res = 100)
# draw_trace()
# invisible(dev.off())
# draw_trace()

# %% [markdown]
# Read the trace from the left. TensorFlow's executor starts an op as soon as its inputs are ready,
# on whichever of its threads is free. So the update's ops that depend on nothing computed in the
# step (reading the variables, Adam's step count and bias corrections, all scalars) can run at once,
# before or beside the forward pass: the first orange slivers. Then the forward products follow one
# another, then the backward ones, and a weight's update can start as soon as its gradient exists,
# while other gradients are still being computed. Most ops are short: their bars are slivers, and the printout names the
# longest of each part. The white space, where no recorded op runs, is the host's share of this step:
# the call from R through reticulate, the function's dispatch and the executor's scheduling between
# ops (with the ops the profiler left out). A fresh function sends every op through the executor's
# threads, so its white space is larger than the host's overhead of a step that has run many times
# (the breakdown above measured that one); it is the kind of overhead that more steps per call and
# XLA's fusion remove.

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
# `max(F / P, B / BW)`; its **arithmetic intensity** `F / B` says which limit binds, and the
# intensity where the two meet, `P / BW`, is the machine's **ridge point**. For a bound, `P` must be
# a rate no kernel can beat: the CPU's **nominal peak**, cores x FLOPs per cycle of one core x clock,
# read from the CPU below. A core's FLOPs per cycle come from its vector instructions: one **fused
# multiply-add** (FMA) computes `a x b + c` on every lane of a vector register at once, two FLOPs per
# lane (16 float32 lanes in AVX-512's 512-bit registers), and a core has up to two FMA units. Two
# assumptions stand in this figure. Two FMA units per core can count too many (AMD's Zen 4, for one,
# runs AVX-512 on 256-bit units: half the FLOPs per cycle), which makes the bound loose and MFU read
# low. The highest clock the system reports (its source is printed: `cpu MHz` is /proc/cpuinfo's line,
# `cpufreq maximum` the kernel's frequency driver's) can be too low (a virtual machine may report only its
# timer's clock, below what the cores run at), which can make it no bound at all: the cell says so if
# a measured rate beats it. The share of the measured peak, beside MFU, reads high.
# Beside it the **measured peak**: the median rate of large chained products, what this CPU
# really reaches. `BW` is main memory's (DRAM) bandwidth, measured by the triad of STREAM, the standard benchmark of memory bandwidth (`a = b + 3 c`, on
# every core). Adam's update is the memory-bound part: per weight it reads the gradient, both moments
# and the weight and writes three of them back, about 12 FLOPs for 28 bytes.
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
# # The machine, each rate the median of its calls with their spread, printed as measured: the nominal peak (read
# # from the CPU), the measured peak (chained 1024 x 1024 products), main memory's bandwidth (the triad), and
# # each product's rate at its own shape (the faster of TensorFlow's kernel and XLA's).
# as_rate <- function(rate) c(median = rate$median, low = rate$low, high = rate$high)  # a Rate, as an R vector
# nominal <- kd_speed$nominal_flops_per_s("float32")
# cat(sprintf("CPU: %s\n", nominal$model))
# cat(sprintf("nominal peak: %d cores x %d FLOPs per cycle (%s, %d FMA units assumed) x %.2f GHz (%s) = %s GFLOP/s float32\n",
#             nominal$cores, nominal$flops_per_cycle, nominal$instructions, kd_speed$FMA_UNITS_PER_CORE,
#             nominal$clock_hz / 1e9, nominal$clock_source, comma(nominal$flops_per_s / 1e9)))
# peak <- as_rate(kerasdist$matmul_flops_per_s("float32"))
# cat(sprintf("measured peak: %s GFLOP/s (spread %s to %s), %.0f%% of the nominal peak\n", comma(peak[["median"]] / 1e9),
#             comma(peak[["low"]] / 1e9), comma(peak[["high"]] / 1e9), 100 * peak[["median"]] / nominal$flops_per_s))
# if (peak[["high"]] > nominal$flops_per_s) {
#   cat("the measured peak beat the nominal one: the cores run faster than the clock reported, so it is no bound here\n")
# }
# bandwidth <- as_rate(kd_speed$memory_bytes_per_s())
# cat(sprintf("main memory: %.1f GB/s (triad, spread %.1f to %.1f)\n", bandwidth[["median"]] / 1e9,
#             bandwidth[["low"]] / 1e9, bandwidth[["high"]] / 1e9))
# ridge <- nominal$flops_per_s / bandwidth[["median"]]  # the intensity where the two roofs meet
# cat(sprintf("ridge point: %.1f FLOP/byte; the largest product moves %.2f MB\n", ridge,
#             max(vapply(step, function(kernel) kernel$bytes, numeric(1))) / 1e6))
# shape_of <- function(kernel) paste(kernel$m, kernel$k, kernel$n)
# rate <- list()
# for (kernel in step) {
#   if (is.null(rate[[shape_of(kernel)]])) {
#     rates <- lapply(c(FALSE, TRUE), function(jit) as_rate(kd_speed$gemm_flops_per_s(kernel$m, kernel$k, kernel$n,
#                                                                                       jit_compile = jit)))
#     rate[[shape_of(kernel)]] <- rates[[which.max(vapply(rates, function(r) r[["median"]], numeric(1)))]]
#   }
#   intensity <- kernel$flops / kernel$bytes
#   measured <- rate[[shape_of(kernel)]]
#   roof <- min(nominal$flops_per_s, intensity * bandwidth[["median"]])
#   cat(sprintf("%-24s %6.1f GFLOP/s (spread %5.1f to %5.1f), %3.0f%% of the roof at its intensity, %s side of the ridge\n",
#               kernel$name, measured[["median"]] / 1e9, measured[["low"]] / 1e9, measured[["high"]] / 1e9,
#               100 * measured[["median"]] / roof, if (intensity < ridge) "memory" else "compute"))
# }

# %% language="R"
# # What a step can take: a bound (the products at the nominal peak) and an estimate (each product at its own
# # measured rate, or main memory's bandwidth if that is slower, and Adam's update at main memory's bandwidth).
# bound_s <- batch_size * flops$total / nominal$flops_per_s
# adam_s <- adam_bytes / bandwidth[["median"]]
# estimate_s <- adam_s + sum(vapply(step, function(kernel) {
#   max(kernel$flops / rate[[shape_of(kernel)]][["median"]], kernel$bytes / bandwidth[["median"]])
# }, numeric(1)))
# cat(sprintf("bound: at least %.3f ms per step for its products alone = at most %s samples/s\n", bound_s * 1e3,
#             comma(batch_size / bound_s)))
# cat(sprintf("isolated-kernel estimate: %.3f ms per step (Adam's update %.3f ms of it) = %s samples/s\n",
#             estimate_s * 1e3, adam_s * 1e3, comma(batch_size / estimate_s)))

# %% [markdown]
# The bound holds for any program: it counts only the products' FLOPs, each at the nominal peak, and
# a real step does those and more. The estimate is of another kind: each product as fast as it ran
# *alone*, paying for its own loop iteration and the read of its result (for the smallest products,
# layer 3's, most of their time), which a step fused by XLA does not pay; and Adam's state (a few MB)
# may sit in the caches, faster than main memory. So a fused rung can come out faster than the
# estimate, never faster than the bound.

# %% magic_args="-w 8.5 -h 4.4 --units in -r 100" language="R"
# # The roofline chart: the bound's two roofs, the measured peak, and each product at its intensity and measured rate.
# intensity <- 10^seq(-1, 3, length.out = 200)
# roof <- pmin(nominal$flops_per_s, intensity * bandwidth[["median"]]) / 1e9
# kernel_names <- vapply(step, function(kernel) kernel$name, character(1))
# kernel_intensity <- vapply(step, function(kernel) kernel$flops / kernel$bytes, numeric(1))
# kernel_gflops <- t(vapply(step, function(kernel) rate[[shape_of(kernel)]] / 1e9, numeric(3)))  # median, low, high
# marks <- list(col = rep(c("steelblue", "darkorange", "forestgreen", "firebrick", "purple", "brown", "orchid", "grey40"),
#                         length.out = length(step)),
#               pch = rep(c(15:18, 0:3), length.out = length(step)))
# draw_roofline <- function() {
#   old <- par(mar = c(4.5, 4.5, 3, 1))
#   on.exit(par(old))
#   plot(intensity, roof, type = "l", log = "xy", ylim = range(c(roof, kernel_gflops)),
#        xlab = "arithmetic intensity (FLOP/byte)", ylab = "GFLOP/s",
#        main = "This CPU's roofline and the MLP's products (batch 64, float32; medians)", cex.main = 0.9)
#   abline(h = peak[["median"]] / 1e9, col = "grey50", lty = 2)
#   arrows(kernel_intensity, kernel_gflops[, 2], kernel_intensity, kernel_gflops[, 3], angle = 90, code = 3,
#          length = 0.02, col = marks$col)
#   points(kernel_intensity, kernel_gflops[, 1], pch = marks$pch, col = marks$col, cex = 1.2)
#   abline(v = 12 * n_weights / adam_bytes, col = "orange", lty = 3)
#   legend("topleft", kernel_names, pch = marks$pch, col = marks$col, cex = 0.65, bg = "white")
#   legend("bottomright", c("roofline: min(nominal peak, intensity x main memory's bandwidth)",
#                           "measured peak (median)", "Adam's update (intensity)"),
#          col = c("black", "grey50", "orange"), lty = c(1, 2, 3), cex = 0.7, bg = "white")
# }
# png("results/figures/08_speed_R_roofline.png", width = 8.5, height = 4.4, units = "in", res = 100)
# draw_roofline()
# invisible(dev.off())
# draw_roofline()

# %% [markdown]
# The memory roof is main memory's: a product whose operands come from DRAM cannot beat it. But every
# product here moves about a megabyte or less (printed above), and that fits in the caches of a
# current CPU (a few MB), which are faster than main memory; so for these products the memory roof is
# a guide, not a limit, and a product left of the ridge is not held back by DRAM. The printout says
# how far below the roof each product runs. A product far below both roofs is held back by neither
# arithmetic nor memory, but by the work around it: the smallest, layer 3's, with ten outputs per
# sample, take little more time than launching a kernel and reading its result.
#
# **MFU** (model FLOPs utilization) is the share of the hardware's nominal peak that a run's *useful*
# FLOPs reach: samples/s times the model's FLOPs per sample, divided by the nominal peak, as the PaLM
# paper defines it. It counts only the model's products, so the update, the overhead and the pipeline
# all lower it, and no run can reach 100%. Divided by the measured peak instead, the same figure is a
# **share of the measured peak**: it reads higher, and it is named so, not MFU.

# %% language="R"
# # Each rung's MFU (against the nominal peak) and share of the measured peak, and the same for the estimate.
# mfu <- speed[names(runs)] * flops$total / nominal$flops_per_s
# for (name in names(runs)) {
#   cat(sprintf("%-34s MFU %4.1f%%, share of the measured peak %4.1f%%\n", name, 100 * mfu[[name]],
#               100 * mfu[[name]] * nominal$flops_per_s / peak[["median"]]))
# }
# estimate_mfu <- batch_size / estimate_s * flops$total / nominal$flops_per_s
# cat(sprintf("%-34s MFU %4.1f%%, share of the measured peak %4.1f%%\n", "isolated-kernel estimate",
#             100 * estimate_mfu, 100 * estimate_mfu * nominal$flops_per_s / peak[["median"]]))

# %% [markdown]
# **Predict, then run.** Can any rung reach an MFU of 100%? If one did, what would that say about
# the FLOP count or the nominal peak? Can the fastest rung beat the isolated-kernel estimate?
# Decide, then run the cell.

# %% language="R"
# # The fastest rung against the bound and the estimate (printed, not asserted: on a busy machine the rates
# # measured alone move more than training does).
# fastest <- names(which.max(mfu))
# if (mfu[[fastest]] >= 1) stop("a rung beat the nominal peak: check the FLOP count and the clock the CPU reports")
# cat(sprintf("the fastest rung, %s, reaches %.0f%% of the bound and %.0f%% of the isolated-kernel estimate\n",
#             fastest, 100 * mfu[[fastest]], 100 * mfu[[fastest]] / estimate_mfu))

# %% [markdown]
# Now the bfloat16 limit. The same product at the first layer's shape, and a large one, in float32
# and bfloat16, with TensorFlow's kernel (what the loop without XLA runs) and with XLA's (what the
# `+ XLA` rungs run):

# %% language="R"
# # The largest kernel's shape and a large product, float32 and bfloat16, TensorFlow's kernel and XLA's (medians
# # and spreads), beside each dtype's nominal peak.
# cat(paste(vapply(c("float32", "bfloat16"), function(dtype) {
#   sprintf("nominal peak %s %s GFLOP/s", dtype, comma(kd_speed$nominal_flops_per_s(dtype)$flops_per_s / 1e9))
# }, character(1)), collapse = ", "), "\n", sep = "")
# # 50 products per call at the small shape, as the roofline cell; 10 of the large ones make a long enough call.
# for (shape in list(c(batch_size, 784L, 256L, 50L), c(1024L, 1024L, 1024L, 10L))) {
#   cat(sprintf("%d x %d @ %d x %d:\n", shape[1], shape[2], shape[2], shape[3]))
#   for (dtype in c("float32", "bfloat16")) {
#     for (jit in c(FALSE, TRUE)) {
#       value <- as_rate(kd_speed$gemm_flops_per_s(shape[1], shape[2], shape[3], dtype = dtype, jit_compile = jit,
#                                                  products = shape[4]))
#       cat(sprintf("  %-8s %-10s %6s GFLOP/s (spread %s to %s)\n", dtype, if (jit) "XLA" else "TensorFlow",
#                   comma(value[["median"]] / 1e9), comma(value[["low"]] / 1e9), comma(value[["high"]] / 1e9)))
#     }
#   }
# }

# %% [markdown]
# Compare the four rates of each shape. Where the CPU has bfloat16 instructions, TensorFlow's kernel
# (from oneDNN, the library of CPU kernels TensorFlow uses for products on x86) uses them; whether XLA's kernel for this CPU does is what the row shows. A bfloat16 rate
# measured with one kernel does not bound a run that uses another: judge the `+ XLA, bfloat16` rung
# against XLA's bfloat16 rate. A bfloat16 step also does work a float32 step does not: every float32
# weight is cast to bfloat16 each step and every gradient back, and element-wise ops convert on the
# way. Where the products are a small part of the step, those casts can make a bfloat16 rung slower
# than float32 even when its products run faster,
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
#   more replicas (the one program XLA would compile would read every replica's copy of a variable;
#   keras-team/keras#19005).
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
#   `apply_gradients`, after the whole backward pass (PyTorch's DistributedDataParallel, DDP, and XLA's asynchronous
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
# # of each machine's ridge: this CPU's (nominal peak over measured bandwidth, above), an H100's in TensorFloat-32
# # and in bfloat16 (model).
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
#   machine's nominal peak and bandwidth (the bound), and the rates it reaches at those shapes (the
#   estimate); MFU against the nominal peak, beside the estimate, says whether to look at overhead,
#   at memory traffic or at arithmetic.
# - **Use mixed precision where the hardware and the kernel have it** and the matrix products dominate;
#   keep the logits and the loss in float32; with float16, scale the loss.
# - **Look at the input pipeline where it shares the hardware**: on a CPU it takes cores from the
#   step; keep it cheap (shuffle indices, gather whole batches).

# %% [markdown]
# ## Summary
#
# - On one device the same model trains at very different speeds with the same accuracy: many steps
#   per call and XLA remove the work around the arithmetic, and a `lax.scan` epoch removes the host's
#   work between steps; the ladder gives each rung's speed against the guide's `fit()`, and the scan
#   taken apart measures what dispatching each step from Python costs.
# - One step's time splits into forward, backward (1.25 times the forward FLOPs here), optimizer
#   update and the host's overhead per call, measured as differences of nested programs so that they
#   add up to the step; a profiler's trace shows the same step op by op. The update is memory-bound
#   and made of many small ops, which XLA fuses.
# - A roofline from the nominal peak and main memory's bandwidth bounds the step; the products' rates
#   measured at their shapes give an estimate, which a fused step can beat; MFU is against the
#   nominal peak, and a share of the measured peak is named as such. Every rate is a median with its
#   spread.
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
#    bfloat16 pay now? What MFU does each reach, and what share of the rate its own kernel reaches?
#
# <details><summary>Hint</summary>
#
# `speed_ladder$measure()` takes a `batch_size`. The MFU is samples/s times `flops$total` over the
# nominal peak of the dtype the products run in: `kd_speed$nominal_flops_per_s("bfloat16")` for the
# bfloat16 run, not `nominal`, which is float32's. The share of the measured rate divides by the rate
# of the kernel the run uses (XLA's, in that dtype:
# `kd_speed$gemm_flops_per_s(..., dtype = "bfloat16", jit_compile = TRUE)`). Adam at batch 1024 needs
# more epochs for the same accuracy.
# </details>
#
# <details><summary>Solution</summary>
#
# ```r
# for (precision in c("float32", "mixed_bfloat16")) {
#   dtype <- if (precision == "float32") "float32" else "bfloat16"
#   run <- speed_ladder$measure("kerasdist loop + XLA", data_source, epochs, data = data, precision = precision,
#                               batch_size = 1024L)
#   useful <- steady_samples_per_s(run) * flops$total  # FLOP/s
#   kernel <- kd_speed$gemm_flops_per_s(1024L, 1024L, 1024L, dtype = dtype, jit_compile = TRUE)$median  # XLA's
#   cat(sprintf("%s %s samples/s MFU %.0f%% share of XLA's measured %s rate %.0f%% %.3f\n", precision,
#               comma(useful / flops$total), 100 * useful / kd_speed$nominal_flops_per_s(dtype)$flops_per_s, dtype,
#               100 * useful / kernel, run$test_accuracy))
# }
# ```
# Each product is 16 times larger while the overhead and the update per step stay the same, so both
# reach a larger MFU. Each is against its own dtype's peak: against float32's, a bfloat16 run would
# read several times too high on a CPU with fast bfloat16 instructions. Whether bfloat16 pays is
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
# cat(sprintf("%s FLOPs per sample, MFU %.0f%%\n", comma(wide_flops), 100 * rate * wide_flops / nominal$flops_per_s))
# ```
# Its products are larger and more intense, and they dominate its step, so it reaches a larger MFU
# than the MLP at the same batch.
# </details>
#
# Next: back to the [course map](../README.md), or lesson 3's
# [cost model](03_convergence_R.ipynb) with your own GPU's numbers.
