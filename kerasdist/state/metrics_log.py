"""A metrics log (JSON lines) that persists across resumes, so curves stay continuous."""

import json
import os
import shutil

from kerasdist.errors import KerasdistError
from kerasdist.state import files

METRICS_LOG_FILE = "metrics.jsonl"


class MetricsLog:
    """Per-step and per-epoch records, in memory and (optionally) in a JSON-lines file.

    Each record is a dict with ``kind`` ("step" or "epoch"), ``epoch``
    (0-based) and ``global_step`` plus metric values. In a step record,
    ``loss`` is the running mean over the epoch so far (as Keras reports it)
    and ``batch_loss`` the loss of that step's batch alone. On resume the log is cut
    back to the restored checkpoint's step, so records of work that was lost
    in a crash are dropped and then written again when that work is redone.
    Lines that are not records (cut short by a crash, damaged) are dropped
    too, with one line saying so, and the damaged file is kept beside it as
    ``metrics.jsonl.damaged``.

    Args:
        directory: where ``metrics.jsonl`` lives; None keeps records in memory only.
        last_checkpoint: a function returning the path of the last complete
            checkpoint (or None), named when the storage refuses a write.

    Example:
        >>> log = MetricsLog(None)
        >>> log.append({"kind": "epoch", "epoch": 0, "global_step": 52, "loss": 0.4})
        >>> log.history()["loss"]
        [0.4]
    """

    def __init__(self, directory=None, last_checkpoint=lambda: None):
        self.path = os.path.join(directory, METRICS_LOG_FILE) if directory else None
        self.records = []
        self.last_checkpoint = last_checkpoint

    def resume(self, upto_global_step):
        """Load the file, keep the records up to ``upto_global_step``, rewrite it atomically.

        Raises:
            KerasdistError: if the log is a directory or cannot be read.
            StateWriteError: if the storage refuses the rewrite.
        """
        self.records, damaged = [], 0
        if self.path and os.path.lexists(self.path):
            try:
                with open(self.path, "rb") as stream:
                    lines = stream.read().splitlines()
            except OSError as error:
                raise KerasdistError(f"{self.path} cannot be read ({error.strerror}); move it away to start "
                                     "the metrics log again, or use a new --checkpoint-dir") from None
            for line in lines:
                record = _parse_record(line)
                if record is None:
                    damaged += line.strip() != b""
                elif record["global_step"] <= upto_global_step:
                    self.records.append(record)
            if damaged:
                _keep_copy(self.path, self.path + ".damaged")
                files.recovered(f"{self.path}: dropped {damaged} damaged line(s), kept {len(self.records)} "
                                f"record(s) (the damaged file is kept as {self.path}.damaged)")
        if self.path and upto_global_step and not self.records:
            files.recovered(f"{self.path} holds no record up to step {upto_global_step}: the history "
                            "of the epochs trained before is lost; it goes on from here")
        if self.path:
            files.atomic_write_text(self.path, "".join(json.dumps(r) + "\n" for r in self.records),
                                    self.last_checkpoint())

    def append(self, record):
        """Add one record (and append it to the file at once).

        Raises:
            StateWriteError: if the storage refuses the write.
        """
        self.records.append(record)
        if self.path:
            files.append_text(self.path, json.dumps(record) + "\n", self.last_checkpoint())

    def history(self):
        """Per-epoch metrics as ``{name: [value per epoch]}``, like ``keras.callbacks.History``."""
        return _columns([r for r in self.records if r["kind"] == "epoch"], exclude=("kind",))

    def steps(self):
        """Per-step metrics as ``{name: [value per logged step]}``."""
        return _columns([r for r in self.records if r["kind"] == "step"], exclude=("kind",))


def _keep_copy(path, copy):
    try:
        shutil.copyfile(path, copy)
    except OSError as error:
        files.raise_if_storage_full(error, copy)
        raise KerasdistError(f"{path} is damaged and a copy cannot be kept as {copy} ({error.strerror}); "
                             f"move {path} away, or use a new --checkpoint-dir") from None


def _parse_record(line):
    """One log line as a record, or None if it is not one (bad UTF-8 or JSON, wrong shape)."""
    try:
        record = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    valid = (isinstance(record, dict) and record.get("kind") in ("step", "epoch")
             and all(type(record.get(key)) is int for key in ("epoch", "global_step"))
             and all(value is None or type(value) in (int, float)
                     for key, value in record.items() if key != "kind"))
    return record if valid else None


def _columns(records, exclude=()):
    names = []
    for record in records:
        names.extend(k for k in record if k not in names and k not in exclude)
    return {name: [record.get(name) for record in records] for name in names}
