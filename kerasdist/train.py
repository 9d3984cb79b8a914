"""``run_training``: make or restore the model, train to a target epoch, return a plain result record."""

import dataclasses
import time

import keras
import tensorflow as tf

from kerasdist import data as data_module
from kerasdist import interrupt, loop, probes, validation
from kerasdist.callbacks import CheckpointSaver, MetricsRecorder, StopOnSignal
from kerasdist.checkpoint import CheckpointStore, RunPosition
from kerasdist.devices import configure_replicas
from kerasdist.divergence import DivergenceGuard
from kerasdist.errors import KerasdistError
from kerasdist.metrics_log import MetricsLog
from kerasdist.model import ACCURACY_METRIC, build_model, learning_rate_for, model_signature
from kerasdist.strategy import make_strategy


@dataclasses.dataclass
class TrainingResult:
    """The result record of one ``run_training`` call (``to_dict()`` is what ``--json`` prints).

    ``history`` covers every epoch trained so far in the checkpoint directory,
    resumed ones included; ``steps`` holds the per-step log the same way.
    """

    replicas: int
    strategy: str
    engine: str
    epochs: int
    initial_epoch: int
    epochs_run: int
    history: dict
    steps: dict
    test: dict
    wall_time_s: float
    samples_per_s: float
    data_source: dict
    checkpoint: str
    global_batch_size: int
    per_replica_batch_size: int
    learning_rate: float
    seed: int
    resumed_from_step: int
    message: str
    model: keras.Model = dataclasses.field(default=None, repr=False, compare=False)

    def to_dict(self):
        """The record as plain JSON-able values (without the model)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "model"}


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

    @property
    def steps_per_epoch(self):
        return data_module.steps_per_epoch(len(self.data.y_train), self.global_batch_size)

    def validation_dataset(self):
        return data_module.eval_dataset(self.data.x_val, self.data.y_val, self.global_batch_size)


def run_training(
    replicas=1,
    epochs=3,
    global_batch_size=64,
    checkpoint_dir=None,
    data="auto",
    seed=0,
    engine="fit",
    strategy=None,
    learning_rate=1e-3,
    scale_learning_rate=False,
    warmup_epochs=0,
    jit_compile=False,
    save_every_steps=None,
    log_every_steps=None,
    steps_per_execution=50,
    deterministic=True,
    collective_timeout_s=None,
    verbose=1,
):
    """Train the seed MLP with ``replicas`` synchronous replicas up to ``epochs`` epochs in all.

    With a ``checkpoint_dir``, a rerun resumes: it restores weights, optimizer
    state and position from the newest valid checkpoint and trains only the
    epochs still missing (none if the target is reached, which it says).
    Epoch k always sees the same data order, so an interrupted and resumed run
    ends with the same weights as an uninterrupted one.

    Args:
        replicas: replicas on this machine (see ``configure_replicas``).
        epochs: the total number of epochs to reach (not "epochs to add").
        global_batch_size: samples per step across all replicas; must be a
            multiple of ``replicas``.
        checkpoint_dir: where checkpoints and the metrics log go; None: no checkpoints.
        data: "auto", "keras", "sample", an .npz path, or a ``MnistData``.
        seed: seeds weights, validation split and data order.
        engine: "fit" (Keras ``model.fit``), "loop" (kerasdist's own loop,
            required for multi_worker), or "auto": the engine ``kerasdist doctor``
            found for the strategy (see ``probes.engine_for``).
        strategy: strategy name; default "mirrored" for replicas > 1, else "default".
        learning_rate: Adam's learning rate for one replica.
        scale_learning_rate: multiply the learning rate by ``replicas`` (linear scaling rule).
        warmup_epochs: epochs of linear learning-rate warm-up.
        jit_compile: compile steps with XLA.
        save_every_steps: also checkpoint every N steps within an epoch.
        log_every_steps: log step metrics every N steps (default: ~100 records per epoch).
        steps_per_execution: steps per ``tf.function`` call for the loop engine.
        deterministic: seed everything and turn on TensorFlow's deterministic ops.
        collective_timeout_s: multi_worker only: how long an all-reduce may wait
            for a missing worker before failing (None: forever).
        verbose: 0 silent, 1 progress bar, 2 one line per epoch.

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
    options = validation.training_options(
        replicas, epochs, global_batch_size, checkpoint_dir, data, seed, engine, strategy, learning_rate,
        warmup_epochs, save_every_steps, log_every_steps, steps_per_execution, collective_timeout_s, verbose,
        jit_compile, scale_learning_rate, deterministic,
    )
    replicas, epochs, global_batch_size = options["replicas"], options["epochs"], options["global_batch_size"]
    seed, learning_rate, warmup_epochs = options["seed"], options["learning_rate"], options["warmup_epochs"]
    save_every_steps, log_every_steps = options["save_every_steps"], options["log_every_steps"]
    steps_per_execution, verbose = options["steps_per_execution"], options["verbose"]
    strategy_name = strategy or ("mirrored" if replicas > 1 else "default")
    engine, engine_reason = probes.engine_for(strategy_name) if engine == "auto" else (engine, None)
    if strategy_name not in ("default", "multi_worker"):
        configure_replicas(replicas)
    if isinstance(data, data_module.MnistData):
        mnist = data_module.checked(data)
    else:
        mnist = data_module.load_mnist(data, seed, verbose > 0)
    if deterministic:
        keras.utils.set_random_seed(seed)
        tf.config.experimental.enable_op_determinism()
    distribution = make_strategy(strategy_name, replicas, collective_timeout_s, verbose=verbose > 0)
    interrupt.rearm()  # a multi-worker cluster's runtime has just taken SIGTERM over
    if engine_reason and verbose:
        print(f"Engine {engine}: {engine_reason}.", flush=True)
    if strategy_name != "multi_worker" and distribution.num_replicas_in_sync != replicas:
        raise KerasdistError(
            f"strategy {strategy_name!r} runs {distribution.num_replicas_in_sync} replica(s), not "
            f"{replicas}; use strategy 'mirrored' for several replicas"
        )
    steps = data_module.steps_per_epoch(len(mnist.y_train), global_batch_size)
    rate = learning_rate_for(learning_rate, distribution.num_replicas_in_sync, scale_learning_rate,
                             warmup_steps=int(warmup_epochs * steps))
    with distribution.scope():
        model = build_model(rate, jit_compile=jit_compile if engine == "fit" else False)
    store = None
    if checkpoint_dir is not None:
        run_config = {
            "seed": seed,
            "global_batch_size": global_batch_size,
            "data": mnist.provenance(),
            "model": model_signature(model),
        }
        store = CheckpointStore(checkpoint_dir, model, run_config)
    position = store.restore() if store else RunPosition()
    if position.path and not callable(rate):
        # The checkpoint restored the rate it was saved with: train on with this run's (e.g. a smaller one
        # after the run diverged).
        model.optimizer.learning_rate = rate
    log = MetricsLog(checkpoint_dir)
    log.resume(position.global_step)
    context = TrainingContext(
        model, distribution, mnist, epochs, global_batch_size, seed, position, log, store,
        save_every_steps, log_every_steps or max(1, steps // 100), min(steps_per_execution, steps), verbose,
        jit_compile,
    )
    if position.epoch >= epochs:
        message = (f"Already trained {position.epoch}/{epochs} epochs in {checkpoint_dir}; nothing to do "
                   "(raise epochs to train more).")
        samples, seconds = 0, 0.0
    else:
        if position.path and verbose:
            print(f"Resuming from {position.path}: epoch {position.epoch + 1}, "
                  f"step {position.step_in_epoch} of {steps}.", flush=True)
        if engine == "loop":
            samples, seconds = loop.train_epochs(context)
        else:
            samples, seconds = _train_with_fit(context)
        message = f"Trained epochs {position.epoch + 1}..{epochs} of {epochs} in {seconds:.1f} s."
    if verbose:
        print(message, flush=True)
    test_dataset = data_module.eval_dataset(mnist.x_test, mnist.y_test, global_batch_size)
    if engine == "loop":  # Keras evaluate() meets keras-team/keras#20585 under multi_worker too
        test = loop.evaluate(model, distribution, test_dataset, global_batch_size)
    else:
        test = model.evaluate(test_dataset, verbose=0, return_dict=True)
    return TrainingResult(
        replicas=distribution.num_replicas_in_sync,
        strategy=strategy_name,
        engine=engine,
        epochs=epochs,
        initial_epoch=position.epoch,
        epochs_run=max(0, epochs - position.epoch),
        history=log.history(),
        steps=log.steps(),
        test={"loss": float(test["loss"]), "accuracy": float(test[ACCURACY_METRIC])},
        wall_time_s=seconds,
        samples_per_s=samples / seconds if seconds > 0 else None,
        data_source=mnist.provenance(),
        checkpoint=(store.manager.latest_checkpoint if store else None),
        global_batch_size=global_batch_size,
        per_replica_batch_size=global_batch_size // distribution.num_replicas_in_sync,
        learning_rate=learning_rate * (distribution.num_replicas_in_sync if scale_learning_rate else 1),
        seed=seed,
        resumed_from_step=position.global_step,
        message=message,
        model=model,
    )


def _train_with_fit(context):
    """Train the remaining epochs with ``model.fit``; return (samples trained, seconds)."""
    steps = context.steps_per_epoch
    recorder = MetricsRecorder(context.log, steps, context.global_batch_size, context.log_every_steps)
    # The guard first: it raises before a bad step is logged or saved.
    callbacks = [DivergenceGuard(), recorder]
    if context.store:
        callbacks.append(CheckpointSaver(context.store, steps, context.save_every_steps))
    callbacks.append(StopOnSignal(context.store, steps))  # last: after the step's log record and checkpoint
    epoch, skip = context.position.epoch, context.position.step_in_epoch
    samples, seconds = 0, 0.0
    # A mid-epoch checkpoint: finish that epoch from the next batch, then train whole epochs.
    segments = [(epoch, epoch + 1, skip), (epoch + 1, context.epochs, 0)] if skip else [(epoch, context.epochs, 0)]
    for first, last, skip_batches in segments:
        if first >= last:
            continue
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
