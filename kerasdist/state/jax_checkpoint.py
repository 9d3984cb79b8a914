"""The JAX engine's checkpoints: every variable, the position and the run identity in one ``.npz`` file.

A checkpoint is ``ckpt-<global step>.npz``: the model's variables
(``model/0``, ...), the optimizer's (``optimizer/0``, ...), the position
(``position``: epoch, step in epoch, global step) and the run identity
(``identity``, JSON text). It is written to a temporary file, flushed to disk
and renamed into place, so a crash never leaves a half-written checkpoint
under a checkpoint's name. It holds arrays only and is read with
``allow_pickle=False``: loading one never runs code.
"""

import json
import os
import re
import zipfile

import numpy as np

from kerasdist.divergence import non_finite_weights
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

_NUMBER = re.compile(rf"^{CHECKPOINT_NAME}-(\d+)\.npz$")


def host_value(variable):
    """A Keras variable's value as a NumPy array on this host (this process's copy of a replicated one)."""
    value = variable.value
    if hasattr(value, "addressable_data") and not getattr(value, "is_fully_addressable", True):
        value = value.addressable_data(0)
    return np.asarray(value)


class JaxCheckpointStore:
    """Saves and restores a JAX-backend model's weights, optimizer state and run position exactly.

    The same contract as ``kerasdist.state.checkpoint.CheckpointStore``: the newest
    checkpoint by step that loads is restored (a damaged one is skipped with
    one line), another run's or another backend's checkpoints are refused,
    a missing ``run_config.json`` is written again from the checkpoint, and a
    write the storage refuses raises ``StateWriteError`` with the earlier
    checkpoints untouched. Only the writer (process 0) saves; every process
    restores.

    Args:
        directory: where checkpoints, ``run_config.json`` and the metrics log live.
        model: a compiled model whose optimizer is built.
        run_config: a JSON-able dict whose identity keys must match earlier runs in ``directory``.
        max_to_keep: how many checkpoints to keep.
        writer: whether this process writes (holds the directory's lock and saves).

    Example:
        >>> store = JaxCheckpointStore("ckpt", model, {"seed": 0})  # doctest: +SKIP
        >>> position = store.restore()                              # doctest: +SKIP
    """

    def __init__(self, directory, model, run_config, max_to_keep=3, writer=True):
        self.directory = os.fspath(directory)
        self.model = model
        self.run_config = run_config
        self.max_to_keep = max_to_keep
        self.writer = writer
        refuse_other_backend(self.directory, "jax")
        if writer:
            files.ensure_writable_directory(self.directory)
            self.lock = locking.hold(self.directory)
        self.config_path = os.path.join(self.directory, RUN_CONFIG_FILE)
        if os.path.isdir(self.directory):
            fix = "delete it (kerasdist writes it again from the checkpoint) or use a new --checkpoint-dir"
            stored = files.read_json_object(self.config_path, fix=fix)
            check_identity(self.directory, run_config, stored, RUN_CONFIG_FILE)
        self.latest_checkpoint = None

    def variables(self):
        """The model's and the optimizer's variables, in the order a checkpoint stores them."""
        return {"model": list(self.model.variables), "optimizer": list(self.model.optimizer.variables)}

    def candidates(self):
        """Checkpoint paths in this directory, newest (highest step) first."""
        try:
            names = os.listdir(self.directory)
        except FileNotFoundError:
            return []
        numbers = sorted((int(match.group(1)) for match in map(_NUMBER.match, names) if match), reverse=True)
        return [os.path.join(self.directory, f"{CHECKPOINT_NAME}-{number}.npz") for number in numbers]

    def restore(self):
        """Restore the newest checkpoint that loads; return its ``RunPosition`` (epoch 0 if there is none).

        Raises:
            KerasdistError: if checkpoints exist but none loads, or they belong to another run or model.
        """
        failures = []
        for path in self.candidates():
            try:
                arrays = _read(path)
                stored = json.loads(str(arrays["identity"]))
                check_identity(self.directory, self.run_config, stored, path)
                self._assign(arrays, path)
            except KerasdistError:
                raise
            except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as error:
                failures.append(path)
                files.recovered(f"skipping checkpoint {path}: it cannot be loaded ({first_line(error)})")
                continue
            if self.writer and not os.path.lexists(self.config_path):
                files.atomic_write_text(self.config_path, json.dumps(self.run_config, indent=1))
                files.recovered(f"{self.config_path} was missing: written again from {path}")
            self.latest_checkpoint = path
            epoch, step_in_epoch, global_step = (int(value) for value in arrays["position"])
            return RunPosition(epoch, step_in_epoch, global_step, path)
        if failures:
            raise KerasdistError(f"no checkpoint in {self.directory} can be loaded (tried {len(failures)}); "
                                 "move them away or use a new --checkpoint-dir")
        return RunPosition()

    def _assign(self, arrays, path):
        """Check every stored array against its variable, then assign them all (nothing on a mismatch)."""
        pairs = []
        for group, variables in self.variables().items():
            stored = sorted(key for key in arrays if key.startswith(f"{group}/"))
            if len(stored) != len(variables):
                raise KerasdistError(f"{path} was written by a different model ({len(stored)} {group} "
                                     f"arrays, this model has {len(variables)}); use a new --checkpoint-dir")
            for index, variable in enumerate(variables):
                array = arrays[f"{group}/{index}"]
                if tuple(array.shape) != tuple(variable.shape):
                    raise KerasdistError(f"{path} was written by a different model ({variable.path} has "
                                         f"shape {tuple(array.shape)} there); use a new --checkpoint-dir")
                pairs.append((variable, array))
        for variable, array in pairs:
            variable.assign(array)

    def save(self, epoch, step_in_epoch, global_step):
        """Write ``ckpt-<global_step>.npz`` (the writer only); return its path.

        Raises:
            TrainingDivergedError: if a weight is NaN or inf (nothing is written).
            StateWriteError: if the storage refuses the write; earlier checkpoints are untouched.
        """
        if hasattr(self.model, "jax_state_sync"):
            self.model.jax_state_sync()  # fit() keeps the state outside the variables between syncs
        arrays = {f"{group}/{index}": host_value(variable) for group, variables in self.variables().items()
                  for index, variable in enumerate(variables)}
        _check_finite(arrays, self.variables(), epoch, step_in_epoch)
        path = os.path.join(self.directory, f"{CHECKPOINT_NAME}-{global_step}.npz")
        if not self.writer:  # process 0 writes this step's checkpoint for every process
            self.latest_checkpoint = path
            return path
        arrays["position"] = np.array([epoch, step_in_epoch, global_step], np.int64)
        arrays["identity"] = np.array(identity_text(self.run_config))
        self._write(path, arrays)
        if not os.path.lexists(self.config_path):
            files.atomic_write_text(self.config_path, json.dumps(self.run_config, indent=1), path)
        self.latest_checkpoint = path
        for old in self.candidates()[self.max_to_keep:]:
            os.remove(old)
        return path

    def _write(self, path, arrays):
        try:
            files.atomic_write(path, lambda stream: np.savez(stream, **arrays), "wb", self.latest_checkpoint)
        except OSError as error:
            raise files.storage_error(self.directory, error.strerror or str(error), self.latest_checkpoint) \
                from None


def _read(path):
    """Every array of a checkpoint file, read whole (a truncated file fails here, not halfway through)."""
    with np.load(path, allow_pickle=False) as stored:
        return {key: stored[key] for key in stored.files}


def _check_finite(arrays, variables, epoch, step_in_epoch):
    """Raise ``TrainingDivergedError`` naming the first variable with a NaN or inf."""
    for group, group_variables in variables.items():
        for index, variable in enumerate(group_variables):
            array = arrays[f"{group}/{index}"]
            if np.issubdtype(array.dtype, np.floating) and not np.isfinite(array).all():
                raise non_finite_weights(variable.path, epoch, step_in_epoch)
