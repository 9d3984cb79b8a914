"""Tests for kerasdist/speed.py (the machine's limit) and training under a mixed-precision policy."""

import math

import keras
import pytest

import kerasdist
from kerasdist import model


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


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_matmul_throughput_is_a_finite_rate(dtype):
    rate = kerasdist.matmul_flops_per_s(dtype, size=128, repeats=2, rounds=2)
    assert math.isfinite(rate) and rate > 1e6


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
