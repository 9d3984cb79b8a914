"""What both engines' checkpoints share: a run's position, its identity, and which backend wrote a directory.

TensorFlow-free and JAX-free, so either engine's store (``kerasdist.state.checkpoint``,
``kerasdist.state.jax_checkpoint``) can refuse a checkpoint directory of the other
before it loads anything.
"""

import dataclasses
import glob
import json
import os
import re

from kerasdist.errors import KerasdistError

CHECKPOINT_NAME = "ckpt"
RUN_CONFIG_FILE = "run_config.json"
# Settings that must not change between a run and its resumption: they fix the data order.
RESUME_KEYS = ("seed", "global_batch_size", "data")
# What identifies a run: saved in run_config.json and inside every checkpoint.
IDENTITY_KEYS = (*RESUME_KEYS, "model")
# The files by which each backend's checkpoints are recognised.
BACKEND_FILES = {
    "tensorflow": ("checkpoint", f"{CHECKPOINT_NAME}-*.index", f"{CHECKPOINT_NAME}-*.data-*"),
    "jax": (f"{CHECKPOINT_NAME}-*.npz",),
}


@dataclasses.dataclass
class RunPosition:
    """Where a restored run stands.

    Attributes:
        epoch: 0-based epoch to train next (equals the epochs completed when
            ``step_in_epoch`` is 0).
        step_in_epoch: batches of ``epoch`` already trained (mid-epoch save).
        global_step: batches trained in all.
        path: the checkpoint it came from (None for a fresh run).
    """

    epoch: int = 0
    step_in_epoch: int = 0
    global_step: int = 0
    path: str = None


def checkpoint_backend(directory):
    """The backend whose checkpoints ``directory`` holds ("tensorflow" or "jax"), or None.

    Example:
        >>> checkpoint_backend("no-such-directory") is None
        True
    """
    for backend, patterns in BACKEND_FILES.items():
        if any(glob.glob(os.path.join(glob.escape(os.fspath(directory)), pattern)) for pattern in patterns):
            return backend
    return None


def refuse_other_backend(directory, backend):
    """Raise a one-line ``KerasdistError`` if ``directory`` holds another backend's checkpoints."""
    found = checkpoint_backend(directory)
    if found not in (None, backend):
        raise KerasdistError(
            f"{directory} holds checkpoints of the {found} backend; this run uses {backend}. Resume it with "
            f"--backend {found}, or use a new --checkpoint-dir"
        )


def identity_text(run_config):
    """The run identity a checkpoint stores: the ``IDENTITY_KEYS`` of ``run_config`` as JSON."""
    return json.dumps({key: run_config.get(key) for key in IDENTITY_KEYS}, sort_keys=True)


def check_identity(directory, run_config, stored, source):
    """Refuse to go on if ``stored`` (a run config or a checkpoint's identity) belongs to another run.

    Args:
        directory: the checkpoint directory, named in the message.
        run_config: this run's config.
        stored: what was saved (None: nothing to compare).
        source: where ``stored`` came from (``run_config.json`` or a checkpoint's name).

    Raises:
        KerasdistError: naming the setting that differs and what to do.
    """
    if stored is None:
        return
    recorded = "" if source == RUN_CONFIG_FILE else f" (as {os.path.basename(source)} records)"
    if stored.get("model") != run_config.get("model"):
        raise KerasdistError(
            f"{directory} holds checkpoints of a different model{recorded}; "
            "use a new --checkpoint-dir for this model"
        )
    for key in RESUME_KEYS:
        if stored.get(key) != run_config.get(key):
            raise KerasdistError(
                f"{directory} was written with {key}={json.dumps(stored.get(key))} but this run has "
                f"{key}={json.dumps(run_config.get(key))}{recorded}; "
                "resume with the same value or use a new --checkpoint-dir"
            )


def first_line(error, limit=200):
    """The first line of an error's message, without TensorFlow's ``{{function_node ...}}`` prefix.

    Example:
        >>> first_line(OSError("{{function_node __inference_save}} disk full\\nmore"))
        'disk full'
    """
    text = re.sub(r"^\{\{[^}]*\}\}\s*", "", str(error).strip())
    return text.splitlines()[0][:limit] if text else type(error).__name__
