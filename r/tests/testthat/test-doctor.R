# kd_doctor(): one row per check, a fix for every problem, the engine each strategy gets.

test_that("kd_doctor reports every check with a status, and a fix for each broken one", {
  skip_if_no_kerasdist()
  report <- kd_doctor(probes = FALSE)
  expect_s3_class(report, "kd_doctor")
  expect_named(report, c("status", "check", "found", "needed_by", "fix"))
  expect_true(all(report$status %in% c("OK", "missing", "broken")))
  expect_true(all(nzchar(report$fix[report$status == "broken"])))
  expect_true(all(c("Python", "TensorFlow", "R", "reticulate (R)", "keras3 (R)", "rpy2 (embedded R)",
                    "NumPy vs reticulate") %in% report$check))
  expect_identical(report$found[report$check == "R"], paste(R.version$major, R.version$minor, sep = "."))
  keras3 <- report[report$check == "keras3 (R)", ]
  expect_identical(keras3$status == "OK", requireNamespace("keras3", quietly = TRUE))
  engines <- attr(report, "engines")
  expect_identical(engines$engine[engines$strategy == "multi_worker"], "loop")
  expect_output(print(report), "engine = \"auto\" picks:")
})

test_that("the R checks run without Python and match what R has", {
  rows <- doctor_r_rows()
  expect_identical(rows$check, c("R", "reticulate (R)", "keras3 (R)", "tfdatasets (R)", "tensorflow (R)"))
  expect_identical(rows$found[2], as.character(utils::packageVersion("reticulate")))
  for (package in c("keras3", "tfdatasets", "tensorflow")) {
    row <- rows[rows$check == paste(package, "(R)"), ]
    installed <- nzchar(system.file(package = package))
    expect_identical(row$status == "OK", installed)
    if (!installed) expect_match(row$fix, "install.packages", fixed = TRUE)
  }
})
