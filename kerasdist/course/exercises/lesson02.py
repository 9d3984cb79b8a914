"""Lesson 02's checked exercises: make or restore, which batches ModelCheckpoint saves, a resumable epoch.

Example:
    >>> print(q2.verdict({"batch_checkpoint_names": lambda s, e, f: []}))  # doctest: +SKIP
    Incorrect: batch_checkpoint_names(5, 3, 3) returned [], but ModelCheckpoint(save_freq=3) wrote ...
"""

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
    quiet_tensorflow,
    two_replicas,
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
    got = call_answer(function, "make_or_restore", str(directory), strategy)
    pair = language.pick("(model, epochs_done)", "list(model, epochs_done)")
    if not isinstance(got, (list, tuple)) or len(got) != 2:
        raise Incorrect(f"make_or_restore returned {type(got).__name__}: return the pair {pair}.")
    model, done = got
    if not hasattr(model, "trainable_variables"):
        raise Incorrect(f"the first element make_or_restore returned is {type(model).__name__}, not a model: "
                        f"return {pair}.")
    if isinstance(done, float) and done.is_integer():
        done = int(done)
    if not isinstance(done, (int, np.integer)) or isinstance(done, bool):
        raise Incorrect(f"epochs_done is {language.value(done)}: return the number of epochs done, "
                        "a whole number.")
    scope = language.pick("strategy.scope()", "with(strategy$scope(), ...)")
    if model.distribute_strategy is not strategy:
        raise Incorrect(f"the model make_or_restore returned is not in the strategy it was given (its "
                        f"variables are on one device): build or load it inside {scope}.")
    if not model.compiled:
        if any(Path(directory).glob("ckpt-*.keras")):
            raise Incorrect("the model make_or_restore loaded from the latest checkpoint is not compiled: load "
                            "the whole model, optimizer included (without "
                            f"{language.pick('compile=False', 'compile = FALSE')}).")
        raise Incorrect("the model make_or_restore returned is not compiled: build it with build_model(), "
                        "which compiles it.")
    return model, int(done)


def _check_make_or_restore(answers, language):
    with quiet_tensorflow():
        return _make_or_restore_verdict(answers, language)


def _make_or_restore_verdict(answers, language):
    import keras

    function = answers["make_or_restore"]
    strategy = two_replicas()
    images, labels = digits_of_every_class(128)
    directory = Path(tempfile.mkdtemp(prefix="kd_q1_"))
    try:
        model, done = _made_or_restored(function, directory, strategy, language)
        if done != 0:
            raise Incorrect(f"in an empty directory make_or_restore returned epochs_done = {done}: a fresh "
                            "model has 0 epochs done.")
        keras.utils.set_random_seed(0)
        saver = keras.callbacks.ModelCheckpoint(str(directory / "ckpt-{epoch:02d}.keras"))
        try:
            model.fit(images, labels, batch_size=64, epochs=3, shuffle=False, verbose=0,
                      callbacks=[saver, _crash_at(epoch=3, batch=1)])
        except RuntimeError:
            pass
        # Restore ckpt-01.keras from a backup: a copy aside and back makes it the newest file.
        first = directory / "ckpt-01.keras"
        shutil.copy(first, directory.parent / (directory.name + "-backup.keras"))
        time.sleep(0.02)
        shutil.copy(directory.parent / (directory.name + "-backup.keras"), first)
        os.remove(directory.parent / (directory.name + "-backup.keras"))
        saved = {epoch: keras.models.load_model(str(directory / f"ckpt-{epoch:02d}.keras"), compile=False)
                 for epoch in (1, 2)}
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
        restored.fit(images, labels, batch_size=64, initial_epoch=done, epochs=3, shuffle=False, verbose=0,
                     callbacks=[keras.callbacks.ModelCheckpoint(str(directory / "ckpt-{epoch:02d}.keras"))])
        if int(restored.optimizer.iterations.numpy()) != 6:
            raise Incorrect("the resumed run did not end after 3 epochs of 2 steps: return the epochs done.")
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    return ("make_or_restore resumed the crashed run from ckpt-02.keras, the latest by epoch number (not "
            "by file time), in the strategy's scope, and fit() trained epoch 3 only.")


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
    ),
    context={
        "python": CONTEXT["python"] + "\n" + BUILD_MODEL["python"] + "\n\ndef checkpoint_epoch(path):\n"
                  "    return int(re.fullmatch(r\"ckpt-(\\d+)\\.keras\", path.name).group(1))\n",
        "r": CONTEXT["r"] + "\n" + BUILD_MODEL["r"] + "\ncheckpoint_epoch <- function(path) "
             "as.integer(sub(\"^ckpt-([0-9]+)\\\\.keras$\", \"\\\\1\", basename(path)))\n",
    },
    needs=("keras3",),
)


CASES_Q2 = ((5, 3, 3), (4, 3, 6))  # (steps_per_epoch, epochs, save_freq)


def _saved_names(steps_per_epoch, epochs, save_freq):
    """The files a real ModelCheckpoint(save_freq=...) writes, on a small model and real digits."""
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
        return sorted(path.name for path in directory.iterdir())
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _check_batch_checkpoint_names(answers, language):
    with quiet_tensorflow():
        return _batch_checkpoint_names_verdict(answers, language)


def _batch_checkpoint_names_verdict(answers, language):
    function = answers["batch_checkpoint_names"]
    for steps_per_epoch, epochs, save_freq in CASES_Q2:
        got = call_answer(function, "batch_checkpoint_names", steps_per_epoch, epochs, save_freq)
        got = [got] if isinstance(got, str) else list(got or [])
        if not all(isinstance(name, str) for name in got):
            raise Incorrect("batch_checkpoint_names returned something other than file names: return "
                            f"names like {language.value('ckpt-e01-b003.keras')}.")
        real = _saved_names(steps_per_epoch, epochs, save_freq)
        if sorted(got) == real:
            continue
        call = f"batch_checkpoint_names({steps_per_epoch}, {epochs}, {save_freq})"
        callback = language.pick("ModelCheckpoint", "callback_model_checkpoint()")
        with_freq = language.pick(f"ModelCheckpoint(save_freq={save_freq})",
                                  f"callback_model_checkpoint(save_freq = {save_freq})")
        shown = language.value(real)
        per_epoch = [f"ckpt-e{e:02d}-b{b:03d}.keras" for e in range(1, epochs + 1)
                     for b in range(save_freq, steps_per_epoch + 1, save_freq)]
        if sorted(got) == per_epoch:
            raise Incorrect(f"{call} restarts the count in every epoch, but {callback} counts batches "
                            f"across epochs and wrote {shown}.")
        raise Incorrect(f"{call} returned {language.value(sorted(got))}, but "
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
    ),
    context={"python": "", "r": ""},
)


def _batches(dataset):
    """Each batch of a dataset of (images, labels) elements as a (2, batch) array: labels, pixel sums."""
    try:
        return [np.stack([np.asarray(element[1], dtype="float64"),
                          np.asarray(element[0], dtype="float64").reshape(len(element[1]), -1).sum(axis=1)])
                for element in dataset]
    except Exception as error:  # noqa: BLE001 (the student's pipeline's own error is the verdict)
        raise Incorrect(f"iterating the dataset resume_dataset returned raised {type(error).__name__}: "
                        f"{error_line(error)[:200]}") from None


def _same(first, second):
    """Whether two lists of batches hold the same examples in the same order."""
    return len(first) == len(second) and all(a.shape == b.shape and np.allclose(a, b) for a, b in
                                             zip(first, second))


def _check_resume_dataset(answers, language):
    function = answers["resume_dataset"]
    images, labels = digits_of_every_class(200)
    batch_size = 32

    def build(epoch, batches_done):
        dataset = call_answer(function, "resume_dataset", images, labels, epoch, batches_done, batch_size)
        if not hasattr(dataset, "element_spec"):
            raise Incorrect(f"resume_dataset returned {type(dataset).__name__}, not a "
                            f"{language.pick('tf.data.Dataset', 'TensorFlow dataset')}: return the pipeline.")
        return _batches(dataset)

    whole = build(1, 0)
    sizes = [batch.shape[1] for batch in whole]
    if sizes != [batch_size] * (len(labels) // batch_size):
        raise Incorrect(f"an epoch of 200 digits in batches of 32 gave batches of sizes "
                        f"{language.value(sizes)}: batch with the batch size and drop the last partial batch.")
    if np.array_equal(np.concatenate([batch[0] for batch in whole]), labels[:len(labels) // batch_size
                                                                               * batch_size]):
        raise Incorrect("epoch 1 comes in the original order: shuffle the examples (before batching).")
    if not _same(whole, build(1, 0)):
        raise Incorrect("building epoch 1 twice gave two different orders, so a restarted process would see "
                        "other batches: give the shuffle a seed made from the epoch.")
    if _same(whole, build(2, 0)):
        raise Incorrect("epochs 1 and 2 come in the same order: make the shuffle's seed depend on the epoch.")
    for done in (2, 5):
        if not _same(build(1, done), whole[done:]):
            raise Incorrect(f"resume_dataset(images, labels, 1, {done}, 32) does not continue with "
                            f"batch {done + 1} of the whole epoch 1: skip {done} whole batches, after "
                            "batching.")
    return ("each epoch's order depends on its epoch only, and a resumed epoch continues with the next "
            "batch of that same order.")


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
    ),
    context=CONTEXT,
    needs=("keras3",),
)
