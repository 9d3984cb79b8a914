"""Lesson 06's checked exercises: a MirroredStrategy summing on one device, loading under a strategy, a step.

Every check builds real strategies on the lesson's 2 devices and on others than the lesson's (one
device, the two in the other order, 1 replica and a global batch of 40), and works out what it compares
with before the answer runs; a wrong answer reads, for instance:

    >>> print(q1.verdict({"make_mirrored": lambda devices: None}))  # doctest: +SKIP
    Incorrect: make_mirrored(['/device:CPU:0', '/device:CPU:1']) returned None: return a tf.distribute.MirroredStrategy.
"""

import ctypes
import os
import tempfile
import threading

import numpy as np

from kerasdist.course.exercises.core import Exercise, Incorrect, WrongAnswer
from kerasdist.course.exercises.fixtures import call_answer, describe, largest_gap, mlp, quiet_tensorflow

CONTEXT = {
    "python": "import keras\nimport tensorflow as tf",
    "r": 'library(keras3)\nlibrary(tensorflow, exclude = c("shape", "set_random_seed"))',
}
GLOBAL_BATCH = 64
STEPS = 3
L2_FACTOR = 1e-4


def _devices():
    from kerasdist.devices import replica_devices

    return replica_devices(2)


def _scope(language):
    return language.pick("with strategy.scope():", "with(strategy$scope(), ...)")


def _what(value, language):
    """What an answer returned, for a message: NULL or None, a plain value shown, an object by its class."""
    if value is None:
        return language.none
    if isinstance(value, (list, tuple)) and not all(isinstance(item, (str, int, float)) for item in value):
        kinds = sorted({type(item).__name__ for item in value})
        return f"a {type(value).__name__} of {len(value)} ({', '.join(kinds)})"
    plain = type(value).__module__ in ("builtins", "numpy")
    kind = type(value).__name__
    return describe(value) if plain else f"{'an' if kind[:1] in 'aeiou' else 'a'} {kind}"


def _canonical(devices):
    from tensorflow.python.distribute import device_util

    return [device_util.canonicalize(device) for device in devices]


def _check_make_mirrored(answers, language):
    import tensorflow as tf

    first, second = _devices()
    pass_devices = language.pick("devices=devices", "devices = as.list(devices)")
    # The lesson's two devices, then the second alone, both in the other order, and the first alone.
    for devices in ([first, second], [second], [second, first], [first]):
        call = f"make_mirrored({language.value(devices)})"
        expected = _canonical(devices)  # the check's own copy, before the answer runs
        try:
            strategy = call_answer(answers["make_mirrored"], "make_mirrored", devices)
        except Incorrect as error:
            if len(devices) > 1 or "device spec" not in str(error):
                raise
            one = language.pick("a single device passed as a string, not a list",
                                "a vector of one device reaches Python as a string, not a list")
            raise Incorrect(f"{str(error).rstrip('.')} ({one}): pass {pass_devices}.") from None
        if not isinstance(strategy, tf.distribute.MirroredStrategy):
            got = _what(strategy, language)
            wanted = language.pick("tf.distribute.MirroredStrategy", "tf$distribute$MirroredStrategy")
            raise Incorrect(f"{call} returned {got}: return a {wanted}.")
        used = [str(device) for device in strategy.extended.worker_devices]
        if len(used) != len(expected):
            raise Incorrect(f"{call} made a strategy of {len(used)} replica(s), not one per device it was "
                            f"given ({len(expected)}): pass {pass_devices}.")
        if used != expected:
            short = [device.split("device:")[-1] for device in used]
            raise Incorrect(f"{call} made a strategy that runs on {language.value(short)}, not on the "
                            f"devices it was given, in their order: pass {pass_devices}.")
        ops = strategy.extended._cross_device_ops
        if not isinstance(ops, tf.distribute.ReductionToOneDevice):
            name = type(ops).__name__ if ops is not None else "TensorFlow's default"
            raise Incorrect(f"the strategy sums gradients with {name}, not ReductionToOneDevice: pass "
                            + language.pick("cross_device_ops=tf.distribute.ReductionToOneDevice()",
                                            "cross_device_ops = tf$distribute$ReductionToOneDevice()") + ".")
    return ("make_mirrored(devices) makes a MirroredStrategy with one replica per device that sums the "
            "gradients with ReductionToOneDevice, as kerasdist's mirrored does on CPUs.")


q1 = Exercise(
    "06", "q1", "A MirroredStrategy that sums on one device",
    answers=("make_mirrored",),
    check_answers=_check_make_mirrored,
    hints=({"python": "tf.distribute.MirroredStrategy takes the devices and, as cross_device_ops, the object "
                      "that sums the replicas' gradients.",
            "r": "tf$distribute$MirroredStrategy() takes the devices and, as cross_device_ops, the object "
                 "that sums the replicas' gradients."},
           {"python": "return tf.distribute.MirroredStrategy(devices=devices, "
                      "cross_device_ops=tf.distribute.ReductionToOneDevice())",
            "r": "tf$distribute$MirroredStrategy(devices = as.list(devices), "
                 "cross_device_ops = tf$distribute$ReductionToOneDevice())"}),
    solutions={
        "python": "def make_mirrored(devices):\n"
                  "    return tf.distribute.MirroredStrategy(\n"
                  "        devices=devices, cross_device_ops=tf.distribute.ReductionToOneDevice())",
        "r": "make_mirrored <- function(devices) {\n"
             "  tf$distribute$MirroredStrategy(devices = as.list(devices),\n"
             "                                 cross_device_ops = tf$distribute$ReductionToOneDevice())\n"
             "}",
    },
    starters={"python": "make_mirrored = None  # a function of (devices) that returns a MirroredStrategy",
             "r": "make_mirrored <- NULL  # a function of (devices) that returns a MirroredStrategy"},
    wrong=(
        # Not what the task asks: TensorFlow's default sum, or another one.
        WrongAnswer({"python": "def make_mirrored(devices):\n"
                               "    return tf.distribute.MirroredStrategy(devices=devices)",
                     "r": "make_mirrored <- function(devices) {\n"
                          "  tf$distribute$MirroredStrategy(devices = as.list(devices))\n"
                          "}"},
                    "not ReductionToOneDevice"),
        WrongAnswer({"python": "def make_mirrored(devices):\n"
                               "    return tf.distribute.MirroredStrategy(\n"
                               "        devices=devices, cross_device_ops=tf.distribute.HierarchicalCopyAllReduce())",
                     "r": "make_mirrored <- function(devices) {\n"
                          "  tf$distribute$MirroredStrategy(devices = as.list(devices),\n"
                          "                                 cross_device_ops = tf$distribute$HierarchicalCopyAllReduce())\n"
                          "}"},
                    "HierarchicalCopyAllReduce, not ReductionToOneDevice"),
        # Without the devices: every device of the process, right for the lesson's two only.
        WrongAnswer({"python": "def make_mirrored(devices):\n"
                               "    return tf.distribute.MirroredStrategy(cross_device_ops=tf.distribute.ReductionToOneDevice())",
                     "r": "make_mirrored <- function(devices) {\n"
                          "  tf$distribute$MirroredStrategy(cross_device_ops = tf$distribute$ReductionToOneDevice())\n"
                          "}"},
                    "not one per device it was given"),
        # The lesson's device list written in.
        WrongAnswer({"python": "def make_mirrored(devices):\n"
                               "    return tf.distribute.MirroredStrategy(\n"
                               "        devices=[\"/device:CPU:0\", \"/device:CPU:1\"],\n"
                               "        cross_device_ops=tf.distribute.ReductionToOneDevice())",
                     "r": "make_mirrored <- function(devices) {\n"
                          "  tf$distribute$MirroredStrategy(devices = list(\"/device:CPU:0\", \"/device:CPU:1\"),\n"
                          "                                 cross_device_ops = tf$distribute$ReductionToOneDevice())\n"
                          "}"},
                    "not one per device it was given"),
        # The process's own devices, not the ones it was given.
        WrongAnswer({"python": "def make_mirrored(devices):\n"
                               "    mine = sorted(d.name for d in tf.config.list_logical_devices(\"CPU\"))[:len(devices)]\n"
                               "    return tf.distribute.MirroredStrategy(\n"
                               "        devices=mine, cross_device_ops=tf.distribute.ReductionToOneDevice())",
                     "r": "make_mirrored <- function(devices) {\n"
                          "  mine <- sort(sapply(tf$config$list_logical_devices(\"CPU\"), function(d) d$name))\n"
                          "  tf$distribute$MirroredStrategy(devices = as.list(mine[seq_along(devices)]),\n"
                          "                                 cross_device_ops = tf$distribute$ReductionToOneDevice())\n"
                          "}"},
                    "not on the devices it was given"),
        # Wrong object: the strategy in effect, not a new one.
        WrongAnswer({"python": "def make_mirrored(devices):\n"
                               "    return tf.distribute.get_strategy()",
                     "r": "make_mirrored <- function(devices) tf$distribute$get_strategy()"},
                    "returned a _DefaultDistributionStrategy"),
        # A single device passed as a string (R: what a vector of one becomes without as.list).
        WrongAnswer({"python": "def make_mirrored(devices):\n"
                               "    return tf.distribute.MirroredStrategy(\n"
                               "        devices=devices[0] if len(devices) == 1 else devices,\n"
                               "        cross_device_ops=tf.distribute.ReductionToOneDevice())",
                     "r": "make_mirrored <- function(devices) {\n"
                          "  tf$distribute$MirroredStrategy(devices = devices,\n"
                          "                                 cross_device_ops = tf$distribute$ReductionToOneDevice())\n"
                          "}"},
                    "not a list): pass devices"),
    ),
    right=(
        {"python": "def make_mirrored(devices):\n"
                   "    return tf.distribute.MirroredStrategy(tuple(devices), tf.distribute.ReductionToOneDevice())",
         "r": "make_mirrored <- function(devices) {\n"
              "  tf$distribute$MirroredStrategy(reticulate::r_to_py(as.list(devices)),\n"
              "                                 tf$distribute$ReductionToOneDevice())\n"
              "}"},
        {"python": "def make_mirrored(devices):\n"
                   "    names = [device.lower() for device in devices]\n"
                   "    sum_on_first = tf.distribute.ReductionToOneDevice(reduce_to_device=names[0])\n"
                   "    return tf.distribute.MirroredStrategy(devices=names, cross_device_ops=sum_on_first)",
         "r": "make_mirrored <- function(devices) {\n"
              "  arguments <- list(devices = lapply(devices, tolower),\n"
              "                    cross_device_ops = tf$distribute$ReductionToOneDevice(reduce_to_device = devices[[1]]))\n"
              "  do.call(tf$distribute$MirroredStrategy, arguments)\n"
              "}"},
    ),
    context=CONTEXT,
    needs=("keras3",),
)


def _strategy_on(devices):
    """A MirroredStrategy on ``devices``, summing with ReductionToOneDevice (kerasdist's on CPUs)."""
    import tensorflow as tf

    return tf.distribute.MirroredStrategy(devices, cross_device_ops=tf.distribute.ReductionToOneDevice())


def _other_model():
    """A compiled model unlike the lesson's (other sizes, names, activation): a rebuilt MLP cannot load it."""
    import keras

    keras.utils.set_random_seed(5)
    inputs = keras.Input(shape=(20,), name="features")
    hidden = keras.layers.Dense(12, activation="tanh", name="hidden")(inputs)
    model = keras.Model(inputs, keras.layers.Dense(3, name="scores")(hidden), name="other_model")
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    return model


def _check_load_under(answers, language):
    import keras

    first, second = _devices()
    # The lesson's MLP (uncompiled: the file holds the weights alone) on the lesson's devices, then another,
    # compiled model on the devices in the other order.
    for saved, devices in ((mlp(seed=3), [first, second]), (_other_model(), [second, first])):
        strategy = _strategy_on(devices)
        expected = saved.get_weights()  # before the answer runs
        with tempfile.TemporaryDirectory(prefix="kd_q06_") as folder:
            path = os.path.join(folder, f"{saved.name}.keras")
            saved.save(path)
            model = call_answer(answers["load_under"], "load_under", path, strategy)
        if not isinstance(model, keras.Model):
            raise Incorrect(f"load_under(path, strategy) returned {_what(model, language)}: return the "
                            "loaded model.")
        if not model.weights:
            raise Incorrect("the model load_under returned has no weights: return the model loaded from path.")
        kinds = sorted({type(weight.value).__name__ for weight in model.weights})
        if kinds != ["MirroredVariable"]:
            raise Incorrect(f"the loaded model's weights are {', '.join(kinds)}, not "
                            "MirroredVariable: load the file inside the strategy's scope "
                            f"({_scope(language)}).")
        if model.distribute_strategy is not strategy:
            raise Incorrect("the loaded model belongs to another strategy than the one you were given: load "
                            f"it inside that strategy's scope ({_scope(language)}).")
        got = model.get_weights()
        if [w.shape for w in got] != [w.shape for w in expected] or largest_gap(got, expected) > 0:
            load = language.pick("keras.saving.load_model(path)", "load_model(path)")
            raise Incorrect(f"the model's weights are not those of the saved {saved.name}: load the file "
                            f"with {load} instead of building a model of your own.")
    return "the saved model came back with the same weights, now mirrored on the strategy's 2 replicas."


q2 = Exercise(
    "06", "q2", "Load a saved model under a strategy",
    answers=("load_under",),
    check_answers=_check_load_under,
    hints=("A saved file holds one value per variable; the scope that is current when you load decides what "
           "kind of variables the loaded model gets.",
           {"python": "with strategy.scope(): model = keras.saving.load_model(path); then return model.",
            "r": "with(strategy$scope(), model <- load_model(path)); then return model."}),
    solutions={
        "python": "def load_under(path, strategy):\n"
                  "    with strategy.scope():\n"
                  "        model = keras.saving.load_model(path)\n"
                  "    return model",
        "r": "load_under <- function(path, strategy) {\n"
             "  with(strategy$scope(), model <- load_model(path))\n"
             "  model\n"
             "}",
    },
    starters={"python": "load_under = None  # a function of (path, strategy) that returns the loaded model",
             "r": "load_under <- NULL  # a function of (path, strategy) that returns the loaded model"},
    wrong=(
        # Not what the task asks: loaded outside the scope.
        WrongAnswer({"python": "def load_under(path, strategy):\n"
                               "    return keras.saving.load_model(path)",
                     "r": "load_under <- function(path, strategy) load_model(path)"},
                    "not MirroredVariable"),
        WrongAnswer({"python": "def load_under(path, strategy):\n"
                               "    with strategy.scope():\n"
                               "        model = keras.saving.load_model(path)",
                     "r": "load_under <- function(path, strategy) {\n"
                          "  with(strategy$scope(), model <- load_model(path))\n"
                          "  NULL\n"
                          "}"},
                    "return the loaded model"),
        # The lesson's MLP rebuilt, and the file's weights loaded into it: right for the lesson's model only.
        WrongAnswer({"python": "def load_under(path, strategy):\n"
                               "    with strategy.scope():\n"
                               "        inputs = keras.Input(shape=(784,))\n"
                               "        hidden = keras.layers.Dense(256, activation=\"relu\")(inputs)\n"
                               "        hidden = keras.layers.Dense(256, activation=\"relu\")(hidden)\n"
                               "        model = keras.Model(inputs, keras.layers.Dense(10)(hidden))\n"
                               "    model.set_weights(keras.saving.load_model(path).get_weights())\n"
                               "    return model",
                     "r": "load_under <- function(path, strategy) {\n"
                          "  with(strategy$scope(), {\n"
                          "    model <- keras_model_sequential(input_shape = 784) |>\n"
                          "      layer_dense(256, activation = \"relu\") |>\n"
                          "      layer_dense(256, activation = \"relu\") |>\n"
                          "      layer_dense(10)\n"
                          "  })\n"
                          "  set_weights(model, get_weights(load_model(path)))\n"
                          "  model\n"
                          "}"},
                    "load_under raised ValueError"),
        # The notebook's own strategy, not the one it was given (a misnamed parameter).
        WrongAnswer({"python": "strategy = tf.distribute.MirroredStrategy(\n"
                               "    [\"/device:CPU:0\", \"/device:CPU:1\"], cross_device_ops=tf.distribute.ReductionToOneDevice())\n"
                               "def load_under(path, given_strategy):\n"
                               "    with strategy.scope():\n"
                               "        return keras.saving.load_model(path)",
                     "r": "strategy <- tf$distribute$MirroredStrategy(\n"
                          "  list(\"/device:CPU:0\", \"/device:CPU:1\"), cross_device_ops = tf$distribute$ReductionToOneDevice())\n"
                          "load_under <- function(path, given_strategy) {\n"
                          "  with(strategy$scope(), model <- load_model(path))\n"
                          "  model\n"
                          "}"},
                    "belongs to another strategy"),
        # Wrong type: the weights, not the model.
        WrongAnswer({"python": "def load_under(path, strategy):\n"
                               "    with strategy.scope():\n"
                               "        return keras.saving.load_model(path).get_weights()",
                     "r": "load_under <- function(path, strategy) {\n"
                          "  with(strategy$scope(), model <- load_model(path))\n"
                          "  get_weights(model)\n"
                          "}"},
                    "returned a list"),
    ),
    right=(
        {"python": "def load_under(path, strategy):\n"
                   "    with strategy.scope():\n"
                   "        return keras.models.load_model(path, compile=False)",
         "r": "load_under <- function(path, strategy) {\n"
              "  scope <- strategy$scope()\n"
              "  scope$`__enter__`()\n"
              "  on.exit(scope$`__exit__`(NULL, NULL, NULL))\n"
              "  keras$saving$load_model(path, compile = FALSE)\n"
              "}"},
        # Loaded outside, cloned inside the scope, the weights copied over.
        {"python": "def load_under(path, strategy):\n"
                   "    loaded = keras.saving.load_model(path)\n"
                   "    with strategy.scope():\n"
                   "        model = keras.models.clone_model(loaded)\n"
                   "    model.set_weights(loaded.get_weights())\n"
                   "    return model",
         "r": "load_under <- function(path, strategy) {\n"
              "  loaded <- load_model(path)\n"
              "  with(strategy$scope(), model <- clone_model(loaded))\n"
              "  set_weights(model, get_weights(loaded))\n"
              "  model\n"
              "}"},
    ),
    context=CONTEXT,
    needs=("keras3",),
)


def _regularized_mlp():
    """The lesson's MLP with an L2 penalty of L2_FACTOR on each kernel."""
    import keras

    inputs = keras.Input(shape=(784,), name="digits")
    hidden = keras.layers.Dense(256, activation="relu", kernel_regularizer=keras.regularizers.L2(L2_FACTOR),
                                name="dense_1")(inputs)
    hidden = keras.layers.Dense(256, activation="relu", kernel_regularizer=keras.regularizers.L2(L2_FACTOR),
                                name="dense_2")(hidden)
    logits = keras.layers.Dense(10, kernel_regularizer=keras.regularizers.L2(L2_FACTOR),
                                name="logits")(hidden)
    return keras.Model(inputs, logits, name="regularized_mlp")


def _mixed_digits(size):
    """``size`` real MNIST digits of the offline sample, in a fixed shuffled order (it is sorted by class)."""
    from kerasdist.data import sample_digits

    images, labels = sample_digits()
    chosen = np.random.default_rng(0).permutation(len(labels))[:size]
    return (images[chosen] / 255.0).astype("float32"), labels[chosen].astype("int32")


# What fit() does on each case of the check, once per process: (devices, global batch, steps) -> its record.
_FIT_RECORDS = {}


def _fit_record(devices, global_batch, steps):
    """fit()'s losses, trained weights and first L2 for one case, computed once, from the check's own data.

    The record's arrays are read-only: an answer cannot change what the next check compares with.
    """
    key = (tuple(devices), global_batch, steps)
    if key not in _FIT_RECORDS:
        import tensorflow as tf

        images, labels = _mixed_digits(global_batch * steps)
        batches = tf.data.Dataset.from_tensor_slices((images, labels)).batch(global_batch)
        losses, weights, l2 = _fit_losses(_strategy_on(devices), batches)
        for array in [losses, *weights]:
            array.setflags(write=False)
        _FIT_RECORDS[key] = (losses, tuple(weights), l2)
    return _FIT_RECORDS[key]


def _fit_losses(strategy, batches):
    """fit()'s loss of each step (from its running mean), the weights it trained, and the model's first L2."""
    import keras
    import tensorflow as tf

    running_means = []
    recorder = keras.callbacks.LambdaCallback(
        on_train_batch_end=lambda batch, logs: running_means.append(float(logs["loss"])))
    keras.utils.set_random_seed(0)
    with strategy.scope():
        model = _regularized_mlp()
        model.compile(optimizer=keras.optimizers.Adam(learning_rate=1e-3),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    first_l2 = float(tf.add_n(model.losses))
    model.fit(batches, epochs=1, shuffle=False, verbose=0, callbacks=[recorder])
    means = np.array(running_means, dtype=np.float64)
    steps = np.arange(1, len(means) + 1)
    return means * steps - np.concatenate([[0.0], means[:-1] * steps[:-1]]), model.get_weights(), first_l2


class _ReplicaStopped(RuntimeError):
    """Raised inside a replica thread that the check stopped (its step ran past the time limit)."""


def _in_replica_threads(function, *args):
    """``function(*args)``; if it is interrupted (the time limit), the threads it started are stopped too.

    strategy.run calls the step in threads of its own, which the time limit does not reach: an endless
    step would go on spinning after the verdict. Each is sent an exception, which ends it.
    """
    before = set(threading.enumerate())
    try:
        return function(*args)
    except BaseException:
        for thread in set(threading.enumerate()) - before:
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident),
                                                       ctypes.py_object(_ReplicaStopped))
        raise


def _check_make_replica_step(answers, language):
    with quiet_tensorflow():  # fit() and the step trace new functions in every check
        first, second = _devices()
        # The lesson's 2 replicas and global batch of 64, then 1 replica and a global batch of 40.
        for devices, global_batch, steps in (([first, second], GLOBAL_BATCH, STEPS), ([second], 40, 2)):
            _replica_step_case(answers, language, devices, global_batch, steps)
    return ("the replica step's losses, summed over 2 replicas, equal fit()'s step for step, and so do "
            "the trained weights.")


def _replica_step_case(answers, language, devices, global_batch, steps):
    """Run the answer's step on ``devices`` for ``steps`` global batches: Incorrect unless it is fit()'s."""
    import keras
    import tensorflow as tf

    strategy = _strategy_on(devices)
    replicas = len(devices)
    images, labels = _mixed_digits(global_batch * steps)
    batches = tf.data.Dataset.from_tensor_slices((images, labels)).batch(global_batch)
    fit_losses, fit_weights, l2 = _fit_record(devices, global_batch, steps)  # the truth, before the answer
    keras.utils.set_random_seed(0)
    with strategy.scope():
        model = _regularized_mlp()
        optimizer = keras.optimizers.Adam(learning_rate=1e-3)
        optimizer.build(model.trainable_variables)
        loss_object = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)
    step = call_answer(answers["make_replica_step"], "make_replica_step", model, optimizer, loss_object,
                       global_batch)
    if not callable(step):
        raise Incorrect(f"make_replica_step(...) returned {_what(step, language)}: return the replica step, "
                        "a function of (images, labels).")
    if getattr(step, "__module__", "") == "rpytools.call":
        raise Incorrect("the replica step is an R function, which strategy$run() cannot call from its "
                        "threads: write it in Python with py_run_string(), as the lesson does.")

    @tf.function
    def distributed_step(x, y):
        return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(step, args=(x, y)), axis=None)

    losses = []
    for x, y in strategy.experimental_distribute_dataset(batches):
        value = np.asarray(_in_replica_threads(call_answer, distributed_step, "the replica step", x, y))
        if value.size != 1 or value.dtype.kind not in "fiu":
            raise Incorrect(f"the replica step returned {value.size} value(s) of type {value.dtype}: return "
                            "its loss alone, one number.")
        losses.append(float(value.reshape(())))
    loss_gap = float(np.max(np.abs(np.array(losses) - fit_losses)))
    weight_gap = largest_gap(model.get_weights(), fit_weights)
    if loss_gap < 1e-4 and weight_gap < 1e-5:
        return
    where = f"with {replicas} replica{'s' if replicas > 1 else ''} and a global batch of {global_batch}, "
    first, cross_entropy = losses[0], fit_losses[0] - l2
    run = language.pick("tf.nn.", "tf$nn$")
    # Step 1's summed loss as (factor of fit()'s cross-entropy, factor of its L2 penalty): what went wrong.
    ce_factors = {replicas: f"the cross-entropy is {replicas} times fit()'s: divide each replica's summed "
                            f"loss by the global batch with {run}compute_average_loss(..., "
                            f"global_batch_size=...), not by its own {global_batch // replicas} examples",
                  global_batch / GLOBAL_BATCH: f"the cross-entropy is divided by {GLOBAL_BATCH}, not by "
                                               f"global_batch_size ({global_batch}): use the argument",
                  1.0: ""}
    l2_factors = {0.0: f"the loss leaves out the model's L2 penalty: add {run}scale_regularization_loss("
                       "tf.add_n(model.losses))",
                  replicas: f"the L2 penalty counts {replicas} times in the summed loss: divide it by the "
                            f"replicas with {run}scale_regularization_loss(...)",
                  replicas / 2: f"the L2 penalty counts {replicas / 2:g} times in the summed loss: "
                                f"{run}scale_regularization_loss(...) divides it by the strategy's own "
                                "replicas, not by 2",
                  1.0: ""}
    for ce_factor, ce_words in ce_factors.items():
        for l2_factor, l2_words in l2_factors.items():
            if (ce_words or l2_words) and abs(first - (ce_factor * cross_entropy + l2_factor * l2)) < 1e-4:
                raise Incorrect(where + "; and ".join(words for words in (ce_words, l2_words) if words) + ".")
    if abs(first - fit_losses[0]) < 1e-4 and len(losses) > 1 and abs(losses[1] - fit_losses[1]) >= 1e-4:
        raise Incorrect(f"{where}step 1's loss equals fit()'s but the later ones do not: take the gradients "
                        "of that loss and apply them with optimizer.apply_gradients(...) in the replica "
                        "step.")
    if loss_gap < 1e-4:
        raise Incorrect(f"{where}the losses equal fit()'s but the weights after {steps} steps differ by up "
                        f"to {weight_gap:.2g}: apply the gradients of the loss you return.")
    raise Incorrect(f"{where}step 1's summed loss is {first:.4f}, fit()'s is {fit_losses[0]:.4f}: return the "
                    f"per-example losses averaged over the global batch ({run}compute_average_loss) plus the "
                    "scaled L2 penalty.")


# The replica step, in Python for both languages (R code cannot run on strategy.run's threads): {loss} is
# how the loss is made, {update} the gradient and update lines.
STEP = """def make_replica_step(model, optimizer, loss_object, global_batch_size):
    def step_on_replica(images, labels):
        with tf.GradientTape() as tape:
            per_example = loss_object(labels, model(images, training=True))
{loss}
{update}        return loss
    return step_on_replica"""
UPDATE = """        gradients = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables))
"""
AVERAGE = "            loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch_size)"
SCALED_L2 = "            loss += tf.nn.scale_regularization_loss(tf.add_n(model.losses))"


def _step(loss, update=UPDATE):
    return STEP.format(loss=loss, update=update)


def _in_r(python_code):
    """An R cell that defines the Python factory with py_run_string() and names it in R."""
    return ('py_run_string("\nimport tensorflow as tf\n\n' + python_code + '\n")\n'
            "make_replica_step <- py$make_replica_step")


SOLUTION_STEP = _step(AVERAGE + "\n" + SCALED_L2)
MEAN_STEP = _step("            loss = tf.reduce_mean(per_example)\n" + SCALED_L2)
UNSCALED_STEP = _step(AVERAGE + "\n            loss += tf.add_n(model.losses)")
NO_UPDATE_STEP = _step(AVERAGE + "\n" + SCALED_L2, update="")
# The lesson's numbers written in: right for 2 replicas and a global batch of 64 only.
FIXED_STEP = _step("            loss = tf.reduce_sum(per_example) / 64 + tf.add_n(model.losses) / 2")
# The notebook's own strategy read for the number of replicas, not the strategy the step runs under.
SHARED_STEP = ("strategy = tf.distribute.MirroredStrategy(\n"
               "    ['/device:CPU:0', '/device:CPU:1'],\n"
               "    cross_device_ops=tf.distribute.ReductionToOneDevice())\n"
               + _step(AVERAGE + "\n            loss += tf.add_n(model.losses) / "
                                 "strategy.num_replicas_in_sync"))
# Right, written otherwise: the sums by hand and Keras 3's optimizer.apply; a list of penalties and the mean
# scaled back to a sum.
BY_HAND_STEP = """def make_replica_step(model, optimizer, loss_object, global_batch_size):
    def step_on_replica(images, labels):
        replicas = tf.distribute.get_replica_context().num_replicas_in_sync
        with tf.GradientTape() as tape:
            logits = model(images, training=True)
            total = tf.reduce_sum(loss_object(labels, logits)) / tf.cast(global_batch_size, tf.float32)
            total = total + tf.add_n(model.losses) / replicas
        optimizer.apply(tape.gradient(total, model.trainable_variables), model.trainable_variables)
        return total
    return step_on_replica"""
SCALED_MEAN_STEP = """def make_replica_step(model, optimizer, loss_object, global_batch_size):
    def step_on_replica(images, labels):
        with tf.GradientTape() as tape:
            per_example = loss_object(labels, model(images, training=True))
            local = tf.cast(tf.shape(per_example)[0], per_example.dtype)
            loss = tf.reduce_mean(per_example) * local / global_batch_size
            loss = loss + tf.nn.scale_regularization_loss(model.losses)
        weights = model.trainable_weights
        optimizer.apply_gradients(list(zip(tape.gradient(loss, weights), weights)))
        return loss
    return step_on_replica"""

q3 = Exercise(
    "06", "q3", "A replica step that matches fit()",
    answers=("make_replica_step",),
    check_answers=_check_make_replica_step,
    hints=("A replica's loss is its per-example losses summed and divided by the GLOBAL batch "
           "(compute_average_loss), plus the model's L2 penalty divided by the number of replicas "
           "(scale_regularization_loss); then take the gradients and apply them.",
           {"python": "In a tf.GradientTape(): loss = tf.nn.compute_average_loss(loss_object(labels, "
                      "model(images, training=True)), global_batch_size=global_batch_size) + "
                      "tf.nn.scale_regularization_loss(tf.add_n(model.losses)); then "
                      "optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), "
                      "model.trainable_variables)) and return loss.",
            "r": "In Python, inside py_run_string(): make_replica_step(...) returns step_on_replica(images, "
                 "labels), which computes loss = tf.nn.compute_average_loss(loss_object(labels, "
                 "model(images, training=True)), global_batch_size=global_batch_size) + "
                 "tf.nn.scale_regularization_loss(tf.add_n(model.losses)) in a tf.GradientTape(), applies "
                 "the gradients with optimizer.apply_gradients and returns loss; then "
                 "make_replica_step <- py$make_replica_step."}),
    solutions={"python": SOLUTION_STEP, "r": _in_r(SOLUTION_STEP)},
    starters={"python": "make_replica_step = None  # a function that returns the replica step",
             "r": "make_replica_step <- NULL  # a Python function that returns the replica step"},
    wrong=(
        WrongAnswer({"python": MEAN_STEP, "r": _in_r(MEAN_STEP)}, "the cross-entropy is 2 times fit()'s"),
        WrongAnswer({"python": UNSCALED_STEP, "r": _in_r(UNSCALED_STEP)}, "the L2 penalty counts 2 times"),
        WrongAnswer({"python": NO_UPDATE_STEP, "r": _in_r(NO_UPDATE_STEP)},
                    "step 1's loss equals fit()'s but the later ones do not"),
        WrongAnswer({"python": FIXED_STEP, "r": _in_r(FIXED_STEP)},
                    "the cross-entropy is divided by 64, not by global_batch_size (40)"),
        WrongAnswer({"python": SHARED_STEP, "r": _in_r(SHARED_STEP)},
                    "with 1 replica and a global batch of 40, the L2 penalty counts 0.5 times"),
        # The R student's likeliest slip, an R replica step, is refused before it could hang strategy$run();
        # Python's counterpart is a step that returns its two terms instead of the loss.
        WrongAnswer({"python": _step(AVERAGE + "\n" + SCALED_L2, update="").replace(
                         "        return loss", "        return tf.stack([loss, loss])"),
                     "r": "make_replica_step <- function(model, optimizer, loss_object, global_batch_size) {\n"  # noqa: E501
                          "  function(images, labels) {\n"
                          "    per_example <- loss_object(labels, model(images, training = TRUE))\n"
                          "    tf$nn$compute_average_loss(per_example, global_batch_size = global_batch_size)\n"  # noqa: E501
                          "  }\n"
                          "}"},
                    "the replica step "),
    ),
    right=({"python": BY_HAND_STEP, "r": _in_r(BY_HAND_STEP)},
           {"python": SCALED_MEAN_STEP, "r": _in_r(SCALED_MEAN_STEP)}),
    context={"python": CONTEXT["python"], "r": "library(reticulate)"},
)
