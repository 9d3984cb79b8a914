# Test helpers: skip (or, in CI, fail) when the Python side is missing; make replicas first.

# Skip a test that needs the Python package kerasdist, saying why. With
# KERASDIST_TEST_REQUIRE_PYTHON=true (the project's test command sets it) a
# missing Python fails the test instead, so CI cannot pass by skipping.
skip_if_no_kerasdist <- function() {
  problem <- tryCatch({
    kd_module()
    NULL
  }, error = conditionMessage)
  if (!is.null(problem)) {
    reason <- paste("kerasdist (Python) is not available:", strsplit(problem, "\n")[[1]][1])
    if (isTRUE(as.logical(Sys.getenv("KERASDIST_TEST_REQUIRE_PYTHON", "false")))) {
      stop(reason, call. = FALSE)
    }
    testthat::skip(reason)
  }
  # Two replicas for every test, made before anything starts TensorFlow's devices.
  kd_simulate_devices(2)
  invisible(TRUE)
}

# A Python interpreter on this machine that lacks kerasdist, or NULL.
python_without_kerasdist <- function() {
  candidates <- unique(c(Sys.which(c("python3", "python")), "/usr/bin/python3", "/usr/local/bin/python3"))
  for (python in candidates[nzchar(candidates) & file.exists(candidates)]) {
    if (!python_has_kerasdist(python)) {
      return(python)
    }
  }
  NULL
}

# A result record shaped like the Python core's TrainingResult.to_dict() (no Python needed).
fake_record <- function(epochs = 2L, replicas = 2L) {
  list(
    replicas = replicas, strategy = "mirrored", engine = "fit", epochs = epochs,
    initial_epoch = epochs - 1L, epochs_run = 1L,
    history = list(
      epoch = seq_len(epochs) - 1L, global_step = seq_len(epochs) * 52L,
      loss = seq(0.9, 0.3, length.out = epochs), sparse_categorical_accuracy = seq(0.75, 0.9, length.out = epochs),
      val_loss = seq(0.4, 0.28, length.out = epochs),
      val_sparse_categorical_accuracy = seq(0.86, 0.91, length.out = epochs),
      wall_time_s = rep(3, epochs), samples_per_s = c(list(NULL), as.list(rep(1000, epochs - 1L)))
    ),
    steps = list(epoch = c(0L, 0L), step = 1:2, global_step = 1:2, loss = c(2.3, 2.2)),
    test = list(loss = 0.31, accuracy = 0.91), wall_time_s = 3.3, samples_per_s = NULL,
    data_source = list(name = "sample", description = "sample", train = 3333L, val = 667L, test = 1000L),
    checkpoint = NULL
  )
}

# A tidy comparison shaped like kd_compare()'s result (no Python needed).
fake_comparison <- function() {
  rows <- list()
  for (replicas in 1:2) {
    run <- paste0("fixed_global/", replicas)
    rows[[length(rows) + 1L]] <- data.frame(
      run = run, mode = "fixed_global", replicas = replicas, global_batch_size = 64L,
      level = c(rep("step", 104L), rep("epoch", 2L)), index = c(1:104, 1:2),
      metric = c(rep("loss", 104L), rep("val_sparse_categorical_accuracy", 2L)),
      value = c(2.3 * exp(-(1:104) / 40), 0.86, 0.91), stringsAsFactors = FALSE
    )
  }
  frame <- do.call(rbind, rows)
  attr(frame, "runs") <- data.frame(run = c("fixed_global/1", "fixed_global/2"),
                                    samples_per_s = c(4000, 1200), stringsAsFactors = FALSE)
  frame
}

is_png <- function(path) {
  identical(readBin(path, "raw", 8L), as.raw(c(0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a)))
}
