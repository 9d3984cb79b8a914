"""Tests for kerasdist/engines/options.py: one definition of the training options drives every entry point.

The command line's flags, the worker argv ``launch`` forwards, ``run_training``'s keywords and the R
wrappers' arguments (r/R/train.R, r/R/compare.R) must all agree with ``TrainingOptions``.
"""

import argparse
import dataclasses
import inspect
import shutil
import subprocess
from pathlib import Path

import pytest

from kerasdist import run_comparison, run_training
from kerasdist.engines.options import TrainingOptions
from kerasdist.errors import KerasdistError

R_SOURCES = Path(__file__).resolve().parents[1] / "r" / "R"
# Where kd_train's default differs on purpose: R consoles draw no progress bar, so one line per epoch.
KD_TRAIN_DEFAULTS = {"verbose": 2}


def _parser():
    parser = argparse.ArgumentParser()
    TrainingOptions.add_arguments(parser)
    TrainingOptions.add_arguments(parser, ["collective_timeout_s"])
    return parser


def test_worker_argv_parses_back_to_the_same_options():
    options = TrainingOptions(replicas=2, epochs=4, global_batch_size=128, checkpoint_dir="ckpt", seed=7,
                              engine="loop", learning_rate=0.01, scale_learning_rate=True, warmup_epochs=1.5,
                              jit_compile=True, save_every_steps=10, steps_per_execution=20,
                              collective_timeout_s=30)
    again = TrainingOptions.from_args(_parser().parse_args(options.argv()))
    assert again == options


def test_every_flagged_option_is_on_the_command_line_with_its_default():
    parser = _parser()
    defaults = vars(parser.parse_args([]))
    for field in dataclasses.fields(TrainingOptions):
        if field.metadata["flag"]:
            assert defaults[field.name] == field.metadata["cli_default"], field.name


def test_run_training_takes_exactly_the_options():
    parameters = inspect.signature(run_training).parameters
    assert [(name, p.default) for name, p in parameters.items()] == [
        (field.name, field.default) for field in dataclasses.fields(TrainingOptions)]
    for field in dataclasses.fields(TrainingOptions):
        assert f"        {field.name}: " in run_training.__doc__


def test_an_invalid_option_is_one_line_naming_it():
    with pytest.raises(KerasdistError, match=r"^steps_per_execution must be an integer >= 1 \(or None\)\. Received: "
                                             r"steps_per_execution=0; use 1"):
        TrainingOptions(steps_per_execution=0)
    with pytest.raises(KerasdistError, match=r"^engine must be loop under strategy multi_worker"):
        TrainingOptions(strategy="multi_worker", engine="fit")


def _r_formals(file, function):
    """``[(name, deparsed default)]`` of an R function, read by R itself from the package's sources."""
    if shutil.which("Rscript") is None:
        pytest.skip("R is not installed (Debian: apt-get install --no-install-recommends r-base-core)")
    code = (f'e <- new.env(); sys.source("{R_SOURCES / file}", e); f <- formals(e${function}); '
            'cat(paste(names(f), vapply(f, function(v) paste(deparse(v), collapse = ""), ""), sep = "="), '
            'sep = "\\n")')
    done = subprocess.run(["Rscript", "-e", code], capture_output=True, text=True, timeout=120, check=True)
    return [tuple(line.split("=", 1)) for line in done.stdout.splitlines()]


def _as_r(value):
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, tuple):
        inner = ", ".join(str(_as_r(item)) for item in value)
        return inner if len(value) == 1 else f"c({inner})"
    return value


def _same(r_text, python_value):
    expected = _as_r(python_value)
    if isinstance(expected, str):
        return r_text == expected
    return float(r_text) == float(expected)


def test_kd_train_takes_the_options_with_their_defaults():
    formals = _r_formals("train.R", "kd_train")
    in_r = [field for field in dataclasses.fields(TrainingOptions) if field.metadata["in_r"]]
    assert [name for name, _ in formals] == [field.name for field in in_r]
    for (name, r_default), field in zip(formals, in_r):
        assert _same(r_default, KD_TRAIN_DEFAULTS.get(name, field.default)), (name, r_default)


def test_kd_compare_takes_run_comparisons_arguments_with_their_defaults():
    formals = _r_formals("compare.R", "kd_compare")
    parameters = inspect.signature(run_comparison).parameters
    assert [name for name, _ in formals] == list(parameters)
    options = {field.name for field in dataclasses.fields(TrainingOptions)}
    assert {"epochs", "global_batch_size", "data", "seed", "learning_rate", "engine"} <= options & set(parameters)
    for name, r_default in formals:
        assert _same(r_default, parameters[name].default), (name, r_default)


def test_the_recorded_options_are_keys_of_the_result_record():
    from kerasdist.result import TrainingResult

    recorded = TrainingOptions(epochs=2, global_batch_size=32, seed=5).recorded()
    assert recorded == {"epochs": 2, "global_batch_size": 32, "seed": 5, "backend": "tensorflow"}
    assert set(recorded) <= {field.name for field in dataclasses.fields(TrainingResult)}
