"""Bounded waits on cluster peers: resolve their hosts up front, and end a task whose peers went silent.

TensorFlow's gRPC channels retry an unresolvable host forever, and a
coordination call to a stopped (SIGSTOP) chief has no deadline, so either
would hang a worker. ``resolve_hosts`` fails at once for a host that does not
resolve; ``PeerWatchdog`` ends the process with one line naming the peers it
waits for when training makes no progress for a timeout.
"""

import os
import socket
import sys
import threading
import time

from kerasdist.errors import KerasdistError

DEFAULT_PEER_TIMEOUT_S = 60
_PROBE_TIMEOUT_S = 2.0
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
    now = time.monotonic()
    for watchdog in _watchdogs:
        watchdog.last_progress = now


class PeerWatchdog:
    """End this process with one line if training makes no progress for ``timeout_s``.

    In synchronous training every step waits for every peer, so no progress
    for that long means a peer stopped, hung or became unreachable. The line
    names each peer and what a connection attempt to it shows; the process
    then exits with status 1 at once (``os._exit``: TensorFlow's own shutdown
    would wait on the silent peer too).

    Args:
        task: this process's ``ClusterTask``.
        timeout_s: seconds without ``note_progress()`` before giving up.
        cleanup: called before exiting (e.g. to delete a temporary directory).

    Example:
        >>> with PeerWatchdog(task, timeout_s=60):  # doctest: +SKIP
        ...     run_training(...)                     # the loop calls note_progress()
    """

    def __init__(self, task, timeout_s=DEFAULT_PEER_TIMEOUT_S, cleanup=None):
        self.task, self.timeout_s, self.cleanup = task, timeout_s, cleanup
        self.last_progress = time.monotonic()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self):
        self.last_progress = time.monotonic()
        _watchdogs.append(self)
        self._thread.start()
        return self

    def __exit__(self, *exc_info):
        self._stopped.set()
        _watchdogs.remove(self)

    def _watch(self):
        while not self._stopped.wait(min(1.0, self.timeout_s / 4)):
            if time.monotonic() - self.last_progress > self.timeout_s:
                self._give_up()

    def _give_up(self):
        peers = "; ".join(f"{name} at {address} ({probe(address)})" for name, address in _peers(self.task))
        print(f"kerasdist: error: {self.task.name} made no progress for {self.timeout_s:g} s waiting for "
              f"its peers: {peers}. Restart the missing task(s) or stop all and rerun the same command to "
              "resume from the last checkpoint", file=sys.stderr, flush=True)
        if self.cleanup:
            self.cleanup()
        sys.stdout.flush()
        os._exit(1)


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
    except socket.timeout:
        return f"no answer to a connection within {timeout_s:g} s: unreachable"
    except OSError as error:
        return f"unreachable: {error.strerror or error}"
