"""Lesson 00's checked exercises (R only): a mirrored strategy on n replicas, the gap between two curves.

Lesson 00 is an R notebook that drives kerasdist through its R package; its exercises have R code only.

Example:
    >>> [q.name for q in (q1, q2)], sorted(q2.solutions)
    (['q1', 'q2'], ['r'])
"""

import numpy as np

from kerasdist.course.exercises.core import LESSON_STATE, Exercise, Incorrect, WrongAnswer
from kerasdist.course.exercises.fixtures import call_answer, describe, real_number


def _received(value, language):
    """What an R answer gave, as R shows it where it can (a string, a number, NULL), else its Python type."""
    if value is None:
        return language.none
    if isinstance(value, (str, int, float)) and not isinstance(value, bool) and len(str(value)) <= 60:
        return language.value(value)
    shown = describe(value)
    return shown if "\n" not in shown else f"a {type(value).__name__}"


def _device_names(names):
    """Device names reduced to their type and index ("CPU:0"), however long the names are."""
    import tensorflow as tf

    return [f"{spec.device_type}:{spec.device_index}" for spec in map(tf.DeviceSpec.from_string, names)]


def _check_mirrored_on(answers, language):
    import tensorflow as tf

    from kerasdist.devices import replica_devices

    for replicas in (2, 1):
        strategy = call_answer(answers["mirrored_on"], "mirrored_on", replicas)
        if not isinstance(strategy, tf.distribute.MirroredStrategy):
            what = type(strategy).__name__ if isinstance(strategy, tf.distribute.Strategy) else \
                _received(strategy, language)
            raise Incorrect(f"mirrored_on({replicas}) returned {what}, not a MirroredStrategy: "
                            'ask kd_strategy() for "mirrored".')
        if strategy.num_replicas_in_sync != replicas:
            raise Incorrect(f"mirrored_on({replicas}) keeps {strategy.num_replicas_in_sync} replica(s) in sync, "
                            f"not {replicas}: pass replicas = n to kd_strategy(), whose default is 1 replica.")
        wanted, used = (sorted(_device_names(names)) for names in (replica_devices(replicas),
                                                                   strategy.extended.worker_devices))
        if used != wanted:
            raise Incorrect(f"mirrored_on({replicas}) runs its replicas on {language.value(used)}, not on the "
                            f"replica devices {language.value(wanted)} that kd_simulate_devices() made.")
    return ("mirrored_on(n) gives a MirroredStrategy whose n replicas are the devices kd_simulate_devices() "
            "made, for n = 2 and n = 1.")


q1 = Exercise(
    "00", "q1", "A mirrored strategy on n replicas",
    answers=("mirrored_on",),
    check_answers=_check_mirrored_on,
    hints=('kd_strategy("mirrored", ...) builds a MirroredStrategy by its name, on the first n devices that '
           "kd_simulate_devices() made when you pass replicas = n; its default is 1 replica.",
           'Return kd_strategy("mirrored", replicas = n, verbose = FALSE) from the function.'),
    solutions={"r": 'mirrored_on <- function(n) kd_strategy("mirrored", replicas = n, verbose = FALSE)'},
    starters={"r": "mirrored_on <- NULL  # a function of (n) that returns a strategy"},
    wrong=(
        WrongAnswer({"r": 'mirrored_on <- function(n) kd_strategy("mirrored", verbose = FALSE)'},
                    "keeps 1 replica(s) in sync, not 2"),
        WrongAnswer({"r": 'mirrored_on <- function(n) kd_strategy("default", verbose = FALSE)'},
                    "not a MirroredStrategy"),
        # The lesson's 2 replicas typed in: right for n = 2 only.
        WrongAnswer({"r": 'mirrored_on <- function(n) kd_strategy("mirrored", replicas = 2, verbose = FALSE)'},
                    "keeps 2 replica(s) in sync, not 1"),
        # The right count on the wrong devices: the last n, not the first n that kd_strategy() takes.
        WrongAnswer({"r": "mirrored_on <- function(n) {\n"
                          '  names <- vapply(tf$config$list_logical_devices("CPU"), function(device) device$name, "")\n'
                          "  tf$distribute$MirroredStrategy(devices = as.list(tail(names, n)))\n"
                          "}"},
                    "not on the replica devices"),
        WrongAnswer({"r": 'mirrored_on <- function(n) "mirrored"'}, 'returned "mirrored", not a MirroredStrategy'),
    ),
    right=(
        {"r": "mirrored_on <- function(n) {\n"
              "  strategy <- kd_strategy(name = \"mirrored\", replicas = as.integer(n), verbose = FALSE)\n"
              "  strategy\n"
              "}"},
        {"r": "mirrored_on <- function(n) {\n"
              "  devices <- kd_devices()\n"
              "  chosen <- head(devices$name[devices$kind == \"logical\" & devices$mirrored], n)\n"
              "  tf$distribute$MirroredStrategy(devices = as.list(chosen))\n"
              "}"},
    ),
    context={"r": "tf <- reticulate::import(\"tensorflow\")"},
)


def _paired_step_losses(frame, metric="batch_loss"):
    """The 1- and the 2-replica losses of the same logged steps, as two aligned NumPy arrays."""
    import pandas as pd

    rows = frame[(frame["level"] == "step") & (frame["metric"] == metric)]
    if "mode" in rows:
        rows = rows[rows["mode"] == "fixed_global"]
    one = rows[rows["replicas"] == 1].set_index("index")["value"]
    two = rows[rows["replicas"] == 2].set_index("index")["value"]
    both = pd.concat([one, two], axis=1, join="inner", keys=["one", "two"]).dropna()
    return both["one"].to_numpy(float), both["two"].to_numpy(float)


def _own_comparison(columns):
    """A comparison of the check's own, with ``columns`` (those of the student's): two runs of the same
    steps, its rows shuffled (so that pairing rows by position is wrong), and each run's Keras running
    mean "loss" and epoch rows beside the steps' own "batch_loss"."""
    import pandas as pd

    rng = np.random.default_rng(0)
    rows = []
    for replicas in (1, 2):
        for index in range(1, 9):
            loss = 2.3 - 0.2 * index + (0.0 if replicas == 1 else [0.01, -0.03, 0.02, -0.06, 0.04][index % 5])
            for metric, value in (("batch_loss", loss), ("loss", loss + 0.3)):
                rows.append({"run": f"{replicas} replica(s)", "mode": "fixed_global", "replicas": replicas,
                             "global_batch_size": 64, "level": "step", "index": index, "metric": metric,
                             "value": value})
        rows.append({"run": f"{replicas} replica(s)", "mode": "fixed_global", "replicas": replicas,
                     "global_batch_size": 64, "level": "epoch", "index": 0, "metric": "loss", "value": 0.9})
    frame = pd.DataFrame(rows).iloc[rng.permutation(len(rows))].reset_index(drop=True)
    frame = frame.astype({"replicas": "int32", "index": "int32", "global_batch_size": "int32"})
    return frame[[column for column in frame if column in columns]]


def _gap_of(got, described, language):
    """The one number ``loss_gap`` returned, or an Incorrect that says what it returned instead."""
    if got is None:
        raise Incorrect(f"{described} returned {language.none}: compute the gap from the rows of comparison "
                        "(the data frame reaches the check without kd_compare()'s attributes).")
    if isinstance(got, (list, tuple, np.ndarray)) and np.size(got) != 1:
        raise Incorrect(f"{described} returned {np.size(got)} values: return one number, the largest "
                        "|difference| over the steps.")
    value = real_number(got[0] if isinstance(got, (list, tuple)) else got)
    if value is None or not np.isfinite(value):
        raise Incorrect(f"{described} returned {_received(got, language)}: return one number, the largest "
                        "|difference| over the steps.")
    return value


def _check_loss_gap(answers, language):
    import pandas as pd

    frame = answers["comparison"]
    if not isinstance(frame, pd.DataFrame) or not {"level", "metric", "replicas", "index", "value"} <= set(frame):
        raise Incorrect("comparison is not the data frame that kd_compare() returned: run this section's cells "
                        "again, then the check.")
    frame = frame.copy()
    one, two = _paired_step_losses(frame)
    if len(one) < 2:
        raise Incorrect("comparison holds fewer than 2 logged steps of both runs: run kd_compare() again with "
                        "replicas = c(1, 2), as this section does.")
    raised = frame.copy()
    target = raised.index[(raised["level"] == "step") & (raised["metric"] == "batch_loss")
                          & (raised["replicas"] == 2)][len(one) // 2]
    raised.loc[target, "value"] += 0.05
    own = _own_comparison(frame.columns)
    cases = ((frame, "loss_gap(comparison)", ""),
             (raised, "loss_gap() of your comparison with one 2-replica step's loss raised by 0.05", ""),
             (own, "loss_gap() of a comparison whose rows come in another order",
              ": pair the rows by step (index), not by their position"))
    for case, described, advice in cases:
        # The expected gaps first, from the check's own copy (the answer gets another).
        first, second = _paired_step_losses(case)
        expected = float(np.max(np.abs(second - first)))
        running = float(np.max(np.abs(np.subtract(*_paired_step_losses(case, "loss")))))
        signed = (float(np.max(second - first)), float(np.max(first - second)))
        value = _gap_of(call_answer(answers["loss_gap"], "loss_gap", case.copy()), described, language)
        if abs(value - expected) <= 1e-9 + 1e-7 * abs(expected):
            continue
        if abs(value - running) <= 1e-9 + 1e-7 * abs(running):
            raise Incorrect(f"{described} is the gap of Keras' running mean (metric \"loss\"): compare each step's "
                            "own loss, the metric \"batch_loss\".")
        if any(abs(value - gap) <= 1e-9 + 1e-7 * abs(gap) for gap in signed):
            raise Incorrect(f"{described} is the largest signed difference: take abs() of the differences, "
                            "since either run may be the lower one.")
        raise Incorrect(f"{described} returned {value:.3g}, but the largest |difference| between the 1- and the "
                        f"2-replica \"batch_loss\" of the same step (index) is {expected:.3g}{advice}.")
    return ("loss_gap(comparison) finds the largest per-step gap between the two runs' own batch losses, "
            "on your comparison and on a copy with one step changed.")


q2 = Exercise(
    "00", "q2", "The gap between two training curves",
    answers=("comparison", "loss_gap"),
    check_answers=_check_loss_gap,
    needs=(LESSON_STATE,),  # its answer reads what the lesson computed
    hints=('Keep the rows whose level is "step" and metric is "batch_loss" (each batch\'s own loss, not '
           'Keras\' running mean "loss"), then pair the 1- and the 2-replica rows of the same step (index).',
           'steps <- comparison[comparison$level == "step" & comparison$metric == "batch_loss", ]; '
           'paired <- merge(steps[steps$replicas == 1, ], steps[steps$replicas == 2, ], by = "index"); '
           "return max(abs(paired$value.x - paired$value.y))."),
    solutions={"r": "loss_gap <- function(comparison) {\n"
                    '  steps <- comparison[comparison$level == "step" & comparison$metric == "batch_loss", ]\n'
                    '  paired <- merge(steps[steps$replicas == 1, ], steps[steps$replicas == 2, ], by = "index")\n'
                    "  max(abs(paired$value.x - paired$value.y))\n"
                    "}"},
    starters={"r": "loss_gap <- NULL  # a function of (comparison) that returns one number"},
    wrong=(
        WrongAnswer({"r": "loss_gap <- function(comparison) {\n"
                          '  steps <- comparison[comparison$level == "step" & comparison$metric == "loss", ]\n'
                          '  paired <- merge(steps[steps$replicas == 1, ], steps[steps$replicas == 2, ], by = "index")\n'
                          "  max(abs(paired$value.x - paired$value.y))\n"
                          "}"},
                    "running mean"),
        WrongAnswer({"r": "loss_gap <- function(comparison) {\n"
                          '  steps <- comparison[comparison$level == "step" & comparison$metric == "batch_loss", ]\n'
                          '  paired <- merge(steps[steps$replicas == 1, ], steps[steps$replicas == 2, ], by = "index")\n'
                          "  max(paired$value.x - paired$value.y)\n"
                          "}"},
                    "take abs()"),
        WrongAnswer({"r": 'loss_gap <- function(comparison) attr(comparison, "max_abs_loss_difference")$fixed_global$step'},
                    "without kd_compare()'s attributes"),
        # Right while both runs log the same steps in the same order, as kd_compare()'s do.
        WrongAnswer({"r": "loss_gap <- function(comparison) {\n"
                          '  steps <- comparison[comparison$level == "step" & comparison$metric == "batch_loss", ]\n'
                          "  one <- steps$value[steps$replicas == 1]\n"
                          "  two <- steps$value[steps$replicas == 2]\n"
                          "  max(abs(one - two))\n"
                          "}"},
                    "not by their position"),
        # The gap typed from the printout of this run.
        WrongAnswer({"r": "loss_gap <- function(comparison) 0.0123"}, "of the same step (index) is"),
        WrongAnswer({"r": "loss_gap <- function(comparison) {\n"
                          '  steps <- comparison[comparison$level == "step" & comparison$metric == "batch_loss", ]\n'
                          '  paired <- merge(steps[steps$replicas == 1, ], steps[steps$replicas == 2, ], by = "index")\n'
                          "  abs(paired$value.x - paired$value.y)\n"
                          "}"},
                    "return one number"),
    ),
    right=(
        {"r": "loss_gap <- function(comparison) {\n"
              '  steps <- subset(comparison, level == "step" & metric == "batch_loss", c(index, replicas, value))\n'
              '  wide <- reshape(steps, idvar = "index", timevar = "replicas", direction = "wide")\n'
              "  max(abs(wide$value.1 - wide$value.2), na.rm = TRUE)\n"
              "}"},
        {"r": "loss_gap <- function(comparison) {\n"
              '  steps <- comparison[comparison$level == "step" & comparison$metric == "batch_loss", ]\n'
              "  one <- steps[steps$replicas == 1, ]\n"
              "  two <- steps[steps$replicas == 2, ]\n"
              "  both <- intersect(one$index, two$index)\n"
              "  max(abs(one$value[match(both, one$index)] - two$value[match(both, two$index)]))\n"
              "}"},
    ),
    # The self-test's comparison: one short kd_compare() run, made once and kept for every case.
    context={"r": 'if (!exists(".kd_selftest_comparison", envir = globalenv())) {\n'
                  '  assign(".kd_selftest_comparison", envir = globalenv(),\n'
                  '         kd_compare(replicas = c(1, 2), epochs = 1, data = "sample", verbose = 0))\n'
                  "}\n"
                  'comparison <- get(".kd_selftest_comparison", envir = globalenv())'},
)
