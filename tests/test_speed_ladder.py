"""Tests for kerasdist/measure/speed_ladder.py: lesson 08's rungs train the model they claim to, in the right process."""

import json
import os
import subprocess
import sys

import pytest

from kerasdist.errors import KerasdistError
from kerasdist.measure import speed_ladder

# One step of the scan epoch against Keras' own train_on_batch on JAX, from the same weights and batch.
SCAN_STEP_AGAINST_KERAS = """
import json, numpy as np, keras, jax, jax.numpy as jnp
from kerasdist.measure import speed_ladder
rng = np.random.default_rng(0)
x, y = rng.random((128, 784), dtype=np.float32), rng.integers(0, 10, 128).astype(np.int32)
keras.utils.set_random_seed(0)
model, reference = speed_ladder.guide_model(), speed_ladder.guide_model()
reference.set_weights(model.get_weights())
model.optimizer.build(model.trainable_variables)
state = tuple([v.value for v in vs] for vs in
              (model.trainable_variables, model.non_trainable_variables, model.optimizer.variables))
epoch = speed_ladder.scan_epoch(model, jnp.asarray(x), jnp.asarray(y), 64)
state, losses = epoch(state, jnp.arange(128))
for batch in (slice(0, 64), slice(64, 128)):
    reference.train_on_batch(x[batch], y[batch])
gap = max(float(np.max(np.abs(np.asarray(a) - b))) for a, b in zip(state[0], reference.get_weights()))
print(json.dumps({"gap": gap, "steps": int(losses.shape[0])}))
"""


def jax_python(code):
    environment = dict(os.environ, KERAS_BACKEND="jax")
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=environment,
                               timeout=300, check=False)
    assert completed.returncode == 0, completed.stderr[-3000:]
    return json.loads(completed.stdout.strip().splitlines()[-1])


def test_the_scan_epoch_takes_the_steps_keras_own_training_takes():
    result = jax_python(SCAN_STEP_AGAINST_KERAS)
    assert result["steps"] == 2
    assert result["gap"] < 1e-5, result


@pytest.mark.slow  # a process of its own: make test
def test_a_jax_rung_runs_in_a_process_of_its_own_and_trains(sample_data):
    result = speed_ladder.measure("JAX lax.scan epoch", "sample", epochs=2)
    assert len(result["epoch_seconds"]) == 2 and all(seconds > 0 for seconds in result["epoch_seconds"])
    assert result["samples_per_epoch"] == len(sample_data.y_train) // 64 * 64
    assert result["test_accuracy"] > 0.7
    assert speed_ladder.steady_samples_per_s(result) > 0


def test_a_tensorflow_rung_runs_here_and_counts_training_only(sample_data):
    result = speed_ladder.measure("kerasdist loop", "sample", epochs=2, data=sample_data)
    assert len(result["epoch_seconds"]) == 2  # one training time per epoch, its validation excluded
    assert result["test_accuracy"] > 0.7


def test_an_unknown_rung_is_refused_in_one_line():
    with pytest.raises(KerasdistError, match=r"unknown rung. Received: 'fit \(fast\)'; use one of fit \(guide\)"):
        speed_ladder.measure("fit (fast)", "sample")


def test_a_rung_run_under_the_wrong_backend_exits_2_in_one_line():
    environment = dict(os.environ, KERAS_BACKEND="tensorflow")
    completed = subprocess.run([sys.executable, "-m", "kerasdist.measure.speed_ladder", "JAX lax.scan epoch"],
                               capture_output=True, text=True, env=environment, timeout=300, check=False)
    assert completed.returncode == 2
    assert completed.stderr.strip().splitlines()[-1] == (
        "kerasdist: error: the rung 'JAX lax.scan epoch' needs KERAS_BACKEND=jax. Received: tensorflow")
