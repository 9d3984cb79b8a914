"""The course's one hardware model (kerasdist.measure.hardware): a roofline per product, its parts adding up to the
step, and the same prediction printed by every lesson that predicts a GPU (03, 08, 09, in both languages)."""

import json
import re

import pytest

from kerasdist.measure import hardware
from kerasdist.measure.speed import ADAM_BYTES_PER_WEIGHT, dense_kernels
from test_notebooks import NOTEBOOKS

LESSONS_THAT_PREDICT_A_GPU = [NOTEBOOKS / f"{stem}{suffix}.ipynb" for stem in
                              ("03_convergence", "08_speed", "09_sync_cost") for suffix in ("", "_R")]


def test_each_product_takes_the_longer_of_its_arithmetic_and_its_memory_traffic():
    gpu = hardware.H100_SXM
    layer = [(784, 256)]
    (forward, kernel_gradient) = dense_kernels(layer, 64)
    step = hardware.predicted_step(layer, 64)
    expected = sum(max(k["flops"] / gpu.peak_flops["tensorfloat32"], k["bytes"] / gpu.memory_bytes_per_s)
                   for k in (forward, kernel_gradient))
    assert step["products"] == pytest.approx(expected)
    assert step["update"] == pytest.approx(ADAM_BYTES_PER_WEIGHT * (784 * 256 + 256) / gpu.memory_bytes_per_s)


def test_the_parts_of_a_predicted_step_add_up_to_the_step():
    for batch in (64, 4096):
        step = hardware.predicted_step(hardware.DENSE_LAYERS, batch)
        assert step["products"] + step["update"] + step["launch floor"] == pytest.approx(step["seconds"])


def test_a_products_bound_follows_its_intensity_and_the_number_type():
    assert hardware.predicted_step(hardware.DENSE_LAYERS, 64)["bound by"] == "memory"
    assert hardware.predicted_step([(8192, 8192)], 8192)["bound by"] == "arithmetic"
    assert hardware.ridge_point(dtype="bfloat16") == pytest.approx(2 * hardware.ridge_point())
    tf32, bf16 = (hardware.predicted_step(hardware.DENSE_LAYERS, 4096, dtype=d)["products"]
                  for d in ("tensorfloat32", "bfloat16"))
    assert bf16 == pytest.approx(tf32 / 2)  # half the bytes of memory-bound products


def test_nvlink_reaches_one_board_and_the_links_between_machines_any_count():
    assert hardware.LINKS["NVLink 4 (H100)"]["max_gpus"] == 8
    assert hardware.LINKS["InfiniBand NDR"]["max_gpus"] is None


def test_tensorflow_runs_float32_products_as_tensorfloat32_by_default():
    import tensorflow as tf

    # Lessons 3 and 8 say a float32 model's products run as TensorFloat-32 on the GPU's tensor cores.
    assert tf.config.experimental.tensor_float_32_execution_enabled()


def printed(notebook):
    with open(notebook) as stream:
        cells = json.load(stream)["cells"]
    return "".join("".join(output.get("text", "")) for cell in cells if cell["cell_type"] == "code"
                   for output in cell.get("outputs", []) if output.get("name") == "stdout")


@pytest.mark.parametrize("notebook", LESSONS_THAT_PREDICT_A_GPU, ids=[p.name for p in LESSONS_THAT_PREDICT_A_GPU])
def test_every_lesson_predicts_the_same_gpu_step_for_the_same_model_and_batch(notebook):
    expected = hardware.describe_step(hardware.DENSE_LAYERS, 4096)
    lines = re.findall(r"^model, NVIDIA H100 SXM, tensorfloat32, batch 4096: .+$", printed(notebook), re.M)
    assert lines and set(lines) == {expected}, f"{notebook.name} printed {lines}, the hardware model {expected!r}"
