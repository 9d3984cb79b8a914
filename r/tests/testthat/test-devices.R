# Devices and strategies through the Python core.

test_that("kd_simulate_devices makes replicas and kd_devices lists them", {
  skip_if_no_kerasdist()
  devices <- kd_simulate_devices(2)
  expect_type(devices, "character")
  expect_length(devices, 2L)
  listed <- kd_devices()
  expect_s3_class(listed, "data.frame")
  expect_named(listed, c("name", "type", "kind", "mirrored"))
  expect_true(all(devices %in% listed$name[listed$kind == "logical"]))
  expect_type(listed$mirrored, "logical")
  expect_true(any(listed$mirrored))
})

test_that("bad device requests give R errors with the Python message", {
  skip_if_no_kerasdist()
  expect_error(kd_simulate_devices(0), "replicas must be an integer >= 1. Received: replicas=0",
               fixed = TRUE, class = "kerasdist_error")
  expect_error(kd_simulate_devices("two"), "`n` must be a single whole number", class = "kerasdist_error")
  # TensorFlow's devices exist now: more replicas need a fresh process, and the error says so.
  expect_error(kd_simulate_devices(64), "restart the kernel", class = "kerasdist_error")
})

test_that("kd_strategy builds strategies by name and explains the ones that cannot run here", {
  skip_if_no_kerasdist()
  strategy <- kd_strategy("mirrored", replicas = 2, verbose = FALSE)
  expect_s3_class(strategy, "python.builtin.object")
  expect_identical(strategy$num_replicas_in_sync, 2L)
  expect_error(kd_strategy("parameter_server", verbose = FALSE), "needs a cluster", class = "kerasdist_error")
  expect_error(kd_strategy("nope", verbose = FALSE), "unknown strategy", class = "kerasdist_error")
})
