# Checked exercises from R: the Python checks, given R objects, answering in R's terms.

test_that("an exercise checks the R student's own function and says what is wrong in R's terms", {
  skip_if_no_kerasdist()
  ex <- kd_exercises("01")
  expect_true(all(c("q1", "q2", "q3") %in% names(ex)))
  expect_s3_class(ex$q1, "kd_exercise")

  per_replica_batch <- function(global_batch, num_replicas) global_batch %/% num_replicas
  expect_output(verdict <- kd_check(ex$q1), "Correct")
  expect_equal(verdict$status, "Correct")

  # R's numbers are doubles: a whole one is right, whichever way it was computed.
  per_replica_batch <- function(global_batch, num_replicas) floor(global_batch / num_replicas)
  expect_equal(kd_verdict(ex$q1)$status, "Correct")

  per_replica_batch <- function(global_batch, num_replicas) global_batch * num_replicas
  wrong <- kd_verdict(ex$q1)
  expect_equal(wrong$status, "Incorrect")
  expect_match(wrong$message, "split among 2 replicas: each gets 32", fixed = TRUE)
  expect_error(kd_assert_correct(ex$q1), "q1: Incorrect: per_replica_batch(64, 2) returned 128", fixed = TRUE)

  per_replica_batch <- NULL
  expect_equal(kd_verdict(ex$q1)$message, "define per_replica_batch (it is still NULL), then run the check again.")
  rm(per_replica_batch)
  expect_match(kd_verdict(ex$q1)$message, "it is not defined yet", fixed = TRUE)
})

test_that("a check ends in a verdict: an answer that never ends or floods the console is bounded", {
  skip_if_no_kerasdist()
  ex <- kd_exercises("01")
  per_replica_batch <- function(global_batch, num_replicas) repeat {}
  started <- proc.time()[["elapsed"]]
  endless <- kd_verdict(ex$q1, time_limit_s = 1)
  expect_lt(proc.time()[["elapsed"]] - started, 60)
  expect_equal(endless$status, "Incorrect")
  expect_match(endless$message, "your code ran past 1 s", fixed = TRUE)
  expect_false(endless$internal)

  per_replica_batch <- function(global_batch, num_replicas) stop("broken on purpose")
  expect_match(kd_verdict(ex$q1)$message, "broken on purpose", fixed = TRUE)

  per_replica_batch <- function(global_batch, num_replicas) {
    cat(strrep("x", 5000))
    global_batch %/% num_replicas
  }
  shown <- paste(capture.output(kd_check(ex$q1)), collapse = "\n")
  expect_match(shown, "more characters your code printed]", fixed = TRUE)
  expect_match(shown, "Correct", fixed = TRUE)
  expect_lt(nchar(shown), 3000)
  expect_error(kd_verdict(ex$q1, time_limit_s = -1), "time_limit_s must be a positive number", fixed = TRUE)
})

test_that("hints come in order and the solution is R code", {
  skip_if_no_kerasdist()
  ex <- kd_exercises(1)
  expect_output(kd_hint(ex$q1), "(hint 2 of 2: kd_hint(ex$q1, 2))", fixed = TRUE)
  expect_output(kd_hint(ex$q1, 2), "%/%", fixed = TRUE)
  expect_output(kd_solution(ex$q1), "per_replica_batch <- function(global_batch, num_replicas)", fixed = TRUE)
})

test_that("bad arguments get one clear line", {
  skip_if_no_kerasdist()
  expect_error(kd_exercises("first"), "lesson must be a lesson number such as \"01\"", fixed = TRUE)
  expect_error(kd_hint(kd_exercises("01")$q1, 7), "number must be a hint from 1 to 2. Received: 7", fixed = TRUE)
  expect_error(kd_check("q1"), "exercise must be one of kd_exercises(lesson)", fixed = TRUE)
})

test_that("a lesson without exercises is one clear line", {
  skip_if_no_kerasdist()
  expect_error(kd_exercises("42"), "lesson 42 has no checked exercises", fixed = TRUE)
})

test_that("an R answer that Python's check calls gets R values: a data frame, not a pandas object", {
  skip_if_no_kerasdist()
  pandas <- reticulate::import("pandas", convert = FALSE)
  frame <- pandas$DataFrame(reticulate::dict(index = list(0L, 1L), value = list(0.5, 0.25)))
  received <- NULL
  answer <- kerasdist:::python_callable(function(comparison) {
    received <<- comparison
    max(comparison$value)
  })
  call <- reticulate::py_eval("lambda function, argument: function(argument)", convert = FALSE)
  expect_equal(reticulate::py_to_r(reticulate::py_call(call, answer, frame)), 0.5)
  expect_s3_class(received, "data.frame")
})
