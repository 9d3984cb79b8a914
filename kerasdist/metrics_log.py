"""A metrics log (JSON lines) that persists across resumes, so curves stay continuous."""

import json
import os

from kerasdist.checkpoint import atomic_write_text

METRICS_LOG_FILE = "metrics.jsonl"


class MetricsLog:
    """Per-step and per-epoch records, in memory and (optionally) in a JSON-lines file.

    Each record is a dict with ``kind`` ("step" or "epoch"), ``epoch``
    (0-based) and ``global_step`` plus metric values. In a step record,
    ``loss`` is the running mean over the epoch so far (as Keras reports it)
    and ``batch_loss`` the loss of that step's batch alone. On resume the log is cut
    back to the restored checkpoint's step, so records of work that was lost
    in a crash are dropped and then written again when that work is redone.

    Args:
        directory: where ``metrics.jsonl`` lives; None keeps records in memory only.

    Example:
        >>> log = MetricsLog(None)
        >>> log.append({"kind": "epoch", "epoch": 0, "global_step": 52, "loss": 0.4})
        >>> log.history()["loss"]
        [0.4]
    """

    def __init__(self, directory=None):
        self.path = os.path.join(directory, METRICS_LOG_FILE) if directory else None
        self.records = []

    def resume(self, upto_global_step):
        """Load the file, keep records up to ``upto_global_step``, rewrite it atomically."""
        self.records = []
        if self.path and os.path.exists(self.path):
            with open(self.path) as stream:
                for line in stream:
                    try:
                        record = json.loads(line)
                    except json.JSONDecodeError:
                        continue  # a line cut short by a crash
                    if record.get("global_step", 0) <= upto_global_step:
                        self.records.append(record)
        if self.path:
            atomic_write_text(self.path, "".join(json.dumps(r) + "\n" for r in self.records))

    def append(self, record):
        """Add one record (and append it to the file at once)."""
        self.records.append(record)
        if self.path:
            with open(self.path, "a") as stream:
                stream.write(json.dumps(record) + "\n")

    def history(self):
        """Per-epoch metrics as ``{name: [value per epoch]}``, like ``keras.callbacks.History``."""
        return _columns([r for r in self.records if r["kind"] == "epoch"], exclude=("kind",))

    def steps(self):
        """Per-step metrics as ``{name: [value per logged step]}``."""
        return _columns([r for r in self.records if r["kind"] == "step"], exclude=("kind",))


def _columns(records, exclude=()):
    names = []
    for record in records:
        names.extend(k for k in record if k not in names and k not in exclude)
    return {name: [record.get(name) for record in records] for name in names}
