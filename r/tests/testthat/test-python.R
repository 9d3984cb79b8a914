# Finding Python, and the one clear error when kerasdist cannot be used.

local_clean_python_settings <- function(env = parent.frame()) {
  withr::local_envvar(RETICULATE_PYTHON = NA, RETICULATE_PYTHON_ENV = NA, KERASDIST_PYTHON = NA,
                      .local_envir = env)
  withr::local_options(kerasdist.python = NULL, .local_envir = env)
}

# A fake project: root/.venv/bin/python (an empty file) and root/sub/dir to start from.
local_fake_project <- function(env = parent.frame()) {
  root <- withr::local_tempdir(.local_envir = env)
  dir.create(file.path(root, ".venv", "bin"), recursive = TRUE)
  file.create(file.path(root, ".venv", "bin", "python"))
  dir.create(file.path(root, "sub", "dir"), recursive = TRUE)
  normalizePath(root, winslash = "/")
}

find <- function(...) {
  kd_find_python(initialized = FALSE, host = NULL, required = NULL, ...)
}

test_that("a Python already running, or the rpy2 host process, wins", {
  expect_match(kd_find_python(initialized = TRUE)$source, "already running")
  host <- kd_find_python(initialized = FALSE, host = "/host/bin/python")
  expect_identical(host$python, "/host/bin/python")
  expect_false(host$use) # reticulate attaches to the host itself; kerasdist must not fight it
})

test_that("the rpy2 host process is read from PYTHON_SESSION_INITIALIZED", {
  session <- sprintf("current_pid=%d:sys.executable=/opt/env/bin/python", Sys.getpid())
  expect_identical(kd_host_python(session = session, probe = NULL), "/opt/env/bin/python")
  other <- sprintf("current_pid=%d:sys.executable=/opt/env/bin/python", Sys.getpid() + 1L)
  expect_null(kd_host_python(session = other, probe = NULL))
  expect_identical(kd_host_python(session = "", probe = function() list(python = "/p")), "/p")
})

test_that("RETICULATE_PYTHON is left to reticulate, then KERASDIST_PYTHON, then the project .venv", {
  local_clean_python_settings()
  root <- local_fake_project()
  start <- file.path(root, "sub", "dir")
  yes <- function(python) TRUE

  found <- find(start = start, has_kerasdist = yes)
  expect_identical(found$python, file.path(root, ".venv", "bin", "python"))
  expect_true(found$use)
  expect_identical(found$source, "the project virtual environment")
  expect_null(find(start = start, has_kerasdist = function(python) FALSE)$python)

  withr::local_envvar(KERASDIST_PYTHON = file.path(root, ".venv"))
  explicit <- find(start = tempdir(), has_kerasdist = yes)
  expect_identical(explicit$python, file.path(root, ".venv", "bin", "python"))
  expect_match(explicit$source, "KERASDIST_PYTHON")

  withr::local_options(kerasdist.python = file.path(root, ".venv", "bin", "python"))
  expect_identical(find(start = tempdir())$source, "option kerasdist.python")

  withr::local_envvar(RETICULATE_PYTHON = "/somewhere/python")
  forced <- find(start = start, has_kerasdist = yes)
  expect_identical(forced$source, "RETICULATE_PYTHON")
  expect_false(forced$use)
})

test_that("a KERASDIST_PYTHON that is not a Python is an error saying so", {
  local_clean_python_settings()
  withr::local_envvar(KERASDIST_PYTHON = file.path(tempdir(), "no-such-env"))
  expect_error(find(), "neither a Python executable nor a virtual environment", class = "kerasdist_python_error")
})

test_that("the error when kerasdist cannot be imported says how to fix it", {
  message <- kd_python_error_message("/usr/bin/python3", "reticulate's own search",
                                     "ModuleNotFoundError: No module named 'kerasdist'\nTraceback ...")
  expect_match(message, "Python /usr/bin/python3 (chosen by reticulate's own search)", fixed = TRUE)
  expect_match(message, "No module named 'kerasdist'", fixed = TRUE)
  expect_no_match(message, "Traceback", fixed = TRUE)
  expect_match(message, "RETICULATE_PYTHON", fixed = TRUE)
  expect_match(message, "KERASDIST_PYTHON", fixed = TRUE)
  expect_match(message, "/usr/bin/python3 -m pip install", fixed = TRUE)
  expect_match(kd_python_error_message(NULL, NULL, "Python not found"), "no Python was found", fixed = TRUE)
})

test_that("a Python without kerasdist gives that one clear R error (fresh R process)", {
  python <- python_without_kerasdist()
  skip_if(is.null(python), "no Python without kerasdist on this machine")
  script <- withr::local_tempfile(fileext = ".R")
  writeLines("library(kerasdist); kd_devices()", script)
  libraries <- paste(.libPaths(), collapse = .Platform$path.sep)
  output <- suppressWarnings(system2(
    file.path(R.home("bin"), "Rscript"), shQuote(script), stdout = TRUE, stderr = TRUE,
    env = c(paste0("RETICULATE_PYTHON=", shQuote(python)), paste0("R_LIBS=", shQuote(libraries)))
  ))
  text <- paste(output, collapse = "\n")
  expect_false(is.null(attr(output, "status")), info = text) # the script failed
  expect_match(text, "kerasdist cannot use its Python package", fixed = TRUE)
  expect_match(text, "(chosen by RETICULATE_PYTHON)", fixed = TRUE)
  expect_match(text, "pip install", fixed = TRUE)
  expect_identical(sum(grepl("^Error", output)), 1L, info = text) # one error, not a cascade
})

test_that("kd_python reports the Python in use", {
  skip_if_no_kerasdist()
  info <- kd_python()
  expect_true(file.exists(info$python))
  expect_type(info$chosen_by, "character")
  expect_match(info$kerasdist_version, "^[0-9]+[.][0-9]+")
  expect_true(numeric_version(info$numpy_version) < "2" || utils::packageVersion("reticulate") >= "1.38")
  expect_true(kd_available())
})

test_that("NumPy 2 with a reticulate older than 1.38 is stopped with the fix", {
  expect_error(kd_check_numpy("2.1.0", "1.28", "/env/bin/python"),
               "/env/bin/python -m pip install \"numpy<2\"", fixed = TRUE)
  expect_silent(kd_check_numpy("1.26.4", "1.28", "/env/bin/python"))
  expect_silent(kd_check_numpy("2.1.0", "1.38", "/env/bin/python"))
  expect_silent(kd_check_numpy(NULL, "1.28", "/env/bin/python"))
})

test_that("a Python that hangs counts as one without kerasdist once its time is up", {
  hang <- withr::local_tempfile()
  writeLines(c("#!/bin/sh", "sleep 30"), hang)
  Sys.chmod(hang, "755")
  started <- Sys.time()
  expect_false(python_has_kerasdist(hang, timeout_s = 1))
  expect_lt(as.numeric(difftime(Sys.time(), started, units = "secs")), 10)
})

test_that("errors are rlang conditions of class kerasdist_error, message kept on one line", {
  error <- tryCatch(kd_train(replicas = "2"), error = identity)
  expect_s3_class(error, c("kerasdist_error", "rlang_error"))
  expect_false(grepl("\n", conditionMessage(error), fixed = TRUE))
})
