"""One hardware model for the course: a GPU's and its links' published figures, with their sources.

No GPU ran this course. Lessons 3, 8 and 9 predict a GPU's training step from these figures, and
say that it is a model: each of the step's matrix products takes the longer of its arithmetic at
the GPU's peak and its memory traffic at the GPU's bandwidth (a roofline: a lower bound for the
products where every operand comes from the GPU's memory; its cache can serve small layers faster),
plus the optimizer's update (memory-bound) and an assumed floor of kernel launches. The
lessons print the same prediction for the same model and batch (tests/test_hardware.py), and
``benchmarks/accelerator_step.py`` measures the step on whatever accelerator is present and prints
it beside this prediction.

Example:
    >>> step = predicted_step(DENSE_LAYERS, 4096)
    >>> step["bound by"], round(step["seconds"] * 1e6)
    ('memory', 55)
"""

from typing import NamedTuple

from kerasdist.measure.speed import ADAM_BYTES_PER_WEIGHT, dense_kernels


class Accelerator(NamedTuple):
    """A GPU's published figures: dense FLOP/s per number type and its memory's bandwidth in bytes/s."""

    name: str
    peak_flops: dict
    memory_bytes_per_s: float
    memory: str
    source: str


# Dense figures (the datasheet prints the tensor cores' with sparsity, twice these). "tensorfloat32" is how
# a float32 model's matrix products run there: TensorFlow turns TensorFloat-32 on by default
# (tensorflow/python/framework/config.py, enable_tensor_float_32_execution), and so does XLA for JAX's
# default precision on GPUs since Ampere. Plain float32 arithmetic (no tensor cores) is 67 TFLOP/s.
H100_SXM = Accelerator(
    name="NVIDIA H100 SXM",
    peak_flops={"float32": 67e12, "tensorfloat32": 494.5e12, "bfloat16": 989e12, "float16": 989e12},
    memory_bytes_per_s=3.35e12,
    memory="HBM3, 80 GB",
    source="NVIDIA H100 datasheet, dense (no sparsity)",
)
BYTES_PER_VALUE = {"float32": 4, "tensorfloat32": 4, "bfloat16": 2, "float16": 2}
# A GPU starts each kernel from the host: a few microseconds each (NVIDIA's CUDA Graphs documentation). A
# training step of the course's MLP runs tens of kernels (its 8 products, the activations and the loss, the
# update), fewer where XLA fuses them. An assumed order of magnitude, not a measurement.
STEP_LAUNCH_FLOOR_S = 30e-6
# The course's MLP (kerasdist.model.build_model): 784-256-256-10, 269,322 parameters.
DENSE_LAYERS = ((784, 256), (256, 256), (256, 10))

# Links between GPUs: bandwidth per GPU and direction, and how many GPUs one reaches (PCIe and NVLink:
# those of one machine; InfiniBand and Ethernet join machines). The specifications give no latency:
# alpha (per step of a ring) is an assumed order of magnitude. PCIe 4.0 is a server of the previous
# generation (the H100 itself speaks PCIe 5.0, twice as fast); NVLink 4 joins the 8 GPUs of an HGX/DGX
# board (NVLink Switch systems reach further).
LINKS = {
    "PCIe 4.0 x16": {"bandwidth": 32e9, "alpha": 10e-6, "max_gpus": 8,
                     "source": "PCI-SIG: 16 GT/s x 16 lanes"},
    "NVLink 4 (H100)": {"bandwidth": 450e9, "alpha": 5e-6, "max_gpus": 8,
                        "source": "NVIDIA H100: 900 GB/s both directions"},
    "100 Gb/s Ethernet": {"bandwidth": 12.5e9, "alpha": 20e-6, "max_gpus": None,
                          "source": "IEEE 802.3: 100 Gb/s = 12.5 GB/s"},
    "InfiniBand NDR": {"bandwidth": 50e9, "alpha": 5e-6, "max_gpus": None,
                       "source": "NDR: 400 Gb/s per port = 50 GB/s"},
}


def ridge_point(accelerator=H100_SXM, dtype="tensorfloat32"):
    """FLOPs per byte at which a product stops being memory-bound: peak / bandwidth.

    Example:
        >>> round(ridge_point()), round(ridge_point(dtype="bfloat16"))
        (148, 295)
    """
    return accelerator.peak_flops[dtype] / accelerator.memory_bytes_per_s


def predicted_step(layers, batch_size, accelerator=H100_SXM, dtype="tensorfloat32"):
    """A model's training step on one GPU, predicted from its figures (a model, not a measurement).

    Args:
        layers: the ``(n_in, n_out)`` of each Dense kernel, e.g. ``DENSE_LAYERS``.
        batch_size: the examples of one step on this GPU.
        accelerator: an ``Accelerator``; dtype: a key of its ``peak_flops`` (values stored as in
            ``BYTES_PER_VALUE``).

    Returns:
        ``{"seconds", "products", "update", "launch floor", "flops", "bound by"}``: the step and its
        parts in seconds, its products' FLOPs (a float), and whether they are bound by arithmetic or by
        memory.

    Example:
        >>> round(predicted_step(DENSE_LAYERS, 64)["seconds"] * 1e6)
        33
    """
    width = BYTES_PER_VALUE[dtype]
    peak, bandwidth = accelerator.peak_flops[dtype], accelerator.memory_bytes_per_s
    arithmetic = memory = products = flops = 0.0
    for kernel in dense_kernels(layers, batch_size, bytes_per_value=width):
        flops += kernel["flops"]
        arithmetic += kernel["flops"] / peak
        memory += kernel["bytes"] / bandwidth
        products += max(kernel["flops"] / peak, kernel["bytes"] / bandwidth)
    update = ADAM_BYTES_PER_WEIGHT * sum(n_in * n_out + n_out for n_in, n_out in layers) / bandwidth
    return {"seconds": products + update + STEP_LAUNCH_FLOOR_S, "products": products, "update": update,
            "launch floor": STEP_LAUNCH_FLOOR_S, "flops": flops,
            "bound by": "arithmetic" if arithmetic >= memory else "memory"}


def describe_step(layers, batch_size, accelerator=H100_SXM, dtype="tensorfloat32"):
    """One line that every lesson prints for the same prediction, e.g. for lesson 3's global batch.

    Example:
        >>> print(describe_step(DENSE_LAYERS, 4096))
        model, NVIDIA H100 SXM, tensorfloat32, batch 4096: 55 us per step (products 22, update 2, launches 30)
    """
    predicted = predicted_step(layers, batch_size, accelerator, dtype)
    step = {part: round(predicted[part] * 1e6) for part in ("seconds", "products", "update", "launch floor")}
    return (f"model, {accelerator.name}, {dtype}, batch {batch_size}: {step['seconds']} us per step "
            f"(products {step['products']}, update {step['update']}, launches {step['launch floor']})")
