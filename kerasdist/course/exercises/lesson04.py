"""Lesson 04's checked exercises: global batches split by the strategy, a cached pipeline, workers' shares.

Each check builds real ``tf.data`` pipelines with the student's function and reads them: the
shares of 2 replicas, the reads and the order of 2 epochs, the keys 2 simulated workers train on
after TensorFlow's own auto-shard rewrite.

Example:
    >>> from kerasdist.course.exercises.lesson04 import q1
    >>> print(q1.verdict({"distribute_batches": None}))
    Not attempted: define distribute_batches (it is still None), then run the check again.
"""

import itertools

import numpy as np

from kerasdist.course.exercises.core import Exercise, Incorrect, WrongAnswer
from kerasdist.course.exercises.fixtures import call_answer, digit_batch, two_replicas

CONTEXT = {
    "python": "import tensorflow as tf",
    "r": 'library(keras3)\nlibrary(tfdatasets, exclude = "shape")\n'
         'library(tensorflow, exclude = c("shape", "set_random_seed"))\nlibrary(reticulate)',
}
GLOBAL_BATCH = 64
NUM_EXAMPLES = 200  # 3 global batches of 64 and a remainder of 8


LIMIT = 1000  # more elements than any pipeline of these checks holds: an endless one (repeat()) stops here


def _iterate(elements, name):
    """The elements of a dataset (or distributed dataset) the student built; its errors become the verdict."""
    read = call_answer(lambda: list(itertools.islice(elements, LIMIT)), f"iterating what {name} returned")
    if len(read) == LIMIT:
        raise Incorrect(f"what {name} returned never ends: leave repeat() out, fit() runs the epochs.")
    return read


# q1: distribute global batches -------------------------------------------------------------------------

def _check_distribute_batches(answers, language):
    import tensorflow as tf

    images, labels = digit_batch(NUM_EXAMPLES)
    dataset = tf.data.Dataset.from_tensor_slices((images, labels))
    strategy = two_replicas()
    result = call_answer(answers["distribute_batches"], "distribute_batches", strategy, dataset, GLOBAL_BATCH)
    distribute = language.pick("strategy.experimental_distribute_dataset()",
                               "strategy$experimental_distribute_dataset()")
    if isinstance(result, tf.data.Dataset):
        raise Incorrect(f"distribute_batches returned a tf.data dataset, which feeds one device: pass the "
                        f"batched dataset to {distribute} and return what it gives.")
    if not isinstance(result, tf.distribute.DistributedDataset):
        raise Incorrect(f"distribute_batches returned {type(result).__name__}, not a distributed dataset: "
                        f"return {distribute} of the batched dataset.")
    steps = []
    for element in _iterate(result, "distribute_batches"):
        first = tf.nest.flatten(element)[0]
        steps.append([int(part.shape[0]) for part in strategy.experimental_local_results(first)])
    whole = NUM_EXAMPLES // GLOBAL_BATCH
    share = GLOBAL_BATCH // 2
    if steps and steps[0] != [share, share]:
        batch = language.value(steps[0])
        raise Incorrect(f"the 2 replicas got {batch} examples in the first step, but a global batch of "
                        f"{GLOBAL_BATCH} gives each {share}: batch by global_batch, the strategy splits it.")
    if len(steps) > whole and sum(steps[-1]) < GLOBAL_BATCH:
        raise Incorrect(f"the last step holds only {sum(steps[-1])} examples "
                        f"({language.value(steps[-1])} per replica): batch with "
                        f"drop_remainder = {language.true} so that every step gets a whole global batch.")
    if len(steps) != whole:
        raise Incorrect(f"the {NUM_EXAMPLES} examples gave {len(steps)} steps, not {whole}: batch the dataset "
                        f"once, by global_batch, with the remainder dropped.")
    return (f"every step holds a whole global batch of {GLOBAL_BATCH}, which the strategy splits into "
            f"{share} examples per replica.")


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
    index = {row.tobytes(): key for key, row in enumerate(images)}
    return [index.get(np.asarray(row).tobytes(), -1) for batch in batches for row in batch[0]]


def _check_epoch_pipeline(answers, language):
    import tensorflow as tf

    function = answers["epoch_pipeline"]
    reads = []
    pipeline = call_answer(function, "epoch_pipeline", _counted_records(reads), GLOBAL_BATCH, 7)
    if not isinstance(pipeline, tf.data.Dataset):
        raise Incorrect(f"epoch_pipeline returned {type(pipeline).__name__}, not a dataset: return the pipeline.")
    first = [tuple(np.asarray(part) for part in batch) for batch in _iterate(pipeline, "epoch_pipeline")]
    first_reads = len(reads)
    second = [tuple(np.asarray(part) for part in batch) for batch in _iterate(pipeline, "epoch_pipeline")]
    sizes = [len(batch[1]) for batch in first]
    whole = NUM_EXAMPLES // GLOBAL_BATCH
    if sizes and sizes[0] != GLOBAL_BATCH:
        raise Incorrect(f"the first batch holds {sizes[0]} examples, not global_batch ({GLOBAL_BATCH}): "
                        "batch by the global batch.")
    if sizes != [GLOBAL_BATCH] * whole:
        raise Incorrect(f"an epoch gave batches of {language.value(sizes)} examples: batch with "
                        f"drop_remainder = {language.true}, so that every batch is a whole global batch.")
    cache = language.pick("cache()", "dataset_cache()")
    if len(reads) > first_reads:
        raise Incorrect(f"the second epoch read the records again ({len(reads) - first_reads} reads): "
                        f"{cache} them, so that only the first epoch reads.")
    order, next_order = _epoch_order(first), _epoch_order(second)
    if order == sorted(order):
        raise Incorrect("the examples come in the order they are stored: shuffle them, after the cache.")
    if order == next_order:
        raise Incorrect(f"both epochs came in the same order: the shuffle ran before {cache}, which froze "
                        "the first epoch's order, or it was told not to reshuffle each iteration; cache first, "
                        "then shuffle, so that every epoch is reshuffled.")
    again = call_answer(function, "epoch_pipeline", _counted_records([]), GLOBAL_BATCH, 7)
    other = call_answer(function, "epoch_pipeline", _counted_records([]), GLOBAL_BATCH, 8)
    again_order = _epoch_order(_iterate(again, "epoch_pipeline"))
    if again_order != order:
        raise Incorrect("two pipelines built with the same seed shuffled differently: give the shuffle "
                        "seed = seed, the function's argument.")
    if _epoch_order(_iterate(other, "epoch_pipeline")) == order:
        raise Incorrect("seeds 7 and 8 gave the same order: give the shuffle the seed you were given, "
                        "not one of your own.")
    last = pipeline
    while type(last).__name__ == "_OptionsDataset":
        last = last._input_dataset
    if type(last).__name__ != "_PrefetchDataset":
        raise Incorrect(f"the pipeline ends with {type(last).__name__.strip('_')}, not a prefetch: end it with "
                        f"{language.pick('prefetch(tf.data.AUTOTUNE)', 'dataset_prefetch()')}, so that the "
                        "next batch is prepared while the model trains.")
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
    ),
    context=CONTEXT,
    needs=("keras3",),
)


# q3: every worker builds the same global batches, sharded by data ---------------------------------------

NUM_KEYS = 256  # 4 global batches of 64
NUM_WORKERS = 2


def _worker_keys(dataset, index):
    """The keys worker ``index`` of 2 trains on: TensorFlow's auto-shard rewrite, one replica per worker."""
    from tensorflow.python.data.experimental.ops.distribute import _AutoShardDataset

    slices = dataset.rebatch(GLOBAL_BATCH // NUM_WORKERS)  # per-replica slices, as the strategy cuts them
    share = _AutoShardDataset(slices, NUM_WORKERS, index, num_replicas=NUM_WORKERS)
    return [int(key) for batch in _iterate(share, "worker_dataset") for key in np.asarray(batch)]


def _check_worker_dataset(answers, language):
    import tensorflow as tf

    function = answers["worker_dataset"]
    keys = tf.data.Dataset.range(NUM_KEYS)
    worker_0 = call_answer(function, "worker_dataset", keys, GLOBAL_BATCH, 7)
    keys.shuffle(NUM_KEYS)  # worker 1's program makes one more random op before its pipeline
    worker_1 = call_answer(function, "worker_dataset", keys, GLOBAL_BATCH, 7)
    if not isinstance(worker_0, tf.data.Dataset):
        raise Incorrect(f"worker_dataset returned {type(worker_0).__name__}, not a dataset: return the pipeline.")
    shape = worker_0.element_spec.shape
    if shape.rank != 1 or shape[0] != GLOBAL_BATCH:
        raise Incorrect(f"its elements have the shape {shape}, not ({GLOBAL_BATCH},): batch by global_batch "
                        f"with drop_remainder = {language.true}.")
    policy = tf.data.experimental.AutoShardPolicy(worker_0.options().experimental_distribute.auto_shard_policy)
    if policy != tf.data.experimental.AutoShardPolicy.DATA:
        raise Incorrect(f"the dataset's auto-shard policy is {policy.name}, not DATA: set "
                        f"{language.pick('options.experimental_distribute.auto_shard_policy', 'auto_shard_policy')}"
                        f" in a tf.data Options and apply it with {language.pick('with_options()', 'dataset_options()')}.")
    shares = [set(_worker_keys(worker_0, 0)), set(_worker_keys(worker_1, 1))]  # each worker's first epoch
    fresh = call_answer(function, "worker_dataset", keys, GLOBAL_BATCH, 7)
    order = [int(key) for batch in _iterate(fresh, "worker_dataset") for key in np.asarray(batch)]
    if order == sorted(order):
        raise Incorrect("the keys come in the order they are stored: shuffle them (with the seed) before batching.")
    batches = [order[k:k + GLOBAL_BATCH] for k in range(0, len(order), GLOBAL_BATCH)]
    if all(max(batch) - min(batch) == GLOBAL_BATCH - 1 for batch in batches):
        raise Incorrect("every global batch is a run of neighbouring keys: you shuffled whole batches; shuffle "
                        "the keys, then batch them.")
    on_both, on_neither = len(shares[0] & shares[1]), NUM_KEYS - len(shares[0] | shares[1])
    if on_both or on_neither:
        raise Incorrect(f"{on_both} keys reached both workers and {on_neither} neither: the two workers shuffled "
                        "differently; give the shuffle seed = seed, so that every worker makes the same order.")
    other = call_answer(function, "worker_dataset", keys, GLOBAL_BATCH, 8)
    if [int(key) for batch in _iterate(other, "worker_dataset") for key in np.asarray(batch)] == order:
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
    ),
    context=CONTEXT,
    needs=("keras3",),
)
