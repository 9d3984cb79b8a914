"""The command-line and result-record contract: ``--help`` of every command and the record's keys.

``tests/data/contract.json`` was written from the code before the architecture work; a change to the
command line or the record shows here as a difference to review (then regenerate the file on purpose).
"""

import json
import os

import pytest

from kerasdist import cli

CONTRACT = os.path.join(os.path.dirname(__file__), "data", "contract.json")
COMMANDS = ["", "devices", "train", "compare", "worker", "launch", "slurm-script", "doctor"]


def help_text(command, capsys, monkeypatch):
    """What ``kerasdist [COMMAND] --help`` prints, at a fixed terminal width."""
    monkeypatch.setenv("COLUMNS", "100")
    with pytest.raises(SystemExit) as exit_info:
        cli.main([command, "--help"] if command else ["--help"])
    assert exit_info.value.code == 0
    return capsys.readouterr().out


def record_shape(record):
    """The keys of a result record and of its nested dicts (values vary from run to run)."""
    return {"keys": sorted(record), **{name: sorted(record[name]) for name in
                                       ("history", "steps", "test", "data_source")}}


@pytest.fixture(scope="module")
def contract():
    with open(CONTRACT, encoding="utf-8") as stream:
        return json.load(stream)


@pytest.mark.parametrize("command", COMMANDS)
def test_help_is_unchanged(command, contract, capsys, monkeypatch):
    assert help_text(command, capsys, monkeypatch) == contract["help"][command or "kerasdist"]


def test_result_record_keys_are_unchanged(contract, sample_data):
    from kerasdist import run_training

    record = json.loads(json.dumps(run_training(epochs=1, data=sample_data, verbose=0).to_dict()))
    assert record_shape(record) == contract["record"]


# What ``import kerasdist`` offers; the R package, the lessons and users' scripts call these names.
PUBLIC = ["KerasdistError", "TrainingOptions", "TrainingResult", "configure_replicas", "cpu_bfloat16_instructions",
          "describe_devices", "load_mnist", "make_strategy", "matmul_flops_per_s", "run_comparison", "run_training",
          "training_flops_per_sample"]


def test_the_public_names_are_unchanged_and_each_one_resolves():
    import kerasdist

    assert sorted(kerasdist.__all__) == PUBLIC
    assert [getattr(kerasdist, name).__name__ for name in PUBLIC] == PUBLIC


def test_every_module_the_r_package_imports_exists():
    import importlib
    import re

    r_code = os.path.join(os.path.dirname(os.path.dirname(__file__)), "r", "R")
    named = set()
    for name in os.listdir(r_code):
        with open(os.path.join(r_code, name), encoding="utf-8") as stream:
            named.update(re.findall(r'import\("(kerasdist[\w.]*)"', stream.read()))
    assert "kerasdist.course.exercises" in named
    for module in sorted(named):
        importlib.import_module(module)
