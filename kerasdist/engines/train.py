"""``run_training``: make or restore the model, train to a target epoch, return a plain result record."""

import dataclasses
import time

import keras
import tensorflow as tf

from kerasdist import data as data_module
from kerasdist.devices import configure_replicas
from kerasdist.engines import choice as engines
from kerasdist.engines import interrupt, loop
from kerasdist.engines.callbacks import standard_callbacks
from kerasdist.engines.options import LOOP_STEPS_PER_EXECUTION, TrainingOptions
from kerasdist.engines.strategy import make_strategy
from kerasdist.errors import KerasdistError
from kerasdist.model import ACCURACY_METRIC, build_model, learning_rate_for, model_signature
from kerasdist.result import TrainingResult
from kerasdist.state.checkpoint import CheckpointStore, RunPosition
from kerasdist.state.metrics_log import MetricsLog


@dataclasses.dataclass
class TrainingContext:
    """Everything an engine needs to train epochs ``position.epoch .. epochs - 1``."""

    model: keras.Model
    strategy: tf.distribute.Strategy
    data: data_module.MnistData
    epochs: int
    global_batch_size: int
    seed: int
    position: RunPosition
    log: MetricsLog
    store: CheckpointStore
    save_every_steps: int
    log_every_steps: int
    steps_per_execution: int
    verbose: int
    jit_compile: bool = False
    callbacks: tuple = ()

    @property
    def steps_per_epoch(self):
        return data_module.steps_per_epoch(len(self.data.y_train), self.global_batch_size)

    def segments(self):
        """``(first epoch, end epoch, batches to skip)`` stretches: after a mid-epoch checkpoint, that
        epoch's rest from the next batch, then whole epochs."""
        epoch, skip = self.position.epoch, self.position.step_in_epoch
        stretches = [(epoch, epoch + 1, skip), (epoch + 1, self.epochs, 0)] if skip else [
            (epoch, self.epochs, 0)]
        return [(first, last, skip_batches) for first, last, skip_batches in stretches if first < last]

    def validation_dataset(self):
        return data_module.eval_dataset(self.data.x_val, self.data.y_val, self.global_batch_size)


def run_training(**options):
    """Train the guide's MLP with ``replicas`` synchronous replicas up to ``epochs`` epochs in all.

    With a ``checkpoint_dir``, a rerun resumes: it restores weights, optimizer
    state and position from the newest valid checkpoint and trains only the
    epochs still missing (none if the target is reached, which it says).
    Epoch k always sees the same data order, so an interrupted and resumed run
    ends with the same weights as an uninterrupted one.

    Args:
{args}

    Returns:
        A ``TrainingResult``.

    Raises:
        KerasdistError: for invalid arguments, data or checkpoints; nothing is
            written before these checks pass.

    Example:
        >>> result = run_training(replicas=1, epochs=1, data="sample")  # doctest: +SKIP
        >>> result.test["accuracy"] > 0.8                               # doctest: +SKIP
        True
    """
    options = TrainingOptions(**options)
    if options.backend != "tensorflow":
        raise KerasdistError("kerasdist.engines.train trains on TensorFlow. "
                             f"Received: backend={options.backend!r}; "
                             "call kerasdist.run_training, which picks the engine of the backend")
    strategy_name = options.strategy or ("mirrored" if options.replicas > 1 else "default")
    engine, engine_reason = (engines.engine_for(strategy_name) if options.engine == "auto"
                             else (options.engine, None))
    mnist = _prepare(options, strategy_name)
    distribution = make_strategy(strategy_name, options.replicas, options.collective_timeout_s,
                                 verbose=options.verbose > 0)
    interrupt.rearm()  # a multi-worker cluster's runtime has just taken SIGTERM over
    if engine_reason and options.verbose:
        print(f"Engine {engine}: {engine_reason}.", flush=True)
    if strategy_name != "multi_worker" and distribution.num_replicas_in_sync != options.replicas:
        raise KerasdistError(
            f"strategy {strategy_name!r} runs {distribution.num_replicas_in_sync} replica(s), not "
            f"{options.replicas}; use strategy 'mirrored' for several replicas"
        )
    context = _context(options, distribution, mnist, engine)
    trained = _train(context, engine, options.checkpoint_dir)
    test_dataset = data_module.eval_dataset(mnist.x_test, mnist.y_test, options.global_batch_size)
    if engine == "loop":  # Keras evaluate() meets keras-team/keras#20585 under multi_worker too
        test = loop.evaluate(context.model, distribution, test_dataset, options.global_batch_size)
    else:
        test = context.model.evaluate(test_dataset, verbose=0, return_dict=True)
    return _result(options, context, strategy_name, engine, trained, test)


run_training.__doc__ = run_training.__doc__.format(args=TrainingOptions.docs())
run_training.__signature__ = TrainingOptions.signature()


def _prepare(options, strategy_name):
    """Make the replicas' devices, load and check the data, seed everything; return the data."""
    if strategy_name not in ("default", "multi_worker"):
        configure_replicas(options.replicas)
    if isinstance(options.data, data_module.MnistData):
        mnist = data_module.checked(options.data)
    else:
        mnist = data_module.load_mnist(options.data, options.seed, options.verbose > 0)
    if options.deterministic:
        keras.utils.set_random_seed(options.seed)
        tf.config.experimental.enable_op_determinism()
    return mnist


def _result(options, context, strategy_name, engine, trained, test):
    """The ``TrainingResult`` of a run: its settings, what it trained, the whole history, the test metrics."""
    samples, seconds, message = trained
    replicas = context.strategy.num_replicas_in_sync
    return TrainingResult(
        **options.recorded(), replicas=replicas, strategy=strategy_name, engine=engine,
        initial_epoch=context.position.epoch, epochs_run=max(0, options.epochs - context.position.epoch),
        history=context.log.history(), steps=context.log.steps(),
        test={"loss": float(test["loss"]), "accuracy": float(test[ACCURACY_METRIC])},
        wall_time_s=seconds, samples_per_s=samples / seconds if seconds > 0 else None,
        data_source=context.data.provenance(),
        checkpoint=(context.store.latest_checkpoint if context.store else None),
        per_replica_batch_size=options.global_batch_size // replicas,
        learning_rate=options.learning_rate * (replicas if options.scale_learning_rate else 1),
        resumed_from_step=context.position.global_step, message=message,
        model=context.model,
    )


def _context(options, distribution, mnist, engine):
    """Build (or restore) the model in the strategy's scope, and everything an engine needs."""
    steps = data_module.steps_per_epoch(len(mnist.y_train), options.global_batch_size)
    rate = learning_rate_for(options.learning_rate, distribution.num_replicas_in_sync,
                             options.scale_learning_rate, warmup_steps=int(options.warmup_epochs * steps))
    with distribution.scope():
        model = build_model(rate, jit_compile=options.jit_compile if engine == "fit" else False)
    store = None
    if options.checkpoint_dir is not None:
        run_config = {"seed": options.seed, "global_batch_size": options.global_batch_size,
                      "data": mnist.provenance(), "model": model_signature(model)}
        store = CheckpointStore(options.checkpoint_dir, model, run_config)
    position = store.restore() if store else RunPosition()
    if position.path and not callable(rate):
        # The checkpoint restored the rate it was saved with: train on with this run's (e.g. a smaller one
        # after the run diverged).
        model.optimizer.learning_rate = rate
    log = MetricsLog(options.checkpoint_dir,
                     last_checkpoint=(lambda: store.latest_checkpoint) if store else lambda: None)
    log.resume(position.global_step)
    return TrainingContext(
        model, distribution, mnist, options.epochs, options.global_batch_size, options.seed, position, log,
        store, options.save_every_steps, options.log_every_steps or max(1, steps // 100),
        min(options.steps_per_execution or LOOP_STEPS_PER_EXECUTION, steps), options.verbose,
        options.jit_compile, options.callbacks,
    )


def _train(context, engine, checkpoint_dir):
    """Train the missing epochs with ``engine``; return (samples, seconds, the message it printed)."""
    position, epochs = context.position, context.epochs
    if position.epoch >= epochs:
        message = (f"Already trained {position.epoch}/{epochs} epochs in {checkpoint_dir}; nothing to do "
                   "(raise epochs to train more).")
        samples, seconds = 0, 0.0
    else:
        if position.path and context.verbose:
            print(f"Resuming from {position.path}: epoch {position.epoch + 1}, "
                  f"step {position.step_in_epoch} of {context.steps_per_epoch}.", flush=True)
        if engine == "loop":
            stop = loop.AgreedStop(context.strategy)
            samples, seconds = loop.train_epochs(context, callbacks_for(context, stop.requested), stop)
        else:
            samples, seconds = _train_with_fit(context, callbacks_for(context))
        message = f"Trained epochs {position.epoch + 1}..{epochs} of {epochs} in {seconds:.1f} s."
    if context.verbose:
        print(message, flush=True)
    return samples, seconds, message


def callbacks_for(context, requested_signal=interrupt.requested_signal):
    """The Keras callbacks of ``standard_callbacks`` for a training context."""
    return standard_callbacks(context.log, context.store, context.steps_per_epoch, context.global_batch_size,
                              context.log_every_steps, context.save_every_steps, requested_signal,
                              context.callbacks)


def _train_with_fit(context, callbacks):
    """Train the remaining epochs with ``model.fit``; return (samples trained, seconds)."""
    steps = context.steps_per_epoch
    samples, seconds = 0, 0.0
    for first, last, skip_batches in context.segments():
        for callback in callbacks:
            callback.step_offset = skip_batches
        dataset = data_module.train_dataset(
            context.data.x_train, context.data.y_train, context.global_batch_size,
            context.seed, first, last, skip_batches,
        )
        start = time.perf_counter()
        context.model.fit(
            dataset,
            epochs=last,
            initial_epoch=first,
            steps_per_epoch=steps - skip_batches,
            validation_data=context.validation_dataset(),
            callbacks=callbacks,
            shuffle=False,  # the dataset is already shuffled by (seed, epoch)
            verbose=context.verbose,
        )
        seconds += time.perf_counter() - start
        samples += ((last - first) * steps - skip_batches) * context.global_batch_size
    return samples, seconds
