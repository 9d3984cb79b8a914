"""Lesson 03's checked exercises: synchronized BatchNormalization, a warm-up schedule, gradient accumulation.

Example:
    >>> print(q2.verdict({"warmup_schedule": lambda base, k, warmup, total: base}))  # doctest: +SKIP
    Incorrect: warmup_schedule(0.001, 2, 8, 40) returned a float, not a Keras learning-rate schedule: ...
"""


import numpy as np

from kerasdist.course.exercises.core import Exercise, Incorrect, WrongAnswer
from kerasdist.course.exercises.fixtures import (
    call_answer,
    digits_of_every_class,
    error_line,
    largest_gap,
    mlp,
    quiet_tensorflow,
    two_replicas,
)

CONTEXT = {
    "python": "import keras\nimport tensorflow as tf",
    "r": 'library(keras3)\nlibrary(tensorflow, exclude = c("shape", "set_random_seed"))',
}


def _check_normalized_mlp(answers, language):
    with quiet_tensorflow():
        return _normalized_mlp_verdict(answers, language)


def _normalized_mlp_verdict(answers, language):
    import keras
    import tensorflow as tf

    function = answers["normalized_mlp"]
    strategy = two_replicas()
    images, _ = digits_of_every_class(64)
    keras.utils.set_random_seed(0)
    with strategy.scope():
        replicated = call_answer(function, "normalized_mlp")
    if not isinstance(replicated, keras.Model):
        raise Incorrect(f"normalized_mlp() returned {type(replicated).__name__}: return the Keras model.")
    if not any(isinstance(layer, keras.layers.BatchNormalization) for layer in replicated.layers):
        raise Incorrect("the model has no BatchNormalization layer: put one after dense_1.")
    single = call_answer(function, "normalized_mlp")
    single.set_weights(replicated.get_weights())
    reference = single(images, training=True).numpy()
    if reference.shape != (64, 10):
        raise Incorrect(f"the model gives outputs of shape {reference.shape} for 64 digits, not (64, 10): "
                        "keep the MLP's 784 inputs and 10 logits.")
    batches = strategy.experimental_distribute_dataset(tf.data.Dataset.from_tensor_slices(images).batch(64))
    outputs = tf.function(lambda x: strategy.run(lambda rows: replicated(rows, training=True), args=(x,)))(
        next(iter(batches)))
    per_replica = np.concatenate([t.numpy() for t in strategy.experimental_local_results(outputs)])
    gap = largest_gap([per_replica], [reference])
    if gap > 1e-4 + 1e-3 * float(np.max(np.abs(reference))):
        layer = language.pick("BatchNormalization(synchronized=True)",
                              "layer_batch_normalization(synchronized = TRUE)")
        raise Incorrect(f"in training, 2 replicas of 32 digits give other outputs than one device with all 64 "
                        f"(up to {gap:.2g} apart): each replica normalises with its own batch; use {layer}, "
                        "and no dropout.")
    return ("in training, 2 replicas of 32 digits compute the outputs one device computes on all 64: "
            "the BatchNormalization statistics are those of the global batch.")


q1 = Exercise(
    "03", "q1", "Stay on one device's path",
    answers=("normalized_mlp",),
    check_answers=_check_normalized_mlp,
    hints=("Plain BatchNormalization normalises each replica's examples with that replica's own mean and "
           "variance; one argument of the layer makes the replicas all-reduce them.",
           {"python": "inputs -> Dense(256, relu, name='dense_1') -> "
                      "keras.layers.BatchNormalization(synchronized=True) -> Dense(256, relu) -> Dense(10); "
                      "return keras.Model(inputs, logits).",
            "r": "keras_input(shape = 784) |> layer_dense(256, activation = 'relu', name = 'dense_1') |> "
                 "layer_batch_normalization(synchronized = TRUE) |> layer_dense(256, activation = 'relu') |> "
                 "layer_dense(10); return keras_model(inputs, logits)."}),
    solutions={
        "python": "def normalized_mlp():\n"
                  "    inputs = keras.Input(shape=(784,), name=\"digits\")\n"
                  "    hidden = keras.layers.Dense(256, activation=\"relu\", name=\"dense_1\")(inputs)\n"
                  "    hidden = keras.layers.BatchNormalization(synchronized=True, name=\"batch_norm\")(hidden)\n"
                  "    hidden = keras.layers.Dense(256, activation=\"relu\", name=\"dense_2\")(hidden)\n"
                  "    return keras.Model(inputs, keras.layers.Dense(10, name=\"logits\")(hidden))",
        "r": "normalized_mlp <- function() {\n"
             "  inputs <- keras_input(shape = 784, name = \"digits\")\n"
             "  logits <- inputs |>\n"
             "    layer_dense(units = 256, activation = \"relu\", name = \"dense_1\") |>\n"
             "    layer_batch_normalization(synchronized = TRUE, name = \"batch_norm\") |>\n"
             "    layer_dense(units = 256, activation = \"relu\", name = \"dense_2\") |>\n"
             "    layer_dense(units = 10, name = \"logits\")\n"
             "  keras_model(inputs, logits)\n"
             "}",
    },
    starters={"python": "normalized_mlp = None  # a function of () that returns an uncompiled model",
             "r": "normalized_mlp <- NULL  # a function of () that returns an uncompiled model"},
    wrong=(
        WrongAnswer({"python": "def normalized_mlp():\n"
                               "    inputs = keras.Input(shape=(784,), name=\"digits\")\n"
                               "    hidden = keras.layers.Dense(256, activation=\"relu\", name=\"dense_1\")(inputs)\n"
                               "    hidden = keras.layers.BatchNormalization(name=\"batch_norm\")(hidden)\n"
                               "    hidden = keras.layers.Dense(256, activation=\"relu\", name=\"dense_2\")(hidden)\n"
                               "    return keras.Model(inputs, keras.layers.Dense(10, name=\"logits\")(hidden))",
                     "r": "normalized_mlp <- function() {\n"
                          "  inputs <- keras_input(shape = 784, name = \"digits\")\n"
                          "  logits <- inputs |>\n"
                          "    layer_dense(units = 256, activation = \"relu\", name = \"dense_1\") |>\n"
                          "    layer_batch_normalization(name = \"batch_norm\") |>\n"
                          "    layer_dense(units = 256, activation = \"relu\", name = \"dense_2\") |>\n"
                          "    layer_dense(units = 10, name = \"logits\")\n"
                          "  keras_model(inputs, logits)\n"
                          "}"},
                    "each replica normalises with its own batch"),
        WrongAnswer({"python": "def normalized_mlp():\n"
                               "    inputs = keras.Input(shape=(784,), name=\"digits\")\n"
                               "    hidden = keras.layers.Dense(256, activation=\"relu\", name=\"dense_1\")(inputs)\n"
                               "    hidden = keras.layers.Dense(256, activation=\"relu\", name=\"dense_2\")(hidden)\n"
                               "    return keras.Model(inputs, keras.layers.Dense(10, name=\"logits\")(hidden))",
                     "r": "normalized_mlp <- function() {\n"
                          "  inputs <- keras_input(shape = 784, name = \"digits\")\n"
                          "  logits <- inputs |>\n"
                          "    layer_dense(units = 256, activation = \"relu\", name = \"dense_1\") |>\n"
                          "    layer_dense(units = 256, activation = \"relu\", name = \"dense_2\") |>\n"
                          "    layer_dense(units = 10, name = \"logits\")\n"
                          "  keras_model(inputs, logits)\n"
                          "}"},
                    "has no BatchNormalization layer"),
    ),
    context=CONTEXT,
    needs=("keras3",),
)


CASES_Q2 = ((1e-3, 2, 8, 40), (5e-4, 4, 5, 30))  # (base_rate, k, warmup_steps, total_steps)


def _check_warmup_schedule(answers, language):
    import keras

    function = answers["warmup_schedule"]
    for base, k, warmup, total in CASES_Q2:
        call = f"warmup_schedule({base:g}, {k}, {warmup}, {total})"
        schedule = call_answer(function, "warmup_schedule", base, k, warmup, total)
        if not isinstance(schedule, keras.optimizers.schedules.LearningRateSchedule):
            kind = language.pick("keras.optimizers.schedules.CosineDecay", "learning_rate_schedule_cosine_decay()")
            got = type(schedule).__name__
            got = language.pick(got, {"float": "number", "int": "integer", "str": "string"}.get(got, got))
            raise Incorrect(f"{call} returned a {got}, not a Keras learning-rate schedule: "
                            f"return one, such as {kind}.")
        optimizer = keras.optimizers.Adam(learning_rate=schedule)
        for step in sorted({0, 1, warmup // 2, warmup, warmup + 1, 2 * warmup, total - 1, total}):
            optimizer.iterations.assign(step)
            got = float(np.asarray(optimizer.learning_rate))
            expected = base * (1 + (k - 1) * min(step / warmup, 1.0))
            if abs(got - expected) <= 1e-6 * expected:
                continue
            rates = f"at step {step} the optimizer's rate is {got:.5g}, not {expected:.5g}"
            if step == 0:
                raise Incorrect(f"with {call}, {rates}: start the warm-up at base_rate.")
            if step > warmup and got < expected:
                alpha = language.pick("alpha=1.0", "alpha = 1")
                decay = language.pick("CosineDecay", "learning_rate_schedule_cosine_decay()")
                raise Incorrect(f"with {call}, {rates}: hold k x base_rate after the warm-up ({alpha}: "
                                f"{decay} then does not decay).")
            raise Incorrect(f"with {call}, {rates}: ramp linearly from base_rate to k x base_rate over "
                            "warmup_steps steps.")
    return ("the optimizer's rate ramps linearly from base_rate to k x base_rate over the warm-up, then "
            "holds it, at every step checked.")


q2 = Exercise(
    "03", "q2", "A warm-up schedule",
    answers=("warmup_schedule",),
    check_answers=_check_warmup_schedule,
    hints=("The lesson's CosineDecay does it: it starts at initial_learning_rate, ramps to warmup_target "
           "over warmup_steps, then decays towards alpha x warmup_target; alpha = 1 means no decay.",
           {"python": "keras.optimizers.schedules.CosineDecay(initial_learning_rate=base_rate, "
                      "warmup_target=k * base_rate, warmup_steps=warmup_steps, decay_steps=total_steps, "
                      "alpha=1.0)",
            "r": "learning_rate_schedule_cosine_decay(initial_learning_rate = base_rate, warmup_target = k * "
                 "base_rate, warmup_steps = warmup_steps, decay_steps = total_steps, alpha = 1)"}),
    solutions={
        "python": "def warmup_schedule(base_rate, k, warmup_steps, total_steps):\n"
                  "    return keras.optimizers.schedules.CosineDecay(\n"
                  "        initial_learning_rate=base_rate, warmup_target=k * base_rate,\n"
                  "        warmup_steps=warmup_steps, decay_steps=total_steps, alpha=1.0)",
        "r": "warmup_schedule <- function(base_rate, k, warmup_steps, total_steps) {\n"
             "  learning_rate_schedule_cosine_decay(\n"
             "    initial_learning_rate = base_rate, warmup_target = k * base_rate,\n"
             "    warmup_steps = warmup_steps, decay_steps = total_steps, alpha = 1)\n"
             "}",
    },
    starters={"python": "warmup_schedule = None  # a function of (base_rate, k, warmup_steps, total_steps)",
             "r": "warmup_schedule <- NULL  # a function of (base_rate, k, warmup_steps, total_steps)"},
    wrong=(
        WrongAnswer({"python": "def warmup_schedule(base_rate, k, warmup_steps, total_steps):\n"
                               "    return keras.optimizers.schedules.CosineDecay(\n"
                               "        initial_learning_rate=base_rate, warmup_target=k * base_rate,\n"
                               "        warmup_steps=warmup_steps, decay_steps=total_steps)",
                     "r": "warmup_schedule <- function(base_rate, k, warmup_steps, total_steps) {\n"
                          "  learning_rate_schedule_cosine_decay(\n"
                          "    initial_learning_rate = base_rate, warmup_target = k * base_rate,\n"
                          "    warmup_steps = warmup_steps, decay_steps = total_steps)\n"
                          "}"},
                    "hold k x base_rate after the warm-up"),
        WrongAnswer({"python": "def warmup_schedule(base_rate, k, warmup_steps, total_steps):\n"
                               "    return keras.optimizers.schedules.CosineDecay(\n"
                               "        initial_learning_rate=0.0, warmup_target=k * base_rate,\n"
                               "        warmup_steps=warmup_steps, decay_steps=total_steps, alpha=1.0)",
                     "r": "warmup_schedule <- function(base_rate, k, warmup_steps, total_steps) {\n"
                          "  learning_rate_schedule_cosine_decay(\n"
                          "    initial_learning_rate = 0, warmup_target = k * base_rate,\n"
                          "    warmup_steps = warmup_steps, decay_steps = total_steps, alpha = 1)\n"
                          "}"},
                    "start the warm-up at base_rate"),
        WrongAnswer({"python": "def warmup_schedule(base_rate, k, warmup_steps, total_steps):\n"
                               "    return k * base_rate",
                     "r": "warmup_schedule <- function(base_rate, k, warmup_steps, total_steps) k * base_rate"},
                    "not a Keras learning-rate schedule"),
    ),
    context=CONTEXT,
    needs=("keras3",),
)


def _check_accumulating_optimizer(answers, language):
    with quiet_tensorflow():
        return _accumulating_optimizer_verdict(answers, language)


def _accumulating_optimizer_verdict(answers, language):
    import keras

    function = answers["accumulating_optimizer"]
    images, labels = digits_of_every_class(512)
    large, small, rate = 256, 64, 1e-3
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    reference = mlp(seed=1)
    reference.compile(optimizer=keras.optimizers.Adam(rate), loss=loss)
    reference.fit(images, labels, batch_size=large, epochs=1, shuffle=False, verbose=0)
    optimizer = call_answer(function, "accumulating_optimizer", large, small, rate)
    if not isinstance(optimizer, keras.optimizers.Optimizer):
        raise Incorrect(f"accumulating_optimizer({large}, {small}, {rate:g}) returned "
                        f"{type(optimizer).__name__}, not a Keras optimizer: return one.")
    steps = optimizer.gradient_accumulation_steps
    if steps is not None and not isinstance(steps, int):
        raise Incorrect(f"gradient_accumulation_steps is {language.value(steps)}, not a whole number: divide with "
                        f"{language.pick('//', '%/%')} (large_batch {language.pick('//', '%/%')} batch_size).")
    model = mlp(seed=1)
    model.compile(optimizer=optimizer, loss=loss)
    try:
        model.fit(images, labels, batch_size=small, epochs=1, shuffle=False, verbose=0)
    except Exception as error:  # noqa: BLE001 (training with the student's optimizer fails: that is the verdict)
        raise Incorrect(f"training with your optimizer raised {type(error).__name__}: {error_line(error)[:200]}") from None
    updates, wanted = int(model.optimizer.iterations.numpy()), int(reference.optimizer.iterations.numpy())
    steps = len(labels) // small
    if updates != wanted:
        raise Incorrect(f"your optimizer made {updates} updates in {steps} steps of {small}, but batch {large} "
                        f"makes {wanted}: accumulate large_batch {language.int_div} batch_size steps per update.")
    gap = largest_gap(model.get_weights(), reference.get_weights())
    if gap > 1e-5:
        raise Incorrect(f"your optimizer made {updates} updates, as batch {large} does, but the weights end up to "
                        f"{gap:.2g} away from batch {large}'s: use plain Adam with learning_rate as it is, since "
                        "the update already averages the accumulated gradients.")
    return (f"{steps} steps of {small} with your optimizer make the same {wanted} updates and end with the same "
            f"weights as batch {large}, up to float rounding.")


q3 = Exercise(
    "03", "q3", "Accumulate to a large batch",
    answers=("accumulating_optimizer",),
    check_answers=_check_accumulating_optimizer,
    hints=("A Keras 3 optimizer can add up the gradients of several steps and update once with their "
           "average; how many steps of batch_size make one batch of large_batch?",
           {"python": "keras.optimizers.Adam(learning_rate, gradient_accumulation_steps=large_batch // "
                      "batch_size), with the learning rate unchanged.",
            "r": "optimizer_adam(learning_rate = learning_rate, gradient_accumulation_steps = large_batch "
                 "%/% batch_size), with the learning rate unchanged."}),
    solutions={
        "python": "def accumulating_optimizer(large_batch, batch_size, learning_rate):\n"
                  "    return keras.optimizers.Adam(learning_rate,\n"
                  "                                 gradient_accumulation_steps=large_batch // batch_size)",
        "r": "accumulating_optimizer <- function(large_batch, batch_size, learning_rate) {\n"
             "  optimizer_adam(learning_rate = learning_rate,\n"
             "                 gradient_accumulation_steps = large_batch %/% batch_size)\n"
             "}",
    },
    starters={"python": "accumulating_optimizer = None  # a function of (large_batch, batch_size, learning_rate)",
             "r": "accumulating_optimizer <- NULL  # a function of (large_batch, batch_size, learning_rate)"},
    wrong=(
        WrongAnswer({"python": "def accumulating_optimizer(large_batch, batch_size, learning_rate):\n"
                               "    return keras.optimizers.Adam(learning_rate, gradient_accumulation_steps=2)",
                     "r": "accumulating_optimizer <- function(large_batch, batch_size, learning_rate) {\n"
                          "  optimizer_adam(learning_rate = learning_rate, gradient_accumulation_steps = 2)\n"
                          "}"},
                    "but batch 256 makes 2"),
        WrongAnswer({"python": "def accumulating_optimizer(large_batch, batch_size, learning_rate):\n"
                               "    steps = large_batch // batch_size\n"
                               "    return keras.optimizers.Adam(learning_rate * steps,\n"
                               "                                 gradient_accumulation_steps=steps)",
                     "r": "accumulating_optimizer <- function(large_batch, batch_size, learning_rate) {\n"
                          "  steps <- large_batch %/% batch_size\n"
                          "  optimizer_adam(learning_rate = learning_rate * steps,\n"
                          "                 gradient_accumulation_steps = steps)\n"
                          "}"},
                    "use plain Adam with learning_rate as it is"),
    ),
    context=CONTEXT,
    needs=("keras3",),
)
