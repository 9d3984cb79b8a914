"""Run the probes of the upstream Keras bugs kerasdist works around, each in its own bounded process.

Each probe trains a 4-input model for a few steps on the CPU, in a process
forked from a host process that imported TensorFlow once
(``kerasdist/doctor/probe_host.py``), so a crash or hang cannot take the
caller down; it answers whether the bug is present. ``kerasdist doctor``
saves the answers with ``kerasdist.engines.choice.save_answers``.
"""

import json
import os
import subprocess
import sys

from kerasdist.engines.choice import PROBES

HOST_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "probe_host.py")


def run_probes(timeout_s=60, commands=None):
    """Run every probe; return probe name -> answer.

    The real probes share one host process (this file run as a script) that
    imports TensorFlow once and forks a fresh process for each probe (two for
    multi_worker) before TensorFlow starts its runtime: each probe still runs
    alone, and a crash or hang loses only its own answer. A stand-in command
    runs in its own process instead.

    Args:
        timeout_s: seconds a probe may take before it is killed and reported hung.
        commands: probe name -> argv to run instead of the real probe (stand-ins for tests);
            a stand-in prints ``{"bug_present": bool, "detail": str}`` as its last line.

    Returns:
        ``{name: {"bug_present": bool, "detail": str, "failed": bool}}``; ``failed``
        is True when the probe crashed, hung or gave no answer (then
        ``bug_present`` is True: do not trust ``fit`` there).

    Example:
        >>> run_probes()["multi_worker_fit"]["bug_present"]  # doctest: +SKIP
        True
    """
    commands = commands or {}
    real = [probe.name for probe in PROBES if probe.name not in commands]
    answers = {name: _run(command, [name], timeout_s)[name] for name, command in commands.items()}
    if real:
        # The host's own start (importing TensorFlow) gets the same allowance as the probes.
        host = [sys.executable, "-I", HOST_SCRIPT, str(timeout_s), *real]
        answers.update(_run(host, real, 2 * timeout_s))
    return answers


def _run(command, names, timeout_s):
    """Run ``command`` in its own process group, bounded; parse one answer per name from its stdout."""
    environment = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=environment, start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=timeout_s)
        why = None
    except subprocess.TimeoutExpired:
        stdout, stderr, why = "", "", f"probe hung: killed after {timeout_s:g} s"
    finally:
        try:
            os.killpg(process.pid, 9)  # the probe and every worker it forked
        except (ProcessLookupError, PermissionError):
            pass
        process.wait()
    found = {}
    for line in stdout.splitlines():
        try:
            answer = json.loads(line)
            found[answer.get("probe", names[0])] = answer
        except (ValueError, AttributeError):
            continue
    last = (stderr.strip().splitlines() or ["no output"])[-1][:160]
    answers = {}
    for name in names:
        answer = found.get(name, {})
        if isinstance(answer.get("bug_present"), bool) and "detail" in answer:
            answers[name] = {"bug_present": answer["bug_present"], "detail": str(answer["detail"]),
                             "failed": False}
        else:
            detail = why or answer.get("failure") or f"probe crashed (exit {process.returncode}): {last}"
            answers[name] = {"bug_present": True, "detail": detail, "failed": True}
    return answers
