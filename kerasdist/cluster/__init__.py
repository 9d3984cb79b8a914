"""Multi-worker training: the cluster a task belongs to, what each task does, and bounded waits on peers.

``config`` (TF_CONFIG), ``ports`` (a local cluster on loopback ports) and
``slurm`` (the cluster of an ``srun`` step) say where each task is;
``roles`` (chief, worker, evaluator) and ``launcher`` (local workers) run
them; ``peers`` and ``watchdog`` bound every wait on a peer. The names below
need no TensorFlow: the command line checks a cluster before it starts.
"""

from kerasdist.cluster.config import ROLES, TRAINING_ROLES, ClusterTask, parse_tf_config, tf_config
from kerasdist.cluster.ports import LOOPBACK, check_port_free, free_ports, local_cluster
from kerasdist.engines.options import DEFAULT_COLLECTIVE_TIMEOUT_S, check_worker_options
from kerasdist.errors import ClusterError

__all__ = [
    "DEFAULT_COLLECTIVE_TIMEOUT_S",
    "LOOPBACK",
    "ROLES",
    "TRAINING_ROLES",
    "ClusterError",
    "ClusterTask",
    "check_port_free",
    "check_worker_options",
    "free_ports",
    "local_cluster",
    "parse_tf_config",
    "tf_config",
]
