"""What JAX's collectives and Keras' layouts cost: all-reduce timings, and each layout's bytes per device
and collectives, measured in a JAX process of its own.

A process holds one Keras backend (lesson 07), and JAX fixes its number of CPU devices when it starts,
so every measurement runs in a child, ``python -m kerasdist.measure.jax_collectives REQUEST``, with
``KERAS_BACKEND=jax``, ``JAX_PLATFORMS=cpu`` and ``XLA_FLAGS=--xla_force_host_platform_device_count=N``,
bounded by a timeout. The public functions import neither JAX nor TensorFlow; the child's do.

Example:
    >>> from kerasdist.measure.sync_cost import fit_alpha_beta
    >>> seconds = jax_allreduce_seconds(2, sizes=(1024, 1 << 20))  # doctest: +SKIP
    >>> fit_alpha_beta((1024, 1 << 20), seconds, 2).bandwidth  # doctest: +SKIP
    5860000000.0
    >>> count_collectives("%all-reduce.1 = f32[8]{0} all-reduce(f32[8]{0} %param), channel_id=1")
    {'all-reduce': 1, 'all-gather': 0, 'reduce-scatter': 0, 'collective-permute': 0, 'all-to-all': 0}
"""

import importlib.util
import json
import os
import re
import statistics
import sys
import time

from kerasdist import checks
from kerasdist.errors import KerasdistError
from kerasdist.measure.json_child import run_json_child

COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter", "collective-permute", "all-to-all")
# An instruction's opcode follows its shape and a space; an asynchronous pair counts once, by its -start.
_COLLECTIVE_OPCODE = re.compile(r"\s(" + "|".join(COLLECTIVES) + r")(?:-start)?\(")
LAYOUTS = ("data parallel", "sharded data parallel", "tensor parallel")
# The sharded layout splits the kernels' first dimensions (784, 256, 256) and tensor parallelism the hidden
# layers' 256 columns: 16 is the largest number of devices that divides them all evenly.
_MOST_DEVICES = 16


def jax_allreduce_seconds(replicas, sizes, repeats=3, timeout_s=300):
    """Median seconds of a sum all-reduce of a float32 array of each of ``sizes`` bytes per device, across
    ``replicas`` JAX CPU devices, measured in a process of its own (bounded by ``timeout_s``).

    The all-reduce is ``jax.lax.psum`` inside ``jax.shard_map`` under ``jax.jit``, device ``i`` holding
    ``i + 1`` everywhere; the first call (compiling) is not timed and checks the sum, each timed call
    waits with ``block_until_ready``. Fit the result with ``sync_cost.fit_alpha_beta``.

    Raises:
        KerasdistError: when JAX is not installed, or the measuring process fails or runs past ``timeout_s``.

    Example:
        >>> jax_allreduce_seconds(2, sizes=(1024, 1 << 24))  # doctest: +SKIP
        [9.3e-05, 0.0146]
    """
    replicas = checks.integer("replicas", replicas, 2, fix="an all-reduce needs 2 devices or more")
    request = {"measure": "all-reduce", "devices": replicas, "sizes": [int(n) for n in sizes],
               "repeats": checks.integer("repeats", repeats, 1)}
    return _in_child(request, f"timing the all-reduce across {replicas} devices", timeout_s)


def layout_costs(devices=4, batch_size=64, timeout_s=300):
    """Each device's bytes and one training step's collectives for the course's MLP (Adam) under three
    layouts on ``devices`` JAX CPU devices, measured in a process of its own (bounded by ``timeout_s``).

    - "data parallel": ``keras.distribution.DataParallel``, every variable copied on every device;
    - "sharded data parallel" (ZeRO stage 3, FSDP): a one-axis mesh "batch" and a ``LayoutMap`` that
      splits every Dense kernel's first dimension (its inputs) over that axis; the biases stay copied
      (the logits' 10 would not split over 4 devices);
    - "tensor parallel": lesson 07's layout, a 1 x ``devices`` mesh ("batch", "model") whose hidden
      kernels are split by columns and their biases with them; the logits layer stays copied.

    Bytes are those of the model's weights and all of Adam's variables (its two moments, laid out as
    their weights, and its iteration counter and learning rate: two 4-byte scalars on every device) held
    by a device, summed over the arrays' addressable shards; metrics' variables are left out. The
    collectives are counted (see ``count_collectives``) in the compiled HLO of one training step
    (Keras' ``compute_loss_and_updates``, its gradient, ``optimizer.stateless_apply``) under
    ``jax.jit``, from the variables' own shardings to the same shardings, the batch of ``batch_size``
    split over the "batch" axis.

    Returns:
        A dict of layout name -> {"bytes_per_device": bytes on device 0, "max_bytes_per_device": the
        most on any device, "parameters": the model's parameters, "collectives": {opcode: count},
        "all_gathers": the result shapes of its all-gathers, in the compiled step's order}.

    Raises:
        KerasdistError: for devices that do not divide 16 or the batch, when JAX is not installed, or
            when the measuring process fails or runs past ``timeout_s``.

    Example:
        >>> layout_costs(4)["sharded data parallel"]["bytes_per_device"]  # doctest: +SKIP
        812672
    """
    devices = checks.integer("devices", devices, 1)
    batch_size = checks.integer("batch_size", batch_size, 1)
    if _MOST_DEVICES % devices or batch_size % devices:
        checks.fail("devices", f"a divisor of {_MOST_DEVICES} and of batch_size={batch_size}", "devices",
                    devices, "the layouts split 784 and 256 evenly over 1, 2, 4, 8 or 16 devices")
    request = {"measure": "layouts", "devices": devices, "batch_size": batch_size}
    return _in_child(request, f"measuring the layouts over {devices} devices", timeout_s)


def count_collectives(hlo_text):
    """How many instructions of each collective opcode a compiled HLO module's text holds.

    Counted: ``all-reduce``, ``all-gather``, ``reduce-scatter``, ``collective-permute``, ``all-to-all``
    and their asynchronous ``-start`` forms, each pair once (its ``-done`` is not counted). XLA on CPU
    emits the synchronous forms.

    Example:
        >>> count_collectives("%ag = f32[8]{0} all-gather-start(f32[2]{0} %p)\\n"
        ...                   "%done = f32[8]{0} all-gather-done(f32[8]{0} %ag)")["all-gather"]
        1
    """
    counts = dict.fromkeys(COLLECTIVES, 0)
    for opcode in _COLLECTIVE_OPCODE.findall(hlo_text):
        counts[opcode] += 1
    return counts


def collective_shapes(hlo_text, opcode):
    """The result shapes (``f32[784,256]``) of a compiled HLO module's ``opcode`` instructions, in order.

    Example:
        >>> collective_shapes("%ag = f32[784,256]{1,0} all-gather(f32[196,256]{1,0} %p)", "all-gather")
        ['f32[784,256]']
    """
    pattern = re.compile(r"=\s*(\w+\[[\d,]*\])(?:\{[^}]*\})?\s+" + re.escape(opcode) + r"(?:-start)?\(")
    return pattern.findall(hlo_text)


def activation_memory(batches=(64, 256, 1024, 4096), timeout_s=300):
    """The temporary bytes XLA allocates for one training step (forward, backward, gradients) at each batch,
    without and with ``jax.checkpoint``, read from the compiled step's ``memory_analysis()`` on one JAX CPU
    device, in a process of its own (bounded by ``timeout_s``).

    Two networks, as plain JAX functions (softmax cross-entropy on 10 classes, ReLU):

    - "the MLP": the course's 784 -> 256 -> 256 -> 10, each hidden layer wrapped in ``jax.checkpoint``;
    - "4 wide blocks": 784 -> 256, then 4 blocks of 256 -> 1024 -> 256 (a transformer's MLP block) in a
      ``jax.lax.scan``, the block wrapped in ``jax.checkpoint``, then 256 -> 10.

    Temporary bytes are what a step needs beyond its arguments and outputs: activations kept for the
    backward pass, and the backward pass's own intermediates. ``dots`` counts the matrix products in the
    compiled step with and without ``jax.checkpoint``: more with it means XLA recomputes.

    Returns:
        A dict of network -> {"batches": [...], "plain": [bytes, ...], "checkpointed": [bytes, ...],
        "dots": [plain, checkpointed] at the largest batch}.

    Example:
        >>> activation_memory((64, 4096))["the MLP"]["plain"]  # doctest: +SKIP
        [199168, 20971520]
    """
    batches = [checks.integer("batch", batch, 1) for batch in batches]
    request = {"measure": "activations", "devices": 1, "batches": batches}
    return _in_child(request, "measuring activation memory", timeout_s)


def _activation_memory(batches):
    """In the child: each network's temporary bytes per batch, plain and checkpointed."""
    import jax
    import jax.numpy as jnp

    def cross_entropy(logits, labels):
        return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), labels[:, None], axis=1))

    def dense(p, h):
        return jax.nn.relu(h @ p[0] + p[1])

    def mlp(params, x, y, remat):
        layer = jax.checkpoint(dense) if remat else dense
        h = layer(params[1], layer(params[0], x))
        return cross_entropy(h @ params[2][0] + params[2][1], y)

    def block(h, p):
        return dense((p[2], p[3]), dense((p[0], p[1]), h)), None

    def wide_blocks(params, x, y, remat):
        h = dense(params[0], x)
        h, _ = jax.lax.scan(jax.checkpoint(block) if remat else block, h, params[1])
        return cross_entropy(h @ params[2][0] + params[2][1], y)

    def zeros(*shapes):
        return tuple(jax.ShapeDtypeStruct(shape, jnp.float32) for shape in shapes)

    networks = {
        "the MLP": (mlp, (zeros((784, 256), (256,)), zeros((256, 256), (256,)), zeros((256, 10), (10,)))),
        "4 wide blocks": (wide_blocks, (zeros((784, 256), (256,)),
                                        zeros((4, 256, 1024), (4, 1024), (4, 1024, 256), (4, 256)),
                                        zeros((256, 10), (10,)))),
    }
    result = {}
    for name, (loss, params) in networks.items():
        found = {"batches": batches, "plain": [], "checkpointed": [], "dots": []}
        for remat, key in ((False, "plain"), (True, "checkpointed")):
            step = jax.jit(jax.grad(lambda p, x, y, remat=remat, loss=loss: loss(p, x, y, remat)))
            for batch in batches:
                compiled = step.lower(params, jax.ShapeDtypeStruct((batch, 784), jnp.float32),
                                      jax.ShapeDtypeStruct((batch,), jnp.int32)).compile()
                found[key].append(int(compiled.memory_analysis().temp_size_in_bytes))
            found["dots"].append(len(re.findall(r"\sdot\(", compiled.as_text())))
        result[name] = found
    return result


def _in_child(request, what, timeout_s):
    """Run this module on ``request`` with JAX's devices set, and return its last line's JSON."""
    if importlib.util.find_spec("jax") is None:
        raise KerasdistError("JAX is not installed: install the project's jax extra "
                             "(pip install 'kerasdist[jax]')")
    environment = dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu",
                       XLA_FLAGS=f"--xla_force_host_platform_device_count={request['devices']}")
    return run_json_child([sys.executable, "-m", "kerasdist.measure.jax_collectives"], request,
                          f"{what} on JAX", timeout_s, environment, on_timeout="pass a larger timeout_s")


def _time_allreduces(devices, sizes, repeats):
    """In the child: the median seconds of a psum of each size across ``devices`` JAX devices."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import NamedSharding, PartitionSpec

    mesh = jax.make_mesh((devices,), ("replica",))
    spec = PartitionSpec("replica")
    allreduce = jax.jit(jax.shard_map(lambda block: jax.lax.psum(block, "replica"), mesh=mesh,
                                      in_specs=spec, out_specs=spec))
    expected = devices * (devices + 1) / 2
    medians = []
    for nbytes in sizes:
        elements = max(1, nbytes // 4)  # float32
        values = jax.make_array_from_callback(
            (devices * elements,), NamedSharding(mesh, spec),
            lambda index: np.full(elements, index[0].start // elements + 1, dtype="float32"))
        if not bool(jnp.all(allreduce(values) == expected)):  # the untimed first call compiles and checks
            raise RuntimeError(f"the all-reduce of {nbytes} bytes did not sum to {expected:g} everywhere")
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            allreduce(values).block_until_ready()
            times.append(time.perf_counter() - start)
        medians.append(statistics.median(times))
    return medians


def _distribution(layout, devices):
    """In the child: the ``keras.distribution`` of one of ``LAYOUTS`` over ``devices``."""
    import keras

    if layout == "data parallel":
        return keras.distribution.DataParallel(devices=devices)
    if layout == "sharded data parallel":
        mesh = keras.distribution.DeviceMesh((len(devices),), ("batch",), devices)
        layout_map = keras.distribution.LayoutMap(mesh)
        layout_map[".*kernel"] = ("batch", None)
    else:
        mesh = keras.distribution.DeviceMesh((1, len(devices)), ("batch", "model"), devices)
        layout_map = keras.distribution.LayoutMap(mesh)
        layout_map["dense.*kernel"] = (None, "model")
        layout_map["dense.*bias"] = ("model",)
    return keras.distribution.ModelParallel(layout_map=layout_map, batch_dim_name="batch")


def _layout_cost(layout, batch_size):
    """In the child: one layout's bytes per device, parameters and compiled step's collectives."""
    import jax
    import keras

    from kerasdist.model import build_model

    distribution = _distribution(layout, keras.distribution.list_devices())
    with distribution.scope():
        model = build_model()
    optimizer = model.optimizer

    def train_step(trainable, non_trainable, optimizer_variables, metrics, x, y):
        gradient_of = jax.value_and_grad(model.compute_loss_and_updates, has_aux=True)
        (loss, _), gradients = gradient_of(trainable, non_trainable, metrics, x, y, None, training=True,
                                           optimizer_variables=optimizer_variables)
        trainable, optimizer_variables = optimizer.stateless_apply(optimizer_variables, gradients, trainable)
        return loss, trainable, optimizer_variables

    trainable, non_trainable, optimizer_variables, metrics = (
        [variable.value for variable in variables] for variables in (
            model.trainable_variables, model.non_trainable_variables, optimizer.variables,
            model.metrics_variables))
    shapes = (((batch_size, *model.input_shape[1:]), "float32"), ((batch_size,), "int32"))
    batch = [jax.ShapeDtypeStruct(shape, dtype, sharding=distribution.get_data_layout(shape).backend_layout)
             for shape, dtype in shapes]
    # The updated variables keep their layouts, as under Keras' own fit(); the loss goes where XLA likes.
    same_shardings = (None, [array.sharding for array in trainable],
                      [array.sharding for array in optimizer_variables])
    compiled = jax.jit(train_step, out_shardings=same_shardings).lower(
        trainable, non_trainable, optimizer_variables, metrics, *batch).compile()
    held = dict.fromkeys(jax.devices(), 0)
    for variable in model.weights + optimizer.variables:
        for shard in variable.value.addressable_shards:
            held[shard.device] += shard.data.nbytes
    return {"bytes_per_device": held[jax.devices()[0]], "max_bytes_per_device": max(held.values()),
            "parameters": model.count_params(), "collectives": count_collectives(compiled.as_text()),
            "all_gathers": collective_shapes(compiled.as_text(), "all-gather")}


def main():
    """The child's entry point: measure what the JSON request on stdin asks, print it as one JSON line."""
    request = json.load(sys.stdin)
    import jax

    if jax.device_count() != request["devices"]:
        raise RuntimeError(f"JAX has {jax.device_count()} devices, not {request['devices']}: set XLA_FLAGS="
                           f"--xla_force_host_platform_device_count={request['devices']} before JAX starts")
    if request["measure"] == "all-reduce":
        result = _time_allreduces(request["devices"], request["sizes"], request["repeats"])
    elif request["measure"] == "activations":
        result = _activation_memory(request["batches"])
    else:
        result = {layout: _layout_cost(layout, request["batch_size"]) for layout in LAYOUTS}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
