"""Tests for scripts/test_debian13.sh that need no root: without root it skips, or fails under CI."""

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _run_without_root(**environment):
    """Run the platform test as an unprivileged user (setpriv drops root where the tests run as root)."""
    command = ["bash", "scripts/test_debian13.sh"]
    if os.geteuid() == 0:
        command = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *command]
    env = dict(os.environ, **environment)
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("ci, status", [("", 0), ("true", 1)])
def test_without_root_it_skips_or_fails_under_ci(ci, status):
    done = _run_without_root(CI=ci)
    assert done.returncode == status, done.stderr
    reason = "it needs root (debootstrap, chroot, mount); run it with sudo"
    if status:
        assert done.stderr.strip() == f"kerasdist: error: {reason}"
    else:
        assert done.stdout.strip() == f"Skipped the Debian 13 platform test: {reason}"
