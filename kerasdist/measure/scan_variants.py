"""Lesson 08's scan epoch taken apart: the same training steps, run in one ``jax.lax.scan`` or one jitted
call per step, with the batches gathered in the step or before, measured side by side on JAX.

Every variant trains the same ``steps`` steps of the ladder's MLP from the
same weights on the same batches, so their times differ only by how the
steps are run; the rounds take the variants in turn, so that a busy spell of
a shared machine falls on all of them. They run in a process of their own
(``python -m kerasdist.measure.scan_variants``), because Keras chooses its
backend once, before it loads; the wait for it is bounded.

Example:
    >>> from kerasdist.measure import scan_variants
    >>> variants = scan_variants.measure("sample", steps=20, rounds=3)  # doctest: +SKIP
    >>> variants["one jitted step per Python call"]["samples_per_s"]     # doctest: +SKIP
    (34302.6, 32698.9, 39857.4)
"""

import argparse
import json
import os
import subprocess
import sys
import threading

import numpy as np

from kerasdist.errors import KerasdistError
from kerasdist.measure import speed_ladder
from kerasdist.measure.speed import time_programs

VARIANTS = {
    "scan, each batch gathered in its step (the rung)": {"scan": True, "gather": "in step", "unroll": 1},
    "scan, batches gathered before the scan": {"scan": True, "gather": "before", "unroll": 1},
    "scan, 10 steps unrolled per iteration": {"scan": True, "gather": "in step", "unroll": 10},
    "one jitted step per Python call": {"scan": False, "donate": False},
    "one jitted step per Python call, state donated": {"scan": False, "donate": True},
}
STEPS = 200
ROUNDS = 5
TIMEOUT_S = 600
PROGRESS = "progress: "  # how the child marks a line of progress on its stderr


def measure(data_source="fashion", steps=STEPS, rounds=ROUNDS, progress=True):
    """Each of ``VARIANTS`` measured in a JAX process: its samples/s and the loss of its last step.

    Every variant runs ``steps`` steps per round, for a warm-up round and
    ``rounds`` timed ones, from the same start on the same batches, so their
    last losses agree up to rounding. With ``progress``, a line is printed as
    each round ends.

    Returns:
        ``{variant: {"samples_per_s": (median, low, high), "last_loss": float}}``.

    Raises:
        KerasdistError: when that process fails or outlives ``TIMEOUT_S``.
    """
    command = [sys.executable, "-m", "kerasdist.measure.scan_variants", "--data", str(data_source),
               "--steps", str(steps), "--rounds", str(rounds)]
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=dict(os.environ, KERAS_BACKEND="jax"))
    errors = []

    def relay():  # the child's stderr: its progress lines are shown, the rest kept for an error message
        for line in child.stderr:
            if line.startswith(PROGRESS) and progress:
                print(line[len(PROGRESS):].rstrip(), flush=True)
            else:
                errors.append(line)
    reader = threading.Thread(target=relay, daemon=True)
    reader.start()
    try:
        child.wait(timeout=TIMEOUT_S)  # its stdout holds one line of JSON, which no pipe's buffer fills up on
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()
        raise KerasdistError(f"the scan variants did not finish within {TIMEOUT_S} s") from None
    reader.join(timeout=5)
    output = child.stdout.read()
    if child.returncode:
        raise KerasdistError(f"the scan variants failed (exit {child.returncode}):\n"
                             f"{''.join(errors)[-speed_ladder.STDERR_TAIL_CHARS:]}")
    variants = json.loads(output.strip().splitlines()[-1])
    return {name: {"samples_per_s": tuple(variant["samples_per_s"]), "last_loss": variant["last_loss"]}
            for name, variant in variants.items()}


def _measure_here(data, steps, rounds, batch_size=speed_ladder.BATCH_SIZE):
    import jax
    import jax.numpy as jnp

    model = speed_ladder.guide_model()
    model.optimizer.build(model.trainable_variables)
    x, y = jax.device_put(data.x_train), jax.device_put(data.y_train.astype(np.int32))
    # A shuffled order of the samples, repeated where ``steps`` batches need more samples than there are.
    order = jnp.asarray(np.resize(np.random.default_rng(speed_ladder.SEED).permutation(len(data.y_train)),
                                  steps * batch_size))
    start = speed_ladder.scan_state(model)
    step_on = speed_ladder.stateless_step(model)

    def step_gathering(state, indices):
        return step_on(state, (x[indices], y[indices]))

    def batches(order):
        return x[order].reshape(steps, batch_size, -1), y[order].reshape(steps, batch_size)

    def run_of(variant):
        if variant["scan"] and variant["gather"] == "in step":
            return jax.jit(lambda state, order: jax.lax.scan(step_gathering, state, order.reshape(steps, -1),
                                                             unroll=variant["unroll"]))
        if variant["scan"]:
            return jax.jit(lambda state, order: jax.lax.scan(step_on, state, batches(order)))
        one_step = jax.jit(step_on, donate_argnums=0 if variant["donate"] else ())
        gather = jax.jit(batches)

        def per_step_calls(state, order):
            xs, ys = gather(order)
            for index in range(steps):
                state, loss = one_step(state, (xs[index], ys[index]))
            return state, loss
        return per_step_calls

    states = {name: jax.tree_util.tree_map(jnp.copy, start) for name in VARIANTS}  # donation consumes a state
    losses = {}

    def program(name, run):
        def one_call():  # runs the steps from this variant's own state, and waits for their end
            states[name], loss = run(states[name], order)
            losses[name] = jax.block_until_ready(loss).reshape(-1)[-1]
        return one_call, ()

    rounds_done = []

    def report_round():
        rounds_done.append(1)
        print(f"{PROGRESS}round {len(rounds_done)} of {rounds}: {len(VARIANTS)} ways, {steps} steps each",
              file=sys.stderr, flush=True)

    timings = time_programs({name: program(name, run_of(variant)) for name, variant in VARIANTS.items()},
                            rounds=rounds, on_round=report_round)
    samples = steps * batch_size
    return {name: {"samples_per_s": (samples / timing.median, samples / timing.high, samples / timing.low),
                   "last_loss": float(losses[name])} for name, timing in timings.items()}


def main(argv=None):
    """``python -m kerasdist.measure.scan_variants``: measure every variant here (KERAS_BACKEND=jax);
    print their samples/s (median, low, high) and last losses as one JSON line."""
    import keras

    parser = argparse.ArgumentParser(prog="python -m kerasdist.measure.scan_variants",
                                     description=main.__doc__)
    parser.add_argument("--data", default="fashion")
    parser.add_argument("--steps", type=int, default=STEPS)
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    args = parser.parse_args(argv)
    if keras.backend.backend() != "jax":
        parser.exit(2, f"kerasdist: error: the scan variants need KERAS_BACKEND=jax. Received: "
                       f"{keras.backend.backend()}\n")
    if args.steps < 1 or args.rounds < 3:
        parser.exit(2, "kerasdist: error: --steps must be at least 1 and --rounds at least 3\n")
    from kerasdist.data import load_mnist

    data = load_mnist(args.data, seed=speed_ladder.SEED, verbose=False)
    print(json.dumps(_measure_here(data, args.steps, args.rounds)), flush=True)


if __name__ == "__main__":
    main()
