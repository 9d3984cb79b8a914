"""A profiler's trace of a training step, read back: which op ran on which thread, when, and for how long.

TensorFlow's profiler (``tf.profiler.experimental``) records every op its
executor runs, on each of its threads, into an XSpace protocol buffer (the
file TensorBoard's profile plugin reads). ``trace_step`` runs a function under
the profiler and returns the ops of one of its calls, each named by the part
of a training step it belongs to.

Example:
    >>> step = trace_step(one_step_per_call, x, y, optimizer_name=model.optimizer.name)  # doctest: +SKIP
    >>> sorted({op["part"] for op in step["ops"]})  # doctest: +SKIP
    ['backward', 'forward, loss and the rest', 'optimizer update']
"""

import glob
import os
import tempfile

# The parts of a step by the name scopes TensorFlow and Keras give its ops: the gradient tape's, the
# optimizer's (its name: "adam", or "adam_1" where another Adam was made before it); every other op of the
# step is the forward pass, the loss, or bookkeeping outside both scopes (the optimizer's step counter).
OTHER_PART = "forward, loss and the rest"


def part_of(op_name, optimizer_name="adam"):
    """The part of a training step an op belongs to, from its name scope (``OTHER_PART`` when none matches).

    Example:
        >>> [part_of(name) for name in ("gradient_tape/dense/MatMul", "adam/Sqrt_2", "dense/Relu")]
        ['backward', 'optimizer update', 'forward, loss and the rest']
    """
    if op_name.startswith("gradient_tape/"):
        return "backward"
    return "optimizer update" if op_name.startswith(optimizer_name + "/") else OTHER_PART


def trace_step(function, *arguments, optimizer_name="adam", calls=3):
    """Call ``function(*arguments)`` ``calls`` times under TensorFlow's profiler; the trace of the last call.

    ``optimizer_name`` is the name of the optimizer the step applies (``model.optimizer.name``), whose
    scope holds the update's ops.

    Returns:
        ``{"seconds": the call's wall time, "ops": [...]}``, each op a dict with ``thread`` (the executor
        thread's index, from 0), ``start`` and ``seconds`` (from the call's start), ``name``, ``type`` and
        ``part`` (see ``part_of``). The profiler adds a little time to every op it records, and once a
        function has run many times TensorFlow's executor runs the ops it found cheap inline, unrecorded:
        trace a freshly made ``tf.function`` to see them.
    """
    import tensorflow as tf
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    function(*arguments)  # traced and warmed up before the profiler starts
    with tempfile.TemporaryDirectory() as logdir:
        options = tf.profiler.experimental.ProfilerOptions(python_tracer_level=0)
        tf.profiler.experimental.start(logdir, options=options)
        try:
            for call in range(calls):
                with tf.profiler.experimental.Trace("traced call", step_num=call, _r=1):
                    result = function(*arguments)
                    if hasattr(result, "numpy"):
                        result.numpy()
        finally:
            tf.profiler.experimental.stop()
        space = xplane_pb2.XSpace()
        with open(glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True)[0], "rb") as stream:
            space.ParseFromString(stream.read())
    host = next(plane for plane in space.planes if plane.name == "/host:CPU")
    names = {key: metadata.name for key, metadata in host.event_metadata.items()}

    def events(line):
        for event in line.events:
            start = line.timestamp_ns * 1e-9 + event.offset_ps * 1e-12
            yield names[event.metadata_id], start, event.duration_ps * 1e-12

    marks = sorted((start, seconds) for line in host.lines for name, start, seconds in events(line)
                   if name == "traced call")
    call_start, call_seconds = marks[-1]
    ops, threads = [], {}
    for line in host.lines:
        for name, start, seconds in events(line):
            op_name, _, op_type = name.rpartition(":")
            # An op's event is "scope/name:Type"; the runtime's own ("ExecutorState::Process") are not ops.
            if not (op_name and op_type.isidentifier() and "::" not in name
                    and call_start <= start < call_start + call_seconds):
                continue
            thread = threads.setdefault(line.id, len(threads))
            ops.append({"thread": thread, "start": start - call_start, "seconds": seconds, "name": op_name,
                        "type": op_type, "part": part_of(op_name, optimizer_name)})
    return {"seconds": call_seconds, "ops": sorted(ops, key=lambda op: op["start"])}


def busy_seconds(ops):
    """Seconds in which at least one of ``ops`` ran (their intervals' union, on any thread).

    Example:
        >>> busy_seconds([{"start": 0.0, "seconds": 2.0}, {"start": 1.0, "seconds": 2.0},
        ...               {"start": 5.0, "seconds": 1.0}])
        4.0
    """
    total, end = 0.0, float("-inf")
    for op in sorted(ops, key=lambda op: op["start"]):
        stop = op["start"] + op["seconds"]
        if stop > end:
            total += stop - max(op["start"], end)
            end = stop
    return total
