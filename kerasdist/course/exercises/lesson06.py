"""Lesson 06's checked exercises: a MirroredStrategy summing on one device, loading under a strategy, a step.

Every check builds real strategies on the lesson's 2 devices; a wrong answer reads, for instance:

    >>> print(q1.verdict({"make_mirrored": lambda devices: None}))  # doctest: +SKIP
    Incorrect: make_mirrored(devices) returned None: return a tf.distribute.MirroredStrategy.
"""

import os
import tempfile

import numpy as np

from kerasdist.course.exercises.core import Exercise, Incorrect, WrongAnswer
from kerasdist.course.exercises.fixtures import call_answer, largest_gap, mlp, quiet_tensorflow

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


def _reduction_to_one_device():
    """MirroredStrategy on the lesson's 2 devices, summing with ReductionToOneDevice (kerasdist's on CPUs)."""
    import tensorflow as tf

    return tf.distribute.MirroredStrategy(_devices(), cross_device_ops=tf.distribute.ReductionToOneDevice())


def _scope(language):
    return language.pick("with strategy.scope():", "with(strategy$scope(), ...)")


def _check_make_mirrored(answers, language):
    import tensorflow as tf

    devices = _devices()
    strategy = call_answer(answers["make_mirrored"], "make_mirrored", devices)
    pass_devices = language.pick("devices=devices", "devices = devices")
    if not isinstance(strategy, tf.distribute.MirroredStrategy):
        got = language.value(strategy) if strategy is None else type(strategy).__name__
        wanted = language.pick("tf.distribute.MirroredStrategy", "tf$distribute$MirroredStrategy")
        raise Incorrect(f"make_mirrored(devices) returned {got}: return a {wanted}.")
    if strategy.num_replicas_in_sync != len(devices):
        raise Incorrect(f"the strategy has {strategy.num_replicas_in_sync} replica(s), not one per device it "
                        f"was given ({len(devices)}): pass {pass_devices}.")
    used = [device.split("device:")[-1] for device in strategy.extended.worker_devices]
    if used != [device.split("device:")[-1] for device in devices]:
        raise Incorrect(f"the strategy runs on {language.value(used)}, not on the devices it was given: "
                        f"pass {pass_devices}.")
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
    ),
    context=CONTEXT,
    needs=("keras3",),
)


def _check_load_under(answers, language):
    strategy = _reduction_to_one_device()
    saved = mlp(seed=3)  # uncompiled: the file holds the weights alone, so loading has no optimizer to skip
    with tempfile.TemporaryDirectory(prefix="kd_q06_") as folder:
        path = os.path.join(folder, "trained.keras")
        saved.save(path)
        model = call_answer(answers["load_under"], "load_under", path, strategy)
    if model is None or not hasattr(model, "weights"):
        raise Incorrect(f"load_under(path, strategy) returned {language.value(model)}: "
                        "return the loaded model.")
    kinds = sorted({type(weight.value).__name__ for weight in model.weights})
    if kinds != ["MirroredVariable"]:
        raise Incorrect(f"the loaded model's weights are {', '.join(kinds)}, not MirroredVariable: load the "
                        f"file inside the strategy's scope ({_scope(language)}).")
    if model.distribute_strategy is not strategy:
        raise Incorrect("the loaded model belongs to another strategy than the one you were given: load it "
                        f"inside that strategy's scope ({_scope(language)}).")
    if len(model.weights) != len(saved.weights) or largest_gap(model.get_weights(), saved.get_weights()) > 0:
        raise Incorrect("the model's weights are not the saved ones: load the file with "
                        + language.pick("keras.saving.load_model(path)", "load_model(path)")
                        + " instead of building a new model.")
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


def _fit_losses(strategy, batches):
    """fit()'s loss of each step (from its running mean), the model it trained, and that model's first L2."""
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
    return means * steps - np.concatenate([[0.0], means[:-1] * steps[:-1]]), model, first_l2


def _check_make_replica_step(answers, language):
    with quiet_tensorflow():  # fit() and the step trace new functions in every check
        return _replica_step_verdict(answers, language)


def _replica_step_verdict(answers, language):
    import keras
    import tensorflow as tf

    strategy = _reduction_to_one_device()
    images, labels = _mixed_digits(GLOBAL_BATCH * STEPS)
    batches = tf.data.Dataset.from_tensor_slices((images, labels)).batch(GLOBAL_BATCH)
    keras.utils.set_random_seed(0)
    with strategy.scope():
        model = _regularized_mlp()
        optimizer = keras.optimizers.Adam(learning_rate=1e-3)
        optimizer.build(model.trainable_variables)
        loss_object = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)
    step = call_answer(answers["make_replica_step"], "make_replica_step", model, optimizer, loss_object,
                       GLOBAL_BATCH)
    if not callable(step):
        got = language.value(step) if step is None else type(step).__name__
        raise Incorrect(f"make_replica_step(...) returned {got}: return the replica step, a function of "
                        "(images, labels).")
    if getattr(step, "__module__", "") == "rpytools.call":
        raise Incorrect("the replica step is an R function, which strategy$run() cannot call from its "
                        "threads: write it in Python with py_run_string(), as the lesson does.")

    @tf.function
    def distributed_step(x, y):
        return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(step, args=(x, y)), axis=None)

    losses = []
    for x, y in strategy.experimental_distribute_dataset(batches):
        value = np.asarray(call_answer(distributed_step, "the replica step", x, y))
        if value.size != 1:
            raise Incorrect(f"the replica step returned {value.size} numbers: return its loss alone, "
                            "one number.")
        losses.append(float(value))
    fit_losses, fit_model, l2 = _fit_losses(strategy, batches)
    loss_gap = float(np.max(np.abs(np.array(losses) - fit_losses)))
    weight_gap = largest_gap(model.get_weights(), fit_model.get_weights())
    if loss_gap < 1e-4 and weight_gap < 1e-5:
        return ("the replica step's losses, summed over 2 replicas, equal fit()'s step for step, and so do "
                "the trained weights.")
    first, cross_entropy = losses[0], fit_losses[0] - l2
    run = language.pick("tf.nn.", "tf$nn$")
    if abs(first - (fit_losses[0] + l2)) < 1e-4:
        raise Incorrect(f"the L2 penalty counts 2 times in the summed loss: divide it by the replicas with "
                        f"{run}scale_regularization_loss(...).")
    if abs(first - cross_entropy) < 1e-4:
        raise Incorrect("the loss leaves out the model's L2 penalty: add "
                        f"{run}scale_regularization_loss(tf.add_n(model.losses)).")
    if min(abs(first - (2 * cross_entropy + l2)), abs(first - 2 * fit_losses[0])) < 1e-4:
        raise Incorrect("the cross-entropy is 2 times fit()'s: divide each replica's summed loss by the "
                        f"global batch with {run}compute_average_loss(..., global_batch_size=...), not by "
                        "its own 32 examples.")
    if abs(first - fit_losses[0]) < 1e-4:
        raise Incorrect("step 1's loss equals fit()'s but the later ones do not: take the gradients of that "
                        "loss and apply them with optimizer.apply_gradients(...) in the replica step.")
    if loss_gap < 1e-4:
        raise Incorrect(f"the losses equal fit()'s but the weights after {STEPS} steps differ by up to "
                        f"{weight_gap:.2g}: apply the gradients of the loss you return.")
    raise Incorrect(f"step 1's summed loss is {first:.4f}, fit()'s is {fit_losses[0]:.4f}: return the "
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
    context={"python": CONTEXT["python"], "r": "library(reticulate)"},
)
