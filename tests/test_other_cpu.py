"""The lessons' checked outputs hold on a CPU with other instruction sets than the one that executed them.

nbval compares the cells marked ``# NBVAL_CHECK_OUTPUT`` with their committed outputs; those must print
nothing of the machine (CPU model or instruction sets, cores, memory, host, timings). Every lesson's
checked cells are read here for code that asks the machine; and the lessons whose checked cells print
figures of a training run (03, 06) or which read the CPU's instruction sets (08) run again under nbval
as on another CPU: oneDNN's and XLA's kernels limited to an older instruction set than this CPU's, and
(as root, in a mount namespace of their own) a /proc/cpuinfo whose bfloat16 instructions differ.
"""

import os
import re
import shutil

import pytest

from helpers import run_pytest
from test_notebooks import NOTEBOOKS, all_notebooks, ids, load, source

# Code that asks the machine what it is, in Python or R.
ASKS_THE_MACHINE = re.compile(
    r"cpu_bfloat16_instructions|/proc/cpuinfo|cpu_count|detectCores|psutil|virtual_memory|platform\.|"
    r"gethostname|Sys\.info|nproc|list_physical_devices|perf_counter|Sys\.time|time\.time|samples_per_s")
# Code that formats a weights digest into the output: its bits depend on the CPU's kernels.
FORMATS_A_DIGEST = re.compile(r"sha256 (\{|%s)")
RUN_AGAIN = [NOTEBOOKS / name for name in ("03_convergence.ipynb", "06_strategy_map.ipynb", "08_speed.ipynb")]


def checked_cells(notebook):
    """The sources of the cells nbval compares (the marker is their first line, or the line after %%R)."""
    cells = [source(cell) for cell in load(notebook)["cells"] if cell["cell_type"] == "code"]
    return [cell for cell in cells if "# NBVAL_CHECK_OUTPUT" in cell.splitlines()[:2]]


@pytest.mark.parametrize("notebook", all_notebooks(), ids=ids(all_notebooks()))
def test_no_checked_cell_asks_the_machine(notebook):
    asking = [cell.split("\n")[0:3] for cell in checked_cells(notebook) if ASKS_THE_MACHINE.search(cell)]
    assert not asking, f"checked cells that print something of this machine: {asking}"


@pytest.mark.parametrize("notebook", all_notebooks(), ids=ids(all_notebooks()))
def test_no_checked_cell_prints_a_weights_digest(notebook):
    printing = [cell.split("\n")[0:3] for cell in checked_cells(notebook) if FORMATS_A_DIGEST.search(cell)]
    assert not printing, f"checked cells that print a weights digest (it differs between CPUs): {printing}"


def other_cpu():
    """(environment, cpuinfo text) of a CPU that differs from this one: an older vector instruction set for
    oneDNN and XLA, and the bfloat16 instructions this one lacks (or none, where it has them).

    oneDNN is limited to AVX-512 without its bfloat16 instructions (AVX512_CORE) on an AVX-512 CPU, not
    to AVX2: TensorFlow gives bfloat16 matrix products to oneDNN on any AVX-512 CPU, and oneDNN limited
    to AVX2 has no bfloat16 inner product there (the process aborts: "could not create a primitive
    descriptor for the inner product forward propagation primitive"), which no real CPU would do.
    """
    with open("/proc/cpuinfo") as stream:
        cpuinfo = stream.read()
    flags = set(re.search(r"^flags\s*:(.*)$", cpuinfo, re.M).group(1).split())
    avx512 = "avx512f" in flags
    older_for_onednn, older_for_xla = ("AVX512_CORE", "AVX2") if avx512 else ("AVX", "AVX")
    bf16 = {flag for flag in flags if flag.endswith("bf16")}
    other_flags = (flags - bf16) if bf16 else flags | {"avx512_bf16", "amx_bf16"}
    text = re.sub(r"^flags\s*:.*$", "flags\t\t: " + " ".join(sorted(other_flags)), cpuinfo, flags=re.M)
    return {"ONEDNN_MAX_CPU_ISA": older_for_onednn, "XLA_FLAGS": f"--xla_cpu_max_isa={older_for_xla}"}, text


@pytest.mark.slow  # in its lesson's xdist group (conftest.py: a test parametrized by a lesson's path)
@pytest.mark.parametrize("lesson", RUN_AGAIN, ids=ids(RUN_AGAIN))
def test_checked_outputs_hold_on_a_cpu_with_other_instruction_sets(lesson, tmp_path):
    environment, cpuinfo = other_cpu()
    prefix = ()
    if os.geteuid() == 0 and shutil.which("unshare"):
        fake = tmp_path / "cpuinfo"
        fake.write_text(cpuinfo)
        prefix = ("unshare", "--mount", "--propagation", "private", "sh", "-c",
                  f'mount --bind {fake} /proc/cpuinfo && exec "$@"', "other-cpu")
    run = run_pytest("--nbval-lax", "--nbval-current-env", "--nbval-cell-timeout=900", str(lesson),
                     prefix=prefix, environment=environment, timeout=1800)
    assert run.returncode == 0, run.stdout[-4000:]
    assert " passed" in run.stdout
