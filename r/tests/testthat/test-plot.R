# Plots from data shaped like kd_compare() and kd_train() results: pure R, no Python needed.

test_that("base graphics write a PNG for a comparison and for a training history", {
  comparison_png <- withr::local_tempfile(fileext = ".png")
  kd_plot_convergence(fake_comparison(), file = comparison_png, backend = "base")
  expect_gt(file.size(comparison_png), 1000)
  expect_true(is_png(comparison_png))

  history_png <- withr::local_tempfile(fileext = ".png")
  kd_plot_convergence(training_frame(fake_record()), file = history_png, backend = "base")
  expect_true(is_png(history_png))
})

test_that("without a file, base graphics draw on the current device and return x", {
  pdf_file <- withr::local_tempfile(fileext = ".pdf")
  grDevices::pdf(pdf_file)
  withr::defer(grDevices::dev.off())
  comparison <- fake_comparison()
  expect_identical(kd_plot_convergence(comparison, backend = "base"), comparison)
})

test_that("ggplot2 draws the same panels when it is installed", {
  skip_if_not_installed("ggplot2")
  plot <- kd_plot_convergence(fake_comparison(), backend = "ggplot2")
  expect_s3_class(plot, "ggplot")
  png_file <- withr::local_tempfile(fileext = ".png")
  kd_plot_convergence(training_frame(fake_record()), file = png_file, backend = "ggplot2")
  expect_true(is_png(png_file))
})

test_that("plotting something else, or into a missing folder, is a clear error", {
  expect_error(kd_plot_convergence(42), "must be the result of kd_compare\\(\\) or kd_train\\(\\)",
               class = "kerasdist_error")
  expect_error(kd_plot_convergence(data.frame(a = 1)), "Received columns: a", class = "kerasdist_error")
  expect_error(kd_plot_convergence(fake_comparison(), file = file.path(tempdir(), "no", "such", "x.png")),
               "its folder does not exist", class = "kerasdist_error")
  if (!requireNamespace("ggplot2", quietly = TRUE)) {
    expect_error(kd_plot_convergence(fake_comparison(), backend = "ggplot2"), "needs the ggplot2 package")
  }
})

test_that("the loss panel plots each step's batch loss, labelled by replicas and batch", {
  comparison <- fake_comparison()
  batch <- comparison[comparison$metric == "loss", ]
  batch$metric <- "batch_loss"
  batch$value <- batch$value + 0.1
  with_batch <- rbind(comparison, batch)
  attributes(with_batch)[c("runs", "virtual_cpus")] <- list(attr(comparison, "runs"), TRUE)
  panels <- convergence_panels(with_batch)
  expect_identical(panels[[1]]$ylab, "loss of each step's batch")
  expect_equal(panels[[1]]$points$y, batch$value)
  expect_setequal(unique(panels[[1]]$points$series), c("1 replica, batch 64", "2 replicas, batch 64"))
  expect_match(panels[[3]]$note, "share the same cores")
  # Without batch losses (an older record), the running mean is plotted and said so.
  expect_identical(convergence_panels(comparison)[[1]]$ylab, "loss (running epoch mean)")
})
