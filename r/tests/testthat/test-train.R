# Training through the Python core: one row per epoch, resuming, errors.

test_that("kd_train returns one row per epoch and resumes up to a higher target", {
  skip_if_no_kerasdist()
  checkpoints <- tempfile("kd-checkpoints-")
  withr::defer(unlink(checkpoints, recursive = TRUE))

  first <- kd_train(replicas = 2, epochs = 1, data = "sample", checkpoint_dir = checkpoints, verbose = 0)
  expect_s3_class(first, "data.frame")
  expect_identical(nrow(first), 1L)
  expect_identical(first$epoch, 1L)
  expect_true(all(c("epoch", "global_step", "loss", "sparse_categorical_accuracy", "val_loss",
                    "val_sparse_categorical_accuracy") %in% names(first)))
  expect_type(first$loss, "double")
  expect_identical(first$global_step, 52L) # 3333 training images / 64 per global batch
  expect_identical(attr(first, "replicas"), 2L)
  expect_identical(attr(first, "strategy"), "mirrored")
  expect_identical(attr(first, "initial_epoch"), 0L)
  expect_identical(attr(first, "epochs_run"), 1L)
  expect_gt(attr(first, "wall_time_s"), 0)
  expect_gt(attr(first, "samples_per_s"), 0)
  expect_named(attr(first, "test"), c("loss", "accuracy"))
  expect_gt(attr(first, "test")[["accuracy"]], 0.5)
  expect_identical(attr(first, "data_source")$name, "sample")
  expect_identical(attr(first, "data_source")$train, 3333L)
  expect_gt(length(Sys.glob(paste0(attr(first, "checkpoint"), "*"))), 0L)
  expect_identical(nrow(attr(first, "steps")), 52L)
  expect_type(attr(first, "record"), "list")

  # Raise the target: only epoch 2 is trained; epoch 1 comes from the metrics log.
  second <- kd_train(replicas = 2, epochs = 2, data = "sample", checkpoint_dir = checkpoints, verbose = 0)
  expect_identical(second$epoch, 1:2)
  expect_identical(attr(second, "initial_epoch"), 1L)
  expect_identical(attr(second, "epochs_run"), 1L)
  expect_identical(second$loss[[1]], first$loss[[1]])
  expect_lt(second$loss[[2]], second$loss[[1]])

  # Target reached: nothing is trained, the history is still all there (data from kd_mnist() works too).
  mnist <- kd_mnist("sample", verbose = FALSE, convert = FALSE)
  again <- kd_train(replicas = 2, epochs = 2, data = mnist, checkpoint_dir = checkpoints, verbose = 0)
  expect_identical(nrow(again), 2L)
  expect_identical(attr(again, "epochs_run"), 0L)
  expect_identical(attr(again, "samples_per_s"), NA_real_)
})

test_that("range errors come from Python as R errors with its message", {
  skip_if_no_kerasdist()
  expect_error(kd_train(replicas = 0, data = "sample"), "replicas must be an integer >= 1. Received: replicas=0",
               fixed = TRUE, class = "kerasdist_error")
  expect_error(kd_train(replicas = 2, global_batch_size = 63, data = "sample"), "divisible by replicas",
               class = "kerasdist_error")
  expect_error(kd_train(engine = "nope", data = "sample"), "engine must be one of auto, fit, loop",
               class = "kerasdist_error")
})

test_that("kd_train(backend = 'jax') trains on JAX devices and resumes, in an R session of its own", {
  skip_if_no_kerasdist()
  # Keras takes its backend once per session: this test's R session is a new one.
  checkpoints <- tempfile("kd-jax-")
  withr::defer(unlink(checkpoints, recursive = TRUE))
  script <- sprintf('
    library(kerasdist)
    first <- kd_train(backend = "jax", replicas = 2, epochs = 1, data = "sample", checkpoint_dir = "%1$s",
                      verbose = 0)
    second <- kd_train(backend = "jax", replicas = 2, epochs = 2, data = "sample", checkpoint_dir = "%1$s",
                       verbose = 0)
    other <- tryCatch(kd_train(backend = "tensorflow", epochs = 1, data = "sample", verbose = 0),
                      kerasdist_error = conditionMessage)
    cat(jsonlite::toJSON(list(backend = attr(second, "backend"), strategy = attr(second, "strategy"),
                              replicas = attr(second, "replicas"), epochs = second$epoch,
                              initial_epoch = attr(second, "initial_epoch"), first_loss = first$loss,
                              second_loss = second$loss, accuracy = attr(second, "test")[["accuracy"]],
                              other = other), auto_unbox = TRUE, digits = NA))', checkpoints)
  run <- processx::run(file.path(R.home("bin"), "Rscript"), c("-e", script), error_on_status = FALSE,
                       timeout = 600)
  expect_identical(run$status, 0L, info = run$stderr)
  result <- jsonlite::fromJSON(tail(strsplit(run$stdout, "\n")[[1]], 1))
  expect_identical(result$backend, "jax")
  expect_identical(result$strategy, "DataParallel")
  expect_identical(result$replicas, 2L)
  expect_identical(result$epochs, 1:2)
  expect_identical(result$initial_epoch, 1L)
  expect_identical(result$second_loss[[1]], result$first_loss[[1]])
  expect_gt(result$accuracy, 0.8)
  expect_match(result$other, "^Keras is already loaded on jax in this process")
})
