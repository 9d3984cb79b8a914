"""Tests for kerasdist/measure/speed.py (the machine's limits: FLOPs, bytes, rates, timings) and training under a
mixed-precision policy."""

import logging
import math
import time

import keras
import pytest
import tensorflow as tf

import kerasdist
from kerasdist import model
from kerasdist.measure import speed


def test_training_flops_per_sample_counts_each_dense_kernel_forward_and_backward():
    kernels = [(784, 256), (256, 256), (256, 10)]
    forward = sum(2 * n_in * n_out for n_in, n_out in kernels)
    # Backward: every kernel's gradient, and the input gradient of every layer but the first.
    backward = forward + sum(2 * n_in * n_out for n_in, n_out in kernels[1:])
    assert kerasdist.training_flops_per_sample(model.build_model()) == {
        "forward": forward, "backward": backward, "total": forward + backward}
    assert forward + backward == 1_211_392


def test_cpu_bfloat16_instructions_are_read_from_the_flags_line(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu avx512f avx512_bf16 amx_bf16 amx_tile avx512_fp16\n"
                       "processor\t: 1\nflags\t\t: fpu avx512f avx512_bf16 amx_bf16 amx_tile avx512_fp16\n")
    assert kerasdist.cpu_bfloat16_instructions(cpuinfo) == ("amx_bf16", "avx512_bf16")
    cpuinfo.write_text("flags\t\t: fpu sse2 avx2\n")
    assert kerasdist.cpu_bfloat16_instructions(cpuinfo) == ()
    assert kerasdist.cpu_bfloat16_instructions(tmp_path / "missing") == ()


def test_step_kernels_are_the_training_flops_of_a_batch_with_each_operands_bytes():
    mlp = model.build_model()
    kernels = speed.step_kernels(mlp, 64)
    assert sum(kernel["flops"] for kernel in kernels) == 64 * kerasdist.training_flops_per_sample(mlp)["total"]
    first = kernels[0]
    assert (first["name"], first["m"], first["k"], first["n"]) == ("layer 1 forward", 64, 784, 256)
    assert first["bytes"] == 4 * (64 * 784 + 784 * 256 + 64 * 256)
    # Forward and kernel gradient for each of the 3 layers, an input gradient for all but the first.
    assert "layer 1 input gradient" not in [kernel["name"] for kernel in kernels] and len(kernels) == 8


def test_time_calls_reports_the_median_inside_its_spread():
    delays = iter([0.0] + [0.001 * (index % 5 + 1) for index in range(11)])
    timing = speed.time_calls(lambda: time.sleep(next(delays)), rounds=11)
    assert timing.low <= timing.median <= timing.high
    assert 0.002 < timing.median < 0.05 and timing.high - timing.low >= 0.001


@pytest.mark.parametrize("jit_compile", [False, True])
def test_gemm_rate_at_a_shape_is_a_finite_rate_with_its_spread(jit_compile):
    median, low, high = speed.gemm_flops_per_s(16, 32, 8, jit_compile=jit_compile, products=4, rounds=3)
    # The median, not the slowest round, is held to a rate: one round can stall on a loaded machine.
    assert math.isfinite(median) and 0 < low <= median <= high and median > 1e6


def test_memory_bandwidth_is_a_rate_of_gigabytes():
    median, low, high = speed.memory_bytes_per_s(megabytes=16, rounds=3)
    assert 0 < low <= median <= high and median > 1e8


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_matmul_throughput_is_a_finite_rate(dtype):
    median, low, high = kerasdist.matmul_flops_per_s(dtype, size=128, repeats=2, rounds=3)
    assert math.isfinite(median) and 0 < low <= median <= high and median > 1e6


def test_the_nominal_peak_is_an_upper_bound_of_the_measured_one():
    nominal = speed.nominal_flops_per_s()
    assert nominal.flops_per_s == nominal.cores * nominal.flops_per_cycle * nominal.clock_hz
    assert kerasdist.matmul_flops_per_s(size=256, repeats=4, rounds=3).high < nominal.flops_per_s


def test_the_nominal_peak_reads_the_widest_vectors_and_the_highest_clock(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("model name\t: Some CPU @ 2.00GHz\ncpu MHz\t\t: 1200.000\n"
                       "flags\t\t: fpu sse2 avx avx2 fma\n")
    nominal = speed.nominal_flops_per_s(cpuinfo=str(cpuinfo), cpufreq=str(tmp_path / "none"))
    assert (nominal.flops_per_cycle, nominal.clock_hz, nominal.clock_source) == (32, 2e9, "model name")
    assert nominal.model == "Some CPU @ 2.00GHz"
    assert speed.nominal_flops_per_s("bfloat16", cpuinfo=str(cpuinfo)).flops_per_cycle == 32
    (tmp_path / "cpufreq").mkdir()
    (tmp_path / "cpufreq" / "cpuinfo_max_freq").write_text("3500000\n")
    cpuinfo.write_text(cpuinfo.read_text().replace("avx2 fma", "avx2 fma avx512f avx512_bf16"))
    nominal = speed.nominal_flops_per_s("bfloat16", cpuinfo=str(cpuinfo), cpufreq=str(tmp_path / "cpufreq"))
    assert (nominal.flops_per_cycle, nominal.clock_hz, nominal.instructions) == (128, 3.5e9, "avx512_bf16")


def test_the_nominal_peak_without_cpuinfo_is_one_clear_error(tmp_path):
    with pytest.raises(RuntimeError, match="needs"):
        speed.nominal_flops_per_s(cpuinfo=str(tmp_path / "missing"))


@pytest.mark.parametrize("engine", ["fit", "loop"])
def test_both_engines_train_under_mixed_bfloat16_with_float32_logits(sample_data, engine):
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        result = kerasdist.run_training(replicas=1, epochs=1, data=sample_data, engine=engine, verbose=0)
        built = model.build_model()
    finally:
        keras.mixed_precision.set_global_policy("float32")
    assert built.layers[1].compute_dtype == "bfloat16" and built.layers[-1].compute_dtype == "float32"
    assert math.isfinite(result.history["loss"][0]) and result.test["accuracy"] > 0.5


def test_programs_timed_together_take_turns_and_are_recorded():
    order, rounds = [], []
    programs = {name: (order.append, (name,)) for name in ("forward", "whole step")}
    timings = speed.time_programs(programs, rounds=3, on_round=lambda: rounds.append(len(order)))
    assert order == ["forward", "whole step"] * 4  # one warm-up call each, then 3 rounds in turn
    assert rounds == [4, 6, 8]
    assert list(timings) == ["forward", "whole step"]
    assert all(timing in speed.measured_timings() for timing in timings.values())


def test_the_warm_up_of_programs_made_by_one_function_gives_no_retracing_warning():
    def steps(k):
        @tf.function
        def run(x):
            return x * k
        return run

    def same_steps(k):  # another Python function: TensorFlow counts traces (and warns at most twice) per function
        @tf.function
        def run(x):
            return x * k
        return run

    class Kept(logging.Handler):
        def __init__(self):
            super().__init__()
            self.messages = []

        def emit(self, record):
            self.messages.append(record.getMessage())

    kept = Kept()
    logging.getLogger("tensorflow").addHandler(kept)
    try:
        speed.time_programs({f"program {k}": (steps(k), (tf.constant(1.0),)) for k in range(6)}, rounds=3)
        assert not [message for message in kept.messages if "retracing" in message]
        for k in range(6):  # the same warm-up, outside time_programs: TensorFlow's own warning
            same_steps(k)(tf.constant(1.0))
        assert [message for message in kept.messages if "retracing" in message]
    finally:
        logging.getLogger("tensorflow").removeHandler(kept)
