"""kerasdist's callbacks under Keras ``fit(steps_per_execution=K)``: one event per call of K steps.

Real ``fit`` calls on the TensorFlow backend's default strategy (which runs
several steps per call), with the real metrics log and checkpoint store: the
JAX engine drives the same callbacks the same way.
"""

import numpy as np
import pytest

from kerasdist.engines.callbacks import standard_callbacks
from kerasdist.model import build_model
from kerasdist.state.checkpoint import CheckpointStore
from kerasdist.state.metrics_log import MetricsLog

STEPS_PER_EPOCH = 10
BATCH = 4


def _fit(tmp_path, steps_per_execution, log_every_steps, save_every_steps):
    """One epoch of 10 steps at ``steps_per_execution``; the metrics log's step records and the checkpoints."""
    model = build_model(steps_per_execution=steps_per_execution)
    store = CheckpointStore(tmp_path, model, {"test": "callbacks"}, max_to_keep=10)
    log = MetricsLog()
    x = np.random.default_rng(0).random((STEPS_PER_EPOCH * BATCH, 784), dtype=np.float32)
    y = np.arange(STEPS_PER_EPOCH * BATCH) % 10
    model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0,
              callbacks=standard_callbacks(log, store, STEPS_PER_EPOCH, BATCH, log_every_steps, save_every_steps))
    steps = [record for record in log.records if record["kind"] == "step"]
    return steps, sorted(int(path.stem.split("-")[1]) for path in tmp_path.glob("ckpt-*.index"))


def test_calls_of_four_steps_log_and_save_at_the_call_that_reaches_a_due_step(tmp_path):
    steps, checkpoints = _fit(tmp_path, steps_per_execution=4, log_every_steps=3, save_every_steps=3)
    # Calls end at steps 4, 8 and 10 (Keras numbers the last, shorter call as if it ended at 12).
    assert [record["step"] for record in steps] == [4, 8, 10]
    assert checkpoints == [4, 8, 10]  # 3 is reached in the call ending at 4, 6 in the one at 8; 10 ends the epoch
    assert not any("batch_loss" in record for record in steps)  # Keras reports the running mean only


def test_one_step_per_call_logs_at_each_due_step_with_each_batchs_own_loss(tmp_path):
    steps, checkpoints = _fit(tmp_path, steps_per_execution=1, log_every_steps=3, save_every_steps=3)
    assert [record["step"] for record in steps] == [3, 6, 9, 10]
    assert checkpoints == [3, 6, 9, 10]
    every_step, _ = _fit(tmp_path / "every", steps_per_execution=1, log_every_steps=1, save_every_steps=None)
    # Keras' running mean after step n is the mean of the n batches' own losses.
    batch_losses = [record["batch_loss"] for record in every_step]
    assert [record["loss"] for record in every_step] == pytest.approx(
        [np.mean(batch_losses[:n]) for n in range(1, STEPS_PER_EPOCH + 1)], rel=1e-5)
