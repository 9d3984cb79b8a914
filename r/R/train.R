# Training through the Python core's run_training(); the result record as a data.frame.

#' Train the MNIST MLP with N synchronous replicas, resumably
#'
#' Calls the Python core's `run_training()`: builds the guide's MLP
#' (784-256-256-10, Adam) inside a `tf.distribute` strategy, restores the
#' newest valid checkpoint in `checkpoint_dir` if there is one, and trains
#' until `epochs` epochs are done in all. A second call with a larger
#' `epochs` and the same `checkpoint_dir` trains only the missing epochs.
#'
#' Arguments are checked and coerced in R (whole numbers become integers, so
#' Python gets ints); their ranges are checked in Python before anything is
#' written, and its one-line message (the same as the command line's) becomes
#' the R error (class `kerasdist_error`). Training whose loss turns NaN or
#' infinite stops at once without checkpointing the bad weights, with an
#' error of class `kerasdist_diverged`; call again with a smaller
#' `learning_rate` to resume from the last good checkpoint.
#'
#' @param replicas Replicas on this machine (see [kd_simulate_devices()]).
#' @param epochs Total number of epochs to reach (not epochs to add).
#' @param global_batch_size Samples per step across all replicas; a multiple
#'   of `replicas`.
#' @param checkpoint_dir Folder for checkpoints and the metrics log; `NULL`:
#'   no checkpoints (and no resuming).
#' @param data `"auto"`, `"keras"`, `"sample"`, `"fashion"`, the path of an `.npz` file, or
#'   a [kd_mnist()] result.
#' @param seed Seeds the weights, the validation split and the data order.
#' @param backend `"tensorflow"` (`tf.distribute`) or `"jax"` (Keras'
#'   `keras.distribution` on JAX devices). Keras takes its backend once per R
#'   session, when it first loads: choose it in the session's first call (or
#'   start a new session to switch).
#' @param engine `"fit"` (Keras `fit()`) or `"loop"` (kerasdist's own loop,
#'   TensorFlow only).
#' @param strategy Strategy name (see [kd_strategy()]); `NULL`: `"mirrored"`
#'   for several replicas, else `"default"`.
#' @param learning_rate Adam's learning rate for one replica.
#' @param scale_learning_rate Multiply the learning rate by `replicas`.
#' @param warmup_epochs Epochs of linear learning-rate warm-up from the
#'   one-replica rate to the scaled one (with `scale_learning_rate = TRUE`;
#'   without it the rate stays flat).
#' @param jit_compile Compile training steps with XLA.
#' @param save_every_steps Also checkpoint every this many steps (`NULL`: at
#'   epoch ends only).
#' @param log_every_steps Log step metrics every this many steps (`NULL`:
#'   about 100 records per epoch).
#' @param steps_per_execution Steps per compiled call (`NULL`: 50 for the loop
#'   engine, 1 for the JAX engine, so that each step's own loss is logged).
#' @param deterministic Seed everything and use deterministic TensorFlow ops.
#' @param verbose 0 silent, 1 progress bar, 2 one line per epoch.
#' @returns A data.frame (class `kd_training`) with one row per epoch trained
#'   so far in `checkpoint_dir`, resumed epochs included: `epoch` (1-based),
#'   `global_step`, `loss`, `sparse_categorical_accuracy`, `val_loss`,
#'   `val_sparse_categorical_accuracy`, `wall_time_s`, `samples_per_s`.
#'   Attributes: `replicas`, `backend`, `strategy`, `engine`, `epochs` (the target),
#'   `initial_epoch` (epochs done before this call), `epochs_run` (epochs
#'   this call trained), `wall_time_s`, `samples_per_s` (`NA` if nothing was
#'   trained), `test` (named numeric: `loss`, `accuracy`), `data_source`
#'   (list: `name`, `description`, `train`, `val`, `test`), `checkpoint`
#'   (path of the checkpoint written last, or `NA`), `steps` (data.frame of
#'   per-step metrics), `record` (the full result record as a list) and
#'   `model` (the Keras model, a Python object).
#' @family training
#' @export
#' @examples
#' \donttest{
#' if (kd_available()) {
#'   kd_simulate_devices(2)
#'   checkpoints <- tempfile()
#'   history <- kd_train(replicas = 2, epochs = 2, data = "sample", checkpoint_dir = checkpoints)
#'   history
#'   # Raise the target: only epoch 3 is trained.
#'   history <- kd_train(replicas = 2, epochs = 3, data = "sample", checkpoint_dir = checkpoints)
#'   attr(history, "initial_epoch")
#'   unlink(checkpoints, recursive = TRUE)
#' }
#' }
kd_train <- function(replicas = 1, epochs = 3, global_batch_size = 64, checkpoint_dir = NULL,
                     data = "auto", seed = 0, backend = "tensorflow", engine = "fit", strategy = NULL,
                     learning_rate = 1e-3, scale_learning_rate = FALSE, warmup_epochs = 0,
                     jit_compile = FALSE, save_every_steps = NULL, log_every_steps = NULL,
                     steps_per_execution = NULL, deterministic = TRUE, verbose = 2) {
  args <- list(
    replicas = as_count(replicas, "replicas"),
    epochs = as_count(epochs, "epochs"),
    global_batch_size = as_count(global_batch_size, "global_batch_size"),
    checkpoint_dir = as_path(checkpoint_dir, "checkpoint_dir", null_ok = TRUE),
    data = as_data(data),
    seed = as_count(seed, "seed"),
    backend = as_string(backend, "backend"),
    engine = as_string(engine, "engine"),
    strategy = as_string(strategy, "strategy", null_ok = TRUE),
    learning_rate = as_number(learning_rate, "learning_rate"),
    scale_learning_rate = as_flag(scale_learning_rate, "scale_learning_rate"),
    warmup_epochs = as_number(warmup_epochs, "warmup_epochs"),
    jit_compile = as_flag(jit_compile, "jit_compile"),
    save_every_steps = as_count(save_every_steps, "save_every_steps", null_ok = TRUE),
    log_every_steps = as_count(log_every_steps, "log_every_steps", null_ok = TRUE),
    steps_per_execution = as_count(steps_per_execution, "steps_per_execution", null_ok = TRUE),
    deterministic = as_flag(deterministic, "deterministic"),
    verbose = as_verbose(verbose)
  )
  collect_python_garbage()
  result <- kd_call(do.call(kd_module()$run_training, args))
  frame <- training_frame(result$to_dict(), model = result$model)
  rm(result)
  collect_python_garbage()
  frame
}

# The result record (a list) as the kd_training data.frame.
training_frame <- function(record, model = NULL) {
  history <- epoch_frame(record$history)
  structure(
    history,
    class = c("kd_training", "data.frame"),
    replicas = as.integer(record$replicas),
    backend = record$backend,
    strategy = record$strategy,
    engine = record$engine,
    epochs = as.integer(record$epochs),
    initial_epoch = as.integer(record$initial_epoch),
    epochs_run = as.integer(record$epochs_run),
    wall_time_s = as.numeric(record$wall_time_s),
    samples_per_s = as.numeric(record$samples_per_s %||% NA_real_),
    test = c(loss = as.numeric(record$test$loss), accuracy = as.numeric(record$test$accuracy)),
    data_source = record$data_source,
    checkpoint = record$checkpoint %||% NA_character_,
    steps = epoch_frame(record$steps),
    record = record,
    model = model
  )
}

# Columns of per-epoch (or per-step) records, with the 0-based Python epoch made 1-based.
epoch_frame <- function(columns) {
  frame <- columns_frame(columns)
  if ("epoch" %in% names(frame)) {
    frame$epoch <- as.integer(frame$epoch) + 1L
  }
  for (name in intersect(c("step", "global_step"), names(frame))) {
    frame[[name]] <- as.integer(frame[[name]])
  }
  if (ncol(frame) == 0L) {
    frame <- data.frame(epoch = integer(0))
  }
  frame
}

#' @export
print.kd_training <- function(x, ...) {
  replicas <- attr(x, "replicas")
  if (!is.null(replicas)) {
    done <- attr(x, "initial_epoch")
    target <- attr(x, "epochs")
    run <- attr(x, "epochs_run")
    this_run <- if (isTRUE(run > 0L)) {
      sprintf("this call trained epoch%s %s", if (run > 1L) "s" else "",
              if (run > 1L) paste0(done + 1L, "-", target) else target)
    } else {
      "nothing left to train"
    }
    source <- attr(x, "data_source")
    cat(sprintf("<kd_training> %d replica%s (%s, %s): %d of %d epochs, %s\n", replicas,
                if (replicas > 1L) "s" else "", attr(x, "strategy"), attr(x, "engine"),
                nrow(x), target, this_run))
    cat(sprintf("test accuracy %.4f, loss %.4f; data: %s (%s train / %s val / %s test)\n",
                attr(x, "test")[["accuracy"]], attr(x, "test")[["loss"]], source$name,
                source$train, source$val, source$test))
  }
  print(as.data.frame(unclass_frame(x)), ...)
  invisible(x)
}

unclass_frame <- function(x) {
  class(x) <- "data.frame"
  attributes(x)[setdiff(names(attributes(x)), c("names", "row.names", "class"))] <- NULL
  x
}
