"""Bounded waits on cluster peers: resolve their hosts up front, and end a task whose peers went silent.

TensorFlow's gRPC channels retry an unresolvable host forever, and a
coordination call to a stopped (SIGSTOP) chief has no deadline, so either
would hang a worker. ``resolve_hosts`` fails at once for a host that does not
resolve; ``PeerWatchdog`` ends the process with one line naming the peers it
waits for when training makes no progress for a timeout (from a process of
its own: ``kerasdist.watchdog``).
"""

import json
import os
import socket
import subprocess
import sys
import threading
import time

from kerasdist import watchdog
from kerasdist.errors import KerasdistError

DEFAULT_PEER_TIMEOUT_S = 60
_watchdogs = []  # the running watchdogs: note_progress() feeds them


class ClusterError(RuntimeError):
    """A cluster failure at run time (a peer unreachable or stopped, no checkpoint came); the CLI exits 1."""


def resolve_hosts(task, timeout_s=DEFAULT_PEER_TIMEOUT_S):
    """Resolve the host of every training task in ``task``'s cluster, waiting at most ``timeout_s`` in all.

    Args:
        task: a ``kerasdist.cluster.ClusterTask``.
        timeout_s: the longest wait for name resolution.

    Raises:
        KerasdistError: naming the task and host, for a host name that does not exist.
        ClusterError: naming them, if resolution did not finish within ``timeout_s``.

    Example:
        >>> from kerasdist.cluster import ClusterTask
        >>> resolve_hosts(ClusterTask({"worker": ["localhost:2222"]}, "worker", 0))
    """
    answers, threads = {}, []
    for name, address in _peers(task, include_self=True):
        host = address.rpartition(":")[0].strip("[]")
        thread = threading.Thread(target=_resolve, args=(host, answers, name), daemon=True)
        thread.start()
        threads.append((name, address, thread))
    deadline = time.monotonic() + timeout_s
    for name, address, thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
        if thread.is_alive():
            raise ClusterError(
                f"{task.name}: the host of {name} ({address}) did not resolve within {timeout_s:g} s; "
                "check the network and DNS, or raise --peer-timeout-s"
            )
        if isinstance(answers.get(name), OSError):
            raise KerasdistError(
                f"TF_CONFIG names a host that does not resolve: {name} at {address} "
                f"({answers[name].strerror or answers[name]}); fix the address in TF_CONFIG. "
                f"Received: {address!r}"
            )


def _resolve(host, answers, name):
    try:
        answers[name] = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError as error:
        answers[name] = error


def _peers(task, include_self=False):
    """``(name, address)`` of each training task (chief, workers), e.g. ``("worker 1", "host:2223")``."""
    peers = []
    for job, addresses in task.training_cluster().items():
        for index, address in enumerate(addresses):
            if include_self or (job, index) != (task.task_type, task.task_index):
                peers.append((f"{job} {index}", address))
    return peers


def note_progress():
    """Tell the running watchdogs (if any) that training moved on; the loop calls it after each call."""
    for running in _watchdogs:
        running.beat()


class PeerWatchdog:
    """End this process with one line if training makes no progress for ``timeout_s``.

    In synchronous training every step waits for every peer, so no progress
    for that long means a peer stopped, hung or became unreachable. The
    watching runs in a small process of its own (``kerasdist/watchdog.py``),
    since TensorFlow can block this process's Python threads while it waits
    for a peer; it names each peer and what a connection attempt to it shows,
    then SIGKILLs this process (TensorFlow's own shutdown would wait on the
    silent peer too).

    Args:
        task: this process's ``ClusterTask``.
        timeout_s: seconds without progress before giving up.
        cleanup: a directory to delete before the process is ended (e.g. a temporary copy).

    Example:
        >>> with PeerWatchdog(task, timeout_s=60):  # doctest: +SKIP
        ...     run_training(...)                     # the loop calls note_progress()
    """

    def __init__(self, task, timeout_s=DEFAULT_PEER_TIMEOUT_S, cleanup=None):
        self.config = {"pid": os.getpid(), "name": task.name, "peers": _peers(task), "timeout_s": timeout_s,
                       "cleanup": cleanup}
        self._process = None
        self._last_beat = 0.0

    def __enter__(self):
        self._process = subprocess.Popen([sys.executable, watchdog.__file__, json.dumps(self.config)],
                                         stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
        os.set_blocking(self._process.stdin.fileno(), False)
        _watchdogs.append(self)
        return self

    def beat(self):
        """Record progress (at most a few times a second)."""
        now = time.monotonic()
        if now - self._last_beat > 0.2:
            self._last_beat = now
            try:
                os.write(self._process.stdin.fileno(), b".")
            except (BlockingIOError, BrokenPipeError):
                pass  # a full pipe already holds beats; a gone watchdog cannot take them

    def __exit__(self, *exc_info):
        _watchdogs.remove(self)
        self._process.stdin.close()
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()


def describe_peers(task):
    """Each peer of ``task`` with what a connection attempt to it shows, e.g. for an error line.

    Example:
        >>> from kerasdist.cluster import ClusterTask
        >>> describe_peers(ClusterTask({"worker": ["127.0.0.1:2222", "127.0.0.1:1"]}, "worker", 0))
        'worker 1 at 127.0.0.1:1 (refuses connections: not running)'
    """
    return watchdog.describe(_peers(task))
