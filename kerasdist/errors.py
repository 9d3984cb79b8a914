"""kerasdist's exceptions: user mistakes (one line, exit 2) and the failures the CLI maps to exit codes."""


class KerasdistError(ValueError):
    """A problem the user can fix (bad argument, missing file, wrong checkpoint).

    The command line prints its message on one line and exits with status 2;
    Python callers can catch it like any ``ValueError``.

    Example:
        >>> try:
        ...     raise KerasdistError("epochs must be >= 1. Received: epochs=0")
        ... except ValueError as error:
        ...     print(error)
        epochs must be >= 1. Received: epochs=0
    """


class TrainingDivergedError(KerasdistError):
    """Training produced a non-finite loss or weights and stopped before checkpointing them.

    The command line prints its message on one line and exits with status 3;
    the checkpoints already written are good, so a rerun with a smaller
    learning rate resumes from the last of them.
    """


class StateWriteError(KerasdistError):
    """A checkpoint or metrics write failed: the disk is full, the file too large, read-only or failing.

    The command line prints its message on one line and exits with status 4.
    Training stops before anything older is touched, so after freeing space
    the same command resumes from the last good checkpoint the message names.
    """


class ClusterError(RuntimeError):
    """A cluster failure at run time (a peer unreachable or stopped, no checkpoint came); the CLI exits 1."""
