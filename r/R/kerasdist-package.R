#' kerasdist: synchronous distributed training with Keras and tf.distribute from R
#'
#' An R front end to the `kerasdist` Python package: R calls the Python core
#' through reticulate and gets plain data frames back; training itself runs in
#' Python (TensorFlow and Keras 3).
#'
#' A typical session (devices first, before TensorFlow starts):
#' ```
#' library(kerasdist)
#' kd_simulate_devices(2)
#' history <- kd_train(replicas = 2, epochs = 2, data = "sample", checkpoint_dir = "ckpt")
#' ```
#' See [kd_python()] for how the Python interpreter is found.
#'
#' @keywords internal
"_PACKAGE"

# Checked by R CMD check's code analysis: ggplot2's data pronoun in aes().
utils::globalVariables(".data")

.onLoad <- function(libname, pkgname) {
  .kd$ready <- FALSE
  .kd$choice <- NULL
  if (reticulate::py_available(initialize = FALSE)) {
    # Python already runs: import on first use (kd_module()), so that library() stays fast
    # and a missing kerasdist gives kerasdist's error, not a failed library() call.
    .kd$module <- NULL
    return(invisible())
  }
  # Lazy: nothing starts until the first kd_*() call; kerasdist picks the Python just before.
  .kd$module <- reticulate::import("kerasdist", delay_load = list(
    priority = 5,
    before_load = function() kd_select_python(),
    on_error = function(error) kd_stop_python(error)
  ))
  invisible()
}
