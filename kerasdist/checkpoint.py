"""Checkpoints that resume exactly: newest *valid* one by step number, atomic writes, run state."""

import dataclasses
import glob
import json
import os
import re
import tempfile
import warnings

import tensorflow as tf

from kerasdist import locking
from kerasdist.divergence import check_weights
from kerasdist.errors import KerasdistError

CHECKPOINT_NAME = "ckpt"
RUN_CONFIG_FILE = "run_config.json"
_NUMBER = re.compile(rf"{CHECKPOINT_NAME}-(\d+)\.index$")
# Settings that must not change between a run and its resumption: they fix the data order.
RESUME_KEYS = ("seed", "global_batch_size", "data")


@dataclasses.dataclass
class RunPosition:
    """Where a restored run stands.

    Attributes:
        epoch: 0-based epoch to train next (equals the epochs completed when
            ``step_in_epoch`` is 0).
        step_in_epoch: batches of ``epoch`` already trained (mid-epoch save).
        global_step: batches trained in all.
        path: the checkpoint prefix it came from (None for a fresh run).
    """

    epoch: int = 0
    step_in_epoch: int = 0
    global_step: int = 0
    path: str = None


def atomic_write_text(path, text):
    """Write ``text`` to ``path`` so that readers see the old file or the whole new one."""
    directory = os.path.dirname(os.path.abspath(path))
    handle, temporary = tempfile.mkstemp(dir=directory, prefix=".tmp-")
    try:
        with os.fdopen(handle, "w") as stream:
            stream.write(text)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.remove(temporary)
        raise


def ensure_writable_directory(directory):
    """Create ``directory`` if needed and check that files can be written in it.

    Raises:
        KerasdistError: naming the directory, if it cannot be created or written.
    """
    try:
        os.makedirs(directory, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".write-test-"):
            pass
    except OSError as error:
        raise KerasdistError(
            f"checkpoint directory {directory} is not writable ({error.strerror}); "
            "choose another --checkpoint-dir"
        ) from None


class CheckpointStore:
    """Saves and restores model weights, optimizer state and run position.

    Built on ``tf.train.Checkpoint`` and ``tf.train.CheckpointManager``:
    TensorFlow writes the data files first and updates its ``checkpoint``
    index file atomically last, so a crash mid-write never leaves a "latest"
    that points at a half-written checkpoint. On restore the newest checkpoint
    by step number is tried first; one that fails to load (truncated,
    corrupted) is skipped with a warning and the previous one is used.
    Checkpoints hold tensors only, so loading one never runs code.

    Args:
        directory: where checkpoints, ``run_config.json`` and the metrics log live.
        model: a compiled model whose optimizer is built.
        run_config: a JSON-able dict; the ``RESUME_KEYS`` and ``model`` entries
            must match those of earlier runs in ``directory``.
        max_to_keep: how many checkpoints to keep.
        exclusive: hold the directory's lock (``kerasdist.locking``) while the
            store exists, so that no other process writes there; a reader such
            as the evaluator passes False.

    Raises:
        KerasdistError: if another process holds the directory, it is not
            writable, or its run config differs.

    Example:
        >>> store = CheckpointStore("ckpt", model, {"seed": 0})  # doctest: +SKIP
        >>> position = store.restore()                           # doctest: +SKIP
    """

    def __init__(self, directory, model, run_config, max_to_keep=3, exclusive=True):
        self.directory = os.fspath(directory)
        self.model = model
        ensure_writable_directory(self.directory)
        self.lock = locking.hold(self.directory) if exclusive else None
        self.run_config = run_config
        self._check_run_config()
        self.epoch = tf.Variable(0, dtype=tf.int64, trainable=False, name="epoch")
        self.step_in_epoch = tf.Variable(0, dtype=tf.int64, trainable=False, name="step_in_epoch")
        self.global_step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
        self.checkpoint = tf.train.Checkpoint(
            model=model,
            optimizer=model.optimizer,
            epoch=self.epoch,
            step_in_epoch=self.step_in_epoch,
            global_step=self.global_step,
        )
        self.manager = tf.train.CheckpointManager(
            self.checkpoint, self.directory, max_to_keep=max_to_keep, checkpoint_name=CHECKPOINT_NAME
        )

    def _check_run_config(self):
        path = os.path.join(self.directory, RUN_CONFIG_FILE)
        if not os.path.exists(path):
            return
        try:
            with open(path) as stream:
                stored = json.load(stream)
        except (OSError, json.JSONDecodeError) as error:
            raise KerasdistError(f"{path} is unreadable ({error}); use a new --checkpoint-dir") from None
        if stored.get("model") != self.run_config.get("model"):
            raise KerasdistError(
                f"{self.directory} holds checkpoints of a different model; "
                "use a new --checkpoint-dir for this model"
            )
        for key in RESUME_KEYS:
            if stored.get(key) != self.run_config.get(key):
                raise KerasdistError(
                    f"{self.directory} was written with {key}={json.dumps(stored.get(key))} but this run "
                    f"has {key}={json.dumps(self.run_config.get(key))}; resume with the same value "
                    "or use a new --checkpoint-dir"
                )

    def candidates(self):
        """Checkpoint prefixes in this directory, newest (highest step) first."""
        found = []
        for index_file in glob.glob(os.path.join(self.directory, f"{CHECKPOINT_NAME}-*.index")):
            match = _NUMBER.search(os.path.basename(index_file))
            if match:
                found.append((int(match.group(1)), index_file[: -len(".index")]))
        return [prefix for _, prefix in sorted(found, reverse=True)]

    def restore(self):
        """Restore the newest checkpoint that loads; return its ``RunPosition``.

        Returns:
            The position to resume from; ``RunPosition()`` (epoch 0) if the
            directory holds no checkpoint.

        Raises:
            KerasdistError: if checkpoints exist but none can be loaded, or they
                belong to a different model.
        """
        failures = []
        for prefix in self.candidates():
            try:
                self.checkpoint.restore(prefix).assert_existing_objects_matched()
            except Exception as error:  # truncated files raise IndexError, corrupt ones OpError, ...
                reason = str(error).strip().splitlines()[0][:200]
                if "shape" in str(error).lower():
                    raise KerasdistError(
                        f"{prefix} was written by a different model ({reason}); "
                        "use a new --checkpoint-dir for this model"
                    ) from None
                failures.append(prefix)
                warnings.warn(f"skipping checkpoint {prefix}: it cannot be loaded ({reason})", stacklevel=2)
                continue
            return RunPosition(
                int(self.epoch.numpy()), int(self.step_in_epoch.numpy()), int(self.global_step.numpy()), prefix
            )
        if failures:
            raise KerasdistError(
                f"no checkpoint in {self.directory} can be loaded (tried {len(failures)}); "
                "move them away or use a new --checkpoint-dir"
            )
        return RunPosition()

    def save(self, epoch, step_in_epoch, global_step):
        """Write a checkpoint numbered by ``global_step``; return its path.

        Raises:
            TrainingDivergedError: if a weight is NaN or inf (nothing is written).
        """
        check_weights(self.model, epoch, step_in_epoch)
        self.epoch.assign(epoch)
        self.step_in_epoch.assign(step_in_epoch)
        self.global_step.assign(global_step)
        path = self.manager.save(checkpoint_number=global_step)
        config_path = os.path.join(self.directory, RUN_CONFIG_FILE)
        if not os.path.exists(config_path):
            atomic_write_text(config_path, json.dumps(self.run_config, indent=1))
        return path
