# Devices and strategies: how many replicas this machine can run, and the tf.distribute object.

#' Make N replicas out of the devices this machine has
#'
#' With N or more GPUs nothing changes; one GPU is split into N logical GPUs;
#' without a GPU the CPU is split into N virtual CPU devices, so that
#' `MirroredStrategy` runs N real replicas (sharing the CPU cores: this
#' teaches, it does not speed up).
#'
#' Call it first, before anything starts TensorFlow's devices (including
#' [kd_devices()]). Called again later it succeeds only if enough devices
#' exist already.
#'
#' @param n Number of replicas, a whole number >= 1.
#' @param device_type `"auto"` (GPU if present, else CPU), `"GPU"` or `"CPU"`.
#' @param gpu_memory_mb Memory of each logical GPU when one GPU is split.
#' @returns The names of the `n` devices to use (a character vector), invisibly.
#' @family devices and strategies
#' @export
#' @examples
#' \donttest{
#' if (kd_available()) kd_simulate_devices(2)
#' }
kd_simulate_devices <- function(n, device_type = "auto", gpu_memory_mb = 2048) {
  n <- as_count(n, "n")
  device_type <- as_string(device_type, "device_type")
  gpu_memory_mb <- as_count(gpu_memory_mb, "gpu_memory_mb")
  collect_python_garbage()
  kd <- kd_module()
  devices <- kd_call(kd$configure_replicas(n, device_type = device_type, gpu_memory_mb = gpu_memory_mb))
  invisible(as.character(unlist(devices)))
}

#' List the devices TensorFlow sees
#'
#' Physical devices, the logical devices made from them (see
#' [kd_simulate_devices()]) and which of them `MirroredStrategy()` would use
#' when given no device list. This starts TensorFlow's devices: call
#' [kd_simulate_devices()] before it.
#'
#' @returns A data.frame with one row per device and columns `name`, `type`
#'   (`"CPU"`, `"GPU"`, ...), `kind` (`"physical"` or `"logical"`) and
#'   `mirrored` (`TRUE` for the devices a default `MirroredStrategy()` takes).
#' @family devices and strategies
#' @export
#' @examples
#' \donttest{
#' if (kd_available()) kd_devices()
#' }
kd_devices <- function() {
  collect_python_garbage()
  kd <- kd_module()
  described <- kd_call(kd$describe_devices())
  rows <- function(devices, kind) {
    data.frame(
      name = vapply(devices, function(d) d$name, ""),
      type = vapply(devices, function(d) d$type, ""),
      kind = rep(kind, length(devices)),
      stringsAsFactors = FALSE
    )
  }
  frame <- rbind(rows(described$physical, "physical"), rows(described$logical, "logical"))
  frame$mirrored <- frame$kind == "logical" & frame$name %in% unlist(described$mirrored_devices)
  frame
}

#' Build a tf.distribute strategy by name
#'
#' A thin wrapper of the Python core's `make_strategy()`. Strategies that
#' cannot run on one machine (`"parameter_server"` needs a cluster, `"tpu"`
#' a TPU) stop with an error that says what they need.
#'
#' @param name One of `"default"`, `"one_device"`, `"mirrored"`,
#'   `"central_storage"`, `"multi_worker"`.
#' @param replicas Devices to use on this machine (ignored by `"default"` and
#'   `"multi_worker"`).
#' @param collective_timeout_s For `"multi_worker"`: seconds a collective may
#'   wait for a missing peer (`NULL`: wait forever).
#' @param verbose Print `"Number of devices: N"`.
#' @returns The Python `tf.distribute.Strategy` object (a reticulate object);
#'   for example `strategy$num_replicas_in_sync`.
#' @family devices and strategies
#' @export
#' @examples
#' \donttest{
#' if (kd_available()) {
#'   kd_simulate_devices(2)
#'   strategy <- kd_strategy("mirrored", replicas = 2)
#'   strategy$num_replicas_in_sync
#' }
#' }
kd_strategy <- function(name = "mirrored", replicas = 1, collective_timeout_s = NULL, verbose = TRUE) {
  name <- as_string(name, "name")
  replicas <- as_count(replicas, "replicas")
  timeout <- if (is.null(collective_timeout_s)) NULL else as_number(collective_timeout_s, "collective_timeout_s")
  verbose <- as_flag(verbose, "verbose")
  collect_python_garbage()
  kd <- kd_module()
  kd_call(kd$make_strategy(name, num_replicas = replicas, collective_timeout_s = timeout, verbose = verbose))
}
