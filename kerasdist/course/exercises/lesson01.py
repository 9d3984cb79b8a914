"""Lesson 01's checked exercises: the per-replica batch, one synchronous step by hand, the scope.

Example:
    >>> print(q1.verdict({"per_replica_batch": lambda g, n: g * n}))  # doctest: +ELLIPSIS
    Incorrect: per_replica_batch(64, 2) returned 128, but ...
"""

import numpy as np

from kerasdist.course.exercises.core import Exercise, Incorrect, WrongAnswer
from kerasdist.course.exercises.fixtures import (
    as_arrays,
    call_answer,
    digits_of_every_class,
    largest_gap,
    mlp,
    two_replicas,
)

CONTEXT = {
    "python": "import keras\nimport tensorflow as tf",
    "r": 'library(keras3)\nlibrary(tensorflow, exclude = c("shape", "set_random_seed"))',
}
CASES = ((64, 2), (64, 4), (96, 3), (256, 8), (32, 1))


def _check_per_replica_batch(answers, language):
    function = answers["per_replica_batch"]
    for global_batch, replicas in CASES:
        got = call_answer(function, "per_replica_batch", global_batch, replicas)
        if isinstance(got, float) and got == global_batch // replicas:
            raise Incorrect(f"per_replica_batch({global_batch}, {replicas}) returned {language.value(got)}, "
                            f"a {language.pick('float', 'double')}: divide with {language.int_div} so a batch size stays whole.")
        if got != global_batch // replicas:
            raise Incorrect(f"per_replica_batch({global_batch}, {replicas}) returned {language.value(got)}, "
                            f"but the {global_batch} examples of a global batch are split among {replicas} "
                            f"replicas: each gets {global_batch // replicas}.")
    return "per_replica_batch(global_batch, num_replicas) gives every replica its share of the global batch."


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
        WrongAnswer({"python": "def per_replica_batch(global_batch, num_replicas):\n"
                               "    return global_batch / num_replicas",
                     "r": "per_replica_batch <- function(global_batch, num_replicas) global_batch / num_replicas"},
                    "so a batch size stays whole"),
    ),
)


def _strategy_gradients(model, images, labels):
    """MirroredStrategy's all-reduced gradients of one global batch on 2 replicas (fit()'s loss scaling)."""
    import keras
    import tensorflow as tf

    strategy = two_replicas()
    with strategy.scope():
        mirrored = mlp()
    mirrored.set_weights(model.get_weights())
    dataset = strategy.experimental_distribute_dataset(
        tf.data.Dataset.from_tensor_slices((images, labels)).batch(len(labels)))

    def replica_step(x, y):
        with tf.GradientTape() as tape:
            per_example = keras.losses.sparse_categorical_crossentropy(y, mirrored(x), from_logits=True)
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=len(labels))
        gradients = tape.gradient(loss, mirrored.trainable_variables)
        return tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, gradients)

    summed = tf.function(lambda batch: strategy.run(replica_step, args=batch))(next(iter(dataset)))
    return [strategy.experimental_local_results(g)[0].numpy() for g in summed]


def _check_local_gradients(answers, language):
    function = answers["local_gradients"]
    images, labels = digits_of_every_class(64)
    model = mlp()
    shards = [(images[:32], labels[:32]), (images[32:], labels[32:])]
    per_replica = [as_arrays(call_answer(function, "local_gradients", model, x, y, 64)) for x, y in shards]
    if len(per_replica[0]) != len(model.trainable_variables):
        raise Incorrect(f"local_gradients returned {len(per_replica[0])} values, but the model has "
                        f"{len(model.trainable_variables)} trainable variables: return one gradient each.")
    summed = [a + b for a, b in zip(*per_replica)]
    reference = _strategy_gradients(model, images, labels)
    if largest_gap(summed, reference) <= 1e-5 + 1e-4 * max(float(np.max(np.abs(r))) for r in reference):
        return ("the two replicas' gradients add up to MirroredStrategy's all-reduced gradient "
                "on 2 replicas.")
    ratio = float(np.linalg.norm(summed[-1]) / np.linalg.norm(reference[-1]))
    if abs(ratio - 2.0) < 0.01:
        raise Incorrect("the summed gradients are 2 times the strategy's: divide each replica's summed loss "
                        "by the global batch (64), not by its local batch (32).")
    raise Incorrect(f"the summed gradients differ from the strategy's by up to {largest_gap(summed, reference):.2g} "
                    f"(norm ratio {ratio:.3g}): take the gradient of the sum of the per-example losses divided "
                    "by global_batch.")


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
    ),
    context=CONTEXT,
    needs=("keras3",),
)


def _check_build_and_compile(answers, language):
    strategy = two_replicas()
    model = call_answer(answers["build_and_compile"], "build_and_compile", strategy)
    scope = language.pick("strategy.scope()", "with(strategy$scope(), ...)")
    if model is None or not hasattr(model, "trainable_variables"):
        raise Incorrect(f"build_and_compile(strategy) returned {language.value(model)}: return the model.")
    if model.distribute_strategy is not strategy:
        raise Incorrect(f"the model's variables belong to {type(model.distribute_strategy).__name__} with "
                        f"{model.distribute_strategy.num_replicas_in_sync} replica, not to the strategy you "
                        f"were given: build the model inside {scope}.")
    if not model.compiled or model.optimizer is None:
        raise Incorrect(f"the model is not compiled: call compile() inside {scope}, as fit() needs.")
    # Keras' TensorFlow optimizer keeps the strategy it was created under; fit() refuses to mix two.
    if getattr(model.optimizer, "_distribution_strategy", strategy) is not strategy:
        raise Incorrect(f"the optimizer was created outside {scope}, and fit() would fail mixing two "
                        f"strategies: create it and call compile() inside {scope}.")
    kinds = {type(v.value).__name__ for v in model.trainable_variables}
    if kinds != {"MirroredVariable"}:
        raise Incorrect(f"the model's weights are {sorted(kinds)}, not MirroredVariable: build it in {scope}.")
    return "the model and its optimizer are built and compiled in the strategy's scope: 2 mirrored copies."


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
    ),
    context={
        "python": CONTEXT["python"] + "\nfrom kerasdist.course.exercises.fixtures import mlp as build_mlp",
        "r": CONTEXT["r"] + "\nbuild_mlp <- function() reticulate::import('kerasdist.course.exercises.fixtures')$mlp()",
    },
    needs=("keras3",),
)
