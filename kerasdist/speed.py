"""A machine's limit for training a model: FLOPs per sample, the CPU's matmul throughput, bfloat16."""

import time


def training_flops_per_sample(model):
    """Multiply-add FLOPs of one training sample through the model's Dense layers, from their shapes.

    A Dense layer with an ``n_in x n_out`` kernel costs ``2 n_in n_out`` FLOPs
    forward, as much again for its kernel's gradient, and as much again for
    the gradient of its input, which the first layer does not need. Biases,
    activations, the loss and the optimizer's update are left out (under 5%
    for the MLP).

    Returns:
        ``{"forward": ..., "backward": ..., "total": ...}`` in FLOPs per sample.

    Example:
        >>> training_flops_per_sample(kerasdist.model.build_model())  # doctest: +SKIP
        {'forward': 537600, 'backward': 673792, 'total': 1211392}
    """
    kernels = [layer.kernel.shape for layer in model.layers if hasattr(layer, "kernel")]
    forward = sum(2 * n_in * n_out for n_in, n_out in kernels)
    backward = forward + sum(2 * n_in * n_out for n_in, n_out in kernels[1:])
    return {"forward": forward, "backward": backward, "total": forward + backward}


def matmul_flops_per_s(dtype="float32", size=1024, repeats=20, rounds=10):
    """The best FLOP/s of ``repeats`` chained ``size x size`` matmuls in one ``tf.function``, over ``rounds``.

    Each product feeds the next, so no matmul can be skipped as a repeat of
    another; float32 and bfloat16 run the same op, ``tf.linalg.matmul``, on
    the same device. Many short rounds: on a shared machine the best of them
    is the one least slowed down by other programs.

    Example:
        >>> matmul_flops_per_s("bfloat16") / matmul_flops_per_s("float32")  # doctest: +SKIP
        4.2
    """
    import tensorflow as tf

    generator = tf.random.Generator.from_seed(0)
    a = tf.cast(generator.normal((size, size)), dtype)
    b = tf.cast(generator.normal((size, size)) / size**0.5, dtype)  # keeps the chain's values near 1

    @tf.function
    def chain(a, b):
        for _ in range(repeats):
            a = tf.linalg.matmul(a, b)
        return tf.reduce_sum(tf.cast(a[0, :8], tf.float32))

    chain(a, b).numpy()  # trace and warm up
    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        chain(a, b).numpy()
        best = min(best, time.perf_counter() - started)
    return 2 * size**3 * repeats / best


def cpu_bfloat16_instructions(cpuinfo="/proc/cpuinfo"):
    """The CPU's bfloat16 instruction sets in ``/proc/cpuinfo`` (e.g. avx512_bf16, amx_bf16); () if none.

    Without them TensorFlow still runs bfloat16, converting to float32 and back,
    usually slower than float32. Returns () where the file does not exist (not Linux).
    """
    try:
        with open(cpuinfo) as stream:
            flags = next((line.split(":", 1)[1].split() for line in stream if line.startswith("flags")), [])
    except OSError:
        return ()
    return tuple(sorted(flag for flag in set(flags) if flag.endswith("bf16")))
