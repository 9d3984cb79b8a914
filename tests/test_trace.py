"""Tests for kerasdist/measure/trace.py and kerasdist/measure/scan_variants.py: lesson 08's trace of one step
and its scan epoch taken apart."""

import math
import os
import subprocess
import sys

import pytest
import tensorflow as tf

from kerasdist import model
from kerasdist.measure import scan_variants, speed, trace


def test_a_traced_step_holds_each_part_of_the_step_within_the_call():
    mlp = model.build_model()
    x, y = tf.random.stateless_normal((64, 784), seed=(0, 1)), tf.zeros((64,), tf.int32)

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = mlp.loss(y, mlp(x, training=True))
        mlp.optimizer.apply(tape.gradient(loss, mlp.trainable_variables), mlp.trainable_variables)
        return loss

    traced = trace.trace_step(step, x, y, optimizer_name=mlp.optimizer.name)
    parts = {op["part"] for op in traced["ops"]}
    assert parts == {"backward", "optimizer update", trace.OTHER_PART}
    assert all(0 <= op["start"] and op["start"] + op["seconds"] <= traced["seconds"] * 1.01 for op in traced["ops"])
    assert 0 < trace.busy_seconds(traced["ops"]) <= traced["seconds"] * 1.01
    # Every product of the MLP's training step ran: 3 forward (fused with bias and ReLU), 5 backward.
    products = [op for op in traced["ops"] if "MatMul" in op["type"]]
    assert len([op for op in products if op["part"] == "backward"]) == 5, products


def test_a_steps_parts_add_up_to_the_step_measured_at_one_per_call():
    work = tf.random.stateless_normal((256, 256), seed=(0, 2))
    programs = {"forward": 1, "forward + backward": 2, "whole step": 3, "whole step, 1 per call": 4}
    medians = {name: speed.time_calls(lambda n=n: [tf.linalg.matmul(work, work) for _ in range(n)][-1],
                                      rounds=5).median for name, n in programs.items()}
    parts = speed.step_breakdown(medians)
    assert list(parts) == ["forward", "backward", "optimizer update", "host overhead per call"]
    assert math.isclose(sum(parts.values()), medians["whole step, 1 per call"], rel_tol=1e-9, abs_tol=1e-11)
    assert math.isclose(parts["optimizer update"], medians["whole step"] - medians["forward + backward"],
                        abs_tol=1e-11)


@pytest.mark.slow  # a JAX process of its own: make test
def test_the_scan_variants_run_the_same_steps_and_time_each_way():
    variants = scan_variants.measure("sample", steps=5, rounds=3)
    assert list(variants) == list(scan_variants.VARIANTS)
    for variant in variants.values():
        median, low, high = variant["samples_per_s"]
        assert 0 < low <= median <= high
    losses = [variant["last_loss"] for variant in variants.values()]
    assert max(losses) - min(losses) < 1e-3 * max(abs(loss) for loss in losses), losses


def test_the_scan_variants_refuse_the_tensorflow_backend_in_one_line():
    completed = subprocess.run([sys.executable, "-m", "kerasdist.measure.scan_variants"], capture_output=True,
                               text=True, timeout=120, check=False,
                               env={**os.environ, "KERAS_BACKEND": "tensorflow"})
    assert completed.returncode == 2
    assert completed.stderr.strip().splitlines() == [
        "kerasdist: error: the scan variants need KERAS_BACKEND=jax. Received: tensorflow"]
