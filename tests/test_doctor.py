"""Tests for kerasdist/doctor/ and kerasdist/engines/choice.py: the table, the advice, the engine auto picks.

In this process R answers through stand-ins (what Rscript and rpy2 found, as the doctor parses it);
the real R, Rscript and rpy2 subprocesses run end to end in test_doctor_command_prints_the_table_and_json_last.
"""

import json
import sys

import numpy
import pytest

from helpers import last_json_line, run_cli
from kerasdist import doctor, run_training
from kerasdist.course import lesson_needs
from kerasdist.doctor import checks, probes
from kerasdist.engines import choice as engines
from kerasdist.engines.strategy import STRATEGIES

STATUSES = {doctor.OK, doctor.MISSING, doctor.BROKEN}


def _stand_in(output):
    """A probe stand-in: a real subprocess that prints ``output`` (a dict as JSON, or raw text)."""
    text = json.dumps(output) if isinstance(output, dict) else output
    return [sys.executable, "-c", f"import sys; print({text!r})"]


# What Rscript and embedded R (rpy2) report on a machine with R, reticulate and kerasdist but no keras3.
R_FOUND = {"R": "4.2.2", "reticulate": "1.28", "keras3": "", "tfdatasets": "", "tensorflow": "", "kerasdist": "0.1.0"}


def _isolate(patch, cache):
    """Probe answers go to a temporary cache, never the user's; R answers through stand-ins."""
    patch.setenv("XDG_CACHE_HOME", str(cache))
    patch.setattr(checks, "r_packages_from_rscript", lambda: dict(R_FOUND))
    patch.setattr(checks, "r_packages_from_rpy2", lambda: dict(R_FOUND, rpy2="3.5.17"))


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    _isolate(monkeypatch, tmp_path / "cache")


@pytest.fixture(scope="module")
def broken_report(tmp_path_factory):
    """diagnose() with every probe answering "bug present" through a stand-in."""
    with pytest.MonkeyPatch.context() as patch:
        _isolate(patch, tmp_path_factory.mktemp("cache"))
        stand_ins = {probe.name: _stand_in({"bug_present": True, "detail": f"stand-in {probe.name}"})
                     for probe in engines.PROBES}
        return doctor.diagnose(probe_commands=stand_ins)


def _row(report, key):
    return next(check for check in report["checks"] if check["key"] == key)


@pytest.mark.parametrize("probe", engines.PROBES, ids=lambda probe: probe.name)
def test_a_broken_probe_gives_its_advice_and_engine(broken_report, probe):
    row = _row(broken_report, probe.name)
    assert row["status"] == doctor.BROKEN
    assert row["fix"] == probe.advice and "--engine loop" in row["fix"]
    assert probe.issue in row["needed_by"]
    engine = broken_report["engines"][probe.strategy]["engine"]
    # multi_worker and central_storage leave fit; mirrored keeps fit (1 step per call is right).
    assert engine == {"multi_worker": "loop", "central_storage": "loop", "mirrored": "fit"}[probe.strategy]
    assert row["found"].startswith(f"engine {engine}: stand-in {probe.name}")
    table = doctor.format_report(broken_report)
    assert f"fix: {probe.advice}" in table


def test_the_report_is_one_table_with_every_check(broken_report):
    keys = [check["key"] for check in broken_report["checks"]]
    for key in ("python", "tensorflow", "keras", "numpy", "gpus", "cuda", "nccl", "replicas", "r",
                "reticulate", "kerasdist_r", "keras3", "tfdatasets", "tensorflow_r", "rpy2",
                "numpy_reticulate"):
        assert key in keys
    assert all(check["status"] in STATUSES for check in broken_report["checks"])
    problems = [check for check in broken_report["checks"]
                if check["status"] != doctor.OK and check["required"]]
    assert all(check["fix"] for check in problems)
    assert _row(broken_report, "tensorflow")["found"].startswith(__import__("tensorflow").__version__)
    assert broken_report["upstream_bugs"] == 3
    assert [_row(broken_report, key)["status"] for key in ("r", "kerasdist_r", "keras3", "rpy2")] == [
        doctor.OK, doctor.OK, doctor.MISSING, doctor.OK]
    lines = doctor.format_report(broken_report).splitlines()
    assert lines[0].split()[:3] == ["status", "check", "this"]
    assert lines[-1].startswith(f"{broken_report['problems']} problem")


def test_fixed_upstream_bugs_give_fit_everywhere(tmp_path):
    stand_ins = {probe.name: _stand_in({"bug_present": False, "detail": "works"}) for probe in engines.PROBES}
    report = doctor.diagnose(probe_commands=stand_ins)
    assert {name: choice["engine"] for name, choice in report["engines"].items()} == dict.fromkeys(
        STRATEGIES, "fit")
    assert all(_row(report, probe.name)["status"] == doctor.OK for probe in engines.PROBES)
    # The answers are cached for this TensorFlow/Keras, so --engine auto uses them without probing.
    assert engines.engine_for("multi_worker")[0] == "fit"


def test_a_probe_that_crashes_or_hangs_is_broken_and_the_others_still_answer():
    answers = probes.run_probes(timeout_s=3, commands={
        "multi_worker_fit": [sys.executable, "-c", "import os; os.abort()"],
        "central_storage_metrics": [sys.executable, "-c", "import time; time.sleep(60)"],
        "mirrored_steps_per_execution": _stand_in({"bug_present": False, "detail": "works"}),
    })
    crashed, hung = answers["multi_worker_fit"], answers["central_storage_metrics"]
    assert crashed["failed"] and crashed["bug_present"]
    assert crashed["detail"].startswith("probe crashed (exit -6)")
    assert hung == {"bug_present": True, "failed": True, "detail": "probe hung: killed after 3 s"}
    assert answers["mirrored_steps_per_execution"] == {"bug_present": False, "detail": "works",
                                                       "failed": False}
    garbled = probes.run_probes(commands={"multi_worker_fit": _stand_in("not json")} | {
        probe.name: _stand_in({"bug_present": True, "detail": "x"}) for probe in engines.PROBES[1:]})
    assert garbled["multi_worker_fit"]["failed"] and garbled["multi_worker_fit"]["bug_present"]


def test_auto_engine_without_probes_uses_the_known_bugs_and_says_so():
    assert engines.cached_answers() is None
    engine, reason = engines.engine_for("multi_worker")
    assert engine == "loop" and "keras-team/keras#20585" in reason and "kerasdist doctor probes" in reason
    assert engines.engine_for("central_storage")[0] == "loop"
    assert engines.engine_for("default")[0] == "fit"


def test_cached_answers_of_other_versions_are_ignored(monkeypatch):
    engines.save_answers({"multi_worker_fit": {"bug_present": False, "detail": "works"}})
    assert engines.engine_for("multi_worker")[0] == "fit"
    monkeypatch.setattr(engines, "versions", lambda: {"tensorflow": "9.0", "keras": "9.0"})
    assert engines.cached_answers() is None
    assert engines.engine_for("multi_worker")[0] == "loop"


def test_train_with_auto_engine_uses_the_loop_under_central_storage(sample_data, capsys):
    result = run_training(replicas=2, epochs=1, data=sample_data, strategy="central_storage", engine="auto",
                          verbose=2)
    assert result.engine == "loop"
    assert "Engine loop: fit metrics under central_storage fails" in capsys.readouterr().out


def test_numpy_2_under_old_reticulate_is_broken_with_the_fix(monkeypatch):
    monkeypatch.setattr(numpy, "__version__", "2.1.0")
    check = checks.numpy_reticulate_check("1.28")
    assert (check.status, check.fix) == (doctor.BROKEN, '.venv/bin/pip install "numpy<2"')
    assert checks.numpy_reticulate_check("1.38").status == doctor.OK


def test_embedded_r_that_misses_packages_rscript_finds_is_broken():
    found = {"R": "4.2.2", "reticulate": "1.28", "kerasdist": "0.1.0"}
    check = checks.rpy2_check(found, {"rpy2": "3.5.17", "R": "4.4.1", "reticulate": "1.28", "kerasdist": ""})
    assert check.status == doctor.BROKEN and "not kerasdist (Rscript does)" in check.found
    assert "rpy2==3.5.*" in check.fix


def test_rpy2_fix_follows_the_r_version():
    found = {"R": "4.5.0", "reticulate": "1.41", "kerasdist": "0.1.0"}
    check = checks.rpy2_check(found, {"error": "rpy2 is not installed"})
    assert '"rpy2>=3.6,<3.7"' in check.fix


def test_a_gpu_driver_with_the_cpu_build_says_how_to_switch(tmp_path, monkeypatch):
    stand_in = tmp_path / "nvidia-smi"
    stand_in.write_text("#!/bin/sh\necho 'NVIDIA H100 80GB HBM3, 81559'\n")
    stand_in.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    if __import__("tensorflow").config.list_physical_devices("GPU"):
        pytest.skip("this machine has a GPU TensorFlow can use")
    gpus = next(check for check in checks.gpu_checks() if check.key == "gpus")
    assert gpus.status == doctor.BROKEN and gpus.found == "nvidia-smi lists 1, TensorFlow sees 0"
    if not __import__("tensorflow").test.is_built_with_cuda():
        assert gpus.fix == "KERASDIST_TF=gpu make setup"


def test_doctor_command_prints_the_table_and_json_last():
    done = run_cli("doctor", "--no-probes", "--json", timeout=300)
    assert done.returncode == 0, done.stderr
    report = last_json_line(done.stdout)
    assert {"checks", "lessons", "engines", "problems", "seconds"} <= set(report)
    assert report["engines"]["multi_worker"]["engine"] == "loop"
    # One lesson row per notebook of kerasdist.course.lesson_needs, printed as the table's lesson lines.
    notebooks = [name for lesson in lesson_needs.LESSONS for name in lesson.notebooks]
    assert [row["lesson"] for row in report["lessons"]] == notebooks
    assert [line.split()[1] for line in done.stdout.splitlines() if line.startswith("lesson  ")] == notebooks
    table = done.stdout.splitlines()
    assert table[0].split()[:2] == ["status", "check"]
    assert any(line.startswith("OK") and "Python" in line for line in table)
    jax = {check["key"]: check for check in report["checks"]}
    assert jax["jax"]["status"] == "OK" and jax["jax"]["found"].startswith(__import__("jax").__version__)
    # Two real local JAX processes joined and gathered over gloo.
    assert jax["jax_collectives"]["status"] == "OK", jax["jax_collectives"]


def test_a_bad_probe_timeout_is_one_line_and_exit_2():
    done = run_cli("doctor", "--probe-timeout-s", "0", timeout=300)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == "kerasdist: error: --probe-timeout-s must be > 0. Received: 0; try 60\n"


@pytest.mark.slow
def test_real_probes_agree_with_the_bugs_known_for_these_versions():
    answers = probes.run_probes(timeout_s=240)
    for probe in engines.PROBES:
        assert not answers[probe.name]["failed"], answers[probe.name]
        assert answers[probe.name]["bug_present"] == engines.KNOWN_BUGS[probe.name], answers[probe.name]
