"""Tests for kerasdist/divergence.py and callbacks.DivergenceGuard: a NaN/inf loss stops training at once (exit 3), no bad checkpoint,
and a rerun with a smaller learning rate resumes from the last good checkpoint (fit and loop engines)."""

import contextlib
import io

import numpy as np
import pytest

from helpers import checkpoint_tensors
from kerasdist import cli, divergence, run_training
from kerasdist.errors import TrainingDivergedError
from kerasdist.model import build_model
from kerasdist.state.checkpoint import CheckpointStore

BATCH = 256  # 13 steps per epoch on the sample: quick
DIVERGING_RATE = 1e30  # Adam steps of this size overflow float32 within two steps


@pytest.mark.parametrize("engine", ["fit", "loop"])
def test_divergence_stops_without_checkpoint_and_a_smaller_rate_resumes(tmp_path, sample_data, engine):
    options = dict(data=sample_data, global_batch_size=BATCH, engine=engine, verbose=0, save_every_steps=5)
    run_training(epochs=1, checkpoint_dir=tmp_path / "ckpt", **options)

    with pytest.raises(
        TrainingDivergedError, match=r"loss must be finite. Received: loss=nan at epoch 2, step \d+;"
    ):
        run_training(epochs=2, checkpoint_dir=tmp_path / "ckpt", learning_rate=DIVERGING_RATE, **options)
    steps = sorted(int(path.name[5:-6]) for path in (tmp_path / "ckpt").glob("ckpt-*.index"))
    assert steps == [5, 10, 13]  # epoch 1's checkpoints only
    latest = checkpoint_tensors(str(tmp_path / "ckpt" / "ckpt-13"))
    assert all(np.isfinite(value).all() for value in latest.values())

    resumed = run_training(epochs=2, checkpoint_dir=tmp_path / "ckpt", **options)
    uninterrupted = run_training(epochs=2, checkpoint_dir=tmp_path / "straight", **options)
    assert (resumed.initial_epoch, resumed.resumed_from_step) == (1, 13)
    assert resumed.history["loss"] == pytest.approx(uninterrupted.history["loss"], abs=1e-6)
    for mine, theirs in zip(resumed.model.get_weights(), uninterrupted.model.get_weights()):
        np.testing.assert_allclose(mine, theirs, atol=1e-6)


def test_cli_exits_3_with_one_line_naming_epoch_and_step(tmp_path):
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr):
        status = cli.main(
            [
                "train",
                "--data",
                "sample",
                "--epochs",
                "1",
                "--global-batch-size",
                str(BATCH),
                "--learning-rate",
                str(DIVERGING_RATE),
                "--checkpoint-dir",
                str(tmp_path),
            ]
        )
    lines = stderr.getvalue().strip().splitlines()
    assert status == 3
    assert len(lines) == 1 and lines[0].startswith("kerasdist: error: the training loss must be finite"), (
        lines
    )
    assert "at epoch 1, step" in lines[0] and "smaller --learning-rate" in lines[0]
    assert not list(tmp_path.glob("ckpt-*"))


def test_non_finite_weights_are_never_checkpointed(tmp_path):
    model = build_model()
    store = CheckpointStore(tmp_path, model, {"seed": 0})
    kernel = model.get_layer("dense_2").kernel
    kernel.assign(np.where(np.eye(256, dtype=bool), np.inf, kernel.numpy()).astype("float32"))
    with pytest.raises(TrainingDivergedError, match=r"NaN or inf in .*dense_2/kernel at epoch 3, step 7"):
        store.save(epoch=2, step_in_epoch=7, global_step=111)
    assert not list(tmp_path.glob("ckpt-*")) and not (tmp_path / "checkpoint").exists()


def test_finite_losses_pass_and_the_first_bad_step_is_named():
    divergence.check_losses([2.3, 1.9, 1.7], epoch=0, first_step=1)
    with pytest.raises(TrainingDivergedError, match="loss=inf at epoch 4, step 12;"):
        divergence.check_losses([0.3, np.inf, np.nan], epoch=3, first_step=11)
