"""Tests for kerasdist/cluster/ (config, ports, roles, launcher): TF_CONFIG checks, real local clusters, faults."""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from helpers import kerasdist_command, last_json_line, run_cli
from kerasdist import cli, cluster

TWO_WORKERS = {"worker": ["127.0.0.1:2222", "127.0.0.1:2223"]}
LAUNCH = ("launch", "--workers", 2, "--data", "sample", "--json")


def _tf_config(cluster_spec, task_type="worker", index=0):
    return json.dumps({"cluster": cluster_spec, "task": {"type": task_type, "index": index}})


@pytest.mark.parametrize("cluster_spec, task_type, index, expected", [
    (TWO_WORKERS, "worker", 0, ("worker 0", True, 2)),
    (TWO_WORKERS, "worker", 1, ("worker 1", False, 2)),
    ({"chief": ["127.0.0.1:2221"], **TWO_WORKERS}, "worker", 0, ("worker 0", False, 3)),
    ({"chief": ["127.0.0.1:2221"], **TWO_WORKERS}, "chief", 0, ("chief 0", True, 3)),
    ({**TWO_WORKERS, "evaluator": ["127.0.0.1:2224"]}, "evaluator", 0, ("evaluator 0", False, 2)),
])
def test_tf_config_roles(cluster_spec, task_type, index, expected):
    task = cluster.parse_tf_config(_tf_config(cluster_spec, task_type, index))
    assert (task.name, task.is_chief, task.num_workers) == expected
    assert "evaluator" not in task.training_cluster()


@pytest.mark.parametrize("text, message", [
    ("", "TF_CONFIG is not set"),
    ('{"cluster": {"worker": ["127.0.0.1:2222"]}, ', "TF_CONFIG is not valid JSON"),
    ("[1, 2]", 'must be an object with "cluster" and "task"'),
    (_tf_config(TWO_WORKERS, "worker", 2), "index must be 0..1 for the 2 worker task(s). Received: index=2"),
    (_tf_config(TWO_WORKERS, "worker", "1"), "Received: index='1'"),
    (_tf_config(TWO_WORKERS, "chief", 0), 'task type \'chief\' has no "chief" list'),
    (_tf_config({"evaluator": ["127.0.0.1:2224"]}, "evaluator", 0), 'needs a "worker" (or "chief") list'),
    (_tf_config({"ps": ["127.0.0.1:2220"], **TWO_WORKERS}), 'has a "ps" role'),
    (_tf_config({"worker": ["2222"]}), "addresses must look like host:port. Received: '2222'"),
    (_tf_config(TWO_WORKERS, "master", 0), "task type must be one of chief, worker, evaluator"),
])
def test_malformed_tf_config_exits_2_with_one_line(monkeypatch, capsys, text, message):
    monkeypatch.setenv("TF_CONFIG", text)
    assert cli.main(["worker", "--data", "sample"]) == cli.EXIT_USER_ERROR
    error = capsys.readouterr().err
    assert error.startswith("kerasdist: error: TF_CONFIG") and error.count("\n") == 1
    assert message in error


def test_malformed_tf_config_in_a_real_process_has_no_traceback():
    completed = subprocess.run(kerasdist_command("worker", "--data", "sample"), capture_output=True,
                               text=True, env=dict(os.environ, TF_CONFIG='{"cluster": '), timeout=120,
                               check=False)
    assert completed.returncode == 2
    assert completed.stderr.strip().splitlines() == [completed.stderr.strip()]
    assert "TF_CONFIG is not valid JSON" in completed.stderr


def test_port_in_use_gives_one_line(capsys):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = holder.getsockname()[1]
        free = cluster.free_ports(1)[0]
        assert cli.main(["launch", "--ports", f"{free},{taken}", "--data", "sample"]) == cli.EXIT_USER_ERROR
    error = capsys.readouterr().err
    assert error.startswith(f"kerasdist: error: port {taken} on 127.0.0.1 is already in use")
    assert error.count("\n") == 1


def test_local_cluster_is_on_loopback_with_distinct_ports():
    spec = cluster.local_cluster(3, evaluator=True)
    addresses = spec["worker"] + spec["evaluator"]
    assert all(address.startswith("127.0.0.1:") for address in addresses)
    assert len(set(addresses)) == 4


def _digests(record):
    return {worker["task"]: worker["weights_sha256"] for worker in record["workers"]}


@pytest.mark.slow
@pytest.mark.xdist_group("training")
def test_two_workers_train_identical_weights_and_a_rerun_resumes(uninterrupted_loop, tmp_path):
    checkpoints, temporary = tmp_path / "checkpoints", tmp_path / "tmp"
    temporary.mkdir()
    environment = dict(os.environ, TMPDIR=str(temporary))
    first = subprocess.run(
        kerasdist_command(*LAUNCH, "--epochs", 2, "--checkpoint-dir", checkpoints, "--evaluator"),
        capture_output=True, text=True, env=environment, timeout=300, check=False,
    )
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-2000:]
    record = last_json_line(first.stdout)
    assert (record["strategy"], record["engine"], record["replicas"]) == ("multi_worker", "loop", 2)
    assert record["history"]["epoch"] == [0, 1]
    digests = _digests(record)
    assert len(digests) == 2 and len(set(digests.values())) == 1
    assert "[worker 1] Final weights sha256" in first.stdout
    final_evaluation = record["evaluator"]["final"]
    assert final_evaluation["epoch"] == 2
    assert final_evaluation["val_loss"] == pytest.approx(record["history"]["val_loss"][-1], abs=1e-6)
    assert os.listdir(temporary) == []  # the non-chief worker deleted its own checkpoint directory
    # Two workers splitting each global batch follow the one-device curve.
    assert record["history"]["loss"] == pytest.approx(uninterrupted_loop.history["loss"], abs=1e-5)
    assert record["test"] == pytest.approx(uninterrupted_loop.test, abs=1e-5)

    # The rerun also compiles the gradient computation with XLA (under multi_worker the all-reduce stays out).
    rerun = run_cli(*LAUNCH, "--epochs", 3, "--checkpoint-dir", checkpoints, "--jit-compile")
    assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-2000:]
    resumed = last_json_line(rerun.stdout)
    assert (resumed["initial_epoch"], resumed["epochs_run"]) == (2, 1)
    assert "Epoch 3/3" in rerun.stdout and "Epoch 1/3" not in rerun.stdout
    assert resumed["history"]["epoch"] == [0, 1, 2]
    assert len(set(_digests(resumed).values())) == 1


class _LaunchWatcher:
    """A running ``kerasdist launch`` whose output lines are collected with their arrival times."""

    def __init__(self, *arguments):
        self.process = subprocess.Popen(kerasdist_command(*arguments), stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, text=True)
        self.lines = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for line in self.process.stdout:
            self.lines.append((time.monotonic(), line.rstrip("\n")))

    def wait_for(self, text, timeout=180):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for arrived, line in list(self.lines):
                if text in line:
                    return arrived, line
            if self.process.poll() is not None and not self._reader.is_alive():
                break
            time.sleep(0.05)
        raise AssertionError(f"{text!r} never appeared; output ends with {self.lines[-20:]}")

    def pid_of(self, task):
        _, line = self.wait_for(f"[launch] {task}: pid ")
        return int(line.split("pid ")[1].split(",")[0])

    def finish(self, timeout=120):
        try:
            return self.process.wait(timeout=timeout)
        finally:
            if self.process.poll() is None:
                self.process.kill()
            self._reader.join(timeout=10)


def _kill_one_worker_then_relaunch(tmp_path, victim, survivor):
    checkpoints = tmp_path / "checkpoints"
    arguments = (*LAUNCH, "--epochs", 4, "--save-every-steps", 10, "--checkpoint-dir", checkpoints)
    watcher = _LaunchWatcher(*arguments)
    victim_pid = watcher.pid_of(victim)
    watcher.wait_for("[worker 0] Epoch 2/4")
    time.sleep(0.3)  # mid-epoch: the chief has started epoch 2 and is saving every 10 steps
    os.kill(victim_pid, signal.SIGKILL)
    killed_at = time.monotonic()
    assert watcher.finish() != 0
    noticed_at, message = watcher.wait_for(f"[{survivor}] kerasdist: error: {survivor} lost contact")
    exited_at, _ = watcher.wait_for(f"[launch] {survivor} exited with status 1")
    assert exited_at - killed_at < 60
    assert "Rerun the same command to resume from the last checkpoint" in message

    relaunch = run_cli(*arguments)
    assert relaunch.returncode == 0, relaunch.stdout[-3000:] + relaunch.stderr[-2000:]
    record = last_json_line(relaunch.stdout)
    assert record["resumed_from_step"] > 0 and "[worker 1] Resuming from" in relaunch.stdout
    assert record["history"]["epoch"] == [0, 1, 2, 3]
    assert len(set(_digests(record).values())) == 1
    return noticed_at - killed_at


@pytest.mark.slow
@pytest.mark.xdist_group("training")
def test_killing_a_worker_stops_the_other_within_60_s_and_a_relaunch_completes(tmp_path):
    _kill_one_worker_then_relaunch(tmp_path, victim="worker 1", survivor="worker 0")


@pytest.mark.slow
@pytest.mark.xdist_group("training")
def test_killing_the_chief_stops_the_other_within_60_s_and_a_relaunch_completes(tmp_path):
    _kill_one_worker_then_relaunch(tmp_path, victim="worker 0", survivor="worker 1")


@pytest.mark.slow
@pytest.mark.xdist_group("training")
def test_workers_that_restored_different_checkpoints_refuse_to_train(tmp_path):
    # Without a shared --checkpoint-dir a non-chief cannot see the chief's checkpoints; training on would
    # silently give the workers different weights.
    done = run_cli("train", "--engine", "loop", "--epochs", 1, "--data", "sample",
                   "--checkpoint-dir", tmp_path / "trained")
    assert done.returncode == 0, done.stderr
    spec = {"worker": [f"127.0.0.1:{port}" for port in cluster.free_ports(2)]}
    workers = [
        subprocess.Popen(kerasdist_command("worker", "--epochs", 2, "--data", "sample", "--checkpoint-dir",
                                           tmp_path / ("trained" if index == 0 else "elsewhere")),
                         env=dict(os.environ, TF_CONFIG=_tf_config(spec, "worker", index)),
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        for index in (0, 1)
    ]
    for worker in workers:
        _, error = worker.communicate(timeout=180)
        assert worker.returncode == 2
        assert "the workers restored different checkpoints (global steps [0, 52])" in error


@pytest.mark.parametrize("command", ["worker", "launch"])
def test_worker_and_launch_have_help(command, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main([command, "--help"])
    assert exit_info.value.code == 0
    assert f"usage: kerasdist {command}" in capsys.readouterr().out


def test_a_worker_whose_peer_host_does_not_resolve_ends_at_once_with_one_line():
    port = cluster.free_ports(1)[0]
    spec = {"worker": [f"127.0.0.1:{port}", "no-such-host.invalid:2223"]}
    started = time.monotonic()
    completed = subprocess.run(kerasdist_command("worker", "--data", "sample", "--peer-timeout-s", 20),
                               capture_output=True, text=True, env=dict(os.environ, TF_CONFIG=_tf_config(spec)),
                               timeout=120, check=False)
    seconds = time.monotonic() - started
    assert completed.returncode == 2, completed.stderr[-2000:]
    assert completed.stderr.strip().splitlines() == [(
        "kerasdist: error: TF_CONFIG names a host that does not resolve: worker 1 at no-such-host.invalid:2223 "
        "(Name or service not known); fix the address in TF_CONFIG. Received: 'no-such-host.invalid:2223'"
    )]
    print(f"unresolvable host: worker ended after {seconds:.1f} s (start-up included)")
    assert seconds < 60, seconds  # TensorFlow's own retries never end; the check takes about a second


@pytest.mark.slow
def test_a_stopped_chief_ends_the_launch_within_the_peer_timeout_with_one_line(tmp_path):
    timeout = 20
    watcher = _LaunchWatcher(*LAUNCH, "--epochs", 50, "--checkpoint-dir", tmp_path, "--peer-timeout-s", timeout)
    chief = watcher.pid_of("worker 0")
    _, address = watcher.wait_for("[launch] worker 0: pid ")
    watcher.wait_for("[worker 1] Epoch 2/50")
    os.kill(chief, signal.SIGSTOP)
    stopped_at = time.monotonic()
    try:
        assert watcher.finish(timeout=timeout + 90) != 0
    finally:
        if watcher.process.poll() is None:
            os.kill(chief, signal.SIGKILL)
    ended_at = time.monotonic()
    # TensorFlow's heartbeat may notice first (a collective aborts), else kerasdist's watchdog does.
    _, line = watcher.wait_for("[worker 1] kerasdist: error: worker 1 ")
    assert re.fullmatch(
        r"\[worker 1\] kerasdist: error: worker 1 (made no progress for 20 s waiting for its peers|lost contact "
        r"with its peers \(.*\)): worker 0 at " + re.escape(address.split(", ")[-1]) + r" \(accepts connections "
        r"but does not answer: stopped or hung\)\. (Restart|Rerun) .*resume from the last checkpoint\.?", line
    ), line
    watcher.wait_for(f"[launch] worker 0 (pid {chief}) is stopped (SIGSTOP?) and cannot notice the failure")
    print(f"SIGSTOPped chief: launch ended {ended_at - stopped_at:.1f} s after the stop (peer timeout {timeout} s)")
    assert ended_at - stopped_at < timeout + 30


@pytest.mark.slow
@pytest.mark.xdist_group("training")
def test_sigterm_to_launch_stops_every_worker_at_the_same_step_and_a_rerun_resumes(tmp_path):
    arguments, watcher, _ = _launch_50_epochs_until_epoch_2(tmp_path)
    watcher.process.send_signal(signal.SIGTERM)
    assert watcher.finish(timeout=150) == 143
    assert watcher.lines[-1][1].startswith("kerasdist: launch stopped by SIGTERM: the workers saved")
    stops = [line for _, line in watcher.lines if "kerasdist: stopped by SIGINT at epoch" in line]
    assert len(stops) == 2, watcher.lines[-20:]
    steps = {line.split("kerasdist: stopped by SIGINT at ")[1].split(":")[0] for line in stops}
    assert len(steps) == 1  # both workers stopped at the same step
    _assert_a_rerun_resumes_to_3_epochs(arguments)


def test_launch_and_compare_on_a_directory_in_use_fail_at_once_naming_the_holder(tmp_path, capsys):
    holder = subprocess.Popen(
        [sys.executable, "-c", ("import sys, time; from kerasdist.state import locking; "
                                "lock = locking.hold(sys.argv[1]); print('held', flush=True); time.sleep(300)"),
         str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert cli.main(["launch", "--data", "sample", "--checkpoint-dir", str(tmp_path)]) == cli.EXIT_USER_ERROR
        assert cli.main(["compare", "--data", "sample", "--out", str(tmp_path)]) == cli.EXIT_USER_ERROR
    finally:
        holder.kill()
        holder.wait()
    errors = capsys.readouterr().err.splitlines()
    in_use = f"{tmp_path} is in use by another kerasdist run (pid {holder.pid}); wait for it to end or stop it"
    assert errors == [
        f"kerasdist: error: checkpoint directory {in_use}, or choose another --checkpoint-dir",
        f"kerasdist: error: output directory {in_use}, or choose another --out",
    ]
    assert os.listdir(tmp_path) == ["kerasdist.lock"]


@pytest.mark.slow
def test_a_worker_whose_peer_never_starts_ends_within_the_peer_timeout_naming_it():
    spec = {"worker": [f"127.0.0.1:{port}" for port in cluster.free_ports(2)]}
    started = time.monotonic()
    completed = subprocess.run(kerasdist_command("worker", "--data", "sample", "--peer-timeout-s", 15),
                               capture_output=True, text=True, env=dict(os.environ, TF_CONFIG=_tf_config(spec)),
                               timeout=180, check=False)
    seconds = time.monotonic() - started
    assert completed.returncode == -signal.SIGKILL, completed.stderr[-2000:]  # by its watchdog
    assert completed.stderr.strip().splitlines()[-1] == (
        f"kerasdist: error: worker 0 made no progress for 15 s waiting for its peers: worker 1 at "
        f"{spec['worker'][1]} (refuses connections: not running). Restart the missing task(s) or stop all and "
        "rerun the same command to resume from the last checkpoint"
    )
    print(f"missing peer: worker ended after {seconds:.1f} s (peer timeout 15 s, start-up included)")
    assert seconds < 15 + 60  # start-up (importing TensorFlow) on a busy machine takes the rest


@pytest.mark.slow
@pytest.mark.xdist_group("training")
def test_workers_end_when_launch_is_killed_and_a_rerun_resumes(tmp_path):
    arguments, watcher, pids = _launch_50_epochs_until_epoch_2(tmp_path)
    watcher.process.kill()  # SIGKILL: the launcher cannot pass anything on
    killed_at = time.monotonic()
    watcher.finish()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and any(_running(pid) for pid in pids):
        time.sleep(0.2)
    assert not any(_running(pid) for pid in pids), "workers outlived the killed launcher by 60 s"
    print(f"workers ended {time.monotonic() - killed_at:.1f} s after the launcher was killed")
    # They stopped cleanly: the last step they logged is the one they saved (no work lost to a crash).
    with open(tmp_path / "metrics.jsonl") as stream:
        last_logged = max(json.loads(line)["global_step"] for line in stream)
    assert f"ckpt-{last_logged}.index" in os.listdir(tmp_path)
    _assert_a_rerun_resumes_to_3_epochs(arguments)


@pytest.mark.slow
@pytest.mark.xdist_group("training")
def test_sigterm_to_each_worker_as_scancel_sends_it_stops_them_at_the_same_step(tmp_path):
    # TensorFlow's multi-worker runtime takes SIGTERM over; kerasdist installs its stop request again.
    _, watcher, pids = _launch_50_epochs_until_epoch_2(tmp_path)
    for pid in pids:
        os.kill(pid, signal.SIGTERM)
    assert watcher.finish(timeout=150) == 143
    stops = [line for _, line in watcher.lines if "kerasdist: stopped by SIGTERM" in line]
    assert len(stops) == 2, watcher.lines[-20:]
    assert len({line.split("SIGTERM ")[1].split(":")[0] for line in stops}) == 1  # the same step
    assert "Epoch 50/50" not in "\n".join(line for _, line in watcher.lines)


def _launch_50_epochs_until_epoch_2(checkpoint_dir, timeout_s=240):
    """Launch 2 workers for 50 epochs; return (arguments, watcher, worker pids) once a step of epoch 2 is logged.

    A stop then lands inside epoch 2, whatever the machine's load: at the end of the next call of 10 steps.
    """
    arguments = (*LAUNCH, "--save-every-steps", 100, "--steps-per-execution", 10, "--checkpoint-dir", checkpoint_dir)
    watcher = _LaunchWatcher(*arguments, "--epochs", 50)
    pids = [watcher.pid_of(f"worker {index}") for index in range(2)]
    watcher.wait_for("[worker 0] Epoch 2/50")
    log, deadline = checkpoint_dir / "metrics.jsonl", time.monotonic() + timeout_s
    while '"epoch": 1, "step"' not in (log.read_text() if log.exists() else ""):
        assert time.monotonic() < deadline, f"no step of epoch 2 logged in {timeout_s} s"
        time.sleep(0.05)
    return arguments, watcher, pids


def _assert_a_rerun_resumes_to_3_epochs(arguments):
    """The same launch with --epochs 3 resumes after epoch 1 and ends with identical workers."""
    rerun = run_cli(*arguments, "--epochs", 3)
    assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-2000:]
    record = last_json_line(rerun.stdout)
    assert record["resumed_from_step"] > 52 and record["history"]["epoch"] == [0, 1, 2]
    assert len(set(_digests(record).values())) == 1


def _running(pid):
    """Whether process ``pid`` exists and is not a zombie (an ended process nobody has reaped yet)."""
    try:
        with open(f"/proc/{pid}/stat") as stream:
            return stream.read().rpartition(")")[2].split()[0] != "Z"
    except FileNotFoundError:
        return False
