"""How a model trains: ``run_training`` and its engines (TF ``fit``, TF loop, JAX), the strategy, the options.

``backends.run_training`` picks the backend before Keras loads; ``train`` is the TensorFlow engine
(``fit`` or kerasdist's own ``loop``), ``jax_engine`` the JAX one; ``strategy`` builds the
``tf.distribute`` strategy, ``choice`` which engine a strategy needs, ``options`` the one
``TrainingOptions``; ``callbacks`` and ``interrupt`` serve every engine. May import the base and
``kerasdist.state``; importing this package loads neither TensorFlow nor JAX.
"""
