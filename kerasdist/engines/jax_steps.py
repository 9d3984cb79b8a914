"""The JAX engine's calls of several steps: one jitted ``jax.lax.scan`` of Keras' ``train_step`` per call.

Keras' ``fit(steps_per_execution=K)`` on JAX still calls the jitted step once
per step from Python and moves every batch to the devices on its own
(keras/src/backend/jax/trainer.py, ``_make_function``). Here the training
images stay on the devices for the whole run, and a call of K steps is one
compiled program: it gathers its batches by index, runs K of the model's own
``train_step`` (the step ``fit`` runs, loss, gradients, Adam and metrics
included) in a ``lax.scan``, and returns the new state and every step's
metrics. Under ``keras.distribution.DataParallel`` each batch is split across
the devices along the batch axis, as ``fit`` splits it; the weights stay
replicated and XLA all-reduces the gradients.

Example:
    >>> steps = ScannedSteps(model, distribution, x_train, y_train, 64)   # doctest: +SKIP
    >>> state, logs = steps.run(steps.state(), order[:640].reshape(10, 64))  # doctest: +SKIP
    >>> steps.write(state)                                                 # doctest: +SKIP
"""

import numpy as np


class ScannedSteps:
    """Device-resident training data and the jitted call that trains a run of steps on it.

    Args:
        model: a compiled Keras model (JAX backend), built under ``distribution``.
        distribution: the ``keras.distribution.DataParallel`` of the run.
        x, y: the training images and labels (NumPy), indexed by the epoch's order.
        global_batch_size: samples per step.
    """

    def __init__(self, model, distribution, x, y, global_batch_size):
        import jax
        from jax.sharding import NamedSharding, PartitionSpec

        self.model = model
        # Builds the compiled metrics, whose variables train_step carries (fit builds them before its first
        # step); it changes no weight, and each epoch starts with reset metrics.
        model.test_on_batch(x[:global_batch_size], y[:global_batch_size])
        layout = distribution.get_data_layout((global_batch_size, *x.shape[1:])).backend_layout
        mesh, batch_axis = layout.mesh, layout.spec[0]
        self.replicated = NamedSharding(mesh, PartitionSpec())
        self.x = jax.device_put(x, self.replicated)
        self.y = jax.device_put(y.astype(np.int32), self.replicated)
        images_sharding = NamedSharding(mesh, PartitionSpec(None, batch_axis))
        # The state goes in and comes out replicated, so that every call of a length reuses one compilation.
        self._run = jax.jit(self._steps(images_sharding), out_shardings=self.replicated)

    def _steps(self, batch_sharding):
        import jax

        model, x, y = self.model, self.x, self.y

        def train_step(state, batch):
            logs, state = model.train_step(state, batch)
            return state, logs

        def run(state, indices):
            images = jax.lax.with_sharding_constraint(x[indices], batch_sharding)
            labels = jax.lax.with_sharding_constraint(y[indices], batch_sharding)
            return jax.lax.scan(train_step, state, (images, labels))

        return run

    def _variable_groups(self):
        """The model's trainable, non-trainable, optimizer and metrics variables: ``train_step``'s state."""
        model = self.model
        return (model.trainable_variables, model.non_trainable_variables, model.optimizer.variables,
                model.metrics_variables)

    def state(self):
        """The values of the variables of ``_variable_groups``, as ``train_step`` takes them."""
        import jax

        return jax.device_put(tuple([variable.value for variable in variables]
                                    for variables in self._variable_groups()), self.replicated)

    def run(self, state, indices):
        """Train ``len(indices)`` steps from ``state`` (batch i is ``indices[i]``); the new state and each
        step's logs (Keras' running means) as NumPy arrays."""
        import jax

        state, logs = self._run(state, indices)
        return state, jax.device_get(logs)

    def write(self, state):
        """Put ``state`` into the model's variables (for checkpoints, validation and the result)."""
        for variables, values in zip(self._variable_groups(), state):
            for variable, value in zip(variables, values):
                variable.assign(value)
