"""Tests for kerasdist/devices.py: replicas out of virtual CPUs, and the too-late error."""

import pytest

from kerasdist import devices
from kerasdist.errors import KerasdistError


def test_two_virtual_cpus_become_two_replica_devices():
    names = devices.configure_replicas(2)
    assert len(names) == 2
    assert all("CPU" in name for name in names)


def test_asking_for_more_replicas_after_tensorflow_started_says_to_restart():
    with pytest.raises(KerasdistError, match=r"restart the kernel.*configure_replicas\(8\)"):
        devices.configure_replicas(8)


@pytest.mark.parametrize("bad", [0, -1, 1.5, "2"])
def test_replica_count_must_be_a_positive_integer(bad):
    with pytest.raises(KerasdistError, match="replicas must be an integer >= 1"):
        devices.configure_replicas(bad)


def test_describe_devices_lists_the_virtual_cpus():
    info = devices.describe_devices()
    logical_cpus = [d for d in info["logical"] if d["type"] == "CPU"]
    assert len(logical_cpus) >= 2
    # What MirroredStrategy() itself takes with no device list: here, with no GPU, every virtual CPU.
    import tensorflow as tf

    taken = tf.distribute.MirroredStrategy().extended.worker_devices
    def kind_and_index(name):
        spec = tf.DeviceSpec.from_string(name)
        return spec.device_type, spec.device_index

    assert [kind_and_index(d) for d in info["mirrored_devices"]] == [kind_and_index(d) for d in taken]
    assert len(taken) == len(logical_cpus)
