"""``run_training`` for either backend: Keras takes its backend once, when it loads, so it is chosen first.

Keras reads ``KERAS_BACKEND`` at its first import and keeps that backend for
the life of the process. ``run_training(backend=...)`` sets it before Keras
loads (whoever calls: the command line, Python, or R through reticulate),
then hands over to the engine of that backend: ``kerasdist.engines.train`` on
TensorFlow, ``kerasdist.engines.jax_engine`` on JAX. In a process where Keras is
already loaded on the other backend it stops with one line saying so.
"""

from kerasdist.engines.options import TrainingOptions
from kerasdist.startup import use_backend


def run_training(**options):
    """Train the guide's MLP with ``replicas`` synchronous replicas up to ``epochs`` epochs in all.

    The engine is the backend's: ``kerasdist.engines.train.run_training`` on
    TensorFlow (tf.distribute, Keras ``fit`` or kerasdist's loop),
    ``kerasdist.engines.jax_engine.run_training`` on JAX (``keras.distribution``).
    With a ``checkpoint_dir`` a rerun resumes exactly where the last
    checkpoint left off, on either backend.

    Args:
{args}

    Returns:
        A ``kerasdist.result.TrainingResult``.

    Raises:
        KerasdistError: for invalid arguments, data or checkpoints (nothing is
            written before these checks pass), or when Keras is already loaded
            on another backend in this process.

    Example:
        >>> result = run_training(backend="jax", replicas=2, epochs=1, data="sample")  # doctest: +SKIP
        >>> result.strategy                                                              # doctest: +SKIP
        'DataParallel'
    """
    checked = TrainingOptions(**options)
    use_backend(checked.backend)
    if checked.backend == "jax":
        from kerasdist.engines import jax_engine

        return jax_engine.run_training(checked)
    from kerasdist.engines import train

    return train.run_training(**options)


run_training.__doc__ = run_training.__doc__.format(args=TrainingOptions.docs())
run_training.__signature__ = TrainingOptions.signature()
