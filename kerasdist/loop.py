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
from kerasdist import divergence, interrupt, peers
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
        peers.note_progress()
        return totals[:num_steps]

    def evaluate(self, distributed_dataset):
        """Return ``{"loss", ACCURACY_METRIC}`` over a whole distributed dataset."""
        loss_sum, correct, examples = self._evaluate_function(iter(distributed_dataset)).numpy()
        peers.note_progress()
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
        gradients = tape.gradient(loss, self.model.trainable_variables)
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


def train_epochs(context):
    """Train epochs ``context.position.epoch .. context.epochs - 1`` with the loop; the loop engine.

    Logs step and epoch records to ``context.log`` with the same keys as the
    ``fit`` engine (running means within an epoch, validation each epoch),
    saves a checkpoint after every epoch and every ``save_every_steps`` steps,
    and after a mid-epoch checkpoint continues at the next batch.

    Args:
        context: a ``kerasdist.train.TrainingContext``.

    Returns:
        ``(samples trained, seconds)``.

    Example:
        >>> samples, seconds = train_epochs(context)  # doctest: +SKIP
    """
    strategy = context.strategy
    steps_per_epoch = context.steps_per_epoch
    first_epoch, skip = context.position.epoch, context.position.step_in_epoch
    if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        _check_same_position(strategy, context.position.global_step)
        peers.note_progress()  # every worker joined the cluster and restored the same checkpoint
    steps = steps_for(
        context.model, strategy, context.global_batch_size, context.steps_per_execution, context.jit_compile
    )
    dataset = data_module.train_dataset(
        context.data.x_train, context.data.y_train, context.global_batch_size,
        context.seed, first_epoch, context.epochs, skip,
    )
    # The loop takes an exact number of batches, so the data may look endless: then TensorFlow skips its
    # per-step check that every worker still has a batch (one more all-reduce per step under multi_worker).
    iterator = iter(strategy.experimental_distribute_dataset(dataset.repeat()))
    validation = strategy.experimental_distribute_dataset(context.validation_dataset())
    samples, start = 0, time.perf_counter()
    for epoch in range(first_epoch, context.epochs):
        first_step = skip if epoch == first_epoch else 0
        _train_one_epoch(context, steps, iterator, validation, epoch, first_step)
        samples += (steps_per_epoch - first_step) * context.global_batch_size
    return samples, time.perf_counter() - start


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


def _train_one_epoch(context, steps, iterator, validation, epoch, first_step):
    steps_per_epoch = context.steps_per_epoch
    if context.verbose:
        print(f"Epoch {epoch + 1}/{context.epochs}", flush=True)
    progress = keras.utils.Progbar(
        steps_per_epoch, verbose=context.verbose, stateful_metrics=[LOSS_METRIC, ACCURACY_METRIC]
    )
    totals = np.zeros(_STATISTICS)
    epoch_start = time.perf_counter()
    step = first_step
    while step < steps_per_epoch:
        stop = _next_stop(step, steps_per_epoch, context.steps_per_execution, context.save_every_steps)
        statistics = steps.train(iterator, stop - step)
        divergence.check_losses(statistics[:, 0] / statistics[:, 2], epoch, step + 1)
        for loss_sum, correct, examples in statistics:
            totals += (loss_sum, correct, examples)
            step += 1
            if step % context.log_every_steps == 0 or step == steps_per_epoch:
                context.log.append({
                    "kind": "step",
                    "epoch": epoch,
                    "step": step,
                    "global_step": epoch * steps_per_epoch + step,
                    **_means(totals),
                    "batch_loss": float(loss_sum / examples),
                })
        if context.verbose == 1:
            progress.update(step, list(_means(totals).items()))
        checkpoint_due = context.save_every_steps and step % context.save_every_steps == 0
        saved = None
        if context.store and checkpoint_due and step < steps_per_epoch:
            saved = context.store.save(epoch, step, epoch * steps_per_epoch + step)
        stop_signal = _stop_signal(context.strategy) if step < steps_per_epoch else None
        if stop_signal:
            if context.store and not saved:
                saved = context.store.save(epoch, step, epoch * steps_per_epoch + step)
            raise interrupt.TrainingInterrupted(stop_signal, saved, epoch, step)
    validation_metrics = steps.evaluate(validation)
    seconds = time.perf_counter() - epoch_start
    logs = {**_means(totals), **{f"val_{name}": value for name, value in validation_metrics.items()}}
    progress.update(step, list(logs.items()), finalize=True)
    context.log.append({
        "kind": "epoch",
        "epoch": epoch,
        "global_step": (epoch + 1) * steps_per_epoch,
        **logs,
        "wall_time_s": seconds,
        "samples_per_s": (steps_per_epoch - first_step) * context.global_batch_size / seconds,
    })
    saved = context.store.save(epoch + 1, 0, (epoch + 1) * steps_per_epoch) if context.store else None
    stop_signal = _stop_signal(context.strategy)
    if stop_signal:
        raise interrupt.TrainingInterrupted(stop_signal, saved, epoch + 1, 0)


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


def _next_stop(step, steps_per_epoch, steps_per_execution, save_every_steps):
    """The step after which the next call returns: K steps on, a checkpoint step, or the epoch end."""
    stop = min(steps_per_epoch, step + steps_per_execution)
    if save_every_steps:
        stop = min(stop, (step // save_every_steps + 1) * save_every_steps)
    return stop


def _means(totals):
    loss_sum, correct, examples = totals
    return {LOSS_METRIC: float(loss_sum / examples), ACCURACY_METRIC: float(correct / examples)}
