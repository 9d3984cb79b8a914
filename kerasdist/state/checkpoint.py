"""Checkpoints that resume exactly: newest *valid* one by step number, atomic writes, run state."""

import glob
import json
import os
import re
import shutil

import tensorflow as tf

from kerasdist.divergence import check_weights
from kerasdist.errors import KerasdistError
from kerasdist.state import files, locking
from kerasdist.state.run_state import (
    CHECKPOINT_NAME,
    RUN_CONFIG_FILE,
    RunPosition,
    check_identity,
    first_line,
    identity_text,
    refuse_other_backend,
)

# A checkpoint's files: PREFIX.index and PREFIX.data-00000-of-00001 (either counts: one alone is damaged).
_NUMBER = re.compile(rf"{CHECKPOINT_NAME}-(\d+)\.(index|data-\d+-of-\d+)$")
INDEX_FILE = "checkpoint"  # tf.train.CheckpointManager's list of checkpoints


class CheckpointStore:
    """Saves and restores model weights, optimizer state and run position.

    Built on ``tf.train.Checkpoint`` and ``tf.train.CheckpointManager``:
    TensorFlow writes the data files first and updates its ``checkpoint``
    index file atomically last, so a crash mid-write never leaves a "latest"
    that points at a half-written checkpoint. On restore the newest checkpoint
    by step number is tried first; one that fails to load (truncated,
    corrupted) is skipped with a warning and the previous one is used.
    Checkpoints hold tensors only, so loading one never runs code.

    Every checkpoint also holds the run's identity (the ``IDENTITY_KEYS`` of
    ``run_config``): a checkpoint of another run is refused even when
    ``run_config.json`` is gone, and a missing ``run_config.json`` is written
    again from it. A damaged index file is rebuilt from the checkpoint files.
    A write the storage refuses (full, read-only, I/O error) raises
    ``StateWriteError`` and leaves the earlier checkpoints as they were.

    Args:
        directory: where checkpoints, ``run_config.json`` and the metrics log live.
        model: a compiled model whose optimizer is built.
        run_config: a JSON-able dict; the ``IDENTITY_KEYS`` entries must match
            those of earlier runs in ``directory``.
        max_to_keep: how many checkpoints to keep.
        exclusive: hold the directory's lock (``kerasdist.state.locking``) while the
            store exists, so that no other process writes there; a reader such
            as the evaluator passes False.

    Raises:
        KerasdistError: if another process holds the directory, it is not
            writable, its run config differs or is damaged.

    Example:
        >>> store = CheckpointStore("ckpt", model, {"seed": 0})  # doctest: +SKIP
        >>> position = store.restore()                           # doctest: +SKIP
    """

    def __init__(self, directory, model, run_config, max_to_keep=3, exclusive=True):
        self.directory = os.fspath(directory)
        self.model = model
        refuse_other_backend(self.directory, "tensorflow")
        files.ensure_writable_directory(self.directory)
        self.lock = locking.hold(self.directory) if exclusive else None
        self.run_config = run_config
        self.config_path = os.path.join(self.directory, RUN_CONFIG_FILE)
        self._check_identity(files.read_json_object(
            self.config_path, fix="delete it (kerasdist writes it again from the checkpoint) "
                                  "or use a new --checkpoint-dir"), RUN_CONFIG_FILE)
        self.epoch = tf.Variable(0, dtype=tf.int64, trainable=False, name="epoch")
        self.step_in_epoch = tf.Variable(0, dtype=tf.int64, trainable=False, name="step_in_epoch")
        self.global_step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
        self.identity = tf.Variable(identity_text(run_config), dtype=tf.string, trainable=False,
                                    name="identity")
        state = {"model": model, "optimizer": model.optimizer, "epoch": self.epoch,
                 "step_in_epoch": self.step_in_epoch, "global_step": self.global_step}
        self.checkpoint = tf.train.Checkpoint(**state)  # restores checkpoints written before the identity
        if exclusive:  # a reader (the evaluator) never writes in the directory
            self._rebuild_damaged_index()
        self.manager = tf.train.CheckpointManager(
            tf.train.Checkpoint(**state, identity=self.identity), self.directory, max_to_keep=max_to_keep,
            checkpoint_name=CHECKPOINT_NAME,
        )

    def _check_identity(self, stored, source):
        check_identity(self.directory, self.run_config, stored, source)

    def _rebuild_damaged_index(self):
        """Write TensorFlow's index file again from the checkpoint files if unreadable or listing others."""
        index = os.path.join(self.directory, INDEX_FILE)
        if not os.path.lexists(index):
            return
        if not os.path.isfile(index):
            raise KerasdistError(f"{index} is not a file; remove it (kerasdist writes it again) "
                                 "or use a new --checkpoint-dir")
        prefixes = [prefix for prefix in reversed(self.candidates()) if os.path.isfile(prefix + ".index")]
        try:
            state = tf.train.get_checkpoint_state(self.directory)
        except Exception as error:  # binary garbage: UnicodeDecodeError; bad text: ValueError, ParseError
            reason = first_line(error)
        else:
            paths = state.all_model_checkpoint_paths if state else []
            listed = sorted(os.path.basename(path) for path in paths)
            if listed == sorted(os.path.basename(prefix) for prefix in prefixes):
                return
            reason = f"it lists {', '.join(listed) or 'no checkpoint'}"
        try:
            if prefixes:
                files.atomic_write_text(index, _index_text(prefixes))
            else:  # an empty index is not a valid one: without it, TensorFlow starts a new list
                os.remove(index)
        except OSError as error:
            raise KerasdistError(f"{index} is damaged ({reason}) and cannot be written again "
                                 f"({error.strerror}); use a new --checkpoint-dir") from None
        files.recovered(f"rebuilt {index} from the {len(prefixes)} complete checkpoint(s) here: "
                        f"it was damaged ({reason})")

    def candidates(self):
        """Checkpoint prefixes in this directory, newest (highest step) first, complete or not."""
        numbers = set()
        for path in glob.glob(os.path.join(self.directory, f"{CHECKPOINT_NAME}-*")):
            match = _NUMBER.search(os.path.basename(path))
            if match:
                numbers.add(int(match.group(1)))
        return [os.path.join(self.directory, f"{CHECKPOINT_NAME}-{number}")
                for number in sorted(numbers, reverse=True)]

    def restore(self):
        """Restore the newest checkpoint that loads; return its ``RunPosition``.

        Rewrites a missing ``run_config.json`` from the checkpoint's identity.

        Returns:
            The position to resume from; ``RunPosition()`` (epoch 0) if the
            directory holds no checkpoint.

        Raises:
            KerasdistError: if checkpoints exist but none can be loaded, or they
                belong to a different model or run.
        """
        failures = []
        for prefix in self.candidates():
            try:
                stored = self._stored_identity(prefix)
                self._check_identity(stored, os.path.basename(prefix))
                self.checkpoint.restore(prefix).assert_existing_objects_matched().expect_partial()
            except KerasdistError:
                raise
            except Exception as error:  # truncated files raise IndexError, corrupt ones OpError, ...
                reason = first_line(error)
                if "shape" in str(error).lower():
                    raise KerasdistError(
                        f"{prefix} was written by a different model ({reason}); "
                        "use a new --checkpoint-dir for this model"
                    ) from None
                failures.append(prefix)
                files.recovered(f"skipping checkpoint {prefix}: it cannot be loaded ({reason})")
                continue
            if stored is not None and not os.path.lexists(self.config_path):
                files.atomic_write_text(self.config_path, json.dumps(self.run_config, indent=1))
                files.recovered(f"{self.config_path} was missing: written again from {prefix}")
            return RunPosition(int(self.epoch.numpy()), int(self.step_in_epoch.numpy()),
                               int(self.global_step.numpy()), prefix)
        if failures:
            raise KerasdistError(
                f"no checkpoint in {self.directory} can be loaded (tried {len(failures)}); "
                "move them away or use a new --checkpoint-dir"
            )
        return RunPosition()

    @staticmethod
    def _stored_identity(prefix):
        """The run identity saved in checkpoint ``prefix``; None for checkpoints written before identities."""
        names = {name for name, _ in tf.train.list_variables(prefix)}
        key = "identity/.ATTRIBUTES/VARIABLE_VALUE"
        if key not in names:
            return None
        text = tf.train.load_variable(prefix, key)
        identity = json.loads(text.decode("utf-8") if isinstance(text, bytes) else text)
        if not isinstance(identity, dict):
            raise TypeError(f"its run identity is a JSON {type(identity).__name__}")
        return identity

    @property
    def latest_checkpoint(self):
        """The path of the newest checkpoint written or restored, or None."""
        return self.manager.latest_checkpoint

    def save(self, epoch, step_in_epoch, global_step):
        """Write a checkpoint numbered by ``global_step``; return its path.

        Raises:
            TrainingDivergedError: if a weight is NaN or inf (nothing is written).
            StateWriteError: if the storage refuses the write; the files of
                the failed checkpoint are removed, earlier ones are untouched.
        """
        check_weights(self.model, epoch, step_in_epoch)
        self.epoch.assign(epoch)
        self.step_in_epoch.assign(step_in_epoch)
        self.global_step.assign(global_step)
        last_good = self.manager.latest_checkpoint
        try:
            path = self.manager.save(checkpoint_number=global_step)
        except (tf.errors.OpError, OSError) as error:
            self._remove_partial(global_step)
            raise files.storage_error(self.directory, _system_reason(error), last_good) from None
        if not os.path.lexists(self.config_path):
            files.atomic_write_text(self.config_path, json.dumps(self.run_config, indent=1))
        return path

    def _remove_partial(self, global_step):
        """Delete what a failed save of checkpoint ``global_step`` left; a complete one of that number stays.

        TensorFlow writes a checkpoint into ``PREFIX_temp`` and moves it into
        place once whole, so an earlier complete save of the same number is intact.
        """
        prefix = os.path.join(self.directory, f"{CHECKPOINT_NAME}-{global_step}")
        leftovers = glob.glob(glob.escape(prefix) + "_temp*")
        if prefix not in self.manager.checkpoints:
            leftovers += glob.glob(glob.escape(prefix) + ".*")
        for leftover in leftovers:
            if os.path.isdir(leftover):
                shutil.rmtree(leftover, ignore_errors=True)
            else:
                os.remove(leftover)


def _index_text(prefixes):
    """TensorFlow's ``checkpoint`` index (a text proto) listing ``prefixes``, oldest first, newest as latest.

    Each checkpoint keeps its file time as its timestamp, so the manager goes on rotating them.
    """
    times = [os.path.getmtime(prefix + ".index") for prefix in prefixes]
    lines = [f'model_checkpoint_path: "{os.path.basename(prefixes[-1])}"']
    lines += [f'all_model_checkpoint_paths: "{os.path.basename(prefix)}"' for prefix in prefixes]
    lines += [f"all_model_checkpoint_timestamps: {time!r}" for time in times]
    lines.append(f"last_preserved_timestamp: {min(times) - 1!r}")
    return "\n".join(lines) + "\n"


def _system_reason(error):
    """What the system said of a failed write ("...; No space left on device [Op:SaveV2]" -> the reason)."""
    text = re.sub(r"\s*\[Op:\w+\]$", "", first_line(error, limit=None))
    return text.rpartition("; ")[2][:200]
