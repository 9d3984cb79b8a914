"""TF_CONFIG: the cluster a task belongs to, built and checked.

What each task does is in ``kerasdist.cluster.roles``; starting local tasks is in
``kerasdist.cluster.launcher``; the ``worker`` and ``launch`` commands are in ``kerasdist.cli``.
"""

import dataclasses
import json

from kerasdist.errors import KerasdistError

TRAINING_ROLES = ("chief", "worker")
ROLES = TRAINING_ROLES + ("evaluator",)
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
