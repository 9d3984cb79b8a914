"""Tests for kerasdist/cluster/slurm.py: the Slurm step environment, the sbatch script, and real jobs on a
single-node Slurm (munged, slurmctld, slurmd) started on 127.0.0.1 in a temporary directory."""

import os
import random
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time

import pytest
import tensorflow as tf

from helpers import kerasdist_command, last_json_line
from kerasdist import cli, cluster
from kerasdist.cluster import slurm

# Four tasks on two nodes, as srun sets them for task 0 of `srun --nodes 2 --ntasks-per-node 2`.
STEP = {"SLURM_JOB_ID": "4242", "SLURM_PROCID": "0", "SLURM_STEP_NUM_TASKS": "4",
        "SLURM_STEP_NODELIST": "node[01-02]", "SLURM_STEP_TASKS_PER_NODE": "2(x2)"}
DIGEST = re.compile(r"Final weights sha256 ([0-9a-f]{64}) \((worker \d)\)")
SLURM_PROGRAMS = ("munged", "slurmctld", "slurmd", "srun", "sbatch", "sinfo", "squeue", "scancel", "scontrol")


def test_slurm_step_becomes_a_cluster_with_task_0_the_chief():
    base, visible_devices = slurm.default_port_base(4242), os.environ.get("CUDA_VISIBLE_DEVICES")
    tasks = [slurm.slurm_task(environ=dict(STEP, SLURM_PROCID=str(rank))) for rank in range(4)]
    assert tasks[0].cluster == {"worker": [f"node01:{base}", f"node01:{base + 1}",
                                           f"node02:{base}", f"node02:{base + 1}"]}
    assert all(task.cluster == tasks[0].cluster for task in tasks)
    assert [task.name for task in tasks] == ["worker 0", "worker 1", "worker 2", "worker 3"]
    assert [task.is_chief for task in tasks] == [True, False, False, False]
    assert os.environ.get("CUDA_VISIBLE_DEVICES") == visible_devices  # GPUs stay as Slurm bound them


def test_ports_come_from_the_job_id_below_the_ephemeral_range_or_from_the_option():
    bases = {slurm.default_port_base(job_id) for job_id in range(1, 5000)}
    assert slurm.default_port_base(4242) == slurm.default_port_base("4242")
    assert len(bases) == slurm.PORT_BLOCKS
    assert min(bases) >= 1024 and max(bases) + slurm.PORT_BLOCK <= 32768
    task = slurm.slurm_task(port_base=23000, environ=dict(STEP, SLURM_PROCID="3"))
    assert task.address == "node02:23001"


@pytest.mark.parametrize("changes, message", [
    ({"SLURM_PROCID": None}, "SLURM_PROCID is not set. Run it as `srun kerasdist worker ...`"),
    ({"SLURM_JOB_ID": "abc"}, "SLURM_JOB_ID must be a whole number. Received: 'abc'"),
    ({"SLURM_PROCID": "4"}, "SLURM_PROCID must be 0..3 for SLURM_STEP_NUM_TASKS=4. Received: 4"),
    ({"SLURM_STEP_NODELIST": "node[01-"}, 'Invalid hostlist format "node[01-"'),
    ({"SLURM_STEP_TASKS_PER_NODE": "2(x"}, 'Invalid tasks-per-node list format "2(x"'),
    ({"SLURM_STEP_NUM_TASKS": "6"}, "Requested 6 tasks but only 4 were assigned"),
    ({"SLURMD_NODENAME": "node02"}, "Slurm task 0 runs on node02, but the cluster puts it on node01"),
])
def test_malformed_slurm_step_exits_2_with_one_line(monkeypatch, capsys, changes, message):
    for name, value in dict(STEP, **changes).items():
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    assert cli.main(["worker", "--cluster", "slurm", "--data", "sample"]) == cli.EXIT_USER_ERROR
    error = capsys.readouterr().err
    assert error.startswith("kerasdist: error: ") and error.count("\n") == 1
    assert message in error


def test_auto_takes_slurm_inside_a_step_and_tf_config_outside(monkeypatch, capsys):
    monkeypatch.setenv("TF_CONFIG", '{"cluster": ')
    for name in STEP:
        monkeypatch.delenv(name, raising=False)
    assert cli.main(["worker", "--data", "sample"]) == cli.EXIT_USER_ERROR
    assert "TF_CONFIG is not valid JSON" in capsys.readouterr().err
    monkeypatch.setenv("SLURM_PROCID", "0")
    assert cli.main(["worker", "--data", "sample"]) == cli.EXIT_USER_ERROR
    assert "SLURM_JOB_ID, SLURM_STEP_NUM_TASKS" in capsys.readouterr().err


def test_worker_outside_slurm_is_one_line_in_a_real_process():
    environment = {name: value for name, value in os.environ.items() if not name.startswith("SLURM_")}
    completed = subprocess.run(kerasdist_command("worker", "--cluster", "slurm", "--data", "sample"),
                               capture_output=True, text=True, env=environment, timeout=120, check=False)
    assert completed.returncode == 2
    assert completed.stderr.strip().splitlines() == [completed.stderr.strip()]
    assert completed.stderr.startswith("kerasdist: error: --cluster slurm needs the variables srun sets")
    assert completed.stdout == ""


def test_slurm_script_is_a_valid_commented_sbatch_script(capsys, tmp_path):
    assert cli.main(["slurm-script", "--nodes", "2", "--tasks-per-node", "1", "--gpus-per-task", "1",
                     "--epochs", "5", "--checkpoint-dir", "/shared/my runs/ckpt"]) == 0
    script = capsys.readouterr().out
    directives = [line.split("#")[1].split()[1] for line in script.splitlines() if line.startswith("#SBATCH")]
    assert directives == ["--job-name=kerasdist", "--nodes=2", "--ntasks-per-node=1", "--cpus-per-task=1",
                          "--gpus-per-task=1", "--time=00:30:00", "--output=%x-%j.out"]
    assert "srun kerasdist worker --cluster slurm --epochs 5 " in script
    assert "CHECKPOINT_DIR='/shared/my runs/ckpt'" in script
    assert "--dependency=afterany" in script
    (tmp_path / "job.sbatch").write_text(script)
    subprocess.run(["bash", "-n", str(tmp_path / "job.sbatch")], check=True, timeout=30)
    assert cli.main(["slurm-script"]) == 0
    assert "--gpus-per-task" not in capsys.readouterr().out  # CPU nodes: no GPU request


def test_slurm_script_in_a_real_process_prints_only_the_script_without_loading_tensorflow():
    # Printing a script needs no TensorFlow: no start-up noise on stderr, and no seconds spent loading it.
    probe = ("import runpy, sys; sys.argv = ['kerasdist', 'slurm-script', '--data', 'sample']\n"
             "try:\n    runpy.run_module('kerasdist', run_name='__main__')\n"
             "finally:\n    print('tensorflow loaded:', 'tensorflow' in sys.modules, file=sys.stderr)")
    completed = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert completed.returncode == 0
    assert completed.stderr == "tensorflow loaded: False\n"
    assert completed.stdout.startswith("#!/bin/bash") and "srun kerasdist worker" in completed.stdout


def test_slurm_options_have_help(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["slurm-script", "--help"])
    assert exit_info.value.code == 0 and "--tasks-per-node" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        cli.main(["worker", "--help"])
    assert "--slurm-port-base" in capsys.readouterr().out


@pytest.mark.parametrize("arguments, message", [
    (["--nodes", "0"], "nodes must be a whole number >= 1. Received: nodes=0"),
    (["--gpus-per-task", "-1"], "gpus_per_task must be a whole number >= 0"),
    (["--tasks-per-node", "3"], "global_batch_size must be divisible by the 3 workers"),
])
def test_slurm_script_bad_input_exits_2_with_one_line(capsys, arguments, message):
    assert cli.main(["slurm-script", *arguments]) == cli.EXIT_USER_ERROR
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1 and message in captured.err


class LocalSlurm:
    """A single-node Slurm on 127.0.0.1: munged, slurmctld and slurmd, every file under ``directory``.

    Example:
        >>> local = LocalSlurm(tmp_path)  # doctest: +SKIP
        >>> local.start()  # doctest: +SKIP
        >>> local.run("srun", "--ntasks", "2", "hostname")  # doctest: +SKIP
        >>> local.stop()  # doctest: +SKIP
    """

    def __init__(self, directory):
        self.directory = str(directory)
        self.daemons = {}
        self.environment = {name: value for name, value in os.environ.items()
                            if not name.startswith("SLURM_") and name != "TF_CONFIG"}
        self.environment.update(SLURM_CONF=self._path("slurm.conf"), PYTHONUNBUFFERED="1")

    def _path(self, *parts):
        return os.path.join(self.directory, *parts)

    def start(self, timeout_s=60):
        for part in ("munge", "state", "spool", "log", "run"):
            os.makedirs(self._path(part), mode=0o700, exist_ok=True)
        os.chmod(self._path("munge"), 0o755)  # clients reach the socket in it
        with open(self._path("munge", "munge.key"), "wb") as key:
            key.write(os.urandom(1024))
        os.chmod(self._path("munge", "munge.key"), 0o400)
        controller_port, node_port = cluster.free_ports(2)
        with open(self._path("slurm.conf"), "w") as conf:
            conf.write(self._slurm_conf(controller_port, node_port))
        open(self._path("plugstack.conf"), "w").close()
        socket_path = self._path("munge", "munge.socket")
        self._daemon("munged", "-F", "--force", f"--key-file={self._path('munge', 'munge.key')}",
                     f"--socket={socket_path}", f"--log-file={self._path('log', 'munged.log')}",
                     f"--pid-file={self._path('run', 'munged.pid')}",
                     f"--seed-file={self._path('munge', 'munged.seed')}")
        self._wait(lambda: os.path.exists(socket_path), timeout_s, "munged to create its socket")
        self._daemon("slurmctld", "-D", "-f", self._path("slurm.conf"))
        self._daemon("slurmd", "-D", "-N", "localhost", "-f", self._path("slurm.conf"))
        self._wait(lambda: self.node_state() == "idle", timeout_s, "the node to be idle")

    def node_state(self):
        """The node's state as sinfo reports it ("idle", "allocated", "down", ...)."""
        return self.run("sinfo", "--noheader", "--format=%T", timeout=10).stdout.strip()

    def _slurm_conf(self, controller_port, node_port):
        # A random first job id spreads the workers' job-id-derived ports over runs of this test.
        return f"""ClusterName=kerasdist-test
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={controller_port}
SlurmdPort={node_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={self._path('munge', 'munge.socket')}
CredType=cred/munge
FirstJobId={random.randint(1000, 900000)}
StateSaveLocation={self._path('state')}
SlurmdSpoolDir={self._path('spool')}
SlurmctldPidFile={self._path('run', 'slurmctld.pid')}
SlurmdPidFile={self._path('run', 'slurmd.pid')}
SlurmctldLogFile={self._path('log', 'slurmctld.log')}
SlurmdLogFile={self._path('log', 'slurmd.log')}
PlugStackConfig={self._path('plugstack.conf')}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
MinJobAge=3600
NodeName=localhost NodeAddr=127.0.0.1 CPUs=2 State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=30 State=UP
"""

    def _daemon(self, name, *arguments):
        with open(self._path("log", f"{name}.out"), "w") as output:
            self.daemons[name] = subprocess.Popen(
                [name, *arguments], stdout=output, stderr=subprocess.STDOUT, env=self.environment,
                cwd=self.directory, start_new_session=True,
            )

    def _wait(self, condition, timeout_s, what):
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            stopped = [name for name, daemon in self.daemons.items() if daemon.poll() is not None]
            if stopped:
                raise AssertionError(f"{', '.join(stopped)} stopped while waiting for {what}:\n{self.logs()}")
            try:
                if condition():
                    return
            except subprocess.TimeoutExpired:
                pass
            time.sleep(0.5)
        raise AssertionError(f"waited {timeout_s} s for {what}:\n{self.logs()}")

    def run(self, *command, timeout=60, cwd=None):
        """Run a Slurm command (or anything) against this cluster; return the CompletedProcess."""
        return subprocess.run([str(part) for part in command], env=self.environment, capture_output=True,
                              text=True, timeout=timeout, cwd=cwd or self.directory, check=False)

    def logs(self, lines=15):
        """The last lines of every daemon log, to explain a failure."""
        text = []
        for name in sorted(os.listdir(self._path("log"))):
            with open(self._path("log", name), errors="replace") as log:
                text.append(f"--- {name}\n" + "".join(log.readlines()[-lines:]))
        return "\n".join(text)

    def stop(self):
        """Cancel every job, then stop slurmd, slurmctld and munged (and what each of them started)."""
        if self.daemons.get("slurmctld") and self.daemons["slurmctld"].poll() is None:
            try:
                jobs = self.run("squeue", "--noheader", "--format=%i", timeout=10).stdout.split()
                if jobs:
                    self.run("scancel", *jobs, timeout=10)
                    self._wait(lambda: not self.run("squeue", "--noheader", timeout=10).stdout.strip(), 30,
                               "cancelled jobs to end")
            except (subprocess.TimeoutExpired, AssertionError):
                pass  # the daemons are stopped below either way
        for name in ("slurmd", "slurmctld", "munged"):
            daemon = self.daemons.pop(name, None)
            if daemon is None:
                continue
            if daemon.poll() is None:
                daemon.terminate()
                try:
                    daemon.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    daemon.kill()
                    daemon.wait(timeout=15)
            try:
                os.killpg(daemon.pid, signal.SIGKILL)  # its own children (slurmscriptd, job steps) if any
            except (ProcessLookupError, PermissionError):
                pass


@pytest.fixture(scope="module")
def local_slurm(tmp_path_factory):
    """A running single-node Slurm; stopped at the end of the module, also when a test fails."""
    missing = [program for program in SLURM_PROGRAMS if shutil.which(program) is None]
    if missing:
        pytest.skip(f"Debian's slurm-wlm and munge are not installed (missing {', '.join(missing)}); "
                    "scripts/setup.sh installs them when run as root")
    if os.geteuid() != 0:
        pytest.skip("a local Slurm needs root: slurmd starts each job's tasks as the submitting user")
    local = LocalSlurm(tmp_path_factory.mktemp("slurm"))
    try:
        local.start()
        yield local
    finally:
        local.stop()


def _digests(output):
    return dict((task, digest) for digest, task in DIGEST.findall(output))


def _srun_workers(local_slurm, directory, *options, timeout=600):
    """Run 2 tasks of `kerasdist worker` with srun; return the job id and each task's stdout, by task number.

    Each task's stderr goes to a file of its own, as a terminal keeps them apart: a worker's record stays the
    last line of its stdout even when gRPC logs a departed peer after it."""
    outputs = directory / "outputs"
    outputs.mkdir()
    completed = local_slurm.run(
        "srun", "--ntasks=2", "--cpus-per-task=1", "--time=20", f"--output={outputs}/job-%j-task-%t.out",
        f"--error={outputs}/job-%j-task-%t.err",
        *kerasdist_command("worker", "--data", "sample", "--checkpoint-dir", directory / "checkpoints",
                           "--json", *options),
        timeout=timeout,
    )
    task_outputs = {int(path.stem.split("-")[3]): path.read_text() for path in outputs.glob("*.out")}
    assert completed.returncode == 0, (completed.stdout + completed.stderr)[-2000:] + "\n".join(
        path.read_text()[-2000:] for path in sorted(outputs.iterdir()))
    assert sorted(task_outputs) == [0, 1]
    return next(outputs.glob("*.out")).stem.split("-")[1], task_outputs


def _sbatch_script(directory, epochs):
    """`kerasdist slurm-script` for ``epochs`` on the sample, checkpointing in ``directory``, as a file."""
    arguments = ["slurm-script", "--job-name", "kdtest", "--time", "00:20:00", "--data", "sample",
                 "--epochs", epochs, "--checkpoint-dir", directory / "checkpoints",
                 "--kerasdist", shlex.join(kerasdist_command())]
    completed = subprocess.run(kerasdist_command(*arguments), capture_output=True, text=True, timeout=120,
                               check=True)
    path = directory / f"train-{epochs}.sbatch"
    path.write_text(completed.stdout)
    return path


# One srun job step trains, then the sbatch script resumes it in a job queued behind it, as the
# script's comment says: the two ways users start workers under Slurm, in two jobs.
@pytest.mark.slow
def test_srun_trains_identical_weights_and_a_dependent_sbatch_job_resumes(local_slurm, tmp_path):
    srun_job, first = _srun_workers(local_slurm, tmp_path, "--cluster", "slurm", "--epochs", 2)
    records = {task: last_json_line(output) for task, output in first.items()}
    assert [records[task]["task"] for task in (0, 1)] == ["worker 0", "worker 1"]
    assert [records[task]["is_chief"] for task in (0, 1)] == [True, False]
    assert records[0]["weights_sha256"] == records[1]["weights_sha256"]
    assert records[0]["history"]["epoch"] == [0, 1] and records[0]["initial_epoch"] == 0
    assert "Slurm task 0: worker 0 (chief) at localhost:" in first[0]
    checkpoints = str(tmp_path / "checkpoints")
    assert records[0]["checkpoint"] == tf.train.latest_checkpoint(checkpoints)
    assert os.path.exists(records[0]["checkpoint"] + ".index")

    # The sbatch script with a higher target (its srun finds Slurm by --cluster auto): epoch 3 only.
    resumed = local_slurm.run("sbatch", "--parsable", "--wait", f"--dependency=afterany:{srun_job}",
                              _sbatch_script(tmp_path, 3), cwd=tmp_path, timeout=900)
    sbatch_job = resumed.stdout.strip().split(";")[0]
    output = (tmp_path / f"kdtest-{sbatch_job}.out").read_text()
    assert resumed.returncode == 0, resumed.stderr + output[-3000:]
    state = local_slurm.run("scontrol", "--oneliner", "show", "job", srun_job).stdout
    assert "JobState=COMPLETED" in state and "ExitCode=0:0" in state, state
    assert "Resuming from" in output and "epoch 3, step 0" in output
    assert "Epoch 3/3" in output and "Epoch 1/3" not in output
    digests = _digests(output)
    assert sorted(digests) == ["worker 0", "worker 1"] and len(set(digests.values())) == 1, output[-3000:]
    assert digests["worker 0"] != records[0]["weights_sha256"]  # it trained on
    assert tf.train.latest_checkpoint(checkpoints).endswith(f"ckpt-{3 * 52}")


def _job_state(local_slurm, job):
    return re.search(r"JobState=(\w+)", local_slurm.run("scontrol", "--oneliner", "show", "job", job).stdout)


def _wait_for(condition, timeout_s, what):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"waited {timeout_s} s for {what}")


# The JAX engine under the same Slurm: 2 tasks train in one srun step; then a job of the sbatch script
# (--requeue) is requeued mid-training, as a preemption would, and resumes to the same weights.
@pytest.mark.slow
def test_jax_tasks_train_identical_weights_and_a_requeued_job_resumes_to_them(local_slurm, tmp_path):
    uninterrupted = tmp_path / "uninterrupted"
    uninterrupted.mkdir()
    # Small batches: many short steps (208 in the one epoch), so that the requeue below lands mid-training.
    _, outputs = _srun_workers(local_slurm, uninterrupted, "--backend", "jax", "--cluster", "slurm",
                               "--epochs", 1, "--global-batch-size", 16)
    records = {task: last_json_line(output) for task, output in outputs.items()}
    assert [records[task]["backend"] for task in (0, 1)] == ["jax", "jax"]
    assert records[0]["weights_sha256"] == records[1]["weights_sha256"]
    assert records[0]["checkpoint"].endswith("ckpt-208.npz")

    preempted = tmp_path / "preempted"
    script = subprocess.run(kerasdist_command(
        "slurm-script", "--backend", "jax", "--requeue", "--save-every-steps", 5, "--job-name", "kdjax",
        "--time", "00:20:00", "--data", "sample", "--epochs", 1, "--global-batch-size", 16,
        "--checkpoint-dir", preempted / "checkpoints",
        "--kerasdist", shlex.join(kerasdist_command())), capture_output=True, text=True, timeout=120, check=True)
    (tmp_path / "jax.sbatch").write_text(script.stdout)
    job = local_slurm.run("sbatch", "--parsable", tmp_path / "jax.sbatch", cwd=tmp_path).stdout.strip()
    log = preempted / "checkpoints" / "metrics.jsonl"
    _wait_for(lambda: log.exists() and '"global_step": 10' in log.read_text(), 300, "step 10 of the job")
    requeued = local_slurm.run("scontrol", "requeue", job)
    started = time.monotonic()
    assert requeued.returncode == 0, requeued.stderr
    _wait_for(lambda: _job_state(local_slurm, job) and _job_state(local_slurm, job).group(1) in (
        "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"), 600, f"the requeued job {job} to end")
    output = (tmp_path / f"kdjax-{job}.out").read_text()
    assert _job_state(local_slurm, job).group(1) == "COMPLETED", output[-3000:]
    assert "Resuming from" in output and "epoch 1, step" in output, output[-3000:]
    # Both tasks stopped at the step JAX's preemption sync agreed on, and process 0 saved there.
    stops = re.findall(r"stopped by SIGTERM at epoch 1, step (\d+): saved (\S+);", output)
    assert len(stops) == 2 and len(set(stops)) == 1, output[-3000:]
    print(f"requeued job resumed and ended in {time.monotonic() - started:.0f} s")
    digests = _digests(output)
    assert set(digests.values()) == {records[0]["weights_sha256"]}, output[-3000:]
