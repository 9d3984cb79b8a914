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


_import_tensorflow_quietly()

from kerasdist.errors import KerasdistError  # noqa: E402
from kerasdist.devices import configure_replicas, describe_devices  # noqa: E402
from kerasdist.strategy import make_strategy  # noqa: E402
from kerasdist.data import load_mnist  # noqa: E402
from kerasdist.train import TrainingResult, run_training  # noqa: E402
from kerasdist.compare import run_comparison  # noqa: E402

__version__ = "0.1.0"

__all__ = [
    "KerasdistError",
    "TrainingResult",
    "configure_replicas",
    "describe_devices",
    "load_mnist",
    "make_strategy",
    "run_comparison",
    "run_training",
]
