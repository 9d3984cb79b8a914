"""Files kerasdist writes and reads back: atomic writes, write failures as one line, defensive reads."""

import errno
import json
import os
import tempfile
import warnings

from kerasdist.errors import KerasdistError, StateWriteError

# The errors that mean "the storage cannot take this write", not "kerasdist made a mistake".
STORAGE_ERRNOS = {errno.ENOSPC, errno.EFBIG, errno.EIO, errno.EROFS, errno.EDQUOT}


class RecoveryWarning(UserWarning):
    """kerasdist found a damaged state file and recovered from it (the message says how)."""


def recovered(message):
    """Say in one line how a damaged state file was recovered (a ``RecoveryWarning``).

    Example:
        >>> import warnings
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     recovered("metrics.jsonl: dropped 1 unreadable line")
        >>> str(caught[0].message)
        'metrics.jsonl: dropped 1 unreadable line'
    """
    warnings.warn(message, RecoveryWarning, stacklevel=3)


def atomic_write_text(path, text, last_good=None):
    """Write ``text`` to ``path`` so that readers see the old file or the whole new one.

    Args:
        path: the file to write.
        text: its whole new content.
        last_good: the last complete checkpoint, named in the error if the storage refuses the write.

    Raises:
        StateWriteError: if the storage refuses the write (full, too large,
            read-only, I/O error); the old file is left as it was.
    """
    atomic_write(path, lambda stream: stream.write(text), "w", last_good)


def atomic_write(path, write, mode="wb", last_good=None):
    """Call ``write(stream)`` on a temporary file beside ``path``, flush it to disk, rename it to ``path``.

    Readers see the old file or the whole new one; a failed write leaves no temporary file.

    Raises:
        StateWriteError: if the storage is full or too small for the file.
        OSError: for other refusals of the storage.

    Example:
        >>> atomic_write("state.npz", lambda stream: numpy.savez(stream, x=x))  # doctest: +SKIP
    """
    directory = os.path.dirname(os.path.abspath(path))
    temporary = None
    try:
        handle, temporary = tempfile.mkstemp(dir=directory, prefix=".tmp-")
        with os.fdopen(handle, mode) as stream:
            write(stream)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except OSError as error:
        raise_if_storage_full(error, path, last_good)
        raise
    finally:
        if temporary and os.path.exists(temporary):
            os.remove(temporary)


def append_text(path, text, last_good=None):
    """Append ``text`` to ``path`` (creating it).

    Args:
        path: the file to append to.
        text: what to append.
        last_good: the last complete checkpoint, named in the error if the storage refuses the write.

    Raises:
        StateWriteError: if the storage refuses the write.
    """
    try:
        with open(path, "a") as stream:
            stream.write(text)
    except OSError as error:
        raise_if_storage_full(error, path, last_good)
        raise


def raise_if_storage_full(error, path, last_good=None):
    """Turn an ``OSError`` that means the storage is full or failing into a ``StateWriteError``.

    Args:
        error: the ``OSError`` (other errors are left for the caller to raise).
        path: the file or directory that could not be written.
        last_good: the last checkpoint known to be complete, named in the message.

    Raises:
        StateWriteError: if ``error.errno`` is one of ``STORAGE_ERRNOS``.
    """
    if getattr(error, "errno", None) in STORAGE_ERRNOS:
        raise storage_error(path, error.strerror or str(error), last_good) from None


def storage_error(path, reason, last_good=None):
    """The ``StateWriteError`` for a write to ``path`` that the storage refused for ``reason``."""
    kept = f"the last good checkpoint is {last_good}" if last_good else "no checkpoint was written yet"
    directory = path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path))
    return StateWriteError(
        f"cannot write {path} ({reason}); {kept}. Free space for {directory} (or make it writable) "
        "and rerun the same command to resume"
    )


def ensure_writable_directory(directory):
    """Create ``directory`` if needed and check that files can be written in it.

    Raises:
        KerasdistError: naming the directory, if it cannot be created or written.

    Example:
        >>> import tempfile
        >>> ensure_writable_directory(tempfile.mkdtemp())
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


def read_json_object(path, fix):
    """The JSON object (a dict) stored in ``path``, or None if there is no such file.

    Args:
        path: the file to read.
        fix: what the user should do if it is damaged, for the error message.

    Raises:
        KerasdistError: one line naming ``path`` and ``fix`` when it is a
            directory, unreadable, not UTF-8, not JSON, or JSON but not an object.

    Example:
        >>> read_json_object("no-such-file.json", fix="delete it") is None
        True
    """
    if not os.path.lexists(path):
        return None
    try:
        with open(path, encoding="utf-8") as stream:
            value = json.load(stream)
    except OSError as error:
        problem = error.strerror or str(error)
    except (UnicodeDecodeError, ValueError) as error:
        problem = f"not valid JSON: {str(error).splitlines()[0][:120]}"
    else:
        if isinstance(value, dict):
            return value
        problem = f"a JSON {type(value).__name__}, not an object"
    raise KerasdistError(f"{path} is damaged ({problem}); {fix}")
