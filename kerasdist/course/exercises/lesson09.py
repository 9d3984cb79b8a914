"""Lesson 09's checked exercises: fit your own link's alpha and beta, the break-even local batch, and each
device's bytes of training state, replicated and sharded.

The first check reads the student's own all-reduce timings (``timings``) and compares the fitted alpha and
beta with how well least squares can do on those numbers, never with a fixed figure; its praise prints no
number. The other two call the student's function on several inputs.

Example:
    >>> timings = {"nbytes": [1024, 1048576, 67108864], "seconds": [1.6e-4, 5.8e-4, 2.7e-2], "replicas": 2}
    >>> print(q1.verdict({"alpha": 8e-5, "beta": 2.5e9, "timings": timings}))
    Incorrect: beta is 2.5e+09, a bandwidth in bytes per second: beta is seconds per byte, one over the bandwidth.
    >>> print(q3.verdict({"bytes_per_device": lambda parameters, devices, sharded: 16 * parameters / devices}))
    Incorrect: bytes_per_device(1000000, 8, False) divides by devices, but replicated (not sharded) every device holds the whole state: 16 bytes per parameter.
"""

import math
from typing import Mapping

import numpy as np

from kerasdist.course.exercises.core import Exercise, Incorrect, WrongAnswer
from kerasdist.course.exercises.fixtures import call_answer
from kerasdist.measure.sync_cost import STATE_BYTES, ring_seconds

# The self-test's stand-in for the lesson's `timings` (one transport's measured all-reduce medians): a ring
# of 2 replicas on a link of alpha 80 us and 2.5 GB/s, with +-5 % noise, so that a hard-coded answer fails.
SIZES = "1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864"
SECONDS = "0.0001663, 0.0001582, 0.0001683, 0.0001914, 0.0002706, 0.0006035, 0.001904, 0.007158, 0.02573"
TIMINGS = {
    "python": "import numpy as np\n"
              f"timings = {{'nbytes': [{SIZES}],\n"
              f"           'seconds': [{SECONDS}],\n"
              "           'replicas': 2}",
    "r": f"timings <- list(nbytes = c({SIZES}),\n"
         f"                seconds = c({SECONDS}),\n"
         "                replicas = 2L)",
}


def _number(value, name, language):
    """``value`` as a float, or an Incorrect that says it must be one number."""
    if isinstance(value, (list, tuple)) and len(value) == 1:
        value = value[0]
    if isinstance(value, np.ndarray) and value.size == 1:
        value = value.reshape(())
    try:
        return float(value)
    except (TypeError, ValueError):
        shown = language.value(value) if isinstance(value, (str, list, tuple)) else type(value).__name__
        raise Incorrect(f"{name} is {shown}: make it one number.") from None


def _close(got, expected, rel_tol=1e-6):
    return math.isclose(got, expected, rel_tol=rel_tol)


def _timings(timings):
    """(nbytes, seconds, replicas) of the student's own timings, or an Incorrect that says to remeasure."""
    again = ("timings is not one transport's all-reduce timings (nbytes, seconds and replicas): run the "
             "timing cell again, then this check.")
    if not isinstance(timings, Mapping) or any(key not in timings for key in ("nbytes", "seconds", "replicas")):
        raise Incorrect(again)
    try:
        nbytes = np.atleast_1d(np.asarray(timings["nbytes"], dtype="float64")).ravel()
        seconds = np.atleast_1d(np.asarray(timings["seconds"], dtype="float64")).ravel()
        replicas = float(np.asarray(timings["replicas"], dtype="float64").ravel()[0])
    except (TypeError, ValueError, IndexError):
        raise Incorrect(again) from None
    if nbytes.shape != seconds.shape or nbytes.size < 2 or not np.all(seconds > 0) or replicas < 2 \
            or not replicas.is_integer():
        raise Incorrect(again)
    return nbytes, seconds, int(replicas)


def _relative_error(nbytes, seconds, devices, alpha, beta):
    """The relative RMS error of the ring model's times against the measured ones (inf if not finite)."""
    with np.errstate(all="ignore"):
        predicted = ring_seconds(nbytes, devices, alpha, beta)
        error = float(np.sqrt(np.mean(((predicted - seconds) / seconds) ** 2)))
    return error if math.isfinite(error) else math.inf


def _least_squares(columns, seconds, weighted=True):
    """The least-squares coefficients of ``seconds`` on ``columns``, on relative errors when ``weighted``."""
    design = np.column_stack(columns)
    weights = 1 / seconds if weighted else np.ones_like(seconds)
    return np.linalg.lstsq(design * weights[:, None], seconds * weights, rcond=None)[0]


def _check_fit(answers, language):
    nbytes, seconds, devices = _timings(answers["timings"])
    alpha = _number(answers["alpha"], "alpha", language)
    beta = _number(answers["beta"], "beta", language)
    latency, per_byte = 2 * (devices - 1), 2 * (devices - 1) / devices
    columns = (np.full_like(nbytes, latency), per_byte * nbytes)
    # The best fit, unclamped: a correct fit with a slightly negative alpha (noise on a fast link) passes.
    best = _relative_error(nbytes, seconds, devices, *_least_squares(columns, seconds))
    allowed = best * 1.05 + 0.005

    def fits(a, b):
        return _relative_error(nbytes, seconds, devices, a, b) <= allowed

    if beta > 0 and fits(alpha, beta):
        return "alpha and beta predict your own timings as well as the least-squares fit does."
    if beta > 1e-3:
        raise Incorrect(f"beta is {beta:.3g}, a bandwidth in bytes per second: beta is seconds per byte, one over "
                        "the bandwidth.")
    if beta > 0 and fits(beta, alpha):
        raise Incorrect("alpha and beta are swapped: alpha is the latency in seconds (the coefficient of the "
                        "2(N - 1) column), beta the seconds per byte (that of the 2(N - 1)/N * nbytes column).")
    if beta > 0 and fits(alpha * 1e-6, beta):
        raise Incorrect("alpha looks like microseconds: give it in seconds, as the timings are.")
    lines = [_least_squares((np.ones_like(nbytes), nbytes), seconds, weighted) for weighted in (False, True)]
    if fits(alpha / latency, beta / per_byte) or any(
            _close(alpha, a, 0.01) and _close(beta, b, 0.01) for a, b in lines):
        raise Incorrect(f"alpha and beta are the intercept and slope of a straight line seconds = a + b * nbytes: "
                        f"the ring's model is 2(N - 1) * alpha + 2(N - 1)/N * nbytes * beta, with N = {devices}, "
                        "so fit on those two columns (or divide a by 2(N - 1) and b by 2(N - 1)/N).")
    if beta <= 0:
        raise Incorrect(f"beta is {beta:.3g}, but a larger tensor takes longer to send: beta, the seconds per "
                        "byte, is positive.")
    unweighted = _least_squares(columns, seconds, weighted=False)
    error = _relative_error(nbytes, seconds, devices, alpha, beta)
    if _close(alpha, unweighted[0], 0.01) and _close(beta, unweighted[1], 0.01):
        raise Incorrect(f"your alpha and beta fit absolute errors, which the largest tensors dominate ({error:.1%} "
                        "relative error): divide each row and its seconds by the seconds, so that every size "
                        "counts alike.")
    raise Incorrect(f"your alpha and beta predict your timings with {error:.1%} error where least squares gets "
                    f"{best:.1%}: fit seconds on the columns 2(N - 1) and 2(N - 1)/N * nbytes, each row divided "
                    "by its seconds.")


_FIT_SOLUTIONS = {
    "python": "n = np.asarray(timings[\"nbytes\"], dtype=float)\n"
              "seconds = np.asarray(timings[\"seconds\"], dtype=float)\n"
              "replicas = timings[\"replicas\"]\n"
              "terms = np.column_stack([np.full_like(n, 2 * (replicas - 1)), 2 * (replicas - 1) / replicas * n])\n"
              "alpha, beta = np.linalg.lstsq(terms / seconds[:, None], np.ones_like(seconds), rcond=None)[0]",
    "r": "n <- timings$nbytes\n"
         "seconds <- timings$seconds\n"
         "replicas <- timings$replicas\n"
         "terms <- cbind(2 * (replicas - 1), 2 * (replicas - 1) / replicas * n)\n"
         "coefficients <- qr.solve(terms / seconds, rep(1, length(seconds)))\n"
         "alpha <- coefficients[[1]]\n"
         "beta <- coefficients[[2]]",
}

q1 = Exercise(
    "09", "q1", "Fit your link's alpha and beta",
    answers=("alpha", "beta", "timings"),
    check_answers=_check_fit,
    hints=("The ring's time is linear in alpha and beta: each timing is one equation seconds = 2(N - 1) * alpha + "
           "2(N - 1)/N * nbytes * beta. Put the two columns in a matrix and solve by least squares, each row and "
           "its seconds divided by the seconds, so that the errors are relative and every size counts alike.",
           {"python": "terms = np.column_stack([np.full_like(n, 2 * (replicas - 1)), 2 * (replicas - 1) / replicas "
                      "* n]); alpha, beta = np.linalg.lstsq(terms / seconds[:, None], np.ones_like(seconds), "
                      "rcond=None)[0]",
            "r": "terms <- cbind(2 * (replicas - 1), 2 * (replicas - 1) / replicas * n); coefficients <- "
                 "qr.solve(terms / seconds, rep(1, length(seconds))); alpha is its first, beta its second"}),
    solutions=_FIT_SOLUTIONS,
    starters={"python": "alpha = None  # the link's latency, in seconds (a float)\n"
                        "beta = None   # the link's inverse bandwidth, in seconds per byte (a float)",
             "r": "alpha <- NULL  # the link's latency, in seconds (a number)\n"
                  "beta <- NULL   # the link's inverse bandwidth, in seconds per byte (a number)"},
    wrong=(
        WrongAnswer({"python": "beta, alpha = np.polyfit(timings[\"nbytes\"], timings[\"seconds\"], 1)",
                     "r": "line <- coef(lm(timings$seconds ~ timings$nbytes))\n"
                          "alpha <- line[[1]]\n"
                          "beta <- line[[2]]"},
                    "intercept and slope of a straight line"),
        WrongAnswer({"python": _FIT_SOLUTIONS["python"] + "\nbeta = 1 / beta",
                     "r": _FIT_SOLUTIONS["r"] + "\nbeta <- 1 / beta"},
                    "beta is seconds per byte, one over the bandwidth"),
        WrongAnswer({"python": _FIT_SOLUTIONS["python"] + "\nalpha, beta = beta, alpha",
                     "r": _FIT_SOLUTIONS["r"] + "\nswapped <- alpha\nalpha <- beta\nbeta <- swapped"},
                    "alpha and beta are swapped"),
    ),
    context=TIMINGS,
)

# (flops_per_sample, flop_rate, gradient_bytes, alpha, beta, replicas): the course's MLP on a CPU, a
# 110M-parameter model on a fast accelerator link, and a slow, high-latency link of 8 replicas.
BREAK_EVEN_CASES = (
    (6e6, 2e12, 1_071_160, 80e-6, 4e-10, 2),
    (2.4e9, 4e14, 438_304_768, 5e-6, 1e-11, 4),
    (6.5e5, 2e11, 3_300_000, 1.25e-3, 2.2e-9, 8),
)


def _ring(gradient_bytes, alpha, beta, replicas, latency=True, bytes_factor=True, steps=True):
    """The ring all-reduce's seconds, or one of its typical misreadings."""
    hops = 2 * (replicas - 1) if steps else 1
    share = 2 * (replicas - 1) / replicas if bytes_factor else 1
    return (hops * alpha if latency else 0) + share * gradient_bytes * beta


def _is_batch(got, exact):
    """``got`` is the exact break-even batch, or its ceiling (a whole number of samples)."""
    return _close(got, exact) or (float(got).is_integer() and -1e-6 * exact <= got - exact < 1 + 1e-6 * exact)


def _check_break_even(answers, language):
    for flops_per_sample, flop_rate, gradient_bytes, alpha, beta, replicas in BREAK_EVEN_CASES:
        arguments = (flops_per_sample, flop_rate, gradient_bytes, alpha, beta, replicas)
        call = f"break_even_batch({', '.join(str(v) if isinstance(v, int) else f'{v:g}' for v in arguments)})"
        got = _number(call_answer(answers["break_even_batch"], "break_even_batch", *arguments), call, language)
        ring = _ring(gradient_bytes, alpha, beta, replicas)
        per_sample = flops_per_sample / flop_rate
        if _is_batch(got, ring / per_sample):
            continue
        if _is_batch(got, _ring(gradient_bytes, alpha, beta, replicas, bytes_factor=False) / per_sample):
            raise Incorrect(f"{call} has every device send all gradient_bytes: in a ring each sends 2(N - 1)/N of "
                            "them, so the bytes' term is 2 * (replicas - 1) / replicas * gradient_bytes * beta.")
        if _is_batch(got, _ring(gradient_bytes, alpha, beta, replicas, bytes_factor=False, steps=False) / per_sample):
            raise Incorrect(f"{call} uses one send's alpha + gradient_bytes * beta: a ring all-reduce takes 2(N - 1) "
                            "steps, each paying the latency, and each device sends 2(N - 1)/N of the bytes.")
        if _is_batch(got, _ring(gradient_bytes, alpha, beta, replicas, latency=False) / per_sample):
            raise Incorrect(f"{call} leaves out the latency: each of the ring's 2(N - 1) steps costs alpha, so add "
                            "2 * (replicas - 1) * alpha.")
        if _close(got, ring * per_sample):
            raise Incorrect(f"{call} inverts the compute: one sample takes flops_per_sample / flop_rate seconds, so "
                            "the batch that computes for T seconds is T * flop_rate / flops_per_sample.")
        if _close(got, ring):
            raise Incorrect(f"{call} returned the all-reduce's seconds: divide them by one sample's compute "
                            "seconds, flops_per_sample / flop_rate.")
        raise Incorrect(f"{call} returned {got:.6g}, but the ring all-reduce takes {ring:.4g} s, as long as one "
                        f"replica computes {ring / per_sample:.6g} samples (that, or its ceiling, is the batch).")
    return ("break_even_batch gives the local batch whose compute lasts as long as the gradient's ring "
            "all-reduce.")


def _break_even_code(allreduce, language):
    """The break-even function, in ``language``, with the all-reduce's seconds written as ``allreduce``."""
    if language == "python":
        return ("def break_even_batch(flops_per_sample, flop_rate, gradient_bytes, alpha, beta, replicas):\n"
                f"    allreduce_s = {allreduce}\n"
                "    return allreduce_s * flop_rate / flops_per_sample")
    return ("break_even_batch <- function(flops_per_sample, flop_rate, gradient_bytes, alpha, beta, replicas) {\n"
            f"  allreduce_s <- {allreduce}\n"
            "  allreduce_s * flop_rate / flops_per_sample\n"
            "}")


_RING = "2 * (replicas - 1) * alpha + 2 * (replicas - 1) / replicas * gradient_bytes * beta"
_BREAK_EVEN_STARTER = (
    "# flops_per_sample: FLOP per sample; flop_rate: FLOP/s; gradient_bytes: bytes; alpha: s; beta: s per byte;\n"
    "# replicas: an integer. It returns the local batch in samples per replica (its ceiling passes too).\n"
    "break_even_batch {assign} {none}  # a function of (flops_per_sample, flop_rate, gradient_bytes, alpha, beta, replicas)"
)

q2 = Exercise(
    "09", "q2", "The break-even local batch",
    answers=("break_even_batch",),
    check_answers=_check_break_even,
    hints=("One replica computes batch * flops_per_sample / flop_rate seconds per step; the ring all-reduce of "
           "the gradient takes 2(N - 1) * alpha + 2(N - 1)/N * gradient_bytes * beta. Set them equal and solve "
           "for batch.",
           {"python": f"allreduce_s = {_RING}; return allreduce_s * flop_rate / flops_per_sample",
            "r": f"allreduce_s <- {_RING}; allreduce_s * flop_rate / flops_per_sample"}),
    solutions={language: _break_even_code(_RING, language) for language in ("python", "r")},
    starters={"python": _BREAK_EVEN_STARTER.format(assign="=", none="None"),
              "r": _BREAK_EVEN_STARTER.format(assign="<-", none="NULL")},
    wrong=(
        WrongAnswer({language: _break_even_code("2 * (replicas - 1) * alpha + gradient_bytes * beta", language)
                     for language in ("python", "r")},
                    "in a ring each sends 2(N - 1)/N of them"),
        WrongAnswer({language: _break_even_code("2 * (replicas - 1) / replicas * gradient_bytes * beta", language)
                     for language in ("python", "r")},
                    "leaves out the latency"),
        WrongAnswer({"python": _break_even_code(_RING, "python").replace(
                         "allreduce_s * flop_rate / flops_per_sample", "allreduce_s * flops_per_sample / flop_rate"),
                     "r": _break_even_code(_RING, "r").replace(
                         "allreduce_s * flop_rate / flops_per_sample", "allreduce_s * flops_per_sample / flop_rate")},
                    "inverts the compute"),
    ),
)

# Bytes per parameter of float32 Adam training: weights, gradients and Adam's two moments.
BYTES_PER_PARAMETER = sum(STATE_BYTES["float32"].values())
# (parameters, devices, sharded): replicated and sharded, and a count that 6 devices do not divide. The first
# has 8 devices, so that the whole state over devices (2 bytes per parameter) is no other typical answer.
STATE_CASES = ((1_000_000, 8, False), (1_000_000, 8, True), (124_439_808, 4, True),
               (1_500_000_001, 6, False), (1_500_000_001, 6, True))


def _is_bytes(got, expected):
    return math.isclose(got, expected, rel_tol=1e-6, abs_tol=64)


def _check_state_bytes(answers, language):
    for parameters, devices, sharded in STATE_CASES:
        call = f"bytes_per_device({parameters}, {devices}, {language.value(sharded)})"
        got = _number(call_answer(answers["bytes_per_device"], "bytes_per_device", parameters, devices, sharded),
                      call, language)
        share = devices if sharded else 1
        exact = BYTES_PER_PARAMETER * parameters / share
        # Each part's bytes rounded up on each device (as kerasdist.measure.sync_cost.training_state_bytes does).
        rounded = sum(-(-parameters * per // share) for per in STATE_BYTES["float32"].values())
        if _is_bytes(got, exact) or _is_bytes(got, rounded):
            continue
        if sharded and _is_bytes(got, BYTES_PER_PARAMETER * parameters):
            raise Incorrect(f"{call} holds the whole state on every device: sharded, each device keeps 1/devices "
                            "of the weights, the gradients and Adam's two moments.")
        if sharded and _is_bytes(got, 8 * parameters + 8 * parameters / devices):
            raise Incorrect(f"{call} shards only Adam's two moments: that is ZeRO stage 1; this exercise asks for "
                            "all four parts sharded (ZeRO stage 3, FSDP): weights, gradients and both moments.")
        if sharded and _is_bytes(got, 4 * parameters + 12 * parameters / devices):
            raise Incorrect(f"{call} shards the gradients and Adam's moments but not the weights: that is ZeRO "
                            "stage 2; this exercise asks for all four parts sharded (ZeRO stage 3, FSDP).")
        if not sharded and devices > 1 and _is_bytes(got, exact / devices):
            raise Incorrect(f"{call} divides by devices, but replicated (not sharded) every device holds the whole "
                            f"state: {BYTES_PER_PARAMETER} bytes per parameter.")
        per_parameter = got * share / parameters
        if math.isclose(per_parameter, 4, rel_tol=1e-3):
            raise Incorrect(f"{call} counts only the float32 weights: a device also holds the gradients and Adam's "
                            "two moments, 4 bytes each per parameter.")
        if math.isclose(per_parameter, 8, rel_tol=1e-3) or math.isclose(per_parameter, 12, rel_tol=1e-3):
            raise Incorrect(f"{call} counts {per_parameter:.0f} bytes per parameter, but a device holds four float32 "
                            "numbers per parameter: the weight, its gradient and Adam's two moments make 16.")
        if math.isclose(per_parameter, 32, rel_tol=1e-3):
            raise Incorrect(f"{call} counts 32 bytes per parameter: the state is float32, 4 bytes a number, and "
                            "there are four numbers per parameter (weight, gradient, Adam's two moments).")
        how = f"1/{devices} of the {BYTES_PER_PARAMETER}" if sharded else f"all {BYTES_PER_PARAMETER}"
        raise Incorrect(f"{call} returned {got:.6g} bytes, but each device holds {how} bytes per parameter: "
                        f"{exact:.6g} bytes.")
    return ("bytes_per_device gives each device's weights, gradients and Adam moments, replicated and sharded.")


def _state_code(body, language):
    """The bytes-per-device function, in ``language``, with its body's lines."""
    if language == "python":
        return "def bytes_per_device(parameters, devices, sharded):\n" + "".join(f"    {line}\n" for line in body)[:-1]
    return ("bytes_per_device <- function(parameters, devices, sharded) {\n"
            + "".join(f"  {line}\n" for line in body) + "}")


_STATE = "state {assign} 16 * parameters  # bytes: a float32 weight (4), its gradient (4), Adam's two moments (8)"

q3 = Exercise(
    "09", "q3", "Each device's bytes under sharding",
    answers=("bytes_per_device",),
    check_answers=_check_state_bytes,
    hints=("Per parameter, float32 Adam training keeps a weight (4 bytes), its gradient (4) and Adam's two moments "
           "(4 each). Replicated, every device holds all of it; sharded (ZeRO stage 3, FSDP), each device holds "
           "1/devices of each part.",
           {"python": "state = 16 * parameters; return state / devices if sharded else state",
            "r": "state <- 16 * parameters; if (sharded) state / devices else state"}),
    solutions={"python": _state_code([_STATE.format(assign="="), "return state / devices if sharded else state"],
                                     "python"),
               "r": _state_code([_STATE.format(assign="<-"), "if (sharded) state / devices else state"], "r")},
    starters={"python": "bytes_per_device = None  # a function of (parameters: int, devices: int, sharded: bool) "
                        "-> bytes on one device",
              "r": "bytes_per_device <- NULL  # a function of (parameters, devices: integers; sharded: logical) "
                   "-> bytes on one device"},
    wrong=(
        WrongAnswer({"python": _state_code(["return 4 * parameters / devices if sharded else 4 * parameters"],
                                           "python"),
                     "r": _state_code(["if (sharded) 4 * parameters / devices else 4 * parameters"], "r")},
                    "a device also holds the gradients and Adam's two moments"),
        WrongAnswer({"python": _state_code(["return 12 * parameters / devices if sharded else 12 * parameters"],
                                           "python"),
                     "r": _state_code(["if (sharded) 12 * parameters / devices else 12 * parameters"], "r")},
                    "Adam's two moments make 16"),
        WrongAnswer({"python": _state_code(["return 8 * parameters + 8 * parameters / devices if sharded else "
                                            "16 * parameters"], "python"),
                     "r": _state_code(["if (sharded) 8 * parameters + 8 * parameters / devices else 16 * parameters"],
                                      "r")},
                    "ZeRO stage 1"),
        WrongAnswer({"python": _state_code(["return 16 * parameters"], "python"),
                     "r": _state_code(["16 * parameters"], "r")},
                    "holds the whole state on every device"),
    ),
)
