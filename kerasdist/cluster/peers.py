"""A task's peers: their addresses, their hosts resolved up front (bounded), and what a connection shows.

TensorFlow's gRPC channels retry an unresolvable host forever, so
``resolve_hosts`` fails at once for a host that does not resolve, and within a
timeout for one whose name service does not answer.
"""

import socket
import threading
import time

from kerasdist.cluster import watchdog_process
from kerasdist.errors import ClusterError, KerasdistError

DEFAULT_PEER_TIMEOUT_S = 60

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
    for name, address in peer_addresses(task, include_self=True):
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


def peer_addresses(task, include_self=False):
    """``(name, address)`` of each training task (chief, workers), e.g. ``("worker 1", "host:2223")``."""
    peers = []
    for job, addresses in task.training_cluster().items():
        for index, address in enumerate(addresses):
            if include_self or (job, index) != (task.task_type, task.task_index):
                peers.append((f"{job} {index}", address))
    return peers


def describe_peers(task):
    """Each peer of ``task`` with what a connection attempt to it shows, e.g. for an error line.

    Example:
        >>> from kerasdist.cluster import ClusterTask
        >>> describe_peers(ClusterTask({"worker": ["127.0.0.1:2222", "127.0.0.1:1"]}, "worker", 0))
        'worker 1 at 127.0.0.1:1 (refuses connections: not running)'
    """
    return watchdog_process.describe(peer_addresses(task))
