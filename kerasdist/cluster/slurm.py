"""Slurm: the cluster of an ``srun`` job step as a ``ClusterTask``, and an ``sbatch`` script to start one.

Every task of ``srun kerasdist worker`` reads the variables Slurm sets for it;
TensorFlow's ``SlurmClusterResolver`` turns them into host:port addresses
(task 0 is worker 0, the chief). The TF_CONFIG path takes it from there
(``kerasdist.cluster.roles.run_worker`` sets TF_CONFIG from the ``ClusterTask``).
"""

import os
import shlex
import subprocess

from kerasdist.cluster.config import ClusterTask
from kerasdist.cluster.ports import check_port_free
from kerasdist.engines.options import check_worker_options
from kerasdist.errors import KerasdistError

# What srun sets for each task and SlurmClusterResolver reads.
STEP_VARIABLES = ("SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_STEP_NODELIST", "SLURM_STEP_TASKS_PER_NODE")
# Ports come in blocks of PORT_BLOCK (one per task on a node), below Linux's ephemeral ports (32768-60999)
# so that no outgoing connection holds them; the job id picks the block.
FIRST_PORT = 15000
PORT_BLOCK = 64
PORT_BLOCKS = 265


def in_slurm_step(environ=None):
    """True when this process is a task of a Slurm job step (``srun`` sets ``SLURM_PROCID``)."""
    return "SLURM_PROCID" in (os.environ if environ is None else environ)


def default_port_base(job_id):
    """The first worker port of a job: the same on every task, different for most concurrent jobs.

    Example:
        >>> default_port_base(4242)
        15128
    """
    return FIRST_PORT + (int(job_id) % PORT_BLOCKS) * PORT_BLOCK


def slurm_task(port_base=None, environ=None):
    """This task's place in the cluster of its Slurm job step.

    ``tf.distribute.cluster_resolver.SlurmClusterResolver`` expands
    ``SLURM_STEP_NODELIST`` (e.g. ``node[01-04]``) and
    ``SLURM_STEP_TASKS_PER_NODE`` (e.g. ``2(x4)``) into one "host:port" per
    task, ports ``port_base``, ``port_base + 1``, ... on each node, and gives
    task ``SLURM_PROCID`` its place: every task is a "worker", task 0 the chief.
    GPUs stay as Slurm bound them (``--gpus-per-task`` sets
    ``CUDA_VISIBLE_DEVICES``): the resolver's own GPU assignment needs
    ``nvidia-smi`` and at least one GPU per task, and would override Slurm's.

    Args:
        port_base: the first port on each node; None derives it from ``SLURM_JOB_ID``.
        environ: the environment to read (default ``os.environ``).

    Returns:
        A ``ClusterTask`` of job "worker".

    Raises:
        KerasdistError: outside a Slurm job step, or with a variable that is
            missing or malformed, or with this task's port in use.

    Example:
        >>> environ = {"SLURM_JOB_ID": "4242", "SLURM_PROCID": "1", "SLURM_STEP_NUM_TASKS": "2",
        ...            "SLURM_STEP_NODELIST": "node[1-2]", "SLURM_STEP_TASKS_PER_NODE": "1(x2)"}
        >>> task = slurm_task(environ=environ)
        >>> task.cluster, task.name
        ({'worker': ['node1:15128', 'node2:15128']}, 'worker 1')
    """
    environ = os.environ if environ is None else environ
    job_id, port_base, num_tasks = _checked_step(environ, port_base)
    cluster, (task_type, task_index) = _resolve_cluster(environ, port_base, num_tasks)
    task = ClusterTask(cluster, task_type, task_index)
    _check_task_host(task, environ)
    host, _, port = task.address.rpartition(":")
    try:
        check_port_free(host, port)
    except KerasdistError:
        raise KerasdistError(
            f"port {port} on {host} (Slurm job {job_id}'s port base {port_base} + this task's place on the "
            "node) is already in use; pass another --slurm-port-base"
        ) from None
    return task


def slurm_process(port_base=None, environ=None, timeout_s=30):
    """``(coordinator "host:port", process count, process index)`` of this task, for the JAX engine.

    The coordinator is the first node of the step (as ``scontrol show
    hostnames`` expands ``SLURM_STEP_NODELIST``) at the job's port base; the
    count and index are ``SLURM_STEP_NUM_TASKS`` and ``SLURM_PROCID``. No
    TensorFlow is loaded.

    Raises:
        KerasdistError: outside a Slurm step, or if scontrol cannot expand the node list in ``timeout_s``.

    Example:
        >>> slurm_process(environ={"SLURM_JOB_ID": "4242", "SLURM_PROCID": "1", "SLURM_STEP_NUM_TASKS": "2",
        ...     "SLURM_STEP_NODELIST": "node01", "SLURM_STEP_TASKS_PER_NODE": "2"})  # doctest: +SKIP
        ('node01:15128', 2, 1)
    """
    environ = os.environ if environ is None else environ
    _, port_base, num_tasks = _checked_step(environ, port_base)
    nodelist = environ["SLURM_STEP_NODELIST"]
    try:
        hosts = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True,
                               timeout=timeout_s, check=True).stdout.split()
    except (OSError, subprocess.SubprocessError) as error:
        raise KerasdistError(
            f"scontrol cannot expand the Slurm node list ({type(error).__name__}). "
            f"Received: SLURM_STEP_NODELIST={nodelist}; run under srun on a Slurm node") from None
    if not hosts:
        raise KerasdistError(f"the Slurm node list names no host. Received: SLURM_STEP_NODELIST={nodelist}")
    return f"{hosts[0]}:{port_base}", num_tasks, _integer(environ, "SLURM_PROCID")


def _checked_step(environ, port_base):
    """``(job id, port base, tasks)`` of the step, checked (no TensorFlow needed)."""
    missing = [name for name in ("SLURM_JOB_ID",) + STEP_VARIABLES if not environ.get(name)]
    if missing:
        raise KerasdistError(
            f"--cluster slurm needs the variables srun sets for each task; {', '.join(missing)} "
            f"{'is' if len(missing) == 1 else 'are'} not set. Run it as `srun kerasdist worker ...` "
            "inside an sbatch or salloc allocation (see `kerasdist slurm-script`), or use --cluster tf_config"
        )
    job_id = _integer(environ, "SLURM_JOB_ID")
    rank, num_tasks = _integer(environ, "SLURM_PROCID"), _integer(environ, "SLURM_STEP_NUM_TASKS")
    if not 0 <= rank < num_tasks:
        raise KerasdistError(
            f"SLURM_PROCID must be 0..{num_tasks - 1} for SLURM_STEP_NUM_TASKS={num_tasks}. Received: {rank}"
        )
    port_base = default_port_base(job_id) if port_base is None else port_base
    if not 1024 <= port_base <= 65535 - PORT_BLOCK:
        raise KerasdistError(f"the Slurm port base must be 1024..{65535 - PORT_BLOCK}. Received: {port_base}")
    return job_id, port_base, num_tasks


def _resolve_cluster(environ, port_base, num_tasks):
    """``(cluster dict, (task type, task index))`` from TensorFlow's ``SlurmClusterResolver``."""
    from kerasdist.startup import import_tensorflow_quietly

    import_tensorflow_quietly()  # here: the sbatch script and the checks before need no TensorFlow
    import tensorflow as tf

    saved = {name: os.environ.get(name) for name in STEP_VARIABLES}
    os.environ.update({name: environ[name] for name in STEP_VARIABLES})  # the resolver reads os.environ
    try:
        # The resolver gives each task on a node a port and a GPU "slot": a slot per task, no GPUs to set.
        resolver = tf.distribute.cluster_resolver.SlurmClusterResolver(
            port_base=port_base, gpus_per_node=num_tasks, gpus_per_task=1, auto_set_gpu=False
        )
        return resolver.cluster_spec().as_dict(), resolver.get_task_info()
    except (RuntimeError, ValueError) as error:
        reason = " ".join(str(error).split()).rstrip(".")
        raise KerasdistError(
            f"the Slurm step environment does not describe a cluster ({reason}). "
            f"Received: {', '.join(f'{name}={environ[name]}' for name in STEP_VARIABLES)}"
        ) from None
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _integer(environ, name):
    try:
        return int(environ[name])
    except ValueError:
        raise KerasdistError(f"{name} must be a whole number. Received: {environ[name]!r}") from None


def _check_task_host(task, environ):
    # The resolver places tasks on the nodes in sorted order (block distribution); srun may do otherwise.
    node = environ.get("SLURMD_NODENAME")
    host = task.address.rpartition(":")[0]
    if node and node != host:
        raise KerasdistError(
            f"Slurm task {environ['SLURM_PROCID']} runs on {node}, but the cluster puts it on {host}: "
            "TensorFlow's Slurm resolver expects block distribution over nodes in sorted order. "
            f"Received: SLURM_STEP_NODELIST={environ['SLURM_STEP_NODELIST']}; "
            "run srun with --distribution=block"
        )


def sbatch_script(nodes=1, tasks_per_node=2, gpus_per_task=0, cpus_per_task=1, time_limit="00:30:00",
                  job_name="kerasdist", partition=None, epochs=3, global_batch_size=64, data="auto", seed=0,
                  checkpoint_dir="checkpoints", kerasdist="kerasdist", extra_arguments=(),
                  backend="tensorflow", requeue=False, save_every_steps=None):
    """A commented ``sbatch`` script that trains with one ``kerasdist worker`` per Slurm task.

    Args:
        nodes, tasks_per_node, gpus_per_task, cpus_per_task: the allocation
            (each task is one worker; GPUs per task 0 for CPU-only nodes).
        time_limit: the job's time limit, as sbatch takes it (e.g. "00:30:00").
        job_name: the job's name; output goes to ``JOB_NAME-JOBID.out``.
        partition: the partition, or None to leave a commented placeholder.
        epochs, global_batch_size, data, seed: the training options.
        checkpoint_dir: where the chief writes checkpoints (on a filesystem every node sees).
        kerasdist: the command that runs kerasdist on the nodes.
        extra_arguments: more ``kerasdist worker`` options, e.g. ``["--collective-timeout-s", "60"]``.
        backend: "tensorflow" (MultiWorkerMirroredStrategy and kerasdist's loop) or "jax"
            (``keras.distribution`` and ``fit()``, one JAX process per task).
        requeue: let Slurm requeue the job after a preemption or node failure; it resumes.
        save_every_steps: also checkpoint every N steps, so a preempted job loses at most N steps.

    Returns:
        The script text.

    Raises:
        KerasdistError: for counts below 1 (GPUs below 0), or a global batch
            that the workers cannot split evenly.

    Example:
        >>> print(sbatch_script(nodes=2, tasks_per_node=1, gpus_per_task=1))  # doctest: +SKIP
    """
    counts = dict(nodes=nodes, tasks_per_node=tasks_per_node, gpus_per_task=gpus_per_task,
                  cpus_per_task=cpus_per_task, epochs=epochs, global_batch_size=global_batch_size)
    for name, value in counts.items():
        minimum = 0 if name == "gpus_per_task" else 1
        if not isinstance(value, int) or value < minimum:
            raise KerasdistError(f"{name} must be a whole number >= {minimum}. Received: {name}={value!r}")
    workers = nodes * tasks_per_node
    check_worker_options(1, global_batch_size, workers)
    gpu_line = ""
    if gpus_per_task:
        gpu_line = f"#SBATCH --gpus-per-task={gpus_per_task}  # Slurm sets CUDA_VISIBLE_DEVICES per task\n"
    partition_line = f"#SBATCH --partition={partition}"
    if partition is None:
        partition_line = "##SBATCH --partition=NAME  # your cluster's"
    worker = [*shlex.split(kerasdist), "worker", "--cluster", "slurm", "--epochs", str(epochs),
              "--global-batch-size", str(global_batch_size), "--data", data, "--seed", str(seed),
              *(["--backend", backend] if backend != "tensorflow" else []),
              *(["--save-every-steps", str(save_every_steps)] if save_every_steps else []),
              *map(str, extra_arguments)]
    engine = ("JAX processes under keras.distribution's DataParallel, one per Slurm task\n# "
              f"({workers} here); process 0 coordinates and writes the checkpoints."
              if backend == "jax" else
              f"MultiWorkerMirroredStrategy, one worker per Slurm task ({workers} here); task 0 is the "
              "chief.")
    if backend == "jax":
        writer_note = ("# Process 0 writes checkpoints and the metrics log here: use a filesystem every\n"
                       "# node sees (home or project space, not a node's /tmp). Every process resumes\n"
                       "# from the newest checkpoint there.")
        network_note = ("# One JAX process per task. They meet at a coordinator on the first node, on a\n"
                        "# port chosen from the job id (--slurm-port-base PORT picks another), and\n"
                        "# all-reduce with gloo (CPUs) or NCCL (GPUs): keep them on the cluster's private\n"
                        "# network. A requeue or scancel sends SIGTERM: every task stops after its step\n"
                        "# and process 0 saves there. Each task prints its final weight digest.")
    else:
        writer_note = ("# The chief writes checkpoints and the metrics log here: use a filesystem every\n"
                       "# node sees (home or project space, not a node's /tmp). The other workers copy\n"
                       "# what they need from it to resume.")
        network_note = ("# One worker per task. Workers talk over gRPC on ports chosen from the job id\n"
                        "# (the same on every task; --slurm-port-base PORT picks others): keep them on\n"
                        "# the cluster's private network. Each task prints its final weight digest.")
    requeue_lines = ""
    if requeue:
        requeue_lines = ("#SBATCH --requeue                  # preempted or its node failed: Slurm queues it "
                         "again, and it resumes\n#SBATCH --open-mode=append         # a requeued run adds "
                         "to the same output file\n")
    command = shlex.join(worker) + ' --checkpoint-dir "$CHECKPOINT_DIR"'
    return f"""#!/bin/bash
# kerasdist on Slurm: synchronous data-parallel training of the MNIST MLP with
# {engine}
# Edit the #SBATCH lines for your cluster (partition, account, time), then submit:
#   sbatch THIS_FILE
#SBATCH --job-name={job_name}
#SBATCH --nodes={nodes}
#SBATCH --ntasks-per-node={tasks_per_node}
#SBATCH --cpus-per-task={cpus_per_task}
{gpu_line}#SBATCH --time={time_limit}
#SBATCH --output=%x-%j.out         # JOB_NAME-JOBID.out in the directory you submit from
{requeue_lines}{partition_line}
set -euo pipefail

# Load the environment kerasdist is installed in, e.g.:
#   source ~/venvs/kerasdist/bin/activate

{writer_note}
CHECKPOINT_DIR={shlex.quote(checkpoint_dir)}
mkdir -p "$CHECKPOINT_DIR"

# Resume: --epochs is the total target, so running this script again continues
# at the next epoch after the last checkpoint (after a time limit, a failure, or
# to train longer after raising --epochs). Queue the continuation right away with
#   sbatch --dependency=afterany:$SLURM_JOB_ID THIS_FILE
# (it starts when this job ends, however it ends).

{network_note}
srun {command}
"""
