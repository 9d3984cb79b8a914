"""The peer watchdog's own process: ends a task that made no progress for a timeout, naming its peers.

It runs beside a worker as ``python -I watchdog_process.py CONFIG`` and imports
the standard library and psutil alone (no TensorFlow), because TensorFlow can block the
worker's Python threads while it waits for a peer (joining the cluster holds
the interpreter lock). The worker writes a byte to the watchdog's stdin
whenever training moves on; seconds in which the worker used the CPU (loading
data, tracing on a crowded machine) count too, and the clock pauses while
the worker itself is stopped (SIGSTOP, Ctrl-Z). After ``timeout_s`` without
either, it prints one line naming each peer and what a connection attempt to
it shows, deletes the worker's temporary directory and SIGKILLs the worker.
When the worker ends, its stdin closes and the watchdog ends too.
"""

import json
import os
import select
import shutil
import signal
import socket
import sys
import time

import psutil

_PROBE_TIMEOUT_S = 2.0
# A second in which the worker used more CPU than this share of it was local work, not waiting:
# a task blocked on a silent peer uses almost none.
_BUSY_CPU_SHARE = 0.1
# Stopped by a signal (SIGSTOP, Ctrl-Z) or by a tracer: either way the process waits, not for its peers.
STOPPED = (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP)


def describe(peers, timeout_s=_PROBE_TIMEOUT_S):
    """``peers`` (``[(name, "host:port"), ...]``) with what a connection attempt to each shows.

    Example:
        >>> describe([("worker 1", "127.0.0.1:1")])
        'worker 1 at 127.0.0.1:1 (refuses connections: not running)'
    """
    return "; ".join(f"{name} at {address} ({probe(address, timeout_s)})" for name, address in peers)


def probe(address, timeout_s=_PROBE_TIMEOUT_S):
    """What a TCP connection to ``host:port`` shows, in words.

    Example:
        >>> probe("127.0.0.1:1")
        'refuses connections: not running'
    """
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            return "accepts connections but does not answer: stopped or hung"
    except ConnectionRefusedError:
        return "refuses connections: not running"
    except TimeoutError:
        return f"no answer to a connection within {timeout_s:g} s: unreachable"
    except OSError as error:
        return f"unreachable: {error.strerror or error}"


def process_state(pid):
    """``(stopped, cpu seconds)`` of process ``pid``: stopped by a signal (SIGSTOP, Ctrl-Z), CPU time so far.

    ``(False, 0.0)`` for a process that is gone.

    Example:
        >>> process_state(os.getpid())[0]
        False
    """
    try:
        process = psutil.Process(pid)
        with process.oneshot():
            times = process.cpu_times()
            return process.status() in STOPPED, times.user + times.system
    except psutil.Error:
        return False, 0.0


def watch(pid, name, peers, timeout_s, cleanup=None, beats=sys.stdin):
    """Watch worker ``pid`` until its beats end (return 0) or it stalls ``timeout_s`` (kill it, return 1)."""
    interval = min(1.0, timeout_s / 4)
    last_progress, cpu_before, checked = time.monotonic(), process_state(pid)[1], time.monotonic()
    descriptor = beats.fileno()
    while True:
        ready, _, _ = select.select([descriptor], [], [], interval)
        now = time.monotonic()
        if ready:
            if not os.read(descriptor, 4096):
                return 0  # the worker ended or stopped watching
            last_progress = now
        stopped, cpu_now = process_state(pid)
        if stopped or cpu_now - cpu_before > _BUSY_CPU_SHARE * (now - checked):
            last_progress = now  # a stopped worker waits for SIGCONT, not for its peers
        cpu_before, checked = cpu_now, now
        if now - last_progress > timeout_s:
            print(f"kerasdist: error: {name} made no progress for {timeout_s:g} s waiting for its peers: "
                  f"{describe(peers)}. Restart the missing task(s) or stop all and rerun the same command to "
                  "resume from the last checkpoint", file=sys.stderr, flush=True)
            if cleanup:
                shutil.rmtree(cleanup, ignore_errors=True)
            os.kill(pid, signal.SIGKILL)
            return 1


if __name__ == "__main__":
    config = json.loads(sys.argv[1])
    sys.exit(watch(config["pid"], config["name"], config["peers"], config["timeout_s"],
                   config.get("cleanup")))
