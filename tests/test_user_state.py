"""A test run never reads or writes the user's own caches and settings (USER_STATE in conftest.py)."""

import json
import os
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from helpers import run_pytest
from kerasdist.engines import choice as engines

REPO = Path(__file__).resolve().parents[1]

# What a lesson's kernel reads of the user's state, reported as JSON by one cell: the doctor's cache (lesson 02
# once printed the engine line of a user's cache, not of a fresh machine), Keras' home and backend, matplotlib's
# settings, and whether an IPython start-up file ran.
KERNEL_REPORT = """
import json
import matplotlib
import keras
from keras.src.backend.config import keras_home
from kerasdist.engines import choice
print(json.dumps({"doctor cache": choice.cache_path(), "keras home": keras_home(),
                  "matplotlib": matplotlib.get_configdir(), "ipython": get_ipython().profile_dir.location,
                  "backend": keras.config.backend(), "start-up ran": "USER_START_UP_RAN" in globals()}))
"""
KERNEL_TEST = "tests/test_user_state.py::test_a_lesson_kernel_reads_the_state_of_this_run_not_the_users"


@pytest.fixture
def isolation(pytestconfig):
    """The top-level conftest.py, which isolates the run (tests/conftest.py shares its module name)."""
    return next(plugin for plugin in pytestconfig.pluginmanager.get_plugins()
                if getattr(plugin, "__file__", None) == str(REPO / "conftest.py"))


def test_this_run_keeps_caches_and_settings_in_a_folder_of_its_own(isolation):
    import matplotlib
    from keras.src.backend.config import keras_home

    own = os.environ[isolation.OWN_STATE]
    assert engines.cache_path().startswith(own + os.sep)
    assert keras_home().startswith(own + os.sep)
    assert matplotlib.get_configdir().startswith(own + os.sep)
    assert "KERAS_BACKEND" not in os.environ and "TF_CONFIG" not in os.environ


def _planted_user_state(home):
    """What a user's machine holds after some use: a doctor cache that says every Keras bug is fixed,
    a keras.json that picks JAX, a matplotlibrc, an IPython start-up script."""
    fixed = {probe.name: {"bug_present": False, "detail": "probed on the user's machine", "failed": False}
             for probe in engines.PROBES}
    return {
        home / "cache/kerasdist/probes.json": json.dumps({"versions": engines.versions(), "answers": fixed}),
        home / "keras/keras.json": json.dumps({"backend": "jax", "floatx": "float32", "epsilon": 1e-07,
                                               "image_data_format": "channels_last"}),
        home / "matplotlib/matplotlibrc": "figure.figsize: 2, 1\n",
        home / "ipython/profile_default/startup/00-user.py": "USER_START_UP_RAN = True\n",
    }


@pytest.mark.slow  # a Jupyter kernel: make test
def test_a_lesson_kernel_reads_the_state_of_this_run_not_the_users(isolation, tmp_path):
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(KERNEL_REPORT)])
    NotebookClient(notebook, timeout=120, kernel_name="python3").execute(cwd=str(tmp_path))
    report = json.loads(notebook.cells[0].outputs[0]["text"])
    own = os.environ[isolation.OWN_STATE] + os.sep
    assert all(report[name].startswith(own) for name in ("doctor cache", "keras home", "matplotlib", "ipython")), report
    assert report["backend"] == "tensorflow" and not report["start-up ran"], report


@pytest.mark.slow
def test_a_test_run_passes_and_leaves_a_planted_user_state_byte_identical(tmp_path, isolation):
    home = tmp_path / "user"
    environment = dict(isolation.user_state_environment(str(home)), KERAS_BACKEND="jax")
    planted = _planted_user_state(home)
    for path, text in planted.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)

    # The kernel's test in a pytest run of its own, started with the user's state as its environment.
    run = run_pytest(KERNEL_TEST, environment=environment, timeout=300)

    assert run.returncode == 0, run.stdout[-3000:]
    assert "1 passed" in run.stdout
    for path, text in planted.items():
        assert path.read_bytes() == text.encode(), path
    written = sorted(str(p.relative_to(home)) for p in home.rglob("*") if p.is_file())
    assert written == sorted(str(p.relative_to(home)) for p in planted)
