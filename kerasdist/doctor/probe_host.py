"""The probes' host process: ``python -I probe_host.py TIMEOUT_S NAME...``.

It imports TensorFlow once, forks one process per probe (two for
multi_worker) and prints one JSON answer line per probe. It runs outside the
package (``-I``): it imports the standard library, TensorFlow and Keras only.
"""

import json
import os
import socket
import sys
import time


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
