"""A test run never reads or writes the user's own caches and settings (USER_STATE in conftest.py)."""

import json
import os
from pathlib import Path

import pytest

from helpers import run_pytest
from kerasdist.engines import choice as engines

REPO = Path(__file__).resolve().parents[1]

# The test that failed once a user had run `kerasdist doctor`: lesson 02 printed the engine line of the
# doctor's cache, not of a fresh machine.
LESSON_02_ON_OTHER_DATA = ("tests/test_lesson_numbers.py::test_lesson_runs_on_data_of_another_size_and_types_no_"
                           "figure_of_its_run[02_checkpoints_resume.ipynb]")


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
        home / "ipython/profile_default/startup/00-user.py": "print('the user start-up file ran')\n",
    }


@pytest.mark.slow
@pytest.mark.xdist_group("lessons")
def test_a_test_run_passes_and_leaves_a_planted_user_state_byte_identical(tmp_path, isolation):
    home = tmp_path / "user"
    environment = dict(isolation.user_state_environment(str(home)), KERAS_BACKEND="jax")
    planted = _planted_user_state(home)
    for path, text in planted.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)

    run = run_pytest(LESSON_02_ON_OTHER_DATA, environment=environment)

    assert run.returncode == 0, run.stdout[-3000:]
    assert "1 passed" in run.stdout
    for path, text in planted.items():
        assert path.read_bytes() == text.encode(), path
    written = sorted(str(p.relative_to(home)) for p in home.rglob("*") if p.is_file())
    assert written == sorted(str(p.relative_to(home)) for p in planted)
