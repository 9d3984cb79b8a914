"""kerasdist.measure.same_batches: lesson 07's TensorFlow reference (fit() under MirroredStrategy on fixed batches
from a weights file), its one-line errors; and the weights digest the lesson compares runs by."""

import json
import subprocess
import sys

import numpy as np
import pytest

from kerasdist import model as model_module
from kerasdist.measure.same_batches import load_final_weights
from kerasdist.model import weights_digest

GLOBAL_BATCH_SIZE = 64
STEPS = 6


@pytest.fixture(scope="module")
def start(tmp_path_factory, sample_data):
    """Paths of the training arrays (STEPS global batches of the sample) and of initial weights."""
    folder = tmp_path_factory.mktemp("same-batches")
    arrays, weights = folder / "train.npz", folder / "initial.weights.h5"
    rows = STEPS * GLOBAL_BATCH_SIZE
    np.savez(arrays, x=sample_data.x_train[:rows], y=sample_data.y_train[:rows])
    model_module.build_model().save_weights(str(weights))
    return str(arrays), str(weights)


def command(*arguments, timeout=240):
    return subprocess.run([sys.executable, "-m", "kerasdist.measure.same_batches", *arguments],
                          capture_output=True, text=True, timeout=timeout)


def test_weights_digest_tells_arrays_apart_by_their_bits():
    weights = [np.arange(6, dtype=np.float32).reshape(2, 3), np.ones(3, np.float32)]
    changed = [weights[0].copy(), weights[1].copy()]
    changed[1][2] = np.nextafter(np.float32(1), np.float32(2))  # one bit of one number
    assert weights_digest(weights) == weights_digest([w.copy() for w in weights])
    assert weights_digest(weights) != weights_digest(changed)


@pytest.mark.slow
@pytest.mark.xdist_group("training")
def test_two_mirrored_replicas_take_the_steps_of_one_and_save_the_weights_they_digest(start, tmp_path):
    arrays, weights = start
    runs = {}
    for replicas in (1, 2):
        saved = tmp_path / f"mirrored-{replicas}.npz"
        done = command("mirrored", "--arrays", arrays, "--weights", weights, "--replicas", str(replicas),
                       "--save-weights", str(saved))
        assert done.returncode == 0, done.stderr[-3000:]
        runs[replicas] = json.loads(done.stdout.splitlines()[-1])
        assert runs[replicas]["replicas"] == replicas and len(runs[replicas]["losses"]) == STEPS
        assert weights_digest(load_final_weights(str(saved)))[:16] == runs[replicas]["digest"]
    np.testing.assert_allclose(runs[2]["losses"], runs[1]["losses"], atol=1e-4)
    assert runs[2]["losses"][-1] < runs[2]["losses"][0]


@pytest.mark.parametrize("arguments, received", [
    (["mirrored", "--arrays", "missing.npz", "--weights", "w.weights.h5"], "arrays=missing.npz"),
    (["mirrored", "--arrays", "ARRAYS", "--weights", "model.keras"], "weights=model.keras"),
])
def test_user_errors_are_one_line_without_traceback(start, arguments, received):
    arguments = [start[0] if argument == "ARRAYS" else argument for argument in arguments]
    done = command(*arguments, timeout=60)
    assert done.returncode == 2
    assert done.stderr.startswith("kerasdist: error: ") and len(done.stderr.strip().splitlines()) == 1
    assert received in done.stderr and "Traceback" not in done.stderr
