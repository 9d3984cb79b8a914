"""The JAX engine through the real command line: N devices, N processes, exact resume after SIGKILL."""

import json
import random
import re
import signal
import subprocess
import time

import numpy as np
import pytest

from helpers import kerasdist_command, kill_when_logged, last_json_line, run_cli, signal_when_logged
from kerasdist.model import weights_digest

# Every test here trains in other processes, and keeps both cores busy.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("training")]

TRAIN = ("train", "--backend", "jax", "--epochs", 3, "--data", "sample", "--json")
LAUNCH = ("launch", "--backend", "jax", "--workers", 2, "--epochs", 2, "--data", "sample", "--json")
STEPS_PER_EPOCH = 52  # 3,333 sample digits in batches of 64
# The kill and stop tests run 4 steps per call, checkpointing every 5 steps: a checkpoint then lands at the end
# of the call that reaches a multiple of 5, and a stop between two calls (one step per call is the default,
# which the first test runs).
RESUMABLE = ("--save-every-steps", 5, "--steps-per-execution", 4)


def _final_arrays(record):
    """The model's weights and the optimizer's state in the run's last checkpoint, by name."""
    with np.load(record["checkpoint"]) as saved:
        return {key: saved[key] for key in saved.files if key.startswith(("model/", "optimizer/"))}


def _digest(arrays):
    return weights_digest([arrays[f"model/{index}"] for index in range(sum(k.startswith("model/") for k in arrays))])


@pytest.fixture(scope="module")
def one_device():
    run = run_cli(*TRAIN, "--replicas", 1)
    assert run.returncode == 0, run.stderr[-2000:]
    return last_json_line(run.stdout)


def test_two_devices_take_the_steps_of_one_and_reach_tensorflows_accuracy(one_device):
    run = run_cli(*TRAIN, "--replicas", 2)
    assert run.returncode == 0, run.stderr[-2000:]
    record = last_json_line(run.stdout)
    assert (record["backend"], record["strategy"], record["replicas"]) == ("jax", "DataParallel", 2)
    assert record["steps"]["global_step"] == one_device["steps"]["global_step"]
    np.testing.assert_allclose(record["steps"]["batch_loss"], one_device["steps"]["batch_loss"], atol=1e-4)
    tensorflow = run_cli("train", "--replicas", 2, "--epochs", 3, "--data", "sample", "--json")
    assert tensorflow.returncode == 0, tensorflow.stderr[-2000:]
    assert abs(record["test"]["accuracy"] - last_json_line(tensorflow.stdout)["test"]["accuracy"]) <= 0.01


def test_one_process_killed_at_a_random_step_resumes_to_the_same_weights(tmp_path):
    arguments = (*TRAIN, "--replicas", 2, *RESUMABLE)
    # The uninterrupted run takes one step per call: the steps per call change where it may stop, not the weights.
    reference = run_cli(*TRAIN, "--replicas", 2, "--checkpoint-dir", tmp_path / "whole")
    assert reference.returncode == 0, reference.stderr[-2000:]
    kill_at = random.randint(6, 3 * STEPS_PER_EPOCH - 2)
    kill_when_logged((*arguments, "--checkpoint-dir", tmp_path / "killed"), tmp_path / "killed" / "metrics.jsonl",
                     lambda record: record.get("global_step", 0) >= kill_at)
    rerun = run_cli(*arguments, "--checkpoint-dir", tmp_path / "killed")
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert "Resuming from" in rerun.stdout, f"killed at step {kill_at}"
    ours, theirs = _final_arrays(last_json_line(rerun.stdout)), _final_arrays(last_json_line(reference.stdout))
    assert ours.keys() == theirs.keys()
    assert all(np.array_equal(ours[key], theirs[key]) for key in ours), f"killed at step {kill_at}"
    assert _digest(ours) == _digest(theirs)


def _launch_and_kill_workers(arguments, metrics_log, kill_at, timeout=300):
    """Run ``kerasdist launch``; SIGKILL every worker once the metrics log reaches ``kill_at``."""
    launcher = subprocess.Popen(kerasdist_command(*arguments), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)
    pids, deadline = [], time.monotonic() + timeout
    try:
        while len(pids) < 2:
            match = re.search(r"\[launch\] worker \d: pid (\d+)", launcher.stdout.readline())
            if match:
                pids.append(int(match.group(1)))
        while time.monotonic() < deadline:
            steps = [json.loads(line).get("global_step", 0) for line in _lines(metrics_log)]
            if steps and max(steps) >= kill_at:
                for pid in pids:
                    subprocess.run(["kill", "-KILL", str(pid)], check=False)
                break
            assert launcher.poll() is None, "the run ended before the kill point"
            time.sleep(0.01)
        launcher.communicate(timeout=120)
        return launcher.returncode
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()


def _lines(path):
    try:
        with open(path) as stream:
            return [line for line in stream if line.endswith("\n")]
    except FileNotFoundError:
        return []


@pytest.fixture(scope="module")
def two_processes(tmp_path_factory):
    """The record of LAUNCH never interrupted (RESUMABLE's settings)."""
    reference = run_cli(*LAUNCH, *RESUMABLE, "--checkpoint-dir", tmp_path_factory.mktemp("whole"),
                        timeout=600)
    assert reference.returncode == 0, reference.stdout[-3000:]
    expected = last_json_line(reference.stdout)
    assert len({worker["weights_sha256"] for worker in expected["workers"]}) == 1
    return expected


def test_two_processes_killed_at_a_random_step_resume_to_the_same_weights(tmp_path, two_processes):
    arguments, expected = (*LAUNCH, *RESUMABLE), two_processes
    kill_at = random.randint(6, 2 * STEPS_PER_EPOCH - 2)
    status = _launch_and_kill_workers((*arguments, "--checkpoint-dir", tmp_path / "killed"),
                                      tmp_path / "killed" / "metrics.jsonl", kill_at)
    assert status != 0
    rerun = run_cli(*arguments, "--checkpoint-dir", tmp_path / "killed", timeout=600)
    assert rerun.returncode == 0, rerun.stdout[-3000:]
    assert "Resuming from" in rerun.stdout, f"killed at step {kill_at}"
    record = last_json_line(rerun.stdout)
    assert [w["weights_sha256"] for w in record["workers"]] == [w["weights_sha256"] for w in expected["workers"]], \
        f"killed at step {kill_at}"


def test_a_sigint_stops_both_processes_at_the_same_step_and_the_rerun_matches(tmp_path, two_processes):
    arguments = (*LAUNCH, *RESUMABLE, "--checkpoint-dir", tmp_path / "stopped")
    # At least 6 calls of 4 steps before the end: the signal reaches both processes through JAX's notifier before
    # the run ends (a signal that lands after the last step stops nothing).
    stop_at = random.randint(3, 2 * STEPS_PER_EPOCH - 24)
    _, stopped = signal_when_logged(arguments, tmp_path / "stopped" / "metrics.jsonl",
                                    lambda record: record.get("global_step", 0) >= stop_at, signal.SIGINT)
    assert stopped.returncode == 130, f"signalled at step {stop_at}: " + stopped.stdout[-3000:]
    # JAX's preemption sync picks one step for both processes (within an epoch or at its end): both name
    # the same checkpoint.
    saved = re.findall(r"\[worker (\d)\] kerasdist: stopped by SIGINT (?:at epoch \d+, step \d+|after epoch \d+): "
                       r"saved (\S+);", stopped.stdout)
    assert sorted(worker for worker, _ in saved) == ["0", "1"] and len({path for _, path in saved}) == 1, \
        stopped.stdout[-3000:]
    rerun = run_cli(*arguments, timeout=600)
    assert rerun.returncode == 0, rerun.stdout[-3000:]
    assert [w["weights_sha256"] for w in last_json_line(rerun.stdout)["workers"]] == [
        w["weights_sha256"] for w in two_processes["workers"]], f"stopped at step {stop_at}"


def test_a_checkpoint_directory_of_the_other_backend_is_refused_in_one_line(tmp_path):
    jax_run = run_cli(*TRAIN, "--epochs", 1, "--checkpoint-dir", tmp_path / "jax")
    assert jax_run.returncode == 0, jax_run.stderr[-2000:]
    refused = run_cli("train", "--epochs", 2, "--data", "sample", "--checkpoint-dir", tmp_path / "jax")
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines() == [
        f"kerasdist: error: {tmp_path / 'jax'} holds checkpoints of the jax backend; this run uses tensorflow. "
        "Resume it with --backend jax, or use a new --checkpoint-dir"]
    tensorflow_run = run_cli("train", "--epochs", 1, "--data", "sample", "--checkpoint-dir", tmp_path / "tf")
    assert tensorflow_run.returncode == 0, tensorflow_run.stderr[-2000:]
    refused = run_cli(*TRAIN, "--checkpoint-dir", tmp_path / "tf")
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines()[-1].startswith(
        f"kerasdist: error: {tmp_path / 'tf'} holds checkpoints of the tensorflow backend; this run uses jax.")
