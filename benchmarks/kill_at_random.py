"""Kill a training at random moments (SIGKILL), rerun it, and check it ends with the uninterrupted weights.

Each chain trains in a fresh checkpoint directory: the same ``kerasdist train``
command is started, SIGKILLed at a random moment, started again, and so on
(``--kills-per-chain`` times); then it is left to finish. Each kill comes after
a random step between the run's resume point and the end: half of them a
random 0-0.5 s later, half the instant a new checkpoint write is seen in
progress (a new ``ckpt-N_temp`` folder), so that saves cut short are covered.
Chains alternate between the fit and the loop engine, each compared
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


def saves_in_progress(directory):
    """The checkpoint writes under way or cut short (TensorFlow writes into ckpt-N_temp first)."""
    try:
        return {entry.name for entry in os.scandir(directory) if entry.name.endswith("_temp")}
    except FileNotFoundError:
        return set()


def resume_step(directory):
    """The global step a rerun would resume from (the newest checkpoint's number), 0 if none."""
    latest = tf.train.latest_checkpoint(directory) if os.path.isdir(directory) else None
    return int(latest.rpartition("-")[2]) if latest else 0


def logged_step(directory):
    """The highest global step in the metrics log (0 if none)."""
    try:
        with open(os.path.join(directory, "metrics.jsonl")) as stream:
            steps = [json.loads(line).get("global_step", 0) for line in stream if line.endswith("\n")]
    except (OSError, json.JSONDecodeError):
        return 0
    return max(steps, default=0)


def log_identity(directory):
    """The metrics log's inode (None if absent): a resuming run replaces the file."""
    try:
        return os.stat(os.path.join(directory, "metrics.jsonl")).st_ino
    except FileNotFoundError:
        return None


def kill_once(command, directory, mode, rng, total_steps, timeout_s):
    """Start ``command`` and SIGKILL it at a random step after its resume point; None if it ended first.

    "random time": a random delay (0-0.5 s) after a random step is logged; "during save": the
    instant a checkpoint write begins after that step.
    """
    first = resume_step(directory)
    if first >= total_steps - 1:
        return None
    target = rng.randint(first + 1, total_steps - 1)
    stale = saves_in_progress(directory)  # left by an earlier kill: not this run's writes
    old_log = log_identity(directory)  # a rerun rewrites the log, cut back to its resume point
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    start, kill_at = time.monotonic(), None
    try:
        while process.poll() is None and time.monotonic() - start < timeout_s:
            fresh_log = log_identity(directory) not in (None, old_log)
            if kill_at is None and fresh_log and logged_step(directory) >= target:
                kill_at = time.monotonic() + rng.uniform(0, 0.5)
            if kill_at is not None and mode == "during save" and saves_in_progress(directory) - stale:
                break
            if kill_at is not None and mode == "random time" and time.monotonic() >= kill_at:
                break
            time.sleep(0.002)
        if process.poll() is not None:
            return None
        hit_save = bool(saves_in_progress(directory) - stale)
        process.send_signal(signal.SIGKILL)
        process.wait()
        return {"after_s": round(time.monotonic() - start, 2), "from_step": first, "target_step": target,
                "during_save": hit_save}
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
    references = {}
    for engine in ENGINES:
        directory = os.path.join(workspace, f"reference-{engine}")
        start = time.monotonic()
        command = train_command(engine, directory, args.epochs, args.save_every_steps)
        record = run_to_end(command, args.timeout_s)
        references[engine], total_steps = record["checkpoint"], record["steps"]["global_step"][-1]
        print(f"reference {engine}: {time.monotonic() - start:.1f} s, {references[engine]}", flush=True)
    kills, chains, failures, worst = [], 0, [], 0.0
    while len(kills) < args.kills:
        engine = ENGINES[chains % len(ENGINES)]
        directory = os.path.join(workspace, f"chain-{chains}")
        command = train_command(engine, directory, args.epochs, args.save_every_steps)
        chains += 1
        for _ in range(min(args.kills_per_chain, args.kills - len(kills))):
            mode = "during save" if len(kills) % 2 else "random time"
            hit = kill_once(command, directory, mode, rng, total_steps, args.timeout_s)
            if hit is None:
                break  # it finished before the kill came
            kills.append({"chain": chains - 1, "engine": engine, "mode": mode, **hit})
            print(f"kill {len(kills):3d}: chain {chains - 1} ({engine}), {mode}, after {hit['after_s']} s, "
                  f"run resumed at step {hit['from_step']}, killed after step {hit['target_step']}, "
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
        "kills_after_a_resume": sum(kill["from_step"] > 0 for kill in kills),
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
