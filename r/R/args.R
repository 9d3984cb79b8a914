# Typed coercion of R arguments into the values the Python core expects, and
# the package's error condition.

`%||%` <- function(x, y) if (is.null(x)) y else x

`%|NA|%` <- function(x, y) if (length(x) == 0L || is.na(x)) y else x

# Stop with an rlang error of class "kerasdist_error" (plus `class`, e.g. "kerasdist_diverged"), which
# tests and scripts match with expect_error(class = ) or tryCatch(). rlang::abort() keeps the message as
# it is: one line, like the command line's (cli::cli_abort() would rewrap it to the console's width).
kd_abort <- function(message, call = NULL, class = NULL) {
  rlang::abort(message, class = c(class, "kerasdist_error"), call = call)
}

deparse_short <- function(x) {
  text <- paste(deparse(x, width.cutoff = 60L, nlines = 2L), collapse = " ")
  if (nchar(text) > 60L) paste0(substr(text, 1L, 57L), "...") else text
}

# A single number for Python. A whole number in R's integer range becomes an R integer (Python gets
# an int, not a float); any other number (fractional, negative, NaN, Inf, huge) goes to Python as it
# is, whose range check then gives the same one-line message as the command line.
as_count <- function(x, name, null_ok = FALSE) {
  if (is.null(x) && null_ok) {
    return(NULL)
  }
  if (!is.numeric(x) || length(x) != 1L) {
    kd_abort(sprintf("`%s` must be a single whole number%s. Received: %s", name,
                     if (null_ok) " or NULL" else "", deparse_short(x)), call = sys.call(-1L))
  }
  whole <- !is.na(x) && is.finite(x) && x == round(x) && abs(x) <= .Machine$integer.max
  if (whole) as.integer(x) else as.numeric(x)
}

# A size for R itself (pixels, resolution): a whole number >= 1, checked here (Python never sees it).
as_size <- function(x, name) {
  if (!is.numeric(x) || length(x) != 1L || is.na(x) || !is.finite(x) || x != round(x) || x < 1 ||
      x > .Machine$integer.max) {
    kd_abort(sprintf("`%s` must be a single whole number >= 1. Received: %s", name, deparse_short(x)),
             call = sys.call(-1L))
  }
  as.integer(x)
}

# Whole numbers as a Python list of ints (a length-one R vector would become a scalar).
as_counts <- function(x, name) {
  if (!is.numeric(x) || length(x) == 0L) {
    kd_abort(sprintf("`%s` must be a vector of whole numbers. Received: %s", name, deparse_short(x)),
             call = sys.call(-1L))
  }
  lapply(x, as_count, name = name)
}

# A single number for Python; its range (finite, positive, ...) is Python's to check.
as_number <- function(x, name) {
  if (!is.numeric(x) || length(x) != 1L) {
    kd_abort(sprintf("`%s` must be a single number. Received: %s", name, deparse_short(x)),
             call = sys.call(-1L))
  }
  as.numeric(x)
}

as_flag <- function(x, name) {
  if (!is.logical(x) || length(x) != 1L || is.na(x)) {
    kd_abort(sprintf("`%s` must be TRUE or FALSE. Received: %s", name, deparse_short(x)),
             call = sys.call(-1L))
  }
  x
}

as_string <- function(x, name, null_ok = FALSE) {
  if (is.null(x) && null_ok) {
    return(NULL)
  }
  if (!is.character(x) || length(x) != 1L || is.na(x)) {
    kd_abort(sprintf("`%s` must be a single string%s. Received: %s", name,
                     if (null_ok) " or NULL" else "", deparse_short(x)), call = sys.call(-1L))
  }
  x
}

as_strings <- function(x, name) {
  if (!is.character(x) || length(x) == 0L || anyNA(x)) {
    kd_abort(sprintf("`%s` must be a character vector. Received: %s", name, deparse_short(x)),
             call = sys.call(-1L))
  }
  as.list(x)
}

# A path as an absolute path (Python's working directory can differ from R's).
as_path <- function(x, name, null_ok = FALSE) {
  if (is.null(x) && null_ok) {
    return(NULL)
  }
  if (!is.character(x) || length(x) != 1L || is.na(x) || !nzchar(x)) {
    kd_abort(sprintf("`%s` must be a path (one string)%s. Received: %s", name,
                     if (null_ok) " or NULL" else "", deparse_short(x)), call = sys.call(-1L))
  }
  absolute_path(x)
}

# normalizePath() leaves a relative path that does not exist yet as it is: anchor it first.
absolute_path <- function(x) {
  x <- path.expand(x)
  if (!grepl("^([/\\\\]|[A-Za-z]:)", x)) {
    x <- file.path(getwd(), x)
  }
  normalizePath(x, winslash = "/", mustWork = FALSE)
}

# 0, 1, 2 or TRUE/FALSE as Python's verbosity level.
as_verbose <- function(x) {
  if (is.logical(x) && length(x) == 1L && !is.na(x)) {
    return(as.integer(x))
  }
  if (!is.numeric(x) || length(x) != 1L || is.na(x) || !(x %in% 0:2)) {
    kd_abort(sprintf("`verbose` must be 0, 1, 2, TRUE or FALSE. Received: %s", deparse_short(x)),
             call = sys.call(-1L))
  }
  as.integer(x)
}

# A data source for the Python core: a name or path, a kd_mnist() result, or a Python MnistData.
as_data <- function(x) {
  if (inherits(x, "kd_mnist")) {
    return(attr(x, "python"))
  }
  if (inherits(x, "python.builtin.object")) {
    return(x)
  }
  if (!is.character(x) || length(x) != 1L || is.na(x)) {
    kd_abort(sprintf(paste("`data` must be \"auto\", \"keras\", \"sample\", \"fashion\", the path of an .npz file",
                           "or a kd_mnist() result. Received: %s"), deparse_short(x)),
             call = sys.call(-1L))
  }
  as_source(x)
}

# A data source name as is; a path made absolute (Python's working directory can differ from R's).
as_source <- function(x) {
  if (x %in% c("auto", "keras", "sample", "fashion")) {  # kerasdist's data.SOURCES
    return(x)
  }
  looks_like_path <- grepl("[/\\\\]|[.]npz$|^~", x) || file.exists(x)
  if (looks_like_path) absolute_path(x) else x
}

# A Python list (as R converts it) as an atomic vector, None becoming NA.
as_column <- function(x) {
  if (!is.list(x)) {
    return(x)
  }
  missing <- vapply(x, is.null, logical(1))
  if (all(missing)) {
    return(rep(NA, length(x)))
  }
  x[missing] <- NA
  unlist(x, use.names = FALSE)
}

# A dict of equal-length lists ({name: [values]}) as a data.frame.
columns_frame <- function(columns) {
  if (length(columns) == 0L) {
    return(data.frame())
  }
  data.frame(lapply(columns, as_column), check.names = FALSE, stringsAsFactors = FALSE)
}
