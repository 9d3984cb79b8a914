# Bad values: R users get the Python core's one-line message (the command line's, without its
# "kerasdist: error: " prefix) as an R error, and nothing is written.

# The message the Python core gives for the same call, made directly through reticulate.
python_message <- function(call) {
  tryCatch({
    call()
    NA_character_
  }, error = function(error) python_error_text(conditionMessage(error)))
}

test_that("bad values give the same one-line message as Python, as an R error, before anything is written", {
  skip_if_no_kerasdist()
  kd <- kd_module()
  checkpoints <- tempfile("kd-bad-input-")
  results <- tempfile("kd-bad-results-")
  train_cases <- list(
    list(seed = -1), list(seed = 2^32), list(learning_rate = NaN), list(learning_rate = Inf),
    list(warmup_epochs = -1), list(epochs = 1.5), list(epochs = 0), list(steps_per_execution = 0),
    list(save_every_steps = -4), list(replicas = 2, global_batch_size = 63)
  )
  for (bad in train_cases) {
    received <- tryCatch(
      do.call(kd_train, c(bad, list(data = "sample", checkpoint_dir = checkpoints, verbose = 0))),
      error = identity
    )
    expect_s3_class(received, "kerasdist_error")
    # The numbers Python gets from kd_train(): rates are doubles, counts integers when whole.
    python_args <- Map(function(x, name) {
      if (name %in% c("learning_rate", "warmup_epochs")) as_number(x, name) else as_count(x, name)
    }, bad, names(bad))
    expected <- python_message(function() {
      do.call(kd$run_training, c(python_args, list(data = "sample", checkpoint_dir = checkpoints, verbose = 0L)))
    })
    expect_identical(conditionMessage(received), expected)
    expect_match(expected, "^[a-z_]+ must be .+\\. Received: .+=.+; .+$")
    expect_false(grepl("\n", expected, fixed = TRUE))
    expect_false(dir.exists(checkpoints))
  }
  expect_error(kd_compare(replicas = c(1, 0), data = "sample", out_dir = results),
               "replicas must be an integer >= 1. Received: replicas=0; ", fixed = TRUE, class = "kerasdist_error")
  expect_error(kd_compare(seed = -1, data = "sample", out_dir = results),
               "seed must be an integer in [0, 2**32). Received: seed=-1; ", fixed = TRUE)
  expect_false(dir.exists(results))
  expect_error(kd_mnist("sample", seed = 2^40, verbose = FALSE),
               "seed must be an integer in [0, 2**32). Received: seed=1099511627776", fixed = TRUE)
})

test_that("training that diverges is an R error of class kerasdist_diverged naming epoch and step", {
  skip_if_no_kerasdist()
  expect_error(kd_train(epochs = 1, data = "sample", global_batch_size = 256, learning_rate = 1e30, verbose = 0),
               "the training loss must be finite. Received: loss=nan at epoch 1, step", fixed = TRUE,
               class = "kerasdist_diverged")
})
