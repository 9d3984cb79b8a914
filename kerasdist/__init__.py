"""kerasdist: learn synchronous data-parallel training with Keras and tf.distribute.

Typical use (the order matters: devices first, before TensorFlow starts):

    import kerasdist
    kerasdist.configure_replicas(2)          # 2 GPUs, 1 GPU split in 2, or 2 virtual CPUs
    result = kerasdist.run_training(replicas=2, epochs=3, data="sample",
                                    checkpoint_dir="ckpt")
    print(result.history["val_sparse_categorical_accuracy"])
"""

import os
import sys


def _import_tensorflow_quietly():
    """Import TensorFlow with its C++ start-up lines (absl, oneDNN) kept off stderr.

    TF_CPP_MIN_LOG_LEVEL does not silence them, and they would bury the CLI's
    one-line errors and clutter notebook cells. Errors still surface: the
    exception is raised after stderr is restored.
    """
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if "tensorflow" in sys.modules:
        return
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
            import tensorflow  # noqa: F401
            tensorflow.get_logger().setLevel("WARNING")  # in notebooks TF logs INFO lines to stdout
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _started_as_command_line():
    """True while ``python -m kerasdist`` or the ``kerasdist`` script imports the package.

    The command line then checks its options first and starts TensorFlow
    (quietly) only for work that needs it, so a mistyped option is reported
    at once instead of after the seconds TensorFlow takes to load.
    """
    program = os.path.basename(sys.argv[0]) if sys.argv else ""
    return program in ("-m", "kerasdist")


# What ``kerasdist.NAME`` gives, by the module that defines it.
_EXPORTS = {
    "configure_replicas": "kerasdist.devices",
    "describe_devices": "kerasdist.devices",
    "make_strategy": "kerasdist.strategy",
    "load_mnist": "kerasdist.data",
    "TrainingResult": "kerasdist.train",
    "run_training": "kerasdist.train",
    "run_comparison": "kerasdist.compare",
    "training_flops_per_sample": "kerasdist.speed",
    "matmul_flops_per_s": "kerasdist.speed",
    "cpu_bfloat16_instructions": "kerasdist.speed",
}


def __getattr__(name):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'kerasdist' has no attribute {name!r}")
    import importlib

    _import_tensorflow_quietly()
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


from kerasdist.errors import KerasdistError  # noqa: E402

if not _started_as_command_line():
    _import_tensorflow_quietly()
    for _name in _EXPORTS:
        __getattr__(_name)

__version__ = "0.1.0"

__all__ = [
    "KerasdistError",
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
