"""Tests for scripts/setup.sh: the TensorFlow build it installs, the override, reruns that change nothing."""

import os
import subprocess
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
GPU_LINE = "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-00000000-0000-0000-0000-000000000000)"


def _installed_build():
    """"cpu" or "gpu": the TensorFlow build of the environment running the tests."""
    try:
        metadata.version("tensorflow-cpu")
        return "cpu"
    except metadata.PackageNotFoundError:
        return "gpu"


def _dry_run(tmp_path, nvidia_smi=None, *arguments, **environment):
    """Run ``setup.sh --dry-run ARGUMENTS`` with only the system's tools on PATH and a stand-in nvidia-smi."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    if nvidia_smi is not None:
        stand_in = bin_dir / "nvidia-smi"
        stand_in.write_text(f"#!/bin/sh\n{nvidia_smi}\n")
        stand_in.chmod(0o755)
    env = {key: value for key, value in os.environ.items() if key != "KERASDIST_TF"}
    env.update(PATH=f"{bin_dir}:/usr/bin:/bin", **environment)
    return subprocess.run(["bash", "scripts/setup.sh", "--dry-run", *arguments], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(
    "nvidia_smi, environment, build",
    [
        (f'echo "{GPU_LINE}"', {}, "gpu"),                           # a driver that lists a GPU
        (None, {}, "cpu"),                                           # no nvidia-smi at all
        ('echo "NVIDIA-SMI has failed: no driver" >&2; exit 9', {}, "cpu"),  # nvidia-smi without a driver
        (f'echo "{GPU_LINE}"', {"KERASDIST_TF": "cpu"}, "cpu"),      # the override wins
        (None, {"KERASDIST_TF": "gpu"}, "gpu"),
    ],
)
def test_setup_picks_the_tensorflow_build(tmp_path, nvidia_smi, environment, build):
    done = _dry_run(tmp_path, nvidia_smi, **environment)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"TensorFlow build: {build} (")
    assert lines[1] == f"would install: .[{build},test,r,jax]"
    if nvidia_smi and not environment:
        assert GPU_LINE in lines[0] if build == "gpu" else "no NVIDIA driver" in lines[0]
    # Switching builds removes the other one first, so both are never installed together.
    other = {"cpu": "tensorflow-cpu", "gpu": "tensorflow"}[_installed_build()]
    assert lines[2].startswith("Dependencies: ")
    if build != _installed_build():
        assert lines[3].startswith("would first uninstall: ") and other in lines[3].split()
    else:
        assert len(lines) == 3


@pytest.mark.parametrize("purpose, extras", [("demo", "test,r,jax"), ("lab", "test,r,jax,notebooks"),
                                             ("site", "test,r,jax,docs"), ("test", "test,r,jax,notebooks,docs")])
def test_each_purpose_installs_its_extras(tmp_path, purpose, extras):
    done = _dry_run(tmp_path, None, purpose, KERASDIST_TF="cpu")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[1] == f"would install: .[cpu,{extras}]"


@pytest.mark.parametrize(
    "python, r_and_reticulate, line",
    [
        ("3.11", "4.2.2 1.28", ("Dependencies: numpy<2 ml-dtypes<0.6 mlxtend<0.24 rpy2==3.5.* "
                                "(Python 3.11, R 4.2.2, reticulate 1.28: reticulate < 1.38 rejects NumPy 2)")),
        ("3.13", "4.5.0 1.41", "Dependencies: rpy2>=3.6,<3.7 (Python 3.13, R 4.5.0, reticulate 1.41)"),
        ("3.12", "4.4.1 1.46", "Dependencies: rpy2==3.5.* (Python 3.12, R 4.4.1, reticulate 1.46)"),
        ("3.13", "4.2.2 1.28", ("Dependencies: rpy2==3.5.* (Python 3.13, R 4.2.2, reticulate 1.28: no NumPy 1 "
                                "wheels for Python 3.13; R needs reticulate >= 1.38 for NumPy 2)")),
    ],
)
def test_setup_pins_by_python_r_and_reticulate(tmp_path, python, r_and_reticulate, line):
    # Stand-ins that answer as that Python and that R would.
    stand_in = tmp_path / "python"
    stand_in.write_text(f"#!/bin/sh\necho {python}\n")
    stand_in.chmod(0o755)
    (tmp_path / "bin").mkdir()
    rscript = tmp_path / "bin" / "Rscript"
    rscript.write_text(f"#!/bin/sh\necho {r_and_reticulate}\n")
    rscript.chmod(0o755)
    done = _dry_run(tmp_path, None, KERASDIST_TF="cpu", PYTHON=str(stand_in))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[2] == line


def test_setup_rejects_an_unknown_build(tmp_path):
    done = _dry_run(tmp_path, KERASDIST_TF="tpu")
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.strip() == ("kerasdist: error: KERASDIST_TF must be cpu or gpu. "
                                   "Received: KERASDIST_TF=tpu; unset it to choose by nvidia-smi")


def test_rerunning_setup_installs_nothing():
    stamp = ROOT / ".venv" / ".installed"
    installed = stamp.read_text().split() if stamp.exists() else []
    if not {"test", "r", "notebooks"} <= set(installed):
        pytest.skip("set up with `bash scripts/setup.sh test` first (make test does)")
    env = dict(os.environ, KERASDIST_TF=next(extra for extra in installed if extra in ("cpu", "gpu")))
    done = subprocess.run(["bash", "scripts/setup.sh", "test"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "TensorFlow build" not in done.stdout and "Uninstalling" not in done.stdout
    assert stamp.read_text().split() == installed
