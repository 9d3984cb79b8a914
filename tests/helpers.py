"""Helpers for tests that run the real command line in a subprocess."""

import json
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import tensorflow as tf


def kerasdist_command(*arguments):
    """The argv for ``python -m kerasdist ARGUMENTS`` in this interpreter."""
    return [sys.executable, "-m", "kerasdist", *map(str, arguments)]


def run_cli(*arguments, timeout=300):
    """Run the CLI to completion; return the CompletedProcess (text output)."""
    return subprocess.run(kerasdist_command(*arguments), capture_output=True, text=True, timeout=timeout)


def run_pytest(*arguments, prefix=(), environment=None, timeout=900):
    """Run pytest on ``arguments`` in a fresh process, as a test run of its own (its own user state, no xdist).

    Args:
        arguments: pytest's arguments (test ids, notebooks, options).
        prefix: argv to run pytest under (e.g. ``unshare`` ...).
        environment: variables to set on top of this process's.
        timeout: seconds before the run is killed.

    Returns:
        The ``CompletedProcess`` (stdout and stderr as text).
    """
    inherited = {key: value for key, value in os.environ.items()
                 if key not in ("KERASDIST_TEST_USER_STATE", "PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT")}
    command = [*prefix, sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0", *arguments]
    return subprocess.run(command, cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                          env={**inherited, **(environment or {})}, capture_output=True, text=True, timeout=timeout)


def last_json_line(stdout):
    """The result record: the last line of stdout, parsed."""
    return json.loads(stdout.strip().splitlines()[-1])


def kill_when_logged(arguments, metrics_log, condition, timeout=240):
    """Start the CLI, SIGKILL it as soon as a metrics-log record satisfies ``condition``.

    Returns:
        The record that triggered the kill.
    """
    record, _ = signal_when_logged(arguments, metrics_log, condition, signal.SIGKILL, timeout)
    return record


def signal_when_logged(arguments, metrics_log, condition, signal_number, timeout=240):
    """Start the CLI, send it ``signal_number`` as soon as a metrics-log record satisfies ``condition``.

    Returns:
        ``(record, completed)``: the record that triggered the signal and the
        ended process (``returncode``, ``stdout``, ``stderr`` as text).
    """
    process = subprocess.Popen(kerasdist_command(*arguments), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    output = {}
    readers = [threading.Thread(target=lambda name=name: output.update({name: getattr(process, name).read()}),
                                daemon=True) for name in ("stdout", "stderr")]
    for reader in readers:
        reader.start()
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and process.poll() is None:
            for record in _records(metrics_log):
                if condition(record):
                    process.send_signal(signal_number)
                    process.wait(timeout=timeout)
                    for reader in readers:
                        reader.join(timeout=10)
                    return record, subprocess.CompletedProcess(process.args, process.returncode,
                                                               output.get("stdout"), output.get("stderr"))
            time.sleep(0.01)
        raise AssertionError(f"run ended (status {process.poll()}) before the signal point was logged")
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def _records(metrics_log):
    if not os.path.exists(metrics_log):
        return []
    records = []
    with open(metrics_log) as stream:
        for line in stream:
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return records


def checkpoint_tensors(checkpoint_prefix):
    """Every number stored in a checkpoint (weights, optimizer state, run position), by name.

    ``save_counter`` is left out: it counts saves, which differ when a run was interrupted;
    so is the run's identity (a string, the same for every checkpoint of a run).
    """
    reader = tf.train.load_checkpoint(checkpoint_prefix)
    names = [n for n in reader.get_variable_to_shape_map()
             if n.endswith(".ATTRIBUTES/VARIABLE_VALUE") and not n.startswith(("save_counter", "identity"))]
    return {name: np.asarray(reader.get_tensor(name)) for name in names}
