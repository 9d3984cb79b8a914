"""Crash-and-resume of the real command line: SIGKILL mid-training, rerun, compare weights."""

import pytest

from helpers import checkpoint_tensors, kill_when_logged, last_json_line, run_cli

TRAIN = ("train", "--replicas", 2, "--epochs", 3, "--data", "sample", "--json")


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """The reference: the same run, never interrupted."""
    directory = tmp_path_factory.mktemp("uninterrupted")
    completed = run_cli(*TRAIN, "--checkpoint-dir", directory)
    assert completed.returncode == 0, completed.stderr
    return last_json_line(completed.stdout)


def _assert_same_weights(record, reference):
    """Weights and optimizer state equal the uninterrupted run's within 1e-6."""
    ours, theirs = checkpoint_tensors(record["checkpoint"]), checkpoint_tensors(reference["checkpoint"])
    assert ours.keys() == theirs.keys()
    assert sum(value.ndim == 2 for value in ours.values()) >= 3  # the three kernels at least
    for name in ours:
        assert abs(ours[name] - theirs[name]).max() <= 1e-6, name


def test_killed_during_epoch_2_resumes_at_epoch_2_with_identical_weights(tmp_path, uninterrupted):
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
    assert record["history"]["loss"] == pytest.approx(uninterrupted["history"]["loss"], abs=1e-6)
    _assert_same_weights(record, uninterrupted)


def test_killed_mid_epoch_resumes_at_the_next_batch_with_identical_weights(tmp_path, uninterrupted):
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
    _assert_same_weights(record, uninterrupted)
