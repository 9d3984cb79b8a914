# MNIST (the offline sample) as R matrices.

test_that("kd_mnist returns the sample as matrices and integer labels", {
  skip_if_no_kerasdist()
  mnist <- kd_mnist("sample", verbose = FALSE)
  expect_s3_class(mnist, "kd_mnist")
  expect_identical(dim(mnist$x_train), c(3333L, 784L))
  expect_identical(dim(mnist$x_val), c(667L, 784L))
  expect_identical(dim(mnist$x_test), c(1000L, 784L))
  expect_type(mnist$x_train, "double")
  expect_true(all(mnist$x_train >= 0 & mnist$x_train <= 1))
  expect_type(mnist$y_train, "integer")
  expect_setequal(unique(mnist$y_test), 0:9)
  expect_identical(mnist$source, "sample")
  expect_output(print(mnist), "3333 train / 667 val / 1000 test")
  expect_s3_class(kd_mnist("sample", verbose = FALSE, convert = FALSE), "python.builtin.object")
})

test_that("an unknown data source is an R error with the Python message", {
  skip_if_no_kerasdist()
  expect_error(kd_mnist("nonsense", verbose = FALSE), "unknown data source", class = "kerasdist_error")
  expect_error(kd_mnist(file.path(tempdir(), "missing.npz"), verbose = FALSE), "data file not found",
               class = "kerasdist_error")
})

test_that("kd_mnist(\"fashion\") returns Fashion-MNIST, split like full MNIST", {
  skip_if_no_kerasdist()
  if (!dir.exists(kd_module()$data$FASHION_DEBIAN_DIR)) {
    # Set-up installs the package as root; the project's test command may not pass without it.
    reason <- "Debian's dataset-fashion-mnist package is not installed (scripts/setup.sh installs it)"
    if (isTRUE(as.logical(Sys.getenv("KERASDIST_TEST_REQUIRE_PYTHON", "false")))) stop(reason, call. = FALSE)
    skip(reason)
  }
  fashion <- kd_mnist("fashion", verbose = FALSE)
  expect_identical(fashion$source, "fashion")
  expect_identical(dim(fashion$x_train), c(50000L, 784L))
  expect_identical(dim(fashion$x_val), c(10000L, 784L))
  expect_identical(dim(fashion$x_test), c(10000L, 784L))
  expect_setequal(unique(fashion$y_test), 0:9)
  expect_output(print(fashion), "clothing .* 50000 train / 10000 val / 10000 test")
})
