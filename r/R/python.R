# Finding Python, importing the kerasdist module lazily, and turning Python
# errors into one clear R error.

# Package state: the (delay-loaded) module and how its Python was chosen.
.kd <- new.env(parent = emptyenv())

#' Is the kerasdist Python package usable from R?
#'
#' Finds Python (see [kd_python()] for the order), imports the Python package
#' `kerasdist` and returns `TRUE` if that worked. It never raises an error,
#' which makes it the guard to use in examples and scripts.
#'
#' @returns `TRUE` or `FALSE`.
#' @family python setup
#' @export
#' @examples
#' \donttest{
#' if (kd_available()) kd_python()$python
#' }
kd_available <- function() {
  tryCatch({
    kd_module()
    TRUE
  }, error = function(error) FALSE)
}

#' Which Python kerasdist uses, and why
#'
#' Starts Python if needed and reports the interpreter, how it was chosen,
#' and the versions of NumPy and kerasdist in it.
#'
#' Python is chosen in this order; the first that applies wins, and R keeps
#' that Python for the rest of the session:
#' 1. a Python already running in this R session (reticulate was used before);
#' 2. the Python process R is embedded in, when R runs inside Python through
#'    rpy2 (for example `%%R` cells in a Jupyter notebook);
#' 3. the `RETICULATE_PYTHON` (or `RETICULATE_PYTHON_ENV`) environment
#'    variable, or an earlier `reticulate::use_python(..., required = TRUE)`;
#' 4. the option `kerasdist.python` or the environment variable
#'    `KERASDIST_PYTHON`: a Python executable or a virtual environment folder;
#' 5. a virtual environment named `.venv` or `venv` in the working directory
#'    or one of its parents, if its Python has kerasdist installed;
#' 6. reticulate's own search (which prefers a Python that has kerasdist).
#'
#' @returns A list with `python` (path), `chosen_by` (which rule above),
#'   `python_version`, `numpy_version` and `kerasdist_version`.
#' @family python setup
#' @export
#' @examples
#' \donttest{
#' if (kd_available()) str(kd_python())
#' }
kd_python <- function() {
  module <- kd_module()
  config <- reticulate::py_config()
  list(
    python = config$python,
    chosen_by = .kd$choice$source %||% "a Python already running in this session",
    python_version = as.character(config$version),
    numpy_version = if (is.null(config$numpy)) NA_character_ else as.character(config$numpy$version),
    kerasdist_version = module$`__version__`
  )
}

# The kerasdist module, imported on first use (this starts Python and TensorFlow).
kd_module <- function() {
  if (isTRUE(.kd$ready)) {
    return(.kd$module)
  }
  module <- tryCatch({
    if (!reticulate::py_available(initialize = FALSE)) {
      kd_select_python()
    }
    kd_process_site_files()
    if (is.null(.kd$module)) {
      .kd$module <- reticulate::import("kerasdist")
    } else {
      .kd$module$`__name__` # resolves the delay-load proxy made in .onLoad
    }
    .kd$module
  }, error = function(error) {
    # The proxy's hooks run once; a later attempt imports directly (and fails just as clearly).
    .kd$module <- NULL
    kd_stop_python(error)
  })
  kd_check_numpy()
  .kd$ready <- TRUE
  module
}

# Run before Python starts: tell reticulate which Python to use, where that is ours to decide.
kd_select_python <- function() {
  if (!is.null(.kd$choice)) {
    return(invisible(.kd$choice)) # chosen already (kd_module() and the proxy's hook both ask)
  }
  choice <- kd_find_python()
  .kd$choice <- choice
  if (isTRUE(choice$use)) {
    reticulate::use_python(choice$python, required = TRUE)
  }
  invisible(choice)
}

# reticulate 1.41 starts a virtual environment's Python 3.13 with PYTHONHOME set to the environment
# and a program path that is not its bin/python, so Python's `site` never sees its pyvenv.cfg; it
# then puts the environment's site-packages on sys.path itself, and the .pth files there never run.
# An editable install is such a file (it installs the finder that locates kerasdist's sources), so
# when kerasdist is not found, process the .pth files of every site directory on sys.path.
kd_process_site_files <- function() {
  if (!reticulate::py_available(initialize = TRUE)) {
    return(invisible()) # no Python: importing kerasdist then says why
  }
  reticulate::py_run_string(local = TRUE, paste(
    "import importlib.util, os, site, sys",
    "if importlib.util.find_spec('kerasdist') is None:",
    "    for directory in [p for p in sys.path if os.path.basename(p) in ('site-packages', 'dist-packages')]:",
    "        site.addsitedir(directory)",
    sep = "\n"))
  invisible()
}

# Decide which Python to use (see kd_python() for the order). Returns a list:
# python (path or NULL), source (words), use (TRUE when kerasdist must call use_python()).
kd_find_python <- function(start = getwd(),
                           initialized = reticulate::py_available(initialize = FALSE),
                           host = kd_host_python(),
                           required = reticulate_internal(".globals")$required_python_version,
                           has_kerasdist = python_has_kerasdist) {
  choice <- function(python, source, use = FALSE) list(python = python, source = source, use = use)
  if (initialized) {
    return(choice(NULL, "a Python already running in this R session"))
  }
  if (!is.null(host)) {
    return(choice(host, "the Python process R is embedded in (rpy2)"))
  }
  for (variable in c("RETICULATE_PYTHON", "RETICULATE_PYTHON_ENV")) {
    value <- Sys.getenv(variable, "")
    if (nzchar(value)) {
      return(choice(value, variable))
    }
  }
  if (!is.null(required)) {
    return(choice(required, "reticulate::use_python()"))
  }
  option <- getOption("kerasdist.python")
  explicit <- if (is.null(option)) Sys.getenv("KERASDIST_PYTHON", "") else option
  source <- if (is.null(option)) "the KERASDIST_PYTHON environment variable" else "option kerasdist.python"
  if (!is.character(explicit) || length(explicit) != 1L || is.na(explicit)) {
    kd_abort(sprintf("%s must be one path. Received: %s", source, deparse_short(explicit)),
             class = "kerasdist_python_error")
  }
  if (nzchar(explicit)) {
    python <- python_in(explicit)
    if (is.null(python)) {
      kd_abort(sprintf(paste("%s is %s, which is neither a Python executable nor a virtual",
                             "environment folder with bin/python; point it at one."), source, explicit),
               class = "kerasdist_python_error")
    }
    return(choice(python, source, use = TRUE))
  }
  venv <- find_project_venv(start, has_kerasdist)
  if (!is.null(venv)) {
    return(choice(venv, "the project virtual environment", use = TRUE))
  }
  choice(NULL, "reticulate's own search")
}

# The host interpreter when R is embedded in a Python process, else NULL.
kd_host_python <- function(session = Sys.getenv("PYTHON_SESSION_INITIALIZED", ""),
                           probe = reticulate_internal("main_process_python_info")) {
  # The protocol rpy2 and reticulate share: "current_pid=PID:sys.executable=PATH".
  if (nzchar(session)) {
    fields <- strsplit(strsplit(session, ":", fixed = TRUE)[[1]], "=", fixed = TRUE)
    values <- vapply(fields, function(f) paste(f[-1], collapse = "="), "")
    names(values) <- vapply(fields, `[`, "", 1L)
    if (identical(unname(values["current_pid"]), as.character(Sys.getpid())) &&
        !is.na(values["sys.executable"]) && nzchar(values["sys.executable"])) {
      return(unname(values["sys.executable"]))
    }
  }
  # rpy2 does not always export that variable; reticulate also looks for Python in the process.
  if (is.function(probe)) {
    info <- tryCatch(probe(), error = function(error) NULL)
    if (!is.null(info)) {
      return(info$python %||% "the host process")
    }
  }
  NULL
}

# A reticulate internal, or NULL where this reticulate version lacks it.
reticulate_internal <- function(name) {
  tryCatch(utils::getFromNamespace(name, "reticulate"), error = function(error) NULL)
}

# The Python executable of a path that is one, or of a virtual environment folder; NULL if neither.
python_in <- function(path) {
  path <- path.expand(path)
  candidates <- if (dir.exists(path)) {
    file.path(path, c("bin/python", "bin/python3", "Scripts/python.exe", "python.exe"))
  } else {
    path
  }
  found <- candidates[file.exists(candidates) & !dir.exists(candidates)]
  if (length(found) == 0L) {
    return(NULL)
  }
  # Keep the file name as is: a virtual environment's python is a symlink that must not be resolved.
  file.path(normalizePath(dirname(found[[1]]), winslash = "/"), basename(found[[1]]))
}

# The first .venv/venv Python with kerasdist, from `start` up to the file system root.
find_project_venv <- function(start, has_kerasdist = python_has_kerasdist) {
  directory <- normalizePath(start, winslash = "/", mustWork = FALSE)
  repeat {
    for (name in c(".venv", "venv")) {
      python <- python_in(file.path(directory, name))
      if (!is.null(python) && isTRUE(has_kerasdist(python))) {
        return(python)
      }
    }
    parent <- dirname(directory)
    if (identical(parent, directory)) {
      return(NULL)
    }
    directory <- parent
  }
}

# Whether `python` can import kerasdist (asks importlib; does not start TensorFlow), within `timeout_s`.
python_has_kerasdist <- function(python, timeout_s = 60) {
  code <- "import importlib.util, sys; sys.exit(importlib.util.find_spec('kerasdist') is None)"
  result <- tryCatch(
    processx::run(python, c("-c", code), error_on_status = FALSE, timeout = timeout_s),
    error = function(error) list(status = 1L, timeout = FALSE)
  )
  identical(as.integer(result$status), 0L) && !isTRUE(result$timeout)
}

# Stop with one error that says which Python was tried and how to fix it.
kd_stop_python <- function(error) {
  if (inherits(error, "kerasdist_error")) {
    stop(error)
  }
  python <- tryCatch(
    if (reticulate::py_available(initialize = FALSE)) reticulate::py_config()$python else NULL,
    error = function(e) NULL
  )
  python <- python %||% .kd$choice$python
  running <- reticulate::py_available(initialize = FALSE)
  kd_abort(kd_python_error_message(python, .kd$choice$source, conditionMessage(error), running),
           class = "kerasdist_python_error")
}

# The text of that error (separate so that tests can read it without breaking Python).
kd_python_error_message <- function(python, source, problem, running = FALSE) {
  problem <- trimws(strsplit(problem, "\n", fixed = TRUE)[[1]])
  problem <- problem[nzchar(problem)][1] %|NA|% "unknown error"
  where <- if (is.null(python)) "no Python was found" else sprintf("Python %s", python)
  chosen <- if (is.null(source)) "" else sprintf(" (chosen by %s)", source)
  install <- sprintf("%s -m pip install -e \".[cpu]\"", if (is.null(python)) "python" else python)
  paste0(
    "kerasdist cannot use its Python package: ", where, chosen, ": ", problem, "\n",
    "To fix this, either\n",
    "  * point R at a Python that has kerasdist, before the first kerasdist call, e.g.\n",
    "    Sys.setenv(RETICULATE_PYTHON = \"/path/to/kerasdist/.venv/bin/python\")\n",
    "    (or set KERASDIST_PYTHON, or options(kerasdist.python = ...)); or\n",
    "  * install kerasdist into that Python, from the root of the kerasdist project:\n",
    "    ", install, "   (scripts/setup.sh makes such a .venv)",
    if (running) "\nR keeps one Python per session: restart R after changing it." else ""
  )
}

# reticulate older than 1.38 cannot convert arrays with NumPy 2: say so before anything crashes.
kd_check_numpy <- function(numpy = kd_numpy_version(),
                           reticulate_version = utils::packageVersion("reticulate"),
                           python = reticulate::py_config()$python) {
  if (is.null(numpy)) {
    return(invisible())
  }
  if (numeric_version(as.character(numpy)) >= "2" && numeric_version(reticulate_version) < "1.38") {
    kd_abort(sprintf(paste(
      "reticulate %s cannot convert arrays with NumPy %s (it needs NumPy < 2).",
      "Fix: %s -m pip install \"numpy<2\" and restart R, or update reticulate to 1.38 or later."),
      reticulate_version, numpy, python), class = "kerasdist_python_error")
  }
  invisible()
}

kd_numpy_version <- function() {
  tryCatch(reticulate::py_config()$numpy$version, error = function(error) NULL)
}

# Evaluate a call into Python; a KerasdistError becomes an R error with the Python message.
kd_call <- function(expr) {
  call <- sys.call(-1L)
  tryCatch(expr, error = function(error) {
    message <- conditionMessage(error)
    is_user_error <- inherits(error, "kerasdist.errors.KerasdistError") ||
      grepl("(KerasdistError|TrainingDivergedError): ", message)
    if (!is_user_error || inherits(error, "kerasdist_error")) {
      stop(error)
    }
    # Training that went NaN/inf: class kerasdist_diverged, so scripts can retry with a smaller rate.
    diverged <- grepl("TrainingDivergedError: ", message, fixed = TRUE)
    kd_abort(python_error_text(message), call = call, class = if (diverged) "kerasdist_diverged")
  })
}

# "kerasdist.errors.KerasdistError: text\nRun `reticulate::py_last_error()` ..." -> "text"
# (likewise for its subclass TrainingDivergedError).
python_error_text <- function(message) {
  message <- sub("^.*?(KerasdistError|TrainingDivergedError): ", "", message, perl = TRUE)
  message <- sub("\\n+Run `reticulate::py_last_error\\(\\)`.*$", "", message)
  trimws(message)
}

# reticulate < 1.38 inside rpy2 finalizes Python objects without Python's GIL when R's garbage
# collector runs in plain R code, which aborts the whole Python process. So every function that
# calls Python collects first (what earlier R code dropped) and the ones that hold many Python
# objects collect again after dropping them, before R code that allocates a lot (plots): from
# inside a Python call, where Python holds the GIL while it calls back into R. The callback is
# kept in package state, so it is never garbage itself.
collect_python_garbage <- function() {
  if (utils::packageVersion("reticulate") >= "1.38" || !reticulate::py_available()) {
    return(invisible())
  }
  if (is.null(.kd$collect)) {
    .kd$collect <- reticulate::r_to_py(function() invisible(gc()))
  }
  reticulate::py_call(.kd$collect)
  invisible()
}
