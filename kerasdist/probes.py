"""Tiny probes of the upstream Keras bugs kerasdist works around, and the engine each strategy should use.

Each probe trains a 4-input model for a few steps on the CPU, in its own
process with a time limit (forked from a host process that imported TensorFlow
once), so a crash or hang cannot take the caller down; it answers whether the
bug is present. ``kerasdist doctor`` runs them and caches the answers per
TensorFlow/Keras version; ``--engine auto`` reads that cache or, when no probe
ran for these versions, the bugs known to be open in them
(keras-team/keras#20585 and #19246 are open in Keras 3.15).
"""

import dataclasses
import json
import os
import socket
import subprocess
import sys
import time
from importlib import metadata


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
    Probe("mirrored_steps_per_execution", "fit, 2 steps per call, mirrored", "mirrored",
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
    from kerasdist import files  # here: this file also runs as the probes' host script, outside the package
    from kerasdist.errors import StateWriteError

    try:
        os.makedirs(os.path.dirname(cache_path()), exist_ok=True)
        files.atomic_write_text(cache_path(), json.dumps({"versions": versions(), "answers": answers}, indent=1))
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


def run_probes(timeout_s=60, commands=None):
    """Run every probe; return probe name -> answer.

    The real probes share one host process (this file run as a script) that
    imports TensorFlow once and forks a fresh process for each probe (two for
    multi_worker) before TensorFlow starts its runtime: each probe still runs
    alone, and a crash or hang loses only its own answer. A stand-in command
    runs in its own process instead.

    Args:
        timeout_s: seconds a probe may take before it is killed and reported hung.
        commands: probe name -> argv to run instead of the real probe (stand-ins for tests);
            a stand-in prints ``{"bug_present": bool, "detail": str}`` as its last line.

    Returns:
        ``{name: {"bug_present": bool, "detail": str, "failed": bool}}``; ``failed``
        is True when the probe crashed, hung or gave no answer (then
        ``bug_present`` is True: do not trust ``fit`` there).

    Example:
        >>> run_probes()["multi_worker_fit"]["bug_present"]  # doctest: +SKIP
        True
    """
    commands = commands or {}
    real = [probe.name for probe in PROBES if probe.name not in commands]
    answers = {name: _run(command, [name], timeout_s)[name] for name, command in commands.items()}
    if real:
        # The host's own start (importing TensorFlow) gets the same allowance as the probes.
        host = [sys.executable, "-I", os.path.abspath(__file__), str(timeout_s), *real]
        answers.update(_run(host, real, 2 * timeout_s))
    return answers


def _run(command, names, timeout_s):
    """Run ``command`` in its own process group, bounded; parse one answer per name from its stdout."""
    environment = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=environment, start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=timeout_s)
        why = None
    except subprocess.TimeoutExpired:
        stdout, stderr, why = "", "", f"probe hung: killed after {timeout_s:g} s"
    finally:
        try:
            os.killpg(process.pid, 9)  # the probe and every worker it forked
        except (ProcessLookupError, PermissionError):
            pass
        process.wait()
    found = {}
    for line in stdout.splitlines():
        try:
            answer = json.loads(line)
            found[answer.get("probe", names[0])] = answer
        except (ValueError, AttributeError):
            continue
    last = (stderr.strip().splitlines() or ["no output"])[-1][:160]
    answers = {}
    for name in names:
        answer = found.get(name, {})
        if isinstance(answer.get("bug_present"), bool) and "detail" in answer:
            answers[name] = {"bug_present": answer["bug_present"], "detail": str(answer["detail"]),
                             "failed": False}
        else:
            detail = why or answer.get("failure") or f"probe crashed (exit {process.returncode}): {last}"
            answers[name] = {"bug_present": True, "detail": detail, "failed": True}
    return answers


# ---- The probes themselves: forked by ``python -I probes.py TIMEOUT_S NAME...``. ----

def _tiny_model_and_data(keras, tf, steps=8, batch=8):
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
    x = tf.reshape(tf.range(steps * batch * 4, dtype="float32") % 7 / 7, (steps * batch, 4))
    y = tf.range(steps * batch) % 3
    return model, x, y, tf.data.Dataset.from_tensor_slices((x, y)).batch(batch)


def _compile(model, keras, **options):
    model.compile(keras.optimizers.SGD(0.1), keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["sparse_categorical_accuracy"], **options)


def _two_virtual_cpus(tf):
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    return [device.name for device in tf.config.list_logical_devices("CPU")][:2]


def _probe_mirrored_steps_per_execution():
    import keras
    import tensorflow as tf

    # TensorFlow's own all-reduce choice, as on a workstation (NCCL on GPUs, collectives on CPUs):
    # with kerasdist's ReductionToOneDevice for virtual CPUs the bug does not show.
    strategy = tf.distribute.MirroredStrategy(_two_virtual_cpus(tf))
    with strategy.scope():
        model, _, _, dataset = _tiny_model_and_data(keras, tf)
        _compile(model, keras, steps_per_execution=2)
    try:
        model.fit(dataset, epochs=1, verbose=0)
    except Exception as error:  # the bug shows as one of several TensorFlow errors
        return True, f"fails: {_first_line(error)}"
    return False, "fit ran 2 steps per call under MirroredStrategy"


def _probe_central_storage_metrics():
    import keras
    import numpy as np
    import tensorflow as tf

    devices = _two_virtual_cpus(tf)
    strategy = tf.distribute.experimental.CentralStorageStrategy(compute_devices=devices)
    with strategy.scope():
        model, x, y, dataset = _tiny_model_and_data(keras, tf)
        _compile(model, keras)
    model.fit(dataset, epochs=1, verbose=0)
    reported = model.evaluate(dataset, verbose=0, return_dict=True)
    logits = model(x, training=False)
    true_loss = float(keras.losses.SparseCategoricalCrossentropy(from_logits=True)(y, logits))
    true_accuracy = float(np.mean(np.argmax(logits, axis=1) == y.numpy()))
    wrong = (abs(reported["loss"] - true_loss) > 1e-4 * max(1.0, true_loss)
             or abs(reported["sparse_categorical_accuracy"] - true_accuracy) > 1e-6)
    accuracy = reported["sparse_categorical_accuracy"]
    detail = (f"evaluate() loss {reported['loss']:.4f}, accuracy {accuracy:.3f}; "
              f"true {true_loss:.4f}, {true_accuracy:.3f}")
    return wrong, detail


def _probe_multi_worker_fit(worker_index, cluster):
    os.environ["TF_CONFIG"] = json.dumps({"cluster": {"worker": cluster},
                                          "task": {"type": "worker", "index": worker_index}})
    import keras
    import tensorflow as tf

    options = tf.distribute.experimental.CommunicationOptions(timeout_seconds=30)
    strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    with strategy.scope():
        model, _, _, dataset = _tiny_model_and_data(keras, tf)
        _compile(model, keras)
    try:
        model.fit(dataset, epochs=1, verbose=0)
    except Exception as error:
        return True, f"fails with 2 workers: {_first_line(error)}"
    return False, "fit trained with 2 workers"


def _free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _first_line(error):
    """The line of a (possibly long, graph-traceback) TensorFlow error that names the failure."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    named = [line for line in lines if "You must feed" in line or "Attempt to convert" in line]
    text = (named or lines or [type(error).__name__])[0].split(":  ", 1)[-1]
    cut = min((text.index(mark) for mark in "'{" if mark in text), default=None)  # tensor names, values
    return (text[:cut].rstrip(" :") + " ..." if cut else text)[:100]


def _host(timeout_s, names):
    """Import TensorFlow once, fork one process per probe, print one JSON answer line per probe."""
    import keras  # noqa: F401  (imported once here, inherited by every forked probe)
    import tensorflow  # noqa: F401

    jobs = []  # (probe name, function, whether its answer is printed)
    for name in names:
        if name == "multi_worker_fit":
            cluster = [f"127.0.0.1:{_free_port()}" for _ in range(2)]
            jobs += [(name, lambda c=cluster: _probe_multi_worker_fit(0, c), True),
                     (name, lambda c=cluster: _probe_multi_worker_fit(1, c), False)]
        else:
            jobs.append((name, globals()[f"_probe_{name}"], True))
    children = {}
    for name, job, answers in jobs:
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:
            try:
                present, detail = job()
                answer = {"probe": name, "bug_present": present, "detail": detail}
            except BaseException as error:  # report it: an unexpected error is no answer
                failure = f"probe failed: {type(error).__name__}: {_first_line(error)}"
                answer = {"probe": name, "failure": failure}
            if answers:
                print(json.dumps(answer), flush=True)
            os._exit(0)  # skip TensorFlow's slow (and, after collectives, sometimes hanging) shutdown
        children[pid] = (name, answers)
    deadline = time.monotonic() + timeout_s
    while children and time.monotonic() < deadline:
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            time.sleep(0.1)
            continue
        name, answers = children.pop(pid)
        if answers and status:
            failure = f"probe crashed (exit {os.waitstatus_to_exitcode(status)})"
            print(json.dumps({"probe": name, "failure": failure}), flush=True)
    for pid, (name, answers) in children.items():
        os.kill(pid, 9)
        if answers:
            failure = f"probe hung: killed after {timeout_s:g} s"
            print(json.dumps({"probe": name, "failure": failure}), flush=True)


if __name__ == "__main__":
    _host(float(sys.argv[1]), sys.argv[2:])
    os._exit(0)
