"""Lesson 04's checked exercises: global batches split by the strategy, a cached pipeline, workers' shares.

Each check builds real ``tf.data`` pipelines with the student's function and reads them: the
shares of 2 replicas, the reads and the order of 2 epochs, the keys 2 simulated workers train on
after TensorFlow's own auto-shard rewrite; with the lesson's global batch of 64 and with 48, which
leaves a remainder, so that a batch size written into the answer fails.

Example:
    >>> from kerasdist.course.exercises.lesson04 import q1
    >>> print(q1.verdict({"distribute_batches": None}))
    Not attempted: define distribute_batches (it is still None), then run the check again.
"""

import itertools

import numpy as np

from kerasdist.course.exercises.core import Exercise, Incorrect, WrongAnswer
from kerasdist.course.exercises.fixtures import call_answer, described, digit_batch, two_replicas

CONTEXT = {
    "python": "import tensorflow as tf",
    "r": 'library(keras3)\nlibrary(tfdatasets, exclude = "shape")\n'
         'library(tensorflow, exclude = c("shape", "set_random_seed"))\nlibrary(reticulate)',
}
GLOBAL_BATCH = 64
NUM_EXAMPLES = 200  # 3 global batches of 64 and a remainder of 8
# Another global batch, for a second call: 200 examples make 4 batches of 48 and a remainder of 8.
OTHER_BATCH = 48

LIMIT = 100  # more elements than any pipeline of these checks holds: an endless one (repeat()) stops here


def _iterate(elements, name):
    """The elements of a dataset (or distributed dataset) the student built; its errors become the verdict."""
    read = call_answer(lambda: list(itertools.islice(elements, LIMIT)), f"iterating what {name} returned")
    if len(read) == LIMIT:
        raise Incorrect(f"what {name} returned never ends: leave repeat() out, fit() runs the epochs.")
    return read


def _digit_keys(images):
    """A function that gives, for an array of image rows, the index of each in ``images`` (-1 if none)."""
    index = {row.tobytes(): key for key, row in enumerate(images)}
    return lambda rows: [index.get(np.asarray(row, "float32").tobytes(), -1) for row in rows]


def _repeats(keys, where, dataset="the dataset"):
    """Incorrect if ``keys`` (indexes of examples) hold one that is not in the dataset, or one twice."""
    if any(key < 0 for key in keys):
        raise Incorrect(f"{where} holds examples that are not {dataset}'s: batch its examples as they are.")
    if len(set(keys)) < len(keys):
        raise Incorrect(f"{where} holds {len(keys) - len(set(keys))} examples more than once: batch each "
                        "example once (no repeat(), no padding).")


# q1: distribute global batches -------------------------------------------------------------------------

CASES_Q1 = ((NUM_EXAMPLES, GLOBAL_BATCH), (150, OTHER_BATCH))  # (examples, global batch): 3 steps each


def _check_distribute_batches(answers, language):
    strategy = two_replicas()
    for examples, global_batch in CASES_Q1:
        _distributed_steps(answers["distribute_batches"], strategy, examples, global_batch, language)
    share = GLOBAL_BATCH // 2
    return (f"every step holds a whole global batch of {GLOBAL_BATCH}, which the strategy splits into "
            f"{share} examples per replica.")


def _distributed_steps(function, strategy, examples, global_batch, language):
    """Call distribute_batches on ``examples`` digits and check every step's shares, or Incorrect."""
    import tensorflow as tf

    images, labels = digit_batch(examples)
    dataset = tf.data.Dataset.from_tensor_slices((images, labels))
    result = call_answer(function, "distribute_batches", strategy, dataset, global_batch)
    distribute = language.pick("strategy.experimental_distribute_dataset()",
                               "strategy$experimental_distribute_dataset()")
    if isinstance(result, tf.data.Dataset):
        raise Incorrect(f"distribute_batches returned a tf.data dataset, which feeds one device: pass the "
                        f"batched dataset to {distribute} and return what it gives.")
    if not isinstance(result, tf.distribute.DistributedDataset):
        raise Incorrect(f"distribute_batches returned {described(result, language)}, not a distributed "
                        f"dataset: return {distribute} of the batched dataset.")
    if getattr(result, "_strategy", strategy) is not strategy:
        raise Incorrect("distribute_batches split the batches with a strategy of its own: use the strategy "
                        "it was given, whose replicas will train on them.")
    keys_of = _digit_keys(images)
    steps, shares = [], []
    for element in _iterate(result, "distribute_batches"):
        if not isinstance(element, (tuple, list)) or len(tf.nest.flatten(element)) != 2:
            raise Incorrect("a step does not hold the dataset's (image, label) pairs: batch the pairs as "
                            "they are, so that the replicas get the labels too.")
        first = tf.nest.flatten(element)[0]
        parts = [np.asarray(part) for part in strategy.experimental_local_results(first)]
        if any(part.ndim != 2 or part.shape[1] != 784 for part in parts):
            raise Incorrect(f"a step holds parts of shapes {[part.shape for part in parts]}, not batches of "
                            "digits (784 pixels each): batch the dataset's (image, label) pairs as they are.")
        steps.append([len(part) for part in parts])
        shares.extend(keys_of(part) for part in parts)
    whole, share = examples // global_batch, global_batch // 2
    call = f"with {examples} examples and global_batch = {global_batch}"
    if steps and steps[0] != [share, share]:
        raise Incorrect(f"{call}, the 2 replicas got {language.value(steps[0])} examples in the first step, "
                        f"but a global batch of {global_batch} gives each {share}: batch by global_batch, "
                        "the strategy splits it.")
    if len(steps) > whole and sum(steps[-1]) < global_batch:
        raise Incorrect(f"{call}, the last step holds only {sum(steps[-1])} examples "
                        f"({language.value(steps[-1])} per replica): batch with "
                        f"drop_remainder = {language.true} so that every step gets a whole global batch.")
    if len(steps) != whole or any(step != [share, share] for step in steps):
        raise Incorrect(f"{call}, the steps held {language.value([sum(step) for step in steps])} examples, "
                        f"not {whole} steps of {global_batch}: batch the dataset once, by global_batch, with "
                        "the remainder dropped.")
    _repeats([key for part in shares for key in part], "a step")


q1 = Exercise(
    "04", "q1", "Global batches for the strategy",
    answers=("distribute_batches",),
    check_answers=_check_distribute_batches,
    hints=("Batch by the GLOBAL batch (all replicas together) and drop the remainder; the strategy, "
           "not you, cuts each global batch into per-replica shares.",
           {"python": "batches = dataset.batch(global_batch, drop_remainder=True), then return "
                      "strategy.experimental_distribute_dataset(batches).",
            "r": "batches <- dataset_batch(dataset, global_batch, drop_remainder = TRUE), then return "
                 "strategy$experimental_distribute_dataset(batches)."}),
    solutions={
        "python": "def distribute_batches(strategy, dataset, global_batch):\n"
                  "    batches = dataset.batch(global_batch, drop_remainder=True)\n"
                  "    return strategy.experimental_distribute_dataset(batches)",
        "r": "distribute_batches <- function(strategy, dataset, global_batch) {\n"
             "  batches <- dataset_batch(dataset, global_batch, drop_remainder = TRUE)\n"
             "  strategy$experimental_distribute_dataset(batches)\n"
             "}",
    },
    starters={"python": "distribute_batches = None  # a function of (strategy, dataset, global_batch)",
             "r": "distribute_batches <- NULL  # a function of (strategy, dataset, global_batch)"},
    wrong=(
        WrongAnswer({"python": "def distribute_batches(strategy, dataset, global_batch):\n"
                               "    per_replica = global_batch // strategy.num_replicas_in_sync\n"
                               "    batches = dataset.batch(per_replica, drop_remainder=True)\n"
                               "    return strategy.experimental_distribute_dataset(batches)",
                     "r": "distribute_batches <- function(strategy, dataset, global_batch) {\n"
                          "  per_replica <- global_batch %/% strategy$num_replicas_in_sync\n"
                          "  batches <- dataset_batch(dataset, per_replica, drop_remainder = TRUE)\n"
                          "  strategy$experimental_distribute_dataset(batches)\n"
                          "}"},
                    "batch by global_batch, the strategy splits it"),
        WrongAnswer({"python": "def distribute_batches(strategy, dataset, global_batch):\n"
                               "    return strategy.experimental_distribute_dataset(dataset.batch(global_batch))",
                     "r": "distribute_batches <- function(strategy, dataset, global_batch) {\n"
                          "  strategy$experimental_distribute_dataset(dataset_batch(dataset, global_batch))\n"
                          "}"},
                    "the last step holds only 8 examples"),
        WrongAnswer({"python": "def distribute_batches(strategy, dataset, global_batch):\n"
                               "    return dataset.batch(global_batch, drop_remainder=True)",
                     "r": "distribute_batches <- function(strategy, dataset, global_batch) {\n"
                          "  dataset_batch(dataset, global_batch, drop_remainder = TRUE)\n"
                          "}"},
                    "which feeds one device"),
        WrongAnswer({"python": "def distribute_batches(strategy, dataset, global_batch):\n"
                               "    return strategy.experimental_distribute_dataset(dataset.batch(64, drop_remainder=True))",
                     "r": "distribute_batches <- function(strategy, dataset, global_batch) {\n"
                          "  strategy$experimental_distribute_dataset(dataset_batch(dataset, 64, drop_remainder = TRUE))\n"
                          "}"},
                    "a global batch of 48 gives each 24"),
        WrongAnswer({"python": "def distribute_batches(strategy, dataset, global_batch):\n"
                               "    batches = dataset.batch(global_batch, drop_remainder=True)\n"
                               "    return tf.distribute.OneDeviceStrategy(\"/cpu:0\").experimental_distribute_dataset(batches)",
                     "r": "distribute_batches <- function(strategy, dataset, global_batch) {\n"
                          "  batches <- dataset_batch(dataset, global_batch, drop_remainder = TRUE)\n"
                          "  tf$distribute$OneDeviceStrategy(\"/cpu:0\")$experimental_distribute_dataset(batches)\n"
                          "}"},
                    "with a strategy of its own"),
        WrongAnswer({"python": "def distribute_batches(strategy, dataset, global_batch):\n"
                               "    batches = dataset.repeat().batch(global_batch, drop_remainder=True)\n"
                               "    return strategy.experimental_distribute_dataset(batches)",
                     "r": "distribute_batches <- function(strategy, dataset, global_batch) {\n"
                          "  batches <- dataset |> dataset_repeat() |> dataset_batch(global_batch, drop_remainder = TRUE)\n"
                          "  strategy$experimental_distribute_dataset(batches)\n"
                          "}"},
                    "never ends"),
        WrongAnswer({"python": "def distribute_batches(strategy, dataset, global_batch):\n"
                               "    batches = dataset.batch(global_batch, drop_remainder=True)\n"
                               "    return list(strategy.experimental_distribute_dataset(batches))",
                     "r": "distribute_batches <- function(strategy, dataset, global_batch) {\n"
                          "  batches <- dataset_batch(dataset, global_batch, drop_remainder = TRUE)\n"
                          "  reticulate::iterate(strategy$experimental_distribute_dataset(batches))\n"
                          "}"},
                    "not a distributed dataset"),
    ),
    right=(
        {"python": "def distribute_batches(strategy, dataset, global_batch):  # each replica batches its share\n"
                   "    def replica_batches(context):\n"
                   "        return dataset.batch(context.get_per_replica_batch_size(global_batch), drop_remainder=True)\n"
                   "    return strategy.distribute_datasets_from_function(replica_batches)",
         "r": "distribute_batches <- function(strategy, dataset, global_batch) {  # whole batches only\n"
              "  whole <- (length(dataset) %/% global_batch) * global_batch\n"
              "  batches <- dataset |> dataset_take(whole) |> dataset_batch(global_batch)\n"
              "  strategy$experimental_distribute_dataset(batches)\n"
              "}"},
        {"python": "def distribute_batches(strategy, dataset, global_batch):  # keep the whole batches only\n"
                   "    batches = dataset.batch(global_batch).filter(lambda images, labels: tf.shape(labels)[0] == global_batch)\n"
                   "    options = tf.distribute.InputOptions(experimental_fetch_to_device=True)\n"
                   "    return strategy.experimental_distribute_dataset(batches, options=options)",
         "r": "distribute_batches <- function(strategy, dataset, global_batch) {\n"
              "  dataset_batch(dataset, batch_size = global_batch, drop_remainder = TRUE) |>\n"
              "    strategy$experimental_distribute_dataset()\n"
              "}"},
    ),
    context=CONTEXT,
    needs=("keras3",),
)


# q2: cache, then shuffle, batch, prefetch --------------------------------------------------------------

def _counted_records(reads):
    """A dataset of NUM_EXAMPLES real digits, (image, label), that appends a key to ``reads`` per read."""
    import tensorflow as tf

    images, labels = digit_batch(NUM_EXAMPLES)

    def read(key):
        reads.append(int(key))
        return images[key], labels[key]

    def read_record(key):
        image, label = tf.numpy_function(read, [key], (tf.float32, tf.int32))
        return tf.ensure_shape(image, (784,)), tf.ensure_shape(label, ())

    return tf.data.Dataset.range(NUM_EXAMPLES).map(read_record)


def _epoch_order(batches):
    """Which stored example each position of an epoch holds (by its pixels)."""
    images, _ = digit_batch(NUM_EXAMPLES)
    keys_of = _digit_keys(images)
    return [key for batch in batches for key in keys_of(batch[0])]


def _epoch(pipeline, global_batch, language):
    """One epoch of the pipeline's (images, labels) batches; Incorrect unless whole global batches."""
    batches = [tuple(np.asarray(part) for part in batch) for batch in _iterate(pipeline, "epoch_pipeline")]
    sizes = [len(batch[1]) for batch in batches]
    if sizes and sizes[0] != global_batch:
        raise Incorrect(f"the first batch holds {sizes[0]} examples, not global_batch ({global_batch}): "
                        "batch by the global batch.")
    if sizes != [global_batch] * (NUM_EXAMPLES // global_batch):
        raise Incorrect(f"with global_batch = {global_batch}, an epoch gave batches of "
                        f"{language.value(sizes)} examples: batch with drop_remainder = {language.true}, so "
                        "that every batch is a whole global batch.")
    _repeats(_epoch_order(batches), "an epoch", "the records")
    return batches


def _pipeline(function, reads, global_batch, seed, language):
    """Call epoch_pipeline on counted records; Incorrect unless it returns batches of (image, label) pairs."""
    import tensorflow as tf

    pipeline = call_answer(function, "epoch_pipeline", _counted_records(reads), global_batch, seed)
    if not isinstance(pipeline, tf.data.Dataset):
        raise Incorrect(f"epoch_pipeline returned {described(pipeline, language)}, not a dataset: return "
                        "the pipeline.")
    spec = pipeline.element_spec
    pairs = isinstance(spec, tuple) and len(spec) == 2 and all(isinstance(s, tf.TensorSpec) for s in spec)
    if not (pairs and spec[0].shape.rank == 2 and spec[0].shape[-1] == 784 and spec[1].shape.rank == 1):
        raise Incorrect(f"the pipeline's elements are {spec}, not batches of the records' (image, label) "
                        "pairs: keep the pairs as they are and batch them.")
    return pipeline


def _fresh_order(function, global_batch, seed, language):
    """The order of the first epoch of a pipeline built afresh with ``global_batch`` and ``seed``."""
    return _epoch_order(_epoch(_pipeline(function, [], global_batch, seed, language), global_batch, language))


def _check_epoch_pipeline(answers, language):
    function = answers["epoch_pipeline"]
    reads = []
    pipeline = _pipeline(function, reads, GLOBAL_BATCH, 7, language)
    first = _epoch(pipeline, GLOBAL_BATCH, language)
    first_reads = len(reads)
    second = _epoch(pipeline, GLOBAL_BATCH, language)
    cache = language.pick("cache()", "dataset_cache()")
    if len(reads) > first_reads:
        raise Incorrect(f"the second epoch read the records again ({len(reads) - first_reads} reads): "
                        f"{cache} them, so that only the first epoch reads.")
    order, next_order = _epoch_order(first), _epoch_order(second)
    if order == sorted(order):
        raise Incorrect("the examples come in the order they are stored: shuffle them, after the cache.")
    runs = [_epoch_order([batch]) for batch in first]
    if all(run == list(range(run[0], run[0] + len(run))) for run in runs):
        raise Incorrect("every batch is a run of neighbouring records: you shuffled whole batches; shuffle "
                        "the records, then batch them.")
    if order == next_order:
        raise Incorrect(f"both epochs came in the same order: the shuffle ran before {cache}, which froze "
                        "the first epoch's order, or it was told not to reshuffle each iteration; cache first, "
                        "then shuffle, so that every epoch is reshuffled.")
    if _fresh_order(function, GLOBAL_BATCH, 7, language) != order:
        raise Incorrect("two pipelines built with the same seed shuffled differently: give the shuffle "
                        "seed = seed, the function's argument.")
    if _fresh_order(function, GLOBAL_BATCH, 8, language) == order:
        raise Incorrect("seeds 7 and 8 gave the same order: give the shuffle the seed you were given, "
                        "not one of your own.")
    other = _fresh_order(function, OTHER_BATCH, 7, language)
    if other == sorted(other):
        raise Incorrect(f"with global_batch = {OTHER_BATCH}, the examples come in the order they are stored: "
                        "shuffle them, whatever the batch.")
    last = pipeline
    while type(last).__name__ == "_OptionsDataset":
        last = last._input_dataset
    if type(last).__name__ != "_PrefetchDataset":
        raise Incorrect(f"the pipeline ends with {type(last).__name__.strip('_')}, not a prefetch: end it "
                        f"with {language.pick('prefetch(tf.data.AUTOTUNE)', 'dataset_prefetch()')}, so that "
                        "the next batch is prepared while the model trains.")
    return ("the records are read once, every epoch is reshuffled from the seed, batched by the global "
            "batch and prefetched.")


q2 = Exercise(
    "04", "q2", "Cache, then shuffle",
    answers=("epoch_pipeline",),
    check_answers=_check_epoch_pipeline,
    hints=("Order matters: what cache() stores is replayed in every later epoch, so it must come before "
           "the shuffle; the batch comes after the shuffle, the prefetch last.",
           {"python": "records.cache().shuffle(1000, seed=seed).batch(global_batch, drop_remainder=True)"
                      ".prefetch(tf.data.AUTOTUNE)",
            "r": "records |> dataset_cache() |> dataset_shuffle(1000, seed = seed) |> "
                 "dataset_batch(global_batch, drop_remainder = TRUE) |> dataset_prefetch()"}),
    solutions={
        "python": "def epoch_pipeline(records, global_batch, seed):\n"
                  "    return (records.cache()\n"
                  "            .shuffle(1000, seed=seed)\n"
                  "            .batch(global_batch, drop_remainder=True)\n"
                  "            .prefetch(tf.data.AUTOTUNE))",
        "r": "epoch_pipeline <- function(records, global_batch, seed) {\n"
             "  records |>\n"
             "    dataset_cache() |>\n"
             "    dataset_shuffle(1000, seed = seed) |>\n"
             "    dataset_batch(global_batch, drop_remainder = TRUE) |>\n"
             "    dataset_prefetch()\n"
             "}",
    },
    starters={"python": "epoch_pipeline = None  # a function of (records, global_batch, seed)",
             "r": "epoch_pipeline <- NULL  # a function of (records, global_batch, seed)"},
    wrong=(
        WrongAnswer({"python": "def epoch_pipeline(records, global_batch, seed):\n"
                               "    return (records.shuffle(1000, seed=seed).cache()\n"
                               "            .batch(global_batch, drop_remainder=True).prefetch(tf.data.AUTOTUNE))",
                     "r": "epoch_pipeline <- function(records, global_batch, seed) {\n"
                          "  records |> dataset_shuffle(1000, seed = seed) |> dataset_cache() |>\n"
                          "    dataset_batch(global_batch, drop_remainder = TRUE) |> dataset_prefetch()\n"
                          "}"},
                    "both epochs came in the same order"),
        WrongAnswer({"python": "def epoch_pipeline(records, global_batch, seed):\n"
                               "    return (records.shuffle(1000, seed=seed)\n"
                               "            .batch(global_batch, drop_remainder=True).prefetch(tf.data.AUTOTUNE))",
                     "r": "epoch_pipeline <- function(records, global_batch, seed) {\n"
                          "  records |> dataset_shuffle(1000, seed = seed) |>\n"
                          "    dataset_batch(global_batch, drop_remainder = TRUE) |> dataset_prefetch()\n"
                          "}"},
                    "the second epoch read the records again"),
        WrongAnswer({"python": "def epoch_pipeline(records, global_batch, seed):\n"
                               "    return (records.cache().shuffle(1000)\n"
                               "            .batch(global_batch, drop_remainder=True).prefetch(tf.data.AUTOTUNE))",
                     "r": "epoch_pipeline <- function(records, global_batch, seed) {\n"
                          "  records |> dataset_cache() |> dataset_shuffle(1000) |>\n"
                          "    dataset_batch(global_batch, drop_remainder = TRUE) |> dataset_prefetch()\n"
                          "}"},
                    "shuffled differently"),
        WrongAnswer({"python": "def epoch_pipeline(records, global_batch, seed):\n"
                               "    return records.cache().shuffle(1000, seed=seed).batch(global_batch,\n"
                               "                                                           drop_remainder=True)",
                     "r": "epoch_pipeline <- function(records, global_batch, seed) {\n"
                          "  records |> dataset_cache() |> dataset_shuffle(1000, seed = seed) |>\n"
                          "    dataset_batch(global_batch, drop_remainder = TRUE)\n"
                          "}"},
                    "not a prefetch"),
        WrongAnswer({"python": "def epoch_pipeline(records, global_batch, seed):\n"
                               "    return (records.cache().shuffle(1000, seed=seed)\n"
                               "            .batch(64, drop_remainder=True).prefetch(tf.data.AUTOTUNE))",
                     "r": "epoch_pipeline <- function(records, global_batch, seed) {\n"
                          "  records |> dataset_cache() |> dataset_shuffle(1000, seed = seed) |>\n"
                          "    dataset_batch(64, drop_remainder = TRUE) |> dataset_prefetch()\n"
                          "}"},
                    "not global_batch (48)"),
        WrongAnswer({"python": "def epoch_pipeline(records, global_batch, seed):\n"
                               "    return (records.cache().shuffle(1000, seed=seed)\n"
                               "            .batch(global_batch).prefetch(tf.data.AUTOTUNE))",
                     "r": "epoch_pipeline <- function(records, global_batch, seed) {\n"
                          "  records |> dataset_cache() |> dataset_shuffle(1000, seed = seed) |>\n"
                          "    dataset_batch(global_batch) |> dataset_prefetch()\n"
                          "}"},
                    "batch with drop_remainder"),
        WrongAnswer({"python": "def epoch_pipeline(records, global_batch, seed):\n"
                               "    return (records.cache().shuffle(1000, seed=seed).repeat()\n"
                               "            .batch(global_batch, drop_remainder=True).prefetch(tf.data.AUTOTUNE))",
                     "r": "epoch_pipeline <- function(records, global_batch, seed) {\n"
                          "  records |> dataset_cache() |> dataset_shuffle(1000, seed = seed) |> dataset_repeat() |>\n"
                          "    dataset_batch(global_batch, drop_remainder = TRUE) |> dataset_prefetch()\n"
                          "}"},
                    "never ends"),
        WrongAnswer({"python": "def epoch_pipeline(records, global_batch, seed):\n"
                               "    images = records.map(lambda image, label: image)\n"
                               "    return (images.cache().shuffle(1000, seed=seed)\n"
                               "            .batch(global_batch, drop_remainder=True).prefetch(tf.data.AUTOTUNE))",
                     "r": "epoch_pipeline <- function(records, global_batch, seed) {\n"
                          "  records |> dataset_map(function(image, label) image) |> dataset_cache() |>\n"
                          "    dataset_shuffle(1000, seed = seed) |>\n"
                          "    dataset_batch(global_batch, drop_remainder = TRUE) |> dataset_prefetch()\n"
                          "}"},
                    "not batches of the records' (image, label) pairs"),
        WrongAnswer({"python": "def epoch_pipeline(records, global_batch, seed):\n"
                               "    return (records.cache().batch(global_batch, drop_remainder=True)\n"
                               "            .shuffle(1000, seed=seed).prefetch(tf.data.AUTOTUNE))",
                     "r": "epoch_pipeline <- function(records, global_batch, seed) {\n"
                          "  records |> dataset_cache() |> dataset_batch(global_batch, drop_remainder = TRUE) |>\n"
                          "    dataset_shuffle(1000, seed = seed) |> dataset_prefetch()\n"
                          "}"},
                    "you shuffled whole batches"),
    ),
    right=(
        {"python": "def epoch_pipeline(records, global_batch, seed):\n"
                   "    buffer = int(records.cardinality())  # the whole dataset in the buffer\n"
                   "    cached = records.cache()\n"
                   "    shuffled = cached.shuffle(buffer, seed=seed, reshuffle_each_iteration=True)\n"
                   "    return shuffled.batch(global_batch, drop_remainder=True).prefetch(2)",
         "r": "epoch_pipeline <- function(records, global_batch, seed) {\n"
              "  dataset_prefetch(\n"
              "    dataset_batch(\n"
              "      dataset_shuffle(dataset_cache(records), buffer_size = 500, seed = seed,\n"
              "                      reshuffle_each_iteration = TRUE),\n"
              "      batch_size = global_batch, drop_remainder = TRUE),\n"
              "    buffer_size = 1)\n"
              "}"},
        {"python": "def epoch_pipeline(records, global_batch, seed):  # options after the prefetch\n"
                   "    options = tf.data.Options()\n"
                   "    options.deterministic = True\n"
                   "    return (records.cache().shuffle(buffer_size=512, seed=seed)\n"
                   "            .batch(batch_size=global_batch, drop_remainder=True)\n"
                   "            .map(lambda images, labels: (images, labels))\n"
                   "            .prefetch(buffer_size=tf.data.AUTOTUNE)\n"
                   "            .with_options(options))",
         "r": "epoch_pipeline <- function(records, global_batch, seed) {  # options after the prefetch\n"
              "  options <- tf$data$Options()\n"
              "  options$deterministic <- TRUE\n"
              "  records |>\n"
              "    dataset_cache() |>\n"
              "    dataset_shuffle(256, seed = seed) |>\n"
              "    dataset_batch(global_batch, drop_remainder = TRUE) |>\n"
              "    dataset_prefetch(tf$data$AUTOTUNE) |>\n"
              "    dataset_options(options)\n"
              "}"},
    ),
    context=CONTEXT,
    needs=("keras3",),
)


# q3: every worker builds the same global batches, sharded by data ---------------------------------------

NUM_KEYS = 256  # 4 global batches of 64
NUM_WORKERS = 2
# (keys, global batch): the lesson's, and 200 keys in 4 batches of 48 and a remainder of 8.
CASES_Q3 = ((NUM_KEYS, GLOBAL_BATCH), (200, OTHER_BATCH))


def _keys_in(dataset, name):
    """The keys of a dataset of key batches, in order, as ints."""
    return [int(key) for batch in _iterate(dataset, name) for key in np.asarray(batch).reshape(-1)]


def _worker_keys(dataset, index, global_batch):
    """The keys worker ``index`` of 2 trains on: TensorFlow's auto-shard rewrite, one replica per worker."""
    from tensorflow.python.data.experimental.ops.distribute import _AutoShardDataset

    def share():
        slices = dataset.rebatch(global_batch // NUM_WORKERS)  # per-replica slices, as the strategy cuts them
        return _AutoShardDataset(slices, NUM_WORKERS, index, num_replicas=NUM_WORKERS)

    return _keys_in(call_answer(share, "TensorFlow's DATA sharding of your dataset"), "worker_dataset")


def _worker_copy(function, keys, global_batch, seed, language):
    """One worker's call of worker_dataset; Incorrect unless a dataset of global batches of keys."""
    import tensorflow as tf

    dataset = call_answer(function, "worker_dataset", keys, global_batch, seed)
    if not isinstance(dataset, tf.data.Dataset):
        raise Incorrect(f"worker_dataset returned {described(dataset, language)}, not a dataset: return the "
                        "pipeline.")
    spec = dataset.element_spec
    if not isinstance(spec, tf.TensorSpec) or not spec.dtype.is_integer:
        raise Incorrect(f"its elements are {spec}, not batches of keys: shuffle and batch the keys "
                        "themselves.")
    if spec.shape.rank != 1 or spec.shape[0] != global_batch:
        raise Incorrect(f"with global_batch = {global_batch}, its elements have the shape {spec.shape}, not "
                        f"({global_batch},): batch by global_batch with drop_remainder = {language.true}.")
    return dataset


def _check_worker_dataset(answers, language):
    import tensorflow as tf

    function = answers["worker_dataset"]
    for number, (count, global_batch) in enumerate(CASES_Q3):
        keys = tf.data.Dataset.range(count)
        worker_0 = _worker_copy(function, keys, global_batch, 7, language)
        keys.shuffle(count)  # worker 1's program makes one more random op before its pipeline
        worker_1 = _worker_copy(function, keys, global_batch, 7, language)
        policy = tf.data.experimental.AutoShardPolicy(
            worker_0.options().experimental_distribute.auto_shard_policy)
        if policy != tf.data.experimental.AutoShardPolicy.DATA:
            field = language.pick("options.experimental_distribute.auto_shard_policy", "auto_shard_policy")
            raise Incorrect(f"the dataset's auto-shard policy is {policy.name}, not DATA: set {field} in a "
                            f"tf.data Options and apply it with "
                            f"{language.pick('with_options()', 'dataset_options()')}.")
        shares = [set(_worker_keys(worker_0, 0, global_batch)), set(_worker_keys(worker_1, 1, global_batch))]
        order = _keys_in(_worker_copy(function, keys, global_batch, 7, language), "worker_dataset")
        whole = count // global_batch * global_batch
        if len(order) != whole or len(set(order)) != whole or not set(order) <= set(range(count)):
            raise Incorrect(f"with {count} keys and global_batch = {global_batch}, an epoch gave "
                            f"{len(order)} keys ({len(set(order))} different), not the {whole} of "
                            f"{count // global_batch} whole batches: shuffle the keys, then batch them, each "
                            "key once.")
        if order == sorted(order):
            raise Incorrect("the keys come in the order they are stored: shuffle them (with the seed) before "
                            "batching.")
        batches = [order[k:k + global_batch] for k in range(0, len(order), global_batch)]
        if all(max(batch) - min(batch) == global_batch - 1 for batch in batches):
            raise Incorrect("every global batch is a run of neighbouring keys: you shuffled whole batches; "
                            "shuffle the keys, then batch them.")
        on_both, on_neither = len(shares[0] & shares[1]), len(set(order) - (shares[0] | shares[1]))
        if on_both or on_neither:
            raise Incorrect(f"{on_both} keys reached both workers and {on_neither} neither: the two workers "
                            "shuffled differently; give the shuffle seed = seed, so that every worker makes the "
                            "same order.")
        if number == 0 and _keys_in(_worker_copy(function, keys, global_batch, 8, language),
                                    "worker_dataset") == order:
            raise Incorrect("seeds 7 and 8 gave the same order: give the shuffle the seed you were given, "
                            "not one of your own.")
    return ("after TensorFlow's DATA sharding the 2 workers' shares are a clean partition of the epoch: "
            "every key once.")


_OPTIONS_R = ("  options <- tf$data$Options()\n"
              "  distribute <- options$experimental_distribute\n"
              "  distribute$auto_shard_policy <-\n"
              "    import(\"tensorflow\", convert = FALSE)$data$experimental$AutoShardPolicy$DATA\n")

q3 = Exercise(
    "04", "q3", "The same order on every worker",
    answers=("worker_dataset",),
    check_answers=_check_worker_dataset,
    hints=("Under DATA sharding each worker keeps its slices by position in its own copy of the pipeline: "
           "every copy must shuffle the same way, so the shuffle needs an explicit seed.",
           {"python": "options = tf.data.Options(); options.experimental_distribute.auto_shard_policy = "
                      "tf.data.experimental.AutoShardPolicy.DATA; return keys.shuffle(1000, seed=seed)"
                      ".batch(global_batch, drop_remainder=True).with_options(options)",
            "r": "options <- tf$data$Options(); distribute <- options$experimental_distribute; "
                 "distribute$auto_shard_policy <- import(\"tensorflow\", convert = FALSE)$data$experimental"
                 "$AutoShardPolicy$DATA; then keys |> dataset_shuffle(1000, seed = seed) |> "
                 "dataset_batch(global_batch, drop_remainder = TRUE) |> dataset_options(options)"}),
    solutions={
        "python": "def worker_dataset(keys, global_batch, seed):\n"
                  "    options = tf.data.Options()\n"
                  "    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA\n"
                  "    return (keys.shuffle(1000, seed=seed)\n"
                  "            .batch(global_batch, drop_remainder=True)\n"
                  "            .with_options(options))",
        "r": "worker_dataset <- function(keys, global_batch, seed) {\n" + _OPTIONS_R +
             "  keys |>\n"
             "    dataset_shuffle(1000, seed = seed) |>\n"
             "    dataset_batch(global_batch, drop_remainder = TRUE) |>\n"
             "    dataset_options(options)\n"
             "}",
    },
    starters={"python": "worker_dataset = None  # a function of (keys, global_batch, seed)",
             "r": "worker_dataset <- NULL  # a function of (keys, global_batch, seed)"},
    wrong=(
        WrongAnswer({"python": "def worker_dataset(keys, global_batch, seed):\n"
                               "    options = tf.data.Options()\n"
                               "    options.experimental_distribute.auto_shard_policy = "
                               "tf.data.experimental.AutoShardPolicy.DATA\n"
                               "    return keys.shuffle(1000).batch(global_batch, drop_remainder=True).with_options(options)",
                     "r": "worker_dataset <- function(keys, global_batch, seed) {\n" + _OPTIONS_R +
                          "  keys |> dataset_shuffle(1000) |> dataset_batch(global_batch, drop_remainder = TRUE) |>\n"
                          "    dataset_options(options)\n"
                          "}"},
                    "the two workers shuffled differently"),
        WrongAnswer({"python": "def worker_dataset(keys, global_batch, seed):\n"
                               "    return keys.shuffle(1000, seed=seed).batch(global_batch, drop_remainder=True)",
                     "r": "worker_dataset <- function(keys, global_batch, seed) {\n"
                          "  keys |> dataset_shuffle(1000, seed = seed) |> dataset_batch(global_batch, drop_remainder = TRUE)\n"
                          "}"},
                    "auto-shard policy is AUTO, not DATA"),
        WrongAnswer({"python": "def worker_dataset(keys, global_batch, seed):\n"
                               "    options = tf.data.Options()\n"
                               "    options.experimental_distribute.auto_shard_policy = "
                               "tf.data.experimental.AutoShardPolicy.DATA\n"
                               "    return keys.shuffle(1000, seed=seed).batch(global_batch).with_options(options)",
                     "r": "worker_dataset <- function(keys, global_batch, seed) {\n" + _OPTIONS_R +
                          "  keys |> dataset_shuffle(1000, seed = seed) |> dataset_batch(global_batch) |>\n"
                          "    dataset_options(options)\n"
                          "}"},
                    "batch by global_batch with drop_remainder"),
        WrongAnswer({"python": "def worker_dataset(keys, global_batch, seed):\n"
                               "    options = tf.data.Options()\n"
                               "    options.experimental_distribute.auto_shard_policy = "
                               "tf.data.experimental.AutoShardPolicy.DATA\n"
                               "    return keys.shuffle(1000, seed=seed).batch(64, drop_remainder=True).with_options(options)",
                     "r": "worker_dataset <- function(keys, global_batch, seed) {\n" + _OPTIONS_R +
                          "  keys |> dataset_shuffle(1000, seed = seed) |> dataset_batch(64, drop_remainder = TRUE) |>\n"
                          "    dataset_options(options)\n"
                          "}"},
                    "not (48,)"),
        WrongAnswer({"python": "def worker_dataset(keys, global_batch, seed):\n"
                               "    options = tf.data.Options()\n"
                               "    options.experimental_distribute.auto_shard_policy = "
                               "tf.data.experimental.AutoShardPolicy.DATA\n"
                               "    batches = keys.batch(global_batch, drop_remainder=True)\n"
                               "    return batches.shuffle(1000, seed=seed).with_options(options)",
                     "r": "worker_dataset <- function(keys, global_batch, seed) {\n" + _OPTIONS_R +
                          "  keys |> dataset_batch(global_batch, drop_remainder = TRUE) |>\n"
                          "    dataset_shuffle(1000, seed = seed) |> dataset_options(options)\n"
                          "}"},
                    "you shuffled whole batches"),
        WrongAnswer({"python": "def worker_dataset(keys, global_batch, seed):\n"
                               "    options = tf.data.Options()\n"
                               "    options.experimental_distribute.auto_shard_policy = "
                               "tf.data.experimental.AutoShardPolicy.DATA\n"
                               "    return keys.shuffle(1000, seed=0).batch(global_batch, drop_remainder=True).with_options(options)",
                     "r": "worker_dataset <- function(keys, global_batch, seed) {\n" + _OPTIONS_R +
                          "  keys |> dataset_shuffle(1000, seed = 0) |> dataset_batch(global_batch, drop_remainder = TRUE) |>\n"
                          "    dataset_options(options)\n"
                          "}"},
                    "seeds 7 and 8 gave the same order"),
        WrongAnswer({"python": "def worker_dataset(keys, global_batch, seed):\n"
                               "    options = tf.data.Options()\n"
                               "    options.experimental_distribute.auto_shard_policy = "
                               "tf.data.experimental.AutoShardPolicy.DATA\n"
                               "    pairs = keys.map(lambda key: (key, key))\n"
                               "    return pairs.shuffle(1000, seed=seed).batch(global_batch, drop_remainder=True).with_options(options)",
                     "r": "worker_dataset <- function(keys, global_batch, seed) {\n" + _OPTIONS_R +
                          "  keys |> dataset_map(function(key) list(key, key)) |> dataset_shuffle(1000, seed = seed) |>\n"
                          "    dataset_batch(global_batch, drop_remainder = TRUE) |> dataset_options(options)\n"
                          "}"},
                    "not batches of keys"),
    ),
    right=(
        {"python": "def worker_dataset(keys, global_batch, seed):  # the options first: they hold for the whole pipeline\n"
                   "    options = tf.data.Options()\n"
                   "    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA\n"
                   "    shuffled = tf.data.Dataset.shuffle(keys.with_options(options), buffer_size=512, seed=seed)\n"
                   "    return shuffled.batch(global_batch, drop_remainder=True)",
         "r": "worker_dataset <- function(keys, global_batch, seed) {  # the options first: they hold for the whole pipeline\n"
              + _OPTIONS_R +
              "  shuffled <- dataset_shuffle(dataset_options(keys, options), buffer_size = 512, seed = seed)\n"
              "  dataset_batch(shuffled, batch_size = global_batch, drop_remainder = TRUE)\n"
              "}"},
        {"python": "def worker_dataset(keys, global_batch, seed):  # one fixed order, every epoch\n"
                   "    options = tf.data.Options()\n"
                   "    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA\n"
                   "    order = keys.shuffle(int(keys.cardinality()), seed=seed, reshuffle_each_iteration=False)\n"
                   "    return order.batch(global_batch, drop_remainder=True).prefetch(1).with_options(options)",
         "r": "worker_dataset <- function(keys, global_batch, seed) {  # one fixed order, every epoch\n" + _OPTIONS_R +
              "  keys |>\n"
              "    dataset_shuffle(length(keys), seed = seed, reshuffle_each_iteration = FALSE) |>\n"
              "    dataset_batch(global_batch, drop_remainder = TRUE) |>\n"
              "    dataset_prefetch(1) |>\n"
              "    dataset_options(options)\n"
              "}"},
    ),
    context=CONTEXT,
    needs=("keras3",),
)
