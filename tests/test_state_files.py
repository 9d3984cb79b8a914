"""What kerasdist reads back from a checkpoint directory, in any state: recovered in one line, or one error line.

A finished 1-epoch run is made once; each case copies it, damages one state file
and reruns ``kerasdist train`` in this process (the command line's own ``main``),
so that hypothesis can try many damaged files in seconds each.
"""

import contextlib
import hashlib
import io
import json
import os
import shutil
import subprocess
import uuid

import keras
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kerasdist import cli
from kerasdist.engines import choice as engines
from kerasdist.engines.train import run_training
from kerasdist.state import files
from kerasdist.state.checkpoint import RUN_CONFIG_FILE

CHECKPOINT = "ckpt-52"  # 3,333 training digits / 64 per step: step 52 ends epoch 1
STATE_FILES = ("run_config.json", "metrics.jsonl", "checkpoint", f"{CHECKPOINT}.index",
               f"{CHECKPOINT}.data-00000-of-00001", "kerasdist.lock")
TRAIN = ("train", "--replicas", "1", "--data", "sample", "--engine", "fit", "--json")
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=8,
)
CORRUPTIONS = st.one_of(
    st.tuples(st.just("truncate"), st.floats(0, 0.99)),
    st.tuples(st.just("flip bytes"), st.lists(st.tuples(st.floats(0, 0.999), st.integers(1, 255)),
                                              min_size=1, max_size=6)),
    st.tuples(st.just("other JSON"), JSON_VALUES),
    st.tuples(st.just("binary"), st.binary(min_size=1, max_size=300)),
    st.tuples(st.sampled_from(["empty", "directory", "removed"]), st.none()),
)


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, sample_data):
    """A checkpoint directory of a finished 1-epoch run, and its result record."""
    directory = tmp_path_factory.mktemp("finished") / "run"
    result = run_training(replicas=1, epochs=1, data=sample_data, checkpoint_dir=str(directory), verbose=0)
    return directory, result.to_dict()


def damage(path, kind, value):
    """Damage the file at ``path`` in the way ``kind`` names (``value`` parametrises it)."""
    content = path.read_bytes()
    if kind == "truncate":
        path.write_bytes(content[: int(len(content) * value)])
    elif kind == "flip bytes":
        changed = bytearray(content)
        for where, mask in value:
            changed[int(where * len(changed))] ^= mask
        path.write_bytes(bytes(changed))
    elif kind == "other JSON":
        path.write_text(json.dumps(value))
    elif kind == "binary":
        path.write_bytes(value)
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "directory":
        path.unlink()
        path.mkdir()
    elif kind == "removed":
        path.unlink()


def rerun(directory, epochs=1):
    """Run ``kerasdist train`` in this process; return (exit status, stdout, stderr)."""
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        status = cli.main([*TRAIN, "--epochs", str(epochs), "--checkpoint-dir", str(directory)])
    return status, stdout.getvalue(), stderr.getvalue()


def digests(directory):
    """sha256 of every checkpoint file in ``directory``, by name."""
    return {name: hashlib.sha256((directory / name).read_bytes()).hexdigest()
            for name in os.listdir(directory) if name.startswith("ckpt-") and (directory / name).is_file()}


def assert_contract(directory, name, before, status, stdout, stderr, reference):
    """Recovered (exit 0, the checkpoint's weights) or one error line (exit 2); no checkpoint file changed."""
    lines = stderr.splitlines()
    assert "Traceback" not in stderr
    assert all(line.startswith("kerasdist: ") for line in lines), stderr
    if status == 0:
        record = json.loads(stdout.strip().splitlines()[-1])
        assert record["test"] == reference["test"]  # evaluated with the restored weights
        assert not [line for line in lines if line.startswith("kerasdist: error")]
    else:
        assert status == cli.EXIT_USER_ERROR, stderr
        assert [line for line in lines if line.startswith("kerasdist: error: ")] == lines[-1:], stderr
        assert name in lines[-1] or "checkpoint" in lines[-1]
    after = digests(directory)
    assert {key: value for key, value in before.items() if key != name} == \
        {key: value for key, value in after.items() if key != name}, "a checkpoint file changed"
    if name in before and status != 0:
        assert after.get(name) == before[name] or not (directory / name).is_file()


def corrupt_and_rerun(finished_run, tmp_path, name, kind, value):
    source, reference = finished_run
    directory = tmp_path / f"case-{uuid.uuid4().hex[:8]}"
    shutil.copytree(source, directory)
    damage(directory / name, kind, value)
    before = digests(directory)
    status, stdout, stderr = rerun(directory)
    assert_contract(directory, name, before, status, stdout, stderr, reference)
    return status, stderr


@pytest.mark.parametrize("name", STATE_FILES)
@pytest.mark.parametrize("kind", ["empty", "directory", "removed", "binary", "truncate", "other JSON"])
def test_each_state_file_in_each_damaged_state_recovers_or_fails_in_one_line(finished_run, tmp_path,
                                                                               name, kind):
    value = {"binary": b"\xff\xfe\x00garbage\x81", "truncate": 0.5, "other JSON": [1, 2]}.get(kind)
    corrupt_and_rerun(finished_run, tmp_path, name, kind, value)


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(STATE_FILES), corruption=CORRUPTIONS)
def test_any_damage_to_any_state_file_recovers_or_fails_in_one_line(finished_run, tmp_path, name,
                                                                     corruption):
    corrupt_and_rerun(finished_run, tmp_path, name, *corruption)


def test_a_damaged_metrics_log_is_cut_to_its_good_records_and_kept_beside(finished_run, tmp_path):
    source, _ = finished_run
    directory = tmp_path / "run"
    shutil.copytree(source, directory)
    log = directory / "metrics.jsonl"
    good = log.read_text().splitlines()
    log.write_bytes("\n".join(good[:3]).encode() + b"\n\xff\xfe{not json\n[1]\n")
    status, _, stderr = rerun(directory, epochs=1)
    assert status == 0
    assert stderr.splitlines() == [(f"kerasdist: {log}: dropped 2 damaged line(s), kept 3 record(s) "
                                    f"(the damaged file is kept as {log}.damaged)")]
    assert log.read_text().splitlines() == good[:3]
    assert (directory / "metrics.jsonl.damaged").read_bytes().endswith(b"[1]\n")


def test_a_missing_run_config_is_written_again_from_the_checkpoint(finished_run, tmp_path):
    source, _ = finished_run
    directory = tmp_path / "run"
    shutil.copytree(source, directory)
    original = json.loads((directory / RUN_CONFIG_FILE).read_text())
    (directory / RUN_CONFIG_FILE).unlink()
    status, _, stderr = rerun(directory)
    assert status == 0, stderr
    assert "run_config.json was missing: written again from" in stderr
    assert json.loads((directory / RUN_CONFIG_FILE).read_text()) == original


def test_checkpoints_of_another_run_are_refused_without_run_config(finished_run, tmp_path, sample_data):
    source, _ = finished_run
    other = tmp_path / "other"
    run_training(replicas=1, epochs=1, data=sample_data, seed=7, checkpoint_dir=str(other), verbose=0)
    directory = tmp_path / "run"
    shutil.copytree(source, directory)
    (directory / RUN_CONFIG_FILE).unlink()
    for name in os.listdir(other):
        if name.startswith("ckpt-"):
            shutil.copy(other / name, directory / name)
    before = digests(directory)
    status, _, stderr = rerun(directory)
    assert status == cli.EXIT_USER_ERROR
    assert stderr.splitlines() == [
        (f"kerasdist: error: {directory} was written with seed=7 but this run has seed=0 (as {CHECKPOINT} "
         "records); resume with the same value or use a new --checkpoint-dir")]
    assert digests(directory) == before and not (directory / RUN_CONFIG_FILE).exists()


def test_a_damaged_checkpoint_index_is_rebuilt_and_training_goes_on(finished_run, tmp_path):
    source, _ = finished_run
    directory = tmp_path / "run"
    shutil.copytree(source, directory)
    (directory / "checkpoint").write_bytes(b"\x00\xff not a checkpoint state")
    status, stdout, stderr = rerun(directory, epochs=2)
    assert status == 0, stderr
    assert "from the 1 complete checkpoint(s) here: it was damaged" in stderr
    record = json.loads(stdout.strip().splitlines()[-1])
    assert (record["initial_epoch"], record["history"]["epoch"]) == (1, [0, 1])
    assert (directory / "checkpoint").read_text().startswith('model_checkpoint_path: "ckpt-104"')


@pytest.mark.parametrize("content", [b"[1, 2]", b"\xff\xfe", b'{"versions": 1, "answers": [1]}',
                                     b'{"answers": {"multi_worker_fit": {"bug_present": "yes"}}}', None])
def test_a_damaged_probe_cache_is_ignored(tmp_path, monkeypatch, content):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    path = tmp_path / "kerasdist" / "probes.json"
    path.parent.mkdir()
    if content is None:
        path.mkdir()
    else:
        path.write_bytes(content)
    assert engines.cached_answers() is None
    assert engines.engine_for("multi_worker")[0] == "loop"  # the bugs known for this Keras


@pytest.mark.parametrize("path, expected", [(None, None), ("[1]", "a JSON list, not an object"),
                                            ("\udcff", "not valid JSON")])
def test_read_json_object_names_what_is_wrong(tmp_path, path, expected):
    target = tmp_path / "state.json"
    if path is not None:
        target.write_bytes(path.encode("utf-8", "surrogateescape"))
    if expected is None:
        assert files.read_json_object(target, fix="x") is None
    else:
        with pytest.raises(ValueError, match=f"state.json is damaged \\({expected}.*; delete it$"):
            files.read_json_object(target, fix="delete it")


def test_a_full_device_is_a_state_write_error():
    with pytest.raises(files.StateWriteError, match=r"cannot write /dev/full \(No space left on device\)"):
        files.append_text("/dev/full", "x" * 10_000)


class FillTheDisk(keras.callbacks.Callback):
    """Fills the file system of ``directory`` with a file ``filler`` at one step of epoch 2, when
    epoch 1's checkpoint is on disk and epoch 2's is not yet."""

    def __init__(self, filler, at_step=3):
        super().__init__()
        self.filler, self.at_step = filler, at_step

    def on_train_batch_end(self, batch, logs=None):
        if batch == self.at_step and not self.filler.exists():
            with open(self.filler, "wb") as stream:
                with contextlib.suppress(OSError):  # ENOSPC: full
                    while True:
                        stream.write(b"\0" * 65536)
                        stream.flush()


@pytest.mark.slow
def test_a_disk_that_fills_up_during_a_metrics_write_names_the_last_checkpoint(small_disk, sample_data):
    directory = small_disk / "run"
    run_training(replicas=1, epochs=1, data=sample_data, checkpoint_dir=str(directory), verbose=0)
    filler = small_disk / "filler"

    with pytest.raises(files.StateWriteError) as stopped:
        run_training(replicas=1, epochs=2, data=sample_data, checkpoint_dir=str(directory), verbose=0,
                     callbacks=[FillTheDisk(filler)])

    assert str(stopped.value) == (
        f"cannot write {directory}/metrics.jsonl (No space left on device); the last good checkpoint is "
        f"{directory}/{CHECKPOINT}. Free space for {directory} (or make it writable) and rerun the same "
        "command to resume")
    filler.unlink()
    subprocess.run(["mount", "-o", "remount,size=64m", str(small_disk)], check=True, timeout=30)  # 2 checkpoints
    status, stdout, stderr = rerun(directory, epochs=2)
    assert status == 0, stderr
    record = json.loads(stdout.strip().splitlines()[-1])
    assert (record["initial_epoch"], record["history"]["epoch"]) == (1, [0, 1])
