"""Lesson 01's checked exercises: the per-replica batch, one synchronous step by hand, the scope.

Example:
    >>> print(q1.verdict({"per_replica_batch": lambda g, n: g * n}))  # doctest: +ELLIPSIS
    Incorrect: per_replica_batch(64, 2) returned 128, but ...
"""

import functools
import itertools
import re

import numpy as np

from kerasdist.course.exercises.core import Exercise, Incorrect, WrongAnswer
from kerasdist.course.exercises.fixtures import (
    call_answer,
    digits_of_every_class,
    error_line,
    largest_gap,
    mlp,
    on_one_line,
    quiet_tensorflow,
    real_number,
    two_replicas,
    whole_number,
)

CONTEXT = {
    "python": "import keras\nimport tensorflow as tf",
    "r": 'library(keras3)\nlibrary(tensorflow, exclude = c("shape", "set_random_seed"))',
}
CASES = ((64, 2), (64, 4), (96, 3), (256, 8), (32, 1))


def _check_per_replica_batch(answers, language):
    function = answers["per_replica_batch"]
    for global_batch, replicas in CASES:
        expected = global_batch // replicas
        call = f"per_replica_batch({global_batch}, {replicas})"
        got = call_answer(function, "per_replica_batch", global_batch, replicas)
        whole = whole_number(got, language)
        if whole is None and real_number(got) == expected:
            raise Incorrect(f"{call} returned {on_one_line(got, language)}, not a whole number: divide with "
                            f"{language.int_div} so a batch size stays whole.")
        if whole is None:
            raise Incorrect(f"{call} returned {on_one_line(got, language)}, not a whole number: return how "
                            f"many examples each replica gets, one number ({expected} here).")
        if whole != expected:
            raise Incorrect(f"{call} returned {whole}, but the {global_batch} examples of a global batch are "
                            f"split among {replicas} replicas: each gets {expected}.")
    return "per_replica_batch(global_batch, num_replicas) gives every replica its share of the global batch."


def _first_words(error):
    """An error's line without TensorFlow's {{function_node ...}} prefix, cut short."""
    return re.sub(r"\{\{.*?\}\}\s*", "", error_line(error))[:120]


q1 = Exercise(
    "01", "q1", "The per-replica batch",
    answers=("per_replica_batch",),
    check_answers=_check_per_replica_batch,
    hints=("The global batch is the examples of one step across all replicas; each replica takes an "
           "equal share.",
           {"python": "Divide the global batch by the number of replicas with //, which keeps an int.",
            "r": "Divide the global batch by the number of replicas with %/%, which keeps an integer."}),
    solutions={
        "python": "def per_replica_batch(global_batch, num_replicas):\n"
                  "    return global_batch // num_replicas",
        "r": "per_replica_batch <- function(global_batch, num_replicas) global_batch %/% num_replicas",
    },
    starters={"python": "per_replica_batch = None  # a function of (global_batch, num_replicas)",
             "r": "per_replica_batch <- NULL  # a function of (global_batch, num_replicas)"},
    wrong=(
        WrongAnswer({"python": "def per_replica_batch(global_batch, num_replicas):\n"
                               "    return global_batch * num_replicas",
                     "r": "per_replica_batch <- function(global_batch, num_replicas) global_batch * num_replicas"},
                    "split among 2 replicas: each gets 32"),
        # A float in Python; in R, whose numbers are doubles, a string.
        WrongAnswer({"python": "def per_replica_batch(global_batch, num_replicas):\n"
                               "    return global_batch / num_replicas",
                     "r": "per_replica_batch <- function(global_batch, num_replicas) {\n"
                          "  as.character(global_batch %/% num_replicas)\n"
                          "}"},
                    "not a whole number"),
        # The lesson's number, hard-coded.
        WrongAnswer({"python": "def per_replica_batch(global_batch, num_replicas):\n"
                               "    return 32",
                     "r": "per_replica_batch <- function(global_batch, num_replicas) 32L"},
                    "split among 4 replicas: each gets 16"),
        # The notebook's replica count instead of the argument.
        WrongAnswer({"python": "NUM_REPLICAS = 2\n\n"
                               "def per_replica_batch(global_batch, num_replicas):\n"
                               "    return global_batch // NUM_REPLICAS",
                     "r": "NUM_REPLICAS <- 2L\n"
                          "per_replica_batch <- function(global_batch, num_replicas) global_batch %/% NUM_REPLICAS"},
                    "split among 4 replicas: each gets 16"),
        # Not one number: a NumPy float32 in Python, one batch size per replica in R.
        WrongAnswer({"python": "import numpy as np\n\n"
                               "def per_replica_batch(global_batch, num_replicas):\n"
                               "    return np.float32(global_batch // num_replicas)",
                     "r": "per_replica_batch <- function(global_batch, num_replicas) {\n"
                          "  rep(global_batch %/% num_replicas, num_replicas)\n"
                          "}"},
                    "not a whole number"),
    ),
    right=(
        {"python": "def per_replica_batch(global_batch, num_replicas):\n"
                   "    return int(global_batch / num_replicas)",
         "r": "per_replica_batch <- function(global_batch, num_replicas) floor(global_batch / num_replicas)"},
        {"python": "import numpy as np\n\n"
                   "per_replica_batch = lambda global_batch, num_replicas: np.floor_divide(global_batch, num_replicas)",
         "r": "per_replica_batch <- function(global_batch, num_replicas) {\n"
              "  as.integer(global_batch / num_replicas)\n"
              "}"},
        {"python": "import tensorflow as tf\n\n"
                   "def per_replica_batch(global_batch, num_replicas):\n"
                   "    quotient, _ = divmod(global_batch, num_replicas)\n"
                   "    return tf.constant(quotient)",
         "r": "per_replica_batch <- function(global_batch, num_replicas) global_batch / num_replicas"},
    ),
)


# Each case: the sizes of the local batches one global batch is split into, one replica each. The
# lesson's 64 in two halves; 48 in three unequal shards, so that neither 64 nor the replica count nor
# equal shards can stand in for global_batch.
SHARDS = ((32, 32), (16, 12, 20))


@functools.lru_cache(maxsize=None)
def _strategy_gradients(size):
    """MirroredStrategy's all-reduced gradients of a global batch of ``size`` real digits on 2 replicas
    (fit()'s loss scaling), from the course's MLP; computed once, read-only."""
    import keras
    import tensorflow as tf

    images, labels = digits_of_every_class(size)
    weights = mlp().get_weights()  # the weights each answer's model has
    strategy = two_replicas()
    with strategy.scope():
        mirrored = mlp()
    mirrored.set_weights(weights)
    dataset = strategy.experimental_distribute_dataset(
        tf.data.Dataset.from_tensor_slices((images, labels)).batch(len(labels)))

    def replica_step(x, y):
        with tf.GradientTape() as tape:
            per_example = keras.losses.sparse_categorical_crossentropy(y, mirrored(x), from_logits=True)
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=len(labels))
        gradients = tape.gradient(loss, mirrored.trainable_variables)
        return tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, gradients)

    summed = tf.function(lambda batch: strategy.run(replica_step, args=batch))(next(iter(dataset)))
    reference = tuple(strategy.experimental_local_results(g)[0].numpy() for g in summed)
    for array in reference:
        array.setflags(write=False)
    return reference


def _gradients(got, model, call, language):
    """The arrays of the gradients ``got`` that an answer returned for ``model``, or an Incorrect."""
    variables = model.trainable_variables
    gradient = language.pick("tape.gradient(loss, model.trainable_variables)",
                             "tape$gradient(loss, model$trainable_variables)")
    wanted = f"return {gradient}, one gradient per trainable variable"
    if hasattr(got, "shape") and hasattr(got, "dtype"):
        raise Incorrect(f"{call} returned one tensor of shape {tuple(got.shape)}, not a list of gradients: "
                        f"{wanted}.")
    if got is None or isinstance(got, (str, bytes, dict)) or not hasattr(got, "__iter__"):
        raise Incorrect(f"{call} returned {on_one_line(got, language)}: {wanted}.")
    items = call_answer(lambda: list(itertools.islice(got, len(variables) + 1)),
                        "iterating what local_gradients returned")
    if len(items) != len(variables):
        more = "+" if len(items) > len(variables) else ""
        raise Incorrect(f"local_gradients returned {len(items)}{more} values, but the model has "
                        f"{len(variables)} trainable variables: {wanted}.")
    arrays = []
    for item, variable in zip(items, variables):
        name = getattr(variable, "path", variable.name)
        if item is None:
            raise Incorrect(f"the gradient of {name} is {language.none}: compute the loss from model(images) "
                            "inside the tape, so that the tape sees every weight used.")
        try:
            array = np.asarray(item, dtype="float64")
        except (TypeError, ValueError):
            raise Incorrect(f"the gradient of {name} is {on_one_line(item, language)}, not an array of "
                            f"numbers: {wanted}.") from None
        if array.shape != tuple(variable.shape):
            raise Incorrect(f"the gradient of {name} has the shape {array.shape}, not the variable's "
                            f"{tuple(variable.shape)}: {wanted}.")
        arrays.append(array)
    return arrays


def _check_local_gradients(answers, language):
    with quiet_tensorflow():
        return _local_gradients_verdict(answers, language)


def _local_gradients_verdict(answers, language):
    function = answers["local_gradients"]
    for sizes in SHARDS:
        global_batch = sum(sizes)
        reference = _strategy_gradients(global_batch)  # before the answer runs
        images, labels = digits_of_every_class(global_batch)
        ends = np.cumsum((0,) + sizes)
        summed = None
        for start, end in zip(ends[:-1], ends[1:]):
            model = mlp()  # a fresh copy for each replica: an answer that changes the model changes no other
            call = f"local_gradients(model, images, labels, {global_batch})"
            got = call_answer(function, "local_gradients", model, images[start:end], labels[start:end],
                              global_batch)
            local = _gradients(got, model, call, language)
            summed = local if summed is None else [a + b for a, b in zip(summed, local)]
        if largest_gap(summed, reference) <= 1e-5 + 1e-4 * max(float(np.max(np.abs(r))) for r in reference):
            continue
        split = " + ".join(str(size) for size in sizes)
        flat_summed = np.concatenate([a.ravel() for a in summed])
        flat_reference = np.concatenate([np.ravel(r) for r in reference])
        factor = float(flat_summed @ flat_reference / (flat_reference @ flat_reference))
        multiple = (np.all(np.isfinite(flat_summed)) and np.max(np.abs(flat_summed - factor * flat_reference))
                    <= 1e-4 * np.max(np.abs(flat_summed)) + 1e-6)
        if multiple and len(set(sizes)) == 1 and abs(factor - len(sizes)) < 0.01:
            raise Incorrect(f"the summed gradients are {len(sizes)} times the strategy's: divide each "
                            f"replica's summed loss by the global batch ({global_batch}), not by its local "
                            f"batch ({sizes[0]}).")
        case = f"with a global batch of {global_batch} split {split} over {len(sizes)} replicas"
        if multiple:
            raise Incorrect(f"{case}, the summed gradients are {factor:.3g} times the strategy's: divide the "
                            "sum of each replica's per-example losses by global_batch, the argument, and "
                            "nothing else.")
        gap = largest_gap(summed, reference)
        raise Incorrect(f"{case}, the summed gradients differ from the strategy's by up to {gap:.2g}: take "
                        "the gradient of the sum of the per-example losses (cross-entropy from logits) divided by "
                        "global_batch.")
    return ("the two replicas' gradients add up to MirroredStrategy's all-reduced gradient "
            "on 2 replicas.")


q2 = Exercise(
    "01", "q2", "One replica's gradients",
    answers=("local_gradients",),
    check_answers=_check_local_gradients,
    hints=("A replica's loss is the sum of its per-example losses divided by the GLOBAL batch, so that "
           "the all-reduce's sum is the mean gradient.",
           {"python": "Inside tf.GradientTape(): keras.losses.sparse_categorical_crossentropy(labels, "
                      "model(images), from_logits=True), then tf.reduce_sum(...) / global_batch; return "
                      "tape.gradient(loss, model.trainable_variables).",
            "r": "Inside with(tf$GradientTape() %as% tape, ...): loss_sparse_categorical_crossentropy(labels, "
                 "model(images), from_logits = TRUE), then tf$reduce_sum(...) / global_batch; return "
                 "tape$gradient(loss, model$trainable_variables)."}),
    solutions={
        "python": "def local_gradients(model, images, labels, global_batch):\n"
                  "    with tf.GradientTape() as tape:\n"
                  "        per_example = keras.losses.sparse_categorical_crossentropy(labels, model(images),\n"
                  "                                                                   from_logits=True)\n"
                  "        loss = tf.reduce_sum(per_example) / global_batch\n"
                  "    return tape.gradient(loss, model.trainable_variables)",
        "r": "local_gradients <- function(model, images, labels, global_batch) {\n"
             "  with(tf$GradientTape() %as% tape, {\n"
             "    per_example <- loss_sparse_categorical_crossentropy(labels, model(images), from_logits = TRUE)\n"
             "    loss <- tf$reduce_sum(per_example) / global_batch\n"
             "  })\n"
             "  tape$gradient(loss, model$trainable_variables)\n"
             "}",
    },
    starters={"python": "local_gradients = None  # a function of (model, images, labels, global_batch)",
             "r": "local_gradients <- NULL  # a function of (model, images, labels, global_batch)"},
    wrong=(
        WrongAnswer({"python": "def local_gradients(model, images, labels, global_batch):\n"
                               "    with tf.GradientTape() as tape:\n"
                               "        per_example = keras.losses.sparse_categorical_crossentropy(\n"
                               "            labels, model(images), from_logits=True)\n"
                               "        loss = tf.reduce_mean(per_example)\n"
                               "    return tape.gradient(loss, model.trainable_variables)",
                     "r": "local_gradients <- function(model, images, labels, global_batch) {\n"
                          "  with(tf$GradientTape() %as% tape, {\n"
                          "    per_example <- loss_sparse_categorical_crossentropy(labels, model(images),\n"
                          "                                                        from_logits = TRUE)\n"
                          "    loss <- tf$reduce_mean(per_example)\n"
                          "  })\n"
                          "  tape$gradient(loss, model$trainable_variables)\n"
                          "}"},
                    "2 times the strategy's"),
        # The lesson's global batch, hard-coded.
        WrongAnswer({"python": "def local_gradients(model, images, labels, global_batch):\n"
                               "    with tf.GradientTape() as tape:\n"
                               "        per_example = keras.losses.sparse_categorical_crossentropy(\n"
                               "            labels, model(images), from_logits=True)\n"
                               "        loss = tf.reduce_sum(per_example) / 64\n"
                               "    return tape.gradient(loss, model.trainable_variables)",
                     "r": "local_gradients <- function(model, images, labels, global_batch) {\n"
                          "  with(tf$GradientTape() %as% tape, {\n"
                          "    per_example <- loss_sparse_categorical_crossentropy(labels, model(images),\n"
                          "                                                        from_logits = TRUE)\n"
                          "    loss <- tf$reduce_sum(per_example) / 64\n"
                          "  })\n"
                          "  tape$gradient(loss, model$trainable_variables)\n"
                          "}"},
                    "0.75 times the strategy's"),
        # The notebook's replica count, right only while every replica's batch is the same size.
        WrongAnswer({"python": "NUM_REPLICAS = 2\n\n"
                               "def local_gradients(model, images, labels, global_batch):\n"
                               "    with tf.GradientTape() as tape:\n"
                               "        per_example = keras.losses.sparse_categorical_crossentropy(\n"
                               "            labels, model(images), from_logits=True)\n"
                               "        loss = tf.reduce_mean(per_example) / NUM_REPLICAS\n"
                               "    return tape.gradient(loss, model.trainable_variables)",
                     "r": "NUM_REPLICAS <- 2\n"
                          "local_gradients <- function(model, images, labels, global_batch) {\n"
                          "  with(tf$GradientTape() %as% tape, {\n"
                          "    per_example <- loss_sparse_categorical_crossentropy(labels, model(images),\n"
                          "                                                        from_logits = TRUE)\n"
                          "    loss <- tf$reduce_mean(per_example) / NUM_REPLICAS\n"
                          "  })\n"
                          "  tape$gradient(loss, model$trainable_variables)\n"
                          "}"},
                    "split 16 + 12 + 20 over 3 replicas"),
        # The loss instead of its gradients.
        WrongAnswer({"python": "def local_gradients(model, images, labels, global_batch):\n"
                               "    per_example = keras.losses.sparse_categorical_crossentropy(\n"
                               "        labels, model(images), from_logits=True)\n"
                               "    return tf.reduce_sum(per_example) / global_batch",
                     "r": "local_gradients <- function(model, images, labels, global_batch) {\n"
                          "  per_example <- loss_sparse_categorical_crossentropy(labels, model(images),\n"
                          "                                                      from_logits = TRUE)\n"
                          "  tf$reduce_sum(per_example) / global_batch\n"
                          "}"},
                    "one gradient per trainable variable"),
        # Cross-entropy on the logits as if they were probabilities.
        WrongAnswer({"python": "def local_gradients(model, images, labels, global_batch):\n"
                               "    with tf.GradientTape() as tape:\n"
                               "        per_example = keras.losses.sparse_categorical_crossentropy(labels, model(images))\n"
                               "        loss = tf.reduce_sum(per_example) / global_batch\n"
                               "    return tape.gradient(loss, model.trainable_variables)",
                     "r": "local_gradients <- function(model, images, labels, global_batch) {\n"
                          "  with(tf$GradientTape() %as% tape, {\n"
                          "    per_example <- loss_sparse_categorical_crossentropy(labels, model(images))\n"
                          "    loss <- tf$reduce_sum(per_example) / global_batch\n"
                          "  })\n"
                          "  tape$gradient(loss, model$trainable_variables)\n"
                          "}"},
                    "differ from the strategy's"),
    ),
    right=(
        {"python": "def local_gradients(model, images, labels, global_batch):\n"
                   "    with tf.GradientTape() as tape:\n"
                   "        per_example = keras.losses.sparse_categorical_crossentropy(\n"
                   "            labels, model(images, training=True), from_logits=True)\n"
                   "        loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)\n"
                   "    return tape.gradient(loss, model.trainable_variables)",
         "r": "local_gradients <- function(model, images, labels, global_batch) {\n"
              "  with(tf$GradientTape() %as% tape, {\n"
              "    per_example <- loss_sparse_categorical_crossentropy(labels, model(images), from_logits = TRUE)\n"
              "    loss <- tf$nn$compute_average_loss(per_example, global_batch_size = global_batch)\n"
              "  })\n"
              "  tape$gradient(loss, model$trainable_variables)\n"
              "}"},
        {"python": "def local_gradients(model, images, labels, global_batch):\n"
                   "    with tf.GradientTape() as tape:\n"
                   "        mean = tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(\n"
                   "            labels, model(images), from_logits=True))\n"
                   "        loss = mean * len(labels) / global_batch\n"
                   "    return [gradient.numpy() for gradient in tape.gradient(loss, model.trainable_variables)]",
         "r": "local_gradients <- function(model, images, labels, global_batch) {\n"
              "  with(tf$GradientTape() %as% tape, {\n"
              "    mean <- tf$reduce_mean(loss_sparse_categorical_crossentropy(labels, model(images),\n"
              "                                                                from_logits = TRUE))\n"
              "    loss <- mean * length(labels) / global_batch\n"
              "  })\n"
              "  lapply(tape$gradient(loss, model$trainable_variables), as.array)\n"
              "}"},
        {"python": "def local_gradients(model, images, labels, global_batch):\n"
                   "    summed = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction='sum')\n"
                   "    with tf.GradientTape() as tape:\n"
                   "        loss = summed(labels, model(images)) / global_batch\n"
                   "    return tuple(tape.gradient(loss, model.trainable_weights))",
         "r": "local_gradients <- function(model, images, labels, global_batch) {\n"
              "  summed <- loss_sparse_categorical_crossentropy(from_logits = TRUE, reduction = 'sum')\n"
              "  with(tf$GradientTape() %as% tape, loss <- summed(labels, model(images)) / global_batch)\n"
              "  tape$gradient(loss, model$trainable_weights)\n"
              "}"},
    ),
    context=CONTEXT,
    needs=("keras3",),
)


MLP_SHAPES = [(784, 256), (256,), (256, 256), (256,), (256, 10), (10,)]  # the course's MLP's weights


def _check_build_and_compile(answers, language):
    with quiet_tensorflow():
        for strategy in (two_replicas(), two_replicas()):  # two strategies: the model of each in its own
            model = call_answer(answers["build_and_compile"], "build_and_compile", strategy)
            _built_in_scope(model, strategy, language)
        _compiled_as_asked(model, language)
    return "the model and its optimizer are built and compiled in the strategy's scope: 2 mirrored copies."


def _built_in_scope(model, strategy, language):
    import keras

    scope = language.pick("strategy.scope()", "with(strategy$scope(), ...)")
    if not isinstance(model, keras.Model):
        raise Incorrect(f"build_and_compile(strategy) returned {on_one_line(model, language)}: return the "
                        "model.")
    if model.distribute_strategy is not strategy:
        replicas = model.distribute_strategy.num_replicas_in_sync
        raise Incorrect(f"the model's variables belong to {type(model.distribute_strategy).__name__} with "
                        f"{replicas} replica{'' if replicas == 1 else 's'}, not to the strategy you were "
                        f"given: build the model inside {scope}.")
    if not model.compiled or model.optimizer is None:
        raise Incorrect(f"the model is not compiled: call compile() inside {scope}, as fit() needs.")
    # Keras' TensorFlow optimizer keeps the strategy it was created under; fit() refuses to mix two.
    if getattr(model.optimizer, "_distribution_strategy", strategy) is not strategy:
        raise Incorrect(f"the optimizer was created outside {scope}, and fit() would fail mixing two "
                        f"strategies: create it and call compile() inside {scope}.")
    kinds = {type(v.value).__name__ for v in model.trainable_variables}
    if kinds != {"MirroredVariable"}:
        raise Incorrect(f"the model's weights are {sorted(kinds)}, not MirroredVariable: build it in "
                        f"{scope}.")


def _compiled_as_asked(model, language):
    """The lesson's MLP, Adam, and a loss that is the mean sparse categorical cross-entropy of logits (by
    its values)."""
    import keras

    shapes = [tuple(weight.shape) for weight in model.trainable_weights]
    if shapes != MLP_SHAPES:
        raise Incorrect(f"the model's weights have the shapes {shapes}, not those of the lesson's MLP "
                        f"{MLP_SHAPES}: build it with build_mlp().")
    outputs = np.asarray(model(digits_of_every_class(10)[0]), dtype="float64")
    if np.all(outputs >= 0) and np.allclose(outputs.sum(axis=1), 1.0, atol=1e-4):
        raise Incorrect("the model outputs probabilities (its rows sum to 1), but the task's loss reads "
                        "logits: build it with build_mlp(), whose last layer gives logits.")
    if type(model.optimizer) is not keras.optimizers.Adam:
        adam = language.pick("keras.optimizers.Adam() (or 'adam')", 'optimizer_adam() (or "adam")')
        raise Incorrect(f"the optimizer is {type(model.optimizer).__name__}, not Adam: compile with "
                        f"optimizer = {adam}.")
    rng = np.random.default_rng(0)
    logits = rng.normal(0.0, 3.0, (8, 10)).astype("float32")  # logits: negative values, rows not summing to 1
    labels = rng.integers(0, 10, 8).astype("int32")
    shifted = logits.astype("float64") - logits.max(axis=1, keepdims=True)
    expected = float(np.mean(np.log(np.exp(shifted).sum(axis=1)) - shifted[np.arange(8), labels]))
    from_logits = language.pick("keras.losses.SparseCategoricalCrossentropy(from_logits=True)",
                                "loss_sparse_categorical_crossentropy(from_logits = TRUE)")
    try:
        got = real_number(model.compute_loss(x=None, y=labels, y_pred=logits))
    except Exception as error:  # noqa: BLE001 (the compiled loss's own error is the verdict)
        raise Incorrect(f"the compiled loss fails on integer labels and 10 logits per example "
                        f"({type(error).__name__}: {_first_words(error)}): compile with loss = "
                        f"{from_logits}.") from None
    if got is not None and abs(got - expected) <= 1e-4 * expected:
        return
    as_probabilities = float(np.mean(keras.losses.sparse_categorical_crossentropy(labels, logits)))
    if got is not None and abs(got - as_probabilities) <= 1e-4 * as_probabilities:
        raise Incorrect("the loss reads the model's outputs as probabilities (from_logits is false, as with "
                        "the loss given by its name or the plain function), but the MLP outputs logits: "
                        f"compile with loss = {from_logits}.")
    shown = "no number" if got is None else f"{got:.4g}"
    raise Incorrect(f"on test logits the compiled loss gives {shown}, where sparse categorical cross-entropy "
                    f"from logits gives {expected:.4g}: compile with loss = {from_logits}.")


q3 = Exercise(
    "01", "q3", "Build and compile in the scope",
    answers=("build_and_compile",),
    check_answers=_check_build_and_compile,
    hints=({"python": "Everything that creates variables must run inside `with strategy.scope():`.",
            "r": "Everything that creates variables must run inside with(strategy$scope(), { ... })."},
           {"python": "Inside the scope: model = build_mlp(); model.compile(optimizer='adam', "
                      "loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True)); return model "
                      "after the block.",
            "r": "Inside with(strategy$scope(), { model <- build_mlp(); model |> compile(optimizer = 'adam', "
                 "loss = loss_sparse_categorical_crossentropy(from_logits = TRUE)) }); then return model."}),
    solutions={
        "python": "def build_and_compile(strategy):\n"
                  "    with strategy.scope():\n"
                  "        model = build_mlp()\n"
                  "        model.compile(optimizer=keras.optimizers.Adam(),\n"
                  "                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))\n"
                  "    return model",
        "r": "build_and_compile <- function(strategy) {\n"
             "  with(strategy$scope(), {\n"
             "    model <- build_mlp()\n"
             "    model |> compile(optimizer = optimizer_adam(),\n"
             "                     loss = loss_sparse_categorical_crossentropy(from_logits = TRUE))\n"
             "  })\n"
             "  model\n"
             "}",
    },
    starters={"python": "build_and_compile = None  # a function of (strategy) that returns a compiled model",
             "r": "build_and_compile <- NULL  # a function of (strategy) that returns a compiled model"},
    wrong=(
        WrongAnswer({"python": "def build_and_compile(strategy):\n"
                               "    model = build_mlp()\n"
                               "    model.compile(optimizer=keras.optimizers.Adam(),\n"
                               "                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))\n"
                               "    return model",
                     "r": "build_and_compile <- function(strategy) {\n"
                          "  model <- build_mlp()\n"
                          "  model |> compile(optimizer = optimizer_adam(),\n"
                          "                   loss = loss_sparse_categorical_crossentropy(from_logits = TRUE))\n"
                          "  model\n"
                          "}"},
                    "not to the strategy you were given"),
        WrongAnswer({"python": "def build_and_compile(strategy):\n"
                               "    with strategy.scope():\n"
                               "        model = build_mlp()\n"
                               "    return model",
                     "r": "build_and_compile <- function(strategy) {\n"
                          "  with(strategy$scope(), model <- build_mlp())\n"
                          "  model\n"
                          "}"},
                    "the model is not compiled"),
        WrongAnswer({"python": "def build_and_compile(strategy):\n"
                               "    with strategy.scope():\n"
                               "        model = build_mlp()\n"
                               "    model.compile(optimizer=keras.optimizers.Adam(),\n"
                               "                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))\n"
                               "    return model",
                     "r": "build_and_compile <- function(strategy) {\n"
                          "  with(strategy$scope(), model <- build_mlp())\n"
                          "  model |> compile(optimizer = optimizer_adam(),\n"
                          "                   loss = loss_sparse_categorical_crossentropy(from_logits = TRUE))\n"
                          "  model\n"
                          "}"},
                    "the optimizer was created outside"),
        # Another optimizer than the task's.
        WrongAnswer({"python": "def build_and_compile(strategy):\n"
                               "    with strategy.scope():\n"
                               "        model = build_mlp()\n"
                               "        model.compile(optimizer='sgd',\n"
                               "                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))\n"
                               "    return model",
                     "r": "build_and_compile <- function(strategy) {\n"
                          "  with(strategy$scope(), {\n"
                          "    model <- build_mlp()\n"
                          "    model |> compile(optimizer = \"sgd\",\n"
                          "                     loss = loss_sparse_categorical_crossentropy(from_logits = TRUE))\n"
                          "  })\n"
                          "  model\n"
                          "}"},
                    "not Adam"),
        # The loss by its name: from_logits is false, but the MLP outputs logits.
        WrongAnswer({"python": "def build_and_compile(strategy):\n"
                               "    with strategy.scope():\n"
                               "        model = build_mlp()\n"
                               "        model.compile(optimizer='adam',\n"
                               "                      loss='sparse_categorical_crossentropy')\n"
                               "    return model",
                     "r": "build_and_compile <- function(strategy) {\n"
                          "  with(strategy$scope(), {\n"
                          "    model <- build_mlp()\n"
                          "    model |> compile(optimizer = \"adam\",\n"
                          "                     loss = \"sparse_categorical_crossentropy\")\n"
                          "  })\n"
                          "  model\n"
                          "}"},
                    "reads the model's outputs as probabilities"),
        # The loss function itself, without from_logits.
        WrongAnswer({"python": "def build_and_compile(strategy):\n"
                               "    with strategy.scope():\n"
                               "        model = build_mlp()\n"
                               "        model.compile(optimizer=keras.optimizers.Adam(),\n"
                               "                      loss=keras.losses.sparse_categorical_crossentropy)\n"
                               "    return model",
                     "r": "build_and_compile <- function(strategy) {\n"
                          "  with(strategy$scope(), {\n"
                          "    model <- build_mlp()\n"
                          "    model |> compile(optimizer = optimizer_adam(),\n"
                          "                     loss = loss_sparse_categorical_crossentropy)\n"
                          "  })\n"
                          "  model\n"
                          "}"},
                    "reads the model's outputs as probabilities"),
        # Another loss than the task's.
        WrongAnswer({"python": "def build_and_compile(strategy):\n"
                               "    with strategy.scope():\n"
                               "        model = build_mlp()\n"
                               "        model.compile(optimizer=keras.optimizers.Adam(),\n"
                               "                      loss='mse')\n"
                               "    return model",
                     "r": "build_and_compile <- function(strategy) {\n"
                          "  with(strategy$scope(), {\n"
                          "    model <- build_mlp()\n"
                          "    model |> compile(optimizer = optimizer_adam(),\n"
                          "                     loss = \"mse\")\n"
                          "  })\n"
                          "  model\n"
                          "}"},
                    "the compiled loss fails"),
        # The notebook's strategy instead of the argument.
        WrongAnswer({"python": "from kerasdist.course.exercises.fixtures import two_replicas\n\n"
                               "lesson_strategy = two_replicas()  # the notebook's strategy\n\n"
                               "def build_and_compile(strategy):\n"
                               "    with lesson_strategy.scope():\n"
                               "        model = build_mlp()\n"
                               "        model.compile(optimizer=keras.optimizers.Adam(),\n"
                               "                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))\n"
                               "    return model",
                     "r": "# the notebook's strategy\n"
                          "lesson_strategy <- reticulate::import('kerasdist.course.exercises.fixtures')$two_replicas()\n"
                          "build_and_compile <- function(strategy) {\n"
                          "  with(lesson_strategy$scope(), {\n"
                          "    model <- build_mlp()\n"
                          "    model |> compile(optimizer = optimizer_adam(),\n"
                          "                     loss = loss_sparse_categorical_crossentropy(from_logits = TRUE))\n"
                          "  })\n"
                          "  model\n"
                          "}"},
                    "not to the strategy you were given"),
    ),
    right=(
        {"python": "def build_and_compile(strategy):\n"
                   "    with strategy.scope():\n"
                   "        model = build_mlp()\n"
                   "        model.compile(optimizer='adam', metrics=['accuracy'],\n"
                   "                      loss=lambda y, logits: keras.losses.sparse_categorical_crossentropy(\n"
                   "                          y, logits, from_logits=True))\n"
                   "    return model",
         "r": "build_and_compile <- function(strategy) {\n"
              "  with(strategy$scope(), {\n"
              "    model <- build_mlp()\n"
              "    model |> compile(optimizer = \"adam\", metrics = \"accuracy\",\n"
              "                     loss = loss_sparse_categorical_crossentropy(from_logits = TRUE))\n"
              "  })\n"
              "  model\n"
              "}"},
        {"python": "def build_and_compile(strategy):\n"
                   "    with strategy.scope():\n"
                   "        model = build_mlp()\n"
                   "        optimizer = keras.optimizers.get({'class_name': 'Adam', 'config': {'learning_rate': 1e-3}})\n"
                   "        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True, name='xent')\n"
                   "        model.compile(optimizer, loss)\n"
                   "        return model",
         "r": "build_and_compile <- function(strategy) {\n"
              "  py_keras <- reticulate::import(\"keras\")\n"
              "  with(strategy$scope(), {\n"
              "    model <- build_mlp()\n"
              "    model$compile(optimizer = py_keras$optimizers$Adam(learning_rate = 1e-3),\n"
              "                  loss = py_keras$losses$SparseCategoricalCrossentropy(from_logits = TRUE))\n"
              "  })\n"
              "  model\n"
              "}"},
    ),
    context={
        "python": CONTEXT["python"] + "\nfrom kerasdist.course.exercises.fixtures import mlp as build_mlp",
        "r": CONTEXT["r"] + "\nbuild_mlp <- function() reticulate::import('kerasdist.course.exercises.fixtures')$mlp()",
    },
    needs=("keras3",),
)
