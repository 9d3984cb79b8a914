"""TF_CONFIG building and checking, a local multi-worker launcher, and the chief/worker/evaluator roles."""

import dataclasses
import errno
import glob
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

from kerasdist.errors import KerasdistError

TRAINING_ROLES = ("chief", "worker")
ROLES = TRAINING_ROLES + ("evaluator",)
LOOPBACK = "127.0.0.1"
DEFAULT_COLLECTIVE_TIMEOUT_S = 30
EXIT_WORKER_FAILED = 1
# Files a non-chief worker copies from the chief's directory to resume from the same checkpoint.
_RESUME_FILES = ("checkpoint", "ckpt-*", "run_config.json", "metrics.jsonl")


class ClusterError(RuntimeError):
    """A cluster failure at run time (a peer stopped, no checkpoint came); the CLI exits with status 1."""


@dataclasses.dataclass
class ClusterTask:
    """This process's place in a cluster, as described by ``TF_CONFIG``.

    Attributes:
        cluster: job name ("chief", "worker", "evaluator") -> list of "host:port".
        task_type: this task's job name.
        task_index: this task's index in its job.
    """

    cluster: dict
    task_type: str
    task_index: int

    @property
    def name(self):
        """Like "worker 1": how logs and errors name this task."""
        return f"{self.task_type} {self.task_index}"

    @property
    def is_chief(self):
        """The chief task, or worker 0 when the cluster has no chief job."""
        if "chief" in self.cluster:
            return self.task_type == "chief"
        return self.task_type == "worker" and self.task_index == 0

    @property
    def num_workers(self):
        """Tasks that train (chief and workers)."""
        return sum(len(self.cluster.get(role, [])) for role in TRAINING_ROLES)

    @property
    def address(self):
        return self.cluster[self.task_type][self.task_index]

    def training_cluster(self):
        """The cluster without the evaluator, which takes no part in the all-reduce."""
        return {job: addresses for job, addresses in self.cluster.items() if job in TRAINING_ROLES}


def parse_tf_config(text):
    """Check a ``TF_CONFIG`` value and return the ``ClusterTask`` it describes.

    Args:
        text: the JSON text, e.g. ``os.environ.get("TF_CONFIG")``.

    Returns:
        A ``ClusterTask``.

    Raises:
        KerasdistError: with one line saying what is wrong: unset, not JSON,
            missing "cluster" or "task", an unknown or missing role, a bad
            address, or an index out of range.

    Example:
        >>> task = parse_tf_config('{"cluster": {"worker": ["127.0.0.1:2222", "127.0.0.1:2223"]},'
        ...                        ' "task": {"type": "worker", "index": 1}}')
        >>> task.name, task.is_chief, task.num_workers
        ('worker 1', False, 2)
    """
    if not text or not text.strip():
        raise KerasdistError(
            "TF_CONFIG is not set; a worker needs it to find its cluster, e.g. "
            '{"cluster": {"worker": ["127.0.0.1:2222", "127.0.0.1:2223"]}, "task": {"type": "worker", "index": 0}}'
        )
    try:
        config = json.loads(text)
    except json.JSONDecodeError as error:
        raise KerasdistError(f"TF_CONFIG is not valid JSON ({error}). Received: {_shorten(text)}") from None
    if not isinstance(config, dict) or not isinstance(config.get("cluster"), dict) or not isinstance(
        config.get("task"), dict
    ):
        raise KerasdistError(
            f'TF_CONFIG must be an object with "cluster" and "task" objects. Received: {_shorten(text)}'
        )
    cluster = _checked_cluster(config["cluster"])
    task_type, task_index = config["task"].get("type"), config["task"].get("index", 0)
    if task_type not in ROLES:
        raise KerasdistError(f"TF_CONFIG task type must be one of {', '.join(ROLES)}. Received: {task_type!r}")
    if task_type not in cluster:
        raise KerasdistError(
            f'TF_CONFIG task type {task_type!r} has no "{task_type}" list in "cluster". '
            f"Received: cluster roles {', '.join(cluster)}"
        )
    if not isinstance(task_index, int) or isinstance(task_index, bool) or not 0 <= task_index < len(
        cluster[task_type]
    ):
        raise KerasdistError(
            f"TF_CONFIG task index must be 0..{len(cluster[task_type]) - 1} for the "
            f"{len(cluster[task_type])} {task_type} task(s). Received: index={task_index!r}"
        )
    return ClusterTask(cluster, task_type, task_index)


def _checked_cluster(cluster):
    if "ps" in cluster:
        raise KerasdistError(
            'TF_CONFIG has a "ps" role: parameter servers belong to ParameterServerStrategy; '
            "synchronous all-reduce training takes chief, worker and evaluator roles only"
        )
    unknown = [job for job in cluster if job not in ROLES]
    if unknown:
        raise KerasdistError(f"TF_CONFIG cluster roles must be among {', '.join(ROLES)}. Received: {unknown}")
    if not any(cluster.get(role) for role in TRAINING_ROLES):
        raise KerasdistError(
            f'TF_CONFIG cluster needs a "worker" (or "chief") list of host:port addresses. '
            f"Received: roles {', '.join(cluster) or 'none'}"
        )
    for job, addresses in cluster.items():
        if not isinstance(addresses, list) or not addresses:
            raise KerasdistError(f'TF_CONFIG cluster "{job}" must be a non-empty list. Received: {addresses!r}')
        for address in addresses:
            host, _, port = str(address).rpartition(":")
            if not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise KerasdistError(
                    f'TF_CONFIG cluster "{job}" addresses must look like host:port. Received: {address!r}'
                )
    for job in ("chief", "evaluator"):
        if len(cluster.get(job, [])) > 1:
            raise KerasdistError(f'TF_CONFIG cluster may hold one "{job}". Received: {cluster[job]}')
    return cluster


def _shorten(text, limit=120):
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def tf_config(cluster, task_type, task_index):
    """The ``TF_CONFIG`` JSON text for one task of ``cluster``.

    Example:
        >>> tf_config({"worker": ["127.0.0.1:2222"]}, "worker", 0)
        '{"cluster": {"worker": ["127.0.0.1:2222"]}, "task": {"type": "worker", "index": 0}}'
    """
    return json.dumps({"cluster": cluster, "task": {"type": task_type, "index": task_index}})


def local_cluster(num_workers, ports=None, evaluator=False):
    """A cluster of ``num_workers`` workers (and optionally an evaluator) on 127.0.0.1.

    Args:
        num_workers: how many training workers (worker 0 is the chief).
        ports: the ports to use, one per worker (then one for the evaluator);
            None picks free ones.
        evaluator: add an "evaluator" task.

    Returns:
        The ``cluster`` dict of a ``TF_CONFIG``.

    Raises:
        KerasdistError: for a bad count, the wrong number of ports, or a port in use.

    Example:
        >>> local_cluster(2, ports=[23456, 23457])  # doctest: +SKIP
        {'worker': ['127.0.0.1:23456', '127.0.0.1:23457']}
    """
    if not isinstance(num_workers, int) or num_workers < 1:
        raise KerasdistError(f"workers must be an integer >= 1. Received: workers={num_workers!r}")
    needed = num_workers + (1 if evaluator else 0)
    if ports is None:
        ports = free_ports(needed)
    elif len(ports) != needed:
        raise KerasdistError(
            f"give one port per task: {needed} for {num_workers} worker(s)"
            f"{' and the evaluator' if evaluator else ''}. Received: ports={list(ports)}"
        )
    for port in ports:
        check_port_free(LOOPBACK, port)
    cluster = {"worker": [f"{LOOPBACK}:{port}" for port in ports[:num_workers]]}
    if evaluator:
        cluster["evaluator"] = [f"{LOOPBACK}:{ports[num_workers]}"]
    return cluster


def free_ports(count):
    """``count`` distinct TCP ports that are free on 127.0.0.1 right now."""
    sockets = []
    try:
        for _ in range(count):
            probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            probe.bind((LOOPBACK, 0))
            sockets.append(probe)
        return [probe.getsockname()[1] for probe in sockets]
    finally:
        for probe in sockets:
            probe.close()


def check_port_free(host, port):
    """Raise ``KerasdistError`` if ``host:port`` is taken on this machine (other hosts are not checked)."""
    probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        probe.bind((host, int(port)))
    except OSError as error:
        if error.errno == errno.EADDRINUSE:
            raise KerasdistError(
                f"port {port} on {host} is already in use (another worker or program holds it); "
                "choose other ports or let kerasdist pick free ones"
            ) from None
        # Not an address of this machine (a remote worker's entry): nothing to check here.
    finally:
        probe.close()


def weights_digest(model):
    """SHA-256 of the model's weights, concatenated in order: equal digests mean identical weights."""
    digest = hashlib.sha256()
    for weights in model.get_weights():
        digest.update(weights.tobytes())
    return digest.hexdigest()


def run_worker(task, training_options, collective_timeout_s=DEFAULT_COLLECTIVE_TIMEOUT_S, verbose=2):
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

    Returns:
        The result record (dict) with ``task``, ``is_chief`` and ``weights_sha256`` added.

    Raises:
        KerasdistError: for invalid options (before any training).
        ClusterError: if a peer stops or cannot be reached during training.

    Example:
        >>> task = parse_tf_config(os.environ["TF_CONFIG"])                       # doctest: +SKIP
        >>> record = run_worker(task, {"epochs": 2, "data": "sample", "checkpoint_dir": "ckpt"})  # doctest: +SKIP
    """
    import tensorflow as tf

    from kerasdist.train import run_training

    if task.task_type not in TRAINING_ROLES:
        raise KerasdistError(f"run_worker trains chief or worker tasks. Received: {task.name}")
    options = dict(training_options, strategy="multi_worker", engine=training_options.get("engine", "loop"))
    if options.get("replicas", 1) != 1:
        raise KerasdistError(
            "replicas does not apply to workers: each worker trains one replica on its CPU (or one per GPU). "
            f"Received: replicas={options['replicas']}"
        )
    global_batch_size = options.get("global_batch_size", 64)
    if global_batch_size % task.num_workers:
        raise KerasdistError(
            f"global_batch_size must be divisible by the {task.num_workers} workers. "
            f"Received: global_batch_size={global_batch_size}"
        )
    host, _, port = task.address.rpartition(":")
    check_port_free(host, port)
    # MultiWorkerMirroredStrategy reads TF_CONFIG; the evaluator is not part of its all-reduce.
    os.environ["TF_CONFIG"] = tf_config(task.training_cluster(), task.task_type, task.task_index)
    chief_directory = options.get("checkpoint_dir")
    own_directory = None
    if chief_directory is not None and not task.is_chief:
        own_directory = tempfile.mkdtemp(prefix=f"kerasdist-{task.task_type}{task.task_index}-")
        _copy_resume_files(chief_directory, own_directory)
        options["checkpoint_dir"] = own_directory
    try:
        result = run_training(**options, collective_timeout_s=collective_timeout_s, verbose=verbose)
    except (tf.errors.UnavailableError, tf.errors.DeadlineExceededError, tf.errors.CancelledError,
            tf.errors.AbortedError, tf.errors.InternalError) as error:
        raise ClusterError(
            f"{task.name} lost contact with the other workers ({type(error).__name__}: {_reason(error)}); "
            "another worker probably stopped. Rerun the same command to resume from the last checkpoint."
        ) from None
        _barrier(result.model.distribute_strategy)
    finally:
        if own_directory:
            shutil.rmtree(own_directory, ignore_errors=True)
    digest = weights_digest(result.model)
    print(f"Final weights sha256 {digest} ({task.name})", flush=True)
    record = result.to_dict()
    if own_directory:
        record["checkpoint"] = None  # the copy is gone; the chief's record names the checkpoint
    record.update(task=task.name, is_chief=task.is_chief, weights_sha256=digest)
    return record


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
    import tensorflow as tf

    strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(tf.ones, args=([],)), axis=None)


def _copy_resume_files(source, destination):
    """Copy the chief's checkpoints, run config and metrics log (what a resume reads) if they exist."""
    for pattern in _RESUME_FILES:
        for path in glob.glob(os.path.join(source, pattern)):
            try:
                shutil.copy2(path, destination)
            except FileNotFoundError:
                pass  # rotated away by the chief meanwhile; the "checkpoint" index names only kept ones


def run_evaluator(checkpoint_dir, epochs, data="auto", seed=0, global_batch_size=64, poll_interval_s=2.0,
                  idle_timeout_s=600, verbose=True):
    """Evaluate each new checkpoint the chief writes, until the one that completes ``epochs``.

    The evaluator (the seed's third role) takes no part in training: it
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
    import tensorflow as tf

    from kerasdist import data as data_module
    from kerasdist import loop
    from kerasdist.checkpoint import CheckpointStore
    from kerasdist.model import ACCURACY_METRIC, build_model, model_signature

    if checkpoint_dir is None:
        raise KerasdistError("the evaluator needs the chief's --checkpoint-dir. Received: none")
    mnist = data if isinstance(data, data_module.MnistData) else data_module.load_mnist(data, seed, verbose)
    strategy = tf.distribute.get_strategy()
    model = build_model()
    run_config = {"seed": seed, "global_batch_size": global_batch_size, "data": mnist.provenance(),
                  "model": model_signature(model)}
    store = CheckpointStore(checkpoint_dir, model, run_config)
    validation = data_module.eval_dataset(mnist.x_val, mnist.y_val, global_batch_size)
    evaluations, evaluated, last_change = [], None, time.monotonic()
    while True:
        latest = tf.train.latest_checkpoint(checkpoint_dir)
        if latest and latest != evaluated:
            try:
                store.checkpoint.restore(latest).expect_partial()
            except (tf.errors.OpError, ValueError):
                time.sleep(poll_interval_s)  # rotated away while reading; a newer one is coming
                continue
            evaluated, last_change = latest, time.monotonic()
            metrics = loop.evaluate(model, strategy, validation, global_batch_size)
            evaluation = {
                "checkpoint": latest,
                "epoch": int(store.epoch.numpy()),
                "step_in_epoch": int(store.step_in_epoch.numpy()),
                "global_step": int(store.global_step.numpy()),
                "val_loss": metrics["loss"],
                f"val_{ACCURACY_METRIC}": metrics[ACCURACY_METRIC],
            }
            evaluations.append(evaluation)
            if verbose:
                position = f"epoch {evaluation['epoch']}/{epochs}"
                if evaluation["step_in_epoch"]:
                    position = f"epoch {evaluation['epoch'] + 1}/{epochs}, step {evaluation['step_in_epoch']}"
                print(f"evaluator: {os.path.basename(latest)} ({position}): val_loss {metrics['loss']:.4f}, "
                      f"val_{ACCURACY_METRIC} {metrics[ACCURACY_METRIC]:.4f}", flush=True)
            if evaluation["epoch"] >= epochs:
                return {"task": "evaluator 0", "evaluations": evaluations, "final": evaluation}
        elif time.monotonic() - last_change > idle_timeout_s:
            raise ClusterError(
                f"evaluator: no new checkpoint in {checkpoint_dir} for {idle_timeout_s:.0f} s; "
                "is training running? (it ends after the checkpoint of the last epoch)"
            )
        time.sleep(poll_interval_s)


def launch(num_workers, worker_arguments, evaluator=False, ports=None, evaluator_grace_s=120):
    """Run ``num_workers`` local workers (and an evaluator) as subprocesses; stream their output.

    Each task runs ``python -m kerasdist worker`` with its own ``TF_CONFIG``
    on 127.0.0.1; every output line is printed with a ``[worker i]`` prefix.

    Args:
        num_workers: how many workers (worker 0 is the chief).
        worker_arguments: command-line options for ``kerasdist worker``.
        evaluator: also run an evaluator task.
        ports: one port per task, or None for free ones.
        evaluator_grace_s: how long the evaluator may run on after the workers end.

    Returns:
        ``(exit status, records)``: the worst task's status (0 if all
        succeeded) and each task's result record by name (None if it wrote none).

    Example:
        >>> status, records = launch(2, ["--epochs", "2", "--data", "sample"])  # doctest: +SKIP
    """
    cluster = local_cluster(num_workers, ports, evaluator)
    names = [f"worker {index}" for index in range(num_workers)] + (["evaluator 0"] if evaluator else [])
    record_directory = tempfile.mkdtemp(prefix="kerasdist-launch-")
    processes, threads, print_lock = {}, [], threading.Lock()
    try:
        for name in names:
            task_type, index = name.split()
            record_file = os.path.join(record_directory, f"{task_type}-{index}.json")
            command = [sys.executable, "-m", "kerasdist", "worker", *worker_arguments, "--record-file", record_file]
            environment = dict(os.environ, TF_CONFIG=tf_config(cluster, task_type, int(index)),
                               PYTHONUNBUFFERED="1")
            process = subprocess.Popen(command, env=environment, stdout=subprocess.PIPE,
                                       stderr=subprocess.STDOUT, text=True, bufsize=1)
            processes[name] = (process, record_file)
            thread = threading.Thread(target=_stream, args=(process.stdout, f"[{name}] ", print_lock), daemon=True)
            thread.start()
            threads.append(thread)
            _print(print_lock, f"[launch] {name}: pid {process.pid}, {cluster[task_type][int(index)]}")
        statuses = _wait(processes, names, evaluator, evaluator_grace_s, print_lock)
    except BaseException:
        _stop([process for process, _ in processes.values()])
        raise
    finally:
        for thread in threads:
            thread.join(timeout=5)
    records = {name: _read_record(record_file) for name, (_, record_file) in processes.items()}
    shutil.rmtree(record_directory, ignore_errors=True)
    return max(statuses.values()), records


def _wait(processes, names, evaluator, evaluator_grace_s, print_lock):
    """Wait for the workers, then give the evaluator its grace period; return each task's status."""
    statuses = {}
    for name in names:
        process, _ = processes[name]
        if name.startswith("evaluator"):
            failed = any(statuses.values())
            try:
                process.wait(timeout=1 if failed else evaluator_grace_s)
            except subprocess.TimeoutExpired:
                _stop([process])
                _print(print_lock, "[launch] stopped the evaluator: training ended without its final checkpoint")
        else:
            process.wait()
        statuses[name] = _exit_status(process.returncode)
        if statuses[name]:
            _print(print_lock, f"[launch] {name} exited with status {_describe(process.returncode)}")
    return statuses


def _exit_status(returncode):
    """A process's status as a shell reports it (killed by signal N -> 128 + N)."""
    return 128 - returncode if returncode < 0 else returncode


def _describe(returncode):
    if returncode < 0:
        return f"{128 - returncode} (killed by {signal.Signals(-returncode).name})"
    return str(returncode)


def _stream(stream, prefix, print_lock):
    for line in stream:
        _print(print_lock, prefix + line.rstrip("\n"))


def _print(print_lock, line):
    with print_lock:
        print(line, flush=True)


def _stop(processes, grace_s=5):
    """Terminate processes, then kill those still running after ``grace_s``."""
    for process in processes:
        if process.poll() is None:
            process.terminate()
    deadline = time.monotonic() + grace_s
    for process in processes:
        try:
            process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _read_record(path):
    try:
        with open(path) as stream:
            return json.load(stream)
    except (OSError, json.JSONDecodeError):
        return None


def _training_argv(args, add_training_arguments):
    """Turn parsed training options back into command-line options (to forward them to workers)."""
    import argparse

    parser = argparse.ArgumentParser(add_help=False)
    add_training_arguments(parser)
    argv = []
    for action in parser._actions:
        value = getattr(args, action.dest)
        flag = action.option_strings[0]
        if action.nargs == 0:  # a switch such as --jit-compile
            argv += [flag] if value else []
        elif value is not None:
            argv += [flag, str(value)]
    return argv


def add_commands(commands, add_training_arguments):
    """Add the ``worker`` and ``launch`` subcommands (each sets ``handler``)."""
    worker = commands.add_parser(
        "worker", help="run one task of a multi-worker cluster described by TF_CONFIG",
        description="Run the chief, a worker or the evaluator named by TF_CONFIG. Workers train with "
                    "MultiWorkerMirroredStrategy and kerasdist's loop; worker 0 (or the chief) writes "
                    "checkpoints and the metrics log to --checkpoint-dir.",
    )
    add_training_arguments(worker)
    _add_cluster_arguments(worker)
    worker.add_argument("--record-file", default=None, help="also write the result record to this JSON file")
    worker.add_argument("--json", action="store_true", help="print the result record as the last line")
    worker.set_defaults(handler=_run_worker_command, engine="loop")

    launch_parser = commands.add_parser(
        "launch", help="run N local workers (and an evaluator) on 127.0.0.1",
        description="Start N workers on free loopback ports, stream their output with a [worker i] prefix, "
                    "and exit with the worst worker's status. Rerun the same command to resume.",
    )
    launch_parser.add_argument("--workers", type=int, default=2, help="number of workers (default 2)")
    launch_parser.add_argument("--evaluator", action="store_true",
                               help="also run an evaluator that evaluates each new checkpoint")
    launch_parser.add_argument("--ports", default=None,
                               help="comma-separated ports, one per task (default: free ports)")
    add_training_arguments(launch_parser)
    _add_cluster_arguments(launch_parser)
    launch_parser.add_argument("--json", action="store_true",
                               help="print the chief's result record as the last line")
    launch_parser.set_defaults(
        handler=lambda args: _run_launch_command(args, add_training_arguments), engine="loop"
    )


def _add_cluster_arguments(parser):
    parser.add_argument("--collective-timeout-s", type=float, default=DEFAULT_COLLECTIVE_TIMEOUT_S,
                        help="fail an all-reduce that waits longer than this for a peer "
                             f"(default {DEFAULT_COLLECTIVE_TIMEOUT_S})")
    parser.add_argument("--evaluator-idle-timeout-s", type=float, default=600,
                        help="the evaluator gives up after this long without a new checkpoint (default 600)")


def _run_worker_command(args):
    from kerasdist.checkpoint import atomic_write_text
    from kerasdist.cli import training_options

    task = parse_tf_config(os.environ.get("TF_CONFIG"))
    if args.strategy not in (None, "multi_worker"):
        raise KerasdistError(f"workers train with strategy multi_worker. Received: --strategy {args.strategy}")
    try:
        if task.task_type == "evaluator":
            record = run_evaluator(args.checkpoint_dir, args.epochs, args.data, args.seed, args.global_batch_size,
                                   idle_timeout_s=args.evaluator_idle_timeout_s)
        else:
            record = run_worker(task, training_options(args), args.collective_timeout_s)
    except ClusterError as error:
        print(f"kerasdist: error: {error}", file=sys.stderr, flush=True)
        raise SystemExit(EXIT_WORKER_FAILED) from None
    if args.record_file:
        atomic_write_text(args.record_file, json.dumps(record))
    return record


def _run_launch_command(args, add_training_arguments):
    try:
        ports = [int(part) for part in args.ports.split(",")] if args.ports else None
    except ValueError:
        raise KerasdistError(f"ports must be comma-separated numbers. Received: --ports {args.ports}") from None
    if args.evaluator and args.checkpoint_dir is None:
        raise KerasdistError("--evaluator needs --checkpoint-dir: it evaluates the checkpoints the chief writes")
    worker_arguments = _training_argv(args, add_training_arguments) + [
        "--collective-timeout-s", str(args.collective_timeout_s),
        "--evaluator-idle-timeout-s", str(args.evaluator_idle_timeout_s),
    ]
    status, records = launch(args.workers, worker_arguments, args.evaluator, ports)
    workers = [{"task": name, "weights_sha256": (record or {}).get("weights_sha256")}
               for name, record in records.items() if name.startswith("worker")]
    if status:
        print(f"kerasdist: error: a task failed (worst exit status {status}); rerun the same command to "
              "resume from the last checkpoint", file=sys.stderr, flush=True)
        raise SystemExit(status)
    digests = {worker["weights_sha256"] for worker in workers}
    print(f"[launch] {len(workers)} worker(s) finished; final weights "
          f"{'identical' if len(digests) == 1 else 'DIFFER'} (sha256 {', '.join(sorted(digests))[:64]})", flush=True)
    record = dict(records["worker 0"], workers=workers)
    if args.evaluator:
        record["evaluator"] = records.get("evaluator 0")
    return record
