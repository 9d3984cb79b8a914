"""Starting TensorFlow quietly: its C++ start-up lines (absl, oneDNN) kept off stderr.

TF_CPP_MIN_LOG_LEVEL does not silence them, and they would bury the command
line's one-line errors and clutter notebook cells. ``import kerasdist``
installs ``QuietTensorFlowFinder``, so whoever imports TensorFlow next (this
package, Keras, a lesson, reticulate) imports it quietly; nothing is loaded
until then, so the command line checks its options before TensorFlow starts.
"""

import contextlib
import importlib.abc
import importlib.util
import os
import sys

from kerasdist.errors import KerasdistError


@contextlib.contextmanager
def stderr_silenced():
    """Send file descriptor 2 (C++ and Python stderr) to /dev/null inside the block."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def import_tensorflow_quietly():
    """Import TensorFlow now (if not yet imported), through the quiet import hook of ``install``.

    Errors still surface: the exception is raised after stderr is restored.
    """
    install()
    import tensorflow

    tensorflow.get_logger().setLevel("WARNING")  # in notebooks TF logs INFO lines to stdout


class QuietTensorFlowFinder(importlib.abc.MetaPathFinder):
    """An import hook: the first import of ``tensorflow``, by anyone, runs with stderr silenced."""

    def find_spec(self, name, path=None, target=None):
        if name != "tensorflow":
            return None
        sys.meta_path.remove(self)  # once: find the real spec, then step aside
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.loader is not None:
            spec.loader = _QuietLoader(spec.loader)
        return spec


class _QuietLoader(importlib.abc.Loader):
    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        with stderr_silenced():
            self.loader.exec_module(module)
        module.get_logger().setLevel("WARNING")

    def __getattr__(self, name):
        return getattr(self.loader, name)


def install():
    """Make the next import of TensorFlow quiet (nothing to do once it is imported)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if "tensorflow" in sys.modules or any(isinstance(f, QuietTensorFlowFinder) for f in sys.meta_path):
        return
    sys.meta_path.insert(0, QuietTensorFlowFinder())


def use_backend(backend):
    """Make Keras load on ``backend`` in this process, or check that it already did.

    Raises:
        KerasdistError: if Keras is already loaded on another backend.

    Example:
        >>> use_backend("tensorflow")  # doctest: +SKIP
    """
    keras = sys.modules.get("keras")
    if keras is None:
        os.environ["KERAS_BACKEND"] = backend
        return
    loaded = keras.config.backend()
    if loaded != backend:
        raise KerasdistError(
            f"Keras is already loaded on {loaded} in this process and a process keeps its first backend. "
            f"Received: backend={backend!r}; start a new Python (or R) session and choose the backend before "
            f"anything imports Keras, or set KERAS_BACKEND={backend} before it starts"
        )
