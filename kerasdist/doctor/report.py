"""``kerasdist doctor``: run the checks and probes side by side, and the report they make.

Anything that could crash or hang (R, rpy2's embedded R, the probes of
upstream bugs) runs in a subprocess with a timeout, all at the same time.
The probes' answers are saved for ``--engine auto`` (``kerasdist.engines.choice``).
"""

import concurrent.futures
import dataclasses
import os
import time

from kerasdist.course import lesson_needs
from kerasdist.doctor import checks, probes
from kerasdist.doctor.checks import OK
from kerasdist.engines import choice as engines
from kerasdist.engines.strategy import STRATEGIES

FOUND_WIDTH = 60  # longer findings are cut in the table (kept whole in --json)


def diagnose(run_probes=True, probe_timeout_s=60, probe_commands=None):
    """Check this machine for everything the lessons need; probe the upstream bugs.

    Args:
        run_probes: run the probes of the Keras bugs kerasdist works around (a
            few seconds each, in parallel) and cache their answers for
            ``--engine auto``; False uses the cached answers, or the bugs known
            for Keras 3.15.
        probe_timeout_s: seconds a probe may take before it is killed (then reported broken).
        probe_commands: probe name -> argv run instead of the real probe (stand-ins for tests).

    Returns:
        A JSON-able dict: ``checks`` (rows), ``lessons`` (which are ready),
        ``engines`` (strategy -> engine and reason), ``problems`` and ``seconds``.

    Example:
        >>> report = diagnose(run_probes=False)  # doctest: +SKIP
        >>> report["engines"]["multi_worker"]["engine"]  # doctest: +SKIP
        'loop'
    """
    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
        probe_future = pool.submit(probes.run_probes, probe_timeout_s, probe_commands) if run_probes else None
        r_future = pool.submit(checks.r_packages_from_rscript)
        rpy2_future = pool.submit(checks.r_packages_from_rpy2)
        jax_future = pool.submit(checks.jax_checks, probe_timeout_s)
        rows = checks.python_checks() + jax_future.result() + checks.gpu_checks()
        r_found = r_future.result()
        rows += checks.r_checks(r_found, rpy2_future.result())
        answers = probe_future.result() if probe_future else {}
    if answers:
        engines.save_answers({name: answer for name, answer in answers.items() if not answer["failed"]})
        rows += [checks.probe_check(probe, answers[probe.name]) for probe in engines.PROBES]
    by_key = {check.key: check for check in rows}
    lessons = lesson_rows(by_key)
    choices = {}
    for name in STRATEGIES:
        engine, reason = engines.engine_for(name, answers or None)
        choices[name] = {"engine": engine, "reason": reason}
    return {
        "checks": [dataclasses.asdict(check) for check in rows],
        "lessons": lessons,
        "engines": choices,
        "problems": sum(check.is_problem for check in rows),
        "upstream_bugs": sum(check.upstream and check.status != OK for check in rows),
        "probe_cache": engines.cache_path() if answers else None,
        "seconds": round(time.perf_counter() - start, 1),
    }


def lesson_rows(checks_by_key):
    """One row per lesson notebook: whether this machine has what ``kerasdist.course.lesson_needs`` says it
    needs.

    Args:
        checks_by_key: the doctor's checks, keyed by ``Check.key``.

    Returns:
        A list of dicts: ``lesson`` (the notebook's name), ``ready`` and ``missing`` (the names of the
        checks that are not OK).
    """
    rows = []
    for lesson in lesson_needs.LESSONS:
        for notebook in lesson.notebooks:
            needed = [checks_by_key[key] for key in lesson.checks(notebook)]
            missing = [check.name for check in needed if check.status != OK]
            rows.append({"lesson": notebook, "ready": not missing, "missing": missing})
    return rows


def format_report(report):
    """The report as the table ``kerasdist doctor`` prints.

    Example:
        >>> print(format_report(diagnose(run_probes=False)))  # doctest: +SKIP
    """
    rows = [("status", "check", "this machine", "needed by")]
    fixes = {}
    for check in report["checks"]:
        found = check["found"]
        found = found if len(found) <= FOUND_WIDTH else found[:FOUND_WIDTH - 3] + "..."
        rows.append((check["status"], check["name"], found, check["needed_by"]))
        if check["fix"] and check["status"] != OK:
            fixes[len(rows) - 1] = check["fix"]
    widths = [max(len(row[column]) for row in rows) for column in range(3)]
    lines = []
    for index, row in enumerate(rows):
        lines.append("  ".join(cell.ljust(width) for cell, width in zip(row, widths)) + "  " + row[3])
        if index in fixes:
            lines.append(" " * (widths[0] + widths[1] + 4) + "fix: " + fixes[index])
    lines.append("")
    lesson_width = max(len(lesson["lesson"]) for lesson in report["lessons"])
    for lesson in report["lessons"]:
        state = "ready" if lesson["ready"] else "needs " + ", ".join(lesson["missing"])
        lines.append(f"lesson  {lesson['lesson'].ljust(lesson_width)}  {state}")
    lines.append("")
    for name, choice in report["engines"].items():
        lines.append(f"engine  {name.ljust(15)} {choice['engine']:4}  {choice['reason']}")
    if report["probe_cache"]:
        shown = report["probe_cache"].replace(os.path.expanduser("~"), "~", 1)
        lines.append(f"--engine auto uses these answers (saved in {shown} for this TensorFlow/Keras).")
    problems, bugs = report["problems"], report["upstream_bugs"]
    upstream = (f"{bugs} upstream bug{'s' * (bugs != 1)} worked around by the engines above"
                if report["probe_cache"] else "upstream bugs not probed (--no-probes)")
    lines.append(f"{problems} problem{'s' * (problems != 1)} on this machine; {upstream}; "
                 f"checks took {report['seconds']} s.")
    return "\n".join(lines)
