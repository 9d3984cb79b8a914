"""Lesson 09's checked exercises: fit your own link's alpha and beta, the break-even local batch, and each
device's bytes of training state, replicated and sharded.

The first check compares the fitted alpha and beta with how well least squares can do on the student's own
all-reduce timings, never with a fixed figure; its praise prints no number. It reads kerasdist's own record
of what ``measure_transports`` timed in this session (``sync_cost.measured_rows``), so that redefining
``timings`` in the notebook changes nothing it checks; without a record it reads ``timings``, once its shape
is checked. The other two call the student's function on several inputs.

Example:
    >>> print(q3.verdict({"bytes_per_device": lambda parameters, devices, sharded: 16 * parameters / devices}))
    Incorrect: bytes_per_device(1000000, 8, False) divides by devices, but replicated (not sharded) every device holds the whole state: 16 bytes per parameter.
"""

import math
from typing import Mapping

import numpy as np

from kerasdist.course.exercises.core import LESSON_STATE, Exercise, Incorrect, WrongAnswer
from kerasdist.course.exercises.fixtures import a_number, call_answer, real_number
from kerasdist.measure.sync_cost import STATE_BYTES, measured_rows, ring_seconds

# The lesson's data: the collective ring's timings on 4 replicas, where 2(N - 1)/N is 1.5 (on 2 it is 1, and a
# fit that leaves the factor out would pass).
TRANSPORT, REPLICAS = "collective ring", 4

# The self-test's stand-in for the lesson's `timings`: a ring of 4 replicas on a link of alpha 60 us and
# 3 GB/s, with +-5 % noise, so that a hard-coded answer fails. Like measure_transports(), it leaves kerasdist's
# record.
SIZES = "1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864"
SECONDS = "0.0003749, 0.0003512, 0.0003866, 0.0003771, 0.0005058, 0.0009285, 0.002334, 0.008924, 0.03324"
TIMINGS = {
    "python": "import numpy as np\n"
              "from kerasdist.measure import sync_cost\n"
              f"rows = [sync_cost._remember({{'transport': 'collective ring', 'replicas': 4, 'nbytes': [{SIZES}],\n"
              f"                              'seconds': [{SECONDS}]}})]\n"
              "ring_4 = rows[0]\n"
              "timings = {'nbytes': ring_4['nbytes'], 'seconds': ring_4['seconds'], 'replicas': ring_4['replicas']}",
    "r": "sync_cost <- reticulate::import('kerasdist.measure.sync_cost')\n"
         f"ring_4 <- sync_cost[['_remember']](list(transport = 'collective ring', replicas = 4L, nbytes = c({SIZES}),\n"
         f"                                       seconds = c({SECONDS})))\n"
         "timings <- list(nbytes = unlist(ring_4$nbytes), seconds = unlist(ring_4$seconds), replicas = ring_4$replicas)",
}


def _close(got, expected, rel_tol=1e-6):
    return math.isclose(got, expected, rel_tol=rel_tol)


def _timings(timings):
    """(nbytes, seconds, replicas) of one transport's timings, or None where they are not that."""
    if not isinstance(timings, Mapping) or any(key not in timings for key in ("nbytes", "seconds", "replicas")):
        return None
    try:
        nbytes = np.atleast_1d(np.asarray(timings["nbytes"], dtype="float64")).ravel()
        seconds = np.atleast_1d(np.asarray(timings["seconds"], dtype="float64")).ravel()
        replicas = real_number(np.asarray(timings["replicas"], dtype="float64").ravel()[0])
    except (TypeError, ValueError, IndexError):
        return None
    if nbytes.shape != seconds.shape or nbytes.size < 2 or not np.all(np.isfinite(seconds) & (seconds > 0)) \
            or not np.all(np.isfinite(nbytes) & (nbytes > 0)) or replicas is None or replicas < 2 \
            or not float(replicas).is_integer():
        return None
    return nbytes, seconds, int(replicas)


def _same(first, second):
    return first[2] == second[2] and first[0].shape == second[0].shape and \
        np.allclose(first[0], second[0], rtol=1e-12, atol=0) and np.allclose(first[1], second[1], rtol=1e-12, atol=0)


def _measured(timings):
    """The timings to fit, and whether the student's ``timings`` are not what kerasdist measured.

    kerasdist's record of the collective ring (on the lesson's 4 replicas where it timed them): the
    student's ``timings`` where they are one of its rows, else its newest row; without a record, the
    student's ``timings``, or an Incorrect where they are not one transport's timings.
    """
    rows = measured_rows(TRANSPORT, REPLICAS) or measured_rows(TRANSPORT)
    mine = _timings(timings)
    if not rows:
        if mine is None:
            raise Incorrect("timings is not one transport's all-reduce timings (nbytes, seconds and replicas): "
                            "run the timing cell again, then this check.")
        return mine, False
    recorded = [measured for measured in map(_timings, rows) if measured is not None]
    same = [measured for measured in recorded if mine is not None and _same(mine, measured)]
    if same:
        return same[-1], False
    if not recorded:
        raise Incorrect("kerasdist's record of the timings is not usable: run the timing cell again, then this "
                        "check.")
    return recorded[-1], True


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
    (nbytes, seconds, devices), changed = _measured(answers["timings"])
    latency, per_byte = 2 * (devices - 1), 2 * (devices - 1) / devices
    columns = (np.full_like(nbytes, latency), per_byte * nbytes)
    # The best fit, unclamped: a correct fit with a slightly negative alpha (noise on a fast link) passes.
    best = _relative_error(nbytes, seconds, devices, *_least_squares(columns, seconds))
    allowed = best * 1.05 + 0.005
    alpha = a_number(answers["alpha"], "alpha", language)
    beta = a_number(answers["beta"], "beta", language)

    def fits(a, b):
        return _relative_error(nbytes, seconds, devices, a, b) <= allowed

    if beta > 0 and fits(alpha, beta):
        return "alpha and beta predict your own timings as well as the least-squares fit does."
    if changed:
        raise Incorrect(f"timings is not what measure_transports timed for the {TRANSPORT} in this session, and "
                        "the check fits kerasdist's own record of it: run the cell that makes timings again, then "
                        "your fit, then this check.")
    if beta > 1e-3:
        raise Incorrect(f"beta is {beta:.3g}, a bandwidth in bytes per second: beta is seconds per byte, one over "
                        "the bandwidth.")
    if beta > 0 and fits(beta, alpha):
        raise Incorrect("alpha and beta are swapped: alpha is the latency in seconds (the coefficient of the "
                        "2(N - 1) column), beta the seconds per byte (that of the 2(N - 1)/N * nbytes column).")
    if beta > 0 and fits(alpha * 1e-6, beta):
        raise Incorrect("alpha looks like microseconds: give it in seconds, as the timings are.")
    unweighted = _least_squares(columns, seconds, weighted=False)
    if _close(alpha, unweighted[0], 0.01) and _close(beta, unweighted[1], 0.01):
        error = _relative_error(nbytes, seconds, devices, alpha, beta)
        raise Incorrect(f"your alpha and beta fit absolute errors, which the largest tensors dominate ({error:.1%} "
                        "relative error): divide each row and its seconds by the seconds, so that every size "
                        "counts alike.")
    lines = [_least_squares((np.ones_like(nbytes), nbytes), seconds, weighted) for weighted in (False, True)]
    if fits(alpha / latency, beta / per_byte) or any(
            _close(alpha, a, 0.01) and _close(beta, b, 0.01) for a, b in lines):
        raise Incorrect(f"alpha and beta are the intercept and slope of a straight line seconds = a + b * nbytes: "
                        f"the ring's model is 2(N - 1) * alpha + 2(N - 1)/N * nbytes * beta, with N = {devices}, "
                        "so fit on those two columns (or divide a by 2(N - 1) and b by 2(N - 1)/N).")
    if beta > 0 and fits(alpha, beta / per_byte):
        raise Incorrect(f"beta leaves out the ring's 2(N - 1)/N: each device sends 2(N - 1)/N of the bytes, so "
                        f"the column of beta is 2(N - 1)/N * nbytes, here with N = {devices} (your timings' "
                        "replicas), not nbytes.")
    if beta > 0 and fits(alpha, beta / 2):
        raise Incorrect(f"beta counts one way only, (N - 1)/N * nbytes: a ring all-reduce is a reduce-scatter and "
                        f"an all-gather, N - 1 steps each, so each device sends 2(N - 1)/N of the bytes (N = "
                        f"{devices}).")
    if alpha == 0 and beta > 0:
        raise Incorrect("alpha is 0: a fit through zero leaves out the latency, which the smallest tensors' times "
                        "are made of: fit on both columns, 2(N - 1) for alpha and 2(N - 1)/N * nbytes for beta.")
    if beta > 0 and fits(alpha / latency, beta):
        raise Incorrect(f"alpha is the ring's whole latency 2(N - 1) * alpha: the column of alpha is 2(N - 1), "
                        f"here {latency} with N = {devices}, not 1.")
    if beta <= 0:
        raise Incorrect(f"beta is {beta:.3g}, but a larger tensor takes longer to send: beta, the seconds per "
                        "byte, is positive.")
    error = _relative_error(nbytes, seconds, devices, alpha, beta)
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
# The solution's first lines (the data), for wrong answers that fit it otherwise.
_DATA = {language: "\n".join(code.splitlines()[:3]) for language, code in _FIT_SOLUTIONS.items()}

q1 = Exercise(
    "09", "q1", "Fit your link's alpha and beta",
    answers=("alpha", "beta", "timings"),
    check_answers=_check_fit,
    needs=(LESSON_STATE,),  # its answer reads what the lesson computed
    reads=("timings",),  # kerasdist keeps its own record of them: timings may be rebound
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
        # Right on 2 replicas only, where 2(N - 1)/N is 1: the lesson fits 4.
        WrongAnswer({"python": _DATA["python"] + "\n"
                               "terms = np.column_stack([np.full_like(n, 2 * (replicas - 1)), n])\n"
                               "alpha, beta = np.linalg.lstsq(terms / seconds[:, None], np.ones_like(seconds), rcond=None)[0]",
                     "r": _DATA["r"] + "\n"
                          "coefficients <- qr.solve(cbind(2 * (replicas - 1), n) / seconds, rep(1, length(seconds)))\n"
                          "alpha <- coefficients[[1]]\n"
                          "beta <- coefficients[[2]]"},
                    "leaves out the ring's 2(N - 1)/N"),
        WrongAnswer({"python": _DATA["python"] + "\n"
                               "terms = np.column_stack([2 * (replicas - 1) * np.ones_like(n), 2 * (replicas - 1) / replicas * n])\n"
                               "alpha, beta = np.linalg.lstsq(terms, seconds, rcond=None)[0]",
                     "r": _DATA["r"] + "\n"
                          "coefficients <- qr.solve(cbind(2 * (replicas - 1), 2 * (replicas - 1) / replicas * n), seconds)\n"
                          "alpha <- coefficients[[1]]\n"
                          "beta <- coefficients[[2]]"},
                    "fit absolute errors"),
        # A ring that sends each byte one way only: (N - 1)/N, half the factor.
        WrongAnswer({"python": _DATA["python"] + "\n"
                               "terms = np.column_stack([np.full_like(n, 2 * (replicas - 1)), (replicas - 1) / replicas * n])\n"
                               "alpha, beta = np.linalg.lstsq(terms / seconds[:, None], np.ones_like(seconds), rcond=None)[0]",
                     "r": _DATA["r"] + "\n"
                          "coefficients <- qr.solve(cbind(2 * (replicas - 1), (replicas - 1) / replicas * n) / seconds, "
                          "rep(1, length(seconds)))\n"
                          "alpha <- coefficients[[1]]\n"
                          "beta <- coefficients[[2]]"},
                    "counts one way only"),
        # A straight line through zero: the bytes' column alone, no latency.
        WrongAnswer({"python": _DATA["python"] + "\n"
                               "alpha = 0.0\n"
                               "per_byte = 2 * (replicas - 1) / replicas * n / seconds\n"
                               "beta = float(np.linalg.lstsq(per_byte[:, None], np.ones_like(seconds), rcond=None)[0][0])",
                     "r": _DATA["r"] + "\n"
                          "alpha <- 0\n"
                          "per_byte <- 2 * (replicas - 1) / replicas * n / seconds\n"
                          "beta <- sum(per_byte) / sum(per_byte^2)"},
                    "a fit through zero"),
        # Figures typed from another run's printout.
        WrongAnswer({"python": "alpha, beta = 552.9e-6, 1 / 1.50e9",
                     "r": "alpha <- 552.9e-6\nbeta <- 1 / 1.50e9"},
                    "where least squares gets"),
        # The truth taken from the notebook: timings changed so that the fit matches them, not the measurement.
        WrongAnswer({"python": "timings['seconds'] = [2 * s for s in timings['seconds']]\n" + _FIT_SOLUTIONS["python"],
                     "r": "timings$seconds <- 2 * timings$seconds\n" + _FIT_SOLUTIONS["r"]},
                    "is not what measure_transports timed"),
        WrongAnswer({"python": _FIT_SOLUTIONS["python"] + "\nalpha = f\"{alpha * 1e6:.1f} us\"",
                     "r": _FIT_SOLUTIONS["r"] + "\nalpha <- sprintf(\"%.1f us\", alpha * 1e6)"},
                    "make it one number"),
    ),
    right=(
        # The check reads kerasdist's own record of the run: rebinding the lesson's variable changes nothing.
        {"python": _FIT_SOLUTIONS["python"] + "\ntimings = None"},
        {"python": "weights = 1 / np.asarray(timings['seconds'])\n"
                   "N = int(timings['replicas'])\n"
                   "a, b = np.linalg.lstsq(np.vstack([weights, np.asarray(timings['nbytes']) * weights]).T,\n"
                   "                       np.ones_like(weights), rcond=None)[0]\n"
                   "alpha, beta = a / (2 * (N - 1)), b / (2 * (N - 1) / N)",
         "r": "N <- timings$replicas\n"
              "latency <- rep(2 * (N - 1), length(timings$nbytes))\n"
              "per_byte <- 2 * (N - 1) / N * timings$nbytes\n"
              "fit <- lm(timings$seconds ~ 0 + latency + per_byte, weights = 1 / timings$seconds^2)\n"
              "alpha <- coef(fit)[[\"latency\"]]\n"
              "beta <- coef(fit)[[\"per_byte\"]]"},
        {"python": _DATA["python"] + "\n"
                   "A = np.stack([np.full(n.shape, 2.0 * (replicas - 1)), 2.0 * (replicas - 1) / replicas * n], axis=1) / seconds[:, None]\n"
                   "alpha, beta = np.linalg.solve(A.T @ A, A.T @ np.ones(len(n)))",
         "r": _DATA["r"] + "\n"
              "A <- cbind(2 * (replicas - 1), 2 * (replicas - 1) / replicas * n) / seconds\n"
              "fitted <- solve(crossprod(A), crossprod(A, rep(1, nrow(A))))\n"
              "alpha <- fitted[1, 1]\n"
              "beta <- fitted[2, 1]"},
    ),
    context=TIMINGS,
)

# (flops_per_sample, flop_rate, gradient_bytes, alpha, beta, replicas): the course's MLP (1,211,392 training
# FLOPs per sample, 1,077,288 bytes of float32 gradients) on 2 virtual devices of a CPU of 100 GFLOP/s, a
# 110M-parameter model on a fast accelerator link, and a slow, high-latency link of 8 replicas.
BREAK_EVEN_CASES = (
    (1_211_392, 1e11, 1_077_288, 80e-6, 4e-10, 2),
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
        ring = _ring(gradient_bytes, alpha, beta, replicas)
        per_sample = flops_per_sample / flop_rate
        got = a_number(call_answer(answers["break_even_batch"], "break_even_batch", *arguments), call, language)
        if _is_batch(got, ring / per_sample):
            continue
        if got.is_integer() and ring / per_sample - 1 < got < ring / per_sample:
            raise Incorrect(f"{call} rounds down, to a batch whose compute ends before the all-reduce: give the "
                            "exact batch, or round it up.")
        typed = [count for count in (2, REPLICAS) if count != replicas
                 and _is_batch(got, _ring(gradient_bytes, alpha, beta, count) / per_sample)]
        if typed:
            raise Incorrect(f"{call} computes the ring of {typed[0]} replicas whatever replicas is: use the argument "
                            "replicas in 2(N - 1) and 2(N - 1)/N.")
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
        WrongAnswer({language: _break_even_code(_RING.replace("replicas", "2"), language)
                     for language in ("python", "r")},
                    "whatever replicas is"),
        WrongAnswer({"python": _break_even_code(_RING, "python").replace(
                         "return allreduce_s * flop_rate / flops_per_sample",
                         "return math.floor(allreduce_s * flop_rate / flops_per_sample)"),
                     "r": _break_even_code(_RING, "r").replace(
                         "  allreduce_s * flop_rate / flops_per_sample", "  floor(allreduce_s * flop_rate / flops_per_sample)")},
                    "rounds down"),
        WrongAnswer({"python": _break_even_code(_RING, "python").replace(
                         "return allreduce_s * flop_rate / flops_per_sample",
                         "return f'{allreduce_s * flop_rate / flops_per_sample:.0f} samples'"),
                     "r": _break_even_code(_RING, "r").replace(
                         "  allreduce_s * flop_rate / flops_per_sample",
                         "  sprintf('%.0f samples', allreduce_s * flop_rate / flops_per_sample)")},
                    "make it one number"),
    ),
    right=(
        {"python": "def break_even_batch(flops_per_sample, flop_rate, gradient_bytes, alpha, beta, replicas):\n"
                   "    ring_steps = 2 * (replicas - 1)\n"
                   "    seconds = ring_steps * (alpha + gradient_bytes / replicas * beta)\n"
                   "    return math.ceil(seconds / (flops_per_sample / flop_rate))",
         "r": "break_even_batch <- function(flops_per_sample, flop_rate, gradient_bytes, alpha, beta, replicas) {\n"
              "  ring_steps <- 2 * (replicas - 1)\n"
              "  ceiling(ring_steps * (alpha + gradient_bytes / replicas * beta) / (flops_per_sample / flop_rate))\n"
              "}"},
        {"python": "def break_even_batch(flops_per_sample, flop_rate, gradient_bytes, alpha, beta, replicas):\n"
                   "    terms = np.array([2 * (replicas - 1), 2 * (replicas - 1) / replicas * gradient_bytes])\n"
                   "    return terms @ np.array([alpha, beta]) * flop_rate / flops_per_sample",
         "r": "break_even_batch <- function(flops_per_sample, flop_rate, gradient_bytes, alpha, beta, replicas) {\n"
              "  compute_s <- flops_per_sample / flop_rate\n"
              "  sum(c(2 * (replicas - 1), 2 * (replicas - 1) / replicas * gradient_bytes) * c(alpha, beta)) / compute_s\n"
              "}"},
    ),
    context={"python": "import math\nimport numpy as np"},
)

# Bytes per parameter of float32 Adam training: weights, gradients and Adam's two moments.
BYTES_PER_PARAMETER = sum(STATE_BYTES["float32"].values())
# (parameters, devices, sharded): replicated and sharded, and a count that 6 devices do not divide. The first
# has 8 devices, so that the whole state over devices (2 bytes per parameter) is no other typical answer.
STATE_CASES = ((1_000_000, 8, False), (1_000_000, 8, True), (124_439_808, 4, True),
               (1_500_000_001, 6, False), (1_500_000_001, 6, True))


def _is_bytes(got, expected):
    return math.isclose(got, expected, rel_tol=1e-6, abs_tol=64)


# What typical wrong answers compute instead (of parameters, devices, sharded), and what to tell them; the
# first that explains every call's result is the message.
_STATE_MISREADINGS = (
    (lambda p, d, sharded: 16 * p / d,
     "{call} divides by devices, but replicated (not sharded) every device holds the whole state: "
     "16 bytes per parameter."),
    (lambda p, d, sharded: 16 * p,
     "{call} holds the whole state on every device: sharded, each device keeps 1/devices of the weights, the "
     "gradients and Adam's two moments."),
    (lambda p, d, sharded: 8 * p + 8 * p / d if sharded else 16 * p,
     "{call} shards only Adam's two moments: that is ZeRO stage 1; this exercise asks for all four parts sharded "
     "(ZeRO stage 3, FSDP): weights, gradients and both moments."),
    (lambda p, d, sharded: 4 * p + 12 * p / d if sharded else 16 * p,
     "{call} shards the gradients and Adam's moments but not the weights: that is ZeRO stage 2; this exercise "
     "asks for all four parts sharded (ZeRO stage 3, FSDP)."),
    (lambda p, d, sharded: 16 * p / 8 if sharded else 16 * p,
     "{call} divides by 8 whatever devices is: divide by the argument devices."),
    (lambda p, d, sharded: 4 * p / (d if sharded else 1),
     "{call} counts only the float32 weights: a device also holds the gradients and Adam's two moments, 4 bytes "
     "each per parameter."),
    (lambda p, d, sharded: 8 * p / (d if sharded else 1),
     "{call} counts 8 bytes per parameter, but a device holds four float32 numbers per parameter: the weight, its "
     "gradient and Adam's two moments make 16."),
    (lambda p, d, sharded: 12 * p / (d if sharded else 1),
     "{call} counts 12 bytes per parameter, but a device holds four float32 numbers per parameter: the weight, "
     "its gradient and Adam's two moments make 16."),
    (lambda p, d, sharded: 32 * p / (d if sharded else 1),
     "{call} counts 32 bytes per parameter: the state is float32, 4 bytes a number, and there are four numbers "
     "per parameter (weight, gradient, Adam's two moments)."),
    *((lambda p, d, sharded, unit=unit: 16 * p / (d if sharded else 1) / unit,
       f"{{call}} is in {name}: give the bytes themselves.") for unit, name in (
        (1e6, "megabytes"), (2 ** 20, "MiB"), (1e9, "gigabytes"), (2 ** 30, "GiB"))),
)


def _check_state_bytes(answers, language):
    calls = []
    for parameters, devices, sharded in STATE_CASES:
        call = f"bytes_per_device({parameters}, {devices}, {language.value(sharded)})"
        share = devices if sharded else 1
        exact = BYTES_PER_PARAMETER * parameters / share
        # Each part's bytes rounded up on each device (as kerasdist.measure.sync_cost.training_state_bytes does).
        rounded = sum(-(-parameters * per // share) for per in STATE_BYTES["float32"].values())
        got = call_answer(answers["bytes_per_device"], "bytes_per_device", parameters, devices, sharded)
        if isinstance(got, Mapping):
            raise Incorrect(f"{call} returned {language.pick('a dict', 'a list')} of parts: return one number, all "
                            "the bytes one device holds.")
        calls.append((call, a_number(got, call, language), (parameters, devices, sharded), exact, rounded))
    wrong = [(call, got, arguments, exact) for call, got, arguments, exact, rounded in calls
             if not (_is_bytes(got, exact) or _is_bytes(got, rounded))]
    if not wrong:
        return ("bytes_per_device gives each device's weights, gradients and Adam moments, replicated and sharded.")
    call, got, (_, devices, sharded), exact = wrong[0]
    for misreading, message in _STATE_MISREADINGS:
        if all(math.isclose(answer, misreading(*arguments), rel_tol=1e-6) for _, answer, arguments, _, _ in calls):
            raise Incorrect(message.format(call=call))
    how = f"1/{devices} of the {BYTES_PER_PARAMETER}" if sharded else f"all {BYTES_PER_PARAMETER}"
    raise Incorrect(f"{call} returned {got:.6g} bytes, but each device holds {how} bytes per parameter: "
                    f"{exact:.6g} bytes.")


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
        # The lesson's 8 devices typed in: right on 8 devices only.
        WrongAnswer({"python": _state_code(["return 16 * parameters / 8 if sharded else 16 * parameters"], "python"),
                     "r": _state_code(["if (sharded) 16 * parameters / 8 else 16 * parameters"], "r")},
                    "divides by 8 whatever devices is"),
        WrongAnswer({"python": _state_code(["share = devices if sharded else 1",
                                            "return 16 * parameters / share / 1e6  # MB"], "python"),
                     "r": _state_code(["share <- if (sharded) devices else 1",
                                       "16 * parameters / share / 1e6  # MB"], "r")},
                    "is in megabytes"),
        # kerasdist's own function, whose result is a table of the parts, not one number.
        WrongAnswer({"python": _state_code(["from kerasdist.measure.sync_cost import training_state_bytes",
                                            "return training_state_bytes(parameters, devices, sharded)"], "python"),
                     "r": _state_code(["sync_cost <- reticulate::import(\"kerasdist.measure.sync_cost\")",
                                       "sync_cost$training_state_bytes(parameters, devices, sharded)"], "r")},
                    "of parts: return one number"),
    ),
    right=(
        {"python": _state_code(["share = devices if sharded else 1",
                                "return sum(math.ceil(parameters * per / share) for per in (4, 4, 4, 4))"], "python"),
         "r": _state_code(["if (!sharded) devices <- 1", "ceiling(16 * parameters / devices)"], "r")},
        {"python": _state_code(["return np.int64(16) * parameters // (devices if sharded else 1)"], "python"),
         "r": _state_code(["16 * parameters / ifelse(sharded, devices, 1)"], "r")},
    ),
    context={"python": "import math\nimport numpy as np"},
)
