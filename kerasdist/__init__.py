"""kerasdist: learn synchronous data-parallel training with Keras and tf.distribute.

Typical use (the order matters: devices first, before TensorFlow starts):

    import kerasdist
    kerasdist.configure_replicas(2)          # 2 GPUs, 1 GPU split in 2, or 2 virtual CPUs
    result = kerasdist.run_training(replicas=2, epochs=3, data="sample",
                                    checkpoint_dir="ckpt")
    print(result.history["val_sparse_categorical_accuracy"])

Importing kerasdist loads nothing heavy: TensorFlow starts (quietly, see
``kerasdist.startup``) when a name below is first used, or when anything
imports it.
"""

from kerasdist import startup
from kerasdist.errors import KerasdistError

startup.install()

# What ``kerasdist.NAME`` gives, by the module that defines it.
_EXPORTS = {
    "configure_replicas": "kerasdist.devices",
    "describe_devices": "kerasdist.devices",
    "make_strategy": "kerasdist.engines.strategy",
    "load_mnist": "kerasdist.data",
    "TrainingOptions": "kerasdist.engines.options",
    "TrainingResult": "kerasdist.result",
    "run_training": "kerasdist.engines.backends",
    "run_comparison": "kerasdist.experiments.compare",
    "training_flops_per_sample": "kerasdist.measure.speed",
    "matmul_flops_per_s": "kerasdist.measure.speed",
    "cpu_bfloat16_instructions": "kerasdist.measure.speed",
}


def __getattr__(name):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'kerasdist' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))


__version__ = "0.1.0"

__all__ = [
    "KerasdistError",
    "TrainingOptions",
    "TrainingResult",
    "configure_replicas",
    "cpu_bfloat16_instructions",
    "describe_devices",
    "load_mnist",
    "make_strategy",
    "matmul_flops_per_s",
    "run_comparison",
    "run_training",
    "training_flops_per_sample",
]
