"""Crash-and-resume of the real command line: SIGKILL mid-training, rerun, compare weights."""

import os
import re
import signal
import subprocess
import time

import pytest

from helpers import (
    checkpoint_tensors,
    kerasdist_command,
    kill_when_logged,
    last_json_line,
    run_cli,
    signal_when_logged,
)

# Every test here trains in other processes, and keeps both cores busy.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("training")]

TRAIN = ("train", "--replicas", 2, "--epochs", 3, "--data", "sample", "--json")


# The reference, TRAIN never interrupted, is the session fixture uninterrupted_fit (trained in the pytest process).


def _assert_same_weights(record, reference):
    """Weights and optimizer state equal the uninterrupted run's within 1e-6."""
    ours, theirs = checkpoint_tensors(record["checkpoint"]), checkpoint_tensors(reference.checkpoint)
    assert ours.keys() == theirs.keys()
    assert sum(value.ndim == 2 for value in ours.values()) >= 3  # the three kernels at least
    for name in ours:
        assert abs(ours[name] - theirs[name]).max() <= 1e-6, name


def test_killed_during_epoch_2_resumes_at_epoch_2_with_identical_weights(tmp_path, uninterrupted_fit):
    killed_at = kill_when_logged(
        (*TRAIN, "--checkpoint-dir", tmp_path), tmp_path / "metrics.jsonl",
        lambda r: r["kind"] == "step" and r["epoch"] == 1,
    )
    assert killed_at["epoch"] == 1
    completed = run_cli(*TRAIN, "--checkpoint-dir", tmp_path)
    assert completed.returncode == 0, completed.stderr
    record = last_json_line(completed.stdout)
    assert (record["initial_epoch"], record["epochs_run"]) == (1, 2)  # epochs 2..3, not 1..3
    assert "Epoch 2/3" in completed.stdout and "Epoch 1/3" not in completed.stdout
    assert record["history"]["epoch"] == [0, 1, 2]
    assert record["history"]["loss"] == pytest.approx(uninterrupted_fit.history["loss"], abs=1e-6)
    _assert_same_weights(record, uninterrupted_fit)


def test_killed_mid_epoch_resumes_at_the_next_batch_with_identical_weights(tmp_path, uninterrupted_fit):
    # With --save-every-steps the run resumes inside epoch 2 at the batch after the last save,
    # not at the start of the epoch as keras.callbacks.BackupAndRestore would.
    kill_when_logged(
        (*TRAIN, "--save-every-steps", 10, "--checkpoint-dir", tmp_path), tmp_path / "metrics.jsonl",
        lambda r: r["kind"] == "step" and r["epoch"] == 1 and r["step"] >= 25,
    )
    completed = run_cli(*TRAIN, "--save-every-steps", 10, "--checkpoint-dir", tmp_path)
    assert completed.returncode == 0, completed.stderr
    record = last_json_line(completed.stdout)
    assert record["initial_epoch"] == 1
    assert record["resumed_from_step"] in (52 + 20, 52 + 30, 52 + 40, 52 + 50)
    assert record["steps"]["global_step"] == list(range(1, 3 * 52 + 1))  # no step lost or repeated
    _assert_same_weights(record, uninterrupted_fit)


@pytest.mark.parametrize("engine, signal_number, status", [
    ("fit", signal.SIGINT, 130),
    ("loop", signal.SIGTERM, 143),
])
def test_a_signal_stops_at_the_next_step_saves_and_the_rerun_matches(tmp_path, uninterrupted_fit, engine,
                                                                       signal_number, status):
    arguments = (*TRAIN, "--engine", engine, "--steps-per-execution", 5, "--checkpoint-dir", tmp_path)
    _, stopped = signal_when_logged(
        arguments, tmp_path / "metrics.jsonl", lambda r: r["kind"] == "step" and r["epoch"] == 1 and r["step"] >= 5,
        signal_number,
    )
    assert stopped.returncode == status, stopped.stderr[-2000:]
    last_line = stopped.stderr.strip().splitlines()[-1]
    match = re.fullmatch(r"kerasdist: stopped by (SIG\w+) at epoch 2, step (\d+): saved (\S+); "
                         r"rerun the same command to resume from there", last_line)
    assert match, last_line
    assert match.group(1) == signal.Signals(signal_number).name
    step = int(match.group(2))
    assert os.path.exists(match.group(3) + ".index")
    completed = run_cli(*arguments)
    assert completed.returncode == 0, completed.stderr
    record = last_json_line(completed.stdout)
    assert record["resumed_from_step"] == 52 + step  # at the step it stopped, not at the last epoch end
    assert record["steps"]["global_step"] == list(range(1, 3 * 52 + 1))
    if engine == "fit":  # the reference is a fit run; the loop's own equality is checked in test_loop
        _assert_same_weights(record, uninterrupted_fit)


def test_fashion_killed_mid_epoch_resumes_like_the_other_sources(tmp_path):
    from kerasdist import data

    if not os.path.isdir(data.FASHION_DEBIAN_DIR):
        pytest.skip(f"Debian's {data.FASHION_DEBIAN_PACKAGE} package is not installed (scripts/setup.sh installs it)")
    arguments = ("train", "--replicas", 1, "--epochs", 2, "--data", "fashion", "--engine", "loop",
                 "--global-batch-size", 256, "--save-every-steps", 40, "--json")
    reference = run_cli(*arguments, "--checkpoint-dir", tmp_path / "uninterrupted")
    assert reference.returncode == 0, reference.stderr
    kill_when_logged((*arguments, "--checkpoint-dir", tmp_path / "killed"), tmp_path / "killed" / "metrics.jsonl",
                     lambda r: r["kind"] == "step" and r["epoch"] == 1 and r["step"] >= 50)
    completed = run_cli(*arguments, "--checkpoint-dir", tmp_path / "killed")
    assert completed.returncode == 0, completed.stderr
    assert "[fashion]: 50000 train / 10000 val / 10000 test samples" in completed.stdout
    record, expected = last_json_line(completed.stdout), last_json_line(reference.stdout)
    assert record["initial_epoch"] == 1 and record["resumed_from_step"] >= 195 + 40
    assert record["steps"]["global_step"] == list(range(1, 2 * 195 + 1))  # no step lost or repeated
    ours, theirs = checkpoint_tensors(record["checkpoint"]), checkpoint_tensors(expected["checkpoint"])
    assert ours.keys() == theirs.keys()
    for name in ours:
        assert abs(ours[name] - theirs[name]).max() <= 1e-6, name


def test_a_second_run_on_a_checkpoint_directory_in_use_fails_at_once_naming_the_holder(tmp_path):
    holder = subprocess.Popen(kerasdist_command(*TRAIN, "--epochs", 30, "--checkpoint-dir", tmp_path),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "metrics.jsonl").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        second = run_cli(*TRAIN, "--checkpoint-dir", tmp_path, timeout=120)
        files = sorted(os.listdir(tmp_path))
    finally:
        holder.kill()
        holder.wait()
    assert second.returncode == 2
    assert second.stderr.strip() == (
        f"kerasdist: error: checkpoint directory {tmp_path} is in use by another kerasdist run "
        f"(pid {holder.pid}); wait for it to end or stop it, or choose another --checkpoint-dir"
    )
    # The lock died with its SIGKILLed holder: the directory is free again and a rerun resumes.
    assert sorted(os.listdir(tmp_path)) == files
    assert run_cli(*TRAIN, "--epochs", 1, "--checkpoint-dir", tmp_path).returncode == 0


def test_a_full_disk_stops_with_exit_4_and_a_rerun_after_freeing_space_matches(small_disk, uninterrupted_fit):
    checkpoints = small_disk / "checkpoints"
    full = run_cli(*TRAIN, "--checkpoint-dir", checkpoints)
    assert full.returncode == 4, full.stderr[-2000:]
    last_line = full.stderr.strip().splitlines()[-1]
    assert last_line == (
        f"kerasdist: error: cannot write {checkpoints} (No space left on device); the last good checkpoint is "
        f"{checkpoints}/ckpt-52. Free space for {checkpoints} (or make it writable) and rerun the same "
        "command to resume")
    assert "Traceback" not in full.stderr
    assert sorted(name for name in os.listdir(checkpoints) if name.startswith("ckpt")) == [
        "ckpt-52.data-00000-of-00001", "ckpt-52.index"]  # the failed save left nothing behind

    subprocess.run(["mount", "-o", "remount,size=64m", str(small_disk)], check=True, timeout=30)
    resumed = run_cli(*TRAIN, "--checkpoint-dir", checkpoints)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    record = last_json_line(resumed.stdout)
    assert (record["initial_epoch"], record["history"]["epoch"]) == (1, [0, 1, 2])
    assert record["history"]["loss"] == pytest.approx(uninterrupted_fit.history["loss"], abs=1e-6)
    _assert_same_weights(record, uninterrupted_fit)
