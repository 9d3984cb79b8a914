"""A bounded child process that reads one JSON request on stdin and answers with one JSON line.

Example:
    >>> import sys
    >>> doubler = "import json, sys; print(json.dumps(json.load(sys.stdin) * 2))"
    >>> run_json_child([sys.executable, "-c", doubler], 21, "doubling", timeout_s=60)
    42
"""

import json
import subprocess

from kerasdist.errors import KerasdistError


def run_json_child(command, request, what, timeout_s, environment=None,
                   on_timeout="try fewer or smaller sizes"):
    """Run ``command`` with ``request`` as JSON on stdin and return its last stdout line, parsed.

    Raises:
        KerasdistError: one line, "``what`` took over ``timeout_s`` s; ``on_timeout``" when it runs too
            long (it is killed), or "``what`` failed: <its last stderr line>" when it exits non-zero.
    """
    try:
        done = subprocess.run(command, input=json.dumps(request), capture_output=True, text=True,
                              timeout=timeout_s, env=environment)
    except subprocess.TimeoutExpired:
        raise KerasdistError(f"{what} took over {timeout_s:g} s; {on_timeout}") from None
    if done.returncode:
        last = (done.stderr.strip().splitlines() or ["no error output"])[-1]
        raise KerasdistError(f"{what} failed: {last}")
    return json.loads(done.stdout.strip().splitlines()[-1])
