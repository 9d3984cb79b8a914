"""Which engine each strategy trains with: Keras ``fit`` unless an upstream bug breaks it there.

The bugs are probed by ``kerasdist doctor`` (``kerasdist.doctor.probes``), which
saves its answers here per TensorFlow/Keras version; ``--engine auto`` reads
them or, when no probe ran for these versions, the bugs known to be open in
them (keras-team/keras#20585 and #19246 are open in Keras 3.15).
"""

import dataclasses
import json
import os
from importlib import metadata

from kerasdist.errors import StateWriteError
from kerasdist.state import files


@dataclasses.dataclass(frozen=True)
class Probe:
    """One upstream bug: what it breaks, and the engine that avoids it."""

    name: str
    title: str
    strategy: str
    issue: str
    engine_if_present: str
    advice: str


PROBES = (
    Probe("multi_worker_fit", "fit under multi_worker", "multi_worker", "keras-team/keras#20585",
          "loop", "kerasdist launch --workers 2 --engine loop"),
    Probe("mirrored_steps_per_execution", "fit, 2 steps/call, TF's all-reduce", "mirrored",
          "keras-team/keras#19246", "fit",
          "kerasdist train --replicas 2 --engine loop --steps-per-execution 50"),
    Probe("central_storage_metrics", "fit metrics under central_storage", "central_storage",
          "no upstream issue", "loop",
          "kerasdist train --replicas 2 --strategy central_storage --engine loop"),
)
# The answers for Keras 3.15 / TensorFlow 2.21, measured by these probes: used until a probe runs.
KNOWN_BUGS = {"multi_worker_fit": True, "mirrored_steps_per_execution": True, "central_storage_metrics": True}


def versions():
    """The installed TensorFlow and Keras distributions, the key of cached probe answers."""
    found = {}
    for name in ("tensorflow", "tensorflow-cpu", "keras"):
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return found


def cache_path():
    """Where ``kerasdist doctor`` keeps its probe answers (``$XDG_CACHE_HOME/kerasdist``)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "kerasdist", "probes.json")


def save_answers(answers):
    """Cache probe answers (name -> result dict) for the installed TensorFlow/Keras; never raises."""
    try:
        os.makedirs(os.path.dirname(cache_path()), exist_ok=True)
        text = json.dumps({"versions": versions(), "answers": answers}, indent=1)
        files.atomic_write_text(cache_path(), text)
    except (OSError, StateWriteError):
        pass  # a read-only or full home only costs the cache


def cached_answers():
    """Cached answers for the installed TensorFlow/Keras, or None (none cached, or other versions)."""
    try:
        with open(cache_path(), encoding="utf-8") as stream:
            cached = json.load(stream)
    except (OSError, ValueError):  # missing, a directory, not UTF-8 or not JSON: probe again
        return None
    answers = cached.get("answers") if isinstance(cached, dict) else None
    well_formed = isinstance(answers, dict) and all(
        isinstance(answer, dict) and isinstance(answer.get("bug_present"), bool)
        for answer in answers.values())
    return answers if well_formed and cached.get("versions") == versions() else None


def engine_for(strategy_name, answers=None):
    """The engine a strategy should use, and why.

    Keras ``fit`` is the default; a strategy gets kerasdist's loop when a probe
    (or, before any probe ran, the bugs known for these versions) shows that
    ``fit`` fails or reports wrong numbers under it. A probe that crashed or
    hung counts as "bug present".

    Args:
        strategy_name: "default", "one_device", "mirrored", "central_storage" or "multi_worker".
        answers: probe name -> ``{"bug_present": bool, ...}``; None reads the cache.

    Returns:
        ``(engine, reason)``.

    Example:
        >>> engine_for("multi_worker", {"multi_worker_fit": {"bug_present": True}})[0]
        'loop'
    """
    source = "probed by kerasdist doctor"
    if answers is None:
        answers = cached_answers()
        if answers is None:
            answers = {name: {"bug_present": present} for name, present in KNOWN_BUGS.items()}
            source = "known for Keras 3.15; kerasdist doctor probes this install"
    for probe in PROBES:
        if probe.strategy != strategy_name:
            continue
        if not answers.get(probe.name, {}).get("bug_present", True):
            return "fit", f"{probe.title} works ({source})"
        if probe.engine_if_present == "fit":  # only several steps per call fail: fit runs one
            return "fit", (f"fit is right at 1 step per call; {probe.title} fails ({probe.issue}; "
                           f"{source}); --engine loop runs many per call")
        return probe.engine_if_present, f"{probe.title} fails ({probe.issue}; {source})"
    return "fit", "Keras fit() works under this strategy"
