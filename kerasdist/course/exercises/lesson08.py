"""Lesson 08's checked exercises: read your own ladder, your own step timings, and the roofline's step time.

The first two checks compare the answers with the student's own measurements, never with a fixed figure,
and their praise prints no number. They read kerasdist's own record of what it measured in this session
(``speed_ladder.measured``, ``speed.measured_timings``), so that redefining ``runs`` or ``timings`` in the
notebook changes nothing they check; where kerasdist measured nothing (the rungs and the timings that the
R lesson measures in R itself) they read the student's ``runs`` and ``timings``, once their shape is checked.

Example:
    >>> print(q3.verdict({"attainable_step_s": lambda kernels, flop_rate, bandwidth: 0.0}))
    Incorrect: attainable_step_s(kernels, 1e+11, 1e+10) returned 0 s, but the kernels' max(flops / flop_rate, bytes / bandwidth) add up to 0.000789 s.
"""

import math
import statistics
from types import SimpleNamespace
from typing import Mapping

import numpy as np

from kerasdist.course.exercises.core import LESSON_STATE, Exercise, Incorrect, WrongAnswer
from kerasdist.course.exercises.fixtures import a_number, call_answer, real_number, received, scalar
from kerasdist.measure.speed import measured_timings, step_breakdown, step_kernels

GUIDE = "fit (guide)"
STEPS_PER_CALL = 50  # speed_ladder.STEPS_PER_CALL (that module loads Keras, which this one must not)

# The self-test's stand-in for a ladder (the lesson's `runs` holds the student's own): epoch seconds in
# which "kerasdist loop + XLA" is fastest and the scan epoch is not, so a hard-coded answer fails. Like
# measure(), it leaves kerasdist's record of each rung; in R only the rungs that measure() runs there
# (the R lesson times the fit() rungs in keras3 itself).
LADDER = {
    "python": "from kerasdist.measure import speed_ladder\n"
              "runs = {\n"
              "    'fit (guide)': {'epoch_seconds': [9.0, 6.1, 6.3], 'samples_per_epoch': 50000},\n"
              "    'kerasdist loop': {'epoch_seconds': [5.0, 2.4, 2.2], 'samples_per_epoch': 50000},\n"
              "    'kerasdist loop + XLA': {'epoch_seconds': [6.0, 1.2, 1.1], 'samples_per_epoch': 50000},\n"
              "    'JAX lax.scan epoch': {'epoch_seconds': [4.0, 1.5, 1.4], 'samples_per_epoch': 50000},\n"
              "}\n"
              "for name, run in runs.items():\n"
              "    speed_ladder._remember(name, run)\n"
              "speed = {name: speed_ladder.steady_samples_per_s(run) for name, run in runs.items()}",
    "r": "runs <- list(\n"
         "  'fit (guide)' = list(epoch_seconds = c(9, 6.1, 6.3), samples_per_epoch = 50000L),\n"
         "  'kerasdist loop' = list(epoch_seconds = c(5, 2.4, 2.2), samples_per_epoch = 50000L),\n"
         "  'kerasdist loop + XLA' = list(epoch_seconds = c(6, 1.2, 1.1), samples_per_epoch = 50000L),\n"
         "  'JAX lax.scan epoch' = list(epoch_seconds = c(4, 1.5, 1.4), samples_per_epoch = 50000L)\n"
         ")\n"
         "speed_ladder <- reticulate::import('kerasdist.measure.speed_ladder')\n"
         "for (name in setdiff(names(runs), 'fit (guide)')) speed_ladder[['_remember']](name, runs[[name]])\n"
         "steady_samples_per_s <- function(run) run$samples_per_epoch / median(unlist(run$epoch_seconds)[-1])\n"
         "speed <- vapply(runs, steady_samples_per_s, numeric(1))",
}


def _close(got, expected, printed=1e-9):
    """Equal to 1%, or to the precision the lesson prints (a value typed from its printout passes)."""
    return math.isclose(got, expected, rel_tol=0.01, abs_tol=printed)


def _name(value, name, names, language):
    """``value`` as one of ``names``, or an Incorrect that says what it must be."""
    value = scalar(value)
    if not isinstance(value, str):
        raise Incorrect(f"{name} must be a name (a string), not {received(value, language)}: "
                        f"use {language.pick('the key', 'the name')}, not the value.")
    if value.endswith(", bfloat16") and value.removesuffix(", bfloat16") in names:
        raise Incorrect(f"{name} is {language.value(value)}, a rung of the mixed-precision section that the "
                        "cell above added to speed: choose among the ladder's rungs, the names of runs.")
    if value not in names:
        raise Incorrect(f"{name} is {language.value(value[:60])}, which is not one of "
                        f"{language.value(sorted(names))}.")
    return value


def _item(name, language):
    """How the student's language writes one element of a named list: runs['x'] or runs[["x"]]."""
    return language.pick(f"[{name!r}]", f'[["{name}"]]')


def _steady(run, where, language):
    """A rung's steady samples/s (its median epoch after the first), or an Incorrect about ``run``."""
    again = (f"{where} is not one rung's result (its epoch_seconds and samples_per_epoch): run the ladder's "
             "cell again, then this check.")
    if not isinstance(run, Mapping) or "epoch_seconds" not in run or "samples_per_epoch" not in run:
        raise Incorrect(again)
    try:
        seconds = np.atleast_1d(np.asarray(run["epoch_seconds"], dtype="float64")).ravel()
    except (TypeError, ValueError):
        raise Incorrect(again) from None
    samples = real_number(run["samples_per_epoch"])
    if samples is None or not samples > 0 or not np.all(np.isfinite(seconds) & (seconds > 0)):
        raise Incorrect(again)
    if seconds.size < 2:
        raise Incorrect(f"{where} has fewer than 2 epochs: run the ladder again with EPOCHS of at least 2.")
    return samples / statistics.median(seconds[1:].tolist())


def _ladder_speeds(runs, language):
    """Each rung's steady samples/s, from kerasdist's record where measure() ran the rung in this session,
    else from the student's ``runs``; and the rungs whose ``runs`` entry is not what measure() returned."""
    from kerasdist.measure import speed_ladder

    runs = runs if isinstance(runs, Mapping) else {}
    speeds, changed = {}, []
    for name in speed_ladder.RUNGS:
        mine = runs.get(name)
        recorded = [_steady(run, f"the ladder's {name!r}", language) for run in speed_ladder.measured(name)]
        if not recorded:
            if mine is not None:
                speeds[name] = _steady(mine, f"runs{_item(name, language)}", language)
            continue
        try:
            own = None if mine is None else _steady(mine, "", language)
        except Incorrect:
            own = math.nan
        matching = [speed for speed in recorded if own is not None and math.isclose(speed, own, rel_tol=1e-9)]
        speeds[name] = matching[-1] if matching else recorded[-1]
        if mine is not None and not matching:
            changed.append(name)
    if GUIDE not in speeds or len(speeds) < 2:
        raise Incorrect(f"runs is not the ladder's results (it needs the {language.value(GUIDE)} rung and at "
                        "least one more): run the ladder's cell again, then this check.")
    return speeds, changed


def _check_fastest(answers, language):
    speeds, changed = _ladder_speeds(answers["runs"], language)
    fastest = max(speeds, key=speeds.get)
    expected = speeds[fastest] / speeds[GUIDE]
    chosen = _name(answers["fastest_rung"], "fastest_rung", set(speeds), language)
    times = a_number(answers["times_the_guide"], "times_the_guide", language)
    if chosen == fastest and _close(times, expected, printed=0.05):  # printed with one decimal: "5.3x"
        return "fastest_rung and times_the_guide are what your own ladder measured."
    if changed:
        raise Incorrect(f"runs{_item(changed[0], language)} is not what the ladder measured for that rung in "
                        "this session, and the check reads the ladder's own record: run the ladder's cell "
                        "again (it makes runs), then your answer, then this check.")
    if chosen != fastest:
        if speeds[chosen] == min(speeds.values()):
            raise Incorrect("fastest_rung is the slowest rung of your ladder: speed holds samples/s, so the "
                            "fastest rung has the largest value.")
        raise Incorrect(f"in your own runs another rung trained faster than {language.value(chosen)}: take the "
                        "rung with the largest samples/s.")
    if _close(times, 1 / expected):
        raise Incorrect("times_the_guide is the guide's speed over the fastest rung's: divide the fastest "
                        "rung's samples/s by the guide's.")
    if _close(times, 100 * expected) or _close(times, 100 * (expected - 1)):
        raise Incorrect("times_the_guide looks like a percentage: give the ratio itself (2 means twice as fast).")
    raise Incorrect("times_the_guide is not the fastest rung's samples/s divided by the guide's, as your own "
                    "speed holds them (compute it from speed, not from the rounded printout).")


q1 = Exercise(
    "08", "q1", "Read your ladder",
    answers=("fastest_rung", "times_the_guide", "runs"),
    check_answers=_check_fastest,
    needs=(LESSON_STATE,),  # its answer reads what the lesson computed
    reads=("runs",),  # kerasdist keeps its own record of them: runs may be rebound
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
        # A rung typed from another machine's ladder (the lesson's text names the scan epoch as the limit).
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
        # The truth taken from the notebook: runs changed so that the answer fits it, not the measurement.
        WrongAnswer({"python": "runs['JAX lax.scan epoch']['epoch_seconds'] = [4.0, 0.5, 0.5]\n"
                               "speed = {name: speed_ladder.steady_samples_per_s(run) for name, run in runs.items()}\n"
                               "fastest_rung = max(runs, key=speed.get)\n"
                               "times_the_guide = speed[fastest_rung] / speed[\"fit (guide)\"]",
                     "r": "runs[[\"JAX lax.scan epoch\"]]$epoch_seconds <- c(4, 0.5, 0.5)\n"
                          "speed <- vapply(runs, steady_samples_per_s, numeric(1))\n"
                          "fastest_rung <- names(which.max(speed[names(runs)]))\n"
                          "times_the_guide <- speed[[fastest_rung]] / speed[[\"fit (guide)\"]]"},
                    "is not what the ladder measured for that rung"),
        WrongAnswer({"python": "fastest_rung = max(runs, key=speed.get)\n"
                               "times_the_guide = f\"{speed[fastest_rung] / speed['fit (guide)']:.1f}x\"",
                     "r": "fastest_rung <- names(which.max(speed[names(runs)]))\n"
                          "times_the_guide <- sprintf(\"%.1fx\", speed[[fastest_rung]] / speed[[\"fit (guide)\"]])"},
                    "make it one number"),
        WrongAnswer({"python": "fastest_rung = max(runs, key=speed.get)\n"
                               "times_the_guide = round(speed[fastest_rung] / speed[\"fit (guide)\"])",
                     "r": "fastest_rung <- names(which.max(speed[names(runs)]))\n"
                          "times_the_guide <- round(speed[[fastest_rung]] / speed[[\"fit (guide)\"]])"},
                    "not from the rounded printout"),
    ),
    right=(
        # The check reads kerasdist's own record of the run: rebinding the lesson's variable changes nothing.
        {"python": "fastest_rung = max(runs, key=speed.get)\n"
                   "times_the_guide = speed[fastest_rung] / speed[\"fit (guide)\"]\n"
                   "runs = None"},
        {"python": "import pandas as pd\n"
                   "steady = pd.Series({name: run['samples_per_epoch'] / statistics.median(run['epoch_seconds'][1:])\n"
                   "                    for name, run in runs.items()})\n"
                   "fastest_rung = steady.idxmax()\n"
                   "times_the_guide = steady.max() / steady['fit (guide)']",
         "r": "fastest_rung <- names(sort(speed[names(runs)], decreasing = TRUE))[1]\n"
              "times_the_guide <- max(speed[names(runs)]) / speed[\"fit (guide)\"]"},
        {"python": "ranked = sorted(runs, key=lambda name: speed[name], reverse=True)\n"
                   "fastest_rung = ranked[0]\n"
                   "times_the_guide = round(np.float32(speed[ranked[0]] / speed['fit (guide)']), 2)",
         "r": "steady <- sapply(runs, function(run) run$samples_per_epoch / median(run$epoch_seconds[-1]))\n"
              "fastest_rung <- names(steady)[steady == max(steady)]\n"
              "times_the_guide <- round(steady[[fastest_rung]] / steady[[\"fit (guide)\"]], 1)"},
    ),
    context={"python": LADDER["python"] + "\nimport statistics\nimport numpy as np", "r": LADDER["r"]},
)

NEEDED = ("forward", "forward + backward", "optimizer update", "whole step", "whole step, 1 per call")

# The self-test's stand-in for the lesson's timings (milliseconds per step: median, low, high), and the
# lesson's own code for `median` and `parts`. In Python it makes them as the lesson does, from seconds per
# call that time_calls would have returned (and recorded); the R lesson times its calls in R itself.
_SECONDS_PER_CALL = {"input pipeline": "(0.0109, 0.0104, 0.012)", "forward": "(0.003, 0.0025, 0.0035)",
                     "forward + backward": "(0.008, 0.0075, 0.009)", "optimizer update": "(0.015, 0.014, 0.0165)",
                     "whole step": "(0.025, 0.024, 0.0275)", "whole step, 1 per call": "(0.07, 0.065, 0.08)",
                     "whole step, XLA": "(0.0125, 0.012, 0.0135)"}
TIMINGS = {
    "python": "from kerasdist.measure import speed\n"
              "from kerasdist.measure.speed import Timing\n"
              "STEPS_PER_CALL = 50\n"
              "def per_step_ms(timing, steps):\n"
              "    return Timing(*(seconds / steps * 1e3 for seconds in timing))\n"
              "timings = {  # milliseconds per step\n"
              + "".join(f"    {name!r}: per_step_ms(speed._remember(Timing{seconds}), "
                        f"{52 if name == 'input pipeline' else 'STEPS_PER_CALL'}),\n"
                        for name, seconds in _SECONDS_PER_CALL.items())
              + "}\n"
              "median = {name: timing.median for name, timing in timings.items()}\n"
              "parts = speed.step_breakdown(median)",
    "r": "timing <- function(median, low, high) c(median = median, low = low, high = high)\n"
         "timings <- list('input pipeline' = timing(0.21, 0.2, 0.23), 'forward' = timing(0.06, 0.05, 0.07),\n"
         "                'forward + backward' = timing(0.16, 0.15, 0.18),\n"
         "                'optimizer update' = timing(0.3, 0.28, 0.33), 'whole step' = timing(0.5, 0.48, 0.55),\n"
         "                'whole step, 1 per call' = timing(1.4, 1.3, 1.6),\n"
         "                'whole step, XLA' = timing(0.25, 0.24, 0.27))\n"
         "median_ms <- vapply(timings, function(timing) timing[['median']], numeric(1))\n"
         "parts <- c(  # as kerasdist's step_breakdown makes them\n"
         "  'forward' = median_ms[['forward']],\n"
         "  'backward' = median_ms[['forward + backward']] - median_ms[['forward']],\n"
         "  'optimizer update' = median_ms[['whole step']] - median_ms[['forward + backward']],\n"
         "  'host overhead per call' = median_ms[['whole step, 1 per call']] - median_ms[['whole step']]\n"
         ")",
}


def _timing_of(timing):
    """(median, low, high) of one entry of timings (a Timing, a named R vector as a list, or a dict), or None."""
    if isinstance(timing, Mapping):
        values = [timing.get(key) for key in ("median", "low", "high")]
    elif isinstance(timing, (tuple, list, np.ndarray)) and len(timing) == 3:
        values = list(timing)  # Timing's and the R vector's order: median, low, high
    else:
        return None
    values = [real_number(value) for value in values]
    if any(value is None or not math.isfinite(value) for value in values):
        return None
    return tuple(values)


def _step_medians(timings, language):
    """The medians (ms per step) of the timings the exercise needs: the student's ``timings``, which in Python
    must be what kerasdist's time_calls measured in this session (its record); or an Incorrect."""
    if not isinstance(timings, Mapping) or any(name not in timings for name in NEEDED):
        raise Incorrect("timings is not the lesson's table of step timings: run the timing cell again, then "
                        "this check.")
    found = {name: _timing_of(timings[name]) for name in NEEDED}
    for name, timing in found.items():
        if timing is None:
            raise Incorrect(f"timings{_item(name, language)} is not one timing (its median, low and high "
                            "milliseconds): run the timing cell again, then this check.")
    # The Python lesson's timings are time_calls' seconds per call, per step and in ms; the R lesson times
    # its calls in R itself, which kerasdist does not see.
    recorded = [tuple(seconds / STEPS_PER_CALL * 1e3 for seconds in timing) for timing in measured_timings()]
    if language.name == "python" and recorded:
        for name, timing in found.items():
            if not any(all(math.isclose(a, b, rel_tol=1e-9) for a, b in zip(timing, measured))
                       for measured in recorded):
                raise Incorrect(f"timings{_item(name, language)} is not what kerasdist timed in this "
                                "session, and the check reads kerasdist's own record: run the timing cell "
                                "again (it makes timings), then this check.")
    return {name: timing[0] for name, timing in found.items()}


def _check_overhead(answers, language):
    median = _step_medians(answers["timings"], language)
    overhead = median["whole step, 1 per call"] - median["whole step"]
    parts = step_breakdown(median)
    got = a_number(answers["overhead_ms"], "overhead_ms", language)
    if not _close(got, overhead, printed=0.0005):  # printed in ms with three decimals
        if _close(got, median["whole step, 1 per call"]):
            raise Incorrect("overhead_ms is the whole step at one step per call: subtract the same step at 50 "
                            "steps per call (\"whole step\"), which pays the overhead only once per 50 steps.")
        if _close(got, overhead / 1e3) or _close(got, overhead * 1e3):
            raise Incorrect("overhead_ms is in another unit: timings hold milliseconds per step already.")
        if _close(got, -overhead):
            raise Incorrect("overhead_ms is negative: subtract the whole step at 50 steps per call from the one "
                            "at one step per call, not the other way round.")
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
    needs=(LESSON_STATE,),  # its answer reads what the lesson computed
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
        # A part typed from another machine's printout.
        WrongAnswer({"python": "overhead_ms = median[\"whole step, 1 per call\"] - median[\"whole step\"]\n"
                               "largest_part = \"optimizer update\"",
                     "r": "overhead_ms <- median_ms[[\"whole step, 1 per call\"]] - median_ms[[\"whole step\"]]\n"
                          "largest_part <- \"optimizer update\""},
                    "another part takes longer"),
        # The truth taken from the notebook: timings changed by hand (in R, to a bare number).
        WrongAnswer({"python": "timings['whole step'] = Timing(1.2, 1.1, 1.3)\n"
                               "overhead_ms = timings['whole step, 1 per call'].median - timings['whole step'].median\n"
                               "largest_part = max(parts, key=parts.get)",
                     "r": "timings[[\"whole step\"]] <- 1.2\n"
                          "overhead_ms <- median_ms[[\"whole step, 1 per call\"]] - 1.2\n"
                          "largest_part <- names(which.max(parts))"},
                    "run the timing cell again"),
        WrongAnswer({"python": "overhead_ms = (median[\"whole step, 1 per call\"] - median[\"whole step\"]) / 1e3\n"
                               "largest_part = max(parts, key=parts.get)",
                     "r": "overhead_ms <- (median_ms[[\"whole step, 1 per call\"]] - median_ms[[\"whole step\"]]) / 1e3\n"
                          "largest_part <- names(which.max(parts))"},
                    "in another unit"),
        WrongAnswer({"python": "overhead_ms = median[\"whole step, 1 per call\"] - median[\"whole step\"]\n"
                               "largest_part = max(parts.values())",
                     "r": "overhead_ms <- median_ms[[\"whole step, 1 per call\"]] - median_ms[[\"whole step\"]]\n"
                          "largest_part <- max(parts)"},
                    "must be a name"),
    ),
    right=(
        {"python": "overhead_ms = timings['whole step, 1 per call'].median - timings['whole step'].median\n"
                   "largest_part = max(parts.items(), key=lambda item: item[1])[0]",
         "r": "overhead_ms <- diff(median_ms[c(\"whole step\", \"whole step, 1 per call\")])\n"
              "largest_part <- names(parts)[which.max(parts)]"},
        {"python": "overhead_ms = np.float32(np.subtract(timings['whole step, 1 per call'][0], timings['whole step'][0]))\n"
                   "largest_part = sorted(parts, key=parts.get)[-1]",
         "r": "overhead_ms <- round(timings[[\"whole step, 1 per call\"]][[\"median\"]] - timings[[\"whole step\"]][[\"median\"]], 3)\n"
              "largest_part <- names(sort(parts, decreasing = TRUE))[1]"},
    ),
    context={"python": TIMINGS["python"] + "\nimport numpy as np", "r": TIMINGS["r"]},
)


def _kernels(sizes, batch_size):
    """``step_kernels`` of a stack of Dense layers of ``sizes`` at ``batch_size`` (it reads only their shapes)."""
    layers = [SimpleNamespace(kernel=SimpleNamespace(shape=shape)) for shape in zip(sizes, sizes[1:])]
    return step_kernels(SimpleNamespace(layers=layers), batch_size)


def _attainable(kernels, flop_rate, bandwidth, bound=max):
    return sum(bound(k["flops"] / flop_rate, k["bytes"] / bandwidth) for k in kernels)


# (layer sizes, batch, FLOP/s, bytes/s): the lesson's MLP at batch 64 on a ridge of 10 FLOP/byte (its last
# layer's products fall on the memory side, the others on the compute side) and two others; then another
# model at another batch, whose ridge of 5 FLOP/byte splits its products too.
ROOFLINE_CASES = (((784, 256, 256, 10), 64, 1e11, 1e10), ((784, 256, 256, 10), 64, 4e10, 2e10),
                  ((784, 256, 256, 10), 64, 2e11, 5e9), ((100, 300, 7), 24, 5e9, 1e9))


# What typical wrong answers compute instead of the roofline's time, and what to tell them.
_MISREADINGS = (
    (lambda kernels, flop_rate, bandwidth: [sum(k["flops"] for k in kernels) / flop_rate],
     "counts only the arithmetic: a kernel also has to move its bytes, so it takes max(flops / flop_rate, "
     "bytes / bandwidth)."),
    (lambda kernels, flop_rate, bandwidth: [_attainable(kernels, flop_rate, bandwidth, bound=min)],
     "takes each kernel's faster limit: the slower one binds, so use the max of flops / flop_rate and "
     "bytes / bandwidth."),
    # Adding arithmetic and memory times kernel by kernel gives the same number as adding them over the whole
    # step: one message for both.
    (lambda kernels, flop_rate, bandwidth: [_attainable(kernels, flop_rate, bandwidth, bound=lambda a, b: a + b)],
     "adds arithmetic and memory times: they overlap, so a kernel takes the slower of the two, their max "
     "(kernel by kernel, then add the kernels' times)."),
    (lambda kernels, flop_rate, bandwidth: [
        max(sum(k["flops"] for k in kernels) / flop_rate, sum(k["bytes"] for k in kernels) / bandwidth)],
     "applies the roofline to the whole step: apply it to each kernel, then add the kernels' times."),
    (lambda kernels, flop_rate, bandwidth: [1e3 * _attainable(kernels, flop_rate, bandwidth),
                                            1e6 * _attainable(kernels, flop_rate, bandwidth)],
     "is in milliseconds or microseconds: flop_rate is in FLOP/s and bandwidth in bytes/s, so the step "
     "takes seconds."),
)
# Equal up to float32 rounding (a tensor's scalar passes).
_REL_TOL = 1e-6


def _check_attainable(answers, language):
    calls = []
    for sizes, batch_size, flop_rate, bandwidth in ROOFLINE_CASES:
        kernels = _kernels(sizes, batch_size)
        # The expected values first, from the check's own kernels (the answer gets a copy).
        expected = _attainable(kernels, flop_rate, bandwidth)
        misread = [misreading(kernels, flop_rate, bandwidth) for misreading, _ in _MISREADINGS]
        named = "kernels" if sizes == ROOFLINE_CASES[0][0] else \
            f"the kernels of a {'-'.join(map(str, sizes))} MLP at batch {batch_size}"
        call = f"attainable_step_s({named}, {flop_rate:g}, {bandwidth:g})"
        got = call_answer(answers["attainable_step_s"], "attainable_step_s", kernels, flop_rate, bandwidth)
        calls.append((call, a_number(got, call, language), expected, misread))
    wrong = [(call, got, expected) for call, got, expected, _ in calls if not math.isclose(got, expected, rel_tol=_REL_TOL)]
    if not wrong:
        return ("attainable_step_s adds each kernel's roofline time, the slower of its arithmetic and its memory "
                "traffic.")
    call, got, expected = wrong[0]
    for index, (_, message) in enumerate(_MISREADINGS):  # a misreading that explains every call's result
        if all(any(math.isclose(answer, value, rel_tol=_REL_TOL) for value in misread[index])
               for _, answer, _, misread in calls):
            raise Incorrect(f"{call} {message}")
    raise Incorrect(f"{call} returned {got:.4g} s, but the kernels' max(flops / flop_rate, bytes / "
                    f"bandwidth) add up to {expected:.4g} s.")


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
        WrongAnswer({"python": "def attainable_step_s(kernels, flop_rate, bandwidth):\n"
                               "    flops = sum(k['flops'] for k in kernels)\n"
                               "    moved = sum(k['bytes'] for k in kernels)\n"
                               "    return max(flops / flop_rate, moved / bandwidth)",
                     "r": "attainable_step_s <- function(kernels, flop_rate, bandwidth) {\n"
                          "  flops <- sum(vapply(kernels, function(k) k$flops, numeric(1)))\n"
                          "  moved <- sum(vapply(kernels, function(k) k$bytes, numeric(1)))\n"
                          "  max(flops / flop_rate, moved / bandwidth)\n"
                          "}"},
                    "applies the roofline to the whole step"),
        WrongAnswer({"python": "def attainable_step_s(kernels, flop_rate, bandwidth):\n"
                               "    return sum(k['flops'] / flop_rate + k['bytes'] / bandwidth for k in kernels)",
                     "r": "attainable_step_s <- function(kernels, flop_rate, bandwidth) {\n"
                          "  sum(vapply(kernels, function(k) k$flops / flop_rate + k$bytes / bandwidth, numeric(1)))\n"
                          "}"},
                    "adds arithmetic and memory times"),
        # The lesson's first bandwidth typed in: right at 1e10 bytes/s only.
        WrongAnswer({"python": "def attainable_step_s(kernels, flop_rate, bandwidth):\n"
                               "    return sum(max(k['flops'] / flop_rate, k['bytes'] / 1e10) for k in kernels)",
                     "r": "attainable_step_s <- function(kernels, flop_rate, bandwidth) {\n"
                          "  sum(vapply(kernels, function(k) max(k$flops / flop_rate, k$bytes / 1e10), numeric(1)))\n"
                          "}"},
                    "add up to"),
        # It changes its input so that the arithmetic alone looks right, if the check read the input back.
        WrongAnswer({"python": "def attainable_step_s(kernels, flop_rate, bandwidth):\n"
                               "    for k in kernels:\n"
                               "        k['bytes'] = 0\n"
                               "    return sum(k['flops'] / flop_rate for k in kernels)",
                     "r": "attainable_step_s <- function(kernels, flop_rate, bandwidth) {\n"
                          "  kernels <- lapply(kernels, function(k) { k$bytes <- 0; k })\n"
                          "  sum(vapply(kernels, function(k) k$flops / flop_rate, numeric(1)))\n"
                          "}"},
                    "counts only the arithmetic"),
        WrongAnswer({"python": "def attainable_step_s(kernels, flop_rate, bandwidth):\n"
                               "    return [max(k['flops'] / flop_rate, k['bytes'] / bandwidth) for k in kernels]",
                     "r": "attainable_step_s <- function(kernels, flop_rate, bandwidth) {\n"
                          "  vapply(kernels, function(k) max(k$flops / flop_rate, k$bytes / bandwidth), numeric(1))\n"
                          "}"},
                    "make it one number"),
    ),
    right=(
        {"python": "def attainable_step_s(kernels, flop_rate, bandwidth):\n"
                   "    flops = np.array([k['flops'] for k in kernels], dtype=float)\n"
                   "    moved = np.array([k['bytes'] for k in kernels], dtype=float)\n"
                   "    return np.maximum(flops / flop_rate, moved / bandwidth).sum()",
         "r": "attainable_step_s <- function(kernels, flop_rate, bandwidth) {\n"
              "  flops <- vapply(kernels, function(k) k[[\"flops\"]], numeric(1))\n"
              "  moved <- vapply(kernels, function(k) k[[\"bytes\"]], numeric(1))\n"
              "  sum(pmax(flops / flop_rate, moved / bandwidth))\n"
              "}"},
        {"python": "def attainable_step_s(kernels, flop_rate, bandwidth):\n"
                   "    total = 0.0\n"
                   "    for kernel in kernels:\n"
                   "        compute, memory = kernel['flops'] / flop_rate, kernel['bytes'] / bandwidth\n"
                   "        total += compute if compute > memory else memory\n"
                   "    return total",
         "r": "attainable_step_s <- function(kernels, flop_rate, bandwidth) {\n"
              "  Reduce(function(total, k) total + max(k$flops / flop_rate, k$bytes / bandwidth), kernels, 0)\n"
              "}"},
    ),
    context={"python": "import numpy as np"},
)
