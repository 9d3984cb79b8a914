"""Chief, worker and evaluator: what one task of a multi-worker cluster does."""

import glob
import os
import shutil
import tempfile
import time

import tensorflow as tf

from kerasdist import data as data_module
from kerasdist.cluster.config import TRAINING_ROLES, tf_config
from kerasdist.cluster.peers import DEFAULT_PEER_TIMEOUT_S, describe_peers, resolve_hosts
from kerasdist.cluster.ports import check_port_free
from kerasdist.cluster.watchdog import PeerWatchdog
from kerasdist.engines import loop
from kerasdist.engines.options import DEFAULT_COLLECTIVE_TIMEOUT_S, check_worker_options
from kerasdist.engines.train import run_training
from kerasdist.errors import ClusterError, KerasdistError
from kerasdist.model import ACCURACY_METRIC, build_model, model_signature, weights_digest
from kerasdist.state.checkpoint import CheckpointStore

# What a non-chief worker copies from the chief's directory to resume from the same checkpoint.
_RESUME_FILES = ("checkpoint", "ckpt-*", "run_config.json", "metrics.jsonl")
# The errors a collective raises when a peer is gone, stuck or unreachable.
_PEER_ERRORS = (tf.errors.UnavailableError, tf.errors.DeadlineExceededError, tf.errors.CancelledError,
                tf.errors.AbortedError, tf.errors.InternalError)


def run_worker(task, training_options, collective_timeout_s=DEFAULT_COLLECTIVE_TIMEOUT_S, verbose=2,
               peer_timeout_s=DEFAULT_PEER_TIMEOUT_S):
    """Train as one chief/worker task of a multi-worker cluster with the loop engine.

    All workers restore the same checkpoint and train in lockstep
    (``MultiWorkerMirroredStrategy``: one all-reduce per step). Every worker
    saves at the same steps, since saving may involve collectives; the chief
    saves into ``checkpoint_dir``, the others into a temporary copy of it that
    is deleted at the end.

    Args:
        task: this process's ``ClusterTask`` (a chief or worker).
        training_options: ``run_training`` keyword arguments; ``strategy`` and
            ``engine`` are set here ("multi_worker", "loop").
        collective_timeout_s: an all-reduce waiting longer than this for a
            peer fails, so a stuck peer cannot hang the others.
        verbose: as for ``run_training``.
        peer_timeout_s: the longest wait for a peer: resolving the cluster's
            hosts, joining the cluster, and any stretch of training without
            progress (a stopped, hung or unreachable peer); then the process
            ends with one line naming the peers (``watchdog.PeerWatchdog``).

    Returns:
        The result record (dict) with ``task``, ``is_chief`` and ``weights_sha256`` added.

    Raises:
        KerasdistError: for invalid options or a host that does not resolve (before any training).
        ClusterError: if a peer stops or cannot be reached during training.
        kerasdist.engines.interrupt.TrainingInterrupted: after SIGINT/SIGTERM (every worker saved at the same
            step).

    Example:
        >>> task = parse_tf_config(os.environ["TF_CONFIG"])  # doctest: +SKIP
        >>> options = {"epochs": 2, "data": "sample", "checkpoint_dir": "ckpt"}
        >>> record = run_worker(task, options)                # doctest: +SKIP
    """
    options = _prepared(task, training_options, peer_timeout_s)
    own_directory = _own_copy(task, options)
    try:
        with PeerWatchdog(task, peer_timeout_s, cleanup=own_directory) as watchdog:
            options.update(collective_timeout_s=collective_timeout_s, verbose=verbose,
                           callbacks=[*options.get("callbacks", ()), watchdog.callback()])
            result = run_training(**options)
            _barrier(result.model.distribute_strategy)
    except _PEER_ERRORS as error:
        raise ClusterError(
            f"{task.name} lost contact with its peers ({type(error).__name__}: {_reason(error)}): "
            f"{describe_peers(task)}. Rerun the same command to resume from the last checkpoint."
        ) from None
    finally:
        if own_directory:
            shutil.rmtree(own_directory, ignore_errors=True)
    digest = weights_digest(result.model.get_weights())
    print(f"Final weights sha256 {digest} ({task.name})", flush=True)
    record = result.to_dict()
    if own_directory:
        record["checkpoint"] = None  # the copy is gone; the chief's record names the checkpoint
    record.update(task=task.name, is_chief=task.is_chief, weights_sha256=digest)
    return record


def _own_copy(task, options):
    """A non-chief worker trains in a temporary copy of the chief's directory; return it (or None)."""
    chief_directory = options.get("checkpoint_dir")
    if chief_directory is None or task.is_chief:
        return None
    own_directory = tempfile.mkdtemp(prefix=f"kerasdist-{task.task_type}{task.task_index}-")
    _copy_resume_files(chief_directory, own_directory)
    options["checkpoint_dir"] = own_directory
    return own_directory


def _prepared(task, training_options, peer_timeout_s):
    """Check the task and its options, resolve its peers, set TF_CONFIG; return ``run_training``'s options."""
    if task.task_type not in TRAINING_ROLES:
        raise KerasdistError(f"run_worker trains chief or worker tasks. Received: {task.name}")
    options = dict(training_options, strategy="multi_worker", engine=training_options.get("engine", "loop"))
    check_worker_options(options.get("replicas", 1), options.get("global_batch_size", 64), task.num_workers)
    host, _, port = task.address.rpartition(":")
    check_port_free(host, port)
    resolve_hosts(task, peer_timeout_s)
    # MultiWorkerMirroredStrategy reads TF_CONFIG; the evaluator is not part of its all-reduce.
    os.environ["TF_CONFIG"] = tf_config(task.training_cluster(), task.task_type, task.task_index)
    return options


def _reason(error):
    """The line of a TensorFlow error that says what happened (not "Graph execution error" or a traceback)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    skipped = ("Graph execution error", "Detected at node", "File ", "[[", "Additional GRPC", ":UNKNOWN")
    useful = [index for index, line in enumerate(lines) if not line.startswith(skipped)]
    if not useful:
        return lines[0][:200] if lines else "no details"
    first = useful[0]
    # "The following tasks are unhealthy:" reads better with the task on the next line.
    reason = " ".join(lines[first:first + 2]) if lines[first].endswith(":") else lines[first]
    return reason[:200]


def _barrier(strategy):
    """A last all-reduce, so that no worker exits while others still need the chief's coordination service."""
    all_reduce = tf.function(
        lambda: strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(tf.ones, args=([],)), axis=None)
    )
    all_reduce()


def _copy_resume_files(source, destination):
    """Copy the chief's checkpoints, run config and metrics log (what a resume reads) if they exist."""
    for pattern in _RESUME_FILES:
        for path in glob.glob(os.path.join(source, pattern)):
            if not os.path.isfile(path):
                continue  # e.g. the "ckpt-N_temp" folder of a save the chief did not finish
            try:
                shutil.copy2(path, destination)
            except FileNotFoundError:
                pass  # rotated away by the chief meanwhile; the "checkpoint" index names only kept ones


def run_evaluator(checkpoint_dir, epochs, data="auto", seed=0, global_batch_size=64, poll_interval_s=2.0,
                  idle_timeout_s=600, verbose=True):
    """Evaluate each new checkpoint the chief writes, until the one that completes ``epochs``.

    The evaluator (the guide's third role) takes no part in training: it
    restores the newest checkpoint in ``checkpoint_dir`` whenever one appears
    and reports validation loss and accuracy, so training never waits for it.

    Args:
        checkpoint_dir: the chief's checkpoint directory.
        epochs: the training target; the evaluator ends after a checkpoint at that epoch.
        data, seed, global_batch_size: as given to the workers (they fix the validation split).
        poll_interval_s: seconds between looks for a new checkpoint.
        idle_timeout_s: give up after this long without a new checkpoint.
        verbose: print a line per evaluation.

    Returns:
        A record: ``{"task": "evaluator 0", "evaluations": [...], "final": {...}}``.

    Raises:
        KerasdistError: for a missing directory argument or a checkpoint of another run.
        ClusterError: if no new checkpoint appears for ``idle_timeout_s``.

    Example:
        >>> record = run_evaluator("ckpt", epochs=2, data="sample")  # doctest: +SKIP
        evaluator: ckpt-52 (epoch 1/2): val_loss 0.4099, val_sparse_categorical_accuracy 0.8591
    """
    if checkpoint_dir is None:
        raise KerasdistError("the evaluator needs the chief's --checkpoint-dir. Received: none")
    mnist = data if isinstance(data, data_module.MnistData) else data_module.load_mnist(data, seed, verbose)
    model = build_model()
    run_config = {"seed": seed, "global_batch_size": global_batch_size, "data": mnist.provenance(),
                  "model": model_signature(model)}
    store = CheckpointStore(checkpoint_dir, model, run_config, exclusive=False)
    strategy = tf.distribute.get_strategy()
    steps = loop.DistributedSteps(model, strategy, global_batch_size, steps_per_execution=1)
    validation = strategy.experimental_distribute_dataset(
        data_module.eval_dataset(mnist.x_val, mnist.y_val, global_batch_size)
    )
    evaluations, last_change = [], time.monotonic()
    while not evaluations or evaluations[-1]["epoch"] < epochs:
        latest = tf.train.latest_checkpoint(checkpoint_dir)
        is_new = latest and (not evaluations or latest != evaluations[-1]["checkpoint"])
        if is_new and _restore(store, latest):
            evaluations.append(_evaluate_checkpoint(store, steps, validation, latest))
            last_change = time.monotonic()
            if verbose:
                print(_evaluation_line(evaluations[-1], epochs), flush=True)
        elif time.monotonic() - last_change > idle_timeout_s:
            raise ClusterError(
                f"evaluator: no new checkpoint in {checkpoint_dir} for {idle_timeout_s:.0f} s; "
                "is training running? (it ends after the checkpoint of the last epoch)"
            )
        else:
            time.sleep(poll_interval_s)
    return {"task": "evaluator 0", "evaluations": evaluations, "final": evaluations[-1]}


def _restore(store, prefix):
    """Restore ``prefix`` into the store's model; False if it was rotated away while being read."""
    try:
        store.checkpoint.restore(prefix).expect_partial()
    except (tf.errors.OpError, ValueError):
        return False
    return True


def _evaluate_checkpoint(store, steps, validation, prefix):
    metrics = steps.evaluate(validation)
    return {
        "checkpoint": prefix,
        "epoch": int(store.epoch.numpy()),
        "step_in_epoch": int(store.step_in_epoch.numpy()),
        "global_step": int(store.global_step.numpy()),
        "val_loss": metrics["loss"],
        f"val_{ACCURACY_METRIC}": metrics[ACCURACY_METRIC],
    }


def _evaluation_line(evaluation, epochs):
    position = f"epoch {evaluation['epoch']}/{epochs}"
    if evaluation["step_in_epoch"]:
        position = f"epoch {evaluation['epoch'] + 1}/{epochs}, step {evaluation['step_in_epoch']}"
    accuracy = f"val_{ACCURACY_METRIC}"
    return (f"evaluator: {os.path.basename(evaluation['checkpoint'])} ({position}): "
            f"val_loss {evaluation['val_loss']:.4f}, {accuracy} {evaluation[accuracy]:.4f}")
