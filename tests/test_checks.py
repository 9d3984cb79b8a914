"""Property-based tests of kerasdist/checks.py and options.py: random bad values at every edge give one line, exit 2, no file.

Hypothesis draws bad option values (out of range, NaN, inf, wrong types) and bad arrays, and drives
``run_training``, ``run_comparison``, the CLI in this process and, for a few examples, the real CLI
in a subprocess.
"""

import contextlib
import io
import math
import os
import re
import subprocess
import tempfile

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import kerasdist_command
from kerasdist import checks, cli, data, run_comparison, run_training
from kerasdist.engines.options import TrainingOptions
from kerasdist.errors import KerasdistError

# `<what> must be <rule>. Received: <name>=<value>; <what to do>`, all on one line.
MESSAGE = re.compile(r"^\S.* must be .+\. Received: [^=;]+=.*; \S.*$")
SEED_LIMIT = 2**32


def _not_finite():
    return st.sampled_from([math.nan, math.inf, -math.inf])


def _wrong_type():
    return st.one_of(
        st.text(max_size=5),
        st.booleans(),
        st.lists(st.integers(1, 3), max_size=2),
        st.just(None),
        st.complex_numbers(allow_nan=False, allow_infinity=False),
    )


# Bad values of each run_training option that the command line can also express (by its flag).
BAD_NUMBERS = {
    "seed": st.one_of(st.integers(max_value=-1), st.integers(min_value=SEED_LIMIT)),
    "replicas": st.integers(max_value=0),
    "epochs": st.integers(max_value=0),
    "global_batch_size": st.integers(max_value=0),
    "steps_per_execution": st.integers(max_value=0),
    "save_every_steps": st.integers(max_value=0),
    "learning_rate": st.one_of(_not_finite(), st.floats(max_value=0.0, allow_nan=False)),
    "warmup_epochs": st.one_of(_not_finite(), st.floats(max_value=-1e-9, allow_nan=False)),
}
BAD_IN_PYTHON = {
    **{name: st.one_of(bad, _wrong_type()) for name, bad in BAD_NUMBERS.items()},
    **{name: st.one_of(BAD_NUMBERS[name], _wrong_type().filter(lambda v: v is not None))
       for name in ("save_every_steps", "steps_per_execution")},  # None: the default
    "epochs": st.one_of(
        BAD_NUMBERS["epochs"], _not_finite(), st.floats(0.01, 1e6).filter(lambda x: x % 1), _wrong_type()
    ),
    "engine": st.text(max_size=8).filter(lambda text: text not in ("fit", "loop")),
    "verbose": st.integers().filter(lambda value: value not in (0, 1, 2)),
    "jit_compile": st.one_of(st.integers(), st.text(max_size=3), st.just(None)),
}
BAD_OPTION = st.sampled_from(sorted(BAD_NUMBERS)).flatmap(
    lambda name: st.tuples(st.just(name), BAD_NUMBERS[name])
)
BAD_ARGUMENT = st.sampled_from(sorted(BAD_IN_PYTHON)).flatmap(
    lambda name: st.tuples(st.just(name), BAD_IN_PYTHON[name])
)


def _assert_one_line(text):
    lines = text.strip().splitlines()
    assert len(lines) == 1, lines
    assert "Traceback" not in text
    return lines[0]


@settings(max_examples=150, deadline=None)
@given(BAD_ARGUMENT)
def test_run_training_rejects_bad_arguments_before_writing_anything(sample_data, bad):
    name, value = bad
    with tempfile.TemporaryDirectory() as workspace:
        checkpoints = os.path.join(workspace, "ckpt")
        with pytest.raises(KerasdistError) as error:
            run_training(**{"data": sample_data, "checkpoint_dir": checkpoints, "verbose": 0, name: value})
        assert MESSAGE.match(_assert_one_line(str(error.value))), str(error.value)
        assert name in str(error.value)
        assert os.listdir(workspace) == []


@settings(max_examples=60, deadline=None)
@given(
    BAD_ARGUMENT.filter(
        lambda bad: bad[0] not in ("replicas", "save_every_steps", "steps_per_execution", "jit_compile")
    )
)
def test_run_comparison_rejects_bad_arguments_before_training(sample_data, bad):
    name, value = bad
    with tempfile.TemporaryDirectory() as workspace:
        out = os.path.join(workspace, "results")
        with pytest.raises(KerasdistError) as error:
            run_comparison(**{"data": sample_data, "out_dir": out, "verbose": 0, name: value})
        assert MESSAGE.match(_assert_one_line(str(error.value))), str(error.value)
        assert os.listdir(workspace) == []


def _flag(name):
    return "--" + name.replace("_", "-")


def _run_main(argv):
    """cli.main in this process: (exit status, stderr)."""
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr):
        try:
            status = cli.main(argv)
        except SystemExit as exit_:  # argparse's own errors
            status = exit_.code
    return status, stderr.getvalue()


@settings(max_examples=100, deadline=None)
@given(BAD_OPTION, st.sampled_from(["fit", "loop"]))
def test_cli_train_prints_one_line_exits_2_and_writes_nothing(bad, engine):
    name, value = bad
    with tempfile.TemporaryDirectory() as workspace:
        checkpoints = os.path.join(workspace, "ckpt")
        status, stderr = _run_main(
            [
                "train",
                "--data",
                "sample",
                "--engine",
                engine,
                "--checkpoint-dir",
                checkpoints,
                f"{_flag(name)}={value}",
            ]
        )
        line = _assert_one_line(stderr)
        assert status == 2 and line.startswith("kerasdist: error: "), stderr
        assert MESSAGE.match(line.removeprefix("kerasdist: error: ")), line
        assert os.listdir(workspace) == []


@settings(max_examples=60, deadline=None)
@given(
    st.one_of(
        st.text(min_size=1, max_size=6).filter(lambda text: not _parses_as_int(text)),
        st.floats(allow_nan=False).filter(lambda x: x % 1).map(repr),
    )
)
def test_cli_values_that_are_not_numbers_give_one_line(text):
    with tempfile.TemporaryDirectory() as workspace:
        status, stderr = _run_main(["train", "--checkpoint-dir", workspace, f"--epochs={text}"])
        line = _assert_one_line(stderr)
        assert status == 2 and line.startswith("kerasdist: error: argument --epochs: "), stderr
        assert os.listdir(workspace) == []


def _parses_as_int(text):
    try:
        int(text)
    except ValueError:
        return False
    return True


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 4).flatmap(
        lambda count: st.tuples(
            st.just(count),
            st.one_of(
                st.lists(st.integers(1, 65535), min_size=count, max_size=count, unique=True).flatmap(
                    lambda ports: st.integers(0, len(ports) - 1).map(
                        lambda i: ports[:i] + [ports[0]] + ports[i:]
                    )
                ),
                st.lists(
                    st.one_of(st.integers(max_value=0), st.integers(min_value=65536)),
                    min_size=1,
                    max_size=count,
                ).map(lambda bad: bad + [23456 + i for i in range(count - len(bad))]),
            ),
        )
    )
)
def test_cli_launch_rejects_bad_ports_before_starting_workers(case):
    count, ports = case
    with tempfile.TemporaryDirectory() as workspace:
        status, stderr = _run_main(
            [
                "launch",
                "--workers",
                str(count),
                "--checkpoint-dir",
                workspace,
                f"--ports={','.join(map(str, ports))}",
            ]
        )
        line = _assert_one_line(stderr)
        assert status == 2 and MESSAGE.match(line.removeprefix("kerasdist: error: ")), line
        assert os.listdir(workspace) == []


@settings(max_examples=20, deadline=None)
@given(st.integers(max_value=0))
def test_cli_launch_rejects_worker_counts_below_one(workers):
    status, stderr = _run_main(["launch", f"--workers={workers}"])
    assert status == 2
    assert _assert_one_line(stderr).startswith(
        "kerasdist: error: workers must be an integer >= 1. Received: "
    )


# The command line checks its options before TensorFlow starts: each example takes about a second.
@settings(max_examples=10, deadline=None)
@given(BAD_OPTION)
def test_real_cli_subprocess_gives_one_line_exit_2_and_no_file(bad):
    name, value = bad
    with tempfile.TemporaryDirectory() as workspace:
        completed = subprocess.run(
            kerasdist_command(
                "train", "--data", "sample", "--checkpoint-dir", "ckpt", f"{_flag(name)}={value}"
            ),
            capture_output=True,
            text=True,
            timeout=120,
            cwd=workspace,
        )
        assert completed.returncode == 2, completed.stderr
        line = _assert_one_line(completed.stderr)
        assert MESSAGE.match(line.removeprefix("kerasdist: error: ")), line
        assert os.listdir(workspace) == []


@st.composite
def bad_images(draw):
    """(images, the rule they break): a bad shape, type, size, or one bad pixel among good ones."""
    count = draw(st.integers(1, 5))
    kind = draw(st.sampled_from(["pixel", "shape", "dtype", "empty"]))
    if kind == "shape":
        shape = draw(
            st.lists(st.integers(0, 30), max_size=3).filter(lambda s: tuple(s[1:]) not in ((28, 28), (784,)))
        )
        return np.zeros(shape, "float32"), "shape"
    if kind == "dtype":
        return draw(
            st.sampled_from(
                [np.full((count, 784), "1"), np.zeros((count, 784), bool), np.zeros((count, 784), complex)]
            )
        ), "real numbers"
    if kind == "empty":
        return np.zeros((0, 784), "float32"), "non-empty"
    images = np.full((count, 784), 0.5, "float64")
    pixel = draw(
        st.one_of(
            _not_finite(),
            st.floats(max_value=-1e-6, allow_nan=False, allow_infinity=False),
            st.floats(min_value=255.001, allow_nan=False, allow_infinity=False),
        )
    )
    images[draw(st.integers(0, count - 1)), draw(st.integers(0, 783))] = pixel
    return images, "finite" if not math.isfinite(pixel) else "within [0, 255]"


@st.composite
def bad_labels(draw):
    """(labels for 4 images, the rule they break)."""
    labels = np.arange(4, dtype="float64")
    kind = draw(st.sampled_from(["value", "dtype", "count"]))
    if kind == "dtype":
        return draw(
            st.sampled_from([labels.astype(str), labels.astype(complex), labels > 1])
        ), "whole numbers 0..9"
    if kind == "count":
        return draw(
            st.sampled_from([labels[:3], np.arange(5), labels.reshape(2, 2), np.float64(1)])
        ), "labels"
    labels[draw(st.integers(0, 3))] = draw(
        st.one_of(_not_finite(), st.floats(-1e9, 1e9).filter(lambda x: x % 1 or not 0 <= x <= 9))
    )
    return labels, "whole numbers 0..9"


@settings(max_examples=150, deadline=None)
@given(bad_images())
def test_bad_images_are_refused_in_one_line(case):
    images, rule = case
    with pytest.raises(KerasdistError) as error:
        checks.images(images, "x_train")
    message = _assert_one_line(str(error.value))
    assert MESSAGE.match(message) and rule in message and "x_train" in message, message


@settings(max_examples=150, deadline=None)
@given(bad_labels())
def test_bad_labels_are_refused_in_one_line(case):
    labels, rule = case
    with pytest.raises(KerasdistError) as error:
        checks.labels(labels, 4, "y_train")
    message = _assert_one_line(str(error.value))
    assert MESSAGE.match(message) and rule in message and "y_train" in message, message


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(["x_train", "y_train", "x_test", "y_test"]), st.data())
def test_bad_npz_files_are_refused_before_anything_is_written(sample_data, key, draws):
    arrays = {
        "x_train": (sample_data.x_train[:60] * 255).astype("uint8"),
        "y_train": sample_data.y_train[:60],
        "x_test": sample_data.x_test[:10],
        "y_test": sample_data.y_test[:10],
    }
    if key.startswith("x"):
        arrays[key] = draws.draw(bad_images())[0]
    else:
        arrays[key] = draws.draw(bad_labels())[0]
    with tempfile.TemporaryDirectory() as workspace:
        path = os.path.join(workspace, "bad.npz")
        np.savez(path, **arrays)
        with pytest.raises(KerasdistError) as error:
            run_training(data=path, checkpoint_dir=os.path.join(workspace, "ckpt"), verbose=0)
        assert MESSAGE.match(_assert_one_line(str(error.value))), str(error.value)
        assert os.listdir(workspace) == ["bad.npz"]


def test_good_values_pass_and_come_back_normalised(sample_data):
    options = TrainingOptions(replicas=2, epochs=3.0, global_batch_size=np.int64(64), seed=SEED_LIMIT - 1)
    assert (options.epochs, options.global_batch_size, options.seed) == (3, 64, SEED_LIMIT - 1)
    assert type(options.global_batch_size) is int
    raw = checks.images(np.full((2, 28, 28), 255, "uint8"), "x_train")
    assert raw.shape == (2, 784) and raw.dtype == np.float32 and raw.max() == 1.0
    assert checks.images(np.full((2, 784), 0.25), "x_train").max() == np.float32(0.25)
    assert data.checked(sample_data).x_train.shape == sample_data.x_train.shape
