"""kerasdist.jax_distribution: lesson 07's processes (the MirroredStrategy reference, the two-process fit()
on JAX with keras.distribution.initialize), their bounded waits and their one-line errors."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from kerasdist import model as model_module
from kerasdist.errors import KerasdistError
from kerasdist.jax_distribution import launch, load_final_weights, run_worker
from kerasdist.model import weights_digest

pytest.importorskip("jax", reason="needs JAX (the jax extra: pip install -e '.[jax]')")

GLOBAL_BATCH_SIZE = 64
STEPS = 6
LAUNCH_TIMEOUT_S = 240


@pytest.fixture(scope="module")
def start(tmp_path_factory, sample_data):
    """Paths of the training arrays (STEPS global batches of the sample) and of initial weights."""
    folder = tmp_path_factory.mktemp("jax-distribution")
    arrays, weights = folder / "train.npz", folder / "initial.weights.h5"
    rows = STEPS * GLOBAL_BATCH_SIZE
    np.savez(arrays, x=sample_data.x_train[:rows], y=sample_data.y_train[:rows])
    model_module.build_model().save_weights(str(weights))
    return str(arrays), str(weights)


def command(*arguments, timeout=LAUNCH_TIMEOUT_S):
    return subprocess.run([sys.executable, "-m", "kerasdist.jax_distribution", *arguments],
                          capture_output=True, text=True, timeout=timeout)


def test_weights_digest_tells_arrays_apart_by_their_bits():
    weights = [np.arange(6, dtype=np.float32).reshape(2, 3), np.ones(3, np.float32)]
    changed = [weights[0].copy(), weights[1].copy()]
    changed[1][2] = np.nextafter(np.float32(1), np.float32(2))  # one bit of one number
    assert weights_digest(weights) == weights_digest([w.copy() for w in weights])
    assert weights_digest(weights) != weights_digest(changed)


@pytest.mark.slow
@pytest.mark.xdist_group("training")
def test_two_processes_fit_as_one_with_the_steps_of_mirrored_strategy(start, tmp_path):
    arrays, weights = start
    workers = launch(arrays, weights, processes=2, global_batch_size=GLOBAL_BATCH_SIZE,
                     timeout_s=LAUNCH_TIMEOUT_S, save_weights=str(tmp_path / "workers.npz"))
    assert [worker["process"] for worker in workers] == [0, 1]
    assert all(worker["devices"] == 2 for worker in workers)  # one cluster: each sees both processes' devices
    assert workers[0]["digest"] == workers[1]["digest"], "the processes ended with different weights"
    assert len(workers[0]["losses"]) == STEPS
    assert workers[0]["losses"][-1] < workers[0]["losses"][0]
    done = command("mirrored", "--arrays", arrays, "--weights", weights, "--replicas", "2",
                   "--save-weights", str(tmp_path / "mirrored.npz"))
    assert done.returncode == 0, done.stderr[-3000:]
    mirrored = json.loads(done.stdout.splitlines()[-1])
    assert mirrored["replicas"] == 2
    np.testing.assert_allclose(mirrored["losses"], workers[0]["losses"], atol=1e-4)
    # --save-weights: the final weights themselves, the ones each run's digest describes.
    for saved, run in ((tmp_path / "workers.npz", workers[0]), (tmp_path / "mirrored.npz", mirrored)):
        assert weights_digest(load_final_weights(str(saved)))[:16] == run["digest"]


@pytest.mark.slow
@pytest.mark.xdist_group("training")
def test_a_failing_worker_stops_the_run_and_shows_its_stderr(start, tmp_path):
    arrays, _ = start
    damaged = tmp_path / "damaged.weights.h5"
    damaged.write_bytes(b"not an HDF5 file")
    with pytest.raises(KerasdistError) as failure:
        launch(arrays, str(damaged), processes=2, timeout_s=LAUNCH_TIMEOUT_S)
    message = str(failure.value)
    assert "worker 0 failed (exit status 1)" in message or "worker 1 failed (exit status 1)" in message
    assert "its stderr ends with" in message and "Traceback" in message


@pytest.mark.slow
@pytest.mark.xdist_group("training")
def test_the_wait_is_bounded(start):
    arrays, weights = start
    with pytest.raises(KerasdistError, match=r"worker 0 failed \(stopped after 1 s\)"):
        launch(arrays, weights, processes=2, timeout_s=1)


@pytest.mark.parametrize("arguments, received", [
    (["launch", "--arrays", "missing.npz", "--weights", "w.weights.h5"], "arrays=missing.npz"),
    (["mirrored", "--arrays", "ARRAYS", "--weights", "model.keras"], "weights=model.keras"),
])
def test_user_errors_are_one_line_without_traceback(start, arguments, received):
    arguments = [start[0] if argument == "ARRAYS" else argument for argument in arguments]
    done = command(*arguments, timeout=60)
    assert done.returncode == 2
    assert done.stderr.startswith("kerasdist: error: ") and len(done.stderr.strip().splitlines()) == 1
    assert received in done.stderr and "Traceback" not in done.stderr


def test_a_worker_refuses_to_run_where_keras_is_loaded_on_another_backend(start, monkeypatch):
    monkeypatch.setenv("KERAS_BACKEND", "tensorflow")  # this test process runs Keras on TensorFlow
    with pytest.raises(KerasdistError, match="needs Keras on jax in a process of its own"):
        run_worker(0, 1, "127.0.0.1:1", *start, global_batch_size=GLOBAL_BATCH_SIZE, epochs=1)
    assert os.environ["KERAS_BACKEND"] == "tensorflow"
