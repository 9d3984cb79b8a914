# The convergence experiment (one device vs N replicas) as a tidy data.frame.

#' Compare one device with N replicas: same seed, same data order
#'
#' Calls the Python core's `run_comparison()`. In mode `"fixed_global"` every
#' run uses the same global batch, seed and data order, so synchronous data
#' parallelism should give the same curve as one device, up to float
#' round-off. In mode `"fixed_per_replica"` each replica keeps
#' `global_batch_size` samples, so the global batch grows with N and the
#' learning rate follows the linear scaling rule with `warmup_epochs` of
#' warm-up.
#'
#' @param replicas Replica counts to run, e.g. `c(1, 2)`; 1 is the baseline.
#' @param epochs Epochs per run.
#' @param global_batch_size The global batch (`"fixed_global"`) or the
#'   per-replica batch (`"fixed_per_replica"`).
#' @param data `"auto"`, `"keras"`, `"sample"`, `"fashion"`, the path of an `.npz` file, or
#'   a [kd_mnist()] result.
#' @param seed The seed all runs share.
#' @param out_dir If not `NULL`, the Python core also writes
#'   `comparison.json`, `comparison.csv` and `convergence.png` (matplotlib)
#'   there.
#' @param modes One or both of `"fixed_global"`, `"fixed_per_replica"`.
#' @param learning_rate Base learning rate.
#' @param warmup_epochs Warm-up length for `"fixed_per_replica"`.
#' @param engine `"fit"` or `"loop"`.
#' @param verbose 0 silent; 1 a progress bar across runs.
#' @param backend `"tensorflow"` or `"jax"` (see [kd_train()]).
#' @returns A tidy data.frame (class `kd_comparison`), one row per run, level,
#'   index and metric, with columns `run` (e.g. `"fixed_global/2"`), `mode`,
#'   `replicas`, `global_batch_size`, `level` (`"step"` or `"epoch"`),
#'   `index` (the global step, or the 1-based epoch), `metric` (a Keras
#'   metric name such as `"loss"` (at step level: the running epoch mean),
#'   `"batch_loss"` (each step's own batch) or
#'   `"val_sparse_categorical_accuracy"`) and `value`. Attributes: `runs` (a
#'   data.frame with one row per run: wall time, samples/s, steady-state
#'   samples/s after the first epoch, test loss and accuracy),
#'   `max_abs_loss_difference` (per mode, the largest |training loss
#'   difference| to the 1-replica run, per `step` and per `epoch`), `files`
#'   (paths written to `out_dir`), `virtual_cpus` (`TRUE` when the replicas
#'   are virtual CPU devices) and `record` (the full result record as a list).
#' @family training
#' @export
#' @examples
#' \donttest{
#' if (kd_available()) {
#'   comparison <- kd_compare(replicas = c(1, 2), epochs = 2, data = "sample")
#'   attr(comparison, "max_abs_loss_difference")
#'   kd_plot_convergence(comparison, file = tempfile(fileext = ".png"))
#' }
#' }
kd_compare <- function(replicas = c(1, 2), epochs = 3, global_batch_size = 64, data = "auto",
                       seed = 0, out_dir = NULL, modes = "fixed_global", learning_rate = 1e-3,
                       warmup_epochs = 1, engine = "fit", verbose = 1, backend = "tensorflow") {
  args <- list(
    replicas = as_counts(replicas, "replicas"),
    epochs = as_count(epochs, "epochs"),
    global_batch_size = as_count(global_batch_size, "global_batch_size"),
    data = as_data(data),
    seed = as_count(seed, "seed"),
    out_dir = as_path(out_dir, "out_dir", null_ok = TRUE),
    modes = as_strings(modes, "modes"),
    learning_rate = as_number(learning_rate, "learning_rate"),
    warmup_epochs = as_number(warmup_epochs, "warmup_epochs"),
    engine = as_string(engine, "engine"),
    verbose = as_verbose(verbose),
    backend = as_string(backend, "backend")
  )
  collect_python_garbage()
  comparison <- kd_call(do.call(kd_module()$run_comparison, args))
  frame <- comparison_frame(comparison$tidy(), comparison$to_dict())
  rm(comparison)
  collect_python_garbage()
  frame
}

# Tidy rows (a list of dicts) and the record as the kd_comparison data.frame.
comparison_frame <- function(rows, record) {
  column <- function(name, template) {
    vapply(rows, function(row) {
      value <- row[[name]]
      if (is.null(value)) {
        return(template[NA_integer_])
      }
      storage.mode(value) <- typeof(template)
      value
    }, template)
  }
  frame <- data.frame(
    run = column("run", character(1)),
    mode = column("mode", character(1)),
    replicas = column("replicas", integer(1)),
    global_batch_size = column("global_batch_size", integer(1)),
    level = column("level", character(1)),
    index = column("index", integer(1)),
    metric = column("metric", character(1)),
    value = column("value", numeric(1)),
    stringsAsFactors = FALSE
  )
  runs <- record$runs
  summary <- data.frame(
    run = vapply(runs, function(r) paste0(r$mode, "/", r$replicas), ""),
    mode = vapply(runs, function(r) r$mode, ""),
    replicas = vapply(runs, function(r) as.integer(r$replicas), 0L),
    global_batch_size = vapply(runs, function(r) as.integer(r$global_batch_size), 0L),
    learning_rate = vapply(runs, function(r) as.numeric(r$learning_rate), 0),
    epochs = vapply(runs, function(r) as.integer(r$epochs), 0L),
    wall_time_s = vapply(runs, function(r) as.numeric(r$wall_time_s), 0),
    samples_per_s = vapply(runs, function(r) as.numeric(r$samples_per_s %||% NA_real_), 0),
    steady_samples_per_s = vapply(runs, function(r) as.numeric(r$steady_samples_per_s %||% NA_real_), 0),
    test_loss = vapply(runs, function(r) as.numeric(r$test$loss), 0),
    test_accuracy = vapply(runs, function(r) as.numeric(r$test$accuracy), 0),
    stringsAsFactors = FALSE
  )
  structure(
    frame,
    class = c("kd_comparison", "data.frame"),
    runs = summary,
    max_abs_loss_difference = record$max_abs_loss_difference,
    files = unlist(record$files) %||% character(0),
    virtual_cpus = isTRUE(record$virtual_cpus),
    record = record
  )
}

#' @export
print.kd_comparison <- function(x, n = 10L, ...) {
  runs <- attr(x, "runs")
  if (!is.null(runs)) {
    cat(sprintf("<kd_comparison> %d runs, %d tidy rows (run, mode, replicas, level, index, metric, value)\n",
                nrow(runs), nrow(x)))
    print(runs, row.names = FALSE)
    differences <- attr(x, "max_abs_loss_difference")
    for (mode in names(differences)) {
      step <- differences[[mode]]$step
      cat(sprintf("%s: max |training loss difference| to 1 replica: per step %s, per epoch %.3g\n", mode,
                  if (is.null(step)) "n/a" else sprintf("%.3g", step), differences[[mode]]$epoch))
    }
    cat(sprintf("First %d rows:\n", min(n, nrow(x))))
  }
  print(utils::head(unclass_frame(x), n), ...)
  invisible(x)
}
