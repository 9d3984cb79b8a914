#!/usr/bin/env bash
# Run the tests in one pytest run over several processes (pytest-xdist): 3 for everything, 2 for check.
#
#   bash scripts/test.sh           everything (make test, CI): core, CLI, the R package, every lesson
#                                  executed by nbval, real Slurm, the browser
#   bash scripts/test.sh check     the quick tier (make check): the tests not marked slow; no lesson
#                                  is executed, no Slurm started, nothing trains in another process
#   bash scripts/test.sh [check] PYTEST-ARGS...   e.g. -k resume, or -n 0 to run in this process
#
# Tests that must run one after another in one process share an xdist_group ("lesson-NN": lesson NN's
# cells and its other executions; "training": training in other processes; one group for each long module
# fixture), and conftest.py queues the groups first, the quick tier last (docs/reference/tests.md).
# With CI=true a skip fails the run unless tests/conftest.py allows its reason (keras3, a GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
tier=full
if [ "${1:-}" = check ]; then
    tier=check
    shift
fi
# Both tiers start with ruff (its rules are in pyproject.toml); the docstring examples of the package and
# of the tests' helpers run in the pytest run, among the quick tests (those that need TensorFlow or a
# trained model are marked +SKIP).
.venv/bin/ruff check kerasdist tests benchmarks scripts
if [ "$tier" = check ]; then
    exec .venv/bin/python -m pytest -n 2 --dist loadgroup --no-loadscope-reorder --doctest-modules -m "not slow" \
        tests kerasdist "$@"
fi
# Every lesson cell is bounded: a cell (or a dead kernel) that takes over 15 minutes fails, never hangs.
# The run ends with its 25 slowest tests, so that the suite's budget (docs/reference/tests.md) is seen.
exec .venv/bin/python -m pytest -n 3 --dist loadgroup --no-loadscope-reorder --nbval-lax --nbval-current-env --nbval-cell-timeout=900 \
    --doctest-modules --durations=25 tests notebooks kerasdist "$@"
