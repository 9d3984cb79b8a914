# kd_doctor(): what this machine has and what each lesson needs, from R.

#' Check this machine for everything the lessons need
#'
#' The R side of `kerasdist doctor`: one row per check (Python, TensorFlow,
#' Keras, GPUs, CUDA/cuDNN, NCCL, replicas, R, reticulate, keras3, tfdatasets,
#' tensorflow, rpy2, NumPy vs reticulate and, with `probes = TRUE`, the
#' upstream Keras bugs kerasdist works around), each `"OK"`, `"missing"` or
#' `"broken"`, with the one command that fixes a problem. The checks run in
#' Python (the probes in subprocesses with a timeout); when Python or
#' kerasdist cannot be used, the R checks still run, and a row says how to
#' set up Python.
#'
#' @param probes Run the probes of upstream bugs (a few seconds each, in
#'   parallel); `FALSE` reuses the answers cached by an earlier run.
#' @returns A data.frame of class `kd_doctor` with columns `status`, `check`,
#'   `found`, `needed_by` and `fix`; attribute `engines` is a data.frame
#'   (`strategy`, `engine`, `reason`) saying which engine `engine = "auto"`
#'   picks for each strategy (`NULL` without Python).
#' @seealso [kd_python()] for which Python R uses.
#' @export
#' @examples
#' \donttest{
#' report <- kd_doctor(probes = FALSE)
#' report[report$status != "OK", c("check", "fix")]
#' }
kd_doctor <- function(probes = TRUE) {
  probes <- as_flag(probes, "probes")
  problem <- tryCatch({
    kd_module()
    NULL
  }, error = function(error) strsplit(conditionMessage(error), "\n")[[1]][1])
  if (!is.null(problem)) {
    python <- data.frame(status = "missing", check = "kerasdist (Python)", found = problem,
                         needed_by = "every lesson, every kd_ function", fix = "make setup",
                         stringsAsFactors = FALSE)
    return(structure(rbind(python, doctor_r_rows()), engines = NULL, class = c("kd_doctor", "data.frame")))
  }
  collect_python_garbage()
  doctor <- reticulate::import("kerasdist.doctor")
  report <- kd_call(doctor$diagnose(run_probes = probes))
  column <- function(name) vapply(report$checks, function(check) as.character(check[[name]]), "")
  frame <- data.frame(status = column("status"), check = column("name"), found = column("found"),
                      needed_by = column("needed_by"), fix = column("fix"), stringsAsFactors = FALSE)
  engines <- data.frame(strategy = names(report$engines),
                        engine = vapply(report$engines, function(e) e$engine, ""),
                        reason = vapply(report$engines, function(e) e$reason, ""),
                        stringsAsFactors = FALSE, row.names = NULL)
  structure(frame, engines = engines, class = c("kd_doctor", "data.frame"))
}

#' @export
print.kd_doctor <- function(x, ...) {
  rows <- as.data.frame(unclass(x)[c("status", "check", "found")], stringsAsFactors = FALSE)
  print(rows, right = FALSE, row.names = FALSE)
  fixes <- x$status != "OK" & nzchar(x$fix)
  if (any(fixes)) {
    cat("\nFixes:\n", paste0("  ", x$check[fixes], ": ", x$fix[fixes], "\n"), sep = "")
  }
  engines <- attr(x, "engines")
  if (!is.null(engines)) {
    cat("\nengine = \"auto\" picks:\n", paste0("  ", engines$strategy, ": ", engines$engine, "\n"), sep = "")
  }
  invisible(x)
}

# The R-side rows, checked by R itself (used when Python cannot be reached).
doctor_r_rows <- function() {
  version <- function(package) {
    tryCatch(as.character(utils::packageVersion(package)), error = function(error) "")
  }
  install_twins <- "Rscript -e 'install.packages(c(\"keras3\", \"tfdatasets\", \"tensorflow\"))'"
  packages <- c(reticulate = "R package, _R notebooks (>= 1.28)", keras3 = "01-06 keras3 R twins",
                tfdatasets = "01-06 keras3 R twins", tensorflow = "01-06 keras3 R twins")
  found <- vapply(names(packages), version, "")
  rows <- data.frame(
    status = ifelse(nzchar(found), "OK", "missing"),
    check = paste(names(packages), "(R)"),
    found = ifelse(nzchar(found), found, "not installed"),
    needed_by = unname(packages),
    fix = ifelse(nzchar(found), "", ifelse(names(packages) == "reticulate", "install.packages(\"reticulate\")",
                                           install_twins)),
    stringsAsFactors = FALSE, row.names = NULL
  )
  r <- data.frame(status = "OK", check = "R", found = paste(R.version$major, R.version$minor, sep = "."),
                  needed_by = "all _R notebooks", fix = "", stringsAsFactors = FALSE)
  rbind(r, rows)
}
