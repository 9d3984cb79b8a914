#!/usr/bin/env bash
# Run every test: pytest (core, CLI, R bridge) and nbval (lessons) in one run, then testthat.
set -euo pipefail
cd "$(dirname "$0")/.."
# Every lesson cell is bounded: a cell (or a dead kernel) that takes over 15 minutes fails, never hangs.
.venv/bin/python -m pytest --nbval-lax --nbval-current-env --nbval-cell-timeout=900 tests notebooks "$@"
