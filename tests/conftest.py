"""Shared test set-up: two virtual CPU replicas before TensorFlow starts, the offline MNIST sample,
the uninterrupted reference runs, and CI's rule that a skip is a failure unless its reason is allowed."""

import os
import re
import subprocess

import pytest

import kerasdist

# Must run before any TensorFlow op in this process: every in-process test can use 2 replicas.
kerasdist.configure_replicas(2)

# Why a test may skip in CI (CI=true): what CI can never have. Any other skip (R, rpy2, Slurm,
# Chromium or JupyterLab missing, not root) fails the run there, naming what is missing.
SKIPS_ALLOWED_IN_CI = {
    "the R packages keras3 and tfdatasets (CI cannot install them)": re.compile(r"^(needs )?the R packages keras3"),
    "a GPU (tests that need one, or none)": re.compile(r"^this machine has (a|no) GPU"),
}


def skip_allowed_in_ci(reason):
    """True if a skip with this reason may pass in CI."""
    return any(pattern.search(reason) for pattern in SKIPS_ALLOWED_IN_CI.values())


class SkipsFailInCI:
    """Turns each skip whose reason is not on SKIPS_ALLOWED_IN_CI into a failure naming the reason.

    Registered as a plugin (not a conftest hook), so it covers the lessons' nbval items too.
    """

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        outcome = yield
        self._fail_unless_allowed(outcome.get_result())

    @pytest.hookimpl(hookwrapper=True)
    def pytest_make_collect_report(self, collector):
        outcome = yield
        self._fail_unless_allowed(outcome.get_result())

    @staticmethod
    def _fail_unless_allowed(report):
        if not report.skipped or hasattr(report, "wasxfail"):
            return
        # A skip's longrepr is (file, line, "Skipped: <reason>").
        reason = str(report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr)
        reason = reason.removeprefix("Skipped: ")
        if not skip_allowed_in_ci(reason):
            report.outcome = "failed"
            report.longrepr = f"CI=true does not allow this skip: {reason}"


def pytest_configure(config):
    if os.environ.get("CI", "").lower() == "true":
        config.pluginmanager.register(SkipsFailInCI(), "kerasdist-skips-fail-in-ci")


@pytest.fixture(scope="session")
def sample_data():
    """The offline sample of real MNIST digits, split as kerasdist splits it (seed 0)."""
    return kerasdist.load_mnist("sample", seed=0, verbose=False)


@pytest.fixture(scope="session")
def uninterrupted_fit(tmp_path_factory, sample_data):
    """The reference of the crash-and-resume tests: 2 replicas, fit, 3 epochs, never interrupted."""
    return kerasdist.run_training(replicas=2, epochs=3, data=sample_data, engine="fit", verbose=0,
                                  checkpoint_dir=tmp_path_factory.mktemp("uninterrupted-fit"))


@pytest.fixture(scope="session")
def uninterrupted_loop(tmp_path_factory, sample_data):
    """The reference of the loop's crash-and-resume test: 1 replica, loop, 2 epochs, never interrupted."""
    return kerasdist.run_training(replicas=1, epochs=2, data=sample_data, engine="loop", verbose=0,
                                  checkpoint_dir=tmp_path_factory.mktemp("uninterrupted-loop"))


@pytest.fixture
def small_disk(tmp_path):
    """A 5 MB tmpfs (root only): room for one checkpoint of the MLP (3.2 MB with Adam's state), not two."""
    mount_point = tmp_path / "small-disk"
    mount_point.mkdir()
    mounted = os.geteuid() == 0 and subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=5m", "tmpfs", str(mount_point)], capture_output=True,
        timeout=30).returncode == 0
    if not mounted:
        pytest.skip("needs root to mount a small tmpfs (the full-disk test)")
    yield mount_point
    subprocess.run(["umount", "-l", str(mount_point)], capture_output=True, timeout=30)
