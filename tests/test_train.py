"""Tests for kerasdist/engines/train.py: the result record, resuming to a target, refusing bad checkpoints."""

import json
import os

import pytest
import tensorflow as tf

from kerasdist import run_training
from kerasdist.errors import KerasdistError
from kerasdist.state import locking

RECORD_KEYS = {
    "replicas", "strategy", "engine", "epochs", "initial_epoch", "epochs_run", "history", "test",
    "wall_time_s", "samples_per_s", "data_source", "checkpoint",
}
HISTORY_KEYS = {"loss", "sparse_categorical_accuracy", "val_loss", "val_sparse_categorical_accuracy"}


def test_result_record_follows_the_contract_and_is_json(sample_data, tmp_path):
    result = run_training(replicas=2, epochs=1, data=sample_data, checkpoint_dir=tmp_path, verbose=0)
    record = json.loads(json.dumps(result.to_dict()))
    assert RECORD_KEYS <= set(record)
    assert HISTORY_KEYS <= set(record["history"])
    assert (record["replicas"], record["strategy"], record["engine"]) == (2, "mirrored", "fit")
    assert (record["initial_epoch"], record["epochs_run"]) == (0, 1)
    assert record["data_source"]["name"] == "sample"
    assert record["checkpoint"].endswith("ckpt-52")
    assert record["samples_per_s"] > 0
    assert set(record["test"]) == {"loss", "accuracy"}


def test_rerun_continues_numbering_and_keeps_the_whole_history(sample_data, tmp_path):
    first = run_training(replicas=2, epochs=2, data=sample_data, checkpoint_dir=tmp_path, verbose=0)
    second = run_training(replicas=2, epochs=3, data=sample_data, checkpoint_dir=tmp_path, verbose=0)
    assert (second.initial_epoch, second.epochs_run) == (2, 1)
    assert second.history["epoch"] == [0, 1, 2]
    assert second.history["loss"][:2] == first.history["loss"]
    assert second.steps["global_step"] == list(range(1, 3 * 52 + 1))
    assert second.checkpoint.endswith("ckpt-156")


def test_rerun_after_completion_trains_nothing_and_says_so(sample_data, tmp_path, capsys):
    run_training(replicas=1, epochs=1, data=sample_data, checkpoint_dir=tmp_path, verbose=0)
    again = run_training(replicas=1, epochs=1, data=sample_data, checkpoint_dir=tmp_path, verbose=1)
    assert (again.initial_epoch, again.epochs_run, again.wall_time_s) == (1, 0, 0.0)
    assert "Already trained 1/1 epochs" in capsys.readouterr().out
    assert again.test["accuracy"] > 0.8  # the restored model, not a fresh one


def test_three_epochs_reach_90_percent_on_held_out_digits(sample_data):
    for replicas in (1, 2):
        result = run_training(replicas=replicas, epochs=3, data=sample_data, verbose=0)
        assert result.test["accuracy"] >= 0.90, (replicas, result.test)


def test_truncated_newest_checkpoint_is_skipped_for_the_previous_one(sample_data, tmp_path):
    run_training(replicas=1, epochs=2, data=sample_data, checkpoint_dir=tmp_path, verbose=0)
    newest = tmp_path / "ckpt-104.data-00000-of-00001"
    newest.write_bytes(newest.read_bytes()[:1000])
    with pytest.warns(UserWarning, match="skipping checkpoint .*ckpt-104"):
        result = run_training(replicas=1, epochs=2, data=sample_data, checkpoint_dir=tmp_path, verbose=0)
    assert (result.initial_epoch, result.epochs_run) == (1, 1)
    assert result.history["epoch"] == [0, 1]


def _files(directory):
    # The lock names whoever opened the directory last (kerasdist.state.locking); it holds no training state.
    return {name: os.path.getmtime(directory / name) for name in os.listdir(directory)
            if name != locking.LOCK_FILE}


def test_changed_seed_is_refused_and_touches_no_checkpoint(sample_data, tmp_path):
    run_training(replicas=1, epochs=1, data=sample_data, checkpoint_dir=tmp_path, verbose=0)
    before = _files(tmp_path)
    with pytest.raises(KerasdistError, match="written with seed=0 but this run has seed=1"):
        run_training(replicas=1, epochs=2, data=sample_data, seed=1, checkpoint_dir=tmp_path, verbose=0)
    assert _files(tmp_path) == before


def test_checkpoint_of_a_different_model_is_refused(sample_data, tmp_path):
    import keras

    other = keras.Sequential([keras.Input((784,)), keras.layers.Dense(32), keras.layers.Dense(10)])
    other.compile(optimizer="adam", loss="mse")
    other.optimizer.build(other.trainable_variables)
    checkpoint = tf.train.Checkpoint(model=other, optimizer=other.optimizer)
    tf.train.CheckpointManager(checkpoint, str(tmp_path), max_to_keep=1, checkpoint_name="ckpt").save(7)
    before = _files(tmp_path)
    with pytest.raises(KerasdistError, match="written by a different model"):
        run_training(replicas=1, epochs=1, data=sample_data, checkpoint_dir=tmp_path, verbose=0)
    assert _files(tmp_path) == before


def test_unwritable_checkpoint_directory_is_refused(sample_data, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(KerasdistError, match="is not writable"):
        run_training(replicas=1, epochs=1, data=sample_data, checkpoint_dir=blocker / "ckpt", verbose=0)


@pytest.mark.parametrize(
    "arguments, message",
    [
        ({"replicas": 0}, "replicas must be an integer >= 1"),
        ({"replicas": 4}, "need 4 CPU devices but TensorFlow was already initialised with 2"),
        ({"replicas": 2, "global_batch_size": 65}, "divisible by replicas.*try 64"),
        ({"epochs": 0}, "epochs must be an integer >= 1. Received: epochs=0"),
        ({"engine": "estimator"}, "engine must be one of auto, fit, loop"),
        ({"strategy": "multi_worker"}, "keras-team/keras#20585"),
        ({"strategy": "default", "replicas": 2}, "runs 1 replica"),
        ({"save_every_steps": 0}, "save_every_steps must be an integer >= 1"),
    ],
)
def test_bad_arguments_are_refused_before_anything_is_written(sample_data, tmp_path, arguments, message):
    directory = tmp_path / "ckpt"
    with pytest.raises(KerasdistError, match=message):
        run_training(**{"data": sample_data, "checkpoint_dir": directory, "verbose": 0, **arguments})
    assert not directory.exists()
