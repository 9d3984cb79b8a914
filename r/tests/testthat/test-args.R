# Argument checks and result conversion: pure R, no Python needed.

test_that("arguments are checked and coerced before Python is called", {
  expect_error(kd_train(replicas = "2"), "`replicas` must be a single whole number", class = "kerasdist_error")
  expect_error(kd_train(replicas = c(1, 2)), "Received: c(1, 2)", fixed = TRUE)
  expect_error(kd_train(data = 3), "`data` must be", class = "kerasdist_error")
  expect_error(kd_train(jit_compile = NA), "`jit_compile` must be TRUE or FALSE")
  expect_error(kd_train(verbose = 3), "`verbose` must be 0, 1, 2")
  expect_error(kd_compare(replicas = numeric(0)), "`replicas` must be a vector of whole numbers")
  expect_error(kd_train(learning_rate = "fast"), "`learning_rate` must be a single number")
  expect_error(kd_plot_convergence(fake_comparison(), file = tempfile(fileext = ".png"), width = 1.5),
               "`width` must be a single whole number >= 1")
  expect_error(kd_compare(modes = 1), "`modes` must be a character vector")
  expect_identical(as_count(2, "n"), 2L)
  expect_null(as_count(NULL, "n", null_ok = TRUE))
  expect_identical(as_counts(c(1, 2), "replicas"), list(1L, 2L))
  expect_identical(as_counts(2, "replicas"), list(2L))
  # Numbers R cannot make an integer go to Python as they are: its range check gives the message.
  expect_identical(as_count(1.5, "epochs"), 1.5)
  expect_identical(as_count(2^40, "seed"), 2^40)
  expect_identical(as_count(NaN, "seed"), NaN)
  expect_identical(as_number(Inf, "learning_rate"), Inf)
  expect_identical(as_verbose(TRUE), 1L)
})

test_that("data sources keep their names and paths become absolute", {
  expect_identical(as_data("sample"), "sample")
  withr::local_dir(tempdir())
  expect_identical(as_data("mnist.npz"), file.path(normalizePath(tempdir(), winslash = "/"), "mnist.npz"))
  expect_identical(as_data("nonsense"), "nonsense") # Python says which sources exist
})

test_that("Python's error text is kept, reticulate's decoration dropped", {
  old_style <- "kerasdist.errors.KerasdistError: replicas must be an integer >= 1. Received: replicas=0\n"
  new_style <- paste0("kerasdist.errors.KerasdistError: replicas must be an integer >= 1. Received: replicas=0\n",
                      "Run `reticulate::py_last_error()` for details.")
  expected <- "replicas must be an integer >= 1. Received: replicas=0"
  expect_identical(python_error_text(old_style), expected)
  expect_identical(python_error_text(new_style), expected)
})

test_that("a result record becomes a data.frame with one row per epoch and the record's attributes", {
  record <- fake_record(epochs = 3L)
  history <- training_frame(record)
  expect_s3_class(history, "data.frame")
  expect_s3_class(history, "kd_training")
  expect_identical(nrow(history), 3L)
  expect_identical(history$epoch, 1:3) # Python's 0-based epochs, 1-based in R
  expect_identical(history$global_step, c(52L, 104L, 156L))
  expect_type(history$loss, "double")
  expect_identical(history$samples_per_s, c(NA, 1000, 1000)) # None -> NA
  expect_identical(attr(history, "replicas"), 2L)
  expect_identical(attr(history, "initial_epoch"), 2L)
  expect_identical(attr(history, "epochs_run"), 1L)
  expect_identical(attr(history, "test"), c(loss = 0.31, accuracy = 0.91))
  expect_identical(attr(history, "samples_per_s"), NA_real_)
  expect_identical(attr(history, "checkpoint"), NA_character_)
  expect_identical(attr(history, "data_source")$train, 3333L)
  expect_identical(attr(history, "steps")$epoch, c(1L, 1L))
  expect_identical(attr(history, "record"), record)
  expect_output(print(history), "2 replicas \\(mirrored, fit\\): 3 of 3 epochs, this call trained epoch 3")
})
