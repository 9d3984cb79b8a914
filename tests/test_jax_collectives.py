"""JAX's collectives and Keras' layouts, measured in a JAX process of its own: each device's bytes follow
the formulas, the compiled step holds the collectives each layout implies, and all-reduces take longer
the larger they are."""

import importlib.util
import math
import re
import subprocess
import sys

import pytest

from kerasdist.errors import KerasdistError
from kerasdist.measure.jax_collectives import (
    LAYOUTS,
    _in_child,
    activation_memory,
    collective_shapes,
    count_collectives,
    jax_allreduce_seconds,
    layout_costs,
)
from kerasdist.model import build_model

needs_jax = pytest.mark.skipif(importlib.util.find_spec("jax") is None,
                               reason="JAX is not installed (the jax extra: pip install 'kerasdist[jax]')")
DEVICES = 4
FLOAT32 = 4
STATE_COPIES = 3  # a float32 weight, and Adam's two moments laid out as it
ADAM_SCALARS = 2 * 4  # Adam's iteration counter (int32: JAX without x64) and learning rate, on every device


@pytest.fixture(scope="module")
def shapes():
    """The course's MLP's weights, {path: shape}, read from the model (built here on TensorFlow)."""
    return {variable.path: tuple(variable.shape) for variable in build_model().weights}


@pytest.fixture(scope="module")
def costs():
    return layout_costs(DEVICES)


def state_bytes(shapes, split):
    """Bytes of weights and Adam's state on one device, ``split(path)`` telling which weights are sharded."""
    held = sum(STATE_COPIES * FLOAT32 * math.prod(shape) // (DEVICES if split(path) else 1)
               for path, shape in shapes.items())
    return held + ADAM_SCALARS


@needs_jax
def test_each_devices_bytes_are_replicated_sharded_or_split_as_each_layout_says(costs, shapes):
    assert list(costs) == list(LAYOUTS)
    expected = {
        "data parallel": state_bytes(shapes, lambda path: False),
        # ZeRO stage 3: every kernel's rows split over the devices, the biases copied.
        "sharded data parallel": state_bytes(shapes, lambda path: path.endswith("kernel")),
        # Lesson 07's layout: the hidden layers' kernels and biases split by columns, the logits layer copied.
        "tensor parallel": state_bytes(shapes, lambda path: re.fullmatch("dense.*(kernel|bias)", path)),
    }
    for layout, cost in costs.items():
        assert cost["bytes_per_device"] == cost["max_bytes_per_device"] == expected[layout], layout
        assert cost["parameters"] == sum(math.prod(shape) for shape in shapes.values())
    assert costs["data parallel"]["bytes_per_device"] == 12 * costs["data parallel"]["parameters"] + ADAM_SCALARS


@needs_jax
def test_the_compiled_step_holds_the_collectives_each_layout_implies(costs, shapes):
    data_parallel, sharded, tensor_parallel = (costs[layout]["collectives"] for layout in LAYOUTS)
    # XLA on CPU combines no all-reduces: one per gradient, and one for the loss's mean over the batch.
    assert data_parallel == {"all-reduce": len(shapes) + 1, "all-gather": 0, "reduce-scatter": 0,
                             "collective-permute": 0, "all-to-all": 0}
    # Sharded: each kernel is all-gathered for the forward pass. XLA on CPU emits no reduce-scatter (its
    # pipeline has no pass that makes one): every gradient is all-reduced whole, and each device keeps its
    # rows. In the backward pass it gathers the activations' gradients rather than the kernels again, and
    # all-to-all moves them back onto the batch split.
    kernels = sum(path.endswith("kernel") for path in shapes)
    assert sharded["all-gather"] >= kernels and sharded["reduce-scatter"] == 0
    assert sharded["all-reduce"] == data_parallel["all-reduce"]
    # Tensor parallel (batch axis of 1): no gradient is all-reduced, the split activations are gathered
    # and the partial sums over split columns all-reduced.
    assert tensor_parallel["all-gather"] >= 1 and 1 <= tensor_parallel["all-reduce"] < data_parallel["all-reduce"]
    assert tensor_parallel["reduce-scatter"] == 0


@needs_jax
def test_the_sharded_step_gathers_each_kernel_once_and_activation_gradients_over_the_batch(costs, shapes):
    kernels = sorted(f"f32[{shape[0]},{shape[1]}]" for path, shape in shapes.items() if path.endswith("kernel"))
    gathered = costs["sharded data parallel"]["all_gathers"]
    # GSPMD keeps the gathered kernels for the backward pass: each is gathered once, not again.
    assert sorted(shape for shape in gathered if shape in kernels) == kernels
    assert all(shape.startswith("f32[64,") for shape in gathered if shape not in kernels)
    assert len(gathered) == costs["sharded data parallel"]["collectives"]["all-gather"]


def test_collective_shapes_are_read_from_the_result_of_each_instruction():
    text = ("%ag = f32[784,256]{1,0} all-gather(f32[196,256]{1,0} %p), dimensions={0}\n"
            "%ar = f32[10]{0} all-reduce(f32[10]{0} %g), to_apply=%add\n"
            "%ag.2 = f32[64,10]{1,0} all-gather(f32[16,10]{1,0} %q), dimensions={0}\n")
    assert collective_shapes(text, "all-gather") == ["f32[784,256]", "f32[64,10]"]
    assert collective_shapes(text, "all-reduce") == ["f32[10]"]


@needs_jax
def test_activation_memory_grows_with_the_batch_and_checkpointing_saves_only_inside_a_loop():
    found = activation_memory((64, 1024))
    mlp, blocks = found["the MLP"], found["4 wide blocks"]
    for network in (mlp, blocks):
        assert network["plain"][1] > 8 * network["plain"][0]  # 16 times the batch: activations dominate
    # The MLP's layers keep only their inputs, which the next layer needs anyway: nothing to save or recompute.
    assert mlp["checkpointed"] == mlp["plain"] and mlp["dots"][0] == mlp["dots"][1]
    # A block of two layers recomputes its inner activation in the backward pass and keeps less.
    assert blocks["checkpointed"][1] < 0.75 * blocks["plain"][1] and blocks["dots"][1] > blocks["dots"][0]


def test_collectives_are_counted_by_opcode_and_an_asynchronous_pair_once():
    text = ("%all-reduce.1 = f32[8]{0} all-reduce(f32[8]{0} %p), to_apply=%add\n"
            "%ag = (f32[2]{0}, f32[8]{0}) all-gather-start(f32[2]{0} %p)\n"
            "%done = f32[8]{0} all-gather-done((f32[2]{0}, f32[8]{0}) %ag)\n"
            "%t = (f32[1,4]{1,0}, f32[1,4]{1,0}) all-to-all(f32[1,4]{1,0} %a, f32[1,4]{1,0} %b)\n"
            "%add.3 = f32[] add(f32[] %all-reduce.1, f32[] %x)\n")
    assert count_collectives(text) == {"all-reduce": 1, "all-gather": 1, "reduce-scatter": 0,
                                       "collective-permute": 0, "all-to-all": 1}


@needs_jax
def test_a_jax_all_reduce_is_timed_in_seconds():
    small, large = jax_allreduce_seconds(2, sizes=(1 << 10, 16 << 20))
    assert 0 < small < 60 and 0 < large < 60  # ordering under load: the slow test


@needs_jax
def test_a_slow_or_failing_measurement_is_one_line():
    with pytest.raises(KerasdistError) as slow:
        jax_allreduce_seconds(2, sizes=(1 << 10,), timeout_s=0.01)
    assert str(slow.value) == "timing the all-reduce across 2 devices on JAX took over 0.01 s; pass a larger timeout_s"
    with pytest.raises(KerasdistError) as failed:
        _in_child({"measure": "all-reduce", "devices": 2}, "timing nothing", timeout_s=120)
    assert str(failed.value) == "timing nothing on JAX failed: KeyError: 'sizes'"


def test_devices_that_cannot_split_the_model_are_refused():
    with pytest.raises(KerasdistError, match=r"^devices must be a divisor of 16 and of batch_size=64. Received: devices=3;"):
        layout_costs(3)
    with pytest.raises(KerasdistError, match=r"^replicas must be an integer >= 2. Received: replicas=1;"):
        jax_allreduce_seconds(1, sizes=(1 << 10,))


def test_without_jax_the_error_names_the_extra():
    code = ("import sys\n"
            "sys.modules['jax'] = None  # JAX made impossible to import in this process\n"
            "from kerasdist.measure.jax_collectives import layout_costs\n"
            "layout_costs()\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stderr.strip().splitlines()[-1] == ("kerasdist.errors.KerasdistError: JAX is not installed: install "
                                                    "the project's jax extra (pip install 'kerasdist[jax]')")
