"""Lesson 07's checked exercises, on JAX: fit()'s batch size, a Megatron LayoutMap, each process's rows.

The checks build ``keras.distribution`` objects on this process's JAX devices (the lesson makes 2) and
read what JAX does with them: the rows each device receives, the piece of each weight it holds.

Example:
    >>> print(q1.verdict({"fit_batch_size": lambda distribution, n: n}))  # doctest: +SKIP
    Incorrect: fit_batch_size(DataParallel over 2 devices, 32) returned 32, but then each device gets ...
"""

import numpy as np

from kerasdist.course.exercises.core import Exercise, Incorrect, WrongAnswer
from kerasdist.course.exercises.fixtures import call_answer, error_line

BACKEND = "jax"  # the self-test loads Keras on JAX for this lesson
CONTEXT = {"python": "import keras", "r": "library(keras3)"}


def _devices(count=2):
    """The names of the first ``count`` JAX devices, as ``keras.distribution.list_devices()`` gives them."""
    import keras

    devices = keras.distribution.list_devices()
    if len(devices) < count:
        raise Incorrect(f"the check needs {count} JAX devices and this process has {len(devices)}: restart, "
                        "and run the lesson's first cells (they set XLA_FLAGS before JAX starts).")
    return devices[:count]


def _rows_per_device(distribution, rows):
    """How many rows of a batch of ``rows`` each device of ``distribution`` receives: JAX's own split."""
    import jax

    layout = distribution.get_data_layout((rows, 1))
    placed = jax.device_put(np.zeros((rows, 1), "float32"), layout.backend_layout)
    return sorted({int(shard.data.shape[0]) for shard in placed.addressable_shards})


def _check_fit_batch_size(answers, language):
    import keras

    devices = _devices(2)
    cases = ((keras.distribution.DataParallel(devices=devices), "DataParallel over 2 devices", 32),
             (keras.distribution.DataParallel(devices=devices), "DataParallel over 2 devices", 16),
             (keras.distribution.DataParallel(devices=devices[:1]), "DataParallel over 1 device", 32))
    for distribution, described, per_device in cases:
        got = call_answer(answers["fit_batch_size"], "fit_batch_size", distribution, per_device)
        call = f"fit_batch_size({described}, {per_device})"
        if isinstance(got, float) and got.is_integer() and language.name == "r":
            got = int(got)
        if isinstance(got, (np.integer,)):
            got = int(got)
        if isinstance(got, float) and got.is_integer():
            raise Incorrect(f"{call} returned {got}, a float: fit()'s batch_size counts digits, so return an "
                            f"int (multiply, do not divide with /).")
        if not isinstance(got, int) or isinstance(got, bool) or got < 1:
            raise Incorrect(f"{call} returned {language.value(got)}: return fit()'s batch_size, a whole "
                            "number of digits.")
        try:
            received = _rows_per_device(distribution, got)
        except ValueError:
            raise Incorrect(f"{call} returned {got}, which JAX cannot split evenly along the mesh's batch "
                            f"axis: each device must get {per_device}.") from None
        if received != [per_device]:
            size = distribution.device_mesh.shape[0]
            shape = language.pick("distribution.device_mesh.shape[0]", "distribution$device_mesh$shape[[1]]")
            extra = (" fit()'s batch_size is the GLOBAL batch, which DataParallel splits among the devices: "
                     "multiply by the size of the mesh's batch axis." if got < per_device * size else
                     f" this mesh's batch axis has {size} device{'s' if size > 1 else ''}: multiply by its "
                     f"size ({shape}), not by the number of devices JAX has.")
            raise Incorrect(f"{call} returned {got}, but then each device gets {received[0]} rows, not "
                            f"{per_device}:{extra}")
    return ("fit_batch_size gives the global batch that DataParallel splits into the per-device batch you "
            "asked for, on a mesh of 2 devices and of 1.")


q1 = Exercise(
    "07", "q1", "fit()'s batch size under DataParallel",
    answers=("fit_batch_size",),
    check_answers=_check_fit_batch_size,
    hints=("fit(batch_size=...) is the global batch; DataParallel splits it along the mesh's batch axis, "
           "one equal share per device on that axis.",
           {"python": "Multiply per_device_batch by distribution.device_mesh.shape[0], the size of the "
                      "DataParallel mesh's only axis (batch).",
            "r": "Multiply per_device_batch by distribution$device_mesh$shape[[1]], the size of the "
                 "DataParallel mesh's only axis (batch)."}),
    solutions={
        "python": "def fit_batch_size(distribution, per_device_batch):\n"
                  "    return per_device_batch * distribution.device_mesh.shape[0]",
        "r": "fit_batch_size <- function(distribution, per_device_batch) {\n"
             "  per_device_batch * distribution$device_mesh$shape[[1]]\n"
             "}",
    },
    starters={"python": "fit_batch_size = None  # a function of (distribution, per_device_batch)",
              "r": "fit_batch_size <- NULL  # a function of (distribution, per_device_batch)"},
    wrong=(
        WrongAnswer({"python": "def fit_batch_size(distribution, per_device_batch):\n"
                               "    return per_device_batch",
                     "r": "fit_batch_size <- function(distribution, per_device_batch) per_device_batch"},
                    "each device gets 16 rows, not 32"),
        WrongAnswer({"python": "def fit_batch_size(distribution, per_device_batch):\n"
                               "    return per_device_batch * 2",
                     "r": "fit_batch_size <- function(distribution, per_device_batch) per_device_batch * 2L"},
                    "not by the number of devices JAX has"),
    ),
)


def _mlp():
    """The course's MLP (784-256-256-10), built in the current distribution's scope; weights unseeded."""
    import keras

    inputs = keras.Input(shape=(784,), name="digits")
    hidden = keras.layers.Dense(256, activation="relu", name="dense_1")(inputs)
    hidden = keras.layers.Dense(256, activation="relu", name="dense_2")(hidden)
    return keras.Model(inputs, keras.layers.Dense(10, name="logits")(hidden), name="mnist_mlp")


# Each weight's piece on each of 2 devices under the column-then-row (Megatron) split.
MEGATRON_PIECES = {"dense_1/kernel": (784, 128), "dense_1/bias": (128,), "dense_2/kernel": (128, 256),
                   "dense_2/bias": (256,), "logits/kernel": (256, 10), "logits/bias": (10,)}


def _pieces(model):
    """Each weight's path and the shapes of the pieces its devices hold, read from the JAX arrays."""
    return {variable.path: sorted({tuple(shard.data.shape) for shard in variable.value.addressable_shards})
            for variable in model.weights}


def _layout_advice(path, got, language):
    column, row = language.pick('(None, "model")', 'reticulate::tuple(NULL, "model")'), \
        language.pick('("model", None)', 'reticulate::tuple("model", NULL)')
    if path == "dense_1/kernel":
        return f"split its columns (its 256 outputs) with {column}"
    if path == "dense_1/bias":
        bias = language.pick('("model",)', 'reticulate::tuple("model")')
        return f"split it like the kernel's columns, with {bias}"
    if path == "dense_2/kernel":
        how = "by columns" if got == (256, 128) else "not split by rows"
        return (f"it is {how}; the second layer takes dense_1's split outputs, so split its rows "
                f"(its 256 inputs) with {row}")
    if path == "dense_2/bias":
        return ("a row-split layer adds its bias once, after its partial outputs are summed: leave it copied "
                "(no key of the map may match it)")
    return "leave the logits layer copied on both devices (no key of the map may match it)"


def _r_layout_map(*entries):
    """The R code of a megatron_layout_map that sets each (key, tuple's arguments) of ``entries``."""
    lines = "".join(f'  reticulate::py_set_item(layout_map, "{key}", reticulate::tuple({axes}))\n'
                    for key, axes in entries)
    return ("megatron_layout_map <- function(mesh) {\n  layout_map <- keras$distribution$LayoutMap(mesh)\n"
            f"{lines}  layout_map\n}}")


def _check_megatron_layout_map(answers, language):
    import keras

    mesh = keras.distribution.DeviceMesh(shape=(1, 2), axis_names=("batch", "model"), devices=_devices(2))
    layout_map = call_answer(answers["megatron_layout_map"], "megatron_layout_map", mesh)
    if not isinstance(layout_map, keras.distribution.LayoutMap):
        raise Incorrect(f"megatron_layout_map(mesh) returned {type(layout_map).__name__}: return the "
                        f"{language.pick('keras.distribution.LayoutMap', 'keras$distribution$LayoutMap')} "
                        "you filled.")
    try:
        with keras.distribution.ModelParallel(layout_map=layout_map, batch_dim_name="batch").scope():
            pieces = _pieces(_mlp())
    except Exception as error:  # any error: a layout that cannot be applied is the student's to fix
        raise Incorrect(f"building the MLP under your layout map raised {type(error).__name__}: "
                        f"{error_line(error)[:200]}") from None
    for path, expected in MEGATRON_PIECES.items():
        got = pieces[path]
        if got != [expected]:
            held = ", ".join(str(shape) for shape in got)
            raise Incorrect(f"each device holds {held} of {path}, not {expected}: "
                            f"{_layout_advice(path, got[0], language)}.")
    return ("dense_1 is split by columns and dense_2 by rows across the mesh's model axis, read from the "
            "JAX arrays' shards: each device computes half of the hidden layer and feeds it straight on.")


q2 = Exercise(
    "07", "q2", "A LayoutMap that splits columns, then rows",
    answers=("megatron_layout_map",),
    check_answers=_check_megatron_layout_map,
    hints=({"python": "Three weights need no key: dense_2's bias and both logits weights stay copied. "
                      "dense_1 is split as in the lesson, by columns; dense_2's kernel by rows.",
            "r": "Three weights need no key: dense_2's bias and both logits weights stay copied. "
                 "dense_1 is split as in the lesson, by columns; dense_2's kernel by rows."},
           {"python": 'layout_map = keras.distribution.LayoutMap(mesh); then layout_map["dense_1.*kernel"] '
                      '= (None, "model"), layout_map["dense_1.*bias"] = ("model",), '
                      'layout_map["dense_2.*kernel"] = ("model", None); return layout_map.',
            "r": 'layout_map <- keras$distribution$LayoutMap(mesh); then reticulate::py_set_item(layout_map, '
                 '"dense_1.*kernel", reticulate::tuple(NULL, "model")), the same for "dense_1.*bias" with '
                 'reticulate::tuple("model") and "dense_2.*kernel" with reticulate::tuple("model", NULL); '
                 'return layout_map.'}),
    solutions={
        "python": "def megatron_layout_map(mesh):\n"
                  "    layout_map = keras.distribution.LayoutMap(mesh)\n"
                  '    layout_map["dense_1.*kernel"] = (None, "model")  # columns: its 256 outputs\n'
                  '    layout_map["dense_1.*bias"] = ("model",)\n'
                  '    layout_map["dense_2.*kernel"] = ("model", None)  # rows: its 256 inputs\n'
                  "    return layout_map",
        "r": _r_layout_map(("dense_1.*kernel", 'NULL, "model"'), ("dense_1.*bias", '"model"'),
                           ("dense_2.*kernel", '"model", NULL')),
    },
    starters={"python": "megatron_layout_map = None  # a function of (mesh) that returns a LayoutMap",
              "r": "megatron_layout_map <- NULL  # a function of (mesh) that returns a LayoutMap"},
    wrong=(
        WrongAnswer({"python": "def megatron_layout_map(mesh):\n"
                               "    layout_map = keras.distribution.LayoutMap(mesh)\n"
                               '    layout_map["dense.*kernel"] = (None, "model")\n'
                               '    layout_map["dense.*bias"] = ("model",)\n'
                               "    return layout_map",
                     "r": _r_layout_map(("dense.*kernel", 'NULL, "model"'), ("dense.*bias", '"model"'))},
                    "it is by columns"),
        WrongAnswer({"python": "def megatron_layout_map(mesh):\n"
                               "    layout_map = keras.distribution.LayoutMap(mesh)\n"
                               '    layout_map["dense_1.*kernel"] = (None, "model")\n'
                               '    layout_map["dense_1.*bias"] = ("model",)\n'
                               '    layout_map["dense_2.*kernel"] = ("model", None)\n'
                               '    layout_map["dense_2.*bias"] = ("model",)\n'
                               "    return layout_map",
                     "r": _r_layout_map(("dense_1.*kernel", 'NULL, "model"'), ("dense_1.*bias", '"model"'),
                                        ("dense_2.*kernel", '"model", NULL'), ("dense_2.*bias", '"model"'))},
                    "adds its bias once"),
    ),
    context=CONTEXT,
    needs=("keras3",),
)


def _device_rows(order, devices, process_id, global_batch):
    """The values of ``order`` that JAX puts on device ``process_id`` when DataParallel splits every batch."""
    import jax
    import keras

    distribution = keras.distribution.DataParallel(devices=devices)
    layout = distribution.get_data_layout((global_batch,)).backend_layout
    device = jax.devices()[process_id]
    pieces = []
    for batch in order.reshape(-1, global_batch):
        placed = jax.device_put(batch, layout)
        pieces += [np.asarray(s.data) for s in placed.addressable_shards if s.device == device]
    return np.concatenate(pieces)


def _check_process_rows(answers, language):
    order = np.random.default_rng(7).permutation(1000)[:256].astype("int64")
    devices = _devices(2)
    cases = [(process_id, 2, batch) for batch in (64, 8) for process_id in (0, 1)] + [(0, 1, 32)]
    for process_id, processes, global_batch in cases:
        got = call_answer(answers["process_rows"], "process_rows", order, process_id, processes, global_batch)
        got = np.asarray(got).ravel()
        call = f"process_rows(order, {process_id}, {processes}, {global_batch})"
        expected = _device_rows(order, devices[:processes], process_id, global_batch)
        share, batches = global_batch // processes, len(order) // global_batch
        if got.shape != expected.shape:
            raise Incorrect(f"{call} returned {got.size} values, but process {process_id} feeds {share} of "
                            f"each of the {batches} global batches: {expected.size} in all.")
        if not np.array_equal(got.astype("int64"), expected):
            wrong = next(k for k in range(batches)
                         if not np.array_equal(got[k * share:(k + 1) * share].astype("int64"),
                                               expected[k * share:(k + 1) * share]))
            first = process_id * share + (language.name == "r")
            raise Incorrect(f"{call}: in global batch {wrong + 1} its values are not the ones JAX gives "
                            f"device {process_id} when it splits that batch along the batch axis, its "
                            f"positions {first} to {first + share - 1}: take that block of every global "
                            "batch, in order" + language.pick(".", " (R's matrix() fills column by column: "
                                                              "matrix(order, nrow = global_batch))."))
    return ("each process feeds exactly the rows of every global batch that JAX gives its device, so Keras "
            "assembles the same global batches as on one machine.")


q3 = Exercise(
    "07", "q3", "Each process's share of every global batch",
    answers=("process_rows",),
    check_answers=_check_process_rows,
    hints=("Cut order into consecutive global batches; process p feeds the p-th of the num_processes "
           "equal blocks of each batch, batch after batch (not a contiguous part of the epoch, not every "
           "other digit).",
           {"python": "share = global_batch // num_processes; order.reshape(-1, global_batch) has one global "
                      "batch per row: take its columns process_id * share to (process_id + 1) * share and "
                      ".ravel().",
            "r": "share <- global_batch %/% num_processes; matrix(order, nrow = global_batch) has one global "
                 "batch per column: take its rows process_id * share + seq_len(share) and as.vector()."}),
    solutions={
        "python": "def process_rows(order, process_id, num_processes, global_batch):\n"
                  "    share = global_batch // num_processes\n"
                  "    batches = order.reshape(-1, global_batch)  # one global batch per row\n"
                  "    return batches[:, process_id * share:(process_id + 1) * share].ravel()",
        "r": "process_rows <- function(order, process_id, num_processes, global_batch) {\n"
             "  share <- global_batch %/% num_processes\n"
             "  batches <- matrix(order, nrow = global_batch)  # one global batch per column\n"
             "  as.vector(batches[process_id * share + seq_len(share), ])\n"
             "}",
    },
    starters={"python": "process_rows = None  # a function of (order, process_id, num_processes, global_batch)",  # noqa: E501
              "r": "process_rows <- NULL  # a function of (order, process_id, num_processes, global_batch)"},
    wrong=(
        WrongAnswer({"python": "def process_rows(order, process_id, num_processes, global_batch):\n"
                               "    share = len(order) // num_processes\n"
                               "    return order[process_id * share:(process_id + 1) * share]",
                     "r": "process_rows <- function(order, process_id, num_processes, global_batch) {\n"
                          "  share <- length(order) %/% num_processes\n"
                          "  order[process_id * share + seq_len(share)]\n"
                          "}"},
                    "take that block of every global batch"),
        WrongAnswer({"python": "def process_rows(order, process_id, num_processes, global_batch):\n"
                               "    return order[process_id::num_processes]",
                     "r": "process_rows <- function(order, process_id, num_processes, global_batch) {\n"
                          "  order[seq(process_id + 1, length(order), by = num_processes)]\n"
                          "}"},
                    "in global batch 1 its values are not the ones JAX gives device"),
    ),
)
