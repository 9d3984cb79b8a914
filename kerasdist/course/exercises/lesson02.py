"""Lesson 02's checked exercises: make or restore, which batches ModelCheckpoint saves, a resumable epoch.

Example:
    >>> print(q2.verdict({"batch_checkpoint_names": lambda s, e, f: []}))  # doctest: +SKIP
    Incorrect: batch_checkpoint_names(5, 3, 3) returned [], but ModelCheckpoint(save_freq=3) wrote ...
"""

import functools
import itertools
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from kerasdist.course.exercises.core import Exercise, Incorrect, WrongAnswer
from kerasdist.course.exercises.fixtures import (
    call_answer,
    digits_of_every_class,
    error_line,
    largest_gap,
    on_one_line,
    quiet_tensorflow,
    two_replicas,
    whole_number,
)

CONTEXT = {
    "python": "import os\nimport re\nfrom pathlib import Path\n\nimport keras\nimport tensorflow as tf",
    "r": 'library(keras3)\nlibrary(tfdatasets, exclude = "shape")\n'
         'library(tensorflow, exclude = c("shape", "set_random_seed"))',
}
# The lesson's build_model(), for the self-test (the lessons define their own).
BUILD_MODEL = {
    "python": '''
def build_model():
    inputs = keras.Input(shape=(784,), name="digits")
    hidden = keras.layers.Dense(256, activation="relu", name="dense_1")(inputs)
    hidden = keras.layers.Dense(256, activation="relu", name="dense_2")(hidden)
    model = keras.Model(inputs, keras.layers.Dense(10, name="logits")(hidden), name="mnist_mlp")
    model.compile(optimizer=keras.optimizers.Adam(learning_rate=1e-3),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=[keras.metrics.SparseCategoricalAccuracy()])
    return model
''',
    "r": '''
build_model <- function() {
  inputs <- keras_input(shape = 784, name = "digits")
  logits <- inputs |>
    layer_dense(units = 256, activation = "relu", name = "dense_1") |>
    layer_dense(units = 256, activation = "relu", name = "dense_2") |>
    layer_dense(units = 10, name = "logits")
  model <- keras_model(inputs, logits, name = "mnist_mlp")
  model |> compile(optimizer = optimizer_adam(learning_rate = 1e-3),
                   loss = loss_sparse_categorical_crossentropy(from_logits = TRUE),
                   metrics = list(metric_sparse_categorical_accuracy()))
  model
}
''',
}


def _crash_at(epoch, batch):
    """A Keras callback that raises after batch ``batch`` of epoch ``epoch`` (both 1-based)."""
    import keras

    class CrashAt(keras.callbacks.Callback):
        def on_epoch_begin(self, current, logs=None):
            self.current = current + 1

        def on_train_batch_end(self, current, logs=None):
            if (self.current, current + 1) == (epoch, batch):
                raise RuntimeError(f"simulated crash in epoch {epoch}, batch {batch}")

    return CrashAt()


def _made_or_restored(function, directory, strategy, language):
    """Call make_or_restore(directory, strategy) and return (model, epochs_done), or raise Incorrect."""
    import keras

    got = call_answer(function, "make_or_restore", str(directory), strategy)
    pair = language.pick("(model, epochs_done)", "list(model, epochs_done)")
    if language.name == "r" and isinstance(got, dict):  # a named list, list(model = ..., epochs = ...)
        got = list(got.values())
    if not isinstance(got, (list, tuple)) or len(got) != 2:
        raise Incorrect(f"make_or_restore returned {on_one_line(got, language)}: return the pair {pair}.")
    model, epochs = got
    if not isinstance(model, keras.Model):
        raise Incorrect(f"the first element make_or_restore returned is {on_one_line(model, language)}, not a "
                        f"model: return {pair}.")
    done = whole_number(epochs, language)
    if done is None:
        raise Incorrect(f"epochs_done is {on_one_line(epochs, language)}: return the number of epochs done, "
                        f"a whole number ({language.pick('an int', 'an integer')}).")
    scope = language.pick("strategy.scope()", "with(strategy$scope(), ...)")
    if model.distribute_strategy is not strategy:
        raise Incorrect(f"the model make_or_restore returned is not in the strategy it was given (its "
                        f"variables are on one device): build or load it inside {scope}.")
    if not model.compiled:
        if any(Path(directory).glob("ckpt-*.keras")):
            raise Incorrect("the model make_or_restore loaded from the latest checkpoint is not compiled: "
                            "load the whole model, optimizer included (without "
                            f"{language.pick('compile=False', 'compile = FALSE')}).")
        raise Incorrect("the model make_or_restore returned is not compiled: build it with build_model(), "
                        "which compiles it.")
    return model, done


def _fit(model, what, **arguments):
    """``model.fit(**arguments)`` on the check's digits; an error other than the simulated crash is Incorrect."""
    try:
        model.fit(shuffle=False, verbose=0, **arguments)
    except Exception as error:  # noqa: BLE001 (what the answer's model does is the verdict)
        if not str(error).startswith("simulated crash"):
            raise Incorrect(f"fit() failed on {what} ({type(error).__name__}: {error_line(error)[:160]}): "
                            "build it with build_model() or load it with load_model().") from None


def _check_make_or_restore(answers, language):
    with quiet_tensorflow():
        return _make_or_restore_verdict(answers, language)


# The second directory: checkpoints of epochs 1, 3 and 7 only (not contiguous: their count is not the
# epochs done), the one of epoch 3 written last, and a file that is no checkpoint.
OTHER_EPOCHS = (1, 3, 7)


def _make_or_restore_verdict(answers, language):
    import keras

    function = answers["make_or_restore"]
    strategy = two_replicas()
    images, labels = digits_of_every_class(128)
    directory = Path(tempfile.mkdtemp(prefix="kd_q1_"))
    other = Path(tempfile.mkdtemp(prefix="kd_q1_other_"))
    kept = Path(tempfile.mkdtemp(prefix="kd_q1_kept_"))  # the check's own copies: an answer may tidy up
    try:
        model, done = _made_or_restored(function, directory, strategy, language)
        if done != 0:
            raise Incorrect(f"in an empty directory make_or_restore returned epochs_done = {done}: a fresh "
                            "model has 0 epochs done.")
        keras.utils.set_random_seed(0)
        saver = keras.callbacks.ModelCheckpoint(str(directory / "ckpt-{epoch:02d}.keras"))
        _fit(model, "the model make_or_restore built", x=images, y=labels, batch_size=64, epochs=3,
             callbacks=[saver, _crash_at(epoch=3, batch=1)])
        try:
            saved = {epoch: keras.models.load_model(str(directory / f"ckpt-{epoch:02d}.keras"), compile=False)
                     for epoch in (1, 2)}
        except Exception as error:  # noqa: BLE001 (a model of the answer's own that Keras cannot reload)
            raise Incorrect(f"the checkpoints of the model make_or_restore built do not load back "
                            f"({type(error).__name__}): build it with build_model().") from None
        for epoch in (1, 2):
            shutil.copy(directory / f"ckpt-{epoch:02d}.keras", kept / f"ckpt-{epoch:02d}.keras")
        # Restore ckpt-01.keras from a backup: a copy aside and back makes it the newest file.
        first = directory / "ckpt-01.keras"
        shutil.copy(first, directory.parent / (directory.name + "-backup.keras"))
        time.sleep(0.02)
        shutil.copy(directory.parent / (directory.name + "-backup.keras"), first)
        os.remove(directory.parent / (directory.name + "-backup.keras"))
        restored, done = _made_or_restored(function, directory, strategy, language)
        weights = restored.get_weights()
        loaded = [epoch for epoch, model in saved.items() if largest_gap(weights, model.get_weights()) < 1e-6]
        if loaded == [1]:
            raise Incorrect("make_or_restore loaded ckpt-01.keras, the file written last (it was just copied "
                            "back from a backup), not ckpt-02.keras: pick the checkpoint with the highest "
                            "epoch number in its name.")
        if loaded != [2]:
            raise Incorrect("the restored model's weights are not those of ckpt-02.keras, the latest "
                            "checkpoint: load the whole model from it with load_model().")
        steps = int(restored.optimizer.iterations.numpy())
        if steps != 4:
            raise Incorrect(f"the restored optimizer is at step {steps}, not at the 4 steps saved in "
                            "ckpt-02.keras: load the whole model (weights and optimizer) with load_model().")
        if done != 2:
            raise Incorrect(f"make_or_restore loaded ckpt-02.keras but returned epochs_done = {done}: return "
                            "the epoch number in the checkpoint's name, 2.")
        _fit(restored, "the model make_or_restore loaded", x=images, y=labels, batch_size=64,
             initial_epoch=done, epochs=3,
             callbacks=[keras.callbacks.ModelCheckpoint(str(directory / "ckpt-{epoch:02d}.keras"))])
        if int(restored.optimizer.iterations.numpy()) != 6:
            raise Incorrect("the resumed run did not end after 3 epochs of 2 steps: return the epochs done.")
        shutil.copy(directory / "ckpt-03.keras", kept / "ckpt-03.keras")
        _check_other_directory(function, kept, other, restored.get_weights(), saved, language)
    finally:
        for folder in (directory, other, kept):
            shutil.rmtree(folder, ignore_errors=True)
    return ("make_or_restore resumed the crashed run from ckpt-02.keras, the latest by epoch number (not "
            "by file time), in the strategy's scope, and fit() trained epoch 3 only.")


def _check_other_directory(function, kept, other, third, saved, language):
    """Another directory, holding the checkpoints of epochs 1, 3 and 7 (copies of the first run's 1, 3
    and 2, from the check's own copies in ``kept``), the one of epoch 3 written last: make_or_restore
    must load ckpt-07.keras and return 7."""
    (other / "training_log.csv").write_text("epoch,loss\n")
    for source, epoch in ((1, 1), (2, 7), (3, 3)):
        time.sleep(0.02)
        shutil.copy(kept / f"ckpt-{source:02d}.keras", other / f"ckpt-{epoch:02d}.keras")
    held = ", ".join(f"ckpt-{epoch:02d}.keras" for epoch in OTHER_EPOCHS)
    model, done = _made_or_restored(function, other, two_replicas(), language)
    weights = model.get_weights()
    contents = {1: saved[1].get_weights(), 7: saved[2].get_weights(), 3: third}
    loaded = [epoch for epoch, held_weights in contents.items() if largest_gap(weights, held_weights) < 1e-6]
    if loaded != [7]:
        which = f"ckpt-{loaded[0]:02d}.keras" if len(loaded) == 1 else "none of them"
        raise Incorrect(f"in a directory holding {held} (ckpt-03.keras written last), make_or_restore "
                        f"loaded {which}, not ckpt-07.keras: pick the checkpoint with the highest epoch "
                        "number in its name.")
    if done != 7:
        count = ", not how many checkpoints there are" if done == len(OTHER_EPOCHS) else ""
        raise Incorrect(f"in a directory holding {held}, make_or_restore loaded ckpt-07.keras but returned "
                        f"epochs_done = {done}: return the epoch number in the latest checkpoint's name, "
                        f"7{count}.")


q1 = Exercise(
    "02", "q1", "Make or restore",
    answers=("make_or_restore",),
    check_answers=_check_make_or_restore,
    hints=({"python": "List the files ckpt-NN.keras in the directory; with none, build a new model (0 epochs "
                      "done); otherwise take the one whose name has the highest epoch number, not the newest "
                      "file.",
            "r": "List the files ckpt-NN.keras in the directory; with none, build a new model (0 epochs "
                 "done); otherwise take the one whose name has the highest epoch number, not the newest "
                 "file."},
           {"python": "Inside `with strategy.scope():` either `build_model()` and 0, or "
                      "`keras.models.load_model(str(latest))` and `checkpoint_epoch(latest)`, where latest "
                      "= max(Path(directory).glob('ckpt-*.keras'), key=checkpoint_epoch); return "
                      "(model, epochs).",
            "r": "Inside with(strategy$scope(), ...) either build_model() and 0L, or load_model(latest) and "
                 "checkpoint_epoch(latest), where latest is the file of list.files(directory, pattern = "
                 "'^ckpt-[0-9]+\\\\.keras$', full.names = TRUE) with which.max(checkpoint_epoch(...)); "
                 "return list(model, epochs)."}),
    solutions={
        "python": "def make_or_restore(directory, strategy):\n"
                  "    checkpoints = list(Path(directory).glob(\"ckpt-*.keras\"))\n"
                  "    with strategy.scope():\n"
                  "        if not checkpoints:\n"
                  "            return build_model(), 0\n"
                  "        latest = max(checkpoints, key=checkpoint_epoch)\n"
                  "        return keras.models.load_model(str(latest)), checkpoint_epoch(latest)",
        "r": "make_or_restore <- function(directory, strategy) {\n"
             "  checkpoints <- list.files(directory, pattern = \"^ckpt-[0-9]+\\\\.keras$\",\n"
             "                            full.names = TRUE)\n"
             "  if (length(checkpoints) == 0) {\n"
             "    with(strategy$scope(), model <- build_model())\n"
             "    return(list(model, 0L))\n"
             "  }\n"
             "  latest <- checkpoints[which.max(checkpoint_epoch(checkpoints))]\n"
             "  with(strategy$scope(), model <- load_model(latest))\n"
             "  list(model, checkpoint_epoch(latest))\n"
             "}",
    },
    starters={"python": "make_or_restore = None  # a function of (directory, strategy): (model, epochs_done)",
             "r": "make_or_restore <- NULL  # a function of (directory, strategy): list(model, epochs_done)"},
    wrong=(
        WrongAnswer({"python": "def make_or_restore(directory, strategy):\n"
                               "    checkpoints = list(Path(directory).glob(\"ckpt-*.keras\"))\n"
                               "    with strategy.scope():\n"
                               "        if not checkpoints:\n"
                               "            return build_model(), 0\n"
                               "        latest = max(checkpoints, key=os.path.getctime)\n"
                               "        model = keras.models.load_model(str(latest))\n"
                               "        return model, checkpoint_epoch(latest)",
                     "r": "make_or_restore <- function(directory, strategy) {\n"
                          "  checkpoints <- list.files(directory, pattern = \"^ckpt-[0-9]+\\\\.keras$\",\n"
                          "                            full.names = TRUE)\n"
                          "  if (length(checkpoints) == 0) {\n"
                          "    with(strategy$scope(), model <- build_model())\n"
                          "    return(list(model, 0L))\n"
                          "  }\n"
                          "  latest <- checkpoints[which.max(file.info(checkpoints)$ctime)]\n"
                          "  with(strategy$scope(), model <- load_model(latest))\n"
                          "  list(model, checkpoint_epoch(latest))\n"
                          "}"},
                    "not ckpt-02.keras: pick the checkpoint with the highest epoch number"),
        WrongAnswer({"python": "def make_or_restore(directory, strategy):\n"
                               "    checkpoints = list(Path(directory).glob(\"ckpt-*.keras\"))\n"
                               "    if not checkpoints:\n"
                               "        with strategy.scope():\n"
                               "            return build_model(), 0\n"
                               "    latest = max(checkpoints, key=checkpoint_epoch)\n"
                               "    return keras.models.load_model(str(latest)), checkpoint_epoch(latest)",
                     "r": "make_or_restore <- function(directory, strategy) {\n"
                          "  checkpoints <- list.files(directory, pattern = \"^ckpt-[0-9]+\\\\.keras$\",\n"
                          "                            full.names = TRUE)\n"
                          "  if (length(checkpoints) == 0) {\n"
                          "    with(strategy$scope(), model <- build_model())\n"
                          "    return(list(model, 0L))\n"
                          "  }\n"
                          "  latest <- checkpoints[which.max(checkpoint_epoch(checkpoints))]\n"
                          "  list(load_model(latest), checkpoint_epoch(latest))\n"
                          "}"},
                    "build or load it inside"),
        WrongAnswer({"python": "def make_or_restore(directory, strategy):\n"
                               "    checkpoints = list(Path(directory).glob(\"ckpt-*.keras\"))\n"
                               "    with strategy.scope():\n"
                               "        if not checkpoints:\n"
                               "            return build_model(), 0\n"
                               "        latest = max(checkpoints, key=checkpoint_epoch)\n"
                               "        return keras.models.load_model(str(latest)), 0",
                     "r": "make_or_restore <- function(directory, strategy) {\n"
                          "  checkpoints <- list.files(directory, pattern = \"^ckpt-[0-9]+\\\\.keras$\",\n"
                          "                            full.names = TRUE)\n"
                          "  if (length(checkpoints) == 0) {\n"
                          "    with(strategy$scope(), model <- build_model())\n"
                          "    return(list(model, 0L))\n"
                          "  }\n"
                          "  latest <- checkpoints[which.max(checkpoint_epoch(checkpoints))]\n"
                          "  with(strategy$scope(), model <- load_model(latest))\n"
                          "  list(model, 0L)\n"
                          "}"},
                    "returned epochs_done = 0"),
        # The number of checkpoints, right only while they are contiguous.
        WrongAnswer({"python": "def make_or_restore(directory, strategy):\n"
                               "    checkpoints = list(Path(directory).glob(\"ckpt-*.keras\"))\n"
                               "    with strategy.scope():\n"
                               "        if not checkpoints:\n"
                               "            return build_model(), 0\n"
                               "        latest = max(checkpoints, key=checkpoint_epoch)\n"
                               "        return keras.models.load_model(str(latest)), len(checkpoints)",
                     "r": "make_or_restore <- function(directory, strategy) {\n"
                          "  checkpoints <- list.files(directory, pattern = \"^ckpt-[0-9]+\\\\.keras$\",\n"
                          "                            full.names = TRUE)\n"
                          "  if (length(checkpoints) == 0) {\n"
                          "    with(strategy$scope(), model <- build_model())\n"
                          "    return(list(model, 0L))\n"
                          "  }\n"
                          "  latest <- checkpoints[which.max(checkpoint_epoch(checkpoints))]\n"
                          "  with(strategy$scope(), model <- load_model(latest))\n"
                          "  list(model, length(checkpoints))\n"
                          "}"},
                    "not how many checkpoints there are"),
        # The weights without the optimizer's state.
        WrongAnswer({"python": "def make_or_restore(directory, strategy):\n"
                               "    checkpoints = list(Path(directory).glob(\"ckpt-*.keras\"))\n"
                               "    with strategy.scope():\n"
                               "        if not checkpoints:\n"
                               "            return build_model(), 0\n"
                               "        latest = max(checkpoints, key=checkpoint_epoch)\n"
                               "        return keras.models.load_model(str(latest), compile=False), checkpoint_epoch(latest)",
                     "r": "make_or_restore <- function(directory, strategy) {\n"
                          "  checkpoints <- list.files(directory, pattern = \"^ckpt-[0-9]+\\\\.keras$\",\n"
                          "                            full.names = TRUE)\n"
                          "  if (length(checkpoints) == 0) {\n"
                          "    with(strategy$scope(), model <- build_model())\n"
                          "    return(list(model, 0L))\n"
                          "  }\n"
                          "  latest <- checkpoints[which.max(checkpoint_epoch(checkpoints))]\n"
                          "  with(strategy$scope(), model <- load_model(latest, compile = FALSE))\n"
                          "  list(model, checkpoint_epoch(latest))\n"
                          "}"},
                    "latest checkpoint is not compiled"),
        # The epoch as text, not a number.
        WrongAnswer({"python": "def make_or_restore(directory, strategy):\n"
                               "    checkpoints = list(Path(directory).glob(\"ckpt-*.keras\"))\n"
                               "    with strategy.scope():\n"
                               "        if not checkpoints:\n"
                               "            return build_model(), \"0\"\n"
                               "        latest = max(checkpoints, key=checkpoint_epoch)\n"
                               "        return keras.models.load_model(str(latest)), latest.stem.split(\"-\")[1]",
                     "r": "make_or_restore <- function(directory, strategy) {\n"
                          "  checkpoints <- list.files(directory, pattern = \"^ckpt-[0-9]+\\\\.keras$\",\n"
                          "                            full.names = TRUE)\n"
                          "  if (length(checkpoints) == 0) {\n"
                          "    with(strategy$scope(), model <- build_model())\n"
                          "    return(list(model, \"0\"))\n"
                          "  }\n"
                          "  latest <- checkpoints[which.max(checkpoint_epoch(checkpoints))]\n"
                          "  with(strategy$scope(), model <- load_model(latest))\n"
                          "  list(model, sub(\"^ckpt-([0-9]+)\\\\.keras$\", \"\\\\1\", basename(latest)))\n"
                          "}"},
                    "a whole number"),
        # The notebook's directory instead of the argument.
        WrongAnswer({"python": "CHECKPOINT_DIR = \"/nonexistent/lesson02/checkpoints\"\n"
                               "\n"
                               "def make_or_restore(directory, strategy):\n"
                               "    checkpoints = list(Path(CHECKPOINT_DIR).glob(\"ckpt-*.keras\"))\n"
                               "    with strategy.scope():\n"
                               "        if not checkpoints:\n"
                               "            return build_model(), 0\n"
                               "        latest = max(checkpoints, key=checkpoint_epoch)\n"
                               "        return keras.models.load_model(str(latest)), checkpoint_epoch(latest)",
                     "r": "CHECKPOINT_DIR <- \"/nonexistent/lesson02/checkpoints\"\n"
                          "make_or_restore <- function(directory, strategy) {\n"
                          "  checkpoints <- list.files(CHECKPOINT_DIR, pattern = \"^ckpt-[0-9]+\\\\.keras$\",\n"
                          "                            full.names = TRUE)\n"
                          "  if (length(checkpoints) == 0) {\n"
                          "    with(strategy$scope(), model <- build_model())\n"
                          "    return(list(model, 0L))\n"
                          "  }\n"
                          "  latest <- checkpoints[which.max(checkpoint_epoch(checkpoints))]\n"
                          "  with(strategy$scope(), model <- load_model(latest))\n"
                          "  list(model, checkpoint_epoch(latest))\n"
                          "}"},
                    "not those of ckpt-02.keras"),
    ),
    right=(
        {"python": "def make_or_restore(directory, strategy):\n"
                   "    # Keep only the newest checkpoint: an answer may tidy up the ones it will not load.\n"
                   "    found = sorted(Path(directory).glob(\"ckpt-*.keras\"), key=checkpoint_epoch)\n"
                   "    for old in found[:-1]:\n"
                   "        old.unlink()\n"
                   "    with strategy.scope():\n"
                   "        if not found:\n"
                   "            return build_model(), 0\n"
                   "        return keras.models.load_model(str(found[-1])), checkpoint_epoch(found[-1])"},
        {"python": "import numpy as np\n"
                   "\n"
                   "def make_or_restore(directory, strategy):\n"
                   "    found = (re.fullmatch(r\"ckpt-(\\d+)\\.keras\", name) for name in os.listdir(directory))\n"
                   "    epochs = [int(match.group(1)) for match in found if match]\n"
                   "    with strategy.scope():\n"
                   "        if not epochs:\n"
                   "            return [build_model(), np.int64(0)]\n"
                   "        latest = os.path.join(directory, f\"ckpt-{max(epochs):02d}.keras\")\n"
                   "        return [keras.models.load_model(latest), np.int64(max(epochs))]",
         "r": "make_or_restore <- function(directory, strategy) {\n"
              "  files <- Sys.glob(file.path(directory, \"ckpt-*.keras\"))\n"
              "  if (length(files) == 0) {\n"
              "    with(strategy$scope(), model <- build_model())\n"
              "    return(list(model, 0))\n"
              "  }\n"
              "  epochs <- as.numeric(gsub(\"[^0-9]\", \"\", basename(files)))\n"
              "  latest <- files[order(epochs, decreasing = TRUE)][1]\n"
              "  with(strategy$scope(), model <- load_model(latest))\n"
              "  list(model, max(epochs))\n"
              "}"},
        {"python": "def make_or_restore(directory, strategy):\n"
                   "    checkpoints = sorted(Path(directory).glob(\"ckpt-*.keras\"), key=checkpoint_epoch)\n"
                   "    if checkpoints:\n"
                   "        with strategy.scope():\n"
                   "            model = keras.models.load_model(checkpoints[-1])\n"
                   "        return model, tf.constant(checkpoint_epoch(checkpoints[-1]))\n"
                   "    with strategy.scope():\n"
                   "        model = build_model()\n"
                   "    return model, tf.constant(0)",
         "r": "make_or_restore <- function(directory, strategy) {\n"
              "  names <- list.files(directory)\n"
              "  epochs <- as.integer(regmatches(names, regexpr(\"(?<=^ckpt-)[0-9]+(?=\\\\.keras$)\", names, perl = TRUE)))\n"
              "  with(strategy$scope(), {\n"
              "    model <- if (length(epochs) == 0) build_model() else\n"
              "      load_model(file.path(directory, sprintf(\"ckpt-%02d.keras\", max(epochs))))\n"
              "  })\n"
              "  list(model, if (length(epochs) == 0) 0L else max(epochs))\n"
              "}"},
    ),
    context={
        "python": CONTEXT["python"] + "\n" + BUILD_MODEL["python"] + "\n\ndef checkpoint_epoch(path):\n"
                  "    return int(re.fullmatch(r\"ckpt-(\\d+)\\.keras\", path.name).group(1))\n",
        "r": CONTEXT["r"] + "\n" + BUILD_MODEL["r"] + "\ncheckpoint_epoch <- function(path) "
             "as.integer(sub(\"^ckpt-([0-9]+)\\\\.keras$\", \"\\\\1\", basename(path)))\n",
    },
    needs=("keras3",),
)


# (steps_per_epoch, epochs, save_freq): the lesson's, then runs whose last batch is no multiple of
# save_freq (ModelCheckpoint writes nothing at the end of training) and whose epochs are not the lesson's.
CASES_Q2 = ((5, 3, 3), (4, 3, 6), (4, 2, 3), (3, 4, 5))
MAX_NAMES = 1000  # more names than any case has: an endless generator of names stops here


@functools.lru_cache(maxsize=None)
def _saved_names(steps_per_epoch, epochs, save_freq):
    """The files a real ModelCheckpoint(save_freq=...) writes, on a small model and real digits (once each)."""
    import keras

    images, labels = digits_of_every_class(8 * steps_per_epoch)
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input(shape=(784,)), keras.layers.Dense(10)])
    model.compile(optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    directory = Path(tempfile.mkdtemp(prefix="kd_q2_"))
    try:
        saver = keras.callbacks.ModelCheckpoint(str(directory / "ckpt-e{epoch:02d}-b{batch:03d}.keras"),
                                                save_freq=save_freq, save_weights_only=False)
        model.fit(images, labels, batch_size=8, epochs=epochs, shuffle=False, verbose=0, callbacks=[saver])
        return tuple(sorted(path.name for path in directory.iterdir()))
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _names(got, call, language):
    """The file names an answer returned (a list, tuple, array or generator of them; one name alone)."""
    example = language.value("ckpt-e01-b003.keras")
    if isinstance(got, str):
        return [got]
    if isinstance(got, np.ndarray) and got.ndim == 1:
        got = got.tolist()
    if got is None or isinstance(got, (bytes, dict, np.ndarray)) or not hasattr(got, "__iter__") \
            or hasattr(got, "numpy"):
        vector = language.pick("a list", "a character vector")
        raise Incorrect(f"{call} returned {on_one_line(got, language)}, not {vector} of file names: return one "
                        f"name per checkpoint saved, like {example}.")
    names = call_answer(lambda: list(itertools.islice(got, MAX_NAMES)),
                        "iterating what batch_checkpoint_names returned")
    if len(names) == MAX_NAMES:
        raise Incorrect(f"{call} returned {MAX_NAMES} names or more (it never ends?), but no run of these "
                        "checks writes that many files: return one name per checkpoint saved.")
    if not all(isinstance(name, str) for name in names):
        odd = next(name for name in names if not isinstance(name, str))
        raise Incorrect(f"{call} returned {on_one_line(odd, language)} among its names, not a file name: "
                        f"return names like {example}.")
    return names


def _check_batch_checkpoint_names(answers, language):
    with quiet_tensorflow():
        return _batch_checkpoint_names_verdict(answers, language)


def _batch_checkpoint_names_verdict(answers, language):
    function = answers["batch_checkpoint_names"]
    for steps_per_epoch, epochs, save_freq in CASES_Q2:
        real = list(_saved_names(steps_per_epoch, epochs, save_freq))  # before the answer runs
        call = f"batch_checkpoint_names({steps_per_epoch}, {epochs}, {save_freq})"
        got = call_answer(function, "batch_checkpoint_names", steps_per_epoch, epochs, save_freq)
        got = sorted(_names(got, call, language))
        if got == real:
            continue
        callback = language.pick("ModelCheckpoint", "callback_model_checkpoint()")
        with_freq = language.pick(f"ModelCheckpoint(save_freq={save_freq})",
                                  f"callback_model_checkpoint(save_freq = {save_freq})")
        shown = language.value(real)
        per_epoch = [f"ckpt-e{e:02d}-b{b:03d}.keras" for e in range(1, epochs + 1)
                     for b in range(save_freq, steps_per_epoch + 1, save_freq)]
        last = f"ckpt-e{epochs:02d}-b{steps_per_epoch:03d}.keras"
        if got == per_epoch:
            raise Incorrect(f"{call} restarts the count in every epoch, but {callback} counts batches "
                            f"across epochs and wrote {shown}.")
        if last not in real and got == sorted(real + [last]):
            raise Incorrect(f"{call} adds {language.value(last)}, but {with_freq} saves only every "
                            f"{save_freq} batches, not at the end of training: it wrote {shown}.")
        raise Incorrect(f"{call} returned {language.value(got)}, but "
                        f"{with_freq} wrote {shown} over {epochs} epochs of "
                        f"{steps_per_epoch} batches.")
    writer = language.pick("ModelCheckpoint(save_freq=N)", "callback_model_checkpoint(save_freq = N)")
    return (f"your names match the files a real {writer} writes: every N batches, counted "
            "across epochs, with 1-based epoch and batch numbers.")


q2 = Exercise(
    "02", "q2", "Which batches ModelCheckpoint saves",
    answers=("batch_checkpoint_names",),
    check_answers=_check_batch_checkpoint_names,
    hints=({"python": "ModelCheckpoint(save_freq=N) saves after every N-th batch of the whole run (global "
                      "batches N, 2N, 3N, ...); the name holds the epoch of that batch and its number inside the "
                      "epoch, both from 1.",
            "r": "callback_model_checkpoint(save_freq = N) saves after every N-th batch of the whole run (global "
                 "batches N, 2N, 3N, ...); the name holds the epoch of that batch and its number inside the "
                 "epoch, both from 1."},
           {"python": "For each global batch g in range(save_freq, steps_per_epoch * epochs + 1, save_freq): "
                      "epoch (g - 1) // steps_per_epoch + 1, batch (g - 1) % steps_per_epoch + 1, formatted "
                      "f\"ckpt-e{epoch:02d}-b{batch:03d}.keras\".",
            "r": "For g in seq(save_freq, steps_per_epoch * epochs, by = save_freq): epoch "
                 "(g - 1) %/% steps_per_epoch + 1, batch (g - 1) %% steps_per_epoch + 1, formatted with "
                 "sprintf(\"ckpt-e%02d-b%03d.keras\", epoch, batch) (sprintf takes vectors)."}),
    solutions={
        "python": "def batch_checkpoint_names(steps_per_epoch, epochs, save_freq):\n"
                  "    names = []\n"
                  "    for step in range(save_freq, steps_per_epoch * epochs + 1, save_freq):\n"
                  "        epoch = (step - 1) // steps_per_epoch + 1\n"
                  "        batch = (step - 1) % steps_per_epoch + 1\n"
                  "        names.append(f\"ckpt-e{epoch:02d}-b{batch:03d}.keras\")\n"
                  "    return names",
        "r": "batch_checkpoint_names <- function(steps_per_epoch, epochs, save_freq) {\n"
             "  step <- seq(save_freq, steps_per_epoch * epochs, by = save_freq)\n"
             "  sprintf(\"ckpt-e%02d-b%03d.keras\", (step - 1) %/% steps_per_epoch + 1,\n"
             "          (step - 1) %% steps_per_epoch + 1)\n"
             "}",
    },
    starters={"python": "batch_checkpoint_names = None  # a function of (steps_per_epoch, epochs, save_freq)",
             "r": "batch_checkpoint_names <- NULL  # a function of (steps_per_epoch, epochs, save_freq)"},
    wrong=(
        WrongAnswer({"python": "def batch_checkpoint_names(steps_per_epoch, epochs, save_freq):\n"
                               "    return [f\"ckpt-e{epoch:02d}-b{batch:03d}.keras\"\n"
                               "            for epoch in range(1, epochs + 1)\n"
                               "            for batch in range(save_freq, steps_per_epoch + 1, save_freq)]",
                     "r": "batch_checkpoint_names <- function(steps_per_epoch, epochs, save_freq) {\n"
                          "  batches <- seq(save_freq, steps_per_epoch, by = save_freq)\n"
                          "  epoch <- rep(seq_len(epochs), each = length(batches))\n"
                          "  sprintf(\"ckpt-e%02d-b%03d.keras\", epoch, batches)\n"
                          "}"},
                    "counts batches across epochs"),
        WrongAnswer({"python": "def batch_checkpoint_names(steps_per_epoch, epochs, save_freq):\n"
                               "    names = []\n"
                               "    for step in range(save_freq, steps_per_epoch * epochs + 1, save_freq):\n"
                               "        epoch, batch = step // steps_per_epoch, step % steps_per_epoch\n"
                               "        names.append(f\"ckpt-e{epoch:02d}-b{batch:03d}.keras\")\n"
                               "    return names",
                     "r": "batch_checkpoint_names <- function(steps_per_epoch, epochs, save_freq) {\n"
                          "  step <- seq(save_freq, steps_per_epoch * epochs, by = save_freq)\n"
                          "  sprintf(\"ckpt-e%02d-b%03d.keras\", step %/% steps_per_epoch,\n"
                          "          step %% steps_per_epoch)\n"
                          "}"},
                    "over 3 epochs of 5 batches"),
        # A save at the end of training, which ModelCheckpoint(save_freq=N) does not make.
        WrongAnswer({"python": "def batch_checkpoint_names(steps_per_epoch, epochs, save_freq):\n"
                               "    names = []\n"
                               "    for step in range(save_freq, steps_per_epoch * epochs + 1, save_freq):\n"
                               "        epoch = (step - 1) // steps_per_epoch + 1\n"
                               "        batch = (step - 1) % steps_per_epoch + 1\n"
                               "        names.append(f\"ckpt-e{epoch:02d}-b{batch:03d}.keras\")\n"
                               "    last = f\"ckpt-e{epochs:02d}-b{steps_per_epoch:03d}.keras\"\n"
                               "    return names if last in names else names + [last]",
                     "r": "batch_checkpoint_names <- function(steps_per_epoch, epochs, save_freq) {\n"
                          "  step <- seq(save_freq, steps_per_epoch * epochs, by = save_freq)\n"
                          "  names <- sprintf(\"ckpt-e%02d-b%03d.keras\", (step - 1) %/% steps_per_epoch + 1,\n"
                          "                   (step - 1) %% steps_per_epoch + 1)\n"
                          "  unique(c(names, sprintf(\"ckpt-e%02d-b%03d.keras\", epochs, steps_per_epoch)))\n"
                          "}"},
                    "not at the end of training"),
        # The lesson's names, hard-coded.
        WrongAnswer({"python": "def batch_checkpoint_names(steps_per_epoch, epochs, save_freq):\n"
                               "    return [\"ckpt-e01-b003.keras\", \"ckpt-e02-b001.keras\", \"ckpt-e02-b004.keras\",\n"
                               "            \"ckpt-e03-b002.keras\", \"ckpt-e03-b005.keras\"]",
                     "r": "batch_checkpoint_names <- function(steps_per_epoch, epochs, save_freq) {\n"
                          "  c(\"ckpt-e01-b003.keras\", \"ckpt-e02-b001.keras\", \"ckpt-e02-b004.keras\",\n"
                          "    \"ckpt-e03-b002.keras\", \"ckpt-e03-b005.keras\")\n"
                          "}"},
                    "over 3 epochs of 4 batches"),
        # How many checkpoints, not their names.
        WrongAnswer({"python": "def batch_checkpoint_names(steps_per_epoch, epochs, save_freq):\n"
                               "    return steps_per_epoch * epochs // save_freq",
                     "r": "batch_checkpoint_names <- function(steps_per_epoch, epochs, save_freq) {\n"
                          "  (steps_per_epoch * epochs) %/% save_freq\n"
                          "}"},
                    "of file names"),
        # Names without end: a generator that never stops, in R a huge vector.
        WrongAnswer({"python": "def batch_checkpoint_names(steps_per_epoch, epochs, save_freq):\n"
                               "    step = save_freq\n"
                               "    while True:\n"
                               "        yield f\"ckpt-e{(step - 1) // steps_per_epoch + 1:02d}-b{(step - 1) % steps_per_epoch + 1:03d}.keras\"\n"
                               "        step += save_freq",
                     "r": "batch_checkpoint_names <- function(steps_per_epoch, epochs, save_freq) {\n"
                          "  step <- seq(save_freq, by = save_freq, length.out = 1e4)\n"
                          "  sprintf(\"ckpt-e%02d-b%03d.keras\", (step - 1) %/% steps_per_epoch + 1, (step - 1) %% steps_per_epoch + 1)\n"
                          "}"},
                    "names or more"),
    ),
    right=(
        {"python": "import numpy as np\n"
                   "\n"
                   "def batch_checkpoint_names(steps_per_epoch, epochs, save_freq):\n"
                   "    steps = range(save_freq - 1, steps_per_epoch * epochs, save_freq)  # 0-based global batches\n"
                   "    return np.array([f\"ckpt-e{s // steps_per_epoch + 1:02d}-b{s % steps_per_epoch + 1:03d}.keras\" for s in steps])",
         "r": "batch_checkpoint_names <- function(steps_per_epoch, epochs, save_freq) {\n"
              "  names <- character(0)\n"
              "  seen <- 0\n"
              "  for (epoch in seq_len(epochs)) {\n"
              "    for (batch in seq_len(steps_per_epoch)) {\n"
              "      seen <- seen + 1\n"
              "      if (seen %% save_freq == 0) names <- c(names, sprintf(\"ckpt-e%02d-b%03d.keras\", epoch, batch))\n"
              "    }\n"
              "  }\n"
              "  names\n"
              "}"},
        {"python": "def batch_checkpoint_names(steps_per_epoch, epochs, save_freq):\n"
                   "    names, seen = [], 0\n"
                   "    for epoch in range(1, epochs + 1):\n"
                   "        for batch in range(1, steps_per_epoch + 1):\n"
                   "            seen += 1\n"
                   "            if seen % save_freq == 0:\n"
                   "                names.append(\"ckpt-e%02d-b%03d.keras\" % (epoch, batch))\n"
                   "    return tuple(reversed(names))",
         "r": "batch_checkpoint_names <- function(steps_per_epoch, epochs, save_freq) {\n"
              "  g <- seq_len(steps_per_epoch * epochs)\n"
              "  g <- g[g %% save_freq == 0]\n"
              "  paste0(\"ckpt-e\", formatC((g - 1) %/% steps_per_epoch + 1, width = 2, flag = \"0\"),\n"
              "         \"-b\", formatC((g - 1) %% steps_per_epoch + 1, width = 3, flag = \"0\"), \".keras\")\n"
              "}"},
    ),
    context={"python": "", "r": ""},
)


def _epoch_batches(dataset, call, examples, language):
    """The batches of an answer's dataset, each as the indices of the check's examples it holds (at most
    one more element than there are examples: an endless dataset stops there)."""
    images, labels, index = examples
    if isinstance(dataset, (list, tuple)):
        kind = language.pick("tf.data.Dataset", "TensorFlow dataset")
        raise Incorrect(f"{call} returned a list of {len(dataset)} elements, not a {kind}: return the "
                        "pipeline itself.")
    if not hasattr(dataset, "element_spec") or not hasattr(dataset, "__iter__"):
        raise Incorrect(f"{call} returned {on_one_line(dataset, language)}, not a "
                        f"{language.pick('tf.data.Dataset', 'TensorFlow dataset')}: return the pipeline.")
    elements = call_answer(lambda: list(itertools.islice(dataset, len(labels) + 1)),
                           "iterating the dataset resume_dataset returned")
    if len(elements) > len(labels):
        raise Incorrect(f"the dataset {call} returned goes on past one epoch (more than {len(labels)} "
                        f"elements from {len(labels)} digits): leave out repeat(), fit() runs the epochs.")
    pair = language.pick("(images, labels)", "list(images, labels)")
    batches = []
    for element in elements:
        if not isinstance(element, (tuple, list)) or len(element) != 2:
            raise Incorrect(f"the elements of the dataset {call} returned are not pairs {pair}: slice the "
                            f"pair {pair} into the dataset.")
        try:
            rows = np.asarray(element[0], dtype="float32")
            got_labels = np.asarray(element[1]).astype("int64")
            rows = rows.reshape(len(got_labels), -1)
        except (TypeError, ValueError):
            raise Incorrect(f"the dataset {call} returned holds elements of the shapes "
                            f"{[tuple(np.shape(part)) for part in element]}, not batches of {pair}: batch "
                            "the examples with batch_size.") from None
        if got_labels.ndim != 1:
            raise Incorrect(f"the labels of the dataset {call} returned come in batches of the shape "
                            f"{got_labels.shape}: keep the integer labels as they are given.")
        chosen = [index.get(row.tobytes(), -1) for row in rows]
        if -1 in chosen:
            raise Incorrect(f"the batches of the dataset {call} returned hold images that are not the digits "
                            "it was given: pass the images through unchanged.")
        if not np.array_equal(got_labels, labels[chosen]):
            raise Incorrect(f"in the dataset {call} returned, labels no longer go with their images: shuffle "
                            f"the pairs {pair} together.")
        batches.append(chosen)
    return batches


def _check_resume_dataset(answers, language):
    function = answers["resume_dataset"]
    images, labels = digits_of_every_class(200)
    examples = (images, labels, {row.tobytes(): number for number, row in enumerate(images)})
    for batch_size, resumes in ((32, (2, 5)), (24, (3, 7))):  # the lesson's batch, and one that leaves 8

        def build(epoch, batches_done, batch_size=batch_size):
            call = f"resume_dataset(images, labels, {epoch}, {batches_done}, {batch_size})"
            dataset = call_answer(function, "resume_dataset", images, labels, epoch, batches_done, batch_size)
            return _epoch_batches(dataset, call, examples, language)

        _resumable_epochs(build, len(labels), batch_size, resumes, language)
    return ("each epoch's order depends on its epoch only, and a resumed epoch continues with the next "
            "batch of that same order.")


def _resumable_epochs(build, examples, batch_size, resumes, language):
    """Raise Incorrect unless ``build(epoch, batches_done)`` gives whole, shuffled, reproducible epochs
    of ``examples`` examples in batches of ``batch_size``, resumed after each of ``resumes`` batches."""
    whole = build(1, 0)
    sizes = [len(batch) for batch in whole]
    if sizes != [batch_size] * (examples // batch_size):
        more = " (more than one epoch: leave out repeat())" if set(sizes) == {batch_size} else ""
        raise Incorrect(f"an epoch of {examples} digits in batches of {batch_size} gave batches of sizes "
                        f"{language.value(sizes)}{more}: batch with the batch size and drop the last partial "
                        "batch.")
    order = [number for batch in whole for number in batch]
    if order == sorted(order):
        raise Incorrect("epoch 1 comes in the original order: shuffle the examples (before batching).")
    if all(batch == list(range(batch[0], batch[0] + batch_size)) for batch in whole):
        raise Incorrect("every batch is a run of neighbouring examples in their original order: you "
                        "shuffled whole batches; shuffle the examples, then batch them.")
    if whole != build(1, 0):
        raise Incorrect("building epoch 1 twice gave two different orders, so a restarted process would "
                        "see other batches: give the shuffle a seed made from the epoch.")
    if whole == build(2, 0):
        raise Incorrect("epochs 1 and 2 come in the same order: make the shuffle's seed depend on the epoch.")
    for done in resumes:
        if build(1, done) != whole[done:]:
            raise Incorrect(f"resume_dataset(images, labels, 1, {done}, {batch_size}) does not continue with "
                            f"batch {done + 1} of the whole epoch 1: skip {done} whole batches, after "
                            "batching.")


q3 = Exercise(
    "02", "q3", "An epoch that resumes at the next batch",
    answers=("resume_dataset",),
    check_answers=_check_resume_dataset,
    hints=("A new process must rebuild the same order: shuffle with a seed computed from the epoch, batch "
           "(dropping the partial batch), then skip the batches already trained.",
           {"python": "tf.data.Dataset.from_tensor_slices((images, labels)).shuffle(len(labels), seed=epoch)"
                      ".batch(batch_size, drop_remainder=True).skip(batches_done)",
            "r": "tensor_slices_dataset(list(images, labels)) |> dataset_shuffle(nrow(images), seed = "
                 "epoch) |> dataset_batch(batch_size, drop_remainder = TRUE) |> dataset_skip(batches_done)"}),
    solutions={
        "python": "def resume_dataset(images, labels, epoch, batches_done, batch_size):\n"
                  "    return (tf.data.Dataset.from_tensor_slices((images, labels))\n"
                  "            .shuffle(len(labels), seed=epoch)\n"
                  "            .batch(batch_size, drop_remainder=True)\n"
                  "            .skip(batches_done))",
        "r": "resume_dataset <- function(images, labels, epoch, batches_done, batch_size) {\n"
             "  tensor_slices_dataset(list(images, labels)) |>\n"
             "    dataset_shuffle(buffer_size = nrow(images), seed = epoch) |>\n"
             "    dataset_batch(batch_size, drop_remainder = TRUE) |>\n"
             "    dataset_skip(batches_done)\n"
             "}",
    },
    starters={"python": "resume_dataset = None  # function of (images, labels, epoch, batches_done, batch_size)",
             "r": "resume_dataset <- NULL  # function of (images, labels, epoch, batches_done, batch_size)"},
    wrong=(
        WrongAnswer({"python": "def resume_dataset(images, labels, epoch, batches_done, batch_size):\n"
                               "    return (tf.data.Dataset.from_tensor_slices((images, labels))\n"
                               "            .shuffle(len(labels))\n"
                               "            .batch(batch_size, drop_remainder=True)\n"
                               "            .skip(batches_done))",
                     "r": "resume_dataset <- function(images, labels, epoch, batches_done, batch_size) {\n"
                          "  tensor_slices_dataset(list(images, labels)) |>\n"
                          "    dataset_shuffle(buffer_size = nrow(images)) |>\n"
                          "    dataset_batch(batch_size, drop_remainder = TRUE) |>\n"
                          "    dataset_skip(batches_done)\n"
                          "}"},
                    "give the shuffle a seed made from the epoch"),
        WrongAnswer({"python": "def resume_dataset(images, labels, epoch, batches_done, batch_size):\n"
                               "    return (tf.data.Dataset.from_tensor_slices((images, labels))\n"
                               "            .shuffle(len(labels), seed=0)\n"
                               "            .batch(batch_size, drop_remainder=True)\n"
                               "            .skip(batches_done))",
                     "r": "resume_dataset <- function(images, labels, epoch, batches_done, batch_size) {\n"
                          "  tensor_slices_dataset(list(images, labels)) |>\n"
                          "    dataset_shuffle(buffer_size = nrow(images), seed = 0L) |>\n"
                          "    dataset_batch(batch_size, drop_remainder = TRUE) |>\n"
                          "    dataset_skip(batches_done)\n"
                          "}"},
                    "make the shuffle's seed depend on the epoch"),
        WrongAnswer({"python": "def resume_dataset(images, labels, epoch, batches_done, batch_size):\n"
                               "    return (tf.data.Dataset.from_tensor_slices((images, labels))\n"
                               "            .shuffle(len(labels), seed=epoch)\n"
                               "            .skip(batches_done)\n"
                               "            .batch(batch_size, drop_remainder=True))",
                     "r": "resume_dataset <- function(images, labels, epoch, batches_done, batch_size) {\n"
                          "  tensor_slices_dataset(list(images, labels)) |>\n"
                          "    dataset_shuffle(buffer_size = nrow(images), seed = epoch) |>\n"
                          "    dataset_skip(batches_done) |>\n"
                          "    dataset_batch(batch_size, drop_remainder = TRUE)\n"
                          "}"},
                    "skip 2 whole batches, after batching"),
        # Whole batches shuffled, not examples.
        WrongAnswer({"python": "def resume_dataset(images, labels, epoch, batches_done, batch_size):\n"
                               "    return (tf.data.Dataset.from_tensor_slices((images, labels))\n"
                               "            .batch(batch_size, drop_remainder=True)\n"
                               "            .shuffle(len(labels), seed=epoch)\n"
                               "            .skip(batches_done))",
                     "r": "resume_dataset <- function(images, labels, epoch, batches_done, batch_size) {\n"
                          "  tensor_slices_dataset(list(images, labels)) |>\n"
                          "    dataset_batch(batch_size, drop_remainder = TRUE) |>\n"
                          "    dataset_shuffle(buffer_size = nrow(images), seed = epoch) |>\n"
                          "    dataset_skip(batches_done)\n"
                          "}"},
                    "you shuffled whole batches"),
        # An endless dataset.
        WrongAnswer({"python": "def resume_dataset(images, labels, epoch, batches_done, batch_size):\n"
                               "    return (tf.data.Dataset.from_tensor_slices((images, labels))\n"
                               "            .shuffle(len(labels), seed=epoch)\n"
                               "            .batch(batch_size, drop_remainder=True)\n"
                               "            .skip(batches_done)\n"
                               "            .repeat())",
                     "r": "resume_dataset <- function(images, labels, epoch, batches_done, batch_size) {\n"
                          "  tensor_slices_dataset(list(images, labels)) |>\n"
                          "    dataset_shuffle(buffer_size = nrow(images), seed = epoch) |>\n"
                          "    dataset_batch(batch_size, drop_remainder = TRUE) |>\n"
                          "    dataset_skip(batches_done) |>\n"
                          "    dataset_repeat()\n"
                          "}"},
                    "leave out repeat()"),
        # The notebook's batch size instead of the argument.
        WrongAnswer({"python": "BATCH_SIZE = 32\n"
                               "\n"
                               "def resume_dataset(images, labels, epoch, batches_done, batch_size):\n"
                               "    return (tf.data.Dataset.from_tensor_slices((images, labels))\n"
                               "            .shuffle(len(labels), seed=epoch)\n"
                               "            .batch(BATCH_SIZE, drop_remainder=True)\n"
                               "            .skip(batches_done))",
                     "r": "BATCH_SIZE <- 32L\n"
                          "resume_dataset <- function(images, labels, epoch, batches_done, batch_size) {\n"
                          "  tensor_slices_dataset(list(images, labels)) |>\n"
                          "    dataset_shuffle(buffer_size = nrow(images), seed = epoch) |>\n"
                          "    dataset_batch(BATCH_SIZE, drop_remainder = TRUE) |>\n"
                          "    dataset_skip(batches_done)\n"
                          "}"},
                    "in batches of 24 gave batches of sizes"),
        # The batches themselves, not a dataset.
        WrongAnswer({"python": "def resume_dataset(images, labels, epoch, batches_done, batch_size):\n"
                               "    dataset = (tf.data.Dataset.from_tensor_slices((images, labels))\n"
                               "               .shuffle(len(labels), seed=epoch)\n"
                               "               .batch(batch_size, drop_remainder=True)\n"
                               "               .skip(batches_done))\n"
                               "    return list(dataset.as_numpy_iterator())",
                     "r": "resume_dataset <- function(images, labels, epoch, batches_done, batch_size) {\n"
                          "  dataset <- tensor_slices_dataset(list(images, labels)) |>\n"
                          "    dataset_shuffle(buffer_size = nrow(images), seed = epoch) |>\n"
                          "    dataset_batch(batch_size, drop_remainder = TRUE) |>\n"
                          "    dataset_skip(batches_done)\n"
                          "  reticulate::iterate(dataset)\n"
                          "}"},
                    "return the pipeline"),
        # The images and the labels shuffled apart.
        WrongAnswer({"python": "def resume_dataset(images, labels, epoch, batches_done, batch_size):\n"
                               "    xs = tf.data.Dataset.from_tensor_slices(images).shuffle(len(labels), seed=epoch)\n"
                               "    ys = tf.data.Dataset.from_tensor_slices(labels).shuffle(len(labels), seed=epoch + 1)\n"
                               "    return (tf.data.Dataset.zip((xs, ys))\n"
                               "            .batch(batch_size, drop_remainder=True)\n"
                               "            .skip(batches_done))",
                     "r": "resume_dataset <- function(images, labels, epoch, batches_done, batch_size) {\n"
                          "  xs <- tensor_slices_dataset(images) |> dataset_shuffle(nrow(images), seed = epoch)\n"
                          "  ys <- tensor_slices_dataset(labels) |> dataset_shuffle(nrow(images), seed = epoch + 1L)\n"
                          "  zip_datasets(xs, ys) |>\n"
                          "    dataset_batch(batch_size, drop_remainder = TRUE) |>\n"
                          "    dataset_skip(batches_done)\n"
                          "}"},
                    "labels no longer go with their images"),
    ),
    right=(
        {"python": "import numpy as np\n\n"
                   "def resume_dataset(images, labels, epoch, batches_done, batch_size):\n"
                   "    order = np.random.default_rng(epoch).permutation(len(labels))\n"
                   "    pairs = tf.data.Dataset.from_tensor_slices((images[order], labels[order]))\n"
                   "    return pairs.skip(batches_done * batch_size).batch(batch_size, drop_remainder=True)",
         "r": "resume_dataset <- function(images, labels, epoch, batches_done, batch_size) {\n"
              "  set.seed(epoch)\n"
              "  order <- sample(nrow(images))\n"
              "  tensor_slices_dataset(list(images[order, ], labels[order])) |>\n"
              "    dataset_batch(batch_size, drop_remainder = TRUE) |>\n"
              "    dataset_skip(batches_done)\n"
              "}"},
        {"python": "def resume_dataset(images, labels, epoch, batches_done, batch_size):\n"
                   "    dataset = tf.data.Dataset.from_tensor_slices((images, labels))\n"
                   "    dataset = dataset.shuffle(buffer_size=1000, seed=1000 + epoch, reshuffle_each_iteration=False)\n"
                   "    batches = dataset.batch(batch_size).take(len(labels) // batch_size)\n"
                   "    return batches.skip(batches_done).prefetch(tf.data.AUTOTUNE)",
         "r": "resume_dataset <- function(images, labels, epoch, batches_done, batch_size) {\n"
              "  tensor_slices_dataset(list(images, labels)) |>\n"
              "    dataset_shuffle(buffer_size = 1000L, seed = 1000L + epoch) |>\n"
              "    dataset_skip(batches_done * batch_size) |>\n"
              "    dataset_batch(batch_size, drop_remainder = TRUE) |>\n"
              "    dataset_prefetch(tf$data$AUTOTUNE)\n"
              "}"},
    ),
    context=CONTEXT,
    needs=("keras3",),
)
