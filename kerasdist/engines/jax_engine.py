"""The JAX engine: the course's MLP trained with Keras' ``fit()`` on JAX, under ``keras.distribution``.

The same data sources, global batch, metrics log, result record and
checkpoint guarantees as the TensorFlow path (``kerasdist.engines.train``), the way
Keras 3 recommends beyond one machine (its multi-worker ``fit()`` on
TensorFlow is broken, keras-team/keras#20585):

- N replicas in one process are N JAX devices (GPUs, or CPU devices made with
  ``--xla_force_host_platform_device_count``) under
  ``keras.distribution.DataParallel``: each step's global batch is split
  across them and the gradients are all-reduced;
- several processes join through ``keras.distribution.initialize`` (JAX's
  gloo collectives between CPU processes, NCCL between GPUs); each feeds its
  own share of every global batch;
- with ``steps_per_execution`` > 1 in one process, kerasdist's own calls
  (``kerasdist.engines.jax_steps``: a jitted ``lax.scan`` of Keras'
  ``train_step`` over device-resident data) replace ``fit()``, with the same
  callbacks, checkpoints and stops (the record's ``engine`` says "loop");
- checkpoints (``kerasdist.state.jax_checkpoint``) hold weights, optimizer state and
  the position, mid-epoch included, written by process 0; a run killed at any
  step and run again ends with the same weights as one never interrupted.

Epoch k's order is ``kerasdist.data.epoch_order`` (NumPy), a function of
(seed, epoch) only. Validation and test metrics are computed by a local copy
of the model on every process (the same numbers everywhere).

Example:
    >>> from kerasdist.engines.backends import run_training
    >>> result = run_training(backend="jax", replicas=2, epochs=1, data="sample")  # doctest: +SKIP
"""

import argparse
import dataclasses
import json
import os
import re
import signal
import sys
import time

import numpy as np

from kerasdist import data as data_module
from kerasdist.engines import interrupt
from kerasdist.errors import KerasdistError
from kerasdist.state.run_state import RunPosition

STRATEGY_NAME = "DataParallel"
ENGINE_NAME = "fit"
SCANNED_ENGINE_NAME = "loop"  # one process, several steps per call: kerasdist's own calls (jax_steps)
# Validation and test in batches of up to 10,000: MNIST's 10,000 validation digits are one compiled call (a
# batch of 64 would be 157 calls from Python), and their activations take about 20 MB.
EVALUATION_BATCH_SIZE = 10_000
_DEVICE_COUNT_FLAG = "--xla_force_host_platform_device_count"


@dataclasses.dataclass(frozen=True)
class Process:
    """This process's place among several: the coordinator (process 0's "host:port"), count and index."""

    coordinator: str
    count: int
    index: int


def import_keras_on_jax(devices=None, check_devices=True):
    """Keras on JAX in this process; with ``devices``, that many JAX devices on a CPU-only machine.

    Call it before anything imports JAX: JAX fixes its CPU device count when
    it starts. GPUs are used as they are (the flag only affects the CPU).
    ``check_devices=False`` leaves JAX's backend unstarted (a process that
    joins a cluster must call ``initialize`` first).

    Raises:
        KerasdistError: if Keras is loaded on another backend, or JAX already
            started with fewer devices.
    """
    from kerasdist.startup import use_backend

    use_backend("jax")
    if devices and "jax" not in sys.modules:
        flags = re.sub(rf"{_DEVICE_COUNT_FLAG}=\d+\s*", "", os.environ.get("XLA_FLAGS", "")).strip()
        os.environ["XLA_FLAGS"] = f"{flags} {_DEVICE_COUNT_FLAG}={devices}".strip()
    import jax
    import keras

    if devices and check_devices and jax.local_device_count() < devices:
        raise KerasdistError(
            f"JAX started in this process with {jax.local_device_count()} device(s) and keeps them. "
            f"Received: replicas={devices}; start a new process (JAX makes the CPU devices when it starts)"
        )
    return keras


def on_cpu():
    """True when JAX's devices are CPU devices: replicas share the same cores (call after JAX starts)."""
    import jax

    return jax.default_backend() == "cpu"


def run_training(options, process=None):
    """Train on JAX up to ``options.epochs`` epochs in all; resume from a checkpoint if there is one.

    Args:
        options: checked ``TrainingOptions`` (``backend="jax"``).
        process: this process's ``Process`` when several train together; None for one process.

    Returns:
        A ``kerasdist.result.TrainingResult`` (``strategy`` "DataParallel", ``engine`` "fit", or "loop"
        for kerasdist's own calls of several steps in one process).

    Raises:
        KerasdistError: for invalid options, data or checkpoints, before anything is written.

    Example:
        >>> from kerasdist.engines.options import TrainingOptions
        >>> options = TrainingOptions(backend="jax", replicas=2, epochs=1, data="sample")
        >>> run_training(options).test["accuracy"] > 0.8  # doctest: +SKIP
        True
    """
    # Several processes: one CPU device each (or their GPUs).
    keras = import_keras_on_jax(options.replicas, check_devices=process is None)
    import jax

    if process is not None:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")  # all-reduce between CPU processes
        # JAX's distributed runtime takes SIGTERM over here (its preemption notifier): the processes then
        # agree on the step to stop at (_agreed_stop).
        keras.distribution.initialize(job_addresses=process.coordinator, num_processes=process.count,
                                      process_id=process.index)
    mnist = _data(options)
    if options.deterministic:
        keras.utils.set_random_seed(options.seed)
    devices = jax.devices() if process is not None else jax.devices()[:options.replicas]
    run = _JaxRun(keras, options, mnist, devices, process)
    samples, seconds, message = run.train()
    test = run.evaluate(mnist.x_test, mnist.y_test)
    return run.result(samples, seconds, message, test)


def _data(options):
    if isinstance(options.data, data_module.MnistData):
        return data_module.checked(options.data)
    return data_module.load_mnist(options.data, options.seed, options.verbose > 0)


class _JaxRun:
    """One run's model, distribution, checkpoint store, log and callbacks."""

    def __init__(self, keras, options, mnist, devices, process):
        from kerasdist.engines.callbacks import standard_callbacks
        from kerasdist.engines.jax_steps import ScannedSteps
        from kerasdist.model import build_model, learning_rate_for, model_signature
        from kerasdist.state.jax_checkpoint import JaxCheckpointStore
        from kerasdist.state.metrics_log import MetricsLog

        self.keras, self.options, self.mnist, self.process = keras, options, mnist, process
        self.index = process.index if process else 0
        self.count = process.count if process else 1
        self.replicas = len(devices)
        self.steps = data_module.steps_per_epoch(len(mnist.y_train), options.global_batch_size)
        if options.global_batch_size % self.replicas:
            raise KerasdistError(f"global_batch_size must be divisible by the {self.replicas} devices. "
                                 f"Received: global_batch_size={options.global_batch_size}")
        rate = learning_rate_for(options.learning_rate, self.replicas, options.scale_learning_rate,
                                 warmup_steps=int(options.warmup_epochs * self.steps))
        self.steps_per_execution = min(options.steps_per_execution or 1, self.steps)
        # One process, several steps per call: kerasdist's own calls (jax_steps); else Keras' fit().
        scanned = process is None and self.steps_per_execution > 1
        self.distribution = keras.distribution.DataParallel(devices=devices, auto_shard_dataset=False)
        with self.distribution.scope():
            self.model = build_model(rate, jit_compile=True,
                                     steps_per_execution=1 if scanned else self.steps_per_execution)
            self.scanned = ScannedSteps(self.model, self.distribution, mnist.x_train, mnist.y_train,
                                        options.global_batch_size) if scanned else None
        self.evaluator = build_model(rate, jit_compile=True)  # a local copy: no distribution, every process
        self.store = None
        if options.checkpoint_dir is not None:
            run_config = {"seed": options.seed, "global_batch_size": options.global_batch_size,
                          "data": mnist.provenance(), "model": model_signature(self.model), "backend": "jax"}
            self.store = JaxCheckpointStore(options.checkpoint_dir, self.model, run_config,
                                            writer=self.index == 0)
        self.position = self.store.restore() if self.store else RunPosition()
        writes_log = self.index == 0 and options.checkpoint_dir is not None
        self.log = MetricsLog(options.checkpoint_dir if writes_log else None,
                              last_checkpoint=lambda: self.store.latest_checkpoint if self.store else None)
        self.log.resume(self.position.global_step)
        self.at_call_end = True  # the model's variables hold the weights of the step the callbacks see
        self.callbacks = [_validation(keras, self), *standard_callbacks(
            self.log, self.store, self.steps, options.global_batch_size,
            options.log_every_steps or max(1, self.steps // 100), options.save_every_steps,
            requested_signal=lambda: interrupt.requested_signal() if self.at_call_end else None,
            extra=options.callbacks, stop=_agreed_stop(self.store, self.steps) if process else None)]

    def train(self):
        """Train the missing epochs, one ``fit()`` call each; return (samples, seconds, message)."""
        options, position = self.options, self.position
        if position.epoch >= options.epochs:
            message = (f"Already trained {position.epoch}/{options.epochs} epochs in "
                       f"{options.checkpoint_dir}; nothing to do (raise epochs to train more).")
            return self._said(0, 0.0, message)
        if position.path and options.verbose:
            print(f"Resuming from {position.path}: epoch {position.epoch + 1}, "
                  f"step {position.step_in_epoch} of {self.steps}.", flush=True)
        batch, local = options.global_batch_size, options.global_batch_size // self.count
        samples, seconds = 0, 0.0
        for epoch in range(position.epoch, options.epochs):
            skip = position.step_in_epoch if epoch == position.epoch else 0
            order = data_module.epoch_order(len(self.mnist.y_train), batch, options.seed, epoch, skip)
            mine = order.reshape(-1, batch)[:, self.index * local:(self.index + 1) * local].ravel()
            for callback in self.callbacks:
                if hasattr(callback, "step_offset"):
                    callback.step_offset = skip
            start = time.perf_counter()
            with self.distribution.scope():
                if self.scanned:
                    self._train_scanned(epoch, skip, mine)
                else:
                    verbose = options.verbose if self.index == 0 else 0
                    self.model.fit(self.mnist.x_train[mine], self.mnist.y_train[mine], batch_size=local,
                                   epochs=epoch + 1, initial_epoch=epoch, shuffle=False,
                                   callbacks=self.callbacks, verbose=verbose)
            seconds += time.perf_counter() - start
            samples += len(order)
        return self._said(samples, seconds, f"Trained epochs {position.epoch + 1}..{options.epochs} of "
                                            f"{options.epochs} in {seconds:.1f} s.")

    def _train_scanned(self, epoch, skip, order):
        """Epoch ``epoch`` from step ``skip`` in calls of ``jax_steps.ScannedSteps``, driving the callbacks as
        ``fit`` does (a progress bar, one batch event per step); a call ends at a checkpoint step, and a stop
        is seen only at a call's end, where the model's variables hold that step's weights."""
        from kerasdist.engines.callbacks import next_call_end

        options, steps = self.options, self.steps
        callbacks = self.keras.callbacks.CallbackList(
            self.callbacks, add_progbar=options.verbose != 0, model=self.model, verbose=options.verbose,
            epochs=options.epochs, steps=steps - skip)
        callbacks.on_train_begin()
        callbacks.on_epoch_begin(epoch)
        self.model.reset_metrics()
        state, batches = self.scanned.state(), order.reshape(-1, options.global_batch_size).astype(np.int32)
        step, logs = skip, {}
        while step < steps:
            end = next_call_end(step, steps, self.steps_per_execution, options.save_every_steps)
            self.at_call_end = False
            state, step_logs = self.scanned.run(state, batches[step - skip:end - skip])
            self.scanned.write(state)
            for index in range(end - step):
                self.at_call_end = step + index + 1 == end
                logs = {name: float(values[index]) for name, values in step_logs.items()}
                callbacks.on_train_batch_end(step + index - skip, logs)
            step = end
        callbacks.on_epoch_end(epoch, dict(logs))
        callbacks.on_train_end()

    def _said(self, samples, seconds, message):
        if self.options.verbose:
            print(message, flush=True)
        return samples, seconds, message

    def host_weights(self):
        """The model's weights as NumPy arrays (this process's copy), in ``model.weights`` order."""
        from kerasdist.state.jax_checkpoint import host_value

        self.model.jax_state_sync()
        return [host_value(variable) for variable in self.model.weights]

    def evaluate(self, x, y):
        """``{"loss", "accuracy"}`` of the current weights on (x, y), by the local copy of the model."""
        from kerasdist.model import ACCURACY_METRIC

        self.evaluator.set_weights(self.host_weights())
        distribution = self.keras.distribution
        training_distribution = distribution.distribution()  # set while fit() runs this from a callback
        distribution.set_distribution(None)
        try:
            metrics = self.evaluator.evaluate(x, y, batch_size=EVALUATION_BATCH_SIZE, verbose=0,
                                              return_dict=True)
        finally:
            distribution.set_distribution(training_distribution)
        return {"loss": float(metrics["loss"]), "accuracy": float(metrics[ACCURACY_METRIC])}

    def result(self, samples, seconds, message, test):
        from kerasdist.result import TrainingResult

        options = self.options
        return TrainingResult(
            **options.recorded(), replicas=self.replicas, strategy=STRATEGY_NAME,
            engine=SCANNED_ENGINE_NAME if self.scanned else ENGINE_NAME,
            initial_epoch=self.position.epoch, epochs_run=max(0, options.epochs - self.position.epoch),
            history=self.log.history(), steps=self.log.steps(), test=test, wall_time_s=seconds,
            samples_per_s=samples / seconds if seconds > 0 else None, data_source=self.mnist.provenance(),
            checkpoint=self.store.latest_checkpoint if self.store else None,
            per_replica_batch_size=options.global_batch_size // self.replicas,
            learning_rate=options.learning_rate * (self.replicas if options.scale_learning_rate else 1),
            resumed_from_step=self.position.global_step, message=message, model=self.model,
        )


def _agreed_stop(store, steps_per_epoch):
    """A ``StopOnSignal`` that stops every process at the same step, the one JAX's preemption sync agrees on.

    A SIGTERM (a requeue, ``scancel``, a time limit) reaches JAX's preemption
    notifier, which tells every process; each calls
    ``reached_preemption_sync_point`` at the end of every call of
    ``fit()`` (a step, or several with steps per execution), numbering the
    calls 1, 2, 3... as JAX's sync needs (it agrees on the highest number
    reported plus one), and all see True at the end of the same call, where
    process 0 saves. A SIGINT (``kerasdist launch`` passes Ctrl-C on) is
    handed to the notifier as a SIGTERM of this process.
    """
    from jax.experimental import multihost_utils

    from kerasdist.engines.callbacks import StopOnSignal

    class AgreedStop(StopOnSignal):
        def __init__(self):
            super().__init__(store, steps_per_epoch, requested_signal=lambda: self.agreed)
            self.agreed = None
            self.notified = False
            self.calls = 0

        def on_train_batch_end(self, batch, logs=None):
            if interrupt.requested_signal() is not None and not self.notified:
                self.notified = True
                os.kill(os.getpid(), signal.SIGTERM)  # to JAX's notifier, which tells every process
            self.calls += 1
            reached = multihost_utils.reached_preemption_sync_point(self.calls)
            self.agreed = (interrupt.requested_signal() or signal.SIGTERM) if reached else None
            super().on_train_batch_end(batch, logs)

    return AgreedStop()


def _validation(keras, run):
    """A callback that adds ``val_loss`` and ``val_<accuracy>`` to each epoch's logs, before the callbacks
    that record them (Keras passes one logs dict along the list)."""
    from kerasdist.model import ACCURACY_METRIC

    class Validation(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            if logs is not None:
                metrics = run.evaluate(run.mnist.x_val, run.mnist.y_val)
                logs.update({"val_loss": metrics["loss"], f"val_{ACCURACY_METRIC}": metrics["accuracy"]})

    return Validation()


def process_of(task):
    """The ``Process`` of a ``ClusterTask`` (from TF_CONFIG): worker 0's address is the coordinator."""
    return Process(coordinator=task.cluster["worker"][0], count=task.num_workers, index=task.task_index)


def run_worker(process, options):
    """Train as one process of a multi-process JAX run; return its result record with its weights' digest.

    Every process restores the same checkpoint and feeds its share of each
    global batch; process 0 writes the checkpoints and the metrics log. JAX
    bounds the waits: joining the coordinator (300 s), and a peer that stops
    answering its heartbeats (about 100 s), end the process with an error.

    Args:
        process: this process's ``Process``.
        options: checked ``TrainingOptions`` with ``backend="jax"``.

    Returns:
        The result record (dict) with ``task``, ``is_chief`` and ``weights_sha256`` added.

    Example:
        >>> options = TrainingOptions(backend="jax", epochs=2, data="sample")                # doctest: +SKIP
        >>> record = run_worker(Process("127.0.0.1:23456", 2, 0), options)                  # doctest: +SKIP
    """
    result = run_training(options, process)  # loads Keras on JAX first
    from kerasdist.model import weights_digest
    from kerasdist.state.jax_checkpoint import host_value

    digest = weights_digest([host_value(variable) for variable in result.model.weights])
    name = f"worker {process.index}"
    print(f"Final weights sha256 {digest} ({name})", flush=True)
    record = result.to_dict()
    if process.index:
        record["checkpoint"] = None  # process 0 writes them; its record names the checkpoint
    record.update(task=name, is_chief=process.index == 0, weights_sha256=digest)
    return record


def gather_check(process, timeout_s=30):
    """Join ``process``'s cluster and gather every process's index with JAX's collectives; return their sum.

    What ``kerasdist doctor`` runs in 2 local processes to see whether
    multi-process training can work here (gloo between CPU processes).
    """
    import jax
    from jax.experimental import multihost_utils

    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(process.coordinator, process.count, process.index,
                               initialization_timeout=int(timeout_s))
    return int(np.sum(multihost_utils.process_allgather(np.array([process.index]))))


def main(argv=None):
    """``python -m kerasdist.engines.jax_engine gather COORDINATOR COUNT INDEX``: print the sum as JSON."""
    parser = argparse.ArgumentParser(prog="python -m kerasdist.engines.jax_engine", description=main.__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    check = commands.add_parser("gather", help="one process of the doctor's collectives check")
    check.add_argument("coordinator")
    check.add_argument("count", type=int)
    check.add_argument("index", type=int)
    arguments = parser.parse_args(argv)
    total = gather_check(Process(arguments.coordinator, arguments.count, arguments.index))
    print(json.dumps({"process": arguments.index, "sum": total}), flush=True)


if __name__ == "__main__":
    main()
