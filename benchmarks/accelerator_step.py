"""The course's MLP: a training step timed with JAX on this machine's accelerator, beside the model's.

Lessons 3, 8 and 9 predict a GPU's step from published figures (``kerasdist.measure.hardware``); no GPU
ran the course. Run this where a GPU is at hand to check the prediction: for each batch size, the
step's median time and its spread (25th to 75th percentile) over ``--rounds`` calls, each call
``--steps`` steps in one ``jax.lax.scan`` (so the host's dispatch is spread over them, as the model
assumes), beside ``hardware.predicted_step`` for a float32 model (TensorFloat-32 products, JAX's
default on such GPUs). The data are the offline sample's real MNIST digits, repeated to fill the
batches. Without a GPU or TPU it says so in one line and measures nothing.

Usage:
    python benchmarks/accelerator_step.py [--batch-sizes 64,256,1024,4096] [--steps 50] [--rounds 11]
"""

import argparse
import os
import sys

os.environ.setdefault("KERAS_BACKEND", "jax")


def measure(batch_size, steps, rounds):
    """The ``Timing`` of one training step at ``batch_size``, in seconds: ``steps`` steps per jitted call."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    import kerasdist
    from kerasdist.measure.speed import time_calls
    from kerasdist.measure.speed_ladder import scan_epoch, scan_state
    from kerasdist.model import build_model

    data = kerasdist.load_mnist("sample", seed=0, verbose=False)
    repeats = -(-batch_size * steps // len(data.y_train))
    x = jax.device_put(np.tile(data.x_train, (repeats, 1))[:batch_size * steps])
    y = jax.device_put(np.tile(data.y_train, repeats)[:batch_size * steps])
    model = build_model()
    train = scan_epoch(model, x, y, batch_size)
    state = scan_state(model)
    order = jnp.arange(batch_size * steps)

    def call():
        return jax.block_until_ready(train(state, order))

    timing = time_calls(call, rounds=rounds)
    return type(timing)(*(seconds / steps for seconds in timing))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch-sizes", default="64,256,1024,4096",
                        type=lambda text: [int(part) for part in text.split(",")])
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=11)
    args = parser.parse_args(argv)
    import jax

    from kerasdist.measure import hardware

    backend = jax.default_backend()
    if backend == "cpu":
        print("no GPU or TPU here (JAX's backend is cpu): nothing measured; the model's prediction is "
              f"for the {hardware.H100_SXM.name}, run this where one is at hand")
        return 0
    device = jax.devices()[0].device_kind
    print(f"measured: {device} ({backend}), median of {args.rounds} calls of {args.steps} steps, spread "
          f"25th-75th percentile; model: {hardware.H100_SXM.name}, tensorfloat32 (a prediction)")
    print(f"{'batch':>6} {'measured us/step':>18} {'spread':>17} {'model us/step':>14} {'bound by':>11}")
    for batch_size in args.batch_sizes:
        timing = measure(batch_size, args.steps, args.rounds)
        step = hardware.predicted_step(hardware.DENSE_LAYERS, batch_size)
        spread = f"{timing.low * 1e6:.1f} to {timing.high * 1e6:.1f}"
        print(f"{batch_size:>6} {timing.median * 1e6:>18.1f} {spread:>17} {step['seconds'] * 1e6:>14.1f} "
              f"{step['bound by']:>11}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
