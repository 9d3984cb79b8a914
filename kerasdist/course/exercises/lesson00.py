"""Lesson 00's checked exercises (R only): a mirrored strategy on n replicas, the gap between two curves.

Lesson 00 is an R notebook that drives kerasdist through its R package; its exercises have R code only.

Example:
    >>> [q.name for q in (q1, q2)], sorted(q2.solutions)
    (['q1', 'q2'], ['r'])
"""

import numpy as np

from kerasdist.course.exercises.core import Exercise, Incorrect, WrongAnswer
from kerasdist.course.exercises.fixtures import call_answer


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
            raise Incorrect(f"mirrored_on({replicas}) returned {type(strategy).__name__}, not a MirroredStrategy: "
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
    ),
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


def _check_loss_gap(answers, language):
    import pandas as pd

    frame = answers["comparison"]
    if not isinstance(frame, pd.DataFrame) or not {"level", "metric", "replicas", "index", "value"} <= set(frame):
        raise Incorrect("comparison is not the data frame that kd_compare() returned: run this section's cells "
                        "again, then the check.")
    one, two = _paired_step_losses(frame)
    if len(one) < 2:
        raise Incorrect("comparison holds fewer than 2 logged steps of both runs: run kd_compare() again with "
                        "replicas = c(1, 2), as this section does.")
    raised = frame.copy()
    target = raised.index[(raised["level"] == "step") & (raised["metric"] == "batch_loss")
                          & (raised["replicas"] == 2)][len(one) // 2]
    raised.loc[target, "value"] += 0.05
    for case, described in ((frame, "loss_gap(comparison)"),
                            (raised, "loss_gap() of your comparison with one 2-replica step's loss raised by 0.05")):
        first, second = _paired_step_losses(case)
        expected = float(np.max(np.abs(second - first)))
        got = call_answer(answers["loss_gap"], "loss_gap", case)
        if got is None:
            raise Incorrect(f"{described} returned {language.none}: compute the gap from the rows of comparison "
                            "(the data frame reaches the check without kd_compare()'s attributes).")
        values = np.asarray(got, dtype=float).ravel()
        if values.size != 1:
            raise Incorrect(f"{described} returned {values.size} values: return one number, the largest "
                            "|difference| over the steps.")
        value = float(values[0])
        if abs(value - expected) <= 1e-9 + 1e-7 * abs(expected):
            continue
        running = np.max(np.abs(np.subtract(*_paired_step_losses(case, "loss"))))
        if abs(value - running) <= 1e-9 + 1e-7 * abs(running):
            raise Incorrect(f"{described} is the gap of Keras' running mean (metric \"loss\"): compare each step's "
                            "own loss, the metric \"batch_loss\".")
        if any(abs(value - signed) <= 1e-9 + 1e-7 * abs(signed)
               for signed in (np.max(second - first), np.max(first - second))):
            raise Incorrect(f"{described} is the largest signed difference: take abs() of the differences, "
                            "since either run may be the lower one.")
        raise Incorrect(f"{described} returned {value:.3g}, but the largest |difference| between the 1- and the "
                        f"2-replica \"batch_loss\" of the same step (index) is {expected:.3g}.")
    return ("loss_gap(comparison) finds the largest per-step gap between the two runs' own batch losses, "
            "on your comparison and on a copy with one step changed.")


q2 = Exercise(
    "00", "q2", "The gap between two training curves",
    answers=("comparison", "loss_gap"),
    check_answers=_check_loss_gap,
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
    ),
    # The self-test's comparison: one short kd_compare() run, made once and kept for every case.
    context={"r": 'if (!exists(".kd_selftest_comparison", envir = globalenv())) {\n'
                  '  assign(".kd_selftest_comparison", envir = globalenv(),\n'
                  '         kd_compare(replicas = c(1, 2), epochs = 1, data = "sample", verbose = 0))\n'
                  "}\n"
                  'comparison <- get(".kd_selftest_comparison", envir = globalenv())'},
)
