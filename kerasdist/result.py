"""A training run's result record (``TrainingResult``), the same for both backends."""

import dataclasses


@dataclasses.dataclass
class TrainingResult:
    """The result record of one ``run_training`` call (``to_dict()`` is what ``--json`` prints).

    ``history`` covers every epoch trained so far in the checkpoint directory,
    resumed ones included; ``steps`` holds the per-step log the same way.
    """

    replicas: int
    backend: str
    strategy: str
    engine: str
    epochs: int
    initial_epoch: int
    epochs_run: int
    history: dict
    steps: dict
    test: dict
    wall_time_s: float
    samples_per_s: float
    data_source: dict
    checkpoint: str
    global_batch_size: int
    per_replica_batch_size: int
    learning_rate: float
    seed: int
    resumed_from_step: int
    message: str
    model: object = dataclasses.field(default=None, repr=False, compare=False)

    def to_dict(self):
        """The record as plain JSON-able values (without the model)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "model"}


def steady_samples_per_s(result):
    """Samples per second after the first epoch, which pays for tracing and compiling the step.

    Falls back to the whole run's rate when only one epoch was trained.

    Args:
        result: a ``TrainingResult``.

    Returns:
        A float, or None when nothing was timed.

    Example:
        >>> steady_samples_per_s(run_training(replicas=1, epochs=3, data="sample"))  # doctest: +SKIP
        5431.2
    """
    rates = result.history.get("samples_per_s", [])
    seconds = result.history.get("wall_time_s", [])
    timed = [(rate * time, time) for rate, time in zip(rates[1:], seconds[1:]) if rate and time]
    if not timed:
        return result.samples_per_s
    return sum(samples for samples, _ in timed) / sum(time for _, time in timed)
