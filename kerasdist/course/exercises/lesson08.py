"""Lesson 08's checked exercises: read your own ladder, your own step timings, and the roofline's step time.

The first two checks read the student's own measurements (``runs``, ``timings``) and compare the answers
with what those numbers say, never with a fixed figure; their praise prints no number.

Example:
    >>> runs = {"fit (guide)": {"epoch_seconds": [3.0, 2.0, 2.0], "samples_per_epoch": 1000},
    ...         "kerasdist loop": {"epoch_seconds": [2.0, 1.0, 1.0], "samples_per_epoch": 1000}}
    >>> print(q1.verdict({"fastest_rung": "fit (guide)", "times_the_guide": 2.0, "runs": runs}))
    Incorrect: fastest_rung is the slowest rung of your ladder: speed holds samples/s, so the fastest rung has the largest value.
"""

import math
import statistics
from typing import Mapping

from kerasdist.course.exercises.core import Exercise, Incorrect, WrongAnswer
from kerasdist.course.exercises.fixtures import call_answer

GUIDE = "fit (guide)"

# The self-test's stand-in for a ladder (the lesson's `runs` holds the student's own): epoch seconds in
# which "kerasdist loop + XLA" is fastest and the scan epoch is not, so a hard-coded answer fails.
LADDER = {
    "python": "from kerasdist.measure import speed_ladder\n"
              "runs = {\n"
              "    'fit (guide)': {'epoch_seconds': [9.0, 6.1, 6.3], 'samples_per_epoch': 50000},\n"
              "    'kerasdist loop': {'epoch_seconds': [5.0, 2.4, 2.2], 'samples_per_epoch': 50000},\n"
              "    'kerasdist loop + XLA': {'epoch_seconds': [6.0, 1.2, 1.1], 'samples_per_epoch': 50000},\n"
              "    'JAX lax.scan epoch': {'epoch_seconds': [4.0, 1.5, 1.4], 'samples_per_epoch': 50000},\n"
              "}\n"
              "speed = {name: speed_ladder.steady_samples_per_s(run) for name, run in runs.items()}",
    "r": "runs <- list(\n"
         "  'fit (guide)' = list(epoch_seconds = c(9, 6.1, 6.3), samples_per_epoch = 50000L),\n"
         "  'kerasdist loop' = list(epoch_seconds = c(5, 2.4, 2.2), samples_per_epoch = 50000L),\n"
         "  'kerasdist loop + XLA' = list(epoch_seconds = c(6, 1.2, 1.1), samples_per_epoch = 50000L),\n"
         "  'JAX lax.scan epoch' = list(epoch_seconds = c(4, 1.5, 1.4), samples_per_epoch = 50000L)\n"
         ")\n"
         "steady_samples_per_s <- function(run) run$samples_per_epoch / median(unlist(run$epoch_seconds)[-1])\n"
         "speed <- vapply(runs, steady_samples_per_s, numeric(1))",
}


def _close(got, expected, printed=1e-9):
    """Equal to 1%, or to the precision the lesson prints (a value typed from its printout passes)."""
    return math.isclose(got, expected, rel_tol=0.01, abs_tol=printed)


def _number(value, name, language):
    """``value`` as a float, or an Incorrect that says it must be one number."""
    if isinstance(value, (list, tuple)) and len(value) == 1:
        value = value[0]
    try:
        return float(value)
    except (TypeError, ValueError):
        raise Incorrect(f"{name} is {language.value(value) if isinstance(value, str) else type(value).__name__}: "
                        "make it one number.") from None


def _name(value, name, names, language):
    """``value`` as one of ``names``, or an Incorrect that says what it must be."""
    if isinstance(value, (list, tuple)) and len(value) == 1:
        value = value[0]
    if not isinstance(value, str):
        raise Incorrect(f"{name} must be a name (a string), not {language.value(value)}: "
                        f"use {language.pick('the key', 'the name')}, not the value.")
    if value.endswith(", bfloat16") and value.removesuffix(", bfloat16") in names:
        raise Incorrect(f"{name} is {language.value(value)}, a rung of the mixed-precision section that the "
                        "cell above added to speed: choose among the ladder's rungs, the names of runs.")
    if value not in names:
        raise Incorrect(f"{name} is {language.value(value)}, which is not one of "
                        f"{language.value(sorted(names))}.")
    return value


def _steady_speeds(runs, language):
    """Each rung's steady samples/s from the student's own runs, as the lesson computes it."""
    if not isinstance(runs, Mapping) or not runs:
        raise Incorrect("runs is not the ladder's results: run the ladder's cell again, then this check.")
    speeds = {}
    for name, run in runs.items():
        seconds = run["epoch_seconds"]
        seconds = [float(s) for s in (seconds if isinstance(seconds, (list, tuple)) else [seconds])]
        if len(seconds) < 2:
            raise Incorrect(f"the rung {language.value(name)} has fewer than 2 epochs in runs: run the ladder "
                            "again with EPOCHS of at least 2.")
        speeds[name] = float(run["samples_per_epoch"]) / statistics.median(seconds[1:])
    return speeds


def _check_fastest(answers, language):
    speeds = _steady_speeds(answers["runs"], language)
    if GUIDE not in speeds:
        raise Incorrect(f"runs has no {language.value(GUIDE)} rung: run the ladder's cell again.")
    fastest = max(speeds, key=speeds.get)
    chosen = _name(answers["fastest_rung"], "fastest_rung", set(speeds), language)
    if chosen != fastest:
        if speeds[chosen] == min(speeds.values()):
            raise Incorrect("fastest_rung is the slowest rung of your ladder: speed holds samples/s, so the "
                            "fastest rung has the largest value.")
        raise Incorrect(f"in your own runs another rung trained faster than {language.value(chosen)}: take the "
                        "rung with the largest samples/s.")
    times = _number(answers["times_the_guide"], "times_the_guide", language)
    expected = speeds[fastest] / speeds[GUIDE]
    if _close(times, expected, printed=0.05):  # printed with one decimal: "5.3x the guide's"
        return "fastest_rung and times_the_guide are what your own ladder measured."
    if _close(times, 1 / expected):
        raise Incorrect("times_the_guide is the guide's speed over the fastest rung's: divide the fastest "
                        "rung's samples/s by the guide's.")
    if _close(times, 100 * expected):
        raise Incorrect("times_the_guide looks like a percentage: give the ratio itself (2 means twice as fast).")
    raise Incorrect("times_the_guide is not the fastest rung's samples/s divided by the guide's, as your own "
                    "speed holds them (compute it from speed, not from the rounded printout).")


q1 = Exercise(
    "08", "q1", "Read your ladder",
    answers=("fastest_rung", "times_the_guide", "runs"),
    check_answers=_check_fastest,
    hints=("speed maps each rung to its steady samples/s: among the ladder's rungs (the names of runs), the "
           "fastest has the largest value, and \"times the guide\" is its speed divided by the guide's.",
           {"python": "fastest_rung = max(runs, key=speed.get); times_the_guide = speed[fastest_rung] / "
                      "speed[\"fit (guide)\"]",
            "r": "fastest_rung <- names(which.max(speed[names(runs)])); times_the_guide <- "
                 "speed[[fastest_rung]] / speed[[\"fit (guide)\"]]"}),
    solutions={
        "python": "fastest_rung = max(runs, key=speed.get)\n"
                  "times_the_guide = speed[fastest_rung] / speed[\"fit (guide)\"]",
        "r": "fastest_rung <- names(which.max(speed[names(runs)]))\n"
             "times_the_guide <- speed[[fastest_rung]] / speed[[\"fit (guide)\"]]",
    },
    starters={"python": "fastest_rung = None     # the name of the fastest rung in your ladder\n"
                        "times_the_guide = None  # how many times the guide's fit() speed it reached",
             "r": "fastest_rung <- NULL     # the name of the fastest rung in your ladder\n"
                  "times_the_guide <- NULL  # how many times the guide's fit() speed it reached"},
    wrong=(
        WrongAnswer({"python": "fastest_rung = min(speed, key=speed.get)\n"
                               "times_the_guide = speed[fastest_rung] / speed[\"fit (guide)\"]",
                     "r": "fastest_rung <- names(which.min(speed))\n"
                          "times_the_guide <- speed[[fastest_rung]] / speed[[\"fit (guide)\"]]"},
                    "the slowest rung of your ladder"),
        WrongAnswer({"python": "fastest_rung = \"JAX lax.scan epoch\"\n"
                               "times_the_guide = speed[fastest_rung] / speed[\"fit (guide)\"]",
                     "r": "fastest_rung <- \"JAX lax.scan epoch\"\n"
                          "times_the_guide <- speed[[fastest_rung]] / speed[[\"fit (guide)\"]]"},
                    "another rung trained faster"),
        WrongAnswer({"python": "fastest_rung = max(speed, key=speed.get)\n"
                               "times_the_guide = speed[\"fit (guide)\"] / speed[fastest_rung]",
                     "r": "fastest_rung <- names(which.max(speed))\n"
                          "times_the_guide <- speed[[\"fit (guide)\"]] / speed[[fastest_rung]]"},
                    "the guide's speed over the fastest rung's"),
    ),
    context=LADDER,
)

PARTS = ("forward", "backward", "optimizer update", "host overhead per call", "rest (not in the parts timed alone)")

# The self-test's stand-in for the lesson's timings (milliseconds per step: median, low, high), and the
# lesson's own code for `median` and `parts`.
TIMINGS = {
    "python": "from kerasdist.measure.speed import Timing\n"
              "timings = {'input pipeline': Timing(0.21, 0.2, 0.23), 'forward': Timing(0.06, 0.05, 0.07),\n"
              "           'forward + backward': Timing(0.16, 0.15, 0.18), 'optimizer update': Timing(0.3, 0.28, 0.33),\n"
              "           'whole step': Timing(0.5, 0.48, 0.55), 'whole step, 1 per call': Timing(1.4, 1.3, 1.6),\n"
              "           'whole step, XLA': Timing(0.25, 0.24, 0.27)}\n"
              "median = {name: timing.median for name, timing in timings.items()}\n"
              "parts = {\n"
              "    'forward': median['forward'],\n"
              "    'backward': median['forward + backward'] - median['forward'],\n"
              "    'optimizer update': median['optimizer update'],\n"
              "    'host overhead per call': median['whole step, 1 per call'] - median['whole step'],\n"
              "}\n"
              "parts['rest (not in the parts timed alone)'] = max(0.0, median['whole step, 1 per call'] "
              "- sum(parts.values()))",
    "r": "timing <- function(median, low, high) c(median = median, low = low, high = high)\n"
         "timings <- list('input pipeline' = timing(0.21, 0.2, 0.23), 'forward' = timing(0.06, 0.05, 0.07),\n"
         "                'forward + backward' = timing(0.16, 0.15, 0.18),\n"
         "                'optimizer update' = timing(0.3, 0.28, 0.33), 'whole step' = timing(0.5, 0.48, 0.55),\n"
         "                'whole step, 1 per call' = timing(1.4, 1.3, 1.6),\n"
         "                'whole step, XLA' = timing(0.25, 0.24, 0.27))\n"
         "median_ms <- vapply(timings, function(timing) timing[['median']], numeric(1))\n"
         "parts <- c(\n"
         "  'forward' = median_ms[['forward']],\n"
         "  'backward' = median_ms[['forward + backward']] - median_ms[['forward']],\n"
         "  'optimizer update' = median_ms[['optimizer update']],\n"
         "  'host overhead per call' = median_ms[['whole step, 1 per call']] - median_ms[['whole step']]\n"
         ")\n"
         "parts[['rest (not in the parts timed alone)']] <- max(0, median_ms[['whole step, 1 per call']] - "
         "sum(parts))",
}


def _median_of(timing):
    """The median of one entry of the student's timings: a Timing, a named R vector (as a list) or a dict."""
    if isinstance(timing, Mapping):
        return float(timing["median"])
    if hasattr(timing, "median") and not callable(timing.median):
        return float(timing.median)
    return float(timing[0])  # Timing's and the R vector's order: median, low, high


def _check_overhead(answers, language):
    timings = answers["timings"]
    needed = ("forward", "forward + backward", "optimizer update", "whole step", "whole step, 1 per call")
    if not isinstance(timings, Mapping) or any(name not in timings for name in needed):
        raise Incorrect("timings is not the lesson's table of step timings: run the timing cell again.")
    median = {name: _median_of(timings[name]) for name in needed}
    overhead = median["whole step, 1 per call"] - median["whole step"]
    parts = {"forward": median["forward"], "backward": median["forward + backward"] - median["forward"],
             "optimizer update": median["optimizer update"], "host overhead per call": overhead}
    parts[PARTS[-1]] = max(0.0, median["whole step, 1 per call"] - sum(parts.values()))
    got = _number(answers["overhead_ms"], "overhead_ms", language)
    if not _close(got, overhead, printed=0.0005):  # printed in ms with three decimals
        if _close(got, median["whole step, 1 per call"]):
            raise Incorrect("overhead_ms is the whole step at one step per call: subtract the same step at 50 "
                            "steps per call (\"whole step\"), which pays the overhead only once per 50 steps.")
        if _close(got, overhead / 1e3) or _close(got, overhead * 1e3):
            raise Incorrect("overhead_ms is in another unit: timings hold milliseconds per step already.")
        raise Incorrect("overhead_ms is not the median of \"whole step, 1 per call\" minus the median of "
                        "\"whole step\" in your own timings.")
    largest = max(parts, key=parts.get)
    chosen = _name(answers["largest_part"], "largest_part", set(parts), language)
    if chosen != largest:
        if parts[chosen] == min(parts.values()):
            raise Incorrect("largest_part is the smallest part of your step: take the part with the most "
                            "milliseconds.")
        raise Incorrect(f"in your own timings another part takes longer than {language.value(chosen)}: take "
                        "the part of parts with the most milliseconds.")
    return "overhead_ms and largest_part are what your own timings measured."


q2 = Exercise(
    "08", "q2", "The host's overhead in your timings",
    answers=("overhead_ms", "largest_part", "timings"),
    check_answers=_check_overhead,
    hints=("The same whole step was timed at one step per call and at 50 per call: the difference per "
           "step is the host's overhead. parts holds each part's milliseconds at one step per call.",
           {"python": "overhead_ms = median[\"whole step, 1 per call\"] - median[\"whole step\"]; "
                      "largest_part = max(parts, key=parts.get)",
            "r": "overhead_ms <- median_ms[[\"whole step, 1 per call\"]] - median_ms[[\"whole step\"]]; "
                 "largest_part <- names(which.max(parts))"}),
    solutions={
        "python": "overhead_ms = median[\"whole step, 1 per call\"] - median[\"whole step\"]\n"
                  "largest_part = max(parts, key=parts.get)",
        "r": "overhead_ms <- median_ms[[\"whole step, 1 per call\"]] - median_ms[[\"whole step\"]]\n"
             "largest_part <- names(which.max(parts))",
    },
    starters={"python": "overhead_ms = None   # the host's overhead per step at one step per call, in ms\n"
                        "largest_part = None  # the name of the largest part of a step at one step per call",
             "r": "overhead_ms <- NULL   # the host's overhead per step at one step per call, in ms\n"
                  "largest_part <- NULL  # the name of the largest part of a step at one step per call"},
    wrong=(
        WrongAnswer({"python": "overhead_ms = median[\"whole step, 1 per call\"]\n"
                               "largest_part = max(parts, key=parts.get)",
                     "r": "overhead_ms <- median_ms[[\"whole step, 1 per call\"]]\n"
                          "largest_part <- names(which.max(parts))"},
                    "subtract the same step at 50 steps per call"),
        WrongAnswer({"python": "overhead_ms = median[\"whole step, 1 per call\"] - median[\"whole step\"]\n"
                               "largest_part = \"optimizer update\"",
                     "r": "overhead_ms <- median_ms[[\"whole step, 1 per call\"]] - median_ms[[\"whole step\"]]\n"
                          "largest_part <- \"optimizer update\""},
                    "another part takes longer"),
    ),
    context=TIMINGS,
)


def _attainable(kernels, flop_rate, bandwidth, bound=max):
    return sum(bound(k["flops"] / flop_rate, k["bytes"] / bandwidth) for k in kernels)


def _check_attainable(answers, language):
    import keras

    from kerasdist.measure.speed import step_kernels

    model = keras.Sequential([keras.Input(shape=(784,)), keras.layers.Dense(256, activation="relu"),
                              keras.layers.Dense(256, activation="relu"), keras.layers.Dense(10)])
    kernels = step_kernels(model, 64)
    # A ridge of 10 FLOP/byte: the last layer's products fall on the memory side, the others on the compute side.
    for flop_rate, bandwidth in ((1e11, 1e10), (4e10, 2e10), (2e11, 5e9)):
        got = _number(call_answer(answers["attainable_step_s"], "attainable_step_s", kernels, flop_rate, bandwidth),
                      f"attainable_step_s(kernels, {flop_rate:g}, {bandwidth:g})", language)
        expected = _attainable(kernels, flop_rate, bandwidth)
        if math.isclose(got, expected, rel_tol=1e-9):
            continue
        call = f"attainable_step_s(kernels, {flop_rate:g}, {bandwidth:g})"
        if math.isclose(got, sum(k["flops"] for k in kernels) / flop_rate, rel_tol=1e-9):
            raise Incorrect(f"{call} counts only the arithmetic: a kernel also has to move its bytes, so it takes "
                            "max(flops / flop_rate, bytes / bandwidth).")
        if math.isclose(got, _attainable(kernels, flop_rate, bandwidth, bound=min), rel_tol=1e-9):
            raise Incorrect(f"{call} takes each kernel's faster limit: the slower one binds, so use the max of "
                            "flops / flop_rate and bytes / bandwidth.")
        totals = (sum(k["flops"] for k in kernels) / flop_rate, sum(k["bytes"] for k in kernels) / bandwidth)
        if math.isclose(got, max(totals), rel_tol=1e-9) or math.isclose(got, sum(totals), rel_tol=1e-9):
            raise Incorrect(f"{call} applies the roofline to the whole step: apply it to each kernel, then add "
                            "the kernels' times.")
        raise Incorrect(f"{call} returned {got:.4g} s, but the kernels' max(flops / flop_rate, bytes / "
                        f"bandwidth) add up to {expected:.4g} s.")
    return "attainable_step_s adds each kernel's roofline time, the slower of its arithmetic and its memory traffic."


q3 = Exercise(
    "08", "q3", "The roofline's step time",
    answers=("attainable_step_s",),
    check_answers=_check_attainable,
    hints=("Each kernel is bound by the slower of two limits: its FLOPs at the machine's FLOP rate, and its "
           "bytes at the memory bandwidth. A step is its kernels one after the other.",
           {"python": "return sum(max(k[\"flops\"] / flop_rate, k[\"bytes\"] / bandwidth) for k in kernels)",
            "r": "sum(vapply(kernels, function(k) max(k$flops / flop_rate, k$bytes / bandwidth), numeric(1)))"}),
    solutions={
        "python": "def attainable_step_s(kernels, flop_rate, bandwidth):\n"
                  "    return sum(max(k[\"flops\"] / flop_rate, k[\"bytes\"] / bandwidth) for k in kernels)",
        "r": "attainable_step_s <- function(kernels, flop_rate, bandwidth) {\n"
             "  sum(vapply(kernels, function(k) max(k$flops / flop_rate, k$bytes / bandwidth), numeric(1)))\n"
             "}",
    },
    starters={"python": "attainable_step_s = None  # a function of (kernels, flop_rate, bandwidth), in seconds",
             "r": "attainable_step_s <- NULL  # a function of (kernels, flop_rate, bandwidth), in seconds"},
    wrong=(
        WrongAnswer({"python": "def attainable_step_s(kernels, flop_rate, bandwidth):\n"
                               "    return sum(k[\"flops\"] for k in kernels) / flop_rate",
                     "r": "attainable_step_s <- function(kernels, flop_rate, bandwidth) {\n"
                          "  sum(vapply(kernels, function(k) k$flops, numeric(1))) / flop_rate\n"
                          "}"},
                    "counts only the arithmetic"),
        WrongAnswer({"python": "def attainable_step_s(kernels, flop_rate, bandwidth):\n"
                               "    return sum(min(k[\"flops\"] / flop_rate, k[\"bytes\"] / bandwidth) for k in kernels)",
                     "r": "attainable_step_s <- function(kernels, flop_rate, bandwidth) {\n"
                          "  sum(vapply(kernels, function(k) min(k$flops / flop_rate, k$bytes / bandwidth), numeric(1)))\n"
                          "}"},
                    "the slower one binds"),
    ),
)
