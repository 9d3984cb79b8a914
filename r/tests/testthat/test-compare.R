# The convergence experiment as a tidy data.frame, and its plot.

test_that("kd_compare returns a tidy data.frame of both runs, and kd_plot_convergence writes a PNG", {
  skip_if_no_kerasdist()
  comparison <- kd_compare(replicas = c(1, 2), epochs = 1, data = "sample", verbose = 0)
  expect_s3_class(comparison, "data.frame")
  expect_true(all(c("run", "mode", "replicas", "level", "index", "metric", "value") %in% names(comparison)))
  expect_type(comparison$run, "character")
  expect_type(comparison$replicas, "integer")
  expect_type(comparison$index, "integer")
  expect_type(comparison$value, "double")
  expect_setequal(unique(comparison$run), c("fixed_global/1", "fixed_global/2"))
  expect_setequal(unique(comparison$level), c("step", "epoch"))
  step_loss <- comparison[comparison$level == "step" & comparison$metric == "loss", ]
  expect_identical(as.vector(table(step_loss$replicas)), c(52L, 52L))
  accuracy <- comparison[comparison$metric == "val_sparse_categorical_accuracy", ]
  expect_identical(accuracy$index, c(1L, 1L))

  runs <- attr(comparison, "runs")
  expect_identical(runs$replicas, 1:2)
  expect_true(all(runs$test_accuracy > 0.5))
  difference <- attr(comparison, "max_abs_loss_difference")$fixed_global
  expect_lt(difference$step, 1e-3) # same global batch, seed and data order: the same curve

  png_file <- withr::local_tempfile(fileext = ".png")
  expect_identical(kd_plot_convergence(comparison, file = png_file, backend = "base"),
                   normalizePath(png_file, winslash = "/", mustWork = FALSE))
  expect_gt(file.size(png_file), 1000)
  expect_true(is_png(png_file))
})
