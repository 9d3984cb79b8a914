"""Tests for kerasdist/cli.py: help, the --json contract, and one-line user errors with exit 2."""

import json

import numpy as np
import pytest

from helpers import last_json_line, run_cli
from kerasdist import cli


@pytest.mark.parametrize("command", ["devices", "train", "compare"])
def test_every_subcommand_has_help(command, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main([command, "--help"])
    assert exit_info.value.code == 0
    assert f"usage: kerasdist {command}" in capsys.readouterr().out


def test_devices_json_is_the_last_line(capsys):
    assert cli.main(["devices", "--replicas", "2", "--json"]) == 0
    out = capsys.readouterr().out
    assert "MirroredStrategy() with no device list would use" in out
    assert len(json.loads(out.strip().splitlines()[-1])["logical"]) >= 2


def _bad_npz(tmp_path):
    path = tmp_path / "flat.npz"
    np.savez(path, x_train=np.zeros((20, 10)), y_train=np.zeros(20), x_test=np.zeros((5, 10)),
             y_test=np.zeros(5))
    return path


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["--replicas", "0"], "replicas must be an integer >= 1"),
        (["--replicas", "4"], "restart the kernel (or process)"),
        (["--replicas", "2", "--global-batch-size", "63"], "must be divisible by replicas"),
        (["--strategy", "mirroredd"], "unknown strategy"),
        (["--strategy", "parameter_server"], "needs a cluster"),
        (["--strategy", "tpu"], "needs a TPU"),
        (["--data", "missing/mnist.npz"], "data file not found"),
        (["--data", "BAD_NPZ"], "x_train must be of shape"),
        (["--epochs", "0"], "epochs must be an integer >= 1"),
        (["--checkpoint-dir", "UNWRITABLE"], "is not writable"),
    ],
)
def test_user_errors_print_one_line_and_exit_2(tmp_path, capsys, arguments, message):
    blocker = tmp_path / "file"
    blocker.write_text("")
    replace = {"BAD_NPZ": str(_bad_npz(tmp_path)), "UNWRITABLE": str(blocker / "ckpt")}
    argv = ["train", "--data", "sample", *[replace.get(a, a) for a in arguments]]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("kerasdist: error: ") and message in err[0], err


@pytest.mark.slow
@pytest.mark.xdist_group("training")
def test_train_json_subprocess_has_the_record_as_last_line_and_no_traceback(tmp_path):
    completed = run_cli("train", "--epochs", "1", "--data", "sample", "--checkpoint-dir", tmp_path, "--json")
    assert completed.returncode == 0, completed.stderr
    assert "Data: 5,000-digit sample of real MNIST" in completed.stdout
    assert "Number of devices: 1" in completed.stdout
    record = last_json_line(completed.stdout)
    assert (record["epochs"], record["epochs_run"], record["initial_epoch"]) == (1, 1, 0)
    rejected = run_cli("train", "--epochs", "2", "--seed", "5", "--data", "sample", "--checkpoint-dir", tmp_path)
    assert rejected.returncode == 2
    assert "Traceback" not in rejected.stderr
    assert rejected.stderr.strip().splitlines() == [
        f"kerasdist: error: {tmp_path} was written with seed=0 but this run has seed=5; "
        "resume with the same value or use a new --checkpoint-dir"
    ]
