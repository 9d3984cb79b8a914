"""Build a tf.distribute strategy by name, and say plainly which ones cannot run here."""

import json
import os

from kerasdist.devices import replica_devices
from kerasdist.errors import KerasdistError

STRATEGIES = ("default", "one_device", "mirrored", "central_storage", "multi_worker")
NOT_RUNNABLE_HERE = {
    "parameter_server": (
        "parameter_server needs a cluster of 'worker' and 'ps' tasks (TensorFlow can start one inside "
        "a single process, one tf.distribute.Server per task) and a coordinator, the chief, that "
        "schedules every step with ClusterCoordinator; Keras 3 has no ParameterServerStrategy support, "
        "so neither fit() nor kerasdist's synchronous loop can drive it. Use mirrored (one machine) or "
        "multi_worker (several processes) instead."
    ),
    "tpu": "tpu needs a TPU (for example a Cloud TPU VM); none is attached to this machine.",
}


def make_strategy(name="mirrored", num_replicas=1, collective_timeout_s=None, verbose=True):
    """Return a ``tf.distribute`` strategy chosen by name.

    Args:
        name: one of "default", "one_device", "mirrored", "central_storage",
            "multi_worker". "parameter_server" and "tpu" raise with an
            explanation of what they need. "mirrored" on CPU devices
            all-reduces with ``ReductionToOneDevice`` (see below), not with
            TensorFlow's default ``CollectiveAllReduce``.
        num_replicas: devices to use on this machine (ignored by "default" and
            "multi_worker", which take one device per worker).
        collective_timeout_s: for "multi_worker", how long a collective may
            wait for a missing peer before failing (None: wait forever).
        verbose: print "Number of devices: N" like the TensorFlow guides.

    Returns:
        A ``tf.distribute.Strategy``; build and compile the model in its ``scope()``.

    Raises:
        KerasdistError: for an unknown name, a strategy that needs hardware or
            a cluster this machine lacks, or too few devices.

    Example:
        >>> strategy = make_strategy("mirrored", num_replicas=2)  # doctest: +SKIP
        Number of devices: 2
    """
    import tensorflow as tf  # here: the names above are read by the command line before TensorFlow starts

    if name in NOT_RUNNABLE_HERE:
        raise KerasdistError(NOT_RUNNABLE_HERE[name])
    if name not in STRATEGIES:
        allowed = ", ".join(STRATEGIES + tuple(NOT_RUNNABLE_HERE))
        raise KerasdistError(f"unknown strategy. Received: strategy={name!r}; allowed: {allowed}")
    if name == "default":
        strategy = tf.distribute.get_strategy()
    elif name == "one_device":
        strategy = tf.distribute.OneDeviceStrategy(replica_devices(1)[0])
    elif name == "mirrored":
        devices = replica_devices(num_replicas)
        # Without cross_device_ops, TensorFlow 2.21 all-reduces with CollectiveAllReduce (RING on
        # CPUs and virtual GPUs, NCCL on physical GPUs), whose group keys clash when a second
        # MirroredStrategy with another replica count is made in the same process ("joining a
        # group with size 4, but that group has size 2"). On CPU devices kerasdist reduces on one
        # device instead: the same sums on virtual CPUs. GPUs keep TensorFlow's choice.
        cpu_only = all("CPU" in device for device in devices)
        strategy = tf.distribute.MirroredStrategy(
            devices=devices, cross_device_ops=tf.distribute.ReductionToOneDevice() if cpu_only else None
        )
    elif name == "central_storage":
        strategy = tf.distribute.experimental.CentralStorageStrategy(
            compute_devices=replica_devices(num_replicas)
        )
    else:
        strategy = _multi_worker_strategy(collective_timeout_s)
    if verbose:
        print(f"Number of devices: {strategy.num_replicas_in_sync}", flush=True)
    return strategy


def _multi_worker_strategy(collective_timeout_s):
    """MultiWorkerMirroredStrategy from TF_CONFIG (one local worker when it is unset)."""
    if os.environ.get("TF_CONFIG"):
        try:
            json.loads(os.environ["TF_CONFIG"])
        except json.JSONDecodeError as error:
            raise KerasdistError(f"TF_CONFIG is not valid JSON: {error}") from None
    import tensorflow as tf

    options = tf.distribute.experimental.CommunicationOptions(
        timeout_seconds=collective_timeout_s
    )
    return tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
