"""Lesson 07's checked exercises, on JAX: fit()'s batch size, a Megatron LayoutMap, each process's rows.

The checks build ``keras.distribution`` objects on this process's JAX devices (the lesson makes 2), on
meshes of 1 and 2 devices in either order, and read what JAX does with them: the rows each device
receives, the piece of each weight it holds and where.

Example:
    >>> print(q1.verdict({"fit_batch_size": lambda distribution, n: n}))  # doctest: +SKIP
    Incorrect: fit_batch_size(DataParallel over 2 devices, 32) returned 32, but then each device gets ...
"""

import numpy as np

from kerasdist.course.exercises.core import Exercise, Incorrect, WrongAnswer
from kerasdist.course.exercises.fixtures import call_answer, describe, error_line, real_number, whole_number

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


def _plain(value):
    """A 0-d array for a JAX scalar (the fixtures read NumPy and TensorFlow ones); anything else as it is."""
    if type(value).__module__.startswith("jax") and getattr(value, "shape", None) == ():
        return np.asarray(value)
    return value


def _check_fit_batch_size(answers, language):
    import keras

    first, second = _devices(2)
    # The lesson's mesh of 2 devices, the same in the other order with an odd share, and meshes of 1 device.
    cases = (([first, second], 32), ([second, first], 7), ([first], 24), ([second], 5))
    for devices, per_device in cases:
        distribution = keras.distribution.DataParallel(devices=devices)
        size = len(devices)  # the mesh's batch axis, known before the answer runs
        described = f"DataParallel over {size} device{'s' if size > 1 else ''}"
        call = f"fit_batch_size({described}, {per_device})"
        got = call_answer(answers["fit_batch_size"], "fit_batch_size", distribution, per_device)
        rows = whole_number(_plain(got), language)
        if rows is None:
            what = language.none if got is None else describe(got)
            divide = (" (multiply, and do not divide with /)" if real_number(_plain(got)) is not None
                      and language.name == "python" else "")
            raise Incorrect(f"{call} returned {what}, not a whole number: fit()'s batch_size counts "
                            f"digits{divide}.")
        if rows < 1:
            raise Incorrect(f"{call} returned {rows}: fit()'s batch_size is a number of digits, at least 1.")
        if rows > 64 * per_device:  # too large to place: JAX would split it into size equal pieces, if any
            raise Incorrect(f"{call} returned {rows}, so each of the {size} device(s) would get about "
                            f"{rows // size} rows, not {per_device}: multiply per_device_batch by the size "
                            "of the mesh's batch axis.")
        try:
            received = _rows_per_device(distribution, rows)
        except ValueError:
            raise Incorrect(f"{call} returned {rows}, which JAX cannot split evenly along the mesh's batch "
                            f"axis: each device must get {per_device}.") from None
        if received != [per_device]:
            shape = language.pick("distribution.device_mesh.shape[0]", "distribution$device_mesh$shape[[1]]")
            if rows < per_device * size:
                extra = (" fit()'s batch_size is the GLOBAL batch, which DataParallel splits among the "
                         "devices: multiply by the size of the mesh's batch axis.")
            elif rows == per_device * len(keras.distribution.list_devices()):
                extra = (f" this mesh's batch axis has {size} device{'s' if size > 1 else ''}: multiply by "
                         f"its size ({shape}), not by the number of devices JAX has.")
            else:
                extra = f" multiply per_device_batch by the size of the mesh's batch axis ({shape})."
            raise Incorrect(f"{call} returned {rows}, but then each device gets {received[0]} rows, not "
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
        # The lesson's numbers written in.
        WrongAnswer({"python": "def fit_batch_size(distribution, per_device_batch):\n"
                               "    return per_device_batch * 2",
                     "r": "fit_batch_size <- function(distribution, per_device_batch) per_device_batch * 2L"},
                    "not by the number of devices JAX has"),
        WrongAnswer({"python": "def fit_batch_size(distribution, per_device_batch):\n"
                               "    return 64",
                     "r": "fit_batch_size <- function(distribution, per_device_batch) 64L"},
                    "each device gets 32 rows, not 7"),
        # The process's devices, not the distribution's mesh.
        WrongAnswer({"python": "import keras\n"
                               "def fit_batch_size(distribution, per_device_batch):\n"
                               "    return per_device_batch * len(keras.distribution.list_devices())",
                     "r": "fit_batch_size <- function(distribution, per_device_batch) {\n"
                          "  per_device_batch * length(reticulate::import(\"keras\")$distribution$list_devices())\n"
                          "}"},
                    "this mesh's batch axis has 1 device"),
        # Wrong type: a float in Python, text in R.
        WrongAnswer({"python": "def fit_batch_size(distribution, per_device_batch):\n"
                               "    return per_device_batch * distribution.device_mesh.shape[0] / 1",
                     "r": "fit_batch_size <- function(distribution, per_device_batch) {\n"
                          "  format(per_device_batch * distribution$device_mesh$shape[[1]])\n"
                          "}"},
                    "not a whole number"),
    ),
    right=(
        {"python": "import numpy as np\n"
                   "def fit_batch_size(distribution, per_device_batch):\n"
                   "    return np.prod(distribution.device_mesh.shape) * per_device_batch",
         "r": "fit_batch_size <- function(distribution, per_device_batch) {\n"
              "  prod(unlist(distribution$device_mesh$shape)) * per_device_batch\n"
              "}"},
        {"python": "def fit_batch_size(distribution, per_device_batch):\n"
                   "    mesh = distribution.device_mesh\n"
                   "    return per_device_batch * mesh.shape[mesh.axis_names.index(\"batch\")]",
         "r": "fit_batch_size <- function(distribution, per_device_batch) {\n"
              "  as.numeric(length(distribution$device_mesh$devices)) * per_device_batch\n"
              "}"},
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


# Each weight's split under the column-then-row (Megatron) layout: the mesh axis of each of its dimensions.
MEGATRON_SPECS = {"dense_1/kernel": (None, "model"), "dense_1/bias": ("model",),
                  "dense_2/kernel": ("model", None), "dense_2/bias": (None,),
                  "logits/kernel": (None, None), "logits/bias": (None,)}


def _check_megatron_layout_map(answers, language):
    import jax
    import keras

    first, second = _devices(2)
    # The lesson's mesh, then one on the same devices in the other order (a map on a mesh of its own fails).
    for devices in ([first, second], [second, first]):
        mesh = keras.distribution.DeviceMesh(shape=(1, 2), axis_names=("batch", "model"), devices=devices)
        # Where each weight's pieces must sit on this mesh, worked out before the answer runs.
        expected = {path: jax.sharding.NamedSharding(mesh.backend_mesh, jax.sharding.PartitionSpec(*spec))
                    for path, spec in MEGATRON_SPECS.items()}
        layout_map = call_answer(answers["megatron_layout_map"], "megatron_layout_map", mesh)
        if not isinstance(layout_map, keras.distribution.LayoutMap):
            what = language.none if layout_map is None else describe(layout_map)
            layout_map_class = language.pick("keras.distribution.LayoutMap", "keras$distribution$LayoutMap")
            raise Incorrect(f"megatron_layout_map(mesh) returned {what}: return the {layout_map_class} you "
                            "filled.")
        try:
            with keras.distribution.ModelParallel(layout_map=layout_map, batch_dim_name="batch").scope():
                model = _mlp()
        except Exception as error:  # any error: a layout that cannot be applied is the student's to fix
            raise Incorrect(f"building the MLP under your layout map raised {type(error).__name__}: "
                            f"{error_line(error)[:200]}") from None
        pieces = _pieces(model)
        for path, want in MEGATRON_PIECES.items():
            got = pieces[path]
            if got != [want]:
                held = ", ".join(str(shape) for shape in got)
                raise Incorrect(f"each device holds {held} of {path}, not {want}: "
                                f"{_layout_advice(path, got[0], language)}.")
        for path, spec in MEGATRON_SPECS.items():  # the batch axis has 1 device here: read the map itself
            layout = layout_map[path]
            axes = tuple(layout.axes) if layout is not None else (None,) * len(spec)
            if "batch" in axes:
                raise Incorrect(f"the layout of {path} is {language.value(list(axes))}: the batch axis splits "
                                "the data, not the weights; split a weight along the model axis only.")
        for variable in model.weights:
            if not variable.value.sharding.is_equivalent_to(expected[variable.path], variable.value.ndim):
                on_mesh = language.pick("keras.distribution.LayoutMap(mesh)",
                                        "keras$distribution$LayoutMap(mesh)")
                raise Incorrect(f"{variable.path} is split the right way but not across the mesh you were "
                                f"given (its devices in the order {', '.join(devices)}): build the LayoutMap "
                                f"with {on_mesh}, not on a mesh of your own.")
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
        # Rows first, then columns: the two splits swapped.
        WrongAnswer({"python": "def megatron_layout_map(mesh):\n"
                               "    layout_map = keras.distribution.LayoutMap(mesh)\n"
                               '    layout_map["dense_1.*kernel"] = ("model", None)\n'
                               '    layout_map["dense_2.*kernel"] = (None, "model")\n'
                               '    layout_map["dense_2.*bias"] = ("model",)\n'
                               "    return layout_map",
                     "r": _r_layout_map(("dense_1.*kernel", '"model", NULL'), ("dense_2.*kernel", 'NULL, "model"'),
                                        ("dense_2.*bias", '"model"'))},
                    "split its columns"),
        # A mesh of its own on the process's devices, in the lesson's order, not the mesh it was given.
        WrongAnswer({"python": "def megatron_layout_map(mesh):\n"
                               "    own = keras.distribution.DeviceMesh((1, 2), [\"batch\", \"model\"],\n"
                               "                                        keras.distribution.list_devices()[:2])\n"
                               "    layout_map = keras.distribution.LayoutMap(own)\n"
                               '    layout_map["dense_1.*kernel"] = (None, "model")\n'
                               '    layout_map["dense_1.*bias"] = ("model",)\n'
                               '    layout_map["dense_2.*kernel"] = ("model", None)\n'
                               "    return layout_map",
                     "r": _r_layout_map(("dense_1.*kernel", 'NULL, "model"'), ("dense_1.*bias", '"model"'),
                                        ("dense_2.*kernel", '"model", NULL')).replace(
                         "LayoutMap(mesh)", "LayoutMap(keras$distribution$DeviceMesh(\n"
                         "    reticulate::tuple(1L, 2L), list(\"batch\", \"model\"), "
                         "keras$distribution$list_devices()[1:2]))")},
                    "not across the mesh you were given"),
        # Wrong type: the keys and layouts in a plain dict.
        WrongAnswer({"python": "def megatron_layout_map(mesh):\n"
                               '    return {"dense_1.*kernel": (None, "model"), "dense_1.*bias": ("model",),\n'
                               '            "dense_2.*kernel": ("model", None)}',
                     "r": "megatron_layout_map <- function(mesh) {\n"
                          '  reticulate::dict("dense_1.*kernel" = reticulate::tuple(NULL, "model"),\n'
                          '                   "dense_1.*bias" = reticulate::tuple("model"),\n'
                          '                   "dense_2.*kernel" = reticulate::tuple("model", NULL))\n'
                          "}"},
                    "megatron_layout_map(mesh) returned a dict"),
        # The weights also split along the batch axis (of 1 device here: the pieces alone look right).
        WrongAnswer({"python": "def megatron_layout_map(mesh):\n"
                               "    layout_map = keras.distribution.LayoutMap(mesh)\n"
                               '    layout_map["dense_1.*kernel"] = ("batch", "model")\n'
                               '    layout_map["dense_1.*bias"] = ("model",)\n'
                               '    layout_map["dense_2.*kernel"] = ("model", "batch")\n'
                               "    return layout_map",
                     "r": _r_layout_map(("dense_1.*kernel", '"batch", "model"'), ("dense_1.*bias", '"model"'),
                                        ("dense_2.*kernel", '"model", "batch"'))},
                    "the batch axis splits the data, not the weights"),
    ),
    right=(
        # Exact paths and TensorLayout values.
        {"python": "def megatron_layout_map(mesh):\n"
                   "    layout_map = keras.distribution.LayoutMap(mesh)\n"
                   "    for path, axes in {\"dense_1/kernel\": [None, \"model\"], \"dense_1/bias\": [\"model\"],\n"
                   "                       \"dense_2/kernel\": [\"model\", None]}.items():\n"
                   "        layout_map[path] = keras.distribution.TensorLayout(axes)\n"
                   "    return layout_map",
         "r": "megatron_layout_map <- function(mesh) {\n"
              "  layout_map <- keras$distribution$LayoutMap(mesh)\n"
              "  layouts <- list(\"dense_1/kernel\" = list(NULL, \"model\"), \"dense_1/bias\" = list(\"model\"),\n"
              "                  \"dense_2/kernel\" = list(\"model\", NULL))\n"
              "  for (path in names(layouts))\n"
              "    layout_map$`__setitem__`(path, keras$distribution$TensorLayout(layouts[[path]]))\n"
              "  layout_map\n"
              "}"},
        # Every weight named, the copied ones with an axis of None for each dimension.
        {"python": "def megatron_layout_map(mesh):\n"
                   "    layout_map = keras.distribution.LayoutMap(mesh)\n"
                   '    layout_map["dense_1/kernel"] = (None, "model")\n'
                   '    layout_map["dense_1/bias"] = ("model",)\n'
                   '    layout_map["dense_2/kernel"] = ("model", None)\n'
                   '    layout_map["dense_2/bias"] = (None,)\n'
                   '    layout_map["logits/kernel"] = (None, None)\n'
                   '    layout_map["logits/bias"] = (None,)\n'
                   "    return layout_map",
         "r": _r_layout_map(("dense_1/kernel", 'NULL, "model"'), ("dense_1/bias", '"model"'),
                            ("dense_2/kernel", '"model", NULL'), ("dense_2/bias", "NULL"),
                            ("logits/kernel", "NULL, NULL"), ("logits/bias", "NULL"))},
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


def _indices(got, call, language):
    """The answer's indices as a 1-d int64 array, or an Incorrect that says what it returned instead."""
    what = language.none if got is None else describe(got)
    if isinstance(got, (str, bytes, set, frozenset, dict)) or not hasattr(got, "__len__"):
        raise Incorrect(f"{call} returned {what}: return the indices it feeds, in order, as "
                        f"{language.pick('a NumPy array or a list', 'a vector')} of whole numbers.")
    try:
        values = np.asarray(got)
    except (TypeError, ValueError):
        values = np.asarray([], dtype=object)
    with np.errstate(invalid="ignore"):
        whole = values.dtype.kind in "iu" or (values.dtype.kind == "f" and bool(np.all(np.mod(values, 1) == 0)))
    if not whole:
        raise Incorrect(f"{call} returned {what}: return the indices it feeds, in order, as "
                        f"{language.pick('a NumPy array or a list', 'a vector')} of whole numbers.")
    return values.ravel().astype("int64")


def _check_process_rows(answers, language):
    devices = _devices(2)
    epoch = np.random.default_rng(7).permutation(1000).astype("int64")
    # (order's length, process_id, num_processes, global_batch): the lesson's 2 processes at two batch sizes,
    # one process alone, and an order of another length with a batch that is not a power of 2.
    cases = [(256, process_id, 2, batch) for batch in (64, 8) for process_id in (0, 1)]
    cases += [(256, 0, 1, 32), (240, 1, 2, 48), (240, 0, 2, 48)]
    for length, process_id, processes, global_batch in cases:
        order = epoch[:length].copy()
        expected = _device_rows(order, devices[:processes], process_id, global_batch)  # before the answer
        call = f"process_rows(order, {process_id}, {processes}, {global_batch})"
        got = call_answer(answers["process_rows"], "process_rows", order, process_id, processes, global_batch)
        got = _indices(got, call, language)
        share, batches = global_batch // processes, length // global_batch
        if got.shape != expected.shape:
            raise Incorrect(f"{call} returned {got.size} values, but process {process_id} feeds {share} of "
                            f"each of the {batches} global batches of an order of {length}: {expected.size} "
                            "in all.")
        if not np.array_equal(got, expected):
            blocks = got.reshape(batches, share), expected.reshape(batches, share)
            wrong = next(k for k in range(batches) if not np.array_equal(blocks[0][k], blocks[1][k]))
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
        # The lesson's numbers written in: batches of 64, shares of 32.
        WrongAnswer({"python": "def process_rows(order, process_id, num_processes, global_batch):\n"
                               "    batches = order.reshape(-1, 64)\n"
                               "    return batches[:, process_id * 32:(process_id + 1) * 32].ravel()",
                     "r": "process_rows <- function(order, process_id, num_processes, global_batch) {\n"
                          "  batches <- matrix(order, nrow = 64)\n"
                          "  as.vector(batches[process_id * 32 + seq_len(32), ])\n"
                          "}"},
                    "its values are not the ones JAX gives device 0"),
        # This process's own index from JAX, not the process it was asked about.
        WrongAnswer({"python": "import jax\n"
                               "def process_rows(order, process_id, num_processes, global_batch):\n"
                               "    process_id = jax.process_index()\n"
                               "    share = global_batch // num_processes\n"
                               "    batches = order.reshape(-1, global_batch)\n"
                               "    return batches[:, process_id * share:(process_id + 1) * share].ravel()",
                     "r": "process_rows <- function(order, process_id, num_processes, global_batch) {\n"
                          "  process_id <- reticulate::import(\"jax\")$process_index()\n"
                          "  share <- global_batch %/% num_processes\n"
                          "  batches <- matrix(order, nrow = global_batch)\n"
                          "  as.vector(batches[process_id * share + seq_len(share), ])\n"
                          "}"},
                    "its values are not the ones JAX gives device 1"),
        # Wrong type: the indices as text.
        WrongAnswer({"python": "def process_rows(order, process_id, num_processes, global_batch):\n"
                               "    share = global_batch // num_processes\n"
                               "    batches = order.reshape(-1, global_batch)\n"
                               "    return [str(i) for i in batches[:, process_id * share:(process_id + 1) * share].ravel()]",
                     "r": "process_rows <- function(order, process_id, num_processes, global_batch) {\n"
                          "  share <- global_batch %/% num_processes\n"
                          "  batches <- matrix(order, nrow = global_batch)\n"
                          "  as.character(batches[process_id * share + seq_len(share), ])\n"
                          "}"},
                    "return the indices it feeds"),
    ),
    right=(
        # Each position's block within its global batch, as a mask.
        {"python": "import numpy as np\n"
                   "def process_rows(order, process_id, num_processes, global_batch):\n"
                   "    block = np.arange(len(order)) % global_batch // (global_batch // num_processes)\n"
                   "    return order[block == process_id]",
         "r": "process_rows <- function(order, process_id, num_processes, global_batch) {\n"
              "  block <- ((seq_along(order) - 1) %% global_batch) %/% (global_batch %/% num_processes)\n"
              "  order[block == process_id]\n"
              "}"},
        # Batch after batch, into a list of Python (R: a list's) numbers.
        {"python": "def process_rows(order, process_id, num_processes, global_batch):\n"
                   "    share = global_batch // num_processes\n"
                   "    rows = []\n"
                   "    for start in range(0, len(order), global_batch):\n"
                   "        rows.extend(int(i) for i in order[start + process_id * share:start + (process_id + 1) * share])\n"
                   "    return rows",
         "r": "process_rows <- function(order, process_id, num_processes, global_batch) {\n"
              "  share <- global_batch %/% num_processes\n"
              "  batches <- split(order, ceiling(seq_along(order) / global_batch))\n"
              "  unlist(lapply(batches, function(batch) batch[process_id * share + seq_len(share)]), use.names = FALSE)\n"
              "}"},
    ),
)
