# Checked exercises from R: the Python package's checks, given the R student's own objects.

#' A lesson's checked exercises
#'
#' Each lesson's exercises (`q1`, `q2`, ...) are checked by the Python package
#' `kerasdist.course.exercises`; from R, [kd_check()] hands it the objects your
#' answer defined (reticulate converts them: numbers, vectors, lists, R
#' functions, keras3 models) and prints the verdict in R's terms.
#'
#' @param lesson The lesson, as two digits (`"01"`) or a number (`1`).
#' @returns A named list of exercises (class `kd_exercise`), `q1`, `q2`, ...
#' @family exercises
#' @export
#' @examples
#' \donttest{
#' if (kd_available()) {
#'   ex <- kd_exercises("01")
#'   per_replica_batch <- function(global_batch, num_replicas) global_batch %/% num_replicas
#'   kd_check(ex$q1)
#' }
#' }
kd_exercises <- function(lesson) {
  if (is.numeric(lesson) && length(lesson) == 1L && !is.na(lesson)) {
    lesson <- sprintf("%02d", as.integer(lesson))
  }
  if (!is.character(lesson) || length(lesson) != 1L || !grepl("^[0-9]{2}$", lesson)) {
    kd_abort(sprintf("lesson must be a lesson number such as \"01\". Received: %s", deparse_short(lesson)))
  }
  kd_module()
  exercises <- kd_call(reticulate::import("kerasdist.course.exercises")$exercises_of(lesson))
  structure(
    lapply(exercises, function(exercise) structure(list(python = exercise), class = "kd_exercise")),
    names = vapply(exercises, function(exercise) r_value(exercise$name), "")
  )
}

#' Check, hint and solution of an exercise
#'
#' `kd_check()` checks the answer your code defined in `envir` (by default
#' where you call it) and prints `Correct`, `Incorrect` with what is wrong, or
#' `Not attempted`. `kd_hint()` prints hint `number` (the last one nearly gives
#' the answer), `kd_solution()` the worked solution in R. What your code
#' prints while it is checked is shown first, cut to its first 2000
#' characters. `kd_verdict()` returns the verdict without printing; `kd_assert_correct()` raises an
#' error unless it is `Correct` (the autograder's test).
#'
#' @param exercise One element of [kd_exercises()].
#' @param envir Where the answer's objects are.
#' @param number Which hint, from 1.
#' @param time_limit_s How long the check may run, your code included (by
#'   default the exercise's limit); an answer that runs past it is `Incorrect`.
#' @returns `kd_check()` and `kd_verdict()`: a list with `status` and
#'   `message` (invisibly for `kd_check()`; `kd_verdict()` adds `coloured`,
#'   `printed` and `internal`, which marks an error of the check itself);
#'   the others `NULL`, invisibly.
#' @family exercises
#' @export
#' @examples
#' \donttest{
#' if (kd_available()) {
#'   ex <- kd_exercises("01")
#'   kd_hint(ex$q1)
#'   per_replica_batch <- NULL
#'   kd_check(ex$q1)
#' }
#' }
kd_check <- function(exercise, envir = parent.frame()) {
  verdict <- kd_verdict(exercise, envir)
  cat(shown_output(verdict$printed), verdict$coloured, "\n", sep = "")
  invisible(verdict[c("status", "message")])
}

#' @rdname kd_check
#' @export
kd_verdict <- function(exercise, envir = parent.frame(), time_limit_s = NULL) {
  exercise <- as_exercise(exercise)
  limit <- if (is.null(time_limit_s)) r_value(exercise$time_limit_s) else time_limit_s
  if (!is.numeric(limit) || length(limit) != 1L || is.na(limit) || limit <= 0) {
    kd_abort(sprintf("time_limit_s must be a positive number of seconds. Received: %s", deparse_short(limit)))
  }
  # Python bounds the check and the answer's Python side; R bounds the answer's R code (each call of
  # an answer's function, see python_callable) and, a little after Python would, the whole check.
  check_limit <- r_value(reticulate::import("kerasdist.course.exercises.core")$CHECK_TIME_LIMIT_S)
  deadline <- proc.time()[["elapsed"]] + check_limit + 2
  names <- unlist(r_value(exercise$answers))
  present <- names[vapply(names, exists, logical(1), envir = envir)]
  answers <- lapply(stats::setNames(present, present), function(name) {
    value <- get(name, envir = envir)
    if (is.null(value)) reticulate::py_none() else if (is.function(value)) python_callable(value, limit, deadline) else value
  })
  setTimeLimit(elapsed = check_limit + 2, transient = TRUE)
  on.exit(setTimeLimit(elapsed = Inf), add = TRUE)
  verdict <- NULL
  printed <- utils::capture.output(
    verdict <- kd_call(exercise$verdict(reticulate::dict(answers), language = "r", time_limit_s = limit)))
  setTimeLimit(elapsed = Inf)
  printed <- paste(c(printed, r_value(verdict$printed)), collapse = "\n")
  list(status = r_value(verdict$status), message = r_value(verdict$message), coloured = r_value(verdict$coloured()),
       printed = printed, internal = isTRUE(r_value(verdict$internal)))
}

# What the answer printed while it was checked, cut as the Python side cuts it.
shown_output <- function(printed) {
  if (!nzchar(printed)) return("")
  limit <- 2000L
  if (nchar(printed) <= limit) return(paste0(printed, "\n"))
  sprintf("%s\n[... %d more characters your code printed]\n", substr(printed, 1L, limit), nchar(printed) - limit)
}

#' @rdname kd_check
#' @export
kd_assert_correct <- function(exercise, envir = parent.frame()) {
  verdict <- kd_verdict(exercise, envir)
  if (!identical(verdict$status, "Correct")) {
    stop(sprintf("%s: %s: %s", r_value(as_exercise(exercise)$name), verdict$status, verdict$message), call. = FALSE)
  }
  invisible(NULL)
}

#' @rdname kd_check
#' @export
kd_hint <- function(exercise, number = 1L) {
  called <- paste(deparse(substitute(exercise)), collapse = "")
  exercise <- as_exercise(exercise)
  hints <- length(r_value(exercise$hints))
  if (!is.numeric(number) || length(number) != 1L || is.na(number) || number < 1 || number > hints) {
    kd_abort(sprintf("number must be a hint from 1 to %d. Received: %s", hints, deparse_short(number)))
  }
  more <- if (number < hints) sprintf(" (hint %d of %d: kd_hint(%s, %d))", number + 1L, hints, called, number + 1L) else ""
  cat(sprintf("Hint %d: %s%s\n", as.integer(number), r_value(exercise$hint_text(as.integer(number), language = "r")),
              more))
  invisible(NULL)
}

#' @rdname kd_check
#' @export
kd_solution <- function(exercise) {
  exercise <- as_exercise(exercise)
  cat(sprintf("Solution to %s, %s:\n\n%s\n", r_value(exercise$name), r_value(exercise$title),
              r_value(exercise$solution_text("r"))))
  invisible(NULL)
}

#' @export
print.kd_exercise <- function(x, ...) {
  cat(sprintf("Exercise %s of lesson %s: %s\n", r_value(x$python$name), r_value(x$python$lesson),
              r_value(x$python$title)))
  cat("kd_check(), kd_hint() and kd_solution() take it.\n")
  invisible(x)
}

as_exercise <- function(exercise) {
  if (!inherits(exercise, "kd_exercise")) {
    kd_abort(sprintf("exercise must be one of kd_exercises(lesson), e.g. kd_exercises(\"01\")$q1. Received: %s",
                     deparse_short(exercise)))
  }
  exercise$python
}

# The student's R function as a Python callable: its arguments reach it as R values (numbers, arrays,
# data frames; a Keras model stays itself), its result goes back to Python. The arguments are converted
# here because older reticulate (1.28, Debian 12's) hands an R function the Python objects themselves.
# Each call may run `limit` seconds; then the check's own bound (ending at `deadline`, in proc.time()'s
# elapsed seconds) holds again.
python_callable <- function(f, limit = Inf, deadline = Inf) {
  reticulate::r_to_py(function(...) {
    arguments <- lapply(list(...), function(x) if (inherits(x, "python.builtin.object")) reticulate::py_to_r(x) else x)
    setTimeLimit(elapsed = limit + 1, transient = TRUE)
    on.exit(setTimeLimit(elapsed = max(deadline - proc.time()[["elapsed"]], 1)), add = TRUE)
    do.call(f, arguments)
  }, convert = TRUE)
}

# An attribute of a Python object as an R value: reticulate converts it already, or (objects made
# without conversion, as some reticulate versions make list elements) here.
r_value <- function(x) {
  if (inherits(x, "python.builtin.object")) reticulate::py_to_r(x) else x
}
