"""One writer per directory: an OS file lock (``fcntl.flock``) that dies with its process.

The lock lives in a file in the directory and names the holder's process id.
The operating system releases it when the holder exits, however it ends
(SIGKILL included), so a crashed run never leaves a stale lock behind.
"""

import errno
import fcntl
import os
import weakref

from kerasdist.errors import KerasdistError

LOCK_FILE = "kerasdist.lock"
# The locks this process holds, by directory: a rerun in the same process (a notebook) takes them over.
_HELD = weakref.WeakValueDictionary()


class DirectoryLock:
    """An exclusive lock on a directory, held until ``release()`` or until the object is dropped.

    Use ``hold(directory)`` rather than this class: it reuses a lock this
    process already holds.
    """

    def __init__(self, directory, descriptor):
        self.directory = directory
        self._descriptor = descriptor

    def release(self):
        """Give the lock up (closing the file releases it)."""
        if self._descriptor is not None:
            os.close(self._descriptor)
            self._descriptor = None

    def __del__(self):
        self.release()


def hold(directory, what="checkpoint directory", option="--checkpoint-dir"):
    """Lock ``directory`` (creating it) for this process; fail at once if another process holds it.

    Args:
        directory: the directory to own.
        what: how the error names the directory.
        option: the command-line option that chooses it (for the error's advice).

    Returns:
        A ``DirectoryLock``; keep a reference as long as you write there.

    Raises:
        KerasdistError: with the holder's process id, if another process holds the lock,
            or if the directory cannot be created.

    Example:
        >>> import tempfile
        >>> directory = tempfile.mkdtemp()
        >>> lock = hold(directory)
        >>> hold(directory) is lock  # the same process may take it again
        True
    """
    key = os.path.realpath(directory)
    held = _HELD.get(key)
    if held is not None and held._descriptor is not None:
        return held
    try:
        os.makedirs(directory, exist_ok=True)
        descriptor = os.open(os.path.join(directory, LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o644)
    except IsADirectoryError:
        raise KerasdistError(
            f"{os.path.join(directory, LOCK_FILE)} is a directory, not kerasdist's lock file; remove it "
            f"or choose another {option}"
        ) from None
    except OSError as error:
        raise KerasdistError(
            f"{what} {directory} is not writable ({error.strerror}); choose another {option}"
        ) from None
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as error:
        holder = _read_holder(descriptor)
        os.close(descriptor)
        if error.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise
        raise KerasdistError(
            f"{what} {directory} is in use by another kerasdist run (pid {holder}); "
            f"wait for it to end or stop it, or choose another {option}"
        ) from None
    try:
        os.ftruncate(descriptor, 0)
        os.write(descriptor, f"{os.getpid()}\n".encode())
    except OSError:
        pass  # a full disk: the lock holds all the same; only the pid in error messages is lost
    lock = _HELD[key] = DirectoryLock(directory, descriptor)
    return lock


def check_free(directory, what="checkpoint directory", option="--checkpoint-dir"):
    """Raise ``KerasdistError`` (naming the holder's pid) if another process holds ``directory``.

    Nothing is created: a directory that does not exist yet is free.

    Example:
        >>> check_free("a-directory-that-does-not-exist")
    """
    held = _HELD.get(os.path.realpath(directory))
    if os.path.isdir(directory) and (held is None or held._descriptor is None):
        hold(directory, what, option).release()


def _read_holder(descriptor):
    try:
        text = os.pread(descriptor, 32, 0).decode(errors="replace").strip()
    except OSError:
        text = ""
    return text if text.isdigit() else "unknown"
