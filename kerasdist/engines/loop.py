"""kerasdist's own training loop: ``strategy.run`` inside ``tf.function``, many steps per call.

It trains the same compiled Keras 3 model as ``fit`` where ``fit`` cannot:
under ``MultiWorkerMirroredStrategy`` (keras-team/keras#20585) and with many
steps per call under ``MirroredStrategy`` (keras-team/keras#19246).
"""

import time
import weakref

import keras
import numpy as np
import tensorflow as tf

from kerasdist import data as data_module
from kerasdist.engines import interrupt
from kerasdist.engines.callbacks import next_call_end
from kerasdist.errors import KerasdistError
from kerasdist.model import ACCURACY_METRIC, LOSS_METRIC

# Each step yields three numbers, summed over replicas and workers: loss sum, correct predictions, examples.
_STATISTICS = 3
# Under these strategies the optimizer's all-reduce syncs the replicas (merge_call); XLA cannot compile that.
_SYNCING_STRATEGIES = (tf.distribute.MirroredStrategy, tf.distribute.MultiWorkerMirroredStrategy)
# Each multi-worker strategy's gathering of the workers' stop requests (see _stop_signal).
_STOP_REDUCERS = weakref.WeakKeyDictionary()
# Each model's DistributedSteps: tracing costs seconds, so validation and test evaluation reuse them.
_STEPS_BY_MODEL = weakref.WeakKeyDictionary()


class DistributedSteps:
    """The compiled training and evaluation functions of one model under one strategy.

    A training call runs up to ``steps_per_execution`` steps in one
    ``tf.function`` call (a ``tf.range`` loop of ``strategy.run``), so Python
    is entered once per call instead of once per step. Each replica scales its
    loss by the GLOBAL batch (``tf.nn.compute_average_loss``) and the
    optimizer sums gradients across replicas, so a step equals one step on
    one device with the whole batch. Per-step sums of loss, correct
    predictions and examples stay on each replica and are reduced across
    replicas and workers once per call.

    Args:
        model: a compiled Keras model, built in ``strategy.scope()`` with its
            optimizer built.
        strategy: the ``tf.distribute.Strategy`` the model was built under.
        global_batch_size: samples per step across all replicas.
        steps_per_execution: the most steps one call runs.
        jit_compile: compile each step with XLA. On one device the whole
            step (gradients and optimizer update) is compiled; under mirrored
            and multi_worker the gradient computation is, and the all-reduce
            and update run outside XLA.

    Raises:
        KerasdistError: for ``jit_compile`` under central_storage (XLA cannot
            read variables kept on another device).

    Example:
        >>> steps = DistributedSteps(model, strategy, 64, 50)                    # doctest: +SKIP
        >>> iterator = iter(strategy.experimental_distribute_dataset(dataset))  # doctest: +SKIP
        >>> steps.train(iterator, 50).shape                                     # doctest: +SKIP
        (50, 3)
    """

    def __init__(self, model, strategy, global_batch_size, steps_per_execution, jit_compile=False):
        self.model = model
        self.strategy = strategy
        self.global_batch_size = global_batch_size
        self.steps_per_execution = int(steps_per_execution)
        if jit_compile and isinstance(strategy, tf.distribute.experimental.CentralStorageStrategy):
            raise KerasdistError(
                "XLA cannot compile steps that read variables kept on another device, as central_storage "
                "does. Received: jit_compile=True with strategy central_storage; use mirrored for XLA"
            )
        whole_step = jit_compile and not isinstance(strategy, _SYNCING_STRATEGIES)
        self._step = self._step_on_replica
        self._gradients = self._gradients_on_replica
        if whole_step:
            self._step = tf.function(self._step_on_replica, jit_compile=True)
        elif jit_compile:
            self._gradients = tf.function(self._gradients_on_replica, jit_compile=True)
        self._train_function = tf.function(self._train_steps)
        self._evaluate_function = tf.function(self._evaluate_dataset)

    def train(self, iterator, num_steps):
        """Run ``num_steps`` (at most ``steps_per_execution``) steps from a distributed iterator.

        Returns:
            A ``(num_steps, 3)`` array: per step, the loss summed over the
            global batch, the correct predictions and the examples.
        """
        totals = self._train_function(iterator, tf.constant(num_steps, tf.int32)).numpy()
        return totals[:num_steps]

    def evaluate(self, distributed_dataset):
        """Return ``{"loss", ACCURACY_METRIC}`` over a whole distributed dataset."""
        loss_sum, correct, examples = self._evaluate_function(iter(distributed_dataset)).numpy()
        return {LOSS_METRIC: float(loss_sum / examples), ACCURACY_METRIC: float(correct / examples)}

    def _train_steps(self, iterator, num_steps):
        totals = self.strategy.run(tf.zeros, args=([self.steps_per_execution, _STATISTICS],))
        for index in tf.range(num_steps):
            totals = self.strategy.run(self._train_on_replica, args=(next(iterator), totals, index))
        return self.strategy.reduce(tf.distribute.ReduceOp.SUM, totals, axis=None)

    def _train_on_replica(self, batch, totals, index):
        images, labels = batch
        return tf.tensor_scatter_nd_add(totals, [[index]], [self._step(images, labels)])

    def _step_on_replica(self, images, labels):
        gradients, statistics = self._gradients(images, labels)
        self.model.optimizer.apply_gradients(zip(gradients, self.model.trainable_variables))
        return statistics

    def _gradients_on_replica(self, images, labels):
        with tf.GradientTape() as tape:
            logits = self.model(images, training=True)
            per_example_loss = self.model.loss.call(labels, logits)
            loss = tf.nn.compute_average_loss(per_example_loss, global_batch_size=self.global_batch_size)
            if self.model.losses:
                loss += tf.nn.scale_regularization_loss(tf.add_n(self.model.losses))
            # As Keras' own train_step: under mixed_float16, compile() made the optimizer a
            # LossScaleOptimizer, which scales the loss here (so float16 gradients do not underflow) and
            # divides the gradients by the same scale in apply_gradients; other optimizers return it as is.
            scaled_loss = self.model.optimizer.scale_loss(loss)
        gradients = tape.gradient(scaled_loss, self.model.trainable_variables)
        return gradients, _statistics(per_example_loss, logits, labels)

    def _evaluate_dataset(self, iterator):
        totals = self.strategy.run(tf.zeros, args=([_STATISTICS],))
        for images, labels in iterator:
            totals = self.strategy.run(self._evaluate_on_replica, args=(images, labels, totals))
        return self.strategy.reduce(tf.distribute.ReduceOp.SUM, totals, axis=None)

    def _evaluate_on_replica(self, images, labels, totals):
        logits = self.model(images, training=False)
        return totals + _statistics(self.model.loss.call(labels, logits), logits, labels)


def _statistics(per_example_loss, logits, labels):
    predictions = tf.argmax(logits, axis=-1, output_type=labels.dtype)
    correct = tf.reduce_sum(tf.cast(tf.equal(predictions, labels), tf.float32))
    examples = tf.cast(tf.shape(labels)[0], tf.float32)
    return tf.stack([tf.reduce_sum(per_example_loss), correct, examples])


def steps_for(model, strategy, global_batch_size, steps_per_execution=None, jit_compile=None):
    """The model's ``DistributedSteps``, made again only when a setting changes.

    Args:
        model, strategy, global_batch_size: as for ``DistributedSteps``.
        steps_per_execution, jit_compile: as for ``DistributedSteps``; None
            (for evaluation, which uses neither) accepts the model's current steps.

    Returns:
        A ``DistributedSteps``.

    Example:
        >>> steps_for(model, strategy, 64, 50) is steps_for(model, strategy, 64)  # doctest: +SKIP
        True
    """
    known = _STEPS_BY_MODEL.get(model)
    wanted = (strategy, global_batch_size, steps_per_execution, jit_compile)
    if known is None or any(want is not None and want != have for want, have in zip(wanted, known[0])):
        settings = (strategy, global_batch_size, steps_per_execution or 1, bool(jit_compile))
        known = _STEPS_BY_MODEL[model] = (settings, DistributedSteps(model, *settings))
    return known[1]


def evaluate(model, strategy, dataset, global_batch_size):
    """Evaluate ``model`` on a batched dataset with the loop's distributed evaluation.

    Works under every strategy the loop supports, multi-worker included
    (where Keras ``evaluate`` meets the same bug as ``fit``).

    Args:
        model: a compiled model built under ``strategy``.
        strategy: its ``tf.distribute.Strategy``.
        dataset: a ``tf.data.Dataset`` batched by the global batch.
        global_batch_size: samples per batch across all replicas.

    Returns:
        ``{"loss": ..., "sparse_categorical_accuracy": ...}`` over the whole dataset.

    Example:
        >>> evaluate(model, strategy, data.eval_dataset(x, y, 64), 64)  # doctest: +SKIP
        {'loss': 0.27, 'sparse_categorical_accuracy': 0.92}
    """
    steps = steps_for(model, strategy, global_batch_size)
    return steps.evaluate(strategy.experimental_distribute_dataset(dataset))


class AgreedStop:
    """The stop request the loop's ``StopOnSignal`` sees: read at the end of each call, by every worker alike.

    Within a call the weights have already moved on to its last step, so a
    stop (and its checkpoint) may only happen there; under multi_worker the
    workers agree on it by an all-reduce, so all stop at the same step.

    Example:
        >>> stop = AgreedStop(strategy)                      # doctest: +SKIP
        >>> StopOnSignal(store, 52, stop.requested)          # doctest: +SKIP
    """

    def __init__(self, strategy):
        self.strategy = strategy
        self.current = None

    def agree(self):
        """Read (under multi_worker: gather) the stop request now; return it."""
        return _stop_signal(self.strategy)

    def requested(self):
        """The request visible to the callbacks at this step (None within a call)."""
        return self.current


def train_epochs(context, callbacks, stop):
    """Train epochs ``context.position.epoch .. context.epochs - 1`` with the loop; the loop engine.

    Drives ``callbacks`` (Keras callbacks, as ``fit`` would: metrics log,
    checkpoints, the stop on a signal, the NaN guard) through a
    ``keras.callbacks.CallbackList`` with a progress bar, one batch event per
    step; after a mid-epoch checkpoint it continues at the next batch.

    Args:
        context: a ``kerasdist.engines.train.TrainingContext``.
        callbacks: the Keras callbacks; their ``StopOnSignal`` reads ``stop.requested``.
        stop: the ``AgreedStop`` of ``context.strategy``.

    Returns:
        ``(samples trained, seconds)``.

    Example:
        >>> samples, seconds = train_epochs(context, callbacks, stop)  # doctest: +SKIP
    """
    strategy = context.strategy
    if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        _check_same_position(strategy, context.position.global_step)
    steps = steps_for(
        context.model, strategy, context.global_batch_size, context.steps_per_execution, context.jit_compile
    )
    first_epoch, skip = context.position.epoch, context.position.step_in_epoch
    dataset = data_module.train_dataset(
        context.data.x_train, context.data.y_train, context.global_batch_size,
        context.seed, first_epoch, context.epochs, skip,
    )
    # The loop takes an exact number of batches, so the data may look endless: then TensorFlow skips its
    # per-step check that every worker still has a batch (one more all-reduce per step under multi_worker).
    iterator = iter(strategy.experimental_distribute_dataset(dataset.repeat()))
    validation = strategy.experimental_distribute_dataset(context.validation_dataset())
    samples, start = 0, time.perf_counter()
    for first, last, skip_batches in context.segments():
        callback_list = _callback_list(context, callbacks, skip_batches)
        callback_list.on_train_begin()  # every worker joined the cluster and restored the same checkpoint
        for epoch in range(first, last):
            first_step = skip_batches if epoch == first else 0
            _train_one_epoch(context, steps, iterator, validation, epoch, first_step, callback_list, stop)
            samples += (context.steps_per_epoch - first_step) * context.global_batch_size
        callback_list.on_train_end()
    return samples, time.perf_counter() - start


def _callback_list(context, callbacks, skip_batches):
    """The callbacks of one stretch of epochs, numbering steps from ``skip_batches`` on (as ``fit`` would)."""
    for callback in callbacks:
        callback.step_offset = skip_batches
    return keras.callbacks.CallbackList(
        callbacks, add_progbar=context.verbose != 0, model=context.model, verbose=context.verbose,
        epochs=context.epochs, steps=context.steps_per_epoch - skip_batches,
    )


def _check_same_position(strategy, global_step):
    """Stop if the workers restored different checkpoints: training on, their weights would silently part."""
    everyone = tf.function(
        lambda: strategy.gather(strategy.run(tf.constant, args=([global_step], tf.int64)), axis=0)
    )
    steps = sorted(set(everyone().numpy().tolist()))
    if len(steps) > 1:
        raise KerasdistError(
            f"the workers restored different checkpoints (global steps {steps}); every worker must read "
            "the chief's --checkpoint-dir (a shared directory), or all must start fresh"
        )


def _train_one_epoch(context, steps, iterator, validation, epoch, first_step, callbacks, stop):
    """Train one epoch from ``first_step`` in calls of many steps, with one batch event per step."""
    steps_per_epoch = context.steps_per_epoch
    callbacks.on_epoch_begin(epoch)
    totals = np.zeros(_STATISTICS)
    step = first_step
    while step < steps_per_epoch:
        call_end = next_call_end(step, steps_per_epoch, context.steps_per_execution, context.save_every_steps)
        statistics = steps.train(iterator, call_end - step)
        agreed = stop.agree() if call_end < steps_per_epoch else None
        for loss_sum, correct, examples in statistics:
            totals += (loss_sum, correct, examples)
            step += 1
            stop.current = agreed if step == call_end else None
            callbacks.on_train_batch_end(step - first_step - 1,
                                         {**_means(totals), "batch_loss": float(loss_sum / examples)})
    callbacks.on_test_begin()
    validation_metrics = steps.evaluate(validation)
    validation_logs = {f"val_{name}": value for name, value in validation_metrics.items()}
    callbacks.on_test_end(validation_logs)
    stop.current = stop.agree()
    callbacks.on_epoch_end(epoch, {**_means(totals), **validation_logs})


def _stop_signal(strategy):
    """The signal that asks training to stop, or None; under multi_worker, any worker's.

    Every worker must stop at the same step (saving takes all of them), so
    under multi_worker the workers agree by an all-reduce (the maximum).
    """
    requested = interrupt.requested_signal() or 0
    if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        if strategy not in _STOP_REDUCERS:
            _STOP_REDUCERS[strategy] = tf.function(
                lambda value: strategy.gather(strategy.run(tf.identity, args=(value,)), axis=0))
        requested = int(np.max(_STOP_REDUCERS[strategy](tf.constant([requested], tf.int32)).numpy()))
    return requested or None


def _means(totals):
    loss_sum, correct, examples = totals
    return {LOSS_METRIC: float(loss_sum / examples), ACCURACY_METRIC: float(correct / examples)}
