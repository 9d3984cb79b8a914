"""Make N replicas out of the devices this machine has, before TensorFlow initialises them.

TensorFlow is imported by each function, so the command line can read this layer's names first.
"""

from kerasdist import checks
from kerasdist.errors import KerasdistError

DEVICE_TYPES = ("auto", "GPU", "CPU")


def configure_replicas(num_replicas, device_type="auto", gpu_memory_mb=2048):
    """Make at least ``num_replicas`` logical devices for a strategy to use.

    With N or more GPUs nothing changes (the first N are used). With one GPU it
    is split into N logical GPUs of ``gpu_memory_mb`` each. Without a GPU the CPU
    is split into N virtual CPU devices, which gives MirroredStrategy N real
    replicas (they share the CPU cores, so this teaches, it does not speed up).

    This must run before TensorFlow initialises its devices (before the first
    op, model or dataset). Called again later it succeeds only if enough
    devices already exist.

    Args:
        num_replicas: how many replicas a strategy should get (>= 1).
        device_type: "auto" (GPU if present, else CPU), "GPU" or "CPU".
        gpu_memory_mb: memory of each logical GPU when one GPU is split.

    Returns:
        The names of the ``num_replicas`` logical devices to use.

    Raises:
        KerasdistError: if the count is invalid, or TensorFlow was initialised
            earlier with fewer devices.

    Example:
        >>> import kerasdist
        >>> kerasdist.configure_replicas(2)  # doctest: +SKIP
        ['/device:CPU:0', '/device:CPU:1']
    """
    import tensorflow as tf

    num_replicas = checks.integer("replicas", num_replicas, 1,
                                      fix="use 1 for one device, or the replicas you want")
    gpu_memory_mb = checks.integer("gpu_memory_mb", gpu_memory_mb, 1, fix="try 2048")
    if device_type not in DEVICE_TYPES:
        raise KerasdistError(
            f"device_type must be one of {', '.join(DEVICE_TYPES)}. "
            f"Received: device_type={device_type!r}"
        )
    gpus = tf.config.list_physical_devices("GPU")
    kind = ("GPU" if gpus else "CPU") if device_type == "auto" else device_type
    if kind == "GPU" and not gpus:
        raise KerasdistError("device_type='GPU' but TensorFlow sees no GPU; use 'CPU' or 'auto'.")
    physical = gpus if kind == "GPU" else tf.config.list_physical_devices("CPU")
    if len(physical) < num_replicas and num_replicas > 1:
        if kind == "GPU" and len(physical) > 1:
            raise KerasdistError(
                f"{len(physical)} GPUs cannot make {num_replicas} replicas; ask for at most "
                f"{len(physical)} replicas (only a single GPU is split into logical GPUs)."
            )
        split = [
            tf.config.LogicalDeviceConfiguration(memory_limit=gpu_memory_mb if kind == "GPU" else None)
            for _ in range(num_replicas)
        ]
        try:
            tf.config.set_logical_device_configuration(physical[0], split)
        except RuntimeError:
            pass  # already initialised: replica_devices() says whether enough exist
    return replica_devices(num_replicas, kind)


def replica_devices(num_replicas, device_type="auto"):
    """Return the names of the first ``num_replicas`` logical devices.

    Args:
        num_replicas: how many devices are needed.
        device_type: "auto", "GPU" or "CPU".

    Returns:
        A list of device names such as ``['/device:CPU:0', '/device:CPU:1']``.

    Raises:
        KerasdistError: if fewer devices exist than replicas asked for.

    Example:
        >>> replica_devices(1)  # doctest: +SKIP
        ['/device:CPU:0']
    """
    import tensorflow as tf

    if device_type == "auto":
        device_type = "GPU" if tf.config.list_physical_devices("GPU") else "CPU"
    logical = [device.name for device in tf.config.list_logical_devices(device_type)]
    if len(logical) < num_replicas:
        raise KerasdistError(
            f"{num_replicas} replicas need {num_replicas} {device_type} devices but TensorFlow "
            f"was already initialised with {len(logical)}; restart the kernel (or process) and "
            f"call kerasdist.configure_replicas({num_replicas}) before any other TensorFlow code."
        )
    return logical[:num_replicas]


def describe_devices():
    """Describe physical and logical devices, and what MirroredStrategy would use.

    Returns:
        A dict with ``physical`` and ``logical`` lists of ``{"name", "type"}``
        and ``mirrored_devices``, the devices ``MirroredStrategy()`` picks
        when given no device list.

    Example:
        >>> describe_devices()["mirrored_devices"]  # doctest: +SKIP
        ['/device:CPU:0']
    """
    import tensorflow as tf

    physical = [{"name": d.name, "type": d.device_type} for d in tf.config.list_physical_devices()]
    logical = [{"name": d.name, "type": d.device_type} for d in tf.config.list_logical_devices()]
    gpus = [d["name"] for d in logical if d["type"] == "GPU"]
    cpus = [d["name"] for d in logical if d["type"] == "CPU"]
    return {
        "physical": physical,
        "logical": logical,
        # MirroredStrategy() with no arguments takes every logical GPU, else every logical CPU (its
        # all_local_devices()): the virtual CPU devices too.
        "mirrored_devices": gpus or cpus,
    }


def on_virtual_cpus():
    """True when TensorFlow sees no GPU: replicas are then virtual devices sharing the same CPU cores."""
    import tensorflow as tf

    return not tf.config.list_logical_devices("GPU")
