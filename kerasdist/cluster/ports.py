"""Loopback ports for a local cluster: free ones, and a check that a task's port is free."""

import errno
import socket

from kerasdist.errors import KerasdistError

LOOPBACK = "127.0.0.1"


def local_cluster(num_workers, ports=None, evaluator=False):
    """A cluster of ``num_workers`` workers (and optionally an evaluator) on 127.0.0.1.

    Args:
        num_workers: how many training workers (worker 0 is the chief).
        ports: the ports to use, one per worker (then one for the evaluator);
            None picks free ones.
        evaluator: add an "evaluator" task.

    Returns:
        The ``cluster`` dict of a ``TF_CONFIG``.

    Raises:
        KerasdistError: for a bad count, the wrong number of ports, or a port in use.

    Example:
        >>> local_cluster(2, ports=[23456, 23457])  # doctest: +SKIP
        {'worker': ['127.0.0.1:23456', '127.0.0.1:23457']}
    """
    if not isinstance(num_workers, int) or num_workers < 1:
        raise KerasdistError(f"workers must be an integer >= 1. Received: workers={num_workers!r}")
    needed = num_workers + (1 if evaluator else 0)
    if ports is None:
        ports = free_ports(needed)
    elif len(ports) != needed:
        raise KerasdistError(
            f"give one port per task: {needed} for {num_workers} worker(s)"
            f"{' and the evaluator' if evaluator else ''}. Received: ports={list(ports)}"
        )
    for port in ports:
        check_port_free(LOOPBACK, port)
    cluster = {"worker": [f"{LOOPBACK}:{port}" for port in ports[:num_workers]]}
    if evaluator:
        cluster["evaluator"] = [f"{LOOPBACK}:{ports[num_workers]}"]
    return cluster


def free_ports(count):
    """``count`` distinct TCP ports that are free on 127.0.0.1 right now."""
    sockets = []
    try:
        for _ in range(count):
            probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            probe.bind((LOOPBACK, 0))
            sockets.append(probe)
        return [probe.getsockname()[1] for probe in sockets]
    finally:
        for probe in sockets:
            probe.close()


def check_port_free(host, port):
    """Raise ``KerasdistError`` if ``host:port`` is taken on this machine (other hosts are not checked)."""
    probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        probe.bind((host, int(port)))
    except OSError as error:
        if error.errno == errno.EADDRINUSE:
            raise KerasdistError(
                f"port {port} on {host} is already in use (another worker or program holds it); "
                "choose other ports or let kerasdist pick free ones"
            ) from None
        # Not an address of this machine (a remote worker's entry): nothing to check here.
    finally:
        probe.close()
