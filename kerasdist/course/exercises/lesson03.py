"""Lesson 03's checked exercises: synchronized BatchNormalization, a warm-up schedule, gradient accumulation.

Example:
    >>> print(q2.verdict({"warmup_schedule": lambda base, k, warmup, total: base}))  # doctest: +SKIP
    Incorrect: warmup_schedule(0.001, 2, 8, 40) returned a float, 0.001, not a Keras learning-rate ...
"""

import contextlib
import warnings

import numpy as np

from kerasdist.course.exercises.core import Exercise, Incorrect, Language, WrongAnswer
from kerasdist.course.exercises.fixtures import (
    call_answer,
    described,
    digits_of_every_class,
    largest_gap,
    mlp,
    quiet_tensorflow,
    real_number,
    two_replicas,
    whole_number,
)

CONTEXT = {
    "python": "import keras\nimport tensorflow as tf",
    "r": 'library(keras3)\nlibrary(tensorflow, exclude = c("shape", "set_random_seed"))',
}


def _check_normalized_mlp(answers, language):
    with quiet_tensorflow(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Keras warns about a model built by a call
        return _normalized_mlp_verdict(answers, language)


MLP_KERNELS = ((784, 256), (256, 256), (256, 10))  # dense_1, dense_2, logits
TOLERANCE = 1e-4  # float rounding, plus 1e-3 of the outputs' size


def _not_a_function(language):
    return Incorrect(f"normalized_mlp is a Keras model, not a function: put the code that builds it in "
                     f"{language.pick('def normalized_mlp():', 'normalized_mlp <- function() {...}')} and "
                     "return the model, so that the check can build it in a strategy's scope.")


def _model_built(function, language, strategy=None):
    """Call normalized_mlp() (in ``strategy``'s scope, if given) and build its model on 784 inputs."""
    import keras

    with strategy.scope() if strategy else contextlib.nullcontext():
        keras.utils.set_random_seed(0)
        try:
            model = call_answer(function, "normalized_mlp")
        except Incorrect as error:  # from R, a model comes as a function, which Keras calls without inputs
            if "argument: 'inputs'" in str(error) and language.name == "r":
                raise _not_a_function(language) from None
            raise
        if not isinstance(model, keras.Model):
            raise Incorrect(f"normalized_mlp() returned {described(model, language)}: return the Keras "
                            "model.")
        # A Sequential without an Input (or a subclassed model) makes its weights at its first call.
        call_answer(lambda: model(np.zeros((2, 784), "float32"), training=False),
                    "your model, called on 2 digits of 784 pixels,")
    return model


def _outputs(model, images, training):
    """The model's outputs for ``images`` as an array of shape (len(images), 10), or Incorrect."""
    got = call_answer(lambda: model(images, training=training), "your model")
    try:
        got = np.asarray(got, dtype="float64")
    except (TypeError, ValueError):
        got = None
    if got is None or got.shape != (len(images), 10):
        shape = "no array" if got is None else f"outputs of shape {got.shape}"
        raise Incorrect(f"the model gives {shape} for {len(images)} digits, not ({len(images)}, 10): keep "
                        "the MLP's 784 inputs and its 10 logits as its only output.")
    return got


def _layers_of(model, language):
    """The model's Dense layers (dense_1, dense_2, logits) and its BatchNormalization, or Incorrect."""
    import keras

    layers = [layer for layer in model._flatten_layers(include_self=False) if layer.built]  # those it calls
    random = [type(layer).__name__ for layer in layers if "Dropout" in type(layer).__name__
              or "Noise" in type(layer).__name__]
    if random:
        raise Incorrect(f"the model has a {random[0]} layer: leave it out (the task's MLP has none); a "
                        "random layer draws other masks on 2 replicas than on one device.")
    norms = [layer for layer in layers if isinstance(layer, keras.layers.BatchNormalization)]
    if not norms:
        raise Incorrect(f"the model has no BatchNormalization layer: put one, {_synchronized(language)}, "
                        "after dense_1.")
    if len(norms) > 1:
        raise Incorrect(f"the model has {len(norms)} BatchNormalization layers: the task asks for one, "
                        "after dense_1.")
    dense = {tuple(layer.kernel.shape): layer for layer in layers if isinstance(layer, keras.layers.Dense)}
    shapes = sorted(tuple(layer.kernel.shape) for layer in layers if isinstance(layer, keras.layers.Dense))
    if shapes != sorted(MLP_KERNELS):
        raise Incorrect(f"the model's Dense layers have kernels of shapes {shapes or 'none'}, not "
                        f"{list(MLP_KERNELS)}: keep the lesson's MLP (784 inputs, dense_1 and dense_2 of 256 "
                        "units, 10 logits) and add only the BatchNormalization.")
    size = int(norms[0].moving_mean.shape[-1])
    where = {784: "the 784 inputs, before dense_1", 10: "the 10 logits, after the last layer"}.get(size)
    if where:
        raise Incorrect(f"your BatchNormalization normalises {where}: put it after dense_1, before dense_2, "
                        "so that it normalises dense_1's 256 outputs.")
    # A training flag fixed where the layer is called (a functional model's own flag overrides it in Keras 3;
    # a subclassed model's call does not).
    fixed = [getattr(getattr(node, "arguments", None), "kwargs", {}).get("training")
             for node in getattr(norms[0], "_inbound_nodes", ())]
    fixed = [flag for flag in fixed if isinstance(flag, (bool, np.bool_))]
    if fixed:
        mode = "inference mode, with its moving statistics"
        mode = "training mode, even in inference" if fixed[0] else mode
        flag = language.value(bool(fixed[0]))
        raise Incorrect(f"your BatchNormalization is called with training = {flag}, which asks to hold it in "
                        f"{mode}: leave the flag out, so that fit() and predict() choose the mode.")
    return [dense[shape] for shape in MLP_KERNELS], norms[0]


def _reference(dense, norm):
    """The lesson's MLP with BatchNormalization after dense_1, on one device, with the answer's weights."""
    import keras

    inputs = keras.Input(shape=(784,))
    hidden = keras.layers.Dense(256, activation="relu")(inputs)
    hidden = keras.layers.BatchNormalization(epsilon=norm.epsilon, center=norm.center,
                                             scale=norm.scale)(hidden)
    hidden = keras.layers.Dense(256, activation="relu")(hidden)
    model = keras.Model(inputs, keras.layers.Dense(10)(hidden))
    mine = [layer for layer in model.layers if isinstance(layer, keras.layers.Dense)]
    for layer, theirs in zip(mine, dense):
        layer.kernel.assign(np.asarray(theirs.kernel))
        layer.bias.assign(np.zeros(layer.bias.shape) if theirs.bias is None else np.asarray(theirs.bias))
    reference_norm = model.layers[2]
    for name in ("gamma", "beta", "moving_mean", "moving_variance"):
        if getattr(reference_norm, name, None) is not None and getattr(norm, name, None) is not None:
            getattr(reference_norm, name).assign(np.asarray(getattr(norm, name)))
    return model


def _synchronized(language):
    return language.pick("BatchNormalization(synchronized=True)",
                         "layer_batch_normalization(synchronized = TRUE)")


def _normalized_mlp_verdict(answers, language):
    import keras
    import tensorflow as tf

    function = answers["normalized_mlp"]
    if isinstance(function, keras.layers.Layer):
        raise _not_a_function(language)
    strategy = two_replicas()
    images, _ = digits_of_every_class(64)
    single = _model_built(function, language)
    dense, norm = _layers_of(single, language)
    # Statistics and scales far from their initial values, so that each mode's normalisation shows.
    rng = np.random.default_rng(3)
    for name, values in (("gamma", rng.uniform(0.5, 1.5, 256)), ("beta", rng.normal(0.0, 0.2, 256)),
                         ("moving_mean", rng.normal(0.0, 0.5, 256)),
                         ("moving_variance", rng.uniform(0.5, 2.0, 256))):
        if getattr(norm, name, None) is not None:
            getattr(norm, name).assign(values.astype("float32"))
    weights = single.get_weights()
    reference = _reference(dense, norm)
    inference, expected_inference = _outputs(single, images, False), _outputs(reference, images, False)
    training, expected = _outputs(single, images, True), _outputs(reference, images, True)
    tolerance = TOLERANCE + 1e-3 * float(np.max(np.abs(expected)))
    if largest_gap([training], [expected]) > tolerance:
        if largest_gap([training], [inference]) <= tolerance:
            how = language.pick("training=False or trainable=False", "training = FALSE or trainable = FALSE")
            raise Incorrect(f"in training your BatchNormalization normalises with its moving statistics, "
                            f"not the batch's: it is held in inference mode ({how}); leave both out, so that "
                            "fit() trains it with the batch's statistics.")
        raise Incorrect("with the same weights, on one device, your model's training outputs differ from "
                        "those of the lesson's MLP with BatchNormalization between dense_1 and dense_2: put it "
                        "right after dense_1 (after its ReLU), keep ReLU on dense_1 and dense_2 and no "
                        "activation on the logits.")
    if largest_gap([inference], [expected_inference]) > \
            TOLERANCE + 1e-3 * float(np.max(np.abs(expected_inference))):
        forced = language.pick("training=True", "training = TRUE")
        raise Incorrect(f"in inference ({language.pick('training=False', 'training = FALSE')}) your model's "
                        "outputs differ from the lesson's MLP with BatchNormalization after dense_1: do not "
                        f"force the layer into training mode ({forced}).")
    replicated = _model_built(function, language, strategy)
    if replicated is single:
        raise Incorrect("normalized_mlp() returned the same model twice: build a new model at each call, so "
                        "that it is built in the scope the function is called in.")
    call_answer(lambda: replicated.set_weights(weights), "the check, copying one model's weights to another,")
    batches = strategy.experimental_distribute_dataset(tf.data.Dataset.from_tensor_slices(images).batch(64))
    step = tf.function(lambda x: strategy.run(lambda rows: replicated(rows, training=True), args=(x,)))
    outputs = call_answer(lambda: step(next(iter(batches))), "your model, on 2 replicas,")
    try:
        per_replica = np.concatenate([np.asarray(t, dtype="float64")
                                      for t in strategy.experimental_local_results(outputs)])
    except (TypeError, ValueError):
        per_replica = None
    if per_replica is None or per_replica.shape != expected.shape:
        raise Incorrect("built in a 2-replica strategy's scope, your model does not give one array of 10 "
                        "logits per digit: build the same model whatever the scope.")
    gap = largest_gap([per_replica], [expected])
    if gap > tolerance:
        advice = f"each replica normalises with its own batch; use {_synchronized(language)}, and no dropout"
        if getattr(norm, "synchronized", False):
            advice = "build every layer inside the function, in the scope it is called in"
        raise Incorrect(f"in training, 2 replicas of 32 digits give other outputs than one device with all "
                        f"64 (up to {gap:.2g} apart): {advice}.")
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
        WrongAnswer({"python": "def normalized_mlp():\n"
                               "    inputs = keras.Input(shape=(784,), name=\"digits\")\n"
                               "    hidden = keras.layers.Dense(256, activation=\"relu\", name=\"dense_1\")(inputs)\n"
                               "    hidden = keras.layers.BatchNormalization(synchronized=True)(hidden, training=False)\n"
                               "    hidden = keras.layers.Dense(256, activation=\"relu\", name=\"dense_2\")(hidden)\n"
                               "    return keras.Model(inputs, keras.layers.Dense(10, name=\"logits\")(hidden))",
                     "r": "normalized_mlp <- function() {\n"
                          "  inputs <- keras_input(shape = 784, name = \"digits\")\n"
                          "  hidden <- inputs |> layer_dense(units = 256, activation = \"relu\", name = \"dense_1\")\n"
                          "  norm <- layer_batch_normalization(synchronized = TRUE)\n"
                          "  logits <- norm(hidden, training = FALSE) |>\n"
                          "    layer_dense(units = 256, activation = \"relu\", name = \"dense_2\") |>\n"
                          "    layer_dense(units = 10, name = \"logits\")\n"
                          "  keras_model(inputs, logits)\n"
                          "}"},
                    "asks to hold it in inference mode"),
        WrongAnswer({"python": "def normalized_mlp():\n"
                               "    return keras.Sequential([\n"
                               "        keras.Input(shape=(784,)),\n"
                               "        keras.layers.Dense(256, activation=\"relu\", name=\"dense_1\"),\n"
                               "        keras.layers.BatchNormalization(synchronized=True, trainable=False),\n"
                               "        keras.layers.Dense(256, activation=\"relu\", name=\"dense_2\"),\n"
                               "        keras.layers.Dense(10, name=\"logits\")])",
                     "r": "normalized_mlp <- function() {\n"
                          "  keras_model_sequential(input_shape = 784) |>\n"
                          "    layer_dense(units = 256, activation = \"relu\", name = \"dense_1\") |>\n"
                          "    layer_batch_normalization(synchronized = TRUE, trainable = FALSE) |>\n"
                          "    layer_dense(units = 256, activation = \"relu\", name = \"dense_2\") |>\n"
                          "    layer_dense(units = 10, name = \"logits\")\n"
                          "}"},
                    "held in inference mode"),
        WrongAnswer({"python": "def normalized_mlp():\n"
                               "    inputs = keras.Input(shape=(784,), name=\"digits\")\n"
                               "    hidden = keras.layers.Dense(256, activation=\"relu\", name=\"dense_1\")(inputs)\n"
                               "    hidden = keras.layers.Dense(256, activation=\"relu\", name=\"dense_2\")(hidden)\n"
                               "    logits = keras.layers.Dense(10, name=\"logits\")(hidden)\n"
                               "    return keras.Model(inputs, keras.layers.BatchNormalization(synchronized=True)(logits))",
                     "r": "normalized_mlp <- function() {\n"
                          "  inputs <- keras_input(shape = 784, name = \"digits\")\n"
                          "  logits <- inputs |>\n"
                          "    layer_dense(units = 256, activation = \"relu\", name = \"dense_1\") |>\n"
                          "    layer_dense(units = 256, activation = \"relu\", name = \"dense_2\") |>\n"
                          "    layer_dense(units = 10, name = \"logits\") |>\n"
                          "    layer_batch_normalization(synchronized = TRUE)\n"
                          "  keras_model(inputs, logits)\n"
                          "}"},
                    "normalises the 10 logits"),
        WrongAnswer({"python": "def normalized_mlp():\n"
                               "    inputs = keras.Input(shape=(784,), name=\"digits\")\n"
                               "    hidden = keras.layers.Dense(256, name=\"dense_1\")(inputs)\n"
                               "    hidden = keras.layers.BatchNormalization(synchronized=True)(hidden)\n"
                               "    hidden = keras.layers.Activation(\"relu\")(hidden)\n"
                               "    hidden = keras.layers.Dense(256, activation=\"relu\", name=\"dense_2\")(hidden)\n"
                               "    return keras.Model(inputs, keras.layers.Dense(10, name=\"logits\")(hidden))",
                     "r": "normalized_mlp <- function() {\n"
                          "  inputs <- keras_input(shape = 784, name = \"digits\")\n"
                          "  logits <- inputs |>\n"
                          "    layer_dense(units = 256, name = \"dense_1\") |>\n"
                          "    layer_batch_normalization(synchronized = TRUE) |>\n"
                          "    layer_activation(\"relu\") |>\n"
                          "    layer_dense(units = 256, activation = \"relu\", name = \"dense_2\") |>\n"
                          "    layer_dense(units = 10, name = \"logits\")\n"
                          "  keras_model(inputs, logits)\n"
                          "}"},
                    "after its ReLU"),
        WrongAnswer({"python": "inputs = keras.Input(shape=(784,), name=\"digits\")\n"
                               "hidden = keras.layers.Dense(256, activation=\"relu\", name=\"dense_1\")(inputs)\n"
                               "hidden = keras.layers.BatchNormalization(synchronized=True)(hidden)\n"
                               "hidden = keras.layers.Dense(256, activation=\"relu\", name=\"dense_2\")(hidden)\n"
                               "normalized_mlp = keras.Model(inputs, keras.layers.Dense(10, name=\"logits\")(hidden))",
                     "r": "inputs <- keras_input(shape = 784, name = \"digits\")\n"
                          "logits <- inputs |>\n"
                          "  layer_dense(units = 256, activation = \"relu\", name = \"dense_1\") |>\n"
                          "  layer_batch_normalization(synchronized = TRUE) |>\n"
                          "  layer_dense(units = 256, activation = \"relu\", name = \"dense_2\") |>\n"
                          "  layer_dense(units = 10, name = \"logits\")\n"
                          "normalized_mlp <- keras_model(inputs, logits)"},
                    "is a Keras model, not a function"),
        WrongAnswer({"python": "def normalized_mlp():\n"
                               "    inputs = keras.Input(shape=(784,), name=\"digits\")\n"
                               "    hidden = keras.layers.Dense(256, activation=\"relu\", name=\"dense_1\")(inputs)\n"
                               "    hidden = keras.layers.BatchNormalization(synchronized=True)(hidden)\n"
                               "    hidden = keras.layers.Dropout(0.2)(hidden)\n"
                               "    hidden = keras.layers.Dense(256, activation=\"relu\", name=\"dense_2\")(hidden)\n"
                               "    return keras.Model(inputs, keras.layers.Dense(10, name=\"logits\")(hidden))",
                     "r": "normalized_mlp <- function() {\n"
                          "  inputs <- keras_input(shape = 784, name = \"digits\")\n"
                          "  logits <- inputs |>\n"
                          "    layer_dense(units = 256, activation = \"relu\", name = \"dense_1\") |>\n"
                          "    layer_batch_normalization(synchronized = TRUE) |>\n"
                          "    layer_dropout(rate = 0.2) |>\n"
                          "    layer_dense(units = 256, activation = \"relu\", name = \"dense_2\") |>\n"
                          "    layer_dense(units = 10, name = \"logits\")\n"
                          "  keras_model(inputs, logits)\n"
                          "}"},
                    "has a Dropout layer"),
    ),
    right=(
        {"python": "def normalized_mlp():  # a Sequential without an Input: Keras builds it at its first call\n"
                   "    return keras.Sequential([\n"
                   "        keras.layers.Dense(256, activation=\"relu\", name=\"dense_1\"),\n"
                   "        keras.layers.BatchNormalization(synchronized=True),\n"
                   "        keras.layers.Dense(256, activation=\"relu\", name=\"dense_2\"),\n"
                   "        keras.layers.Dense(10, name=\"logits\")])",
         "r": "normalized_mlp <- function() {  # no input shape: Keras builds it at its first call\n"
              "  keras_model_sequential() |>\n"
              "    layer_dense(256, activation = \"relu\", name = \"dense_1\") |>\n"
              "    layer_batch_normalization(synchronized = TRUE) |>\n"
              "    layer_dense(256, activation = \"relu\", name = \"dense_2\") |>\n"
              "    layer_dense(10, name = \"logits\")\n"
              "}"},
        {"python": "class NormalizedMLP(keras.Model):\n"
                   "    def __init__(self):\n"
                   "        super().__init__()\n"
                   "        self.dense_1 = keras.layers.Dense(256, activation=keras.activations.relu)\n"
                   "        self.norm = keras.layers.BatchNormalization(synchronized=True)\n"
                   "        self.dense_2 = keras.layers.Dense(256, activation=keras.activations.relu)\n"
                   "        self.logits = keras.layers.Dense(10)\n"
                   "\n"
                   "    def call(self, digits, training=None):\n"
                   "        hidden = self.norm(self.dense_1(digits), training=training)\n"
                   "        return self.logits(self.dense_2(hidden))\n"
                   "\n"
                   "\n"
                   "def normalized_mlp():\n"
                   "    return NormalizedMLP()",
         "r": "normalized_mlp <- function() {  # ReLU as a layer of its own, before the normalisation\n"
              "  keras_model_sequential(input_shape = c(784)) |>\n"
              "    layer_dense(units = 256) |>\n"
              "    layer_activation_relu() |>\n"
              "    layer_batch_normalization(synchronized = TRUE) |>\n"
              "    layer_dense(units = 256, activation = \"relu\") |>\n"
              "    layer_dense(units = 10)\n"
              "}"},
        {"python": "def normalized_mlp():  # ReLU as a layer of its own, before the normalisation\n"
                   "    digits = keras.Input((784,))\n"
                   "    x = keras.layers.ReLU()(keras.layers.Dense(256)(digits))\n"
                   "    x = keras.layers.BatchNormalization(synchronized=True, epsilon=1e-3)(x)\n"
                   "    x = keras.layers.Dense(256, activation=\"relu\")(x)\n"
                   "    return keras.Model(inputs=digits, outputs=keras.layers.Dense(10)(x))"},
    ),
    context=CONTEXT,
    needs=("keras3",),
)


# (base_rate, k, warmup_steps, total_steps): the lesson's, and two others (an odd ramp, a larger k).
CASES_Q2 = ((1e-3, 2, 8, 40), (5e-4, 4, 5, 30), (3e-3, 3, 7, 20))


def _schedule_of(function, case, language):
    """Call warmup_schedule(*case) and return an Adam optimizer that runs on it, or Incorrect."""
    import keras

    call = "warmup_schedule({:g}, {}, {}, {})".format(*case)
    schedule = call_answer(function, "warmup_schedule", *case)
    if not isinstance(schedule, keras.optimizers.schedules.LearningRateSchedule):
        kind = language.pick("keras.optimizers.schedules.CosineDecay",
                             "learning_rate_schedule_cosine_decay()")
        got = described(schedule, language)
        if callable(schedule) and not isinstance(schedule, type):
            got = "a function (an optimizer calls a plain function without the step)"
        raise Incorrect(f"{call} returned {got}, not a Keras learning-rate schedule: return one, such as "
                        f"{kind}.")
    return call_answer(lambda: keras.optimizers.Adam(learning_rate=schedule),
                       "Adam(learning_rate=your schedule)")


def _rate_at(optimizer, step, call, language):
    """The optimizer's learning rate at ``step``, read as fit() reads it, or Incorrect."""
    optimizer.iterations.assign(step)
    got = call_answer(lambda: optimizer.learning_rate, f"your schedule, at step {step},")
    rate = real_number(got)
    if rate is None:
        raise Incorrect(f"with {call}, at step {step} your schedule gave {described(got, language)}, not a "
                        "learning rate: return one number per step.")
    return rate


def _check_warmup_schedule(answers, language):
    function = answers["warmup_schedule"]
    for base, k, warmup, total in CASES_Q2:
        call = f"warmup_schedule({base:g}, {k}, {warmup}, {total})"
        optimizer = _schedule_of(function, (base, k, warmup, total), language)
        for step in sorted({0, 1, warmup // 2, warmup - 1, warmup, warmup + 1, 2 * warmup, total - 1, total}):
            got = _rate_at(optimizer, step, call, language)
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
                            "warmup_steps steps (use the function's arguments, not the lesson's numbers).")
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
        WrongAnswer({"python": "def warmup_schedule(base_rate, k, warmup_steps, total_steps):\n"
                               "    return keras.optimizers.schedules.CosineDecay(\n"
                               "        1e-3, 40, alpha=1.0, warmup_target=2e-3, warmup_steps=8)",
                     "r": "warmup_schedule <- function(base_rate, k, warmup_steps, total_steps) {\n"
                          "  learning_rate_schedule_cosine_decay(1e-3, 40, alpha = 1, warmup_target = 2e-3,\n"
                          "                                      warmup_steps = 8)\n"
                          "}"},
                    "with warmup_schedule(0.0005, 4, 5, 30), at step 0"),
        WrongAnswer({"python": "def warmup_schedule(base_rate, k, warmup_steps, total_steps):\n"
                               "    return lambda step: base_rate * (1 + (k - 1) * min(step / warmup_steps, 1))",
                     "r": "warmup_schedule <- function(base_rate, k, warmup_steps, total_steps) {\n"
                          "  function(step) base_rate * (1 + (k - 1) * min(step / warmup_steps, 1))\n"
                          "}"},
                    "returned a function"),
        WrongAnswer({"python": "def warmup_schedule(base_rate, k, warmup_steps, total_steps):\n"
                               "    return keras.optimizers.schedules.CosineDecay(\n"
                               "        initial_learning_rate=base_rate, warmup_target=k * base_rate,\n"
                               "        warmup_steps=total_steps, decay_steps=total_steps, alpha=1.0)",
                     "r": "warmup_schedule <- function(base_rate, k, warmup_steps, total_steps) {\n"
                          "  learning_rate_schedule_cosine_decay(\n"
                          "    initial_learning_rate = base_rate, warmup_target = k * base_rate,\n"
                          "    warmup_steps = total_steps, decay_steps = total_steps, alpha = 1)\n"
                          "}"},
                    "ramp linearly from base_rate"),
    ),
    right=(
        {"python": "def warmup_schedule(base_rate, k, warmup_steps, total_steps):  # linear, then held at the end\n"
                   "    return keras.optimizers.schedules.PolynomialDecay(\n"
                   "        base_rate, decay_steps=warmup_steps, end_learning_rate=k * base_rate, power=1.0)",
         "r": "warmup_schedule <- function(base_rate, k, warmup_steps, total_steps) {  # linear, then held\n"
              "  learning_rate_schedule_polynomial_decay(base_rate, decay_steps = warmup_steps,\n"
              "                                          end_learning_rate = k * base_rate, power = 1)\n"
              "}"},
        {"python": "class Warmup(keras.optimizers.schedules.LearningRateSchedule):\n"
                   "    def __init__(self, base_rate, k, warmup_steps):\n"
                   "        self.base_rate, self.k, self.warmup_steps = base_rate, k, warmup_steps\n"
                   "\n"
                   "    def __call__(self, step):\n"
                   "        ramp = keras.ops.minimum(keras.ops.cast(step, \"float32\") / self.warmup_steps, 1.0)\n"
                   "        return self.base_rate * (1 + (self.k - 1) * ramp)\n"
                   "\n"
                   "\n"
                   "def warmup_schedule(base_rate, k, warmup_steps, total_steps):\n"
                   "    return Warmup(base_rate, k, warmup_steps)",
         "r": "warmup_schedule <- function(base_rate, k, warmup_steps, total_steps) {\n"
              "  keras$optimizers$schedules$CosineDecay(base_rate, decay_steps = total_steps, alpha = 1,\n"
              "                                         warmup_target = base_rate * k, warmup_steps = warmup_steps)\n"
              "}"},
        {"python": "import numpy as np\n"
                   "\n"
                   "\n"
                   "class NumpyWarmup(keras.optimizers.schedules.LearningRateSchedule):  # a NumPy number per step\n"
                   "    def __init__(self, rates):\n"
                   "        self.rates = rates\n"
                   "\n"
                   "    def __call__(self, step):\n"
                   "        return self.rates[min(int(step), len(self.rates) - 1)]\n"
                   "\n"
                   "\n"
                   "def warmup_schedule(base_rate, k, warmup_steps, total_steps):\n"
                   "    steps = np.arange(total_steps + 1)\n"
                   "    return NumpyWarmup(base_rate * (1 + (k - 1) * np.minimum(steps / warmup_steps, 1.0)))"},
    ),
    context=CONTEXT,
    needs=("keras3",),
)


def _check_accumulating_optimizer(answers, language):
    with quiet_tensorflow():
        return _accumulating_optimizer_verdict(answers, language)


# (large_batch, batch_size, learning_rate, digits): the lesson's (whose rate is also Adam's default), and
# one with another number of steps per update and another rate.
CASES_Q3 = ((256, 64, 1e-3, 512), (96, 32, 2.5e-3, 192))


def _trained(optimizer, images, labels, batch_size):
    """Train the course's MLP (seed 1) in steps of ``batch_size``: (weights, steps that changed them).

    The steps run eagerly (what fit() runs, without tracing it): ``optimizer.apply`` is where Keras
    accumulates the gradients.
    """
    import keras
    import tensorflow as tf

    model = mlp(seed=1)
    variables = model.trainable_variables
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    changed = 0
    for start in range(0, len(labels), batch_size):
        before = [np.array(variable) for variable in variables]
        with tf.GradientTape() as tape:
            rows = slice(start, start + batch_size)
            value = loss(labels[rows], model(images[rows], training=True))
        gradients = tape.gradient(value, variables)
        call_answer(lambda: optimizer.apply(gradients, variables), "training with your optimizer")
        changed += any(np.any(old != np.asarray(new)) for old, new in zip(before, variables))
    return [np.asarray(variable) for variable in variables], changed


def _accumulation_steps(optimizer, call, language):
    """Incorrect unless the optimizer accumulates a whole number of steps, as an int."""
    steps = getattr(optimizer, "gradient_accumulation_steps", None)
    divide = f"large_batch {language.int_div} batch_size"
    if steps is None:
        raise Incorrect(f"{call} returned an optimizer that updates at every step (no "
                        f"gradient_accumulation_steps): accumulate {divide} steps per update.")
    # Keras counts the steps with an int64 tensor: a float (R's double) fails in training, so only an
    # integer is right here, in R too (keras3's optimizer_adam() makes a whole double one itself).
    if whole_number(steps, Language.of("python")) is None:
        got = described(steps, language)
        if language.name == "r" and real_number(steps) is not None:
            got = f"the double {language.value(real_number(steps))}"
        raise Incorrect(f"{call} gave gradient_accumulation_steps {got}, where Keras needs an "
                        f"{language.pick('int', 'integer')}: divide with {language.int_div} ({divide})"
                        f"{language.pick('.', ' or use as.integer().')}")


# What makes Adam plain: these settings as Adam's defaults have them.
PLAIN_ADAM = ("beta_1", "beta_2", "epsilon", "amsgrad", "weight_decay", "clipnorm", "clipvalue",
              "global_clipnorm", "use_ema", "loss_scale_factor")


def _plain_adam(optimizer, call, rate, language):
    """Incorrect unless ``optimizer`` has plain Adam's settings (its learning rate and accumulation aside)."""
    import keras

    config = call_answer(optimizer.get_config, "your optimizer's get_config()")
    if not isinstance(config, dict):
        return  # the training below still compares its updates with plain Adam's
    plain = keras.optimizers.Adam(rate).get_config()
    for key in PLAIN_ADAM:
        got, default = config.get(key), plain.get(key)
        same = (not got and not default) or got == default or (
            real_number(got) is not None and real_number(default) is not None
            and np.isclose(real_number(got), real_number(default), rtol=1e-6, atol=0))
        if not same:
            shown = language.value(got) if isinstance(got, (bool, int, float, type(None))) else \
                described(got, language)
            default = "none" if default is None else language.value(default)
            raise Incorrect(f"{call} returned {type(optimizer).__name__} with {key} = {shown}, where "
                            f"plain Adam has {default}: the task compares with plain Adam; change only its "
                            "learning rate and gradient_accumulation_steps.")


def _accumulating_optimizer_verdict(answers, language):
    import keras

    function = answers["accumulating_optimizer"]
    images, labels = digits_of_every_class(512)
    first = None
    for large, small, rate, size in CASES_Q3:
        call = f"accumulating_optimizer({large}, {small}, {rate:g})"
        expected, wanted = _trained(keras.optimizers.Adam(rate), images[:size], labels[:size], large)
        optimizer = call_answer(function, "accumulating_optimizer", large, small, rate)
        if not isinstance(optimizer, keras.optimizers.Optimizer):
            raise Incorrect(f"{call} returned {described(optimizer, language)}, not a Keras optimizer: "
                            "return one.")
        if not isinstance(optimizer, keras.optimizers.Adam):
            adam = language.pick("keras.optimizers.Adam", "optimizer_adam()")
            raise Incorrect(f"{call} returned a {type(optimizer).__name__} optimizer, not Adam: the task "
                            f"compares with plain Adam; return {adam}.")
        if optimizer is first:
            raise Incorrect("accumulating_optimizer returned the same optimizer for two calls: build a new "
                            "one at each call (an optimizer belongs to the model it first trained).")
        first = optimizer if first is None else first
        _accumulation_steps(optimizer, call, language)
        _plain_adam(optimizer, call, rate, language)
        weights, updates = _trained(optimizer, images[:size], labels[:size], small)
        if updates != wanted:
            raise Incorrect(f"your optimizer made {updates} updates in {size // small} steps of {small}, but "
                            f"batch {large} makes {wanted}: accumulate large_batch {language.int_div} "
                            "batch_size steps per update.")
        gap = largest_gap(weights, expected)
        if gap > 1e-5:
            got = real_number(call_answer(lambda: optimizer.learning_rate, "your optimizer's learning rate"))
            rates = f"the weights end up to {gap:.2g} away from batch {large}'s"
            if got is not None and abs(got - rate) > 1e-6 * rate:
                rates = f"its learning rate is {got:g}, not {rate:g}"
            raise Incorrect(f"with {call}, your optimizer made {updates} updates, as batch {large} does, but "
                            f"{rates}: use plain Adam with learning_rate as it is, since the update already "
                            "averages the accumulated gradients.")
    large, small, _, size = CASES_Q3[0]
    return (f"{size // small} steps of {small} with your optimizer make the same {size // large} updates and "
            f"end with the same weights as batch {large}, up to float rounding.")


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
        WrongAnswer({"python": "def accumulating_optimizer(large_batch, batch_size, learning_rate):\n"
                               "    return keras.optimizers.Adam(1e-3, gradient_accumulation_steps=4)",
                     "r": "accumulating_optimizer <- function(large_batch, batch_size, learning_rate) {\n"
                          "  optimizer_adam(learning_rate = 1e-3, gradient_accumulation_steps = 4L)\n"
                          "}"},
                    "but batch 96 makes 2"),
        WrongAnswer({"python": "def accumulating_optimizer(large_batch, batch_size, learning_rate):\n"
                               "    return keras.optimizers.Adam(gradient_accumulation_steps=large_batch // batch_size)",
                     "r": "accumulating_optimizer <- function(large_batch, batch_size, learning_rate) {\n"
                          "  optimizer_adam(gradient_accumulation_steps = large_batch %/% batch_size)\n"
                          "}"},
                    "its learning rate is 0.001, not 0.0025"),
        WrongAnswer({"python": "def accumulating_optimizer(large_batch, batch_size, learning_rate):\n"
                               "    return keras.optimizers.Adam(learning_rate,\n"
                               "                                 gradient_accumulation_steps=large_batch / batch_size)",
                     "r": "accumulating_optimizer <- function(large_batch, batch_size, learning_rate) {\n"
                          "  keras$optimizers$Adam(learning_rate = learning_rate,\n"
                          "                        gradient_accumulation_steps = large_batch / batch_size)\n"
                          "}"},
                    "where Keras needs an int"),
        WrongAnswer({"python": "def accumulating_optimizer(large_batch, batch_size, learning_rate):\n"
                               "    return keras.optimizers.SGD(learning_rate,\n"
                               "                                gradient_accumulation_steps=large_batch // batch_size)",
                     "r": "accumulating_optimizer <- function(large_batch, batch_size, learning_rate) {\n"
                          "  optimizer_sgd(learning_rate = learning_rate,\n"
                          "                gradient_accumulation_steps = large_batch %/% batch_size)\n"
                          "}"},
                    "not Adam"),
    ),
    right=(
        {"python": "import numpy as np\n"
                   "\n"
                   "\n"
                   "def accumulating_optimizer(large_batch, batch_size, learning_rate):  # a NumPy integer\n"
                   "    steps = np.int64(large_batch) // np.int64(batch_size)\n"
                   "    return keras.optimizers.Adam(learning_rate=learning_rate, gradient_accumulation_steps=steps)",
         "r": "accumulating_optimizer <- function(large_batch, batch_size, learning_rate) {\n"
              "  optimizer_adam(learning_rate, gradient_accumulation_steps = as.integer(large_batch / batch_size))\n"
              "}"},
        {"python": "def accumulating_optimizer(large_batch, batch_size, learning_rate):\n"
                   "    config = {\"learning_rate\": learning_rate, \"gradient_accumulation_steps\": int(large_batch / batch_size)}\n"
                   "    return keras.optimizers.get({\"class_name\": \"Adam\", \"config\": config})",
         "r": "accumulating_optimizer <- function(large_batch, batch_size, learning_rate) {\n"
              "  keras$optimizers$Adam(gradient_accumulation_steps = large_batch %/% batch_size,\n"
              "                        learning_rate = learning_rate)\n"
              "}"},
        {"r": "accumulating_optimizer <- function(large_batch, batch_size, learning_rate) {\n"
              "  # a whole double: optimizer_adam() hands Keras the integer it stands for\n"
              "  optimizer_adam(learning_rate, gradient_accumulation_steps = large_batch / batch_size)\n"
              "}"},
    ),
    context=CONTEXT,
    needs=("keras3",),
)
