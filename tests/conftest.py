"""Shared test set-up: two virtual CPU replicas before TensorFlow starts, and the offline MNIST sample."""

import pytest

import kerasdist

# Must run before any TensorFlow op in this process: every in-process test can use 2 replicas.
kerasdist.configure_replicas(2)


@pytest.fixture(scope="session")
def sample_data():
    """The offline sample of real MNIST digits, split as kerasdist splits it (seed 0)."""
    return kerasdist.load_mnist("sample", seed=0, verbose=False)
