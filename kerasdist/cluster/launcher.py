"""Run N local workers (and an evaluator) as subprocesses on 127.0.0.1 and stream their output."""

import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import psutil

from kerasdist.cluster.config import tf_config
from kerasdist.cluster.ports import local_cluster
from kerasdist.cluster.watchdog_process import STOPPED

# Set for each task: how long it may run on after the launcher is gone (see interrupt.stop_when_parent_dies).
ORPHAN_GRACE_VARIABLE = "KERASDIST_ORPHAN_GRACE_S"
# The signals launch passes on to its tasks.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def launch(num_workers, worker_arguments, evaluator=False, ports=None, failure_grace_s=60,
           evaluator_grace_s=120, stop_grace_s=120):
    """Run ``num_workers`` local workers (and an evaluator) as subprocesses; stream their output.

    Each task runs ``python -m kerasdist worker`` with its own ``TF_CONFIG``
    on 127.0.0.1; every output line is printed with a ``[worker i]`` prefix.
    The tasks end when the launcher does, however it ends: killed, the
    launcher leaves none running (they stop at the next step and save).
    SIGINT and SIGTERM are passed on to every task once, as SIGINT (the
    workers stop at the same step and save); a second one stops the tasks at
    once. A task found stopped (SIGSTOP) after another failed is killed rather
    than waited for.

    Args:
        num_workers: how many workers (worker 0 is the chief).
        worker_arguments: command-line options for ``kerasdist worker``.
        evaluator: also run an evaluator task.
        ports: one port per task, or None for free ones.
        failure_grace_s: after a worker fails, how long the others may run
            before they are stopped (give them their peer timeout to notice).
        evaluator_grace_s: how long the evaluator may run on after the workers end.
        stop_grace_s: after a passed-on signal, how long the tasks may take to save and exit.

    Returns:
        ``(exit status, records)``: the worst worker's status (0 if all
        succeeded; 130 or 143 if all stopped after SIGINT or SIGTERM) and each
        task's result record by name (None if it wrote none).

    Example:
        >>> status, records = launch(2, ["--epochs", "2", "--data", "sample"])  # doctest: +SKIP
    """
    cluster = local_cluster(num_workers, ports, evaluator)
    names = [f"worker {index}" for index in range(num_workers)] + (["evaluator 0"] if evaluator else [])
    record_directory = tempfile.mkdtemp(prefix="kerasdist-launch-")
    processes, record_files, threads, print_lock = {}, {}, [], threading.Lock()
    forwarded = []  # the signal passed on to the tasks, if any
    previous_handlers = {}
    if threading.current_thread() is threading.main_thread():
        handler = functools.partial(_forward_signal, processes, forwarded, print_lock)
        previous_handlers = {number: signal.signal(number, handler) for number in STOP_SIGNALS}
    try:
        for name in names:
            record_files[name] = os.path.join(record_directory, name.replace(" ", "-") + ".json")
            processes[name] = _start_task(name, cluster, worker_arguments, record_files[name], stop_grace_s)
            threads.append(threading.Thread(target=_stream, daemon=True,
                                            args=(processes[name].stdout, f"[{name}] ", print_lock)))
            threads[-1].start()
            address = cluster[name.split()[0]][int(name.split()[1])]
            _print(print_lock, f"[launch] {name}: pid {processes[name].pid}, {address}")
        statuses = _wait(processes, evaluator_grace_s, failure_grace_s, print_lock, forwarded, stop_grace_s)
        records = {name: _read_record(record_file) for name, record_file in record_files.items()}
    except BaseException:
        _stop(list(processes.values()))
        raise
    finally:
        _clean_up(processes, previous_handlers, threads, record_directory)
    worst = max(status for name, status in statuses.items() if name.startswith("worker"))
    if forwarded and worst == 128 + signal.SIGINT:
        worst = 128 + forwarded[0][0]  # the workers stopped on the passed-on SIGINT; report what we got
    return worst, records


def _clean_up(processes, previous_handlers, threads, record_directory):
    """Close the tasks' stdin, restore the signal handlers, end the output threads, remove the records."""
    for process in processes.values():
        process.stdin.close()
    for number, previous in previous_handlers.items():
        signal.signal(number, previous)
    for thread in threads:
        thread.join(timeout=5)
    shutil.rmtree(record_directory, ignore_errors=True)


def _start_task(name, cluster, worker_arguments, record_file, stop_grace_s):
    """Start task ``name`` ("worker 1") as ``python -m kerasdist worker``; return its ``psutil.Popen``."""
    task_type, index = name.split()
    command = [sys.executable, "-m", "kerasdist", "worker", *worker_arguments, "--record-file", record_file]
    environment = dict(os.environ, TF_CONFIG=tf_config(cluster, task_type, int(index)),
                       PYTHONUNBUFFERED="1", **{ORPHAN_GRACE_VARIABLE: str(stop_grace_s)})
    # A session of its own: a Ctrl-C reaches the task once, passed on by the launcher. Its stdin is a
    # pipe the launcher never writes to: when the launcher dies, even by SIGKILL, the task sees the
    # pipe end and stops (interrupt.stop_when_parent_dies).
    return psutil.Popen(command, env=environment, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                        stderr=subprocess.STDOUT, text=True, errors="replace", bufsize=1,
                        start_new_session=True)


def _forward_signal(processes, forwarded, print_lock, signal_number, frame):
    """Pass the first SIGINT/SIGTERM on to every task; a second one stops them at once."""
    if forwarded:
        raise KeyboardInterrupt  # launch() stops the tasks on the way out
    forwarded.append((signal_number, time.monotonic()))
    _print(print_lock, f"[launch] {signal.Signals(signal_number).name}: passing it on to every task; "
                       "they stop after the current step and save (send it again to stop them at once)")
    for process in processes.values():
        if process.poll() is None:
            # SIGINT: a worker stops on it from its start; SIGTERM only once its strategy exists.
            process.send_signal(signal.SIGINT)


def _wait(processes, evaluator_grace_s, failure_grace_s, print_lock, forwarded=(), stop_grace_s=120):
    """Wait for every task; return each one's exit status.

    When a worker fails, the others get ``failure_grace_s`` to notice and exit
    on their own (they report the lost peer) before they are stopped, so a
    launch never hangs; a task that is stopped (SIGSTOP) is killed at once
    then, since it cannot notice. After a passed-on signal the tasks get
    ``stop_grace_s`` to save and exit. The evaluator gets
    ``evaluator_grace_s`` after the workers end to evaluate the last checkpoint.
    """
    pending, statuses, deadline = dict(processes), {}, None
    while pending:
        if forwarded and deadline is None:
            deadline = forwarded[0][1] + stop_grace_s
        for name, process in list(pending.items()):
            if process.poll() is None:
                if deadline is not None and not forwarded and _is_stopped(process):
                    _print(print_lock, f"[launch] {name} (pid {process.pid}) is stopped (SIGSTOP?) and "
                                       "cannot notice the failure: killing it")
                    process.kill()
                    process.wait()
                continue
            del pending[name]
            statuses[name] = _exit_status(process.returncode)
            if statuses[name]:
                _print(print_lock, f"[launch] {name} exited with status {_describe(process.returncode)}")
                if name.startswith("worker") and deadline is None:
                    deadline = time.monotonic() + failure_grace_s
        if pending and not any(name.startswith("worker") for name in pending) and deadline is None:
            deadline = time.monotonic() + (1 if any(statuses.values()) else evaluator_grace_s)
        if deadline is not None and time.monotonic() > deadline:
            _print(print_lock, f"[launch] stopping {', '.join(pending)}: still running after the others")
            _stop(list(pending.values()))
            statuses.update({name: _exit_status(process.returncode) for name, process in pending.items()})
            pending = {}
        time.sleep(0.2)
    return statuses


def _is_stopped(process):
    """Whether ``process`` (a ``psutil.Popen``) is stopped by a signal (SIGSTOP, Ctrl-Z) or a tracer."""
    try:
        return process.status() in STOPPED
    except psutil.Error:
        return False


def _exit_status(returncode):
    """A process's status as a shell reports it (killed by signal N -> 128 + N)."""
    return 128 - returncode if returncode < 0 else returncode


def _describe(returncode):
    if returncode < 0:
        return f"{128 - returncode} (killed by {signal.Signals(-returncode).name})"
    return str(returncode)


def _stream(stream, prefix, print_lock):
    for line in stream:
        _print(print_lock, prefix + line.rstrip("\n"))


def _print(print_lock, line):
    with print_lock:
        print(line, flush=True)


def _stop(processes, grace_s=5):
    """Terminate processes (``psutil.Popen``), then kill those still running after ``grace_s``."""
    running = [process for process in processes if process.poll() is None]
    for process in running:
        process.terminate()
    _, alive = psutil.wait_procs(running, timeout=grace_s)
    for process in alive:
        process.kill()
        process.wait()


def _read_record(path):
    try:
        with open(path) as stream:
            return json.load(stream)
    except (OSError, json.JSONDecodeError):
        return None
