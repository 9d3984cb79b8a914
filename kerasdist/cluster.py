"""The cluster: TF_CONFIG building and checking, loopback ports, multi-worker option checks.

What each task does is in ``kerasdist.roles``; starting local tasks is in ``kerasdist.launcher``;
the ``worker`` and ``launch`` commands are in ``kerasdist.cli``.
"""

import dataclasses
import errno
import json
import socket

from kerasdist.errors import KerasdistError

TRAINING_ROLES = ("chief", "worker")
ROLES = TRAINING_ROLES + ("evaluator",)
LOOPBACK = "127.0.0.1"
# A killed worker is noticed at once (its connections reset); this bounds the wait for a hung one.
DEFAULT_COLLECTIVE_TIMEOUT_S = 120
_EXAMPLE = ('{"cluster": {"worker": ["127.0.0.1:2222", "127.0.0.1:2223"]}, '
            '"task": {"type": "worker", "index": 0}}')


@dataclasses.dataclass
class ClusterTask:
    """This process's place in a cluster, as described by ``TF_CONFIG``.

    Attributes:
        cluster: job name ("chief", "worker", "evaluator") -> list of "host:port".
        task_type: this task's job name.
        task_index: this task's index in its job.
    """

    cluster: dict
    task_type: str
    task_index: int

    @property
    def name(self):
        """Like "worker 1": how logs and errors name this task."""
        return f"{self.task_type} {self.task_index}"

    @property
    def is_chief(self):
        """The chief task, or worker 0 when the cluster has no chief job."""
        if "chief" in self.cluster:
            return self.task_type == "chief"
        return self.task_type == "worker" and self.task_index == 0

    @property
    def num_workers(self):
        """Tasks that train (chief and workers)."""
        return sum(len(self.cluster.get(role, [])) for role in TRAINING_ROLES)

    @property
    def address(self):
        return self.cluster[self.task_type][self.task_index]

    def training_cluster(self):
        """The cluster without the evaluator, which takes no part in the all-reduce."""
        return {job: addresses for job, addresses in self.cluster.items() if job in TRAINING_ROLES}


def parse_tf_config(text):
    """Check a ``TF_CONFIG`` value and return the ``ClusterTask`` it describes.

    Args:
        text: the JSON text, e.g. ``os.environ.get("TF_CONFIG")``.

    Returns:
        A ``ClusterTask``.

    Raises:
        KerasdistError: with one line saying what is wrong: unset, not JSON,
            missing "cluster" or "task", an unknown or missing role, a bad
            address, or an index out of range.

    Example:
        >>> task = parse_tf_config('{"cluster": {"worker": ["127.0.0.1:2222", "127.0.0.1:2223"]},'
        ...                        ' "task": {"type": "worker", "index": 1}}')
        >>> task.name, task.is_chief, task.num_workers
        ('worker 1', False, 2)
    """
    if not text or not text.strip():
        raise KerasdistError(
            f"TF_CONFIG is not set; a worker needs it to find its cluster, e.g. {_EXAMPLE}"
        )
    try:
        config = json.loads(text)
    except json.JSONDecodeError as error:
        raise KerasdistError(f"TF_CONFIG is not valid JSON ({error}). Received: {_shorten(text)}") from None
    if not (isinstance(config, dict) and isinstance(config.get("cluster"), dict)
            and isinstance(config.get("task"), dict)):
        raise KerasdistError(
            f'TF_CONFIG must be an object with "cluster" and "task" objects. Received: {_shorten(text)}'
        )
    cluster = _checked_cluster(config["cluster"])
    task_type, task_index = config["task"].get("type"), config["task"].get("index", 0)
    if task_type not in ROLES:
        raise KerasdistError(
            f"TF_CONFIG task type must be one of {', '.join(ROLES)}. Received: {task_type!r}"
        )
    if task_type not in cluster:
        raise KerasdistError(
            f'TF_CONFIG task type {task_type!r} has no "{task_type}" list in "cluster". '
            f"Received: cluster roles {', '.join(cluster)}"
        )
    count = len(cluster[task_type])
    if not isinstance(task_index, int) or isinstance(task_index, bool) or not 0 <= task_index < count:
        raise KerasdistError(
            f"TF_CONFIG task index must be 0..{count - 1} for the {count} {task_type} task(s). "
            f"Received: index={task_index!r}"
        )
    return ClusterTask(cluster, task_type, task_index)


def _checked_cluster(cluster):
    if "ps" in cluster:
        raise KerasdistError(
            'TF_CONFIG has a "ps" role: parameter servers belong to ParameterServerStrategy; '
            "synchronous all-reduce training takes chief, worker and evaluator roles only"
        )
    unknown = [job for job in cluster if job not in ROLES]
    if unknown:
        raise KerasdistError(f"TF_CONFIG cluster roles must be among {', '.join(ROLES)}. Received: {unknown}")
    if not any(cluster.get(role) for role in TRAINING_ROLES):
        raise KerasdistError(
            f'TF_CONFIG cluster needs a "worker" (or "chief") list of host:port addresses. '
            f"Received: roles {', '.join(cluster) or 'none'}"
        )
    for job, addresses in cluster.items():
        if not isinstance(addresses, list) or not addresses:
            raise KerasdistError(
                f'TF_CONFIG cluster "{job}" must be a non-empty list. Received: {addresses!r}'
            )
        for address in addresses:
            host, _, port = str(address).rpartition(":")
            if not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise KerasdistError(
                    f'TF_CONFIG cluster "{job}" addresses must look like host:port. Received: {address!r}'
                )
    addresses = [str(address) for job_addresses in cluster.values() for address in job_addresses]
    if len(set(addresses)) != len(addresses):
        raise KerasdistError(
            f"TF_CONFIG cluster addresses must be distinct (one per task). Received: {addresses}; "
            "give each task its own host:port"
        )
    for job in ("chief", "evaluator"):
        if len(cluster.get(job, [])) > 1:
            raise KerasdistError(f'TF_CONFIG cluster may hold one "{job}". Received: {cluster[job]}')
    return cluster


def _shorten(text, limit=120):
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def tf_config(cluster, task_type, task_index):
    """The ``TF_CONFIG`` JSON text for one task of ``cluster``.

    Example:
        >>> tf_config({"worker": ["127.0.0.1:2222"]}, "worker", 0)
        '{"cluster": {"worker": ["127.0.0.1:2222"]}, "task": {"type": "worker", "index": 0}}'
    """
    return json.dumps({"cluster": cluster, "task": {"type": task_type, "index": task_index}})


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


def check_worker_options(replicas, global_batch_size, num_workers):
    """Raise ``KerasdistError`` for training options that multi-worker training cannot take.

    Example:
        >>> check_worker_options(replicas=1, global_batch_size=64, num_workers=2)
    """
    if replicas != 1:
        raise KerasdistError(
            "replicas does not apply to workers: each worker trains one replica on its CPU (or one per "
            f"GPU). Received: replicas={replicas}"
        )
    if global_batch_size % num_workers:
        raise KerasdistError(
            f"global_batch_size must be divisible by the {num_workers} workers. "
            f"Received: global_batch_size={global_batch_size}"
        )
