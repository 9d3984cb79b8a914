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
