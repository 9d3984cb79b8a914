"""Throughput of kerasdist's engines against a hand-written JAX program, and lesson 08's speed ladder.

The engines table: the reference (a hand-written JAX program that trains each
epoch as one ``jax.lax.scan`` and validates in the same jitted call), the
guide's code, kerasdist's fit engine, its loop engine (1/2/4 replicas, 1 and
2 workers, 50 and 200 steps per call) and its JAX engine (1 and 50 steps per
call, 2 devices, 2 processes); every row's ratio to the reference.

Every setup runs in its own process (replicas must be made before TensorFlow
starts) on the same data, global batch 64: with ``--data fashion``, full-size
Fashion-MNIST (50,000 training images, 10,000 validation, 10,000 test; needs
Debian's dataset-fashion-mnist package offline); with ``--data sample``, the
3,333 training digits of the offline MNIST sample repeated to 50,000 images
per epoch, validated on the 667 held-out digits and tested on 1,000. Each
setup trains a few epochs; the first includes tracing and compilation, so
a run's score is the median samples/s of its later epochs (training and
validation, per training sample), and a row's the median of ``--repeats``
rounds (default 3), every round's score printed beside it: rounds, so that a
busy spell of a shared CPU hits one run of each row. The machine's limit is
the measured matmul throughput (float32, and bfloat16 for the
mixed-precision rows) divided by the model's training FLOPs per sample; each
row's share of it is printed.

The ladder (``--part ladder``) trains each rung of ``kerasdist.measure.speed_ladder``
(TensorFlow's fit, steps_per_execution, XLA, kerasdist's loop, Keras on JAX,
a ``jax.lax.scan`` epoch), each in a fresh process, ``--repeats`` rounds
(default 3), and prints each rung's median samples/s of
training, its ratio to the scan epoch and its share of the measured peak
(model FLOPs per second over the median float32 1024x1024 matmul rate).

Usage:
    python benchmarks/benchmark_engines.py [--data sample|fashion] [--epochs 3] [--repeats N]
                                           [--steps-per-execution 50] [--part engines|ladder|all]
                                           [--out benchmarks/results]

Writes ``engines.md`` and ``engines.csv`` (and ``ladder.md``) to ``--out`` and prints the tables.
"""

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import keras
import numpy as np

SAMPLE_TRAIN_IMAGES = 50_000
GLOBAL_BATCH_SIZE = 64
SEED = 0


REFERENCE = "hand-written JAX: a lax.scan epoch and its validation, one jitted call"


def setups(steps_per_execution):
    """The setups to measure, in order (the reference first); ``kind`` says which runner trains it."""
    k = steps_per_execution
    fit = {"kind": "train", "engine": "fit", "xla": False, "k": 1, "precision": "float32"}
    rows = [
        {"name": REFERENCE, "kind": "reference", "backend": "jax", "replicas": 1, "xla": True, "k": "epoch",
         "precision": "float32"},
        {"name": "guide's code: Keras fit, default strategy", "replicas": 1, **fit, "kind": "seed"},
        {"name": "kerasdist fit engine", "replicas": 1, **fit},
        {"name": "kerasdist fit engine, mirrored", "replicas": 2, **fit},
    ]
    # The JAX engine: fit() under keras.distribution.DataParallel, always compiled by XLA.
    jax = {"engine": "jax", "backend": "jax", "xla": True, "k": 1, "precision": "float32"}
    rows += [{"name": "kerasdist JAX engine", "kind": "train", "replicas": 1, **jax},
             {"name": "kerasdist JAX engine", "kind": "train", "replicas": 1, **jax, "k": k},
             {"name": "kerasdist JAX engine, DataParallel", "kind": "train", "replicas": 2, **jax, "k": k},
             {"name": "kerasdist JAX engine, 2 local processes", "kind": "workers", "workers": 2,
              "replicas": 2, **jax}]
    for xla in (False, True):
        for replicas in (1, 2, 4):
            rows.append({"name": "kerasdist loop engine" + (", mirrored" if replicas > 1 else ""),
                         "kind": "train", "engine": "loop", "replicas": replicas, "xla": xla, "k": k,
                         "precision": "float32"})
    rows.append({"name": "kerasdist loop engine", "kind": "train", "engine": "loop", "replicas": 1,
                 "xla": True, "k": 4 * k, "precision": "float32"})
    for xla in (False, True):
        rows.append({"name": "kerasdist loop engine, mixed_bfloat16", "kind": "train", "engine": "loop",
                     "replicas": 1, "xla": xla, "k": k, "precision": "mixed_bfloat16"})
    for xla in (False, True):
        for workers in (1, 2):
            rows.append({"name": f"kerasdist loop engine, {workers} local worker{'s' * (workers > 1)}",
                         "kind": "workers", "workers": workers, "replicas": workers, "xla": xla, "k": k,
                         "precision": "float32"})
    return rows


def benchmark_data(source):
    """Fashion-MNIST as it is, or the sample's training digits repeated to ``SAMPLE_TRAIN_IMAGES``."""
    import numpy as np

    from kerasdist.data import load_mnist

    data = load_mnist(source, seed=SEED, verbose=False)
    if source == "sample":
        repeat = np.resize(np.arange(len(data.y_train)), SAMPLE_TRAIN_IMAGES)
        data.x_train, data.y_train = data.x_train[repeat], data.y_train[repeat]
        data.description += f", training digits repeated to {SAMPLE_TRAIN_IMAGES}"
    return data


def run_limit():
    """The model's training FLOPs per sample and this CPU's matmul FLOP/s in float32 and bfloat16."""
    import kerasdist
    from kerasdist.model import build_model

    return {"flops_per_sample": kerasdist.training_flops_per_sample(build_model())["total"],
            "float32": kerasdist.matmul_flops_per_s("float32").median,
            "mixed_bfloat16": kerasdist.matmul_flops_per_s("bfloat16").median}


def run_seed_code(source, epochs):
    """The seed's single-host code as the TensorFlow guide writes it: plain Keras ``fit``, batch 64."""
    import tensorflow as tf

    from kerasdist.measure.speed_ladder import guide_model

    data = benchmark_data(source)
    keras.utils.set_random_seed(SEED)
    train = tf.data.Dataset.from_tensor_slices((data.x_train, data.y_train)).cache()
    train = train.shuffle(10_000).batch(GLOBAL_BATCH_SIZE)
    model = guide_model()
    timer = EpochTimer()
    model.fit(train, epochs=epochs, callbacks=[timer], verbose=0)
    _, accuracy = model.evaluate(data.x_test, data.y_test, verbose=0)
    speeds = [len(data.y_train) / seconds for seconds in timer.seconds]
    return {"samples_per_s": speeds, "test_accuracy": accuracy}


class EpochTimer(keras.callbacks.Callback):
    """Seconds per epoch of ``fit``."""

    def __init__(self):
        super().__init__()
        self.seconds = []
        self._start = 0.0

    def on_epoch_begin(self, epoch, logs=None):
        self._start = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        self.seconds.append(time.perf_counter() - self._start)


def run_reference(setup, source, epochs):
    """The hand-written JAX program: each epoch one ``lax.scan`` and its validation, in one jitted call."""
    import jax
    import jax.numpy as jnp

    from kerasdist.measure.speed_ladder import scan_state, validated_scan_epoch
    from kerasdist.model import build_model

    data = benchmark_data(source)
    keras.utils.set_random_seed(SEED)
    model = build_model()
    x, y = jax.device_put(data.x_train), jax.device_put(data.y_train.astype(np.int32))
    x_val, y_val = jax.device_put(data.x_val), jax.device_put(data.y_val.astype(np.int32))
    epoch = validated_scan_epoch(model, x, y, x_val, y_val, GLOBAL_BATCH_SIZE)
    state = scan_state(model)
    trained = len(data.y_train) // GLOBAL_BATCH_SIZE * GLOBAL_BATCH_SIZE
    generator, speeds = np.random.default_rng(SEED), []
    for _ in range(epochs):
        order = jnp.asarray(generator.permutation(len(data.y_train))[:trained])
        started = time.perf_counter()
        state, _, (_, validation_accuracy) = epoch(state, order)
        validation_accuracy.block_until_ready()
        speeds.append(trained / (time.perf_counter() - started))
    logits, _ = model.stateless_call(state[0], state[1], jnp.asarray(data.x_test), training=False)
    accuracy = float(np.mean(np.argmax(logits, axis=-1) == data.y_test))
    return {"samples_per_s": speeds, "test_accuracy": accuracy}


def run_kerasdist(setup, source, epochs):
    """kerasdist's ``run_training`` with the fit or loop engine on ``replicas`` local devices."""
    import kerasdist

    backend = setup.get("backend", "tensorflow")
    if backend == "tensorflow":
        kerasdist.configure_replicas(setup["replicas"])
    keras.mixed_precision.set_global_policy(setup["precision"])
    result = kerasdist.run_training(
        replicas=setup["replicas"], epochs=epochs, global_batch_size=GLOBAL_BATCH_SIZE,
        data=benchmark_data(source), seed=SEED, backend=backend,
        engine="auto" if backend == "jax" else setup["engine"], jit_compile=setup["xla"],
        steps_per_execution=setup["k"], verbose=0,
    )
    return {"samples_per_s": result.history["samples_per_s"], "test_accuracy": result.test["accuracy"]}


def run_worker(setup, source, epochs):
    """One worker of a local cluster (TF_CONFIG set by the parent); only the chief reports."""
    from kerasdist import cluster
    from kerasdist.cluster import roles

    task = cluster.parse_tf_config(os.environ["TF_CONFIG"])
    if setup.get("backend") == "jax":
        from kerasdist.engines import jax_engine
        from kerasdist.engines.options import TrainingOptions

        options = TrainingOptions(backend="jax", epochs=epochs, global_batch_size=GLOBAL_BATCH_SIZE,
                                  data=benchmark_data(source), seed=SEED, verbose=0)
        record = jax_engine.run_worker(jax_engine.process_of(task), options)
        return {"samples_per_s": record["history"]["samples_per_s"],
                "test_accuracy": record["test"]["accuracy"], "weights_sha256": record["weights_sha256"]}
    record = roles.run_worker(task, {
        "epochs": epochs, "global_batch_size": GLOBAL_BATCH_SIZE, "data": benchmark_data(source),
        "seed": SEED,
        "jit_compile": setup["xla"], "steps_per_execution": setup["k"],
    }, verbose=0)
    return {"samples_per_s": record["history"]["samples_per_s"], "test_accuracy": record["test"]["accuracy"],
            "weights_sha256": record["weights_sha256"]}


def measure(setup, source, epochs):
    """Run one setup in fresh processes; return its per-epoch samples/s and test accuracy."""
    command = [sys.executable, __file__, "--data", source, "--epochs", str(epochs),
               "--run", json.dumps(setup)]
    backend = {}
    if setup.get("backend") == "jax":  # this script imports Keras first: its backend and JAX's devices now
        devices = 1 if setup["kind"] == "workers" else setup["replicas"]
        backend = {"KERAS_BACKEND": "jax", "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}"}
    if setup["kind"] != "workers":
        return _result(subprocess.run(command, capture_output=True, text=True, check=False,
                                      env=dict(os.environ, **backend)))
    from kerasdist import cluster

    spec = cluster.local_cluster(setup["workers"])
    completed = []
    with tempfile.TemporaryDirectory() as directory:
        # Output goes to files, not pipes: a worker blocked on a full pipe would stall the others' all-reduce.
        logs = [(os.path.join(directory, f"{index}.out"), os.path.join(directory, f"{index}.err"))
                for index in range(setup["workers"])]
        workers = []
        for index, (out, err) in enumerate(logs):
            with open(out, "w") as stdout, open(err, "w") as stderr:
                environment = dict(os.environ, TF_CONFIG=cluster.tf_config(spec, "worker", index), **backend)
                workers.append(subprocess.Popen(command, stdout=stdout, stderr=stderr, env=environment))
        for worker, (out, err) in zip(workers, logs):
            worker.wait()
            with open(out) as stdout, open(err) as stderr:
                completed.append(subprocess.CompletedProcess(command, worker.returncode, stdout.read(),
                                                             stderr.read()))
    # A failed worker's error is the one to show, not the other's report of a lost peer.
    results = [_result(run) for run in sorted(completed, key=lambda run: run.returncode, reverse=True)]
    if len({result["weights_sha256"] for result in results}) != 1:
        raise RuntimeError(f"workers ended with different weights: {results}")
    return results[0]


def _result(completed):
    if completed.returncode:
        raise RuntimeError(f"benchmark run failed ({completed.returncode}):\n{completed.stderr[-3000:]}")
    return json.loads(completed.stdout.strip().splitlines()[-1])


def table(rows, limit, steps_per_execution):
    """Markdown table: median samples/s and every round's, ratio to the reference and to the guide's code,
    time ratio to the loop's 1 device at ``steps_per_execution``, share of the machine's limit (``limit``:
    see ``run_limit``), test accuracy."""
    reference = rows[0]["samples_per_s"]
    seed_rate = next(row["samples_per_s"] for row in rows if row["kind"] == "seed")
    one_device = {row["xla"]: row["samples_per_s"] for row in rows if row["kind"] == "train"
                  and row["engine"] == "loop" and row["replicas"] == 1 and row["precision"] == "float32"
                  and row["k"] == steps_per_execution}
    columns = ["setup", "replicas", "XLA", "steps/call", "samples/s (median)", "rounds", "x reference",
               "x guide's code", "time vs loop 1 device", "share of limit", "test accuracy"]
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        is_loop = row.get("engine") == "loop" or (row["kind"] == "workers" and row.get("backend") != "jax")
        time_ratio = f"{one_device[row['xla']] / row['samples_per_s']:.2f}" if is_loop else ""
        share = row["samples_per_s"] * limit["flops_per_sample"] / limit[row["precision"]]
        rounds = ", ".join(f"{rate:,.0f}" for rate in row["rounds"])
        lines.append(f"| {row['name']} | {row['replicas']} | {'on' if row['xla'] else 'off'} | {row['k']} | "
                     f"{row['samples_per_s']:,.0f} | {rounds} | {row['samples_per_s'] / reference:.2f} | "
                     f"{row['samples_per_s'] / seed_rate:.2f} | {time_ratio} | {share:.0%} | "
                     f"{row['test_accuracy']:.3f} |")
    kerasdist_rows = [row for row in rows if row["name"].startswith("kerasdist")]
    fastest = max(kerasdist_rows, key=lambda row: row["samples_per_s"])
    lines += ["", f"kerasdist's fastest setting: {fastest['name']} (replicas {fastest['replicas']}, XLA "
                  f"{'on' if fastest['xla'] else 'off'}, {fastest['k']} steps/call), "
                  f"{fastest['samples_per_s'] / reference:.2f}x the reference (medians of "
                  f"{len(fastest['rounds'])} rounds)"]
    return "\n".join(lines)


def ladder(source, epochs, repeats, limit):
    """Every rung of the speed ladder, ``repeats`` rounds of fresh processes; a Markdown table of medians."""
    from kerasdist.measure import speed_ladder

    rates = {rung: [] for rung in speed_ladder.RUNGS}
    accuracy = {}
    for round_number in range(repeats):  # rounds: a busy spell on a shared CPU hits one run of each rung
        for rung in speed_ladder.RUNGS:
            result = speed_ladder.measure(rung, source, epochs, own_process=True)
            rates[rung].append(speed_ladder.steady_samples_per_s(result))
            accuracy[rung] = result["test_accuracy"]
            print(f"ladder round {round_number + 1}/{repeats}: {rung}: {rates[rung][-1]:,.0f} samples/s",
                  flush=True)
    median = {rung: statistics.median(values) for rung, values in rates.items()}
    scan = median[speed_ladder.SCAN_RUNG]
    lines = ["| rung | samples/s (median) | runs | x scan epoch | share of measured peak | test accuracy |",
             "|---|---|---|---|---|---|"]
    for rung, value in median.items():
        runs = ", ".join(f"{rate:,.0f}" for rate in rates[rung])
        mfu = value * limit["flops_per_sample"] / limit["float32"]
        lines.append(f"| {rung} | {value:,.0f} | {runs} | {value / scan:.2f} | {mfu:.1%} | "
                     f"{accuracy[rung]:.3f} |")
    kerasdist_best = max((rung for rung in median if rung.startswith("kerasdist")), key=median.get)
    lines.append("")
    lines.append(f"kerasdist's fastest setting ({kerasdist_best}): {median[kerasdist_best] / scan:.2f}x the "
                 f"lax.scan epoch (medians of {repeats}); peak {limit['float32'] / 1e9:,.0f} GFLOP/s float32")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", choices=("sample", "fashion"), default="sample",
                        help="fashion: full-size Fashion-MNIST; sample: the MNIST sample repeated (default)")
    parser.add_argument("--epochs", type=int, default=3, help="epochs per setup; the first is not scored")
    parser.add_argument("--repeats", type=int, default=3,
                        help="measure every setup this many times, in rounds; each row keeps the median "
                             "(default 3)")
    parser.add_argument("--part", choices=("engines", "ladder", "all"), default="all",
                        help="the engines table, lesson 08's ladder, or both (default)")
    parser.add_argument("--steps-per-execution", type=int, default=50,
                        help="steps per call of the loop and JAX engines' rows (the loop also runs 4x this)")
    parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    parser.add_argument("--run", default=None, help=argparse.SUPPRESS)  # a child process: one setup
    args = parser.parse_args()
    if args.epochs < 2:
        parser.error(f"--epochs must be >= 2 (the first epoch is not scored). Received: {args.epochs}")
    if args.run:
        setup = json.loads(args.run)
        if setup["kind"] == "limit":
            result = run_limit()
        elif setup["kind"] == "seed":
            result = run_seed_code(args.data, args.epochs)
        else:
            run = {"train": run_kerasdist, "workers": run_worker, "reference": run_reference}[setup["kind"]]
            result = run(setup, args.data, args.epochs)
        print(json.dumps(result), flush=True)
        return
    limit = measure({"kind": "limit"}, args.data, args.epochs)
    print(f"limit: {limit['flops_per_sample']:,} FLOPs per sample; "
          f"matmul {limit['float32'] / 1e9:,.0f} GFLOP/s "
          f"float32, {limit['mixed_bfloat16'] / 1e9:,.0f} GFLOP/s bfloat16", flush=True)
    os.makedirs(args.out, exist_ok=True)
    if args.part in ("engines", "all"):
        engines(args, limit)
    if args.part in ("ladder", "all"):
        markdown = ladder(args.data, args.epochs, args.repeats, limit)
        with open(os.path.join(args.out, "ladder.md"), "w") as stream:
            stream.write(markdown + "\n")
        print("\n" + markdown + f"\n\nWrote {os.path.join(args.out, 'ladder.md')}")


def engines(args, limit):
    """The engines table: every setup of ``setups``, ``--repeats`` rounds (default 3), medians."""
    rows = [dict(setup, rounds=[]) for setup in setups(args.steps_per_execution)]
    rounds = args.repeats
    for round_number in range(rounds):
        for row in rows:
            started = time.perf_counter()
            result = measure(row, args.data, args.epochs)
            row["rounds"].append(statistics.median(result["samples_per_s"][1:]))
            row["test_accuracy"] = result["test_accuracy"]
            print(f"round {round_number + 1}/{rounds}: {row['name']} (replicas {row['replicas']}, XLA "
                  f"{'on' if row['xla'] else 'off'}, {row['k']} steps/call, {row['precision']}): "
                  f"{row['rounds'][-1]:,.0f} samples/s [{time.perf_counter() - started:.0f} s]", flush=True)
    for row in rows:
        row["samples_per_s"] = statistics.median(row["rounds"])
    markdown = table(rows, limit, args.steps_per_execution)
    with open(os.path.join(args.out, "engines.md"), "w") as stream:
        stream.write(markdown + "\n")
    with open(os.path.join(args.out, "engines.csv"), "w", newline="") as stream:
        columns = ["name", "kind", "replicas", "xla", "k", "precision", "samples_per_s", "test_accuracy"]
        writer = csv.DictWriter(stream, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    print("\n" + markdown)
    print(f"\nWrote {os.path.join(args.out, 'engines.md')} and engines.csv")


if __name__ == "__main__":
    main()
