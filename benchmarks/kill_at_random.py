"""Kill a training at random moments (SIGKILL), rerun it, and check it ends with the uninterrupted weights.

Each chain trains in a fresh checkpoint directory: the same ``kerasdist train``
command is started, SIGKILLed at a random moment, started again, and so on
(``--kills-per-chain`` times); then it is left to finish. Half the kills come
at a random time, half the instant a checkpoint write is seen in progress
(TensorFlow's ``ckpt-N_temp`` folder exists), so that saves cut short are
covered. Chains alternate between the fit and the loop engine, each compared
with an uninterrupted run of its own engine: every tensor of the final
checkpoint (weights, optimizer state, run position) must match within 1e-6.

    python benchmarks/kill_at_random.py --kills 30

It prints one line per kill and a summary, and exits 1 if a rerun failed or
its weights differ.
"""

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np
import tensorflow as tf

TOLERANCE = 1e-6
ENGINES = ("fit", "loop")


def train_command(engine, directory, epochs, save_every_steps):
    return [sys.executable, "-m", "kerasdist", "train", "--engine", engine, "--epochs", str(epochs),
            "--data", "sample", "--save-every-steps", str(save_every_steps), "--steps-per-execution", "3",
            "--checkpoint-dir", directory, "--json"]


def run_to_end(command, timeout_s):
    completed = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, check=False)
    if completed.returncode != 0:
        raise RuntimeError(f"run failed with status {completed.returncode}: {completed.stderr[-1500:]}")
    return json.loads(completed.stdout.strip().splitlines()[-1])


def saving_now(directory):
    """Whether a checkpoint write is in progress (TensorFlow writes into ckpt-N_temp first)."""
    try:
        return any(entry.name.endswith("_temp") for entry in os.scandir(directory))
    except FileNotFoundError:
        return False


def kill_once(command, directory, mode, rng, expected_s, timeout_s):
    """Start ``command`` and SIGKILL it; return what the kill hit, or None if the run ended first."""
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    start = time.monotonic()
    kill_at = start + rng.uniform(0.2, 1.0) * expected_s
    try:
        while process.poll() is None and time.monotonic() - start < timeout_s:
            if mode == "during save" and saving_now(directory):
                break
            if mode == "random time" and time.monotonic() >= kill_at:
                break
            time.sleep(0.002)
        if process.poll() is not None:
            return None
        hit_save = saving_now(directory)
        process.send_signal(signal.SIGKILL)
        process.wait()
        return {"after_s": round(time.monotonic() - start, 2), "during_save": hit_save}
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def max_difference(prefix, reference_prefix):
    """Largest |difference| over every tensor of two checkpoints (``save_counter`` aside)."""
    ours, theirs = tf.train.load_checkpoint(prefix), tf.train.load_checkpoint(reference_prefix)
    names = [name for name in theirs.get_variable_to_shape_map()
             if name.endswith(".ATTRIBUTES/VARIABLE_VALUE") and not name.startswith("save_counter")]
    if sorted(names) != sorted(name for name in ours.get_variable_to_shape_map()
                               if name.endswith(".ATTRIBUTES/VARIABLE_VALUE")
                               and not name.startswith("save_counter")):
        return float("inf")
    return max(float(np.max(np.abs(np.asarray(ours.get_tensor(name), dtype=np.float64)
                                   - np.asarray(theirs.get_tensor(name), dtype=np.float64))))
               for name in names)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=30, help="SIGKILLs in all (default 30)")
    parser.add_argument("--kills-per-chain", type=int, default=3, help="kills before a chain may finish")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--save-every-steps", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0, help="seeds the kill moments")
    parser.add_argument("--timeout-s", type=float, default=900, help="bound on any one run")
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    workspace = tempfile.mkdtemp(prefix="kill-at-random-")
    began = time.monotonic()
    references, expected_s = {}, {}
    for engine in ENGINES:
        directory = os.path.join(workspace, f"reference-{engine}")
        start = time.monotonic()
        references[engine] = run_to_end(train_command(engine, directory, args.epochs, args.save_every_steps),
                                        args.timeout_s)["checkpoint"]
        expected_s[engine] = time.monotonic() - start
        print(f"reference {engine}: {expected_s[engine]:.1f} s, {references[engine]}", flush=True)
    kills, chains, failures, worst = [], 0, [], 0.0
    while len(kills) < args.kills:
        engine = ENGINES[chains % len(ENGINES)]
        directory = os.path.join(workspace, f"chain-{chains}")
        command = train_command(engine, directory, args.epochs, args.save_every_steps)
        chains += 1
        for _ in range(min(args.kills_per_chain, args.kills - len(kills))):
            mode = "during save" if len(kills) % 2 else "random time"
            hit = kill_once(command, directory, mode, rng, expected_s[engine], args.timeout_s)
            if hit is None:
                break  # it finished before the kill came
            kills.append({"chain": chains - 1, "engine": engine, "mode": mode, **hit})
            print(f"kill {len(kills):3d}: chain {chains - 1} ({engine}), {mode}, after {hit['after_s']} s, "
                  f"checkpoint write in progress: {hit['during_save']}", flush=True)
        try:
            record = run_to_end(command, args.timeout_s)
        except (RuntimeError, subprocess.TimeoutExpired) as error:
            failures.append(f"chain {chains - 1}: {error}")
            print(f"chain {chains - 1}: rerun FAILED: {error}", flush=True)
            continue
        difference = max_difference(record["checkpoint"], references[engine])
        worst = max(worst, difference)
        ok = difference <= TOLERANCE and record["history"]["epoch"] == list(range(args.epochs))
        if not ok:
            failures.append(f"chain {chains - 1}: max difference {difference:.3g}")
        print(f"chain {chains - 1} ({engine}): rerun resumed from step {record['resumed_from_step']} and "
              f"finished; max |weight difference| {difference:.3g} {'ok' if ok else 'FAILED'}", flush=True)
    summary = {
        "kills": len(kills),
        "kills_during_checkpoint_write": sum(kill["during_save"] for kill in kills),
        "chains": chains,
        "chains_equal_to_uninterrupted": chains - len(failures),
        "max_abs_weight_difference": worst,
        "tolerance": TOLERANCE,
        "seconds": round(time.monotonic() - began, 1),
    }
    print(json.dumps(summary), flush=True)
    for failure in failures:
        print(f"FAILED {failure}", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
